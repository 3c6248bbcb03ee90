"""How far two JPEG decoders' pixels may differ, from libjpeg-turbo's own switches.

The GPU test (`tests/test_gpu.py`) compares nvJPEG with DALI's CPU decoder on the
noisy JPEGs of the `color_dir` fixture (made again here, same seed), resized to
32x32. TensorFlow's `decode_jpeg` (libjpeg-turbo) can switch the two things in which
decoders differ, so their effect is measured here, in grey levels, per channel:

- chroma upsampling, fancy or not: what `jpeg_fancy_upsampling=True` makes nvJPEG
  match;
- the inverse DCT, accurate or fast integer: a stand-in for another decoder's IDCT.

Writes JSON (mean, 99th percentile and largest difference, at full size and after
an antialiased resize to 32x32).

    python benchmarks/jpeg_decoders.py [--out benchmarks/results/jpeg_decoders.json]
"""

import argparse
import io
import json
import pathlib

import numpy as np
import tensorflow as tf
from PIL import Image


def fixture_jpegs():
    """The JPEGs of `tests/conftest.py::color_dir` (its PNGs left out)."""
    rng = np.random.default_rng(0)
    blobs = []
    for c in range(3):
        for i in range(30):
            h, w = rng.integers(24, 64, size=2)
            pixels = rng.integers(0, 90, size=(h, w, 3))
            pixels[..., 2 - c] += 150
            if i % 10 == 0:
                continue
            buffer = io.BytesIO()
            Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(buffer, "JPEG")
            blobs.append(buffer.getvalue())
    return blobs


def difference(pairs, size=None):
    errors = []
    for a, b in pairs:
        a, b = tf.cast(a, tf.float32), tf.cast(b, tf.float32)
        if size:
            a = tf.image.resize(a, size, antialias=True)
            b = tf.image.resize(b, size, antialias=True)
        errors.append(np.abs(a.numpy() - b.numpy()).ravel())
    errors = np.concatenate(errors)
    return {"mean": float(errors.mean()), "p99": float(np.percentile(errors, 99)),
            "max": float(errors.max())}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out")
    args = parser.parse_args()
    from dalipipe.bench.harness import machine_info

    blobs = fixture_jpegs()

    def decode(blob, fancy, dct):
        return tf.io.decode_jpeg(blob, channels=3, fancy_upscaling=fancy, dct_method=dct)

    upsampling = [(decode(b, True, "INTEGER_ACCURATE"), decode(b, False, "INTEGER_ACCURATE"))
                  for b in blobs]
    idct = [(decode(b, True, "INTEGER_ACCURATE"), decode(b, True, "INTEGER_FAST"))
            for b in blobs]
    result = {
        "machine": machine_info(),
        "images": len(blobs),
        "upsampling": {"full": difference(upsampling),
                       "resized_32": difference(upsampling, (32, 32))},
        "idct": {"full": difference(idct), "resized_32": difference(idct, (32, 32))},
    }
    text = json.dumps(result, indent=2)
    if args.out:
        pathlib.Path(args.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
