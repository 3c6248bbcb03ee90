"""Segmentation masks and detection boxes as the DALI graph reads them: a source's
images paired with their masks, checked, and each mask as an 8-bit greyscale PNG of
its class ids; or a source's images with their boxes, checked (`index_with_boxes`).

`index_with_masks` is the indexing and check of `make_dali_pipeline(..., masks=)`:
- a flat folder of images (or a list of image paths) with a folder of masks,
  matched by file stem (`match_masks`); or a table (a CSV file, a DataFrame) whose
  column `masks` names each image's mask (`column_masks`);
- the check of the pairs (`judge_pairs`, `mask_verdicts`: a missing mask, one that
  does not decode or is not one channel of ids, one whose size differs from its
  image's, an id above 255 or outside `class_names`) always runs; when `check` is
  set, the image check judges the images, and its decoder rules the masks too (DALI
  decodes both); `on_bad_file` applies to all of it; an image with an EXIF orientation other than 1
  (which DALI applies to the image and not to its mask) is refused there too;
- DALI decodes a palette PNG to its colours, not its indices: every mask that is not
  a local 8-bit greyscale PNG (another format, or any mask in object storage) is
  written as one, of its ids, in dalipipe's cache folder
  (`greyscale_masks`), and the graph reads that.

`index_with_boxes` is the indexing and check of `make_dali_pipeline(..., boxes=)`: a
flat folder of images (or a list of paths) with a COCO JSON or a table of boxes; the
check of the boxes (`box_verdicts`) always runs, with the image check when `check` is
set, and EXIF-turned images are refused as for masks. Each image keeps its size (for
`dalipipe.annotations.placement`) and at most `max_boxes` boxes, with one warning.

Images, masks, tables and COCO JSON files may be local or in `s3://` and `gs://`,
mixed: a folder is then a prefix (`files.flat_images`), a table's
relative paths start at its own folder, and every read goes through
`dalipipe.storage.fetch`. DALI reads `s3://` images itself; `gs://` images are read
by dalipipe and fed as bytes (`remote_sources.read_in_python`), each beside its
mask's local path with `masks` (`dalipipe.feed.pack_records`).

WebDataset tar shards take `masks` and `boxes` as a member extension (`masks=".seg.png"`,
`boxes=".json"`): `dalipipe.annotations.members` judges their samples, and the graph
reads each mask member's bytes.

Not supported yet (refused with an error naming the source): TFRecord files, and a
table as the images' source with `boxes`. Class ids above 255 are refused by the
check, naming each mask.
"""

import os

import numpy as np

from dalipipe import checks, sources, tfrecord
from dalipipe.annotations import members
from dalipipe.annotations.boxes import BoxSource, ImageBoxes, table_boxes
from dalipipe.annotations.checks import (box_verdicts, class_ids_error, mask_verdicts,
                                         turned_images)
from dalipipe.annotations.coco import coco_boxes
from dalipipe.annotations.files import flat_images, unmatched
from dalipipe.annotations.masks import MaskPairs, column_masks, greyscale_masks, match_masks
from dalipipe.annotations.settings import shown
from dalipipe.checks.verdicts import Verdict
from dalipipe.calls import warn
from dalipipe.ranges import samples as ranges, tar
from dalipipe.storage import remote_sources as remote
from dalipipe.tfrecord.files import GLOB_CHARS


def index_with_masks(source, options, *, device_id=0):
    """The images of `source` with their masks, checked.

    Args:
        source: a flat folder of images, a list of image paths, a CSV file or a
            DataFrame; local, or in `s3://` or `gs://` (folders, files and paths).
        options: validated `Options` with `masks` set (`device` resolved): a folder
            of masks (local or a prefix), or a table's column of mask paths.
        device_id: the CUDA device a GPU check decodes on.

    Returns:
        `(index, sizes)`: a `sources.Index` without labels, whose `class_names` are
        `options.class_names` (without them, the ids seen: `id_names`) and whose
        `mask_paths` are the 8-bit greyscale PNGs the graph reads
        (`greyscale_masks`); and the `(width, height)` of the images
        the image check read (for the GPU decoder's hints), empty without it.

    Raises:
        ValueError: for a source or masks that are not supported yet, a `masks`
            column the table does not have, and bad pairs with `on_bad_file="raise"`
            (each named, with its reason).
    """
    outside, seen = {}, set()
    index, images, verdicts = judge_pairs(source, options, device_id=device_id,
                                          outside=outside, seen=seen)
    if outside and set(checks.bad_files(verdicts)) == set(outside) and (
            options.on_bad_file == "raise" or len(outside) == len(verdicts)):
        # The only fault: names that do not fit the masks, not damaged files.
        raise class_ids_error(outside, len(verdicts), options.class_names,
                              options.mask_fill_value)
    index = _apply_policy(index, verdicts, options)
    if options.class_names is None:
        index = sources.Index(**{**index._asdict(),
                                 "class_names": id_names(seen, options.mask_fill_value)})
    sizes = checks.image_sizes(images)
    if index.mask_refs is not None:  # members of tar shards
        return members.graph_masks(index), sizes
    masks = greyscale_masks(index.mask_paths)
    return sources.Index(**{**index._asdict(), "mask_paths": masks}), sizes


