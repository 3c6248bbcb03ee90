"""`make_dali_dataset(..., strategy=...)` under MirroredStrategy (2 logical CPUs) and
MultiWorkerMirroredStrategy (2 worker processes on 127.0.0.1), each in fresh
processes (`distributed_job.py`): logical devices and TF_CONFIG must be set before
TensorFlow starts. Those and the in-process strategies are `slow`; the shards of
masks and boxes are checked natively too (`ImagePipeline.shard`, and `split_source`'s
sharding, as for `torch.distributed` and JAX), which is quick."""

import collections
import dataclasses
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys

import numpy as np
import pytest

from dalipipe import make_dali_pipeline
from dalipipe.annotations.sample import MASK_CLASS_NAMES
from dalipipe.devices import place
from dalipipe.options import Options
from dalipipe.pipeline import split_source
from helpers import NUM_TAGGED
from test_masks import dense  # noqa: F401 (the fixture: 8 images with masks and boxes)

slow = pytest.mark.slow  # strategies in subprocesses, and in this process



@pytest.fixture
def tf():
    """TensorFlow, for the strategies (the shards' native checks and the `gpu` one run
    without it)."""
    return pytest.importorskip("tensorflow")

JOB = os.path.join(os.path.dirname(__file__), "distributed_job.py")
GLOBAL_BATCH = 8


def _env(**extra):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "",
           "PYTHONFAULTHANDLER": "1", **extra}
    env.pop("TF_CONFIG", None)
    env.update(extra)
    return env


def _wait(process, timeout=240, *, crash_ok=False):
    """Waits for a job; with `crash_ok`, returns False when it died of SIGSEGV (see
    `_run_mirrored`) instead of failing."""
    try:
        _, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        _, err = process.communicate()
        pytest.fail(f"distributed job hung for {timeout} s:\n{err.decode()[-3000:]}")
    if crash_ok and process.returncode == -signal.SIGSEGV:
        print(f"the job died of SIGSEGV:\n{err.decode()[-3000:]}")
        return False
    assert process.returncode == 0, err.decode()[-3000:]
    return True


