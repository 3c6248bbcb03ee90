"""Detection boxes through the DALI graph (`boxes=`): each box moves with its image,
natively (`make_dali_pipeline(...).epoch()`), on the sample data whose shapes'
colours define the boxes; formats, refusals and bad inputs named. The formats of
`make_dali_dataset` and a detector's `fit` run in a subprocess per Keras backend
(`masks_job.py`, `test_masks.py`)."""

import json
import os

import numpy as np
import pytest
from PIL import Image

from dalipipe import AutoAugment, RandAugment, TrivialAugmentWide, make_dali_pipeline
from dalipipe.annotations.boxes import BOX_FORMATS, convert_format
from dalipipe.annotations.sample import SHAPE_COLOURS, SHAPES
from helpers import recipe_kinds

pytest.importorskip("nvidia.dali")

SIZE = (48, 64)
OPTIONS = dict(image_size=SIZE, batch_size=4, seed=3, device="cpu", verbose=False,
               num_threads=1, max_boxes=6, bounding_box_format="xyxy")


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
    colour and the photograph: a pixel is the shape's within 100 of its colour.
    NumPy only: the `gpu` tests run it where SciPy is not installed."""
    near = np.abs(image - np.array(SHAPE_COLOURS[label], np.float32)).max(-1) < 100
    x1, y1, x2, y2 = box
    reached = np.zeros_like(near)
    reached[int(np.ceil(y1)):int(y2), int(np.ceil(x1)):int(x2)] = True
    reached &= near
    height, width = near.shape
    while True:  # grow into the 8 neighbours until the patches are whole
        padded = np.pad(reached, 1)
        grown = near & np.any([padded[dy:dy + height, dx:dx + width]
                               for dy in range(3) for dx in range(3)], axis=0)
        if (grown == reached).all():
            break
        reached = grown
    rows, cols = np.nonzero(reached)
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


RECIPES = [RandAugment(num_ops=1, magnitude=24), TrivialAugmentWide(), AutoAugment()]


def check_moved_boxes(images, boxes, labels, size=SIZE):
    """`check_boxes` for boxes that a recipe moved: each kept box encloses its
    shape's pixels within 1.5 pixels (the image is resampled twice, by the crop's
    resize and the recipe's warp, each blending the shape's edge into a pixel
    further), and is loose by no more than a third of its side plus 1.5 pixels on
    each side (the box enclosing a rotated or sheared box is looser for a circle or
    a triangle than for a square). A box that overlaps another of its class is not
    compared: shapes of one colour then reach into each other's boxes."""
    compared = 0
    height, width = size
    for image, image_boxes, image_labels in zip(images, boxes, labels):
        kept = image_labels >= 0
        for i, (box, label) in enumerate(zip(image_boxes[kept], image_labels[kept])):
            x1, y1, x2, y2 = (float(v) for v in box)
            assert 0 <= x1 < x2 <= width and 0 <= y1 < y2 <= height
            others = [b for j, (b, k) in enumerate(zip(image_boxes[kept], image_labels[kept]))
                      if j != i and k == label]
            if any(b[0] < x2 and x1 < b[2] and b[1] < y2 and y1 < b[3] for b in others):
                continue
            found = shape_extent(image, box, label)
            if found is None:
                assert (x2 - x1) * (y2 - y1) < 12
                continue
            ex1, ey1, ex2, ey2 = found
            assert x1 <= ex1 + 1.5 and y1 <= ey1 + 1.5 and x2 >= ex2 - 1.5 \
                and y2 >= ey2 - 1.5, (box, found)
            clipped = min(x1, y1) < 0.5 or x2 > width - 0.5 or y2 > height - 0.5
            if not clipped:
                assert max(ex1 - x1, x2 - ex2) <= (x2 - x1) / 3 + 1.5, (box, found)
                assert max(ey1 - y1, y2 - ey2) <= (y2 - y1) / 3 + 1.5, (box, found)
            compared += 1
    return compared


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
def test_a_recipe_moves_each_box_with_its_image(dense, recipe):
    """The recipe's shears, translations and rotations move the boxes with the same
    draws (the box enclosing the moved corners, clipped), its other operations leave
    them: a sample without a geometric operation has the boxes of `augment=True`
    (same crops), one with it others; where the image's colours are left as they
    were, each box encloses its shape."""
    p = pipeline(dense, augment=recipe, shuffle=False)
    plain = pipeline(dense, augment=True, shuffle=False)
    moved = compared = 0
    for epoch in range(4):
        images, boxes, labels = (np.concatenate(parts) for parts in zip(*p.epoch(epoch)))
        _, plain_boxes, plain_labels = (np.concatenate(parts)
                                        for parts in zip(*plain.epoch(epoch)))
        geometric, values = recipe_kinds(p, epoch)
        np.testing.assert_array_equal(boxes[~geometric], plain_boxes[~geometric])
        np.testing.assert_array_equal(labels[~geometric], plain_labels[~geometric])
        moved += int((boxes[geometric] != plain_boxes[geometric]).any((1, 2)).sum())
        shown = geometric & ~values  # moved, colours as they were
        compared += check_moved_boxes(images[shown], boxes[shown], labels[shown])
    assert moved >= 5 and compared >= 6, (moved, compared)


