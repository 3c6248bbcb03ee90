"""TFRecord files: writing, indexes (checked against DALI's own reader), scanning and
reading records without TensorFlow."""

import hashlib
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from PIL import Image

from dalipipe import checks, tfrecord
from dalipipe.tfrecord.format import crc32c
from dalipipe.utils import child_env

CLASS_NAMES = ["cat", "dog", "émeu"]  # a non-ASCII class text
NUM_FILES = 10


def jpeg_bytes(i, quality=90):
    """A small JPEG whose pixels depend on `i` (sizes vary)."""
    y, x = np.mgrid[0: 20 + 3 * (i % 4), 0: 24 + 2 * (i % 5)]
    rgb = np.stack([(x * 9 + 17 * i) % 256, (y * 11) % 256, (x + y + 40 * i) % 256], -1)
    buffer = io.BytesIO()
    Image.fromarray(rgb.astype(np.uint8)).save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    """Each test its own cache folder: indexes and scan results start empty."""
    monkeypatch.setenv("DALIPIPE_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """`NUM_FILES` JPEGs with labels `i % 3`: (paths, labels, bytes)."""
    root = tmp_path_factory.mktemp("images")
    paths, data = [], []
    for i in range(NUM_FILES):
        paths.append(str(root / f"img_{i:02d}.jpg"))
        data.append(jpeg_bytes(i))
        with open(paths[-1], "wb") as f:
            f.write(data[-1])
    return paths, [i % 3 for i in range(NUM_FILES)], data


@pytest.fixture(scope="module")
def written(images, tmp_path_factory):
    """The images written into 3 labeled shards (read-only for the tests: copy to change)."""
    paths, labels, _ = images
    out = tmp_path_factory.mktemp("shards")
    return tfrecord.write_tfrecords(paths, labels, CLASS_NAMES, str(out), num_shards=3)


def copy_shards(shards, folder):
    os.makedirs(folder, exist_ok=True)
    return [shutil.copy2(s, os.path.join(folder, os.path.basename(s))) for s in shards]


def test_round_trip_gives_the_files_bytes_labels_and_texts(images, written):
    paths, labels, data = images
    out = os.path.dirname(written[0])
    assert [os.path.basename(p) for p in written] == [
        f"train-{i:05d}-of-00003.tfrecord" for i in range(3)
    ]
    assert sorted(os.listdir(out)) == sorted(
        [os.path.basename(p) for p in written] + [os.path.basename(p) + ".idx" for p in written]
    )
    # The pattern matches the index files too: they are left out.
    shards = tfrecord.tfrecord_files(os.path.join(out, "train-*"))
    assert shards == written
    records = tfrecord.scan(shards)
    assert len(records) == NUM_FILES and records.shards == written
    # Contiguous runs of 4, 3 and 3 files, in the order given.
    np.testing.assert_array_equal(records.refs[:, 0], [0] * 4 + [1] * 3 + [2] * 3)
    assert records.refs.dtype == np.int64 and records.refs.shape == (NUM_FILES, 6)
    assert tfrecord.load_encoded(records.shards, records.refs) == data
    # Where each image lies in its record, and the record's checksum: the reader
    # slices there. Without those columns it parses each record, to the same bytes.
    for (shard, offset, size, start, end, crc), image in zip(records.refs.tolist(), data):
        with open(written[shard], "rb") as f:
            f.seek(offset)
            record = f.read(size)
        assert record[start:end] == image and crc == crc32c()(record)
    assert tfrecord.load_encoded(records.shards, records.refs[:, :3]) == data
    np.testing.assert_array_equal(records.labels, labels)
    assert records.labels.dtype == np.int64
    assert records.texts == [CLASS_NAMES[label] for label in labels]
    # Any subset, in any order.
    order = [7, 0, 9, 3, 3]
    assert tfrecord.load_encoded(records.shards, records.refs[order]) == [data[i] for i in order]
    # Every feature of one record.
    shard, offset, size = records.refs[5, :3]
    features = tfrecord.parse_example(tfrecord.read_example(written[shard], offset, size))
    assert features == {
        "image/encoded": [data[5]], "image/filename": [b"img_05.jpg"],
        "image/class/label": [labels[5]], "image/class/text": [CLASS_NAMES[2].encode()],
    }


def test_unlabeled_shards_and_mixed_shards(images, tmp_path):
    paths, labels, data = images
    unlabeled = tfrecord.write_tfrecords(paths[:4], None, None, str(tmp_path), prefix="unlabeled")
    records = tfrecord.scan(unlabeled)
    assert records.labels is None and records.texts is None
    assert tfrecord.load_encoded(records.shards, records.refs) == data[:4]
    labeled = tfrecord.write_tfrecords(paths[4:6], labels[4:6], None, str(tmp_path))
    both = tfrecord.scan(labeled)
    np.testing.assert_array_equal(both.labels, labels[4:6])
    assert both.texts is None  # no class names given: no texts
    with pytest.raises(ValueError,
                       match=r"record 0 of '.*unlabeled-00000-of-00001\.tfrecord' has none"):
        tfrecord.scan(labeled + unlabeled)


def test_index_is_the_one_dali_reads(written):
    import nvidia.dali.tfrecord as tfrec
    from nvidia.dali import fn, pipeline_def

    for shard in written:
        index = shard + ".idx"
        refs = tfrecord.read_index(index)
        with open(index) as f:  # DALI's tfrecord2idx format
            assert f.read() == "".join(f"{o} {s}\n" for o, s in refs)
        assert refs[0, 0] == 0 and refs[-1].sum() == os.path.getsize(shard)

        @pipeline_def(batch_size=len(refs), num_threads=1, device_id=None)
        def pipe():
            out = fn.readers.tfrecord(
                path=shard, index_path=index, random_shuffle=False, name="reader",
                features={tfrecord.ENCODED: tfrec.FixedLenFeature((), tfrec.string, ""),
                          tfrecord.LABEL: tfrec.FixedLenFeature([1], tfrec.int64, -1)},
            )
            return out[tfrecord.ENCODED], out[tfrecord.LABEL]

        p = pipe()
        p.build()
        assert p.reader_meta("reader")["epoch_size"] == len(refs)
        encoded, labels = p.run()
        ours = np.column_stack([np.zeros(len(refs), np.int64), refs])
        assert [np.array(encoded[i]).tobytes() for i in range(len(refs))] == \
            tfrecord.load_encoded([shard], ours)
        np.testing.assert_array_equal(np.array(labels.as_tensor()).ravel(),
                                      tfrecord.scan([shard]).labels)


def test_parse_example_agrees_with_tensorflow():
    import tensorflow as tf

    feature = tf.train.Feature
    example = tf.train.Example(features=tf.train.Features(feature={
        "bytes": feature(bytes_list=tf.train.BytesList(value=[b"", b"\x00\xff", "é".encode()])),
        "ints": feature(int64_list=tf.train.Int64List(
            value=[0, 1, -1, 127, 128, 300, -300, 2**63 - 1, -2**63])),
        "floats": feature(float_list=tf.train.FloatList(
            value=[0.0, -1.5, 3.25, 1e-30, 0.1, float("inf"), -3e38])),
        "no_ints": feature(int64_list=tf.train.Int64List(value=[])),
        "no_kind": feature(),
        "clé/ünïcode": feature(int64_list=tf.train.Int64List(value=[-7])),
        "big": feature(bytes_list=tf.train.BytesList(value=[bytes(range(256)) * 300])),
    }))
    assert tfrecord.parse_example(example.SerializeToString()) == as_lists(example)


def test_parse_example_reads_unpacked_lists_as_tensorflow_does():
    """TensorFlow writes packed lists; other writers may not, and parsers accept both."""
    import tensorflow as tf

    def key(field, wire):
        return varint(field << 3 | wire)

    def message(field, payload):
        return key(field, 2) + varint(len(payload)) + payload

    ints = b"".join(key(1, 0) + varint(v & (2**64 - 1)) for v in (5, -1, -2**63, 2**40))
    floats = b"".join(key(1, 5) + struct.pack("<f", v) for v in (0.5, -2.0))
    entries = (
        message(1, message(1, b"ints") + message(2, message(3, ints)))
        + message(1, message(1, b"floats") + message(2, message(2, floats)))
        # A repeated key: the later entry wins, as in protocol buffers.
        + message(1, message(1, b"ints2") + message(2, message(3, ints)))
        + message(1, message(1, b"ints2") + message(2, message(1, message(1, b"x"))))
    )
    payload = message(1, entries)
    ours = tfrecord.parse_example(payload)
    assert ours == as_lists(tf.train.Example.FromString(payload))
    assert ours["ints"] == [5, -1, -2**63, 2**40] and ours["ints2"] == [b"x"]
    for broken in (payload[:-3], payload + b"\x0a\x05ab", b"\x0b"):
        with pytest.raises(ValueError, match="Not a serialized tf.train.Example"):
            tfrecord.parse_example(broken)


def test_example_messages_are_tensorflows_own_in_a_pool_of_their_own():
    """Same names, field numbers, types and options as TensorFlow's example.proto and
    feature.proto, so the same wire format and text; other classes, so both load."""
    import tensorflow as tf
    from google.protobuf import descriptor_pb2, descriptor_pool

    ours = tfrecord.example_class()
    assert ours is not tf.train.Example
    assert descriptor_pool.Default().FindMessageTypeByName("tensorflow.Example") is \
        tf.train.Example.DESCRIPTOR
    for name in ("BytesList", "FloatList", "Int64List", "Feature", "Features", "Example"):
        protos = []
        for pool in (ours.DESCRIPTOR.file.pool, descriptor_pool.Default()):
            protos.append(descriptor_pb2.DescriptorProto())
            pool.FindMessageTypeByName(f"tensorflow.{name}").CopyToProto(protos[-1])
        assert protos[0] == protos[1], name
    example = tf.train.Example(features=tf.train.Features(feature={
        "x": tf.train.Feature(float_list=tf.train.FloatList(value=[1.5, -2.0])),
    }))
    assert str(ours.FromString(example.SerializeToString())) == str(example)


def varint(value):
    out = bytearray()
    while True:
        out.append(value & 0x7F | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            return bytes(out)


def as_lists(example):
    """{name: list of values} of a tf.train.Example, the way parse_example gives it."""
    result = {}
    for name, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        result[name] = list(getattr(feature, kind).value) if kind else []
    return result


def test_is_tfrecord(written, tmp_path):
    jpeg = tmp_path / "a.jpg"
    jpeg.write_bytes(jpeg_bytes(0))
    empty = tmp_path / "empty.tfrecord"
    empty.write_bytes(b"")
    header_only = tmp_path / "cut.tfrecord"  # the first record runs past the end
    with open(written[0], "rb") as f:
        header_only.write_bytes(f.read(40))
    os.mkfifo(tmp_path / "fifo.tfrecord")  # not opened: it would block
    assert tfrecord.is_tfrecord(written[0])
    for path in (jpeg, empty, header_only, tmp_path / "fifo.tfrecord", tmp_path,
                 tmp_path / "missing.tfrecord"):
        assert not tfrecord.is_tfrecord(str(path)), path


def test_tfrecord_files_resolves_or_names_the_offender(written, images, tmp_path):
    paths = images[0]
    assert tfrecord.tfrecord_files(written[1]) == [written[1]]
    assert tfrecord.tfrecord_files(tuple(written)) == written
    # Not TFRecord sources: for the caller to index as images.
    assert tfrecord.tfrecord_files(os.path.dirname(paths[0])) is None
    assert tfrecord.tfrecord_files(paths) is None
    assert tfrecord.tfrecord_files(str(tmp_path / "labels.csv")) is None
    csv = tmp_path / "labels.csv"
    csv.write_text("path,label\na.jpg,cat\n")
    assert tfrecord.tfrecord_files(str(csv)) is None
    with pytest.raises(ValueError, match=r"No file matches the pattern: source='.*nothing-\*'"):
        tfrecord.tfrecord_files(str(tmp_path / "nothing-*"))
    folder = os.path.dirname(written[0])
    mixed = copy_shards(written[:1], str(tmp_path / "mixed"))
    (tmp_path / "mixed" / "train-notes.txt").write_text("not a record")
    with pytest.raises(ValueError, match=r"Not a TFRecord file .*train-notes\.txt"):
        tfrecord.tfrecord_files(str(tmp_path / "mixed" / "train-*"))
    with pytest.raises(ValueError, match=r"Not a TFRecord file .*'" + str(csv)):
        tfrecord.tfrecord_files(mixed + [str(csv)])
    assert tfrecord.tfrecord_files(os.path.join(folder, "train-0000[12]-*.tfrecord")) == written[1:]


def test_missing_index_is_made_in_the_cache_and_stale_ones_remade(written, tmp_path):
    (shard,) = copy_shards(written[:1], str(tmp_path / "shards"))
    folder_before = sorted(os.listdir(os.path.dirname(shard)))
    (index,) = tfrecord.ensure_indexes([shard])
    # Made in the cache folder: nothing is written beside the user's file.
    assert index.startswith(os.path.join(os.environ["DALIPIPE_CACHE_DIR"], "tfrecord-index"))
    assert sorted(os.listdir(os.path.dirname(shard))) == folder_before
    refs = tfrecord.read_index(index)
    assert len(refs) == 4
    # Another record appended (the first one again): the index ends too early.
    with open(shard, "rb") as f:
        first = f.read(int(refs[0, 1]))
    with open(shard, "ab") as f:
        f.write(first)
    assert tfrecord.ensure_indexes([shard]) == [index]
    refs = tfrecord.read_index(index)
    assert len(refs) == 5 and refs[-1].sum() == os.path.getsize(shard)
    assert len(tfrecord.scan([shard])) == 5
    # A shard newer than its index (even one ahead of this machine's clock).
    later = os.stat(index).st_mtime_ns + 10**9
    os.utime(shard, ns=(later, later))
    tfrecord.ensure_indexes([shard])
    assert os.stat(index).st_mtime_ns >= later
    # An index that does not parse.
    with open(index, "w") as f:
        f.write("0 12\nnonsense\n")
    tfrecord.ensure_indexes([shard])
    np.testing.assert_array_equal(tfrecord.read_index(index), refs)
    # An index shipped beside the shard is used when it is up to date, and a stale
    # one there is left as it is (the cache's is used).
    beside = shard + ".idx"
    with open(beside, "w") as f:
        f.write("0 12\n")
    assert tfrecord.ensure_indexes([shard]) == [index]
    assert open(beside).read() == "0 12\n"
    os.replace(index, beside)
    assert tfrecord.ensure_indexes([shard]) == [beside]
    np.testing.assert_array_equal(tfrecord.read_index(beside), refs)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_index_of_a_shard_in_a_read_only_folder_goes_to_the_cache(written, tmp_path):
    folder = tmp_path / "read_only"
    (shard,) = copy_shards(written[:1], str(folder))
    folder.chmod(0o555)
    try:
        (index,) = tfrecord.ensure_indexes([shard])
        assert index == tfrecord.index_path_for(shard)
        assert index.startswith(os.path.join(os.environ["DALIPIPE_CACHE_DIR"], "tfrecord-index"))
        assert not os.path.exists(shard + ".idx")
        assert len(tfrecord.scan([shard])) == 4
    finally:
        folder.chmod(0o755)


def test_second_scan_reads_no_record(written, tmp_path):
    shards = copy_shards(written, str(tmp_path / "shards"))
    first = tfrecord.scan(shards)
    cache = os.path.join(os.environ["DALIPIPE_CACHE_DIR"], "tfrecord-scan")
    assert len(os.listdir(cache)) == 3
    # Wipe a shard's records but keep its size and modification time: a scan that
    # read a record would fail on it.
    info = os.stat(shards[1])
    with open(shards[1], "r+b") as f:
        f.write(bytes(info.st_size))
    os.utime(shards[1], ns=(info.st_atime_ns, info.st_mtime_ns))
    second = tfrecord.scan(shards)
    assert second.shards == first.shards and second.texts == first.texts
    np.testing.assert_array_equal(second.refs, first.refs)
    np.testing.assert_array_equal(second.labels, first.labels)
    # A new modification time: the shard is read again, and found corrupt.
    os.utime(shards[1], ns=(info.st_atime_ns, info.st_mtime_ns + 10**9))
    with pytest.raises(ValueError,
                       match=r"Corrupt TFRecord file \(bad record header at byte 0\): .*00001-of"):
        tfrecord.scan(shards)


def test_damaged_records_are_named(written, images, tmp_path):
    import tensorflow as tf

    (shard,) = copy_shards(written[:1], str(tmp_path / "shards"))
    (index,) = tfrecord.ensure_indexes([shard])
    refs = tfrecord.read_index(index)
    offset, size = (int(v) for v in refs[1])
    with pytest.raises(ValueError, match=rf"bad record header at byte {offset + 1}\): '{shard}'"):
        tfrecord.read_example(shard, offset + 1, size)
    with pytest.raises(ValueError, match=rf"read 100 of {size} bytes of the record at byte "
                                         rf"{os.path.getsize(shard) - 100} of '{shard}'"):
        tfrecord.read_example(shard, os.path.getsize(shard) - 100, size)
    with pytest.raises(ValueError, match=rf"bad record header at byte {offset}\): '{shard}'"):
        tfrecord.load_encoded([shard], [[0, offset, size + 1]])
    # A record without an image.
    other = str(tmp_path / "labels-only.tfrecord")
    with tf.io.TFRecordWriter(other) as writer:
        writer.write(tf.train.Example(features=tf.train.Features(feature={
            tfrecord.LABEL: tf.train.Feature(int64_list=tf.train.Int64List(value=[3]))
        })).SerializeToString())
    records = tfrecord.scan([other])
    assert records.labels.tolist() == [3]
    with pytest.raises(ValueError, match=rf"record at byte 0 of '{other}' has no 'image/encoded'"):
        tfrecord.load_encoded(records.shards, records.refs)
    # A truncated shard: indexing names the record that runs past the end.
    cut = str(tmp_path / "cut.tfrecord")
    with open(shard, "rb") as f, open(cut, "wb") as g:
        g.write(f.read(offset + 20))
    with pytest.raises(ValueError, match=rf"record at byte {offset} runs past the end\): '{cut}'"):
        tfrecord.ensure_indexes([cut])


def test_records_are_checked_like_files(images, tmp_path):
    paths, _, data = images
    truncated = tmp_path / "truncated.jpg"
    truncated.write_bytes(data[0][:-50])
    shards = tfrecord.write_tfrecords([paths[1], str(truncated)], None, None, str(tmp_path))
    records = tfrecord.scan(shards)
    good, bad = tfrecord.load_encoded(records.shards, records.refs)
    assert checks.check_bytes(good) is None and checks.check_bytes(good, full=True) is None
    assert checks.check_bytes(bad) == checks.check_file(str(truncated)) == \
        "truncated JPEG (no end-of-image marker)"
    assert checks.check_bytes(b"") == "empty (0 bytes)"


def test_write_argument_errors(images, tmp_path):
    paths, labels, _ = images
    out = str(tmp_path / "out")
    for num_shards in (0, NUM_FILES + 1, True, 2.0):
        with pytest.raises(ValueError, match=rf"`num_shards` must be a positive integer no larger "
                                             rf"than the number of files \({NUM_FILES}\)\. "
                                             rf"Received: num_shards={num_shards!r}"):
            tfrecord.write_tfrecords(paths, labels, None, out, num_shards=num_shards)
    with pytest.raises(ValueError, match=r"`labels` must index into `class_names`, so lie in "
                                         r"\[0, 2\)\. Received: labels from 0 to 2 and "
                                         r"class_names=\['a', 'b'\]"):
        tfrecord.write_tfrecords(paths, labels, ["a", "b"], out)
    with pytest.raises(ValueError,
                       match=r"one integer per file .* \(10\)\. Received: labels of shape \(3,\)"):
        tfrecord.write_tfrecords(paths, [0, 1, 2], None, out)
    with pytest.raises(ValueError, match=r"Received: labels=None and class_names=\['a'\]"):
        tfrecord.write_tfrecords(paths, None, ["a"], out)
    with pytest.raises(ValueError, match=r"Received: prefix='a/b'"):
        tfrecord.write_tfrecords(paths, None, None, out, prefix="a/b")
    assert not os.path.exists(out)


def test_checksums_are_the_ones_tensorflow_writes(written):
    assert tfrecord.masked_crc32c(b"") == 0xA282EAD8  # the mask of CRC 0
    with open(written[0], "rb") as f:
        data = f.read()
    offset = 0
    while offset < len(data):
        (length,) = struct.unpack_from("<Q", data, offset)
        header_crc, = struct.unpack_from("<I", data, offset + 8)
        data_crc, = struct.unpack_from("<I", data, offset + 12 + length)
        assert tfrecord.masked_crc32c(data[offset: offset + 8]) == header_crc
        assert tfrecord.masked_crc32c(data[offset + 12: offset + 12 + length]) == data_crc
        offset += 12 + length + 4
    assert offset == len(data)


def test_damaged_image_bytes_are_named_by_the_reader_and_the_check(written, tmp_path):
    """A byte of an image flipped (header intact): its data checksum names the record."""
    from dalipipe import sources

    shards = copy_shards(written, str(tmp_path / "shards"))
    records = tfrecord.scan(shards)
    # Record 1 of the 2nd shard; a byte of its image, where the reader slices it.
    shard, offset, size, start, end, _ = records.refs[5].tolist()
    path = shards[shard]
    info = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(offset + (start + end) // 2)
        byte = f.read(1)
        f.seek(offset + (start + end) // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    # Rot that leaves the size and modification time: the cached scan still holds.
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
    message = rf"Corrupt TFRecord file \(data checksum of the record at byte {offset}\): '{path}'"
    with pytest.raises(ValueError, match=message):
        tfrecord.load_encoded(records.shards, records.refs)
    with pytest.raises(ValueError, match=message):
        tfrecord.read_example(path, offset, size)
    index = sources.index_source(str(tmp_path / "shards" / "train-*"))
    bad = checks.bad_files(checks.check_index(index, read_records=tfrecord.load_encoded))
    reason = f"Corrupt TFRecord file (data checksum of the record at byte {offset}): {path!r}"
    assert bad == {f"{path}#1": f"not an image record ({reason})"}
    # A new modification time: the shard is scanned again, and the record named.
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns + 10**9))
    with pytest.raises(ValueError, match=message):
        tfrecord.scan(shards)


def test_a_record_rewritten_since_the_scan_is_parsed_again(written, images, tmp_path):
    """A record rewritten whole with another image of the same size (its checksums
    right, the file's size and modification time kept): its new image, where it now
    lies, not the bytes at the place the scan found."""
    _, _, data = images
    shards = copy_shards(written, str(tmp_path / "shards"))
    records = tfrecord.scan(shards)
    shard, offset, size, start, end, _ = records.refs[0].tolist()
    payload = tfrecord.read_example(shards[shard], offset, size)
    # Another image, elsewhere in the data: the text one byte longer, the filename
    # one byte shorter, the features in another order.
    features = tfrecord.parse_example(payload)
    image = bytes(reversed(data[0]))
    moved = tfrecord.example_class()()
    feature = moved.features.feature
    feature[tfrecord.LABEL].int64_list.value.append(features[tfrecord.LABEL][0])
    feature[tfrecord.TEXT].bytes_list.value.append(features[tfrecord.TEXT][0] + b"!")
    feature[tfrecord.ENCODED].bytes_list.value.append(image)
    feature[tfrecord.FILENAME].bytes_list.value.append(features[tfrecord.FILENAME][0][:-1])
    record = tfrecord.format.framed(moved.SerializeToString(deterministic=True))
    assert len(record) == size and record.find(image) not in (-1, start)
    info = os.stat(shards[shard])
    with open(shards[shard], "r+b") as f:
        f.seek(offset)
        f.write(record)
    os.utime(shards[shard], ns=(info.st_atime_ns, info.st_mtime_ns))
    assert tfrecord.scan(shards).refs.tolist() == records.refs.tolist()  # the cached scan
    assert tfrecord.load_encoded(records.shards, records.refs[:2]) == [image, data[1]]


def test_an_image_whose_start_is_found_earlier_in_its_record(images, tmp_path):
    """A feature before the image holds the image's first 64 bytes: the image's
    place is the one where all of it lies."""
    _, _, data = images
    image = data[0] * 2
    example = tfrecord.example_class()()
    feature = example.features.feature
    feature["a"].bytes_list.value.append(image[:64] + image[:100])  # sorted first
    feature[tfrecord.ENCODED].bytes_list.value.append(image)
    path = str(tmp_path / "repeated.tfrecord")
    with open(path, "wb") as f:
        f.write(tfrecord.format.framed(example.SerializeToString(deterministic=True)))
    records = tfrecord.scan([path])
    _, offset, size, start, end, _ = records.refs[0].tolist()
    with open(path, "rb") as f:
        record = f.read()
    assert record.find(image[:64]) < start and record[start:end] == image
    assert tfrecord.load_encoded(records.shards, records.refs) == [image]


def test_tensorflow_reads_the_records_written_without_it(written, images):
    """`write_tfrecords` frames and serializes without TensorFlow; TensorFlow's own
    reader checks both checksums and parses every feature back."""
    tf = pytest.importorskip("tensorflow")
    paths, labels, data = images
    spec = {tfrecord.ENCODED: tf.io.FixedLenFeature([], tf.string),
            tfrecord.FILENAME: tf.io.FixedLenFeature([], tf.string),
            tfrecord.LABEL: tf.io.FixedLenFeature([], tf.int64),
            tfrecord.TEXT: tf.io.FixedLenFeature([], tf.string)}
    options = tf.data.Options()
    options.deterministic = True
    records = tf.data.TFRecordDataset(written).with_options(options)
    read = [tf.io.parse_single_example(r, spec) for r in records]
    assert [r[tfrecord.ENCODED].numpy() for r in read] == data
    assert [r[tfrecord.FILENAME].numpy().decode() for r in read] == \
        [os.path.basename(p) for p in paths]
    assert [int(r[tfrecord.LABEL]) for r in read] == labels
    assert [r[tfrecord.TEXT].numpy().decode() for r in read] == [CLASS_NAMES[i] for i in labels]


def test_records_are_read_where_tensorflow_cannot_be_imported(written, images):
    """The records are written here, then read in a process where
    `import tensorflow` fails."""
    code = textwrap.dedent("""
        import hashlib, json, sys
        sys.modules["tensorflow"] = None  # makes `import tensorflow` raise ImportError
        from google.protobuf import descriptor_pool
        from dalipipe import tfrecord

        records = tfrecord.scan(sys.argv[1:])
        encoded = tfrecord.load_encoded(records.shards, records.refs)
        shard, offset, size = records.refs[0, :3].tolist()
        payload = tfrecord.read_example(records.shards[shard], offset, size)
        features = tfrecord.parse_example(payload)
        try:
            descriptor_pool.Default().FindMessageTypeByName("tensorflow.Example")
            default_pool = "has tensorflow.Example"
        except KeyError:
            default_pool = "clean"
        print(json.dumps({
            "labels": records.labels.tolist(), "texts": records.texts,
            "sha1": [hashlib.sha1(e).hexdigest() for e in encoded],
            "features": sorted(features), "default_pool": default_pool,
            "tensorflow": sorted(m for m in sys.modules if m.split(".")[0] == "tensorflow"
                                 and sys.modules[m] is not None),
        }))
    """)
    env = child_env()
    done = subprocess.run([sys.executable, "-c", code, *written], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    paths, labels, data = images
    assert found == {
        "labels": labels, "texts": [CLASS_NAMES[label] for label in labels],
        "sha1": [hashlib.sha1(d).hexdigest() for d in data],
        "features": sorted([tfrecord.ENCODED, tfrecord.FILENAME, tfrecord.LABEL, tfrecord.TEXT]),
        "default_pool": "clean", "tensorflow": [],
    }


def test_bad_records_are_found_before_training_and_can_be_skipped(tmp_path):
    """A truncated JPEG inside a TFRecord file: named before training, or left out."""
    from dalipipe import make_dali_pipeline

    folder = tmp_path / "images"
    folder.mkdir()
    paths = []
    for i in range(6):
        path = folder / f"{i}.jpg"
        Image.new("RGB", (16, 12), (40 * i, 0, 0)).save(path)
        paths.append(str(path))
    data = open(paths[4], "rb").read()
    open(paths[4], "wb").write(data[: len(data) // 2])
    tfrecord.write_tfrecords(paths, np.array([0, 1] * 3), ["a", "b"], str(tmp_path / "out"),
                             num_shards=2)
    pattern = str(tmp_path / "out" / "train-*")
    with pytest.raises(ValueError, match=r"(?s)1 of 6 files cannot be loaded.*"
                                         r"train-00001-of-00002.tfrecord#1: .*truncated JPEG"):
        make_dali_pipeline(pattern, image_size=(8, 8), device="cpu")
    with pytest.warns(UserWarning, match="Left out 1 of 6"):
        pipe = make_dali_pipeline(pattern, image_size=(8, 8), device="cpu", on_bad_file="skip",
                                  shuffle=False, normalization=None)
    images, labels = (np.concatenate(x) for x in zip(*pipe.epoch()))
    assert labels.tolist() == [0, 1, 0, 1, 1]
    assert [round(float(i[..., 0].mean()) / 40) for i in images] == [0, 1, 2, 3, 5]


def test_a_tfrecord_file_changed_after_the_check_is_named(tagged_tfrecords, tmp_path):
    from dalipipe import make_dali_pipeline

    folder = tmp_path / "copy"
    shutil.copytree(os.path.dirname(tagged_tfrecords), folder)
    pipe = make_dali_pipeline(str(folder / "train-*.tfrecord"), image_size=(4, 4),
                              device="cpu", shuffle=False)
    victim = pipe.index.tfrecord_files[2]
    with open(victim, "ab") as f:
        f.write(b"\0" * 16)
    with pytest.raises(RuntimeError, match=f"{victim} changed after the check before "
                                           "training: its records may have moved"):
        list(pipe.epoch())


def test_class_names_fix_the_mapping_of_class_texts(tagged_tfrecords):
    from dalipipe import sources

    index = sources.index_source(tagged_tfrecords, class_names=["red", "green", "blue", "grey"])
    plain = sources.index_source(tagged_tfrecords)
    assert index.class_names == ["red", "green", "blue", "grey"]
    assert [index.class_names[i] for i in index.labels] == [plain.class_names[i] for i in plain.labels]
    with pytest.raises(ValueError, match=r"must name every 'image/class/text'.*Not in it: red"):
        sources.index_source(tagged_tfrecords, class_names=["blue", "green"])
