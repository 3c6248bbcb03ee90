"""Keras's three backends fed by `make_dali_dataset`, side by side, on this machine.

Runs `benchmarks/keras_fit.py` once per backend (TensorFlow, torch, JAX), each in a
fresh process with `KERAS_BACKEND` set, on the same images, model and sizes: images/s
of `fit` fed by dalipipe (a `tf.data.Dataset` on TensorFlow, a `keras.utils.PyDataset`
of the backend's tensors on torch and JAX), images/s of `fit` on the same batches
held in memory, and their ratio. Writes one JSON file.

    python benchmarks/backends.py --data DIR --out benchmarks/results/backends-cpu.json
        [--model small] [--image-size 64] [--batch-size 32] [--epochs 3] [--rounds 2]
"""

import argparse
import json
import os
import sys
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BACKENDS = ("tensorflow", "torch", "jax")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="an image folder, one subfolder per class")
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", default="small", choices=("resnet50", "small"))
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--device", default="cpu", choices=("auto", "gpu", "cpu"))
    parser.add_argument("--rounds", type=int, default=2,
                        help="the backends run in turn this many times; each result is a list")
    args = parser.parse_args(argv)
    if REPO_ROOT not in sys.path:  # the checkout this script belongs to is measured
        sys.path.insert(0, REPO_ROOT)
    from benchmarks.keras_fit import run_keras_fit

    runs = {backend: [] for backend in BACKENDS}
    started = time.perf_counter()
    for _ in range(args.rounds):
        for backend in BACKENDS:
            runs[backend].append(run_keras_fit(
                args.data, backend=backend, model=args.model, image_size=args.image_size,
                batch_size=args.batch_size, epochs=args.epochs, warmup=args.warmup,
                device=args.device))
            print(backend, {k: round(v, 3) for k, v in runs[backend][-1].items()
                            if k.startswith(("images_per_s", "input_"))}, flush=True)
    machine = runs["tensorflow"][0].pop("machine")
    for results in runs.values():
        for result in results:
            result.pop("machine", None)
    report = {"machine": machine, "seconds": time.perf_counter() - started,
              "settings": vars(args), "runs": runs}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
