"""Batch mixing: MixUp and CutMix, in the DALI graph, with Keras's parameters.

Each sample is mixed with a partner from the same batch (a permutation of the
batch, as Keras's `keras.layers.MixUp` and `CutMix` draw it), and its labels become
the same mixture of the two samples' labels. The draws are made in NumPy, per batch
(`draw`), and travel in the graph's `"random"` input (its `"mix"` part, in the shape
`dalipipe.feed` describes: `columns`, `draw`, `apply`): the partner's index in the
batch, the weight of the sample's own image and labels, and for CutMix the pasted
box. They depend on the seed, the epoch and the batch's first position in the
epoch, so shards differ and an epoch resumed mid-way mixes as the whole epoch does.

MixUp: per sample, weight `w ~ Beta(alpha, alpha)`; image `w * x + (1 - w) * x_p`.
CutMix: per batch, `a ~ U(factor range) + 1e-6`; per sample `w ~ Beta(a, a)`, a box
of `sqrt(1 - w)` of the height and width at a uniform position, whose pixels come
from the partner. The labels' weight is the share of pixels left (Keras uses the
box's unrounded area; here it is the whole pixels pasted).
"""

import dataclasses
import math
from typing import Any, ClassVar

import numpy as np

from dalipipe.utils import is_number

MIXES = ("mixup", "cutmix")
# Columns of "random" per sample: partner index, own weight, box top, left, height,
# width (in pixels; zeros for MixUp).
COLUMNS = 6
# Added to CutMix's Beta parameter, as Keras does, so that it is never 0.
_EPSILON = 1e-6


class _Mixing:
    """What `MixUp` and `CutMix` share: their part of the graph's `"random"` input
    (`dalipipe.feed`), drawn per batch, and their step in the graph."""

    columns: ClassVar[int] = COLUMNS

    def draw(self, seed, epoch, positions, *, batch_size, image_size):
        """The mixing columns of one pipeline's epoch.

        Args:
            seed, epoch: the dataset's seed and the epoch's number.
            positions: int64 `(n,)`, the positions in the epoch's order that the
                pipeline loads, in loading order; every `batch_size` of them (the last
                may be fewer) are one batch.
            batch_size: samples per batch of this pipeline.
            image_size: `(height, width)` of the output images.

        Returns:
            float32 `(n, COLUMNS)`: per sample, the partner's index in its batch (a
            permutation of each batch), the weight of the sample's own image and
            labels, and the pasted box (top, left, height, width; whole pixels; zeros
            for MixUp).
        """
        height, width = image_size
        out = np.zeros((len(positions), COLUMNS), np.float32)
        for start in range(0, len(positions), batch_size):
            rows = out[start:start + batch_size]
            count = len(rows)
            rng = np.random.default_rng([seed, epoch, 3, int(positions[start])])
            rows[:, 0] = rng.permutation(count)
            weights = self.weights(rng, count)
            if isinstance(self, CutMix):
                ratio = np.sqrt(1.0 - weights)
                top, box_h = _box(rng, count, height, ratio)
                left, box_w = _box(rng, count, width, ratio)
                rows[:, 2:] = np.stack([top, left, box_h, box_w], axis=1)
                weights = 1.0 - box_h * box_w / (height * width)
            rows[:, 1] = weights
        return out

    def apply(self, draws, images, labels, *, device):
        """The mixed `(images, labels)` of each batch.

        Args:
            draws: the mixing's `COLUMNS` columns of `"random"` (a graph node, on the
                CPU), as `draw` gives them.
            images: float32 graph node, normalized images (layout "HWC" or "CHW").
            labels: float32 graph node, the batch's labels (on the CPU).
            device: "cpu" or "gpu", where `images` are.
        """
        from nvidia.dali import fn, types

        partner = fn.cast(draws[0], dtype=types.INT32)
        weight = draws[1]
        other = fn.permute_batch(images, indices=partner)
        other_labels = fn.permute_batch(labels, indices=partner)
        labels = weight * labels + (1.0 - weight) * other_labels
        if isinstance(self, MixUp):
            image_weight = weight.gpu() if device == "gpu" else weight
            return image_weight * images + (1.0 - image_weight) * other, labels
        ones = images * 0.0 + 1.0
        outside = fn.erase(ones, anchor=fn.stack(draws[2], draws[3]),
                           shape=fn.stack(draws[4], draws[5]), axis_names="HW", fill_value=0.0)
        return images + (other - images) * (1.0 - outside), labels


@dataclasses.dataclass(frozen=True)
class MixUp(_Mixing):
    """MixUp (Zhang et al., 2018), as `keras.layers.MixUp(alpha)`: each image is
    blended with a partner's, with the weight `Beta(alpha, alpha)`."""

    alpha: float = 0.2
    name: ClassVar[str] = "mixup"

    def __post_init__(self):
        if not is_number(self.alpha) or not math.isfinite(self.alpha) or self.alpha <= 0:
            raise ValueError(f"`alpha` must be a positive number. Received: alpha={self.alpha!r}")

    def weights(self, rng, count):
        return rng.beta(self.alpha, self.alpha, count)


@dataclasses.dataclass(frozen=True)
class CutMix(_Mixing):
    """CutMix (Yun et al., 2019), as `keras.layers.CutMix(factor)`: a box of each
    image is replaced by the same box of a partner's. `factor` is a number in
    [0, 1] (the Beta parameter is drawn in [0, factor] per batch) or a pair
    `(low, high)` of them."""

    factor: Any = 1.0
    name: ClassVar[str] = "cutmix"

    def __post_init__(self):
        factor = self.factor
        pair = factor if isinstance(factor, (tuple, list)) else (0.0, factor)
        if len(pair) != 2 or not all(is_number(v) and 0 <= v <= 1 for v in pair):
            raise ValueError(
                "`factor` must be a number in [0, 1] or a pair of them (low, high). "
                f"Received: factor={factor!r}"
            )
        if isinstance(factor, list):
            object.__setattr__(self, "factor", tuple(factor))

    @property
    def bounds(self):
        factor = self.factor
        return tuple(sorted(factor)) if isinstance(factor, tuple) else (0.0, float(factor))

    def weights(self, rng, count):
        low, high = self.bounds
        a = rng.uniform(low, high) + _EPSILON
        return rng.beta(a, a, count)


MIX_TYPES = (MixUp, CutMix)


def parse_mix(mix):
    """`mix` as the graph reads it: None, or a `MixUp` or `CutMix` (a name gives it
    with Keras's defaults).

    Raises:
        ValueError: for anything else, listing what is accepted.
    """
    if mix is None or isinstance(mix, MIX_TYPES):
        return mix
    if isinstance(mix, str) and mix.lower() in MIXES:
        return MIX_TYPES[MIXES.index(mix.lower())]()
    raise ValueError(
        f"`mix` must be None, one of {MIXES}, dalipipe.MixUp(alpha=0.2) or "
        f"dalipipe.CutMix(factor=1.0). Received: mix={mix!r}"
    )


def _box(rng, count, length, ratio):
    """`(start, size)` in whole pixels of a CutMix box side: the pixels `i` with
    `start <= i < start + size`, where the unrounded side `ratio * length` starts
    uniformly in `[0, length - side)`, as Keras's CutMix places it."""
    side = ratio * length
    start = rng.random(count) * (length - side)
    first, end = np.ceil(start), np.minimum(np.ceil(start + side), length)
    return first, end - first
