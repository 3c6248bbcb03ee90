"""`dalipipe demo`: sample data, then a small Keras model trained from it through DALI.

`run()` writes labeled JPEGs cut from the shipped photographs
(`make_sample_dataset`), splits them 80/20 with `make_dali_dataset(subset="both")`,
trains a three-layer convolutional network for a few epochs, printing images/s and
accuracy after each, and prints the validation accuracy at the end.
"""

import time
import warnings


def run(directory="data/sample", *, num_images=600, num_classes=4, epochs=6, batch_size=32,
        image_size=96, device="auto", force=False):
    """Makes the sample data in `directory` and trains on it; returns the exit status 0.

    Args:
        directory: where the sample images are written: a folder that is absent,
            empty or made by dalipipe (reused when it holds these images already).
        num_images: how many images to write.
        num_classes: how many classes (photographs) they are cut from.
        epochs: training epochs.
        batch_size: images per batch.
        image_size: the side of the square images the model sees, in pixels.
        device: `make_dali_dataset`'s `device`: "auto", "gpu" or "cpu".
        force: write into `directory` even when dalipipe did not make it
            (`make_sample_dataset`'s `force`).

    Raises:
        sample_data.FolderInUseError: for a `directory` of the user's, without `force`.
    """
    from dalipipe.sample_data import make_sample_dataset

    make_sample_dataset(directory, num_images=num_images, num_classes=num_classes, force=force)
    print(f"sample data: {num_images} JPEGs in {num_classes} classes under {directory}")

    import keras

    from dalipipe import make_dali_dataset

    # Keras 3 warns on every fit with a tf.data.Dataset; shuffling is the dataset's job.
    warnings.filterwarnings("ignore", message="`shuffle=True` was passed")

    # Augmentation and shuffling apply to the training half; the validation half is
    # read in file order. DALI normalizes the pixels (ImageNet's mean and standard
    # deviation) in the same fused step that crops and flips them.
    train_ds, val_ds = make_dali_dataset(
        directory, image_size=(image_size, image_size), batch_size=batch_size,
        validation_split=0.2, subset="both", seed=42, augment=True, device=device,
        normalization="imagenet",
    )
    print(
        f"classes: {train_ds.class_names}; {len(train_ds.file_paths)} training and "
        f"{len(val_ds.file_paths)} validation images; {int(train_ds.cardinality())} batches "
        f"per epoch"
    )
    model = keras.Sequential([
        keras.Input((image_size, image_size, 3)),
        keras.layers.Conv2D(16, 3, strides=2, activation="relu"),
        keras.layers.Conv2D(32, 3, strides=2, activation="relu"),
        keras.layers.Conv2D(64, 3, strides=2, activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(len(train_ds.class_names), activation="softmax"),
    ])
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )

    class Throughput(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            seconds = time.perf_counter() - self.start
            print(
                f"epoch {epoch + 1}: {len(train_ds.file_paths) / seconds:7.1f} images/s "
                f"(training + validation pass), accuracy {logs['accuracy']:.3f}, "
                f"val_accuracy {logs['val_accuracy']:.3f}"
            )

    model.fit(train_ds, validation_data=val_ds, epochs=epochs, verbose=0,
              callbacks=[Throughput()])
    _, accuracy = model.evaluate(val_ds, verbose=0)
    print(f"validation accuracy {accuracy:.3f} over {len(val_ds.file_paths)} images")
    return 0
