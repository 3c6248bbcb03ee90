"""make_dali_dataset through DALI's TensorFlow plugin, on CPU, with Keras 3."""

import os
import warnings

import numpy as np
import pytest

# Skipped only where these are absent: on a GPU machine that runs `-m gpu` with
# DALI alone. tests/test_environment.py fails wherever the full stack should be.
keras = pytest.importorskip("keras")
pd = pytest.importorskip("pandas")
tf = pytest.importorskip("tensorflow")

from helpers import CLASSES, NUM_INDEXED, index_of, indexed_paths
from dalipipe import make_dali_dataset, make_dali_pipeline

SMALL = dict(image_size=(8, 8), batch_size=8, device="cpu")


def epoch_of(dataset):
    """All batches of one pass, output by output, as NumPy."""
    batches = [b if isinstance(b, tuple) else (b,) for b in dataset]
    return [np.concatenate([b[k].numpy() for b in batches]) for k in range(len(batches[0]))], \
        [len(b[0]) for b in batches]


@pytest.mark.parametrize("options", [
    dict(augment=True, label_mode="categorical"),
    dict(shuffle=True, crop_to_aspect_ratio=True),
])
def test_each_pass_equals_the_native_epoch_of_the_same_number(color_dir, options):
    """Parity: pass n of the dataset is `ImagePipeline.epoch(n)`, bit for bit: the same
    order and the same crops and flips for the same seed.

    Noisy JPEGs, so that every crop and flip shows in the pixels.
    """
    common = dict(seed=11, image_size=(12, 10), batch_size=8, device="cpu", **options)
    pipe = make_dali_pipeline(color_dir, **common)
    dataset = make_dali_dataset(color_dir, **common)
    for epoch in range(2):
        expected = list(pipe.epoch(epoch))
        got = list(dataset)
        assert len(got) == len(expected) == 12  # 90 images, last batch of 2
        for (images, labels), (want_images, want_labels) in zip(got, expected):
            np.testing.assert_array_equal(images.numpy(), want_images)
            np.testing.assert_array_equal(labels.numpy(), want_labels)
    assert not np.array_equal(collect_labels(pipe.epoch(0)), collect_labels(pipe.epoch(1)))


def collect_labels(batches):
    return np.concatenate([labels for _, labels in batches])


def test_three_shuffled_epochs_cover_every_sample_once(indexed_dir):
    ds = make_dali_dataset(indexed_dir, normalization=None, seed=2, **SMALL)
    assert int(ds.cardinality()) == len(ds) == 4
    assert int(tf.data.experimental.cardinality(ds.map(lambda x, y: (x, y)))) == 4
    assert ds.class_names == sorted(CLASSES)
    orders = []
    for _ in range(3):
        (images, labels), sizes = epoch_of(ds)
        assert sizes == [8, 8, 8, 5]
        order = [index_of(im) for im in images]
        assert sorted(order) == list(range(NUM_INDEXED))
        # Labels stay with their images under shuffling.
        assert labels.tolist() == [ds.class_names.index(CLASSES[i % 3]) for i in order]
        orders.append(order)
    assert orders[0] != orders[1] and orders[1] != orders[2]


def test_same_seed_same_batches(color_dir):
    def first_epoch(seed, shuffle=True):
        ds = make_dali_dataset(color_dir, augment=True, seed=seed, shuffle=shuffle, **SMALL)
        return epoch_of(ds)[0]

    a, b, c = first_epoch(4), first_epoch(4), first_epoch(5)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert not np.array_equal(a[1], c[1])
    # Without shuffling, the seed still sets the crops and flips.
    unshuffled = first_epoch(4, shuffle=False)[0], first_epoch(5, shuffle=False)[0]
    assert not np.allclose(*unshuffled)


