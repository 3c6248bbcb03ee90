"""The `decoder` option: the keyword arguments of DALI's GPU decoders that it may set,
with DALI's names and ranges, and its check.

`decoder` is a mapping of `fn.decoders.image` arguments that apply only to the
`"mixed"` (GPU) backend, as DALI 2.4's documentation of each says: where and with
which buffers nvJPEG decodes, never the pixels it gives. So `decoder` is not in the
resume fingerprint, and a graph on the CPU passes none of them. dalipipe gives the
same arguments to `fn.decoders.image` and `fn.decoders.image_slice` (the crop's
decode), so only the arguments both take are here (`tests/test_codecs.py` checks
each against DALI's schemas). Pure Python: DALI is not imported.
"""

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
