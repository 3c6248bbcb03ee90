"""The DALI graph: read, decode, crop or resize, flip and normalize, on CPU or GPU.

`define` is called inside a DALI `pipeline_def` function (see
`ImagePipeline.build_dali_pipeline`). The same graph runs on both devices: on a GPU the
decoders are `"mixed"` (nvJPEG and the hardware decoder) and everything after them
runs on the GPU.

The graph has named inputs, fed one batch at a time; `dalipipe.feed` owns the
layouts of the first two, both packing and unpacking:
- `"samples"`: uint8, per sample its label and its image's path, or its encoded
  image where dalipipe reads the images (TFRecord records, `gs://` objects). One
  input per sample keeps each label with its image whatever the order. With
  `masks`, the image (its path, or its encoded bytes) and its mask's path (or its
  encoded bytes, for a tar shard's member) instead (`_masks` moves the masks).
- `"random"`: float32, per sample the draws of the crop and flip, the recipe and
  the mixing that the options use (`dalipipe.feed.random_parts`), each read by its
  own step in the graph; with `boxes`, then the sample's boxes and labels, placed in
  the output image in NumPy (`dalipipe.annotations.placement`) and passed through.
- `"cached"` (only with `cache`): uint8, per sample a slot and the row of the
  decoded-image cache; `dalipipe.cache` owns its layout (`stored_or_decoded`).
- `"weights"` (only for one shard of a distributed dataset): float32, one per
  sample, 0 for padding; a padding sample's mask is all `mask_fill_value`, and
  its weight is given per pixel (`padded_masks`).

With `class_weight` or a `"weights"` input, the last output is Keras's
`sample_weight`: the class weight of each sample's label (a lookup table in the
graph), times its `"weights"` input if any.

On a GPU the mixed decoders upsample JPEG chroma as the CPU decoder does
(`jpeg_fancy_upsampling`), so that both devices decode to nearly the same pixels. A
random-resized crop is decoded as a region only where nvImageCodec accepts that with
fancy upsampling on the GPU (nvJPEG 13.2 or newer), else the whole image is decoded
on the GPU and cropped there (`codecs.crop_setup`, `_crop_and_resize`).

Inputs that an operator reads on the host (a slice's anchor and shape, a resize's
size) are CPU nodes in both graphs, constants included (`on_cpu`): a GPU one would
cost a copy back and a synchronization every batch (`tests/test_codecs.py` walks
every GPU graph set-up for one).

Above 400 lines: the images' and the masks' steps, with and without the decoded-image
cache (`_cached`), share their helpers here, so that both paths run the same operators.
"""

from dalipipe import codecs, sampling
from dalipipe.cache import stored_or_decoded, stored_shape
from dalipipe.feed import random_columns, unpack_boxes, unpack_pairs, unpack_random, unpack_samples
from dalipipe.options import normalization_stats

# Keras's interpolation names -> the closest DALI filter, and whether it must
# antialias. DALI has no area, Lanczos-5 or Mitchell-Netravali filter: "area" is the
# antialiased linear (triangular) filter, "lanczos5" Lanczos-3, "mitchellcubic" cubic.
INTERPOLATION_FILTERS = {
    "bilinear": ("INTERP_LINEAR", False),
    "nearest": ("INTERP_NN", False),
    "bicubic": ("INTERP_CUBIC", False),
    "area": ("INTERP_LINEAR", True),
    "lanczos3": ("INTERP_LANCZOS3", False),
    "lanczos5": ("INTERP_LANCZOS3", False),
    "gaussian": ("INTERP_GAUSSIAN", False),
    "mitchellcubic": ("INTERP_CUBIC", False),
}


def class_weight_table(class_weight):
    """`(keys, values)` of the `class_weight` dict, sorted by key, for DALI's lookup
    table; classes missing from it weigh 1.0, as in Keras. Never empty: DALI 2.4's
    lookup table crashes the process on empty keys."""
    items = sorted(class_weight.items()) or [(0, 1.0)]
    return [k for k, _ in items], [v for _, v in items]


