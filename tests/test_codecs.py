"""codecs: the nvJPEG that nvImageCodec loads, the crop set-up chosen for it, and the
GPU graph's decoders against what the installed nvImageCodec accepts on the GPU.

A GPU graph cannot be built here (DALI needs CUDA to build or serialize it), but it
can be defined: the tests read its operators and their arguments.
"""

import importlib.metadata
import itertools
import os

import pytest

from dalipipe import codecs, graph, make_dali_pipeline
from dalipipe.options import Options
from dalipipe.pipeline import ImagePipeline

DECODERS = {"decoders__Image": "full", "decoders__ImageSlice": "region"}


def installed_nvjpeg_wheel():
    """`(major, minor, patch)` of the installed nvJPEG wheel, or None."""
    for package in ("nvidia-nvjpeg-cu12", "nvidia-nvjpeg", "nvidia-nvjpeg-cu13"):
        try:
            version = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
        return tuple(int(part) for part in version.split(".")[:3])
    return None


def decoder_ops(pipe):
    """`(kind, device, jpeg_fancy_upsampling)` of each image decoder in `pipe`'s graph
    (a DALI `Pipeline`, defined but not built)."""
    # DALI has no public reader of a defined graph's operators: `_build_graph` and
    # `_ops` define and list them without creating the backend pipeline, which a
    # graph naming a GPU cannot do here.
    pipe._build_graph()
    found = []
    for instance in pipe._ops:
        op = instance._op
        kind = DECODERS.get(getattr(op, "schema_name", None))
        if kind is not None:
            found.append((kind, op.device, bool(op._init_args.get("jpeg_fancy_upsampling"))))
    return found


def refused_on_gpu(decoders, version):
    """The decoders that nvImageCodec would refuse on the GPU and hand to the CPU:
    region decodes with fancy upsampling when nvJPEG (`version`) is older than 13.2."""
    return [d for d in decoders if d[0] == "region" and d[1] == "mixed" and d[2]
            and not codecs.roi_fancy_upsampling(version)]


def graph_option_sets():
    """Every valid combination of the options that change the decode part of the graph."""
    names = ("augment", "crop_to_aspect_ratio", "central_fraction", "pad_to_aspect_ratio",
             "color_mode")
    values = ((False, True), (False, True), (1.0, 0.75), (False, True),
              ("rgb", "grayscale", "rgba"))
    sets = []
    for combination in itertools.product(*values):
        try:
            Options(**dict(zip(names, combination)))
        except ValueError:
            continue
        sets.append(dict(zip(names, combination)))
    return sets


@pytest.fixture(scope="module")
def cpu_pipe(color_dir):
    return make_dali_pipeline(color_dir, device="cpu", image_size=(16, 16), batch_size=4,
                              seed=0, check=None, verbose=False)


def gpu_graph(cpu_pipe, **changes):
    """The DALI graph (defined, not built) of `cpu_pipe` on a GPU, with `changes`."""
    options = cpu_pipe.options.replace(device="gpu", **changes)
    return ImagePipeline(cpu_pipe.index, options).dali_pipeline()


def test_nvjpeg_version_is_the_installed_wheels():
    wheel = installed_nvjpeg_wheel()
    if wheel is None:
        pytest.skip("no nvJPEG wheel installed")
    assert codecs.nvjpeg_version() == wheel  # (12, 4, 0) with nvidia-nvjpeg-cu12 12.4.0.76


def test_nvjpeg_library_is_found_through_the_extensions_runpath():
    extension = codecs.nvimgcodec_extension()
    if extension is None:
        pytest.skip("nvImageCodec's nvJPEG extension is not installed")
    with open(extension, "rb") as f:
        runpath = codecs._elf_runpath(f.read())
    assert "$ORIGIN/../../nvjpeg/lib" in runpath or "$ORIGIN/../../cu13/lib" in runpath, runpath
    library = codecs.nvjpeg_library()
    assert os.path.basename(library) in ("libnvjpeg.so.12", "libnvjpeg.so.13")
    assert os.path.isfile(library)


def test_nvjpeg_library_looks_in_ld_library_path_first(tmp_path, monkeypatch):
    library = codecs.nvjpeg_library()
    if library is None or not os.path.isfile(library):
        pytest.skip("no nvJPEG library file installed")
    (tmp_path / os.path.basename(library)).symlink_to(library)
    monkeypatch.setenv("LD_LIBRARY_PATH", f"/nonexistent:{tmp_path}")
    assert codecs.nvjpeg_library() == str(tmp_path / os.path.basename(library))


