"""The GPU graph against the CPU graph (DALI, NumPy and pytest only: no TensorFlow).

Skipped where DALI sees no CUDA GPU (see conftest.py). Each comparison prints its
figures; `pytest -m gpu -rP` shows them for passing tests too.
"""

import collections
import os
import re

import numpy as np
import pytest
from PIL import Image

from dalipipe import codecs, make_dali_pipeline

pytestmark = pytest.mark.gpu

# GPU against CPU, in grey levels per channel, unnormalized at 32x32: both devices
# upsample chroma the same way (`jpeg_fancy_upsampling`), which alone would differ by
# 0.91 mean and 22 at worst on these images; what is left is the inverse DCT, which
# between libjpeg-turbo's own accurate and fast ones differs by 0.95 mean and 3 at
# worst (benchmarks/jpeg_decoders.py). Both crop set-ups decode the same pixels on
# the CPU (benchmarks/crop_decoders.py), so they share the tolerance.
MEAN_TOLERANCE = 1.5
MAX_TOLERANCE = 8

# Every option that changes the graph (see graph.py), one at a time.
GRAPH_OPTIONS = {
    "plain": {},
    "augment": dict(augment=True),
    "crop_to_aspect_ratio": dict(crop_to_aspect_ratio=True, image_size=(24, 40)),
    "central_fraction": dict(central_fraction=0.75),
    "pad_to_aspect_ratio": dict(pad_to_aspect_ratio=True, image_size=(24, 40)),
    "grayscale": dict(color_mode="grayscale"),
    "grayscale_augment": dict(color_mode="grayscale", augment=True),
    "rgba": dict(color_mode="rgba"),
    "rgba_augment": dict(color_mode="rgba", augment=True),
    "mixup": dict(augment=True, mix="mixup"),
    "cutmix": dict(augment=True, mix="cutmix"),
}

# The crop set-ups: the one chosen for this machine's nvJPEG, and the one for nvJPEG
# older than 13.2, forced.
SETUPS = {"chosen": None, "forced_full_decode": "0"}


@pytest.fixture(params=list(SETUPS), ids=list(SETUPS))
def crop_setup(request, monkeypatch):
    """Sets `DALIPIPE_ROI_FANCY_UPSAMPLING` for the set-up; returns the set-up used."""
    if SETUPS[request.param] is None:
        monkeypatch.delenv(codecs.ROI_FANCY_UPSAMPLING_ENV, raising=False)
    else:
        monkeypatch.setenv(codecs.ROI_FANCY_UPSAMPLING_ENV, SETUPS[request.param])
    return codecs.crop_setup()


def noisy_gradients(root, *, count, classes, seed, suffix, **save):
    """`count` noisy horizontal gradients of random sizes (48-159 px a side) in
    `classes` class folders under `root`, saved by PIL as `suffix` with `save`."""
    rng = np.random.default_rng(seed)
    for i in range(count):
        h, w = (int(v) for v in rng.integers(48, 160, size=2))
        pixels = rng.integers(0, 120, size=(h, w, 3)) + np.linspace(0, 120, w)[None, :, None]
        folder = root / f"class_{i % classes}"
        folder.mkdir(exist_ok=True)
        Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(folder / f"{i:02d}.{suffix}",
                                                                   **save)
    return str(root)


@pytest.fixture(scope="module")
def jpeg_dir(tmp_path_factory):
    """48 noisy 4:2:0 JPEGs (no PNG: those are decoded on the CPU on every device)."""
    return noisy_gradients(tmp_path_factory.mktemp("jpegs"), count=48, classes=3, seed=11,
                           suffix="jpg", format="JPEG", quality=90, subsampling=2)


@pytest.fixture(scope="module")
def png_dir(tmp_path_factory):
    """32 noisy gradient PNGs: both devices decode them to the same pixels."""
    return noisy_gradients(tmp_path_factory.mktemp("pngs"), count=32, classes=2, seed=12,
                           suffix="png")


def both_devices(source, **options):
    cpu = make_dali_pipeline(source, device="cpu", **options)
    gpu = make_dali_pipeline(source, device="gpu", **options)
    assert gpu.device == "gpu" and cpu.device == "cpu"
    return cpu, gpu


def run_same_inputs(cpu, gpu, epoch=0):
    samples, random, _ = cpu.epoch_inputs(epoch)
    return list(cpu.run(samples, random)), list(gpu.run(samples, random))


