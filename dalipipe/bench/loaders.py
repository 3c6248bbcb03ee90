"""The loaders compared in `dalipipe bench`, all doing the same work on the same files.

Workloads, all ending in float32 NHWC batches normalized with ImageNet mean/std:
- `"train"`: decode, random-resized crop to 224 (area 8-100 %, aspect ratio
  3/4-4/3), random horizontal flip;
- `"eval"`: decode, resize the shorter side to 256, center crop 224;
- `"stretch"`: decode, stretch the whole image to 224x224, no crop: what
  `keras.utils.image_dataset_from_directory` does by default;
- `"randaugment"`: the train workload, then RandAugment with 2 operations at
  magnitude 9 of 31 (`RANDAUGMENT`): dalipipe's `augment=RandAugment(2, 9)`,
  `keras.layers.RandAugment(num_ops=2, factor=9/30)` in `tf.data`'s `map` (the
  Keras user's way), torchvision's `v2.RandAugment(2, 9)`. The loaders that have
  none (PIL and Keras's directory loader) skip it (`unsupported`).

The dense workloads (`DENSE_WORKLOADS`, over `dalipipe.bench.dense_data`'s images) end
in float32 NHWC images on the 0-255 scale, as in Keras's segmentation example:
- `"segmentation"`: images and masks decoded, random-resized crop and flip of both,
  160x160. `SEGMENTATION_LOADERS` run it, with `labels` the mask paths: dalipipe's
  `masks=` with `augment=True`, and Keras's loaders (`keras_segmentation`:
  `SEGMENTATION_NOTES` say what they do instead);
- `"detection"`: images and boxes (`labels` a COCO JSON), random-resized crop moved to
  hold a box (`box_crop=True`), flip, 512x512; only dalipipe's graphs run natively
  (`DETECTION_LOADERS`): boxes float32 `(batch, 100, 4)` xyxy, labels int32 `(batch, 100)`.

Each `make_<loader>(files, labels, *, workload, batch_size, threads, seed)` returns a
`Loader`: `epoch()` starts one epoch and returns an iterator of `(images, labels)`
batches (in file order for `"eval"`; `(images, boxes, labels)` on detection);
`dataset` is what to hand to `model.fit`; `settings` says how it was called and
`note` what it does instead where it cannot do the workload's exact work (Keras's
directory loader on train and eval).
`LOADERS` maps the names to them, with the PIL, PyTorch and Keras segmentation
loaders (`pil_loaders`, `torch_loaders`, `keras_segmentation`) and those that keep
decoded images across epochs (`CACHED_LOADERS`, stretch only: `cached_loaders`)
imported only when asked for; `unavailable(name)` says what a loader lacks on this machine.

Above 400 lines: the TensorFlow and dalipipe loaders of the image-level workloads are
written here side by side, so that they can be read doing the same work.
"""

import importlib
import importlib.util
import itertools
import os
import tempfile

import numpy as np

from dalipipe.options import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from dalipipe.sampling import RANDOM_AREA, RANDOM_ASPECT_RATIO


class Loader:
    """One loader, as `dalipipe.bench.harness` measures it.

    Attributes:
        epoch: starts one epoch; returns an iterator of `(images, labels)` batches.
        dataset: the `tf.data.Dataset` that `model.fit` takes, or None where `fit` is
            fed from `epoch()` as a generator.
        synchronize: None, or a callable that waits until the loader's GPU work is
            done; the harness calls it before every timer read.
        to_numpy: None, or a callable that turns a batch of images into a NumPy NHWC
            array (for the quality check); by default `.numpy()` or `np.asarray`.
        rebuild: None, or a callable that builds a second pipeline of the same graph
            and runs it to its first batch (the harness times it).
        file_paths: None, or the files in the order `epoch()` yields them where it
            is not the order of the files given.
        settings: how the loader is called on this workload (its arguments), or
            None for its `DESCRIPTIONS` line.
        note: None, or what it does instead where it cannot do the workload's work.
        ordered: whether the first batch holds the first files (`file_paths`, else
            those given); False for a loader that shuffles, which has no quality figure.
        measures: None, or a callable giving more result fields once the epochs have
            run (e.g. the disk a cache uses).
    """

    def __init__(self, epoch, dataset=None, *, synchronize=None, to_numpy=None, rebuild=None,
                 file_paths=None, settings=None, note=None, ordered=True, measures=None):
        self.epoch = epoch
        self.dataset = dataset
        self.synchronize = synchronize
        self.to_numpy = to_numpy
        self.rebuild = rebuild
        self.file_paths = file_paths
        self.settings = settings
        self.note = note
        self.ordered = ordered
        self.measures = measures


