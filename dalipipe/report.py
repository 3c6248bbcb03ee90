"""`InputReport`: what `fit` waited for, measured where the feed is.

A pass's stream (`dalipipe.passes.PassStream`) keeps a `FeedTimes`: the time the
thread that takes its batches spent inside `PassStream.read` (blocked on the feed,
or restarting a pass), and the time its feed thread spent per stage: the inputs
dalipipe reads for DALI (the pass's order, the files' `stat`, TFRecord records,
`gs://` objects), DALI's graph run (the decoder, the augmentation, and the files
DALI reads itself), and the copy of DALI's outputs into the backend's tensors. A
few `time.perf_counter()` calls per batch, whether a report is asked for or not.

`InputReport`, a Keras callback, reads those times at the edges of each epoch and
of its validation pass, and adds `logs["input_wait"]`: the share of the epoch's
training wall time (validation left out) in which `fit` waited for its next batch.
Waits are counted in the thread that runs `fit` only; on TensorFlow, where `fit`
takes its batches inside its compiled train function behind `tf.data`'s and DALI's
prefetch, there is no honest measure, and the key is left out with one warning.
"""

import threading
import time
from typing import NamedTuple

import keras

from dalipipe import keras_hooks
from dalipipe.calls import warn
from dalipipe.utils import usable_cores

_clock = time.perf_counter


class Times(NamedTuple):
    """A reading of a `FeedTimes` (seconds, and counts of batches)."""

    wait: float = 0.0  # in `PassStream.read`, in the thread that `FeedTimes.owner` names
    taken: int = 0  # batches read in that thread
    elsewhere: int = 0  # batches read in any other thread
    inputs: float = 0.0  # the inputs dalipipe builds and reads for DALI
    dali: float = 0.0  # DALI's run, less the inputs it asks for
    copy: float = 0.0  # DALI's outputs into the backend's tensors
    made: int = 0  # batches the feed made

    def __sub__(self, other):
        return Times(*(a - b for a, b in zip(self, other)))


class FeedTimes:
    """Where a pass stream's time goes, accumulated over its life. Each field is
    written by one thread: the waits by the reading thread, the stages by the feed.

    Attributes:
        owner: the thread whose reads count as waits (`threading.get_ident()`), set
            by `InputReport` to `fit`'s; None counts every thread's.
    """

    def __init__(self):
        self.owner = None
        self._wait = self._inputs_read = 0.0
        self._taken = self._elsewhere = 0
        self._inputs = self._dali = self._copy = 0.0
        self._made = 0

    def read(self, started, inputs=0.0):
        """Counts a batch taken by `PassStream.read`, entered at `started`
        (`time.perf_counter()`), `inputs` seconds of which built a pass's inputs."""
        if self.owner is None or threading.get_ident() == self.owner:
            self._wait += _clock() - started
            self._taken += 1
        else:
            self._elsewhere += 1
        self._inputs_read += inputs

    def run(self, runner, outputs):
        """`outputs`, a `native.Runner`'s run, timed: DALI's run and the input
        callbacks it calls (`Runner.load_seconds`) apart."""
        try:
            while True:
                started, loaded = _clock(), runner.load_seconds
                try:
                    batch = next(outputs)
                except StopIteration:
                    return
                loading = runner.load_seconds - loaded
                self._inputs += loading
                self._dali += _clock() - started - loading
                yield batch
        finally:
            outputs.close()

    def copy(self, convert):
        """`convert` (DALI's outputs to the backend's tensors), timed."""

        def timed(outputs):
            started = _clock()
            batch = convert(outputs)
            self._copy += _clock() - started
            self._made += 1
            return batch

        return timed

    def snapshot(self):
        """The times so far, as `Times`."""
        return Times(self._wait, self._taken, self._elsewhere,
                     self._inputs + self._inputs_read, self._dali, self._copy, self._made)


def feed_times(dataset):
    """The `FeedTimes` of a `"pydataset"` or `"grain"` dataset's stream, else None."""
    stream = getattr(dataset, "stream", None)
    return getattr(stream, "times", None)


# The callbacks that write `logs` out: `InputReport` must come before them.
_WRITERS = (keras.callbacks.CSVLogger, keras.callbacks.TensorBoard)


