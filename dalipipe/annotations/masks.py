"""Segmentation masks: which mask goes with which image, and a mask's class ids.

Two sources pair images with masks:

- `match_masks`: a flat folder of images and a folder of masks, matched by file stem
  (the layout of Oxford-IIIT Pets, which Keras's segmentation example reads):

  ```
  images/Abyssinian_1.jpg    trimaps/Abyssinian_1.png
  images/Abyssinian_2.jpg    trimaps/Abyssinian_2.png
  ```

- `column_masks`: a table's mask column, a list of mask paths aligned with its image
  paths (relative paths resolve against the table's folder).

A mask is one channel of class ids: a greyscale PNG (PIL mode "L", or "I;16" for
ids above 255) holds them as its pixel values, a palette PNG (mode "P") as its
palette indices, whatever colours its palette gives them. `read_mask` returns those
ids. DALI decodes a palette PNG to its colours (as grey: a weighted sum of them), not
to its indices; `mask_palette` says whether a mask is a palette image and gives its
colours, and `greyscale_png` rewrites a mask as a greyscale PNG of its ids, which any
decoder reads as ids. RGB masks are refused: colours are not ids. A mask's EXIF
orientation is ignored, as PIL ignores it: DALI's decoder would turn the mask (and
not its image, which the check refuses when it has one).

`greyscale_masks` gives the local 8-bit greyscale PNGs the graph reads: a local one
without EXIF as it is, every other mask (other PNGs and formats, greyscale PNGs with
EXIF, and every mask in object storage) written once into dalipipe's cache folder.

Images and masks may be local or in `s3://` and `gs://` (`dalipipe.storage`), mixed.
"""

import hashlib
import io
import os
import struct
from typing import List, NamedTuple, Optional

import numpy as np

from dalipipe import storage
from dalipipe.annotations.files import flat_images, stem, unmatched
from dalipipe.calls import warn
from dalipipe.storage import fetch
from dalipipe.storage.remote_sources import resolve_path
from dalipipe.utils import cache_dir

# PIL modes whose pixel values are class ids: greyscale, palette (indices), 1-bit.
ID_MODES = ("L", "P", "1", "I", "I;16", "I;16B", "I;16L")
MAX_MASK_ID = 255  # the graph reads masks as 8-bit greyscale PNGs
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_CHUNK = 256  # masks fetched together


class MaskError(ValueError):
    """A mask file whose class ids cannot be read: `path` names it, `reason` says why
    (the message without the path)."""

    def __init__(self, path, reason):
        self.path, self.reason = path, reason
        super().__init__(f"The mask {path!r} {reason}")


class MaskPairs(NamedTuple):
    """Images and their masks.

    Attributes:
        image_paths: absolute paths of the images, in order.
        mask_paths: absolute path of each image's mask, aligned with `image_paths`;
            None for an image without one (see `missing`).
        unmatched: mask files that no image takes, sorted.
    """

    image_paths: List[str]
    mask_paths: List[Optional[str]]
    unmatched: List[str]

    @property
    def missing(self):
        """The images without a mask."""
        return [p for p, m in zip(self.image_paths, self.mask_paths) if m is None]


def match_masks(images, masks, *, allow_missing=False):
    """Pairs each image with the mask of the same file stem.

    Args:
        images: a flat folder of images (hidden files and subfolders left out), or a
            list of image paths.
        masks: a flat folder of masks; `images/Abyssinian_1.jpg` takes the mask
            `masks/Abyssinian_1.png` (any image extension).
        allow_missing: keep images without a mask, with None as their mask, for
            the check to report (`dalipipe.annotations.checks.mask_verdicts`).
            Defaults to False: they are an error.

    Returns:
        A `MaskPairs`. Masks without an image are listed in its `unmatched` and
        reported in a warning.

    Raises:
        ValueError: for an image without a mask (unless `allow_missing`), naming
            every one; for two masks, or two images, of one stem; for a folder
            without images.
    """
    image_paths = (flat_images(images, "directory") if isinstance(images, (str, os.PathLike))
                   else [resolve_path(p, None) for p in images])
    _refuse_shared_stems(image_paths, masks)
    by_stem = {}
    for path in flat_images(masks, "masks"):
        other = by_stem.setdefault(stem(path), path)
        if other != path:
            raise ValueError(
                f"Two masks in `masks`={os.fspath(masks)!r} have the stem {stem(path)!r}: "
                f"{os.path.basename(other)!r} and {os.path.basename(path)!r}. Keep one "
                "mask per image."
            )
    mask_paths = [by_stem.get(stem(p)) for p in image_paths]
    taken = {stem(p) for p in image_paths}
    pairs = MaskPairs(image_paths, mask_paths,
                      sorted(p for s, p in by_stem.items() if s not in taken))
    if pairs.missing and not allow_missing:
        raise ValueError(
            f"Each image needs a mask of the same file stem in `masks`={os.fspath(masks)!r} "
            f"('Abyssinian_1.jpg' takes 'Abyssinian_1.png'). Without a mask: "
            + unmatched("image(s)", pairs.missing)
        )
    if pairs.unmatched:
        warn(f"Masks in `masks`={os.fspath(masks)!r} without an image of the same stem "
             "are left out: " + unmatched("mask(s)", pairs.unmatched))
    return pairs


