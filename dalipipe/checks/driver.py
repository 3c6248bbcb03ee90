"""The check's entry points: a file, some bytes, a list of files, TFRecord records,
or a whole `sources.Index`.

Each reads what it checks (`dalipipe.storage.fetch`, for files local or remote), has
the structure rules and then the decoder judge it, and, for lists, keeps the
`Verdict`s in the cache (`_cached_check`, the one loop that files and records share,
which processes sharing the cache split between them).
"""

import collections
import hashlib
import os
import socket
import sqlite3
import time
import uuid

from dalipipe.checks.cache import VERSION, cache_path, mode_of, open_cache
from dalipipe.checks.decoder import decoder_verdicts
from dalipipe.checks.structure import check_structure
from dalipipe.checks.verdicts import Verdict, bad_files
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
        path: a file path or an `s3://` or `gs://` URI.
        full: decode the whole image (on `device`), as `check="full"`. Defaults to
            False.
        device: "cpu" or "gpu": where a full decode runs. Defaults to "cpu".
        device_id: the GPU's CUDA ordinal, for `device="gpu"`. Defaults to 0.
    """
    how = dict(full=full, device=device, device_id=device_id)
    return _judge(fetch.read_files([path]), **how)[0][0]


def check_bytes(data, *, full=False, device="cpu", device_id=0):
    """Returns None for the bytes of a sound image, else the reason they are not one.

    The checks of `check_file` after its file system ones, for images that are not
    files of their own (the records of a TFRecord file). Arguments as `check_file`'s.
    """
    return _check_images([data], full=full, device=device, device_id=device_id)[0][0]


def _check_images(images, *, full, device, device_id=0):
    """`(reason, size)` for each encoded image (bytes): the structure rules, then
    DALI's decoder on the images that pass them (on `device` when `full`, else on
    the CPU). `reason`: None for a sound image; `size`: `(width, height)` as the
    decoder read the header, or None."""
    found, tests = [], []
    for data in images:
        reason, (how, label) = check_structure(data)
        found.append((reason, None))
        tests.append(("full" if full else how, label))
    todo = [i for i, (reason, _) in enumerate(found) if reason is None]
    judged = decoder_verdicts([images[i] for i in todo], [tests[i] for i in todo],
                              device=device if full else "cpu", device_id=device_id)
    for i, verdict in zip(todo, judged):
        found[i] = verdict
    return found


def _judge(read, **how):
    """`(reason, size)` for each `(bytes, None)` or `(None, reason)` of `read` (as
    `fetch.read_files` gives them): the latter's reason, or `_check_images`' verdict
    on the bytes (`how`: its arguments)."""
    found = [(reason, None) for _, reason in read]
    readable = [i for i, (data, _) in enumerate(read) if data is not None]
    for i, verdict in zip(readable, _check_images([read[i][0] for i in readable], **how)):
        found[i] = verdict
    return found


def _cached_check(keys, stamps, judge_chunk, *, mode, what, verbose):
    """A `Verdict` for each key: from the cache where it answers, else from
    `judge_chunk`, a chunk of keys at a time, each chunk's verdicts committed.

    The chunks are fixed runs of `_CHUNK` keys of `keys`, so processes that check
    the same list on one cache agree on them, and share them out by claims (see
    `dalipipe.checks.cache`): each checks the chunks it claims, and waits for the
    verdicts of those others hold. Without a cache, or when the cache fails (a
    warning says so), every chunk is checked here.

    Args:
        keys: the names (str) of files or records.
        stamps: per key, the stamp of its file (`dalipipe.storage.fetch`), or None
            for a file that cannot be stat-ed (checked, and never cached).
        judge_chunk: `judge_chunk(indices)` gives `(reason, size)` for `keys[i]` for
            each `i` of the list `indices` (see `_judge`).
        mode: the cache's name of the check (`cache.mode_of`).
        what: the progress bar's label, e.g. "files checked".
        verbose: show the progress bar on stderr.

    Returns:
        A list of `len(keys)` `Verdict`s, in the order of `keys`.
    """
    verdicts = [None] * len(keys)
    chunks = [list(range(start, min(start + _CHUNK, len(keys))))
              for start in range(0, len(keys), _CHUNK)]
    cache = open_cache()
    with progress(len(keys), what, enabled=verbose, delay=CHECK_BAR_DELAY) as bar:
        def answer(indices, found):
            for i, verdict in zip(indices, found):
                verdicts[i] = verdict
            bar.update(len(indices))

        def judge(indices):
            COUNTS["computed"] += len(indices)
            found = [Verdict(keys[i], reason, size, stamps[i])
                     for i, (reason, size) in zip(indices, judge_chunk(indices))]
            answer(indices, found)
            return found

        if cache is not None:
            try:
                _shared_check(cache, chunks, keys, stamps, mode, judge, answer)
            except sqlite3.Error as e:
                warn_without_cache(cache_path(cache_dir()), str(e))
            finally:
                cache.close()
        for chunk in chunks:  # without a cache: what it did not answer
            left = [i for i in chunk if verdicts[i] is None]
            if left:
                judge(left)
    return verdicts


def _shared_check(cache, chunks, keys, stamps, mode, judge, answer):
    """`_cached_check`'s work with a cache: `answer(indices, verdicts)` for every key
    of `chunks` from the cache, and `judge(indices)` for those of the chunks this
    process claims, each chunk's verdicts committed with its claim dropped."""
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
    pending = {}  # chunk id -> the indices of keys without a verdict yet
    for chunk in chunks:
        left = _from_cache(cache, chunk, keys, stamps, mode, answer)
        if left:
            digest = hashlib.sha1(f"{mode}\0{VERSION}".encode())
            for i in chunk:
                digest.update(b"\0" + os.fsencode(keys[i]))
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
                left = _from_cache(cache, pending.pop(chunk_id), keys, stamps, mode, answer)
                cache.put(judge(left) if left else [], mode, release=chunk_id)
                held.remove(chunk_id)
            if pending and not claimed:  # all held by others: read what they wrote
                for chunk_id in list(pending):
                    pending[chunk_id] = _from_cache(cache, pending[chunk_id], keys, stamps,
                                                    mode, answer)
                    if not pending[chunk_id]:
                        del pending[chunk_id]
                if pending:
                    time.sleep(_POLL_S)
    finally:
        if held:
            cache.release(held)


