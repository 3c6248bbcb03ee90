"""`dalipipe doctor` on the real packages: exit 0 here, 1 with the reason without the plugin."""

import re
import subprocess
import sys

import pytest

from dalipipe.cli import main
from dalipipe.install import installed_version
from dalipipe.utils import child_env
from helpers import BLOCK_PLUGIN


def test_doctor_reports_the_parts_and_runs_a_dataset(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    for part in ("DALI ", "DALI GPUs", "hardware JPEG", "TensorFlow", "Keras",
                 "other backends", "TF plugin", "memory growth"):
        assert re.search(rf"^{re.escape(part)}", out, re.M), part
    assert re.search(r"^dataset \(cpu\) +2 batches of \(2, 16, 16, 3\)", out, re.M)
    for backend, package in (("PyTorch", "torch"), ("JAX", "jax")):
        version = installed_version(package)
        assert (f"{backend} {version}" in out) == (version is not None)
    assert out.endswith("make_dali_dataset can run\n")


@pytest.mark.slow  # a fresh interpreter
def test_doctor_fails_with_the_reason_when_the_plugin_does_not_load():
    script = BLOCK_PLUGIN + 'from dalipipe.cli import main\nsys.exit(main(["doctor"]))'
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 1
    assert "make_dali_dataset cannot run:\n  DALI's TensorFlow plugin" in done.stdout
    assert "--no-build-isolation nvidia-dali-tf-plugin-" in done.stdout
    assert "absl" not in done.stderr


@pytest.mark.slow  # a fresh interpreter per backend
@pytest.mark.parametrize("backend", ["tensorflow", "torch"])
def test_doctor_in_a_fresh_interpreter_is_quiet_on_stderr(backend):
    """TensorFlow's start-up lines (which its import prints twice) and CUDA's
    (cuInit's error on a machine without a usable GPU) are not shown, on any backend."""
    if backend != "tensorflow":
        pytest.importorskip(backend)
    env = child_env(KERAS_BACKEND=backend)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    done = subprocess.run([sys.executable, "-m", "dalipipe", "doctor"], capture_output=True,
                          text=True, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert not [line for line in lines if "cuInit" in line or "absl" in line], done.stderr
    assert len(set(lines)) == len(lines), done.stderr


def test_nvml_names_the_gpus_dali_sees_or_none_without_a_driver():
    from dalipipe.bench import harness
    from dalipipe.doctor import nvidia_gpus
    from dalipipe.devices import dali_gpu_count

    driver, gpus = nvidia_gpus()
    assert len(gpus) >= dali_gpu_count()
    if driver is None:
        assert gpus == [] and harness.gpu_memory_used_mb() is None
        return
    assert all(isinstance(name, str) and used >= 0 for name, used in gpus)
    assert harness.gpu_name().splitlines()[0] == f"{gpus[0][0]}, {driver}"
    assert harness.gpu_memory_used_mb() >= 0


@pytest.mark.slow  # fresh interpreters; the in-process test without DALI is the quick one
def test_without_dali_dalipipe_imports_and_doctor_says_dali_does_not_import():
    script = ('import sys; sys.modules["nvidia.dali"] = None\n'
              "import dalipipe\n"
              'from dalipipe.cli import main\nsys.exit(main(["doctor"]))')
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=child_env(), timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    assert re.search(r"^DALI +not importable \(import of nvidia.dali halted", done.stdout, re.M)
    assert "make_dali_dataset cannot run:\n  nvidia-dali-" in done.stdout
    assert "is installed but does not import" in done.stdout
    assert "dataset (cpu)" not in done.stdout


def test_without_dali_each_public_function_names_what_installs_it():
    script = ('import sys; sys.modules["nvidia.dali"] = None\n'
              "import dalipipe\n"
              "for f in (dalipipe.make_dali_dataset, dalipipe.make_dali_pipeline):\n"
              "    try:\n"
              "        f('photos/')\n"
              "    except ImportError as e:\n"
              "        print(e)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=child_env(), timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 2, done.stdout
    for name, line in zip(("make_dali_dataset", "make_dali_pipeline"), lines):
        assert line.startswith(f"`{name}` needs NVIDIA DALI, which does not import here"), line
        assert "pip install" in line and "[cuda12]" in line and "dalipipe doctor" in line, line


def test_doctor_says_when_keras_is_outside_the_versions_dalipipe_requires():
    from dalipipe.doctor import keras_outside_range

    requires = ["tensorflow<2.22,>=2.16", "keras<3.16,>=3.11", 'grain>=0.2; extra == "grain"']
    for version in ("3.11.0", "3.15.1"):
        assert keras_outside_range(version, requires) is None
    for version in ("3.10.0", "3.16.0", "4.0.0"):
        said = keras_outside_range(version, requires)
        assert said.startswith(f"Keras {version} is installed") and \
            "pip install 'keras<3.16,>=3.11'" in said, said
    assert keras_outside_range("3.0.0", ["keras>=3"]) is None
    # The installed package's own requirements by default.
    import importlib.metadata

    import keras

    assert keras_outside_range(keras.__version__) == keras_outside_range(
        keras.__version__, importlib.metadata.requires("dalipipe"))
