"""Format-aware mutations of sound images, for the fuzz (`benchmarks/fuzz.py`).

`MUTATIONS[format]` names the mutations of each accepted format, `base_images`
makes the sound images they start from (with PIL, from crops of a photograph), and
`mutate(data, format, kind, rng)` applies one. Every format has the plain ones (bit
flips, truncation, a run of garbage); the others change one part of the format and
keep the rest valid, so that the damage reaches past the outer checks:
- JPEG (`jpeg_mutate`): header bytes, markers, zeroed runs, and one header field
  each (SOF precision, components, sampling factors, DHT counts, DQT zeros, SOS
  selectors, DRI);
- PNG: chunk bodies, types and order with their CRCs recomputed; the deflate stream
  garbled, cut, or a valid stream of too little or too much data; row filter bytes;
  IHDR fields; an ancillary chunk's CRC broken; IDAT split in chunks (sound);
- TIFF: the IFD offset and entry count, strip offsets and byte counts, any tag's value;
- JPEG 2000: codestream marker codes, SIZ and COD fields, main-header bytes, the
  tile-part length (Psot), the end marker;
- WebP: the RIFF size, a chunk's size and type, the bitstream's bytes and header;
- BMP: header fields; PNM: header tokens and the magic number.

This module is above 400 lines because it holds the mutations of seven formats,
each a short function of the same shape; one file keeps them side by side.
"""

import io
import struct
import zlib

import numpy as np

_PLAIN = ("bit_flips", "truncate", "garbage")
MUTATIONS = {
    "jpeg": ("bit_flips", "truncate", "header_bytes", "marker", "zero_run", "sof_precision",
             "sof_components", "sampling", "dht_counts", "dqt_zeros", "sos_selectors", "dri"),
    "png": _PLAIN + ("chunk_bytes", "idat_garbage", "idat_cut", "short_stream", "long_stream",
                     "filter_bytes", "ihdr_fields", "chunk_type", "chunk_order",
                     "ancillary_crc", "split_idat"),
    "tiff": _PLAIN + ("ifd_offset", "entry_count", "strip_offsets", "strip_counts",
                      "tag_value"),
    "jpeg2000": _PLAIN + ("marker_code", "siz_fields", "cod_fields", "main_header", "psot",
                          "no_eoc"),
    "webp": _PLAIN + ("riff_size", "chunk_size", "chunk_type", "bitstream_bytes",
                      "bitstream_header"),
    "bmp": _PLAIN + ("header_fields",),
    "pnm": _PLAIN + ("header_tokens", "magic"),
}
EXTENSIONS = {"jpeg": ".jpg", "png": ".png", "tiff": ".tif", "jpeg2000": ".jp2",
              "webp": ".webp", "bmp": ".bmp", "pnm": ".ppm"}


def base_images(kind, pictures):
    """Sound images of format `kind` made from PIL images `pictures`: a list of
    `(bytes, extension)`, in several variants of the format (colour types,
    compressions, file formats) each."""
    from PIL import Image, PngImagePlugin, TiffImagePlugin

    found = []

    def save(image, extension=EXTENSIONS[kind], **options):
        buffer = io.BytesIO()
        image.save(buffer, format=_PIL_FORMATS[kind], **options)
        found.append((buffer.getvalue(), extension))

    for n, picture in enumerate(pictures):
        rgb = picture.convert("RGB")
        if kind == "jpeg":
            save(rgb, quality=90)
        elif kind == "png":
            info = PngImagePlugin.PngInfo()
            info.add_text("comment", "a text chunk")
            save(rgb, pnginfo=info, dpi=(72, 72))
            save([rgb.convert("L"), rgb.convert("P"), rgb.convert("RGBA"),
                  rgb.convert("I;16")][n % 4])
        elif kind == "tiff":
            old = TiffImagePlugin.STRIP_SIZE
            TiffImagePlugin.STRIP_SIZE = 2048  # several strips per image
            try:
                save(rgb)
                save(rgb, compression=("tiff_lzw", "tiff_adobe_deflate", "packbits",
                                       "jpeg")[n % 4])
                save(rgb.convert("L"), compression="tiff_lzw")
            finally:
                TiffImagePlugin.STRIP_SIZE = old
        elif kind == "jpeg2000":
            save(rgb)
            save(rgb, ".j2k", quality_mode="rates", quality_layers=[20, 10])
            save(rgb, tile_size=(32, 32), irreversible=True)
        elif kind == "webp":
            save(rgb, quality=80)
            save(rgb, lossless=True)
            save(rgb.convert("RGBA"), quality=70)
        elif kind == "bmp":
            save(rgb)
            save([rgb.convert("P"), rgb.convert("L"), rgb.convert("1")][n % 3])
        elif kind == "pnm":
            save(rgb)
            save(rgb.convert("L"), ".pgm")
            save(rgb.convert("1"), ".pbm")
    return found


