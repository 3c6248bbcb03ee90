"""The DALI graph: read, decode, crop or resize, flip and normalize, on CPU or GPU.

Importable without TensorFlow: `make_dali_pipeline` builds the very graph that
`make_dali_dataset` hands to Keras, and `ImagePipeline.epoch` runs it natively with
NumPy outputs, so the graph can be checked on a machine that has DALI and no
TensorFlow.

The graph has named inputs, fed one batch at a time:
- `"samples"`: uint8 rows, a little-endian int32 label then the file path padded
  with NUL bytes (`sources.encode_samples`), or for TFRecord records the image's
  length and bytes (`ImagePipeline.load`). One row per sample keeps each label with
  its image whatever the order.
- `"random"`: float32 rows of `NUM_RANDOM` uniform numbers in [0, 1) per sample that
  drive the random-resized crop and the flip. Drawing them outside DALI gives fresh
  augmentation every epoch (DALI restarts its own generators with each new iterator)
  and the same crops on CPU and GPU for the same inputs.
- `"weights"` (only for a pipeline that is one shard of a distributed dataset, see
  `ImagePipeline.shard`): float32, one per sample, 0 for padding. It passes through
  to the third output, Keras's `sample_weight`.
"""

import math
import os
from typing import NamedTuple

import numpy as np

from dalipipe import checks, sources
from dalipipe.utils import listing, usable_cores

IMAGENET_DEFAULT_MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
IMAGENET_DEFAULT_STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)
NORMALIZATIONS = {
    "imagenet": (IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD),
    "unit": ((0.0, 0.0, 0.0), (255.0, 255.0, 255.0)),
    "symmetric": ((127.5, 127.5, 127.5), (127.5, 127.5, 127.5)),
    None: ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0)),
}
INTERPOLATIONS = ("bilinear", "nearest", "bicubic", "lanczos3", "gaussian")
LABEL_MODES = ("int", "categorical", "binary", None)
DTYPES = ("float32", "float16", "uint8")
DATA_FORMATS = ("channels_last", "channels_first")
DEVICES = ("auto", "gpu", "cpu")
SUBSETS = ("training", "validation", "both")
# Random-resized crop, as in Inception and torchvision: area fraction and aspect ratio.
RANDOM_AREA = (0.08, 1.0)
RANDOM_ASPECT_RATIO = (3 / 4, 4 / 3)
# Uniform numbers per sample: area, log aspect ratio, x, y, flip.
NUM_RANDOM = 5


def dali_gpu_count():
    """Number of CUDA devices DALI can use (0 on a machine without a driver)."""
    from nvidia.dali import backend

    try:
        return backend.GetCUDADeviceCount()
    except RuntimeError:
        return 0


