"""`benchmarks/gpu_bench.py --quick` rehearsed where only the GPU machine's packages can
be imported, as on that machine; its GPU sections skip here. Stopped by SIGTERM as
`timeout` stops it, it keeps what it measured, writes its summary and leaves no
process behind; a section that raises is recorded and the next one runs. Also the
harness's GPU measurements that the CPU can run: the decode-only ceilings with dalipipe's decoder
set-up, the sweep's one process per thread count, and the decoder log behind the
count of images decoded on the CPU.

`gpu_machine_env` is the environment of such a child interpreter
(`tests/test_gpu_rehearsal.py` uses it too).
"""

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from dalipipe import sources
from dalipipe.bench import harness
from dalipipe.bench.loaders import unavailable
from dalipipe.devices import dali_gpu_count

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "benchmarks", "gpu_bench.py")
# What the GPU machine's Python imports (top-level names): its own numpy, pytest,
# Pillow, torch and torchvision with what they import; the bundle's DALI,
# nvImageCodec and nvJPEG (under `nvidia`), Keras and what they import
# (`../shared/gpu-kit/make_bundle.sh`); psutil and nvidia-ml-py from .gpu/extras.
GPU_MACHINE_PACKAGES = (
    "numpy", "PIL", "pytest", "_pytest", "pluggy", "iniconfig", "packaging", "py",
    "torch", "torchgen", "functorch", "torchvision", "filelock", "typing_extensions",
    "sympy", "mpmath", "networkx", "jinja2", "markupsafe", "fsspec",
    "nvidia", "astunparse", "gast", "makefun", "nvtx", "libcst", "optree", "six",
    "keras", "absl", "rich", "namex", "h5py", "ml_dtypes", "markdown_it", "mdurl",
    "pygments", "psutil", "pynvml", "_distutils_hack",
)
# Run first by every interpreter started with its folder on PYTHONPATH: a module
# found in site-packages whose top-level name is not listed is not found (import
# raises ModuleNotFoundError, `importlib.util.find_spec` gives None), and no
# installed (editable) dalipipe is found, only a checkout on `sys.path`.
_SITECUSTOMIZE = '''\
import importlib.machinery, os, site, sys

_ALLOWED = set({allowed!r})
_SITE = tuple(os.path.realpath(p) + os.sep for p in site.getsitepackages())


class _GpuMachinePathFinder(importlib.machinery.PathFinder):
    """Python's path finder, blind to what the GPU machine lacks."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        spec = super().find_spec(name, path, target)
        if spec is None or "." in name or name in _ALLOWED:
            return spec
        where = spec.origin if spec.has_location else \\
            next(iter(spec.submodule_search_locations or []), "")
        return None if os.path.realpath(where or "").startswith(_SITE) else spec


sys.meta_path[:] = [
    _GpuMachinePathFinder if f is importlib.machinery.PathFinder else f for f in sys.meta_path
    if not getattr(f, "__module__", "").startswith("__editable__")]
'''


def gpu_machine_env(folder, pythonpath=(), **variables):
    """The environment of a child interpreter that imports only `GPU_MACHINE_PACKAGES`
    from site-packages (the standard library, and anything on `pythonpath`, stay).

    Writes the `sitecustomize.py` that enforces it into `folder`; `PYTHONPATH` is
    that folder and then `pythonpath`, without this checkout: a child finds it only
    as the GPU machine does (the current directory, pytest's `pythonpath` setting,
    or `gpu_bench.py`'s own folder). Its own children inherit the rule.
    """
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "sitecustomize.py"), "w") as f:
        f.write(_SITECUSTOMIZE.format(allowed=sorted(GPU_MACHINE_PACKAGES)))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join([str(folder), *map(str, pythonpath)])
    return {**env, **variables}


