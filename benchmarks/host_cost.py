"""The host's share: microseconds per sample of dalipipe's own host work, against the
very DALI graph it runs, run bare, on tiny images where DALI's own work is small; and
the time of an epoch's start for ImageNet's 1.28M samples.

At 19,000 images/s on a GPU the host has about 50 µs per sample for everything it does
in Python (docs/gpus.md, "Host budget and GPU memory"). Here, on 16x16 JPEGs, per
format (`tf`, `pydataset`, `grain`) and feature (classification, `augment`, a recipe,
`mix`, masks, boxes, TFRecord), three runs are timed in turn, one pass of each per
round (a warm-up round, then `--epochs` rounds):
- the dataset, read as Keras reads that format (`ds[i]` in order, or its iterator);
- `bare`: the dataset's own DALI graph (`ImagePipeline.build_dali_pipeline`: the same
  operators and external sources), built once and run with `Pipeline.run` in a loop,
  its inputs made beforehand (`epoch_inputs`, each batch's `load_samples`) and its
  outputs taken as NumPy views;
- `plugin` (format "tf" only): that graph in DALI's TensorFlow dataset
  (`DALIDatasetWithInputs`), fed from `tf.data` datasets of the inputs made
  beforehand, read eagerly as the dataset is.

Columns of each feature (per sample: µs per sample of the passes' samples after
their first batch, the steady state; the medians over the rounds):
- `us`: the dataset's wall time; `cpu_us`: the CPU time of the whole process (every
  thread); `python_us`: the CPU time outside DALI's own threads (its workers and
  executor, named "[DALI]...") and outside its C++ `Outputs` call in the thread that
  runs the pipeline (the dynamic executor runs some of the graph there:
  `count_dali_outputs`): dalipipe's Python, DALI's Python calls, the copies,
  `tf.data`'s threads; `first_ms`: the wall time of a pass's first batch (a "tf" pass
  builds its DALI pipeline there);
- `bare_...`, `plugin_...`: the same for the references;
- `host_us`, `host_cpu_us`, `host_python_us`, `host_first_ms`: the dataset minus its
  reference (`plugin` for "tf", else `bare`), the median of each round's difference;
  `host_python_us` is dalipipe's own host work (the inputs made per batch, the stat of
  checked files, the outputs converted to the backend's tensors, the pass machinery,
  the adapter), without the noise of DALI's decoding on shared cores;
  `host_python_us_iqr`: the quartiles of its differences;
- `plugin_own_python_us` ("tf"): `plugin` minus `bare`, the plugin's and `tf.data`'s
  own, not dalipipe's;
- `inputs_us`: dalipipe's Python alone, without DALI: an epoch's inputs
  (`ImagePipeline.epoch_inputs`) and its batches' `load_samples`, in one thread (in
  a pass, the next epoch's inputs are built in the background: `dalipipe.ahead`);
- `budget_us`, `within_budget`: the budget, and whether `host_python_us` is within it;
- `plain_us` (per format): a DALI pipeline with its own file reader (decode, resize,
  normalize; `THREADS` threads), for scale only.
And `epoch_start`: for `--epoch-samples` samples of fake paths (no file is read),
seconds of `epoch_inputs` (the order, the draws, and with boxes their placement)
built in place (`first_s`, `later_s`) and ahead, in the background (`ahead_s`; the
first pass's from when the dataset is made, `first_ahead_s`), and what a later pass's
start waits for in the reading thread (`wait_s`, `pass_start`).

Each format runs in a process of its own (`tf` on Keras's TensorFlow backend,
`pydataset` and `grain` on torch). Timings on a shared machine are noisy: the JSON
records the load average before and after. Budgets (issue 45): at most 10 µs per
sample for classification (every feature without masks or boxes) and 20 µs with
masks or boxes, a later epoch's start (`wait_s`) of at most 0.5 s.

    python benchmarks/host_cost.py [--quick] [--out benchmarks/results/host-cost-cpu/host_cost.json]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMAGE_SIZE = (16, 16)
FEATURES = ("classification", "augment", "recipe", "mix", "masks", "boxes", "tfrecord")
FORMATS = {"tf": "tensorflow", "pydataset": "torch", "grain": "torch"}  # -> Keras backend
BUDGET_US = {"classification": 10, "masks": 20, "boxes": 20}
BUDGET_EPOCH_START_S = 0.5
BOXES_PER_IMAGE = 4
THREADS = 2
QUICK = dict(images=64, batch_size=16, epochs=2, epoch_samples=131_072)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="64 images, batch 16, 2 timed epochs, epoch starts of 131,072 "
                             "samples (the values not given)")
    parser.add_argument("--images", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=9,
                        help="timed rounds (a pass of each), after one warm-up")
    parser.add_argument("--epoch-samples", type=int, default=1_281_167)
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--features", default=",".join(FEATURES))
    parser.add_argument("--out", default=os.path.join(REPO_ROOT, "benchmarks", "results",
                                                      "host-cost-cpu", "host_cost.json"))
    parser.add_argument("--child", help=argparse.SUPPRESS)  # JSON: one format's measurements
    args = parser.parse_args(argv)
    if args.quick:  # the values not given
        for name, value in QUICK.items():
            if getattr(args, name) == parser.get_default(name):
                setattr(args, name, value)
    sys.path.insert(0, REPO_ROOT)
    if args.child:
        print(json.dumps(measure_format(**json.loads(args.child))))
        return 0
    started, load_before = time.perf_counter(), os.getloadavg()
    from dalipipe.bench.harness import machine_info
    from dalipipe.utils import child_env

    formats = [f for f in args.formats.split(",") if f]
    features = [f for f in args.features.split(",") if f]
    with tempfile.TemporaryDirectory() as root:
        data = make_data(root, args.images)
        runs = {}
        for name in formats:
            task = dict(format=name, data=data, features=features, epochs=args.epochs,
                        batch_size=args.batch_size)
            done = subprocess.run([sys.executable, os.path.abspath(__file__), "--child",
                                   json.dumps(task)], capture_output=True, text=True,
                                  env=child_env(KERAS_BACKEND=FORMATS[name],
                                                CUDA_VISIBLE_DEVICES=""), timeout=1800)
            if done.returncode:
                runs[name] = {"error": done.stderr.strip().splitlines()[-1:]}
                continue
            runs[name] = json.loads(done.stdout.strip().splitlines()[-1])
    starts = epoch_starts(args.epoch_samples, args.batch_size)
    report = {
        "what": __doc__.splitlines()[0], "machine": machine_info(),
        "load_average": {"before": load_before, "after": os.getloadavg()},
        "seconds": round(time.perf_counter() - started, 1),
        "settings": {k: v for k, v in vars(args).items() if k not in ("child", "out")},
        "image_size": IMAGE_SIZE, "threads": THREADS, "boxes_per_image": BOXES_PER_IMAGE,
        "budgets": {"us_per_sample": BUDGET_US, "epoch_start_s": BUDGET_EPOCH_START_S},
        "formats": runs, "epoch_start": starts,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    print(summary(report))
    print(f"wrote {args.out}")
    return 0


# ---------------------------------------------------------------------------- data


def make_data(root, count):
    """`count` 16x16 JPEGs in two class folders; the same images in a flat folder with a
    greyscale PNG mask each and a COCO JSON of `BOXES_PER_IMAGE` boxes each; and a
    TFRecord file of the class folders' images. Returns their paths (a dict)."""
    from PIL import Image

    from dalipipe.tfrecord.write import write_tfrecords

    rng = np.random.default_rng(0)
    height, width = IMAGE_SIZE
    paths, labels, flat = [], [], os.path.join(root, "flat")
    masks = os.path.join(root, "masks")
    for folder in (flat, masks, *(os.path.join(root, "classes", c) for c in "ab")):
        os.makedirs(folder, exist_ok=True)
    images, annotations = [], []
    for i in range(count):
        pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        path = os.path.join(root, "classes", "ab"[i % 2], f"{i:05d}.jpg")
        Image.fromarray(pixels).save(path, quality=90)
        Image.fromarray(pixels).save(os.path.join(flat, f"{i:05d}.jpg"), quality=90)
        Image.fromarray(rng.integers(0, 3, (height, width), dtype=np.uint8)).save(
            os.path.join(masks, f"{i:05d}.png"))
        paths.append(path)
        labels.append(i % 2)
        images.append({"id": i, "file_name": f"{i:05d}.jpg", "width": width, "height": height})
        for j in range(BOXES_PER_IMAGE):
            x, y = (float(v) for v in rng.uniform(0, 8, 2))
            annotations.append({"id": i * BOXES_PER_IMAGE + j, "image_id": i, "iscrowd": 0,
                                "category_id": 1 + j % 2, "bbox": [x, y, 6.0, 6.0],
                                "area": 36.0})
    coco = os.path.join(root, "instances.json")
    with open(coco, "w") as f:
        json.dump({"images": images, "annotations": annotations,
                   "categories": [{"id": 1, "name": "one"}, {"id": 2, "name": "two"}]}, f)
    records = os.path.join(root, "records")
    write_tfrecords(paths, labels, ["a", "b"], records)
    return {"classes": os.path.join(root, "classes"), "files": sorted(paths), "flat": flat,
            "masks": masks, "coco": coco, "tfrecords": os.path.join(records, "*.tfrecord")}


