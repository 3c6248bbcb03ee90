"""Where dalipipe's CPU time goes, and what each performance lever changes.

Runs DALI pipelines natively (no TensorFlow) on the benchmark images:
- a per-stage breakdown: read, + decode, + crop/resize, + normalize, then dalipipe's
  own graph (its input path: external source + `fn.io.file.read`), then the same
  through DALI's TensorFlow plugin (the hand-off);
- levers, each a variant of the full graph: resize antialiasing, ROI decode of the
  center crop, DALI's own random crop operator, threads, batch size, prefetch
  depth, the dynamic executor, output dtype.

Each variant runs alone: a warm-up epoch, then `rounds` timed epochs back to back;
images/s is the median. (Round-robin timing would be wrong here: a DALI pipeline keeps
filling its prefetch queue in the background while the next one is timed.) Writes
JSON.

    python benchmarks/performance.py [--data data/bench] [--num-images 2000] [--rounds 5]
"""

import argparse
import json
import math
import os
import statistics
import time
from functools import partial

import numpy as np

SIZE, RESIZE = 224, 256


def stage_pipeline(files, *, workload, stage, batch_size, threads, prefetch=2,
                   exec_dynamic=False, antialias=True, dtype="float32", roi_decode=False,
                   dali_random_crop=False, fast_idct=False, resize_crop_mirror=False):
    """A DALI pipeline over `files` up to `stage` (read, decode, resize, normalize)."""
    import nvidia.dali.math as dmath
    from nvidia.dali import fn, pipeline_def, types

    from dalipipe.options import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
    from dalipipe.sampling import RANDOM_AREA, RANDOM_ASPECT_RATIO, random_resized_crop_window

    @pipeline_def(batch_size=batch_size, num_threads=threads, device_id=None, seed=0,
                  prefetch_queue_depth=prefetch, exec_dynamic=exec_dynamic)
    def graph():
        encoded, _ = fn.readers.file(files=list(files))
        if stage == "read":
            return encoded
        shape = fn.peek_image_shape(encoded, dtype=types.FLOAT)
        h, w = shape[0], shape[1]
        if workload == "train" and dali_random_crop:
            images = fn.decoders.image_random_crop(
                encoded, device="cpu", output_type=types.RGB, random_area=list(RANDOM_AREA),
                random_aspect_ratio=list(RANDOM_ASPECT_RATIO), num_attempts=10)
            roi = {}
        elif workload == "train":
            u = [fn.random.uniform(range=[0.0, 1.0]) for _ in range(4)]
            x, y, cw, ch = random_resized_crop_window(h, w, u, dmath)
            images = fn.decoders.image_slice(
                encoded, fn.stack(x, y), fn.stack(cw, ch),
                device="cpu", output_type=types.RGB, normalized_anchor=False,
                normalized_shape=False, axis_names="WH")
            roi = {}
        elif workload == "stretch":
            images = fn.decoders.image(encoded, device="cpu", output_type=types.RGB,
                                       use_fast_idct=fast_idct)
            roi = {}
        else:
            side = dmath.min(h, w) * (SIZE / RESIZE)
            top, left = (h - side) / 2, (w - side) / 2
            if roi_decode:
                images = fn.decoders.image_slice(
                    encoded, fn.stack(left, top), fn.stack(side, side), device="cpu",
                    output_type=types.RGB, normalized_anchor=False, normalized_shape=False,
                    axis_names="WH")
                roi = {}
            else:
                images = fn.decoders.image(encoded, device="cpu", output_type=types.RGB)
                roi = dict(roi_start=fn.stack(top, left), roi_end=fn.stack(top + side, left + side),
                           roi_relative=False)
        if stage == "decode":
            return images
        if resize_crop_mirror:
            images = fn.resize_crop_mirror(images, size=(SIZE, SIZE), antialias=antialias,
                                           crop=(SIZE, SIZE))
        else:
            images = fn.resize(images, size=(SIZE, SIZE), antialias=antialias, **roi)
        if stage == "resize":
            return images
        mirror = fn.random.coin_flip() if workload == "train" else 0
        return fn.crop_mirror_normalize(
            images, mirror=mirror, mean=list(IMAGENET_DEFAULT_MEAN), std=list(IMAGENET_DEFAULT_STD),
            dtype={"float32": types.FLOAT, "float16": types.FLOAT16, "uint8": types.UINT8}[dtype],
            output_layout="HWC")

    pipe = graph()
    pipe.build()
    iterations = math.ceil(len(files) / batch_size)

    def epoch():
        for _ in range(iterations):
            pipe.run()
        return iterations * batch_size

    return epoch


