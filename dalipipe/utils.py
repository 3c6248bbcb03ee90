"""Small helpers shared by every module: the cache folder (where, whether it can be
written, the warning when not), progress, cores, extensions,
the environment of a child interpreter, stderr captured at the file descriptor, what
counts as an integer or a number in an argument, and the distinct rows of an array.

The lowest module of the package: it imports nothing else from dalipipe.
"""

import contextlib
import os
import sys
import tempfile

import numpy as np

from dalipipe.calls import warn

# What DALI's image decoders read, by extension. GIF is not among them.
IMAGE_EXTENSIONS = (
    ".bmp", ".jpeg", ".jpg", ".jp2", ".j2k", ".png", ".pbm", ".pgm", ".ppm", ".pnm",
    ".tif", ".tiff", ".webp",
)
# Image files that DALI does not decode: reported, never taken as samples.
UNDECODABLE_EXTENSIONS = (".gif", ".heic", ".avif")
# Seconds the check of the files runs before its progress bar draws.
CHECK_BAR_DELAY = 1.0
# How many items an error message lists.
MAX_LISTED = 10


def is_int(value):
    """Whether `value` is an integer (Python's or NumPy's), not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def is_number(value):
    """Whether `value` is a real number (Python's or NumPy's), not a bool."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def cache_dir():
    """The folder for dalipipe's caches and reports (it may not exist yet).

    `$DALIPIPE_CACHE_DIR` if set, else `$XDG_CACHE_HOME/dalipipe`, else
    `~/.cache/dalipipe`.
    """
    explicit = os.environ.get("DALIPIPE_CACHE_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "dalipipe")


def cache_disabled():
    """Whether `$DALIPIPE_NO_CACHE` turns the cache off (any value but "", "0")."""
    return os.environ.get("DALIPIPE_NO_CACHE", "") not in ("", "0")


def writable_cache_dir():
    """`cache_dir()`, made if missing, when dalipipe can write there; else None.

    None when `cache_disabled()`, or when the folder cannot be made or written (a
    read-only home, a path under a regular file): then a warning, once per process
    and folder, names the folder and `DALIPIPE_CACHE_DIR`, and the caller goes on
    without the cache. Writability is tried once per folder and process, by writing
    and removing a temporary file there.
    """
    if cache_disabled():
        return None
    folder = cache_dir()
    if folder not in _WRITABLE:
        try:
            os.makedirs(folder, exist_ok=True)
            with tempfile.TemporaryFile(dir=folder):
                pass
            _WRITABLE[folder] = True
        except OSError as e:
            _WRITABLE[folder] = False
            warn_without_cache(folder, e.strerror or str(e))
    return folder if _WRITABLE[folder] else None


_WRITABLE = {}  # cache folder -> whether it could be written, tried once per process
_WARNED = set()


def warn_without_cache(place, why):
    """Warns, once per process and `place`, that dalipipe goes on without its cache
    because `place` (a folder or file) cannot be written, for the reason `why`."""
    if place in _WARNED:
        return
    _WARNED.add(place)
    warn(
        f"dalipipe cannot write its cache at {place} ({why}), so it goes on without the "
        "cache: files are checked again on every run, bad-file reports go to stderr "
        "and TFRecord indexes are kept in memory. Set DALIPIPE_CACHE_DIR to a writable "
        "folder, or DALIPIPE_NO_CACHE=1 to turn the cache off.",
        RuntimeWarning,
    )


def child_env(**variables):
    """This process's environment for a child Python interpreter, plus `variables`.

    The folder that holds this `dalipipe` comes first on `PYTHONPATH`, so that the
    child imports the same `dalipipe` (a checkout, say, rather than an installed one).
    """
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, **variables}


def usable_cores():
    """The CPU cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def distinct_rows(keys):
    """`(first, inverse)` of the distinct rows of `keys` (`(n, k)`): the index of each
    one's first row, and each row's distinct one. Column by column, in 1-D sorts (a
    sort of whole rows is several times slower)."""
    codes, bound = np.zeros(len(keys), np.int64), 1
    for column in np.asarray(keys).T:
        values, found = np.unique(column, return_inverse=True)
        if bound * len(values) >= 2**62:  # renumber the codes before they overflow
            codes = np.unique(codes, return_inverse=True)[1].reshape(-1)
            bound = int(codes.max()) + 1
        codes, bound = codes * len(values) + found.reshape(-1), bound * len(values)
    _, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


def progress(total, description, *, enabled=None, delay=0.0):
    """A tqdm progress bar on stderr over `total` items, labelled `description`.

    Shown when `enabled`, or by default when stderr is a terminal, once the work has
    taken `delay` seconds (`CHECK_BAR_DELAY` for the check: a quick check draws
    nothing); otherwise, or where tqdm is not installed (a GPU machine with PyTorch
    only, say), a bar that draws nothing. Use as a context manager and call
    `update(n)`.
    """
    try:
        from tqdm import tqdm
    except ImportError:
        return _NoBar()
    if enabled is None:
        enabled = sys.stderr.isatty()
    return tqdm(total=total, desc=description, disable=not enabled, file=sys.stderr,
                dynamic_ncols=True, leave=True, delay=delay)


class _NoBar:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def update(self, n=1):
        pass


def listing(items):
    """The first `MAX_LISTED` items, comma-separated, with "..." when there are more."""
    items = [str(item) for item in items]
    return ", ".join(items[:MAX_LISTED]) + (", ..." if len(items) > MAX_LISTED else "")


class Captured:
    """What `captured_stderr` caught: `text` is a str, empty until its block ends."""

    text = ""


@contextlib.contextmanager
def captured_stderr():
    """Sends file descriptor 2 to a temporary file for the block.

    C and C++ libraries (nvImageCodec, libjpeg, TensorFlow's and CUDA's start-up)
    write straight to the descriptor, past `sys.stderr`. What the block wrote there
    is not shown; it is in the yielded `Captured`'s `text` once the block ends, also
    when the block raises. Where there is no file descriptor 2 to redirect, nothing
    is captured and `text` stays empty.

    Yields:
        A `Captured`.
    """
    captured = Captured()
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no stderr to redirect
        yield captured
        return
    try:
        with tempfile.TemporaryFile() as f:
            os.dup2(f.fileno(), 2)
            try:
                yield captured
            finally:
                os.dup2(saved, 2)
                f.seek(0)
                captured.text = f.read().decode("utf-8", "replace")
    finally:
        os.close(saved)
