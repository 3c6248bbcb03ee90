"""`dalipipe.graph` on the CPU: what each option that changes the graph does to the
outputs, against NumPy and PIL references on the fixtures' images."""

import math

import numpy as np
import pytest
from PIL import Image

from helpers import NUM_INDEXED, index_of, indexed_color, indexed_paths
from dalipipe import make_dali_pipeline, sampling
from dalipipe.graph import INTERPOLATION_FILTERS


def outputs(source, **options):
    """The outputs of one native epoch, concatenated output by output."""
    options = {"batch_size": 8, "shuffle": False, "device": "cpu", "verbose": False, **options}
    pipe = make_dali_pipeline(source, **options)
    batches = list(pipe.epoch())
    return [np.concatenate([b[k] for b in batches]) for k in range(len(batches[0]))]


def indexed(indexed_dir, **options):
    """`outputs` of the indexed images in index order, with their labels."""
    paths, labels = indexed_paths(indexed_dir)
    return outputs(paths, labels=labels, **options)


def board(tmp_path, side=128):
    """A 1-pixel black and white checkerboard PNG."""
    cells = (np.indices((side, side)).sum(0) % 2 * 255).astype(np.uint8)
    path = str(tmp_path / "board.png")
    Image.fromarray(np.stack([cells] * 3, -1)).save(path)
    return path


def test_pixels_match_pil_reference(photo_path):
    """Resize + ImageNet normalization against PIL's antialiased bilinear resize."""
    (images,) = outputs([photo_path], labels=None, image_size=(48, 64), batch_size=1,
                        normalization="imagenet", antialias=True)
    assert images.shape == (1, 48, 64, 3) and images.dtype == np.float32
    reference = np.asarray(Image.open(photo_path).resize((64, 48), Image.BILINEAR), np.float32)
    mean = np.array([0.485, 0.456, 0.406]) * 255
    std = np.array([0.229, 0.224, 0.225]) * 255
    error = np.abs(images[0] - (reference - mean) / std) * std  # 0-255 units
    # Both filters antialias, with slightly different kernels and rounding. Measured
    # here: 0.16 grey levels mean, 1.0 at worst. Stated tolerance: 0.5 mean, 3 max.
    assert error.mean() < 0.5, error.mean()
    assert error.max() < 3, error.max()


@pytest.mark.parametrize("normalization, mean, std", [
    ("imagenet", [0.485 * 255, 0.456 * 255, 0.406 * 255], [0.229 * 255, 0.224 * 255, 0.225 * 255]),
    ("unit", [0, 0, 0], [255, 255, 255]),
    ("symmetric", [127.5] * 3, [127.5] * 3),
])
def test_normalization_is_per_channel_mean_and_std_on_the_0_255_scale(indexed_dir,
                                                                       normalization, mean, std):
    raw, _ = indexed(indexed_dir, image_size=(4, 4), normalization=None)
    images, _ = indexed(indexed_dir, image_size=(4, 4), normalization=normalization)
    np.testing.assert_allclose(images, (raw - np.array(mean)) / np.array(std), atol=1e-4)


def test_grayscale_is_pil_s_luma_normalized_by_the_mean_statistics(indexed_dir):
    raw, _ = indexed(indexed_dir, image_size=(4, 4), color_mode="grayscale",
                     normalization=None, dtype="uint8")
    assert raw.shape == (NUM_INDEXED, 4, 4, 1)
    paths, _ = indexed_paths(indexed_dir)
    luma = [np.asarray(Image.open(p).convert("L")).mean() for p in paths]
    np.testing.assert_allclose(raw.reshape(NUM_INDEXED, -1).mean(1), luma, atol=1)
    images, _ = indexed(indexed_dir, image_size=(4, 4), color_mode="grayscale",
                        normalization="imagenet")
    mean, std = (0.485 + 0.456 + 0.406) / 3 * 255, (0.229 + 0.224 + 0.225) / 3 * 255
    np.testing.assert_allclose(images, (raw - mean) / std, atol=1e-4)


@pytest.mark.parametrize("normalization, alpha", [
    ("imagenet", [0.0, 100 / 255, 1.0]), ("unit", [0.0, 100 / 255, 1.0]),
    ("symmetric", [-1.0, 100 / 127.5 - 1, 1.0]), (None, [0.0, 100.0, 255.0]),
])
def test_rgba_keeps_a_png_s_alpha_and_makes_others_opaque(tmp_path, normalization, alpha):
    paths = []
    for i, a in enumerate((0, 100)):
        path = str(tmp_path / f"{i}.png")
        Image.new("RGBA", (5, 6), (200, 40, 10, a)).save(path)
        paths.append(path)
    paths.append(str(tmp_path / "rgb.png"))
    Image.new("RGB", (5, 6), (200, 40, 10)).save(paths[-1])
    (images,) = outputs(paths, labels=None, image_size=(3, 3), color_mode="rgba",
                        normalization=normalization)
    assert images.shape == (3, 3, 3, 4)
    np.testing.assert_allclose(images[..., 3].reshape(3, -1).mean(1), alpha, atol=1e-4)


