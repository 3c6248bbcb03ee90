"""The graph's input layouts: each packed by `dalipipe.feed` and unpacked by it in a
real (tiny, CPU) DALI pipeline, values compared with what went in."""

import numpy as np
import pytest

from dalipipe import feed, sampling
from dalipipe.mixing import CutMix
from dalipipe.options import Options
from dalipipe.recipes import RandAugment
from helpers import indexed_paths

pytest.importorskip("nvidia.dali")


def run_graph(graph, batch_size):
    """The outputs of one batch of a CPU DALI pipeline of `graph()`: per output, a
    list of NumPy arrays, one per sample."""
    from nvidia.dali import pipeline_def

    pipe = pipeline_def(graph, batch_size=batch_size, num_threads=1, device_id=None)()
    pipe.build()
    return [[np.array(out[i]) for i in range(batch_size)] for out in pipe.run()]


def unpacked(batch, *, feeds_bytes, target_shape):
    """`(labels, encoded)` of the `"samples"` batch `batch` (a dense array or a list
    of per-sample arrays) as the graph unpacks it (`feed.unpack_samples`)."""
    from nvidia.dali import fn, types

    def graph():
        samples = fn.external_source(source=lambda: batch, dtype=types.UINT8, ndim=1,
                                     batch=True)
        return feed.unpack_samples(samples, feeds_bytes=feeds_bytes, target_shape=target_shape)

    return run_graph(graph, len(batch))


def file_bytes(paths):
    result = []
    for path in paths:
        with open(path, "rb") as f:
            result.append(f.read())
    return result


def test_pack_paths_packs_label_and_path():
    rows = feed.pack_paths(["/a/b.jpg", "/ccc.png"], np.array([3, -1]))
    assert rows.dtype == np.uint8 and rows.shape == (2, 4 + len("/a/b.jpg"))
    assert rows[:, :4].copy().view("<i4").ravel().tolist() == [3, -1]
    assert bytes(rows[1, 4:]).rstrip(b"\0") == b"/ccc.png"


def test_int_labels_and_paths_come_back_from_the_graph(indexed_dir):
    paths = indexed_paths(indexed_dir)[0][:5]
    labels = np.array([3, -1, 0, 2**31 - 1, 7], np.int32)
    samples = feed.pack_paths(paths, labels)
    assert feed.target_shape_of(labels) is None and feed.label_width(None) == 4
    got_labels, encoded = unpacked(samples, feeds_bytes=False, target_shape=None)
    assert all(label.dtype == np.int32 and label.shape == () for label in got_labels)
    assert [int(label) for label in got_labels] == labels.tolist()
    assert [e.tobytes() for e in encoded] == file_bytes(paths)


@pytest.mark.parametrize("targets", [
    np.array([0.5, -2.25, 1e3, 0.0], np.float32),  # "raw", one column: (n,)
    np.array([[1, 0, 1], [0, 0, 0], [1, 1, 1], [0, 1, 0]], np.float32),  # "multi_hot"
    np.array([[0.1, 2.0], [3.5, -4.0], [5.0, 6.25], [7.0, 8.0]], np.float64),  # raw (n, 2)
], ids=["raw", "multi_hot", "raw_pairs"])
def test_float_targets_and_paths_come_back_from_the_graph(indexed_dir, targets):
    paths = indexed_paths(indexed_dir)[0][:4]
    samples = feed.pack_paths(paths, targets)
    target_shape = feed.target_shape_of(targets)
    assert target_shape == targets.shape[1:]
    assert samples.shape[1] == feed.label_width(target_shape) + max(map(len, paths))
    got_targets, encoded = unpacked(samples, feeds_bytes=False, target_shape=target_shape)
    assert all(t.dtype == np.float32 and t.shape == target_shape for t in got_targets)
    np.testing.assert_array_equal(np.stack(got_targets), targets.astype(np.float32))
    assert [e.tobytes() for e in encoded] == file_bytes(paths)


