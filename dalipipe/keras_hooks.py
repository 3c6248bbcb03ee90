"""Every private Keras attribute dalipipe touches, behind named functions.

Keras 3 hands a callback neither `fit`'s epoch iterator nor its list of callbacks,
exports no way to read a `PyDataset` with its workers outside `fit` (the
benchmark's baseline does), and its stateful callbacks (`ModelCheckpoint`,
`EarlyStopping`, `ReduceLROnPlateau`) keep their state in attributes that no API
saves. What dalipipe needs of them is read and written here only, so that a Keras
release that changes one breaks one module, and `tests/test_keras_hooks.py`, which
checks each of them on real Keras objects, says which. TensorFlow's internals are in
`dalipipe.tf_hooks` (this module loads no TensorFlow on torch and JAX), DALI's in
`dalipipe.dali_hooks`.

Imported only by modules that already import Keras (`import dalipipe` does not).
Checked on Keras 3.11 and 3.15: the range `pyproject.toml` gives, which
`dalipipe doctor` reads.
"""

import sys
import threading
from typing import NamedTuple

import keras

# The state of Keras's stateful callbacks: JSON values (the attributes), and lists of
# arrays (the weights `EarlyStopping(restore_best_weights=True)` holds).
_CALLBACK_STATE = (
    (keras.callbacks.ModelCheckpoint, ("best", "_batches_seen_since_last_saving"), ()),
    (keras.callbacks.EarlyStopping,
     ("best", "wait", "stopped_epoch", "best_epoch"), ("best_weights",)),
    (keras.callbacks.ReduceLROnPlateau, ("best", "wait", "cooldown_counter"), ()),
)
STATEFUL_CALLBACKS = tuple(kind for kind, _, _ in _CALLBACK_STATE)


def fit_locals():
    """`(epoch_iterator, callbacks)` of the `fit` that is running, or None.

    Found by walking up the stack to the frame of a `fit` whose `epoch_iterator`
    local is a Keras `EpochIterator` (every backend's trainer names it so);
    `callbacks` is that frame's `CallbackList`.
    """
    from keras.src.trainers.epoch_iterator import EpochIterator

    frame = sys._getframe(1)
    while frame is not None:
        iterator = frame.f_locals.get("epoch_iterator")
        if frame.f_code.co_name == "fit" and isinstance(iterator, EpochIterator):
            return iterator, frame.f_locals.get("callbacks")
        frame = frame.f_back
    return None


class KerasLoop(NamedTuple):
    """The Keras `fit`, `evaluate` or `predict` running in a thread (`keras_loop`).

    Attributes:
        kind: `"fit"`, `"evaluate"` or `"predict"` (a validation pass inside `fit`
            is `"evaluate"`).
        call: for `"fit"`, its epoch iterator (one per `fit` call; None until it is
            made), else None.
        initial_epoch: for `"fit"` once its epochs run (after `on_train_begin`), the
            epoch it started at: its `initial_epoch`, or the one a backup callback
            set (`model._initial_epoch`); else None.
        asked_epoch: for `"fit"` before its epochs run (while it builds the model
            from a batch), its `initial_epoch` argument; else None.
    """

    kind: str
    call: object = None
    initial_epoch: int | None = None
    asked_epoch: int | None = None


_LOOPS = ("fit", "evaluate", "predict")


def keras_loop(dataset=None):
    """The innermost Keras `fit`, `evaluate` or `predict` running in this thread, as a
    `KerasLoop`, or None outside them.

    Found by walking up the stack to the first frame of one of those methods of a
    Keras `Trainer` (a model). Every backend's `fit` names its epoch iterator
    `epoch_iterator`, its running epoch `epoch`, and its first epoch `initial_epoch`
    (reassigned to `self._initial_epoch or initial_epoch` before its first epoch);
    `evaluate` and `predict` name theirs `epoch_iterator` too.

    Args:
        dataset: the dataset being read, for a read outside the loop's thread: on
            the TensorFlow backend Keras reads a Grain dataset in `tf.data`'s threads
            (`tf.data.Dataset.from_generator`). When no loop runs in this thread,
            the innermost loop of another thread whose epoch iterator reads
            `dataset` (or a Grain dataset made from it, `map`'s) is returned.
    """
    from keras.src.trainers.trainer import Trainer

    loop = _loop_in(sys._getframe(1), Trainer)
    if loop is not None or dataset is None:
        return loop
    this = threading.get_ident()
    for thread, frame in sys._current_frames().items():
        if thread != this:
            loop = _loop_in(frame, Trainer, dataset)
            if loop is not None:
                return loop
    return None


def _loop_in(frame, trainer, dataset=None):
    """The innermost Keras loop on the stack from `frame` up (`keras_loop`); with
    `dataset`, the innermost whose epoch iterator reads it."""
    while frame is not None:
        if frame.f_code.co_name in _LOOPS:
            names = frame.f_locals
            if isinstance(names.get("self"), trainer) and (
                    dataset is None or _reads(names.get("epoch_iterator"), dataset)):
                if frame.f_code.co_name != "fit":
                    return KerasLoop(frame.f_code.co_name)
                started = "epoch" in names
                initial = int(names["initial_epoch"] or 0)
                return KerasLoop("fit", names.get("epoch_iterator"),
                                 initial if started else None, None if started else initial)
        frame = frame.f_back
    return None


