"""Pre-flight checks of image files, before a DALI pipeline starts.

DALI cannot skip a file it fails to decode: one bad JPEG stops training. So every
file of a source is checked first, by content, not by extension:
- it exists, is a regular file (a broken symbolic link is reported as such), is not
  empty and can be read;
- its first bytes are a format DALI decodes (JPEG, PNG, BMP, TIFF, WebP, JPEG 2000,
  PNM); GIF and anything else are reported;
- its structure is sound: a JPEG's markers up to the image data and an end-of-image
  marker; a PNG's chunks, with their checksums, up to IEND; a WebP's RIFF length;
- with `check="full"`, the whole image also decodes (with PIL).

Results are cached in SQLite, keyed on path, size and modification time, so a second
check of the same files reads only their metadata. The cache lives in
`dalipipe.utils.cache_dir()` (`$DALIPIPE_CACHE_DIR`, else `$XDG_CACHE_HOME/dalipipe`, else
`~/.cache/dalipipe`), in `checks.sqlite`.
"""

import concurrent.futures
import io
import os
import sqlite3
import stat
import struct
import time
import warnings
import zlib

import numpy as np

from dalipipe.utils import cache_dir, listing, progress, usable_cores

CHECKS = ("structure", "full", None)
ON_BAD_FILE = ("raise", "skip")
_VERSION = 3  # bump when a check changes, to ignore older cache rows