def dalipipe_epoch(make, files, labels, *, workload, batch_size, threads):
    """An epoch of a dalipipe bench loader (`dalipipe.bench.loaders.make_dalipipe*`)."""
    loader = make(list(files), list(labels), workload=workload, batch_size=batch_size,
                  threads=threads, seed=0)

    def epoch():
        return sum(len(images) for images, *_ in loader.epoch())

    return epoch


def variants(files, labels, workload, threads, batch_size, with_tf):
    from dalipipe.bench import loaders

    stage = dict(workload=workload, batch_size=batch_size, threads=threads)
    full = dict(stage, stage="normalize")
    result = {
        "stage: read": lambda: stage_pipeline(files, stage="read", **stage),
        "stage: + decode": lambda: stage_pipeline(files, stage="decode", **stage),
        "stage: + crop/resize": lambda: stage_pipeline(files, stage="resize", **stage),
        "stage: + normalize (full graph, file reader)": lambda: stage_pipeline(files, **full),
        "dalipipe graph (external source + io.file.read), native": lambda: dalipipe_epoch(
            partial(loaders.make_dalipipe_native, copy_to_host=False), files, labels,
            **stage),
        "lever: resize without antialiasing": lambda: stage_pipeline(files, antialias=False, **full),
        f"lever: threads {threads * 2}": lambda: stage_pipeline(files, **{**full, "threads": threads * 2}),
        "lever: threads 1": lambda: stage_pipeline(files, **{**full, "threads": 1}),
        f"lever: batch {batch_size // 2}": lambda: stage_pipeline(files, **{**full, "batch_size": batch_size // 2}),
        f"lever: batch {batch_size * 2}": lambda: stage_pipeline(files, **{**full, "batch_size": batch_size * 2}),
        "lever: prefetch 1": lambda: stage_pipeline(files, prefetch=1, **full),
        "lever: prefetch 4": lambda: stage_pipeline(files, prefetch=4, **full),
        "lever: exec_dynamic": lambda: stage_pipeline(files, exec_dynamic=True, **full),
        "lever: float16 output": lambda: stage_pipeline(files, dtype="float16", **full),
        "lever: uint8 output (normalize in the model)": lambda: stage_pipeline(files, dtype="uint8", **full),
    }
    if workload == "eval":
        result["lever: ROI decode of the center crop"] = lambda: stage_pipeline(files, roi_decode=True, **full)
    elif workload == "stretch":
        result["lever: use_fast_idct (libjpeg-turbo's fast integer IDCT)"] = lambda: stage_pipeline(
            files, fast_idct=True, **full)
        result["lever: fn.resize_crop_mirror instead of fn.resize"] = lambda: stage_pipeline(
            files, resize_crop_mirror=True, **full)
    else:
        result["lever: decoders.image_random_crop (DALI's RNG)"] = lambda: stage_pipeline(
            files, dali_random_crop=True, **full)
    if with_tf:
        result["dalipipe through the TF plugin (make_dali_dataset)"] = lambda: dalipipe_epoch(
            loaders.make_dalipipe, files, labels, **stage)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="data/bench")
    parser.add_argument("--num-images", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workload", default="all", choices=("train", "eval", "stretch", "all"))
    parser.add_argument("--no-tf", action="store_true", help="skip the TensorFlow hand-off")
    parser.add_argument("--out", default="benchmarks/results/performance.json")
    args = parser.parse_args()

    from dalipipe import sources
    from dalipipe.bench.harness import machine_info

    from dalipipe.sample_data import sample_data_unless_in_use

    sample_data_unless_in_use(args.data, num_images=max(args.num_images, 5000), num_classes=10)
    index = sources.index_source(args.data)
    step = max(1, len(index) // args.num_images)
    files = index.file_paths[::step][: args.num_images]
    labels = index.labels[::step][: args.num_images].tolist()
    report = {"machine": machine_info(), "images": len(files), "batch_size": args.batch_size,
              "threads": args.threads, "rounds": args.rounds, "workloads": {}}
    workloads = ("train", "eval", "stretch") if args.workload == "all" else (args.workload,)
    for workload in workloads:
        rows = {}
        for name, make in variants(files, labels, workload, args.threads, args.batch_size,
                                   not args.no_tf).items():
            epoch = make()
            epoch()  # warm-up epoch
            times = []
            for _ in range(args.rounds):
                start = time.perf_counter()
                count = epoch()
                times.append(time.perf_counter() - start)
            del epoch  # its threads stop before the next variant runs
            median = statistics.median(times)
            rows[name] = {"images_per_s": count / median, "ms_per_image": 1000 * median / count,
                          "run_s": times}
            print(f"{workload:5s} {name:60s} {rows[name]['images_per_s']:8.0f} img/s "
                  f"{rows[name]['ms_per_image']:6.3f} ms/img", flush=True)
        report["workloads"][workload] = rows
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