def define(options, *, feed, padded, feeds_bytes, num_classes, target_shape=None,
           cached=False, mask_bytes=False):
    """Defines the graph; returns its outputs (see `ImagePipeline` for their shapes).

    Args:
        options: resolved `Options` (`device` is "cpu" or "gpu"; `label_mode` is
            None for images only).
        feed: None for named placeholder inputs, which DALI's TensorFlow plugin
            fills; or `feed(name)`, giving a callable that returns the next batch of
            that input and raises StopIteration at the end of an epoch (decorated
            with DALI's `do_not_convert`: it is Python, not graph code).
        padded: whether there is a `"weights"` input (a shard's padding).
        feeds_bytes: whether the samples hold image bytes (TFRecord records, `gs://`
            objects), else file paths (`dalipipe.feed.unpack_samples`).
        num_classes: the number of classes, for one-hot labels.
        target_shape: the shape of one sample's float32 targets for `label_mode`
            "raw" and "multi_hot" (they travel in `"samples"` before the path);
            None for class indices.
        cached: whether the decoded-image cache feeds a `"cached"` input: stored
            samples skip the read, the decode and the resize, and two more outputs
            come last, the uint8 HWC images before normalization and the int32 slots
            (`dalipipe.cache`).
        mask_bytes: with `masks`, whether the samples hold the masks' bytes (members
            of tar shards), else their paths (`dalipipe.feed.unpack_pairs`).
    """
    from nvidia.dali import fn, types as dali_types

    def external(name, dali_type, ndim=1):
        if feed is None:
            return fn.external_source(name=name, dtype=dali_type, ndim=ndim, batch=True)
        return fn.external_source(source=feed(name), dtype=dali_type, ndim=ndim, batch=True)

    samples = external("samples", dali_types.UINT8)
    if options.masks is not None:  # images with their masks: no labels
        encoded, mask = unpack_pairs(samples, feeds_bytes=feeds_bytes, mask_bytes=mask_bytes)
        label = None
    else:
        label, encoded = unpack_samples(samples, feeds_bytes=feeds_bytes,
                                        target_shape=target_shape)
    random = external("random", dali_types.FLOAT) if random_columns(options) else None
    draws = unpack_random(random, options)  # {part name: its columns}
    if cached:
        images, mirror, cached_masks, cache_outputs = _cached(
            options, samples, external("cached", dali_types.UINT8), draws, feeds_bytes,
            target_shape)
    else:
        images, mirror = _decode_and_resize(options, encoded, draws.get("crop"))
    recipe = options.recipe
    if recipe is not None:  # after the flip, on the uint8 HWC crop
        images = recipe.apply(draws["recipe"], fn.flip(images, horizontal=mirror),
                              options.image_size)
        mirror = 0
    dtype = {"float32": dali_types.FLOAT, "float16": dali_types.FLOAT16,
             "uint8": dali_types.UINT8}[options.dtype]
    mean, std = normalization_stats(options.normalization, options.channels)
    images = fn.crop_mirror_normalize(
        images,
        mirror=mirror,
        mean=list(mean),
        std=list(std),
        dtype=dali_types.FLOAT if options.mix is not None else dtype,
        output_layout="HWC" if options.data_format == "channels_last" else "CHW",
    )
    outputs = [images]
    if options.masks is not None:
        outputs.append(cached_masks if cached else _masks(options, encoded, mask, draws))
    if options.boxes is not None:  # placed in NumPy (`annotations.placement`), passed through
        outputs.extend(unpack_boxes(random, options))
    if options.label_mode == "categorical":
        outputs.append(fn.one_hot(label, num_classes=num_classes, dtype=dali_types.FLOAT))
    elif options.label_mode == "binary":
        outputs.append(fn.reshape(fn.cast(label, dtype=dali_types.FLOAT), shape=[1]))
    elif options.label_mode is not None:  # "int", "raw", "multi_hot": as they came
        outputs.append(label)
    if options.mix is not None:  # mixed in float32, then cast to `dtype`
        images, labels = options.mix.apply(draws["mix"], images, outputs[1],
                                           device=options.device)
        outputs[:2] = [images if options.dtype == "float32"
                       else fn.cast(images, dtype=dtype), labels]
    weights = external("weights", dali_types.FLOAT, ndim=0) if padded else None
    if padded and options.masks is not None:  # padding: fill-value masks, weighed per pixel
        outputs[1], weights = padded_masks(outputs[1], weights, options)
    if options.class_weight is not None:
        keys, values = class_weight_table(options.class_weight)
        by_class = fn.lookup_table(label, keys=keys, values=values, default_value=1.0,
                                   dtype=dali_types.FLOAT)
        weights = by_class if weights is None else by_class * weights
    if weights is not None:
        outputs.append(weights)
    if options.device == "gpu":
        outputs[1:] = [out.gpu() for out in outputs[1:]]
    if cached:
        outputs += cache_outputs
    return tuple(outputs)