_PIL_FORMATS = {"jpeg": "JPEG", "png": "PNG", "tiff": "TIFF", "jpeg2000": "JPEG2000",
                "webp": "WEBP", "bmp": "BMP", "pnm": "PPM"}


def mutate(data, kind, mutation, rng):
    """`data`, a sound image of format `kind`, with one `mutation` drawn from `rng`."""
    data = bytearray(data)
    draw = _Draw(rng)
    if mutation == "bit_flips":
        for _ in range(draw.int(1, 20)):
            data[draw.int(0, len(data))] ^= 1 << draw.int(0, 8)
    elif mutation == "truncate":
        data = data[: draw.int(1, len(data))]
    elif mutation == "garbage":
        start = draw.int(len(data) // 4, len(data))
        size = draw.int(1, 200)
        data[start: start + size] = draw.bytes(len(data[start: start + size]))
    else:
        data = _MUTATORS[kind](data, mutation, draw)
    return bytes(data)


class _Draw:
    """Random choices from a NumPy generator."""

    def __init__(self, rng):
        self.rng = rng

    def int(self, low, high):
        """An int in [low, high)."""
        return int(self.rng.integers(low, max(high, low + 1)))

    def pick(self, values):
        return values[self.int(0, len(values))]

    def bytes(self, size):
        return self.rng.integers(0, 256, size, dtype=np.uint8).tobytes()

    def chance(self, p):
        return self.rng.random() < p


# --- JPEG -------------------------------------------------------------------------

def jpeg_segments(data):
    """`[(marker, start, end)]`: each segment from SOI up to and including the first
    scan header; `data[start:end]` is the segment's body, after its length."""
    found, pos = [], 2
    while pos + 4 <= len(data) and data[pos] == 0xFF:
        marker = data[pos + 1]
        length = int.from_bytes(data[pos + 2: pos + 4], "big")
        found.append((marker, pos + 4, pos + 2 + length))
        if marker == 0xDA:
            break
        pos += 2 + length
    return found


def jpeg_mutate(data, mutation, draw):
    parts = jpeg_segments(data)

    def body(*markers):
        return draw.pick([p for p in parts if p[0] in markers])

    if mutation == "header_bytes":
        for _ in range(draw.int(1, 8)):
            data[draw.int(0, min(len(data), 700))] = draw.int(0, 256)
    elif mutation == "marker":
        markers = [i for i in range(len(data) - 1)
                   if data[i] == 0xFF and data[i + 1] not in (0, 0xFF)]
        data[draw.pick(markers) + 1] = draw.int(0, 256)
    elif mutation == "zero_run":
        start = draw.int(0, len(data))
        data[start: start + draw.int(1, 200)] = bytes(min(200, len(data) - start))
    elif mutation == "sof_precision":
        _, start, _ = body(0xC0, 0xC1, 0xC2)
        data[start] = draw.pick([0, 1, 2, 7, 9, 12, 16, draw.int(0, 256)])
    elif mutation == "sof_components":
        _, start, _ = body(0xC0, 0xC1, 0xC2)
        data[start + 5] = draw.pick([0, 1, 2, 4, 5, draw.int(0, 256)])
    elif mutation == "sampling":
        _, start, end = body(0xC0, 0xC1, 0xC2)
        count = (end - start - 6) // 3
        data[start + 7 + 3 * draw.int(0, count)] = draw.pick(
            [0x00, 0x01, 0x10, 0x12, 0x21, 0x14, 0x41, 0x33, 0x44, 0x55, 0xFF,
             draw.int(0, 256)])
    elif mutation == "dht_counts":
        _, start, _ = body(0xC4)
        counts = start + 1  # the first table of the segment: class/id, then 16 counts
        a, b = draw.int(0, 16), draw.int(0, 16)
        if draw.chance(0.5) and data[counts + a] > 0:  # same total: another code
            data[counts + a] -= 1
            data[counts + b] = (data[counts + b] + 1) % 256
        else:
            data[counts + a] = draw.int(0, 256)
    elif mutation == "dqt_zeros":
        _, start, _ = body(0xDB)
        first = draw.int(0, 64)
        size = 64 if draw.chance(0.25) else draw.int(1, 65 - first)
        entries = start + 1 + (0 if size == 64 else first)
        data[entries: entries + size] = bytes(size)
    elif mutation == "sos_selectors":
        _, start, _ = body(0xDA)
        field = draw.int(0, 2 * data[start] + 3)  # Cs/Td-Ta pairs, then Ss, Se, Ah-Al
        data[start + 1 + field] = draw.pick([0, 1, 2, 3, 4, 0x11, 0x22, 0x3F, 0x40,
                                             draw.int(0, 256)])
    elif mutation == "dri":
        interval = draw.pick([0, 1, 2, 7, 64, 1000, 65535, draw.int(0, 65536)])
        sos = body(0xDA)[1] - 4
        data[sos:sos] = b"\xff\xdd\x00\x04" + interval.to_bytes(2, "big")
    return data


# --- PNG --------------------------------------------------------------------------

def png_chunks(data):
    """`[[type, body]]` of a sound PNG's chunks."""
    found, pos = [], 8
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos: pos + 8])
        found.append([kind, bytes(data[pos + 8: pos + 8 + length])])
        pos += 12 + length
    return found


