"""Resuming mid-epoch: `ImagePipeline.epoch(n, start_batch=k)`, the datasets'
`set_position`, and `dalipipe.BackupAndRestore` in `fit` jobs killed with SIGKILL and
started again (`resume_job.py`), whose steps must be the uninterrupted run's; masks and
boxes natively, and masks in `fit` in the uninterrupted job's process."""

import hashlib
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import dalipipe
from dalipipe.utils import child_env

from helpers import tag_of
from test_masks import dense  # noqa: F401 (the fixture: 8 images with masks and boxes)

TESTS = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(TESTS, "resume_job.py")
OPTIONS = dict(image_size=(12, 12), batch_size=8, normalization=None, verbose=False,
               device="cpu", seed=5)
STEPS = 16  # 121 tagged images in batches of 8
EPOCHS = 4
# Masks (`dense`, `resume_job.dense_runs`): 8 images in batches of 3 (3 steps),
# interrupted after step 1 of epoch 1, with a backup after every step.
DENSE = dict(image_size=(24, 32), batch_size=3, seed=3, device="cpu", verbose=False,
             num_threads=1, augment=True, mask_fill_value=-1)
DENSE_EPOCHS = 3
DENSE_KILL = (1, 1)


def mask_digest(masks):
    """The digest of a batch of int32 masks (rows of -2, past a partial batch's end
    in `resume_job.LastMasks`, left out)."""
    masks = np.asarray(masks).astype(np.int32)
    return hashlib.sha1(masks[masks[:, 0, 0, 0] != -2].tobytes()).hexdigest()


@pytest.mark.parametrize("augment", [False, True])
def test_start_batch_gives_the_rest_of_the_epoch(tagged_dir, augment):
    pipeline = dalipipe.make_dali_pipeline(tagged_dir, augment=augment, **OPTIONS)
    whole = list(pipeline.epoch(2))
    for start in (1, 9, STEPS - 1):
        rest = list(pipeline.epoch(2, start_batch=start))
        assert len(rest) == STEPS - start
        for got, want in zip(rest, whole[start:]):
            for a, b in zip(got, want):
                np.testing.assert_array_equal(a, b)
    ids, randoms, _ = pipeline.epoch_inputs(2)
    rest_ids, rest_randoms, _ = pipeline.epoch_inputs(2, start_batch=9)
    np.testing.assert_array_equal(rest_ids, ids[72:])
    np.testing.assert_array_equal(rest_randoms, randoms[72:])


@pytest.mark.parametrize("kind", ["masks", "boxes"])
def test_start_batch_gives_the_rest_of_an_epoch_of_masks_or_boxes(dense, kind):  # noqa: F811
    targets = (dict(masks=os.path.join(dense, "masks")) if kind == "masks"
               else dict(boxes=os.path.join(dense, "instances.json"), max_boxes=6,
                         bounding_box_format="xyxy"))
    pipeline = dalipipe.make_dali_pipeline(os.path.join(dense, "images"), **DENSE, **targets)
    whole = list(pipeline.epoch(2))
    rest = list(pipeline.epoch(2, start_batch=1))
    assert len(whole) == 3 and len(rest) == 2
    for got, want in zip(rest, whole[1:]):
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)


def test_start_batch_of_a_shard_counts_global_steps(tagged_dir):
    pipeline = dalipipe.make_dali_pipeline(tagged_dir, **OPTIONS).shard([1], 2)
    ids, _, weights = pipeline.epoch_inputs(1)
    rest_ids, _, rest_weights = pipeline.epoch_inputs(1, start_batch=5)
    np.testing.assert_array_equal(rest_ids, ids[5 * 4:])
    np.testing.assert_array_equal(rest_weights, weights[5 * 4:])


