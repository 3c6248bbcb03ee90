"""Sources in object storage, against the session's local S3 server (`s3_server`).

The bucket `remote` holds a copy of `indexed_dir` (under `indexed/`): every result
from `s3://remote/indexed/` is compared with the same call on the local folder, with
URIs in place of paths.
"""

import collections
import io
import os
import re

import numpy as np
import pytest
from PIL import Image

from dalipipe import checks, make_dali_pipeline, sources
from helpers import CLASSES, NUM_INDEXED, NUM_TAGGED, tag_of

BUCKET = "remote"
PREFIX = f"s3://{BUCKET}/indexed/"


def _png(colour, size=(20, 16)):
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def bucket(s3_server, indexed_dir):
    """`s3_server` with `indexed_dir` copied to `s3://remote/indexed/`, and a CSV file
    of relative paths beside it."""
    client = s3_server.client()
    client.create_bucket(Bucket=BUCKET)
    _upload(client, indexed_dir, "indexed")
    rows = "".join(f"{CLASSES[i % 3]}/img_{i:03d}.png,{CLASSES[i % 3]}\n" for i in range(NUM_INDEXED))
    client.put_object(Bucket=BUCKET, Key="indexed/labels.csv", Body=("path,label\n" + rows).encode())
    return s3_server


def _upload(client, folder, prefix):
    """Copies the files under `folder` to `s3://remote/PREFIX/...`."""
    for parent, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(parent, name)
            client.upload_file(path, BUCKET, f"{prefix}/{os.path.relpath(path, folder)}")


def _uri(indexed_dir, path):
    return PREFIX + os.path.relpath(path, indexed_dir)


def _same_index(remote, local, indexed_dir):
    assert remote.file_paths == [_uri(indexed_dir, p) for p in local.file_paths]
    assert remote.class_names == local.class_names
    np.testing.assert_array_equal(remote.labels, local.labels)


# --- Indexing -----------------------------------------------------------------------


@pytest.mark.parametrize("arguments", [
    {}, {"class_names": ["red", "blue"]}, {"labels": None},
    {"labels": [i % 2 for i in range(NUM_INDEXED)]},
])
def test_prefix_indexes_as_the_local_folder(bucket, indexed_dir, arguments):
    local = sources.index_source(indexed_dir, **arguments)
    for uri in (PREFIX, PREFIX.rstrip("/")):
        remote = sources.index_source(uri, **arguments)
        if local.labels is None:
            assert remote.labels is None and remote.file_paths == [
                _uri(indexed_dir, p) for p in local.file_paths]
        else:
            _same_index(remote, local, indexed_dir)


@pytest.mark.parametrize("arguments", [
    {"class_names": ["red", "purple"]},
    {"labels": [0, 1]},
    {"labels": "inferred!"},
    {"labels": [0] * NUM_INDEXED, "class_names": ["a"]},
])
def test_prefix_errors_are_the_local_folders(bucket, indexed_dir, arguments):
    with pytest.raises(ValueError) as local:
        sources.index_source(indexed_dir, **arguments)
    with pytest.raises(ValueError) as remote:
        sources.index_source(PREFIX, **arguments)
    assert str(remote.value) == str(local.value).replace(repr(indexed_dir), repr(PREFIX))


def test_loose_and_undecodable_objects_warn_as_local_files(bucket, s3_server):
    client = s3_server.client()
    client.put_object(Bucket=BUCKET, Key="loose/a/1.png", Body=_png((1, 2, 3)))
    client.put_object(Bucket=BUCKET, Key="loose/a/2.gif", Body=b"GIF89a")
    client.put_object(Bucket=BUCKET, Key="loose/3.png", Body=_png((1, 2, 3)))
    with pytest.warns(UserWarning, match=r"Ignored 2 image file\(s\) in 's3://remote/loose'"):
        index = sources.index_source(f"s3://{BUCKET}/loose")
    assert index.file_paths == [f"s3://{BUCKET}/loose/a/1.png"] and index.class_names == ["a"]


