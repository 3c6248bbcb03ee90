"""Indexing, labels and splits (no DALI, no TensorFlow)."""

import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

pd = pytest.importorskip("pandas")

from helpers import CLASSES, NUM_INDEXED, indexed_paths
from dalipipe import sources


def test_directory_inferred_labels(indexed_dir):
    index = sources.index_source(indexed_dir)
    assert index.class_names == sorted(CLASSES)
    assert len(index) == NUM_INDEXED
    for path, label in zip(index.file_paths, index.labels):
        assert os.path.isabs(path)
        assert os.path.basename(os.path.dirname(path)) == index.class_names[label]
    assert index.labels.dtype == np.int32


def test_directory_class_names_select_and_order(indexed_dir):
    index = sources.index_source(indexed_dir, class_names=["red", "blue"])
    assert index.class_names == ["red", "blue"]
    names = {os.path.basename(os.path.dirname(p)) for p in index.file_paths}
    assert names == {"red", "blue"}
    assert all(
        os.path.basename(os.path.dirname(p)) == index.class_names[label]
        for p, label in zip(index.file_paths, index.labels)
    )


def test_directory_without_labels_and_with_list(indexed_dir):
    unlabeled = sources.index_source(indexed_dir, labels=None)
    assert unlabeled.labels is None and unlabeled.class_names is None
    assert len(unlabeled) == NUM_INDEXED
    given = list(range(NUM_INDEXED))
    listed = sources.index_source(indexed_dir, labels=given)
    assert listed.labels.tolist() == given
    assert listed.file_paths == sorted(listed.file_paths)


def test_table_sources_resolve_paths_and_map_string_labels(indexed_dir, tmp_path):
    paths, _ = indexed_paths(indexed_dir)
    relative = [os.path.relpath(p, indexed_dir) for p in paths]
    table = pd.DataFrame({
        "object_id": range(NUM_INDEXED),
        "path": relative,
        "bi": ["dog" if i % 2 else "cat" for i in range(NUM_INDEXED)],
        "multi": [("white", "black", "grey")[i % 3] for i in range(NUM_INDEXED)],
    })
    bi = sources.index_source(table, labels="bi", root=indexed_dir)
    assert bi.class_names == ["cat", "dog"]
    assert bi.file_paths == paths
    assert bi.labels.tolist() == [i % 2 for i in range(NUM_INDEXED)]
    multi = sources.index_source(table, labels="multi", root=indexed_dir)
    assert multi.class_names == ["black", "grey", "white"]
    assert multi.labels.tolist() == [[2, 0, 1][i % 3] for i in range(NUM_INDEXED)]
    # A CSV resolves relative paths against its own folder by default.
    csv_path = os.path.join(indexed_dir, "table.csv")
    table.to_csv(csv_path, index=False)
    try:
        from_csv = sources.index_source(csv_path, labels="multi")
    finally:
        os.remove(csv_path)
    assert from_csv.file_paths == paths
    assert from_csv.labels.tolist() == multi.labels.tolist()
    unlabeled = sources.index_source(table, labels=None, root=indexed_dir)
    assert unlabeled.labels is None and unlabeled.file_paths == paths


def test_list_source_with_int_and_string_labels(indexed_dir):
    paths, labels = indexed_paths(indexed_dir)
    index = sources.index_source(paths, labels=labels)
    assert index.file_paths == paths and index.labels.tolist() == labels
    assert index.class_names == ["0", "1", "2"]
    named = sources.index_source(paths, labels=labels, class_names=["a", "b", "c", "d"])
    assert named.class_names == ["a", "b", "c", "d"]
    strings = sources.index_source(paths, labels=[CLASSES[v] for v in labels],
                                   class_names=["red", "green", "blue"])
    assert strings.labels.tolist() == [["red", "green", "blue"].index(CLASSES[v]) for v in labels]


@pytest.mark.parametrize("seed", [0, 1])
def test_split_disjoint_complete_reproducible(indexed_dir, seed):
    index = sources.index_source(indexed_dir)
    train, val = sources.split_index(index, validation_split=0.25, subset="both", seed=seed,
                                     shuffle=True)
    assert len(val) == int(0.25 * NUM_INDEXED)
    assert not set(train.file_paths) & set(val.file_paths)
    assert sorted(train.file_paths + val.file_paths) == sorted(index.file_paths)
    for part in (train, val):
        lookup = dict(zip(index.file_paths, index.labels))
        assert all(lookup[p] == label for p, label in zip(part.file_paths, part.labels))
    (again,) = sources.split_index(index, validation_split=0.25, subset="validation", seed=seed,
                                   shuffle=True)
    assert again.file_paths == val.file_paths
    (other,) = sources.split_index(index, validation_split=0.25, subset="validation",
                                   seed=seed + 7, shuffle=True)
    assert other.file_paths != val.file_paths
    # Without shuffling, as in Keras, the validation part is the end of the sorted order.
    (last,) = sources.split_index(index, validation_split=0.25, subset="validation", seed=None,
                                  shuffle=False)
    assert last.file_paths == index.file_paths[-len(val):]


def test_encode_samples_packs_label_and_path():
    rows = sources.encode_samples(["/a/b.jpg", "/ccc.png"], np.array([3, -1]))
    assert rows.dtype == np.uint8 and rows.shape == (2, 4 + len("/a/b.jpg"))
    assert rows[:, :4].copy().view("<i4").ravel().tolist() == [3, -1]
    assert bytes(rows[1, 4:]).rstrip(b"\0") == b"/ccc.png"


