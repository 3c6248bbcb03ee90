"""The graph's inputs: the `"samples"` layout and the `"random"` columns, packed and
unpacked here.

`"samples"`, uint8, one row per sample, so that a label stays with its image
whatever the order (DALI iterates each input of a pipeline on its own):
- the label: a little-endian int32 class index (0 without labels), or the float32
  targets of `label_mode` "raw" and "multi_hot", 4 bytes per value
  (`label_width`);
- then, for image files, the path: UTF-8 (or the file system's bytes for
  undecodable names), padded with NUL bytes to the batch's longest (`pack_paths`);
- or, where dalipipe reads the images (TFRecord records, `gs://` objects), the
  little-endian int32 length of the encoded image and its bytes (`pack_records`).
  They travel one array per sample (`split_records`), or as one dense batch padded
  with zeros to its longest record (`pad_records`) where the TensorFlow inputs feed
  dense batches (`tf_inputs.feed_parts`).
`unpack_samples` reads each sample's label and encoded image back in the graph.
With `masks` (segmentation), a row is instead an image and its mask, without a
label: the little-endian int32 length of the image, the image, then the mask's path
(a local file that DALI reads). The image is its path, which DALI reads
(`pack_pairs`: padded with NUL bytes to the batch's longest), or its encoded bytes
where dalipipe reads the images (`pack_records` with `mask_paths`, which travel as
records do). For masks that dalipipe reads too (members of tar shards), the mask's
path is replaced by the little-endian int32 length of the encoded mask and its bytes
(`pack_records` with `mask_bytes`). `unpack_pairs` reads both back.

`"random"`, float32, one row per sample: the columns of the parts that `options`
use, in this order (`random_parts`):
- `"crop"` (with `augment`): `sampling.CROP`, the random-resized crop and the flip;
- `"recipe"`: the augmentation recipe (`dalipipe.recipes`);
- `"mix"`: the batch mixing (`dalipipe.mixing`).
With `boxes` (detection), each row ends with the sample's boxes and labels,
moved into the output image in NumPy (`dalipipe.annotations.placement`) from the
crop's columns: `max_boxes * 4` box coordinates then `max_boxes` labels (whole
numbers in float32), -1 for padding (`pack_boxes`, `box_columns`); the graph passes
them through (`unpack_boxes`). They ride in `"random"` because they depend on its
crop draws, row for row.
Each part has one shape: `columns` (its count of columns), `draw(seed, epoch,
positions, *, batch_size, image_size)` (float32 `(len(positions), columns)`, its rows
for the positions of an epoch's order that a pipeline loads) and `apply(draws,
...)`, its step in the graph, given its columns first. `draw_random` draws the rows
of an epoch and `unpack_random` slices each part's columns in the graph. Drawing
them outside DALI gives fresh augmentation every epoch (DALI restarts its own
generators with each new iterator) and the same draws on CPU and GPU.

NumPy only on import; the graph's side imports DALI inside its functions.
"""

import itertools
import math
import os
import struct
import sys
from typing import Optional, Sequence

import numpy as np

from dalipipe import sampling

# The bytes of a label value (int32 or float32), and of an encoded image's length.
VALUE_BYTES = 4


def target_shape_of(labels):
    """The shape of one sample's float32 targets in `labels` (float `(n,)` or
    `(n, k)`: `()` or `(k,)`), or None for int32 class indices and no labels."""
    if labels is None or np.asarray(labels).dtype.kind != "f":
        return None
    return tuple(np.shape(labels)[1:])


def label_width(target_shape):
    """The bytes of each sample's label at the start of `"samples"`: 4 for an int32
    class index (`target_shape` None), 4 per value of float32 targets."""
    return VALUE_BYTES * (1 if target_shape is None else math.prod(target_shape))


def _label_rows(labels, count):
    """uint8 `(count, label_width)`: each sample's label, little-endian."""
    values = np.zeros(count, np.int32) if labels is None else np.asarray(labels)
    kind = "<f4" if values.dtype.kind == "f" else "<i4"
    return np.ascontiguousarray(values.astype(kind).reshape(count, -1)).view(np.uint8)


