"""Detection boxes moved as the DALI graph moves their images, in NumPy, for many
samples at once.

The graph's geometry is known before it runs: the random-resized crop and the flip
come from the `"random"` input's crop columns (`sampling.CROP`, drawn in NumPy), and
each image's size from the check. `windows` computes each sample's window and flip
with the arithmetic of `dalipipe.graph` (`sampling.random_resized_crop_window`, the
decoder's whole-pixel slice, `_central_window`, `_letterbox`); `place_boxes` then
moves the boxes of all the samples together: transformed into the output image,
clipped to it, dropped when less than `min_box_visibility` of a box's area is left
inside the window (or nothing at all), converted to `bounding_box_format` (relative
formats relative to the output image) and padded to `max_boxes` with -1, as
`keras.layers.MaxNumBoundingBoxes` pads. `dalipipe.feed.pack_boxes` carries the
result into the graph, which passes it through.

The boxes of a source live in a `BoxTable`, flat arrays made once
(`box_table`): an epoch's boxes are gathered by index, and no Python runs per
sample or per box. Samples go `CHUNK` at a time, which bounds the memory of the
intermediate arrays.

With a recipe, the sample's map of its geometric operations (`affine`, from
`recipes.RandAugment.affines`, drawn from the same columns as the graph's) then
moves each box: its four corners through the map, the box enclosing them, clipped to
the output image. A rotated or sheared box encloses its object more loosely than
the unmoved box (a box holds no more than its corners). The share of a box kept is then the
share left by the crop times the share of the moved box left inside the image.

With `box_crop`, `keep_a_box` moves each crop window (its position only: the area,
aspect ratio and flip stay as drawn) so that it holds the central 60% of one of the
image's boxes, and that box is kept; the image and its boxes both use the moved
window.

The arithmetic is the per-sample arithmetic it replaced, operation for operation
(float32 where the graph computes in float32, float64 elsewhere; Python's `min` and
`max` as `_min` and `_max`): `tests/test_placement.py` checks the results bit for
bit against that per-sample reference.
"""

from typing import NamedTuple

import numpy as np

from dalipipe import feed, sampling
from dalipipe.annotations.boxes import convert_format

# Samples placed together: the intermediate arrays hold a few hundred bytes per box.
CHUNK = 16384
# The share of a chosen box's width and height, about its center, that a box-aware
# crop holds (when the window is large enough): at least 36% of its area.
BOX_CROP_CORE = 0.6


class BoxTable(NamedTuple):
    """The boxes of a source's images, flat.

    Attributes:
        boxes: float64 `(m, 4)`, every image's boxes one after the other, absolute
            `xyxy` pixels of the source image.
        labels: int32 `(m,)`.
        starts: int64 `(n,)`, the first row of each image's boxes.
        counts: int64 `(n,)`, how many boxes each image has.
        sizes: float32 `(n, 2)`, each image's `(width, height)`.
    """

    boxes: np.ndarray
    labels: np.ndarray
    starts: np.ndarray
    counts: np.ndarray
    sizes: np.ndarray

    def take(self, sample_ids):
        """`(rows, owners)`: int64 indices into `boxes` of the boxes of `sample_ids`
        (in order, each image's boxes in their order), and the position in
        `sample_ids` of each one's image."""
        sample_ids = np.asarray(sample_ids, np.int64)
        counts = self.counts[sample_ids]
        owners = np.repeat(np.arange(len(sample_ids)), counts)
        firsts = np.cumsum(counts) - counts
        rows = self.starts[sample_ids][owners] + (np.arange(len(owners)) - firsts[owners])
        return rows, owners


def box_table(entries):
    """The `BoxTable` of `entries`, `annotations.boxes.ImageBoxes` (their `boxes`,
    `labels` and `size`) in the index's order."""
    counts = np.array([len(e.boxes) for e in entries], np.int64)
    parts = [np.asarray(e.boxes, np.float64).reshape(-1, 4) for e in entries]
    labels = [np.asarray(e.labels, np.int32).reshape(-1) for e in entries]
    return BoxTable(
        np.concatenate(parts) if parts else np.zeros((0, 4)),
        np.concatenate(labels) if labels else np.zeros(0, np.int32),
        np.cumsum(counts) - counts, counts,
        np.array([e.size for e in entries], np.float32).reshape(-1, 2),
    )


