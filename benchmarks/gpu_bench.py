"""GPU loader benchmark without TensorFlow: dalipipe's DALI graph against PyTorch loaders.

For a machine with DALI, PyTorch, torchvision, psutil and a CUDA GPU (nvidia-ml-py for
the GPU's name and memory; `scripts/gpu_extras.sh`), and no TensorFlow, pandas,
scikit-image or scikit-learn. It runs `dalipipe.bench` (the harness and the
report of `dalipipe bench`) on both workloads, train and eval, over sample JPEGs it
makes (`make_sample_dataset`: synthetic pictures where the shipped photographs are
absent), for these loaders:

- dalipipe's GPU graph run natively, batches copied to the host and kept on the GPU;
- batched `torchvision.io.decode_jpeg(device="cuda")`, crop, resize and normalize on
  the GPU;
- a torch `DataLoader` with a worker per core, decoding with `decode_jpeg` on the CPU;
- dalipipe's CPU graph run natively, and DALI's decoding alone (CPU and GPU).

Then Keras's `fit` with its PyTorch backend (`KERAS_BACKEND=torch`) trains ResNet-50
on the train workload fed by `make_dali_dataset` (GPU-decoded batches as CUDA
tensors), and on the same batches held in device memory: the ratio is the input
efficiency (`benchmarks/keras_fit.py`).

Each (loader, workload) runs in a fresh process with `--section-timeout` seconds, and
all of them within `--time-budget` seconds (the sample images are made before). One
whose requirements are absent (torch, a GPU) is recorded as skipped with the reason,
so the script also runs on a CPU-only machine as a rehearsal. Writes `results.json` and `results.md` (and `chart.png`
where matplotlib is installed) to `--out`.

    python benchmarks/gpu_bench.py [--out DIR] [--num-images 2000] [--batch-size 128]
        [--data DIR] [--quick]
"""

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

# The checkout this script belongs to: its dalipipe is the one measured.
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOADERS = ("dalipipe_native_gpu", "dalipipe_native_gpu_on_device", "torchvision_gpu",
           "torch_dataloader", "dalipipe_native_cpu")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/gpu",
                        help="folder for results.json and results.md")
    parser.add_argument("--num-images", type=int, default=2000,
                        help="sample images to make (at most 64 with --quick)")
    parser.add_argument("--batch-size", type=int, default=128,
                        help="batch size (at most 16 with --quick)")
    parser.add_argument("--runs", type=int, default=3, help="timed epochs after the warm-up")
    parser.add_argument("--data", default=None,
                        help="image folder, made there when it has no labels.csv and kept "
                             "(default: a temporary folder)")
    parser.add_argument("--quick", action="store_true", help="a smoke run on 64 images")
    parser.add_argument("--section-timeout", type=float, default=120,
                        help="seconds after which a (loader, workload) is stopped")
    parser.add_argument("--fit-model", default=None, choices=("resnet50", "small"),
                        help="the model of the Keras fit section (default: resnet50; "
                             "small with --quick)")
    parser.add_argument("--fit-timeout", type=float, default=240,
                        help="seconds after which the Keras fit section is stopped")
    parser.add_argument("--time-budget", type=float, default=240,
                        help="seconds for all the measurements; what is left then is "
                             "stopped or not started")
    args = parser.parse_args(argv)
    for name in ("num_images", "batch_size", "runs"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    return args


def main(argv=None):
    args = parse_args(argv)
    if REPO_ROOT not in sys.path:  # `python benchmarks/gpu_bench.py` puts benchmarks/ there
        sys.path.insert(0, REPO_ROOT)
    from dalipipe.bench import report

    with tempfile.TemporaryDirectory(prefix="gpu_bench_") as scratch:
        result = report.run_bench(
            data=args.data or os.path.join(scratch, "data"), out=args.out, loaders=LOADERS,
            batch_size=args.batch_size, num_images=args.num_images, runs=args.runs,
            train_steps=0, quick=args.quick, reference="dalipipe_native_gpu",
            timeout=args.section_timeout, time_budget=args.time_budget, stream=sys.stdout,
        )
        fit = keras_fit_section(args, data=args.data or os.path.join(scratch, "data"))
    result["keras_fit"] = fit
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(result, f, indent=2)
    table = report.markdown(result) + "\n" + fit_markdown(fit)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(table)
    print(table)
    print(f"wrote {args.out}/results.json and results.md in {result['seconds']:.0f} s")
    return 0


def keras_fit_section(args, *, data):
    """`benchmarks/keras_fit.py` in a fresh process on Keras's torch backend: its
    result, or `{"skipped": reason}`."""
    for module in ("torch", "keras"):
        if importlib.util.find_spec(module) is None:
            return {"skipped": f"{module} is not installed"}
    from benchmarks.keras_fit import run_keras_fit

    quick = args.quick
    try:
        return run_keras_fit(
            data, backend="torch", model=args.fit_model or ("small" if quick else "resnet50"),
            image_size=32 if quick else 224,
            batch_size=min(args.batch_size, 8) if quick else args.batch_size,
            epochs=2 if quick else 3, warmup=2 if quick else 5, timeout=args.fit_timeout)
    except subprocess.TimeoutExpired:
        return {"skipped": f"stopped after {args.fit_timeout:g} s"}
    except RuntimeError as e:
        return {"failed": str(e)}


def fit_markdown(fit):
    """The Keras fit section's lines for results.md."""
    head = "## Keras fit, torch backend: input efficiency\n\n"
    if "skipped" in fit or "failed" in fit:
        reason = fit.get("skipped") or "failed: " + fit["failed"].strip().splitlines()[-1]
        return head + f"{reason}\n"
    return head + (
        f"{fit['model']} at {fit['image_size'][0]}×{fit['image_size'][1]}, batch "
        f"{fit['batch_size']}, {fit['steps_per_epoch']} steps × {fit['epochs']} epochs "
        f"({fit['warmup_steps']} untimed), DALI on the {fit['device']}:\n\n"
        "| fed by | images/s |\n|---|---|\n"
        f"| make_dali_dataset | {fit['images_per_s_dalipipe']:.1f} |\n"
        f"| the same batches in device memory | {fit['images_per_s_in_memory']:.1f} |\n\n"
        f"Input efficiency: {fit['input_efficiency']:.3f}\n"
    )


if __name__ == "__main__":
    sys.exit(main())
