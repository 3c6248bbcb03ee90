"""The PIL loaders of `dalipipe bench`, doing the work of `dalipipe.bench.loaders` (see
there) as people write it first: PIL and NumPy in a Python loop, or in
`keras.utils.PyDataset`'s worker processes. Float32 NHWC batches normalized with
ImageNet mean/std.
"""

import numpy as np

from dalipipe.bench.loaders import _MEAN, _STD, RESIZE, SIZE, Loader
from dalipipe.sampling import NUM_RANDOM, random_resized_crop_window


def pil_load(path, workload, rng):
    """One image as float32 `(224, 224, 3)`, normalized, with PIL and NumPy."""
    from PIL import Image

    return pil_transform(Image.open(path), workload, rng)


def pil_transform(image, workload, rng):
    """A PIL image as float32 `(224, 224, 3)`, normalized: the work of `pil_load`."""
    from PIL import Image

    image = image.convert("RGB")
    width, height = image.size
    if workload == "eval":
        scale = RESIZE / min(width, height)
        new_w, new_h = round(width * scale), round(height * scale)
        left, top = (new_w - SIZE) // 2, (new_h - SIZE) // 2
        image = image.resize((new_w, new_h), Image.BILINEAR).crop((left, top, left + SIZE, top + SIZE))
    elif workload == "stretch":
        image = image.resize((SIZE, SIZE), Image.BILINEAR)
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

    return Loader(epoch, settings=f"PIL bilinear, chunks of {chunk_size} images, batch_size="
                                  f"{batch_size}, 1 process")


def make_pydataset(files, labels, *, workload, batch_size, threads, seed):
    """`keras.utils.PyDataset` with `workers=threads` and `use_multiprocessing=True`."""
    import keras

    from dalipipe import keras_hooks

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
        # As Keras's `fit` reads it, with its worker pool, for one epoch.
        yield from keras_hooks.py_dataset_batches(dataset)

    return Loader(epoch, settings=f"PyDataset(workers={threads}, use_multiprocessing=True, "
                                  f"max_queue_size=4), PIL bilinear, batch_size={batch_size}")
