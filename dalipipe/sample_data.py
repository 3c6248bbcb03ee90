"""A labeled JPEG dataset cut from real photographs that installed packages ship.

Nothing is downloaded: the photographs come with scikit-image and scikit-learn. Each
class is one photograph; its images are random crops of it at native resolution, so
a model must look at the picture to tell the classes apart. The crops are about the
size of ImageNet's training JPEGs (which average roughly 400x350 pixels and 110 KB);
`dataset_stats` measures what was written. `make_dense_sample_dataset` draws shapes
over such crops, with their segmentation masks and detection boxes.

Where neither package is installed (a GPU machine with PyTorch only, say), each class
is a synthetic photograph-like picture instead (`synthesize_picture`): gradients,
blobs, shapes and a multi-scale texture, deterministic for the seed. The class names
record which source was used: the photographs' names, or `synthetic_0`,
`synthetic_1`, ...

dalipipe writes only into a folder that is absent, empty, or one it made itself: a
folder it made holds a marker file (`MARKER`) with the arguments it was made with, and
is reused as it is when they match, or rewritten (its own files only) when they do
not. Any other folder is refused (`FolderInUseError`) unless `force=True`.
"""

import csv
import importlib.util
import json
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


# The file that marks a folder as made by `make_sample_dataset`: JSON of its arguments.
MARKER = ".dalipipe-sample-data.json"
# The files `make_dense_sample_dataset` writes besides those its labels.csv lists.
DENSE_FILES = ("instances.json", "boxes.csv")


class FolderInUseError(FileExistsError):
    """`make_sample_dataset` was asked to write into a folder of someone else's files.

    Attributes:
        directory: the folder.
        entries: some of the names in it.
    """

    def __init__(self, directory, entries):
        self.directory, self.entries = os.fspath(directory), list(entries)
        super().__init__(self.message("force=True"))

    def message(self, force):
        """The error's text, naming `force` as the way to write anyway."""
        shown = ", ".join(self.entries[:5]) + (", ..." if len(self.entries) > 5 else "")
        return (
            f"{self.directory!r} is not empty and was not made by dalipipe (it holds "
            f"{shown}; no {MARKER}): sample images are written only into a new or empty "
            f"folder, or one dalipipe made. Choose another folder, or pass {force} to write "
            "into it anyway (files of the same names are overwritten)"
        )


def is_sample_folder(directory):
    """Whether `directory` is a folder that `make_sample_dataset` made (has `MARKER`)."""
    return os.path.isfile(os.path.join(directory, MARKER))


def is_free_folder(directory):
    """Whether `make_sample_dataset` may write into `directory` without `force`: it is
    absent, empty, or made by dalipipe."""
    return (not os.path.exists(directory)
            or (os.path.isdir(directory) and not os.listdir(directory))
            or is_sample_folder(directory))


