"""Index files of TFRecord files, in the format of DALI's `tfrecord2idx`: one
`offset size` line per record, made when missing or out of date: beside its file
when that folder is writable, else in the cache folder, else kept in memory. Making
one reads the record headers only, and verifies their length checksums.
"""

import os

import numpy as np

from dalipipe.tfrecord.format import FOOTER, HEADER, data_length
from dalipipe.tfrecord.paths import cached_index_path, index_path_for, write_atomically
from dalipipe.utils import (cache_dir, cache_disabled, progress, warn_without_cache,
                            writable_cache_dir)


def write_index(tfrecord_path, index_path):
    """Writes the index of a TFRecord file in the format of DALI's `tfrecord2idx`.

    One text line `offset size` per record: the record's first byte and its whole
    size, `8 + 4 + length + 4`. The file is written under a temporary name and
    renamed, so that readers never see half an index.

    Raises:
        ValueError: naming the file and the offset of a record whose header is
            corrupt or that runs past the end of the file.
    """
    shard_mtime_ns = os.stat(tfrecord_path).st_mtime_ns
    _write_index(index_path, _index_bytes(_walk_records(tfrecord_path)), shard_mtime_ns)


def _index_bytes(refs):
    return "".join(f"{offset} {size}\n" for offset, size in refs).encode("ascii")


def _walk_records(tfrecord_path):
    """(offset, size) of every record, from the headers alone."""
    refs = []
    with open(tfrecord_path, "rb") as f:
        file_size = os.fstat(f.fileno()).st_size
        offset = 0
        while offset < file_size:
            f.seek(offset)
            length = data_length(f.read(HEADER))
            if length is None:
                raise ValueError(
                    f"Corrupt TFRecord file (bad record header at byte {offset}): "
                    f"{tfrecord_path!r}"
                )
            size = HEADER + length + FOOTER
            if offset + size > file_size:
                raise ValueError(
                    f"Truncated TFRecord file (the record at byte {offset} runs past the "
                    f"end): {tfrecord_path!r}"
                )
            refs.append((offset, size))
            offset += size
    return refs


def _write_index(index_path, data, shard_mtime_ns):
    """Writes an index no older than its shard was when the shard was read, so that a
    shard whose time is ahead of this machine's clock (on a network file system)
    does not look newer than its index forever."""
    write_atomically(index_path, data)
    info = os.stat(index_path)
    if info.st_mtime_ns < shard_mtime_ns:
        os.utime(index_path, ns=(info.st_atime_ns, shard_mtime_ns))


def read_index(index_path):
    """Reads an index file written by `write_index` or DALI's `tfrecord2idx`.

    Returns:
        int64 array of shape `(num_records, 2)`: each record's offset and size.

    Raises:
        ValueError: naming the file when it is not such an index.
    """
    with open(index_path, "rb") as f:
        words = f.read().split()
    try:
        refs = np.array(words, dtype=np.int64)
    except ValueError:
        refs = None
    if refs is None or len(words) % 2:
        raise ValueError(f"Not a TFRecord index file (lines of 'offset size'): {index_path!r}")
    return refs.reshape(-1, 2)


def ensure_indexes(paths, verbose=False):
    """Makes sure every TFRecord file has an up-to-date index file; returns their paths.

    An up-to-date index is used beside the shard as `<shard>.idx` (also in a
    read-only folder shipped with its indexes, or those `write_tfrecords` writes) or
    in the cache folder. Else one is made in the cache folder: nothing is written
    into the user's folders.
    An index is out of date when it is older than its shard, unreadable, or its
    records do not follow one another from byte 0 to the shard's end.

    Args:
        paths: paths of TFRecord files.
        verbose: draw a progress bar over the files on stderr.

    Returns:
        The path of each file's index, in the order of `paths`.

    Raises:
        OSError: naming the file whose index cannot be written in the cache
            folder (a reader such as DALI's needs the file).
    """
    found = []
    for path, (index, _) in zip(paths, ensure_and_read_indexes(paths, verbose)):
        if index is None:
            raise OSError(
                f"The index of {os.fspath(path)!r} cannot be written in the cache folder "
                f"{cache_dir()!r}. Set DALIPIPE_CACHE_DIR to a writable folder."
            )
        found.append(index)
    return found


def ensure_and_read_indexes(paths, verbose=False):
    """Like `ensure_indexes`, with what the indexes say.

    Returns:
        One `(index path, refs)` pair per file, in the order of `paths`; `refs` an
        int64 array of shape `(num_records, 2)`: each record's offset and size. The
        path is None where the index could be written nowhere (a read-only folder,
        no writable cache folder): then it is kept in memory only, made again on the
        next run, and a warning said so.
    """
    paths = [os.fspath(p) for p in paths]
    result = []
    with progress(len(paths), "TFRecord files indexed", enabled=verbose) as bar:
        for path in paths:
            result.append(_ensure_index(path))
            bar.update(1)
    return result


def _ensure_index(path):
    """(index path, offsets and sizes) of one shard, made if missing or stale; the
    path is None for an index kept in memory (see `_store_index`)."""
    info = os.stat(path)
    candidates = [index_path_for(path)] + ([] if cache_disabled() else [cached_index_path(path)])
    for candidate in candidates:
        refs = _fresh_index(candidate, info)
        if refs is not None:
            return candidate, refs
    walked = _walk_records(path)
    return _store_index(path, _index_bytes(walked), info), np.array(walked, np.int64).reshape(-1, 2)


def _store_index(path, data, info):
    """Writes a shard's index in the cache folder; returns where, or None when it
    cannot be written there (the cache's warning says so, once)."""
    # Never beside the shard: the user's folders are not written to.
    places = [] if writable_cache_dir() is None else [cached_index_path(path)]
    for place in places:
        try:
            _write_index(place, data, info.st_mtime_ns)
            return place
        except OSError as e:  # a folder that says it is writable and is not
            failed = place, e.strerror or str(e)
    if places:
        warn_without_cache(*failed)
    return None


def _fresh_index(index_path, shard_info):
    """The records of an index that is up to date with its shard, else None."""
    try:
        if os.stat(index_path).st_mtime_ns < shard_info.st_mtime_ns:
            return None
        refs = read_index(index_path)
    except (OSError, ValueError):
        return None
    if len(refs) == 0:
        return None
    ends = refs[:, 0] + refs[:, 1]
    if refs[0, 0] != 0 or ends[-1] != shard_info.st_size or np.any(refs[1:, 0] != ends[:-1]):
        return None
    return refs
