"""Detection boxes: their sources, their formats, and their padding to `max_boxes`.

Two sources give each image its boxes and their labels:

- `coco_boxes`: a COCO `instances` JSON (`images`, `annotations`, `categories`),
  matched to the image files by `file_name`. COCO's boxes are absolute `xywh` in
  pixels. Category ids may have gaps (COCO's own run 1..90 for 80 classes): the
  labels are contiguous, `class_names` are the categories' names in id order.
  Annotations with `iscrowd: 1` (a region of many objects) are left out. An image
  of the JSON without annotations has no boxes.
- `table_boxes`: a table with one row per box, its coordinates in
  `bounding_box_format`, in the columns `BOX_COLUMNS[bounding_box_format]`:

  ```
  path,x1,y1,x2,y2,label          (bounding_box_format="xyxy")
  images/0001.png,12,30,88,91,circle
  images/0001.png,100,4,140,60,square
  images/0002.png,,,,,              (an image without boxes)
  ```

Within a source, boxes are absolute `xyxy` pixels, float32: `x1 <= x < x2` are the
box's pixel columns (a box's edges lie on pixel edges). `convert_format` converts
them to any format Keras names, as `keras.utils.bounding_boxes.convert_format` does,
in NumPy; `pad_boxes` pads them to `max_boxes` with -1, as
`keras.layers.MaxNumBoundingBoxes` does.
"""

import json
import os
from typing import List, NamedTuple, Optional

import numpy as np

from dalipipe.annotations.files import flat_images, read_size, unmatched
from dalipipe.annotations.formats import BOX_FORMATS, check_format
from dalipipe.calls import warn
from dalipipe.storage.fetch import read_files
from dalipipe.storage.remote_sources import folder_of, resolve_path
from dalipipe.utils import is_number

# A table's coordinate columns for each format, in the format's order.
_ABSOLUTE_COLUMNS = {
    "xyxy": ("x1", "y1", "x2", "y2"), "yxyx": ("y1", "x1", "y2", "x2"),
    "xywh": ("x", "y", "w", "h"), "center_xywh": ("cx", "cy", "w", "h"),
    "center_yxhw": ("cy", "cx", "h", "w"),
}
BOX_COLUMNS = {name: _ABSOLUTE_COLUMNS[name.replace("rel_", "", 1)] for name in BOX_FORMATS}


class ImageBoxes(NamedTuple):
    """One image's boxes.

    Attributes:
        path: the image's absolute path.
        boxes: float32 `(n, 4)`, absolute `xyxy` pixels.
        labels: int32 `(n,)`: index into the source's `class_names`, or -1 for a
            category or label that is not among them (the check names it).
        names: `(n,)` list of what each box is, for messages: `"annotation 17"`
            (its COCO id) or `"row 5"` (0-based, a table's data rows).
        values: `(n,)` list of each box's category as the source gave it (a COCO
            `category_id`, a table's label).
        size: `(width, height)` that the source states (COCO's `images`), or None.
    """

    path: str
    boxes: np.ndarray
    labels: np.ndarray
    names: list
    values: list
    size: Optional[tuple] = None


class BoxSource(NamedTuple):
    """A source's images with their boxes.

    Attributes:
        images: an `ImageBoxes` per image, in the order of the image files.
        class_names: the labels' names (label i is `class_names[i]`).
        missing: image files the source does not list (kept with no boxes where
            allowed, for the check to report).
        unmatched: images the source lists that are not among the image files.
        crowd: how many `iscrowd` annotations were left out.
    """

    images: List[ImageBoxes]
    class_names: list
    missing: list
    unmatched: list
    crowd: int = 0


def convert_format(boxes, source, target, height=None, width=None, dtype="float32"):
    """Boxes converted from format `source` to `target`, as
    `keras.utils.bounding_boxes.convert_format` converts them, in NumPy.

    Args:
        boxes: array `(..., 4)`.
        source, target: names in `BOX_FORMATS` (case-insensitive).
        height, width: the image's size, needed when either format is relative.
        dtype: the result's dtype. Defaults to "float32".

    Returns:
        Array of `boxes`' shape and `dtype`.

    Raises:
        ValueError: for a last dimension other than 4, an unknown format, or a
            relative format without `height` and `width`.
    """
    boxes = np.asarray(boxes)
    if boxes.ndim == 0 or boxes.shape[-1] != 4:
        raise ValueError("`boxes` must be an array with the last dimension of 4. "
                         f"Received: boxes.shape={boxes.shape}")
    source, target = check_format(source, "source"), check_format(target, "target")
    relative = source.startswith("rel_") or target.startswith("rel_")
    if relative and (height is None or width is None):
        raise ValueError(
            "`height` and `width` are needed to convert between relative and absolute "
            f"formats. Received: source={source!r}, target={target!r}, height={height!r}, "
            f"width={width!r}")
    boxes = boxes.astype(dtype)
    if source == target:
        return boxes
    if source.startswith("rel_") and target.startswith("rel_"):
        source, target, height, width = source[4:], target[4:], None, None
    if height is not None:
        height, width = np.asarray(height, dtype), np.asarray(width, dtype)
    return _from_xyxy(_to_xyxy(boxes, source, height, width), target, height, width)


