"""`dalipipe.options.Options`: defaults, every validation message, canonical types,
`resolved()`. Pure: neither DALI nor fixtures."""

import dataclasses
import json
import sys

import numpy as np
import pytest

from dalipipe.decoder_settings import DECODER_ARGUMENTS
from dalipipe.options import Options, check_keywords


def message_of(**options):
    with pytest.raises(ValueError) as info:
        Options(**options)
    return str(info.value)


def test_defaults_are_keras_s_with_dalipipe_s_additions():
    options = Options()
    assert (options.labels, options.label_mode, options.class_names) == ("inferred", "int", None)
    assert (options.color_mode, options.channels, options.batch_size) == ("rgb", 3, 32)
    assert options.image_size == (256, 256) and options.interpolation == "bilinear"
    assert options.shuffle and options.seed is None and options.subset is None
    assert options.validation_split is None and options.data_format is None
    assert not (options.crop_to_aspect_ratio or options.pad_to_aspect_ratio or options.augment)
    assert (options.normalization, options.dtype, options.device) == (None, "float32", "auto")
    assert (options.central_fraction, options.prefetch_queue_depth) == (1.0, 2)
    assert (options.check, options.on_bad_file, options.num_threads) == ("structure", "raise", None)
    assert options.antialias is False and options.decoder is None  # Keras's resize
    assert Options.names()[:3] == ("labels", "label_mode", "class_names")
    assert Options.from_arguments({**{n: getattr(options, n) for n in Options.names()},
                                   "other": 1}).batch_size == 32


