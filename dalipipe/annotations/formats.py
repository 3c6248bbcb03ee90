"""The box formats of `keras.utils.bounding_boxes.convert_format`, and their check
(for `dalipipe.annotations.boxes` and the options' validation)."""

# The formats of keras.utils.bounding_boxes.convert_format (case-insensitive), in its
# order. "rel_" formats are relative to the image's width and height.
BOX_FORMATS = ("xyxy", "yxyx", "xywh", "center_xywh", "center_yxhw",
               "rel_xyxy", "rel_yxyx", "rel_xywh", "rel_center_xywh")


def check_format(bounding_box_format, argument="bounding_box_format"):
    """`bounding_box_format` in lower case, or a ValueError naming the formats."""
    if isinstance(bounding_box_format, str) and bounding_box_format.lower() in BOX_FORMATS:
        return bounding_box_format.lower()
    raise ValueError(f"`{argument}` must be one of {BOX_FORMATS}. "
                     f"Received: {argument}={bounding_box_format!r}")