def _refuse_shared_stems(image_paths, masks):
    """ValueError for two images of one stem (`x.jpg` and `x.png`, or one name in two
    folders): both would take the one mask of that stem."""
    seen = {}
    for path in image_paths:
        other = seen.setdefault(stem(path), path)
        if other != path:
            raise ValueError(
                f"Each image takes the mask of its file stem in `masks`={os.fspath(masks)!r}, "
                f"so two images of one stem would share a mask. Two have the stem "
                f"{stem(path)!r}: {other!r} and {path!r}. Keep one image per stem")


def column_masks(image_paths, mask_paths, *, root=None, column="mask", allow_missing=False):
    """Pairs images with a table's mask column.

    Args:
        image_paths: the table's image paths.
        mask_paths: its mask column, aligned with `image_paths`; an empty cell
            (None, "" or NaN) is an image without a mask.
        root: the folder relative paths resolve against (the table's), or None for
            the working directory.
        column: the mask column's name, for messages.
        allow_missing: as in `match_masks`.

    Returns:
        A `MaskPairs` (its `unmatched` is empty).

    Raises:
        ValueError: when the lengths differ, or for an empty cell (unless
            `allow_missing`), naming the images.
    """
    image_paths, mask_paths = list(image_paths), list(mask_paths)
    if len(image_paths) != len(mask_paths):
        raise ValueError(
            f"The mask column {column!r} must have one cell per image. Received "
            f"{len(mask_paths)} masks for {len(image_paths)} images"
        )
    masks = [None if _is_empty(m) else resolve_path(m, root) for m in mask_paths]
    pairs = MaskPairs([resolve_path(p, root) for p in image_paths], masks, [])
    if pairs.missing and not allow_missing:
        raise ValueError(f"The mask column {column!r} has an empty cell for "
                         + unmatched("image(s)", pairs.missing))
    return pairs


def _is_empty(cell):
    return cell is None or (isinstance(cell, float) and cell != cell) or cell == ""


def _open(data, path):
    """The PIL image of a mask's bytes, loaded."""
    from PIL import Image, UnidentifiedImageError

    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        raise MaskError(path, f"cannot be decoded ({e})") from e
    return image


def read_mask(data, path="<bytes>"):
    """The class ids of a mask.

    Args:
        data: the mask file's bytes.
        path: its name, for messages.

    Returns:
        `(height, width)` array of the ids: uint8 for an "L", "P" (the palette
        indices) or 1-bit mask, uint16 for a 16-bit one, int32 for mode "I".

    Raises:
        MaskError: (a `ValueError`) naming `path`, for bytes that do not decode or
            a mask that is not one channel of ids (RGB, with alpha, float).
    """
    image = _open(data, path)
    if image.mode not in ID_MODES:
        raise MaskError(
            path,
            f"is an image of mode {image.mode!r} ({'+'.join(image.getbands())}): a mask holds "
            "one class id per pixel. Save class ids as a greyscale (mode 'L', or 'I;16' for "
            "ids above 255) or palette (mode 'P') PNG, e.g. "
            "PIL.Image.fromarray(ids.astype('uint8')).save('mask.png')",
        )
    ids = np.asarray(image)
    if ids.dtype == bool:
        return ids.astype(np.uint8)
    return ids.astype(ids.dtype.newbyteorder("="), copy=False)


def mask_palette(data, path="<bytes>"):
    """The colours of a palette mask's indices, or None for a mask without palette.

    Returns:
        uint8 `(n, 3)`: row i is the RGB colour of index i; None for a greyscale
        mask.

    Raises:
        MaskError: for bytes that do not decode.
    """
    image = _open(data, path)
    if image.mode != "P":
        return None
    return np.asarray(image.getpalette("RGB"), np.uint8).reshape(-1, 3)


def greyscale_png(data, path="<bytes>"):
    """A mask rewritten as a greyscale PNG whose pixel values are its class ids.

    A palette mask becomes mode "L" of its indices; ids above 255 are written as
    16-bit ("I;16"). Decoding the result as one channel gives `read_mask(data)`.

    Returns:
        The PNG's bytes.

    Raises:
        MaskError: as `read_mask`, and for ids outside 0..65535.
    """
    from PIL import Image

    ids = read_mask(data, path)
    if ids.size and (ids.min() < 0 or ids.max() > 65535):
        raise MaskError(path, f"holds the id {int(ids.min() if ids.min() < 0 else ids.max())}"
                              ", outside the 0..65535 a PNG holds")
    small = ids.size == 0 or ids.max() <= 255
    out = io.BytesIO()  # uint8 gives mode "L", uint16 "I;16"
    Image.fromarray(ids.astype(np.uint8 if small else np.uint16)).save(out, "PNG")
    return out.getvalue()


