"""Segmentation masks and detection boxes as the DALI graph reads them: a source's
images paired with their masks, checked, and each mask as an 8-bit greyscale PNG of
its class ids; or a source's images with their boxes, checked (`index_with_boxes`).

`index_with_masks` is the indexing and check of `make_dali_pipeline(..., masks=)`:
- a flat folder of images (or a list of image paths) with a folder of masks,
  matched by file stem (`match_masks`); or a table (a CSV file, a DataFrame) whose
  column `masks` names each image's mask (`column_masks`);
- the check of the pairs (`mask_verdicts`: a missing mask, one that does not decode
  or is not one channel of ids, one whose size differs from its image's, an id
  outside `class_names`) always runs, with the image check when `check` is set, and
  `on_bad_file` applies to both; an image with an EXIF orientation other than 1
  (which DALI applies to the image and not to its mask) is refused there too;
- DALI decodes a palette PNG to its colours, not its indices: every mask that is not
  an 8-bit greyscale PNG is rewritten as one, of its ids, in dalipipe's cache folder
  (`greyscale_mask`), and the graph reads that.

`index_with_boxes` is the indexing and check of `make_dali_pipeline(..., boxes=)`: a
flat folder of images (or a list of paths) with a COCO JSON or a table of boxes; the
check of the boxes (`box_verdicts`) always runs, with the image check when `check` is
set, and EXIF-turned images are refused as for masks. Each image keeps its size (for
`dalipipe.annotations.placement`) and at most `max_boxes` boxes, with one warning.

Not supported yet (refused with an error naming the source): TFRecord files,
`s3://` and `gs://` images, masks or boxes, class ids above 255, and a table as the
images' source with `boxes`.
"""

import hashlib
import os

import numpy as np

from dalipipe import checks, sources, tfrecord
from dalipipe.annotations.boxes import BoxSource, ImageBoxes, coco_boxes, table_boxes
from dalipipe.annotations.checks import box_verdicts, mask_verdicts
from dalipipe.annotations.files import flat_images
from dalipipe.annotations.masks import MaskPairs, column_masks, greyscale_png, match_masks, read_mask
from dalipipe.checks.verdicts import Verdict
from dalipipe.calls import warn
from dalipipe.storage import remote_sources as remote
from dalipipe.utils import cache_dir

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
EXIF_ORIENTATION = 0x0112


def index_with_masks(source, options, *, device_id=0):
    """The images of `source` with their masks, checked.

    Args:
        source: a flat folder of images, a list of image paths, a CSV file or a
            DataFrame.
        options: validated `Options` with `masks` set (`device` resolved).
        device_id: the CUDA device a GPU check decodes on.

    Returns:
        `(index, sizes)`: a `sources.Index` without labels, whose `class_names` are
        `options.class_names` and whose `mask_paths` are the 8-bit greyscale PNGs
        the graph reads (`greyscale_mask`); and the `(width, height)` of the images
        the image check read (for the GPU decoder's hints), empty without it.

    Raises:
        ValueError: for a source or masks that are not supported yet, a `masks`
            column the table does not have, and bad pairs with `on_bad_file="raise"`
            (each named, with its reason).
    """
    pairs = _pairs(source, options)
    index = sources.Index(pairs.image_paths, None, options.class_names,
                          mask_paths=pairs.mask_paths)
    if options.verbose:
        print(f"Found {len(index)} files with masks.")
    images = None
    if options.check is not None:
        images = checks.check_index(index, check=options.check, verbose=options.verbose,
                                    device=options.device, device_id=device_id)
    found = mask_verdicts(pairs, class_names=options.class_names,
                          mask_fill_value=options.mask_fill_value,
                          sizes=None if images is None else [v.size for v in images])
    if images is None:
        images = [Verdict(v.path, None) for v in found]
    verdicts = [Verdict(image.path, image.reason or mask.reason or _rotated(image.path),
                        image.size, image.stamp) for image, mask in zip(images, found)]
    index = checks.apply_policy(index, verdicts, on_bad_file=options.on_bad_file,
                                keep_classes=True)
    if options.check is None:  # no stamps: the files were not checked
        index = sources.Index(**{**index._asdict(), "stamps": None})
    masks = [greyscale_mask(path) for path in index.mask_paths]
    sizes = checks.image_sizes(images)
    return sources.Index(**{**index._asdict(), "mask_paths": masks}), sizes


