"""`format="grain"` on one Keras backend (`test_grain.py`): in the tests' own
TensorFlow process, and as `backend_job.py`'s MODE `grain` on torch and JAX.

`fit` (3 epochs, with a metric that counts every sample it sees), `evaluate` and
`predict` on `DALIGrainDataset`s of `tagged_dir` (see `conftest.py`).
"""

import sys

import numpy as np

import keras

import dalipipe
from backend_job import OPTIONS, EpochCounts, _tag_counter, tag_model, tag_of_path


def grain_job(tagged_dir):
    """`fit`, `evaluate` and `predict` on Grain datasets; returns what the test checks."""
    train = dalipipe.make_dali_dataset(tagged_dir, seed=7, format="grain", **OPTIONS)
    model = tag_model()
    counts = EpochCounts()
    model.fit(train, epochs=3, verbose=0, callbacks=[counts])
    ordered = dalipipe.make_dali_dataset(tagged_dir, shuffle=False, format="grain", **OPTIONS)
    evaluated = model.evaluate(ordered, verbose=0, return_dict=True)
    images_only = dalipipe.make_dali_dataset(tagged_dir, labels=None, shuffle=False,
                                             format="grain", **OPTIONS)
    predicted = model.predict(images_only, verbose=0)
    return {
        "backend": keras.backend.backend(),
        "fit_counts": counts.epochs,
        "passes": train.next_epoch,
        "evaluate_tags": float(evaluated["tags"]),
        "evaluate_mislabeled": float(keras.ops.convert_to_numpy(
            _tag_counter(model).mislabeled)),
        "predict_tags": np.round(predicted[:, -1]).astype(int).tolist(),
        "file_tags": [tag_of_path(p) for p in images_only.file_paths],
        "tensorflow_loaded": "tensorflow" in sys.modules,
    }

