"""`benchmarks/gpu_bench.py --quick` rehearsed without TensorFlow, pandas, scikit-image,
scikit-learn, matplotlib and tqdm, as on the GPU machine; its GPU sections skip here."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from dalipipe.bench import harness
from dalipipe.bench.loaders import unavailable
from dalipipe.devices import dali_gpu_count
from dalipipe.utils import child_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCKED = ("tensorflow", "pandas", "sklearn", "skimage", "matplotlib", "tqdm")


@pytest.mark.slow
def test_gpu_bench_runs_without_tensorflow_and_records_what_it_skipped(tmp_path):
    # Every interpreter started with this PYTHONPATH, the harness's tasks too, runs
    # sitecustomize first: the blocked packages cannot be imported there.
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import sys\n" + "".join(f"sys.modules[{name!r}] = None\n" for name in BLOCKED))
    env = child_env()
    env["PYTHONPATH"] = os.pathsep.join([str(site), env["PYTHONPATH"]])
    out = tmp_path / "out"
    completed = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "gpu_bench.py"), "--quick",
         "--num-images", "20", "--out", str(out), "--data", str(tmp_path / "data")],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert {"results.json", "results.md"} <= set(os.listdir(out))
    report = json.loads((out / "results.json").read_text())
    table = (out / "results.md").read_text()

    machine = report["machine"]
    assert machine["cpu"] == harness.cpu_model() and machine["cores"] >= 1
    assert f"Machine: {machine['cpu']}, {machine['cores']} cores, GPU: {machine['gpu']}" in table
    # No photographs without scikit-image and scikit-learn: synthetic pictures.
    assert report["dataset"]["images"] == 20
    assert all(name.startswith("synthetic_") for name in report["dataset"]["classes"])

    results = {(r["loader"], r["workload"]): r for r in report["results"]}
    for workload in ("train", "eval"):
        cpu = results[("dalipipe_native_cpu", workload)]
        assert cpu["images"] == 20 and cpu["images_per_s"] > 0, cpu
        for loader in ("dalipipe_native_gpu", "dalipipe_native_gpu_on_device",
                       "torchvision_gpu", "torch_dataloader"):
            reason = unavailable(loader)
            if reason:
                assert results[(loader, workload)]["skipped"] == reason
                assert f"| {loader} | skipped: {reason} |" in table
    assert results[("dali_decode_only_cpu", "decode")]["images_per_s"] > 0
    if dali_gpu_count() == 0:
        assert results[("dali_decode_only_gpu", "decode")]["skipped"] == "DALI sees no CUDA GPU"
    # Keras's fit on the torch backend, fed by make_dali_dataset and from memory.
    fit = report["keras_fit"]
    if importlib.util.find_spec("torch") is None:
        assert fit == {"skipped": "torch is not installed"}
    else:
        assert fit["backend"] == "torch" and fit["model"] == "small", fit
        assert fit["images_per_s_dalipipe"] > 0 and fit["images_per_s_in_memory"] > 0
        assert fit["input_efficiency"] == pytest.approx(
            fit["images_per_s_dalipipe"] / fit["images_per_s_in_memory"])
        assert "| make_dali_dataset |" in table and "Input efficiency:" in table
