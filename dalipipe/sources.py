"""Indexing of image sources, label encoding and train/validation splits.

Pure Python and NumPy (CSV files are read with the standard `csv` module, pandas is
needed only for a DataFrame): nothing here imports DALI or TensorFlow.

A source is turned into an `Index`: absolute file paths, integer labels aligned with
them (or None) and the class names the integers stand for. For TFRecord files
(`dalipipe.tfrecord`) each sample is a record, named `"<file>#<record number>"`; for
WebDataset tar shards (`dalipipe.ranges.tar`) a sample, named `"<shard>#<image
member>"`; the index also holds where each record or member lies.

Above 400 lines: each kind of source (folder, table, list, TFRecord records) is
indexed here beside the label encoding and the path resolution they share; a
table's raw and multi-hot targets are `dalipipe.targets`, and what a local folder
holds is `dalipipe.folders`. How the samples travel into the graph is
`dalipipe.feed`.
"""

import csv
import os
import sys
from typing import NamedTuple, Optional

import numpy as np

from dalipipe import tfrecord
from dalipipe.ranges import order as ranges_order, tar
from dalipipe.calls import warn
from dalipipe.folders import LocalTree
from dalipipe.options import is_inferred
from dalipipe.targets import class_order, is_missing, table_targets, warn_numeric_classes
from dalipipe.storage import remote_sources as remote
from dalipipe.utils import IMAGE_EXTENSIONS, MAX_LISTED, UNDECODABLE_EXTENSIONS, listing


class Index(NamedTuple):
    """The samples of a source or of one split of it.

    Attributes:
        file_paths: list of absolute paths (`"<file>#<record number>"` for records).
        labels: int32 class indices aligned with `file_paths`; float32 targets, `(n,)`
            or `(n, k)` (raw, or multi-hot over `class_names`: `dalipipe.targets`); or
            None for an unlabeled source.
        class_names: list of class names (int32 `labels` index into it), or None.
        tfrecord_files: for TFRecord records, the TFRecord files; for tar shards, the
            shards (`dalipipe.ranges`: their kind is told by name); else None.
        refs: for records and members, int64 `(n, k)`: file number (into
            `tfrecord_files`), offset and size of each (`k = 3` for tar shards);
            TFRecord records add where the image lies in the record and the
            record's checksum (`k = 6`: `tfrecord.Records`); else None.
        stamps: int64 `(size, mtime_ns)` of each file (of each of `tfrecord_files` for
            records) when the files were checked, or None if they were not.
        mask_paths: with `masks`, the mask file of each image, aligned with
            `file_paths` (`dalipipe.annotations.inputs`); for tar shards, the mask
            member's name (`"<shard>#<member>"`), or the local file of a mask
            rewritten as a greyscale PNG; else None.
        boxes: with `boxes`, each image's `dalipipe.annotations.boxes.ImageBoxes`
            (its `size` the image's), aligned with `file_paths`; else None.
        mask_refs: with `masks` from tar shards, int64 `(n, 3)`: shard number,
            offset and size of each mask member, `(-1, -1, -1)` where the graph
            reads the file of `mask_paths` instead (`dalipipe.annotations.members`);
            else None.
        faults: `{sample name: reason}` of samples found bad while indexed (of tar
            shards, those whose label cannot be read, kept by `allow_missing`), for
            the check to report with the other bad files (`checks.check_index`); else
            None.
    """

    file_paths: list
    labels: Optional[np.ndarray]
    class_names: Optional[list]
    tfrecord_files: Optional[list] = None
    refs: Optional[np.ndarray] = None
    stamps: Optional[np.ndarray] = None
    mask_paths: Optional[list] = None
    boxes: Optional[list] = None
    mask_refs: Optional[np.ndarray] = None
    faults: Optional[dict] = None

    def take(self, indices):
        indices = np.asarray(indices, np.int64)
        labels = None if self.labels is None else self.labels[indices]
        refs = None if self.refs is None else self.refs[indices]
        stamps = self.stamps
        if stamps is not None and refs is None:
            stamps = stamps[indices]
        masks = None if self.mask_paths is None else [self.mask_paths[i] for i in indices]
        boxes = None if self.boxes is None else [self.boxes[i] for i in indices]
        mask_refs = None if self.mask_refs is None else self.mask_refs[indices]
        return Index([self.file_paths[i] for i in indices], labels, self.class_names,
                     self.tfrecord_files, refs, stamps, masks, boxes, mask_refs, self.faults)

    def without(self, paths, *, keep_classes=False):
        """This index less `paths`; classes left without samples are dropped (and
        the labels renumbered) unless `keep_classes`."""
        drop = set(paths)
        kept = self.take([i for i, p in enumerate(self.file_paths) if p not in drop])
        if kept.labels is None or keep_classes or kept.labels.dtype.kind == "f":
            return kept  # float targets (`dalipipe.targets`) keep their classes
        used = sorted(set(kept.labels.tolist()))
        renumber = np.full(len(self.class_names), -1, np.int32)
        renumber[used] = np.arange(len(used), dtype=np.int32)
        return Index(kept.file_paths, renumber[kept.labels],
                     [self.class_names[i] for i in used], kept.tfrecord_files, kept.refs, kept.stamps)

    def __len__(self):
        return len(self.file_paths)