def png_build(chunks, broken_crc=()):
    """A PNG of `chunks` with their lengths and CRCs computed (wrong for the indices
    in `broken_crc`)."""
    out = bytearray(b"\x89PNG\r\n\x1a\n")
    for i, (kind, body) in enumerate(chunks):
        crc = zlib.crc32(kind + body) ^ (0xFFFFFFFF if i in broken_crc else 0)
        out += struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)
    return out


def _png_mutate(data, mutation, draw):
    chunks = png_chunks(data)
    idat = [i for i, (kind, _) in enumerate(chunks) if kind == b"IDAT"]
    stream = b"".join(chunks[i][1] for i in idat)

    def with_stream(new):  # the IDAT chunks replaced by one holding `new`
        rest = [c for c in chunks if c[0] != b"IDAT"]
        return rest[:idat[0]] + [[b"IDAT", new]] + rest[idat[0]:]

    if mutation == "chunk_bytes":
        chunk = draw.pick(chunks)
        body = bytearray(chunk[1])
        for _ in range(draw.int(1, 4)):
            if body:
                body[draw.int(0, len(body))] = draw.int(0, 256)
        chunk[1] = bytes(body)
    elif mutation == "idat_garbage":
        body = bytearray(stream)
        start = draw.int(0, len(body))
        body[start: start + draw.int(1, 64)] = draw.bytes(len(body[start: start + 64]))
        chunks = with_stream(bytes(body))
    elif mutation == "idat_cut":
        chunks = with_stream(stream[: draw.int(0, len(stream))])
    elif mutation in ("short_stream", "long_stream", "filter_bytes"):
        raw = bytearray(zlib.decompress(stream))
        if mutation == "short_stream":
            raw = raw[: draw.int(0, len(raw))]
        elif mutation == "long_stream":
            raw += draw.bytes(draw.int(1, 500))
        else:
            width, depth, colour = _png_row_layout(chunks[0][1])
            row = 1 + (width * depth * _PNG_CHANNELS.get(colour, 1) + 7) // 8
            raw[row * draw.int(0, len(raw) // row)] = draw.pick([5, 6, 64, 255,
                                                                draw.int(0, 256)])
        chunks = with_stream(zlib.compress(bytes(raw), draw.int(0, 10)))
    elif mutation == "ihdr_fields":
        body = bytearray(chunks[0][1])
        field = draw.int(0, 7)  # width, height, depth, colour, compression, filter, interlace
        if field < 2:
            value = draw.pick([0, 1, 2, 3, 1 << 16, 1 << 24, 0x7FFFFFFF, 0xFFFFFFFF,
                               draw.int(0, 1 << 31)])
            body[4 * field: 4 * field + 4] = struct.pack(">I", value)
        else:
            body[6 + field] = draw.pick([0, 1, 2, 3, 4, 6, 8, 16, draw.int(0, 256)])
        chunks[0][1] = bytes(body)
    elif mutation == "chunk_type":
        chunk = draw.pick(chunks)
        name = bytearray(chunk[0])
        name[draw.int(0, 4)] = draw.pick([0x20, 0x41, 0x61, 0x7A, draw.int(0, 256)])
        chunk[0] = bytes(name)
    elif mutation == "chunk_order":
        i = draw.int(0, len(chunks))
        what = draw.int(0, 3)
        if what == 0:
            del chunks[i]
        elif what == 1:
            chunks.insert(draw.int(0, len(chunks)), list(chunks[i]))
        else:
            chunks.insert(draw.int(0, len(chunks)), chunks.pop(i))
    elif mutation == "ancillary_crc":
        ancillary = [i for i, (kind, _) in enumerate(chunks) if kind[:1].islower()]
        return png_build(chunks, broken_crc=(draw.pick(ancillary),) if ancillary else ())
    elif mutation == "split_idat":
        pieces = sorted({draw.int(0, len(stream)) for _ in range(draw.int(1, 6))})
        bodies = [stream[a:b] for a, b in zip([0] + pieces, pieces + [len(stream)])]
        rest = [c for c in chunks if c[0] != b"IDAT"]
        chunks = rest[:idat[0]] + [[b"IDAT", b] for b in bodies] + rest[idat[0]:]
    return png_build(chunks)


