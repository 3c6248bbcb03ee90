"""The options of `make_dali_dataset` and `make_dali_pipeline`: one definition, one
validation.

`Options` holds every option with its default. It checks them all as it is made,
with Keras-style messages, and it is what the graph, the inputs and the adapters
read. The public functions keep explicit keyword signatures (for `help()` and
editors) and pass their arguments here: `Options.from_arguments(locals())`.
"""

import dataclasses
from typing import Any, Optional

import numpy as np

from dalipipe.utils import usable_cores

IMAGENET_DEFAULT_MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
IMAGENET_DEFAULT_STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)
# normalization -> (mean, std) on the 0-255 scale.
NORMALIZATIONS = {
    "imagenet": (IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD),
    "unit": ((0.0, 0.0, 0.0), (255.0, 255.0, 255.0)),
    "symmetric": ((127.5, 127.5, 127.5), (127.5, 127.5, 127.5)),
    None: ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0)),
}
INTERPOLATIONS = ("bilinear", "nearest", "bicubic", "lanczos3", "gaussian")
LABEL_MODES = ("int", "categorical", "binary", None)
DTYPES = ("float32", "float16", "uint8")
DATA_FORMATS = ("channels_last", "channels_first")
DEVICES = ("auto", "gpu", "cpu")
SUBSETS = ("training", "validation", "both")
CHECKS = ("structure", "full", None)
ON_BAD_FILE = ("raise", "skip")


def is_inferred(labels):
    """Whether `labels` is the default `"inferred"` (labels may also be an array)."""
    return isinstance(labels, str) and labels == "inferred"


