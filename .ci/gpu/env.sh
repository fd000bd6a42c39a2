# There (sourced by suite.sh and try.sh): PyCUDA from .gpu, the notebook
# runner from .whl, the helper package from code/, and the CUDA toolkit.
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
# The image sets PYTHONDONTWRITEBYTECODE; with it every listing process
# compiles NumPy again (see cudabook verify). Keep compiled Python instead.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX="${PYTHONPYCACHEPREFIX:-/tmp/cudabook-pycache}"
site=/tmp/cudabook-site
if [ -d .whl ] && [ ! -f "$site/.installed" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" .whl/*.whl && touch "$site/.installed"
fi
export PYTHONPATH="$PWD/code:$site${PYTHONPATH:+:$PYTHONPATH}"
export OUT="${OUT:-/tmp/cudabook-out}"; mkdir -p "$OUT"
