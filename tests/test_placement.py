"""annotations.placement: boxes placed for many samples at once give, bit for bit, what
the per-sample placement that it replaced gives (kept here as the reference), on
random boxes and sizes: no boxes, boxes outside the window, empty boxes, every
geometry, `min_box_visibility`, `box_crop`, a recipe's maps, every box format."""

import math
import types

import numpy as np
import pytest

from dalipipe import sampling
from dalipipe.annotations import placement
from dalipipe.annotations.boxes import ImageBoxes, convert_format, pad_boxes

# --- the per-sample reference ------------------------------------------------------


def ref_window_of(options, size, crop=None):
    height, width = options.image_size
    image_w, image_h = (np.float32(v) for v in size)
    if options.augment:
        x, y, w, h = sampling.random_resized_crop_window(image_h, image_w, crop)
        x1, y1 = ref_round(x), ref_round(y)
        x2, y2 = ref_round(np.float32(x + w)), ref_round(np.float32(y + h))
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


def ref_round(value):
    return float(math.floor(float(value) + 0.5))


def ref_area(b):
    return np.maximum(b[:, 2] - b[:, 0], 0) * np.maximum(b[:, 3] - b[:, 1], 0)


def ref_place(options, boxes, labels, size, crop=None, affine=None):
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    labels = np.asarray(labels, np.int32).reshape(-1)
    (wx1, wy1, wx2, wy2), (px1, py1, px2, py2), mirror = ref_window_of(options, size, crop)
    clipped = np.stack([np.clip(boxes[:, 0], wx1, wx2), np.clip(boxes[:, 1], wy1, wy2),
                        np.clip(boxes[:, 2], wx1, wx2), np.clip(boxes[:, 3], wy1, wy2)], -1)
    area, left = ref_area(boxes), ref_area(clipped)
    share = np.divide(left, area, out=np.zeros_like(area), where=area > 0)
    sx, sy = (px2 - px1) / (wx2 - wx1), (py2 - py1) / (wy2 - wy1)
    out = np.stack([(clipped[:, 0] - wx1) * sx + px1, (clipped[:, 1] - wy1) * sy + py1,
                    (clipped[:, 2] - wx1) * sx + px1, (clipped[:, 3] - wy1) * sy + py1], -1)
    height, width = options.image_size
    if mirror:
        out = np.stack([width - out[:, 2], out[:, 1], width - out[:, 0], out[:, 3]], -1)
    if affine is not None:
        x1, y1, x2, y2 = (out[:, i] for i in range(4))
        corners = np.stack([np.stack([x1, x2, x1, x2], -1), np.stack([y1, y1, y2, y2], -1),
                            np.ones((len(out), 4))], 1)
        moved = np.asarray(affine, np.float64) @ corners
        enclosing = np.stack([moved[:, 0].min(-1), moved[:, 1].min(-1),
                              moved[:, 0].max(-1), moved[:, 1].max(-1)], -1)
        out = np.stack([np.clip(enclosing[:, 0], 0, width), np.clip(enclosing[:, 1], 0, height),
                        np.clip(enclosing[:, 2], 0, width), np.clip(enclosing[:, 3], 0, height)],
                       -1)
        e_area = ref_area(enclosing)
        share = share * np.divide(ref_area(out), e_area, out=np.zeros_like(e_area),
                                  where=e_area > 0)
        left = ref_area(out)
    keep = (left > 0) & (share >= options.min_box_visibility)
    out = convert_format(out[keep].reshape(-1, 4), "xyxy", options.bounding_box_format,
                         height=height, width=width)
    return out.astype(np.float32), labels[keep]


def ref_keep_a_box(crop, boxes, size):
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
        center, half = (low + high) / 2, (high - low) * placement.BOX_CROP_CORE / 2
        start, stop = max(0.0, center + half - window), min(extent - window, center - half)
        if start > stop:
            start, stop = max(0.0, center - window), min(extent - window, center)
        room = extent - window
        if room > 0:
            position = start + float(crop[2 + axis]) * max(stop - start, 0.0)
            crop[2 + axis] = np.float32(min(max(position / room, 0.0), 1.0))
    return crop


# --- random data ---------------------------------------------------------------------


def random_entries(rng, n):
    """`n` images of random sizes with 0 to 7 boxes each: inside, straddling the image's
    edges, outside it, empty; a few images without boxes."""
    entries = []
    for i in range(n):
        w, h = (int(v) for v in rng.integers(8, 700, 2))
        count = int(rng.integers(0, 8)) if i % 7 else 0
        x1 = rng.uniform(-0.2 * w, 1.1 * w, count)
        y1 = rng.uniform(-0.2 * h, 1.1 * h, count)
        x2 = x1 + rng.uniform(0, 0.7 * w, count) * (rng.random(count) > 0.1)
        y2 = y1 + rng.uniform(0, 0.7 * h, count)
        boxes = np.stack([x1, y1, x2, y2], -1).astype(np.float32).reshape(-1, 4)
        entries.append(ImageBoxes(f"/img/{i}.jpg", boxes, rng.integers(0, 5, count).astype(
            np.int32), [], [], (w, h)))
    return entries