class PathTable:
    """File paths encoded once (`os.fsencode`), packed into `"samples"` batches
    without a Python step per sample.

    Args:
        paths: file paths (`str`, `bytes` or path-like).

    Attributes:
        flat: uint8, every path's bytes one after the other.
        starts, lengths: int64 `(len(paths),)`, each path's place in `flat`.
    """

    def __init__(self, paths):
        paths = list(paths)
        encoding, errors = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()
        try:  # one encode of them all; one byte per character: the lengths are known
            joined = "".join(paths).encode(encoding, errors)
            lengths = np.fromiter(map(len, paths), np.int64, len(paths))
            if len(joined) != lengths.sum():
                raise TypeError("a character of more than one byte")
        except TypeError:  # bytes, path-likes, other characters: one at a time
            encoded = [os.fsencode(p) for p in paths]
            joined = b"".join(encoded)
            lengths = np.fromiter(map(len, encoded), np.int64, len(encoded))
        self.flat = np.frombuffer(joined, np.uint8)
        self.lengths = lengths
        self.starts = np.cumsum(lengths) - lengths

    def __len__(self):
        return len(self.lengths)

    def pack(self, ids, labels):
        """`pack_paths` of the paths `ids` (int indices) with their `labels`."""
        head = _label_rows(labels, len(ids))
        return np.concatenate([head, self.rows(ids)], axis=1)

    def pack_pairs(self, ids, masks):
        """`pack_pairs` of the paths `ids` and the same rows of `masks` (a `PathTable`
        aligned with this one)."""
        ids = np.asarray(ids, np.int64)
        lengths = self.lengths[ids]
        head = lengths.astype("<i4").reshape(-1, 1).view(np.uint8)
        return np.concatenate([head, self.rows(ids, then=masks)], axis=1)

    def rows(self, ids, *, then=None):
        """uint8 `(len(ids), longest)`: the paths `ids` (int indices), each followed by
        the same row of `then` (a `PathTable` aligned with this one) if given, padded
        with NUL bytes."""
        ids = np.asarray(ids, np.int64)
        lengths = self.lengths[ids]
        total = lengths if then is None else lengths + then.lengths[ids]
        offsets = np.arange(int(total.max(initial=0)))
        rows = _gather(self.flat, self.starts[ids][:, None] + offsets,
                       offsets < lengths[:, None])
        if then is not None:
            after = offsets - lengths[:, None]  # the offset in the second path
            rows = np.where(after >= 0, _gather(then.flat, then.starts[ids][:, None] + after,
                                                (after >= 0) & (offsets < total[:, None])),
                            rows)
        return rows


def _gather(flat, index, inside):
    """`flat[index]` where `inside`, else 0 (uint8, `index`'s shape)."""
    if not len(flat):
        return np.zeros(index.shape, np.uint8)
    values = flat[np.minimum(index, len(flat) - 1)]  # `index` is never below 0
    values[~inside] = 0
    return values


def pack_paths(file_paths: Sequence[str], labels: Optional[np.ndarray]) -> np.ndarray:
    """The `"samples"` batch of image files that DALI reads: per sample its label
    (`labels`: int32 `(n,)`, float32 `(n,)` or `(n, k)`, or None), then its path.

    Returns:
        uint8 `(len(file_paths), label bytes + longest path in bytes)`, paths padded
        with NUL bytes.
    """
    return PathTable(file_paths).pack(np.arange(len(file_paths)), labels)


def pack_pairs(file_paths: Sequence[str], mask_paths: Sequence[str]) -> np.ndarray:
    """The `"samples"` batch of images with their masks, files that DALI reads: per
    sample the int32 length of the image's path in bytes, the image's path, then its
    mask's path (`mask_paths`, aligned with `file_paths`).

    Returns:
        uint8 `(len(file_paths), 4 + longest pair of paths in bytes)`, padded with
        NUL bytes.
    """
    return PathTable(file_paths).pack_pairs(np.arange(len(file_paths)), PathTable(mask_paths))


def unpack_pairs(samples, *, feeds_bytes, mask_bytes=False):
    """Each sample's encoded image and encoded mask, from the `"samples"` input of
    `pack_pairs`, or of `pack_records` with `mask_paths` or `mask_bytes` (DALI graph
    code).

    Args:
        samples: the `"samples"` input's node (uint8, one row per sample; the NUL
            padding of a dense batch ends the mask's path).
        feeds_bytes: whether the rows hold the images' bytes, else their paths,
            which DALI reads here.
        mask_bytes: whether the rows hold the masks' bytes (`pack_records` with
            `mask_bytes`), else their paths, which DALI reads here.

    Returns:
        `(encoded, mask)` DALI nodes: the uint8 bytes of the image and of its mask
        (whose file DALI reads here).
    """
    from nvidia.dali import fn, types

    length = fn.reinterpret(samples[0:VALUE_BYTES], dtype=types.INT32, shape=[])
    end = VALUE_BYTES + length
    image = samples[VALUE_BYTES:end]
    image = image if feeds_bytes else fn.io.file.read(image)
    if not mask_bytes:
        return image, fn.io.file.read(samples[end:])
    mask_length = fn.reinterpret(samples[end:end + VALUE_BYTES], dtype=types.INT32, shape=[])
    begin = end + VALUE_BYTES
    return image, samples[begin:begin + mask_length]


