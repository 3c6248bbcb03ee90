"""The check's entry points: a file, some bytes, a list of files, TFRecord records,
or a whole `sources.Index`.

Each reads what it checks, has the structure rules and then the decoder judge it,
and, for lists, keeps the verdicts in the cache (`_cached_check`, the one loop that
files and records share, which processes sharing the cache split between them).
"""

import collections
import hashlib
import os
import socket
import sqlite3
import stat
import time
import uuid

import numpy as np

from dalipipe.checks.cache import VERSION, cache_path, mode_of, open_cache, usable
from dalipipe.checks.decoder import decoder_verdicts
from dalipipe.checks.structure import check_structure
from dalipipe.options import CHECKS
from dalipipe.storage import fetch
from dalipipe.utils import CHECK_BAR_DELAY, cache_dir, progress, warn_without_cache

_CHUNK = 256  # files or records read and decoded together, and committed to the cache
_POLL_S = 0.05  # how often a process waiting on other processes' chunks looks again
# Verdicts this process found: "computed" by checking, "cached" read from the cache
# (also those other processes wrote while it waited). For tests and benchmarks.
COUNTS = collections.Counter()


def check_file(path, *, full=False, device="cpu", device_id=0):
    """Returns None for a sound image file, else the reason it is not one.

    Args:
        path: a file path.
        full: decode the whole image (on `device`), as `check="full"`. Defaults to
            False.
        device: "cpu" or "gpu": where a full decode runs. Defaults to "cpu".
        device_id: the GPU's CUDA ordinal, for `device="gpu"`. Defaults to 0.
    """
    return _check_paths([path], full=full, device=device, device_id=device_id)[0]


def check_bytes(data, *, full=False, device="cpu", device_id=0):
    """Returns None for the bytes of a sound image, else the reason they are not one.

    The checks of `check_file` after its file system ones, for images that are not
    files of their own (the records of a TFRecord file). Arguments as `check_file`'s.
    """
    return _check_images([data], full=full, device=device, device_id=device_id)[0]


def _check_images(images, *, full, device, device_id=0):
    """The reason each encoded image (bytes) is not sound, or None: the structure
    rules, then DALI's decoder on the images that pass them (on `device` when
    `full`, else on the CPU)."""
    reasons, tests = [], []
    for data in images:
        reason, (how, label) = check_structure(data)
        reasons.append(reason)
        tests.append(("full" if full else how, label))
    todo = [i for i, reason in enumerate(reasons) if reason is None]
    verdicts = decoder_verdicts([images[i] for i in todo], [tests[i] for i in todo],
                                device=device if full else "cpu", device_id=device_id)
    for i, reason in zip(todo, verdicts):
        reasons[i] = reason
    return reasons