def random_crops(rng, n):
    crops = rng.random((n, 5), dtype=np.float32)
    crops[::11, 2:4] = 0.0
    crops[1::11, 2:4] = np.float32(1.0)
    crops[2::11, 0] = 1.0  # the whole area
    crops[3::13, 4] = 0.5
    return crops


def random_affines(rng, n):
    angles, shears = rng.uniform(-0.6, 0.6, n), rng.uniform(-0.3, 0.3, n)
    affines = np.tile(np.eye(3), (n, 1, 1))
    affines[:, 0, 0], affines[:, 0, 1] = np.cos(angles), -np.sin(angles) + shears
    affines[:, 1, 0], affines[:, 1, 1] = np.sin(angles), np.cos(angles)
    affines[:, :2, 2] = rng.uniform(-30, 30, (n, 2))
    affines[::5] = np.eye(3)
    return affines


def options_of(**changes):
    values = dict(image_size=(96, 128), augment=False, pad_to_aspect_ratio=False,
                  crop_to_aspect_ratio=False, central_fraction=1.0, min_box_visibility=0.25,
                  bounding_box_format="xyxy", max_boxes=6)
    return types.SimpleNamespace(**{**values, **changes})


GEOMETRIES = [
    dict(), dict(augment=True), dict(pad_to_aspect_ratio=True),
    dict(crop_to_aspect_ratio=True), dict(central_fraction=0.6, crop_to_aspect_ratio=True),
    dict(augment=True, min_box_visibility=0.0), dict(augment=True, min_box_visibility=0.9),
    dict(augment=True, bounding_box_format="rel_yxyx", image_size=(61, 33)),
    dict(bounding_box_format="center_xywh", pad_to_aspect_ratio=True, max_boxes=3),
]


def bits(a):
    return np.ascontiguousarray(a).view(np.uint32)


@pytest.mark.filterwarnings("ignore:.*more than max_boxes")
@pytest.mark.parametrize("changes", GEOMETRIES, ids=lambda c: ",".join(map(str, c.items())))
@pytest.mark.parametrize("recipe", [False, True], ids=["plain", "affines"])
@pytest.mark.parametrize("box_crop", [False, True], ids=["crop", "box_crop"])
def test_placement_of_many_samples_equals_the_per_sample_reference(changes, recipe, box_crop):
    options = options_of(**changes)
    if box_crop and not options.augment:
        pytest.skip("box_crop needs augment")
    rng = np.random.default_rng(len(str(changes)) * 7 + recipe + 2 * box_crop)
    entries = random_entries(rng, 300)
    table = placement.box_table(entries)
    sample_ids = rng.integers(0, len(entries), 500)
    crops = random_crops(rng, len(sample_ids)) if options.augment else None
    affines = random_affines(rng, len(sample_ids)) if recipe else None
    if box_crop:
        moved = placement.keep_a_box(crops, table, sample_ids)
        expected = np.stack([ref_keep_a_box(c, entries[i].boxes, entries[i].size)
                             for c, i in zip(crops, sample_ids)])
        assert np.array_equal(bits(moved), bits(expected))
        assert not np.array_equal(moved, crops)
        crops = moved
    boxes, labels = placement.place_boxes(options, table, sample_ids, crops, affines)
    placed = [ref_place(options, entries[i].boxes, entries[i].labels, entries[i].size,
                        None if crops is None else crops[row],
                        None if affines is None else affines[row])
              for row, i in enumerate(sample_ids)]
    ref_boxes, ref_labels = pad_boxes([b for b, _ in placed], [lab for _, lab in placed],
                                      options.max_boxes)
    assert np.array_equal(bits(boxes), bits(ref_boxes))
    assert np.array_equal(labels, ref_labels)
    kept = (labels >= 0).sum()
    assert 0 < kept < sum(len(entries[i].boxes) for i in sample_ids)


def test_placement_in_chunks_equals_one_chunk(monkeypatch):
    rng = np.random.default_rng(5)
    entries = random_entries(rng, 50)
    table = placement.box_table(entries)
    sample_ids = rng.integers(0, 50, 203)
    options = options_of(augment=True)
    crops = random_crops(rng, 203)
    whole = placement.place_boxes(options, table, sample_ids, crops)
    monkeypatch.setattr(placement, "CHUNK", 16)
    chunked = placement.place_boxes(options, table, sample_ids, crops)
    assert all(np.array_equal(a, b) for a, b in zip(whole, chunked))


def test_no_boxes_at_all():
    entries = [ImageBoxes("/a.jpg", np.zeros((0, 4), np.float32), np.zeros(0, np.int32),
                          [], [], (40, 30))] * 3
    table = placement.box_table(entries)
    options = options_of(augment=True)
    crops = random_crops(np.random.default_rng(0), 4)
    boxes, labels = placement.place_boxes(options, table, [0, 1, 2, 0], crops)
    assert boxes.shape == (4, 6, 4) and (boxes == -1).all() and (labels == -1).all()
    assert np.array_equal(placement.keep_a_box(crops, table, [0, 1, 2, 0]), crops)
    empty = placement.box_table([])
    assert placement.place_boxes(options, empty, [], crops[:0])[0].shape == (0, 6, 4)
