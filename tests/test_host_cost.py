"""benchmarks/host_cost.py: its quick mode runs on a handful of images, in every format,
and writes its JSON: µs per sample of each dataset against its own DALI graph run bare
(and in DALI's TensorFlow dataset, for "tf"), dalipipe's inputs alone, and the epoch
starts (no figure is checked: the machine is shared)."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow  # about 50 s: three processes, TensorFlow's among them
def test_quick_mode_measures_every_format_and_writes_its_json(tmp_path):
    out = tmp_path / "host_cost.json"
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "host_cost.py"), "--quick",
         "--images", "8", "--batch-size", "4", "--epochs", "1", "--epoch-samples", "2000",
         "--features", "classification,boxes", "--out", str(out)],
        capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert set(report["formats"]) == {"tf", "pydataset", "grain"}
    for name, run in report["formats"].items():
        assert run["plain_us"] > 0, name
        reference = "plugin_" if name == "tf" else "bare_"
        for feature in ("classification", "boxes"):
            result = run["features"][feature]
            assert result["samples"] == 8, (name, result)
            assert result["us"] > 0 and result[reference + "us"] > 0, (name, result)
            assert result["cpu_us"] >= result["python_us"] > 0, (name, result)
            assert result[reference + "first_ms"] > 0, (name, result)
            # One timed round: its difference is the median's.
            assert result["host_python_us"] == pytest.approx(
                result["python_us"] - result[reference + "python_us"], abs=0.02)
            assert result["within_budget"] == (result["host_python_us"] <= result["budget_us"])
            assert result["budget_us"] == (10 if feature == "classification" else 20)
        assert ("plugin_own_python_us" in run["features"]["boxes"]) == (name == "tf")
        assert run["features"]["boxes"]["inputs_us"] > 0
    starts = report["epoch_start"]
    assert starts["samples"] == 2000
    assert {"classification", "boxes", "boxes_recipe"} <= set(starts)
    assert report["machine"]["cores"] >= 1 and "load_average" in report
    assert "epoch start, 2000 samples" in done.stdout
