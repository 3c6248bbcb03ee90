"""TFRecord files of `tf.train.Example` images (the ImageNet layout), read without
TensorFlow.

dalipipe reads each record by its place in the file, so that records are shuffled
over all shards each epoch and sharded exactly like image files. The places come
from index files in the format of DALI's `tfrecord2idx` (one `offset size` line per
record), made when missing or out of date. Records are read with `os.pread`, their
checksums verified with `google-crc32c`, and parsed with `protobuf`. Writing
(`write_tfrecords`) uses the same message classes: no TensorFlow is needed. protobuf
and google-crc32c are imported at their first use, so `import dalipipe` needs
neither.

Every record that `read_example` and `scan` read has both checksums verified; `scan`
parses each record once and keeps where its image lies and a CRC-32C of its bytes.
`load_encoded` checks that CRC-32C of each record it reads (the same record, unchanged
since `scan` verified it) and slices the image out; it verifies both checksums of and
parses any other record. Making an index reads the record headers only, and verifies
their length checksums.

One job per module:
- `format`: feature names, the framing of a record, its checksums, the
  `tf.train.Example` message class;
- `files`: which sources are TFRecord files (`is_tfrecord`, `tfrecord_files`);
- `paths`: where indexes and the scan cache go, and writing files whole;
- `idx_files`: index files (`write_index`, `read_index`, `ensure_indexes`);
- `read`: reading and parsing records (`read_example`, `parse_example`,
  `load_encoded`);
- `scanning`: the records, labels and class texts of files (`Records`, `scan`);
- `write`: writing image files as TFRecord files (`write_tfrecords`).
"""

from dalipipe.tfrecord.format import (
    ENCODED, FILENAME, LABEL, TEXT, example_class, masked_crc32c,
)
from dalipipe.tfrecord.files import is_tfrecord, tfrecord_files
from dalipipe.tfrecord.paths import index_path_for
from dalipipe.tfrecord.idx_files import ensure_indexes, read_index, write_index
from dalipipe.tfrecord.read import load_encoded, parse_example, read_example
from dalipipe.tfrecord.scanning import Records, scan
from dalipipe.tfrecord.write import check_write_args, write_tfrecords

__all__ = [
    "ENCODED", "FILENAME", "LABEL", "TEXT", "Records", "check_write_args", "ensure_indexes",
    "example_class", "index_path_for", "is_tfrecord", "load_encoded", "masked_crc32c",
    "parse_example", "read_example", "read_index", "scan", "tfrecord_files", "write_index",
    "write_tfrecords",
]
