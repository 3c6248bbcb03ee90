"""Where the files dalipipe writes for TFRecord files go, and how each is written
whole.

- An index that dalipipe makes for a TFRecord file it reads goes to
  `$DALIPIPE_CACHE_DIR/tfrecord-index/<sha1 of the shard's absolute path>.idx`
  (default cache folder `~/.cache/dalipipe`), else it is kept in memory: nothing is
  written into the user's folders. An index found beside its shard as `<shard>.idx`
  is used; `write_tfrecords` writes one beside each file it writes.
- The labels and class texts found by `scan` are cached, one JSON file per shard, in
  `$DALIPIPE_CACHE_DIR/tfrecord-scan/<sha1 of the shard's absolute path>.json`, when
  the cache folder can be written and `DALIPIPE_NO_CACHE` is not set.
- Every file (indexes, scan results, the TFRecord files `write_tfrecords` writes) is
  written under a temporary name and renamed, so that readers never see half of one.
"""

import contextlib
import hashlib
import os

from dalipipe.utils import cache_dir


def index_path_for(tfrecord_path):
    """Where `write_tfrecords` puts the index of a file it writes: `<tfrecord_path>.idx`."""
    return os.fspath(tfrecord_path) + ".idx"


def cached_index_path(tfrecord_path):
    """Where the index of `tfrecord_path` goes in the cache folder."""
    return os.path.join(cache_dir(), "tfrecord-index", _path_key(tfrecord_path) + ".idx")


def _path_key(path):
    return hashlib.sha1(os.fsencode(os.path.abspath(path))).hexdigest()


def scan_cache_path(tfrecord_path):
    """Where `scan` caches what it found in `tfrecord_path`."""
    return os.path.join(cache_dir(), "tfrecord-scan", _path_key(tfrecord_path) + ".json")


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
