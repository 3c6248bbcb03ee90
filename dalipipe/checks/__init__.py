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
  does not); a PNG's chunks, with their checksums, run up to IEND; a WebP is as long
  as its RIFF header says;
- DALI's decoder accepts it. DALI decodes with nvImageCodec, and so does the check,
  with the same extensions (libjpeg-turbo, libtiff, OpenCV, ...), on the CPU.
  `check="structure"` has the decoder read every header, and decode the top-left
  pixel of each JPEG, TIFF, BMP and PNM image: that runs the JPEG decoder's whole
  set-up (every marker and table up to the image data, and for progressive and
  multi-scan JPEGs every scan), at a small fraction of a full decode. What it does
  not see is damage inside the image data of a single-scan JPEG, which the decoder
  decodes through (libjpeg warns), short of truncation. PNG, WebP and JPEG 2000
  images cost nearly a full decode for any region, so for them the decoder reads
  the header only.
  `check="full"` decodes every image in full, on the GPU for a GPU pipeline (with
  the decoders DALI's GPU decoder uses), else on the CPU.

Where nvImageCodec is not installed, the check decodes with PIL where it would
decode in full (with a warning: PIL accepts some files that DALI's decoder rejects),
and `"structure"` is the structure rules.

Results are cached in SQLite, keyed on path, size and modification time, so a second
check of the same files reads only their metadata. Objects in S3 or GCS are read
whole, in parallel, and keyed on their URI, size and ETag (`dalipipe.storage.fetch`). The cache lives in
`dalipipe.utils.cache_dir()` (`$DALIPIPE_CACHE_DIR`, else `$XDG_CACHE_HOME/dalipipe`, else
`~/.cache/dalipipe`), in `checks.sqlite`; where it cannot be written (or
`DALIPIPE_NO_CACHE=1`), the check runs uncached. Processes that check the same files
on one cache share the work by claiming chunks of it (see `cache`).

One job per module: `structure` (the format by its first bytes, the JPEG, PNG and
WebP rules), `decoder` (nvImageCodec's verdicts), `cache` (the SQLite cache),
`driver` (the entry points, and the cached loop over files and records) and
`policy` (what happens to the bad files).
"""

from dalipipe.checks.decoder import decoder_name
from dalipipe.checks.driver import (check_bytes, check_file, check_files, check_index,
                                    check_records)
from dalipipe.checks.policy import apply_policy, verify_unchanged, write_report

__all__ = [
    "apply_policy",
    "check_bytes",
    "check_file",
    "check_files",
    "check_index",
    "check_records",
    "decoder_name",
    "verify_unchanged",
    "write_report",
]