def _from_cache(cache, indices, keys, stamps, mode, answer):
    """Answers the keys of `indices` that the cache answers; returns the others."""
    cached = cache.answers([keys[i] for i in indices], [stamps[i] for i in indices], mode)
    found = [(i, verdict) for i, verdict in zip(indices, cached) if verdict is not None]
    COUNTS["cached"] += len(found)
    answer([i for i, _ in found], [verdict for _, verdict in found])
    return [i for i, verdict in zip(indices, cached) if verdict is None]


def check_paths(paths, *, check="structure", verbose=False, device="cpu", device_id=0):
    """Checks `paths`; returns a `Verdict` for each.

    Args:
        paths: file paths and `s3://` or `gs://` URIs.
        check: `"structure"` (structure, headers, and the decoder's set-up) or
            `"full"` (a full decode). See `dalipipe.checks`.
        verbose: show a progress bar on stderr.
        device: `"cpu"` or `"gpu"`: the device of the DALI pipeline, where
            `check="full"` decodes.
        device_id: the GPU's CUDA ordinal, for `device="gpu"`. Defaults to 0.

    Returns:
        A list of `len(paths)` `Verdict`s, in the order of `paths`: the reason (None
        for a sound image), the `(width, height)` the decoder read of its header
        (nvImageCodec; None where PIL stands in), and the file's stamp.
    """
    _check_level(check)
    how = dict(full=check == "full", device=device, device_id=device_id)
    return _cached_check(
        paths, fetch.stamps(paths),  # objects: (size, ETag hash)
        lambda chunk: _judge(fetch.read_files([paths[i] for i in chunk]), **how),
        mode=mode_of(check, device), what="files checked", verbose=verbose,
    )


def check_files(paths, *, check="structure", verbose=False, device="cpu", device_id=0):
    """Checks `paths`; returns `{path: reason}` for the bad ones (the bad ones of
    `check_paths`, whose arguments it takes)."""
    return bad_files(check_paths(paths, check=check, verbose=verbose, device=device,
                                 device_id=device_id))


def check_records(names, shards, refs, *, read_records, check="structure", verbose=False,
                  device="cpu", device_id=0):
    """Checks the images of TFRecord records; returns a `Verdict` for each.

    The rules of `check_bytes`. Results are cached like `check_paths`', keyed on the
    record's name and its file's stamp, which is the record's `Verdict.stamp`.

    Args:
        names: the records' names (`"<file>#<record number>"`).
        shards, refs: where they lie, as `dalipipe.tfrecord.scan` gives them.
        read_records: `read_records(shards, refs)`, see `check_index`.
        check: `"structure"` or `"full"`.
        verbose: show a progress bar on stderr.
        device: `"cpu"` or `"gpu"`, where `check="full"` decodes.
        device_id: the GPU's CUDA ordinal, for `device="gpu"`. Defaults to 0.

    Returns:
        A list of `len(names)` `Verdict`s, in the order of `names`.
    """
    _check_level(check)
    shard_stamps = fetch.stamps(shards)  # objects too: tar shards in s3:// or gs://
    how = dict(full=check == "full", device=device, device_id=device_id)
    files = refs[:, 0].tolist() if len(refs) else []
    return _cached_check(
        names, [shard_stamps[f] for f in files],
        lambda chunk: _judge(read_each(read_records, shards, refs[chunk]), **how),
        mode=mode_of(check, device), what="records checked", verbose=verbose,
    )


def read_each(read_records, shards, refs, *, reason="not an image record"):
    """`(bytes, None)` per record at `refs` (int64 `(n, k)`, the index's rows), or
    `(None, reason)` for one that cannot be read: all in one call, else one by one to
    find which."""
    try:
        return [(data, None) for data in read_records(shards, refs)]
    except ValueError:
        pass
    found = []
    for ref in refs:
        try:
            found.append((read_records(shards, ref[None])[0], None))
        except ValueError as e:
            found.append((None, f"{reason} ({e})"))
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
        A list of `len(index)` `Verdict`s, in the order of `index.file_paths`: the
        reason (None for a sound image), the `(width, height)` the decoder read of
        its header (also from the cache: the GPU decoder's preallocation hints), and
        the stamp of the file (of its TFRecord file, for a record) as it was when
        checked (for `verify_unchanged`). A sample of `index.faults` (found bad while
        indexed: a tar shard's sample whose label cannot be read) has that reason
        where its image has none. `apply_policy` makes the index to train on.
    """
    how = dict(check=check, verbose=verbose, device=device, device_id=device_id)
    if index.refs is None:
        verdicts = check_paths(index.file_paths, **how)
    elif read_records is None:
        raise TypeError("check_index() needs `read_records` for TFRecord records")
    else:
        verdicts = check_records(index.file_paths, index.tfrecord_files, index.refs,
                                 read_records=read_records, **how)
    faults = index.faults or {}
    return [v if v.reason is not None or v.path not in faults else
            v._replace(reason=faults[v.path]) for v in verdicts]
