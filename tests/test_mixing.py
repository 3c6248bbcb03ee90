"""Batch mixing (`dalipipe.mixing`): MixUp and CutMix in the DALI graph on the CPU,
checked against the unmixed batches and the draws, and their errors."""

import numpy as np
import pytest

import dalipipe
from dalipipe import mixing
from helpers import CLASSES, NUM_TAGGED

BATCH = 8


def pipeline(source, **options):
    options = dict(dict(device="cpu", seed=5, batch_size=BATCH, image_size=12,
                        label_mode="categorical", verbose=False), **options)
    return dalipipe.make_dali_pipeline(source, **options)


def batches(pipe, number=0):
    return list(pipe.epoch(number))


@pytest.mark.parametrize("augment", [False, True])
def test_mixup_blends_each_image_with_its_partner(augment, tagged_dir):
    mixed_pipe = pipeline(tagged_dir, augment=augment, mix=dalipipe.MixUp(alpha=0.4))
    plain = batches(pipeline(tagged_dir, augment=augment))
    mixed = batches(mixed_pipe)
    draws = mixed_pipe.epoch_inputs(0)[1][:, -mixing.COLUMNS:]
    assert len(mixed) == len(plain) == -(-NUM_TAGGED // BATCH)
    start = 0
    for (x, y), (mx, my) in zip(plain, mixed):
        rows = draws[start:start + len(x)]
        start += len(x)
        partner, weight = rows[:, 0].astype(int), rows[:, 1]
        assert sorted(partner) == list(range(len(x)))  # a permutation of the batch
        assert (rows[:, 2:] == 0).all()
        w = weight[:, None, None, None]
        np.testing.assert_allclose(mx, w * x + (1 - w) * x[partner], atol=1e-3)
        np.testing.assert_allclose(my, weight[:, None] * y + (1 - weight[:, None]) * y[partner],
                                   atol=1e-6)
        np.testing.assert_allclose(my.sum(1), 1, atol=1e-6)
    assert len(x) == NUM_TAGGED % BATCH or NUM_TAGGED % BATCH == 0  # a partial last batch
    weights = draws[:, 1]
    assert ((weights >= 0) & (weights <= 1)).all() and 0.3 < weights.mean() < 0.7


def test_cutmix_pastes_the_partner_s_box(tagged_dir):
    mixed_pipe = pipeline(tagged_dir, augment=True, mix="cutmix", image_size=(12, 16))
    plain = batches(pipeline(tagged_dir, augment=True, image_size=(12, 16)))
    draws = mixed_pipe.epoch_inputs(0)[1][:, -mixing.COLUMNS:]
    start, areas = 0, []
    for (x, y), (mx, my) in zip(plain, batches(mixed_pipe)):
        for i in range(len(x)):
            partner, weight, top, left, height, width = draws[start + i]
            partner, top, left, height, width = (int(v) for v in (partner, top, left, height, width))
            assert 0 <= top and top + height <= 12 and 0 <= left and left + width <= 16
            inside = np.zeros((12, 16), bool)
            inside[top:top + height, left:left + width] = True
            np.testing.assert_array_equal(mx[i][inside], x[partner][inside])
            np.testing.assert_array_equal(mx[i][~inside], x[i][~inside])
            assert weight == pytest.approx(1 - inside.sum() / inside.size)
            np.testing.assert_allclose(my[i], weight * y[i] + (1 - weight) * y[partner], atol=1e-6)
            areas.append(inside.mean())
        start += len(x)
    assert 0 < np.mean(areas) < 1 and max(areas) > 0.3


def test_mixing_differs_between_epochs_and_follows_the_seed(tagged_dir):
    pipe = pipeline(tagged_dir, mix="mixup")
    first, second = batches(pipe, 0), batches(pipe, 1)
    assert not np.array_equal(first[0][1], second[0][1])
    again = batches(pipeline(tagged_dir, mix="mixup"), 0)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])