def feature_source(feature, data):
    """`(source, options)` of `make_dali_dataset` for `feature`."""
    options = dict(image_size=IMAGE_SIZE, seed=0, verbose=False, device="cpu",
                   num_threads=THREADS, check=None)
    source, extra = data["classes"], {}
    if feature == "augment":
        extra = dict(augment=True)
    elif feature == "recipe":
        extra = dict(augment="randaugment")
    elif feature == "mix":
        extra = dict(augment=True, mix="mixup", label_mode="categorical")
    elif feature == "masks":
        source, extra = data["flat"], dict(masks=data["masks"], augment=True)
    elif feature == "boxes":
        source, extra = data["flat"], dict(boxes=data["coco"], augment=True, check="structure",
                                           bounding_box_format="xyxy")
    elif feature == "tfrecord":
        source = data["tfrecords"]
    return source, {**options, **extra}


# ------------------------------------------------------------------ one format's run


def measure_format(*, format, data, features, epochs, batch_size):
    """µs per sample of the plain pipeline and of each feature read in `format`, with
    its references, in this process (Keras's backend set by the parent)."""
    count_dali_outputs()
    results = {"plain_us": plain_us(data["files"], batch_size, epochs), "features": {}}
    for feature in features:
        try:
            results["features"][feature] = measure_feature(format, feature, data, epochs,
                                                           batch_size)
        except Exception as e:  # one feature's failure leaves the others measured
            results["features"][feature] = {"error": f"{type(e).__name__}: {e}"[:300]}
    return results


