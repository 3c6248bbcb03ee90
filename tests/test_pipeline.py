"""`ImagePipeline` run natively on CPU (no TensorFlow): sources, shapes, epochs, shards.
What each option does to the pixels: test_graph.py."""

import re

import numpy as np
import pytest

from helpers import CLASSES, NUM_INDEXED, index_of, indexed_color, indexed_paths
from helpers import tag_of as index_of_tag
from dalipipe import make_dali_pipeline


def collect(batches):
    """Concatenates the outputs of an epoch, output by output."""
    batches = list(batches)
    return [np.concatenate([b[k] for b in batches]) for k in range(len(batches[0]))]


def test_solid_images_keep_their_colour(indexed_dir):
    pipe = make_dali_pipeline(indexed_dir, image_size=(8, 8), batch_size=8, shuffle=False,
                              normalization=None, dtype="uint8", device="cpu")
    images, labels = collect(pipe.epoch())
    assert images.dtype == np.uint8 and images.shape == (NUM_INDEXED, 8, 8, 3)
    for image, label, path in zip(images, labels, pipe.file_paths):
        i = index_of(image)
        assert path.endswith(f"img_{i:03d}.png")
        np.testing.assert_allclose(image.reshape(-1, 3).mean(0), indexed_color(i), atol=1)
        assert label == pipe.class_names.index(path.split("/")[-2])


@pytest.mark.parametrize(
    "options, image_shape, image_dtype, label_shape, label_dtype",
    [
        (dict(), (7, 9, 3), np.float32, (), np.int32),
        (dict(data_format="channels_first", dtype="float16"), (3, 7, 9), np.float16, (), np.int32),
        (dict(label_mode="categorical", normalization="unit"), (7, 9, 3), np.float32, (3,), np.float32),
        (dict(normalization=None, dtype="uint8", crop_to_aspect_ratio=True), (7, 9, 3), np.uint8, (), np.int32),
        (dict(augment=True, interpolation="bicubic"), (7, 9, 3), np.float32, (), np.int32),
    ],
)
def test_output_shapes_and_dtypes(indexed_dir, options, image_shape, image_dtype,
                                  label_shape, label_dtype):
    pipe = make_dali_pipeline(indexed_dir, image_size=(7, 9), batch_size=8, seed=3,
                              device="cpu", **options)
    batches = list(pipe.epoch())
    assert [len(b[0]) for b in batches] == [8, 8, 8, 5]
    for images, labels in batches:
        assert images.shape[1:] == image_shape and images.dtype == image_dtype
        assert labels.shape[1:] == label_shape and labels.dtype == label_dtype
    assert pipe.output_shapes == ((None,) + image_shape, (None,) + label_shape)


def test_every_sample_once_per_epoch_fresh_order(indexed_dir):
    class_names = ["red", "blue", "green"]  # not the sorted order
    pipe = make_dali_pipeline(indexed_dir, image_size=(4, 4), batch_size=8, seed=5,
                              normalization=None, class_names=class_names, device="cpu")
    orders = []
    for epoch in range(3):
        images, labels = collect(pipe.epoch(epoch))
        order = [index_of(im) for im in images]
        assert sorted(order) == list(range(NUM_INDEXED))
        assert labels.tolist() == [class_names.index(CLASSES[v % 3]) for v in order]
        orders.append(order)
    assert orders[0] != orders[1] != orders[2]


def test_augmentation_is_fresh_each_epoch_and_seeded(photo_path):
    def crops(seed, epoch):
        pipe = make_dali_pipeline([photo_path] * 4, labels=[0, 0, 0, 0], image_size=(16, 16),
                                  batch_size=4, shuffle=False, augment=True, seed=seed,
                                  device="cpu")
        return collect(pipe.epoch(epoch))[0]

    first = crops(1, 0)
    np.testing.assert_array_equal(first, crops(1, 0))
    assert not np.allclose(first, crops(1, 1))
    assert not np.allclose(first, crops(2, 0))
    assert not np.allclose(first[0], first[1])  # each sample has its own crop


