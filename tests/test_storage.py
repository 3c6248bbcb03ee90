"""Object storage (`dalipipe.storage`) against a real S3 server on 127.0.0.1: the
session's `s3_server` (`tests/s3_server.py`), with a bucket of JPEGs made here.

`gs://` runs against a local GCS emulator (`gcs_emulator`, `gcp-storage-emulator`
from the test extra), with its URIs and its missing-client error.
"""

import hashlib
import io
import os
import pathlib
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from PIL import Image

from dalipipe import storage
from s3_server import free_port, moto_server

BUCKET = "photos"
# key under s3://photos/data/ -> (height, width, colour)
IMAGES = {
    "cats/1.jpg": (24, 32, (200, 30, 30)),
    "cats/2.jpg": (20, 20, (190, 40, 20)),
    "cats/z/3.jpg": (16, 24, (180, 50, 10)),
    "cats-b/4.jpg": (18, 18, (30, 200, 30)),
    "dogs/5.jpg": (30, 16, (30, 30, 200)),
}


def _jpeg(height, width, colour):
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), colour).save(buffer, format="JPEG", quality=95)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def photos(s3_server):
    """`s3_server` with the bucket `photos` filled with `IMAGES` (under `data/`), a
    folder marker and a CSV file, and an empty bucket."""
    client = s3_server.client()
    client.create_bucket(Bucket=BUCKET)
    for key, spec in IMAGES.items():
        client.put_object(Bucket=BUCKET, Key=f"data/{key}", Body=_jpeg(*spec))
    client.put_object(Bucket=BUCKET, Key="data/dogs/", Body=b"")  # a folder marker
    client.put_object(Bucket=BUCKET, Key="data.csv", Body=b"path,label\ncats/1.jpg,cats\n")
    client.create_bucket(Bucket="empty")
    return s3_server


def _uri(key):
    return f"s3://{BUCKET}/data/{key}"


# --- URIs ---------------------------------------------------------------------------


def test_is_remote():
    assert storage.is_remote("s3://bucket/key") and storage.is_remote("gs://bucket/key")
    assert not storage.is_remote("/data/cats/1.jpg")
    assert not storage.is_remote("cats/1.jpg")
    assert not storage.is_remote(b"/data/x.jpg")
    assert not storage.is_remote("/data/a://b.jpg") and not storage.is_remote("a b://c")
    for other in ("http://host/x.jpg", "hdfs://cluster/x", "S3://bucket/key"):
        with pytest.raises(ValueError, match=f"Received: '{other}'"):
            storage.is_remote(other)
    with pytest.raises(ValueError, match="'s3:/bucket/key' looks like .* collapsed"):
        storage.is_remote(pathlib.Path("s3://bucket/key"))


def test_split_uri():
    assert storage.split_uri("s3://bucket/a/b.jpg") == ("s3", "bucket", "a/b.jpg")
    assert storage.split_uri("gs://bucket") == ("gs", "bucket", "")
    with pytest.raises(ValueError, match="name a bucket"):
        storage.split_uri("s3:///key")
    with pytest.raises(ValueError, match="Received: '/local/path'"):
        storage.split_uri("/local/path")


def test_join():
    assert storage.join("s3://b/photos", "cats/1.jpg") == "s3://b/photos/cats/1.jpg"
    assert storage.join("s3://b/photos/", "./cats/../dogs/2.jpg") == "s3://b/photos/dogs/2.jpg"
    assert storage.join("gs://b", "x.png") == "gs://b/x.png"
    assert storage.join("s3://b/photos", "gs://c/y.jpg") == "gs://c/y.jpg"
    assert storage.join("s3://b/photos", "/local/y.jpg") == "/local/y.jpg"
    with pytest.raises(ValueError, match=r"root='s3://b/photos' and the path '../../x.jpg'"):
        storage.join("s3://b/photos", "../../x.jpg")
    with pytest.raises(ValueError, match="Received: '/local'"):
        storage.join("/local", "x.jpg")


def test_object_uri_must_name_an_object():
    with pytest.raises(ValueError, match="not of a folder. Received: 's3://b/photos/'"):
        storage.read_object("s3://b/photos/")


# --- Missing clients ----------------------------------------------------------------


