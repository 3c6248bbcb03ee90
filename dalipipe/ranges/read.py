"""The one reader of sources of byte ranges: `read_ranges(shards, refs)` gives the
bytes at `(shard, offset, size)`, from a local shard or an object, and `load_encoded`
the encoded image of each sample, whichever the kind of shard.

Local shards are read with `os.pread`, each range on its own (safe from several
threads and from forked processes, which share no file position). Objects (`s3://`,
`gs://`) are read in large ranges: the `CHUNK` bytes around a requested range, one
ranged GET, kept in a per-process cache of at most `CACHE_BYTES`, so that samples
read in a shard's order (`ranges.order.stream_order`) cost one GET per chunk, not one
per sample. A range whose chunk was already read and has left the cache (a sample
kept long in the shuffle buffer) is read alone, one GET of its own bytes; a chunk read more than twice `CACHE_BYTES`
ago (the next pass) is read whole again.
"""

import collections
import os
import threading

import numpy as np

CHUNK = 16 << 20  # bytes read with one ranged GET
CACHE_BYTES = 512 << 20  # chunks kept per process

_lock = threading.Lock()
_chunks = collections.OrderedDict()  # (uri, chunk number) -> (start, bytes), least recent first
_read_at = {}  # (uri, chunk number) -> bytes read before it, when it was read
_total = [0]  # bytes read into chunks by this process


def is_remote(path):
    return isinstance(path, str) and path.startswith(("s3://", "gs://"))


def read_ranges(shards, refs):
    """The bytes of byte ranges of shards.

    Args:
        shards: paths or URIs of the shards.
        refs: int64 `(n, k)`, `k >= 3`: shard number (into `shards`), offset and
            size, then any columns of the kind of source (TFRecord files':
            `tfrecord.Records`), not read here.

    Returns:
        list of `n` bytes objects, each `size` bytes (fewer where the shard ends
        first: the caller names a range cut short).
    """
    refs = range_columns(refs).tolist()
    fds = {}  # shard number -> its open file, or None for an object
    found = []
    try:
        for shard, offset, size in refs:
            fd = fds.get(shard, -1)
            if fd == -1:
                path = shards[shard]
                fd = fds[shard] = None if is_remote(path) else os.open(path, os.O_RDONLY)
            if fd is None:
                found.append(_read_object_range(shards[shard], offset, size))
            else:
                found.append(os.pread(fd, size, offset))
    finally:
        for fd in fds.values():
            if fd is not None:
                os.close(fd)
    return found


def range_columns(refs):
    """int64 `(n, 3)`: the shard number, offset and size columns of `refs` (`(n, k)`
    rows of any source of byte ranges, `k >= 3`, or a flat run of triples)."""
    refs = np.asarray(refs, np.int64)
    return refs[:, :3] if refs.ndim == 2 else refs.reshape(-1, 3)


def _read_object_range(uri, offset, size):
    """`size` bytes of an object from `offset`, through the chunk cache."""
    from dalipipe import storage

    number = offset // CHUNK
    key = (uri, number)
    with _lock:
        cached = _chunks.get(key)
        if cached is not None:
            _chunks.move_to_end(key)
        # Read and let go within this pass (less than twice the cache ago): a straggler.
        behind = cached is None and _total[0] - _read_at.get(key, -(4 * CACHE_BYTES)) \
            < 2 * CACHE_BYTES
    if cached is not None and cached[0] + len(cached[1]) >= offset + size:
        start, data = cached
        return data[offset - start: offset - start + size]
    if behind:  # its chunk was read and let go: this range alone
        return storage.read_object(uri, offset, size)
    start = number * CHUNK
    data = storage.read_object(uri, start, max(CHUNK, offset + size - start))
    with _lock:
        _chunks[key] = (start, data)
        _read_at[key] = _total[0]
        _total[0] += len(data)
        if len(_read_at) > 4 * CACHE_BYTES // CHUNK:  # forget the chunks of past passes
            for old in [k for k, at in _read_at.items() if _total[0] - at >= 2 * CACHE_BYTES]:
                del _read_at[old]
        held = sum(len(d) for _, d in _chunks.values())
        while held > CACHE_BYTES and len(_chunks) > 1:
            _, (_, dropped) = _chunks.popitem(last=False)
            held -= len(dropped)
    return data[offset - start: offset - start + size]


def forget_chunks():
    """Empties the chunk cache (for tests: the next read of each range is a chunk's)."""
    with _lock:
        _chunks.clear()
        _read_at.clear()
