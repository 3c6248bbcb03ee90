"""`dalipipe.native.Runner`: an `ImagePipeline`'s graph run from NumPy inputs on the
CPU, one epoch per `run`: partial batches, runs left before their end, single
samples, and the file a decoder error comes from."""

import os

import numpy as np
import pytest
from PIL import Image

from helpers import NUM_INDEXED, index_of, indexed_paths
from dalipipe import make_dali_pipeline
from dalipipe.native import Runner


def indexed_pipeline(indexed_dir, **options):
    paths, labels = indexed_paths(indexed_dir)
    return make_dali_pipeline(paths, labels=labels, **{
        "image_size": (4, 4), "batch_size": 8, "shuffle": False, "normalization": None,
        "dtype": "uint8", "device": "cpu", "verbose": False, **options})


def tags(batches):
    return [[index_of(image) for image in batch[0]] for batch in batches]


def test_a_run_yields_the_samples_given_in_their_order_with_a_partial_last_batch(indexed_dir):
    runner = Runner(indexed_pipeline(indexed_dir))
    order = np.array([28, 3, 0, 17, 5, 11, 2, 9, 21, 20, 1], np.int64)
    batches = list(runner.run(order))
    assert [len(b[0]) for b in batches] == [8, 3]
    assert sum(tags(batches), []) == order.tolist()
    assert np.concatenate([b[1] for b in batches]).tolist() == [i % 3 for i in order]
    assert batches[0][0].dtype == np.uint8 and batches[1][1].dtype == np.int32
    assert runner.finished


def test_each_run_is_an_epoch_on_one_dali_pipeline(indexed_dir):
    runner = Runner(indexed_pipeline(indexed_dir))
    everything = np.arange(NUM_INDEXED)
    first = tags(runner.run(everything))
    dali = runner.pipe
    assert [len(t) for t in first] == [8, 8, 8, 5]
    assert sum(tags(runner.run(everything[::-1])), []) == list(range(NUM_INDEXED))[::-1]
    assert tags(runner.run(everything)) == first
    assert runner.pipe is dali  # built once, reset for each run


@pytest.mark.parametrize("read", [1, 3])
def test_a_run_left_before_its_end_does_not_leak_into_the_next_which_reuses_its_pipeline(
        indexed_dir, read):
    """Left after its first batch (DALI's queue full) or near its end, a run's batches
    in flight are dropped, and its DALI pipeline runs the next run; the run left
    cannot be read on."""
    runner = Runner(indexed_pipeline(indexed_dir))
    left = runner.run(np.arange(NUM_INDEXED))
    assert tags(next(left) for _ in range(read))[0] == list(range(8))
    assert not runner.finished
    dali = runner.pipe
    assert sum(tags(runner.run(np.arange(20, 29))), []) == list(range(20, 29))
    assert runner.pipe is dali and runner.built == 1
    with pytest.raises(RuntimeError, match="ended by a later one"):
        next(left)
    assert sum(tags(runner.run(np.arange(NUM_INDEXED)[::-1])), []) == \
        list(range(NUM_INDEXED))[::-1]


def test_nothing_runs_before_the_first_batch_is_asked_for(indexed_dir):
    runner = Runner(indexed_pipeline(indexed_dir))
    runner.run(np.arange(4))
    assert runner.pipe is None


def test_without_a_batch_size_it_yields_single_samples(indexed_dir):
    runner = Runner(indexed_pipeline(indexed_dir, batch_size=None))
    samples = list(runner.run(np.array([4, 7, 1])))
    assert [image.shape for image, _ in samples] == [(4, 4, 3)] * 3
    assert [index_of(image) for image, _ in samples] == [4, 7, 1]
    assert [int(label) for _, label in samples] == [1, 1, 1] and samples[0][1].shape == ()


def test_the_random_rows_drive_the_crops_and_flips(photo_path):
    pipe = make_dali_pipeline([photo_path] * 3, labels=[0, 1, 2], image_size=(8, 8),
                              batch_size=3, augment=True, normalization=None, device="cpu",
                              verbose=False)
    runner = Runner(pipe)
    ids = np.arange(3)

    def images(random):
        (batch,) = runner.run(ids, random)
        return batch[0]

    whole = np.array([[1.0, 0.5, 0.5, 0.5, 0.9]] * 3, np.float32)  # the whole image, unflipped
    flipped = whole.copy()
    flipped[:, 4] = 0.1
    np.testing.assert_array_equal(images(whole), images(whole))
    np.testing.assert_allclose(images(flipped), images(whole)[:, :, ::-1], atol=1e-4)
    corner = whole.copy()
    corner[:, 0] = 0.0
    assert not np.allclose(images(corner), images(whole))


def test_a_shard_s_weights_are_an_output(indexed_dir):
    shard = indexed_pipeline(indexed_dir).shard([0], 2)
    runner = Runner(shard)
    weights = np.array([1, 0, 1, 1], np.float32)
    ((images, labels, out),) = list(runner.run(np.array([5, 6, 7, 8]), weights=weights))
    np.testing.assert_array_equal(out, weights)
    ((_, _, ones),) = list(runner.run(np.array([5, 6, 7, 8])))
    np.testing.assert_array_equal(ones, np.ones(4, np.float32))


