"""The goal ratio: dalipipe against Keras's own loader, called as users call it.

For each folder and image size, each loader runs in its own process, the loaders in
turn round by round (the order rotated every round, so that the machine's load
falls on all of them), after one warm-up round that is not counted (it fills the
page cache and dalipipe's check cache). A process imports TensorFlow, Keras and
dalipipe (not timed), then times the dataset's creation and two whole epochs
iterated in Python, and the CPU time of the process over them. The stretch
workload: the whole image resized to `image_size`, normalized with ImageNet's mean
and std, float32 NHWC batches.

Loaders:
- `keras`: `keras.utils.image_dataset_from_directory(directory, image_size=...,
  batch_size=...)`, then `.map(normalize, num_parallel_calls=AUTOTUNE)` over its
  batches and `.prefetch(AUTOTUNE)`: bilinear, no antialiasing.
- `dalipipe_equal`: `make_dali_dataset(directory, image_size=..., batch_size=...,
  antialias=False, normalization="imagenet")`: the same work.
- `dalipipe_antialias`: the same with `antialias=True` (an antialiased resize:
  more work than Keras's).

Both shuffle (their default). The ratio of a loader is Keras's median time over its
median time: above 1.0 it is faster than Keras. Writes JSON with the machine, the
versions, and the load average before and after every process.

    python benchmarks/keras_ratio.py --data data/r240 --data data/r1000 \\
        --image-size 224 --rounds 3 --out benchmarks/results/keras_ratio.json
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOADERS = ("keras", "dalipipe_equal", "dalipipe_antialias")
IMAGENET_MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
IMAGENET_STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)
EPOCHS = 2


def settings(loader, size, batch_size):
    """How `loader` is called, as a line for the report."""
    if loader == "keras":
        return (f"keras.utils.image_dataset_from_directory(directory, image_size=({size}, "
                f"{size}), batch_size={batch_size}, verbose=False).map(normalize, "
                "num_parallel_calls=AUTOTUNE).prefetch(AUTOTUNE)")
    antialias = loader == "dalipipe_antialias"
    return (f"make_dali_dataset(directory, image_size=({size}, {size}), batch_size="
            f"{batch_size}, antialias={antialias}, normalization='imagenet', verbose=False)")


def creator(loader, directory, size, batch_size):
    """A function that creates `loader`'s dataset (its modules imported now)."""
    if loader == "keras":
        import keras
        import tensorflow as tf

        mean = tf.constant(IMAGENET_MEAN, tf.float32)
        std = tf.constant(IMAGENET_STD, tf.float32)

        def normalize(images, labels):
            return (images - mean) / std, labels

        def create():
            dataset = keras.utils.image_dataset_from_directory(
                directory, image_size=(size, size), batch_size=batch_size, verbose=False)
            return dataset.map(normalize, num_parallel_calls=tf.data.AUTOTUNE).prefetch(
                tf.data.AUTOTUNE)

        return create
    import dalipipe.tf_dataset  # noqa: F401  (an import: DALI's TensorFlow plugin)
    from dalipipe import make_dali_dataset

    def create():
        return make_dali_dataset(directory, image_size=(size, size), batch_size=batch_size,
                                 antialias=loader == "dalipipe_antialias",
                                 normalization="imagenet", verbose=False)

    return create


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def child(loader, directory, size, batch_size):
    """One measurement in this process: a dict of seconds."""
    create = creator(loader, directory, size, batch_size)
    cpu, start = cpu_seconds(), time.perf_counter()
    dataset = create()
    created = time.perf_counter()
    result = {"create_s": created - start, "epochs": []}
    for _ in range(EPOCHS):
        begun = time.perf_counter()
        first, images = None, 0
        for batch_images, _labels in dataset:
            if first is None:
                first = time.perf_counter() - begun
                shape, dtype = tuple(batch_images.shape), batch_images.dtype.name
            images += int(batch_images.shape[0])
        result["epochs"].append({"seconds": time.perf_counter() - begun,
                                 "first_batch_s": first, "images": images})
    result["total_s"] = time.perf_counter() - start
    result["cpu_s"] = cpu_seconds() - cpu
    result["first_batch"] = {"shape": list(shape), "dtype": dtype}
    return result


