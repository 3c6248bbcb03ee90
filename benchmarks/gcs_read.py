"""Images/s of a native CPU epoch read from `gs://` behind a latency proxy, for several
widths of dalipipe's read pool, with two copies of dalipipe alternated. Writes JSON.

For a `gs://` source dalipipe reads each batch's objects itself
(`storage.map_objects`) and feeds their bytes to the graph; the width of its pool
of threads (`storage.MAX_WORKERS`), not DALI's `num_threads`, is how many reads are
in flight. The server is gcp-storage-emulator on 127.0.0.1, reached through
`s3_read.LatencyProxy`, which holds every chunk a client sends for `--latency-ms`,
so each request waits as from an endpoint that far away.

Each figure comes from a fresh process that imports dalipipe from one of the
`--roots`, `NAME=FOLDER` pairs (e.g. this checkout, and a copy of an older commit
made with `git archive COMMIT dalipipe | tar -x -C /tmp/before`), sets the read width, and
times `--rounds` epochs after one warm-up; the roots alternate for each width.

The emulator is an HTTP/1.0 server: it closes the connection after each answer, so
no client reuses a connection, however many it keeps; what the figures show is how
the reads overlap the latency. With `--keep-alive` it keeps connections open
(HTTP/1.1), as GCS does, and `--handshake-ms` holds the first request of each new
connection that much longer (TCP and TLS handshakes with a distant endpoint): there
the connections a client keeps count. `connections` in the results is the number
of connections the proxy accepted during one figure's process.

    python benchmarks/gcs_read.py --roots after=.,before=/tmp/before [--latency-ms 20]
        [--keep-alive --handshake-ms 40]
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


# gcp-storage-emulator serves one connection at a time, with a listen backlog of 5:
# behind the proxy it would wait for each connection's delayed request in turn (one
# request per latency at most) and drop the connections past the fifth (a second's
# SYN retry). Run with a thread per connection and a longer backlog, it answers as
# an endpoint does, many requests at once.
# With `keep_alive`, it speaks HTTP/1.1 (every answer it writes has a Content-Length),
# and keeps a connection open for the next request, as GCS does; without Nagle's
# algorithm, whose wait for an ACK an open connection would otherwise add (40 ms)
# between an answer's headers and its body.
_EMULATOR = """
import sys
from http import server
server.ThreadingHTTPServer.request_queue_size = 256
server.HTTPServer = server.ThreadingHTTPServer
if sys.argv.pop(1) == "keep-alive":
    from gcp_storage_emulator.server import RequestHandler
    RequestHandler.protocol_version = "HTTP/1.1"
    RequestHandler.disable_nagle_algorithm = True
