"""Augmentation recipes (`dalipipe.recipes`): RandAugment, TrivialAugmentWide and
AutoAugment in the DALI graph on the CPU, their draws, and their errors."""

import numpy as np
import pytest

import dalipipe
from dalipipe import recipes, sampling
from dalipipe.utils import distinct_rows
from helpers import NUM_TAGGED, tag_of

SIZE = 32
RECIPES = [dalipipe.RandAugment(), dalipipe.TrivialAugmentWide(), dalipipe.AutoAugment()]


def pipeline(source, augment, **options):
    options = dict(dict(device="cpu", seed=3, batch_size=16, image_size=SIZE,
                        verbose=False), **options)
    return dalipipe.make_dali_pipeline(source, augment=augment, **options)


def epoch(pipe, number=0):
    batches = list(pipe.epoch(number))
    return [np.concatenate(parts) for parts in zip(*batches)]


@pytest.fixture(scope="module")
def plain(color_dir):
    """`augment=True`'s first two epochs (images, labels) of `color_dir`."""
    pipe = pipeline(color_dir, True)
    return [epoch(pipe, 0), epoch(pipe, 1)]


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
def test_a_recipe_changes_the_crop_anew_every_epoch(recipe, color_dir, plain):
    pipe = pipeline(color_dir, recipe)
    (images, labels), (next_images, _) = epoch(pipe, 0), epoch(pipe, 1)
    crops, crop_labels = plain[0]
    assert images.shape == crops.shape == (90, SIZE, SIZE, 3) and images.dtype == np.float32
    assert pipe.output_dtypes == pipeline(color_dir, True).output_dtypes
    # Values stay those of uint8 pixels before normalization.
    assert images.min() >= 0 and images.max() <= 255
    np.testing.assert_array_equal(images, np.round(images))
    # Same order and labels as the plain crop of the same seed; other pixels.
    np.testing.assert_array_equal(labels, crop_labels)
    changed = np.abs(images - crops).reshape(90, -1).max(1) > 0
    assert changed.mean() > 0.5, changed.mean()
    assert not np.array_equal(images, next_images)
    # The same seed gives the same batches; another seed others.
    again, _ = epoch(pipeline(color_dir, recipe), 0)
    np.testing.assert_array_equal(images, again)
    other, _ = epoch(pipeline(color_dir, recipe, seed=4), 0)
    assert not np.array_equal(images, other)


def test_a_recipe_s_name_gives_its_defaults(color_dir):
    for name, recipe in zip(recipes.RECIPES, RECIPES):
        assert pipeline(color_dir, name).options.augment == recipe
    assert pipeline(color_dir, "RandAugment").options.augment == dalipipe.RandAugment()


def magnitude_free(recipe):
    """Indices of the suite's operations that ignore the magnitude."""
    return [i for i, aug in enumerate(recipe.augmentations())
            if aug.name in ("equalize", "auto_contrast")]


def test_randaugment_at_magnitude_0_leaves_the_crop(color_dir, plain):
    recipe = dalipipe.RandAugment(num_ops=2, magnitude=0)
    pipe = pipeline(color_dir, recipe)
    images, _ = epoch(pipe, 0)
    ops = pipe.epoch_inputs(0)[1][:, sampling.NUM_RANDOM::2][:, :recipe.num_ops]
    identity = ~np.isin(ops, magnitude_free(recipe)).any(axis=1)
    assert 20 < identity.sum() < 90
    np.testing.assert_array_equal(images[identity], plain[0][0][identity])
    assert (np.abs(images[~identity] - plain[0][0][~identity]).reshape(-1, SIZE * SIZE * 3)
            .max(1) > 0).mean() > 0.5


def test_the_draws_are_the_graph_s_inputs_after_the_crop_s(color_dir):
    recipe = dalipipe.RandAugment(num_ops=3)
    pipe = pipeline(color_dir, recipe)
    sample_ids, random, _ = pipe.epoch_inputs(0)
    assert random.shape == (90, sampling.NUM_RANDOM + 6) == (90, pipe.num_random)
    crops = pipeline(color_dir, True).epoch_inputs(0)[1]
    np.testing.assert_array_equal(random[:, :sampling.NUM_RANDOM], crops)
    ops, signs = random[:, 5::2], random[:, 6::2]
    assert set(np.unique(ops)) <= set(range(14)) and len(np.unique(ops)) == 14
    assert set(np.unique(signs)) == {0.0, 1.0}
    assert not np.array_equal(random, pipe.epoch_inputs(1)[1])


