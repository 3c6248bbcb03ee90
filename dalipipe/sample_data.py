"""A labeled JPEG dataset cut from real photographs that installed packages ship.

Nothing is downloaded: the photographs come with scikit-image and scikit-learn. Each
class is one photograph; its images are random crops of it at native resolution, so
a model must look at the picture to tell the classes apart. The crops are about the
size of ImageNet's training JPEGs (which average roughly 400x350 pixels and 110 KB);
`dataset_stats` measures what was written.

Where neither package is installed (a GPU machine with PyTorch only, say), each class
is a synthetic photograph-like picture instead (`synthesize_picture`): gradients,
blobs, shapes and a multi-scale texture, deterministic for the seed. The class names
record which source was used: the photographs' names, or `synthetic_0`,
`synthetic_1`, ...
"""

import csv
import importlib.util
import os

import numpy as np

# (package, path inside the package, class name): colour photographs.
PHOTOGRAPHS = (
    ("skimage", "data/astronaut.png", "astronaut"),
    ("skimage", "data/chelsea.png", "chelsea"),
    ("skimage", "data/coffee.png", "coffee"),
    ("skimage", "data/rocket.jpg", "rocket"),
    ("sklearn", "datasets/images/china.jpg", "china"),
    ("sklearn", "datasets/images/flower.jpg", "flower"),
    ("skimage", "data/motorcycle_left.png", "motorcycle"),
    ("skimage", "data/retina.jpg", "retina"),
    ("skimage", "data/hubble_deep_field.jpg", "hubble"),
    ("skimage", "data/ihc.png", "ihc"),
)


def photograph_paths():
    """(class name, file path) of each shipped photograph that is installed."""
    found = []
    for package, relative, name in PHOTOGRAPHS:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            continue
        path = os.path.join(list(spec.submodule_search_locations)[0], relative)
        if os.path.isfile(path):
            found.append((name, path))
    return found


# Synthetic class pictures, used where no photograph is installed: their size, and
# the standard deviation of the texture, which sets the bytes per JPEG crop.
SYNTHETIC_SIZE = (1200, 900)
TEXTURE_AMPLITUDE = 10.0


def _upsample(array, width, height, resample):
    from PIL import Image

    return np.stack(
        [np.asarray(Image.fromarray(np.ascontiguousarray(array[..., c]), mode="F")
                    .resize((width, height), resample))
         for c in range(array.shape[-1])],
        axis=-1,
    )


