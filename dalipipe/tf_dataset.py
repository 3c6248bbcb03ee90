"""The TensorFlow adapter: an `ImagePipeline` as a `tf.data.Dataset` for Keras.

DALI's TensorFlow dataset plugin, placement on the device, exact epochs from finite
`tf.data` inputs, and `tf.distribute` sharding (`make_dali_dataset`'s "tf" format).
"""

import collections
import os
import threading
import warnings

import numpy as np
import tensorflow as tf

from dalipipe import graph, sampling
from dalipipe.install import GPU_TENSORFLOW_FIX, import_dali_tf
from dalipipe.options import MEMORY_GROWTH_VARIABLE, check_global_batch
from dalipipe.pipeline import choose_device, image_pipelines

dali_tf = import_dali_tf()


def make(source, options, strategy=None):
    """`make_dali_dataset` for validated `Options` on TensorFlow: a `tf.data.Dataset`
    (a pair for `subset="both"`), or a `tf.distribute.DistributedDataset` with
    `strategy`."""
    device = options.device
    if strategy is not None:
        _check_strategy(strategy, options)
        options = options.replace(device=_strategy_device(strategy, device))
    elif device in ("auto", "gpu"):
        options = options.replace(device=_resolve_gpu(device))
    result = image_pipelines(source, options)
    wrap = to_dataset if strategy is None else (lambda p: distribute(p, strategy))
    if isinstance(result, tuple):
        return tuple(wrap(p) for p in result)
    return wrap(result)


def distribute(image_pipeline, strategy):
    """Feeds `strategy`'s replicas from shards of `image_pipeline` (see `make_dali_dataset`).

    `MirroredStrategy`: one pipeline per replica, placed on the replica's device
    (`InputReplicationMode.PER_REPLICA`). Other strategies: one pipeline per worker
    feeding the worker's replicas in turn, sharded by the worker's index.

    Returns:
        A `tf.distribute.DistributedDataset` with `class_names` and `file_paths`.
    """
    num_replicas = strategy.num_replicas_in_sync
    if isinstance(strategy, tf.distribute.MirroredStrategy):
        devices = strategy.extended.worker_devices
        options = tf.distribute.InputOptions(
            experimental_place_dataset_on_device=True,
            experimental_fetch_to_device=False,
            experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA,
        )

        def dataset_fn(context):
            replica = context.input_pipeline_id
            shard = image_pipeline.shard([replica], num_replicas)
            return to_dataset(shard, device=devices[replica])
    else:
        options = tf.distribute.InputOptions(
            experimental_fetch_to_device=image_pipeline.device != "gpu"
        )
        local_replicas = len(strategy.extended.worker_devices)
        if image_pipeline.device == "gpu" and local_replicas > 1:
            raise ValueError(
                "With this strategy dalipipe builds one DALI pipeline per worker, on its "
                "first GPU: run one worker per GPU (set CUDA_VISIBLE_DEVICES). Received a "
                f"worker with {local_replicas} GPUs: {strategy.extended.worker_devices}"
            )

        def dataset_fn(context):
            local = num_replicas // context.num_input_pipelines
            first = context.input_pipeline_id * local
            shard = image_pipeline.shard(range(first, first + local), num_replicas)
            return to_dataset(shard)

    dataset = strategy.distribute_datasets_from_function(dataset_fn, options)
    dataset.class_names = image_pipeline.class_names
    dataset.file_paths = list(image_pipeline.file_paths)
    return dataset


def _check_strategy(strategy, options):
    if not isinstance(strategy, tf.distribute.Strategy):
        raise ValueError(
            "`strategy` must be a `tf.distribute.Strategy`, such as "
            f"`tf.distribute.MirroredStrategy()`. Received: strategy={strategy!r}"
        )
    if options.seed is None and isinstance(strategy,
                                           tf.distribute.MultiWorkerMirroredStrategy):
        raise ValueError(
            "Every worker of this strategy makes its own dataset, and they must draw "
            "the same order, split and augmentation: pass the same `seed` on every "
            f"worker. Received: seed=None, strategy={type(strategy).__name__}"
        )
    if options.label_mode is None or options.labels is None:
        raise ValueError(
            "`strategy` pads the last step with zero-weight samples, which needs labels "
            "to weigh. To predict, make the dataset without `strategy`. "
            f"Received: labels={options.labels!r}, label_mode={options.label_mode!r}"
        )
    check_global_batch(options.batch_size, strategy.num_replicas_in_sync)


