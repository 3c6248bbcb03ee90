"""Which sources are TFRecord files: a glob pattern, one file or a list of files, each
told by its first record header."""

import collections
import glob
import os
import stat

from dalipipe.tfrecord.format import FOOTER, HEADER, data_length
from dalipipe.utils import IMAGE_EXTENSIONS, UNDECODABLE_EXTENSIONS

GLOB_CHARS = ("*", "?", "[")


def is_tfrecord(path):
    """Whether `path` is a regular file that starts with a valid TFRecord header.

    Reads the first 12 bytes: the length of the first record and its checksum, and
    checks that this record fits in the file. Never raises: a missing, unreadable,
    empty or special file (a FIFO, a directory) is not a TFRecord file.
    """
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode) or info.st_size < HEADER + FOOTER:
            return False
        with open(path, "rb") as f:
            length = data_length(f.read(HEADER))
    except (OSError, ValueError, TypeError):
        return False
    return length is not None and HEADER + length + FOOTER <= info.st_size


def tfrecord_files(source):
    """The TFRecord files of `source`, or None if `source` is not a TFRecord source.

    Args:
        source: a glob pattern (a string with `*`, `?` or `[`), such as
            `"data/train-*-of-01024"`; the path of one TFRecord file; or a list of
            paths of TFRecord files. Index files that a pattern matches beside their
            shards (`train-00000-of-01024.idx`) are left out.

    Returns:
        The absolute paths of the files (sorted for a pattern, in the given order for
        a list), or None when `source` is something
        else (a directory, a CSV file, a DataFrame, a list of image paths, a path
        that does not exist), for the caller to treat as another kind of source.

    Raises:
        ValueError: for a pattern that matches no file, or matches a file that is not
            a TFRecord file, and for a list that mixes TFRecord and other files; the
            message names the pattern or the file.
    """
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if any(c in path for c in GLOB_CHARS) and not os.path.exists(path):
            return _glob_tfrecords(path)
        return [os.path.abspath(path)] if is_tfrecord(path) else None
    if not isinstance(source, (list, tuple)) or not source:
        return None
    if not all(isinstance(p, (str, os.PathLike)) for p in source):
        return None
    paths = [os.fsdecode(os.fspath(p)) for p in source]
    # Images are told by name, not opened: a list of a million images stays cheap.
    images = IMAGE_EXTENSIONS + UNDECODABLE_EXTENSIONS
    found = [not p.lower().endswith(images) and is_tfrecord(p) for p in paths]
    if not any(found):
        return None
    if not all(found):
        other = paths[found.index(False)]
        raise ValueError(
            f"A list of TFRecord files must hold TFRecord files only. Not a TFRecord file "
            f"(no valid TFRecord header): {other!r}. Received: source with "
            f"{sum(found)} TFRecord file(s) of {len(paths)} paths"
        )
    files = [os.path.abspath(p) for p in paths]
    repeated = sorted(f for f, count in collections.Counter(files).items() if count > 1)
    if repeated:
        raise ValueError(
            f"A list of TFRecord files must name each file once. Repeated: {repeated}"
        )
    return files


def _glob_tfrecords(pattern):
    matches = sorted(glob.glob(os.path.expanduser(pattern)))
    matched = set(matches)
    # An index written beside its shard matches a pattern such as "train-*" too.
    matches = [m for m in matches if not (m.endswith(".idx") and m[:-4] in matched)]
    if not matches:
        raise ValueError(
            f"`source` must be a directory, a CSV file, a DataFrame, a list of file "
            f"paths, or a pattern that matches TFRecord files. No file matches the "
            f"pattern: source={pattern!r}"
        )
    for match in matches:
        if not is_tfrecord(match):
            raise ValueError(
                f"A pattern given as `source` must match TFRecord files only. "
                f"Not a TFRecord file (no valid TFRecord header): {match!r}. "
                f"Received: source={pattern!r}"
            )
    return [os.path.abspath(m) for m in matches]
