"""TFRecord files of `tf.train.Example` images (the ImageNet layout), read without
TensorFlow.

dalipipe reads each record by its place in the file, so that records are shuffled
over all shards each epoch and sharded exactly like image files. The places come
from index files in the format of DALI's `tfrecord2idx` (one `offset size` line per
record), made when missing or out of date. Records are read with `os.pread`, their
checksums verified with `google-crc32c`, and parsed with `protobuf` into message
classes built here from a description of TensorFlow's `tf.train.Example` (in a
descriptor pool of their own, so that TensorFlow's classes load beside them).
Writing (`write_tfrecords`) uses the same classes: no TensorFlow is needed. protobuf
and google-crc32c are imported at their first use.

A TFRecord file is a sequence of records, each:

    uint64 length            little-endian
    uint32 masked CRC-32C    of the 8 length bytes
    bytes  data[length]      a serialized tf.train.Example
    uint32 masked CRC-32C    of the data

Every record read (`read_example`, `load_encoded`, `scan`) has both checksums
verified. Making an index reads the record headers only, and verifies their length
checksums.

Where files go:
- an index is written next to its shard as `<shard>.idx` when that folder is
  writable, else to `$DALIPIPE_CACHE_DIR/tfrecord-index/<sha1 of the shard's
  absolute path>.idx` (default cache folder `~/.cache/dalipipe`);
- the labels and class texts found by `scan` are cached, one JSON file per shard, in
  `$DALIPIPE_CACHE_DIR/tfrecord-scan/<sha1 of the shard's absolute path>.json`, valid
  while the shard's size and modification time are those recorded there.
"""

import collections
import contextlib
import functools
import glob
import hashlib
import json
import os
import stat
import struct
from typing import NamedTuple, Optional

import numpy as np

from dalipipe.utils import IMAGE_EXTENSIONS, UNDECODABLE_EXTENSIONS, cache_dir, progress

__all__ = [
    "ENCODED", "LABEL", "TEXT", "Records", "ensure_indexes", "index_path_for", "is_tfrecord",
    "load_encoded", "parse_example", "read_example", "read_index", "scan", "tfrecord_files",
    "write_index", "write_tfrecords",
]

ENCODED = "image/encoded"
LABEL = "image/class/label"
TEXT = "image/class/text"
FILENAME = "image/filename"

_HEADER = 12  # uint64 length, uint32 masked CRC of the length
_FOOTER = 4  # uint32 masked CRC of the data
_SCAN_VERSION = 1  # bump when what `scan` caches changes
_GLOB_CHARS = ("*", "?", "[")


# --- Checksums and messages ------------------------------------------------------------


def masked_crc32c(data):
    """The CRC-32C (Castagnoli) of `data` (bytes), masked the way TFRecord files store it."""
    import google_crc32c

    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _example_file():
    """A `FileDescriptorProto` of the messages of a `tf.train.Example`, as TensorFlow's
    `tensorflow/core/example/feature.proto` and `example.proto` define them (package
    `tensorflow`, the same names and field numbers):

        message BytesList { repeated bytes value = 1; }
        message FloatList { repeated float value = 1 [packed = true]; }
        message Int64List { repeated int64 value = 1 [packed = true, jstype = JS_STRING]; }
        message Feature {
          oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
                       Int64List int64_list = 3; }
        }
        message Features { map<string, Feature> feature = 1; }
        message Example { Features features = 1; }
    """
    from google.protobuf import descriptor_pb2

    field = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(
        name="dalipipe/tensorflow_example.proto", package="tensorflow", syntax="proto3"
    )
    messages = file.message_type
    for name, kind in (("BytesList", field.TYPE_BYTES), ("FloatList", field.TYPE_FLOAT),
                       ("Int64List", field.TYPE_INT64)):
        value = messages.add(name=name).field.add(
            name="value", number=1, type=kind, label=field.LABEL_REPEATED
        )
        if kind != field.TYPE_BYTES:
            value.options.packed = True
        if kind == field.TYPE_INT64:
            value.options.jstype = value.options.JS_STRING  # for JavaScript only
    feature = messages.add(name="Feature")
    feature.oneof_decl.add(name="kind")
    for name, number, list_type in (("bytes_list", 1, "BytesList"), ("float_list", 2, "FloatList"),
                                    ("int64_list", 3, "Int64List")):
        feature.field.add(name=name, number=number, type=field.TYPE_MESSAGE,
                          label=field.LABEL_OPTIONAL, type_name=f".tensorflow.{list_type}",
                          oneof_index=0)
    features = messages.add(name="Features")
    entry = features.nested_type.add(name="FeatureEntry")  # what a map field is made of
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=field.TYPE_MESSAGE, label=field.LABEL_OPTIONAL,
                    type_name=".tensorflow.Feature")
    features.field.add(name="feature", number=1, type=field.TYPE_MESSAGE,
                       label=field.LABEL_REPEATED, type_name=".tensorflow.Features.FeatureEntry")
    messages.add(name="Example").field.add(
        name="features", number=1, type=field.TYPE_MESSAGE, label=field.LABEL_OPTIONAL,
        type_name=".tensorflow.Features",
    )
    return file