def test_interpolation_names_map_to_dali_filters():
    assert set(INTERPOLATION_FILTERS) == {"bilinear", "nearest", "bicubic", "area", "lanczos3",
                                          "lanczos5", "gaussian", "mitchellcubic"}
    # DALI has no area, Lanczos-5 or Mitchell filter: the nearest ones stand in.
    assert INTERPOLATION_FILTERS["area"] == ("INTERP_LINEAR", True)
    assert INTERPOLATION_FILTERS["lanczos5"] == INTERPOLATION_FILTERS["lanczos3"]
    assert INTERPOLATION_FILTERS["mitchellcubic"] == INTERPOLATION_FILTERS["bicubic"]


def test_nearest_upscaling_repeats_pixels(tmp_path):
    pixels = np.random.default_rng(0).integers(0, 256, (4, 5, 3), np.uint8)
    path = str(tmp_path / "small.png")
    Image.fromarray(pixels).save(path)
    (images,) = outputs([path], labels=None, image_size=(12, 15), interpolation="nearest",
                        normalization=None, dtype="uint8")
    np.testing.assert_array_equal(images[0], pixels.repeat(3, 0).repeat(3, 1))


def test_each_filter_gives_its_own_pixels_and_aliases_give_the_same(photo_path):
    got = {name: outputs([photo_path], labels=None, image_size=(37, 29), interpolation=name,
                         antialias=False, normalization=None)[0]
           for name in INTERPOLATION_FILTERS}
    np.testing.assert_array_equal(got["lanczos5"], got["lanczos3"])
    np.testing.assert_array_equal(got["mitchellcubic"], got["bicubic"])
    distinct = ("bilinear", "nearest", "bicubic", "area", "lanczos3", "gaussian")
    for i, a in enumerate(distinct):
        for b in distinct[i + 1:]:
            assert not np.array_equal(got[a], got[b]), (a, b)


def test_antialias_false_aliases_fine_detail_and_area_always_antialiases(tmp_path):
    """A 1-pixel checkerboard shrunk to 15x15: grey with antialiasing, speckled without."""
    path = board(tmp_path)
    spread = {}
    for interpolation, antialias in (("bilinear", True), ("bilinear", False), ("area", False)):
        (images,) = outputs([path], labels=None, image_size=(15, 15), batch_size=1,
                            normalization=None, antialias=antialias, interpolation=interpolation)
        spread[interpolation, antialias] = float(images.std())
    assert spread["bilinear", True] < 5 < spread["bilinear", False], spread
    assert spread["area", False] < 5, spread


def test_central_fraction_is_the_imagenet_eval_transform(photo_path):
    """Shorter side to 64, center crop 56 (0.875), against PIL's exact box resize."""
    (images,) = outputs([photo_path], labels=None, image_size=(56, 56), batch_size=1,
                        crop_to_aspect_ratio=True, central_fraction=0.875, normalization=None,
                        antialias=True)
    side = 120 * 0.875  # of the 160x120 photo: the central 105x105 square
    box = ((160 - side) / 2, (120 - side) / 2, (160 + side) / 2, (120 + side) / 2)
    reference = np.asarray(Image.open(photo_path).resize((56, 56), Image.BILINEAR, box=box),
                           np.float32)
    error = np.abs(images[0] - reference)
    # Measured here: 0.10 grey levels mean. Stated tolerance: 0.3 (half a pixel of
    # offset, as resize-then-crop rounding gives, costs about 1).
    assert error.mean() < 0.3, error.mean()


@pytest.mark.parametrize("options, box", [
    # The largest central window of the output's aspect ratio (1:2 of a 160x120 photo).
    (dict(crop_to_aspect_ratio=True), (50, 0, 110, 120)),
    # The central half of the whole frame, stretched.
    (dict(central_fraction=0.5), (40, 30, 120, 90)),
])
def test_central_windows_against_pil_box_resize(photo_path, options, box):
    (images,) = outputs([photo_path], labels=None, image_size=(40, 20), batch_size=1,
                        normalization=None, antialias=True, **options)
    reference = np.asarray(Image.open(photo_path).resize((20, 40), Image.BILINEAR, box=box),
                           np.float32)
    assert np.abs(images[0] - reference).mean() < 0.3


