"""The epoch: which pass over a dataset loads which epoch, from which step, and the
stream of one pass.

Every output format follows one rule, kept by `Cursor`, the dataset's training
cursor `(epoch, step)`: `(0, 0)` at first or what `set_position` says.

- A training pass (one of `fit`'s, or one read outside Keras) loads epoch `e` from
  step `s` (what `ImagePipeline.epoch(e, start_batch=s)` loads). Read to its end, it
  moves the cursor to `(e + 1, 0)`; left before its end, it moves nothing, and the
  next pass loads the same epoch again.
- `fit(initial_epoch=k)` with `k > 0` (or a backup callback's resumed epoch `k`)
  puts the cursor at `(k, 0)` when its first epoch starts, unless the cursor is
  already in epoch `k` (a position set for it: `dalipipe.BackupAndRestore`'s);
  otherwise a new `fit` goes on where the last pass ended.
- `evaluate`, `predict` and validation passes (the same dataset as
  `validation_data` too) load the cursor's epoch from its first step and never
  move the cursor.

So pass `n` read whole loads `epoch(n)`, whatever Keras reads on the side: the
batches it reads up front to build a model or learn the structure, the iterators
it makes and never reads, and its peeks at the element spec start and count nothing.
The inputs of the pass that the cursor foresees are built in the background
(`dalipipe.ahead`), for that pass to take: the first pass's when the dataset is
made, the pass's at each position set, the fit's first pass's while Keras peeks at
a batch, and when a training pass of epoch `e` starts, epoch `e + 1`'s from its
first step.

"Read to its end" is the end each protocol has: a `keras.utils.PyDataset`'s
`len()`-th item, a Python iterator's StopIteration (`format="grain"`), and on
TensorFlow, the inputs of the pass's last batch taken by DALI's dataset, which
prefetches (`dalipipe.tf_inputs`).

`PassStream` runs passes natively for the PyDataset and Grain adapters: its feed
thread runs the graph (`dalipipe.native`) `READ_AHEAD` batches ahead, converts each
batch to the backend's tensors and drains DALI at the end of a pass; it goes to
any `(epoch, step)` asked for, restarting the pass there when it is not the next
batch. No TensorFlow.
"""

import atexit
import queue
import threading
import time
import weakref

import numpy as np

from dalipipe import dali_hooks, native
from dalipipe.annotations.elements import element
from dalipipe.report import FeedTimes


class Cursor:
    """Where the next pass of a dataset starts: `(epoch, step)`; the inputs of the
    passes it foresees are built ahead (`ImagePipeline.inputs_ahead`, the module's
    doc). Thread-safe.

    Args:
        image_pipeline: the pipeline whose passes it numbers.
        whole_epochs: whether the passes take a whole epoch's inputs whatever their
            first step (`format="tf"`, which feeds DALI the batches from that step
            on); else the inputs from the pass's first step (`PassStream`).
    """

    def __init__(self, image_pipeline, *, whole_epochs=False):
        self.image_pipeline = image_pipeline
        self._whole_epochs = whole_epochs
        self._epoch, self._start = 0, 0
        self._fit = None  # a weak reference to the epoch iterator of the last `fit` seen
        self._lock = threading.Lock()
        self._prepare(0, 0)  # the first pass's, whenever it starts

    @property
    def position(self):
        """`(epoch, step)` of the next pass."""
        with self._lock:
            return self._epoch, self._start

    def set_position(self, epoch, batch=0):
        """Makes the next pass epoch `epoch` from step `batch`.

        Raises:
            ValueError: for an `epoch` below 0 or a `batch` outside `[0, steps)`.
        """
        epoch, batch = self.image_pipeline.check_position(epoch, batch)
        with self._lock:
            self._epoch, self._start = epoch, batch
        self._prepare(epoch, batch)

    def start_pass(self, loop):
        """Where a pass that starts now loads from, and whether it counts (the rule
        of the module's doc): `(epoch, step, counts)`.

        A pass that counts has the next epoch's inputs built ahead
        (`ImagePipeline.inputs_ahead`); one that a `fit` reads before its epochs run
        (Keras's first-batch peek) has its first epoch's instead, where the fit's
        `initial_epoch` moves the cursor.

        Args:
            loop: the Keras loop that reads the pass (`keras_hooks.KerasLoop`: its
                `kind`, its `call`, its `initial_epoch` and `asked_epoch`), or None
                outside Keras.
        """
        with self._lock:
            if loop is not None and loop.kind != "fit":
                return self._epoch, 0, False
            if loop is not None and loop.initial_epoch is not None and loop.call is not None \
                    and not self._seen(loop.call):
                self._fit = weakref.ref(loop.call)
                if loop.initial_epoch > 0 and self._epoch != loop.initial_epoch:
                    epoch, _ = self.image_pipeline.check_position(loop.initial_epoch, 0)
                    self._epoch, self._start = epoch, 0
            epoch, start = self._epoch, self._start
        first = self._first_of(loop)
        if first is not None and first != (epoch, start):
            self._prepare(*first)  # the fit's first pass, which starts after this one
        else:
            # Read whole, this pass makes the next one epoch + 1: its inputs built meanwhile.
            self._prepare(epoch + 1, 0)
        return epoch, start, True

    def _first_of(self, loop):
        """`(epoch, step)` of the first pass of `loop`, a `fit` whose epochs have not
        started (by the module's rule), or None for any other loop."""
        if loop is None or loop.kind != "fit" or loop.asked_epoch is None:
            return None
        with self._lock:
            if loop.asked_epoch > 0 and self._epoch != loop.asked_epoch:
                return loop.asked_epoch, 0
            return self._epoch, self._start

    def _prepare(self, epoch, step):
        """Has the inputs of the pass of `(epoch, step)` built ahead."""
        self.image_pipeline.inputs_ahead.prepare(epoch, 0 if self._whole_epochs else step)

    def _seen(self, call):
        """Whether `call` is the `fit` whose first epoch already set the cursor."""
        return self._fit is not None and self._fit() is call

    def read_whole(self, epoch):
        """Records that a pass of epoch `epoch` was read to its end: the next pass is
        epoch `epoch + 1`, from its first step (unless the cursor is already past it)."""
        with self._lock:
            if epoch >= self._epoch:
                self._epoch, self._start = int(epoch) + 1, 0


