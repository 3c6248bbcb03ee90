"""Masks and boxes for dense tasks (segmentation, detection): their sources, their
checks and sample data. Pure Python and NumPy (PIL reads masks and image headers):
nothing here imports DALI, TensorFlow or Keras.

- `masks`: image and mask files paired by file stem or by a table's column; a mask's
  class ids read exactly (a palette PNG's pixels are its indices).
- `boxes`: a table with one row per box; box formats as Keras names them
  (`convert_format`, `formats`); padding to `max_boxes` as
  `keras.layers.MaxNumBoundingBoxes` pads.
- `coco`: a COCO `instances` JSON's boxes, read as strictly as pycocotools reads it.
- `checks`: what is wrong with a pair (image, mask) or an image's boxes, as
  `dalipipe.checks.verdicts.Verdict` records.
- `sample`: shapes drawn over pictures, whose pixels define masks and boxes.

- `members`: masks and boxes from WebDataset tar shards, companions of each
  sample's image member named by their extension (`masks=".seg.png"`,
  `boxes=".json"`).
- `inputs`: the masks of `make_dali_pipeline(..., masks=)`: a source's pairs,
  checked, as the 8-bit greyscale PNGs that the DALI graph reads; and the boxes of
  `boxes=`, checked, with each image's size.
- `placement`: each sample's boxes moved as the graph moves its image (crop, flip,
  resize, padding, a recipe's map), dropped by `min_box_visibility`, in
  `bounding_box_format`.
- `settings`: the dense-task options checked (`masks`, `boxes`, `box_crop`,
  `output`...), for `dalipipe.options`.
- `elements`: the graph's flat outputs as Keras's elements (`(images, {"boxes",
  "labels"})`, `output="dict"`).
"""
