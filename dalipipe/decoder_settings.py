"""The `decoder` option: the keyword arguments of DALI's GPU decoders that it may set,
with DALI's names and ranges, and its check.

`decoder` is a mapping of `fn.decoders.image` arguments that apply only to the
`"mixed"` (GPU) backend, as DALI 2.4's documentation of each says: where and with
which buffers nvJPEG decodes, never the pixels it gives. So `decoder` is not in the
resume fingerprint, and a graph on the CPU passes none of them. dalipipe gives the
same arguments to `fn.decoders.image` and `fn.decoders.image_slice` (the crop's
decode), so only the arguments both take are here (`tests/test_codecs.py` checks
each against DALI's schemas). Pure Python: DALI is not imported.

Also here: the preallocation hints computed from the image sizes that the check
read (`decoder_hints`, capped by area: `capped_hints`), and what the GPU memory of
the decoder's buffers and the outputs comes to (`gpu_memory`, `gpu_memory_line`).
"""

import math
from collections.abc import Mapping

import numpy as np

from dalipipe.utils import is_int, is_number

_INT32_MAX, _UINT32_MAX = 2**31 - 1, 2**32 - 1

# name -> (what it takes, in words; its largest value or None for a flag or a share).
# Each is DALI's argument of the same name; DALI's defaults apply to those not given.
DECODER_ARGUMENTS = {
    "hw_decoder_load": ("a number in [0, 1], the share of JPEG decoding given to the "
                        "hardware decoder", None),
    "preallocate_width_hint": ("a non-negative integer (pixels): the hardware decoder's "
                               "buffer width", _INT32_MAX),
    "preallocate_height_hint": ("a non-negative integer (pixels): the hardware decoder's "
                                "buffer height", _INT32_MAX),
    "device_memory_padding": ("a non-negative integer (bytes): nvJPEG's GPU buffer slack",
                              _INT32_MAX),
    "host_memory_padding": ("a non-negative integer (bytes): nvJPEG's pinned host buffer "
                            "slack", _INT32_MAX),
    "device_memory_padding_jpeg2k": ("a non-negative integer (bytes): nvJPEG2k's GPU "
                                     "buffer slack", _INT32_MAX),
    "host_memory_padding_jpeg2k": ("a non-negative integer (bytes): nvJPEG2k's pinned host "
                                   "buffer slack", _INT32_MAX),
    "hybrid_huffman_threshold": ("a non-negative integer (pixels): larger images use "
                                 "nvJPEG's hybrid Huffman decoder", _UINT32_MAX),
    "affine": ("True or False: each decoder thread tied to one CPU core", None),
}
# Arguments of the decoders that `decoder` may not set, and why.
REFUSED = {
    "device": "dalipipe sets it from `device`",
    "output_type": "dalipipe sets it from `color_mode`",
    "jpeg_fancy_upsampling": "dalipipe sets it, so that both devices decode alike",
    "dtype": "it changes the pixels (dalipipe decodes to uint8)",
    "use_fast_idct": "it changes the pixels",
    "adjust_orientation": "it changes the pixels",
}


def check_decoder(decoder):
    """`decoder` as a plain dict with canonical types (None stays None), or ValueError
    naming the key and the value received."""
    if decoder is None:
        return None
    if not isinstance(decoder, Mapping):
        raise ValueError(
            "`decoder` must be a dict of DALI's GPU decoder arguments (`fn.decoders.image`), "
            f"e.g. {{'hw_decoder_load': 0.9}}, or None. Received: decoder={decoder!r}"
        )
    checked = {}
    for key, value in decoder.items():
        received = f"Received: decoder={dict(decoder)!r}"
        if key in REFUSED:
            raise ValueError(f"`decoder` cannot set {key!r}: {REFUSED[key]}. {received}")
        if key not in DECODER_ARGUMENTS:
            raise ValueError(
                f"`decoder` takes the arguments of DALI's GPU decoder {tuple(DECODER_ARGUMENTS)}"
                f"; {key!r} is not one of them. {received}"
            )
        what, largest = DECODER_ARGUMENTS[key]
        if key == "affine":
            valid = isinstance(value, (bool, np.bool_))
        elif key == "hw_decoder_load":
            valid = is_number(value) and 0 <= value <= 1
        else:
            valid = is_int(value) and 0 <= value <= largest
        if not valid:
            raise ValueError(f"`decoder[{key!r}]` must be {what}. {received}")
        checked[key] = (bool(value) if key == "affine" else
                        float(value) if key == "hw_decoder_load" else int(value))
    return checked


# DALI's default share of JPEG decoding given to the hardware decoder (DALI 2.x).
DALI_HW_DECODER_LOAD = 0.65
# The largest area (pixels) of the hints computed from the image sizes: a full-HD frame
# (1920 x 1080) fits. The hardware decoder preallocates `batch * hw_decoder_load`
# images of the hinted size per pipeline: at batch 256, 0.65 and 3 channels, about
# 1 GiB; two sides capped at 4,096 each would allow 8 GiB.
HINT_AREA_LIMIT = 2**21
_HINTS = ("preallocate_width_hint", "preallocate_height_hint")


