"""Packaging and the plugin: the wheel's files and metadata, and the command that
installs DALI's TensorFlow plugin. `scripts/test_install.sh` installs the wheel in a
fresh virtual environment (slow; CI runs it after the suite)."""

import email.parser
import os
import pathlib
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

from dalipipe import install
from dalipipe.doctor import keras_outside_range
from helpers import BLOCK_PLUGIN

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.mark.slow  # builds the wheel with pip
def test_the_wheel_holds_every_module_and_declares_requirements_extras_and_command(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source)
    shutil.copytree(ROOT / "dalipipe", source / "dalipipe",
                    ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(tmp_path / "dist"), str(source)],
                   check=True, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("dalipipe-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = next(n.rsplit("/", 1)[0] for n in names if n.endswith(".dist-info/METADATA"))
        metadata = email.parser.Parser().parsestr(archive.read(f"{info}/METADATA").decode())
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "dalipipe").rglob("*.py")}
    assert "dalipipe/bench/report.py" in modules and modules <= names

    requires = metadata.get_all("Requires-Dist")
    core = {re.match(r"[\w.-]+", r).group(0) for r in requires if "extra ==" not in r}
    assert core == {"tensorflow", "keras", "numpy", "pillow", "protobuf", "google-crc32c", "tqdm",
                    "nvidia-ml-py"}
    # The Keras versions keras_hooks is tested on, which `dalipipe doctor` reads.
    assert "keras<3.16,>=3.11" in requires
    assert keras_outside_range("3.15.1", requires) is None
    assert "pip install 'keras<3.16,>=3.11'" in keras_outside_range("3.16.0", requires)
    assert set(metadata.get_all("Provides-Extra")) == {
        "cuda12", "cuda13", "gpu", "sample", "bench", "pandas", "torch", "jax", "s3", "gcs",
        "grain", "test"}
    for dali, extra in install.DALI_PACKAGES.items():
        assert f'{dali}<3,>=2.4; extra == "{extra}"' in requires
    assert 'pandas; extra == "pandas"' in requires
    assert "dalipipe = dalipipe.cli:main" in entry_points


def test_plugin_message_names_the_command_that_fixes_each_case():
    dali = ("nvidia-dali-cuda130", "2.4.0")
    command = "pip install --no-build-isolation nvidia-dali-tf-plugin-cuda130==2.4.0"
    assert f"{install.pip_extra('cuda12')} or {install.pip_extra('cuda13')}" in \
        install.plugin_message(None, None, "2.21.0")
    missing = install.plugin_message(dali, None, "2.21.0")
    assert "TensorFlow (2.21.0)" in missing and f"\n    {command}\n" in missing
    assert "plugin 2.3.0 does not match DALI 2.4.0" in install.plugin_message(dali, "2.3.0", "2.21.0")
    broken = install.plugin_message(dali, "2.4.0", "2.21.0", "undefined symbol")
    assert broken.endswith("pip install --force-reinstall --no-deps --no-cache-dir "
                           "--no-build-isolation nvidia-dali-tf-plugin-cuda130==2.4.0")


@pytest.mark.slow  # imports TensorFlow in a fresh interpreter
def test_make_dali_dataset_without_the_plugin_names_the_command():
    script = BLOCK_PLUGIN + """
from dalipipe import make_dali_dataset  # the plugin is imported at the first call
try:
    make_dali_dataset("no-such-folder", format="tf")
except ImportError as e:
    print(e)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True).stdout
    name, version = install.dali_package()
    assert f"--no-build-isolation {install.plugin_package(name)}=={version}" in out


def test_the_command_for_an_extra_fits_how_dalipipe_was_installed(tmp_path):
    editable = '{"dir_info": {"editable": true}, "url": "file:///src/my%20clone"}'
    assert install.installation(editable) == ("editable", "/src/my clone")
    assert install.pip_extra("torch", how=install.installation(editable)) == \
        "pip install -e '.[torch]' in /src/my clone"
    folder = '{"dir_info": {}, "url": "file:///src/clone"}'
    assert install.pip_extra("torch", how=install.installation(folder)) == \
        "pip install '/src/clone[torch]'"
    vcs = '{"vcs_info": {"vcs": "git"}, "url": "https://example.org/dalipipe.git"}'
    assert install.pip_extra("jax", how=install.installation(vcs)) == \
        "pip install 'dalipipe[jax] @ https://example.org/dalipipe.git'"
    assert install.pip_extra("torch", how=install.installation(None)) == \
        "pip install 'dalipipe[torch]'"
    assert install.installation(installed=False, checkout=str(tmp_path)) == \
        ("editable", str(tmp_path))
    # This test runs from a checkout: the command names it, never the index's package.
    here = install.pip_extra("torch")
    checkout = os.path.dirname(os.path.dirname(os.path.abspath(install.__file__)))
    assert here == f"pip install -e '.[torch]' in {checkout}"
