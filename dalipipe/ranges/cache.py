"""The one cache of sources of byte ranges (TFRecord files, tar shards): what was
found in a shard, kept per shard in dalipipe's cache folder, never beside the shard.

- `cached_scan(kind, path, version, compute)`: a JSON object per shard in
  `$DALIPIPE_CACHE_DIR/<kind>/<sha1 of the shard's path>.json`, valid while the
  shard's size and modification time (for an object: size and ETag) are those
  recorded in it. TFRecord labels (`kind="tfrecord-scan"`) and tar indexes
  (`kind="tar-index"`) live here.
- `shard_key`, `write_atomically`, `replacing`: where and how each cached file
  (also TFRecord `.idx` files) is written, whole or not at all.

Not cached where `DALIPIPE_NO_CACHE` is set or the cache folder cannot be written
(the cache warns once): the shard is read again on the next run.
"""

import contextlib
import hashlib
import json
import os

from dalipipe.utils import cache_dir, cache_disabled, warn_without_cache, writable_cache_dir


def shard_key(path):
    """The sha1 of a shard's absolute path (or URI): its cached files' name."""
    path = os.fsdecode(os.fspath(path))
    if "://" not in path:
        path = os.path.abspath(path)
    return hashlib.sha1(os.fsencode(path)).hexdigest()


def cache_path(kind, path, suffix=".json"):
    """Where the cache of `kind` keeps what it found in the shard `path`."""
    return os.path.join(cache_dir(), kind, shard_key(path) + suffix)


def cached_scan(kind, path, signature, compute):
    """What `compute()` finds in the shard `path`, from the cache when it is fresh.

    Args:
        kind: the cache's folder name (`"tar-index"`, `"tfrecord-scan"`).
        path: the shard's path or URI.
        signature: dict of JSON values that the cached result must match (the
            shard's path, size and stamp, the version of what `compute` gives).
        compute: returns a dict of JSON values for the shard.

    Returns:
        dict: `signature` and what `compute` found.
    """
    place = cache_path(kind, path)
    if not cache_disabled():
        try:
            with open(place, encoding="utf-8") as f:
                cached = json.load(f)
            if {k: cached.get(k) for k in signature} == signature:
                return cached
        except (OSError, ValueError):
            pass
    found = {**signature, **compute()}
    if writable_cache_dir() is not None:  # else it warned: the next run reads again
        try:
            write_atomically(place, json.dumps(found).encode("utf-8"))
        except OSError as e:
            warn_without_cache(place, e.strerror or str(e))
    return found


def write_atomically(path, data):
    """Writes `data` (bytes) as the file `path`, whole or not at all (see `replacing`)."""
    with replacing(path) as temporary, open(temporary, "wb") as f:
        f.write(data)


@contextlib.contextmanager
def replacing(path):
    """Yields a temporary path that replaces `path` once the block succeeds (and is
    removed if it fails), so that readers never see a half-written file."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        yield temporary
        os.replace(temporary, path)
    except BaseException:
        try:
            os.remove(temporary)
        except OSError:
            pass
        raise