def check_file(path, *, full=False):
    """Returns None for a sound image file, else the reason it is not one."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            return f"broken symbolic link (to {os.readlink(path)!r})"
        return "does not exist"
    except OSError as e:
        return f"cannot be read ({e.strerror})"
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    if info.st_size == 0:
        return "empty file (0 bytes)"
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        return f"cannot be read ({e.strerror})"
    return check_bytes(data, full=full)


def check_bytes(data, *, full=False):
    """Returns None for the bytes of a sound image, else the reason they are not one.

    The checks of `check_file` after its file system ones, for images that are not
    files of their own (the records of a TFRecord file).
    """
    if not data:
        return "empty (0 bytes)"
    kind = sniff(data)
    if kind is None:
        return f"not an image DALI decodes (starts with {data[:8]!r})"
    if kind == "gif":
        return "GIF, which DALI does not decode"
    reason = {"jpeg": _check_jpeg, "png": _check_png, "webp": _check_webp}.get(
        kind, lambda d: None
    )(data)
    if reason is None and full:
        reason = _decode_fully(data)
    return reason


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
    """Walks the markers from SOI to the first scan, checking that the frame, scan,
    quantization and Huffman tables agree, then looks for EOI."""
    pos, frame = 2, None
    quant_tables, huffman_tables = set(), set()
    while True:
        if pos < len(data) and data[pos] != 0xFF:
            return f"corrupt JPEG (no marker at byte {pos})"
        # Markers may be padded with any number of 0xFF bytes.
        while pos < len(data) and data[pos] == 0xFF:
            pos += 1
        if pos >= len(data):
            return "truncated JPEG (ends inside its headers)"
        marker = data[pos]
        pos += 1
        if marker == 0x01 or 0xD0 <= marker <= 0xD7:
            continue  # markers without a length
        if marker == 0xD9:
            return "corrupt JPEG (end-of-image marker before any image data)"
        if marker in (0x00, 0xD8):
            return f"corrupt JPEG (marker 0x{marker:02X} in the headers)"
        if pos + 2 > len(data):
            return "truncated JPEG (ends inside its headers)"
        (length,) = struct.unpack(">H", data[pos: pos + 2])
        if length < 2 or pos + length > len(data):
            return f"corrupt or truncated JPEG (segment 0x{marker:02X} runs past the end)"
        body = data[pos + 2: pos + length]
        if marker == 0xDB:  # quantization tables
            reason, quant_tables = _jpeg_tables(body, quant_tables, "quantization", 64)
            if reason:
                return reason
        elif marker == 0xC4:  # Huffman tables
            reason, huffman_tables = _jpeg_tables(body, huffman_tables, "Huffman", None)
            if reason:
                return reason
        elif 0xC0 <= marker <= 0xCF and marker not in (0xC8, 0xCC):
            if frame is not None:
                return "corrupt JPEG (two frame headers)"
            if len(body) < 6:
                return "corrupt JPEG (short frame header)"
            height, width, count = struct.unpack(">HHB", body[1:6])
            if width == 0 or height == 0:
                return f"corrupt JPEG (frame size {width}x{height})"
            if count not in (1, 3, 4) or len(body) != 6 + 3 * count:
                return f"corrupt JPEG (frame header for {count} colour components)"
            components = {}
            for i in range(count):
                ident, sampling, table = body[6 + 3 * i: 9 + 3 * i]
                if table not in quant_tables or not (1 <= sampling >> 4 <= 4 and 1 <= sampling & 15 <= 4):
                    return "corrupt JPEG (frame component with a missing table or bad sampling)"
                components[ident] = table
            if len(components) != count:
                return "corrupt JPEG (repeated frame component)"
            frame = (marker, components)
        elif marker == 0xDA:  # start of scan: entropy-coded data follows
            if frame is None:
                return "corrupt JPEG (image data before any frame header)"
            count = body[0] if body else 0
            if not 1 <= count <= 4 or len(body) != 4 + 2 * count:
                return "corrupt JPEG (bad scan header)"
            for i in range(count):
                ident, tables = body[1 + 2 * i: 3 + 2 * i]
                if ident not in frame[1]:
                    return f"corrupt JPEG (scan names component {ident}, not in the frame)"
                arithmetic = frame[0] in (0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF)
                if not arithmetic and huffman_tables and not (
                    (0, tables >> 4) in huffman_tables or (1, tables & 15) in huffman_tables
                ):
                    return "corrupt JPEG (scan uses an undefined Huffman table)"
            break
        pos += length
    if data.rfind(b"\xff\xd9", pos) < 0:
        return "truncated JPEG (no end-of-image marker)"
    return None


def _jpeg_tables(body, defined, name, entries):
    """Adds the table ids of a DQT (`entries`=64) or DHT segment to `defined`."""
    defined, i = set(defined), 0
    while i < len(body):
        spec = body[i]
        if entries:  # DQT: precision (4 bits), id; 64 entries of 1 or 2 bytes
            ident, size = spec & 15, 64 * (1 + (spec >> 4))
            if spec >> 4 > 1 or ident > 3:
                return f"corrupt JPEG (bad {name} table)", defined
            defined.add(ident)
            i += 1 + size
        else:  # DHT: class (4 bits), id; 16 counts, then the symbols
            table_class, ident = spec >> 4, spec & 15
            if table_class > 1 or ident > 3 or i + 17 > len(body):
                return f"corrupt JPEG (bad {name} table)", defined
            symbols = sum(body[i + 1: i + 17])
            if symbols > 256:
                return f"corrupt JPEG (bad {name} table)", defined
            defined.add((table_class, ident))
            i += 17 + symbols
    if i != len(body):
        return f"corrupt JPEG ({name} table runs past its segment)", defined
    return None, defined


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


def _decode_fully(data):
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
    except Exception as e:  # PIL raises many types for bad data
        return f"does not decode ({type(e).__name__}: {e})"
    return None


class _Cache:
    """path -> (size, mtime_ns, mode, reason) in SQLite."""

    def __init__(self, path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.db = sqlite3.connect(path, timeout=30)
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


def check_files(paths, *, check="structure", verbose=False, stamps=None):
    """Checks `paths`; returns `{path: reason}` for the bad ones.

    Args:
        paths: file paths.
        check: `"structure"` (headers and markers) or `"full"` (also a full decode).
        verbose: show a progress bar on stderr.
        stamps: optional dict that receives `path: (size, mtime_ns)` of each file
            that exists.
    """
    _check_level(check)
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
            if path in signatures and _usable(cached, signatures[path], check):
                reasons[path] = cached[4]
            else:
                todo.append(path)
        if stamps is not None:
            stamps.update(signatures)
        # PIL decodes without the GIL, so the full check runs on every core; the
        # structure check is Python and as fast on one.
        workers = usable_cores() if check == "full" else 1
        with concurrent.futures.ThreadPoolExecutor(workers) as pool, \
                progress(len(paths), "files checked", enabled=verbose) as bar:
            bar.update(len(paths) - len(todo))
            run = pool.map if workers > 1 else map
            for start in range(0, len(todo), 256):
                chunk = todo[start: start + 256]
                found = run(lambda p: check_file(p, full=check == "full"), chunk)
                rows = []
                for path, reason in zip(chunk, found):
                    reasons[path] = reason
                    if path in signatures:
                        rows.append((os.fsencode(path), *signatures[path], check, _VERSION,
                                     reason))
                cache.put(rows)
                bar.update(len(chunk))
    finally:
        cache.close()
    return {path: reasons[path] for path in paths if reasons[path] is not None}


def _check_level(check):
    if check not in ("structure", "full"):
        raise ValueError(f"`check` must be one of {CHECKS}. Received: check={check!r}")


def _usable(cached, signature, check):
    """Whether a cache row `(size, mtime_ns, mode, version, reason)` answers `check`
    for a file of `signature` `(size, mtime_ns)`: a "full" pass answers both levels."""
    return (
        cached is not None and (cached[0], cached[1]) == tuple(signature)
        and cached[3] == _VERSION
        and (cached[2] == check or (cached[2] == "full" and cached[4] is None))
    )


def check_index(index, *, check="structure", read_records=None, verbose=False):
    """Checks every sample of a `sources.Index`: files, or TFRecord records.

    Args:
        index: a `sources.Index`.
        check: `"structure"` or `"full"`.
        read_records: for an index of TFRecord records, the function that reads
            their images: `read_records(shards, refs)` returns a list of bytes, and
            raises ValueError for a record that is not an image record
            (`dalipipe.tfrecord.load_encoded`).
        verbose: show a progress bar on stderr.

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
                            read_records=read_records, verbose=verbose, stamps=stamps)
        paths = index.shards
    else:
        bad = check_files(index.file_paths, check=check, verbose=verbose, stamps=stamps)
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
                  stamps=None):
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
    """
    _check_level(check)
    signatures = [(info.st_size, info.st_mtime_ns) for info in map(os.stat, shards)]
    if stamps is not None:
        stamps.update(zip(shards, signatures))
    cache = _Cache(os.path.join(cache_dir(), "checks.sqlite"))
    try:
        known = cache.get([os.fsencode(n) for n in names])
        bad, todo = {}, []
        for i, name in enumerate(names):
            cached = known.get(os.fsencode(name))
            if _usable(cached, signatures[refs[i][0]], check):
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
                for i, (data, reason) in zip(chunk, images):
                    if reason is None:
                        reason = check_bytes(data, full=check == "full")
                    rows.append((os.fsencode(names[i]), *signatures[refs[i][0]], check,
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
