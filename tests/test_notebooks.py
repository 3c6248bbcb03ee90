"""The notebooks in notebooks/ are stored executed, and still run.

The stored copies carry their outputs, from a full-size run by
`notebooks/run_notebooks.py`, which records the SHA-256 of the cells' sources in the
notebook's metadata. The quick tests check that this digest matches the cells (the
stored outputs are those of the stored code: a cell edited since the run fails them)
and that no output is an error. The slow test runs every notebook again, at the small
size (`DALIPIPE_NOTEBOOK_SMALL=1`), with the same `execute`, on this interpreter.
nbclient, nbformat and ipykernel are imported inside the tests, so that `pytest -m gpu`
still collects this module on a GPU machine without them; wherever these tests run, a
missing package fails them.
"""

import importlib.util
import pathlib
import re

import pytest

NOTEBOOK_DIR = pathlib.Path(__file__).resolve().parents[1] / "notebooks"
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
RERUN = "rerun it: .venv/bin/python notebooks/run_notebooks.py {name}"


def _runner():
    """notebooks/run_notebooks.py as a module."""
    spec = importlib.util.spec_from_file_location("run_notebooks",
                                                  NOTEBOOK_DIR / "run_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RUNNER = _runner()
NOTEBOOKS = RUNNER.notebooks()
IDS = [p.name for p in NOTEBOOKS]


def _read(path):
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    return notebook


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_stored_outputs_belong_to_the_stored_cells(path):
    notebook = _read(path)
    recorded = notebook.metadata.get("dalipipe", {})
    assert recorded.get("sources_sha256") == RUNNER.sources_digest(notebook), (
        f"{path.name}: its cells changed since its outputs were made; "
        + RERUN.format(name=path.name)
    )
    assert recorded.get("small") is False, f"{path.name}: stored from a small run"
    assert recorded.get("machine"), f"{path.name}: the machine it ran on is not recorded"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_stored_notebook_ran_every_cell_in_order_without_errors(path):
    notebook = _read(path)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    counts = [cell.execution_count for cell in code]
    assert counts == list(range(1, len(code) + 1)), (
        f"{path.name}: execution counts {counts}, not one run from the top; "
        + RERUN.format(name=path.name)
    )
    errors = [
        (i, ANSI_ESCAPE.sub("", output.get("ename", "") + ": " + output.get("evalue", "")))
        for i, cell in enumerate(notebook.cells) if cell.cell_type == "code"
        for output in cell.outputs if output.output_type == "error"
    ]
    assert not errors, f"{path.name}: error outputs in cells {errors}"
    tracebacks = [
        i for i, cell in enumerate(notebook.cells) if cell.cell_type == "code"
        for output in cell.outputs
        if output.output_type == "stream" and "Traceback (most recent call last)" in output.text
    ]
    assert not tracebacks, f"{path.name}: tracebacks printed by cells {tracebacks}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_every_notebook_says_which_machine_ran_it(path):
    notebook = _read(path)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert "machine_info()" in code[0].source, f"{path.name}: its first code cell"
    printed = "".join(output.get("text", "") for output in code[0].outputs)
    assert "CPU:" in printed and "GPU:" in printed, printed


@pytest.mark.slow  # runs every notebook
@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_notebook_runs_at_small_size(path, tmp_path):
    from nbclient.exceptions import CellExecutionError

    try:
        notebook, _ = RUNNER.execute(path, small=True, tmp_dir=tmp_path)
        failure = None
    except CellExecutionError as error:
        # The failing cell's source and its traceback, without terminal colours.
        failure = ANSI_ESCAPE.sub("", str(error))
    if failure:
        pytest.fail(f"{path.name}: a cell failed\n{failure}", pytrace=False)
    # What ran is what is stored: the same cells, whose stored outputs the quick tests check.
    recorded = _read(path).metadata.get("dalipipe", {}).get("sources_sha256")
    assert RUNNER.sources_digest(notebook) == recorded, RERUN.format(name=path.name)


def test_there_are_notebooks():
    assert NOTEBOOKS, f"no notebooks in {NOTEBOOK_DIR}"
