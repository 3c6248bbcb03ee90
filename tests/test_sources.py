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
    with pytest.raises(ValueError, match=r"1 of \d+ file\(s\) named in the DataFrame do not exist: .*nowhere\.jpg\.$"):
        sources.index_source(table, labels="label")


@pytest.mark.parametrize("allow_missing", [False, True])
def test_most_files_missing_says_where_relative_paths_start(indexed_dir, tmp_path, allow_missing):
    """Paths relative to another folder: the message names the folder they were
    resolved against and the first resolved path, with or without the check."""
    paths, _ = indexed_paths(indexed_dir)
    names = [os.path.relpath(p, indexed_dir) for p in paths]
    table = pd.DataFrame({"path": names, "label": ["x"] * len(names)})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with pytest.raises(ValueError) as info:
        sources.index_source(table, labels="label", root=str(elsewhere),
                             allow_missing=allow_missing)
    message = str(info.value)
    assert f"{len(names)} of {len(names)} file(s) named in the DataFrame do not exist" in message
    assert f"here `root`, {elsewhere}" in message
    assert f"The first missing one, {names[0]!r}, resolved to {elsewhere / names[0]}" in message
    assert "on_bad_file" not in message
    csv = tmp_path / "table.csv"
    table.to_csv(csv, index=False)
    with pytest.raises(ValueError, match="here the CSV file's folder, " + str(tmp_path)):
        sources.index_source(str(csv), labels="label", allow_missing=allow_missing)


def test_absolute_paths_of_moved_files_say_root_cannot_help_and_what_does(indexed_dir,
                                                                            tmp_path):
    """A table of absolute paths whose folder moved: `root=` does not change them; the
    message says so and names the prefix to strip, after which `root=` works."""
    paths, _ = indexed_paths(indexed_dir)
    old = os.path.join(str(tmp_path), "moved", "away")
    names = [os.path.join(old, os.path.relpath(p, indexed_dir)) for p in paths]
    table = pd.DataFrame({"file": names, "label": ["x"] * len(names)})
    for root in (None, indexed_dir):
        with pytest.raises(ValueError) as info:
            sources.index_source(table, labels="label", path_column="file", root=root)
        message = str(info.value)
        assert "Relative paths are resolved" not in message
        assert "The paths are absolute, so `root=` does not change them" in message
        assert (f"(Received: root={indexed_dir!r})" in message) == (root is not None)
        assert f"the first missing one is {names[0]!r}" in message
        assert "rewrite the paths in column 'file' of the DataFrame" in message
        assert f"strip the prefix they share, {old + os.sep!r}, and pass `root=`" in message
    table["file"] = table["file"].str.removeprefix(old + os.sep)
    moved = sources.index_source(table, labels="label", path_column="file", root=indexed_dir)
    assert moved.file_paths == paths


def test_a_table_without_labels_names_the_argument_that_chooses_the_column(indexed_dir,
                                                                            tmp_path):
    paths, _ = indexed_paths(indexed_dir)
    csv = tmp_path / "pets.csv"
    pd.DataFrame({"path": paths, "bi": ["dog"] * len(paths)}).to_csv(csv, index=False)
    with pytest.raises(ValueError) as info:
        sources.index_source(str(csv))
    message = str(info.value)
    assert message.startswith("For a table source, pass `labels=` the name of its label "
                              "column, or `labels=None` for images only")
    assert "Available columns: ['path', 'bi']" in message and "Received" not in message
    assert sources.index_source(str(csv), labels="bi").class_names == ["dog"]
    named = pd.DataFrame({"path": paths, "inferred": ["cat"] * len(paths)})
    assert sources.index_source(named).class_names == ["cat"]  # a column of that name


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
    assert out == ["['EU', 'NA']", "Missing labels in column 'code' at rows [2]: every image "
                   "needs one, so drop those rows from the table (with pandas, "
                   "`df.dropna(subset=['code'])`), or fill their labels in."]


