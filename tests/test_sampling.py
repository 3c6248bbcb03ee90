"""`dalipipe.sampling`: each epoch's order, its random numbers and the crop windows they
give. Pure NumPy."""

import math

import numpy as np
import pytest

from dalipipe import sampling


def test_epoch_order_is_a_permutation_new_each_epoch_and_fixed_by_seed_and_epoch():
    orders = [sampling.epoch_order(5, epoch, 29) for epoch in range(3)]
    for order in orders:
        assert order.dtype == np.int64 and order.shape == (29,)
        assert sorted(order.tolist()) == list(range(29))
    assert len({tuple(order) for order in orders}) == 3
    np.testing.assert_array_equal(sampling.epoch_order(5, 1, 29), orders[1])
    assert not np.array_equal(sampling.epoch_order(6, 0, 29), orders[0])


def test_epoch_order_without_shuffle_is_the_index_order():
    order = sampling.epoch_order(5, 3, 7, shuffle=False)
    assert order.dtype == np.int64 and order.tolist() == list(range(7))
    assert sampling.epoch_order(5, 0, 0).shape == (0,)


def test_epoch_random_rows_are_uniform_and_fixed_by_seed_and_epoch():
    positions = np.arange(2000)
    random = sampling.epoch_random(3, 0, positions)
    assert random.dtype == np.float32 and random.shape == (2000, sampling.NUM_RANDOM) == (2000, 5)
    assert random.min() >= 0 and random.max() < 1
    np.testing.assert_allclose(random.mean(0), 0.5, atol=0.03)
    np.testing.assert_array_equal(random, sampling.epoch_random(3, 0, positions))
    assert not np.allclose(random, sampling.epoch_random(3, 1, positions))
    assert not np.allclose(random, sampling.epoch_random(4, 0, positions))
    # Order and numbers come from separate streams of the same seed and epoch.
    order = sampling.epoch_order(3, 0, 2000)
    assert not np.array_equal(np.argsort(random[:, 0]), order)


def test_a_position_s_row_does_not_depend_on_the_other_positions_asked_for():
    whole = sampling.epoch_random(3, 0, np.arange(100))
    np.testing.assert_array_equal(sampling.epoch_random(3, 0, np.arange(10)), whole[:10])
    shard = np.array([40, 41, 7, 99, 40])
    np.testing.assert_array_equal(sampling.epoch_random(3, 0, shard), whole[shard])
    assert sampling.epoch_random(3, 0, np.arange(0)).shape == (0, sampling.NUM_RANDOM)


def test_streams_of_per_position_draws_are_apart():
    def draw(rng, count):
        return rng.random((count, sampling.NUM_RANDOM), np.float32)

    positions = np.arange(50)
    crops = sampling.per_position(3, 0, 1, positions, draw)
    np.testing.assert_array_equal(crops, sampling.epoch_random(3, 0, positions))
    assert not np.allclose(crops, sampling.per_position(3, 0, 2, positions, draw))


@pytest.mark.parametrize("random, window", [
    # Full area, square aspect (log-uniform midpoint): the whole square image.
    ((1.0, 0.5, 0.0, 0.0), (0.0, 0.0, 100.0, 100.0)),
    # The smallest area at aspect 1, at the far corner.
    ((0.0, 0.5, 1.0, 1.0), (100 - math.sqrt(800), 100 - math.sqrt(800),
                            math.sqrt(800), math.sqrt(800))),
    # Full area at the widest aspect: clipped to the image's width.
    ((1.0, 1.0, 0.5, 0.5), (0.0, (100 - math.sqrt(1e4 * 3 / 4)) / 2, 100.0,
                            math.sqrt(1e4 * 3 / 4))),
])
def test_random_resized_crop_window_of_known_numbers(random, window):
    got = sampling.random_resized_crop_window(np.float32(100), np.float32(100),
                                              np.array(random, np.float32))
    np.testing.assert_allclose(got, window, rtol=1e-5, atol=1e-4)


def test_random_resized_crop_windows_stay_inside_the_image_with_inception_s_ranges():
    height, width = np.float32(48), np.float32(80)
    random = sampling.epoch_random(0, 0, np.arange(5000)).T
    x, y, crop_w, crop_h = sampling.random_resized_crop_window(height, width, random)
    assert (x >= 0).all() and (y >= 0).all() and (crop_w >= 1).all() and (crop_h >= 1).all()
    assert (x + crop_w <= width + 1e-3).all() and (y + crop_h <= height + 1e-3).all()
    area = crop_w * crop_h / (height * width)
    assert area.min() >= sampling.RANDOM_AREA[0] * 0.99 and area.max() <= 1 + 1e-5
    unclipped = (crop_w < width) & (crop_h < height)
    aspect = (crop_w / crop_h)[unclipped]
    low, high = sampling.RANDOM_ASPECT_RATIO
    assert aspect.min() >= low * 0.999 and aspect.max() <= high * 1.001
    # Log-uniform: in a square image, as many windows wider than square as taller.
    crop_w, crop_h = sampling.random_resized_crop_window(height, height, random)[2:]
    assert abs(np.mean(crop_w > crop_h) - 0.5) < 0.03
    # Not rounded: positions and sizes are fractional.
    assert np.mean(x != np.round(x)) > 0.9 and np.mean(crop_w != np.round(crop_w)) > 0.9


def test_random_resized_crop_window_of_a_tiny_image_is_at_least_one_pixel():
    x, y, crop_w, crop_h = sampling.random_resized_crop_window(
        np.float32(1), np.float32(2), np.zeros(4, np.float32))
    assert (crop_w, crop_h) == (1.0, 1.0) and (x, y) == (0.0, 0.0)
