"""The check of dense tasks' pairs: what is wrong with an image's mask or its boxes,
as `Verdict` records (`dalipipe.checks.verdicts`), one per image.

A verdict's `path` is the image's, its `reason` names the mask file or the
annotation and the value found, its `size` is the image's `(width, height)` where
its header was read. `bad_files(verdicts)` gives `{image: reason}` of the bad ones,
which `on_bad_file` applies to as to the images' own verdicts. The images
themselves (truncated files, formats DALI cannot decode) are judged by
`dalipipe.checks`; here an image that cannot be read or decoded only leaves its
size unchecked.

Masks (`mask_verdicts`): a missing mask, one that DALI's decoder rejects (the image
check's rules, `dalipipe.checks.check_paths`, at the level of `check`, on the CPU
where the graph decodes masks), one that cannot be read or decoded or is not one
channel of ids, one whose size differs from its image's, a class id above
`MAX_MASK_ID` or outside `class_names` (other than `mask_fill_value`). A JPEG
mask is accepted with a warning that names it: lossy compression changes pixel
values, and so invents class ids.
Boxes (`box_verdicts`): an image the source does not list, a box outside its image
by more than `BOX_TOLERANCE` pixels, a box without area, a category outside the
classes, a size in the source that differs from the image's.
Both (`turned_images`): an image with an EXIF orientation other than 1.

Files may be local or in `s3://` and `gs://`: every read goes through
`dalipipe.storage.fetch`.
"""

import io

import numpy as np

from dalipipe import storage
from dalipipe.annotations.files import image_size, unmatched
from dalipipe.annotations.masks import MAX_MASK_ID, MaskError, read_mask
from dalipipe.calls import warn
from dalipipe.checks.driver import check_paths
from dalipipe.checks.structure import sniff
from dalipipe.checks.verdicts import Verdict, bad_files
from dalipipe.storage.fetch import read_files, read_heads
from dalipipe.utils import listing

# How far (pixels) a box may reach past its image's edges: COCO's boxes, rounded to
# hundredths of a pixel, reach a little past them.
BOX_TOLERANCE = 1.0
_CHUNK = 256  # images (and masks) read together
EXIF_ORIENTATION = 0x0112
# Bytes of a JPEG object read for its EXIF: its APP0 and APP1 (EXIF) segments come
# first, at most 64 KiB each.
EXIF_HEAD = 1 << 17
JPEG_EXTENSIONS = (".jpg", ".jpeg", ".jpe", ".jfif")


def mask_verdicts(pairs, *, class_names=None, mask_fill_value=None, sizes=None, check=None,
                  verbose=False, outside=None, seen=None, read_masks=read_files, rejected=None):
    """What is wrong with each image's mask.

    Args:
        pairs: a `dalipipe.annotations.masks.MaskPairs`.
        class_names: the classes (id i is `class_names[i]`); None leaves the ids
            unchecked.
        mask_fill_value: an id that may appear besides the classes' (an ignore
            index), or None.
        sizes: each image's `(width, height)` (or None), aligned with the images,
            as the image check's verdicts give them (`Verdict.size`); None reads
            the images' headers.
        check: the image check's level (`"structure"` or `"full"`) at which
            DALI's decoder must accept each mask, as `dalipipe.checks.check_paths`
            judges an image (cached alike); None: masks are read by PIL alone.
        verbose: show the decoder check's progress bar on stderr.
        outside: a dict, or None: given, it gets `{image: ids}` for each image
            whose mask is sound but holds ids outside `class_names`, `ids` the
            sorted ids of the mask (for `class_ids_error`).
        seen: a set, or None: given, it gets the ids of every sound mask.
        read_masks: `read_masks(masks)` gives `(bytes, None)` or `(None, reason)`
            for each of a list of masks (`pairs.mask_paths`). Defaults to
            `dalipipe.storage.fetch.read_files` (files and objects).
        rejected: `{mask: reason}` of the masks DALI's decoder rejects, where the
            caller judged them (members of tar shards); None: judged here at the
            level of `check`.

    Returns:
        A list of `Verdict`, one per image of `pairs`, in its order.
    """
    if rejected is None:
        rejected = _rejected_masks(pairs.mask_paths, check, verbose)
    verdicts, jpegs = [], []
    for start in range(0, len(pairs.image_paths), _CHUNK):
        images = pairs.image_paths[start:start + _CHUNK]
        masks = pairs.mask_paths[start:start + _CHUNK]
        mask_data = iter(read_masks([m for m in masks if m is not None]))
        for image, mask, size in zip(images, masks, _sizes(images, sizes, start)):
            if mask is None:
                verdicts.append(Verdict(image, "has no mask", size))
                continue
            found, reason = next(mask_data)
            if found is None:
                verdicts.append(Verdict(image, f"its mask {mask!r} {reason}", size))
                continue
            if mask in rejected:
                verdicts.append(Verdict(image, f"its mask {mask!r}: {rejected[mask]}", size))
                continue
            if sniff(found) == "jpeg":
                jpegs.append(mask)
            reason, ids = _mask_reason(found, mask, size, class_names, mask_fill_value, seen)
            if ids is not None and outside is not None:
                outside[image] = ids
            verdicts.append(Verdict(image, reason, size))
    if jpegs:
        warn("JPEG masks are lossy: their compression changes pixel values near edges, "
             "and so invents class ids. Save masks as PNG. JPEG masks: "
             + unmatched("mask(s)", jpegs))
    return verdicts


