"""`make_dali_dataset`: the DALI image pipeline as a dataset for Keras's `fit`.

The front: it validates the arguments (`Options`), decides once where the pipelines
run (`devices.place`), and hands both to the adapter for the result's format, which
follows Keras's backend: `dalipipe.tf_dataset` (DALI's TensorFlow plugin) or
`dalipipe.py_dataset` (a `keras.utils.PyDataset` for torch and JAX). Nothing here
imports TensorFlow, so that Keras on torch or JAX never loads it.
"""

from dalipipe.calls import first_argument, warn
from dalipipe.dali_import import require_dali
from dalipipe.devices import place
from dalipipe.keras_config import keras_backend
from dalipipe.options import Options, check_keywords
from dalipipe.pipeline import split_source


def make_dali_dataset(
    directory=None,
    *,
    source=None,
    labels="inferred",
    label_mode="int",
    class_names=None,
    color_mode="rgb",
    batch_size=32,
    image_size=(256, 256),
    shuffle=True,
    seed=None,
    validation_split=None,
    subset=None,
    interpolation="bilinear",
    follow_links=False,
    crop_to_aspect_ratio=False,
    pad_to_aspect_ratio=False,
    data_format=None,
    format=None,
    verbose=True,
    path_column="path",
    label_columns=None,
    root=None,
    antialias=False,
    central_fraction=1.0,
    augment=False,
    mix=None,
    normalization=None,
    dtype="float32",
    drop_remainder=False,
    class_weight=None,
    masks=None,
    mask_fill_value=0,
    boxes=None,
    bounding_box_format=None,
    max_boxes=100,
    min_box_visibility=0.25,
    box_crop=False,
    output=None,
    device="auto",
    num_threads=None,
    prefetch_queue_depth=2,
    decoder=None,
    check="structure",
    on_bad_file="raise",
    cache=None,
    strategy=None,
    **kwargs,
):
    """Generates a dataset of images loaded by an NVIDIA DALI pipeline, for Keras.

    Takes the arguments of `keras.utils.image_dataset_from_directory`, with its defaults
    and results, and adds sources, augmentation, normalization, the check of every file,
    devices and sharding: a `tf.data.Dataset` on TensorFlow, a `keras.utils.PyDataset` on
    torch and JAX. Pass `n` is one exact epoch (a true partial last batch), as
    `make_dali_pipeline(...).epoch(n)`; each option's line is its row in `docs/options.md`.

    ```
    main_directory/
    ...class_a/a_image_1.jpg
    ...class_b/b_image_1.jpg
    ```

    Args:
        directory: a folder of class subfolders (above); a `pandas.DataFrame` or CSV file
            (a column of file paths, label columns); image paths (a list, a NumPy array
            or one path); or TFRecord files (a glob pattern, a file or a list).
        source: the same argument by its other name, for a source that is not a folder
            (`source=df`); give one of the two.
        labels: `"inferred"` (the class folders), None (images only), or a list of labels in
            `file_paths` order; for a table, a column's name or None (see Labels).
        label_mode: `"int"` (int32 `(batch,)`), `"categorical"` (float32 one-hot `(batch,
            classes)`), `"binary"` (float32 `(batch, 1)`, two classes), None (images only);
            for a table's `label_columns`, `"raw"` or `"multi_hot"` (see Targets).
        class_names: the classes and their order (for a folder, only with
            `labels="inferred"`: the subfolders to use); None means the sorted labels.
        color_mode: `"rgb"` (3 channels), `"grayscale"` (1), `"rgba"` (4: a PNG's alpha
            channel, else opaque).
        batch_size: samples per batch (the global batch under a strategy); the last batch of
            an epoch is partial. None: single samples, no batch dimension.
        image_size: `(height, width)` of the output, or one integer for both.
        shuffle: a new order every epoch, and as in Keras `file_paths` permuted with `seed`
            before the split. False: a folder's files sorted, a table's or list's as given.
        seed: seeds the order, the augmentation and the split; None means drawn at random.
            Needed with `validation_split` and `shuffle` unless `subset="both"`.
        validation_split: the fraction (between 0 and 1) held out for validation: the last
            samples of `file_paths`, as in Keras.
        subset: `"training"`, `"validation"` or `"both"` (a pair: training shuffled,
            validation in `file_paths` order); only with `validation_split`.
        interpolation: Keras's filter names, each DALI's closest filter: `"bilinear"`,
            `"nearest"`, `"bicubic"`, `"area"`, `"lanczos3"`, `"lanczos5"`, `"gaussian"`,
            `"mitchellcubic"` (see Resizing).
        follow_links: walk into symbolic links to folders inside the class folders.
        crop_to_aspect_ratio: True: resize the largest central window with the output's
            aspect ratio, instead of stretching the whole image.
        pad_to_aspect_ratio: True: fit the whole image and pad it with zeros, centered
            (letterboxing), as `tf.image.resize_with_pad`.
        data_format: `"channels_last"` (`(batch, height, width, channels)`) or
            `"channels_first"`; None means `keras.config.image_data_format()`.
        format: `"tf"` (a `tf.data.Dataset`), `"pydataset"` (a `keras.utils.PyDataset` of
            the backend's tensors), `"grain"` (a `grain.IterDataset` of them; host copies
            on TensorFlow, see Grain), or None: "tf" on TensorFlow, else "pydataset".
        verbose: print the files and classes found, as Keras does, and the check's progress.
        path_column: the column of file paths in a table.
        label_columns: a table's target columns, for `label_mode="raw"` (float32 `(batch,)`
            for a name, `(batch, k)` for `k` names) or `"multi_hot"` (float32 `(batch,
            classes)`) (see Targets).
        root: the folder that relative paths in a table or list start from; None means the
            CSV file's folder, else the current directory.
        antialias: True: widen the filter when shrinking, as PIL does, for quality where it
            matters (see Resizing); False: Keras's resize, faster on the CPU.
        central_fraction: keep this central fraction of the image (or of the aspect-ratio
            window), resized in one step (see Resizing).
        augment: True: a random-resized crop and a flip, new every epoch; or a recipe
            after them, `"randaugment"`, `"trivialaugment"`, `"autoaugment"` or its
            object, e.g. `dalipipe.RandAugment(num_ops=2, magnitude=9)` (see Augmentation).
        mix: None, `"mixup"`, `"cutmix"`, `dalipipe.MixUp(alpha)` or `dalipipe.CutMix(factor)`:
            mixes each batch's images and its labels, which must be float32 (see Augmentation).
        normalization: None: 0-255, Keras's values; `"imagenet"` (ImageNet's mean and std),
            `"unit"` ([0, 1]), `"symmetric"` ([-1, 1]), computed in the graph (see
            Normalization).
        dtype: `"float32"`, `"float16"` or `"uint8"` (with `normalization=None`).
        drop_remainder: drop the last partial batch of each epoch.
        class_weight: `{class index: weight}`, as Keras's `fit` takes it: float32 sample
            weights in each batch, from the graph (see Class weights).
        masks: masks instead of labels: a folder matched to the images by file stem, a table's
            column, or tar shards' member extension (`".seg.png"`); int32 ids (`docs/dense.md`).
        mask_fill_value: the mask id where padding or a recipe leaves no pixel (an ignore index).
        boxes: boxes instead of labels: a COCO JSON, a table, or tar shards' `".json"` member.
        bounding_box_format: the boxes' format (a table's, the output's); None: xyxy, warning.
        max_boxes: boxes per image, padded with -1 as `keras.layers.MaxNumBoundingBoxes` pads.
        min_box_visibility: the share of a box's area a crop must keep to keep the box.
        box_crop: with `augment` (True or a recipe), move each crop to hold one of the image's boxes.
        output: None (tuples) or `"dict"`: the dicts of Keras's preprocessing layers.
        device: `"gpu"`, `"cpu"` (DALI's CPU operators, no CUDA), or `"auto"`: the GPU when
            TensorFlow and DALI both see one (for `make_dali_pipeline`, when DALI does).
        num_threads: DALI's CPU threads per pipeline; None means the usable cores on the
            CPU, on a GPU 4 (at most the cores), more for PNGs and masks.
        prefetch_queue_depth: batches DALI prepares ahead.
        decoder: DALI's GPU decoder arguments, e.g. `{"hw_decoder_load": 0.9}` (see GPU decoder).
        check: the check of every file before training: `"structure"` (formats, headers,
            markers), `"full"` (also a full decode), None (see `docs/checks.md`).
        on_bad_file: `"raise"`: one error listing every bad file and why; `"skip"`: leave
            them out, with a warning and a report file.
        cache: keep decoded images for later epochs: `"memory"`, True or a folder (see `docs/cache.md`).
        strategy: `make_dali_dataset` only: a `tf.distribute` strategy to feed, one DALI
            pipeline per replica (see Strategies).

    Returns:
        A `tf.data.Dataset` (format "tf"; a `tf.distribute.DistributedDataset` with
        `strategy`), a `DALIPyDataset` ("pydataset") or a `DALIGrainDataset` ("grain");
        a pair of them for `subset="both"`. Batches are `(images, labels)`, `(images,
        labels, sample_weights)` with `class_weight` or `strategy`, the images alone
        without labels (`(images,)` from the last two); for `masks` and `boxes`, see
        `docs/dense.md`. Images are `dtype`, `(batch, height, width, channels)` or `(batch,
        channels, height, width)`; labels as `label_mode` says (float32 for "raw" and
        "multi_hot"); weights float32 `(batch,)` (`(batch, height, width)` with
        `masks`); no batch dimension with `batch_size=None`. It has `class_names`, `file_paths`.

    Raises:
        TypeError: for an unknown keyword, or an argument of DALI's GPU decoder given
            on its own instead of in `decoder`.
        ValueError: for an invalid argument or combination, an empty source, an unknown
            column, mismatched lengths, bad files (with `on_bad_file="raise"`), a
            `batch_size` the devices do not divide, or a GPU whose CUDA device is unknown.
        ImportError: for `format="grain"` without Grain (naming the pip command).
        RuntimeError: for `device="gpu"` without a usable GPU, or TensorFlow holding it all.
    """
    check_keywords("make_dali_dataset", kwargs, ())
    options = Options.from_arguments(locals())
    source = first_argument("make_dali_dataset", directory, source)
    require_dali("make_dali_dataset")
    return _make(source, options, strategy)