@pytest.fixture
def two_bad_files(tmp_path):
    """Ten PNGs; numbers 5 (a PNG cut short) and 6 (text) do not decode."""
    paths = []
    for i in range(10):
        path = str(tmp_path / f"{i}.png")
        Image.new("RGB", (6, 5), (8 * i, 0, 0)).save(path)
        paths.append(path)
    with open(paths[5], "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + b"x" * 60)
    with open(paths[6], "wb") as f:
        f.write(b"just some text, not an image\n" * 10)
    return paths


def test_a_decoder_error_names_each_bad_file_of_the_batch_and_its_reason(two_bad_files):
    pipe = make_dali_pipeline(two_bad_files, labels=None, image_size=(4, 4), batch_size=4,
                              shuffle=False, check=None, device="cpu", verbose=False)
    runner = Runner(pipe)
    with pytest.raises(RuntimeError) as info:
        list(runner.run(np.arange(10)))
    assert str(info.value) == (
        "DALI failed to decode one of these files. Fix or remove it; `dalipipe check --full "
        "SOURCE` lists every file that DALI cannot decode.\n"
        f"  {two_bad_files[5]}: truncated PNG (chunk b'xxxx' runs past the end)\n"
        f"  {two_bad_files[6]}: not an image DALI decodes (starts with b'just som')")
    assert "Failed to decode" in str(info.value.__cause__) or \
        "nvImageCodec" in str(info.value.__cause__)
    # The DALI pipeline is built again: good samples still run, a bad one alone is named.
    assert [len(b[0]) for b in runner.run(np.array([0, 1, 2, 3, 4, 7]))] == [4, 2]
    with pytest.raises(RuntimeError) as info:
        list(runner.run(np.array([0, 6])))
    assert str(info.value).startswith(
        f"DALI failed to decode {two_bad_files[6]}: not an image DALI decodes")


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_a_pipeline_that_fails_is_shut_down_at_once(two_bad_files):
    """Its threads end with the error, not when it is collected (held here, as a
    traceback or a user's variable may hold it); the next run builds another."""
    pipe = make_dali_pipeline(two_bad_files, labels=None, image_size=(4, 4), batch_size=4,
                              shuffle=False, check=None, device="cpu", verbose=False,
                              num_threads=4)
    runner = Runner(pipe)
    list(runner.run(np.arange(5)))
    failing, running = runner.pipe, len(os.listdir("/proc/self/task"))
    with pytest.raises(RuntimeError, match="DALI failed to decode"):
        list(runner.run(np.arange(10)))
    assert runner.pipe is None and failing is not None
    assert len(os.listdir("/proc/self/task")) <= running - 4
    assert [len(b[0]) for b in runner.run(np.array([0, 1, 2, 3, 4, 7]))] == [4, 2]
    assert runner.built == 2


def test_other_errors_are_not_taken_for_a_decoder_s(indexed_dir):
    runner = Runner(indexed_pipeline(indexed_dir))
    list(runner.run(np.arange(8)))
    assert runner.decode_failure("File mapping failed: /some/file.png", 0) is None


def test_batches_stay_valid_after_the_next_ones_and_cpu_ones_are_not_copied(indexed_dir):
    """DALI's default executor gives each batch buffers of its own: the NumPy batches
    view them, and the next batches, or the next run, leave them as they were."""
    runner = Runner(indexed_pipeline(indexed_dir))
    held, copies = [], []
    for batch in runner.run(np.arange(NUM_INDEXED)):
        held.append(batch)
        copies.append(tuple(np.copy(output) for output in batch))
    list(runner.run(np.arange(NUM_INDEXED)[::-1]))
    for batch, copy in zip(held, copies):
        for output, expected in zip(batch, copy):
            np.testing.assert_array_equal(output, expected)
            assert not output.flags.owndata and output.flags.writeable  # DALI's buffer


@pytest.mark.parametrize("exec_dynamic", [True, False])
def test_to_numpy_copies_where_dali_reuses_its_buffers(exec_dynamic):
    """With `exec_dynamic=False` DALI writes later batches into the same buffers: there
    the batch is copied, and stays as it was."""
    from nvidia.dali import fn, pipeline_def, types

    from dalipipe.native import _to_numpy

    @pipeline_def(batch_size=2, num_threads=1, device_id=None, exec_dynamic=exec_dynamic)
    def numbered():
        batch = fn.external_source(
            source=lambda info: [np.full((3, 3), info.iteration, np.uint8)] * 2,
            batch=True, batch_info=True)
        return fn.cast(batch, dtype=types.UINT8)

    pipe = numbered()
    pipe.build()
    batches = [_to_numpy(pipe.run()[0], reused=not pipe.exec_dynamic) for _ in range(6)]
    assert [int(b[0, 0, 0]) for b in batches] == list(range(6))
    assert all(b.flags.owndata for b in batches) == (not exec_dynamic)
