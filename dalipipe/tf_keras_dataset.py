"""The dataset that `make_dali_dataset` returns on TensorFlow: DALI's dataset as
Keras reads it, guarded against CPU transformations on a GPU.

A GPU-placed DALI dataset yields GPU tensors, which the CPU kernels of most
`tf.data` transformations cannot read (DALI's rule: no CPU `tf.data` op after a
GPU-placed `DALIDataset`). `KerasDataset` makes those transformations raise
ValueError, naming what to do instead, rather than fail inside TensorFlow.

Its iterators are made at their first use (`LazyIterator`): an iterator of DALI's
dataset builds a DALI pipeline and prefetches when it is made, and Keras makes
iterators that it never reads (one at the end of every epoch). Both it and the
dataset's view of DALI's graph (`DatasetOver`) rest on `tf.data` internals, which
`dalipipe.tf_hooks` holds.
"""

import tensorflow as tf

from dalipipe.annotations.elements import element
from dalipipe.keras_hooks import keras_loop
from dalipipe.tf_hooks import DatasetOver, LazyIterator

# Instance methods of `tf.data.Dataset` whose ops run on the CPU only.
_CPU_TRANSFORMATIONS = (
    "batch", "bucket_by_sequence_length", "cache", "concatenate", "enumerate", "filter",
    "flat_map", "group_by_window", "ignore_errors", "interleave", "map", "padded_batch",
    "ragged_batch", "rebatch", "rejection_resample", "repeat", "scan", "shard", "shuffle",
    "skip", "sparse_batch", "take", "take_while", "unbatch", "unique", "window",
)


def keras_structure(image_pipeline):
    """The element Keras reads from `image_pipeline`'s outputs, and their order in it.

    Returns:
        `(spec, order)`: `spec`, the `tf.TensorSpec` structure of
        `annotations.elements.element` (one spec for images alone), with the shapes
        and dtypes of `ImagePipeline.output_shapes`/`output_dtypes`; `order`, the
        indices of the pipeline's outputs in the order of `tf.nest.flatten(spec)`,
        the order in which DALI's dataset must give them. Dicts flatten by sorted
        key, so `output="dict"` with boxes gives `bounding_boxes` before `images`.
    """
    dtypes, shapes = image_pipeline.output_dtypes, output_shapes(image_pipeline)
    index = element(tuple(range(len(dtypes))), image_pipeline.options)
    if isinstance(index, tuple) and len(index) == 1:
        index = index[0]
    spec = tf.nest.map_structure(lambda i: tf.TensorSpec(shapes[i], dtypes[i]), index)
    return spec, tuple(tf.nest.flatten(index))


def output_shapes(image_pipeline):
    """`ImagePipeline.output_shapes`, with the batch dimension `batch_size` where every
    batch is whole (`drop_remainder=True`), as `tf.data`'s `batch(drop_remainder=True)`
    makes it static: KerasHub's `predict` reads it."""
    shapes = image_pipeline.output_shapes
    if image_pipeline.options.drop_remainder and not image_pipeline.unbatched:
        shapes = tuple((image_pipeline.batch_size, *shape[1:]) for shape in shapes)
    return shapes


class KerasDataset(DatasetOver):
    """The dataset `make_dali_dataset` returns: `dataset` with Keras's view of it.

    `cardinality()` is the number of steps per epoch (DALI reports an infinite one;
    Keras reads it, through a distributed dataset too, to end each epoch and to make
    a new iterator, a new order, for the next). The elements are Keras's
    (`keras_structure`): the images themselves when they are the only output, as
    Keras's `image_dataset_from_directory` gives them, and the pairs and dicts of
    `dalipipe.annotations.elements` for masks and boxes. DALI's dataset gives a flat
    tuple, in `keras_structure`'s order: only the element's structure changes, no op
    runs on it, so the structure is the same on a GPU. On a GPU, CPU transformations
    raise ValueError instead of failing inside TensorFlow.
    """

    def __init__(self, dataset, image_pipeline, *, device=None, feed=None, rest_of_epoch=None):
        self._spec, _ = keras_structure(image_pipeline)
        flat, given = tf.nest.flatten(self._spec), tf.nest.flatten(dataset.element_spec)
        if len(flat) != len(given) or not all(
                a.dtype == b.dtype and a.shape.is_compatible_with(b.shape)
                for a, b in zip(flat, given)):  # `to_dataset` gives them in `order`
            raise AssertionError(f"DALI's outputs {given} are not in the order of {flat}")
        self._steps = image_pipeline.steps
        self._feed = feed
        self._rest_of_epoch = rest_of_epoch
        self._resumed = None  # (start step, dataset) of the next iteration, if set
        self._gpu_device = device
        self.image_pipeline = image_pipeline
        self.class_names = image_pipeline.class_names
        self.file_paths = list(image_pipeline.file_paths)
        super().__init__(dataset)

    @property
    def element_spec(self):
        return self._spec

    def cardinality(self):
        """The steps of the next pass: `steps`, less the steps that `set_position`
        skips."""
        start = 0 if self._resumed is None else self._resumed[0]
        return tf.constant(self._steps - start, tf.int64)

    def set_position(self, epoch, batch=0):
        """Makes the next iteration epoch `epoch` from step `batch` on, the ones after
        it epochs `epoch + 1`, ... from their first step (`ImagePipeline.epoch(epoch,
        start_batch=batch)` loads the same). `cardinality()` is the next pass's
        steps. `dalipipe.BackupAndRestore` calls it at the start of every epoch.

        Raises:
            ValueError: for an `epoch` below 0 or a `batch` outside `[0, steps)`.
        """
        self._feed.cursor.set_position(epoch, batch)
        if batch == 0:
            self._resumed = None
        elif self._resumed is None or self._resumed[0] != batch:
            rest = self._rest_of_epoch(batch)
            self._resumed = (batch, KerasDataset(rest, self.image_pipeline,
                                                 device=self._gpu_device))

    def __iter__(self):
        """An iterator of the next pass, made (with its DALI pipeline) at its first
        use: `LazyIterator`. The Keras loop that makes it then (`fit`, `evaluate`,
        `predict`, or none) says where its pass starts (`passes.Cursor.start_pass`)."""
        dataset = self
        if self._resumed is not None:
            (_, dataset), self._resumed = self._resumed, None
        feed = self._feed
        if feed is None:
            return LazyIterator(dataset)
        return LazyIterator(dataset, on_made=lambda: feed.iterator_made(keras_loop()))


def _cpu_transformation(name):
    inherited = getattr(tf.data.Dataset, name)

    def transformation(self, *args, **kwargs):
        if self._gpu_device is not None:
            raise ValueError(
                f"This dataset lives on the GPU ({self._gpu_device}), and `Dataset.{name}` "
                "runs on the CPU, which cannot read its tensors. Do the work in the DALI "
                "graph: `make_dali_dataset(..., class_weight={class index: weight})` gives "
                "sample weights (instead of Keras's `fit(class_weight=...)`, which maps the "
                "dataset); transform the batches in the model or its loss, or on the GPU "
                "after `tf.data.experimental.copy_to_device` (docs/backends.md, "
                "Transforms); or make the dataset with `device='cpu'` to transform it with "
                f"tf.data. Received: Dataset.{name} on a dataset placed on {self._gpu_device}"
            )
        return inherited(self, *args, **kwargs)

    transformation.__name__ = name
    transformation.__doc__ = inherited.__doc__
    return transformation


for _name in _CPU_TRANSFORMATIONS:
    setattr(KerasDataset, _name, _cpu_transformation(_name))
