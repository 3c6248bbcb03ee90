"""`DALIPyDataset.map` (`dalipipe.py_dataset.MappedPyDataset`), and a user's own
`PyDataset` wrapping a `DALIPyDataset`, on the backend of pytest's process (the
torch and JAX runs: `map_job.py`, by `backend_job.py`'s mode `map`)."""

import keras
import numpy as np
import pytest

import dalipipe
from map_job import MAP_OPTIONS as OPTIONS
from map_job import Minus1, map_fits
from dalipipe.py_dataset import MappedPyDataset
from helpers import tag_of

STEPS = 4  # 121 tagged images in batches of 32


def batches(pipeline, epoch, start=0):
    """The tags of each batch of `pipeline.epoch(epoch, start_batch=start)`."""
    return [tuple(tag_of(image) for image in images)
            for images, _ in pipeline.epoch(epoch, start_batch=start)]


def tags(images):
    return tuple(tag_of(image) for image in keras.ops.convert_to_numpy(images))


def small_model():
    model = keras.Sequential([keras.Input((12, 12, 3)), keras.layers.GlobalAveragePooling2D(),
                              keras.layers.Dense(3)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def test_map_applies_fn_to_each_batch_and_keeps_the_dataset(tagged_dir):
    dataset = dalipipe.make_dali_dataset(tagged_dir, format="pydataset", **OPTIONS)
    mapped = dataset.map(lambda images, labels: (images, labels + 10))
    assert isinstance(mapped, MappedPyDataset) and isinstance(mapped, keras.utils.PyDataset)
    assert len(mapped) == STEPS and mapped.num_batches == STEPS
    assert mapped.class_names == dataset.class_names
    assert mapped.file_paths == dataset.file_paths
    pipeline = dalipipe.make_dali_pipeline(tagged_dir, **OPTIONS)
    images, labels = mapped[2]  # batch 2 of the next training pass
    native_images, native_labels = list(pipeline.epoch(0))[2]
    np.testing.assert_array_equal(images, native_images)
    np.testing.assert_array_equal(labels, np.asarray(native_labels) + 10)
    twice = mapped.map(lambda images, labels: {"x": images, "y": labels * 2})
    assert set(twice[0]) == {"x", "y"}
    np.testing.assert_array_equal(twice[3]["y"], (np.asarray(list(pipeline.epoch(0))[3][1])
                                                  + 10) * 2)
    # A pass read in order through the map counts, and moves the dataset's cursor.
    for i in range(STEPS):
        mapped[i]
    assert dataset._cursor.position == (1, 0)
    mapped.set_position(2, 1)
    assert len(dataset) == len(mapped) == STEPS - 1
    with pytest.raises(TypeError, match="`fn` must be a callable"):
        dataset.map(3)


def test_fit_trains_on_new_epochs_through_map_or_a_wrapper(tagged_dir):
    """Each `fit` epoch reads the next native epoch, through `map` and through the
    issue's `Minus1` (Keras starts the wrapper's epochs, not the dataset's)."""
    found = map_fits(tagged_dir)
    assert found["map"].pop("devices") == ["cpu"]  # NumPy arrays
    assert found == {how: {"native": True, "differ": True, "cursor": [3, 0]}
                     for how in ("map", "wrapper")}


@pytest.mark.backend_job("map")
@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_fit_trains_on_new_epochs_through_map_on_the_backend(backend, backend_jobs):
    """As on TensorFlow, with the backend's tensors given to `fn`."""
    found = backend_jobs(backend, "map")
    assert all("cpu" in device.lower() for device in found["map"].pop("devices"))
    assert found == {
        how: {"native": True, "differ": True, "cursor": [3, 0]} for how in ("map", "wrapper")}


def test_a_wrapper_read_by_keras_workers_warns_naming_map(tagged_dir):
    dataset = dalipipe.make_dali_dataset(tagged_dir, format="pydataset", **OPTIONS)
    with pytest.warns(UserWarning, match=r"workers > 1.*dataset.map\(fn\)"):
        small_model().fit(Minus1(dataset, [], workers=2), epochs=1, verbose=0)


def test_backup_and_restore_resumes_a_mapped_dataset_exactly(tagged_dir, tmp_path):
    """A run stopped after step 2 of epoch 1 resumes at that step, through `map`."""

    class Stop(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if (self.epoch, batch) == (1, 2):
                raise KeyboardInterrupt

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

    def run(stop):
        seen = []

        def record(images, labels):
            seen.append(tags(images))
            return images, labels

        mapped = dalipipe.make_dali_dataset(tagged_dir, format="pydataset",
                                            **OPTIONS).map(record)
        backup = dalipipe.BackupAndRestore(str(tmp_path / "backup"), mapped, save_freq=1)
        model = small_model()
        try:
            model.fit(mapped, epochs=3, verbose=0, callbacks=[backup, *stop])
        except KeyboardInterrupt:
            pass
        return backup.position, seen

    run([Stop()])
    position, seen = run([])
    assert position == (3, 0)
    pipeline = dalipipe.make_dali_pipeline(tagged_dir, **OPTIONS)
    # The backup written as step 2 began (step 2 itself is trained again).
    want = batches(pipeline, 1, start=2) + batches(pipeline, 2)
    assert seen[-len(want):] == want
