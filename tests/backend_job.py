"""One Keras backend in its own process, fed by `make_dali_dataset` (`test_backends.py`).

    KERAS_BACKEND=torch python backend_job.py MODE TAGGED_DIR OUT_JSON
    KERAS_BACKEND=torch python backend_job.py --modes MODE,MODE... TAGGED_DIR OUT_JSON

TAGGED_DIR may be a copy of it in object storage (`s3://bucket/tagged/`). OUT_JSON
is MODE's result; with `--modes` (`conftest.py`'s `backend_jobs`, which runs every
mode a session's tests need in one process per backend, since a process start
costs seconds), it maps each mode to `{"result": ...}` or `{"error": ...}` (the
traceback), so that one mode's failure fails its own tests only.

MODE `single`: `fit` with a metric that counts every sample it sees, `evaluate`,
`predict`, and the dataset's passes against the native epochs. MODE `single_s3`:
`single` on a copy of TAGGED_DIR in a local S3 server that the mode starts
(`s3_server.py`), at `s3://remote/tagged/`, its `fit` for 2 epochs, not 12. MODE `data_parallel`
(JAX, with several devices): `fit` and `evaluate` under `keras.distribution.DataParallel`.
MODE `targets`: a table's raw and multi-hot targets.
MODE `recipes`: `fit` with augmentation recipes and batch mixings (`RECIPE_CASES`:
each on torch or JAX), and their first pass against the native epoch.
MODE `cache`: the decoded-image cache (`cache=`) in both native formats.
MODE `grain`: `grain_job.py`'s `fit`, `evaluate` and `predict` on Grain datasets.
MODE `shards`: the images as WebDataset tar shards: two passes and a `fit`; masks and
boxes from shards (`dense_shards`) against the same images as a folder.
MODE `fits`: `epochs_job.py`'s epochs that `fit` trains on; MODE `rule`: its epoch
rule, in the "pydataset" and "grain" formats; MODE `pipelines`: the DALI pipelines
that its `fit`s build. MODE `plain_run`:
`epochs_job.py`'s run, never killed; its records.
MODE `report`: `report_job.py`'s `dalipipe.InputReport` runs.
MODE `map`: `fit` through `DALIPyDataset.map` and through a user's `PyDataset`
wrapping the dataset (`map_job.py`). MODE `unet`: `dense_recipes_job.py`'s U-Net.
MODE `kerashub`: `kerashub_job.py`'s KerasHub models on format "grain".
MODE `masks`: `masks_job.py`'s reads and fits of masks and boxes, on the dense
sample data it makes (TAGGED_DIR unused).
MODE `torch_distributed` (with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set): one
process of a `torch.distributed` group reads two passes of its shard, in the
"pydataset" format, through its `map`, and in the "grain" format. The images are
`tagged_dir`'s (see `conftest.py`): each tells its index from its pixels.
"""

import json
import os
import sys

import numpy as np

import keras
from keras import ops

import dalipipe
from helpers import CLASSES, NUM_TAGGED, tag_of

BATCH = 8
# BACKEND_JOB_DEVICE=gpu runs the DALI graph on the GPU (`test_gpu.py`).
OPTIONS = dict(image_size=(12, 12), batch_size=BATCH, normalization=None, verbose=False,
               device=os.environ.get("BACKEND_JOB_DEVICE", "cpu"))


class TagCounter(keras.metrics.Metric):
    """How many times each tagged image was seen (weighed by its sample weight), and
    how many of them came with a label other than their class."""

    def __init__(self, name="tags"):
        super().__init__(name=name)
        self.counts = self.add_variable(shape=(NUM_TAGGED,), initializer="zeros", name="counts")
        self.mislabeled = self.add_variable(shape=(), initializer="zeros", name="mislabeled")

    def update_state(self, y_true, y_pred, sample_weight=None):
        tags = ops.cast(ops.round(y_pred[:, -1]), "int32")
        weights = ops.ones_like(y_pred[:, -1]) if sample_weight is None else \
            ops.cast(ops.reshape(sample_weight, (-1,)), y_pred.dtype)
        self.counts.assign(self.counts + ops.sum(
            ops.one_hot(tags, NUM_TAGGED) * weights[:, None], axis=0))
        wrong = ops.cast(ops.not_equal(ops.reshape(ops.cast(y_true, "int32"), (-1,)), tags % 3),
                         y_pred.dtype)
        self.mislabeled.assign(self.mislabeled + ops.sum(wrong * weights))

    def result(self):
        return ops.sum(self.counts)


