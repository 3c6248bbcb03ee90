"""`BackupAndRestore`: Keras's backup callback, resuming a dalipipe dataset exactly.

The callback saves the model's weights (the optimizer's with them, as Keras's
does) and the data position, the epoch and the next step of a `make_dali_dataset`
dataset, with a fingerprint of the dataset, in one folder written whole and then
renamed into place. On a restart it reads the newest complete backup when it is
made, tells the dataset where to go on (`set_position`), so that the dataset's
length is the resumed epoch's remaining steps when `fit` reads it, and loads the
weights at the start of training, and the state of `fit`'s other callbacks
(`ModelCheckpoint`'s best value, `EarlyStopping`'s and `ReduceLROnPlateau`'s
counters, a user callback's `get_state()`) at the start of the resumed epoch. Each
epoch `e` loads what
`make_dali_pipeline(...).epoch(e)` loads (the order, crops and flips from `seed`
and `e`), the resumed one from its next step (`start_batch`).

Keras's `fit` reads the dataset's length once and makes every epoch that long, so
after the shortened resumed epoch the callback sets the length of the epochs after
it back to the whole epoch's, on `fit`'s epoch iterator and progress bar. Keras 3
hands no callback `fit`'s epoch iterator or callbacks: what is read and written of
Keras's private attributes is in `dalipipe.keras_hooks`. Keras and TensorFlow are
not imported by `import dalipipe`: this module is loaded on first use of the name.
"""

import json
import os
import shutil
import tempfile

import keras

from dalipipe import keras_hooks
from dalipipe.calls import warn
# `fingerprint` and `differences` are also asked for here (`grain_dataset`, the tests).
from dalipipe.fingerprint import differences, fingerprint

_STATE = "state.json"
_WEIGHTS = "model.weights.h5"
_CALLBACK_ARRAYS = "callbacks.h5"  # arrays of the callbacks' state (EarlyStopping's best weights)
_PREFIX = "backup-"



