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
    """`make(*args)`, with every warning that dalipipe gives in it reported at the
    line outside dalipipe that called it (the user's line), whatever the depth it
    came from.

    Only dalipipe's own warnings move: the others (TensorFlow's, DALI's) go through
    the filters as they are given and are shown where they were given.
    """
    caught = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            # Every dalipipe warning is held; the filters decide again at the user's line.
            warnings.filterwarnings("always", module=r"dalipipe(\.|$)")
            return make(*args)
    finally:
        level = _caller_stacklevel()
        for warning in caught:
            if _in_package(warning.filename):
                warnings.warn(warning.message, warning.category, stacklevel=level)
            else:  # passed the filters already
                warnings.showwarning(warning.message, warning.category, warning.filename,
                                     warning.lineno, warning.file, warning.line)


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _in_package(filename):
    return os.path.abspath(filename).startswith(_PACKAGE_DIR)


def _caller_stacklevel():
    """The `stacklevel` that names, for a `warnings.warn` in this function's caller,
    the first frame outside the dalipipe package."""
    frame, level = sys._getframe(1), 1
    while frame is not None and _in_package(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    return level
