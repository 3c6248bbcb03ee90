"""Fixtures that write real image files, the test cache folder, the `gpu` marker's
skip rule, and how `--dist loadfile` shares the tests among pytest-xdist's workers.
Shared values and readers of the images are in `helpers.py`; how the suite is
organised and what it costs: `tests/README.md`.

Nothing here imports TensorFlow: the `gpu` tests run on machines without it.
"""

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest
from PIL import Image

from dalipipe.devices import dali_gpu_count
from dalipipe.utils import child_env
from helpers import CLASSES, NUM_INDEXED, NUM_TAGGED, indexed_color

_CACHE = None


def pytest_configure(config):
    # Caches and reports go to a fresh temporary folder, not the user's or the
    # repository's.
    global _CACHE
    if "DALIPIPE_CACHE_DIR" not in os.environ:
        _CACHE = tempfile.mkdtemp(prefix="dalipipe-test-cache-")
        os.environ["DALIPIPE_CACHE_DIR"] = _CACHE


def pytest_unconfigure(config):
    if _CACHE is not None:
        shutil.rmtree(_CACHE, ignore_errors=True)


# The test that executes the notebooks: each notebook is a unit of work of its own.
NOTEBOOK_RUNS = "tests/test_notebooks.py::test_notebook_runs_at_small_size["


def _unit(nodeid):
    """The unit of work that `nodeid` belongs to under `--dist loadfile`: its file, or
    for a notebook's execution that execution alone."""
    return nodeid if nodeid.startswith(NOTEBOOK_RUNS) else nodeid.split("::", 1)[0]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        _longest_first(items)
    if dali_gpu_count() > 0:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU that DALI can use")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)


