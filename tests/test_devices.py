"""dalipipe.devices: the device choice, CUDA ordinals, memory growth and threads.

Pure: the functions are given the frameworks' possible answers (TensorFlow's own
configuration objects where it has them, plain objects with JAX's attributes), so
these tests need no GPU and no framework but TensorFlow for its configurations.
"""

import warnings

import pytest

from dalipipe.devices import (
    GPU_NUM_THREADS,
    GPU_TENSORFLOW_FIX,
    Placement,
    choose_device,
    cpu_decoded_share,
    cuda_ordinal,
    default_memory_growth,
    default_num_threads,
    jax_ordinals,
    memory_growth_error,
    resolve_device,
)
from dalipipe.options import Options
from dalipipe.utils import usable_cores


def test_auto_device_warns_when_only_dali_or_only_the_framework_sees_a_gpu():
    def choose(device, tf_gpus, dali_gpus):
        return choose_device(device, tf_gpus, dali_gpus, framework="TensorFlow",
                             framework_fix=GPU_TENSORFLOW_FIX)

    assert choose("auto", 1, 2) == "gpu"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert choose("auto", 0, 0) == "cpu"
    fix_tf = r"TensorFlow sees 0, DALI sees 1\..*\[gpu\].*tensorflow\[and-cuda\]"
    with pytest.warns(UserWarning, match=r"`device='auto'` runs DALI on the CPU: " + fix_tf):
        assert choose("auto", 0, 1) == "cpu"
    with pytest.warns(UserWarning, match=r"TensorFlow sees 1, DALI sees 0\..*\[cuda12\]"):
        assert choose("auto", 1, 0) == "cpu"
    with pytest.raises(RuntimeError, match=fix_tf):
        choose("gpu", 0, 1)
    with pytest.raises(RuntimeError, match=r"both PyTorch and DALI.*PyTorch sees 0, DALI sees 1"):
        choose_device("gpu", 0, 1, framework="PyTorch", framework_fix="install PyTorch")


def test_the_cpu_option_and_other_backends_ask_no_framework():
    assert resolve_device("cpu", "torch") == ("cpu", None)
    assert resolve_device("auto", "tensorflow") == ("auto", None)  # DALI decides


@pytest.mark.parametrize("growth, limits, variable, raises", [
    (True, [], None, False),
    (False, [], "true", False),
    (False, [2048], None, False),
    (False, [None], None, True),
    (False, [], None, True),
    (True, [], "false", True),  # the variable overrides set_memory_growth
    (False, [], "TRUE", True),  # TensorFlow takes only "true" and "false"
])
def test_memory_growth_error_follows_tensorflows_rule(growth, limits, variable, raises):
    error = memory_growth_error("/physical_device:GPU:0", growth=growth, memory_limits=limits,
                                variable=variable)
    assert (error is not None) == raises
    if raises:
        assert error.startswith("TensorFlow holds all the memory of /physical_device:GPU:0")
        assert f"Received: memory growth={growth}, TF_FORCE_GPU_ALLOW_GROWTH={variable!r}" in error


def test_memory_growth_default_is_set_once_and_never_overrides():
    """Without TensorFlow started (see test_dataset.py for the real imports)."""
    environ = {}
    assert default_memory_growth(environ, {}) and environ == {"TF_FORCE_GPU_ALLOW_GROWTH": "true"}
    environ = {"TF_FORCE_GPU_ALLOW_GROWTH": "false"}
    assert not default_memory_growth(environ, {})
    assert environ == {"TF_FORCE_GPU_ALLOW_GROWTH": "false"}


def visible_gpus(*gpus):
    """TensorFlow's answers for `cuda_ordinal`: per `(name, memory limits or None)`,
    the name and its logical device configurations."""
    tf = pytest.importorskip("tensorflow")
    return [(name, None if limits is None else
             [tf.config.LogicalDeviceConfiguration(memory_limit=m) for m in limits])
            for name, limits in gpus]


@pytest.mark.parametrize("index, gpus, ordinal", [
    (0, [("/physical_device:GPU:0", None)], 0),
    # tf.config.set_visible_devices(gpus[1:3]): TensorFlow's GPU 0 is CUDA device 1.
    (0, [("/physical_device:GPU:1", None), ("/physical_device:GPU:2", None)], 1),
    (1, [("/physical_device:GPU:2", None), ("/physical_device:GPU:1", None)], 2),
    # Two logical GPUs on GPU 0, one on GPU 1.
    (1, [("/physical_device:GPU:0", (1024, 1024)), ("/physical_device:GPU:1", None)], 0),
    (2, [("/physical_device:GPU:0", (1024, 1024)), ("/physical_device:GPU:1", None)], 1),
])
def test_cuda_ordinal_of_tensorflows_gpu_index(index, gpus, ordinal):
    assert cuda_ordinal(index, visible_gpus(*gpus)) == ordinal


