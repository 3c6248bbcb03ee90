"""`dalipipe.keras_hooks`: each private Keras attribute that dalipipe reads or writes,
checked on real Keras objects in real `fit` calls, so that a Keras release that
renames one, or stops reading it, fails here by name."""

import re

import numpy as np
import pytest

keras = pytest.importorskip("keras")

from dalipipe import keras_hooks  # noqa: E402

STEPS = 5  # 40 samples in batches of 8


def small_model():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(0.01), loss="mse")
    return model


def data():
    x = np.linspace(0, 1, 160, dtype="float32").reshape(40, 4)
    return x, x.sum(axis=1, keepdims=True)


class OnBegin(keras.callbacks.Callback):
    """Calls `on_train_begin(callback)` and `on_epoch_begin(callback, epoch)`, and
    records each epoch's steps."""

    def __init__(self, on_train_begin=None, on_epoch_begin=None, on_epoch_end=None):
        super().__init__()
        self.calls = on_train_begin, on_epoch_begin, on_epoch_end
        self.steps = {}

    def on_train_begin(self, logs=None):
        if self.calls[0]:
            self.calls[0](self)

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch
        self.steps[epoch] = 0
        if self.calls[1]:
            self.calls[1](self, epoch)

    def on_train_batch_end(self, batch, logs=None):
        self.steps[self.epoch] += 1

    def on_epoch_end(self, epoch, logs=None):
        if self.calls[2]:
            self.calls[2](self, epoch)


def test_fit_locals_finds_fits_epoch_iterator_and_callback_list():
    from keras.src.trainers.epoch_iterator import EpochIterator

    found = {}

    def look(callback):
        found["locals"] = keras_hooks.fit_locals()
        found["self"] = callback

    history_and_bar = (keras.callbacks.History, keras.callbacks.ProgbarLogger)
    small_model().fit(*data(), batch_size=8, epochs=1, verbose=2,
                      callbacks=[OnBegin(look)])
    iterator, callback_list = found["locals"]
    assert isinstance(iterator, EpochIterator)
    assert isinstance(callback_list, keras.callbacks.CallbackList)
    callbacks = keras_hooks.callbacks_of(callback_list)
    assert callbacks[0] is found["self"]
    assert [type(c) for c in callbacks[1:]] == list(history_and_bar)
    assert callback_list.params["steps"] == STEPS
    assert keras_hooks.fit_locals() is None  # outside `fit`


def test_steps_per_epoch_and_the_trained_dataset_are_fits():
    found = []

    def look(callback):
        iterator, _ = keras_hooks.fit_locals()
        found.append((keras_hooks.steps_per_epoch(iterator),
                      keras_hooks.trained_dataset(iterator, "not found")))

    class Batches(keras.utils.PyDataset):
        def __len__(self):
            return STEPS

        def __getitem__(self, i):
            x, y = data()
            return x[i * 8:(i + 1) * 8], y[i * 8:(i + 1) * 8]

    batches = Batches()
    small_model().fit(batches, epochs=1, steps_per_epoch=3, verbose=0,
                      callbacks=[OnBegin(look)])
    assert found == [(3, batches)]
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        dataset = tf.data.Dataset.from_tensor_slices(data()).batch(8)
        small_model().fit(dataset, epochs=1, verbose=0, callbacks=[OnBegin(look)])
        assert found[1] == (None, dataset)


def test_the_trained_dataset_of_a_grain_fit_is_its_dataset():
    # `dalipipe.InputReport` finds a "grain" dataset's times through it.
    grain = pytest.importorskip("grain")
    found = []

    def look(callback):
        iterator, _ = keras_hooks.fit_locals()
        found.append(keras_hooks.trained_dataset(iterator, "not found"))

    x, y = data()
    dataset = grain.MapDataset.source([(x[i], y[i]) for i in range(40)]).batch(8)
    dataset = dataset.to_iter_dataset()
    small_model().fit(dataset, epochs=1, verbose=0, callbacks=[OnBegin(look)])
    assert found == [dataset]


def test_set_epoch_steps_makes_the_next_epochs_that_long(capsys):
    # Set when an epoch begins, before the progress bar of the epoch is made (which
    # reads the target again when it finalizes, at the epoch's end).
    def look(callback):
        callback.found = keras_hooks.fit_locals()

    def shorten(callback, epoch):
        if epoch == 1:
            keras_hooks.set_epoch_steps(*callback.found, 3)

    recorder = OnBegin(look, shorten)
    small_model().fit(*data(), batch_size=8, epochs=3, verbose=2, callbacks=[recorder])
    assert recorder.steps == {0: STEPS, 1: 3, 2: 3}
    assert recorder.params["steps"] == 3
    bars = re.findall(r"^(\d+)/(\d+) - ", capsys.readouterr().out, re.M)
    assert bars == [(str(STEPS),) * 2, ("3", "3"), ("3", "3")]


