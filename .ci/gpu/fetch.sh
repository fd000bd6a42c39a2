#!/usr/bin/env bash
# Here: gather what the GPU machine needs and cannot download (see README.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -d ../shared/gpu ] || { echo "fetch.sh needs ../shared/gpu (the PyCUDA wheels and gpu-env.sh built for the project's GPU machine; maintainers have it)" >&2; exit 1; }
exclude=$(git rev-parse --git-path info/exclude)     # .git may be a file (a worktree)
mkdir -p "$(dirname "$exclude")"
for d in /.gpu/ /.whl/; do grep -qx "$d" "$exclude" 2>/dev/null || echo "$d" >> "$exclude"; done
rm -rf .gpu
cp -r ../shared/gpu .gpu
chmod -R u+w .gpu
mkdir -p .whl
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_34_x86_64 --platform manylinux_2_31_x86_64 --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  -d .whl "nbclient>=0.10" "ipykernel>=6.29" nbformat 2> >(grep -v "is ignored" >&2)
# (pip's own exit status stands: only its warnings about unreachable local
# index folders are filtered out of stderr)
# Already in that machine's image (see the device notes); carrying a second
# copy could shadow the version its other packages were built against.
for p in attrs packaging psutil pygments python_dateutil typing_extensions; do rm -f .whl/"$p"-*.whl; done
du -sh .gpu .whl