def test_fit_learns_labels_that_match_images(color_dir):
    keras.utils.set_random_seed(0)
    train, val = make_dali_dataset(color_dir, image_size=(16, 16), batch_size=16, seed=1,
                                   validation_split=0.2, subset="both", augment=True,
                                   device="cpu")
    model = keras.Sequential([
        keras.Input((16, 16, 3)),
        keras.layers.Conv2D(8, 3, activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(3, activation="softmax"),
    ])
    model.compile(optimizer=keras.optimizers.Adam(0.03), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    history = model.fit(train, validation_data=val, epochs=8, verbose=0)
    assert len(history.history["loss"]) == 8
    assert history.history["val_accuracy"][-1] >= 0.9


def index_model():
    """A model that reads an indexed image's index off its red channel."""
    inputs = keras.Input((8, 8, 3))
    pooled = keras.layers.GlobalAveragePooling2D()(inputs)
    return keras.Model(inputs, keras.layers.Lambda(lambda t: t[:, :1] / 8.0)(pooled))


def test_evaluate_is_exact_over_a_partial_last_batch(indexed_dir):
    """`evaluate` over 29 samples in batches of 8 equals the metric over all 29."""
    paths, _ = indexed_paths(indexed_dir)
    ds = make_dali_dataset(paths, labels=list(range(NUM_INDEXED)), normalization=None,
                           seed=9, **SMALL)
    exact = index_model()
    exact.compile(loss="mse")
    # Zero only if every label stays with its image.
    assert exact.evaluate(ds, verbose=0) == pytest.approx(0.0, abs=1e-6)
    zero = keras.Sequential([exact, keras.layers.Lambda(lambda t: t * 0.0)])
    zero.compile(loss="mse")
    # mean(i^2) over all 29 samples; a dropped or padded sample would change it.
    expected = np.mean(np.arange(NUM_INDEXED) ** 2)
    assert zero.evaluate(ds, verbose=0) == pytest.approx(expected, rel=1e-6)


def test_predict_rows_follow_file_paths(indexed_dir):
    ds = make_dali_dataset(indexed_dir, labels=None, shuffle=False, normalization=None, **SMALL)
    assert ds.class_names is None
    predictions = index_model().predict(ds, verbose=0)
    assert predictions.shape == (NUM_INDEXED, 1)
    got = [int(round(float(p))) for p in predictions[:, 0]]
    want = [int(os.path.basename(p)[4:7]) for p in ds.file_paths]
    assert got == want


def test_subsets_from_a_csv_table(indexed_dir, tmp_path):
    paths, _ = indexed_paths(indexed_dir)
    table = pd.DataFrame({"path": paths, "bi": ["dog" if i % 2 else "cat" for i in range(NUM_INDEXED)]})
    csv_path = tmp_path / "table.csv"
    table.to_csv(csv_path, index=False)
    kwargs = dict(labels="bi", label_mode="binary", validation_split=0.3, seed=3,
                  normalization=None, **SMALL)
    train = make_dali_dataset(str(csv_path), subset="training", **kwargs)
    # As in Keras, the split follows `shuffle` and `seed`: the same in both calls.
    val = make_dali_dataset(str(csv_path), subset="validation", **kwargs)
    assert train.class_names == val.class_names == ["cat", "dog"]
    assert not set(train.file_paths) & set(val.file_paths)
    assert sorted(train.file_paths + val.file_paths) == sorted(paths)
    for ds in (train, val):
        (images, labels), _ = epoch_of(ds)
        assert labels.shape == (len(ds.file_paths), 1)
        assert labels[:, 0].tolist() == [float(index_of(im) % 2) for im in images]


def test_gpu_request_without_gpu_is_a_clear_error(indexed_dir):
    if tf.config.list_physical_devices("GPU"):
        pytest.skip("this machine has a GPU")
    with pytest.raises(RuntimeError, match=r"`device='gpu'` needs a GPU.*TensorFlow sees 0"):
        make_dali_dataset(indexed_dir, device="gpu")


def test_auto_device_falls_back_to_cpu(indexed_dir):
    if tf.config.list_physical_devices("GPU"):
        pytest.skip("this machine has a GPU")
    ds = make_dali_dataset(indexed_dir, image_size=(8, 8), batch_size=8)
    images, labels = next(iter(ds))
    assert "CPU" in images.device and images.shape == (8, 8, 8, 3)


def test_auto_device_warns_when_only_dali_or_only_tensorflow_sees_a_gpu():
    from dalipipe.dataset import choose_device

    assert choose_device("auto", 1, 2) == "gpu"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert choose_device("auto", 0, 0) == "cpu"
    fix_tf = r"TensorFlow sees 0, DALI sees 1\..*'dalipipe\[gpu\]'.*tensorflow\[and-cuda\]"
    with pytest.warns(UserWarning, match=r"`device='auto'` runs DALI on the CPU: " + fix_tf):
        assert choose_device("auto", 0, 1) == "cpu"
    with pytest.warns(UserWarning, match=r"TensorFlow sees 1, DALI sees 0\..*'dalipipe\[cuda12\]'"):
        assert choose_device("auto", 1, 0) == "cpu"
    with pytest.raises(RuntimeError, match=fix_tf):
        choose_device("gpu", 0, 1)


def test_tfrecords_feed_keras_like_their_directory(tagged_dir, tagged_tfrecords):
    options = dict(image_size=(8, 8), batch_size=16, shuffle=False, normalization=None,
                   device="cpu")
    (want_images, want_labels), _ = epoch_of(make_dali_dataset(tagged_dir, **options))
    dataset = make_dali_dataset(tagged_tfrecords, **options)
    assert int(dataset.cardinality()) == 8 and dataset.class_names == list(CLASSES)
    (images, labels), sizes = epoch_of(dataset)
    assert sizes[-1] == 121 - 7 * 16  # a true partial last batch
    np.testing.assert_array_equal(images, want_images)
    np.testing.assert_array_equal(labels, want_labels)
