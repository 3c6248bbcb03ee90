"""Pre-flight checks: every odd file either loads correctly or is reported by name."""

import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
import zlib

import numpy as np
import pytest
from PIL import Image, ImageOps

from dalipipe import checks, make_dali_pipeline
from dalipipe.checks import driver
from dalipipe.utils import child_env


def jpeg_bytes(image, **save):
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=95, **save)
    return buffer.getvalue()


def image_bytes(image, fmt, **save):
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **save)
    return buffer.getvalue()


def gradient(width=48, height=32):
    y, x = np.mgrid[0:height, 0:width]
    rgb = np.stack([x * 255 // max(1, width - 1), y * 255 // max(1, height - 1), (x + y) % 256], -1)
    return Image.fromarray(rgb.astype(np.uint8))


GOOD_JPEG = jpeg_bytes(gradient())


def with_byte(data, offset, value):
    return data[:offset] + bytes([value]) + data[offset + 1:]


def png_with_bit_depth(depth):
    """A PNG whose header (with a valid checksum) declares `depth` bits per sample."""
    data = bytearray(image_bytes(gradient(), "PNG"))
    data[24] = depth  # signature 8, IHDR length and type 8, width and height 8
    data[29:33] = zlib.crc32(bytes(data[12:29])).to_bytes(4, "big")
    return bytes(data)


GOOD = {
    # name: (bytes, the image PIL sees, as RGB, orientation applied)
    "png_named_jpg.jpg": image_bytes(gradient(), "PNG"),
    "bmp_named_jpg.jpg": image_bytes(gradient(), "BMP"),
    "webp_named_png.png": image_bytes(gradient(), "WEBP", lossless=True),
    "tiff_named_jpg.jpg": image_bytes(gradient(), "TIFF"),
    "cmyk.jpg": jpeg_bytes(gradient().convert("CMYK")),
    "grayscale.jpg": jpeg_bytes(gradient().convert("L")),
    "png16.png": image_bytes(Image.fromarray((np.arange(32 * 48).reshape(32, 48) * 40).astype(np.uint16)), "PNG"),
    "rgba.png": image_bytes(gradient().convert("RGBA"), "PNG"),
    "progressive.jpg": jpeg_bytes(gradient(), progressive=True),
    "one_pixel.png": image_bytes(Image.new("RGB", (1, 1), (200, 10, 30)), "PNG"),
}
BAD = {
    # name: (bytes, the reason must contain)
    "empty.jpg": (b"", "empty file"),
    "truncated.jpg": (GOOD_JPEG[: len(GOOD_JPEG) // 2], "truncated JPEG"),
    "random.jpg": (np.random.default_rng(0).integers(0, 256, 5000, np.uint8).tobytes(),
                   "not an image DALI decodes"),
    "notes.jpg": (b"just some text, not an image\n" * 10, "not an image DALI decodes"),
    "animation.jpg": (image_bytes(gradient(), "GIF"), "GIF"),
    "bad_marker.jpg": (GOOD_JPEG[:2] + b"\x00\x00" + GOOD_JPEG[4:],
                       "JPEG whose header DALI's decoder cannot read"),
    # Header fields that only the decoder knows are wrong.
    "unknown_marker.jpg": (with_byte(GOOD_JPEG, 3, 0x46),
                           "JPEG that DALI's decoder rejects (Unsupported marker type 0x46)"),
    "precision_12.jpg": (with_byte(GOOD_JPEG, GOOD_JPEG.index(b"\xff\xc0") + 4, 12),
                         "JPEG that DALI's decoder rejects (Unsupported JPEG data precision 12)"),
    "bit_depth_3.png": (png_with_bit_depth(3), "PNG whose header DALI's decoder cannot read"),
    "bad_crc.png": (image_bytes(gradient(), "PNG")[:40] + b"\x00" * 8
                    + image_bytes(gradient(), "PNG")[48:], "corrupt PNG"),
}


@pytest.fixture()
def zoo(tmp_path):
    """A class folder of good odd files, one of bad ones, and special files."""
    (tmp_path / "good").mkdir()
    (tmp_path / "bad").mkdir()
    for name, data in GOOD.items():
        (tmp_path / "good" / name).write_bytes(data)
    for name, (data, _) in BAD.items():
        (tmp_path / "bad" / name).write_bytes(data)
    os.symlink(tmp_path / "nowhere.jpg", tmp_path / "bad" / "broken_link.jpg")
    os.mkfifo(tmp_path / "bad" / "fifo.jpg")  # would block a reader forever
    return tmp_path


def test_each_bad_file_is_reported_with_its_reason(zoo):
    bad = checks.check_files(sorted(str(p) for p in (zoo / "bad").iterdir()))
    reasons = {os.path.basename(p): r for p, r in bad.items()}
    for name, (_, expected) in BAD.items():
        assert expected in reasons.pop(name), (name, bad)
    assert "broken symbolic link" in reasons.pop("broken_link.jpg")
    assert "not a regular file" in reasons.pop("fifo.jpg")
    assert not reasons


def test_a_check_gives_one_verdict_per_file(tmp_path, fresh_cache):
    """A good JPEG, one cut inside its image data (the decoder read its header) and a
    missing file: the reason, the size as the decoder read it and the stamp each,
    the same when checked and when read from the cache."""
    good, truncated = tmp_path / "good.jpg", tmp_path / "truncated.jpg"
    good.write_bytes(GOOD_JPEG)
    truncated.write_bytes(GOOD_JPEG[:-30])
    paths = [str(good), str(truncated), str(tmp_path / "missing.jpg")]

    def stamp(path):
        info = os.stat(path)
        return info.st_size, info.st_mtime_ns

    expected = [
        checks.Verdict(paths[0], None, (48, 32), stamp(good)),
        checks.Verdict(paths[1], "truncated JPEG (no end-of-image marker)", (48, 32),
                       stamp(truncated)),
        checks.Verdict(paths[2], "does not exist", None, None),
    ]
    assert checks.check_paths(paths) == expected
    cached = driver.COUNTS["cached"]
    assert checks.check_paths(paths) == expected
    assert driver.COUNTS["cached"] == cached + 2  # the missing file is checked again
    assert checks.bad_files(expected) == {p: v.reason for p, v in zip(paths[1:], expected[1:])}
    assert checks.image_sizes(expected) == [(48, 32)]


def test_good_odd_files_pass_and_load_like_pil(zoo):
    paths = [str(zoo / "good" / name) for name in GOOD]
    assert checks.check_files(paths, check="full") == {}
    pipe = make_dali_pipeline(paths, labels=None, image_size=(8, 8), batch_size=4,
                              shuffle=False, normalization=None, device="cpu")
    images = np.concatenate([b[0] for b in pipe.epoch()])
    assert images.shape == (len(GOOD), 8, 8, 3)
    for name, image in zip(GOOD, images):
        with Image.open(zoo / "good" / name) as source:
            pil = source.convert("RGB") if source.mode != "I;16" else None
            if pil is None:  # 16-bit grey: compare the rescaled 8-bit values
                pil = Image.fromarray((np.asarray(source, np.float64) / 257).round().astype(np.uint8)).convert("RGB")
            reference = np.asarray(pil.resize((8, 8), Image.BILINEAR), np.float32)
        # CMYK conversion and JPEG decoders differ a little: stated tolerance 12.
        assert np.abs(image - reference).mean() < 12, name


def test_exif_orientation_is_applied(tmp_path):
    array = np.zeros((20, 40, 3), np.uint8)
    array[:, :20] = (255, 0, 0)  # left half red
    image = Image.fromarray(array)
    exif = image.getexif()
    exif[0x0112] = 6  # shown rotated 90 degrees clockwise
    path = tmp_path / "rotated.jpg"
    image.save(path, exif=exif, quality=95)
    upright = np.asarray(ImageOps.exif_transpose(Image.open(path)))
    assert upright.shape == (40, 20, 3)
    pipe = make_dali_pipeline([str(path)], labels=None, image_size=(40, 20), batch_size=1,
                              normalization=None, interpolation="nearest", device="cpu")
    (images,) = next(iter(pipe.epoch()))
    assert np.abs(images[0] - upright).mean() < 8


def test_very_large_image_loads(tmp_path):
    path = tmp_path / "huge.jpg"
    Image.new("RGB", (10000, 10000), (10, 200, 30)).save(path, quality=90)
    pipe = make_dali_pipeline([str(path)], labels=None, image_size=(16, 16), batch_size=1,
                              normalization=None, device="cpu")
    (images,) = next(iter(pipe.epoch()))
    np.testing.assert_allclose(images[0].reshape(-1, 3).mean(0), (10, 200, 30), atol=3)


def test_raise_lists_every_bad_file_before_training(zoo):
    with pytest.raises(ValueError) as info:
        make_dali_pipeline(str(zoo), device="cpu")
    message = str(info.value)
    assert f"{len(BAD) + 2} of {len(BAD) + 2 + len(GOOD)} files cannot be loaded" in message
    for name in list(BAD) + ["broken_link.jpg", "fifo.jpg"]:
        assert name in message
    report = message.split("Report: ")[1].split("\n")[0]
    assert len(open(report).read().splitlines()) == len(BAD) + 3  # a header line


def test_skip_leaves_bad_files_out_and_drops_empty_classes(zoo):
    left_out = rf"Left out {len(BAD) + 2} of {len(BAD) + 2 + len(GOOD)} files"
    with pytest.warns(UserWarning, match=left_out + r".*classes left without images: \['bad'\]"):
        pipe = make_dali_pipeline(str(zoo), on_bad_file="skip", image_size=(4, 4), batch_size=4,
                                  device="cpu")
    assert pipe.class_names == ["good"] and len(pipe.file_paths) == len(GOOD)
    assert sum(len(b[0]) for b in pipe.epoch()) == len(GOOD)
    assert set(pipe.labels.tolist()) == {0}


def test_missing_path_in_a_table_is_a_bad_file(zoo, tmp_path):
    good = [str(zoo / "good" / name) for name in GOOD]
    missing = str(tmp_path / "gone.jpg")
    with pytest.raises(ValueError, match=r"gone\.jpg: does not exist"):
        make_dali_pipeline(good + [missing], labels=[0] * (len(good) + 1), device="cpu")
    with pytest.warns(UserWarning, match="Left out 1 of"):
        pipe = make_dali_pipeline(good + [missing], labels=[0] * len(good) + [1],
                                  class_names=["a", "b"], on_bad_file="skip", device="cpu")
    assert pipe.class_names == ["a", "b"]  # given by the user: kept


def test_non_utf8_file_name(tmp_path):
    name = os.fsencode(str(tmp_path)) + b"/caf\xe9.jpg"
    with open(name, "wb") as f:
        f.write(GOOD_JPEG)
    path = os.fsdecode(name)
    assert checks.check_files([path]) == {}
    pipe = make_dali_pipeline([path], labels=None, image_size=(4, 4), batch_size=1, device="cpu")
    assert len(next(iter(pipe.epoch()))[0]) == 1


def test_unreadable_file(tmp_path):
    """Root reads every file whatever its mode: then the check runs as `nobody`, in a
    user namespace of its own (`unshare -U`)."""
    folder = tempfile.mkdtemp(dir=tempfile.gettempdir())  # traversable by nobody
    try:
        os.chmod(folder, 0o755)
        path = os.path.join(folder, "locked.jpg")
        with open(path, "wb") as f:
            f.write(GOOD_JPEG)
        os.chmod(path, 0)
        if os.geteuid() != 0:
            reason = checks.check_file(path)
        else:
            unshare = shutil.which("unshare")
            if unshare is None:
                pytest.skip("running as root, and `unshare` is not there to drop root")
            run = subprocess.run(
                [unshare, "-U", sys.executable, "-c",
                 "import sys; from dalipipe import checks; print(checks.check_file(sys.argv[1]))",
                 path],
                capture_output=True, text=True, timeout=120,
                env=child_env(),
            )
            if run.returncode != 0 and "unshare" in run.stderr:
                pytest.skip(f"running as root, and `unshare -U` failed: {run.stderr.strip()}")
            assert run.returncode == 0, run.stderr
            reason = run.stdout.strip()
        assert reason.startswith("cannot be read"), reason
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_results_are_cached_and_invalidated_by_changes(tmp_path, monkeypatch):
    monkeypatch.setenv("DALIPIPE_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "a.jpg"
    path.write_bytes(GOOD_JPEG)
    assert checks.check_files([str(path)]) == {}
    # Other bytes with the same size and modification time: the cache answers.
    stamp = os.stat(path)
    path.write_bytes(bytes(len(GOOD_JPEG)))
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert checks.check_files([str(path)]) == {}
    assert "not an image" in checks.check_files([str(path)], check="full")[str(path)]
    path.write_bytes(GOOD_JPEG[:100])  # replaced: new size and time
    assert "truncated" in checks.check_files([str(path)])[str(path)]
    assert os.path.exists(tmp_path / "cache" / "checks.sqlite")


def test_a_damaged_cache_file_is_started_again(tmp_path, monkeypatch):
    monkeypatch.setenv("DALIPIPE_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "checks.sqlite").write_bytes(b"not a database\n" * 100)
    path = tmp_path / "a.jpg"
    path.write_bytes(GOOD_JPEG[:100])
    for _ in range(2):
        assert "truncated" in checks.check_files([str(path)])[str(path)]


def test_check_option_errors(tmp_path):
    with pytest.raises(ValueError, match=r"`check` must be one of \('structure', 'full', None\). Received: check='fast'"):
        make_dali_pipeline([str(tmp_path)], check="fast", device="cpu")
    with pytest.raises(ValueError, match=r"Received: on_bad_file='ignore'"):
        make_dali_pipeline([str(tmp_path)], on_bad_file="ignore", device="cpu")


def test_check_none_skips_the_check(zoo):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pipe = make_dali_pipeline(str(zoo / "good"), labels=None, check=None, device="cpu",
                                  shuffle=False)
    assert len(pipe.file_paths) == len(GOOD)


def test_check_command_summarizes_and_sets_the_exit_status(zoo, capsys):
    from dalipipe.cli import main

    assert main(["check", str(zoo / "good")]) == 0
    assert f"all {len(GOOD)} files are sound" in capsys.readouterr().out
    assert main(["check", str(zoo)]) == 1
    out = capsys.readouterr().out
    assert f"{len(BAD) + 2} of {len(BAD) + 2 + len(GOOD)} files are bad" in out
    assert "truncated JPEG" in out and "report: " in out


def test_file_deleted_after_the_check_is_named(zoo):
    pipe = make_dali_pipeline(str(zoo / "good"), labels=None, image_size=(4, 4), batch_size=4,
                              shuffle=False, device="cpu")
    victim = pipe.file_paths[2]
    os.remove(victim)
    with pytest.raises(RuntimeError, match=f"{victim} was checked before training and cannot "
                                           "be opened now"):
        list(pipe.epoch())


def test_file_replaced_after_the_check_is_named_and_a_touched_one_is_fine(tmp_path):
    folder = tmp_path / "a"
    folder.mkdir()
    for i in range(6):
        (folder / f"{i}.jpg").write_bytes(GOOD_JPEG)
    pipe = make_dali_pipeline(str(tmp_path), image_size=(4, 4), batch_size=4, shuffle=False,
                              device="cpu")
    os.utime(pipe.file_paths[1], ns=(1, 1))  # changed stamp, same sound content
    assert sum(len(images) for images, _ in pipe.epoch()) == 6
    victim = pipe.file_paths[4]
    with open(victim, "wb") as f:
        f.write(GOOD_JPEG[: len(GOOD_JPEG) // 2])
    with pytest.raises(RuntimeError, match=f"{victim} changed after the check before "
                                           "training and is now bad: corrupt or truncated"):
        list(pipe.epoch())


def test_file_replaced_during_fit_is_named(tmp_path):
    """Through DALI's TensorFlow plugin: the error that stops `fit` names the file."""
    keras = pytest.importorskip("keras")
    from dalipipe import make_dali_dataset

    folder = tmp_path / "a"
    folder.mkdir()
    for i in range(8):
        (folder / f"{i}.jpg").write_bytes(GOOD_JPEG)
    dataset = make_dali_dataset(str(tmp_path), image_size=(4, 4), batch_size=4, device="cpu")
    victim = dataset.file_paths[5]
    with open(victim, "wb") as f:
        f.write(b"not an image any more")
    model = keras.Sequential([keras.Input((4, 4, 3)), keras.layers.Flatten(),
                              keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    with pytest.raises(Exception, match=f"{victim} changed after the check before training "
                                        "and is now bad: not an image DALI decodes"):
        model.fit(dataset, epochs=1, verbose=0)


@pytest.mark.parametrize("name", ["unknown_marker.jpg", "bad_marker.jpg"])
def test_without_the_check_the_file_dali_stops_at_is_named(zoo, name):
    """DALI's own message ("Failed to decode sample #1", or "nvImageCodec failure" for
    a header) names no file: the native runner does, with the decoder's reason."""
    good = [str(zoo / "good" / g) for g in GOOD]
    bad = str(zoo / "bad" / name)
    pipe = make_dali_pipeline(good[:5] + [bad] + good[5:], labels=None, image_size=(4, 4),
                              batch_size=4, shuffle=False, check=None, device="cpu")
    expected = re.escape(f"DALI failed to decode {bad}: {BAD[name][1]}")
    for _ in range(2):  # the next epoch builds a new DALI pipeline and stops there again
        with pytest.raises(RuntimeError, match=expected):
            list(pipe.epoch())


def test_fit_with_the_default_check_leaves_out_what_dali_rejects(zoo):
    keras = pytest.importorskip("keras")
    from dalipipe import make_dali_dataset

    with pytest.warns(UserWarning, match=f"Left out {len(BAD) + 2} of"):
        dataset = make_dali_dataset(str(zoo), image_size=(8, 8), batch_size=4,
                                    on_bad_file="skip", device="cpu")
    model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                              keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    assert len(model.fit(dataset, epochs=2, verbose=0).history["loss"]) == 2


def test_a_complete_jpeg_with_a_damaged_end_marker_passes_and_loads(tmp_path):
    """DALI's decoder decodes it (libjpeg warns), so the check passes it too."""
    path = tmp_path / "end.jpg"
    path.write_bytes(GOOD_JPEG[:-1] + b"\x46")
    assert checks.check_files([str(path)]) == {}
    assert checks.check_files([str(path)], check="full") == {}
    pipe = make_dali_pipeline([str(path)], labels=None, image_size=(4, 4), batch_size=1,
                              device="cpu")
    assert len(next(iter(pipe.epoch()))[0]) == 1


@pytest.mark.slow
def test_fuzz_corpus_through_fit_has_no_unnamed_error_crash_or_hang():
    """A small fixed corpus of every mutation, through `model.fit` with each check
    level (`benchmarks/fuzz.py` runs 1,000)."""
    pytest.importorskip("keras")
    from benchmarks import fuzz

    for check in ("structure", "full"):
        summary = fuzz.fuzz(48, 1, check, timeout=30)["summary"]
        assert summary["ok"], summary
        assert set(summary["per_mutation"]) == set(fuzz.MUTATIONS)
        assert summary["outcomes"]["reported"] > 0 and summary["outcomes"]["decoded"] > 0
