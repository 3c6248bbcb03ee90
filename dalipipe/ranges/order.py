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
from dalipipe.ranges.read import is_remote, range_columns

BUFFER = 1000  # samples in the shuffle buffer


def reads_in_streams(index):
    """Whether an index's samples are ranges of objects, read in large ranges."""
    return index.refs is not None and bool(index.tfrecord_files) and \
        is_remote(index.tfrecord_files[0])


def epoch_order(index, seed, epoch, *, shuffle=True, owners=None):
    """The order in which epoch `epoch` visits the samples of `index`.

    Args:
        owners: None, or int64 `(len(index),)`: the replica that loads each position
            of the order (`Sharding.replica_of`), so that each replica's positions
            take the samples of its own run of the stream (see the module).

    Returns:
        int64 `(len(index),)`, a permutation of its samples: `stream_order` where the
        index is read in streams, else `sampling.epoch_order` (a global shuffle).
    """
    if reads_in_streams(index):
        if shuffle:
            return stream_order(seed, epoch, index.refs, owners=owners)
        if owners is not None:
            return _by_owner(np.arange(len(index), dtype=np.int64), owners, lambda run: run)
    return sampling.epoch_order(seed, epoch, len(index), shuffle=shuffle)


def stream_order(seed, epoch, refs, buffer_size=BUFFER, *, owners=None):
    """Shards in a random order, each read in order, mixed in a buffer (see the module).

    Args:
        refs: int64 `(n, k)`, `k >= 3`: shard number, offset and size of each
            sample, then any columns of its kind (`ranges.read.read_ranges`).
        buffer_size: samples in the buffer.
        owners: None, or int64 `(n,)`: the replica that loads each position (see the
            module): one run of the stream per replica, each mixed on its own.

    Returns:
        int64 `(n,)`, a permutation of `range(n)`.
    """
    refs = range_columns(refs)
    n = len(refs)
    rng = np.random.default_rng([seed, epoch, 7])
    shards = np.unique(refs[:, 0])
    rank = np.zeros(int(shards.max()) + 1 if n else 0, np.int64)
    rank[rng.permutation(shards)] = np.arange(len(shards))
    stream = np.lexsort((refs[:, 1], rank[refs[:, 0]]))
    if owners is None:
        return np.array(_mixed(stream.tolist(), rng, buffer_size), np.int64)
    return _by_owner(stream, owners, lambda run: _mixed(run.tolist(), rng, buffer_size))


def _by_owner(stream, owners, mix):
    """The order whose positions of each replica (`owners`) hold, in turn, `mix` of
    its contiguous run of `stream` (runs cut in the replicas' order, each as long
    as the replica's positions)."""
    owners = np.asarray(owners, np.int64)
    counts = np.bincount(owners, minlength=int(owners.max()) + 1 if len(owners) else 0)
    order = np.empty(len(stream), np.int64)
    start = 0
    for replica, count in enumerate(counts.tolist()):
        order[owners == replica] = mix(stream[start:start + count])
        start += count
    return order


def _mixed(stream, rng, buffer_size):
    """`stream` (a list of sample numbers) through a shuffle buffer of `buffer_size`."""
    n = len(stream)
    buffer = stream[:buffer_size]
    draws = rng.random(max(n - len(buffer), 0)).tolist()
    order = []
    for draw, sample in zip(draws, stream[len(buffer):]):
        slot = int(draw * len(buffer))
        order.append(buffer[slot])
        buffer[slot] = sample
    order += [buffer[i] for i in rng.permutation(len(buffer))]
    return order