def source_boxes(dense):
    """Each image's COCO boxes, absolute `xyxy`, and its size, by file name."""
    with open(os.path.join(dense, "instances.json")) as f:
        data = json.load(f)
    found = {}
    for entry in data["images"]:
        boxes = [a["bbox"] for a in data["annotations"] if a["image_id"] == entry["id"]]
        xyxy = np.array([[x, y, x + w, y + h] for x, y, w, h in boxes], np.float64)
        found[entry["file_name"]] = (xyxy.reshape(-1, 4), (entry["width"], entry["height"]))
    return found


@pytest.mark.parametrize("share", [0.0, 0.25, 0.9])
def test_a_box_is_dropped_when_less_than_its_share_stays_in_the_crop(dense, share):
    """The crop window from `sampling` (the graph's, in whole pixels): the boxes kept
    are those with at least `min_box_visibility` of their area inside it."""
    from dalipipe import sampling

    p = pipeline(dense, augment=True, min_box_visibility=share)
    source = source_boxes(dense)
    sample_ids, random, _ = p.epoch_inputs(0)
    labels = np.concatenate([lab for _, _, lab in p.epoch(0)])
    dropped = 0
    for sample, row, kept in zip(sample_ids, random, labels):
        boxes, (width, height) = source[os.path.basename(p.file_paths[sample])]
        x, y, w, h = sampling.random_resized_crop_window(np.float32(height), np.float32(width),
                                                         row[:5])
        x1, y1, x2, y2 = (np.floor(v + 0.5) for v in (x, y, np.float32(x + w), np.float32(y + h)))
        inside = (np.clip(boxes[:, [2]], x1, x2) - np.clip(boxes[:, [0]], x1, x2)) * \
            (np.clip(boxes[:, [3]], y1, y2) - np.clip(boxes[:, [1]], y1, y2))
        area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
        visible = inside[:, 0] / area
        expected = int(((visible >= share) & (visible > 0)).sum())
        assert (kept >= 0).sum() == expected
        dropped += len(boxes) - expected
    assert dropped > 0 or share == 0  # this data's crops leave a part of every box