def test_missing_labels_name_the_rows_and_the_fix_that_works(indexed_dir):
    paths, _ = indexed_paths(indexed_dir)
    table = pd.DataFrame({"path": paths, "bi": [None if i in (3, 10) else "ab"[i % 2]
                                                for i in range(NUM_INDEXED)]})
    with pytest.raises(ValueError, match=r"Missing labels in column 'bi' at rows \[3, 10\]: "
                                         r".*drop those rows .*df\.dropna\(subset=\['bi'\]\)"):
        sources.index_source(table, labels="bi")
    kept = sources.index_source(table.dropna(subset=["bi"]), labels="bi")
    assert len(kept) == NUM_INDEXED - 2 and paths[3] not in kept.file_paths
    with pytest.raises(ValueError, match=r"Missing labels in `labels` at rows \[1\]: .*leave "
                                         r"those images and their entries in `labels` out"):
        sources.index_source(paths[:2], labels=["a", None])


def test_a_numpy_array_and_one_image_path_are_list_sources(indexed_dir):
    """For `predict`: images only, as `labels="inferred"` has nothing to infer."""
    paths, _ = indexed_paths(indexed_dir)
    index = sources.index_source(np.array(paths))
    assert index.file_paths == paths and index.labels is None
    one = sources.index_source(paths[0])
    assert one.file_paths == paths[:1] and one.labels is None
    with pytest.raises(ValueError, match=r"in one dimension. Received: an array of shape \(2, 1\)"):
        sources.index_source(np.array(paths[:2]).reshape(2, 1))


def test_the_stray_file_warning_says_why_without_listing_every_extension(tmp_path):
    (tmp_path / "a").mkdir()
    Image.new("RGB", (4, 4)).save(tmp_path / "a" / "x.png")
    Image.new("RGB", (4, 4)).save(tmp_path / "a" / "anim.gif")
    Image.new("RGB", (4, 4)).save(tmp_path / "loose.jpg")
    with pytest.warns(UserWarning) as record:
        sources.index_source(str(tmp_path))
    message = str(record[0].message)
    assert "DALI does not decode .gif files; 1 lie outside the class subfolders" in message
    assert ".webp" not in message and ".tiff" not in message


def targets_table(indexed_dir):
    paths, _ = indexed_paths(indexed_dir)
    n = len(paths)
    return pd.DataFrame({
        "path": paths,
        "age": np.arange(n) / 4,
        "size": np.arange(n) * 2,
        "tags": [["cat", "dog"][: i % 3] for i in range(n)],
        "cat": [i % 2 for i in range(n)],
        "dog": [1 - i % 2 for i in range(n)],
    })


def test_raw_targets_are_float32_columns(indexed_dir, tmp_path):
    table = targets_table(indexed_dir)
    one = sources.index_source(table, label_columns="age", label_mode="raw")
    assert one.labels.dtype == np.float32 and one.labels.shape == (len(table),)
    np.testing.assert_array_equal(one.labels, table["age"].to_numpy(np.float32))
    assert one.class_names is None
    both = sources.index_source(table, label_columns=["age", "size"], label_mode="raw")
    assert both.labels.shape == (len(table), 2)
    np.testing.assert_array_equal(both.labels[:, 1], table["size"].to_numpy(np.float32))
    csv = tmp_path / "t.csv"
    table[["path", "age"]].to_csv(csv, index=False)
    from_csv = sources.index_source(str(csv), label_columns=["age"], label_mode="raw")
    np.testing.assert_array_equal(from_csv.labels[:, 0], one.labels)
    # Float targets keep their (absent) classes when files are left out.
    kept = both.without(both.file_paths[:2])
    assert len(kept) == len(table) - 2 and kept.labels.shape == (len(table) - 2, 2)


