"""The command line: its options, sample data, the demo and TFRecord conversion."""

import argparse
import csv
import glob
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from dalipipe.cli import build_parser, main


def test_every_option_says_what_it_does_and_version_prints(capsys):
    from dalipipe import __version__

    (commands,) = [a for a in build_parser()._actions
                   if isinstance(a, argparse._SubParsersAction)]
    assert set(commands.choices) == {"sample-data", "demo", "bench", "check", "convert",
                                     "doctor", "install-plugin"}
    for name, command in commands.choices.items():
        assert command.get_default("func") is not None, name
        for action in command._actions:
            assert action.help, (name, action.dest)
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"dalipipe {__version__}\n"


def test_sample_data_writes_classes_and_csv(tmp_path, capsys):
    assert main(["sample-data", str(tmp_path), "--num-images", "13", "--num-classes", "3"]) == 0
    with open(tmp_path / "labels.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 13
    assert {r["label"] for r in rows} == set(os.listdir(tmp_path)) - {"labels.csv"}
    for row in rows:
        assert os.path.isfile(tmp_path / row["path"])
        assert row["path"].split("/")[0] == row["label"]
    assert "wrote 13 images in 3 classes" in capsys.readouterr().out


def test_sample_data_is_deterministic(tmp_path):
    from dalipipe import make_sample_dataset

    make_sample_dataset(tmp_path / "a", num_images=6, num_classes=2, seed=4)
    make_sample_dataset(tmp_path / "b", num_images=6, num_classes=2, seed=4)
    for name in ("astronaut/astronaut_00001.jpg", "chelsea/chelsea_00002.jpg"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_demo_trains_and_reports_without_tensorflows_start_up_lines(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "dalipipe", "demo", "--directory", str(tmp_path),
         "--num-images", "40", "--epochs", "1", "--image-size", "32", "--batch-size", "8"],
        capture_output=True, text=True, check=True,
    )
    assert "images/s" in done.stdout and "validation accuracy" in done.stdout
    assert "32 training and 8 validation images" in done.stdout
    # stderr holds dalipipe's progress bars alone: no absl, cuInit or CPU-feature lines.
    lines = [line for line in re.split(r"[\r\n]+", done.stderr) if line.strip()]
    assert all(line.startswith("files checked") for line in lines), done.stderr


def test_convert_writes_shards_whose_records_are_the_files(indexed_dir, tmp_path, capsys,
                                                           fresh_cache):
    from dalipipe import sources, tfrecord

    out = tmp_path / "records"
    assert main(["convert", indexed_dir, str(out), "--shards", "4", "--prefix", "colors"]) == 0
    printed = capsys.readouterr()
    index = sources.index_source(indexed_dir)
    shards = tfrecord.tfrecord_files(str(out / "colors-*"))
    assert [os.path.basename(s) for s in shards] == [
        f"colors-{i:05d}-of-00004.tfrecord" for i in range(4)
    ]
    size = sum(os.path.getsize(s) for s in shards)
    assert (f"wrote {len(index)} records in 3 classes to 4 TFRecord file(s), {size:,} bytes"
            in printed.out)
    assert "records written: 100%" in printed.err  # the progress bar
    assert f"{len(index)}/{len(index)}" in printed.err
    records = tfrecord.scan(shards)
    originals = []
    for path in index.file_paths:
        with open(path, "rb") as f:
            originals.append(f.read())
    assert tfrecord.load_encoded(records.shards, records.refs) == originals
    np.testing.assert_array_equal(records.labels, index.labels)
    assert records.texts == [index.class_names[i] for i in index.labels]


def test_convert_a_csv_with_a_label_column_or_none(indexed_dir, tmp_path, capsys, fresh_cache):
    from dalipipe import tfrecord

    paths = sorted(glob.glob(os.path.join(indexed_dir, "*", "*.png")))[:5]
    table = tmp_path / "table.csv"
    with open(table, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["file", "kind"])
        writer.writerows([p, "odd" if i % 2 else "even"] for i, p in enumerate(paths))
    out = tmp_path / "records"
    assert main(["convert", str(table), str(out), "--shards", "2", "--path-column", "file",
                 "--labels", "kind"]) == 0
    assert "wrote 5 records in 2 classes to 2 TFRecord file(s)" in capsys.readouterr().out
    records = tfrecord.scan(tfrecord.tfrecord_files(str(out / "train-*")))
    assert records.labels.tolist() == [0, 1, 0, 1, 0]
    assert records.texts == ["even", "odd", "even", "odd", "even"]
    assert main(["convert", str(table), str(out / "plain"), "--shards", "1", "--path-column",
                 "file", "--labels", "none"]) == 0
    assert "wrote 5 unlabeled records to 1 TFRecord file(s)" in capsys.readouterr().out
    records = tfrecord.scan(tfrecord.tfrecord_files(str(out / "plain" / "train-*")))
    assert records.labels is None and len(records) == 5
    # A CSV has no class folders to infer labels from.
    assert main(["convert", str(table), str(out / "x"), "--shards", "1",
                 "--path-column", "file"]) == 2
    assert "must name a label column" in capsys.readouterr().err


def test_convert_stops_on_a_bad_image_or_too_many_shards(tmp_path, capsys, fresh_cache):
    source = tmp_path / "source"
    (source / "cats").mkdir(parents=True)
    from PIL import Image

    Image.new("RGB", (16, 12), (200, 30, 30)).save(source / "cats" / "good.jpg")
    data = (source / "cats" / "good.jpg").read_bytes()
    (source / "cats" / "cut.jpg").write_bytes(data[:-30])
    out = tmp_path / "records"
    assert main(["convert", str(source), str(out), "--shards", "1"]) == 1
    printed = capsys.readouterr().out
    assert "1 of 2 files are bad; nothing written" in printed
    cut = source / "cats" / "cut.jpg"
    assert f"truncated JPEG (segment 0xC4 runs past the end): {cut}" in printed
    assert not out.exists()
    (source / "cats" / "cut.jpg").unlink()
    assert main(["convert", str(source), str(out), "--shards", "2"]) == 2
    assert ("`num_shards` must be a positive integer no larger than the number of files (1). "
            "Received: num_shards=2") in capsys.readouterr().err
    assert not out.exists()
