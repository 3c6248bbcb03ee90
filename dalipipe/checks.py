"""Pre-flight checks of image files, before a DALI pipeline starts.

DALI cannot skip a file it fails to decode: one bad JPEG stops training, and its
message ("Failed to decode sample #5") does not name the file. So every file of a
source is checked first, by content, not by extension, with the decoder DALI uses:
- it exists, is a regular file (a broken symbolic link is reported as such), is not
  empty and can be read;
- its first bytes are a format DALI decodes (JPEG, PNG, BMP, TIFF, WebP, JPEG 2000,
  PNM); GIF and anything else are reported;
- its structure is sound: a JPEG's headers end before the file does (a JPEG without
  an end-of-image marker must decode in full, and is reported as truncated if it
  does not); a PNG's chunks, with their checksums, run up to IEND; a WebP is as long
  as its RIFF header says;
- DALI's decoder accepts it. DALI decodes with nvImageCodec, and so does the check,
  with the same extensions (libjpeg-turbo, libtiff, OpenCV, ...), on the CPU.
  `check="structure"` has the decoder read every header, and decode the top-left
  pixel of each JPEG, TIFF, BMP and PNM image: that runs the JPEG decoder's whole
  set-up (every marker and table up to the image data, and for progressive and
  multi-scan JPEGs every scan), at a small fraction of a full decode. What it does
  not see is damage inside the image data of a single-scan JPEG, which the decoder
  decodes through (libjpeg warns), short of truncation. PNG, WebP and JPEG 2000
  images cost nearly a full decode for any region, so for them the decoder reads
  the header only.
  `check="full"` decodes every image in full, on the GPU for a GPU pipeline (with
  the decoders DALI's GPU decoder uses), else on the CPU.

Where nvImageCodec is not installed, the check decodes with PIL where it would
decode in full (with a warning: PIL accepts some files that DALI's decoder rejects),
and `"structure"` is the structure rules.

Results are cached in SQLite, keyed on path, size and modification time, so a second
check of the same files reads only their metadata. The cache lives in
`dalipipe.utils.cache_dir()` (`$DALIPIPE_CACHE_DIR`, else `$XDG_CACHE_HOME/dalipipe`, else
`~/.cache/dalipipe`), in `checks.sqlite`.
"""

import contextlib
import io
import os
import re
import sqlite3
import stat
import struct
import sys
import tempfile
import threading
import time
import warnings
import zlib

import numpy as np

from dalipipe.utils import cache_dir, listing, progress, usable_cores

CHECKS = ("structure", "full", None)
ON_BAD_FILE = ("raise", "skip")
_VERSION = 4  # bump when a check changes, to ignore older cache rows


def check_file(path, *, full=False, device="cpu"):
    """Returns None for a sound image file, else the reason it is not one.

    `full`: decode the whole image (on `device`, "cpu" or "gpu"), as `check="full"`.
    """
    return _check_paths([path], full=full, device=device)[0]


def _read(path):
    """`(bytes, None)` for a readable regular file, else `(None, reason)`."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            return None, f"broken symbolic link (to {os.readlink(path)!r})"
        return None, "does not exist"
    except OSError as e:
        return None, f"cannot be read ({e.strerror})"
    if not stat.S_ISREG(info.st_mode):
        return None, "not a regular file"
    if info.st_size == 0:
        return None, "empty file (0 bytes)"
    try:
        with open(path, "rb") as f:
            return f.read(), None
    except OSError as e:
        return None, f"cannot be read ({e.strerror})"


def check_bytes(data, *, full=False, device="cpu"):
    """Returns None for the bytes of a sound image, else the reason they are not one.

    The checks of `check_file` after its file system ones, for images that are not
    files of their own (the records of a TFRecord file).
    """
    return _check_images([data], full=full, device=device)[0]


def _check_images(images, *, full, device):
    """The reason each encoded image is not sound, or None: the structure rules, then
    DALI's decoder on the images that pass them (on `device` when `full`)."""
    reasons, tests = [], []
    for data in images:
        reason, (how, label) = _structure(data)
        reasons.append(reason)
        tests.append(("full" if full else how, label))
    todo = [i for i, reason in enumerate(reasons) if reason is None]
    verdicts = _decoder_verdicts([images[i] for i in todo], [tests[i] for i in todo],
                                 device=device if full else "cpu")
    for i, reason in zip(todo, verdicts):
        reasons[i] = reason
    return reasons