_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


def _png_row_layout(ihdr):
    """`(width, bit depth, colour type)` of an IHDR body."""
    width, _, depth, colour = struct.unpack(">IIBB", ihdr[:10])
    return width, depth, colour


# --- TIFF -------------------------------------------------------------------------

_TIFF_SIZES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 1, 8: 2, 9: 4, 10: 8, 11: 4, 12: 8}


def tiff_entries(data):
    """`(order, ifd offset, [(entry offset, tag, type, count, value offset)])` of a
    TIFF's first IFD; the value offset is where the values lie (inline or not)."""
    order = "<" if data[:2] == b"II" else ">"
    (ifd,) = struct.unpack(order + "I", data[4:8])
    (count,) = struct.unpack(order + "H", data[ifd: ifd + 2])
    entries = []
    for n in range(count):
        at = ifd + 2 + 12 * n
        tag, kind, values = struct.unpack(order + "HHI", data[at: at + 8])
        inline = _TIFF_SIZES.get(kind, 1) * values <= 4
        where = at + 8 if inline else struct.unpack(order + "I", data[at + 8: at + 12])[0]
        entries.append((at, tag, kind, values, where))
    return order, ifd, entries


def _tiff_mutate(data, mutation, draw):
    order, ifd, entries = tiff_entries(data)
    size = len(data)

    def set_value(entry, index, value):
        at, _, kind, _, where = entry
        width = _TIFF_SIZES.get(kind, 1)
        code = {1: "B", 3: "H", 4: "I", 8: "h", 9: "i"}.get(kind, "B")
        value %= 1 << (8 * width) if width in (1, 2, 4) else 256
        struct.pack_into(order + code, data, where + index * width, value)

    def offset_like():
        return draw.pick([0, 1, 7, 8, size - 1, size, size + 1000, 0xFFFFFFFF,
                          draw.int(0, size), draw.int(0, 1 << 32)])

    if mutation == "ifd_offset":
        struct.pack_into(order + "I", data, 4, offset_like())
    elif mutation == "entry_count":
        struct.pack_into(order + "H", data, ifd,
                         draw.pick([0, 1, len(entries) - 1, len(entries) + 1, 0xFFFF,
                                    draw.int(0, 0x10000)]))
    elif mutation in ("strip_offsets", "strip_counts"):
        tag = 273 if mutation == "strip_offsets" else 279
        entry = [e for e in entries if e[1] == tag][0]
        value = offset_like() if tag == 273 else draw.pick(
            [0, 1, size, 2 * size, 0xFFFFFFFF, draw.int(0, size), draw.int(0, 1 << 32)])
        set_value(entry, draw.int(0, entry[3]), value)
    elif mutation == "tag_value":
        entry = draw.pick(entries)
        if draw.chance(0.3):  # the count
            struct.pack_into(order + "I", data, entry[0] + 4,
                             draw.pick([0, 1, entry[3] + 1, 0xFFFF, draw.int(0, 1 << 32)]))
        else:
            set_value(entry, draw.int(0, entry[3]),
                      draw.pick([0, 1, 2, 3, 5, 7, 8, 16, 255, 0xFFFF, draw.int(0, 1 << 32)]))
    return data