def letterbox(height, width, image_h, image_w):
    """The rows and columns that `tf.image.resize_with_pad` fills with the image, in its
    float32 arithmetic (32 / (32 / 13) is 12.999999 there: 12 columns, not 13)."""
    f32 = np.float32
    ratio = max(f32(image_w) / f32(width), f32(image_h) / f32(height))
    fit_h, fit_w = f32(image_h) / ratio, f32(image_w) / ratio
    top, left = math.floor((height - fit_h) / 2), math.floor((width - fit_w) / 2)
    return top, top + math.floor(fit_h), left, left + math.floor(fit_w)


def test_pad_to_aspect_ratio_centres_the_whole_image_like_resize_with_pad(indexed_dir):
    images, _ = indexed(indexed_dir, image_size=(10, 13), pad_to_aspect_ratio=True,
                        normalization=None, dtype="uint8")
    paths, _ = indexed_paths(indexed_dir)
    shapes = set()
    for image, path in zip(images, paths):
        i = index_of(image[4:6, 5:7])  # the centre is always image
        w, h = Image.open(path).size
        top, bottom, left, right = letterbox(10, 13, h, w)
        shapes.add((top, bottom, left, right))
        filled = image[..., 1] > 0  # green is 255 - 8 i > 0
        rows, cols = np.nonzero(filled.any(1))[0], np.nonzero(filled.any(0))[0]
        assert (rows[0], rows[-1] + 1, cols[0], cols[-1] + 1) == (top, bottom, left, right), i
        inside = image[top:bottom, left:right].reshape(-1, 3)
        np.testing.assert_allclose(inside.mean(0), indexed_color(i), atol=1)
        assert image[~filled].max(initial=0) == 0  # zero padding
    assert len(shapes) > 2  # the fixture's sizes give several letterboxes, wide and tall


def test_augment_crops_the_window_of_the_random_row_and_flips(photo_path):
    pipe = make_dali_pipeline([photo_path], labels=None, image_size=(24, 24), batch_size=1,
                              augment=True, normalization=None, device="cpu", verbose=False,
                              antialias=True)
    row = np.array([[0.3, 0.8, 0.25, 0.6, 0.9]], np.float32)
    x, y, w, h = sampling.random_resized_crop_window(np.float32(120), np.float32(160), row[0])
    reference = np.asarray(Image.open(photo_path).resize(
        (24, 24), Image.BILINEAR, box=(float(x), float(y), float(x + w), float(y + h))), np.float32)
    ((images,),) = list(pipe.run(np.array([0]), row))
    # The decoder slices whole pixels: the window's fraction of a pixel shifts the
    # output by up to half a pixel of the source, a grey level or so here.
    assert np.abs(images[0] - reference).mean() < 1.5
    row[0, 4] = 0.2
    ((flipped,),) = list(pipe.run(np.array([0]), row))
    np.testing.assert_array_equal(flipped[0], images[0][:, ::-1])


@pytest.mark.parametrize("options, shape, dtype", [
    (dict(), (5, 7, 3), np.float32),
    (dict(data_format="channels_first"), (3, 5, 7), np.float32),
    (dict(dtype="float16"), (5, 7, 3), np.float16),
])
def test_layout_and_dtype(indexed_dir, options, shape, dtype):
    reference, _ = indexed(indexed_dir, image_size=(5, 7))
    images, _ = indexed(indexed_dir, image_size=(5, 7), **options)
    assert images.shape[1:] == shape and images.dtype == dtype
    if options.get("data_format") == "channels_first":
        images = images.transpose(0, 2, 3, 1)
    np.testing.assert_allclose(images.astype(np.float32), reference, atol=2e-3, rtol=1e-3)


def test_label_modes(indexed_dir):
    _, labels = indexed_paths(indexed_dir)
    _, ints = indexed(indexed_dir, image_size=(2, 2))
    _, onehot = indexed(indexed_dir, image_size=(2, 2), label_mode="categorical")
    paths, _ = indexed_paths(indexed_dir)
    _, binary = outputs(paths, labels=[v % 2 for v in labels], image_size=(2, 2),
                        label_mode="binary")
    assert ints.dtype == np.int32 and ints.tolist() == labels
    assert onehot.dtype == np.float32 and onehot.tolist() == np.eye(3)[labels].tolist()
    assert binary.dtype == np.float32 and binary.tolist() == [[v % 2] for v in labels]
    assert len(outputs(indexed_dir, image_size=(2, 2), label_mode=None)) == 1
