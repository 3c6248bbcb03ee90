"""`make_dali_pipeline` and `ImagePipeline`: a source's samples, its options and the
inputs of the DALI graph, without TensorFlow.

`make_dali_pipeline` indexes the source, checks its files, splits it, and returns an
`ImagePipeline` (two for `subset="both"`). An `ImagePipeline` knows its samples, its
output shapes, which samples each epoch loads in which order (`epoch_inputs`), and
makes the DALI pipeline of the graph (`build_dali_pipeline`); `epoch` runs it natively with
NumPy outputs (`dalipipe.native`); `dalipipe.tf_dataset` hands it to TensorFlow and
`dalipipe.py_dataset` to Keras's other backends.

Above 400 lines: the index-check-split sequence, and `ImagePipeline`, the one view of
a split (samples, output shapes, each epoch's inputs, shards) that the native runner
and both adapters read.
"""

import os
import threading

import numpy as np

from dalipipe import ahead, cache, checks, feed, graph, sources
from dalipipe.ranges import order as ranges_order, samples as ranges, tar
from dalipipe.annotations.inputs import index_with_boxes, index_with_masks
from dalipipe.annotations.members import mask_bytes
from dalipipe.annotations.placement import box_table, with_boxes
from dalipipe.calls import first_argument, warn
from dalipipe.dali_import import require_dali
from dalipipe.decoder_settings import decoder_hints, gpu_memory_line
from dalipipe.devices import cpu_decoded_share, default_num_threads, place
from dalipipe.options import TARGET_MODES, Options, is_inferred, pipeline_signature
from dalipipe.sharding import Sharding, check_global_batch
from dalipipe.storage import fetch, remote_sources as remote


@pipeline_signature
def make_dali_pipeline(directory=None, *, source=None, **options):
    """Indexes `source` and builds the DALI image pipeline for it, without TensorFlow.

    Takes the options of `dalipipe.make_dali_dataset` as keywords (see there), but
    not `format` or `strategy`, which choose the dataset's form; its signature lists
    them with their defaults, from `Options`. `device="auto"` means the GPU when DALI
    sees one.

    Returns:
        An `ImagePipeline`, or a pair (training, validation) of them when
        `subset="both"`; then `augment`, `mix` and `drop_remainder` apply to the
        training one only.

    Raises:
        TypeError: for a keyword that is not an option, `format`, or an argument of
            DALI's GPU decoder given on its own instead of in `decoder`.
    """
    options = Options.from_keywords("make_dali_pipeline", options)
    source = first_argument("make_dali_pipeline", directory, source)
    require_dali("make_dali_pipeline")
    return split_source(source, options, place(options))


def split_source(source, options, placement):
    """`make_dali_pipeline` for validated `Options`: index, check, split, on the
    device, CUDA device (where a GPU check decodes too) and threads of `placement`
    (`devices.place`), as its shard of a distributed dataset if it has one (see
    `ImagePipeline.shard`). With `verbose`, prints what Keras's
    `image_dataset_from_directory` prints and shows the check's progress.
    """
    device_id, sharding = placement.device_id, placement.sharding
    threads_given = options.num_threads is not None
    options = options.replace(device=placement.device, num_threads=placement.num_threads)
    options = options.resolved()
    if options.masks is not None or options.boxes is not None:
        dense = index_with_masks if options.masks is not None else index_with_boxes
        index, sizes = dense(source, options, device_id=device_id)
        options = decoder_hints(options.replace(label_mode=None), sizes)
    else:
        index, options = _index_images(source, options, device_id)
        if options.device == "gpu" and not threads_given and index.refs is None:
            # PNG and other formats the GPU does not decode take more CPU threads.
            options = options.replace(num_threads=default_num_threads(
                "gpu", cpu_decoded=cpu_decoded_share(index.file_paths)))
    parts = sources.split_index(index, validation_split=options.validation_split,
                                subset=options.subset, seed=options.seed,
                                shuffle=options.shuffle)
    if options.verbose and options.validation_split:
        subsets = ("training", "validation") if options.subset == "both" else (options.subset,)
        for name, part in zip(subsets, parts):
            print(f"Using {len(part)} files for {name}.")
    if sharding is not None:
        sharding = _check_sharding(options, *sharding)

    def placed(part, options):
        return ImagePipeline(part, options, sharding, device_id)

    if options.subset != "both":
        pipelines = (placed(parts[0], options),)
    else:
        # Validation data is neither augmented nor trimmed to whole batches, and it is
        # read in `file_paths` order, as Keras reads it.
        validation = options.replace(augment=False, mix=None, box_crop=False,
                                     drop_remainder=False, shuffle=False)
        pipelines = placed(parts[0], options), placed(parts[1], validation)
    if options.verbose and options.device == "gpu":
        _print_gpu_memory(pipelines)
    return pipelines if len(pipelines) == 2 else pipelines[0]