@functools.cache
def example_class():
    """The protobuf message class of `tf.train.Example` (see `_example_file`), made
    at the first call, in a pool of its own: TensorFlow adds its `tensorflow.Example`
    to the default pool. protobuf is imported here, so `import dalipipe` needs it not."""
    from google.protobuf import descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    pool.Add(_example_file())
    descriptor = pool.FindMessageTypeByName("tensorflow.Example")
    if hasattr(message_factory, "GetMessageClass"):  # protobuf 4.22 and later
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(pool).GetPrototype(descriptor)


def _data_length(header):
    """The data length a 12-byte record header gives, or None if it is not one."""
    if len(header) < _HEADER:
        return None
    length, crc = struct.unpack_from("<QI", header)
    if masked_crc32c(header[:8]) != crc:
        return None
    return length


# --- Which sources are TFRecord files ---------------------------------------------------


def is_tfrecord(path):
    """Whether `path` is a regular file that starts with a valid TFRecord header.

    Reads the first 12 bytes: the length of the first record and its checksum, and
    checks that this record fits in the file. Never raises: a missing, unreadable,
    empty or special file (a FIFO, a directory) is not a TFRecord file.
    """
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode) or info.st_size < _HEADER + _FOOTER:
            return False
        with open(path, "rb") as f:
            length = _data_length(f.read(_HEADER))
    except (OSError, ValueError, TypeError):
        return False
    return length is not None and _HEADER + length + _FOOTER <= info.st_size


def tfrecord_files(source):
    """The TFRecord files of `source`, or None if `source` is not a TFRecord source.

    Args:
        source: a glob pattern (a string with `*`, `?` or `[`), such as
            `"data/train-*-of-01024"`; the path of one TFRecord file; or a list of
            paths of TFRecord files. Index files that a pattern matches beside their
            shards (`train-00000-of-01024.idx`) are left out.

    Returns:
        The absolute paths of the files (sorted for a pattern, in the given order for
        a list), or None when `source` is something
        else (a directory, a CSV file, a DataFrame, a list of image paths, a path
        that does not exist), for the caller to treat as another kind of source.

    Raises:
        ValueError: for a pattern that matches no file, or matches a file that is not
            a TFRecord file, and for a list that mixes TFRecord and other files; the
            message names the pattern or the file.
    """
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if any(c in path for c in _GLOB_CHARS) and not os.path.exists(path):
            return _glob_tfrecords(path)
        return [os.path.abspath(path)] if is_tfrecord(path) else None
    if not isinstance(source, (list, tuple)) or not source:
        return None
    if not all(isinstance(p, (str, os.PathLike)) for p in source):
        return None
    paths = [os.fsdecode(os.fspath(p)) for p in source]
    # Images are told by name, not opened: a list of a million images stays cheap.
    images = IMAGE_EXTENSIONS + UNDECODABLE_EXTENSIONS
    found = [not p.lower().endswith(images) and is_tfrecord(p) for p in paths]
    if not any(found):
        return None
    if not all(found):
        other = paths[found.index(False)]
        raise ValueError(
            f"A list of TFRecord files must hold TFRecord files only. Not a TFRecord file "
            f"(no valid TFRecord header): {other!r}. Received: source with "
            f"{sum(found)} TFRecord file(s) of {len(paths)} paths"
        )
    files = [os.path.abspath(p) for p in paths]
    repeated = sorted(f for f, count in collections.Counter(files).items() if count > 1)
    if repeated:
        raise ValueError(
            f"A list of TFRecord files must name each file once. Repeated: {repeated}"
        )
    return files


