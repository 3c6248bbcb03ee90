"""The shared helpers: the progress bar draws only once the work has taken a second."""

import time

from dalipipe.utils import progress


def test_a_quick_job_draws_no_bar_and_a_long_one_does(capsys):
    with progress(4, "files checked", enabled=True) as bar:
        bar.update(4)
    assert capsys.readouterr().err == ""
    with progress(4, "files checked", enabled=True, delay=0.2) as bar:
        time.sleep(0.3)
        bar.update(4)
    assert "files checked" in capsys.readouterr().err
    with progress(4, "files checked", enabled=False, delay=0) as bar:
        bar.update(4)
    assert capsys.readouterr().err == ""
