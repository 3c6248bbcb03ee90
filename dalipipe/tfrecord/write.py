"""Writing image files into ImageNet-style TFRecord files, with their indexes, without
TensorFlow."""

import os

import numpy as np

from dalipipe.tfrecord.format import ENCODED, FILENAME, LABEL, TEXT, example_class, framed
from dalipipe.tfrecord.idx_files import write_index
from dalipipe.tfrecord.paths import index_path_for, replacing
from dalipipe.utils import progress


def write_tfrecords(file_paths, labels, class_names, out_dir, *, num_shards=1, prefix="train",
                    verbose=False):
    """Writes image files into ImageNet-style TFRecord files, with their indexes.

    Each file becomes one `tf.train.Example` record with the features
    `image/encoded` (the file's bytes, unchanged), `image/filename` (its base name),
    `image/class/label` (int64, the 0-based class index; left out when `labels` is
    None) and `image/class/text` (`class_names[label]`; only with `class_names`).

    The files are cut into `num_shards` contiguous runs, as equal as can be (sizes
    differ by at most one record), so reading the shards in name order gives the
    records in the order of `file_paths`: dalipipe then splits and shuffles them as
    it would the image files. Readers that shuffle only within a buffer (`tf.data`)
    want the files shuffled before they are written.

    For example, 10 files and `num_shards=3` give, in `out_dir`:

    ```
    train-00000-of-00003.tfrecord      files 0-3
    train-00000-of-00003.tfrecord.idx
    train-00001-of-00003.tfrecord      files 4-6
    train-00001-of-00003.tfrecord.idx
    train-00002-of-00003.tfrecord      files 7-9
    train-00002-of-00003.tfrecord.idx
    ```

    Args:
        file_paths: paths of the image files.
        labels: integer class index of each file, or None.
        class_names: names of the classes (`labels` index into them), or None.
        out_dir: folder to write to; made if missing.
        num_shards: number of TFRecord files, at most `len(file_paths)`. Defaults to 1.
        prefix: start of the file names. Defaults to `"train"`.
        verbose: draw a progress bar over the records on stderr.

    Returns:
        list of the paths of the TFRecord files written.

    Raises:
        ValueError: for arguments out of range or lengths that do not match.
    """
    file_paths = [os.fspath(p) for p in file_paths]
    labels = check_write_args(file_paths, labels, class_names, num_shards, prefix)
    os.makedirs(out_dir, exist_ok=True)
    bounds = shard_bounds(len(file_paths), num_shards)
    written = []
    with progress(len(file_paths), "records written", enabled=verbose) as bar:
        for shard in range(num_shards):
            path = os.path.join(out_dir, f"{prefix}-{shard:05d}-of-{num_shards:05d}.tfrecord")
            with replacing(path) as temporary, open(temporary, "wb") as f:
                for i in range(bounds[shard], bounds[shard + 1]):
                    f.write(framed(_example(file_paths[i], labels, class_names, i)))
                    bar.update(1)
            write_index(path, index_path_for(path))
            written.append(path)
    return written


def shard_bounds(count, num_shards):
    """The `num_shards + 1` bounds that split `count` samples in order into shards
    whose sizes differ by one at most, the larger first."""
    per_shard, extra = divmod(count, num_shards)
    return [i * per_shard + min(i, extra) for i in range(num_shards + 1)]


def check_write_args(file_paths, labels, class_names, num_shards, prefix):
    """Validates the arguments of `write_tfrecords` (raising its ValueErrors), before
    any work; returns `labels` as an array."""
    if not file_paths:
        raise ValueError("`file_paths` must name at least one file. Received: file_paths=[]")
    if isinstance(num_shards, bool) or not isinstance(num_shards, (int, np.integer)) or not (
        1 <= num_shards <= len(file_paths)
    ):
        raise ValueError(
            f"`num_shards` must be a positive integer no larger than the number of files "
            f"({len(file_paths)}). Received: num_shards={num_shards!r}"
        )
    if not isinstance(prefix, str) or not prefix or os.sep in prefix:
        raise ValueError(
            f"`prefix` must be a non-empty file name without {os.sep!r}. "
            f"Received: prefix={prefix!r}"
        )
    if labels is not None:
        labels = np.asarray(labels)
        if labels.shape != (len(file_paths),) or not np.issubdtype(labels.dtype, np.integer):
            raise ValueError(
                f"`labels` must hold one integer per file of `file_paths` "
                f"({len(file_paths)}). Received: labels of shape {labels.shape} and dtype "
                f"{labels.dtype}"
            )
        if labels.min() < 0:
            raise ValueError(
                f"`labels` must be class indices, 0 or more. Received: labels from "
                f"{labels.min()} to {labels.max()}"
            )
        if class_names is not None and labels.max() >= len(class_names):
            raise ValueError(
                f"`labels` must index into `class_names`, so lie in [0, "
                f"{len(class_names)}). Received: labels from {labels.min()} to "
                f"{labels.max()} and class_names={list(class_names)!r}"
            )
    elif class_names is not None:
        raise ValueError(
            f"`class_names` name the values of `labels`, so they need `labels`. Received: "
            f"labels=None and class_names={list(class_names)!r}"
        )
    return labels


def _example(path, labels, class_names, i):
    """The serialized `tf.train.Example` of file `i` (see `write_tfrecords`)."""
    with open(path, "rb") as f:
        data = f.read()
    example = example_class()()
    feature = example.features.feature
    feature[ENCODED].bytes_list.value.append(data)
    feature[FILENAME].bytes_list.value.append(os.fsencode(os.path.basename(path)))
    if labels is not None:
        label = int(labels[i])
        feature[LABEL].int64_list.value.append(label)
        if class_names is not None:
            feature[TEXT].bytes_list.value.append(str(class_names[label]).encode("utf-8"))
    return example.SerializeToString()
