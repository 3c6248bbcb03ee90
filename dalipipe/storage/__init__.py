"""Objects in S3 (`s3://bucket/key`) and Google Cloud Storage (`gs://bucket/key`).

DALI reads such URIs itself (`fn.io.file.read`, on its own threads, with the AWS and
Google SDKs inside `libdali_operators.so`). This module does what dalipipe needs
around that, in Python: listing a prefix (keys, sizes and ETags), reading whole
objects (many at once, on a bounded pool of threads), streams and byte ranges of
them. `uris` parses URIs; `s3` and `gcs` hold the two clients, `errors` turns their
answers into the errors below.

The parallel requests of a process share one pool of `MAX_WORKERS` threads, made at
the first and kept (a forked child makes its own): reading a batch starts no thread.
Each client keeps `CONNECTIONS` connections open per endpoint, more than the pool's
threads, so a request finds an open connection rather than opening one (S3:
botocore's `max_pool_connections`; GCS: the pool size of its requests session).

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
import hashlib
import io
import os
import posixpath
import queue
import threading
from typing import Callable, NamedTuple, Sequence

from dalipipe.storage.uris import SCHEMES, is_remote, join, object_uri, parent, split_uri
from dalipipe.utils import progress

_CLIENT_PACKAGES = {"s3": ("boto3", "s3"), "gs": ("google-cloud-storage", "gcs")}
# Seconds to open a connection, seconds a response may stall, and tries per request:
# a server that stops answering fails a request within about
# ATTEMPTS * (CONNECT_TIMEOUT + READ_TIMEOUT) seconds (read when a client is made).
CONNECT_TIMEOUT = 10
READ_TIMEOUT = 20
ATTEMPTS = 3
# Requests in flight at once when many objects are read or listed: the threads of
# the process's pool (read when the pool is made).
MAX_WORKERS = 32
# Connections each client keeps open per endpoint: the pool's threads, and as many
# again for requests made on the callers' own threads.
CONNECTIONS = 2 * MAX_WORKERS


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

    def stamp(self):
        """`(size, n)`, two int64 that change when the object is replaced: `n` is a
        hash of the ETag. It fills the `(size, mtime_ns)` stamp of a local file."""
        digest = hashlib.blake2b(self.etag.encode(), digest_size=8).digest()
        return self.size, int.from_bytes(digest, "little", signed=True)


def list_objects(uri, *, max_workers=None):
    """Every object under the prefix `uri`, recursively, with its size and ETag.

    `uri` names a folder: `"s3://bucket/photos"` and `"s3://bucket/photos/"` both list
    the keys that start with `photos/` (`"s3://bucket"` lists the bucket). The first
    level is listed with a delimiter, then each of its folders on the process's pool
    of threads (`max_workers` at a time, default `MAX_WORKERS`): a listing request
    returns at most 1,000 keys, so the 100,000 objects of 100 class folders take
    about 100 requests, in parallel rather than in a row. Folder markers (keys ending
    in `/`) are left out.

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
        for part in _in_pool(lambda folder: backend.list(bucket, folder)[0], folders,
                             max_workers):
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
    scheme, bucket, key = object_uri(uri)
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
    scheme, bucket, key = object_uri(uri)
    if size == 0:
        return b""
    end = None if size is None else offset + size - 1
    with _errors(uri):
        return _backend(scheme).get(bucket, key, offset, end)


def open_object(uri, *, buffer_size=1 << 20):
    """The object `uri` as a binary file open for reading, streamed as it is read (one
    GET on S3; `buffer_size` chunks on GCS): for a large object read once in order,
    a TFRecord file being scanned, say. Use it as a context manager.

    Returns:
        An `io.BufferedReader`; its failures, at the opening or later, are those of
        the module's doc, naming `uri`.
    """
    scheme, bucket, key = object_uri(uri)
    with _errors(uri):
        raw = _backend(scheme).open(bucket, key)
    return io.BufferedReader(_Stream(uri, raw), buffer_size=buffer_size)


class _Stream(io.RawIOBase):
    """An object's body as a raw binary file, its failures named by its URI."""

    def __init__(self, uri, body):
        self.uri, self.body = uri, body

    def readable(self):
        return True

    def readinto(self, buffer):
        with _errors(self.uri):
            data = self.body.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self):
        if not self.closed:
            self.body.close()
        super().close()