def test_missing_and_empty_prefixes_are_named(bucket):
    with pytest.raises(ValueError, match=f"No objects found under 's3://{BUCKET}/nothing/'"):
        sources.index_source(f"s3://{BUCKET}/nothing/")
    with pytest.raises(ValueError, match="No such bucket 'nowhere' for 's3://nowhere/photos'"):
        sources.index_source("s3://nowhere/photos")
    # One image's URI is a list of one, as a local image path is.
    one = sources.index_source(f"{PREFIX}red/img_002.png", labels=None)
    assert one.file_paths == [f"{PREFIX}red/img_002.png"]


def test_csv_in_object_storage(bucket, indexed_dir):
    local = sources.index_source(os.path.join(indexed_dir, "..", os.path.basename(indexed_dir)),
                                 labels="inferred")
    remote = sources.index_source(PREFIX + "labels.csv", labels="label")
    _same_index(remote, local.take(np.argsort([int(p[-7:-4]) for p in local.file_paths])),
                indexed_dir)
    # root= for the relative paths, instead of the CSV file's folder.
    with pytest.raises(ValueError, match=f"29 file\\(s\\) named in '{PREFIX}labels.csv' do not exist: "
                                         f".*s3://{BUCKET}/elsewhere/red/img_002.png"):
        sources.index_source(PREFIX + "labels.csv", labels="label", root=f"s3://{BUCKET}/elsewhere")


def test_rows_of_uris_and_root(bucket, indexed_dir, tmp_path):
    relative = [f"{CLASSES[i % 3]}/img_{i:03d}.png" for i in range(6)]
    uris = [PREFIX + p for p in relative]
    table = tmp_path / "uris.csv"
    table.write_text("path,label\n" + "".join(f"{u},{u.split('/')[-2]}\n" for u in uris))
    for index in (sources.index_source(str(table), labels="label"),
                  sources.index_source(uris, labels=[u.split("/")[-2] for u in uris]),
                  sources.index_source(relative, labels=[p.split("/")[0] for p in relative],
                                       root=PREFIX)):
        assert index.file_paths == uris
        assert index.class_names == ["blue", "green", "red"]
        assert index.labels.tolist() == [i % 3 for i in range(6)]
    mixed = sources.index_source([uris[0], os.path.join(indexed_dir, relative[1])], labels=None)
    assert mixed.file_paths == [uris[0], os.path.join(indexed_dir, relative[1])]
    with pytest.raises(ValueError, match=f"1 file\\(s\\) named in the list do not exist: .*{PREFIX}red/404.png"):
        sources.index_source(uris + [PREFIX + "red/404.png"], labels=None)


def test_tfrecord_files_in_object_storage_are_refused_with_the_reason(bucket, s3_server, tagged_tfrecords):
    import glob

    shard = sorted(glob.glob(tagged_tfrecords))[0]
    s3_server.client().upload_file(shard, BUCKET, "records/train-0.tfrecord")
    reason = "TFRecord files in object storage are not supported .* one ranged GET per record"
    for source in (f"s3://{BUCKET}/records/train-*.tfrecord", f"s3://{BUCKET}/records/train-0.tfrecord",
                   [f"s3://{BUCKET}/records/train-0.tfrecord"]):
        with pytest.raises(ValueError, match=reason):
            sources.index_source(source)


# --- The pipeline -------------------------------------------------------------------


def _outputs(pipe):
    return [np.concatenate(parts) for parts in zip(*pipe.epoch())]


