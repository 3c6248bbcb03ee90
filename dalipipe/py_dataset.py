"""The Keras adapter for every backend: an `ImagePipeline` as a `keras.utils.PyDataset`.

`make_dali_dataset`'s `"pydataset"` format, the default on the torch and JAX
backends. The DALI graph runs natively (`dalipipe.native`), and each batch becomes
the backend's own tensors on the pipeline's device (`passes.converter`): torch
tensors (through DALI's PyTorch plugin on a GPU; on the CPU, views of DALI's
buffers, one per batch), jax arrays (through DLPack on a GPU), NumPy arrays on
TensorFlow (views of DALI's buffers on the CPU). No TensorFlow import: a Keras program on torch or JAX never loads it.

Several devices: on JAX, a `keras.distribution.DataParallel` distribution; with
PyTorch, one process per device under `torch.distributed`. Both use the shard
arithmetic of `tf.distribute` (`dalipipe.sharding`): every step is a full batch,
the last one padded with samples of weight 0. The device and its CUDA ordinal come
from `dalipipe.devices`.
"""

import keras
import numpy as np

from dalipipe import keras_hooks, passes
from dalipipe.annotations.elements import check_dict_fits
from dalipipe.calls import warn
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

    Epochs (`dalipipe.passes`): each pass that Keras's `fit`, `evaluate` or
    `predict` starts (every Keras iterator of a `PyDataset` reads `num_batches` as
    it starts) gives its items in the pass's order, whatever index Keras asks for:
    Keras asks for a PyDataset's batches in a random order with `fit(shuffle=True)`,
    and the pass is already a new permutation of the samples every epoch (with
    `shuffle=True`; `file_paths` order otherwise, which is how `predict` reads it).
    A training pass loads what `make_dali_pipeline(...).epoch(e, start_batch=s)`
    loads at the training cursor `(e, s)`, and read to its `len()`-th item it moves
    the cursor to `(e + 1, 0)`; a pass left before its end, such as the batch that
    `fit` reads to build the model, does not count. `fit(initial_epoch=k)` with
    `k > 0` starts at `(k, 0)`; `evaluate`, `predict` and validation passes load the
    cursor's epoch whole and never move it. One pass runs on over several epochs
    with `steps_per_epoch` smaller than `len()`, as Keras's own iterators do.
    `set_position` moves the cursor (`dalipipe.BackupAndRestore` calls it at every
    epoch's start). Reading `num_batches` or `len()` yourself changes nothing.

    Any other read, `ds[i]` (also after a `fit` that raised), is batch `i` of the
    next training pass (what that pass loads), restarting DALI's pass at `i` when it
    is not the batch after the last one read. Reading `ds[0]`, `ds[1]`, ... to
    `ds[len(ds) - 1]` in order (as `for batch in ds` does) reads the pass whole, and
    it counts as a training pass; a batch read out of that order starts and counts
    no pass. The items are copies: they stay valid after the next one is read.

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
        self.stream = passes.PassStream(image_pipeline, self.backend)
        self._loop = None  # the Keras loop of the last `on_epoch_begin` (`keras_hooks`)
        # Keras's passes under way: its generator's frame -> [epoch, next step, counts]
        # (a training pass and a validation pass of `fit` may alternate).
        self._keras = {}
        self._outside = None  # (epoch, start, next step) of an in-order read outside Keras

    def __len__(self):
        return self.image_pipeline.steps - self._cursor.position[1]

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
        self._keras.clear()
        self._outside = None

    @property
    def num_batches(self):
        """The batches of the next pass, `len()` (all of them for an `evaluate` or
        `predict` pass, which Keras starts by reading it)."""
        frame = keras_hooks.py_dataset_pass()
        if frame is not None:
            _, step, _ = self._start_keras_pass(frame)
            return self.image_pipeline.steps - step
        loop = keras_hooks.keras_loop()
        if loop is not None and loop.kind != "fit":
            return self.image_pipeline.steps  # an evaluation pass is whole
        return len(self)

    def _start_keras_pass(self, frame):
        """Starts the pass of Keras's generator `frame` (`Cursor.start_pass`). Keras
        calls `on_epoch_begin` on the dataset it reads: a `PyDataset` of the user's
        that wraps this one does not pass it on, and the loop is then the one
        running in this thread (none on TensorFlow, which reads in `tf.data`'s
        threads: the pass counts as a training pass)."""
        loop = self._loop
        if loop is None and not _reads_self(frame, self):
            loop = keras_hooks.keras_loop()
        state = list(self._cursor.start_pass(loop))
        self._keras.pop(frame, None)
        self._keras[frame] = state
        while len(self._keras) > 2:  # the oldest, left
            del self._keras[next(iter(self._keras))]
        return state

    def on_epoch_begin(self):
        self._begin_epoch(mapped=False)

    def _begin_epoch(self, *, mapped):
        """Keras's `on_epoch_begin`, on this dataset or its `map` (`mapped`): a
        Keras loop reading the dicts of `output="dict"` itself is refused
        (`check_dict_fits`)."""
        self._loop = keras_hooks.keras_loop()
        if self._loop is not None and not mapped:
            check_dict_fits(self._loop.kind, self.image_pipeline.options)

    def on_epoch_end(self):
        self._loop = None

    def __getitem__(self, index):
        frame = keras_hooks.py_dataset_pass()
        if frame is not None:
            # Keras's order is not the pass's: the pass's next batch, whatever the index.
            state = self._keras.get(frame) or self._start_keras_pass(frame)
            epoch, step, counts = state
            state[1] = step + 1
            if step + 1 == self.image_pipeline.steps:
                self._keras.pop(frame, None)
            return self._read(epoch, step, counts)
        if keras_hooks.read_by_keras_workers():
            _warn_workers(self)
        if not isinstance(index, (int, np.integer)) or not 0 <= index < len(self):
            raise IndexError(
                f"`index` must be an integer in [0, {len(self)}), the batches of an epoch. "
                f"Received: index={index!r}"
            )
        epoch, start = self._cursor.position
        step = start + int(index)
        if self._outside is None or (self._outside[0], self._outside[2]) != (epoch, step):
            if index:  # out of the pass's order: this batch alone
                self._outside = None
                return self.stream.read(epoch, step)
            self._outside = (epoch, start, start)
        self._outside = (epoch, start, step + 1)
        if step + 1 == self.image_pipeline.steps:
            self._outside = None
        return self._read(epoch, step, True)

    def _read(self, epoch, step, counts):
        """Step `step` of epoch `epoch`; the last step of a pass that `counts` moves
        the cursor on."""
        batch = self.stream.read(epoch, step)
        if counts and step + 1 == self.image_pipeline.steps:
            self._cursor.read_whole(epoch)
        return batch

    def map(self, fn):
        """A dataset of `fn` applied to each of this dataset's batches (`MappedPyDataset`).

        As `tf.data.Dataset.map`: `fn` receives the items of a tuple batch as its
        arguments (`fn(images, masks)`), a dict batch as one argument, and returns
        the new batch. The epochs, `len()`, `ds[i]`, shards and
        `dalipipe.BackupAndRestore` are this dataset's.

        Args:
            fn: a function of a batch (the backend's tensors, on the pipeline's
                device) returning a batch.

        Returns:
            A `MappedPyDataset`.

        Raises:
            TypeError: for an `fn` that is not callable.
        """
        return MappedPyDataset(self, fn)

    def __repr__(self):
        pipeline = self.image_pipeline
        return (f"<DALIPyDataset: {len(pipeline.file_paths)} samples, {len(self)} batches "
                f"of {pipeline.batch_size}, {self.backend} tensors on {pipeline.device}>")


class MappedPyDataset(keras.utils.PyDataset):
    """A `DALIPyDataset` whose batches go through a function: `DALIPyDataset.map(fn)`.

    Each item is `fn(*batch)` for a tuple batch of the dataset (`fn(batch)` for a
    dict), read when Keras (or the user) reads the item, in the thread that reads
    it. Everything else is the dataset's, which this one reads through: its epochs
    (Keras's `on_epoch_begin` and `on_epoch_end` are passed on, and Keras's passes
    over this dataset are the dataset's passes, `dalipipe.passes`), `len()`,
    `num_batches`, `ds[i]` (`fn` of the dataset's `ds[i]`), `set_position` and
    its shards. Mapping a mapped dataset composes the functions. Reading this
    dataset moves the cursor of the dataset it maps, as reading a `tf.data`
    dataset's `map` reads its source.

    Attributes:
        dataset: the `DALIPyDataset` mapped.
        fn: the function applied to each batch.
        class_names, file_paths, image_pipeline, backend: the dataset's.
    """

    def __init__(self, dataset, fn):
        if not callable(fn):
            raise TypeError(f"`fn` must be a callable that takes a batch. Received: fn={fn!r}")
        super().__init__(workers=1, use_multiprocessing=False)
        self.dataset = dataset
        self.fn = fn
        self.class_names = dataset.class_names
        self.file_paths = dataset.file_paths
        self.image_pipeline = dataset.image_pipeline
        self.backend = dataset.backend

    def __len__(self):
        return len(self.dataset)

    @property
    def num_batches(self):
        return self.dataset.num_batches

    def set_position(self, epoch, batch=0):
        """The dataset's `DALIPyDataset.set_position`."""
        self.dataset.set_position(epoch, batch)

    def on_epoch_begin(self):
        self.dataset._begin_epoch(mapped=True)

    def on_epoch_end(self):
        self.dataset.on_epoch_end()

    def __getitem__(self, index):
        batch = self.dataset[index]
        return self.fn(*batch) if isinstance(batch, tuple) else self.fn(batch)

    def map(self, fn):
        """This dataset's batches through `fn` too: `DALIPyDataset.map` of `fn`
        after this dataset's function."""
        if not callable(fn):
            raise TypeError(f"`fn` must be a callable that takes a batch. Received: fn={fn!r}")
        first = self.fn

        def both(*batch):
            mapped = first(*batch)
            return fn(*mapped) if isinstance(mapped, tuple) else fn(mapped)

        return MappedPyDataset(self.dataset, both)

    def __repr__(self):
        return f"<MappedPyDataset of {self.dataset!r} by {getattr(self.fn, '__name__', self.fn)}>"


def source_of(dataset):
    """The `DALIPyDataset` that `dataset` maps (`MappedPyDataset`), else `dataset`."""
    return dataset.dataset if isinstance(dataset, MappedPyDataset) else dataset


def _reads_self(frame, dataset):
    """Whether Keras's generator `frame` reads `dataset` or its `map`."""
    return source_of(keras_hooks.read_py_dataset(frame)) is dataset


def _warn_workers(dataset):
    """Warns once per dataset that Keras's workers read it through a wrapper."""
    if getattr(dataset, "_warned_workers", False):
        return
    dataset._warned_workers = True
    warn(
        "A `keras.utils.PyDataset` with `workers > 1` reads this DALIPyDataset: Keras "
        "starts the epochs of that wrapper, not of the DALIPyDataset, whose batches are "
        "then read one by one out of order: every epoch repeats the same batches, "
        "slowly. Use `dataset.map(fn)` to transform its batches (DALI reads and "
        "decodes on its own threads: `workers=1`)."
    )


def make_py_dataset(splits, backend):
    """`make_dali_dataset`'s `"pydataset"` format: a `DALIPyDataset` per placed
    `ImagePipeline` of `split_source` (one, or a pair for `subset="both"`)."""
    return tuple(DALIPyDataset(p, backend) for p in splits)