def index_source(source, *, labels="inferred", class_names=None, path_column="path", root=None,
                 follow_links=False, allow_missing=False, verbose=None, label_columns=None,
                 label_mode="int"):
    """Lists the images of `source` with their labels.

    Args:
        source: a directory with one subfolder per class, a `pandas.DataFrame`, the
            path of a CSV file, a list of file paths, or TFRecord files (a glob
            pattern, a file, or a list of files; see `dalipipe.tfrecord`), or tar shards
            (a brace or glob pattern, a `.tar` file or a list; `dalipipe.ranges.tar`).
        labels: for TFRecord files, `"inferred"` (`image/class/label`) or None. For
            tar shards, `"inferred"` (each sample's `.cls` member), the name of a
            field of its `.json` member, or None. For
            a directory, `"inferred"` (from the subfolders), None, or a list
            of labels in the order of the file paths as `os.walk` lists them with
            folders and files sorted (the order of `Index.file_paths`). For a
            table, the name of the label column, or None. For a list of paths, a list of labels of the
            same length, or None.
        class_names: explicit class names (and their order). For a directory they
            select and order the subfolders; for string labels they fix the mapping
            from label to integer; for integer labels they name the integers.
        path_column: the column of a table that holds the file paths.
        follow_links: for a directory, whether to walk into symbolic links to
            folders (class folders that are links are always walked).
        root: folder that relative paths of a table or list resolve against.
            Defaults to the CSV file's folder, else the current directory.
        allow_missing: keep paths of a table or list that do not exist, and
            samples of tar shards whose label cannot be read (`Index.faults`), for a
            pre-flight check to report with the other bad files, instead of raising.
        verbose: show progress bars while TFRecord files are indexed and scanned.
            Defaults to None: when stderr is a terminal.
        label_columns: for a table, the columns of its targets for `label_mode`
            "raw" or "multi_hot" (`dalipipe.targets`), instead of `labels`.
        label_mode: with `label_columns`, `"raw"` or `"multi_hot"`.

    Returns:
        An `Index`; with `label_columns`, its labels are float32 targets (see
        `dalipipe.targets`).

    Raises:
        ValueError: for an empty source, an unknown column, mismatched lengths, missing
            files or labels that do not match `class_names`.
    """
    if isinstance(source, np.ndarray):
        if source.ndim > 1:
            raise ValueError(
                "`source` given as a NumPy array must hold file paths in one dimension. "
                f"Received: an array of shape {source.shape}"
            )
        source = source.reshape(-1).tolist()
    is_csv = isinstance(source, (str, os.PathLike)) and os.fsdecode(source).lower().endswith(".csv")
    if label_columns is not None and not (is_csv or _is_dataframe(source)):
        raise ValueError(
            "`label_columns` names columns of a table (a pandas DataFrame or a CSV file); "
            "a folder's or a list's labels are `labels`. Received: "
            f"label_columns={label_columns!r} for a source of type {type(source).__name__}"
        )
    targets = (label_columns, label_mode)
    if label_columns is not None:
        labels = None  # the targets are the columns
    shards = tar.tar_files(source)  # before folders: a brace pattern is no prefix
    if shards is not None:
        return _index_shards(tar.scan(shards, verbose=verbose), labels, class_names,
                             allow_missing)
    tree = remote.prefix_tree(source)  # a folder in s3:// or gs://, else None
    if tree is not None:
        return _index_directory(os.fspath(source), labels, class_names, False, tree=tree)
    if isinstance(source, (str, os.PathLike)) and os.path.isdir(source):
        return _index_directory(os.fspath(source), labels, class_names, follow_links)
    files = tfrecord.tfrecord_files(source)
    if files is not None:
        records = tfrecord.scan(files, verbose=verbose)
        return _index_records(records, labels, class_names)
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if not remote.is_remote_source(path) and not os.path.exists(path):
            raise ValueError(
                f"`source` must be a directory, a CSV file, a pandas DataFrame, image paths "
                f"or TFRecord files. No such file or directory: source='{path}'"
            )
        if os.fsdecode(path).lower().endswith(IMAGE_EXTENSIONS + UNDECODABLE_EXTENSIONS):
            source = [path]  # one image: a list of one path
        elif not path.lower().endswith(".csv"):
            raise ValueError(
                f"`source` given as a file must be a CSV file (ending in .csv), an image "
                f"or a TFRecord file. Received: source='{path}'"
            )
    if isinstance(source, (str, os.PathLike)):
        table = read_csv(path)
        base = Base(root, "`root`") if root is not None else \
            Base(remote.folder_of(path), "the CSV file's folder")
        return _index_table(list(table), table.__getitem__, labels, class_names, path_column,
                            base, f"'{path}'", allow_missing, targets)
    base = Base(root, "`root`") if root is not None else Base(os.getcwd(), "the working directory")
    if _is_dataframe(source):
        return _index_table(list(source.columns), lambda name: source[name].tolist(), labels,
                            class_names, path_column, base, "the DataFrame", allow_missing,
                            targets)
    if isinstance(source, (list, tuple)):
        if is_inferred(labels):
            labels = None  # a list of paths has no labels to infer: images only
        return _index_list(list(source), labels, class_names, base, allow_missing=allow_missing)
    raise TypeError(
        f"`source` must be a directory, a CSV file, a pandas DataFrame, image paths (a "
        f"list, a NumPy array or one path) or TFRecord files. Received: source={source!r} "
        f"of type {type(source).__name__}"
    )


