"""The TensorFlow peers of dalipipe on the segmentation workload of `dalipipe.bench.loaders`
(see there), as Keras users write them: `tf.data` with Keras's preprocessing layers, and
the loader of Keras's Oxford-Pets segmentation example. TensorFlow and Keras are imported
inside the functions only, so the loader registry imports without them.
"""

from dalipipe.bench.loaders import (
    SEGMENTATION_NOTES,
    SEGMENTATION_RESIZE,
    SEGMENTATION_SIZE,
    Loader,
)


def make_tf_data_keras_layers(files, masks, *, workload, batch_size, threads, seed):
    """`tf.data` from the file paths, as a Keras user writes it for segmentation: each
    image and mask decoded, then Keras's preprocessing layers on the dict
    `{"images", "segmentation_masks"}` (`Resizing`, `RandomCrop`, `RandomFlip`, which
    move the mask with its image, nearest-neighbour for the mask) in a parallel `map`
    (AUTOTUNE), `batch`, `prefetch`.

    Keras's `RandomCrop` takes a fixed size, so each pair is first stretched to
    `SEGMENTATION_RESIZE` (`SEGMENTATION_NOTES`). Yields `(images, masks)`: float32
    `(batch, 160, 160, 3)` on the 0-255 scale and float32 `(batch, 160, 160, 1)`.
    """
    import keras
    import tensorflow as tf

    size = SEGMENTATION_SIZE
    layers = [keras.layers.Resizing(SEGMENTATION_RESIZE, SEGMENTATION_RESIZE),
              keras.layers.RandomCrop(size, size, seed=seed),
              keras.layers.RandomFlip("horizontal", seed=seed)]

    def load(image_path, mask_path):
        data = {"images": tf.io.decode_jpeg(tf.io.read_file(image_path), channels=3),
                "segmentation_masks": tf.io.decode_png(tf.io.read_file(mask_path), channels=1)}
        for layer in layers:
            data = layer(data)
        return data["images"], data["segmentation_masks"]

    options = tf.data.Options()
    options.threading.private_threadpool_size = threads
    dataset = (tf.data.Dataset.from_tensor_slices((list(files), list(masks)))
               .map(load, num_parallel_calls=tf.data.AUTOTUNE).batch(batch_size)
               .prefetch(tf.data.AUTOTUNE).with_options(options))
    settings = (f"map(num_parallel_calls=AUTOTUNE): decode_jpeg, decode_png, then on the dict: "
                f"Resizing({SEGMENTATION_RESIZE}, {SEGMENTATION_RESIZE}), RandomCrop({size}, "
                f"{size}), RandomFlip('horizontal'); batch({batch_size}), prefetch(AUTOTUNE), "
                f"private_threadpool_size={threads}")
    return Loader(lambda: iter(dataset), dataset, settings=settings,
                  note=SEGMENTATION_NOTES["tf_data_keras_layers"])


def make_keras_oxford_pets(files, masks, *, workload, batch_size, threads, seed):
    """The loader of Keras's segmentation example, as it is written there (its
    `get_dataset`): `tf.data` over the file paths, a parallel `map` that decodes and
    resizes each image and mask, `batch`; no augmentation, no `prefetch`, TensorFlow's
    own thread pool (`threads` is not applied).

    Yields `(images, masks)`: float32 `(batch, 160, 160, 3)` on the 0-255 scale and
    uint8 `(batch, 160, 160, 1)`.
    """
    from tensorflow import data as tf_data
    from tensorflow import image as tf_image
    from tensorflow import io as tf_io

    img_size = (SEGMENTATION_SIZE, SEGMENTATION_SIZE)

    # keras-team/keras-io, examples/vision/oxford_pets_image_segmentation.py (the Keras 3
    # version), `get_dataset`, copied as it is but for one line: its `target_img -= 1`
    # turns Pets' trimap ids 1-3 into 0-2, and these masks' ids start at 0.
    def load_img_masks(input_img_path, target_img_path):
        input_img = tf_io.read_file(input_img_path)
        input_img = tf_io.decode_png(input_img, channels=3)
        input_img = tf_image.resize(input_img, img_size)
        input_img = tf_image.convert_image_dtype(input_img, "float32")

        target_img = tf_io.read_file(target_img_path)
        target_img = tf_io.decode_png(target_img, channels=1)
        target_img = tf_image.resize(target_img, img_size, method="nearest")
        target_img = tf_image.convert_image_dtype(target_img, "uint8")
        return input_img, target_img

    dataset = tf_data.Dataset.from_tensor_slices((list(files), list(masks)))
    dataset = dataset.map(load_img_masks, num_parallel_calls=tf_data.AUTOTUNE)
    dataset = dataset.batch(batch_size)
    settings = (f"keras-io oxford_pets_image_segmentation get_dataset: map(load_img_masks, "
                f"num_parallel_calls=AUTOTUNE): decode_png, resize {img_size} (bilinear; mask "
                f"nearest), batch({batch_size})")
    return Loader(lambda: iter(dataset), dataset, settings=settings,
                  note=SEGMENTATION_NOTES["keras_oxford_pets"])