def make_dali_pipeline(
    source,
    *,
    labels="inferred",
    label_mode="int",
    class_names=None,
    path_column="path",
    root=None,
    image_size=(256, 256),
    batch_size=32,
    shuffle=True,
    seed=None,
    validation_split=None,
    subset=None,
    interpolation="bilinear",
    antialias=True,
    crop_to_aspect_ratio=False,
    central_fraction=1.0,
    augment=False,
    normalization="imagenet",
    dtype="float32",
    data_format="channels_last",
    drop_remainder=False,
    device="auto",
    num_threads=None,
    prefetch_queue_depth=2,
    check="structure",
    on_bad_file="raise",
):
    """Indexes `source` and builds the DALI image pipeline for it, without TensorFlow.

    Takes the arguments of `dalipipe.make_dali_dataset` (see there). `device="auto"`
    means the GPU when DALI sees one.

    Returns:
        An `ImagePipeline`, or a pair (training, validation) of them when
        `subset="both"`; then `augment` and `drop_remainder` apply to the training
        one only.
    """
    options = _validate(
        labels=labels, label_mode=label_mode, class_names=class_names,
        image_size=image_size, batch_size=batch_size, shuffle=shuffle, seed=seed,
        validation_split=validation_split, subset=subset, interpolation=interpolation,
        antialias=antialias, crop_to_aspect_ratio=crop_to_aspect_ratio,
        central_fraction=central_fraction,
        augment=augment, normalization=normalization, dtype=dtype, data_format=data_format,
        drop_remainder=drop_remainder, device=device, num_threads=num_threads,
        prefetch_queue_depth=prefetch_queue_depth, check=check, on_bad_file=on_bad_file,
    )
    if options["device"] == "auto":
        options["device"] = "gpu" if dali_gpu_count() > 0 else "cpu"
    elif options["device"] == "gpu" and dali_gpu_count() == 0:
        raise RuntimeError(
            "`device='gpu'` needs a CUDA GPU that DALI can use, and DALI found none. "
            "Use device='cpu' or device='auto'."
        )
    is_directory = isinstance(source, (str, os.PathLike)) and os.path.isdir(source)
    if label_mode is None and not is_directory and sources.is_inferred(labels):
        labels = None  # a table or list has no labels to infer: images only
    index = sources.index_source(
        source, labels=labels, class_names=class_names, path_column=path_column, root=root,
        allow_missing=check is not None,
    )
    if check is not None:
        from dalipipe import tfrecord

        bad, index = checks.check_index(index, check=check, read_records=tfrecord.load_encoded)
        index = checks.apply_policy(index, bad, on_bad_file=on_bad_file,
                                    keep_classes=class_names is not None)
    if index.labels is None:
        options["label_mode"] = None
    elif options["label_mode"] == "binary" and len(index.class_names) != 2:
        raise ValueError(
            f"`label_mode='binary'` needs exactly 2 classes. Found {len(index.class_names)}: "
            f"{listing(index.class_names)}"
        )
    parts = sources.split_index(
        index, validation_split=validation_split, subset=subset, seed=options["seed"]
    )
    if subset != "both":
        return ImagePipeline(parts[0], **options)
    # Validation data is neither augmented nor trimmed to whole batches.
    validation = {**options, "augment": False, "drop_remainder": False}
    return ImagePipeline(parts[0], **options), ImagePipeline(parts[1], **validation)


class Sharding(NamedTuple):
    """Which replicas of a distributed dataset a pipeline feeds (`ImagePipeline.shard`)."""

    num_replicas: int
    replica_ids: tuple
    device_id: int