def read_table(source, root=None):
    """A table's columns, for a source that is a CSV file's path or a DataFrame.

    Returns:
        `(names, column, folder)`: the column names, `column(name)` a column's
        values as a list, and the folder its relative paths resolve against (`root`,
        else the CSV file's folder, else the working directory); None for a source
        that is not a table.
    """
    if _is_dataframe(source):
        return (list(source.columns), lambda name: source[name].tolist(),
                os.fspath(root) if root is not None else os.getcwd())
    if isinstance(source, (str, os.PathLike)) and os.fsdecode(source).lower().endswith(".csv"):
        path = os.fspath(source)
        table = read_csv(path)
        return (list(table), table.__getitem__,
                os.fspath(root) if root is not None else remote.folder_of(path))
    return None


def split_index(index, *, validation_split, subset, seed, shuffle):
    """Orders an index as `image_dataset_from_directory` orders `file_paths`, and
    splits it into training and validation parts as Keras does.

    With `shuffle`, the samples are permuted by `np.random.RandomState(seed)`, else
    kept in order; the last `int(validation_split * len(index))` of them form the
    validation part. The same `seed` thus gives the same parts as Keras, and two
    calls with the same `seed` give disjoint parts.
    Each part of tar shards in object storage (`ranges.order.reads_in_streams`) is
    then put in the shards' order, so that a pass without `shuffle` reads them in
    large ranges.

    Returns:
        A list of one `Index` for `subset="training"` or `"validation"`, of two
        (training, validation) for `subset="both"`, or `[index]` when
        `validation_split` is None or 0.
    """
    n = len(index)
    order = np.arange(n)
    if shuffle:
        np.random.RandomState(seed).shuffle(order)
    if not validation_split:
        return [index.take(order)]
    num_val = int(validation_split * n)
    parts = {"training": order[: n - num_val], "validation": order[n - num_val:]}
    names = ["training", "validation"] if subset == "both" else [subset]
    result = []
    for name in names:
        if len(parts[name]) == 0:
            raise ValueError(
                f"`validation_split={validation_split}` leaves the {name} subset of "
                f"{n} samples empty. Use more samples or another `validation_split`."
            )
        part = parts[name]
        if ranges_order.reads_in_streams(index):  # objects: each part in the shards' order
            part = part[np.lexsort((index.refs[part, 1], index.refs[part, 0]))]
        result.append(index.take(part))
    return result