def map_objects(uris: Sequence[str], function: Callable, *, max_workers=None,
                verbose=None, description="objects read"):
    """`function(uri, data)` for each of `uris`, each object read once, `max_workers`
    at a time, on the process's pool of threads.

    `data` is the object's bytes, or None when it does not exist. At most
    `max_workers` objects are held at once: `function` runs on the reading thread,
    so it should keep only what it needs (a verdict, not the bytes), and must not
    call this module's parallel functions (it would wait for the pool it runs on).

    Args:
        uris: object URIs (`s3://` or `gs://`, mixed buckets allowed).
        function: called as `function(uri, data)`; its results are returned.
        max_workers: requests in flight at once, at most `MAX_WORKERS` (its default).
        verbose: show a progress bar on stderr (default: when stderr is a terminal).
        description: the progress bar's label.

    Returns:
        A list of `function`'s results, in the order of `uris`.

    Raises:
        ValueError: for `max_workers` outside 1 to `MAX_WORKERS`.
        PermissionError, ConnectionError, ImportError: see the module's doc (the
            first failure; the reads not yet started are not started).
    """
    def one(uri):
        try:
            data = read_object(uri)
        except FileNotFoundError:
            data = None
        return function(uri, data)

    with progress(len(uris), description, enabled=verbose) as bar:
        return _in_pool(one, uris, max_workers, done=lambda: bar.update(1))


def read_objects(uris, *, max_workers=None, verbose=None):
    """The bytes of each of `uris` (None for a missing object), read in parallel.

    Holds every object in memory: for many objects, `map_objects`.

    Returns:
        A list of bytes or None, in the order of `uris`.
    """
    return map_objects(uris, lambda uri, data: data, max_workers=max_workers, verbose=verbose)


def read_heads(uris, size, *, max_workers=None):
    """The first `size` bytes of each of `uris` (fewer where an object is shorter), one
    ranged GET each, in parallel; None for a missing or empty object.

    Returns:
        A list of bytes or None, in the order of `uris`.
    """
    def one(uri):
        try:
            return read_object(uri, 0, size) or None
        except (FileNotFoundError, ValueError):  # ValueError: the range of an empty object
            return None

    return _in_pool(one, uris, max_workers)


def stat_objects(uris, *, max_workers=None):
    """`stat` of each of `uris`, in parallel: an `ObjectInfo` (key = the URI), or None
    for a missing object. One HEAD request per object: for the objects under one
    prefix, `list_objects` is about 1,000 times cheaper."""
    def one(uri):
        try:
            return stat(uri)
        except FileNotFoundError:
            return None

    return _in_pool(one, uris, max_workers)


def find_objects(uris, *, max_workers=None):
    """`stat_objects` for many URIs, by listing where that is cheaper.

    The URIs of each bucket are found by listing their longest common folder when
    there are at least `_LIST_FROM` of them (a listing request answers for 1,000
    objects, a HEAD for one), else by HEAD requests.

    Returns:
        A list aligned with `uris`: an `ObjectInfo` (key = the URI), or None for a
        missing object.
    """
    found = {}
    by_bucket = {}
    for uri in uris:
        scheme, bucket, key = object_uri(uri)
        by_bucket.setdefault((scheme, bucket), []).append(key)
    for (scheme, bucket), keys in by_bucket.items():
        if len(keys) < _LIST_FROM:
            continue
        folder = posixpath.commonpath(["/" + posixpath.dirname(k) for k in keys]).strip("/")
        base = f"{scheme}://{bucket}/{folder + '/' if folder else ''}"
        try:
            listed = list_objects(base, max_workers=max_workers)
        except ValueError:  # no such bucket, or an empty folder: none of them exists
            listed = []
        found.update((base + o.key, ObjectInfo(base + o.key, o.size, o.etag)) for o in listed)
        found.update((f"{scheme}://{bucket}/{k}", None) for k in keys
                     if f"{scheme}://{bucket}/{k}" not in found)
    rest = [uri for uri in uris if uri not in found]
    found.update(zip(rest, stat_objects(rest, max_workers=max_workers)))
    return [found[uri] for uri in uris]


