"""Long runs: memory and file descriptors over many epochs and many datasets.

`soak(directory, epochs=..., cycles=...)` runs two phases:
1. `model.fit` for `epochs` epochs from one `make_dali_dataset` (CPU), recording
   resident memory (VmRSS) and open file descriptors after every epoch.
2. `cycles` times: create a dataset, read one epoch, discard it; recording the same.

It returns the series and their first, last and largest values;
`benchmarks/soak.py` runs it from the command line and writes them as JSON.
"""

import gc
import os
import time


def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def open_fds():
    return len(os.listdir("/proc/self/fd"))


def soak(directory, *, epochs, cycles, image_size=64, batch_size=32):
    """Runs both phases over the images in `directory`; returns the measurements."""
    import keras

    from dalipipe import make_dali_dataset

    options = dict(image_size=(image_size, image_size), batch_size=batch_size, seed=0,
                   augment=True, device="cpu", verbose=False)
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
