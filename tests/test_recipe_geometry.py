"""The recipes' geometry (`dalipipe.recipe_geometry`): each sample's map from
`affines` against what the graph's operations do to a mask of pixel indices, on
the CPU, for the three recipes' draws; unknown operations refused."""

import numpy as np
import pytest

import dalipipe
from dalipipe import recipe_geometry

pytest.importorskip("nvidia.dali")

SIZE = (24, 32)  # height, width
COUNT = 48  # samples per recipe
RECIPES = [dalipipe.RandAugment(num_ops=2, magnitude=12), dalipipe.TrivialAugmentWide(),
           dalipipe.AutoAugment()]


def moved_indices(recipe, rows):
    """The graph's masks path (`apply_to_masks`) on masks whose ids are the pixels'
    indices plus one (fill 0): int64 `(COUNT, height, width)`."""
    from nvidia.dali import fn, pipeline_def, types

    height, width = SIZE
    ids = (np.arange(height * width).reshape(height, width, 1) + 1).astype(np.int32)

    @pipeline_def(batch_size=len(rows), num_threads=1, device_id=None,
                  enable_conditionals=True)
    def moved():
        draws = fn.external_source(source=lambda: [r for r in rows], batch=True,
                                   dtype=types.FLOAT)
        masks = fn.external_source(source=lambda: [ids] * len(rows), batch=True,
                                   layout="HWC")
        return recipe.apply_to_masks(draws, masks, SIZE, 0)

    pipe = moved()
    pipe.build()
    (out,) = pipe.run()
    return np.stack([np.asarray(t)[..., 0] for t in out]).astype(np.int64)


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: f"{r.name}")
def test_each_sample_s_map_is_what_the_graph_does(recipe):
    height, width = SIZE
    rows = recipe.rows(np.random.default_rng(5), COUNT)
    out = moved_indices(recipe, rows)
    affines = recipe.affines(rows, SIZE)
    ys, xs = np.mgrid[0:height, 0:width]
    centers = np.stack([xs.ravel() + 0.5, ys.ravel() + 0.5, np.ones(xs.size)])
    geometric = 0
    for moved, affine, steps in zip(out, affines, recipe.steps(rows)):
        count = sum(recipe_geometry.is_geometric(aug) for aug, _, _ in steps)
        if np.allclose(affine, np.eye(3)):
            assert (moved.ravel() == np.arange(1, xs.size + 1)).all()  # unchanged
            continue
        geometric += 1
        source = np.linalg.solve(affine, centers)[:2]  # where each output pixel comes from
        inside = (source[0] >= 0) & (source[0] < width) & (source[1] >= 0) & (source[1] < height)
        found = moved.ravel()
        # Each sampled pixel is the nearest to the map's point (within a pixel after
        # two nearest-neighbour steps); what maps outside the image is uncovered,
        # and with one step, what maps inside is not.
        kept = found > 0
        index = found[kept] - 1
        distance = np.abs(np.stack([index % width + 0.5, index // width + 0.5])
                          - source[:, kept]).max(0)
        assert distance.max(initial=0) <= (0.5 + 1e-3 if count == 1 else 1.5), steps
        margin = 1e-3 if count == 1 else 1.0
        assert not kept[~inside & ~_near(source, margin)].any()
        if count == 1:
            far_inside = ((source[0] >= margin) & (source[0] <= width - margin)
                          & (source[1] >= margin) & (source[1] <= height - margin))
            assert kept[far_inside].all()
    assert geometric >= COUNT // 5


def _near(source, margin):
    """Points within `margin` of the image's edges, outside it."""
    height, width = SIZE
    return ((source[0] > -margin) & (source[0] < width + margin)
            & (source[1] > -margin) & (source[1] < height + margin))


def test_colour_operations_are_the_identity_and_unknown_ones_refused():
    from nvidia.dali.auto_aug import augmentations as a
    from nvidia.dali.auto_aug.core import augmentation

    suite = dalipipe.RandAugment.augmentations()
    operations, table = recipe_geometry.mask_suite(suite)
    assert operations == suite[:5] + [a.identity]
    assert [aug.name for aug in operations[:5]] == ["translate_x", "translate_y", "shear_x",
                                                   "shear_y", "rotate"]
    assert table == [0, 1, 2, 3, 4] + [5] * 9
    np.testing.assert_array_equal(recipe_geometry.affine(a.brightness, 3, 1, 10, SIZE),
                                  np.eye(3))

    @augmentation(mag_range=(0, 1))
    def zoom(data, scale):
        return data

    with pytest.raises(ValueError, match=r"operation 'zoom' is not one whose effect on masks"):
        recipe_geometry.affine(zoom, 1, 0, 10, SIZE)
