"""How far each GPU crop set-up for nvJPEG < 13.2 is from the CPU graph, measured on
the CPU.

With nvJPEG older than 13.2, nvImageCodec refuses a region decode with fancy
upsampling on the GPU, so the GPU graph cannot decode only the random-resized crop's
window (`codecs.ROI_DECODE`, the CPU graph's way) with the CPU's chroma upsampling.
The candidates that keep the decode on the GPU, run here on the CPU (DALI's
libjpeg-turbo decoder, fancy upsampling in all) on the same epochs' windows, so that
what differs is the set-up alone:

- `full_decode_slice` (`codecs.FULL_DECODE`, what the graph does): the whole image
  decoded, the window cut out by `fn.slice`, then `fn.resize`;
- `full_decode_resize_roi`: the whole image decoded, and `fn.resize` reading only the
  window (`roi_start`/`roi_end`, corners rounded as `image_slice` rounds them), with
  no copy; where the filter reaches past the window's edge it reads the image's real
  neighbouring pixels where the CPU graph repeats the edge.

The third candidate, a region decode with simple (not fancy) chroma upsampling,
differs from the CPU by the upsampling itself: `benchmarks/jpeg_decoders.py`.

Writes JSON: per image set and interpolation, for each candidate against the CPU
graph, the mean, 99th percentile and largest difference in grey levels (uint8
outputs, per channel), and the share of values that differ.

    PYTHONPATH=. python benchmarks/crop_decoders.py [--out benchmarks/results/crop_decoders.json]
"""

import argparse
import json
import pathlib
import tempfile
from unittest import mock

import numpy as np
from PIL import Image


def write_jpegs(root, count, sizes, seed):
    """`count` JPEGs (4:2:0, quality 85) of smooth colour waves plus noise, in 3 class
    folders under `root`, their sides drawn from `sizes`."""
    rng = np.random.default_rng(seed)
    for i in range(count):
        h, w = (int(v) for v in rng.integers(*sizes, size=2))
        yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
        phase = rng.uniform(0, 6, size=3)
        pixels = 127 + 100 * np.sin(6 * xx[..., None] + 4 * yy[..., None] + phase)
        pixels += rng.normal(0, 12, size=(h, w, 3))
        folder = pathlib.Path(root) / f"class_{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(
            folder / f"{i:03d}.jpg", quality=85, subsampling=2)


def resize_roi(options, encoded, window, resize):
    """The `full_decode_resize_roi` candidate, in place of `graph._crop_and_resize`."""
    import nvidia.dali.math as dmath
    from nvidia.dali import fn

    from dalipipe import graph

    x, y, width, height = window

    def whole(value):  # image_slice's rounding, half away from zero (values >= 0)
        return dmath.floor(value + 0.5)

    return fn.resize(graph.decode(options, encoded), size=options.image_size,
                     roi_start=fn.stack(whole(y), whole(x)),
                     roi_end=fn.stack(whole(y + height), whole(x + width)),
                     roi_relative=False, **resize)


def epoch_pixels(directory, setup, crop=None, **options):
    """One augmented epoch's uint8 images from the CPU graph, the crops decoded with
    `setup` (or by `crop` in place of `graph._crop_and_resize`)."""
    from dalipipe import graph, make_dali_pipeline

    with mock.patch.object(graph, "_crop_setup", return_value=setup), \
            mock.patch.object(graph, "_crop_and_resize", crop or graph._crop_and_resize):
        pipe = make_dali_pipeline(directory, device="cpu", augment=True, seed=7,
                                  normalization=None, dtype="uint8", batch_size=16,
                                  check=None, verbose=False, **options)
        return np.concatenate([batch[0] for batch in pipe.epoch()]).astype(np.float32)


def difference(a, b):
    error = np.abs(a - b).ravel()
    return {"mean": float(error.mean()), "p99": float(np.percentile(error, 99)),
            "max": float(error.max()), "share_differing": float(np.mean(error > 0))}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/crop_decoders.json")
    args = parser.parse_args()
    from dalipipe import codecs
    from dalipipe.bench.harness import machine_info

    result = {"machine": machine_info(), "nvjpeg": codecs.nvjpeg_version(), "sets": {}}
    cases = {"small": (48, (24, 64), (32, 32)), "large": (48, (200, 500), (224, 224))}
    with tempfile.TemporaryDirectory() as scratch:
        for name, (count, sizes, image_size) in cases.items():
            directory = f"{scratch}/{name}"
            write_jpegs(directory, count, sizes, seed=len(name))
            for interpolation in ("bilinear", "bicubic"):
                options = dict(image_size=image_size, interpolation=interpolation)
                cpu = epoch_pixels(directory, codecs.ROI_DECODE, **options)
                sliced = epoch_pixels(directory, codecs.FULL_DECODE, **options)
                roi = epoch_pixels(directory, codecs.FULL_DECODE, resize_roi, **options)
                result["sets"][f"{name}_{interpolation}"] = {
                    "images": count, "sides": list(sizes), "image_size": list(image_size),
                    "full_decode_slice": difference(cpu, sliced),
                    "full_decode_resize_roi": difference(cpu, roi),
                }
    pathlib.Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    for name, candidates in result["sets"].items():
        print(name, {k: round(v["mean"], 3) for k, v in candidates.items() if isinstance(v, dict)})


if __name__ == "__main__":
    main()