def _index_records(records, labels, class_names):
    """An `Index` of TFRecord records (see `index_source`).

    The classes are the distinct `image/class/label` values in increasing order
    (ImageNet's 1-1000 become 0-999), named by `image/class/text` when the records
    carry it, else by the value; `class_names`, if given, renames them in that order.
    With `image/class/text`, `class_names` instead maps each text to its position,
    so that separate sources (a training and a validation pattern) agree even when
    one lacks a class.
    """
    names = [f"{records.shards[f]}#{k}" for f, k in zip(records.refs[:, 0], _record_numbers(records.refs))]
    if labels is not None and not is_inferred(labels):
        raise ValueError(
            "For TFRecord files, `labels` must be 'inferred' (the image/class/label "
            f"feature) or None. Received: labels={labels!r}"
        )
    if labels is None:
        return Index(names, None, None, records.shards, records.refs)
    if records.labels is None:
        raise ValueError(
            "`labels='inferred'` needs an 'image/class/label' feature, and the records of "
            f"{listing(records.shards)} have none. Pass labels=None for images only."
        )
    return _encode_classes(names, records, class_names, (tfrecord.LABEL, tfrecord.TEXT))


def _index_shards(found, labels, class_names, allow_bad):
    """An `Index` of the samples of tar shards (see `index_source`): labels from
    each sample's `.cls` member (`labels="inferred"`), from the field `labels` of its
    `.json` member, or none; classes as `_encode_classes` makes them. With
    `allow_bad`, samples whose label cannot be read are kept, in `faults`
    (`tar.label_values`)."""
    if labels is None:
        return Index(found.names, None, None, found.shards, found.refs)
    if not isinstance(labels, str):
        raise ValueError(
            "For tar shards, `labels` must be 'inferred' (each sample's .cls member), the "
            f"name of a field of its .json member, or None. Received: labels={labels!r}")
    values, texts, bad = tar.label_values(found, labels, allow_bad=allow_bad)
    records = tfrecord.Records(found.shards, found.refs, values, texts)
    what = (".cls", None) if is_inferred(labels) else (f".json field {labels!r}",) * 2
    index = _encode_classes(found.names, records, class_names, what)
    return Index(**{**index._asdict(), "faults": bad or None})


def _encode_classes(names, records, class_names, what):
    """The `Index` of records with integer `records.labels` (and `records.texts`,
    the class texts, or None): the classes are the distinct labels in increasing
    order, named by their texts, else by their values; `class_names` renames them in
    that order, or, with texts, maps each text to its position. `what`: the names of
    the label and the text in messages."""
    label_name, text_name = what
    if class_names is not None and records.texts is not None:
        # Named classes: the mapping is fixed by the names, the same for every source.
        lookup = {name: i for i, name in enumerate(class_names)}
        unknown = sorted(set(records.texts) - set(lookup))
        if unknown:
            raise ValueError(
                f"`class_names` must name every {text_name!r} of the records. Not "
                f"in it: {listing(unknown)}. Received: class_names={list(class_names)}"
            )
        encoded = np.array([lookup[t] for t in records.texts], np.int32)
        return Index(names, encoded, list(class_names), records.shards, records.refs)
    values, encoded = np.unique(records.labels, return_inverse=True)
    found = [str(v) for v in values]
    if records.texts is not None:
        texts = {}
        for value, text in zip(records.labels.tolist(), records.texts):
            texts.setdefault(value, set()).add(text)
        mixed = {v: sorted(t) for v, t in texts.items() if len(t) > 1}
        if mixed:
            raise ValueError(
                f"Each {label_name!r} value must have one {text_name!r}. Found "
                f"several: {dict(list(mixed.items())[:MAX_LISTED])}"
            )
        found = [texts[v].pop() for v in values.tolist()]
    if class_names is not None:
        if len(class_names) != len(values):
            raise ValueError(
                f"`class_names` names the {len(values)} classes of the records, in the "
                f"order of their labels ({listing(values.tolist())}), so it needs "
                f"{len(values)} names. Received: class_names={list(class_names)}"
            )
        found = list(class_names)
    return Index(names, encoded.astype(np.int32), found, records.shards, records.refs)