def tag_model():
    """Class logits from the image, and the image's tag as a last column."""
    images = keras.Input((12, 12, 3))
    pooled = keras.layers.GlobalAveragePooling2D()(keras.layers.Rescaling(1 / 255)(images))
    logits = keras.layers.Dense(3)(pooled)
    tags = keras.layers.Lambda(
        lambda x: ops.mean(x[:, -2:], axis=(1, 2, 3), keepdims=False)[:, None] / 2)(images)
    model = keras.Model(images, keras.layers.Concatenate()([logits, tags]))
    model.compile(keras.optimizers.Adam(0.05), loss=class_loss,
                  metrics=[class_accuracy], weighted_metrics=[TagCounter()])
    return model


def class_loss(y_true, y_pred):
    return keras.losses.sparse_categorical_crossentropy(y_true, y_pred[:, :3], from_logits=True)


def class_accuracy(y_true, y_pred):
    return keras.metrics.sparse_categorical_accuracy(y_true, y_pred[:, :3])


class EpochCounts(keras.callbacks.Callback):
    """The counts of `TagCounter` at the end of every epoch."""

    def __init__(self):
        super().__init__()
        self.epochs = []

    def on_epoch_end(self, epoch, logs=None):
        counts = _tag_counter(self.model).counts
        self.epochs.append(ops.convert_to_numpy(counts).tolist())


def _tag_counter(model):
    for metric in model.metrics:
        for sub in [metric, *getattr(metric, "metrics", [])]:
            if isinstance(sub, TagCounter):
                return sub
    raise LookupError("no TagCounter among the model's metrics")


def tag_of_path(path):
    return int(os.path.basename(path)[4:7])


def single(tagged_dir, fit_epochs=12):
    """Everything one device does, with a `fit` of `fit_epochs` epochs (12: enough
    to learn the classes); returns what the test checks."""
    result = {"backend": keras.backend.backend(), "fit_epochs": fit_epochs}
    train = dalipipe.make_dali_dataset(tagged_dir, seed=7, **OPTIONS)
    images, labels = train[0]
    result["types"] = [type(images).__module__.split(".")[0], type(labels).__module__.split(".")[0]]
    result["shapes"] = [list(images.shape), list(labels.shape)]
    result["dtypes"] = [str(images.dtype), str(labels.dtype)]
    result["devices"] = [str(getattr(t, "device", None)) for t in (images, labels)]
    result["len"] = len(train)
    result["class_names"] = train.class_names
    # Passes of the dataset (as Keras reads them) against the native epochs.
    native = dalipipe.make_dali_pipeline(tagged_dir, seed=7, **OPTIONS)
    passes = []
    for epoch in (0, 1):  # train[0] above is read alone: it counts no pass
        batches = [train[i] for i in range(len(train))]
        tags = [tag_of_batch(images) for images, _ in batches]
        passes.append(tags)
        result[f"pass_{epoch}_rows"] = [[tag, int(label)] for (images, labels), batch_tags in zip(
            batches, tags) for tag, label in zip(batch_tags, ops.convert_to_numpy(labels))]
        want = [tag_of(image) for batch, _ in native.epoch(epoch) for image in batch]
        result[f"pass_{epoch}_equals_native"] = sum(tags, []) == want
    result["pass_sizes"] = [len(batch) for batch in passes[0]]
    result["passes_differ"] = passes[0] != passes[1]

    model = tag_model()
    counts = EpochCounts()
    history = model.fit(train, epochs=fit_epochs, verbose=0, callbacks=[counts])
    result["fit_counts"] = counts.epochs
    result["fit_accuracy"] = history.history["class_accuracy"][-1]
    # With `steps_per_epoch` half of `len()`, one pass runs on over two Keras epochs.
    halves = EpochCounts()
    model.fit(train, epochs=4, steps_per_epoch=len(train) // 2, verbose=0, callbacks=[halves])
    result["half_epoch_counts"] = halves.epochs

    ordered = dalipipe.make_dali_dataset(tagged_dir, shuffle=False, **OPTIONS)
    evaluated = model.evaluate(ordered, verbose=0, return_dict=True)
    result["evaluate"] = {k: float(v) for k, v in evaluated.items()}
    counter = _tag_counter(model)
    result["evaluate_counts"] = ops.convert_to_numpy(counter.counts).tolist()
    result["evaluate_mislabeled"] = float(ops.convert_to_numpy(counter.mislabeled))

    images_only = dalipipe.make_dali_dataset(tagged_dir, labels=None, shuffle=False, **OPTIONS)
    predicted = model.predict(images_only, verbose=0)
    labels = np.array([CLASSES.index(os.path.basename(os.path.dirname(p)))
                       for p in images_only.file_paths])
    logits = predicted[:, :3].astype(np.float64)
    log_softmax = logits - np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1, keepdims=True)) \
        - logits.max(1, keepdims=True)
    result["numpy_loss"] = float(-np.mean(log_softmax[np.arange(len(labels)), labels]))
    result["predict_tags"] = np.round(predicted[:, -1]).astype(int).tolist()
    result["file_tags"] = [tag_of_path(p) for p in images_only.file_paths]
    result["tensorflow_loaded"] = "tensorflow" in sys.modules
    return result


