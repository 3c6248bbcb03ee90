"""Masks and boxes (`dalipipe.annotations`): their sources, formats, checks and the
sample data whose masks and boxes are known from its pixels."""

import csv
import io
import json
import os

import numpy as np
import pytest
from PIL import Image

from dalipipe.annotations import boxes as box_source
from dalipipe.annotations import checks, masks
from dalipipe.annotations.coco import coco_boxes
from dalipipe.annotations.sample import (CATEGORY_IDS, MASK_PALETTE, SHAPE_COLOURS, SHAPES,
                                         draw_shapes)
from dalipipe.checks.verdicts import bad_files
from dalipipe.sample_data import make_dense_sample_dataset

# A palette whose brightness order (2 < 1 < 0) is not its index order.
PALETTE = ((200, 200, 200), (255, 64, 64), (40, 40, 150))


def save(array, path, palette=None):
    image = Image.fromarray(np.asarray(array))
    if palette is not None:
        image.putpalette([v for colour in palette for v in colour])
    image.save(path)
    return str(path)


def png_bytes(array, palette=None):
    out = io.BytesIO()
    image = Image.fromarray(np.asarray(array))
    if palette is not None:
        image.putpalette([v for colour in palette for v in colour])
    image.save(out, "PNG")
    return out.getvalue()


@pytest.fixture
def pets(tmp_path):
    """The Oxford-IIIT Pets layout: images/*.jpg, trimaps/*.png (ids 1-3), plus a
    hidden AppleDouble file."""
    (tmp_path / "images").mkdir()
    (tmp_path / "trimaps").mkdir()
    ids = np.arange(12, dtype=np.uint8).reshape(3, 4) % 3 + 1
    for name in ("Abyssinian_1", "Abyssinian_2", "beagle_1"):
        save(np.zeros((3, 4, 3), np.uint8), tmp_path / "images" / f"{name}.jpg")
        save(ids, tmp_path / "trimaps" / f"{name}.png")
    (tmp_path / "trimaps" / "._Abyssinian_1.png").write_bytes(b"\0\5\26\7")
    return tmp_path


# Masks: sources


def test_masks_match_images_by_stem(pets):
    pairs = masks.match_masks(pets / "images", pets / "trimaps")
    assert [os.path.basename(p) for p in pairs.image_paths] == [
        "Abyssinian_1.jpg", "Abyssinian_2.jpg", "beagle_1.jpg"]
    assert pairs.mask_paths == [str(pets / "trimaps" / f"{os.path.basename(p)[:-4]}.png")
                                for p in pairs.image_paths]
    assert pairs.unmatched == [] and pairs.missing == []


def test_an_image_without_a_mask_is_named(pets):
    os.remove(pets / "trimaps" / "beagle_1.png")
    with pytest.raises(ValueError, match=r"same file stem in `masks`=.*trimaps.*Without a "
                                         r"mask: 1 image\(s\): .*beagle_1\.jpg"):
        masks.match_masks(pets / "images", pets / "trimaps")
    pairs = masks.match_masks(pets / "images", pets / "trimaps", allow_missing=True)
    assert pairs.missing == [str(pets / "images" / "beagle_1.jpg")]
    verdicts = checks.mask_verdicts(pairs)
    assert bad_files(verdicts) == {str(pets / "images" / "beagle_1.jpg"): "has no mask"}


def test_a_mask_without_an_image_is_reported(pets):
    save(np.zeros((3, 4), np.uint8), pets / "trimaps" / "boxer_9.png")
    with pytest.warns(UserWarning, match=r"without an image of the same stem.*boxer_9\.png"):
        pairs = masks.match_masks(pets / "images", pets / "trimaps")
    assert pairs.unmatched == [str(pets / "trimaps" / "boxer_9.png")]


def test_two_masks_of_one_stem_are_refused(pets):
    save(np.zeros((3, 4), np.uint8), pets / "trimaps" / "beagle_1.bmp")
    with pytest.raises(ValueError, match=r"have the stem 'beagle_1'"):
        masks.match_masks(pets / "images", pets / "trimaps")


