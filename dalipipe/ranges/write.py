"""Writing image files as WebDataset tar shards, which `webdataset` and DALI's
`fn.readers.webdataset` read as they read any, and dalipipe as a `source`."""

import io
import json
import os
import tarfile

from dalipipe.ranges.cache import replacing
from dalipipe.utils import progress

MTIME = 0  # members' time: the same images give the same bytes


MASK_MEMBER = "seg.png"  # the extension of the masks `write_webdataset` writes


def write_webdataset(file_paths, labels, class_names, out_dir, *, num_shards=1, prefix="train",
                     verbose=False, mask_paths=None, boxes=None):
    """Writes image files into WebDataset tar shards.

    Sample `i` (its key `f"{i:08d}"`) has the members `<key>.<ext>`, the file's
    bytes unchanged under its own lower-case extension (`.jpeg` written `.jpg`), and,
    with `labels`, `<key>.cls` (the 0-based class index as text) and `<key>.json`
    (`{"label": index, "class": class_names[index], "filename": base name}`; without
    `class_names`, no `"class"`). With `mask_paths` (8-bit greyscale PNGs of class
    ids, as `dalipipe.annotations.masks.greyscale_masks` gives them), `<key>.seg.png`,
    each mask's bytes, read back with `masks=".seg.png"`. With `boxes` (an
    `ImageBoxes` per file, absolute `xyxy`; `labels` then None and `class_names` the
    boxes' classes), `<key>.json` holds `{"boxes": [[x1, y1, x2, y2], ...], "labels":
    [class name, ...], "bounding_box_format": "xyxy", "filename": base name}`, read
    back with `boxes=".json"` (`dalipipe.annotations.members`). The files are cut into `num_shards` contiguous runs
    as equal as can be, as `tfrecord.write_tfrecords` cuts them; reading the shards in
    name order gives the files in the order of `file_paths`.

    For example, 10 files and `num_shards=3` give, in `out_dir`:

    ```
    train-000000.tar      files 0-3   (read back as "train-{000000..000002}.tar")
    train-000001.tar      files 4-6
    train-000002.tar      files 7-9
    ```

    Args:
        file_paths: paths of the image files.
        labels: integer class index of each file, or None.
        class_names: names of the classes (`labels` index into them), or None.
        out_dir: folder to write to; made if missing.
        num_shards: number of shards, at most `len(file_paths)`. Defaults to 1.
        prefix: start of the file names. Defaults to `"train"`.
        verbose: draw a progress bar over the samples on stderr.
        mask_paths: each file's mask, or None.
        boxes: each file's `ImageBoxes`, or None.

    Returns:
        list of the paths of the shards written.

    Raises:
        ValueError: for arguments out of range or lengths that do not match (the
            checks of `tfrecord.check_write_args`).
    """
    from dalipipe.tfrecord.write import check_write_args, shard_bounds

    file_paths = [os.fspath(p) for p in file_paths]
    labels = check_write_args(file_paths, labels, None if boxes is not None else class_names,
                              num_shards, prefix)
    for name, given in (("mask_paths", mask_paths), ("boxes", boxes)):
        if given is not None and len(given) != len(file_paths):
            raise ValueError(f"`{name}` must have one entry per file ({len(file_paths)}). "
                             f"Received: {len(given)} {name}")
    if mask_paths is not None and boxes is not None or \
            (labels is not None and (mask_paths is not None or boxes is not None)):
        raise ValueError("Write one target per sample: `labels`, `mask_paths` or `boxes`. "
                         f"Received: labels={'None' if labels is None else '...'}, "
                         f"mask_paths={'None' if mask_paths is None else '...'}, "
                         f"boxes={'None' if boxes is None else '...'}")
    if boxes is not None and class_names is None:
        raise ValueError("`boxes` need the `class_names` their labels index. "
                         "Received: class_names=None")
    os.makedirs(out_dir, exist_ok=True)
    bounds = shard_bounds(len(file_paths), num_shards)
    written = []
    with progress(len(file_paths), "samples written", enabled=verbose) as bar:
        for shard in range(num_shards):
            path = os.path.join(out_dir, f"{prefix}-{shard:06d}.tar")
            with replacing(path) as temporary, tarfile.open(temporary, "w",
                                                            format=tarfile.USTAR_FORMAT) as out:
                for i in range(bounds[shard], bounds[shard + 1]):
                    mask = None if mask_paths is None else mask_paths[i]
                    box = None if boxes is None else boxes[i]
                    for name, data in _members(file_paths[i], i, labels, class_names, mask,
                                               box):
                        info = tarfile.TarInfo(name)
                        info.size, info.mtime, info.mode = len(data), MTIME, 0o644
                        out.addfile(info, io.BytesIO(data))
                    bar.update(1)
            written.append(path)
    return written


def _members(path, i, labels, class_names, mask=None, boxes=None):
    """`(name, bytes)` of the members of sample `i`."""
    key = f"{i:08d}"
    suffix = os.path.splitext(path)[1].lower().lstrip(".")
    suffix = {"jpeg": "jpg", "": "img"}.get(suffix, suffix)
    with open(path, "rb") as f:
        yield f"{key}.{suffix}", f.read()
    if labels is not None:
        label = int(labels[i])
        meta = {"label": label, "filename": os.path.basename(path)}
        if class_names is not None:
            meta["class"] = str(class_names[label])
        yield f"{key}.cls", str(label).encode("ascii")
        yield f"{key}.json", json.dumps(meta, ensure_ascii=False).encode("utf-8")
    if mask is not None:
        with open(mask, "rb") as f:
            yield f"{key}.{MASK_MEMBER}", f.read()
    if boxes is not None:
        meta = {"boxes": [[float(v) for v in box] for box in boxes.boxes],
                "labels": [str(class_names[int(label)]) for label in boxes.labels],
                "bounding_box_format": "xyxy", "filename": os.path.basename(path)}
        yield f"{key}.json", json.dumps(meta, ensure_ascii=False).encode("utf-8")