def run_child(loader, directory, size, batch_size):
    load_before = os.getloadavg()
    done = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child", loader, "--data", directory,
         "--image-size", str(size), "--batch-size", str(batch_size)],
        capture_output=True, text=True, cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (REPO_ROOT, os.environ.get("PYTHONPATH")) if p),
             "TF_CPP_MIN_LOG_LEVEL": "2"})
    if done.returncode:
        raise RuntimeError(f"{loader} on {directory}:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result.update(load_before=load_before, load_after=os.getloadavg())
    return result


def machine():
    """The machine (`dalipipe.bench.harness.machine_info`: CPU model, usable cores,
    versions) with the cores `/proc/cpuinfo` lists."""
    from dalipipe.bench.harness import machine_info

    found = machine_info()
    found["cores_listed"] = os.cpu_count()
    return found


def summarize(runs):
    """Per loader: medians of the runs, and its ratio to Keras (Keras's time / its)."""
    summary = {}
    for loader in LOADERS:
        mine = [r for r in runs if r["loader"] == loader]
        if not mine:
            continue
        summary[loader] = {
            "median_total_s": statistics.median(r["total_s"] for r in mine),
            "median_create_s": statistics.median(r["create_s"] for r in mine),
            "median_epoch_s": [statistics.median(r["epochs"][e]["seconds"] for r in mine)
                               for e in range(EPOCHS)],
            "median_first_batch_s": [statistics.median(r["epochs"][e]["first_batch_s"]
                                                       for r in mine) for e in range(EPOCHS)],
            "median_cpu_s": statistics.median(r["cpu_s"] for r in mine),
        }
    if "keras" in summary:
        for loader, row in summary.items():
            row["ratio_vs_keras"] = summary["keras"]["median_total_s"] / row["median_total_s"]
    return summary


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", action="append", required=True,
                        help="a folder of class subfolders; repeatable")
    parser.add_argument("--image-size", type=int, action="append")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loaders", default=",".join(LOADERS))
    parser.add_argument("--out", default="benchmarks/results/keras_ratio.json")
    parser.add_argument("--child", choices=LOADERS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = args.image_size or [224]
    if args.child:
        print(json.dumps(child(args.child, args.data[0], sizes[0], args.batch_size)))
        return
    loaders = args.loaders.split(",")
    sys.path.insert(0, REPO_ROOT)
    report = {"what": __doc__.split("\n\n")[0], "machine": machine(),
              "batch_size": args.batch_size, "rounds": args.rounds, "epochs": EPOCHS,
              "settings": {}, "cases": []}
    started = time.time()
    for directory in args.data:
        images = sum(name.lower().endswith((".jpg", ".jpeg", ".png")) for _, _, files
                     in os.walk(directory, followlinks=True) for name in files)
        for size in sizes:
            case = {"data": directory, "images": images, "image_size": size, "runs": []}
            for loader in loaders:
                report["settings"][loader] = settings(loader, size, args.batch_size)
                run_child(loader, directory, size, args.batch_size)  # warm-up, not counted
            for number in range(args.rounds):
                shift = number % len(loaders)
                for loader in loaders[shift:] + loaders[:shift]:
                    result = run_child(loader, directory, size, args.batch_size)
                    result.update(loader=loader, round=number + 1)
                    case["runs"].append(result)
                    epochs = ", ".join(f"{e['seconds']:.2f}" for e in result["epochs"])
                    print(f"{directory} {size} round {number + 1} {loader:20s} "
                          f"create {result['create_s']:.2f} s, epochs {epochs} s, "
                          f"total {result['total_s']:.2f} s, cpu {result['cpu_s']:.2f} s, "
                          f"load {result['load_before'][0]:.2f}", flush=True)
            case["summary"] = summarize(case["runs"])
            for loader, row in case["summary"].items():
                print(f"  {loader:20s} median {row['median_total_s']:.2f} s, "
                      f"ratio vs keras {row['ratio_vs_keras']:.2f}x", flush=True)
            report["cases"].append(case)
    report["seconds"] = time.time() - started
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