def _cached(options, samples, cached, draws, feeds_bytes, target_shape):
    """`_decode_and_resize` (and `_masks`) with the decoded-image cache
    (`dalipipe.cache`): the images, the flip, the masks (None without `masks`), and
    the cache's outputs `[stored images, original sizes, slots]`.

    A stored sample's image comes from `cached`; the others are read and decoded (in
    the branch, so that a stored sample opens no file) and resized to
    `cache.stored_shape`: `image_size` for the whole-image workloads, whose stored
    image is the output before normalization; with `augment`, a larger square, from
    which the crop window, drawn on the original size, is resized in one step (the
    same window in relative coordinates), for stored and decoded samples alike. With
    `masks`, each mask, resized alike with nearest-neighbour sampling, is stored as
    a last channel of its image.
    """
    import nvidia.dali.math as dmath
    from nvidia.dali import fn, types as dali_types

    name, always_antialias = INTERPOLATION_FILTERS[options.interpolation]
    resize = dict(interp_type=getattr(dali_types, name),
                  antialias=options.antialias or always_antialias)
    side, channels = stored_shape(options)[0], options.channels
    with_masks = options.masks is not None

    def decoded():  # read in the branch: only where not stored
        if with_masks:
            encoded, mask = unpack_pairs(samples, feeds_bytes=feeds_bytes)
        else:
            _, encoded = unpack_samples(samples, feeds_bytes=feeds_bytes,
                                        target_shape=target_shape)
        shape = fn.peek_image_shape(encoded, dtype=dali_types.INT32)
        if options.augment:
            images = fn.resize(decode(options, encoded), size=[side, side], **resize)
        else:
            images = _decode_and_resize(options, encoded, None)[0]
        if with_masks:
            if options.augment:
                masks = fn.resize(_decoded_masks(options, mask), size=[side, side],
                                  **_nearest())
            else:
                masks = _whole_masks(options, encoded, mask)
            images = fn.cat(images, masks, axis=2)
        return images, fn.cat(shape[0:1], shape[1:2])

    stored, sizes, slots = stored_or_decoded(cached, decoded, options)
    images, masks = stored, None
    if with_masks:
        images, masks = stored[:, :, 0:channels], stored[:, :, channels:]
    if not options.augment:
        if with_masks:
            masks = _moved_masks(options, masks)
        return images, 0, masks, [stored, sizes, slots]
    height = fn.cast(sizes[0], dtype=dali_types.FLOAT)
    width = fn.cast(sizes[1], dtype=dali_types.FLOAT)
    (x, y, crop_w, crop_h), mirror = sampling.CROP.apply(draws["crop"], height, width)
    scale_y, scale_x = side / height, side / width
    window = dict(roi_start=fn.stack(y * scale_y, x * scale_x),
                  roi_end=fn.stack(dmath.min(y + crop_h, height) * scale_y,
                                   dmath.min(x + crop_w, width) * scale_x),
                  roi_relative=False)
    if with_masks:
        masks = _moved_masks(options, fn.resize(masks, size=options.image_size, **_nearest(),
                                                **window), mirror, draws)
    images = fn.resize(images, size=options.image_size, **resize, **window)
    return images, mirror, masks, [stored, sizes, slots]


def _decode_and_resize(options, encoded, crop):
    """Decoded images at `image_size`, and the per-sample flip (0 without `augment`);
    `crop` is the crop's columns of the `"random"` input (None without `augment`)."""
    from nvidia.dali import fn, types as dali_types

    name, always_antialias = INTERPOLATION_FILTERS[options.interpolation]
    resize = dict(interp_type=getattr(dali_types, name),
                  antialias=options.antialias or always_antialias)
    if options.augment:
        shape = fn.peek_image_shape(encoded, dtype=dali_types.FLOAT)
        window, mirror = sampling.CROP.apply(crop, shape[0], shape[1])
        return _crop_and_resize(options, encoded, window, resize), mirror
    images = decode(options, encoded)
    if options.pad_to_aspect_ratio:
        return _letterbox(images, encoded, options, resize), 0
    if options.crop_to_aspect_ratio or options.central_fraction < 1:
        resize.update(_central_window(encoded, options))
    return fn.resize(images, size=options.image_size, **resize), 0


