"""The decoded-image cache (`cache=`): images decoded and resized once, read again in
later epochs without opening, decoding or resizing their files. Both sides of its
format live here: the fill, the read, and the graph's `"cached"` input.

What is stored. Per sample, one row, in the order of the paths (`stored_order`: not
`file_paths`' order, which `seed` shuffles; `ImageCache.row_of` maps a sample's index
to its row): the original image's int32 height and width, then uint8 HWC pixels of
`stored_shape`:
- for the whole-image workloads (stretch, eval, `crop_to_aspect_ratio`,
  `pad_to_aspect_ratio`, `central_fraction`), the image the graph has after decoding
  and resizing, before `crop_mirror_normalize`, at `image_size`. What comes after it
  (normalization, dtype, layout, `mix`, class weights) still runs in the graph every
  epoch, so an epoch with the cache gives exactly the pixels of the epoch without it,
  in the same order;
- with `augment` (True or a recipe), the whole image stretched to a square of
  `AUGMENT_SCALE` times the longer output side (256 x 256 for 224). Each epoch's crop
  window is drawn on the original size, as without the cache, and the same window in
  relative coordinates is resized from the stored square in one step; the flip and
  the recipe follow, on the pipeline's device. The filling epoch crops the stored
  square too, so an epoch is the same whether its images were stored or decoded, and
  resume is exact. The crops differ from those of the original by the second
  resampling: on 64 photographs of about 410 x 327 px at 224, by 2.9 grey levels on
  average (2.3 for a stored side of twice the output's, for 3 times the memory).
Boxes are placed from the original size and the crop window, as without the cache, so
they are the same. Masks are kept beside their images, as a last channel of the stored
pixels, resized alike with nearest-neighbour sampling (uint8 ids: `check_option`
refuses a `mask_fill_value` above 255 for the letterbox), and moved as without the
cache after it: exact for the whole-image workloads; with `augment`, ids of the
source only, differing along the shapes' edges.

How it is keyed (`cache_key`): a SHA-256 of `VERSION`, the options that decide the
stored pixels (`STORED_OPTIONS`, all of them options that change the data), the stored
shape, `mask_fill_value` with masks, and the path, size and modification time of
every image file (the check's stamps, else `os.stat`) and its mask file (for a mask
rewritten under `cache_dir()`, its name, from its source's path and stamp: the same
on every host), in `stored_order`: runs with different seeds share a cache. A changed
file or option gives a new key: a stale entry is never read (it stays on disk until
removed).

How it fills. With `cache` set the graph takes one more input, `"cached"` (`rows`):
per sample an int32 slot, then its stored row (sizes and pixels). A slot of -1 means
"stored": the graph takes the row; otherwise it is the sample's index, the row is
zeros, and the graph reads and decodes the file (a DALI conditional,
`stored_or_decoded`: a stored sample opens no file). The graph gives three more
outputs, the stored pixels, the sizes and the slots, which the thread that takes the
batch strips and writes by sample index (`ImageCache.fill`): the native runner's for
the "pydataset" and "grain" formats, a `tf.data` map on format "tf"
(`tf_dataset.strip_cache_outputs`). The first epoch is the filling pass: there is no extra one.

Where. `cache="memory"`: a NumPy array per `ImagePipeline`, refused before the first
epoch when it needs more than the memory available (`/proc/meminfo`'s MemAvailable),
naming the size. A folder (`cache=True`: `cache_dir()/images`): `<key>.npy`, a
`.npy` file that NumPy maps read-only; it is filled in `<key>.partial`, a mapped file
that every process using the key writes (disjoint or identical rows), with one
bitmap per writer of the rows it wrote and flushed (`<key>.filled.<host>-<pid>-<id>.npy`,
written atomically at the end of each pass). A process that finds the bitmaps
covering every sample flushes the partial file and renames it `<key>.npy` under a
lock (`fcntl`, `<key>.lock`): a killed run leaves a partial file and bitmaps, which
a later run continues (rows not in a bitmap are written again) and nothing ever
reads as complete. Disk space is checked, and the partial file's blocks reserved
(`posix_fallocate`), before the first epoch. A folder that cannot be written is read
if it holds the complete file, else dalipipe goes on without the cache, with the
check cache's warning.

Several processes and ranks share a folder cache through the partial file: with
shards, each rank fills the rows of the samples it loads, and the cache is complete
(and read by all) once the ranks' bitmaps cover every sample, usually after the first
epoch, since the shards of one epoch cover it. A process reads the others' bitmaps at
the start and the end of each pass; it reads the rows of the partial file that
writers on its own host wrote, and another host's once the complete file is opened
(a network file system's mapped pages need not agree between hosts). A memory cache
is per process (the shards of one process, a `MirroredStrategy`'s replicas, fill
one): a rank fills only what it loads, so it completes once the rank has loaded
every sample.

Why not DALI's decoder cache. `fn.decoders.image(device="mixed", cache_size=,
cache_type=)` keeps decoded images in GPU memory, keyed by file, for the mixed
decoder only: there is none on the CPU (where dalipipe's CPU graph runs), it holds
full-size images (the resize runs again every epoch), it needs readers with
`stick_to_shard=True` (dalipipe feeds its own order), and it is lost with the
process. This cache holds images at the output size, on the host, for every device:
on a GPU the stored images are copied to the device with the batch, where the rest of
the graph runs.

Above 400 lines: both sides of the format (the store, its folder and its locking;
the `"cached"` input's layout, read in the graph) in one module, as `feed.py` owns
the inputs' layouts.
"""