def test_multi_hot_targets_from_names_or_from_0_1_columns(indexed_dir, tmp_path):
    table = targets_table(indexed_dir)
    named = sources.index_source(table, label_columns="tags", label_mode="multi_hot")
    assert named.class_names == ["cat", "dog"] and named.labels.dtype == np.float32
    np.testing.assert_array_equal(named.labels[:3], [[0, 0], [1, 0], [1, 1]])
    ordered = sources.index_source(table, label_columns="tags", label_mode="multi_hot",
                                   class_names=["dog", "cat", "bird"])
    np.testing.assert_array_equal(ordered.labels[:3], [[0, 0, 0], [0, 1, 0], [1, 1, 0]])
    csv = tmp_path / "t.csv"
    pd.DataFrame({"path": table["path"], "tags": ["|".join(t) or "cat" for t in table["tags"]]}) \
        .to_csv(csv, index=False)
    texts = sources.index_source(str(csv), label_columns="tags", label_mode="multi_hot")
    np.testing.assert_array_equal(texts.labels[:3], [[1, 0], [1, 0], [1, 1]])
    columns = sources.index_source(table, label_columns=["cat", "dog"], label_mode="multi_hot")
    assert columns.class_names == ["cat", "dog"]
    np.testing.assert_array_equal(columns.labels[:2], [[0, 1], [1, 0]])


@pytest.mark.parametrize("change, kwargs, message", [
    (dict(age=None), dict(label_columns="age", label_mode="raw"),
     r"Column 'age' of the DataFrame has no value at rows \[1\]: `label_mode='raw'` needs"),
    (dict(age="n/a"), dict(label_columns="age", label_mode="raw"),
     r"Column 'age' of the DataFrame must hold finite numbers .* Other values at rows \[1\]: 'n/a'"),
    (dict(tags=None), dict(label_columns="tags", label_mode="multi_hot"),
     r"Column 'tags' of the DataFrame has no classes at rows \[1\]"),
    (dict(tags=3), dict(label_columns="tags", label_mode="multi_hot"),
     r"must hold class names.* Other values at rows \[1\]: 3"),
    (dict(cat=2), dict(label_columns=["cat", "dog"], label_mode="multi_hot"),
     r"the columns \['cat', 'dog'\] of the DataFrame must hold 0 or 1 .* rows \[1\]"),
    (dict(), dict(label_columns=["cat", "bird"], label_mode="raw"),
     r"`label_columns` must name columns of the DataFrame. Not found: \['bird'\]"),
    (dict(), dict(label_columns="tags", label_mode="multi_hot", class_names=["cat"]),
     r"must be among `class_names`. Not found: \['dog'\]"),
])
def test_target_errors_name_the_column_and_rows(indexed_dir, change, kwargs, message):
    table = targets_table(indexed_dir).astype(object)
    for column, value in change.items():
        table.at[1, column] = value
    with pytest.raises(ValueError, match=message):
        sources.index_source(table, **kwargs)


def test_label_columns_are_for_tables_only(indexed_dir):
    with pytest.raises(ValueError, match=r"`label_columns` names columns of a table .* "
                                         r"Received: label_columns='age' for a source of type str"):
        sources.index_source(indexed_dir, label_columns="age", label_mode="raw")


def test_a_numeric_column_as_class_names_warns(indexed_dir):
    table = targets_table(indexed_dir)
    with pytest.warns(UserWarning, match=r"Column 'age' of the DataFrame holds numbers, and "
                                         r"`labels='age'` makes each distinct value a class.*"
                                         r"label_columns='age', label_mode=\"raw\""):
        index = sources.index_source(table, labels="age")
    assert index.class_names[:2] == ["0.0", "0.25"]
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # integers are class indices: no warning
        sources.index_source(table, labels="size")
        sources.index_source(table.assign(size=table["size"].astype(str)), labels="size")


def test_a_csv_column_of_decimals_as_class_names_warns(indexed_dir, tmp_path):
    csv = tmp_path / "t.csv"
    targets_table(indexed_dir)[["path", "age"]].to_csv(csv, index=False)
    with pytest.warns(UserWarning, match=f"Column 'age' of '{csv}' holds numbers"):
        sources.index_source(str(csv), labels="age")
