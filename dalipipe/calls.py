"""What both public functions do with a call: the first argument's two names
(`first_argument`), and dalipipe's warnings given at the user's line (`warn`).

dalipipe warns from deep inside (the index, the check, the device choice), at
depths that differ between the public functions and their adapters; `warn` names
the first frame outside the package, the line that called dalipipe, so that no
`warnings.warn` in dalipipe counts its own `stacklevel`.
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


def warn(message, category=UserWarning):
    """Gives warning `message` of `category` at the first frame outside the dalipipe
    package: the user's line that called dalipipe, whose module the warning filters
    match. Every warning of dalipipe goes through here.

    Python 3.12's `skip_file_prefixes` skips the package's frames; before 3.12 the
    `stacklevel` that does the same is counted by walking the stack.
    """
    if sys.version_info >= (3, 12):
        warnings.warn(message, category, skip_file_prefixes=_PACKAGE_PREFIXES)
        return
    # stacklevel=2 names warn's caller, sys._getframe(1); each frame in the package, one more.
    frame, level = sys._getframe(1), 2
    while frame is not None and _in_package(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
# The package's folder as its frames name their files: absolute, and as imported.
_PACKAGE_PREFIXES = tuple(sorted({_PACKAGE_DIR, os.path.dirname(__file__) + os.sep}))


def _in_package(filename):
    return os.path.abspath(filename).startswith(_PACKAGE_DIR)