def greyscale_masks(paths):
    """The paths of local 8-bit greyscale PNGs of the class ids of the masks at
    `paths`, the files the graph reads.

    A local 8-bit greyscale PNG without EXIF is its own. Any other local mask (a
    palette PNG, which DALI decodes to its colours; a greyscale PNG with an EXIF
    orientation, which DALI's decoder applies; a 1-bit or 16-bit PNG; another format)
    is rewritten (`greyscale_png`: its ids as PIL reads them, without EXIF), and every
    mask in object storage not yet in the cache is fetched
    (`dalipipe.storage.fetch.read_files`) and written as it is where it is an 8-bit
    greyscale PNG without EXIF, else rewritten: into `<cache_dir()>/masks/`, named by a hash of its
    path or URI and its stamp (`fetch.stamps`: a file's size and modification time, an
    object's size and ETag), so that a changed mask is written again. DALI never
    reads a mask's URI: the graph's masks are local files.

    Args:
        paths: local paths and `s3://` or `gs://` URIs of masks.

    Returns:
        A list of local paths, aligned with `paths`.

    Raises:
        ValueError: naming the mask, for ids above 255 (not supported yet), and for a
            mask that cannot be read now (deleted since the check).
        PermissionError, ConnectionError, ImportError: see `dalipipe.storage`.
    """
    paths = list(paths)
    folder = os.path.join(cache_dir(), "masks")
    found, wanted = {}, {}
    for path, stamp in zip(paths, fetch.stamps(paths)):
        if path in found or path in wanted:
            continue
        if stamp is None:
            raise ValueError(f"The mask {path!r} was checked and cannot be read now: "
                             "it was deleted or replaced since")
        if not storage.is_remote(path) and _reads_as_is(path):
            found[path] = path
            continue
        key = hashlib.sha256(f"{path}\0{stamp[0]}\0{stamp[1]}".encode()).hexdigest()
        target = os.path.join(folder, key[:32] + ".png")
        if os.path.isfile(target):
            found[path] = target
        else:
            wanted[path] = target
    wanted = list(wanted.items())
    for start in range(0, len(wanted), _CHUNK):
        chunk = wanted[start:start + _CHUNK]
        for (path, target), (data, reason) in zip(chunk, fetch.read_files([p for p, _ in chunk])):
            if data is None:
                raise ValueError(f"The mask {path!r} was checked and cannot be read now "
                                 f"({reason})")
            _write(target, data if _reads_as_is(io.BytesIO(data)) else _greyscale_ids(data, path))
            found[path] = target
    return [found[p] for p in paths]


def host_free_name(path):
    """The name of a mask file given by `greyscale_masks` that is the same on every
    host: a copy's file name (a hash of its source's path or URI and stamp) for a
    mask rewritten or fetched into `<cache_dir()>/masks/`, else None (a mask read as
    it is, named by its own path)."""
    if os.path.dirname(path) == os.path.join(cache_dir(), "masks"):
        return os.path.basename(path)
    return None


def _reads_as_is(file):
    """Whether the graph reads the mask in `file` (a local path, or a binary file
    object at the file's start) as it is: an 8-bit greyscale PNG without an `eXIf`
    chunk, whose orientation DALI's decoder would apply to the mask and not to its
    image. Its chunks' headers are read up to IEND, skipping their data."""
    if not hasattr(file, "read"):
        with open(file, "rb") as opened:
            return _reads_as_is(opened)
    head = file.read(26)
    if head[:8] != PNG_SIGNATURE or head[12:16] != b"IHDR" or head[24:26] != b"\x08\x00":
        return False
    file.seek(8)
    while True:
        header = file.read(8)
        if len(header) < 8:
            return True  # a damaged file: the check judges it
        length, kind = struct.unpack(">I4s", header)
        if kind in (b"eXIf", b"IEND"):
            return kind == b"IEND"
        file.seek(length + 4, io.SEEK_CUR)


def _greyscale_ids(data, path):
    """`greyscale_png` of a mask whose ids are at most 255."""
    ids = read_mask(data, path)
    if ids.size and ids.max() > MAX_MASK_ID:
        raise ValueError(f"The mask {path!r} holds the class id {int(ids.max())}: ids above "
                         f"{MAX_MASK_ID} are not supported yet with `masks`")
    return greyscale_png(data, path)


def _write(target, data):
    """Writes `data` to `target` whole (another process may read it meanwhile)."""
    os.makedirs(os.path.dirname(target), exist_ok=True)
    partial = f"{target}.{os.getpid()}.tmp"
    with open(partial, "wb") as f:
        f.write(data)
    os.replace(partial, target)
