"""The GPU machine's run, rehearsed without the bundle: plain `pytest -m gpu` (the
`pytest` console script, not `python -m pytest`) from the repository root of a
checkout that is not installed, where only the GPU machine's packages can be
imported (`test_gpu_bench.gpu_machine_env`; `test_gpu_bench.py` runs
`gpu_bench.py --quick` in the same environment). It collects the `gpu` tests, and
skips them where DALI sees no GPU. Also the script of that run and its `run` calls
in docs/gpus.md.
"""

import os
import re
import subprocess
import sys

import pytest

from dalipipe.devices import dali_gpu_count
from test_gpu_bench import ROOT, gpu_machine_env

PYTEST = os.path.join(os.path.dirname(sys.executable), "pytest")


def plain_pytest(tmp_path, *args):
    """`pytest -m gpu ARGS` run from the repository root, with neither it nor an
    installed dalipipe on `sys.path` (the console script's `sys.path[0]` is its own
    folder, and `PYTHONPATH` holds only the environment's folder)."""
    # The GPU machine's pytest has no plugins: this one's (pytest-xdist) stay unloaded.
    env = gpu_machine_env(tmp_path / "site", KERAS_BACKEND="torch",
                          DALIPIPE_CACHE_DIR=str(tmp_path / "cache"),
                          PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    return subprocess.run([PYTEST, "-m", "gpu", "-q", "-p", "no:cacheprovider", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_plain_pytest_collects_the_gpu_tests_without_installing_dalipipe(tmp_path):
    assert os.path.exists(PYTEST), "pytest's console script is not installed beside Python"
    # Where DALI sees a GPU this suite runs the gpu tests itself: there they are only
    # collected; elsewhere they run (and skip), each named on its line (`-vv`, past the `-q`).
    gpu = dali_gpu_count() > 0
    done = plain_pytest(tmp_path, *(["--collect-only"] if gpu else ["-rs", "-vv"]))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    collected = re.findall(r"^tests/(test_\w+)\.py::", done.stdout, re.MULTILINE)
    # test_gpu.py, and the gpu-marked tests of other modules (test_resume.py's).
    assert collected.count("test_gpu") >= 25 and "test_resume" in collected, done.stdout[-2000:]
    if not gpu:
        skipped = re.search(r"(\d+) skipped, \d+ deselected", done.stdout)
        # The gpu tests, and the modules that skip themselves where a package is absent.
        assert skipped and int(skipped.group(1)) >= len(collected), done.stdout[-2000:]
        assert re.findall(r"^tests/\S+ (\w+)", done.stdout, re.MULTILINE) == \
            ["SKIPPED"] * len(collected), done.stdout[-2000:]
        assert "error" not in done.stdout.lower(), done.stdout[-2000:]
    # pytest's `pythonpath = ["."]` is what finds this checkout's dalipipe: without it
    # conftest.py cannot import it (no installed dalipipe is visible there).
    without = plain_pytest(tmp_path, "--collect-only", "-o", "pythonpath=")
    assert without.returncode != 0
    assert "No module named 'dalipipe'" in without.stdout + without.stderr


def test_the_gpu_run_script_and_its_run_calls():
    script = os.path.join(ROOT, "scripts", "gpu_run.sh")
    subprocess.run(["bash", "-n", script], check=True)
    assert os.access(script, os.X_OK)
    with open(os.path.join(ROOT, "docs", "gpus.md"), encoding="utf-8") as f:
        docs = f.read()
    calls = re.findall(r"^run\(command=(.*), carry=\[(.*)\], timeout_s=(\d+)\)$", docs,
                       re.MULTILINE)
    assert len(calls) == 3, calls
    carried = [re.findall(r'"([^"]+)"', carry) for _, carry, _ in calls]
    # One part of the bundle per call (58 MiB of the 64 MiB a call carries); the
    # last carries the unpacker and the extras too, and runs the script.
    assert [c[0] for c in carried] == [f".gpu/site.tar.xz.part-0{i}" for i in range(3)]
    assert carried[-1][1:] == [".gpu/unpack.sh", ".gpu/extras"] and \
        all(len(c) == 1 for c in carried[:-1])
    assert calls[-1][0] == '"bash scripts/gpu_run.sh"' and int(calls[-1][2]) <= 600
    # Its steps' time limits and kill graces (pytest's, gpu_bench's), with a minute
    # to unpack the bundle, end within that call's limit: the call never cuts the run.
    with open(script, encoding="utf-8") as f:
        text = f.read()
    defaults = dict(re.findall(r"^(\w+_LIMIT)=\$\{\1:-(\d+)\}$", text, re.MULTILINE))
    limits = re.findall(r'^timeout (?:-s \w+ )?-k (\d+) "\$(\w+_LIMIT)" ', text, re.MULTILINE)
    assert len(limits) == 2 and {name for _, name in limits} == set(defaults), limits
    worst = sum(int(grace) + int(defaults[name]) for grace, name in limits)
    assert worst + 60 <= int(calls[-1][2]), worst


def test_the_gpu_run_runs_the_newest_gpu_tests_first_and_test_gpu_last():
    """At 150 s the run's pytest is stopped: the files go in the order the script
    names them, the newest and riskiest GPU tests first, test_gpu.py's many cases
    last, every test file once (the script's own lines run here)."""
    with open(os.path.join(ROOT, "scripts", "gpu_run.sh"), encoding="utf-8") as f:
        text = f.read()
    start = text.index("GPU_TESTS_FIRST=(")
    end = text.index('gpu_tests+=("$GPU_TESTS_LAST")\n') + len('gpu_tests+=("$GPU_TESTS_LAST")\n')
    assert '-p no:cacheprovider "${gpu_tests[@]}"' in text[end:]
    listed = subprocess.run(["bash", "-c", text[start:end] + 'printf "%s\\n" "${gpu_tests[@]}"'],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    first = ["tests/test_cache.py", "tests/test_masks.py", "tests/test_resume.py",
             "tests/test_boxes.py", "tests/test_passes_converter.py"]
    assert listed[:len(first)] == first
    assert listed[-1] == "tests/test_gpu.py"
    files = sorted(f"tests/{name}" for name in os.listdir(os.path.join(ROOT, "tests"))
                   if re.fullmatch(r"test_\w+\.py", name))
    assert sorted(listed) == files
    marked = [f for f in files if re.search(r"^(@|pytestmark = )pytest\.mark\.gpu\b",
                                            open(os.path.join(ROOT, f)).read(), re.MULTILINE)]
    assert "tests/test_masks.py" in marked and "tests/test_gpu.py" in marked
    assert set(marked) - set(first) <= {"tests/test_gpu.py", "tests/test_distributed.py"}
