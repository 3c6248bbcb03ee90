"""Fixtures that write real image files, and the `gpu` marker's skip rule.

Nothing here imports TensorFlow: the `gpu` tests run on machines without it.
"""

import os
import shutil

import numpy as np
import pytest
from PIL import Image

from dalipipe.pipeline import dali_gpu_count

NUM_INDEXED = 29  # not a multiple of the batch sizes used in the tests
CLASSES = ("blue", "green", "red")


def pytest_configure(config):
    # Pre-flight check results go to a fresh cache, not the user's.
    if "DALIPIPE_CACHE_DIR" not in os.environ:
        cache = os.path.join(str(config.rootpath), ".pytest_cache", "dalipipe")
        shutil.rmtree(cache, ignore_errors=True)
        os.environ["DALIPIPE_CACHE_DIR"] = cache


def pytest_collection_modifyitems(config, items):
    if dali_gpu_count() > 0:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU that DALI can use")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def indexed_color(i):
    """The solid RGB colour of indexed image `i`; `i == round(R / 8)`."""
    return (8 * i, 255 - 8 * i, (37 * i) % 256)


def index_of(image):
    """Recovers the index from an unnormalized HWC image of `indexed_color`."""
    return int(round(float(np.mean(image[..., 0])) / 8))


@pytest.fixture(scope="session")
def indexed_dir(tmp_path_factory):
    """`NUM_INDEXED` solid-colour PNGs of varied sizes in 3 class folders.

    Image `i` has colour `indexed_color(i)`, lies in class `CLASSES[i % 3]` and is
    named so that the sorted order of the paths is the order of `i`.
    """
    root = tmp_path_factory.mktemp("indexed")
    for i in range(NUM_INDEXED):
        folder = root / CLASSES[i % 3]
        folder.mkdir(exist_ok=True)
        size = (20 + 3 * (i % 5), 16 + 2 * (i % 7))
        Image.new("RGB", size, indexed_color(i)).save(folder / f"img_{i:03d}.png")
    return str(root)


def indexed_paths(indexed_dir):
    """File paths of `indexed_dir` in index order, with their int labels."""
    paths = [os.path.join(indexed_dir, CLASSES[i % 3], f"img_{i:03d}.png") for i in range(NUM_INDEXED)]
    return paths, [i % 3 for i in range(NUM_INDEXED)]


@pytest.fixture(scope="session")
def color_dir(tmp_path_factory):
    """90 noisy JPEGs (and a few PNGs) whose class is their dominant colour."""
    root = tmp_path_factory.mktemp("colors")
    rng = np.random.default_rng(0)
    for c, name in enumerate(CLASSES):
        (root / name).mkdir()
        for i in range(30):
            h, w = rng.integers(24, 64, size=2)
            pixels = rng.integers(0, 90, size=(h, w, 3))
            pixels[..., 2 - c] += 150  # blue, green, red dominant
            image = Image.fromarray(pixels.clip(0, 255).astype(np.uint8))
            suffix = "png" if i % 10 == 0 else "jpg"
            image.save(root / name / f"{name}_{i:02d}.{suffix}")
    return str(root)


@pytest.fixture(scope="session")
def photo_path(tmp_path_factory):
    """A smooth 120x160 RGB gradient photo saved as PNG (lossless), for pixel checks."""
    y, x = np.mgrid[0:120, 0:160]
    pixels = np.stack([x * 255 / 159, y * 255 / 119, (x + y) * 255 / 278], axis=-1)
    pixels += 20 * np.sin(x / 7.0)[..., None]
    path = tmp_path_factory.mktemp("photo") / "gradient.png"
    Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(path)
    return str(path)


NUM_TAGGED = 121  # 15 global batches of 8 and one sample: the last step is padding


def tag_of(image):
    """The index of a `tagged_dir` image, from an unnormalized HWC image of it."""
    return int(round(float(np.mean(image[-2:])) / 2))


@pytest.fixture(scope="session")
def tagged_dir(tmp_path_factory):
    """`NUM_TAGGED` PNGs, each identifiable from its pixels and learnable by class.

    Image `i`: top half the colour of class `CLASSES[i % 3]` (blue, green, red),
    bottom half grey `2 * i` (see `tag_of`).
    """
    root = tmp_path_factory.mktemp("tagged")
    for i in range(NUM_TAGGED):
        c = i % 3
        pixels = np.full((12, 12, 3), 2 * i, np.uint8)
        pixels[:6] = 30
        pixels[:6, :, 2 - c] = 220
        folder = root / CLASSES[c]
        folder.mkdir(exist_ok=True)
        Image.fromarray(pixels).save(folder / f"tag_{i:03d}.png")
    return str(root)


@pytest.fixture(scope="session")
def tagged_tfrecords(tagged_dir, tmp_path_factory):
    """`tagged_dir` converted to 3 TFRecord files; returns their glob pattern."""
    from dalipipe import sources, tfrecord

    index = sources.index_source(tagged_dir)
    out = tmp_path_factory.mktemp("tagged_tfrecords")
    tfrecord.write_tfrecords(index.file_paths, index.labels, index.class_names, str(out),
                             num_shards=3)
    return str(out / "train-*.tfrecord")
