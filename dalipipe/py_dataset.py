"""The Keras adapter for every backend: an `ImagePipeline` as a `keras.utils.PyDataset`.

`make_dali_dataset`'s `"pydataset"` format, the default on the torch and JAX
backends. The DALI graph runs natively (`dalipipe.native`), and each batch is copied
from DALI's buffers into the backend's own tensors on the pipeline's device: torch
tensors through DALI's PyTorch plugin, jax arrays through DLPack, NumPy arrays on
TensorFlow. No TensorFlow import: a Keras program on torch or JAX never loads it.

Several devices: on JAX, a `keras.distribution.DataParallel` distribution; with
PyTorch, one process per device under `torch.distributed`. Both use the shard
arithmetic of `tf.distribute` (`dalipipe.sharding`): every step is a full batch,
the last one padded with samples of weight 0. The device and its CUDA ordinal come
from `dalipipe.devices`.
"""

import keras
import numpy as np

from dalipipe import passes
from dalipipe.keras_config import keras_backend


class DALIPyDataset(keras.utils.PyDataset):
    """A `keras.utils.PyDataset` of DALI batches, for `fit`, `evaluate` and `predict`.

    Each item is a tuple of the backend's tensors, on the pipeline's device (a CUDA
    device for a GPU pipeline, the CPU otherwise): torch tensors on torch, jax
    arrays on JAX, NumPy arrays on other backends:
    - images: `(n, height, width, channels)` for `"channels_last"`,
      `(n, channels, height, width)` for `"channels_first"`, of the `dtype` option;
    - labels, unless there are none: int32 `(n,)` for `label_mode="int"`, float32
      `(n, num_classes)` for `"categorical"` and `"multi_hot"`, float32 `(n, 1)` for
      `"binary"`, float32 `(n,)` or `(n, k)` for `"raw"` (one or `k` label columns);
    - or, with `masks`, the masks: int32 `(n, height, width, 1)` class ids
      (`(n, 1, height, width)` for `"channels_first"`);
    - or, with `boxes`, `{"boxes": float32 (n, max_boxes, 4), "labels": int32 (n,
      max_boxes)}`; with `output="dict"`, Keras's dicts instead of the tuple
      (`dalipipe.annotations.elements`);
    - sample weights, with `class_weight` or several devices: float32 `(n,)`, or
      with `masks` (several devices) `(n, height, width)`, per pixel; a padding
      sample's mask is all `mask_fill_value`, its boxes and labels all -1.

    `n` is `batch_size`, smaller only for the last batch of an epoch (unless
    `drop_remainder=True`, or with several devices, where the last step is padded
    with samples of weight 0). Without labels an item is `(images,)`. With
    `batch_size=None`, items are single samples without the batch dimension.

    Epochs (`dalipipe.passes`): inside Keras's `fit`, `evaluate` and `predict`
    (between the `on_epoch_begin` and `on_epoch_end` that Keras calls), the items
    come in the pass's order, whatever index Keras asks for: Keras asks for a
    PyDataset's batches in a random order with `fit(shuffle=True)`, and the pass
    is already a new permutation of the samples every epoch (with `shuffle=True`;
    `file_paths` order otherwise, which is how `predict` reads it). Each new Keras
    iterator (it reads `num_batches` first) starts a pass, and a pass read to its
    `len()`-th item counts: pass `n` read whole loads what
    `make_dali_pipeline(...).epoch(n)` loads, the same order and crops for a seed.
    A pass left before its end, such as the batch that `fit` reads to build the
    model, does not count: the next pass loads the same epoch. One pass runs on
    over several epochs with `steps_per_epoch` smaller than `len()`, as Keras's
    own iterators do. `set_position` numbers the next pass
    (`dalipipe.BackupAndRestore` calls it at every epoch's start).

    Outside Keras's loops, `ds[i]` is batch `i` of the next pass (what that pass
    loads), restarting DALI's pass at `i` when it is not the batch after the last
    one read. Reading `ds[0]`, `ds[1]`, ... to `ds[len(ds) - 1]` in order (as
    `for batch in ds` does) reads the pass whole, and it counts as in Keras's
    loops; a batch read out of that order starts and counts no pass. The items
    are copies: they stay valid after the next one is read.

    Attributes:
        class_names: the class names, or None without labels.
        file_paths: the files, in the order that `shuffle` and `seed` give.
        image_pipeline: the `ImagePipeline` (a shard of it with several devices).
        backend: the Keras backend whose tensors the items are.
    """

    def __init__(self, image_pipeline, backend=None):
        # One worker: DALI reads, decodes and prefetches on its own threads, and
        # its batches come in its order.
        super().__init__(workers=1, use_multiprocessing=False)
        self.image_pipeline = image_pipeline
        self.backend = backend or keras_backend()
        self.class_names = image_pipeline.class_names
        self.file_paths = list(image_pipeline.file_paths)
        self._cursor = passes.Cursor(image_pipeline)
        self._stream = passes.PassStream(image_pipeline, self.backend)
        self._in_keras = False  # between Keras's on_epoch_begin and on_epoch_end
        self._pass = None  # (epoch, first step, next step) of Keras's pass under way
        self._new_reader = True

    def __len__(self):
        start = self._cursor.position[1] if self._pass is None else self._pass[1]
        return self.image_pipeline.steps - start

    def set_position(self, epoch, batch=0):
        """Makes the next pass epoch `epoch` from step `batch` on (what
        `ImagePipeline.epoch(epoch, start_batch=batch)` loads), the passes after it
        epochs `epoch + 1`, ... from their first step. Until that pass ends,
        `len()` and `num_batches` are its steps, `steps - batch`.
        `dalipipe.BackupAndRestore` calls it at the start of every epoch.

        Raises:
            ValueError: for an `epoch` below 0 or a `batch` outside `[0, steps)`.
        """
        self._cursor.set_position(epoch, batch)
        self._pass = None

    @property
    def num_batches(self):
        """The batches per epoch, `len()`; every Keras iterator reads it first, so
        that inside Keras's loops the next item starts a new pass (see above)."""
        self._new_reader = True
        return len(self)

    def on_epoch_begin(self):
        self._in_keras = True

    def on_epoch_end(self):
        self._in_keras = False

    def __getitem__(self, index):
        if not isinstance(index, (int, np.integer)) or not 0 <= index < len(self):
            raise IndexError(
                f"`index` must be an integer in [0, {len(self)}), the batches of an epoch. "
                f"Received: index={index!r}"
            )
        if self._in_keras:
            # Keras's order is not the pass's: the pass's next batch, whatever the index.
            if self._new_reader or self._pass is None:
                self._new_reader = False
                self._pass = (*self._cursor.position, self._cursor.position[1])
        else:
            epoch, start = self._cursor.position
            step = start + int(index)
            if self._pass is None or (self._pass[0], self._pass[2]) != (epoch, step):
                if index:  # out of the pass's order: this batch alone
                    self._pass = None
                    return self._stream.read(epoch, step)
                self._pass = (epoch, start, start)
        epoch, start, step = self._pass
        batch = self._stream.read(epoch, step)
        self._pass = (epoch, start, step + 1)
        if step + 1 == self.image_pipeline.steps:
            self._pass = None
            self._cursor.read_whole(epoch)
        return batch

    def __repr__(self):
        pipeline = self.image_pipeline
        return (f"<DALIPyDataset: {len(pipeline.file_paths)} samples, {len(self)} batches "
                f"of {pipeline.batch_size}, {self.backend} tensors on {pipeline.device}>")


def make_py_dataset(splits, backend):
    """`make_dali_dataset`'s `"pydataset"` format: a `DALIPyDataset` per placed
    `ImagePipeline` of `split_source` (one, or a pair for `subset="both"`)."""
    return tuple(DALIPyDataset(p, backend) for p in splits)
