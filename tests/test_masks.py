"""Segmentation masks through the DALI graph (`masks=`): each mask moves with its
image, natively (`make_dali_pipeline(...).epoch()`), on the sample data whose
shapes' colours define the masks; refusals and bad inputs named. One subprocess
per Keras backend (`masks_job.py`) reads masks and boxes in every format and trains
a tiny segmentation model and a tiny detector through `fit`."""

import importlib.util
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from dalipipe import (AutoAugment, RandAugment, TrivialAugmentWide, make_dali_dataset,
                      make_dali_pipeline)
from dalipipe.annotations.masks import read_mask
from dalipipe.annotations.sample import MASK_CLASS_NAMES, SHAPE_COLOURS, SHAPES
from dalipipe.sample_data import make_dense_sample_dataset
from dalipipe.utils import child_env
from helpers import bad_idat_crc, greyscale_png, recipe_kinds

pytest.importorskip("nvidia.dali")

TESTS = os.path.dirname(os.path.abspath(__file__))
SIZE = (48, 64)
CLASSES = list(MASK_CLASS_NAMES)
OPTIONS = dict(image_size=SIZE, batch_size=4, seed=3, device="cpu", verbose=False,
               num_threads=1, class_names=CLASSES)


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    """8 sample images with shapes, their palette masks (palette not in brightness
    order) and `labels.csv`."""
    folder = tmp_path_factory.mktemp("dense")
    make_dense_sample_dataset(str(folder), num_images=8, seed=0, crop_width=(64, 96))
    return str(folder)


def pipeline(dense, **options):
    options = {**OPTIONS, "masks": os.path.join(dense, "masks"), **options}
    return make_dali_pipeline(os.path.join(dense, "images"), **options)


def interior(flags, margin):
    """`flags` (bool `(h, w)`) where the whole `(2 margin + 1)` square around is set."""
    padded = np.pad(flags, margin, constant_values=False)
    h, w = flags.shape
    out = np.ones_like(flags)
    for dy in range(2 * margin + 1):
        for dx in range(2 * margin + 1):
            out &= padded[dy:dy + h, dx:dx + w]
    return out


def check_aligned(images, masks, *, fill=None):
    """Each mask agrees with its image's colours away from shape edges: inside a
    shape's mask the image has its colour, and inside a patch of a shape's colour the
    mask has its id. Returns how many shape pixels were compared."""
    compared = 0
    for image, mask in zip(images, masks[..., 0]):
        for k, colour in enumerate(SHAPE_COLOURS, start=1):
            near = np.abs(image - np.array(colour, np.float32)).max(-1) < 0.5
            inside_mask = interior(mask == k, 2)
            assert near[inside_mask].all()
            inside_colour = interior(near, 2)
            assert (mask[inside_colour] == k).all()
            compared += int(inside_mask.sum())
        if fill is None:
            assert set(np.unique(mask).tolist()) <= set(range(len(CLASSES)))
    return compared


@pytest.mark.parametrize("options", [
    dict(augment=False), dict(augment=True), dict(crop_to_aspect_ratio=True),
    dict(central_fraction=0.7), dict(interpolation="bicubic", antialias=True),
])
def test_each_mask_moves_with_its_image(dense, options):
    p = pipeline(dense, **options)
    assert p.output_dtypes == ("float32", "int32")
    assert p.output_shapes == ((None, *SIZE, 3), (None, *SIZE, 1))
    compared = 0
    for epoch in (0, 1):
        for images, masks in p.epoch(epoch):
            assert masks.dtype == np.int32 and masks.shape == (len(images), *SIZE, 1)
            compared += check_aligned(images, masks)
    assert compared > 500