def _glob_tfrecords(pattern):
    matches = sorted(glob.glob(os.path.expanduser(pattern)))
    matched = set(matches)
    # An index written beside its shard matches a pattern such as "train-*" too.
    matches = [m for m in matches if not (m.endswith(".idx") and m[:-4] in matched)]
    if not matches:
        raise ValueError(
            f"`source` must be a directory, a CSV file, a DataFrame, a list of file "
            f"paths, or a pattern that matches TFRecord files. No file matches the "
            f"pattern: source={pattern!r}"
        )
    for match in matches:
        if not is_tfrecord(match):
            raise ValueError(
                f"A pattern given as `source` must match TFRecord files only. "
                f"Not a TFRecord file (no valid TFRecord header): {match!r}. "
                f"Received: source={pattern!r}"
            )
    return [os.path.abspath(m) for m in matches]


# --- Index files ----------------------------------------------------------------------


def index_path_for(tfrecord_path):
    """Where the index of `tfrecord_path` belongs.

    Returns:
        `<tfrecord_path>.idx` when the shard's folder is writable, else
        `<cache dir>/tfrecord-index/<sha1 of the absolute path>.idx`, the cache dir
        being `$DALIPIPE_CACHE_DIR`, default `~/.cache/dalipipe`.
    """
    folder = os.path.dirname(os.path.abspath(tfrecord_path))
    if os.access(folder, os.W_OK):
        return os.fspath(tfrecord_path) + ".idx"
    return _cached_index_path(tfrecord_path)


def _cached_index_path(tfrecord_path):
    return os.path.join(cache_dir(), "tfrecord-index", _path_key(tfrecord_path) + ".idx")


def _path_key(path):
    return hashlib.sha1(os.fsencode(os.path.abspath(path))).hexdigest()


def write_index(tfrecord_path, index_path):
    """Writes the index of a TFRecord file in the format of DALI's `tfrecord2idx`.

    One text line `offset size` per record: the record's first byte and its whole
    size, `8 + 4 + length + 4`. The file is written under a temporary name and
    renamed, so that readers never see half an index.

    Raises:
        ValueError: naming the file and the offset of a record whose header is
            corrupt or that runs past the end of the file.
    """
    shard_mtime_ns = os.stat(tfrecord_path).st_mtime_ns
    _write_index(index_path, _index_bytes(_walk_records(tfrecord_path)), shard_mtime_ns)


def _index_bytes(refs):
    return "".join(f"{offset} {size}\n" for offset, size in refs).encode("ascii")


def _walk_records(tfrecord_path):
    """(offset, size) of every record, from the headers alone."""
    refs = []
    with open(tfrecord_path, "rb") as f:
        file_size = os.fstat(f.fileno()).st_size
        offset = 0
        while offset < file_size:
            f.seek(offset)
            length = _data_length(f.read(_HEADER))
            if length is None:
                raise ValueError(
                    f"Corrupt TFRecord file (bad record header at byte {offset}): "
                    f"{tfrecord_path!r}"
                )
            size = _HEADER + length + _FOOTER
            if offset + size > file_size:
                raise ValueError(
                    f"Truncated TFRecord file (the record at byte {offset} runs past the "
                    f"end): {tfrecord_path!r}"
                )
            refs.append((offset, size))
            offset += size
    return refs


def _write_index(index_path, data, shard_mtime_ns):
    """Writes an index no older than its shard was when the shard was read, so that a
    shard whose time is ahead of this machine's clock (on a network file system)
    does not look newer than its index forever."""
    _write_atomically(index_path, data)
    info = os.stat(index_path)
    if info.st_mtime_ns < shard_mtime_ns:
        os.utime(index_path, ns=(info.st_atime_ns, shard_mtime_ns))


def _write_atomically(path, data):
    with _replacing(path) as temporary, open(temporary, "wb") as f:
        f.write(data)


