"""What the check reads of objects: their stamps and their bytes.

The check (`dalipipe.checks.driver`) keys its verdicts on `(size, stamp)`: for a
local file `(size, mtime_ns)`, for an object `ObjectInfo.stamp()`, `(size, a hash of
the ETag)`, so a replaced object is checked again. It reads every object whole, once,
`storage.MAX_WORKERS` at a time: the JPEG rule looks for the end-of-image marker
after the headers and the decoder runs every scan's set-up, PNG chunks are checked up
to IEND, so no head-and-tail read keeps the guarantee for them (see docs/storage.md).
"""

from dalipipe import storage


def signatures(paths, local_signature):
    """The cache signature of each of `paths`: `local_signature(path)` for a local
    path, `(size, ETag hash)` for a URI (found by `storage.find_objects`: one listing
    of their folder for many), None for a missing object."""
    remote = [storage.is_remote(p) for p in paths]
    if not any(remote):
        return [local_signature(p) for p in paths]
    found = iter(storage.find_objects([p for p, r in zip(paths, remote) if r]))
    result = []
    for path, is_uri in zip(paths, remote):
        if is_uri:
            info = next(found)
            result.append(None if info is None else info.stamp())
        else:
            result.append(local_signature(path))
    return result


def read_paths(paths, read_local):
    """`(bytes, None)` or `(None, reason)` for each of `paths`: `read_local(path)` for a
    local path; a URI's object read whole, the objects in parallel.

    Raises:
        PermissionError, ConnectionError: see `dalipipe.storage`; they concern the
            credentials or the endpoint, not one object, so no verdict is kept.
    """
    remote = [storage.is_remote(p) for p in paths]
    if not any(remote):
        return [read_local(p) for p in paths]
    fetched = iter(storage.map_objects([p for p, r in zip(paths, remote) if r], _object,
                                       verbose=False))
    return [next(fetched) if is_uri else read_local(path) for path, is_uri in zip(paths, remote)]


def _object(uri, data):
    if data is None:
        return None, "does not exist"
    if not data:
        return None, "empty object (0 bytes)"
    return data, None
