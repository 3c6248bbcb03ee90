"""KerasHub's models fed by `make_dali_dataset`, built from config with random
weights (no downloads), tiny: a `RetinaNetObjectDetector` on boxes, a
`DFineObjectDetector` on the same boxes and a `DeepLabV3ImageSegmenter` on masks,
each fit for 2 steps and predicting (the D-FINE on `DFINE_PREDICTS` only), with
`preprocessor=None` (the data are already resized).

Run in pytest's process on TensorFlow with format "tf" (`test_kerashub.py`), and by
`backend_job.py`'s MODE `kerashub` on torch and JAX with format "grain": the
formats KerasHub's `PipelineModel.fit` passes on (docs/dense.md). On JAX the D-FINE
fits, and does not predict: its `predict` compiles for about a minute on a 2-core
CPU, and what it reads of the dataset is what its fit read (the RetinaNet's and the
DeepLabV3's `predict` run on JAX too).
"""

import math
import os
import tempfile

import keras

import dalipipe
from dalipipe.sample_data import make_dense_sample_dataset

SIZE = (64, 64)
# The backends on which the D-FINE predicts too (not JAX: see above).
DFINE_PREDICTS = ("tensorflow", "torch")
COMMON = dict(image_size=SIZE, batch_size=4, device="cpu", verbose=False, drop_remainder=True,
              normalization="unit", seed=0)


def tiny_resnet():
    import keras_hub

    # KerasHub's ResNet needs 64 filters in its first stack.
    return keras_hub.models.ResNetBackbone(
        input_conv_filters=[64], input_conv_kernel_sizes=[3], stackwise_num_filters=[64, 16, 16],
        stackwise_num_blocks=[1, 1, 1], stackwise_num_strides=[1, 2, 2],
        block_type="basic_block", image_shape=(*SIZE, 3))


def retinanet(folder, format):
    """A RetinaNet reading `"yxyx"` boxes: the losses of 2 steps and the shapes of
    `predict`'s outputs."""
    import keras_hub

    train = dalipipe.make_dali_dataset(
        os.path.join(folder, "images"), boxes=os.path.join(folder, "instances.json"),
        bounding_box_format="yxyx", max_boxes=4, format=format, **COMMON)
    backbone = keras_hub.models.RetinaNetBackbone(
        image_encoder=tiny_resnet(), min_level=3, max_level=4, use_p5=False,
        image_shape=(*SIZE, 3))
    model = keras_hub.models.RetinaNetObjectDetector(
        backbone=backbone, num_classes=len(train.class_names), bounding_box_format="yxyx",
        pre_logits_num_conv_layers=1, preprocessor=None)
    model.compile(optimizer="sgd")
    losses = model.fit(train, epochs=1, steps_per_epoch=2, verbose=0).history["loss"]
    predicted = model.predict(train, verbose=0)
    return {"losses": losses, "shapes": {k: list(v.shape) for k, v in predicted.items()}}


def dfine(folder, format):
    """A D-FINE trained on `"rel_center_xywh"` boxes, the format its loss reads
    whatever its `bounding_box_format` (which its predictions follow): the losses of
    2 steps and the shapes of `predict`'s outputs (None off `DFINE_PREDICTS`)."""
    import keras_hub

    train = dalipipe.make_dali_dataset(
        os.path.join(folder, "images"), boxes=os.path.join(folder, "instances.json"),
        bounding_box_format="rel_center_xywh", max_boxes=4, format=format, **COMMON)
    encoder = keras_hub.models.HGNetV2Backbone(
        stem_channels=[3, 8, 8],
        stackwise_stage_filters=[[8, 8, 16, 1, 1, 3], [16, 8, 32, 1, 1, 3],
                                 [32, 16, 64, 1, 1, 3]],
        apply_downsample=[False, True, True], use_lightweight_conv_block=[False, False, True],
        depths=[1, 1, 1], hidden_sizes=[16, 32, 64], embedding_size=8,
        use_learnable_affine_block=False, hidden_act="relu", image_shape=(*SIZE, 3),
        out_features=["stage2", "stage3"])
    backbone = keras_hub.models.DFineBackbone(
        backbone=encoder, decoder_in_channels=[16, 16], encoder_hidden_dim=16,
        num_denoising=0, num_labels=len(train.class_names), hidden_dim=16,
        learn_initial_query=False, num_queries=10, anchor_image_size=SIZE, feat_strides=[8, 16],
        num_feature_levels=2, encoder_in_channels=[32, 64], encode_proj_layers=[1],
        num_attention_heads=2, encoder_ffn_dim=16, num_encoder_layers=1, hidden_expansion=0.34,
        depth_multiplier=0.5, eval_idx=-1, num_decoder_layers=1, decoder_attention_heads=2,
        decoder_ffn_dim=16, decoder_n_points=[2, 2], lqe_hidden_dim=8, num_lqe_layers=1,
        out_features=["stage2", "stage3"], image_shape=(*SIZE, 3), seed=0)
    model = keras_hub.models.DFineObjectDetector(
        backbone=backbone, num_classes=len(train.class_names), bounding_box_format="yxyx",
        preprocessor=None)
    model.compile(optimizer="sgd")
    losses = model.fit(train, epochs=1, steps_per_epoch=2, verbose=0).history["loss"]
    if keras.backend.backend() not in DFINE_PREDICTS:
        return {"losses": losses, "shapes": None}
    predicted = model.predict(train, verbose=0)
    return {"losses": losses, "shapes": {k: list(v.shape) for k, v in predicted.items()}}


def deeplab(folder, format):
    """A DeepLabV3 on the masks: the losses of 2 steps and `predict`'s shape."""
    import keras_hub

    train = dalipipe.make_dali_dataset(
        os.path.join(folder, "images"), masks=os.path.join(folder, "masks"), format=format,
        **COMMON)
    backbone = keras_hub.models.DeepLabV3Backbone(
        image_encoder=tiny_resnet(), low_level_feature_key="P2",
        spatial_pyramid_pooling_key="P4", upsampling_size=4, dilation_rates=[2, 4])
    model = keras_hub.models.DeepLabV3ImageSegmenter(backbone=backbone, num_classes=4,
                                                     preprocessor=None)
    # KerasHub's "auto" loss is CategoricalCrossentropy, for one-hot masks: these are ids.
    model.compile(optimizer="sgd",
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=[keras.metrics.MeanIoU(num_classes=4, sparse_y_pred=False)])
    losses = model.fit(train, epochs=1, steps_per_epoch=2, verbose=0).history["loss"]
    return {"losses": losses, "shape": list(model.predict(train, verbose=0).shape)}


def kerashub_fits(format):
    """The three models on 8 sample images with masks and boxes."""
    keras.utils.set_random_seed(0)
    models = {"retinanet": retinanet, "dfine": dfine, "deeplab": deeplab}
    with tempfile.TemporaryDirectory() as folder:
        make_dense_sample_dataset(folder, num_images=8, seed=0, crop_width=(48, 64))
        found = {name: fit(folder, format) for name, fit in models.items()}
    found["finite"] = all(math.isfinite(v) for name in models for v in found[name]["losses"])
    return found
