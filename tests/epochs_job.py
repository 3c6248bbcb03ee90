"""`fit` on one Keras backend in its own process, for the epoch tests (`test_passes.py`).

    KERAS_BACKEND=torch python epochs_job.py fits TAGGED_DIR OUT_JSON
    KERAS_BACKEND=jax python epochs_job.py run TAGGED_DIR RECORDS BACKUP_DIR [KILL]

`rule` (the epoch rule of `dalipipe.passes`) is run by `backend_job.py`'s MODE
`rule` on torch and JAX, and in pytest's process on TensorFlow.

MODE `fits`: `fit` for 3 epochs with `shuffle=True` and False (the dataset's and
`fit`'s), with and without `validation_data`, each on a new model (so that `fit`
reads a batch up front to build it); writes, per case, which native epoch each
`fit` epoch trained on (-1 for none), and the number of validation passes.

MODE `run`: `fit` for `EPOCHS` epochs with `validation_data` and a
`ModelCheckpoint`, and `dalipipe.BackupAndRestore` every 3 steps unless KILL is
`plain`; appends each step's samples and each epoch's announced steps to RECORDS
(`resume_job.Recorder`), and with KILL `at:E,B` is killed with SIGKILL after step B
of epoch E; at the end, a line with Keras's "ran out of data" warnings and the steps
that a `resume_job.StepCount` callback, whose state the backups hold, counted.

MODE `pipelines` (run by `backend_job.py`): the DALI pipelines that `fit` builds
for the training and the validation datasets, in the "pydataset" and "grain"
formats, over a `fit` on a new model (Keras reads a batch up front to build it,
leaving that pass) and a second `fit`: how many were built, and how many are alive
after them (the garbage collector off meanwhile: the ones freed only when it runs
count as alive), and the inputs built (`dalipipe.ahead`) for them and for a
`fit(initial_epoch=2)` on a new dataset and model.

MODE `interrupted` (`python epochs_job.py interrupted SOURCE`): `fit` on SOURCE
(an `s3://` copy of TAGGED_DIR) for ever, saying "training" on stdout after its
third step; the test stalls the storage and sends SIGINT.
"""

import json
import os
import sys
import warnings

import keras
import numpy as np
from keras import ops

import dalipipe
from backend_job import class_loss
from helpers import tag_of
from resume_job import BATCH, Recorder, StepCount, _metrics, tag_model

EPOCHS = 3
OPTIONS = dict(image_size=(12, 12), batch_size=8, normalization=None, verbose=False,
               device="cpu", seed=5, augment=True)
SPLIT = dict(validation_split=0.25, subset="both")


class LastBatch(keras.metrics.Metric):
    """Each sample of the last batch: its tag and its mean pixel (which the crop and
    flip change), `(BATCH, 2)`, -1 past a partial batch's end."""

    def __init__(self, name="last_batch"):
        super().__init__(name=name)
        self.rows = self.add_variable(shape=(BATCH, 2), initializer="zeros", name="rows")

    def update_state(self, y_true, y_pred, sample_weight=None):
        rows = ops.concatenate([ops.round(y_pred[:, 3:4]), y_pred[:, 4:5]], axis=1)
        self.rows.assign(ops.concatenate([rows, -ops.ones((BATCH, 2), rows.dtype)])[:BATCH])

    def result(self):
        return ops.sum(self.rows)


def signature_model():
    """Class logits from the image, then its tag and its mean pixel."""
    images = keras.Input((12, 12, 3))
    pooled = keras.layers.GlobalAveragePooling2D()(keras.layers.Rescaling(1 / 255)(images))
    logits = keras.layers.Dense(3)(pooled)
    tags = keras.layers.Lambda(lambda x: ops.mean(x[:, -2:], axis=(1, 2, 3))[:, None] / 2)(images)
    means = keras.layers.Lambda(lambda x: ops.mean(x, axis=(1, 2, 3))[:, None])(images)
    model = keras.Model(images, keras.layers.Concatenate()([logits, tags, means]))
    model.compile(keras.optimizers.Adam(0.05), loss=class_loss, metrics=[LastBatch()])
    return model


class Reads(keras.callbacks.Callback):
    """The samples `fit` trained on, `(tag, mean pixel)` per epoch (`LastBatch`)."""

    def on_train_begin(self, logs=None):
        self.epochs = []

    def on_epoch_begin(self, epoch, logs=None):
        self.epochs.append([])

    def on_train_batch_end(self, batch, logs=None):
        metric = next(m for m in _metrics(self.model) if isinstance(m, LastBatch))
        self.epochs[-1] += [row for row in ops.convert_to_numpy(metric.rows).tolist()
                            if row[0] >= 0]


