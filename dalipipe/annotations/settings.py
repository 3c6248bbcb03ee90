"""The options of dense tasks, checked: `masks`, `mask_fill_value`, `boxes`,
`bounding_box_format`, `max_boxes`, `min_box_visibility`, `box_crop` and `output`.

`check_dense(options)` is called by `dalipipe.options.Options` as it validates
itself. With `masks` or `boxes` the targets are the masks or the boxes, so the
options of image-level labels (`labels`, `label_mode`, `label_columns`,
`class_weight`, `mix`) must stay at their defaults (MixUp and CutMix do not mix
masks or boxes). The augmentation recipes are accepted: their geometric operations
move masks and boxes with the image's draws (`dalipipe.recipe_geometry`). `masks`
and `boxes` together are not supported yet.
"""

import os

from dalipipe.annotations.formats import check_format
from dalipipe.utils import is_int, is_number

OUTPUTS = (None, "dict")


def _is_default_labels(value):
    return value is None or (isinstance(value, str) and value == "inferred")


def check_dense(options):
    """ValueError naming the arguments for dense-task options that are wrong or not
    supported together (`options`: an `Options` being validated)."""
    masks, boxes, fill = options.masks, options.boxes, options.mask_fill_value
    if not is_int(fill) or not -2**31 <= fill < 2**31:
        raise ValueError("`mask_fill_value` must be an integer (an int32 class id). "
                         f"Received: mask_fill_value={fill!r}")
    if options.bounding_box_format is not None:  # None: "xyxy" (`Options`)
        check_format(options.bounding_box_format)
    max_boxes = options.max_boxes
    if not is_int(max_boxes) or max_boxes < 1:
        raise ValueError(f"`max_boxes` must be a positive integer. Received: "
                         f"max_boxes={max_boxes!r}")
    share = options.min_box_visibility
    if not is_number(share) or not 0 <= share <= 1:
        raise ValueError("`min_box_visibility` must be a number in [0, 1] (the share of a "
                         "box's area that must stay inside a crop for the box to be kept). "
                         f"Received: min_box_visibility={share!r}")
    if options.box_crop not in (True, False):
        raise ValueError(f"`box_crop` must be True or False. Received: "
                         f"box_crop={options.box_crop!r}")
    if options.box_crop and (boxes is None or not options.augment):
        raise ValueError("`box_crop=True` moves the random-resized crop of `augment` to "
                         "hold a box, so it needs `boxes` and `augment=True` (or a recipe). "
                         "Received: "
                         f"box_crop=True, boxes={shown(boxes)}, augment={options.augment!r}")
    if options.output not in OUTPUTS:
        raise ValueError(f"`output` must be one of {OUTPUTS}. Received: "
                         f"output={options.output!r}")
    if options.output == "dict" and masks is None and boxes is None:
        raise ValueError("`output='dict'` gives Keras's dict of images with their masks or "
                         "boxes, so it needs `masks` or `boxes`. Received: output='dict', "
                         "masks=None, boxes=None")
    if masks is not None and not isinstance(masks, (str, os.PathLike)):
        raise ValueError(
            "`masks` must be a folder of masks (matched to the images by file stem), "
            "the name of a table's mask column, or for tar shards the extension of each "
            f"sample's mask member ('.seg.png'). Received: masks={masks!r}")
    if boxes is not None and not (isinstance(boxes, (str, os.PathLike))
                                  or hasattr(boxes, "to_dict") or isinstance(boxes, dict)):
        raise ValueError(
            "`boxes` must be a COCO instances JSON file, or a table with one row per box (a "
            "CSV file, a dict of columns or a DataFrame). "
            f"Received: boxes of type {type(boxes).__name__}")
    if masks is not None and boxes is not None:
        raise ValueError("`masks` and `boxes` together are not supported yet: make one "
                         f"dataset for each. Received: masks={masks!r}, boxes={shown(boxes)}")
    for name, value in (("masks", masks), ("boxes", boxes)):
        if value is not None:
            _check_targets(options, name, shown(value))
            if options.recipe is not None:
                try:  # every operation's effect on masks and boxes is known
                    options.recipe.check_alignable()
                except ValueError as e:
                    raise type(e)(f"{e}, augment={options.augment!r}, {name}={shown(value)}") \
                        from None


def shown(value):
    """`value` (a path, or a table of boxes) as an error message shows it."""
    if value is None:
        return "None"
    return repr(os.fspath(value)) if isinstance(value, (str, os.PathLike)) \
        else f"<a {type(value).__name__}>"


def _check_targets(options, name, shown):
    """`name` ("masks" or "boxes") gives the targets: the label options stay at their
    defaults."""
    given = {"labels": (options.labels, "'inferred'"),
             "label_mode": (options.label_mode, "'int'"),
             "label_columns": (options.label_columns, None),
             "class_weight": (options.class_weight, None), "mix": (options.mix, None)}
    for argument, (value, default) in given.items():
        if not (_is_default_labels(value) or (argument == "label_mode" and value == "int")):
            raise ValueError(
                f"With `{name}`, the targets are the {name}: `{argument}` must stay at its "
                f"default ({default}). Received: {argument}={value!r}, {name}={shown}")
