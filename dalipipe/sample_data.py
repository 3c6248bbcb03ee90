"""A labeled JPEG dataset cut from real photographs that installed packages ship.

Nothing is downloaded: the photographs come with scikit-image and scikit-learn. Each
class is one photograph; its images are random crops of it at native resolution, so
a model must look at the picture to tell the classes apart. The crops are about the
size of ImageNet's training JPEGs (which average roughly 400x350 pixels and 110 KB);
`dataset_stats` measures what was written.
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


def make_sample_dataset(directory, *, num_images=600, num_classes=4, seed=0,
                        crop_width=(260, 560), aspect_ratio=(0.65, 1.05), quality=95):
    """Writes `num_images` JPEG crops of `num_classes` photographs into `directory`.

    Layout: `directory/<class>/<class>_<i>.jpg` plus `directory/labels.csv` with the
    columns `path` (relative to `directory`) and `label`. Deterministic for `seed`.

    Args:
        directory: output folder (created; existing files of the same names are
            overwritten).
        num_images: total number of images, spread evenly over the classes.
        num_classes: number of classes, at most the number of installed photographs.
        seed: random seed.
        crop_width: range of the crop width in pixels (uniform), clipped to the
            photograph.
        aspect_ratio: range of crop height / width (uniform), the height clipped to
            the photograph.
        quality: JPEG quality.

    Returns:
        The path of `labels.csv`.
    """
    from PIL import Image

    photos = photograph_paths()
    if not 1 <= num_classes <= len(photos):
        raise ValueError(
            f"`num_classes` must be between 1 and {len(photos)} (the installed sample "
            f"photographs). Received: num_classes={num_classes!r}"
        )
    if num_images < num_classes:
        raise ValueError(
            f"`num_images` must be at least `num_classes`={num_classes}. "
            f"Received: num_images={num_images!r}"
        )
    rng = np.random.default_rng(seed)
    rows = []
    for c, (name, path) in enumerate(photos[:num_classes]):
        photo = Image.open(path).convert("RGB")
        width, height = photo.size
        os.makedirs(os.path.join(directory, name), exist_ok=True)
        count = num_images // num_classes + (c < num_images % num_classes)
        for i in range(count):
            w = min(width, int(rng.uniform(*crop_width)))
            h = min(height, int(w * rng.uniform(*aspect_ratio)))
            x = int(rng.integers(0, width - w + 1))
            y = int(rng.integers(0, height - h + 1))
            relative = f"{name}/{name}_{i:05d}.jpg"
            photo.crop((x, y, x + w, y + h)).save(os.path.join(directory, relative), quality=quality)
            rows.append((relative, name))
    labels_csv = os.path.join(directory, "labels.csv")
    with open(labels_csv, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["path", "label"])
        writer.writerows(rows)
    return labels_csv


def dataset_stats(labels_csv):
    """Mean width, height and file size (bytes) of the images listed in `labels_csv`."""
    from PIL import Image

    root = os.path.dirname(os.path.abspath(labels_csv))
    with open(labels_csv, newline="") as f:
        paths = [os.path.join(root, row["path"]) for row in csv.DictReader(f)]
    sizes = np.array([Image.open(p).size for p in paths], np.float64)
    return {
        "images": len(paths),
        "mean_width": float(sizes[:, 0].mean()),
        "mean_height": float(sizes[:, 1].mean()),
        "mean_bytes": float(np.mean([os.path.getsize(p) for p in paths])),
    }