@pytest.mark.parametrize("start_batch", [-1, STEPS, 1.5, True])
def test_start_batch_outside_the_epoch_raises(tagged_dir, start_batch):
    pipeline = dalipipe.make_dali_pipeline(tagged_dir, **OPTIONS)
    with pytest.raises(ValueError, match=r"`start_batch` must be an integer in \[0, 16\)"):
        pipeline.epoch_inputs(0, start_batch=start_batch)


def test_pydataset_set_position_gives_the_rest_then_whole_epochs(tagged_dir):
    dataset = dalipipe.make_dali_dataset(tagged_dir, format="pydataset", **OPTIONS)
    pipeline = dalipipe.make_dali_pipeline(tagged_dir, **OPTIONS)
    dataset.set_position(3, 10)
    assert dataset.num_batches == len(dataset) == STEPS - 10
    got = [tag_of(image) for i in range(len(dataset)) for image in dataset[i][0]]
    assert got == [tag_of(image) for images, _ in pipeline.epoch(3, start_batch=10)
                   for image in images]
    assert dataset.num_batches == STEPS  # the resumed pass was read whole
    got = [tag_of(image) for i in range(STEPS) for image in dataset[i][0]]
    assert len(dataset) == STEPS
    assert got == [tag_of(image) for images, _ in pipeline.epoch(4) for image in images]
    with pytest.raises(ValueError, match="`epoch` must be a non-negative integer"):
        dataset.set_position(-1, 0)


def write_backup(directory, image_pipeline):
    """A backup in `directory` of weights and the position (1, 3) of `image_pipeline`."""
    from dalipipe.fingerprint import fingerprint
    from resume_job import tag_model

    folder = directory / "backup-1"
    folder.mkdir(parents=True)
    tag_model().save_weights(str(folder / "model.weights.h5"))
    (folder / "state.json").write_text(json.dumps(
        {"epoch": 1, "batch": 3, "fingerprint": fingerprint(image_pipeline)}))


def test_a_backup_of_another_dataset_raises_naming_what_differs(tagged_dir, tmp_path):
    made = dalipipe.make_dali_pipeline(tagged_dir, **OPTIONS)
    write_backup(tmp_path / "backup", made)
    same = dalipipe.make_dali_dataset(tagged_dir, format="pydataset", **OPTIONS)
    assert dalipipe.BackupAndRestore(str(tmp_path / "backup"), same).position == (1, 3)
    assert len(same) == STEPS - 3
    other = dalipipe.make_dali_dataset(tagged_dir, format="pydataset",
                                       **dict(OPTIONS, seed=6, batch_size=4, augment=True))
    with pytest.raises(ValueError, match="another dataset: what differs: augment, "
                                         "batch_size, seed, steps"):
        dalipipe.BackupAndRestore(str(tmp_path / "backup"), other)


def test_the_check_and_gpu_decoder_settings_are_not_part_of_the_fingerprint(tagged_dir):
    # They change neither the samples nor the crops; the size hints are filled from
    # what the check read, so they differ between runs with and without it.
    from dalipipe.fingerprint import differences, fingerprint

    checked = fingerprint(dalipipe.make_dali_pipeline(tagged_dir, **OPTIONS))
    unchecked = fingerprint(dalipipe.make_dali_pipeline(
        tagged_dir, **dict(OPTIONS, check=None, decoder={"hw_decoder_load": 0.0})))
    assert differences(checked, unchecked) == ""
    other = fingerprint(dalipipe.make_dali_pipeline(tagged_dir, **dict(OPTIONS, seed=6)))
    assert differences(checked, other).startswith("seed")


