"""`dalipipe.tf_hooks`: each `tf.data` internal that dalipipe relies on, checked on
real datasets and iterators, so that a TensorFlow release that changes one fails
here by name: a dataset that is another's graph (`DatasetOver`), iterators made at
their first use (`LazyIterator`, on `OwnedIterator`'s internals), whether TensorFlow
has created its devices (`devices_created`)."""

import pytest

tf = pytest.importorskip("tensorflow")

from dalipipe.tf_hooks import DatasetOver, LazyIterator  # noqa: E402


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


class Squares(DatasetOver):
    """`dataset` under another class, showing its element spec."""

    @property
    def element_spec(self):
        return self._input_dataset.element_spec


def test_a_dataset_over_another_is_its_graph_with_its_options():
    options = tf.data.Options()
    options.autotune.enabled = False
    options.experimental_optimization.apply_default_optimizations = False
    inner = tf.data.Dataset.range(4).map(lambda x: x * x).with_options(options)
    view = Squares(inner)
    assert view._variant_tensor is inner._variant_tensor  # no op added
    assert [int(x) for x in view] == [0, 1, 4, 9]
    assert [int(x) for x in view.map(lambda x: x + 1)] == [1, 2, 5, 10]
    # `tf.data` reads the options of the datasets `_inputs` lists.
    assert view.options().autotune.enabled is False
    assert view.options().experimental_optimization.apply_default_optimizations is False


def test_tf_data_asks_a_dataset_for_its_element_spec_and_inputs_only():
    assert tf.data.Dataset.__abstractmethods__ == {"_inputs", "element_spec"}


@pytest.mark.slow  # a fresh interpreter
def test_devices_created_once_tensorflow_has_made_its_context():
    import subprocess
    import sys

    from dalipipe.utils import child_env

    code = ("import tensorflow as tf\n"
            "from dalipipe import tf_hooks\n"
            "said = [tf_hooks.devices_created()]\n"
            "tf.config.list_physical_devices()\n"
            "said.append(tf_hooks.devices_created())\n"
            "tf.constant(1)\n"
            "said.append(tf_hooks.devices_created())\n"
            "print(said)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=child_env(), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == "[False, False, True]"
