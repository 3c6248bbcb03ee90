"""Fuzzing the pre-flight check and DALI with mutated images, through `model.fit`.

`fuzz(count, seed, check, timeout, kind="jpeg")` makes `count` mutants of small real
images of format `kind` (any of `FORMATS`), deterministically for `seed`, cycling
through that format's mutations (`benchmarks.mutations.MUTATIONS`: for JPEG,
`MUTATIONS` here): plain ones (bit flips, truncation, garbage) and format-aware
ones (for JPEG, header fields; for PNG, chunks with their CRCs recomputed and the
deflate stream; for TIFF, IFD offsets and strip counts; for JPEG 2000, codestream
markers; for WebP, chunk sizes; for BMP and PNM, header fields).

The mutants go, in groups, through `make_dali_dataset` with the `check` asked for
(the default is "structure") and `on_bad_file="skip"`, its other options at their
defaults but a small image size, and `model.fit` trains one epoch on what the check
passes, in a worker process. A group whose fit fails, crashes or hangs is split in
halves until the failing file is alone, so each file's outcome is its own:
- `decoded`: the check passed it and DALI decoded it in `fit`;
- `reported`: the check named it before training;
- `dali_error_named`, `dali_error_unnamed`: the check passed it and DALI's error
  stopped `fit`, naming the file or not;
- `crash`: the worker process died; `hang`: it took longer than the time limit.

Each reported file is also decoded by DALI alone (`make_dali_pipeline`, no check):
a reported file that DALI decodes is a false alarm (`dali_decodes` is True).

The targets: no `dali_error_unnamed`, no `crash`, no `hang`, no false alarm. From the command line
it writes the report as JSON and exits with 1 when a target is missed;
`python -m benchmarks.fuzz --worker fit|decode` is the worker.

    python benchmarks/fuzz.py [--count 1000] [--check structure|full]
        [--format jpeg|png|tiff|jpeg2000|webp|bmp|pnm] [--out FILE]
"""

import argparse
import collections
import json
import os
import selectors
import subprocess
import sys
import tempfile
import time

import numpy as np

# The checkout this script belongs to: its dalipipe is the one fuzzed.
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:  # `python benchmarks/fuzz.py` puts benchmarks/ there
    sys.path.insert(0, REPO_ROOT)

from benchmarks import mutations  # noqa: E402  (after the path is set)

FORMATS = tuple(mutations.MUTATIONS)
MUTATIONS = mutations.MUTATIONS["jpeg"]
OUTCOMES = ("decoded", "reported", "dali_error_named", "dali_error_unnamed", "crash", "hang")
GROUP = 100  # mutants per fit
START_TIMEOUT = 300  # seconds for a worker to import TensorFlow and DALI


def make_corpus(directory, count, seed, kind="jpeg"):
    """`count` mutants of small images of format `kind`, made from JPEG crops of
    the shipped photographs."""
    from PIL import Image

    from dalipipe.sample_data import make_sample_dataset

    base_dir = os.path.join(directory, "base")
    make_sample_dataset(base_dir, num_images=8, num_classes=4, seed=seed,
                        crop_width=(60, 120))
    crops = sorted(os.path.join(root, f) for root, _, files in os.walk(base_dir)
                   for f in files if f.endswith(".jpg"))
    if kind == "jpeg":
        bases = []
        for path in crops:
            with open(path, "rb") as f:
                bases.append((f.read(), ".jpg"))
    else:
        pictures = []
        for path in crops:
            with Image.open(path) as image:
                pictures.append(image.convert("RGB"))
        bases = mutations.base_images(kind, pictures)
    rng = np.random.default_rng(seed)
    out = os.path.join(directory, "mutants")
    os.makedirs(out, exist_ok=True)
    paths, kinds = [], {}
    names = mutations.MUTATIONS[kind]
    for i in range(count):
        mutation = names[i % len(names)]
        data, extension = bases[i % len(bases)]
        path = os.path.join(out, f"{i:05d}_{mutation}{extension}")
        with open(path, "wb") as f:
            f.write(mutations.mutate(data, kind, mutation, rng))
        paths.append(path)
        kinds[path] = mutation
    return paths, kinds


