"""Sources of byte ranges: samples that are byte ranges of larger files (shards),
TFRecord records (`dalipipe.tfrecord`) and the members of WebDataset tar shards
(`ranges.tar`), local or in object storage.

One owner per job, for both kinds:
- `cache`: what was found in a shard (a tar index, TFRecord labels), cached per
  shard in dalipipe's cache folder, never beside the shard;
- `read`: the reader of ranges (`read_ranges`: `os.pread` locally, large ranged
  GETs of objects);
- `samples`: `load_encoded`, each sample's encoded image, of either kind;
- `order`: the order of an epoch that reads objects in large ranges (shards in a
  new order per epoch, samples mixed in a seeded buffer; with several replicas, a
  run of the stream each);
- `tar`: which sources are tar shards, their index, labels and members;
- `write`: writing images as WebDataset tar shards.

The modules are imported by name (`from dalipipe.ranges import tar`): this package
imports nothing, so `dalipipe.tfrecord` can use `ranges.cache` and `ranges.read`.
"""
