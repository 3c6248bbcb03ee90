"""The loaders compared in `dalipipe bench`, all doing the same work on the same files.

Workloads, both ending in float32 NHWC batches normalized with ImageNet mean/std:
- `"train"`: decode, random-resized crop to 224 (area 8-100 %, aspect ratio
  3/4-4/3), random horizontal flip;
- `"eval"`: decode, resize the shorter side to 256, center crop 224.

Each `make_<loader>(files, labels, *, workload, batch_size, threads, seed)` returns a
`Loader`: `epoch()` starts one epoch and returns an iterator of `(images, labels)`
batches (in file order for `"eval"`); `dataset` is what to hand to `model.fit`.
"""

import numpy as np

from dalipipe.pipeline import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from dalipipe.sampling import (
    NUM_RANDOM,
    RANDOM_AREA,
    RANDOM_ASPECT_RATIO,
    random_resized_crop_window,
)

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
        device: "gpu" where the loader's work runs on the GPU (the harness then
            records GPU memory), else "cpu".
        rebuild: None, or a callable that builds a second pipeline of the same graph
            and runs it to its first batch (the harness times it).
    """

    def __init__(self, epoch, dataset=None, *, synchronize=None, to_numpy=None,
                 device="cpu", rebuild=None):
        self.epoch = epoch
        self.dataset = dataset
        self.synchronize = synchronize
        self.to_numpy = to_numpy
        self.device = device
        self.rebuild = rebuild


SIZE = 224
RESIZE = 256
WORKLOADS = ("train", "eval")
_MEAN = np.asarray(IMAGENET_DEFAULT_MEAN, np.float32)
_STD = np.asarray(IMAGENET_DEFAULT_STD, np.float32)


# --- PIL, as people write it first -------------------------------------------------

def pil_load(path, workload, rng):
    """One image as float32 `(224, 224, 3)`, normalized, with PIL and NumPy."""
    from PIL import Image

    image = Image.open(path).convert("RGB")
    width, height = image.size
    if workload == "eval":
        scale = RESIZE / min(width, height)
        new_w, new_h = round(width * scale), round(height * scale)
        left, top = (new_w - SIZE) // 2, (new_h - SIZE) // 2
        image = image.resize((new_w, new_h), Image.BILINEAR).crop((left, top, left + SIZE, top + SIZE))
    else:
        random = rng.random(NUM_RANDOM)
        x, y, w, h = (float(v) for v in random_resized_crop_window(height, width, random))
        image = image.resize((SIZE, SIZE), Image.BILINEAR, box=(x, y, x + w, y + h))
        if random[4] < 0.5:
            image = image.transpose(Image.FLIP_LEFT_RIGHT)
    return (np.asarray(image, np.float32) - _MEAN) / _STD


def make_python_generator(files, labels, *, workload, batch_size, threads, seed, chunk_size=1000):
    """A loop that loads a chunk of about `chunk_size` images with PIL (a whole number
    of batches), then yields its batches."""
    chunk_size = max(1, chunk_size // batch_size) * batch_size

    def epoch():
        rng = np.random.default_rng(seed)
        for start in range(0, len(files), chunk_size):
            stop = min(start + chunk_size, len(files))
            chunk = np.stack([pil_load(files[i], workload, rng) for i in range(start, stop)])
            chunk_labels = labels[start:stop]
            for b in range(0, stop - start, batch_size):
                yield chunk[b: b + batch_size], chunk_labels[b: b + batch_size]

    return Loader(epoch)


def make_pydataset(files, labels, *, workload, batch_size, threads, seed):
    """`keras.utils.PyDataset` with `workers=threads` and `use_multiprocessing=True`."""
    import keras

    # Private on purpose: Keras 3 exports only `keras.utils.PyDataset` (and its alias
    # `Sequence`). Its public `__iter__` calls `__getitem__` in the calling thread,
    # without the workers; the enqueuer that runs them (`OrderedEnqueuer`, public in
    # Keras 2) and this adapter, which `fit` uses to run it for one epoch, are not
    # exported. `fit` itself drives the workers but yields no batches to time.
    from keras.src.trainers.data_adapters.py_dataset_adapter import PyDatasetAdapter

    class ImageFiles(keras.utils.PyDataset):
        def __init__(self):
            super().__init__(workers=threads, use_multiprocessing=True, max_queue_size=4)

        def __len__(self):
            return -(-len(files) // batch_size)

        def __getitem__(self, index):
            rng = np.random.default_rng([seed, index])
            rows = range(index * batch_size, min((index + 1) * batch_size, len(files)))
            return np.stack([pil_load(files[i], workload, rng) for i in rows]), labels[rows.start: rows.stop]

    dataset = ImageFiles()

    def epoch():
        # The adapter Keras's `fit` uses: it runs the worker pool for one epoch.
        adapter = PyDatasetAdapter(dataset, shuffle=False)
        adapter.on_epoch_begin()
        try:
            yield from adapter.get_numpy_iterator()
        finally:
            adapter.on_epoch_end()

    return Loader(epoch)


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

    def train(path, label):
        data = tf.io.read_file(path)
        shape = tf.image.extract_jpeg_shape(data)
        begin, size = _tf_random_resized_crop(tf, shape, seed)
        window = tf.stack([begin[0], begin[1], size[0], size[1]])
        image = tf.image.decode_and_crop_jpeg(data, window, channels=3)
        image = tf.image.resize(image, (SIZE, SIZE), antialias=antialias)
        image = tf.image.random_flip_left_right(image, seed=seed)
        return _tf_normalize(tf, image), label

    def evaluate(path, label):
        image = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
        return _tf_normalize(tf, _tf_eval_resize(tf, image, antialias)), label

    options = tf.data.Options()
    options.threading.private_threadpool_size = threads
    dataset = (
        tf.data.Dataset.from_tensor_slices((list(files), np.asarray(labels, np.int32)))
        .map(train if workload == "train" else evaluate, num_parallel_calls=tf.data.AUTOTUNE)
        .batch(batch_size)
        .prefetch(tf.data.AUTOTUNE)
        .with_options(options)
    )
    return Loader(lambda: iter(dataset), dataset)


def make_tf_data_antialias(files, labels, **kwargs):
    """`make_tf_data` with antialiased resizing (closer to PIL, slower)."""
    return make_tf_data(files, labels, antialias=True, **kwargs)


def make_image_dataset_from_directory(files, labels, *, workload, batch_size, threads, seed,
                                      directory):
    """`keras.utils.image_dataset_from_directory` plus `map` and `prefetch`.

    Keras resizes every image to a fixed size on load, so the work differs a little:
    eval loads square center crops at 256 (`crop_to_aspect_ratio=True`, the same
    geometry as shorter side to 256 then a central square) and cuts 224; train loads
    at 256x256 (stretched) and takes the random-resized crop from that.
    """
    import keras
    import tensorflow as tf

    dataset = keras.utils.image_dataset_from_directory(
        directory, image_size=(RESIZE, RESIZE), batch_size=None, shuffle=False,
        crop_to_aspect_ratio=workload == "eval", verbose=False,
    )

    def train(image, label):
        begin, size = _tf_random_resized_crop(tf, tf.shape(image), seed)
        image = tf.slice(image, begin, size)
        image = tf.image.resize(image, (SIZE, SIZE))
        image = tf.image.random_flip_left_right(image, seed=seed)
        return _tf_normalize(tf, image), label

    def evaluate(image, label):
        return _tf_normalize(tf, tf.image.resize_with_crop_or_pad(image, SIZE, SIZE)), label

    options = tf.data.Options()
    options.threading.private_threadpool_size = threads
    dataset = (
        dataset.map(train if workload == "train" else evaluate, num_parallel_calls=tf.data.AUTOTUNE)
        .batch(batch_size)
        .prefetch(tf.data.AUTOTUNE)
        .with_options(options)
    )
    return Loader(lambda: iter(dataset), dataset)


# --- dalipipe ------------------------------------------------------------------------

def dalipipe_options(workload):
    """`make_dali_dataset` options that do the workload's work."""
    if workload == "train":
        return dict(augment=True)
    return dict(crop_to_aspect_ratio=True, central_fraction=SIZE / RESIZE)