# One other value per option (with what it needs), for the fingerprint's test.
CHANGED = {
    "labels": dict(labels=None), "label_mode": dict(label_mode="categorical"),
    "class_names": dict(class_names=["a", "b"]), "color_mode": dict(color_mode="grayscale"),
    "batch_size": dict(batch_size=4), "image_size": dict(image_size=(8, 8)),
    "shuffle": dict(shuffle=False), "seed": dict(seed=6),
    "validation_split": dict(validation_split=0.2, subset="training"),
    "subset": dict(validation_split=0.2, subset="validation"),
    "interpolation": dict(interpolation="nearest"), "follow_links": dict(follow_links=True),
    "crop_to_aspect_ratio": dict(crop_to_aspect_ratio=True),
    "pad_to_aspect_ratio": dict(pad_to_aspect_ratio=True),
    "data_format": dict(data_format="channels_first"), "format": dict(format="pydataset"),
    "verbose": dict(verbose=True), "path_column": dict(path_column="file"),
    "label_columns": dict(label_columns="age", label_mode="raw"), "root": dict(root="/data"),
    "antialias": dict(antialias=True), "central_fraction": dict(central_fraction=0.5),
    "augment": dict(augment=True), "mix": dict(mix="mixup", label_mode="categorical"),
    "normalization": dict(normalization="imagenet"), "dtype": dict(dtype="float16"),
    "drop_remainder": dict(drop_remainder=True), "class_weight": dict(class_weight={0: 2.0}),
    "masks": dict(masks="masks/"), "mask_fill_value": dict(mask_fill_value=255),
    "boxes": dict(boxes="instances.json"),
    "bounding_box_format": dict(bounding_box_format="yxyx"),
    "max_boxes": dict(max_boxes=7), "min_box_visibility": dict(min_box_visibility=0.5),
    "box_crop": dict(box_crop=True, boxes="instances.json", augment=True),
    "output": dict(output="dict", masks="masks/"),
    "device": dict(device="gpu"), "num_threads": dict(num_threads=3),
    "prefetch_queue_depth": dict(prefetch_queue_depth=3),
    "decoder": dict(decoder={"hw_decoder_load": 0.9}), "check": dict(check=None),
    "cache": dict(cache="memory"),
    "on_bad_file": dict(on_bad_file="skip"),
}


def test_the_fingerprint_holds_exactly_the_options_declared_to_change_the_data(tagged_dir):
    """Each option is declared once, in `Options` (`option(default, data=...)`); the
    fingerprint holds those declared to change the data, and changes with each of
    them and with nothing else."""
    from dalipipe.fingerprint import fingerprint
    from dalipipe.options import Options
    from dalipipe.pipeline import ImagePipeline

    made = dalipipe.make_dali_pipeline(tagged_dir, **OPTIONS)
    saved = fingerprint(made)
    assert set(saved) == {"files", "steps", "shard", *Options.data_names()}
    assert set(CHANGED) == set(Options.names())
    for name, changes in CHANGED.items():
        other = fingerprint(ImagePipeline(made.index, made.options.replace(**changes)))
        differs = {k for k in saved if saved[k] != other[k]}
        if name in Options.data_names():
            assert name in differs and differs <= {*changes, "steps"}, (name, differs)
        else:
            assert differs == set(), (name, differs)


def test_a_backup_of_the_antialiased_default_is_refused(tagged_dir, tmp_path):
    """`antialias` is in the fingerprint: a backup made with `antialias=True` does not
    resume a dataset made with the default, False, and resumes one with True."""
    made = dalipipe.make_dali_pipeline(tagged_dir, antialias=True, **OPTIONS)
    write_backup(tmp_path / "backup", made)
    dataset = dalipipe.make_dali_dataset(tagged_dir, format="pydataset", **OPTIONS)
    with pytest.raises(ValueError, match=re.escape(
            "another dataset: what differs: antialias (antialias: saved 'True', "
            "dataset 'False')")):
        dalipipe.BackupAndRestore(str(tmp_path / "backup"), dataset)
    same = dalipipe.make_dali_dataset(tagged_dir, format="pydataset", antialias=True, **OPTIONS)
    assert dalipipe.BackupAndRestore(str(tmp_path / "backup"), same).position == (1, 3)