def test_set_initial_epoch_skips_the_epochs_before_it():
    recorder = OnBegin(lambda callback: keras_hooks.set_initial_epoch(callback.model, 2))
    small_model().fit(*data(), batch_size=8, epochs=4, verbose=0, callbacks=[recorder])
    assert sorted(recorder.steps) == [2, 3]


def test_the_state_of_keras_stateful_callbacks_is_read_as_keras_keeps_it(tmp_path):
    checkpoint = keras.callbacks.ModelCheckpoint(
        str(tmp_path / "best.weights.h5"), monitor="loss", save_best_only=True,
        save_weights_only=True)
    counting = keras.callbacks.ModelCheckpoint(str(tmp_path / "every.weights.h5"),
                                               save_weights_only=True, save_freq=4)
    stopping = keras.callbacks.EarlyStopping(monitor="loss", patience=10,
                                             restore_best_weights=True)
    plateau = keras.callbacks.ReduceLROnPlateau(monitor="loss", patience=10)
    model = small_model()
    history = model.fit(*data(), batch_size=8, epochs=3, verbose=0,
                        callbacks=[checkpoint, counting, stopping, plateau])
    best = min(history.history["loss"])
    assert keras_hooks.STATEFUL_CALLBACKS == (keras.callbacks.ModelCheckpoint,
                                              keras.callbacks.EarlyStopping,
                                              keras.callbacks.ReduceLROnPlateau)
    values, arrays = keras_hooks.callback_state(checkpoint)
    assert values == {"best": pytest.approx(best), "_batches_seen_since_last_saving": 0}
    assert arrays == {}
    # 15 steps, a save every 4: 3 counted since the last.
    assert keras_hooks.callback_state(counting)[0]["_batches_seen_since_last_saving"] == 3
    values, arrays = keras_hooks.callback_state(stopping)
    assert values == {"best": pytest.approx(best), "wait": 0, "stopped_epoch": 0,
                      "best_epoch": 2}
    assert [a.shape for a in arrays["best_weights"]] == [(4, 1), (1,)]
    values, arrays = keras_hooks.callback_state(plateau)
    assert values == {"best": pytest.approx(best), "wait": 0, "cooldown_counter": 0}
    assert keras_hooks.callback_state(keras.callbacks.History()) is None
    assert all(type(v) in (int, float) for v in values.values())  # JSON values


def set_at_first_epoch(callback, values, arrays=None):
    """A callback that sets `values` on `callback` when the first epoch begins (after
    the `on_train_begin` where Keras's callbacks reset their state)."""
    def set_state(_, epoch):
        if epoch == 0:
            keras_hooks.set_callback_state(callback, values, arrays or {})

    return OnBegin(on_epoch_begin=set_state)


def test_keras_callbacks_act_on_the_state_that_is_set(tmp_path):
    x, y = data()
    # ModelCheckpoint: its best value decides whether to save; its count, when.
    checkpoint = keras.callbacks.ModelCheckpoint(
        str(tmp_path / "best.weights.h5"), monitor="loss", save_best_only=True,
        save_weights_only=True)
    small_model().fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[
        set_at_first_epoch(checkpoint, {"best": -1.0}), checkpoint])
    assert checkpoint.best == -1.0 and not (tmp_path / "best.weights.h5").exists()
    counting = keras.callbacks.ModelCheckpoint(str(tmp_path / "every.weights.h5"),
                                               save_weights_only=True, save_freq=3)
    small_model().fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[
        set_at_first_epoch(counting, {"_batches_seen_since_last_saving": 2}), counting])
    assert counting._batches_seen_since_last_saving == 1  # saved after steps 1 and 4
    # EarlyStopping: its wait and best stop training; its best weights are restored.
    stopping = keras.callbacks.EarlyStopping(monitor="loss", patience=3,
                                             restore_best_weights=True)
    best_weights = [np.full((4, 1), 0.5, "float32"), np.full((1,), 0.25, "float32")]
    model = small_model()
    recorder = set_at_first_epoch(stopping, {"wait": 2, "best": -1.0, "best_epoch": 7},
                                  {"best_weights": best_weights})
    model.fit(x, y, batch_size=8, epochs=5, verbose=0, callbacks=[recorder, stopping])
    assert sorted(recorder.steps) == [0, 1]  # stopped at the end of epoch 1 (not 0)
    assert stopping.stopped_epoch == 1 and stopping.best_epoch == 7
    for got, want in zip(model.get_weights(), best_weights, strict=True):
        np.testing.assert_array_equal(got, want)
    # ReduceLROnPlateau: its wait and best lower the rate; its cooldown delays that.
    rates = []
    for values in ({"wait": 1, "best": -1.0, "cooldown_counter": 0},
                   {"wait": 1, "best": -1.0, "cooldown_counter": 1}):
        plateau = keras.callbacks.ReduceLROnPlateau(monitor="loss", patience=2, factor=0.5)
        model = small_model()
        model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[
            set_at_first_epoch(plateau, values), plateau])
        rates.append(float(keras.ops.convert_to_numpy(model.optimizer.learning_rate)))
    assert rates == [pytest.approx(0.005), pytest.approx(0.01)]


