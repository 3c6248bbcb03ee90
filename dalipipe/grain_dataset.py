"""The Grain adapter: an `ImagePipeline` as a `grain.IterDataset` of DALI batches.

`make_dali_dataset`'s `"grain"` format, for Keras's Grain adapter (`fit`,
`evaluate` and `predict` on every backend) and Grain's own checkpointing. The DALI
graph runs natively (`dalipipe.native`); each batch becomes the backend's tensors
(`passes.converter`: CPU batches as views of DALI's buffers, one per batch). An
iterator is one pass over the dataset, and its state (`get_state()` /
`set_state()`) is plain data: the epoch, the next batch and the dataset's
fingerprint (`dalipipe.fingerprint`).
"""

try:
    import grain
except ImportError as e:
    from dalipipe.install import pip_extra

    raise ImportError(
        'format="grain" needs Grain (the `grain` package), which is not installed. '
        f"Install it with: {pip_extra('grain')}"
    ) from e

from dalipipe import keras_hooks, passes
from dalipipe.fingerprint import differences, fingerprint


class DALIGrainDataset(grain.IterDataset):
    """A `grain.IterDataset` of DALI batches, for Keras and Grain's checkpointing.

    Each element is a batch, the tuple that a `DALIPyDataset` item is: the
    backend's tensors (torch tensors on torch, jax arrays on JAX, NumPy arrays on
    TensorFlow, where GPU batches are copied to the host), images `dtype` `(n,
    height, width, channels)` (or channels first), then labels (or int32 masks, with
    `masks`; `{"boxes", "labels"}` with `boxes`) and sample weights as
    `make_dali_dataset` says; `(images,)` without labels; Keras's dicts with
    `output="dict"` (`dalipipe.annotations.elements`).

    Each iterator is one pass, `steps` batches, then `StopIteration`. The epoch
    of an iterator is taken at its first batch, by the rule of `dalipipe.passes`:
    a training pass (`fit`'s, or one read outside Keras) loads the training
    cursor's epoch, `n` when `n` training passes have been read to their
    `StopIteration` before it, and read to its end it moves the cursor on;
    `fit(initial_epoch=k)` with `k > 0` starts at epoch `k`; `evaluate`, `predict`
    and validation passes load the cursor's epoch and move nothing. So the batches
    that Keras's Grain adapter reads up front to learn the structure, and any pass
    left before its end, start no epoch: the next iterator loads the same one. (On
    TensorFlow, Keras reads Grain datasets in `tf.data`'s threads: the loop is the
    one, in another thread, whose epoch iterator reads this dataset,
    `keras_hooks.keras_loop`.) DALI runs one pass at a time: an iterator read after
    another one restarts its pass at its next batch.

    Several devices: under `torch.distributed` or a Keras `DataParallel`
    distribution, each process loads its shard of every global batch, as the
    `"pydataset"` format does (`dalipipe.sharding`).

    Attributes:
        class_names: the class names, or None without labels.
        file_paths: the files, in the order that `shuffle` and `seed` give.
        image_pipeline: the `ImagePipeline`.
        backend: the Keras backend whose tensors the batches are.
        fingerprint: the dataset's identity, as `dalipipe.BackupAndRestore` saves it.
    """

    def __init__(self, image_pipeline, backend):
        super().__init__()
        self.image_pipeline = image_pipeline
        self.backend = backend
        self.class_names = image_pipeline.class_names
        self.file_paths = list(image_pipeline.file_paths)
        self.fingerprint = fingerprint(image_pipeline)
        self.cursor = passes.Cursor(image_pipeline)
        self.stream = passes.PassStream(image_pipeline, backend)

    @property
    def next_epoch(self):
        """The epoch that the next iterator loads: the passes read whole."""
        return self.cursor.position[0]

    def __iter__(self):
        return DALIGrainIterator(self)

    def __repr__(self):
        pipeline = self.image_pipeline
        return (f"<DALIGrainDataset: {len(pipeline.file_paths)} samples, {pipeline.steps} "
                f"batches of {pipeline.batch_size}, {self.backend} tensors on "
                f"{pipeline.device}>")


class DALIGrainIterator(grain.DatasetIterator):
    """One pass over a `DALIGrainDataset`, from a position that its state holds.

    `get_state()` is `{"epoch", "batch", "fingerprint"}`: the epoch, the next batch
    to read (`steps` once the pass is read whole) and the dataset's fingerprint.
    `set_state(state)` goes on from that position, with the batches that
    `ImagePipeline.epoch(epoch, start_batch=batch)` gives; a state at the end of a
    pass goes on with the next epoch's pass.
    """

    def __init__(self, dataset):
        super().__init__()
        self._dataset = dataset
        self._epoch = None  # taken at the first batch, unless `set_state` gives it
        self._batch = 0
        self._counts = True  # whether the pass read whole moves the cursor

    def _position(self):
        epoch = self._dataset.next_epoch if self._epoch is None else self._epoch
        return epoch, self._batch

    def __next__(self):
        if self._epoch is None:
            self._epoch, _, self._counts = self._dataset.cursor.start_pass(
                keras_hooks.keras_loop(self._dataset))
        epoch, batch = self._position()
        if batch >= self._dataset.image_pipeline.steps:
            if self._counts:
                self._dataset.cursor.read_whole(epoch)
            raise StopIteration
        result = self._dataset.stream.read(epoch, batch)
        self._batch += 1
        return result

    def get_state(self):
        epoch, batch = self._position()
        return {"epoch": epoch, "batch": batch, "fingerprint": self._dataset.fingerprint}

    def set_state(self, state):
        """Goes on from `state`, a `get_state()` of an iterator of this dataset.

        Raises:
            ValueError: for a state of another dataset (naming what differs) or
                an invalid position.
        """
        differs = differences(state.get("fingerprint", {}), self._dataset.fingerprint)
        if differs:
            raise ValueError(
                f"`state` was saved from another dataset: what differs: {differs}. "
                "Restore it into the dataset it was saved from (the same files, `seed`, "
                "`batch_size` and options)."
            )
        pipeline = self._dataset.image_pipeline
        epoch, batch = int(state["epoch"]), int(state["batch"])
        if batch == pipeline.steps:
            epoch, batch = epoch + 1, 0
        self._epoch, self._batch = pipeline.check_position(epoch, batch)
        pipeline.inputs_ahead.prepare(self._epoch, self._batch)  # built ahead of its read


def make_grain_dataset(splits, backend):
    """`make_dali_dataset`'s `"grain"` format: a `DALIGrainDataset` per placed
    `ImagePipeline` of `split_source` (one, or a pair for `subset="both"`)."""
    return tuple(DALIGrainDataset(p, backend) for p in splits)