def decoder_hints(options, sizes, *, percentile=99, max_area=HINT_AREA_LIMIT):
    """`options` with the hardware decoder's preallocation hints that `decoder` does
    not set (`preallocate_width_hint`, `preallocate_height_hint`) set from `sizes`,
    the `(width, height)` of the images the check read: the `percentile`th percentile
    of the widths and of the heights (nearest rank: a width and a height that some
    image has), their area at most `max_area` pixels (`capped_hints`). Unchanged
    without sizes (no hint: DALI's 0).

    The hardware decoder preallocates a batch of images of the hinted size, and an
    image larger than the hint still decodes (its buffer grows): the hint follows the
    typical large image, not the single largest (one 6,000 x 6,000 photograph among a
    million would cost gigabytes per pipeline), and a hint a user gives is kept as
    given.
    """
    if not sizes:
        return options

    def hint(values):
        return int(np.percentile(values, percentile, method="inverted_cdf"))

    given = options.decoder or {}
    width, height = capped_hints(hint([w for w, _ in sizes]), hint([h for _, h in sizes]),
                                 max_area, given.get(_HINTS[0]), given.get(_HINTS[1]))
    return options.replace(decoder={_HINTS[0]: width, _HINTS[1]: height, **given})


def capped_hints(width, height, max_area=HINT_AREA_LIMIT, given_width=None,
                 given_height=None):
    """`(width, height)` of the hints, their area at most `max_area` pixels.

    Both computed: scaled down together, keeping their aspect ratio. One given by the
    user (`given_width`, `given_height`, kept as given): the other at most
    `max_area // given`, and at least 1.

    Args:
        width, height: the hints computed from the image sizes (ints).
        max_area: the largest area in pixels.
        given_width, given_height: the hints the user set in `decoder`, or None.

    Returns:
        A pair of ints: the hints that are not given, capped; a given one unchanged.
    """
    if given_width is not None:
        return given_width, min(height, max(1, max_area // max(given_width, 1)))
    if given_height is not None:
        return min(width, max(1, max_area // max(given_height, 1))), given_height
    if width * height <= max_area:
        return width, height
    scale = math.sqrt(max_area / (width * height))
    width, height = max(1, math.floor(width * scale)), max(1, math.floor(height * scale))
    while width * height > max_area:  # a rounding above the bound
        width, height = (width - 1, height) if width >= height else (width, height - 1)
    return width, height


def gpu_memory(*, batch_size, width_hint, height_hint, hw_decoder_load=DALI_HW_DECODER_LOAD,
               num_pipelines=1, prefetch_queue_depth=2, sample_bytes=0):
    """The GPU memory, in bytes, of the buffers that grow with the batch and the hints,
    for images no larger than the hints: an upper bound of those buffers, which
    leaves out the CUDA context, nvJPEG's paddings, the framework's memory and the
    buffers of an image larger than the hints (they grow for it).

    Args:
        batch_size: samples per DALI batch.
        width_hint, height_hint: the hardware decoder's hints (pixels).
        hw_decoder_load: the share of each batch given to the hardware decoder.
        num_pipelines: the GPU pipelines alive together (training, validation, one
            per replica).
        prefetch_queue_depth: the batches each pipeline holds ahead.
        sample_bytes: bytes of one sample's outputs (image, masks, ...).

    Returns:
        dict of bytes: `"hardware decoder"` (its preallocated batch of
        `ceil(batch_size * hw_decoder_load)` 3-channel images at the hints),
        `"decoded"` (each queued batch's images decoded at the hints, before the
        resize), `"outputs"` (each queued batch's outputs), and `"total"`, all for
        `num_pipelines` pipelines.
    """
    image = int(width_hint) * int(height_hint) * 3
    parts = {
        "hardware decoder": math.ceil(batch_size * hw_decoder_load) * image,
        "decoded": prefetch_queue_depth * batch_size * image,
        "outputs": prefetch_queue_depth * batch_size * int(sample_bytes),
    }
    parts = {name: value * num_pipelines for name, value in parts.items()}
    parts["total"] = sum(parts.values())
    return parts


def gpu_memory_line(options, num_pipelines, sample_bytes=0):
    """The line that the verbose dataset prints about the GPU memory of `options`
    (`gpu_memory`), or None without both hints (no check: DALI sizes the buffers as
    images come)."""
    decoder = options.decoder or {}
    width, height = decoder.get(_HINTS[0]), decoder.get(_HINTS[1])
    if not width or not height:
        return None
    load = decoder.get("hw_decoder_load", DALI_HW_DECODER_LOAD)
    memory = gpu_memory(batch_size=options.batch_size or 1, width_hint=width,
                        height_hint=height, hw_decoder_load=load,
                        num_pipelines=num_pipelines,
                        prefetch_queue_depth=options.prefetch_queue_depth,
                        sample_bytes=sample_bytes)
    gib = {name: value / 2**30 for name, value in memory.items()}
    return (f"GPU memory for images up to the decoder's hints ({width}x{height}): at most "
            f"{gib['total']:.2f} GiB in {num_pipelines} pipeline(s) (hardware decoder "
            f"{gib['hardware decoder']:.2f} at hw_decoder_load={load:g}, decoded images "
            f"{gib['decoded']:.2f}, outputs {gib['outputs']:.2f}).")