def image_pairs(source, **options):
    """One epoch's `(cpu_images, gpu_images)` pairs, labels checked equal."""
    cpu, gpu = both_devices(source, **options)
    cpu_batches, gpu_batches = run_same_inputs(cpu, gpu)
    assert [len(b[0]) for b in gpu_batches] == [len(b[0]) for b in cpu_batches]
    pairs = []
    for (cpu_images, cpu_labels), (gpu_images, gpu_labels) in zip(cpu_batches, gpu_batches):
        assert gpu_images.shape == cpu_images.shape and gpu_images.dtype == cpu_images.dtype
        np.testing.assert_array_equal(gpu_labels, cpu_labels)
        pairs.append((cpu_images, gpu_images))
    return pairs


def test_gpu_machine_has_an_nvjpeg_that_nvimgcodec_loads():
    version, library = codecs.nvjpeg_version(), codecs.nvjpeg_library()
    print(f"nvJPEG {version} from {library}; crop set-up {codecs.crop_setup()}")
    assert version is not None, "nvImageCodec finds no nvJPEG: every image would decode on the CPU"


@pytest.mark.parametrize("name", list(GRAPH_OPTIONS))
def test_gpu_graph_matches_cpu_graph(color_dir, crop_setup, name):
    options = dict(image_size=(32, 32), batch_size=16, seed=3, normalization=None,
                   label_mode="categorical")
    options.update(GRAPH_OPTIONS[name])
    if os.environ.get(codecs.ROI_FANCY_UPSAMPLING_ENV) == "0" and not options.get("augment"):
        pytest.skip("forcing the crop set-up changes only augmented graphs")
    pairs = image_pairs(color_dir, **options)
    error = np.concatenate([np.abs(g.astype(np.float32) - c.astype(np.float32)).ravel()
                            for c, g in pairs])
    print(f"{name} ({crop_setup}): GPU-CPU error {error.mean():.3f} mean, "
          f"{np.percentile(error, 99):.1f} p99, {error.max():.1f} max")
    assert error.mean() < MEAN_TOLERANCE, error.mean()
    assert error.max() <= MAX_TOLERANCE, error.max()


def test_no_augmented_image_is_decoded_on_the_cpu(jpeg_dir, crop_setup, monkeypatch, capfd):
    """Two signs of a JPEG decoded on the CPU, neither a timing:

    - nvImageCodec's log (`DALI_NVIMGCODEC_LOG_LEVEL=5`) names the decoder of each
      sample ("0: libjpeg_turbo_decoder process #3" for the CPU's);
    - pixels: a JPEG handed to libjpeg-turbo gives the CPU graph's pixels exactly
      (same decoder, same window, nearest-neighbour resize), while nvJPEG's (CUDA or
      hardware) inverse DCT differs in some pixels of every noisy image. The same
      graph without `augment` (whole images, which the GPU always accepts) shows
      that this signature tells the decoders apart.
    """
    monkeypatch.setenv("DALI_NVIMGCODEC_LOG_LEVEL", "5")
    options = dict(image_size=(32, 32), batch_size=16, seed=5, normalization=None,
                   dtype="uint8", interpolation="nearest", antialias=False)

    def run(**more):
        """(images equal to the CPU's, images, decoders named in the GPU run's log)."""
        cpu, gpu = both_devices(jpeg_dir, **options, **more)
        samples, random, _ = cpu.epoch_inputs(0)
        cpu_images = np.concatenate([batch[0] for batch in cpu.run(samples, random)])
        capfd.readouterr()  # the CPU graph's own log
        gpu_images = np.concatenate([batch[0] for batch in gpu.run(samples, random)])
        log = "".join(capfd.readouterr())
        assert "ROI decode with fancy upsampling" not in log  # nvImageCodec's refusal
        named = collections.Counter(re.findall(r"(\w+_decoder) process #", log))
        same = sum(bool(np.array_equal(c, g)) for c, g in zip(cpu_images, gpu_images))
        return same, len(cpu_images), named

    control, total, control_named = run()
    identical, total, named = run(augment=True)
    print(f"{crop_setup}: {identical} of {total} augmented and {control} of {total} whole "
          f"images equal to the CPU's; decoders in the log: augmented {dict(named)}, "
          f"whole {dict(control_named)}")
    assert named["libjpeg_turbo_decoder"] == 0, named
    if control:
        pytest.skip(f"{control} of {total} whole images decoded on the GPU equal the CPU's: "
                    "the pixel signature cannot tell the decoders apart here")
    assert identical == 0, f"{identical} of {total} augmented images were decoded on the CPU"


