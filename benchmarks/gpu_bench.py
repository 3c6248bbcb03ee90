"""GPU loader benchmark without TensorFlow: dalipipe's DALI graph against PyTorch loaders.

Runs on a machine with DALI, PyTorch and torchvision and a CUDA GPU (no TensorFlow,
pandas, scikit-image or scikit-learn needed). Makes its own JPEGs with NumPy and PIL,
then times, on the same files and the same work (decode -> resize to 224x224 ->
ImageNet normalize, float32):

- dalipipe on the GPU (outputs copied to the host by `ImagePipeline.epoch`, and kept
  on the GPU), also with `augment=True` (random-resized crop and flip);
- a torch `DataLoader` over all cores decoding with `torchvision.io.decode_jpeg` on
  the CPU;
- batched `torchvision.io.decode_jpeg(device="cuda")`, resize and normalize on the GPU;
- DALI GPU decode alone (the ceiling);
- dalipipe on the CPU, for reference.

Images/s is N divided by the median time of the timed passes over the N images, after
one warm-up pass. Every section records its result, `{"skipped": reason}` or
`{"error": message}` in the JSON, which is rewritten after each section; sections that
need something absent (torch, a GPU) are skipped, so the script also runs on a
CPU-only machine as a rehearsal.

    python benchmarks/gpu_bench.py [--num-images 2000] [--batch-size 128]
        [--out benchmarks/results] [--data DIR] [--quick]
"""

import argparse
import datetime
import gc
import importlib
import json
import math
import multiprocessing
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import numpy as np

IMAGE_SIZE = (224, 224)
# ImageNet statistics on the [0, 1] scale; dalipipe's "imagenet" is the same on [0, 255].
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
JPEG_EXTENSIONS = (".jpg", ".jpeg")
NUM_CLASSES = 4
JPEG_QUALITY = 90
# Synthetic image sides, uniform: means about 400 x 350 like ImageNet train.
WIDTH_RANGE = (250, 550)
HEIGHT_RANGE = (220, 480)
# Standard deviation of the multi-scale texture; sets the bytes per image (~100 KB).
TEXTURE_AMPLITUDE = 24.0
BASELINE = "dalipipe_gpu_host"
# The checkout this script belongs to: its dalipipe is the one measured.
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Skip(Exception):
    """A section cannot run here (a package or the GPU is missing)."""


class SectionTimeout(Exception):
    """A section ran past its time limit."""


# ---------------------------------------------------------------------------------------
# Data


def _upsample(array, width, height, resample):
    from PIL import Image

    return np.stack(
        [np.asarray(Image.fromarray(np.ascontiguousarray(array[..., c]), mode="F")
                    .resize((width, height), resample))
         for c in range(array.shape[-1])],
        axis=-1,
    )


