"""Index files of TFRecord files, in the format of DALI's `tfrecord2idx`: one
`offset size` line per record, made when missing or out of date (where, says
`paths.index_path_for`). Making one reads the record headers only, and verifies their
length checksums.
"""

import os

import numpy as np

from dalipipe.tfrecord.format import FOOTER, HEADER, data_length
from dalipipe.tfrecord.paths import cached_index_path, index_path_for, write_atomically
from dalipipe.utils import progress


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
    """Makes sure every TFRecord file has an up-to-date index; returns their paths.

    An up-to-date index is used beside the shard as `<shard>.idx` (also in a
    read-only folder shipped with its indexes) or in the cache folder. Else one is
    made where `index_path_for` says, or in the cache folder if writing there fails.
    An index is out of date when it is older than its shard, unreadable, or its
    records do not follow one another from byte 0 to the shard's end.

    Args:
        paths: paths of TFRecord files.
        verbose: draw a progress bar over the files on stderr.

    Returns:
        The path of each file's index, in the order of `paths`.
    """
    return [index for index, _ in ensure_and_read_indexes(paths, verbose)]


def ensure_and_read_indexes(paths, verbose=False):
    """Like `ensure_indexes`, with what the indexes say.

    Returns:
        One `(index path, refs)` pair per file, in the order of `paths`; `refs` an
        int64 array of shape `(num_records, 2)`: each record's offset and size.
    """
    paths = [os.fspath(p) for p in paths]
    result = []
    with progress(len(paths), "TFRecord files indexed", enabled=verbose) as bar:
        for path in paths:
            result.append(_ensure_index(path))
            bar.update(1)
    return result


def _ensure_index(path):
    """(index path, offsets and sizes) of one shard, made if missing or stale."""
    info = os.stat(path)
    beside = path + ".idx"
    candidates = (beside, index_path_for(path), cached_index_path(path))
    for candidate in dict.fromkeys(candidates):
        refs = _fresh_index(candidate, info)
        if refs is not None:
            return candidate, refs
    walked = _walk_records(path)
    refs = np.array(walked, np.int64).reshape(-1, 2)
    data = _index_bytes(walked)
    index = index_path_for(path)
    try:
        _write_index(index, data, info.st_mtime_ns)
    except OSError:  # a folder that says it is writable and is not
        index = cached_index_path(path)
        _write_index(index, data, info.st_mtime_ns)
    return index, refs


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
