"""The decoder's verdicts: nvImageCodec, set up as DALI's image decoder sets it up,
decodes lists of images (a header, the top-left pixel, or the whole image) and says
which it rejects, with its own message. PIL stands in where nvImageCodec is not
installed.

Two formats are decoded in a child interpreter (`python -m dalipipe.checks.decoder`):
- JPEG 2000, because some damaged files crash the decoder (OpenJPEG, in
  nvImageCodec's OpenCV extension: a segmentation fault) rather than fail. A list
  that crashes the child is split in halves until the file that crashes it is
  alone; that file is reported as one that crashes DALI's decoder.
- TIFF of more than 8 bits per sample, because DALI decodes it with libtiff alone
  (found by the fuzz: where libtiff fails on such a file, DALI fails, while on an
  8-bit one it falls back to OpenCV's TIFF decoder, which decodes through some
  damage). The child loads nvImageCodec's extensions less OpenCV's
  (`NVIMGCODEC_EXTENSIONS_PATH`), on the CPU.
"""

import atexit
import io
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import threading

from dalipipe.calls import warn
from dalipipe.checks.structure import FORMAT_NAMES, sniff
from dalipipe.utils import captured_stderr, child_env, usable_cores

# Formats decoded in a child interpreter, and the nvImageCodec extensions left out
# there (for the CPU): DALI decodes a TIFF of more than 8 bits per sample with
# libtiff alone, failing where libtiff fails; OpenCV's decoder, which the check's
# decoder (like DALI's for 8-bit TIFF) falls back to, decodes through some damage.
_ISOLATED = {"jpeg2000": (), "tiff": ("libopencv_ext",)}
_EXTENSION_DIRS = {}

_BATCH_PIXELS = 85_000_000  # RGB: about 256 MB
_DECODERS = {}
_DECODER_LOCK = threading.Lock()
_COLOURS = re.compile(r"\x1b\[[0-9;]*m")
# OpenCV's prefix: "[ERROR:0@0.335] global loadsave.cpp:1409 imdecode_ ", and its
# source path in "OpenCV(4.13.0) /opt/src/.../grfmt_tiff.cpp:926: error: (-2:...) ".
_OPENCV = re.compile(r"^\[\s*[A-Z]+:[^\]]*\]\s*global \S+:\d+ \S+ |OpenCV\([^)]*\) \S+: error: \([^)]*\) ")


def decoder_verdicts(images, tests, *, device, device_id=0):
    """The reason DALI's decoder rejects each encoded image, or None, with the size
    it read of its header.

    nvImageCodec, as DALI sets it up on `device`, decodes a list of images at a time
    on its own threads; the images it rejects are decoded again one by one for the
    decoder's message. Without nvImageCodec, PIL decodes the "full" ones (with a
    warning) and passes the others.

    Args:
        images: encoded images, bytes.
        tests: per image, `(test, label)`: how far the decoder goes, "header" (it
            parses the header), "region" (it also decodes the top-left pixel) or
            "full" (the whole image), and the reason to give if it rejects the image
            (None: one with its own message).
        device: "cpu" or "gpu": where the decoder decodes.
        device_id: the GPU's CUDA ordinal, for `device="gpu"`. Defaults to 0.

    Returns:
        A list of `len(images)` pairs `(reason, size)`: the reason, a str, or None
        for an image it accepts; the `(width, height)` of the header the decoder
        parsed, or None (a header it cannot read, an image checked in a child
        interpreter, or PIL).
    """
    groups = {}  # the format of each group decoded in a child interpreter, else None
    nvimgcodec = _nvimgcodec()
    with captured_stderr():  # the header parses' messages are of no use here
        for i, (data, (test, _)) in enumerate(zip(images, tests)):
            groups.setdefault(_isolated_format(nvimgcodec, data, test), []).append(i)
    found = [None] * len(images)
    for kind, members in groups.items():
        some = [images[i] for i in members], [tests[i] for i in members]
        if kind is None:
            verdicts = _verdicts(*some, device=device, device_id=device_id)
        else:
            left_out = _ISOLATED[kind] if device == "cpu" else ()
            verdicts = [(reason, None) for reason in _isolated_verdicts(
                *some, device=device, device_id=device_id,
                env=child_env(**_extensions_env(left_out)))]
        for i, verdict in zip(members, verdicts):
            found[i] = verdict
    return found


