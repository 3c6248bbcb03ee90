"""Reading records: the serialized `tf.train.Example` at a place in a TFRecord file,
its features, and the encoded images of many records at once (`load_encoded`, the
path every training sample takes).

Each record is read by `ranges.read.read_ranges` (`os.pread`), both of its checksums verified, and parsed with
protobuf into the message class of `format.example_class`.
"""

import os

import numpy as np

from dalipipe.ranges.read import read_ranges
from dalipipe.tfrecord.format import ENCODED, example_class, record_data


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


def load_encoded(shards, refs):
    """The encoded images of records.

    Reads the records with the reader of every source of byte ranges
    (`ranges.read.read_ranges`): safe to call from several threads and from forked
    processes, which share no file position.

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
    from google.protobuf.message import DecodeError

    from_string = example_class().FromString
    images = []
    refs = np.asarray(refs, np.int64).reshape(-1, 3)
    for (shard, offset, size), record in zip(refs.tolist(), read_ranges(shards, refs)):
        path = shards[shard]
        try:
            features = from_string(record_data(record, path, offset, size)).features.feature
        except DecodeError as e:
            raise ValueError(f"Not a serialized tf.train.Example ({e}): the record at byte "
                             f"{offset} of {path!r}") from None
        feature = features.get(ENCODED)
        # Empty where the feature is missing or holds no `bytes_list` (its `kind`).
        value = () if feature is None else feature.bytes_list.value
        if not value:
            raise ValueError(
                f"The record at byte {offset} of {path!r} has no {ENCODED!r} bytes "
                f"(features: {sorted(features)})"
            )
        images.append(value[0])
    return images