def test_drop_remainder(indexed_dir):
    pipe = make_dali_pipeline(indexed_dir, image_size=(4, 4), batch_size=8, seed=0,
                              drop_remainder=True, device="cpu")
    assert pipe.num_batches == 3
    assert [len(b[0]) for b in pipe.epoch()] == [8, 8, 8]


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(label_mode="binary"), "there must be exactly 2 class_names. Received: class_names"),
        (dict(class_weight={3: 2.0}), "`class_weight` has keys that are not class indices: "
                                      "[3]; there are 3 classes, ['blue', 'green', 'red']. "
                                      "Received: class_weight={3: 2.0}"),
    ],
)
def test_errors_that_need_the_classes_name_the_argument_and_value(indexed_dir, options, message):
    """The options alone: test_options.py."""
    with pytest.raises(ValueError) as info:
        make_dali_pipeline(indexed_dir, **{"device": "cpu", **options})
    assert message in str(info.value)


def test_keywords_it_does_not_take_are_type_errors_naming_them(indexed_dir):
    """Its options are `Options`' (its signature is made from them), without `format`;
    a GPU decoder argument goes in `decoder=`."""
    with pytest.raises(TypeError, match=r"`format` belongs to `make_dali_dataset`.*"
                                        r"Received: format='tf'"):
        make_dali_pipeline(indexed_dir, format="tf")
    with pytest.raises(TypeError, match=re.escape(
            "`preallocate_width_hint` is an argument of DALI's GPU decoder, set through "
            "`decoder=`: decoder={'preallocate_width_hint': 640}")):
        make_dali_pipeline(indexed_dir, preallocate_width_hint=640)
    with pytest.raises(TypeError, match="unexpected keyword argument 'img_size'"):
        make_dali_pipeline(indexed_dir, img_size=8)
    pipe = make_dali_pipeline(source=indexed_dir, image_size=(4, 4), device="cpu",
                              verbose=False, decoder={"hw_decoder_load": 0.9})
    assert pipe.options.decoder["hw_decoder_load"] == 0.9 and pipe.options.format is None


def test_subset_both_augments_and_trims_training_only(indexed_dir):
    train, val = make_dali_pipeline(indexed_dir, validation_split=np.float32(0.3), subset="both",
                                    augment=True, drop_remainder=True, batch_size=4,
                                    image_size=(4, 4), device="cpu")
    assert train.options.augment and train.options.drop_remainder
    assert not val.options.augment and not val.options.drop_remainder
    assert sum(len(b[0]) for b in val.epoch()) == len(val.file_paths) == int(0.3 * NUM_INDEXED)
    assert sum(len(b[0]) for b in train.epoch()) == len(train.file_paths) // 4 * 4


def test_label_mode_none_on_a_list_gives_images_only(indexed_dir):
    paths, _ = indexed_paths(indexed_dir)
    pipe = make_dali_pipeline(paths, label_mode=None, image_size=(4, 4), batch_size=8,
                              shuffle=False, device="cpu")
    assert pipe.class_names is None and pipe.output_dtypes == ("float32",)
    assert [len(b) for b in pipe.epoch()] == [1, 1, 1, 1]


def test_run_can_leave_outputs_in_dali(indexed_dir):
    pipe = make_dali_pipeline(indexed_dir, image_size=(4, 4), batch_size=8, shuffle=False,
                              device="cpu")
    host = list(pipe.epoch())
    raw = pipe.run(*pipe.epoch_inputs(), copy_to_host=False)
    for (images, labels), (want_images, want_labels) in zip(raw, host):
        assert type(images).__name__ == "TensorListCPU"
        np.testing.assert_array_equal(np.array(images.as_tensor()), want_images)
        np.testing.assert_array_equal(np.array(labels.as_tensor()), want_labels)


