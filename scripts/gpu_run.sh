#!/usr/bin/env bash
# The GPU machine's whole run, from the repository root of a checkout that holds .gpu/
# (the bundle of ../shared/gpu-kit/make_bundle.sh and .gpu/extras of
# scripts/gpu_extras.sh; docs/gpus.md gives the `run` calls that carry them):
#   1. unpack the bundle into /tmp/site (.gpu/unpack.sh);
#   2. plain `pytest -m gpu -rP` (this checkout's dalipipe, not installed: pytest's
#      `pythonpath` setting);
#   3. benchmarks/gpu_bench.py.
# Logs and results go to $OUT (the run's folder that comes back), or
# benchmarks/results/gpu without it. Sized for 8 minutes on an H200: unpacking about
# 0.5, the tests at most 2.5 (a time limit), gpu_bench at most about 4.5 (its budgets).
# PY3 and PYTEST name the interpreter and pytest's console script (the rehearsal's).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results/gpu}
PY3=${PY3:-python3}
PYTEST=${PYTEST:-pytest}
mkdir -p "$OUT"
started=$SECONDS
say() { echo "[gpu_run $((SECONDS - started)) s] $*"; }

say "unpacking the bundle"
{ nvidia-smi || true; PY3="$PY3" bash .gpu/unpack.sh; } > "$OUT/unpack.log" 2>&1
unpacked=$?
tail -n 8 "$OUT/unpack.log"
[ "$unpacked" = 0 ] || { say "unpacking failed: $OUT/unpack.log"; exit 1; }
export PYTHONPATH="/tmp/site:$PWD/.gpu/extras" KERAS_BACKEND=torch PYTHONUNBUFFERED=1

say "pytest -m gpu"
if command -v "$PYTEST" > /dev/null; then
    run_pytest=("$PYTEST")
else  # not the plain entry point, which the run means to show working
    say "no $PYTEST on PATH: $PY3 -m pytest instead"
    run_pytest=("$PY3" -m pytest)
fi
timeout 150 "${run_pytest[@]}" -m gpu -rP -q -p no:cacheprovider > "$OUT/pytest_gpu.log" 2>&1
tests=$?
tail -n 25 "$OUT/pytest_gpu.log"

say "gpu_bench"
timeout 300 "$PY3" benchmarks/gpu_bench.py --out "$OUT/bench" > "$OUT/gpu_bench.log" 2>&1
bench=$?
tail -n 60 "$OUT/gpu_bench.log"
say "done: pytest exit status $tests, gpu_bench exit status $bench"
[ "$tests" = 0 ] && [ "$bench" = 0 ]
