"""`fit` with `dalipipe.BackupAndRestore` in its own process, to be killed (`test_resume.py`).

    KERAS_BACKEND=tensorflow python resume_job.py TAGGED_DIR BACKUP_DIR RECORDS [KILL [DENSE_DIR]]

Trains `EPOCHS` epochs on `tagged_dir` (see `conftest.py`) with a backup every
`SAVE_FREQ` steps, prints Keras's progress bar at each epoch's end (`verbose=2`),
and appends to RECORDS one JSON line per step trained (the epoch, the step's batch
number in the whole epoch, and the tags of its samples, read from the pixels the
model saw), one per epoch begun (with the steps that `fit` announces for it), and a
last line with Keras's "ran out of data" warnings and the steps that a `StepCount`
callback, whose state the backups hold, counted. KILL `at:E,B` sends the process
SIGKILL after step B of epoch E; `write:N` during the N-th backup's write, after its
files and before the rename.

With DENSE_DIR (sample data with masks), the same process then trains a segmentation
model on its masks three times (`dense_runs`): uninterrupted, interrupted by an
exception (which stands for the kill) and resumed from the backup; then the same three
on tar shards written from it by `dalipipe convert --masks` (`masks=".seg.png"`). A
last line holds the digest of the masks each step trained on.
"""

import json
import os
import signal
import sys
import warnings

import keras
from keras import ops

import dalipipe
import backend_job
from test_resume import DENSE, DENSE_EPOCHS, DENSE_KILL, mask_digest

BATCH = 8
EPOCHS = 4
SAVE_FREQ = 3
OPTIONS = dict(image_size=(12, 12), batch_size=BATCH, normalization=None, verbose=False,
               device="cpu", seed=5)


class LastTags(keras.metrics.Metric):
    """The tags of the last batch's samples (-1 past a partial batch's end)."""

    def __init__(self, name="last_tags"):
        super().__init__(name=name)
        self.tags = self.add_variable(shape=(BATCH,), initializer="zeros", name="tags")

    def update_state(self, y_true, y_pred, sample_weight=None):
        tags = ops.round(y_pred[:, -1])
        padded = ops.concatenate([tags, -ops.ones((BATCH,), tags.dtype)])[:BATCH]
        self.tags.assign(padded)

    def result(self):
        return ops.sum(self.tags)


def tag_model():
    """`backend_job`'s model (class logits, then the image's tag), reporting `LastTags`."""
    model = backend_job.tag_model()
    model.compile(keras.optimizers.Adam(0.05), loss=backend_job.class_loss,
                  metrics=[LastTags()])
    return model


class Recorder(keras.callbacks.Callback):
    """Appends each step's samples to `path`, and kills the process at `kill_at`."""

    def __init__(self, path, steps, kill_at=None):
        super().__init__()
        self.file = open(path, "a")
        self.steps = steps
        self.kill_at = kill_at

    def write(self, record):
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()
        os.fsync(self.file.fileno())

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch
        self.offset = self.steps - self.params["steps"]  # the steps a resumed epoch skips
        self.write({"epoch_begin": epoch, "steps": self.params["steps"]})

    def on_train_batch_end(self, batch, logs=None):
        metric = next(m for m in _metrics(self.model) if isinstance(m, LastTags))
        tags = [int(t) for t in ops.convert_to_numpy(metric.tags) if t >= 0]
        self.write({"epoch": self.epoch, "batch": self.offset + batch, "tags": tags})
        if self.kill_at == (self.epoch, self.offset + batch):
            os.kill(os.getpid(), signal.SIGKILL)


class StepCount(keras.callbacks.Callback):
    """Counts the steps trained; its count is in the backups (`get_state` / `set_state`)."""

    def __init__(self):
        super().__init__()
        self.steps = 0

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1

    def get_state(self):
        return {"steps": self.steps}

    def set_state(self, state):
        self.steps = state["steps"]


class Score(keras.callbacks.Callback):
    """Adds `scores[epoch]` to the logs of each epoch's end, as `score`: a monitored
    value known in advance (for the callbacks after it in `callbacks`)."""

    def __init__(self, scores):
        super().__init__()
        self.scores = scores

    def on_epoch_end(self, epoch, logs=None):
        logs["score"] = self.scores[epoch]


def _metrics(model):
    for metric in model.metrics:
        yield metric
        yield from getattr(metric, "metrics", [])


class KilledInWrite(dalipipe.BackupAndRestore):
    """Killed during its `write`-th backup, its files written, not yet renamed."""

    write = None
    written = 0

    def _write_backup(self, folder, state):
        super()._write_backup(folder, state)
        type(self).written += 1
        if type(self).written == self.write:
            os.kill(os.getpid(), signal.SIGKILL)


