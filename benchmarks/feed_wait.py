"""How long Keras's training thread waits for data on the torch backend, with the
pass's feed reading ahead in its own thread and without (`dalipipe.passes.READ_AHEAD`).

Per source and setting, `fit` on a small convolutional network in a fresh process
(`KERAS_BACKEND=torch`), the settings alternated round by round: images/s of the
timed epochs, and the share of their time that the training thread spent in the
dataset's `__getitem__` (waiting for a batch, or preparing it itself). Writes one
JSON file.

    python benchmarks/feed_wait.py --source DIR [--source 'tfrecords/*.tfrecord'] \
        [--gcs-images 512] --out benchmarks/results/feed_wait-cpu.json [--rounds 3]

`--gcs-images N` also measures a `gs://` source: the first N images of the first
`--source` folder, in gcp-storage-emulator on 127.0.0.1 behind `s3_read.LatencyProxy`,
which holds every request `--latency-ms` (`gcs_read.py` starts both).
"""

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STARTED = time.perf_counter()
GCS_PREFIX = "gs://bench/images/"
SETTINGS = (0, 2)  # read-ahead batches: the training thread feeds itself, or the feed does


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", action="append", required=True,
                        help="an image folder, TFRecord files, or an s3:// / gs:// prefix; repeatable")
    parser.add_argument("--out", help="the JSON file to write")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs, after one warm-up")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--gcs-images", type=int, default=0,
                        help="also a gs:// copy of this many images of the first source")
    parser.add_argument("--latency-ms", type=float, default=20,
                        help="the gs:// source's latency (default: 20)")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        result = measure(args.source[0], read_ahead=args.child, epochs=args.epochs,
                         image_size=args.image_size, batch_size=args.batch_size)
        print(json.dumps(result))
        return 0
    sys.path.insert(0, REPO_ROOT)
    from dalipipe.bench.harness import machine_info
    from dalipipe.utils import child_env

    with contextlib.ExitStack() as stack:
        environment = child_env(KERAS_BACKEND="torch", CUDA_VISIBLE_DEVICES="")
        sources = list(args.source)
        if args.gcs_images:
            environment.update(stack.enter_context(gcs_copy(
                args.source[0], args.gcs_images, args.latency_ms)))
            sources.append(GCS_PREFIX)
        runs = alternate(sources, args, environment)
    report = {"what": __doc__.splitlines()[0], "machine": machine_info(),
              "load_average": os.getloadavg(), "seconds": time.perf_counter() - STARTED,
              "settings": {k: v for k, v in vars(args).items() if k != "child"},
              "runs": runs, "summary": summary(runs)}
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)
        print(f"wrote {args.out}")
    return 0


def alternate(sources, args, environment):
    """Each source and setting in a fresh process, round by round."""
    runs = []
    for number in range(1, args.rounds + 1):
        for source in sources:
            for read_ahead in SETTINGS:
                command = [sys.executable, os.path.abspath(__file__), "--child", str(read_ahead),
                           "--source", source, "--epochs", str(args.epochs),
                           "--image-size", str(args.image_size),
                           "--batch-size", str(args.batch_size)]
                done = subprocess.run(command, capture_output=True, text=True,
                                      env=environment, check=False)
                if done.returncode:
                    raise RuntimeError(f"{source}, read-ahead {read_ahead}:\n{done.stderr[-3000:]}")
                result = json.loads(done.stdout.strip().splitlines()[-1])
                runs.append({"round": number, "source": source, "read_ahead": read_ahead,
                             **result, "load_average": os.getloadavg()[0]})
                print(json.dumps(runs[-1]), flush=True)
    return runs


@contextlib.contextmanager
def gcs_copy(folder, count, latency_ms):
    """The first `count` images of `folder` (class folders kept) in the emulator's
    bucket under `GCS_PREFIX`, behind the latency proxy; yields the environment
    that points DALI and dalipipe at it."""
    sys.path.insert(0, os.path.join(REPO_ROOT, "benchmarks"))
    sys.path.insert(0, os.path.join(REPO_ROOT, "tests"))
    from gcs_read import start_emulator
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage as gcs
    from s3_read import LatencyProxy
    from s3_server import free_port

    from dalipipe.sources import index_source

    paths = sorted(index_source(folder).file_paths)[:count]
    with tempfile.TemporaryDirectory() as scratch, \
            open(os.path.join(scratch, "gcs.log"), "ab") as log:
        port = free_port()
        server = start_emulator(port, log)
        try:
            endpoint = f"http://127.0.0.1:{port}"
            client = gcs.Client(project="bench", credentials=AnonymousCredentials(),
                                client_options={"api_endpoint": endpoint})
            for path in paths:
                key = "images/" + os.path.relpath(path, folder)
                client.bucket("bench").blob(key).upload_from_filename(path)
            proxy = LatencyProxy(endpoint, latency_ms / 1000)
            yield {"DALI_GCS_ANONYMOUS": "1", "DALI_GCS_ENDPOINT_URL": proxy.endpoint,
                   "DALIPIPE_CACHE_DIR": os.path.join(scratch, "cache")}
            proxy.close()
        finally:
            server.terminate()
            server.wait(10)


def summary(runs):
    """Per source and setting, the median images/s and share of time waiting."""
    import statistics

    found = {}
    for run in runs:
        found.setdefault((run["source"], run["read_ahead"]), []).append(run)
    return [{"source": source, "read_ahead": read_ahead,
             "images_per_s": statistics.median(r["images_per_s"] for r in group),
             "wait_share": statistics.median(r["wait_share"] for r in group)}
            for (source, read_ahead), group in found.items()]


def measure(source, *, read_ahead, epochs, image_size, batch_size):
    """`fit` of a small network on `source` in this process (torch backend)."""
    import dalipipe
    from dalipipe import passes

    passes.READ_AHEAD = read_ahead
    dataset = dalipipe.make_dali_dataset(source, image_size=(image_size, image_size),
                                         batch_size=batch_size, device="cpu", seed=0,
                                         verbose=False, augment=True)
    waited = [0.0]
    inner = type(dataset).__getitem__

    class Timed(type(dataset)):
        def __getitem__(self, index):
            start = time.perf_counter()
            try:
                return inner(self, index)
            finally:
                waited[0] += time.perf_counter() - start

    dataset.__class__ = Timed
    model = small_network(image_size, len(dataset.class_names))
    model.fit(dataset, epochs=1, verbose=0)  # warm-up
    waited[0] = 0.0
    start = time.perf_counter()
    model.fit(dataset, epochs=epochs, verbose=0)
    seconds = time.perf_counter() - start
    images = epochs * len(dataset.file_paths)
    return {"images_per_s": images / seconds, "wait_share": waited[0] / seconds,
            "seconds": seconds, "images": images}


def small_network(image_size, num_classes):
    """The small convolutional network these benchmarks train, compiled."""
    import keras

    model = keras.Sequential([
        keras.Input((image_size, image_size, 3)), keras.layers.Rescaling(1 / 255),
        keras.layers.Conv2D(32, 3, strides=2, activation="relu"),
        keras.layers.Conv2D(64, 3, strides=2, activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(num_classes)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


if __name__ == "__main__":
    sys.exit(main())
