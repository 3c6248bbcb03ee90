"""Object storage URIs: `s3://bucket/key` and `gs://bucket/key`. Pure Python."""

import os
import posixpath
import re

SCHEMES = ("s3", "gs")
# What pathlib makes of a URI: its "//" collapsed.
COLLAPSED = tuple(f"{scheme}:/" for scheme in SCHEMES)
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")  # RFC 3986's scheme


def is_remote(path):
    """Whether `path` is an object storage URI (`s3://...` or `gs://...`).

    Local paths (no `scheme://` at their start) are not. Other schemes raise.

    Raises:
        ValueError: for a URI of another scheme (`http://`, `hdfs://`, `S3://`), or
            one whose `//` a `pathlib.Path` collapsed (`s3:/bucket/key`).
    """
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str):
        return False
    if "://" not in path:
        if path.startswith(COLLAPSED):
            raise ValueError(
                f"{path!r} looks like an object storage URI whose '//' was collapsed (as "
                f"pathlib.Path does): pass URIs as strings, s3://bucket/key."
            )
        return False
    scheme = path.split("://", 1)[0]
    if scheme in SCHEMES:
        return True
    if not _SCHEME.fullmatch(scheme):
        return False  # "://" inside a local path ("/data/a://b.jpg"): not a URI
    raise ValueError(
        f"Paths must be local paths or URIs of the schemes {SCHEMES} (s3://bucket/key, "
        f"gs://bucket/key). Received: {path!r}"
    )


def split_uri(uri):
    """`(scheme, bucket, key)` of `"s3://bucket/key"`; the key may be `""`.

    Raises:
        ValueError: for a URI that is not `s3://` or `gs://`, or that names no bucket.
    """
    if not is_remote(uri):
        raise ValueError(
            f"Expected an object storage URI of the schemes {SCHEMES} (s3://bucket/key). "
            f"Received: {uri!r}"
        )
    scheme, rest = uri.split("://", 1)
    bucket, _, key = rest.partition("/")
    if not bucket:
        raise ValueError(f"An object storage URI must name a bucket: s3://bucket/key. Received: {uri!r}")
    return scheme, bucket, key


def join(root, relative):
    """The URI of `relative` (a key, with `/`) under the prefix `root`.

    `join("s3://bucket/photos", "cats/1.jpg")` is `"s3://bucket/photos/cats/1.jpg"`;
    `.` and `..` are resolved within the bucket. As with `os.path.join`, a `relative`
    that is absolute (a URI, or a local path starting with `/`) is returned as it is.

    Raises:
        ValueError: when `root` is not an `s3://` or `gs://` URI, or `relative`
            climbs out of the bucket.
    """
    relative = os.fsdecode(os.fspath(relative))
    if is_remote(relative) or relative.startswith("/"):
        return relative
    scheme, bucket, key = split_uri(os.fsdecode(os.fspath(root)))
    joined = posixpath.normpath(posixpath.join(key, relative))
    if joined == ".." or joined.startswith("../"):
        raise ValueError(
            f"A relative path must stay inside the bucket of `root`. Received: "
            f"root={root!r} and the path {relative!r}"
        )
    return f"{scheme}://{bucket}/{'' if joined == '.' else joined}"


def parent(uri):
    """The folder that holds the object `uri`: `parent("s3://b/p/data.csv")` is
    `"s3://b/p/"` (`"s3://b/"` for an object at the top of the bucket)."""
    scheme, bucket, key = split_uri(uri)
    folder = posixpath.dirname(key.rstrip("/"))
    return f"{scheme}://{bucket}/{folder + '/' if folder else ''}"


def object_uri(uri):
    """`split_uri` of the URI of an object (its key does not end in `/`)."""
    scheme, bucket, key = split_uri(uri)
    if not key or key.endswith("/"):
        raise ValueError(f"Expected the URI of an object (s3://bucket/key), not of a folder. Received: {uri!r}")
    return scheme, bucket, key
