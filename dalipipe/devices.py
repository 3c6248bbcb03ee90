"""Devices: what `device="auto"` picks, on which CUDA device, with which settings.

- The placement, decided once per dataset or pipeline (`place`, first thing): a
  `Placement`, the device, its CUDA ordinal, DALI's threads and the process's shard.
- The choice: `dali_device` for a pipeline alone (`make_dali_pipeline`), and
  `choose_device` where a framework takes the batches, which needs a GPU that both
  it and DALI see; `resolve_tensorflow_device`, `strategy_device` and
  `resolve_device` ask TensorFlow, a `tf.distribute` strategy, or PyTorch and JAX.
  When only one of them sees a GPU, `"auto"` warns with the fix to apply
  (`FRAMEWORK_GPU_FIXES`, `install.DALI_FIX`) and `"gpu"` raises.
- The CUDA ordinal (DALI's `device_id`) of a framework's GPU: `tf_gpu_cuda_ordinal`
  (`cuda_ordinal`, a pure function of TensorFlow's answers) and `framework_gpus`
  (`jax_ordinals` for JAX's devices).
- Memory: TensorFlow takes all of a GPU's memory unless told otherwise, and DALI
  allocates its own (`default_memory_growth`, which `import dalipipe` calls,
  `enable_memory_growth`, `memory_growth_error`).
- Threads: `default_num_threads`, DALI's CPU threads for a device and the share of
  decodes the source leaves to the CPU (`cpu_decoded_share`).

TensorFlow, PyTorch and JAX are imported only inside the functions that ask them:
the GPU tests and `benchmarks/gpu_bench.py` run where there is no TensorFlow, and
`import dalipipe` never loads it. The pure functions take the frameworks' answers
as arguments, so that tests can give them every answer a framework may give.
"""

import dataclasses
import os
import random
from typing import Optional

from dalipipe.calls import warn
from dalipipe.install import DALI_FIX, pip_extra
from dalipipe.sharding import data_parallel_shard
from dalipipe.utils import usable_cores

