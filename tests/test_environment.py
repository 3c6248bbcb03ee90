"""The full stack is installed: the TensorFlow-side tests must never skip quietly.

The modules that need TensorFlow or pandas skip themselves where those are absent,
so that `pytest -m gpu` runs on a GPU machine with DALI alone. This test (not a
`gpu` test) fails wherever `make test` runs without them.
"""

import importlib


def test_tensorflow_keras_pandas_and_the_dali_plugin_import():
    for name in ("tensorflow", "keras", "pandas", "nvidia.dali.plugin.tf"):
        importlib.import_module(name)