@pytest.mark.parametrize("drop_remainder", [False, True])
def test_shards_split_one_order_with_zero_weight_padding(indexed_dir, drop_remainder):
    """Three replicas, global batch 6: each sample has weight 1 exactly once an epoch."""
    pipe = make_dali_pipeline(indexed_dir, image_size=(8, 8), batch_size=6, seed=4,
                              normalization=None, device="cpu",
                              drop_remainder=drop_remainder)
    shards = [pipe.shard([r], 3) for r in range(3)]
    steps = NUM_INDEXED // 6 if drop_remainder else -(-NUM_INDEXED // 6)
    weighed, order = [], []
    for shard in shards:
        assert shard.batch_size == 2 and shard.steps == shard.num_batches == steps
        images, labels, weights = collect(shard.epoch(1))
        assert len(images) == 2 * steps and weights.dtype == np.float32
        tags = [index_of(image) for image in images]
        assert labels.tolist() == [t % 3 for t in tags]
        weighed += [t for t, w in zip(tags, weights) if w == 1]
        assert set(weights.tolist()) <= {0.0, 1.0}
        order.append(tags)
    if drop_remainder:
        assert len(weighed) == len(set(weighed)) == NUM_INDEXED // 6 * 6
    else:
        assert sorted(weighed) == list(range(NUM_INDEXED))
    # Step s of replica r holds positions 6s + 2r, 6s + 2r + 1 of the shared order.
    full = collect(pipe.epoch(1))[0]
    expected = [index_of(image) for image in full]
    for r, tags in enumerate(order):
        for s in range(steps):
            for j in range(2):
                position = 6 * s + 2 * r + j
                if position < NUM_INDEXED:
                    assert tags[2 * s + j] == expected[position]


def test_a_worker_shard_feeds_its_replicas_in_turn(indexed_dir):
    pipe = make_dali_pipeline(indexed_dir, batch_size=8, seed=1, device="cpu")
    worker = pipe.shard([2, 3], 4)  # second worker of two, two replicas each
    positions, weights = worker.positions()
    assert worker.num_batches == 2 * worker.steps == 8
    assert positions[:8].tolist() == [4, 5, 6, 7, 12, 13, 14, 15]
    # Step 4 holds positions 28-31 of 29 samples: the last three are padding, each
    # replica repeating its own first samples.
    assert weights.tolist() == [1.0] * 13 + [0.0] * 3
    assert positions[-4:].tolist() == [28, 4, 6, 7]


def test_shard_batch_size_must_divide(indexed_dir):
    pipe = make_dali_pipeline(indexed_dir, batch_size=8, seed=1, device="cpu")
    with pytest.raises(ValueError, match=r"multiple of their number. Received: batch_size=8 "
                                         r"for 3 replicas"):
        pipe.shard([0], 3)


def test_tfrecords_give_the_images_and_labels_of_their_directory(tagged_dir, tagged_tfrecords):
    options = dict(image_size=(10, 10), batch_size=16, shuffle=False, normalization=None,
                   device="cpu", label_mode="categorical")
    from_files = collect(make_dali_pipeline(tagged_dir, **options).epoch())
    pipe = make_dali_pipeline(tagged_tfrecords, **options)
    assert pipe.class_names == ["blue", "green", "red"]
    assert pipe.file_paths[0].endswith("train-00000-of-00003.tfrecord#0")
    from_records = collect(pipe.epoch())
    for a, b in zip(from_files, from_records):
        np.testing.assert_array_equal(a, b)


def test_tfrecords_shard_and_augment_like_files(tagged_tfrecords):
    pipe = make_dali_pipeline(tagged_tfrecords, image_size=(8, 8), batch_size=8, seed=3,
                              normalization=None, device="cpu",
                              validation_split=0.25, subset="training")
    weighed = []
    for r in range(2):
        images, labels, weights = collect(pipe.shard([r], 2).epoch(0))
        weighed += [index_of_tag(image) for image, w in zip(images, weights) if w == 1]
    assert sorted(weighed) == sorted(index_of_tag(i) for i in collect(pipe.epoch(0))[0])
    assert len(weighed) == len(pipe.file_paths) == 121 - int(0.25 * 121)
    augmented = make_dali_pipeline(tagged_tfrecords, image_size=(8, 8), batch_size=8, seed=3,
                                   augment=True, device="cpu")
    images, labels = collect(augmented.epoch(0))
    assert images.shape == (121, 8, 8, 3) and labels.shape == (121,)


