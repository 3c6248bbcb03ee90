"""The TensorFlow adapter: an `ImagePipeline` as a `tf.data.Dataset` for Keras.

DALI's TensorFlow dataset plugin, placement on the device, and `tf.distribute`
sharding (`make_dali_dataset`'s "tf" format). The plugin's inputs, which end each
epoch exactly, are `dalipipe.tf_inputs`; the dataset returned, which refuses CPU
transformations on a GPU, is `dalipipe.tf_keras_dataset`; the device choice is
`dalipipe.devices`.
"""

import numpy as np
import tensorflow as tf

from dalipipe import dali_hooks
from dalipipe.devices import TF_GPU, tf_gpu_cuda_ordinal
from dalipipe.install import import_dali_tf
from dalipipe.pipeline import split_source
from dalipipe.sharding import check_global_batch, has_targets
from dalipipe.tf_inputs import EpochFeed
from dalipipe.tf_keras_dataset import KerasDataset, keras_structure, output_shapes

dali_tf = import_dali_tf()


def make_tf_dataset(source, options, placement, strategy=None):
    """`make_dali_dataset` for validated `Options` on TensorFlow: a `tf.data.Dataset`
    (a pair for `subset="both"`), or a `tf.distribute.DistributedDataset` with
    `strategy`.

    `placement` is the device decided before any pipeline is made
    (`devices.place`, after `check_strategy`): "gpu" or "cpu" (for the strategy's
    replicas with `strategy`), and for a GPU the CUDA device of TensorFlow's first
    GPU, where the check decodes and the pipeline runs (a strategy's replicas then
    each run on their own, `distribute`).
    """
    if options.cache is not None and placement.device == "gpu":
        raise ValueError(
            '`cache` on format "tf" runs on the CPU only for now (its fill is a `tf.data` '
            'map, and no CPU op may follow a GPU-placed DALI dataset); use format '
            '"pydataset" or "grain", or `device="cpu"`. '
            f"Received: cache={options.cache!r}, device='gpu'"
        )
    result = split_source(source, options, placement)
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
            device_id = (tf_gpu_cuda_ordinal(devices[replica])
                         if image_pipeline.device == "gpu" else 0)
            shard = image_pipeline.shard([replica], num_replicas, device_id=device_id)
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
            shard = image_pipeline.shard(range(first, first + local), num_replicas,
                                         device_id=image_pipeline.device_id or 0)
            return to_dataset(shard)

    dataset = strategy.distribute_datasets_from_function(dataset_fn, options)
    dataset.class_names = image_pipeline.class_names
    dataset.file_paths = list(image_pipeline.file_paths)
    return dataset


def check_strategy(strategy, options):
    """Raises ValueError unless `strategy` is a `tf.distribute.Strategy` that
    `options` can feed (labels to weigh, the same seed on every worker, a global
    batch that the replicas divide)."""
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
    if not has_targets(options):
        raise ValueError(
            "`strategy` pads the last step with zero-weight samples, which needs labels "
            "(or masks, or boxes) to weigh. To predict, make the dataset without "
            "`strategy`. "
            f"Received: labels={options.labels!r}, label_mode={options.label_mode!r}, "
            "masks=None, boxes=None"
        )
    check_global_batch(options.batch_size, strategy.num_replicas_in_sync)


def to_dataset(image_pipeline, device=None, *, nested=None):
    """Wraps an `ImagePipeline` in DALI's TensorFlow dataset (see `make_dali_dataset`).

    Every iterator is made at its first use (`tf_hooks.LazyIterator`), with
    its DALI pipeline, so that the iterators Keras makes and never reads (one at the
    end of every `fit` epoch and every validation pass) cost nothing. On the CPU, DALI's
    dataset is also nested in a `flat_map` (see `_pass_dataset`), so that the
    iterators of a transformed dataset (`dataset.map(...)`) build DALI's pipeline at
    their first element too. On a GPU the DALI dataset itself is the dataset: the
    nested form would give DALI host memory for its GPU outputs.

    Args:
        image_pipeline: the pipeline, or one shard of it (`ImagePipeline.shard`),
            made on its CUDA device (`image_pipeline.device_id`).
        device: the TensorFlow device to place it on. Defaults to `/gpu:0` for a GPU
            pipeline and `/cpu:0` otherwise.
        nested: whether DALI's dataset is nested in a `flat_map`. Defaults to True
            on the CPU and False on a GPU; False on the CPU gives the GPU's
            structure on the CPU (for tests).

    Returns:
        A `tf.data.Dataset` with `class_names` and `file_paths`, whose
        `cardinality()` is `image_pipeline.steps`.
    """
    gpu = image_pipeline.device == "gpu"
    if device is None:
        device = TF_GPU if gpu else "/cpu:0"
    if nested is None:
        nested = not gpu
    feed = EpochFeed(image_pipeline, gpu=not nested)

    def pass_dataset(start=0):
        return _pass_dataset(feed, device, start, nested=nested)

    return KerasDataset(pass_dataset(), image_pipeline, device=device if gpu else None,
                        feed=feed, rest_of_epoch=pass_dataset)