def test_a_resumed_epoch_mixes_as_the_whole_epoch(tagged_dir):
    pipe = pipeline(tagged_dir, augment="randaugment", mix="cutmix")
    whole = batches(pipe, 2)
    rest = list(pipe.epoch(2, start_batch=3))
    assert len(rest) == len(whole) - 3
    for a, b in zip(whole[3:], rest):
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])


@pytest.mark.parametrize("dtype, normalization", [("uint8", None), ("float16", "imagenet")])
def test_mixed_images_take_the_dtype(dtype, normalization, tagged_dir):
    mixed = pipeline(tagged_dir, mix="mixup", dtype=dtype, normalization=normalization)
    as_float = pipeline(tagged_dir, mix="mixup", normalization=normalization)
    (images, labels), (want, _) = batches(mixed)[0], batches(as_float)[0]
    assert images.dtype == np.dtype(dtype) and labels.dtype == np.float32
    assert mixed.output_dtypes == (dtype, "float32")
    np.testing.assert_allclose(images.astype(np.float32), want, atol=0.51 if dtype == "uint8"
                               else 0.01)


def test_binary_and_channels_first_mix(tagged_dir):
    pipe = pipeline(tagged_dir, mix="cutmix", label_mode="binary",
                    class_names=CLASSES[:2], data_format="channels_first")
    images, labels = batches(pipe)[0]
    assert images.shape == (BATCH, 3, 12, 12) and labels.shape == (BATCH, 1)
    assert ((labels >= 0) & (labels <= 1)).all()