def test_class_weight_is_a_weight_output_times_the_padding(indexed_dir):
    weights = {0: 0.25, 2: 4.0}
    pipe = make_dali_pipeline(indexed_dir, image_size=(4, 4), batch_size=8, seed=1,
                              class_weight=weights, device="cpu", verbose=False)
    assert pipe.output_dtypes == ("float32", "int32", "float32")
    assert pipe.output_shapes[2] == (None,)
    _, labels, got = collect(pipe.epoch())
    np.testing.assert_array_equal(got, [weights.get(int(y), 1.0) for y in labels])
    shard = pipe.shard([1], 2)  # global batch 8, replica 1 of 2: the last step is padding
    _, labels, got = collect(shard.epoch())
    _, _, padding = shard.epoch_inputs(0)
    np.testing.assert_array_equal(got, padding * [weights.get(int(y), 1.0) for y in labels])
    assert 0 in got and 4.0 in got
    unweighted = make_dali_pipeline(indexed_dir, image_size=(4, 4), batch_size=8, seed=1,
                                    class_weight={}, device="cpu", verbose=False)
    assert set(collect(unweighted.epoch())[2]) == {1.0}


def test_cpu_pipeline_threads_are_the_usable_cores(indexed_dir):
    from dalipipe.utils import usable_cores

    pipe = make_dali_pipeline(indexed_dir, device="cpu", verbose=False)
    assert pipe.options.num_threads == usable_cores()


def test_tfrecord_samples_are_not_padded(tagged_tfrecords):
    pipe = make_dali_pipeline(tagged_tfrecords, batch_size=16, shuffle=False, device="cpu",
                              verbose=False)
    samples = pipe.load_samples(np.arange(16))
    flat, lengths = pipe.load_records(np.arange(16))
    assert isinstance(samples, list) and [len(s) for s in samples] == lengths.tolist()
    assert flat.dtype == np.uint8 and len(flat) == lengths.sum()
    for sample, label in zip(samples, pipe.labels[:16]):
        assert sample[:4].view("<i4")[0] == label
        assert sample[4:8].view("<i4")[0] == len(sample) - 8
        assert sample[8:12].tobytes() == b"\x89PNG"


def test_directory_is_the_first_argument_s_name_and_source_its_other(indexed_dir):
    """Keras's `directory=`, positional or named; `source=` for any source; not both."""
    common = dict(image_size=(4, 4), batch_size=8, device="cpu", verbose=False, seed=1)
    for pipe in (make_dali_pipeline(directory=indexed_dir, **common),
                 make_dali_pipeline(source=indexed_dir, **common)):
        assert pipe.file_paths == make_dali_pipeline(indexed_dir, **common).file_paths
    with pytest.raises(TypeError, match=r"make_dali_pipeline\(\) takes its source once: "
                                        r"`directory` .* and `source` are two names of it"):
        make_dali_pipeline(indexed_dir, source=indexed_dir, **common)
    with pytest.raises(TypeError, match=r"make_dali_pipeline\(\) missing its first argument"):
        make_dali_pipeline(**common)


def test_the_default_output_is_keras_s_float32_0_to_255(indexed_dir):
    """No `normalization` argument: Keras's pixels; "imagenet" one argument away."""
    common = dict(image_size=(8, 8), batch_size=8, shuffle=False, device="cpu", verbose=False)
    images, _ = collect(make_dali_pipeline(indexed_dir, **common).epoch())
    assert images.dtype == np.float32 and images.min() >= 0 and images.max() > 1
    for image, path in zip(images, make_dali_pipeline(indexed_dir, **common).file_paths):
        np.testing.assert_allclose(image.reshape(-1, 3).mean(0), indexed_color(index_of(image)),
                                   atol=1)
    imagenet, _ = collect(make_dali_pipeline(indexed_dir, normalization="imagenet",
                                             **common).epoch())
    mean = np.array([0.485, 0.456, 0.406]) * 255
    std = np.array([0.229, 0.224, 0.225]) * 255
    np.testing.assert_allclose(imagenet, (images - mean) / std, atol=1e-4)