def make_dalipipe(files, labels, *, workload, batch_size, threads, seed, device="cpu",
                  antialias=True):
    """`make_dali_dataset` with the workload's options."""
    from dalipipe import make_dali_dataset

    dataset = make_dali_dataset(
        list(files), labels=list(labels), image_size=(SIZE, SIZE), batch_size=batch_size,
        shuffle=False, seed=seed, device=device, num_threads=threads, antialias=antialias,
        **dalipipe_options(workload),
    )
    return Loader(lambda: iter(dataset), dataset)


def make_dalipipe_no_antialias(files, labels, **kwargs):
    """`make_dali_dataset(antialias=False)`: the resize filter of `tf_data`."""
    return make_dalipipe(files, labels, antialias=False, **kwargs)


def make_dalipipe_gpu(files, labels, **kwargs):
    return make_dalipipe(files, labels, device="gpu", **kwargs)


LOADERS = {
    "python_generator": make_python_generator,
    "pydataset": make_pydataset,
    "image_dataset_from_directory": make_image_dataset_from_directory,
    "tf_data": make_tf_data,
    "tf_data_antialias": make_tf_data_antialias,
    "dalipipe_cpu": make_dalipipe,
    "dalipipe_cpu_no_antialias": make_dalipipe_no_antialias,
    "dalipipe_gpu": make_dalipipe_gpu,
}
DESCRIPTIONS = {
    "python_generator": "PIL in a Python loop, a chunk of 1,000 images at a time (1 core)",
    "pydataset": "keras.utils.PyDataset, PIL, workers with use_multiprocessing=True",
    "image_dataset_from_directory": "Keras's loader (fixed resize on load) + map + prefetch",
    "tf_data": "tuned tf.data: parallel map, decode_and_crop_jpeg, bilinear, prefetch",
    "tf_data_antialias": "tuned tf.data with antialiased resize",
    "dalipipe_cpu": "make_dali_dataset(device='cpu')",
    "dalipipe_cpu_no_antialias": "make_dali_dataset(device='cpu', antialias=False)",
    "dalipipe_gpu": "make_dali_dataset(device='gpu')",
}
