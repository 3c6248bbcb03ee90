"""The installed codec libraries: which nvJPEG nvImageCodec uses, and the decoder
set-up for crops that it accepts on the GPU.

DALI's `"mixed"` decoders hand each image to nvImageCodec, which tries its decoders
in turn (nvJPEG's hardware decoder, nvJPEG's CUDA decoder, then libjpeg-turbo on the
CPU) and takes the first that accepts it, without a word. nvImageCodec 0.9's nvJPEG
decoders refuse a region (ROI) decode of a chroma-subsampled JPEG with fancy
upsampling when nvJPEG is older than 13.2: "ROI decode with fancy upsampling may
produce wrong results on image edge (1 pixel wide) with nvJPEG < 13.2 (available in
CTK 13.3)". DALI 2.4 has no argument for nvImageCodec's `enable_roi_fancy_upsampling`,
so on such an nvJPEG `fn.decoders.image_slice(device="mixed",
jpeg_fancy_upsampling=True)` decodes every training crop on the CPU.

`crop_setup()` picks how the graph decodes a crop on the GPU; `nvjpeg_version()`
reads the nvJPEG that nvImageCodec's extension would load, without a GPU: nothing
here imports TensorFlow or initialises CUDA.
"""

import ctypes
import functools
import importlib.util
import os
import re
import struct

# nvImageCodec accepts a region decode with fancy upsampling from this nvJPEG on.
ROI_FANCY_UPSAMPLING_NVJPEG = (13, 2)

# How the GPU graph decodes a crop (see `crop_setup`):
ROI_DECODE = "roi_decode"  # fn.decoders.image_slice, then fn.resize
FULL_DECODE = "full_decode"  # fn.decoders.image, fn.slice of the window, fn.resize

# Set to "0" to force `FULL_DECODE` whatever the nvJPEG (the GPU tests run both).
ROI_FANCY_UPSAMPLING_ENV = "DALIPIPE_ROI_FANCY_UPSAMPLING"

_INSTALLED = object()  # `crop_setup`'s default: the installed nvJPEG
_EXTENSION = "libnvjpeg_ext.so"
_DT_NULL, _DT_STRTAB, _DT_RPATH, _DT_RUNPATH = 0, 5, 15, 29
_PT_LOAD, _PT_DYNAMIC = 1, 2


def nvimgcodec_extension():
    """Path of nvImageCodec's nvJPEG extension (`libnvjpeg_ext.so.*`), or None when
    nvImageCodec or the extension is not installed. Does not import nvImageCodec."""
    try:
        spec = importlib.util.find_spec("nvidia.nvimgcodec")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        extensions = os.path.join(folder, "extensions")
        if os.path.isdir(extensions):
            names = sorted(n for n in os.listdir(extensions) if n.startswith(_EXTENSION))
            if names:
                return os.path.join(extensions, names[-1])
    return None


def nvjpeg_library(extension=None):
    """Path of the nvJPEG library that nvImageCodec's extension would load, or None.

    The extension opens nvJPEG by name (`libnvjpeg.so.12` with CUDA 12 wheels,
    `libnvjpeg.so.13` with CUDA 13 ones), so the dynamic loader looks in
    `LD_LIBRARY_PATH`, then in the extension's RUNPATH (for example
    `$ORIGIN/../../nvjpeg/lib`, or `$ORIGIN/../../cu13/lib` with CUDA 13), then in the
    system's library folders; this follows the same order.

    Args:
        extension: the extension's path. Defaults to `nvimgcodec_extension()`.

    Returns:
        A file path; the bare library name when only the system's loader finds it.
    """
    extension = extension or nvimgcodec_extension()
    if extension is None:
        return None
    with open(extension, "rb") as f:
        data = f.read()
    names = sorted(set(re.findall(rb"\0(libnvjpeg\.so(?:\.\d+)*)\0", data)),
                   key=lambda n: (-len(n), n))
    names = [n.decode() for n in names]
    origin = os.path.dirname(os.path.abspath(extension))
    folders = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
    folders += [p.replace("$ORIGIN", origin).replace("${ORIGIN}", origin)
                for p in _elf_runpath(data)]
    for name in names:
        for folder in folders:
            path = os.path.normpath(os.path.join(folder, name))
            if os.path.isfile(path):
                return path
    for name in names:
        try:
            ctypes.CDLL(name)
        except OSError:
            continue
        return name
    return None


