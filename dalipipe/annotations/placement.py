"""Detection boxes moved as the DALI graph moves their images, in NumPy.

The graph's geometry is known before it runs: the random-resized crop and the flip
come from the `"random"` input's crop columns (`sampling.CROP`, drawn in NumPy), and
each image's size from the check. `place_boxes` computes each sample's window and
flip with the arithmetic of `dalipipe.graph` (`sampling.random_resized_crop_window`,
the decoder's whole-pixel slice, `_central_window`, `_letterbox`), then moves the
boxes: transformed into the output image, clipped to it, dropped when less than
`min_box_visibility` of a box's area is left inside the window (or nothing at all),
converted to `bounding_box_format` (relative formats relative to the output image)
and padded to `max_boxes` with -1 (`boxes.pad_boxes`). `dalipipe.feed.pack_boxes`
carries the result into the graph, which passes it through.

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
"""

import math

import numpy as np

from dalipipe import sampling
from dalipipe.annotations.boxes import convert_format


def window_of(options, size, crop=None):
    """The part of an image that the graph maps onto its output, and where.

    Args:
        options: resolved `Options`.
        size: the image's `(width, height)`.
        crop: the sample's crop columns of `"random"` (float32 `(5,)`), with
            `augment`.

    Returns:
        `(window, placed, mirror)`: `window` `(x1, y1, x2, y2)`, the source pixels
        shown (unclipped for `pad_to_aspect_ratio`: the whole image); `placed`
        `(x1, y1, x2, y2)`, where the window lands in the output image (pixels);
        `mirror`, whether the output is flipped horizontally.
    """
    height, width = options.image_size
    image_w, image_h = (np.float32(v) for v in size)
    if options.augment:
        x, y, w, h = sampling.random_resized_crop_window(image_h, image_w, crop)
        # The decoder slices whole pixels: DALI rounds the anchor and the end.
        x1, y1 = _round(x), _round(y)
        x2, y2 = _round(np.float32(x + w)), _round(np.float32(y + h))
        return (x1, y1, x2, y2), (0.0, 0.0, float(width), float(height)), bool(crop[4] < 0.5)
    if options.pad_to_aspect_ratio:
        ratio = max(image_w / np.float32(width), image_h / np.float32(height))
        fit_h, fit_w = image_h / ratio, image_w / ratio
        top, left = math.floor((height - fit_h) / 2), math.floor((width - fit_w) / 2)
        return ((0.0, 0.0, float(image_w), float(image_h)),
                (left, top, left + math.floor(fit_w), top + math.floor(fit_h)), False)
    window_h, window_w = image_h, image_w
    if options.crop_to_aspect_ratio:
        aspect = np.float32(width / height)
        window_w = min(image_w, image_h * aspect)
        window_h = min(image_h, image_w / aspect)
    fraction = np.float32(options.central_fraction)
    window_h, window_w = window_h * fraction, window_w * fraction
    top, left = (image_h - window_h) / 2, (image_w - window_w) / 2
    return ((float(left), float(top), float(left + window_w), float(top + window_h)),
            (0.0, 0.0, float(width), float(height)), False)


def _round(value):
    return float(math.floor(float(value) + 0.5))


def place_boxes(options, boxes, labels, size, crop=None, affine=None):
    """One image's boxes as the graph shows the image.

    Args:
        options: resolved `Options` (`image_size`, the geometry, `min_box_visibility`,
            `bounding_box_format`).
        boxes: float `(n, 4)`, absolute `xyxy` pixels of the source image.
        labels: int `(n,)`.
        size: the source image's `(width, height)`.
        crop: the sample's crop columns of `"random"`, with `augment`.
        affine: float `(3, 3)`, the map of output pixels of the sample's recipe
            (`recipes.RandAugment.affines`), applied after the crop and flip; None
            without a recipe.

    Returns:
        `(boxes, labels)`: float32 `(k, 4)` in `bounding_box_format` of the output
        image and int32 `(k,)`, the `k <= n` boxes kept, in their order.
    """
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    labels = np.asarray(labels, np.int32).reshape(-1)
    (wx1, wy1, wx2, wy2), (px1, py1, px2, py2), mirror = window_of(options, size, crop)
    clipped = np.stack([np.clip(boxes[:, 0], wx1, wx2), np.clip(boxes[:, 1], wy1, wy2),
                        np.clip(boxes[:, 2], wx1, wx2), np.clip(boxes[:, 3], wy1, wy2)], -1)
    area = _area(boxes)
    left = _area(clipped)
    share = np.divide(left, area, out=np.zeros_like(area), where=area > 0)
    scale_x = (px2 - px1) / (wx2 - wx1)
    scale_y = (py2 - py1) / (wy2 - wy1)
    out = np.stack([(clipped[:, 0] - wx1) * scale_x + px1, (clipped[:, 1] - wy1) * scale_y + py1,
                    (clipped[:, 2] - wx1) * scale_x + px1, (clipped[:, 3] - wy1) * scale_y + py1],
                   -1)
    height, width = options.image_size
    if mirror:
        out = np.stack([width - out[:, 2], out[:, 1], width - out[:, 0], out[:, 3]], -1)
    if affine is not None:
        out, moved_share = _moved(out, affine, width, height)
        share, left = share * moved_share, _area(out)
    keep = (left > 0) & (share >= options.min_box_visibility)
    out = convert_format(out[keep].reshape(-1, 4), "xyxy", options.bounding_box_format,
                         height=height, width=width)
    return out.astype(np.float32), labels[keep]