def _crop_setup(options):
    """`codecs.ROI_DECODE` or `codecs.FULL_DECODE`, how `_crop_and_resize` decodes."""
    return codecs.crop_setup() if options.device == "gpu" else codecs.ROI_DECODE


def _crop_and_resize(options, encoded, window, resize):
    """The random-resized crop `window` (x, y, width, height in pixels, unrounded) of
    each image, resized to `image_size`.

    On the CPU, and on a GPU whose nvImageCodec accepts a region decode with fancy
    upsampling (nvJPEG 13.2 or newer), only the window is decoded
    (`codecs.ROI_DECODE`). With an older nvJPEG, nvImageCodec refuses that and would
    silently decode on the CPU; there the whole image is decoded on the GPU, still
    with fancy upsampling, and `fn.slice` cuts the window out on the GPU
    (`codecs.FULL_DECODE`). Both round the window's corners to whole pixels the same
    way, and on the CPU the two set-ups give identical pixels. The alternatives
    measured were worse matches of the CPU graph (`benchmarks/crop_decoders.py`,
    docs/gpus.md): `fn.resize` reading the window from the whole image (no copy)
    differs where its filter reaches past the window's edge, and a region decode with
    simple upsampling differs everywhere by as much as the chroma upsampling does.
    The set-up is `_crop_setup(options)`.
    """
    from nvidia.dali import fn

    return fn.resize(decode_crop(options, encoded, window), size=options.image_size, **resize)


def decode_crop(options, encoded, window):
    """The crop `window` (x, y, width, height in pixels) of each image, decoded as the
    graph decodes it on `options.device`: a region decode or a whole decode and
    `fn.slice` (`_crop_setup`; see `_crop_and_resize`). `uint8` HWC."""
    from nvidia.dali import fn

    x, y, width, height = window
    anchor, shape = fn.stack(x, y), fn.stack(width, height)
    if _crop_setup(options) == codecs.ROI_DECODE:
        return decode(options, encoded, dict(anchor=anchor, shape=shape))
    return fn.slice(decode(options, encoded), anchor, shape, axis_names="WH",
                    normalized_anchor=False, normalized_shape=False)


def decode(options, encoded, window=None):
    """Decodes `encoded` (only `window`, x/y anchor and width/height, if given) to
    `options.channels` channels: RGB, grey, or RGBA, `uint8` HWC, with the decoder
    of `options.device` (on a GPU, `gpu_decoder_arguments`)."""
    from nvidia.dali import fn, types as dali_types

    device = gpu_decoder_arguments(options) if options.device == "gpu" else dict(device="cpu")

    def decode(output_type):
        if window is None:
            return fn.decoders.image(encoded, output_type=output_type, **device)
        return fn.decoders.image_slice(
            encoded, window["anchor"], window["shape"], output_type=output_type,
            normalized_anchor=False, normalized_shape=False, axis_names="WH", **device,
        )

    if options.color_mode == "grayscale":
        return decode(dali_types.GRAY)
    if options.color_mode == "rgb":
        return decode(dali_types.RGB)
    # RGBA: DALI's decoders have no RGBA output, so a PNG with an alpha channel
    # (colour type 6) is decoded as it is stored, and any other image as RGB with an
    # opaque alpha (pipelines with this mode run with conditionals enabled).
    if _png_with_alpha(encoded):
        images = decode(dali_types.ANY_DATA)
    else:
        rgb = decode(dali_types.RGB)
        opaque = fn.cast(fn.slice(rgb, on_cpu([0]), on_cpu([1]), axes=[2]) * 0 + 255,
                         dtype=dali_types.UINT8)
        images = fn.cat(rgb, opaque, axis=2)
    return images


