"""`make_dali_dataset` on Keras's torch and JAX backends, each in its own process
(`backend_job.py`, most modes through the `backend_jobs` fixture): what `fit`,
`evaluate` and `predict` read, on the CPU."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from dalipipe.utils import child_env

from helpers import NUM_TAGGED, tag_of

TESTS = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(TESTS, "backend_job.py")
BATCH = 8
STEPS = -(-NUM_TAGGED // BATCH)


def run_job(backend, mode, tagged_dir, out, *, env=None, timeout=300):
    """Runs `backend_job.py MODE` with Keras on `backend` (no GPU unless `env` sets
    BACKEND_JOB_DEVICE=gpu); returns its JSON result."""
    pytest.importorskip(backend)
    hide_gpus = {} if (env or {}).get("BACKEND_JOB_DEVICE") == "gpu" else {"CUDA_VISIBLE_DEVICES": ""}
    # The job imports this checkout's dalipipe, installed or not, and `helpers` from
    # its own folder.
    environ = child_env(KERAS_BACKEND=backend, **hide_gpus, **(env or {}))
    process = subprocess.run([sys.executable, JOB, mode, tagged_dir, str(out)], env=environ,
                             capture_output=True, text=True, timeout=timeout)
    assert process.returncode == 0, process.stderr[-4000:]
    with open(out) as f:
        return json.load(f)


@pytest.mark.backend_job("single")
@pytest.mark.parametrize("backend", ["torch", pytest.param("jax", marks=pytest.mark.slow)])
def test_fit_evaluate_and_predict_on_the_backend(backend, backend_jobs):
    result = backend_jobs(backend, "single")
    check_single(result, backend)
    assert all("cpu" in device.lower() for device in result["devices"]), result["devices"]


@pytest.mark.backend_job("targets")
@pytest.mark.parametrize("backend", ["torch", pytest.param("jax", marks=pytest.mark.slow)])
def test_table_targets_on_the_backend(backend, backend_jobs):
    """Raw and multi-hot targets: float32 tensors of the backend, each with its image."""
    result = backend_jobs(backend, "targets")
    module = {"torch": "torch", "jax": "jaxlib"}[backend]
    for mode, width in (("raw", 2), ("multi_hot", 2)):
        found = result[mode]
        assert found["type"] == module and found["dtype"].split(".")[-1] == "float32"
        assert found["shape"][1:] == [width]
        assert sorted(row[0] for row in found["rows"]) == list(range(NUM_TAGGED))
    for tag, half, square in result["raw"]["rows"]:
        assert half == tag / 2 and square == pytest.approx((tag / 10) ** 2, rel=1e-6)
    assert result["multi_hot"]["class_names"] == ["big", "even"]
    for tag, big, even in result["multi_hot"]["rows"]:
        assert (big, even) == (float(tag >= 60), float(tag % 2 == 0))
    assert len(result["fit_losses"]) == 1 and not result["tensorflow_loaded"]


@pytest.mark.slow
@pytest.mark.backend_job("recipes")
@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_recipes_and_mixing_on_the_backend(backend, backend_jobs):
    """Each recipe and mixing on torch or JAX (`RECIPE_CASES`), each backend's labels
    with and without mixing."""
    from dalipipe.mixing import MIXES
    from dalipipe.recipes import RECIPES

    from backend_job import RECIPE_CASES

    cases = [case for cases in RECIPE_CASES.values() for case in cases]
    assert {augment for augment, _ in cases} >= set(RECIPES)
    assert {mix for _, mix in cases} == {None, *MIXES}
    assert {mix is None for _, mix in RECIPE_CASES[backend]} == {True, False}
    result = backend_jobs(backend, "recipes")
    module = {"torch": "torch", "jax": "jaxlib"}[backend]
    assert not result.pop("tensorflow_loaded")
    assert set(result) == {f"{augment}-{mix}" for augment, mix in RECIPE_CASES[backend]}
    for name, found in result.items():
        mixed = not name.endswith("None")
        assert found["type"] == module and found["equals_native"], name
        assert found["shapes"] == [[BATCH, 12, 12, 3], [BATCH, 3] if mixed else [BATCH]], name
        assert [d.split(".")[-1] for d in found["dtypes"]] == \
            ["float32", "float32" if mixed else "int32"], name
        assert len(found["losses"]) == 2 and all(np.isfinite(found["losses"])), name


def check_single(result, backend, fit_epochs=12):
    """What `backend_job.py single` must find on any device; its `fit` of
    `fit_epochs` epochs learns the classes where they are 12."""
    assert result["backend"] == backend and result["fit_epochs"] == fit_epochs
    # The backend's own tensors, with the TensorFlow path's shapes and dtypes.
    assert result["types"] == [{"torch": "torch", "jax": "jaxlib"}[backend]] * 2
    assert result["shapes"] == [[BATCH, 12, 12, 3], [BATCH]]
    assert [d.split(".")[-1] for d in result["dtypes"]] == ["float32", "int32"]
    assert result["len"] == STEPS and result["class_names"] == ["blue", "green", "red"]
    # Each pass is the native epoch of its number, new every epoch, with a partial last batch.
    assert result["pass_0_equals_native"] and result["pass_1_equals_native"]
    assert result["passes_differ"]
    assert result["pass_sizes"] == [BATCH] * (STEPS - 1) + [NUM_TAGGED - BATCH * (STEPS - 1)]
    # `fit`: every sample exactly once per epoch, labels aligned, and it learns.
    assert len(result["fit_counts"]) == fit_epochs
    for counts in result["fit_counts"]:
        assert counts == [1.0] * NUM_TAGGED
    if fit_epochs >= 12:
        assert result["fit_accuracy"] >= 0.95
    halves = np.array(result["half_epoch_counts"])  # 4 epochs of half a pass each
    assert (halves[0::2] + halves[1::2]).tolist() == [[1.0] * NUM_TAGGED] * 2
    assert all(0 < sum(h) < NUM_TAGGED for h in halves)
    # `evaluate` sees every sample once; its loss is NumPy's over `predict`'s logits.
    assert result["evaluate_counts"] == [1.0] * NUM_TAGGED
    assert result["evaluate_mislabeled"] == 0
    np.testing.assert_allclose(result["evaluate"]["loss"], result["numpy_loss"], rtol=1e-5)
    # `predict` of an images-only dataset is in `file_paths` order.
    assert result["predict_tags"] == result["file_tags"]
    assert not result["tensorflow_loaded"]


@pytest.mark.slow
def test_jax_data_parallel_over_two_cpu_devices(tagged_dir, tmp_path):
    result = run_job("jax", "data_parallel", tagged_dir, tmp_path / "dp.json",
                     env={"XLA_FLAGS": "--xla_force_host_platform_device_count=2"})
    assert result["devices"] == 2
    # Full global batches only (the last one padded with zero weights): each sample
    # weighs exactly once per epoch.
    assert result["batch_sizes"] == [BATCH]
    assert result["fit_counts"] == [[1.0] * NUM_TAGGED] * 2
    assert result["evaluate_tags"] == NUM_TAGGED
    assert result["evaluate_mislabeled"] == 0
    assert not result["tensorflow_loaded"]
    no_labels, odd_batch = result["errors"]
    assert "DataParallel distribution over 2 devices" in no_labels
    assert "labels=None" in no_labels
    assert "`batch_size`" in odd_batch and "7" in odd_batch


def torch_distributed_shards(source, tmp_path):
    """Two `torch.distributed` processes (MODE `torch_distributed`) read their shards of
    `source`, a copy of `tagged_dir`: disjoint, covering every sample once per epoch,
    in the "pydataset" and "grain" formats and through `DALIPyDataset.map`. Run on a
    bucket's copy (`test_remote_sources.py`) and on tar shards (`test_shards.py`);
    a local folder is sharded by the same `split_source` as a bucket's prefix."""
    pytest.importorskip("torch")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    world = 2
    processes = []
    for rank in range(world):
        env = child_env(KERAS_BACKEND="torch", CUDA_VISIBLE_DEVICES="", RANK=str(rank),
                        WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        processes.append(subprocess.Popen(
            [sys.executable, JOB, "torch_distributed", source, str(tmp_path / f"{rank}.json")],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for process in processes:
        _, err = process.communicate(timeout=300)
        assert process.returncode == 0, err[-4000:]
    results = [json.loads((tmp_path / f"{rank}.json").read_text()) for rank in range(world)]
    for format in ("pydataset", "grain"):
        check_shards([result[f"{format}_runs"] for result in results], world)
    # Through `DALIPyDataset.map` (labels + 3), each process reads its shard, as unmapped.
    for result in results:
        assert [[[tag, label - 3, weight] for tag, label, weight in seen]
                for seen in result["mapped_runs"]] == result["pydataset_runs"]


def check_shards(runs, world):
    """Each epoch of `runs` (per process, its epochs' samples `[tag, label, weight]`):
    disjoint shards that cover the dataset, the padding weighing 0."""
    orders = []
    for epoch in zip(*runs):
        assert [len(seen) for seen in epoch] == [STEPS * BATCH // world] * world
        weighed = sorted(t for seen in epoch for t, _, w in seen if w == 1)
        assert weighed == list(range(NUM_TAGGED))
        assert sorted(w for seen in epoch for _, _, w in seen if w != 1) == \
            [0.0] * (STEPS * BATCH - NUM_TAGGED)
        assert all(label == tag % 3 for seen in epoch for tag, label, _ in seen)
        orders.append([t for seen in epoch for t, _, _ in seen])
    assert orders[0] != orders[1], "the order must change between epochs"


def test_pydataset_format_on_tensorflow_gives_numpy_batches(tagged_dir):
    """In this (TensorFlow) process: `format="pydataset"` yields NumPy batches that
    Keras trains from, in passes like the other backends'."""
    import keras

    import dalipipe

    ds = dalipipe.make_dali_dataset(tagged_dir, format="pydataset", image_size=(12, 12),
                                    batch_size=BATCH, seed=7, normalization=None, device="cpu",
                                    verbose=False)
    assert isinstance(ds, keras.utils.PyDataset) and len(ds) == STEPS
    images, labels = ds[0]
    assert isinstance(images, np.ndarray) and images.shape == (BATCH, 12, 12, 3)
    assert labels.dtype == np.int32
    seen = [tag_of(image) for images, _ in ds for image in images]  # `iter` starts a pass
    assert sorted(seen) == list(range(NUM_TAGGED))
    with pytest.raises(IndexError, match=r"`index` must be an integer in \[0, 16\).*index=16"):
        ds[STEPS]
    model = keras.Sequential([keras.Input((12, 12, 3)), keras.layers.GlobalAveragePooling2D(),
                              keras.layers.Dense(3)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(ds, epochs=1, verbose=0)
    assert len(history.history["loss"]) == 1


def test_strategy_needs_the_tf_format(tagged_dir):
    import dalipipe

    with pytest.raises(ValueError, match=r"`strategy` is a `tf.distribute` strategy.*"
                                         r"format='pydataset'"):
        dalipipe.make_dali_dataset(tagged_dir, format="pydataset", strategy=object())
