"""Every notebook in notebooks/ runs top to bottom, and is committed without outputs.

The notebooks run at a small size: they read `DALIPIPE_NOTEBOOK_SMALL=1` in their
first code cell. The kernel is this interpreter (`sys.executable`), whatever kernels
are installed on the machine. nbclient, nbformat and ipykernel are imported inside
the tests, so that `pytest -m gpu` still collects this module on a GPU machine
without them; wherever these tests run, a missing package fails them.
"""

import json
import pathlib
import re
import sys

import pytest

pytestmark = pytest.mark.slow  # runs every notebook

NOTEBOOK_DIR = pathlib.Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
CELL_TIMEOUT_S = 300
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


def _kernel_manager(tmp_path):
    """A kernel manager whose `python3` kernel is this interpreter.

    The spec lives in a temporary folder, so nothing is registered on the machine and
    no kernel installed elsewhere (another Python's `python3`) is picked up.
    """
    from jupyter_client import KernelManager
    from jupyter_client.kernelspec import KernelSpecManager

    spec_dir = tmp_path / "kernels" / "python3"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (test)",
        "language": "python",
    }))
    specs = KernelSpecManager(kernel_dirs=[str(tmp_path / "kernels")])
    return KernelManager(kernel_name="python3", kernel_spec_manager=specs)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    monkeypatch.setenv("DALIPIPE_NOTEBOOK_SMALL", "1")
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    # The notebooks' temporary folders land here, even if a cell fails before the
    # notebook deletes them.
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        km=_kernel_manager(tmp_path),
        timeout=CELL_TIMEOUT_S,
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}},  # run where Jupyter would
    )
    try:
        client.execute()
        failure = None
    except CellExecutionError as error:
        # The failing cell's source and its traceback, without terminal colours.
        failure = ANSI_ESCAPE.sub("", str(error))
    if failure:
        pytest.fail(f"{path.name}: a cell failed\n{failure}", pytrace=False)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_committed_without_outputs(path):
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    dirty = [
        i for i, cell in enumerate(notebook.cells)
        if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None)
    ]
    assert not dirty, (
        f"{path.name}: code cells {dirty} have outputs or an execution count; clear them "
        "(in Jupyter: Edit > Clear Outputs of All Cells, then save)"
    )


def test_there_are_notebooks():
    assert NOTEBOOKS, f"no notebooks in {NOTEBOOK_DIR}"