def measure_feature(format, feature, data, epochs, batch_size):
    """The feature's passes read in `format` and its references, timed in turn, one
    pass of each per round (a warm-up round, then `epochs`): the medians of their
    steady state (µs per sample after each pass's first batch) and of their first
    batch (ms)."""
    from dalipipe import make_dali_dataset

    source, options = feature_source(feature, data)
    dataset = make_dali_dataset(source, batch_size=batch_size, format=format, **options)
    pipe = dataset.image_pipeline
    runs = {"": lambda: timed_epoch(format, dataset), "bare_": BareRun(pipe).epoch}
    if format == "tf":
        runs["plugin_"] = PluginRun(pipe).epoch
    times = {name: [] for name in runs}
    for _ in range(epochs + 1):
        for name, run in runs.items():
            times[name].append(run())
    result = {"samples": len(pipe.file_paths)}
    rest = len(pipe.file_paths) - pipe.batch_size  # the samples after each pass's first batch
    per_round = {}  # (run, key) -> the value of each timed round
    keys = ("us", "cpu_us", "python_us")  # `PassClock.times`'s steady state
    for name, passes in times.items():
        passes = passes[1:]  # each `PassClock.times`: first batch, then wall, CPU, outside DALI
        for clock, key in enumerate(keys):
            per_round[name, key] = np.array([p[1 + clock] * 1e6 / rest for p in passes])
        per_round[name, "first_ms"] = np.array([p[0] * 1e3 for p in passes])
        for key in (*keys, "first_ms"):
            result[name + key] = round(float(np.median(per_round[name, key])), 2)
    reference = "plugin_" if format == "tf" else "bare_"
    for key in (*keys, "first_ms"):  # the medians of each round's difference
        differences = per_round["", key] - per_round[reference, key]
        result["host_" + key] = round(float(np.median(differences)), 2)
        if key == "python_us":
            low, high = np.percentile(differences, [25, 75])
            result["host_python_us_iqr"] = [round(float(low), 2), round(float(high), 2)]
    if format == "tf":
        result["plugin_own_python_us"] = round(float(np.median(
            per_round["plugin_", "python_us"] - per_round["bare_", "python_us"])), 2)
    result["inputs_us"] = round(inputs_us(pipe, epochs), 2)
    result["budget_us"] = BUDGET_US.get(feature, BUDGET_US["classification"])
    result["within_budget"] = result["host_python_us"] <= result["budget_us"]
    return result


