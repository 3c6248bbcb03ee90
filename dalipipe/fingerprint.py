"""A dataset's fingerprint, what makes its epochs what they are, and what differs
between two, in a few words: `dalipipe.BackupAndRestore` and the Grain iterators
refuse a saved position of another dataset with it.

Pure Python: no Keras.
"""

import ast
import hashlib

from dalipipe.options import Options


def fingerprint(image_pipeline):
    """What makes a dataset's epochs what they are, as JSON values: the files (their
    number and a hash of their sorted paths), `seed`, `shuffle`, `batch_size`,
    the steps and the shard, and the other options that change the data, as `Options`
    declares them (`Options.data_names()`)."""
    options = image_pipeline.options
    paths = "\n".join(sorted(str(p) for p in image_pipeline.file_paths)).encode()
    sharding = image_pipeline.sharding
    found = {
        "files": f"{len(image_pipeline.file_paths)} files, sha256 "
                 f"{hashlib.sha256(paths).hexdigest()[:16]}",
        "seed": options.seed,
        "shuffle": options.shuffle,
        "batch_size": options.batch_size,
        "steps": image_pipeline.steps,
        "shard": None if sharding is None else [sharding.num_replicas,
                                                list(sharding.replica_ids)],
    }
    for name in Options.data_names():
        if name not in found:
            found[name] = repr(getattr(options, name))
    return found


def differences(saved, current):
    """What differs between fingerprints `saved` and `current`, in words ("" if
    nothing): the names, then in a few words how each differs (two short values
    themselves; for the files their counts; for a long list, its lengths and its
    first differing item; for another long value, where it starts to differ)."""
    differs = sorted(k for k in set(saved) | set(current) if saved.get(k) != current.get(k))
    if not differs:
        return ""
    details = "; ".join(f"{k}: {_difference(k, saved.get(k), current.get(k))}"
                        for k in differs)
    return f"{', '.join(differs)} ({details})"


_SHORT = 40  # the longest value that `differences` quotes whole, in characters


def _difference(name, saved, current):
    """How fingerprint value `name` differs, `saved` in the backup and `current` in
    the dataset, in a few words."""
    if name == "files" and isinstance(saved, str) and isinstance(current, str):
        counts = saved.split(" ", 1)[0], current.split(" ", 1)[0]
        if counts[0] != counts[1]:
            return f"{counts[0]} files in the backup, {counts[1]} in the dataset"
        return f"{counts[0]} files in both, other paths"
    if len(repr(saved)) <= _SHORT and len(repr(current)) <= _SHORT:
        return f"saved {saved!r}, dataset {current!r}"
    values = _literal(saved), _literal(current)
    if all(isinstance(v, (list, tuple)) for v in values):
        lengths = [len(v) for v in values]
        first = next((i for i, (a, b) in enumerate(zip(*values)) if a != b), None)
        counted = (f"{lengths[0]} items in both" if lengths[0] == lengths[1] else
                   f"{lengths[0]} items in the backup, {lengths[1]} in the dataset")
        if first is None:
            return f"{counted}, the same up to {min(lengths)}"
        return (f"{counted}, the first differing at [{first}]: saved "
                f"{_shorten(repr(values[0][first]))}, dataset {_shorten(repr(values[1][first]))}")
    texts = [v if isinstance(v, str) else repr(v) for v in (saved, current)]
    at = next((i for i, (a, b) in enumerate(zip(*texts)) if a != b), min(map(len, texts)))
    return (f"{len(texts[0])} and {len(texts[1])} characters, differing from character "
            f"{at}: saved {_shorten(texts[0][at:])!r}, dataset {_shorten(texts[1][at:])!r}")


def _literal(value):
    """A fingerprint's `repr` of an option read back as a Python value, else `value`."""
    try:
        return ast.literal_eval(value) if isinstance(value, str) else value
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return value


def _shorten(text, width=20):
    """`text` cut to `width` characters, ending in "..." when cut."""
    return text if len(text) <= width else text[:width - 3] + "..."