def _isolated_format(nvimgcodec, data, test):
    """The key of `_ISOLATED` under which `data` is decoded in a child interpreter,
    or None: JPEG 2000, and TIFF whose samples are not 8-bit (`nvimgcodec`: the
    module, or None without it)."""
    if test == "header" or nvimgcodec is None:
        return None
    kind = sniff(data)
    if kind == "tiff":
        stream = _parse(nvimgcodec, data)
        return "tiff" if stream is not None and stream.dtype.itemsize != 1 else None
    return kind if kind in _ISOLATED else None


def _isolated_verdicts(images, tests, *, device, device_id, env):
    """The reasons of `_verdicts` in a child interpreter with the environment `env`;
    where the child crashes, the list is split until the image that crashes it is
    alone, and that image is reported so."""
    if not images:
        return []
    job = pickle.dumps((images, tests, device, device_id))
    done = subprocess.run([sys.executable, "-m", "dalipipe.checks.decoder"], input=job,
                          capture_output=True, env=env)
    if done.returncode == 0:
        return pickle.loads(done.stdout)
    if len(images) == 1:
        return [f"{FORMAT_NAMES.get(sniff(images[0]), 'image')} that crashes DALI's decoder "
                f"(exit status {done.returncode})"]
    half = len(images) // 2
    how = dict(device=device, device_id=device_id, env=env)
    return (_isolated_verdicts(images[:half], tests[:half], **how)
            + _isolated_verdicts(images[half:], tests[half:], **how))


