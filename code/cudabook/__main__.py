"""`python -m cudabook ...`: the book's command line (see book_cli.py)."""

import sys

from .book_cli import main

sys.exit(main())
