"""The Grain adapter: an `ImagePipeline` as a `grain.IterDataset` of DALI batches.

`make_dali_dataset`'s `"grain"` format, for Keras's Grain adapter (`fit`,
`evaluate` and `predict` on every backend) and Grain's own checkpointing. The DALI
graph runs natively (`dalipipe.native`); each batch is copied into the backend's
tensors as `dalipipe.py_dataset` does. An iterator is one pass over the dataset, and
its state (`get_state()` / `set_state()`) is plain data: the epoch, the next batch
and the dataset's fingerprint (`dalipipe.resume.fingerprint`).
"""

import sys

try:
    import grain
except ImportError as e:
    from dalipipe.install import pip_extra

    raise ImportError(
        'format="grain" needs Grain (the `grain` package), which is not installed. '
        f"Install it with: {pip_extra('grain')}"
    ) from e

from dalipipe import native, resume
from dalipipe.py_dataset import _converter

# The function of Keras's Grain adapter that reads batches up front to learn their
# structure: an iterator it reads never completes a pass.
_KERAS_PEEK = "_get_dataset_info"


class DALIGrainDataset(grain.IterDataset):
    """A `grain.IterDataset` of DALI batches, for Keras and Grain's checkpointing.

    Each element is a batch, the tuple that a `DALIPyDataset` item is: the
    backend's tensors (torch tensors on torch, jax arrays on JAX, NumPy arrays on
    TensorFlow, where GPU batches are copied to the host), images `dtype` `(n,
    height, width, channels)` (or channels first), then labels and sample weights
    as `make_dali_dataset` says; `(images,)` without labels.

    Each iterator is one pass, `steps` batches, then `StopIteration`. Pass numbers
    count the passes read to their end: a new iterator loads epoch `n` (what
    `make_dali_pipeline(...).epoch(n)` loads) when `n` passes have been read whole
    before it starts. So the batches that Keras's Grain adapter reads up front to
    learn the structure, and any pass left before its end, start no epoch: the
    next iterator loads the same one. DALI runs one pass at a time: starting an
    iterator ends the one before it.

    Attributes:
        class_names: the class names, or None without labels.
        file_paths: the files, in the order that `shuffle` and `seed` give.
        image_pipeline: the `ImagePipeline`.
        backend: the Keras backend whose tensors the batches are.
        fingerprint: the dataset's identity, as `dalipipe.BackupAndRestore` saves it.
    """

    def __init__(self, image_pipeline, backend):
        super().__init__()
        self.image_pipeline = image_pipeline
        self.backend = backend
        self.class_names = image_pipeline.class_names
        self.file_paths = list(image_pipeline.file_paths)
        self.fingerprint = resume.fingerprint(image_pipeline)
        self._convert = _converter(backend, image_pipeline.device == "gpu")
        self._runner = native.Runner(image_pipeline)
        self._owner = None  # the iterator whose pass DALI runs
        self.next_epoch = 0  # the epoch of the next iterator: the passes read whole

    def __iter__(self):
        return DALIGrainIterator(self)

    def __repr__(self):
        pipeline = self.image_pipeline
        return (f"<DALIGrainDataset: {len(pipeline.file_paths)} samples, {pipeline.steps} "
                f"batches of {pipeline.batch_size}, {self.backend} tensors on "
                f"{pipeline.device}>")


class DALIGrainIterator(grain.DatasetIterator):
    """One pass over a `DALIGrainDataset`, from a position that its state holds.

    `get_state()` is `{"epoch", "batch", "fingerprint"}`: the epoch, the next batch
    to read (`steps` once the pass is read whole) and the dataset's fingerprint.
    `set_state(state)` goes on from that position, with the batches that
    `ImagePipeline.epoch(epoch, start_batch=batch)` gives; a state at the end of a
    pass goes on with the next epoch's pass.
    """

    def __init__(self, dataset):
        super().__init__()
        self._dataset = dataset
        self._epoch = None  # taken at the first batch, unless `set_state` gives it
        self._batch = 0
        self._stream = None
        self._peek = _in_keras_peek()

    def _position(self):
        epoch = self._dataset.next_epoch if self._epoch is None else self._epoch
        return epoch, self._batch

    def __next__(self):
        dataset = self._dataset
        pipeline = dataset.image_pipeline
        epoch, batch = self._position()
        if batch >= pipeline.steps:
            raise StopIteration
        if self._stream is None or dataset._owner is not self:
            self._epoch = epoch
            dataset._owner = self
            inputs = pipeline.epoch_inputs(epoch, start_batch=batch)
            self._stream = dataset._runner.run(*inputs, copy_to_host=False)
        outputs = next(self._stream)
        self._batch += 1
        result = tuple(dataset._convert(out[0] if pipeline.unbatched else out.as_tensor())
                       for out in outputs)
        if self._batch == pipeline.steps:
            for _ in self._stream:  # let the runner see DALI's end of epoch
                raise RuntimeError("DALI gave more batches than the epoch has")
            self._stream = None
            dataset._owner = None
            if not self._peek:
                dataset.next_epoch = max(dataset.next_epoch, epoch + 1)
        return result

    def get_state(self):
        epoch, batch = self._position()
        return {"epoch": epoch, "batch": batch, "fingerprint": self._dataset.fingerprint}

    def set_state(self, state):
        """Goes on from `state`, a `get_state()` of an iterator of this dataset.

        Raises:
            ValueError: for a state of another dataset (naming what differs) or
                an invalid position.
        """
        differs = resume.differences(state.get("fingerprint", {}), self._dataset.fingerprint)
        if differs:
            raise ValueError(
                f"`state` was saved from another dataset: what differs: {differs}. "
                "Restore it into the dataset it was saved from (the same files, `seed`, "
                "`batch_size` and options)."
            )
        pipeline = self._dataset.image_pipeline
        epoch, batch = int(state["epoch"]), int(state["batch"])
        if batch == pipeline.steps:
            epoch, batch = epoch + 1, 0
        self._epoch, self._batch = pipeline.check_position(epoch, batch)
        self._stream = None
        if self._dataset._owner is self:
            self._dataset._owner = None


def _in_keras_peek():
    """Whether Keras's Grain adapter is making this iterator to learn the structure."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == _KERAS_PEEK and "keras" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


def make_grain_dataset(source, options):
    """`make_dali_dataset` for validated `Options` in the `"grain"` format: a
    `DALIGrainDataset`, or a pair of them for `subset="both"`."""
    from dalipipe.devices import resolve_device
    from dalipipe.keras_config import keras_backend
    from dalipipe.pipeline import image_pipelines

    backend = keras_backend()
    device, device_id = resolve_device(options.device, backend)
    result = image_pipelines(source, options.replace(device=device), device_id=device_id or 0)

    def wrap(image_pipeline):
        if image_pipeline.device == "gpu":
            image_pipeline = image_pipeline.on_device(device_id or 0)
        return DALIGrainDataset(image_pipeline, backend)

    if isinstance(result, tuple):
        return tuple(wrap(p) for p in result)
    return wrap(result)