def test_formats_agree_with_keras_convert_format(dense):
    keras = pytest.importorskip("keras")
    from keras.utils import bounding_boxes

    height, width = SIZE
    (_, reference, labels), = list(pipeline(dense, batch_size=8, shuffle=False).epoch(0))
    kept = labels >= 0
    for name in BOX_FORMATS:
        (_, boxes, same), = list(pipeline(dense, batch_size=8, shuffle=False,
                                          bounding_box_format=name).epoch(0))
        np.testing.assert_array_equal(same, labels)
        assert (boxes[~kept] == -1).all()
        expected = keras.ops.convert_to_numpy(bounding_boxes.convert_format(
            reference[kept], source="xyxy", target=name, height=height, width=width))
        np.testing.assert_allclose(boxes[kept], expected, rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(convert_format(boxes[kept], name, "xyxy", height, width),
                                   reference[kept], rtol=1e-5, atol=1e-4)


def test_a_table_of_boxes_gives_the_coco_boxes(dense):
    coco = list(pipeline(dense, shuffle=False).epoch(0))
    table = list(pipeline(dense, source="boxes.csv", shuffle=False,
                          class_names=list(SHAPES)).epoch(0))
    for (_, a, b), (_, c, d) in zip(coco, table):
        np.testing.assert_allclose(a, c, atol=1e-4)
        np.testing.assert_array_equal(b, d)


def test_coco_labels_are_contiguous_crowds_left_out_images_without_boxes_kept(dense, tmp_path):
    with open(os.path.join(dense, "instances.json")) as f:
        data = json.load(f)
    empty = data["images"][0]
    data["annotations"] = [a for a in data["annotations"] if a["image_id"] != empty["id"]]
    crowd = dict(data["annotations"][0], id=999, iscrowd=1)
    data["annotations"].append(crowd)
    path = tmp_path / "instances.json"
    path.write_text(json.dumps(data))
    p = pipeline(dense, source=str(path), shuffle=False, batch_size=None)
    assert p.class_names == ["circle", "square", "triangle"]  # ids 2, 7, 11
    found = {os.path.basename(f): (b, lab) for f, (_, b, lab) in zip(p.file_paths, p.epoch(0))}
    boxes, labels = found[empty["file_name"]]
    assert (boxes == -1).all() and (labels == -1).all()
    total = sum(int((lab >= 0).sum()) for _, lab in found.values())
    assert total == len(data["annotations"]) - 1  # the crowd is left out
    assert set(np.concatenate([lab for _, lab in found.values()]).tolist()) == {-1, 0, 1, 2}


def test_rows_for_images_not_in_the_source_are_named_in_a_warning(dense, tmp_path):
    with open(os.path.join(dense, "boxes.csv")) as f:
        rows = f.read().splitlines()
    extra = ["images/gone_1.png,1,1,5,5,circle", "images/gone_2.png,2,2,6,6,square"]
    (tmp_path / "boxes.csv").write_text("\n".join(rows + extra) + "\n")
    with pytest.warns(UserWarning, match=r"Rows of `boxes`=.*boxes\.csv' for images that are "
                                         r"not in the source are left out: 2 image\(s\): "
                                         r".*gone_1\.png, .*gone_2\.png") as w:
        p = make_dali_pipeline(os.path.join(dense, "images"), boxes=str(tmp_path / "boxes.csv"),
                               root=dense, **{**OPTIONS, "class_names": list(SHAPES)})
    assert len(p.file_paths) == 8 and len(w) == 1


def test_boxes_without_bounding_box_format_warn_naming_both_conventions(dense):
    """As Keras's layers, which require a format: no silent convention."""
    with pytest.warns(UserWarning, match=r"`boxes` given without `bounding_box_format`: the "
                                         r"boxes are \"xyxy\".*RetinaNet reads \"yxyx\".*"
                                         r"Pass a `bounding_box_format` argument") as w:
        p = pipeline(dense, bounding_box_format=None)
    assert len(w) == 1 and p.options.bounding_box_format == "xyxy"
    assert make_dali_pipeline(os.path.join(dense, "images"), labels=None, verbose=False,
                              image_size=SIZE).options.bounding_box_format == "xyxy"


def test_more_boxes_than_max_boxes_keep_the_first_with_one_warning(dense):
    with pytest.warns(UserWarning, match=r"more than max_boxes=1 boxes.*The first: '.*\.png'"):
        p = pipeline(dense, max_boxes=1, shuffle=False)
    for _, boxes, labels in p.epoch(0):
        assert boxes.shape[1:] == (1, 4) and labels.shape[1:] == (1,)
    assert p.index.boxes[0].labels.tolist() == [p.class_names.index("square")]


@pytest.mark.parametrize("options, match", [
    (dict(labels=[0] * 8), r"With `boxes`.*`labels` must stay at its default.*labels=\[0"),
    (dict(label_mode="categorical"), r"`label_mode` must stay.*label_mode='categorical'"),
    (dict(class_weight={0: 1.0}), r"`class_weight` must stay.*class_weight=\{0: 1.0\}"),
    (dict(mix="mixup", label_mode=None), r"`mix` must stay.*mix=MixUp"),
    (dict(masks="masks"), r"`masks` and `boxes` together are not supported yet"),
    (dict(boxes=3), r"`boxes` must be a COCO instances JSON file.*boxes of type int"),
    (dict(bounding_box_format="ltrb"), r"`bounding_box_format` must be one of.*'ltrb'"),
    (dict(max_boxes=0), r"`max_boxes` must be a positive integer.*max_boxes=0"),
    (dict(min_box_visibility=1.5), r"`min_box_visibility` must be a number in \[0, 1\].*=1.5"),
    (dict(output="list"), r"`output` must be one of \(None, 'dict'\).*output='list'"),
    (dict(class_names=["a", "b", "c"]), r"With a COCO JSON, `class_names` are its categories"),
])
def test_refusals_name_the_arguments(dense, options, match):
    with pytest.raises(ValueError, match=match):
        pipeline(dense, **options)


def test_dict_output_needs_masks_or_boxes(dense):
    with pytest.raises(ValueError, match=r"`output='dict'`.*needs `masks` or `boxes`"):
        make_dali_pipeline(os.path.join(dense, "images"), labels=None, output="dict",
                           **{k: v for k, v in OPTIONS.items() if k != "max_boxes"})


def test_unsupported_sources_are_refused(dense, tmp_path):
    from dalipipe.tfrecord.write import write_tfrecords

    first = os.path.join(dense, "images", sorted(os.listdir(os.path.join(dense, "images")))[0])
    write_tfrecords([first], None, None, str(tmp_path))
    boxes = os.path.join(dense, "instances.json")
    with pytest.raises(ValueError, match=r"`boxes` with TFRecord files is not supported yet"):
        make_dali_pipeline(str(tmp_path / "train-*"), boxes=boxes, **OPTIONS)
    with pytest.raises(ValueError, match=r"With `boxes`, the source must be a flat folder"):
        make_dali_pipeline(os.path.join(dense, "labels.csv"), boxes=boxes, **OPTIONS)
    p = pipeline(dense)
    with pytest.raises(ValueError, match=r"With `boxes`, `random` holds.*random=None"):
        next(iter(p.run(np.arange(4))))


def test_bad_boxes_and_turned_images_are_named(dense, tmp_path):
    with open(os.path.join(dense, "instances.json")) as f:
        data = json.load(f)
    data["annotations"][0]["bbox"] = [0, 0, 500, 10]
    data["annotations"][1]["category_id"] = 99
    path = tmp_path / "instances.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError) as raised:
        pipeline(dense, source=str(path))
    message = str(raised.value)
    assert "annotation 1's box [0, 0, 500, 10] (xyxy) lies outside the image" in message
    assert "annotation 2 has the category 99" in message
    folder = tmp_path / "images"
    folder.mkdir()
    name = data["images"][0]["file_name"]
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.open(os.path.join(dense, "images", name)).convert("RGB").save(
        folder / name, format="PNG", exif=exif)
    with open(os.path.join(dense, "instances.json")) as f:
        data = json.load(f)
    first = data["images"][0]["id"]
    data = {**data, "images": data["images"][:1],
            "annotations": [a for a in data["annotations"] if a["image_id"] == first]}
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"has the EXIF orientation 6.*not to its boxes"):
        make_dali_pipeline(str(folder), boxes=str(path), **OPTIONS)


