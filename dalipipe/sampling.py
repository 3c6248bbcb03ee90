"""What is random in an epoch, written once: the order of the samples and the crops.

Both depend on `seed`, the epoch number and the sample's position only, so the
native runner (`ImagePipeline.epoch`, which `dalipipe.py_dataset` runs), the
TensorFlow inputs (`dalipipe.tf_dataset`) and the benchmarks draw the same order and
the same crops for the same seed; the recipes' and the mixing's draws follow the
same rule (`per_position`). The crop and the flip are the `"crop"` part of the
graph's `"random"` input (`CROP`, in the shape `dalipipe.feed` describes). NumPy
only on import; `random_resized_crop_window` also runs on DALI's graph arithmetic
(`dali_ops`).
"""

import math
import types

import numpy as np

# Random-resized crop, as in Inception and torchvision: area fraction and aspect ratio.
RANDOM_AREA = (0.08, 1.0)
RANDOM_ASPECT_RATIO = (3 / 4, 4 / 3)
# Uniform numbers per sample: area, log aspect ratio, x, y, flip.
NUM_RANDOM = 5

NUMPY_OPS = types.SimpleNamespace(min=np.minimum, max=np.maximum, sqrt=np.sqrt, exp=np.exp)


def epoch_order(seed, epoch, num_samples, *, shuffle=True):
    """The order in which epoch `epoch` visits the samples.

    Returns:
        int64 array `(num_samples,)`: a permutation of `range(num_samples)`, new for
        each epoch (`shuffle=True`), else `range(num_samples)` itself.
    """
    if not shuffle:
        return np.arange(num_samples, dtype=np.int64)
    return np.random.default_rng([seed, epoch, 0]).permutation(num_samples).astype(np.int64)


def epoch_random(seed, epoch, positions):
    """The uniform numbers that drive epoch `epoch`'s crops and flips.

    Args:
        positions: int64 `(n,)`, the positions in the epoch's order of the samples
            loaded, in loading order (`ImagePipeline.positions`).

    Returns:
        float32 array `(n, NUM_RANDOM)` in [0, 1): one row per loaded sample, which
        depends on its position only, so that the shards of a distributed dataset
        crop differently and the rest of an epoch crops as the whole epoch does;
        column 4 below 0.5 flips the image.
    """
    return per_position(seed, epoch, 1, positions,
                        lambda rng, count: rng.random((count, NUM_RANDOM), np.float32))


def per_position(seed, epoch, stream, positions, draw):
    """Rows of random draws, one per position of an epoch's order.

    Args:
        seed, epoch: the dataset's seed and the epoch's number.
        stream: a number that keeps this kind of draw apart from the others (1:
            crops, 2: augmentation recipes, 3: batch mixing).
        positions: int64 `(n,)`, the positions whose rows are returned.
        draw: `draw(rng, count)`, an array of `count` rows drawn from the NumPy
            generator `rng`.

    Returns:
        The rows of `draw(rng, max(positions) + 1)` at `positions`: row `i` is the
        same for position `i` whichever positions are asked for.
    """
    positions = np.asarray(positions, np.int64)
    count = int(positions.max()) + 1 if len(positions) else 0
    return draw(np.random.default_rng([seed, epoch, stream]), count)[positions]


def random_resized_crop_window(height, width, random, ops=NUMPY_OPS):
    """The window of a random-resized crop, in pixels, from one row of `epoch_random`.

    The area is a fraction of the image's, uniform in `RANDOM_AREA`; the aspect ratio
    (width / height) is log-uniform in `RANDOM_ASPECT_RATIO`; the position is
    uniform. A window larger than the image is clipped to it. Nothing is rounded.

    Args:
        height, width: the image's size (NumPy values, or DALI graph nodes).
        random: the row's numbers; `random[0]` to `random[3]` are used.
        ops: `min`, `max`, `sqrt` and `exp` for the values given: NumPy's by
            default, `nvidia.dali.math` in a DALI graph.

    Returns:
        `(x, y, crop_width, crop_height)`, floats of the kind given.
    """
    area = height * width * (RANDOM_AREA[0] + random[0] * (RANDOM_AREA[1] - RANDOM_AREA[0]))
    log_lo, log_hi = math.log(RANDOM_ASPECT_RATIO[0]), math.log(RANDOM_ASPECT_RATIO[1])
    ratio = ops.exp(log_lo + random[1] * (log_hi - log_lo))
    crop_width = ops.max(ops.min(ops.sqrt(area * ratio), width), 1.0)
    crop_height = ops.max(ops.min(ops.sqrt(area / ratio), height), 1.0)
    x = random[2] * (width - crop_width)
    y = random[3] * (height - crop_height)
    return x, y, crop_width, crop_height


def dali_ops():
    """DALI's min, max, sqrt and exp, for `random_resized_crop_window` in a graph."""
    import nvidia.dali.math as dmath

    return types.SimpleNamespace(min=dmath.min, max=dmath.max, sqrt=dmath.sqrt, exp=dmath.exp)


class RandomResizedCrop:
    """The random-resized crop and the flip, as a part of the graph's `"random"`
    input (`dalipipe.feed`): `NUM_RANDOM` uniform numbers per sample."""

    columns = NUM_RANDOM

    def draw(self, seed, epoch, positions, *, batch_size, image_size):
        """float32 `(len(positions), NUM_RANDOM)`: `epoch_random` (one row per
        position; `batch_size` and `image_size` do not change it)."""
        return epoch_random(seed, epoch, positions)

    def apply(self, draws, height, width):
        """The crop's window and the flip of each sample (DALI graph code).

        Args:
            draws: the crop's columns of `"random"` (a graph node).
            height, width: the image's size (float graph nodes).

        Returns:
            `(window, mirror)`: `(x, y, crop_width, crop_height)` in pixels,
            unrounded (`random_resized_crop_window`), and int32, 1 to flip the image
            horizontally (column 4 below 0.5).
        """
        from nvidia.dali import fn, types as dali_types

        window = random_resized_crop_window(height, width, draws, ops=dali_ops())
        return window, fn.cast(draws[4] < 0.5, dtype=dali_types.INT32)


CROP = RandomResizedCrop()
