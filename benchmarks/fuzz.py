"""Fuzzing the pre-flight check and DALI with mutated JPEGs through `model.fit`
(`dalipipe.bench.fuzz`, whose docstring defines the mutations and outcomes). Writes
JSON; exits with 1 when a target is missed (an unnamed DALI error, a crash, a hang).

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
    parser.add_argument("--out", default=None,
                        help="defaults to benchmarks/results/fuzz-<check>.json")
    args = parser.parse_args()
    out = args.out or f"benchmarks/results/fuzz-{args.check}.json"
    report = fuzz(args.count, args.seed, args.check, args.timeout)
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w") as f:
        json.dump(report, f, indent=2)
    print(json.dumps(report["summary"], indent=2))
    print(f"wrote {out}")
    return 0 if report["summary"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
