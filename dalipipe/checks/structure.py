"""The structure rules: an image's format by its first bytes, what the decoder
cannot be trusted to see in a JPEG (an end before the data does), a PNG's chunks and
image data, and the decoder test that settles the rest for each format.

Pure Python (with zlib and NumPy): the rules read the bytes only, and say which
decoder test settles the rest (see `dalipipe.checks.decoder.decoder_verdicts`). A
rule rejects a file only where DALI's decoder certainly would; where a file is
merely unusual (a PNG whose ancillary chunk has a bad checksum, say), the rule asks
for a full decode, whose verdict is the decoder's own.
"""

import struct
import zlib

import numpy as np

FORMAT_NAMES = {"jpeg": "JPEG", "png": "PNG", "bmp": "BMP", "tiff": "TIFF", "webp": "WebP",
                "jpeg2000": "JPEG 2000", "pnm": "PNM"}
# The cheapest decoder test that is exact, per format (JPEG and PNG have their own
# rules first). PNM: the top-left pixel runs the decoder's whole set-up, and its
# image data cannot fail to decode once the file is long enough. BMP: a region goes
# to another decoder (OpenCV's) than a whole image (nvImageCodec's own, as in DALI),
# so the whole image is decoded; it costs little more than a copy. TIFF, WebP and
# JPEG 2000: their compressed data fails only where it is decoded, and a region's
# decode may skip it (strips, tiles), so the whole image is decoded.
FORMAT_TESTS = {"pnm": "region", "bmp": "full", "tiff": "full", "webp": "full",
                "jpeg2000": "full"}
_NO_TEST = (None, None)
_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # per colour type
_PNG_DEPTHS = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}
_PNG_MAX_SIDE = 1_000_000  # libpng's default limit on width and height
_PNG_CRITICAL = (b"IHDR", b"PLTE", b"IDAT", b"IEND")
# The standard ancillary chunks, which libpng reads or skips; any other chunk makes
# the file unusual, to be decoded in full.
_PNG_ANCILLARY = (b"tEXt", b"zTXt", b"iTXt", b"pHYs", b"gAMA", b"cHRM", b"sRGB", b"iCCP",
                  b"sBIT", b"bKGD", b"hIST", b"tRNS", b"sPLT", b"tIME", b"eXIf")
# Adam7's passes: (first column, column step, first row, row step).
_ADAM7 = ((0, 8, 0, 8), (4, 8, 0, 8), (0, 4, 4, 8), (2, 4, 0, 4), (0, 2, 2, 4),
          (1, 2, 0, 2), (0, 1, 1, 2))


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
    if kind == "png":
        return _check_png(data)
    return None, (FORMAT_TESTS[kind], None)


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
    """Walks the chunks from IHDR to IEND as libpng reads them, and inflates the
    image data. Returns `(reason, test)` as `check_structure`.

    Rejected outright, as libpng rejects them: a file that ends before IEND, a first
    chunk that is not IHDR, a chunk type that is not four letters, a bad checksum of
    a critical chunk, an empty image. A PNG of the usual layout (IHDR, PLTE where
    needed, consecutive IDAT chunks whose deflate stream inflates to exactly the rows
    the header implies, each row with a valid filter byte, IEND last) needs only the
    decoder's header parse. Anything else is decoded in full,
    with the reason to give if the decoder rejects it: the deflate stream's damage
    (libpng stops at it while it still needs rows; after the last row, it only warns),
    a stream too short, a bad filter byte, or an unusual layout (the decoder's own
    message).
    """
    pos, chunks, unusual = 8, [], False
    while True:
        if pos + 8 > len(data):
            return "truncated PNG (no IEND chunk)", _NO_TEST
        length, kind = struct.unpack(">I4s", data[pos: pos + 8])
        end = pos + 12 + length
        if end > len(data):
            return f"truncated PNG (chunk {kind!r} runs past the end)", _NO_TEST
        if not chunks and kind != b"IHDR":
            return "corrupt PNG (first chunk is not IHDR)", _NO_TEST
        if not kind.isalpha():
            return f"corrupt PNG (chunk type {kind!r} is not a chunk name)", _NO_TEST
        (crc,) = struct.unpack(">I", data[end - 4: end])
        if zlib.crc32(data[pos + 4: end - 4]) != crc:
            if kind[:1].isupper():  # a critical chunk
                return f"corrupt PNG (checksum of chunk {kind!r})", _NO_TEST
            unusual = True  # libpng leaves out an ancillary chunk with a bad checksum
        chunks.append((kind, pos + 8, end - 4))
        if kind == b"IEND":
            break
        pos = end
    width, height, depth, colour, compression, filtering, interlace = struct.unpack(
        ">IIBBBBB", data[chunks[0][1]: chunks[0][1] + 13])
    if width == 0 or height == 0:
        return f"corrupt PNG (size {width}x{height})", _NO_TEST
    kinds = [kind for kind, _, _ in chunks]
    idat = [i for i, kind in enumerate(kinds) if kind == b"IDAT"]
    unusual = unusual or end != len(data) or chunks[0][2] - chunks[0][1] != 13 or not (
        depth in _PNG_DEPTHS.get(colour, ()) and compression == 0 and filtering == 0
        and interlace in (0, 1) and max(width, height) <= _PNG_MAX_SIDE)
    if unusual or not idat or idat != list(range(idat[0], idat[-1] + 1)):
        return None, ("full", None)
    for i, kind in enumerate(kinds):
        if kind != b"IDAT" and (
                kind not in _PNG_CRITICAL + _PNG_ANCILLARY
                or (kind in _PNG_CRITICAL and kinds.count(kind) != 1)
                or (kind == b"PLTE" and i > idat[0])):
            return None, ("full", None)
    if colour == 3 and b"PLTE" not in kinds:
        return None, ("full", None)
    stream = b"".join(data[start:stop] for kind, start, stop in chunks if kind == b"IDAT")
    return None, _png_rows(stream, width, height, depth * _PNG_CHANNELS[colour], interlace)


def _png_rows(stream, width, height, bits, interlace):
    """The decoder test for a PNG whose deflate `stream` should hold the rows of a
    `width`x`height` image of `bits` per pixel: "header" when it inflates to exactly
    those rows, each with a valid filter byte, else "full" with the reason."""
    rows = []  # (rows, bytes per row with its filter byte), per pass
    for x0, dx, y0, dy in _ADAM7 if interlace else ((0, 1, 0, 1),):
        columns, count = -(-(width - x0) // dx), -(-(height - y0) // dy)
        if columns > 0 and count > 0:
            rows.append((count, 1 + (columns * bits + 7) // 8))
    needed = sum(count * size for count, size in rows)
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(stream, needed)
    except zlib.error as e:
        return "full", f"corrupt PNG (its image data does not inflate: {e})"
    if len(raw) < needed:
        return "full", f"truncated PNG image data ({len(raw)} of {needed} bytes)"
    at = 0
    for count, size in rows:
        filters = np.frombuffer(raw, np.uint8, count * size, at)[::size]
        if filters.max() > 4:
            return "full", f"corrupt PNG (row filter type {int(filters.max())})"
        at += count * size
    try:  # what follows the rows: libpng only warns about it
        rest = inflater.decompress(inflater.unconsumed_tail) + inflater.flush()
    except zlib.error:
        return "full", None
    if rest or not inflater.eof or inflater.unused_data:
        return "full", None
    return "header", None
