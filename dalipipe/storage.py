"""Objects in S3 (`s3://bucket/key`) and Google Cloud Storage (`gs://bucket/key`).

DALI reads such URIs itself (`fn.io.file.read`, on its own threads, with the AWS and
Google SDKs inside `libdali_operators.so`). This module does what dalipipe needs
around that, in Python: listing a prefix (keys, sizes and ETags), reading whole
objects (many at once, on a bounded pool of threads) and byte ranges of them.

The clients are imported only when a remote URI is used: boto3 for `s3://` (the
`s3` extra), google-cloud-storage for `gs://` (the `gcs` extra). They find
credentials, regions and endpoints where DALI's SDKs find them:

- S3: `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` / `AWS_SESSION_TOKEN`,
  `AWS_PROFILE` and the shared `~/.aws` files, instance roles; the region from
  `AWS_REGION` (else `AWS_DEFAULT_REGION`, else the profile); the endpoint from
  `AWS_ENDPOINT_URL`, the one variable DALI reads for it (boto3 is given it
  explicitly, so that its own `AWS_ENDPOINT_URL_S3` cannot point the listing
  elsewhere than DALI's reads).
- GCS: Application Default Credentials (`GOOGLE_APPLICATION_CREDENTIALS`, gcloud's
  login, the metadata server); no credentials with `DALI_GCS_ANONYMOUS=1`; the
  endpoint from `DALI_GCS_ENDPOINT_URL` or `CLOUD_STORAGE_EMULATOR_ENDPOINT`.

Every request has bounded timeouts and retries (`CONNECT_TIMEOUT`, `READ_TIMEOUT`,
`ATTEMPTS`), and a failure names the URI: `FileNotFoundError` for a missing object,
`ValueError` for a missing bucket or an empty prefix, `PermissionError` for denied
access or missing or wrong credentials, `ConnectionError` for an endpoint that cannot
be reached or stops answering, `ImportError` (with the pip command) for a missing
client.
"""

import concurrent.futures
import os
import posixpath
import threading
from typing import Callable, NamedTuple, Optional, Sequence

from dalipipe.utils import progress

SCHEMES = ("s3", "gs")
_EXTRAS = {"s3": ("boto3", "s3"), "gs": ("google.cloud.storage", "gcs")}
# Seconds to open a connection, seconds a response may stall, and tries per request:
# a server that stops answering fails a request within about
# ATTEMPTS * (CONNECT_TIMEOUT + READ_TIMEOUT) seconds (read when a client is made).
CONNECT_TIMEOUT = 10
READ_TIMEOUT = 20
ATTEMPTS = 3
# Requests in flight at once when many objects are read or listed.
MAX_WORKERS = 32


class ObjectInfo(NamedTuple):
    """An object found by a listing.

    Attributes:
        key: the key relative to the listed prefix (`"cats/1.jpg"`), or the whole
            URI where no prefix was listed (`stat`).
        size: its size in bytes.
        etag: its ETag (S3) or etag (GCS), quotes removed: it changes whenever the
            object is replaced.
    """

    key: str
    size: int
    etag: str


def is_remote(path):
    """Whether `path` is an object storage URI (`s3://...` or `gs://...`).

    Local paths (no `scheme://`) are not. Other schemes raise.

    Raises:
        ValueError: for a URI of another scheme (`http://`, `hdfs://`, ...).
    """
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str) or "://" not in path:
        return False
    scheme = path.split("://", 1)[0]
    if scheme in SCHEMES:
        return True
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


def list_objects(uri, *, max_workers=MAX_WORKERS):
    """Every object under the prefix `uri`, recursively, with its size and ETag.

    `uri` names a folder: `"s3://bucket/photos"` and `"s3://bucket/photos/"` both list
    the keys that start with `photos/` (`"s3://bucket"` lists the bucket). The first
    level is listed with a delimiter, then each of its folders on its own thread, so
    that a class-folder layout of 100,000 objects is listed in about
    100,000 / 1,000 / `max_workers` round trips rather than 100 in a row. Folder
    markers (keys ending in `/`) are left out.

    Returns:
        A list of `ObjectInfo` with keys relative to the prefix, sorted as a local
        folder's walk is (folder, then file name: `"a/z.jpg"` before `"a/b/c.jpg"`).

    Raises:
        ValueError: when the bucket does not exist, or no object lies under `uri`.
        PermissionError, ConnectionError, ImportError: see the module's doc.
    """
    scheme, bucket, key = split_uri(uri)
    prefix = key if key == "" or key.endswith("/") else key + "/"
    backend = _backend(scheme)
    with _errors(uri, listing=True):
        found, folders = backend.list(bucket, prefix, delimiter=True)
        with concurrent.futures.ThreadPoolExecutor(min(max_workers, max(1, len(folders)))) as pool:
            for part in pool.map(lambda folder: backend.list(bucket, folder)[0], folders):
                found += part
    objects = [
        ObjectInfo(name[len(prefix):], size, etag.strip('"'))
        for name, size, etag in found if not name.endswith("/")
    ]
    if not objects:
        raise ValueError(
            f"No objects found under {uri!r}: the prefix is empty or does not exist."
        )
    return sorted(objects, key=lambda o: (posixpath.dirname(o.key), posixpath.basename(o.key)))


