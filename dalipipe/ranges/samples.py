"""Each sample's encoded image, from either kind of byte-range source: a tar shard's
member (`ranges.tar`) or a TFRecord file's `tf.train.Example` (`dalipipe.tfrecord`)."""

from dalipipe.ranges import tar


def load_encoded(shards, refs):
    """The encoded image of each sample of a source of byte ranges.

    Tar shards (names ending in `.tar`: `ranges.tar`) hold the image's bytes as a
    member; TFRecord files hold a `tf.train.Example` (`tfrecord.read.load_encoded`).

    Args:
        shards: paths or URIs of the shards, all of one kind.
        refs: int64 `(n, k)`: shard number, offset and size of each sample's range
            (`k = 3`), and for TFRecord files the columns of `tfrecord.Records` (`k = 6`).

    Returns:
        list of `n` bytes objects.

    Raises:
        ValueError: naming the shard and the member or record that is cut short or
            is not an image record.
    """
    if not shards or not tar.is_tar_path(shards[0]):
        from dalipipe.tfrecord.read import load_encoded as load_records

        return load_records(shards, refs)
    return tar.members_bytes(shards, refs)
