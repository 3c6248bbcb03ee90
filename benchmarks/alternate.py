"""One measurement of two checkouts of dalipipe, alternated round by round.

Runs COMMAND in each checkout in turn (its folder first on `PYTHONPATH`, its own
working directory), `--rounds` times, and collects the JSON file each run writes
at `{out}` (a placeholder in COMMAND). Writes one JSON file: the machine, the load
average before and after, and every run's result under its checkout's label.

    python benchmarks/alternate.py --checkout before=/tmp/before --checkout after=. \\
        --rounds 2 --out benchmarks/results/x.json -- \\
        python -m dalipipe bench --data data/b --workload train --out {out}
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", action="append", required=True,
                        help="LABEL=FOLDER of a dalipipe checkout; repeatable, run in this order")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", required=True)
    parser.add_argument("--what", default="", help="what is measured, for the report")
    parser.add_argument("--result", default="results.json",
                        help="the file the command writes when {out} is a folder "
                             "(default: results.json)")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="after --: the command; {out} is the file it writes")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command or not any("{out}" in part for part in command):
        parser.error("the command (after --) must write its JSON to {out}")
    checkouts = [tuple(c.split("=", 1)) for c in args.checkout]
    sys.path.insert(0, REPO_ROOT)
    from dalipipe.bench.harness import machine_info

    runs = []
    load_before = os.getloadavg()
    started = time.perf_counter()
    for number in range(1, args.rounds + 1):
        for label, folder in checkouts:
            folder = os.path.abspath(folder)
            with tempfile.TemporaryDirectory(prefix="alternate-") as scratch:
                out = os.path.join(scratch, "result.json")
                begun = time.perf_counter()
                done = subprocess.run(
                    [part.replace("{out}", out) for part in command], cwd=folder,
                    capture_output=True, text=True,
                    env={**os.environ, "PYTHONPATH": os.pathsep.join(
                        p for p in (folder, os.environ.get("PYTHONPATH")) if p)})
                if done.returncode:
                    raise RuntimeError(f"{label}, round {number}:\n{done.stderr[-3000:]}")
                found = os.path.join(out, args.result) if os.path.isdir(out) else out
                with open(found) as f:
                    result = json.load(f)
            runs.append({"checkout": label, "round": number,
                         "seconds": time.perf_counter() - begun, "result": result})
            print(f"{label} round {number}: {runs[-1]['seconds']:.0f} s", flush=True)
    report = {"what": args.what, "command": command, "checkouts": dict(checkouts),
              "machine": machine_info(), "load_average_before": load_before,
              "load_average_after": os.getloadavg(),
              "seconds": time.perf_counter() - started, "runs": runs}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