def stat(uri):
    """The size and ETag of the object `uri` (one HEAD request).

    Returns:
        An `ObjectInfo` whose `key` is `uri`.

    Raises:
        FileNotFoundError: when there is no such object (or bucket).
        PermissionError, ConnectionError, ImportError: see the module's doc.
    """
    scheme, bucket, key = _object_uri(uri)
    with _errors(uri):
        size, etag = _backend(scheme).head(bucket, key)
    return ObjectInfo(uri, size, etag.strip('"'))


def read_object(uri, offset=0, size=None):
    """The bytes of the object `uri`, or of `size` bytes of it from `offset` (one
    ranged GET).

    Returns:
        bytes: the whole object, or `size` bytes of it (fewer where it ends first).

    Raises:
        FileNotFoundError: when there is no such object (or bucket).
        ValueError: for a negative `offset` or `size`, or an `offset` past the end.
        PermissionError, ConnectionError, ImportError: see the module's doc.
    """
    if offset < 0 or (size is not None and size < 0):
        raise ValueError(f"`offset` and `size` must be >= 0. Received: offset={offset}, size={size}")
    scheme, bucket, key = _object_uri(uri)
    if size == 0:
        return b""
    end = None if size is None else offset + size - 1
    with _errors(uri):
        return _backend(scheme).get(bucket, key, offset, end)


def map_objects(uris: Sequence[str], function: Callable, *, max_workers=MAX_WORKERS,
                verbose=None, description="objects read"):
    """`function(uri, data)` for each of `uris`, each object read once, `max_workers`
    at a time.

    `data` is the object's bytes, or None when it does not exist. At most
    `max_workers` objects are held at once: `function` runs on the reading thread,
    so it should keep only what it needs (a verdict, not the bytes).

    Args:
        uris: object URIs (`s3://` or `gs://`, mixed buckets allowed).
        function: called as `function(uri, data)`; its results are returned.
        max_workers: requests in flight at once.
        verbose: show a progress bar on stderr (default: when stderr is a terminal).
        description: the progress bar's label.

    Returns:
        A list of `function`'s results, in the order of `uris`.

    Raises:
        PermissionError, ConnectionError, ImportError: see the module's doc (the
            first failure; the reads still in flight are abandoned).
    """
    def one(uri):
        try:
            data = read_object(uri)
        except FileNotFoundError:
            data = None
        return function(uri, data)

    results = [None] * len(uris)
    with progress(len(uris), description, enabled=verbose) as bar, \
            concurrent.futures.ThreadPoolExecutor(max(1, min(max_workers, len(uris)))) as pool:
        futures = {pool.submit(one, uri): i for i, uri in enumerate(uris)}
        try:
            for future in concurrent.futures.as_completed(futures):
                results[futures[future]] = future.result()
                bar.update(1)
        except BaseException:
            for future in futures:
                future.cancel()
            raise
    return results


def read_objects(uris, *, max_workers=MAX_WORKERS, verbose=None):
    """The bytes of each of `uris` (None for a missing object), read in parallel.

    Holds every object in memory: for many objects, `map_objects`.

    Returns:
        A list of bytes or None, in the order of `uris`.
    """
    return map_objects(uris, lambda uri, data: data, max_workers=max_workers, verbose=verbose)


def stat_objects(uris, *, max_workers=MAX_WORKERS):
    """`stat` of each of `uris`, in parallel: an `ObjectInfo` (key = the URI), or None
    for a missing object. One HEAD request per object: for the objects under one
    prefix, `list_objects` is about 1,000 times cheaper."""
    def one(uri):
        try:
            return stat(uri)
        except FileNotFoundError:
            return None

    with concurrent.futures.ThreadPoolExecutor(max(1, min(max_workers, len(uris)))) as pool:
        return list(pool.map(one, uris))


