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
    """Gives warning `message` of `category` at the user's line that led to it: the
    first frame outside dalipipe and outside Keras and TensorFlow (a callback's
    warning is raised inside `fit`: it names the line that called `fit`), or, where
    no such frame exists (Keras calling dalipipe on a thread of its own), the first
    frame outside dalipipe. The warning filters match that frame's module. Every
    warning of dalipipe goes through here.

    Python 3.12's `skip_file_prefixes` skips the frames; before 3.12 the `stacklevel`
    that does the same is counted by walking the stack.
    """
    skipped = _PACKAGE_PREFIXES
    if _has_frame_outside(_PACKAGE_PREFIXES + _framework_prefixes()):
        skipped = _PACKAGE_PREFIXES + _framework_prefixes()
    if sys.version_info >= (3, 12):
        warnings.warn(message, category, skip_file_prefixes=skipped)
        return
    # stacklevel=2 names warn's caller, sys._getframe(1); each frame skipped, one more.
    frame, level = sys._getframe(1), 2
    while frame is not None and _starts_with(frame.f_code.co_filename, skipped):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
# The package's folder as its frames name their files: absolute, and as imported.
_PACKAGE_PREFIXES = tuple(sorted({_PACKAGE_DIR, os.path.dirname(__file__) + os.sep}))


def _framework_prefixes():
    """The folders of Keras and TensorFlow where they are imported (frames between
    the user's line and dalipipe's callbacks and datasets)."""
    prefixes = []
    for name in ("keras", "tensorflow"):
        module = sys.modules.get(name)
        for folder in getattr(module, "__path__", None) or ():
            prefixes.append(os.path.abspath(folder) + os.sep)
    return tuple(prefixes)


def _has_frame_outside(prefixes):
    """Whether a frame of the calling stack is outside every folder in `prefixes`."""
    frame = sys._getframe(2)
    while frame is not None and _starts_with(frame.f_code.co_filename, prefixes):
        frame = frame.f_back
    return frame is not None


def _starts_with(filename, prefixes):
    return filename.startswith(prefixes) or os.path.abspath(filename).startswith(prefixes)