def test_box_crop_keeps_a_box_of_every_image_that_has_one(dense):
    """Small crops (8% of the area) often miss every box; `box_crop` moves each
    window to hold one, and the image is cropped with the moved window (the boxes
    still enclose their shapes' pixels)."""
    plain = pipeline(dense, augment=True, seed=5)
    moved = pipeline(dense, augment=True, seed=5, box_crop=True)
    has_boxes = {p: len(e.boxes) > 0 for p, e in zip(moved.file_paths, moved.index.boxes)}
    missed = 0
    for epoch in range(3):
        ids, _, _ = moved.epoch_inputs(epoch)
        kept = np.concatenate([lab for _, _, lab in plain.epoch(epoch)])
        missed += sum(int(has_boxes[moved.file_paths[i]] and not (k >= 0).any())
                      for i, k in zip(ids, kept))
        for images, boxes, labels in moved.epoch(epoch):
            check_boxes(images, boxes, labels)
        kept = np.concatenate([lab for _, _, lab in moved.epoch(epoch)])
        for sample, labels in zip(ids, kept):
            assert (labels >= 0).any() or not has_boxes[moved.file_paths[sample]]
    assert missed > 0  # without it, some crops hold no box


def test_box_crop_with_a_recipe_moves_the_crops_then_the_boxes(dense):
    """`box_crop` with a recipe: the crops are `box_crop`'s, and the recipe's
    geometric operations then move the boxes with the image."""
    p = pipeline(dense, augment=RECIPES[0], seed=5, box_crop=True, shuffle=False)
    plain = pipeline(dense, augment=True, seed=5, box_crop=True, shuffle=False)
    compared = 0
    for epoch in range(2):
        images, boxes, labels = (np.concatenate(parts) for parts in zip(*p.epoch(epoch)))
        _, plain_boxes, _ = (np.concatenate(parts) for parts in zip(*plain.epoch(epoch)))
        geometric, values = recipe_kinds(p, epoch)
        np.testing.assert_array_equal(boxes[~geometric], plain_boxes[~geometric])
        shown = geometric & ~values
        compared += check_moved_boxes(images[shown], boxes[shown], labels[shown])
    assert compared >= 2, compared