@pytest.mark.parametrize("scheme, module, extra", [
    ("s3", "boto3", "s3"), ("gs", "google.cloud.storage", "gcs"),
])
def test_missing_client_names_the_extra(monkeypatch, scheme, module, extra):
    # `import module` raises ImportError, also where another test imported it (and its
    # submodules) before: the parent package then holds it as an attribute.
    for name in [n for n in sys.modules if n == module or n.startswith(module + ".")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, module, None)
    parent, _, child = module.rpartition(".")
    if parent in sys.modules and sys.modules[parent] is not None:
        monkeypatch.delattr(sys.modules[parent], child, raising=False)
    storage.reset_clients()
    try:
        with pytest.raises(ImportError, match=rf"pip install 'dalipipe\[{extra}\]'"):
            storage.list_objects(f"{scheme}://bucket/photos")
        with pytest.raises(ImportError, match=rf"pip install 'dalipipe\[{extra}\]'"):
            storage.read_object(f"{scheme}://bucket/photos/1.jpg")
    finally:
        storage.reset_clients()


# --- Listing ------------------------------------------------------------------------


def test_list_objects(photos):
    found = storage.list_objects(f"s3://{BUCKET}/data")
    # A local folder's walk order: folders sorted by path, then files by name
    # ("cats" < "cats-b" < "cats/z", as os.walk's sorted dirpaths).
    assert [o.key for o in found] == [
        "cats/1.jpg", "cats/2.jpg", "cats-b/4.jpg", "cats/z/3.jpg", "dogs/5.jpg"]
    for info in found:
        data = _jpeg(*IMAGES[info.key])
        assert info.size == len(data)
        assert info.etag == hashlib.md5(data).hexdigest()  # a single-part upload's ETag
    assert storage.list_objects(f"s3://{BUCKET}/data/") == found
    assert [o.key for o in storage.list_objects(f"s3://{BUCKET}/data/cats/z")] == ["3.jpg"]
    whole = storage.list_objects(f"s3://{BUCKET}")
    assert [o.key for o in whole] == ["data.csv"] + [f"data/{o.key}" for o in found]


def test_list_objects_errors(photos):
    with pytest.raises(ValueError, match="No such bucket 'nowhere' for 's3://nowhere/data'"):
        storage.list_objects("s3://nowhere/data")
    with pytest.raises(ValueError, match="No objects found under 's3://empty'"):
        storage.list_objects("s3://empty")
    # A prefix is a folder: "dat" does not list "data/...".
    with pytest.raises(ValueError, match=f"No objects found under 's3://{BUCKET}/dat'"):
        storage.list_objects(f"s3://{BUCKET}/dat")


# --- Reading ------------------------------------------------------------------------


def test_read_and_stat(photos):
    data = _jpeg(*IMAGES["dogs/5.jpg"])
    assert storage.read_object(_uri("dogs/5.jpg")) == data
    info = storage.stat(_uri("dogs/5.jpg"))
    assert info == (_uri("dogs/5.jpg"), len(data), hashlib.md5(data).hexdigest())
    assert storage.read_object(f"s3://{BUCKET}/data.csv").decode().splitlines()[0] == "path,label"


def test_ranged_reads(photos):
    data = _jpeg(*IMAGES["cats/1.jpg"])
    uri = _uri("cats/1.jpg")
    assert storage.read_object(uri, 0, 2) == data[:2] == b"\xff\xd8"
    assert storage.read_object(uri, 100, 50) == data[100:150]
    assert storage.read_object(uri, len(data) - 2, 10) == data[-2:] == b"\xff\xd9"
    assert storage.read_object(uri, 10) == data[10:]
    assert storage.read_object(uri, 5, 0) == b""
    with pytest.raises(ValueError, match="starts past its end"):
        storage.read_object(uri, len(data) + 10, 4)
    with pytest.raises(ValueError, match="offset=-1"):
        storage.read_object(uri, -1, 4)


def test_missing_objects(photos):
    with pytest.raises(FileNotFoundError, match=f"No such object: '{_uri('cats/404.jpg')}'"):
        storage.read_object(_uri("cats/404.jpg"))
    with pytest.raises(FileNotFoundError, match=f"'{_uri('cats/404.jpg')}'"):
        storage.stat(_uri("cats/404.jpg"))
    with pytest.raises(FileNotFoundError, match="No such bucket 'nowhere'"):
        storage.read_object("s3://nowhere/x.jpg")
    assert storage.stat_objects([_uri("cats/1.jpg"), _uri("cats/404.jpg")])[1] is None