def _make(source, options, strategy):
    tf_data = (options.format or _backend_format()) == "tf"
    if tf_data:
        from dalipipe import tf_dataset

        if strategy is not None:
            tf_dataset.check_strategy(strategy, options)
    elif strategy is not None:
        raise ValueError(
            "`strategy` is a `tf.distribute` strategy, which feeds a `tf.data.Dataset`: "
            'it needs format="tf" (or format=None on the TensorFlow backend). On JAX, '
            "set a `keras.distribution.DataParallel` distribution instead. Received: "
            f"strategy={strategy!r}, format={options.format!r}, "
            f"Keras backend={keras_backend()!r}"
        )
    backend = None if tf_data else keras_backend()
    placement = place(options, backend=backend, tf_data=tf_data, strategy=strategy)
    if tf_data:
        cost = tf_format_cost(keras_backend(), placement.device)
        if cost:
            warn(cost)
        return tf_dataset.make_tf_dataset(source, options, placement, strategy)
    # The `ImagePipeline`s, each made once on its final device and, with several
    # devices, as this process's shard: one, or two for `subset="both"`.
    result = split_source(source, options, placement)
    if options.format == "grain":
        from dalipipe.grain_dataset import make_grain_dataset as wrap
    else:
        from dalipipe.py_dataset import make_py_dataset as wrap
    datasets = wrap(result if isinstance(result, tuple) else (result,), backend)
    return datasets if len(datasets) == 2 else datasets[0]


