"""codecs: the nvJPEG that nvImageCodec loads, the crop set-up chosen for it, and the
GPU graph's decoders against what the installed nvImageCodec accepts on the GPU; the
decoders' preallocation hints (capped by area) and the GPU memory they bound; and, in
every GPU graph set-up (the masks and boxes graphs among them), no input that an
operator reads on the host placed on the GPU.

A GPU graph cannot be built here (DALI needs CUDA to build or serialize it), but it
can be defined: the tests read its operators, their arguments and their inputs.
"""

import importlib.metadata
import itertools
import os

import pytest

from dalipipe import codecs, graph, make_dali_pipeline
from dalipipe.decoder_settings import (DECODER_ARGUMENTS, HINT_AREA_LIMIT, REFUSED, capped_hints,
                                       gpu_memory, gpu_memory_line)
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
    return ImagePipeline(cpu_pipe.index, options).build_dali_pipeline()


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
    assert decoder_ops(pipe.build_dali_pipeline()) == [("region", "cpu", False)]


GPU_DECODER_SETTINGS = {"hw_decoder_load": 0.35, "preallocate_width_hint": 640,
                        "preallocate_height_hint": 480, "device_memory_padding": 1 << 20,
                        "host_memory_padding": 0, "device_memory_padding_jpeg2k": 1 << 16,
                        "host_memory_padding_jpeg2k": 1 << 16,
                        "hybrid_huffman_threshold": 4_000_000, "affine": False}


def decoder_arguments(pipe):
    """`(device, {argument: value})` of each image decoder in `pipe`'s defined graph."""
    pipe._build_graph()  # see `decoder_ops`
    return [(i._op.device, dict(i._op._init_args)) for i in pipe._ops
            if getattr(i._op, "schema_name", None) in DECODERS]


def test_decoder_takes_arguments_of_dali_s_decoders_for_the_gpu_only():
    """Each key `decoder` takes is an argument of both DALI decoders that dalipipe
    calls, of DALI's type, documented as applying only to the mixed backend; each it
    refuses is an argument of DALI's decoder too."""
    from nvidia.dali import backend

    types = {"hw_decoder_load": "FLOAT", "hybrid_huffman_threshold": "UINT32",
             "affine": "BOOL"}
    assert set(GPU_DECODER_SETTINGS) == set(DECODER_ARGUMENTS)
    for schema_name in DECODERS:
        schema = backend.GetSchema(schema_name)
        for name in DECODER_ARGUMENTS:
            assert schema.HasArgument(name) and not schema.IsDeprecatedArg(name), name
            assert str(schema.GetArgumentType(name)).endswith(types.get(name, "INT32")), name
            assert "only** to the ``mixed`` backend" in schema.GetArgumentDox(name), name
        assert all(schema.HasArgument(name) for name in REFUSED if name != "device")
        assert schema.GetSupportedBackends() == ["cpu", "mixed"]


@pytest.mark.parametrize("augment", [False, True])
def test_gpu_decoders_take_the_decoder_settings_and_the_cpu_ones_none(cpu_pipe, augment):
    gpu = decoder_arguments(gpu_graph(cpu_pipe, augment=augment, decoder=GPU_DECODER_SETTINGS))
    assert gpu and all(device == "mixed" for device, _ in gpu)
    for _, arguments in gpu:
        assert {k: arguments[k] for k in GPU_DECODER_SETTINGS} == GPU_DECODER_SETTINGS
        assert arguments["jpeg_fancy_upsampling"] is True
    # Without `decoder` (and without hints from a check), DALI's defaults: none given.
    for _, arguments in decoder_arguments(gpu_graph(cpu_pipe, augment=augment, decoder=None)):
        assert not set(DECODER_ARGUMENTS) & set(arguments)
    pipe = ImagePipeline(cpu_pipe.index, cpu_pipe.options.replace(
        augment=augment, decoder=GPU_DECODER_SETTINGS))
    for device, arguments in decoder_arguments(pipe.build_dali_pipeline()):
        assert device == "cpu" and not set(DECODER_ARGUMENTS) & set(arguments)


