"""Masks and boxes from WebDataset tar shards: companions of each sample's image
member, named by their extension (`dalipipe.ranges.tar`).

With tar shards as the source, `masks` and `boxes` name a member extension (a string
that starts with a dot) instead of a folder, a column or a file:

- `masks=".seg.png"`: each sample's mask is its member `<key>.seg.png` (any
  extension that is not an image member's own, `tar.IMAGE_SUFFIXES`), a mask as a
  folder's masks are (greyscale or palette PNG of class ids);
- `boxes=".json"`: each sample's boxes are in its member `<key>.json` (any extension
  ending in `.json`), an object of this schema (`BOX_SCHEMA`):

  ```
  {"boxes": [[12, 30, 88, 91], [100, 4, 140, 60]],   one [4 numbers] per box
   "labels": ["circle", "square"],                   class names, or integer ids
   "bounding_box_format": "xyxy"}                    any of BOX_FORMATS
  ```

  Other fields are left alone (`dalipipe convert` adds `"filename"`). Labels are
  all class names or all integer ids, over the whole source: names are the classes
  in `class_names` order (without it, sorted), ids index `class_names` (without it,
  the classes are `"0"` ... up to the highest id). Relative formats are relative to
  the image member's size.

The check is a folder's (`dalipipe.annotations.checks`): every sample gets a verdict
named `"<shard>#<image member>"`, whose reason names its mask member or its boxes'
member, and `on_bad_file` applies to them. Each image member is read once more for
its size (without `check`) and its EXIF orientation. The graph reads each mask
member's bytes from its shard (`mask_bytes`, fed with the image's bytes: `feed`);
a mask member that DALI's decoder would not read as ids (palette PNGs, other
formats, PNGs with EXIF) is written once as a greyscale PNG into
`<cache>/masks/`, as a folder's masks are, and read from there.
"""

import hashlib
import io
import json
import os

import numpy as np

from dalipipe import checks, sources
from dalipipe.annotations.boxes import BoxSource, convert_format, image_boxes
from dalipipe.annotations.checks import _orientation, box_verdicts, mask_verdicts, turn_reason
from dalipipe.annotations.files import image_size
from dalipipe.annotations.formats import BOX_FORMATS
from dalipipe.annotations.masks import MaskPairs, _greyscale_ids, _reads_as_is, _write
from dalipipe.checks.driver import read_each
from dalipipe.checks.verdicts import Verdict
from dalipipe.ranges import tar
from dalipipe.storage import fetch
from dalipipe.targets import class_order
from dalipipe.utils import cache_dir

BOX_SCHEMA = ("boxes", "labels", "bounding_box_format")
_CHUNK = 256  # members read together
_NO_REF = (-1, -1, -1)


def is_member(value):
    """Whether `value` (of `masks` or `boxes`) names a member extension: a string that
    starts with a dot and holds no folder (`".seg.png"`)."""
    return isinstance(value, str) and value.startswith(".") and len(value) > 1 \
        and "/" not in value and os.sep not in value


def member_extension(value, argument, source):
    """The extension named by `masks` or `boxes` for tar shards, lower case and
    without its leading dot (`"seg.png"`), or a ValueError naming the argument."""
    example = {"masks": "'.seg.png'", "boxes": "'.json'"}[argument]
    if not is_member(value):
        raise ValueError(
            f"With tar shards, `{argument}` names the extension of each sample's "
            f"{'mask' if argument == 'masks' else 'boxes'} member, e.g. {argument}="
            f"{example}. Received: {argument}={value!r}, source={source!r}")
    extension = value[1:].lower()
    if argument == "masks" and extension in tar.IMAGE_SUFFIXES + ("cls", "json"):
        raise ValueError(
            f"`masks` must name a companion member whose extension is not an image "
            f"member's own (a sample has one image member) nor .cls or .json, e.g. "
            f"masks='.seg.png'. Received: masks={value!r}")
    if argument == "boxes" and not extension.endswith("json"):
        raise ValueError(f"`boxes` must name a JSON member of each sample, an extension "
                         f"ending in '.json' (e.g. boxes='.json'). Received: boxes={value!r}")
    return extension


