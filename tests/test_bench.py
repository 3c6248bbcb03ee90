"""`dalipipe bench --quick` on tiny data: every loader runs and reports the right schema;
the Keras loader reads the chosen files through a folder of links; a failure is one line.

No timing thresholds: speed is measured by the benchmark itself, never asserted here.
"""

import io
import json
import os

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # a quick benchmark run of every loader

pytest.importorskip("tensorflow")

from dalipipe.bench import harness, loaders, pil_loaders, report  # noqa: E402
from dalipipe.cli import main  # noqa: E402

CPU_LOADERS = [name for name in report.DEFAULT_LOADERS if name != "dalipipe_gpu"]


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    out = root / "out"
    code = main(["bench", "--quick", "--workload", "all", "--num-images", "20",
                 "--data", str(root / "data"), "--out", str(out)])
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
            assert r["settings"]
            if loader == "image_dataset_from_directory":
                assert r["note"] == loaders.KERAS_NOTES.get(workload)
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
                 "--loaders", "dalipipe_cpu,image_dataset_from_directory"])
    assert code == 0
    assert sorted(p.relative_to(data) for p in data.rglob("*")) == before
    with open(tmp_path / "out" / "results.json") as f:
        result = json.load(f)
    assert result["dataset"]["images"] == 64 and result["dataset"]["classes"] == ["cats", "dogs"]
    # --quick: one workload, each loader once, one timed epoch; Keras's loader reads the
    # 64 chosen files, not the folder's 70.
    assert result["config"]["workloads"] == list(report.QUICK_WORKLOADS) == ["stretch"]
    assert result["config"]["runs"] == 1
    measured = [r for r in result["results"] if r["workload"] != "decode"]
    assert sorted(r["loader"] for r in measured) == ["dalipipe_cpu", "image_dataset_from_directory"]
    for r in measured:
        assert r["workload"] == "stretch" and "error" not in r, r
        assert r["images"] == 64 and r["images_per_s"] > 0 and len(r["run_s"]) == 1
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
    monkeypatch.setattr(pil_loaders, "pil_load",
                        lambda path, workload, rng: np.full((2, 2, 3), int(path[1:]), np.float32))
    files = [f"f{i}" for i in range(10)]
    loader = pil_loaders.make_python_generator(files, np.arange(10), workload="eval",
                                               batch_size=3, threads=1, seed=0, chunk_size=7)
    batches = list(loader.epoch())
    assert [len(b[1]) for b in batches] == [3, 3, 3, 1]
    for images, batch_labels in batches:
        assert images[:, 0, 0, 0].tolist() == batch_labels.tolist()


def test_keras_loader_reads_a_folder_of_links_to_exactly_the_chosen_files(tmp_path):
    """Keras's loader reads a whole folder: it is given one holding a link to each chosen
    file, in its class folder, and reads them in the order given."""
    from dalipipe import make_sample_dataset, sources

    make_sample_dataset(tmp_path / "data", num_images=9, num_classes=3)
    index = sources.index_source(str(tmp_path / "data"))
    chosen = index.take([0, 2, 3, 5, 8])
    root = loaders.link_folder(chosen.file_paths, str(tmp_path / "links"))
    links = sorted(p for p in (tmp_path / "links").rglob("*") if not p.is_dir())
    assert all(p.is_symlink() for p in links)
    assert sorted(os.readlink(p) for p in links) == sorted(chosen.file_paths)
    assert {p.parent.name for p in links} == {os.path.basename(os.path.dirname(f))
                                              for f in chosen.file_paths}
    assert root == str(tmp_path / "links")

    for workload in ("eval", "stretch", "train"):
        loader = loaders.make_image_dataset_from_directory(
            chosen.file_paths, chosen.labels, workload=workload, batch_size=2, threads=1, seed=0)
        assert sum(len(images) for images, _ in loader.epoch()) == 5
        read = [os.path.realpath(p) for p in loader.file_paths]
        if workload == "train":  # shuffled, as a training set is loaded
            assert sorted(read) == sorted(os.path.realpath(f) for f in chosen.file_paths)
        else:
            assert read == [os.path.realpath(f) for f in chosen.file_paths]
        assert loader.settings.startswith("image_dataset_from_directory(image_size=")
        assert f"batch_size=2, shuffle={workload == 'train'}" in loader.settings
        assert loader.note == loaders.KERAS_NOTES.get(workload)
    assert loaders.KERAS_NOTES["train"] and loaders.KERAS_NOTES["eval"]
    assert "stretch" not in loaders.KERAS_NOTES  # Keras's default: the same work