def test_two_images_of_one_stem_are_refused(pets):
    """`x.jpg` and `x.png` (or one name in two folders) would share the mask `x.png`."""
    save(np.zeros((3, 4, 3), np.uint8), pets / "images" / "beagle_1.png")
    with pytest.raises(ValueError, match=r"two images of one stem would share a mask. Two "
                                         r"have the stem 'beagle_1': '.*beagle_1\.jpg' and "
                                         r"'.*beagle_1\.png'"):
        masks.match_masks(pets / "images", pets / "trimaps")
    (pets / "more").mkdir()
    save(np.zeros((3, 4, 3), np.uint8), pets / "more" / "beagle_1.jpg")
    with pytest.raises(ValueError, match=r"Two have the stem 'beagle_1': '.*images/beagle_1"
                                         r"\.jpg' and '.*more/beagle_1\.jpg'"):
        masks.match_masks([pets / "images" / "beagle_1.jpg", pets / "more" / "beagle_1.jpg"],
                          pets / "trimaps")


def test_a_mask_column_resolves_against_the_table_folder(pets):
    pairs = masks.column_masks(["images/Abyssinian_1.jpg", "images/beagle_1.jpg"],
                               ["trimaps/Abyssinian_1.png", "trimaps/beagle_1.png"], root=pets)
    assert pairs.mask_paths[1] == str(pets / "trimaps" / "beagle_1.png")
    with pytest.raises(ValueError, match=r"one cell per image. Received 1 masks for 2"):
        masks.column_masks(["a.jpg", "b.jpg"], ["a.png"])
    with pytest.raises(ValueError, match=r"column 'mask' has an empty cell for 1 image.*b\.jpg"):
        masks.column_masks(["a.jpg", "b.jpg"], ["a.png", float("nan")])


def test_a_mask_column_in_object_storage_resolves_to_uris(pets):
    """Relative paths under a table in a bucket become URIs; URIs stay as they are,
    whatever the root (no request is made)."""
    pairs = masks.column_masks(["images/a.jpg", "s3://other/b.jpg"],
                               ["../trimaps/a.png", "gs://g/m/b.png"], root="s3://bucket/t/")
    assert pairs.image_paths == ["s3://bucket/t/images/a.jpg", "s3://other/b.jpg"]
    assert pairs.mask_paths == ["s3://bucket/trimaps/a.png", "gs://g/m/b.png"]
    local = masks.column_masks(["images/Abyssinian_1.jpg"], ["s3://bucket/m/a.png"], root=pets)
    assert local.mask_paths == ["s3://bucket/m/a.png"]
    assert local.image_paths == [str(pets / "images" / "Abyssinian_1.jpg")]


# Masks: class ids


def test_a_palette_mask_s_ids_are_its_indices_not_its_colours():
    ids = np.array([[0, 1, 2], [2, 1, 0]], np.uint8)
    data = png_bytes(ids, PALETTE)
    assert Image.open(io.BytesIO(data)).mode == "P"
    np.testing.assert_array_equal(masks.read_mask(data), ids)
    palette = masks.mask_palette(data)
    np.testing.assert_array_equal(palette[:3], PALETTE)
    # Decoded to colours (as DALI decodes it), the grey values rank otherwise.
    grey = np.asarray(Image.open(io.BytesIO(data)).convert("L"))
    assert grey[0, 0] > grey[0, 1] > grey[0, 2]
    rewritten = Image.open(io.BytesIO(masks.greyscale_png(data)))
    assert rewritten.mode == "L"
    np.testing.assert_array_equal(np.asarray(rewritten), ids)
    assert masks.mask_palette(masks.greyscale_png(data)) is None


