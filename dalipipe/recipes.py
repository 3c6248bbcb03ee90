"""Augmentation recipes: RandAugment, TrivialAugment (wide) and AutoAugment.

Each recipe is a small frozen dataclass with torchvision's parameter names and
defaults, run with the operations of DALI's `nvidia.dali.auto_aug` (their suites and
policies, on the pipeline's device). It runs after the random-resized crop and the
flip, on the uint8 HWC crop, before normalization.

DALI's `auto_aug` functions draw their choices with `fn.random` from a build-time
seed, and every new iterator (each epoch on TensorFlow) would repeat them. Here a
recipe's choices are drawn in NumPy instead (`draw`), per sample, as whole numbers
in float32 columns of the graph's `"random"` input, so they change with the epoch
and the sample's position as the crops do (`sampling.per_position`); `apply` reads
them in the graph with `auto_aug.core.select` and `signed_bin`. A recipe is the
`"recipe"` part of that input, in the shape `dalipipe.feed` describes (`columns`,
`draw`, `apply`).

With masks and boxes, the recipe's geometric operations (shears, translations,
rotation) move them with the same draws and its other operations leave them as
they are (`dalipipe.recipe_geometry`): `apply_to_masks` runs the same selection on
the masks, and `affines` gives each sample's map in NumPy, through which
`dalipipe.annotations.placement` moves its boxes. `steps` says which operations a
sample's draws run.
"""

import contextlib
import dataclasses
import functools
import warnings
from typing import ClassVar

import numpy as np

from dalipipe import dali_hooks, recipe_geometry, sampling
from dalipipe.utils import distinct_rows, is_int

# augment= names -> the recipe with its defaults (`parse_augment`).
RECIPES = ("randaugment", "trivialaugment", "autoaugment")
# AutoAugment's policies: dalipipe's names (torchvision's, lower case) -> DALI's.
AUTOAUGMENT_POLICIES = {"imagenet": "image_net", "reduced_imagenet": "reduced_image_net",
                        "svhn": "svhn", "reduced_cifar10": "reduced_cifar10"}
# The grey value that fills what a shear, rotation or translation uncovers (DALI's,
# and the original TensorFlow implementations'; torchvision fills with black).
FILL_VALUE = 128
# torchvision's largest translations: RandAugment's and AutoAugment's a fraction of
# the image, TrivialAugmentWide's in pixels (DALI's own defaults differ).
TRANSLATE_FRACTION = 150 / 331
TRANSLATE_PIXELS = 32


def _whole(name, value, low, high=None):
    """Raises ValueError unless `value` is an integer in [low, high]."""
    ok = is_int(value) and value >= low
    if not ok or (high is not None and value > high):
        bounds = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"`{name}` must be an integer {bounds}. Received: {name}={value!r}")


@functools.lru_cache(maxsize=None)
def _suite(getter, **kwargs):
    """A DALI `auto_aug` suite or policy, built once per process: `getter(**kwargs)`,
    DALI's deprecation notices held back (`_quiet`). The draws and the graph of a
    recipe ask for it several times per epoch."""
    with _quiet():
        return getter(**kwargs)


