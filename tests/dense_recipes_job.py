"""The Oxford-Pets recipe of docs/dense.md, small: a U-Net on trimap-like masks.

Run in pytest's process on TensorFlow (`test_dense_recipes.py`) and by
`backend_job.py`'s MODE `unet` on torch. The data are `make_dense_sample_dataset`'s
images with their masks' ids plus 1 (1 to 4, as trimaps hold 1 to 3), so that
`map` subtracts 1.
"""

import os

import keras
import numpy as np
from PIL import Image

import dalipipe
from dalipipe.annotations.masks import read_mask
from dalipipe.sample_data import make_dense_sample_dataset

SIZE = (32, 32)
CLASSES = 4


def trimap_like(folder, num_images=24):
    """`make_dense_sample_dataset` in `folder`, its masks rewritten with ids + 1 as
    8-bit greyscale PNGs in `folder/trimaps`. Returns `(images, trimaps)`."""
    make_dense_sample_dataset(folder, num_images=num_images, seed=0, crop_width=(48, 64))
    trimaps = os.path.join(folder, "trimaps")
    os.makedirs(trimaps, exist_ok=True)
    for name in sorted(os.listdir(os.path.join(folder, "masks"))):
        with open(os.path.join(folder, "masks", name), "rb") as f:
            ids = read_mask(f.read(), name).astype(np.uint8) + 1
        Image.fromarray(ids, "L").save(os.path.join(trimaps, name))
    return os.path.join(folder, "images"), trimaps


def unet(num_classes=CLASSES, size=SIZE, widths=(8, 16)):
    """The recipe's U-Net, narrower and shallower."""
    inputs = keras.Input((*size, 3))
    x, skips = inputs, []
    for filters in widths:
        x = keras.layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
        skips.append(x)
        x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.Conv2D(2 * widths[-1], 3, padding="same", activation="relu")(x)
    for filters, skip in zip(widths[::-1], reversed(skips)):
        x = keras.layers.Conv2DTranspose(filters, 2, strides=2, padding="same")(x)
        x = keras.layers.Concatenate()([x, skip])
        x = keras.layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
    return keras.Model(inputs, keras.layers.Conv2D(num_classes, 1)(x))


def mean_iou_rises(folder, format, epochs=6):
    """Fits the U-Net through `map(minus1)`; returns the mean IoU of each epoch and
    the ids the mapped masks hold."""
    keras.utils.set_random_seed(0)
    images, trimaps = trimap_like(folder)
    train = dalipipe.make_dali_dataset(images, masks=trimaps, image_size=SIZE, batch_size=8,
                                       augment=True, seed=1, device="cpu", format=format,
                                       verbose=False)
    seen = set()

    def minus1(images, masks):
        if format != "tf":
            seen.update(np.unique(keras.ops.convert_to_numpy(masks)).tolist())
        return images, masks - 1

    model = unet()
    model.compile(keras.optimizers.Adam(0.01),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=[keras.metrics.MeanIoU(num_classes=CLASSES, sparse_y_pred=False)])
    history = model.fit(train.map(minus1), epochs=epochs, verbose=0)
    iou = next(v for k, v in history.history.items() if "io_u" in k or "iou" in k)
    return {"iou": [float(v) for v in iou], "ids": sorted(seen)}