def _longest_first(items):
    """Orders the units of work (`_unit`) as the workers take them, the long ones first,
    so that none starts when the others are nearly done: those with the most `slow`
    tests first, then the most tests. Each unit's tests keep their order. Every worker
    orders the same collection alike, as pytest-xdist requires."""
    units = {}
    for item in items:
        units.setdefault(_unit(item.nodeid), []).append(item)
    ranked = sorted(units.values(), key=lambda unit: (
        -sum(item.get_closest_marker("slow") is not None for item in unit), -len(unit)))
    items[:] = [item for unit in ranked for item in unit]


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook; plain pytest runs without it
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile`, with each notebook's execution a unit of its own (the notebooks
    would otherwise all run on one worker), the units taken in the order
    `_longest_first` gives the collection."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid):
            return _unit(nodeid)

    config.option.loadscopereorder = False
    return Scheduling(config, log)


@pytest.fixture(scope="session")
def backend_jobs(request, tagged_dir, tmp_path_factory):
    """`results(backend, mode)`: what `backend_job.py`'s `mode` returned on Keras's
    `backend`, on the CPU. The first call for a backend runs, in one process, every
    mode that the session's tests of that backend name with
    `@pytest.mark.backend_job(mode)` (a process start costs seconds). Under
    pytest-xdist the workers share that process's results, through a locked folder of
    the run's temporary root."""
    job = os.path.join(os.path.dirname(os.path.abspath(__file__)), "backend_job.py")
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # shared by the workers of this run
    found = {}

    def results(backend, mode):
        pytest.importorskip(backend)
        if backend not in found:
            folder = root / f"backend_jobs_{backend}"
            folder.mkdir(exist_ok=True)
            with open(folder / "lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                out = folder / "results.json"
                if not out.exists():
                    _run_backend_job(job, backend, _modes(request, backend), tagged_dir, out)
                found[backend] = json.loads(out.read_text())
        ran = found[backend]
        assert "process" not in ran, ran.get("process")
        assert "error" not in ran[mode], ran[mode]["error"]
        return ran[mode]["result"]

    return results


def _modes(request, backend):
    """The `backend_job` modes that the session's tests of `backend` name."""
    return sorted({m for item in request.session.items
                   for marker in item.iter_markers("backend_job") for m in marker.args
                   if getattr(item, "callspec", None) is not None
                   and item.callspec.params.get("backend") == backend})


def _run_backend_job(job, backend, modes, tagged_dir, out):
    """Runs `job` with `modes` on `backend`; a failed process leaves its stderr in `out`."""
    environ = child_env(KERAS_BACKEND=backend, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3")
    process = subprocess.run([sys.executable, job, "--modes", ",".join(modes), tagged_dir,
                              str(out)], env=environ, capture_output=True, text=True, timeout=900,
                             cwd=os.path.dirname(job))
    if process.returncode != 0:
        out.write_text(json.dumps({"process": process.stderr[-4000:]}))


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty cache folder for this test alone."""
    monkeypatch.setenv("DALIPIPE_CACHE_DIR", str(tmp_path / "cache"))
    return str(tmp_path / "cache")


@pytest.fixture(scope="session")
def indexed_dir(tmp_path_factory):
    """`NUM_INDEXED` solid-colour PNGs of varied sizes in 3 class folders.

    Image `i` has colour `indexed_color(i)`, lies in class `CLASSES[i % 3]` and is
    named so that the sorted order of the paths is the order of `i`.
    """
    root = tmp_path_factory.mktemp("indexed")
    for i in range(NUM_INDEXED):
        folder = root / CLASSES[i % 3]
        folder.mkdir(exist_ok=True)
        size = (20 + 3 * (i % 5), 16 + 2 * (i % 7))
        Image.new("RGB", size, indexed_color(i)).save(folder / f"img_{i:03d}.png")
    return str(root)


@pytest.fixture(scope="session")
def color_dir(tmp_path_factory):
    """90 noisy JPEGs (and a few PNGs) whose class is their dominant colour."""
    root = tmp_path_factory.mktemp("colors")
    rng = np.random.default_rng(0)
    for c, name in enumerate(CLASSES):
        (root / name).mkdir()
        for i in range(30):
            h, w = rng.integers(24, 64, size=2)
            pixels = rng.integers(0, 90, size=(h, w, 3))
            pixels[..., 2 - c] += 150  # blue, green, red dominant
            image = Image.fromarray(pixels.clip(0, 255).astype(np.uint8))
            suffix = "png" if i % 10 == 0 else "jpg"
            image.save(root / name / f"{name}_{i:02d}.{suffix}")
    return str(root)


@pytest.fixture(scope="session")
def photo_path(tmp_path_factory):
    """A smooth 120x160 RGB gradient photo saved as PNG (lossless), for pixel checks."""
    y, x = np.mgrid[0:120, 0:160]
    pixels = np.stack([x * 255 / 159, y * 255 / 119, (x + y) * 255 / 278], axis=-1)
    pixels += 20 * np.sin(x / 7.0)[..., None]
    path = tmp_path_factory.mktemp("photo") / "gradient.png"
    Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(path)
    return str(path)


@pytest.fixture(scope="session")
def tagged_dir(tmp_path_factory):
    """`NUM_TAGGED` PNGs, each identifiable from its pixels and learnable by class.

    Image `i`: top half the colour of class `CLASSES[i % 3]` (blue, green, red),
    bottom half grey `2 * i` (see `tag_of`).
    """
    root = tmp_path_factory.mktemp("tagged")
    for i in range(NUM_TAGGED):
        c = i % 3
        pixels = np.full((12, 12, 3), 2 * i, np.uint8)
        pixels[:6] = 30
        pixels[:6, :, 2 - c] = 220
        folder = root / CLASSES[c]
        folder.mkdir(exist_ok=True)
        Image.fromarray(pixels).save(folder / f"tag_{i:03d}.png")
    return str(root)


@pytest.fixture(scope="session")
def tagged_tfrecords(tagged_dir, tmp_path_factory):
    """`tagged_dir` converted to 3 TFRecord files; returns their glob pattern."""
    # Writing needs protobuf and google-crc32c, which a GPU machine's bundle may lack.
    pytest.importorskip("google.protobuf")
    pytest.importorskip("google_crc32c")
    from dalipipe import sources, tfrecord

    index = sources.index_source(tagged_dir)
    out = tmp_path_factory.mktemp("tagged_tfrecords")
    tfrecord.write_tfrecords(index.file_paths, index.labels, index.class_names, str(out),
                             num_shards=3)
    return str(out / "train-*.tfrecord")


@pytest.fixture(scope="session")
def s3_server():
    """A local S3 server (`s3_server.S3Server`), shared by the session, with the
    process's AWS variables pointing at it (`AWS_ENDPOINT_URL` and `ENVIRONMENT`), for
    boto3 and DALI alike. Each test module makes its own buckets."""
    from dalipipe import storage
    from s3_server import ENVIRONMENT, moto_server

    saved = {name: os.environ.get(name) for name in [*ENVIRONMENT, "AWS_ENDPOINT_URL"]}
    try:
        with moto_server() as server:
            os.environ.update(ENVIRONMENT, AWS_ENDPOINT_URL=server.endpoint)
            storage.reset_clients()
            yield server
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        storage.reset_clients()