# DALI CPU threads of a GPU pipeline whose images the GPU decodes, as in DALI's own
# examples: the threads only read files and prepare the GPU's work. A CPU pipeline
# takes every usable core.
GPU_NUM_THREADS = 4
# What nvImageCodec decodes on the GPU (nvJPEG, nvJPEG2000). Other formats (PNG, BMP,
# PNM, WebP, TIFF) and every mask decode on DALI's CPU threads.
GPU_DECODED_EXTENSIONS = (".jpg", ".jpeg", ".jp2", ".j2k")
# TensorFlow's switch for GPU memory growth, read when it creates its GPU devices:
# "true" or "false" overrides `tf.config.experimental.set_memory_growth`.
MEMORY_GROWTH_VARIABLE = "TF_FORCE_GPU_ALLOW_GROWTH"
# Keras backend -> (the framework's name, what makes it see the GPUs that DALI sees).
FRAMEWORK_GPU_FIXES = {
    "tensorflow": ("TensorFlow", "install TensorFlow with its CUDA libraries: "
                                 f"{pip_extra('gpu')} (that is, tensorflow[and-cuda])"),
    "torch": ("PyTorch", "install PyTorch with CUDA (https://pytorch.org/get-started/)"),
    "jax": ("JAX", "install JAX with CUDA: pip install 'jax[cuda12]' (or 'jax[cuda13]')"),
}
GPU_TENSORFLOW_FIX = FRAMEWORK_GPU_FIXES["tensorflow"][1]
# TensorFlow's device of a GPU pipeline without a strategy (the "tf" format).
TF_GPU = "/gpu:0"


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where a dataset's pipelines run, decided once (`place`).

    Attributes:
        device: `"gpu"` or `"cpu"`.
        device_id: the CUDA ordinal of the GPU that the pipelines run on and the
            check decodes on (0 on the CPU).
        num_threads: DALI's CPU threads per pipeline (the `num_threads` option, or
            `default_num_threads` for the device).
        sharding: `(replica_ids, num_replicas)` of this process's shard under a Keras
            JAX distribution or `torch.distributed` (`sharding.data_parallel_shard`),
            else None. A `tf.distribute` strategy shards per replica instead
            (`tf_dataset.distribute`).
    """

    device: str
    device_id: int
    num_threads: int
    sharding: Optional[tuple]


def place(options, *, backend=None, tf_data=False, strategy=None):
    """The `Placement` for `options`: the one device decision of a `make_dali_dataset`
    or `make_dali_pipeline` call.

    Args:
        options: the validated `Options`.
        backend: Keras's backend, whose framework takes the batches of the
            `"pydataset"` and `"grain"` formats: PyTorch and JAX are asked for their
            GPUs (`resolve_device`) and their shard (`data_parallel_shard`); on other
            backends and for a pipeline alone (None), DALI decides (`dali_device`).
        tf_data: whether TensorFlow takes the batches (the `"tf"` format): it is
            asked, or `strategy`'s replicas are; a GPU pipeline runs on its first GPU.
        strategy: the `tf.distribute` strategy, with `tf_data`.

    Returns:
        A `Placement`.

    Raises:
        RuntimeError: for `device="gpu"` without a GPU that DALI (and the framework)
            can use, or TensorFlow holding all its memory.
        ValueError: for a device that contradicts `strategy`'s replicas, or options
            that cannot be sharded (`data_parallel_shard`).
    """
    device, device_id, sharding = options.device, 0, None
    if tf_data:
        if strategy is not None:
            device = strategy_device(strategy, device)
        elif device in ("auto", "gpu"):
            device = resolve_tensorflow_device(device)
        if device == "gpu":
            device_id = tf_gpu_cuda_ordinal(TF_GPU)
    else:
        device, ordinal = resolve_device(device, backend)
        device = dali_device(device)
        device_id = ordinal or 0
        sharding = data_parallel_shard(options, backend)
    num_threads = options.num_threads
    if num_threads is None:
        num_threads = default_num_threads(device, masks=options.masks is not None)
    return Placement(device, device_id, num_threads, sharding)


def dali_gpu_count():
    """Number of CUDA devices DALI can use (0 on a machine without a driver)."""
    from nvidia.dali import backend

    try:
        return backend.GetCUDADeviceCount()
    except RuntimeError:
        return 0


def default_num_threads(device, *, masks=False, cpu_decoded=0.0, cores=None):
    """DALI's CPU threads for a pipeline on `device` ("cpu" or "gpu"): on the CPU the
    usable `cores` (default: `utils.usable_cores()`, `os.sched_getaffinity`). On a GPU,
    `GPU_NUM_THREADS` (at most the cores) where the GPU decodes every image, and more
    as the share of decodes left to the CPU grows, up to every usable core but one
    (the training thread's): the share `cpu_decoded` (in [0, 1], `cpu_decoded_share`)
    of the images, all of them with `masks` (each mask decodes on the CPU)."""
    cores = usable_cores() if cores is None else cores
    if device != "gpu":
        return cores
    base = min(GPU_NUM_THREADS, cores)
    share = 1.0 if masks else min(max(float(cpu_decoded), 0.0), 1.0)
    return base + round(share * max(cores - 1 - base, 0))


def cpu_decoded_share(paths, most=10000):
    """The share of `paths` (image files) whose format decodes on the CPU, not in
    `GPU_DECODED_EXTENSIONS`, read from at most `most` of them drawn at random (with a
    fixed seed)."""
    if not len(paths):
        return 0.0
    if len(paths) > most:
        paths = [paths[i] for i in random.Random(0).sample(range(len(paths)), most)]
    seen = [str(p).lower().endswith(GPU_DECODED_EXTENSIONS) for p in paths]
    return 1.0 - sum(seen) / len(seen)


def dali_device(device):
    """`"gpu"` or `"cpu"` for the `device` option of a pipeline alone: `"auto"` is
    the GPU when DALI sees one; `"gpu"` raises RuntimeError when it sees none."""
    if device == "auto":
        return "gpu" if dali_gpu_count() > 0 else "cpu"
    if device == "gpu" and dali_gpu_count() == 0:
        raise RuntimeError(
            "`device='gpu'` needs a CUDA GPU that DALI can use, and DALI found none. "
            "Use device='cpu' or device='auto'."
        )
    return device


def choose_device(device, framework_gpus, dali_gpus, *, framework, framework_fix):
    """`"gpu"` or `"cpu"` for `device` in ("auto", "gpu") when the framework that
    takes the batches (`framework`: "TensorFlow", "PyTorch", "JAX") sees
    `framework_gpus` GPUs and DALI sees `dali_gpus`. `"auto"` warns when only one of
    them sees a GPU, naming the fix (`framework_fix` for the framework); `"gpu"`
    raises RuntimeError."""
    if framework_gpus and dali_gpus:
        return "gpu"
    fix = ""
    if dali_gpus:
        fix = f" To use the GPU, {framework_fix}."
    elif framework_gpus:
        fix = f" To use the GPU, {DALI_FIX}."
    counts = f"{framework} sees {framework_gpus}, DALI sees {dali_gpus}."
    if device == "gpu":
        raise RuntimeError(
            f"`device='gpu'` needs a GPU that both {framework} and DALI can use. {counts} "
            f"Use device='cpu' or device='auto'.{fix}"
        )
    if fix:
        warn(f"`device='auto'` runs DALI on the CPU: {counts}{fix}")
    return "cpu"


# ---------------------------------------------------------------------- TensorFlow


def resolve_tensorflow_device(device):
    """`"gpu"` or `"cpu"` for `device` in ("auto", "gpu") when TensorFlow takes the
    batches (see `choose_device`); enables memory growth for a GPU pipeline."""
    import tensorflow as tf

    tf_gpus = tf.config.list_physical_devices("GPU")
    framework, fix = FRAMEWORK_GPU_FIXES["tensorflow"]
    chosen = choose_device(device, len(tf_gpus), dali_gpu_count(),
                           framework=framework, framework_fix=fix)
    if chosen == "gpu":
        enable_memory_growth(tf_gpus)
    return chosen


def strategy_device(strategy, device):
    """The DALI device for a `tf.distribute` strategy's replicas: GPUs only if they
    are all GPUs. Raises ValueError when `device` contradicts the replicas."""
    import tensorflow as tf

    devices = strategy.extended.worker_devices
    kinds = {tf.DeviceSpec.from_string(d).device_type for d in devices}
    if kinds == {"GPU"}:
        if device == "cpu":
            raise ValueError(
                "`device='cpu'` puts DALI on the CPU, and this strategy's replicas are "
                f"GPUs: {devices}. Use device='auto' or 'gpu', or a strategy over CPUs."
            )
        return resolve_tensorflow_device(device)
    if device == "gpu":
        raise ValueError(
            f"`device='gpu'` needs a strategy whose replicas are GPUs. Received a strategy "
            f"with replicas on {devices}"
        )
    return "cpu"


def tf_gpu_cuda_ordinal(device):
    """The CUDA device ordinal (DALI's `device_id`) of TensorFlow's GPU `device`
    (such as `"/gpu:1"`), from TensorFlow's visible GPUs (see `cuda_ordinal`)."""
    import tensorflow as tf

    index = tf.DeviceSpec.from_string(device).device_index or 0
    visible = [(gpu.name, tf.config.get_logical_device_configuration(gpu))
               for gpu in tf.config.get_visible_devices("GPU")]
    return cuda_ordinal(index, visible, device=device)


def cuda_ordinal(index, visible, *, device=None):
    """The CUDA device ordinal of TensorFlow's logical GPU `index`.

    TensorFlow numbers its logical GPUs over its visible physical GPUs in the order
    of the physical ones (`tf.config.set_visible_devices` only filters them), each
    GPU split into its logical devices (`tf.config.set_logical_device_configuration`)
    in order; a physical GPU's name ends with its CUDA ordinal, as CUDA numbers the
    devices of `CUDA_VISIBLE_DEVICES`. A pure function of TensorFlow's answers.

    Args:
        index: the logical GPU's index, as in `/gpu:<index>`.
        visible: per visible physical GPU, `(name, configurations)`: its name
            (`"/physical_device:GPU:<ordinal>"`) and its logical device
            configurations (None when not split).
        device: the device name for messages. Defaults to `/gpu:<index>`.

    Returns:
        The CUDA ordinal, an int.

    Raises:
        ValueError: when TensorFlow has no such logical GPU, or when logical GPUs are
            given an `experimental_device_ordinal`, which reorders them.
    """
    device = device or f"/gpu:{index}"
    logical = []
    for name, configurations in sorted(visible, key=lambda gpu: _physical_ordinal(gpu[0])):
        configurations = configurations or [None]
        if any(getattr(c, "experimental_device_ordinal", None) is not None
               for c in configurations):
            raise ValueError(
                "dalipipe finds the CUDA device of a TensorFlow GPU from the order of the "
                "visible GPUs, and `experimental_device_ordinal` reorders the logical GPUs. "
                "Configure the logical GPUs without it, or hide the other GPUs with "
                f"CUDA_VISIBLE_DEVICES. Received: device={device!r}, logical devices of "
                f"{name}: {configurations}"
            )
        logical += [_physical_ordinal(name)] * len(configurations)
    if not 0 <= index < len(logical):
        raise ValueError(
            f"TensorFlow has {len(logical)} visible logical GPUs, so there is no {device}. "
            f"Received: device={device!r}"
        )
    return logical[index]


def _physical_ordinal(name):
    return int(name.rsplit(":", 1)[1])


def default_memory_growth(environ, modules):
    """Sets `TF_FORCE_GPU_ALLOW_GROWTH=true` in `environ` unless it is set or
    TensorFlow (found in `modules`, `sys.modules`) has already created its devices, so
    that TensorFlow leaves GPU memory to DALI. Returns whether it set it.

    `import dalipipe` calls it: a program that imports dalipipe before TensorFlow
    starts on a GPU gets memory growth without asking.
    """
    if MEMORY_GROWTH_VARIABLE in environ or _tensorflow_started(modules):
        return False
    environ[MEMORY_GROWTH_VARIABLE] = "true"
    return True


def _tensorflow_started(modules):
    # TensorFlow reads the variable when it creates its devices, after its import.
    if "tensorflow" not in modules:
        return False
    from dalipipe import tf_hooks  # imports nothing more than TensorFlow's own

    return tf_hooks.devices_created()


def enable_memory_growth(gpus):
    """Turns memory growth on for TensorFlow's physical `gpus`, or raises RuntimeError
    where TensorFlow has already created its devices with all the memory (see
    `memory_growth_error`)."""
    import tensorflow as tf

    for gpu in gpus:
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except (RuntimeError, ValueError):
            pass  # the devices exist (or are split): their settings below say
        configurations = tf.config.get_logical_device_configuration(gpu) or []
        error = memory_growth_error(
            gpu.name, growth=tf.config.experimental.get_memory_growth(gpu),
            memory_limits=[c.memory_limit for c in configurations],
            variable=os.environ.get(MEMORY_GROWTH_VARIABLE),
        )
        if error:
            raise RuntimeError(error)


def memory_growth_error(gpu, *, growth, memory_limits, variable):
    """Why a DALI GPU pipeline would find no memory on `gpu`, or None.

    TensorFlow takes all of a GPU's memory but a small reserve unless memory growth
    is on or a logical device has a memory limit. `TF_FORCE_GPU_ALLOW_GROWTH`, read
    when TensorFlow creates the device, overrides `set_memory_growth` when it is
    "true" or "false". A pure function of TensorFlow's answers.

    Args:
        gpu: the physical GPU's name, for the message.
        growth: `tf.config.experimental.get_memory_growth(gpu)`.
        memory_limits: the `memory_limit` of each of its logical device
            configurations (empty when it is not split).
        variable: the value of `TF_FORCE_GPU_ALLOW_GROWTH`, None when unset.

    Returns:
        The message for the RuntimeError, or None when TensorFlow leaves memory free.
    """
    # The variable's rule: `GetAllowGrowthValue` in TensorFlow's gpu_bfc_allocator.cc.
    # The reserve: about 1.8 GiB on compute capability 9 and up.
    if variable == "true" or (variable != "false" and growth):
        return None
    if any(limit is not None for limit in memory_limits):
        return None
    return (
        f"TensorFlow holds all the memory of {gpu} but a small reserve (memory growth is "
        "off and no memory limit is set), and DALI's GPU pipeline allocates its own. "
        "Import dalipipe before TensorFlow creates its GPU devices (before "
        "`tf.distribute.MirroredStrategy()` or the first op), which turns growth on by "
        "default; or set TF_FORCE_GPU_ALLOW_GROWTH=true before Python starts; or call "
        "`tf.config.experimental.set_memory_growth(gpu, True)` or give the GPU a "
        "`memory_limit` with `tf.config.set_logical_device_configuration` first. "
        f"Received: memory growth={growth}, {MEMORY_GROWTH_VARIABLE}={variable!r}"
    )


# ------------------------------------------------------------------- PyTorch, JAX


def resolve_device(device, backend):
    """`(device, device_id)` for the `"pydataset"` format: "gpu" or "cpu" for the
    `device` option (on backends other than torch and JAX, the option itself, which
    `place` gives to `dali_device`), and the CUDA ordinal of the backend's first GPU for
    a GPU pipeline (else None, which means CUDA device 0).

    On torch and JAX, `"auto"` means the GPU when both the framework and DALI see
    one (see `choose_device`); on other backends, when DALI sees one.
    """
    if device == "cpu":
        return "cpu", None
    if backend not in ("torch", "jax"):
        return device, None  # `place` asks DALI; CUDA device 0
    framework, fix = FRAMEWORK_GPU_FIXES[backend]
    ordinals = framework_gpus(backend)
    chosen = choose_device(device, len(ordinals), dali_gpu_count(),
                           framework=framework, framework_fix=fix)
    return chosen, ordinals[0] if chosen == "gpu" else None


def framework_gpus(backend):
    """The CUDA ordinals of the GPUs of `backend` ("torch" or "jax"), its current
    (first) one first; empty when it sees none."""
    if backend == "torch":
        import torch

        if not torch.cuda.is_available():
            return []
        current = torch.cuda.current_device()
        return [current] + [i for i in range(torch.cuda.device_count()) if i != current]
    import jax

    try:
        gpus = jax.local_devices(backend="gpu")
    except RuntimeError:  # no GPU backend
        return []
    return jax_ordinals(gpus)


def jax_ordinals(devices):
    """The CUDA ordinals of JAX's local GPU `devices`: each one's `local_hardware_id`
    (0 included), or its `id` where JAX gives no local id. A pure function."""
    ordinals = []
    for d in devices:
        local = getattr(d, "local_hardware_id", None)
        ordinals.append(d.id if local is None else local)
    return ordinals
