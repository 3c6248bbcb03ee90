"""Keras's settings, read without importing Keras when it is not yet imported.

Keras reads its backend from `KERAS_BACKEND`, else from `keras.json` in
`$KERAS_HOME` (else `~/.keras`), else takes "tensorflow"; its image data format
from `keras.json`, else "channels_last". Once Keras is imported, its own answers are
used.
"""

import json
import os
import sys

# The values of Keras's `image_data_format()`.
IMAGE_DATA_FORMATS = ("channels_last", "channels_first")


def keras_image_data_format():
    """`keras.config.image_data_format()`: "channels_last" or "channels_first"."""
    if "keras" in sys.modules:
        return sys.modules["keras"].config.image_data_format()
    value = _keras_config().get("image_data_format", "channels_last")
    return value if value in IMAGE_DATA_FORMATS else "channels_last"


def keras_backend():
    """`keras.backend.backend()`, such as "tensorflow", "torch" or "jax"."""
    if "keras" in sys.modules:
        return sys.modules["keras"].backend.backend()
    return os.environ.get("KERAS_BACKEND") or _keras_config().get("backend", "tensorflow")


def _keras_config():
    """The settings of `$KERAS_HOME/keras.json` (else `~/.keras/keras.json`), or {}."""
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    try:
        with open(os.path.join(home, "keras.json")) as f:
            config = json.load(f)
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}
