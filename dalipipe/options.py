"""The options of `make_dali_dataset` and `make_dali_pipeline`: one definition, one
validation.

`Options` holds every option with its default and declares with each whether it
changes the data (which samples an epoch loads, in which order, with which pixels
and labels), which the resume fingerprint follows (`dalipipe.fingerprint`). It checks
them all as it is made, with Keras-style messages, and it is what the graph, the
inputs and the adapters read. `make_dali_dataset` keeps an explicit keyword signature
and passes its arguments here (`Options.from_arguments(locals())`);
`make_dali_pipeline` takes `**options` (`Options.from_keywords`) and shows them with
`pipeline_signature`.

Above 400 lines: every option's check, with its Keras-style message, lives here, so
that each rule is written once.
"""

import dataclasses
import inspect
import math
import os
from collections.abc import Mapping
from typing import Any, Optional

import numpy as np

from dalipipe.annotations.settings import check_dense
from dalipipe.cache import check_option as check_cache
from dalipipe.calls import warn
from dalipipe.decoder_settings import DECODER_ARGUMENTS, check_decoder
from dalipipe.devices import default_num_threads
from dalipipe.keras_config import IMAGE_DATA_FORMATS, keras_image_data_format
from dalipipe.mixing import parse_mix
from dalipipe.recipes import parse_augment
from dalipipe.utils import is_int, is_number

IMAGENET_DEFAULT_MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
IMAGENET_DEFAULT_STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)
# normalization -> (mean, std) on the 0-255 scale.
NORMALIZATIONS = {
    "imagenet": (IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD),
    "unit": ((0.0, 0.0, 0.0), (255.0, 255.0, 255.0)),
    "symmetric": ((127.5, 127.5, 127.5), (127.5, 127.5, 127.5)),
    None: ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0)),
}
# Keras's interpolation names (`image_dataset_from_directory`) and the DALI filter
# closest to each (`dalipipe.graph`): DALI has no area, Lanczos-5 or Mitchell filter.
INTERPOLATIONS = ("bilinear", "nearest", "bicubic", "area", "lanczos3", "lanczos5",
                  "gaussian", "mitchellcubic")
LABEL_MODES = ("int", "categorical", "binary", "raw", "multi_hot", None)
# The label modes of a table's `label_columns`: float32 targets, not class indices.
TARGET_MODES = ("raw", "multi_hot")
# color_mode -> channels.
COLOR_MODES = {"rgb": 3, "grayscale": 1, "rgba": 4}
# None: the form for Keras's backend ("tf" on TensorFlow, "pydataset" on torch and JAX).
FORMATS = (None, "tf", "pydataset", "grain")
BACKENDS = ("tensorflow", "torch", "jax")
DTYPES = ("float32", "float16", "uint8")
DATA_FORMATS = (*IMAGE_DATA_FORMATS, None)
DEVICES = ("auto", "gpu", "cpu")
SUBSETS = ("training", "validation", "both")
CHECKS = ("structure", "full", None)
ON_BAD_FILE = ("raise", "skip")
# The label modes whose labels can be mixed (`mix`): float32 class probabilities.
MIXED_LABEL_MODES = ("categorical", "binary", "multi_hot")


def normalization_stats(normalization, channels):
    """Per-channel `(mean, std)` on the 0-255 scale for `channels` 3, 1 or 4.

    Grey images take the mean of the three colour statistics; the alpha channel of
    RGBA images is scaled to [0, 1] for "imagenet" and "unit", to [-1, 1] for
    "symmetric", and left at 0-255 for None.
    """
    mean, std = NORMALIZATIONS[normalization]
    if channels == 1:
        return (sum(mean) / 3,), (sum(std) / 3,)
    if channels == 4:
        alpha = {"imagenet": (0.0, 255.0), "unit": (0.0, 255.0),
                 "symmetric": (127.5, 127.5), None: (0.0, 1.0)}[normalization]
        return mean + (alpha[0],), std + (alpha[1],)
    return mean, std


def is_inferred(labels):
    """Whether `labels` is the default `"inferred"` (labels may also be an array)."""
    return isinstance(labels, str) and labels == "inferred"


