"""What dalipipe needs beside itself, and the commands that install what is missing.

DALI comes in one package per CUDA major version, installed by dalipipe's extras
`cuda12` (`nvidia-dali-cuda120`) and `cuda13` (`nvidia-dali-cuda130`). DALI's
TensorFlow plugin is compiled against the installed TensorFlow, so it is installed
after TensorFlow, at DALI's exact version, without build isolation:
`pip install --no-build-isolation nvidia-dali-tf-plugin-cuda120==<DALI version>`, which
`dalipipe install-plugin` runs. Nothing here imports DALI or TensorFlow until
`import_dali_tf` is called.

The commands that add one of dalipipe's extras (`pip_extra`) fit how dalipipe was
installed: from a package index, `pip install 'dalipipe[torch]'`; editable from a
checkout, `pip install -e '.[torch]'` in that checkout.
"""

import functools
import importlib.metadata
import json
import os
import subprocess
import sys
import urllib.parse



def installation(direct_url=None, *, installed=True, checkout=None):
    """How dalipipe was installed, from its `direct_url.json` (PEP 610).

    Args:
        direct_url: the text of the installed distribution's `direct_url.json`, or
            None where it has none (installed from a package index).
        installed: whether a `dalipipe` distribution is installed at all.
        checkout: the folder of the checkout that the running code lives in (one
            with a pyproject.toml), or None.

    Returns:
        `(kind, where)`: `("editable", folder)` (`pip install -e` of a checkout, or
        code run from a checkout that is not installed), `("local", folder)` (a
        plain `pip install` of a folder), `("url", url)` (from a VCS or archive
        URL), or `("index", None)`.
    """
    if not installed:
        return ("editable", checkout) if checkout else ("index", None)
    if not direct_url:
        return "index", None
    info = json.loads(direct_url)
    url = info.get("url", "")
    if url.startswith("file://"):
        folder = urllib.parse.unquote(urllib.parse.urlparse(url).path)
        editable = info.get("dir_info", {}).get("editable", False)
        return ("editable" if editable else "local"), folder
    return "url", url


@functools.lru_cache(maxsize=None)
def _this_installation():
    package = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(package)
    checkout = root if os.path.isfile(os.path.join(root, "pyproject.toml")) else None
    if checkout:  # the code that runs is a checkout's (installed with -e, or not at all)
        return installation(installed=False, checkout=checkout)
    try:
        distribution = importlib.metadata.distribution("dalipipe")
    except importlib.metadata.PackageNotFoundError:
        return installation(installed=False)
    return installation(distribution.read_text("direct_url.json"))


def pip_extra(*extras, how=None):
    """The command that installs dalipipe's `extras`, for how dalipipe was installed.

    Args:
        *extras: extra names, such as "torch".
        how: `installation()`'s `(kind, where)`. Defaults to this installation's.

    Returns:
        A string: `pip install 'dalipipe[torch]'` (from an index), `pip install -e
        '.[torch]' in <folder>` (a checkout), `pip install '<folder>[torch]'` (a
        folder installed without -e), or `pip install 'dalipipe[torch] @ <url>'`.
    """
    kind, where = how or _this_installation()
    names = ",".join(extras)
    if kind == "editable":
        return f"pip install -e '.[{names}]' in {where}"
    if kind == "local":
        return f"pip install '{where}[{names}]'"
    if kind == "url":
        return f"pip install 'dalipipe[{names}] @ {where}'"
    return f"pip install 'dalipipe[{names}]'"


# DALI's package for each CUDA major version -> the dalipipe extra that installs it.
DALI_PACKAGES = {"nvidia-dali-cuda120": "cuda12", "nvidia-dali-cuda130": "cuda13"}
# What installs DALI, or makes it see the GPUs.
DALI_FIX = (
    "install DALI for the CUDA version of the NVIDIA driver (nvidia-smi shows it; CUDA 12 "
    "where there is no GPU): " + " or ".join(pip_extra(extra) for extra in DALI_PACKAGES.values())
)


def installed_version(name):
    """The installed version of distribution `name`, or None."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def dali_package():
    """`(name, version)` of the installed DALI package, such as
    `("nvidia-dali-cuda120", "2.4.0")`, or None."""
    for name in DALI_PACKAGES:
        version = installed_version(name)
        if version:
            return name, version
    return None


def plugin_package(dali_name):
    """The name of DALI's TensorFlow plugin package for DALI package `dali_name`."""
    return dali_name.replace("nvidia-dali-", "nvidia-dali-tf-plugin-", 1)


def plugin_command(dali=None, *, rebuild=False):
    """The pip command, as a list, that installs the plugin for `dali` (a
    `(name, version)` pair; defaults to the installed DALI), built anew if `rebuild`."""
    name, version = dali or dali_package()
    again = ["--force-reinstall", "--no-deps", "--no-cache-dir"] if rebuild else []
    return ["pip", "install", *again, "--no-build-isolation",
            f"{plugin_package(name)}=={version}"]


def install_plugin(*, quiet=False):
    """Runs `plugin_command()` with this Python's pip (with `-q` if `quiet`); returns
    pip's exit status.

    Raises:
        ImportError: when DALI or TensorFlow, which the plugin is built for, is not
            installed.
    """
    dali = dali_package()
    if dali is None or installed_version("tensorflow") is None:
        raise ImportError(plugin_message(dali, None, installed_version("tensorflow")))
    command = [sys.executable, "-m"] + plugin_command(dali) + (["-q"] if quiet else [])
    print(" ".join(command), flush=True)
    return subprocess.run(command).returncode


def plugin_message(dali, plugin_version, tensorflow_version, error=None):
    """Why DALI's TensorFlow plugin cannot be used, and the command that fixes it.

    Args:
        dali: `(name, version)` of the installed DALI package, or None.
        plugin_version: the installed plugin package's version, or None.
        tensorflow_version: the installed TensorFlow's version, or None.
        error: the error that importing the plugin raised, if it was tried.
    """
    if dali is None:
        return f"NVIDIA DALI is not installed: {DALI_FIX}."
    if tensorflow_version is None:
        return f"TensorFlow is not installed: {pip_extra('gpu')} (or pip install tensorflow)."
    name, version = dali
    command = " ".join(plugin_command(dali))
    if plugin_version is None:
        return (
            f"DALI's TensorFlow plugin is not installed. It is compiled against the "
            f"installed TensorFlow ({tensorflow_version}) for the installed DALI "
            f"({name} {version}), so install it after both, in this environment:\n"
            f"    {command}\n"
            "or run `dalipipe install-plugin`, which runs that command with this Python."
        )
    if plugin_version != version:
        return (
            f"DALI's TensorFlow plugin {plugin_version} does not match DALI {version}. "
            f"Install the plugin of DALI's version:\n    {command}"
        )
    return (
        f"DALI's TensorFlow plugin {plugin_version} is installed but does not load with "
        f"TensorFlow {tensorflow_version}: {error}\n"
        f"Rebuild it against this TensorFlow:\n    {' '.join(plugin_command(dali, rebuild=True))}"
    )


def import_dali_tf():
    """Imports DALI's TensorFlow plugin, `nvidia.dali.plugin.tf`, and returns it.

    Raises:
        ImportError: when DALI, TensorFlow or the plugin is missing or does not load,
            with the command that installs it.
    """
    try:
        from nvidia.dali.plugin import tf as dali_tf
    except ImportError as e:
        dali = dali_package()
        plugin = installed_version(plugin_package(dali[0])) if dali else None
        raise ImportError(
            plugin_message(dali, plugin, installed_version("tensorflow"), e)
        ) from e
    return dali_tf
