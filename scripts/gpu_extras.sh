#!/usr/bin/env bash
# psutil and nvidia-ml-py for the offline GPU machine (CPython 3.12, manylinux x86_64,
# no package index), into .gpu/extras/: the benchmarks read CPU time and memory with
# psutil, and the GPU's name, driver and memory in use with nvidia-ml-py (NVML). Run it
# here, where pip reaches the index; the GPU run carries .gpu/ and sets
# PYTHONPATH=/tmp/site:.gpu/extras (docs/gpus.md, scripts/gpu_run.sh). PYVER=3.11 builds
# them for a local Python 3.11 instead (the rehearsal).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
PYVER=${PYVER:-3.12}
target=.gpu/extras
rm -rf "$target"
mkdir -p .gpu
"$PYTHON" -m pip install -q --no-compile --target "$target" --only-binary=:all: \
    --python-version "$PYVER" --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    "psutil>=5.9" "nvidia-ml-py>=12"
echo "wrote $target: $(ls "$target" | tr '\n' ' ')"
