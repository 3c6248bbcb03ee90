"""`make_dali_dataset(..., masks=)` and `(..., boxes=)` on one Keras backend in its
own process (`test_masks.py`).

    KERAS_BACKEND=torch python masks_job.py DENSE_DIR OUT_JSON

DENSE_DIR is `make_dense_sample_dataset`'s folder (8 images). The job writes, to
OUT_JSON:

- `formats`: each format ("tf" where TensorFlow is installed, "pydataset",
  "grain") read whole against the native epoch, with `batch_size=None` and
  `subset="both"`, for masks, boxes, and `output="dict"` with masks and with boxes;
- `segmentation`: a tiny segmentation model's `fit` over `EPOCHS` epochs with
  `validation_data` (held-out images drawn with another seed), the native epoch each
  `fit` epoch trained on (from the masks it received), its mean IoU on the held-out
  images, and `predict` on `(images, masks)` and on images alone;
- `detector`: the boxes and labels a tiny box-regressing model received in each
  epoch of its `fit`, which the test compares with the native epochs and with the
  shapes drawn in their images.
"""

import importlib.util
import json
import os
import sys
import tempfile
import time

import numpy as np

import keras
from keras import ops

import dalipipe
from dalipipe.annotations.sample import MASK_CLASS_NAMES, SHAPES
from dalipipe.sample_data import make_dense_sample_dataset

BATCH = 4
SIZE = (48, 64)
BASE = dict(image_size=SIZE, batch_size=BATCH, seed=3, device="cpu", verbose=False,
            augment=True)
MASK_OPTIONS = dict(BASE, class_names=list(MASK_CLASS_NAMES))
BOX_OPTIONS = dict(BASE, max_boxes=6, bounding_box_format="xyxy")
FORMATS = ("tf", "pydataset", "grain") if importlib.util.find_spec("tensorflow") \
    else ("pydataset", "grain")
EPOCHS = 10  # of the segmentation model
DETECTOR_EPOCHS = 2


def as_numpy(x):
    """A batch's array (a NumPy array, or a TensorFlow, torch or JAX tensor on the CPU)."""
    return x.numpy() if hasattr(x, "numpy") else np.asarray(x)


def leaves(element, case):
    """The arrays of a dense element, flat in the graph's order, or None when its
    structure is not Keras's for `case`."""
    if case == "masks" and isinstance(element, tuple) and len(element) == 2 \
            and not isinstance(element[1], dict):
        return list(element)
    if case == "boxes" and isinstance(element, tuple) and isinstance(element[1], dict):
        return [element[0], element[1]["boxes"], element[1]["labels"]]
    if case == "dict_masks" and set(element) == {"images", "segmentation_masks"}:
        return [element["images"], element["segmentation_masks"]]
    if case == "dict_boxes" and set(element) == {"images", "bounding_boxes"} \
            and set(element["bounding_boxes"]) == {"boxes", "labels"}:
        return [element["images"], element["bounding_boxes"]["boxes"],
                element["bounding_boxes"]["labels"]]
    return None


def formats(images, masks, boxes):
    """Masks, boxes, and `output="dict"` for each, on each format, against the native
    epoch: `{"<case> <format>": {...}}`."""
    cases = {"masks": dict(MASK_OPTIONS, masks=masks),
             "boxes": dict(BOX_OPTIONS, boxes=boxes),
             "dict_masks": dict(MASK_OPTIONS, masks=masks, output="dict"),
             "dict_boxes": dict(BOX_OPTIONS, boxes=boxes, output="dict")}
    found = {}
    for case, options in cases.items():
        native = list(dalipipe.make_dali_pipeline(images, **options).epoch(0))
        for name in FORMATS:
            ds = dalipipe.make_dali_dataset(images, format=name, **options)
            batches = [leaves(batch, case) for batch in ds]
            single = leaves(next(iter(dalipipe.make_dali_dataset(
                images, format=name, **{**options, "batch_size": None}))), case)
            _, val = dalipipe.make_dali_dataset(images, format=name, validation_split=0.25,
                                                subset="both", **options)
            found[f"{case} {name}"] = {
                "structured": all(b is not None for b in batches) and single is not None,
                "equal_to_native": len(batches) == len(native) and all(
                    b is not None and all(np.array_equal(as_numpy(x), y) for x, y in zip(b, n))
                    for b, n in zip(batches, native)),
                "dtypes": [str(as_numpy(x).dtype) for x in batches[0]],
                "shapes": [list(as_numpy(x).shape) for x in batches[0]],
                "unbatched_shapes": [list(as_numpy(x).shape) for x in single or []],
                "val_steps": len([b for b in val]),
                "class_names": list(ds.class_names),
            }
    return found


