"""The passes' inputs built ahead (`dalipipe.ahead`): equal bit for bit to those
built in place, read-only, built off the thread that reads the pass (the first
pass's when the dataset is made, a resumed position's when it is set), taken by
the pass that asks before their build starts, and never built for a dataset
collected before."""

import gc
import os
import threading
import time

import numpy as np
import pytest

import dalipipe
from dalipipe import ahead, passes
from test_masks import dense  # noqa: F401 (the fixture: 8 images with masks and boxes)

OPTIONS = dict(image_size=(12, 12), batch_size=8, verbose=False, device="cpu", seed=5,
               num_threads=1)
FEATURES = {
    "classification": dict(),
    "augment": dict(augment=True),
    "recipe": dict(augment="randaugment"),
    "mix": dict(augment=True, mix="mixup", label_mode="categorical"),
}
DENSE = dict(image_size=(24, 32), batch_size=3, seed=3, device="cpu", verbose=False,
             num_threads=1, augment=True)


def pipeline_of(feature, tagged_dir, dense_dir):
    if feature == "masks":
        return dalipipe.make_dali_pipeline(os.path.join(dense_dir, "images"), **DENSE,
                                           masks=os.path.join(dense_dir, "masks"))
    if feature == "boxes":
        return dalipipe.make_dali_pipeline(
            os.path.join(dense_dir, "images"), **DENSE, box_crop=True, max_boxes=6,
            boxes=os.path.join(dense_dir, "instances.json"))
    return dalipipe.make_dali_pipeline(tagged_dir, **OPTIONS, **FEATURES[feature])


def calls_by_thread(pipe):
    """Wraps `pipe.epoch_inputs` (the real method) to record `(epoch, start_batch,
    thread id)` of each call."""
    calls, build = [], pipe.epoch_inputs

    def recorded(epoch=0, *, start_batch=0):
        calls.append((epoch, start_batch, threading.get_ident()))
        return build(epoch, start_batch=start_batch)

    pipe.epoch_inputs = recorded
    return calls


def wait_built_ahead(pipe, epoch, start_batch=0):
    """Waits (10 s at most) until the inputs of `(epoch, start_batch)` are built in
    the background thread, as a pass that starts later finds them."""
    deadline = time.monotonic() + 10
    while (epoch, start_batch, True) not in pipe.inputs_ahead.built:
        assert time.monotonic() < deadline, list(pipe.inputs_ahead.built)
        time.sleep(0.01)


@pytest.mark.parametrize("feature", [*FEATURES, "masks", "boxes"])
def test_inputs_built_ahead_equal_those_built_in_place_and_are_read_only(
        feature, tagged_dir, dense):  # noqa: F811 (the fixture)
    pipe = pipeline_of(feature, tagged_dir, dense)
    calls = calls_by_thread(pipe)
    pipe.inputs_ahead.prepare(2)
    wait_built_ahead(pipe, 2)
    built_ahead = pipe.inputs_ahead.get(2)
    assert [(e, s) for e, s, _ in calls] == [(2, 0)]
    assert calls[0][2] != threading.get_ident()  # built in the background
    in_place = pipeline_of(feature, tagged_dir, dense).epoch_inputs(2)
    for got, want in zip(built_ahead, in_place):
        if want is None:
            assert got is None
            continue
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes() == want.tobytes()  # bit for bit
        assert not got.flags.writeable
        if got.size:
            with pytest.raises(ValueError, match="read-only"):
                got[0] = 0
    # Asked again, they are the same arrays, not built again.
    assert pipe.inputs_ahead.get(2)[0] is built_ahead[0]
    assert len(calls) == 1


