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
    """Read by Keras's own PyDataset adapter, with `shuffle=True` (indices in a random
    order): the pass's order; a pass left before its end (as `fit`'s look-ahead
    read is) is loaded again by the next."""
    import itertools

    from keras.src.trainers.data_adapters.py_dataset_adapter import PyDatasetAdapter

    pipeline = dalipipe.make_dali_pipeline(tagged_dir, **OPTIONS)
    dataset = dalipipe.make_dali_dataset(tagged_dir, format="pydataset", **OPTIONS)

    def keras_pass(count=None):
        adapter = PyDatasetAdapter(dataset, shuffle=True)
        adapter.on_epoch_begin()
        batches = list(itertools.islice(adapter.get_numpy_iterator(), count))
        adapter.on_epoch_end()
        return tags(batches)

    assert keras_pass(1) == tags(pipeline.epoch(0))[:1]  # left: it does not count
    assert keras_pass() == tags(pipeline.epoch(0))
    assert keras_pass() == tags(pipeline.epoch(1))


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
        assert val._feed.pass_epochs == [0, 0, 0], nested  # validation moves no cursor
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


RULE = {"resumed": [2, 3], "two_fits": [[0, 1], [2]], "validation_itself": [0, 1, 2]}
PYDATASET_RULE = {**RULE, "num_batches_read": [0, 1], "items_after_a_raise": True}


@pytest.mark.parametrize("format", ["tf", "pydataset", "grain"])
def test_the_epoch_rule_on_tensorflow(tagged_dir, format):
    """`fit(initial_epoch=2)` on a new dataset trains epochs 2 and 3 on `epoch(2)`
    and `epoch(3)`; a second `fit` goes on where the first ended, `evaluate` and
    `predict` between them and validation passes on the dataset itself move
    nothing; a callback reading `num_batches` mid-epoch restarts nothing, and
    `ds[i]` after a `fit` that raised is batch `i` (`epochs_job.rule`). With
    `"grain"`, Keras reads the passes in `tf.data`'s threads, away from the loop."""
    import keras

    if keras.backend.backend() != "tensorflow":
        pytest.skip("Keras's backend here is not TensorFlow")
    if format == "grain":
        pytest.importorskip("grain")
    from epochs_job import rule

    assert rule(tagged_dir, format) == (PYDATASET_RULE if format == "pydataset" else RULE)


def test_evaluate_reads_a_whole_pass_and_moves_nothing_after_set_position(tagged_dir):
    """Mid-epoch (`set_position(1, 10)`): `evaluate` reads every batch of `epoch(1)`,
    and the next training pass still starts at step 10."""
    import keras

    from epochs_job import signature_model

    dataset = dalipipe.make_dali_dataset(tagged_dir, format="pydataset", **OPTIONS)
    dataset.set_position(1, 10)

    class Steps(keras.callbacks.Callback):
        steps = 0

        def on_test_batch_end(self, batch, logs=None):
            Steps.steps += 1

    signature_model().evaluate(dataset, verbose=0, callbacks=[Steps()])
    assert Steps.steps == STEPS
    assert len(dataset) == STEPS - 10
    pipeline = dalipipe.make_dali_pipeline(tagged_dir, **OPTIONS)
    assert tags([dataset[0]]) == tags(pipeline.epoch(1, start_batch=10))[:1]


@pytest.mark.slow
@pytest.mark.backend_job("rule")
@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_the_epoch_rule_on_torch_and_jax(backend, backend_jobs):
    """As on TensorFlow, in the "pydataset" and "grain" formats."""
    result = backend_jobs(backend, "rule")
    assert result == {"pydataset": PYDATASET_RULE, "grain": RULE}


@pytest.mark.backend_job("pipelines")
@pytest.mark.parametrize("backend", ["torch"])
def test_a_fit_builds_one_dali_pipeline_per_dataset_and_a_pass_left_early_keeps_it(
        backend, backend_jobs):
    """torch: Keras's first-batch peek leaves a pass; the passes after it (three
    epochs over two `fit`s, with validation) run on the same DALI pipeline, and no
    other is left alive, in both native formats. Every pass's inputs are built in
    the background (`dalipipe.ahead`), the first one's too, and with
    `fit(initial_epoch=2)` epoch 2's while Keras peeks at epoch 0's first batch."""
    results = backend_jobs(backend, "pipelines")
    for format in ("pydataset", "grain"):
        result = results[format]
        assert result["built"] == {"train": 1, "val": 1}, format
        assert result["alive"] == {"train": 1, "val": 1}, format
        assert result["trained_on"] == [0, 1, 2], format
        assert result["inputs_built"] == [[e, 0, True] for e in range(4)], format
    assert results["resumed"] == {"inputs_built": [[0, 0, True], [2, 0, True], [3, 0, True]],
                                  "trained_on": [2]}


def feed_of(tagged_dir, count, depth):
    """A `_Feed` of the last 3 batches of `epoch(0)`, told that the pass has `count`."""
    from dalipipe import native, passes

    pipeline = dalipipe.make_dali_pipeline(tagged_dir, **OPTIONS)
    convert = passes._batch_converter(passes.converter("numpy", False), False)
    return passes._Feed(native.Runner(pipeline), pipeline.epoch_inputs(0, start_batch=STEPS - 3),
                        convert, count, depth)