@pytest.mark.slow  # fresh interpreters
def test_the_gpu_machine_env_blocks_what_that_machine_lacks(tmp_path):
    code = ("import importlib.util, sys\n"
            "for name in ('tensorflow', 'pandas', 'sklearn', 'skimage', 'matplotlib', "
            "'tqdm', 'jax', 'dalipipe'):\n"
            "    try:\n        __import__(name)\n    except ImportError:\n        continue\n"
            "    sys.exit(f'{name} imported')\n"
            "import numpy, PIL, pytest, nvidia.dali, keras, psutil, pynvml, json, sqlite3\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120,
                          env=gpu_machine_env(tmp_path / "site", KERAS_BACKEND="torch"))
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.slow
def test_gpu_bench_runs_without_tensorflow_and_records_what_it_skipped(tmp_path):
    out = tmp_path / "out"
    completed = subprocess.run(
        [sys.executable, BENCH, "--quick",
         "--num-images", "20", "--out", str(out), "--data", str(tmp_path / "data")],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env=gpu_machine_env(tmp_path / "site"),
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert {"results.json", "results.md"} <= set(os.listdir(out))
    report = json.loads((out / "results.json").read_text())
    table = (out / "results.md").read_text()
    assert report["summary"]["sections"] == dict.fromkeys(
        ("loaders", "crop_setups", "keras_fit", "sweep"), "done")
    assert all(s["seconds"] >= 0 for s in report["sections"].values())

    machine = report["machine"]
    assert machine["cpu"] == harness.cpu_model() and machine["cores"] >= 1
    assert f"Machine: {machine['cpu']}, {machine['cores']} cores, GPU: {machine['gpu']}" in table
    # No photographs without scikit-image and scikit-learn: synthetic pictures.
    assert report["dataset"]["images"] == 20
    assert all(name.startswith("synthetic_") for name in report["dataset"]["classes"])

    # One thread count everywhere, every setting recorded.
    threads = report["settings"]["threads"]
    assert report["config"]["threads"] == report["summary"]["threads"] == threads
    assert {"num_images", "batch_size", "runs", "time_budget", "sweep_budget", "fit_timeout",
            "sweep_threads", "sweep_hw_decoder_loads"} <= set(report["settings"])
    results = {(r["loader"], r["workload"]): r for r in report["results"]}
    for workload in ("train", "eval", "randaugment"):
        cpu = results[("dalipipe_native_cpu", workload)]
        assert cpu["images"] == 20 and cpu["images_per_s"] > 0, cpu
        assert cpu["threads"] == threads and cpu["options"] == {}
        for loader in ("dalipipe_native_gpu", "dalipipe_native_gpu_on_device",
                       "torchvision_gpu", "torch_dataloader"):
            reason = unavailable(loader)
            if reason:
                assert results[(loader, workload)]["skipped"] == reason
                assert f"| {loader} | skipped: {reason} |" in table
    assert results[("dali_decode_only_cpu", "decode")]["images_per_s"] > 0
    gpu_reason = unavailable("dali_decode_only_gpu")
    if dali_gpu_count() == 0:
        assert results[("dali_decode_only_gpu", "decode")]["skipped"] == "DALI sees no CUDA GPU"
    # Both crop set-ups, each with the crop ceiling and the decoders' count.
    setups = [(r["setup"], r["loader"]) for r in report["crop_setups"]]
    assert setups == [(s, name) for s in ("chosen", "forced_full_decode")
                      for name in ("dalipipe_native_gpu_on_device", "dali_crop_decode_only_gpu",
                                   "decoders_used")]
    forced = [r for r in report["crop_setups"] if r["setup"] == "forced_full_decode"]
    assert all(r["env"]["DALIPIPE_ROI_FANCY_UPSAMPLING"] == "0" for r in forced)
    # The sweep: every point of --quick's 1 thread count × 2 loads × 2 workloads.
    points = [(r["workload"], r["threads"], r["options"]["decoder"]["hw_decoder_load"])
              for r in report["sweep"]]
    assert points == [(w, 2, load) for w in ("train", "eval") for load in (0.0, 0.65)]
    if gpu_reason:
        assert all(r["skipped"] == gpu_reason for r in report["sweep"] + report["crop_setups"])
    assert "## Sweep: DALI threads × hw_decoder_load" in table and "## Summary" in table
    # The dense workloads: dalipipe's CPU graph on images with masks and on images with
    # boxes (no TensorFlow needed), the GPU graphs skipped where DALI sees no GPU.
    dense = {(r["loader"], r["workload"]): r for r in report["dense"]}
    cpu = dense[("dalipipe_native_cpu", "segmentation")]
    assert cpu["images"] == 20 and cpu["images_per_s"] > 0, cpu
    assert cpu["mask_shape"] == [16, 160, 160, 1] and set(cpu["mask_ids"]) <= {0, 1, 2, 3}
    boxes = dense[("dalipipe_native_cpu", "detection")]
    assert boxes["images"] == 20 and boxes["images_per_s"] > 0, boxes
    assert boxes["box_shape"] == [16, 100, 4] and boxes["box_dtype"] == "float32"
    assert boxes["boxes_kept"] > 0 and set(boxes["box_labels"]) <= {0, 1, 2}
    assert "box_crop=True" in boxes["settings"] and "image_size=(512, 512)" in boxes["settings"]
    for loader in ("dalipipe_native_gpu", "dalipipe_native_gpu_on_device"):
        for workload in ("segmentation", "detection"):
            if unavailable(loader):
                assert dense[(loader, workload)]["skipped"] == unavailable(loader)
    assert "## Dense workloads" in table and "GPU preprocessing, segmentation" in table
    assert "GPU preprocessing, detection" in table and " kept, labels [" in table
    # Keras's fit on the torch backend, fed by make_dali_dataset and from memory.
    fit = report["keras_fit"]
    if importlib.util.find_spec("torch") is None:
        assert fit == {"skipped": "torch is not installed"}
    else:
        assert fit["backend"] == "torch" and fit["model"] == "small", fit
        assert fit["num_threads"] == threads
        assert fit["images_per_s_dalipipe"] > 0 and fit["images_per_s_in_memory"] > 0
        assert fit["input_efficiency"] == pytest.approx(
            fit["images_per_s_dalipipe"] / fit["images_per_s_in_memory"])
        assert report["summary"]["input_efficiency"] == fit["input_efficiency"]
        assert "| make_dali_dataset |" in table and "Input efficiency:" in table


def start_bench(tmp_path, *args):
    """`gpu_bench.py --quick` on 12 images, where only the GPU machine's packages can be
    imported, in a session of its own as under `timeout`; its output goes to
    tmp_path/bench.log. Returns the process and its `--out` folder."""
    out = tmp_path / "out"
    with open(tmp_path / "bench.log", "w") as log:
        bench = subprocess.Popen(
            [sys.executable, BENCH, "--quick", "--num-images", "12", "--out", str(out),
             "--data", str(tmp_path / "data"), *args],
            stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path, start_new_session=True,
            env=gpu_machine_env(tmp_path / "site"))
    return bench, out


def sigterm_while_running(bench, command, ready=lambda: True, limit=600):
    """Once `ready()` holds and `bench` runs a process whose command line holds
    `command`, suspends that process (it can then neither finish nor exit by itself)
    and sends SIGTERM to bench's process group, as `timeout` does.

    Returns:
        That process and every process bench had started then.
    """
    parent = psutil.Process(bench.pid)
    deadline = time.monotonic() + limit  # a hang's guard, not a timing
    while time.monotonic() < deadline:
        assert bench.poll() is None, f"gpu_bench ended (status {bench.returncode}) first"
        for child in parent.children(recursive=True) if ready() else ():
            try:
                if command in " ".join(child.cmdline()):
                    child.suspend()
                    started = parent.children(recursive=True)
                    os.killpg(bench.pid, signal.SIGTERM)
                    return child, started
            except psutil.NoSuchProcess:
                continue  # ended meanwhile: the next one
        time.sleep(0.05)
    pytest.fail(f"gpu_bench ran no {command} within {limit} s")


def stopped_bench(bench, out, started):
    """Waits for `bench` after its SIGTERM: it exits with 143 (128 + SIGTERM), every
    process it had started is gone, and both result files are there. Returns its
    results.json and results.md."""
    assert bench.wait(timeout=300) == 128 + signal.SIGTERM
    _, alive = psutil.wait_procs(started, timeout=60)
    assert alive == [], alive
    return json.loads((out / "results.json").read_text()), (out / "results.md").read_text()


@pytest.mark.slow
def test_sigterm_mid_section_kills_its_process_group_and_keeps_what_was_measured(tmp_path):
    bench, out = start_bench(tmp_path)
    # A measurement of section 1 after its first (the CPU decode ceiling) is on disk.
    first_written = lambda: "config" in json.loads(  # noqa: E731
        (out / "results.json").read_text() if (out / "results.json").exists() else "{}")
    child, started = sigterm_while_running(bench, "dalipipe.bench.harness", first_written)
    # In a session of its own: the SIGTERM sent to gpu_bench's group missed it.
    assert os.getsid(child.pid) != os.getsid(bench.pid)
    report, table = stopped_bench(bench, out, started)
    assert report["sections"]["loaders"]["status"] == "stopped by SIGTERM"
    assert [report["sections"][s]["status"] for s in ("crop_setups", "keras_fit", "sweep")] \
        == ["not started"] * 3
    ceiling = next(r for r in report["results"] if r["loader"] == "dali_decode_only_cpu")
    assert ceiling["images_per_s"] > 0
    assert report["summary"]["sections"]["loaders"] == "stopped by SIGTERM"
    assert "## Summary" in table and "1. loaders stopped by SIGTERM" in table
    assert "Decode-only ceiling (dali_decode_only_cpu)" in table
    assert "SIGTERM: measuring stopped" in (tmp_path / "bench.log").read_text()


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_sigterm_in_a_later_section_leaves_the_earlier_sections_on_disk(tmp_path):
    # Sections 1 and 2 record their measurements as not started (no time budget), and
    # the Keras fit's process (in gpu_bench's process group) is the one stopped.
    bench, out = start_bench(tmp_path, "--time-budget", "0", "--setups-budget", "0")
    _, started = sigterm_while_running(bench, "benchmarks.keras_fit")
    report, table = stopped_bench(bench, out, started)
    assert report["summary"]["sections"] == {"loaders": "done", "crop_setups": "done",
                                             "keras_fit": "stopped by SIGTERM",
                                             "sweep": "not started"}
    assert len(report["results"]) == 17 and len(report["crop_setups"]) == 6
    assert all("skipped" in r for r in report["results"] + report["crop_setups"])
    assert "keras_fit" not in report and "sweep" not in report
    assert "3. Keras fit stopped by SIGTERM" in table and "## Crop set-ups" in table


def test_a_section_that_raises_is_recorded_and_the_next_runs(tmp_path, monkeypatch, capsys):
    from benchmarks import gpu_bench

    def fails(*args, **kwargs):
        raise RuntimeError("no fit here\nnor on this line")

    monkeypatch.setattr(gpu_bench, "keras_fit_section", fails)
    out = tmp_path / "out"
    handler = signal.getsignal(signal.SIGTERM)
    status = gpu_bench.main(["--quick", "--num-images", "8", "--out", str(out),
                             "--data", str(tmp_path / "data"), "--time-budget", "0",
                             "--setups-budget", "0", "--sweep-budget", "0"])
    assert status == 1
    report = json.loads((out / "results.json").read_text())
    assert report["summary"]["sections"] == {"loaders": "done", "crop_setups": "done",
                                             "keras_fit": "failed", "sweep": "done"}
    assert report["sections"]["keras_fit"]["error"] == "RuntimeError: no fit here"
    # The section after it ran: its 4 points, skipped here (no GPU, or no time).
    assert len(report["sweep"]) == 4 and all("skipped" in r for r in report["sweep"])
    assert "3. Keras fit failed after 0 s (RuntimeError: no fit here)" in \
        (out / "results.md").read_text()
    assert "section 3. Keras fit failed: RuntimeError: no fit here" in capsys.readouterr().out
    assert signal.getsignal(signal.SIGTERM) is handler  # put back


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory):
    from dalipipe.sample_data import make_sample_dataset

    root = tmp_path_factory.mktemp("bench_jpegs")
    make_sample_dataset(str(root), num_images=12, num_classes=2)
    index = sources.index_source(str(root))
    return dict(files=index.file_paths, labels=index.labels.tolist(), seed=0, threads=2,
                batch_size=4, runs=1)