def timed_epoch(format, dataset):
    """`PassClock.times` of a pass over `dataset`, read as Keras reads it."""
    clock = PassClock(dataset.image_pipeline.steps)
    if format == "pydataset":
        for i in range(len(dataset)):
            dataset[i]
            clock.batch()
    else:  # a `tf.data.Dataset` or a Grain dataset: each iterator is a pass
        for _ in dataset:
            clock.batch()
    return clock.times()


_IN_OUTPUTS = [0.0]  # CPU seconds of Python's threads inside DALI's `Outputs` call


def count_dali_outputs():
    """Counts in `_IN_OUTPUTS` the CPU time that the threads calling DALI's
    `Pipeline.run` (a pass's feed thread, `BareRun`'s loop) spend inside its C++
    `Outputs` call: DALI's dynamic executor runs some of the graph's work in the
    waiting thread (on RandAugment, about 30 µs per sample here), DALI's work that
    lands in one or the other by timing, in the dataset and its reference alike.
    The plugin's calls, from TensorFlow's C++ threads, are not counted."""
    from nvidia.dali.pipeline import Pipeline

    outputs = Pipeline._outputs

    def timed_outputs(self, *args, **kwargs):
        started = time.thread_time()
        try:
            return outputs(self, *args, **kwargs)
        finally:
            _IN_OUTPUTS[0] += time.thread_time() - started

    Pipeline._outputs = timed_outputs


def clocks():
    """A reading of the clocks: `(wall, CPU, DALI's, in Outputs)`:
    `time.perf_counter()`, the CPU time of the process (every thread), `{thread id:
    CPU ns}` of DALI's own threads (named "[DALI]...": its workers and executor), from
    Linux's `/proc/self/task` (empty elsewhere), and the CPU seconds of other threads
    inside DALI's `Outputs` call so far (`count_dali_outputs`)."""
    dali = {}
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        tasks = []
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                if not f.read().startswith("[DALI]"):
                    continue
            with open(f"/proc/self/task/{task}/schedstat") as f:
                dali[task] = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):  # a thread that ended meanwhile
            continue
    return time.perf_counter(), time.process_time(), dali, _IN_OUTPUTS[0]


class PassClock:
    """The clocks of a pass of `batches` batches: read whole (`clocks()`) as it
    starts, after its first batch and after its last one, and not in between, so
    that reading them (a few `/proc` files per DALI thread) weighs on no batch of
    the steady state."""

    def __init__(self, batches):
        self.readings = [clocks()]
        self.batches = batches
        self.read = 0

    def batch(self):
        """Called after each batch."""
        self.read += 1
        if self.read in (1, self.batches):
            self.readings.append(clocks())

    def times(self):
        """`(first, wall, cpu, python)`: the wall seconds of the first batch, then for
        the batches after it the seconds of wall time, of CPU time (every thread) and
        of CPU time outside DALI's threads and DALI's `Outputs` call (dalipipe's
        Python, DALI's Python calls, the copies, `tf.data`'s threads). A DALI thread
        counts where it is alive after the first batch and at the end."""
        if self.read != self.batches:
            raise RuntimeError(f"The pass gave {self.read} batches, not {self.batches}")
        (start, *_), (wall, cpu, dali, out), (wall2, cpu2, dali2, out2) = \
            self.readings[0], self.readings[1], self.readings[-1]
        inside = sum(dali2[t] - dali[t] for t in dali2.keys() & dali.keys()) / 1e9
        return wall - start, wall2 - wall, cpu2 - cpu, cpu2 - cpu - inside - (out2 - out)