# Batches that a pass's feed prepares ahead of the one the training step takes.
READ_AHEAD = 2


class PassStream:
    """Batches of an `ImagePipeline`'s passes, run natively and converted to the
    tensors of a Keras backend, one pass at a time.

    `read(epoch, step)` gives step `step` of epoch `epoch`: the next batch of the pass
    under way when it is that one, else the pass restarted at that step (what was
    read ahead of the pass left is dropped). A background thread, the pass's feed,
    runs DALI and converts its batches `read_ahead` batches ahead of the one taken:
    the inputs' reads (the check's `stat` of every file, TFRecord records, `gs://`
    objects), DALI's host wait and the copies happen there, not in the thread that
    calls `read`; a pass's inputs are taken from `ImagePipeline.inputs_ahead` (built
    ahead, or there when the pass starts). The feed moves no cursor: only what
    `read` returns is read. Its errors (a file that changed since the check, one
    DALI cannot decode) are raised by the `read` of the batch they stopped. The
    batches are copies: they stay valid after the next one is read.

    Args:
        image_pipeline: the pipeline to run.
        backend: the Keras backend whose tensors the batches are (see `converter`).
        read_ahead: the batches prepared ahead; 0 runs DALI in the caller's thread.
            Defaults to `READ_AHEAD`.

    Attributes:
        times: where the time of the reads and of the feed goes (`report.FeedTimes`,
            which `dalipipe.InputReport` reads).
    """

    def __init__(self, image_pipeline, backend, read_ahead=None):
        self.image_pipeline = image_pipeline
        self.read_ahead = READ_AHEAD if read_ahead is None else int(read_ahead)
        gpu = image_pipeline.device == "gpu"
        self._convert = _batch_converter(
            converter(backend, gpu, image_pipeline.device_id), image_pipeline.unbatched)
        self._receive = receiver(backend, gpu)
        self._runner = native.Runner(image_pipeline)
        self._feed = [None]  # the pass under way's `_Feed`, stopped when this is collected
        self._at = None  # (epoch, step) of the batch the feed gives next
        self.times = FeedTimes()
        # One read at a time: Keras's workers (a user's PyDataset with `workers > 1`
        # wrapping the dataset) may read from several threads.
        self._lock = threading.RLock()
        weakref.finalize(self, _Feed.stop_held, self._feed)

    def read(self, epoch, step):
        """Step `step` of epoch `epoch`, a tuple of the backend's tensors (see the
        adapters for their shapes and dtypes). Thread-safe: reads from several
        threads are taken one at a time.

        Raises:
            RuntimeError: when DALI gives fewer batches than the pass has, or more
                (raised by the read of the pass's last step).
        """
        with self._lock:
            return self._read(epoch, step)

    def _read(self, epoch, step):
        started, restarted = time.perf_counter(), 0.0
        steps = self.image_pipeline.steps
        if self._feed[0] is None or self._at != (epoch, step):
            self.close()
            inputs = self.image_pipeline.inputs_ahead.get(epoch, step)  # built ahead, or here
            restarted = time.perf_counter() - started
            self._feed[0] = _Feed(self._runner, inputs, self._convert, steps - step,
                                  self.read_ahead, self.times)
        try:
            batch = self._feed[0].next()
            if step + 1 == steps:
                self._feed[0].finish()  # DALI's run ends with the pass: checked here
        except BaseException as e:
            self.close(wait=0 if isinstance(e, KeyboardInterrupt) else STOP_WAIT)
            raise
        self._at = (epoch, step + 1)
        if step + 1 == steps:
            self.close()
        batch = element(tuple(self._receive(t) for t in batch), self.image_pipeline.options)
        self.times.read(started, restarted)
        return batch

    def close(self, wait=None):
        """Ends the pass under way, dropping what was read ahead; its DALI pipeline
        serves the next pass (`native.Runner`). A feed that does not stop within
        `wait` seconds (defaults to `STOP_WAIT`; a read stalled in storage) is left
        to its thread, with its DALI pipeline: the next pass builds another."""
        feed = self._feed[0]
        _Feed.stop_held(self._feed, STOP_WAIT if wait is None else wait)
        if feed is not None and feed.abandoned:
            # Its thread may still run the pipeline: the next pass has a runner of its own.
            self._runner = native.Runner(self.image_pipeline)
        self._at = None