@contextlib.contextmanager
def _quiet():
    """Holds back DALI's deprecation notices (its `auto_aug` still calls
    `fn.experimental.equalize` and `fn.experimental.filter`, and DALI shows the
    notice whatever the warning filters say); other warnings are shown."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for warning in caught:
        if not issubclass(warning.category, DeprecationWarning):
            warnings.warn_explicit(warning.message, warning.category, warning.filename,
                                   warning.lineno)


def _choices(uniform, counts):
    """Whole numbers drawn from `uniform` (float `(n, len(counts))` in [0, 1)): column
    `j` in `range(counts[j])` (None keeps the uniform number), as float32.

    One uniform block per draw keeps each row the same whatever the number of rows
    drawn (`sampling.per_position`)."""
    out = uniform.astype(np.float32)
    for j, count in enumerate(counts):
        if count is not None:
            out[:, j] = np.minimum(np.floor(uniform[:, j] * count), count - 1)
    return out


def _columns(draws, start, count):
    """`count` int32 graph nodes: columns `start`... of `draws`."""
    from nvidia.dali import fn, types

    return [fn.cast(draws[start + i], dtype=types.INT32) for i in range(count)]


def _call(augmentations, op, image_size, masks=False, **kwargs):
    """`augmentations[op]` of each sample (`op` a graph node), as DALI's recipes call
    them: the image size for relative translations, uncovered pixels `FILL_VALUE`.
    With `masks`, the data are masks (int32 HWC, ids plus one): the suite's geometric
    operations with nearest-neighbour sampling, uncovered pixels 0, the others the
    identity (`recipe_geometry.mask_suite`)."""
    from nvidia.dali import types
    from nvidia.dali.auto_aug.core import select

    if masks:
        augmentations, table = recipe_geometry.mask_suite(augmentations)
        if len(augmentations) == 1:  # the identity only
            return kwargs["data"]
        op = types.Constant(np.asarray(table, np.int32), device="cpu")[op]
        kwargs.update(fill_value=0, interp_type=types.INTERP_NN)
    else:
        kwargs.update(fill_value=FILL_VALUE, interp_type=None)
    with _quiet():
        return select(augmentations, op, shape=list(image_size), **kwargs)


class _Recipe:
    """What the recipes share: their part of the graph's `"random"` input
    (`dalipipe.feed`), drawn per position with the recipe's `rows`."""

    def draw(self, seed, epoch, positions, *, batch_size, image_size):
        """float32 `(len(positions), columns)`: the recipe's `rows` for the positions
        of epoch `epoch`'s order (`sampling.per_position`, stream 2; `batch_size` and
        `image_size` do not change them)."""
        return sampling.per_position(seed, epoch, 2, positions, self.rows)

    def check_alignable(self):
        """Raises `recipe_geometry.UnalignedOperationError` (a ValueError) naming
        an operation of the recipe whose effect on masks and boxes is unknown."""
        for aug in self.augmentations():
            recipe_geometry.kind_of(aug)

    def apply_to_masks(self, draws, masks, image_size, fill_value):
        """`masks` (uint8 or int32 `(height, width, 1)` class ids, a graph node) moved
        as `apply` moves their images with the same `draws`: the geometric operations
        with nearest-neighbour sampling, `fill_value` where they uncover pixels; the
        others leave the masks as they are. Returns int32 `(height, width, 1)` holding
        the source ids and `fill_value` only.

        The operations fill with 0 the masks' ids plus one (int32, which DALI's warps
        take on both devices), and 0 becomes `fill_value`: exact for any int32."""
        from nvidia.dali import fn, types

        shifted = fn.cast(masks, dtype=types.INT32) + 1
        moved = self.apply(draws, shifted, image_size, masks=True)
        kept = fn.cast(moved > 0, dtype=types.INT32)
        return (moved - 1) * kept + int(fill_value) * (1 - kept)

    def affines(self, rows, image_size):
        """float64 `(len(rows), 3, 3)`: per sample of the recipe's `rows` (its
        columns of `"random"`), the map of output pixels that its geometric
        operations apply, in order (`recipe_geometry.affine`; the identity where it
        runs none). Coordinates as `recipe_geometry` states them.

        Rows that run the same steps (`step_keys`) share one map: the maps are made
        for one row of each kind, so an epoch's rows cost NumPy, not Python per row."""
        rows = np.asarray(rows)
        if not len(rows):
            return np.zeros((0, 3, 3))
        first, inverse = distinct_rows(self.step_keys(rows))
        kinds = np.tile(np.eye(3), (len(first), 1, 1))
        for i, steps in enumerate(self.steps(rows[first])):
            for aug, magnitude_bin, sign in steps:
                kinds[i] = recipe_geometry.affine(aug, magnitude_bin, sign,
                                                  self.num_magnitude_bins, image_size) @ kinds[i]
        return kinds[inverse]

    def step_keys(self, rows):
        """float32 `(len(rows), k)`: rows with equal keys run the same `steps`. The
        rows themselves, whose columns are whole numbers; a recipe with other columns
        gives its own."""
        return np.asarray(rows, np.float32)