@pytest.mark.parametrize("dtype, top", [(np.uint8, 255), (np.uint16, 300), (bool, 1)])
def test_greyscale_masks_are_ids_as_they_are(dtype, top):
    ids = (np.arange(12).reshape(3, 4) * top // 11).astype(dtype)
    found = masks.read_mask(png_bytes(ids))
    np.testing.assert_array_equal(found, ids.astype(np.int64))
    assert found.dtype == (np.uint16 if dtype == np.uint16 else np.uint8)
    grey = Image.open(io.BytesIO(masks.greyscale_png(png_bytes(ids))))
    assert grey.mode == ("I;16" if top > 255 else "L")
    np.testing.assert_array_equal(np.asarray(grey), ids.astype(np.int64))


def test_a_greyscale_mask_with_an_exif_orientation_is_rewritten_without_it(tmp_path):
    """DALI's decoder would turn the mask as its EXIF says, and not its image: the
    graph reads a copy of its ids as they are stored, without EXIF."""
    from helpers import greyscale_png

    ids = np.arange(12, dtype=np.uint8).reshape(3, 4)
    plain, turned = tmp_path / "plain.png", tmp_path / "turned.png"
    plain.write_bytes(greyscale_png(ids))
    turned.write_bytes(greyscale_png(ids, exif_orientation=6))
    found = masks.greyscale_masks([str(plain), str(turned)])
    assert found[0] == str(plain) and found[1] != str(turned)
    with Image.open(found[1]) as rewritten:
        assert rewritten.getexif().get(0x0112) is None and rewritten.mode == "L"
        np.testing.assert_array_equal(np.asarray(rewritten), ids)


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "LA"])
def test_a_colour_mask_is_refused_naming_the_file(mode):
    data = io.BytesIO()
    Image.new(mode, (4, 3)).save(data, "PNG")
    with pytest.raises(masks.MaskError, match=rf"The mask 'm/a\.png' is an image of mode "
                                              rf"'{mode}'.*Save class ids as a greyscale "
                                              rf"\(mode 'L'.*or palette \(mode 'P'\) PNG"):
        masks.read_mask(data.getvalue(), "m/a.png")


def test_bytes_that_do_not_decode_are_named():
    with pytest.raises(masks.MaskError, match=r"The mask 'm/a\.png' cannot be decoded"):
        masks.read_mask(b"\x89PNG\r\n\x1a\nnot a png", "m/a.png")


# Masks: the check of pairs


def test_the_mask_check_names_each_problem_with_its_file_and_value(pets):
    trimaps = pets / "trimaps"
    save(np.zeros((5, 4), np.uint8), trimaps / "Abyssinian_2.png")  # 4x5, image 4x3
    save(np.array([[0, 1, 3, 255]], np.uint8), trimaps / "beagle_1.png")
    save(np.zeros((3, 4, 3), np.uint8), pets / "images" / "boxer_1.jpg")
    (trimaps / "boxer_1.png").write_bytes(b"garbage")
    pairs = masks.match_masks(pets / "images", trimaps)
    save(np.zeros((3, 4, 3), np.uint8), pets / "images" / "pug_1.jpg")
    pairs = pairs._replace(image_paths=pairs.image_paths + [str(pets / "images" / "pug_1.jpg")],
                           mask_paths=pairs.mask_paths + [str(trimaps / "gone.png")])
    verdicts = checks.mask_verdicts(pairs, class_names=["a", "b", "c"], mask_fill_value=255)
    assert [v.size for v in verdicts] == [(4, 3)] * 5
    image = lambda name: str(pets / "images" / name)  # noqa: E731
    mask = lambda name: repr(str(trimaps / name))  # noqa: E731
    outside = "holds the class id(s) 3, outside class_names (ids 0..2, or mask_fill_value=255)"
    bad = bad_files(verdicts)
    assert bad == {
        image("Abyssinian_1.jpg"): f"its mask {mask('Abyssinian_1.png')} {outside}",
        image("Abyssinian_2.jpg"): f"its mask {mask('Abyssinian_2.png')} is 4x5 pixels, the "
                                   "image 4x3",
        image("beagle_1.jpg"): f"its mask {mask('beagle_1.png')} is 4x1 pixels, the image 4x3; "
                               f"its mask {mask('beagle_1.png')} {outside}",
        image("boxer_1.jpg"): bad[image("boxer_1.jpg")],
        image("pug_1.jpg"): f"its mask {mask('gone.png')} does not exist",
    }
    assert bad[image("boxer_1.jpg")].startswith(f"its mask {mask('boxer_1.png')} cannot be "
                                                "decoded")
    save(np.zeros((3, 4, 3), np.uint8), trimaps / "pug_1.png")
    rgb = checks.mask_verdicts(masks.column_masks([image("pug_1.jpg")],
                                                  [str(trimaps / "pug_1.png")]))
    assert rgb[0].reason.startswith(f"its mask {mask('pug_1.png')} is an image of mode 'RGB'")
    sound = checks.mask_verdicts(pairs._replace(image_paths=pairs.image_paths[:1],
                                                mask_paths=pairs.mask_paths[:1]),
                                 class_names=["bg", "a", "b", "c"])
    assert sound[0].reason is None