def missing_client_message(scheme):
    """What to install for `scheme`'s URIs."""
    module, extra = _EXTRAS[scheme]
    return (
        f"{scheme}:// URIs need the {module.split('.')[0] if scheme == 's3' else 'google-cloud-storage'} "
        f"client: pip install 'dalipipe[{extra}]'"
    )


def _object_uri(uri):
    scheme, bucket, key = split_uri(uri)
    if not key or key.endswith("/"):
        raise ValueError(f"Expected the URI of an object (s3://bucket/key), not of a folder. Received: {uri!r}")
    return scheme, bucket, key


_CLIENTS = {}
_CLIENTS_LOCK = threading.Lock()


def _backend(scheme):
    """This process's client for `scheme` (made once; a forked child makes its own)."""
    key = (scheme, os.getpid())
    with _CLIENTS_LOCK:
        if key not in _CLIENTS:
            try:
                _CLIENTS[key] = _S3() if scheme == "s3" else _GCS()
            except ImportError as e:
                raise ImportError(missing_client_message(scheme)) from e
        return _CLIENTS[key]


def reset_clients():
    """Forgets the clients made so far: the next request makes new ones from the
    environment as it is then (after `AWS_ENDPOINT_URL` changed, say)."""
    with _CLIENTS_LOCK:
        _CLIENTS.clear()


class _S3:
    """boto3's S3 client, with the endpoint and region DALI's SDK uses."""

    def __init__(self):
        import boto3
        import botocore.config
        import botocore.exceptions

        self.exceptions = botocore.exceptions
        config = botocore.config.Config(
            connect_timeout=CONNECT_TIMEOUT, read_timeout=READ_TIMEOUT,
            retries={"mode": "standard", "total_max_attempts": ATTEMPTS},
            max_pool_connections=2 * MAX_WORKERS,
        )
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or None
        self.client = boto3.session.Session().client(
            "s3", endpoint_url=os.environ.get("AWS_ENDPOINT_URL") or None,
            region_name=region, config=config,
        )
        self.endpoint = self.client.meta.endpoint_url

    def list(self, bucket, prefix, delimiter=False):
        """`([(key, size, etag)], [folder prefixes])` of the keys under `prefix`."""
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=prefix, **({"Delimiter": "/"} if delimiter else {}))
        found, folders = [], []
        for page in pages:
            found += [(o["Key"], o["Size"], o.get("ETag", "")) for o in page.get("Contents", ())]
            folders += [p["Prefix"] for p in page.get("CommonPrefixes", ())]
        return found, folders

    def head(self, bucket, key):
        response = self.client.head_object(Bucket=bucket, Key=key)
        return response["ContentLength"], response.get("ETag", "")

    def get(self, bucket, key, start, end):
        extra = {} if start == 0 and end is None else {"Range": f"bytes={start}-{'' if end is None else end}"}
        response = self.client.get_object(Bucket=bucket, Key=key, **extra)
        with response["Body"] as body:
            return body.read()

    def translate(self, error, uri, listing):
        """The dalipipe error for a botocore error, or None to let it through."""
        e = self.exceptions
        if isinstance(error, e.NoCredentialsError):
            return PermissionError(
                f"No AWS credentials found for {uri!r}: set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE (the same for DALI's reads).")
        if isinstance(error, (e.EndpointConnectionError, e.ConnectTimeoutError,
                              e.ReadTimeoutError, e.ConnectionClosedError)):
            return ConnectionError(
                f"Cannot reach the S3 endpoint {self.endpoint} for {uri!r} "
                f"(AWS_ENDPOINT_URL={os.environ.get('AWS_ENDPOINT_URL')!r}): {error}")
        if not isinstance(error, e.ClientError):
            return None
        code = str(error.response.get("Error", {}).get("Code", ""))
        return _by_code(code, uri, listing, error)


