"""The Oxford-Pets recipe of docs/dense.md, small (`dense_recipes_job.py`): a U-Net
trained through `map(minus1)` on trimap-like masks, whose mean IoU rises, on
TensorFlow (format "tf", `tf.data`'s map) and torch (format "pydataset",
`DALIPyDataset.map`, in `backend_job.py`'s process)."""

import pytest

from dense_recipes_job import mean_iou_rises


def check_rises(found):
    iou = found["iou"]
    assert iou[-1] > iou[0] + 0.05, iou


@pytest.mark.slow
def test_the_oxford_pets_recipe_on_tensorflow(tmp_path):
    check_rises(mean_iou_rises(str(tmp_path), "tf"))


@pytest.mark.slow
@pytest.mark.backend_job("unet")
@pytest.mark.parametrize("backend", ["torch"])
def test_the_oxford_pets_recipe_on_torch(backend, backend_jobs):
    found = backend_jobs(backend, "unet")
    assert found["ids"] == [1, 2, 3, 4]  # what `fn` received: the trimap-like ids
    check_rises(found)
