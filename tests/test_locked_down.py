"""Locked-down machines: no writable cache folder, read-only datasets, and several
processes checking the same files on one cold cache.

The tests run as root, which may write anywhere, so "read-only" is made without
permissions: a cache folder under a regular file, and read-only bind mounts (skipped
where `mount` is not allowed). What is written is watched with an audit hook, which
sees every write Python attempts, also those that fail.
"""

import contextlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings

import pytest
from PIL import Image

from dalipipe import checks, make_dali_pipeline, sources, tfrecord
from dalipipe.checks import cache as check_cache
from dalipipe.checks.driver import COUNTS
from dalipipe.utils import child_env

TRUNCATED = "bad_truncated.png"


def png_bytes(value, size=(6, 5)):
    buffer = io.BytesIO()
    Image.new("RGB", size, (value, 255 - value, 40)).save(buffer, format="PNG")
    return buffer.getvalue()


def make_images(root, count=12):
    """`count` PNGs in class folders a/ and b/, one of them truncated, and a table
    `labels.csv` of them with relative paths. Returns the paths, sorted."""
    paths = []
    for i in range(count):
        folder = os.path.join(root, "ab"[i % 2])
        os.makedirs(folder, exist_ok=True)
        data = png_bytes(10 * i)
        name = f"img_{i:02d}.png"
        if i == 3:
            data, name = data[: len(data) // 2], TRUNCATED
        path = os.path.join(folder, name)
        with open(path, "wb") as f:
            f.write(data)
        paths.append(path)
    with open(os.path.join(root, "labels.csv"), "w") as f:
        f.write("path,label\n")
        f.writelines(f"{os.path.relpath(p, root)},{os.path.basename(os.path.dirname(p))}\n"
                     for p in paths)
    return sorted(paths)


def cache_warnings(caught):
    return [w for w in caught if issubclass(w.category, RuntimeWarning)
            and "DALIPIPE_CACHE_DIR" in str(w.message)]


@contextlib.contextmanager
def read_only_mount(source, target):
    """`source` bind-mounted read-only at `target`; skips the test where not allowed."""
    os.makedirs(target, exist_ok=True)
    done = subprocess.run(["mount", "--bind", source, target], capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"a bind mount is not allowed here: {done.stderr.strip()}")
    try:
        done = subprocess.run(["mount", "-o", "remount,ro,bind", target], capture_output=True,
                              text=True)
        if done.returncode:
            pytest.skip(f"a read-only remount is not allowed here: {done.stderr.strip()}")
        yield target
    finally:
        subprocess.run(["umount", target], check=True)


class Writes:
    """The writes Python attempts under some folders, seen by an audit hook (which
    stays installed for the session, and watches only inside a `watching` block)."""

    folders = None
    seen = []

    @classmethod
    def hook(cls, event, args):
        if cls.folders is None:
            return
        if event == "open" and not cls._writes(*args[1:3]):
            return
        if event not in ("open", "os.mkdir", "os.rename", "os.replace", "os.remove",
                         "os.utime", "os.chmod", "sqlite3.connect", "os.truncate"):
            return
        for arg in args[:2]:
            if isinstance(arg, (str, bytes, os.PathLike)):
                path = os.path.abspath(os.fsdecode(arg))
                if any(path.startswith(folder) for folder in cls.folders):
                    cls.seen.append((event, path))

    @staticmethod
    def _writes(mode, flags):
        if isinstance(mode, str):
            return any(c in mode for c in "wax+")
        return bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC))

    @classmethod
    @contextlib.contextmanager
    def watching(cls, *folders):
        cls.folders, cls.seen = [os.path.abspath(f) + os.sep for f in folders], []
        try:
            yield cls.seen
        finally:
            cls.folders = None


sys.addaudithook(Writes.hook)


@pytest.fixture
def images(tmp_path):
    return make_images(str(tmp_path / "data"))


@pytest.fixture
def no_cache_folder(tmp_path, monkeypatch):
    """DALIPIPE_CACHE_DIR under a regular file: the folder can never be made."""
    (tmp_path / "a_file").write_bytes(b"")
    folder = str(tmp_path / "a_file" / "cache")
    monkeypatch.setenv("DALIPIPE_CACHE_DIR", folder)
    return folder


def test_no_cache_folder_warns_once_and_checks_uncached(images, no_cache_folder):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        before = COUNTS["computed"]
        bad = checks.check_files(images)
        again = checks.check_files(images)
        scanned = sources.index_source(os.path.dirname(os.path.dirname(images[0])))
    assert list(bad) == list(again) == [p for p in images if p.endswith(TRUNCATED)]
    (reason,) = bad.values()
    assert reason.startswith("truncated PNG")
    assert COUNTS["computed"] - before == 2 * len(images)  # no cache: checked twice
    assert len(scanned) == len(images)
    (warning,) = cache_warnings(caught)
    assert no_cache_folder in str(warning.message)


