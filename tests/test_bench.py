"""`dalipipe bench --quick` on tiny data: every loader runs and reports the right schema.

No timing thresholds: speed is measured by the benchmark itself, never asserted here.
"""

import json
import os

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # a quick benchmark run of every loader

pytest.importorskip("tensorflow")

from dalipipe.bench import harness, loaders, report  # noqa: E402
from dalipipe.cli import main  # noqa: E402

CPU_LOADERS = [name for name in report.DEFAULT_LOADERS if name != "dalipipe_gpu"]


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    out = root / "out"
    code = main(["bench", "--quick", "--num-images", "20", "--data", str(root / "data"),
                 "--out", str(out)])
    assert code == 0
    with open(out / "results.json") as f:
        return json.load(f), out


def test_every_loader_runs_on_every_workload_it_has(quick_report):
    result, _ = quick_report
    measured = {(r["loader"], r["workload"]): r for r in result["results"]}
    for loader in CPU_LOADERS:
        for workload in loaders.WORKLOADS:
            r = measured[(loader, workload)]
            assert "error" not in r, r
            if workload == "randaugment" and loader not in loaders.RANDAUGMENT_LOADERS:
                assert r["skipped"] == loaders.unsupported(loader, workload) is not None
                continue
            assert r["images"] == 20
            assert r["images_per_s"] > 0 and r["cpu_s_per_1000"] > 0 and r["peak_rss_mb"] > 0
            assert len(r["run_s"]) == result["config"]["runs"]
            if workload == "train":
                assert 0 < r["input_efficiency"]
                assert r["train_images_per_s_in_memory"] > 0
            elif workload == "randaugment":
                assert "mean_abs_error_vs_pil" not in r
            else:
                assert 0 <= r["mean_abs_error_vs_pil"] < 10
    assert measured[("dali_decode_only_cpu", "decode")]["images_per_s"] > 0


def test_dalipipe_eval_output_matches_the_pil_reference(quick_report):
    """Quality, not speed: the fused central crop is within a grey level of PIL."""
    result, _ = quick_report
    (r,) = [r for r in result["results"] if (r["loader"], r["workload"]) == ("dalipipe_cpu", "eval")]
    assert r["mean_abs_error_vs_pil"] < 1.0
    (fast,) = [r for r in result["results"]
               if (r["loader"], r["workload"]) == ("dalipipe_cpu_no_antialias", "eval")]
    assert fast["mean_abs_error_vs_pil"] > r["mean_abs_error_vs_pil"]


def test_report_files_and_machine_info(quick_report):
    result, out = quick_report
    assert {"results.json", "results.md", "chart.png"} <= set(os.listdir(out))
    assert result["machine"]["cores"] >= 1 and result["machine"]["cpu"]
    assert result["dataset"]["images"] == 20 and result["dataset"]["mean_bytes"] > 0
    table = (out / "results.md").read_text()
    for loader in CPU_LOADERS:
        assert f"| {loader} |" in table
    # A quick run says, in its files, that its figures are not for comparing.
    assert result["note"] == report.QUICK_NOTE and "too small to compare" in report.QUICK_NOTE
    assert table.startswith(f"**{report.QUICK_NOTE}**")


def test_bench_reads_a_folder_of_the_users_as_it_is(tmp_path, capsys):
    """Nothing is written into it, its own labels.csv is no sample-data table, and its
    class folders are what is measured."""
    from PIL import Image

    data = tmp_path / "photos"
    for i in range(70):
        folder = data / ("cats" if i % 2 else "dogs")
        folder.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (40 + i, 30), (3 * i, 90, 200)).save(folder / f"{i:03d}.jpg")
    (data / "labels.csv").write_text("filename,animal\n000.jpg,dog\n")
    before = sorted(p.relative_to(data) for p in data.rglob("*"))
    code = main(["bench", "--quick", "--data", str(data), "--out", str(tmp_path / "out"),
                 "--loaders", "dalipipe_cpu", "--workload", "eval"])
    assert code == 0
    assert sorted(p.relative_to(data) for p in data.rglob("*")) == before
    with open(tmp_path / "out" / "results.json") as f:
        result = json.load(f)
    assert result["dataset"]["images"] == 64 and result["dataset"]["classes"] == ["cats", "dogs"]
    (r,) = [r for r in result["results"] if r["loader"] == "dalipipe_cpu"]
    assert r["images"] == 64 and r["images_per_s"] > 0
    printed = capsys.readouterr()
    assert f"benchmarking 64 images of {data} as they are" in printed.err
    assert printed.out.rstrip().endswith(report.QUICK_NOTE)


def test_loaders_yield_normalized_batches_in_file_order(tmp_path):
    from dalipipe import make_sample_dataset, sources

    make_sample_dataset(tmp_path, num_images=6, num_classes=2)
    index = sources.index_source(str(tmp_path))
    reference = harness.pil_reference(index.file_paths)
    for name in CPU_LOADERS:
        kwargs = dict(workload="eval", batch_size=4, threads=1, seed=0)
        if name == "image_dataset_from_directory":
            kwargs["directory"] = str(tmp_path)
        batches = list(loaders.LOADERS[name](index.file_paths, index.labels, **kwargs).epoch())
        images = [harness.to_numpy(b[0]) for b in batches]
        assert [len(b) for b in images] == [4, 2], name
        for batch in images:
            assert batch.shape[1:] == (224, 224, 3) and str(batch.dtype) == "float32"
        pixels = images[0] * loaders._STD + loaders._MEAN
        # In file order: each image is near its own reference, far from the others.
        assert abs(pixels[0] - reference[0]).mean() < 10, name
        assert abs(pixels[0] - reference[0]).mean() < abs(pixels[0] - reference[3]).mean(), name


def test_python_generator_batches_keep_labels_across_chunks(monkeypatch):
    """Chunks are whole batches, and each batch's labels are its images' labels."""
    monkeypatch.setattr(loaders, "pil_load",
                        lambda path, workload, rng: np.full((2, 2, 3), int(path[1:]), np.float32))
    files = [f"f{i}" for i in range(10)]
    loader = loaders.make_python_generator(files, np.arange(10), workload="eval", batch_size=3,
                                           threads=1, seed=0, chunk_size=7)
    batches = list(loader.epoch())
    assert [len(b[1]) for b in batches] == [3, 3, 3, 1]
    for images, batch_labels in batches:
        assert images[:, 0, 0, 0].tolist() == batch_labels.tolist()
