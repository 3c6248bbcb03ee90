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
   (the decode-only ceilings, CPU and GPU).
2. Both crop set-ups of the train workload (`codecs.crop_setup()`: the one chosen for
   this nvJPEG, and `full_decode` forced with `DALIPIPE_ROI_FANCY_UPSAMPLING=0`): the
   GPU graph's images/s, the crop decode-only ceiling, and which decoder nvImageCodec
   used for every image of an epoch (its log; `cpu_decoded` counts those decoded on
   the CPU).
3. Keras's `fit` with its PyTorch backend (`KERAS_BACKEND=torch`) training ResNet-50 on
   the train workload fed by `make_dali_dataset` (GPU-decoded batches as CUDA tensors),
   and on the same batches held in device memory: the ratio is the input efficiency
   (`benchmarks/keras_fit.py`).
4. The sweep: DALI threads (2, 4, 8, 16) × `hw_decoder_load` (0, 0.35, 0.65, 0.9) on
   the train and eval workloads, images/s and GPU memory of the GPU graph with its
   batches left on the GPU.

GPU preprocessing images/s (section 1) and end-to-end `fit` images/s (section 3) are
reported apart. Each measurement runs in a fresh process; each section has its time
limit, and what is not started in time is recorded as skipped, as is one whose
requirements are absent (torch, a GPU), so the script also runs on a CPU-only machine
as a rehearsal. Writes `results.json` (every setting under `settings`) and
`results.md` to `--out`. The default run is sized for the GPU machine's whole run of
8 minutes (`scripts/gpu_run.sh`): at most about 4.5 minutes, by its budgets (making
1000 images about 0.5 on 16 cores, section 1 1.7, 2 0.4, 3 1, 4 0.8; not yet timed on
an H200).

    python benchmarks/gpu_bench.py [--out DIR] [--num-images 1000] [--batch-size 128]
        [--threads N] [--data DIR] [--quick]
"""

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

# The checkout this script belongs to: its dalipipe is the one measured.
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOADERS = ("dalipipe_native_gpu", "dalipipe_native_gpu_on_device", "torchvision_gpu",
           "torch_dataloader", "dalipipe_native_cpu")
WORKLOADS = ("train", "eval", "randaugment")
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


def main(argv=None):
    args = parse_args(argv)
    if REPO_ROOT not in sys.path:  # `python benchmarks/gpu_bench.py` puts benchmarks/ there
        sys.path.insert(0, REPO_ROOT)
    from dalipipe.bench import report
    from dalipipe.devices import default_num_threads

    threads = args.threads or default_num_threads("gpu")
    sweep_threads, sweep_loads = sweep_points(args)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpu_bench_") as scratch:
        data = args.data or os.path.join(scratch, "data")
        result = report.run_bench(
            data=data, out=args.out, loaders=LOADERS, workloads=WORKLOADS,
            batch_size=args.batch_size, num_images=args.num_images, runs=args.runs,
            train_steps=0, threads=threads, quick=args.quick, reference="dalipipe_native_gpu",
            timeout=args.section_timeout, time_budget=args.time_budget, stream=sys.stdout,
        )
        common = task_common(result, data, threads)
        result["crop_setups"] = crop_setups_section(common, args)
        result["keras_fit"] = keras_fit_section(args, data=data, threads=threads)
        result["sweep"] = sweep_section(common, args, sweep_threads, sweep_loads)
    result["settings"] = {**vars(args), "threads": threads, "workloads": list(WORKLOADS),
                          "loaders": list(LOADERS), "sweep_threads": list(sweep_threads),
                          "sweep_hw_decoder_loads": list(sweep_loads),
                          "environment": {k: v for k, v in os.environ.items()
                                          if k.startswith(("DALI", "KERAS", "CUDA"))}}
    result["summary"] = summary(result)
    result["seconds_total"] = time.perf_counter() - started
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(result, f, indent=2)
    table = "\n".join([summary_markdown(result["summary"]), report.markdown(result),
                       setups_markdown(result["crop_setups"]), fit_markdown(result["keras_fit"]),
                       sweep_markdown(result["sweep"])])
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(table)
    print(table)
    print(f"wrote {args.out}/results.json and results.md in {result['seconds_total']:.0f} s")
    return 0


def task_common(result, data, threads):
    """The task fields of every measurement, from section 1's config and dataset."""
    from dalipipe import sources

    index = sources.index_source(data)
    config = result["config"]
    return dict(files=index.file_paths, labels=index.labels.tolist(), threads=threads,
                batch_size=config["batch_size"], seed=config["seed"], runs=config["runs"],
                num_classes=len(index.class_names))