SIZE = 224
RESIZE = 256
WORKLOADS = ("train", "eval", "stretch", "randaugment")
DENSE_WORKLOADS = ("segmentation", "detection")
# The segmentation workload's output size (Keras's Oxford-Pets example's), and the
# size Keras's layers stretch each image to before their crop (256/224 of it).
SEGMENTATION_SIZE = 160
SEGMENTATION_RESIZE = 183
# The loaders that run the segmentation workload, and those that run only it.
SEGMENTATION_LOADERS = ("keras_oxford_pets", "tf_data_keras_layers", "dalipipe_cpu",
                        "dalipipe_cpu_no_antialias", "dalipipe_gpu", "dalipipe_native_cpu",
                        "dalipipe_native_gpu", "dalipipe_native_gpu_on_device")
SEGMENTATION_ONLY = ("keras_oxford_pets", "tf_data_keras_layers")
# The detection workload's output size (docs/dense.md's `boxes=` example's) and loaders.
DETECTION_SIZE = 512
DETECTION_LOADERS = ("dalipipe_native_cpu", "dalipipe_native_gpu", "dalipipe_native_gpu_on_device")
# RandAugment's settings in the randaugment workload (torchvision's defaults).
RANDAUGMENT = dict(num_ops=2, magnitude=9, num_magnitude_bins=31)
# The loaders that run the randaugment workload.
RANDAUGMENT_LOADERS = ("tf_data", "tf_data_antialias", "dalipipe_cpu", "dalipipe_cpu_no_antialias",
                       "dalipipe_gpu", "dalipipe_native_cpu", "dalipipe_native_gpu",
                       "dalipipe_native_gpu_on_device", "torch_dataloader", "torchvision_gpu")
_MEAN = np.asarray(IMAGENET_DEFAULT_MEAN, np.float32)
_STD = np.asarray(IMAGENET_DEFAULT_STD, np.float32)


# --- TensorFlow ----------------------------------------------------------------------

def _tf_normalize(tf, images):
    return (tf.cast(images, tf.float32) - IMAGENET_DEFAULT_MEAN) / IMAGENET_DEFAULT_STD


def _tf_random_resized_crop(tf, shape, seed):
    """Box of a random-resized crop as `(offset, size)` with `sample_distorted_bounding_box`."""
    begin, size, _ = tf.image.sample_distorted_bounding_box(
        shape,
        bounding_boxes=tf.constant([0.0, 0.0, 1.0, 1.0], tf.float32, [1, 1, 4]),
        min_object_covered=0.0,
        aspect_ratio_range=RANDOM_ASPECT_RATIO,
        area_range=RANDOM_AREA,
        max_attempts=10,
        use_image_if_no_bounding_boxes=True,
        seed=seed,
    )
    return begin, size


def _tf_eval_resize(tf, image, antialias):
    shape = tf.cast(tf.shape(image)[:2], tf.float32)
    scale = RESIZE / tf.reduce_min(shape)
    new_size = tf.cast(tf.round(shape * scale), tf.int32)
    image = tf.image.resize(image, new_size, antialias=antialias)
    return tf.image.resize_with_crop_or_pad(image, SIZE, SIZE)