def _strategy_device(strategy, device):
    """The DALI device for the strategy's replicas: GPUs only if they are all GPUs."""
    devices = strategy.extended.worker_devices
    kinds = {tf.DeviceSpec.from_string(d).device_type for d in devices}
    if kinds == {"GPU"}:
        if device == "cpu":
            raise ValueError(
                "`device='cpu'` puts DALI on the CPU, and this strategy's replicas are "
                f"GPUs: {devices}. Use device='auto' or 'gpu', or a strategy over CPUs."
            )
        return _resolve_gpu(device)
    if device == "gpu":
        raise ValueError(
            f"`device='gpu'` needs a strategy whose replicas are GPUs. Received a strategy "
            f"with replicas on {devices}"
        )
    return "cpu"


def to_dataset(image_pipeline, device=None):
    """Wraps an `ImagePipeline` in DALI's TensorFlow dataset (see `make_dali_dataset`).

    On the CPU the DALI dataset is made lazily: a new iterator builds its DALI
    pipeline, and starts its epoch, at its first element, so that the iterators Keras
    makes and never reads (one at the end of every `fit` epoch and every validation
    pass) cost nothing, and pass n is epoch n of `fit` too. On a GPU the DALI dataset
    itself is returned, built by every new iterator: the lazy form iterates it
    through a `flat_map`, whose iterator (`FlatMapDataset` has a CPU kernel only) runs
    on the CPU, and DALI copies its GPU outputs into memory from its iterator's
    allocator (`ProduceOutputs` in `dali_dataset_op.cc`), which would be host memory.

    Args:
        image_pipeline: the pipeline, or one shard of it (`ImagePipeline.shard`).
        device: the TensorFlow device to place it on. Defaults to `/gpu:0` for a GPU
            pipeline and `/cpu:0` otherwise. A GPU pipeline runs on the CUDA device of
            that TensorFlow GPU (`tf_gpu_cuda_ordinal`).

    Returns:
        A `tf.data.Dataset` with `class_names` and `file_paths`, whose
        `cardinality()` is `image_pipeline.steps`.
    """
    gpu = image_pipeline.device == "gpu"
    if device is None:
        device = "/gpu:0" if gpu else "/cpu:0"
    if gpu:
        image_pipeline = image_pipeline.on_device(tf_gpu_cuda_ordinal(device))
    feed = _EpochFeed(image_pipeline)
    parts = [_dali_dataset(feed, numbers, size, join=i > 0, device=device)
             for i, (numbers, size) in enumerate(feed.parts)]
    if gpu:
        dataset = parts[0]
    else:
        whole = parts[0] if len(parts) == 1 else parts[0].concatenate(parts[1])
        with tf.device(device):
            dataset = tf.data.Dataset.range(1).flat_map(lambda _: whole)
            if image_pipeline.num_batches == image_pipeline.steps:
                # A real cardinality for tf.data too (`.map`, `.prefetch` keep it).
                dataset = dataset.apply(
                    tf.data.experimental.assert_cardinality(image_pipeline.num_batches))
            dataset = dataset.with_options(_plain_options())
    return _KerasDataset(dataset, image_pipeline, device=device if gpu else None)