def id_names(seen, mask_fill_value):
    """The class names of masks given without `class_names`: `"0"`, `"1"`, ... up to
    the highest id `seen` in the sound masks other than `mask_fill_value`, as strings
    (as Keras names classes by their folders), so that id i is `class_names[i]`;
    None when no id was seen."""
    ids = set(seen) - {mask_fill_value}
    return None if not ids else [str(i) for i in range(max(ids) + 1)]


def judge_pairs(source, options, *, device_id=0, outside=None, seen=None):
    """The images of `source` with their masks, and a verdict on each pair: the
    check of `index_with_masks` (and of `dalipipe check --masks`), before
    `on_bad_file`.

    Args:
        source, options, device_id: as in `index_with_masks`.
        outside: a dict that gets the sound masks' ids outside `class_names`
            (`mask_verdicts`), or None.
        seen: a set that gets the ids of the sound masks, or None.

    Returns:
        `(index, images, verdicts)`: a `sources.Index` without labels whose
        `mask_paths` are the masks as found; the image check's `Verdict` per image
        (reasons None where `options.check` is None); and a `Verdict` per image
        whose reason is the image's, else its mask's, else its EXIF orientation's.
    """
    shards = tar.tar_files(source)
    if shards is not None:
        return members.judge_masks(
            shards, options, outside=outside, seen=seen,
            image_check=lambda index: _image_check(index, options, device_id, "masks"))
    pairs = _pairs(source, options)
    index = sources.Index(pairs.image_paths, None, options.class_names,
                          mask_paths=pairs.mask_paths)
    images = _image_check(index, options, device_id, "masks")
    found = mask_verdicts(pairs, class_names=options.class_names,
                          mask_fill_value=options.mask_fill_value,
                          sizes=None if images is None else [v.size for v in images],
                          check=options.check, verbose=options.verbose, outside=outside,
                          seen=seen)
    if images is None:
        images = [Verdict(v.path, None) for v in found]
    turned = _turned([image.reason or mask.reason for image, mask in zip(images, found)],
                     [image.path for image in images], "masks")
    verdicts = [Verdict(image.path, image.reason or mask.reason or why, image.size, image.stamp)
                for image, mask, why in zip(images, found, turned)]
    return index, images, verdicts


