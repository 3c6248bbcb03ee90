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

from dalipipe import native
from dalipipe.devices import resolve_device
from dalipipe.keras_config import keras_backend
from dalipipe.pipeline import image_pipelines
from dalipipe.sharding import data_parallel_shard


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
    - sample weights, with `class_weight` or several devices: float32 `(n,)`.

    `n` is `batch_size`, smaller only for the last batch of an epoch (unless
    `drop_remainder=True`, or with several devices, where the last step is padded
    with samples of weight 0). Without labels an item is `(images,)`. With
    `batch_size=None`, items are single samples without the batch dimension.

    Epochs: the batches come in the order that DALI prepares them, `prefetch_queue_depth`
    ahead, so an item is the pass's next batch, whatever index is asked: Keras's
    `fit(shuffle=True)` permutes the indices of a PyDataset's batches, and the
    pass's order is already a new permutation of the samples every epoch (with
    `shuffle=True`; `file_paths` order otherwise, which is how `predict` reads
    it). A new pass starts at the first item asked for after `num_batches` is read
    (every new Keras iterator reads it first, as `iter()` does; `len()` does not),
    after `len()` items, or when an index already read in the pass is asked for
    again. So each Keras epoch is one exact pass, and one pass runs on over
    several epochs with `steps_per_epoch` smaller than `len()`, as Keras's own
    iterators do. Pass `n` loads what `make_dali_pipeline(...).epoch(n)` loads,
    the same order and crops for a seed (the first `fit` also reads one batch to
    build the model, so its first epoch is pass 1), unless `set_position` numbers
    the next pass (`dalipipe.BackupAndRestore` does, at every epoch's start).
    The items are copies: they stay valid after the next one is read.

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
        self._convert = _converter(self.backend, image_pipeline.device == "gpu")
        self._runner = native.Runner(image_pipeline)
        self._epoch = -1
        self._start = 0  # the first step of the pass under way
        self._next = None  # (epoch, start step) of the next pass, from `set_position`
        self._served = set()
        self._stream = None
        self._new_reader = True

    def __len__(self):
        start = self._start if self._next is None else self._next[1]
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
        self._next = self.image_pipeline.check_position(epoch, batch)
        self._new_reader = True

    @property
    def num_batches(self):
        """The batches per epoch, `len()`; reading it starts a new pass (see above)."""
        self._new_reader = True
        return len(self)

    def __getitem__(self, index):
        if not isinstance(index, (int, np.integer)) or not 0 <= index < len(self):
            raise IndexError(
                f"`index` must be an integer in [0, {len(self)}), the batches of an epoch. "
                f"Received: index={index!r}"
            )
        if self._new_reader or index in self._served or len(self._served) == len(self):
            self._new_reader = False
            self._epoch, self._start = (self._epoch + 1, 0) if self._next is None else self._next
            self._next = None
            self._served = set()
            inputs = self.image_pipeline.epoch_inputs(self._epoch, start_batch=self._start)
            self._stream = self._runner.run(*inputs, copy_to_host=False)
        self._served.add(index)
        batch = tuple(self._convert(self._sample(out)) for out in next(self._stream))
        if len(self._served) == len(self):
            # The pass is whole: let the runner see DALI's end of epoch.
            for _ in self._stream:
                raise RuntimeError("DALI gave more batches than the epoch has")
        return batch

    def _sample(self, tensor_list):
        """One output as a dense DALI tensor (a single sample for `batch_size=None`)."""
        return tensor_list[0] if self.image_pipeline.unbatched else tensor_list.as_tensor()

    def __repr__(self):
        pipeline = self.image_pipeline
        return (f"<DALIPyDataset: {len(pipeline.file_paths)} samples, {len(self)} batches "
                f"of {pipeline.batch_size}, {self.backend} tensors on {pipeline.device}>")


def make_py_dataset(source, options):
    """`make_dali_dataset` for validated `Options` in the `"pydataset"` format: a
    `DALIPyDataset`, or a pair of them for `subset="both"`."""
    backend = keras_backend()
    device, device_id = resolve_device(options.device, backend)
    sharding = data_parallel_shard(options, backend)
    result = image_pipelines(source, options.replace(device=device), device_id=device_id or 0)

    def wrap(image_pipeline):
        if image_pipeline.device == "gpu":
            image_pipeline = image_pipeline.on_device(device_id or 0)
        if sharding is not None:
            image_pipeline = image_pipeline.shard(*sharding, device_id=device_id or 0)
        return DALIPyDataset(image_pipeline, backend)

    if isinstance(result, tuple):
        return tuple(wrap(p) for p in result)
    return wrap(result)


def _converter(backend, gpu):
    """The function that copies one dense DALI tensor into the backend's tensor."""
    if backend == "torch":
        from nvidia.dali.plugin.pytorch.torch_utils import to_torch_tensor

        return lambda tensor: to_torch_tensor(tensor, copy=True)
    if backend == "jax":
        import jax
        import jax.dlpack

        if gpu:
            return lambda tensor: jax.dlpack.from_dlpack(tensor).copy()
        return lambda tensor: jax.device_put(np.array(tensor))
    if gpu:
        return lambda tensor: np.array(tensor.as_cpu())
    return np.array
