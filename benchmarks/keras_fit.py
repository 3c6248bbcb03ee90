"""Input efficiency of Keras's `fit` fed by `make_dali_dataset`, on any backend.

images/s of `model.fit` on a model (ResNet-50 by default) fed by dalipipe, against
the same model fed the same batches from device memory (copies of dalipipe's own
batches, already on the device): the ratio is the share of the model's speed that
the input pipeline leaves. The backend is `KERAS_BACKEND`'s, and the dataset the
one `make_dali_dataset` gives there (a `tf.data.Dataset` on TensorFlow, a
`keras.utils.PyDataset` on torch and JAX, which never import TensorFlow).

    KERAS_BACKEND=torch python -m benchmarks.keras_fit --data DIR --out result.json
        [--model resnet50|small] [--image-size 224] [--batch-size 128] [--epochs 3]

`run_keras_fit` runs it so, in a fresh process. Keras is imported only where it
measures: the process that calls `run_keras_fit` may have no Keras backend.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from dalipipe.utils import child_env


def run_keras_fit(data, *, backend, model, image_size, batch_size, epochs, warmup,
                  device="auto", timeout=None, num_threads=None):
    """This module in a fresh process on Keras backend `backend` (with this
    `dalipipe`, `child_env`); returns its result dict.

    Raises:
        subprocess.TimeoutExpired: after `timeout` seconds.
        RuntimeError: when the process fails, with the end of its stderr.
    """
    command = [sys.executable, "-m", "benchmarks.keras_fit", "--data", data,
               "--model", model, "--image-size", str(image_size),
               "--batch-size", str(batch_size), "--epochs", str(epochs),
               "--warmup", str(warmup), "--device", device]
    if num_threads is not None:
        command += ["--num-threads", str(num_threads)]
    with tempfile.TemporaryDirectory(prefix="keras_fit_") as scratch:
        out = os.path.join(scratch, "fit.json")
        done = subprocess.run(command + ["--out", out], capture_output=True, text=True,
                              timeout=timeout,
                              env=child_env(KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3"))
        if done.returncode != 0:
            raise RuntimeError(f"keras_fit on {backend} failed:\n{done.stderr[-3000:]}")
        with open(out) as f:
            return json.load(f)


def _in_memory(batches):
    """`batches` as a `keras.utils.PyDataset` held in memory, `len(batches)` per epoch."""
    import keras

    class Batches(keras.utils.PyDataset):
        def __len__(self):
            return len(batches)

        def __getitem__(self, index):
            return batches[index]

    return Batches()


def make_model(name, image_size, num_classes):
    """A Keras model for `image_size` RGB images, compiled with SGD.

    Not seeded: `keras.utils.set_random_seed` imports TensorFlow where it is installed.
    """
    import keras

    shape = (*image_size, 3)
    if name == "resnet50":
        model = keras.applications.ResNet50(weights=None, input_shape=shape,
                                            classes=num_classes)
    elif name == "small":
        model = keras.Sequential([
            keras.Input(shape),
            keras.layers.Conv2D(16, 3, strides=2, activation="relu"),
            keras.layers.Conv2D(32, 3, strides=2, activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(num_classes, activation="softmax"),
        ])
    else:
        raise ValueError(f'`model` must be "resnet50" or "small". Received: model={name!r}')
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="sparse_categorical_crossentropy")
    return model


def images_per_second(model, data, *, epochs, batch_size, warmup):
    """images/s of `model.fit(data, epochs=epochs)`, after `warmup` steps."""
    import keras

    times = []  # the end of every training step, after the device has finished it

    def step_done(batch, logs):
        # Reading what the step computed waits for the step (on JAX, fit holds the
        # model's variables apart until the epoch ends: its logs are the step's).
        for value in (logs or {}).values():
            keras.ops.convert_to_numpy(value)
        times.append(time.perf_counter())

    model.fit(data, epochs=epochs, verbose=0,
              callbacks=[keras.callbacks.LambdaCallback(on_train_batch_end=step_done)])
    steps = len(times) - 1 - warmup
    if steps <= 0:
        raise ValueError(
            f"`epochs` × the steps per epoch must exceed `warmup` + 1 to time any step. "
            f"Received: {len(times)} steps, warmup={warmup}"
        )
    return steps * batch_size / (times[-1] - times[warmup])


def input_efficiency(data, *, model="resnet50", image_size=(224, 224), batch_size=128,
                     epochs=3, warmup=5, device="auto", num_threads=None):
    """Measures `fit` fed by dalipipe against the same batches from device memory.

    The dataset is the train workload: random-resized crops with flips, ImageNet
    normalization, float32 `(batch, height, width, 3)` images and int32 labels, with
    `drop_remainder=True` so that every step has `batch_size` images.

    Returns:
        A dict: `images_per_s_dalipipe`, `images_per_s_in_memory`,
        `input_efficiency` (their ratio), and what was measured (backend, device,
        model, sizes, steps).
    """
    import keras

    from dalipipe import make_dali_dataset

    dataset = make_dali_dataset(data, image_size=image_size, batch_size=batch_size, seed=0,
                                augment=True, drop_remainder=True, device=device,
                                num_threads=num_threads, normalization="imagenet",
                                verbose=False)
    # The epochs, and so the steps, are the same in both runs; the first warms up.
    net = make_model(model, image_size, len(dataset.class_names))
    in_memory = _in_memory(list(dataset))  # a tf.data.Dataset on TensorFlow: its tensors
    images_per_s_in_memory = images_per_second(net, in_memory, epochs=epochs,
                                               batch_size=batch_size, warmup=warmup)
    images_per_s_dalipipe = images_per_second(net, dataset, epochs=epochs,
                                              batch_size=batch_size, warmup=warmup)
    return {
        "backend": keras.backend.backend(),
        "device": dataset.image_pipeline.device,
        "num_threads": dataset.image_pipeline.options.num_threads,
        "model": model,
        "image_size": list(image_size),
        "batch_size": batch_size,
        "images": len(dataset.file_paths),
        "steps_per_epoch": len(dataset),
        "epochs": epochs,
        "warmup_steps": warmup,
        "images_per_s_dalipipe": images_per_s_dalipipe,
        "images_per_s_in_memory": images_per_s_in_memory,
        "input_efficiency": images_per_s_dalipipe / images_per_s_in_memory,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="an image folder, one subfolder per class")
    parser.add_argument("--out", required=True, help="the JSON file to write")
    parser.add_argument("--model", default="resnet50", choices=("resnet50", "small"))
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps of each run")
    parser.add_argument("--device", default="auto", choices=("auto", "gpu", "cpu"))
    parser.add_argument("--num-threads", type=int, default=None,
                        help="DALI's threads (default: make_dali_dataset's)")
    args = parser.parse_args(argv)
    from dalipipe.bench import harness

    started = time.perf_counter()
    result = input_efficiency(args.data, model=args.model,
                              image_size=(args.image_size, args.image_size),
                              batch_size=args.batch_size, epochs=args.epochs,
                              warmup=args.warmup, device=args.device,
                              num_threads=args.num_threads)
    result["machine"] = harness.machine_info()
    result["seconds"] = time.perf_counter() - started
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
