"""Sources in object storage, for `dalipipe.sources`: what it needs to index them into
the `sources.Index` the same local source gives.

- A prefix in the class-folder layout (`"s3://bucket/photos/"`): one listing
  (`prefix_tree`), which `sources._index_directory` walks as it walks a local folder,
  so the labels, `class_names`, order, warnings and errors are those of the same
  folder on local disk; the file paths are the objects' URIs.
- A CSV file in object storage: read as text (`open_text`); its relative paths
  resolve against its own folder (`folder_of`) unless `root=` is given.
- Table and list rows that hold URIs, and relative rows under `root="s3://..."`
  (`resolve`): the URIs are found by a listing of their common folder (or HEAD
  requests for a few), `storage.find_objects`.
- A flat prefix of images or of masks, for masks and boxes (`flat_images`).
- TFRecord files in object storage are refused, saying why (`tfrecord_error`);
  `gs://` objects are read by dalipipe, not DALI (`read_in_python`).

DALI reads `s3://` URIs itself (`fn.io.file.read`); nothing here reads an image. Pure
Python: it imports neither `sources` (which imports it) nor DALI.
"""

import io
import os
import posixpath

from dalipipe import dali_import, storage
from dalipipe.storage.uris import COLLAPSED
from dalipipe.tfrecord.files import GLOB_CHARS
from dalipipe.tfrecord.format import HEADER, data_length
from dalipipe.utils import IMAGE_EXTENSIONS, UNDECODABLE_EXTENSIONS, listing



def _remote(path):
    return isinstance(path, (str, bytes, os.PathLike)) and storage.is_remote(path)


def is_remote_source(source):
    """Whether `source` is one URI (`s3://...`, `gs://...`): a prefix or a CSV file."""
    return isinstance(source, (str, os.PathLike)) and storage.is_remote(source)


def is_prefix(source):
    """Whether `source` is a URI that names a folder (neither a CSV file nor a pattern):
    the class-folder layout, whose labels are inferred as a local folder's."""
    if not is_remote_source(source):
        return False
    uri = os.fspath(source)
    return not uri.lower().endswith(".csv") and not any(c in uri for c in GLOB_CHARS)


def open_text(uri):
    """The object `uri` as a text file of UTF-8 (a byte-order mark skipped), for `csv`."""
    return io.TextIOWrapper(storage.open_object(uri), encoding="utf-8-sig", newline="")


def prefix_tree(source):
    """The listing of a URI `source` that names a folder, as a `RemoteTree`; None for
    any other source (a local one, a CSV file's URI, a list). A list whose first
    object that is not named as an image is a TFRecord file is refused here, before
    its labels are looked at, as local TFRecord files are told apart first.

    Raises:
        ValueError: for an empty or missing prefix or bucket (naming the URI), for
            TFRecord files (a pattern, or an object that is one), and for a URI of an
            object that is neither a folder nor a CSV file.
        PermissionError, ConnectionError, ImportError: see `dalipipe.storage`.
    """
    if isinstance(source, (list, tuple)) and is_remote_list(source, None):
        uris = [os.fsdecode(os.fspath(p)) for p in source if _remote(p)]
        refuse_if_dali_cannot_read_s3(uris)
        _refuse_tfrecords(uris, dict.fromkeys(uris, True))
    if not is_remote_source(source):
        return None
    uri = os.fsdecode(os.fspath(source))
    refuse_if_dali_cannot_read_s3([uri])
    if any(c in uri for c in GLOB_CHARS):
        raise tfrecord_error(uri)
    if uri.lower().endswith((".csv",) + IMAGE_EXTENSIONS):
        return None  # a table, or one image: not a folder
    try:
        return RemoteTree(uri, storage.list_objects(uri))
    except ValueError as e:
        _refuse_object(uri, e)
        raise


def flat_images(uri):
    """The URIs of the image objects directly under the prefix `uri` (its "sub-folders"
    not walked, hidden names left out), sorted by name: what
    `dalipipe.annotations.files.flat_images` lists for a local folder. One listing.

    Raises:
        ValueError: for an empty or missing prefix or bucket, naming the URI.
        PermissionError, ConnectionError, ImportError: see `dalipipe.storage`.
    """
    tree = RemoteTree(uri, storage.list_objects(uri))
    return [tree.base + key for key in tree.keys
            if "/" not in key and not key.startswith(".") and key.lower().endswith(IMAGE_EXTENSIONS)]


def folder_of(path):
    """The folder of a CSV file, where its relative paths start: `storage.parent` of a
    URI, the absolute folder of a local path."""
    if is_remote_source(path):
        return storage.parent(os.fsdecode(os.fspath(path)))
    return os.path.dirname(os.path.abspath(path))


def _refuse_object(uri, listing_error):
    """For a URI with nothing under it that is itself an object: a TFRecord file's
    error, or that a source URI names a folder or a CSV file."""
    if uri.endswith("/") or "No objects found" not in str(listing_error):
        return
    head = _head(uri)
    if head is None:
        return
    if data_length(head) is not None:
        raise tfrecord_error(uri) from None
    raise ValueError(
        "`source` given as a URI must be a folder (a prefix of class folders) or a CSV "
        f"file (ending in .csv). Received: source='{uri}', an object"
    ) from None