@pytest.mark.parametrize("options, message", [
    (dict(label_mode="onehot"),
     '`label_mode` argument must be one of "int", "categorical", "binary", "raw", '
     '"multi_hot" (the last two with `label_columns`), or None. '
     "Received: label_mode='onehot'"),
    (dict(label_mode="raw"),
     "`label_mode='raw'` reads a table's targets from the columns that `label_columns` "
     "names (a column's name or a list of names). Received: label_columns=None, "
     "label_mode='raw'"),
    (dict(label_columns="age"),
     "for one class per image, pass the class column as `labels`. Received: "
     "label_columns='age', label_mode='int'"),
    (dict(label_columns=["a", "a"], label_mode="raw"),
     "`label_columns` must be a column's name or a list of distinct column names of a "
     "table. Received: label_columns=['a', 'a']"),
    (dict(label_columns="age", label_mode="raw", labels="kind"),
     "pass only `label_columns`. Received: labels='kind', label_columns='age'"),
    (dict(label_columns="age", label_mode="raw", class_names=["a"]),
     "takes no `class_names`. Received: class_names=['a']"),
    (dict(label_columns="tags", label_mode="multi_hot", class_weight={0: 2.0}),
     "`label_mode='multi_hot'` gives no single class per sample. "
     "Received: class_weight={0: 2.0}, label_mode='multi_hot'"),
    (dict(color_mode="cmyk"),
     '`color_mode` must be one of {"rgb", "rgba", "grayscale"}. Received: color_mode=\'cmyk\''),
    (dict(interpolation="cubic"),
     "Argument `interpolation` should be one of ('bilinear', 'nearest', 'bicubic', 'area', "
     "'lanczos3', 'lanczos5', 'gaussian', 'mitchellcubic'). Received: interpolation='cubic'"),
    (dict(interpolation=3), "Received: interpolation=3"),
    (dict(format="numpy"),
     '`format` must be one of (None, "tf", "pydataset", "grain"): None for the form that '
     'Keras\'s backend takes best, "tf" for a `tf.data.Dataset`, "pydataset" for a '
     "`keras.utils.PyDataset` of the backend's tensors, \"grain\" for a `grain.IterDataset` "
     "of them. Received: format='numpy'"),
    (dict(check="quick"), "`check` must be one of ('structure', 'full', None). Received: check='quick'"),
    (dict(on_bad_file="warn"),
     "`on_bad_file` must be one of ('raise', 'skip'). Received: on_bad_file='warn'"),
    (dict(normalization="imagenette"),
     "`normalization` must be one of ('imagenet', 'unit', 'symmetric', None). "
     "Received: normalization='imagenette'"),
    (dict(dtype="int8"), "`dtype` must be one of ('float32', 'float16', 'uint8'). Received: dtype='int8'"),
    (dict(data_format="NHWC"),
     "`data_format` must be one of ('channels_last', 'channels_first', None). "
     "Received: data_format='NHWC'"),
    (dict(device="tpu"), "`device` must be one of ('auto', 'gpu', 'cpu'). Received: device='tpu'"),
    (dict(image_size=(224,)),
     "Invalid `image_size` value. Expected a tuple of 2 integers: (height, width), positive, "
     "or one integer for both. Received: image_size=(224,)"),
    (dict(image_size=-3), "Received: image_size=-3"),
    (dict(image_size=(8, 0)), "Received: image_size=(8, 0)"),
    (dict(image_size=(8.0, 8)), "Received: image_size=(8.0, 8)"),
    (dict(image_size="big"), "Received: image_size='big'"),
    (dict(image_size=True), "Received: image_size=True"),
    (dict(batch_size=0), "`batch_size` must be a positive integer. Received: batch_size=0"),
    (dict(batch_size=2.5), "`batch_size` must be a positive integer. Received: batch_size=2.5"),
    (dict(prefetch_queue_depth=0),
     "`prefetch_queue_depth` must be a positive integer. Received: prefetch_queue_depth=0"),
    (dict(num_threads=-2), "`num_threads` must be a positive integer. Received: num_threads=-2"),
    (dict(num_threads=True), "`num_threads` must be a positive integer. Received: num_threads=True"),
    (dict(seed=-1), "`seed` must be a non-negative integer or None. Received: seed=-1"),
    (dict(seed=1.5), "`seed` must be a non-negative integer or None. Received: seed=1.5"),
    (dict(central_fraction=0), "`central_fraction` must be in (0, 1]. Received: central_fraction=0"),
    (dict(central_fraction=1.5), "`central_fraction` must be in (0, 1]. Received: central_fraction=1.5"),
    (dict(central_fraction="half"), "Received: central_fraction='half'"),
    (dict(dtype="uint8", normalization="imagenet"),
     "`dtype='uint8'` holds unnormalized pixels: it needs `normalization=None`. "
     "Received: dtype='uint8', normalization='imagenet'"),
    (dict(augment=True, central_fraction=0.875),
     "`augment` crops at random and `central_fraction` crops the center: choose one. "
     "Received: augment=True, central_fraction=0.875"),
    (dict(crop_to_aspect_ratio=True, pad_to_aspect_ratio=True),
     "Only one of `pad_to_aspect_ratio`, `crop_to_aspect_ratio` can be set to `True`. "
     "Received: pad_to_aspect_ratio=True, crop_to_aspect_ratio=True"),
    (dict(pad_to_aspect_ratio=True, central_fraction=0.5),
     "`central_fraction` crops the center and `pad_to_aspect_ratio=True` pads the whole "
     "image: choose one. Received: pad_to_aspect_ratio=True, central_fraction=0.5"),
    (dict(batch_size=None, drop_remainder=True),
     "`drop_remainder=True` drops the last partial batch, and `batch_size=None` yields single "
     "samples. Received: batch_size=None, drop_remainder=True"),
    (dict(labels=[0, 1], label_mode=None),
     "`label_mode=None` yields images only, so `labels` must be None or 'inferred'. "
     "Received: labels=[0, 1], label_mode=None"),
    (dict(class_names="red"), "`class_names` must be a list of strings. Received: class_names='red'"),
    (dict(class_names=["red", 1]),
     "`class_names` must be a list of strings. Received: class_names=['red', 1]"),
    (dict(class_names=("red", "red")),
     "`class_names` must not repeat a name. Received: class_names=['red', 'red']"),
    (dict(labels=None, class_names=["red"]),
     "`class_names` names the classes of labels, so it needs `labels`. "
     "Received: labels=None, class_names=['red']"),
    (dict(class_weight=[1.0, 2.0]),
     "`class_weight` must be a dict mapping class indices to weights, as Keras's `fit` takes "
     "it, e.g. {0: 1.0, 1: 2.5}. Received: class_weight=[1.0, 2.0]"),
    (dict(class_weight={"red": 2.0}),
     "`class_weight` keys must be class indices (non-negative integers, the positions in "
     "`class_names`). Received: class_weight={'red': 2.0}"),
    (dict(class_weight={-1: 2.0}), "`class_weight` keys must be class indices"),
    (dict(class_weight={0: "high"}),
     "`class_weight` values must be finite non-negative numbers, the weight of each class. "
     "Received: class_weight={0: 'high'}"),
    (dict(class_weight={0: -1}), "Received: class_weight={0: -1}"),
    (dict(class_weight={0: True}), "Received: class_weight={0: True}"),
    (dict(class_weight={0: float("inf")}), "Received: class_weight={0: inf}"),
    (dict(class_weight={0: 2.0}, label_mode=None),
     "`class_weight` weighs each sample by its class, so it needs labels. "
     "Received: class_weight={0: 2.0}, labels='inferred', label_mode=None"),
    (dict(class_weight={0: 2.0}, labels=None),
     "so it needs labels. Received: class_weight={0: 2.0}, labels=None, label_mode='int'"),
    (dict(validation_split=1.5, subset="training", seed=1),
     "`validation_split` must be between 0 and 1 (exclusive). Received: validation_split=1.5"),
    (dict(validation_split="0.2", subset="training", seed=1), "Received: validation_split='0.2'"),
    (dict(subset="training"),
     "If `subset` is set, `validation_split` must be set, and inversely. "
     "Received: subset='training', validation_split=None"),
    (dict(validation_split=0.0, subset="training"),
     "Received: subset='training', validation_split=0.0"),
    (dict(validation_split=0.2), "Received: subset=None, validation_split=0.2"),
    (dict(validation_split=0.2, subset="train", seed=1),
     '`subset` must be either "training", "validation" or "both". Received: subset=\'train\''),
    (dict(validation_split=0.2, subset="training"),
     "If using `validation_split` and shuffling the data, you must provide a `seed` argument, "
     "to make sure that there is no overlap between the training and validation subset made "
     "by two calls. Received: validation_split=0.2, subset='training', seed=None"),
])
def test_errors_name_the_argument_and_value(options, message):
    assert message in message_of(**options)


