"""The epoch: which pass over a dataset loads which epoch, from which step, and the
stream of one pass.

Every output format follows one rule, kept by `Cursor`: the next pass to start
loads epoch `e` from step `s` (what `ImagePipeline.epoch(e, start_batch=s)`
loads), `(0, 0)` at first or what `set_position` says; a pass read to its end
moves the cursor to `(e + 1, 0)`, and a pass left before its end does not move
it, so the next pass loads the same epoch again. So pass `n` read whole loads
`epoch(n)`, whatever Keras reads on the side: the batches it reads up front to
build a model or learn the structure, the iterators it makes and never reads,
and its peeks at the element spec start and count nothing.

"Read to its end" is the end each protocol has: a `keras.utils.PyDataset`'s
`len()`-th item, a Python iterator's StopIteration (`format="grain"`), and on
TensorFlow, the inputs of the pass's last batch taken by DALI's dataset, which
prefetches (`dalipipe.tf_inputs`).

`PassStream` runs passes natively for the PyDataset and Grain adapters: it runs
the graph (`dalipipe.native`), converts each batch to the backend's tensors,
drains DALI at the end of a pass, and goes to any `(epoch, step)` asked for,
restarting the pass there when it is not the next batch. No TensorFlow.
"""

import threading

import numpy as np

from dalipipe import native


class Cursor:
    """Where the next pass of a dataset starts: `(epoch, step)`. Thread-safe."""

    def __init__(self, image_pipeline):
        self.image_pipeline = image_pipeline
        self._epoch, self._start = 0, 0
        self._lock = threading.Lock()

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

    def read_whole(self, epoch):
        """Records that a pass of epoch `epoch` was read to its end: the next pass is
        epoch `epoch + 1`, from its first step (unless the cursor is already past it)."""
        with self._lock:
            if epoch >= self._epoch:
                self._epoch, self._start = int(epoch) + 1, 0


class PassStream:
    """Batches of an `ImagePipeline`'s passes, run natively and converted to the
    tensors of a Keras backend, one pass at a time.

    `read(epoch, step)` gives step `step` of epoch `epoch`: the next batch of the pass
    under way when it is that one, else the pass restarted at that step (DALI's
    prefetched batches of the pass left are dropped). The batches are copies: they
    stay valid after the next one is read.
    """

    def __init__(self, image_pipeline, backend):
        self.image_pipeline = image_pipeline
        self.convert = converter(backend, image_pipeline.device == "gpu")
        self._runner = native.Runner(image_pipeline)
        self._stream = None
        self._at = None  # (epoch, step) of the batch the stream gives next

    def read(self, epoch, step):
        """Step `step` of epoch `epoch`, a tuple of the backend's tensors (see the
        adapters for their shapes and dtypes)."""
        pipeline = self.image_pipeline
        if self._stream is None or self._at != (epoch, step):
            inputs = pipeline.epoch_inputs(epoch, start_batch=step)
            self._stream = self._runner.run(*inputs, copy_to_host=False)
        outputs = next(self._stream)
        batch = tuple(self.convert(out[0] if pipeline.unbatched else out.as_tensor())
                      for out in outputs)
        self._at = (epoch, step + 1)
        if step + 1 == pipeline.steps:
            # The pass is whole: let the runner see DALI's end of epoch.
            for _ in self._stream:
                raise RuntimeError("DALI gave more batches than the epoch has")
            self._stream = self._at = None
        return batch


def converter(backend, gpu):
    """The function that copies one dense DALI tensor into `backend`'s tensor: a torch
    tensor, a jax array, or a NumPy array on other backends (on the host)."""
    if backend == "torch":
        from nvidia.dali.plugin.pytorch.torch_utils import to_torch_tensor

        return lambda tensor: to_torch_tensor(tensor, copy=True)
    if backend == "jax":
        import jax
        import jax.dlpack

        if gpu:
            return lambda tensor: jax.dlpack.from_dlpack(tensor).copy()
        return lambda tensor: jax.device_put(np.array(tensor))
    if gpu:
        return lambda tensor: np.array(tensor.as_cpu())
    return np.array
