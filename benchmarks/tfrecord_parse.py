"""How fast `dalipipe.tfrecord` reads records in Python: `scan` and `load_encoded`.

Measures the dalipipe that Python imports (run it with `PYTHONPATH` set to another
checkout to measure that one), on TFRecord files such as `dalipipe convert` writes:

- `scan`: indexes present, scan cache cold (`DALIPIPE_CACHE_DIR` a fresh folder each
  run): every record read, its checksums verified, its label and text parsed;
- `load_encoded`: the image bytes of every record, in batches of `--batch-size`.

One untimed warm-up round (files in the page cache), then `--runs` timed rounds;
medians, of wall time and of the process's CPU time (user and system: steadier on a
machine that others use too). Prints JSON, and writes it to `--out` when given.

    python benchmarks/tfrecord_parse.py --data /tmp/bench-tfrecord \\
        [--images data/bench] [--runs 3] [--out results.json]

`--images`: a folder of images to convert into `--shards` TFRecord files in
`--data` first, when `--data` holds none.
"""

import argparse
import contextlib
import glob
import importlib.metadata as metadata
import json
import os
import statistics
import sys
import tempfile
import time

import google_crc32c
from google.protobuf.internal import api_implementation


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="folder of *.tfrecord files")
    parser.add_argument("--images", help="images to convert when --data has no TFRecords")
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out")
    args = parser.parse_args()

    import dalipipe
    from dalipipe import sources, tfrecord
    from dalipipe.bench.harness import machine_info

    shards = sorted(glob.glob(os.path.join(args.data, "*.tfrecord")))
    if not shards and args.images:
        index = sources.index_source(args.images)
        shards = tfrecord.write_tfrecords(index.file_paths, index.labels, index.class_names,
                                          args.data, num_shards=args.shards, verbose=True)
    if not shards:
        raise SystemExit(f"No *.tfrecord files in {args.data!r} (give --images to make them)")
    tfrecord.ensure_indexes(shards)  # made now, so that `scan` times the records only

    times = {"scan_s": [], "scan_cpu_s": [], "load_encoded_s": [], "load_encoded_cpu_s": []}
    for run in range(args.runs + 1):  # round 0 warms the page cache and is not kept
        with tempfile.TemporaryDirectory() as cache:
            os.environ["DALIPIPE_CACHE_DIR"] = cache
            with timed(times, "scan", keep=run > 0):
                records = tfrecord.scan(shards)
        total_bytes = 0
        with timed(times, "load_encoded", keep=run > 0):
            for first in range(0, len(records), args.batch_size):
                batch = tfrecord.load_encoded(records.shards,
                                              records.refs[first: first + args.batch_size])
                total_bytes += sum(map(len, batch))

    count = len(records)
    machine = machine_info()
    for package in ("protobuf", "google-crc32c"):
        try:
            machine["versions"][package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            machine["versions"][package] = None
    machine["implementations"] = {"protobuf": api_implementation.Type(),
                                  "google-crc32c": google_crc32c.implementation}
    result = {
        "machine": machine,
        "dalipipe": os.path.dirname(os.path.abspath(dalipipe.__file__)),
        "records": count,
        "shards": len(shards),
        "image_bytes": total_bytes,
        "batch_size": args.batch_size,
        "runs": args.runs,
        **times,
    }
    for name in ("scan", "load_encoded"):
        for clock in ("", "_cpu"):
            median = statistics.median(times[f"{name}{clock}_s"])
            result[f"{name}_records_per{clock}_s"] = count / median
            if name == "load_encoded":
                result[f"{name}_MB_per{clock}_s"] = total_bytes / 1e6 / median
    text = json.dumps(result, indent=2)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text + "\n")
    sys.stdout.write(text + "\n")


@contextlib.contextmanager
def timed(times, name, keep):
    """Adds the wall and CPU seconds of the block to `times[name + "_s"]` and
    `times[name + "_cpu_s"]` when `keep`."""
    wall, cpu = time.perf_counter(), time.process_time()
    yield
    if keep:
        times[f"{name}_s"].append(time.perf_counter() - wall)
        times[f"{name}_cpu_s"].append(time.process_time() - cpu)


if __name__ == "__main__":
    main()