def test_quick_runs_one_workload_unless_asked_for_more(tmp_path):
    """The plan alone (no loader runs): --quick's tasks are one per loader."""
    parser_args = dict(data=str(tmp_path / "data"), out=str(tmp_path / "out"), quick=True,
                       loaders=("python_generator",), num_images=4, stream=io.StringIO())
    result = report.run_bench(**parser_args, time_budget=0)
    measured = [r for r in result["results"] if r["workload"] != "decode"]
    assert [(r["loader"], r["workload"]) for r in measured] == [("python_generator", "stretch")]
    assert result["config"]["runs"] == 1 and result["config"]["workloads"] == ["stretch"]
    result = report.run_bench(**parser_args, workloads=("train", "eval"), time_budget=0)
    assert [r["workload"] for r in result["results"] if r["workload"] != "decode"] == [
        "train", "eval"]


def test_a_failure_is_one_readable_line_in_the_table_and_the_chart(tmp_path):
    missing = str(tmp_path / "cats" / "gone.jpg")
    task = dict(kind="measure", loader="python_generator", workload="stretch", files=[missing],
                labels=[0], batch_size=1, threads=1, seed=0, runs=1, train_steps=0)
    failed = harness.run_task_in_subprocess(task, timeout=300)
    assert failed["loader"] == "python_generator" and failed["workload"] == "stretch"
    assert failed["error"].startswith("FileNotFoundError: ") and missing in failed["error"]
    assert "\n" not in failed["error"] and "Traceback" not in failed["error"]

    measured = dict(loader="tf_data", workload="stretch", images_per_s=100.0, cpu_s_per_1000=1.0,
                    peak_rss_mb=10.0, mean_abs_error_vs_pil=1.0, settings="map(...)", note=None)
    result = _report([failed, measured, dict(measured, loader="dalipipe_cpu", images_per_s=150.0,
                                             note="does | this")])
    table = report.markdown(result)
    (row,) = [line for line in table.splitlines() if line.startswith("| python_generator |")]
    assert row.startswith(f"| python_generator | error: {failed['error'][:100]}")
    assert ("Fastest: `dalipipe_cpu`, 150 images/s, 1.50× the next, `tf_data` (100 images/s)."
            in table)
    assert "| does / this |" in table and "- `tf_data`: map(...)" in table

    rows = report.chart_rows(result, "stretch")
    assert rows[1:] == [("tf_data", 100.0, None), ("dalipipe_cpu", 150.0, None)]
    name, value, reason = rows[0]
    assert (name, value) == ("python_generator", 0)
    assert reason.startswith("error: FileNotFoundError")
    assert "\n" not in reason and len(reason) <= 80
    report.chart(result, str(tmp_path / "chart.png"))
    assert os.path.getsize(tmp_path / "chart.png") > 0