# Formats whose top-left pixel the decoder gives at a small fraction of a full decode
# (for PNG, WebP and JPEG 2000 any region costs nearly a full decode).
_REGION_FORMATS = ("jpeg", "tiff", "bmp", "pnm")
FORMAT_NAMES = {"jpeg": "JPEG", "png": "PNG", "bmp": "BMP", "tiff": "TIFF", "webp": "WebP",
                "jpeg2000": "JPEG 2000", "pnm": "PNM"}


def _structure(data):
    """`(reason, (test, label))`: why `data` is not a sound image by its structure
    (or None), the cheapest decoder test that settles the rest ("header", "region"
    or "full", see `_decoder_verdicts`), and the reason to give if the decoder
    rejects it (None: the decoder's own message)."""
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


_NO_TEST = (None, None)


def sniff(data):
    """The image format of `data` by its first bytes, or None."""
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
    for the end-of-image marker after it. Returns `(reason, test)` as `_structure`.

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
    (size,) = struct.unpack("<I", data[4:8])
    if size + 8 > len(data):
        return "truncated WebP (shorter than its RIFF header says)"
    return None


def _decoder_verdicts(images, tests, *, device):
    """The reason DALI's decoder rejects each encoded image, or None.

    Per image, `tests` has `(test, label)`: how far the decoder goes, "header" (it
    parses the header), "region" (it also decodes the top-left pixel) or "full" (the
    whole image), and the reason to give if it rejects the image (None: one with its
    own message). nvImageCodec, as DALI sets it up on `device` ("cpu" or "gpu"), decodes a
    list of images at a time on its own threads; the files it rejects are decoded
    again one by one for the decoder's message. Without nvImageCodec, PIL decodes
    the "full" ones.
    """
    nvimgcodec = _nvimgcodec()
    if nvimgcodec is None:
        if any(test == "full" for test, _ in tests):
            warnings.warn("nvImageCodec is not installed, so the check decodes with PIL, "
                          "which accepts some files that DALI's decoder rejects.", stacklevel=4)
        return [_pil_verdict(data, label) if test == "full" else None
                for data, (test, label) in zip(images, tests)]
    reasons = [None] * len(images)
    with _DECODER_LOCK:
        decoder, params = _decoder(nvimgcodec, device)
        with _stderr_captured():  # the messages of the rare failures are read below
            parsed = [_parse(nvimgcodec, data) for data in images]
        streams = []
        for i, (stream, (test, _)) in enumerate(zip(parsed, tests)):
            if stream is None:
                with _stderr_captured() as text:
                    _parse(nvimgcodec, images[i])
                reasons[i] = _rejected(images[i], "whose header DALI's decoder cannot read", text)
            elif test == "region":
                region = nvimgcodec.Region(0, 0, 1, 1)
                streams.append((i, stream.get_sub_code_stream(region=region), 1))
            elif test == "full":
                streams.append((i, stream, stream.width * stream.height))
        for batch in _decode_batches(streams):
            with _stderr_captured():  # messages about images that decode are of no use
                decoded = decoder.decode([stream for _, stream, _ in batch], params=params)
            failed = [(i, stream) for (i, stream, _), image in zip(batch, decoded) if image is None]
            del decoded
            for i, stream in failed:
                label = tests[i][1]
                if label is None:
                    with _stderr_captured() as text:
                        decoder.decode(stream, params=params)
                    label = _rejected(images[i], "that DALI's decoder rejects", text)
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


_BATCH_PIXELS = 85_000_000  # RGB: about 256 MB
_DECODERS = {}
_DECODER_LOCK = threading.Lock()


def _nvimgcodec():
    try:
        from nvidia import nvimgcodec
    except ImportError:
        return None
    return nvimgcodec


def _decoder(nvimgcodec, device):
    """nvImageCodec's decoder and decode parameters as DALI's image decoder sets them
    up (RGB, EXIF orientation applied), made once per process and device: on "cpu"
    its CPU-only backend, on "gpu" all of its backends on GPU 0."""
    if device not in _DECODERS:
        threads = usable_cores()
        with _stderr_captured():  # its notices about the thread count
            if device == "gpu":
                decoder = nvimgcodec.Decoder(device_id=0, max_num_cpu_threads=threads)
            else:
                decoder = nvimgcodec.Decoder(
                    device_id=nvimgcodec.NVIMGCODEC_DEVICE_CPU_ONLY, max_num_cpu_threads=threads,
                    backends=[nvimgcodec.Backend(nvimgcodec.BackendKind.CPU_ONLY)],
                )
        params = nvimgcodec.DecodeParams(apply_exif_orientation=True,
                                         color_spec=nvimgcodec.ColorSpec.SRGB,
                                         sample_format=nvimgcodec.SampleFormat.I_RGB)
        _DECODERS[device] = decoder, params
    return _DECODERS[device]


