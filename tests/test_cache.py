"""The decoded-image cache (`dalipipe.cache`, `cache=`): real image files, real DALI.

An epoch with the cache equals the epoch without it, exactly; later epochs open no
image file (counted with inotify, `helpers.FileOpens`); a changed file gets a new
key; processes share a folder cache, and a run killed while filling leaves nothing
read as complete. torch and JAX run through `backend_job.py`'s "cache" mode.
"""

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import dalipipe
from dalipipe import cache as image_cache
from dalipipe.options import Options
from dalipipe.utils import child_env
from helpers import CLASSES, FileOpens, tag_of

OPTIONS = dict(image_size=(12, 10), batch_size=8, seed=5, verbose=False, device="cpu")


def epochs(pipe, count):
    return [[[np.asarray(t) for t in batch] for batch in pipe.epoch(e)] for e in range(count)]


def same(got, want):
    """Whether nested lists (epochs, batches, outputs) of arrays are equal, exactly."""
    if isinstance(want, (list, tuple)):
        return (isinstance(got, (list, tuple)) and len(got) == len(want)
                and all(same(g, w) for g, w in zip(got, want)))
    return np.array_equal(got, want)


def folders_of(root):
    return [os.path.join(root, name) for name in CLASSES]


@pytest.mark.parametrize("value", [3, 2.5, False, ""])
def test_the_option_is_validated_first(value):
    with pytest.raises(ValueError) as info:
        Options(cache=value)
    assert str(info.value) == ("`cache` must be None, 'memory', True or a folder path. "
                               f"Received: cache={value!r}")


def test_a_mask_fill_value_that_uint8_cannot_hold_is_refused_when_padding():
    with pytest.raises(ValueError, match=r"`cache` keeps masks as uint8.*Received: "
                                         r"cache='memory', mask_fill_value=300, "
                                         r"pad_to_aspect_ratio=True"):
        Options(cache="memory", masks="masks/", label_mode=None, pad_to_aspect_ratio=True,
                mask_fill_value=300)


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    from dalipipe.sample_data import make_dense_sample_dataset

    folder = tmp_path_factory.mktemp("dense")
    make_dense_sample_dataset(str(folder), num_images=6, seed=0, crop_width=(64, 96))
    return folder


def test_masks_are_kept_beside_their_images(dense):
    images = str(dense / "images")
    for extra in (dict(pad_to_aspect_ratio=True, mask_fill_value=255), dict(augment=True)):
        options = dict(OPTIONS, image_size=(48, 40), batch_size=4, masks=str(dense / "masks"),
                       **extra)
        want = epochs(dalipipe.make_dali_pipeline(images, **options), 2)
        pipe = dalipipe.make_dali_pipeline(images, cache="memory", **options)
        got = [[[np.asarray(t) for t in b] for b in pipe.epoch(0)]]
        with FileOpens([images, str(dense / "masks")]) as opened:
            got.append([[np.asarray(t) for t in b] for b in pipe.epoch(1)])
        assert not opened.counts
        if not extra.get("augment"):
            assert same(got, want)
            continue
        # Crops of the stored image and mask: the same whether filling or reading, and
        # masks of the source's ids (nearest-neighbour sampling) that differ from the
        # uncached ones only along the shapes' edges.
        again = dalipipe.make_dali_pipeline(images, cache="memory", **options)
        assert same(epochs(again, 2)[1], got[1])
        masks = np.concatenate([b[1] for e in got for b in e])
        wanted = np.concatenate([b[1] for e in want for b in e])
        assert set(np.unique(masks)) <= set(np.unique(wanted))
        assert 0 < (masks != wanted).mean() < 0.05


def test_boxes_are_the_uncached_ones(dense):
    for extra in (dict(), dict(augment=True, box_crop=True)):
        options = dict(OPTIONS, image_size=(48, 40), batch_size=4, max_boxes=6,
                       boxes=str(dense / "instances.json"), **extra)
        want = epochs(dalipipe.make_dali_pipeline(str(dense / "images"), **options), 2)
        got = epochs(dalipipe.make_dali_pipeline(str(dense / "images"), cache="memory",
                                                 **options), 2)
        if extra:  # the crops of the stored image; the boxes and their labels unchanged
            assert same([[b[1:] for b in e] for e in got], [[b[1:] for b in e] for e in want])
        else:
            assert same(got, want)