class Seen(keras.metrics.Metric):
    """The targets of the last batch `fit` trained on: `signature(y_true)` per sample,
    `(BATCH, width)` float32 rows, and how many samples the batch had."""

    def __init__(self, signature, width, name):
        super().__init__(name=name)
        self.signature, self.width = signature, width
        self.rows = self.add_variable(shape=(BATCH, width), initializer="zeros", name="rows")
        self.size = self.add_variable(shape=(), initializer="zeros", name="size")

    def update_state(self, y_true, y_pred, sample_weight=None):
        rows = ops.reshape(self.signature(ops.cast(y_true, "float32")), (-1, self.width))
        self.rows.assign(ops.concatenate([rows, ops.zeros((BATCH, self.width))])[:BATCH])
        self.size.assign(ops.sum(ops.ones_like(rows[:, 0])))

    def result(self):
        return self.size.value


def mask_signature(masks):
    """Per mask `(batch, height, width, 1)`: the sum of its ids weighed by `1 + x`
    (the crop and the flip change it), exact in float32 at these sizes."""
    return ops.sum(masks[..., 0] * ops.arange(1, SIZE[1] + 1, dtype="float32"), axis=(1, 2))


def native_mask_signature(masks):
    return (masks[..., 0] * np.arange(1, SIZE[1] + 1, dtype=np.float32)).sum((1, 2))


class Reads(keras.callbacks.Callback):
    """Each `Seen` metric's rows, per `fit` epoch: `{name: [[row, ...], ...]}`."""

    def on_train_begin(self, logs=None):
        self.epochs, self.epoch = {}, 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        for metric in metrics(self.model):
            size = int(ops.convert_to_numpy(metric.size))
            epochs = self.epochs.setdefault(metric.name, [])
            epochs += [[] for _ in range(self.epoch + 1 - len(epochs))]
            epochs[self.epoch] += ops.convert_to_numpy(metric.rows)[:size].tolist()


def metrics(model):
    """The model's `Seen` metrics (within Keras's compiled metrics)."""
    found = []
    for metric in model.metrics:
        found += [m for m in [metric, *getattr(metric, "metrics", [])] if isinstance(m, Seen)]
    return found


def mean_iou(predicted, masks, num_classes):
    """The mean, over the classes present in either, of each class's IoU."""
    ious = []
    for k in range(num_classes):
        union = np.sum((predicted == k) | (masks == k))
        if union:
            ious.append(np.sum((predicted == k) & (masks == k)) / union)
    return float(np.mean(ious)), [float(v) for v in ious]