def test_map_objects_reads_each_object_once(photos):
    uris = [_uri(key) for key in IMAGES] + [_uri("cats/404.jpg")]
    calls = []

    def verdict(uri, data):
        calls.append(uri)
        return None if data is None else (len(data), data[:2], data[-2:])

    results = storage.map_objects(uris, verdict, max_workers=3, verbose=False)
    assert sorted(calls) == sorted(uris)
    assert results[-1] is None
    for key, result in zip(IMAGES, results):
        assert result == (len(_jpeg(*IMAGES[key])), b"\xff\xd8", b"\xff\xd9")
    assert storage.read_objects(uris[:2]) == [_jpeg(*IMAGES[k]) for k in list(IMAGES)[:2]]


def test_reads_share_one_pool_of_threads(photos):
    """Every read runs on the process's storage pool, whose threads outlive a batch of
    reads, at most `max_workers` at once."""
    import threading

    uris = [_uri(key) for key in IMAGES] * 8
    running, most, lock = [0], [0], threading.Lock()

    def thread_of(uri, data):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        name = threading.current_thread().name
        with lock:
            running[0] -= 1
        return name

    first = storage.map_objects(uris, thread_of, max_workers=3, verbose=False)
    alive = {t.name for t in threading.enumerate()}
    second = storage.map_objects(uris, thread_of, verbose=False)
    assert all(name.startswith("dalipipe-storage") for name in first + second)
    assert set(first) <= alive
    assert most[0] <= storage.MAX_WORKERS
    most[0] = 0
    storage.map_objects(uris, thread_of, max_workers=2, verbose=False)
    assert most[0] <= 2
    assert len([t for t in threading.enumerate()
                if t.name.startswith("dalipipe-storage")]) <= storage.MAX_WORKERS


@pytest.mark.parametrize("max_workers", [0, storage.MAX_WORKERS + 1])
def test_max_workers_is_bounded_by_the_pool(photos, max_workers):
    with pytest.raises(ValueError, match=f"`max_workers` must be between 1 and "
                                         f"{storage.MAX_WORKERS} .* max_workers={max_workers}"):
        storage.read_objects([_uri("cats/1.jpg")], max_workers=max_workers)


def test_a_failed_read_stops_the_reads_not_started(photos, monkeypatch):
    """The first failure is raised; the objects after it are not read."""
    uris = [_uri(key) for key in IMAGES] * 4
    calls = []

    def fail_on_the_second(uri, data):
        calls.append(uri)
        if len(calls) == 2:
            raise PermissionError("denied")
        return uri

    with pytest.raises(PermissionError, match="denied"):
        storage.map_objects(uris, fail_on_the_second, max_workers=1, verbose=False)
    assert len(calls) == 2


def test_s3_client_keeps_a_connection_per_thread_and_more(photos):
    storage.read_object(_uri("cats/1.jpg"))
    client = storage._backend("s3").client
    assert client.meta.config.max_pool_connections == storage.CONNECTIONS >= storage.MAX_WORKERS