def test_predict_sources_one_path_and_a_numpy_array(indexed_dir):
    paths, _ = indexed_paths(indexed_dir)
    common = dict(image_size=(8, 8), batch_size=8, shuffle=False, device="cpu", verbose=False,
                  normalization=None, dtype="uint8")
    (one,) = collect(make_dali_pipeline(paths[3], **common).epoch())
    assert one.shape == (1, 8, 8, 3) and index_of(one[0]) == index_of_path(paths[3])
    many = make_dali_pipeline(np.array(paths), **common)
    assert many.file_paths == paths and many.labels is None
    (images,) = collect(many.epoch())
    assert [index_of(image) for image in images] == [index_of_path(p) for p in paths]


def index_of_path(path):
    return int(path.rsplit("img_", 1)[1][:3])


def test_warnings_name_the_user_s_line(indexed_dir, tmp_path):
    """Every warning given through `make_dali_pipeline` points at the caller's file:
    the stray file, the bad files skipped, a numeric column as classes, images
    without labels shuffled (once per call)."""
    import warnings

    import pandas as pd

    paths, _ = indexed_paths(indexed_dir)
    folder = tmp_path / "photos"
    (folder / "a").mkdir(parents=True)
    (folder / "a" / "x.png").write_bytes(open(paths[0], "rb").read())
    (folder / "loose.png").write_bytes(open(paths[0], "rb").read())
    table = pd.DataFrame({"path": paths, "score": np.arange(len(paths)) / 2})
    common = dict(image_size=(4, 4), batch_size=8, device="cpu", verbose=False)
    bad = tmp_path / "bad"
    (bad / "a").mkdir(parents=True)
    (bad / "a" / "x.png").write_bytes(open(paths[0], "rb").read())
    (bad / "a" / "empty.png").write_bytes(b"")
    calls = [
        (lambda: make_dali_pipeline(str(folder), **common), "outside the class subfolders"),
        (lambda: make_dali_pipeline(str(bad), on_bad_file="skip", **common), "Left out 1"),
        (lambda: make_dali_pipeline(table, labels="score", **common), "holds numbers"),
        (lambda: make_dali_pipeline(paths, **common), "To predict, pass `shuffle=False`"),
    ]
    for call, text in calls:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call()
        found = [w for w in caught if text in str(w.message)]
        assert len(found) == 1, [str(w.message) for w in caught]
        assert found[0].filename == __file__, (found[0].filename, text)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make_dali_pipeline(paths, shuffle=False, **common)
        make_dali_pipeline(paths[0], **common)  # one image has one order
    assert not [w for w in caught if "predict" in str(w.message)]


@pytest.mark.parametrize("label_columns, label_mode, shape", [
    ("score", "raw", ()), (["score", "double"], "raw", (2,)),
    ("tags", "multi_hot", (2,)), (["cat", "dog"], "multi_hot", (2,)),
])
def test_table_targets_travel_through_the_graph(indexed_dir, label_columns, label_mode, shape):
    """Raw and multi-hot targets come out float32, each with its image, shuffled and
    sharded with zero-weight padding."""
    import pandas as pd

    paths, _ = indexed_paths(indexed_dir)
    tags = [index_of_path(p) for p in paths]
    table = pd.DataFrame({
        "path": paths, "score": [t / 4 for t in tags], "double": [t * 2.0 for t in tags],
        "tags": [["cat", "dog"][: t % 3] for t in tags],
        "cat": [t % 2 for t in tags], "dog": [1 - t % 2 for t in tags],
    })
    pipe = make_dali_pipeline(table, label_columns=label_columns, label_mode=label_mode,
                              image_size=(4, 4), batch_size=8, seed=3, device="cpu",
                              verbose=False)
    assert pipe.output_dtypes == ("float32", "float32")
    assert pipe.output_shapes[1] == (None, *shape)
    want = pipe.labels
    assert want.dtype == np.float32 and want.shape == (len(paths), *shape)
    for shard in (pipe, pipe.shard([1], 2)):
        images, targets, *weights = collect(shard.epoch(1))
        assert targets.dtype == np.float32 and targets.shape[1:] == shape
        by_tag = {index_of_path(p): want[i] for i, p in enumerate(pipe.file_paths)}
        for image, target in zip(images, targets):
            np.testing.assert_array_equal(target, by_tag[index_of(image)])
        assert len(weights) == (shard is not pipe)


