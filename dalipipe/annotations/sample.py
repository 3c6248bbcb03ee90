"""Images whose masks and boxes are known from how they were drawn: flat-coloured
shapes over a picture. `dalipipe.sample_data.make_dense_sample_dataset` writes them.

Each shape is one of `SHAPES`, drawn in its own cell of a 2x2 grid (shapes never
touch), in its colour `SHAPE_COLOURS[k]`; no other pixel of the image has one of
those colours (a background pixel that happens to have one is changed by 1 in its
red channel). So the image's pixels define both:

- the mask: class id k+1 where the image has `SHAPE_COLOURS[k]`, 0 elsewhere
  (`MASK_CLASS_NAMES`), saved as a palette PNG whose palette (`MASK_PALETTE`) is
  not in brightness order, so that only its indices are its ids;
- the boxes: each shape's exact pixel extent, absolute `xyxy` (`x1 <= x < x2`),
  label k (`SHAPES`), written to a COCO JSON with category ids `CATEGORY_IDS` (with
  gaps, listed out of id order) and to a table of one row per box.
"""

import io
import json

import numpy as np

SHAPES = ("circle", "square", "triangle")
SHAPE_COLOURS = ((255, 0, 255), (0, 255, 255), (255, 255, 0))
MASK_CLASS_NAMES = ("background",) + SHAPES
# Index i is id i; greys of these colours rank 2 < 1 < 0 < 3, not by index.
MASK_PALETTE = ((200, 200, 200), (255, 64, 64), (40, 40, 150), (250, 230, 60))
CATEGORY_IDS = (2, 7, 11)  # COCO category ids of SHAPES
GRID = 2  # cells per side