def decoder_name(device="cpu"):
    """What decodes in the check: "nvImageCodec 0.9.0 (CPU)", or PIL's name where
    nvImageCodec is not installed."""
    nvimgcodec = _nvimgcodec()
    if nvimgcodec is None:
        import PIL

        return f"PIL {PIL.__version__} (nvImageCodec is not installed)"
    return f"nvImageCodec {nvimgcodec.__version__} ({device.upper()})"


@contextlib.contextmanager
def _stderr_captured():
    """Sends file descriptor 2 to a temporary file for the block, and then appends
    what was written there to the list it yields. The decoder and the libraries it
    loads (libjpeg among them) print their messages straight to it."""
    text = []
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no stderr to redirect
        yield text
        return
    try:
        with tempfile.TemporaryFile() as f:
            os.dup2(f.fileno(), 2)
            try:
                yield text
            finally:
                os.dup2(saved, 2)
                f.seek(0)
                text.append(f.read().decode("utf-8", "replace"))
    finally:
        os.close(saved)


_COLOURS = re.compile(r"\x1b\[[0-9;]*m")


def _rejected(data, what, text):
    """The reason for an image the decoder rejects: its format, `what`, and the
    decoder's last message in the captured `text` (for JPEG, libjpeg's error)."""
    lines = []
    for line in _COLOURS.sub("", "".join(text)).splitlines():
        line = re.sub(r"^\[(WARNING|ERROR|FATAL|INFO)\]\s*", "", line.strip())
        if line and not line.startswith("[pynvimgcodec]"):
            line = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in line)
            lines.append(re.sub(r"^\[(\w+)\]\s*", r"\1: ", line))
    detail = f" ({lines[-1]})" if lines else ""
    return f"{FORMAT_NAMES.get(sniff(data), 'image')} {what}{detail}"


def _pil_verdict(data, label):
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
    except Exception as e:  # PIL raises many types for bad data
        return label or f"does not decode ({type(e).__name__}: {e})"
    return None


