"""The structure rules: an image's format by its first bytes, and what the decoder
cannot be trusted to see in a JPEG, PNG or WebP (an end before the data does).

Pure Python: the rules read the bytes only, and say which decoder test settles the
rest (see `dalipipe.checks.decoder.decoder_verdicts`).
"""

import struct
import zlib

# Formats whose top-left pixel the decoder gives at a small fraction of a full decode
# (for PNG, WebP and JPEG 2000 any region costs nearly a full decode).
_REGION_FORMATS = ("jpeg", "tiff", "bmp", "pnm")
FORMAT_NAMES = {"jpeg": "JPEG", "png": "PNG", "bmp": "BMP", "tiff": "TIFF", "webp": "WebP",
                "jpeg2000": "JPEG 2000", "pnm": "PNM"}
_NO_TEST = (None, None)


def check_structure(data):
    """Why `data` is not a sound image by its structure, and the decoder test left.

    Args:
        data: the encoded image, bytes.

    Returns:
        `(reason, (test, label))`: the reason (a str, or None when the structure is
        sound), the cheapest decoder test that settles the rest ("header", "region"
        or "full"; None when `reason` already settles it), and the reason to give if
        the decoder rejects the image (None: the decoder's own message).
    """
    if not data:
        return "empty (0 bytes)", _NO_TEST
    kind = sniff(data)
    if kind is None:
        return f"not an image DALI decodes (starts with {data[:8]!r})", _NO_TEST
    if kind == "gif":
        return "GIF, which DALI does not decode", _NO_TEST
    if kind == "jpeg":
        return _check_jpeg(data)
    reason = {"png": _check_png, "webp": _check_webp}.get(kind, lambda d: None)(data)
    return reason, ("region" if kind in _REGION_FORMATS else "header", None)


def sniff(data):
    """The image format of `data` by its first bytes, or None.

    Returns:
        A key of `FORMAT_NAMES`, "gif", or None.
    """
    if data.startswith(b"\xff\xd8"):  # SOI; the structure check reads on
        return "jpeg"
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "gif"
    if data.startswith(b"BM") and len(data) >= 26:
        return "bmp"
    if data.startswith((b"II*\x00", b"MM\x00*")):
        return "tiff"
    if data.startswith(b"RIFF") and data[8:12] == b"WEBP":
        return "webp"
    if data.startswith((b"\x00\x00\x00\x0cjP  \r\n\x87\n", b"\xff\x4f\xff\x51")):
        return "jpeg2000"
    if len(data) > 2 and data[0:1] == b"P" and data[1:2] in b"123456" and data[2:3].isspace():
        return "pnm"
    return None


def _check_jpeg(data):
    """Walks the markers from SOI to the first scan, as the decoder does, and looks
    for the end-of-image marker after it. Returns `(reason, test)` as
    `check_structure`.

    The decoder checks every marker and table; the walk finds what a decode of the
    top-left pixel cannot see: the end of the image. A JPEG without an end-of-image
    marker is decoded in full, and reported as truncated if the decoder rejects it.
    """
    pos = 2
    while True:
        # Like the decoder, skip bytes that are not a marker (0xFF, then not 0x00).
        while pos + 1 < len(data) and (data[pos] != 0xFF or data[pos + 1] in (0x00, 0xFF)):
            pos += 1
        if pos + 1 >= len(data):
            return "truncated JPEG (ends inside its headers)", _NO_TEST
        marker = data[pos + 1]
        pos += 2
        if marker == 0x01 or 0xD0 <= marker <= 0xD7:
            continue  # markers without a length
        if marker == 0xD9:
            return "corrupt JPEG (end-of-image marker before any image data)", _NO_TEST
        if marker == 0xD8:
            return "corrupt JPEG (a second start-of-image marker)", _NO_TEST
        if pos + 2 > len(data):
            return "truncated JPEG (ends inside its headers)", _NO_TEST
        (length,) = struct.unpack(">H", data[pos: pos + 2])
        if pos + length > len(data):
            return f"corrupt or truncated JPEG (segment 0x{marker:02X} runs past the end)", _NO_TEST
        if length < 2:
            return None, ("region", None)  # the decoder says what is wrong
        if marker == 0xDA:  # start of scan: image data follows
            break
        pos += length
    if data.rfind(b"\xff\xd9", pos) < 0:
        return None, ("full", "truncated JPEG (no end-of-image marker)")
    return None, ("region", None)


def _check_png(data):
    """Walks the chunks and their CRCs from IHDR to IEND."""
    pos, first = 8, True
    while True:
        if pos + 8 > len(data):
            return "truncated PNG (no IEND chunk)"
        length, kind = struct.unpack(">I4s", data[pos: pos + 8])
        end = pos + 12 + length
        if end > len(data):
            return f"truncated PNG (chunk {kind!r} runs past the end)"
        if first and kind != b"IHDR":
            return "corrupt PNG (first chunk is not IHDR)"
        (crc,) = struct.unpack(">I", data[end - 4: end])
        if zlib.crc32(data[pos + 4: end - 4]) != crc:
            return f"corrupt PNG (checksum of chunk {kind!r})"
        if first:
            width, height = struct.unpack(">II", data[pos + 8: pos + 16])
            if width == 0 or height == 0:
                return f"corrupt PNG (size {width}x{height})"
        if kind == b"IEND":
            return None
        first, pos = False, end


def _check_webp(data):
    """Checks that the file is as long as its RIFF header says."""
    (size,) = struct.unpack("<I", data[4:8])
    if size + 8 > len(data):
        return "truncated WebP (shorter than its RIFF header says)"
    return None

