"""The decoder's verdicts: nvImageCodec, set up as DALI's image decoder sets it up,
decodes lists of images (a header, the top-left pixel, or the whole image) and says
which it rejects, with its own message. PIL stands in where nvImageCodec is not
installed.
"""

import io
import re
import threading
import warnings

from dalipipe.checks.structure import FORMAT_NAMES, sniff
from dalipipe.utils import captured_stderr, usable_cores

_BATCH_PIXELS = 85_000_000  # RGB: about 256 MB
_DECODERS = {}
_DECODER_LOCK = threading.Lock()
_COLOURS = re.compile(r"\x1b\[[0-9;]*m")


def decoder_verdicts(images, tests, *, device, device_id=0, sizes=None):
    """The reason DALI's decoder rejects each encoded image, or None.

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
        sizes: None, or a list that receives per image the `(width, height)` of the
            header the decoder parsed, or None (a header it cannot read, or PIL).

    Returns:
        A list of `len(images)` reasons: str, or None for an image it accepts.
    """
    if sizes is not None:
        sizes[:] = [None] * len(images)
    nvimgcodec = _nvimgcodec()
    if nvimgcodec is None:
        if any(test == "full" for test, _ in tests):
            warnings.warn("nvImageCodec is not installed, so the check decodes with PIL, "
                          "which accepts some files that DALI's decoder rejects.", stacklevel=4)
        return [_pil_verdict(data, label) if test == "full" else None
                for data, (test, label) in zip(images, tests)]
    reasons = [None] * len(images)
    with _DECODER_LOCK:
        decoder, params = _decoder(nvimgcodec, device, device_id)
        with captured_stderr():  # the messages of the rare failures are read below
            parsed = [_parse(nvimgcodec, data) for data in images]
        if sizes is not None:
            sizes[:] = [None if p is None else (p.width, p.height) for p in parsed]
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
    return reasons


def _parse(nvimgcodec, data):
    """The decoder's code stream of `data` with its header parsed, or None."""
    try:
        stream = nvimgcodec.CodeStream(data)
        stream.width  # the header is parsed on the first question
    except RuntimeError:
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
