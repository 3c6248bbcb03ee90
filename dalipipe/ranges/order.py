"""The order of an epoch over shards read in large ranges (objects in `s3://` or
`gs://`): shards in a new order each epoch, and samples mixed in a seeded buffer, the
order of DALI's `shuffle_after_epoch` readers and of WebDataset's `shuffle(n)`.

Each shard's samples are read in the order they lie in it, so that the reader
(`ranges.read`) fetches each `CHUNK` of a shard once. The buffer holds `BUFFER`
samples: each next sample of the stream replaces one drawn at random, which is
loaded; at the end, the buffer is loaded in a random order. The whole order is
computed ahead from the seed and the epoch, so every sample comes once per pass, an
epoch's order is the same for the same seed, and resuming mid-epoch
(`start_batch`) takes the rest of the same order.

Its quality: a sample leaves the buffer after a geometric number of steps (mean
`BUFFER`), so samples of one shard stay near each other, and a batch holds samples of
the few shards read around it. Samples far apart in the stream never meet in one
batch, unlike the global shuffle of local shards. More shards, smaller than the
buffer is long, give a better mix; so does writing the shards from shuffled files.
"""

import numpy as np

from dalipipe import sampling
from dalipipe.ranges.read import is_remote

BUFFER = 1000  # samples in the shuffle buffer


def reads_in_streams(index):
    """Whether an index's samples are ranges of objects, read in large ranges."""
    return index.refs is not None and bool(index.tfrecord_files) and \
        is_remote(index.tfrecord_files[0])


def epoch_order(index, seed, epoch, *, shuffle=True):
    """The order in which epoch `epoch` visits the samples of `index`.

    Returns:
        int64 `(len(index),)`, a permutation of its samples: `stream_order` where the
        index is read in streams, else `sampling.epoch_order` (a global shuffle).
    """
    if shuffle and reads_in_streams(index):
        return stream_order(seed, epoch, index.refs)
    return sampling.epoch_order(seed, epoch, len(index), shuffle=shuffle)


def stream_order(seed, epoch, refs, buffer_size=BUFFER):
    """Shards in a random order, each read in order, mixed in a buffer (see the module).

    Args:
        refs: int64 `(n, 3)`: shard number, offset and size of each sample.
        buffer_size: samples in the buffer.

    Returns:
        int64 `(n,)`, a permutation of `range(n)`.
    """
    refs = np.asarray(refs, np.int64).reshape(-1, 3)
    n = len(refs)
    rng = np.random.default_rng([seed, epoch, 7])
    shards = np.unique(refs[:, 0])
    rank = np.zeros(int(shards.max()) + 1 if n else 0, np.int64)
    rank[rng.permutation(shards)] = np.arange(len(shards))
    stream = np.lexsort((refs[:, 1], rank[refs[:, 0]])).tolist()
    buffer = stream[:buffer_size]
    draws = rng.random(max(n - len(buffer), 0)).tolist()
    order = []
    for draw, sample in zip(draws, stream[len(buffer):]):
        slot = int(draw * len(buffer))
        order.append(buffer[slot])
        buffer[slot] = sample
    order += [buffer[i] for i in rng.permutation(len(buffer))]
    return np.array(order, np.int64)