def run_tasks(tasks, budget, timeout):
    """Each task in a fresh process (`harness.run_task_in_subprocess`), within `budget`
    seconds: a result dict each, `{"skipped": reason}` for one that cannot run here
    or is not started in time. Tasks carry their own `env` and `options`."""
    from dalipipe.bench import harness, loaders as loaders_lib

    started, results, reasons = time.perf_counter(), [], {}
    for task in tasks:
        name = harness.task_name(task)
        requirement = task["loader"] if task["kind"] == "sweep" else \
            "dali_decode_only_gpu" if task["kind"] == "decoders" else name
        if requirement not in reasons:
            reasons[requirement] = loaders_lib.unavailable(requirement)
        left = budget - (time.perf_counter() - started)
        fields = {k: task[k] for k in ("workload", "threads", "options", "env") if k in task}
        if reasons[requirement]:
            results.append({"loader": name, **fields, "skipped": reasons[requirement]})
        elif left <= 0:
            results.append({"loader": name, **fields, "skipped": f"time budget of {budget:g} s spent"})
        else:
            found = harness.run_task_in_subprocess(task, timeout=min(timeout, left))
            results.append({**fields, **found})
        print(f"  {name} {fields}: " + (f"{results[-1]['images_per_s']:.0f} images/s"
              if "images_per_s" in results[-1] else str({k: v for k, v in results[-1].items()
                                                         if k not in fields})[:200]), flush=True)
    return results


def crop_setups_section(common, args):
    """Section 2: per crop set-up, the train workload's GPU graph, the crop
    decode-only ceiling and the decoders nvImageCodec used."""
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
    results = run_tasks(tasks, args.setups_budget, args.section_timeout)
    for task, found in zip(tasks, results):
        found["setup"] = task["setup"]
    return results


def sweep_points(args):
    """The sweep's thread counts and loads (two points with `--quick`)."""
    if args.quick:
        return SWEEP_THREADS[:1], (SWEEP_LOADS[0], SWEEP_LOADS[2])
    return SWEEP_THREADS, SWEEP_LOADS


def sweep_section(common, args, thread_counts, loads):
    """Section 4: `thread_counts` × `loads` (hw_decoder_load) on the train and eval
    workloads (`SWEEP_WORKLOADS`), batches
    left on the GPU; one process per thread count (`harness.sweep`), its points a
    result each."""
    print("sweep of threads × hw_decoder_load:", flush=True)
    runs = 1 if args.quick else min(args.runs, 2)
    points = [dict(workload=workload, options={"hw_decoder_load": load})
              for workload in SWEEP_WORKLOADS for load in loads]
    tasks = [dict(kind="sweep", loader=PREPROCESSING, train_steps=0, points=points,
                  **{**common, "threads": threads, "runs": runs})
             for threads in thread_counts]
    results = []
    for task, found in zip(tasks, run_tasks(tasks, args.sweep_budget, args.sweep_timeout)):
        if "points" in found:
            results += found["points"]
        else:  # skipped or failed: each of its points says so
            why = {k: found[k] for k in ("skipped", "error") if k in found}
            results += [{"loader": PREPROCESSING, "threads": task["threads"], **point, **why}
                        for point in points]
    return results


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
    """GPU preprocessing images/s (train, eval) and end-to-end fit images/s, apart."""
    by_key = {(r.get("loader"), r.get("workload")): r for r in result["results"]}
    fit = result["keras_fit"]
    return {
        "gpu": result["machine"]["gpu"],
        "threads": result["config"]["threads"],
        "gpu_preprocessing_images_per_s": {
            w: by_key.get((PREPROCESSING, w), {}).get("images_per_s") for w in WORKLOADS},
        "torchvision_randaugment_images_per_s":
            by_key.get(("torchvision_gpu", "randaugment"), {}).get("images_per_s"),
        "fit_images_per_s": fit.get("images_per_s_dalipipe"),
        "fit_images_per_s_in_memory": fit.get("images_per_s_in_memory"),
        "input_efficiency": fit.get("input_efficiency"),
        "fit_model": fit.get("model"),
        "cpu_decoded": {r["setup"]: r.get("cpu_decoded") for r in result["crop_setups"]
                        if r.get("loader") == "decoders_used"},
    }


def _cell(value, spec=".0f"):
    return "–" if value is None else format(value, spec)


def summary_markdown(s):
    pre = s["gpu_preprocessing_images_per_s"]
    return (
        "## Summary\n\n"
        f"GPU: {s['gpu']}; {s['threads']} DALI threads in every section but the sweep.\n\n"
        "| measure | images/s |\n|---|---|\n"
        f"| GPU preprocessing, train (`{PREPROCESSING}`) | {_cell(pre.get('train'))} |\n"
        f"| GPU preprocessing, eval | {_cell(pre.get('eval'))} |\n"
        f"| GPU preprocessing, train + RandAugment(2, 9) | {_cell(pre.get('randaugment'))} |\n"
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
            f"{r.get('options', {}).get('hw_decoder_load')} | {_outcome(r)} | "
            f"{_cell(r.get('gpu_memory_used_mb_after'))} | {_cell(r.get('gpu_memory_mb'))} |")
    return "\n".join(lines) + "\n"


def fit_markdown(fit):
    """The Keras fit section's lines for results.md."""
    head = "## Keras fit, torch backend: input efficiency\n\n"
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
