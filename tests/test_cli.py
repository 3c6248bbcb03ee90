"""The command line: sample data and the demo."""

import csv
import os

from dalipipe.cli import main


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


def test_demo_trains_and_reports(tmp_path, capsys):
    code = main(["demo", "--directory", str(tmp_path), "--num-images", "40", "--epochs", "1",
                 "--image-size", "32", "--batch-size", "8", "--device", "cpu"])
    out = capsys.readouterr().out
    assert code == 0
    assert "images/s" in out and "validation accuracy" in out
    assert "32 training and 8 validation images" in out