def draw_shapes(picture, rng, *, max_shapes=GRID * GRID):
    """Draws 0 to `max_shapes` shapes over `picture`.

    Args:
        picture: uint8 `(height, width, 3)`, at least 32 pixels a side.
        rng: a `numpy.random.Generator`; what is drawn depends on its state only.
        max_shapes: at most `GRID * GRID`.

    Returns:
        `(image, ids, boxes, labels)`: uint8 `(height, width, 3)`; uint8
        `(height, width)` class ids (`MASK_CLASS_NAMES`); int64 `(n, 4)` absolute
        `xyxy` pixel extents; int64 `(n,)` indices into `SHAPES`.
    """
    from PIL import Image, ImageDraw

    height, width = picture.shape[:2]
    image = np.array(picture, np.uint8)
    for colour in SHAPE_COLOURS:  # no background pixel of a shape's colour
        image[(image == colour).all(-1), 0] ^= 1
    ids = np.zeros((height, width), np.uint8)
    boxes, labels = [], []
    cells = rng.permutation(GRID * GRID)[:int(rng.integers(0, max_shapes + 1))]
    for cell in sorted(cells.tolist()):
        cw, ch = width // GRID, height // GRID
        left, top = (cell % GRID) * cw, (cell // GRID) * ch
        w = int(rng.uniform(0.35, 0.9) * cw)
        h = int(rng.uniform(0.35, 0.9) * ch)
        x0 = left + int(rng.integers(1, cw - w)) if cw - w > 1 else left
        y0 = top + int(rng.integers(1, ch - h)) if ch - h > 1 else top
        kind = int(rng.integers(len(SHAPES)))
        canvas = Image.new("L", (width, height), 0)
        draw = ImageDraw.Draw(canvas)
        corners = (x0, y0, x0 + w - 1, y0 + h - 1)
        if SHAPES[kind] == "circle":
            draw.ellipse(corners, fill=1)
        elif SHAPES[kind] == "square":
            draw.rectangle(corners, fill=1)
        else:
            draw.polygon([(x0, y0 + h - 1), (x0 + w - 1, y0 + h - 1), (x0 + w // 2, y0)], fill=1)
        inside = np.asarray(canvas) > 0
        if not inside.any():
            continue
        rows, cols = np.nonzero(inside)
        ids[inside] = kind + 1
        image[inside] = SHAPE_COLOURS[kind]
        boxes.append((cols.min(), rows.min(), cols.max() + 1, rows.max() + 1))
        labels.append(kind)
    return (image, ids, np.asarray(boxes, np.int64).reshape(-1, 4),
            np.asarray(labels, np.int64))


def palette_png(ids):
    """The bytes of a palette PNG of the class ids `ids` (uint8 `(h, w)`), whose
    palette is `MASK_PALETTE`."""
    from PIL import Image

    mask = Image.fromarray(np.asarray(ids, np.uint8))
    mask.putpalette([v for colour in MASK_PALETTE for v in colour])  # mode "L" -> "P"
    out = io.BytesIO()
    mask.save(out, "PNG")
    return out.getvalue()


def coco_json(entries):
    """A COCO instances JSON (text) of drawn images.

    Args:
        entries: `(file_name, (width, height), boxes, labels)` per image, as
            `draw_shapes` returns boxes and labels.

    Returns:
        The JSON's text: boxes as absolute `[x, y, width, height]`, `area` the box's,
        `iscrowd` 0, categories `CATEGORY_IDS` listed last id first.
    """
    images, annotations = [], []
    for image_id, (file_name, (width, height), boxes, labels) in enumerate(entries, 1):
        images.append({"id": image_id, "file_name": file_name, "width": int(width),
                       "height": int(height)})
        for (x1, y1, x2, y2), label in zip(boxes.tolist(), labels.tolist()):
            annotations.append({
                "id": len(annotations) + 1, "image_id": image_id,
                "category_id": CATEGORY_IDS[label], "bbox": [x1, y1, x2 - x1, y2 - y1],
                "area": (x2 - x1) * (y2 - y1), "iscrowd": 0,
            })
    categories = [{"id": c, "name": n, "supercategory": "shape"}
                  for c, n in reversed(list(zip(CATEGORY_IDS, SHAPES)))]
    return json.dumps({"images": images, "annotations": annotations,
                       "categories": categories}, indent=1)


def write_dense_sample(directory, pictures, *, num_images, rng, crop_width, aspect_ratio):
    """Writes `num_images` crops of `pictures` with shapes drawn over them, their
    masks, boxes and tables, into the folder `directory` (which exists).

    Layout (`<name>` is the picture's, `<i>` the image's number):

    ```
    images/<name>_<i>.png   the images (PNG: exact colours)
    masks/<name>_<i>.png    their masks, palette PNGs of class ids
    labels.csv              columns path, mask (relative to directory)
    instances.json          COCO instances: the boxes
    boxes.csv               path,x1,y1,x2,y2,label: a row per box, label a name
    ```

    Args:
        pictures: `(name, opener)` pairs; `opener()` gives a PIL image. Image i is
            cropped from picture `i % len(pictures)`.
        rng: a `numpy.random.Generator`.
        crop_width, aspect_ratio: ranges (uniform) of a crop's width in pixels and
            of its height / width, clipped to the picture.

    Returns:
        The rows of labels.csv: `(image, mask)` paths relative to `directory`.
    """
    import csv
    import os

    from PIL import Image

    for folder in ("images", "masks"):
        os.makedirs(os.path.join(directory, folder), exist_ok=True)
    opened = [(name, np.asarray(open_picture().convert("RGB"))) for name, open_picture in pictures]
    rows, entries, box_rows = [], [], []
    for i in range(num_images):
        name, picture = opened[i % len(opened)]
        height, width = picture.shape[:2]
        w = max(32, min(width, int(rng.uniform(*crop_width))))
        h = max(32, min(height, int(w * rng.uniform(*aspect_ratio))))
        x, y = int(rng.integers(0, width - w + 1)), int(rng.integers(0, height - h + 1))
        image, ids, boxes, labels = draw_shapes(picture[y:y + h, x:x + w], rng)
        image_path, mask_path = f"images/{name}_{i:05d}.png", f"masks/{name}_{i:05d}.png"
        Image.fromarray(image).save(os.path.join(directory, image_path))
        with open(os.path.join(directory, mask_path), "wb") as f:
            f.write(palette_png(ids))
        rows.append((image_path, mask_path))
        entries.append((os.path.basename(image_path), (w, h), boxes, labels))
        box_rows += [(image_path, *box, SHAPES[label])
                     for box, label in zip(boxes.tolist(), labels.tolist())]
        if not len(boxes):
            box_rows.append((image_path, "", "", "", "", ""))
    with open(os.path.join(directory, "instances.json"), "w") as f:
        f.write(coco_json(entries))
    for table, header, table_rows in (("labels.csv", ("path", "mask"), rows),
                                      ("boxes.csv", ("path", "x1", "y1", "x2", "y2", "label"),
                                       box_rows)):
        with open(os.path.join(directory, table), "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(header)
            writer.writerows(table_rows)
    return rows