def test_unreachable_endpoint_fails_fast(photos, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    storage.reset_clients()
    try:
        start = time.monotonic()
        with pytest.raises(ConnectionError, match=f"for 's3://{BUCKET}/data'"):
            storage.list_objects(f"s3://{BUCKET}/data")
        with pytest.raises(ConnectionError, match=f"for '{_uri('cats/1.jpg')}'"):
            storage.read_object(_uri("cats/1.jpg"))
        assert time.monotonic() - start < 30
    finally:
        monkeypatch.undo()
        storage.reset_clients()


def test_wrong_credentials(photos, monkeypatch):
    """A server that checks signatures (moto with IAM checks on) rejects unknown keys."""
    with moto_server(INITIAL_NO_AUTH_ACTION_COUNT="0") as checking:
        monkeypatch.setenv("AWS_ENDPOINT_URL", checking.endpoint)
        storage.reset_clients()
        try:
            with pytest.raises(PermissionError, match=rf"Access denied to 's3://{BUCKET}/data' \(InvalidAccessKeyId\)"):
                storage.list_objects(f"s3://{BUCKET}/data")
            with pytest.raises(PermissionError, match=f"Access denied to '{_uri('cats/1.jpg')}'"):
                storage.read_object(_uri("cats/1.jpg"))
        finally:
            monkeypatch.undo()
            storage.reset_clients()


def test_missing_credentials(photos, monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    storage.reset_clients()
    try:
        with pytest.raises(PermissionError, match=f"No AWS credentials found for 's3://{BUCKET}/data'"):
            storage.list_objects(f"s3://{BUCKET}/data")
    finally:
        monkeypatch.undo()
        storage.reset_clients()


# --- DALI reads the same URIs -------------------------------------------------------


def test_dali_reads_and_decodes_s3_uris(photos):
    """`fn.io.file.read` fetches `s3://` URIs from the server the environment names,
    given as dalipipe's packed sample rows (label, then the NUL-padded path)."""
    pytest.importorskip("nvidia.dali")
    from nvidia.dali import fn, pipeline_def, types

    from dalipipe.feed import pack_paths

    keys = list(IMAGES)
    rows = pack_paths([_uri(k) for k in keys], np.arange(len(keys), dtype=np.int32))

    @pipeline_def(batch_size=len(keys), num_threads=2, device_id=None)
    def read():
        samples = fn.external_source(source=lambda: list(rows), dtype=types.UINT8, batch=True)
        encoded = fn.io.file.read(samples[4:])
        return encoded, fn.decoders.image(encoded, device="cpu", output_type=types.RGB)

    pipe = read()
    pipe.build()
    encoded, images = pipe.run()
    for i, key in enumerate(keys):
        height, width, colour = IMAGES[key]
        assert bytes(np.asarray(encoded[i])) == _jpeg(height, width, colour)
        image = np.asarray(images[i])
        assert image.shape == (height, width, 3)
        np.testing.assert_allclose(image.reshape(-1, 3).mean(0), colour, atol=4)


def test_server_that_stops_answering_fails_in_bounded_time(photos, monkeypatch):
    """A server that accepts connections and never answers: the read times out."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # connections complete in the kernel, and nothing answers
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{silent.getsockname()[1]}")
        monkeypatch.setattr(storage, "READ_TIMEOUT", 1)
        storage.reset_clients()
        try:
            start = time.monotonic()
            with pytest.raises(ConnectionError, match=f"for '{_uri('cats/1.jpg')}'"):
                storage.read_object(_uri("cats/1.jpg"))
            assert time.monotonic() - start < 3 * storage.ATTEMPTS
        finally:
            monkeypatch.undo()
            storage.reset_clients()


# --- gs:// without a server ---------------------------------------------------------


def _gcs_environment(monkeypatch, **variables):
    pytest.importorskip("google.cloud.storage", reason="needs pip install 'dalipipe[gcs]'")
    for name in ("GOOGLE_APPLICATION_CREDENTIALS", "DALI_GCS_ENDPOINT_URL",
                 "CLOUD_STORAGE_EMULATOR_ENDPOINT", "STORAGE_EMULATOR_HOST", "DALI_GCS_ANONYMOUS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(storage, "READ_TIMEOUT", 1)
    storage.reset_clients()


def test_gcs_unreachable_endpoint(monkeypatch):
    """DALI's variables point the GCS client at a closed port of 127.0.0.1."""
    _gcs_environment(monkeypatch, DALI_GCS_ANONYMOUS="1",
                     DALI_GCS_ENDPOINT_URL=f"http://127.0.0.1:{free_port()}")
    try:
        start = time.monotonic()
        with pytest.raises(ConnectionError, match="for 'gs://bucket/photos'"):
            storage.list_objects("gs://bucket/photos")
        assert time.monotonic() - start < 30
    finally:
        monkeypatch.undo()
        storage.reset_clients()


@pytest.fixture
def gcs_emulator(monkeypatch, tmp_path):
    """A local GCS emulator (`gcp-storage-emulator`, in the test extra) on a free port
    of 127.0.0.1 with the bucket `photos`, and DALI's GCS variables pointing at it;
    returns its request log's path."""
    pytest.importorskip("gcp_storage_emulator", reason="needs pip install gcp-storage-emulator")
    port = free_port()
    log = tmp_path / "gcs.log"
    with open(log, "ab") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "gcp_storage_emulator", "start", "--host", "127.0.0.1",
             "--port", str(port), "--in-memory", "--default-bucket", "photos"],
            stdout=out, stderr=subprocess.STDOUT)
    try:
        _gcs_environment(monkeypatch, DALI_GCS_ANONYMOUS="1",
                         DALI_GCS_ENDPOINT_URL=f"http://127.0.0.1:{port}")
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
        yield log
    finally:
        server.terminate()
        server.wait(10)
        storage.reset_clients()