def test_a_quick_run_measures_a_loaders_workloads_in_turn_in_one_process(tmp_path):
    """With `quick`, one process per loader (and round) runs its workloads in turn
    (`harness.measure_in_turn`, here in this process): one that fails gives its own
    error, and the next still runs."""
    from dalipipe import make_sample_dataset, sources

    tasks = [dict(kind="decode", device="cpu")] + [
        dict(kind="measure", loader=name, workload=workload)
        for workload in ("train", "eval") for name in ("tf_data", "dalipipe_cpu")]
    units = report._units(tasks, quick=True)
    assert [[(t.get("loader"), t.get("workload")) for t in unit] for unit in units] == [
        [(None, None)], [("tf_data", "train"), ("tf_data", "eval")],
        [("dalipipe_cpu", "train"), ("dalipipe_cpu", "eval")]]
    assert report._units(tasks, quick=False) == [[task] for task in tasks]

    make_sample_dataset(tmp_path / "data", num_images=4, num_classes=2)
    index = sources.index_source(str(tmp_path / "data"))
    good = dict(kind="measure", loader="python_generator", workload="stretch", runs=1,
                files=index.file_paths, labels=index.labels.tolist(), batch_size=2,
                threads=1, seed=0, train_steps=0)
    missing = str(tmp_path / "gone.jpg")
    bad = dict(good, workload="eval", files=[missing], labels=[0])
    found = harness.measure_in_turn(dict(kind="in_turn", loader="python_generator",
                                         tasks=[bad, good]))
    failed, measured = found["results"]
    assert failed["workload"] == "eval" and failed["error"].startswith("FileNotFoundError: ")
    assert missing in failed["error"] and "\n" not in failed["error"]
    assert measured["workload"] == "stretch" and measured["images"] == 4
    assert measured["images_per_s"] > 0


def test_a_process_that_dies_is_reported_by_its_last_line():
    assert harness.one_line("Traceback (most recent call last):\n  File x\nValueError:  bad\n\n") \
        == "ValueError: bad"
    assert harness.error_line(RuntimeError("first line\nsecond")) == "RuntimeError: first line"
    long = dict(loader="x", workload="eval", error="a " * 200)
    assert len(report.not_run(long)) == 160 and report.not_run(long).endswith("…")


def _report(results):
    machine = dict(cpu="a CPU", cores=2, gpu="none", python="3", versions={})
    config = dict(batch_size=4, threads=2, runs=1, reference="tf_data")
    dataset = dict(images=4, mean_width=10, mean_height=10, mean_bytes=1024)
    return dict(machine=machine, config=config, dataset=dataset, loaders={}, results=results)


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    from dalipipe.bench.dense_data import dense_data

    return dense_data(str(tmp_path_factory.mktemp("dense")), num_images=6)


def test_dense_data_is_laid_out_as_oxford_pets_with_greyscale_ids(dense):
    from PIL import Image

    from dalipipe.annotations.masks import read_mask

    assert len(dense.images) == len(dense.masks) == 6
    for image, mask in zip(dense.images, dense.masks):
        assert os.path.splitext(os.path.basename(image))[0] == \
            os.path.splitext(os.path.basename(mask))[0]
        assert image.endswith(".jpg") and os.path.dirname(mask) == dense.masks_folder
        with Image.open(mask) as grey, Image.open(mask.replace("trimaps", "masks")) as palette:
            assert grey.mode == "L" and palette.mode == "P"
            # The same ids as the sample's palette mask, as pixel values.
            assert (np.asarray(grey) == read_mask(open(palette.filename, "rb").read())).all()
    with open(dense.boxes) as f:
        assert all(i["file_name"].endswith(".jpg") for i in json.load(f)["images"])


@pytest.mark.parametrize("name", loaders.SEGMENTATION_LOADERS[:5] + ("dalipipe_native_cpu",))
def test_segmentation_loaders_give_images_with_their_mask_ids(dense, name):
    """A tiny run of each: 6 images in batches of 4, 160x160, masks holding only the
    source ids (0-3), whatever dtype the loader gives them."""
    if loaders.unavailable(name):
        pytest.skip(loaders.unavailable(name))
    loader = loaders.LOADERS[name](dense.images, dense.masks, workload="segmentation",
                                   batch_size=4, threads=1, seed=0)
    batches = [(harness.to_numpy(i), harness.to_numpy(m)) for i, m in loader.epoch()]
    assert [len(i) for i, _ in batches] == [4, 2]
    images, masks = batches[0]
    assert images.shape == (4, 160, 160, 3) and images.dtype == np.float32
    assert 0 <= images.min() and images.max() <= 255 and images.max() > 50  # not normalized
    fields = harness.mask_fields(masks)
    assert fields["mask_shape"] == [4, 160, 160, 1]
    assert set(fields["mask_ids"]) <= {0, 1, 2, 3} and len(fields["mask_ids"]) > 1
    assert loader.note == loaders.SEGMENTATION_NOTES.get(name)