def test_nvjpeg_version_is_none_without_a_library(tmp_path):
    assert codecs.nvjpeg_version(str(tmp_path / "libnvjpeg.so.99")) is None
    not_elf = tmp_path / "libnvjpeg_ext.so.0.9.0"
    not_elf.write_bytes(b"no library here")
    assert codecs._elf_runpath(not_elf.read_bytes()) == []
    assert codecs.nvjpeg_library(str(not_elf)) is None


@pytest.mark.parametrize("version, setup", [
    ((12, 4, 0), codecs.FULL_DECODE),
    ((13, 1, 5), codecs.FULL_DECODE),
    ((13, 2, 0), codecs.ROI_DECODE),
    ((13, 3, 1), codecs.ROI_DECODE),
    (None, codecs.FULL_DECODE),
])
def test_crop_setup_follows_the_nvjpeg_version(version, setup):
    assert codecs.crop_setup(version, environ={}) == setup
    forced = {codecs.ROI_FANCY_UPSAMPLING_ENV: "0"}
    assert codecs.crop_setup(version, environ=forced) == codecs.FULL_DECODE
    # "1" (or anything else) does not force a region decode that nvJPEG would refuse.
    assert codecs.crop_setup(version, environ={codecs.ROI_FANCY_UPSAMPLING_ENV: "1"}) == setup


def test_crop_setup_reads_the_environment(monkeypatch):
    monkeypatch.setenv(codecs.ROI_FANCY_UPSAMPLING_ENV, "0")
    assert codecs.crop_setup((13, 3, 0)) == codecs.FULL_DECODE
    monkeypatch.delenv(codecs.ROI_FANCY_UPSAMPLING_ENV)
    assert codecs.crop_setup() == codecs.crop_setup(codecs.nvjpeg_version(), environ={})


def test_codecs_imports_neither_tensorflow_nor_cuda():
    import subprocess
    import sys

    # `import dalipipe` loads DALI itself (dalipipe.dali_import); codecs adds nothing.
    code = ("import sys, dalipipe; before = set(sys.modules); "
            "from dalipipe import codecs; codecs.crop_setup(); "
            "bad = [m for m in set(sys.modules) - before if m.split('.')[0] in "
            "('tensorflow', 'torch') or m.startswith(('nvidia.dali', 'nvidia.nvimgcodec'))]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=os.path.dirname(__file__) + "/..")


@pytest.mark.parametrize("changes", graph_option_sets(),
                         ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_gpu_graph_asks_only_for_decodes_the_gpu_accepts(cpu_pipe, changes):
    decoders = decoder_ops(gpu_graph(cpu_pipe, **changes))
    assert decoders, "no image decoder in the graph"
    # Every decoder is nvImageCodec's mixed one, upsampling chroma like the CPU's...
    assert {d[1:] for d in decoders} == {("mixed", True)}, decoders
    # ...and none of them asks for what the installed nvJPEG refuses.
    assert refused_on_gpu(decoders, codecs.nvjpeg_version()) == []
    expected = ({"region"} if codecs.crop_setup() == codecs.ROI_DECODE else {"full"}) \
        if changes["augment"] else {"full"}
    assert {d[0] for d in decoders} == expected


@pytest.mark.parametrize("setup", [codecs.ROI_DECODE, codecs.FULL_DECODE])
def test_each_crop_setup_defines_its_decoder(cpu_pipe, setup, monkeypatch):
    monkeypatch.setattr(graph, "_crop_setup", lambda options: setup)
    decoders = decoder_ops(gpu_graph(cpu_pipe, augment=True))
    if setup == codecs.ROI_DECODE:
        assert decoders == [("region", "mixed", True)]
        # The guard sees it: nvJPEG 12.4 refuses this, 13.2 accepts it.
        assert refused_on_gpu(decoders, (12, 4, 0)) == decoders
        assert refused_on_gpu(decoders, (13, 2, 0)) == []
    else:
        assert decoders == [("full", "mixed", True)]


def test_forcing_the_older_setup_changes_the_gpu_graph(cpu_pipe, monkeypatch):
    monkeypatch.setattr(codecs, "nvjpeg_version", lambda library=None: (13, 3, 0))
    assert decoder_ops(gpu_graph(cpu_pipe, augment=True))[0][0] == "region"
    monkeypatch.setenv(codecs.ROI_FANCY_UPSAMPLING_ENV, "0")
    assert decoder_ops(gpu_graph(cpu_pipe, augment=True))[0][0] == "full"


def test_cpu_graph_still_decodes_only_the_crop(cpu_pipe, monkeypatch):
    monkeypatch.setenv(codecs.ROI_FANCY_UPSAMPLING_ENV, "0")
    pipe = ImagePipeline(cpu_pipe.index, cpu_pipe.options.replace(augment=True))
    assert decoder_ops(pipe.dali_pipeline()) == [("region", "cpu", False)]