class ImagePipeline:
    """One split of a source with the DALI graph that loads it.

    Outputs per batch, `n <= batch_size` samples (`n < batch_size` only for the last
    batch of an epoch, unless `drop_remainder=True`):
    - images: `(n, height, width, 3)` for `"channels_last"`, `(n, 3, height, width)`
      for `"channels_first"`, of `dtype`;
    - labels (unless `label_mode` is None): int32 `(n,)` for `"int"`, float32
      `(n, num_classes)` for `"categorical"`, float32 `(n, 1)` for `"binary"`;
    - weights, only for a shard of a distributed dataset (`shard`): float32 `(n,)`,
      1 for a sample and 0 for padding; then `n` is always the replica's batch size.

    Attributes:
        file_paths: the split's files, in `shuffle=False` order.
        labels: int32 labels aligned with `file_paths`, or None.
        class_names: the class names, or None.
        batch_size: samples per DALI batch (per replica for a shard).
        steps: steps per epoch (global batches for a shard).
        num_batches: DALI batches per epoch (`steps` times the replicas it feeds).
        device: `"cpu"` or `"gpu"`.
        output_dtypes, output_shapes: NumPy dtype names and shapes (batch dimension
            None) of the outputs.
    """

    def __init__(self, index, sharding=None, **options):
        self.index = index
        self.file_paths = index.file_paths
        self.labels = index.labels
        self.class_names = index.class_names
        self.options = options
        self.sharding = sharding
        self.seed = options["seed"]
        self.device = options["device"]
        self.label_mode = options["label_mode"]
        self.num_threads = options["num_threads"]
        n, global_batch = len(self.file_paths), options["batch_size"]
        # Steps of the global batch. A shard's replicas all run this many full
        # batches: the last step is padded with zero-weight samples.
        self.steps = n // global_batch if options["drop_remainder"] else -(-n // global_batch)
        if sharding is None:
            self.batch_size = global_batch
            self.device_id = 0 if self.device == "gpu" else None
            self.num_batches = self.steps
        else:
            self.batch_size = global_batch // sharding.num_replicas
            self.device_id = sharding.device_id if self.device == "gpu" else None
            self.num_batches = self.steps * len(sharding.replica_ids)
        if self.steps == 0:
            raise ValueError(
                f"`drop_remainder=True` with `batch_size={global_batch}` leaves no batch of "
                f"the {n} samples of this split. Use a smaller `batch_size`."
            )
        # DALI prunes an input the graph does not use: "random" only drives augmentation.
        self.input_names = ("samples", "random") if options["augment"] else ("samples",)
        if sharding is not None:
            self.input_names += ("weights",)
        height, width = options["image_size"]
        image_shape = (
            (None, height, width, 3)
            if options["data_format"] == "channels_last"
            else (None, 3, height, width)
        )
        self.output_dtypes = (options["dtype"],)
        self.output_shapes = (image_shape,)
        if self.label_mode is not None:
            label_shape = {
                "int": (None,),
                "categorical": (None, len(self.class_names)),
                "binary": (None, 1),
            }[self.label_mode]
            self.output_dtypes += ("int32" if self.label_mode == "int" else "float32",)
            self.output_shapes += (label_shape,)
        if sharding is not None:
            self.output_dtypes += ("float32",)
            self.output_shapes += ((None,),)
        self._native = None

    def shard(self, replica_ids, num_replicas, device_id=0):
        """This split as loaded by one input pipeline of a distributed dataset.

        The epoch's sample order is shared by all pipelines (same `seed`); every step
        takes the next `batch_size` samples of it (the global batch), and replica `r`
        gets the `r`-th slice of `batch_size // num_replicas` samples. The last step
        is padded with samples of weight 0 (unless `drop_remainder=True`), so every
        replica runs `steps` full batches and each sample has weight 1 exactly once
        per epoch. The pipeline gets a third output, float32 weights `(n,)`.

        Args:
            replica_ids: the consecutive replicas this pipeline feeds, in the order
                their batches are consumed (one pipeline per replica, or per worker).
            num_replicas: replicas in sync over all workers.
            device_id: the GPU this pipeline runs on (ignored on the CPU).

        Returns:
            A new `ImagePipeline`.

        Raises:
            ValueError: when `batch_size` is not a multiple of `num_replicas`.
        """
        check_global_batch(self.options["batch_size"], num_replicas)
        replica_ids = tuple(int(r) for r in replica_ids)
        return ImagePipeline(
            self.index, sharding=Sharding(num_replicas, replica_ids, device_id), **self.options
        )

    def __len__(self):
        return self.num_batches

    @property
    def records(self):
        """Whether the samples are TFRecord records (else image files)."""
        return self.index.refs is not None

    def load(self, rows):
        """The `"samples"` input batch for the sample numbers `rows` (see the module doc).

        Image files: uint8 `(n, 4 + longest path)`, the int32 label then the path
        (DALI reads the files). TFRecord records: uint8 `(n, 8 + longest image)`, the
        int32 label, the int32 length of the encoded image and its bytes (read here
        with `os.pread`: DALI's reader cannot reshuffle every epoch). Padded with
        zeros.

        Files checked before training are stat-ed again (`checks.verify_unchanged`),
        so that one deleted or replaced during training is named.
        """
        rows = np.asarray(rows, np.int64)
        index = self.index
        labels = None if self.labels is None else self.labels[rows]
        if not self.records:
            paths = [self.file_paths[i] for i in rows]
            if index.stamps is not None:
                checks.verify_unchanged(paths, index.stamps[rows], check=self.options["check"])
            return sources.encode_samples(paths, labels)
        from dalipipe import tfrecord

        refs = index.refs[rows]
        if index.stamps is not None:
            used = np.unique(refs[:, 0])
            checks.verify_unchanged([index.shards[i] for i in used], index.stamps[used],
                                    check=None)
        return sources.pack_rows(labels, tfrecord.load_encoded(index.shards, refs),
                                 with_length=True)

    def build(self, feed=None):
        """Builds a new DALI pipeline object for this graph (not yet started).

        Args:
            feed: None for named placeholder inputs (`"samples"`, `"random"`), which
                DALI's TensorFlow plugin fills from `tf.data`; or a callable
                `feed(name)` that returns a zero-argument callable giving the next
                batch of that input and raising StopIteration at the end of an epoch.
        """
        from nvidia.dali import pipeline_def

        opts = self.options

        @pipeline_def(
            batch_size=self.batch_size,
            num_threads=self.num_threads,
            device_id=self.device_id,
            seed=self.seed,
            prefetch_queue_depth=opts["prefetch_queue_depth"],
        )
        def graph():
            return _graph(
                feed=feed,
                device=self.device,
                label_mode=self.label_mode,
                weighted=self.sharding is not None,
                records=self.records,
                num_classes=len(self.class_names) if self.class_names else 0,
                **{k: opts[k] for k in (
                    "image_size", "interpolation", "antialias", "crop_to_aspect_ratio",
                    "central_fraction", "augment",
                    "normalization", "dtype", "data_format",
                )},
            )

        return graph()

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
        global_batch = b * self.sharding.num_replicas
        positions = (
            np.arange(self.steps, dtype=np.int64)[:, None, None] * global_batch
            + np.asarray(self.sharding.replica_ids, np.int64)[None, :, None] * b
            + np.arange(b, dtype=np.int64)[None, None, :]
        ).reshape(-1)
        # Padding repeats samples from the start of the order, with weight 0.
        return positions % n, (positions < n).astype(np.float32)

    def epoch_inputs(self, epoch=0):
        """The inputs of one native epoch: `(samples, random, weights)` as NumPy arrays.

        `weights` is None unless the pipeline is a shard. The order and the random
        numbers depend on `seed` and `epoch` only.
        """
        n = len(self.file_paths)
        order = np.arange(n)
        if self.options["shuffle"]:
            order = np.random.default_rng([self.seed, epoch, 0]).permutation(n)
        positions, weights = self.positions()
        rows = order[positions]
        random = np.random.default_rng([self.seed, epoch, 1]).random(
            (len(positions), NUM_RANDOM), np.float32
        )
        return rows, random, weights

    def epoch(self, epoch=0):
        """Runs one epoch natively and yields each batch as a tuple of NumPy arrays.

        The inputs are `epoch_inputs(epoch)`; GPU outputs are copied to the host.
        """
        return self.run(*self.epoch_inputs(epoch))

    def run(self, samples, random=None, weights=None, *, copy_to_host=True):
        """Runs the graph natively over the given input rows, a batch at a time.

        Args:
            samples: int64 sample numbers (indices into `file_paths`), in the order
                to load.
            random: float32 array `(len(samples), NUM_RANDOM)` of uniform numbers in
                [0, 1); only used with `augment=True`. Defaults to zeros.
            weights: float32 array `(len(samples),)`, only for a shard. Defaults to
                ones.
            copy_to_host: if True, yield NumPy arrays; if False, yield DALI's own
                outputs (`TensorListGPU` on a GPU), valid until the next batch.

        Yields:
            A tuple of outputs per batch (see the class doc).
        """
        inputs = {
            "samples": np.asarray(samples),
            "random": np.zeros((len(samples), NUM_RANDOM), np.float32)
            if random is None else np.asarray(random, np.float32),
            "weights": np.ones(len(samples), np.float32)
            if weights is None else np.asarray(weights, np.float32),
        }
        if self._native is None:
            self._feeder = _Feeder()
            self._native = self.build(feed=self._feeder.source)
            self._native.build()
        self._feeder.start(inputs, self.batch_size, self.load)
        self._native.reset()
        while True:
            try:
                outputs = self._native.run()
            except StopIteration:
                return
            yield tuple(_to_numpy(out) for out in outputs) if copy_to_host else tuple(outputs)