def test_a_refused_backup_says_in_a_few_words_what_differs(tagged_dir, tmp_path):
    # A changed file list or labels list is named by its counts or its first
    # differing item, not printed whole.
    import shutil

    labels = [i % 3 for i in range(121)]
    made = dalipipe.make_dali_pipeline(tagged_dir, labels=labels, **OPTIONS)
    write_backup(tmp_path / "backup", made)
    relabelled = list(labels)
    relabelled[7] = 2
    dataset = dalipipe.make_dali_dataset(tagged_dir, format="pydataset", labels=relabelled,
                                         **OPTIONS)
    with pytest.raises(ValueError) as refused:
        dalipipe.BackupAndRestore(str(tmp_path / "backup"), dataset)
    assert "what differs: labels (labels: 121 items in both, the first differing at [7]: " \
           "saved 1, dataset 2). Resume" in str(refused.value)
    assert len(str(refused.value)) < 500, str(refused.value)
    fewer = tmp_path / "fewer"
    shutil.copytree(tagged_dir, fewer)
    os.remove(fewer / "blue" / "tag_000.png")
    dataset = dalipipe.make_dali_dataset(str(fewer), format="pydataset",
                                         labels=labels[1:], **OPTIONS)
    with pytest.raises(ValueError, match=r"what differs: files, labels, steps \(files: 121 "
                                         r"files in the backup, 120 in the dataset; labels: "
                                         r"121 items in the backup, 120 in the dataset, the "
                                         r"first differing at \[0\]: saved 0, dataset 1; "
                                         r"steps: saved 16, dataset 15\)"):
        dalipipe.BackupAndRestore(str(tmp_path / "backup"), dataset)


def test_bad_arguments_raise(tagged_dir, tmp_path):
    dataset = dalipipe.make_dali_dataset(tagged_dir, format="pydataset", **OPTIONS)
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(OSError, match="`backup_dir` must be a folder that can be written"):
        dalipipe.BackupAndRestore(str(blocker / "backup"), dataset)
    with pytest.raises(ValueError, match="`dataset` must be the training dataset"):
        dalipipe.BackupAndRestore(str(tmp_path / "b"), [1, 2])
    with pytest.raises(ValueError, match="`save_freq` must be"):
        dalipipe.BackupAndRestore(str(tmp_path / "b"), dataset, save_freq=0)


