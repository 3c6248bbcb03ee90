"""The epoch (`dalipipe.passes`): pass `n` read whole is `epoch(n)` on every backend
and format, whatever Keras reads on the side; `ds[i]` outside Keras's loops; the
DALI pipelines TensorFlow's iterators build; a run killed twice and resumed trains
on what the run never killed trains on (`epochs_job.py`)."""

import os
import random
import subprocess
import sys

import numpy as np
import pytest

import dalipipe
from dalipipe.passes import Cursor
from dalipipe.utils import child_env

from helpers import tag_of

TESTS = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(TESTS, "epochs_job.py")
OPTIONS = dict(image_size=(12, 12), batch_size=8, normalization=None, verbose=False,
               device="cpu", seed=5)
STEPS = 16  # 121 tagged images in batches of 8


def tags(batches):
    return [[tag_of(image) for image in np.asarray(batch[0])] for batch in batches]


def test_the_cursor_moves_on_only_when_a_pass_is_read_whole(tagged_dir):
    cursor = Cursor(dalipipe.make_dali_pipeline(tagged_dir, **OPTIONS))
    assert cursor.position == (0, 0)
    cursor.set_position(3, 5)
    assert cursor.position == (3, 5)
    cursor.read_whole(2)  # an older pass: the cursor is already past it
    assert cursor.position == (3, 5)
    cursor.read_whole(3)
    assert cursor.position == (4, 0)
    with pytest.raises(ValueError, match=r"`start_batch` must be an integer in \[0, 16\)"):
        cursor.set_position(1, STEPS)


def test_pydataset_items_outside_keras_are_the_batches_of_their_index(tagged_dir):
    """Any index in any order: batch `i` of the next pass, which none of these reads
    starts or counts; then a pass read in order counts."""
    pipeline = dalipipe.make_dali_pipeline(tagged_dir, augment=True, **OPTIONS)
    dataset = dalipipe.make_dali_dataset(tagged_dir, augment=True, format="pydataset",
                                         **OPTIONS)
    want = list(pipeline.epoch(0))
    order = list(range(STEPS)) * 2
    random.Random(3).shuffle(order)
    for i in order:
        got = dataset[i]
        for a, b in zip(got, want[i]):
            np.testing.assert_array_equal(a, b)
    assert tags(dataset[i] for i in range(STEPS)) == tags(want)  # in order: a whole pass
    assert tags(dataset[i] for i in (0, 1)) == tags(pipeline.epoch(1))[:2]
    dataset.set_position(3, 10)
    assert len(dataset) == STEPS - 10
    assert tags([dataset[2]]) == tags(pipeline.epoch(3, start_batch=10))[2:3]
    with pytest.raises(IndexError, match=r"`index` must be an integer in \[0, 6\).*index=6"):
        dataset[6]


def test_keras_s_pydataset_reads_ignore_the_index_and_a_pass_left_does_not_count(tagged_dir):
    """Between Keras's `on_epoch_begin` and `on_epoch_end`, the pass's order whatever
    index is asked; a pass left before its end (as `fit`'s look-ahead read is) is
    loaded again by the next."""
    pipeline = dalipipe.make_dali_pipeline(tagged_dir, **OPTIONS)
    dataset = dalipipe.make_dali_dataset(tagged_dir, format="pydataset", **OPTIONS)

    def keras_pass(indices):
        dataset.on_epoch_begin()
        assert dataset.num_batches == STEPS
        batches = [dataset[i] for i in indices]
        dataset.on_epoch_end()
        return tags(batches)

    assert keras_pass([7]) == tags(pipeline.epoch(0))[:1]  # left: it does not count
    backwards = list(range(STEPS))[::-1]
    assert keras_pass(backwards) == tags(pipeline.epoch(0))
    assert keras_pass(backwards) == tags(pipeline.epoch(1))


def test_tensorflow_builds_one_pipeline_per_pass_read(tagged_dir):
    """`fit` for 3 epochs with validation: one DALI pipeline per pass read (each
    started pass of `EpochFeed.pass_epochs` is one built), and epoch e trains on
    `epoch(e)`, in the CPU's structure and in the GPU's (a DALI dataset not nested
    in a `flat_map`, built here on the CPU); an iterator never read builds none."""
    import keras

    if keras.backend.backend() != "tensorflow":
        pytest.skip("Keras's backend here is not TensorFlow")
    from dalipipe import tf_dataset
    from epochs_job import Reads, native_rows, same_samples, signature_model

    train_pipe, val_pipe = dalipipe.make_dali_pipeline(
        tagged_dir, augment=True, validation_split=0.25, subset="both", **OPTIONS)
    for nested in (True, False):
        train = tf_dataset.to_dataset(train_pipe, nested=nested)
        val = tf_dataset.to_dataset(val_pipe, nested=nested)
        spare = iter(train)  # never read
        assert train._feed.pass_epochs == []
        reads = Reads()
        signature_model().fit(train, validation_data=val, epochs=3, verbose=0,
                              callbacks=[reads])
        assert train._feed.pass_epochs == [0, 1, 2], nested
        assert val._feed.pass_epochs == [0, 1, 2], nested
        for epoch, seen in enumerate(reads.epochs):
            assert same_samples(seen, native_rows(train_pipe, epoch)), (nested, epoch)
        del spare


