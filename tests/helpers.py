"""What the tests share besides fixtures: the images' known values and how to read
them back (`conftest.py` writes the images), a counter of file opens, and tar files
written member by member."""

import collections
import io
import os
import tarfile

import numpy as np

NUM_INDEXED = 29  # not a multiple of the batch sizes used in the tests
CLASSES = ("blue", "green", "red")
NUM_TAGGED = 121  # 15 global batches of 8 and one sample: the last step is padding
# Run first in a fresh interpreter, it makes DALI's TensorFlow plugin fail to import.
BLOCK_PLUGIN = 'import sys; sys.modules["nvidia.dali.plugin.tf"] = None\n'


def indexed_color(i):
    """The solid RGB colour of indexed image `i`; `i == round(R / 8)`."""
    return (8 * i, 255 - 8 * i, (37 * i) % 256)


def index_of(image):
    """Recovers the index from an unnormalized HWC image of `indexed_color`."""
    return int(round(float(np.mean(image[..., 0])) / 8))


def indexed_paths(indexed_dir):
    """File paths of `indexed_dir` in index order, with their int labels."""
    paths = [os.path.join(indexed_dir, CLASSES[i % 3], f"img_{i:03d}.png") for i in range(NUM_INDEXED)]
    return paths, [i % 3 for i in range(NUM_INDEXED)]


def tag_of(image):
    """The index of a `tagged_dir` image, from an unnormalized HWC image of it."""
    return int(round(float(np.mean(image[-2:])) / 2))


def tagged_targets(tagged_dir):
    """A table of `tagged_dir` with targets known from each image's tag `i` (columns
    as lists): `path`; raw targets `half` (`i / 2`) and `square` (`(i / 10) ** 2`);
    `tags`, the multi-hot class names (`"even"` if `i` is even, `"big"` if `i >= 60`)."""
    paths = [os.path.join(tagged_dir, CLASSES[i % 3], f"tag_{i:03d}.png") for i in range(NUM_TAGGED)]
    return {
        "path": paths,
        "half": [i / 2 for i in range(NUM_TAGGED)],
        "square": [(i / 10) ** 2 for i in range(NUM_TAGGED)],
        "tags": [[t for t, has in (("big", i >= 60), ("even", i % 2 == 0)) if has]
                 for i in range(NUM_TAGGED)],
    }


class FileOpens:
    """Counts the files opened in `folders` (not in their subfolders) while in a `with`
    block, by path, with Linux's inotify (`IN_OPEN`): whoever opens them, DALI too.

        with FileOpens([folder]) as opens:
            ...
        opens.counts  # collections.Counter of paths
    """

    def __init__(self, folders):
        self.folders = [os.path.abspath(f) for f in folders]
        self.counts = collections.Counter()

    def __enter__(self):
        import inotify_simple  # here: the GPU machine's Python, which imports helpers, lacks it

        self.inotify, flags = inotify_simple.INotify(), inotify_simple.flags
        self.watches = {self.inotify.add_watch(folder, flags.OPEN): folder
                        for folder in self.folders}
        return self

    def __exit__(self, *exc):
        from inotify_simple import flags

        with self.inotify:
            for event in self.inotify.read(timeout=0):
                if event.mask & flags.Q_OVERFLOW:
                    raise RuntimeError("inotify's event queue overflowed: counts are incomplete")
                if event.name and not event.mask & flags.ISDIR:
                    self.counts[os.path.join(self.watches[event.wd], event.name)] += 1
        return False


def recipe_kinds(pipe, epoch):
    """Per sample of `pipe`'s epoch `epoch` (a pipeline with a recipe), in loading
    order: `(geometric, values)`, whether its draws run an operation that moves
    pixels (a shear, translation or rotation) and one that changes their values
    (anything else but the identity). bool `(n,)` each."""
    from dalipipe import feed, recipe_geometry

    rows = feed.part_columns(pipe.epoch_inputs(epoch)[1], pipe.options, "recipe")
    steps = pipe.options.recipe.steps(rows)
    geometric = [any(recipe_geometry.is_geometric(aug) for aug, _, _ in s) for s in steps]
    values = [any(not recipe_geometry.is_geometric(aug) and aug.name != "identity"
                  for aug, _, _ in s) for s in steps]
    return np.array(geometric), np.array(values)


def greyscale_png(ids, *, exif_orientation=None):
    """The bytes of an 8-bit greyscale PNG of the class ids `ids` (uint8 `(h, w)`),
    with an EXIF orientation tag if given."""
    import io

    from PIL import Image

    out, options = io.BytesIO(), {}
    if exif_orientation is not None:
        exif = Image.Exif()
        exif[0x0112] = exif_orientation
        options["exif"] = exif
    Image.fromarray(np.asarray(ids, np.uint8)).save(out, "PNG", **options)
    return out.getvalue()


def bad_idat_crc(png):
    """`png` (bytes) with its first IDAT chunk's checksum broken: PIL decodes it,
    DALI's decoder (libpng) rejects it; same length."""
    import struct

    data = bytearray(png)
    at = data.index(b"IDAT")
    length = struct.unpack(">I", data[at - 4:at])[0]
    data[at + 4 + length] ^= 0xFF
    return bytes(data)


def write_tar(path, members):
    """A tar file at `path` of `(name, bytes)` members, in order; its path as a str."""
    with tarfile.open(path, "w") as out:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))
    return str(path)