class Worker:
    """A worker process (`python -m benchmarks.fuzz --worker <role>`) that answers
    one JSON line per JSON job; restarted after it crashes or hangs."""

    def __init__(self, role, env):
        self.role, self.env, self.process = role, env, None

    def ask(self, job, timeout):
        """The worker's answer to `job`, or `{"outcome": "crash" or "hang"}`."""
        if self.process is None:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.fuzz", "--worker", self.role],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                text=True, env=self.env,
            )
            ready = self._answer(START_TIMEOUT)
            if "ready" not in ready:
                raise RuntimeError(f"the fuzz {self.role} worker did not start: {ready}")
        self.process.stdin.write(json.dumps(job) + "\n")
        self.process.stdin.flush()
        return self._answer(timeout)

    def _answer(self, timeout):
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            if not selector.select(timeout):
                self.close()
                return {"outcome": "hang"}
        line = self.process.stdout.readline()
        if not line:
            status = self.process.wait()
            self.close()
            return {"outcome": "crash", "status": status}
        return json.loads(line)

    def close(self):
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None


def fit_outcomes(worker, paths, check, timeout):
    """`{path: record}` for `paths`, each through the check and `model.fit` (see the
    module doc); a group that fails is split until each failure is one file's."""
    answer = worker.ask({"paths": paths, "check": check}, timeout * (1 + len(paths) / 50))
    results = {path: {"outcome": "reported", "reason": reason}
               for path, reason in answer.get("reported", {}).items()}
    kept = [path for path in paths if path not in results]
    fit = answer.get("fit", answer)
    if not kept:
        return results
    if fit["outcome"] == "decoded":
        results.update((path, {"outcome": "decoded"}) for path in kept)
    elif len(paths) == 1:
        if fit["outcome"] == "dali_error":
            named = os.path.basename(paths[0]) in fit["error"]
            fit = {"outcome": "dali_error_named" if named else "dali_error_unnamed",
                   "error": fit["error"]}
        results[paths[0]] = fit
    else:
        half = len(kept) // 2 or 1
        for part in (kept[:half], kept[half:]):
            if part:
                results.update(fit_outcomes(worker, part, check, timeout))
    return results


def dali_decodes(worker, paths, timeout):
    """For each path: True if DALI alone (no check) decodes it, False if it raises,
    "crash" or "hang"."""
    found = {}
    for path in paths:
        answer = worker.ask({"paths": [path]}, timeout)
        found[path] = answer.get("decoded", answer.get("outcome"))
    return found


def fuzz(count, seed, check, timeout, kind="jpeg"):
    """Runs the fuzz corpus of `count` mutants of format `kind` (or of each format
    of a tuple of them); returns the report (summary and per-file outcomes).

    The outcomes are keyed by file name, and by "<format>/<mutation>" and
    "<format>/<file name>" for a tuple of formats."""
    from dalipipe.bench.harness import machine_info
    from dalipipe.checks import decoder_name
    from dalipipe.utils import child_env

    formats = (kind,) if isinstance(kind, str) else tuple(kind)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as directory:
        env = child_env(TF_CPP_MIN_LOG_LEVEL="3",
                        DALIPIPE_CACHE_DIR=os.path.join(directory, "cache"))
        paths, labels = [], {}
        for name in formats:
            some, mutated = make_corpus(os.path.join(directory, name), count, seed, name)
            prefix = f"{name}/" if len(formats) > 1 else ""
            paths += some
            labels.update((path, (prefix + os.path.basename(path), prefix + mutation))
                          for path, mutation in mutated.items())
        fitter, decoder = Worker("fit", env), Worker("decode", env)
        try:
            outcomes = {}
            for start in range(0, len(paths), GROUP):
                outcomes.update(fit_outcomes(fitter, paths[start: start + GROUP], check, timeout))
            fitter.close()
            reported = [path for path in paths if outcomes[path]["outcome"] == "reported"]
            for path, decodes in dali_decodes(decoder, reported, timeout).items():
                outcomes[path]["dali_decodes"] = decodes
        finally:
            fitter.close()
            decoder.close()
        files = {labels[path][0]: {**outcomes[path], "mutation": labels[path][1]}
                 for path in paths}
    return {"summary": summarize(files, format=kind if isinstance(kind, str) else list(formats),
                                 count=count, seed=seed, check=check,
                                 seconds=time.perf_counter() - started,
                                 machine=machine_info(), decoder=decoder_name()),
            "files": files}


