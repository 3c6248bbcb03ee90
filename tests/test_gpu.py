"""The GPU graph against the CPU graph (DALI, NumPy and pytest only: no TensorFlow).

Skipped where DALI sees no CUDA GPU (see conftest.py).
"""

import numpy as np
import pytest

from dalipipe import make_dali_pipeline

pytestmark = pytest.mark.gpu


def both_devices(source, **options):
    cpu = make_dali_pipeline(source, device="cpu", **options)
    gpu = make_dali_pipeline(source, device="gpu", **options)
    assert gpu.device == "gpu" and cpu.device == "cpu"
    return cpu, gpu


def run_same_inputs(cpu, gpu, epoch=0):
    samples, random, _ = cpu.epoch_inputs(epoch)
    return list(cpu.run(samples, random)), list(gpu.run(samples, random))


@pytest.mark.parametrize("augment", [False, True])
def test_gpu_graph_matches_cpu_graph(color_dir, augment):
    cpu, gpu = both_devices(color_dir, image_size=(32, 32), batch_size=16, seed=3,
                            augment=augment, normalization=None, label_mode="categorical")
    cpu_batches, gpu_batches = run_same_inputs(cpu, gpu)
    assert [len(b[0]) for b in gpu_batches] == [len(b[0]) for b in cpu_batches]
    errors = []
    for (cpu_images, cpu_labels), (gpu_images, gpu_labels) in zip(cpu_batches, gpu_batches):
        assert gpu_images.shape == cpu_images.shape and gpu_images.dtype == cpu_images.dtype
        np.testing.assert_array_equal(gpu_labels, cpu_labels)
        errors.append(np.abs(gpu_images.astype(np.float32) - cpu_images.astype(np.float32)))
    # Both devices upsample chroma the same way (`jpeg_fancy_upsampling`), which
    # alone would differ by 0.91 mean and 22 at worst on these images; what is left
    # is the inverse DCT, which between libjpeg-turbo's own accurate and fast ones
    # differs by 0.95 mean and 3 at worst (benchmarks/jpeg_decoders.py).
    # Stated tolerance: 1.5 grey levels mean, 8 at worst.
    error = np.concatenate([e.ravel() for e in errors])
    print(f"augment={augment}: GPU-CPU error {error.mean():.3f} mean, {error.max():.1f} max")
    assert error.mean() < 1.5, error.mean()
    assert error.max() <= 8, error.max()


def test_gpu_png_pixels_match_cpu_exactly_enough(indexed_dir):
    cpu, gpu = both_devices(indexed_dir, image_size=(8, 8), batch_size=8, shuffle=False,
                            normalization=None, dtype="uint8")
    cpu_batches, gpu_batches = run_same_inputs(cpu, gpu)
    for (cpu_images, _), (gpu_images, _) in zip(cpu_batches, gpu_batches):
        assert np.abs(gpu_images.astype(int) - cpu_images.astype(int)).max() <= 1


@pytest.mark.parametrize("dtype, data_format", [("float16", "channels_first"), ("float32", "channels_last")])
def test_gpu_output_layouts(indexed_dir, dtype, data_format):
    gpu = make_dali_pipeline(indexed_dir, device="gpu", image_size=(6, 10), batch_size=8,
                             dtype=dtype, data_format=data_format)
    images, labels = next(iter(gpu.epoch()))
    shape = (8, 6, 10, 3) if data_format == "channels_last" else (8, 3, 6, 10)
    assert images.shape == shape and images.dtype == np.dtype(dtype)
    assert labels.shape == (8,) and labels.dtype == np.int32


def test_gpu_shard_outputs_weights_like_the_cpu_shard(color_dir):
    cpu, gpu = both_devices(color_dir, image_size=(16, 16), batch_size=32, seed=2,
                            normalization=None, class_weight={1: 2.5})
    cpu, gpu = cpu.shard([1], 2), gpu.shard([1], 2, device_id=0)
    inputs = cpu.epoch_inputs(0)
    cpu_batches, gpu_batches = list(cpu.run(*inputs)), list(gpu.run(*inputs))
    assert len(cpu_batches) == len(gpu_batches) == 3  # 90 images, global batch 32
    for (_, cpu_labels, cpu_weights), (_, gpu_labels, gpu_weights) in zip(cpu_batches, gpu_batches):
        np.testing.assert_array_equal(cpu_labels, gpu_labels)
        np.testing.assert_array_equal(cpu_weights, gpu_weights)
    labels = np.concatenate([y for _, y, _ in gpu_batches])
    weights = np.concatenate([w for _, _, w in gpu_batches])
    assert np.count_nonzero(weights) == 16 + 16 + 10  # replica 1 of 2
    assert set(weights[labels == 1]) <= {0.0, 2.5} and set(weights[labels != 1]) <= {0.0, 1.0}


def test_gpu_class_weight_output(indexed_dir):
    weights = {0: 0.5, 2: 2.0}
    cpu, gpu = both_devices(indexed_dir, image_size=(8, 8), batch_size=8, seed=1,
                            class_weight=weights)
    cpu_batches, gpu_batches = run_same_inputs(cpu, gpu)
    for (_, cpu_labels, cpu_weights), (_, gpu_labels, gpu_weights) in zip(cpu_batches, gpu_batches):
        np.testing.assert_array_equal(gpu_labels, cpu_labels)
        np.testing.assert_array_equal(gpu_weights, cpu_weights)
        assert gpu_weights.dtype == np.float32
        np.testing.assert_array_equal(gpu_weights, [weights.get(int(y), 1.0) for y in gpu_labels])


def test_gpu_tfrecord_records_unpadded_match_the_cpu(tagged_tfrecords):
    """Records fed one per sample (a list of arrays of their own lengths) on the GPU."""
    cpu, gpu = both_devices(tagged_tfrecords, image_size=(8, 8), batch_size=16, seed=4,
                            normalization=None, dtype="uint8")
    assert isinstance(gpu.load_samples(np.arange(16)), list)
    cpu_batches, gpu_batches = run_same_inputs(cpu, gpu)
    assert [len(b[0]) for b in gpu_batches] == [16] * 7 + [9]
    for (cpu_images, cpu_labels), (gpu_images, gpu_labels) in zip(cpu_batches, gpu_batches):
        np.testing.assert_array_equal(gpu_labels, cpu_labels)
        assert np.abs(gpu_images.astype(int) - cpu_images.astype(int)).max() <= 1


def test_gpu_pipeline_defaults_to_four_threads_and_cuda_device_0(indexed_dir):
    from dalipipe.utils import usable_cores

    gpu = make_dali_pipeline(indexed_dir, device="gpu", image_size=(6, 6), batch_size=8)
    assert gpu.options.num_threads == min(4, usable_cores())
    assert gpu.device_id == 0 and gpu.on_device(0).device_id == 0
    images, labels = next(iter(gpu.epoch()))
    assert images.shape == (8, 6, 6, 3)


def test_torch_backend_fits_from_batches_on_the_gpu(tagged_dir, tmp_path):
    from test_backends import check_single, run_job

    result = run_job("torch", "single", tagged_dir, tmp_path / "single.json",
                     env={"BACKEND_JOB_DEVICE": "gpu"})
    check_single(result, "torch")
    assert result["devices"] == ["cuda:0", "cuda:0"]