@pytest.mark.parametrize("name", ["shuffle", "antialias", "crop_to_aspect_ratio",
                                  "pad_to_aspect_ratio", "follow_links", "verbose",
                                  "drop_remainder"])
def test_flags_must_be_booleans(name):
    assert message_of(**{name: 1}) == f"`{name}` must be True or False. Received: {name}=1"


@pytest.mark.parametrize("name", ["crop_to_aspect_ratio", "pad_to_aspect_ratio"])
def test_augment_and_a_whole_frame_exclude_each_other(name):
    assert message_of(augment=True, **{name: True}) == (
        f"`augment` crops at random and `{name}=True` keeps the whole frame: "
        f"choose one. Received: augment=True, {name}=True")


def test_valid_combinations_pass():
    Options(validation_split=0.2, subset="both")  # one call makes both subsets: no seed
    Options(validation_split=0.2, subset="training", shuffle=False)
    Options(dtype="uint8", normalization=None, label_mode=None, labels=None)
    Options(class_weight={}, central_fraction=1, crop_to_aspect_ratio=True)



def test_gpu_decoder_settings_are_one_mapping_with_dali_s_names_and_ranges():
    assert Options().decoder is None and Options(decoder={}).decoder == {}
    names = Options.names()
    assert names[names.index("prefetch_queue_depth") + 1] == "decoder"
    given = {"hw_decoder_load": np.float32(1), "preallocate_width_hint": np.int64(6000),
             "preallocate_height_hint": 0, "device_memory_padding": 0,
             "host_memory_padding": np.uint32(5), "device_memory_padding_jpeg2k": 1 << 20,
             "host_memory_padding_jpeg2k": 0, "hybrid_huffman_threshold": 2 ** 32 - 1,
             "affine": np.bool_(False)}
    tuned = Options(decoder=given).decoder
    assert tuned == {**given, "hw_decoder_load": 1.0, "affine": False}
    assert [type(v) for v in tuned.values()] == [float, *[int] * 7, bool]
    assert set(tuned) == set(DECODER_ARGUMENTS) and tuned is not given
    assert Options(decoder={"hw_decoder_load": 0}).decoder == {"hw_decoder_load": 0.0}