def refuse_members(source, masks, boxes):
    """ValueError where `masks` or `boxes` names a member extension and `source` is
    not tar shards."""
    for name, value in (("masks", masks), ("boxes", boxes)):
        if is_member(value) and not os.path.exists(value):
            raise ValueError(
                f"`{name}={value!r}` names a member of tar shards, and the source is not "
                f"tar shards: give {name} as "
                + ("a folder of masks or a table's column" if name == "masks"
                   else "a COCO JSON file or a table of boxes")
                + f". Received: source={source!r}")


def judge_masks(shards, options, *, image_check, outside=None, seen=None):
    """The samples of tar shards with their mask members, and a verdict on each:
    `inputs.judge_pairs` for tar shards.

    Args:
        shards: the shards' paths or URIs.
        options: validated `Options`, `masks` a member extension.
        image_check: `image_check(index)`, the image check's verdicts or None.
        outside, seen: as in `mask_verdicts`.

    Returns:
        `(index, images, verdicts)` as `judge_pairs` gives them: the index's
        `mask_paths` are the mask members' names (None where a sample has none) and
        its `mask_refs` their byte ranges.
    """
    extension = member_extension(options.masks, "masks", shards)
    found = tar.scan(shards, verbose=options.verbose)
    mask_names, mask_refs = [], []
    for shard_name, members, (shard, _, _) in zip(found.names, found.members,
                                                   found.refs.tolist()):
        member = members.get(extension)
        mask_names.append(None if member is None else
                          f"{shard_name.rsplit('#', 1)[0]}#{member[0]}")
        mask_refs.append(_NO_REF if member is None else (shard, member[1], member[2]))
    mask_refs = np.array(mask_refs, np.int64).reshape(-1, 3)
    index = sources.Index(found.names, None, options.class_names, found.shards, found.refs,
                          mask_paths=mask_names, mask_refs=mask_refs)
    images, sizes, turned = _images(index, image_check, "masks")
    where = {name: ref for name, ref in zip(mask_names, mask_refs) if name is not None}

    def read(names):
        return _read_members(found.shards, [where[n] for n in names])

    rejected = {}
    if options.check is not None:
        present = [i for i, name in enumerate(mask_names) if name is not None]
        rejected = checks.bad_files(checks.check_records(
            [mask_names[i] for i in present], found.shards, mask_refs[present],
            read_records=tar.members_bytes, check=options.check, verbose=options.verbose,
            device="cpu"))
    masks = mask_verdicts(MaskPairs(found.names, mask_names, []),
                          class_names=options.class_names,
                          mask_fill_value=options.mask_fill_value, sizes=sizes,
                          outside=outside, seen=seen, read_masks=read, rejected=rejected)
    verdicts = [Verdict(image.path, image.reason or mask.reason or why, image.size, image.stamp)
                for image, mask, why in zip(images, masks, turned)]
    return index, images, verdicts


def judge_boxes(shards, options, *, image_check):
    """The samples of tar shards with their boxes' members, and a verdict on each.

    Returns:
        `(index, entries, images, verdicts)`: a `sources.Index` without labels whose
        `class_names` are the boxes' classes; an `ImageBoxes` per sample (absolute
        `xyxy`, `size` None); the image check's verdicts (or verdicts without
        reasons, with the sizes read here); and a `Verdict` per sample whose reason
        is the image's, else its boxes' member's, else its boxes', else its EXIF
        orientation's.
    """
    extension = member_extension(options.boxes, "boxes", shards)
    found = tar.scan(shards, verbose=options.verbose)
    index = sources.Index(found.names, None, None, found.shards, found.refs)
    images, sizes, turned = _images(index, image_check, "boxes")
    parsed = _box_members(found, extension)
    entries, class_names = _entries(found.names, parsed, sizes, options.class_names)
    judged = box_verdicts(BoxSource(entries, class_names, [], [], 0), sizes=sizes)
    verdicts = [Verdict(image.path, image.reason or why or box.reason or turn, image.size,
                        image.stamp)
                for image, (_, why), box, turn in zip(images, parsed, judged, turned)]
    index = sources.Index(found.names, None, class_names, found.shards, found.refs)
    return index, entries, images, verdicts


