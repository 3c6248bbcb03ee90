"""DALI loaded before TensorFlow, so that DALI's S3 client works in the process.

DALI reads `s3://` URIs with the AWS SDK inside its own libraries, whose TLS
library (s2n, `nvidia/dali/.libs/libs2n-*.so`) carries its own OpenSSL 3 and binds
its symbols when `nvidia.dali` is first imported. TensorFlow 2.21 loads
`libtensorflow_framework.so.2` into the global symbol scope, and that library
exports BoringSSL under OpenSSL's names. When TensorFlow comes first, s2n binds to
TensorFlow's copy, finds the wrong OpenSSL version at its first S3 request, and
aborts the whole process ("s2n_init() failed", from `Aws::InitAPI` on a DALI thread).

So `import dalipipe` imports `nvidia.dali` (when it imports: without DALI, dalipipe
imports, and building a pipeline raises), before anything imports TensorFlow; when
TensorFlow is already imported, s2n is loaded first with `RTLD_DEEPBIND`, so that
it keeps its own OpenSSL. Where both were already imported, TensorFlow first,
nothing can mend it: `s3_error()` says so before DALI is asked to read a URI.
PyTorch and JAX are not affected.
"""

import ctypes
import glob
import importlib.util
import os
import sys

# Why this process cannot read s3:// with DALI (None when it can), once decided.
_S3_PROBLEM = None
_LOADED = False


def load_dali():
    """Imports `nvidia.dali` so that its S3 client keeps its own OpenSSL (see above);
    `import dalipipe` calls it. Returns `s3_error()`.

    Raises:
        ImportError: where DALI does not import (`import dalipipe` goes on without it).
    """
    global _S3_PROBLEM, _LOADED
    if not _LOADED:
        _LOADED = True
        if "nvidia.dali" in sys.modules:
            _S3_PROBLEM = s3_problem(list(sys.modules))
        else:
            if "tensorflow" in sys.modules:
                _preload_s2n()
            import nvidia.dali  # noqa: F401
    return _S3_PROBLEM


def require_dali(caller):
    """Raises ImportError, naming `caller` (the public function) and what installs
    DALI, where `nvidia.dali` does not import; `import dalipipe` goes on without it."""
    try:
        load_dali()
        import nvidia.dali  # noqa: F401
    except ImportError as e:
        from dalipipe.install import DALI_FIX

        raise ImportError(f"`{caller}` needs NVIDIA DALI, which does not import here ({e}): "
                          f"{DALI_FIX}. `dalipipe doctor` says what else is missing.") from e


def s3_problem(module_names):
    """Why DALI, already imported before dalipipe, cannot read `s3://`: the message
    when TensorFlow comes before `nvidia.dali` in `module_names` (the keys of
    `sys.modules`, in import order), else None."""
    if "tensorflow" not in module_names or "nvidia.dali" not in module_names:
        return None
    if module_names.index("tensorflow") > module_names.index("nvidia.dali"):
        return None
    return (
        "TensorFlow was imported before DALI in this process, so DALI's S3 client would "
        "abort the process at its first request (its TLS library would bind TensorFlow's "
        "BoringSSL in place of its own OpenSSL). Import dalipipe (or nvidia.dali) before "
        "TensorFlow and Keras, at the top of the script."
    )


def s3_error():
    """The message for a RuntimeError where DALI cannot read `s3://` in this
    process (see `load_dali`), else None."""
    return _S3_PROBLEM


def _preload_s2n():
    """Loads DALI's s2n resolving its symbols against itself first."""
    spec = importlib.util.find_spec("nvidia.dali")
    if spec is None or spec.origin is None:
        return  # no DALI: its import will say so
    found = glob.glob(os.path.join(os.path.dirname(spec.origin), ".libs", "libs2n-*.so*"))
    if found:
        ctypes.CDLL(found[0], mode=os.RTLD_NOW | os.RTLD_DEEPBIND)