@pytest.mark.parametrize("crop", [False, True])
@pytest.mark.parametrize("setup", [codecs.ROI_DECODE, codecs.FULL_DECODE])
def test_gpu_decode_ceiling_decodes_as_the_gpu_graph(cpu_pipe, crop, setup, monkeypatch):
    """`gpu_bench.py`'s decode-only ceiling on the GPU has the graph's decoders: mixed,
    fancy upsampling, the crop set-up's decode, the decoder settings."""
    from dalipipe.bench import harness

    monkeypatch.setattr(graph, "_crop_setup", lambda options: setup)
    pipe = harness.ceiling_pipeline(cpu_pipe.file_paths[:8], 4, 2, "gpu", crop,
                                    dict(decoder={"hw_decoder_load": 0.35}))
    ceiling = decoder_ops(pipe)
    expected = decoder_ops(gpu_graph(cpu_pipe, augment=crop))
    assert ceiling == expected and {d[1:] for d in ceiling} == {("mixed", True)}
    assert [a["hw_decoder_load"] for _, a in decoder_arguments(pipe)] == [0.35]


def test_preallocation_hints_default_to_the_sizes_the_check_read(tmp_path, fresh_cache):
    """The check's header parse gives each image's size, kept in its cache: the
    hints left None come from them (`decoder_hints`: of three images, the widest width
    and the tallest height), cached runs too."""
    import sqlite3

    from PIL import Image

    from dalipipe.checks import cache as check_cache, driver

    root = tmp_path / "images"
    (root / "a").mkdir(parents=True)
    for i, size in enumerate([(40, 30), (64, 20), (25, 50)]):
        Image.new("RGB", size, (i * 60, 90, 30)).save(root / "a" / f"{i}.jpg")
    # A cache written before sizes were kept (VERSION 4, no width or height column).
    os.makedirs(fresh_cache)
    old = sqlite3.connect(check_cache.cache_path(fresh_cache))
    old.execute("CREATE TABLE checks (path BLOB PRIMARY KEY, size INTEGER, mtime_ns INTEGER, "
                "mode TEXT, version INTEGER, reason TEXT)")
    old.commit()
    old.close()

    def hints(**options):
        pipe = make_dali_pipeline(str(root), device="cpu", verbose=False, **options)
        decoder = pipe.options.decoder or {}
        return pipe, (decoder.get("preallocate_width_hint"),
                      decoder.get("preallocate_height_hint"))

    computed = driver.COUNTS["computed"]
    pipe, found = hints()
    assert found == (64, 50) and driver.COUNTS["computed"] == computed + 3
    cached = driver.COUNTS["cached"]
    assert hints()[1] == (64, 50) and driver.COUNTS["cached"] == cached + 3
    assert hints(decoder={"preallocate_width_hint": 4000})[1] == (4000, 50)
    assert hints(check=None)[1] == (None, None)
    gpu = decoder_arguments(ImagePipeline(pipe.index, pipe.options.replace(device="gpu"))
                            .build_dali_pipeline())
    assert [(a["preallocate_width_hint"], a["preallocate_height_hint"]) for _, a in gpu] == \
        [(64, 50)]


# --- what a GPU graph reads on the host ------------------------------------------------

# Options that change the graph beyond its decode part (`graph_option_sets`), each set
# on its own; `padded` (a shard's weights) and `feeds_bytes` (records, `gs://`) are
# `graph.define`'s own arguments.
GRAPH_VARIANTS = [
    {}, {"label_mode": None}, {"label_mode": "categorical"}, {"label_mode": "binary"},
    {"label_mode": "categorical", "mix": "mixup"}, {"label_mode": "categorical", "mix": "cutmix"},
    {"augment": "randaugment"}, {"augment": "trivialaugment"}, {"augment": "autoaugment"},
    {"class_weight": {0: 2.0, 2: 0.5}}, {"dtype": "float16"}, {"dtype": "uint8"},
    {"data_format": "channels_first"}, {"padded": True}, {"feeds_bytes": True},
]