def _print_gpu_memory(pipelines):
    """Prints the GPU memory of `pipelines`' buffers (`decoder_settings.gpu_memory_line`),
    where the check gave the decoder's hints."""
    first = pipelines[0]
    sample_bytes = sum(int(np.prod([d for d in shape if d is not None])) * np.dtype(dtype).itemsize
                       for shape, dtype in zip(first.output_shapes, first.output_dtypes))
    replicas = 1 if first.sharding is None else len(first.sharding.replica_ids)
    line = gpu_memory_line(first.options, len(pipelines) * replicas, sample_bytes)
    if line:
        print(line)


def _index_images(source, options, device_id):
    """`split_source`'s index of an image source (without masks), checked:
    `(index, options)`, the options without labels where the source has none."""
    is_directory = (isinstance(source, (str, os.PathLike)) and os.path.isdir(source)) \
        or remote.is_prefix(source)
    labels = options.labels
    if options.label_columns is not None or (
            options.label_mode is None and not is_directory and is_inferred(labels)):
        labels = None  # a table or list has no labels to infer: images only
    index = sources.index_source(
        source, labels=labels, class_names=options.class_names,
        path_column=options.path_column, root=options.root,
        follow_links=options.follow_links, allow_missing=options.check is not None,
        verbose=options.verbose, label_columns=options.label_columns,
        label_mode=options.label_mode,
    )
    if options.label_mode is None:
        index = sources.Index(index.file_paths, None, None, index.tfrecord_files, index.refs)
    if options.verbose:
        _print_found(index)
    if options.check is not None:
        verdicts = checks.check_index(index, check=options.check,
                                      read_records=ranges.load_encoded,
                                      verbose=options.verbose, device=options.device,
                                      device_id=device_id)
        index = checks.apply_policy(index, verdicts, on_bad_file=options.on_bad_file,
                                    keep_classes=options.class_names is not None)
        options = decoder_hints(options, checks.image_sizes(verdicts))
    if index.labels is None:
        options = options.replace(labels=None, label_mode=None, class_names=None)
        if options.shuffle and len(index) > 1:
            warn(
                "Images without labels, and `shuffle=True`: every pass reads them in a new "
                "random order, so the rows of `model.predict` follow neither `file_paths` "
                "nor the source's order. To predict, pass `shuffle=False`.",
            )
    elif options.label_mode == "binary" and len(index.class_names) != 2:
        raise ValueError(
            'When passing `label_mode="binary"`, there must be exactly 2 class_names. '
            f"Received: class_names={index.class_names}"
        )
    else:
        options.check_class_weight(index.class_names)
    return index, options