def test_a_tensorflow_pass_left_before_its_end_does_not_count(tagged_dir):
    pipeline = dalipipe.make_dali_pipeline(tagged_dir, **OPTIONS)
    dataset = dalipipe.make_dali_dataset(tagged_dir, format="tf", **OPTIONS)
    for images, _ in dataset:  # one batch, with DALI's prefetch: not the last batch's inputs
        break
    assert tags(dataset) == tags(pipeline.epoch(0))
    assert tags(dataset) == tags(pipeline.epoch(1))


def run_job(backend, *args):
    pytest.importorskip(backend)
    environ = child_env(KERAS_BACKEND=backend, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3")
    process = subprocess.run([sys.executable, JOB, *map(str, args)], env=environ,
                             capture_output=True, text=True, timeout=400, cwd=TESTS)
    assert process.returncode in (0, -9), process.stderr[-4000:]
    return process.returncode


@pytest.mark.slow
@pytest.mark.backend_job("fits")
@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_fit_trains_epoch_e_on_the_native_epoch_e(backend, backend_jobs):
    """Whatever `fit` reads up front, and with `shuffle` True or False, with and
    without `validation_data`: the samples and crops of epoch e are `epoch(e)`'s."""
    result = backend_jobs(backend, "fits")
    assert result["backend"] == backend
    assert len(result["cases"]) == 4
    for name, case in result["cases"].items():
        assert case["trained_on"] == [0, 1, 2], name
        assert case["validation_passes"] == (3 if "validation=True" in name else 0), name


@pytest.mark.slow
@pytest.mark.backend_job("plain_run")
@pytest.mark.parametrize("backend", ["tensorflow", "torch", "jax"])
def test_a_run_killed_twice_trains_on_what_a_run_never_killed_trains_on(backend, tagged_dir,
                                                                         tmp_path, backend_jobs):
    """With `validation_data` and a `ModelCheckpoint`: killed in epoch 0, restarted and
    killed in epoch 1, restarted to the end; against the same script without
    `dalipipe.BackupAndRestore`, never killed (in the `backend_jobs` process)."""
    from test_resume import read_runs, steps_of

    plain = tmp_path / "plain" / "records.jsonl"
    plain.parent.mkdir()
    plain.write_text(backend_jobs(backend, "plain_run"))
    (whole,) = read_runs(plain)
    steps = 1 + max(r["batch"] for r in whole if "batch" in r)
    records = tmp_path / "killed" / "records.jsonl"
    records.parent.mkdir()
    rng = random.Random()
    # Backups every 3 steps: each run is killed after one in its epoch.
    for kill in (f"at:0,{rng.randrange(3, steps - 1)}", f"at:1,{rng.randrange(3, steps - 1)}", ""):
        code = run_job(backend, "run", tagged_dir, records, tmp_path / "backup", kill)
        assert code == (0 if kill == "" else -9), kill
    runs = read_runs(records)
    starts = [run[0]["start"] for run in runs]
    assert starts[1][0] == 0 and starts[2][0] >= 1, starts
    seen = []
    for run, until in zip(runs, [*starts[1:], None]):
        seen += steps_of(run, before=until)
    assert seen == steps_of(whole)


def test_the_feed_reads_ahead_in_its_own_thread_and_raises_at_the_batch(tmp_path, tagged_dir):
    """The pass's feed prepares `READ_AHEAD` batches beyond the one taken, moving no
    cursor; a file replaced after the check is named by the read of its batch."""
    import shutil
    import time

    from dalipipe.passes import READ_AHEAD

    folder = tmp_path / "copy"
    shutil.copytree(tagged_dir, folder)
    pipeline = dalipipe.make_dali_pipeline(str(folder), shuffle=False, **OPTIONS)
    dataset = dalipipe.make_dali_dataset(str(folder), shuffle=False, format="pydataset",
                                         **OPTIONS)
    first = dataset[0]
    feed = dataset._stream._feed[0]
    deadline = time.monotonic() + 60
    while feed._queue.qsize() < READ_AHEAD and time.monotonic() < deadline:
        time.sleep(0.05)
    assert feed._queue.qsize() == READ_AHEAD and feed._thread.is_alive()
    assert tags([first]) == tags(pipeline.epoch(0))[:1]
    # Batch 10's first file, replaced: the batches before the ones DALI prefetches
    # with it come (the read-ahead raises nothing sooner), then a read names it.
    victim = dataset.file_paths[10 * 8]
    with open(victim, "wb") as f:
        f.write(b"not an image any more")
    depth = pipeline.options.prefetch_queue_depth
    for i in range(1, 10 - depth):
        dataset[i]
    with pytest.raises(RuntimeError, match=f"{victim} changed after the check"):
        for i in range(10 - depth, 11):
            dataset[i]