def _moved(boxes, affine, width, height):
    """`boxes` (float `(n, 4)` `xyxy`) moved by `affine` (`(3, 3)`): the boxes that
    enclose their moved corners, clipped to `width` x `height`, and the share of
    each enclosing box's area left inside (0 for an empty one)."""
    x1, y1, x2, y2 = (boxes[:, i] for i in range(4))
    corners = np.stack([np.stack([x1, x2, x1, x2], -1), np.stack([y1, y1, y2, y2], -1),
                        np.ones((len(boxes), 4))], 1)  # (n, 3, 4)
    moved = np.asarray(affine, np.float64) @ corners
    enclosing = np.stack([moved[:, 0].min(-1), moved[:, 1].min(-1),
                          moved[:, 0].max(-1), moved[:, 1].max(-1)], -1)
    clipped = np.stack([np.clip(enclosing[:, 0], 0, width), np.clip(enclosing[:, 1], 0, height),
                        np.clip(enclosing[:, 2], 0, width), np.clip(enclosing[:, 3], 0, height)],
                       -1)
    area = _area(enclosing)
    return clipped, np.divide(_area(clipped), area, out=np.zeros_like(area), where=area > 0)


def _area(boxes):
    return np.maximum(boxes[:, 2] - boxes[:, 0], 0) * np.maximum(boxes[:, 3] - boxes[:, 1], 0)


# The share of a chosen box's width and height, about its center, that a box-aware
# crop holds (when the window is large enough): at least 36% of its area.
BOX_CROP_CORE = 0.6


def keep_a_box(crop, boxes, size):
    """The crop columns `crop` (float32 `(5,)`, `sampling.CROP`'s) with the window's
    position moved so that it holds the central `BOX_CROP_CORE` of one of `boxes`
    (or, for a box larger than the window, its center).

    The box is chosen by `(2 * crop[4]) % 1`, uniform and apart from the flip
    (`crop[4] < 0.5`); the position within the allowed range keeps the drawn
    `crop[2]` and `crop[3]`. Unchanged without boxes.

    Args:
        crop: one row's crop columns.
        boxes: float `(n, 4)`, absolute `xyxy` pixels of the source image.
        size: the source image's `(width, height)`.

    Returns:
        float32 `(5,)`.
    """
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    if not len(boxes):
        return crop
    crop = np.array(crop, np.float32)
    image_w, image_h = (np.float32(v) for v in size)
    _, _, crop_w, crop_h = sampling.random_resized_crop_window(image_h, image_w, crop)
    chosen = boxes[min(int((2 * float(crop[4])) % 1 * len(boxes)), len(boxes) - 1)]
    for axis, extent, window in ((0, float(image_w), float(crop_w)),
                                 (1, float(image_h), float(crop_h))):
        low, high = chosen[axis], chosen[axis + 2]
        center, half = (low + high) / 2, (high - low) * BOX_CROP_CORE / 2
        start, stop = max(0.0, center + half - window), min(extent - window, center - half)
        if start > stop:  # the core does not fit: hold the center
            start, stop = max(0.0, center - window), min(extent - window, center)
        room = extent - window
        if room > 0:
            position = start + float(crop[2 + axis]) * max(stop - start, 0.0)
            crop[2 + axis] = np.float32(min(max(position / room, 0.0), 1.0))
    return crop
