"""Fuzzing the pre-flight check and the DALI pipeline with mutated JPEGs.

`fuzz(count, seed, check, timeout)` makes `count` mutants of real JPEGs,
deterministically for `seed`: bit flips, truncation, overwritten header bytes,
broken markers and zeroed runs. Each one goes through `dalipipe.checks` and then, if
the check passes it, through the DALI CPU pipeline, one file per batch, in a worker
process with a per-file time limit. The outcome of each file is one of:
- `reported`: the check names it;
- `decoded`: DALI decodes it;
- `dali_error`: the check passed it but DALI raised an error (the file must be named);
- `crash`: the worker process died;
- `hang`: the file took longer than the time limit.

The goal is no `crash` and no `hang`, and no `dali_error` that the check lets
through: every file either decodes or is reported. `benchmarks/fuzz.py` runs it
from the command line; `python -m dalipipe.bench.fuzz --worker` is the worker.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from dalipipe.utils import child_env

MUTATIONS = ("bit_flips", "truncate", "header_bytes", "marker", "zero_run")


def mutate(data, kind, rng):
    data = bytearray(data)
    if kind == "bit_flips":
        for _ in range(int(rng.integers(1, 20))):
            i = int(rng.integers(0, len(data)))
            data[i] ^= 1 << int(rng.integers(0, 8))
    elif kind == "truncate":
        data = data[: int(rng.integers(1, len(data)))]
    elif kind == "header_bytes":
        for _ in range(int(rng.integers(1, 8))):
            data[int(rng.integers(0, min(len(data), 700)))] = int(rng.integers(0, 256))
    elif kind == "marker":
        markers = [i for i in range(len(data) - 1) if data[i] == 0xFF and data[i + 1] not in (0, 0xFF)]
        i = markers[int(rng.integers(0, len(markers)))]
        data[i + 1] = int(rng.integers(0, 256))
    elif kind == "zero_run":
        start = int(rng.integers(0, len(data)))
        data[start: start + int(rng.integers(1, 200))] = bytes(min(200, len(data) - start))
    return bytes(data)


def make_corpus(directory, count, seed):
    """`count` mutants of small JPEG crops of the shipped photographs."""
    from dalipipe.sample_data import make_sample_dataset

    base_dir = os.path.join(directory, "base")
    make_sample_dataset(base_dir, num_images=8, num_classes=4, seed=seed,
                        crop_width=(60, 120))
    bases = sorted(os.path.join(root, f) for root, _, files in os.walk(base_dir)
                   for f in files if f.endswith(".jpg"))
    rng = np.random.default_rng(seed)
    out = os.path.join(directory, "mutants")
    os.makedirs(out, exist_ok=True)
    paths, kinds = [], {}
    for i in range(count):
        kind = MUTATIONS[i % len(MUTATIONS)]
        with open(bases[i % len(bases)], "rb") as f:
            data = mutate(f.read(), kind, rng)
        path = os.path.join(out, f"{i:05d}_{kind}.jpg")
        with open(path, "wb") as f:
            f.write(data)
        paths.append(path)
        kinds[path] = kind
    return paths, kinds


def worker():
    """Decodes the files named on stdin one by one; prints one JSON line per file."""
    from dalipipe import make_dali_pipeline

    for line in sys.stdin:
        path = line.rstrip("\n")
        try:
            pipe = make_dali_pipeline([path], labels=None, image_size=(32, 32), batch_size=1, verbose=False,
                                      shuffle=False, device="cpu", num_threads=1, check=None)
            for _ in pipe.epoch():
                pass
            print(json.dumps({"path": path, "outcome": "decoded"}), flush=True)
        except Exception as e:  # DALI raises RuntimeError; record whatever it is
            message = str(e)
            print(json.dumps({"path": path, "outcome": "dali_error",
                              "names_file": os.path.basename(path) in message,
                              "error": message.strip().splitlines()[-1][:200]}), flush=True)


def run_pipeline(paths, timeout):
    """Outcome per path, restarting the worker after a crash or hang."""
    results, pending = {}, list(paths)
    while pending:
        process = subprocess.Popen(
            [sys.executable, "-m", "dalipipe.bench.fuzz", "--worker"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env=child_env(TF_CPP_MIN_LOG_LEVEL="3"),
        )
        for path in pending:
            process.stdin.write(path + "\n")
        process.stdin.close()
        import selectors

        selector = selectors.DefaultSelector()
        selector.register(process.stdout, selectors.EVENT_READ)
        current, deadline = pending[0], time.monotonic() + timeout + 30  # start-up
        while True:
            if not selector.select(timeout=max(0.0, deadline - time.monotonic())):
                process.kill()
                results[current] = {"outcome": "hang"}
                break
            line = process.stdout.readline()
            if not line:
                process.wait()
                if current not in results:
                    results[current] = {"outcome": "crash", "status": process.returncode}
                break
            record = json.loads(line)
            results[record.pop("path")] = record
            done = [p for p in pending if p not in results]
            if not done:
                break
            current, deadline = done[0], time.monotonic() + timeout
        process.kill()
        process.wait()
        pending = [p for p in pending if p not in results]
    return results


def fuzz(count, seed, check, timeout):
    """Runs the fuzz corpus; returns the report (summary and per-file outcomes)."""
    from dalipipe import checks

    with tempfile.TemporaryDirectory() as directory:
        os.environ.setdefault("DALIPIPE_CACHE_DIR", os.path.join(directory, "cache"))
        started = time.perf_counter()
        paths, kinds = make_corpus(directory, count, seed)
        bad = checks.check_files(paths, check=check)
        passed = [p for p in paths if p not in bad]
        outcomes = run_pipeline(passed, timeout)
        files = {}
        for path in paths:
            name = os.path.basename(path)
            files[name] = ({"outcome": "reported", "reason": bad[path]} if path in bad
                           else outcomes[path])
            files[name]["mutation"] = kinds[path]
        counts = {}
        for record in files.values():
            counts[record["outcome"]] = counts.get(record["outcome"], 0) + 1
        summary = {
            "files": count, "check": check, "seed": seed, "outcomes": counts,
            "seconds": round(time.perf_counter() - started, 1),
            "ok": not any(counts.get(k) for k in ("crash", "hang", "dali_error")),
            "no_crash_no_hang": not any(counts.get(k) for k in ("crash", "hang")),
        }
    return {"summary": summary, "files": files}


if __name__ == "__main__":
    if sys.argv[1:] != ["--worker"]:
        sys.exit("usage: python -m dalipipe.bench.fuzz --worker (run by fuzz(); "
                 "benchmarks/fuzz.py runs the corpus)")
    worker()
