"""What happens to the bad samples the check found: an error or a warning with a
report (`apply_policy`, `write_report`), and the check again of files that change
during training (`verify_unchanged`).
"""

import os
import sys
import time

import numpy as np

from dalipipe.calls import warn
from dalipipe.checks.driver import check_file
from dalipipe.checks.verdicts import bad_files
from dalipipe.storage import is_remote
from dalipipe.storage.uris import COLLAPSED
from dalipipe.utils import cache_disabled, writable_cache_dir


def apply_policy(index, verdicts, *, on_bad_file, keep_classes):
    """The index to train on, given the `Verdict`s of `check_index`.

    The index carries the stamps of its files (of its TFRecord files, for records)
    from the verdicts, as they were when checked, for `verify_unchanged`.
    `on_bad_file="raise"`: a ValueError that lists the bad files, and the report's
    path. `"skip"`: the index less the bad files (classes left empty are dropped
    unless `keep_classes`), with a warning that gives the count and the report.
    The report is a file (see `write_report`), or on stderr where none can be
    written; raising or skipping happens all the same.
    """
    index = _stamped(index, verdicts)
    bad = bad_files(verdicts)
    if not bad:
        return index
    report = write_report(bad, len(index))
    listed = "\n".join(f"  {path}: {reason}" for path, reason in list(bad.items())[:100])
    more = f"\n  ... and {len(bad) - 100} more" if len(bad) > 100 else ""
    if on_bad_file == "raise":
        raise ValueError(
            f"{len(bad)} of {len(index)} files cannot be loaded (DALI would stop at the "
            f"first of them). Fix or remove them"
            + (", or pass on_bad_file='skip'" if len(bad) < len(index) else "") + ". Report: "
            f"{report}\n{listed}{more}"
        )
    kept = index.without(bad, keep_classes=keep_classes)
    if not len(kept):
        raise ValueError(f"All {len(index)} files are bad. Report: {report}\n{listed}{more}")
    dropped = sorted(set(index.class_names or []) - set(kept.class_names or []))
    warn(
        f"Left out {len(bad)} of {len(index)} files that cannot be loaded"
        + (f"; classes left without images: {dropped}" if dropped else "")
        + f". Report: {report}",
    )
    return kept


def _stamped(index, verdicts):
    """`index` with `stamps`, int64 `(size, n)` rows of its files (of its TFRecord
    files, for records) from `verdicts`, one per sample; `(-1, -1)` for a file that
    has none (could not be stat-ed, or holds none of the records)."""
    rows = np.array([v.stamp or (-1, -1) for v in verdicts], np.int64).reshape(-1, 2)
    if index.refs is None:
        table = rows
    else:
        table = np.full((len(index.tfrecord_files), 2), -1, np.int64)
        table[index.refs[:, 0]] = rows  # a file's records share its stamp
    return type(index)(**{**index._asdict(), "stamps": table})  # its len is not a tuple's


def verify_unchanged(paths, stamps, *, check):
    """Raises RuntimeError naming a file deleted or changed since it was checked.

    Args:
        paths: file paths.
        stamps: int64 `(len(paths), 2)`: `(size, mtime_ns)` when they were checked
            (the `Verdict.stamp`s that `apply_policy` puts in the index).
        check: `"structure"` or `"full"`: a file whose size or modification time
            changed is checked again at this level, and accepted if it passes. None:
            any change is an error (for TFRecord files, whose records may have moved).

    Objects (`s3://`, `gs://`) are not looked at again: the check's verdicts hold
    for the version it listed, DALI's read of a deleted object fails naming its
    bucket and key, and a replaced object that no longer decodes is checked again
    when DALI's decoder fails on it (`dalipipe.native`), naming its URI.
    """
    for path, (size, mtime_ns) in zip(paths, np.asarray(stamps).tolist()):
        if (type(path) is not str or "://" in path or path.startswith(COLLAPSED)) \
                and is_remote(path):  # (`is_remote` only where it could say yes or raise)
            continue  # an object: a HEAD per batch is not free (docs/storage.md)
        try:
            info = os.stat(path)
        except OSError as e:
            raise RuntimeError(
                f"{path} was checked before training and cannot be opened now "
                f"({e.strerror}): it was deleted or moved during training."
            ) from None
        if info.st_size == size and info.st_mtime_ns == mtime_ns:
            continue
        if check is None:
            raise RuntimeError(
                f"{path} changed after the check before training: its records may have "
                "moved. Make the dataset again."
            )
        reason = check_file(path, full=check == "full")
        if reason is not None:
            raise RuntimeError(
                f"{path} changed after the check before training and is now bad: {reason}."
            )


def write_report(bad, total, *, directory=None):
    """Writes one line per bad file (reason, then path) to a report file.

    Args:
        bad: `{file path or record name: reason}`.
        total: how many files were checked.
        directory: where the report goes. Defaults to `reports` in the cache folder.

    Returns:
        The report's path; or, when it cannot be written there (no writable cache
        folder, `DALIPIPE_NO_CACHE` set), the report is printed on stderr and the
        return value says so: `"stderr (<why>)"`.
    """
    lines = [f"# {len(bad)} bad file(s) of {total} checked\n"]
    lines += [f"{reason}\t{os.fsdecode(file_path)}\n" for file_path, reason in sorted(bad.items())]
    if directory is None:
        folder = writable_cache_dir()
        directory = None if folder is None else os.path.join(folder, "reports")
        why = "DALIPIPE_NO_CACHE is set" if cache_disabled() else "no writable cache folder"
    if directory is not None:
        path = os.path.join(directory, time.strftime("bad-files-%Y%m%d-%H%M%S.txt"))
        try:
            os.makedirs(directory, exist_ok=True)
            with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
                f.writelines(lines)
            return path
        except OSError as e:
            why = f"{path} cannot be written: {e.strerror or e}"
    sys.stderr.write("dalipipe: bad-file report\n")
    sys.stderr.writelines(lines)  # stderr escapes what is not UTF-8
    sys.stderr.flush()
    return f"stderr ({why})"