def gpu_decoder_arguments(options):
    """The arguments of DALI's `"mixed"` decoders for `options` (the GPU graph's).

    nvJPEG upsamples chroma like libjpeg-turbo only when asked to
    (`jpeg_fancy_upsampling`); the others are those of `options.decoder`
    (`dalipipe.decoder_settings`), DALI's defaults for those it does not set. They
    apply only to the mixed backend, so the CPU decoder takes none of them.
    """
    return dict(device="mixed", jpeg_fancy_upsampling=True, **(options.decoder or {}))


def _png_with_alpha(encoded):
    """Per sample: whether `encoded` is a PNG of colour type 6 (RGBA)."""
    from nvidia.dali import fn

    def byte(i):
        found = fn.slice(encoded, on_cpu([i]), on_cpu([1]), axes=[0], out_of_bounds_policy="pad")
        return fn.reshape(found, shape=[])

    return (byte(0) == 0x89) & (byte(25) == 6)


def _letterbox(images, encoded, options, resize, fill_value=0, dtype=None):
    """`pad_to_aspect_ratio`: the whole image resized to fit `image_size`, centered and
    padded with `fill_value` (cast to `dtype` first, if given), with the sizes and
    offsets of `tf.image.resize_with_pad`."""
    import nvidia.dali.math as dmath
    from nvidia.dali import fn, types as dali_types

    height, width = options.image_size
    shape = fn.peek_image_shape(encoded, dtype=dali_types.FLOAT)
    ratio = dmath.max(shape[1] / width, shape[0] / height)
    fit_h, fit_w = shape[0] / ratio, shape[1] / ratio
    images = fn.resize(images, size=fn.stack(dmath.floor(fit_h), dmath.floor(fit_w)), **resize)
    top, left = dmath.floor((height - fit_h) / 2), dmath.floor((width - fit_w) / 2)
    if dtype is not None:
        images = fn.cast(images, dtype=dtype)
    return fn.slice(images, fn.stack(0 - top, 0 - left), on_cpu([float(height), float(width)]),
                    axes=[0, 1], normalized_anchor=False, normalized_shape=False,
                    out_of_bounds_policy="pad", fill_values=fill_value)


def on_cpu(values):
    """`values` (a list) as a constant node on the CPU, for an input that an operator
    reads on the host, such as `fn.slice`'s anchor and shape. Given as a Python list,
    DALI places it on the device of the operator's data: in a GPU graph on the GPU,
    and the operator then copies it back and synchronizes every batch."""
    from nvidia.dali import types as dali_types

    return dali_types.Constant(values, device="cpu")


def _central_window(encoded, options):
    """`fn.resize` arguments that resize only the central window, in one step.

    The window has the output's aspect ratio when `crop_to_aspect_ratio` (the largest
    such window), else the whole image, scaled by `central_fraction` about the center.
    Exact in continuous coordinates: no size or offset is rounded to whole pixels.
    """
    import nvidia.dali.math as dmath
    from nvidia.dali import fn, types as dali_types

    shape = fn.peek_image_shape(encoded, dtype=dali_types.FLOAT)
    image_h, image_w = shape[0], shape[1]
    window_h, window_w = image_h, image_w
    if options.crop_to_aspect_ratio:
        height, width = options.image_size
        aspect = width / height
        window_w = dmath.min(image_w, image_h * aspect)
        window_h = dmath.min(image_h, image_w / aspect)
    fraction = options.central_fraction
    window_h, window_w = window_h * fraction, window_w * fraction
    top, left = (image_h - window_h) / 2, (image_w - window_w) / 2
    return {
        "roi_start": fn.stack(top, left),
        "roi_end": fn.stack(top + window_h, left + window_w),
        "roi_relative": False,
    }