# The dense graphs: masks (decoded on the CPU, cut and resized with their images) and
# boxes (placed in NumPy, passed through), each with the geometries, a recipe, a
# shard's weights and records; `crop` variants are walked in both crop set-ups.
DENSE = {"label_mode": None}
MASKS, BOXES = {**DENSE, "masks": "masks/"}, {**DENSE, "boxes": "boxes.json"}
DENSE_VARIANTS = [
    MASKS, {**MASKS, "augment": True}, {**MASKS, "pad_to_aspect_ratio": True},
    {**MASKS, "crop_to_aspect_ratio": True, "central_fraction": 0.75},
    {**MASKS, "augment": "randaugment"}, {**MASKS, "augment": "autoaugment"},
    {**MASKS, "data_format": "channels_first"}, {**MASKS, "padded": True},
    {**MASKS, "augment": True, "feeds_bytes": True}, {**MASKS, "color_mode": "grayscale"},
    BOXES, {**BOXES, "augment": True}, {**BOXES, "augment": True, "box_crop": True},
    {**BOXES, "augment": "trivialaugment"}, {**BOXES, "pad_to_aspect_ratio": True},
    {**BOXES, "padded": True}, {**BOXES, "feeds_bytes": True},
]


def every_gpu_graph_setup():
    """`(options changes, define arguments, crop set-up)` of every GPU graph set-up: the
    decode combinations with each crop set-up where they crop, then `GRAPH_VARIANTS`
    and `DENSE_VARIANTS` (those that crop in both set-ups)."""
    setups = []
    for changes in graph_option_sets():
        for setup in ((codecs.ROI_DECODE, codecs.FULL_DECODE) if changes["augment"]
                      else (codecs.FULL_DECODE,)):
            setups.append((changes, {}, setup))
    for variant in DENSE_VARIANTS:
        arguments = {k: variant[k] for k in ("padded", "feeds_bytes") if k in variant}
        changes = {k: v for k, v in variant.items() if k not in arguments}
        for setup in ((codecs.ROI_DECODE, codecs.FULL_DECODE) if changes.get("augment")
                      else (codecs.FULL_DECODE,)):
            setups.append((changes, arguments, setup))
    for variant in GRAPH_VARIANTS:
        arguments = {k: variant[k] for k in ("padded", "feeds_bytes") if k in variant}
        changes = {k: v for k, v in variant.items() if k not in arguments}
        setups.append((changes, arguments, codecs.FULL_DECODE))
    return setups


def defined_graph(options, padded=False, feeds_bytes=False, num_classes=3):
    """The DALI graph of `options` (device "gpu"), defined, not built (see `decoder_ops`)."""
    from nvidia.dali import pipeline_def

    @pipeline_def(batch_size=4, num_threads=1, device_id=0, seed=0,
                  enable_conditionals=options.color_mode == "rgba" or options.recipe is not None)
    def define():
        return graph.define(options, feed=None, padded=padded, feeds_bytes=feeds_bytes,
                            num_classes=num_classes)

    pipe = define()
    pipe._build_graph()
    return pipe


def host_inputs_on_the_gpu(pipe):
    """`(operator, input)` of each input of `pipe`'s defined graph that its operator
    reads on the host but that is on the GPU, each a copy back and a synchronization
    per batch: named argument inputs, and positional inputs that the schema names as
    parameters (`fn.slice`'s `anchor` and `shape`: every documented input after the
    first). A constant on the GPU as data (DALI's recipes index a table of
    magnitudes on the GPU) is read there, and is not one."""
    found = []
    for instance in pipe._ops:
        op, spec = instance._op, instance._spec
        name = getattr(op, "schema_name", type(op).__name__)
        schema = op.schema
        for i in range(spec.NumInput()):
            if spec.InputDevice(i) != "gpu":
                continue
            if i >= spec.NumRegularInput():
                found.append((name, f"argument input {spec.InputName(i)}"))
            elif i > 0 and schema.HasInputDox():
                found.append((name, f"input {schema.GetInputName(i)}"))
    return found