@contextlib.contextmanager
def _replacing(path):
    """Yields a temporary path that replaces `path` once the block succeeds (and is
    removed if it fails), so that readers never see a half-written file."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        yield temporary
        os.replace(temporary, path)
    except BaseException:
        try:
            os.remove(temporary)
        except OSError:
            pass
        raise


def read_index(index_path):
    """Reads an index file written by `write_index` or DALI's `tfrecord2idx`.

    Returns:
        int64 array of shape `(num_records, 2)`: each record's offset and size.

    Raises:
        ValueError: naming the file when it is not such an index.
    """
    with open(index_path, "rb") as f:
        words = f.read().split()
    try:
        refs = np.array(words, dtype=np.int64)
    except ValueError:
        refs = None
    if refs is None or len(words) % 2:
        raise ValueError(f"Not a TFRecord index file (lines of 'offset size'): {index_path!r}")
    return refs.reshape(-1, 2)


def ensure_indexes(paths, verbose=False):
    """Makes sure every TFRecord file has an up-to-date index; returns their paths.

    An up-to-date index is used beside the shard as `<shard>.idx` (also in a
    read-only folder shipped with its indexes) or in the cache folder. Else one is
    made where `index_path_for` says, or in the cache folder if writing there fails.
    An index is out of date when it is older than its shard, unreadable, or its
    records do not follow one another from byte 0 to the shard's end.

    Args:
        paths: paths of TFRecord files.
        verbose: draw a progress bar over the files on stderr.

    Returns:
        The path of each file's index, in the order of `paths`.
    """
    return [index for index, _ in _ensure_indexes(paths, verbose)]


def _ensure_indexes(paths, verbose):
    """(index path, offsets and sizes) for each shard."""
    paths = [os.fspath(p) for p in paths]
    result = []
    with progress(len(paths), "TFRecord files indexed", enabled=verbose) as bar:
        for path in paths:
            result.append(_ensure_index(path))
            bar.update(1)
    return result


def _ensure_index(path):
    """(index path, offsets and sizes) of one shard, made if missing or stale."""
    info = os.stat(path)
    beside = path + ".idx"
    candidates = (beside, index_path_for(path), _cached_index_path(path))
    for candidate in dict.fromkeys(candidates):
        refs = _fresh_index(candidate, info)
        if refs is not None:
            return candidate, refs
    walked = _walk_records(path)
    refs = np.array(walked, np.int64).reshape(-1, 2)
    data = _index_bytes(walked)
    index = index_path_for(path)
    try:
        _write_index(index, data, info.st_mtime_ns)
    except OSError:  # a folder that says it is writable and is not
        index = _cached_index_path(path)
        _write_index(index, data, info.st_mtime_ns)
    return index, refs


def _fresh_index(index_path, shard_info):
    """The records of an index that is up to date with its shard, else None."""
    try:
        if os.stat(index_path).st_mtime_ns < shard_info.st_mtime_ns:
            return None
        refs = read_index(index_path)
    except (OSError, ValueError):
        return None
    if len(refs) == 0:
        return None
    ends = refs[:, 0] + refs[:, 1]
    if refs[0, 0] != 0 or ends[-1] != shard_info.st_size or np.any(refs[1:, 0] != ends[:-1]):
        return None
    return refs


# --- Records ---------------------------------------------------------------------------


def read_example(path, offset, size):
    """The serialized `tf.train.Example` of the record at `offset` of `path`.

    Args:
        path: a TFRecord file.
        offset: the record's first byte, as its index gives it.
        size: the record's whole size (header, data and data checksum).

    Returns:
        bytes: the record's data.

    Raises:
        ValueError: naming the file and offset when the record is cut short, or its
            header or data checksum is corrupt.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        record = os.pread(fd, size, offset)
    finally:
        os.close(fd)
    return _record_data(record, path, offset, size)


def _record_data(record, path, offset, size):
    """The data of a whole record read from a file, after checking its size, header
    and data checksum."""
    if len(record) != size:
        raise ValueError(
            f"Truncated TFRecord file: read {len(record)} of {size} bytes of the record "
            f"at byte {offset} of {path!r}"
        )
    length = _data_length(record)
    if length is None or _HEADER + length + _FOOTER != size:
        raise ValueError(
            f"Corrupt TFRecord file (bad record header at byte {offset}): {path!r}"
        )
    data = record[_HEADER: _HEADER + length]
    (crc,) = struct.unpack_from("<I", record, _HEADER + length)
    if masked_crc32c(data) != crc:
        raise ValueError(
            f"Corrupt TFRecord file (data checksum of the record at byte {offset}): {path!r}"
        )
    return data