def _min(a, b):
    """Python's `min(a, b)`, elementwise: `a` unless `b < a` (signed zeros kept)."""
    return np.where(b < a, b, a)


def _max(a, b):
    """Python's `max(a, b)`, elementwise: `a` unless `b > a`."""
    return np.where(b > a, b, a)


def windows(options, sizes, crops=None):
    """The part of each image that the graph maps onto its output, and where.

    Args:
        options: resolved `Options`.
        sizes: float32 `(n, 2)`, the images' `(width, height)`.
        crops: float32 `(n, 5)`, the samples' crop columns of `"random"`, with
            `augment`.

    Returns:
        `(window, placed, mirror)`: float64 `(n, 4)` `window`, the source pixels
        shown `(x1, y1, x2, y2)` (unclipped for `pad_to_aspect_ratio`: the whole
        image); float64 `(n, 4)` `placed`, where the window lands in the output image
        (pixels); bool `(n,)` `mirror`, whether the output is flipped horizontally.
    """
    height, width = options.image_size
    image_w, image_h = sizes[:, 0], sizes[:, 1]
    n = len(sizes)
    whole = np.tile(np.array([0.0, 0.0, width, height]), (n, 1))
    if options.augment:
        x, y, w, h = sampling.random_resized_crop_window(image_h, image_w, crops.T)
        # The decoder slices whole pixels: DALI rounds the anchor and the end.
        window = np.stack([_round(x), _round(y), _round(x + w), _round(y + h)], -1)
        return window, whole, crops[:, 4] < 0.5
    if options.pad_to_aspect_ratio:
        ratio = _max(image_w / np.float32(width), image_h / np.float32(height))
        fit_h, fit_w = image_h / ratio, image_w / ratio
        top, left = np.floor((height - fit_h) / 2), np.floor((width - fit_w) / 2)
        top, left = top.astype(np.float64), left.astype(np.float64)
        placed = np.stack([left, top, left + np.floor(fit_w), top + np.floor(fit_h)], -1)
        window = np.stack([np.zeros(n), np.zeros(n), image_w, image_h], -1).astype(np.float64)
        return window, placed, np.zeros(n, bool)
    window_h, window_w = image_h, image_w
    if options.crop_to_aspect_ratio:
        aspect = np.float32(width / height)
        window_w = _min(image_w, image_h * aspect)
        window_h = _min(image_h, image_w / aspect)
    fraction = np.float32(options.central_fraction)
    window_h, window_w = window_h * fraction, window_w * fraction
    top, left = (image_h - window_h) / 2, (image_w - window_w) / 2
    window = np.stack([left, top, left + window_w, top + window_h], -1).astype(np.float64)
    return window, whole, np.zeros(n, bool)


def _round(value):
    """float32 values rounded half up, as float64."""
    return np.floor(np.asarray(value).astype(np.float64) + 0.5)


def place_boxes(options, table, sample_ids, crops=None, affines=None):
    """The boxes of `sample_ids` as the graph shows their images.

    Args:
        options: resolved `Options` (`image_size`, the geometry, `min_box_visibility`,
            `bounding_box_format`, `max_boxes`).
        table: the source's `BoxTable`.
        sample_ids: int `(n,)`, indices into `table`.
        crops: float32 `(n, 5)`, the samples' crop columns of `"random"`, with
            `augment`.
        affines: float64 `(n, 3, 3)`, each sample's map of output pixels of its
            recipe (`recipes.RandAugment.affines`), applied after the crop and flip;
            None without a recipe.

    Returns:
        `(boxes, labels)`: float32 `(n, max_boxes, 4)` in `bounding_box_format` of
        the output image and int32 `(n, max_boxes)`: each sample's boxes kept, in
        their order (the first `max_boxes`), then -1.
    """
    sample_ids = np.asarray(sample_ids, np.int64)
    n = len(sample_ids)
    out_boxes = np.full((n, options.max_boxes, 4), -1, np.float32)
    out_labels = np.full((n, options.max_boxes), -1, np.int32)
    for first in range(0, n, CHUNK):
        part = slice(first, first + CHUNK)
        boxes, labels = _place_chunk(options, table, sample_ids[part],
                                     None if crops is None else crops[part],
                                     None if affines is None else affines[part])
        out_boxes[part], out_labels[part] = boxes, labels
    return out_boxes, out_labels