import contextlib
import fcntl
import hashlib
import os
import shutil
import socket
import threading
import uuid

import numpy as np

from dalipipe.storage.uris import is_remote
from dalipipe.utils import cache_dir, warn_without_cache

VERSION = 1  # bump when what is stored changes
# The options that decide the stored pixels: with the files, the cache's key.
STORED_OPTIONS = ("image_size", "color_mode", "interpolation", "antialias",
                  "crop_to_aspect_ratio", "pad_to_aspect_ratio", "central_fraction",
                  "device")
SLOT_BYTES = 4  # the int32 slot at the start of each `"cached"` row
SIZE_BYTES = 8  # then the original image's int32 height and width
STORED = -1  # the slot of a sample whose pixels are in its row
# With `augment`, images are stored as squares of this times the output's longer side
# (256 x 256 for 224: the "resize to 256" of evaluation), and cropped from there.
AUGMENT_SCALE = 8 / 7
OPEN = object()  # `ImagePipeline(image_cache=)`'s default: open one (`open_cache`)


def check_option(options):
    """Raises ValueError for a `cache` value that is not None, "memory", True or a
    folder path, or with a letterbox's `mask_fill_value` that uint8 cannot hold."""
    cache = options.cache
    if not (cache is None or cache is True or cache == "memory"
            or (isinstance(cache, (str, os.PathLike)) and not isinstance(cache, bool)
                and os.fspath(cache) != "")):
        raise ValueError(
            "`cache` must be None, 'memory', True or a folder path. "
            f"Received: cache={cache!r}"
        )
    if cache is None:
        return
    fill = options.mask_fill_value
    if options.masks is not None and options.pad_to_aspect_ratio and not 0 <= fill <= 255:
        raise ValueError(
            "`cache` keeps masks as uint8, letterboxed with `mask_fill_value` for "
            "`pad_to_aspect_ratio=True`: it must be in [0, 255]. Received: "
            f"cache={cache!r}, mask_fill_value={fill}, pad_to_aspect_ratio=True"
        )


def stored_shape(options):
    """The HWC shape of a stored image: `image_size` for the whole-image workloads;
    with `augment`, a square of `AUGMENT_SCALE` times the longer output side, from
    which each epoch's crop is taken."""
    channels = options.channels + (options.masks is not None)  # a mask: one more
    if options.augment:
        side = int(np.ceil(max(options.image_size) * AUGMENT_SCALE))
        return (side, side, channels)
    return (*options.image_size, channels)