def synthesize_picture(width, height, rng):
    """A photograph-like RGB picture: gradients, blobs, shapes and a multi-scale texture.

    Args:
        width, height: its size in pixels.
        rng: a `numpy.random.Generator`; the picture depends on its state only.

    Returns:
        A PIL image of mode "RGB".
    """
    from PIL import Image, ImageDraw, ImageFilter

    y = np.linspace(0, 1, height, dtype=np.float32)[:, None, None]
    x = np.linspace(0, 1, width, dtype=np.float32)[None, :, None]
    image = (rng.uniform(40, 215, 3).astype(np.float32)
             + rng.uniform(-100, 100, 3).astype(np.float32) * x
             + rng.uniform(-100, 100, 3).astype(np.float32) * y)
    blobs = rng.uniform(-60, 60, (int(rng.integers(3, 9)), int(rng.integers(3, 9)), 3))
    image = image + _upsample(blobs.astype(np.float32), width, height, Image.BICUBIC)
    picture = Image.fromarray(np.clip(image, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(picture)
    for _ in range(int(rng.integers(4, 12))):
        x0, x1 = sorted(int(v) for v in rng.integers(0, width, 2))
        y0, y1 = sorted(int(v) for v in rng.integers(0, height, 2))
        color = tuple(int(v) for v in rng.integers(0, 256, 3))
        kind = int(rng.integers(3))
        if kind == 0:
            draw.ellipse((x0, y0, x1, y1), fill=color)
        elif kind == 1:
            draw.rectangle((x0, y0, x1, y1), fill=color)
        else:
            draw.polygon([(int(rng.integers(0, width)), int(rng.integers(0, height)))
                          for _ in range(3)], fill=color)
    pixels = np.asarray(picture.filter(ImageFilter.GaussianBlur(1.0))).astype(np.float32)
    for scale in (1, 2, 4, 8):  # grey fine grain, coloured coarser texture
        layer = rng.normal(0, TEXTURE_AMPLITUDE,
                           (height // scale + 1, width // scale + 1, 1 if scale == 1 else 3))
        layer = layer.astype(np.float32)
        pixels += layer[:height, :width] if scale == 1 else _upsample(layer, width, height,
                                                                      Image.BILINEAR)
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def _class_pictures(num_classes, seed):
    """(class name, PIL image opener) of each class: the installed photographs, or
    synthetic pictures when there are none."""
    from PIL import Image

    photos = photograph_paths()
    if not photos:
        return [(f"synthetic_{c}", lambda c=c: synthesize_picture(
                    *SYNTHETIC_SIZE, np.random.default_rng([seed, c])))
                for c in range(num_classes)]
    if num_classes > len(photos):
        raise ValueError(
            f"`num_classes` must be between 1 and {len(photos)} (the installed sample "
            f"photographs). Received: num_classes={num_classes!r}"
        )
    return [(name, lambda path=path: Image.open(path).convert("RGB"))
            for name, path in photos[:num_classes]]


def make_sample_dataset(directory, *, num_images=600, num_classes=4, seed=0,
                        crop_width=(260, 560), aspect_ratio=(0.65, 1.05), quality=95):
    """Writes `num_images` JPEG crops of `num_classes` pictures into `directory`.

    Layout: `directory/<class>/<class>_<i>.jpg` plus `directory/labels.csv` with the
    columns `path` (relative to `directory`) and `label`. Deterministic for `seed`.
    Each class is an installed photograph (`photograph_paths`), or, where none is
    installed, a synthetic picture (`synthesize_picture`), and then the classes are
    named `synthetic_<c>`.

    Args:
        directory: output folder (created; existing files of the same names are
            overwritten).
        num_images: total number of images, spread evenly over the classes.
        num_classes: number of classes, at most the number of installed photographs
            (any number of synthetic ones).
        seed: random seed.
        crop_width: range of the crop width in pixels (uniform), clipped to the
            picture.
        aspect_ratio: range of crop height / width (uniform), the height clipped to
            the picture.
        quality: JPEG quality.

    Returns:
        The path of `labels.csv`.
    """
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(
            f"`num_classes` must be a positive integer. Received: num_classes={num_classes!r}"
        )
    if num_images < num_classes:
        raise ValueError(
            f"`num_images` must be at least `num_classes`={num_classes}. "
            f"Received: num_images={num_images!r}"
        )
    pictures = _class_pictures(num_classes, seed)
    rng = np.random.default_rng(seed)
    rows = []
    for c, (name, open_picture) in enumerate(pictures):
        picture = open_picture()
        width, height = picture.size
        os.makedirs(os.path.join(directory, name), exist_ok=True)
        count = num_images // num_classes + (c < num_images % num_classes)
        for i in range(count):
            w = min(width, int(rng.uniform(*crop_width)))
            h = min(height, int(w * rng.uniform(*aspect_ratio)))
            x = int(rng.integers(0, width - w + 1))
            y = int(rng.integers(0, height - h + 1))
            relative = f"{name}/{name}_{i:05d}.jpg"
            picture.crop((x, y, x + w, y + h)).save(os.path.join(directory, relative),
                                                    quality=quality)
            rows.append((relative, name))
    labels_csv = os.path.join(directory, "labels.csv")
    with open(labels_csv, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["path", "label"])
        writer.writerows(rows)
    return labels_csv


def dataset_stats(labels_csv):
    """Mean width, height and file size (bytes) of the images listed in `labels_csv`,
    and the class names (`synthetic_<c>` for synthetic pictures)."""
    from PIL import Image

    root = os.path.dirname(os.path.abspath(labels_csv))
    with open(labels_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    paths = [os.path.join(root, row["path"]) for row in rows]
    sizes = np.array([Image.open(p).size for p in paths], np.float64)
    return {
        "images": len(paths),
        "mean_width": float(sizes[:, 0].mean()),
        "mean_height": float(sizes[:, 1].mean()),
        "mean_bytes": float(np.mean([os.path.getsize(p) for p in paths])),
        "classes": sorted({row["label"] for row in rows if row.get("label")}),
    }