# --- JPEG 2000 --------------------------------------------------------------------

def j2k_markers(data):
    """`(codestream start, [(marker offset, marker, segment end)])`: the main-header
    segments and tile-part headers of a JPEG 2000 codestream (in a JP2 file or not)."""
    start = data.find(b"\xff\x4f\xff\x51")
    found, pos = [], start + 2
    while pos + 4 <= len(data) and data[pos] == 0xFF:
        marker = data[pos + 1]
        if marker in (0x93, 0xD9):  # SOD: tile data follows; EOC
            found.append((pos, marker, pos + 2))
            if marker == 0xD9:
                break
            sot = [m for m in found if m[1] == 0x90][-1]
            psot = int.from_bytes(data[sot[0] + 6: sot[0] + 10], "big")
            pos = sot[0] + psot if psot else len(data) - 2
            continue
        length = int.from_bytes(data[pos + 2: pos + 4], "big")
        found.append((pos, marker, pos + 2 + length))
        pos += 2 + length
    return start, found


def _j2k_mutate(data, mutation, draw):
    start, markers = j2k_markers(data)
    header = [m for m in markers if m[1] not in (0x90, 0x93, 0xD9)]

    def segment(marker):
        return [m for m in markers if m[1] == marker][0]

    if mutation == "marker_code":
        at = draw.pick([start] + [m[0] for m in markers])
        data[at + 1] = draw.pick([0x4F, 0x51, 0x52, 0x5C, 0x90, 0x93, 0xD9, 0x00, 0xFF,
                                  draw.int(0, 256)])
    elif mutation == "siz_fields":
        at = segment(0x51)[0] + 4
        # Rsiz 2, Xsiz/Ysiz/XOsiz/YOsiz/XTsiz/YTsiz/XTOsiz/YTOsiz 4 each, Csiz 2, then
        # per component Ssiz, XRsiz, YRsiz.
        field = draw.int(0, 13)
        if field == 0:
            struct.pack_into(">H", data, at, draw.pick([0, 1, 2, 0x4000, draw.int(0, 65536)]))
        elif field <= 8:
            struct.pack_into(">I", data, at + 2 + 4 * (field - 1),
                             draw.pick([0, 1, 7, 1 << 16, 0x7FFFFFFF, draw.int(0, 1 << 32)]))
        elif field == 9:
            struct.pack_into(">H", data, at + 34, draw.pick([0, 1, 2, 4, 16384, 65535]))
        else:
            data[at + 36 + draw.int(0, 3)] = draw.pick([0, 1, 2, 7, 15, 38, 0x87, 255,
                                                        draw.int(0, 256)])
    elif mutation == "cod_fields":
        at = segment(0x52)[0] + 4
        # Scod, progression, layers (2), MCT, levels, code-block w, h, style, transform
        field = draw.int(0, 9)
        offset = (0, 1, 2, 4, 5, 6, 7, 8, 9)[field]
        data[at + offset] = draw.pick([0, 1, 2, 4, 5, 8, 9, 32, 255, draw.int(0, 256)])
    elif mutation == "main_header":
        _, _, end = draw.pick(header)
        first = draw.pick(header)[0]
        for _ in range(draw.int(1, 4)):
            data[draw.int(first + 2, end)] = draw.int(0, 256)
    elif mutation == "psot":
        at = segment(0x90)[0] + 6
        (psot,) = struct.unpack(">I", data[at: at + 4])
        struct.pack_into(">I", data, at, draw.pick([0, 1, 14, psot - 1, psot + 1, psot // 2,
                                                    2 * psot, draw.int(0, 1 << 32)]))
    elif mutation == "no_eoc":
        end = data.rfind(b"\xff\xd9")
        data = data[:end] + data[end + 2:] if draw.chance(0.5) else data[:end]
    return data


