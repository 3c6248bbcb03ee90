"""The measuring harness behind `dalipipe bench` and `benchmarks/gpu_bench.py`.

Every (loader, workload) runs in a fresh Python process, so that CPU time and peak
memory belong to that loader alone; a quick run (`dalipipe bench --quick`, whose
figures are not for comparing) runs each loader's workloads in turn in one process
(`measure_in_turn`), so that every code path runs with one process start per loader.
In each measurement: one warm-up epoch, then `runs` timed epochs; images/s is the
median, and `total_s` is creation plus every epoch (the figure for the loaders that
keep decoded images, whose warm-up epoch fills them: `--runs 4` gives five epochs).
A loader with GPU work gives a `synchronize` that waits for it, called before
every timer read. CPU seconds count the process, its
threads and its child processes (PyDataset's and DataLoader's workers).

Every loader also records the time to its first batch (which, for a DALI pipeline,
includes building it); a GPU loader records the GPU memory in use after the timed
epochs and, where it can `rebuild`, the time to the first batch of a second pipeline
built later in the process.

On a dense workload the task's `labels` are the mask paths (segmentation) or the COCO
JSON of the boxes (detection), and the first batch's targets are recorded: the masks'
shape, dtype and class ids (`mask_fields`), or the boxes' (`box_fields`).

Quality is measured on the eval and stretch workloads as the mean absolute difference, in grey
levels, between the loader's first batch and a PIL reference (antialiased bilinear,
shorter side 256, center crop 224). Training input efficiency is images/s of a fixed
Keras model fed by the loader for `steps` steps, divided by images/s of the same
model fed the same batches from memory.

Above 400 lines: the one measuring procedure (processes, timers, CPU time, memory,
quality, ceilings, the GPU sweep) that `dalipipe bench` and `gpu_bench.py` share.
"""

import importlib.util
import json
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import time

import numpy as np

from dalipipe.bench import loaders as loaders_lib
from dalipipe.doctor import nvidia_gpus
from dalipipe.utils import child_env, usable_cores

QUALITY_IMAGES = 32


def cpu_seconds():
    """CPU time of this process, its reaped children and its live descendants (psutil)."""
    psutil = _psutil()
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime
    for process in psutil.Process().children(recursive=True):
        try:
            times = process.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue  # ended meanwhile: RUSAGE_CHILDREN has it once reaped
        total += times.user + times.system
    return total


def _psutil():
    try:
        import psutil
    except ImportError as e:
        from dalipipe.install import pip_extra

        raise ImportError(
            f"dalipipe's benchmarks measure CPU time with psutil: {pip_extra('bench')} "
            "(on the GPU machine, scripts/gpu_extras.sh)") from e
    return psutil


def peak_rss_mb():
    """Peak resident memory of this process and of its largest reaped child, in MB.

    This process's is VmHWM from /proc (psutil has no peak): `ru_maxrss` would start
    at the size of the process that started it (it survives `execve`).
    """
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    try:
        with open("/proc/self/status") as f:
            own = next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration, ValueError):
        pass
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return own, child


def pil_reference(paths, workload="eval"):
    """Reference batch for the eval or stretch workload, 0-255 float32 `(n, 224, 224, 3)`.

    The exact transform, with no rounding of sizes or offsets, by PIL's antialiased
    bilinear filter in one step: for eval, the central square of side 224/256 of the
    shorter side resized to 224 (loaders that round the resized size or the crop
    offset to whole pixels differ from it by up to half a pixel); for stretch, the
    whole image resized to 224x224.
    """
    from PIL import Image

    images = []
    size = (loaders_lib.SIZE, loaders_lib.SIZE)
    for path in paths:
        image = Image.open(path).convert("RGB")
        width, height = image.size
        box = None
        if workload == "eval":
            side = min(width, height) * loaders_lib.SIZE / loaders_lib.RESIZE
            left, top = (width - side) / 2, (height - side) / 2
            box = (left, top, left + side, top + side)
        images.append(np.asarray(image.resize(size, Image.BILINEAR, box=box), np.float32))
    return np.stack(images)

def to_numpy(x):
    return x.numpy() if hasattr(x, "numpy") else np.asarray(x)


def gpu_memory_used_mb():
    """Memory in use on GPU 0, in MB, or None without NVML (`doctor.nvidia_gpus`).

    NVML counts the whole device (every process), so it measures a loader on a GPU
    that runs nothing else. DALI's own `Pipeline.executor_statistics()` is not used:
    it reports only for `exec_dynamic=False`, and dalipipe runs DALI's default
    (dynamic) executor.
    """
    _, gpus = nvidia_gpus()
    return gpus[0][1] if gpus else None