class _Feeder:
    """Native epochs for `ImagePipeline.run`: batches of every input, in step."""

    def __init__(self):
        self.batches = {}
        self.position = {}

    def start(self, inputs, batch_size, load):
        self.batches = {
            name: [rows[i: i + batch_size] for i in range(0, len(rows), batch_size)]
            for name, rows in inputs.items()
        }
        self.position = dict.fromkeys(inputs, 0)
        self.load = load

    def source(self, name):
        def next_batch():
            i = self.position[name]
            if i >= len(self.batches[name]):
                raise StopIteration
            self.position[name] = i + 1
            batch = self.batches[name][i]
            return self.load(batch) if name == "samples" else batch

        return next_batch


def _to_numpy(tensor_list):
    if hasattr(tensor_list, "as_cpu"):
        tensor_list = tensor_list.as_cpu()
    return np.array(tensor_list.as_tensor())


def _graph(*, feed, device, label_mode, weighted, records, num_classes, image_size, interpolation, antialias,
           crop_to_aspect_ratio, central_fraction, augment, normalization, dtype,
           data_format):
    """Defines the graph inside a `pipeline_def` function; returns its outputs."""
    from nvidia.dali import fn, types

    def external(name, dali_type, ndim=1):
        if feed is None:
            return fn.external_source(name=name, dtype=dali_type, ndim=ndim, batch=True)
        return fn.external_source(source=feed(name), dtype=dali_type, ndim=ndim, batch=True)

    samples = external("samples", types.UINT8)
    random = external("random", types.FLOAT)
    label = fn.reinterpret(samples[0:4], dtype=types.INT32, shape=[])
    if records:
        length = fn.reinterpret(samples[4:8], dtype=types.INT32, shape=[])
        encoded = samples[8:8 + length]
    else:
        encoded = fn.io.file.read(samples[4:])
    decoder_device = "mixed" if device == "gpu" else "cpu"
    interp = {
        "bilinear": types.INTERP_LINEAR,
        "nearest": types.INTERP_NN,
        "bicubic": types.INTERP_CUBIC,
        "lanczos3": types.INTERP_LANCZOS3,
        "gaussian": types.INTERP_GAUSSIAN,
    }[interpolation]
    height, width = image_size
    if augment:
        anchor, shape = _random_resized_crop_window(encoded, random)
        images = fn.decoders.image_slice(
            encoded, anchor, shape, device=decoder_device, output_type=types.RGB,
            normalized_anchor=False, normalized_shape=False, axis_names="WH",
        )
        images = fn.resize(images, size=(height, width), interp_type=interp, antialias=antialias)
        mirror = fn.cast(random[4] < 0.5, dtype=types.INT32)
    else:
        images = fn.decoders.image(encoded, device=decoder_device, output_type=types.RGB)
        roi = {}
        if crop_to_aspect_ratio or central_fraction < 1:
            roi = _central_window(encoded, image_size, crop_to_aspect_ratio, central_fraction)
        images = fn.resize(images, size=(height, width), interp_type=interp,
                           antialias=antialias, **roi)
        mirror = 0
    mean, std = NORMALIZATIONS[normalization]
    images = fn.crop_mirror_normalize(
        images,
        mirror=mirror,
        mean=list(mean),
        std=list(std),
        dtype={"float32": types.FLOAT, "float16": types.FLOAT16, "uint8": types.UINT8}[dtype],
        output_layout="HWC" if data_format == "channels_last" else "CHW",
    )
    outputs = [images]
    if label_mode is not None:
        if label_mode == "categorical":
            label = fn.one_hot(label, num_classes=num_classes, dtype=types.FLOAT)
        elif label_mode == "binary":
            label = fn.reshape(fn.cast(label, dtype=types.FLOAT), shape=[1])
        outputs.append(label)
    if weighted:
        outputs.append(external("weights", types.FLOAT, ndim=0))
    if device == "gpu":
        outputs[1:] = [out.gpu() for out in outputs[1:]]
    return tuple(outputs)