class LastMasks(keras.metrics.Metric):
    """The masks of the last batch (rows of -2 past a partial batch's end)."""

    def __init__(self, name="last_masks"):
        super().__init__(name=name)
        self.shape = (DENSE["batch_size"], *DENSE["image_size"], 1)
        self.masks = self.add_variable(shape=self.shape, initializer="zeros", name="masks")

    def update_state(self, y_true, y_pred, sample_weight=None):
        masks = ops.cast(y_true, "float32")
        self.masks.assign(ops.concatenate([masks, -2 * ops.ones(self.shape)])[:self.shape[0]])

    def result(self):
        return ops.sum(self.masks)


class Interrupted(Exception):
    """Stands for SIGKILL."""


class MaskSteps(keras.callbacks.Callback):
    """`[epoch, step, digest of its masks]` of each step trained; raises `Interrupted`
    after step `kill_at`."""

    def __init__(self, steps, kill_at=None):
        super().__init__()
        self.steps, self.kill_at, self.seen = steps, kill_at, []

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch, self.offset = epoch, self.steps - self.params["steps"]

    def on_train_batch_end(self, batch, logs=None):
        metric = next(m for m in _metrics(self.model) if isinstance(m, LastMasks))
        self.seen.append([self.epoch, self.offset + batch,
                          mask_digest(ops.convert_to_numpy(metric.masks))])
        if (self.epoch, self.offset + batch) == self.kill_at:
            raise Interrupted()


def dense_fit(source, masks, backup_dir, kill_at=None):
    """A new masks dataset, model and `BackupAndRestore` in `backup_dir`, as a started
    program makes them; `fit` until the end or `kill_at`. Returns the steps trained."""
    from dalipipe.annotations.sample import MASK_CLASS_NAMES

    train = dalipipe.make_dali_dataset(source, masks=masks,
                                       class_names=list(MASK_CLASS_NAMES), **DENSE)
    backup = dalipipe.BackupAndRestore(backup_dir, train, save_freq=1)
    model = keras.Sequential([keras.Input((*DENSE["image_size"], 3)),
                              keras.layers.Rescaling(1 / 255),
                              keras.layers.Conv2D(len(MASK_CLASS_NAMES), 1)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                                     ignore_class=-1),
                  metrics=[LastMasks()])
    steps, start = MaskSteps(train.image_pipeline.steps, kill_at), list(backup.position)
    try:
        model.fit(train, epochs=DENSE_EPOCHS, verbose=0, callbacks=[backup, steps])
    except Interrupted:
        pass
    return {"start": start, "steps": steps.seen}


def dense_runs(dense_dir, backup_dir):
    """The masks' runs: uninterrupted, interrupted at `DENSE_KILL`, resumed; from the
    folder, and under `"shards"` from tar shards of it."""
    from dalipipe.cli import main as cli

    images, masks = os.path.join(dense_dir, "images"), os.path.join(dense_dir, "masks")
    shards = backup_dir + "-shards"
    assert cli(["convert", images, shards, "--shards", "2", "--format", "webdataset",
                "--masks", masks]) == 0
    found = {}
    for name, source, target in (("folder", images, masks),
                                 ("shards", os.path.join(shards, "train-*.tar"), ".seg.png")):
        found[name] = {
            "whole": dense_fit(source, target, f"{backup_dir}-{name}-whole"),
            "killed": dense_fit(source, target, f"{backup_dir}-{name}", DENSE_KILL),
            "resumed": dense_fit(source, target, f"{backup_dir}-{name}")}
    return {**found.pop("folder"), **found}


def main(tagged_dir, backup_dir, records, kill="", dense_dir=None):
    train = dalipipe.make_dali_dataset(tagged_dir, **OPTIONS)
    kill_at = None
    if kill.startswith("at:"):
        kill_at = tuple(int(v) for v in kill[3:].split(","))
    if kill.startswith("write:"):
        KilledInWrite.write = int(kill[6:])
    backup = KilledInWrite(backup_dir, train, save_freq=SAVE_FREQ)
    model = tag_model()
    recorder = Recorder(records, train.image_pipeline.steps, kill_at)
    recorder.write({"start": list(backup.position)})
    counter = StepCount()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(train, epochs=EPOCHS, verbose=2, callbacks=[backup, counter, recorder])
    recorder.write({"warnings": [str(w.message) for w in caught
                                 if "ran out of data" in str(w.message)],
                    "counted": counter.steps})
    if dense_dir:
        recorder.write({"dense": dense_runs(dense_dir, backup_dir)})


if __name__ == "__main__":
    main(*sys.argv[1:])
