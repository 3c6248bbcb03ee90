"""`make_dali_dataset` against `keras.utils.image_dataset_from_directory` on the same
folders: class names, file paths and their order, labels, shapes, dtypes,
cardinality, element structure, pixels, printed lines and errors.

dalipipe runs with its defaults, which are Keras's (`normalization=None`: 0-255 pixels;
`antialias=False`: `tf.image.resize`'s filter), on the CPU and with `check=None`.
Pixels are compared on smooth PNG images (lossless, so decoding is exact): both
loaders resize with half-pixel centers, and the remaining difference is each
library's filter arithmetic. The tolerances are set from what was measured here
(DALI 2.4.0, TensorFlow 2.21.0, on the CPU), with a margin: by default a mean error
of 0.21 grey levels (0.25 for a single image, 0.26 in grayscale) and 0.5 at most;
`crop_to_aspect_ratio` 1.8 mean and 13 at most, where the window's edge meets a
pixel differently; the other filters' figures are next to their cases.
"""

import contextlib
import io
import os
import re

import numpy as np
import pytest
from PIL import Image

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

from dalipipe import make_dali_dataset  # noqa: E402

SIZES = [(40, 30), (33, 47), (64, 64), (25, 60), (52, 31)]
CLASS_FOLDERS = ("cats", "dogs", "owls")
NUM_PER_CLASS = 5
RAW = dict(check=None, device="cpu")


def smooth_image(i, mode="RGB"):
    width, height = SIZES[i % len(SIZES)]
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    rgb = np.stack([x * 255 / width, y * 255 / height,
                    128 + 100 * np.sin((x + y + 7 * i) / 9)], -1)
    image = Image.fromarray(rgb.clip(0, 255).astype(np.uint8))
    if mode == "RGBA":
        alpha = (x * 200 / width + 40).astype(np.uint8)
        image = Image.fromarray(np.dstack([np.asarray(image), alpha]), "RGBA")
    return image


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """3 class folders of 5 smooth PNG images of varied sizes, one of them RGBA."""
    root = tmp_path_factory.mktemp("parity")
    for c, name in enumerate(CLASS_FOLDERS):
        (root / name).mkdir()
        for i in range(NUM_PER_CLASS):
            mode = "RGBA" if i == 2 else "RGB"
            smooth_image(c * NUM_PER_CLASS + i, mode).save(root / name / f"{name}_{i}.png")
    return str(root)


def both(directory, dali_options=None, **options):
    """The two datasets for the same arguments, with what each printed."""
    printed = {}
    with contextlib.redirect_stdout(io.StringIO()) as out:
        want = keras.utils.image_dataset_from_directory(directory, **options)
    printed["keras"] = out.getvalue()
    with contextlib.redirect_stdout(io.StringIO()) as out:
        got = make_dali_dataset(directory, **{**RAW, **(dali_options or {}), **options})
    printed["dalipipe"] = out.getvalue()
    return want, got, printed


def structure(dataset):
    return tf.nest.map_structure(lambda s: (tuple(s.shape.as_list()), s.dtype.name),
                                 dataset.element_spec)


def assert_same_dataset(want, got):
    assert got.class_names == want.class_names
    assert got.file_paths == [os.path.abspath(p) for p in want.file_paths]
    assert int(got.cardinality()) == int(want.cardinality())
    assert structure(got) == structure(want)


def batches(dataset):
    """One pass: a list of elements, each a tuple of NumPy arrays."""
    return [tuple(t.numpy() for t in (e if isinstance(e, tuple) else (e,))) for e in dataset]


def assert_close_pixels(want, got, mean, worst):
    want_batches, got_batches = batches(want), batches(got)
    assert [b[0].shape for b in got_batches] == [b[0].shape for b in want_batches]
    for w, g in zip(want_batches, got_batches):
        for wk, gk in zip(w[1:], g[1:]):  # labels: exact
            np.testing.assert_array_equal(gk, wk)
        error = np.abs(g[0].astype(np.float64) - w[0].astype(np.float64))
        assert error.mean() <= mean, error.mean()
        assert error.max() <= worst, error.max()


