"""Masks and boxes from object storage: the sample data with masks and boxes
(`make_dense_sample_dataset`) copied to `s3://dense/data/` on the session's local S3
server (`s3_server`), and each remote source's epoch compared with the same call on
the local copy (`make_dali_pipeline(...).epoch()`). `gs://` on the local GCS
emulator of `test_storage.py`."""

import io
import os

import numpy as np
import pytest
from PIL import Image

from dalipipe import make_dali_pipeline
from dalipipe.annotations.sample import MASK_CLASS_NAMES
from dalipipe.sample_data import make_dense_sample_dataset
from test_storage import _upload_gcs, gcs_emulator  # noqa: F401 (a fixture)
from s3_server import upload_folder

pytest.importorskip("nvidia.dali")

BUCKET = "dense"
DATA = f"s3://{BUCKET}/data"
OPTIONS = dict(image_size=(24, 32), batch_size=4, seed=5, device="cpu", verbose=False,
               num_threads=1, augment=True)
MASKS = dict(OPTIONS, class_names=list(MASK_CLASS_NAMES))
BOXES = dict(OPTIONS, max_boxes=4, bounding_box_format="xyxy")


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    """6 sample images with their palette masks, `labels.csv`, `instances.json` and
    `boxes.csv`."""
    folder = tmp_path_factory.mktemp("dense")
    make_dense_sample_dataset(str(folder), num_images=6, seed=1, crop_width=(48, 64))
    return str(folder)


@pytest.fixture(scope="module")
def bucket(s3_server, dense):
    """`dense` copied to `s3://dense/data/`."""
    client = s3_server.client()
    client.create_bucket(Bucket=BUCKET)
    upload_folder(client, dense, BUCKET, "data")
    return s3_server


def outputs(pipe):
    return [np.concatenate(parts) for parts in zip(*pipe.epoch(0))]


def assert_same_epoch(remote, local, dense, base=DATA):
    assert remote.file_paths == [p.replace(dense, base) for p in local.file_paths]
    assert remote.class_names == local.class_names
    got, expected = outputs(remote), outputs(local)
    assert len(got) == len(expected) and len(got[0]) == len(remote.file_paths)
    assert (got[1] > 0).any()  # some shape's mask ids, or some box
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("images, masks", [
    (f"{DATA}/images", f"{DATA}/masks/"),  # a prefix of images, a prefix of masks
    (f"{DATA}/labels.csv", "mask"),  # a table in the bucket, its relative paths URIs
    ("images", f"{DATA}/masks"),  # local images, masks in the bucket
], ids=["prefixes", "table", "mixed"])
def test_masks_from_s3_equal_the_local_ones(bucket, dense, images, masks, fresh_cache):
    local_masks = "mask" if masks == "mask" else os.path.join(dense, "masks")
    local = make_dali_pipeline(os.path.join(dense, images.replace(DATA + "/", "")),
                               masks=local_masks, **MASKS)
    source = images if "://" in images else os.path.join(dense, images)
    remote = make_dali_pipeline(source, masks=masks, **MASKS)
    assert_same_epoch(remote, local, dense, DATA if "://" in images else dense)
    # The graph reads local copies in the cache, never a mask's URI.
    assert all(p.startswith(fresh_cache) for p in remote.index.mask_paths)


@pytest.mark.parametrize("images, boxes", [
    (f"{DATA}/images/", "instances.json"), (f"{DATA}/images/", "boxes.csv"),
    ("images", "instances.json"),  # local images, the COCO JSON in the bucket
], ids=["coco", "table", "mixed"])
def test_boxes_from_s3_equal_the_local_ones(bucket, dense, images, boxes):
    local = make_dali_pipeline(os.path.join(dense, "images"),
                               boxes=os.path.join(dense, boxes), **BOXES)
    if "://" in images:
        remote = make_dali_pipeline(images, boxes=f"{DATA}/{boxes}", **BOXES)
        assert_same_epoch(remote, local, dense)
    else:
        remote = make_dali_pipeline(os.path.join(dense, images), boxes=f"{DATA}/{boxes}",
                                    **BOXES)
        assert_same_epoch(remote, local, dense, dense)


def test_a_missing_remote_mask_is_named(bucket, dense):
    client = bucket.client()
    rows = ["path,mask"] + [f"../data/images/{name},../data/masks/{name}"
                            for name in sorted(os.listdir(os.path.join(dense, "images")))]
    rows[2] = rows[2].replace("masks/", "masks/gone_")
    client.put_object(Bucket=BUCKET, Key="missing/labels.csv", Body="\n".join(rows).encode())
    gone = f"{DATA}/masks/gone_" + rows[2].rsplit("gone_", 1)[1]
    with pytest.raises(ValueError, match=rf"its mask '{gone}' does not exist"):
        make_dali_pipeline(f"s3://{BUCKET}/missing/labels.csv", masks="mask", **MASKS)
    with pytest.raises(ValueError, match=rf"`masks` must be a folder of image files. Received: "
                                         rf"masks='s3://{BUCKET}/nothing/'"):
        make_dali_pipeline(f"{DATA}/images", masks=f"s3://{BUCKET}/nothing/", **MASKS)


