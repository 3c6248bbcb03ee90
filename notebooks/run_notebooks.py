"""Executes the notebooks and stores them with their outputs.

From the repository root:

    .venv/bin/python notebooks/run_notebooks.py                    # every notebook
    .venv/bin/python notebooks/run_notebooks.py 05_bad_files.ipynb  # some of them

Each notebook runs top to bottom in a fresh kernel on this interpreter (whatever
kernels are installed on the machine), in notebooks/, as Jupyter runs it, at full size,
with this checkout's dalipipe first on `PYTHONPATH`.
The stored notebook's `metadata["dalipipe"]` records the SHA-256 of its cells' types and
sources (`sources_digest`), the seconds it took and the machine: tests/test_notebooks.py
checks that the digest still matches the cells, so that the stored outputs are those of
the stored code. `execute` is also what the test runs, at a small size
(`DALIPIPE_NOTEBOOK_SMALL=1`, which every notebook reads in its settings cell).
"""

import contextlib
import hashlib
import json
import os
import pathlib
import sys
import tempfile
import time

NOTEBOOK_DIR = pathlib.Path(__file__).resolve().parent
CELL_TIMEOUT_S = 600


def notebooks():
    """The notebooks' paths, in name order."""
    return sorted(NOTEBOOK_DIR.glob("*.ipynb"))


def sources_digest(notebook):
    """SHA-256 (hex) of the notebook's cell types and sources, in order."""
    cells = [[cell.cell_type, cell.source] for cell in notebook.cells]
    return hashlib.sha256(json.dumps(cells).encode()).hexdigest()


def _kernel_manager(kernel_dir):
    """A kernel manager whose `python3` kernel is this interpreter.

    The spec lives in `kernel_dir`, so nothing is registered on the machine and no
    kernel installed elsewhere (another Python's `python3`) is picked up.
    """
    from jupyter_client import KernelManager
    from jupyter_client.kernelspec import KernelSpecManager

    spec_dir = pathlib.Path(kernel_dir) / "kernels" / "python3"
    spec_dir.mkdir(parents=True, exist_ok=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
    }))
    specs = KernelSpecManager(kernel_dirs=[str(spec_dir.parent)])
    return KernelManager(kernel_name="python3", kernel_spec_manager=specs)


def _set_environment(values):
    """Sets the environment variables in `values`; those whose value is None are unset."""
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@contextlib.contextmanager
def _environment(**values):
    """Sets environment variables (None: unset) for the block, then restores them."""
    saved = {name: os.environ.get(name) for name in values}
    _set_environment(values)
    try:
        yield
    finally:
        _set_environment(saved)


def execute(path, *, small, tmp_dir, timeout=CELL_TIMEOUT_S):
    """Runs the notebook at `path` top to bottom in a fresh kernel.

    Args:
        path: the .ipynb file; it is read, not written.
        small: run at the notebooks' small size (`DALIPIPE_NOTEBOOK_SMALL=1`).
        tmp_dir: folder for the kernel spec, the notebook's temporary files
            (`TMPDIR`), found there even if a cell fails before the notebook deletes
            them, and dalipipe's cache (`DALIPIPE_CACHE_DIR`, empty at the start, as on
            a new machine).
        timeout: seconds a cell may run.

    Returns:
        `(notebook, seconds)`: the executed `nbformat` notebook, with its outputs.

    Raises:
        nbclient.exceptions.CellExecutionError: a cell failed; its message holds the
            cell's source and traceback.
    """
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        km=_kernel_manager(tmp_dir),
        timeout=timeout,
        record_timing=False,  # no timestamps in the stored cells
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}},  # run where Jupyter would
    )
    # The kernel, and the interpreters the notebooks start, import this checkout's
    # dalipipe, whichever one is installed.
    python_path = os.pathsep.join(
        p for p in (str(NOTEBOOK_DIR.parent), os.environ.get("PYTHONPATH")) if p)
    with _environment(DALIPIPE_NOTEBOOK_SMALL="1" if small else None, PYTHONPATH=python_path,
                      DALIPIPE_CACHE_DIR=str(pathlib.Path(tmp_dir) / "cache"),
                      TF_CPP_MIN_LOG_LEVEL="2", TMPDIR=str(tmp_dir)):
        start = time.perf_counter()
        try:
            client.execute()
        finally:  # nbclient leaves running a kernel whose manager it was given
            if client.kc is not None:
                client.kc.stop_channels()
            if client.km.has_kernel:
                client.km.shutdown_kernel(now=True)
        seconds = time.perf_counter() - start
    return notebook, seconds


def store(path):
    """Executes the notebook at full size and writes it back with its outputs.

    Returns:
        the seconds it ran.
    """
    import nbformat

    sys.path.insert(0, str(NOTEBOOK_DIR.parent))  # this checkout's dalipipe
    from dalipipe.bench.harness import machine_info

    with tempfile.TemporaryDirectory(prefix="dalipipe-notebook-") as tmp_dir:
        notebook, seconds = execute(path, small=False, tmp_dir=tmp_dir)
    machine = machine_info()
    notebook.metadata["dalipipe"] = {
        "sources_sha256": sources_digest(notebook),
        "run_s": round(seconds, 1),
        "small": False,
        "machine": f"{machine['cpu']}, {machine['cores']} cores, GPU: {machine['gpu']}",
    }
    nbformat.write(notebook, path)
    return seconds


def main(names):
    paths = [NOTEBOOK_DIR / name for name in names] if names else notebooks()
    for path in paths:
        print(f"{path.name}: running", flush=True)
        print(f"{path.name}: stored, {store(path):.0f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
