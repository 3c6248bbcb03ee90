#!/usr/bin/env bash
# The GPU machine's whole run, from the repository root of a checkout that holds .gpu/
# (the bundle of ../shared/gpu-kit/make_bundle.sh and .gpu/extras of
# scripts/gpu_extras.sh; docs/gpus.md gives the `run` calls that carry them):
#   1. unpack the bundle into /tmp/site (.gpu/unpack.sh);
#   2. plain `pytest -m gpu -rP` (this checkout's dalipipe, not installed: pytest's
#      `pythonpath` setting), each test's prints written to the log as they come
#      (--capture=tee-sys); at 150 s a SIGINT stops it (pytest still prints its
#      summary), and a SIGKILL 10 s later. Pytest runs the files in the order named:
#      GPU_TESTS_FIRST (the newest and riskiest), the other test files, and
#      test_gpu.py's many cases last, so that the limit cuts those;
#   3. benchmarks/gpu_bench.py, which writes its results as each section ends; at
#      300 s a SIGTERM stops it (it kills its measurement processes and writes the
#      summary of what it measured), and a SIGKILL 20 s later.
# Logs and results go to $OUT (the run's folder that comes back), or
# benchmarks/results/gpu without it, as they are written: a step stopped at its limit,
# or the whole run stopped, leaves there what it had printed and written. At most
# 8.5 minutes by the limits (unpacking about 0.5, tests 2.7, gpu_bench 5.3; gpu_bench's
# budgets end it in about 4.5); not yet timed on an H200.
# PY3 and PYTEST name the interpreter and pytest's console script (the rehearsal's);
# PYTEST_LIMIT and BENCH_LIMIT change the two time limits (a rehearsal of a step
# stopped at its limit).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results/gpu}
PY3=${PY3:-python3}
PYTEST=${PYTEST:-pytest}
PYTEST_LIMIT=${PYTEST_LIMIT:-150}
BENCH_LIMIT=${BENCH_LIMIT:-300}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_run.log") 2>&1
started=$SECONDS
say() { echo "[gpu_run $((SECONDS - started)) s] $*"; }
# What a step's exit status says when its time limit ended it.
stopped() {
    case $1 in
        124) echo " (stopped at its time limit of $2 s)" ;;
        137) echo " (killed: it outlived its time limit of $2 s by the grace)" ;;
    esac
}

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
GPU_TESTS_FIRST=(tests/test_cache.py tests/test_masks.py tests/test_resume.py
                 tests/test_boxes.py tests/test_passes_converter.py)
GPU_TESTS_LAST=tests/test_gpu.py
gpu_tests=("${GPU_TESTS_FIRST[@]}")
for file in tests/test_*.py; do
    case " ${GPU_TESTS_FIRST[*]} $GPU_TESTS_LAST " in
        *" $file "*) ;;
        *) gpu_tests+=("$file") ;;
    esac
done
gpu_tests+=("$GPU_TESTS_LAST")
timeout -s INT -k 10 "$PYTEST_LIMIT" "${run_pytest[@]}" -m gpu -rP -v --capture=tee-sys \
    -p no:cacheprovider "${gpu_tests[@]}" > "$OUT/pytest_gpu.log" 2>&1
tests=$?
tail -n 25 "$OUT/pytest_gpu.log"
say "pytest exit status $tests$(stopped "$tests" "$PYTEST_LIMIT"): $OUT/pytest_gpu.log"

say "gpu_bench"
timeout -k 20 "$BENCH_LIMIT" "$PY3" benchmarks/gpu_bench.py --out "$OUT/bench" \
    > "$OUT/gpu_bench.log" 2>&1
bench=$?
tail -n 60 "$OUT/gpu_bench.log"
say "gpu_bench exit status $bench$(stopped "$bench" "$BENCH_LIMIT"):" \
    "$OUT/gpu_bench.log, $OUT/bench/"
on_gpu=$(nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader \
         2> /dev/null)
say "processes on the GPU now: ${on_gpu:-none}"
say "done: pytest exit status $tests, gpu_bench exit status $bench"
[ "$tests" = 0 ] && [ "$bench" = 0 ]
