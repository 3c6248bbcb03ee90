"""Pre-flight checks of image files, before a DALI pipeline starts.

DALI cannot skip a file it fails to decode: one bad JPEG stops training, and its
message ("Failed to decode sample #5") does not name the file. So every file of a
source is checked first, by content, not by extension, with the decoder DALI uses:
- it exists, is a regular file (a broken symbolic link is reported as such), is not
  empty and can be read;
- its first bytes are a format DALI decodes (JPEG, PNG, BMP, TIFF, WebP, JPEG 2000,
  PNM); GIF and anything else are reported;
- its structure is sound: a JPEG's headers end before the file does (a JPEG without
  an end-of-image marker must decode in full, and is reported as truncated if it
  does not); a PNG's chunks, with their checksums, run up to IEND, and its image
  data inflates to the rows its header implies, each with a valid filter byte;
- DALI's decoder accepts it. DALI decodes with nvImageCodec, and so does the check,
  with the same extensions (libjpeg-turbo, libpng, libtiff, libwebp, OpenJPEG, ...),
  on the CPU. `check="structure"` decodes as much of each image as finds every file
  DALI's decoder rejects, per format (`structure.FORMAT_TESTS`): the top-left pixel
  of each JPEG, BMP and PNM image (for JPEG that runs the decoder's whole set-up:
  every marker and table up to the image data, and for progressive and multi-scan
  JPEGs every scan), the header of a PNG whose data the structure rules inflated,
  and the whole of each TIFF, WebP and JPEG 2000 image (and of a PNG of an unusual
  layout). What it does not see is damage inside the image data of a single-scan
  JPEG, which the decoder decodes through (libjpeg warns), short of truncation.
  JPEG 2000 and TIFF images are decoded in a child interpreter: a JPEG 2000 file
  that crashes the decoder is reported, and TIFF is decoded by libtiff alone, as in
  DALI.
  `check="full"` decodes every image in full, on the GPU for a GPU pipeline (with
  the decoders DALI's GPU decoder uses), else on the CPU.

Where nvImageCodec is not installed, the check decodes with PIL where it would
decode in full (with a warning: PIL accepts some files that DALI's decoder rejects),
and is the structure rules alone where it would decode less.

Each file or record checked gives a `Verdict` (`verdicts`): its path, the reason it
is bad (None for a sound image), its width and height as the decoder read its header
(from which a GPU pipeline's preallocation hints default), and its stamp when
checked (`(size, mtime_ns)`, for `verify_unchanged`). `apply_policy` makes the index
to train on from them. Files, local or in S3 or GCS, are read through
`dalipipe.storage.fetch` (objects whole, in parallel, with their stamp `(size, a hash
of the ETag)`).

The verdicts are cached in SQLite, keyed on path and stamp, so a second check of the
same files reads only their metadata. The cache lives in
`dalipipe.utils.cache_dir()` (`$DALIPIPE_CACHE_DIR`, else `$XDG_CACHE_HOME/dalipipe`, else
`~/.cache/dalipipe`), in `checks.sqlite`; where it cannot be written (or
`DALIPIPE_NO_CACHE=1`), the check runs uncached. Processes that check the same files
on one cache share the work by claiming chunks of it (see `cache`).

One job per module: `structure` (the format by its first bytes, the JPEG and PNG
rules, the decoder test per format), `decoder` (nvImageCodec's verdicts), `verdicts`
(the record of a result), `cache` (the SQLite cache), `driver` (the entry points, and
the cached loop over files and records) and `policy` (what happens to the bad files).
"""

from dalipipe.checks.decoder import decoder_name
from dalipipe.checks.driver import (check_bytes, check_file, check_files, check_index,
                                    check_paths, check_records)
from dalipipe.checks.policy import apply_policy, verify_unchanged, write_report
from dalipipe.checks.verdicts import Verdict, bad_files, image_sizes

__all__ = [
    "Verdict",
    "apply_policy",
    "bad_files",
    "check_bytes",
    "check_file",
    "check_files",
    "check_index",
    "check_paths",
    "check_records",
    "decoder_name",
    "image_sizes",
    "verify_unchanged",
    "write_report",
]