def option(default, *, data, dataset_only=False):
    """A field of `Options`: its `default`; `data`, whether it changes the data, and so
    belongs in the resume fingerprint; `dataset_only`, an option of `make_dali_dataset`
    that `make_dali_pipeline` does not take."""
    return dataclasses.field(default=default,
                             metadata={"data": data, "dataset_only": dataset_only})


@dataclasses.dataclass(frozen=True, eq=False)
class Options:
    """Every option of `make_dali_dataset` and `make_dali_pipeline`, with its default.

    See `dalipipe.make_dali_dataset` for what each one does. Made with invalid
    values, it raises ValueError naming the option and the value received.
    `resolved()` fills the defaults that depend on the machine or on chance.
    """

    # Keras's `image_dataset_from_directory` arguments, in its order.
    labels: Any = option("inferred", data=True)
    label_mode: Optional[str] = option("int", data=True)
    class_names: Optional[Any] = option(None, data=True)
    color_mode: str = option("rgb", data=True)
    batch_size: Optional[int] = option(32, data=True)
    image_size: Any = option((256, 256), data=True)
    shuffle: bool = option(True, data=True)
    seed: Optional[int] = option(None, data=True)
    validation_split: Optional[float] = option(None, data=True)
    subset: Optional[str] = option(None, data=True)
    interpolation: str = option("bilinear", data=True)
    follow_links: bool = option(False, data=True)
    crop_to_aspect_ratio: bool = option(False, data=True)
    pad_to_aspect_ratio: bool = option(False, data=True)
    data_format: Optional[str] = option(None, data=True)
    format: Optional[str] = option(None, data=False, dataset_only=True)
    verbose: bool = option(True, data=False)
    # What dalipipe adds.
    path_column: str = option("path", data=True)
    label_columns: Optional[Any] = option(None, data=True)
    root: Optional[Any] = option(None, data=True)
    antialias: bool = option(False, data=True)
    central_fraction: float = option(1.0, data=True)
    augment: Any = option(False, data=True)
    mix: Any = option(None, data=True)
    normalization: Optional[str] = option(None, data=True)
    dtype: str = option("float32", data=True)
    drop_remainder: bool = option(False, data=True)
    class_weight: Optional[Any] = option(None, data=True)
    # Segmentation masks (`dalipipe.annotations.inputs`).
    masks: Optional[Any] = option(None, data=True)
    mask_fill_value: int = option(0, data=True)
    # Detection boxes (`dalipipe.annotations.inputs`, `dalipipe.annotations.placement`).
    boxes: Optional[Any] = option(None, data=True)
    # None: not given; "xyxy", with a warning where `boxes` are given (`_box_format`).
    bounding_box_format: Optional[str] = option(None, data=True)
    max_boxes: int = option(100, data=True)
    min_box_visibility: float = option(0.25, data=True)
    box_crop: bool = option(False, data=True)
    # The elements' structure: None (tuples) or "dict" (Keras's preprocessing layers').
    output: Optional[str] = option(None, data=True)
    device: str = option("auto", data=False)
    num_threads: Optional[int] = option(None, data=False)
    prefetch_queue_depth: int = option(2, data=False)
    # DALI's GPU (mixed) decoder arguments (`dalipipe.decoder_settings`). Its size
    # hints are filled from what the check read, so they differ between runs with and
    # without the check.
    decoder: Optional[Mapping] = option(None, data=False)
    check: Optional[str] = option("structure", data=False)
    on_bad_file: str = option("raise", data=False)
    # The decoded-image cache (`dalipipe.cache`): it changes no pixel.
    cache: Any = option(None, data=False)

    @classmethod
    def names(cls, *, pipeline=False):
        """The option names, in signature order; with `pipeline`, those that
        `make_dali_pipeline` takes (without `make_dali_dataset`'s own, `format`)."""
        return tuple(field.name for field in dataclasses.fields(cls)
                     if not (pipeline and field.metadata["dataset_only"]))

    @classmethod
    def data_names(cls):
        """The names of the options that change the data: the fingerprint's."""
        return tuple(field.name for field in dataclasses.fields(cls) if field.metadata["data"])

    @classmethod
    def from_arguments(cls, arguments):
        """The options among `arguments` (a public function's `locals()`)."""
        return cls(**{name: arguments[name] for name in cls.names()})

    @classmethod
    def from_keywords(cls, function, keywords):
        """The options `keywords` (`function`'s `**options`), the others at their
        defaults; TypeError for a keyword that `function`, which returns an
        `ImagePipeline`, does not take (`check_keywords`)."""
        check_keywords(function, keywords, cls.names(pipeline=True))
        return cls(**keywords)

    def replace(self, **changes):
        """A copy with `changes`, validated again."""
        return dataclasses.replace(self, **changes)

    def resolved(self):
        """A copy with `seed` drawn at random if None, `num_threads` set if None
        (`devices.default_num_threads`: the usable cores, at most 4 for
        `device="gpu"`), and `data_format` set to Keras's `image_data_format()` if None.

        Resolve `device` first: the thread default depends on it.
        """
        seed, num_threads = self.seed, self.num_threads
        if seed is None:
            seed = int(np.random.SeedSequence().generate_state(1)[0] & 0x7FFFFFFF)
        if num_threads is None:
            num_threads = default_num_threads(self.device)
        data_format = self.data_format or keras_image_data_format()
        return self.replace(seed=seed, num_threads=num_threads, data_format=data_format)

    @property
    def recipe(self):
        """The augmentation recipe (`dalipipe.RandAugment`...), or None."""
        return None if isinstance(self.augment, bool) else self.augment

    @property
    def channels(self):
        """Channels of the output images: 3, 1 or 4 (`color_mode`)."""
        return COLOR_MODES[self.color_mode]

    def __post_init__(self):
        set_ = object.__setattr__.__get__(self)
        # Recipes and mixes given by name become their objects (ValueError if unknown).
        set_("augment", parse_augment(self.augment))
        set_("mix", parse_mix(self.mix))
        self._check_choices()
        self._check_numbers()
        self._check_combinations()
        # Canonical types: NumPy integers and lists become plain ints and tuples.
        size = self.image_size
        set_("image_size", (int(size), int(size)) if is_int(size) else (int(size[0]), int(size[1])))
        if self.batch_size is not None:
            set_("batch_size", int(self.batch_size))
        set_("interpolation", self.interpolation.lower())
        set_("prefetch_queue_depth", int(self.prefetch_queue_depth))
        set_("central_fraction", float(self.central_fraction))
        set_("decoder", check_decoder(self.decoder))
        if self.seed is not None:
            set_("seed", int(self.seed))
        if self.num_threads is not None:
            set_("num_threads", int(self.num_threads))
        if self.class_names is not None:
            set_("class_names", list(self.class_names))
        if self.masks is not None:
            set_("masks", os.fspath(self.masks))
        set_("mask_fill_value", int(self.mask_fill_value))
        if self.boxes is not None and isinstance(self.boxes, os.PathLike):
            set_("boxes", os.fspath(self.boxes))
        set_("bounding_box_format", _box_format(self.bounding_box_format, self.boxes))
        set_("max_boxes", int(self.max_boxes))
        set_("min_box_visibility", float(self.min_box_visibility))
        if isinstance(self.label_columns, (list, tuple)):
            set_("label_columns", list(self.label_columns))
        if self.class_weight is not None:
            set_("class_weight", {int(k): float(v) for k, v in self.class_weight.items()})

    def _check_choices(self):
        # Keras's own wording where Keras has the argument, so that code matching its
        # messages matches these too.
        if self.label_mode not in LABEL_MODES:
            raise ValueError(
                '`label_mode` argument must be one of "int", "categorical", "binary", '
                '"raw", "multi_hot" (the last two with `label_columns`), or None. '
                f"Received: label_mode={self.label_mode!r}"
            )
        if self.color_mode not in COLOR_MODES:
            raise ValueError(
                '`color_mode` must be one of {"rgb", "rgba", "grayscale"}. '
                f"Received: color_mode={self.color_mode!r}"
            )
        interpolation = self.interpolation
        if not isinstance(interpolation, str) or interpolation.lower() not in INTERPOLATIONS:
            raise ValueError(
                f"Argument `interpolation` should be one of {INTERPOLATIONS}. "
                f"Received: interpolation={interpolation!r}"
            )
        if self.format not in FORMATS:
            raise ValueError(
                '`format` must be one of (None, "tf", "pydataset", "grain"): None for the '
                "form that Keras's backend takes best, \"tf\" for a `tf.data.Dataset`, "
                '"pydataset" for a `keras.utils.PyDataset` of the backend\'s tensors, '
                '"grain" for a `grain.IterDataset` of them. '
                f"Received: format={self.format!r}"
            )
        for name, allowed in (
            ("check", CHECKS), ("on_bad_file", ON_BAD_FILE),
            ("normalization", tuple(NORMALIZATIONS)), ("dtype", DTYPES),
            ("data_format", DATA_FORMATS), ("device", DEVICES),
        ):
            _one_of(name, getattr(self, name), allowed)
        for name in ("shuffle", "antialias", "crop_to_aspect_ratio",
                     "pad_to_aspect_ratio", "follow_links", "verbose", "drop_remainder"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise ValueError(f"`{name}` must be True or False. Received: {name}={value!r}")

    def _check_numbers(self):
        size = self.image_size
        sides = (size, size) if is_int(size) else size
        if (
            not isinstance(sides, (tuple, list))
            or len(sides) != 2
            or any(not is_int(v) or v <= 0 for v in sides)
        ):
            raise ValueError(
                "Invalid `image_size` value. Expected a tuple of 2 integers: (height, "
                f"width), positive, or one integer for both. Received: image_size={size!r}"
            )
        if self.batch_size is not None:
            _positive_int("batch_size", self.batch_size)
        _positive_int("prefetch_queue_depth", self.prefetch_queue_depth)
        if self.num_threads is not None:
            _positive_int("num_threads", self.num_threads)
        if self.seed is not None and (not is_int(self.seed) or self.seed < 0):
            raise ValueError(
                f"`seed` must be a non-negative integer or None. Received: seed={self.seed!r}"
            )
        fraction = self.central_fraction
        if not is_number(fraction) or not 0 < fraction <= 1:
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
                "`augment` crops at random and `central_fraction` crops the center: choose "
                f"one. Received: augment={self.augment!r}, "
                f"central_fraction={self.central_fraction}"
            )
        if self.pad_to_aspect_ratio and self.crop_to_aspect_ratio:
            raise ValueError(
                "Only one of `pad_to_aspect_ratio`, `crop_to_aspect_ratio` can be set to "
                "`True`. Received: pad_to_aspect_ratio=True, crop_to_aspect_ratio=True"
            )
        for name in ("crop_to_aspect_ratio", "pad_to_aspect_ratio"):
            if self.augment and getattr(self, name):
                raise ValueError(
                    f"`augment` crops at random and `{name}=True` keeps the whole frame: "
                    f"choose one. Received: augment={self.augment!r}, {name}=True"
                )
        if self.pad_to_aspect_ratio and self.central_fraction != 1:
            raise ValueError(
                "`central_fraction` crops the center and `pad_to_aspect_ratio=True` pads "
                "the whole image: choose one. Received: pad_to_aspect_ratio=True, "
                f"central_fraction={self.central_fraction}"
            )
        if self.drop_remainder and self.batch_size is None:
            raise ValueError(
                "`drop_remainder=True` drops the last partial batch, and `batch_size=None` "
                "yields single samples. Received: batch_size=None, drop_remainder=True"
            )
        labels = self.labels
        if self.label_mode is None and labels is not None and not is_inferred(labels):
            raise ValueError(
                "`label_mode=None` yields images only, so `labels` must be None or 'inferred'. "
                f"Received: labels={labels!r}, label_mode=None"
            )
        if self.recipe is not None and self.color_mode != "rgb":
            raise ValueError(
                f"`augment={self.augment!r}` has colour operations (colour, contrast, "
                "equalize...) for RGB images only: use `color_mode='rgb'`, or "
                f"`augment=True` for a crop and a flip. Received: color_mode={self.color_mode!r}"
            )
        self._check_masks()
        check_cache(self)  # `cache`: dalipipe.cache
        self._check_mix()
        self._check_label_columns()
        self._check_class_names()
        self._check_class_weight()
        self._check_split()

    def _check_masks(self):
        check_dense(self)  # masks, boxes and `output`: dalipipe.annotations.settings

    def _check_mix(self):
        mix = self.mix
        if mix is None:
            return
        if self.label_mode not in MIXED_LABEL_MODES or self.labels is None:
            hint = ' (use label_mode="categorical")' if self.label_mode == "int" else ""
            received = "labels=None" if self.labels is None else f"label_mode={self.label_mode!r}"
            raise ValueError(
                f"`mix={mix!r}` mixes the labels of two samples, so the labels must be "
                f"float32 class probabilities: `label_mode` one of {MIXED_LABEL_MODES}"
                f"{hint}. Received: {received}"
            )
        if self.class_weight is not None:
            raise ValueError(
                f"`class_weight` weighs each sample by its one class, and `mix={mix!r}` "
                "gives each sample two. Received: "
                f"class_weight={self.class_weight!r}, mix={mix!r}"
            )
        if self.batch_size is None:
            raise ValueError(
                f"`mix={mix!r}` mixes the samples of a batch, and `batch_size=None` yields "
                "single samples. Received: batch_size=None"
            )

    def _check_label_columns(self):
        columns, mode = self.label_columns, self.label_mode
        if columns is None:
            if mode in TARGET_MODES:
                raise ValueError(
                    f"`label_mode={mode!r}` reads a table's targets from the columns that "
                    "`label_columns` names (a column's name or a list of names). "
                    f"Received: label_columns=None, label_mode={mode!r}"
                )
            return
        names = [columns] if isinstance(columns, str) else columns
        if (not isinstance(names, (list, tuple)) or not names
                or not all(isinstance(c, str) for c in names) or len(set(names)) != len(names)):
            raise ValueError(
                "`label_columns` must be a column's name or a list of distinct column names "
                f"of a table. Received: label_columns={columns!r}"
            )
        if mode not in TARGET_MODES:
            raise ValueError(
                '`label_columns` gives a table\'s targets for `label_mode="raw"` (float32 '
                'values) or `"multi_hot"` (several classes per image); for one class per '
                "image, pass the class column as `labels`. Received: "
                f"label_columns={columns!r}, label_mode={mode!r}"
            )
        if not is_inferred(self.labels):
            raise ValueError(
                "`labels` and `label_columns` both say where the targets are: pass only "
                f"`label_columns`. Received: labels={self.labels!r}, label_columns={columns!r}"
            )
        if mode == "raw" and self.class_names is not None:
            raise ValueError(
                '`label_mode="raw"` gives numbers, not classes, so it takes no '
                f"`class_names`. Received: class_names={list(self.class_names)!r}"
            )

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
        if self.labels is None and self.masks is None and self.boxes is None:
            raise ValueError(
                "`class_names` names the classes of labels, so it needs `labels`. "
                f"Received: labels=None, class_names={list(names)!r}"
            )

    def _check_class_weight(self):
        weights = self.class_weight
        if weights is None:
            return
        if not isinstance(weights, Mapping):
            raise ValueError(
                "`class_weight` must be a dict mapping class indices to weights, as Keras's "
                f"`fit` takes it, e.g. {{0: 1.0, 1: 2.5}}. Received: class_weight={weights!r}"
            )
        for key, value in weights.items():
            if not is_int(key) or key < 0:
                raise ValueError(
                    "`class_weight` keys must be class indices (non-negative integers, the "
                    f"positions in `class_names`). Received: class_weight={dict(weights)!r}"
                )
            if not is_number(value) or not math.isfinite(value) or value < 0:
                raise ValueError(
                    "`class_weight` values must be finite non-negative numbers, the weight of "
                    f"each class. Received: class_weight={dict(weights)!r}"
                )
        if self.label_mode in TARGET_MODES:
            raise ValueError(
                "`class_weight` weighs each sample by its one class, and "
                f"`label_mode={self.label_mode!r}` gives no single class per sample. "
                f"Received: class_weight={dict(weights)!r}, label_mode={self.label_mode!r}"
            )
        if self.label_mode is None or self.labels is None:
            raise ValueError(
                "`class_weight` weighs each sample by its class, so it needs labels. "
                f"Received: class_weight={dict(weights)!r}, labels={self.labels!r}, "
                f"label_mode={self.label_mode!r}"
            )

    def check_class_weight(self, class_names):
        """Raises ValueError if a `class_weight` key is not the index of a class."""
        if self.class_weight is None:
            return
        unknown = sorted(k for k in self.class_weight if k >= len(class_names))
        if unknown:
            raise ValueError(
                f"`class_weight` has keys that are not class indices: {unknown}; there are "
                f"{len(class_names)} classes, {class_names}. "
                f"Received: class_weight={self.class_weight!r}"
            )

    def _check_split(self):
        split, subset = self.validation_split, self.subset
        if split is not None and (not is_number(split) or not 0 <= split < 1):
            raise ValueError(
                "`validation_split` must be between 0 and 1 (exclusive). "
                f"Received: validation_split={split!r}"
            )
        if bool(split) != (subset is not None):
            raise ValueError(
                "If `subset` is set, `validation_split` must be set, and inversely. "
                f"Received: subset={subset!r}, validation_split={split!r}"
            )
        if not split:
            return
        if subset not in SUBSETS:
            raise ValueError(
                '`subset` must be either "training", "validation" or "both". '
                f"Received: subset={subset!r}"
            )
        if self.seed is None and self.shuffle and subset != "both":
            raise ValueError(
                "If using `validation_split` and shuffling the data, you must provide a "
                "`seed` argument, to make sure that there is no overlap between the "
                "training and validation subset made by two calls. "
                f"Received: validation_split={split}, subset={subset!r}, seed=None"
            )