def _central_window(encoded, image_size, crop_to_aspect_ratio, central_fraction):
    """`fn.resize` arguments that resize only the central window, in one step.

    The window has the output's aspect ratio when `crop_to_aspect_ratio` (the largest
    such window), else the whole image, scaled by `central_fraction` about the center.
    Exact in continuous coordinates: no size or offset is rounded to whole pixels.
    """
    import nvidia.dali.math as dmath
    from nvidia.dali import fn, types

    shape = fn.peek_image_shape(encoded, dtype=types.FLOAT)
    image_h, image_w = shape[0], shape[1]
    window_h, window_w = image_h, image_w
    if crop_to_aspect_ratio:
        aspect = image_size[1] / image_size[0]  # width / height of the output
        window_w = dmath.min(image_w, image_h * aspect)
        window_h = dmath.min(image_h, image_w / aspect)
    window_h, window_w = window_h * central_fraction, window_w * central_fraction
    top, left = (image_h - window_h) / 2, (image_w - window_w) / 2
    return {
        "roi_start": fn.stack(top, left),
        "roi_end": fn.stack(top + window_h, left + window_w),
        "roi_relative": False,
    }


def _random_resized_crop_window(encoded, random):
    """Anchor and shape (x, y and width, height in pixels) of a random-resized crop.

    Area fraction uniform in `RANDOM_AREA`, aspect ratio log-uniform in
    `RANDOM_ASPECT_RATIO`, position uniform, all from the `"random"` input; a window
    larger than the image is clipped to it.
    """
    import nvidia.dali.math as dmath
    from nvidia.dali import fn, types

    shape = fn.peek_image_shape(encoded, dtype=types.FLOAT)
    image_h, image_w = shape[0], shape[1]
    area = image_h * image_w * (RANDOM_AREA[0] + random[0] * (RANDOM_AREA[1] - RANDOM_AREA[0]))
    log_lo, log_hi = math.log(RANDOM_ASPECT_RATIO[0]), math.log(RANDOM_ASPECT_RATIO[1])
    ratio = dmath.exp(log_lo + random[1] * (log_hi - log_lo))
    crop_w = dmath.max(dmath.min(dmath.sqrt(area * ratio), image_w), 1.0)
    crop_h = dmath.max(dmath.min(dmath.sqrt(area / ratio), image_h), 1.0)
    x = random[2] * (image_w - crop_w)
    y = random[3] * (image_h - crop_h)
    return fn.stack(x, y), fn.stack(crop_w, crop_h)


