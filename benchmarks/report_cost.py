"""What `dalipipe.InputReport` costs: `fit`'s images/s with and without it, and its own time.

The model is the bottleneck, the case where the report must cost at most 1 % of a
step: a small convolutional network whose every step a callback makes `--step-ms`
longer (a sleep, standing in for a heavier model; 0 for none). Two measurements:

- **Alternated fits.** Per round, `fit` in a fresh process on Keras's torch backend,
  without the callback then with it (the order swapped every other round): images/s
  of the timed epochs, and with the callback its `input_wait`. Their difference is
  the callback's whole cost, but it is as noisy as two processes' throughput.
- **Direct.** In each run with the callback, the time spent in its hooks
  (`time.perf_counter()` around each, the wrapper's own time included), per step of
  the timed epochs; and, once, the time of dalipipe's timing of the feed per batch
  (`report.FeedTimes`, which runs with or without the callback: its `read` in `fit`'s
  thread, its `run` and `copy` wrappers in the feed's thread), by timing its methods
  on trivial payloads, less the same loop without them. Against the measured step
  time, they give the share of a step the report takes.

Writes one JSON file: the machine, the load average, every run and the summary.

    python benchmarks/report_cost.py [--source DIR] [--rounds 6] [--step-ms 40] \
        [--out benchmarks/results/report-cost-cpu/report_cost.json]

Without `--source`, `dalipipe.make_sample_dataset` writes `--images` JPEGs to a
temporary folder.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import types

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO_ROOT, "benchmarks", "results", "report-cost-cpu", "report_cost.json")
SETTINGS = ("without", "with")
# The hooks `InputReport` defines (it defines no per-batch hook).
HOOKS = ("on_train_begin", "on_epoch_begin", "on_test_begin", "on_test_end", "on_epoch_end",
         "on_train_end")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", help="an image folder (default: sample images)")
    parser.add_argument("--images", type=int, default=1000,
                        help="sample images written without --source (default: 1000)")
    parser.add_argument("--out", default=OUT, help=f"the JSON file (default: {OUT})")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs, after one warm-up")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--step-ms", type=float, default=40.0,
                        help="milliseconds added to every step (default: 40)")
    parser.add_argument("--feed-batches", type=int, default=200_000,
                        help="calls per timing of the feed's methods (default: 200000)")
    parser.add_argument("--child", choices=SETTINGS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        print(json.dumps(measure(args.source, report=args.child == "with", epochs=args.epochs,
                                 image_size=args.image_size, batch_size=args.batch_size,
                                 step_ms=args.step_ms)))
        return 0
    sys.path.insert(0, REPO_ROOT)
    from dalipipe.bench.harness import machine_info

    started, load = time.perf_counter(), os.getloadavg()
    with tempfile.TemporaryDirectory() as scratch:
        if args.source is None:
            from dalipipe import make_sample_dataset

            args.source = os.path.join(scratch, "images")
            make_sample_dataset(args.source, num_images=args.images)
        runs = alternate(args)
    feed = feed_timing_cost(args.feed_batches)
    report = {"what": __doc__.splitlines()[0], "machine": machine_info(),
              "load_average": [load, os.getloadavg()],
              "seconds": time.perf_counter() - started,
              "settings": {k: v for k, v in vars(args).items() if k != "child"},
              "feed_timing": feed, "runs": runs, "summary": summary(runs, feed)}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    print(json.dumps(report["summary"]))
    print(f"wrote {args.out}")
    return 0


def alternate(args):
    """Each setting in a fresh process, round by round, the order swapped each round."""
    from dalipipe.utils import child_env

    environment = child_env(KERAS_BACKEND="torch", CUDA_VISIBLE_DEVICES="")
    runs = []
    for number in range(1, args.rounds + 1):
        for setting in SETTINGS if number % 2 else SETTINGS[::-1]:
            command = [sys.executable, os.path.abspath(__file__), "--child", setting,
                       "--source", args.source, "--epochs", str(args.epochs),
                       "--image-size", str(args.image_size),
                       "--batch-size", str(args.batch_size), "--step-ms", str(args.step_ms)]
            done = subprocess.run(command, capture_output=True, text=True, env=environment,
                                  check=False)
            if done.returncode:
                raise RuntimeError(f"{setting} the report:\n{done.stderr[-3000:]}")
            result = json.loads(done.stdout.strip().splitlines()[-1])
            runs.append({"round": number, "report": setting, **result,
                         "load_average": os.getloadavg()[0]})
            print(json.dumps(runs[-1]), flush=True)
    return runs


def summary(runs, feed):
    """The alternated fits' medians and per-round cost, and the direct cost per step.

    `cost_percent` compares the medians of images/s; `round_cost_percent`, each
    round's pair (the spread says how far the noise goes). `direct_percent`: the
    callback's hooks plus the feed's timing, per step, in percent of the step time
    of the runs with the callback (the feed's `run` and `copy` run in the feed's
    thread, off the step's path while the model is the bottleneck: counting them is
    an upper bound).
    """
    medians = {s: statistics.median(r["images_per_s"] for r in runs if r["report"] == s)
               for s in SETTINGS}
    pairs = {}
    for r in runs:
        pairs.setdefault(r["round"], {})[r["report"]] = r["images_per_s"]
    per_round = [100 * (1 - p["with"] / p["without"]) for p in pairs.values() if len(p) == 2]
    with_report = [r for r in runs if r["report"] == "with"]
    step_ms = statistics.median(1e3 * r["seconds"] / r["steps"] for r in with_report)
    hooks_us = statistics.median(1e6 * r["hooks_seconds"] / r["steps"] for r in with_report)
    feed_us = feed["per_batch_us"]
    return {"images_per_s": medians,
            "cost_percent": 100 * (1 - medians["with"] / medians["without"]),
            "round_cost_percent": {"median": statistics.median(per_round),
                                   "min": min(per_round), "max": max(per_round)},
            "step_ms": step_ms, "hooks_us_per_step": hooks_us,
            "feed_timing_us_per_batch": feed_us,
            "fit_thread_us_per_step": hooks_us + feed["read_us"],
            "direct_percent": 100 * (hooks_us + feed_us) / (1e3 * step_ms),
            "input_wait": statistics.median(w for r in with_report for w in r["input_wait"])}


def feed_timing_cost(count=200_000):
    """Microseconds per batch of `report.FeedTimes`'s timing, on trivial payloads:
    `read` (with the `perf_counter()` that `PassStream.read` takes at its start), and
    the `run` and `copy` wrappers less the same loop without them."""
    sys.path.insert(0, REPO_ROOT)
    from dalipipe.report import FeedTimes

    clock = time.perf_counter
    times = FeedTimes()
    times.owner = threading.get_ident()
    items = [None] * count
    runner = types.SimpleNamespace(load_seconds=0.0)  # the `native.Runner` attribute it reads

    def identity(outputs):
        return outputs

    def best_of(function, repeats=5):
        found = []
        for _ in range(repeats):
            started = clock()
            function()
            found.append(clock() - started)
        return min(found) / count * 1e6

    def reads():
        for _ in items:
            times.read(clock(), 0.0)

    def bare():
        for item in items:
            identity(item)

    def runs():  # `run` wraps a generator of DALI's outputs (and closes it)
        for _ in times.run(runner, (item for item in items)):
            pass

    def generated():
        for _ in (item for item in items):
            pass

    def loop():
        for _ in items:
            pass

    copy = times.copy(identity)

    def copies():
        for item in items:
            copy(item)

    read_us = best_of(reads) - best_of(loop)
    run_us = best_of(runs) - best_of(generated)
    copy_us = best_of(copies) - best_of(bare)
    return {"read_us": read_us, "run_us": run_us, "copy_us": copy_us,
            "per_batch_us": read_us + run_us + copy_us, "count": count}


def timed_hooks(callback):
    """Wraps `callback`'s hooks (`HOOKS`) with `perf_counter()`; returns the dict
    whose `"seconds"` their calls add to."""
    spent = {"seconds": 0.0, "calls": 0}
    for name in HOOKS:
        hook = getattr(callback, name)

        def timed(*args, _hook=hook, **kwargs):
            started = time.perf_counter()
            try:
                return _hook(*args, **kwargs)
            finally:
                spent["seconds"] += time.perf_counter() - started
                spent["calls"] += 1

        setattr(callback, name, timed)
    return spent


def measure(source, *, report, epochs, image_size, batch_size, step_ms):
    """`fit` of a small network on `source` in this process, with the report or not,
    each step made `step_ms` longer."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import keras

    import dalipipe
    from feed_wait import small_network

    class Sleep(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            time.sleep(step_ms / 1e3)

    dataset = dalipipe.make_dali_dataset(source, image_size=(image_size, image_size),
                                         batch_size=batch_size, device="cpu", seed=0,
                                         verbose=False)
    model = small_network(image_size, len(dataset.class_names))
    callback = dalipipe.InputReport() if report else None
    callbacks = ([callback] if report else []) + ([Sleep()] if step_ms else [])
    model.fit(dataset, epochs=1, verbose=0, callbacks=callbacks)  # warm-up
    spent = timed_hooks(callback) if report else {"seconds": 0.0, "calls": 0}
    started = time.perf_counter()
    history = model.fit(dataset, epochs=epochs, verbose=0, callbacks=callbacks)
    seconds = time.perf_counter() - started
    images = epochs * len(dataset.file_paths)
    return {"images_per_s": images / seconds, "seconds": seconds, "images": images,
            "steps": epochs * len(dataset), "hooks_seconds": spent["seconds"],
            "hook_calls": spent["calls"], "input_wait": history.history.get("input_wait", [])}


if __name__ == "__main__":
    sys.exit(main())