def index_with_boxes(source, options, *, device_id=0):
    """The images of `source` with their boxes, checked.

    Args:
        source: a flat folder of images or a list of image paths, local or in
            `s3://` or `gs://`.
        options: validated `Options` with `boxes` set (`device` resolved): a COCO
            instances JSON (`coco_boxes`) or a table with one row per box
            (`table_boxes`, in `bounding_box_format`); a file may be local or an
            object.
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
    index, entries, images, verdicts = judge_boxes(source, options, device_id)
    entries = [entry._replace(size=verdict.size) for entry, verdict in zip(entries, verdicts)]
    over = [(e.path, len(e.boxes)) for e in entries if len(e.boxes) > options.max_boxes]
    if over:
        warn(f"{len(over)} image(s) have more than max_boxes={options.max_boxes} boxes; "
             f"each keeps its first {options.max_boxes}. The first: {over[0][0]!r}, with "
             f"{over[0][1]} boxes")
    count = options.max_boxes
    entries = [e._replace(boxes=e.boxes[:count], labels=e.labels[:count]) for e in entries]
    index = sources.Index(index.file_paths, None, index.class_names, index.tfrecord_files,
                          index.refs, boxes=entries)
    index = _apply_policy(index, verdicts, options)
    return index, checks.image_sizes(images)


def judge_boxes(source, options, device_id=0):
    """The images of `source` with their boxes, and a verdict on each: the check of
    `index_with_boxes` (and of `dalipipe check --boxes`), before `on_bad_file`.

    Returns:
        `members.judge_boxes`'s `(index, entries, images, verdicts)`, for tar shards
        as for a folder or a list.
    """
    shards = tar.tar_files(source)
    if shards is not None:
        index, entries, images, verdicts = members.judge_boxes(
            shards, options,
            image_check=lambda index: _image_check(index, options, device_id, "boxes"))
        verdicts = [v._replace(reason=v.reason or _unsized(v, v)) for v in verdicts]
        return index, entries, images, verdicts
    found = _box_source(source, options)
    index = sources.Index([e.path for e in found.images], None, found.class_names)
    images = _image_check(index, options, device_id, "boxes")
    verdicts = box_verdicts(found, sizes=None if images is None else [v.size for v in images])
    if images is None:
        images = [Verdict(v.path, None) for v in verdicts]
    reasons = [image.reason or box.reason or _unsized(image, box)
               for image, box in zip(images, verdicts)]
    turned = _turned(reasons, [image.path for image in images], "boxes")
    verdicts = [Verdict(image.path, reason or why, image.size or box.size, image.stamp)
                for image, box, reason, why in zip(images, verdicts, reasons, turned)]
    return index, found.images, images, verdicts


def _image_check(index, options, device_id, what):
    """The image check's verdicts on `index` (`checks.check_index`), or None when
    `options.check` is None; says how many files were found with their `what`."""
    if options.verbose:
        print(f"Found {len(index)} files with {what}.")
    if options.check is None:
        return None
    return checks.check_index(index, check=options.check, read_records=ranges.load_encoded,
                              verbose=options.verbose, device=options.device,
                              device_id=device_id)


def _apply_policy(index, verdicts, options):
    """`index` after `on_bad_file` judged `verdicts` (`checks.apply_policy`), without
    stamps when the files were not checked (`check=None`)."""
    index = checks.apply_policy(index, verdicts, on_bad_file=options.on_bad_file,
                                keep_classes=True)
    if options.check is None:
        index = sources.Index(**{**index._asdict(), "stamps": None})
    return index


def _turned(reasons, paths, what):
    """`turned_images` of the images of `paths` whose `reasons` are None (the others
    are refused already), None for the others."""
    sound = [i for i, reason in enumerate(reasons) if reason is None]
    found = dict(zip(sound, turned_images([paths[i] for i in sound], what)))
    return [found.get(i) for i in range(len(paths))]


def _unsized(image, box):
    """Why an image whose size is unknown is refused with `boxes` (they are placed
    with it), or None."""
    if image.size is None and box.size is None:
        return "its size cannot be read from its header, and its boxes are placed with it"
    return None


def _refuse_tfrecords(source, name, sources_given):
    """ValueError for TFRecord files as the images' source with `name` ("masks" or
    "boxes"); `sources_given` says which sources that argument takes."""
    path = os.fsdecode(os.fspath(source)) if isinstance(source, (str, os.PathLike)) else None
    remote_pattern = path is not None and remote.is_remote_source(path) \
        and any(c in path for c in GLOB_CHARS)
    if remote_pattern or (not remote.is_remote_source(source)
                          and tfrecord.tfrecord_files(source) is not None):
        raise ValueError(f"`{name}` with TFRecord files is not supported yet: give "
                         f"{sources_given}. Received: source={source!r}")


def _images(source, options):
    """The image paths (URIs for objects) of a source that is not a table: a flat
    folder or prefix as it is, for `match_masks` and `coco_boxes` to list, or the
    paths of a list."""
    if isinstance(source, (str, os.PathLike)) and (
            remote.is_prefix(source) or os.path.isdir(source)):
        return os.fspath(source)
    return sources.index_source(source, labels=None, root=options.root,
                                verbose=False).file_paths


def _box_source(source, options):
    """The `BoxSource` of `options.boxes` for the images of `source`."""
    boxes = options.boxes
    _refuse_tfrecords(source, "boxes", "a folder of images or a list of paths")
    members.refuse_members(source, None, boxes)
    if sources.read_table(source, options.root) is not None:
        raise ValueError("With `boxes`, the source must be a flat folder of images or a list "
                         "of image paths (the boxes' table or JSON names the images). "
                         f"Received: source={source!r}")
    images = _images(source, options)
    is_json = isinstance(boxes, (str, os.PathLike)) and os.fspath(boxes).lower().endswith(".json")
    if not is_json:
        found = table_boxes(boxes, bounding_box_format=options.bounding_box_format,
                            class_names=options.class_names, root=options.root)
        paths = flat_images(images, "source") if isinstance(images, str) else images
        listed = {e.path: e for e in found.images}
        empty = (np.zeros((0, 4), np.float32), np.zeros(0, np.int32), [], [])
        entries = [listed.get(p) or ImageBoxes(p, *empty) for p in paths]
        known = set(paths)
        left = [p for p in listed if p not in known]
        if left:
            warn(f"Rows of `boxes`={shown(boxes)} for images that are not in the source are "
                 "left out: " + unmatched("image(s)", left))
        found = BoxSource(entries, found.class_names, [p for p in paths if p not in listed],
                          left, 0)
    else:
        found = coco_boxes(boxes, images, allow_missing=True)
        if options.class_names is not None and list(options.class_names) != found.class_names:
            raise ValueError("With a COCO JSON, `class_names` are its categories' names in id "
                             f"order, {found.class_names}. Received: class_names="
                             f"{options.class_names!r}")
    remote.refuse_if_dali_cannot_read_s3([e.path for e in found.images])
    return found


def _pairs(source, options):
    """The `MaskPairs` of `source` (missing masks kept, for the check to report)."""
    masks = options.masks
    _refuse_tfrecords(source, "masks", "a folder of images, a list of paths or a table")
    members.refuse_members(source, masks, None)
    table = sources.read_table(source, options.root)
    if table is None:
        pairs = match_masks(_images(source, options), masks, allow_missing=True)
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
    remote.refuse_if_dali_cannot_read_s3(pairs.image_paths)
    return pairs