def test_pipeline_from_a_prefix_equals_the_local_one(bucket, indexed_dir):
    arguments = dict(image_size=(8, 8), batch_size=4, validation_split=0.3, subset="both",
                     seed=3, device="cpu")
    remote = make_dali_pipeline(PREFIX, **arguments)
    local = make_dali_pipeline(indexed_dir, **arguments)
    for r, l in zip(remote, local):
        _same_index(r.index, l.index, indexed_dir)
        for got, expected in zip(_outputs(r), _outputs(l)):
            np.testing.assert_array_equal(got, expected)
    unlabeled = make_dali_pipeline(PREFIX, label_mode=None, image_size=(8, 8), seed=1, device="cpu")
    assert unlabeled.file_paths == [_uri(indexed_dir, p) for p in
                                    make_dali_pipeline(indexed_dir, label_mode=None,
                                                       image_size=(8, 8), seed=1, device="cpu").file_paths]


def test_the_check_names_a_truncated_object(bucket, s3_server):
    client = s3_server.client()
    good = _png((200, 10, 10))
    client.put_object(Bucket=BUCKET, Key="cut/a/good.png", Body=good)
    client.put_object(Bucket=BUCKET, Key="cut/a/cut.png", Body=good[: len(good) // 2])
    client.put_object(Bucket=BUCKET, Key="cut/b/empty.png", Body=b"")
    for check in ("structure", "full"):
        with pytest.raises(ValueError, match=r"2 of 3 files cannot be loaded") as error:
            make_dali_pipeline(f"s3://{BUCKET}/cut", image_size=(8, 8), device="cpu", check=check)
        assert re.search(f"s3://{BUCKET}/cut/a/cut.png: .*trunc", str(error.value))
        assert f"s3://{BUCKET}/cut/b/empty.png: empty object (0 bytes)" in str(error.value)
    with pytest.warns(UserWarning, match="Left out 2 of 3 files"):
        pipe = make_dali_pipeline(f"s3://{BUCKET}/cut", image_size=(8, 8), device="cpu",
                                  on_bad_file="skip")
    assert pipe.file_paths == [f"s3://{BUCKET}/cut/a/good.png"]


def test_dalipipe_check_names_the_bad_objects(bucket, s3_server, capsys):
    from dalipipe.cli import main

    good = _png((20, 10, 10))
    s3_server.client().put_object(Bucket=BUCKET, Key="cli/a/good.png", Body=good)
    s3_server.client().put_object(Bucket=BUCKET, Key="cli/a/cut.png", Body=good[:-20])
    assert main(["check", f"s3://{BUCKET}/cli/"]) == 1
    assert "1 of 2 files are bad" in capsys.readouterr().out


def test_the_check_reads_each_object_once_and_caches_by_etag(bucket, s3_server, fresh_cache):
    client = s3_server.client()
    for i in range(6):
        client.put_object(Bucket=BUCKET, Key=f"cached/c{i % 2}/{i}.png", Body=_png((40 * i, 0, 0)))
    uri = f"s3://{BUCKET}/cached/"

    def gets_of_a_check(**arguments):
        start = s3_server.log_size()
        make_dali_pipeline(uri, image_size=(8, 8), device="cpu", **arguments)
        return sorted(s3_server.object_gets(BUCKET, start))

    keys = sorted(f"cached/c{i % 2}/{i}.png" for i in range(6))
    assert gets_of_a_check() == keys
    assert gets_of_a_check() == []  # every verdict from the cache: sizes and ETags only
    client.put_object(Bucket=BUCKET, Key="cached/c1/3.png", Body=_png((1, 1, 1), (9, 9)))
    assert gets_of_a_check() == ["cached/c1/3.png"]  # a new ETag: checked again
    assert gets_of_a_check(check="full") == keys  # a stricter check reads again


def test_an_object_replaced_during_training_is_named(bucket, s3_server):
    """The check before training passed it; DALI's decoder fails on what replaced it,
    and the re-check of the batch names its URI."""
    client = s3_server.client()
    for i in range(4):
        client.put_object(Bucket=BUCKET, Key=f"replaced/a/{i}.png", Body=_png((50 * i, 9, 9)))
    pipe = make_dali_pipeline(f"s3://{BUCKET}/replaced", image_size=(8, 8), batch_size=2,
                              shuffle=False, device="cpu")
    client.put_object(Bucket=BUCKET, Key="replaced/a/3.png", Body=b"not an image any more")
    with pytest.raises(RuntimeError, match=f"DALI failed to decode s3://{BUCKET}/replaced/a/3.png"):
        list(pipe.epoch())


def test_verify_unchanged_costs_no_request_for_objects(bucket, s3_server):
    start = s3_server.log_size()
    checks.verify_unchanged([PREFIX + "red/404.png"], np.array([[1, 2]]), check="structure")
    assert s3_server.object_gets(BUCKET, start) == []


def test_local_and_remote_read_errors_have_one_wording(bucket, tmp_path):
    """One read layer (`storage.fetch`): a missing local file and a missing object give
    the check the same reason, and a read of a batch the same error, naming the file."""
    from dalipipe.storage import fetch

    local, remote = str(tmp_path / "gone.png"), PREFIX + "red/gone.png"
    assert [v.reason for v in checks.check_paths([local, remote])] == ["does not exist"] * 2
    for path in (local, remote):
        assert fetch.read_files([path]) == [(None, "does not exist")]
        with pytest.raises(RuntimeError) as error:
            fetch.read_batch([path])
        assert str(error.value) == (f"{path} was found before training and cannot be read "
                                    "now (does not exist): it was deleted or replaced during "
                                    "training.")


# --- TensorFlow ---------------------------------------------------------------------


def test_dataset_and_fit_from_a_prefix(bucket, indexed_dir):
    keras = pytest.importorskip("keras")
    pytest.importorskip("tensorflow")
    from dalipipe import make_dali_dataset

    arguments = dict(image_size=(8, 8), batch_size=4, validation_split=0.25, subset="training",
                     seed=5, shuffle=False, device="cpu")
    remote = make_dali_dataset(PREFIX, **arguments)
    local = make_dali_dataset(indexed_dir, **arguments)
    assert remote.class_names == local.class_names
    assert remote.file_paths == [_uri(indexed_dir, p) for p in local.file_paths]
    for (x, y), (lx, ly) in zip(remote.take(2), local.take(2)):
        np.testing.assert_array_equal(x.numpy(), lx.numpy())
        np.testing.assert_array_equal(y.numpy(), ly.numpy())
    model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                              keras.layers.Dense(3)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(remote, epochs=2, steps_per_epoch=3, verbose=0)
    assert len(history.history["loss"]) == 2 and np.isfinite(history.history["loss"]).all()


@pytest.mark.slow  # a subprocess; test_dataset_and_fit_from_a_prefix is the quick one
@pytest.mark.backend_job("single_s3")
@pytest.mark.parametrize("backend", ["torch"])
def test_fit_from_a_prefix_on_torch(backend, tagged_dir, backend_jobs):
    """`backend_job.py`'s MODE `single_s3` on Keras's torch backend (`single` from a
    copy of `tagged_dir` in a local S3 server of the job's own): what
    `test_backends.py` asks of the local folder, its `fit` for 2 epochs (that it
    learns in 12 is the local folder's), and each pass's images and labels, in order,
    are the local copy's native epochs. (JAX reads through the same
    `format="pydataset"` path: `test_backends.py` runs it locally.)"""
    from test_backends import check_single

    for module in ("moto.server", "flask", "boto3"):  # what the job's server needs
        pytest.importorskip(module)
    result = backend_jobs(backend, "single_s3")
    check_single(result, backend, fit_epochs=2)
    local = make_dali_pipeline(str(tagged_dir), seed=7, image_size=(12, 12), batch_size=8,
                               normalization=None, verbose=False, device="cpu")
    for epoch in (0, 1):
        rows = [[tag_of(image), int(label)] for images, labels in local.epoch(epoch)
                for image, label in zip(images, labels)]
        assert result[f"pass_{epoch}_rows"] == rows


@pytest.mark.slow
def test_torch_distributed_processes_read_their_shards_from_a_prefix(bucket, tagged_dir, tmp_path):
    """`test_backends.torch_distributed_shards`'s two `torch.distributed` processes, from a copy of
    `tagged_dir` in the bucket: each reads its shard, every sample once per epoch. The
    server's log shows the shards' reads, none twice over: per process, two passes of
    64 (its share of the 121 samples and the padding that repeats its own first ones)
    in each of three datasets, "pydataset", the same through `DALIPyDataset.map` (a
    dataset of its own, with its own pipeline) and "grain"; and the pre-flight check's
    read of each object whole, once: the processes split the check's work through its
    cache (twice at most, where a claim outlives its lease on a slow machine and the
    other process checks that chunk again)."""
    from test_backends import torch_distributed_shards as run

    _upload(bucket.client(), tagged_dir, "sharded")
    start = bucket.log_size()
    run(f"s3://{BUCKET}/sharded/", tmp_path)
    reads = collections.Counter(bucket.object_gets(BUCKET, since=start))
    assert len(reads) == NUM_TAGGED and sum(reads.values()) <= 3 * 2 * 2 * 64 + 2 * NUM_TAGGED


def test_an_object_deleted_during_training_stops_it_naming_its_key(bucket, s3_server):
    client = s3_server.client()
    for i in range(4):
        client.put_object(Bucket=BUCKET, Key=f"deleted/a/{i}.png", Body=_png((50 * i, 9, 9)))
    pipe = make_dali_pipeline(f"s3://{BUCKET}/deleted", image_size=(8, 8), batch_size=2,
                              shuffle=False, device="cpu")
    client.delete_object(Bucket=BUCKET, Key="deleted/a/3.png")
    with pytest.raises(RuntimeError, match=f"bucket={BUCKET}.*deleted/a/3.png"):
        list(pipe.epoch())


# What a script does first, then what it reads: TensorFlow imported before DALI makes
# DALI's S3 client abort the process (dalipipe.dali_import).
_ORDER_SCRIPT = """
import sys
for name in sys.argv[2].split(","):
    __import__(name)
from dalipipe import make_dali_pipeline
try:
    pipe = make_dali_pipeline(sys.argv[1], image_size=(8, 8), batch_size=8, shuffle=False)
    images, labels = next(iter(pipe.epoch()))
    print("read", images.shape[0])
except RuntimeError as e:
    print("refused", e)
"""


@pytest.mark.slow  # three fresh interpreters
@pytest.mark.parametrize("first, outcome", [
    ("tensorflow", "read 8"),  # dalipipe loads DALI's TLS library so that it keeps its own
    ("nvidia.dali,tensorflow", "read 8"),
    ("tensorflow,nvidia.dali", "refused"),  # too late to mend: a clear error, no abort
])
def test_tensorflow_imported_first_never_aborts_the_process(bucket, first, outcome):
    import subprocess
    import sys

    from dalipipe.utils import child_env

    done = subprocess.run([sys.executable, "-c", _ORDER_SCRIPT, PREFIX, first],
                          capture_output=True, text=True, env=child_env(), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1].startswith(outcome), done.stdout + done.stderr[-2000:]
    if outcome == "refused":
        assert "Import dalipipe (or nvidia.dali) before TensorFlow" in done.stdout


def test_s3_problem_follows_the_import_order():
    from dalipipe.dali_import import s3_problem

    assert s3_problem(["sys", "nvidia.dali", "tensorflow"]) is None
    assert s3_problem(["sys", "tensorflow"]) is None
    assert "TensorFlow was imported before DALI" in s3_problem(["tensorflow", "nvidia.dali"])


# Reads two batches of a native epoch (or two steps of Keras's `fit`) from a bucket,
# waits for a line on stdin (the test stops the server meanwhile), then reads on and
# prints how that ended.
_STOPPED_SERVER_SCRIPT = """
import sys, time
import dalipipe
arguments = dict(image_size=(8, 8), batch_size=2, shuffle=False, device="cpu", check=None,
                 verbose=False)
def wait():
    print("read", flush=True)
    sys.stdin.readline()
    global start
    start = time.monotonic()

def run():
    if sys.argv[2] == "native":
        batches = iter(dalipipe.make_dali_pipeline(sys.argv[1], **arguments).epoch())
    else:  # Keras's fit on TensorFlow's dataset, held after its second step by a callback
        import keras
        class Hold(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                if batch == 1:
                    wait()
        model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                                  keras.layers.Dense(3)])
        model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(dalipipe.make_dali_dataset(sys.argv[1], **arguments), epochs=1, verbose=0,
                  callbacks=[Hold()])
        return "fit"
    next(batches), next(batches)
    wait()
    return sum(1 for _ in batches)

try:
    count = run()
    print("no error after", count, "batches", flush=True)
except Exception as e:  # RuntimeError (native), InternalError (fit)
    print(f"error after {time.monotonic() - start:.1f} s:", str(e).replace(chr(10), " "), flush=True)
"""
STOPPED_SERVER_BOUND = 60  # seconds: DALI's S3 client fails within 2 s (refused) or 10 s (silent)


@pytest.mark.slow  # waits out timeouts; test_storage's bounded failure is the quick one
@pytest.mark.parametrize("reader", ["native", "fit"])  # fit reads TensorFlow's dataset
@pytest.mark.parametrize("how, named", [
    ("killed", r"Failed to connect to 127\.0\.0\.1:{port}"),  # connections refused
    # Never answers: DALI names the object, except where a read stalled mid-transfer.
    ("suspended", r"(bucket=stop object=data/a/\d+\.png.*)?curlCode: 28, Timeout was reached"),
])
def test_a_server_that_stops_mid_epoch_fails_it_within_a_bound(how, named, reader):
    """The server stops after two batches of 100: the epoch (native, or Keras's `fit` on
    TensorFlow's dataset) fails within `STOPPED_SERVER_BOUND` with DALI's
    error naming the endpoint
    or the object, and the process exits. A server of its own: DALI's S3 client is made
    once per process."""
    import signal
    import subprocess
    import sys
    import time

    from dalipipe.utils import child_env
    from s3_server import ENVIRONMENT, moto_server

    with moto_server() as server:
        client = server.client()
        client.create_bucket(Bucket="stop")
        for i in range(200):
            client.put_object(Bucket="stop", Key=f"data/a/{i:03d}.png", Body=_png((i, 9, 9)))
        env = {**child_env(), **ENVIRONMENT, "AWS_ENDPOINT_URL": server.endpoint}
        if reader != "native":
            pytest.importorskip("tensorflow")
        job = subprocess.Popen([sys.executable, "-c", _STOPPED_SERVER_SCRIPT, "s3://stop/data", reader],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env)
        try:
            assert job.stdout.readline().strip() == "read", job.communicate(timeout=60)[1][-3000:]
            server.process.send_signal(signal.SIGKILL if how == "killed" else signal.SIGSTOP)
            if how == "killed":
                server.process.wait(10)
            start = time.monotonic()
            job.stdin.write("\n")
            job.stdin.flush()
            out, err = job.communicate(timeout=2 * STOPPED_SERVER_BOUND)
        finally:
            if job.poll() is None:
                job.kill()
                job.wait()
        elapsed = time.monotonic() - start
    assert job.returncode == 0, err[-3000:]
    match = re.search(r"^error after ([\d.]+) s: ", out, re.MULTILINE)  # DALI's plugin prints too
    assert match, out + err[-2000:]
    assert float(match.group(1)) < STOPPED_SERVER_BOUND, out
    assert elapsed < 2 * STOPPED_SERVER_BOUND, out  # the error, and the exit
    port = server.endpoint.rsplit(":", 1)[1]
    assert re.search(named.format(port=port), out, re.DOTALL), out