def _check_sharding(options, replica_ids, num_replicas):
    """`Sharding(num_replicas, replica_ids)`, or ValueError when `options` cannot be
    split over `num_replicas` replicas."""
    if options.output == "dict":
        raise ValueError(
            "With several devices (a `strategy`, a distribution or `torch.distributed`) "
            "the last step is padded with samples of weight 0, which need the `(x, y, "
            "sample_weight)` form; `output='dict'` is the dict of Keras's preprocessing "
            f"layers, without weights. Received: output='dict', num_replicas={num_replicas}")
    if options.batch_size is None:
        raise ValueError(
            "A distributed dataset splits each global batch over the replicas, so it "
            "needs a `batch_size`. Received: batch_size=None"
        )
    check_global_batch(options.batch_size, num_replicas)
    return Sharding(num_replicas, tuple(int(r) for r in replica_ids))


def _print_found(index):
    """Keras's "Found N files belonging to K classes." (records for TFRecord files)."""
    what = "files" if index.refs is None else (
        f"samples in {len(index.tfrecord_files)} tar shards"
        if tar.is_tar_path(index.tfrecord_files[0])
        else f"records in {len(index.tfrecord_files)} TFRecord files")
    if index.labels is None or index.class_names is None:
        print(f"Found {len(index)} {what}.")
    else:
        print(f"Found {len(index)} {what} belonging to {len(index.class_names)} classes.")


