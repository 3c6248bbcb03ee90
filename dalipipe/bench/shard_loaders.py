"""The benchmark's files read as WebDataset tar shards by dalipipe: the same images,
labels and work as `loaders.make_dalipipe`, from shards instead of files.

The shards are written once per set of files (`shards_for`), in the cache folder's
`bench-shards/<key>/`, keyed on the files' paths, sizes, modification times and
labels: the first run's start-up includes writing them, later runs' do not.
"""

import hashlib
import json
import os

from dalipipe.bench.loaders import make_dalipipe
from dalipipe.utils import cache_dir

SHARDS = 16  # at most; one per file for fewer files


def shards_for(files, labels):
    """The brace pattern of `files` written as tar shards, in order, with `labels`.

    Returns:
        str: `".../train-{000000..0000NN}.tar"`.
    """
    from dalipipe.ranges.write import write_webdataset

    files, labels = [os.fspath(f) for f in files], [int(label) for label in labels]
    stamps = [(f, os.stat(f).st_size, os.stat(f).st_mtime_ns) for f in files]
    key = hashlib.sha1(json.dumps([stamps, labels]).encode()).hexdigest()[:16]
    folder = os.path.join(cache_dir(), "bench-shards", key)
    count = min(SHARDS, len(files))
    pattern = os.path.join(folder, f"train-{{000000..{count - 1:06d}}}.tar")
    done = os.path.join(folder, "done")
    if not os.path.exists(done):
        write_webdataset(files, labels, None, folder, num_shards=count)
        open(done, "w").close()
    return pattern


def make_dalipipe_shards(files, labels, *, workload, batch_size, threads, seed):
    """`loaders.make_dalipipe` on `shards_for(files, labels)`."""
    return make_dalipipe(files, labels, workload=workload, batch_size=batch_size,
                         threads=threads, seed=seed, source=shards_for(files, labels))