def summarize(files, **about):
    """Counts of outcomes, overall and per mutation, and of false alarms."""
    counts = collections.Counter(record["outcome"] for record in files.values())
    per_mutation = {}
    for record in files.values():
        row = per_mutation.setdefault(record["mutation"], dict.fromkeys(OUTCOMES, 0))
        row[record["outcome"]] += 1
    reported = [r for r in files.values() if r["outcome"] == "reported"]
    false_alarms = [r for r in reported if r.get("dali_decodes") is True]
    alarm_reasons = collections.Counter(r["reason"].split(" (")[0] for r in false_alarms)
    about["seconds"] = round(about["seconds"], 1)
    return {
        **about,
        "outcomes": {k: counts.get(k, 0) for k in OUTCOMES},
        "per_mutation": per_mutation,
        "false_alarms": len(false_alarms),
        "false_alarm_reasons": dict(alarm_reasons.most_common()),
        "reported_dali_cannot_decode": sum(r.get("dali_decodes") is False for r in reported),
        "reported_dali_crashes_or_hangs": sum(r.get("dali_decodes") in ("crash", "hang")
                                              for r in reported),
        "ok": not any(counts.get(k) for k in ("dali_error_unnamed", "crash", "hang"))
        and not false_alarms,
    }


def _fit_worker(answer):
    """Answers `{"paths", "check"}` jobs: the check and `model.fit` on what it passes."""
    import warnings

    import keras

    from dalipipe import make_dali_dataset

    model = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.GlobalAveragePooling2D(),
                              keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    answer({"ready": True})
    for line in sys.stdin:
        job = json.loads(line)
        paths = job["paths"]
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                dataset = make_dali_dataset(paths, labels=[0] * len(paths), image_size=(32, 32),
                                            batch_size=16, verbose=False, check=job["check"],
                                            on_bad_file="skip")
        except ValueError as e:  # every file is bad
            answer({"reported": _report(str(e))})
            continue
        reported = {}
        for warning in caught:
            if "Report: " in str(warning.message):
                reported = _report(str(warning.message))
        try:
            model.fit(dataset, epochs=1, verbose=0)
            fit = {"outcome": "decoded"}
        except Exception as e:  # DALI's errors reach Keras as TensorFlow's
            fit = {"outcome": "dali_error", "error": _dali_message(str(e))}
        answer({"reported": reported, "fit": fit})


def _decode_worker(answer):
    """Answers `{"paths": [path]}` jobs: whether DALI alone decodes the file."""
    from dalipipe import make_dali_pipeline

    answer({"ready": True})
    for line in sys.stdin:
        (path,) = json.loads(line)["paths"]
        try:
            pipe = make_dali_pipeline([path], labels=None, image_size=(32, 32), batch_size=1,
                                      verbose=False, shuffle=False, device="cpu", num_threads=1,
                                      check=None)
            for _ in pipe.epoch():
                pass
            answer({"decoded": True})
        except Exception:  # DALI raises RuntimeError; anything else is a failure too
            answer({"decoded": False})


def _report(message):
    """`{path: reason}` from the report file that `message` names."""
    path = message.split("Report: ", 1)[1].split("\n", 1)[0].rstrip(".")
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        lines = f.read().splitlines()[1:]
    return {path: reason for reason, path in (line.split("\t", 1) for line in lines)}


def _dali_message(error):
    """The lines of a DALI error that say what happened, without its traceback."""
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    useful = [line for line in lines if "sample #" in line or "failure" in line
              or "decode" in line.lower()]
    return " | ".join(useful or lines[-2:])[:300]


def _serve(role):
    """Runs the `role` worker over stdin: its answers go to the original stdout, and
    anything the libraries print, to stderr."""
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)

    def answer(record):
        out.write(json.dumps(record) + "\n")
        out.flush()

    (_fit_worker if role == "fit" else _decode_worker)(answer)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000, help="mutants to make")
    parser.add_argument("--seed", type=int, default=0, help="seed of the mutations")
    parser.add_argument("--check", default="structure", choices=("structure", "full"),
                        help="make_dali_dataset's pre-flight check")
    parser.add_argument("--format", default="jpeg", choices=FORMATS,
                        help="the format of the mutated images")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per file")
    parser.add_argument("--out", default=None,
                        help="defaults to benchmarks/results/fuzz-<check>.json for "
                             "JPEG, else fuzz-<format>-<check>.json")
    parser.add_argument("--worker", choices=("fit", "decode"),
                        help="run as the worker that fuzz() starts")
    args = parser.parse_args(argv)
    if args.worker:
        _serve(args.worker)
        return 0
    name = args.check if args.format == "jpeg" else f"{args.format}-{args.check}"
    out = args.out or f"benchmarks/results/fuzz-{name}.json"
    report = fuzz(args.count, args.seed, args.check, args.timeout, args.format)
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w") as f:
        json.dump(report, f, indent=2)
    print(json.dumps(report["summary"], indent=2))
    print(f"wrote {out}")
    return 0 if report["summary"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