def _gpu_memory_fields(before):
    after = gpu_memory_used_mb()
    return {"gpu_memory_used_mb_before": before, "gpu_memory_used_mb_after": after,
            "gpu_memory_mb": None if None in (before, after) else after - before}


def _no_sync():
    pass


def measure(task):
    """Runs one (loader, workload) task in this process; returns its result dict."""
    files, labels = task["files"], task["labels"]  # a dense workload's: masks or boxes
    if task["workload"] not in loaders_lib.DENSE_WORKLOADS:
        labels = np.asarray(labels, np.int32)
    kwargs = dict(workload=task["workload"], batch_size=task["batch_size"],
                  threads=task["threads"], seed=task["seed"])
    kwargs.update(task.get("options") or {})
    on_gpu = loaders_lib.uses_gpu(task["loader"])
    memory_before = gpu_memory_used_mb() if on_gpu else None
    start = time.perf_counter()
    loader = loaders_lib.LOADERS[task["loader"]](files, labels, **kwargs)
    synchronize = loader.synchronize or _no_sync
    synchronize()
    result = {"loader": task["loader"], "workload": task["workload"],
              "setup_s": time.perf_counter() - start, "threads": task["threads"],
              "batch_size": task["batch_size"], "options": task.get("options") or {},
              "settings": loader.settings or loaders_lib.DESCRIPTIONS[task["loader"]],
              "note": loader.note}
    if task["loader"].startswith("dalipipe") and on_gpu:
        from dalipipe import codecs

        result["crop_setup"] = codecs.crop_setup()

    first = None
    count = 0
    for images, *targets in loader.epoch():
        if first is None:
            synchronize()
            result["first_batch_s"] = time.perf_counter() - start
            first = (loader.to_numpy or to_numpy)(images)
            fields = TARGET_FIELDS.get(task["workload"])
            if fields:
                result.update(fields(*map(loader.to_numpy or to_numpy, targets)))
        count += len(images)
    if count != len(files):
        raise RuntimeError(f"{task['loader']} gave {count} images for {len(files)} files")
    synchronize()
    result["first_epoch_s"] = time.perf_counter() - start  # creation and the warm-up epoch
    cpu_before = cpu_seconds()
    times = []
    for _ in range(task["runs"]):
        synchronize()
        start = time.perf_counter()
        for _batch in loader.epoch():
            pass
        synchronize()
        times.append(time.perf_counter() - start)
    cpu = cpu_seconds() - cpu_before
    result.update(
        images=len(files),
        run_s=times,
        images_per_s=len(files) / statistics.median(times),
        cpu_s_per_1000=1000 * cpu / (len(files) * task["runs"]),
        total_s=result["first_epoch_s"] + sum(times),  # creation and 1 + runs epochs
    )
    if task["workload"] in ("eval", "stretch") and loader.ordered:
        n = min(QUALITY_IMAGES, len(first))
        got = first[:n] * np.asarray(loaders_lib._STD) + np.asarray(loaders_lib._MEAN)
        reference = pil_reference((loader.file_paths or files)[:n], task["workload"])
        result["mean_abs_error_vs_pil"] = float(np.abs(got - reference).mean())
    # Memory of the loader alone, before the training measurement adds a model.
    result["peak_rss_mb"], result["peak_rss_child_mb"] = peak_rss_mb()
    if loader.measures is not None:
        result.update(loader.measures())
    if on_gpu:
        result.update(_gpu_memory_fields(memory_before))
    if loader.rebuild is not None and task.get("rebuild", True):
        synchronize()
        start = time.perf_counter()
        loader.rebuild()
        synchronize()
        result["rebuild_first_batch_s"] = time.perf_counter() - start
    if task.get("train_steps"):
        result.update(training_efficiency(loader, task))
    return result


def mask_fields(masks):
    """What a dense workload's result records of its first batch of masks: their
    shape, dtype and the class ids they hold (only ids of the source masks, 0-3 for
    `dense_data`'s, when nothing blends them)."""
    return {"mask_shape": list(masks.shape), "mask_dtype": str(masks.dtype),
            "mask_ids": sorted(float(v) if masks.dtype.kind == "f" else int(v)
                               for v in np.unique(masks))}


def box_fields(boxes, labels):
    """What the detection workload's result records of its first batch: the boxes'
    shape and dtype, how many were kept (labels of -1 pad) and their class ids."""
    kept = labels >= 0
    return {"box_shape": list(boxes.shape), "box_dtype": str(boxes.dtype),
            "boxes_kept": int(kept.sum()), "box_labels": sorted(map(int, np.unique(labels[kept])))}


