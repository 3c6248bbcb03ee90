"""Where the CPU time of the stretch workload goes, and what each lever changes.

The stretch workload: the whole image resized to `--image-size`, normalized with
ImageNet's mean and std, float32 NHWC, batch `--batch-size` (Keras's
`image_dataset_from_directory` default). Four parts, all in one process:

- `graphs`: DALI graphs run natively (no TensorFlow), fed as dalipipe feeds them
  (an external source of `"samples"` rows, `fn.io.file.read`), cut after each stage
  (read, + decode, + resize, + normalize), and the levers, each a variant of the
  full graph: the executor, queue depth, threads, the fast IDCT, fused operators,
  the output dtype, batch size. Every variant is built anew for each measurement:
  a warm-up of `WARM_UP` batches, then `--batches` timed batches (the queue is
  full before and after, so the timed work is the timed batches'). The variants
  run in turn, the order rotated every round.
- `paths`: dalipipe's own paths over the same files, per epoch: the graph run
  natively (`make_dali_pipeline(...).epoch()`, NumPy out), through TensorFlow
  (`make_dali_dataset`, iterated: each epoch with its iterator and DALI pipeline),
  the inputs alone (native `load_samples`; the `tf.data` inputs of DALI's plugin,
  `EpochFeed`), and the output copy (a `np.copyto` of a float32 batch).
- `tf`: the same work in `tf.data` as Keras's loader does it, cut after each
  stage: each operator's cost in TensorFlow, against DALI's.
- `fixed`: dataset creation, split into indexing, the check (its cache warm),
  `image_pipelines` (index, check and `ImagePipeline`), `to_dataset` (the
  `tf.data` graph and DALI's dataset), and the whole `make_dali_dataset`; the first
  creation in the process is timed apart, since it pays TensorFlow's first
  tracing. And each epoch's start: the time to the first batch.

Wall time on a loaded machine moves with the load; CPU seconds of the process per
image (`cpu_ms_per_image`) much less. Writes JSON with the machine and the load
average before and after each part.

    python benchmarks/stretch_breakdown.py --data data/r1000 --rounds 3 \\
        --out benchmarks/results/stretch_breakdown.json
"""

import argparse
import json
import os
import resource
import statistics
import time

import numpy as np

WARM_UP = 3


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def feed_batches(directory, batch_size):
    """The `"samples"` batches of the folder's files, as dalipipe packs them."""
    from dalipipe import sources

    index = sources.index_source(directory)
    rows = sources.encode_samples(index.file_paths, index.labels)
    return [rows[i:i + batch_size] for i in range(0, len(rows) - batch_size + 1, batch_size)]


def graph(batches, *, size, batch_size, stage="normalize", threads=2, prefetch=2,
          exec_dynamic=None, antialias=False, fast_idct=False, fused=None, dtype="float32"):
    """A built DALI pipeline of the stretch graph up to `stage` ("read", "decode",
    "resize", "normalize"). `fused`: None (resize, then crop_mirror_normalize),
    "resize_crop_mirror" (`fn.resize_crop_mirror`, then normalize), or
    "float_resize" (`fn.resize` to float32, then crop_mirror_normalize)."""
    from nvidia.dali import fn, pipeline_def, types

    from dalipipe.options import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

    extra = {} if exec_dynamic is None else dict(exec_dynamic=exec_dynamic)

    @pipeline_def(batch_size=batch_size, num_threads=threads, device_id=None, seed=0,
                  prefetch_queue_depth=prefetch, **extra)
    def pipe():
        samples = fn.external_source(source=batches, cycle=True, dtype=types.UINT8, ndim=1,
                                     batch=True)
        encoded = fn.io.file.read(samples[4:])
        if stage == "read":
            return encoded
        images = fn.decoders.image(encoded, device="cpu", output_type=types.RGB,
                                   use_fast_idct=fast_idct)
        if stage == "decode":
            return images
        resize = dict(size=(size, size), antialias=antialias, interp_type=types.INTERP_LINEAR)
        if fused == "resize_crop_mirror":
            images = fn.resize_crop_mirror(images, crop=(size, size), **resize)
        elif fused == "float_resize":
            images = fn.resize(images, dtype=types.FLOAT, **resize)
        else:
            images = fn.resize(images, **resize)
        if stage == "resize":
            return images
        return fn.crop_mirror_normalize(
            images, mean=list(IMAGENET_DEFAULT_MEAN), std=list(IMAGENET_DEFAULT_STD),
            dtype={"float32": types.FLOAT, "float16": types.FLOAT16,
                   "uint8": types.UINT8}[dtype], output_layout="HWC")

    built = pipe()
    built.build()
    return built