from gcp_storage_emulator.__main__ import main
main(sys.argv[1:])
"""


def start_emulator(port, log, keep_alive=False):
    """gcp-storage-emulator on 127.0.0.1:`port` with the bucket `bench` (a process)."""
    server = subprocess.Popen(
        [sys.executable, "-c", _EMULATOR, "keep-alive" if keep_alive else "close",
         "start", "--host", "127.0.0.1",
         "--port", str(port), "--in-memory", "--default-bucket", "bench"],
        stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("gcp-storage-emulator did not start") from None
            time.sleep(0.1)


def child(args):
    """One figure: images/s of `args.images` objects read `args.read_threads` at a time."""
    from s3_read import median_epoch

    from dalipipe import make_dali_pipeline, storage

    storage.MAX_WORKERS = args.read_threads
    defaults = storage.map_objects.__kwdefaults__
    if defaults.get("max_workers") is not None:  # a default bound when it was defined
        defaults["max_workers"] = args.read_threads
    pipe = make_dali_pipeline("gs://bench/images/", image_size=(64, 64), batch_size=32,
                              num_threads=args.num_threads, device="cpu", check=None,
                              verbose=False, seed=0)
    assert len(pipe.file_paths) == args.images, len(pipe.file_paths)
    seconds = median_epoch(pipe, args.rounds)
    print(json.dumps({"images_per_s": round(args.images / seconds, 1),
                      "dalipipe": os.path.dirname(storage.__file__)}))


def commit_of(root):
    """The commit checked out at `root`, or None where it is no git checkout."""
    done = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True)
    return done.stdout.strip() or None if done.returncode == 0 else None


def measure(root, threads, args, environment):
    command = [sys.executable, os.path.abspath(__file__), "--child", "--read-threads",
               str(threads), "--images", str(args.images), "--rounds", str(args.rounds),
               "--num-threads", str(args.num_threads)]
    path = os.pathsep.join([os.path.abspath(root), HERE])
    done = subprocess.run(command, env={**environment, "PYTHONPATH": path}, check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--roots", default="this=.",
                        help="comma-separated NAME=FOLDER, each folder holding a dalipipe "
                             "(a NAME may name the commit of a folder that is no checkout)")
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--size", type=int, default=256, help="side of the JPEGs")
    parser.add_argument("--threads", default="1,2,4,8,16", help="widths of the read pool")
    parser.add_argument("--num-threads", type=int, default=2, help="DALI's num_threads")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=20)
    parser.add_argument("--keep-alive", action="store_true",
                        help="the emulator keeps connections open (HTTP/1.1)")
    parser.add_argument("--handshake-ms", type=float, default=0,
                        help="milliseconds added to the first request of a connection")
    parser.add_argument("--out", default="benchmarks/results/gcs_read_latency20.json")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--read-threads", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)

    sys.path.insert(0, os.path.join(HERE, ".."))
    from s3_read import LatencyProxy, write_images, write_results

    from dalipipe.bench.harness import machine_info
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage as gcs
    from s3_server import free_port

    roots = dict(pair.split("=", 1) for pair in args.roots.split(","))
    results = {"machine": machine_info(), "images": args.images, "jpeg_side": args.size,
               "latency_ms": args.latency_ms, "batch_size": 32,
               "dali_num_threads": args.num_threads, "rounds": args.rounds,
               "handshake_ms": args.handshake_ms,
               "server": "gcp-storage-emulator, a thread per connection, "
                         + ("HTTP/1.1 keep-alive" if args.keep_alive
                            else "HTTP/1.0: one request per connection"),
               "roots": {name: {"folder": root, "commit": commit_of(root)}
                         for name, root in roots.items()},
               "load_average_start": round(os.getloadavg()[0], 2),
               "epochs": []}
    with tempfile.TemporaryDirectory() as scratch, \
            open(os.path.join(scratch, "gcs.log"), "ab") as log:
        port = free_port()
        server = start_emulator(port, log, args.keep_alive)
        try:
            endpoint = f"http://127.0.0.1:{port}"
            proxy = LatencyProxy(endpoint, args.latency_ms / 1000, args.handshake_ms / 1000)
            local = os.path.join(scratch, "images")
            write_images(local, args.images, args.size)
            client = gcs.Client(project="bench", credentials=AnonymousCredentials(),
                                client_options={"api_endpoint": endpoint})
            sizes = []
            for folder, _, names in os.walk(local):
                for name in names:
                    path = os.path.join(folder, name)
                    key = "images/" + os.path.relpath(path, local)
                    client.bucket("bench").blob(key).upload_from_filename(path)
                    sizes.append(os.path.getsize(path))
            results["mean_bytes"] = round(sum(sizes) / len(sizes))
            environment = {k: v for k, v in os.environ.items()
                           if k not in ("GOOGLE_APPLICATION_CREDENTIALS",
                                        "CLOUD_STORAGE_EMULATOR_ENDPOINT")}
            environment.update(DALI_GCS_ANONYMOUS="1", DALI_GCS_ENDPOINT_URL=proxy.endpoint,
                               DALIPIPE_CACHE_DIR=os.path.join(scratch, "cache"))
            for threads in [int(t) for t in args.threads.split(",")]:
                row = {"read_threads": threads}
                for name, root in roots.items():
                    opened = proxy.connections
                    row[f"images_per_s_{name}"] = measure(root, threads, args,
                                                          environment)["images_per_s"]
                    row[f"connections_{name}"] = proxy.connections - opened
                row["load_average"] = round(os.getloadavg()[0], 2)
                results["epochs"].append(row)
                print(row, file=sys.stderr)
            proxy.close()
        finally:
            server.terminate()
            server.wait(10)
    write_results(results, args.out)


if __name__ == "__main__":
    main()