def _rejected_masks(masks, check, verbose):
    """`{mask: reason}` of the masks of `masks` (paths, or None) that DALI's decoder
    rejects at the image check's level `check`; empty for `check=None`."""
    if check is None:
        return {}
    paths = list(dict.fromkeys(m for m in masks if m is not None))
    return bad_files(check_paths(paths, check=check, verbose=verbose, device="cpu"))


def _sizes(paths, sizes, start):
    """The `(width, height)` of each of `paths` (or None): from `sizes[start:]`, or
    read from the images' headers."""
    if sizes is not None:
        return [None if s is None else tuple(s) for s in sizes[start:start + len(paths)]]
    return [_size_or_none(data, path) for path, (data, _) in zip(paths, read_files(paths))]


def _size_or_none(data, path):
    try:
        return None if data is None else image_size(data, path)
    except ValueError:
        return None


def _mask_reason(data, mask, size, class_names, mask_fill_value, seen=None):
    """`(reason, ids)`: what is wrong with a mask (None when sound), and its sorted
    ids when the only fault is ids outside `class_names` (else None). A sound
    mask's ids are added to `seen` (a set), if given."""
    try:
        ids = read_mask(data, mask)
    except MaskError as e:
        return f"its mask {mask!r} {e.reason}", None
    reason, outside = _id_reason(ids, mask, size, class_names, mask_fill_value)
    if reason is None and seen is not None and ids.size:
        seen.update(np.flatnonzero(np.bincount(ids.ravel().astype(np.intp))).tolist())
    return reason, outside


def _id_reason(ids, mask, size, class_names, mask_fill_value):
    """`_mask_reason` of a mask's ids, `(height, width)`."""
    reasons = []
    if ids.size and ids.max() > MAX_MASK_ID:
        reasons.append(f"its mask {mask!r} holds the class id {int(ids.max())}: ids above "
                       f"{MAX_MASK_ID} are not supported yet with `masks`")
    if size is not None and ids.shape != (size[1], size[0]):
        reasons.append(f"its mask {mask!r} is {ids.shape[1]}x{ids.shape[0]} pixels, the "
                       f"image {size[0]}x{size[1]}")
    if class_names is not None:
        values = np.unique(ids).tolist()
        outside = [v for v in values if (v < 0 or v >= len(class_names)) and v != mask_fill_value]
        if outside:
            fill = "" if mask_fill_value is None else f", or mask_fill_value={mask_fill_value}"
            reasons.append(f"its mask {mask!r} holds the class id(s) {listing(outside)}, "
                           f"outside class_names (ids 0..{len(class_names) - 1}{fill})")
            if len(reasons) == 1:
                return reasons[0], values
    return "; ".join(reasons) or None, None


def class_ids_error(outside, total, class_names, mask_fill_value=None):
    """The error for masks that are sound but hold ids outside `class_names`.

    Args:
        outside: `{image: ids}` of those masks (`mask_verdicts(outside=...)`).
        total: the number of images with masks.
        class_names: the names given.
        mask_fill_value: the ignore id, or None.

    Returns:
        A ValueError that says the files are sound, which ids were found, and the
        two remedies: a name per id, or no names and a `map` that subtracts.
    """
    found = sorted({v for ids in outside.values() for v in ids} - {mask_fill_value})
    beyond = [v for v in found if v < 0 or v >= len(class_names)]
    first = next(iter(outside))
    lowest = min(found)
    remedies = (f"pass one name per id, id i being class_names[i]: {found[-1] + 1} names "
                f"for ids 0..{found[-1]}")
    if 0 < lowest and found[-1] - lowest < len(class_names):
        remedies += (
            f"; or pass no `class_names` and subtract {lowest} from the masks with `map`, "
            f"`dataset.map(lambda images, masks: (images, masks - {lowest}))` (ids "
            f"0..{found[-1] - lowest}, which your names then name in order)")
    return ValueError(
        f"The masks are sound, but {len(outside)} of {total} hold class ids outside "
        f"`class_names` ({len(class_names)} names: ids 0..{len(class_names) - 1}). Ids "
        f"found in those masks: {listing(found)}; outside the names: {listing(beyond)}. "
        f"To fix it, {remedies}. The first such mask is that of {first!r}. Received: "
        f"class_names={list(class_names)!r}"
    )