def _to_xyxy(boxes, source, height, width):
    a, b, c, d = (boxes[..., i] for i in range(4))
    if source.startswith("rel_"):
        scale = {"rel_yxyx": (height, width)}.get(source, (width, height))
        a, b, c, d = a * scale[0], b * scale[1], c * scale[0], d * scale[1]
        source = source[4:]
    if source == "yxyx":
        a, b, c, d = b, a, d, c
    elif source == "xywh":
        c, d = a + c, b + d
    elif source in ("center_xywh", "center_yxhw"):
        if source == "center_yxhw":
            a, b, c, d = b, a, d, c
        a, b, c, d = a - c / 2.0, b - d / 2.0, a + c / 2.0, b + d / 2.0
    return np.stack([a, b, c, d], axis=-1)


def _from_xyxy(boxes, target, height, width):
    x1, y1, x2, y2 = (boxes[..., i] for i in range(4))
    if target.startswith("rel_"):
        x1, y1, x2, y2 = x1 / width, y1 / height, x2 / width, y2 / height
        target = target[4:]
    w, h = x2 - x1, y2 - y1
    out = {
        "xyxy": (x1, y1, x2, y2), "yxyx": (y1, x1, y2, x2), "xywh": (x1, y1, w, h),
        "center_xywh": (x1 + w / 2.0, y1 + h / 2.0, w, h),
        "center_yxhw": (y1 + h / 2.0, x1 + w / 2.0, h, w),
    }[target]
    return np.stack(out, axis=-1)


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
        A `BoxSource`: labels contiguous over `categories` in id order, `iscrowd`
        annotations left out (counted in `crowd`). Images of the JSON without a
        file are in `unmatched`, and reported in a warning.

    Raises:
        ValueError: for a JSON without `images`, `annotations` or `categories`, a
            `bbox` that is not 4 numbers, two JSON images of one base name, or an
            image file the JSON does not list (unless `allow_missing`).
    """
    what = "the COCO dict" if isinstance(instances, dict) else repr(os.fspath(instances))
    data = instances if isinstance(instances, dict) else _load_json(instances)
    for key in ("images", "annotations", "categories"):
        if not isinstance(data.get(key), list):
            raise ValueError(f"A COCO instances JSON has the lists 'images', 'annotations' "
                             f"and 'categories'. {what} has no list {key!r}")
    categories = sorted(data["categories"], key=lambda c: c["id"])
    class_names = [str(c["name"]) for c in categories]
    label_of = {c["id"]: i for i, c in enumerate(categories)}
    by_name, by_id = {}, {}
    for entry in data["images"]:
        name = os.path.basename(entry["file_name"])
        if name in by_name:
            raise ValueError(f"{what} lists two images of the file name {name!r} "
                             f"(ids {by_name[name]['id']} and {entry['id']})")
        by_name[name], by_id[entry["id"]] = entry, []
    crowd, orphans = 0, []
    for ann in data["annotations"]:
        if ann.get("iscrowd", 0):
            crowd += 1
        elif ann.get("image_id") not in by_id:
            orphans.append(ann.get("id"))
        else:
            by_id[ann["image_id"]].append(ann)
    if orphans:
        warn(f"Annotations of {what} whose image_id is not among its 'images' are left "
             "out: " + unmatched("annotation id(s)", orphans))
    paths = (flat_images(images, "directory") if isinstance(images, (str, os.PathLike))
             else [resolve_path(p, None) for p in images])
    result, missing = [], []
    for path in paths:
        entry = by_name.get(os.path.basename(path))
        if entry is None:
            missing.append(path)
            result.append(_image_boxes(path, [], [], [], [], None))
            continue
        anns = by_id[entry["id"]]
        xywh = [_bbox(a, what) for a in anns]
        size = (entry["width"], entry["height"]) if "width" in entry and "height" in entry else None
        result.append(_image_boxes(
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


def _image_boxes(path, boxes, labels, names, values, size):
    return ImageBoxes(path, np.asarray(boxes, np.float32).reshape(-1, 4),
                      np.asarray(labels, np.int32).reshape(-1), list(names), list(values), size)


def table_boxes(table, *, bounding_box_format, class_names=None, root=None,
                path_column="path", label_column="label"):
    """The boxes of a table with one row per box.

    Args:
        table: a CSV file's path (local, or an `s3://` or `gs://` URI), a dict of
            columns (`{name: list of cells}`) or a pandas DataFrame. Its columns: `path_column`, `label_column` (a class
            name) and the four `BOX_COLUMNS[bounding_box_format]`. A row whose
            coordinates and label are all empty is an image without boxes.
        bounding_box_format: the format of the coordinates, one of `BOX_FORMATS`;
            relative formats are relative to each image's size (read from its
            header).
        class_names: the classes in label order; None: the names found, sorted
            (plain integers numerically first). A name outside them gets label -1,
            which the check reports.
        root: the folder relative paths resolve against, local or a URI (None: a
            CSV file's folder, else the working directory).
        path_column, label_column: the columns' names. Default to "path", "label".

    Returns:
        A `BoxSource`, its images in the order they first appear.

    Raises:
        ValueError: for an unknown format, a missing column, a row with some but
            not all of its cells empty, or a coordinate that is not a number.
    """
    from dalipipe.sources import read_csv  # the project's CSV reader (empty cell: None)
    from dalipipe.targets import class_order

    bounding_box_format = check_format(bounding_box_format)
    if isinstance(table, (str, os.PathLike)):
        what, columns = repr(os.fspath(table)), read_csv(os.fspath(table))
        root = folder_of(os.fspath(table)) if root is None else root
    else:
        what = "the table"
        columns = table.to_dict("list") if hasattr(table, "to_dict") else dict(table)
    coordinates = BOX_COLUMNS[bounding_box_format]
    needed = (path_column, *coordinates, label_column)
    absent = [c for c in needed if c not in columns]
    if absent:
        raise ValueError(f"A table of boxes in bounding_box_format={bounding_box_format!r} "
                         f"needs the columns {list(needed)}. {what} lacks {absent}")
    rows = list(zip(*(columns[c] for c in needed)))
    found = {}
    for i, (path, *cells) in enumerate(rows):
        empty = [_is_empty(c) for c in cells]
        entry = found.setdefault(resolve_path(path, root), [])
        if all(empty):
            continue
        if any(empty):
            raise ValueError(f"Row {i} of {what} ({path}) has empty cells in "
                             f"{[n for n, e in zip(needed[1:], empty) if e]}: a box needs "
                             f"all of {list(needed[1:])}, an image without boxes none")
        try:
            box = [float(c) for c in cells[:4]]
        except (TypeError, ValueError):
            raise ValueError(f"Row {i} of {what} ({path}) has a coordinate that is not a "
                             f"number: {dict(zip(coordinates, cells[:4]))}") from None
        entry.append((i, box, str(cells[4])))
    if class_names is None:
        class_names = sorted({label for e in found.values() for _, _, label in e},
                             key=class_order)
    label_of = {name: i for i, name in enumerate(class_names)}
    images = []
    for path, entry in found.items():
        boxes = np.asarray([box for _, box, _ in entry], np.float64).reshape(-1, 4)
        size = read_size(path) if bounding_box_format.startswith("rel_") and entry else None
        height, width = (size[1], size[0]) if size else (None, None)
        images.append(_image_boxes(
            path, convert_format(boxes, bounding_box_format, "xyxy", height, width),
            [label_of.get(label, -1) for _, _, label in entry],
            [f"row {i}" for i, _, _ in entry], [label for _, _, label in entry], None))
    return BoxSource(images, list(class_names), [], [], 0)


def _is_empty(cell):
    return cell is None or cell == "" or (isinstance(cell, float) and cell != cell)


def pad_boxes(boxes, labels, max_boxes, *, paths=None):
    """Boxes and labels of several images padded to `max_boxes`, with -1, as
    `keras.layers.MaxNumBoundingBoxes` pads them.

    An image with more than `max_boxes` keeps its first `max_boxes`; one warning
    names the first such image and how many there are.

    Args:
        boxes: a list of float `(n_i, 4)` arrays, one per image.
        labels: a list of int `(n_i,)` arrays.
        max_boxes: a positive int.
        paths: the images' paths, for the warning.

    Returns:
        `(boxes, labels)`: float32 `(images, max_boxes, 4)` and int32
        `(images, max_boxes)`.
    """
    if isinstance(max_boxes, bool) or not isinstance(max_boxes, (int, np.integer)) \
            or max_boxes < 1:
        raise ValueError(f"`max_boxes` must be a positive integer. Received: "
                         f"max_boxes={max_boxes!r}")
    out_boxes = np.full((len(boxes), max_boxes, 4), -1, np.float32)
    out_labels = np.full((len(boxes), max_boxes), -1, np.int32)
    over = []
    for i, (b, lab) in enumerate(zip(boxes, labels)):
        b, lab = np.asarray(b, np.float32).reshape(-1, 4), np.asarray(lab, np.int32).reshape(-1)
        if len(b) > max_boxes:
            over.append((paths[i] if paths is not None else f"image {i}", len(b)))
        out_boxes[i, :min(len(b), max_boxes)] = b[:max_boxes]
        out_labels[i, :min(len(lab), max_boxes)] = lab[:max_boxes]
    if over:
        warn(f"{len(over)} image(s) have more than max_boxes={max_boxes} boxes; each keeps "
             f"its first {max_boxes}. The first: {over[0][0]!r}, with {over[0][1]} boxes")
    return out_boxes, out_labels