def index_with_boxes(source, options, *, device_id=0):
    """The images of `source` with their boxes, checked.

    Args:
        source: a flat folder of images or a list of image paths.
        options: validated `Options` with `boxes` set (`device` resolved): a COCO
            instances JSON (`coco_boxes`) or a table with one row per box
            (`table_boxes`, in `bounding_box_format`).
        device_id: the CUDA device a GPU check decodes on.

    Returns:
        `(index, sizes)`: a `sources.Index` without labels whose `boxes` are each
        image's `ImageBoxes` (at most `max_boxes`, `size` the image's own) and whose
        `class_names` are the boxes' classes; and the image sizes, as
        `index_with_masks` gives them.

    Raises:
        ValueError: for a source that is not supported yet, a `class_names` that
            differs from a COCO JSON's categories, and bad images or boxes with
            `on_bad_file="raise"` (each named, with its reason).
    """
    found = _box_source(source, options)
    index = sources.Index([e.path for e in found.images], None, found.class_names)
    if options.verbose:
        print(f"Found {len(index)} files with boxes.")
    images = None
    if options.check is not None:
        images = checks.check_index(index, check=options.check, verbose=options.verbose,
                                    device=options.device, device_id=device_id)
    verdicts = box_verdicts(found, sizes=None if images is None else [v.size for v in images])
    if images is None:
        images = [Verdict(v.path, None) for v in verdicts]
    verdicts = [Verdict(image.path, image.reason or box.reason or _unsized(image, box)
                        or _rotated(image.path, "boxes"), image.size or box.size, image.stamp)
                for image, box in zip(images, verdicts)]
    entries = [entry._replace(size=verdict.size) for entry, verdict in zip(found.images, verdicts)]
    over = [(e.path, len(e.boxes)) for e in entries if len(e.boxes) > options.max_boxes]
    if over:
        warn(f"{len(over)} image(s) have more than max_boxes={options.max_boxes} boxes; "
             f"each keeps its first {options.max_boxes}. The first: {over[0][0]!r}, with "
             f"{over[0][1]} boxes")
    count = options.max_boxes
    entries = [e._replace(boxes=e.boxes[:count], labels=e.labels[:count]) for e in entries]
    index = sources.Index(index.file_paths, None, index.class_names, boxes=entries)
    index = checks.apply_policy(index, verdicts, on_bad_file=options.on_bad_file,
                                keep_classes=True)
    if options.check is None:  # no stamps: the files were not checked
        index = sources.Index(**{**index._asdict(), "stamps": None})
    return index, checks.image_sizes(images)


def _unsized(image, box):
    """Why an image whose size is unknown is refused with `boxes` (they are placed
    with it), or None."""
    if image.size is None and box.size is None:
        return "its size cannot be read from its header, and its boxes are placed with it"
    return None


def _box_source(source, options):
    """The `BoxSource` of `options.boxes` for the images of `source`."""
    boxes = options.boxes
    if tfrecord.tfrecord_files(source) is not None:
        raise ValueError("`boxes` with TFRecord files is not supported yet: give a folder "
                         f"of images or a list of paths. Received: source={source!r}")
    if (isinstance(boxes, (str, os.PathLike)) and remote.is_remote_source(os.fspath(boxes))) \
            or (isinstance(source, (str, os.PathLike))
                and remote.is_remote_source(os.fspath(source))):
        raise ValueError("`boxes` with `s3://` or `gs://` files is not supported yet: "
                         f"copy them to a local folder. Received: source={source!r}")
    if sources.read_table(source, options.root) is not None:
        raise ValueError("With `boxes`, the source must be a flat folder of images or a list "
                         "of image paths (the boxes' table or JSON names the images). "
                         f"Received: source={source!r}")
    if isinstance(source, (str, os.PathLike)) and os.path.isdir(source):
        images = os.fspath(source)
    else:
        images = sources.index_source(source, labels=None, root=options.root,
                                      verbose=False).file_paths
    is_json = isinstance(boxes, (str, os.PathLike)) and os.fspath(boxes).lower().endswith(".json")
    if not is_json:
        found = table_boxes(boxes, bounding_box_format=options.bounding_box_format,
                            class_names=options.class_names, root=options.root)
        paths = flat_images(images, "source") if isinstance(images, str) else images
        listed = {e.path: e for e in found.images}
        empty = (np.zeros((0, 4), np.float32), np.zeros(0, np.int32), [], [])
        entries = [listed.get(p) or ImageBoxes(p, *empty) for p in paths]
        return BoxSource(entries, found.class_names, [p for p in paths if p not in listed],
                         [p for p in listed if p not in set(paths)], 0)
    found = coco_boxes(boxes, images, allow_missing=True)
    if options.class_names is not None and list(options.class_names) != found.class_names:
        raise ValueError("With a COCO JSON, `class_names` are its categories' names in id "
                         f"order, {found.class_names}. Received: class_names="
                         f"{options.class_names!r}")
    return found