def _images(index, image_check, what):
    """`(images, sizes, turned)`: the image check's verdicts (or reasonless ones),
    each image member's `(width, height)` (the check's, else read here, None where it
    cannot be read) and why it is refused for its EXIF orientation (or None)."""
    images = image_check(index)
    sizes, turned = [], []
    for start in range(0, len(index), _CHUNK):
        refs = index.refs[start:start + _CHUNK]
        for i, (data, _) in enumerate(_read_members(index.tfrecord_files, refs)):
            size = None if images is None else images[start + i].size
            if size is None and data is not None:
                try:
                    size = image_size(data, index.file_paths[start + i])
                except ValueError:
                    size = None  # the image check judges it
            sizes.append(None if size is None else tuple(size))
            turned.append(turn_reason(None if data is None else _orientation(io.BytesIO(data)),
                                      what))
    if images is None:
        images = [Verdict(name, None, size) for name, size in zip(index.file_paths, sizes)]
    else:
        images = [image._replace(size=image.size or size) for image, size in zip(images, sizes)]
    return images, sizes, turned


def _read_members(shards, refs):
    """`(bytes, None)` of each member at `refs`, or `(None, reason)` for one that
    cannot be read (cut short)."""
    return read_each(tar.members_bytes, shards, np.asarray(refs, np.int64).reshape(-1, 3),
                     reason="cannot be read")


def _box_members(found, extension):
    """`(boxes, reason)` per sample: its member's object checked against
    `BOX_SCHEMA` (`(boxes list, labels list, format)`), or None and why not."""
    others = [m.get(extension) for m in found.members] if extension != "json" else None
    parsed = []
    for i, name in enumerate(found.names):
        shard = name.rsplit("#", 1)[0]
        if others is None:
            member, meta = tar.companion(name, "json").rsplit("#", 1)[1], found.meta[i]
            if found.faults[i] is not None:  # not JSON
                parsed.append((None, found.faults[i]))
                continue
            missing = meta is None
        else:
            where = others[i]
            missing = where is None
            meta, member = None, None if missing else where[0]
            if not missing:
                number = found.refs[i, 0]
                (data, why), = _read_members(found.shards, [(number, where[1], where[2])])
                if data is None:
                    parsed.append((None, f"its boxes' member {shard}#{member} {why}"))
                    continue
                try:
                    meta = json.loads(data.decode("utf-8", "replace"))
                except ValueError as e:
                    parsed.append((None, f"its boxes' member {shard}#{member} is not JSON ({e})"))
                    continue
        if missing:
            parsed.append((None, f"has no .{extension} member (its boxes)"))
            continue
        parsed.append(_schema(meta, f"{shard}#{member}"))
    return parsed


def _schema(meta, member):
    """`((boxes, labels, format), None)` of a boxes' member's object, or `(None,
    reason)` naming the member and the field that does not fit `BOX_SCHEMA`."""
    def wrong(what):
        return None, (f"its boxes' member {member} {what} (expected "
                      '{"boxes": [[4 numbers], ...], "labels": [...], '
                      '"bounding_box_format": "xyxy"})')

    if not isinstance(meta, dict) or "boxes" not in meta:
        return wrong("has no \"boxes\" field")
    boxes, labels = meta.get("boxes"), meta.get("labels")
    box_format = meta.get("bounding_box_format")
    if not isinstance(box_format, str) or box_format.lower() not in BOX_FORMATS:
        return wrong(f"has the bounding_box_format {box_format!r}, not one of {BOX_FORMATS}")
    if not isinstance(boxes, list) or not all(
            isinstance(b, list) and len(b) == 4 and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in b)
            for b in boxes):
        return wrong("has \"boxes\" that are not a list of 4 numbers per box")
    if not isinstance(labels, list) or len(labels) != len(boxes) or not all(
            isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool))
            for v in labels):
        return wrong(f"has \"labels\" that are not a list of {len(boxes)} class names or "
                     "integer ids, one per box")
    return (boxes, labels, box_format.lower()), None


