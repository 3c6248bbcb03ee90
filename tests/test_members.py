"""Masks and boxes from WebDataset tar shards (`dalipipe.annotations.members`):
`dalipipe convert --masks` and `--boxes` write the companion members, and the shards
give the batches of the same images as a folder for the same seed, through
`augment`, natively and in format "tf"; damaged members named by shard and member;
refusals. Torch and JAX: MODE `shards` of `backend_job.py` (`test_shards.py`)."""

import glob
import json
import os
import re
import tarfile

import numpy as np
import pytest

from dalipipe import make_dali_dataset, make_dali_pipeline
from dalipipe.cli import main
from dalipipe.sample_data import make_dense_sample_dataset
from helpers import bad_idat_crc, write_tar
from test_masks import SAMPLE

pytest.importorskip("nvidia.dali")

OPTIONS = dict(image_size=(48, 64), batch_size=4, seed=3, device="cpu", verbose=False,
               num_threads=1, augment=True)
BOXES = dict(bounding_box_format="yxyx")


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DALIPIPE_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    """The dense sample data (8 images, palette masks, COCO boxes) and its shards,
    written by `dalipipe convert`: `(folder, mask shards' glob, box shards' glob)`."""
    folder = str(tmp_path_factory.mktemp("dense"))
    make_dense_sample_dataset(folder, **SAMPLE)
    images = os.path.join(folder, "images")
    for out, flag, value in (("m", "--masks", "masks"), ("b", "--boxes", "instances.json")):
        assert main(["convert", images, os.path.join(folder, out), "--shards", "2",
                     "--format", "webdataset", flag, os.path.join(folder, value)]) == 0
    return folder, os.path.join(folder, "m", "train-*.tar"), os.path.join(folder, "b", "*.tar")


def folder_options(folder, case):
    return {"masks": dict(masks=os.path.join(folder, "masks")),
            "boxes": dict(boxes=os.path.join(folder, "instances.json"), **BOXES)}[case]


def shard_options(case):
    return {"masks": dict(masks=".seg.png"), "boxes": dict(boxes=".json", **BOXES)}[case]


def members(shard):
    with tarfile.open(shard) as t:
        return {m.name: t.extractfile(m).read() for m in t.getmembers()}


def test_convert_writes_greyscale_masks_and_the_boxes_json(dense):
    folder, masks, boxes = dense
    found = members(sorted(glob.glob(masks))[0])
    assert sorted(found)[:3] == ["00000000.png", "00000000.seg.png", "00000001.png"]
    assert found["00000000.seg.png"][25] == 0  # PNG colour type 0: greyscale, not palette
    meta = json.loads(members(sorted(glob.glob(boxes))[0])["00000000.json"])
    assert set(meta) == {"boxes", "labels", "bounding_box_format", "filename"}
    assert meta["bounding_box_format"] == "xyxy" and len(meta["boxes"]) == len(meta["labels"])
    assert set(meta["labels"]) <= {"circle", "square", "triangle"}


@pytest.mark.parametrize("case", ["masks", "boxes"])
def test_shards_give_the_folder_s_batches_for_the_seed(dense, case):
    folder, masks, boxes = dense
    shards = make_dali_pipeline(masks if case == "masks" else boxes, **OPTIONS,
                                **shard_options(case))
    files = make_dali_pipeline(os.path.join(folder, "images"), **OPTIONS,
                               **folder_options(folder, case))
    assert shards.class_names == files.class_names
    for epoch in (0, 1):
        for ours, theirs in zip(shards.epoch(epoch), files.epoch(epoch), strict=True):
            assert all(np.array_equal(a, b) for a, b in zip(ours, theirs, strict=True))