@pytest.mark.parametrize("augment", ["randaugment", "trivialaugment", "autoaugment"])
def test_gpu_recipes_match_the_cpu_on_lossless_images(png_dir, augment):
    """The recipes' GPU operations against their CPU ones, on the same decoded pixels
    and the same draws. A difference of one grey level can cross a solarize or
    posterize threshold, or shift equalize's histogram, so a few pixels may differ
    by more than the decoders' tolerance."""
    pairs = image_pairs(png_dir, image_size=(32, 32), batch_size=16, seed=3,
                        normalization=None, augment=augment)
    error = np.concatenate([np.abs(g - c).ravel() for c, g in pairs])
    close = (error <= MAX_TOLERANCE).mean()
    print(f"{augment}: GPU-CPU error {error.mean():.3f} mean, {error.max():.1f} max, "
          f"{close:.4f} of values within {MAX_TOLERANCE}")
    assert error.mean() < MEAN_TOLERANCE and close > 0.97


def test_gpu_png_pixels_match_cpu_exactly_enough(indexed_dir):
    cpu, gpu = both_devices(indexed_dir, image_size=(8, 8), batch_size=8, shuffle=False,
                            normalization=None, dtype="uint8")
    cpu_batches, gpu_batches = run_same_inputs(cpu, gpu)
    for (cpu_images, _), (gpu_images, _) in zip(cpu_batches, gpu_batches):
        assert np.abs(gpu_images.astype(int) - cpu_images.astype(int)).max() <= 1


@pytest.mark.parametrize("dtype, data_format", [("float16", "channels_first"), ("float32", "channels_last")])
def test_gpu_output_layouts(indexed_dir, dtype, data_format):
    gpu = make_dali_pipeline(indexed_dir, device="gpu", image_size=(6, 10), batch_size=8,
                             dtype=dtype, data_format=data_format)
    images, labels = next(iter(gpu.epoch()))
    shape = (8, 6, 10, 3) if data_format == "channels_last" else (8, 3, 6, 10)
    assert images.shape == shape and images.dtype == np.dtype(dtype)
    assert labels.shape == (8,) and labels.dtype == np.int32


def test_gpu_shard_outputs_weights_like_the_cpu_shard(color_dir):
    cpu, gpu = both_devices(color_dir, image_size=(16, 16), batch_size=32, seed=2,
                            normalization=None, class_weight={1: 2.5})
    cpu, gpu = cpu.shard([1], 2), gpu.shard([1], 2, device_id=0)
    inputs = cpu.epoch_inputs(0)
    cpu_batches, gpu_batches = list(cpu.run(*inputs)), list(gpu.run(*inputs))
    assert len(cpu_batches) == len(gpu_batches) == 3  # 90 images, global batch 32
    for (_, cpu_labels, cpu_weights), (_, gpu_labels, gpu_weights) in zip(cpu_batches, gpu_batches):
        np.testing.assert_array_equal(cpu_labels, gpu_labels)
        np.testing.assert_array_equal(cpu_weights, gpu_weights)
    labels = np.concatenate([y for _, y, _ in gpu_batches])
    weights = np.concatenate([w for _, _, w in gpu_batches])
    assert np.count_nonzero(weights) == 16 + 16 + 10  # replica 1 of 2
    assert set(weights[labels == 1]) <= {0.0, 2.5} and set(weights[labels != 1]) <= {0.0, 1.0}


def test_gpu_class_weight_output(indexed_dir):
    weights = {0: 0.5, 2: 2.0}
    cpu, gpu = both_devices(indexed_dir, image_size=(8, 8), batch_size=8, seed=1,
                            class_weight=weights)
    cpu_batches, gpu_batches = run_same_inputs(cpu, gpu)
    for (_, cpu_labels, cpu_weights), (_, gpu_labels, gpu_weights) in zip(cpu_batches, gpu_batches):
        np.testing.assert_array_equal(gpu_labels, cpu_labels)
        np.testing.assert_array_equal(gpu_weights, cpu_weights)
        assert gpu_weights.dtype == np.float32
        np.testing.assert_array_equal(gpu_weights, [weights.get(int(y), 1.0) for y in gpu_labels])


def test_gpu_tfrecord_records_unpadded_match_the_cpu(tagged_tfrecords):
    """Records fed one per sample (a list of arrays of their own lengths) on the GPU."""
    cpu, gpu = both_devices(tagged_tfrecords, image_size=(8, 8), batch_size=16, seed=4,
                            normalization=None, dtype="uint8")
    assert isinstance(gpu.load_samples(np.arange(16)), list)
    cpu_batches, gpu_batches = run_same_inputs(cpu, gpu)
    assert [len(b[0]) for b in gpu_batches] == [16] * 7 + [9]
    for (cpu_images, cpu_labels), (gpu_images, gpu_labels) in zip(cpu_batches, gpu_batches):
        np.testing.assert_array_equal(gpu_labels, cpu_labels)
        assert np.abs(gpu_images.astype(int) - cpu_images.astype(int)).max() <= 1