def _entries(names, parsed, sizes, class_names):
    """`(entries, class_names)`: an `ImageBoxes` per sample (none for a sample whose
    member is refused), and the classes (`class_names`, else found)."""
    values = [v for boxes, _ in parsed if boxes is not None for v in boxes[1]]
    kinds = {type(v) for v in values}
    if len(kinds) > 1:
        raise ValueError("The labels of the boxes of tar shards must be all class names or all "
                         "integer ids. Received labels of types "
                         f"{sorted(k.__name__ for k in kinds)}")
    if class_names is None:
        if kinds == {int}:
            top = max(values)
            class_names = [str(i) for i in range(top + 1)] if top >= 0 else []
        else:
            class_names = sorted(set(values), key=class_order)
    class_names = list(class_names)
    label_of = {name: i for i, name in enumerate(class_names)}
    entries = []
    for name, (boxes, _), size in zip(names, parsed, sizes):
        if boxes is None:
            entries.append(image_boxes(name, [], [], [], [], None))
            continue
        coordinates, labels, box_format = boxes
        height, width = (size[1], size[0]) if size else (None, None)
        if box_format.startswith("rel_") and size is None:
            coordinates = []  # the image check names the unreadable image
            labels = []
        xyxy = convert_format(np.asarray(coordinates, np.float64).reshape(-1, 4), box_format,
                              "xyxy", height, width)
        ids = [(v if 0 <= v < len(class_names) else -1) if isinstance(v, int)
               else label_of.get(v, -1) for v in labels]
        entries.append(image_boxes(name, xyxy, ids, [f"box {j}" for j in range(len(ids))],
                                   labels, None))
    return entries, class_names


def graph_masks(index):
    """`index` with the masks the graph reads: each mask member that DALI's decoder
    reads as ids (an 8-bit greyscale PNG without EXIF) from its shard; any other
    written once as a greyscale PNG of its ids into `<cache>/masks/` (named by a hash
    of the member's name and its shard's stamp), its `mask_refs` row -1 and its
    `mask_paths` the file's path."""
    shards = index.tfrecord_files
    stamps = fetch.stamps(shards)
    folder = os.path.join(cache_dir(), "masks")
    paths, refs = list(index.mask_paths), index.mask_refs.copy()
    for start in range(0, len(index), _CHUNK):
        chunk = refs[start:start + _CHUNK]
        for i, data in enumerate(tar.members_bytes(shards, chunk), start):
            if _reads_as_is(io.BytesIO(data)):
                continue
            name, stamp = paths[i], stamps[refs[i, 0]]
            key = hashlib.sha256(f"{name}\0{stamp[0]}\0{stamp[1]}".encode()).hexdigest()
            target = os.path.join(folder, key[:32] + ".png")
            if not os.path.isfile(target):
                _write(target, _greyscale_ids(data, name))
            paths[i], refs[i] = target, _NO_REF
    return sources.Index(**{**index._asdict(), "mask_paths": paths, "mask_refs": refs})


def mask_bytes(index, sample_ids):
    """The encoded masks of `sample_ids` that the graph decodes: each mask member's
    bytes from its shard, or the file a rewritten one was written to.

    Returns:
        list of bytes, aligned with `sample_ids`.

    Raises:
        ValueError: naming the shard and the byte range of a member cut short.
    """
    refs = index.mask_refs[sample_ids]
    in_shards = refs[:, 0] >= 0
    members = iter(tar.members_bytes(index.tfrecord_files, refs[in_shards]))
    found = []
    for sample, inside in zip(np.asarray(sample_ids).tolist(), in_shards.tolist()):
        if inside:
            found.append(next(members))
        else:
            with open(index.mask_paths[sample], "rb") as f:
                found.append(f.read())
    return found