def test_box_crop_needs_boxes_and_augment(dense):
    with pytest.raises(ValueError, match=r"`box_crop=True`.*needs `boxes` and `augment=True`"
                                         r".*augment=False"):
        pipeline(dense, box_crop=True)


@pytest.mark.parametrize("nested", [True, False], ids=["cpu", "gpu_structure"])
@pytest.mark.parametrize("options", [dict(), dict(output="dict"),
                                     dict(boxes=None, masks="masks", output="dict")],
                         ids=["boxes", "dict_boxes", "dict_masks"])
def test_tf_gives_keras_structures_without_a_map(dense, options, nested):
    """Format "tf" gives the native epoch in Keras's structures with no op after
    DALI's dataset: DALI gives the outputs flat, in the order the structure flattens
    to (a dict's keys sorted: boxes before images). `nested=False` is the GPU's
    dataset, run on the CPU."""
    tf = pytest.importorskip("tensorflow")
    from dalipipe.annotations.elements import element
    from dalipipe.tf_dataset import to_dataset

    if options.get("masks"):
        options = dict(options, masks=os.path.join(dense, options["masks"]))
    p = pipeline(dense, **options)
    want = [element(batch, p.options) for batch in p.epoch(0)]
    with tf.device("/cpu:0"):
        got = list(to_dataset(p, nested=nested))
    assert len(got) == len(want) == p.steps
    for g, w in zip(got, want):
        tf.nest.assert_same_structure(g, w)
        for a, b in zip(tf.nest.flatten(g), tf.nest.flatten(w)):
            np.testing.assert_array_equal(a.numpy(), b)


@pytest.mark.parametrize("box_crop", [False, True])
def test_validation_split_splits_images_with_their_boxes(dense, box_crop):
    train, val = pipeline(dense, augment=True, validation_split=0.25, subset="both",
                          box_crop=box_crop)
    assert len(train.file_paths) == 6 and len(val.file_paths) == 2
    assert not val.options.augment and not val.options.box_crop
    assert train.options.box_crop == box_crop
    for p in (train, val):
        assert len(p.index.boxes) == len(p.file_paths)
        for images, boxes, labels in p.epoch(0):
            check_boxes(images, boxes, labels)


@pytest.mark.gpu
@pytest.mark.parametrize("options", [dict(augment=True), dict(pad_to_aspect_ratio=True),
                                     dict(augment=RECIPES[0], box_crop=True, shuffle=False)],
                         ids=["augment", "pad", "recipe_box_crop"])
def test_gpu_boxes_equal_the_cpu_graph_boxes(dense, options):
    """The boxes are placed in NumPy and passed through: the GPU graph gives the CPU
    graph's boxes exactly, and they enclose the GPU images' shapes (with a recipe,
    those of the samples whose colours it left)."""
    size = (64, 64) if options.get("pad_to_aspect_ratio") else SIZE
    cpu = list(pipeline(dense, image_size=size, **options).epoch(0))
    on_gpu = pipeline(dense, image_size=size, device="gpu", **options)
    gpu = list(on_gpu.epoch(0))
    for (images, boxes, labels), (_, want_boxes, want_labels) in zip(gpu, cpu):
        np.testing.assert_array_equal(boxes, want_boxes)
        np.testing.assert_array_equal(labels, want_labels)
    images, boxes, labels = (np.concatenate(parts) for parts in zip(*gpu))
    if "box_crop" in options:
        _, values = recipe_kinds(on_gpu, 0)
        assert check_moved_boxes(images[~values], boxes[~values], labels[~values], size)
    else:
        check_boxes(images, boxes, labels, size)