def _dali_dataset(feed, numbers, batch_size, *, join, device):
    """DALI's dataset over the batches `numbers` of each epoch of `feed`, DALI batches
    of `batch_size` (`join`: the epoch is the one the first part started)."""
    image_pipeline = feed.image_pipeline
    gpu = image_pipeline.device == "gpu"
    with tf.device("/cpu:0" if gpu else device):
        inputs = {name: feed.dataset(name, numbers, join=join)
                  for name in image_pipeline.input_names}
    if gpu:
        # DALI's plugin takes its inputs on the dataset's device (FeedInputs).
        inputs = {k: v.apply(tf.data.experimental.copy_to_device(device))
                  for k, v in inputs.items()}
    with tf.device(device):
        dtypes = tuple(tf.as_dtype(d) for d in image_pipeline.output_dtypes)
        shapes = tuple(tf.TensorShape(s) for s in image_pipeline.output_shapes)
        pipeline = image_pipeline.dali_pipeline(batch_size=batch_size)
        dataset = dali_tf.experimental.DALIDatasetWithInputs(
            pipeline=pipeline,
            input_datasets={
                name: dali_tf.experimental.Input(
                    inputs[name], batch=not (name == "samples" and feed.per_sample))
                for name in image_pipeline.input_names
            },
            output_dtypes=dtypes,
            output_shapes=shapes,
            batch_size=batch_size,
            num_threads=image_pipeline.options.num_threads,
            device_id=image_pipeline.device_id,
            prefetch_queue_depth=image_pipeline.options.prefetch_queue_depth,
        )
    # The plugin builds the Python pipeline only to read its inputs; every iterator
    # builds its own from the serialized graph. Release this one's threads and GPU
    # state now rather than when the dataset is collected.
    if hasattr(pipeline, "_shutdown"):
        pipeline._shutdown()
    return dataset


def _plain_options():
    # As DALI's own dataset: no tf.data rewrites or autotuning around it.
    options = tf.data.Options()
    options.experimental_optimization.apply_default_optimizations = False
    options.autotune.enabled = False
    return options


