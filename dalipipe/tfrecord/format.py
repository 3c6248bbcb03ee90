"""The TFRecord format of `tf.train.Example` images: feature names, the framing of a
record and its checksums, and the protobuf message class of `tf.train.Example`.

A TFRecord file is a sequence of records, each:

    uint64 length            little-endian
    uint32 masked CRC-32C    of the 8 length bytes
    bytes  data[length]      a serialized tf.train.Example
    uint32 masked CRC-32C    of the data

The message classes are built here from a description of TensorFlow's
`tf.train.Example`, in a descriptor pool of their own, so that TensorFlow's classes
load beside them. protobuf and google-crc32c are imported at their first use.
"""

import functools
import struct

ENCODED = "image/encoded"
LABEL = "image/class/label"
TEXT = "image/class/text"
FILENAME = "image/filename"

HEADER = 12  # uint64 length, uint32 masked CRC of the length
FOOTER = 4  # uint32 masked CRC of the data
_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")


def masked_crc32c(data):
    """The CRC-32C (Castagnoli) of `data` (bytes), masked the way TFRecord files store it."""
    return _masked(crc32c()(data))


def record_checksum(record):
    """The CRC-32C (unmasked, an int below 2**32) of a whole record's bytes: its
    header, data and data checksum. `scan` keeps it of each record it verified, so
    that `load_encoded` tells with one C call over the bytes it reads that they are
    that record, unchanged."""
    return crc32c()(record)


def _masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


@functools.cache
def crc32c():
    """google-crc32c's `value` (its C implementation where installed), imported at
    the first use, not once per record: `crc32c()(data)` is the CRC-32C of `data`
    (bytes; not a memoryview)."""
    import google_crc32c

    return google_crc32c.value


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


def data_length(header):
    """The data length a 12-byte record header gives, or None if it is not one."""
    if len(header) < HEADER:
        return None
    length, crc = _HEADER.unpack_from(header)
    if masked_crc32c(header[:8]) != crc:
        return None
    return length


def record_data(record, path, offset, size):
    """The data of a whole record read from a file, after checking its size, header
    and data checksum.

    Raises:
        ValueError: naming `path` and `offset` when the record is cut short, or its
            header or data checksum is corrupt.
    """
    if len(record) != size:
        raise ValueError(
            f"Truncated TFRecord file: read {len(record)} of {size} bytes of the record "
            f"at byte {offset} of {path!r}"
        )
    value = crc32c()
    length, crc = _HEADER.unpack_from(record) if size >= HEADER else (0, None)
    if crc is None or HEADER + length + FOOTER != size or _masked(value(record[:8])) != crc:
        raise ValueError(
            f"Corrupt TFRecord file (bad record header at byte {offset}): {path!r}"
        )
    data = record[HEADER: HEADER + length]
    if _masked(value(data)) != _FOOTER.unpack_from(record, HEADER + length)[0]:
        raise ValueError(
            f"Corrupt TFRecord file (data checksum of the record at byte {offset}): {path!r}"
        )
    return data


def framed(data):
    """One TFRecord record of `data` (bytes): the little-endian uint64 length and its
    masked CRC-32C, the data and its masked CRC-32C."""
    length = struct.pack("<Q", len(data))
    return b"".join((length, struct.pack("<I", masked_crc32c(length)), data,
                     struct.pack("<I", masked_crc32c(data))))
