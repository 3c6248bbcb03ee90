"""`dalipipe doctor`: what is installed, what it sees, and whether `make_dali_dataset` runs.

One line for each part: DALI and the CUDA it is built for, the GPUs DALI sees and the
driver, the hardware JPEG decoder, TensorFlow and its GPUs, Keras, PyTorch and JAX,
DALI's TensorFlow plugin, memory growth. Then `make_dali_dataset` runs on a few images made on the spot
(on the CPU, and on the GPU when TensorFlow and DALI both see one). The exit status
is 0 when it ran, 1 otherwise, with the reasons.
"""

import importlib.metadata
import io
import os
import platform
import re
import sys
import tempfile
import time

from dalipipe import install
from dalipipe.devices import GPU_TENSORFLOW_FIX, dali_gpu_count


def main():
    """Prints the report; returns the exit status."""
    rows, problems, advice = diagnose()
    width = max(len(part) for part, _ in rows) + 2
    for part, finding in rows:
        print(f"{part:<{width}}{finding}")
    for line in advice:
        print(f"warning: {line}")
    if problems:
        print("make_dali_dataset cannot run:")
        for problem in problems:
            print("  " + problem.replace("\n", "\n  "))
        return 1
    print("make_dali_dataset can run")
    return 0


def diagnose():
    """`(rows, problems, advice)`: `(part, finding)` pairs, the reasons
    `make_dali_dataset` cannot run (none when it ran), and what would make it use
    the GPU."""
    import dalipipe

    rows = [("dalipipe", f"{dalipipe.__version__}, Python {platform.python_version()}, "
                         f"{platform.system()} {platform.machine()}")]
    problems, advice = [], []

    dali = install.dali_package()
    dali_gpus, has_dali, has_tf = 0, False, False
    try:
        import nvidia.dali as dali_module
        from nvidia.dali import backend
    except ImportError as e:
        rows.append(("DALI", f"not importable ({e})"))
        problems.append(f"{dali[0]} {dali[1]} is installed but does not import: {e}" if dali
                        else install.plugin_message(None, None, None))
    else:
        has_dali = True
        built = str(dali_module.__cuda_version__)[:2]
        rows.append(("DALI", f"{dali_module.__version__} ({dali[0] if dali else 'package unknown'}"
                             f", built for CUDA {built})"))
        dali_gpus = dali_gpu_count()
        rows.append(("DALI GPUs", _gpus_and_driver(backend, dali_gpus, built, advice)))
        rows.append(("hardware JPEG", _hardware_jpeg(dali_gpus)))

    tf_gpus = []
    try:
        import tensorflow as tf
    except ImportError as e:
        rows.append(("TensorFlow", f"not importable ({e})"))
        problems.append(f"TensorFlow does not import: {e}")
    else:
        has_tf = True
        tf_gpus = tf.config.list_physical_devices("GPU")
        cuda = tf.sysconfig.get_build_info().get("cuda_version")
        built = f"built with CUDA {cuda}" if cuda else "built without CUDA"
        seen = ", ".join(g.name for g in tf_gpus) or "none"
        rows.append(("TensorFlow", f"{tf.__version__} ({built}); GPUs: {seen}"))
        rows.append(("Keras", _keras(problems, advice)))
    rows.append(("other backends", _other_backends()))
    if dali_gpus and not tf_gpus:
        advice.append(f"DALI sees a GPU and TensorFlow does not: {GPU_TENSORFLOW_FIX}.")

    name = install.plugin_package(dali[0]) if dali else "DALI's TensorFlow plugin"
    plugin = install.installed_version(name) if dali else None
    installed = f"{name} {plugin}" if plugin else f"{name} not installed"
    if has_dali and has_tf:
        try:
            install.import_dali_tf()
        except ImportError as e:
            rows.append(("TF plugin", f"{installed}; does not load"))
            problems.append(str(e))
        else:
            rows.append(("TF plugin", f"{installed}; loads"))
    else:
        rows.append(("TF plugin", f"{installed}; not tried without DALI and TensorFlow"))
    if has_tf:
        rows.append(("memory growth", _memory_growth(tf, tf_gpus)))

    if not problems:
        devices = ["cpu"] + (["gpu"] if tf_gpus and dali_gpus else [])
        for device in devices:
            rows.append((f"dataset ({device})", _try_dataset(device, problems)))
    return rows, problems, advice