class _Cache:
    """path -> (size, mtime_ns, mode, reason) in SQLite.

    Each chunk of results is committed as it is found, without waiting for the disk:
    a crash of the process loses nothing committed, and a file that a crash of the
    machine left damaged is started again.
    """

    def __init__(self, path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            self._open(path)
        except sqlite3.DatabaseError:  # not a database any more
            self.db.close()
            os.remove(path)
            self._open(path)

    def _open(self, path):
        self.db = sqlite3.connect(path, timeout=30)
        self.db.execute("PRAGMA synchronous = OFF")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS checks (path BLOB PRIMARY KEY, size INTEGER, "
            "mtime_ns INTEGER, mode TEXT, version INTEGER, reason TEXT)"
        )

    def get(self, paths):
        found = {}
        for i in range(0, len(paths), 900):
            chunk = paths[i: i + 900]
            rows = self.db.execute(
                f"SELECT path, size, mtime_ns, mode, version, reason FROM checks "
                f"WHERE path IN ({','.join('?' * len(chunk))})", chunk,
            )
            found.update({row[0]: row[1:] for row in rows})
        return found

    def put(self, rows):
        self.db.executemany("INSERT OR REPLACE INTO checks VALUES (?, ?, ?, ?, ?, ?)", rows)
        self.db.commit()

    def close(self):
        self.db.close()


def check_files(paths, *, check="structure", verbose=False, stamps=None, device="cpu"):
    """Checks `paths`; returns `{path: reason}` for the bad ones.

    Args:
        paths: file paths.
        check: `"structure"` (structure, headers, and the decoder's set-up) or
            `"full"` (a full decode). See the module's doc.
        verbose: show a progress bar on stderr.
        stamps: optional dict that receives `path: (size, mtime_ns)` of each file
            that exists.
        device: `"cpu"` or `"gpu"`: the device of the DALI pipeline, where
            `check="full"` decodes.
    """
    _check_level(check)
    mode = _mode(check, device)
    cache = _Cache(os.path.join(cache_dir(), "checks.sqlite"))
    try:
        # Keys are the paths' bytes: file names need not be valid UTF-8.
        known = cache.get([os.fsencode(p) for p in paths])
        reasons, signatures, todo = {}, {}, []
        for path in paths:
            try:
                info = os.stat(path)
                signatures[path] = (info.st_size, info.st_mtime_ns)
            except OSError:
                pass
            cached = known.get(os.fsencode(path))
            if path in signatures and _usable(cached, signatures[path], mode):
                reasons[path] = cached[4]
            else:
                todo.append(path)
        if stamps is not None:
            stamps.update(signatures)
        with progress(len(paths), "files checked", enabled=verbose) as bar:
            bar.update(len(paths) - len(todo))
            for start in range(0, len(todo), 256):
                chunk = todo[start: start + 256]
                rows = []
                for path, reason in zip(chunk, _check_paths(chunk, full=check == "full",
                                                            device=device)):
                    reasons[path] = reason
                    if path in signatures:
                        rows.append((os.fsencode(path), *signatures[path], mode, _VERSION,
                                     reason))
                cache.put(rows)
                bar.update(len(chunk))
    finally:
        cache.close()
    return {path: reasons[path] for path in paths if reasons[path] is not None}


def _check_paths(paths, *, full, device):
    """`check_file` for a list of paths, the decoder taking the images together."""
    read = [_read(path) for path in paths]
    reasons = [reason for _, reason in read]
    readable = [i for i, (data, _) in enumerate(read) if data is not None]
    found = _check_images([read[i][0] for i in readable], full=full, device=device)
    for i, reason in zip(readable, found):
        reasons[i] = reason
    return reasons


def _check_level(check):
    if check not in ("structure", "full"):
        raise ValueError(f"`check` must be one of {CHECKS}. Received: check={check!r}")


def _mode(check, device):
    """The cache's name for a check: a full decode on the GPU is "full-gpu"."""
    return "full-gpu" if check == "full" and device == "gpu" else check


def _usable(cached, signature, mode):
    """Whether a cache row `(size, mtime_ns, mode, version, reason)` answers a check
    of `mode` for a file of `signature` `(size, mtime_ns)`: a pass of "full" (on the
    CPU, the strictest) answers every mode."""
    return (
        cached is not None and (cached[0], cached[1]) == tuple(signature)
        and cached[3] == _VERSION
        and (cached[2] == mode or (cached[2] == "full" and cached[4] is None))
    )


def check_index(index, *, check="structure", read_records=None, verbose=False, device="cpu"):
    """Checks every sample of a `sources.Index`: files, or TFRecord records.

    Args:
        index: a `sources.Index`.
        check: `"structure"` or `"full"`.
        read_records: for an index of TFRecord records, the function that reads
            their images: `read_records(shards, refs)` returns a list of bytes, and
            raises ValueError for a record that is not an image record
            (`dalipipe.tfrecord.load_encoded`).
        verbose: show a progress bar on stderr.
        device: `"cpu"` or `"gpu"`, the DALI pipeline's: where `check="full"`
            decodes.

    Returns:
        `(bad, index)`: `{file path or record name: reason}` for the bad ones, and the
        index with `stamps`, int64 `(size, mtime_ns)` rows of its files (of its
        TFRecord files for records) as they were when checked, for
        `verify_unchanged`.
    """
    stamps = {}
    if index.refs is not None:
        if read_records is None:
            raise TypeError("check_index() needs `read_records` for TFRecord records")
        bad = check_records(index.file_paths, index.shards, index.refs, check=check,
                            read_records=read_records, verbose=verbose, stamps=stamps,
                            device=device)
        paths = index.shards
    else:
        bad = check_files(index.file_paths, check=check, verbose=verbose, stamps=stamps,
                          device=device)
        paths = index.file_paths
    table = np.array([stamps.get(p, (-1, -1)) for p in paths], np.int64).reshape(-1, 2)
    return bad, type(index)(**{**index._asdict(), "stamps": table})


def apply_policy(index, bad, *, on_bad_file, keep_classes):
    """The index to train on, given the bad samples found by `check_index`.

    `on_bad_file="raise"`: a ValueError that lists the bad files, and the report's
    path. `"skip"`: the index less the bad files (classes left empty are dropped
    unless `keep_classes`), with a warning that gives the count and the report.
    """
    if not bad:
        return index
    report = write_report(bad, len(index))
    listed = "\n".join(f"  {path}: {reason}" for path, reason in list(bad.items())[:100])
    more = f"\n  ... and {len(bad) - 100} more" if len(bad) > 100 else ""
    if on_bad_file == "raise":
        raise ValueError(
            f"{len(bad)} of {len(index)} files cannot be loaded (DALI would stop at the "
            f"first of them). Fix or remove them, or pass on_bad_file='skip'. Report: "
            f"{report}\n{listed}{more}"
        )
    kept = index.without(bad, keep_classes=keep_classes)
    if not len(kept):
        raise ValueError(f"All {len(index)} files are bad. Report: {report}\n{listed}{more}")
    dropped = sorted(set(index.class_names or []) - set(kept.class_names or []))
    warnings.warn(
        f"Left out {len(bad)} of {len(index)} files that cannot be loaded"
        + (f"; classes left without images: {dropped}" if dropped else "")
        + f". Report: {report}",
        stacklevel=4,
    )
    return kept


def verify_unchanged(paths, stamps, *, check):
    """Raises RuntimeError naming a file deleted or changed since it was checked.

    Args:
        paths: file paths.
        stamps: int64 `(len(paths), 2)`: `(size, mtime_ns)` when they were checked
            (see `check_index`).
        check: `"structure"` or `"full"`: a file whose size or modification time
            changed is checked again at this level, and accepted if it passes. None:
            any change is an error (for TFRecord files, whose records may have moved).
    """
    for path, (size, mtime_ns) in zip(paths, np.asarray(stamps).tolist()):
        try:
            info = os.stat(path)
        except OSError as e:
            raise RuntimeError(
                f"{path} was checked before training and cannot be opened now "
                f"({e.strerror}): it was deleted or moved during training."
            ) from None
        if (info.st_size, info.st_mtime_ns) == (size, mtime_ns):
            continue
        if check is None:
            raise RuntimeError(
                f"{path} changed after the check before training: its records may have "
                "moved. Make the dataset again."
            )
        reason = check_file(path, full=check == "full")
        if reason is not None:
            raise RuntimeError(
                f"{path} changed after the check before training and is now bad: {reason}."
            )


def check_records(names, shards, refs, *, read_records, check="structure", verbose=False,
                  stamps=None, device="cpu"):
    """Checks the images of TFRecord records; returns `{name: reason}` for the bad ones.

    The rules of `check_bytes`. Results are cached like `check_files`', keyed on the
    record's name and its file's size and modification time.

    Args:
        names: the records' names (`"<file>#<record number>"`).
        shards, refs: where they lie, as `dalipipe.tfrecord.scan` gives them.
        read_records: `read_records(shards, refs)`, see `check_index`.
        check: `"structure"` or `"full"`.
        verbose: show a progress bar on stderr.
        stamps: optional dict that receives `shard: (size, mtime_ns)`.
        device: `"cpu"` or `"gpu"`, where `check="full"` decodes.
    """
    _check_level(check)
    mode = _mode(check, device)
    signatures = [(info.st_size, info.st_mtime_ns) for info in map(os.stat, shards)]
    if stamps is not None:
        stamps.update(zip(shards, signatures))
    cache = _Cache(os.path.join(cache_dir(), "checks.sqlite"))
    try:
        known = cache.get([os.fsencode(n) for n in names])
        bad, todo = {}, []
        for i, name in enumerate(names):
            cached = known.get(os.fsencode(name))
            if _usable(cached, signatures[refs[i][0]], mode):
                if cached[4] is not None:
                    bad[name] = cached[4]
            else:
                todo.append(i)
        with progress(len(names), "records checked", enabled=verbose) as bar:
            bar.update(len(names) - len(todo))
            for start in range(0, len(todo), 256):
                chunk = todo[start: start + 256]
                rows = []
                images = _record_images(read_records, shards, refs[chunk])
                readable = [k for k, (data, _) in enumerate(images) if data is not None]
                found = dict(zip(readable, _check_images(
                    [images[k][0] for k in readable], full=check == "full", device=device)))
                for k, (i, (_, reason)) in enumerate(zip(chunk, images)):
                    reason = found.get(k, reason)
                    rows.append((os.fsencode(names[i]), *signatures[refs[i][0]], mode,
                                 _VERSION, reason))
                    if reason is not None:
                        bad[names[i]] = reason
                cache.put(rows)
                bar.update(len(chunk))
    finally:
        cache.close()
    return bad


def _record_images(read_records, shards, refs):
    """`(image bytes, None)` per record, or `(None, reason)` for one that cannot be read."""
    try:
        return [(data, None) for data in read_records(shards, refs)]
    except ValueError:
        pass
    found = []
    for ref in refs:
        try:
            found.append((read_records(shards, ref[None])[0], None))
        except ValueError as e:
            found.append((None, f"not an image record ({e})"))
    return found


def write_report(bad, total, *, directory=None):
    """Writes one line per bad file (reason, then path); returns the report's path."""
    directory = directory or os.path.join(cache_dir(), "reports")
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, time.strftime("bad-files-%Y%m%d-%H%M%S.txt"))
    with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write(f"# {len(bad)} bad file(s) of {total} checked\n")
        for file_path, reason in sorted(bad.items()):
            f.write(f"{reason}\t{os.fsdecode(file_path)}\n")
    return path