def native_rows(pipeline, epoch):
    return [[tag_of(image), float(np.mean(image))]
            for images, *_ in pipeline.epoch(epoch) for image in images]


def same_samples(seen, want):
    """Whether `seen` and `want` are the same samples, in order, with the same crops."""
    return len(seen) == len(want) and all(
        a[0] == b[0] and abs(a[1] - b[1]) < 1e-3 for a, b in zip(seen, want))


def fits(tagged_dir):
    """See MODE `fits` above."""
    cases = {}
    for shuffle in (True, False):
        for validation in (False, True):
            options = dict(OPTIONS, shuffle=shuffle, **(SPLIT if validation else {}))
            made = dalipipe.make_dali_dataset(tagged_dir, **options)
            natives = dalipipe.make_dali_pipeline(tagged_dir, **options)
            train, val = made if validation else (made, None)
            native = natives[0] if validation else natives
            reads = Reads()
            history = signature_model().fit(train, epochs=EPOCHS, shuffle=shuffle,
                                            validation_data=val, verbose=0, callbacks=[reads])
            want = [native_rows(native, e) for e in range(EPOCHS + 2)]
            case = {"trained_on": [next((e for e, rows in enumerate(want)
                                         if same_samples(seen, rows)), -1)
                                   for seen in reads.epochs],
                    "validation_passes": len(history.history.get("val_loss", []))}
            cases[f"shuffle={shuffle},validation={validation}"] = case
    return {"backend": keras.backend.backend(), "cases": cases}


def pipelines(tagged_dir):
    """See MODE `pipelines` above: `{format: {"built": {split: n}, "alive": {split:
    n}, "trained_on": [...]}}`."""
    import gc
    import weakref

    def watched(image_pipeline):
        """The weak references of the DALI pipelines that `image_pipeline` builds."""
        made, build = [], image_pipeline.build_dali_pipeline

        def recorded(*args, **kwargs):
            pipe = build(*args, **kwargs)
            made.append(weakref.ref(pipe))
            return pipe

        image_pipeline.build_dali_pipeline = recorded
        return made

    native = dalipipe.make_dali_pipeline(tagged_dir, **OPTIONS, **SPLIT)[0]
    natives = [native_rows(native, e) for e in range(3)]
    whole = dalipipe.make_dali_pipeline(tagged_dir, **OPTIONS)
    resumed_native = [native_rows(whole, e) for e in range(3)]
    result = {}
    for format in ("pydataset", "grain"):
        splits = dalipipe.make_dali_dataset(tagged_dir, **OPTIONS, **SPLIT, format=format)
        made = {name: watched(d.image_pipeline) for name, d in zip(("train", "val"), splits)}
        first, second = Reads(), Reads()
        gc.collect()
        gc.disable()
        try:
            model = signature_model()
            model.fit(splits[0], validation_data=splits[1], epochs=2, verbose=0,
                      callbacks=[first])
            model.fit(splits[0], validation_data=splits[1], epochs=3, initial_epoch=2,
                      verbose=0, callbacks=[second])
            alive = {name: sum(ref() is not None for ref in refs) for name, refs in made.items()}
        finally:
            gc.enable()
        result[format] = {"built": {name: len(refs) for name, refs in made.items()},
                          "alive": alive,
                          "trained_on": trained_on(first, natives) + trained_on(second, natives),
                          "inputs_built": list(splits[0].image_pipeline.inputs_ahead.built)}
    # `fit(initial_epoch=2)` on a new dataset and model: Keras's peek reads epoch 0's
    # first batch, while epoch 2's inputs are built.
    dataset = dalipipe.make_dali_dataset(tagged_dir, **OPTIONS)
    reads = Reads()
    signature_model().fit(dataset, epochs=3, initial_epoch=2, verbose=0, callbacks=[reads])
    result["resumed"] = {"inputs_built": list(dataset.image_pipeline.inputs_ahead.built),
                         "trained_on": trained_on(reads, resumed_native)}
    return result


def trained_on(reads, natives):
    """The native epoch each `fit` epoch of `reads` trained on (-1 for none)."""
    return [next((e for e, rows in enumerate(natives) if same_samples(seen, rows)), -1)
            for seen in reads.epochs]


