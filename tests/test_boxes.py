"""Detection boxes through the DALI graph (`boxes=`): each box moves with its image,
natively (`make_dali_pipeline(...).epoch()`), on the sample data whose shapes'
colours define the boxes; formats, refusals and bad inputs named. The formats of
`make_dali_dataset` run in a subprocess (`masks_job.py`, `test_masks.py`)."""

import json
import os

import numpy as np
import pytest
from PIL import Image
from scipy import ndimage

from dalipipe import make_dali_pipeline
from dalipipe.annotations.boxes import BOX_FORMATS, convert_format
from dalipipe.annotations.sample import SHAPE_COLOURS, SHAPES

pytest.importorskip("nvidia.dali")

SIZE = (48, 64)
OPTIONS = dict(image_size=SIZE, batch_size=4, seed=3, device="cpu", verbose=False,
               num_threads=1, max_boxes=6)


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    from dalipipe.sample_data import make_dense_sample_dataset

    folder = tmp_path_factory.mktemp("dense")
    make_dense_sample_dataset(str(folder), num_images=8, seed=0, crop_width=(64, 96))
    return str(folder)


def pipeline(dense, source="instances.json", **options):
    options = {**OPTIONS, "boxes": os.path.join(dense, source), **options}
    return make_dali_pipeline(os.path.join(dense, "images"), **options)


def shape_extent(image, box, label):
    """The pixel extent `(x1, y1, x2, y2)` of the patches of class `label`'s colour
    (8-connected) that reach inside `box`, or None. Edge pixels are blends of the
    colour and the photograph: a pixel is the shape's within 100 of its colour."""
    near = np.abs(image - np.array(SHAPE_COLOURS[label], np.float32)).max(-1) < 100
    patches, _ = ndimage.label(near, structure=np.ones((3, 3)))
    x1, y1, x2, y2 = box
    inside = set(np.unique(patches[int(np.ceil(y1)):int(y2), int(np.ceil(x1)):int(x2)]))
    rows, cols = np.nonzero(np.isin(patches, list(inside - {0})))
    if not len(rows):
        return None
    return cols.min(), rows.min(), cols.max() + 1, rows.max() + 1


def check_boxes(images, boxes, labels, size=SIZE):
    """Each kept box encloses its shape's pixels within a pixel; a box that was not
    clipped (or a square's) also reaches no further than its shape's pixels, within
    1.5 pixels (a clipped circle or triangle leaves its box's corners empty).
    Returns how many boxes were compared."""
    compared = 0
    height, width = size
    for image, image_boxes, image_labels in zip(images, boxes, labels):
        kept = image_labels >= 0
        assert kept[:kept.sum()].all()  # the boxes first, then -1
        assert (image_boxes[~kept] == -1).all()
        for box, label in zip(image_boxes[kept], image_labels[kept]):
            x1, y1, x2, y2 = (float(v) for v in box)
            assert 0 <= x1 < x2 <= width and 0 <= y1 < y2 <= height
            found = shape_extent(image, box, label)
            if found is None:  # a sliver of a shape at the edge
                assert (x2 - x1) * (y2 - y1) < 12
                continue
            ex1, ey1, ex2, ey2 = found
            assert x1 <= ex1 + 1 and y1 <= ey1 + 1 and x2 >= ex2 - 1 and y2 >= ey2 - 1, \
                (box, found)
            clipped = min(x1, y1) < 0.5 or x2 > width - 0.5 or y2 > height - 0.5
            if SHAPES[label] == "square" or not clipped:
                assert max(ex1 - x1, ey1 - y1, x2 - ex2, y2 - ey2) <= 1.5, (box, found)
            compared += 1
    return compared


@pytest.mark.parametrize("options", [
    dict(augment=False), dict(augment=True), dict(crop_to_aspect_ratio=True),
    dict(central_fraction=0.7), dict(pad_to_aspect_ratio=True, image_size=(64, 64)),
])
def test_each_box_moves_with_its_image(dense, options):
    p = pipeline(dense, **options)
    size = options.get("image_size", SIZE)
    assert p.output_dtypes == ("float32", "float32", "int32")
    assert p.output_shapes == ((None, *size, 3), (None, 6, 4), (None, 6))
    assert p.class_names == list(SHAPES)
    compared = 0
    for epoch in (0, 1):
        for images, boxes, labels in p.epoch(epoch):
            assert boxes.dtype == np.float32 and labels.dtype == np.int32
            compared += check_boxes(images, boxes, labels, size)
    assert compared > 10