def run_job(backend, tagged_dir, backup_dir, records, kill="", dense=None):  # noqa: F811
    """Runs `resume_job.py` (with `dense`, also its masks' runs); returns its return
    code (-9 when killed) and stdout."""
    pytest.importorskip(backend)
    environ = child_env(KERAS_BACKEND=backend, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3")
    process = subprocess.run([sys.executable, JOB, tagged_dir, str(backup_dir), str(records),
                              kill, *([dense] if dense else [])], env=environ,
                             capture_output=True, text=True, timeout=300, cwd=TESTS)
    assert process.returncode in (0, -9), process.stderr[-4000:]
    return process.returncode, process.stdout


def read_runs(records):
    """The runs in `records`: a list per run of its lines."""
    runs = []
    with open(records) as f:
        for line in f:
            record = json.loads(line)
            if "start" in record:
                runs.append([])
            runs[-1].append(record)
    return runs


def steps_of(run, before=None):
    """`(epoch, batch, tags)` of a run's steps (those before position `before`)."""
    return [(r["epoch"], r["batch"], r["tags"]) for r in run if "tags" in r
            and (before is None or (r["epoch"], r["batch"]) < tuple(before))]


def check_resumed(backend, tagged_dir, tmp_path, kill):
    """Kills a run as `kill` says, starts it again, and checks its steps."""
    records = tmp_path / "killed.jsonl"
    assert run_job(backend, tagged_dir, tmp_path / "backup", records, kill)[0] == -9
    left = sorted(os.listdir(tmp_path / "backup"))
    code, printed = run_job(backend, tagged_dir, tmp_path / "backup", records)
    assert code == 0
    killed, resumed = read_runs(records)
    start = resumed[0]["start"]
    assert start > [2, 0], start  # the backup of epoch 2 was restored
    seen = steps_of(killed, before=start) + steps_of(resumed)
    # What the uninterrupted run sees (checked against a real run in the slow test).
    pipeline = dalipipe.make_dali_pipeline(tagged_dir, **OPTIONS)
    want = [(epoch, batch, [tag_of(image) for image in images])
            for epoch in range(EPOCHS) for batch, (images, _) in enumerate(pipeline.epoch(epoch))]
    assert seen == want
    # The resumed epoch's progress bar counts its remaining steps, the next ones all.
    announced = [(r["epoch_begin"], r["steps"]) for r in resumed if "epoch_begin" in r]
    assert announced == [(start[0], STEPS - start[1])] + [
        (e, STEPS) for e in range(start[0] + 1, EPOCHS)]
    bars = [tuple(map(int, bar)) for bar in re.findall(r"^(\d+)/(\d+) - ", printed, re.M)]
    assert bars == [(STEPS - start[1],) * 2] + [(STEPS, STEPS)] * (EPOCHS - 1 - start[0])
    # No "ran out of data"; the user's callback counted each step once.
    assert resumed[-1] == {"warnings": [], "counted": EPOCHS * STEPS}
    assert not os.path.exists(tmp_path / "backup")  # delete_checkpoint=True
    return start, left


@pytest.mark.slow  # killed and rerun processes
def test_a_run_killed_during_a_backup_write_resumes_from_the_previous_one(tagged_dir,
                                                                          tmp_path):
    # Backups every 3 steps: the 12th is written after step 4 of epoch 2 (global 36),
    # so the 11th, after its first step, is restored.
    start, left = check_resumed("tensorflow", tagged_dir, tmp_path, "write:12")
    assert start == [2, 1]
    assert left[1] == "backup-11" and left[0].startswith(".writing-"), left


@pytest.mark.slow
def test_the_uninterrupted_run_sees_the_native_epochs(tagged_dir, tmp_path, dense):  # noqa: F811
    """The same process then fits masks uninterrupted, interrupted and resumed
    (`resume_job.dense_runs`), from a folder and from tar shards of it: the resumed
    steps are the uninterrupted run's, and those are the folder's native epochs'
    masks."""
    records = tmp_path / "whole.jsonl"
    assert run_job("tensorflow", tagged_dir, tmp_path / "backup", records, dense=dense)[0] == 0
    (run,) = read_runs(records)
    pipeline = dalipipe.make_dali_pipeline(tagged_dir, **OPTIONS)
    assert steps_of(run) == [
        (epoch, batch, [tag_of(image) for image in images])
        for epoch in range(EPOCHS) for batch, (images, _) in enumerate(pipeline.epoch(epoch))]
    masks = dalipipe.make_dali_pipeline(os.path.join(dense, "images"),
                                        masks=os.path.join(dense, "masks"), **DENSE)
    want = [[epoch, step, mask_digest(batch)] for epoch in range(DENSE_EPOCHS)
            for step, (_, batch) in enumerate(masks.epoch(epoch))]
    for runs in (run[-1]["dense"], run[-1]["dense"]["shards"]):
        assert runs["whole"]["steps"] == want
        kill = list(DENSE_KILL)
        assert runs["killed"]["steps"] == [s for s in want if s[:2] <= kill]
        start = runs["resumed"]["start"]
        # The backup after the interrupted step is written at the next step's start
        # (all callbacks have seen the step then): lost with the interruption, as with
        # SIGKILL, so the resumed run trains that step again.
        assert start == kill
        assert runs["resumed"]["steps"] == [s for s in want if s[:2] >= start]


def test_double_checkpoint_restores_the_older_backup_when_the_newer_is_broken(
        tagged_dir, tmp_path):
    import keras

    from resume_job import tag_model

    dataset = dalipipe.make_dali_dataset(tagged_dir, format="pydataset", **OPTIONS)
    backup_dir = str(tmp_path / "backup")
    model = tag_model()
    backup = dalipipe.BackupAndRestore(backup_dir, dataset, save_freq=5,
                                       delete_checkpoint=False, double_checkpoint=True)
    model.fit(dataset, epochs=1, verbose=0, callbacks=[backup])
    names = sorted(os.listdir(backup_dir))
    assert names == ["backup-2", "backup-3"]  # of those after steps 5, 10 and 15
    states = [json.loads((tmp_path / "backup" / n / "state.json").read_text()) for n in names]
    assert [(s["epoch"], s["batch"]) for s in states] == [(0, 10), (0, 15)]
    (tmp_path / "backup" / "backup-3" / "model.weights.h5").write_bytes(b"broken")
    assert dalipipe.BackupAndRestore(backup_dir, dataset, double_checkpoint=True).position \
        == (0, 10)
    with pytest.raises(OSError):
        dalipipe.BackupAndRestore(backup_dir, dataset)
    with pytest.raises(ValueError, match="`steps_per_epoch` must be None or its 16 steps"):
        model.fit(dataset, epochs=1, steps_per_epoch=5, verbose=0,
                  callbacks=[dalipipe.BackupAndRestore(str(tmp_path / "b2"), dataset)])
    assert isinstance(backup, keras.callbacks.BackupAndRestore)


def test_fit_on_another_dataset_than_the_callbacks_raises(tagged_dir, tmp_path):
    from resume_job import tag_model

    dataset = dalipipe.make_dali_dataset(tagged_dir, format="pydataset", **OPTIONS)
    other = dalipipe.make_dali_dataset(tagged_dir, format="pydataset", **OPTIONS)
    with pytest.raises(ValueError, match="`fit` must train on the `dataset` given to"):
        tag_model().fit(other, epochs=1, verbose=0,
                        callbacks=[dalipipe.BackupAndRestore(str(tmp_path / "b"), dataset)])


@pytest.mark.parametrize("start", [3, STEPS - 1])
def test_tf_set_position_over_tfrecords_gives_the_rest_then_whole_epochs(
        tagged_tfrecords, start):
    """TFRecord records go one per sample, a partial last batch as a second DALI
    dataset: the rest of an epoch may hold both parts, or the last alone."""
    pytest.importorskip("tensorflow")
    options = dict(OPTIONS, augment=True)
    dataset = dalipipe.make_dali_dataset(tagged_tfrecords, format="tf", **options)
    pipeline = dalipipe.make_dali_pipeline(tagged_tfrecords, **options)
    dataset.set_position(1, start)
    assert int(dataset.cardinality()) == STEPS - start
    for epoch, first in ((1, start), (2, 0)):
        got = [images.numpy() for images, _ in dataset]
        want = [images for images, _ in pipeline.epoch(epoch, start_batch=first)]
        assert len(got) == len(want) == STEPS - first
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
    assert int(dataset.cardinality()) == STEPS


def test_a_distributed_dataset_is_refused(tagged_dir, tmp_path):
    tf = pytest.importorskip("tensorflow")
    dataset = dalipipe.make_dali_dataset(
        tagged_dir, strategy=tf.distribute.OneDeviceStrategy("/cpu:0"), **OPTIONS)
    with pytest.raises(ValueError, match="without `strategy`"):
        dalipipe.BackupAndRestore(str(tmp_path / "b"), dataset)


@pytest.mark.gpu
def test_the_rest_of_an_epoch_on_the_gpu(tagged_dir):
    """Natively and through TensorFlow's GPU-placed dataset: the rest of an epoch is
    the whole epoch's batches from its step on."""
    options = dict(OPTIONS, device="gpu", augment=True)
    pipeline = dalipipe.make_dali_pipeline(tagged_dir, **options)
    whole = [images for images, _ in pipeline.epoch(2)]
    rest = [images for images, _ in pipeline.epoch(2, start_batch=9)]
    for a, b in zip(rest, whole[9:], strict=True):
        np.testing.assert_array_equal(a, b)
    tf = pytest.importorskip("tensorflow")
    if not tf.config.list_physical_devices("GPU"):
        pytest.skip("TensorFlow sees no GPU")
    dataset = dalipipe.make_dali_dataset(tagged_dir, format="tf", **options)
    dataset.set_position(2, 9)
    got = [images.numpy() for images, _ in dataset]
    for a, b in zip(got, whole[9:], strict=True):
        np.testing.assert_allclose(a, b, atol=1)  # one decoder, the same crops


# The callbacks' state. A program killed in epoch 3 (an exception stands for the
# kill: the pending backup is lost and `on_train_end` is not called) and started again
# with new callbacks, against the uninterrupted run. A `Score` callback gives each
# epoch a known monitored value, the best at epoch 1, before the kill.
SCORES = [3.0, 1.0, 2.0, 2.5, 2.7, 2.9]
KILL_AT = (3, 5)  # after step 5 of epoch 3: the backup after its step 3 is restored


class Killed(Exception):
    """Stands for SIGKILL."""


def score_callbacks(tmp_path):
    """`Score`, then Keras's stateful callbacks monitoring it, then a user's."""
    import keras

    from resume_job import Score, StepCount

    return [
        Score(SCORES),
        keras.callbacks.ModelCheckpoint(str(tmp_path / "best.weights.h5"), monitor="score",
                                        mode="min", save_best_only=True,
                                        save_weights_only=True),
        keras.callbacks.EarlyStopping(monitor="score", mode="min", patience=3,
                                      restore_best_weights=True),
        keras.callbacks.ReduceLROnPlateau(monitor="score", mode="min", patience=1,
                                          factor=0.5, cooldown=1),
        StepCount(),
    ]


def fit_killed_or_not(tagged_dir, backup_dir, callbacks, kill_at=None):
    """`fit` for `len(SCORES)` epochs in a new model and dataset, as a started
    program does, with a backup every 4 steps; stopped at `kill_at` `(epoch, step)`."""
    import keras

    from resume_job import tag_model

    class Kill(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_end(self, batch, logs=None):
            if (self.epoch, batch) == kill_at:
                raise Killed()

    dataset = dalipipe.make_dali_dataset(tagged_dir, format="pydataset", **OPTIONS)
    model = tag_model()
    backup = dalipipe.BackupAndRestore(str(backup_dir), dataset, save_freq=4)
    try:
        model.fit(dataset, epochs=len(SCORES), verbose=0,
                  callbacks=[backup, *callbacks, Kill()])
    except Killed:
        pass
    return model


@pytest.fixture(scope="module")
def three_runs(tagged_dir, tmp_path_factory):
    """The callbacks of the killed run, of the resumed one and of the uninterrupted one
    (with the bytes of ModelCheckpoint's file after the kill, and each final model)."""
    tmp_path = tmp_path_factory.mktemp("callbacks")
    killed = score_callbacks(tmp_path)
    killed_model = fit_killed_or_not(tagged_dir, tmp_path / "backup", killed, KILL_AT)
    checkpointed = (tmp_path / "best.weights.h5").read_bytes()
    resumed = score_callbacks(tmp_path)
    resumed_model = fit_killed_or_not(tagged_dir, tmp_path / "backup", resumed)
    (tmp_path / "whole").mkdir()
    whole = score_callbacks(tmp_path / "whole")
    whole_model = fit_killed_or_not(tagged_dir, tmp_path / "whole-backup", whole)
    return dict(killed=killed, resumed=resumed, whole=whole, checkpointed=checkpointed,
                checkpoint=(tmp_path / "best.weights.h5").read_bytes(), models=dict(
                    killed=killed_model, resumed=resumed_model, whole=whole_model))


def test_a_resumed_model_checkpoint_keeps_its_best_value_and_file(three_runs):
    killed, resumed, whole = (three_runs[k][1] for k in ("killed", "resumed", "whole"))
    assert killed.best == resumed.best == whole.best == 1.0
    # Epoch 3's score, 2.5, is no improvement: the best epoch's weights stay.
    assert three_runs["checkpoint"] == three_runs["checkpointed"]


def test_a_resumed_early_stopping_stops_when_the_uninterrupted_one_does(three_runs):
    resumed, whole = three_runs["resumed"][2], three_runs["whole"][2]
    assert (resumed.stopped_epoch, resumed.wait, resumed.best, resumed.best_epoch) == \
        (whole.stopped_epoch, whole.wait, whole.best, whole.best_epoch) == (4, 3, 1.0, 1)
    # The best weights, of epoch 1 before the kill, are restored at the end.
    best = three_runs["killed"][2].best_weights
    final = three_runs["models"]["resumed"].get_weights()
    assert len(final) == len(best)
    for a, b in zip(final, best):
        np.testing.assert_array_equal(a, b)


def test_a_resumed_reduce_lr_on_plateau_counts_as_the_uninterrupted_one(three_runs):
    import keras

    resumed, whole = three_runs["resumed"][3], three_runs["whole"][3]
    assert (resumed.best, resumed.wait, resumed.cooldown_counter) == \
        (whole.best, whole.wait, whole.cooldown_counter) == (1.0, 0, 1)
    rates = [float(keras.ops.convert_to_numpy(three_runs["models"][k].optimizer.learning_rate))
             for k in ("resumed", "whole")]
    assert rates == [pytest.approx(0.05 / 8)] * 2  # lowered at epochs 2, 3 and 4


def test_a_user_callback_with_get_state_counts_every_step_once(three_runs):
    # The backup after step 3 of epoch 3 is written when step 4 begins: it holds the
    # count of the callbacks after it in the list too.
    assert three_runs["killed"][4].steps == 3 * STEPS + KILL_AT[1] + 1
    assert three_runs["resumed"][4].steps == three_runs["whole"][4].steps == 5 * STEPS


def test_a_callback_without_saved_state_starts_fresh_with_a_warning(tagged_dir, tmp_path):
    import keras

    callbacks = score_callbacks(tmp_path)
    fit_killed_or_not(tagged_dir, tmp_path / "backup", callbacks[:2], kill_at=(1, 2))
    # Restarted with EarlyStopping where ModelCheckpoint was: neither has state.
    restarted = [callbacks[0], score_callbacks(tmp_path)[2], score_callbacks(tmp_path)[1]]
    with pytest.warns(UserWarning) as caught:
        fit_killed_or_not(tagged_dir, tmp_path / "backup", restarted, kill_at=(1, 5))
    said = [str(w.message) for w in caught if "starts fresh" in str(w.message)]
    assert len(said) == 2, said
    # Raised inside Keras's `fit`: each names the test's line that called `fit`.
    tests = os.path.dirname(os.path.abspath(__file__))
    assert {os.path.dirname(os.path.abspath(w.filename)) for w in caught
            if "starts fresh" in str(w.message)} == {tests}
    assert said[0].startswith("EarlyStopping (`callbacks[2]` of `fit`) starts fresh: the "
                              "backup in ")
    assert "the backup holds: ModelCheckpoint at 2)" in said[0]
    assert said[1].startswith("ModelCheckpoint (`callbacks[3]` of `fit`) starts fresh")
    assert restarted[2].best is None and isinstance(restarted[1], keras.callbacks.EarlyStopping)


def test_a_get_state_that_is_not_json_raises_naming_the_callback(tagged_dir, tmp_path):
    from resume_job import StepCount

    class Unsaveable(StepCount):
        def get_state(self):
            return {"steps": np.arange(3)}

    with pytest.raises(TypeError, match=r"`get_state\(\)` of the callback .*Unsaveable "
                                        r"must return a dict of JSON values"):
        fit_killed_or_not(tagged_dir, tmp_path / "backup", [Unsaveable()])
