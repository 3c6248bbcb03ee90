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
shard and member. A `.json` member that is not JSON is a fault of its sample
(`Shards.faults`), not of its shard: it matters where the sample's label or boxes
come from it (`label_values`, `dalipipe.annotations.members`), and there the sample
is a bad file like a damaged image.
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
_INDEX_VERSION = 3  # bump when what `_read_index` caches changes
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
        faults: why each sample's `.json` member cannot be read (it is not JSON),
            naming the shard and the member; None where it has none or reads.
    """

    shards: list
    refs: np.ndarray
    names: list
    cls: list
    meta: list
    members: list
    faults: list

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

    refs, names, cls, meta, members, faults = [], [], [], [], [], []
    with progress(len(shards), "tar shards indexed", enabled=verbose) as bar, \
            concurrent.futures.ThreadPoolExecutor(INDEX_WORKERS) as pool:
        # Objects are indexed `INDEX_WORKERS` at a time (each one streamed whole).
        indexes = pool.map(_shard_index, shards) if any(map(is_remote, shards)) \
            else map(_shard_index, shards)
        for number, (shard, index) in enumerate(zip(shards, indexes)):
            for _, member, offset, size, text, obj, others, fault in index["samples"]:
                refs.append((number, offset, size))
                names.append(f"{shard}#{member}")
                cls.append(text)
                meta.append(obj)
                members.append({suffix: tuple(where) for suffix, where in others.items()})
                faults.append(fault)
            bar.update(1)
    if not refs:
        raise ValueError(f"The tar shards hold no image: {shards[:3]}")
    return Shards(list(shards), np.array(refs, np.int64).reshape(-1, 3), names, cls, meta,
                  members, faults)


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
    """{"samples": [[key, image member, offset, size, cls text, json, companions,
    fault], ...]} of a shard read in order (companions: `{extension: [member, offset,
    size]}`; fault: why its `.json` member is not JSON, else None) (`fileobj` a file
    or a streamed object of `size` bytes).

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
                                         "members": {}, "fault": None}
                order.append(key)
            suffix = suffix.lower()
            if suffix in IMAGE_SUFFIXES:
                sample["images"].append((member.name, member.offset_data, member.size))
            elif suffix == "cls":
                sample["cls"] = archive.extractfile(member).read().decode(
                    "utf-8", "replace").strip()
            elif suffix == "json":
                sample["json"], sample["fault"] = _json_member(
                    shard, member.name, archive.extractfile(member).read())
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
        found.append([key, *images[0], *(samples[key][k] for k in
                                         ("cls", "json", "members", "fault"))])
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


def _json_member(shard, name, data):
    """`(object, None)` of a `.json` member, or `(None, why)` for one that is not
    JSON, naming the shard and the member."""
    try:
        return json.loads(data.decode("utf-8", "replace")), None
    except ValueError as e:
        return None, f"its .json member {shard}#{name} is not JSON ({e})"


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


def label_values(found, labels, *, allow_bad=False):
    """`(values, texts, bad)` of the samples' labels, the form `sources` encodes.

    Args:
        found: `Shards`.
        labels: `"inferred"` for `.cls` members, or the name of a `.json` field.
        allow_bad: keep the samples whose label cannot be read (a `.cls` text that
            is not an integer, a `.json` member that is not JSON or lacks the field)
            in `bad`, for the check to report them with the other bad files, as
            `sources.index_source`'s `allow_missing` keeps missing files; unless they
            are half the samples or more, which is a wrong `labels`, not damaged
            members.

    Returns:
        `values`: `int64 (n,)`, with `texts` None for integer labels; for string
        labels, `values` number the sorted distinct `texts`. `bad`: `{sample name:
        reason}` of the samples whose label cannot be read (empty without
        `allow_bad`); each has another sample's value and text.

    Raises:
        ValueError: naming the shard and member of the first sample without the
            label, or whose label is neither an integer nor a string (and how many
            there are); for labels of both kinds.
    """
    inferred = labels == "inferred"
    raw, bad = [], {}
    for name, cls, meta, fault in zip(found.names, found.cls, found.meta, found.faults):
        if inferred:
            value = None if cls is None else _integer(cls)
            why = None if value is not None else (
                "has no .cls member" if cls is None else f"has the .cls text {cls!r}")
        else:
            value = meta.get(labels) if isinstance(meta, dict) else None
            member = companion(name, "json")
            why = (None if isinstance(value, (int, str)) and not isinstance(value, bool) else
                   fault or ("has no .json member" if meta is None else
                             f"has no field {labels!r} in its .json member {member}"
                             if not isinstance(meta, dict) or labels not in meta else
                             f"has {value!r} in the field {labels!r} of its .json member "
                             f"{member}, not an integer or a string"))
        if why is not None:
            bad[name] = why
        raw.append(value)
    if bad and (not allow_bad or 2 * len(bad) > len(raw)):
        name, why = next(iter(bad.items()))
        more = f" (and {len(bad) - 1} more of the {len(raw)} samples)" if len(bad) > 1 else ""
        if inferred:
            raise ValueError(
                f"`labels='inferred'` reads a .cls member holding an integer per sample: "
                f"{name} {why}{more}. Pass labels=None for images only, or the name of a "
                f".json field.")
        raise ValueError(
            f"`labels` names a field of each sample's .json member holding an integer or a "
            f"string. The sample {name} {why}{more}. Received: labels={labels!r}")
    if bad:
        stand_in = next(v for name, v in zip(found.names, raw) if name not in bad)
        raw = [stand_in if name in bad else v for name, v in zip(found.names, raw)]
    kinds = {type(v) for v in raw}
    if kinds == {int}:
        return np.array(raw, np.int64), None, bad
    if kinds == {str}:
        _, values = np.unique(np.array(raw, dtype=object).astype(str), return_inverse=True)
        return values.astype(np.int64), raw, bad
    raise ValueError(f"The labels of tar shards must be all integers or all strings. "
                     f"Received: labels={labels!r} with values of types "
                     f"{sorted(k.__name__ for k in kinds)}")


def companion(name, extension):
    """`"<shard>#<key>.<extension>"`: the member of `extension` beside the image member
    of the sample `name` (`"<shard>#<image member>"`)."""
    shard, member = name.rsplit("#", 1)
    folder, base = posixpath.split(member)
    return f"{shard}#{posixpath.join(folder, base.partition('.')[0])}.{extension}"


def _integer(text) -> Optional[int]:
    try:
        return int(text)
    except ValueError:
        return None
