"""The sample dataset: crops of shipped photographs, or of synthetic pictures where
none is installed."""

import csv
import os

import numpy as np
import pytest
from PIL import Image

from dalipipe import sample_data


@pytest.fixture
def no_photographs(monkeypatch):
    monkeypatch.setattr(sample_data, "photograph_paths", lambda: [])


def read_rows(labels_csv):
    with open(labels_csv, newline="") as f:
        return [(row["path"], row["label"]) for row in csv.DictReader(f)]


def test_without_photographs_the_classes_are_synthetic_pictures(no_photographs, tmp_path):
    labels_csv = sample_data.make_sample_dataset(tmp_path, num_images=12, num_classes=12)
    rows = read_rows(labels_csv)
    assert sorted({label for _, label in rows}) == sorted(f"synthetic_{c}" for c in range(12))
    stats = sample_data.dataset_stats(labels_csv)
    assert stats["images"] == 12 and stats["classes"][0] == "synthetic_0"
    # ImageNet-like sizes (crops 260-560 px wide) and tens of kilobytes per JPEG.
    assert 260 <= stats["mean_width"] <= 560 and 20_000 < stats["mean_bytes"] < 250_000
    for path, _ in rows:
        with Image.open(tmp_path / path) as image:
            assert image.format == "JPEG" and image.mode == "RGB"


def test_synthetic_dataset_is_deterministic_for_the_seed(no_photographs, tmp_path):
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        sample_data.make_sample_dataset(tmp_path / name, num_images=4, num_classes=2,
                                        seed=seed, crop_width=(40, 60))
    rows = read_rows(tmp_path / "a" / "labels.csv")
    assert rows == read_rows(tmp_path / "b" / "labels.csv")
    for path, _ in rows:
        assert (tmp_path / "a" / path).read_bytes() == (tmp_path / "b" / path).read_bytes()
    assert any((tmp_path / "a" / p).read_bytes() != (tmp_path / "c" / p).read_bytes()
               for p, _ in rows)


def test_synthetic_classes_differ_in_their_pixels(no_photographs):
    pictures = [np.asarray(sample_data.synthesize_picture(80, 60, np.random.default_rng([0, c])),
                           np.float32) for c in range(2)]
    assert pictures[0].shape == (60, 80, 3)
    assert np.abs(pictures[0].mean((0, 1)) - pictures[1].mean((0, 1))).max() > 5


def test_num_classes_is_bounded_by_the_installed_photographs(tmp_path):
    installed = len(sample_data.photograph_paths())
    if installed == 0:
        pytest.skip("no sample photograph installed")
    with pytest.raises(ValueError, match="`num_classes` must be between 1 and"):
        sample_data.make_sample_dataset(tmp_path, num_images=50, num_classes=installed + 1)


def test_a_folder_of_the_users_is_refused_unless_force(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "labels.csv").write_text("file,kind\nmy.jpg,dog\n")
    with pytest.raises(sample_data.FolderInUseError, match=r"'.*mine' is not empty and was not "
                       r"made by dalipipe \(it holds labels.csv; .*pass force=True"):
        sample_data.make_sample_dataset(folder, num_images=2, num_classes=2)
    assert os.listdir(folder) == ["labels.csv"]
    assert (folder / "labels.csv").read_text() == "file,kind\nmy.jpg,dog\n"
    assert not sample_data.is_free_folder(folder)
    sample_data.make_sample_dataset(folder, num_images=2, num_classes=2, force=True)
    assert len(read_rows(folder / "labels.csv")) == 2
    # Written into with force, the folder is still the user's: not marked.
    assert not sample_data.is_sample_folder(folder)


def test_a_folder_dalipipe_made_is_reused_or_rewritten_its_own_files_only(no_photographs,
                                                                         tmp_path):
    folder = tmp_path / "sample"
    labels_csv = sample_data.make_sample_dataset(folder, num_images=4, num_classes=2,
                                                 crop_width=(40, 60))
    assert sample_data.is_sample_folder(folder) and sample_data.is_free_folder(folder)
    first = {p: (folder / p).stat().st_mtime_ns for p, _ in read_rows(labels_csv)}
    (folder / "synthetic_0" / "notes.txt").write_text("the user's")
    sample_data.make_sample_dataset(folder, num_images=4, num_classes=2, crop_width=(40, 60))
    assert {p: (folder / p).stat().st_mtime_ns for p, _ in read_rows(labels_csv)} == first
    sample_data.make_sample_dataset(folder, num_images=3, num_classes=3, crop_width=(40, 60))
    rows = read_rows(labels_csv)
    assert len(rows) == 3 and sorted(os.listdir(folder)) == [
        ".dalipipe-sample-data.json", "labels.csv", "synthetic_0", "synthetic_1", "synthetic_2"]
    assert sorted(os.listdir(folder / "synthetic_0")) == ["notes.txt", "synthetic_0_00000.jpg"]


def test_a_file_in_place_of_the_folder_is_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError, match="`directory` must be a folder"):
        sample_data.make_sample_dataset(tmp_path / "file", num_images=2, num_classes=2)