def parse_example(payload):
    """Decodes a serialized `tf.train.Example`.

    Args:
        payload: bytes of a serialized `tf.train.Example`.

    Returns:
        dict: feature name -> list of values: `bytes` for a `bytes_list`, `int` for
        an `int64_list` and `float` for a `float_list` (packed or not); an empty
        list for a feature without a value list.

    Raises:
        ValueError: when `payload` is not a well-formed `tf.train.Example`.
    """
    features = _parse(bytes(payload)).features.feature
    return {name: _values(feature) for name, feature in features.items()}


def _parse(data):
    """The `tf.train.Example` message of `data` (bytes)."""
    try:
        return example_class().FromString(data)
    except _decode_error() as e:  # evaluated only when parsing fails
        raise ValueError(f"Not a serialized tf.train.Example ({e})") from e


def _decode_error():
    """protobuf's `DecodeError`, imported when a parse fails, not once per record."""
    from google.protobuf import message

    return message.DecodeError


def _values(feature):
    """The values of a `Feature` message, as a list: empty without a value list."""
    kind = feature.WhichOneof("kind")
    return list(getattr(feature, kind).value) if kind else []


def _feature_values(features, name):
    """The values of the feature `name` of a `Features` map, or None without it."""
    feature = features.get(name)
    return None if feature is None else _values(feature)


def load_encoded(shards, refs):
    """The encoded images of records.

    Opens each shard once per call and reads the records with `os.pread`: safe to
    call from several threads and from forked processes, which share no file
    position.

    Args:
        shards: paths of TFRecord files.
        refs: int64 array of shape `(n, 3)`: shard number (into `shards`), offset
            and size of each record, as `scan` gives them.

    Returns:
        list of `n` bytes objects: the `image/encoded` value of each record.

    Raises:
        ValueError: naming the shard and offset of a record that is cut short, has a
            corrupt header or data checksum, is not a `tf.train.Example` or has no
            `image/encoded` bytes.
    """
    fds = {}
    images = []
    try:
        for shard, offset, size in np.asarray(refs, np.int64).reshape(-1, 3).tolist():
            fd = fds.get(shard)
            if fd is None:
                fd = fds[shard] = os.open(shards[shard], os.O_RDONLY)
            path = shards[shard]
            data = _record_data(os.pread(fd, size, offset), path, offset, size)
            try:
                features = _parse(data).features.feature
            except ValueError as e:
                raise ValueError(f"{e}: the record at byte {offset} of {path!r}") from None
            value = _feature_values(features, ENCODED)
            if not value or not isinstance(value[0], bytes):
                raise ValueError(
                    f"The record at byte {offset} of {path!r} has no {ENCODED!r} bytes "
                    f"(features: {sorted(features)})"
                )
            images.append(value[0])
    finally:
        for fd in fds.values():
            os.close(fd)
    return images


# --- Scanning ---------------------------------------------------------------------------


class Records(NamedTuple):
    """The records of TFRecord files.

    Attributes:
        shards: list of the files' absolute paths.
        refs: int64 array of shape `(num_records, 3)`: shard number (into `shards`),
            offset and size of each record, shard by shard in file order.
        labels: int64 array of shape `(num_records,)` of the `image/class/label`
            values, or None when no record has that feature.
        texts: list of the `image/class/text` strings, or None when no record has
            that feature.
    """

    shards: list
    refs: np.ndarray
    labels: Optional[np.ndarray]
    texts: Optional[list]

    def __len__(self):
        return len(self.refs)