def make_tf_data(files, labels, *, workload, batch_size, threads, seed, antialias=False):
    """A tuned `tf.data` pipeline: parallel `map` (AUTOTUNE), ROI decode for the
    training crop (`decode_and_crop_jpeg`), `prefetch`. Bilinear resize, without
    antialiasing unless `antialias=True`."""
    import tensorflow as tf

    def crop(path):
        data = tf.io.read_file(path)
        shape = tf.image.extract_jpeg_shape(data)
        begin, size = _tf_random_resized_crop(tf, shape, seed)
        window = tf.stack([begin[0], begin[1], size[0], size[1]])
        image = tf.image.decode_and_crop_jpeg(data, window, channels=3)
        image = tf.image.resize(image, (SIZE, SIZE), antialias=antialias)
        return tf.image.random_flip_left_right(image, seed=seed)

    def train(path, label):
        return _tf_normalize(tf, crop(path)), label

    if workload == "randaugment":
        import keras

        # Keras's strength is a fraction of its strongest: magnitude 9 of 0-30.
        rand_augment = keras.layers.RandAugment(
            value_range=(0, 255), num_ops=RANDAUGMENT["num_ops"],
            factor=RANDAUGMENT["magnitude"] / (RANDAUGMENT["num_magnitude_bins"] - 1), seed=seed)

    def randaugment(path, label):
        return _tf_normalize(tf, rand_augment(tf.round(crop(path)))), label

    def evaluate(path, label):
        image = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
        return _tf_normalize(tf, _tf_eval_resize(tf, image, antialias)), label

    def stretch(path, label):
        image = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
        return _tf_normalize(tf, tf.image.resize(image, (SIZE, SIZE), antialias=antialias)), label

    options = tf.data.Options()
    options.threading.private_threadpool_size = threads
    work = {"train": train, "eval": evaluate, "stretch": stretch,
            "randaugment": randaugment}[workload]
    dataset = (
        tf.data.Dataset.from_tensor_slices((list(files), np.asarray(labels, np.int32)))
        .map(work, num_parallel_calls=tf.data.AUTOTUNE)
        .batch(batch_size)
        .prefetch(tf.data.AUTOTUNE)
        .with_options(options)
    )
    crop = ", decode_and_crop_jpeg" if workload in ("train", "randaugment") else ""
    settings = (f"map(num_parallel_calls=AUTOTUNE){crop}, resize antialias={antialias}, "
                f"batch({batch_size}), prefetch(AUTOTUNE), private_threadpool_size={threads}")
    return Loader(lambda: iter(dataset), dataset, settings=settings)


def make_tf_data_antialias(files, labels, **kwargs):
    """`make_tf_data` with antialiased resizing (closer to PIL, slower)."""
    return make_tf_data(files, labels, antialias=True, **kwargs)


def link_folder(files, root):
    """Fills `root` with a symbolic link to each of `files`, in its class folder, for
    Keras's directory loader, which reads a whole folder: `root/<class>/<i>_<name>`.

    `<class>` is the name of the folder the file is in (for a source folder, its
    class folder); `<i>` is the file's position in `files`, zero-padded, so that
    within a class the links sort in the order of `files`. Returns `root`.
    """
    for i, path in enumerate(files):
        path = os.path.abspath(path)
        folder = os.path.join(root, os.path.basename(os.path.dirname(path)))
        os.makedirs(folder, exist_ok=True)
        os.symlink(path, os.path.join(folder, f"{i:06d}_{os.path.basename(path)}"))
    return root


# What the Keras row does where it cannot do the workload's exact work.
KERAS_NOTES = {
    "train": "no random-resized crop in Keras: each image stretched to 256x256 on load, "
             "then RandomCrop(224) (one scale, no aspect change) and RandomFlip",
    "eval": "the central square resized to 256x256 on load (crop_to_aspect_ratio=True), "
            "then CenterCrop(224): the same window, resized before the crop",
}


