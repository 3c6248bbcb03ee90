"""Cost of the pre-flight check against one epoch: on a folder of images (the
benchmark set), the time of `check="structure"` and `check="full"` on their first
run (a fresh cache) and on a cached re-run, as fractions of the time one native epoch
takes to load (`make_dali_pipeline(..., check=None).epoch()`). Writes JSON.

With `--format`, the folder is instead `--count` crops of the shipped photographs
(`make_sample_dataset`, ImageNet-sized) written in that format (`FORMATS`: PNG, TIFF
uncompressed or LZW, WebP, JPEG 2000, BMP, PPM), and the JSON names the format.

The measurements alternate (epoch, then each check) for `--rounds` rounds after a
warm-up round; each figure is a median over the rounds, and each fraction the median
of the check's time over its own round's epoch (wall time, and CPU time of this
process and its children, DALI's threads included). The files are in the page
cache, as they are for the epochs after the first.

    python benchmarks/check_cost.py [--directory data/bench] [--device cpu|gpu]
        [--format png|tiff|tiff-lzw|webp|jpeg2000|bmp|ppm --count 300]
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time


# --format: (PIL format, file extension, save options)
FORMATS = {"jpeg": ("JPEG", ".jpg", {"quality": 95}), "png": ("PNG", ".png", {}),
           "tiff": ("TIFF", ".tif", {}), "tiff-lzw": ("TIFF", ".tif", {"compression": "tiff_lzw"}),
           "webp": ("WEBP", ".webp", {"quality": 90}), "jpeg2000": ("JPEG2000", ".jp2", {}),
           "bmp": ("BMP", ".bmp", {}), "ppm": ("PPM", ".ppm", {})}


def write_format_set(directory, kind, count):
    """`count` sample crops in `directory/<class>/`, saved in format `kind`."""
    from PIL import Image

    from dalipipe.sample_data import make_sample_dataset

    make_sample_dataset(directory, num_images=count, num_classes=4, seed=0)
    pil_format, extension, options = FORMATS[kind]
    for root, _, files in os.walk(directory):
        for name in files:
            path = os.path.join(root, name)
            if not name.endswith(".jpg"):  # the labels and the set's description
                os.remove(path)
                continue
            with Image.open(path) as image:
                image.load()
            os.remove(path)
            image.save(os.path.splitext(path)[0] + extension, format=pil_format, **options)


def timed(function):
    """`(wall seconds, CPU seconds)` of `function()`: the CPU time of this process
    and of the child processes it waited for (the check's decoder for JPEG 2000 and
    TIFF runs in one)."""
    wall, cpu = time.perf_counter(), cpu_seconds()
    function()
    return time.perf_counter() - wall, cpu_seconds() - cpu


def cpu_seconds():
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


# The checkout this script belongs to: its dalipipe is the one measured.
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    if REPO_ROOT not in sys.path:  # `python benchmarks/check_cost.py` puts benchmarks/ there
        sys.path.insert(0, REPO_ROOT)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--directory", default="data/bench")
    parser.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--format", choices=FORMATS, default=None,
                        help="measure on sample crops in this format instead")
    parser.add_argument("--count", type=int, default=300, help="images for --format")
    parser.add_argument("--out", default=None, help="defaults to benchmarks/results/"
                        "check_cost.json, or check_cost-<format>.json with --format")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as made:
        if args.format:
            args.directory = made
            write_format_set(made, args.format, args.count)
        measure(args)


def measure(args):
    """Runs the measurement that `args` (of `main`) asks for and writes its JSON."""
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
        "data": {"directory": None if args.format else args.directory,
                 "format": args.format or "as found", "files": len(sizes),
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
    out = args.out or ("benchmarks/results/check_cost"
                       + (f"-{args.format}" if args.format else "") + ".json")
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps({k: result[k] for k in ("decoder", "epoch", "checks")}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