# What a dense workload's result records of its first batch's targets.
TARGET_FIELDS = {"segmentation": mask_fields, "detection": box_fields}


def training_efficiency(loader, task):
    """images/s of a fixed model fed by the loader, and fed the same batches in memory."""
    import keras
    import tensorflow as tf

    steps, batch_size = task["train_steps"], task["batch_size"]
    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((loaders_lib.SIZE, loaders_lib.SIZE, 3)),
        keras.layers.AveragePooling2D(2),
        keras.layers.Conv2D(32, 3, strides=2, activation="relu"),
        keras.layers.Conv2D(64, 3, strides=2, activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(task["num_classes"], activation="softmax"),
    ])
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")

    batches = []
    for images, labels in loader.epoch():
        batches.append((to_numpy(images), to_numpy(labels)))
        if len(batches) == steps:
            break
    memory = tf.data.Dataset.from_tensor_slices((
        np.concatenate([b[0] for b in batches]), np.concatenate([b[1] for b in batches])
    )).batch(batch_size).cache()

    def generator():
        while True:
            yield from loader.epoch()

    fed = loader.dataset if loader.dataset is not None else generator()

    def timed_fit(data):
        model.fit(data, epochs=1, steps_per_epoch=2, verbose=0)  # warm-up
        start = time.perf_counter()
        model.fit(data, epochs=1, steps_per_epoch=steps, verbose=0)
        return steps * batch_size / (time.perf_counter() - start)

    in_memory = timed_fit(memory.repeat())
    loader_fed = timed_fit(fed)
    return {
        "train_images_per_s_in_memory": in_memory,
        "train_images_per_s_loader": loader_fed,
        "input_efficiency": loader_fed / in_memory,
    }


