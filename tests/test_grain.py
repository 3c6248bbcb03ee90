"""`format="grain"` (`dalipipe.grain_dataset`): the iterators' state round trip, the
batches Keras reads up front, `fit`/`evaluate`/`predict` on each backend
(`grain_job.py`), and the ImportError without Grain."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import dalipipe
from dalipipe.utils import child_env

from helpers import NUM_TAGGED, tag_of

pytest.importorskip("grain")

TESTS = os.path.dirname(os.path.abspath(__file__))
OPTIONS = dict(image_size=(12, 12), batch_size=8, normalization=None, verbose=False,
               device="cpu", seed=5)
STEPS = 16  # 121 tagged images in batches of 8


def tags(batches):
    return [tag_of(image) for batch in batches for image in np.asarray(batch[0])]


def test_the_state_round_trip_in_the_middle_of_an_epoch(tagged_dir):
    pipeline = dalipipe.make_dali_pipeline(tagged_dir, augment=True, **OPTIONS)
    dataset = dalipipe.make_dali_dataset(tagged_dir, augment=True, format="grain", **OPTIONS)
    assert list(iter(dataset)) and dataset.next_epoch == 1  # a whole pass: epoch 0
    iterator = iter(dataset)
    first = [next(iterator) for _ in range(5)]
    state = json.loads(json.dumps(iterator.get_state()))
    assert (state["epoch"], state["batch"]) == (1, 5)
    assert state["fingerprint"] == dataset.fingerprint

    # Restored into a new dataset (a restarted program), it goes on at batch 5.
    again = dalipipe.make_dali_dataset(tagged_dir, augment=True, format="grain", **OPTIONS)
    restored = iter(again)
    restored.set_state(state)
    rest = list(restored)
    want = list(pipeline.epoch(1, start_batch=5))
    assert len(rest) == STEPS - 5
    for got, expected in zip(rest, want):
        for a, b in zip(got, expected):
            np.testing.assert_array_equal(np.asarray(a), b)
    assert tags(first) + tags(rest) == tags(pipeline.epoch(1))
    assert restored.get_state()["batch"] == STEPS
    # The passes after it are the next epochs.
    assert tags(iter(again)) == tags(pipeline.epoch(2))


def test_a_state_of_another_dataset_raises_naming_what_differs(tagged_dir):
    dataset = dalipipe.make_dali_dataset(tagged_dir, format="grain", **OPTIONS)
    state = iter(dataset).get_state()
    other = dalipipe.make_dali_dataset(tagged_dir, format="grain", **dict(OPTIONS, seed=6))
    with pytest.raises(ValueError, match="another dataset: what differs: seed"):
        iter(other).set_state(state)
    with pytest.raises(ValueError, match=r"`start_batch` must be an integer in \[0, 16\)"):
        iter(dataset).set_state(dict(state, batch=17))


def test_backup_and_restore_points_to_the_iterators_state(tagged_dir, tmp_path):
    dataset = dalipipe.make_dali_dataset(tagged_dir, format="grain", **OPTIONS)
    with pytest.raises(ValueError, match="a format=\"grain\" dataset resumes through its "
                                         "iterators' state"):
        dalipipe.BackupAndRestore(str(tmp_path / "backup"), dataset)


@pytest.mark.parametrize("batch_size", [8, 64])
def test_the_batches_keras_reads_up_front_start_no_pass(tagged_dir, batch_size):
    """Keras's Grain adapter reads 2 batches to learn the structure (with 64, the
    whole pass); a pass left before its end does not count either."""
    from keras.src.trainers.data_adapters.grain_dataset_adapter import GrainDatasetAdapter

    options = dict(OPTIONS, batch_size=batch_size)
    pipeline = dalipipe.make_dali_pipeline(tagged_dir, **options)
    dataset = dalipipe.make_dali_dataset(tagged_dir, format="grain", **options)
    adapter = GrainDatasetAdapter(dataset)
    assert adapter.batch_size == (8 if batch_size == 8 else None)  # 64, then 57
    assert dataset.next_epoch == 0
    for _ in iter(dataset):
        break
    assert tags(iter(dataset)) == tags(pipeline.epoch(0))
    assert dataset.next_epoch == 1


def test_fit_evaluate_and_predict_on_tensorflow(tagged_dir):
    import keras

    if keras.backend.backend() != "tensorflow":
        pytest.skip("Keras's backend here is not TensorFlow")
    check_job(run_in_process(tagged_dir), "tensorflow")


def run_in_process(tagged_dir):
    sys.path.insert(0, TESTS)
    from grain_job import grain_job

    return grain_job(tagged_dir)


@pytest.mark.slow
@pytest.mark.backend_job("grain")
@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_fit_evaluate_and_predict_on_the_backend(backend, backend_jobs):
    result = backend_jobs(backend, "grain")
    check_job(result, backend)
    assert not result["tensorflow_loaded"]


def check_job(result, backend):
    assert result["backend"] == backend
    # Each of the 3 epochs sees every sample once, and counts as one pass.
    assert result["fit_counts"] == [[1.0] * NUM_TAGGED] * 3
    assert result["passes"] == 3
    assert result["evaluate_tags"] == NUM_TAGGED and result["evaluate_mislabeled"] == 0
    assert result["predict_tags"] == result["file_tags"]


def test_without_grain_the_format_raises_with_the_pip_command(tagged_dir):
    code = (
        'import sys; sys.modules["grain"] = None\n'
        "import dalipipe\n"
        "from dalipipe.install import pip_extra\n"
        "try:\n"
        f"    dalipipe.make_dali_dataset({tagged_dir!r}, format='grain', device='cpu',"
        " verbose=False)\n"
        "except ImportError as e:\n"
        "    assert pip_extra('grain') in str(e), e\n"
        "    print(e)\n"
        "else:\n"
        "    raise SystemExit('no ImportError')\n"
    )
    process = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True,
                             text=True, timeout=120)
    assert process.returncode == 0, process.stderr[-3000:] + process.stdout
    assert 'format="grain" needs Grain' in process.stdout