def test_py_dataset_batches_reads_an_epoch_with_the_datasets_workers():
    import threading

    readers = set()

    class Batches(keras.utils.PyDataset):
        def __init__(self):
            super().__init__(workers=2, use_multiprocessing=False, max_queue_size=2)

        def __len__(self):
            return STEPS

        def __getitem__(self, i):
            readers.add(threading.get_ident())
            x, y = data()
            return x[i * 8:(i + 1) * 8], y[i * 8:(i + 1) * 8]

    batches = list(keras_hooks.py_dataset_batches(Batches()))
    x, y = data()
    assert len(batches) == STEPS
    for i, (got_x, got_y) in enumerate(batches):
        np.testing.assert_array_equal(got_x, x[i * 8:(i + 1) * 8])
        np.testing.assert_array_equal(got_y, y[i * 8:(i + 1) * 8])
    assert readers and threading.get_ident() not in readers  # the workers read


class Watched(keras.utils.PyDataset):
    """`STEPS` batches of `data()`, recording per Keras epoch (`on_epoch_begin`) the
    Keras loop (`keras_loop`), and per read whether Keras's adapter reads it as a
    pass (`py_dataset_pass`), and which pass (one per adapter generator)."""

    def __init__(self):
        super().__init__()
        self.loops, self.reads, self.frames = [], [], []

    def __len__(self):
        return STEPS

    @property
    def num_batches(self):
        self.reads.append(("num_batches", self._frame(keras_hooks.py_dataset_pass())))
        return STEPS

    def _frame(self, frame):
        if frame is None:
            return None
        if frame not in self.frames:
            self.frames.append(frame)
        return self.frames.index(frame)

    def on_epoch_begin(self):
        loop = keras_hooks.keras_loop()
        self.loops.append(None if loop is None else
                          (loop.kind, loop.initial_epoch, loop.asked_epoch))
        if loop is not None and loop.kind == "fit" and loop.call is not None:
            self.call = loop.call

    def __getitem__(self, i):
        self.reads.append(("item", self._frame(keras_hooks.py_dataset_pass())))
        x, y = data()
        return x[i * 8:(i + 1) * 8], y[i * 8:(i + 1) * 8]


def test_keras_loop_names_the_running_loop_and_fits_initial_epoch():
    """`fit` (`None` as its initial epoch while it builds the model, before its
    epochs, and its `initial_epoch` argument as the one asked), the validation inside
    it and `evaluate` and `predict`; a backup callback's `model._initial_epoch` wins
    over `initial_epoch`."""
    from keras.src.trainers.epoch_iterator import EpochIterator

    dataset = Watched()
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(0.01), loss="mse")
    model.fit(dataset, epochs=3, initial_epoch=1, validation_data=dataset, verbose=0)
    assert isinstance(dataset.call, EpochIterator)
    # On torch and JAX, `fit` first builds the metrics from a batch (initial epoch None).
    building = [("fit", None, 1)] * (keras.backend.backend() != "tensorflow")
    assert dataset.loops == [*building, ("fit", 1, None), ("evaluate", None, None),
                             ("fit", 1, None), ("evaluate", None, None)]
    dataset.loops.clear()
    recorder = OnBegin(lambda callback: keras_hooks.set_initial_epoch(callback.model, 2))
    model.fit(dataset, epochs=3, verbose=0, callbacks=[recorder])
    model.evaluate(dataset, verbose=0)
    model.predict(dataset, verbose=0)
    assert dataset.loops == [("fit", 2, None), ("evaluate", None, None),
                             ("predict", None, None)]
    dataset.loops.clear()
    small = Watched()
    small_model().fit(small, epochs=1, verbose=0)  # built here (on torch and JAX, from a batch)
    assert small.loops == [(*loop[:2], 0) for loop in building] + [("fit", 0, None)]
    assert keras_hooks.keras_loop() is None  # outside them


def test_py_dataset_pass_is_keras_s_generator_of_one_pass():
    """Each pass of Keras's reads `num_batches` from its generator before its items;
    other reads (`len`, a user's) are not a pass's."""
    if keras.backend.backend() == "tensorflow":
        pytest.skip("on TensorFlow, Keras first reads items to learn the element spec")
    dataset = Watched()
    model = small_model()
    model.fit(dataset, epochs=2, verbose=0)  # built first: one item read of a pass left
    passes = [r for r in dataset.reads if r[1] is not None]
    firsts = [i for i, r in enumerate(passes) if r[0] == "num_batches"]
    assert [r[1] for r in passes] == sorted(r[1] for r in passes)
    assert len(firsts) == 3 and all(passes[i + 1][0] == "item" for i in firsts)
    assert [len([r for r in passes if r == ("item", p)]) for p in range(3)] == [1, STEPS, STEPS]
    dataset.reads.clear()
    dataset.num_batches, dataset[0]  # a user's reads
    assert dataset.reads == [("num_batches", None), ("item", None)]
