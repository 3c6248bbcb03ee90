"""The benchmark's files read as WebDataset tar shards: by dalipipe
(`make_dalipipe_shards`: the same images, labels and work as `loaders.make_dalipipe`,
from shards instead of files) and by `webdataset`'s own loader (`make_webdataset`,
with PIL's transforms and torch's DataLoader, as its README calls it).

The shards are written once per set of files (`shards_for`), in the cache folder's
`bench-shards/<key>/`, keyed on the files' paths, sizes, modification times and
labels: the first run's start-up includes writing them, later runs' do not.
"""

import hashlib
import json
import os

import numpy as np

from dalipipe.bench.loaders import Loader, make_dalipipe
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



class _PilTransform:
    """`pil_loaders.pil_transform` for `workload`, with a generator of its own in each
    worker process (seeded by `seed` and the process id)."""

    def __init__(self, workload, seed):
        self.workload, self.seed, self.rng = workload, seed, None

    def __call__(self, image):
        from dalipipe.bench.pil_loaders import pil_transform

        if self.rng is None or self.rng[0] != os.getpid():
            self.rng = (os.getpid(), np.random.default_rng([self.seed, os.getpid()]))
        return pil_transform(image, self.workload, self.rng[1])


def make_webdataset(files, labels, *, workload, batch_size, threads, seed, urls=None):
    """`webdataset`'s own loader over the files written as shards (`shards_for`), or
    over `urls` (a brace pattern: local paths, or `http://` URLs that WebDataset
    reads with curl), called as its README calls it:
    `WebDataset(urls, shardshuffle=100).shuffle(1000).decode("pil")
    .to_tuple("jpg;png;jpeg", "cls").map_tuple(transform, int).batched(batch_size)`
    in a `WebLoader` (torch's DataLoader) with `threads` workers, each reading its
    shards (`split_by_worker`). The transform is PIL's, as the PIL loaders do the
    workload (`pil_loaders.pil_transform`: torchvision is not a dependency): batches
    of float32 NHWC images normalized with ImageNet mean/std, and int64 labels.
    """
    import webdataset as wds

    urls = shards_for(files, labels) if urls is None else urls
    dataset = (wds.WebDataset(urls, shardshuffle=100, seed=seed, empty_check=False)
               .shuffle(1000).decode("pil").to_tuple("jpg;png;jpeg", "cls")
               .map_tuple(_PilTransform(workload, seed), int)
               .batched(batch_size))
    loader = wds.WebLoader(dataset, batch_size=None, num_workers=threads)
    settings = (f"wds.WebDataset({urls!r}, shardshuffle=100).shuffle(1000).decode('pil')"
                f".to_tuple('jpg;png;jpeg', 'cls').map_tuple(<PIL {workload}>, int)"
                f".batched({batch_size}); wds.WebLoader(batch_size=None, num_workers={threads})")
    return Loader(lambda: iter(loader), settings=settings, ordered=False)
