"""Bounded resources over epochs and datasets, and prompt shutdown (small versions;
`benchmarks/soak.py` runs the same over 30 epochs and 50 datasets)."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.slow  # soak and shutdown subprocesses

pytest.importorskip("tensorflow")

from benchmarks import soak  # noqa: E402


def test_memory_and_file_descriptors_stay_bounded(color_dir):
    report = soak.soak(color_dir, epochs=3, cycles=8, image_size=16, batch_size=16)
    for phase in ("fit", "create_discard"):
        fds = report[phase]["fds"]
        assert max(fds) <= fds[0] + 2, (phase, fds)
    rss = report["create_discard"]["rss_mb"]
    # Creating and discarding datasets must not grow memory: stated bound 100 MB
    # over 8 cycles (the 50-cycle run measured no growth at all).
    assert rss[-1] <= rss[0] + 100, rss


SCRIPT = textwrap.dedent("""
    import faulthandler, signal, sys, time
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # stacks, if it hangs
    import keras
    from dalipipe import make_dali_dataset
    ds = make_dali_dataset(sys.argv[1], image_size=(32, 32), batch_size=4, device="cpu", seed=0,
                           verbose=False)
    model = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Flatten(),
                              keras.layers.Dense(3, activation="softmax")])
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    if sys.argv[2] == "fit":
        class Ready(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                if batch == 2:
                    print("training", flush=True)
        model.fit(ds, epochs=10000, verbose=0, callbacks=[Ready()])
    else:
        iterator = iter(ds)
        next(iterator)  # leave mid-epoch, with DALI threads running
        print("exiting", flush=True)
""")


def run_script(color_dir, mode):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    # As from a terminal: Ctrl-C's default action. An ignored SIGINT is inherited
    # (some libraries' worker pools ignore it in the test process), and Python then
    # installs no KeyboardInterrupt handler.
    return subprocess.Popen([sys.executable, "-c", SCRIPT, color_dir, mode],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def test_interpreter_exit_mid_epoch_does_not_hang(color_dir):
    process = run_script(color_dir, "exit")
    out, err = process.communicate(timeout=120)
    assert "exiting" in out and process.returncode == 0, err[-2000:]


def test_ctrl_c_during_fit_stops_promptly(color_dir):
    process = run_script(color_dir, "fit")
    assert process.stdout.readline().strip() == "training"
    process.send_signal(signal.SIGINT)
    started = time.monotonic()
    try:
        _, err = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGUSR1)  # Python's stacks of every thread, to stderr
        time.sleep(2)
        process.kill()
        _, err = process.communicate()
        pytest.fail(f"fit did not stop within 60 s of Ctrl-C. Its stderr:\n{err[-6000:]}")
    assert "KeyboardInterrupt" in err
    assert process.returncode != 0
    print(f"stopped {time.monotonic() - started:.1f} s after SIGINT")
