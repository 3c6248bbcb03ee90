"""What reading TFRecord records by offset costs, against image files and against
DALI's own TFRecord reader.

dalipipe reads each record's bytes in Python (`os.pread`, see `dalipipe.tfrecord`)
and hands them to DALI, so that records can be shuffled and sharded per epoch like
files. This measures, on the benchmark images converted to TFRecord files, one epoch
of evaluation-style loading (decode, shorter side to 224 plus center crop, float32)
through each path, in turns, median of `--runs`:

- `files_tf`, `records_tf`: `make_dali_dataset` over the image folder or the TFRecords;
- `files_native`, `records_native`: the same graph run natively (no TensorFlow);
- `dali_reader_native`: `fn.readers.tfrecord` + the same operators (no shuffling).

    python benchmarks/tfrecord_read.py [--data data/bench] [--out benchmarks/results]
"""

import argparse
import glob
import json
import os
import statistics
import time

SIZE = 224


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="data/bench")
    parser.add_argument("--num-images", type=int, default=5000)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()

    from dalipipe import make_dali_dataset, make_dali_pipeline, make_sample_dataset, sources
    from dalipipe import tfrecord
    from dalipipe.bench.harness import machine_info

    if not os.path.isdir(args.data):
        make_sample_dataset(args.data, num_images=args.num_images, num_classes=10)
    records_dir = args.data.rstrip("/") + "-tfrecord"
    pattern = os.path.join(records_dir, "train-*.tfrecord")
    if not glob.glob(pattern):
        index = sources.index_source(args.data)
        tfrecord.write_tfrecords(index.file_paths, index.labels, index.class_names,
                                 records_dir, num_shards=args.shards, verbose=True)
    options = dict(image_size=(SIZE, SIZE), batch_size=args.batch_size, device="cpu",
                   crop_to_aspect_ratio=True, seed=0, normalization="imagenet", verbose=False)
    shards = sorted(glob.glob(pattern))

    def tf_epoch(source):
        dataset = make_dali_dataset(source, **options)
        return lambda: sum(len(images) for images, _ in dataset)

    def native_epoch(source):
        pipe = make_dali_pipeline(source, **options)
        epoch = [0]

        def run():
            epoch[0] += 1
            return sum(len(out[0]) for out in pipe.run(*pipe.epoch_inputs(epoch[0]),
                                                      copy_to_host=False))
        return run

    variants = {
        "files_tf": tf_epoch(args.data),
        "records_tf": tf_epoch(pattern),
        "files_native": native_epoch(args.data),
        "records_native": native_epoch(pattern),
        "dali_reader_native": dali_reader_epoch(shards, options, len(native_count(pattern))),
    }
    times = {name: [] for name in variants}
    counts = {}
    for run in range(args.runs + 1):  # the first round warms caches and is not kept
        for name, epoch in variants.items():
            start = time.perf_counter()
            counts[name] = epoch()
            if run:
                times[name].append(time.perf_counter() - start)
    result = {
        "machine": machine_info(),
        "images": counts,
        "batch_size": args.batch_size,
        "shards": len(shards),
        "runs": args.runs,
        "epoch_s": times,
        "images_per_s_median": {n: counts[n] / statistics.median(t) for n, t in times.items()},
    }
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "tfrecord_read.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
    for name, rate in result["images_per_s_median"].items():
        print(f"{name:20s} {rate:8.0f} images/s")
    print(f"wrote {path}")


def native_count(pattern):
    from dalipipe import sources

    return sources.index_source(pattern, labels=None).file_paths


def dali_reader_epoch(shards, options, num_records):
    """DALI's TFRecord reader feeding the same operators, one reader epoch per call."""
    import math

    from nvidia.dali import fn, pipeline_def, tfrecord as dali_tfrecord, types

    from dalipipe import tfrecord
    from dalipipe.graph import _central_window
    from dalipipe.options import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD, Options

    indexes = tfrecord.ensure_indexes(shards)
    batch_size = options["batch_size"]
    window = Options(image_size=options["image_size"], crop_to_aspect_ratio=True)

    @pipeline_def(batch_size=batch_size, num_threads=os.cpu_count(), device_id=None, seed=0)
    def graph():
        inputs = fn.readers.tfrecord(
            path=shards, index_path=indexes, name="reader", pad_last_batch=True,
            features={tfrecord.ENCODED: dali_tfrecord.FixedLenFeature((), dali_tfrecord.string, ""),
                      tfrecord.LABEL: dali_tfrecord.FixedLenFeature([1], dali_tfrecord.int64, -1)},
        )
        encoded = inputs[tfrecord.ENCODED]
        images = fn.decoders.image(encoded, device="cpu", output_type=types.RGB)
        images = fn.resize(images, size=options["image_size"], antialias=True,
                           **_central_window(encoded, window))
        return fn.crop_mirror_normalize(images, mean=list(IMAGENET_DEFAULT_MEAN),
                                        std=list(IMAGENET_DEFAULT_STD), dtype=types.FLOAT,
                                        output_layout="HWC"), inputs[tfrecord.LABEL]

    pipe = graph()
    pipe.build()
    steps = math.ceil(num_records / batch_size)

    def run():
        count = 0
        for _ in range(steps):
            images, _ = pipe.run()
            count += len(images)
        return min(count, num_records)

    return run


if __name__ == "__main__":
    main()