def _record_numbers(refs):
    """The number of each record within its file (refs are in file order)."""
    starts = np.r_[0, np.flatnonzero(np.diff(refs[:, 0])) + 1]
    numbers = np.arange(len(refs))
    return numbers - np.repeat(starts, np.diff(np.r_[starts, len(refs)]))


def _is_dataframe(obj):
    # A DataFrame can exist only once pandas is imported: no import here.
    pandas = sys.modules.get("pandas")
    return pandas is not None and isinstance(obj, pandas.DataFrame)


def read_csv(path):
    """The columns of a CSV file by name, as lists of text.

    Every cell is text ("01" stays "01", a class named "NA" is a name); an empty cell
    is missing (None), and so is a cell past the end of a short row. Blank lines are
    skipped.
    """
    with (remote.open_text(path) if remote.is_remote_source(path) else
          open(path, newline="", encoding="utf-8-sig")) as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if not header:
            raise ValueError(
                f"A CSV source needs a header row naming its columns. The first line of "
                f"'{path}' is empty."
            )
        repeated = sorted({name for name in header if header.count(name) > 1})
        if repeated:
            raise ValueError(f"The header of '{path}' names columns more than once: {repeated}")
        columns = {name: [] for name in header}
        for row in reader:
            if not row:
                continue
            if len(row) > len(header):
                raise ValueError(
                    f"Line {reader.line_num} of '{path}' has {len(row)} fields, and its "
                    f"header names {len(header)} columns."
                )
            row += [""] * (len(header) - len(row))
            for values, value in zip(columns.values(), row):
                values.append(value if value != "" else None)
    return columns


def _index_directory(directory, labels, class_names, follow_links, tree=None):
    """The images of a directory, as `image_dataset_from_directory` lists them.

    `tree` answers what the folder holds (`folders.LocalTree`'s methods); a prefix in object
    storage passes its own (`dalipipe.storage.remote_sources.RemoteTree`)."""
    tree = tree or LocalTree(directory, follow_links)
    inferred = is_inferred(labels)
    if not inferred and labels is not None:
        if not isinstance(labels, (list, tuple, np.ndarray)):
            raise ValueError(
                "`labels` argument should be a list/tuple of integer labels, of the same "
                "size as the number of image files in the target directory. If you wish "
                "to infer the labels from the subdirectory names in the target directory, "
                'pass `labels="inferred"`. If you wish to get a dataset that only contains '
                f"images (no labels), pass `labels=None`. Received: labels={labels!r}"
            )
        if class_names is not None:
            raise ValueError(
                'You can only pass `class_names` if `labels="inferred"`: a directory\'s '
                "list of labels names its classes by their sorted values. Received: "
                f"labels={list(labels)!r}, and class_names={list(class_names)!r}"
            )
    if inferred:
        subdirs = tree.subdirs()
        if class_names is not None:
            if not set(class_names) <= set(subdirs):
                raise ValueError(
                    "The `class_names` passed did not match the names of the "
                    f"subdirectories of the target directory {directory!r}. Expected: "
                    f"{subdirs} (or a subset of it), but received: "
                    f"class_names={list(class_names)!r}"
                )
            subdirs = list(class_names)
        file_paths, targets, ignored = [], [], []
        for i, name in enumerate(subdirs):
            found, skipped = tree.images(name)
            file_paths += found
            targets += [i] * len(found)
            ignored += skipped
        # Loose files beside the class folders (a labels.csv, a README) are not
        # samples; loose images are, and they have no class: say so.
        ignored += tree.loose_images()
        _warn_ignored(ignored, directory)
        _check_not_empty(file_paths, directory)
        return Index(file_paths, np.asarray(targets, np.int32), list(subdirs))
    file_paths, ignored = tree.images(None)
    _warn_ignored(ignored, directory)
    _check_not_empty(file_paths, directory)
    if labels is None:
        return Index(file_paths, None, None)
    if len(labels) != len(file_paths):
        raise ValueError(
            "Expected the lengths of `labels` to match the number of files in the target "
            f"directory. len(labels) is {len(labels)} while we found {len(file_paths)} "
            f"files in directory {directory!r}."
        )
    return Index(file_paths, *_encode_labels(labels, None, len(file_paths)))