def _run_mirrored(source, out, dense=None):  # noqa: F811 (not the fixture)
    """The mirrored job, run a second time if the first dies of SIGSEGV: DALI's
    TensorFlow plugin crashes the process, rarely, when a distributed iterator over a
    DALI dataset is destroyed after a partial read (Keras's `evaluate` does so; about
    once in 1,300 such iterators on a loaded 2-core machine). docs/limits.md."""
    for attempt in range(2):
        process = subprocess.Popen([sys.executable, JOB, "mirrored", source, str(out),
                                    *([dense] if dense else [])],
                                   env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if _wait(process, crash_ok=attempt == 0):
            return


def _check_epochs(replica_runs):
    """Every sample exactly once per epoch over all replicas, padding weighs 0."""
    steps = -(-NUM_TAGGED // GLOBAL_BATCH)
    orders = []
    for epoch in zip(*replica_runs):
        per_replica = [len(seen) for seen in epoch]
        assert per_replica == [steps * GLOBAL_BATCH // len(epoch)] * len(epoch)
        weighed = collections.Counter(t for seen in epoch for t, _, w in seen if w == 1)
        assert weighed == collections.Counter(range(NUM_TAGGED))
        padding = [w for seen in epoch for _, _, w in seen if w != 1]
        assert padding == [0.0] * (steps * GLOBAL_BATCH - NUM_TAGGED)
        assert all(label == tag % 3 for seen in epoch for tag, label, _ in seen)
        orders.append([t for seen in epoch for t, _, _ in seen])
    assert orders[0] != orders[1], "the order must change between epochs"


@slow
@pytest.mark.parametrize("kind", ["directory", "tfrecord"])
def test_mirrored_strategy_over_two_logical_cpus(tf, tagged_dir, tagged_tfrecords, tmp_path, kind,
                                                  dense):  # noqa: F811
    """With a directory, the job also runs masks and boxes (`dense_run`): their rows
    over the two replicas are the unsharded epoch's, then the padding."""
    out = tmp_path / "mirrored.json"
    source = tagged_dir if kind == "directory" else tagged_tfrecords
    _run_mirrored(source, out, dense if kind == "directory" else None)
    report = json.loads(out.read_text())
    assert report["replicas"] == 2
    assert report["cardinality"] == -(-NUM_TAGGED // GLOBAL_BATCH)
    assert report["class_names"] == ["blue", "green", "red"]
    # One process sees both replicas: each epoch is a list of 2 replicas.
    _check_epochs([[epoch[r] for epoch in report["epochs"]] for r in range(2)])
    assert report["history"]["accuracy"][-1] > 0.9
    assert report["history"]["plain_evaluate_accuracy"][0] > 0.9
    assert report["seed_error"] is None  # one process: its one seed serves every replica
    if kind == "directory":
        check_dense_rows(report["dense"], dense)


def check_dense_rows(found, dense):  # noqa: F811
    """`dense_run`'s rows: the real ones are the unsharded epoch's, in order; the
    padding (weight 0) has masks of the fill value and labels of -1."""
    for kind, column in (("masks", 1), ("boxes", 2)):
        whole = make_dali_pipeline(os.path.join(dense, "images"),
                                   **{**DENSE, **dense_targets(dense, kind)})
        want = np.concatenate([batch[column] for batch in whole.epoch(0)])
        targets = np.array([t for t, _ in found[kind]])
        weights = np.array([w for _, w in found[kind]])
        assert len(weights) == DENSE_STEPS * 6 and set(weights) == {0.0, 1.0}
        np.testing.assert_array_equal(targets[weights == 1], want)
        assert (targets[weights == 0] == -1).all() and (weights == 0).sum() == DENSE_PADDING


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _tagged_bucket(server, tagged_dir):
    """`tagged_dir` copied to `s3://distributed/tagged/` on `server`; its URI."""
    client = server.client()
    client.create_bucket(Bucket="distributed")
    for parent, _, names in os.walk(tagged_dir):
        for name in names:
            path = os.path.join(parent, name)
            client.upload_file(path, "distributed", f"tagged/{os.path.relpath(path, tagged_dir)}")
    return "s3://distributed/tagged/"


@slow
def test_multi_worker_mirrored_strategy_with_two_workers(tf, tagged_dir, tmp_path, s3_server):
    """Both workers read from the session's local S3 server, each its shard, straight
    from the bucket. (A local folder's shards are the same `split_source`'s: the
    native checks below and `test_mirrored_strategy_over_two_logical_cpus`.)"""
    server = s3_server
    source = _tagged_bucket(server, tagged_dir)
    log_start = server.log_size()
    workers = [f"127.0.0.1:{port}" for port in _free_ports(2)]
    processes, outs = [], []
    for index in range(2):
        config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        outs.append(tmp_path / f"worker{index}.json")
        processes.append(subprocess.Popen(
            [sys.executable, JOB, "multiworker", source, str(outs[-1])],
            env=_env(TF_CONFIG=json.dumps(config)),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        ))
    try:
        for process in processes:
            _wait(process)
    finally:
        for process in processes:
            process.kill()
    reports = [json.loads(out.read_text()) for out in outs]
    assert [r["replicas"] for r in reports] == [2, 2]
    # Without a seed, the workers would draw different orders: refused.
    assert "pass the same `seed` on every worker. Received: seed=None" in reports[0]["seed_error"]
    # Each worker feeds its one replica; together they must cover the dataset.
    _check_epochs([[epoch[0] for epoch in r["epochs"]] for r in reports])
    for report in reports:
        # Trained with a custom loop (Keras 3's fit fails under this strategy, see
        # distributed_job.py): the weights, summed over the cluster, count each sample once.
        assert report["history"]["samples"] == [NUM_TAGGED] * 2
        assert report["history"]["accuracy"][-1] > 0.9
    # 4 passes (2 recorded, 2 trained) of a shard of 64 per worker (padding included),
    # and at most one check of every object per worker (633 here: the workers share
    # one cache of verdicts). Had each worker read every object on every pass,
    # there would be at least 8 * 121 reads.
    reads = server.object_gets("distributed", since=log_start)
    assert set(reads) == {f"tagged/{os.path.relpath(p, tagged_dir)}"
                          for p in map(str, pathlib.Path(tagged_dir).rglob("*.png"))}
    assert len(reads) <= 2 * 4 * 64 + 2 * NUM_TAGGED, len(reads)


@slow
def test_one_device_strategy_in_process(tf, tagged_dir):
    """The per-worker path in this process: weights, cardinality and `fit`."""
    from dalipipe import make_dali_dataset

    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    dataset = make_dali_dataset(tagged_dir, image_size=(8, 8), batch_size=8, seed=2,
                                strategy=strategy, device="cpu")
    assert isinstance(dataset, tf.distribute.DistributedDataset)
    assert dataset.class_names == ["blue", "green", "red"] and len(dataset.file_paths) == NUM_TAGGED
    weights = [w for _, _, batch in dataset for w in batch.numpy()]
    assert len(weights) == 16 * GLOBAL_BATCH and sum(weights) == NUM_TAGGED
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input((8, 8, 3)), tf.keras.layers.Flatten(),
                                     tf.keras.layers.Dense(3)])
        model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(dataset, epochs=1, verbose=0)
    assert len(history.history["loss"]) == 1


@slow
@pytest.mark.parametrize("options, message", [
    ({"strategy": "mirrored"}, r"`strategy` must be a `tf.distribute.Strategy`.*Received: "
                               r"strategy='mirrored'"),
    ({"label_mode": None}, r"needs labels.*Received: labels='inferred', label_mode=None"),
    ({"device": "gpu"}, r"`device='gpu'` needs a strategy whose replicas are GPUs"),
])
def test_strategy_errors_name_the_argument(tf, tagged_dir, options, message):
    from dalipipe import make_dali_dataset

    options = {"strategy": tf.distribute.OneDeviceStrategy("/cpu:0"), **options}
    with pytest.raises(ValueError, match=message):
        make_dali_dataset(tagged_dir, batch_size=8, **options)


@slow
def test_class_weight_multiplies_the_padding_weights(tf, tagged_dir):
    from dalipipe import make_dali_dataset

    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    dataset = make_dali_dataset(tagged_dir, image_size=(8, 8), batch_size=8, seed=2,
                                strategy=strategy, device="cpu", class_weight={2: 3.0})
    seen = [(int(y), float(w)) for _, labels, weights in dataset
            for y, w in zip(labels.numpy(), weights.numpy())]
    assert len(seen) == 16 * GLOBAL_BATCH
    real = collections.Counter(y for y, w in seen if w != 0)
    assert sum(real.values()) == NUM_TAGGED  # padding weighs 0 whatever its class
    assert {w for y, w in seen if w != 0 and y == 2} == {3.0}
    assert {w for y, w in seen if w != 0 and y != 2} == {1.0}


@slow
def test_raw_targets_under_a_strategy(tf, tagged_dir):
    """Float targets with the padding's weights: every sample once, weights summing to
    the dataset."""
    pd = pytest.importorskip("pandas")
    from dalipipe import make_dali_dataset
    from helpers import tag_of, tagged_targets

    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    dataset = make_dali_dataset(pd.DataFrame(tagged_targets(tagged_dir)), label_columns="half",
                                label_mode="raw", image_size=(12, 12), batch_size=8, seed=2,
                                strategy=strategy, device="cpu", verbose=False)
    total = 0.0
    for images, targets, weights in dataset:
        for image, target, weight in zip(images.numpy(), targets.numpy(), weights.numpy()):
            assert target == tag_of(image) / 2
            total += weight
    assert total == NUM_TAGGED


# Masks and boxes: 8 images in global batches of 6, 2 steps, the last one padded with 4
# samples of weight 0.
DENSE = dict(image_size=(24, 32), batch_size=6, seed=3, device="cpu", verbose=False,
             num_threads=1, augment=True, class_names=list(MASK_CLASS_NAMES),
             mask_fill_value=-1)
DENSE_STEPS, DENSE_PADDING = 2, 4


def dense_targets(dense, kind):  # noqa: F811 (`dense` is the fixture)
    """The options of `kind` ("masks" or "boxes") for the `dense` sample data."""
    if kind == "masks":
        return dict(masks=os.path.join(dense, "masks"))
    return dict(boxes=os.path.join(dense, "instances.json"), max_boxes=6, class_names=None,
                bounding_box_format="xyxy")


def dense_shards(dense, kind, setup):  # noqa: F811
    """`(whole, shards)`: the pipeline unsharded, and its shards for `setup`: one
    per replica (MirroredStrategy), one per worker feeding its 2 replicas
    (MultiWorkerMirroredStrategy, OneDeviceStrategy), or one per process, made by
    `split_source` as `make_dali_dataset` makes them under `torch.distributed` or a
    JAX distribution."""
    options = {**DENSE, **dense_targets(dense, kind)}
    images = os.path.join(dense, "images")
    whole = make_dali_pipeline(images, **options)
    if setup == "replica":
        return whole, [whole.shard([r], 2) for r in range(2)]
    if setup == "worker":
        return whole, [whole.shard([0, 1], 2)]
    parsed = Options.from_keywords("make_dali_pipeline", options)
    return whole, [split_source(images, parsed,
                                dataclasses.replace(place(parsed), sharding=([r], 2)))
                   for r in range(2)]


def global_rows(shards, epoch):
    """The outputs of an epoch's global batches, row by row in the order of the epoch's
    positions (step by step, replica by replica): a tuple of arrays."""
    runs = [list(shard.epoch(epoch)) for shard in shards]
    batches = [batch for step in zip(*runs) for batch in step]  # per replica: interleave
    return tuple(np.concatenate(column) for column in zip(*batches))


@pytest.mark.parametrize("setup", ["replica", "worker", "process"])
def test_shards_of_masks_hold_every_sample_once_and_pad_with_the_fill(dense, setup):  # noqa: F811
    whole, shards = dense_shards(dense, "masks", setup)
    assert shards[0].output_shapes[-1] == (None, 24, 32)  # weights per pixel
    want_images, want_masks = (np.concatenate(c) for c in zip(*whole.epoch(1)))
    images, masks, weights = global_rows(shards, 1)
    assert len(images) == DENSE_STEPS * 6 and weights.dtype == np.float32
    per_sample = weights.reshape(len(weights), -1)
    assert set(np.unique(per_sample.min(1) == per_sample.max(1))) == {True}  # one weight each
    real = per_sample[:, 0] == 1
    assert real.sum() == 8 and (per_sample[~real] == 0).all()
    np.testing.assert_array_equal(masks[real], want_masks)  # each sample once, in order
    np.testing.assert_array_equal(images[real], want_images)  # with the unsharded crops
    assert (masks[~real] == -1).all()  # the padding's masks: `mask_fill_value`
    assert (want_masks != -1).all()


@pytest.mark.parametrize("setup", ["replica", "worker", "process"])
def test_shards_of_boxes_hold_every_sample_once_and_pad_with_minus_one(dense, setup):  # noqa: F811
    whole, shards = dense_shards(dense, "boxes", setup)
    want_images, want_boxes, want_labels = (np.concatenate(c) for c in zip(*whole.epoch(1)))
    images, boxes, labels, weights = global_rows(shards, 1)
    assert weights.shape == (DENSE_STEPS * 6,)
    real = weights == 1
    assert real.sum() == 8 and (weights[~real] == 0).all()
    np.testing.assert_array_equal(boxes[real], want_boxes)
    np.testing.assert_array_equal(labels[real], want_labels)
    np.testing.assert_array_equal(images[real], want_images)
    assert (boxes[~real] == -1).all() and (labels[~real] == -1).all()
    assert (want_labels >= 0).any()  # the padding repeats images that have boxes


def test_the_dict_output_is_refused_on_several_devices(dense):  # noqa: F811
    p = make_dali_pipeline(os.path.join(dense, "images"), output="dict",
                           **{**DENSE, **dense_targets(dense, "masks")})
    with pytest.raises(ValueError, match=r"padded with samples of weight 0.*`output='dict'` "
                                         r"is the dict.*Received: output='dict', num_replicas=2"):
        p.shard([0], 2)


@slow
def test_masks_and_boxes_under_a_strategy_in_process(tf, dense):  # noqa: F811
    """The per-worker path in this process: `(images, masks, weights)` with padding of
    `mask_fill_value` and weight 0, a segmentation `fit` with per-pixel weights in
    its loss and `MeanIoU`; `(images, {"boxes", "labels"}, weights)` with -1 padding."""
    from dalipipe import make_dali_dataset

    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    images = os.path.join(dense, "images")
    seg = make_dali_dataset(images, strategy=strategy,
                            **{**DENSE, **dense_targets(dense, "masks")})
    batches = [tuple(t.numpy() for t in batch) for batch in seg]
    assert len(batches) == DENSE_STEPS
    masks = np.concatenate([m for _, m, _ in batches])
    weights = np.concatenate([w for _, _, w in batches])
    assert weights.shape == (12, 24, 32) and weights.sum() == 8 * 24 * 32
    assert (masks[weights[:, 0, 0] == 0] == -1).all() and (masks[weights[:, 0, 0] == 1] >= 0).all()
    classes = len(MASK_CLASS_NAMES)
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input((24, 32, 3)),
                                     tf.keras.layers.Rescaling(1 / 255),
                                     tf.keras.layers.Conv2D(classes, 1)])
        model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, ignore_class=-1), weighted_metrics=[tf.keras.metrics.MeanIoU(
                classes, sparse_y_pred=False, ignore_class=-1)])
    history = model.fit(seg, epochs=1, verbose=0).history
    assert np.isfinite(history["loss"][0]) and 0 <= history["mean_io_u"][0] <= 1
    det = make_dali_dataset(images, strategy=strategy,
                            **{**DENSE, **dense_targets(dense, "boxes")})
    (_, first, w0), (_, last, w1) = list(det)
    assert set(first) == {"boxes", "labels"} and first["boxes"].shape == (6, 6, 4)
    padding = w1.numpy() == 0
    assert padding.sum() == DENSE_PADDING and w0.numpy().all()
    assert (last["boxes"].numpy()[padding] == -1).all()
    assert (last["labels"].numpy()[padding] == -1).all()


@pytest.mark.gpu
def test_gpu_shards_of_masks_equal_the_cpu_shards(dense):  # noqa: F811
    """The GPU graph's padding (`graph.padded_masks`, the weights moved to the GPU)
    gives the CPU graph's masks and weights exactly."""
    options = {**DENSE, **dense_targets(dense, "masks")}
    for device in ("cpu", "gpu"):
        whole = make_dali_pipeline(os.path.join(dense, "images"), **{**options, "device": device})
        found = global_rows([whole.shard([r], 2) for r in range(2)], 1)
        if device == "cpu":
            cpu = found
    for got, want in zip(found[1:], cpu[1:], strict=True):
        np.testing.assert_array_equal(got, want)
