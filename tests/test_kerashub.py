"""KerasHub's models fed by dalipipe (`kerashub_job.py`): a RetinaNet on `"yxyx"`
boxes and a DeepLabV3 on masks on every backend, and a D-FINE on `"rel_center_xywh"`
boxes on TensorFlow and torch (`DFINE_BACKENDS`: its fit takes minutes on JAX's CPU),
built from config with random weights, fit for 2 steps and predicting, in the
formats KerasHub's `fit` takes: "tf" on TensorFlow, "grain" on torch and JAX."""

import pytest

pytest.importorskip("keras_hub")

from kerashub_job import DFINE_BACKENDS, kerashub_fits  # noqa: E402


def check(found, backend):
    assert found["finite"], found
    assert set(found) == {"retinanet", "deeplab", "finite",
                          *(["dfine"] if backend in DFINE_BACKENDS else [])}, (backend, found)
    assert found["retinanet"]["shapes"] == {"boxes": [8, 100, 4], "confidence": [8, 100],
                                            "labels": [8, 100], "num_detections": [8]}
    if backend in DFINE_BACKENDS:
        assert found["dfine"]["shapes"] == {"boxes": [8, 10, 4], "confidence": [8, 10],
                                            "labels": [8, 10], "num_detections": [8]}
    assert found["deeplab"]["shape"] == [8, 64, 64, 4]


@pytest.mark.slow
def test_kerashub_models_fit_format_tf_on_tensorflow():
    check(kerashub_fits("tf"), "tensorflow")


@pytest.mark.slow
@pytest.mark.backend_job("kerashub")
@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_kerashub_models_fit_format_grain_on_the_backend(backend, backend_jobs):
    check(backend_jobs(backend, "kerashub"), backend)
