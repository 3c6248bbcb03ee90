"""dalipipe: an NVIDIA DALI image pipeline that Keras trains from directly.

`make_dali_dataset` returns what `model.fit` takes on Keras's backend: a
`tf.data.Dataset` on TensorFlow, a `keras.utils.PyDataset` of torch tensors or jax
arrays on torch and JAX (which never load TensorFlow). `make_dali_pipeline` builds
the same DALI graph without Keras.

`import dalipipe` loads DALI when DALI imports (its S3 client needs DALI loaded
before TensorFlow: see `dalipipe.dali_import`), and succeeds without it, so that
`dalipipe doctor` can say what to install.
"""

import os as _os
import sys as _sys

from dalipipe import dali_import as _dali_import

try:
    _dali_import.load_dali()
except ImportError:  # no DALI: `dalipipe doctor` says so; building a pipeline raises
    pass

from dalipipe.dataset import make_dali_dataset  # noqa: E402
from dalipipe.devices import default_memory_growth as _default_memory_growth  # noqa: E402
from dalipipe.mixing import CutMix, MixUp  # noqa: E402
from dalipipe.pipeline import ImagePipeline, make_dali_pipeline  # noqa: E402
from dalipipe.recipes import AutoAugment, RandAugment, TrivialAugmentWide  # noqa: E402
from dalipipe.sample_data import make_sample_dataset  # noqa: E402

__all__ = ["AutoAugment", "BackupAndRestore", "CutMix", "ImagePipeline", "InputReport",
           "MixUp", "RandAugment", "TrivialAugmentWide", "make_dali_dataset", "make_dali_pipeline",
           "make_sample_dataset"]
__version__ = "0.1.0"


def __getattr__(name):
    # `BackupAndRestore` and `InputReport` are Keras callbacks: Keras is imported on
    # their first use only.
    if name == "BackupAndRestore":
        from dalipipe.resume import BackupAndRestore

        return BackupAndRestore
    if name == "InputReport":
        from dalipipe.report import InputReport

        return InputReport
    raise AttributeError(f"module 'dalipipe' has no attribute {name!r}")


def __dir__():
    # The public names and the module's dunders; not the submodules that importing
    # them binds here (`dalipipe.dataset`, ...), which are reached by their full names.
    return sorted({*__all__, *(name for name in globals() if name.startswith("__"))})


# TensorFlow takes all GPU memory but a small reserve unless told otherwise, and
# DALI's GPU pipelines need their own: TF_FORCE_GPU_ALLOW_GROWTH=true unless set.
_default_memory_growth(_os.environ, _sys.modules)