def epoch_batches(pipe, epoch=1):
    """The inputs of `pipe`'s epoch `epoch`, batch by batch, made beforehand:
    `{input name: [batch, ...]}` (`"samples"`: `load_samples` of each batch)."""
    sample_ids, random, weights = pipe.epoch_inputs(epoch)
    rows = [slice(i, i + pipe.batch_size) for i in range(0, len(sample_ids), pipe.batch_size)]
    batches = {"samples": [pipe.load_samples(sample_ids[r]) for r in rows]}
    if "random" in pipe.input_names:
        batches["random"] = [np.ascontiguousarray(random[r]) for r in rows]
    if "weights" in pipe.input_names:
        batches["weights"] = [np.ascontiguousarray(weights[r]) for r in rows]
    return batches


class BareRun:
    """The dataset's own DALI graph (`ImagePipeline.build_dali_pipeline`, the same
    operators and external sources) run bare: `Pipeline.run` in a loop, its inputs
    made beforehand and handed over as they are, its outputs taken as NumPy views
    (`as_tensor`), no copy. An epoch of the dataset minus one of these is dalipipe's
    Python: the inputs made per batch, the outputs converted, the passes, the adapter."""

    def __init__(self, pipe):
        from nvidia.dali.pipeline import do_not_convert

        self.batches = epoch_batches(pipe)
        self.current = {}
        self.pipe = pipe.build_dali_pipeline(feed=do_not_convert(self.source))
        self.pipe.build()

    def source(self, name):
        from nvidia.dali.pipeline import do_not_convert

        return do_not_convert(lambda: next(self.current[name]))  # StopIteration ends the epoch

    def epoch(self):
        """`PassClock.times` of a pass."""
        self.current = {name: iter(batches) for name, batches in self.batches.items()}
        clock = PassClock(len(self.batches["samples"]))
        self.pipe.reset()
        while True:
            try:
                outputs = self.pipe.run()
            except StopIteration:
                return clock.times()
            for out in outputs:
                np.asarray(out.as_tensor())
            clock.batch()


class PluginRun:
    """The dataset's own DALI graph in DALI's TensorFlow dataset
    (`DALIDatasetWithInputs`), fed from `tf.data` datasets of inputs made beforehand
    (`from_tensor_slices(...).batch`; TFRecord records one per sample, as dalipipe
    feeds them), read eagerly as the dataset is: its epoch minus a `BareRun`'s is the
    plugin's and `tf.data`'s own cost, an epoch of the "tf" format minus this one
    dalipipe's."""

    def __init__(self, pipe):
        import tensorflow as tf

        from dalipipe import feed as packing
        from dalipipe.install import import_dali_tf
        from dalipipe.tf_keras_dataset import keras_structure, output_shapes

        dali_tf = import_dali_tf()
        batches, size = epoch_batches(pipe), pipe.batch_size
        self.steps = len(batches["samples"])
        per_sample = pipe.feeds_bytes and len(pipe.file_paths) % size == 0
        inputs = {}
        for name, values in batches.items():
            if name == "samples" and pipe.feeds_bytes:
                records = [r for batch in values for r in batch]
                if per_sample:
                    lengths = np.array([len(r) for r in records], np.int64)
                    flat, ends = tf.constant(np.concatenate(records)), np.cumsum(lengths)
                    inputs[name] = tf.data.Dataset.from_tensor_slices(
                        (ends - lengths, ends)).map(lambda a, b: flat[a:b])
                    continue
                values = [packing.pad_records(np.concatenate(records[i:i + size]),
                                              np.array([len(r) for r in records[i:i + size]]))
                          for i in range(0, len(records), size)]
            width = max(v.shape[1] for v in values) if values[0].ndim == 2 else None
            rows = np.concatenate([v if width is None else
                                   np.pad(v, ((0, 0), (0, width - v.shape[1])))
                                   for v in values])
            inputs[name] = tf.data.Dataset.from_tensor_slices(rows).batch(size)
        _, order = keras_structure(pipe)
        shapes = output_shapes(pipe)
        with tf.device("/cpu:0"):
            self.dataset = dali_tf.experimental.DALIDatasetWithInputs(
                pipeline=pipe.build_dali_pipeline(order=order),
                input_datasets={
                    name: dali_tf.experimental.Input(
                        data, batch=not (name == "samples" and per_sample))
                    for name, data in inputs.items()},
                output_dtypes=tuple(tf.as_dtype(pipe.output_dtypes[i]) for i in order),
                output_shapes=tuple(tf.TensorShape(shapes[i]) for i in order),
                batch_size=size, num_threads=pipe.options.num_threads, device_id=None,
                prefetch_queue_depth=pipe.options.prefetch_queue_depth)

    def epoch(self):
        """`PassClock.times` of a pass."""
        clock = PassClock(self.steps)
        for _ in self.dataset:
            clock.batch()
        return clock.times()


