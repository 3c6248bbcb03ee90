"""One process of the distributed tests (`test_distributed.py`): feeds a strategy from
`make_dali_dataset(..., strategy=...)`, records what every replica saw, then trains.

    python distributed_job.py mirrored SOURCE OUT_JSON [DENSE_DIR]
    TF_CONFIG=... python distributed_job.py multiworker SOURCE OUT_JSON

Writes JSON: per epoch, per local replica, the (tag, label, weight) of every sample,
and the training history; with DENSE_DIR (sample data with masks and boxes), also
`dense`: the masks, box labels and weights of one epoch of each, row by row over the
replicas (`dense_run`).
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(__file__))
from helpers import tag_of  # noqa: E402

from dalipipe import make_dali_dataset  # noqa: E402

EPOCHS = 2


def main(mode, data_dir, out, dense_dir=None):
    tf.keras.utils.set_random_seed(0)  # the same initial weights in every run
    if mode == "mirrored":
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    else:
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    try:
        make_dali_dataset(data_dir, batch_size=8, strategy=strategy, device="cpu", verbose=False)
        seed_error = None
    except ValueError as e:
        seed_error = str(e)
    dataset = make_dali_dataset(
        data_dir, image_size=(8, 8), batch_size=8, normalization=None, seed=5,
        strategy=strategy, device="cpu", num_threads=1, verbose=False,
    )
    epochs = []
    for _ in range(EPOCHS):
        seen = [[] for _ in range(strategy.num_replicas_in_sync)]
        for images, labels, weights in dataset:
            parts = [strategy.experimental_local_results(t) for t in (images, labels, weights)]
            for replica, (x, y, w) in enumerate(zip(*parts)):
                seen[replica] += [
                    (tag_of(image), int(label), float(weight))
                    for image, label, weight in zip(x.numpy(), y.numpy(), w.numpy())
                ]
        epochs.append([r for r in seen if r])
    with strategy.scope():
        model = tf.keras.Sequential([
            tf.keras.Input((8, 8, 3)),
            tf.keras.layers.Rescaling(1 / 255),
            tf.keras.layers.GlobalAveragePooling2D(),
            tf.keras.layers.Dense(3),
        ])
        model.compile(
            optimizer=tf.keras.optimizers.Adam(0.1),
            loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            weighted_metrics=["accuracy"],
        )
    if mode == "mirrored":
        history = model.fit(dataset, epochs=EPOCHS, verbose=0).history
        # A dataset made without the strategy, which Keras distributes itself.
        plain = make_dali_dataset(data_dir, image_size=(8, 8), batch_size=8,
                                  normalization=None, device="cpu")
        history["plain_evaluate_accuracy"] = [model.evaluate(plain, verbose=0)[1]]
    else:
        # Keras 3's fit fails under MultiWorkerMirroredStrategy with any dataset
        # (keras-team/keras#20585): a custom training loop, as in README's recipe.
        history = custom_loop(strategy, model, dataset, global_batch=8)
    dense = None if dense_dir is None else dense_run(strategy, dense_dir)
    with open(out, "w") as f:
        json.dump({
            "dense": dense,
            "replicas": strategy.num_replicas_in_sync,
            "cardinality": int(dataset.cardinality),
            "epochs": epochs,
            "history": {k: [float(v) for v in vs] for k, vs in history.items()},
            "class_names": dataset.class_names,
            "seed_error": seed_error,
        }, f)


def dense_run(strategy, dense_dir):
    """Masks and boxes under `strategy` (`test_distributed.DENSE`'s options): epoch 0's
    rows in the order of the epoch's positions (step by step, replica by replica), as
    `(mask or box labels, weight)`. (`fit` with masks under a strategy:
    `test_distributed.test_masks_and_boxes_under_a_strategy_in_process`.)"""
    from test_distributed import DENSE, dense_targets

    images = os.path.join(dense_dir, "images")
    found = {}
    for kind in ("masks", "boxes"):
        dataset = make_dali_dataset(
            images, strategy=strategy, **{**DENSE, **dense_targets(dense_dir, kind)})
        rows = []
        for _, targets, weights in dataset:
            targets = targets["labels"] if kind == "boxes" else targets
            for y, w in zip(strategy.experimental_local_results(targets),
                            strategy.experimental_local_results(weights)):
                rows += [(t.tolist(), float(v.flat[0])) for t, v in zip(y.numpy(), w.numpy())]
        found[kind] = rows
    return found


def custom_loop(strategy, model, dataset, global_batch):
    """Trains `EPOCHS` epochs with `strategy.run`; returns the weighted accuracy per epoch."""

    @tf.function
    def train_step(batch):
        def step(images, labels, weights):
            with tf.GradientTape() as tape:
                logits = model(images, training=True)
                losses = tf.keras.losses.sparse_categorical_crossentropy(
                    labels, logits, from_logits=True
                )
                loss = tf.reduce_sum(losses * weights) / global_batch
            grads = tape.gradient(loss, model.trainable_variables)
            model.optimizer.apply_gradients(zip(grads, model.trainable_variables))
            hits = tf.cast(tf.argmax(logits, -1, output_type=tf.int32) == labels, tf.float32)
            return tf.reduce_sum(hits * weights), tf.reduce_sum(weights)

        hits, count = strategy.run(step, args=batch)
        return strategy.reduce("SUM", hits, axis=None), strategy.reduce("SUM", count, axis=None)

    accuracy = []
    for _ in range(EPOCHS):
        hits = count = 0.0
        for batch in dataset:
            h, c = train_step(batch)
            hits, count = hits + float(h), count + float(c)
        accuracy.append(hits / count)
    return {"accuracy": accuracy, "samples": [count] * EPOCHS}


if __name__ == "__main__":
    main(*sys.argv[1:])
