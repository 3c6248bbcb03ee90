"""Every accepted format: a real file of each extension in `IMAGE_EXTENSIONS` loads
with its pixel values, damaged files of each format are reported before training
(none stops `fit`), and a small fuzz run of every format goes through `fit`."""

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image, features

from benchmarks import mutations
from dalipipe import checks, make_dali_pipeline
from dalipipe.utils import IMAGE_EXTENSIONS

COLOUR = (200, 40, 90)
# extension: (PIL mode, save options, the largest difference allowed per channel)
FILES = {
    ".bmp": ("RGB", {}, 0),
    ".jpeg": ("RGB", {"quality": 95}, 4),
    ".jpg": ("RGB", {"quality": 95}, 4),
    ".jp2": ("RGB", {}, 0),
    ".j2k": ("RGB", {}, 0),
    ".png": ("RGB", {}, 0),
    ".pbm": ("1", {}, 0),
    ".pgm": ("L", {}, 0),
    ".ppm": ("RGB", {}, 0),
    ".pnm": ("RGB", {}, 0),
    ".tif": ("RGB", {"compression": "tiff_lzw"}, 0),
    ".tiff": ("RGB", {}, 0),
    ".webp": ("RGB", {"lossless": True}, 0),
}
NEEDS = {".jp2": "jpg_2000", ".j2k": "jpg_2000", ".webp": "webp"}


def solid(mode, size=(24, 16)):
    """A solid image in `mode`, and the RGB value DALI should decode it to."""
    image = Image.new("1", size, 1) if mode == "1" else Image.new("RGB", size, COLOUR).convert(mode)
    return image, np.array(image.convert("RGB"))[0, 0]


def encoded(kind, mode="RGB", **options):
    """A solid image of PIL format `kind`, as bytes."""
    buffer = io.BytesIO()
    solid(mode, (48, 40))[0].save(buffer, format=kind, **options)
    return buffer.getvalue()


def test_every_accepted_extension_is_covered():
    assert set(FILES) == set(IMAGE_EXTENSIONS)


@pytest.mark.parametrize("extension", sorted(FILES))
def test_a_file_of_each_extension_passes_the_check_and_loads(tmp_path, extension):
    if extension in NEEDS and not features.check(NEEDS[extension]):
        pytest.skip(f"PIL is built without {NEEDS[extension]}")
    mode, options, tolerance = FILES[extension]
    image, expected = solid(mode)
    path = tmp_path / f"image{extension}"
    image.save(path, **options)
    assert checks.check_files([str(path)]) == {}
    pipe = make_dali_pipeline([str(path)], labels=None, image_size=(16, 24), batch_size=1,
                              device="cpu", normalization=None, shuffle=False)
    decoded = np.asarray(next(iter(pipe.epoch()))[0])[0]
    assert decoded.shape == (16, 24, 3)
    assert np.abs(decoded.astype(float) - expected).max() <= tolerance


def png_with(chunks_edit):
    """A sound PNG with `chunks_edit(chunks)` applied, CRCs recomputed."""
    chunks = mutations.png_chunks(encoded("PNG"))
    chunks_edit(chunks)
    return bytes(mutations.png_build(chunks))


def idat(chunks):
    return [c for c in chunks if c[0] == b"IDAT"][0]


