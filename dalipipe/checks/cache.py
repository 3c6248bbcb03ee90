"""The check's cache: each file's or record's verdict in SQLite, keyed on its name,
with the size and modification time it had (of its TFRecord file, for a record).

The cache lives in `dalipipe.utils.cache_dir()`, in `checks.sqlite`.
"""

import os
import sqlite3

from dalipipe.utils import cache_dir

VERSION = 5  # bump when a check changes, to ignore older cache rows


def cache_path():
    """The cache's file: `checks.sqlite` in `dalipipe.utils.cache_dir()`."""
    return os.path.join(cache_dir(), "checks.sqlite")


class Cache:
    """path -> (size, mtime_ns, mode, version, reason) in SQLite.

    Each chunk of results is committed as it is found, without waiting for the disk:
    a crash of the process loses nothing committed, and a file that a crash of the
    machine left damaged is started again.
    """

    def __init__(self, path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            self._open(path)
        except sqlite3.DatabaseError:  # not a database any more
            self.db.close()
            os.remove(path)
            self._open(path)

    def _open(self, path):
        self.db = sqlite3.connect(path, timeout=30)
        self.db.execute("PRAGMA synchronous = OFF")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS checks (path BLOB PRIMARY KEY, size INTEGER, "
            "mtime_ns INTEGER, mode TEXT, version INTEGER, reason TEXT)"
        )

    def get(self, paths):
        """`{path: (size, mtime_ns, mode, version, reason)}` for the `paths` (bytes)
        the cache holds."""
        found = {}
        for i in range(0, len(paths), 900):
            chunk = paths[i: i + 900]
            rows = self.db.execute(
                f"SELECT path, size, mtime_ns, mode, version, reason FROM checks "
                f"WHERE path IN ({','.join('?' * len(chunk))})", chunk,
            )
            found.update({row[0]: row[1:] for row in rows})
        return found

    def put(self, rows):
        """Stores and commits `(path, size, mtime_ns, mode, version, reason)` rows."""
        self.db.executemany("INSERT OR REPLACE INTO checks VALUES (?, ?, ?, ?, ?, ?)", rows)
        self.db.commit()

    def close(self):
        self.db.close()


def mode_of(check, device):
    """The cache's name for a check: a full decode on the GPU is "full-gpu"."""
    return "full-gpu" if check == "full" and device == "gpu" else check


def usable(cached, signature, mode):
    """Whether a cache row `(size, mtime_ns, mode, version, reason)` answers a check
    of `mode` for a file of `signature` `(size, mtime_ns)`: a pass of "full" (on the
    CPU, the strictest) answers every mode."""
    return (
        cached is not None and (cached[0], cached[1]) == tuple(signature)
        and cached[3] == VERSION
        and (cached[2] == mode or (cached[2] == "full" and cached[4] is None))
    )