def scan(paths, verbose=False):
    """Indexes TFRecord files and reads the label and class text of every record.

    Every record is read once (its length and data checksums verified); what is
    found is cached per shard in `$DALIPIPE_CACHE_DIR/tfrecord-scan/` (default
    `~/.cache/dalipipe/tfrecord-scan/`), keyed on the shard's absolute path, size and
    modification time, so a second scan reads only the index files.

    Args:
        paths: paths of TFRecord files (see `tfrecord_files`).
        verbose: draw progress bars over the files on stderr.

    Returns:
        `Records`.

    Raises:
        ValueError: for a corrupt or truncated file, a record that is not a
            `tf.train.Example`, a label that is not a single integer, and when some
            records have a label (or text) and others do not; each names the file and
            record.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    shards = [os.path.abspath(os.fspath(p)) for p in paths]
    if not shards:
        raise ValueError("`paths` must name at least one TFRecord file. Received: paths=[]")
    indexed = _ensure_indexes(shards, verbose)
    refs, labels, texts = [], [], []
    with progress(len(shards), "TFRecord files scanned", enabled=verbose) as bar:
        for i, (path, (_, offsets)) in enumerate(zip(shards, indexed)):
            found = _scan_shard(path, offsets)
            refs.append(np.column_stack([np.full(len(offsets), i, np.int64), offsets]))
            labels.append(found["labels"])
            texts.append(found["texts"])
            bar.update(1)
    return Records(
        shards,
        np.concatenate(refs).astype(np.int64),
        _all_or_none(labels, shards, LABEL, lambda v: np.asarray(v, np.int64)),
        _all_or_none(texts, shards, TEXT, list),
    )


def _all_or_none(per_shard, shards, name, build):
    values = [v for shard in per_shard for v in shard]
    if all(v is None for v in values):
        return None
    for shard, shard_values in zip(shards, per_shard):
        if None in shard_values:
            record = shard_values.index(None)
            raise ValueError(
                f"Some records have the feature {name!r} and some do not: record {record} "
                f"of {shard!r} has none."
            )
    return build(values)


def _scan_shard(path, offsets):
    """{"labels": [...], "texts": [...]} of a shard's records, from the cache or read."""
    info = os.stat(path)
    cache_path = os.path.join(cache_dir(), "tfrecord-scan", _path_key(path) + ".json")
    signature = {"version": _SCAN_VERSION, "path": os.fsdecode(path), "size": info.st_size,
                 "mtime_ns": info.st_mtime_ns, "count": len(offsets)}
    try:
        with open(cache_path, encoding="utf-8") as f:
            cached = json.load(f)
        if {k: cached.get(k) for k in signature} == signature:
            return cached
    except (OSError, ValueError):
        pass
    found = {"labels": [], "texts": []}
    with open(path, "rb", buffering=1 << 20) as f:
        for record, (offset, size) in enumerate(offsets.tolist()):
            f.seek(offset)
            data = _record_data(f.read(size), path, offset, size)
            where = f"record {record} (at byte {offset}) of {path!r}"
            try:
                features = _parse(data).features.feature
            except ValueError as e:
                raise ValueError(f"{e}: {where}") from None
            label, text = _feature_values(features, LABEL), _feature_values(features, TEXT)
            if label is not None and (len(label) != 1 or not isinstance(label[0], int)):
                raise ValueError(f"{LABEL!r} must hold one integer. Found {label!r} in {where}")
            if text is not None and (len(text) != 1 or not isinstance(text[0], bytes)):
                raise ValueError(f"{TEXT!r} must hold one string. Found {text!r} in {where}")
            found["labels"].append(None if label is None else label[0])
            found["texts"].append(None if text is None else text[0].decode("utf-8", "replace"))
    try:
        _write_atomically(cache_path, json.dumps({**signature, **found}).encode("utf-8"))
    except OSError:
        pass  # no cache: the next scan reads the records again
    return found


# --- Writing ----------------------------------------------------------------------------


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
    per_shard, extra = divmod(len(file_paths), num_shards)
    bounds = [i * per_shard + min(i, extra) for i in range(num_shards + 1)]
    written = []
    with progress(len(file_paths), "records written", enabled=verbose) as bar:
        for shard in range(num_shards):
            path = os.path.join(out_dir, f"{prefix}-{shard:05d}-of-{num_shards:05d}.tfrecord")
            with _replacing(path) as temporary, open(temporary, "wb") as f:
                for i in range(bounds[shard], bounds[shard + 1]):
                    f.write(_record(_example(file_paths[i], labels, class_names, i)))
                    bar.update(1)
            write_index(path, index_path_for(path))
            written.append(path)
    return written


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


def _record(data):
    """One TFRecord record: the little-endian uint64 length and its masked CRC-32C,
    the data and its masked CRC-32C."""
    length = struct.pack("<Q", len(data))
    return b"".join((length, struct.pack("<I", masked_crc32c(length)), data,
                     struct.pack("<I", masked_crc32c(data))))


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