def _pairs(source, options):
    """The `MaskPairs` of `source` (missing masks kept, for the check to report)."""
    masks = options.masks
    if tfrecord.tfrecord_files(source) is not None:
        raise ValueError("`masks` with TFRecord files is not supported yet: give a folder "
                         f"of images, a list of paths or a table. Received: source={source!r}")
    if remote.is_remote_source(masks) or (isinstance(source, (str, os.PathLike))
                                          and remote.is_remote_source(os.fspath(source))):
        raise ValueError("`masks` with `s3://` or `gs://` files is not supported yet: "
                         f"copy them to a local folder. Received: source={source!r}, "
                         f"masks={masks!r}")
    table = sources.read_table(source, options.root)
    if table is None:
        if isinstance(source, (str, os.PathLike)) and os.path.isdir(source):
            images = os.fspath(source)
        else:
            images = sources.index_source(source, labels=None, root=options.root,
                                          verbose=False).file_paths
        pairs = match_masks(images, masks, allow_missing=True)
    else:
        names, column, folder = table
        if masks not in names:
            raise ValueError(
                "For a table source, `masks` must name its column of mask paths. "
                f"Available columns: {names}. Received: masks={masks!r}")
        index = sources.index_source(source, labels=None, path_column=options.path_column,
                                     root=options.root, allow_missing=True, verbose=False)
        found = column_masks(index.file_paths, column(masks), root=folder, column=masks,
                             allow_missing=True)
        pairs = MaskPairs(index.file_paths, found.mask_paths, [])
    remote_files = [p for p in pairs.image_paths + pairs.mask_paths
                    if p is not None and remote.is_remote_source(p)]
    if remote_files:
        raise ValueError("`masks` with `s3://` or `gs://` files is not supported yet: copy "
                         f"them to a local folder. Received: {remote_files[0]!r}")
    return pairs


def _rotated(path, what="masks"):
    """Why an image whose EXIF orientation is not 1 is refused, or None: DALI's
    decoders turn the image as EXIF says, and not its mask or its boxes."""
    from PIL import Image

    try:
        with Image.open(path) as image:
            orientation = image.getexif().get(EXIF_ORIENTATION, 1)
    except (OSError, ValueError, SyntaxError):  # the image check judges unreadable images
        return None
    if orientation in (None, 1):
        return None
    return (f"has the EXIF orientation {orientation}, which DALI applies to the image "
            f"and not to its {what}: not supported yet with `{what}` (save the image with "
            "its pixels turned)")


def greyscale_mask(path):
    """The path of an 8-bit greyscale PNG of the class ids of the mask at `path`.

    An 8-bit greyscale PNG is its own; any other mask (a palette PNG, which DALI
    decodes to its colours; a 1-bit or 16-bit PNG; another format) is rewritten
    (`greyscale_png`) into `<cache_dir()>/masks/`, named by a hash of its path, size
    and modification time, so that a changed mask is rewritten.

    Raises:
        ValueError: naming the mask, for ids above 255 (not supported yet).
    """
    with open(path, "rb") as f:
        head = f.read(26)
    if head[:8] == PNG_SIGNATURE and head[12:16] == b"IHDR" and head[24:26] == b"\x08\x00":
        return path
    stat = os.stat(path)
    key = hashlib.sha256(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}".encode()).hexdigest()
    folder = os.path.join(cache_dir(), "masks")
    target = os.path.join(folder, key[:32] + ".png")
    if os.path.isfile(target):
        return target
    with open(path, "rb") as f:
        data = f.read()
    ids = read_mask(data, path)
    if ids.size and ids.max() > 255:
        raise ValueError(f"The mask {path!r} holds the class id {int(ids.max())}: ids above "
                         "255 are not supported yet with `masks`")
    os.makedirs(folder, exist_ok=True)
    partial = f"{target}.{os.getpid()}.tmp"
    with open(partial, "wb") as f:
        f.write(greyscale_png(data, path))
    os.replace(partial, target)
    return target
