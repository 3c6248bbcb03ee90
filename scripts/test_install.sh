#!/usr/bin/env bash
# The pip route from an empty virtual environment, as the README gives it: dalipipe's
# wheel built from this tree and installed with its requirements (DALI for CUDA 12),
# then DALI's TensorFlow plugin, then `dalipipe doctor` and a small make_dali_dataset
# from a CSV table of PNG files (on the CPU, without pandas).
# Slow (it installs TensorFlow and DALI): CI runs it after `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
EXTRA=${EXTRA:-cuda12}
started=$SECONDS
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

mkdir "$work/source"
cp -r pyproject.toml README.md dalipipe "$work/source/"
"$PYTHON" -m venv "$work/venv"
bin="$work/venv/bin"
"$bin/pip" wheel -q --no-deps -w "$work/dist" "$work/source"
wheel=$(echo "$work"/dist/dalipipe-*.whl)
"$bin/pip" install -q "$wheel[$EXTRA]"
"$bin/dalipipe" install-plugin -q
cd "$work"
"$bin/dalipipe" doctor
"$bin/python" - <<'PYTHON'
import csv, importlib.util, os, sys

from PIL import Image

import dalipipe
from dalipipe import make_dali_dataset

assert dalipipe.__file__.startswith(sys.prefix), dalipipe.__file__
assert importlib.util.find_spec("pandas") is None, "pandas is not a core requirement"
os.makedirs("images")
with open("images/labels.csv", "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["path", "label"])
    for i in range(6):
        Image.new("RGB", (20 + i, 16), (40 * i, 90, 200)).save(f"images/{i}.png")
        writer.writerow([f"{i}.png", "NA" if i % 2 else "01"])
dataset = make_dali_dataset("images/labels.csv", labels="label", image_size=(8, 8),
                            batch_size=4, shuffle=False, device="cpu", verbose=False)
batches = [(tuple(x.shape), y.numpy().tolist()) for x, y in dataset]
assert dataset.class_names == ["01", "NA"], dataset.class_names
assert batches == [((4, 8, 8, 3), [0, 1, 0, 1]), ((2, 8, 8, 3), [0, 1])], batches
print(f"make_dali_dataset from {dalipipe.__file__}: {batches}")
PYTHON
echo "install test passed in $((SECONDS - started)) s"