@pytest.mark.parametrize("changes, arguments, setup", every_gpu_graph_setup(),
                         ids=lambda v: "-".join(f"{k}={x}" for k, x in v.items())
                         if isinstance(v, dict) else str(v))
def test_gpu_graph_reads_no_host_input_from_the_gpu(cpu_pipe, changes, arguments, setup,
                                                     monkeypatch):
    monkeypatch.setattr(graph, "_crop_setup", lambda options: setup)
    options = cpu_pipe.options.replace(device="gpu", **changes)
    assert host_inputs_on_the_gpu(defined_graph(options, **arguments)) == []


def test_the_walk_reaches_the_dense_graphs(cpu_pipe):
    """The dense variants define their own graphs: a mask decoder on the CPU beside the
    image's on the GPU, and the boxes' columns unpacked (more operators)."""
    def graph_of(changes):
        return defined_graph(cpu_pipe.options.replace(device="gpu", **changes))

    assert {d[1] for d in decoder_ops(graph_of(MASKS))} == {"mixed", "cpu"}
    assert len(graph_of(BOXES)._ops) > len(graph_of(DENSE)._ops)


def test_the_walk_sees_a_slice_shape_on_the_gpu():
    """A Python list as `fn.slice`'s shape in a GPU graph is what the walk finds."""
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def(batch_size=1, num_threads=1, device_id=0)
    def sliced():
        data = fn.external_source(name="x", dtype=types.UINT8, ndim=1).gpu()
        return fn.slice(data, types.Constant([0], device="cpu"), [1], axes=[0])

    pipe = sliced()
    pipe._build_graph()
    assert ("Slice", "input shape") in host_inputs_on_the_gpu(pipe)


def test_preallocation_hints_follow_the_typical_large_image_not_the_largest():
    """`decoder_hints`: the 99th percentile of the widths and of the heights, their
    area at most `HINT_AREA_LIMIT` pixels; hints given are kept."""
    from dalipipe.decoder_settings import decoder_hints

    def hints(sizes, **options):
        decoder = decoder_hints(Options(**options), sizes).decoder or {}
        return decoder.get("preallocate_width_hint"), decoder.get("preallocate_height_hint")

    # ImageNet-like: one 6,000 x 6,000 photograph among many 500 x 375 ones.
    assert hints([(500, 375)] * 999 + [(6000, 6000)]) == (500, 375)
    # The percentile is an image's own width and height, by nearest rank.
    assert hints([(w, 1001 - w) for w in range(1, 1001)]) == (990, 990)
    assert hints([(64, 20), (40, 30), (25, 50)]) == (64, 50)  # few: the largest
    # More than 1 % of large photographs: the area's bound, the aspect ratio kept.
    width, height = hints([(8000, 6000)] * 50 + [(500, 375)] * 50)
    assert width * height <= HINT_AREA_LIMIT and (width, height) == (1672, 1254)
    assert hints([(1920, 1080)] * 10) == (1920, 1080)  # full HD fits
    assert hints([(20000, 40)] * 10) == (20000, 40)  # a long side alone is no cost
    # A hint given is kept; the other one fits the area with it.
    assert hints([(8000, 300)] * 10, decoder={"preallocate_width_hint": 7000}) == (7000, 299)
    assert hints([(300, 8000)] * 10, decoder={"preallocate_height_hint": 9000}) == (233, 9000)
    kept = decoder_hints(Options(decoder={"hw_decoder_load": 0.2}), [(64, 20)]).decoder
    assert kept == {"preallocate_width_hint": 64, "preallocate_height_hint": 20,
                    "hw_decoder_load": 0.2}
    assert hints([]) == (None, None)
    assert hints([(500, 375)] * 100 + [(900, 600)] * 5) == (900, 600)