class BackupAndRestore(keras.callbacks.BackupAndRestore):
    """Backs up the training state, and the position in a dalipipe dataset, so that a
    run killed at any step goes on at the next one with the same batches and the
    same callbacks' state.

    A subclass of `keras.callbacks.BackupAndRestore`, whose arguments it shares with
    their meaning. Each backup is a folder `backup-N` in `backup_dir` holding
    `model.weights.h5` (Keras's `save_weights`: the model's and the optimizer's
    variables), `state.json` (`{"epoch", "batch", "fingerprint", "callbacks"}`: the
    next step to train, the dataset's identity and the state of `fit`'s other
    callbacks) and, when a callback holds weights (`EarlyStopping`'s best ones),
    `callbacks.h5`. It is written in a temporary folder then renamed, so that a kill
    during a write leaves the previous backup whole.

    The callbacks whose state is saved are Keras's `ModelCheckpoint` (its best
    value), `EarlyStopping` (its counters, best value and best weights) and
    `ReduceLROnPlateau` (its counters and best value), and any callback that defines
    `get_state()`, returning a dict of JSON values, and `set_state(state)`. They are
    matched by class and position in `fit`'s `callbacks`; one that has no state in
    the backup starts fresh, with a warning naming it.

    A backup is written when the step or epoch after the one it follows begins (or
    when `fit` ends, with `delete_checkpoint=False`), so that it holds what every
    callback did at the end of that step or epoch (a learning rate that
    `ReduceLROnPlateau` lowered, a best value). Put the callback first in
    `callbacks`: then the backup is also written, and the state restored, before any
    other callback begins the step or epoch.

    The position is restored when the callback is made (so the dataset already has
    the resumed epoch's length, `steps - batch`, when `fit` reads it, and the
    progress bar shows the remaining steps); the weights at the start of `fit`; the
    callbacks' state at the start of the resumed epoch, after every callback's
    `on_train_begin` (where `EarlyStopping` and `ReduceLROnPlateau` reset theirs).

    Args:
        backup_dir: the folder of the backups, created if needed; it must be
            writable (checked now) and used by this callback only.
        dataset: the training dataset, as `make_dali_dataset` returned it (a
            `tf.data.Dataset` of the "tf" format or a `DALIPyDataset`), or its
            `map` (`MappedPyDataset`); `fit` trains on it, or on the dataset it maps.
        save_freq: `"epoch"` (a backup at the end of every epoch), an integer `N`
            (also every `N` steps) or False (never).
        delete_checkpoint: delete `backup_dir` when `fit` ends. Defaults to True.
        double_checkpoint: keep the previous backup too, and restore it when the
            newest cannot be read (its state or weights). Defaults to False.

    Attributes:
        position: `(epoch, batch)`, where training goes on (`(0, 0)` without a
            backup).

    Raises:
        ValueError: for a `dataset` that `make_dali_dataset` did not make (or one
            made with `strategy`), for a backup made with another dataset (naming
            what differs), or for an invalid `save_freq`.
        OSError: when `backup_dir` cannot be written.
        TypeError: at a backup, when a callback's `get_state()` returns anything
            but a dict of JSON values.
    """

    def __init__(self, backup_dir, dataset, save_freq="epoch", delete_checkpoint=True,
                 double_checkpoint=False):
        super().__init__(backup_dir, save_freq=save_freq, double_checkpoint=double_checkpoint,
                         delete_checkpoint=delete_checkpoint)
        if save_freq is not False and save_freq != "epoch" and save_freq < 1:
            raise ValueError(
                "`save_freq` must be 'epoch', a positive integer or False. Received: "
                f"save_freq={save_freq!r}"
            )
        if hasattr(dataset, "image_pipeline") and not hasattr(dataset, "set_position"):
            raise ValueError(
                "`dalipipe.BackupAndRestore` takes the \"tf\" and \"pydataset\" formats: a "
                'format="grain" dataset resumes through its iterators\' state '
                "(`get_state()` / `set_state()`, Grain's checkpointing; see "
                f"docs/resume.md). Received: dataset={dataset!r}"
            )
        if not (hasattr(dataset, "set_position") and hasattr(dataset, "image_pipeline")):
            raise ValueError(
                "`dataset` must be the training dataset that `dalipipe.make_dali_dataset` "
                "returned, without `strategy` (a distributed dataset cannot be resumed "
                f"mid-epoch yet). Received: dataset={dataset!r}"
            )
        self.dataset = dataset
        self.steps = dataset.image_pipeline.steps
        self.fingerprint = fingerprint(dataset.image_pipeline)
        _check_writable(backup_dir)
        self._backup, state = self._newest_backup()
        self.position = (0, 0)
        self._restore = None  # (folder, saved callbacks' state) until the resumed epoch
        if state is not None:
            self._check_fingerprint(state["fingerprint"])
            epoch, batch = int(state["epoch"]), int(state["batch"])
            self.position = (epoch + 1, 0) if batch >= self.steps else (epoch, batch)
            self._restore = (self._backup, state.get("callbacks", []))
        self._epoch, self._start = self.position
        self.dataset.set_position(*self.position)
        self._since_saved = 0
        self._last_seen = -1
        self._pending = None  # the `(epoch, batch)` of the backup to write next
        self._fit_epoch_iterator = None
        self._fit_callbacks = None
        self._lengthen = False  # whether the next epoch follows a shortened one

    def _newest_backup(self):
        """`(folder, state)` of the newest backup that can be read, else `(None, None)`."""
        import h5py

        for folder in _backups(self.backup_dir)[::-1]:
            try:
                with open(os.path.join(folder, _STATE)) as f:
                    state = json.load(f)
                with h5py.File(os.path.join(folder, _WEIGHTS), "r"):
                    pass
                if os.path.exists(os.path.join(folder, _CALLBACK_ARRAYS)):
                    with h5py.File(os.path.join(folder, _CALLBACK_ARRAYS), "r"):
                        pass
                return folder, state
            except (OSError, ValueError):
                if not self.double_checkpoint:
                    raise
        return None, None

    def _check_fingerprint(self, saved):
        differs = differences(saved, self.fingerprint)
        if differs:
            raise ValueError(
                f"The backup in {self.backup_dir} was made with another dataset: "
                f"what differs: {differs}. Resume with the dataset it was "
                "made with (the same files, `seed`, `batch_size` and options; a "
                "`seed=None` draws a new seed every run), or use another `backup_dir`."
            )

    def on_train_begin(self, logs=None):
        if not self.model.built:
            raise ValueError(
                "To use the BackupAndRestore callback, you model must be built before "
                f"you call `fit()`. Model {self.model} is unbuilt. You can build it "
                "beforehand by calling it on a batch of data."
            )
        found = keras_hooks.fit_locals()
        if found is None:
            raise RuntimeError(
                "dalipipe.BackupAndRestore cannot find the running `fit`'s epoch iterator "
                f"and callbacks in this Keras {keras.__version__} (it is a callback of "
                "`model.fit` only)."
            )
        iterator, self._fit_callbacks = found
        self._fit_epoch_iterator = iterator
        steps_per_epoch = keras_hooks.steps_per_epoch(iterator)
        if steps_per_epoch not in (None, self.steps):
            raise ValueError(
                "`dalipipe.BackupAndRestore` resumes epochs that are whole passes over "
                "the dataset: `steps_per_epoch` must be None or its "
                f"{self.steps} steps. Received: steps_per_epoch={steps_per_epoch}"
            )
        from dalipipe.py_dataset import source_of  # the dataset a `map` maps

        trained = keras_hooks.trained_dataset(iterator, self.dataset)
        if source_of(trained) is not source_of(self.dataset):
            raise ValueError(
                "`fit` must train on the `dataset` given to `dalipipe.BackupAndRestore`, "
                "untransformed or through its own `map` (format \"pydataset\": "
                "`dataset.map(fn)`, not a `PyDataset` of yours around it; Keras's "
                "`fit(class_weight=...)` maps it: use `make_dali_dataset(class_weight=...)` "
                f"instead). Received: fit's data {trained!r}, the callback's {self.dataset!r}"
            )
        if self._backup is not None:
            if self.model.optimizer is not None and not self.model.optimizer.built:
                self.model.optimizer.build(self.model.trainable_variables)
            self.model.load_weights(os.path.join(self._backup, _WEIGHTS))
            keras_hooks.set_initial_epoch(self.model, self.position[0])

    def on_epoch_begin(self, epoch, logs=None):
        self._write_pending()
        if self._restore is not None:
            # After every callback's `on_train_begin`, where Keras's reset their state.
            self._restore_callbacks(*self._restore)
            self._restore = None
        if self._lengthen:
            # The epochs after the resumed one are whole again (set here, before the
            # progress bar of the epoch is made: it finalizes at `on_epoch_end`).
            self._lengthen = False
            keras_hooks.set_epoch_steps(self._fit_epoch_iterator, self._fit_callbacks,
                                        self.steps)
        # The resumed epoch goes on from its next step; the others start at their first.
        self._start = self.position[1] if epoch == self.position[0] else 0
        self._epoch = epoch
        self._last_seen = -1
        self.dataset.set_position(epoch, self._start)

    def on_train_batch_begin(self, batch, logs=None):
        self._write_pending()

    def on_train_batch_end(self, batch, logs=None):
        if self.save_freq in ("epoch", False):
            return
        # `batch` is the last step of the call (several with `steps_per_execution`).
        self._since_saved += batch - self._last_seen
        self._last_seen = batch
        if self._since_saved >= self.save_freq:
            self._since_saved = 0
            self._pending = (self._epoch, self._start + batch + 1)

    def on_epoch_end(self, epoch, logs=None):
        self._lengthen = bool(self._start)
        self._start = 0
        self.position = (epoch + 1, 0)
        if self.save_freq == "epoch":
            self._pending = (epoch + 1, 0)

    def on_train_end(self, logs=None):
        if self.delete_checkpoint:
            self._pending = None
            if os.path.exists(self.backup_dir):
                shutil.rmtree(self.backup_dir)
        else:
            self._write_pending()

    def _write_pending(self):
        """Writes the backup that the last step or epoch made due, if any: once every
        callback has seen that step or epoch end."""
        if self._pending is not None:
            self._save(*self._pending)
            self._pending = None

    def _save(self, epoch, batch):
        """Writes backup `(epoch, batch)` whole in a temporary folder, renames it into
        place, then removes the older ones (all but one with `double_checkpoint`)."""
        os.makedirs(self.backup_dir, exist_ok=True)
        existing = _backups(self.backup_dir)
        number = 1 + max((int(os.path.basename(f)[len(_PREFIX):]) for f in existing),
                         default=0)
        temporary = tempfile.mkdtemp(prefix=".writing-", dir=self.backup_dir)
        state = {"epoch": epoch, "batch": batch, "fingerprint": self.fingerprint}
        self._write_backup(temporary, state)
        for name in os.listdir(temporary):
            _fsync(os.path.join(temporary, name))
        folder = os.path.join(self.backup_dir, f"{_PREFIX}{number}")
        os.rename(temporary, folder)
        _fsync(self.backup_dir)
        keep = 2 if self.double_checkpoint else 1
        for old in [*existing, folder][:-keep]:
            shutil.rmtree(old, ignore_errors=True)
        for name in os.listdir(self.backup_dir):
            if name.startswith(".writing-") and os.path.join(self.backup_dir, name) != temporary:
                shutil.rmtree(os.path.join(self.backup_dir, name), ignore_errors=True)
        self._backup = folder

    def _write_backup(self, folder, state):
        """Writes the weights, the callbacks' state and `state` into `folder`."""
        import h5py

        self.model.save_weights(os.path.join(folder, _WEIGHTS), overwrite=True)
        entries, arrays = [], {}
        for position, callback in self._stateful_callbacks():
            values, held = _state_of(callback)
            entries.append({"position": position, "class": _class_name(callback),
                            "state": values, "arrays": sorted(held)})
            for name, listed in held.items():
                arrays[f"{position}/{name}"] = listed
        if arrays:
            with h5py.File(os.path.join(folder, _CALLBACK_ARRAYS), "w") as f:
                for key, values in arrays.items():
                    for i, value in enumerate(values):
                        f.create_dataset(f"{key}/{i}", data=value)
        with open(os.path.join(folder, _STATE), "w") as f:
            json.dump({**state, "callbacks": entries}, f)

    def _stateful_callbacks(self):
        """`(position, callback)` of `fit`'s callbacks whose state a backup holds."""
        for position, callback in enumerate(keras_hooks.callbacks_of(self._fit_callbacks)):
            if callback is self or isinstance(callback, keras.callbacks.BackupAndRestore):
                continue
            if _has_state_protocol(callback) or isinstance(callback,
                                                           keras_hooks.STATEFUL_CALLBACKS):
                yield position, callback

    def _restore_callbacks(self, folder, saved):
        """Sets on `fit`'s callbacks the state that the backup in `folder` holds for a
        callback of their class at their position; warns naming those it has none for."""
        import h5py

        by_key = {(entry["position"], entry["class"]): entry for entry in saved}
        for position, callback in self._stateful_callbacks():
            entry = by_key.get((position, _class_name(callback)))
            if entry is None:
                held = ", ".join(f"{e['class'].rsplit('.', 1)[-1]} at {e['position']}"
                                 for e in saved) or "none"
                warn(
                    f"{type(callback).__name__} (`callbacks[{position}]` of `fit`) starts "
                    f"fresh: the backup in {folder} holds no state for a "
                    f"{_class_name(callback)} at position {position} (callbacks are "
                    f"matched by class and position; the backup holds: {held}).",
                )
                continue
            if _has_state_protocol(callback):
                callback.set_state(entry["state"])
                continue
            arrays = {}
            if entry["arrays"]:
                with h5py.File(os.path.join(folder, _CALLBACK_ARRAYS), "r") as f:
                    for name in entry["arrays"]:
                        group = f[f"{position}/{name}"]
                        arrays[name] = [group[str(i)][()] for i in range(len(group))]
            keras_hooks.set_callback_state(callback, entry["state"], arrays)