@pytest.mark.parametrize("decoder, message", [
    ({"hw_decoder_load": 1.5},
     "`decoder['hw_decoder_load']` must be a number in [0, 1], the share of JPEG decoding "
     "given to the hardware decoder. Received: decoder={'hw_decoder_load': 1.5}"),
    ({"hw_decoder_load": -0.1}, "Received: decoder={'hw_decoder_load': -0.1}"),
    ({"hw_decoder_load": "0.5"}, "Received: decoder={'hw_decoder_load': '0.5'}"),
    ({"hw_decoder_load": None}, "Received: decoder={'hw_decoder_load': None}"),
    ({"hw_decoder_load": True}, "Received: decoder={'hw_decoder_load': True}"),
    ({"preallocate_width_hint": -1},
     "`decoder['preallocate_width_hint']` must be a non-negative integer (pixels): the "
     "hardware decoder's buffer width. Received: decoder={'preallocate_width_hint': -1}"),
    ({"preallocate_height_hint": 1.5}, "Received: decoder={'preallocate_height_hint': 1.5}"),
    ({"device_memory_padding": None},
     "`decoder['device_memory_padding']` must be a non-negative integer (bytes): nvJPEG's "
     "GPU buffer slack. Received: decoder={'device_memory_padding': None}"),
    ({"host_memory_padding": 2 ** 31}, "Received: decoder={'host_memory_padding': 2147483648}"),
    ({"hybrid_huffman_threshold": 2 ** 32}, "`decoder['hybrid_huffman_threshold']` must be"),
    ({"affine": 1}, "`decoder['affine']` must be True or False"),
    ({"output_type": "RGB"},
     "`decoder` cannot set 'output_type': dalipipe sets it from `color_mode`. "
     "Received: decoder={'output_type': 'RGB'}"),
    ({"device": "cpu"}, "`decoder` cannot set 'device': dalipipe sets it from `device`."),
    ({"jpeg_fancy_upsampling": False}, "`decoder` cannot set 'jpeg_fancy_upsampling'"),
    ({"use_fast_idct": True}, "`decoder` cannot set 'use_fast_idct': it changes the pixels"),
    ({"hw_decoder_load": 0.5, "cache_size": 100},
     "'cache_size' is not one of them. Received: decoder={'hw_decoder_load': 0.5, "
     "'cache_size': 100}"),
    ([("hw_decoder_load", 0.5)],
     "`decoder` must be a dict of DALI's GPU decoder arguments (`fn.decoders.image`), e.g. "
     "{'hw_decoder_load': 0.9}, or None. Received: decoder=[('hw_decoder_load', 0.5)]"),
])
def test_gpu_decoder_settings_are_checked(decoder, message):
    assert message in message_of(decoder=decoder)


def test_every_option_declares_once_whether_it_changes_the_data():
    """Each field of `Options` is made by `option(default, data=...)`: its default and
    whether it is in the resume fingerprint, declared together (`fingerprint` follows
    `data_names`; `tests/test_resume.py` changes each option and watches it)."""
    fields = dataclasses.fields(Options)
    assert [f.name for f in fields] == list(Options.names())
    assert all(set(f.metadata) == {"data", "dataset_only"} for f in fields)
    assert all(isinstance(f.metadata["data"], bool) for f in fields)
    assert Options.data_names() == tuple(f.name for f in fields if f.metadata["data"])
    settings = set(Options.names()) - set(Options.data_names())
    assert settings == {"format", "verbose", "device", "num_threads", "prefetch_queue_depth",
                        "decoder", "check", "on_bad_file", "cache"}
    assert set(Options.names()) - set(Options.names(pipeline=True)) == {"format"}


