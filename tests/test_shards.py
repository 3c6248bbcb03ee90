"""WebDataset tar shards as a source (`dalipipe.ranges`): what a source is, labels,
exact epochs (native, "tf", torch and JAX), damaged members, writing them (read back
by `webdataset`), shards in S3 read in large ranges, and the shares of processes.

The images are `tagged_dir`'s (`conftest.py`), written into 4 shards: each tells its
tag from its pixels (`helpers.tag_of`), and its class is `tag % 3`."""

import glob
import os
import shutil
import tarfile

import numpy as np
import pytest

from dalipipe import make_dali_pipeline, sources
from dalipipe.ranges import order, read, tar
from dalipipe.ranges.write import write_webdataset
from helpers import CLASSES, NUM_TAGGED, tag_of, write_tar
from test_storage import gcs_emulator  # noqa: F401 (a fixture)

OPTIONS = dict(image_size=(12, 12), batch_size=16, normalization=None, device="cpu",
               verbose=False)
BUCKET = "shards"


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """Each test its own cache folder: tar indexes and checks start empty."""
    monkeypatch.setenv("DALIPIPE_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def shards(tagged_dir, tmp_path_factory):
    """`tagged_dir` in 4 shards (read-only for the tests: copy to change)."""
    index = sources.index_source(tagged_dir)
    folder = tmp_path_factory.mktemp("shards")
    return write_webdataset(index.file_paths, index.labels, index.class_names, str(folder),
                            num_shards=4)


def brace(shards):
    return os.path.join(os.path.dirname(shards[0]), "train-{000000..000003}.tar")


def rows(pipe, epoch):
    """`[tag, label]` of each sample of an epoch, and the batch sizes."""
    found, sizes = [], []
    for images, labels in pipe.epoch(epoch):
        found += [[tag_of(image), int(label)] for image, label in zip(images, labels)]
        sizes.append(len(images))
    return found, sizes


def test_a_brace_pattern_a_glob_and_a_list_give_the_samples_and_their_labels(shards):
    folder = os.path.dirname(shards[0])
    for source in (brace(shards), os.path.join(folder, "train-*.tar"), shards, shards[0]):
        index = sources.index_source(source)
        # 121 in runs of 31, 30, 30, 30; the first all blue (the folder's order).
        count = NUM_TAGGED if source != shards[0] else 31
        assert index.tfrecord_files == (shards if source != shards[0] else shards[:1])
        assert len(index) == count and index.file_paths[0] == f"{shards[0]}#00000000.png"
        assert index.class_names == (["0", "1", "2"] if count == NUM_TAGGED else ["0"])
    plain = sources.index_source(brace(shards))
    named = sources.index_source(brace(shards), labels="class")  # a .json field of texts
    assert named.class_names == list(CLASSES)
    assert named.labels.tolist() == plain.labels.tolist()
    numbers = sources.index_source(brace(shards), labels="label")  # a .json field of ints
    assert numbers.labels.tolist() == plain.labels.tolist()
    renamed = sources.index_source(brace(shards), class_names=["b", "g", "r"])
    assert renamed.class_names == ["b", "g", "r"]
    mapped = sources.index_source(brace(shards), labels="class",
                                  class_names=["red", "green", "blue"])
    assert [mapped.class_names[i] for i in mapped.labels] == \
        [CLASSES[i] for i in plain.labels]
    assert sources.index_source(brace(shards), labels=None).labels is None


def test_the_tar_index_is_cached_not_written_beside_the_shards(shards, tmp_path, monkeypatch):
    folder = tmp_path / "copy"
    folder.mkdir()
    copies = [shutil.copy2(s, folder) for s in shards]
    before = sorted(os.listdir(folder))
    first = sources.index_source(str(folder / "train-*.tar"))
    assert sorted(os.listdir(folder)) == before
    cached = glob.glob(str(tmp_path / "cache" / "tar-index" / "*.json"))
    assert len(cached) == 4
    # A second index reads the cache only; a changed shard is read again.
    opened = []
    original = tar._read_index
    monkeypatch.setattr(tar, "_read_index",
                        lambda *args: opened.append(args[0]) or original(*args))
    again = sources.index_source(str(folder / "train-*.tar"))
    assert opened == [] and again.file_paths == first.file_paths
    os.utime(copies[2], ns=(0, 0))
    sources.index_source(str(folder / "train-*.tar"))
    assert opened == [copies[2]]


def test_dalipipe_check_names_a_damaged_member(shards, tmp_path, capsys):
    from dalipipe.cli import main

    for shard in shards:
        shutil.copy2(shard, tmp_path)
    rewritten(shards[2], tmp_path, lambda name, data: data[:-30]
              if name == "00000070.png" else data)
    assert main(["check", str(tmp_path / "train-{000000..000003}.tar")]) == 1
    printed = capsys.readouterr().out
    assert "1 of 121 files are bad" in printed and "train-000002.tar#00000070.png" in printed


def test_dalipipe_check_names_a_bad_label_member_as_training_does(shards, tmp_path, capsys):
    """A `.cls` that is no integer is a bad file for `dalipipe check` as for
    `make_dali_dataset` (whose default `labels="inferred"` reads it)."""
    from dalipipe.cli import main

    for shard in shards:
        shutil.copy2(shard, tmp_path)
    rewritten(shards[1], tmp_path, lambda name, data: b"x" if name == "00000040.cls" else data)
    source = str(tmp_path / "train-{000000..000003}.tar")
    assert main(["check", source]) == 1
    printed = capsys.readouterr().out
    assert "1 of 121 files are bad" in printed
    assert "has the .cls text 'x': " in printed and "train-000001.tar#00000040.png" in printed
    with pytest.warns(UserWarning, match="Left out 1 of 121") as warned:
        kept = make_dali_pipeline(source, check="structure", on_bad_file="skip", **OPTIONS)
    assert len(kept.file_paths) == NUM_TAGGED - 1
    report = str(warned[0].message).rsplit("Report: ", 1)[1]
    with open(report) as f:
        assert "train-000001.tar#00000040.png" in f.read()


def test_errors_name_the_source_the_shard_and_the_member(shards, tmp_path):
    folder = os.path.dirname(shards[0])
    with pytest.raises(ValueError, match=r"No tar shard matches the pattern .*nope-\*\.tar"):
        sources.index_source(os.path.join(folder, "nope-*.tar"))
    with pytest.raises(ValueError, match=r"No such tar shard: .*train-000004\.tar'\. "
                                         r"Received: source="):
        sources.index_source(os.path.join(folder, "train-{000002..000009}.tar"))
    with pytest.raises(ValueError, match=r"Not a tar shard: 'a\.png'"):
        sources.index_source([shards[0], "a.png"])
    with pytest.raises(ValueError, match=r"The sample .*train-000000\.tar#00000000\.png has "
                                         r"no field 'nope' in its \.json member .*train-000000"
                                         r"\.tar#00000000\.json \(and 120 more of the 121 "
                                         r"samples\)\. Received: labels='nope'"):
        sources.index_source(brace(shards), labels="nope")
    png = open(sources.index_source(brace(shards)).tfrecord_files[0], "rb").read()[512:600]
    two = write_tar(tmp_path / "two.tar", [("a.jpg", png), ("a.png", png)])
    with pytest.raises(ValueError, match=r"The sample 'a' of '.*two\.tar' has 2 image members "
                                         r"\(a\.jpg, a\.png\)"):
        sources.index_source(two)
    text = write_tar(tmp_path / "text.tar", [("a.png", png), ("a.cls", b"cat")])
    with pytest.raises(ValueError, match=r"text\.tar#a\.png has the \.cls text 'cat'"):
        sources.index_source(text)
    with pytest.raises(ValueError, match=r"With tar shards, `masks` names the extension .*"
                                         r"Received: masks='masks'"):
        make_dali_pipeline(brace(shards), masks="masks", **OPTIONS)


def test_every_sample_once_per_epoch_a_new_order_and_the_same_for_the_seed(shards):
    pipe = make_dali_pipeline(brace(shards), seed=3, **OPTIONS)
    first, sizes = rows(pipe, 0)
    second, _ = rows(pipe, 1)
    assert sizes == [16] * 7 + [9]  # a true partial last batch
    for found in (first, second):
        assert sorted(t for t, _ in found) == list(range(NUM_TAGGED))
        assert all(label == tag % 3 for tag, label in found)
    assert first != second
    assert rows(make_dali_pipeline(brace(shards), seed=3, **OPTIONS), 0)[0] == first


def test_the_tf_format_reads_the_native_epochs(shards):
    from dalipipe import make_dali_dataset

    dataset = make_dali_dataset(brace(shards), format="tf", seed=3, **OPTIONS)
    native = make_dali_pipeline(brace(shards), seed=3, **OPTIONS)
    for epoch in (0, 1):
        tags = [tag_of(image) for images, _ in dataset for image in images.numpy()]
        assert tags == [t for t, _ in rows(native, epoch)[0]]


@pytest.mark.backend_job("shards")
@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_passes_and_fit_on_the_backend(backend, backend_jobs):
    result = backend_jobs(backend, "shards")
    assert result["class_names"] == list(CLASSES) and result["len"] == 16
    for epoch in (0, 1):
        found = result[f"pass_{epoch}_rows"]
        assert sorted(t for t, _ in found) == list(range(NUM_TAGGED))
        assert all(label == tag % 3 for tag, label in found)
        assert result[f"pass_{epoch}_equals_native"]
    assert result["pass_0_rows"] != result["pass_1_rows"]
    assert result["fit_counts"] == [[1.0] * NUM_TAGGED]
    # Masks and boxes from shards: the batches of the same images as a folder.
    dense = result["dense"]
    assert dense["masks"]["equal_to_folder"] and dense["boxes"]["equal_to_folder"], dense
    assert dense["boxes"]["class_names"] == ["circle", "square", "triangle"]
    assert np.isfinite(dense["masks"]["losses"]).all()
    assert not result["tensorflow_loaded"]


def rewritten(shard, folder, change):
    """A copy of `shard` in `folder` with `change(name, data)` applied to each member."""
    with tarfile.open(shard) as source:
        members = [(m.name, change(m.name, source.extractfile(m).read())) for m in source]
    return write_tar(os.path.join(folder, os.path.basename(shard)), members)


def test_a_damaged_member_is_named_before_training_or_left_out(shards, tmp_path):
    copies = [shutil.copy2(s, tmp_path) for s in shards]
    rewritten(shards[1], tmp_path, lambda name, data: data[: len(data) // 2]
              if name == "00000033.png" else data)
    pattern = str(tmp_path / "train-*.tar")
    with pytest.raises(ValueError, match=r"(?s)1 of 121 files cannot be loaded.*"
                                         r"train-000001\.tar#00000033\.png: "):
        make_dali_pipeline(pattern, **OPTIONS)
    with pytest.warns(UserWarning, match="Left out 1 of 121"):
        pipe = make_dali_pipeline(pattern, on_bad_file="skip", **OPTIONS)
    assert len(pipe.file_paths) == 120 and f"{copies[1]}#00000033.png" not in pipe.file_paths
    # A shard cut short loses the samples after the cut: refused, as a truncated
    # TFRecord file is, naming the shard and the last member found.
    data = open(shards[3], "rb").read()
    for cut in (len(data) // 2, len(data.rstrip(b"\0")), 7000):
        with open(copies[3], "wb") as f:
            f.write(data[:cut])
        with pytest.raises(ValueError, match=r"Truncated tar shard \(\d+ bytes\): it ends "
                                             r"inside or after the member '\d+\.\w+'.*"
                                             r"train-000003\.tar'"):
            make_dali_pipeline(pattern, on_bad_file="skip", **OPTIONS)


def test_a_json_member_without_its_label_is_a_bad_file_of_its_sample(shards, tmp_path):
    """A `.json` member that is not JSON, or lacks the `labels` field, is a bad file
    of its sample (not of its shard), named by shard and member."""
    for shard in shards:
        shutil.copy2(shard, tmp_path)
    copy = rewritten(shards[1], tmp_path, lambda name, data: {
        "00000040.json": b'{"label": 1, "cla', "00000041.json": b'{"label": 2}'}.get(name, data))
    pattern = str(tmp_path / "train-*.tar")
    with pytest.raises(ValueError) as raised:
        make_dali_pipeline(pattern, labels="class", **OPTIONS)
    message = str(raised.value)
    assert "2 of 121 files cannot be loaded" in message
    assert f"{copy}#00000040.png: its .json member {copy}#00000040.json is not JSON (" in message
    assert f"{copy}#00000041.png: has no field 'class' in its .json member " \
           f"{copy}#00000041.json" in message
    with pytest.warns(UserWarning, match="Left out 2 of 121"):
        pipe = make_dali_pipeline(pattern, labels="class", on_bad_file="skip", **OPTIONS)
    found, _ = rows(pipe, 0)
    assert len(found) == len({t for t, _ in found}) == NUM_TAGGED - 2
    assert not {f"{copy}#00000040.png", f"{copy}#00000041.png"} & set(pipe.file_paths)
    assert pipe.class_names == list(CLASSES) and all(label == tag % 3 for tag, label in found)
    # Without the check (check=None), nothing reports them: refused, named.
    with pytest.raises(ValueError, match=r"The sample .*train-000001\.tar#00000040\.png its "
                                         r"\.json member .*00000040\.json is not JSON .*\(and 1 "
                                         r"more of the 121 samples\)"):
        make_dali_pipeline(pattern, labels="class", check=None, **OPTIONS)
    # Labels from .cls: the .json members are not read.
    assert len(make_dali_pipeline(pattern, **OPTIONS).file_paths) == NUM_TAGGED


def test_convert_writes_shards_that_webdataset_reads(tagged_dir, tmp_path):
    wds = pytest.importorskip("webdataset")
    from dalipipe.cli import main

    out = tmp_path / "out"
    assert main(["convert", tagged_dir, str(out), "--shards", "3", "--format", "webdataset"]) == 0
    assert sorted(os.listdir(out)) == [f"train-{i:06d}.tar" for i in range(3)]
    pattern = str(out / "train-{000000..000002}.tar")
    samples = list(wds.WebDataset(pattern, shardshuffle=False).decode("rgb8"))
    assert len(samples) == NUM_TAGGED
    assert all(int(s["cls"]) == CLASSES.index(s["json"]["class"]) for s in samples)
    assert all(s["cls"] == tag_of(s["png"]) % 3 for s in samples)
    assert sources.index_source(pattern).labels.tolist() == [int(s["cls"]) for s in samples]


def test_shares_of_processes_are_disjoint_with_equal_steps(shards):
    pipe = make_dali_pipeline(brace(shards), seed=3, **OPTIONS)
    seen, steps = [], set()
    for replica in (0, 1):
        share = pipe.shard([replica], 2)
        batches = list(share.epoch(0))
        steps.add(len(batches))
        assert {len(images) for images, _, _ in batches} == {8}
        seen += [tag_of(image) for images, _, weights in batches
                 for image, weight in zip(images, weights) if weight == 1]
    assert steps == {8} and sorted(seen) == list(range(NUM_TAGGED))


def test_stream_order_takes_every_sample_once_shard_by_shard():
    refs = np.array([(s, o, 1) for s in range(5) for o in range(40)], np.int64)
    first = order.stream_order(1, 0, refs, buffer_size=8)
    assert sorted(first.tolist()) == list(range(200))
    assert first.tolist() == order.stream_order(1, 0, refs, buffer_size=8).tolist()
    assert first.tolist() != order.stream_order(1, 1, refs, buffer_size=8).tolist()
    # With a small buffer, a batch's samples come from one or two shards.
    batches = refs[first, 0].reshape(-1, 20)
    assert max(len(set(b)) for b in batches.tolist()) <= 3


def test_objects_are_read_by_chunk_and_a_straggler_alone(monkeypatch):
    """One GET per chunk read in order; a range whose chunk left the cache within the
    pass is read alone; one past twice the cache (the next pass) by its chunk."""
    from dalipipe import storage

    calls = []

    def read_object(uri, offset=0, size=None):
        calls.append((offset, size))
        return bytes((offset + i) % 251 for i in range(size))

    monkeypatch.setattr(storage, "read_object", read_object)
    monkeypatch.setattr(read, "CHUNK", 1000)
    monkeypatch.setattr(read, "CACHE_BYTES", 3000)
    read.forget_chunks()
    uri = ["s3://b/x.tar"]
    found = read.read_ranges(uri, [(0, o, 10) for o in range(0, 5000, 100)])
    assert found == [bytes((o + i) % 251 for i in range(10)) for o in range(0, 5000, 100)]
    assert calls == [(c * 1000, 1000) for c in range(5)]
    calls.clear()
    assert read.read_ranges(uri, [(0, 5, 10), (0, 5990, 30)]) == [
        bytes(range(5, 15)), bytes((5990 + i) % 251 for i in range(30))]
    assert calls == [(5, 10), (5000, 1020)]  # a straggler; a range over two chunks
    read.read_ranges(uri, [(0, o, 10) for o in range(6000, 12000, 500)])
    calls.clear()
    read.read_ranges(uri, [(0, 5, 10)])
    assert calls == [(0, 1000)]
    read.forget_chunks()


def test_shards_in_s3_are_read_in_large_ranges(shards, s3_server):
    client = s3_server.client()
    client.create_bucket(Bucket=BUCKET)
    for shard in shards:
        client.upload_file(shard, BUCKET, f"wds/{os.path.basename(shard)}")
    uri = f"s3://{BUCKET}/wds/train-{{000000..000003}}.tar"
    assert tar.tar_files(f"s3://{BUCKET}/wds/train-*.tar") == tar.tar_files(uri)
    pipe = make_dali_pipeline(uri, seed=3, **OPTIONS)
    assert min(pipe.file_paths) == f"s3://{BUCKET}/wds/train-000000.tar#00000000.png"
    read.forget_chunks()
    since = s3_server.log_size()
    first, sizes = rows(pipe, 0)
    assert len(s3_server.object_gets(BUCKET, since)) == 4  # one ranged GET per shard
    second, _ = rows(pipe, 1)
    assert sizes == [16] * 7 + [9]
    for found in (first, second):
        assert sorted(t for t, _ in found) == list(range(NUM_TAGGED))
        assert all(label == tag % 3 for tag, label in found)
    assert first != second
    # A validation part is in the shards' order, read in large ranges.
    training, validation = make_dali_pipeline(uri, seed=3, validation_split=0.25,
                                              subset="both", **OPTIONS)
    assert sorted(training.file_paths + validation.file_paths) == sorted(pipe.file_paths)
    assert validation.file_paths == sorted(validation.file_paths)
    read.forget_chunks()
    since = s3_server.log_size()
    assert len([image for images, _ in validation.epoch(0) for image in images]) == 30
    assert len(s3_server.object_gets(BUCKET, since)) == 4
    # Resuming mid-epoch takes the rest of the same order.
    whole = pipe.epoch_inputs(1)[0]
    assert pipe.epoch_inputs(1, start_batch=3)[0].tolist() == whole[48:].tolist()


def test_each_replica_fetches_the_chunks_of_its_own_share(shards, s3_server, monkeypatch):
    """Two replicas of shards in S3, each with a chunk cache of its own (as two
    processes have): together they load every sample once per epoch, with equal
    steps, and each fetches the chunks of its run of the stream only, one chunk at
    the cut fetched by both."""
    client = s3_server.client()
    client.create_bucket(Bucket="shares")
    for shard in shards:
        client.upload_file(shard, "shares", f"wds/{os.path.basename(shard)}")
    uri = "s3://shares/wds/train-{000000..000003}.tar"
    pipe = make_dali_pipeline(uri, seed=3, **OPTIONS)
    monkeypatch.setattr(read, "CHUNK", 8 << 10)  # each shard (about 30 KB) in 4 chunks
    for epoch in (0, 1):
        read.forget_chunks()
        since = s3_server.log_size()
        pipe.epoch_inputs(epoch)  # the same order's samples as one replica
        rows(pipe, epoch)
        alone = len(s3_server.object_gets("shares", since))
        seen, gets = [], []
        for replica in (0, 1):
            read.forget_chunks()  # a process of its own
            since = s3_server.log_size()
            batches = list(pipe.shard([replica], 2).epoch(epoch))
            gets.append(len(s3_server.object_gets("shares", since)))
            assert len(batches) == 8 and {len(images) for images, _, _ in batches} == {8}
            seen += [(tag_of(image), int(label)) for images, labels, weights in batches
                     for image, label, weight in zip(images, labels, weights) if weight == 1]
        assert sorted(t for t, _ in seen) == list(range(NUM_TAGGED))
        assert all(label == tag % 3 for tag, label in seen)
        assert alone >= 12 and sum(gets) <= alone + 1, (alone, gets)
        assert max(gets) < alone * 0.75, (alone, gets)
    # Without shuffle (a validation pass), each replica takes a run of the shards' order.
    unshuffled = make_dali_pipeline(uri, seed=3, **{**OPTIONS, "shuffle": False})
    runs = []
    for replica in (0, 1):
        sample_ids, _, weights = unshuffled.shard([replica], 2).epoch_inputs(0)
        runs.append(sample_ids[weights == 1].tolist())
    assert runs[0] + runs[1] == list(range(NUM_TAGGED))


@pytest.mark.slow
def test_torch_distributed_processes_read_disjoint_shares_of_shards(shards, tmp_path):
    """`test_backends.torch_distributed_shards`'s two `torch.distributed` processes, on the shards: disjoint
    shares that cover every sample once per epoch, equal steps, padding of weight 0."""
    from test_backends import torch_distributed_shards as run

    run(brace(shards), tmp_path)


@pytest.mark.slow
def test_a_killed_fit_resumes_exactly_on_shards(shards, tmp_path):
    """`test_resume.py`'s run killed mid-epoch (SIGKILL after step 5 of epoch 2) and
    started again with `BackupAndRestore`: its steps are the uninterrupted run's."""
    from test_resume import check_resumed

    check_resumed("tensorflow", brace(shards), tmp_path, "at:2,5")


def test_shards_in_gcs_are_read_by_a_glob(gcs_emulator, shards):  # noqa: F811
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage as gcs

    client = gcs.Client(project="test", credentials=AnonymousCredentials(),
                        client_options={"api_endpoint": os.environ["DALI_GCS_ENDPOINT_URL"]})
    for shard in shards:
        client.bucket("photos").blob(f"wds/{os.path.basename(shard)}").upload_from_filename(shard)
    pipe = make_dali_pipeline("gs://photos/wds/train-*.tar", seed=3, **OPTIONS)
    assert pipe.index.tfrecord_files == [f"gs://photos/wds/{os.path.basename(s)}" for s in shards]
    for epoch in (0, 1):
        found, _ = rows(pipe, epoch)
        assert sorted(t for t, _ in found) == list(range(NUM_TAGGED))
        assert all(label == tag % 3 for tag, label in found)


def test_the_bench_loader_reads_the_files_as_shards(tagged_dir):
    from dalipipe.bench import loaders

    index = sources.index_source(tagged_dir)
    files, labels = index.file_paths[:20], index.labels[:20]
    made = loaders.LOADERS["dalipipe_shards_cpu"](files, labels, workload="stretch",
                                                   batch_size=8, threads=1, seed=0)
    peer = loaders.LOADERS["dalipipe_cpu"](files, labels, workload="stretch", batch_size=8,
                                           threads=1, seed=0)
    for (images, found), (want_images, want) in zip(made.epoch(), peer.epoch()):
        np.testing.assert_array_equal(np.asarray(images), np.asarray(want_images))
        np.testing.assert_array_equal(np.asarray(found), np.asarray(want))
    assert "source=" in made.settings and loaders.unavailable("dalipipe_shards_cpu") is None


def test_the_webdataset_peer_loads_every_sample_once_with_its_label(tagged_dir):
    pytest.importorskip("webdataset")
    pytest.importorskip("torch")
    from dalipipe.bench import loaders

    index = sources.index_source(tagged_dir)
    files, labels = index.file_paths[:20], index.labels[:20]
    peer = loaders.LOADERS["webdataset_torch"](files, labels, workload="stretch", batch_size=8,
                                                threads=1, seed=0)
    found = [(images.shape[1:], int(label)) for images, batch in peer.epoch()
             for label in np.asarray(batch)]
    assert {shape for shape, _ in found} == {(224, 224, 3)}
    assert sorted(label for _, label in found) == sorted(labels.tolist())
    assert "shardshuffle=100" in peer.settings and loaders.unavailable("webdataset_torch") is None