def test_masks_and_boxes_from_shards_in_s3(dense, s3_server):
    """The shards in a bucket give the local shards' batches (`shuffle=False`: the
    same order, the shards'); an epoch's masks and images come from one ranged GET per
    shard, not one request per member."""
    from dalipipe.ranges import read
    from s3_server import upload_folder

    folder, masks, boxes = dense
    client = s3_server.client()
    client.create_bucket(Bucket="members")
    upload_folder(client, os.path.join(folder, "m"), "members", "m")
    upload_folder(client, os.path.join(folder, "b"), "members", "b")
    for case, local, uri in (("masks", masks, "s3://members/m/train-{000000..000001}.tar"),
                             ("boxes", boxes, "s3://members/b/*.tar")):
        remote = make_dali_pipeline(uri, shuffle=False, **OPTIONS, **shard_options(case))
        here = make_dali_pipeline(local, shuffle=False, **OPTIONS, **shard_options(case))
        assert remote.file_paths == [p.replace(os.path.dirname(local), uri.rsplit("/", 1)[0])
                                     for p in here.file_paths]
        if case == "masks":  # read from the shards, none rewritten
            assert (remote.index.mask_refs[:, 0] >= 0).all()
        for epoch in (0, 1):
            read.forget_chunks()
            since = s3_server.log_size()
            for ours, theirs in zip(remote.epoch(epoch), here.epoch(epoch), strict=True):
                assert all(np.array_equal(a, b) for a, b in zip(ours, theirs, strict=True))
            gets = s3_server.object_gets("members", since)
            assert sorted(gets) == [f"{case[0]}/train-00000{i}.tar" for i in (0, 1)], gets


def test_the_tf_format_gives_the_native_batches(dense):
    pytest.importorskip("tensorflow")
    folder, masks, boxes = dense
    for case, source in (("masks", masks), ("boxes", boxes)):
        dataset = make_dali_dataset(source, format="tf", **OPTIONS, **shard_options(case))
        native = make_dali_pipeline(os.path.join(folder, "images"), **OPTIONS,
                                    **folder_options(folder, case))
        for epoch in (0, 1):
            got = [[np.asarray(x) for x in _flat(element)] for element in dataset]
            want = list(native.epoch(epoch))
            assert len(got) == len(want)
            for ours, theirs in zip(got, want):
                assert all(np.array_equal(a, b) for a, b in zip(ours, theirs, strict=True))


def _flat(element):
    images, targets = element
    if isinstance(targets, dict):
        return images, targets["boxes"], targets["labels"]
    return images, targets


def test_palette_mask_members_give_their_ids(dense, tmp_path):
    """Mask members as palette PNGs (the sample data's own) are read as ids,
    rewritten once into the cache folder."""
    folder, _, _ = dense
    names = sorted(os.listdir(os.path.join(folder, "images")))
    entries = []
    for i, name in enumerate(names):
        for suffix, sub in (("png", "images"), ("seg.png", "masks")):
            with open(os.path.join(folder, sub, name), "rb") as f:
                entries.append((f"{i:04d}.{suffix}", f.read()))
    shard = write_tar(tmp_path / "p.tar", entries)
    options = dict(OPTIONS, shuffle=False)
    ours = make_dali_pipeline(shard, masks=".seg.png", **options)
    theirs = make_dali_pipeline(os.path.join(folder, "images"),
                                masks=os.path.join(folder, "masks"), **options)
    assert (ours.index.mask_refs[:, 0] == -1).all()  # all rewritten
    for a, b in zip(ours.epoch(0), theirs.epoch(0), strict=True):
        assert np.array_equal(a[1], b[1])


def test_a_damaged_mask_member_is_named_by_shard_and_member(dense, tmp_path):
    _, masks, _ = dense
    shard = sorted(glob.glob(masks))[0]
    found = members(shard)
    found["00000001.seg.png"] = bad_idat_crc(found["00000001.seg.png"])  # DALI rejects it
    del found["00000002.seg.png"]
    copy = write_tar(tmp_path / "d.tar", sorted(found.items()))
    with pytest.raises(ValueError) as raised:
        make_dali_pipeline(copy, masks=".seg.png", check="structure", **OPTIONS)
    message = str(raised.value)
    assert f"{copy}#00000001.png: its mask '{copy}#00000001.seg.png'" in message
    assert f"{copy}#00000002.png: has no mask" in message
    with pytest.warns(UserWarning, match="Left out 2 of 4"):
        kept = make_dali_pipeline(copy, masks=".seg.png", check="structure",
                                  on_bad_file="skip", **OPTIONS)
    assert sorted(os.path.basename(p) for p in kept.file_paths) == \
        ["d.tar#00000000.png", "d.tar#00000003.png"]
    assert sum(len(batch[0]) for batch in kept.epoch(0)) == 2