# How long stopping a pass waits for its feed thread, in seconds; a feed still
# running then (a read stalled in storage) is left to its daemon thread.
STOP_WAIT = 0.3
_FEEDS = weakref.WeakSet()  # the feeds with a thread, stopped as the process exits
_EXIT = []  # whether `_stop_at_exit` is registered


def _stop_at_exit():
    """Stops every feed as the process exits, before DALI shuts its pipelines down
    (its `atexit` handler, registered before this one, runs after it): the
    pipeline of a feed left to its thread is left out of that shutdown, which would
    wait for the stalled read (`dali_hooks.left_at_exit`)."""
    for feed in list(_FEEDS):
        feed.stop()


def _register_exit():
    if not _EXIT:
        import nvidia.dali.pipeline  # noqa: F401  (registers DALI's handler first)

        atexit.register(_stop_at_exit)
        _EXIT.append(True)


class _Feed:
    """`count` batches of a `native.Runner`'s run of `inputs`, each converted by
    `convert`: in a background thread `depth` batches ahead, or in the caller's
    thread (`depth=0`), timed in `times` (a `report.FeedTimes`). DALI's run must end
    with them: `finish` says whether it did.
    """

    def __init__(self, runner, inputs, convert, count, depth, times=None):
        times = FeedTimes() if times is None else times
        self._batches = self._produce(
            times.run(runner, runner.run(*inputs, copy_to_host=False)), times.copy(convert),
            count)
        self._runner = runner
        self._depth = depth
        self.abandoned = False  # whether `stop` left the thread running
        if depth:
            _register_exit()
            _FEEDS.add(self)
            self._queue = queue.Queue(maxsize=depth)
            self._stopped = threading.Event()
            self._thread = threading.Thread(target=self._run, name="dalipipe-feed",
                                            daemon=True)
            self._thread.start()

    @staticmethod
    def _produce(stream, convert, count):
        given = 0
        for outputs in stream:
            if given == count:
                raise RuntimeError(
                    f"DALI gave more batches than the pass has ({count}): its inputs and "
                    "the pass disagree. Please report it, with the dataset's options.")
            given += 1
            yield convert(outputs)
        if given < count:
            raise RuntimeError(
                f"DALI gave {given} batches where the pass has {count}: its run ended early. "
                "Please report it, with the dataset's options.")

    def next(self):
        """The next batch; raises the error that stopped the feed, or RuntimeError
        when the pass has no more batches."""
        if not self._depth:
            try:
                return next(self._batches)
            except StopIteration:
                raise RuntimeError("The pass has no more batches") from None
        kind, value = self._queue.get()
        if kind == "error":
            raise value
        if kind == "end":
            self._queue.put(("end", None))  # for a `next` after it
            raise RuntimeError("The pass has no more batches")
        return value

    def finish(self):
        """Waits for DALI's run to end after the pass's last batch.

        Raises:
            RuntimeError: when DALI gives another batch, or the error that stopped it.
        """
        if not self._depth:
            for _ in self._batches:  # `_produce` raises on another batch
                pass
            return
        kind, value = self._queue.get()
        if kind == "error":
            raise value

    def _run(self):
        try:
            for batch in self._batches:
                if not self._put(("batch", batch)):
                    return
        except BaseException as e:  # raised by the `next` that would take the batch
            self._put(("error", e))
            return
        self._put(("end", None))

    def _put(self, item):
        """Puts `item` in the queue unless the feed is stopped first; whether it did."""
        while not self._stopped.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                pass
        return False

    def stop(self, wait=STOP_WAIT):
        """Stops the pass (the runner's next run ends DALI's, `native.Runner`).
        Waits `wait` seconds at most for the feed thread: one still running (a read
        stalled in storage) is left, never joined, with its DALI pipeline, and
        `abandoned` is True."""
        if self.abandoned:
            return
        if self._depth:
            self._stopped.set()
            self._thread.join(wait)
            if self._thread.is_alive():
                self.abandoned = True
                if self._runner.pipe is not None:  # DALI's shutdown at exit would wait
                    dali_hooks.left_at_exit(self._runner.pipe)
                return
            _FEEDS.discard(self)
        self._batches.close()

    @staticmethod
    def stop_held(held, wait=STOP_WAIT):
        """Stops the feed in the list `held`, if any, and empties it."""
        feed, held[0] = held[0], None
        if feed is not None:
            feed.stop(wait)