def _warn_ignored(ignored, directory):
    """Warns of image files that are not samples, saying why for each kind."""
    if not ignored:
        return
    undecodable = sorted({os.path.splitext(p)[1].lower() for p in ignored
                          if p.lower().endswith(UNDECODABLE_EXTENSIONS)})
    loose = sum(1 for p in ignored if p.lower().endswith(IMAGE_EXTENSIONS))
    why = []
    if undecodable:
        why.append(f"DALI does not decode {', '.join(undecodable)} files")
    if loose:
        why.append(f"{loose} lie outside the class subfolders (no class)")
    warn(
        f"Ignored {len(ignored)} image file(s) in {directory!r}: {'; '.join(why)}. "
        f"Ignored: {listing(ignored)}",
    )


def _check_not_empty(file_paths, directory):
    if not file_paths:
        raise ValueError(
            f"No images found in directory {directory!r}. Allowed formats: {IMAGE_EXTENSIONS}"
        )


class Base(NamedTuple):
    """The folder that relative paths resolve against, and what it is, for messages."""

    folder: str
    what: str


def _index_table(columns, column, labels, class_names, path_column, base, what,
                 allow_missing, targets):
    """The `Index` of a table: `columns` are its column names, `column(name)` lists
    the values of one; `targets` is `(label_columns, label_mode)`."""
    if path_column not in columns:
        raise ValueError(
            f"`path_column` must name a column of {what}. Available columns: {columns}. "
            f"Received: path_column={path_column!r}"
        )
    if is_inferred(labels) and labels not in columns:  # the default: nothing to infer from
        raise ValueError(
            f"For a table source, pass `labels=` the name of its label column, or "
            f"`labels=None` for images only: {what} has no class folders to infer labels "
            f"from. Available columns: {columns}."
        )
    if labels is not None and (not isinstance(labels, str) or labels not in columns):
        raise ValueError(
            f"For a table source, `labels` must name a label column of {what} or be "
            f"None. Available columns: {columns}. Received: labels={labels!r}"
        )
    paths = column(path_column)
    empty = [i for i, p in enumerate(paths) if is_missing(p) or p == ""]
    if empty:
        raise ValueError(
            f"Column {path_column!r} of {what} has no path at rows {empty[:MAX_LISTED]}."
        )
    label_columns, label_mode = targets
    if label_columns is not None:
        values, names = table_targets(columns, column, label_columns, label_mode,
                                      class_names, what)
        index = _index_list(paths, None, None, base, what=what,
                            allow_missing=allow_missing, path_column=path_column)
        return Index(**{**index._asdict(), "labels": values, "class_names": names})
    label_values = None
    if labels is not None:
        warn_numeric_classes(column(labels), labels, what)
        # A table's labels are categories: 2019 and 2020 are two classes, not 2021.
        label_values = [v if is_missing(v) else str(v) for v in column(labels)]
    return _index_list(paths, label_values, class_names, base, what=what, column=labels,
                       allow_missing=allow_missing, path_column=path_column)


def _index_list(paths, labels, class_names, base, what="the list", column=None,
                allow_missing=False, path_column=None):
    if not paths:
        raise ValueError(f"`source` holds no file paths: {what} is empty.")
    if labels is not None and not isinstance(labels, (list, tuple, np.ndarray)):
        raise ValueError(
            "For a list of file paths, `labels` must be a list of the same length, or None. "
            f"Received: labels={labels!r}"
        )
    if remote.is_remote_list(paths, base.folder):  # URIs, or root="s3://...": found by listing
        file_paths = remote.resolve(paths, base.folder, what, allow_missing)
        return Index(file_paths, *(None, None) if labels is None else
                     _encode_labels(labels, class_names, len(file_paths), column))
    bad = [p for p in paths if not isinstance(p, (str, bytes, os.PathLike))]
    if bad:
        raise ValueError(
            f"File paths must be strings. Received in {what}: {bad[:MAX_LISTED]}"
        )
    folder = os.path.abspath(base.folder)
    file_paths = [
        os.path.normpath(os.path.join(folder, os.path.expanduser(os.fsdecode(p)))) for p in paths
    ]
    missing = [p for p in file_paths if not os.path.isfile(p)]
    # A few missing files are for the check to report with the other bad files; most
    # of them missing means the paths start from another folder.
    if missing and (not allow_missing or 2 * len(missing) > len(file_paths)):
        hint = ""
        if 2 * len(missing) > len(file_paths):
            hint = _moved_paths_hint(paths, file_paths, missing, base, folder, what,
                                     path_column)
        raise ValueError(
            f"{len(missing)} of {len(file_paths)} file(s) named in {what} do not exist: "
            f"{listing(missing)}.{hint}"
        )
    if labels is None:
        return Index(file_paths, None, None)
    target, names = _encode_labels(labels, class_names, len(file_paths), column)
    return Index(file_paths, target, names)


