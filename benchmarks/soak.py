"""Long runs: memory and file descriptors over many epochs and many datasets.

`soak(directory, epochs=..., cycles=...)` runs two phases:
1. `model.fit` for `epochs` epochs from one `make_dali_dataset` (CPU), recording
   resident memory and open file descriptors after every epoch.
2. `cycles` times: create a dataset, read one epoch, discard it; recording the same.

It returns the series and their first, last and largest values. From the command
line it runs them over sample images and writes them as JSON.

    python benchmarks/soak.py [--epochs 30] [--cycles 50] [--out FILE]
"""

import argparse
import gc
import json
import os
import sys
import tempfile
import time

# The checkout this script belongs to: its dalipipe is the one measured.
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rss_mb():
    """Resident memory of this process, in MB (psutil)."""
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def open_fds():
    """The file descriptors this process has open (psutil)."""
    import psutil

    return psutil.Process().num_fds()


def soak(directory, *, epochs, cycles, image_size=64, batch_size=32):
    """Runs both phases over the images in `directory`; returns the measurements."""
    import keras

    from dalipipe import make_dali_dataset

    options = dict(image_size=(image_size, image_size), batch_size=batch_size, seed=0,
                   augment=True, device="cpu", normalization="imagenet", verbose=False)
    ds = make_dali_dataset(directory, **options)
    model = keras.Sequential([
        keras.Input((image_size, image_size, 3)),
        keras.layers.Conv2D(8, 3, strides=2, activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(len(ds.class_names), activation="softmax"),
    ])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    fit = {"rss_mb": [], "fds": []}

    class Record(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            fit["rss_mb"].append(rss_mb())
            fit["fds"].append(open_fds())

    started = time.perf_counter()
    model.fit(ds, epochs=epochs, verbose=0, callbacks=[Record()])
    fit["seconds"] = time.perf_counter() - started
    del ds
    churn = {"rss_mb": [], "fds": []}
    for _ in range(cycles):
        ds = make_dali_dataset(directory, **options)
        for _batch in ds:
            pass
        del ds
        gc.collect()
        churn["rss_mb"].append(rss_mb())
        churn["fds"].append(open_fds())
    for series in (fit, churn):
        for key in ("rss_mb", "fds"):
            values = series[key]
            series[f"{key}_first_last_max"] = [values[0], values[-1], max(values)] if values else []
    return {"epochs": epochs, "cycles": cycles, "fit": fit, "create_discard": churn}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30, help="epochs of the fit phase")
    parser.add_argument("--cycles", type=int, default=50,
                        help="datasets created and discarded in the second phase")
    parser.add_argument("--num-images", type=int, default=600, help="sample images to make")
    parser.add_argument("--out", default="benchmarks/results/soak.json",
                        help="the JSON file to write")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if REPO_ROOT not in sys.path:  # `python benchmarks/soak.py` puts benchmarks/ there
        sys.path.insert(0, REPO_ROOT)
    from dalipipe import make_sample_dataset

    with tempfile.TemporaryDirectory() as directory:
        make_sample_dataset(directory, num_images=args.num_images, num_classes=4)
        report = soak(directory, epochs=args.epochs, cycles=args.cycles)
    report["images"] = args.num_images
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    for phase in ("fit", "create_discard"):
        print(phase, "RSS MB first/last/max", [round(v) for v in report[phase]["rss_mb_first_last_max"]],
              "FDs first/last/max", report[phase]["fds_first_last_max"])
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
