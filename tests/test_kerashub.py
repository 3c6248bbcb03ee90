"""KerasHub's models fed by dalipipe (`kerashub_job.py`): a RetinaNet on `"yxyx"`
boxes, a D-FINE on `"rel_center_xywh"` boxes and a DeepLabV3 on masks, built from
config with random weights, fit for 2 steps and predicting (the D-FINE on
`DFINE_PREDICTS`: its `predict` compiles for a minute on JAX's CPU), in the formats
KerasHub's `fit` takes: "tf" on TensorFlow, "grain" on torch and JAX."""

import pytest

pytest.importorskip("keras_hub")

from kerashub_job import DFINE_PREDICTS, kerashub_fits  # noqa: E402


def check(found, backend):
    assert found["finite"], found
    assert set(found) == {"retinanet", "dfine", "deeplab", "finite"}, found
    assert found["retinanet"]["shapes"] == {"boxes": [8, 100, 4], "confidence": [8, 100],
                                            "labels": [8, 100], "num_detections": [8]}
    dfine = {"boxes": [8, 10, 4], "confidence": [8, 10], "labels": [8, 10],
             "num_detections": [8]}
    assert found["dfine"]["shapes"] == (dfine if backend in DFINE_PREDICTS else None), found
    assert found["deeplab"]["shape"] == [8, 64, 64, 4]


@pytest.mark.slow
def test_kerashub_models_fit_format_tf_on_tensorflow():
    check(kerashub_fits("tf"), "tensorflow")


@pytest.mark.slow
@pytest.mark.backend_job("kerashub")
@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_kerashub_models_fit_format_grain_on_the_backend(backend, backend_jobs):
    check(backend_jobs(backend, "kerashub"), backend)