@dataclasses.dataclass(frozen=True)
class RandAugment(_Recipe):
    """RandAugment (Cubuk et al., 2020): `num_ops` operations per image, each drawn
    among 14 (translations, shears, rotation, brightness, contrast, colour,
    sharpness, posterize, solarize, equalize, auto-contrast, identity), all at
    `magnitude` of `num_magnitude_bins`, with a random sign where the operation has
    one. torchvision's `v2.RandAugment` defaults; DALI's `auto_aug.rand_augment`
    suite (monotonic magnitudes).

    Columns of `"random"` per sample: `(op, sign)` for each of `num_ops`.
    """

    num_ops: int = 2
    magnitude: int = 9
    num_magnitude_bins: int = 31
    name: ClassVar[str] = "randaugment"

    def __post_init__(self):
        _whole("num_ops", self.num_ops, 0)
        _whole("num_magnitude_bins", self.num_magnitude_bins, 1)
        _whole("magnitude", self.magnitude, 0, self.num_magnitude_bins - 1)

    @staticmethod
    def augmentations():
        from nvidia.dali.auto_aug import rand_augment

        return _suite(rand_augment.get_rand_augment_suite, use_shape=True,
                      max_translate_rel=TRANSLATE_FRACTION)

    @property
    def columns(self):
        return 2 * self.num_ops

    def rows(self, rng, count):
        """float32 `(count, columns)`: per sample, each op's index and sign (0 or 1)."""
        return _choices(rng.random((count, self.columns)),
                        [len(self.augmentations()), 2] * self.num_ops)

    def steps(self, rows):
        """Per sample of `rows` (its `columns` of `"random"`), the operations its
        draws run, in order: a list of `(augmentation, magnitude bin, sign)`."""
        suite = self.augmentations()
        return [[(suite[int(op)], self.magnitude, int(sign))
                 for op, sign in zip(row[0::2], row[1::2])] for row in rows]

    def apply(self, draws, images, image_size, masks=False):
        """`images` (uint8 HWC graph node) with the recipe applied per sample (with
        `masks`, masks as `apply_to_masks` gives them)."""
        from nvidia.dali.auto_aug.core import signed_bin

        augmentations = self.augmentations()
        chosen = _columns(draws, 0, self.columns)
        for op, sign in zip(chosen[0::2], chosen[1::2]):
            images = _call(augmentations, op, image_size, masks, data=images,
                           magnitude_bin=signed_bin(self.magnitude, random_sign=sign),
                           num_magnitude_bins=self.num_magnitude_bins)
        return images


@dataclasses.dataclass(frozen=True)
class TrivialAugmentWide(_Recipe):
    """TrivialAugment (Müller and Hutter, 2021), wide ranges: one operation per
    image among 14, at a magnitude drawn uniformly among `num_magnitude_bins`, with
    a random sign where the operation has one. torchvision's `v2.TrivialAugmentWide`
    defaults; DALI's `auto_aug.trivial_augment` suite.

    Columns of `"random"` per sample: `(op, magnitude bin, sign)`.
    """

    num_magnitude_bins: int = 31
    name: ClassVar[str] = "trivialaugment"
    columns: ClassVar[int] = 3

    def __post_init__(self):
        _whole("num_magnitude_bins", self.num_magnitude_bins, 1)

    @staticmethod
    def augmentations():
        from nvidia.dali.auto_aug import trivial_augment

        return _suite(trivial_augment.get_trivial_augment_wide_suite, use_shape=False,
                      max_translate_abs=TRANSLATE_PIXELS)

    def rows(self, rng, count):
        """float32 `(count, 3)`: per sample, the op's index, its magnitude bin and sign."""
        return _choices(rng.random((count, 3)),
                        [len(self.augmentations()), self.num_magnitude_bins, 2])

    def steps(self, rows):
        """Per sample of `rows` (its 3 columns of `"random"`), the operation its draws
        run: a list of one `(augmentation, magnitude bin, sign)`."""
        suite = self.augmentations()
        return [[(suite[int(op)], int(magnitude), int(sign))] for op, magnitude, sign in rows]

    def apply(self, draws, images, image_size, masks=False):
        """`images` (uint8 HWC graph node) with the recipe applied per sample (with
        `masks`, masks as `apply_to_masks` gives them)."""
        from nvidia.dali.auto_aug.core import signed_bin

        op, magnitude, sign = _columns(draws, 0, 3)
        return _call(self.augmentations(), op, image_size, masks, data=images,
                     magnitude_bin=signed_bin(magnitude, random_sign=sign),
                     num_magnitude_bins=self.num_magnitude_bins)