def test_keywords_not_taken_are_type_errors_naming_them():
    with pytest.raises(TypeError) as info:
        Options.from_keywords("make_dali_pipeline", {"hw_decoder_load": 0.65})
    assert str(info.value) == (
        "`hw_decoder_load` is an argument of DALI's GPU decoder, set through `decoder=`: "
        "decoder={'hw_decoder_load': 0.65}. Received: hw_decoder_load=0.65")
    for name in DECODER_ARGUMENTS:
        with pytest.raises(TypeError, match=f"`{name}` is an argument of DALI's GPU decoder"):
            check_keywords("make_dali_dataset", {name: 1}, ())
    with pytest.raises(TypeError) as info:
        Options.from_keywords("make_dali_pipeline", {"format": "tf"})
    assert str(info.value) == (
        "`format` belongs to `make_dali_dataset`, which chooses the dataset's form; "
        "`make_dali_pipeline` returns an `ImagePipeline` and takes no `format`. "
        "Received: format='tf'")
    with pytest.raises(TypeError) as info:
        Options.from_keywords("make_dali_pipeline", {"batch_size": 4, "img_size": 8})
    assert str(info.value) == ("make_dali_pipeline() got an unexpected keyword argument "
                               "'img_size'. Received: img_size=8")
    assert Options.from_keywords("make_dali_pipeline", {"batch_size": 4}).batch_size == 4


def test_class_weight_keys_must_be_indices_of_the_classes():
    options = Options(class_weight={3: 2.0, 1: 0.5})
    options.check_class_weight(["a", "b", "c", "d"])
    with pytest.raises(ValueError) as info:
        options.check_class_weight(["blue", "green", "red"])
    assert str(info.value) == (
        "`class_weight` has keys that are not class indices: [3]; there are 3 classes, "
        "['blue', 'green', 'red']. Received: class_weight={3: 2.0, 1: 0.5}")


def test_values_take_canonical_types():
    options = Options(image_size=np.int64(8), batch_size=np.int32(4), seed=np.uint8(3),
                      interpolation="BiCubic", prefetch_queue_depth=np.int16(3),
                      central_fraction=1, num_threads=np.int64(2),
                      class_names=("a", "b"), class_weight={np.int64(1): np.float32(2)})
    assert options.image_size == (8, 8) and type(options.image_size[0]) is int
    assert Options(image_size=[np.int64(3), 5]).image_size == (3, 5)
    for name, value in (("batch_size", 4), ("seed", 3), ("prefetch_queue_depth", 3),
                        ("num_threads", 2), ("central_fraction", 1.0)):
        assert getattr(options, name) == value and type(getattr(options, name)) is type(value)
    assert options.interpolation == "bicubic" and options.class_names == ["a", "b"]
    assert options.class_weight == {1: 2.0}
    assert [type(v) for item in options.class_weight.items() for v in item] == [int, float]
    assert options.replace(batch_size=np.int64(9)).batch_size == 9
    with pytest.raises(ValueError, match="Received: batch_size=0"):
        options.replace(batch_size=0)


def test_channels_follow_color_mode():
    assert [Options(color_mode=m).channels for m in ("rgb", "grayscale", "rgba")] == [3, 1, 4]


def test_resolved_draws_a_seed_once_and_keeps_a_given_one():
    drawn = {Options().resolved().seed for _ in range(5)}
    assert len(drawn) > 1 and all(type(s) is int and 0 <= s < 2 ** 31 for s in drawn)
    resolved = Options(seed=11).resolved()
    assert resolved.seed == 11 and resolved.resolved().seed == 11


def test_resolved_data_format_is_keras_s_image_data_format(tmp_path, monkeypatch):
    monkeypatch.delitem(sys.modules, "keras", raising=False)  # read from keras.json
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    assert Options().resolved().data_format == "channels_last"
    (tmp_path / "keras.json").write_text(json.dumps({"image_data_format": "channels_first"}))
    assert Options().resolved().data_format == "channels_first"
    assert Options(data_format="channels_last").resolved().data_format == "channels_last"
    (tmp_path / "keras.json").write_text("not json")
    assert Options().resolved().data_format == "channels_last"
