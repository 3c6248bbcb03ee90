"""Cost of the pre-flight check against one epoch: on a folder of images (the
benchmark set), the time of `check="structure"` and `check="full"` on their first
run (a fresh cache) and on a cached re-run, as fractions of the time one native epoch
takes to load (`make_dali_pipeline(..., check=None).epoch()`). Writes JSON.

The measurements alternate (epoch, then each check) for `--rounds` rounds after a
warm-up round; each figure is a median over the rounds, and each fraction the median
of the check's time over its own round's epoch (wall time, and CPU time of this
process, DALI's threads included). The files are in the page cache, as they are for
the epochs after the first.

    python benchmarks/check_cost.py [--directory data/bench] [--device cpu|gpu]
"""

import argparse
import json
import os
import statistics
import tempfile
import time


def timed(function):
    """`(wall seconds, CPU seconds of this process)` of `function()`."""
    wall, cpu = time.perf_counter(), time.process_time()
    function()
    return time.perf_counter() - wall, time.process_time() - cpu


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--directory", default="data/bench")
    parser.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default="benchmarks/results/check_cost.json")
    args = parser.parse_args()

    from dalipipe import checks, make_dali_pipeline, sources
    from dalipipe.bench.harness import machine_info

    index = sources.index_source(args.directory, labels="inferred")
    pipe = make_dali_pipeline(args.directory, image_size=(args.image_size,) * 2,
                              batch_size=args.batch_size, device=args.device, check=None,
                              normalization="imagenet", verbose=False, seed=0)

    def epoch():
        for _ in pipe.epoch():
            pass

    def check(level, cache):
        os.environ["DALIPIPE_CACHE_DIR"] = cache
        return timed(lambda: checks.check_index(index, check=level, device=args.device))

    load_start = round(os.getloadavg()[0], 2)  # other work on the machine slows both
    samples = {name: [] for name in ("epoch", "structure_first", "structure_cached",
                                     "full_first", "full_cached")}
    with tempfile.TemporaryDirectory() as scratch:
        for round_number in range(args.rounds + 1):  # the first is the warm-up
            measured = {"epoch": timed(epoch)}
            for level in ("structure", "full"):
                cache = os.path.join(scratch, f"{level}-{round_number}")
                measured[f"{level}_first"] = check(level, cache)
                measured[f"{level}_cached"] = check(level, cache)
            if round_number:
                for name, value in measured.items():
                    samples[name].append(value)
            print(round_number, {k: round(v[0], 3) for k, v in measured.items()}, flush=True)

    median = {name: [statistics.median(v[i] for v in values) for i in (0, 1)]
              for name, values in samples.items()}

    def fraction(name, i):
        """The median over rounds of the check's time over its round's epoch time."""
        return round(statistics.median(
            check[i] / epoch[i] for check, epoch in zip(samples[name], samples["epoch"])), 4)

    sizes = [os.path.getsize(p) for p in index.file_paths]
    result = {
        "machine": machine_info(),
        "load_average_1min": {"start": load_start, "end": round(os.getloadavg()[0], 2)},
        "decoder": checks.decoder_name(args.device),
        "device": args.device,
        "data": {"directory": args.directory, "files": len(sizes),
                 "mean_kb": round(statistics.mean(sizes) / 1000, 1)},
        "epoch": {"image_size": args.image_size, "batch_size": args.batch_size,
                  "wall_s": round(median["epoch"][0], 3), "cpu_s": round(median["epoch"][1], 3)},
        "rounds": args.rounds,
        "checks": {
            name: {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
                   "fraction_of_epoch": fraction(name, 0),
                   "cpu_fraction_of_epoch": fraction(name, 1)}
            for name, (wall, cpu) in median.items() if name != "epoch"
        },
        "samples_wall_s": {name: [round(v[0], 3) for v in values]
                           for name, values in samples.items()},
    }
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps({k: result[k] for k in ("decoder", "epoch", "checks")}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
