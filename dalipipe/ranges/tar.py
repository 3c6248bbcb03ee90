"""WebDataset tar shards: which sources are shards, their index, labels and members.

A shard is an uncompressed tar file (`.tar`). Its members are grouped into samples by
key, the member's name up to the first dot of its base name (`"a/000123.jpg"` and
`"a/000123.cls"` make the sample `"a/000123"`), as WebDataset groups them. Each sample
has one image member (`IMAGE_SUFFIXES`); a `.cls` member holds its class as an integer
in text, a `.json` member an object of which `labels=<field>` names the field. Other
members (a mask `.seg.png`, boxes in `.boxes.json`) are companions, found by their
extension (`Shards.members`, read by `dalipipe.annotations.members`).

The index of a shard (each sample's key, image member, its byte range, its `.cls`
and `.json`, and the byte range of each companion) is read once with Python's `tarfile` and cached per shard
(`ranges.cache.cached_scan`, kind `tar-index`), never written beside the shard.
Samples are named `"<shard>#<image member>"`, so that a damaged one is named by
shard and member.
"""

import collections
import concurrent.futures
import fnmatch
import glob
import json
import os
import posixpath
import re
import tarfile
from typing import NamedTuple, Optional

import numpy as np

from dalipipe.ranges.cache import cached_scan
from dalipipe.ranges.read import is_remote, read_ranges

IMAGE_SUFFIXES = ("jpg", "jpeg", "png", "webp", "bmp", "tif", "tiff", "jp2", "ppm", "pgm", "pbm",
                  "pnm")
INDEX_WORKERS = 8  # objects indexed at once
_INDEX_VERSION = 2  # bump when what `_read_index` caches changes
_BRACE = re.compile(r"\{([^{}]*)\}")


def is_tar_path(path):
    """Whether `path` names a tar shard (ends in `.tar`)."""
    return isinstance(path, (str, os.PathLike)) and os.fsdecode(os.fspath(path)).lower().endswith(".tar")


def expand_braces(pattern):
    """WebDataset's brace notation: `"a-{000..002}.tar"` -> `a-000.tar`, `a-001.tar`,
    `a-002.tar` (zero-padded to the first bound's width); `"{a,b}.tar"` -> both."""
    match = _BRACE.search(pattern)
    if match is None:
        return [pattern]
    body, head, tail = match.group(1), pattern[:match.start()], pattern[match.end():]
    numbers = re.fullmatch(r"(\d+)\.\.(\d+)", body)
    if numbers:
        low, high = numbers.groups()
        items = [str(i).zfill(len(low)) for i in range(int(low), int(high) + 1)]
    else:
        items = body.split(",")
    return [path for item in items for path in expand_braces(head + item + tail)]


def tar_files(source):
    """The tar shards of `source`, or None when `source` is not tar shards.

    Args:
        source: a brace pattern (`"train-{000000..000127}.tar"`), a glob pattern
            (`"shards/*.tar"`), the path of one `.tar` file, or a list of them; local
            paths or `s3://`/`gs://` URIs (brace patterns and lists).

    Returns:
        list of the shards' absolute paths or URIs (a glob's in name order), or None.

    Raises:
        ValueError: for a pattern that matches no shard, a shard that does not exist,
            a list that mixes `.tar` files with other files, or a shard named twice;
            the message names the pattern or the file.
    """
    if isinstance(source, (str, os.PathLike)):
        text = os.fsdecode(os.fspath(source))
        if not text.lower().endswith(".tar"):
            return None
        paths = []
        for path in expand_braces(text):
            if any(c in path for c in "*?["):
                matched = _glob_objects(path) if is_remote(path) else \
                    sorted(glob.glob(os.path.expanduser(path)))
                if not matched:
                    raise ValueError(f"No tar shard matches the pattern {path!r}. "
                                     f"Received: source={text!r}")
                paths += matched
            else:
                paths.append(path)
        return _checked(paths, f"source={text!r}")
    if not isinstance(source, (list, tuple)) or not source or \
            not all(isinstance(p, (str, os.PathLike)) for p in source):
        return None
    found = [is_tar_path(p) for p in source]
    if not any(found):
        return None
    if not all(found):
        other = os.fsdecode(os.fspath(source[found.index(False)]))
        raise ValueError(
            f"A list of tar shards must hold `.tar` files only. Not a tar shard: {other!r}. "
            f"Received: source with {sum(found)} tar shard(s) of {len(source)} paths")
    return _checked([os.fsdecode(os.fspath(p)) for p in source],
                    f"source with {len(source)} paths")