def decode_ceiling(files, batch_size, threads, runs, device="cpu", crop=False, options=None):
    """images/s of DALI decoding alone (file reader + dalipipe's decoder) over one epoch.

    The decoder is set up as dalipipe's graph sets it up (`graph.decode`; on a GPU
    `graph.gpu_decoder_arguments`: fancy upsampling and the `decoder` arguments of
    `options`). With `crop`, each image's random-resized crop
    window is decoded as the train workload's graph decodes it (`graph.decode_crop`:
    the crop set-up of `codecs.crop_setup()`), with windows drawn by DALI.

    `pipe.run()` returns each batch host-synchronous (DALI waits for its GPU work),
    so the timer reads need no further synchronization. On the GPU it also records
    the build time of the pipeline, the first of the process, and of a second one,
    and the GPU memory in use once the epochs have run.

    Args:
        options: `Options` arguments for the decoder (e.g. `decoder`).
            Defaults to none: dalipipe's defaults.
    """
    from dalipipe import codecs

    def build():
        start = time.perf_counter()
        pipe = ceiling_pipeline(files, batch_size, threads, device, crop, options)
        pipe.build()
        return pipe, time.perf_counter() - start

    memory_before = gpu_memory_used_mb()
    pipe, build_s = build()
    iterations = -(-len(files) // batch_size)
    for _ in range(iterations):  # warm-up epoch
        pipe.run()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(iterations):
            pipe.run()
        times.append(time.perf_counter() - start)
    images = iterations * batch_size
    result = {"loader": ceiling_name(device, crop), "workload": "decode",
              "images": images, "run_s": times, "images_per_s": images / statistics.median(times),
              "build_s": build_s, "threads": threads, "options": options or {},
              "crop_setup": codecs.crop_setup() if device == "gpu" else codecs.ROI_DECODE}
    if device == "gpu":
        result.update(_gpu_memory_fields(memory_before))
        result["rebuild_s"] = build()[1]
    return result


def ceiling_pipeline(files, batch_size, threads, device="cpu", crop=False, options=None):
    """The DALI pipeline (not built) of `decode_ceiling`: the file reader and
    dalipipe's decoder (`graph.decode`, or `graph.decode_crop` with windows drawn by
    DALI), uint8 HWC images."""
    from nvidia.dali import fn, pipeline_def, types

    from dalipipe import graph, sampling
    from dalipipe.options import Options

    resolved = Options(device=device, **(options or {}))

    @pipeline_def(batch_size=batch_size, num_threads=threads,
                  device_id=0 if device == "gpu" else None, prefetch_queue_depth=2)
    def decode():
        data, _ = fn.readers.file(files=list(files))
        if not crop:
            return graph.decode(resolved, data)
        shape = fn.peek_image_shape(data, dtype=types.FLOAT)
        random = fn.random.uniform(range=[0.0, 1.0], shape=[sampling.NUM_RANDOM])
        window = sampling.random_resized_crop_window(shape[0], shape[1], random,
                                                     ops=sampling.dali_ops())
        return graph.decode_crop(resolved, data, window)

    return decode()


def ceiling_name(device, crop=False):
    """The result name of `decode_ceiling`: "dali_decode_only_gpu", "dali_crop_decode_only_gpu"..."""
    return f"dali_{'crop_' if crop else ''}decode_only_{device}"


def decoders_used(files, labels, *, workload, batch_size, threads, seed, options=None,
                  loader="dalipipe_native_gpu_on_device"):
    """Which decoders nvImageCodec used for one epoch of `loader` (a dalipipe loader;
    by default the GPU graph) on the workload: `{"decoders": {name: samples},
    "cpu_decoded": n, ...}`.

    Reads nvImageCodec's log, which names the decoder of each sample at log level 5
    ("libjpeg_turbo_decoder process #3" for the CPU's): the process must start with
    `DALI_NVIMGCODEC_LOG_LEVEL=5` (`run_task_in_subprocess` with the task's `env`).
    """
    import collections
    import re

    from dalipipe import codecs
    from dalipipe.utils import captured_stderr

    make = loaders_lib.LOADERS[loader]
    with captured_stderr() as captured:  # no check: its own decoder would log too
        measured = make(files, labels, workload=workload, batch_size=batch_size,
                        threads=threads, seed=seed, **{"check": None, **(options or {})})
        count = sum(len(batch[0]) for batch in measured.epoch())
    named = collections.Counter(re.findall(r"(\w+_decoder) process #", captured.text))
    return {"loader": "decoders_used", "workload": workload, "images": count,
            "crop_setup": codecs.crop_setup() if "gpu" in loader else codecs.ROI_DECODE,
            "decoders": dict(named),
            "cpu_decoded": named.get("libjpeg_turbo_decoder", 0),
            "refusals": captured.text.count("ROI decode with fancy upsampling"),
            "log_level": os.environ.get("DALI_NVIMGCODEC_LOG_LEVEL")}


def sweep(task):
    """`measure` for each of the task's `points` (`{"workload", "options"}` dicts) in
    this one process, without `rebuild`: `{"loader": "sweep", "points": [results]}`.

    The points share the process, so its start and CUDA's initialisation are paid
    once; GPU memory in use is the device's after each point (DALI keeps its memory
    pools, so it is the high-water mark of the points so far).
    """
    points = []
    for point in task["points"]:
        found = measure({**task, "kind": "measure", "rebuild": False, **point})
        points.append(found)
    return {"loader": "sweep", "workload": "sweep", "threads": task["threads"],
            "points": points}


def measure_in_turn(task):
    """`measure` for each of the task's `tasks` (whole measurement tasks, of one loader)
    in this one process, in turn: `{"loader", "workload": "in turn", "results":
    [results]}`. One that raises gives its own error result (`error_line`, the
    traceback to stderr) and the next runs. The later measurements share the process
    with the earlier ones: its start-up is paid once, and its peak memory and what
    the earlier ones built are theirs too.
    """
    import traceback

    results = []
    for one in task["tasks"]:
        try:
            results.append(measure(one))
        except Exception as e:  # recorded; the next workload still runs
            traceback.print_exc()
            results.append({"loader": one["loader"], "workload": one["workload"],
                            "error": error_line(e)})
    return {"loader": task["loader"], "workload": "in turn", "results": results}


def cpu_model():
    """The CPU's model name from /proc/cpuinfo, else what `platform` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_name():
    """"name, driver" of each GPU, a line each (NVML), else torch's name of GPU 0, else "none"."""
    driver, gpus = nvidia_gpus()
    if gpus:
        return "\n".join(f"{name}, {driver}" for name, _ in gpus)
    if importlib.util.find_spec("torch") is not None:
        import torch

        if torch.cuda.is_available():
            return f"{torch.cuda.get_device_name(0)} (torch)"
    return "none"


def machine_info():
    """CPU model, cores, GPU, /dev/shm size and library versions (with the nvJPEG that
    nvImageCodec loads and the GPU crop set-up chosen for it, `dalipipe.codecs`).

    `versions["dali"]` is the version of whichever DALI wheel is installed (CUDA 12
    or CUDA 13 build); packages not installed have the version None.
    """
    import importlib.metadata as metadata

    versions = {}
    for package in ("nvidia-dali-cuda120", "nvidia-dali-cuda130",
                    "nvidia-dali-tf-plugin-cuda120", "tensorflow", "keras", "torch",
                    "torchvision", "jax", "jaxlib", "numpy", "pillow"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    versions["dali"] = versions["nvidia-dali-cuda120"] or versions["nvidia-dali-cuda130"]
    from dalipipe import codecs

    nvjpeg = codecs.nvjpeg_version()  # the one nvImageCodec loads, and the crop set-up for it
    versions["nvjpeg"] = None if nvjpeg is None else ".".join(map(str, nvjpeg))
    versions["crop_setup"] = codecs.crop_setup(nvjpeg)
    try:  # where torch DataLoader workers pass their batches
        dev_shm_gb = round(shutil.disk_usage("/dev/shm").total / 1e9, 2)
    except OSError:
        dev_shm_gb = None
    return {
        "cpu": cpu_model(),
        "cores": usable_cores(),
        "gpu": gpu_name(),
        "python": platform.python_version(),
        "dev_shm_gb": dev_shm_gb,
        "versions": versions,
    }


def task_name(task):
    """The result name of a task: its loader's, or the decode ceiling's."""
    if task.get("kind") == "decode":
        return ceiling_name(task.get("device"), task.get("crop", False))
    return task.get("loader", {"decoders": "decoders_used"}.get(task.get("kind"), task.get("kind")))


def one_line(text):
    """The last non-blank line of `text` (a traceback's ends with the exception), its
    spaces collapsed: an error as one readable line."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return " ".join(lines[-1].split()) if lines else ""


def error_line(error):
    """An exception as one line: `RuntimeError: message`, the message's first line."""
    message = next((line.strip() for line in str(error).splitlines() if line.strip()), "")
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def run_task_in_subprocess(task, timeout=1800):
    """Runs `measure(task)` (or the decode ceiling, `decoders_used`, `sweep` or
    `measure_in_turn`, by its "kind") in a fresh
    interpreter, with the task's `env` (a dict of environment variables) added.

    Returns:
        Its result dict, or `{"loader", "workload", "error"}` when it failed or ran
        past `timeout` seconds (then it is killed). The error is one line: the
        exception (`error_line`) where the process could report it, else the last
        line it wrote to stderr, else its exit status.
    """
    failed = {"loader": task_name(task), "workload": task.get("workload", "decode")}
    # A session of its own, so that its workers go with it when it is killed.
    process = subprocess.Popen(
        [sys.executable, "-m", "dalipipe.bench.harness"], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=child_env(TF_CPP_MIN_LOG_LEVEL="2", **task.get("env", {})), start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(json.dumps(task), timeout=timeout)
    except BaseException as e:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        if not isinstance(e, subprocess.TimeoutExpired):
            raise
        return {**failed, "error": f"no result within {round(timeout, 1):g} s (killed)"}
    lines = stdout.strip().splitlines()
    if lines:
        try:
            result = json.loads(lines[-1])
        except json.JSONDecodeError:
            result = None
        if isinstance(result, dict) and (process.returncode == 0 or "error" in result):
            return result
    status = process.returncode
    if status < 0:
        how = f"killed by signal {signal.Signals(-status).name}"
    else:
        how = f"exit status {status}"
    last = one_line(stderr) or one_line(stdout)
    return {**failed, "error": f"{last} ({how})" if last else how}


def _main():
    import warnings

    warnings.filterwarnings("ignore")
    task = json.loads(sys.stdin.read())
    try:
        result = _run(task)
    except Exception as e:  # reported as one line; the traceback goes to stderr
        import traceback

        traceback.print_exc()
        print(json.dumps({"loader": task_name(task), "workload": task.get("workload", "decode"),
                          "error": error_line(e)}))
        sys.exit(1)
    print(json.dumps(result))


def _run(task):
    """The task's measurement: a result dict."""
    if task["kind"] == "decode":
        return decode_ceiling(task["files"], task["batch_size"], task["threads"],
                              task["runs"], task["device"], task.get("crop", False),
                              task.get("options"))
    if task["kind"] == "sweep":
        return sweep(task)
    if task["kind"] == "in_turn":
        return measure_in_turn(task)
    if task["kind"] == "decoders":
        return decoders_used(task["files"], task["labels"], workload=task["workload"],
                             batch_size=task["batch_size"], threads=task["threads"],
                             seed=task["seed"], options=task.get("options"),
                             loader=task.get("loader", "dalipipe_native_gpu_on_device"))
    return measure(task)


if __name__ == "__main__":
    _main()
