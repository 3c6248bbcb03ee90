"""`dalipipe.calls`: the first argument's two names, and warnings at the user's line."""

import inspect
import warnings

import pytest

from dalipipe import calls, make_dali_dataset, make_dali_pipeline
from helpers import indexed_paths


def caught(call):
    """The warnings `call()` gives, each shown."""
    with warnings.catch_warnings(record=True) as found:
        warnings.simplefilter("always")
        call()
    return found


def test_warn_called_from_outside_the_package_names_that_line():
    line = inspect.currentframe().f_lineno + 1
    (warning,) = caught(lambda: calls.warn("plain", RuntimeWarning))
    assert (warning.filename, warning.lineno) == (__file__, line)
    assert warning.category is RuntimeWarning and str(warning.message) == "plain"


def test_warnings_from_deep_inside_name_the_callers_file_and_line(indexed_dir, tmp_path):
    """The check's policy and a table's targets warn several calls below the public
    functions, at depths that differ between `make_dali_pipeline` and
    `make_dali_dataset`; each warning names the line that called dalipipe."""
    import pandas as pd

    paths, _ = indexed_paths(indexed_dir)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.png").write_bytes(open(paths[0], "rb").read())
    (tmp_path / "a" / "empty.png").write_bytes(b"")
    table = pd.DataFrame({"path": paths, "score": [i / 2 for i in range(len(paths))]})
    common = dict(image_size=(4, 4), batch_size=2, device="cpu", verbose=False)

    def bad_files():
        return make_dali_dataset(str(tmp_path), on_bad_file="skip", **common)

    def numbers():
        return make_dali_pipeline(table, labels="score", **common)

    for call, text in ((bad_files, "Left out 1 of 2 files"), (numbers, "holds numbers")):
        source, first = inspect.getsourcelines(call)
        line = first + next(i for i, s in enumerate(source) if "make_dali_" in s)
        found = [w for w in caught(call) if text in str(w.message)]
        assert [(w.filename, w.lineno) for w in found] == [(__file__, line)], text


def test_the_filters_of_the_users_module_decide(indexed_dir):
    paths, _ = indexed_paths(indexed_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.filterwarnings("error", message="Images without labels", module=__name__)
        with pytest.raises(UserWarning, match="To predict, pass `shuffle=False`"):
            make_dali_pipeline(paths, image_size=(4, 4), batch_size=2, device="cpu",
                               verbose=False)