def segmentation(images, masks, held_out):
    """See `segmentation` above."""
    classes = len(MASK_CLASS_NAMES)
    train = dalipipe.make_dali_dataset(images, masks=masks, **MASK_OPTIONS)
    plain = {**MASK_OPTIONS, "augment": False, "shuffle": False}
    held_images, held_masks = (os.path.join(held_out, d) for d in ("images", "masks"))
    pairs = dalipipe.make_dali_dataset(held_images, masks=held_masks, **plain)
    alone = dalipipe.make_dali_dataset(held_images, labels=None,
                                       **{**plain, "class_names": None})
    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((*SIZE, 3)),
        keras.layers.Rescaling(1 / 255),
        keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
        keras.layers.Conv2D(classes, 1),  # logits: a softmax before the loss fails on torch
    ])
    model.compile(keras.optimizers.Adam(0.05),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=[Seen(mask_signature, 1, "seen_masks")])
    reads = Reads()
    history = model.fit(train, epochs=EPOCHS, validation_data=pairs, verbose=0,
                        callbacks=[reads])
    native = dalipipe.make_dali_pipeline(images, masks=masks, **MASK_OPTIONS)
    want = [np.concatenate([native_mask_signature(m) for _, m in native.epoch(e)]).tolist()
            for e in range(EPOCHS + 1)]
    seen = [[row[0] for row in rows] for rows in reads.epochs["seen_masks"]]
    predicted = model.predict(pairs, verbose=0)
    truth = np.concatenate([as_numpy(m) for _, m in pairs])[..., 0]
    iou, per_class = mean_iou(predicted.argmax(-1), truth, classes)
    return {"losses": [float(v) for v in history.history["loss"]],
            "val_losses": [float(v) for v in history.history.get("val_loss", [])],
            "trained_on": [next((e for e, rows in enumerate(want) if rows == s), -1)
                           for s in seen],
            "mean_iou": iou, "class_iou": per_class,
            "predicted_shape": list(predicted.shape),
            "same_predictions": bool(np.allclose(predicted, model.predict(alone, verbose=0),
                                                 atol=1e-5))}


def same(y):
    return y


def box_loss(y_true, y_pred):
    """The squared error of the boxes that are there (not -1 padding), per image."""
    there = ops.cast(y_true[..., :1] >= 0, y_pred.dtype)
    return ops.sum(there * ops.square(y_true - y_pred), axis=(1, 2)) / \
        (ops.sum(there, axis=(1, 2)) + 1)


def detector(images, boxes):
    """See `detector` above: `{"boxes": [epoch][sample] (6 * 4,), "labels": ...}`."""
    train = dalipipe.make_dali_dataset(images, boxes=boxes, **BOX_OPTIONS)
    max_boxes, classes = BOX_OPTIONS["max_boxes"], len(SHAPES)
    keras.utils.set_random_seed(0)
    inputs = keras.Input((*SIZE, 3))
    x = keras.layers.Conv2D(8, 3, strides=4, activation="relu")(
        keras.layers.Rescaling(1 / 255)(inputs))
    x = keras.layers.Flatten()(x)
    outputs = {"boxes": keras.layers.Reshape((max_boxes, 4))(keras.layers.Dense(max_boxes * 4)(x)),
               "labels": keras.layers.Reshape((max_boxes, classes))(
                   keras.layers.Dense(max_boxes * classes)(x))}
    model = keras.Model(inputs, outputs)
    model.compile(
        keras.optimizers.Adam(1e-3),
        loss={"boxes": box_loss,
              "labels": keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                                   ignore_class=-1)},
        metrics={"boxes": [Seen(same, max_boxes * 4, "seen_boxes")],
                 "labels": [Seen(same, max_boxes, "seen_labels")]})
    reads = Reads()
    history = model.fit(train, epochs=DETECTOR_EPOCHS, verbose=0, callbacks=[reads])
    return {"boxes": reads.epochs["seen_boxes"], "labels": reads.epochs["seen_labels"],
            "losses": [float(v) for v in history.history["loss"]]}


def main(dense, out):
    images, masks = os.path.join(dense, "images"), os.path.join(dense, "masks")
    boxes = os.path.join(dense, "instances.json")
    with tempfile.TemporaryDirectory() as held_out:
        make_dense_sample_dataset(held_out, num_images=8, seed=1, crop_width=(64, 96))
        result = {"backend": keras.backend.backend(), "seconds": {}}
        for part, run in (("formats", lambda: formats(images, masks, boxes)),
                          ("segmentation", lambda: segmentation(images, masks, held_out)),
                          ("detector", lambda: detector(images, boxes))):
            start = time.perf_counter()
            result[part] = run()
            result["seconds"][part] = round(time.perf_counter() - start, 1)
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