def _reads(epoch_iterator, dataset):
    """Whether `epoch_iterator` (None before it is made) reads `dataset`: its
    adapter's dataset is `dataset`, or a Grain dataset made from it (Grain's
    `parents`)."""
    if epoch_iterator is None:
        return False
    found = [trained_dataset(epoch_iterator, None)]
    while found:
        data = found.pop()
        if data is dataset:
            return True
        found.extend(getattr(data, "parents", ()))
    return False


# The frames a `PyDataset` that wraps a dalipipe dataset (`DALIPyDataset.map`'s, or a
# user's own whose `__getitem__` reads the dataset's) puts between Keras's generator
# and the dataset's `num_batches` or `__getitem__`.
WRAPPER_DEPTH = 3


def py_dataset_pass():
    """The frame of Keras's `PyDatasetAdapter` generator that reads the caller of this
    function (a `PyDataset`'s `num_batches` or `__getitem__`), directly or through
    up to `WRAPPER_DEPTH` frames of a `PyDataset` that wraps it, or None when
    anything else calls it (a user's read, Keras's peek at the element spec).

    One generator of Keras's is one pass over the dataset: it reads `num_batches`
    as it starts (at its first `next()`), then item after item in the thread that
    reads it (the training thread on torch and JAX, `tf.data`'s on TensorFlow).
    """
    from keras.src.trainers.data_adapters.py_dataset_adapter import PyDatasetAdapter

    generators = (PyDatasetAdapter._finite_generator.__code__,
                  PyDatasetAdapter._infinite_generator.__code__)
    frame = sys._getframe(2)
    for _ in range(1 + WRAPPER_DEPTH):
        if frame is None:
            return None
        if frame.f_code in generators:
            return frame
        frame = frame.f_back
    return None


def read_py_dataset(frame):
    """The `PyDataset` that Keras's generator `frame` (`py_dataset_pass`) reads."""
    return frame.f_locals["self"].py_dataset


def read_by_keras_workers():
    """Whether Keras's worker threads (a `PyDataset` with `workers > 1`) read the
    caller: its `get_index` is on this thread's stack."""
    from keras.src.trainers.data_adapters import py_dataset_adapter

    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code is py_dataset_adapter.get_index.__code__:
            return True
        frame = frame.f_back
    return False


def callbacks_of(callback_list):
    """The callbacks of `fit`'s `CallbackList` in their order: the user's (a nested
    list flattened), then the `History` and `ProgbarLogger` that `fit` adds."""
    return list(getattr(callback_list, "callbacks", ()))


def steps_per_epoch(epoch_iterator):
    """The `steps_per_epoch` that `fit` was given (None when not given)."""
    return epoch_iterator.steps_per_epoch


def trained_dataset(epoch_iterator, default):
    """The dataset that `fit`'s epoch iterator reads (the TensorFlow and Grain
    adapters' `_dataset`, the `PyDataset` adapter's `py_dataset`), else `default`."""
    adapter = getattr(epoch_iterator, "data_adapter", None)
    return getattr(adapter, "_dataset", getattr(adapter, "py_dataset", default))


def set_epoch_steps(epoch_iterator, callback_list, steps):
    """Makes the next epochs of the running `fit` `steps` steps long: its epoch
    iterator's count, the callbacks' `params["steps"]` and the progress bar's
    `target` (read when the bar of an epoch is made, at its `on_epoch_begin`)."""
    epoch_iterator._num_batches = steps
    callback_list.params["steps"] = steps
    for callback in callbacks_of(callback_list):
        if isinstance(callback, keras.callbacks.ProgbarLogger):
            callback.target = steps


def set_initial_epoch(model, epoch):
    """Makes the running `fit` start at `epoch` (read after `on_train_begin`)."""
    model._initial_epoch = epoch


def callback_state(callback):
    """The state of one of Keras's stateful callbacks, or None for other callbacks.

    Returns:
        `(values, arrays)`: a dict of JSON values (the attributes of
        `_CALLBACK_STATE`; NumPy scalars as Python floats and ints), and a dict of
        lists of NumPy arrays (`EarlyStopping`'s `best_weights`, when it has them).
    """
    for kind, names, array_names in _CALLBACK_STATE:
        if isinstance(callback, kind):
            values = {name: _plain(getattr(callback, name)) for name in names}
            arrays = {name: list(getattr(callback, name)) for name in array_names
                      if getattr(callback, name) is not None}
            return values, arrays
    return None


def set_callback_state(callback, values, arrays):
    """Sets on `callback` the state that `callback_state` returned for a callback of
    its class (the attributes of `_CALLBACK_STATE` only)."""
    for kind, names, array_names in _CALLBACK_STATE:
        if isinstance(callback, kind):
            for name in names:
                if name in values:
                    setattr(callback, name, values[name])
            for name in array_names:
                if name in arrays:
                    setattr(callback, name, list(arrays[name]))
            return


def py_dataset_batches(py_dataset):
    """One epoch of `py_dataset`'s batches, as NumPy, read as `fit` reads them: by
    Keras's `PyDatasetAdapter`, which runs the dataset's workers (Keras 3 exports
    neither it nor its enqueuer, and `PyDataset.__iter__` calls `__getitem__` in the
    calling thread). A generator: the workers stop when it ends or is closed."""
    from keras.src.trainers.data_adapters.py_dataset_adapter import PyDatasetAdapter

    adapter = PyDatasetAdapter(py_dataset, shuffle=False)
    adapter.on_epoch_begin()
    try:
        yield from adapter.get_numpy_iterator()
    finally:
        adapter.on_epoch_end()


def _plain(value):
    """`value` as a JSON value: a NumPy or tensor scalar as a Python float or int."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return keras.ops.convert_to_numpy(value).item()