def test_jpeg_masks_are_named_in_a_warning_with_or_without_class_names(pets):
    trimaps = pets / "trimaps"
    for name in ("Abyssinian_2", "beagle_1"):
        os.remove(trimaps / f"{name}.png")
        Image.fromarray(np.full((3, 4), 2, np.uint8)).save(trimaps / f"{name}.jpg")
    pairs = masks.match_masks(pets / "images", trimaps)
    for class_names in (None, ["a", "b", "c", "d"]):
        with pytest.warns(UserWarning, match=r"JPEG masks are lossy.*invents class ids") as w:
            verdicts = checks.mask_verdicts(pairs, class_names=class_names)
        assert str(trimaps / "Abyssinian_2.jpg") in str(w[0].message)
        assert str(trimaps / "beagle_1.jpg") in str(w[0].message)
        assert str(trimaps / "Abyssinian_1.png") not in str(w[0].message)
        assert not bad_files(verdicts)


# Boxes: formats


def test_box_formats_are_keras_s():
    from keras.src.layers.preprocessing.image_preprocessing.bounding_boxes import bounding_box

    assert box_source.BOX_FORMATS == bounding_box.SUPPORTED_FORMATS


def test_convert_format_agrees_with_keras_for_every_pair_of_formats():
    import keras

    rng = np.random.default_rng(0)
    xyxy = np.sort(rng.uniform(0, 300, (2, 5, 2, 2)), axis=-2).transpose(0, 1, 3, 2)
    xyxy = xyxy.reshape(2, 5, 4)[..., [0, 2, 1, 3]].astype(np.float32)  # x1 <= x2, y1 <= y2
    height, width = 240, 320
    for source in box_source.BOX_FORMATS:
        boxes = box_source.convert_format(xyxy, "xyxy", source, height, width)
        expected_source = np.asarray(keras.utils.bounding_boxes.convert_format(
            xyxy.copy(), "xyxy", source, height=height, width=width))
        np.testing.assert_allclose(boxes, expected_source, rtol=1e-6, atol=1e-4)
        for target in box_source.BOX_FORMATS:
            ours = box_source.convert_format(boxes, source, target.upper(), height, width)
            theirs = np.asarray(keras.utils.bounding_boxes.convert_format(
                boxes.copy(), source, target, height=height, width=width))
            assert ours.dtype == np.float32 and ours.shape == (2, 5, 4)
            np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-4,
                                       err_msg=f"{source} -> {target}")


def test_convert_format_names_what_is_wrong():
    with pytest.raises(ValueError, match=r"`target` must be one of \('xyxy'.*Received: "
                                         r"target='xyxyxy'"):
        box_source.convert_format(np.zeros((1, 4)), "xyxy", "xyxyxy")
    with pytest.raises(ValueError, match=r"`height` and `width` are needed.*target='rel_xyxy'"):
        box_source.convert_format(np.zeros((1, 4)), "xyxy", "rel_xyxy")
    with pytest.raises(ValueError, match=r"last dimension of 4. Received: boxes.shape=\(1, 3\)"):
        box_source.convert_format(np.zeros((1, 3)), "xyxy", "xywh")


def test_pad_boxes_pads_as_keras_max_num_bounding_boxes():
    import keras

    boxes = np.arange(12, dtype=np.float32).reshape(1, 3, 4)
    labels = np.array([[4, 5, 6]], np.int32)
    layer = keras.layers.MaxNumBoundingBoxes(max_number=5, bounding_box_format="xyxy")
    expected = layer({"images": np.zeros((1, 8, 8, 3), np.float32),
                      "bounding_boxes": {"boxes": boxes, "labels": labels}})["bounding_boxes"]
    ours = box_source.pad_boxes([boxes[0], np.zeros((0, 4))], [labels[0], []], 5,
                                paths=["a.png", "b.png"])
    np.testing.assert_array_equal(ours[0][:1], np.asarray(expected["boxes"]))
    np.testing.assert_array_equal(ours[1][:1], np.asarray(expected["labels"]))
    assert ours[0].dtype == np.float32 and ours[1].dtype == np.int32
    assert (ours[0][1] == -1).all() and (ours[1][1] == -1).all()