def _head(uri):
    """The first bytes of the object `uri`, as many as a TFRecord record's header (one
    ranged GET); None when there is no such object, or it is empty."""
    try:
        return storage.read_object(uri, 0, HEADER)
    except (FileNotFoundError, ValueError):
        return None


def read_in_python(paths):
    """Whether dalipipe reads the images' bytes itself and feeds them to the graph (any
    `gs://` path), instead of DALI's `fn.io.file.read`: DALI 2.4's reader asks GCS
    for each object's name with a NUL byte appended (`.../1.jpg%00`, seen in the
    requests a local GCS emulator received; S3 reads are not affected), so every
    object would be "not found"."""
    return any(isinstance(p, str) and p.startswith("gs://") for p in paths)


def refuse_if_dali_cannot_read_s3(uris):
    """RuntimeError where `uris` hold an `s3://` one and DALI's S3 client would abort
    this process (TensorFlow imported before DALI: see `dalipipe.dali_import`)."""
    if not any(u.startswith("s3://") for u in uris):
        return
    problem = dali_import.s3_error()
    if problem is not None:
        raise RuntimeError(f"dalipipe cannot read s3:// sources in this process: {problem}")


def tfrecord_error(uri):
    """The error for TFRecord files in object storage."""
    return ValueError(
        f"TFRecord files in object storage are not supported (source: {uri!r}): dalipipe "
        "reads each record in Python, which for an object is one ranged GET per record "
        "(6-9 ms each against a local S3 server, so a few hundred records per second per "
        "process), and DALI's own TFRecord reader cannot take dalipipe's per-epoch order. "
        "Copy the TFRecord files to local disk, or keep the images as objects: a prefix "
        "of class folders, or a CSV file of their URIs."
    )


class RemoteTree:
    """What a listed prefix holds, as `folders.LocalTree` answers for a local folder.

    Args:
        uri: the prefix (`"s3://bucket/photos"` or `".../photos/"`).
        objects: `storage.list_objects(uri)`: keys relative to it, in a local walk's
            order.
    """

    def __init__(self, uri, objects):
        self.base = uri if uri.endswith("/") else uri + "/"
        self.keys = [o.key for o in objects]

    def subdirs(self):
        return sorted({k.split("/", 1)[0] for k in self.keys
                       if "/" in k and not k.startswith(".")})

    def images(self, subdir):
        prefix = "" if subdir is None else subdir + "/"
        images, others = [], []
        for key in self.keys:
            if not key.startswith(prefix):
                continue
            name = posixpath.basename(key).lower()
            if name.endswith(IMAGE_EXTENSIONS):
                images.append(self.base + key)
            elif name.endswith(UNDECODABLE_EXTENSIONS):
                others.append(self.base + key)
        return images, others

    def loose_images(self):
        return [self.base + k for k in self.keys
                if "/" not in k and k.lower().endswith(IMAGE_EXTENSIONS + UNDECODABLE_EXTENSIONS)]


def is_remote_list(paths, root):
    """Whether a table's or list's `paths` (with `root`) name objects: `root` is a URI,
    or some path is. False when some path is not a string (`sources` says so)."""
    if not all(isinstance(p, (str, bytes, os.PathLike)) for p in paths):
        return False
    # Only strings that may be URIs are parsed: a million local paths cost ~0.3 s.
    return _remote(root) or any(
        _remote(p) for p in paths if not isinstance(p, str) or "://" in p or p[:4] in COLLAPSED)


def resolve(paths, root, what, allow_missing):
    """The URIs and paths of a table's or list's `paths`, for which `is_remote_list`:
    URIs are kept, relative paths joined to `root` (a URI or a local folder, else the
    working directory), local paths resolved as `sources` resolves them.

    Returns:
        The list of URIs and absolute paths, aligned with `paths`.

    Raises:
        ValueError: for paths that do not exist (unless `allow_missing`), and for
            TFRecord files.
        PermissionError, ConnectionError, ImportError: see `dalipipe.storage`.
    """
    file_paths = [resolve_path(path, root) for path in paths]
    uris = [p for p in file_paths if storage.is_remote(p)]
    refuse_if_dali_cannot_read_s3(uris)
    found = dict(zip(uris, storage.find_objects(uris)))
    _refuse_tfrecords(uris, found)
    missing = [p for p in file_paths if (found[p] is None if p in found else not os.path.isfile(p))]
    if missing and not allow_missing:
        raise ValueError(f"{len(missing)} file(s) named in {what} do not exist: {listing(missing)}")
    return file_paths


def resolve_path(path, root=None):
    """One path of a table or list: a URI as it is; a relative path joined to `root`
    (a URI or a local folder, else the working directory); a local path absolute and
    normalized, `~` expanded."""
    path = os.fsdecode(os.fspath(path))
    if storage.is_remote(path):
        return path
    if _remote(root):
        return storage.join(os.fsdecode(os.fspath(root)), path)
    base = os.path.abspath(os.getcwd() if root is None else root)
    return os.path.normpath(os.path.join(base, os.path.expanduser(path)))


def _refuse_tfrecords(uris, found):
    """A TFRecord error when the first URI that is not named as an image is a TFRecord
    file (one ranged GET of its first record's header)."""
    images = IMAGE_EXTENSIONS + UNDECODABLE_EXTENSIONS
    other = next((u for u in uris if found[u] is not None and not u.lower().endswith(images)), None)
    head = None if other is None else _head(other)
    if head is not None and data_length(head) is not None:
        raise tfrecord_error(other)