def test_a_bad_boxes_member_is_named(dense, tmp_path):
    _, _, boxes = dense
    shard = sorted(glob.glob(boxes))[0]
    found = members(shard)
    found["00000001.json"] = json.dumps({"boxes": [[1, 2, 3]], "labels": ["circle"],
                                         "bounding_box_format": "xyxy"}).encode()
    found["00000002.json"] = json.dumps({"boxes": [], "labels": []}).encode()
    found["00000003.json"] = b'{"boxes": [[1, 2,'  # cut short: a bad file of its sample
    copy = write_tar(tmp_path / "b.tar", sorted(found.items()))
    with pytest.raises(ValueError) as raised:
        make_dali_pipeline(copy, boxes=".json", **BOXES, **dict(OPTIONS, verbose=False))
    message = str(raised.value)
    assert f"its boxes' member {copy}#00000001.json has \"boxes\" that are not" in message
    assert f"{copy}#00000002.json has the bounding_box_format None" in message
    assert f"{copy}#00000003.png: its .json member {copy}#00000003.json is not JSON (" \
        in message
    with pytest.warns(UserWarning, match="Left out 3 of 4"):
        kept = make_dali_pipeline(copy, boxes=".json", on_bad_file="skip", **BOXES, **OPTIONS)
    assert [os.path.basename(p) for p in kept.file_paths] == ["b.tar#00000000.png"]


def _report(text):
    """The lines of the bad-file report whose path `text` names, less its heading."""
    path = re.search(r"^report: (.*)$|Report: (.*)$", text, re.M).group(1, 2)
    with open(next(p for p in path if p)) as f:
        return f.readlines()[1:]


def test_dalipipe_check_judges_the_members_as_the_dataset_does(dense, tmp_path, capsys):
    """`dalipipe check SHARDS --masks .seg.png` (`--boxes .json`) reports the bad
    samples that `make_dali_dataset` refuses (its pipeline's check), with the same
    names and reasons."""
    _, masks, boxes = dense
    found = members(sorted(glob.glob(masks))[0])
    found["00000001.seg.png"] = bad_idat_crc(found["00000001.seg.png"])
    del found["00000002.seg.png"]
    mask_copy = write_tar(tmp_path / "m.tar", sorted(found.items()))
    found = members(sorted(glob.glob(boxes))[0])
    found["00000001.json"] = b'{"boxes": [[1, 2,'
    box_copy = write_tar(tmp_path / "b.tar", sorted(found.items()))
    for copy, flag, options, count in ((mask_copy, "--masks", dict(masks=".seg.png"), 2),
                                       (box_copy, "--boxes", dict(boxes=".json", **BOXES), 1)):
        capsys.readouterr()
        assert main(["check", copy, flag, options.get("masks", ".json")]) == 1
        printed = _report(capsys.readouterr().out)
        with pytest.raises(ValueError) as raised:
            make_dali_pipeline(copy, check="structure", **options, **OPTIONS)
        assert printed == _report(str(raised.value)) and len(printed) == count
    assert main(["check", sorted(glob.glob(masks))[0], "--masks", ".seg.png"]) == 0
    assert "all 4 files are sound" in capsys.readouterr().out


@pytest.mark.parametrize("source, options, match", [
    ("images", dict(masks=".seg.png"), "names a member of tar shards, and the source is not"),
    ("images", dict(boxes=".json", **BOXES), "names a member of tar shards"),
    ("masks", dict(masks="masks/"), "With tar shards, `masks` names the extension"),
    ("masks", dict(masks=".png"), "not an image member's own"),
    ("boxes", dict(boxes="instances.json", **BOXES), "With tar shards, `boxes` names"),
    ("boxes", dict(boxes=".txt", **BOXES), "ending in '.json'"),
])
def test_refusals_name_the_arguments(dense, source, options, match):
    folder, masks, boxes = dense
    source = {"images": os.path.join(folder, "images"), "masks": masks, "boxes": boxes}[source]
    with pytest.raises(ValueError, match=match):
        make_dali_pipeline(source, **OPTIONS, **options)


def test_convert_with_masks_needs_the_webdataset_format(dense, tmp_path, capsys):
    folder, _, _ = dense
    assert main(["convert", os.path.join(folder, "images"), str(tmp_path / "o"), "--shards", "1",
                 "--masks", os.path.join(folder, "masks")]) == 2
    assert "--format webdataset" in capsys.readouterr().err