def rule(tagged_dir, format=None):
    """The epoch rule (`dalipipe.passes`) in `format` (the backend's default):
    which native epoch each `fit` epoch trains on, for the manual resume idiom
    (`fit(initial_epoch=2)` on a new dataset and a built model), two `fit`s with
    `evaluate` and `predict` between them, and the dataset as its own
    `validation_data`; in the "pydataset" format, with a callback that reads
    `num_batches` and `len()` after every step, and whether `ds[0]` and `ds[3]` are
    batches 0 and 3 of `epoch(0)` after a `fit` that raised in its first epoch."""
    options = dict(OPTIONS, format=format)
    native = dalipipe.make_dali_pipeline(tagged_dir, **OPTIONS)
    natives = [native_rows(native, e) for e in range(6)]
    result = {}

    def fit(dataset, model, callbacks_extra=(), **kwargs):
        reads = Reads()
        model.fit(dataset, verbose=0, callbacks=[reads, *callbacks_extra], **kwargs)
        return trained_on(reads, natives)

    model = signature_model()
    model.fit(dalipipe.make_dali_dataset(tagged_dir, **options), epochs=1, verbose=0)
    result["resumed"] = fit(dalipipe.make_dali_dataset(tagged_dir, **options), model,
                            epochs=4, initial_epoch=2)
    dataset = dalipipe.make_dali_dataset(tagged_dir, **options)
    first = fit(dataset, signature_model(), epochs=2)
    model.evaluate(dataset, verbose=0)
    model.predict(dataset, verbose=0)
    result["two_fits"] = [first, fit(dataset, model, epochs=1)]
    dataset = dalipipe.make_dali_dataset(tagged_dir, **options)
    result["validation_itself"] = fit(dataset, signature_model(), epochs=3,
                                      validation_data=dataset)
    if format == "pydataset" or (format is None and keras.backend.backend() != "tensorflow"):
        dataset = dalipipe.make_dali_dataset(tagged_dir, **options)
        result["num_batches_read"] = fit(dataset, signature_model(), epochs=2,
                                         callbacks_extra=[ReadsLength(dataset)])
        dataset = dalipipe.make_dali_dataset(tagged_dir, **options)
        try:
            fit(dataset, signature_model(), epochs=1, callbacks_extra=[Raises(at=2)])
        except RuntimeError:
            pass
        rows = [[tag_of(image), float(np.mean(image))]
                for i in (0, 3) for image in ops.convert_to_numpy(dataset[i][0])]
        result["items_after_a_raise"] = same_samples(rows, natives[0][:8] + natives[0][24:32])
    return result


class ReadsLength(keras.callbacks.Callback):
    """Reads the dataset's `num_batches` and `len()` after every step, as a user's
    callback may."""

    def __init__(self, dataset):
        super().__init__()
        self.dataset = dataset

    def on_train_batch_end(self, batch, logs=None):
        assert self.dataset.num_batches == len(self.dataset) > 0


class Raises(keras.callbacks.Callback):
    """Raises RuntimeError after step `at` of the first epoch."""

    def __init__(self, at):
        super().__init__()
        self.at = at

    def on_train_batch_end(self, batch, logs=None):
        if batch == self.at:
            raise RuntimeError("raised by the test")


def run(tagged_dir, records, backup_dir, kill=""):
    """See MODE `run` above."""
    train, val = dalipipe.make_dali_dataset(tagged_dir, **OPTIONS, **SPLIT)
    callbacks = [keras.callbacks.ModelCheckpoint(
        os.path.join(os.path.dirname(records), "best.weights.h5"), monitor="val_loss",
        save_best_only=True, save_weights_only=True)]
    start = (0, 0)
    if kill != "plain":
        backup = dalipipe.BackupAndRestore(backup_dir, train, save_freq=3)
        callbacks.insert(0, backup)
        start = backup.position
    kill_at = tuple(int(v) for v in kill[3:].split(",")) if kill.startswith("at:") else None
    recorder = Recorder(records, train.image_pipeline.steps, kill_at)
    recorder.write({"start": list(start)})
    counter = StepCount()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tag_model().fit(train, epochs=EPOCHS, validation_data=val, verbose=0,
                        callbacks=[*callbacks, counter, recorder])
    recorder.write({"warnings": [str(w.message) for w in caught
                                 if "ran out of data" in str(w.message)],
                    "counted": counter.steps})


def interrupted(source):
    """See MODE `interrupted` above: `fit` on `source`, saying "training" on stdout
    after its third step, then going on until it is interrupted."""

    class Says(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 2:
                print("training", flush=True)

    dataset = dalipipe.make_dali_dataset(source, **dict(OPTIONS, augment=False))
    signature_model().fit(dataset, epochs=100, verbose=0, callbacks=[Says()])


if __name__ == "__main__":
    mode, tagged_dir, *rest = sys.argv[1:]
    if mode == "interrupted":
        import faulthandler
        import signal

        # Every thread's stack on stderr at SIGUSR1: the test asks for it when the
        # process does not exit after SIGINT.
        faulthandler.register(signal.SIGUSR1, all_threads=True)
        interrupted(tagged_dir)
        sys.exit(0)
    out, *rest = rest
    if mode == "fits":
        with open(out, "w") as f:
            json.dump(fits(tagged_dir), f)
    else:
        run(tagged_dir, out, *rest)
