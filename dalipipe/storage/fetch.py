"""Reading files' bytes, local or in object storage (`s3://`, `gs://`): the one read
layer of dalipipe, and the stamps that say when a file was replaced.

`read_files` reads each file whole: a local file from disk, an object with one
request, the objects in parallel (`storage.MAX_WORKERS` at a time); `read_heads`
reads the first bytes of each. A file that
cannot be read gives its reason, worded here once for local files and objects:
"does not exist", "empty file (0 bytes)" or "empty object (0 bytes)", "not a regular
file", "broken symbolic link (to '...')", "cannot be read (<the system's message>)".
The check (`dalipipe.checks`) keeps the reasons as verdicts; a batch read during
training (`read_batch`) raises the one error `unreadable` words, naming the file.

The check reads every file whole, once: the JPEG rule looks for the end-of-image
marker after the headers and the decoder runs every scan's set-up, PNG chunks are
checked up to IEND, so no head-and-tail read keeps the guarantee for them (see
docs/storage.md).

A stamp is two int64 that change when a file is replaced: `(size, mtime_ns)` for a
local file, `(size, a hash of the ETag)` for an object (`ObjectInfo.stamp`).
"""

import os
import stat

from dalipipe import storage


def read_files(paths):
    """The bytes of each of `paths`, or the reason it cannot be read.

    Args:
        paths: local file paths and `s3://` or `gs://` URIs, mixed as they come.

    Returns:
        A list aligned with `paths` of `(bytes, None)`, or `(None, reason)` (a str,
        see the module's doc) for a file that cannot be read.

    Raises:
        PermissionError, ConnectionError, ImportError: see `dalipipe.storage`; they
            concern the credentials, the endpoint or the client, not one file.
    """
    remote = [storage.is_remote(p) for p in paths]
    if not any(remote):
        return [_read_local(p) for p in paths]
    fetched = iter(storage.map_objects([p for p, r in zip(paths, remote) if r], _object,
                                       verbose=False))
    return [next(fetched) if is_uri else _read_local(path) for path, is_uri in zip(paths, remote)]


def read_heads(paths, size):
    """The first `size` bytes of each of `paths` (fewer where a file is shorter): for
    what a file's header says, without reading it whole (one ranged GET an object).

    Returns:
        A list aligned with `paths` of bytes, or None for a file that cannot be read
        or is empty (`read_files` gives the reason).

    Raises:
        PermissionError, ConnectionError, ImportError: as `read_files`.
    """
    remote = [storage.is_remote(p) for p in paths]
    fetched = iter(storage.read_heads([p for p, r in zip(paths, remote) if r], size)
                   if any(remote) else ())
    return [next(fetched) if is_uri else _read_local_head(path, size)
            for path, is_uri in zip(paths, remote)]


def _read_local_head(path, size):
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None  # a FIFO would block the read forever
        with open(path, "rb") as f:
            return f.read(size) or None
    except OSError:
        return None


def read_batch(paths):
    """The bytes of each of `paths`, files listed before training (a batch's).

    Returns:
        A list of bytes aligned with `paths`.

    Raises:
        RuntimeError: for the first of `paths` that cannot be read now, worded by
            `unreadable`.
        PermissionError, ConnectionError, ImportError: as `read_files`.
    """
    found = read_files(paths)
    for path, (data, reason) in zip(paths, found):
        if data is None:
            raise RuntimeError(unreadable(path, reason))
    return [data for data, _ in found]


def unreadable(path, reason):
    """The error message for a file listed before training that cannot be read now:
    it names the file (path or URI) and gives `reason`."""
    return (f"{path} was found before training and cannot be read now ({reason}): "
            "it was deleted or replaced during training.")


def _read_local(path):
    """`(bytes, None)` for a readable, non-empty regular file, else `(None, reason)`."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            return None, f"broken symbolic link (to {os.readlink(path)!r})"
        return None, "does not exist"
    except OSError as e:
        return None, f"cannot be read ({e.strerror})"
    if not stat.S_ISREG(info.st_mode):
        return None, "not a regular file"  # a FIFO would block the read forever
    if info.st_size == 0:
        return None, "empty file (0 bytes)"
    try:
        with open(path, "rb") as f:
            return f.read(), None
    except FileNotFoundError:
        return None, "does not exist"  # deleted between the two calls
    except OSError as e:
        return None, f"cannot be read ({e.strerror})"


def _object(uri, data):
    if data is None:
        return None, "does not exist"
    if not data:
        return None, "empty object (0 bytes)"
    return data, None


def stamps(paths):
    """The stamp of each of `paths`: `local_stamp` for a local path, `(size, ETag
    hash)` for a URI (found by `storage.find_objects`: one listing of their folder
    for many), None for a file that cannot be stat-ed or a missing object."""
    remote = [storage.is_remote(p) for p in paths]
    if not any(remote):
        return [local_stamp(p) for p in paths]
    found = iter(storage.find_objects([p for p, r in zip(paths, remote) if r]))
    result = []
    for path, is_uri in zip(paths, remote):
        if is_uri:
            info = next(found)
            result.append(None if info is None else info.stamp())
        else:
            result.append(local_stamp(path))
    return result


def local_stamp(path):
    """`(size, mtime_ns)` of the local file at `path`, or None if it cannot be stat-ed."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_size, info.st_mtime_ns