def check_keywords(function, keywords, accepted):
    """Raises TypeError, naming the keyword and its value, for a keyword of `keywords`
    (a dict) that `function` does not take (not in `accepted`): an argument of DALI's
    decoder (given through `decoder=`), an option of `make_dali_dataset` only, or an
    unknown one (Python's own words, then the value)."""
    for name, value in keywords.items():
        if name in accepted:
            continue
        received = f"Received: {name}={value!r}"
        if name in DECODER_ARGUMENTS:
            raise TypeError(
                f"`{name}` is an argument of DALI's GPU decoder, set through `decoder=`: "
                f"decoder={{{name!r}: {value!r}}}. {received}"
            )
        if name in Options.names():
            raise TypeError(
                f"`{name}` belongs to `make_dali_dataset`, which chooses the dataset's form; "
                f"`{function}` returns an `ImagePipeline` and takes no `{name}`. {received}"
            )
        raise TypeError(f"{function}() got an unexpected keyword argument {name!r}. {received}")


def pipeline_signature(function):
    """Decorates `function(directory=None, *, source=None, **options)` with the
    signature that `help()` and `inspect.signature` show: its own parameters, then each
    option of `Options.names(pipeline=True)`, keyword-only, with its default."""
    own = [p for p in inspect.signature(function).parameters.values()
           if p.kind is not inspect.Parameter.VAR_KEYWORD]
    fields = Options.__dataclass_fields__
    options = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                                 default=fields[name].default)
               for name in Options.names(pipeline=True)]
    function.__signature__ = inspect.Signature(own + options)
    return function


def _one_of(name, value, allowed):
    if value not in allowed:
        raise ValueError(f"`{name}` must be one of {allowed}. Received: {name}={value!r}")


def _positive_int(name, value):
    if not is_int(value) or value <= 0:
        raise ValueError(f"`{name}` must be a positive integer. Received: {name}={value!r}")


def _box_format(bounding_box_format, boxes):
    """`bounding_box_format` in lower case; None is `"xyxy"`, with a warning naming
    both conventions when `boxes` are given (Keras's layers require a format)."""
    if bounding_box_format is not None:
        return bounding_box_format.lower()
    if boxes is not None:
        warn(
            "`boxes` given without `bounding_box_format`: the boxes are \"xyxy\" (x1, y1, "
            "x2, y2 in pixels, dalipipe's convention; a table's columns are read so too), "
            "while KerasHub's RetinaNet reads \"yxyx\" (y1, x1, y2, x2) by default: a model "
            "that reads them the other way trains on boxes turned round, without an error. "
            "Pass `bounding_box_format` as your model takes it (Keras's layers require it: "
            "\"Pass a `bounding_box_format` argument\"). Received: bounding_box_format=None"
        )
    return "xyxy"
