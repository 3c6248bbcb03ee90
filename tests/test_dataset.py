"""make_dali_dataset through DALI's TensorFlow plugin, on CPU, with Keras 3."""

import os

import numpy as np
import pytest

# Skipped only where these are absent: on a GPU machine that runs `-m gpu` with
# DALI alone. tests/test_environment.py fails wherever the full stack should be.
keras = pytest.importorskip("keras")
pd = pytest.importorskip("pandas")
tf = pytest.importorskip("tensorflow")

from helpers import CLASSES, NUM_INDEXED, FileOpens, index_of, indexed_paths
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


def learning_nothing(input_shape):
    """A model whose weights never change (SGD at rate 0): its loss is a function of
    the batches alone."""
    model = keras.Sequential([keras.Input(input_shape), keras.layers.Flatten(),
                              keras.layers.Dense(3)])
    model.compile(keras.optimizers.SGD(0.0),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def test_each_file_is_read_once_per_epoch_and_per_validation_pass(color_dir):
    """Keras makes an iterator at the end of every epoch and validation pass and never
    reads it: it must open no file."""
    train, val = make_dali_dataset(color_dir, image_size=(8, 8), batch_size=8, seed=1,
                                   validation_split=0.2, subset="both", device="cpu",
                                   check=None, verbose=False)
    model = learning_nothing((8, 8, 3))
    folders = [os.path.join(color_dir, name) for name in CLASSES]
    with FileOpens(folders) as opens:
        model.fit(train, validation_data=val, epochs=3, verbose=0)
        model.evaluate(val, verbose=0)
        predictions = model.predict(val, verbose=0)
    assert len(predictions) == len(val.file_paths) == 18
    assert {opens.counts[path] for path in train.file_paths} == {3}
    assert {opens.counts[path] for path in val.file_paths} == {3 + 1 + 1}
    assert sum(opens.counts.values()) == 3 * 72 + 5 * 18


def native_losses(model, pipe, epochs):
    """The mean loss over each native epoch, as `fit` reports it."""
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum")
    means = []
    for epoch in range(epochs):
        total = count = 0.0
        for images, labels in pipe.epoch(epoch):
            total += float(loss(labels, model(images)))
            count += len(labels)
        means.append(total / count)
    return means


def test_fit_epoch_n_is_the_native_epoch_n(color_dir):
    """Every epoch of `fit` draws the crops and order of the native epoch of the same
    number: an unread iterator starts no epoch."""
    options = dict(image_size=(10, 10), batch_size=16, seed=5, augment=True, device="cpu",
                   verbose=False)
    pipe = make_dali_pipeline(color_dir, **options)
    model = learning_nothing((10, 10, 3))
    history = model.fit(make_dali_dataset(color_dir, **options), epochs=3, verbose=0)
    expected = native_losses(model, pipe, 3)
    np.testing.assert_allclose(history.history["loss"], expected, rtol=1e-5)
    assert len(set(np.round(expected, 6))) == 3  # the epochs differ


def test_class_weight_in_the_graph_equals_keras_class_weight(color_dir):
    weights = {0: 0.5, 2: 3.0}  # class 1 keeps weight 1, as in Keras
    options = dict(image_size=(8, 8), batch_size=16, seed=2, device="cpu", verbose=False,
                   normalization="imagenet")
    graph = make_dali_dataset(color_dir, class_weight=weights, **options)
    images, labels, sample_weights = next(iter(graph))
    assert sample_weights.dtype == tf.float32 and sample_weights.shape == (16,)
    np.testing.assert_array_equal(sample_weights.numpy(),
                                  [weights.get(int(y), 1.0) for y in labels.numpy()])
    model = learning_nothing((8, 8, 3))
    in_graph = model.fit(graph, epochs=2, verbose=0).history["loss"]
    by_keras = model.fit(make_dali_dataset(color_dir, **options), class_weight=weights,
                         epochs=2, verbose=0).history["loss"]
    unweighted = model.fit(make_dali_dataset(color_dir, **options), epochs=1,
                           verbose=0).history["loss"]
    np.testing.assert_allclose(in_graph, by_keras, rtol=1e-6)
    assert abs(in_graph[0] - unweighted[0]) > 1e-3


def test_drop_remainder_gives_a_static_batch_dimension(indexed_dir):
    """As `tf.data`'s `batch(drop_remainder=True)`: KerasHub's `predict` reads it."""
    ds = make_dali_dataset(indexed_dir, verbose=False, drop_remainder=True, **SMALL)
    images, labels = ds.element_spec
    assert images.shape[0] == labels.shape[0] == SMALL["batch_size"]
    assert [len(x) for x, _ in ds] == [SMALL["batch_size"]] * len(ds)
    assert make_dali_dataset(indexed_dir, verbose=False, **SMALL).element_spec[0].shape[0] is None


def test_a_gpu_placed_dataset_refuses_cpu_transformations(indexed_dir):
    """On a GPU, `.map` and Keras's own `fit(class_weight=...)` (which maps) say what to
    do instead. The placement is set by hand here: this machine has no GPU."""
    ds = make_dali_dataset(indexed_dir, verbose=False, **SMALL)
    ds._gpu_device = "/gpu:0"
    message = (r"lives on the GPU \(/gpu:0\).*class_weight=.*in the model or its loss.*"
               r"copy_to_device.*device='cpu'.*Received: Dataset.map")
    with pytest.raises(ValueError, match=message):
        ds.map(lambda x, y: (x, y))
    with pytest.raises(ValueError, match=r"Received: Dataset.shuffle"):
        ds.shuffle(4)
    model = learning_nothing((8, 8, 3))
    with pytest.raises(ValueError, match=message):
        model.fit(ds, class_weight={0: 2.0}, epochs=1, verbose=0)
    assert ds.prefetch(1).element_spec == ds.element_spec  # prefetch runs on a GPU too


@pytest.mark.slow  # fresh interpreters
def test_import_sets_memory_growth_unless_set_or_too_late(tmp_path):
    import subprocess
    import sys

    from dalipipe.utils import child_env

    def variable_after(code, **env):
        environment = child_env(**env)
        if "TF_FORCE_GPU_ALLOW_GROWTH" not in env:
            environment.pop("TF_FORCE_GPU_ALLOW_GROWTH", None)
        script = code + "; import os; print(os.environ.get('TF_FORCE_GPU_ALLOW_GROWTH'))"
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              env=environment, timeout=120, cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.split()[-1]

    assert variable_after("import dalipipe") == "true"
    assert variable_after("import dalipipe", TF_FORCE_GPU_ALLOW_GROWTH="false") == "false"
    # TensorFlow imported first but not started: it will still read the variable.
    assert variable_after("import tensorflow; import dalipipe") == "true"
    # TensorFlow started first: it read the variable already, and dalipipe leaves it.
    assert variable_after("import tensorflow as tf; tf.constant(1); import dalipipe") == "None"


@pytest.mark.parametrize("num_loaded, gpu, per_sample, parts", [
    (121, False, True, [(range(0, 7), 16), (range(7, 8), 9)]),
    (128, False, True, [(range(0, 8), 16)]),
    (9, False, True, [(range(0, 1), 9)]),
    (128, True, True, [(range(0, 8), 16)]),
    (121, True, False, [(range(0, 8), 16)]),  # a GPU cannot join two DALI datasets
])
def test_tfrecord_feed_parts(num_loaded, gpu, per_sample, parts):
    from dalipipe.tf_inputs import feed_parts

    assert feed_parts(num_loaded, 16, feeds_bytes=True, gpu=gpu) == (per_sample, parts)
    assert feed_parts(num_loaded, 16, feeds_bytes=False, gpu=gpu) == \
        (False, [(range(-(-num_loaded // 16)), 16)])


def test_tfrecord_batches_feed_each_record_unpadded(tagged_dir, tmp_path):
    """One record 100 times larger than the others: each batch still moves at most 1.2
    times its records' bytes, and the dataset equals its directory's."""
    from PIL import Image

    from dalipipe import sources, tfrecord
    from dalipipe.tf_inputs import EpochFeed

    index = sources.index_source(tagged_dir)
    rng = np.random.default_rng(0)
    large = tmp_path / "large.png"
    Image.fromarray(rng.integers(0, 256, (120, 120, 3), dtype=np.uint8)).save(large)
    paths = list(index.file_paths[:39]) + [str(large)]
    labels = list(index.labels[:39]) + [1]
    tfrecord.write_tfrecords(paths, np.array(labels), index.class_names, str(tmp_path / "tf"),
                             num_shards=2)
    pattern = str(tmp_path / "tf" / "*.tfrecord")
    options = dict(image_size=(8, 8), batch_size=16, seed=3, normalization=None,
                   device="cpu", verbose=False)
    pipe = make_dali_pipeline(pattern, **options)
    sample_ids, _, _ = pipe.epoch_inputs(0)
    records = iter(EpochFeed(pipe).dataset("samples"))
    sizes = [os.path.getsize(p) for p in paths]
    for start in range(0, 40, 16):
        batch = sample_ids[start:start + 16]
        fed = sum(next(records).numpy().nbytes for _ in batch)
        encoded = int((pipe.load_records(batch)[1] - 8).sum())
        assert fed <= 1.2 * encoded, (fed, encoded)
    assert max(sizes) > 100 * np.median(sizes)
    (images, got_labels), batch_sizes = epoch_of(make_dali_dataset(pattern, **options))
    (want_images, want_labels) = [np.concatenate(o) for o in zip(*pipe.epoch(0))]
    assert batch_sizes == [16, 16, 8]
    np.testing.assert_array_equal(images, want_images)
    np.testing.assert_array_equal(got_labels, want_labels)


@pytest.mark.parametrize("label_columns, label_mode", [
    ("half", "raw"), (["half", "square"], "raw"), ("tags", "multi_hot"),
])
def test_table_targets_reach_keras_fit_with_their_images(tagged_dir, label_columns, label_mode):
    """Raw and multi-hot targets through DALI's TensorFlow plugin: float32, each with
    its image in a shuffled pass, and `fit` trains on them."""
    from helpers import tag_of, tagged_targets

    table = pd.DataFrame(tagged_targets(tagged_dir))
    dataset = make_dali_dataset(table, label_columns=label_columns, label_mode=label_mode,
                                image_size=(12, 12), batch_size=16, seed=5, device="cpu",
                                verbose=False)
    width = None if label_columns == "half" else 2
    spec = dataset.element_spec[1]
    assert spec.dtype == tf.float32 and spec.shape.as_list() == [None] + ([width] if width else [])
    want = {}
    for i in range(len(table)):
        row = table.iloc[i]
        if label_mode == "multi_hot":
            want[i] = [float("big" in row.tags), float("even" in row.tags)]
        else:
            want[i] = row[label_columns].to_numpy(np.float32) if width else np.float32(row.half)
    assert dataset.class_names == (["big", "even"] if label_mode == "multi_hot" else None)
    seen = 0
    for images, targets in dataset:
        for image, target in zip(images.numpy(), targets.numpy()):
            np.testing.assert_allclose(target, want[tag_of(image)], rtol=1e-6)
            seen += 1
    assert seen == len(table)
    model = keras.Sequential([keras.Input((12, 12, 3)), keras.layers.Flatten(),
                              keras.layers.Dense(width or 1)])
    model.compile("adam", "binary_crossentropy" if label_mode == "multi_hot" else "mse")
    assert len(model.fit(dataset, epochs=1, verbose=0).history["loss"]) == 1


def test_warnings_of_make_dali_dataset_name_the_user_s_line(indexed_dir):
    import warnings

    paths, _ = indexed_paths(indexed_dir)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make_dali_dataset(paths, verbose=False, **SMALL)
    found = [w for w in caught if "To predict, pass `shuffle=False`" in str(w.message)]
    assert len(found) == 1 and found[0].filename == __file__, [
        (str(w.message), w.filename) for w in caught]


def test_a_gpu_decoder_argument_on_its_own_names_decoder(indexed_dir):
    with pytest.raises(TypeError) as info:
        make_dali_dataset(indexed_dir, hw_decoder_load=0.65, **SMALL)
    assert str(info.value) == (
        "`hw_decoder_load` is an argument of DALI's GPU decoder, set through `decoder=`: "
        "decoder={'hw_decoder_load': 0.65}. Received: hw_decoder_load=0.65")
    with pytest.raises(TypeError, match="make_dali_dataset\\(\\) got an unexpected keyword "
                                        "argument 'img_size'. Received: img_size=8"):
        make_dali_dataset(indexed_dir, img_size=8, **SMALL)
    ds = make_dali_dataset(indexed_dir, format="pydataset", decoder={"hw_decoder_load": 0.9},
                           verbose=False, **SMALL)
    assert ds.image_pipeline.options.format == "pydataset"


def test_directory_names_the_first_argument_as_in_keras(indexed_dir):
    ds = make_dali_dataset(directory=indexed_dir, shuffle=False, verbose=False, **SMALL)
    assert ds.file_paths == make_dali_dataset(source=indexed_dir, shuffle=False, verbose=False,
                                              **SMALL).file_paths
    with pytest.raises(TypeError, match=r"make_dali_dataset\(\) takes its source once"):
        make_dali_dataset(indexed_dir, source=indexed_dir, **SMALL)


def test_predict_takes_one_image_path_and_a_numpy_array_of_paths(indexed_dir):
    paths, _ = indexed_paths(indexed_dir)
    model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                              keras.layers.Dense(2)])
    one = model.predict(make_dali_dataset(paths[0], shuffle=False, verbose=False, **SMALL),
                        verbose=0)
    assert one.shape == (1, 2)
    ordered = make_dali_dataset(np.array(paths), shuffle=False, verbose=False, **SMALL)
    assert ordered.file_paths == paths
    rows = model.predict(ordered, verbose=0)
    assert rows.shape == (len(paths), 2)
    np.testing.assert_allclose(rows[0], one[0], rtol=1e-5)


@pytest.mark.parametrize("format", ["tf", "pydataset"])
def test_one_call_decides_the_device_once(indexed_dir, monkeypatch, format):
    """`devices.place` decides the device, its CUDA device, the threads and the shard
    once per call, for both datasets of `subset="both"`, on TensorFlow's path and
    the native one; DALI is asked for its GPUs once. Real DALI and TensorFlow: the
    functions are only counted."""
    from dalipipe import dataset, devices

    calls = {}

    def counted(function):
        def count(*args, **kwargs):
            calls[function.__name__] = calls.get(function.__name__, 0) + 1
            return function(*args, **kwargs)
        return count

    monkeypatch.setattr(dataset, "place", counted(devices.place))
    for name in ("dali_gpu_count", "default_num_threads", "dali_device"):
        monkeypatch.setattr(devices, name, counted(getattr(devices, name)))
    pair = make_dali_dataset(indexed_dir, **{**SMALL, "device": "auto"}, format=format,
                             validation_split=0.25, subset="both", seed=1)
    assert calls.pop("place") == 1
    assert calls.pop("dali_gpu_count") == 1
    assert calls.pop("default_num_threads") == 1
    # TensorFlow takes the batches of "tf" and is asked; on its backend, DALI
    # alone decides for the native formats.
    assert calls.pop("dali_device", 0) == (0 if format == "tf" else 1)
    assert not calls
    for part in pair:
        pipeline = part.image_pipeline
        assert pipeline.options.num_threads == devices.default_num_threads(pipeline.device)


@pytest.mark.parametrize("backend, device, warned", [
    ("torch", "gpu", True), ("jax", "gpu", True), ("torch", "cpu", False),
    ("jax", "cpu", False), ("tensorflow", "gpu", False), ("numpy", "gpu", False),
])
def test_tf_format_on_torch_or_jax_with_a_gpu_names_the_copy_and_the_formats(
        backend, device, warned):
    from dalipipe.dataset import tf_format_cost

    message = tf_format_cost(backend, device)
    assert (message is not None) == warned
    if warned:
        assert "from the GPU to the host and back" in message
        assert 'format="pydataset" or "grain"' in message
        assert f"Keras backend={backend!r}" in message


def test_tf_format_warns_when_the_placement_is_a_gpu(indexed_dir, monkeypatch):
    """The decision reaches the user: `make_dali_dataset(format="tf")` on torch with a
    GPU placement warns (the placement and the adapter are stand-ins: no GPU here)."""
    from dalipipe import dataset, tf_dataset
    from dalipipe.devices import Placement

    monkeypatch.setattr(dataset, "keras_backend", lambda: "torch")
    monkeypatch.setattr(dataset, "place", lambda *a, **k: Placement("gpu", 0, 4, None))
    monkeypatch.setattr(tf_dataset, "make_tf_dataset", lambda *a: "made")
    with pytest.warns(UserWarning, match="copies each batch from the GPU to the host"):
        assert make_dali_dataset(indexed_dir, format="tf", image_size=(8, 8)) == "made"