@pytest.mark.parametrize("options, mean, worst", [
    (dict(), 0.3, 1),
    (dict(label_mode="categorical"), 0.3, 1),
    (dict(label_mode=None), 0.3, 1),
    (dict(labels=None), 0.3, 1),
    (dict(image_size=24), 0.3, 1),  # measured 0.23 mean, 0.5 at most
    (dict(image_size=(20, 36), crop_to_aspect_ratio=True), 2.5, 16),  # 1.82, 13.2
    (dict(image_size=(20, 36), pad_to_aspect_ratio=True), 0.3, 1),  # 0.13, 0.5
    (dict(data_format="channels_first"), 0.3, 1),
    (dict(color_mode="grayscale"), 0.4, 1),  # 0.26, 0.5
    (dict(color_mode="rgba"), 0.3, 1),  # 0.18, 0.5
    (dict(batch_size=None), 0.4, 1),  # 0.25 for the worst single image
    (dict(batch_size=4), 0.3, 1),
    (dict(labels=list(range(15))), 0.3, 1),
])
def test_same_dataset_unshuffled(folder, options, mean, worst):
    want, got, _ = both(folder, shuffle=False, image_size=options.pop("image_size", (24, 32)),
                        verbose=False, **options)
    assert_same_dataset(want, got)
    assert_close_pixels(want, got, mean, worst)


# Measured (mean, at most): nearest 0.03, 12 (a tie between two neighbours picked
# the other way); bicubic 0.21, 0.8; area 0.37, 2.6; lanczos3 0.22, 1.3; lanczos5
# (DALI's Lanczos-3) 0.26, 2.2; gaussian 0.59, 3.1; mitchellcubic (DALI's cubic) 0.22, 1.2.
@pytest.mark.parametrize("interpolation, mean, worst", [
    ("nearest", 0.1, 16), ("bicubic", 0.3, 2), ("area", 0.5, 4), ("lanczos3", 0.3, 2),
    ("lanczos5", 0.4, 3), ("gaussian", 0.8, 4), ("mitchellcubic", 0.3, 2),
])
def test_every_keras_interpolation(folder, interpolation, mean, worst):
    """DALI's closest filter for each of Keras's names (`dalipipe.graph`).

    Keras's "nearest" keeps the decoded uint8 (`tf.image.resize` keeps the dtype for
    it); dalipipe gives `dtype`, so the comparison asks for uint8.
    """
    dtype = dict(dtype="uint8") if interpolation == "nearest" else {}
    want, got, _ = both(folder, dtype, shuffle=False, image_size=(24, 32), verbose=False,
                        interpolation=interpolation)
    assert_same_dataset(want, got)
    assert_close_pixels(want, got, mean, worst)


@pytest.mark.parametrize("subset", ["training", "validation"])
def test_the_same_seed_gives_the_same_split_and_order(folder, subset):
    want, got, printed = both(folder, validation_split=0.4, subset=subset, seed=5,
                              image_size=(16, 16))
    assert_same_dataset(want, got)
    assert printed["dalipipe"] == printed["keras"]
    assert "Found 15 files belonging to 3 classes." in printed["keras"]


def test_subset_both_shuffles_training_and_keeps_validation_in_file_order(folder):
    (want_train, want_val), (got_train, got_val), printed = both(
        folder, validation_split=0.4, subset="both", seed=8, image_size=(16, 16))
    assert printed["dalipipe"] == printed["keras"]
    assert_same_dataset(want_train, got_train)
    assert_same_dataset(want_val, got_val)
    # Validation in file order: its labels come in the order of its file_paths.
    labels = np.concatenate([b[1] for b in batches(got_val)])
    expected = [CLASS_FOLDERS.index(os.path.basename(os.path.dirname(p)))
                for p in got_val.file_paths]
    assert labels.tolist() == expected
    np.testing.assert_array_equal(labels, np.concatenate([b[1] for b in batches(want_val)]))
    first, second = (np.concatenate([b[1] for b in batches(got_train)]) for _ in range(2))
    assert sorted(first.tolist()) == sorted(second.tolist())