def _gpus_and_driver(backend, dali_gpus, built, advice):
    """The GPUs DALI sees, their names, and the driver's version and CUDA version."""
    driver, names = _driver()
    if driver is None:
        return f"{dali_gpus} (no NVIDIA driver)"
    cuda = backend.GetCudaVersion()  # the driver's CUDA version, 12040 for 12.4
    supports = f"CUDA {cuda // 1000}.{cuda % 1000 // 10}" if cuda > 0 else "CUDA unknown"
    if 0 < cuda and cuda // 1000 < int(built):
        advice.append(
            f"this DALI is built for CUDA {built} and the driver supports {supports}: "
            f"update the driver, or {install.DALI_FIX}."
        )
    listed = f": {', '.join(names)}" if names else ""
    return f"{dali_gpus}{listed}; driver {driver} ({supports})"


def nvidia_gpus():
    """The NVIDIA driver and its GPUs, from NVML (nvidia-ml-py, imported here).

    Returns:
        `(driver version, [(GPU name, memory in use in MB), ...])` in NVML's order,
        which is nvidia-smi's, or `(None, [])` where NVML does not start (no NVIDIA
        driver, or no nvidia-ml-py). The memory in use is every process's.
    """
    try:
        import pynvml
    except ImportError:
        return None, []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None, []
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            try:  # v2 leaves out what the driver reserves, as nvidia-smi's "Used" does
                memory = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
            except pynvml.NVMLError:  # a driver without the v2 call
                memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append((pynvml.nvmlDeviceGetName(handle), memory.used / 2**20))
        return pynvml.nvmlSystemGetDriverVersion(), gpus
    except pynvml.NVMLError:
        return None, []
    finally:
        pynvml.nvmlShutdown()


def _driver():
    """`(driver version, GPU names)`, or `(None, [])` without an NVIDIA driver."""
    driver, gpus = nvidia_gpus()
    if driver is not None:
        return driver, [name for name, _ in gpus]
    try:  # a driver whose NVML library is not installed here
        with open("/proc/driver/nvidia/version", encoding="utf-8") as f:
            match = re.search(r"Kernel Module(?: for \S+)?\s+([\d.]+)", f.read())
    except OSError:
        return None, []
    return (match.group(1) if match else "of unknown version"), []


def _hardware_jpeg(dali_gpus):
    """Whether GPU 0 decodes JPEG in hardware: nvImageCodec, through which DALI
    decodes, is asked to decode a small JPEG with its hardware backend alone."""
    if not dali_gpus:
        return "no (no GPU: DALI decodes on the CPU)"
    try:
        import nvidia.nvimgcodec as nvimgcodec
        from PIL import Image
    except ImportError as e:
        return f"unknown ({e})"
    data = io.BytesIO()
    Image.new("RGB", (256, 256), (90, 140, 200)).save(data, "JPEG", quality=90)
    try:
        decoder = nvimgcodec.Decoder(device_id=0,
                                     backends=[nvimgcodec.Backend(nvimgcodec.HW_GPU_ONLY)])
        image = decoder.decode(data.getvalue())
    except RuntimeError as e:
        return f"unknown (nvImageCodec's hardware backend failed: {e})"
    if image is None:
        return "no (GPU 0 has none: nvJPEG decodes on the CUDA cores)"
    return "yes (GPU 0 decoded a test JPEG in hardware)"