def test_cuda_ordinal_refuses_what_it_cannot_tell():
    tf = pytest.importorskip("tensorflow")
    with pytest.raises(ValueError, match=r"2 visible logical GPUs, so there is no /gpu:2"):
        cuda_ordinal(2, [("/physical_device:GPU:0", None), ("/physical_device:GPU:1", None)])
    ordered = [tf.config.LogicalDeviceConfiguration(memory_limit=512,
                                                    experimental_device_ordinal=1)]
    with pytest.raises(ValueError, match=r"`experimental_device_ordinal` reorders"):
        cuda_ordinal(0, [("/physical_device:GPU:0", ordered)])


class JaxGpu:
    """What `jax.local_devices(backend="gpu")` gives: `id` counts the devices of all
    processes, `local_hardware_id` is the CUDA ordinal in this process."""

    def __init__(self, id, local_hardware_id):
        self.id = id
        self.local_hardware_id = local_hardware_id


class OldJaxGpu:
    """A JAX device without `local_hardware_id`."""

    def __init__(self, id):
        self.id = id


def test_jax_ordinals_are_the_local_hardware_ids_zero_included():
    # The second process of two, one GPU each: global id 1, CUDA device 0.
    assert jax_ordinals([JaxGpu(1, 0)]) == [0]
    assert jax_ordinals([JaxGpu(4, 2), JaxGpu(5, 3)]) == [2, 3]
    assert jax_ordinals([JaxGpu(3, None), OldJaxGpu(1)]) == [3, 1]
    assert jax_ordinals([]) == []


def test_gpu_pipelines_default_to_dali_examples_threads():
    assert GPU_NUM_THREADS == 4
    assert Options(device="gpu").resolved().num_threads == min(4, usable_cores())
    assert Options(device="cpu").resolved().num_threads == usable_cores()
    assert Options(device="gpu", num_threads=7).resolved().num_threads == 7


@pytest.mark.parametrize("cores, jpeg, png, masks", [
    (1, 1, 1, 1), (2, 2, 2, 2), (4, 4, 4, 4), (8, 4, 7, 7), (16, 4, 15, 15), (64, 4, 63, 63),
])
def test_gpu_threads_grow_with_the_decodes_left_to_the_cpu(cores, jpeg, png, masks):
    """JPEGs decode on the GPU: `GPU_NUM_THREADS`. PNGs and every mask decode on the
    CPU: every usable core but the training thread's. The CPU: every core."""
    assert default_num_threads("gpu", cores=cores) == jpeg
    assert default_num_threads("gpu", cpu_decoded=1.0, cores=cores) == png
    assert default_num_threads("gpu", masks=True, cores=cores) == masks
    assert default_num_threads("cpu", masks=True, cores=cores) == cores
    half = default_num_threads("gpu", cpu_decoded=0.5, cores=cores)
    assert jpeg <= half <= png


def test_the_cpu_share_of_decodes_reads_the_extensions():
    assert cpu_decoded_share(["a.jpg", "b.JPEG", "c.png", "d.bmp"]) == 0.5
    assert cpu_decoded_share(["a.jp2", "b.jpg"]) == 0.0
    assert cpu_decoded_share([]) == 0.0
    many = [f"{i}.png" if i % 4 == 0 else f"{i}.jpg" for i in range(100_000)]
    assert cpu_decoded_share(many) == pytest.approx(0.25, abs=0.01)


def test_a_gpu_pipeline_of_pngs_or_masks_takes_more_threads(indexed_dir, monkeypatch):
    """`split_source` on a GPU placement (defined here, not run): a folder of PNGs takes
    the PNG default; threads given are kept. No DALI GPU is needed to make it."""
    from dalipipe import devices
    from dalipipe.pipeline import split_source

    monkeypatch.setattr(devices, "usable_cores", lambda: 16)
    options = Options(image_size=(8, 8), batch_size=2, check=None, verbose=False)
    placement = Placement("gpu", 0, default_num_threads("gpu"), None)
    assert placement.num_threads == 4
    assert split_source(indexed_dir, options, placement).options.num_threads == 15
    given = Options(image_size=(8, 8), batch_size=2, check=None, verbose=False, num_threads=3)
    assert split_source(indexed_dir, given, Placement("gpu", 0, 3, None)).options.num_threads == 3
    monkeypatch.setattr(devices, "dali_gpu_count", lambda: 1)
    assert devices.place(Options(device="gpu", masks="m/")).num_threads == 15
    assert devices.place(Options(device="gpu")).num_threads == 4
    assert devices.place(Options(device="cpu", masks="m/")).num_threads == 16
