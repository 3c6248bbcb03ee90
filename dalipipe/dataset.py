"""`make_dali_dataset`: the DALI image pipeline as a dataset for Keras's `fit`.

The front: it validates the arguments (`Options`) and hands them to the adapter for
the result's format, which follows Keras's backend: `dalipipe.tf_dataset` (DALI's
TensorFlow plugin) or `dalipipe.py_dataset` (a `keras.utils.PyDataset` for torch and
JAX). Nothing here imports TensorFlow, so that Keras on torch or JAX never loads it.
"""

from dalipipe.keras_config import keras_backend
from dalipipe.options import Options


def make_dali_dataset(
    source,
    *,
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
    root=None,
    antialias=True,
    central_fraction=1.0,
    augment=False,
    normalization="imagenet",
    dtype="float32",
    drop_remainder=False,
    class_weight=None,
    device="auto",
    num_threads=None,
    prefetch_queue_depth=2,
    check="structure",
    on_bad_file="raise",
    strategy=None,
):
    """Generates a dataset of images loaded by an NVIDIA DALI pipeline, for Keras.

    Takes the arguments of `keras.utils.image_dataset_from_directory`, with its
    defaults and results, and adds sources (tables, lists of files, TFRecord files),
    augmentation, normalization, the check of every file before training, devices
    and sharding over several devices. The result follows Keras's backend: a
    `tf.data.Dataset` fed by DALI's TensorFlow plugin on TensorFlow, and a
    `keras.utils.PyDataset` of torch tensors or jax arrays on the device of the
    pipeline (CUDA for a GPU pipeline) on torch and JAX, which never imports
    TensorFlow.

    DALI reads the files on its CPU threads, decodes them (nvJPEG and the hardware
    JPEG decoder on a GPU), crops or resizes, flips and normalizes, and prefetches
    `prefetch_queue_depth` batches ahead. Keras's `fit`, `evaluate` and `predict`
    take the dataset directly: each pass over it is one exact epoch, every sample
    once, in a new order when `shuffle=True`, and the last batch is a true partial
    batch (unless `drop_remainder=True`). Pass `n` loads what
    `make_dali_pipeline(...).epoch(n)` loads: the same order and crops for a seed.

    A directory source looks like this (the `image_dataset_from_directory` layout):

    ```
    main_directory/
    ...class_a/
    ......a_image_1.jpg
    ......a_image_2.jpg
    ...class_b/
    ......b_image_1.jpg
    ```

    Args:
        source: a directory with one subfolder per class; a `pandas.DataFrame` or the
            path of a CSV file with a column of file paths (`path_column`) and label
            columns; a list of file paths; or TFRecord files of `tf.train.Example`
            images (a glob pattern, a file or a list of files).
        labels: which labels to use. For a directory: `"inferred"` (the subfolder
            names, sorted), None, or a list of integer labels in the order of the
            image paths (folders sorted by path, their files by name), as Keras
            takes it. For a table: the name of the label column, or None. For a
            list of paths: a list of labels of the same length, or None. Integer
            labels in a list are class indices; string labels, and all labels of a
            table, are class names, sorted (numerically when they are all integers)
            unless `class_names` orders them. None yields images only.
        label_mode: `"int"` (int32, shape `(batch,)`), `"categorical"` (float32
            one-hot, `(batch, num_classes)`), `"binary"` (float32 0 or 1,
            `(batch, 1)`, exactly two classes) or None (images only). Defaults to
            `"int"`.
        class_names: class names and their order. For a directory, only with
            `labels="inferred"`: the subfolders to use. For string labels, the
            mapping to integers. Defaults to the sorted labels.
        color_mode: `"rgb"`, `"grayscale"` or `"rgba"`: 3, 1 or 4 channels. In
            `"rgba"`, PNG files with an alpha channel keep it, and every other image
            gets an opaque alpha (255). Defaults to `"rgb"`.
        batch_size: samples per batch, or None for single samples (no batch
            dimension). Defaults to 32.
        image_size: `(height, width)` of the output images, or one integer for
            both. Defaults to `(256, 256)`.
        shuffle: whether to visit the samples in a new random order every epoch.
            As in Keras, it also permutes `file_paths` with `seed` before the
            validation split; if False, the samples stay in sorted order. Defaults
            to True.
        seed: seed for the order, augmentation and the validation split. Needed
            with `validation_split` and `shuffle` unless `subset="both"`.
        validation_split: fraction of the samples (between 0 and 1) held out for
            validation: the last ones of `file_paths`, as in Keras.
        subset: `"training"`, `"validation"` or `"both"` (returns a pair: the
            training dataset, shuffled if `shuffle`, and the validation dataset in
            `file_paths` order). Only with `validation_split`.
        interpolation: the resize filter, by Keras's names: `"bilinear"`,
            `"nearest"`, `"bicubic"`, `"area"`, `"lanczos3"`, `"lanczos5"`,
            `"gaussian"` or `"mitchellcubic"`. DALI's closest filter is used:
            "area" is antialiased linear, "lanczos5" is Lanczos-3 and
            "mitchellcubic" is cubic. Defaults to `"bilinear"`.
        follow_links: whether to walk into symbolic links to folders inside the
            class folders. Defaults to False.
        crop_to_aspect_ratio: if True, resize the largest central window with the
            aspect ratio of `image_size`, so the image is not distorted; if False,
            stretch the whole image. Defaults to False.
        pad_to_aspect_ratio: if True, resize the whole image to fit `image_size`
            without distortion and pad it with zeros, centered (letterboxing, as
            `tf.image.resize_with_pad`). Defaults to False.
        data_format: `"channels_last"` (`(batch, height, width, channels)`),
            `"channels_first"` (`(batch, channels, height, width)`), or None for
            `keras.config.image_data_format()`. Defaults to None.
        format: the form of the result: `"tf"` (a `tf.data.Dataset`, for any
            backend: Keras pulls it through NumPy on torch and JAX), `"pydataset"`
            (a `keras.utils.PyDataset` yielding the backend's tensors: torch tensors
            on torch, jax arrays on JAX, NumPy arrays on TensorFlow), or None for
            the backend's own: "tf" on TensorFlow, "pydataset" on torch and JAX
            (`keras.backend.backend()`). Defaults to None.
        verbose: print how many files and classes were found and how many each
            subset uses, and show the check's progress. Defaults to True.
        path_column: the column of a table holding file paths. Defaults to `"path"`.
        root: folder that relative paths in a table or list resolve against.
            Defaults to the CSV file's folder, else the current directory.
        antialias: widen the filter when shrinking, as PIL does, so that fine detail
            does not alias. False is faster on the CPU (`benchmarks/PERFORMANCE.md`)
            and is `tf.image.resize`'s default. Defaults to True.
        central_fraction: keep only this central fraction of the image (of the
            aspect-ratio window with `crop_to_aspect_ratio=True`) and resize it to
            `image_size`, in one step with no rounding. With
            `crop_to_aspect_ratio=True`, 0.875 is ImageNet's evaluation transform
            (shorter side to 256, center crop 224). Defaults to 1.0.
        augment: if True, a random-resized crop (area 8-100%, aspect ratio 3/4-4/3,
            decoding only the crop's region) then a random horizontal flip, freshly
            drawn every epoch. With `subset="both"` only the training dataset is
            augmented. Defaults to False.
        normalization: `"imagenet"` (subtract ImageNet mean, divide by std),
            `"unit"` (`[0, 1]`), `"symmetric"` (`[-1, 1]`) or None (pixel values
            0-255, as Keras gives them). Defaults to `"imagenet"`.
        dtype: `"float32"`, `"float16"` or `"uint8"` (needs `normalization=None`).
            Defaults to `"float32"`.
        drop_remainder: drop the last partial batch of each epoch. Defaults to False.
        class_weight: a dict `{class index: weight}`, as Keras's `fit` takes it:
            each batch gets a third element, float32 sample weights `(batch,)`,
            the weight of each sample's class (1.0 for a class not in the dict),
            computed in the DALI graph, so that it works on a GPU too (where Keras's
            own `fit(class_weight=...)` cannot map the dataset). With `strategy`, it
            multiplies the padding weights. Needs labels. Defaults to None.
        device: `"auto"` (the GPU when both TensorFlow and DALI see one, else the
            CPU), `"gpu"` or `"cpu"` (DALI's CPU operators, no CUDA needed).
            Defaults to `"auto"`.
        num_threads: DALI CPU threads per pipeline. Defaults to the number of usable
            cores on the CPU, and to 4 (at most the usable cores) on a GPU, as in
            DALI's examples: there the GPU decodes and the threads only read.
        prefetch_queue_depth: batches DALI prepares ahead. Defaults to 2.
        check: the pre-flight check of every file before the pipeline starts
            (DALI stops at the first file it cannot decode): `"structure"`
            (format by content, headers and markers), `"full"` (also a full
            decode) or None (no check). Results are cached (see
            `dalipipe.checks`). Defaults to `"structure"`.
        on_bad_file: `"raise"` (one error listing every bad file and why) or
            `"skip"` (leave them out, with a warning and a report file; classes
            left empty are dropped unless `class_names` was given). Defaults to
            `"raise"`.
        strategy: a `tf.distribute` strategy to feed: the result is a
            `tf.distribute.DistributedDataset` with one DALI pipeline per replica
            under `MirroredStrategy` (each on its replica's GPU) and one per worker
            under `MultiWorkerMirroredStrategy` (run one worker per GPU). `batch_size`
            is the global batch, split evenly over the replicas. Every replica runs
            the same number of full batches per epoch: the shards of one shuffled
            order, the last step padded with samples of weight 0, so batches are
            `(images, labels, sample_weights)` and each sample counts exactly once per
            epoch. Build the model under `strategy.scope()`; use `weighted_metrics`.
            Keras's loss divides by the whole batch, padding included, so the
            last step's loss is scaled by its share of real samples. Needs labels.
            `cardinality` is then an attribute, as on any distributed dataset.
            TensorFlow only: on JAX, set a `keras.distribution.DataParallel`
            distribution instead, which the `"pydataset"` format follows the same
            way (padded full global batches with sample weights; Keras splits each
            over the devices). Defaults to None (one device).

    Returns:
        For the `"tf"` format, a `tf.data.Dataset` yielding `(images, labels)`
        batches, or the images alone when there are no labels, or `(images, labels,
        sample_weights)` with `class_weight`; a pair of them for `subset="both"`.
        For the `"pydataset"` format, a `dalipipe.py_dataset.DALIPyDataset` (a
        `keras.utils.PyDataset`) whose items are the same tuples, `(images,)`
        without labels (see `DALIPyDataset` for its epochs and devices). Images are `dtype` of
        shape `(batch, height, width, channels)` (`"channels_last"`) or
        `(batch, channels, height, width)`; labels as `label_mode` says; sample
        weights float32 `(batch,)`. With `batch_size=None`, single samples without
        the batch dimension. It has the attributes `class_names` (None without
        labels), `file_paths` (in the order that `shuffle` and `seed` give, as
        Keras's) and `image_pipeline` (the `ImagePipeline` it runs), and
        `cardinality()` is the number of batches per epoch. On the
        CPU, an iterator builds its DALI pipeline at its first element, so one that
        is never read costs nothing. On a GPU it is placed on `/gpu:0` and its
        tensors live there: `.map` and the other CPU transformations of `tf.data`
        raise ValueError (use `class_weight`, or `device="cpu"`). With `strategy`,
        a `tf.distribute.DistributedDataset` (see `strategy`) with the same
        attributes. A `DALIPyDataset` has `class_names`, `file_paths` and `len()`
        (the batches per epoch).

    Raises:
        ValueError: for an invalid argument, an empty source, an unknown column,
            mismatched lengths, missing or bad files (with `on_bad_file="raise"`), a
            `batch_size` that the strategy's or distribution's devices do not
            divide, a `strategy` with the `"pydataset"` format, or a TensorFlow GPU
            whose CUDA device cannot be told.
        RuntimeError: for `device="gpu"` on a machine without a usable GPU, or for
            a GPU pipeline where TensorFlow holds all GPU memory (memory growth off
            and no memory limit).
    """
    options = Options.from_arguments(locals())
    if (options.format or _backend_format()) == "tf":
        from dalipipe import tf_dataset

        return tf_dataset.make_tf_dataset(source, options, strategy)
    if strategy is not None:
        raise ValueError(
            "`strategy` is a `tf.distribute` strategy, which feeds a `tf.data.Dataset`: "
            'it needs format="tf" (or format=None on the TensorFlow backend). On JAX, '
            "set a `keras.distribution.DataParallel` distribution instead. Received: "
            f"strategy={strategy!r}, format={options.format!r}, "
            f"Keras backend={keras_backend()!r}"
        )
    from dalipipe import py_dataset

    return py_dataset.make_py_dataset(source, options)


def _backend_format():
    """The format for Keras's backend: "tf" on TensorFlow, else "pydataset"."""
    return "tf" if keras_backend() == "tensorflow" else "pydataset"