def test_augment_crops_the_stored_image_the_same_whether_filling_or_reading(tagged_dir,
                                                                             tmp_path):
    options = dict(OPTIONS, augment=True)
    plain = epochs(dalipipe.make_dali_pipeline(tagged_dir, **options), 2)
    cache = str(tmp_path / "images")
    filling = dalipipe.make_dali_pipeline(tagged_dir, cache=cache, **options)
    assert filling.cache.shape[1:] == (14, 14, 3)  # ceil(12 * 8 / 7): larger than the output
    filled = epochs(filling, 2)
    reading = dalipipe.make_dali_pipeline(tagged_dir, cache=cache, **options)
    assert reading.cache.complete
    with FileOpens(folders_of(tagged_dir)) as opened:
        read = epochs(reading, 2)
    assert not opened.counts
    # Filling or reading, the same crops of the stored image: resume is exact.
    assert same(read, filled)
    # The labels and order of the uncached epochs; pixels resampled from the stored
    # image (docs/cache.md measures the difference on photographs).
    assert same([[b[1] for b in e] for e in read], [[b[1] for b in e] for e in plain])
    assert not same(read, plain)


def test_a_memory_cache_that_does_not_fit_is_refused_with_its_size(tagged_dir, monkeypatch):
    monkeypatch.setattr(image_cache, "memory_available", lambda: 1000)
    with pytest.raises(ValueError, match=r"needs 44.5 KB for 121 images of 12x10x3 uint8, "
                                         r"and 1.0 KB of memory is available"):
        dalipipe.make_dali_pipeline(tagged_dir, cache="memory", **OPTIONS)