def _place_chunk(options, table, sample_ids, crops, affines):
    rows, owners = table.take(sample_ids)
    boxes, labels = table.boxes[rows], table.labels[rows]
    window, placed, mirror = windows(options, table.sizes[sample_ids], crops)
    wx1, wy1, wx2, wy2 = (window[owners, i] for i in range(4))
    px1, py1, px2, py2 = (placed[owners, i] for i in range(4))
    clipped = np.stack([np.clip(boxes[:, 0], wx1, wx2), np.clip(boxes[:, 1], wy1, wy2),
                        np.clip(boxes[:, 2], wx1, wx2), np.clip(boxes[:, 3], wy1, wy2)], -1)
    area = _area(boxes)
    left = _area(clipped)
    share = np.divide(left, area, out=np.zeros_like(area), where=area > 0)
    scale_x = ((placed[:, 2] - placed[:, 0]) / (window[:, 2] - window[:, 0]))[owners]
    scale_y = ((placed[:, 3] - placed[:, 1]) / (window[:, 3] - window[:, 1]))[owners]
    out = np.stack([(clipped[:, 0] - wx1) * scale_x + px1, (clipped[:, 1] - wy1) * scale_y + py1,
                    (clipped[:, 2] - wx1) * scale_x + px1, (clipped[:, 3] - wy1) * scale_y + py1],
                   -1)
    height, width = options.image_size
    flipped = np.stack([width - out[:, 2], out[:, 1], width - out[:, 0], out[:, 3]], -1)
    out = np.where(mirror[owners, None], flipped, out)
    if affines is not None:
        out, moved_share = _moved(out, affines[owners], width, height)
        share, left = share * moved_share, _area(out)
    keep = (left > 0) & (share >= options.min_box_visibility)
    kept = convert_format(out[keep].reshape(-1, 4), "xyxy", options.bounding_box_format,
                          height=height, width=width)
    owners = owners[keep]
    counts = np.bincount(owners, minlength=len(sample_ids))
    rank = np.arange(len(owners)) - (np.cumsum(counts) - counts)[owners]
    fits = rank < options.max_boxes
    out_boxes = np.full((len(sample_ids), options.max_boxes, 4), -1, np.float32)
    out_labels = np.full((len(sample_ids), options.max_boxes), -1, np.int32)
    out_boxes[owners[fits], rank[fits]] = kept[fits]
    out_labels[owners[fits], rank[fits]] = labels[keep][fits]
    return out_boxes, out_labels


def _moved(boxes, affines, width, height):
    """`boxes` (float `(n, 4)` `xyxy`) each moved by its `affines` (`(n, 3, 3)`): the
    boxes that enclose their moved corners, clipped to `width` x `height`, and the
    share of each enclosing box's area left inside (0 for an empty one)."""
    x1, y1, x2, y2 = (boxes[:, i] for i in range(4))
    corners = np.stack([np.stack([x1, x2, x1, x2], -1), np.stack([y1, y1, y2, y2], -1),
                        np.ones((len(boxes), 4))], 1)  # (n, 3, 4)
    moved = np.asarray(affines, np.float64) @ corners
    enclosing = np.stack([moved[:, 0].min(-1), moved[:, 1].min(-1),
                          moved[:, 0].max(-1), moved[:, 1].max(-1)], -1)
    clipped = np.stack([np.clip(enclosing[:, 0], 0, width), np.clip(enclosing[:, 1], 0, height),
                        np.clip(enclosing[:, 2], 0, width), np.clip(enclosing[:, 3], 0, height)],
                       -1)
    area = _area(enclosing)
    return clipped, np.divide(_area(clipped), area, out=np.zeros_like(area), where=area > 0)