def test_trivialaugment_and_autoaugment_draws(color_dir):
    random = pipeline(color_dir, "trivialaugment").epoch_inputs(0)[1][:, 5:]
    assert random.shape == (90, 3)
    assert random[:, 1].max() <= 30 and len(np.unique(random[:, 1])) > 20
    recipe = dalipipe.AutoAugment()
    random = pipeline(color_dir, recipe).epoch_inputs(0)[1][:, 5:]
    assert recipe.stages == 2 and random.shape == (90, 5)
    assert set(np.unique(random[:, 0])) <= set(range(25))
    assert ((random[:, 1:3] >= 0) & (random[:, 1:3] < 1)).all()


@pytest.mark.parametrize("policy", ["reduced_imagenet", "svhn", "reduced_cifar10"])
def test_the_other_autoaugment_policies_run(policy, color_dir, plain):
    images, _ = epoch(pipeline(color_dir, dalipipe.AutoAugment(policy)), 0)
    assert images.shape == plain[0][0].shape and not np.array_equal(images, plain[0][0])


def test_shards_draw_for_their_own_positions(tagged_dir):
    """Two replicas of a global batch get the rows of their samples' positions, so
    they crop and augment differently; together they are the whole epoch's rows."""
    pipe = pipeline(tagged_dir, "randaugment", batch_size=8, shuffle=False)
    whole = pipe.epoch_inputs(0)[1]
    shards = [pipe.shard([r], 2).epoch_inputs(0) for r in (0, 1)]
    assert not np.array_equal(shards[0][1][:4], shards[1][1][:4])
    positions = [pipe.shard([r], 2).positions()[0] for r in (0, 1)]
    for (_, random, weights), where in zip(shards, positions):
        real = weights > 0
        np.testing.assert_array_equal(random[real], whole[where[real]])


def test_labels_stay_with_their_images(tagged_dir):
    """Each sample's label is its file's, in the native epoch's order (recipes change
    pixels, so the tag is read from the unaugmented epoch of the same seed)."""
    options = dict(image_size=12, batch_size=8, shuffle=True)
    pipe = pipeline(tagged_dir, "autoaugment", **options)
    images, labels = epoch(pipe, 1)
    sample_ids = pipe.epoch_inputs(1)[0]
    np.testing.assert_array_equal(labels, pipe.labels[sample_ids])
    plain_images, plain_labels = epoch(pipeline(tagged_dir, False, **options), 1)
    np.testing.assert_array_equal(labels, plain_labels)
    assert sorted(tag_of(i) for i in plain_images) == list(range(NUM_TAGGED))