def _read(path):
    """`(bytes, None)` for a readable regular file, else `(None, reason)`."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            return None, f"broken symbolic link (to {os.readlink(path)!r})"
        return None, "does not exist"
    except OSError as e:
        return None, f"cannot be read ({e.strerror})"
    if not stat.S_ISREG(info.st_mode):
        return None, "not a regular file"
    if info.st_size == 0:
        return None, "empty file (0 bytes)"
    try:
        with open(path, "rb") as f:
            return f.read(), None
    except OSError as e:
        return None, f"cannot be read ({e.strerror})"


def _check_paths(paths, **how):
    """`check_file` for a list of paths, the decoder taking the images together."""
    return _check_read(fetch.read_paths(paths, _read), **how)  # objects: in parallel


def _check_read(read, **how):
    """The reason for each `(bytes, None)` or `(None, reason)` of `read`: the
    latter's reason, or `_check_images`' for the bytes (`how`: its arguments)."""
    reasons = [reason for _, reason in read]
    readable = [i for i, (data, _) in enumerate(read) if data is not None]
    found = _check_images([read[i][0] for i in readable], **how)
    for i, reason in zip(readable, found):
        reasons[i] = reason
    return reasons


def _cached_check(keys, signatures, check_chunk, *, mode, what, verbose):
    """The reason for each key (None: sound): from the cache where it answers, else
    from `check_chunk`, a chunk of keys at a time, each chunk's verdicts committed.

    The chunks are fixed runs of `_CHUNK` keys of `keys`, so processes that check
    the same list on one cache agree on them, and share them out by claims (see
    `dalipipe.checks.cache`): each checks the chunks it claims, and waits for the
    verdicts of those others hold. Without a cache, or when the cache fails (a
    warning says so), every chunk is checked here.

    Args:
        keys: the names (str) of files or records.
        signatures: per key, `(size, mtime_ns)` of its file, or None for a file that
            cannot be stat-ed (checked, and never cached).
        check_chunk: `check_chunk(indices)` gives the reasons for `keys[i]` for each
            `i` of the list `indices`.
        mode: the cache's name of the check (`cache.mode_of`).
        what: the progress bar's label, e.g. "files checked".
        verbose: show the progress bar on stderr.

    Returns:
        `{key: reason}` for every key.
    """
    # Keys are the names' bytes: file names need not be valid UTF-8.
    encoded = [os.fsencode(key) for key in keys]
    reasons = {}
    chunks = [list(range(start, min(start + _CHUNK, len(keys))))
              for start in range(0, len(keys), _CHUNK)]
    cache = open_cache()
    with progress(len(keys), what, enabled=verbose, delay=CHECK_BAR_DELAY) as bar:
        def answer(indices, found, rows=None):
            for i, reason in zip(indices, found):
                reasons[keys[i]] = reason
                if rows is not None and signatures[i] is not None:
                    rows.append((encoded[i], *signatures[i], mode, VERSION, reason))
            bar.update(len(indices))

        if cache is not None:
            try:
                _shared_check(cache, chunks, encoded, signatures, check_chunk, mode, answer)
            except sqlite3.Error as e:
                warn_without_cache(cache_path(cache_dir()), str(e))
            finally:
                cache.close()
        for chunk in chunks:  # without a cache: what it did not answer
            left = [i for i in chunk if keys[i] not in reasons]
            if left:
                COUNTS["computed"] += len(left)
                answer(left, check_chunk(left))
    return reasons


def _shared_check(cache, chunks, encoded, signatures, check_chunk, mode, answer):
    """`_cached_check`'s work with a cache: `answer(indices, reasons[, rows])` for
    every key of `chunks`, from the cache, or checked in the chunks this process
    claims, each committed with its claim dropped."""
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
    pending = {}  # chunk id -> the indices of keys without a verdict yet
    for chunk in chunks:
        left = _from_cache(cache, chunk, encoded, signatures, mode, answer)
        if left:
            digest = hashlib.sha1(f"{mode}\0{VERSION}".encode())
            for i in chunk:
                digest.update(b"\0" + encoded[i])
            pending[digest.hexdigest()] = left
    held = []
    try:
        while pending:
            claimed = False
            for chunk_id in list(pending):
                if not cache.claim(chunk_id, owner):
                    continue  # another process checks it
                held.append(chunk_id)
                claimed = True
                left = _from_cache(cache, pending.pop(chunk_id), encoded, signatures, mode,
                                   answer)
                rows = []
                if left:
                    COUNTS["computed"] += len(left)
                    answer(left, check_chunk(left), rows)
                cache.put(rows, release=chunk_id)
                held.remove(chunk_id)
            if pending and not claimed:  # all held by others: read what they wrote
                for chunk_id in list(pending):
                    pending[chunk_id] = _from_cache(cache, pending[chunk_id], encoded,
                                                    signatures, mode, answer)
                    if not pending[chunk_id]:
                        del pending[chunk_id]
                if pending:
                    time.sleep(_POLL_S)
    finally:
        if held:
            cache.release(held)


def _from_cache(cache, indices, encoded, signatures, mode, answer):
    """Answers the keys of `indices` that the cache answers; returns the others."""
    known = cache.get([encoded[i] for i in indices])
    found, left = [], []
    for i in indices:
        cached = known.get(encoded[i])
        if signatures[i] is not None and usable(cached, signatures[i], mode):
            found.append(i)
        else:
            left.append(i)
    COUNTS["cached"] += len(found)
    answer(found, [known[encoded[i]][4] for i in found])
    return left


def check_files(paths, *, check="structure", verbose=False, stamps=None, device="cpu",
                device_id=0):
    """Checks `paths`; returns `{path: reason}` for the bad ones.

    Args:
        paths: file paths.
        check: `"structure"` (structure, headers, and the decoder's set-up) or
            `"full"` (a full decode). See `dalipipe.checks`.
        verbose: show a progress bar on stderr.
        stamps: optional dict that receives `path: (size, mtime_ns)` of each file
            that exists.
        device: `"cpu"` or `"gpu"`: the device of the DALI pipeline, where
            `check="full"` decodes.
        device_id: the GPU's CUDA ordinal, for `device="gpu"`. Defaults to 0.
    """
    _check_level(check)
    signatures = fetch.signatures(paths, _signature)  # objects: (size, ETag hash)
    if stamps is not None:
        stamps.update((p, s) for p, s in zip(paths, signatures) if s is not None)
    how = dict(full=check == "full", device=device, device_id=device_id)
    reasons = _cached_check(
        paths, signatures, lambda chunk: _check_paths([paths[i] for i in chunk], **how),
        mode=mode_of(check, device), what="files checked", verbose=verbose,
    )
    return {path: reasons[path] for path in paths if reasons[path] is not None}


def _signature(path):
    """`(size, mtime_ns)` of the file at `path`, or None if it cannot be stat-ed."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_size, info.st_mtime_ns


def check_records(names, shards, refs, *, read_records, check="structure", verbose=False,
                  stamps=None, device="cpu", device_id=0):
    """Checks the images of TFRecord records; returns `{name: reason}` for the bad ones.

    The rules of `check_bytes`. Results are cached like `check_files`', keyed on the
    record's name and its file's size and modification time.

    Args:
        names: the records' names (`"<file>#<record number>"`).
        shards, refs: where they lie, as `dalipipe.tfrecord.scan` gives them.
        read_records: `read_records(shards, refs)`, see `check_index`.
        check: `"structure"` or `"full"`.
        verbose: show a progress bar on stderr.
        stamps: optional dict that receives `shard: (size, mtime_ns)`.
        device: `"cpu"` or `"gpu"`, where `check="full"` decodes.
        device_id: the GPU's CUDA ordinal, for `device="gpu"`. Defaults to 0.
    """
    _check_level(check)
    signatures = [(info.st_size, info.st_mtime_ns) for info in map(os.stat, shards)]
    if stamps is not None:
        stamps.update(zip(shards, signatures))
    how = dict(full=check == "full", device=device, device_id=device_id)
    files = refs[:, 0].tolist() if len(refs) else []
    reasons = _cached_check(
        names, [signatures[f] for f in files],
        lambda chunk: _check_read(_record_images(read_records, shards, refs[chunk]), **how),
        mode=mode_of(check, device), what="records checked", verbose=verbose,
    )
    return {name: reason for name, reason in reasons.items() if reason is not None}


def _record_images(read_records, shards, refs):
    """`(image bytes, None)` per record, or `(None, reason)` for one that cannot be read."""
    try:
        return [(data, None) for data in read_records(shards, refs)]
    except ValueError:
        pass
    found = []
    for ref in refs:
        try:
            found.append((read_records(shards, ref[None])[0], None))
        except ValueError as e:
            found.append((None, f"not an image record ({e})"))
    return found


def _check_level(check):
    if check not in ("structure", "full"):
        raise ValueError(f"`check` must be one of {CHECKS}. Received: check={check!r}")


def check_index(index, *, check="structure", read_records=None, verbose=False, device="cpu",
                device_id=0):
    """Checks every sample of a `sources.Index`: files, or TFRecord records.

    Args:
        index: a `sources.Index`.
        check: `"structure"` or `"full"`.
        read_records: for an index of TFRecord records, the function that reads
            their images: `read_records(shards, refs)` returns a list of bytes, and
            raises ValueError for a record that is not an image record
            (`dalipipe.tfrecord.load_encoded`).
        verbose: show a progress bar on stderr.
        device: `"cpu"` or `"gpu"`, the DALI pipeline's: where `check="full"`
            decodes.
        device_id: the GPU's CUDA ordinal, for `device="gpu"`. Defaults to 0.

    Returns:
        `(bad, index)`: `{file path or record name: reason}` for the bad ones, and the
        index with `stamps`, int64 `(size, mtime_ns)` rows of its files (of its
        TFRecord files for records) as they were when checked, for
        `verify_unchanged`.
    """
    stamps = {}
    if index.refs is not None:
        if read_records is None:
            raise TypeError("check_index() needs `read_records` for TFRecord records")
        bad = check_records(index.file_paths, index.tfrecord_files, index.refs, check=check,
                            read_records=read_records, verbose=verbose, stamps=stamps,
                            device=device, device_id=device_id)
        paths = index.tfrecord_files
    else:
        bad = check_files(index.file_paths, check=check, verbose=verbose, stamps=stamps,
                          device=device, device_id=device_id)
        paths = index.file_paths
    table = np.array([stamps.get(p, (-1, -1)) for p in paths], np.int64).reshape(-1, 2)
    return bad, type(index)(**{**index._asdict(), "stamps": table})