RECIPES = [RandAugment(num_ops=1, magnitude=24), TrivialAugmentWide(), AutoAugment()]


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
def test_a_recipe_moves_each_mask_with_its_image(dense, recipe):
    """The recipe's shears, translations and rotations move the masks with the same
    draws (`mask_fill_value` where they uncover pixels), its other operations leave
    them: a sample without a geometric operation has the mask of `augment=True`
    (same crops), one with it another; where the image's colours are left as they
    were (no operation on values), the mask agrees with them."""
    p = pipeline(dense, augment=recipe, mask_fill_value=255, shuffle=False)
    plain = pipeline(dense, augment=True, mask_fill_value=255, shuffle=False)
    moved = compared = 0
    for epoch in range(4):
        images, masks = (np.concatenate(parts) for parts in zip(*p.epoch(epoch)))
        plain_masks = np.concatenate([m for _, m in plain.epoch(epoch)])
        geometric, values = recipe_kinds(p, epoch)
        assert set(np.unique(masks).tolist()) <= {0, 1, 2, 3, 255}
        np.testing.assert_array_equal(masks[~geometric], plain_masks[~geometric])
        moved += int((masks[geometric] != plain_masks[geometric]).any((1, 2, 3)).sum())
        shown = geometric & ~values  # moved, colours as they were
        compared += check_aligned(images[shown], masks[shown], fill=255)
    assert moved >= 5 and compared > 1000, (moved, compared)


def test_augment_flips_and_crops_masks_with_their_images(dense):
    plain = np.concatenate([m for _, m in pipeline(dense, shuffle=False).epoch(0)])
    augmented = np.concatenate([m for _, m in pipeline(dense, shuffle=False,
                                                       augment=True).epoch(0)])
    assert not np.array_equal(plain, augmented)  # the crops moved the masks


def test_padding_holds_the_fill_value(dense):
    p = pipeline(dense, pad_to_aspect_ratio=True, image_size=(64, 64), mask_fill_value=255,
                 shuffle=False)
    for images, masks in p.epoch(0):
        check_aligned(images, masks, fill=255)
        for image, mask in zip(images, masks[..., 0]):
            padded = mask == 255
            assert padded.any()  # the sample images are wider than tall
            assert (image[padded] == 0).all()  # where the image is padded, and only there
            assert (image[~padded].max(-1) > 0).mean() > 0.9


def test_channels_first_masks(dense):
    p = pipeline(dense, data_format="channels_first", shuffle=False)
    assert p.output_shapes == ((None, 3, *SIZE), (None, 1, *SIZE))
    images, masks = next(iter(p.epoch(0)))
    assert masks.shape == (4, 1, *SIZE)
    check_aligned(images.transpose(0, 2, 3, 1), masks.transpose(0, 2, 3, 1))


def test_a_resized_mask_holds_only_its_source_ids_and_the_fill(dense):
    p = pipeline(dense, pad_to_aspect_ratio=True, image_size=(37, 23), mask_fill_value=-1,
                 shuffle=False)
    masks = np.concatenate([m for _, m in p.epoch(0)])
    for path, mask in zip(p.file_paths, masks):
        source = mask_ids(dense, path)
        assert set(np.unique(mask).tolist()) <= set(np.unique(source).tolist()) | {-1}


def mask_ids(dense, image_path):
    name = os.path.splitext(os.path.basename(image_path))[0] + ".png"
    with open(os.path.join(dense, "masks", name), "rb") as f:
        return read_mask(f.read())


def test_palette_masks_give_their_indices_not_their_colours(dense):
    """At the image's own size, the mask is its file's palette indices, exactly; the
    sample palette's brightness order differs from its indices."""
    first = sorted(os.listdir(os.path.join(dense, "images")))[0]
    path = os.path.join(dense, "images", first)
    width, height = Image.open(path).size
    assert Image.open(os.path.join(dense, "masks", first)).mode == "P"
    with pytest.warns(UserWarning, match="without an image of the same stem are left out"):
        p = make_dali_pipeline([path], masks=os.path.join(dense, "masks"),
                               **{**OPTIONS, "image_size": (height, width), "batch_size": None})
    (_, mask), = list(p.epoch(0))
    assert mask.shape == (height, width, 1)
    np.testing.assert_array_equal(mask[..., 0], mask_ids(dense, path))
    assert len(np.unique(mask)) > 1