def test_no_pass_builds_its_inputs_in_the_reading_thread(tagged_dir):
    """The first pass's are built from when the cursor is made (as the dataset is),
    each next one's while a pass runs."""
    pipe = dalipipe.make_dali_pipeline(tagged_dir, **OPTIONS, augment=True)
    calls = calls_by_thread(pipe)
    cursor, stream = passes.Cursor(pipe), passes.PassStream(pipe, "numpy")
    wait_built_ahead(pipe, 0)  # the time a model takes to build, before its first batch
    try:
        for _ in range(2):  # two passes read whole, as `fit`'s adapters read them
            epoch, start, counts = cursor.start_pass(None)
            for step in range(start, pipe.steps):
                stream.read(epoch, step)
            cursor.read_whole(epoch)
    finally:
        stream.close()
    mine = threading.get_ident()
    assert sorted((e, s, t == mine) for e, s, t in calls) == [(0, 0, False), (1, 0, False),
                                                              (2, 0, False)]
    np.testing.assert_array_equal(pipe.inputs_ahead.get(1)[0], pipe.epoch_inputs(1)[0])


def test_a_pass_restarted_at_its_start_takes_the_inputs_kept(tagged_dir):
    pipe = dalipipe.make_dali_pipeline(tagged_dir, **OPTIONS, augment=True)
    calls = calls_by_thread(pipe)
    stream = passes.PassStream(pipe, "numpy")
    try:
        stream.read(0, 0)  # a pass left early (Keras's first-batch peek), then restarted
        stream.close()
        stream.read(0, 0)
        stream.read(0, 3)  # another step: its own inputs
    finally:
        stream.close()
    assert [(e, s) for e, s, _ in calls] == [(0, 0), (0, 3)]


def test_inputs_the_same_every_epoch_are_built_once(tagged_dir):
    pipe = dalipipe.make_dali_pipeline(tagged_dir, **OPTIONS, shuffle=False)
    calls = calls_by_thread(pipe)
    first = pipe.inputs_ahead.get(0)
    pipe.inputs_ahead.prepare(1)
    assert pipe.inputs_ahead.get(5)[0] is first[0]
    assert len(calls) == 1
    np.testing.assert_array_equal(first[0], pipe.epoch_inputs(5)[0])


def test_a_failed_build_ahead_is_built_again_by_the_pass(tagged_dir):
    pipe = dalipipe.make_dali_pipeline(tagged_dir, **OPTIONS, augment=True)
    build = pipe.epoch_inputs

    failed = threading.Event()

    def fails_ahead(epoch=0, *, start_batch=0):
        if threading.current_thread().name == "dalipipe-inputs-ahead":
            failed.set()
            raise MemoryError("ahead")
        return build(epoch, start_batch=start_batch)

    pipe.epoch_inputs = fails_ahead
    pipe.inputs_ahead.prepare(1)
    assert failed.wait(10)
    np.testing.assert_array_equal(pipe.inputs_ahead.get(1)[1], build(1)[1])
    assert [ahead_ for _, _, ahead_ in pipe.inputs_ahead.built] == [False]


def test_only_the_last_inputs_are_kept(tagged_dir):
    pipe = dalipipe.make_dali_pipeline(tagged_dir, **OPTIONS, augment=True)
    calls = calls_by_thread(pipe)
    for epoch in range(ahead.KEEP + 1):
        pipe.inputs_ahead.get(epoch)
    pipe.inputs_ahead.get(ahead.KEEP)
    pipe.inputs_ahead.get(0)  # dropped: built again
    assert [e for e, _, _ in calls] == [*range(ahead.KEEP + 1), 0]


def test_tensorflow_passes_take_the_next_epoch_built_ahead(tagged_dir):
    dataset = dalipipe.make_dali_dataset(tagged_dir, format="tf", **OPTIONS, augment=True)
    pipe = dataset.image_pipeline
    names, build = [], pipe.epoch_inputs

    def recorded(epoch=0, *, start_batch=0):
        names.append((epoch, threading.current_thread().name))
        return build(epoch, start_batch=start_batch)

    pipe.epoch_inputs = recorded
    wait_built_ahead(pipe, 0)  # the first pass's: built from when the dataset was made
    for _ in range(2):  # each iteration is a pass
        for _ in dataset:
            pass
    assert sorted(names) == [(1, "dalipipe-inputs-ahead"), (2, "dalipipe-inputs-ahead")]
    assert sorted(pipe.inputs_ahead.built) == [(0, 0, True), (1, 0, True), (2, 0, True)]