def single_s3(tagged_dir):
    """`single` on a copy of `tagged_dir` in a local S3 server of this mode's own, its
    `fit` for 2 epochs: that `fit` learns is MODE `single`'s (a pass from the server
    costs about a second)."""
    from s3_server import copy_served

    with copy_served(tagged_dir, "s3://remote/tagged/") as uri:
        return single(uri, fit_epochs=2)


def tag_of_batch(images):
    return [tag_of(image) for image in ops.convert_to_numpy(images)]


def data_parallel(tagged_dir):
    import jax

    devices = jax.devices()
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices))
    train = dalipipe.make_dali_dataset(tagged_dir, seed=7, **OPTIONS)
    model = tag_model()
    counts = EpochCounts()
    model.fit(train, epochs=2, verbose=0, callbacks=[counts])
    evaluated = model.evaluate(train, verbose=0, return_dict=True)
    errors = []
    for options in (dict(OPTIONS, labels=None), dict(OPTIONS, batch_size=7)):
        try:
            dalipipe.make_dali_dataset(tagged_dir, **options)
        except ValueError as e:
            errors.append(str(e))
    return {"devices": len(devices), "fit_counts": counts.epochs, "errors": errors,
            "batch_sizes": sorted({int(train[i][0].shape[0]) for i in range(len(train))}),
            "evaluate_tags": float(evaluated["tags"]),
            "evaluate_mislabeled": float(ops.convert_to_numpy(_tag_counter(model).mislabeled)),
            "tensorflow_loaded": "tensorflow" in sys.modules}


def torch_distributed(tagged_dir):
    import torch.distributed as dist

    dist.init_process_group("gloo")
    result = {"rank": int(os.environ["RANK"])}
    for format in ("pydataset", "mapped", "grain"):
        train = dalipipe.make_dali_dataset(tagged_dir, seed=7, **OPTIONS,
                                           format="grain" if format == "grain" else "pydataset")
        if format == "mapped":  # `DALIPyDataset.map` reads the dataset's shard
            train = train.map(lambda images, labels, weights: (images, labels + 3, weights))
        runs = []
        for _ in range(2):
            seen = []
            batches = ([train[i] for i in range(len(train))] if format != "grain"
                       else list(train))
            for batch in batches:
                images, labels, weights = (ops.convert_to_numpy(t) for t in batch)
                seen += [[tag, int(label), float(w)]
                         for tag, label, w in zip(tag_of_batch(images), labels, weights)]
            runs.append(seen)
        result[f"{format}_runs"] = runs
    dist.destroy_process_group()
    return {**result, "tensorflow_loaded": "tensorflow" in sys.modules}