_LIST_FROM = 100


def missing_client_message(scheme):
    """What to install for `scheme`'s URIs."""
    package, extra = _CLIENT_PACKAGES[scheme]
    return f"{scheme}:// URIs need the {package} client: pip install 'dalipipe[{extra}]'"


_CLIENTS = {}
_CLIENTS_LOCK = threading.Lock()
_POOLS = {}


class _DaemonPool:
    """Daemon threads, `size` at most, that run the calls submitted: unlike
    `concurrent.futures`' pool, whose threads the process joins as it exits, a
    read stalled in storage does not hold the process (after Ctrl-C) until its
    timeouts end."""

    def __init__(self, size, name):
        self._size, self._name = size, name
        self._work = queue.SimpleQueue()
        self._threads = []
        self._lock = threading.Lock()

    def submit(self, function, *args):
        """`function(*args)`, run on one of the threads: its `concurrent.futures.Future`."""
        future = concurrent.futures.Future()
        self._work.put((future, function, args))
        with self._lock:
            if len(self._threads) < self._size:
                thread = threading.Thread(target=self._run, daemon=True,
                                          name=f"{self._name}_{len(self._threads)}")
                thread.start()
                self._threads.append(thread)
        return future

    def _run(self):
        while True:
            future, function, args = self._work.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = function(*args)
            except BaseException as e:  # the caller's `result()` raises it
                future.set_exception(e)
            else:
                future.set_result(result)


def _pool():
    """This process's pool of `MAX_WORKERS` daemon threads (made once; a forked child,
    whose copy of the parent's pool has no threads, makes its own)."""
    pid = os.getpid()
    with _CLIENTS_LOCK:
        if pid not in _POOLS:
            _POOLS[pid] = (_DaemonPool(MAX_WORKERS, "dalipipe-storage"), MAX_WORKERS)
        return _POOLS[pid]


def _in_pool(function, items, max_workers=None, done=None):
    """`[function(item) for item in items]`, run on the process's pool, at most
    `max_workers` at once (default `MAX_WORKERS`); `done()` after each.

    The first failure is raised once the calls in flight have ended; the calls not yet
    started are not started.
    """
    pool, threads = _pool()
    width = threads if max_workers is None else max_workers
    if not 1 <= width <= threads:
        raise ValueError(f"`max_workers` must be between 1 and {threads} (the threads of "
                         f"dalipipe's storage pool). Received: max_workers={max_workers}")
    items = list(items)
    results = [None] * len(items)
    pending = iter(enumerate(items))
    running = {}

    def submit():
        for i, item in pending:
            running[pool.submit(function, item)] = i
            return

    for _ in range(width):
        submit()
    failure = None
    while running:
        finished, _ = concurrent.futures.wait(running,
                                              return_when=concurrent.futures.FIRST_COMPLETED)
        for future in finished:
            i = running.pop(future)
            try:
                results[i] = future.result()
            except BaseException as e:
                failure = failure or e
            if done is not None:
                done()
            if failure is None:
                submit()
    if failure is not None:
        raise failure
    return results


def _backend(scheme):
    """This process's client for `scheme` (made once; a forked child makes its own)."""
    key = (scheme, os.getpid())
    with _CLIENTS_LOCK:
        if key not in _CLIENTS:
            try:
                if scheme == "s3":
                    from dalipipe.storage.s3 import S3 as client
                else:
                    from dalipipe.storage.gcs import GCS as client
                _CLIENTS[key] = client(connect_timeout=CONNECT_TIMEOUT, read_timeout=READ_TIMEOUT,
                                       attempts=ATTEMPTS, connections=CONNECTIONS)
            except ImportError as e:
                raise ImportError(missing_client_message(scheme)) from e
        return _CLIENTS[key]


def reset_clients():
    """Forgets the clients made so far: the next request makes new ones from the
    environment as it is then (after `AWS_ENDPOINT_URL` changed, say)."""
    with _CLIENTS_LOCK:
        _CLIENTS.clear()


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
    "open_object", "map_objects", "find_objects", "parent", "read_objects", "read_heads",
    "stat_objects", "reset_clients", "SCHEMES",
]