def _pass_dataset(feed, device, start_batch=0, *, nested):
    """The dataset whose every iteration is one pass of `feed`, from step
    `start_batch` on (see `to_dataset`)."""
    image_pipeline = feed.image_pipeline
    first = start_batch * image_pipeline.batches_per_step  # the first DALI batch of the pass
    parts = [([n for n in numbers if n >= first], size) for numbers, size in feed.parts]
    parts = [(numbers, size) for numbers, size in parts if len(numbers)]
    parts = [_dali_dataset(feed, numbers, size, join=i > 0, device=device)
             for i, (numbers, size) in enumerate(parts)]
    if not nested:
        # A `flat_map`'s iterator runs on the CPU (`FlatMapDataset` has a CPU kernel
        # only), and DALI copies its GPU outputs into memory from its iterator's
        # allocator (`ProduceOutputs` in `dali_dataset_op.cc`), which would be host
        # memory. A GPU epoch is one DALI dataset (`feed_parts`).
        return parts[0]
    whole = parts[0] if len(parts) == 1 else parts[0].concatenate(parts[1])
    with tf.device(device):
        dataset = tf.data.Dataset.range(1).flat_map(
            tf.autograph.experimental.do_not_convert(lambda _: whole))
        if image_pipeline.num_batches == image_pipeline.steps:
            # A real cardinality for tf.data too (`.map`, `.prefetch` keep it).
            dataset = dataset.apply(tf.data.experimental.assert_cardinality(
                image_pipeline.num_batches - start_batch))
        return dataset.with_options(_plain_options())


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
    _, order = keras_structure(image_pipeline)  # Keras's element, flat
    with tf.device(device):
        dtypes = tuple(tf.as_dtype(image_pipeline.output_dtypes[i]) for i in order)
        shapes = tuple(tf.TensorShape(output_shapes(image_pipeline)[i]) for i in order)
        if image_pipeline.cache is not None:  # its images, sizes and slots, last
            dtypes += (tf.uint8, tf.int32, tf.int32)
            shapes += _cache_shapes(image_pipeline)
        pipeline = image_pipeline.build_dali_pipeline(batch_size=batch_size, order=order)
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
    dali_hooks.shut_down(pipeline)
    if image_pipeline.cache is not None:
        dataset = strip_cache_outputs(dataset, image_pipeline.cache)
    return dataset


def _cache_shapes(image_pipeline):
    """The shapes of the cache's three outputs: uint8 stored images, int32 sizes and
    slots (`cache.stored_or_decoded`)."""
    shapes = [(None, *image_pipeline.cache.shape[1:]), (None, 2), (None,)]
    return tuple(tf.TensorShape(s[1:] if image_pipeline.unbatched else s) for s in shapes)


def strip_cache_outputs(dataset, store):
    """`dataset` (DALI's, whose last three outputs are the cache's) without them, each
    batch's decoded images given to `store.fill` first (a `tf.numpy_function`: on the
    CPU only)."""
    def fill(images, sizes, slots):
        store.fill(images, sizes, slots)
        return np.int64(0)

    @tf.autograph.experimental.do_not_convert
    def strip(*outputs):
        done = tf.numpy_function(fill, list(outputs[-3:]), tf.int64, stateful=True)
        with tf.control_dependencies([done]):
            kept = tuple(tf.identity(out) for out in outputs[:-3])
        return kept

    return dataset.map(strip)


def _plain_options():
    # As DALI's own dataset: no tf.data rewrites or autotuning around it.
    options = tf.data.Options()
    options.experimental_optimization.apply_default_optimizations = False
    options.autotune.enabled = False
    return options
