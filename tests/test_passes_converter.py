"""passes.converter and passes._batch_converter: a batch's tensors converted, and
torch's GPU copies, made on a stream of their own, synchronized once per batch rather
than once per tensor. (The rest of passes.py: tests/test_passes.py.)"""

import pytest

from dalipipe import make_dali_pipeline, passes


class Output:
    """A stand-in for one of DALI's outputs: `as_tensor()` and a sample by index."""

    def __init__(self, name):
        self.name = name

    def as_tensor(self):
        return self.name

    def __getitem__(self, i):
        return f"{self.name}[{i}]"


@pytest.mark.parametrize("unbatched", [False, True])
def test_a_converter_s_finish_runs_once_per_batch_after_its_copies(unbatched):
    events = []

    def convert(tensor):
        events.append(("copy", tensor))
        return tensor

    convert.finish = lambda: events.append(("finish",))
    convert_batch = passes._batch_converter(convert, unbatched)
    for _ in range(2):
        batch = convert_batch([Output("images"), Output("labels"), Output("weights")])
    sample = "[0]" if unbatched else ""
    assert batch == tuple(f"{n}{sample}" for n in ("images", "labels", "weights"))
    assert [e[0] for e in events] == ["copy", "copy", "copy", "finish"] * 2


def test_a_converter_without_finish_only_converts():
    assert passes._batch_converter(str.upper, False)([Output("a"), Output("b")]) == ("A", "B")


@pytest.mark.gpu
def test_torch_gpu_batches_synchronize_once_per_batch(indexed_dir, monkeypatch):
    """Three outputs (images, labels, weights), one synchronization of the copies'
    stream per batch; the tensors are on the GPU and hold the batch."""
    torch = pytest.importorskip("torch")
    synchronized = []
    original = torch.cuda.Stream.synchronize
    monkeypatch.setattr(torch.cuda.Stream, "synchronize",
                        lambda self: synchronized.append(1) or original(self))
    pipe = make_dali_pipeline(indexed_dir, device="gpu", image_size=(8, 8), batch_size=4,
                              class_weight={0: 2.0}, seed=0, shuffle=False)
    cpu = make_dali_pipeline(indexed_dir, device="cpu", image_size=(8, 8), batch_size=4,
                             class_weight={0: 2.0}, seed=0, shuffle=False)
    stream = passes.PassStream(pipe, "torch", read_ahead=0)
    for step in range(2):
        batch = stream.read(0, step)
        assert len(batch) == 3 and all(t.is_cuda for t in batch)
        assert len(synchronized) == step + 1
    stream.close()
    expected = list(cpu.epoch(0))[1]
    assert (batch[1].cpu().numpy() == expected[1]).all()
    assert (batch[2].cpu().numpy() == expected[2]).all()


@pytest.mark.parametrize("backend,batch_size", [("numpy", 4), ("torch", 4), ("torch", None)])
def test_cpu_batches_view_dali_s_buffers_and_stay_valid_after_later_runs(
        indexed_dir, backend, batch_size):
    """A CPU batch is not copied: its arrays view DALI's buffers (the dynamic
    executor's, one per batch), and the batches read later, and the next pass,
    leave the ones held as they were."""
    import numpy as np

    if backend == "torch":
        pytest.importorskip("torch")
    pipe = make_dali_pipeline(indexed_dir, device="cpu", image_size=(8, 8),
                              batch_size=batch_size, seed=0, verbose=False)
    assert pipe.build_dali_pipeline().exec_dynamic
    stream = passes.PassStream(pipe, backend)
    held, copies = [], []
    for epoch in range(2):
        for step in range(pipe.steps):
            batch = tuple(np.asarray(t) for t in stream.read(epoch, step))
            held.append(batch)
            copies.append(tuple(np.copy(t) for t in batch))
    stream.close()
    assert not held[0][0].flags.owndata  # DALI's buffer, not a copy
    expected = [b for epoch in range(2) for b in pipe.epoch(epoch)]
    for batch, copy, want in zip(held, copies, expected, strict=True):
        for output, kept, value in zip(batch, copy, want, strict=True):
            np.testing.assert_array_equal(output, kept)
            np.testing.assert_array_equal(output, value)
