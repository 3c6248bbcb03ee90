"""COCO `instances` JSON files (`images`, `annotations`, `categories`), read as
strictly as pycocotools reads them: each image's boxes, matched to the image files
by `file_name`.

COCO's boxes are absolute `xywh` in pixels. Category ids may have gaps (COCO's own
run 1..90 for 80 classes): the labels are contiguous, `class_names` are the
categories' names in id order. Annotations with `iscrowd: 1` (a region of many
objects) are left out. An image of the JSON without annotations has no boxes.

Refused with a ValueError naming the JSON and the entry: an image without
`file_name` or `id`, two images of one `id` or of one file name, a category without
`name`, a category `id` that is not an integer (`"7"`), two categories of one id (the
second would relabel every box of the first), a `bbox` that is not 4 numbers, and two
image files of one file name (both would take the same entry's boxes).
"""

import json
import os

import numpy as np

from dalipipe.annotations.boxes import BoxSource, convert_format, image_boxes
from dalipipe.annotations.files import flat_images, unmatched
from dalipipe.calls import warn
from dalipipe.storage.fetch import read_files
from dalipipe.storage.remote_sources import resolve_path
from dalipipe.utils import is_int, is_number

_SHOWN = 200  # characters of an entry shown in a message


def coco_boxes(instances, images, *, allow_missing=False):
    """The boxes of a COCO `instances` JSON, for the image files `images`.

    An image file takes the JSON's image whose `file_name` has its base name.

    Args:
        instances: the JSON file's path (local, or an `s3://` or `gs://` URI), or its
            content as a dict.
        images: a flat folder of images, or a list of image paths (local or URIs).
        allow_missing: keep image files the JSON does not list, with no boxes, in
            `missing` for the check to report. Defaults to False: an error.

    Returns:
        A `dalipipe.annotations.boxes.BoxSource`: labels contiguous over
        `categories` in id order, `iscrowd` annotations left out (counted in
        `crowd`). Images of the JSON without a file are in `unmatched`, and
        reported in a warning.

    Raises:
        ValueError: naming the JSON and the entry, for a JSON without `images`,
            `annotations` or `categories`, a malformed or repeated image or
            category (see the module's docstring), a `bbox` that is not 4 numbers,
            two image files of one file name, or an image file the JSON does not
            list (unless `allow_missing`).
    """
    what = "the COCO dict" if isinstance(instances, dict) else repr(os.fspath(instances))
    data = instances if isinstance(instances, dict) else _load_json(instances)
    for key in ("images", "annotations", "categories"):
        if not isinstance(data.get(key), list):
            raise ValueError(f"A COCO instances JSON has the lists 'images', 'annotations' "
                             f"and 'categories'. {what} has no list {key!r}")
    categories = _categories(data["categories"], what)
    class_names = [str(c["name"]) for c in categories]
    label_of = {c["id"]: i for i, c in enumerate(categories)}
    by_name, by_id = _images(data["images"], what)
    crowd, orphans = 0, []
    for ann in data["annotations"]:
        if not isinstance(ann, dict):
            raise ValueError(f"Each COCO annotation is an object. {what} has the annotation "
                             f"{_shown(ann)}")
        if ann.get("iscrowd", 0):
            crowd += 1
        elif not _is_key(ann.get("image_id")) or ann["image_id"] not in by_id:
            orphans.append(ann.get("id"))
        else:
            by_id[ann["image_id"]].append(ann)
    if orphans:
        warn(f"Annotations of {what} whose image_id is not among its 'images' are left "
             "out: " + unmatched("annotation id(s)", orphans))
    paths = (flat_images(images, "directory") if isinstance(images, (str, os.PathLike))
             else [resolve_path(p, None) for p in images])
    _refuse_shared_names(paths)
    result, missing = [], []
    for path in paths:
        entry = by_name.get(os.path.basename(path))
        if entry is None:
            missing.append(path)
            result.append(image_boxes(path, [], [], [], [], None))
            continue
        anns = by_id[entry["id"]]
        xywh = [_bbox(a, what) for a in anns]
        size = (entry["width"], entry["height"]) if "width" in entry and "height" in entry else None
        result.append(image_boxes(
            path, convert_format(np.reshape(xywh, (-1, 4)), "xywh", "xyxy"),
            [label_of.get(a.get("category_id"), -1) for a in anns],
            [f"annotation {a.get('id')}" for a in anns], [a.get("category_id") for a in anns],
            size))
    if missing and not allow_missing:
        raise ValueError(f"Each image file needs an entry in `boxes`={what} (matched by file "
                         "name). Not listed: " + unmatched("image(s)", missing))
    listed = {os.path.basename(p) for p in paths}
    left = sorted(n for n in by_name if n not in listed)
    if left:
        warn(f"Images of {what} without an image file are left out: "
             + unmatched("image(s)", left))
    return BoxSource(result, class_names, missing, left, crowd)