@dataclasses.dataclass(frozen=True, eq=False)
class Options:
    """Every option of `make_dali_dataset` and `make_dali_pipeline`, with its default.

    See `dalipipe.make_dali_dataset` for what each one does. Made with invalid
    values, it raises ValueError naming the option and the value received.
    `resolved()` fills the defaults that depend on the machine or on chance.
    """

    labels: Any = "inferred"
    label_mode: Optional[str] = "int"
    class_names: Optional[Any] = None
    path_column: str = "path"
    root: Optional[Any] = None
    image_size: Any = (256, 256)
    batch_size: int = 32
    shuffle: bool = True
    seed: Optional[int] = None
    validation_split: Optional[float] = None
    subset: Optional[str] = None
    interpolation: str = "bilinear"
    antialias: bool = True
    crop_to_aspect_ratio: bool = False
    central_fraction: float = 1.0
    augment: bool = False
    normalization: Optional[str] = "imagenet"
    dtype: str = "float32"
    data_format: str = "channels_last"
    drop_remainder: bool = False
    device: str = "auto"
    num_threads: Optional[int] = None
    prefetch_queue_depth: int = 2
    check: Optional[str] = "structure"
    on_bad_file: str = "raise"

    @classmethod
    def names(cls):
        """The option names, in signature order."""
        return tuple(field.name for field in dataclasses.fields(cls))

    @classmethod
    def from_arguments(cls, arguments):
        """The options among `arguments` (a public function's `locals()`)."""
        return cls(**{name: arguments[name] for name in cls.names()})

    def replace(self, **changes):
        """A copy with `changes`, validated again."""
        return dataclasses.replace(self, **changes)

    def resolved(self):
        """A copy with `seed` drawn at random if None and `num_threads` set to the
        usable cores if None."""
        seed, num_threads = self.seed, self.num_threads
        if seed is None:
            seed = int(np.random.SeedSequence().generate_state(1)[0] & 0x7FFFFFFF)
        if num_threads is None:
            num_threads = usable_cores()
        return self.replace(seed=seed, num_threads=num_threads)

    def __post_init__(self):
        self._check_choices()
        self._check_numbers()
        self._check_combinations()
        # Canonical types: NumPy integers and lists become plain ints and tuples.
        set_ = object.__setattr__.__get__(self)
        set_("image_size", (int(self.image_size[0]), int(self.image_size[1])))
        set_("batch_size", int(self.batch_size))
        set_("prefetch_queue_depth", int(self.prefetch_queue_depth))
        set_("central_fraction", float(self.central_fraction))
        if self.seed is not None:
            set_("seed", int(self.seed))
        if self.num_threads is not None:
            set_("num_threads", int(self.num_threads))
        if self.class_names is not None:
            set_("class_names", list(self.class_names))

    def _check_choices(self):
        for name, allowed in (
            ("check", CHECKS), ("on_bad_file", ON_BAD_FILE), ("label_mode", LABEL_MODES),
            ("interpolation", INTERPOLATIONS), ("normalization", tuple(NORMALIZATIONS)),
            ("dtype", DTYPES), ("data_format", DATA_FORMATS), ("device", DEVICES),
        ):
            _one_of(name, getattr(self, name), allowed)
        for name in ("shuffle", "augment", "antialias", "crop_to_aspect_ratio",
                     "drop_remainder"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise ValueError(f"`{name}` must be True or False. Received: {name}={value!r}")

    def _check_numbers(self):
        size = self.image_size
        if (
            not isinstance(size, (tuple, list))
            or len(size) != 2
            or any(not _is_int(v) or v <= 0 for v in size)
        ):
            raise ValueError(
                "`image_size` must be a tuple of two positive integers (height, width). "
                f"Received: image_size={size!r}"
            )
        _positive_int("batch_size", self.batch_size)
        _positive_int("prefetch_queue_depth", self.prefetch_queue_depth)
        if self.num_threads is not None:
            _positive_int("num_threads", self.num_threads)
        if self.seed is not None and (not _is_int(self.seed) or self.seed < 0):
            raise ValueError(
                f"`seed` must be a non-negative integer or None. Received: seed={self.seed!r}"
            )
        fraction = self.central_fraction
        if not _is_number(fraction) or not 0 < fraction <= 1:
            raise ValueError(
                f"`central_fraction` must be in (0, 1]. Received: central_fraction={fraction!r}"
            )

    def _check_combinations(self):
        if self.dtype == "uint8" and self.normalization is not None:
            raise ValueError(
                "`dtype='uint8'` holds unnormalized pixels: it needs `normalization=None`. "
                f"Received: dtype={self.dtype!r}, normalization={self.normalization!r}"
            )
        if self.augment and self.central_fraction != 1:
            raise ValueError(
                "`augment=True` crops at random and `central_fraction` crops the center: "
                f"choose one. Received: augment=True, central_fraction={self.central_fraction}"
            )
        if self.augment and self.crop_to_aspect_ratio:
            raise ValueError(
                "`augment=True` crops at random and `crop_to_aspect_ratio=True` crops the "
                "center: choose one. Received: augment=True, crop_to_aspect_ratio=True"
            )
        labels = self.labels
        if self.label_mode is None and labels is not None and not is_inferred(labels):
            raise ValueError(
                "`label_mode=None` yields images only, so `labels` must be None or 'inferred'. "
                f"Received: labels={labels!r}, label_mode=None"
            )
        self._check_class_names()
        self._check_split()

    def _check_class_names(self):
        names = self.class_names
        if names is None:
            return
        if isinstance(names, str) or not all(isinstance(c, str) for c in names):
            raise ValueError(
                f"`class_names` must be a list of strings. Received: class_names={names!r}"
            )
        if len(set(names)) != len(names):
            raise ValueError(
                f"`class_names` must not repeat a name. Received: class_names={list(names)!r}"
            )
        if self.labels is None:
            raise ValueError(
                "`class_names` names the classes of labels, so it needs `labels`. "
                f"Received: labels=None, class_names={list(names)!r}"
            )

    def _check_split(self):
        split, subset = self.validation_split, self.subset
        if split is None:
            if subset is not None:
                raise ValueError(
                    "`subset` is only valid together with `validation_split`. "
                    f"Received: subset={subset!r}, validation_split=None"
                )
            return
        if not _is_number(split) or not 0 < split < 1:
            raise ValueError(
                "`validation_split` must be between 0 and 1 (exclusive). "
                f"Received: validation_split={split!r}"
            )
        _one_of("subset", subset, SUBSETS)
        if self.seed is None and subset != "both":
            raise ValueError(
                "`validation_split` with `subset='training'` or 'validation' needs a "
                "`seed`, so that the two subsets, made by two calls, do not overlap. "
                f"Received: validation_split={split}, subset={subset!r}, seed=None"
            )


def check_global_batch(batch_size, num_replicas):
    """Raises ValueError unless the global `batch_size` splits evenly over the replicas."""
    if batch_size % num_replicas:
        raise ValueError(
            "`batch_size` is the global batch, split evenly over the replicas, so it must "
            f"be a multiple of their number. Received: batch_size={batch_size} for "
            f"{num_replicas} replicas"
        )


def _is_int(value):
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _is_number(value):
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def _one_of(name, value, allowed):
    if value not in allowed:
        raise ValueError(f"`{name}` must be one of {allowed}. Received: {name}={value!r}")


def _positive_int(name, value):
    if not _is_int(value) or value <= 0:
        raise ValueError(f"`{name}` must be a positive integer. Received: {name}={value!r}")
