"""Images/s of a native CPU epoch read from a local S3 server against the same files
on local disk, for several `num_threads`, and the time of the check before training
(first run and cached) on both. Writes JSON.

The server is moto's (`tests/s3_server.py`), a Python process on 127.0.0.1: it
serves a request in a few ms of its own CPU, so on a small machine the S3 figures
measure moto as much as DALI's S3 client, and a real endpoint's latency (tens of ms
per GET) is not in them. What they do show: the per-object overhead of a GET over a
local read, and how DALI's reads overlap with `num_threads`.

With `--latency-ms L`, DALI and boto3 reach the server through a proxy on 127.0.0.1
that holds every chunk a client sends for L ms (`LatencyProxy`), so each GET waits as
from an endpoint L ms away: there the server's CPU is no longer the bound, and the
figures show how DALI's S3 reads scale with `num_threads`.

    python benchmarks/s3_read.py [--images 256] [--rounds 3] [--latency-ms 0]
"""

import argparse
import contextlib
import json
import os
import socket
import statistics
import sys
import tempfile
import threading
import time

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))


def write_images(folder, count, size):
    """`count` JPEGs of noise over a gradient (`size` square), in 4 class folders."""
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:size, 0:size]
    for i in range(count):
        pixels = np.stack([x, y, (x + y) // 2], -1) * 255 // size + rng.integers(0, 40, (size, size, 3))
        os.makedirs(os.path.join(folder, f"c{i % 4}"), exist_ok=True)
        Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(
            os.path.join(folder, f"c{i % 4}", f"{i:05d}.jpg"), quality=90)


class LatencyProxy:
    """A TCP proxy on 127.0.0.1 in front of `target` (`"http://127.0.0.1:PORT"`): what
    a client sends is held `latency_s` before it is passed on, and the answers come
    back at once. With `handshake_s`, the first chunk of each connection is held that
    much longer, as a distant endpoint's TCP and TLS handshakes would hold it.
    `endpoint` is the proxy's URL; `connections` counts the connections accepted. One
    thread pair per connection."""

    def __init__(self, target, latency_s, handshake_s=0.0):
        self.target_port = int(target.rsplit(":", 1)[1])
        self.latency_s = latency_s
        self.handshake_s = handshake_s
        self.connections = 0
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.endpoint = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:  # closed
                return
            self.connections += 1
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            for end in (client, upstream):  # each chunk passed on as it comes
                end.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._pump,
                             args=(client, upstream, self.latency_s, self.handshake_s),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, 0.0),
                             daemon=True).start()

    @staticmethod
    def _pump(source, sink, delay, first_delay=0.0):
        with contextlib.suppress(OSError):
            while True:
                chunk = source.recv(1 << 16)
                if not chunk:
                    break
                if delay or first_delay:
                    time.sleep(delay + first_delay)
                    first_delay = 0.0
                sink.sendall(chunk)
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def close(self):
        self.listener.close()


def median_epoch(pipe, rounds):
    """Median seconds of `rounds` epochs, after one warm-up epoch."""
    times = []
    for _ in range(rounds + 1):
        start = time.perf_counter()
        for _ in pipe.epoch():
            pass
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--size", type=int, default=256, help="side of the JPEGs")
    parser.add_argument("--threads", default="1,2,4,8")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=0,
                        help="milliseconds added to every request (a proxy)")
    parser.add_argument("--out", default="benchmarks/results/s3_read.json")
    args = parser.parse_args()

    from dalipipe import make_dali_pipeline, storage
    from dalipipe.bench.harness import machine_info
    from s3_server import ENVIRONMENT, moto_server

    results = {"machine": machine_info(), "images": args.images, "jpeg_side": args.size,
               "latency_ms": args.latency_ms,
               "load_average_start": round(os.getloadavg()[0], 2), "epochs": []}
    with tempfile.TemporaryDirectory() as scratch, moto_server() as server:
        proxy = LatencyProxy(server.endpoint, args.latency_ms / 1000) if args.latency_ms else None
        os.environ.update(ENVIRONMENT, AWS_ENDPOINT_URL=(proxy or server).endpoint,
                          DALIPIPE_CACHE_DIR=os.path.join(scratch, "cache"))
        storage.reset_clients()
        local = os.path.join(scratch, "images")
        write_images(local, args.images, args.size)
        client = server.client()
        client.create_bucket(Bucket="bench")
        for folder, _, names in os.walk(local):
            for name in names:
                path = os.path.join(folder, name)
                client.upload_file(path, "bench", "images/" + os.path.relpath(path, local))
        results["mean_bytes"] = round(np.mean([os.path.getsize(os.path.join(f, n))
                                               for f, _, ns in os.walk(local) for n in ns]))
        sources = {"local": local, "s3": "s3://bench/images/"}
        for name, source in sources.items():
            for level, cache in (("structure", "first"), ("structure", "cached")):
                start = time.perf_counter()
                make_dali_pipeline(source, image_size=(64, 64), device="cpu", check=level,
                                   verbose=False)
                results[f"check_{level}_{cache}_s_{name}"] = round(time.perf_counter() - start, 3)
        for threads in [int(t) for t in args.threads.split(",")]:
            row = {"num_threads": threads}
            for name, source in sources.items():
                pipe = make_dali_pipeline(source, image_size=(64, 64), batch_size=32,
                                          num_threads=threads, device="cpu", check=None,
                                          verbose=False, seed=0)
                row[f"images_per_s_{name}"] = round(args.images / median_epoch(pipe, args.rounds), 1)
            row["overhead_ms_per_object"] = round(
                1000 * (1 / row["images_per_s_s3"] - 1 / row["images_per_s_local"]), 2)
            results["epochs"].append(row)
            print(row, file=sys.stderr)
    write_results(results, args.out)


def write_results(results, out):
    """Writes `results`, with the load average at the end, to the JSON file `out`."""
    results["load_average_end"] = round(os.getloadavg()[0], 2)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(results, f, indent=1)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
