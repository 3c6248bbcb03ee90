"""WebDataset tar shards against the same images as files, local and from a local S3
server, read by dalipipe and by `webdataset`'s own loader: the time to the first
batch of a fresh process (start-up: creation, indexing, the check, the first
batch) and steady images/s (the median of `--runs` epochs after the first). Writes
JSON.

The images are `dalipipe sample-data`'s (JPEG crops of photographs, 260-560 pixels
wide), as files in class folders and as `--shards` tar shards written by
`dalipipe.ranges.write.write_webdataset`; both are also uploaded to moto's S3 server
on 127.0.0.1 (`tests/s3_server.py`). Every row runs in a process of its own
(`dalipipe.bench.harness`), one after the other, with the workload `--workload`
(default train: random-resized crop to 224, flip, ImageNet normalization):

- dalipipe (`make_dali_pipeline(shuffle=True)` run natively, `--threads` threads)
  on the files and on the shards, local and in S3, each in a fresh cache folder
  (`"cold"`: the check, and for shards the tar index, are made in its start-up);
  the shards again in the same cache folder (`"cached"`); and once on the local
  files as Keras users call it, `make_dali_dataset` (the "tf" format: its start-up
  imports TensorFlow and builds the `tf.data` dataset);
- `webdataset` (`dalipipe.bench.shard_loaders.make_webdataset`: `WebDataset(urls,
  shardshuffle=100).shuffle(1000).decode("pil")`, PIL's transforms, `WebLoader`
  with `--threads` workers) on the local shards, and on the shards in S3 as its
  documentation reads a bucket: `http://` URLs read with curl (a public bucket),
  and `pipe:aws s3 cp s3://... -` (the AWS CLI, one process per shard).

The server is a Python process on the same cores: its figures are a server a few
ms away, with its CPU shared with the loaders, not a real endpoint's latency. With
`--latency-ms L`, every client reaches it through `s3_read.py`'s `LatencyProxy`,
which holds each request L ms, as an endpoint L ms away would.

    python benchmarks/shards_read.py [--images 500] [--runs 2] [--latency-ms 0] [--out ...]
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "tests"), HERE]

BUCKET = "bench"


def rows(local_files, local_shards, s3_files, s3_shards, http_shards):
    """`(name, loader, options, cache)` of each row: cache "cold" for a fresh cache
    folder, "cached" for the previous row's."""
    found = [("dalipipe files local, make_dali_dataset", "dalipipe_cpu", {"shuffle": True},
              "cold")]
    for storage, files, shards in (("local", local_files, local_shards),
                                   ("s3", s3_files, s3_shards)):
        files_options = {"shuffle": True} if files is None else {"shuffle": True, "source": files}
        found.append((f"dalipipe files {storage}", "dalipipe_native_cpu", files_options, "cold"))
        for cache in ("cold", "cached"):
            found.append((f"dalipipe shards {storage} {cache}", "dalipipe_native_cpu",
                          {"shuffle": True, "source": shards}, cache))
        found.append((f"webdataset shards {storage}" + (" http" if storage == "s3" else ""),
                      "webdataset_torch",
                      {"urls": http_shards if storage == "s3" else local_shards}, "cold"))
    found.append(("webdataset shards s3 aws-cli", "webdataset_torch",
                  {"urls": f"pipe:aws s3 cp {s3_shards} -"}, "cold"))
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=500)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--workload", default="train")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--runs", type=int, default=2, help="timed epochs after the first")
    parser.add_argument("--rounds", type=int, default=1,
                        help="rounds of every row, their order rotated each round")
    parser.add_argument("--latency-ms", type=float, default=0,
                        help="milliseconds added to every request to S3 (a proxy)")
    parser.add_argument("--only", default="", help="comma-separated row names to run")
    parser.add_argument("--out", default="benchmarks/results/shards-cpu/results.json")
    args = parser.parse_args()

    from dalipipe import sources
    from dalipipe.bench.harness import machine_info, run_task_in_subprocess
    from dalipipe.ranges.write import write_webdataset
    from dalipipe.sample_data import make_sample_dataset
    from s3_read import LatencyProxy
    from s3_server import ENVIRONMENT, moto_server, upload_folder

    results = {"machine": machine_info(), "images": args.images, "shards": args.shards,
               "workload": args.workload, "batch_size": args.batch_size,
               "threads": args.threads, "runs": args.runs,
               "rounds": args.rounds, "latency_ms": args.latency_ms,
               "load_average_start": [round(x, 2) for x in os.getloadavg()], "rows": []}
    begun = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="shards-read-") as scratch, moto_server() as server:
        images = os.path.join(scratch, "images")
        make_sample_dataset(images, num_images=args.images)
        os.remove(os.path.join(images, "labels.csv"))  # a folder source: classes by folder
        index = sources.index_source(images)
        folder = os.path.join(scratch, "shards")
        shards = write_webdataset(index.file_paths, index.labels, index.class_names, folder,
                                  num_shards=args.shards)
        results["image_bytes"] = sum(os.path.getsize(p) for p in index.file_paths)
        results["shard_bytes"] = sum(os.path.getsize(p) for p in shards)
        client = server.client()
        client.create_bucket(Bucket=BUCKET, ACL="public-read")  # curl's GETs are unsigned
        upload_folder(client, images, BUCKET, "images")
        upload_folder(client, folder, BUCKET, "shards")
        endpoint = server.endpoint if not args.latency_ms else \
            LatencyProxy(server.endpoint, args.latency_ms / 1000).endpoint
        pattern = f"train-{{000000..{args.shards - 1:06d}}}.tar"
        table = rows(None, os.path.join(folder, pattern), f"s3://{BUCKET}/images/",
                     f"s3://{BUCKET}/shards/{pattern}",
                     f"{endpoint}/{BUCKET}/shards/{pattern}")
        only = set(filter(None, args.only.split(",")))
        table = [(number, *row) for number, row in enumerate(table) if not only or row[0] in only]
        # A cached row runs after its cold row: the rounds rotate whole groups.
        groups = [[row] for row in table if row[4] == "cold"]
        for row in table:
            if row[4] == "cached":
                next(g for g in groups if g[0][0] == row[0] - 1).append(row)
        for round_number in range(args.rounds):
            turn = round_number % len(groups)
            for number, name, loader, options, cache in \
                    [row for group in groups[turn:] + groups[:turn] for row in group]:
                cache_dir = os.path.join(
                    scratch, f"cache-{round_number}-{number - (cache == 'cached')}")
                task = dict(kind="measure", loader=loader, workload=args.workload,
                            files=index.file_paths,
                            labels=[int(label) for label in index.labels],
                            batch_size=args.batch_size, threads=args.threads, seed=0,
                            runs=args.runs, options=options,
                            env={**ENVIRONMENT, "AWS_ENDPOINT_URL": endpoint,
                                 "DALIPIPE_CACHE_DIR": cache_dir})
                load = round(os.getloadavg()[0], 2)
                started = time.perf_counter()
                result = run_task_in_subprocess(task, timeout=900)
                result.update(name=name, cache=cache, round=round_number,
                              load_average_before=load,
                              load_average_after=round(os.getloadavg()[0], 2),
                              wall_s=round(time.perf_counter() - started, 2))
                results["rows"].append(result)
                print(name, {k: result.get(k) for k in ("first_batch_s", "images_per_s", "error")},
                      f"load {load}", file=sys.stderr, flush=True)
        results["seconds"] = round(time.perf_counter() - begun)
    results["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    table = os.path.splitext(args.out)[0] + ".md"
    with open(table, "w") as f:
        f.write(markdown(results))
    print(f"wrote {args.out} and {table}", file=sys.stderr)


def markdown(results):
    """The rows of `results` as a Markdown table, with the machine and the load."""
    machine, versions = results["machine"], results["machine"]["versions"]
    lines = [
        f"Machine: {machine['cpu']}, {machine['cores']} cores, GPU: {machine['gpu']}; DALI "
        f"{versions['dali']}, TensorFlow {versions['tensorflow']}, torch {versions['torch']}, "
        f"Python {machine['python']}.",
        f"Data: {results['images']} JPEGs ({results['image_bytes'] / results['images'] / 1e3:.0f} "
        f"KB on average) as files and as {results['shards']} tar shards; workload "
        f"{results['workload']}, batch {results['batch_size']}, {results['threads']} threads "
        f"or workers, median of {results['runs']} epochs after the first; over "
        f"{results.get('rounds', 1)} rounds, each figure's median (and range); S3: moto on "
        f"127.0.0.1, {results['latency_ms']:g} ms added per request.",
        f"Load average (1, 5, 15 min): {results['load_average_start']} at the start, "
        f"{results['load_average_end']} at the end.",
        "",
        "| row | first batch (s) | first epoch (s) | images/s | CPU s / 1000 images | "
        "peak RSS (MB) | load before |",
        "|---|---|---|---|---|---|---|",
    ]
    settings = {}
    for name in dict.fromkeys(row["name"] for row in results["rows"]):
        rounds = [row for row in results["rows"] if row["name"] == name]
        good = [row for row in rounds if "error" not in row]
        settings[name] = rounds[0].get("settings")
        if not good:
            lines.append(f"| {name} | error: {rounds[0]['error']} | | | | | |")
            continue

        def median(key, digits, rows=good):
            values = sorted(row[key] for row in rows)
            return f"{statistics.median(values):.{digits}f}" + (
                f" ({values[0]:.{digits}f}–{values[-1]:.{digits}f})" if len(values) > 1 else "")

        lines.append(f"| {name} | {median('first_batch_s', 1)} | {median('first_epoch_s', 1)} | "
                     f"{median('images_per_s', 0)} | {median('cpu_s_per_1000', 1)} | "
                     f"{median('peak_rss_mb', 0)} | "
                     f"{', '.join(str(row['load_average_before']) for row in good)} |")
    lines += ["", "Settings:", ""]
    lines += [f"- {name}: {text}" for name, text in settings.items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