def test_gpu_pipeline_of_pngs_takes_the_png_threads_and_cuda_device_0(indexed_dir):
    from dalipipe.devices import default_num_threads

    gpu = make_dali_pipeline(indexed_dir, device="gpu", image_size=(6, 6), batch_size=8)
    assert gpu.options.num_threads == default_num_threads("gpu", cpu_decoded=1.0)
    assert gpu.device_id == 0
    images, labels = next(iter(gpu.epoch()))
    assert images.shape == (8, 6, 6, 3)


def test_torch_backend_fits_from_batches_on_the_gpu(tagged_dir, tmp_path):
    from test_backends import check_single, run_job

    result = run_job("torch", "single", tagged_dir, tmp_path / "single.json",
                     env={"BACKEND_JOB_DEVICE": "gpu"})
    check_single(result, "torch")
    assert result["devices"] == ["cuda:0", "cuda:0"]


def test_map_gives_fn_the_gpu_batches_and_keeps_the_epochs(tagged_dir, tmp_path):
    from test_backends import run_job

    found = run_job("torch", "map", tagged_dir, tmp_path / "map.json",
                    env={"BACKEND_JOB_DEVICE": "gpu"})
    assert found["map"].pop("devices") == ["cuda:0"]
    assert found == {how: {"native": True, "differ": True, "cursor": [3, 0]}
                     for how in ("map", "wrapper")}


@pytest.mark.parametrize("settings", [
    dict(decoder={"hw_decoder_load": 0.0}),
    dict(decoder={"hw_decoder_load": 1.0, "preallocate_width_hint": 64,
                  "preallocate_height_hint": 64, "device_memory_padding": 0,
                  "host_memory_padding": 0}),
], ids=["cuda_decoder_only", "hardware_decoder_and_hints"])
def test_gpu_decoder_settings_keep_the_pixels(color_dir, settings):
    """The decoder settings reach DALI (a bad one would fail the build) and move work
    between nvJPEG's decoders without changing the crops beyond the tolerance."""
    options = dict(image_size=(32, 32), batch_size=16, seed=3, normalization=None,
                   augment=True)
    cpu = make_dali_pipeline(color_dir, device="cpu", **options)
    gpu = make_dali_pipeline(color_dir, device="gpu", **options, **settings)
    samples, random, _ = cpu.epoch_inputs(0)
    expected = np.concatenate([batch[0] for batch in cpu.run(samples, random)])
    got = np.concatenate([batch[0] for batch in gpu.run(samples, random)])
    error = np.abs(got - expected)
    print(f"{settings}: GPU-CPU error {error.mean():.3f} mean, {error.max():.1f} max")
    assert error.mean() < MEAN_TOLERANCE and error.max() <= MAX_TOLERANCE


def test_native_gpu_bench_loader_copies_each_batch_to_the_host_once(color_dir):
    from dalipipe import sources
    from dalipipe.bench import loaders

    index = sources.index_source(color_dir)
    loader = loaders.make_dalipipe_native_gpu(index.file_paths, index.labels, workload="eval",
                                              batch_size=16, threads=2, seed=0)
    images, labels = next(iter(loader.epoch()))
    # A view of the host buffer that DALI's `as_cpu` copied the batch into.
    assert isinstance(images, np.ndarray) and not images.flags.owndata
    assert images.shape == (16, 224, 224, 3) and labels.shape == (16,)


def test_a_gpu_run_left_early_hands_its_pipeline_to_the_next(color_dir):
    """Keras's first-batch peek on the GPU: the run left keeps its DALI pipeline (the
    mixed decoder's set-up and memory), whose next run gives what a new pipeline
    gives."""
    from dalipipe.native import Runner

    gpu = make_dali_pipeline(color_dir, device="gpu", image_size=(16, 16), batch_size=8,
                             seed=2, normalization=None, dtype="uint8")
    inputs = gpu.epoch_inputs(0)
    runner = Runner(gpu)
    left = runner.run(*inputs)
    next(left)
    dali = runner.pipe
    again = list(runner.run(*inputs))
    assert runner.pipe is dali and runner.built == 1
    fresh = list(Runner(gpu).run(*inputs))
    assert len(again) == len(fresh) == 12  # 90 images
    for (images, labels), (want_images, want_labels) in zip(again, fresh):
        np.testing.assert_array_equal(labels, want_labels)
        assert np.abs(images.astype(int) - want_images.astype(int)).max() <= 1