def inputs_us(pipe, epochs):
    """µs per sample of an epoch's inputs and its batches' `load_samples`, no DALI."""
    times = []
    for epoch in range(epochs):
        start = time.perf_counter()
        sample_ids = pipe.epoch_inputs(epoch)[0]
        for first in range(0, len(sample_ids), pipe.batch_size):
            pipe.load_samples(sample_ids[first:first + pipe.batch_size])
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6 / max(len(pipe.file_paths), 1)


def plain_us(files, batch_size, epochs):
    """µs per sample of an epoch of a plain DALI pipeline: file reader, decode, resize,
    normalize, `THREADS` threads, read with `Pipeline.run`."""
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def(batch_size=batch_size, num_threads=THREADS, device_id=None, seed=0,
                  prefetch_queue_depth=2)
    def plain():
        encoded, labels = fn.readers.file(files=list(files), labels=[0] * len(files),
                                          random_shuffle=True, name="reader")
        images = fn.decoders.image(encoded, device="cpu", output_type=types.RGB)
        images = fn.resize(images, size=list(IMAGE_SIZE))
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="HWC",
                                          mean=[0.0] * 3, std=[1.0] * 3)
        return images, labels

    pipe = plain()
    pipe.build()
    steps = -(-len(files) // batch_size)
    times = []
    for _ in range(epochs + 1):
        start = time.perf_counter()
        for _ in range(steps):
            images, labels = pipe.run()
            images.as_array(), labels.as_array()
        times.append(time.perf_counter() - start)
    return round(statistics.median(times[1:]) * 1e6 / (steps * batch_size), 2)


# ---------------------------------------------------------------------- epoch starts


def epoch_starts(count, batch_size):
    """Seconds of `ImagePipeline.epoch_inputs` for `count` samples (fake paths, no
    file read): the order, the draws, and with boxes (`BOXES_PER_IMAGE` each, made
    as flat arrays) their placement. The first epoch's with boxes also makes the
    boxes' table; the second's is the start of every later epoch."""
    from dalipipe import sources
    from dalipipe.annotations.placement import BoxTable
    from dalipipe.options import Options
    from dalipipe.pipeline import ImagePipeline

    rng = np.random.default_rng(0)
    paths = [f"/fake/{i:07d}.jpg" for i in range(count)]
    labels = (np.arange(count) % 1000).astype(np.int32)
    sizes = rng.integers(200, 600, (count, 2)).astype(np.float32)
    corners = rng.uniform(0, 150, (count * BOXES_PER_IMAGE, 2))
    table = BoxTable(np.concatenate([corners, corners + 40], 1),
                     np.zeros(count * BOXES_PER_IMAGE, np.int32),
                     np.arange(count, dtype=np.int64) * BOXES_PER_IMAGE,
                     np.full(count, BOXES_PER_IMAGE, np.int64), sizes)
    cases = {
        "classification": dict(),
        "augment": dict(augment=True),
        "recipe": dict(augment="randaugment"),
        "mix": dict(augment=True, mix="mixup", label_mode="categorical"),
        "boxes": dict(augment=True, boxes="fake.json", label_mode=None, max_boxes=10,
                      bounding_box_format="xyxy"),
        "boxes_recipe": dict(augment="randaugment", boxes="fake.json", label_mode=None,
                             max_boxes=10, bounding_box_format="xyxy"),
    }
    found = {"samples": count}
    for name, changes in cases.items():
        options = Options(image_size=(224, 224), batch_size=batch_size, seed=0,
                          **changes).resolved()
        index = sources.Index(paths, None if changes.get("label_mode", 1) is None else labels,
                              None if changes.get("label_mode", 1) is None
                              else [str(c) for c in range(1000)])
        pipe = ImagePipeline(index, options)
        pipe._boxes = table if "boxes" in changes else None  # the table, without 1.28M entries
        seconds = []
        for epoch in range(2):
            start = time.perf_counter()
            pipe.epoch_inputs(epoch)
            seconds.append(round(time.perf_counter() - start, 3))
        found[name] = {"first_s": seconds[0], "later_s": seconds[1],
                       **pass_start(pipe)}
        found[name]["within_budget"] = found[name]["wait_s"] <= BUDGET_EPOCH_START_S
    return found


def pass_start(pipe):
    """The first pass's inputs, built from when the dataset is made, and a later
    pass's start in steady state, as the adapters run it: a training pass of epoch 1
    starts (`passes.Cursor.start_pass`, which has epoch 2's inputs built ahead,
    `dalipipe.ahead`) and runs longer than that build (an epoch of 1.28M samples
    lasts about a minute at 19,000 images/s); then the pass of epoch 2 takes them.

    Returns:
        `first_ahead_s`: seconds from the dataset's cursor made (which has the first
        pass's inputs built ahead) to those inputs built, what a first pass that
        starts at once waits for (to within the 1 ms ticks); `ahead_s`: seconds of
        epoch 2's build in the background thread; `stall_s`: the longest the reading
        thread waited for Python's lock meanwhile (ticks of `time.sleep(0.001)`);
        `wait_s`: seconds of the reading thread's `inputs_ahead.get` at the start of
        epoch 2's pass.
    """
    from dalipipe import passes

    started = time.perf_counter()
    cursor = passes.Cursor(pipe)  # as a dataset is made: epoch 0's inputs built ahead
    while (0, 0, True) not in pipe.inputs_ahead.built:
        time.sleep(0.001)
    first = time.perf_counter() - started
    cursor.set_position(1)
    while (1, 0, True) not in pipe.inputs_ahead.built:  # a resumed position's, let finish
        time.sleep(0.01)
    started = time.perf_counter()
    cursor.start_pass(None)  # epoch 1's pass: epoch 2's inputs built meanwhile
    stall, last = 0.0, time.perf_counter()
    while (2, 0, True) not in pipe.inputs_ahead.built:
        time.sleep(0.001)
        now = time.perf_counter()
        stall, last = max(stall, now - last), now
    ahead = time.perf_counter() - started
    cursor.read_whole(1)
    epoch, start, _ = cursor.start_pass(None)  # epoch 2's pass: also has epoch 3's built
    started = time.perf_counter()
    pipe.inputs_ahead.get(epoch, start)
    wait = time.perf_counter() - started
    while (3, 0, True) not in pipe.inputs_ahead.built:  # the next build, let finish
        time.sleep(0.01)
    return {"first_ahead_s": round(first, 3), "ahead_s": round(ahead, 3),
            "stall_s": round(stall, 4), "wait_s": round(wait, 4)}


def summary(report):
    lines = [f"host cost, µs per sample ({report['image_size'][0]}x{report['image_size'][1]} "
             f"JPEGs, {report['threads']} threads; load {report['load_average']})"]
    for name, run in report["formats"].items():
        if "error" in run:
            lines.append(f"  {name}: failed: {run['error']}")
            continue
        lines.append(f"  {name}: plain DALI {run['plain_us']} µs; per feature: the dataset's "
                     "µs (CPU µs outside DALI's threads), its reference's, dalipipe's own "
                     "[quartiles], "
                     "inputs alone")
        for feature, r in run["features"].items():
            reference = "plugin" if name == "tf" else "bare"
            lines.append(f"    {feature:15s} " + (r["error"] if "error" in r else
                         f"{r['us']:7.1f} ({r['python_us']:.1f}), {reference} "
                         f"{r[reference + '_us']:.1f} ({r[reference + '_python_us']:.1f}), "
                         f"host {r['host_python_us']:.1f} {r['host_python_us_iqr']} of "
                         f"{r['budget_us']}, inputs {r['inputs_us']}"))
    starts = report["epoch_start"]
    lines.append(f"  epoch start, {starts['samples']} samples, built in place / ahead "
                 "(longest stall of the reading thread meanwhile) / the pass's wait / the "
                 "first pass's, built from the dataset's making: " +
                 ", ".join(f"{k} {v['later_s']} / {v['ahead_s']} ({v['stall_s']}) / "
                           f"{v['wait_s']} / {v['first_ahead_s']} s"
                           for k, v in starts.items() if k != "samples"))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
