"""Scanning TFRecord files: their records' places, labels and class texts, read
once and cached per shard (`ranges.cache.cached_scan`, kind `tfrecord-scan`), valid while the
shard's size and modification time are those recorded there."""

import os
from typing import NamedTuple, Optional

import numpy as np

from dalipipe.tfrecord.format import HEADER, LABEL, TEXT, record_checksum, record_data
from dalipipe.tfrecord.idx_files import ensure_and_read_indexes
from dalipipe.ranges.cache import cached_scan
from dalipipe.tfrecord.read import encoded_value, feature_values, parse
from dalipipe.utils import progress

_SCAN_VERSION = 2  # bump when what `scan` caches changes


class Records(NamedTuple):
    """The records of TFRecord files.

    Attributes:
        shards: list of the files' absolute paths.
        refs: int64 array of shape `(num_records, 6)`, shard by shard in file order:
            shard number (into `shards`), offset and size of each record (the
            three columns of every source of byte ranges, `dalipipe.ranges`); the
            first and past-the-last byte of its `image/encoded` value, counted from
            the record's first byte (`(-1, -1)` for a record without one); and the
            CRC-32C of the record's bytes as verified (`format.record_checksum`).
            `load_encoded` reads them.
        labels: int64 array of shape `(num_records,)` of the `image/class/label`
            values, or None when no record has that feature.
        texts: list of the `image/class/text` strings, or None when no record has
            that feature.
    """

    shards: list
    refs: np.ndarray
    labels: Optional[np.ndarray]
    texts: Optional[list]

    def __len__(self):
        return len(self.refs)


def scan(paths, verbose=False):
    """Indexes TFRecord files and reads the label and class text of every record.

    Every record is read once (its length and data checksums verified) and parsed;
    where its image lies and its checksum (for `load_encoded`), its label and text
    are cached per shard in `$DALIPIPE_CACHE_DIR/tfrecord-scan/` (default
    `~/.cache/dalipipe/tfrecord-scan/`; not where the cache cannot be written or is
    turned off by `DALIPIPE_NO_CACHE`), keyed on the shard's absolute path, size and
    modification time, so a second scan reads only the index files.

    Args:
        paths: paths of TFRecord files (see `tfrecord_files`).
        verbose: draw progress bars over the files on stderr.

    Returns:
        `Records`.

    Raises:
        ValueError: for a corrupt or truncated file, a record that is not a
            `tf.train.Example`, a label that is not a single integer, and when some
            records have a label (or text) and others do not; each names the file and
            record.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    shards = [os.path.abspath(os.fspath(p)) for p in paths]
    if not shards:
        raise ValueError("`paths` must name at least one TFRecord file. Received: paths=[]")
    indexed = ensure_and_read_indexes(shards, verbose)
    refs, labels, texts = [], [], []
    with progress(len(shards), "TFRecord files scanned", enabled=verbose) as bar:
        for i, (path, (_, offsets)) in enumerate(zip(shards, indexed)):
            found = _scan_shard(path, offsets)
            places = np.asarray(found["places"], np.int64).reshape(-1, 3)
            refs.append(np.column_stack([np.full(len(offsets), i, np.int64), offsets, places]))
            labels.append(found["labels"])
            texts.append(found["texts"])
            bar.update(1)
    return Records(
        shards,
        np.concatenate(refs).astype(np.int64),
        _all_or_none(labels, shards, LABEL, lambda v: np.asarray(v, np.int64)),
        _all_or_none(texts, shards, TEXT, list),
    )


def _all_or_none(per_shard, shards, name, build):
    values = [v for shard in per_shard for v in shard]
    if all(v is None for v in values):
        return None
    for shard, shard_values in zip(shards, per_shard):
        if None in shard_values:
            record = shard_values.index(None)
            raise ValueError(
                f"Some records have the feature {name!r} and some do not: record {record} "
                f"of {shard!r} has none."
            )
    return build(values)


def _scan_shard(path, offsets):
    """{"labels": [...], "texts": [...], "places": [[start, end, checksum], ...]} of a
    shard's records (see `Records`), from the cache or read."""
    info = os.stat(path)
    signature = {"version": _SCAN_VERSION, "path": os.fsdecode(path), "size": info.st_size,
                 "mtime_ns": info.st_mtime_ns, "count": len(offsets)}
    return cached_scan("tfrecord-scan", path, signature, lambda: _read_shard(path, offsets))


def _read_shard(path, offsets):
    found = {"labels": [], "texts": [], "places": []}
    with open(path, "rb", buffering=1 << 20) as f:
        for record, (offset, size) in enumerate(offsets.tolist()):
            f.seek(offset)
            whole = f.read(size)
            data = record_data(whole, path, offset, size)
            where = f"record {record} (at byte {offset}) of {path!r}"
            try:
                features = parse(data).features.feature
            except ValueError as e:
                raise ValueError(f"{e}: {where}") from None
            label, text = feature_values(features, LABEL), feature_values(features, TEXT)
            if label is not None and (len(label) != 1 or not isinstance(label[0], int)):
                raise ValueError(f"{LABEL!r} must hold one integer. Found {label!r} in {where}")
            if text is not None and (len(text) != 1 or not isinstance(text[0], bytes)):
                raise ValueError(f"{TEXT!r} must hold one string. Found {text!r} in {where}")
            found["places"].append([*_place(data, encoded_value(features)),
                                    record_checksum(whole)])
            found["labels"].append(None if label is None else label[0])
            found["texts"].append(None if text is None else text[0].decode("utf-8", "replace"))
    return found


def _place(data, image):
    """`(start, end)` of the bytes `image` in a record of data `data`, counted from
    the record's first byte; `(-1, -1)` without an image (None).

    Any occurrence of the image's bytes is those bytes: found by their first 64
    bytes, then compared whole (`data.find(image)` of a large image is slower many
    times over: the search table it builds from the whole image)."""
    at = -1
    if image is not None:
        head = image[:64]
        at = data.find(head)
        while at >= 0 and not data.startswith(image, at):
            at = data.find(head, at + 1)
    # Never -1 for an image parsed from `data`; if it were, `load_encoded` parses.
    return (-1, -1) if at < 0 else (HEADER + at, HEADER + at + len(image))