@pytest.mark.parametrize("recipe", recipes.RECIPES)
def test_a_recipe_in_fit_on_tensorflow(recipe, color_dir):
    keras = pytest.importorskip("keras")
    dataset = dalipipe.make_dali_dataset(color_dir, augment=recipe, device="cpu",
                                         seed=1, batch_size=16, image_size=SIZE, verbose=False)
    model = keras.Sequential([keras.Input((SIZE, SIZE, 3)), keras.layers.Rescaling(1 / 255),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(3)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(dataset, epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2
    native = epoch(dataset.image_pipeline, 0)
    through_tf = [np.concatenate([b[i].numpy() for b in dataset]) for i in range(2)]
    # The third pass over the dataset is epoch 2 (fit made two).
    np.testing.assert_array_equal(through_tf[0], epoch(dataset.image_pipeline, 2)[0])
    assert not np.array_equal(native[0], through_tf[0])


@pytest.mark.parametrize("augment, message", [
    ("randaug", "`augment` must be True (a random-resized crop and a flip), False, a "
                "recipe's name ('randaugment', 'trivialaugment', 'autoaugment'), or a recipe"),
    (1, "Received: augment=1"),
])
def test_unknown_recipes_are_refused(augment, message, color_dir):
    with pytest.raises(ValueError, match="Received: augment=") as caught:
        pipeline(color_dir, augment)
    assert message in str(caught.value)


@pytest.mark.parametrize("make, message", [
    (lambda: dalipipe.RandAugment(num_ops=-1),
     "`num_ops` must be an integer >= 0. Received: num_ops=-1"),
    (lambda: dalipipe.RandAugment(magnitude=31),
     "`magnitude` must be an integer in [0, 30]. Received: magnitude=31"),
    (lambda: dalipipe.RandAugment(magnitude=2.5),
     "`magnitude` must be an integer in [0, 30]. Received: magnitude=2.5"),
    (lambda: dalipipe.TrivialAugmentWide(num_magnitude_bins=0),
     "`num_magnitude_bins` must be an integer >= 1. Received: num_magnitude_bins=0"),
    (lambda: dalipipe.AutoAugment("cifar"),
     "`policy` must be one of ('imagenet', 'reduced_imagenet', 'svhn', 'reduced_cifar10'). "
     "Received: policy='cifar'"),
])
def test_bad_recipe_parameters_are_named(make, message):
    with pytest.raises(ValueError) as caught:
        make()
    assert str(caught.value) == message


@pytest.mark.parametrize("color_mode", ["grayscale", "rgba"])
def test_recipes_need_rgb(color_mode, color_dir):
    with pytest.raises(ValueError, match=f"Received: color_mode='{color_mode}'") as caught:
        pipeline(color_dir, "randaugment", color_mode=color_mode)
    assert "for RGB images only" in str(caught.value)
    assert pipeline(color_dir, True, color_mode=color_mode).options.recipe is None


def test_validation_of_subset_both_is_not_augmented(color_dir):
    train, validation = pipeline(color_dir, "randaugment", validation_split=0.2,
                                 subset="both", mix="cutmix", label_mode="categorical")
    assert train.options.recipe == dalipipe.RandAugment() and train.options.mix is not None
    assert validation.options.augment is False and validation.options.mix is None
    assert validation.num_random == 0 and validation.input_names == ("samples",)


@pytest.mark.parametrize("recipe", [
    recipes.RandAugment(num_ops=2, magnitude=9), recipes.RandAugment(num_ops=3, magnitude=30),
    recipes.TrivialAugmentWide(), recipes.AutoAugment(),
    *(recipes.AutoAugment(policy=p) for p in recipes.AUTOAUGMENT_POLICIES if p != "imagenet"),
], ids=lambda r: repr(r))
def test_affines_made_once_per_kind_of_row_equal_each_row_s_own(recipe):
    """`affines` makes one map per kind of row (`step_keys`): bit for bit each row's
    own map, its steps' maps composed in order."""
    from dalipipe import recipe_geometry

    rows = recipe.rows(np.random.default_rng(7), 3000)
    expected = np.tile(np.eye(3), (len(rows), 1, 1))
    for i, steps in enumerate(recipe.steps(rows)):
        for aug, magnitude_bin, sign in steps:
            expected[i] = recipe_geometry.affine(aug, magnitude_bin, sign,
                                                 recipe.num_magnitude_bins, (60, 80)) @ expected[i]
    got = recipe.affines(rows, (60, 80))
    assert got.shape == (3000, 3, 3)
    assert np.array_equal(got.view(np.uint64), expected.view(np.uint64))
    assert (expected != np.eye(3)).any((1, 2)).sum() > 100  # geometric steps among them
    assert recipe.affines(rows[:0], (60, 80)).shape == (0, 3, 3)


def test_distinct_rows_are_numpy_s_even_past_int64():
    """`utils.distinct_rows` (`affines`' kinds of rows) numbers them column by column,
    renumbering before the codes would overflow (6 columns of 3,000 values: 3000**6 >
    2**62)."""
    rng = np.random.default_rng(3)
    keys = rng.random((3000, 6)).astype(np.float32)
    keys[1000:2000] = keys[:1000]  # repeated rows
    keys[:, 5][::7] = 0.5
    first, inverse = distinct_rows(keys)
    distinct, expected_first, _ = np.unique(keys, axis=0, return_index=True,
                                            return_inverse=True)
    assert len(first) == len(distinct) < 3000
    assert np.array_equal(keys[first][inverse], keys)
    assert sorted(first) == sorted(expected_first)