def _glob_objects(pattern):
    """The URIs of the objects that a pattern matches (one listing of the folder
    before its first wildcard)."""
    from dalipipe import storage

    first = min(pattern.index(c) for c in "*?[" if c in pattern)
    folder = pattern[:pattern.rindex("/", 0, first) + 1]
    try:
        listed = storage.list_objects(folder)
    except ValueError:  # an empty prefix: no match
        return []
    depth = pattern.count("/")  # a wildcard stays in its folder, as a local glob's does
    return sorted(u for u in (folder + o.key for o in listed)
                  if u.count("/") == depth and fnmatch.fnmatchcase(u, pattern))


def _checked(paths, received):
    """`paths` made absolute, each an existing file (objects are found when indexed)
    and named once."""
    paths = [p if is_remote(p) else os.path.abspath(os.path.expanduser(p)) for p in paths]
    for path in paths:
        if not is_remote(path) and not os.path.isfile(path):
            raise ValueError(f"No such tar shard: {path!r}. Received: {received}")
    repeated = sorted(p for p, count in collections.Counter(paths).items() if count > 1)
    if repeated:
        raise ValueError(f"A tar shard is named more than once: {repeated[:5]}. "
                         f"Received: {received}")
    return paths


class Shards(NamedTuple):
    """The samples of tar shards, in shard order then member order.

    Attributes:
        shards: the shards' paths or URIs.
        refs: int64 `(n, 3)`: shard number, offset and size of each image member.
        names: `"<shard>#<image member>"` of each sample.
        cls: the `.cls` text of each sample, or None where it has none.
        meta: the `.json` object of each sample, or None where it has none.
        members: each sample's companions, `{extension: (name, offset, size)}`
            (the extension in lower case after the key's dot, e.g. `"seg.png"`).
    """

    shards: list
    refs: np.ndarray
    names: list
    cls: list
    meta: list
    members: list

    def __len__(self):
        return len(self.refs)


def scan(shards, verbose=False):
    """The samples of tar shards (`Shards`), each shard indexed once and cached; an
    object is streamed whole to be indexed, `INDEX_WORKERS` at a time.

    Raises:
        ValueError: naming the shard (and the sample) that is not a tar file, or
            whose sample has no image member or more than one.
    """
    from dalipipe.utils import progress

    refs, names, cls, meta, members = [], [], [], [], []
    with progress(len(shards), "tar shards indexed", enabled=verbose) as bar, \
            concurrent.futures.ThreadPoolExecutor(INDEX_WORKERS) as pool:
        # Objects are indexed `INDEX_WORKERS` at a time (each one streamed whole).
        indexes = pool.map(_shard_index, shards) if any(map(is_remote, shards)) \
            else map(_shard_index, shards)
        for number, (shard, index) in enumerate(zip(shards, indexes)):
            found = index["samples"]
            refs += [(number, offset, size) for _, _, offset, size, *_ in found]
            names += [f"{shard}#{member}" for _, member, *_ in found]
            cls += [c for *_, c, _, _ in found]
            meta += [m for *_, m, _ in found]
            members += [{suffix: tuple(where) for suffix, where in m.items()}
                        for *_, m in found]
            bar.update(1)
    if not refs:
        raise ValueError(f"The tar shards hold no image: {shards[:3]}")
    return Shards(list(shards), np.array(refs, np.int64).reshape(-1, 3), names, cls, meta,
                  members)


def _shard_index(shard):
    if is_remote(shard):
        from dalipipe import storage

        info = storage.stat(shard)
        signature = {"version": _INDEX_VERSION, "path": shard, "size": info.size,
                     "etag": info.etag}

        def read():
            with storage.open_object(shard, buffer_size=8 << 20) as f:
                return _read_index(shard, f, info.size)
    else:
        info = os.stat(shard)
        signature = {"version": _INDEX_VERSION, "path": shard, "size": info.st_size,
                     "mtime_ns": info.st_mtime_ns}

        def read():
            with open(shard, "rb", buffering=1 << 20) as f:
                return _read_index(shard, f, info.st_size)
    return cached_scan("tar-index", shard, signature, read)