# --- WebP -------------------------------------------------------------------------

def webp_chunks(data):
    """`[(fourcc, size offset, body start, body end)]` of a WebP's chunks."""
    found, pos = [], 12
    while pos + 8 <= len(data):
        (size,) = struct.unpack("<I", data[pos + 4: pos + 8])
        found.append((bytes(data[pos: pos + 4]), pos + 4, pos + 8, pos + 8 + size))
        pos += 8 + size + (size & 1)
    return found


def _webp_mutate(data, mutation, draw):
    chunks = webp_chunks(data)
    stream = [c for c in chunks if c[0] in (b"VP8 ", b"VP8L")][0]
    if mutation == "riff_size":
        struct.pack_into("<I", data, 4, draw.pick([0, 4, len(data) - 9, len(data) - 7,
                                                   len(data) + 100, 0xFFFFFFFF,
                                                   draw.int(0, len(data))]))
    elif mutation == "chunk_size":
        fourcc, at, begin, end = draw.pick(chunks)
        struct.pack_into("<I", data, at, draw.pick([0, 1, end - begin - 1, end - begin + 1,
                                                    end - begin + 2, 0xFFFFFFFF,
                                                    draw.int(0, len(data))]))
    elif mutation == "chunk_type":
        _, at, _, _ = draw.pick(chunks)
        data[at - 4 + draw.int(0, 4)] = draw.pick([0x20, 0x41, 0x4C, 0x58, draw.int(0, 256)])
    elif mutation == "bitstream_bytes":
        _, _, begin, end = stream
        for _ in range(draw.int(1, 8)):
            data[draw.int(begin, end)] = draw.int(0, 256)
    elif mutation == "bitstream_header":
        _, _, begin, _ = stream
        span = 10 if stream[0] == b"VP8 " else 5  # frame tag and size; VP8L's header
        data[begin + draw.int(0, span)] = draw.int(0, 256)
    return data


# --- BMP and PNM ------------------------------------------------------------------

def _bmp_mutate(data, mutation, draw):
    # bfSize 2, bfOffBits 10, biSize 14, width 18, height 22, planes 26, bits 28,
    # compression 30, image size 34, colours used 46
    at, width = draw.pick([(2, 4), (10, 4), (14, 4), (18, 4), (22, 4), (26, 2), (28, 2),
                           (30, 4), (34, 4), (46, 4)])
    value = draw.pick([0, 1, 2, 3, 4, 8, 16, 24, 32, 40, 255, 1 << 16, 0x7FFFFFFF,
                       0xFFFFFFFF, draw.int(0, 1 << 32)])
    data[at: at + width] = (value % (1 << (8 * width))).to_bytes(width, "little")
    return data


def _pnm_mutate(data, mutation, draw):
    if mutation == "magic":
        data[1] = draw.pick(b"0123456789A")
        return data
    tokens, pos = [], 2
    count = 2 if data[1:2] in b"14" else 3  # width, height (and maxval)
    while len(tokens) < count:
        while data[pos: pos + 1].isspace():
            pos += 1
        end = pos
        while not data[end: end + 1].isspace():
            end += 1
        tokens.append((pos, end))
        pos = end
    begin, end = draw.pick(tokens)
    token = str(draw.pick([0, 1, 2, 255, 256, 65535, 65536, 99999999,
                           draw.int(0, 100000)])).encode()
    if draw.chance(0.2):
        token = draw.pick([b"-1", b"x", b"1.5", b""])
    return data[:begin] + token + data[end:]


_MUTATORS = {"jpeg": jpeg_mutate, "png": _png_mutate, "tiff": _tiff_mutate,
             "jpeg2000": _j2k_mutate, "webp": _webp_mutate, "bmp": _bmp_mutate,
             "pnm": _pnm_mutate}
