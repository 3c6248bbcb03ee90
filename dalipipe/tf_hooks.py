"""Every private TensorFlow attribute dalipipe touches, behind named functions and
classes.

`tf.data` has no public way to give a dataset another Python view of the same graph
(`KerasDataset`: Keras's cardinality, a GPU guard), nor to make an iterator whose
resource is created at its first use, and TensorFlow does not say whether it has
created its devices (after which `TF_FORCE_GPU_ALLOW_GROWTH` is read). These rest on
TensorFlow's internals, all of them here, so that a TensorFlow release that changes
one breaks one module, and `tests/test_tf_hooks.py`, which checks each on real
datasets, iterators and processes, says which. (Keras's internals are in `dalipipe.keras_hooks`, which loads no TensorFlow
on torch and JAX; DALI's in `dalipipe.dali_hooks`.)

Imports TensorFlow: the TensorFlow adapter imports it, and `dalipipe.devices` where
TensorFlow is imported already. Checked on TensorFlow 2.21.
"""

import tensorflow as tf
from tensorflow.python.data.ops import iterator_ops
from tensorflow.python.data.util import structure
from tensorflow.python.eager import context


def devices_created():
    """Whether TensorFlow has created its devices (its eager context holds its handle,
    `_context_handle`): it has read `TF_FORCE_GPU_ALLOW_GROWTH`, and memory growth can
    no longer be turned on. Listing the physical devices creates none."""
    current = context.context_safe()
    return current is not None and current._context_handle is not None


class DatasetOver(tf.data.Dataset):
    """A `tf.data.Dataset` that is `dataset`'s graph under another Python class: no op
    is added. Subclasses define `element_spec`, the element structure they show.

    TensorFlow's `Dataset` is made from a variant tensor (`dataset._variant_tensor`)
    and lists the datasets it reads (`_inputs`, abstract), which `tf.data` walks for
    their options and functions.
    """

    def __init__(self, dataset):
        self._input_dataset = dataset
        super().__init__(dataset._variant_tensor)

    def _inputs(self):
        return [self._input_dataset]


class LazyIterator(iterator_ops.OwnedIterator):
    """A `tf.data` iterator of `dataset` whose TensorFlow iterator is made when it is
    first used: its first `next()`, or the first `tf.function` call that takes it
    (Keras's train, test and predict steps). An iterator never used makes nothing.

    TensorFlow's `OwnedIterator` makes its iterator resource in `__init__`
    (`_create_iterator`); this one sets the attributes that `__init__` sets and that
    the element spec gives (`_element_spec`, `_flat_output_types`,
    `_flat_output_shapes`, `_get_next_call_count`), and defers `_create_iterator` to
    the first read of `_iterator_resource`, through which every use of the iterator
    goes. `on_made()`, if given, is called just before it is made.
    """

    def __init__(self, dataset, on_made=None):  # pylint: disable=super-init-not-called
        self._pending = dataset
        self._on_made = on_made
        self._element_spec = dataset.element_spec
        self._flat_output_types = structure.get_flat_tensor_types(self._element_spec)
        self._flat_output_shapes = structure.get_flat_tensor_shapes(self._element_spec)
        self._get_next_call_count = 0

    @property
    def made(self):
        """Whether the TensorFlow iterator has been made."""
        return self._pending is None

    @property
    def _iterator_resource(self):
        if self._pending is not None:
            dataset, self._pending = self._pending, None
            if self._on_made is not None:
                self._on_made()
            with tf.init_scope():  # eagerly, also when first used while tracing
                self._create_iterator(dataset)
        return self._resource

    @_iterator_resource.setter
    def _iterator_resource(self, resource):
        self._resource = resource