def graph_variants(threads, batch_size):
    """name -> `graph` arguments. The full graph with `antialias=False` (Keras's
    work) is the base of the levers."""
    base = dict(threads=threads)
    return {
        "stage: read (external source + io.file.read)": dict(base, stage="read"),
        "stage: + decode": dict(base, stage="decode"),
        "stage: + resize": dict(base, stage="resize"),
        "stage: + normalize (full graph)": dict(base),
        "stage: + resize, antialiased": dict(base, stage="resize", antialias=True),
        "stage: + normalize, antialiased": dict(base, antialias=True),
        "lever: exec_dynamic=False": dict(base, exec_dynamic=False),
        "lever: exec_dynamic=True": dict(base, exec_dynamic=True),
        "lever: prefetch 1": dict(base, prefetch=1),
        "lever: prefetch 3": dict(base, prefetch=3),
        "lever: threads 1": dict(base, threads=1),
        f"lever: threads {threads + 1}": dict(base, threads=threads + 1),
        f"lever: threads {threads * 2}": dict(base, threads=threads * 2),
        "lever: use_fast_idct": dict(base, fast_idct=True),
        "lever: use_fast_idct, decode only": dict(base, stage="decode", fast_idct=True),
        "lever: fn.resize_crop_mirror, then normalize": dict(base, fused="resize_crop_mirror"),
        "lever: fn.resize to float32, then normalize": dict(base, fused="float_resize"),
        "lever: float16 output": dict(base, dtype="float16"),
        "lever: uint8 output (no normalization)": dict(base, dtype="uint8"),
        f"lever: batch {batch_size * 2}": dict(base, batch=batch_size * 2),
    }