def _extensions_env(left_out):
    """The environment variables that make nvImageCodec load its extensions less
    those named in `left_out` (a folder of links to the others, made once)."""
    if not left_out:
        return {}
    if left_out not in _EXTENSION_DIRS:
        from nvidia import nvimgcodec

        source = os.path.join(os.path.dirname(nvimgcodec.__file__), "extensions")
        folder = tempfile.mkdtemp(prefix="dalipipe-nvimgcodec-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        for name in os.listdir(source):
            if not name.startswith(left_out):
                os.symlink(os.path.join(source, name), os.path.join(folder, name))
        _EXTENSION_DIRS[left_out] = folder
    return {"NVIMGCODEC_EXTENSIONS_PATH": _EXTENSION_DIRS[left_out]}


def _verdicts(images, tests, *, device, device_id):
    """`decoder_verdicts` in this process."""
    nvimgcodec = _nvimgcodec()
    if nvimgcodec is None:
        if any(test == "full" for test, _ in tests):
            warn("nvImageCodec is not installed, so the check decodes with PIL, "
                 "which accepts some files that DALI's decoder rejects.")
        return [(_pil_verdict(data, label) if test == "full" else None, None)
                for data, (test, label) in zip(images, tests)]
    reasons = [None] * len(images)
    with _DECODER_LOCK:
        decoder, params = _decoder(nvimgcodec, device, device_id)
        with captured_stderr():  # the messages of the rare failures are read below
            parsed = [_parse(nvimgcodec, data) for data in images]
        sizes = [None if p is None else (p.width, p.height) for p in parsed]
        streams = []
        for i, (stream, (test, _)) in enumerate(zip(parsed, tests)):
            if stream is None:
                with captured_stderr() as captured:
                    _parse(nvimgcodec, images[i])
                reasons[i] = _rejected(images[i], "whose header DALI's decoder cannot read",
                                       captured.text)
            elif test == "region":
                region = nvimgcodec.Region(0, 0, 1, 1)
                streams.append((i, stream.get_sub_code_stream(region=region), 1))
            elif test == "full":
                streams.append((i, stream, stream.width * stream.height))
        for batch in _decode_batches(streams):
            with captured_stderr():  # messages about images that decode are of no use
                decoded = decoder.decode([stream for _, stream, _ in batch], params=params)
            failed = [(i, stream) for (i, stream, _), image in zip(batch, decoded) if image is None]
            del decoded
            for i, stream in failed:
                label = tests[i][1]
                if label is None:
                    with captured_stderr() as captured:
                        decoder.decode(stream, params=params)
                    label = _rejected(images[i], "that DALI's decoder rejects", captured.text)
                reasons[i] = label
    return list(zip(reasons, sizes))


def _parse(nvimgcodec, data):
    """The decoder's code stream of `data` with its header parsed, or None (also for
    a header without a sample type, which DALI rejects: "Invalid sample_type")."""
    try:
        stream = nvimgcodec.CodeStream(data)
        stream.width  # the header is parsed on the first question
        stream.dtype
    except (RuntimeError, TypeError):
        return None
    return stream


def _decode_batches(streams):
    """`(index, stream, pixels)` items in lists of at most 256 whose decoded images
    take at most about 256 MB together."""
    batch, pixels = [], 0
    for item in streams:
        if batch and (len(batch) == 256 or pixels + item[2] > _BATCH_PIXELS):
            yield batch
            batch, pixels = [], 0
        batch.append(item)
        pixels += item[2]
    if batch:
        yield batch


def _nvimgcodec():
    try:
        from nvidia import nvimgcodec
    except ImportError:
        return None
    return nvimgcodec


def _decoder(nvimgcodec, device, device_id):
    """nvImageCodec's decoder and decode parameters as DALI's image decoder sets them
    up (RGB, EXIF orientation applied), made once per process and device: on "cpu"
    its CPU-only backend, on "gpu" all of its backends on GPU `device_id`."""
    key = (device, device_id) if device == "gpu" else device
    if key not in _DECODERS:
        threads = usable_cores()
        with captured_stderr():  # its notices about the thread count
            if device == "gpu":
                decoder = nvimgcodec.Decoder(device_id=device_id, max_num_cpu_threads=threads)
            else:
                decoder = nvimgcodec.Decoder(
                    device_id=nvimgcodec.NVIMGCODEC_DEVICE_CPU_ONLY, max_num_cpu_threads=threads,
                    backends=[nvimgcodec.Backend(nvimgcodec.BackendKind.CPU_ONLY)],
                )
        params = nvimgcodec.DecodeParams(apply_exif_orientation=True,
                                         color_spec=nvimgcodec.ColorSpec.SRGB,
                                         sample_format=nvimgcodec.SampleFormat.I_RGB)
        _DECODERS[key] = decoder, params
    return _DECODERS[key]


def decoder_name(device="cpu"):
    """What decodes in the check: "nvImageCodec 0.9.0 (CPU)", or PIL's name where
    nvImageCodec is not installed."""
    nvimgcodec = _nvimgcodec()
    if nvimgcodec is None:
        import PIL

        return f"PIL {PIL.__version__} (nvImageCodec is not installed)"
    return f"nvImageCodec {nvimgcodec.__version__} ({device.upper()})"


def _rejected(data, what, text):
    """The reason for an image the decoder rejects: its format, `what`, and the
    decoder's last message in the captured `text` (for JPEG, libjpeg's error)."""
    lines = []
    for line in _COLOURS.sub("", text).splitlines():
        line = re.sub(r"^\[(WARNING|ERROR|FATAL|INFO)\]\s*", "", line.strip())
        line = _OPENCV.sub("", line)
        if line and not line.startswith("[pynvimgcodec]"):
            line = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in line)
            lines.append(re.sub(r"^\[(\w+)\]\s*", r"\1: ", line))
    detail = f" ({lines[-1]})" if lines else ""
    return f"{FORMAT_NAMES.get(sniff(data), 'image')} {what}{detail}"


def _pil_verdict(data, label):
    """The reason PIL cannot decode `data` (`label` if given), or None."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
    except Exception as e:  # PIL raises many types for bad data
        return label or f"does not decode ({type(e).__name__}: {e})"
    return None


def _serve():
    """The child interpreter of `_isolated_verdicts`: reads a pickled job on stdin,
    writes the pickled verdicts on stdout."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # what the libraries print goes to stderr
    images, tests, device, device_id = pickle.loads(sys.stdin.buffer.read())
    verdicts = _verdicts(images, tests, device=device, device_id=device_id)
    out.write(pickle.dumps([reason for reason, _ in verdicts]))
    out.close()


if __name__ == "__main__":
    _serve()