def test_read_only_cache_folder_warns_once_and_checks_uncached(images, tmp_path, monkeypatch):
    os.makedirs(tmp_path / "empty")
    with read_only_mount(str(tmp_path / "empty"), str(tmp_path / "cache")) as cache:
        monkeypatch.setenv("DALIPIPE_CACHE_DIR", cache)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert len(checks.check_files(images)) == 1
            with Writes.watching(cache) as seen:  # it was tried once, in the first call
                assert len(checks.check_files(images)) == 1
                checks.write_report({images[0]: "bad"}, len(images))
        assert len(cache_warnings(caught)) == 1
        assert seen == []


def test_report_goes_to_stderr_and_raise_or_skip_still_happen(images, no_cache_folder,
                                                              capsys):
    folder = os.path.dirname(os.path.dirname(images[0]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(ValueError, match=r"1 of 12 files.*Report: stderr \(no writable"):
            make_dali_pipeline(folder, device="cpu", verbose=False)
        assert TRUNCATED in capsys.readouterr().err
        with pytest.warns(UserWarning, match="Left out 1 of 12 files.*Report: stderr"):
            pipe = make_dali_pipeline(folder, device="cpu", verbose=False, on_bad_file="skip",
                                      image_size=(4, 4), batch_size=4)
    err = capsys.readouterr().err
    assert "bad-file report" in err and TRUNCATED in err
    assert len(pipe.file_paths) == 11


def test_no_cache_variable_turns_the_cache_off(images, tmp_path, monkeypatch, tagged_tfrecords):
    monkeypatch.setenv("DALIPIPE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("DALIPIPE_NO_CACHE", "1")
    before = COUNTS["computed"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        checks.check_files(images)
        checks.check_files(images)
        tfrecord.scan(tfrecord.tfrecord_files(tagged_tfrecords))
        report = checks.write_report({images[0]: "bad"}, len(images))
    assert COUNTS["computed"] - before == 2 * len(images)
    assert cache_warnings(caught) == []
    assert report == "stderr (DALIPIPE_NO_CACHE is set)"
    assert not os.path.exists(tmp_path / "cache")


def test_read_only_dataset_folder_table_and_tfrecords(images, tmp_path, monkeypatch,
                                                     tagged_tfrecords):
    data = os.path.dirname(os.path.dirname(images[0]))
    shards = tfrecord.tfrecord_files(tagged_tfrecords)
    os.makedirs(os.path.join(data, "records"))
    for shard in shards:  # without their indexes: those must go to the cache
        shutil.copy(shard, os.path.join(data, "records"))
    cache = str(tmp_path / "cache")
    monkeypatch.setenv("DALIPIPE_CACHE_DIR", cache)
    with read_only_mount(data, str(tmp_path / "ro")) as ro:
        records = os.path.join(ro, "records", "*.tfrecord")
        with Writes.watching(ro) as seen, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for source, labels, count in (
                    (ro, "inferred", 11), (os.path.join(ro, "labels.csv"), "label", 11),
                    (records, "inferred", len(sources.index_source(tagged_tfrecords)))):
                pipe = make_dali_pipeline(source, labels=labels, device="cpu", verbose=False,
                                          batch_size=4, on_bad_file="skip", image_size=(4, 4),
                                          shuffle=False)
                assert len(pipe.file_paths) == count
                batches = list(pipe.epoch())
                assert sum(len(b[0]) for b in batches) == count
        assert seen == []
        assert not [w for w in caught if "DALIPIPE_CACHE_DIR" in str(w.message)]
        assert len(os.listdir(os.path.join(cache, "tfrecord-index"))) == len(shards)
        assert sorted(os.listdir(os.path.join(ro, "records"))) == sorted(
            os.path.basename(s) for s in shards)


def test_read_only_tfrecords_without_cache_keep_their_index_in_memory(
        tmp_path, no_cache_folder, tagged_tfrecords):
    os.makedirs(tmp_path / "records")
    for shard in tfrecord.tfrecord_files(tagged_tfrecords):
        shutil.copy(shard, tmp_path / "records")
    with read_only_mount(str(tmp_path / "records"), str(tmp_path / "ro")) as ro:
        shards = tfrecord.tfrecord_files(os.path.join(ro, "*.tfrecord"))
        with warnings.catch_warnings(record=True) as caught, Writes.watching(ro) as seen:
            warnings.simplefilter("always")
            found = tfrecord.scan(shards)
            bad = checks.bad_files(checks.check_index(sources.index_source(shards),
                                                      read_records=tfrecord.load_encoded))
        assert len(found) == len(sources.index_source(tagged_tfrecords)) and bad == {}
        assert seen == []
        assert len(cache_warnings(caught)) == 1
        with pytest.raises(OSError, match="cannot be written in the cache folder"):
            tfrecord.ensure_indexes(shards)


# A process of the shared-cache tests: waits for the file `start` names, checks the
# files listed in `paths.json`, and prints what it computed. With VICTIM set it says
# when it is inside the first chunk it claims, then sleeps there until killed.
JOB = r"""
import json, os, sys, time
from dalipipe import checks
from dalipipe.checks import driver

folder, start = sys.argv[1:]
paths = json.load(open(os.path.join(folder, "paths.json")))
if os.environ.get("VICTIM"):
    def inside_until_killed(chunk, **how):
        open(os.path.join(folder, "victim-inside"), "w").close()
        time.sleep(60)
    driver._judge = inside_until_killed
while not os.path.exists(os.path.join(folder, start)):
    time.sleep(0.005)
bad = checks.check_files(paths)
print(json.dumps({"computed": driver.COUNTS["computed"], "bad": sorted(bad)}))
"""


def start_job(folder, start, **variables):
    return subprocess.Popen([sys.executable, "-c", JOB, folder, start], stdout=subprocess.PIPE,
                            text=True, env=child_env(**variables))


@pytest.fixture
def many_files(tmp_path, monkeypatch):
    """2,000 small PNGs (10 of them truncated), listed in `paths.json`, and a cold
    cache. Returns (folder, paths, the bad ones)."""
    monkeypatch.setenv("DALIPIPE_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "files"
    folder.mkdir()
    good = png_bytes(80, size=(4, 4))
    paths, bad = [], []
    for i in range(2000):
        path = str(folder / f"{i:04d}.png")
        with open(path, "wb") as f:
            f.write(good[:30] if i % 200 == 7 else good)
        paths.append(path)
        if i % 200 == 7:
            bad.append(path)
    with open(tmp_path / "paths.json", "w") as f:
        json.dump(paths, f)
    return str(tmp_path), paths, bad


def test_four_processes_on_a_cold_cache_check_each_file_once(many_files):
    folder, paths, bad = many_files
    jobs = [start_job(folder, "go") for _ in range(4)]
    time.sleep(0.5)  # let them import and wait at the start line
    open(os.path.join(folder, "go"), "w").close()
    results = [json.loads(job.communicate(timeout=120)[0]) for job in jobs]
    print("verdicts computed per process:", [result["computed"] for result in results])
    assert all(job.returncode == 0 for job in jobs)
    assert all(result["bad"] == bad for result in results)
    assert sum(result["computed"] for result in results) == len(paths)  # about one check
    before = COUNTS["computed"]
    assert sorted(checks.check_files(paths)) == bad
    assert COUNTS["computed"] == before  # all in the cache


def test_a_process_killed_mid_check_loses_nothing(many_files):
    folder, paths, bad = many_files
    # The victim claims a chunk first; the others start once it is inside it.
    jobs = [start_job(folder, "go", VICTIM="1")]
    jobs += [start_job(folder, "victim-inside") for _ in range(3)]
    open(os.path.join(folder, "go"), "w").close()
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(folder, "victim-inside")):
        assert time.monotonic() < deadline and jobs[0].poll() is None
        time.sleep(0.01)
    jobs[0].send_signal(signal.SIGKILL)  # inside its claimed chunk, nothing committed
    assert jobs[0].wait() == -signal.SIGKILL
    results = [json.loads(job.communicate(timeout=120)[0]) for job in jobs[1:]]
    assert all(result["bad"] == bad for result in results)
    assert sum(result["computed"] for result in results) == len(paths)
    before = COUNTS["computed"]
    assert sorted(checks.check_files(paths)) == bad
    assert COUNTS["computed"] == before


def test_claims_of_gone_or_old_processes_are_taken_over(tmp_path, monkeypatch):
    monkeypatch.setenv("DALIPIPE_CACHE_DIR", str(tmp_path / "cache"))
    cache = check_cache.open_cache()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        row = (other.pid, time.time() + 5)
        cache.db.execute("INSERT INTO claims VALUES ('a', 'other', ?, ?, ?)",
                         (socket.gethostname(), *row))
        assert not cache.claim("a", "me")  # a running process's fresh claim
        cache.db.execute("UPDATE claims SET claimed_at = ?",
                         (time.time() - check_cache.LEASE_S - 1,))
        assert cache.claim("a", "me")  # too old
        cache.db.execute("UPDATE claims SET owner = 'other', pid = ?, claimed_at = ?", row)
        assert not cache.claim("a", "me")
    finally:
        other.kill()
        other.wait()
    assert cache.claim("a", "me")  # its process is gone
    assert cache.claim("a", "me")  # and now it is mine
    cache.close()


AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


def skip_unless_nobody_runs_this_python():
    """Skips, saying why, unless the user nobody can start this Python and read its
    packages (a virtual environment inside a folder only its owner may enter, such as
    a clone in /root or in a `mktemp -d` folder, is closed to nobody)."""
    probe = ("import json, os, site, sys\n"
             "print(json.dumps([sys.prefix, [p for p in site.getsitepackages()\n"
             "                               if os.access(p, os.R_OK | os.X_OK)]]))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(AS_NOBODY + [sys.executable, "-c", probe], capture_output=True,
                          text=True, timeout=60, env={**env, "HOME": "/nonexistent"})
    if done.returncode:
        why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        pytest.skip(f"the user nobody cannot start this Python, {sys.executable}: {why}")
    prefix, readable = json.loads(done.stdout)
    import site

    unreadable = [p for p in site.getsitepackages() if os.path.isdir(p) and p not in readable]
    if prefix != sys.prefix or unreadable:
        pytest.skip(f"the user nobody cannot read this Python's packages, in {sys.prefix}: "
                    f"{unreadable or f'its Python runs from {prefix}'}")


def readable_copy_of_dalipipe(folder):
    """A copy of the `dalipipe` this process imports (the checkout's, say, which may
    lie where nobody cannot read it), in `folder`, readable by every user. Returns the
    folder for `PYTHONPATH`."""
    import dalipipe

    shutil.copytree(os.path.dirname(os.path.abspath(dalipipe.__file__)),
                    os.path.join(folder, "dalipipe"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    for parent, folders, files in os.walk(folder):
        os.chmod(parent, 0o755)
        for name in files:
            os.chmod(os.path.join(parent, name), 0o644)
    return folder


def test_an_unprivileged_user_with_a_read_only_cache_and_dataset(tagged_tfrecords):
    if shutil.which("setpriv") is None or os.geteuid() != 0:
        pytest.skip("needs setpriv, run as root, to start a process as the user nobody")
    skip_unless_nobody_runs_this_python()
    root = tempfile.mkdtemp(prefix="dalipipe-nobody-")  # outside pytest's private folder
    try:
        os.chmod(root, 0o755)
        code = readable_copy_of_dalipipe(os.path.join(root, "code"))
        images = make_images(os.path.join(root, "data"))
        for shard in tfrecord.tfrecord_files(tagged_tfrecords):
            shutil.copy(shard, os.path.join(root, "data"))
        os.makedirs(os.path.join(root, "cache"))  # root's: nobody cannot write there
        before = sorted(os.listdir(os.path.join(root, "data")))
        script = (
            "import json, sys, warnings\n"
            "import dalipipe\n"
            "from dalipipe import checks, tfrecord\n"
            "warnings.simplefilter('always')\n"
            "with warnings.catch_warnings(record=True) as caught:\n"
            "    bad = checks.check_files(json.loads(sys.argv[1]))\n"
            "    records = tfrecord.scan(tfrecord.tfrecord_files(sys.argv[2]))\n"
            "print(json.dumps([dalipipe.__file__, sorted(bad), len(records),\n"
            "                  [str(w.message) for w in caught]]))\n"
        )
        done = subprocess.run(
            AS_NOBODY + [sys.executable, "-c", script, json.dumps(images),
                         os.path.join(root, "data", "*.tfrecord")],
            capture_output=True, text=True, timeout=120, cwd=root,  # not the checkout
            env=child_env(DALIPIPE_CACHE_DIR=os.path.join(root, "cache"), HOME="/nonexistent",
                          PYTHONPATH=code),
        )
        assert done.returncode == 0, done.stderr
        imported, bad, count, messages = json.loads(done.stdout)
        assert imported == os.path.join(code, "dalipipe", "__init__.py")  # the copy
        assert bad == [p for p in images if p.endswith(TRUNCATED)]
        assert count == len(sources.index_source(tagged_tfrecords))
        assert len(messages) == 1 and os.path.join(root, "cache") in messages[0]
        assert sorted(os.listdir(os.path.join(root, "data"))) == before
        assert os.listdir(os.path.join(root, "cache")) == []
    finally:
        shutil.rmtree(root)