def blocked_builder(tagged_dir):
    """A pipeline whose build ahead of epoch 1, asked for here, holds the background
    thread until the event returned is set: `(pipe, event)`."""
    pipe = dalipipe.make_dali_pipeline(tagged_dir, **OPTIONS, augment=True)
    started, release, build = threading.Event(), threading.Event(), pipe.epoch_inputs

    def held(epoch=0, *, start_batch=0):
        started.set()
        release.wait(10)
        return build(epoch, start_batch=start_batch)

    pipe.epoch_inputs = held
    pipe.inputs_ahead.prepare(1)
    assert started.wait(10)
    return pipe, release


def test_a_pass_takes_the_build_of_its_inputs_asked_for_and_not_started(tagged_dir):
    """The background thread is busy: a pass that starts builds its inputs itself,
    once, rather than waiting for their turn."""
    busy, release = blocked_builder(tagged_dir)
    try:
        pipe = dalipipe.make_dali_pipeline(tagged_dir, **OPTIONS, augment=True)
        calls = calls_by_thread(pipe)
        pipe.inputs_ahead.prepare(3, 2)
        got = pipe.inputs_ahead.get(3, 2)
    finally:
        release.set()
    busy.inputs_ahead.get(1)
    wait_built_ahead(busy, 1)
    assert [(e, s, t == threading.get_ident()) for e, s, t in calls] == [(3, 2, True)]
    assert got[1].tobytes() == pipe.epoch_inputs(3, start_batch=2)[1].tobytes()


def test_no_inputs_are_built_for_a_dataset_collected_before_their_build(tagged_dir):
    busy, release = blocked_builder(tagged_dir)
    try:
        dataset = dalipipe.make_dali_dataset(tagged_dir, **OPTIONS, augment=True,
                                             format="pydataset")
        calls = calls_by_thread(dataset.image_pipeline)
        dataset.set_position(2, 3)  # asks for (2, 3), after the first pass's (0, 0)
        del dataset
        gc.collect()
    finally:
        release.set()
    wait_built_ahead(busy, 1)
    busy.inputs_ahead.prepare(4)  # asked after those: its build shows theirs are passed
    wait_built_ahead(busy, 4)
    assert calls == []


@pytest.mark.parametrize("format", ["pydataset", "grain", "tf"])
def test_a_position_set_has_its_pass_s_inputs_built_ahead(tagged_dir, format):
    """`set_position` (which `dalipipe.BackupAndRestore` calls as it is made) or a
    Grain iterator's `set_state`: the resumed pass's inputs are built in the
    background (a whole epoch's on format "tf"), and the pass builds none itself."""
    if format == "grain":
        pytest.importorskip("grain")
    dataset = dalipipe.make_dali_dataset(tagged_dir, **OPTIONS, augment=True, format=format)
    pipe = dataset.image_pipeline
    if format == "grain":
        reader = iter(dataset)
        reader.set_state({"epoch": 2, "batch": 3, "fingerprint": dataset.fingerprint})
    else:
        dataset.set_position(2, 3)
        reader = iter(dataset) if format == "tf" else (dataset[i] for i in range(2))
    start = 0 if format == "tf" else 3
    wait_built_ahead(pipe, 2, start)
    calls = calls_by_thread(pipe)
    first = next(reader)
    assert (2, start) not in [(e, s) for e, s, _ in calls]  # taken, not built again
    want = next(iter(dalipipe.make_dali_pipeline(tagged_dir, **OPTIONS, augment=True)
                     .epoch(2, start_batch=3)))
    np.testing.assert_array_equal(np.asarray(first[0]), want[0])