def check_global_batch(batch_size, num_replicas):
    """Raises ValueError unless the global `batch_size` splits evenly over the replicas."""
    if batch_size % num_replicas:
        raise ValueError(
            "`batch_size` is the global batch, split evenly over the replicas, so it must "
            f"be a multiple of their number. Received: batch_size={batch_size} for "
            f"{num_replicas} replicas"
        )


def _one_of(name, value, allowed):
    if value not in allowed:
        raise ValueError(f"`{name}` must be one of {allowed}. Received: {name}={value!r}")


def _positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"`{name}` must be a positive integer. Received: {name}={value!r}")


def _validate(*, labels, label_mode, class_names, image_size, batch_size, shuffle, seed,
              validation_split, subset, interpolation, antialias, crop_to_aspect_ratio,
              central_fraction, augment, normalization, dtype, data_format, drop_remainder,
              device, num_threads, prefetch_queue_depth, check, on_bad_file):
    """Checks every option; returns the resolved options for `ImagePipeline`."""
    _one_of("check", check, checks.CHECKS)
    _one_of("on_bad_file", on_bad_file, checks.ON_BAD_FILE)
    _one_of("label_mode", label_mode, LABEL_MODES)
    _one_of("interpolation", interpolation, INTERPOLATIONS)
    _one_of("normalization", normalization, tuple(NORMALIZATIONS))
    _one_of("dtype", dtype, DTYPES)
    _one_of("data_format", data_format, DATA_FORMATS)
    _one_of("device", device, DEVICES)
    if (
        not isinstance(image_size, (tuple, list))
        or len(image_size) != 2
        or any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0
               for v in image_size)
    ):
        raise ValueError(
            "`image_size` must be a tuple of two positive integers (height, width). "
            f"Received: image_size={image_size!r}"
        )
    _positive_int("batch_size", batch_size)
    _positive_int("prefetch_queue_depth", prefetch_queue_depth)
    if num_threads is not None:
        _positive_int("num_threads", num_threads)
    for name, value in (("shuffle", shuffle), ("augment", augment), ("antialias", antialias),
                        ("crop_to_aspect_ratio", crop_to_aspect_ratio),
                        ("drop_remainder", drop_remainder)):
        if not isinstance(value, bool):
            raise ValueError(f"`{name}` must be True or False. Received: {name}={value!r}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))
                             or seed < 0):
        raise ValueError(f"`seed` must be a non-negative integer or None. Received: seed={seed!r}")
    if dtype == "uint8" and normalization is not None:
        raise ValueError(
            "`dtype='uint8'` holds unnormalized pixels: it needs `normalization=None`. "
            f"Received: dtype={dtype!r}, normalization={normalization!r}"
        )
    if isinstance(central_fraction, bool) \
            or not isinstance(central_fraction, (float, int, np.floating, np.integer)) \
            or not 0 < central_fraction <= 1:
        raise ValueError(
            "`central_fraction` must be in (0, 1]. "
            f"Received: central_fraction={central_fraction!r}"
        )
    if augment and central_fraction != 1:
        raise ValueError(
            "`augment=True` crops at random and `central_fraction` crops the center: "
            f"choose one. Received: augment=True, central_fraction={central_fraction}"
        )
    if augment and crop_to_aspect_ratio:
        raise ValueError(
            "`augment=True` crops at random and `crop_to_aspect_ratio=True` crops the "
            "center: choose one. Received: augment=True, crop_to_aspect_ratio=True"
        )
    if label_mode is None and labels is not None and not sources.is_inferred(labels):
        raise ValueError(
            "`label_mode=None` yields images only, so `labels` must be None or 'inferred'. "
            f"Received: labels={labels!r}, label_mode=None"
        )
    if class_names is not None:
        if isinstance(class_names, str) or not all(isinstance(c, str) for c in class_names):
            raise ValueError(
                f"`class_names` must be a list of strings. Received: class_names={class_names!r}"
            )
        if len(set(class_names)) != len(class_names):
            raise ValueError(
                f"`class_names` must not repeat a name. Received: class_names={list(class_names)!r}"
            )
        if labels is None:
            raise ValueError(
                "`class_names` names the classes of labels, so it needs `labels`. "
                f"Received: labels=None, class_names={list(class_names)!r}"
            )
    if validation_split is not None:
        if isinstance(validation_split, bool) \
                or not isinstance(validation_split, (float, int, np.floating, np.integer)) \
                or not 0 < validation_split < 1:
            raise ValueError(
                "`validation_split` must be between 0 and 1 (exclusive). "
                f"Received: validation_split={validation_split!r}"
            )
        _one_of("subset", subset, SUBSETS)
        if seed is None and subset != "both":
            raise ValueError(
                "`validation_split` with `subset='training'` or 'validation' needs a "
                "`seed`, so that the two subsets, made by two calls, do not overlap. "
                f"Received: validation_split={validation_split}, subset={subset!r}, seed=None"
            )
    elif subset is not None:
        raise ValueError(
            "`subset` is only valid together with `validation_split`. "
            f"Received: subset={subset!r}, validation_split=None"
        )
    if seed is None:
        seed = int(np.random.SeedSequence().generate_state(1)[0] & 0x7FFFFFFF)
    if num_threads is None:
        num_threads = usable_cores()
    return dict(
        label_mode=None if labels is None else label_mode,
        image_size=(int(image_size[0]), int(image_size[1])),
        batch_size=int(batch_size),
        shuffle=shuffle,
        seed=int(seed),
        interpolation=interpolation,
        antialias=antialias,
        crop_to_aspect_ratio=crop_to_aspect_ratio,
        central_fraction=float(central_fraction),
        augment=augment,
        normalization=normalization,
        dtype=dtype,
        data_format=data_format,
        drop_remainder=drop_remainder,
        device=device,
        num_threads=int(num_threads),
        prefetch_queue_depth=int(prefetch_queue_depth),
        check=check,
    )
