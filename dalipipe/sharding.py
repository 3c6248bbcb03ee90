"""Sharding: which samples of each global batch a replica's pipeline loads.

The arithmetic of `tf.distribute`, used on every backend: every step takes the next
`batch_size` samples of the epoch's order (the global batch, shared by all
pipelines through the same `seed`), and replica `r` gets the `r`-th slice of
`batch_size // num_replicas` samples. The last step is padded with the replica's
own first samples of the epoch, of weight 0, so that every replica runs the same
number of full batches, each sample counts exactly once per epoch, and a replica's
padding is a sample it already loaded (for shards in object storage, a chunk it
already read). A padding sample's
mask is all `mask_fill_value` (`dalipipe.graph.padded_masks`) and its boxes and
labels all -1 (`annotations.placement.with_boxes`), as an image without objects.

`data_parallel_shard` finds the replicas of this process under Keras's JAX
distribution or `torch.distributed`; Keras, JAX and PyTorch are imported only there.
"""

from typing import NamedTuple

import numpy as np

from dalipipe.annotations.settings import shown


class Sharding(NamedTuple):
    """Which replicas of a distributed dataset a pipeline feeds (`ImagePipeline.shard`)."""

    num_replicas: int
    replica_ids: tuple

    def positions(self, num_samples, steps, batch_size):
        """The positions in an epoch's order that this pipeline loads, and their weights.

        Args:
            num_samples: the samples of the epoch's order.
            steps: the global batches of an epoch.
            batch_size: samples per replica's batch.

        Returns:
            `(positions, weights)`: int64 `(steps * len(replica_ids) * batch_size,)`
            indices into the epoch's order, step by step and replica by replica, and
            float32 weights of the same shape, 0 for padding.
        """
        global_batch = batch_size * self.num_replicas
        positions = (
            np.arange(steps, dtype=np.int64)[:, None, None] * global_batch
            + np.asarray(self.replica_ids, np.int64)[None, :, None] * batch_size
            + np.arange(batch_size, dtype=np.int64)[None, None, :]
        ).reshape(-1)
        weights = (positions < num_samples).astype(np.float32)
        # Padding repeats the replica's own first positions, with weight 0 (those of
        # the order's start for a replica without any sample).
        by_replica = positions.reshape(steps, len(self.replica_ids), batch_size)
        for r in range(len(self.replica_ids)):
            own = by_replica[:, r].reshape(-1)  # ascending: its samples come first
            count = int(np.count_nonzero(own < num_samples))
            own[count:] = own[np.arange(len(own) - count) % count] if count else \
                own[count:] % num_samples
            by_replica[:, r] = own.reshape(steps, batch_size)
        return by_replica.reshape(-1), weights

    def replica_of(self, num_samples, steps, batch_size):
        """Which replica loads each position of an epoch's order.

        Args:
            num_samples: the samples of the epoch's order.
            steps: the global batches of an epoch.
            batch_size: samples per replica's batch.

        Returns:
            int64 `(num_samples,)`: for position `p`, the replica (of all
            `num_replicas`) whose batches hold it, or `num_replicas` for the
            positions that no step loads (past the last full step with
            `drop_remainder=True`).
        """
        positions = np.arange(num_samples, dtype=np.int64)
        owners = (positions // batch_size) % self.num_replicas
        owners[positions >= steps * batch_size * self.num_replicas] = self.num_replicas
        return owners


def has_targets(options):
    """Whether `options` give targets to weigh: labels, masks or boxes (a padded
    step needs them: its padding weighs 0)."""
    if options.masks is not None or options.boxes is not None:
        return True
    return options.label_mode is not None and options.labels is not None


def check_global_batch(batch_size, num_replicas):
    """Raises ValueError unless the global `batch_size` splits evenly over the replicas."""
    if batch_size % num_replicas:
        raise ValueError(
            "`batch_size` is the global batch, split evenly over the replicas, so it must "
            f"be a multiple of their number. Received: batch_size={batch_size} for "
            f"{num_replicas} replicas"
        )


def data_parallel_shard(options, backend):
    """`(replica_ids, num_replicas)` of this process's shard when Keras trains on
    several devices, else None.

    JAX: under a `keras.distribution.DataParallel` distribution each process loads
    its part of every global batch (`batch_size`), and Keras splits it over the
    process's devices. torch: under `torch.distributed`, each process (one per
    device) loads its `batch_size // world_size` samples of every global batch.

    Raises:
        ValueError: for another Keras distribution, without labels, masks or boxes
            or without `batch_size` (the padding needs weights), or for a
            `batch_size` that the devices do not divide.
    """
    if backend == "jax":
        import keras

        distribution = keras.distribution.distribution()
        if distribution is None:
            return None
        if not isinstance(distribution, keras.distribution.DataParallel):
            raise ValueError(
                "dalipipe feeds a `keras.distribution.DataParallel` distribution, which "
                "splits each batch over the devices. Received: distribution="
                f"{type(distribution).__name__}"
            )
        import jax

        devices = int(np.prod(distribution.device_mesh.shape))
        processes, index = jax.process_count(), jax.process_index()
        what = f"a DataParallel distribution over {devices} devices"
    elif backend == "torch":
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return None
        devices = processes = dist.get_world_size()
        index = dist.get_rank()
        what = f"torch.distributed with {processes} processes"
    else:
        return None
    if devices == 1 and processes == 1:
        return None
    if not has_targets(options) or options.batch_size is None:
        raise ValueError(
            f"With {what}, every step is a full batch and the last one is padded with "
            "zero-weight samples, which needs labels (or masks, or boxes) to weigh and "
            "a `batch_size`. To predict, make the dataset on one device. Received: "
            f"labels={options.labels!r}, label_mode={options.label_mode!r}, "
            f"masks={shown(options.masks)}, boxes={shown(options.boxes)}, "
            f"batch_size={options.batch_size!r}"
        )
    check_global_batch(options.batch_size, devices)
    return [index], processes