@dataclasses.dataclass(frozen=True)
class AutoAugment(_Recipe):
    """AutoAugment (Cubuk et al., 2019): per image, one sub-policy drawn among the
    policy's (25 for "imagenet"), whose one or two operations each run with their
    own probability and magnitude, with a random sign where the operation has one.
    `policy` is one of `AUTOAUGMENT_POLICIES` (torchvision's `AutoAugmentPolicy`
    names in lower case, plus DALI's "reduced_imagenet"); DALI's `auto_aug`
    policies.

    Columns of `"random"` per sample: the sub-policy, then per stage a uniform number
    in [0, 1) (the stage runs if it is below the stage's probability) and a sign.
    """

    policy: str = "imagenet"
    name: ClassVar[str] = "autoaugment"

    def __post_init__(self):
        if self.policy not in AUTOAUGMENT_POLICIES:
            raise ValueError(f"`policy` must be one of {tuple(AUTOAUGMENT_POLICIES)}. "
                             f"Received: policy={self.policy!r}")

    def dali_policy(self):
        from nvidia.dali.auto_aug import auto_augment

        name = AUTOAUGMENT_POLICIES[self.policy]
        kwargs = {} if name == "reduced_image_net" else dict(
            use_shape=True, max_translate_rel=TRANSLATE_FRACTION)
        return _suite(getattr(auto_augment, f"get_{name}_policy"), **kwargs)

    @property
    def stages(self):
        return max(len(sub_policy) for sub_policy in self.dali_policy().sub_policies)

    @property
    def columns(self):
        return 1 + 2 * self.stages

    @property
    def num_magnitude_bins(self):
        return self.dali_policy().num_magnitude_bins

    def augmentations(self):
        """The policy's operations, each once."""
        return list(self.dali_policy().augmentations.values())

    def rows(self, rng, count):
        """float32 `(count, columns)`: per sample, the sub-policy's index, then a
        uniform number per stage, then a sign per stage."""
        stages = self.stages
        return _choices(rng.random((count, self.columns)),
                        [len(self.dali_policy().sub_policies)] + [None] * stages + [2] * stages)

    def step_keys(self, rows):
        """The sub-policy, whether each stage runs (as `steps` decides it) and the
        signs: the uniform numbers matter only through their stage's probability."""
        policy, stages = self.dali_policy(), self.stages
        probabilities = np.zeros((len(policy.sub_policies), stages), np.float32)
        for i, sub_policy in enumerate(policy.sub_policies):
            probabilities[i, :len(sub_policy)] = [p for _, p, _ in sub_policy]
        rows = np.asarray(rows, np.float32)
        runs = rows[:, 1:1 + stages] < probabilities[rows[:, 0].astype(np.int64)]
        return np.concatenate([rows[:, :1], runs.astype(np.float32), rows[:, 1 + stages:]], 1)

    def steps(self, rows):
        """Per sample of `rows` (its `columns` of `"random"`), the operations its draws
        run, in order: a list of `(augmentation, magnitude bin, sign)`, a stage where
        its uniform number is below the stage's probability (both float32, as the
        graph compares them)."""
        policy, stages = self.dali_policy(), self.stages
        found = []
        for row in rows:
            sub_policy = policy.sub_policies[int(row[0])]
            found.append([(aug, magnitude_bin, int(row[1 + stages + stage]))
                          for stage, (aug, probability, magnitude_bin) in enumerate(sub_policy)
                          if np.float32(row[1 + stage]) < np.float32(probability)])
        return found

    def apply(self, draws, images, image_size, masks=False):
        """`images` (uint8 HWC graph node) with the policy applied per sample, as
        DALI's `auto_aug.auto_augment.apply_auto_augment` does, from `draws` (with
        `masks`, masks as `apply_to_masks` gives them)."""
        from nvidia.dali import fn, types
        from nvidia.dali.auto_aug.core import signed_bin

        policy, stages = self.dali_policy(), self.stages
        sub_policy = _columns(draws, 0, 1)[0]
        signs = fn.cast(draws[1 + stages:1 + 2 * stages], dtype=types.INT32)
        probabilities, bins, ids, augmentations = dali_hooks.auto_augment_tables(policy)
        probabilities, bins, ids = (probabilities[sub_policy], bins[sub_policy],
                                    ids[sub_policy])
        if any(aug.randomly_negate for aug in policy.augmentations.values()):
            bins = signed_bin(bins, random_sign=signs)
        for stage in range(stages):
            if draws[1 + stage] < probabilities[stage]:
                images = _call(augmentations[stage], ids[stage], image_size, masks, data=images,
                               magnitude_bin=bins[stage],
                               num_magnitude_bins=policy.num_magnitude_bins)
        return images


RECIPE_TYPES = (RandAugment, TrivialAugmentWide, AutoAugment)


def parse_augment(augment):
    """`augment` as the graph reads it: False, True (crop and flip), or a recipe
    object (crop, flip and the recipe); a recipe's name gives it with its defaults.

    Raises:
        ValueError: for anything else, listing what is accepted.
    """
    if isinstance(augment, bool) or isinstance(augment, RECIPE_TYPES):
        return augment
    if isinstance(augment, str) and augment.lower() in RECIPES:
        return RECIPE_TYPES[RECIPES.index(augment.lower())]()
    raise ValueError(
        "`augment` must be True (a random-resized crop and a flip), False, a recipe's name "
        f"{RECIPES}, or a recipe with its parameters: dalipipe.RandAugment(num_ops=2, "
        "magnitude=9, num_magnitude_bins=31), dalipipe.TrivialAugmentWide("
        "num_magnitude_bins=31) or dalipipe.AutoAugment(policy='imagenet'). "
        f"Received: augment={augment!r}"
    )