@pytest.mark.parametrize("form", ["per_sample", "padded"])
@pytest.mark.parametrize("labels", [
    np.array([4, 0, -3, 1, 9], np.int32),
    None,
    np.array([[0.25, 1.0], [2.0, 3.0], [4.5, 5.0], [6.0, 7.0], [8.0, -9.5]], np.float32),
], ids=["int", "unlabeled", "targets"])
def test_fed_bytes_come_back_from_the_graph(indexed_dir, form, labels):
    """Records (`pack_records`) one array per sample (`split_records`) and as one
    dense batch (`pad_records`): the graph cuts each image at its own length."""
    from nvidia.dali import fn, types

    payloads = file_bytes(indexed_paths(indexed_dir)[0][:5])
    flat, lengths = feed.pack_records(payloads, labels)
    assert flat.dtype == np.uint8 and lengths.dtype == np.int64
    width = feed.label_width(feed.target_shape_of(labels)) + 4
    assert lengths.tolist() == [width + len(p) for p in payloads] and len(flat) == lengths.sum()
    if form == "per_sample":
        batch = feed.split_records(flat, lengths)
        assert [len(row) for row in batch] == lengths.tolist()
    else:
        batch = feed.pad_records(flat, lengths)
        assert batch.shape == (5, lengths.max())
    target_shape = feed.target_shape_of(labels)
    got_labels, encoded = unpacked(batch, feeds_bytes=True, target_shape=target_shape)
    expected = np.zeros(5, np.int32) if labels is None else labels
    np.testing.assert_array_equal(np.stack(got_labels), expected)
    assert [e.tobytes() for e in encoded] == payloads

    def decode():
        samples = fn.external_source(source=lambda: batch, dtype=types.UINT8, ndim=1,
                                     batch=True)
        _, images = feed.unpack_samples(samples, feeds_bytes=True, target_shape=target_shape)
        return fn.decoders.image(images, device="cpu", output_type=types.RGB)

    (images,) = run_graph(decode, 5)
    assert all(image.ndim == 3 and image.shape[2] == 3 for image in images)


@pytest.mark.parametrize("options, names", [
    (dict(), []),
    (dict(augment=True), ["crop"]),
    (dict(mix="mixup"), ["mix"]),
    (dict(augment="trivialaugment", mix="cutmix"), ["crop", "recipe", "mix"]),
])
def test_random_parts_follow_the_options(options, names):
    options = Options(seed=1, image_size=(16, 16), label_mode="categorical", **options)
    parts = feed.random_parts(options)
    assert list(parts) == names
    assert feed.random_columns(options) == sum(p.columns for p in parts.values())
    rows = feed.draw_random(options, 0, np.arange(10), batch_size=4)
    assert rows.dtype == np.float32 and rows.shape == (10, feed.random_columns(options))


def test_random_columns_come_back_from_the_graph_as_drawn():
    """The crop, the recipe and the mixing together: the graph slices each part's
    columns exactly as `draw_random` drew them, and the crop's step reads its own."""
    from nvidia.dali import fn, types

    options = Options(seed=11, image_size=(24, 32), label_mode="categorical",
                      augment=RandAugment(num_ops=2),
                      mix=CutMix(factor=0.8))
    positions, batch_size = np.arange(3, 15), 6
    rows = feed.draw_random(options, 4, positions, batch_size=batch_size)
    parts = feed.random_parts(options)
    assert list(parts) == ["crop", "recipe", "mix"]
    assert [p.columns for p in parts.values()] == [sampling.NUM_RANDOM, 4, 6]
    starts = np.cumsum([0] + [p.columns for p in parts.values()])
    for (name, part), start, end in zip(parts.items(), starts, starts[1:]):
        np.testing.assert_array_equal(
            rows[:, start:end],
            part.draw(options.seed, 4, positions, batch_size=batch_size,
                      image_size=options.image_size), err_msg=name)
    np.testing.assert_array_equal(rows[:, :5], sampling.epoch_random(11, 4, positions))
    # Each image's (height, width), as `fn.peek_image_shape` gives them in the graph.
    sizes = np.stack([np.arange(40, 40 + len(rows)), np.arange(90, 90 - len(rows), -1)],
                     axis=1).astype(np.float32)

    def graph():
        random = fn.external_source(source=lambda: list(rows), dtype=types.FLOAT, ndim=1,
                                    batch=True)
        shape = fn.external_source(source=lambda: list(sizes), dtype=types.FLOAT, ndim=1,
                                   batch=True)
        draws = feed.unpack_random(random, options)
        window, mirror = sampling.CROP.apply(draws["crop"], shape[0], shape[1])
        return (*draws.values(), *window, mirror)

    outputs = run_graph(graph, len(rows))
    for (name, _), start, end, got in zip(parts.items(), starts, starts[1:], outputs):
        np.testing.assert_array_equal(np.stack(got), rows[:, start:end], err_msg=name)
    window = [np.stack(values) for values in outputs[3:7]]
    expected = sampling.random_resized_crop_window(sizes[:, 0], sizes[:, 1], rows[:, :5].T)
    for got, want in zip(window, expected):
        np.testing.assert_allclose(got, want, rtol=1e-5)
    np.testing.assert_array_equal(np.stack(outputs[7]), (rows[:, 4] < 0.5).astype(np.int32))


