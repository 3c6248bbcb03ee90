"""The inputs of DALI's TensorFlow plugin: each epoch's batches, fed from `tf.data`.

An `EpochFeed` turns an `ImagePipeline`'s `epoch_inputs` into the `tf.data` inputs
of DALI's `DALIDatasetWithInputs`, one per input of the graph (`"samples"`,
`"random"`, `"weights"`). Each iteration of an input is one pass, and holds the
batches of the epoch that the dataset's `passes.Cursor` gives when the pass starts
(each iteration of every input of one DALI iterator gets the same epoch), by the
rule of `dalipipe.passes`, for the Keras loop that made the pass's iterator
(`iterator_made`); a training pass counts, and the cursor moves on, when DALI
takes the inputs of its last batch. So the n-th pass over the dataset loads what the native
`ImagePipeline.epoch(n)` loads, the inputs end with the epoch (DALI's dataset with
them), and the shards of a distributed dataset split one common order.
`feed_parts` says how an epoch is cut into DALI datasets.
"""

import collections
import threading

import numpy as np
import tensorflow as tf

from dalipipe import feed, passes

# The functions that `tf.data` traces here are plain TensorFlow, with no Python
# control flow on tensors: AutoGraph's conversion, about 0.25 s of the first dataset
# made in a process on 2 cores (benchmarks/results/autograph_creation.json), is
# skipped.
_plain = tf.autograph.experimental.do_not_convert

# Batches of packed paths made per `tf.numpy_function` call: each call costs about
# 350 µs of TensorFlow's machinery (5 µs per sample at batch 64 on 2 cores,
# `benchmarks/host_cost.py`), so paths are packed `CHUNK_BATCHES` batches at a time.
CHUNK_BATCHES = 16


