"""The check's cache: each file's or record's verdict in SQLite, keyed on its name,
with the size and modification time it had (of its TFRecord file, for a record), and
the chunks of work that processes sharing the cache have claimed.

The cache lives in `dalipipe.utils.cache_dir()`, in `checks.sqlite`. It is per
machine: SQLite's locks are unreliable over NFS and other network file systems.

Several processes (one per GPU, say) that check the same files on one cold cache
share the work through the `claims` table: a process claims a chunk nobody holds,
checks it, and writes its verdicts and drops its claim in one transaction. A claim
whose process is gone (same host, the process id no longer running) or that is older
than `LEASE_S` is taken over. This needs no launcher's rank, so it works the same
under torch.distributed, tf.distribute, JAX or plain `multiprocessing`.
"""

import contextlib
import os
import socket
import sqlite3
import time

from dalipipe.checks.verdicts import Verdict
from dalipipe.utils import warn_without_cache, writable_cache_dir

VERSION = 5  # bump when a check changes, to ignore older cache rows
LEASE_S = 60.0  # a claim older than this is taken over by a process that waits on it


def cache_path(folder):
    """The cache's file: `checks.sqlite` in `folder`."""
    return os.path.join(folder, "checks.sqlite")


def open_cache():
    """The cache, or None when there is none: the cache folder cannot be written or
    is turned off (see `dalipipe.utils.writable_cache_dir`), or SQLite cannot open
    the file (a warning names it)."""
    folder = writable_cache_dir()
    if folder is None:
        return None
    path = cache_path(folder)
    try:
        return Cache(path)
    except sqlite3.Error as e:
        warn_without_cache(path, str(e))
        return None


class Cache:
    """The `Verdict`s of checks, and chunk claims, in SQLite: a row per file path or
    record name (its bytes), `(path, size, mtime_ns, mode, version, reason, width,
    height)`: the verdict's stamp, the check's mode (`mode_of`) and `VERSION`, its
    reason, and its size (NULL where the decoder did not read one).

    Each chunk of results is committed as it is found, without waiting for the disk:
    a crash of the process loses nothing committed, and a file that a crash of the
    machine left damaged is started again. Writes take SQLite's write lock at once
    (`BEGIN IMMEDIATE`), waiting up to 30 s for other processes.
    """

    def __init__(self, path):
        try:
            self._open(path)
        except sqlite3.DatabaseError as e:
            if isinstance(e, sqlite3.OperationalError):
                raise  # locked, read-only, ...: not a damaged file
            self.db.close()  # not a database any more
            os.remove(path)
            self._open(path)

    def _open(self, path):
        self.db = sqlite3.connect(path, timeout=30, isolation_level=None)
        self.db.execute("PRAGMA synchronous = OFF")
        with self._writing():
            self.db.execute(
                "CREATE TABLE IF NOT EXISTS checks (path BLOB PRIMARY KEY, size INTEGER, "
                "mtime_ns INTEGER, mode TEXT, version INTEGER, reason TEXT, width INTEGER, "
                "height INTEGER)"
            )
            columns = {row[1] for row in self.db.execute("PRAGMA table_info(checks)")}
            for column in ("width", "height"):  # a cache of VERSION 4 or older
                if column not in columns:
                    self.db.execute(f"ALTER TABLE checks ADD COLUMN {column} INTEGER")
            self.db.execute(
                "CREATE TABLE IF NOT EXISTS claims (chunk TEXT PRIMARY KEY, owner TEXT, "
                "host TEXT, pid INTEGER, claimed_at REAL)"
            )
            self.db.execute("DELETE FROM claims WHERE claimed_at < ?", (time.time() - LEASE_S,))

    @contextlib.contextmanager
    def _writing(self):
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def answers(self, keys, stamps, mode):
        """The cached `Verdict` of each of `keys` (file paths or record names) where
        the cache answers a check of `mode` (`mode_of`) for its stamp (`usable`),
        else None; None for every key whose stamp is None."""
        encoded = [os.fsencode(key) for key in keys]  # names need not be valid UTF-8
        found = {}
        for i in range(0, len(encoded), 900):
            chunk = encoded[i: i + 900]
            rows = self.db.execute(
                f"SELECT path, size, mtime_ns, mode, version, reason, width, height FROM checks "
                f"WHERE path IN ({','.join('?' * len(chunk))})", chunk,
            )
            found.update({row[0]: row[1:] for row in rows})
        answers = []
        for key, name, stamp in zip(keys, encoded, stamps):
            row = found.get(name)
            if stamp is None or not usable(row, stamp, mode):
                answers.append(None)
                continue
            size = None if row[5] is None else (row[5], row[6])
            answers.append(Verdict(key, row[4], size, (row[0], row[1])))
        return answers

    def put(self, verdicts, mode, *, release=None):
        """Stores `verdicts` (those with a stamp) of a check of `mode` and drops the
        claim `release` (a chunk id, see `claim`), in one transaction."""
        rows = [(os.fsencode(v.path), *v.stamp, mode, VERSION, v.reason, *(v.size or (None, None)))
                for v in verdicts if v.stamp is not None]
        with self._writing():
            self.db.executemany("INSERT OR REPLACE INTO checks VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                                rows)
            if release is not None:
                self.db.execute("DELETE FROM claims WHERE chunk = ?", (release,))

    def claim(self, chunk, owner):
        """Claims the chunk id `chunk` for `owner` (a str unique to one process's
        check); returns whether it did: False while another owner holds a live claim
        on it (`stale` says when one is not live)."""
        row = self.db.execute("SELECT owner, host, pid, claimed_at FROM claims WHERE chunk = ?",
                              (chunk,)).fetchone()
        if row is not None and (row[0] == owner or not stale(*row)):
            return row[0] == owner
        with self._writing():
            row = self.db.execute("SELECT owner, host, pid, claimed_at FROM claims "
                                  "WHERE chunk = ?", (chunk,)).fetchone()
            if row is not None and row[0] != owner and not stale(*row):
                return False
            self.db.execute("INSERT OR REPLACE INTO claims VALUES (?, ?, ?, ?, ?)",
                            (chunk, owner, socket.gethostname(), os.getpid(), time.time()))
        return True

    def release(self, chunks):
        """Drops the claims on the chunk ids `chunks`."""
        with self._writing():
            self.db.executemany("DELETE FROM claims WHERE chunk = ?", [(c,) for c in chunks])

    def close(self):
        self.db.close()


def stale(owner, host, pid, claimed_at):
    """Whether a claim is to be taken over: older than `LEASE_S`, or made on this
    host by a process that is no longer running (or by this process, for a check
    of its own that ended without dropping it)."""
    if time.time() - claimed_at > LEASE_S:
        return True
    if host != socket.gethostname():
        return False
    return pid == os.getpid() or not _running(pid)


def _running(pid):
    """Whether process `pid` runs on this host (a zombie, dead but not yet reaped by
    its parent, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        pass
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def mode_of(check, device):
    """The cache's name for a check: a full decode on the GPU is "full-gpu"."""
    return "full-gpu" if check == "full" and device == "gpu" else check


def usable(cached, stamp, mode):
    """Whether a cache row `(size, mtime_ns, mode, version, reason, ...)` answers a
    check of `mode` for a file of `stamp` `(size, mtime_ns)`: a pass of "full" (on
    the CPU, the strictest) answers every mode."""
    return (
        cached is not None and (cached[0], cached[1]) == tuple(stamp)
        and cached[3] == VERSION
        and (cached[2] == mode or (cached[2] == "full" and cached[4] is None))
    )