class InputReport(keras.callbacks.Callback):
    """Adds `logs["input_wait"]` at each epoch's end: the share (0 to 1) of the
    epoch's training wall time in which `fit` waited for its next batch from a
    `make_dali_dataset` dataset, validation left out.

    Put it before `keras.callbacks.CSVLogger` and `TensorBoard` in `callbacks`: they
    see the key only then (a warning says so otherwise). `History` holds it per epoch.
    Above `threshold`, with `fit(verbose=...)` on, it prints one line: where the
    feed's time went per batch (the inputs dalipipe reads, DALI's graph, the copy to
    the backend's tensors) and one setting to try (docs/report.md).

    Measured for the `"pydataset"` and `"grain"` formats on torch and JAX: the time
    `fit`'s thread spends in the dataset's read of each batch. On TensorFlow the
    key is left out, with one warning saying why.

    Args:
        threshold: the share above which the line is printed. Defaults to 0.1.

    Raises:
        ValueError: for a `threshold` outside [0, 1].
    """

    def __init__(self, threshold=0.1):
        super().__init__()
        if not 0 <= threshold <= 1:
            raise ValueError(f"`threshold` must be in [0, 1]. Received: threshold={threshold!r}")
        self.threshold = threshold
        self._times = None
        self._pipeline = None
        self._epoch = None  # (start time, Times) of the epoch under way
        self._validation = (0.0, Times())  # time and Times of its validation passes
        self._test = None

    def on_train_begin(self, logs=None):
        self._times = None
        found = keras_hooks.fit_locals()
        if found is None:
            return
        iterator, callback_list = found
        self._check_order(keras_hooks.callbacks_of(callback_list))
        dataset = keras_hooks.trained_dataset(iterator, None)
        times = feed_times(dataset)
        if keras.backend.backend() == "tensorflow" and hasattr(dataset, "image_pipeline"):
            warn("dalipipe.InputReport leaves `input_wait` out on TensorFlow: `fit` takes "
                 "each batch inside its compiled train function, behind tf.data's and "
                 "DALI's prefetch, where the time it waits cannot be measured (the time "
                 "dalipipe's inputs wait is not it). For the report, run the same `fit` "
                 "with KERAS_BACKEND=torch or jax, format='pydataset' (docs/report.md).")
            return
        if times is None:
            warn("dalipipe.InputReport measures `make_dali_dataset` datasets of the "
                 "'pydataset' and 'grain' formats: `fit` trains on another dataset here, "
                 f"so `input_wait` is left out. Received: {type(dataset).__name__}")
            return
        times.owner = threading.get_ident()
        self._times, self._pipeline = times, dataset.image_pipeline

    def _check_order(self, callbacks):
        mine = next((i for i, c in enumerate(callbacks) if c is self), None)
        writers = [type(c).__name__ for c in callbacks[:mine or 0] if isinstance(c, _WRITERS)]
        if writers:
            warn(f"dalipipe.InputReport comes after {', '.join(writers)} in `callbacks`, "
                 "which write each epoch's logs before it adds `input_wait`: put "
                 "InputReport first for them to show it.")

    def on_epoch_begin(self, epoch, logs=None):
        if self._times is not None:
            self._epoch = (_clock(), self._times.snapshot())
            self._validation = (0.0, Times())

    def on_test_begin(self, logs=None):
        if self._epoch is not None:
            self._test = (_clock(), self._times.snapshot())

    def on_test_end(self, logs=None):
        if self._epoch is not None and self._test is not None:
            started, at = self._test
            seconds, times = self._validation
            self._validation = (seconds + _clock() - started,
                                times + (self._times.snapshot() - at))
            self._test = None

    def on_epoch_end(self, epoch, logs=None):
        if self._epoch is None:
            return
        started, at = self._epoch
        self._epoch = None
        seconds, validation = self._validation
        wall = _clock() - started - seconds
        times = self._times.snapshot() - at - validation
        if times.elsewhere:
            warn("dalipipe.InputReport leaves `input_wait` out: Keras read "
                 f"{times.elsewhere} batches in a thread other than fit's, ahead of the "
                 "step, so the time dalipipe waits is not the time fit waits.")
            self._times = None
            return
        share = min(max(times.wait / wall, 0.0), 1.0) if wall > 0 else 0.0
        if logs is not None:
            logs["input_wait"] = share
        verbose = self.params.get("verbose")
        if share > self.threshold and verbose:
            # After the progress bar's line (`verbose=1` or "auto"), which has no end yet.
            print(("\n" if verbose in (1, "auto") else "")
                  + explain(share, times, self._pipeline.options), flush=True)

    def on_train_end(self, logs=None):
        if self._times is not None:
            self._times.owner = None
        self._times = self._epoch = None


def explain(share, times, options, cores=None):
    """The report's line for an epoch whose `fit` waited `share` of its time: where
    the feed's time went per batch (`times`, a `Times`), and one setting to try."""
    per = max(times.made, 1) * 1e-3
    stages = {"reading inputs": times.inputs / per, "DALI's graph": times.dali / per,
              "the copy to tensors": times.copy / per}
    spent = ", ".join(f"{name} {ms:.1f} ms" for name, ms in stages.items())
    return (f"input_wait {share:.2f}: fit waited for data {share:.0%} of the epoch. Per "
            f"batch the feed spent {spent}. {advice(stages, options, cores)}")


def advice(stages, options, cores=None):
    """One setting to try, with its expected effect, for the stage that dominates."""
    cores = usable_cores() if cores is None else cores
    most = max(stages, key=stages.get)
    threads = options.num_threads or cores
    if most == "DALI's graph" and threads < cores:
        more = min(cores, 2 * threads)
        return (f"Try num_threads={more} (DALI runs on {threads} of {cores} cores): DALI's "
                f"graph should run up to {more / threads:.1f}x faster.")
    if most == "DALI's graph":
        if options.device != "gpu" and options.augment:
            return ("Try a lighter `augment=` (DALI's graph uses every core): each "
                    "operation removed shortens the graph's time per batch.")
        return ("Try a smaller `image_size=` or device='gpu' (DALI's graph uses every "
                "core): the decode and resize are most of the graph's time per batch.")
    if most == "reading inputs":
        return (f"Try prefetch_queue_depth={2 * options.prefetch_queue_depth} (storage "
                "is the slowest stage): more reads in flight hide slow ones, or copy the "
                "data to a local disk.")
    return ("Try dtype='uint8' and normalize in the model (the copy is the slowest "
            "stage): a quarter of the bytes to copy per batch.")

