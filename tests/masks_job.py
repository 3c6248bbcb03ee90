"""`make_dali_dataset(..., masks=)` and `(..., boxes=)` on a Keras backend in its own
process (`test_masks.py`, `test_boxes.py`).

    KERAS_BACKEND=tensorflow python masks_job.py MODE DENSE_DIR OUT_JSON

DENSE_DIR is `make_dense_sample_dataset`'s folder. MODE `formats`: each of the
formats "tf", "pydataset" and "grain" read whole against the native epoch, with
`batch_size=None` and `subset="both"`, for masks. MODE `dense`: the same for boxes,
and for `output="dict"` with masks and with boxes. MODE `fit`: a tiny segmentation
model's `fit` and `predict`.
"""

import json
import os
import sys

import numpy as np

import keras

import dalipipe
from dalipipe.annotations.sample import MASK_CLASS_NAMES

OPTIONS = dict(image_size=(48, 64), batch_size=4, seed=3, device="cpu", verbose=False,
               class_names=list(MASK_CLASS_NAMES), augment=True)


def as_numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


def formats(images, masks):
    native = [b for b in dalipipe.make_dali_pipeline(images, masks=masks, **OPTIONS).epoch(0)]
    found = {}
    for name in ("tf", "pydataset", "grain"):
        ds = dalipipe.make_dali_dataset(images, masks=masks, format=name, **OPTIONS)
        batches = [tuple(as_numpy(x) for x in batch) for batch in ds]
        single = next(iter(dalipipe.make_dali_dataset(
            images, masks=masks, format=name, **{**OPTIONS, "batch_size": None})))
        _, val = dalipipe.make_dali_dataset(images, masks=masks, format=name,
                                            validation_split=0.25, subset="both", **OPTIONS)
        found[name] = {
            "mask_dtype": str(batches[0][1].dtype),
            "mask_shape": list(batches[0][1].shape),
            "equal_to_native": len(batches) == len(native) and all(
                np.array_equal(a, c) and np.array_equal(b, d)
                for (a, b), (c, d) in zip(batches, native)),
            "unbatched_shape": list(as_numpy(single[1]).shape),
            "val_steps": len([b for b in val]),
            "class_names": list(ds.class_names),
        }
    return found


BOX_OPTIONS = dict(image_size=(48, 64), batch_size=4, seed=3, device="cpu", verbose=False,
                   augment=True, max_boxes=6)


def leaves(element, output):
    """The arrays of a dense element, flat in the graph's order, or None when its
    structure is not Keras's for `output`."""
    if output == "boxes" and isinstance(element, tuple) and isinstance(element[1], dict):
        return [element[0], element[1]["boxes"], element[1]["labels"]]
    if output == "dict_masks" and set(element) == {"images", "segmentation_masks"}:
        return [element["images"], element["segmentation_masks"]]
    if output == "dict_boxes" and set(element) == {"images", "bounding_boxes"} \
            and set(element["bounding_boxes"]) == {"boxes", "labels"}:
        return [element["images"], element["bounding_boxes"]["boxes"],
                element["bounding_boxes"]["labels"]]
    return None


def dense_formats(images, masks, boxes):
    """Boxes, and `output="dict"` for masks and boxes, on each format, against the
    native epoch."""
    cases = {"boxes": dict(boxes=boxes),
             "dict_masks": dict(masks=masks, output="dict",
                                class_names=list(MASK_CLASS_NAMES)),
             "dict_boxes": dict(boxes=boxes, output="dict")}
    found = {}
    for case, options in cases.items():
        options = {**BOX_OPTIONS, **options}
        native = list(dalipipe.make_dali_pipeline(images, **options).epoch(0))
        for name in ("tf", "pydataset", "grain"):
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
                "unbatched_shapes": [list(as_numpy(x).shape) for x in single or []],
                "val_steps": len([b for b in val]),
                "class_names": list(ds.class_names),
            }
    return found


def fit(images, masks):
    ds = dalipipe.make_dali_dataset(images, masks=masks, **OPTIONS)
    model = keras.Sequential([
        keras.Input((48, 64, 3)),
        keras.layers.Rescaling(1 / 255),
        keras.layers.Conv2D(4, 3, padding="same", activation="relu"),
        keras.layers.Conv2D(len(MASK_CLASS_NAMES), 1, activation="softmax"),
    ])
    model.compile("adam", "sparse_categorical_crossentropy")
    history = model.fit(ds, epochs=2, verbose=0)
    # `predict` reads the images of (images, masks) elements, or images alone.
    pairs = dalipipe.make_dali_dataset(images, masks=masks, **{**OPTIONS, "augment": False,
                                                               "shuffle": False})
    alone = dalipipe.make_dali_dataset(images, labels=None, **{
        **OPTIONS, "augment": False, "class_names": None, "shuffle": False})
    predicted = model.predict(pairs, verbose=0)
    return {"losses": [float(v) for v in history.history["loss"]],
            "predicted_shape": list(predicted.shape),
            "same_predictions": bool(np.allclose(predicted, model.predict(alone, verbose=0)))}


def main(mode, dense, out):
    images, masks = os.path.join(dense, "images"), os.path.join(dense, "masks")
    if mode == "dense":
        result = dense_formats(images, masks, os.path.join(dense, "instances.json"))
    else:
        result = {"formats": formats, "fit": fit}[mode](images, masks)
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