def folder_of(cache):
    """The folder of a folder cache (`cache=True`: `cache_dir()/images`), or None for
    "memory"."""
    if cache == "memory":
        return None
    return os.path.join(cache_dir(), "images") if cache is True else os.fspath(cache)


def stored_order(file_paths):
    """The samples in the order their rows are stored: by path (int64 `(n,)`, sample
    indices). The key and the rows follow it, not `file_paths`' order, which `seed`
    shuffles: runs and processes with different seeds share one cache."""
    return np.asarray(sorted(range(len(file_paths)), key=file_paths.__getitem__), np.int64)


def cache_key(image_pipeline):
    """The cache's key for `image_pipeline`: a hex SHA-256 of `VERSION`, the
    `STORED_OPTIONS`, the stored shape, and every image and mask file's path and
    stamp `(size, mtime_ns)` in `stored_order`; 32 hex digits."""
    options = image_pipeline.options
    digest = hashlib.sha256(f"dalipipe-cache {VERSION}\n".encode())
    for name in STORED_OPTIONS:
        digest.update(f"{name}={getattr(options, name)!r}\n".encode())
    digest.update(f"stored={stored_shape(options)}\n".encode())
    if options.masks is not None:
        digest.update(f"mask_fill_value={options.mask_fill_value}\n".encode())
    from dalipipe.annotations.masks import host_free_name

    paths, stamps = image_pipeline.file_paths, image_pipeline.index.stamps
    masks = image_pipeline.index.mask_paths
    for i in stored_order(paths):
        files = [(paths[i], None if stamps is None else stamps[i])]
        if masks is not None:  # a copy under `cache_dir()`: named by its source's stamp
            copy = host_free_name(masks[i])
            files.append((masks[i], None) if copy is None else (f"mask {copy}", (0, 0)))
        for path, stamp in files:
            if stamp is None:
                info = os.stat(path)
                stamp = (info.st_size, info.st_mtime_ns)
            size, mtime_ns = (int(v) for v in stamp)
            digest.update(os.fsencode(path) + f"\0{size}\0{mtime_ns}\n".encode())
    return digest.hexdigest()[:32]


def open_cache(image_pipeline):
    """The `ImageCache` of `image_pipeline`, or None without `cache` (or without a
    writable folder and no complete cache in it).

    Raises:
        ValueError: for a source whose samples are not local image files, or a memory
            cache larger than the memory available.
        OSError: for a folder cache without the disk space it needs.
    """
    cache = image_pipeline.options.cache
    if cache is None:
        return None
    if image_pipeline.feeds_bytes or any(map(is_remote, image_pipeline.file_paths)):
        raise ValueError(
            "`cache` keeps the images of local image files; TFRecord files, tar shards "
            f"and object storage are not supported with it yet. Received: cache={cache!r}"
        )
    n = len(image_pipeline.file_paths)
    shape = (n, *stored_shape(image_pipeline.options))
    needed = n * (SIZE_BYTES + int(np.prod(shape[1:])))
    folder = folder_of(cache)
    if folder is None:
        available = memory_available()
        if available is not None and needed > available:
            raise ValueError(
                f"`cache='memory'` needs {_size(needed)} for {n} images of "
                f"{'x'.join(map(str, shape[1:]))} uint8, and {_size(available)} of memory "
                f"is available: use a folder cache (`cache=True` or a path). Received: "
                f"cache='memory'"
            )
        return ImageCache(shape)
    return FolderCache.open(folder, cache_key(image_pipeline), shape,
                            stored_order(image_pipeline.file_paths))