def _moved_paths_hint(paths, file_paths, missing, base, folder, what, path_column):
    """What to do when most of the files named in a table or list are missing: paths
    that start from another folder (`root=`), or absolute paths of files that moved
    (`root=` does not apply to those)."""
    first = os.fsdecode(paths[file_paths.index(missing[0])])
    if not os.path.isabs(os.path.expanduser(first)):
        return (
            f" Relative paths are resolved against `root=`, else the CSV file's folder, "
            f"else the working directory: here {base.what}, {folder}. The first missing "
            f"one, {first!r}, resolved to {missing[0]}. Pass `root=` the folder the "
            "paths start from."
        )
    gone = set(missing)
    moved = [f for p, f in zip(paths, file_paths)
             if f in gone and os.path.isabs(os.path.expanduser(os.fsdecode(p)))]
    prefix = os.path.commonpath([os.path.dirname(p) for p in moved])
    where = f"column {path_column!r} of {what}" if path_column else what
    strip = (f"strip the prefix they share, {os.path.join(prefix, '')!r}, and pass `root=` "
             f"the folder that holds them now" if prefix != os.sep else
             "strip the old folder from them and pass `root=` the folder that holds them now")
    given = f" (Received: root={base.folder!r})" if base.what == "`root`" else ""
    return (
        f" The paths are absolute, so `root=` does not change them{given}: the first "
        f"missing one is {first!r}. If the files moved, rewrite the paths in {where} to "
        f"their new place, or {strip}."
    )


def _encode_labels(labels, class_names, num_files, column=None):
    """Integer labels and class names from a sequence of string or integer labels."""
    values = list(labels)
    where = f"column {column!r}" if column else "`labels`"
    if len(values) != num_files:
        raise ValueError(
            f"`labels` must have one label per image: found {num_files} images and "
            f"{len(values)} labels."
        )
    missing = [i for i, v in enumerate(values) if is_missing(v)]
    if missing:
        fix = (f"drop those rows from the table (with pandas, "
               f"`df.dropna(subset=[{column!r}])`), or fill their labels in" if column else
               "leave those images and their entries in `labels` out of the source, or "
               "give them labels")
        raise ValueError(f"Missing labels in {where} at rows {missing[:MAX_LISTED]}: "
                         f"every image needs one, so {fix}.")
    if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values):
        target = np.asarray(values, np.int64)
        num_classes = len(class_names) if class_names is not None else int(target.max()) + 1
        if target.min() < 0 or target.max() >= num_classes:
            raise ValueError(
                f"Integer labels in {where} must lie in [0, {num_classes}) "
                f"({'len(class_names)' if class_names is not None else 'max + 1'}). "
                f"Received labels from {target.min()} to {target.max()}."
            )
        names = list(class_names) if class_names is not None else [str(i) for i in range(num_classes)]
        return target.astype(np.int32), names
    strings = [str(v) for v in values]
    names = list(class_names) if class_names is not None else sorted(set(strings), key=class_order)
    lookup = {name: i for i, name in enumerate(names)}
    unknown = sorted(set(strings) - set(lookup))
    if unknown:
        raise ValueError(
            f"Labels in {where} must be among `class_names`. Not found: {unknown[:MAX_LISTED]}. "
            f"Received: class_names={names}"
        )
    return np.asarray([lookup[s] for s in strings], np.int32), names
