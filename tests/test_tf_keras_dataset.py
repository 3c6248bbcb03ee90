"""`dalipipe.tf_keras_dataset`: iterators made at their first use (`LazyIterator`, which
relies on TensorFlow's `OwnedIterator` internals: these tests fail when they change)."""

import pytest

tf = pytest.importorskip("tensorflow")

from dalipipe.tf_keras_dataset import LazyIterator  # noqa: E402


def counting_dataset(made):
    """`range(3)`, appending to `made` when an iterator of it starts."""
    def start():
        made.append(1)
        return 0

    begin = tf.data.Dataset.range(1).map(
        lambda _: tf.py_function(start, [], tf.int64))
    return begin.flat_map(lambda _: tf.data.Dataset.range(3))


def test_an_iterator_is_made_at_its_first_next_only():
    made = []
    iterator = LazyIterator(counting_dataset(made))
    assert not iterator.made and made == []
    assert iterator.element_spec == tf.TensorSpec((), tf.int64)
    assert [int(x) for x in iterator] == [0, 1, 2]
    assert iterator.made and made == [1]


def test_an_iterator_never_used_makes_nothing():
    made = []
    for _ in range(3):
        LazyIterator(counting_dataset(made))
    assert made == []


def test_a_tf_function_takes_it_as_keras_s_steps_do():
    made = []
    iterator = LazyIterator(counting_dataset(made))

    @tf.function
    def step(it):
        return next(it) + next(it)

    assert made == []
    assert int(step(iterator)) == 1
    assert int(next(iterator)) == 2
    assert made == [1]
