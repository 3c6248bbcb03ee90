"""The data of the dense workloads of `dalipipe bench`: images with masks and boxes, laid
out as Oxford-IIIT Pets lays them out (the data of Keras's segmentation example).

`dense_data(directory, num_images=...)` makes `dalipipe sample-data --masks-and-boxes`
there (`make_dense_sample_dataset`: shapes drawn over the shipped photographs, crops of
the size of the classification workloads' images), then, beside it:

```
directory/jpeg/<stem>.jpg          the images as JPEGs (quality 95), as Pets' images are
directory/trimaps/<stem>.png       the masks as greyscale PNGs of their class ids (0-3),
                                   as Pets' trimaps are greyscale PNGs of theirs
directory/jpeg-instances.json      the COCO boxes of instances.json, named for jpeg/
directory/bench-dense.json         what they were made from (kept while it matches)
```

Why a copy: the sample's masks are palette PNGs, which `tf.io.decode_png` decodes to
their colours, not their ids, so the `tf.data` loaders would read other values than
dalipipe (which reads a palette's indices); greyscale masks give every loader the same
ids. Pure Python, NumPy and PIL.
"""

import csv
import json
import os
import shutil

# The classification workloads' crop sizes (`make_sample_dataset`'s defaults).
CROP_WIDTH = (260, 560)
ASPECT_RATIO = (0.65, 1.05)
JPEG_QUALITY = 95
MARKER = "bench-dense.json"


class DenseData:
    """The files of `dense_data`.

    Attributes:
        images: the JPEG paths, sorted.
        masks: the greyscale mask paths, `masks[i]` for `images[i]`.
        masks_folder: the folder of `masks` (a `masks=` source for `make_dali_dataset`).
        boxes: the COCO instances JSON of `images`.
        directory: the folder.
    """

    def __init__(self, directory, images, masks, boxes):
        self.directory = directory
        self.images, self.masks = images, masks
        self.masks_folder = os.path.join(directory, "trimaps")
        self.boxes = boxes

    def targets(self, workload):
        """The `labels` of a dense workload's loaders (`dalipipe.bench.loaders`): the
        mask paths for "segmentation", the COCO JSON of the boxes for "detection"."""
        return self.boxes if workload == "detection" else self.masks


def dense_data(directory, *, num_images, seed=0):
    """Makes (or reuses) the dense workloads' data in `directory` (module docstring).

    `directory` must be absent, empty or made by dalipipe, as for
    `make_dense_sample_dataset`, which raises `FolderInUseError` otherwise.

    Returns:
        A `DenseData`.
    """
    from dalipipe.sample_data import make_dense_sample_dataset

    labels_csv = make_dense_sample_dataset(directory, num_images=num_images, seed=seed,
                                           crop_width=CROP_WIDTH, aspect_ratio=ASPECT_RATIO)
    with open(labels_csv, newline="") as f:
        stems = sorted(os.path.splitext(os.path.basename(row["path"]))[0]
                       for row in csv.DictReader(f))
    images = [os.path.join(directory, "jpeg", f"{stem}.jpg") for stem in stems]
    masks = [os.path.join(directory, "trimaps", f"{stem}.png") for stem in stems]
    boxes = os.path.join(directory, "jpeg-instances.json")
    # The sample data's own JSON changes whenever it is made again: the copies follow.
    source = os.stat(os.path.join(directory, "instances.json"))
    made = dict(num_images=num_images, seed=seed, quality=JPEG_QUALITY,
                source=[source.st_size, source.st_mtime_ns])
    try:
        with open(os.path.join(directory, MARKER)) as f:
            kept = json.load(f) == made and all(map(os.path.isfile, images + masks + [boxes]))
    except (OSError, ValueError):
        kept = False
    if not kept:
        _write_copies(directory, stems)
        with open(os.path.join(directory, MARKER), "w") as f:
            json.dump(made, f)
    return DenseData(directory, images, masks, boxes)


def _write_copies(directory, stems):
    """jpeg/, trimaps/ and jpeg-instances.json, from images/, masks/ and instances.json."""
    from PIL import Image

    from dalipipe.annotations.masks import greyscale_png

    for folder in ("jpeg", "trimaps"):
        shutil.rmtree(os.path.join(directory, folder), ignore_errors=True)
        os.makedirs(os.path.join(directory, folder))
    for stem in stems:
        with Image.open(os.path.join(directory, "images", f"{stem}.png")) as image:
            image.convert("RGB").save(os.path.join(directory, "jpeg", f"{stem}.jpg"),
                                      quality=JPEG_QUALITY)
        mask = os.path.join(directory, "masks", f"{stem}.png")
        with open(mask, "rb") as f:
            grey = greyscale_png(f.read(), mask)
        with open(os.path.join(directory, "trimaps", f"{stem}.png"), "wb") as f:
            f.write(grey)
    with open(os.path.join(directory, "instances.json")) as f:
        instances = json.load(f)
    for image in instances["images"]:
        image["file_name"] = os.path.splitext(image["file_name"])[0] + ".jpg"
    with open(os.path.join(directory, "jpeg-instances.json"), "w") as f:
        json.dump(instances, f)
