"""The passes' inputs built ahead (`dalipipe.ahead`): equal bit for bit to those
built in place, read-only, and built off the thread that reads a later pass."""

import os
import threading

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


@pytest.mark.parametrize("feature", [*FEATURES, "masks", "boxes"])
def test_inputs_built_ahead_equal_those_built_in_place_and_are_read_only(
        feature, tagged_dir, dense):  # noqa: F811 (the fixture)
    pipe = pipeline_of(feature, tagged_dir, dense)
    calls = calls_by_thread(pipe)
    pipe.inputs_ahead.prepare(2)
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


def test_a_later_pass_does_not_build_its_inputs_in_the_reading_thread(tagged_dir):
    pipe = dalipipe.make_dali_pipeline(tagged_dir, **OPTIONS, augment=True)
    calls = calls_by_thread(pipe)
    cursor, stream = passes.Cursor(pipe), passes.PassStream(pipe, "numpy")
    try:
        for _ in range(2):  # two passes read whole, as `fit`'s adapters read them
            epoch, start, counts = cursor.start_pass(None)
            for step in range(start, pipe.steps):
                stream.read(epoch, step)
            cursor.read_whole(epoch)
    finally:
        stream.close()
    mine = threading.get_ident()
    assert sorted((e, s, t == mine) for e, s, t in calls) == [
        (0, 0, True),  # the first pass's, in the reading thread
        (1, 0, False), (2, 0, False)]  # each next one's, ahead
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

    def fails_ahead(epoch=0, *, start_batch=0):
        if threading.current_thread().name == "dalipipe-inputs-ahead":
            raise MemoryError("ahead")
        return build(epoch, start_batch=start_batch)

    pipe.epoch_inputs = fails_ahead
    pipe.inputs_ahead.prepare(1)
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
    for _ in range(2):  # each iteration is a pass
        for _ in dataset:
            pass
    built = dict(names)
    assert sorted(built) == [0, 1, 2] and len(names) == 3
    assert built[0] != "dalipipe-inputs-ahead"  # the first, in `tf.data`'s thread
    assert built[1] == built[2] == "dalipipe-inputs-ahead"
