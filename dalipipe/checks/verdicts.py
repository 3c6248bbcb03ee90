"""The check's result for one file or record: a `Verdict`, and what callers read of a
list of them (`bad_files`, `image_sizes`)."""

from typing import NamedTuple, Optional


class Verdict(NamedTuple):
    """What the check found of one file or TFRecord record.

    Attributes:
        path: the file's path or URI, or the record's name (`"<file>#<record
            number>"`).
        reason: None for a sound image, else what is wrong with it, in words
            (`"truncated JPEG (no end-of-image marker)"`, `"does not exist"`).
        size: `(width, height)` of the image as the decoder read its header (as
            PIL's `Image.size`), or None where it did not (a file it could not read,
            a header it rejects, an image decoded in a child interpreter, PIL).
        stamp: `(size in bytes, n)`, two ints that change when the file (a record's
            TFRecord file) is replaced, as it was when checked: `n` is the
            modification time in ns of a local file, a hash of an object's ETag
            (`dalipipe.storage.fetch`); None for a file that cannot be stat-ed.
    """

    path: str
    reason: Optional[str]
    size: Optional[tuple] = None
    stamp: Optional[tuple] = None


def bad_files(verdicts):
    """`{path: reason}` of the bad ones among `verdicts`, in their order."""
    return {v.path: v.reason for v in verdicts if v.reason is not None}


def image_sizes(verdicts):
    """The `(width, height)` of each sound image among `verdicts` whose header the
    decoder read, for the GPU decoder's preallocation hints."""
    return [v.size for v in verdicts if v.reason is None and v.size is not None]
