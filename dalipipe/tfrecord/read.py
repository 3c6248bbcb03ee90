"""Reading records: the serialized `tf.train.Example` at a place in a TFRecord file,
its features, and the encoded images of many records at once (`load_encoded`, the
path every training sample takes).

Each record is read by `ranges.read.read_ranges` (`os.pread`). `read_example` verifies
both of its checksums, and `parse_example` parses it with protobuf into the message
class of `format.example_class`. `load_encoded` slices each image out where `scan`
found it, once one CRC-32C over the record's bytes shows them to be the record
`scan` verified and parsed; it verifies and parses any other record.
"""

import os

import numpy as np

from dalipipe.ranges.read import read_ranges
from dalipipe.tfrecord.format import ENCODED, crc32c, example_class, record_data

REF_COLUMNS = 6  # of `Records.refs` (`scan`), which `load_encoded` reads


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
    (record,) = read_ranges([os.fspath(path)], [(0, offset, size)])
    return record_data(record, path, offset, size)


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
    features = parse(bytes(payload)).features.feature
    return {name: _values(feature) for name, feature in features.items()}


def parse(data):
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


def feature_values(features, name):
    """The values of the feature `name` of a `Features` map, or None without it."""
    feature = features.get(name)
    return None if feature is None else _values(feature)


def encoded_value(features):
    """The `image/encoded` bytes of a `Features` map, or None where the feature is
    missing or holds no `bytes_list` value (the first value where it holds several)."""
    feature = features.get(ENCODED)
    value = () if feature is None else feature.bytes_list.value  # empty for another kind
    return value[0] if value else None


def load_encoded(shards, refs):
    """The encoded images of records.

    Reads the records with the reader of every source of byte ranges
    (`ranges.read.read_ranges`): safe to call from several threads and from forked
    processes, which share no file position. A record whose bytes have the
    checksum `scan` found (one CRC-32C over the whole record, which covers its
    header, data and data checksum) is the record `scan` verified and parsed: its
    image is sliced out where `scan` found it, without parsing. Any other record
    (or refs without those columns) is verified and parsed as `read_example` and
    `parse_example` do.

    Args:
        shards: paths of TFRecord files.
        refs: int64 array of shape `(n, 6)`, as `scan` gives them (`Records.refs`):
            shard number (into `shards`), offset and size of each record, the first
            and past-the-last byte of its image within the record, and the record's
            checksum; or of shape `(n, 3)`, the first three only.

    Returns:
        list of `n` bytes objects: the `image/encoded` value of each record.

    Raises:
        ValueError: naming the shard and offset of a record that is cut short, has a
            corrupt header or data checksum, is not a `tf.train.Example` or has no
            `image/encoded` bytes.
    """
    refs = np.asarray(refs, np.int64)
    refs = refs.reshape(-1, 3) if refs.ndim != 2 else refs
    if refs.shape[1] < REF_COLUMNS:  # no places: every record parsed
        refs = np.column_stack([refs[:, :3], np.full((len(refs), 3), -1, np.int64)])
    checksum = crc32c()
    images = []
    for (shard, offset, size, start, end, crc), record in zip(refs.tolist(),
                                                               read_ranges(shards, refs)):
        if start >= 0 and len(record) == size and checksum(record) == crc:
            images.append(record[start:end])
        else:
            images.append(_parsed_image(record, shards[shard], offset, size))
    return images


def _parsed_image(record, path, offset, size):
    """The image of a record read whole, its checksums verified and parsed."""
    from google.protobuf.message import DecodeError

    try:
        features = example_class().FromString(record_data(record, path, offset, size)) \
            .features.feature
    except DecodeError as e:
        raise ValueError(f"Not a serialized tf.train.Example ({e}): the record at byte "
                         f"{offset} of {path!r}") from None
    value = encoded_value(features)
    if value is None:
        raise ValueError(
            f"The record at byte {offset} of {path!r} has no {ENCODED!r} bytes "
            f"(features: {sorted(features)})"
        )
    return value