def _has_state_protocol(callback):
    """Whether `callback` saves its own state (`get_state()` and `set_state(state)`)."""
    return callable(getattr(callback, "get_state", None)) and \
        callable(getattr(callback, "set_state", None))


def _state_of(callback):
    """`(values, arrays)` of a callback's state: its `get_state()` (checked to be a
    dict of JSON values), else what `keras_hooks.callback_state` reads."""
    if not _has_state_protocol(callback):
        return keras_hooks.callback_state(callback)
    state = callback.get_state()
    try:
        if not isinstance(state, dict):
            raise TypeError(f"a {type(state).__name__}")
        json.dumps(state, allow_nan=True)
    except (TypeError, ValueError) as e:
        raise TypeError(
            f"`get_state()` of the callback {_class_name(callback)} must return a dict of "
            f"JSON values, for `dalipipe.BackupAndRestore` to save. Received: {state!r} "
            f"({e})"
        ) from e
    return state, {}


def _class_name(callback):
    """The name a callback's state is saved under: its class's module and name."""
    kind = type(callback)
    return f"{kind.__module__}.{kind.__qualname__}"


def _backups(backup_dir):
    """The complete backups in `backup_dir`, oldest first."""
    if not os.path.isdir(backup_dir):
        return []
    numbered = [(int(name[len(_PREFIX):]), name) for name in os.listdir(backup_dir)
                if name.startswith(_PREFIX) and name[len(_PREFIX):].isdigit()]
    return [os.path.join(backup_dir, name) for _, name in sorted(numbered)]


def _check_writable(backup_dir):
    try:
        os.makedirs(backup_dir, exist_ok=True)
        with tempfile.TemporaryFile(dir=backup_dir):
            pass
    except OSError as e:
        raise OSError(
            f"`backup_dir` must be a folder that can be written. Received: "
            f"backup_dir={backup_dir!r} ({e})"
        ) from e


def _fsync(path):
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
