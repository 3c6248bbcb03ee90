"""Fuzzing the pre-flight check and the DALI pipeline with mutated JPEGs
(`dalipipe.bench.fuzz`, whose docstring defines the outcomes). Writes JSON.

    python benchmarks/fuzz.py [--count 1000] [--check structure|full] [--out FILE]
"""

import argparse
import json
import os
import sys

from dalipipe.bench.fuzz import fuzz


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check", default="structure", choices=("structure", "full"))
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per file")
    parser.add_argument("--out", default="benchmarks/results/fuzz.json")
    args = parser.parse_args()
    report = fuzz(args.count, args.seed, args.check, args.timeout)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    print(json.dumps(report["summary"], indent=2))
    print(f"wrote {args.out}")
    return 0 if report["summary"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