def measure_graph(batches_of, arguments, *, size, batch_size, count):
    """Wall and CPU seconds of `count` batches of a new pipeline after its warm-up."""
    arguments = dict(arguments)
    batch = arguments.pop("batch", batch_size)
    begun = time.perf_counter()
    pipe = graph(batches_of(batch), size=size, batch_size=batch, **arguments)
    built = time.perf_counter() - begun
    for _ in range(WARM_UP):
        pipe.run()
    batches = max(1, count * batch_size // batch)
    cpu, start = cpu_seconds(), time.perf_counter()
    for _ in range(batches):
        pipe.run()
    wall, cpu = time.perf_counter() - start, cpu_seconds() - cpu
    del pipe
    images = batches * batch
    return {"ms_per_image": 1000 * wall / images, "cpu_ms_per_image": 1000 * cpu / images,
            "build_s": built}


def rounds_of(variants, measure, rounds):
    """Each variant measured `rounds` times, in turn, the order rotated per round;
    the medians per variant."""
    names = list(variants)
    runs = {name: [] for name in names}
    for number in range(rounds):
        shift = number % len(names)
        for name in names[shift:] + names[:shift]:
            runs[name].append(measure(variants[name]))
    rows = {}
    for name, found in runs.items():
        rows[name] = {key: statistics.median(r[key] for r in found) for key in found[0]
                      if not isinstance(found[0][key], list)}
        rows[name]["runs"] = found
    return rows


def options(size, batch_size, threads, antialias=False):
    return dict(image_size=(size, size), batch_size=batch_size, antialias=antialias,
                normalization="imagenet", verbose=False, device="cpu", num_threads=threads)


def epoch_measure(run_epoch):
    """Wall, CPU and first-batch seconds of one epoch of `run_epoch()` (an iterator
    of batches whose first element is the images)."""
    cpu, start = cpu_seconds(), time.perf_counter()
    first, images = None, 0
    for batch in run_epoch():
        if first is None:
            first = time.perf_counter() - start
        images += int(batch[0].shape[0])
    wall, cpu = time.perf_counter() - start, cpu_seconds() - cpu
    return {"ms_per_image": 1000 * wall / images, "cpu_ms_per_image": 1000 * cpu / images,
            "first_batch_s": first, "epoch_s": wall}


def path_variants(directory, size, batch_size, threads):
    """name -> a callable measuring one epoch of that path."""
    import tensorflow as tf

    from dalipipe import make_dali_dataset, make_dali_pipeline
    from dalipipe.tf_inputs import EpochFeed

    made = {"native": make_dali_pipeline(directory, **options(size, batch_size, threads))}
    made["native_antialias"] = make_dali_pipeline(
        directory, **options(size, batch_size, threads, antialias=True))
    made["tf"] = make_dali_dataset(directory, **options(size, batch_size, threads))
    made["tf_antialias"] = make_dali_dataset(
        directory, **options(size, batch_size, threads, antialias=True))
    epochs = {name: iter(range(10**6)) for name in made}
    pipe = made["native"]
    feed = EpochFeed(pipe)
    samples = feed.dataset("samples")
    output = np.empty((batch_size, size, size, 3), np.float32)
    target = np.empty_like(output)

    def native(name):
        return lambda: epoch_measure(lambda: made[name].epoch(next(epochs[name])))

    def through_tf(name):
        return lambda: epoch_measure(lambda: iter(made[name]))

    def inputs_native():
        def run():
            ids = pipe.epoch_inputs(next(epochs["native"]))[0]
            for i in range(0, len(ids), batch_size):
                yield (pipe.load_samples(ids[i:i + batch_size]),)
        return epoch_measure(run)

    def inputs_tf():
        return epoch_measure(lambda: ((tf.zeros([batch_size]),) for _ in samples))

    def output_copy():
        def run():
            for _ in range(pipe.steps):
                np.copyto(target, output)
                yield (output,)
        return epoch_measure(run)

    for run in (native("native"), through_tf("tf"), through_tf("tf_antialias")):
        run()  # a warm-up epoch of each: the page cache, the first iterator
    return {
        "dalipipe native (make_dali_pipeline(...).epoch(), NumPy out)": native("native"),
        "dalipipe native, antialiased": native("native_antialias"),
        "dalipipe through TensorFlow (make_dali_dataset, iterated)": through_tf("tf"),
        "dalipipe through TensorFlow, antialiased": through_tf("tf_antialias"),
        "inputs alone, native (epoch_inputs + load_samples per batch)": inputs_native,
        "inputs alone, tf.data (EpochFeed's samples input, one pass)": inputs_tf,
        "output copy alone (np.copyto of one float32 batch)": output_copy,
    }


def tf_variants(directory, size, batch_size):
    """name -> a callable measuring one epoch of a `tf.data` pipeline cut after a
    stage, built as `image_dataset_from_directory` builds its own: a parallel `map`
    (AUTOTUNE) of read, `decode_image` (libjpeg-turbo's fast IDCT, TensorFlow's
    default), bilinear `resize` without antialiasing, then batches, a normalizing
    `map` over them and `prefetch`."""
    import tensorflow as tf

    from dalipipe import sources
    from dalipipe.options import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

    paths = sources.index_source(directory).file_paths
    mean = tf.constant(IMAGENET_DEFAULT_MEAN, tf.float32)
    std = tf.constant(IMAGENET_DEFAULT_STD, tf.float32)

    def dataset(stage, dct_method=""):
        def load(path):
            data = tf.io.read_file(path)
            if stage == "read":
                return tf.strings.length(data)
            if dct_method:
                image = tf.io.decode_jpeg(data, channels=3, dct_method=dct_method)
            else:
                image = tf.io.decode_image(data, channels=3, expand_animations=False)
            if stage == "decode":
                return tf.shape(image)
            return tf.image.resize(image, (size, size), method="bilinear")

        found = tf.data.Dataset.from_tensor_slices(paths).map(
            load, num_parallel_calls=tf.data.AUTOTUNE).batch(batch_size)
        if stage == "normalize":
            found = found.map(lambda images: (images - mean) / std,
                              num_parallel_calls=tf.data.AUTOTUNE)
        return found.prefetch(tf.data.AUTOTUNE)

    made = {
        "tf.data: read": dataset("read"),
        "tf.data: + decode (fast IDCT, TensorFlow's default)": dataset("decode"),
        "tf.data: + decode, accurate IDCT (INTEGER_ACCURATE)": dataset("decode",
                                                                       "INTEGER_ACCURATE"),
        "tf.data: + resize (bilinear, no antialiasing)": dataset("resize"),
        "tf.data: + normalize (Keras's loader's work)": dataset("normalize"),
    }

    def one(found):
        return lambda: epoch_measure(lambda: ((b,) for b in found))

    for found in made.values():
        one(found)()  # warm-up
    return {name: one(found) for name, found in made.items()}


def fixed_costs(directory, size, batch_size, threads, rounds):
    """Creation, split, in seconds (medians of `rounds`), after the first creation."""
    from dalipipe import checks, make_dali_dataset, sources, tfrecord
    from dalipipe.options import Options
    from dalipipe.pipeline import image_pipelines
    from dalipipe.tf_dataset import to_dataset

    arguments = options(size, batch_size, threads)
    start = time.perf_counter()
    make_dali_dataset(directory, **arguments)
    result = {"first make_dali_dataset in the process": time.perf_counter() - start}
    resolved = Options(**arguments)

    def index():
        return sources.index_source(directory)

    def check():
        return checks.check_index(index(), check="structure", read_records=tfrecord.load_encoded,
                                  verbose=False, device="cpu", device_id=0, sizes={})

    pipeline = image_pipelines(directory, resolved)
    steps = {
        "index (sources.index_source)": index,
        "index + check, cache warm (checks.check_index)": check,
        "image_pipelines (index, check, ImagePipeline)": lambda: image_pipelines(directory,
                                                                                 resolved),
        "to_dataset (tf.data inputs, DALI's dataset)": lambda: to_dataset(pipeline),
        "make_dali_dataset (all of it)": lambda: make_dali_dataset(directory, **arguments),
    }
    times = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            begun = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - begun)
    result.update({name: statistics.median(found) for name, found in times.items()})
    result["runs"] = times
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="data/r1000")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--batches", type=int, default=20, help="timed batches per graph")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--parts", default="fixed,graphs,paths,tf")
    parser.add_argument("--out", default="benchmarks/results/stretch_breakdown.json")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from dalipipe.bench.harness import machine_info

    size, batch_size = args.image_size, args.batch_size
    report = {"machine": machine_info(), "data": args.data, "image_size": size,
              "batch_size": batch_size, "threads": args.threads, "rounds": args.rounds,
              "timed_batches": args.batches, "load_average": {}}
    parts = args.parts.split(",")
    if "fixed" in parts:  # first: its first creation is the process's
        report["load_average"]["fixed_before"] = os.getloadavg()
        report["fixed"] = fixed_costs(args.data, size, batch_size, args.threads, args.rounds)
        report["load_average"]["fixed_after"] = os.getloadavg()
        for name, value in report["fixed"].items():
            if name != "runs":
                print(f"{name:55s} {value:.3f} s", flush=True)
    if "graphs" in parts:
        cache = {}

        def batches_of(batch):
            if batch not in cache:
                cache[batch] = feed_batches(args.data, batch)
            return cache[batch]

        report["load_average"]["graphs_before"] = os.getloadavg()
        report["graphs"] = rounds_of(
            graph_variants(args.threads, batch_size),
            lambda arguments: measure_graph(batches_of, arguments, size=size,
                                            batch_size=batch_size, count=args.batches),
            args.rounds)
        report["load_average"]["graphs_after"] = os.getloadavg()
        for name, row in report["graphs"].items():
            print(f"{name:55s} {row['ms_per_image']:6.3f} ms/img "
                  f"{row['cpu_ms_per_image']:6.3f} CPU ms/img", flush=True)
    if "paths" in parts:
        report["load_average"]["paths_before"] = os.getloadavg()
        report["paths"] = rounds_of(path_variants(args.data, size, batch_size, args.threads),
                                    lambda run: run(), args.rounds)
        report["load_average"]["paths_after"] = os.getloadavg()
        for name, row in report["paths"].items():
            print(f"{name:62s} {row['ms_per_image']:6.3f} ms/img "
                  f"{row['cpu_ms_per_image']:6.3f} CPU ms/img, first batch "
                  f"{row['first_batch_s']:.3f} s", flush=True)
    if "tf" in parts:
        report["load_average"]["tf_before"] = os.getloadavg()
        report["tf"] = rounds_of(tf_variants(args.data, size, batch_size), lambda run: run(),
                                 args.rounds)
        report["load_average"]["tf_after"] = os.getloadavg()
        for name, row in report["tf"].items():
            print(f"{name:62s} {row['ms_per_image']:6.3f} ms/img "
                  f"{row['cpu_ms_per_image']:6.3f} CPU ms/img", flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
