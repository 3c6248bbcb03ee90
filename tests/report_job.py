"""`dalipipe.InputReport` on one Keras backend (`test_report.py`), as `backend_job.py`'s
MODE `report` on torch and JAX.

For each format (`"pydataset"`, `"grain"`): a model made slow on purpose (a 40 ms
sleep after each step), with validation, a backup callback (dalipipe's
`BackupAndRestore` or Keras's), `steps_per_execution=2` (JAX; torch takes 1 only)
and a `CSVLogger` after the report; and a trivial model fed by one DALI thread
decoding larger JPEGs (input-bound), with `Gaps`, which measures the wait on its own.
"""

import contextlib
import csv
import io
import os
import tempfile
import time

import numpy as np
from PIL import Image

import keras

import dalipipe
from dalipipe.grain_dataset import DALIGrainIterator
from backend_job import OPTIONS

SLEEP = 0.04  # seconds after each step of the slow model


class Sleep(keras.callbacks.Callback):
    """Makes every training step `SLEEP` seconds longer (an execution of
    `steps_per_execution` steps that many times longer)."""

    def __init__(self, seconds=SLEEP):
        super().__init__()
        self.seconds = seconds

    def on_train_batch_end(self, batch, logs=None):
        time.sleep(self.seconds)


class Gaps(keras.callbacks.Callback):
    """Two measures of each epoch's wait, independent of dalipipe's, as shares of
    its wall time: `shares`, the time outside the training steps (from the epoch's
    start or a step's end to the next step's start: where torch's `fit` gets its
    batches; JAX's gets them inside its train function); `calls`, the time in the
    calls by which Keras takes a batch (`timed_takes`), where they can be timed."""

    def __init__(self, format):
        super().__init__()
        self.shares, self.calls, self.called = [], [], 0.0
        self.restore = timed_takes(format, self.add)

    def add(self, seconds):
        self.called += seconds

    def on_epoch_begin(self, epoch, logs=None):
        self.started = self.last = time.perf_counter()
        self.gaps, self.called_before = 0.0, self.called

    def on_train_batch_begin(self, batch, logs=None):
        self.gaps += time.perf_counter() - self.last

    def on_train_batch_end(self, batch, logs=None):
        self.last = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        wall = time.perf_counter() - self.started
        self.shares.append(self.gaps / wall)
        if self.restore is not None:
            self.calls.append((self.called - self.called_before) / wall)

    def on_train_end(self, logs=None):
        if self.restore is not None:
            self.restore()


def timed_takes(format, add):
    """Times (`add(seconds)`) each call by which Keras takes a batch of `format`: a
    Grain iterator's `__next__`; on JAX, the `PyDataset` adapter's iterator (a frame
    around `DALIPyDataset.__getitem__` would hide Keras's generator from dalipipe).
    Returns the function that undoes it, or None (torch's `"pydataset"`, timed by
    the gaps between steps only)."""
    if format == "grain":
        owner, name = DALIGrainIterator, "__next__"
        taken = owner.__next__

        def timed(self):
            started = time.perf_counter()
            try:
                return taken(self)
            finally:
                add(time.perf_counter() - started)
    elif keras.backend.backend() == "jax":
        from keras.src.trainers.data_adapters.py_dataset_adapter import PyDatasetAdapter

        owner, name = PyDatasetAdapter, "get_jax_iterator"
        taken = owner.get_jax_iterator

        def timed(self):
            batches = taken(self)
            while True:
                started = time.perf_counter()
                try:
                    batch = next(batches)
                except StopIteration:
                    return
                finally:
                    add(time.perf_counter() - started)
                yield batch
    else:
        return None
    setattr(owner, name, timed)
    return lambda: setattr(owner, name, taken)


def small_model(shape, steps_per_execution=1):
    model = keras.Sequential([keras.Input(shape), keras.layers.GlobalAveragePooling2D(),
                              keras.layers.Dense(3)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  steps_per_execution=steps_per_execution)
    return model


def large_images(folder, count=24, size=1024):
    """`count` noisy JPEGs of `size`×`size` in 3 class folders (slow to decode, small once resized)."""
    rng = np.random.default_rng(0)
    for i in range(count):
        path = os.path.join(folder, f"c{i % 3}")
        os.makedirs(path, exist_ok=True)
        pixels = rng.integers(0, 255, (size, size, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(os.path.join(path, f"{i:03d}.jpg"), quality=95)
    return folder


def report_job(tagged_dir):
    """Per format: the slow model's `input_wait` per epoch and what the CSVLogger
    after the report wrote; the input-bound model's, and the independent gaps."""
    result = {"backend": keras.backend.backend()}
    # Keras's torch backend takes `steps_per_execution=1` only.
    per_execution = 1 if result["backend"] == "torch" else 2
    with tempfile.TemporaryDirectory() as folder:
        big = large_images(os.path.join(folder, "big"))
        for format in ("pydataset", "grain"):
            # Batches of 4: 31 steps, 1.2 s of sleep against the first batch's wait.
            train = dalipipe.make_dali_dataset(tagged_dir, seed=7, format=format,
                                               **dict(OPTIONS, batch_size=4))
            log = os.path.join(folder, f"{format}.csv")
            backup = os.path.join(folder, f"backup-{format}")
            # dalipipe's BackupAndRestore takes the "pydataset" format; Keras's, Grain's.
            backups = dalipipe.BackupAndRestore(backup, train) if format == "pydataset" \
                else keras.callbacks.BackupAndRestore(backup)
            history = small_model((12, 12, 3), steps_per_execution=per_execution).fit(
                train, validation_data=train, epochs=3, verbose=0,
                callbacks=[backups, dalipipe.InputReport(), Sleep(SLEEP * per_execution),
                           keras.callbacks.CSVLogger(log)])
            with open(log) as f:
                logged = [float(row["input_wait"]) for row in csv.DictReader(f)]
            bound = dalipipe.make_dali_dataset(
                big, format=format, image_size=(128, 128), batch_size=8, num_threads=1,
                verbose=False, device="cpu", seed=3)
            gaps = Gaps(format)
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                bound_history = small_model((128, 128, 3)).fit(
                    bound, epochs=3, verbose=2, callbacks=[dalipipe.InputReport(), gaps])
            result[format] = {"slow": history.history["input_wait"], "logged": logged,
                              "bound": bound_history.history["input_wait"],
                              "gaps": gaps.shares, "calls": gaps.calls,
                              "lines": [line for line in printed.getvalue().splitlines()
                                        if line.startswith("input_wait")]}
    return result