def test_more_boxes_than_max_boxes_keep_the_first_with_one_warning():
    many = [np.arange(16, dtype=np.float32).reshape(4, 4)] * 2
    with pytest.warns(UserWarning) as record:
        padded, labels = box_source.pad_boxes(many, [np.arange(4)] * 2, 2,
                                              paths=["x/a.png", "x/b.png"])
    assert len(record) == 1
    assert str(record[0].message) == ("2 image(s) have more than max_boxes=2 boxes; each keeps "
                                      "its first 2. The first: 'x/a.png', with 4 boxes")
    np.testing.assert_array_equal(padded[1], many[0][:2])
    np.testing.assert_array_equal(labels[0], [0, 1])
    with pytest.raises(ValueError, match=r"`max_boxes` must be a positive integer. Received: "
                                         r"max_boxes=0"):
        box_source.pad_boxes(many, [np.arange(4)] * 2, 0)


# Boxes: sources


@pytest.fixture
def coco(tmp_path):
    """Three 40x30 images; a COCO JSON with category ids 3, 10, 20 (listed out of
    order), a crowd annotation, an image without annotations."""
    (tmp_path / "images").mkdir()
    for name in ("a", "b", "c"):
        save(np.zeros((30, 40, 3), np.uint8), tmp_path / "images" / f"{name}.png")
    data = {
        "images": [{"id": 1, "file_name": "a.png", "width": 40, "height": 30},
                   {"id": 2, "file_name": "b.png", "width": 40, "height": 30},
                   {"id": 5, "file_name": "c.png", "width": 40, "height": 30}],
        "annotations": [
            {"id": 11, "image_id": 1, "category_id": 20, "bbox": [1, 2, 10, 5], "iscrowd": 0},
            {"id": 12, "image_id": 1, "category_id": 3, "bbox": [0, 0, 40, 30], "iscrowd": 0},
            {"id": 13, "image_id": 1, "category_id": 10, "bbox": [0, 0, 9, 9], "iscrowd": 1},
            {"id": 14, "image_id": 5, "category_id": 10, "bbox": [5.5, 6, 3, 4]},
        ],
        "categories": [{"id": 20, "name": "cat"}, {"id": 3, "name": "person"},
                       {"id": 10, "name": "dog"}],
    }
    (tmp_path / "instances.json").write_text(json.dumps(data))
    return tmp_path


def test_coco_boxes_have_contiguous_labels_in_category_id_order(coco):
    source = coco_boxes(coco / "instances.json", coco / "images")
    assert source.class_names == ["person", "dog", "cat"]
    assert source.crowd == 1 and source.missing == [] and source.unmatched == []
    a, b, c = source.images
    assert a.path == str(coco / "images" / "a.png") and a.size == (40, 30)
    np.testing.assert_array_equal(a.boxes, [[1, 2, 11, 7], [0, 0, 40, 30]])
    np.testing.assert_array_equal(a.labels, [2, 0])
    assert a.names == ["annotation 11", "annotation 12"] and a.values == [20, 3]
    assert b.boxes.shape == (0, 4) and b.labels.shape == (0,)
    np.testing.assert_array_equal(c.boxes, [[5.5, 6, 8.5, 10]])
    assert c.boxes.dtype == np.float32 and c.labels.dtype == np.int32
    assert bad_files(checks.box_verdicts(source)) == {}


def test_coco_images_and_files_that_do_not_match_are_named(coco):
    save(np.zeros((30, 40, 3), np.uint8), coco / "images" / "d.png")
    os.remove(coco / "images" / "b.png")
    with pytest.raises(ValueError, match=r"needs an entry in `boxes`=.*instances\.json.*Not "
                                         r"listed: 1 image\(s\): .*d\.png"):
        coco_boxes(coco / "instances.json", coco / "images")
    with pytest.warns(UserWarning, match=r"Images of .* without an image file are left out: 1 "
                                         r"image\(s\): b\.png"):
        source = coco_boxes(coco / "instances.json", coco / "images",
                                       allow_missing=True)
    assert source.unmatched == ["b.png"]
    assert bad_files(checks.box_verdicts(source)) == {
        str(coco / "images" / "d.png"): "is not listed in the boxes' source"}


