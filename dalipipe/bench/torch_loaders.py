"""PyTorch loaders for the GPU benchmark, doing the work of `dalipipe.bench.loaders`.

The same workloads (see there), as a PyTorch user writes them with torchvision, in
NCHW float32 batches normalized with ImageNet mean/std:
- `make_torch_dataloader`: a `torch.utils.data.DataLoader` with one worker process
  per core, decoding with `torchvision.io.decode_jpeg` on the CPU;
- `make_torchvision_gpu`: batched `torchvision.io.decode_jpeg(device="cuda")`, then
  crop, resize and normalize on the GPU, batches left in GPU memory.

torch and torchvision are imported inside the functions only, so the loader registry
imports without them; a loader asked for without them raises an ImportError that
names it. A sample's random crop depends on `seed` and its index only (the same in
every epoch).
"""

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from dalipipe.bench.loaders import RANDAUGMENT, RESIZE, SIZE, Loader
from dalipipe.options import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from dalipipe.sampling import NUM_RANDOM, random_resized_crop_window


def _torch(loader):
    """torch, torchvision.io and torchvision's v2 functional transforms for `loader`."""
    try:
        import torch
        import torchvision.io as io
        from torchvision.transforms.v2 import functional as F
    except ImportError as e:
        raise ImportError(
            f"The bench loader {loader!r} needs torch and torchvision, which cannot be "
            f"imported here: {e}"
        ) from e
    return torch, io, F


def _random_row(seed, index):
    return np.random.default_rng([seed, index]).random(NUM_RANDOM)


def transform(image, workload, random, F):
    """One decoded CHW image (CPU or CUDA tensor) cut to the workload's 224x224 image.

    `"eval"`: shorter side to 256 (antialiased bilinear), center crop 224.
    `"stretch"`: the whole image to 224x224 (antialiased bilinear). `"train"`:
    the random-resized crop window of `random` (a row of `NUM_RANDOM` numbers, see
    `dalipipe.sampling`) rounded to whole pixels, resized to 224, flipped when
    `random[4] < 0.5`. `"randaugment"`: the train crop, then torchvision's
    `v2.RandAugment` (`RANDAUGMENT`) on its uint8 pixels, drawn per image.
    """
    if workload == "eval":
        return F.center_crop(F.resize(image, [RESIZE], antialias=True), [SIZE, SIZE])
    if workload == "stretch":
        return F.resize(image, [SIZE, SIZE], antialias=True)
    height, width = image.shape[-2:]
    x, y, w, h = (int(round(float(v))) for v in random_resized_crop_window(height, width, random))
    image = F.resized_crop(image, y, x, max(h, 1), max(w, 1), [SIZE, SIZE], antialias=True)
    image = F.horizontal_flip(image) if random[4] < 0.5 else image
    if workload == "randaugment":
        import torch
        from torchvision.transforms import v2

        pixels = image.round().clamp(0, 255).to(torch.uint8)
        image = v2.RandAugment(**RANDAUGMENT)(pixels).float()
    return image


def _normalize(torch, images):
    """NCHW images (0-255) as float32 normalized with ImageNet mean/std, on their device."""
    mean = torch.tensor(IMAGENET_DEFAULT_MEAN, device=images.device).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_DEFAULT_STD, device=images.device).view(1, 3, 1, 1)
    return (images.float() - mean) / std


def _nchw_to_numpy(images):
    return images.permute(0, 2, 3, 1).cpu().numpy()


class _JpegFiles:
    """Map-style dataset for the DataLoader: (normalized float32 CHW image, label).

    A plain class at module level, so that spawned workers can unpickle it.
    """

    def __init__(self, files, labels, workload, seed):
        self.files, self.labels = list(files), [int(label) for label in labels]
        self.workload, self.seed = workload, seed

    def __len__(self):
        return len(self.files)

    def __getitem__(self, index):
        torch, io, F = _torch("torch_dataloader")
        data = torch.from_numpy(np.fromfile(self.files[index], dtype=np.uint8))
        image = io.decode_jpeg(data, mode=io.ImageReadMode.RGB)
        image = transform(image, self.workload, _random_row(self.seed, index), F)
        return _normalize(torch, image[None])[0], self.labels[index]


def make_torch_dataloader(files, labels, *, workload, batch_size, threads, seed):
    """`torch.utils.data.DataLoader` with `threads` spawned workers (persistent)."""
    torch, _, _ = _torch("torch_dataloader")
    loader = torch.utils.data.DataLoader(
        _JpegFiles(files, labels, workload, seed), batch_size=batch_size, shuffle=False,
        num_workers=threads, persistent_workers=True, multiprocessing_context="spawn",
        timeout=120,
    )
    return Loader(lambda: iter(loader), to_numpy=_nchw_to_numpy)


def make_torchvision_gpu(files, labels, *, workload, batch_size, threads, seed):
    """Files read by `threads` threads one batch ahead; batched GPU decoding, crop,
    resize (in float32) and normalization; images and labels left on the GPU.

    `synchronize` is `torch.cuda.synchronize`: torch launches GPU work asynchronously.
    """
    torch, io, F = _torch("torchvision_gpu")
    if not torch.cuda.is_available():
        raise RuntimeError("The bench loader 'torchvision_gpu' needs a CUDA GPU that torch "
                           "can use: torch.cuda.is_available() is False")
    batches = [range(i, min(i + batch_size, len(files))) for i in range(0, len(files), batch_size)]
    readers, ahead = ThreadPoolExecutor(threads), ThreadPoolExecutor(1)

    def read(rows):
        return list(readers.map(
            lambda i: torch.from_numpy(np.fromfile(files[i], dtype=np.uint8)), rows))

    def epoch():
        pending = ahead.submit(read, batches[0])
        for b, rows in enumerate(batches):
            data = pending.result()
            if b + 1 < len(batches):
                pending = ahead.submit(read, batches[b + 1])
            decoded = io.decode_jpeg(data, mode=io.ImageReadMode.RGB, device="cuda")
            images = torch.stack([transform(image.float(), workload, _random_row(seed, i), F)
                                  for image, i in zip(decoded, rows)])
            yield _normalize(torch, images), torch.as_tensor(labels[rows.start:rows.stop],
                                                             device="cuda")

    return Loader(epoch, synchronize=torch.cuda.synchronize, to_numpy=_nchw_to_numpy)