def test_a_table_names_its_mask_column(dense):
    p = make_dali_pipeline(os.path.join(dense, "labels.csv"), masks="mask",
                           **{**OPTIONS, "shuffle": False})
    assert p.class_names == CLASSES and len(p.file_paths) == 8
    for images, masks in p.epoch(0):
        check_aligned(images, masks)
    with pytest.raises(ValueError, match=r"`masks` must name its column.*masks='trimap'"):
        make_dali_pipeline(os.path.join(dense, "labels.csv"), masks="trimap", **OPTIONS)


def test_validation_split_splits_images_with_their_masks(dense):
    train, val = pipeline(dense, augment=True, validation_split=0.25, subset="both")
    assert len(train.file_paths) == 6 and len(val.file_paths) == 2
    assert not val.options.augment
    for p in (train, val):
        for images, masks in p.epoch(0):
            check_aligned(images, masks)


@pytest.mark.parametrize("options, match", [
    (dict(labels=[0] * 8), r"`labels` must stay at its default.*labels=\[0"),
    (dict(label_mode="categorical"), r"`label_mode` must stay.*label_mode='categorical'"),
    (dict(class_weight={0: 1.0}), r"`class_weight` must stay.*class_weight=\{0: 1.0\}"),
    (dict(mix="mixup", label_mode=None), r"`mix` must stay.*mix=MixUp"),
    (dict(masks=3), r"`masks` must be a folder.*Received: masks=3"),
    (dict(mask_fill_value=0.5), r"`mask_fill_value` must be an integer.*mask_fill_value=0.5"),
])
def test_refusals_name_the_arguments(dense, options, match):
    with pytest.raises(ValueError, match=match):
        pipeline(dense, **options)


def test_unsupported_sources_are_refused(dense, tmp_path):
    from dalipipe.tfrecord.write import write_tfrecords

    first = os.path.join(dense, "images", sorted(os.listdir(os.path.join(dense, "images")))[0])
    write_tfrecords([first], None, None, str(tmp_path))
    with pytest.raises(ValueError, match=r"TFRecord files is not supported yet"):
        make_dali_pipeline(str(tmp_path / "train-*"), masks=os.path.join(dense, "masks"),
                           **OPTIONS)


def copy_dense(dense, folder):
    for sub in ("images", "masks"):
        os.makedirs(folder / sub)
        for name in sorted(os.listdir(os.path.join(dense, sub)))[:3]:
            with open(os.path.join(dense, sub, name), "rb") as f:
                (folder / sub / name).write_bytes(f.read())
    return [sorted(os.listdir(folder / sub)) for sub in ("images", "masks")]


@pytest.mark.parametrize("check", ["structure", None])
def test_bad_pairs_are_named(dense, tmp_path, check):
    images, masks = copy_dense(dense, tmp_path)
    source, folder = str(tmp_path / "images"), str(tmp_path / "masks")
    options = {**OPTIONS, "check": check}
    os.remove(tmp_path / "masks" / masks[0])
    Image.new("RGB", (5, 5)).save(tmp_path / "masks" / masks[1])  # colours, not ids
    ids = np.zeros(Image.open(tmp_path / "images" / images[2]).size[::-1], np.uint8)
    ids[0, 0] = 7
    Image.fromarray(ids).save(tmp_path / "masks" / masks[2])
    with pytest.raises(ValueError) as raised:
        make_dali_pipeline(source, masks=folder, **options)
    message = str(raised.value)
    assert f"{images[0]}: has no mask" in message
    assert f"{masks[1]}' is an image of mode 'RGB'" in message
    assert f"{masks[2]}' holds the class id(s) 7, outside class_names" in message
    Image.new("L", (5, 5)).save(tmp_path / "masks" / masks[1])
    with pytest.raises(ValueError, match=r"is 5x5 pixels, the image"):
        make_dali_pipeline(source, masks=folder, **options)
    with pytest.raises(ValueError, match="All 3 files are bad"):
        make_dali_pipeline(source, masks=folder, **{**options, "on_bad_file": "skip"})


