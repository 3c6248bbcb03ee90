"""What both public functions do with a call: the first argument's two names
(`first_argument`), and warnings given at the caller's line (`warnings_at_caller`).

`make_dali_dataset` and `make_dali_pipeline` warn from deep inside dalipipe (the
index, the check, the device choice), at depths that differ between them;
`warnings_at_caller` gives every such warning again at the first line outside the
package, the user's.
"""

import os
import sys
import warnings


def first_argument(function, directory, source):
    """The source given to `function` as `directory` (Keras's name, positional or
    keyword) or as `source=` (the same argument, named for a table or a list).

    Raises:
        TypeError: when both or neither are given.
    """
    if directory is not None and source is not None:
        raise TypeError(
            f"{function}() takes its source once: `directory` (the first argument) and "
            f"`source` are two names of it. Received: directory={directory!r} and "
            f"source={source!r}"
        )
    if directory is None and source is None:
        raise TypeError(
            f"{function}() missing its first argument: a folder of class subfolders, a "
            "DataFrame or CSV file, a list of image paths or TFRecord files, given as "
            "`directory` (positional) or `source=`"
        )
    return source if directory is None else directory


def warnings_at_caller(make, *args):
    """`make(*args)`, with every warning it gives reported at the line outside
    dalipipe that called it (the user's line), whatever the depth it came from."""
    caught = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            return make(*args)
    finally:
        level = _caller_stacklevel()
        for warning in caught:
            warnings.warn(warning.message, warning.category, stacklevel=level)


def _caller_stacklevel():
    """The `stacklevel` that names, for a `warnings.warn` in this function's caller,
    the first frame outside the dalipipe package."""
    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    return level