def test_a_shard_mixes_within_its_own_batch(tagged_dir):
    pipe = pipeline(tagged_dir, mix="mixup", shuffle=False)
    shard = pipe.shard([1], 2)
    images, labels, weights = batches(shard)[0]
    assert images.shape[0] == labels.shape[0] == BATCH // 2
    partner = shard.epoch_inputs(0)[1][:BATCH // 2, -mixing.COLUMNS]
    assert sorted(partner.astype(int)) == list(range(BATCH // 2))
    whole = pipe.epoch_inputs(0)[1][:, -mixing.COLUMNS:]
    assert not np.array_equal(shard.epoch_inputs(0)[1][:, -mixing.COLUMNS:], whole[4:4 + 4])


def test_mix_in_fit_on_tensorflow(tagged_dir):
    keras = pytest.importorskip("keras")
    dataset = dalipipe.make_dali_dataset(tagged_dir, augment="randaugment", mix="mixup",
                                         device="cpu", seed=1, batch_size=BATCH, image_size=12,
                                         label_mode="categorical", verbose=False)
    images, labels = next(iter(dataset))
    assert labels.dtype.name == "float32" and tuple(labels.shape) == (BATCH, 3)
    model = keras.Sequential([keras.Input((12, 12, 3)), keras.layers.Rescaling(1 / 255),
                              keras.layers.GlobalAveragePooling2D(),
                              keras.layers.Dense(3, activation="softmax")])
    model.compile("adam", "categorical_crossentropy")
    assert len(model.fit(dataset, epochs=2, verbose=0).history["loss"]) == 2
    # The native epoch of the same number gives the same batches (the pass left after
    # its first batch above does not count).
    tf_batches = [tuple(t.numpy() for t in batch) for batch in dataset]
    for a, b in zip(tf_batches, dataset.image_pipeline.epoch(2)):
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])


@pytest.mark.parametrize("options, message", [
    (dict(mix="mixup", label_mode="int"),
     "`mix=MixUp(alpha=0.2)` mixes the labels of two samples, so the labels must be float32 "
     "class probabilities: `label_mode` one of ('categorical', 'binary', 'multi_hot') (use "
     "label_mode=\"categorical\"). Received: label_mode='int'"),
    (dict(mix="cutmix", labels=None),
     "Received: labels=None"),
    (dict(mix="mixup", class_weight={0: 2.0}),
     "`class_weight` weighs each sample by its one class, and `mix=MixUp(alpha=0.2)` gives "
     "each sample two."),
    (dict(mix="mixup", batch_size=None),
     "`mix=MixUp(alpha=0.2)` mixes the samples of a batch, and `batch_size=None` yields "
     "single samples. Received: batch_size=None"),
    (dict(mix="mix"), "`mix` must be None, one of ('mixup', 'cutmix'), dalipipe.MixUp(alpha=0.2) "
                      "or dalipipe.CutMix(factor=1.0). Received: mix='mix'"),
])
def test_mixing_errors_name_the_arguments(options, message, tagged_dir):
    with pytest.raises(ValueError) as caught:
        pipeline(tagged_dir, **options)
    assert message in str(caught.value)


@pytest.mark.parametrize("make, message", [
    (lambda: dalipipe.MixUp(alpha=0), "`alpha` must be a positive number. Received: alpha=0"),
    (lambda: dalipipe.CutMix(factor=1.5),
     "`factor` must be a number in [0, 1] or a pair of them (low, high). Received: factor=1.5"),
    (lambda: dalipipe.CutMix(factor=(0.2, 0.5, 0.9)), "Received: factor=(0.2, 0.5, 0.9)"),
])
def test_bad_mixing_parameters_are_named(make, message):
    with pytest.raises(ValueError) as caught:
        make()
    assert message in str(caught.value)


def test_cutmix_factor_bounds():
    assert dalipipe.CutMix().bounds == (0.0, 1.0)
    assert dalipipe.CutMix(factor=[0.9, 0.3]).bounds == (0.3, 0.9)
    assert dalipipe.CutMix(factor=[0.3, 0.9]) == dalipipe.CutMix(factor=(0.3, 0.9))


def test_a_recipe_and_mixing_under_a_strategy(tagged_dir):
    """`strategy=`: the shapes and dtypes of `augment=True` (float32 labels), the
    padding's weights, and `fit`."""
    tf = pytest.importorskip("tensorflow")
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    options = dict(image_size=12, batch_size=BATCH, seed=2, device="cpu", strategy=strategy,
                   label_mode="categorical", verbose=False)
    plain = dalipipe.make_dali_dataset(tagged_dir, augment=True, **options)
    mixed = dalipipe.make_dali_dataset(tagged_dir, augment="trivialaugment", mix="cutmix",
                                       **options)
    assert mixed.element_spec == plain.element_spec
    batches = list(mixed)
    assert sum(w for _, _, weights in batches for w in weights.numpy()) == NUM_TAGGED
    labels = np.concatenate([y.numpy() for _, y, _ in batches])
    np.testing.assert_allclose(labels.sum(1), 1, atol=1e-6)
    assert ((labels > 0) & (labels < 1)).any()
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input((12, 12, 3)), tf.keras.layers.Flatten(),
                                     tf.keras.layers.Dense(3)])
        model.compile("adam", tf.keras.losses.CategoricalCrossentropy(from_logits=True))
    assert len(model.fit(mixed, epochs=1, verbose=0).history["loss"]) == 1


@pytest.mark.parametrize("format", ["pydataset", "grain"])
def test_other_formats_carry_the_recipe_and_mixing(format, tagged_dir):
    if format == "grain":
        pytest.importorskip("grain")
    options = dict(image_size=12, batch_size=BATCH, seed=2, device="cpu", verbose=False,
                   label_mode="categorical", augment="autoaugment", mix="mixup")
    dataset = dalipipe.make_dali_dataset(tagged_dir, format=format, **options)
    first = next(iter(dataset)) if format == "grain" else dataset[0]
    images, labels = (np.asarray(t) for t in first)
    want = next(pipeline(tagged_dir, **{k: v for k, v in options.items()
                                        if k not in ("verbose",)}).epoch(0))
    assert images.shape == (BATCH, 12, 12, 3) and labels.dtype == np.float32
    np.testing.assert_array_equal(images, want[0])
    np.testing.assert_array_equal(labels, want[1])