def _area(boxes):
    return np.maximum(boxes[:, 2] - boxes[:, 0], 0) * np.maximum(boxes[:, 3] - boxes[:, 1], 0)


def keep_a_box(crops, table, sample_ids):
    """The crop columns `crops` (float32 `(n, 5)`, `sampling.CROP`'s) with each
    window's position moved so that it holds the central `BOX_CROP_CORE` of one of
    its image's boxes (or, for a box larger than the window, its center).

    The box is chosen by `(2 * crop[4]) % 1`, uniform and apart from the flip
    (`crop[4] < 0.5`); the position within the allowed range keeps the drawn
    `crop[2]` and `crop[3]`. A row whose image has no boxes is unchanged.

    Args:
        crops: the samples' crop columns.
        table: the source's `BoxTable`.
        sample_ids: int `(n,)`, indices into `table`.

    Returns:
        float32 `(n, 5)`, a new array.
    """
    sample_ids = np.asarray(sample_ids, np.int64)
    crops = np.array(crops, np.float32)
    counts = table.counts[sample_ids]
    has = counts > 0
    if not has.any():
        return crops
    rows, counts, moved = sample_ids[has], counts[has], crops[has]
    sizes = table.sizes[rows]
    image_w, image_h = sizes[:, 0], sizes[:, 1]
    _, _, crop_w, crop_h = sampling.random_resized_crop_window(image_h, image_w, moved.T)
    pick = np.floor(np.mod(2 * moved[:, 4].astype(np.float64), 1) * counts).astype(np.int64)
    chosen = table.boxes[table.starts[rows] + np.minimum(pick, counts - 1)]
    for axis, extent, window in ((0, image_w, crop_w), (1, image_h, crop_h)):
        extent, window = extent.astype(np.float64), window.astype(np.float64)
        low, high = chosen[:, axis], chosen[:, axis + 2]
        center, half = (low + high) / 2, (high - low) * BOX_CROP_CORE / 2
        start, stop = _max(0.0, center + half - window), _min(extent - window, center - half)
        unfit = start > stop  # the core does not fit: hold the center
        start = np.where(unfit, _max(0.0, center - window), start)
        stop = np.where(unfit, _min(extent - window, center), stop)
        room = extent - window
        drawn = moved[:, 2 + axis].astype(np.float64)
        position = start + drawn * _max(stop - start, 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            placed = _min(_max(position / room, 0.0), 1.0).astype(np.float32)
        moved[:, 2 + axis] = np.where(room > 0, placed, moved[:, 2 + axis])
    crops[has] = moved
    return crops


def with_boxes(options, table, sample_ids, random, padding=None):
    """`random` (the `"random"` rows of `sample_ids`, `feed.draw_random`'s) with each
    sample's boxes and labels after them, placed in its output image and padded to
    `max_boxes` (`place_boxes`, all the samples at once; `feed.pack_boxes`): float32
    `(len(sample_ids), feed.random_columns(options))`, a new array.

    With `box_crop`, the crop columns are first moved to hold a box (`keep_a_box`);
    with a recipe, the boxes are moved by its geometric operations
    (`recipes.RandAugment.affines`). The rows where `padding` (bool, a shard's
    padding samples) is set get no boxes: all -1. `table` is the source's `BoxTable`.
    """
    crops = feed.part_columns(random, options, "crop") if options.augment else None
    if options.box_crop:  # windows moved to hold a box: the image's crop too
        random = random.copy()
        crops = feed.part_columns(random, options, "crop")
        crops[:] = keep_a_box(crops, table, sample_ids)
    affines = (options.recipe.affines(feed.part_columns(random, options, "recipe"),
                                      options.image_size)
               if options.recipe is not None else None)
    boxes, labels = place_boxes(options, table, sample_ids, crops, affines)
    if padding is not None:
        boxes[padding], labels[padding] = -1, -1
    return np.concatenate([random, feed.pack_boxes(boxes, labels)], axis=1)
