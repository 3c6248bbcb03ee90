"""The elements of dense tasks in Keras's formats, from the graph's flat outputs.

The graph's outputs are a flat tuple (`ImagePipeline.output_dtypes`); the element
each format gives is `element(outputs, options)`:

| options | element |
|---|---|
| `masks` | `(images, masks)` |
| `masks`, `output="dict"` | `{"images": images, "segmentation_masks": masks}` |
| `boxes` | `(images, {"boxes": boxes, "labels": labels})` |
| `boxes`, sharded | `(images, {"boxes": boxes, "labels": labels}, sample_weights)` |
| `boxes`, `output="dict"` | `{"images": images, "bounding_boxes": {"boxes": boxes, "labels": labels}}` |

The dicts are those Keras's preprocessing layers take. Anything else is the flat
tuple, unchanged: with masks, a shard's `(images, masks, sample_weights)`. A shard's
weights (several devices) come last, as Keras's `(x, y, sample_weight)`; the dicts are
refused there (`pipeline._check_sharding`).
"""


def nested(options):
    """Whether `element` gives other than the flat outputs for `options`."""
    return options.boxes is not None or options.output == "dict"


def element(outputs, options):
    """The element of the flat `outputs` (a tuple of arrays or tensors) for `options`."""
    if not nested(options):
        return tuple(outputs)
    images = outputs[0]
    if options.boxes is not None:
        boxes = {"boxes": outputs[1], "labels": outputs[2]}
        if options.output == "dict":
            return {"images": images, "bounding_boxes": boxes}
        return (images, boxes, *outputs[3:])
    return {"images": images, "segmentation_masks": outputs[1]}


def check_dict_fits(kind, options):
    """Raises ValueError for a dataset of `output="dict"` read by Keras's `fit` or
    `evaluate` (`kind`) itself, not through a `map`: those loops take `(inputs,
    targets)` pairs, and read a dict as inputs without targets. The dicts fit
    Keras's preprocessing layers and a `map`."""
    if options.output != "dict" or kind not in ("fit", "evaluate"):
        return
    target = "bounding_boxes" if options.boxes is not None else "segmentation_masks"
    raise ValueError(
        f'`output="dict"` gives the dicts of Keras\'s preprocessing layers ({{"images", '
        f'"{target}"}}), which `{kind}` reads as inputs without targets: it takes '
        "`(inputs, targets)` pairs. Make the dataset without `output` for pairs, or map "
        "the dicts to pairs after your layers: `dataset.map(lambda d: (d[\"images\"], "
        f'd["{target}"]))`. The dict form fits `keras.layers` augmentation layers and '
        f'`map`. Received: output="dict", read by `{kind}`'
    )