def test_a_folder_cache_checks_the_disk_first(tagged_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(image_cache.shutil, "disk_usage",
                        lambda _: shutil._ntuple_diskusage(10, 10, 10))
    with pytest.raises(OSError, match=r"needs 44.5 KB in .* and 10 bytes is free"):
        dalipipe.make_dali_pipeline(tagged_dir, cache=str(tmp_path / "c"), **OPTIONS)
    assert not list((tmp_path / "c").glob("*.partial"))


@pytest.mark.parametrize("kept", ["memory", "folder"])
def test_epochs_equal_the_uncached_ones_and_later_ones_open_no_file(tagged_dir, tmp_path,
                                                                    kept):
    options = dict(OPTIONS, normalization="imagenet", crop_to_aspect_ratio=True)
    want = epochs(dalipipe.make_dali_pipeline(tagged_dir, **options), 3)
    cache = "memory" if kept == "memory" else str(tmp_path / "images")
    pipe = dalipipe.make_dali_pipeline(tagged_dir, cache=cache, **options)
    opens = []
    for epoch in range(3):
        with FileOpens(folders_of(tagged_dir)) as opened:
            got = [[np.asarray(t) for t in batch] for batch in pipe.epoch(epoch)]
        opens.append(sum(opened.counts.values()))
        assert same(got, want[epoch]), epoch
    assert opens == [121, 0, 0]
    # Mid-epoch, as resume starts it.
    assert same([list(b) for b in pipe.epoch(1, start_batch=4)], want[1][4:])
    if kept == "folder":
        key = image_cache.cache_key(pipe)
        assert sorted(os.listdir(cache)) == [f"{key}.lock", f"{key}.npy"]
        # Another pipeline of the same files and options reads the complete file.
        again = dalipipe.make_dali_pipeline(tagged_dir, cache=cache, **options)
        assert again.cache.complete
        with FileOpens(folders_of(tagged_dir)) as opened:
            assert same(epochs(again, 1), want[:1])
        assert not opened.counts


def test_runs_with_a_random_seed_share_one_folder_cache(tagged_dir, tmp_path):
    # `seed=None` shuffles `file_paths` differently per run: the key and the rows
    # follow the paths' order, so the second run reads what the first stored.
    options = dict(OPTIONS, seed=None, cache=str(tmp_path / "images"))
    first = dalipipe.make_dali_pipeline(tagged_dir, **options)
    list(first.epoch(0))
    assert first.cache.complete
    second = dalipipe.make_dali_pipeline(tagged_dir, **options)
    assert second.file_paths != first.file_paths
    assert image_cache.cache_key(second) == image_cache.cache_key(first)
    assert second.cache.complete
    uncached = dalipipe.make_dali_pipeline(tagged_dir, **dict(OPTIONS, seed=second.options.seed))
    want = epochs(uncached, 1)
    with FileOpens(folders_of(tagged_dir)) as opened:
        assert same(epochs(second, 1), want)
    assert not opened.counts
    assert len(os.listdir(options["cache"])) == 2  # the lock and one complete file


def test_a_folder_cache_larger_than_memory_checks_the_disk_without_allocating(tmp_path):
    # ImageNet's training split at 224 (193 GB), or more than the disk holds.
    row = image_cache.SIZE_BYTES + 224 * 224 * 3
    n = max(1_281_167, shutil.disk_usage(tmp_path).free // row + 1)
    with pytest.raises(OSError, match=rf"needs .* for {n} images of 224x224x3 uint8"):
        image_cache.FolderCache.open(str(tmp_path), "b" * 32, (n, 224, 224, 3))
    assert os.listdir(tmp_path) == ["b" * 32 + ".lock"]


def test_a_pass_ending_during_a_fill_completes_no_zero_row(tmp_path):
    # Real threads: a fill copying its batch while a pass ends (in this object, or a
    # writer elsewhere completes the file) neither names unstored rows nor raises.
    shape, key = (2, 4, 4, 3), "k" * 32
    image, size = np.full((1, 4, 4, 3), 200, np.uint8), np.array([[4, 4]], np.int32)

    def fill_during(store, ended):
        copying, go, raised = threading.Event(), threading.Event(), []

        def copy():
            copying.set()
            go.wait()
            return image

        def fill():
            try:
                store.fill(copy, size, np.array([1]))
            except Exception as e:  # noqa: BLE001 - reported by the assertion below
                raised.append(e)

        thread = threading.Thread(target=fill)
        thread.start()
        copying.wait()
        ended()
        go.set()
        thread.join()
        assert not raised

    for other_writer in (False, True):
        folder = str(tmp_path / f"other_{other_writer}")
        store = image_cache.FolderCache.open(folder, key, shape)
        store.fill(image, size, np.array([0]))
        if other_writer:
            other = image_cache.FolderCache.open(folder, key, shape)
            other.fill(np.concatenate([image, image]), np.concatenate([size, size]),
                       np.array([0, 1]))
            assert other.complete
        fill_during(store, store.pass_ended)
        assert store.complete
        done = np.load(os.path.join(folder, f"{key}.npy"))
        assert (done[:, image_cache.SIZE_BYTES:] == 200).all()
        assert (done[:, :image_cache.SIZE_BYTES].view("<i4") == 4).all()


def test_a_makers_orphaned_temporary_is_removed(tmp_path):
    # A run killed while making the partial file (under the lock) leaves
    # `<key>.partial.<pid>`: the next maker removes it.
    key = "o" * 32
    (tmp_path / f"{key}.partial.99999999").write_bytes(b"half")
    image_cache.FolderCache.open(str(tmp_path), key, (2, 4, 4, 3))
    assert sorted(os.listdir(tmp_path)) == [f"{key}.lock", f"{key}.partial"]


def test_masks_rewritten_on_each_host_give_one_key(dense, tmp_path, monkeypatch):
    options = dict(OPTIONS, image_size=(48, 40), masks=str(dense / "masks"),
                   cache=str(tmp_path / "images"))
    pipes = []
    for host in ("a", "b"):  # each host rewrites the masks under its own cache folder
        monkeypatch.setenv("DALIPIPE_CACHE_DIR", str(tmp_path / host))
        pipes.append(dalipipe.make_dali_pipeline(str(dense / "images"), **options))
    assert pipes[0].index.mask_paths[0].startswith(str(tmp_path / "a"))
    assert pipes[0].cache.key == pipes[1].cache.key  # as each host opened it


def test_channels_first_pad_and_grayscale_equal_the_uncached_epoch(tagged_dir):
    for extra in (dict(data_format="channels_first", pad_to_aspect_ratio=True),
                  dict(color_mode="grayscale", dtype="uint8", label_mode=None, shuffle=False)):
        options = dict(OPTIONS, **extra)
        want = epochs(dalipipe.make_dali_pipeline(tagged_dir, **options), 2)
        assert same(epochs(dalipipe.make_dali_pipeline(tagged_dir, cache="memory", **options),
                           2), want), extra


def test_a_changed_file_or_option_changes_the_key(tagged_dir, tmp_path):
    root = tmp_path / "tagged"
    shutil.copytree(tagged_dir, root)
    cache = str(tmp_path / "images")
    pipe = dalipipe.make_dali_pipeline(str(root), cache=cache, **OPTIONS)
    list(pipe.epoch(0))
    assert pipe.cache.complete
    other = dalipipe.make_dali_pipeline(str(root), cache=cache,
                                        **dict(OPTIONS, interpolation="nearest"))
    assert image_cache.cache_key(other) != image_cache.cache_key(pipe)
    # A file replaced by another image: its new pixels, not the cached ones.
    first = os.path.join(root, "blue", "tag_000.png")
    shutil.copy(os.path.join(root, "blue", "tag_003.png"), first)
    os.utime(first, ns=(1, 1))
    changed = dalipipe.make_dali_pipeline(str(root), cache=cache, shuffle=False,
                                          **{k: v for k, v in OPTIONS.items()})
    assert image_cache.cache_key(changed) != image_cache.cache_key(pipe)
    assert not changed.cache.complete
    images = np.concatenate([batch[0] for batch in changed.epoch(0)])
    assert tag_of(images[0]) == 3  # tag_000.png sorts first and now holds tag 3


def test_a_read_only_folder_is_read_when_complete_else_skipped(tagged_dir, tmp_path,
                                                              monkeypatch):
    cache = str(tmp_path / "images")
    list(dalipipe.make_dali_pipeline(tagged_dir, cache=cache, **OPTIONS).epoch(0))
    monkeypatch.setattr(image_cache.os, "access", lambda path, mode: False)  # as if read-only
    assert dalipipe.make_dali_pipeline(tagged_dir, cache=cache, **OPTIONS).cache.complete
    with pytest.warns(RuntimeWarning, match="cannot write its cache"):
        pipe = dalipipe.make_dali_pipeline(tagged_dir, cache=str(tmp_path / "other"), **OPTIONS)
    assert pipe.cache is None


CHILD = textwrap.dedent("""
    import sys, time
    import dalipipe
    tagged_dir, folder, batches = sys.argv[1], sys.argv[2], int(sys.argv[3])
    pipe = dalipipe.make_dali_pipeline(tagged_dir, cache=folder, **{options})
    for number, _ in enumerate(pipe.epoch(0)):
        if number + 1 == batches:
            print("filled", flush=True)
            time.sleep(60)
    print("done", flush=True)
""")


def child(tagged_dir, folder, batches):
    return subprocess.Popen([sys.executable, "-c", CHILD.format(options=OPTIONS), tagged_dir,
                             folder, str(batches)], stdout=subprocess.PIPE, text=True,
                            env=child_env())


def test_a_run_killed_while_filling_leaves_no_cache_read_and_resumes_exactly(tagged_dir,
                                                                               tmp_path):
    folder = str(tmp_path / "images")
    killed = child(tagged_dir, folder, 5)
    assert killed.stdout.readline() == "filled\n"
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    killed.stdout.close()
    want = epochs(dalipipe.make_dali_pipeline(tagged_dir, **OPTIONS), 2)
    pipe = dalipipe.make_dali_pipeline(tagged_dir, cache=folder, **OPTIONS)
    assert not os.path.exists(os.path.join(folder, f"{image_cache.cache_key(pipe)}.npy"))
    assert not pipe.cache.complete
    assert same([list(b) for b in pipe.epoch(0, start_batch=5)], want[0][5:])
    assert same(epochs(pipe, 2), want)
    assert pipe.cache.complete


def test_two_processes_share_one_folder_cache(tagged_dir, tmp_path):
    folder = str(tmp_path / "images")
    want = epochs(dalipipe.make_dali_pipeline(tagged_dir, **OPTIONS), 2)
    mine = dalipipe.make_dali_pipeline(tagged_dir, cache=folder, **OPTIONS)
    other = child(tagged_dir, folder, 0)  # fills the whole cache while `mine` is open
    assert other.stdout.read() == "done\n" and other.wait() == 0
    other.stdout.close()
    key = image_cache.cache_key(mine)
    assert os.path.exists(os.path.join(folder, f"{key}.npy"))
    assert same(epochs(mine, 1), want[:1])  # filled as it was opened: decodes, then reads
    assert mine.cache.complete
    with FileOpens(folders_of(tagged_dir)) as opened:
        assert same([[np.asarray(t) for t in b] for b in mine.epoch(1)], want[1])
    assert not opened.counts


def test_ranks_fill_one_folder_cache_in_the_first_epoch(tagged_dir, tmp_path):
    folder = str(tmp_path / "images")
    want = [epochs(dalipipe.make_dali_pipeline(tagged_dir, **OPTIONS).shard([r], 2), 2)
            for r in (0, 1)]
    # Two pipelines, each with its own view of the folder, as two processes have.
    ranks = [dalipipe.make_dali_pipeline(tagged_dir, cache=folder, **OPTIONS).shard([r], 2)
             for r in (0, 1)]
    got = [[[[np.asarray(t) for t in b] for b in rank.epoch(0)]] for rank in ranks]
    # Each rank stored its shard of the epoch; the second found the first's rows too.
    assert [rank.cache.complete for rank in ranks] == [False, True]
    with FileOpens(folders_of(tagged_dir)) as opened:
        for rank, rows in zip(ranks, got):
            rows.append([[np.asarray(t) for t in b] for b in rank.epoch(1)])
    assert not opened.counts
    assert ranks[0].cache.complete
    assert same(got, want)


def test_format_tf_equals_the_native_epochs_and_opens_no_file_later(tagged_dir):
    pytest.importorskip("tensorflow")
    want = epochs(dalipipe.make_dali_pipeline(tagged_dir, **OPTIONS), 3)
    dataset = dalipipe.make_dali_dataset(tagged_dir, cache="memory", format="tf", **OPTIONS)
    opens = []
    for epoch in range(3):
        with FileOpens(folders_of(tagged_dir)) as opened:
            got = [[t.numpy() for t in batch] for batch in dataset]
        opens.append(sum(opened.counts.values()))
        assert same(got, want[epoch]), epoch
    assert opens == [121, 0, 0]
    # `fit` trains on the same batches with and without the cache.
    import keras

    losses = []
    for cache in (None, "memory"):
        keras.utils.set_random_seed(1)
        model = keras.Sequential([keras.Input((12, 10, 3)), keras.layers.Rescaling(1 / 255),
                                  keras.layers.Flatten(), keras.layers.Dense(3)])
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        dataset = dalipipe.make_dali_dataset(tagged_dir, cache=cache, format="tf", **OPTIONS)
        losses.append(model.fit(dataset, epochs=2, verbose=0).history["loss"])
    assert losses[0] == losses[1]


@pytest.mark.backend_job("cache")
@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_the_cache_on_the_backend(backend, backend_jobs):
    result = backend_jobs(backend, "cache")
    for name in ("pydataset-memory", "pydataset-folder", "grain-memory"):
        assert result[name] == {"equal": [True] * 2, "opens": [121, 0]}, name
    # The folder that the "pydataset" dataset filled: the same key, read from the start.
    assert result["grain-folder"] == {"equal": [True] * 2, "opens": [0, 0]}
    assert [sum(counts) for counts in result["fit_counts"]] == [121, 121]
    assert not result["tensorflow_loaded"]


def test_tfrecord_sources_are_refused_for_now(tagged_tfrecords):
    with pytest.raises(ValueError, match=r"`cache` keeps the images of local image files; "
                                         r"TFRecord files, tar shards .* not supported"):
        dalipipe.make_dali_pipeline(tagged_tfrecords, cache="memory", **OPTIONS)


@pytest.mark.gpu
def test_on_a_gpu_the_cached_epochs_equal_the_uncached_ones(tagged_dir):
    for extra in (dict(), dict(augment=True)):
        options = dict(OPTIONS, device="gpu", **extra)
        cached = epochs(dalipipe.make_dali_pipeline(tagged_dir, cache="memory", **options), 2)
        if extra:  # crops of the stored image: filling (a fresh cache) or reading, the same
            filling = dalipipe.make_dali_pipeline(tagged_dir, cache="memory", **options)
            assert same([[np.asarray(t) for t in b] for b in filling.epoch(1)], cached[1])
        else:
            assert same(cached, epochs(dalipipe.make_dali_pipeline(tagged_dir, **options), 2))