def test_segmentation_runs_its_own_loaders_in_rotated_rounds(tmp_path):
    """The plan alone (no loader runs): the segmentation workload's loaders, each round
    in another order, on the dense data; the classification data is not made."""
    result = report.run_bench(data=str(tmp_path / "data"), out=str(tmp_path / "out"),
                              workloads=("segmentation",), num_images=4, rounds=3,
                              time_budget=0, stream=io.StringIO())
    assert not (tmp_path / "data").exists() and (tmp_path / "data-segmentation").is_dir()
    measured = [r for r in result["results"] if r["workload"] == "segmentation"]
    names = list(report.DEFAULT_SEGMENTATION_LOADERS)
    assert [r["loader"] for r in measured] == names + names[1:] + names[:1] + names[2:] + names[:2]
    assert [r["round"] for r in measured] == [1] * 5 + [2] * 5 + [3] * 5
    assert result["dense_dataset"]["images"] == 4 and result["config"]["rounds"] == 3
    # A loader without masks is skipped on it, a segmentation loader elsewhere.
    assert "no masks" in loaders.unsupported("tf_data", "segmentation")
    assert loaders.unsupported("keras_oxford_pets", "train") is not None
    assert loaders.unsupported("dalipipe_cpu", "segmentation") is None


def test_rounds_are_combined_into_the_median_round():
    row = dict(workload="segmentation", cpu_s_per_1000=1.0, peak_rss_mb=10.0, note=None,
               mask_dtype="int32", mask_ids=[0, 1])
    rounds = [dict(row, loader=name, images_per_s=ips, round=k)
              for k, (a, b) in enumerate([(100.0, 90.0), (300.0, 60.0), (200.0, 80.0)], 1)
              for name, ips in (("dalipipe_cpu", a), ("tf_data_keras_layers", b))]
    merged = {r["loader"]: r for r in report.combined(rounds)}
    assert merged["dalipipe_cpu"]["images_per_s"] == 200.0
    assert merged["dalipipe_cpu"]["rounds_images_per_s"] == [100.0, 300.0, 200.0]
    assert merged["tf_data_keras_layers"]["images_per_s"] == 80.0
    table = report.markdown(_report(rounds))
    assert "### segmentation" in table and "× tf_data_keras_layers" in table
    assert "| dalipipe_cpu | 200 | 2.50 |" in table and "int32, ids [0, 1]" in table


def test_the_loaders_that_keep_decoded_images_run_and_total_their_epochs(tmp_path):
    from dalipipe import make_sample_dataset, sources

    make_sample_dataset(tmp_path, num_images=6, num_classes=2)
    index = sources.index_source(str(tmp_path))
    for name in loaders.CACHED_LOADERS:
        assert loaders.unsupported(name, "train") is not None
        task = dict(loader=name, workload="stretch", files=index.file_paths,
                    labels=index.labels.tolist(), batch_size=4, threads=1, seed=0, runs=2)
        r = harness.measure(task)
        assert r["images"] == 6 and len(r["run_s"]) == 2, name
        assert r["total_s"] == pytest.approx(r["first_epoch_s"] + sum(r["run_s"])), name
        assert "mean_abs_error_vs_pil" not in r, name  # shuffled: no quality figure
        assert r["settings"], name
    assert r["settings"].startswith("make_dali_dataset(") and "cache=" in r["settings"]
    assert r["cache_disk_mb"] >= 6 * 224 * 224 * 3 / 1e6  # the folder cache's file
    markdown = report.markdown(dict(
        machine=dict(cpu="cpu", cores=2, gpu=None, versions={}, python="3"),
        config=dict(batch_size=4, threads=1, runs=2), loaders={},
        dataset=dict(images=6, mean_width=1, mean_height=1, mean_bytes=1024), results=[r]))
    assert "Creation plus 3 epochs (s): `dalipipe_cache_folder`" in markdown