@pytest.mark.parametrize("width, height", [(4096, 4096), (8000, 6000), (1449, 1448),
                                           (3, 2**21), (99999, 99999)])
def test_capped_hints_stay_within_the_area(width, height):
    capped = capped_hints(width, height)
    assert capped[0] * capped[1] <= HINT_AREA_LIMIT
    assert capped[0] <= width and capped[1] <= height
    assert capped[0] * capped[1] > 0.99 * min(HINT_AREA_LIMIT, width * height) - capped[0] - capped[1]
    assert abs(capped[0] / capped[1] - width / height) <= 0.01 * width / height + 1 / capped[1]


def test_gpu_memory_counts_each_buffer_for_each_pipeline():
    """The hardware decoder's batch is `ceil(batch * load)` images at the hints; each
    queued batch holds its decoded images and its outputs; all times the pipelines."""
    memory = gpu_memory(batch_size=256, width_hint=4096, height_hint=4096,
                        hw_decoder_load=0.65, num_pipelines=1, prefetch_queue_depth=2)
    assert memory["hardware decoder"] == 167 * 4096 * 4096 * 3  # the 8 GB
    assert memory["decoded"] == 2 * 256 * 4096 * 4096 * 3 and memory["outputs"] == 0
    capped = gpu_memory(batch_size=256, width_hint=1672, height_hint=1254,
                        num_pipelines=2, sample_bytes=224 * 224 * 3 * 4)
    assert capped["hardware decoder"] == 2 * 167 * 1672 * 1254 * 3 < 2.2 * 2**30
    assert capped["outputs"] == 2 * 2 * 256 * 224 * 224 * 3 * 4
    assert capped["total"] == sum(v for k, v in capped.items() if k != "total")
    assert gpu_memory(batch_size=256, width_hint=500, height_hint=375,
                      hw_decoder_load=0.0)["hardware decoder"] == 0


def test_the_verbose_line_states_the_bound_and_its_parts():
    options = Options(batch_size=256, decoder={"preallocate_width_hint": 1672,
                                               "preallocate_height_hint": 1254,
                                               "hw_decoder_load": 0.9})
    line = gpu_memory_line(options, 2, sample_bytes=1000)
    total = gpu_memory(batch_size=256, width_hint=1672, height_hint=1254, hw_decoder_load=0.9,
                       num_pipelines=2, sample_bytes=1000)["total"]
    assert line.startswith("GPU memory for images up to the decoder's hints (1672x1254): at "
                           f"most {total / 2**30:.2f} GiB in 2 pipeline(s)")
    assert "hw_decoder_load=0.9" in line
    assert gpu_memory_line(Options(), 1) is None  # no check, no hints: nothing to bound


def test_the_verbose_line_counts_the_outputs_and_the_pipelines(indexed_dir, capsys):
    """`pipeline._print_gpu_memory`: the check's hints, the outputs' bytes per sample
    (images and labels) and one pipeline per split (printed on a GPU; called here)."""
    from dalipipe.pipeline import _print_gpu_memory

    pair = make_dali_pipeline(indexed_dir, device="cpu", image_size=(8, 8), batch_size=4,
                              validation_split=0.5, subset="both", seed=1, verbose=False)
    decoder = pair[0].options.decoder
    _print_gpu_memory(pair)
    expected = gpu_memory_line(pair[0].options, 2, sample_bytes=8 * 8 * 3 * 4 + 4)
    assert capsys.readouterr().out == expected + "\n"
    assert f"({decoder['preallocate_width_hint']}x{decoder['preallocate_height_hint']})" \
        in expected and "in 2 pipeline(s)" in expected