def synthesize_jpeg(path, *, seed, index):
    """Writes one photograph-like JPEG: gradients, blobs, shapes, multi-scale texture.

    Deterministic for (`seed`, `index`).

    Returns:
        (width, height, bytes) of the written file.
    """
    from PIL import Image, ImageDraw, ImageFilter

    rng = np.random.default_rng([seed, index])
    width = int(rng.integers(WIDTH_RANGE[0], WIDTH_RANGE[1] + 1))
    height = int(rng.integers(HEIGHT_RANGE[0], HEIGHT_RANGE[1] + 1))
    y = np.linspace(0, 1, height, dtype=np.float32)[:, None, None]
    x = np.linspace(0, 1, width, dtype=np.float32)[None, :, None]
    image = (rng.uniform(40, 215, 3).astype(np.float32)
             + rng.uniform(-100, 100, 3).astype(np.float32) * x
             + rng.uniform(-100, 100, 3).astype(np.float32) * y)
    blobs = rng.uniform(-60, 60, (int(rng.integers(3, 9)), int(rng.integers(3, 9)), 3))
    image = image + _upsample(blobs.astype(np.float32), width, height, Image.BICUBIC)
    picture = Image.fromarray(np.clip(image, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(picture)
    for _ in range(int(rng.integers(4, 12))):
        x0, x1 = sorted(int(v) for v in rng.integers(0, width, 2))
        y0, y1 = sorted(int(v) for v in rng.integers(0, height, 2))
        color = tuple(int(v) for v in rng.integers(0, 256, 3))
        kind = int(rng.integers(3))
        if kind == 0:
            draw.ellipse((x0, y0, x1, y1), fill=color)
        elif kind == 1:
            draw.rectangle((x0, y0, x1, y1), fill=color)
        else:
            draw.polygon([(int(rng.integers(0, width)), int(rng.integers(0, height)))
                          for _ in range(3)], fill=color)
    pixels = np.asarray(picture.filter(ImageFilter.GaussianBlur(1.0))).astype(np.float32)
    for scale in (1, 2, 4, 8):  # grey fine grain, colored coarser texture
        layer = rng.normal(0, TEXTURE_AMPLITUDE,
                           (height // scale + 1, width // scale + 1, 1 if scale == 1 else 3))
        layer = layer.astype(np.float32)
        pixels += layer[:height, :width] if scale == 1 else _upsample(layer, width, height,
                                                                      Image.BILINEAR)
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(
        path, format="JPEG", quality=JPEG_QUALITY)
    return width, height, os.path.getsize(path)


def _synthesize_job(job):
    path, seed, index = job
    return synthesize_jpeg(path, seed=seed, index=index)


def make_jpeg_dataset(directory, *, num_images, num_classes=NUM_CLASSES, seed=0, workers=None):
    """Writes `num_images` synthetic JPEGs as `directory/class_<c>/img_<i>.jpg`.

    One process per core (spawned, so that none inherits CUDA or DALI threads); threads
    where processes cannot be started.

    Returns:
        How the images were made: "processes" or "threads".
    """
    for c in range(num_classes):
        os.makedirs(os.path.join(directory, f"class_{c}"), exist_ok=True)
    jobs = [(os.path.join(directory, f"class_{i % num_classes}", f"img_{i:06d}.jpg"), seed, i)
            for i in range(num_images)]
    workers = workers or os.cpu_count() or 1
    try:
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            list(pool.map(_synthesize_job, jobs, chunksize=max(1, len(jobs) // (8 * workers))))
        return "processes"
    except (OSError, BrokenProcessPool) as e:
        print(f"[gpu_bench] process pool failed ({type(e).__name__}: {e}); using threads",
              flush=True)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(_synthesize_job, jobs))
    return "threads"


def list_jpegs(directory):
    """The JPEG files under `directory`, in sorted order."""
    found = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found.extend(os.path.join(root, f) for f in sorted(files)
                     if f.lower().endswith(JPEG_EXTENSIONS) and not f.startswith("."))
    return found


def describe_files(paths):
    """Mean width, height and bytes of the images (PIL reads the headers only)."""
    from PIL import Image

    sizes = []
    for path in paths:
        with Image.open(path) as image:
            sizes.append(image.size)
    sizes = np.asarray(sizes, dtype=np.float64)
    return {
        "num_images": len(paths),
        "mean_width": round(float(sizes[:, 0].mean()), 1),
        "mean_height": round(float(sizes[:, 1].mean()), 1),
        "mean_bytes": round(float(np.mean([os.path.getsize(p) for p in paths])), 1),
    }


# ---------------------------------------------------------------------------------------
# Timing


def batch_stats(images):
    """Shape, dtype, mean and std of one batch (a NumPy array), to compare loaders."""
    images = np.asarray(images)
    as_float = images.astype(np.float64)
    return {"batch_shape": list(images.shape), "dtype": str(images.dtype),
            "mean": round(float(as_float.mean()), 4), "std": round(float(as_float.std()), 4)}


def time_passes(run_pass, *, passes, expected=None):
    """One warm-up pass, then `passes` timed passes of `run_pass(check)`.

    `run_pass(check)` runs over the images once and returns (images processed, stats of
    its first batch when `check` is true, else None).

    Returns:
        The result fields: images/s from the median pass, the times, the warm-up time,
        the images per pass and the first-batch stats.
    """
    start = time.perf_counter()
    count, stats = run_pass(True)
    warmup = time.perf_counter() - start
    if expected is not None and count != expected:
        raise RuntimeError(f"the warm-up pass gave {count} images, expected {expected}")
    times = []
    for _ in range(passes):
        start = time.perf_counter()
        n, _ = run_pass(False)
        times.append(time.perf_counter() - start)
        if n != count:
            raise RuntimeError(f"a timed pass gave {n} images, the warm-up pass {count}")
    median = statistics.median(times)
    return {
        "images_per_s": round(count / median, 1),
        "run_seconds": [round(t, 4) for t in times],
        "warmup_seconds": round(warmup, 4),
        "images_per_pass": count,
        "first_batch": stats,
    }


def _alarm(signum, frame):
    raise SectionTimeout("section timed out")


def run_section(name, function, *, limit_s):
    """Runs `function()`; returns its result dict, or one with "skipped" or "error"."""
    print(f"[gpu_bench] {name} ...", flush=True)
    start = time.perf_counter()
    use_alarm = hasattr(signal, "SIGALRM") and limit_s > 0
    if use_alarm:
        previous = signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(max(1, int(limit_s)))
    try:
        result = function()
    except Skip as e:
        result = {"skipped": str(e)}
    except SectionTimeout:
        result = {"error": f"SectionTimeout: no result within {int(limit_s)} s"}
    except BaseException as e:  # noqa: BLE001 - a failed section must not end the run
        if isinstance(e, KeyboardInterrupt):
            raise
        result = {"error": f"{type(e).__name__}: {e}",
                  "traceback": traceback.format_exc(limit=-8).splitlines()[-30:]}
    finally:
        if use_alarm:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
        gc.collect()
    result["section_seconds"] = round(time.perf_counter() - start, 2)
    state = ("skipped: " + result["skipped"] if "skipped" in result
             else "ERROR: " + result["error"] if "error" in result
             else f"{result['images_per_s']:.1f} images/s" if "images_per_s" in result
             else "done")
    print(f"[gpu_bench] {name}: {state} ({result['section_seconds']} s)", flush=True)
    return result


# ---------------------------------------------------------------------------------------
# Loaders


def _require_dali_gpu():
    try:
        from dalipipe.pipeline import dali_gpu_count
    except ImportError as e:
        raise Skip(f"dalipipe or DALI cannot be imported: {e}") from e
    try:
        count = dali_gpu_count()
    except ImportError as e:
        raise Skip(f"DALI is not installed: {e}") from e
    if count == 0:
        raise Skip("DALI sees no CUDA GPU")


def _require_torch_cuda():
    try:
        import torch
        import torchvision  # noqa: F401
    except ImportError as e:
        raise Skip(f"torch/torchvision not installed: {e}") from e
    if not torch.cuda.is_available():
        raise Skip("torch.cuda.is_available() is False")


def _cuda_synchronize():
    """Waits for all GPU work of this process, where torch is there to ask."""
    try:
        import torch
    except ImportError:
        return
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def _dalipipe(directory, cfg, *, device, augment, num_threads=None):
    try:
        from dalipipe import make_dali_pipeline
    except ImportError as e:
        raise Skip(f"dalipipe or DALI cannot be imported: {e}") from e
    return make_dali_pipeline(
        directory, device=device, image_size=IMAGE_SIZE, batch_size=cfg.batch_size,
        shuffle=False, seed=0, augment=augment, normalization="imagenet",
        num_threads=num_threads,
    )


def bench_dalipipe_host(cfg, *, device, augment, num_threads=None):
    """dalipipe through `ImagePipeline.epoch`: NumPy batches on the host."""
    if device == "gpu":
        _require_dali_gpu()
    else:
        try:
            importlib.import_module("nvidia.dali")
        except ImportError as e:
            raise Skip(f"DALI is not installed: {e}") from e
    pipe = _dalipipe(cfg.data_dir, cfg, device=device, augment=augment, num_threads=num_threads)
    epoch = [0]

    def run_pass(check):
        count, stats = 0, None
        for images, _labels in pipe.epoch(epoch[0]):
            if check and stats is None:
                stats = batch_stats(images)
            count += len(images)
        epoch[0] += 1
        return count, stats

    result = time_passes(run_pass, passes=cfg.passes, expected=cfg.num_images)
    result["num_threads"] = pipe.num_threads
    return result


def bench_dalipipe_on_device(cfg, *, augment):
    """dalipipe's GPU graph run directly: outputs stay in GPU memory (no host copy)."""
    _require_dali_gpu()
    image_pipeline = _dalipipe(cfg.data_dir, cfg, device="gpu", augment=augment)
    epoch = [0]

    def run_pass(check):
        inputs = image_pipeline.epoch_inputs(epoch[0])
        epoch[0] += 1
        count, stats = 0, None
        # Host-synchronous per batch: each batch is ready in GPU memory, not copied.
        for images, _labels in image_pipeline.run(*inputs, copy_to_host=False):
            if check and stats is None:
                stats = batch_stats(images.as_cpu().as_tensor())
            count += len(images)
        _cuda_synchronize()
        return count, stats

    result = time_passes(run_pass, passes=cfg.passes, expected=cfg.num_images)
    result["num_threads"] = image_pipeline.num_threads
    return result


def bench_dali_decode_only(cfg):
    """`fn.readers.file` + `fn.decoders.image(device="mixed")`: the GPU decode ceiling.

    The reader never ends, so a pass is ceil(N / batch_size) iterations, and the
    passes are consecutive windows of one long run (the pipeline's prefetching never
    idles between them).
    """
    _require_dali_gpu()
    from nvidia.dali import fn, pipeline_def, types

    files = cfg.files
    threads = os.cpu_count() or 1

    @pipeline_def(batch_size=cfg.batch_size, num_threads=threads, device_id=0, seed=0,
                  prefetch_queue_depth=2)
    def decode_only():
        encoded, _ = fn.readers.file(files=files, random_shuffle=False, name="Reader")
        return fn.decoders.image(encoded, device="mixed", output_type=types.RGB)

    pipe = decode_only()
    pipe.build()
    iterations = math.ceil(len(files) / cfg.batch_size)
    stats = {}

    def window(check):
        count = 0
        for i in range(iterations):
            (images,) = pipe.run()
            if check and i == 0:
                shapes = [tuple(s) for s in images.shape()]
                stats.update(batch_size=len(shapes), layout="HWC uint8, ragged",
                             mean_height=round(float(np.mean([s[0] for s in shapes])), 1),
                             mean_width=round(float(np.mean([s[1] for s in shapes])), 1))
            count += len(images)
        _cuda_synchronize()
        return count

    start = time.perf_counter()
    count = window(True)
    marks = [time.perf_counter()]
    for _ in range(cfg.passes):
        window(False)
        marks.append(time.perf_counter())
    times = [b - a for a, b in zip(marks, marks[1:])]
    return {
        "images_per_s": round(count / statistics.median(times), 1),
        "run_seconds": [round(t, 4) for t in times],
        "warmup_seconds": round(marks[0] - start, 4),
        "images_per_pass": count,
        "first_batch": stats,
        "num_threads": threads,
        "timing": "consecutive windows of one run",
    }


def bench_torchvision_gpu(cfg, *, device="cuda"):
    """Files read by a thread pool; batched `decode_jpeg(device="cuda")`; resize and
    normalize on the GPU; NCHW float32 batches left on the GPU.

    `device="cpu"` runs the same code on the CPU, to rehearse it without a GPU.
    """
    if device == "cuda":
        _require_torch_cuda()
    import torch
    from torchvision.io import ImageReadMode, decode_jpeg
    from torchvision.transforms.v2 import functional as F

    device = torch.device(device)
    mean = torch.tensor(IMAGENET_MEAN, device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor(IMAGENET_STD, device=device).view(1, 3, 1, 1) * 255
    size = list(IMAGE_SIZE)
    batches = [cfg.files[i:i + cfg.batch_size] for i in range(0, len(cfg.files), cfg.batch_size)]
    threads = min(32, os.cpu_count() or 1)

    def read(path):
        return torch.from_numpy(np.fromfile(path, dtype=np.uint8))

    with ThreadPoolExecutor(max_workers=threads) as readers, \
            ThreadPoolExecutor(max_workers=1) as prefetcher:

        def read_batch(paths):
            return list(readers.map(read, paths))

        def run_pass(check):
            count, stats = 0, None
            pending = prefetcher.submit(read_batch, batches[0])
            for b in range(len(batches)):
                data = pending.result()
                if b + 1 < len(batches):
                    pending = prefetcher.submit(read_batch, batches[b + 1])
                decoded = decode_jpeg(data, mode=ImageReadMode.RGB, device=device)
                images = torch.stack([F.resize(image.float(), size, antialias=True)
                                      for image in decoded])
                images = (images - mean) / std
                if check and stats is None:
                    stats = batch_stats(images.cpu().numpy())
                count += images.shape[0]
            if device.type == "cuda":
                torch.cuda.synchronize()
            return count, stats

        result = time_passes(run_pass, passes=cfg.passes, expected=cfg.num_images)
    result["read_threads"] = threads
    return result


_TORCH = {}


def _torch_modules():
    """torch, decode_jpeg, ImageReadMode and the v2 functional module, imported once."""
    if not _TORCH:
        import torch
        from torchvision.io import ImageReadMode, decode_jpeg
        from torchvision.transforms.v2 import functional as F

        _TORCH.update(torch=torch, decode_jpeg=decode_jpeg, mode=ImageReadMode.RGB, F=F)
    return _TORCH


class JpegFiles:
    """Map-style dataset for `torch.utils.data.DataLoader`: decode, resize, normalize.

    A plain class at module level (no torch import here) so that spawned workers can
    unpickle it. With `uint8=True` it returns the resized uint8 image and leaves the
    normalization to the main process.
    """

    def __init__(self, paths, *, uint8=False):
        self.paths = list(paths)
        self.uint8 = uint8

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        t = _torch_modules()
        data = t["torch"].from_numpy(np.fromfile(self.paths[index], dtype=np.uint8))
        image = t["decode_jpeg"](data, mode=t["mode"])
        image = t["F"].resize(image, list(IMAGE_SIZE), antialias=True)
        if self.uint8:
            return image
        image = t["F"].to_dtype(image, t["torch"].float32, scale=True)
        return t["F"].normalize(image, list(IMAGENET_MEAN), list(IMAGENET_STD))


def bench_torch_dataloader(cfg, *, uint8=False):
    """torch `DataLoader`, one worker per core (spawned), decoding on the CPU."""
    try:
        import torch
        import torchvision  # noqa: F401
    except ImportError as e:
        raise Skip(f"torch/torchvision not installed: {e}") from e
    workers = os.cpu_count() or 1
    loader = torch.utils.data.DataLoader(
        JpegFiles(cfg.files, uint8=uint8), batch_size=cfg.batch_size, shuffle=False,
        num_workers=workers, persistent_workers=True, multiprocessing_context="spawn",
        timeout=120,
    )
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1) * 255
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1) * 255

    def run_pass(check):
        count, stats = 0, None
        for images in loader:
            if uint8:
                images = (images.float() - mean) / std
            if check and stats is None:
                stats = batch_stats(images.numpy())
            count += images.shape[0]
        return count, stats

    try:
        result = time_passes(run_pass, passes=cfg.passes, expected=cfg.num_images)
    finally:
        try:  # persistent workers: stop them now rather than at garbage collection
            iterator = getattr(loader, "_iterator", None)
            if iterator is not None:
                iterator._shutdown_workers()
        except Exception:  # noqa: BLE001 - best effort
            pass
    result["num_workers"] = workers
    result["start_method"] = "spawn"
    return result


# ---------------------------------------------------------------------------------------
# Machine and report


def _version(module_name):
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # noqa: BLE001 - any import failure just means "not here"
        return f"not importable ({type(e).__name__})"
    return getattr(module, "__version__", "unknown")


def cpu_model():
    from dalipipe.bench.harness import cpu_model as harness_cpu_model

    return harness_cpu_model()


def machine_info():
    info = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "versions": {name: _version(module) for name, module in (
            ("numpy", "numpy"), ("pillow", "PIL"), ("dali", "nvidia.dali"),
            ("torch", "torch"), ("torchvision", "torchvision"), ("dalipipe", "dalipipe"))},
        "pythonpath": os.environ.get("PYTHONPATH"),
    }
    try:
        with open("/proc/meminfo") as f:
            info["memory_gib"] = round(int(f.readline().split()[1]) / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    try:
        info["dev_shm_gib"] = round(shutil.disk_usage("/dev/shm").total / 2**30, 1)
    except OSError:
        pass
    try:
        from nvidia.dali import backend

        info["dali_cuda_device_count"] = backend.GetCUDADeviceCount()
        info["dali_cuda_version"] = backend.GetCudaVersion()
        if hasattr(backend, "GetNvimgcodecVersion"):
            info["nvimgcodec_version"] = backend.GetNvimgcodecVersion()
    except Exception as e:  # noqa: BLE001
        info["dali_error"] = f"{type(e).__name__}: {e}"
    try:
        import torch

        info["torch_cuda_version"] = torch.version.cuda
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            info["gpu"] = torch.cuda.get_device_name(0)
            info["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
            info["gpu_capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
    except ImportError:
        pass
    except Exception as e:  # noqa: BLE001
        info["torch_error"] = f"{type(e).__name__}: {e}"
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
             "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True)
        info["nvidia_smi"] = smi.stdout.strip()
        banner = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=20)
        for line in banner.stdout.splitlines():
            if "CUDA Version" in line:
                info["driver_cuda_version"] = line.split("CUDA Version:")[1].split()[0]
    except (OSError, subprocess.SubprocessError) as e:
        info["nvidia_smi"] = f"unavailable ({type(e).__name__})"
    return info


def markdown_table(report):
    base = report["results"].get(BASELINE, {}).get("images_per_s")
    lines = ["| loader | work | images/s | ratio to dalipipe gpu (to host) |",
             "| --- | --- | ---: | ---: |"]
    for key, result in report["results"].items():
        label, work = result.get("label", key), result.get("work", "")
        if "images_per_s" in result:
            ips = result["images_per_s"]
            ratio = f"{ips / base:.2f}" if base else "n/a"
            lines.append(f"| {label} | {work} | {ips:,.0f} | {ratio} |")
        else:
            what = ("skipped: " + result["skipped"]) if "skipped" in result else \
                ("error: " + result.get("error", "not run"))
            what = (what.splitlines() or [""])[0].replace("|", "/")[:120]
            lines.append(f"| {label} | {work} | {what} | |")
    return "\n".join(lines)


def write_report(report, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "gpu_bench.json")
    temporary = path + ".tmp"
    with open(temporary, "w") as f:
        json.dump(report, f, indent=2, default=str)
        f.write("\n")
    os.replace(temporary, path)
    return path


# ---------------------------------------------------------------------------------------


class Config:
    def __init__(self, *, data_dir, files, batch_size, passes):
        self.data_dir = data_dir
        self.files = files
        self.num_images = len(files)
        self.batch_size = batch_size
        self.passes = passes


def sections(cfg):
    """(key, label, work, function) of every section, in running order."""
    cores = os.cpu_count() or 1
    resize = "decode, resize 224, normalize"
    return [
        (BASELINE, "dalipipe gpu (to host)", resize + "; NHWC to host",
         lambda: bench_dalipipe_host(cfg, device="gpu", augment=False)),
        ("dalipipe_gpu_device", "dalipipe gpu (on device)", resize + "; NHWC on GPU",
         lambda: bench_dalipipe_on_device(cfg, augment=False)),
        ("dali_decode_only_gpu", "DALI decode only, mixed (ceiling)", "decode only",
         lambda: bench_dali_decode_only(cfg)),
        ("torchvision_gpu_decode", "torchvision decode_jpeg(device='cuda'), batched",
         resize + "; NCHW on GPU", lambda: bench_torchvision_gpu(cfg)),
        ("torch_dataloader_cpu", f"torch DataLoader, {cores} workers, decode_jpeg CPU",
         resize + "; NCHW to host", lambda: bench_torch_dataloader(cfg)),
        ("dalipipe_gpu_augment_host", "dalipipe gpu augment=True (to host)",
         "decode, random-resized crop 224, flip, normalize; NHWC to host",
         lambda: bench_dalipipe_host(cfg, device="gpu", augment=True)),
        ("dalipipe_gpu_augment_device", "dalipipe gpu augment=True (on device)",
         "decode, random-resized crop 224, flip, normalize; NHWC on GPU",
         lambda: bench_dalipipe_on_device(cfg, augment=True)),
        ("dalipipe_cpu", f"dalipipe cpu ({cores} threads)", resize + "; NHWC to host",
         lambda: bench_dalipipe_host(cfg, device="cpu", augment=False, num_threads=cores)),
    ]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-images", type=int, default=None,
                        help="images to synthesize (default 2000; 64 with --quick)")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="batch size (default 128; 32 with --quick)")
    parser.add_argument("--passes", type=int, default=None,
                        help="timed passes after the warm-up (default 3; 1 with --quick)")
    parser.add_argument("--out", default="benchmarks/results",
                        help="folder for gpu_bench.json and gpu_bench.md")
    parser.add_argument("--data", default=None,
                        help="folder of class subfolders of JPEGs to use; synthesized "
                             "there first when it holds none (kept afterwards)")
    parser.add_argument("--quick", action="store_true", help="tiny smoke run")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic images")
    parser.add_argument("--section-timeout", type=float, default=120,
                        help="seconds after which a section is abandoned")
    parser.add_argument("--time-budget", type=float, default=280,
                        help="seconds after the start past which no further section starts")
    args = parser.parse_args(argv)
    quick = args.quick
    args.num_images = args.num_images or (64 if quick else 2000)
    args.batch_size = args.batch_size or (32 if quick else 128)
    args.passes = args.passes or (1 if quick else 3)
    for name in ("num_images", "batch_size", "passes"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    return args


def main(argv=None):
    args = parse_args(argv)
    started = time.perf_counter()
    if REPO_ROOT not in sys.path:  # `python benchmarks/gpu_bench.py` puts benchmarks/ there
        sys.path.insert(0, REPO_ROOT)
    report = {
        "benchmark": "gpu_bench",
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "settings": {"num_images": args.num_images, "batch_size": args.batch_size,
                     "passes": args.passes, "warmup_passes": 1, "quick": args.quick,
                     "image_size": list(IMAGE_SIZE), "dtype": "float32",
                     "normalization": "imagenet", "seed": args.seed},
        "machine": {},
        "data": {},
        "results": {},
    }
    out_path = write_report(report, args.out)
    report["machine"] = run_section("machine info", machine_info, limit_s=60)
    report["machine"].pop("section_seconds", None)

    temporary = None
    if args.data:
        data_dir = os.path.abspath(args.data)
    else:
        temporary = data_dir = tempfile.mkdtemp(prefix="gpu_bench_data_")
    try:
        def prepare():
            generated = None
            start = time.perf_counter()
            if not list_jpegs(data_dir):
                generated = make_jpeg_dataset(data_dir, num_images=args.num_images,
                                              seed=args.seed)
            files = list_jpegs(data_dir)
            if not files:
                raise RuntimeError(f"no JPEG files in {data_dir}")
            data = describe_files(files)
            data.update(directory=data_dir, synthesized_with=generated,
                        seconds=round(time.perf_counter() - start, 2), files=files)
            return data

        data = run_section("data", prepare, limit_s=max(args.section_timeout, 180))
        data.pop("section_seconds", None)
        files = data.pop("files", None)
        report["data"] = data
        write_report(report, args.out)
        if not files:
            print(f"[gpu_bench] no data, nothing measured: {data}", flush=True)
            return 0
        print(f"[gpu_bench] data: {data['num_images']} JPEGs in {data_dir}, mean "
              f"{data['mean_width']:.0f} x {data['mean_height']:.0f} px, "
              f"{data['mean_bytes'] / 1000:.1f} kB", flush=True)

        cfg = Config(data_dir=data_dir, files=files, batch_size=args.batch_size,
                     passes=args.passes)
        def budgeted(label, function):
            left = args.time_budget - (time.perf_counter() - started)
            if left <= 0:
                return {"skipped": f"time budget of {args.time_budget:.0f} s spent"}
            return run_section(label, function, limit_s=min(args.section_timeout, left + 30))

        for key, label, work, function in sections(cfg):
            result = budgeted(label, function)
            report["results"][key] = {"label": label, "work": work, **result}
            if key == "torch_dataloader_cpu" and "error" in result:
                # Float32 batches through shared memory may not fit a small /dev/shm.
                fallback = label + " (uint8 from workers)"
                result = budgeted(fallback, lambda: bench_torch_dataloader(cfg, uint8=True))
                report["results"]["torch_dataloader_cpu_uint8"] = {
                    "label": fallback, "work": work + "; normalize in the main process",
                    **result}
            write_report(report, args.out)
    finally:
        if temporary:
            shutil.rmtree(temporary, ignore_errors=True)

    base = report["results"].get(BASELINE, {}).get("images_per_s")
    for result in report["results"].values():
        if base and "images_per_s" in result:
            result["ratio_to_dalipipe_gpu"] = round(result["images_per_s"] / base, 3)
    report["total_seconds"] = round(time.perf_counter() - started, 1)
    table = markdown_table(report)
    report["table"] = table
    write_report(report, args.out)
    machine, data = report["machine"], report["data"]
    heading = (f"{data.get('num_images')} JPEGs (mean {data.get('mean_width')} x "
               f"{data.get('mean_height')} px, {data.get('mean_bytes', 0) / 1000:.1f} kB), "
               f"batch {args.batch_size}, median of {args.passes} after 1 warm-up pass; "
               f"{machine.get('gpu', 'no GPU')}, {machine.get('cpu_model')}, "
               f"{machine.get('cpu_count')} cores; DALI "
               f"{machine.get('versions', {}).get('dali')}")
    with open(os.path.join(args.out, "gpu_bench.md"), "w") as f:
        f.write(heading + "\n\n" + table + "\n")
    print("\n" + heading + "\n\n" + table + "\n", flush=True)
    print(f"[gpu_bench] wrote {out_path} in {report['total_seconds']} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