def test_gcs_listing_and_reads_on_an_emulator(gcs_emulator):
    """dalipipe's GCS client lists and reads; DALI 2.4's fn.io.file.read asks for the
    object's name with a NUL byte appended (`%00`), which is why dalipipe reads `gs://`
    objects itself (`storage.remote_sources.read_in_python`)."""
    pytest.importorskip("nvidia.dali")
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage as gcs
    from nvidia.dali import fn, pipeline_def, types

    client = gcs.Client(project="test", credentials=AnonymousCredentials(),
                        client_options={"api_endpoint": os.environ["DALI_GCS_ENDPOINT_URL"]})
    for key in ("cats/1.jpg", "cats/z/3.jpg", "dogs/5.jpg"):
        client.bucket("photos").blob(f"data/{key}").upload_from_string(_jpeg(*IMAGES[key]))
    found = storage.list_objects("gs://photos/data")
    assert [o.key for o in found] == ["cats/1.jpg", "cats/z/3.jpg", "dogs/5.jpg"]
    assert found[0].size == len(_jpeg(*IMAGES["cats/1.jpg"]))
    assert storage.read_object("gs://photos/data/dogs/5.jpg") == _jpeg(*IMAGES["dogs/5.jpg"])
    assert storage.read_object("gs://photos/data/dogs/5.jpg", 0, 2) == b"\xff\xd8"
    with pytest.raises(FileNotFoundError, match="No such object: 'gs://photos/data/404.jpg'"):
        storage.read_object("gs://photos/data/404.jpg")

    # The NUL is DALI's, not the padding of dalipipe's rows: the name alone, of its exact
    # length, as a row's slice (dalipipe's graph) and as the whole input, is asked for so.
    path = np.frombuffer(b"\0\0\0\0gs://photos/data/dogs/5.jpg", np.uint8)
    for start in (4, 0):

        @pipeline_def(batch_size=1, num_threads=1, device_id=None)
        def read():
            row = fn.external_source(source=lambda: [path[4 - start:]], dtype=types.UINT8,
                                     batch=True)
            return fn.io.file.read(row[start:])

        pipe = read()
        with pytest.raises(RuntimeError, match="GCS object not found. bucket=photos object=data/dogs/5.jpg"):
            pipe.build()
            pipe.run()
    assert gcs_emulator.read_text().count("/o/data%2Fdogs%2F5.jpg%00 ") >= 2
    assert "/o/data%2Fdogs%2F5.jpg " not in gcs_emulator.read_text()  # never the right name


def test_gcs_client_keeps_a_connection_per_thread_and_more(gcs_emulator):
    """requests keeps 10 connections per host unless told: the GCS client's session
    keeps `storage.CONNECTIONS`, for the pool's `MAX_WORKERS` threads."""
    session = storage._backend("gs").client._http
    for prefix in ("http://", "https://"):
        pool = session.get_adapter(prefix + "127.0.0.1").poolmanager
        assert pool.connection_pool_kw["maxsize"] == storage.CONNECTIONS >= storage.MAX_WORKERS