def _batch_converter(convert, unbatched):
    """A batch of DALI outputs as a tuple of `convert`ed dense tensors (one sample each
    for `unbatched`). A `convert` with a `finish` attribute (torch's GPU copies) is
    finished once per batch, after the batch's last copy."""
    finish = getattr(convert, "finish", None)

    def convert_batch(outputs):
        batch = tuple(convert(out[0] if unbatched else out.as_tensor()) for out in outputs)
        if finish is not None:
            finish()
        return batch

    return convert_batch


def converter(backend, gpu, device_id=None):
    """The function that makes one dense DALI tensor `backend`'s tensor: a torch
    tensor, a jax array, or a NumPy array on other backends (on the host). Called in a
    pass's feed thread: a GPU copy is complete when it returns, except torch's, made on
    a stream of its own (CUDA device `device_id`), complete when the function's
    `finish` (the stream's synchronization, once per batch: `_batch_converter`)
    returns. A CPU batch is not copied for torch and NumPy: the tensor views DALI's
    buffer, which DALI's dynamic executor (`ImagePipeline.build_dali_pipeline`) gives
    each batch alone and keeps while it is viewed (`native._to_numpy`)."""
    if backend == "torch":
        import torch

        if not gpu:  # the tensor views DALI's buffer, holding it
            return lambda tensor: torch.from_numpy(np.asarray(tensor))
        from nvidia.dali.plugin.pytorch.torch_utils import to_torch_tensor

        stream = torch.cuda.Stream(device=device_id)

        def to_torch(tensor):
            with torch.cuda.stream(stream):
                return to_torch_tensor(tensor, copy=True)

        to_torch.finish = stream.synchronize
        return to_torch
    if backend == "jax":
        import jax
        import jax.dlpack

        if gpu:
            return lambda tensor: jax.dlpack.from_dlpack(tensor).copy().block_until_ready()
        return lambda tensor: jax.device_put(np.array(tensor))
    if gpu:
        return lambda tensor: np.asarray(tensor.as_cpu())  # `as_cpu` copies
    return np.asarray


def receiver(backend, gpu):
    """What the thread that takes a batch does with each of its tensors: a torch GPU
    tensor, made on the feed's stream, is recorded as used on the taker's stream
    (so that PyTorch's allocator does not reuse its memory while it is in use)."""
    if backend == "torch" and gpu:
        import torch

        def receive(tensor):
            tensor.record_stream(torch.cuda.current_stream())
            return tensor

        return receive
    return lambda tensor: tensor