def test_ignored_images_are_reported(tmp_path):
    (tmp_path / "a").mkdir()
    Image.new("RGB", (4, 4)).save(tmp_path / "a" / "x.png")
    Image.new("RGB", (4, 4)).save(tmp_path / "a" / "anim.gif")
    Image.new("RGB", (4, 4)).save(tmp_path / "loose.jpg")
    (tmp_path / "labels.csv").write_text("path,label\n")
    with pytest.warns(UserWarning, match=r"Ignored 2 image file\(s\).*anim\.gif.*loose\.jpg"):
        index = sources.index_source(str(tmp_path))
    assert len(index) == 1


def test_error_empty_directory(tmp_path):
    (tmp_path / "cls").mkdir()
    with pytest.raises(ValueError, match="No images found in directory"):
        sources.index_source(str(tmp_path))


def test_error_unknown_label_column(indexed_dir):
    table = pd.DataFrame({"path": indexed_paths(indexed_dir)[0], "bi": ["a"] * NUM_INDEXED})
    with pytest.raises(ValueError, match=r"`labels` must name a label column.*'path', 'bi'.*labels='color'"):
        sources.index_source(table, labels="color")
    with pytest.raises(ValueError, match=r"`path_column` must name a column.*path_column='file'"):
        sources.index_source(table, labels="bi", path_column="file")


def test_error_mismatched_lengths(indexed_dir):
    paths, labels = indexed_paths(indexed_dir)
    with pytest.raises(ValueError, match=f"found {NUM_INDEXED} images and {NUM_INDEXED - 1} labels"):
        sources.index_source(paths, labels=labels[:-1])


def test_error_missing_file_in_table(indexed_dir, tmp_path):
    paths, _ = indexed_paths(indexed_dir)
    missing = str(tmp_path / "nowhere.jpg")
    table = pd.DataFrame({"path": paths + [missing], "label": ["x"] * (NUM_INDEXED + 1)})
    with pytest.raises(ValueError, match=r"1 file\(s\) named in the DataFrame do not exist: .*nowhere\.jpg"):
        sources.index_source(table, labels="label")


def test_error_labels_outside_class_names(indexed_dir):
    paths, labels = indexed_paths(indexed_dir)
    with pytest.raises(ValueError, match=r"must lie in \[0, 2\)"):
        sources.index_source(paths, labels=labels, class_names=["a", "b"])
    with pytest.raises(ValueError, match=r"Not found: \['blue'\]"):
        sources.index_source(paths, labels=[CLASSES[v] for v in labels], class_names=["green", "red"])


def test_error_bad_source(tmp_path):
    with pytest.raises(ValueError, match="No such file or directory"):
        sources.index_source(str(tmp_path / "absent"))
    with pytest.raises(TypeError, match="Received: source=42 of type int"):
        sources.index_source(42)


def test_csv_labels_are_categories_read_as_text(indexed_dir, tmp_path):
    paths, _ = indexed_paths(indexed_dir)
    csv_path = tmp_path / "t.csv"
    pd.DataFrame({
        "path": paths,
        "code": ["01" if i % 2 else "02" for i in range(NUM_INDEXED)],
        "year": [2019 + i % 2 for i in range(NUM_INDEXED)],
        "region": ["NA" if i % 2 else "EU" for i in range(NUM_INDEXED)],
        "grade": [(2, 10, 9)[i % 3] for i in range(NUM_INDEXED)],
    }).to_csv(csv_path, index=False)
    assert sources.index_source(str(csv_path), labels="code").class_names == ["01", "02"]
    years = sources.index_source(str(csv_path), labels="year")
    assert years.class_names == ["2019", "2020"]
    assert years.labels.tolist() == [i % 2 for i in range(NUM_INDEXED)]
    assert sources.index_source(str(csv_path), labels="region").class_names == ["EU", "NA"]
    assert sources.index_source(str(csv_path), labels="grade").class_names == ["2", "9", "10"]


def test_hidden_folders_are_not_classes_and_link_loops_end(tmp_path):
    for name in ("cat", "dog"):
        (tmp_path / name).mkdir()
        Image.new("RGB", (4, 4)).save(tmp_path / name / "x.png")
    (tmp_path / ".ipynb_checkpoints").mkdir()
    (tmp_path / "cat" / "loop").symlink_to(tmp_path / "cat")
    index = sources.index_source(str(tmp_path))
    assert index.class_names == ["cat", "dog"]
    assert len(index) == 2


def test_csv_without_pandas(indexed_dir, tmp_path):
    paths, _ = indexed_paths(indexed_dir)
    csv_path = tmp_path / "t.csv"
    csv_path.write_text(f"path,code,region\n{paths[0]},01,NA\n\n{paths[1]},02,EU\n"
                        f"{paths[2]},,EU\n")
    script = f"""
import sys
sys.modules["pandas"] = None  # import pandas fails
from dalipipe import sources
path = {str(csv_path)!r}
print(sources.index_source(path, labels="region").class_names)
try:
    sources.index_source(path, labels="code")
except ValueError as e:
    print(e)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out == ["['EU', 'NA']", "Missing labels in column 'code' at rows [2]."]