def _upload_gcs(folder, prefix):
    """Every file under `folder` into the emulator's bucket `photos`, under `prefix`."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage as gcs

    client = gcs.Client(project="test", credentials=AnonymousCredentials(),
                        client_options={"api_endpoint": os.environ["DALI_GCS_ENDPOINT_URL"]})
    for path in sorted(pathlib.Path(folder).rglob("*.png")):
        key = f"{prefix}/{path.relative_to(folder).as_posix()}"
        client.bucket("photos").blob(key).upload_from_filename(str(path))
    return client.bucket("photos")


@pytest.mark.slow  # fit from an emulator; the emulator's listing and reads are quick
def test_training_from_gcs_equals_the_local_folder(gcs_emulator, tagged_dir, tmp_path):
    """A `gs://` prefix: dalipipe reads the objects and feeds their bytes to the graph;
    each epoch's images, labels and order are those of the local copy, through the
    native runner and through TensorFlow's `fit`; with masks (each record carries its
    mask's path), through format "tf"."""
    from dalipipe import make_dali_dataset, make_dali_pipeline
    from helpers import tag_of

    _upload_gcs(tagged_dir, "tagged")
    options = dict(image_size=(12, 12), batch_size=8, seed=4, augment=True, verbose=False,
                   device="cpu")
    remote = make_dali_pipeline("gs://photos/tagged/", **options)
    local = make_dali_pipeline(tagged_dir, **options)
    assert remote.feeds_bytes and not local.feeds_bytes
    assert remote.class_names == local.class_names and len(remote.file_paths) == 121
    assert remote.file_paths[0].startswith("gs://photos/tagged/")
    for epoch in (0, 1):
        for (x, y), (lx, ly) in zip(remote.epoch(epoch), local.epoch(epoch)):
            np.testing.assert_array_equal(x, lx)
            np.testing.assert_array_equal(y, ly)
    # A table of the objects' URIs with float32 targets: the targets travel before
    # the image's length and bytes.
    pd = pytest.importorskip("pandas")
    from helpers import tagged_targets

    table = pd.DataFrame(tagged_targets(tagged_dir))
    table["path"] = ["gs://photos/tagged/" + os.path.relpath(p, tagged_dir) for p in table["path"]]
    raw = make_dali_pipeline(table, label_columns=["half", "square"], label_mode="raw",
                             **dict(options, augment=False))
    for images, targets in raw.epoch(0):
        tags = np.array([tag_of(image) for image in images])
        np.testing.assert_allclose(targets, np.stack([tags / 2, (tags / 10) ** 2], 1),
                                   rtol=1e-6)
    keras = pytest.importorskip("keras")
    dataset = make_dali_dataset("gs://photos/tagged/", **options)
    tags = [tag_of(image) for images, _ in dataset for image in images.numpy()]
    assert tags == [tag_of(image) for images, _ in local.epoch(0) for image in images]
    model = keras.Sequential([keras.Input((12, 12, 3)), keras.layers.Flatten(),
                              keras.layers.Dense(3)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(dataset, epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    # Images with masks, both in `gs://`: one record per sample, and a partial last
    # batch (6 images in batches of 4).
    from dalipipe.annotations.sample import MASK_CLASS_NAMES
    from dalipipe.sample_data import make_dense_sample_dataset

    dense = tmp_path / "dense"
    make_dense_sample_dataset(str(dense), num_images=6, seed=1, crop_width=(48, 64))
    _upload_gcs(dense, "dense")
    masks = dict(options, batch_size=4, class_names=list(MASK_CLASS_NAMES))
    local = make_dali_pipeline(str(dense / "images"), masks=str(dense / "masks"), **masks)
    dataset = make_dali_dataset("gs://photos/dense/images", masks="gs://photos/dense/masks",
                                format="tf", **masks)
    got = [np.concatenate(parts) for parts in zip(*((x.numpy(), y.numpy()) for x, y in dataset))]
    expected = [np.concatenate(parts) for parts in zip(*local.epoch(0))]
    assert (expected[1] > 0).any()
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_gcs_object_deleted_during_training_is_named(gcs_emulator, tagged_dir):
    from dalipipe import make_dali_pipeline

    bucket = _upload_gcs(os.path.join(tagged_dir, "red"), "deleted/red")
    pipe = make_dali_pipeline("gs://photos/deleted/", image_size=(8, 8), batch_size=4,
                              shuffle=False, device="cpu", verbose=False)
    gone = pipe.file_paths[-1]
    bucket.blob(gone[len("gs://photos/"):]).delete()
    with pytest.raises(RuntimeError, match=f"{gone} was found before training and cannot be "
                                           "read now .does not exist."):
        list(pipe.epoch())


def test_gcs_without_credentials(monkeypatch, tmp_path):
    _gcs_environment(monkeypatch, GOOGLE_APPLICATION_CREDENTIALS=str(tmp_path / "none.json"),
                     NO_GCE_CHECK="true", GCE_METADATA_HOST="127.0.0.1:1")
    try:
        with pytest.raises(PermissionError, match="No Google credentials found for 'gs://bucket/x.jpg'"):
            storage.read_object("gs://bucket/x.jpg")
    finally:
        monkeypatch.undo()
        storage.reset_clients()


def test_open_object_streams(photos):
    data = _jpeg(*IMAGES["cats/2.jpg"])
    with storage.open_object(_uri("cats/2.jpg"), buffer_size=64) as f:
        assert f.read(2) == b"\xff\xd8"
        assert f.read(10) == data[2:12]
        assert f.read() == data[12:]
        assert f.read(1) == b""
    with pytest.raises(FileNotFoundError, match=f"'{_uri('cats/404.jpg')}'"):
        storage.open_object(_uri("cats/404.jpg"))


def test_stamp_follows_the_etag(photos):
    one, two = storage.list_objects(f"s3://{BUCKET}/data")[:2]
    assert one.stamp()[0] == one.size and one.stamp() != two.stamp()
    assert storage.stat(_uri(one.key)).stamp() == one.stamp()
    assert all(-(2 ** 63) <= n < 2 ** 63 for n in one.stamp())


def test_replaced_object_changes_its_stamp(photos):
    import boto3

    client = boto3.client("s3", endpoint_url=photos.endpoint)
    uri = f"s3://{BUCKET}/replaced/1.jpg"
    client.put_object(Bucket=BUCKET, Key="replaced/1.jpg", Body=_jpeg(8, 8, (0, 0, 0)))
    before = storage.stat(uri)
    client.put_object(Bucket=BUCKET, Key="replaced/1.jpg", Body=_jpeg(8, 8, (255, 255, 255)))
    after = storage.stat(uri)
    assert before.etag != after.etag and before.stamp() != after.stamp()


def test_dali_reads_tfrecord_files_from_s3(photos, tmp_path):
    """DALI's TFRecord reader reads an `s3://` TFRecord file itself, with a local index
    (written here by dalipipe, in DALI's format)."""
    pytest.importorskip("nvidia.dali")
    import boto3
    import nvidia.dali.tfrecord as tfrec
    from nvidia.dali import fn, pipeline_def, types

    from dalipipe import tfrecord

    keys = list(IMAGES)
    files = []
    for key in keys:
        files.append(tmp_path / key.replace("/", "_"))
        files[-1].write_bytes(_jpeg(*IMAGES[key]))
    tfrecord.write_tfrecords([str(f) for f in files], np.arange(len(keys)) % 2, ["a", "b"],
                             str(tmp_path / "records"))
    shard, = [p for p in (tmp_path / "records").iterdir() if p.suffix == ".tfrecord"]
    index = tmp_path / "train.idx"
    tfrecord.write_index(str(shard), str(index))
    boto3.client("s3", endpoint_url=photos.endpoint).upload_file(str(shard), BUCKET, "records/train.tfrecord")

    @pipeline_def(batch_size=len(keys), num_threads=2, device_id=None)
    def read():
        records = fn.readers.tfrecord(
            path=f"s3://{BUCKET}/records/train.tfrecord", index_path=str(index),
            features={"image/encoded": tfrec.FixedLenFeature((), tfrec.string, ""),
                      "image/class/label": tfrec.FixedLenFeature([1], tfrec.int64, -1)})
        return fn.decoders.image(records["image/encoded"], device="cpu", output_type=types.RGB), \
            records["image/class/label"]

    pipe = read()
    pipe.build()
    images, labels = pipe.run()
    for i, key in enumerate(keys):
        assert np.asarray(images[i]).shape[:2] == IMAGES[key][:2]
        assert int(np.asarray(labels[i])[0]) == i % 2


def test_parent():
    assert storage.parent("s3://b/p/data.csv") == "s3://b/p/"
    assert storage.parent("gs://b/data.csv") == "gs://b/"
    assert storage.join(storage.parent("s3://b/p/data.csv"), "cats/1.jpg") == "s3://b/p/cats/1.jpg"


@pytest.mark.parametrize("list_from", [1, 1000])  # by listing, and by HEAD requests
def test_find_objects(photos, monkeypatch, list_from):
    monkeypatch.setattr(storage, "_LIST_FROM", list_from)
    uris = [_uri("cats/z/3.jpg"), _uri("dogs/404.jpg"), f"s3://{BUCKET}/data.csv", _uri("cats/1.jpg"),
            "s3://nowhere/x.jpg"]
    found = storage.find_objects(uris)
    assert [None if f is None else f.key for f in found] == [uris[0], None, uris[2], uris[3], None]
    assert found[0] == storage.stat(uris[0]) and found[2] == storage.stat(uris[2])
