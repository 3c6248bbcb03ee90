"""The PyTorch bench loaders: the registry imports without torch, and names what a
torch loader lacks; with torch installed, the CPU DataLoader does the workloads' work.
"""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from dalipipe.bench import loaders

TORCH_LOADERS = ("torch_dataloader", "torchvision_gpu")


def test_registry_imports_without_torch():
    code = textwrap.dedent("""
        import sys
        sys.modules["torch"] = sys.modules["torchvision"] = None
        from dalipipe.bench import harness, loaders
        assert "torch_dataloader" in loaders.LOADERS and "torchvision_gpu" in loaders.LOADERS
        print(loaders.unavailable("torch_dataloader"))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "torch is not installed"


@pytest.mark.parametrize("name", TORCH_LOADERS)
def test_a_torch_loader_without_torch_names_itself_and_what_is_missing(monkeypatch, name):
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "torchvision", None)
    with pytest.raises(ImportError, match=f"'{name}' needs torch and torchvision"):
        loaders.LOADERS[name](["a.jpg"], np.zeros(1, np.int32), workload="eval",
                              batch_size=1, threads=1, seed=0)
    assert loaders.unavailable(name) == "torch is not installed"


def test_unavailable_names_the_missing_package_or_gpu(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    assert loaders.unavailable("tf_data") == "tensorflow is not installed"
    assert loaders.unavailable("python_generator") is None
    assert set(loaders.REQUIREMENTS) <= set(loaders.LOADERS) | {
        "dali_decode_only_cpu", "dali_decode_only_gpu", "dali_crop_decode_only_gpu"}


def test_torch_dataloader_does_the_eval_and_train_work(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("torchvision")
    from dalipipe import make_sample_dataset, sources
    from dalipipe.bench import harness

    make_sample_dataset(tmp_path, num_images=6, num_classes=2)
    index = sources.index_source(str(tmp_path))
    for workload in loaders.WORKLOADS:
        loader = loaders.LOADERS["torch_dataloader"](
            index.file_paths, index.labels, workload=workload, batch_size=4, threads=1, seed=0)
        batches = list(loader.epoch())
        assert [tuple(images.shape) for images, _ in batches] == [(4, 3, 224, 224), (2, 3, 224, 224)]
        assert [int(label) for _, labels in batches for label in labels] == index.labels.tolist()
        if workload == "eval":
            pixels = loader.to_numpy(batches[0][0]) * loaders._STD + loaders._MEAN
            # Shorter side rounded to whole pixels: within a few grey levels of PIL's.
            assert abs(pixels - harness.pil_reference(index.file_paths[:4])).mean() < 5
