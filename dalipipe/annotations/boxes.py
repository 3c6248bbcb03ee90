"""Detection boxes: their sources, their formats, and their padding to `max_boxes`.

Two sources give each image its boxes and their labels:

- a COCO `instances` JSON: `dalipipe.annotations.coco.coco_boxes`;
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

import os
from typing import List, NamedTuple, Optional

import numpy as np

from dalipipe.annotations.files import read_size
from dalipipe.annotations.formats import BOX_FORMATS, check_format
from dalipipe.calls import warn
from dalipipe.storage.remote_sources import folder_of, resolve_path

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


def image_boxes(path, boxes, labels, names, values, size):
    """An `ImageBoxes` of sequences: boxes float32 `(n, 4)`, labels int32 `(n,)`."""
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
        ValueError: for an unknown format, a missing column, columns of a dict of
            unequal lengths, a row with some but not all of its cells empty, or a
            coordinate that is not a number.
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
        lengths = {name: len(cells) for name, cells in columns.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError("The columns of a table of boxes (a dict of columns) must have "
                             f"one length, a cell per row. Received lengths: {lengths}")
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
        images.append(image_boxes(
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
