"""Every private DALI attribute dalipipe touches, behind named functions.

DALI's TensorFlow plugin builds a Python pipeline only to read its inputs, and DALI
offers no public call that releases a pipeline's threads and device state before it
is collected. What dalipipe needs of DALI's internals is done here only, so that a
DALI release that renames it breaks one module, and `tests/test_dali_hooks.py`,
which checks each on real DALI pipelines, says which.

Imports no DALI itself: it acts on the pipelines it is given. Checked on DALI 2.4.
"""


def shut_down(pipeline):
    """Stops `pipeline`'s worker threads and frees its device state now, rather than
    when it is collected (`Pipeline._shutdown`, which DALI's `atexit` handler calls
    for the pipelines still alive). The pipeline cannot run afterwards."""
    pipeline._shutdown()