def box_verdicts(source, *, tolerance=BOX_TOLERANCE, sizes=None):
    """What is wrong with each image's boxes.

    Args:
        source: a `dalipipe.annotations.boxes.BoxSource`.
        tolerance: how far (pixels) a box may reach past the image's edges.
            Defaults to `BOX_TOLERANCE`.
        sizes: as in `mask_verdicts`, aligned with `source.images`.

    Returns:
        A list of `Verdict`, one per image of `source`, in its order.
    """
    missing = set(source.missing)
    verdicts = []
    for start in range(0, len(source.images), _CHUNK):
        chunk = source.images[start:start + _CHUNK]
        for entry, size in zip(chunk, _sizes([e.path for e in chunk], sizes, start)):
            reasons = ["is not listed in the boxes' source"] if entry.path in missing else []
            if size is not None and entry.size is not None and tuple(entry.size) != size:
                reasons.append(f"is {size[0]}x{size[1]} pixels, its boxes' source says "
                               f"{entry.size[0]}x{entry.size[1]}")
            reasons += _box_reasons(entry, size or entry.size, source.class_names, tolerance)
            verdicts.append(Verdict(entry.path, "; ".join(reasons) or None, size))
    return verdicts


def _box_reasons(entry, size, class_names, tolerance):
    found = []
    for box, label, name, value in zip(entry.boxes, entry.labels, entry.names, entry.values):
        x1, y1, x2, y2 = (float(v) for v in box)
        shown = f"[{x1:g}, {y1:g}, {x2:g}, {y2:g}]"
        if label < 0:
            found.append(f"{name} has the category {value!r}, not among the classes "
                         f"{listing(class_names)}")
        if not (x2 > x1 and y2 > y1):
            found.append(f"{name}'s box {shown} (xyxy) has no area")
        if size is not None and (min(x1, y1) < -tolerance or x2 > size[0] + tolerance
                                 or y2 > size[1] + tolerance):
            found.append(f"{name}'s box {shown} (xyxy) lies outside the image "
                         f"({size[0]}x{size[1]} pixels)")
    if len(found) > 3:
        found = found[:3] + [f"and {len(found) - 3} more"]
    return found


def turned_images(paths, what):
    """Why each image is refused for its EXIF orientation, or None: DALI's decoders
    turn the image as EXIF says, and not its masks or its boxes.

    Args:
        paths: the images' paths: a local file's header is read by PIL; an object is
            read through `dalipipe.storage.fetch`, `_CHUNK` at a time: a JPEG's first
            `EXIF_HEAD` bytes (read whole where they do not parse), any other object
            whole.
        what: `"masks"` or `"boxes"`, for the reasons.

    Returns:
        A list aligned with `paths` of a reason or None. An image that cannot be read
        or decoded gets None: the image check judges it.
    """
    orientations = {}
    remote = [p for p in dict.fromkeys(paths) if storage.is_remote(p)]
    for start in range(0, len(remote), _CHUNK):
        chunk = remote[start:start + _CHUNK]
        jpegs = [p for p in chunk if p.lower().endswith(JPEG_EXTENSIONS)]
        for path, head in zip(jpegs, read_heads(jpegs, EXIF_HEAD)):
            orientations[path] = None if head is None else _orientation(io.BytesIO(head))
        whole = [p for p in chunk if orientations.get(p) is None]
        for path, (data, _) in zip(whole, read_files(whole)):
            orientations[path] = None if data is None else _orientation(io.BytesIO(data))
    return [turn_reason(orientations[path] if path in orientations else _orientation(path),
                        what) for path in paths]


def turn_reason(orientation, what):
    """Why an image of EXIF `orientation` (None where unread) is refused with `what`
    (`"masks"` or `"boxes"`), or None for an upright image or an unread one."""
    if orientation in (None, 1):
        return None
    return (f"has the EXIF orientation {orientation}, which DALI applies to the image and "
            f"not to its {what}: not supported yet with `{what}` (save the image with its "
            "pixels turned)")


def _orientation(file):
    """The EXIF orientation of an image (1 without one; `file` a local path or a file
    object), or None where it cannot be read."""
    from PIL import Image

    try:
        with Image.open(file) as image:
            return image.getexif().get(EXIF_ORIENTATION, 1)
    except (OSError, ValueError, SyntaxError):  # the image check judges unreadable images
        return None