def test_a_malformed_coco_json_is_named(coco, tmp_path):
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ValueError, match=r"`boxes` must be a COCO instances JSON file. Received:"
                                         r" boxes=.*bad\.json"):
        coco_boxes(tmp_path / "bad.json", coco / "images")
    with pytest.raises(ValueError, match=r"has no list 'categories'"):
        coco_boxes({"images": [], "annotations": []}, coco / "images")
    data = json.loads((coco / "instances.json").read_text())
    data["annotations"][0]["bbox"] = [1, 2, 3]
    with pytest.raises(ValueError, match=r"Annotation 11 of the COCO dict has bbox=\[1, 2, 3\]"):
        coco_boxes(data, coco / "images")


@pytest.mark.parametrize("change, match", [
    (lambda d: d["categories"].append({"id": 3, "name": "cow"}),
     r"Each COCO category id must be unique\. '.*instances\.json' has two categories of the "
     r"id 3: 'person' and 'cow'"),
    (lambda d: d["categories"][1].update(id="3"),
     r"Each COCO category has an integer 'id' and a 'name'\. '.*instances\.json' has "
     r"categories\[1\]=\{\"id\": \"3\", \"name\": \"person\"\}"),
    (lambda d: d["categories"][0].pop("name"),
     r"Each COCO category has an integer 'id' and a 'name'\. .* has categories\[0\]="
     r"\{\"id\": 20\}"),
    (lambda d: d["images"][1].pop("file_name"),
     r"Each COCO image has a 'file_name' and an 'id'.*\. '.*instances\.json' has "
     r"images\[1\]=\{\"id\": 2, \"width\": 40, \"height\": 30\}"),
    (lambda d: d["images"][2].pop("id"),
     r"Each COCO image has a 'file_name' and an 'id'.* has images\[2\]=\{\"file_name\": "
     r"\"c\.png\""),
    (lambda d: d["images"][2].update(id=1),
     r"Each COCO image id must be unique\. .* lists two images of the id 1: images\[2\]="),
])
def test_a_malformed_coco_entry_is_named_with_the_json(coco, change, match):
    data = json.loads((coco / "instances.json").read_text())
    change(data)
    (coco / "instances.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=match):
        coco_boxes(coco / "instances.json", coco / "images")


def test_image_files_of_one_name_in_two_folders_are_refused_with_coco(coco):
    (coco / "more").mkdir()
    save(np.zeros((30, 40, 3), np.uint8), coco / "more" / "a.png")
    paths = [str(coco / "images" / "a.png"), str(coco / "images" / "b.png"),
             str(coco / "more" / "a.png")]
    with pytest.raises(ValueError, match=r"Two have the name 'a\.png': '.*images/a\.png' and "
                                         r"'.*more/a\.png'"):
        coco_boxes(coco / "instances.json", paths)


def test_the_box_check_names_the_annotation_and_the_value(coco):
    data = json.loads((coco / "instances.json").read_text())
    data["annotations"] += [
        {"id": 21, "image_id": 2, "category_id": 99, "bbox": [1, 1, 5, 5]},
        {"id": 22, "image_id": 2, "category_id": 3, "bbox": [30, 20, 10.5, 10.5]},  # in tolerance
        {"id": 23, "image_id": 2, "category_id": 3, "bbox": [30, 20, 12, 5]},
        {"id": 24, "image_id": 2, "category_id": 3, "bbox": [3, 3, 0, 5]},
    ]
    data["images"][2]["width"] = 64
    bad = bad_files(checks.box_verdicts(coco_boxes(data, coco / "images")))
    assert bad == {
        str(coco / "images" / "b.png"): (
            "annotation 21 has the category 99, not among the classes person, dog, cat; "
            "annotation 23's box [30, 20, 42, 25] (xyxy) lies outside the image (40x30 pixels); "
            "annotation 24's box [3, 3, 3, 8] (xyxy) has no area"),
        str(coco / "images" / "c.png"): "is 40x30 pixels, its boxes' source says 64x30",
    }


def write_table(path, header, rows):
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def test_a_table_of_boxes_is_read_in_its_format(coco):
    table = write_table(coco / "boxes.csv", ["path", "x1", "y1", "x2", "y2", "label"], [
        ["images/a.png", 1, 2, 11, 7, "dog"], ["images/b.png", "", "", "", "", ""],
        ["images/a.png", 0, 0, 40, 30, "cat"]])
    source = box_source.table_boxes(table, bounding_box_format="xyxy")
    assert source.class_names == ["cat", "dog"]
    a, b = source.images
    assert a.path == str(coco / "images" / "a.png") and a.names == ["row 0", "row 2"]
    np.testing.assert_array_equal(a.boxes, [[1, 2, 11, 7], [0, 0, 40, 30]])
    np.testing.assert_array_equal(a.labels, [1, 0])
    assert b.boxes.shape == (0, 4)
    columns = {"path": [str(coco / "images" / "c.png")], "x": [0.25], "y": [0.5], "w": [0.5],
               "h": [0.1], "label": ["dog"]}
    c, = box_source.table_boxes(columns, bounding_box_format="rel_xywh",
                                class_names=["dog"]).images
    np.testing.assert_allclose(c.boxes, [[10, 15, 30, 18]], rtol=1e-6)
    unknown = box_source.table_boxes(table, bounding_box_format="xyxy", class_names=["dog"])
    assert bad_files(checks.box_verdicts(unknown)) == {
        str(coco / "images" / "a.png"): "row 2 has the category 'cat', not among the classes dog"}


def test_a_dict_of_columns_of_unequal_lengths_is_refused(coco):
    table = {"path": ["images/a.png", "images/b.png"], "x1": [1, 2], "y1": [1, 2],
             "x2": [5, 6], "y2": [5], "label": ["cat", "dog"]}
    with pytest.raises(ValueError, match=r"must have one length, a cell per row. Received "
                                         r"lengths: \{'path': 2, 'x1': 2, 'y1': 2, 'x2': 2, "
                                         r"'y2': 1, 'label': 2\}"):
        box_source.table_boxes(table, bounding_box_format="xyxy", root=str(coco))


def test_a_table_of_boxes_names_its_mistakes(coco):
    table = write_table(coco / "boxes.csv", ["path", "x1", "y1", "x2", "y2", "label"],
                        [["images/a.png", 1, 2, "", 7, "dog"]])
    with pytest.raises(ValueError, match=r"Row 0 of .*boxes\.csv' \(images/a\.png\) has empty "
                                         r"cells in \['x2'\]"):
        box_source.table_boxes(table, bounding_box_format="xyxy")
    with pytest.raises(ValueError, match=r"bounding_box_format='xywh' needs the columns "
                                         r"\['path', 'x', 'y', 'w', 'h', 'label'\]. .* lacks "
                                         r"\['x', 'y', 'w', 'h'\]"):
        box_source.table_boxes(table, bounding_box_format="xywh")
    with pytest.raises(ValueError, match=r"`bounding_box_format` must be one of .*Received: "
                                         r"bounding_box_format='xyhw'"):
        box_source.table_boxes(table, bounding_box_format="xyhw")
    write_table(table, ["path", "x1", "y1", "x2", "y2", "label"],
                [["images/a.png", 1, 2, "three", 7, "dog"]])
    with pytest.raises(ValueError, match=r"Row 0 .* not a number: .*'x2': 'three'"):
        box_source.table_boxes(table, bounding_box_format="xyxy")


# Sample data


def test_draw_shapes_masks_and_boxes_are_the_pixels_exactly():
    picture = np.zeros((80, 100, 3), np.uint8)
    picture[:] = SHAPE_COLOURS[1]  # a background of a shape's colour is changed
    for seed in range(6):
        image, ids, boxes, labels = draw_shapes(picture, np.random.default_rng(seed))
        assert_drawn(image, ids, boxes, labels)


def assert_drawn(image, ids, boxes, labels):
    """The mask agrees with the image's colours at every pixel; each box is the exact
    extent of its shape's pixels, and the boxes cover them all."""
    for k, colour in enumerate(SHAPE_COLOURS):
        np.testing.assert_array_equal((image == colour).all(-1), ids == k + 1)
    covered = np.zeros(ids.shape, bool)
    for (x1, y1, x2, y2), label in zip(boxes.tolist(), labels.tolist()):
        inside = ids[y1:y2, x1:x2] == label + 1
        assert inside[0].any() and inside[-1].any() and inside[:, 0].any() and inside[:, -1].any()
        covered[y1:y2, x1:x2] |= ids[y1:y2, x1:x2] == label + 1
    np.testing.assert_array_equal(covered, ids > 0)


def test_the_dense_sample_data_s_masks_and_boxes_agree_with_its_pixels(tmp_path):
    labels_csv = make_dense_sample_dataset(tmp_path, num_images=12, seed=1)
    with open(labels_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    pairs = masks.match_masks(tmp_path / "images", tmp_path / "masks")
    assert [os.path.relpath(p, tmp_path) for p in pairs.mask_paths] == sorted(
        r["mask"] for r in rows)
    coco_source = coco_boxes(tmp_path / "instances.json", tmp_path / "images")
    table_source = box_source.table_boxes(tmp_path / "boxes.csv", bounding_box_format="xyxy",
                                          class_names=list(SHAPES))
    assert coco_source.class_names == list(SHAPES)
    document = json.loads((tmp_path / "instances.json").read_text())
    assert sorted(c["id"] for c in document["categories"]) == list(CATEGORY_IDS)
    tables = {entry.path: entry for entry in table_source.images}
    empty = 0
    for image_path, mask_path, entry in zip(pairs.image_paths, pairs.mask_paths,
                                            coco_source.images):
        image = np.asarray(Image.open(image_path))
        with Image.open(mask_path) as mask:
            assert mask.mode == "P"
            np.testing.assert_array_equal(np.reshape(mask.getpalette()[:12], (4, 3)),
                                          MASK_PALETTE)
        ids = masks.read_mask(open(mask_path, "rb").read(), mask_path)
        assert entry.path == image_path and entry.size == image.shape[1::-1]
        assert_drawn(image, ids, entry.boxes.astype(np.int64), entry.labels)
        np.testing.assert_array_equal(tables[image_path].boxes, entry.boxes)
        np.testing.assert_array_equal(tables[image_path].labels, entry.labels)
        empty += len(entry.boxes) == 0
    assert 0 < empty < 12
    assert bad_files(checks.mask_verdicts(pairs, class_names=["background", *SHAPES])) == {}
    assert bad_files(checks.box_verdicts(coco_source)) == {}


def test_sample_data_command_writes_masks_and_boxes(tmp_path, capsys):
    from dalipipe.cli import main

    assert main(["sample-data", str(tmp_path), "--masks-and-boxes", "--num-images", "3"]) == 0
    assert "3 images with masks and boxes" in capsys.readouterr().out
    assert sorted(os.listdir(tmp_path)) == [".dalipipe-sample-data.json", "boxes.csv", "images",
                                            "instances.json", "labels.csv", "masks"]
    stamp = os.stat(tmp_path / "masks" / sorted(os.listdir(tmp_path / "masks"))[0]).st_mtime_ns
    make_dense_sample_dataset(tmp_path, num_images=3)  # the same arguments: kept
    assert os.stat(tmp_path / "masks" / sorted(os.listdir(tmp_path / "masks"))[0]).st_mtime_ns \
        == stamp
    from dalipipe.sample_data import make_sample_dataset

    make_sample_dataset(tmp_path, num_images=2, num_classes=2)  # its own files replaced
    assert not {"images", "masks", "instances.json", "boxes.csv"} & set(os.listdir(tmp_path))


def test_the_checks_take_the_image_sizes_the_image_check_found(coco):
    source = coco_boxes(coco / "instances.json", coco / "images")
    verdicts = checks.box_verdicts(source, sizes=[(40, 30), (40, 30), (8, 8)])
    assert bad_files(verdicts) == {str(coco / "images" / "c.png"): (
        "is 8x8 pixels, its boxes' source says 40x30; annotation 14's box [5.5, 6, 8.5, 10] "
        "(xyxy) lies outside the image (8x8 pixels)")}
    pairs = masks.column_masks([str(coco / "images" / "a.png")], [str(coco / "images" / "a.png")])
    assert checks.mask_verdicts(pairs, sizes=[(40, 30)])[0].size == (40, 30)
