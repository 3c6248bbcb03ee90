"""dalipipe: an NVIDIA DALI image pipeline that Keras trains from directly.

`make_dali_dataset` (needs TensorFlow) returns a `tf.data.Dataset` for `model.fit`;
`make_dali_pipeline` builds the same DALI graph without TensorFlow.
"""

import os
import sys

from dalipipe.options import default_memory_growth
from dalipipe.pipeline import ImagePipeline, make_dali_pipeline
from dalipipe.sample_data import make_sample_dataset

__all__ = ["ImagePipeline", "make_dali_dataset", "make_dali_pipeline", "make_sample_dataset"]
__version__ = "0.1.0"

# TensorFlow takes all GPU memory but a small reserve unless told otherwise, and
# DALI's GPU pipelines need their own: TF_FORCE_GPU_ALLOW_GROWTH=true unless set.
default_memory_growth(os.environ, sys.modules)


def __getattr__(name):
    # TensorFlow loads only when the Keras entry point is asked for.
    if name == "make_dali_dataset":
        from dalipipe.dataset import make_dali_dataset

        return make_dali_dataset
    raise AttributeError(f"module 'dalipipe' has no attribute {name!r}")