def within(seconds, function):
    """`function()`'s error, raised in a daemon thread; fails when it takes longer
    than `seconds` (a read blocked for ever)."""
    import threading

    found = []

    def call():
        try:
            function()
        except BaseException as e:  # the error is what the test checks
            found.append(e)

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still blocked after {seconds} s"
    return found[0] if found else None


@pytest.mark.parametrize("depth", [0, 2])
def test_a_pass_whose_dali_run_gives_fewer_or_more_batches_raises(tagged_dir, depth):
    """DALI ends its run after 3 batches: a pass of 4 raises at its 4th read rather
    than wait for ever; a pass of 2 raises at its end (`finish`, which
    `PassStream.read` calls at a pass's last step)."""
    feed = feed_of(tagged_dir, 4, depth)

    def four():
        for _ in range(4):
            feed.next()

    error = within(60, four)
    assert isinstance(error, RuntimeError) and "DALI gave 3 batches where the pass has 4" \
        in str(error), error
    feed = feed_of(tagged_dir, 2, depth)

    def two():
        feed.next(), feed.next()
        feed.finish()

    error = within(60, two)
    assert isinstance(error, RuntimeError) and "DALI gave more batches than the pass has (2)" \
        in str(error), error
    feed = feed_of(tagged_dir, 3, depth)
    assert within(60, lambda: [feed.next() for _ in range(3)] and feed.finish()) is None


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
    `dalipipe.BackupAndRestore`, never killed (in the `backend_jobs` process), which
    trains on the native epochs. Each resumed epoch announces its remaining steps (as
    Keras's progress bar counts them), the next ones all; a callback's state in the
    backups counts each step once; no "ran out of data"; the backups are deleted at
    the end. (The killed run of each backend: `test_resume.py` kills TensorFlow's
    during a backup's write.)"""
    import epochs_job
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
    native = dalipipe.make_dali_pipeline(tagged_dir, **epochs_job.OPTIONS, **epochs_job.SPLIT)[0]
    assert steps_of(whole) == [(epoch, batch, [tag_of(image) for image in images])
                               for epoch in range(epochs_job.EPOCHS)
                               for batch, (images, _) in enumerate(native.epoch(epoch))]
    for run, start in zip(runs, starts):
        announced = [(r["epoch_begin"], r["steps"]) for r in run if "epoch_begin" in r]
        assert announced[0] == (start[0], steps - start[1]), (start, announced)
        assert [s for _, s in announced[1:]] == [steps] * (len(announced) - 1), announced
    assert [e for e, _ in announced] == list(range(starts[2][0], epochs_job.EPOCHS))
    done = {"warnings": [], "counted": epochs_job.EPOCHS * steps}
    assert whole[-1] == runs[2][-1] == done
    assert not os.path.exists(tmp_path / "backup")  # delete_checkpoint=True


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
    feed = dataset.stream._feed[0]
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


@pytest.mark.slow
def test_ctrl_c_during_fit_with_stalled_reads_exits_without_waiting_for_them(
        s3_server, tagged_dir, tmp_path):
    """`fit` on torch from `s3://`, the S3 server suspended (SIGSTOP: connections
    complete in the kernel, nothing answers) once training runs: Ctrl-C (SIGINT)
    ends the process while the server stays suspended, the stalled reads left to
    daemon threads. (A process that waited on them would never end here. It ends in
    2-7 s on a loaded 2-core machine, most of it DALI's and Python's teardown; the
    bound below leaves room for that noise.)"""
    import signal
    import time

    pytest.importorskip("torch")
    client = s3_server.client()
    client.create_bucket(Bucket="stalled")
    for root, _, files in os.walk(tagged_dir):
        for name in files:
            path = os.path.join(root, name)
            client.put_object(Bucket="stalled", Key=f"tagged/{os.path.relpath(path, tagged_dir)}",
                              Body=open(path, "rb").read())
    environ = child_env(KERAS_BACKEND="torch", CUDA_VISIBLE_DEVICES="")
    errors = tmp_path / "stderr.txt"
    with open(errors, "w") as stderr:
        # SIGINT's default disposition, as a terminal's process has it: a child
        # inherits an ignored SIGINT (from a test process that ignores it, as under
        # some pytest-xdist runs), and Python then installs no KeyboardInterrupt handler.
        process = subprocess.Popen([sys.executable, JOB, "interrupted", "s3://stalled/tagged/"],
                                   env=environ, cwd=TESTS, stdout=subprocess.PIPE,
                                   stderr=stderr, text=True,
                                   preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert process.stdout.readline() == "training\n", errors.read_text()[-4000:]
        s3_server.process.send_signal(signal.SIGSTOP)
        time.sleep(3)  # the batches read ahead are taken: training waits on the reads
        assert process.poll() is None
        process.send_signal(signal.SIGINT)
        start = time.monotonic()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            pass
        took = time.monotonic() - start
        if process.poll() is None:  # its threads' stacks, for the message
            process.send_signal(signal.SIGUSR1)
            time.sleep(2)
        assert process.poll() is not None, \
            "the process waits on the stalled reads:\n" + errors.read_text()[-6000:]
        assert took < 20, f"the process took {took:.1f} s to exit after SIGINT"
        assert "KeyboardInterrupt" in errors.read_text()
    finally:
        s3_server.process.send_signal(signal.SIGCONT)
        process.kill()
        process.wait()