def make_image_dataset_from_directory(files, labels, *, workload, batch_size, threads, seed):
    """`keras.utils.image_dataset_from_directory(directory, image_size=...,
    batch_size=...)` as its documentation calls it, over a folder of links to `files`
    (`link_folder`), then per batch what the workload needs, as Keras's guides
    add it: its preprocessing layers (train: `RandomCrop`, `RandomFlip`; eval:
    `CenterCrop`), normalization in a `map`, `prefetch`.

    Keras resizes every image to a fixed size as it loads it (bilinear, no
    antialiasing), so train and eval do not do exactly the others' work
    (`KERAS_NOTES`); stretch is Keras's default and the same work. Train shuffles,
    as a training set is loaded; eval and stretch keep the order. Keras runs its own
    `map` on TensorFlow's thread pool: `threads` is not applied.
    """
    import keras
    import tensorflow as tf

    # Removed once nothing uses it: neither the Loader nor an epoch in progress.
    links = tempfile.TemporaryDirectory(prefix="dalipipe-bench-keras-")
    link_folder(files, links.name)
    size = (SIZE, SIZE) if workload == "stretch" else (RESIZE, RESIZE)
    arguments = dict(image_size=size, batch_size=batch_size, shuffle=workload == "train")
    if workload == "eval":
        arguments["crop_to_aspect_ratio"] = True
    if workload == "train":
        arguments["seed"] = seed
    dataset = keras.utils.image_dataset_from_directory(links.name, verbose=False, **arguments)
    file_paths = list(dataset.file_paths)
    layers = {
        "train": [keras.layers.RandomCrop(SIZE, SIZE, seed=seed),
                  keras.layers.RandomFlip("horizontal", seed=seed)],
        "eval": [keras.layers.CenterCrop(SIZE, SIZE)],
        "stretch": [],
    }[workload]

    def per_batch(images, batch_labels):
        for layer in layers:
            images = layer(images)
        return _tf_normalize(tf, images), batch_labels

    dataset = dataset.map(per_batch, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
    names = "".join(f"{type(layer).__name__}, " for layer in layers)
    settings = (_call("image_dataset_from_directory", arguments) + f"; per batch: {names}"
                "normalize, map(num_parallel_calls=AUTOTUNE); prefetch(AUTOTUNE)")

    def epoch():
        in_use = links  # the generator's frame holds the folder of links while it runs
        yield from dataset
        del in_use

    return Loader(epoch, dataset, file_paths=file_paths, settings=settings,
                  note=KERAS_NOTES.get(workload))


# What the segmentation peers do where they cannot do the workload's exact work.
SEGMENTATION_NOTES = {
    "tf_data_keras_layers": f"no random-resized crop in Keras: each image and mask stretched "
                            f"to {SEGMENTATION_RESIZE}x{SEGMENTATION_RESIZE}, then "
                            f"RandomCrop({SEGMENTATION_SIZE}) (one scale, no aspect change) and "
                            "RandomFlip; masks come out float32 (Keras casts them)",
    "keras_oxford_pets": "no augmentation (the example's loader decodes and stretches each image "
                         f"and mask to {SEGMENTATION_SIZE}x{SEGMENTATION_SIZE}, nothing more); "
                         "masks uint8",
}


# --- dalipipe ------------------------------------------------------------------------

def dalipipe_options(workload, labels=None):
    """`make_dali_dataset` options that do the workload's work (for segmentation, with
    `labels` the mask paths, all in one folder: `masks=` that folder; for detection,
    `labels` the COCO JSON: `boxes=` it)."""
    if workload == "detection":
        return dict(boxes=labels, bounding_box_format="xyxy", augment=True, box_crop=True,
                    image_size=(DETECTION_SIZE, DETECTION_SIZE))
    if workload == "segmentation":
        return dict(masks=os.path.dirname(os.path.abspath(labels[0])), augment=True,
                    image_size=(SEGMENTATION_SIZE, SEGMENTATION_SIZE))
    if workload == "train":
        return dict(augment=True)
    if workload == "randaugment":
        from dalipipe.recipes import RandAugment

        return dict(augment=RandAugment(**RANDAUGMENT))
    if workload == "stretch":
        return {}
    return dict(crop_to_aspect_ratio=True, central_fraction=SIZE / RESIZE)


def make_dalipipe(files, labels, *, workload, batch_size, threads, seed, device="cpu",
                  antialias=True, source=None, **options):
    """`make_dali_dataset` with the workload's options and `options` (e.g. `cache`);
    on `source` (the same images with their labels, as tar shards: `shard_loaders`)
    instead of `files` if given."""
    from dalipipe import make_dali_dataset

    arguments = dict(image_size=(SIZE, SIZE), batch_size=batch_size, shuffle=False,
                     device=device, num_threads=threads, antialias=antialias,
                     normalization="imagenet")
    arguments.update(dalipipe_options(workload, labels), **options)
    if workload in DENSE_WORKLOADS:
        del arguments["normalization"]  # 0-255, as the segmentation peers give
    elif source is None:
        arguments["labels"] = list(labels)
    dataset = make_dali_dataset(list(files) if source is None else source, seed=seed,
                                verbose=False, **arguments)
    arguments.pop("labels", None)
    if source is not None:
        arguments = {"source": source, **arguments}
    return Loader(lambda: iter(dataset), dataset, settings=_call("make_dali_dataset", arguments))


def _call(function, arguments):
    """`function(a=1, b='x')`: how a loader was called, for its settings."""
    return f"{function}({', '.join(f'{k}={v!r}' for k, v in arguments.items())})"


def make_dalipipe_no_antialias(files, labels, **kwargs):
    """`make_dali_dataset(antialias=False)`: the resize filter of `tf_data`."""
    return make_dalipipe(files, labels, antialias=False, **kwargs)


def make_dalipipe_gpu(files, labels, **kwargs):
    return make_dalipipe(files, labels, device="gpu", **kwargs)


def _dali_to_numpy(images):
    """A DALI batch as a NumPy array: a GPU one copied to the host once (`as_cpu`,
    whose buffer the array then views), a CPU one copied out of DALI's buffer."""
    if hasattr(images, "as_cpu"):
        return np.asarray(images.as_cpu().as_tensor())
    return np.array(images.as_tensor())


def make_dalipipe_native(files, labels, *, workload, batch_size, threads, seed, device="cpu",
                         copy_to_host=True, source=None, **options):
    """`make_dali_pipeline` run without TensorFlow (`ImagePipeline.run`): batches
    copied to the host as NumPy arrays, or left where DALI made them
    (`copy_to_host=False`: GPU memory on the GPU). `options`: more
    `make_dali_pipeline` options (e.g. `decoder`). On `source` (the same images
    with their labels elsewhere: as tar shards, in S3) instead of `files` if given.

    A GPU batch is copied to the host once, by `as_cpu` (`_dali_to_numpy`). No
    `synchronize`: `ImagePipeline.run` takes each batch from DALI's `Pipeline.run()`
    without a CUDA stream, which returns it host-synchronous (DALI waits for its GPU
    work first), so an epoch's GPU work is done when its last batch arrives. On the
    GPU, `rebuild` builds a second pipeline over the first batch (not with masks).
    """
    from dalipipe import make_dali_pipeline

    dense = workload in DENSE_WORKLOADS
    arguments = {"image_size": (SIZE, SIZE), **dalipipe_options(workload, labels)}

    def build(count):
        called = dict(batch_size=batch_size, shuffle=False, seed=seed, device=device,
                      num_threads=threads, verbose=False,
                      **({} if dense else dict(normalization="imagenet")), **arguments)
        called.update(options)
        if source is not None:
            return make_dali_pipeline(source, **called)
        return make_dali_pipeline(
            list(files[:count]), **({} if dense else dict(labels=list(labels[:count]))),
            **called)

    pipe = build(len(files))
    epochs = itertools.count()
    on_host = copy_to_host and device == "gpu"

    def epoch():
        batches = pipe.run(*pipe.epoch_inputs(next(epochs)),
                           copy_to_host=copy_to_host and not on_host)
        if not on_host:
            return batches
        return (tuple(_dali_to_numpy(out) for out in batch) for batch in batches)

    def rebuild():
        for _batch in build(batch_size).epoch():
            pass

    settings = _call("make_dali_pipeline", dict(
        **({} if source is None else dict(source=source)), batch_size=batch_size,
        device=device, num_threads=threads, **arguments,
        **options)) + f", run(copy_to_host={copy_to_host})"
    return Loader(epoch, to_numpy=None if copy_to_host else _dali_to_numpy,
                  # dense: a subset of the images would leave masks unmatched
                  rebuild=rebuild if device == "gpu" and not dense and source is None else None,
                  settings=settings)


def make_dalipipe_native_gpu(files, labels, **kwargs):
    return make_dalipipe_native(files, labels, device="gpu", **kwargs)


def make_dalipipe_native_gpu_on_device(files, labels, **kwargs):
    return make_dalipipe_native(files, labels, device="gpu", copy_to_host=False, **kwargs)


def _imported_on_call(module, name):
    """`module.name(...)`, with `module` imported only when it is called."""
    def make(files, labels, **kwargs):
        return getattr(importlib.import_module(module), name)(files, labels, **kwargs)

    make.__name__ = name
    return make


# The loaders that keep decoded images across epochs (`cached_loaders`): stretch only.
CACHED_LOADERS = ("keras_tutorial", "dalipipe_cache_memory", "dalipipe_cache_folder")
LOADERS = {
    "python_generator": _imported_on_call("dalipipe.bench.pil_loaders", "make_python_generator"),
    "pydataset": _imported_on_call("dalipipe.bench.pil_loaders", "make_pydataset"),
    "image_dataset_from_directory": make_image_dataset_from_directory,
    "tf_data": make_tf_data,
    "tf_data_antialias": make_tf_data_antialias,
    "tf_data_keras_layers": _imported_on_call("dalipipe.bench.keras_segmentation",
                                              "make_tf_data_keras_layers"),
    "keras_oxford_pets": _imported_on_call("dalipipe.bench.keras_segmentation",
                                           "make_keras_oxford_pets"),
    "dalipipe_cpu": make_dalipipe,
    "dalipipe_cpu_no_antialias": make_dalipipe_no_antialias,
    "dalipipe_gpu": make_dalipipe_gpu,
    "dalipipe_native_cpu": make_dalipipe_native,
    "dalipipe_native_gpu": make_dalipipe_native_gpu,
    "dalipipe_native_gpu_on_device": make_dalipipe_native_gpu_on_device,
    "torch_dataloader": _imported_on_call("dalipipe.bench.torch_loaders", "make_torch_dataloader"),
    "torchvision_gpu": _imported_on_call("dalipipe.bench.torch_loaders", "make_torchvision_gpu"),
    **{name: _imported_on_call("dalipipe.bench.cached_loaders", f"make_{name}")
       for name in CACHED_LOADERS},
    "dalipipe_shards_cpu": _imported_on_call("dalipipe.bench.shard_loaders",
                                             "make_dalipipe_shards"),
    "webdataset_torch": _imported_on_call("dalipipe.bench.shard_loaders", "make_webdataset"),
}
DESCRIPTIONS = {
    "python_generator": "PIL in a Python loop, a chunk of 1,000 images at a time (1 core)",
    "pydataset": "keras.utils.PyDataset, PIL, workers with use_multiprocessing=True",
    "image_dataset_from_directory": "keras.utils.image_dataset_from_directory(directory, "
                                    "image_size, batch_size) over links to the files, Keras's "
                                    "preprocessing layers and normalization mapped over "
                                    "batches, prefetch",
    "tf_data": "tuned tf.data: parallel map, decode_and_crop_jpeg, bilinear, prefetch",
    "tf_data_antialias": "tuned tf.data with antialiased resize",
    "tf_data_keras_layers": "tf.data: decode image and mask, Keras's Resizing, RandomCrop and "
                            "RandomFlip on the dict {'images', 'segmentation_masks'} in a "
                            "parallel map, batch, prefetch",
    "keras_oxford_pets": "the loader of Keras's Oxford-Pets segmentation example (keras-io "
                         "get_dataset): parallel map decoding and resizing, batch; "
                         "no augmentation",
    "dalipipe_cpu": "make_dali_dataset(device='cpu')",
    "dalipipe_cpu_no_antialias": "make_dali_dataset(device='cpu', antialias=False)",
    "dalipipe_gpu": "make_dali_dataset(device='gpu')",
    "dalipipe_native_cpu": "make_dali_pipeline(device='cpu') run natively, NHWC to host",
    "dalipipe_native_gpu": "make_dali_pipeline(device='gpu') run natively, NHWC copied to host",
    "dalipipe_native_gpu_on_device": "make_dali_pipeline(device='gpu') run natively, "
                                     "NHWC left on the GPU",
    "torch_dataloader": "torch DataLoader, a worker per core, torchvision decode_jpeg on "
                        "the CPU, NCHW to host",
    "torchvision_gpu": "batched torchvision decode_jpeg(device='cuda'), crop, resize and "
                       "normalize on the GPU, NCHW left there",
    "keras_tutorial": "TensorFlow's tutorial pipeline: image_dataset_from_directory, then "
                      ".cache().shuffle(1000).prefetch(AUTOTUNE)",
    "dalipipe_cache_memory": "make_dali_dataset(cache='memory', shuffle=True, antialias=False)",
    "dalipipe_cache_folder": "make_dali_dataset(cache=<a folder>, shuffle=True, antialias=False)",
    "dalipipe_shards_cpu": "make_dali_dataset(device='cpu') on the files written as "
                           "WebDataset tar shards (once, in the cache folder)",
    "webdataset_torch": "webdataset's WebDataset(shardshuffle=100).shuffle(1000).decode('pil') "
                        "with PIL transforms (pil_loaders), batched, in a WebLoader with a worker "
                        "per thread, on the same shards as dalipipe_shards_cpu",
}
# What each loader (and DALI's decode-only ceiling, `harness.decode_ceiling`) needs
# beyond NumPy and PIL: packages, or "dali_gpu" / "torch_cuda" for a CUDA GPU that
# DALI / torch can use.
REQUIREMENTS = {
    "dali_decode_only_cpu": ("nvidia.dali",),
    "dali_decode_only_gpu": ("nvidia.dali", "dali_gpu"),
    "dali_crop_decode_only_gpu": ("nvidia.dali", "dali_gpu"),
    "pydataset": ("keras",),
    "image_dataset_from_directory": ("tensorflow",),
    "tf_data": ("tensorflow",),
    "tf_data_antialias": ("tensorflow",),
    "tf_data_keras_layers": ("tensorflow", "keras"),
    "keras_oxford_pets": ("tensorflow",),
    "dalipipe_cpu": ("nvidia.dali", "tensorflow"),
    "dalipipe_cpu_no_antialias": ("nvidia.dali", "tensorflow"),
    "dalipipe_gpu": ("nvidia.dali", "tensorflow", "dali_gpu"),
    "dalipipe_native_cpu": ("nvidia.dali",),
    "dalipipe_native_gpu": ("nvidia.dali", "dali_gpu"),
    "dalipipe_native_gpu_on_device": ("nvidia.dali", "dali_gpu"),
    "torch_dataloader": ("torch", "torchvision"),
    "torchvision_gpu": ("torch", "torchvision", "torch_cuda"),
    "keras_tutorial": ("tensorflow",),
    "dalipipe_cache_memory": ("nvidia.dali", "tensorflow"),
    "dalipipe_cache_folder": ("nvidia.dali", "tensorflow"),
    "dalipipe_shards_cpu": ("nvidia.dali", "tensorflow"),
    "webdataset_torch": ("webdataset", "torch"),
}


def unsupported(name, workload):
    """Why loader `name` does not run `workload`, or None when it does."""
    if workload == "randaugment" and name not in RANDAUGMENT_LOADERS:
        return "no RandAugment in this loader (tf_data is Keras's keras.layers.RandAugment)"
    if workload == "detection" and name not in DETECTION_LOADERS:
        return "no boxes in this loader (dalipipe's graphs run natively have them)"
    if workload == "segmentation" and name not in SEGMENTATION_LOADERS:
        return ("no masks in this loader (keras_oxford_pets and tf_data_keras_layers are "
                "Keras's segmentation loaders)")
    if workload not in DENSE_WORKLOADS and name in SEGMENTATION_ONLY:
        return "a segmentation loader: images with masks only"
    if name in CACHED_LOADERS and workload != "stretch":
        return "a loader that keeps decoded images: the tutorial's workload only, stretch"
    return None


def uses_gpu(name):
    """Whether loader `name` (or decode ceiling) works on a CUDA GPU."""
    return bool({"dali_gpu", "torch_cuda"} & set(REQUIREMENTS.get(name, ())))


def unavailable(name):
    """Why loader `name` cannot run on this machine, or None when it can.

    Packages are looked up without importing them; a GPU requirement imports DALI
    or torch to ask for a CUDA device.
    """
    for need in REQUIREMENTS.get(name, ()):
        if need == "dali_gpu":
            from dalipipe.devices import dali_gpu_count

            if dali_gpu_count() == 0:
                return "DALI sees no CUDA GPU"
        elif need == "torch_cuda":
            import torch

            if not torch.cuda.is_available():
                return "torch sees no CUDA GPU (torch.cuda.is_available() is False)"
        elif not _installed(need):
            return f"{need} is not installed"
    return None


def _installed(module):
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a missing parent package, or a blocked module
        return False