def test_output_dict_read_by_fit_is_refused_and_fits_through_map(dense):
    keras = pytest.importorskip("keras")
    dataset = make_dali_dataset(os.path.join(dense, "images"), masks=os.path.join(dense, "masks"),
                                output="dict", format="pydataset", **OPTIONS)
    model = keras.Sequential([keras.Input((*SIZE, 3)), keras.layers.Conv2D(4, 1)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    message = (r'`output="dict"` gives the dicts of Keras\'s preprocessing layers \(\{"images", '
               r'"segmentation_masks"\}\), which `fit` reads as inputs without targets.*'
               r'd\["segmentation_masks"\]')
    with pytest.raises(ValueError, match=message):
        model.fit(dataset, epochs=1, verbose=0)
    pairs = dataset.map(lambda d: (d["images"], d["segmentation_masks"]))
    model.fit(pairs, epochs=1, verbose=0)


def test_masks_without_class_names_are_named_by_the_ids_seen(dense, tmp_path):
    """As Keras names classes by their folders: strings, id i being `class_names[i]`."""
    images, masks = copy_dense(dense, tmp_path)
    for image, mask, top in zip(images, masks, (3, 1, 255)):
        width, height = Image.open(tmp_path / "images" / image).size
        ids = np.ones((height, width), np.uint8)
        ids[0] = top
        Image.fromarray(ids).save(tmp_path / "masks" / mask)
    source, folder = str(tmp_path / "images"), str(tmp_path / "masks")
    options = {**OPTIONS, "class_names": None}
    pipeline = make_dali_pipeline(source, masks=folder, mask_fill_value=255, **options)
    assert pipeline.class_names == ["0", "1", "2", "3"]
    assert len(make_dali_pipeline(source, masks=folder, **options).class_names) == 256


@pytest.mark.parametrize("on_bad_file", ["raise", "skip"])
def test_trimaps_with_three_names_say_the_files_are_sound_and_the_remedies(dense, tmp_path,
                                                                          on_bad_file):
    """Oxford-Pets' trimaps hold 1, 2 and 3: three names are a mismatch of names,
    not damaged files; the error names the ids and both remedies."""
    images, masks = copy_dense(dense, tmp_path)
    for image, mask in zip(images, masks):
        width, height = Image.open(tmp_path / "images" / image).size
        ids = np.ones((height, width), np.uint8)
        ids[: height // 2] = 2
        ids[:, : width // 3] = 3
        Image.fromarray(ids).save(tmp_path / "masks" / mask)
    source, folder = str(tmp_path / "images"), str(tmp_path / "masks")
    options = {**OPTIONS, "class_names": ["pet", "background", "border"],
               "on_bad_file": on_bad_file}
    with pytest.raises(ValueError) as raised:
        make_dali_pipeline(source, masks=folder, **options)
    message = str(raised.value)
    assert "cannot be loaded" not in message
    assert message.startswith("The masks are sound, but 3 of 3 hold class ids outside "
                              "`class_names` (3 names: ids 0..2). Ids found in those masks: "
                              "1, 2, 3; outside the names: 3.")
    assert "4 names for ids 0..3" in message
    assert "pass no `class_names` and subtract 1 from the masks with `map`" in message
    assert "masks - 1" in message and "class_names=['pet', 'background', 'border']" in message


@pytest.mark.parametrize("check", ["structure", "full"])
def test_a_mask_dali_s_decoder_rejects_is_named_by_the_check(dense, tmp_path, check):
    """PIL decodes a PNG whose IDAT checksum is wrong, DALI's decoder does not: the
    image check's rules judge the masks too, and `on_bad_file` applies."""
    images, masks = copy_dense(dense, tmp_path)
    mask = tmp_path / "masks" / masks[0]
    mask.write_bytes(bad_idat_crc(greyscale_png(read_mask(mask.read_bytes()))))
    read_mask(mask.read_bytes())  # PIL reads it
    source, folder = str(tmp_path / "images"), str(tmp_path / "masks")
    options = {**OPTIONS, "check": check}
    with pytest.raises(ValueError, match=re.escape(
            f"{images[0]}: its mask {str(mask)!r}: corrupt PNG (checksum of chunk b'IDAT')")):
        make_dali_pipeline(source, masks=folder, **options)
    with pytest.warns(UserWarning, match="Left out 1 of 3 files that cannot be loaded"):
        p = make_dali_pipeline(source, masks=folder, **{**options, "on_bad_file": "skip"})
    assert sorted(os.path.basename(f) for f in p.file_paths) == images[1:]
    for batch_images, batch_masks in p.epoch(0):
        check_aligned(batch_images, batch_masks)


@pytest.mark.parametrize("damage", ["truncated", "same size and mtime"])
def test_a_mask_damaged_after_the_check_is_named_in_the_epoch(dense, tmp_path, damage):
    """The graph reads a local 8-bit greyscale mask as it is: damaged after the
    dataset is made, it stops the epoch with an error naming it, not its image."""
    images, masks = copy_dense(dense, tmp_path)
    for name in masks:
        path = tmp_path / "masks" / name
        path.write_bytes(greyscale_png(read_mask(path.read_bytes())))
    p = make_dali_pipeline(str(tmp_path / "images"), masks=str(tmp_path / "masks"),
                           **{**OPTIONS, "shuffle": False, "batch_size": 1})
    mask = tmp_path / "masks" / masks[1]
    data, info = mask.read_bytes(), mask.stat()
    if damage == "truncated":
        mask.write_bytes(data[:len(data) // 2])
    else:
        mask.write_bytes(bad_idat_crc(data))
        os.utime(mask, ns=(info.st_atime_ns, info.st_mtime_ns))
    with pytest.raises(RuntimeError) as raised:
        list(p.epoch(0))
    message = str(raised.value)
    assert message.startswith(f"DALI failed to decode {mask}: "), message
    assert f"the mask of {tmp_path / 'images' / images[1]}" in message


@pytest.mark.parametrize("check", ["structure", None])
def test_an_image_turned_by_its_exif_orientation_is_refused(dense, tmp_path, check):
    images, _ = copy_dense(dense, tmp_path)
    picture = Image.open(tmp_path / "images" / images[0]).convert("RGB")
    exif = Image.Exif()
    exif[0x0112] = 6  # DALI turns the image a quarter turn, and not its mask
    os.remove(tmp_path / "images" / images[0])
    picture.save(tmp_path / "images" / (images[0][:-4] + ".jpg"), exif=exif)
    with pytest.raises(ValueError, match=r"\.jpg: has the EXIF orientation 6.*not supported yet"):
        make_dali_pipeline(str(tmp_path / "images"), masks=str(tmp_path / "masks"),
                           **{**OPTIONS, "check": check})


def test_a_mask_with_an_exif_orientation_stays_aligned_with_its_image(dense, tmp_path):
    """PIL (the check) ignores a mask's EXIF orientation, DALI's decoder applies it:
    the graph reads the mask's ids as stored, as the image's pixels are."""
    images, masks = copy_dense(dense, tmp_path)
    for name in masks:
        path = tmp_path / "masks" / name
        path.write_bytes(greyscale_png(read_mask(path.read_bytes()), exif_orientation=6))
    p = make_dali_pipeline(str(tmp_path / "images"), masks=str(tmp_path / "masks"),
                           **{**OPTIONS, "shuffle": False})
    compared = sum(check_aligned(images, masks) for images, masks in p.epoch(0))
    assert compared > 100


def test_masks_must_be_a_folder_with_a_mask_per_image(dense, tmp_path):
    with pytest.raises(ValueError, match=r"`masks` must be a folder of image files"):
        pipeline(dense, masks=str(tmp_path / "none"))


def test_every_mask_above_255_is_named_by_the_check_and_skip_leaves_it_out(dense, tmp_path):
    images, masks = copy_dense(dense, tmp_path)
    for i, top in ((0, 300), (1, 1000)):
        ids = np.zeros(Image.open(tmp_path / "images" / images[i]).size[::-1], np.uint16)
        ids[0, 0] = top
        Image.fromarray(ids).save(tmp_path / "masks" / masks[i])
    source, folder = str(tmp_path / "images"), str(tmp_path / "masks")
    options = {**OPTIONS, "class_names": None}
    with pytest.raises(ValueError) as raised:
        make_dali_pipeline(source, masks=folder, **options)
    message = str(raised.value)
    assert message.startswith("2 of 3 files cannot be loaded")
    for mask, top in ((masks[0], 300), (masks[1], 1000)):
        assert f"{mask}' holds the class id {top}: ids above 255 are not supported" in message
    with pytest.warns(UserWarning, match="Left out 2 of 3 files"):
        p = make_dali_pipeline(source, masks=folder, **{**options, "on_bad_file": "skip"})
    assert [os.path.basename(f) for f in p.file_paths] == images[2:]


@pytest.mark.gpu
@pytest.mark.parametrize("options", [dict(augment=True), dict(pad_to_aspect_ratio=True)])
def test_gpu_masks_equal_the_cpu_graph_masks(dense, options):
    """Masks are decoded on the CPU in both graphs; nearest-neighbour resizing, flips
    and padding on the GPU give the CPU graph's ids exactly."""
    cpu = [m for _, m in pipeline(dense, **options).epoch(0)]
    gpu = list(pipeline(dense, device="gpu", **options).epoch(0))
    for (images, masks), expected in zip(gpu, cpu):
        np.testing.assert_array_equal(masks, expected)
        check_aligned(images, masks, fill=0)


@pytest.mark.gpu
def test_gpu_masks_stay_aligned_on_the_full_decode_path(dense, monkeypatch):
    """The crop set-up of nvJPEG older than 13.2 (CUDA 12 wheels), forced: the whole
    image decoded on the GPU and the window cut out by `fn.slice`; the masks, decoded on
    the CPU and cut by the same window, stay the CPU graph's and aligned with the
    images."""
    from dalipipe import codecs

    monkeypatch.setenv(codecs.ROI_FANCY_UPSAMPLING_ENV, "0")
    assert codecs.crop_setup() == codecs.FULL_DECODE
    cpu = [m for _, m in pipeline(dense, augment=True).epoch(0)]
    gpu = list(pipeline(dense, device="gpu", augment=True).epoch(0))
    for (images, masks), expected in zip(gpu, cpu):
        np.testing.assert_array_equal(masks, expected)
        check_aligned(images, masks, fill=0)


def test_a_recipe_with_an_operation_of_unknown_geometry_is_refused(dense, monkeypatch):
    """An operation whose effect on masks is unknown (one a later DALI might add to
    a suite) is refused as the options are checked, naming it and `augment`."""
    from nvidia.dali.auto_aug.core import augmentation

    @augmentation(mag_range=(0, 1))
    def zoom(data, scale):
        return data

    suite = RandAugment.augmentations()
    monkeypatch.setattr(RandAugment, "augmentations", staticmethod(lambda: suite + [zoom]))
    with pytest.raises(ValueError, match=r"operation 'zoom' is not one whose effect on masks"
                                         r".*augment=RandAugment\(.*masks="):
        pipeline(dense, augment=RandAugment())


@pytest.mark.gpu
def test_gpu_recipe_moves_masks_as_the_cpu_graph(dense):
    """A recipe's warps on the GPU (int32 masks, nearest neighbour): the masks hold
    only source ids and the fill value, and the CPU graph's ids on all but a few
    pixels (the two devices may round a warped coordinate apart)."""
    options = dict(augment=RECIPES[0], mask_fill_value=255, shuffle=False)
    cpu = np.concatenate([m for _, m in pipeline(dense, **options).epoch(0)])
    gpu = np.concatenate([m for _, m in pipeline(dense, device="gpu", **options).epoch(0)])
    assert set(np.unique(gpu)) <= set(np.unique(cpu)) | {255}
    assert (gpu == cpu).mean() >= 0.99


def run_job(backend, dense, out):
    pytest.importorskip(backend)
    environ = child_env(KERAS_BACKEND=backend, CUDA_VISIBLE_DEVICES="")
    process = subprocess.run([sys.executable, os.path.join(TESTS, "masks_job.py"), dense,
                              str(out)], env=environ, capture_output=True, text=True,
                             timeout=600)
    assert process.returncode == 0, process.stderr[-4000:]
    with open(out) as f:
        return json.load(f)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["tensorflow", "torch", "jax"])
def test_formats_fit_and_predict_on_the_backend(dense, tmp_path, backend):
    """One process per backend (`masks_job.py`): "tf" (where TensorFlow is installed),
    "pydataset" and "grain" each give the native epoch's batches in Keras's
    structures, for masks, boxes and `output="dict"`; a tiny segmentation model's
    `fit` trains on epoch e's masks in its epoch e and reaches a mean IoU of 0.5 on
    held-out images; `predict` takes images alone; a tiny detector's `fit` receives
    the native epochs' boxes, which enclose the shapes drawn in their images."""
    from test_boxes import check_boxes, pipeline as box_pipeline

    pytest.importorskip("grain")
    result = run_job(backend, dense, tmp_path / "job.json")
    assert result["backend"] == backend

    names = ["tf", "pydataset", "grain"] if importlib.util.find_spec("tensorflow") else \
        ["pydataset", "grain"]
    cases = ["masks", "boxes", "dict_masks", "dict_boxes"]
    formats = result["formats"]
    assert sorted(formats) == sorted(f"{case} {name}" for case in cases for name in names)
    for case, found in formats.items():
        assert found["structured"] and found["equal_to_native"], (case, found)
        assert found["val_steps"] == 1, case
        if "boxes" in case:
            assert found["dtypes"] == ["float32", "float32", "int32"], case
            assert found["unbatched_shapes"] == [[*SIZE, 3], [6, 4], [6]], case
            assert found["class_names"] == list(SHAPES), case
        else:
            assert found["dtypes"] == ["float32", "int32"], case
            assert found["shapes"] == [[4, *SIZE, 3], [4, *SIZE, 1]], case
            assert found["unbatched_shapes"] == [[*SIZE, 3], [*SIZE, 1]], case
            assert found["class_names"] == CLASSES, case

    fit = result["segmentation"]
    epochs = len(fit["losses"])
    assert epochs >= 3 and np.isfinite(fit["losses"]).all()
    assert len(fit["val_losses"]) == epochs and np.isfinite(fit["val_losses"]).all()
    assert fit["trained_on"] == list(range(epochs)), fit["trained_on"]
    assert fit["mean_iou"] >= 0.5, fit
    assert fit["predicted_shape"] == [8, *SIZE, len(CLASSES)] and fit["same_predictions"]

    seen = result["detector"]
    p = box_pipeline(dense, augment=True)
    compared = 0
    for epoch, (boxes, labels) in enumerate(zip(seen["boxes"], seen["labels"])):
        images, want_boxes, want_labels = (np.concatenate(a) for a in zip(*p.epoch(epoch)))
        boxes = np.array(boxes, np.float32).reshape(want_boxes.shape)
        labels = np.array(labels, np.float32).astype(np.int32).reshape(want_labels.shape)
        np.testing.assert_array_equal(boxes, want_boxes)
        np.testing.assert_array_equal(labels, want_labels)
        compared += check_boxes(images, boxes, labels)
    assert len(seen["boxes"]) >= 2 and compared > 10
