"""benchmarks/host_cost.py: its quick mode runs on a handful of images, in every format,
and writes its JSON: µs per sample against the plain DALI pipeline, dalipipe's inputs
alone, and the epoch starts (no figure is checked: the machine is shared)."""

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
        for feature in ("classification", "boxes"):
            result = run["features"][feature]
            assert result["samples"] == 8 and result["us"] > 0, (name, result)
            assert result["host_us"] == pytest.approx(result["us"] - run["plain_us"], abs=0.02)
            assert result["budget_us"] == (10 if feature == "classification" else 20)
        assert run["features"]["boxes"]["inputs_us"] > 0
    starts = report["epoch_start"]
    assert starts["samples"] == 2000
    assert {"classification", "boxes", "boxes_recipe"} <= set(starts)
    assert report["machine"]["cores"] >= 1 and "load_average" in report
    assert "epoch start, 2000 samples" in done.stdout