def test_pack_pairs_packs_the_image_path_then_the_mask_path():
    rows = feed.pack_pairs(["/a/b.jpg", "/ccc.png"], ["/m/b.png", "/m/ccc.png"])
    assert rows.dtype == np.uint8 and rows.shape == (2, 4 + len("/ccc.png/m/ccc.png"))
    assert rows[:, :4].copy().view("<i4").ravel().tolist() == [len("/a/b.jpg"), len("/ccc.png")]
    assert bytes(rows[0, 4:]).rstrip(b"\0") == b"/a/b.jpg/m/b.png"


def test_images_and_masks_come_back_from_the_graph(indexed_dir):
    """`unpack_pairs` reads each sample's image and mask, whatever the lengths of
    their paths."""
    from nvidia.dali import fn, types

    paths = indexed_paths(indexed_dir)[0][:4]
    masks = paths[::-1]  # any files: here the images in the other order
    samples = feed.pack_pairs(paths, masks)

    def graph():
        rows = fn.external_source(source=lambda: samples, dtype=types.UINT8, ndim=1,
                                  batch=True)
        return feed.unpack_pairs(rows, feeds_bytes=False)

    images, mask_files = run_graph(graph, len(paths))
    assert [bytes(e) for e in images] == file_bytes(paths)
    assert [bytes(e) for e in mask_files] == file_bytes(masks)


@pytest.mark.parametrize("form", ["per_sample", "padded"])
def test_fed_bytes_and_mask_paths_come_back_from_the_graph(indexed_dir, form):
    """Images read by dalipipe with their masks (`pack_records` with `mask_paths`):
    no label, the image's length and bytes, then the mask's path, one array per
    sample or one dense batch padded with zeros after the path."""
    from nvidia.dali import fn, types

    paths = indexed_paths(indexed_dir)[0][:4]
    masks = paths[::-1]  # any files: here the images in the other order
    payloads = file_bytes(paths)
    flat, lengths = feed.pack_records(payloads, None, mask_paths=masks)
    assert lengths.tolist() == [4 + len(p) + len(m.encode()) for p, m in zip(payloads, masks)]
    assert bytes(flat[4 + len(payloads[0]):lengths[0]]) == masks[0].encode()
    batch = feed.split_records(flat, lengths) if form == "per_sample" \
        else feed.pad_records(flat, lengths)

    def graph():
        rows = fn.external_source(source=lambda: batch, dtype=types.UINT8, ndim=1,
                                  batch=True)
        return feed.unpack_pairs(rows, feeds_bytes=True)

    images, mask_files = run_graph(graph, len(paths))
    assert [bytes(e) for e in images] == payloads
    assert [bytes(e) for e in mask_files] == file_bytes(masks)


def test_boxes_ride_at_the_end_of_random_and_come_back_from_the_graph():
    """With `boxes`, `"random"` ends with `5 * max_boxes` columns (`pack_boxes`):
    the crop's draws come first, and `unpack_boxes` gives back float32
    `(max_boxes, 4)` boxes and int32 `(max_boxes,)` labels, -1 padding included."""
    from nvidia.dali import fn, types

    options = Options(seed=2, image_size=(8, 8), augment=True, boxes="instances.json",
                      max_boxes=3, bounding_box_format="xyxy")
    assert feed.random_columns(options) == sampling.NUM_RANDOM + 15
    assert feed.box_columns(options) == 15
    boxes = np.full((2, 3, 4), -1, np.float32)
    labels = np.full((2, 3), -1, np.int32)
    boxes[0, :2] = [[0.5, 1.25, 3, 4], [2, 2, 7.75, 8]]
    labels[0, :2] = [4, 0]
    draws = feed.draw_random(options, 0, np.arange(2), batch_size=2)
    rows = np.concatenate([draws, feed.pack_boxes(boxes, labels)], axis=1)
    assert rows.shape == (2, feed.random_columns(options)) and rows.dtype == np.float32
    np.testing.assert_array_equal(feed.part_columns(rows, options, "crop"), draws)

    def graph():
        random = fn.external_source(source=lambda: list(rows), dtype=types.FLOAT, ndim=1,
                                    batch=True)
        return feed.unpack_boxes(random, options)

    got_boxes, got_labels = run_graph(graph, 2)
    np.testing.assert_array_equal(np.stack(got_boxes), boxes)
    assert np.stack(got_labels).dtype == np.int32
    np.testing.assert_array_equal(np.stack(got_labels), labels)
    with pytest.raises(ValueError, match=r"labels must be below 2\*\*24"):
        feed.pack_boxes(boxes, labels + 2**24)
