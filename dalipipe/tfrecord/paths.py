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
  The cache and the writing are those of every source of byte ranges: `dalipipe.ranges.cache`.
"""

import os

from dalipipe.ranges.cache import cache_path, replacing, write_atomically  # noqa: F401 (re-exported)


def index_path_for(tfrecord_path):
    """Where `write_tfrecords` puts the index of a file it writes: `<tfrecord_path>.idx`."""
    return os.fspath(tfrecord_path) + ".idx"


def cached_index_path(tfrecord_path):
    """Where the index of `tfrecord_path` goes in the cache folder."""
    return cache_path("tfrecord-index", tfrecord_path, ".idx")

