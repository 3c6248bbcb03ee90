"""GPU loader benchmark without TensorFlow: dalipipe's DALI graph against PyTorch loaders,
and the GPU decoder's settings swept.

For a machine with DALI, PyTorch, torchvision, psutil and a CUDA GPU (nvidia-ml-py for
the GPU's name and memory; `scripts/gpu_extras.sh`), and no TensorFlow, pandas,
scikit-image or scikit-learn. Over sample JPEGs it makes (`make_sample_dataset`:
synthetic pictures where the shipped photographs are absent), with one DALI thread
count (or DataLoader worker count) for every section, `--threads`:

1. `dalipipe.bench` (the harness and the report of `dalipipe bench`) on the train,
   eval and randaugment workloads (the last: dalipipe's `RandAugment(2, 9)` in the
   graph against torchvision's `v2.RandAugment(2, 9)` on GPU tensors), for these
   loaders: dalipipe's GPU graph run natively, batches
   copied to the host (once) and kept on the GPU; batched
   `torchvision.io.decode_jpeg(device="cuda")`, crop, resize and normalize on the GPU;
   a torch `DataLoader` decoding with `decode_jpeg` on the CPU; dalipipe's CPU graph
   run natively; and DALI's decoding alone, set up as dalipipe's graph sets it up
   (the decode-only ceilings, CPU and GPU). Then, within the section's budget
   (`--dense-budget` of it), the dense workloads over `dalipipe.bench.dense_data`'s
   JPEGs: segmentation (greyscale masks, random-resized crop and flip of both,
   160x160) and detection (a COCO instances JSON, `box_crop`, 512x512), for
   dalipipe's graphs (`DENSE_LOADERS`, a graph's two workloads one after the other),
   under `"dense"`.
2. Both crop set-ups of the train workload (`codecs.crop_setup()`: the one chosen for
   this nvJPEG, and `full_decode` forced with `DALIPIPE_ROI_FANCY_UPSAMPLING=0`): the
   GPU graph's images/s, the crop decode-only ceiling, and which decoder nvImageCodec
   used for every image of an epoch (its log; `cpu_decoded` counts those decoded on
   the CPU).
3. Keras's `fit` with its PyTorch backend (`KERAS_BACKEND=torch`) training ResNet-50 on
   the train workload fed by `make_dali_dataset` (GPU-decoded batches as CUDA tensors),
   and on the same batches held in device memory: the ratio is the input efficiency
   (`benchmarks/keras_fit.py`).
4. The sweep: DALI threads (2, 4, 8, 16) × `decoder={"hw_decoder_load": ...}` (0,
   0.35, 0.65, 0.9) on the train and eval workloads, images/s and GPU memory of the GPU
   graph with its batches left on the GPU.

GPU preprocessing images/s (section 1) and end-to-end `fit` images/s (section 3) are
reported apart. Each measurement runs in a fresh process; each section has its time
limit, and what is not started in time is recorded as skipped, as is one whose
requirements are absent (torch, a GPU), so the script also runs on a CPU-only machine
as a rehearsal. The default run is sized for the GPU machine's whole run
(`scripts/gpu_run.sh`): at most about 4.5 minutes, by its budgets (making 1000 images
about 0.5 on 16 cores, section 1 1.7 with its dense workloads, 2 0.4, 3 1, 4 0.8; not
yet timed on an H200), plus making the 128 images with masks and boxes (not timed there
either).

Writes `results.json` (every setting under `settings`, each section's status under
`sections`, the summary under `summary`) and `results.md` to `--out` at the start and
again as each section ends; while section 1 runs, it rewrites `results.json` after
each of its measurements, with its own results only. A section that raises is
recorded as failed, with the exception as one line (its traceback goes to stderr),
and the next one runs. A SIGTERM (what `timeout` sends) kills the measurement
processes, each with its process group (psutil), stops the section in progress,
keeps what it had measured, writes both files with the summary, and exits with
status 143; a failed section makes it 1.

Above 400 lines: the four sections, their summary and tables, and the run that keeps
what it measured whatever ends it, which `scripts/gpu_run.sh` relies on.

    python benchmarks/gpu_bench.py [--out DIR] [--num-images 1000] [--batch-size 128]
        [--threads N] [--data DIR] [--quick]
"""