def _keras(problems, advice, requirements=None):
    """The Keras row; `requirements` are dalipipe's (its package metadata's when None)."""
    try:
        import keras
    except ImportError as e:
        problems.append(f"Keras does not import: {e}")
        return f"not importable ({e})"
    backend = keras.config.backend()
    if int(keras.__version__.split(".")[0]) < 3:
        problems.append(f"dalipipe needs Keras 3 or later: pip install 'keras>=3'. "
                        f"Found {keras.__version__}")
    else:
        outside = keras_outside_range(keras.__version__, requirements)
        if outside:
            advice.append(outside)
    if backend != "tensorflow":
        advice.append(f"Keras's backend is {backend!r}: dalipipe's datasets are tf.data "
                      "datasets, which Keras trains from with KERAS_BACKEND=tensorflow.")
    return f"{keras.__version__}, backend {backend}"


def keras_outside_range(version, requirements=None):
    """What to do when Keras `version` is outside the versions dalipipe requires
    (`pyproject.toml`'s `keras` dependency, which `dalipipe.keras_hooks` is tested on),
    else None.

    Args:
        version: the installed Keras's version, such as "3.15.1".
        requirements: dalipipe's requirements as `importlib.metadata.requires` lists
            them; None reads the installed package's (none found: nothing to say).
    """
    from packaging.requirements import Requirement

    if requirements is None:
        try:
            requirements = importlib.metadata.requires("dalipipe") or []
        except importlib.metadata.PackageNotFoundError:  # a checkout, not installed
            return None
    for line in requirements:
        requirement = Requirement(line)
        if requirement.name == "keras" and requirement.marker is None:
            if requirement.specifier.contains(version, prereleases=True):
                return None
            return (f"Keras {version} is installed, and dalipipe reads Keras's internals "
                    f"as the versions it requires have them ({requirement}): "
                    f"pip install '{requirement}'.")
    return None


def _memory_growth(tf, tf_gpus):
    env = os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH")
    env = f"TF_FORCE_GPU_ALLOW_GROWTH={env}" if env is not None else \
        "TF_FORCE_GPU_ALLOW_GROWTH unset"
    if not tf_gpus:
        return f"{env}; no GPU in TensorFlow"
    states = {g.name: tf.config.experimental.get_memory_growth(g) for g in tf_gpus}
    listed = ", ".join(f"{name} {'on' if on else 'off'}" for name, on in states.items())
    return f"{env}; TensorFlow: {listed} (make_dali_dataset turns it on for GPU datasets)"


def _other_backends():
    """The installed versions of PyTorch and JAX, Keras's other backends (not imported)."""
    found = [f"{name} {version}" for name, version in
             (("PyTorch", install.installed_version("torch")),
              ("JAX", install.installed_version("jax"))) if version]
    if not found:
        return (f"none (for them: {install.pip_extra('torch')}, or "
                f"{install.pip_extra('jax')})")
    return ", ".join(found) + " (KERAS_BACKEND=torch or jax: batches as their tensors)"


def _try_dataset(device, problems):
    """Runs `make_dali_dataset` over 4 PNG files on `device`; returns what it did."""
    from PIL import Image

    from dalipipe.dataset import make_dali_dataset

    with tempfile.TemporaryDirectory(prefix="dalipipe-doctor-") as folder:
        for i in range(4):
            os.makedirs(os.path.join(folder, f"class_{i % 2}"), exist_ok=True)
            Image.new("RGB", (24 + i, 20), (60 * i, 100, 200)).save(
                os.path.join(folder, f"class_{i % 2}", f"image_{i}.png"))
        started = time.perf_counter()
        try:
            dataset = make_dali_dataset(folder, image_size=(16, 16), batch_size=2,
                                        device=device, check=None, verbose=False)
            shapes = [tuple(images.shape) for images, _ in dataset]
        except Exception as e:  # report whatever stops it, then exit 1
            problems.append(f"make_dali_dataset(device={device!r}) failed: "
                            f"{type(e).__name__}: {e}")
            return "failed"
    if shapes != [(2, 16, 16, 3)] * 2:
        problems.append(f"make_dali_dataset(device={device!r}) gave batches of {shapes}, "
                        "not two of (2, 16, 16, 3)")
        return "wrong batches"
    return f"2 batches of (2, 16, 16, 3) in {time.perf_counter() - started:.1f} s"


if __name__ == "__main__":
    sys.exit(main())