def feed_parts(num_loaded, batch_size, *, from_tfrecord, gpu):
    """How DALI's plugin is fed an epoch of `num_loaded` samples in batches of
    `batch_size`: `(per_sample, parts)`.

    TFRecord records go one per sample (DALI's `Input(..., batch=False)`), so that no
    record is padded to its batch's longest; file paths as one dense batch. DALI
    takes exactly `batch_size` samples per run from a per-sample input (a short last
    batch is dropped: `PrepareBatchesSampleMode` in `dali_dataset_op.cc`), so a
    partial last batch is a second part, a DALI dataset of that batch size, joined
    with `concatenate`. On a GPU there is no joining: `ConcatenateDataset` has a CPU
    kernel only, so the records of an epoch with a partial last batch go as dense
    batches, padded to each batch's longest record.

    Returns:
        `per_sample`: whether the `"samples"` input is per sample; `parts`: a list of
        `(batch numbers, DALI batch size)`, one per DALI dataset, in order.
    """
    num_batches = -(-num_loaded // batch_size)
    last = num_loaded - (num_batches - 1) * batch_size
    per_sample = from_tfrecord and not (gpu and last != batch_size)
    if not per_sample or last == batch_size:
        return per_sample, [(range(num_batches), batch_size)]
    parts = [(range(num_batches - 1), batch_size)] if num_batches > 1 else []
    return per_sample, parts + [(range(num_batches - 1, num_batches), last)]


def input_datasets(image_pipeline):
    """The `tf.data` inputs of the graph by name, for a CPU pipeline's whole epoch.

    Each iteration of an input is one epoch, numbered from 0 by the iterations that
    input has started, and holds that epoch's `ImagePipeline.epoch_inputs`: the
    `"samples"` (`ImagePipeline.load_samples`: one element per batch, or per record
    for TFRecord records), the `"random"` numbers, and for a shard the `"weights"`,
    one element per batch. So the n-th pass over the dataset loads what the native
    `ImagePipeline.epoch(n)` loads, and the shards of a distributed dataset split one
    common order.
    """
    feed = _EpochFeed(image_pipeline)
    numbers = range(image_pipeline.num_batches)
    return {name: feed.dataset(name, numbers) for name in image_pipeline.input_names}


class _EpochFeed:
    """The Python side of the inputs: epoch numbers and each epoch's batches."""

    def __init__(self, image_pipeline):
        self.image_pipeline = image_pipeline
        num_loaded = len(image_pipeline.positions()[0])
        self.per_sample, self.parts = feed_parts(
            num_loaded, image_pipeline.batch_size, from_tfrecord=image_pipeline.from_tfrecord,
            gpu=image_pipeline.device == "gpu")
        self.started = collections.Counter()
        self.epochs = collections.OrderedDict()
        self.lock = threading.Lock()

    def start(self, name):
        """The number of the epoch that input `name` starts now."""
        with self.lock:
            epoch = self.started[name]
            self.started[name] += 1
        return np.int64(epoch)

    def current(self, name):
        """The number of the epoch that input `name` started last."""
        with self.lock:
            return np.int64(self.started[name] - 1)

    def dataset(self, name, numbers, *, join=False):
        """Input `name` over the batches `numbers` of each epoch (`join`: of the epoch
        that the input started last)."""
        per_record = name == "samples" and self.per_sample
        dtype, shape = {
            "samples": (tf.uint8, [None] if per_record else [None, None]),
            "random": (tf.float32, [None, sampling.NUM_RANDOM]),
            "weights": (tf.float32, [None]),
        }[name]
        begin = self.current if join else self.start

        def start(_):
            with tf.device("/cpu:0"):
                return tf.numpy_function(lambda: begin(name), [], tf.int64, stateful=True)

        def batch(epoch, number):
            # Placed explicitly: once a strategy has distributed other datasets, Keras's
            # own distribution of this one otherwise gives the op a malformed device.
            # Not stateful: the same epoch and batch give the same rows (the stat calls
            # in `load_samples` only raise).
            with tf.device("/cpu:0"):
                if per_record:
                    flat, lengths = tf.numpy_function(self.records, [epoch, number],
                                                      (tf.uint8, tf.int64), stateful=False)
                    return tf.ensure_shape(flat, [None]), tf.ensure_shape(lengths, [None])
                values = tf.numpy_function(getattr(self, name), [epoch, number], dtype,
                                           stateful=False)
            return tf.ensure_shape(values, shape)

        numbers = tf.constant(list(numbers), tf.int64)
        batches = (
            tf.data.Dataset.range(1).map(start)
            .flat_map(lambda epoch: tf.data.Dataset.from_tensor_slices(numbers).map(
                lambda number: (epoch, number)))
            .map(batch, num_parallel_calls=2, deterministic=True)
        )
        return batches.flat_map(_records) if per_record else batches

    def _inputs(self, epoch):
        with self.lock:
            if epoch not in self.epochs:
                self.epochs[epoch] = self.image_pipeline.epoch_inputs(epoch)
                while len(self.epochs) > 3:
                    self.epochs.popitem(last=False)
            return self.epochs[epoch]

    def _rows(self, epoch, number):
        size = self.image_pipeline.batch_size
        return slice(int(number) * size, (int(number) + 1) * size)

    def _sample_ids(self, epoch, number):
        return self._inputs(int(epoch))[0][self._rows(epoch, number)]

    def samples(self, epoch, number):
        sample_ids = self._sample_ids(epoch, number)
        if not self.image_pipeline.from_tfrecord:
            return self.image_pipeline.load_samples(sample_ids)
        flat, lengths = self.image_pipeline.load_records(sample_ids)
        padded = np.zeros((len(lengths), int(lengths.max())), np.uint8)
        for row, start, length in zip(padded, np.cumsum(lengths) - lengths, lengths):
            row[:length] = flat[start:start + length]
        return padded

    def records(self, epoch, number):
        return self.image_pipeline.load_records(self._sample_ids(epoch, number))

    def random(self, epoch, number):
        return self._inputs(int(epoch))[1][self._rows(epoch, number)]

    def weights(self, epoch, number):
        return self._inputs(int(epoch))[2][self._rows(epoch, number)]


def _records(flat, lengths):
    """One element per record of a batch `(flat, lengths)` (`load_records`)."""
    ends = tf.cumsum(lengths)
    return tf.data.Dataset.from_tensor_slices((ends - lengths, ends)).map(
        lambda start, end: flat[start:end])


# Instance methods of `tf.data.Dataset` whose ops run on the CPU only.
_CPU_TRANSFORMATIONS = (
    "batch", "bucket_by_sequence_length", "cache", "concatenate", "enumerate", "filter",
    "flat_map", "group_by_window", "ignore_errors", "interleave", "map", "padded_batch",
    "ragged_batch", "rebatch", "rejection_resample", "repeat", "scan", "shard", "shuffle",
    "skip", "sparse_batch", "take", "take_while", "unbatch", "unique", "window",
)


class _KerasDataset(tf.data.Dataset):
    """The dataset `make_dali_dataset` returns: `dataset` with Keras's view of it.

    `cardinality()` is the number of steps per epoch (DALI reports an infinite one;
    Keras reads it, through a distributed dataset too, to end each epoch and to make
    a new iterator, a new order, for the next). The elements are the images
    themselves when they are the only output, as Keras's
    `image_dataset_from_directory` gives them (DALI's are always tuples: only the
    element's structure changes, no op runs on it). On a GPU, CPU transformations
    raise ValueError instead of failing inside TensorFlow.
    """

    def __init__(self, dataset, image_pipeline, *, device=None):
        spec = dataset.element_spec
        self._spec = spec[0] if isinstance(spec, tuple) and len(spec) == 1 else spec
        self._steps = image_pipeline.steps
        self._gpu_device = device
        self.image_pipeline = image_pipeline
        self.class_names = image_pipeline.class_names
        self.file_paths = list(image_pipeline.file_paths)
        self._input_dataset = dataset
        super().__init__(dataset._variant_tensor)

    def _inputs(self):
        return [self._input_dataset]

    @property
    def element_spec(self):
        return self._spec

    def cardinality(self):
        return tf.constant(self._steps, tf.int64)


def _cpu_transformation(name):
    inherited = getattr(tf.data.Dataset, name)

    def transformation(self, *args, **kwargs):
        if self._gpu_device is not None:
            raise ValueError(
                f"This dataset lives on the GPU ({self._gpu_device}), and `Dataset.{name}` "
                "runs on the CPU, which cannot read its tensors. Do the work in the DALI "
                "graph: `make_dali_dataset(..., class_weight={class index: weight})` gives "
                "sample weights (instead of Keras's `fit(class_weight=...)`, which maps the "
                "dataset); or make the dataset with `device='cpu'` to transform it with "
                f"tf.data. Received: Dataset.{name} on a dataset placed on {self._gpu_device}"
            )
        return inherited(self, *args, **kwargs)

    transformation.__name__ = name
    transformation.__doc__ = inherited.__doc__
    return transformation


for _name in _CPU_TRANSFORMATIONS:
    setattr(_KerasDataset, _name, _cpu_transformation(_name))


def tf_gpu_cuda_ordinal(device):
    """The CUDA device ordinal (DALI's `device_id`) of TensorFlow's GPU `device`
    (such as `"/gpu:1"`), from TensorFlow's visible GPUs (see `cuda_ordinal`)."""
    index = tf.DeviceSpec.from_string(device).device_index or 0
    visible = [(gpu.name, tf.config.get_logical_device_configuration(gpu))
               for gpu in tf.config.get_visible_devices("GPU")]
    return cuda_ordinal(index, visible, device=device)


def cuda_ordinal(index, visible, *, device=None):
    """The CUDA device ordinal of TensorFlow's logical GPU `index`.

    TensorFlow numbers its logical GPUs over its visible physical GPUs in the order
    of the physical ones (`tf.config.set_visible_devices` only filters them), each
    GPU split into its logical devices (`tf.config.set_logical_device_configuration`)
    in order; a physical GPU's name ends with its CUDA ordinal, as CUDA numbers the
    devices of `CUDA_VISIBLE_DEVICES`. A pure function of TensorFlow's answers.

    Args:
        index: the logical GPU's index, as in `/gpu:<index>`.
        visible: per visible physical GPU, `(name, configurations)`: its name
            (`"/physical_device:GPU:<ordinal>"`) and its logical device
            configurations (None when not split).
        device: the device name for messages. Defaults to `/gpu:<index>`.

    Raises:
        ValueError: when TensorFlow has no such logical GPU, or when logical GPUs are
            given an `experimental_device_ordinal`, which reorders them.
    """
    device = device or f"/gpu:{index}"
    logical = []
    for name, configurations in sorted(visible, key=lambda gpu: _physical_ordinal(gpu[0])):
        configurations = configurations or [None]
        if any(getattr(c, "experimental_device_ordinal", None) is not None
               for c in configurations):
            raise ValueError(
                "dalipipe finds the CUDA device of a TensorFlow GPU from the order of the "
                "visible GPUs, and `experimental_device_ordinal` reorders the logical GPUs. "
                "Configure the logical GPUs without it, or hide the other GPUs with "
                f"CUDA_VISIBLE_DEVICES. Received: device={device!r}, logical devices of "
                f"{name}: {configurations}"
            )
        logical += [_physical_ordinal(name)] * len(configurations)
    if not 0 <= index < len(logical):
        raise ValueError(
            f"TensorFlow has {len(logical)} visible logical GPUs, so there is no {device}. "
            f"Received: device={device!r}"
        )
    return logical[index]


def _physical_ordinal(name):
    return int(name.rsplit(":", 1)[1])


def _resolve_gpu(device):
    """`"gpu"` or `"cpu"` for `device` in ("auto", "gpu"); enables memory growth."""
    tf_gpus = tf.config.list_physical_devices("GPU")
    chosen = choose_device(device, len(tf_gpus), graph.dali_gpu_count(),
                           framework="TensorFlow", framework_fix=GPU_TENSORFLOW_FIX)
    if chosen == "gpu":
        _enable_memory_growth(tf_gpus)
    return chosen


def _enable_memory_growth(gpus):
    """Turns memory growth on for every GPU, or raises RuntimeError where TensorFlow
    has already created its devices with all the memory (see `memory_growth_error`)."""
    for gpu in gpus:
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except (RuntimeError, ValueError):
            pass  # the devices exist (or are split): their settings below say
        configurations = tf.config.get_logical_device_configuration(gpu) or []
        error = memory_growth_error(
            gpu.name, growth=tf.config.experimental.get_memory_growth(gpu),
            memory_limits=[c.memory_limit for c in configurations],
            variable=os.environ.get(MEMORY_GROWTH_VARIABLE),
        )
        if error:
            raise RuntimeError(error)


def memory_growth_error(gpu, *, growth, memory_limits, variable):
    """Why a DALI GPU pipeline would find no memory on `gpu`, or None.

    TensorFlow takes all of a GPU's memory but a small reserve (about 1.8 GiB on
    compute capability 9 and up) unless memory growth is on or a logical device has a
    memory limit. `TF_FORCE_GPU_ALLOW_GROWTH`, read when TensorFlow creates the device,
    overrides `set_memory_growth` when it is "true" or "false" (`GetAllowGrowthValue`,
    gpu_bfc_allocator.cc). A pure function of TensorFlow's answers.

    Args:
        gpu: the physical GPU's name, for the message.
        growth: `tf.config.experimental.get_memory_growth(gpu)`.
        memory_limits: the `memory_limit` of each of its logical device
            configurations (empty when it is not split).
        variable: the value of `TF_FORCE_GPU_ALLOW_GROWTH`, None when unset.

    Returns:
        The message for the RuntimeError, or None when TensorFlow leaves memory free.
    """
    if variable == "true" or (variable != "false" and growth):
        return None
    if any(limit is not None for limit in memory_limits):
        return None
    return (
        f"TensorFlow holds all the memory of {gpu} but a small reserve (memory growth is "
        "off and no memory limit is set), and DALI's GPU pipeline allocates its own. "
        "Import dalipipe before TensorFlow creates its GPU devices (before "
        "`tf.distribute.MirroredStrategy()` or the first op), which turns growth on by "
        "default; or set TF_FORCE_GPU_ALLOW_GROWTH=true before Python starts; or call "
        "`tf.config.experimental.set_memory_growth(gpu, True)` or give the GPU a "
        "`memory_limit` with `tf.config.set_logical_device_configuration` first. "
        f"Received: memory growth={growth}, {MEMORY_GROWTH_VARIABLE}={variable!r}"
    )