def test_images_only_predict_rows_follow_file_paths(folder):
    want, got, _ = both(folder, labels=None, shuffle=False, image_size=(8, 8), verbose=False)
    assert isinstance(got.element_spec, tf.TensorSpec)  # the tensor itself, no tuple
    model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.GlobalAveragePooling2D()])
    # Measured: 0.28 grey levels at most between the two models' average pixels.
    np.testing.assert_allclose(model.predict(got, verbose=0), model.predict(want, verbose=0),
                               atol=0.5)


def test_follow_links(folder, tmp_path):
    root = tmp_path / "linked"
    (root / "cats").mkdir(parents=True)
    smooth_image(0).save(root / "cats" / "own.png")
    os.symlink(os.path.join(folder, "dogs"), root / "cats" / "linked_dogs")
    (root / "owls").mkdir()
    smooth_image(1).save(root / "owls" / "owl.png")
    for follow_links in (False, True):
        want, got, _ = both(str(root), follow_links=follow_links, shuffle=False,
                            image_size=(8, 8), verbose=False)
        assert got.file_paths == [os.path.abspath(p) for p in want.file_paths]
        assert len(got.file_paths) == (2 + NUM_PER_CLASS if follow_links else 2)


def test_verbose_prints_what_keras_prints(folder):
    for options in (dict(), dict(labels=None)):
        _, _, printed = both(folder, image_size=(8, 8), shuffle=False, **options)
        assert printed["dalipipe"].splitlines()[0] == printed["keras"].splitlines()[0]


def keras_error(directory, **options):
    with pytest.raises(Exception) as info:
        keras.utils.image_dataset_from_directory(directory, **options)
    return info


# What Keras's own messages say, as its users match them.
ERRORS = [
    (dict(labels="other"), "`labels` argument should be"),
    (dict(label_mode="other"), "`label_mode` argument must be"),
    (dict(color_mode="other"), "`color_mode` must be one of"),
    (dict(labels=[0] * 15, class_names=["cats"]), 'only pass `class_names` if `labels="inferred"`'),
    (dict(labels=[0, 1, 0]), "Expected the lengths of `labels` to match the number of files"),
    (dict(class_names=["cats", "wrong"]), "`class_names` passed did not match"),
    (dict(label_mode="binary"), "there must be exactly 2"),
    (dict(validation_split=2), "`validation_split` must be between 0 and 1"),
    (dict(validation_split=0.2, subset="other"),
     '`subset` must be either "training", "validation" or "both"'),
    (dict(validation_split=0.0, subset="training"), "`validation_split` must be set"),
    (dict(subset="training"), "`validation_split` must be set"),
    (dict(validation_split=0.2, subset="training"), "must provide a `seed`"),
    (dict(image_size=(1, 2, 3)), "`image_size`"),
    (dict(interpolation="cubic"), "`interpolation` should be one of"),
    (dict(crop_to_aspect_ratio=True, pad_to_aspect_ratio=True),
     "Only one of `pad_to_aspect_ratio`, `crop_to_aspect_ratio`"),
]


@pytest.mark.parametrize("options, pattern", ERRORS)
def test_errors_are_keras_errors(folder, options, pattern, tmp_path):
    want = keras_error(folder, **options)
    assert re.search(pattern, str(want.value)), str(want.value)
    with pytest.raises(want.type) as got:
        make_dali_dataset(folder, **RAW, verbose=False, **options)
    assert re.search(pattern, str(got.value)), str(got.value)


def test_an_empty_folder_is_the_same_error(tmp_path):
    (tmp_path / "cats").mkdir()
    want = keras_error(str(tmp_path))
    with pytest.raises(want.type, match="No images found"):
        make_dali_dataset(str(tmp_path), **RAW, verbose=False)