def feed_parts(num_loaded, batch_size, *, feeds_bytes, gpu):
    """How DALI's plugin is fed an epoch of `num_loaded` samples in batches of
    `batch_size`: `(per_sample, parts)`.

    Encoded images (TFRecord records, `gs://` objects: `ImagePipeline.feeds_bytes`)
    go one per sample (DALI's `Input(..., batch=False)`), so that no image is padded
    to its batch's longest; file paths as one dense batch. DALI
    takes exactly `batch_size` samples per run from a per-sample input (it drops a
    short last batch), so a
    partial last batch is a second part, a DALI dataset of that batch size, joined
    with `concatenate`. On a GPU there is no joining: `ConcatenateDataset` has a CPU
    kernel only, so the records of an epoch with a partial last batch go as dense
    batches, padded to each batch's longest record.

    Returns:
        `per_sample`: whether the `"samples"` input is per sample; `parts`: a list of
        `(batch numbers, DALI batch size)`, one per DALI dataset, in order.
    """
    # DALI's per-sample input drops a short last batch: `PrepareBatchesSampleMode` in
    # `dali_dataset_op.cc`.
    num_batches = -(-num_loaded // batch_size)
    last = num_loaded - (num_batches - 1) * batch_size
    per_sample = feeds_bytes and not (gpu and last != batch_size)
    if not per_sample or last == batch_size:
        return per_sample, [(range(num_batches), batch_size)]
    parts = [(range(num_batches - 1), batch_size)] if num_batches > 1 else []
    return per_sample, parts + [(range(num_batches - 1, num_batches), last)]


class EpochFeed:
    """The Python side of the inputs: each pass's epoch and its batches.

    Its inputs read each epoch's `ImagePipeline.epoch_inputs` from the pipeline's
    `inputs_ahead` (`dalipipe.ahead`: the next epoch's built while one runs).
    `gpu` (defaults to the pipeline's device) cuts the epoch as for a GPU
    (`feed_parts`).

    Attributes:
        cursor: the `passes.Cursor` that numbers the passes.
        pass_epochs: the epoch of each pass started, in order: one entry per DALI
            iterator that started its inputs (one DALI pipeline built per entry).
        pass_counts: whether each pass started counts (a training pass).
    """

    def __init__(self, image_pipeline, *, gpu=None):
        self.image_pipeline = image_pipeline
        num_loaded = len(image_pipeline.positions()[0])
        if gpu is None:
            gpu = image_pipeline.device == "gpu"
        self.per_sample, self.parts = feed_parts(
            num_loaded, image_pipeline.batch_size, feeds_bytes=image_pipeline.feeds_bytes,
            gpu=gpu)
        self.cursor = passes.Cursor(image_pipeline, whole_epochs=True)
        self.pass_epochs = []
        self.pass_counts = []
        self.loops = collections.deque()  # of the iterators made whose passes have not started
        self.started = collections.Counter()
        self.lock = threading.Lock()

    def iterator_made(self, loop):
        """Records that an iterator of the dataset is made, in Keras loop `loop`
        (`keras_hooks.keras_loop()`): its pass is the next one to start."""
        with self.lock:
            self.loops.append(loop)

    def start(self, name):
        """The number of the pass that input `name` starts now: its k-th iteration
        is pass k, whose epoch the cursor gives when its first input starts."""
        with self.lock:
            k = self.started[name]
            self.started[name] += 1
            if k == len(self.pass_epochs):
                loop = self.loops.popleft() if self.loops else None
                epoch, _, counts = self.cursor.start_pass(loop)
                self.pass_epochs.append(epoch)
                self.pass_counts.append(counts)
            return np.int64(k)

    def current(self, name):
        """The number of the pass that input `name` started last."""
        with self.lock:
            return np.int64(self.started[name] - 1)

    def dataset(self, name, numbers=None, *, join=False):
        """Input `name` of the graph as a `tf.data.Dataset`: per iteration, the
        batches `numbers` (defaults to all) of one epoch, the next one, or with
        `join` the one that the input started last.

        Its elements (computed from the pass's number and the batch's): for
        `"samples"`, `ImagePipeline.load_samples` of each batch: packed paths made
        `CHUNK_BATCHES` batches per `tf.numpy_function` (`_chunked`), the epoch's
        last batch alone, when DALI asks for it (it moves the cursor); encoded
        bytes one batch per call, or one element per record for per-sample
        TFRecord records (`per_sample`); for `"cached"`, one call per batch; for
        `"random"` and `"weights"`, each batch's rows of `epoch_inputs`, sliced in
        `tf.data` from the epoch's whole column, which one `tf.numpy_function` per
        pass gives.
        """
        if numbers is None:
            numbers = range(self.image_pipeline.num_batches)
        per_record = name == "samples" and self.per_sample
        dtype, shape = {
            "samples": (tf.uint8, [None] if per_record else [None, None]),
            "random": (tf.float32, [None, self.image_pipeline.num_random]),
            "weights": (tf.float32, [None]),
            "cached": (tf.uint8, [None, None]),
        }[name]
        begin = self.current if join else self.start

        @_plain
        def start(_):
            with tf.device("/cpu:0"):
                return tf.numpy_function(lambda: begin(name), [], tf.int64, stateful=True)

        @_plain
        def batch(k, number):
            # Placed explicitly: once a strategy has distributed other datasets, Keras's
            # own distribution of this one otherwise gives the op a malformed device.
            # Not stateful: the same k and batch give the same rows (the stat calls
            # in `load_samples` only raise).
            with tf.device("/cpu:0"):
                if per_record:
                    flat, lengths = tf.numpy_function(self.records, [k, number],
                                                      (tf.uint8, tf.int64), stateful=False)
                    return tf.ensure_shape(flat, [None]), tf.ensure_shape(lengths, [None])
                values = tf.numpy_function(getattr(self, name), [k, number], dtype,
                                           stateful=False)
            return tf.ensure_shape(values, shape)

        if name == "samples" and not self.image_pipeline.feeds_bytes:
            return tf.data.Dataset.range(1).map(start).flat_map(
                _plain(lambda k: self._chunked(k, list(numbers), batch)))
        numbers = tf.constant(list(numbers), tf.int64)
        if name in ("random", "weights"):
            return tf.data.Dataset.range(1).map(start).map(_plain(
                lambda k: self._whole_column(name, k, dtype, shape))).flat_map(
                _plain(lambda column: _batch_rows(column, numbers,
                                                  self.image_pipeline.batch_size)))
        batches = (
            tf.data.Dataset.range(1).map(start)
            .flat_map(_plain(lambda k: tf.data.Dataset.from_tensor_slices(numbers).map(
                _plain(lambda number: (k, number)))))
            .map(batch, num_parallel_calls=2, deterministic=True)
        )
        return batches.flat_map(_plain(_records)) if per_record else batches

    def _chunked(self, k, numbers, batch):
        """The `"samples"` batches `numbers` of pass `k`: runs of at most
        `CHUNK_BATCHES` consecutive batches packed by one `tf.numpy_function` each
        (`samples_chunk`), two runs made ahead; the epoch's last batch by `batch`, in
        a dataset of its own, made only once the runs before it are read."""
        last = self.image_pipeline.num_batches - 1
        runs = []
        for number in numbers:
            if number != last and runs and number == runs[-1][0] + runs[-1][1] \
                    and runs[-1][1] < CHUNK_BATCHES:
                runs[-1][1] += 1
            elif number != last:
                runs.append([number, 1])

        @_plain
        def chunk(first, count):
            with tf.device("/cpu:0"):
                values = tf.numpy_function(self.samples_chunk, [k, first, count], tf.uint8,
                                           stateful=False)
            return tf.ensure_shape(values, [None] * 3)

        dataset = None
        if runs:
            firsts, counts = (tf.constant(column, tf.int64) for column in zip(*runs))
            dataset = tf.data.Dataset.from_tensor_slices((firsts, counts)).map(
                chunk, num_parallel_calls=2, deterministic=True).flat_map(
                _plain(tf.data.Dataset.from_tensor_slices))
        if last in numbers:
            final = tf.data.Dataset.from_tensors(tf.constant(last, tf.int64)).map(
                _plain(lambda number: batch(k, number)))
            dataset = final if dataset is None else dataset.concatenate(final)
        return dataset

    def samples_chunk(self, k, first, count):
        """The `"samples"` batches `first` to `first + count - 1` of pass `k`, packed
        paths (`samples`) padded with zeros to the longest row: uint8 `(count,
        batch_size, width)`."""
        batches = [self.samples(k, number) for number in range(int(first), int(first + count))]
        width = max(b.shape[1] for b in batches)
        packed = np.zeros((len(batches), len(batches[0]), width), np.uint8)
        for i, values in enumerate(batches):
            packed[i, :, :values.shape[1]] = values
        return packed

    def _whole_column(self, name, k, dtype, shape):
        """Input `name`'s rows of the whole epoch of pass `k`, a tensor of `shape`
        (one `tf.numpy_function`, on the CPU)."""
        with tf.device("/cpu:0"):
            column = tf.numpy_function(
                lambda k: getattr(self, name)(k, None), [k], dtype, stateful=False)
        return tf.ensure_shape(column, shape)

    def _inputs(self, epoch):
        # Outside the feed's lock: built ahead while the last epoch ran (`dalipipe.ahead`).
        return self.image_pipeline.inputs_ahead.get(epoch)

    def _rows(self, number):
        """The rows of batch `number` of an epoch's inputs; all of them for None."""
        if number is None:
            return slice(None)
        size = self.image_pipeline.batch_size
        return slice(int(number) * size, (int(number) + 1) * size)

    def _epoch(self, k):
        with self.lock:
            return self.pass_epochs[int(k)]

    def _sample_ids(self, k, number):
        epoch = self._epoch(k)
        if int(number) == self.image_pipeline.num_batches - 1 and self.pass_counts[int(k)]:
            # DALI takes the last batch of a training pass: the pass counts.
            self.cursor.read_whole(epoch)
        return self._inputs(epoch)[0][self._rows(number)]

    def samples(self, k, number):
        """The `"samples"` batch `number` of pass `k` as one dense array
        (`dalipipe.feed`): packed paths, or the records padded to the batch's longest
        (`feed.pad_records`)."""
        sample_ids = self._sample_ids(k, number)
        if not self.image_pipeline.feeds_bytes:
            return self.image_pipeline.load_samples(sample_ids)
        return feed.pad_records(*self.image_pipeline.load_records(sample_ids))

    def records(self, k, number):
        """The `"samples"` batch as `(flat, lengths)` (`feed.pack_records`), which
        `_records` cuts into one element per sample."""
        return self.image_pipeline.load_records(self._sample_ids(k, number))

    def random(self, k, number):
        return self._inputs(self._epoch(k))[1][self._rows(number)]

    def weights(self, k, number):
        return self._inputs(self._epoch(k))[2][self._rows(number)]

    def cached(self, k, number):
        """The `"cached"` batch `number` of pass `k`, from the decoded-image cache
        (`cache.ImageCache.rows`)."""
        store = self.image_pipeline.cache
        if int(number) == 0:
            store.pass_ended()  # what the last pass stored, kept for other processes
        return store.rows(self._inputs(self._epoch(k))[0][self._rows(number)])


def _batch_rows(column, numbers, batch_size):
    """The rows of each batch of `numbers` (int64) of an epoch's `column`, batches of
    `batch_size` rows (the last one shorter), as a `tf.data.Dataset`."""
    return tf.data.Dataset.from_tensor_slices(numbers).map(
        _plain(lambda number: column[number * batch_size:(number + 1) * batch_size]))


def _records(flat, lengths):
    """One element per record of a batch `(flat, lengths)` (`feed.pack_records`), as
    `feed.split_records` cuts it, in `tf.data`."""
    ends = tf.cumsum(lengths)
    return tf.data.Dataset.from_tensor_slices((ends - lengths, ends)).map(
        _plain(lambda start, end: flat[start:end]))