def test_a_changed_remote_mask_is_fetched_again(bucket, fresh_cache):
    from dalipipe.annotations.masks import greyscale_masks

    client = bucket.client()
    uri, ids = f"s3://{BUCKET}/changed/m.png", np.array([[0, 1], [2, 3]], np.uint8)
    for version in (ids, ids[::-1]):
        out = io.BytesIO()
        Image.fromarray(version).save(out, "PNG")  # already 8-bit greyscale: kept as it is
        client.put_object(Bucket=BUCKET, Key="changed/m.png", Body=out.getvalue())
        start = bucket.log_size()
        path, again = greyscale_masks([uri, uri])
        assert again == path and path.startswith(fresh_cache)
        np.testing.assert_array_equal(np.asarray(Image.open(path)), version)
        assert greyscale_masks([uri]) == [path]
        assert bucket.object_gets(BUCKET, start) == ["changed/m.png"]  # fetched once


def test_a_turned_remote_image_is_refused(bucket, dense):
    """A JPEG's EXIF is read from its head (one ranged GET), or from the whole object
    where the head does not parse (an ICC profile past `EXIF_HEAD`)."""
    from dalipipe.annotations.checks import EXIF_HEAD, turned_images

    exif = Image.Exif()
    exif[0x0112] = 6
    for name, extra in (("a.jpg", {}), ("big.jpg", {"icc_profile": b"x" * EXIF_HEAD})):
        out = io.BytesIO()
        Image.new("RGB", (8, 6)).save(out, "JPEG", exif=exif, **extra)
        bucket.client().put_object(Bucket=BUCKET, Key=f"turned/{name}", Body=out.getvalue())
    uris = [f"s3://{BUCKET}/turned/a.jpg", f"s3://{BUCKET}/turned/big.jpg",
            f"{DATA}/images/x.png", f"{DATA}/images/" + sorted(os.listdir(os.path.join(dense, "images")))[0]]
    start = bucket.log_size()
    reasons = turned_images(uris, "boxes")
    for reason in reasons[:2]:
        assert reason.startswith("has the EXIF orientation 6, which DALI applies to the "
                                 "image and not to its boxes")
    assert reasons[2:] == [None, None]  # missing (the image check names it); not turned
    assert sorted(bucket.object_gets(BUCKET, start)) == [
        "data/images/" + os.path.basename(uris[3]), "data/images/x.png",  # one GET each
        "turned/a.jpg", "turned/big.jpg", "turned/big.jpg"]


def test_gcs_boxes_and_masks(gcs_emulator, dense):
    """`gs://` images with boxes, and with masks in `gs://` or local (dalipipe reads
    the images and feeds their bytes, each beside its mask's local path), and masks
    in `gs://` with local images: each epoch is the local files' one, natively (as
    formats "pydataset" and "grain" run it) and in a shard with padding (format "tf":
    `test_storage.test_training_from_gcs_equals_the_local_folder`)."""
    bucket = _upload_gcs(dense, "dense")
    bucket.blob("dense/instances.json").upload_from_filename(
        os.path.join(dense, "instances.json"))
    base = "gs://photos/dense"
    local = make_dali_pipeline(os.path.join(dense, "images"),
                               boxes=os.path.join(dense, "instances.json"), **BOXES)
    remote = make_dali_pipeline(f"{base}/images", boxes=f"{base}/instances.json", **BOXES)
    assert_same_epoch(remote, local, dense, base)
    images, masks = os.path.join(dense, "images"), os.path.join(dense, "masks")
    local = make_dali_pipeline(images, masks=masks, **MASKS)
    remote = make_dali_pipeline(images, masks=f"{base}/masks", **MASKS)
    assert_same_epoch(remote, local, dense, dense)
    for remote_masks in (f"{base}/masks", masks):
        remote = make_dali_pipeline(f"{base}/images", masks=remote_masks, **MASKS)
        assert remote.feeds_bytes and not local.feeds_bytes
        assert_same_epoch(remote, local, dense, base)
    # Replicas 2 and 3 of 4: their second step is padding (6 samples, batches of 4).
    got, expected = (list(pipe.shard([2, 3], 4).epoch(0)) for pipe in (remote, local))
    assert (got[-1][-1] == 0).all() and (got[-1][1] == 0).all()  # mask_fill_value
    for batch, want in zip(got, expected, strict=True):
        for a, b in zip(batch, want, strict=True):
            np.testing.assert_array_equal(a, b)