def _categories(entries, what):
    """The categories of a COCO JSON in id order, each checked: an integer `id` of
    its own and a `name`."""
    seen = {}
    for i, entry in enumerate(entries):
        if not (isinstance(entry, dict) and is_int(entry.get("id")) and "name" in entry):
            raise ValueError(f"Each COCO category has an integer 'id' and a 'name'. {what} "
                             f"has categories[{i}]={_shown(entry)}")
        other = seen.setdefault(entry["id"], entry)
        if other is not entry:
            raise ValueError(f"Each COCO category id must be unique. {what} has two "
                             f"categories of the id {entry['id']}: {other['name']!r} and "
                             f"{entry['name']!r}")
    return sorted(entries, key=lambda c: c["id"])


def _images(entries, what):
    """`(by_name, by_id)` of the images of a COCO JSON, each checked: a `file_name`
    and an `id` (an integer or a string) of its own. `by_name`: the entry of each base
    name; `by_id`: an empty list per id, for its annotations."""
    by_name, by_id = {}, {}
    for i, entry in enumerate(entries):
        if not (isinstance(entry, dict) and isinstance(entry.get("file_name"), str)
                and _is_key(entry.get("id"))):
            raise ValueError(f"Each COCO image has a 'file_name' and an 'id' (an integer or a "
                             f"string). "
                             f"{what} has images[{i}]={_shown(entry)}")
        name = os.path.basename(entry["file_name"])
        if name in by_name:
            raise ValueError(f"{what} lists two images of the file name {name!r} "
                             f"(ids {by_name[name]['id']} and {entry['id']})")
        if entry["id"] in by_id:
            raise ValueError(f"Each COCO image id must be unique. {what} lists two images "
                             f"of the id {entry['id']!r}: images[{i}]={_shown(entry)}")
        by_name[name], by_id[entry["id"]] = entry, []
    return by_name, by_id


def _is_key(value):
    """Whether `value` may be a COCO image id: an integer or a string."""
    return is_int(value) or isinstance(value, str)


def _refuse_shared_names(paths):
    """ValueError for image files of one base name (in two folders): COCO matches
    files by name, so both would take one entry's boxes."""
    seen = {}
    for path in paths:
        other = seen.setdefault(os.path.basename(path), path)
        if other != path:
            raise ValueError(
                "COCO's `file_name` matches an image file by its name, so each image file "
                f"needs a name of its own. Two have the name {os.path.basename(path)!r}: "
                f"{other!r} and {path!r}")


def _shown(entry):
    text = json.dumps(entry, default=repr) if isinstance(entry, (dict, list)) else repr(entry)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."


def _load_json(path):
    """The object of a JSON file, local or in object storage (`fetch.read_files`)."""
    path = os.fspath(path)
    (data, reason), = read_files([path])
    if data is None:
        raise ValueError(f"`boxes` must be a COCO instances JSON file. Received: "
                         f"boxes={path!r}, which {reason}")
    try:
        data = json.loads(data.decode("utf-8-sig"))
    except ValueError as e:  # UnicodeDecodeError and JSONDecodeError alike
        raise ValueError(f"`boxes` must be a COCO instances JSON file. Received: "
                         f"boxes={path!r}, which cannot be read as JSON ({e})") from e
    if not isinstance(data, dict):
        raise ValueError(f"`boxes` must be a COCO instances JSON file (an object). "
                         f"Received: boxes={path!r}, a JSON {type(data).__name__}")
    return data


def _bbox(ann, what):
    bbox = ann.get("bbox")
    if not (isinstance(bbox, list) and len(bbox) == 4 and all(is_number(v) for v in bbox)):
        raise ValueError(f"A COCO bbox is 4 numbers [x, y, width, height]. Annotation "
                         f"{ann.get('id')} of {what} has bbox={bbox!r}")
    return bbox