import argparse
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback

# The checkout this script belongs to: its dalipipe is the one measured.
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:  # `python benchmarks/gpu_bench.py` puts benchmarks/ there
    sys.path.insert(0, REPO_ROOT)
from dalipipe.bench.harness import error_line  # noqa: E402

LOADERS = ("dalipipe_native_gpu", "dalipipe_native_gpu_on_device", "torchvision_gpu",
           "torch_dataloader", "dalipipe_native_cpu")
WORKLOADS = ("train", "eval", "randaugment")
# The dense workloads (images with masks, with boxes) and the graphs measured on them.
DENSE_WORKLOADS = ("segmentation", "detection")
DENSE_LOADERS = ("dalipipe_native_gpu_on_device", "dalipipe_native_gpu", "dalipipe_native_cpu")
# At most this many images with masks and boxes (making them is slow: 1,000 took about
# 5 minutes on 2 cores under a load average of 7-8), in batches of at most 32 (the batch of
# Keras's segmentation example).
DENSE_IMAGES, DENSE_BATCH = 128, 32
# The GPU graph whose images/s is GPU preprocessing: batches left on the GPU.
PREPROCESSING = "dalipipe_native_gpu_on_device"
SETUPS = {"chosen": {}, "forced_full_decode": {"DALIPIPE_ROI_FANCY_UPSAMPLING": "0"}}
SWEEP_THREADS = (2, 4, 8, 16)
SWEEP_WORKLOADS = ("train", "eval")
SWEEP_LOADS = (0.0, 0.35, 0.65, 0.9)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/gpu",
                        help="folder for results.json and results.md")
    parser.add_argument("--num-images", type=int, default=1000,
                        help="sample images to make (at most 64 with --quick)")
    parser.add_argument("--batch-size", type=int, default=128,
                        help="batch size (at most 16 with --quick)")
    parser.add_argument("--threads", type=int, default=None,
                        help="DALI threads and DataLoader workers of every section but the "
                             "sweep (default: dalipipe's GPU default, 4 at most the cores)")
    parser.add_argument("--runs", type=int, default=3, help="timed epochs after the warm-up")
    parser.add_argument("--data", default=None,
                        help="image folder: sample images are made there when it is absent, "
                             "empty or dalipipe's, else it is read as it is (default: a "
                             "temporary folder)")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run on 64 images, a sweep of 2 points")
    parser.add_argument("--section-timeout", type=float, default=40,
                        help="seconds after which one measurement is stopped")
    parser.add_argument("--time-budget", type=float, default=100,
                        help="seconds for section 1; what is left then is stopped or not started")
    parser.add_argument("--dense-budget", type=float, default=20,
                        help="seconds of section 1's --time-budget for the dense workloads")
    parser.add_argument("--setups-budget", type=float, default=25,
                        help="seconds for section 2 (both crop set-ups)")
    parser.add_argument("--fit-model", default=None, choices=("resnet50", "small"),
                        help="the model of the Keras fit section (default: resnet50; "
                             "small with --quick)")
    parser.add_argument("--fit-timeout", type=float, default=60,
                        help="seconds after which the Keras fit section is stopped")
    parser.add_argument("--sweep-budget", type=float, default=50,
                        help="seconds for the sweep; thread counts not started by then are "
                             "skipped")
    parser.add_argument("--sweep-timeout", type=float, default=30,
                        help="seconds after which one thread count's points are stopped")
    args = parser.parse_args(argv)
    for name in ("num_images", "batch_size", "runs", "threads"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    return args


SECTIONS = {"loaders": "1. loaders", "crop_setups": "2. crop set-ups", "keras_fit": "3. Keras fit",
            "sweep": "4. sweep"}


class Stopped(BaseException):
    """SIGTERM while measuring. Not an `Exception`, so that no section records it as its
    failure; the section in progress unwinds, killing its measurement process on the way
    (`harness.run_task_in_subprocess`, `subprocess.run`)."""


class Sigterm:
    """While installed (`with Sigterm() as sigterm:`), the first SIGTERM kills every
    process this one started (`end_descendants`) and, while `measuring`, raises
    `Stopped`; later ones, and any while writing, are only counted in `received`."""

    def __init__(self):
        self.received, self.measuring, self._previous = 0, True, None

    def __enter__(self):
        self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def __exit__(self, *exc_info):
        signal.signal(signal.SIGTERM, self._previous)

    def _handle(self, signum, frame):
        self.received += 1
        if self.received == 1:
            end_descendants()
            if self.measuring:
                self.measuring = False
                raise Stopped("SIGTERM")


def end_descendants():
    """Kills every process this one started and theirs, each measurement process with
    its process group: they run in sessions of their own, which the SIGTERM that
    `timeout` sends to this process's group misses. Needs psutil; without it, only
    the measurement process in progress is killed (as `Stopped` unwinds)."""
    try:
        import psutil
    except ImportError:
        return
    own = os.getpgrp()
    for process in psutil.Process().children(recursive=True):
        try:
            group = os.getpgid(process.pid)
            if group == own:
                process.kill()
            else:
                os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue  # ended meanwhile


def main(argv=None):
    args = parse_args(argv)
    from dalipipe.devices import default_num_threads

    threads = args.threads or default_num_threads("gpu")
    sweep_threads, sweep_loads = sweep_points(args)
    started = time.perf_counter()
    result = {"sections": {name: {"status": "not started"} for name in SECTIONS}}
    result["settings"] = {**vars(args), "threads": threads, "workloads": list(WORKLOADS),
                          "loaders": list(LOADERS), "dense_workloads": list(DENSE_WORKLOADS),
                          "dense_loaders": list(DENSE_LOADERS),
                          "sweep_threads": list(sweep_threads),
                          "sweep_hw_decoder_loads": list(sweep_loads),
                          "environment": {k: v for k, v in os.environ.items()
                                          if k.startswith(("DALI", "KERAS", "CUDA"))}}
    os.makedirs(args.out, exist_ok=True)
    write_results(result, args.out, started)  # replaces an earlier run's files
    with Sigterm() as sigterm:
        with tempfile.TemporaryDirectory(prefix="gpu_bench_") as scratch:
            data = args.data or os.path.join(scratch, "data")
            try:
                for name, run in sections(result, args, data, threads,
                                          sweep_threads, sweep_loads).items():
                    run_section(result, name, run)
                    write_results(result, args.out, started)
            except Stopped:
                print("SIGTERM: measuring stopped; writing what was measured", flush=True)
                for status in result["sections"].values():
                    if status["status"] == "running":
                        status["status"] = "stopped by SIGTERM"
            finally:
                sigterm.measuring = False
        write_results(result, args.out, started)
        print(results_markdown(result))
        print(f"wrote {args.out}/results.json and results.md in {result['seconds_total']:.0f} s")
        if sigterm.received:
            return 128 + signal.SIGTERM
    return 1 if any(s["status"] == "failed" for s in result["sections"].values()) else 0


def sections(result, args, data, threads, sweep_threads, sweep_loads):
    """Each section as a function of no arguments that records its results in `result`
    (a list of them as each measurement ends), in the order they run."""
    def common():
        return task_common(result, data, threads)

    def keras_fit():
        result["keras_fit"] = keras_fit_section(args, data=data, threads=threads)

    return {
        "loaders": lambda: loaders_section(result, args, data, threads),
        "crop_setups": lambda: crop_setups_section(
            result.setdefault("crop_setups", []), common(), args),
        "keras_fit": keras_fit,
        "sweep": lambda: sweep_section(
            result.setdefault("sweep", []), common(), args, sweep_threads, sweep_loads),
    }


def run_section(result, name, run):
    """Runs section `name` and records its status in `result["sections"]`: done, failed
    (the exception as one line, its traceback to stderr; the next section runs) or
    stopped (`Stopped`, raised on)."""
    started = time.perf_counter()
    status = result["sections"][name]
    status.update(status="running")
    try:
        run()
    except Stopped:
        status.update(status="stopped by SIGTERM", seconds=time.perf_counter() - started)
        raise
    except Exception as e:  # recorded; the later sections still run
        traceback.print_exc()
        status.update(status="failed", error=error_line(e), seconds=time.perf_counter() - started)
        print(f"section {SECTIONS[name]} failed: {status['error']}", flush=True)
    else:
        status.update(status="done", seconds=time.perf_counter() - started)


def loaders_section(result, args, data, threads):
    """Section 1, `dalipipe.bench.report.run_bench`, which rewrites results.json after
    each measurement: what it wrote there is kept when it is stopped or fails. Then
    the dense workloads (`dense_loaders`), within `--dense-budget` of the section's
    `--time-budget`."""
    from dalipipe.bench import report

    dense_budget = min(args.dense_budget, args.time_budget)
    try:
        result.update(report.run_bench(
            data=data, out=args.out, loaders=LOADERS, workloads=WORKLOADS,
            batch_size=args.batch_size, num_images=args.num_images, runs=args.runs,
            train_steps=0, threads=threads, quick=args.quick, reference="dalipipe_native_gpu",
            timeout=args.section_timeout, time_budget=args.time_budget - dense_budget,
            stream=sys.stdout))
        dense_loaders(result.setdefault("dense", []), args, data, threads, dense_budget)
    except BaseException:
        try:
            with open(os.path.join(args.out, "results.json")) as f:
                written = json.load(f)
        except (OSError, ValueError):
            written = {}
        if "config" in written:  # run_bench's, not the one main wrote before it
            result.update({k: v for k, v in written.items() if k not in ("sections", "settings")})
        raise


def dense_loaders(results, args, data, threads, budget):
    """The dense workloads for `DENSE_LOADERS` over `dalipipe.bench.dense_data`'s images
    (made in `data` with "-segmentation" added: `DENSE_IMAGES`, `DENSE_BATCH`), the
    runs of section 1, a loader's workloads one after the other (the GPU preprocessing
    graph's first); appended to `results` as each ends."""
    from dalipipe.bench.dense_data import dense_data

    batch_size = min(args.batch_size, 16 if args.quick else DENSE_BATCH)
    runs = 1 if args.quick else args.runs
    dense = dense_data(data.rstrip("/") + "-segmentation", seed=0,
                       num_images=min(args.num_images, 64 if args.quick else DENSE_IMAGES))
    print(f"dense workloads on {len(dense.images)} images with masks and boxes:", flush=True)
    tasks = [dict(kind="measure", loader=loader, workload=workload, train_steps=0, seed=0,
                  files=dense.images, labels=dense.targets(workload), threads=threads,
                  num_classes=0, batch_size=batch_size, runs=runs)
             for loader in DENSE_LOADERS for workload in DENSE_WORKLOADS]
    for _, found in run_tasks(tasks, budget, args.section_timeout):
        results.append(found)


def write_results(result, out, started):
    """results.json (atomically) and results.md, with the summary of what has been
    measured so far."""
    try:
        result["summary"] = summary(result)
    except Exception as e:  # the figures are written all the same
        result["summary"] = {"error": error_line(e)}
    result["seconds_total"] = time.perf_counter() - started
    path = os.path.join(out, "results.json")
    with open(path + ".tmp", "w") as f:
        json.dump(result, f, indent=2)
    os.replace(path + ".tmp", path)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(results_markdown(result))


def task_common(result, data, threads):
    """The task fields of every measurement, from section 1's config and dataset."""
    from dalipipe import sources

    if "config" not in result:
        raise RuntimeError("section 1 recorded no config: the data and batch are unknown")
    index = sources.index_source(data)
    config = result["config"]
    return dict(files=index.file_paths, labels=index.labels.tolist(), threads=threads,
                batch_size=config["batch_size"], seed=config["seed"], runs=config["runs"],
                num_classes=len(index.class_names))


def run_tasks(tasks, budget, timeout):
    """Each task in a fresh process (`harness.run_task_in_subprocess`), within `budget`
    seconds: yields each task with its result dict as it ends, `{"skipped": reason}`
    for one that cannot run here or is not started in time. Tasks carry their own
    `env` and `options`."""
    from dalipipe.bench import harness, loaders as loaders_lib

    started, reasons = time.perf_counter(), {}
    for task in tasks:
        name = harness.task_name(task)
        requirement = task["loader"] if task["kind"] == "sweep" else \
            "dali_decode_only_gpu" if task["kind"] == "decoders" else name
        if requirement not in reasons:
            reasons[requirement] = loaders_lib.unavailable(requirement)
        left = budget - (time.perf_counter() - started)
        fields = {k: task[k] for k in ("workload", "threads", "options", "env", "setup")
                  if k in task}
        if reasons[requirement]:
            found = {"loader": name, **fields, "skipped": reasons[requirement]}
        elif left <= 0:
            found = {"loader": name, **fields, "skipped": f"time budget of {budget:g} s spent"}
        else:
            found = {**fields, **harness.run_task_in_subprocess(task, timeout=min(timeout, left))}
        print(f"  {name} {fields}: " + (f"{found['images_per_s']:.0f} images/s"
              if "images_per_s" in found else str({k: v for k, v in found.items()
                                                   if k not in fields})[:200]), flush=True)
        yield task, found


def crop_setups_section(results, common, args):
    """Section 2: per crop set-up, the train workload's GPU graph, the crop
    decode-only ceiling and the decoders nvImageCodec used; appended to `results`
    as each ends."""
    print("crop set-ups (train workload):", flush=True)
    tasks = []
    for setup, env in SETUPS.items():
        tasks += [
            dict(kind="measure", loader=PREPROCESSING, workload="train", train_steps=0,
                 env=env, setup=setup, **common),
            dict(kind="decode", device="gpu", crop=True, env=env, setup=setup, **common),
            dict(kind="decoders", workload="train", setup=setup, **common,
                 env={**env, "DALI_NVIMGCODEC_LOG_LEVEL": "5"}),
        ]
    for _, found in run_tasks(tasks, args.setups_budget, args.section_timeout):
        results.append(found)


def sweep_points(args):
    """The sweep's thread counts and loads (two points with `--quick`)."""
    if args.quick:
        return SWEEP_THREADS[:1], (SWEEP_LOADS[0], SWEEP_LOADS[2])
    return SWEEP_THREADS, SWEEP_LOADS


def sweep_section(results, common, args, thread_counts, loads):
    """Section 4: `thread_counts` × `loads` (`decoder={"hw_decoder_load": load}`) on
    the train and eval workloads (`SWEEP_WORKLOADS`), batches left on the GPU; one
    process per thread count (`harness.sweep`), its points a result each, appended to
    `results` as each process ends."""
    print("sweep of threads × hw_decoder_load:", flush=True)
    runs = 1 if args.quick else min(args.runs, 2)
    points = [dict(workload=workload, options={"decoder": {"hw_decoder_load": load}})
              for workload in SWEEP_WORKLOADS for load in loads]
    tasks = [dict(kind="sweep", loader=PREPROCESSING, train_steps=0, points=points,
                  **{**common, "threads": threads, "runs": runs})
             for threads in thread_counts]
    for task, found in run_tasks(tasks, args.sweep_budget, args.sweep_timeout):
        if "points" in found:
            results += found["points"]
        else:  # skipped or failed: each of its points says so
            why = {k: found[k] for k in ("skipped", "error") if k in found}
            results += [{"loader": PREPROCESSING, "threads": task["threads"], **point, **why}
                        for point in points]


def keras_fit_section(args, *, data, threads):
    """`benchmarks/keras_fit.py` in a fresh process on Keras's torch backend: its
    result, or `{"skipped": reason}`."""
    for module in ("torch", "keras"):
        if importlib.util.find_spec(module) is None:
            return {"skipped": f"{module} is not installed"}
    from benchmarks.keras_fit import run_keras_fit

    print("Keras fit, torch backend:", flush=True)
    quick = args.quick
    try:
        return run_keras_fit(
            data, backend="torch", model=args.fit_model or ("small" if quick else "resnet50"),
            image_size=32 if quick else 224,
            batch_size=min(args.batch_size, 8) if quick else args.batch_size,
            epochs=2 if quick else 3, warmup=2 if quick else 5, timeout=args.fit_timeout,
            num_threads=threads)
    except subprocess.TimeoutExpired:
        return {"skipped": f"stopped after {args.fit_timeout:g} s"}
    except RuntimeError as e:
        return {"failed": str(e)}


def summary(result):
    """GPU preprocessing images/s (train, eval) and end-to-end fit images/s, apart, of
    what has been measured; and each section's status."""
    by_key = {(r.get("loader"), r.get("workload")): r
              for r in result.get("results", []) + result.get("dense", [])}
    fit = result.get("keras_fit") or {}
    return {
        "gpu": result.get("machine", {}).get("gpu"),
        "threads": result["settings"]["threads"],
        "gpu_preprocessing_images_per_s": {
            w: by_key.get((PREPROCESSING, w), {}).get("images_per_s")
            for w in WORKLOADS + DENSE_WORKLOADS},
        "torchvision_randaugment_images_per_s":
            by_key.get(("torchvision_gpu", "randaugment"), {}).get("images_per_s"),
        "fit_images_per_s": fit.get("images_per_s_dalipipe"),
        "fit_images_per_s_in_memory": fit.get("images_per_s_in_memory"),
        "input_efficiency": fit.get("input_efficiency"),
        "fit_model": fit.get("model"),
        "cpu_decoded": {r["setup"]: r.get("cpu_decoded") for r in result.get("crop_setups", [])
                        if r.get("loader") == "decoders_used"},
        "sections": {name: s["status"] for name, s in result["sections"].items()},
    }


def results_markdown(result):
    """results.md: the summary, then each section's tables, of what has been measured.
    A part that cannot be drawn says why, and the others are drawn."""
    from dalipipe.bench import report

    parts = [
        ("Summary", lambda: summary_markdown(result["summary"], result["sections"])),
        ("Loaders", lambda: report.markdown(result) if "config" in result else
         "## Loaders\n\nNo result.\n"),
        ("Dense workloads", lambda: dense_markdown(result.get("dense", []))),
        ("Crop set-ups", lambda: setups_markdown(result.get("crop_setups", []))),
        ("Keras fit", lambda: fit_markdown(result.get("keras_fit"))),
        ("Sweep", lambda: sweep_markdown(result.get("sweep", []))),
    ]
    texts = []
    for title, draw in parts:
        try:
            texts.append(draw())
        except Exception as e:  # a drawing bug loses one table, not the file
            texts.append(f"## {title}\n\nNot drawn: {error_line(e)}\n")
    return "\n".join(texts)


def _cell(value, spec=".0f"):
    return "–" if value is None else format(value, spec)


def summary_markdown(s, sections):
    if "error" in s:
        return f"## Summary\n\nNot computed: {s['error']}\n"
    pre = s["gpu_preprocessing_images_per_s"]
    done = "; ".join(
        f"{SECTIONS[name]} {status['status']}"
        + (f" after {status['seconds']:.0f} s" if "seconds" in status else "")
        + (f" ({status['error']})" if "error" in status else "")
        for name, status in sections.items())
    return (
        "## Summary\n\n"
        f"GPU: {s['gpu']}; {s['threads']} DALI threads in every section but the sweep.\n\n"
        f"Sections: {done}.\n\n"
        "| measure | images/s |\n|---|---|\n"
        f"| GPU preprocessing, train (`{PREPROCESSING}`) | {_cell(pre.get('train'))} |\n"
        f"| GPU preprocessing, eval | {_cell(pre.get('eval'))} |\n"
        f"| GPU preprocessing, train + RandAugment(2, 9) | {_cell(pre.get('randaugment'))} |\n"
        f"| GPU preprocessing, segmentation (images with masks, 160x160) | "
        f"{_cell(pre.get('segmentation'))} |\n"
        f"| GPU preprocessing, detection (images with boxes, box_crop, 512x512) | "
        f"{_cell(pre.get('detection'))} |\n"
        f"| torchvision's v2.RandAugment(2, 9) on the GPU, the same work | "
        f"{_cell(s.get('torchvision_randaugment_images_per_s'))} |\n"
        f"| end-to-end Keras fit, {s['fit_model'] or '–'}, torch backend | "
        f"{_cell(s['fit_images_per_s'])} |\n"
        f"| the same fit from device memory | {_cell(s['fit_images_per_s_in_memory'])} |\n\n"
        f"Input efficiency: {_cell(s['input_efficiency'], '.3f')}. Training images decoded "
        f"on the CPU, per crop set-up: {s['cpu_decoded'] or '–'}.\n"
    )


def _outcome(r):
    if "images_per_s" in r:
        return f"{r['images_per_s']:.0f}"
    return ("skipped: " + str(r["skipped"]) if "skipped" in r
            else "error: " + str(r.get("error", "no result")))[:120].replace("|", "/")


def dense_markdown(results):
    from dalipipe.bench.report import targets_words

    lines = ["## Dense workloads", "", "| workload | loader | images/s | masks or boxes of the "
             "first batch |", "|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r.get('workload')} | {r.get('loader')} | {_outcome(r)} | "
                     f"{targets_words(r)} |")
    return "\n".join(lines) + "\n"


def setups_markdown(results):
    lines = ["## Crop set-ups (train workload)", "",
             "| set-up | measured | crop set-up | images/s | decoders (samples) | on the CPU |",
             "|---|---|---|---|---|---|"]
    for r in results:
        decoders = r.get("decoders")
        lines.append(
            f"| {r['setup']} | {r.get('loader')} | {r.get('crop_setup', '–')} | "
            f"{_outcome(r) if 'decoders' not in r else '–'} | "
            f"{'–' if decoders is None else decoders} | {r.get('cpu_decoded', '–')} |")
    return "\n".join(lines) + "\n"


def sweep_markdown(results):
    lines = [f"## Sweep: DALI threads × hw_decoder_load (`{PREPROCESSING}`)", "",
             "| workload | threads | hw_decoder_load | images/s | GPU memory in use after (MB) "
             "| of it since the start (MB) |", "|---|---|---|---|---|---|"]
    for r in results:
        lines.append(
            f"| {r.get('workload')} | {r.get('threads')} | "
            f"{r.get('options', {}).get('decoder', {}).get('hw_decoder_load')} | "
            f"{_outcome(r)} | "
            f"{_cell(r.get('gpu_memory_used_mb_after'))} | {_cell(r.get('gpu_memory_mb'))} |")
    return "\n".join(lines) + "\n"


def fit_markdown(fit):
    """The Keras fit section's lines for results.md."""
    head = "## Keras fit, torch backend: input efficiency\n\n"
    if fit is None:
        return head + "No result.\n"
    if "skipped" in fit or "failed" in fit:
        reason = fit.get("skipped") or "failed: " + fit["failed"].strip().splitlines()[-1]
        return head + f"{reason}\n"
    return head + (
        f"{fit['model']} at {fit['image_size'][0]}×{fit['image_size'][1]}, batch "
        f"{fit['batch_size']}, {fit['steps_per_epoch']} steps × {fit['epochs']} epochs "
        f"({fit['warmup_steps']} untimed), DALI on the {fit['device']} with "
        f"{fit.get('num_threads')} threads:\n\n"
        "| fed by | images/s |\n|---|---|\n"
        f"| make_dali_dataset | {fit['images_per_s_dalipipe']:.1f} |\n"
        f"| the same batches in device memory | {fit['images_per_s_in_memory']:.1f} |\n\n"
        f"Input efficiency: {fit['input_efficiency']:.3f}\n"
    )


if __name__ == "__main__":
    sys.exit(main())
