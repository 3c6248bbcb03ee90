"""The shared helpers: the check's progress bar draws only once it has taken a second."""

import time

from dalipipe.utils import CHECK_BAR_DELAY, progress


def test_a_quick_check_draws_no_bar_and_a_long_one_does(capsys):
    assert CHECK_BAR_DELAY == 1.0
    with progress(4, "files checked", enabled=True, delay=CHECK_BAR_DELAY) as bar:
        bar.update(4)
    assert capsys.readouterr().err == ""
    with progress(4, "files checked", enabled=True, delay=0.2) as bar:
        time.sleep(0.3)
        bar.update(4)
    assert "files checked" in capsys.readouterr().err
    with progress(4, "files checked", enabled=False, delay=0) as bar:
        bar.update(4)
    assert capsys.readouterr().err == ""