class ImagePipeline:
    """One split of a source, with its options and the inputs of its DALI graph.

    Outputs per batch, `n <= batch_size` samples (`n < batch_size` only for the last
    batch of an epoch, unless `drop_remainder=True`):
    - images: `(n, height, width, channels)` for `"channels_last"`,
      `(n, channels, height, width)` for `"channels_first"`, of `dtype`; 3, 1 or 4
      channels for `color_mode` "rgb", "grayscale" or "rgba";
    - with `masks`, int32 masks `(n, height, width, 1)` (or `(n, 1, height, width)`);
      with `boxes`, float32 boxes `(n, max_boxes, 4)` then int32 labels
      `(n, max_boxes)`, -1 for padding (the adapters nest them: `annotations.elements`);
    - labels (unless `label_mode` is None): int32 `(n,)` for `"int"`, float32
      `(n, num_classes)` for `"categorical"` and `"multi_hot"`, float32 `(n, 1)` for
      `"binary"`, float32 `(n,)` for `"raw"` with one column's name in
      `label_columns` and `(n, k)` for a list of `k` columns;
    - weights, with `class_weight` or for a shard of a distributed dataset
      (`shard`): float32 `(n,)`, Keras's `sample_weight`: the weight of the sample's
      class (1.0 without `class_weight` or for a class it leaves out), times 0 for
      the padding of a shard, whose `n` is always the replica's batch size; with
      `masks`, float32 `(n, height, width)`, the sample's weight at every pixel
      (the shape of a segmentation loss's per-pixel values). A shard's padding
      samples have masks of `mask_fill_value` and boxes and labels of -1.

    With `batch_size=None` the outputs are single samples, without the batch
    dimension (DALI runs batches of one). `len()` is the number of steps per epoch.

    Attributes:
        options: the resolved `Options` (`device` is "cpu" or "gpu"; `label_mode`
            is None without labels).
        file_paths: the split's files, in `shuffle=False` order.
        labels: int32 labels aligned with `file_paths`, float32 targets (`"raw"`,
            `"multi_hot"`), or None.
        target_shape: the shape of one sample's float32 targets (`"raw"`,
            `"multi_hot"`), else None.
        class_names: the class names, or None.
        batch_size: samples per DALI batch (per replica for a shard).
        steps: steps per epoch (global batches for a shard).
        num_batches: DALI batches per epoch (`steps` times the replicas it feeds).
        device: `"cpu"` or `"gpu"`; `device_id`: the CUDA device ordinal of the GPU
            (as DALI counts them), or None on the CPU.
        input_names: the graph's inputs that are fed.
        num_random: the columns of the `"random"` input (0 when it is not fed).
        output_dtypes, output_shapes: NumPy dtype names and shapes (batch dimension
            None) of the outputs.
    """

    def __init__(self, index, options, sharding=None, device_id=0, *, image_cache=cache.OPEN):
        self.index = index
        self.options = options
        self.sharding = sharding
        self.file_paths = index.file_paths
        self.labels = index.labels
        self.class_names = index.class_names
        self.target_shape = tuple(index.labels.shape[1:]) \
            if options.label_mode in TARGET_MODES else None
        self.device = options.device
        self._boxes = None  # `annotations.placement.BoxTable`, made at the first epoch
        self.unbatched = options.batch_size is None
        n, global_batch = len(self.file_paths), options.batch_size or 1
        # Steps of the global batch. A shard's replicas all run this many full
        # batches: the last step is padded with zero-weight samples.
        self.steps = n // global_batch if options.drop_remainder else -(-n // global_batch)
        if self.steps == 0:
            raise ValueError(
                f"`drop_remainder=True` with `batch_size={global_batch}` leaves no batch of "
                f"the {n} samples of this split. Use a smaller `batch_size`."
            )
        if sharding is None:
            self.batch_size = global_batch
            self.batches_per_step = 1
        else:
            self.batch_size = global_batch // sharding.num_replicas
            self.batches_per_step = len(sharding.replica_ids)  # one per replica fed
        self.num_batches = self.steps * self.batches_per_step
        self.device_id = int(device_id) if self.device == "gpu" else None
        self.weighted = sharding is not None or options.class_weight is not None
        # DALI prunes an input the graph does not use: "random" only drives
        # augmentation and mixing.
        self.num_random = feed.random_columns(options)
        self.input_names = ("samples", "random") if self.num_random else ("samples",)
        if sharding is not None:
            self.input_names += ("weights",)
        self.output_dtypes, self.output_shapes = self._outputs()
        self._read_in_python = self.index.refs is None and remote.read_in_python(self.file_paths)
        # The decoded-image cache, or None: a `"cached"` input, three more graph outputs.
        # A shard is given its parent's (`image_cache`): the shards of a process fill one.
        self.cache = cache.open_cache(self) if image_cache is cache.OPEN else image_cache
        if self.cache is not None:
            self.input_names += ("cached",)
        self.inputs_ahead = ahead.InputsAhead(self)  # the passes' `epoch_inputs`, read-only
        self._tables = None  # `_path_tables`
        self._tables_lock = threading.Lock()
        self._runner = None

    def _outputs(self):
        options = self.options
        height, width = options.image_size
        channels = options.channels
        image_shape = ((None, height, width, channels) if options.data_format == "channels_last"
                       else (None, channels, height, width))
        dtypes, shapes = [options.dtype], [image_shape]
        if options.masks is not None:
            dtypes.append("int32")
            shapes.append((None, height, width, 1) if options.data_format == "channels_last"
                          else (None, 1, height, width))
        if options.boxes is not None:
            dtypes += ["float32", "int32"]
            shapes += [(None, options.max_boxes, 4), (None, options.max_boxes)]
        if options.label_mode is not None:
            dtypes.append("int32" if options.label_mode == "int" else "float32")
            shapes.append((None, *self.target_shape) if self.target_shape is not None else {
                "int": (None,),
                "categorical": (None, len(self.class_names)),
                "binary": (None, 1),
            }[options.label_mode])
        if self.weighted:  # a shard's masks weigh per pixel (`graph.padded_masks`)
            dtypes.append("float32")
            shapes.append((None, height, width) if options.masks is not None else (None,))
        if self.unbatched:
            shapes = [shape[1:] for shape in shapes]
        return tuple(dtypes), tuple(shapes)

    def __len__(self):
        return self.steps

    @property
    def from_tfrecord(self):
        """Whether the samples are TFRecord records (else image files)."""
        return self.index.refs is not None

    @property
    def feeds_bytes(self):
        """Whether `"samples"` holds the images' bytes, read here (TFRecord records,
        and `gs://` objects: `storage.remote_sources.read_in_python`), else the paths that
        DALI reads."""
        return self.from_tfrecord or self._read_in_python

    def shard(self, replica_ids, num_replicas, device_id=0):
        """This split as loaded by one input pipeline of a distributed dataset.

        The epoch's sample order is shared by all pipelines (same `seed`); every step
        takes the next `batch_size` samples of it (the global batch), and replica `r`
        gets the `r`-th slice of `batch_size // num_replicas` samples. The last step
        is padded with samples of weight 0 (unless `drop_remainder=True`), so every
        replica runs `steps` full batches and each sample counts exactly once per
        epoch. The pipeline gets a last output, float32 weights `(n,)` (0 for
        padding, else the sample's class weight), `(n, height, width)` per pixel
        with `masks`; a padding sample's mask is all `mask_fill_value`, its boxes
        and labels all -1.

        Args:
            replica_ids: the consecutive replicas this pipeline feeds, in the order
                their batches are consumed (one pipeline per replica, or per worker).
            num_replicas: replicas in sync over all workers.
            device_id: the CUDA device ordinal this pipeline runs on (ignored on the
                CPU).

        Returns:
            A new `ImagePipeline`.

        Raises:
            ValueError: when `batch_size` is not a multiple of `num_replicas`.
        """
        sharding = _check_sharding(self.options, replica_ids, num_replicas)
        return ImagePipeline(self.index, self.options, sharding, device_id,
                             image_cache=self.cache)

    def positions(self):
        """Which samples of an epoch's order this pipeline loads, and their weights.

        Returns:
            `(positions, weights)`: int64 indices into the epoch's order of the
            samples, in the order this pipeline loads them (`num_batches` batches of
            `batch_size`, the last one partial unless sharded or `drop_remainder`),
            and float32 weights for them (0 for padding), or None when not sharded.
        """
        n, b = len(self.file_paths), self.batch_size
        if self.sharding is None:
            return np.arange(min(n, self.num_batches * b), dtype=np.int64), None
        return self.sharding.positions(n, self.steps, b)

    def epoch_inputs(self, epoch=0, *, start_batch=0):
        """The inputs of epoch `epoch`: `(sample_ids, random, weights)`, NumPy arrays.

        `sample_ids`: int64 indices into `file_paths`, in loading order (see
        `sampling.epoch_order`, for objects read in large ranges
        `ranges.order.stream_order`, and `positions`); `random`: float32
        `(len(sample_ids), num_random)`, the draws of the crop, the recipe and the
        mixing (`feed.draw_random`); `weights`: float32 `(len(sample_ids),)`, or
        None unless the pipeline is a shard. They depend on `seed` and `epoch` only:
        the native runner and the TensorFlow inputs use them alike.

        Args:
            epoch: the epoch's number.
            start_batch: the first step to load, in steps of the global batch
                (`0 <= start_batch < steps`): the rows of the whole epoch's inputs
                from that step on, so the rest of an epoch has the samples, crops
                and flips that the whole epoch gives them.
        """
        start_batch = self.check_start_batch(start_batch)
        options = self.options
        owners = None if self.sharding is None else self.sharding.replica_of(
            len(self.file_paths), self.steps, self.batch_size)
        order = ranges_order.epoch_order(self.index, options.seed, epoch,
                                         shuffle=options.shuffle, owners=owners)
        positions, weights = self.positions()
        random = feed.draw_random(options, epoch, positions, batch_size=self.batch_size)
        first = start_batch * self.batch_size * self.batches_per_step
        sample_ids, random = order[positions][first:], random[first:]
        weights = None if weights is None else weights[first:]
        if options.boxes is not None:
            if self._boxes is None:  # the source's boxes as flat arrays, made once
                self._boxes = box_table(self.index.boxes)
            random = with_boxes(options, self._boxes, sample_ids, random,
                                padding=None if weights is None else weights == 0)
        return sample_ids, random, weights

    def check_position(self, epoch, start_batch):
        """`(epoch, start_batch)` as ints, or ValueError unless `epoch` is a
        non-negative integer and `start_batch` a step of an epoch."""
        if isinstance(epoch, bool) or not isinstance(epoch, (int, np.integer)) or epoch < 0:
            raise ValueError(f"`epoch` must be a non-negative integer. Received: epoch={epoch!r}")
        return int(epoch), self.check_start_batch(start_batch)

    def check_start_batch(self, start_batch):
        """`start_batch` as an int, or ValueError unless it is a step of an epoch."""
        if isinstance(start_batch, bool) or not isinstance(start_batch, (int, np.integer)) \
                or not 0 <= start_batch < self.steps:
            raise ValueError(
                f"`start_batch` must be an integer in [0, {self.steps}), the steps of an "
                f"epoch. Received: start_batch={start_batch!r}"
            )
        return int(start_batch)

    def load_samples(self, sample_ids):
        """The `"samples"` input batch for `sample_ids` (its layout: `dalipipe.feed`).

        Image files: uint8 `(n, label bytes + longest path)`, the label then the
        path padded with zeros (`feed.pack_paths`; DALI reads the files); with
        `masks`, the image's path and its mask's (`feed.pack_pairs`). Where the
        bytes are fed (`feeds_bytes`: TFRecord records, `gs://` objects): a list of
        `n` uint8 arrays, each the label, the int32 length and the image's bytes,
        or with `masks` the length, the bytes and the mask's path (`load_records`,
        `feed.split_records`), so that no image is padded to the batch's longest.

        Files checked before training are stat-ed again (`checks.verify_unchanged`),
        so that one deleted or replaced during training is named.
        """
        sample_ids = np.asarray(sample_ids, np.int64)
        if self.feeds_bytes:
            return feed.split_records(*self.load_records(sample_ids))
        if self.index.stamps is not None:
            self._verify_unchanged([self.file_paths[i] for i in sample_ids.tolist()],
                                   sample_ids)
        paths, masks = self._path_tables()
        if masks is not None:
            return paths.pack_pairs(sample_ids, masks)
        return paths.pack(sample_ids, None if self.labels is None else self.labels[sample_ids])

    def _path_tables(self):
        """`(images, masks)`: the `feed.PathTable`s of `file_paths` and of the masks
        (None without `masks`), made at the first batch (in the thread that loads it)."""
        with self._tables_lock:
            if self._tables is None:
                masks = self.index.mask_paths
                self._tables = (feed.PathTable(self.file_paths),
                                None if masks is None else feed.PathTable(masks))
            return self._tables

    def load_records(self, sample_ids):
        """The encoded images of `sample_ids` with their labels, one after the other in
        one buffer.

        TFRecord records are read here with `os.pread` (DALI's reader cannot
        reshuffle every epoch); `gs://` objects (`feeds_bytes`) with dalipipe's GCS
        client, in parallel, and local files of the same source from disk.

        Returns:
            `(flat, lengths)` (`feed.pack_records`): uint8 `(sum(lengths),)`, per
            sample its label, the int32 length of the encoded image, then its bytes
            (with `masks`: no label, and the mask's path after the bytes, or for
            tar shards the mask's length and bytes); and int64
            `(n,)`, each sample's length in `flat`.
        """
        sample_ids = np.asarray(sample_ids, np.int64)
        index = self.index
        labels = None if self.labels is None else self.labels[sample_ids]
        if self.from_tfrecord:
            refs = index.refs[sample_ids]
            if index.stamps is not None:
                used = np.unique(refs[:, 0])
                checks.verify_unchanged([index.tfrecord_files[i] for i in used],
                                        index.stamps[used], check=None)
            payloads = ranges.load_encoded(index.tfrecord_files, refs)
        else:
            payloads = self._read_files([self.file_paths[i] for i in sample_ids], sample_ids)
        if index.mask_refs is not None:  # members of tar shards: their bytes
            return feed.pack_records(payloads, None, mask_bytes=mask_bytes(index, sample_ids))
        masks = None if index.mask_paths is None else [index.mask_paths[i] for i in sample_ids]
        return feed.pack_records(payloads, labels, mask_paths=masks)

    def _verify_unchanged(self, paths, sample_ids):
        """`checks.verify_unchanged` for the files of `sample_ids`, if they were checked."""
        if self.index.stamps is not None:
            checks.verify_unchanged(paths, self.index.stamps[sample_ids],
                                    check=self.options.check)

    def _read_files(self, paths, sample_ids):
        """The bytes of `paths` (objects in parallel, `fetch.read_batch`): RuntimeError
        naming one that is gone or empty since the check, as DALI's reader names an
        `s3://` one."""
        self._verify_unchanged(paths, sample_ids)
        return fetch.read_batch(paths)

    def build_dali_pipeline(self, feed=None, batch_size=None, order=None):
        """A new DALI `Pipeline` object for this graph, not yet built.

        Args:
            feed: None for named placeholder inputs (`input_names`), which DALI's
                TensorFlow plugin fills from `tf.data`; or a callable `feed(name)`
                that returns a zero-argument callable giving the next batch of that
                input and raising StopIteration at the end of an epoch.
            batch_size: DALI's batch size. Defaults to `batch_size`.
            order: the outputs' order, as indices of `output_dtypes`. Defaults to
                theirs.
        """
        from nvidia.dali import pipeline_def

        @pipeline_def(
            batch_size=batch_size or self.batch_size,
            num_threads=self.options.num_threads,
            device_id=self.device_id,
            seed=self.options.seed,
            prefetch_queue_depth=self.options.prefetch_queue_depth,
            # Each batch in buffers of its own, valid while held: no copy of a CPU
            # batch (`native._to_numpy`, `passes.converter`). DALI's default here.
            exec_dynamic=True,
            # RGBA decoding and the recipes choose per sample.
            enable_conditionals=self.options.color_mode == "rgba"
            or self.options.recipe is not None or self.cache is not None,
        )
        def image_graph():
            outputs = graph.define(
                self.options, feed=feed, padded=self.sharding is not None,
                feeds_bytes=self.feeds_bytes,
                num_classes=len(self.class_names) if self.class_names else 0,
                target_shape=self.target_shape, cached=self.cache is not None,
                mask_bytes=self.index.mask_refs is not None,
            )
            # With the cache, its three outputs come last (`cache.stored_or_decoded`).
            outputs, stored = outputs[:len(self.output_dtypes)], outputs[len(self.output_dtypes):]
            return (outputs if order is None else tuple(outputs[i] for i in order)) + stored

        return image_graph()

    def epoch(self, epoch=0, *, start_batch=0):
        """Runs epoch `epoch` natively and yields each batch as a tuple of NumPy arrays.

        The inputs are `epoch_inputs(epoch, start_batch=start_batch)`: from step
        `start_batch` on, the batches that the whole epoch gives from there, and
        the earlier ones are not loaded. GPU outputs are copied to the host.
        """
        return self.run(*self.epoch_inputs(epoch, start_batch=start_batch))

    def run(self, sample_ids, random=None, weights=None, *, copy_to_host=True):
        """Runs the graph natively over the given inputs, a batch at a time.

        Args:
            sample_ids: int64 indices into `file_paths`, in the order to load.
            random: float32 array `(len(sample_ids), num_random)`: the draws of
                the crop, the recipe and the mixing (see `epoch_inputs`); only used
                with `augment` or `mix`. Defaults to zeros.
            weights: float32 array `(len(sample_ids),)`, only for a shard. Defaults
                to ones.
            copy_to_host: if True, yield NumPy arrays; if False, yield DALI's own
                outputs (`TensorListGPU` on a GPU), valid until the next batch.

        Yields:
            A tuple of outputs per batch (see the class doc).
        """
        from dalipipe import native

        if self._runner is None:
            self._runner = native.Runner(self)
        return self._runner.run(sample_ids, random, weights, copy_to_host=copy_to_host)
