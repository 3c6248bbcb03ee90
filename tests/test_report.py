"""`dalipipe.InputReport` (`dalipipe.report`): `input_wait` on torch and JAX
(`report_job.py`, in `backend_job.py`'s process per backend) against a slow model,
an input-bound one and an independent measure; on TensorFlow, the key left out with
one warning; the line's advice; the measure's thread rule."""

import statistics
import threading
import time
import types
import warnings

import numpy as np
import pytest

keras = pytest.importorskip("keras")

import dalipipe  # noqa: E402
from dalipipe import report  # noqa: E402

OPTIONS = dict(image_size=(12, 12), batch_size=8, normalization=None, verbose=False,
               device="cpu", seed=5)
FORMATS = ("pydataset", "grain")


@pytest.mark.slow
@pytest.mark.backend_job("report")
@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_input_wait_on_the_backend(backend, backend_jobs):
    result = backend_jobs(backend, "report")
    assert result["backend"] == backend
    for format in FORMATS:
        found = result[format]
        # A model that sleeps 40 ms per step, with validation on the same dataset,
        # a CSVLogger after the report and, on JAX, `steps_per_execution=2`.
        assert len(found["slow"]) == 3 and statistics.median(found["slow"]) < 0.1, found
        assert found["logged"] == pytest.approx(found["slow"]), found
        # A trivial model on 1024x1024 JPEGs decoded by one DALI thread.
        assert len(found["bound"]) == 3 and statistics.median(found["bound"]) > 0.5, found
        # Independent measures: the time around Keras's taking of each batch, and
        # on torch the gaps between steps, where `fit` takes its batches.
        measures = [found["calls"]] if found["calls"] else []
        if backend == "torch":
            measures.append(found["gaps"])
        assert measures, found
        for measure in measures:
            assert np.allclose(found["bound"], measure, atol=0.05), (format, found)
        # `fit(verbose=2)` prints the line of each epoch above 0.1: DALI's graph, one
        # thread, is the slowest stage.
        assert len(found["lines"]) == sum(share > 0.1 for share in found["bound"]), found
        for line in found["lines"]:
            assert "Per batch the feed spent reading inputs" in line and " Try " in line


def fit_warnings(dataset, callbacks, **kwargs):
    """The history of a 1-epoch `fit` of a small model on `dataset`, and the messages
    of the warnings it gave."""
    model = keras.Sequential([keras.Input((12, 12, 3)), keras.layers.GlobalAveragePooling2D(),
                              keras.layers.Dense(3)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = model.fit(dataset, epochs=1, verbose=0, callbacks=callbacks, **kwargs)
    return history.history, [str(w.message) for w in caught if "InputReport" in str(w.message)]


def test_on_tensorflow_the_key_is_left_out_with_one_warning(tagged_dir):
    if keras.backend.backend() != "tensorflow":
        pytest.skip("the TensorFlow backend's rule")
    for format in ("tf", "pydataset"):
        dataset = dalipipe.make_dali_dataset(tagged_dir, format=format, **OPTIONS)
        history, found = fit_warnings(dataset, [dalipipe.InputReport()])
        assert "input_wait" not in history, format
        assert len(found) == 1 and "KERAS_BACKEND=torch or jax" in found[0], found


def test_after_a_csv_logger_and_on_other_data_it_warns(tmp_path):
    x = np.zeros((16, 12, 12, 3), np.float32)
    y = np.zeros(16, np.int32)
    history, found = fit_warnings(
        x, [keras.callbacks.CSVLogger(str(tmp_path / "log.csv")), dalipipe.InputReport()],
        y=y, batch_size=8)
    assert "input_wait" not in history
    assert len(found) == 2, found
    assert "after CSVLogger" in found[0] and "put InputReport first" in found[0]
    assert "'pydataset' and 'grain'" in found[1]


def test_the_threshold_is_a_share():
    with pytest.raises(ValueError, match=r"`threshold` must be in \[0, 1\]"):
        dalipipe.InputReport(threshold=5)


def options(**kwargs):
    return types.SimpleNamespace(**{**dict(num_threads=1, device="cpu", augment=False,
                                           prefetch_queue_depth=2), **kwargs})


def test_the_line_names_the_slowest_stage_and_one_setting():
    times = report.Times(wait=3.0, taken=10, inputs=0.01, dali=0.9, copy=0.02, made=10)
    line = report.explain(0.6, times, options(), cores=4)
    assert line.startswith("input_wait 0.60: fit waited for data 60% of the epoch.")
    assert "reading inputs 1.0 ms, DALI's graph 90.0 ms, the copy to tensors 2.0 ms" in line
    assert "Try num_threads=2 (DALI runs on 1 of 4 cores)" in line
    stages = {"reading inputs": 1.0, "DALI's graph": 9.0, "the copy to tensors": 1.0}
    assert "augment=" in report.advice(stages, options(num_threads=4, augment=True), cores=4)
    assert "image_size=" in report.advice(stages, options(num_threads=4), cores=4)
    stages["reading inputs"] = 20.0
    assert "prefetch_queue_depth=4" in report.advice(stages, options(), cores=4)
    stages["the copy to tensors"] = 30.0
    assert "dtype='uint8'" in report.advice(stages, options(), cores=4)


def test_reads_count_in_the_owners_thread_only():
    times = report.FeedTimes()
    times.owner = threading.get_ident()
    times.read(time.perf_counter() - 0.5)
    other = threading.Thread(target=lambda: times.read(time.perf_counter() - 9.0))
    other.start()
    other.join()
    found = times.snapshot()
    assert (found.taken, found.elsewhere) == (1, 1)
    assert 0.5 <= found.wait < 5.0


@pytest.mark.slow
def test_the_cost_benchmark_runs_and_writes_its_json(tmp_path):
    pytest.importorskip("torch")
    from benchmarks import report_cost

    out = tmp_path / "cost.json"
    assert report_cost.main(["--images", "24", "--rounds", "1", "--epochs", "1",
                             "--image-size", "32", "--batch-size", "8", "--step-ms", "5",
                             "--feed-batches", "1000", "--out", str(out)]) == 0
    import json

    found = json.loads(out.read_text())
    without, with_report = found["runs"]
    assert [without["report"], with_report["report"]] == ["without", "with"]
    assert len(with_report["input_wait"]) == 1 and not without["input_wait"]
    # The callback's hooks of the timed fit, timed: train begin and end, epoch begin and end.
    assert with_report["hook_calls"] == 4 and with_report["hooks_seconds"] > 0
    assert without["hook_calls"] == 0 and with_report["steps"] == 3
    assert found["feed_timing"]["per_batch_us"] > 0
    summary = found["summary"]
    assert summary["step_ms"] > 5 and 0 < summary["direct_percent"] < 100, summary
    assert set(summary) == {"images_per_s", "cost_percent", "round_cost_percent", "step_ms",
                            "hooks_us_per_step", "feed_timing_us_per_batch",
                            "fit_thread_us_per_step", "direct_percent", "input_wait"}