class _GCS:
    """google-cloud-storage's client, with the endpoint and credentials DALI's uses."""

    def __init__(self):
        import google.api_core.exceptions
        import google.auth.exceptions
        import requests.exceptions
        from google.cloud import storage
        from google.cloud.storage.retry import DEFAULT_RETRY

        self.api_exceptions = google.api_core.exceptions
        self.auth_exceptions = google.auth.exceptions
        self.connection_errors = (requests.exceptions.ConnectionError, requests.exceptions.Timeout)
        self.retry = DEFAULT_RETRY.with_timeout(ATTEMPTS * READ_TIMEOUT)
        self.timeout = (CONNECT_TIMEOUT, READ_TIMEOUT)
        endpoint = (os.environ.get("DALI_GCS_ENDPOINT_URL")
                    or os.environ.get("CLOUD_STORAGE_EMULATOR_ENDPOINT") or None)
        self.endpoint = endpoint or "https://storage.googleapis.com"
        options = {"api_endpoint": endpoint} if endpoint else None
        if os.environ.get("DALI_GCS_ANONYMOUS", "0").strip() not in ("", "0"):
            from google.auth.credentials import AnonymousCredentials

            self.client = storage.Client(project="<none>", credentials=AnonymousCredentials(),
                                         client_options=options)
        else:
            try:
                self.client = storage.Client(client_options=options)
            except self.auth_exceptions.DefaultCredentialsError as e:
                self.client = _Raising(e)  # raised by each request, with its URI

    def list(self, bucket, prefix, delimiter=False):
        blobs = self.client.list_blobs(bucket, prefix=prefix, delimiter="/" if delimiter else None,
                                       timeout=self.timeout, retry=self.retry)
        found = [(b.name, b.size, b.etag or "") for b in blobs]
        return found, sorted(blobs.prefixes)

    def head(self, bucket, key):
        blob = self.client.bucket(bucket).get_blob(key, timeout=self.timeout, retry=self.retry)
        if blob is None:
            raise self.api_exceptions.NotFound(f"No such object: {key}")
        return blob.size, blob.etag or ""

    def get(self, bucket, key, start, end):
        blob = self.client.bucket(bucket).blob(key)
        return blob.download_as_bytes(start=start or None, end=end, timeout=self.timeout,
                                      retry=self.retry, checksum=None)

    def translate(self, error, uri, listing):
        if isinstance(error, self.api_exceptions.RetryError) and error.cause is not None:
            error = error.cause  # the retries ran out: the last failure says why
        if isinstance(error, self.auth_exceptions.DefaultCredentialsError):
            return PermissionError(
                f"No Google credentials found for {uri!r}: set GOOGLE_APPLICATION_CREDENTIALS "
                "(or DALI_GCS_ANONYMOUS=1 for a public bucket).")
        if isinstance(error, self.connection_errors):
            return ConnectionError(f"Cannot reach the GCS endpoint {self.endpoint} for {uri!r}: {error}")
        if isinstance(error, self.api_exceptions.GoogleAPICallError):
            code = {404: "NoSuchKey", 403: "AccessDenied", 401: "InvalidAccessKeyId",
                    416: "InvalidRange"}.get(error.code, str(error.code))
            if code == "NoSuchKey" and listing:
                code = "NoSuchBucket"
            return _by_code(code, uri, listing, error)
        return None


class _Raising:
    """Stands for a client that could not be made: any use raises `error`."""

    def __init__(self, error):
        self.error = error

    def __getattr__(self, name):
        raise self.error


_DENIED = ("AccessDenied", "403", "AllAccessDisabled", "InvalidAccessKeyId",
           "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken", "AuthorizationHeaderMalformed")


def _by_code(code, uri, listing, error):
    if code == "NoSuchBucket":
        bucket = split_uri(uri)[1]
        message = f"No such bucket {bucket!r} for {uri!r}"
        return ValueError(message) if listing else FileNotFoundError(message)
    if code in ("NoSuchKey", "404", "NotFound"):
        return FileNotFoundError(f"No such object: {uri!r}")
    if code in _DENIED:
        return PermissionError(
            f"Access denied to {uri!r} ({code}): check the credentials and their "
            f"permissions (the same for DALI's reads). {error}")
    if code in ("InvalidRange", "416"):
        return ValueError(f"The byte range asked of {uri!r} starts past its end.")
    return OSError(f"Request for {uri!r} failed ({code}): {error}")


class _errors:
    """Turns the clients' errors raised inside it into the module's, naming `uri`."""

    def __init__(self, uri, listing=False):
        self.uri, self.listing = uri, listing

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback):
        if error is None or not isinstance(error, Exception) or isinstance(error, (ValueError, ImportError)):
            return False
        backend = _CLIENTS.get((split_uri(self.uri)[0], os.getpid()))
        translated = backend.translate(error, self.uri, self.listing) if backend else None
        if translated is None:
            return False
        raise translated from error


__all__ = [
    "ObjectInfo", "is_remote", "split_uri", "join", "list_objects", "stat", "read_object",
    "map_objects", "read_objects", "stat_objects", "reset_clients", "SCHEMES",
]