def pack_records(payloads: Sequence[bytes], labels: Optional[np.ndarray], *,
                 mask_paths: Optional[Sequence[str]] = None,
                 mask_bytes: Optional[Sequence[bytes]] = None):
    """The `"samples"` of encoded images that dalipipe read: per sample its label (see
    `pack_paths`), the int32 length of its encoded image, then the image's bytes,
    one sample after the other in one buffer. With `mask_paths` (segmentation,
    aligned with `payloads`; `labels` is then None), `pack_pairs`'s layout with the
    image's bytes in place of its path: no label, the int32 length of the encoded
    image, its bytes, then its mask's path. With `mask_bytes` instead (the encoded
    masks, aligned with `payloads`), the mask's path is replaced by the int32 length
    of the encoded mask and its bytes.

    Returns:
        `(flat, lengths)`: uint8 `(sum(lengths),)`, and int64 `(n,)`, each sample's
        length in `flat`.
    """
    count = len(payloads)
    if (mask_paths is not None or mask_bytes is not None) and labels is not None:
        raise ValueError("A sample with a mask has no label: pass `labels=None` with "
                         f"`mask_paths`. Received: labels of shape {np.shape(labels)}")
    if mask_bytes is not None:
        heads = np.zeros((count, 0), np.uint8)
        tails = [struct.pack("<i", len(m)) + bytes(m) for m in mask_bytes]
        tail_lengths = np.fromiter(map(len, tails), np.int64, count)
    elif mask_paths is None:
        heads, tails = _label_rows(labels, count), itertools.repeat(b"", count)
        tail_lengths = 0
    else:
        heads, tails = np.zeros((count, 0), np.uint8), [os.fsencode(m) for m in mask_paths]
        tail_lengths = np.fromiter(map(len, tails), np.int64, count)
    sizes = np.fromiter(map(len, payloads), np.int64, count)
    width = heads.shape[1] + VALUE_BYTES
    fronts = np.concatenate([heads, sizes.astype("<i4").reshape(-1, 1).view(np.uint8)], axis=1)
    fronts = fronts.tobytes()
    fronts = [fronts[i:i + width] for i in range(0, count * width, width)]
    flat = np.frombuffer(b"".join(itertools.chain.from_iterable(zip(fronts, payloads, tails))),
                         np.uint8)
    return flat, width + sizes + tail_lengths


def split_records(flat, lengths):
    """`pack_records`'s `(flat, lengths)` one sample per array, as the graph takes
    them when no image is to be padded to its batch's longest.

    Returns:
        A list of `len(lengths)` uint8 arrays (views of `flat`).
    """
    ends = np.cumsum(lengths).tolist()
    return [flat[start:end] for start, end in zip([0] + ends[:-1], ends)]


def pad_records(flat, lengths):
    """`pack_records`'s `(flat, lengths)` as one dense batch.

    Returns:
        uint8 `(len(lengths), max(lengths))`, each sample padded with zeros.
    """
    padded = np.zeros((len(lengths), int(lengths.max())), np.uint8)
    for row, start, length in zip(padded, np.cumsum(lengths) - lengths, lengths):
        row[:length] = flat[start:start + length]
    return padded


def unpack_samples(samples, *, feeds_bytes, target_shape):
    """Each sample's label and encoded image, from the `"samples"` input (DALI graph
    code).

    Args:
        samples: the `"samples"` input's node (uint8, one row per sample; the
            padding of a dense batch is ignored).
        feeds_bytes: whether the rows hold the images' bytes (`pack_records`), else
            their paths (`pack_paths`), which DALI reads here.
        target_shape: the shape of one sample's float32 targets, or None for int32
            class indices.

    Returns:
        `(label, encoded)` DALI nodes: int32 `()` or float32 `target_shape`, and
        the uint8 bytes of the encoded image.
    """
    from nvidia.dali import fn, types

    start = label_width(target_shape)
    if target_shape is None:
        label = fn.reinterpret(samples[0:start], dtype=types.INT32, shape=[])
    else:
        label = fn.reinterpret(samples[0:start], dtype=types.FLOAT, shape=list(target_shape))
    if not feeds_bytes:
        return label, fn.io.file.read(samples[start:])
    length = fn.reinterpret(samples[start:start + VALUE_BYTES], dtype=types.INT32, shape=[])
    begin = start + VALUE_BYTES
    return label, samples[begin:begin + length]