def targets(tagged_dir):
    """Raw and multi-hot table targets: their types, shapes, and whether each came
    with its image in a shuffled pass; `fit` runs on the raw ones."""
    import pandas as pd

    from helpers import tagged_targets

    table = pd.DataFrame(tagged_targets(tagged_dir))
    result = {}
    for label_columns, label_mode in ((["half", "square"], "raw"), ("tags", "multi_hot")):
        dataset = dalipipe.make_dali_dataset(table, label_columns=label_columns,
                                             label_mode=label_mode, seed=3, **OPTIONS)
        rows = []
        for i in range(len(dataset)):
            images, values = dataset[i]
            rows += [[tag, *target] for tag, target in
                     zip(tag_of_batch(images), ops.convert_to_numpy(values).tolist())]
        result[label_mode] = {"type": type(values).__module__.split(".")[0],
                              "dtype": str(values.dtype), "shape": list(values.shape),
                              "rows": rows, "class_names": dataset.class_names}
        if label_mode == "raw":
            model = keras.Sequential([keras.Input((12, 12, 3)), keras.layers.Flatten(),
                                      keras.layers.Dense(2)])
            model.compile("adam", "mse")
            result["fit_losses"] = model.fit(dataset, epochs=1, verbose=0).history["loss"]
    result["tensorflow_loaded"] = "tensorflow" in sys.modules
    return result


# MODE `recipes`'s `(augment, mix)` cases per backend: each recipe and each mixing on
# one backend, and each backend with int and with mixed (categorical) labels. What
# the backend changes is the batches' conversion, the same for every recipe; every
# recipe's and mixing's pass against the native epoch runs in pytest's process too
# (`test_recipes.py`, `test_mixing.py`).
RECIPE_CASES = {"torch": (("randaugment", None), ("autoaugment", None), (True, "mixup")),
                "jax": (("trivialaugment", None), ("randaugment", "cutmix"))}


def recipes(tagged_dir):
    """Per recipe and mixing of the backend's `RECIPE_CASES`: the first batch's
    types, shapes and dtypes, whether the pass equals the native epoch, and `fit`'s
    losses."""
    result = {}
    for augment, mix in RECIPE_CASES[keras.backend.backend()]:
        options = dict(OPTIONS, augment=augment, mix=mix, seed=11,
                       label_mode="categorical" if mix else "int")
        dataset = dalipipe.make_dali_dataset(tagged_dir, **options)
        images, labels = dataset[0]
        # dataset[0] alone counts no pass: the next pass read whole is epoch 0.
        native = list(dalipipe.make_dali_pipeline(tagged_dir, **options).epoch(0))
        passed = [[ops.convert_to_numpy(t) for t in dataset[i]] for i in range(len(dataset))]
        equal = all(np.array_equal(got, want) for batch, wanted in zip(passed, native)
                    for got, want in zip(batch, wanted))
        model = keras.Sequential([keras.Input((12, 12, 3)), keras.layers.Rescaling(1 / 255),
                                  keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(3)])
        loss = "categorical_crossentropy" if mix else "sparse_categorical_crossentropy"
        model.compile("adam", keras.losses.get({"class_name": loss,
                                                 "config": {"from_logits": True}}))
        history = model.fit(dataset, epochs=2, verbose=0)
        result[f"{augment}-{mix}"] = {
            "type": type(images).__module__.split(".")[0],
            "shapes": [list(images.shape), list(labels.shape)],
            "dtypes": [str(images.dtype), str(labels.dtype)],
            "equals_native": bool(equal), "losses": history.history["loss"]}
    result["tensorflow_loaded"] = "tensorflow" in sys.modules
    return result


def shards(tagged_dir):
    """`tagged_dir` written as WebDataset tar shards and read back by a brace pattern:
    two passes' rows `[tag, label]` (labels from the `.json` field "class"), whether
    each equals the native epoch, and `fit`'s per-tag counts."""
    import tempfile

    from dalipipe import sources
    from dalipipe.ranges.write import write_webdataset

    index = sources.index_source(tagged_dir)
    with tempfile.TemporaryDirectory() as folder:
        write_webdataset(index.file_paths, index.labels, index.class_names, folder, num_shards=4)
        pattern = os.path.join(folder, "train-{000000..000003}.tar")
        options = dict(OPTIONS, seed=5, labels="class")
        train = dalipipe.make_dali_dataset(pattern, **options)
        native = dalipipe.make_dali_pipeline(pattern, **options)
        result = {"class_names": train.class_names, "len": len(train)}
        for epoch in (0, 1):
            batches = [train[i] for i in range(len(train))]
            rows = [[tag, int(label)] for images, labels in batches
                    for tag, label in zip(tag_of_batch(images), ops.convert_to_numpy(labels))]
            want = [tag_of(image) for batch, _ in native.epoch(epoch) for image in batch]
            result[f"pass_{epoch}_rows"] = rows
            result[f"pass_{epoch}_equals_native"] = [r[0] for r in rows] == want
        counts = EpochCounts()
        tag_model().fit(train, epochs=1, verbose=0, callbacks=[counts])
        result["fit_counts"] = counts.epochs
    result["dense"] = dense_shards()
    result["tensorflow_loaded"] = "tensorflow" in sys.modules
    return result


