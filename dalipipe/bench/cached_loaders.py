"""The loaders that keep decoded images across epochs, on the stretch workload: the
pipeline of TensorFlow's image tutorials, and dalipipe with `cache=`.

TensorFlow's tutorials ("Load and preprocess images", "Image classification") call
`keras.utils.image_dataset_from_directory(directory, image_size=..., batch_size=...)`,
then `.cache().shuffle(1000).prefetch(AUTOTUNE)`: after the first epoch it decodes
nothing, and its later epochs replay the first one's batches, reordered as whole
batches. `make_keras_tutorial` calls it so, over a folder of links to the files
(`loaders.link_folder`), with the normalization of the other loaders mapped over its
batches after the cache (the tutorial's `Rescaling` layer runs in the model).
`make_dalipipe_cache_memory` and `make_dalipipe_cache_folder` are `make_dali_dataset`
with `cache="memory"` and a fresh folder, a new order every epoch, and Keras's resize
filter (`antialias=False`), the tutorial's work.

Their first epoch fills the cache: `dalipipe bench --runs 4` gives creation plus five
epochs as each result's `total_s`. Their batches come in a new order every epoch, so
they have no quality figure: the cached pixels are those of `dalipipe_cpu_no_antialias`.
Memory is each result's peak RSS; the folder cache's disk is `cache_disk_mb`.
"""

import os
import tempfile

from dalipipe.bench.loaders import SIZE, Loader, _call, _tf_normalize, link_folder, make_dalipipe

TUTORIAL_NOTE = ("later epochs replay the first one's batches, reordered as whole batches "
                 "(shuffle(1000) after cache())")


def make_keras_tutorial(files, labels, *, workload, batch_size, threads, seed):
    """The tutorial pipeline over links to `files` (`threads` is not applied: Keras runs
    its own pool). Stretch only."""
    import keras
    import tensorflow as tf

    links = tempfile.TemporaryDirectory(prefix="dalipipe-bench-tutorial-")
    link_folder(files, links.name)
    arguments = dict(image_size=(SIZE, SIZE), batch_size=batch_size, seed=seed)
    dataset = keras.utils.image_dataset_from_directory(links.name, verbose=False, **arguments)
    dataset = dataset.cache().shuffle(1000).map(
        lambda images, batch_labels: (_tf_normalize(tf, images), batch_labels),
        num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
    settings = (_call("image_dataset_from_directory", arguments)
                + ".cache().shuffle(1000), normalize in a map, .prefetch(AUTOTUNE)")

    def epoch():
        in_use = links  # the generator's frame holds the folder of links while it runs
        yield from dataset
        del in_use

    return Loader(epoch, dataset, settings=settings, note=TUTORIAL_NOTE, ordered=False)


def make_dalipipe_cache_memory(files, labels, **kwargs):
    """`make_dali_dataset(cache="memory", shuffle=True, antialias=False)`."""
    return _cached(files, labels, "memory", **kwargs)


def make_dalipipe_cache_folder(files, labels, **kwargs):
    """`make_dali_dataset(cache=<a fresh folder>, shuffle=True, antialias=False)`."""
    folder = tempfile.TemporaryDirectory(prefix="dalipipe-bench-cache-")
    loader = _cached(files, labels, folder.name, **kwargs)
    loader.folder = folder  # removed with the loader
    loader.measures = lambda: {"cache_disk_mb": _disk_mb(folder.name)}
    return loader


def _disk_mb(folder):
    """The disk that the files in `folder` use, in MB (their allocated blocks)."""
    return sum(os.stat(os.path.join(folder, name)).st_blocks * 512
               for name in os.listdir(folder)) / 1e6


def _cached(files, labels, cache, **kwargs):
    loader = make_dalipipe(files, labels, antialias=False, cache=cache, shuffle=True, **kwargs)
    loader.ordered = False
    return loader