def _masks(options, encoded, mask, draws):
    """The masks of `masks=`, moved exactly as `_decode_and_resize` and the recipe
    move their images.

    Each mask (an 8-bit greyscale PNG of class ids, `dalipipe.annotations.inputs`)
    is decoded as one channel on the CPU (only the crop window, with `augment`: the
    window and flip of the same `"random"` columns, on the image's shape), moved to
    the GPU in a GPU graph, and resized with nearest-neighbour sampling without
    antialiasing, so that it holds only ids of the source; the central window of
    `crop_to_aspect_ratio` and `central_fraction` is the image's, and the padding of
    `pad_to_aspect_ratio` is `mask_fill_value`. A recipe's geometric operations
    then move it with the image's draws (`draws["recipe"]`), filling with
    `mask_fill_value` (`recipes.RandAugment.apply_to_masks`).

    Returns:
        int32 masks, `(height, width, 1)` (`"channels_last"`) or `(1, height, width)`.
    """
    from nvidia.dali import fn, types as dali_types

    if options.augment:
        shape = fn.peek_image_shape(encoded, dtype=dali_types.FLOAT)
        window, mirror = sampling.CROP.apply(draws["crop"], shape[0], shape[1])
        masks = fn.resize(_decoded_masks(options, mask, window), size=options.image_size,
                          **_nearest())
        return _moved_masks(options, masks, mirror, draws)
    return _moved_masks(options, _whole_masks(options, encoded, mask, dali_types.INT32))


def _nearest():
    """`fn.resize`'s arguments for masks: nearest-neighbour sampling, no antialiasing
    (ids only)."""
    from nvidia.dali import types as dali_types

    return dict(interp_type=dali_types.INTERP_NN, antialias=False)


def _decoded_masks(options, mask, window=None):
    """The masks' bytes `mask` decoded as one channel on the CPU (only `window`, x, y,
    width and height in pixels, if given), then moved to the graph's device."""
    from nvidia.dali import fn, types as dali_types

    if window is None:
        masks = fn.decoders.image(mask, output_type=dali_types.GRAY, device="cpu")
    else:
        x, y, width, height = window
        masks = fn.decoders.image_slice(
            mask, fn.stack(x, y), fn.stack(width, height), output_type=dali_types.GRAY,
            normalized_anchor=False, normalized_shape=False, axis_names="WH", device="cpu")
    return masks.gpu() if options.device == "gpu" else masks


def _whole_masks(options, encoded, mask, dtype=None):
    """The whole-image workloads' masks at `image_size`: stretched, in the image's
    central window, or letterboxed with `mask_fill_value` (cast to `dtype` first, if
    given); uint8 without `dtype`."""
    from nvidia.dali import fn

    nearest = _nearest()
    if options.pad_to_aspect_ratio:
        return _letterbox(_decoded_masks(options, mask), encoded, options, nearest,
                          fill_value=options.mask_fill_value, dtype=dtype)
    if options.crop_to_aspect_ratio or options.central_fraction < 1:
        nearest.update(_central_window(encoded, options))
    return fn.resize(_decoded_masks(options, mask), size=options.image_size, **nearest)


def _moved_masks(options, masks, mirror=None, draws=None):
    """Masks at `image_size` flipped with `mirror` and moved by the recipe (with
    `augment`), as int32 in the output's layout."""
    from nvidia.dali import fn, types as dali_types

    if mirror is not None:
        masks = fn.flip(masks, horizontal=mirror)
        if options.recipe is not None:
            masks = options.recipe.apply_to_masks(draws["recipe"], masks, options.image_size,
                                                  options.mask_fill_value)
    masks = fn.cast(masks, dtype=dali_types.INT32)
    if options.data_format == "channels_first":
        masks = fn.transpose(masks, perm=[2, 0, 1])
    return masks


def padded_masks(masks, weights, options):
    """A shard's masks and their sample weights, per pixel.

    Args:
        masks: the int32 masks node, `(height, width, 1)` or `(1, height, width)`
            per sample, on the graph's device.
        weights: the `"weights"` input's node, float32 `()` per sample on the CPU:
            1 for a real sample, 0 for padding.
        options: resolved `Options` (`mask_fill_value`, `image_size`, `device`).

    Returns:
        `(masks, weights)`: the masks, all `mask_fill_value` for padding; float32
        `(height, width)` weights, the sample's weight at every pixel, the shape of
        the per-pixel loss of a segmentation model (Keras's losses and `MeanIoU`
        take it; a `(batch,)` weight does not broadcast against `(batch, height,
        width)`).
    """
    from nvidia.dali import fn, types

    if options.device == "gpu":
        weights = weights.gpu()
    keep = fn.cast(weights > 0, dtype=types.INT32)
    masks = masks * keep + int(options.mask_fill_value) * (1 - keep)
    per_pixel = fn.cast(masks * 0, dtype=types.FLOAT) + weights
    return masks, fn.reshape(per_pixel, shape=list(options.image_size))