@pytest.mark.parametrize("crop", [False, True])
def test_the_decode_ceiling_decodes_as_dalipipe_s_graph(jpegs, crop):
    result = harness.decode_ceiling(jpegs["files"], 4, 2, 1, "cpu", crop=crop)
    assert result["loader"] == ("dali_crop_decode_only_cpu" if crop else "dali_decode_only_cpu")
    assert result["images"] == 12 and result["images_per_s"] > 0 and result["threads"] == 2
    assert result["crop_setup"] == "roi_decode"  # the CPU graph decodes the crop region


def test_the_sweep_measures_each_point_in_one_process(jpegs):
    points = [dict(workload="train", options={"decoder": {"hw_decoder_load": 0.0}}),
              dict(workload="eval", options={"decoder": {"hw_decoder_load": 0.9}})]
    task = dict(kind="sweep", loader="dalipipe_native_cpu", points=points, **jpegs)
    found = harness.run_task_in_subprocess(task, timeout=240)
    assert [(p["workload"], p["options"]) for p in found["points"]] == \
        [(p["workload"], p["options"]) for p in points]
    assert all(p["images"] == 12 and p["images_per_s"] > 0 and p["threads"] == 2
               for p in found["points"])


def test_the_decoder_log_counts_images_decoded_on_the_cpu(jpegs):
    """The count `gpu_bench.py` reports for the GPU graph, here for the CPU graph,
    whose every JPEG nvImageCodec's log names as libjpeg-turbo's."""
    task = dict(kind="decoders", workload="train", loader="dalipipe_native_cpu",
                env={"DALI_NVIMGCODEC_LOG_LEVEL": "5"}, **jpegs)
    found = harness.run_task_in_subprocess(task, timeout=240)
    assert found["loader"] == "decoders_used" and found["images"] == 12, found
    assert found["cpu_decoded"] == 12 and found["decoders"] == {"libjpeg_turbo_decoder": 12}
    assert found["refusals"] == 0