@functools.lru_cache(maxsize=None)
def nvjpeg_version(library=None):
    """nvJPEG's version, as `(major, minor, patch)` ints, or None without nvJPEG.

    Reads `nvjpegGetProperty`, which needs no GPU.

    Args:
        library: path or name of the nvJPEG library. Defaults to `nvjpeg_library()`.
    """
    library = library or nvjpeg_library()
    if library is None:
        return None
    try:
        nvjpeg = ctypes.CDLL(library)
        get_property = nvjpeg.nvjpegGetProperty
    except (OSError, AttributeError):
        return None
    version = []
    for kind in (0, 1, 2):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
        value = ctypes.c_int()
        if get_property(kind, ctypes.byref(value)) != 0:
            return None
        version.append(value.value)
    return tuple(version)


def roi_fancy_upsampling(version):
    """Whether nvImageCodec decodes a region of a JPEG with fancy upsampling on the
    GPU, given nvJPEG's `version` (a tuple, or None when there is no nvJPEG)."""
    return version is not None and tuple(version[:2]) >= ROI_FANCY_UPSAMPLING_NVJPEG


def crop_setup(version=_INSTALLED, environ=None):
    """How the GPU graph decodes a random-resized crop: `ROI_DECODE` or `FULL_DECODE`.

    `ROI_DECODE` (`fn.decoders.image_slice` with fancy upsampling, then `fn.resize`)
    when nvImageCodec accepts it on the GPU: nvJPEG 13.2 or newer, unless the
    environment variable `DALIPIPE_ROI_FANCY_UPSAMPLING` is "0". Otherwise
    `FULL_DECODE`: the whole image decoded on the GPU with fancy upsampling, and the
    window cut out by `fn.slice` on the GPU before `fn.resize` (see `docs/gpus.md`
    for the pixel differences that decided it).

    Args:
        version: nvJPEG's version tuple, or None for no nvJPEG. Defaults to the
            installed one (`nvjpeg_version()`).
        environ: the environment to read. Defaults to `os.environ`.
    """
    environ = os.environ if environ is None else environ
    if version is _INSTALLED:
        version = nvjpeg_version()
    if environ.get(ROI_FANCY_UPSAMPLING_ENV, "1").strip() == "0":
        return FULL_DECODE
    return ROI_DECODE if roi_fancy_upsampling(version) else FULL_DECODE


def _elf_runpath(data):
    """The RUNPATH (or else RPATH) folders of a 64-bit little-endian ELF file's bytes."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return []
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    loads, dynamic = [], None
    for i in range(phnum):
        kind, _, offset, vaddr, _, filesz, _, _ = struct.unpack_from(
            "<IIQQQQQQ", data, phoff + i * phentsize)
        if kind == _PT_LOAD:
            loads.append((vaddr, offset, filesz))
        elif kind == _PT_DYNAMIC:
            dynamic = (offset, filesz)
    if dynamic is None:
        return []
    entries = {}
    for pos in range(dynamic[0], dynamic[0] + dynamic[1], 16):
        tag, value = struct.unpack_from("<qQ", data, pos)
        if tag == _DT_NULL:
            break
        entries.setdefault(tag, value)
    strtab = next((offset + entries[_DT_STRTAB] - vaddr for vaddr, offset, size in loads
                   if _DT_STRTAB in entries and vaddr <= entries[_DT_STRTAB] < vaddr + size), None)
    where = entries.get(_DT_RUNPATH, entries.get(_DT_RPATH))
    if strtab is None or where is None:
        return []
    text = data[strtab + where:data.index(b"\0", strtab + where)].decode()
    return [p for p in text.split(":") if p]