def _read_marker(directory):
    try:
        with open(os.path.join(directory, MARKER)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _listed_files(directory):
    """The files that `directory/labels.csv` lists (its `path` and `mask` columns), as
    paths, or [] without one."""
    try:
        with open(os.path.join(directory, "labels.csv"), newline="") as f:
            return [os.path.join(directory, row[column]) for row in csv.DictReader(f)
                    for column in ("path", "mask") if row.get(column)]
    except (OSError, KeyError, csv.Error):
        return []


def _remove_own_files(directory):
    """Removes what an earlier `make_sample_dataset` or `make_dense_sample_dataset`
    wrote into `directory` (the files its labels.csv lists and `DENSE_FILES`, then
    their folders if left empty), and nothing else."""
    top = os.path.realpath(directory) + os.sep
    listed = [p for p in _listed_files(directory) if os.path.realpath(p).startswith(top)]
    listed += [os.path.join(directory, name) for name in DENSE_FILES]
    for path in listed:
        if os.path.isfile(path):
            os.remove(path)
    for folder in sorted({os.path.dirname(p) for p in listed}, reverse=True):
        if os.path.abspath(folder) != os.path.abspath(directory) and os.path.isdir(folder) \
                and not os.listdir(folder):
            os.rmdir(folder)


def make_sample_dataset(directory, *, num_images=600, num_classes=4, seed=0,
                        crop_width=(260, 560), aspect_ratio=(0.65, 1.05), quality=95,
                        force=False):
    """Writes `num_images` JPEG crops of `num_classes` pictures into `directory`.

    Layout: `directory/<class>/<class>_<i>.jpg` plus `directory/labels.csv` with the
    columns `path` (relative to `directory`) and `label`, and the marker `MARKER`.
    Deterministic for `seed`.

    `directory` must be absent, empty, or made by this function (it holds `MARKER`),
    unless `force`. A folder it made is kept as it is when it was made with the same
    arguments and still holds every file its labels.csv lists; otherwise the files it
    wrote there before are removed and new ones written.
    Each class is an installed photograph (`photograph_paths`), or, where none is
    installed, a synthetic picture (`synthesize_picture`), and then the classes are
    named `synthetic_<c>`.

    Args:
        directory: output folder (created if absent).
        num_images: total number of images, spread evenly over the classes.
        num_classes: number of classes, at most the number of installed photographs
            (any number of synthetic ones).
        seed: random seed.
        crop_width: range of the crop width in pixels (uniform), clipped to the
            picture.
        aspect_ratio: range of crop height / width (uniform), the height clipped to
            the picture.
        quality: JPEG quality.
        force: write into `directory` even when it holds files dalipipe did not
            write (files of the same names, labels.csv included, are overwritten).
            Defaults to False.

    Returns:
        The path of `labels.csv`.

    Raises:
        FolderInUseError: (a `FileExistsError`) when `directory` is not empty, was
            not made by dalipipe, and `force` is False.
        ValueError: for a `num_classes` or `num_images` out of range.
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
    directory = os.fspath(directory)
    labels_csv = os.path.join(directory, "labels.csv")
    arguments = dict(num_images=num_images, num_classes=num_classes, seed=seed,
                     crop_width=list(crop_width), aspect_ratio=list(aspect_ratio),
                     quality=quality, photographs=[name for name, _ in photograph_paths()])
    free, kept = _claim_folder(directory, arguments, force, num_images)
    if kept:
        return labels_csv
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
    with open(labels_csv, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["path", "label"])
        writer.writerows(rows)
    _mark(directory, arguments, free)
    return labels_csv


def _claim_folder(directory, arguments, force, num_files):
    """Whether `directory` is free (`is_free_folder`), and whether it is kept as it
    is: made with the same `arguments`, holding the `num_files` files its labels.csv
    lists. A folder dalipipe made with other arguments loses its own files.

    Raises:
        FolderInUseError: for a folder of the user's, unless `force`.
        FileExistsError: where `directory` is a file.
    """
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise FileExistsError(f"`directory` must be a folder. Received the file "
                              f"directory={directory!r}")
    made_here, free = is_sample_folder(directory), is_free_folder(directory)
    if not force and not free:
        raise FolderInUseError(directory, sorted(os.listdir(directory)))
    if made_here:
        listed = _listed_files(directory)
        if (_read_marker(directory) == arguments and len(listed) == num_files
                and all(os.path.isfile(p) for p in listed)):
            return free, True
        _remove_own_files(directory)
    return free, False


def _mark(directory, arguments, free):
    if free:  # a folder of the user's, written into with force, stays theirs
        with open(os.path.join(directory, MARKER), "w") as f:
            json.dump(arguments, f, indent=1)


def make_dense_sample_dataset(directory, *, num_images=60, seed=0, crop_width=(160, 320),
                              aspect_ratio=(0.65, 1.05), force=False):
    """Writes `num_images` PNG crops of the sample pictures with shapes drawn over
    them, and their segmentation masks and detection boxes, into `directory`.

    The shapes' pixels define both (`dalipipe.annotations.sample`, whose
    `write_dense_sample` gives the layout: `images/`, `masks/`, labels.csv,
    instances.json, boxes.csv). The pictures (every installed photograph, or 4
    synthetic ones), the folder rules and the marker are `make_sample_dataset`'s.
    Deterministic for `seed`.

    Args:
        directory: output folder (created if absent).
        num_images: number of images.
        seed: random seed.
        crop_width: range of the crop width in pixels (uniform), at least 32.
        aspect_ratio: range of crop height / width (uniform).
        force: as in `make_sample_dataset`. Defaults to False.

    Returns:
        The path of `labels.csv`.

    Raises:
        FolderInUseError: as `make_sample_dataset`.
        ValueError: for `num_images` below 1.
    """
    from dalipipe.annotations.sample import write_dense_sample

    if isinstance(num_images, bool) or not isinstance(num_images, int) or num_images < 1:
        raise ValueError(
            f"`num_images` must be a positive integer. Received: num_images={num_images!r}"
        )
    directory = os.fspath(directory)
    arguments = dict(dense=True, num_images=num_images, seed=seed, crop_width=list(crop_width),
                     aspect_ratio=list(aspect_ratio),
                     photographs=[name for name, _ in photograph_paths()])
    free, kept = _claim_folder(directory, arguments, force, 2 * num_images)
    if not kept:
        os.makedirs(directory, exist_ok=True)
        pictures = _class_pictures(len(photograph_paths()) or 4, seed)
        write_dense_sample(directory, pictures, num_images=num_images,
                           rng=np.random.default_rng(seed), crop_width=crop_width,
                           aspect_ratio=aspect_ratio)
        _mark(directory, arguments, free)
    return os.path.join(directory, "labels.csv")


def sample_data_unless_in_use(directory, **kwargs):
    """`make_sample_dataset(directory, **kwargs)` where `directory` is absent, empty or
    made by dalipipe (`is_free_folder`); any other folder is left as it is.

    Returns:
        The path of the labels.csv written or reused, or None for a folder of the
        user's, which is to be read as it is.
    """
    if not is_free_folder(directory):
        return None
    return make_sample_dataset(directory, **kwargs)


def dataset_stats(labels_csv):
    """`image_stats` of the images that a sample dataset's `labels_csv` lists, with
    its labels as the class names (`synthetic_<c>` for synthetic pictures)."""
    root = os.path.dirname(os.path.abspath(labels_csv))
    with open(labels_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    return image_stats([os.path.join(root, row["path"]) for row in rows],
                       {row["label"] for row in rows if row.get("label")})


def image_stats(paths, class_names=()):
    """Mean width, height and file size (bytes) of the images at `paths`, which PIL
    opens; files it cannot open count for the bytes only.

    Returns:
        A dict: `images`, `mean_width`, `mean_height`, `mean_bytes`, and `classes`,
        the sorted `class_names`.
    """
    from PIL import Image

    sizes = []
    for path in paths:
        try:
            with Image.open(path) as image:
                sizes.append(image.size)
        except (OSError, ValueError):
            pass
    sizes = np.array(sizes or [(0, 0)], np.float64)
    return {
        "images": len(paths),
        "mean_width": float(sizes[:, 0].mean()),
        "mean_height": float(sizes[:, 1].mean()),
        "mean_bytes": float(np.mean([os.path.getsize(p) for p in paths])) if paths else 0.0,
        "classes": sorted(class_names),
    }