def test_skip_is_suggested_only_when_some_file_would_be_left(tmp_path):
    folder = tmp_path / "bad" / "a"
    folder.mkdir(parents=True)
    for i in range(2):
        (folder / f"empty_{i}.png").write_bytes(b"")
    common = dict(image_size=(4, 4), device="cpu", verbose=False)
    with pytest.raises(ValueError) as info:
        make_dali_pipeline(str(tmp_path / "bad"), **common)
    assert "2 of 2 files cannot be loaded" in str(info.value)
    assert "on_bad_file" not in str(info.value)
    Image = pytest.importorskip("PIL.Image")
    Image.new("RGB", (4, 4)).save(folder / "good.png")
    with pytest.raises(ValueError, match=r"2 of 3 files .* or pass on_bad_file='skip'"):
        make_dali_pipeline(str(tmp_path / "bad"), **common)


def test_without_shuffle_a_table_or_a_list_keeps_its_own_order(indexed_dir):
    """shuffle=False reads a folder's files sorted by path, and a table's rows or a
    list's paths in the order given, also in the validation part of a split."""
    import pandas as pd

    paths, _ = indexed_paths(indexed_dir)
    order = [int(i) for i in np.random.RandomState(3).permutation(NUM_INDEXED)]
    given = [paths[i] for i in order]
    table = pd.DataFrame({"path": given, "label": [CLASSES[i % 3] for i in order]})
    common = dict(shuffle=False, image_size=(4, 4), batch_size=8, normalization=None,
                  device="cpu", verbose=False)
    for source, labels in ((table, "label"), (given, None)):
        pipe = make_dali_pipeline(source, labels=labels, **common)
        assert pipe.file_paths == given
        images = collect(pipe.epoch())[0]
        assert [index_of(image) for image in images] == order
        held_out = make_dali_pipeline(source, labels=labels, validation_split=0.25,
                                      subset="validation", **common)
        assert held_out.file_paths == given[-int(0.25 * NUM_INDEXED):]
    folder = make_dali_pipeline(indexed_dir, **common)
    assert folder.file_paths == sorted(paths)


def test_class_names_keep_a_table_s_class_indices_across_chunks(indexed_dir):
    """A dataset per chunk of a table numbers the classes of its chunk alone: a chunk
    without "grey" makes "white" 1, not 2. With `class_names=` every chunk's batches
    carry the indices of one dataset of the whole table."""
    import pandas as pd

    paths, _ = indexed_paths(indexed_dir)
    colours = [("white", "black", "grey")[i % 3] for i in range(NUM_INDEXED)]
    table = pd.DataFrame({"path": paths, "multi": colours})
    chunks = [table[table["multi"] != "grey"], table[table["multi"] == "grey"].iloc[:4],
              table.iloc[10:20]]
    common = dict(labels="multi", shuffle=False, image_size=(4, 4), batch_size=8,
                  device="cpu", verbose=False)

    def labels_by_path(pipe):  # without shuffle, the batches follow file_paths
        return dict(zip(pipe.file_paths, collect(pipe.epoch())[1].tolist()))

    whole = make_dali_pipeline(table, **common)
    assert whole.class_names == ["black", "grey", "white"]
    expected = labels_by_path(whole)
    alone = make_dali_pipeline(chunks[0], **common)
    assert alone.class_names == ["black", "white"]
    white = [p for p, colour in zip(paths, colours) if colour == "white"]
    assert {labels_by_path(alone)[p] for p in white} == {1}  # alone, "white" is 1
    assert {expected[p] for p in white} == {2}
    for chunk in chunks:
        pipe = make_dali_pipeline(chunk, class_names=whole.class_names, **common)
        assert pipe.class_names == whole.class_names
        got = labels_by_path(pipe)
        assert len(got) == len(chunk) and got == {p: expected[p] for p in got}