def dense_shards():
    """Masks and boxes from tar shards (`masks=".seg.png"`, `boxes=".json"`, written by
    `write_webdataset` from the dense sample data of `test_masks.SAMPLE`), against the
    same images as a folder with the same seed: whether two passes of the backend's
    default format give the folder's batches, and a segmentation `fit`'s losses."""
    import tempfile

    from dalipipe.annotations.inputs import index_with_boxes, index_with_masks
    from dalipipe.options import Options
    from dalipipe.ranges.write import write_webdataset
    from dalipipe.sample_data import make_dense_sample_dataset
    from test_masks import SAMPLE

    base = dict(image_size=(48, 64), batch_size=4, seed=3, device="cpu", verbose=False,
                augment=True)
    found = {}
    with tempfile.TemporaryDirectory() as folder:
        dense, out = os.path.join(folder, "dense"), os.path.join(folder, "shards")
        make_dense_sample_dataset(dense, **SAMPLE)
        images = os.path.join(dense, "images")
        masks, _ = index_with_masks(images, Options(masks=os.path.join(dense, "masks"),
                                                    verbose=False))
        write_webdataset(masks.file_paths, None, None, os.path.join(out, "m"), num_shards=2,
                         mask_paths=masks.mask_paths)
        boxes, _ = index_with_boxes(images, Options(boxes=os.path.join(dense, "instances.json"),
                                                    bounding_box_format="xyxy", verbose=False))
        write_webdataset(boxes.file_paths, None, boxes.class_names, os.path.join(out, "b"),
                         num_shards=2, boxes=boxes.boxes)
        cases = {
            "masks": (os.path.join(out, "m", "train-{000000..000001}.tar"),
                      dict(masks=".seg.png"), dict(masks=os.path.join(dense, "masks"))),
            "boxes": (os.path.join(out, "b", "train-*.tar"),
                      dict(boxes=".json", bounding_box_format="xyxy"),
                      dict(boxes=os.path.join(dense, "instances.json"),
                           bounding_box_format="xyxy")),
        }
        for case, (pattern, from_shards, from_folder) in cases.items():
            train = dalipipe.make_dali_dataset(pattern, **base, **from_shards)
            folder_ds = dalipipe.make_dali_dataset(images, **base, **from_folder)
            equal = True
            for _ in range(2):
                for i in range(len(train)):
                    ours, theirs = keras.tree.flatten(train[i]), keras.tree.flatten(folder_ds[i])
                    equal &= len(ours) == len(theirs) and all(
                        np.array_equal(ops.convert_to_numpy(a), ops.convert_to_numpy(b))
                        for a, b in zip(ours, theirs))
            found[case] = {"equal_to_folder": bool(equal), "len": len(train),
                           "class_names": list(train.class_names)}
            if case == "masks":
                model = keras.Sequential([keras.Input((48, 64, 3)),
                                          keras.layers.Conv2D(4, 3, padding="same")])
                model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(
                    from_logits=True))
                history = model.fit(train, epochs=1, verbose=0)
                found[case]["losses"] = history.history["loss"]
    return found


def grain(tagged_dir):
    from grain_job import grain_job

    return grain_job(tagged_dir)


def report(tagged_dir):
    from report_job import report_job

    return report_job(tagged_dir)


def masks(tagged_dir):
    import masks_job

    return masks_job.sample_results()


def fits(tagged_dir):
    import epochs_job

    return epochs_job.fits(tagged_dir)


def rule(tagged_dir):
    import epochs_job

    return {format: epochs_job.rule(tagged_dir, format) for format in ("pydataset", "grain")}


def pipelines(tagged_dir):
    import epochs_job

    return epochs_job.pipelines(tagged_dir)


def plain_run(tagged_dir):
    import tempfile

    import epochs_job

    with tempfile.TemporaryDirectory() as folder:
        records = os.path.join(folder, "records.jsonl")
        epochs_job.run(tagged_dir, records, os.path.join(folder, "unused"), "plain")
        with open(records) as f:
            return f.read()


