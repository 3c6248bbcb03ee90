"""What the recipes' operations do to masks and boxes.

DALI's `auto_aug` operations are of two kinds here:

- geometric: the shears, translations and the rotation (`shear_x`, `shear_y`,
  `translate_x`, `translate_y`, with or without the image's shape, and `rotate`),
  which move pixels. A mask goes through the same operation with the same draws,
  sampled with the nearest neighbour (`mask_suite`), and a box through the same
  affine map (`affine`);
- the others (brightness, contrast, colour, sharpness, posterize, solarize,
  solarize-add, invert, equalize, auto-contrast, identity), which change the
  image's values only: masks and boxes stay as they are.

An operation of neither kind (one that a later DALI adds to its suites) is refused
with a named error (`UnalignedOperationError`): nothing is moved without its masks
and boxes.

The maps are in continuous pixel coordinates (x to the right, y down, `(0, 0)`
the top-left corner of the top-left pixel, so that a pixel's center is at `+0.5`),
as DALI's `warp_affine` and `rotate` apply them: shear `[[1, sx], [sy, 1]]` about
the origin, translation by the offset, rotation by the angle counter-clockwise on
the screen about the image's center `(width / 2, height / 2)`, the output of the
same size. `tests/test_recipe_geometry.py` checks each against DALI's output.

Only DALI's public `Augmentation` attributes are read (`op`, `mag_range`,
`randomly_negate`, `mag_to_param`, `name`). DALI is imported inside the functions.
"""

import functools

import numpy as np


class UnalignedOperationError(ValueError):
    """A recipe's operation whose effect on masks and boxes dalipipe does not know."""


@functools.lru_cache(maxsize=None)
def _kinds():
    """`{op function: kind}`: "shear", "translate_width", "translate_height",
    "translate", "rotate" for the geometric operations, None for the others."""
    from nvidia.dali.auto_aug import augmentations as a

    kinds = {a.shear_x.op: "shear", a.shear_y.op: "shear", a.rotate.op: "rotate",
             a.translate_x.op: "translate_width", a.translate_y.op: "translate_height",
             a.translate_x_no_shape.op: "translate", a.translate_y_no_shape.op: "translate"}
    for aug in (a.brightness, a.contrast, a.color, a.sharpness, a.posterize, a.solarize,
                a.solarize_add, a.invert, a.equalize, a.auto_contrast, a.identity):
        kinds[aug.op] = None
    return kinds


def kind_of(aug):
    """The kind of `aug` (an `nvidia.dali.auto_aug` augmentation): "shear",
    "translate_width", "translate_height", "translate" or "rotate" for a geometric
    operation, None for one that changes the image's values only.

    Raises:
        UnalignedOperationError: for an operation of neither kind, naming it.
    """
    kinds = _kinds()
    if aug.op not in kinds:
        raise UnalignedOperationError(
            f"The recipe's operation {aug.name!r} is not one whose effect on masks and "
            "boxes dalipipe knows (a shear, translation or rotation, or an operation on "
            "the image's values only), so it cannot be applied with `masks` or `boxes`. "
            f"Received: operation {aug!r}")
    return kinds[aug.op]


def is_geometric(aug):
    """Whether `aug` moves pixels (and so masks and boxes)."""
    return kind_of(aug) is not None


def mask_suite(augmentations):
    """The operations a mask goes through for `augmentations` (a suite, or one stage
    of a policy), as `(operations, table)`: `operations` the geometric ones, each
    once, then DALI's `identity`; `table[i]` the index in `operations` of the one
    that `augmentations[i]` gives a mask (the identity for an operation on values).
    Selected by `table[op]` with the image's magnitude bins, each mask takes its
    image's geometry; fewer branches than the image's keep the graph small."""
    from nvidia.dali.auto_aug import augmentations as a

    operations = [aug for aug in dict.fromkeys(augmentations) if is_geometric(aug)]
    operations.append(a.identity)
    table = [operations.index(aug) if is_geometric(aug) else len(operations) - 1
             for aug in augmentations]
    return operations, table


def parameter(aug, magnitude_bin, sign, num_magnitude_bins):
    """The parameter DALI gives `aug` for `magnitude_bin` of `num_magnitude_bins`,
    negated when `aug.randomly_negate` and `sign` is 1: `mag_to_param` of the
    magnitude (float64 array)."""
    mag_range = aug.mag_range
    if isinstance(mag_range, np.ndarray):
        magnitudes = mag_range
    else:
        low, high = mag_range
        magnitudes = np.linspace(low, high, num_magnitude_bins, dtype=np.float32)
    magnitude = magnitudes[int(magnitude_bin)]
    if aug.randomly_negate and int(sign):
        magnitude = -magnitude
    return np.asarray(aug.mag_to_param(magnitude), np.float64)


def affine(aug, magnitude_bin, sign, num_magnitude_bins, image_size):
    """The map of output pixels that `aug` applies to an image of `image_size`
    (height, width), as float64 `(3, 3)` acting on `(x, y, 1)` columns: the identity
    for an operation on values only.

    Raises:
        UnalignedOperationError: as `kind_of`.
    """
    kind = kind_of(aug)
    if kind is None:
        return np.eye(3)
    height, width = (float(v) for v in image_size)
    p = parameter(aug, magnitude_bin, sign, num_magnitude_bins)
    if kind == "shear":
        return np.array([[1.0, p[0], 0.0], [p[1], 1.0, 0.0], [0.0, 0.0, 1.0]])
    if kind == "rotate":
        angle = np.deg2rad(float(p))
        cos, sin = np.cos(angle), np.sin(angle)
        cx, cy = width / 2, height / 2
        return np.array([[cos, sin, cx - cos * cx - sin * cy],
                         [-sin, cos, cy + sin * cx - cos * cy], [0.0, 0.0, 1.0]])
    scale = {"translate_width": width, "translate_height": height, "translate": 1.0}[kind]
    return np.array([[1.0, 0.0, p[0] * scale], [0.0, 1.0, p[1] * scale], [0.0, 0.0, 1.0]])