def random_parts(options):
    """The parts of the `"random"` input for `options`, in column order.

    Returns:
        A dict `{name: part}`, names among `"crop"`, `"recipe"` and `"mix"`; empty
        when nothing is random (the input is not fed).
    """
    parts = {}
    if options.augment:
        parts["crop"] = sampling.CROP
    if options.recipe is not None:
        parts["recipe"] = options.recipe
    if options.mix is not None:
        parts["mix"] = options.mix
    return parts


def random_columns(options):
    """The columns of the `"random"` input for `options` (0: it is not fed): the
    parts' draws, then `box_columns(options)`."""
    return sum(part.columns for part in random_parts(options).values()) + box_columns(options)


def box_columns(options):
    """The columns of the boxes at the end of `"random"`: `5 * max_boxes` with
    `boxes`, else 0."""
    return 5 * options.max_boxes if options.boxes is not None else 0


def part_columns(random, options, name):
    """Part `name`'s columns of NumPy `"random"` rows (`(n, random_columns)`), as
    `unpack_random` slices them in the graph: a view of `random`."""
    start = 0
    for part_name, part in random_parts(options).items():
        if part_name == name:
            return random[:, start:start + part.columns]
        start += part.columns
    raise KeyError(name)


def pack_boxes(boxes, labels):
    """Boxes and labels padded to `max_boxes` (`annotations.boxes.pad_boxes`), as the
    last columns of `"random"`.

    Args:
        boxes: float32 `(n, max_boxes, 4)`.
        labels: int32 `(n, max_boxes)`.

    Returns:
        float32 `(n, 5 * max_boxes)`: each row's coordinates, then its labels.
    """
    boxes, labels = np.asarray(boxes, np.float32), np.asarray(labels)
    if np.abs(labels).max(initial=0) >= 2**24:
        raise ValueError("Box labels must be below 2**24 to travel in float32. "
                         f"Received: a label of {int(np.abs(labels).max())}")
    return np.concatenate([boxes.reshape(len(boxes), -1), labels.astype(np.float32)], axis=1)


def unpack_boxes(random, options):
    """The boxes and labels at the end of the `"random"` input (DALI graph code).

    Returns:
        `(boxes, labels)` DALI nodes: float32 `(max_boxes, 4)` and int32
        `(max_boxes,)` per sample.
    """
    from nvidia.dali import fn, types

    count = options.max_boxes
    start = random_columns(options) - box_columns(options)
    boxes = fn.reshape(random[start:start + 4 * count], shape=[count, 4])
    labels = fn.cast(random[start + 4 * count:start + 5 * count], dtype=types.INT32)
    return boxes, labels


def draw_random(options, epoch, positions, *, batch_size):
    """The `"random"` rows of epoch `epoch` for a pipeline.

    Args:
        options: resolved `Options` (their `seed` and `image_size`).
        epoch: the epoch's number.
        positions: int64 `(n,)`, the positions in the epoch's order that the
            pipeline loads, in loading order (`ImagePipeline.positions`).
        batch_size: the pipeline's batch size (the mixing draws per batch).

    Returns:
        float32 `(n, random_columns(options))`: each part's draws, side by side in
        `random_parts` order. Every row depends on the seed, the epoch and the
        positions only.
    """
    rows = [part.draw(options.seed, epoch, positions, batch_size=batch_size,
                      image_size=options.image_size)
            for part in random_parts(options).values()]
    if not rows:
        return np.zeros((len(positions), 0), np.float32)
    return np.concatenate(rows, axis=1).astype(np.float32, copy=False)


def unpack_random(random, options):
    """Each part's columns of the `"random"` input (DALI graph code).

    Args:
        random: the `"random"` input's node (float32, `random_columns(options)` per
            sample), or None when it is not fed.

    Returns:
        A dict `{name: node}` as `random_parts(options)` names the parts: float32
        `(part.columns,)` per sample, the columns that `part.apply` reads.
    """
    columns, start = {}, 0
    for name, part in random_parts(options).items():
        columns[name] = random[start:start + part.columns]
        start += part.columns
    return columns