def cache(tagged_dir):
    """Per format and `cache` ("memory", a folder): whether each of two passes equals
    the native epoch without the cache (every output, exactly) and the image files
    each opened; then the samples that `fit` counts in two epochs."""
    import tempfile

    from helpers import FileOpens

    folders = [os.path.join(tagged_dir, name) for name in CLASSES]
    native = dalipipe.make_dali_pipeline(tagged_dir, seed=7, **OPTIONS)
    wanted = [[[np.asarray(t) for t in batch] for batch in native.epoch(e)] for e in range(2)]
    result = {}
    with tempfile.TemporaryDirectory() as folder:
        for format in ("pydataset", "grain"):
            for kept in ("memory", folder):
                dataset = dalipipe.make_dali_dataset(tagged_dir, seed=7, cache=kept,
                                                     format=format, **OPTIONS)
                equal, opens = [], []
                for epoch in range(2):
                    with FileOpens(folders) as opened:
                        batches = ([dataset[i] for i in range(len(dataset))]
                                   if format == "pydataset" else list(dataset))
                    opens.append(sum(opened.counts.values()))
                    got = [[ops.convert_to_numpy(t) for t in batch] for batch in batches]
                    equal.append(len(got) == len(wanted[epoch]) and all(
                        np.array_equal(a, b) for g, w in zip(got, wanted[epoch])
                        for a, b in zip(g, w)))
                name = f"{format}-{'memory' if kept == 'memory' else 'folder'}"
                result[name] = {"equal": equal, "opens": opens}
        model = tag_model()
        dataset = dalipipe.make_dali_dataset(tagged_dir, seed=7, cache=folder, **OPTIONS)
        result["fit_counts"] = _fit_counts(model, dataset)
    result["tensorflow_loaded"] = "tensorflow" in sys.modules
    return result


def _fit_counts(model, dataset):
    counts = EpochCounts()
    model.fit(dataset, epochs=2, verbose=0, callbacks=[counts])
    return counts.epochs


def map_mode(tagged_dir):
    from map_job import map_fits

    return map_fits(tagged_dir)


def kerashub(tagged_dir):
    from kerashub_job import kerashub_fits

    return kerashub_fits("grain")


def unet(tagged_dir):
    import tempfile

    from dense_recipes_job import mean_iou_rises

    with tempfile.TemporaryDirectory() as folder:
        return mean_iou_rises(folder, "pydataset")


MODES = {"single": single, "cache": cache, "data_parallel": data_parallel, "targets": targets,
         "torch_distributed": torch_distributed, "recipes": recipes, "grain": grain,
         "fits": fits, "plain_run": plain_run, "rule": rule, "report": report,
         "pipelines": pipelines,
         "shards": shards, "map": map_mode, "unet": unet, "kerashub": kerashub,
         "masks": masks, "single_s3": single_s3}


# Modes that import TensorFlow where it is installed (`masks`: its format "tf";
# `kerashub`: keras_hub imports it): they
# run last, so that `single` sees whether the others load it on torch and JAX.
LOAD_TENSORFLOW = ("masks", "kerashub")  # keras_hub imports TensorFlow


def run_modes(modes, tagged_dir):
    """`{mode: {"result": ..., "seconds": ...}}`, or `{"error": traceback, "seconds":
    ...}` for a mode that raised (`seconds`: the mode's wall time, for
    tests/README.md's costs)."""
    import time
    import traceback

    found = {}
    for mode in sorted(modes, key=lambda mode: mode in LOAD_TENSORFLOW):
        started = time.perf_counter()
        try:
            found[mode] = {"result": MODES[mode](tagged_dir)}
        except Exception:  # reported to the mode's tests
            found[mode] = {"error": traceback.format_exc()}
        found[mode]["seconds"] = round(time.perf_counter() - started, 1)
    return found


if __name__ == "__main__":
    if sys.argv[1] == "--modes":  # several modes, results by mode (`run_modes`)
        modes, tagged_dir, out = sys.argv[2:5]
        result = run_modes(modes.split(","), tagged_dir)
    else:
        mode, tagged_dir, out = sys.argv[1:4]
        result = MODES[mode](tagged_dir)
    with open(out, "w") as f:
        json.dump(result, f)
