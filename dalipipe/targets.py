"""A table's targets beyond one class per image: raw numbers and multi-hot classes.

`label_columns` names the columns, and `label_mode` says what they hold:
- `"raw"`: numbers, float32 `(n,)` for one column given by its name, `(n, k)` for a
  list of `k` names (regression, several outputs), as `flow_from_dataframe`'s
  `class_mode="raw"` gave them;
- `"multi_hot"`: the classes of each image, float32 `(n, classes)` with 1.0 for
  each class the image has (Keras's `CategoryEncoding(output_mode="multi_hot")`):
  from one column whose cells list class names (a list in a DataFrame, or names
  separated by `|` as in `"cat|dog"`), or from a list of 0/1 columns, one per
  class, which name the classes.

Every row must hold a value: missing and non-numeric values are errors naming the
column and the rows. `warn_numeric_classes` warns when `labels=` is about to make
the distinct values of a numeric column into classes. Pure Python and NumPy.
"""

import math

import numpy as np

from dalipipe.calls import warn
from dalipipe.utils import MAX_LISTED, listing

# Separates the class names of one cell of a multi-hot column given as text.
MULTI_HOT_SEPARATOR = "|"


def is_missing(value):
    """Whether a cell is empty: None or NaN."""
    return value is None or (isinstance(value, float) and np.isnan(value))


def class_order(name):
    """Sort key for class names: plain integers first, numerically ("2" < "10"), then
    the other names alphabetically."""
    is_int = name.isdigit() and (name == "0" or not name.startswith("0"))
    return (0, int(name), "") if is_int else (1, 0, name)


def table_targets(columns, column, label_columns, label_mode, class_names, what):
    """The targets of a table for `label_mode` "raw" or "multi_hot" (see above).

    Args:
        columns: the table's column names; `column(name)` lists one column's cells.
        label_columns: a column's name, or a list of names.
        label_mode: `"raw"` or `"multi_hot"`.
        class_names: for a multi-hot column of class names, the classes and their
            order (None: the sorted names found); else it must be None.
        what: the table, for messages (`"the DataFrame"`, `"'labels.csv'"`).

    Returns:
        `(targets, class_names)`: float32 `(n,)` or `(n, k)` for "raw" (class_names
        None); float32 `(n, classes)` and the class names for "multi_hot".

    Raises:
        ValueError: for an unknown column, a missing value, or a value that is not a
            number (raw), not 0 or 1 (multi-hot columns), or not a class name.
    """
    names = [label_columns] if isinstance(label_columns, str) else list(label_columns)
    unknown = [c for c in names if c not in columns]
    if unknown:
        raise ValueError(
            f"`label_columns` must name columns of {what}. Not found: {unknown}. "
            f"Available columns: {columns}. Received: label_columns={label_columns!r}"
        )
    if label_mode == "raw":
        values = np.stack([_numbers(column(c), c, what, label_mode) for c in names], axis=1)
        return (values[:, 0] if isinstance(label_columns, str) else values), None
    if isinstance(label_columns, str):
        return _multi_hot_of_names(column(label_columns), label_columns, class_names, what)
    if class_names is not None:
        raise ValueError(
            "With a list of `label_columns`, each 0/1 column is a class and names it, so "
            "`class_names` must be None. Received: "
            f"label_columns={label_columns!r}, class_names={list(class_names)!r}"
        )
    values = np.stack([_numbers(column(c), c, what, label_mode) for c in names], axis=1)
    bad = np.flatnonzero(~np.isin(values, (0.0, 1.0)).all(axis=1))
    if len(bad):
        raise ValueError(
            f'For `label_mode="multi_hot"`, the columns {names} of {what} must hold 0 or 1 '
            f"(whether the image has that class). Other values at rows "
            f"{bad[:MAX_LISTED].tolist()}"
        )
    return values, names


def warn_numeric_classes(values, name, what):
    """Warns when `labels=name` makes the values of a numeric column classes: a
    column of numbers that are not all integers (integers are class indices)."""
    present = [v for v in values if not is_missing(v)]
    if not present or any(isinstance(v, (bool, np.bool_)) for v in present):
        return
    if any(_number(v) is None for v in present) or all(_is_integer(v) for v in present):
        return
    found = sorted({str(v) for v in present})
    warn(
        f"Column {name!r} of {what} holds numbers, and `labels={name!r}` makes each "
        f"distinct value a class: {len(found)} classes, {listing(found)}. For numeric "
        f'targets, pass `label_columns={name!r}, label_mode="raw"`; for classes, make '
        "the column integers or text.",
    )


def _number(value):
    """A cell as a float (a number, or text that reads as one), or None."""
    if isinstance(value, (bool, np.bool_, int, float, np.integer, np.floating)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _is_integer(value):
    if isinstance(value, str):
        return value.strip().lstrip("+-").isdigit()
    return isinstance(value, (int, np.integer))


def _numbers(values, name, what, label_mode):
    """A column's cells as float32 numbers; missing and other cells are errors."""
    missing = [i for i, v in enumerate(values) if is_missing(v)]
    if missing:
        raise ValueError(
            f"Column {name!r} of {what} has no value at rows {missing[:MAX_LISTED]}: "
            f"`label_mode={label_mode!r}` needs a number in every row."
        )
    numbers = [_number(v) for v in values]
    bad = [i for i, n in enumerate(numbers) if n is None or not math.isfinite(n)]
    if bad:
        raise ValueError(
            f"Column {name!r} of {what} must hold finite numbers for "
            f"`label_mode={label_mode!r}`. Other values at rows {bad[:MAX_LISTED]}: "
            f"{listing(repr(values[i]) for i in bad)}"
        )
    return np.asarray(numbers, np.float32)


def _multi_hot_of_names(values, name, class_names, what):
    """Multi-hot rows from a column whose cells list class names."""
    rows, missing, bad = [], [], []
    for i, value in enumerate(values):
        if isinstance(value, str):
            value = value.split(MULTI_HOT_SEPARATOR)
        elif isinstance(value, np.ndarray):
            value = value.tolist()
        elif is_missing(value):
            missing.append(i)
            continue
        if not isinstance(value, (list, tuple, set, frozenset)) or \
                not all(isinstance(v, str) for v in value):
            bad.append(i)
            continue
        rows.append({v.strip() for v in value if v.strip()})
    if missing:
        raise ValueError(
            f"Column {name!r} of {what} has no classes at rows {missing[:MAX_LISTED]}: "
            '`label_mode="multi_hot"` needs the classes of every image (an empty list in '
            "a DataFrame, or 0/1 columns, for an image of none)."
        )
    if bad:
        raise ValueError(
            f'For `label_mode="multi_hot"`, column {name!r} of {what} must hold class '
            f"names: a list of strings, or text such as 'cat{MULTI_HOT_SEPARATOR}dog'. "
            f"Other values at rows {bad[:MAX_LISTED]}: {listing(repr(values[i]) for i in bad)}"
        )
    found = set().union(*rows)
    names = list(class_names) if class_names is not None else sorted(found, key=class_order)
    unknown = sorted(found - set(names))
    if unknown:
        raise ValueError(
            f"Classes in column {name!r} of {what} must be among `class_names`. Not found: "
            f"{unknown[:MAX_LISTED]}. Received: class_names={names}"
        )
    lookup = {c: i for i, c in enumerate(names)}
    targets = np.zeros((len(rows), len(names)), np.float32)
    for row, classes in zip(targets, rows):
        row[[lookup[c] for c in classes]] = 1.0
    return targets, names
