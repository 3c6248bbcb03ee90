"""Long runs: memory and file descriptors over many epochs and many datasets
(`dalipipe.bench.soak`). Writes JSON with the series and their first, last and
largest values.

    python benchmarks/soak.py [--epochs 30] [--cycles 50] [--out FILE]
"""

import argparse
import json
import os
import tempfile


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--cycles", type=int, default=50)
    parser.add_argument("--num-images", type=int, default=600)
    parser.add_argument("--out", default="benchmarks/results/soak.json")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from dalipipe import make_sample_dataset
    from dalipipe.bench.soak import soak

    with tempfile.TemporaryDirectory() as directory:
        make_sample_dataset(directory, num_images=args.num_images, num_classes=4)
        report = soak(directory, epochs=args.epochs, cycles=args.cycles)
    report["images"] = args.num_images
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    for phase in ("fit", "create_discard"):
        print(phase, "RSS MB first/last/max", [round(v) for v in report[phase]["rss_mb_first_last_max"]],
              "FDs first/last/max", report[phase]["fds_first_last_max"])
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
