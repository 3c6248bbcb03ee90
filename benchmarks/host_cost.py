"""The host's share: microseconds per sample of dalipipe's own host work, against a plain
DALI pipeline, on tiny images where DALI's own work is small; and the time of an
epoch's start for ImageNet's 1.28M samples.

At 19,000 images/s on a GPU the host has about 50 µs per sample for everything it does
in Python (docs/gpus.md, "Host budget and GPU memory"). Here, on 16x16 JPEGs:
- `plain`: a DALI pipeline alone (file reader, decode, resize, normalize), run with
  `Pipeline.run`: µs per sample of an epoch, the reference;
- per format (`tf`, `pydataset`, `grain`) and feature (classification, `augment`, a
  recipe, `mix`, masks, boxes, TFRecord): µs per sample of an epoch read as Keras
  reads it, and `host_us`, that minus `plain` (it also counts what the feature adds
  to DALI's graph: a crop, a recipe's operators, a mask's decode);
- `inputs_us`: dalipipe's Python work alone, without DALI: the epoch's inputs
  (`ImagePipeline.epoch_inputs`) and each batch's `load_samples`;
- `epoch_start`: for `--epoch-samples` samples of fake paths (no file is read), seconds
  of `epoch_inputs` (the order, the draws, and with boxes their placement) built in
  place (`first_s`, `later_s`) and ahead, in the background (`ahead_s`; the first
  pass's from when the dataset is made, `first_ahead_s`), and what a later pass's
  start waits for in the reading thread (`wait_s`, `pass_start`).

Each format runs in a process of its own (`tf` on Keras's TensorFlow backend,
`pydataset` and `grain` on torch), one warm-up epoch then `--epochs` timed ones
(median). Timings on a shared machine are noisy: the JSON records the load average
before and after. Budgets (issue 45): at most 10 µs per sample for classification and
20 µs with masks or boxes, a later epoch's start (`wait_s`) of at most 0.5 s.

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
    parser.add_argument("--images", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=5, help="timed epochs, after one warm-up")
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
    import numpy as np
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
    """µs per sample of the plain pipeline and of each feature read in `format`, in
    this process (Keras's backend set by the parent)."""
    plain = plain_us(data["files"], batch_size, epochs)
    results = {"plain_us": plain, "features": {}}
    for feature in features:
        try:
            results["features"][feature] = measure_feature(format, feature, data, epochs,
                                                           batch_size, plain)
        except Exception as e:  # one feature's failure leaves the others measured
            results["features"][feature] = {"error": f"{type(e).__name__}: {e}"[:300]}
    return results


def measure_feature(format, feature, data, epochs, batch_size, plain):
    from dalipipe import make_dali_dataset

    source, options = feature_source(feature, data)
    dataset = make_dali_dataset(source, batch_size=batch_size, format=format, **options)
    samples = len(dataset.file_paths)
    times = [timed_epoch(format, dataset) for _ in range(epochs + 1)][1:]
    epoch_us = statistics.median(times) * 1e6 / samples
    pipe = dataset.image_pipeline if hasattr(dataset, "image_pipeline") else None
    result = {"samples": samples, "us": round(epoch_us, 2),
              "host_us": round(epoch_us - plain, 2),
              "inputs_us": None if pipe is None else round(inputs_us(pipe, epochs), 2)}
    budget = BUDGET_US.get(feature, BUDGET_US["classification"] if feature in (
        "classification", "tfrecord") else None)
    if budget is not None:
        result["budget_us"], result["within_budget"] = budget, result["host_us"] <= budget
    return result


def timed_epoch(format, dataset):
    start = time.perf_counter()
    if format == "pydataset":
        for i in range(len(dataset)):
            dataset[i]
    else:  # a `tf.data.Dataset` or a Grain dataset: each iterator is a pass
        for _ in dataset:
            pass
    return time.perf_counter() - start


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
    import numpy as np

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
        lines.append(f"  {name}: plain DALI {run['plain_us']} µs")
        for feature, r in run["features"].items():
            lines.append(f"    {feature:15s} " + (r["error"] if "error" in r else
                         f"{r['us']:8.1f} µs, host {r['host_us']:7.1f}, inputs {r['inputs_us']}"))
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