def _garbage(chunks):
    body = bytearray(idat(chunks)[1])
    body[len(body) // 3: len(body) // 3 + 20] = bytes(range(7, 27))
    idat(chunks)[1] = bytes(body)


def _cut(chunks):
    idat(chunks)[1] = idat(chunks)[1][: len(idat(chunks)[1]) // 2]


def _short(chunks):
    raw = zlib.decompress(idat(chunks)[1])
    idat(chunks)[1] = zlib.compress(raw[: len(raw) // 2])


def _bad_filter(chunks):
    raw = bytearray(zlib.decompress(idat(chunks)[1]))
    raw[0] = 9
    idat(chunks)[1] = zlib.compress(bytes(raw))


def _extra_data(chunks):
    idat(chunks)[1] = zlib.compress(zlib.decompress(idat(chunks)[1]) + b"\x00" * 300)


def cut(data, fraction):
    return data[: int(len(data) * fraction)]


def garbage(data):
    data = bytearray(data)
    middle = len(data) // 2
    data[middle: middle + 64] = np.random.default_rng(0).integers(0, 256, 64, np.uint8).tobytes()
    return bytes(data)


def _damaged():
    """name: (bytes, what the reason must contain) for files DALI cannot decode."""
    tiff = encoded("TIFF", compression="tiff_lzw")
    found = {
        "idat_garbage.png": (png_with(_garbage), "PNG"),
        "idat_cut.png": (png_with(_cut), "PNG"),
        "short_stream.png": (png_with(_short), "truncated PNG image data"),
        "bad_filter.png": (png_with(_bad_filter), "row filter type 9"),
        "cut.tif": (cut(encoded("TIFF"), 0.6), "TIFF"),
        "lzw_garbage.tif": (garbage(tiff), "TIFF"),
        "cut.webp": (cut(encoded("WEBP", lossless=True), 0.6), "WebP"),
        "bad_chunk_size.webp": (_webp_chunk_size(encoded("WEBP", quality=80)), "WebP"),
    }
    if features.check("jpg_2000"):
        found["cut.jp2"] = (cut(encoded("JPEG2000"), 0.6), "JPEG 2000")
        found["garbage.j2k"] = (garbage(encoded("JPEG2000", quality_mode="rates",
                                                quality_layers=[20])), "JPEG 2000")
    return found


def _webp_chunk_size(data):
    data = bytearray(data)
    struct.pack_into("<I", data, 16, struct.unpack("<I", data[16:20])[0] - 40)
    return bytes(data)


DAMAGED = _damaged()
SOUND_ODDITIES = {
    # libpng warns about these and decodes them
    "extra_image_data.png": png_with(_extra_data),
    "ancillary_crc.png": bytes(mutations.png_build(
        mutations.png_chunks(encoded("PNG", dpi=(72, 72))), broken_crc=(1,))),
    "split_idat.png": png_with(lambda chunks: chunks.__setitem__(
        slice(1, 2), [[b"IDAT", idat(chunks)[1][:30]], [b"IDAT", idat(chunks)[1][30:]]])),
}


@pytest.fixture()
def mixed(tmp_path):
    """A class folder of sound files of every format and one of damaged ones."""
    for folder in ("good", "bad"):
        (tmp_path / folder).mkdir()
    for name, data in SOUND_ODDITIES.items():
        (tmp_path / "good" / name).write_bytes(data)
    for kind, extension in (("PNG", "png"), ("TIFF", "tif"), ("WEBP", "webp"), ("BMP", "bmp"),
                            ("PPM", "ppm")):
        (tmp_path / "good" / f"sound.{extension}").write_bytes(encoded(kind))
    for name, (data, _) in DAMAGED.items():
        (tmp_path / "bad" / name).write_bytes(data)
    return tmp_path


def test_damaged_files_of_every_format_are_reported_and_oddities_pass(mixed):
    found = checks.check_files(sorted(str(p) for p in (mixed / "bad").iterdir())
                               + sorted(str(p) for p in (mixed / "good").iterdir()))
    reasons = {path.rsplit("/", 1)[1]: reason for path, reason in found.items()}
    assert set(reasons) == set(DAMAGED), reasons
    for name, (_, expected) in DAMAGED.items():
        assert expected in reasons[name], (name, reasons[name])


def test_sound_oddities_decode_in_dali(mixed):
    paths = sorted(str(p) for p in (mixed / "good").iterdir())
    pipe = make_dali_pipeline(paths, labels=None, image_size=(8, 8), batch_size=len(paths),
                              device="cpu", check=None)
    assert len(next(iter(pipe.epoch()))[0]) == len(paths)


def test_fit_with_the_default_check_skips_damaged_files_of_every_format(mixed):
    keras = pytest.importorskip("keras")
    from dalipipe import make_dali_dataset

    with pytest.warns(UserWarning, match=f"Left out {len(DAMAGED)} of"):
        dataset = make_dali_dataset(str(mixed), image_size=(8, 8), batch_size=4,
                                    on_bad_file="skip", device="cpu",
                                    class_names=["good", "bad"])
    model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                              keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    assert len(model.fit(dataset, epochs=2, verbose=0).history["loss"]) == 2


@pytest.mark.slow  # fit over a fuzz corpus; the damaged-files tests are the quick ones
def test_a_small_fuzz_run_of_every_format_through_fit():
    """A mutant of each mutation of each format but JPEG (`test_checks` fuzzes
    JPEG) through `model.fit`; `benchmarks/fuzz.py --format F` runs 1,000."""
    pytest.importorskip("keras")
    from benchmarks import fuzz

    formats = [f for f in fuzz.FORMATS if f != "jpeg"
               and (f != "jpeg2000" or features.check("jpg_2000"))]
    count = max(len(mutations.MUTATIONS[f]) for f in formats)
    summary = fuzz.fuzz(count, 3, "structure", 30, tuple(formats))["summary"]
    assert summary["ok"], summary
    assert summary["outcomes"]["reported"] > 0 and summary["outcomes"]["decoded"] > 0