def memory_available():
    """Bytes of memory available (`/proc/meminfo`'s MemAvailable), or None unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _size(count):
    """`count` bytes in words: "1.2 GB"."""
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if count < 1000 or unit == "TB":
            return f"{count:.0f} {unit}" if unit == "bytes" else f"{count:.1f} {unit}"
        count /= 1000


class ImageCache:
    """The stored images of one split in memory, and which are filled.

    `shape` is `(n, height, width, channels)` (`stored_shape`); `store` holds one row
    per sample, uint8 `(n, SIZE_BYTES + height * width * channels)`: the original
    image's little-endian int32 height and width, then the stored HWC pixels. Row `r`
    is sample `order[r]`'s (`stored_order`; the identity when None); `filled` is by
    row. `FolderCache` keeps them in a folder.
    """

    def __init__(self, shape, store=None, filled=None, order=None):
        self.lock = threading.Lock()  # the shards of a process, `tf.data`'s threads
        self.shape = tuple(shape)
        self.row_bytes = SIZE_BYTES + int(np.prod(self.shape[1:]))
        self.store = np.zeros((self.shape[0], self.row_bytes), np.uint8) if store is None \
            else store
        self.filled = np.zeros(self.shape[0], bool) if filled is None else filled
        self.complete = bool(self.filled.all())
        self.row_of = np.arange(self.shape[0], dtype=np.int64)  # a sample's row
        if order is not None:
            self.row_of[np.asarray(order, np.int64)] = np.arange(self.shape[0])

    def rows(self, sample_ids):
        """The `"cached"` input for `sample_ids` (int64 `(k,)`): uint8
        `(k, SLOT_BYTES + row_bytes)`, per sample a little-endian int32 slot
        (`STORED`, or its index where it is to be decoded), then its `store` row
        (zeros when not stored)."""
        sample_ids = np.asarray(sample_ids, np.int64)
        at = self.row_of[sample_ids]
        rows = np.empty((len(sample_ids), SLOT_BYTES + self.row_bytes), np.uint8)
        hits = self.filled[at]
        slots = np.where(hits, STORED, sample_ids).astype("<i4")
        rows[:, :SLOT_BYTES] = slots.view(np.uint8).reshape(-1, SLOT_BYTES)
        if hits.all():  # a filled cache: one gather, no zeros written first
            np.take(self.store, at, axis=0, out=rows[:, SLOT_BYTES:])
        else:
            rows[:, SLOT_BYTES:] = 0
            rows[hits, SLOT_BYTES:] = self.store[at[hits]]
        return rows

    def fill(self, images, sizes, slots):
        """Stores the samples that were decoded. `images`: uint8 `(k, *shape[1:])`;
        `sizes`: int32 `(k, 2)`, the original images' height and width (each a NumPy
        array, or a function giving it, called only when a row is to be stored);
        `slots`: int32 `(k,)`, the batch's slots. Nothing is stored once the cache is
        complete (checked again under the lock: a pass may end meanwhile)."""
        slots = np.asarray(slots).reshape(-1)
        decoded = slots >= 0
        if self.complete or not decoded.any():
            return
        images, sizes = (a() if callable(a) else a for a in (images, sizes))
        at = self.row_of[slots[decoded].astype(np.int64)]
        rows = np.empty((len(at), self.row_bytes), np.uint8)
        rows[:, :SIZE_BYTES] = np.asarray(sizes, "<i4").reshape(len(slots), 2)[decoded] \
            .view(np.uint8)
        rows[:, SIZE_BYTES:] = np.asarray(images).reshape(len(slots), -1)[decoded]
        with self.lock:
            if self.complete:
                return
            self._keep(at, rows)
            full = bool(self.filled.all())
        if full:
            self.pass_ended()

    def _keep(self, at, rows):
        """Stores `rows` at rows `at`. Called under `lock`."""
        self.store[at] = rows
        self.filled[at] = True

    def pass_ended(self):
        """Called at the start and the end of each pass: whether every row is stored."""
        self.complete = bool(self.filled.all())
        return self.complete


class FolderCache(ImageCache):
    """An `ImageCache` in a folder (see the module's docstring for its files)."""

    def __init__(self, folder, key, shape, store, filled, writable=True, order=None):
        super().__init__(shape, store, filled, order)
        self.folder, self.key, self.writable = folder, key, writable
        self.wrote = np.zeros(self.shape[0], bool)  # the rows this object wrote
        # Names this writer's bitmap: its host, process, and itself within the process.
        self.writer = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"

    def path(self, suffix):
        return os.path.join(self.folder, f"{self.key}{suffix}")

    @classmethod
    def open(cls, folder, key, shape, order=None):
        """The cache of `key` in `folder`: the complete file mapped read-only if there
        is one, else the partial file (made, with its blocks reserved, if missing)
        and the rows the bitmaps there say are filled. None, with a warning, when
        the folder cannot be written and holds no complete file. `order`: the
        samples' `stored_order`."""
        final = os.path.join(folder, f"{key}.npy")
        if os.path.exists(final):
            return cls._complete(folder, key, shape, order)
        try:
            os.makedirs(folder, exist_ok=True)
            writable = os.access(folder, os.W_OK)
        except OSError:
            writable = False
        if not writable:
            warn_without_cache(folder, "the folder cannot be written")
            return None
        # No rows in memory: the partial file is mapped once made (it may exceed RAM).
        placeholder = np.zeros((0, SIZE_BYTES + int(np.prod(shape[1:]))), np.uint8)
        self = cls(folder, key, shape, placeholder, np.zeros(shape[0], bool), order=order)
        with self._locked():
            if os.path.exists(final):
                return cls._complete(folder, key, shape, order)
            partial = self.path(".partial")
            if not os.path.exists(partial):
                self._make_partial(partial)
            self.store = np.load(partial, mmap_mode="r+")
            self.filled = self._bitmaps()[0]
        self.complete = False
        return self

    @classmethod
    def _complete(cls, folder, key, shape, order=None):
        store = np.load(os.path.join(folder, f"{key}.npy"), mmap_mode="r")
        rows = (shape[0], SIZE_BYTES + int(np.prod(shape[1:])))
        if store.shape != rows or store.dtype != np.uint8:
            raise RuntimeError(f"The image cache {folder}/{key}.npy holds {store.shape} "
                               f"{store.dtype}, not {rows} uint8: remove it.")
        return cls(folder, key, shape, store, np.ones(shape[0], bool), writable=False,
                   order=order)

    def _make_partial(self, partial):
        """Makes the partial file: a `.npy` file of zeros, its blocks reserved, renamed
        into place so that no process maps a file still being made. Called under the
        lock, so another `<key>.partial.<pid>` is a killed maker's: it is removed."""
        needed = self.shape[0] * self.row_bytes
        free = shutil.disk_usage(self.folder).free
        if needed > free:
            raise OSError(
                f"The image cache needs {_size(needed)} in {self.folder} for "
                f"{self.shape[0]} images of {'x'.join(map(str, self.shape[1:]))} uint8, "
                f"and {_size(free)} is free: free space, or pass another folder as `cache`."
            )
        for name in os.listdir(self.folder):  # of a run killed here (under the lock)
            if name.startswith(f"{self.key}.partial."):
                with contextlib.suppress(OSError):
                    os.remove(os.path.join(self.folder, name))
        temporary = f"{partial}.{os.getpid()}"
        np.lib.format.open_memmap(temporary, "w+", np.uint8,
                                  (self.shape[0], self.row_bytes)).flush()
        with open(temporary, "r+b") as f:
            try:
                os.posix_fallocate(f.fileno(), 0, os.fstat(f.fileno()).st_size)
            except OSError as e:
                os.remove(temporary)
                raise OSError(f"The image cache cannot reserve {_size(needed)} in "
                              f"{self.folder}: {e.strerror}.") from e
        os.replace(temporary, partial)

    @contextlib.contextmanager
    def _locked(self):
        with open(self.path(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _bitmaps(self):
        """`(readable, covered)`: the rows this process may read from the partial file
        (its own, and those that the bitmaps of writers on this host say were written
        and flushed: one page cache), and the rows that any writer's bitmap covers
        (another host's rows are read once the complete file is opened)."""
        readable, covered = self.filled.copy(), self.filled.copy()
        prefix = f"{self.key}.filled."
        here = f"{prefix}{socket.gethostname()}-"
        for name in os.listdir(self.folder):
            if name.startswith(prefix) and name.endswith(".npy"):
                try:
                    bitmap = np.load(os.path.join(self.folder, name))
                except (OSError, ValueError):
                    continue  # being replaced, or damaged: its rows are written again
                if bitmap.shape == covered.shape:
                    covered |= bitmap.astype(bool)
                    if name.startswith(here):
                        readable |= bitmap.astype(bool)
        return readable, covered

    def _keep(self, at, rows):
        # Under the lock, after the rows: a bitmap written meanwhile names only stored rows.
        super()._keep(at, rows)
        self.wrote[at] = True

    def pass_ended(self):
        """Flushes this process's rows and writes its bitmap; renames the partial file
        to the complete one when the bitmaps cover every row (then maps it
        read-only). Whether the cache is complete."""
        with self.lock:
            return self._pass_ended()

    def _pass_ended(self):
        if self.complete or not self.writable:
            return self.complete
        if os.path.exists(self.path(".npy")):
            return self._reopen()
        self.store.flush()
        bitmap = self.path(f".filled.{self.writer}.npy")
        temporary = f"{bitmap}.tmp"
        with open(temporary, "wb") as f:
            np.save(f, self.wrote)
        os.replace(temporary, bitmap)
        with self._locked():
            self.filled, covered = self._bitmaps()
            if os.path.exists(self.path(".npy")):
                return self._reopen()
            if not covered.all():
                return False
            self._write_complete()
        return self._reopen()

    def _write_complete(self):
        """Renames the partial file (a whole `.npy` file, every row flushed) to the
        complete one, and removes the bitmaps. Called under the lock."""
        os.replace(self.path(".partial"), self.path(".npy"))
        for name in os.listdir(self.folder):
            if name.startswith(f"{self.key}.filled."):
                with contextlib.suppress(OSError):
                    os.remove(os.path.join(self.folder, name))

    def _reopen(self):
        done = self._complete(self.folder, self.key, self.shape)
        self.store, self.filled, self.complete, self.writable = (
            done.store, done.filled, True, False)
        return True


def stored_or_decoded(cached, decode, options):
    """The stored images and the original images' sizes, from the `"cached"` input's
    node `cached` (DALI graph code, with conditionals enabled): a stored sample's row
    (its pixels moved to the GPU in a GPU graph), else `decode()`, which reads and
    decodes the file (only for those samples) and returns `(images, sizes)` alike.

    Returns:
        `(images, sizes, slots)`: uint8 HWC images of `stored_shape(options)`; int32
        `(2,)` original heights and widths; int32 `()` slots.
    """
    from nvidia.dali import fn, types

    slot = fn.reinterpret(cached[0:SLOT_BYTES], dtype=types.INT32, shape=[])
    if slot < 0:
        start = SLOT_BYTES + SIZE_BYTES
        sizes = fn.reinterpret(cached[SLOT_BYTES:start], dtype=types.INT32, shape=[2])
        images = fn.reshape(cached[start:], shape=list(stored_shape(options)), layout="HWC")
        if options.device == "gpu":
            images = images.gpu()
    else:
        images, sizes = decode()
    return images, sizes, slot


def host_array(tensor_list):
    """A DALI batch (CPU or GPU) as a NumPy array on the host."""
    from nvidia.dali.tensors import TensorListCPU

    if not isinstance(tensor_list, TensorListCPU):
        tensor_list = tensor_list.as_cpu()
    return np.asarray(tensor_list.as_tensor())