# Keras backend -> the framework whose tensors Keras's `tf.data` adapter makes.
_FRAMEWORKS = {"torch": "PyTorch", "jax": "JAX"}


def tf_format_cost(backend, device):
    """The warning for `format="tf"` on Keras's `backend` with a pipeline on `device`
    ("gpu" or "cpu"), or None: on torch and JAX with a GPU, Keras's adapter turns each
    batch of the `tf.data.Dataset` into NumPy on the host and then into the backend's
    tensors on the GPU. Not refused: KerasHub's models take "tf" and "grain" only."""
    framework = _FRAMEWORKS.get(backend)
    if device != "gpu" or framework is None:
        return None
    return (
        f'`format="tf"` on the {backend} backend copies each batch from the GPU to the host '
        f"and back: Keras's `tf.data` adapter turns DALI's GPU batches into NumPy arrays, "
        f'then into {framework} tensors on the GPU. Use format="pydataset" or "grain", '
        f"which hand DALI's GPU batches to {framework} on the GPU (KerasHub's models take "
        f'"tf" and "grain"). Received: format="tf", Keras backend={backend!r}, device="gpu"'
    )


def _backend_format():
    """The format for Keras's backend: "tf" on TensorFlow, else "pydataset"."""
    return "tf" if keras_backend() == "tensorflow" else "pydataset"
