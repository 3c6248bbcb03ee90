"""Bytes that TFRecord batches move from `tf.data` into DALI, against their records.

For TFRecord files such as `dalipipe convert` writes (made from `--images` in
`--data` when it holds none), per batch of an epoch:

- `records`: the sum of the batch's encoded images (the bytes that must move);
- `per_sample`: what dalipipe feeds DALI, one tensor per record (label, length, the
  image), read off the adapter's own `"samples"` input;
- `dense`: one tensor of the batch, each record padded to the batch's longest, as a
  GPU pipeline takes an epoch that ends in a partial batch (see
  `dalipipe.tf_inputs.feed_parts`).

On the CPU DALI reads the fed tensors in place; on a GPU they are copied to the GPU
(`copy_to_device`) and back to DALI's CPU external source (`FeedInputs` in DALI's
`dali_dataset_op.cc`): `gpu_bytes_each_way`. It also measures one batch
of `--batch-size` records of which one is a `--outlier-mb` JPEG, and, with `--time`,
the seconds of one CPU epoch through `make_dali_dataset`. Writes JSON to `--out`.

    python benchmarks/tfrecord_feed.py --images data/bench --data /tmp/bench-tfrecord \\
        [--batch-size 256] [--outlier-mb 2] [--time] [--out results.json]
"""

import argparse
import glob
import json
import os
import pathlib
import statistics
import tempfile
import time

import numpy as np


def batch_bytes(pipe, samples_input, per_sample):
    """Per batch of epoch 0: (records, fed, dense) bytes."""
    sample_ids, _, _ = pipe.epoch_inputs(0)
    size = pipe.batch_size
    elements = iter(samples_input)
    rows = []
    for start in range(0, len(sample_ids), size):
        lengths = pipe.load_records(sample_ids[start:start + size])[1]
        if per_sample:
            fed = sum(next(elements).numpy().nbytes for _ in lengths)
        else:
            fed = next(elements).numpy().nbytes
        rows.append((int((lengths - 8).sum()), fed, len(lengths) * int(lengths.max())))
    return rows


def summary(rows):
    ratios = [fed / records for records, fed, _ in rows]
    dense = [d / records for records, _, d in rows]
    return {
        "batches": len(rows),
        "records_bytes": sum(r for r, _, _ in rows),
        "fed_bytes": sum(f for _, f, _ in rows),
        "dense_bytes": sum(d for _, _, d in rows),
        "fed_over_records_max": max(ratios),
        "fed_over_records_median": statistics.median(ratios),
        "dense_over_records_max": max(dense),
        "dense_over_records_median": statistics.median(dense),
    }


def measure(pattern, batch_size, drop_remainder=False):
    from dalipipe import make_dali_pipeline, tf_inputs

    pipe = make_dali_pipeline(pattern, batch_size=batch_size, image_size=(224, 224),
                              shuffle=True, seed=0, device="cpu", check=None, verbose=False,
                              normalization="imagenet", drop_remainder=drop_remainder)
    samples = tf_inputs.EpochFeed(pipe).dataset("samples")
    per_sample, parts = tf_inputs.feed_parts(len(pipe.positions()[0]), batch_size,
                                             from_tfrecord=True, gpu=False)
    gpu_per_sample, _ = tf_inputs.feed_parts(len(pipe.positions()[0]), batch_size,
                                             from_tfrecord=True, gpu=True)
    result = summary(batch_bytes(pipe, samples, per_sample))
    result.update(cpu_per_sample=per_sample, gpu_per_sample=gpu_per_sample,
                  dali_datasets_cpu=len(parts))
    fed = result["fed_bytes"] if gpu_per_sample else result["dense_bytes"]
    result["gpu_bytes_each_way"] = fed
    result["gpu_each_way_over_records"] = fed / result["records_bytes"]
    return result


def outlier_set(images, out, batch_size, megabytes):
    """`batch_size - 1` images of `images` and one JPEG of about `megabytes` MB, in
    one folder; returns it."""
    from PIL import Image

    from dalipipe import sources

    index = sources.index_source(images)
    folder = os.path.join(out, "outlier", "class_a")
    os.makedirs(folder, exist_ok=True)
    for path in index.file_paths[:batch_size - 1]:
        target = os.path.join(folder, os.path.basename(path))
        if not os.path.exists(target):
            os.symlink(path, target)
    rng = np.random.default_rng(0)
    side = int(np.sqrt(megabytes * 1e6 / 1.1))  # noise at quality 95: about 1.1 bytes/pixel
    noise = rng.integers(0, 256, (side, side, 3), dtype=np.uint8)
    Image.fromarray(noise).save(os.path.join(folder, "zz_outlier.jpg"), quality=95)
    return os.path.dirname(folder)


def to_tfrecords(images, out, shards):
    from dalipipe import sources, tfrecord

    index = sources.index_source(images, verbose=False)
    tfrecord.write_tfrecords(index.file_paths, index.labels, index.class_names, out,
                             num_shards=shards)
    return os.path.join(out, "*.tfrecord")


def time_epoch(pattern, batch_size, runs):
    from dalipipe import make_dali_dataset

    ds = make_dali_dataset(pattern, batch_size=batch_size, image_size=(224, 224),
                           shuffle=True, seed=0, device="cpu", check=None, verbose=False,
                           normalization="imagenet")
    seconds = []
    for run in range(runs + 1):  # run 0 warms up
        start = time.perf_counter()
        for _ in ds:
            pass
        if run:
            seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", default="data/bench")
    parser.add_argument("--data", help="folder for the TFRecord files (default: temporary)")
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--outlier-mb", type=float, default=2.0)
    parser.add_argument("--time", action="store_true", help="also time one CPU epoch")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--out")
    args = parser.parse_args()

    from dalipipe.bench.harness import machine_info

    with tempfile.TemporaryDirectory(prefix="tfrecord_feed_") as scratch:
        data = args.data or os.path.join(scratch, "bench")
        pattern = os.path.join(data, "*.tfrecord")
        if not glob.glob(pattern):
            to_tfrecords(args.images, data, args.shards)
        outlier = to_tfrecords(outlier_set(args.images, scratch, args.batch_size,
                                           args.outlier_mb),
                               os.path.join(scratch, "outlier_tfrecord"), 1)
        result = {
            "machine": machine_info(),
            "images": args.images,
            "batch_size": args.batch_size,
            "bench": measure(pattern, args.batch_size),
            "bench_drop_remainder": measure(pattern, args.batch_size, drop_remainder=True),
            "outlier_batch": measure(outlier, args.batch_size),
        }
        if args.time:
            result["cpu_epoch_s_median"] = time_epoch(pattern, args.batch_size, args.runs)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        pathlib.Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