def _read_index(shard, fileobj, size):
    """{"samples": [[key, image member, offset, size, cls text, json, companions], ...]}
    of a shard read in order (companions: `{extension: [member, offset, size]}`) (`fileobj` a file or a streamed object of `size` bytes).

    Raises:
        ValueError: for a shard cut short (it lacks the end-of-archive blocks, or a
            member runs past its end), naming the shard and the last member found:
            the samples after it are lost, as for a truncated TFRecord file.
    """
    samples, order = {}, []
    last, end = None, 0
    try:
        archive = tarfile.open(fileobj=fileobj, mode="r|")
    except tarfile.TarError as e:
        raise ValueError(f"Not an uncompressed tar file ({e}): {shard!r}") from None
    try:
        for member in _members(archive, shard):
            last, end = member.name, member.offset_data + -(-member.size // 512) * 512
            if not member.isfile():
                continue
            folder, base = posixpath.split(member.name)
            stem, _, suffix = base.partition(".")
            key = posixpath.join(folder, stem)
            sample = samples.get(key)
            if sample is None:
                sample = samples[key] = {"images": [], "cls": None, "json": None,
                                         "members": {}}
                order.append(key)
            suffix = suffix.lower()
            if suffix in IMAGE_SUFFIXES:
                sample["images"].append((member.name, member.offset_data, member.size))
            elif suffix in ("cls", "json"):
                data = archive.extractfile(member).read()
                sample[suffix] = _small_member(shard, member.name, suffix, data)
            else:
                sample["members"][suffix] = [member.name, member.offset_data, member.size]
    except _Cut:
        end = size + 1  # a header or data read past the end
    finally:
        archive.close()
    if size < end + 1024:  # a tar file ends with two zero blocks
        raise ValueError(
            f"Truncated tar shard ({size} bytes): it ends inside or after the member "
            f"{last!r}, so the samples after it are lost: {shard!r}")
    found = []
    for key in order:
        images = samples[key]["images"]
        if len(images) != 1:
            what = "no image member" if not images else \
                f"{len(images)} image members ({', '.join(m for m, _, _ in images)})"
            raise ValueError(
                f"Each sample of a tar shard must have one image member (a name ending in "
                f"{', '.join('.' + s for s in IMAGE_SUFFIXES[:4])}, ...). The sample "
                f"{key!r} of {shard!r} has {what}")
        found.append([key, *images[0], samples[key]["cls"], samples[key]["json"],
                      samples[key]["members"]])
    return {"samples": found}


class _Cut(Exception):
    """A tar file read past its end."""


def _members(archive, shard):
    """The members of a streamed tar file; `_Cut` where it ends inside one."""
    while True:
        try:
            member = archive.next()
        except tarfile.ReadError as e:
            if "unexpected end" in str(e):
                raise _Cut() from None
            raise ValueError(f"Corrupt tar shard ({e}): {shard!r}") from None
        except tarfile.TarError as e:
            raise ValueError(f"Corrupt tar shard ({e}): {shard!r}") from None
        if member is None:
            return
        yield member


def _small_member(shard, name, suffix, data):
    text = data.decode("utf-8", "replace")
    if suffix == "cls":
        return text.strip()
    try:
        return json.loads(text)
    except ValueError as e:
        raise ValueError(f"The member {name!r} of {shard!r} is not JSON ({e})") from None


def members_bytes(shards, refs):
    """The bytes of image members (`refs` as `Shards.refs`).

    Raises:
        ValueError: naming the shard and the byte range of a member cut short.
    """
    refs = np.asarray(refs, np.int64).reshape(-1, 3)
    found = read_ranges(shards, refs)
    for (shard, offset, size), data in zip(refs.tolist(), found):
        if len(data) != size:
            raise ValueError(
                f"Truncated tar shard: read {len(data)} of the {size} bytes of the member "
                f"at byte {offset} of {shards[shard]!r}")
    return found


def label_values(found, labels):
    """`(values, texts)` of the samples' labels, the form `sources` encodes.

    Args:
        found: `Shards`.
        labels: `"inferred"` for `.cls` members, or the name of a `.json` field.

    Returns:
        `(int64 (n,), None)` for integer labels; `(int64 (n,), texts)` for string
        labels: `values` number the sorted distinct texts.

    Raises:
        ValueError: naming the shard and member of a sample without the label, or
            whose label is neither an integer nor a string.
    """
    inferred = labels == "inferred"
    raw = []
    for name, cls, meta in zip(found.names, found.cls, found.meta):
        if inferred:
            value = None if cls is None else _integer(cls)
            if value is None:
                why = "no .cls member" if cls is None else f"the .cls text {cls!r}"
                raise ValueError(
                    f"`labels='inferred'` reads a .cls member holding an integer per sample: "
                    f"{name} has {why}. Pass labels=None for images only, or the name of a "
                    f".json field.")
        else:
            value = meta.get(labels) if isinstance(meta, dict) else None
            if isinstance(value, bool) or not isinstance(value, (int, str)):
                raise ValueError(
                    f"`labels` names a field of each sample's .json member holding an integer "
                    f"or a string. The sample {name} has {value!r}"
                    f"{'' if meta is not None else ' (no .json member)'}. "
                    f"Received: labels={labels!r}")
        raw.append(value)
    kinds = {type(v) for v in raw}
    if kinds == {int}:
        return np.array(raw, np.int64), None
    if kinds == {str}:
        _, values = np.unique(np.array(raw, dtype=object).astype(str), return_inverse=True)
        return values.astype(np.int64), raw
    raise ValueError(f"The labels of tar shards must be all integers or all strings. "
                     f"Received: labels={labels!r} with values of types "
                     f"{sorted(k.__name__ for k in kinds)}")


def _integer(text) -> Optional[int]:
    try:
        return int(text)
    except ValueError:
        return None
