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


def test_help_is_written_for_users_not_from_the_module_docstring(capsys):
    from dalipipe import cli

    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    shown = " ".join(capsys.readouterr().out.split())  # argparse rewraps the lines
    assert " ".join(cli.DESCRIPTION.split()) in shown
    assert "`dalipipe COMMAND --help` describes each" in shown
    developers_note = " ".join(cli.__doc__.split("\n\n")[-1].split())
    assert developers_note.startswith("Above 400 lines") and developers_note not in shown
    assert "Above 400 lines" not in shown


def test_bench_help_states_the_quick_run_s_images_and_batch(capsys):
    from dalipipe.bench import report

    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert f"{report.QUICK_IMAGES} images in batches of at most {report.QUICK_BATCH}" in shown
    assert f"(default: 64; with --quick, at most {report.QUICK_BATCH})" in shown
    assert f"at most {report.QUICK_IMAGES} images in batches of at most " \
           f"{report.QUICK_BATCH}" in report.QUICK_NOTE


def test_sample_data_writes_classes_and_csv(tmp_path, capsys):
    assert main(["sample-data", str(tmp_path), "--num-images", "13", "--num-classes", "3"]) == 0
    with open(tmp_path / "labels.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 13
    assert {r["label"] for r in rows} == set(os.listdir(tmp_path)) - {
        "labels.csv", ".dalipipe-sample-data.json"}
    for row in rows:
        assert os.path.isfile(tmp_path / row["path"])
        assert row["path"].split("/")[0] == row["label"]
    assert "wrote 13 images in 3 classes" in capsys.readouterr().out
    # Made by dalipipe: asked again, it is kept as it is.
    assert main(["sample-data", str(tmp_path), "--num-images", "13", "--num-classes", "3"]) == 0
    assert "kept 13 images in 3 classes" in capsys.readouterr().out


def test_sample_data_and_demo_refuse_a_folder_of_the_users_unless_force(tmp_path, capsys):
    (tmp_path / "labels.csv").write_text("file\nmine.jpg\n")
    for command in (["sample-data", str(tmp_path)], ["demo", "--directory", str(tmp_path)]):
        assert main(command + ["--num-images", "2", "--num-classes", "2"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"dalipipe {command[0]}: error: '{tmp_path}' is not empty and "
                              "was not made by dalipipe (it holds labels.csv;"), err
        assert "pass --force to write into it anyway" in err and len(err.splitlines()) == 1
        assert os.listdir(tmp_path) == ["labels.csv"]
    assert (tmp_path / "labels.csv").read_text() == "file\nmine.jpg\n"
    assert main(["sample-data", str(tmp_path), "--num-images", "2", "--num-classes", "2",
                 "--force"]) == 0
    assert "wrote 2 images in 2 classes" in capsys.readouterr().out


def test_sample_data_is_deterministic(tmp_path):
    from dalipipe import make_sample_dataset

    make_sample_dataset(tmp_path / "a", num_images=6, num_classes=2, seed=4)
    make_sample_dataset(tmp_path / "b", num_images=6, num_classes=2, seed=4)
    for name in ("astronaut/astronaut_00001.jpg", "chelsea/chelsea_00002.jpg"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


@pytest.mark.slow  # a training run in a subprocess
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
    assert len(set(lines)) == len(lines), done.stderr  # no line twice


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
    assert ("pass `--labels=` the name of its label column, or `--labels=None` for images "
            "only" in capsys.readouterr().err)


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
    assert capsys.readouterr().err == (
        "dalipipe convert: error: `--shards` must be a positive integer no larger than the "
        "number of files (1). Received: --shards=2\n")
    assert not out.exists()


def bad_folder(root):
    """Class folders `cats` (2 good JPEGs, 1 cut short) and `dogs` (1 good), and a
    loose broken JPEG at the top, which training does not read."""
    from PIL import Image

    for name in ("cats", "dogs"):
        (root / name).mkdir(parents=True)
    Image.new("RGB", (16, 12), (200, 30, 30)).save(root / "cats" / "a.jpg")
    data = (root / "cats" / "a.jpg").read_bytes()
    (root / "cats" / "b.jpg").write_bytes(data)
    (root / "cats" / "cut.jpg").write_bytes(data[:-30])
    (root / "dogs" / "d.jpg").write_bytes(data)
    (root / "loose.jpg").write_bytes(data[:10])
    return root


def test_convert_skips_bad_files_when_asked_and_keeps_existing_shards(tmp_path, capsys,
                                                                     fresh_cache):
    from dalipipe import tfrecord

    source, out = bad_folder(tmp_path / "source"), tmp_path / "records"
    assert main(["convert", str(source), str(out), "--shards", "2",
                 "--on-bad-file", "skip"]) == 0
    printed = capsys.readouterr().out
    assert "1 of 4 files are bad; left out (--on-bad-file skip):" in printed
    assert f"truncated JPEG (segment 0xC4 runs past the end): {source / 'cats' / 'cut.jpg'}" \
        in printed
    assert "wrote 3 records in 2 classes to 2 TFRecord file(s)" in printed
    records = tfrecord.scan(tfrecord.tfrecord_files(str(out / "train-*")))
    assert records.labels.tolist() == [0, 0, 1] and records.texts == ["cats", "cats", "dogs"]
    # The shards now there are not written over, unless --force.
    before = {p: os.path.getmtime(p) for p in glob.glob(str(out / "*"))}
    assert main(["convert", str(source / "dogs"), str(out), "--shards", "1",
                 "--labels", "none"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dalipipe convert: error: `OUT_DIR` already holds 2 TFRecord "
                          "file(s) named train-*") and "--force" in err
    assert {p: os.path.getmtime(p) for p in glob.glob(str(out / "*"))} == before
    assert main(["convert", str(source / "dogs"), str(out), "--shards", "1", "--labels",
                 "none", "--force"]) == 0
    capsys.readouterr()
    assert [os.path.basename(p) for p in tfrecord.tfrecord_files(str(out / "train-*"))] == [
        "train-00000-of-00001.tfrecord"]


def test_check_names_the_bad_files_training_would_read(tmp_path, capsys, fresh_cache):
    source = bad_folder(tmp_path / "source")
    assert main(["check", str(source)]) == 1
    printed = capsys.readouterr().out
    # The loose top-level file is not a sample: not checked, as training does not read it.
    assert printed.startswith("1 of 4 files are bad:\n")
    assert f"JPEG (segment 0xC4 runs past the end): {source / 'cats' / 'cut.jpg'}" in printed
    assert "loose.jpg" not in printed and "report: " in printed
    (source / "cats" / "cut.jpg").unlink()
    assert main(["check", str(source)]) == 0
    assert "all 3 files are sound" in capsys.readouterr().out


def test_user_errors_are_one_line_with_exit_status_2(tmp_path, capsys, fresh_cache):
    table = tmp_path / "table.csv"
    table.write_text("file,label\nx.jpg,a\n")
    for command, message in (
        (["check", str(tmp_path / "nowhere")], "No such file or directory: "
                                               f"SOURCE='{tmp_path / 'nowhere'}'"),
        (["check", str(table)], "`--path-column` must name a column of"),
        # Every file missing: the paths are wrong, not the files bad.
        (["check", str(table), "--path-column", "label"], "Relative paths are resolved against"),
        (["convert", str(table), str(tmp_path / "out"), "--shards", "0",
          "--path-column", "file", "--labels", "none"], "Received: --shards=0"),
    ):
        code = main(command)
        err = capsys.readouterr().err
        assert code == 2 and len(err.splitlines()) == 1, err
        assert err.startswith(f"dalipipe {command[0]}: error: ") and message in err, err


def test_check_takes_masks_and_names_a_mask_dali_rejects(tmp_path, capsys, fresh_cache):
    from PIL import Image

    from helpers import bad_idat_crc, greyscale_png

    for folder in ("images", "masks"):
        (tmp_path / folder).mkdir()
    for name in ("a", "b"):
        Image.new("RGB", (6, 4), (9, 9, 9)).save(tmp_path / "images" / f"{name}.png")
        (tmp_path / "masks" / f"{name}.png").write_bytes(greyscale_png(np.ones((4, 6))))
    command = ["check", str(tmp_path / "images"), "--masks", str(tmp_path / "masks")]
    assert main(command) == 0
    assert "all 2 files are sound" in capsys.readouterr().out
    bad = tmp_path / "masks" / "b.png"
    bad.write_bytes(bad_idat_crc(bad.read_bytes()))
    for extra in ([], ["--full"]):
        assert main(command + extra) == 1
        printed = capsys.readouterr().out
        assert "1 of 2 files are bad:" in printed
        assert (f"its mask {str(bad)!r}: corrupt PNG (checksum of chunk b'IDAT'): "
                f"{tmp_path / 'images' / 'b.png'}") in printed
    assert main(["check", str(tmp_path / "images"), "--masks", str(tmp_path / "none")]) == 2
    assert "`--masks` must be a folder of image files" in capsys.readouterr().err
