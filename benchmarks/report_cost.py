"""What `dalipipe.InputReport` costs: `fit`'s images/s with and without it.

Per round, `fit` of a small convolutional network (the model is the bottleneck, the
case where the report must cost at most 1 % of a step) in a fresh process on Keras's
torch backend, without the callback then with it (the order swapped every other
round): images/s of the timed epochs, and with the callback its `input_wait`.
Writes one JSON file: the machine, the load average, every run and the medians.

    python benchmarks/report_cost.py [--source DIR] [--rounds 5] \
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
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO_ROOT, "benchmarks", "results", "report-cost-cpu", "report_cost.json")
SETTINGS = ("without", "with")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", help="an image folder (default: sample images)")
    parser.add_argument("--images", type=int, default=1000,
                        help="sample images written without --source (default: 1000)")
    parser.add_argument("--out", default=OUT, help=f"the JSON file (default: {OUT})")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs, after one warm-up")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--child", choices=SETTINGS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        print(json.dumps(measure(args.source, report=args.child == "with", epochs=args.epochs,
                                 image_size=args.image_size, batch_size=args.batch_size)))
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
    report = {"what": __doc__.splitlines()[0], "machine": machine_info(),
              "load_average": [load, os.getloadavg()],
              "seconds": time.perf_counter() - started,
              "settings": {k: v for k, v in vars(args).items() if k != "child"},
              "runs": runs, "summary": summary(runs)}
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
                       "--batch-size", str(args.batch_size)]
            done = subprocess.run(command, capture_output=True, text=True, env=environment,
                                  check=False)
            if done.returncode:
                raise RuntimeError(f"{setting} the report:\n{done.stderr[-3000:]}")
            result = json.loads(done.stdout.strip().splitlines()[-1])
            runs.append({"round": number, "report": setting, **result,
                         "load_average": os.getloadavg()[0]})
            print(json.dumps(runs[-1]), flush=True)
    return runs


def summary(runs):
    """The median images/s with and without the report, and its cost in percent."""
    medians = {s: statistics.median(r["images_per_s"] for r in runs if r["report"] == s)
               for s in SETTINGS}
    return {"images_per_s": medians,
            "cost_percent": 100 * (1 - medians["with"] / medians["without"]),
            "input_wait": statistics.median(
                w for r in runs if r["report"] == "with" for w in r["input_wait"])}


def measure(source, *, report, epochs, image_size, batch_size):
    """`fit` of a small network on `source` in this process, with the report or not."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import dalipipe
    from feed_wait import small_network

    dataset = dalipipe.make_dali_dataset(source, image_size=(image_size, image_size),
                                         batch_size=batch_size, device="cpu", seed=0,
                                         verbose=False)
    model = small_network(image_size, len(dataset.class_names))
    callbacks = [dalipipe.InputReport()] if report else []
    model.fit(dataset, epochs=1, verbose=0, callbacks=callbacks)  # warm-up
    started = time.perf_counter()
    history = model.fit(dataset, epochs=epochs, verbose=0, callbacks=callbacks)
    seconds = time.perf_counter() - started
    images = epochs * len(dataset.file_paths)
    return {"images_per_s": images / seconds, "seconds": seconds, "images": images,
            "input_wait": history.history.get("input_wait", [])}


if __name__ == "__main__":
    sys.exit(main())
