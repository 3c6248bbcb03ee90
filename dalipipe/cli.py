"""The `dalipipe` command line: `dalipipe sample-data DIR`, `dalipipe demo`,
`dalipipe check SOURCE`, `dalipipe convert SOURCE OUT_DIR --shards N`, `dalipipe bench`,
`dalipipe doctor`, `dalipipe install-plugin`.

A user's mistake (a missing folder, a wrong option value, a folder in use) is one line
on stderr, `dalipipe <command>: error: ...`, and the exit status 2, as argparse gives
for a wrong option; bad images found by `check` or `convert` give the exit status 1.
Nothing is written into a folder of the user's, or over a file of theirs, unless
`--force` is given.

Above 400 lines: the parser, whose every option has its help text, and a short handler
per subcommand; the work itself is in the modules they call.
"""

import argparse
import collections
import functools
import glob
import os
import re
import sys
import time
import warnings

from dalipipe.keras_config import keras_backend
from dalipipe.utils import captured_stderr


def main(argv=None):
    """Runs `dalipipe` with `argv` (default: `sys.argv[1:]`); returns the exit status."""
    args = build_parser().parse_args(argv)
    if hasattr(args, "verbose") and not args.verbose:
        _hide_start_up_lines()
    try:
        with warnings.catch_warnings():
            warnings.showwarning = functools.partial(_show_warning, args.command)
            return args.func(args)
    except USER_ERRORS as e:
        if getattr(args, "verbose", False):
            raise
        print(f"dalipipe {args.command}: error: {_user_message(e)}", file=sys.stderr)
        return 2


# `dalipipe --help`'s text above the commands (the module's docstring is for developers).
DESCRIPTION = (
    "Tools around make_dali_dataset: sample data, a demo, a check of every image of a "
    "source before training, conversion to TFRecord files, a benchmark against other "
    "loaders, and a report on the installation. `dalipipe COMMAND --help` describes each. "
    "A mistake (a missing folder, a wrong option value) is one line on stderr and the "
    "exit status 2; bad images found by check or convert give the exit status 1. "
    "Nothing is written into a folder of yours, or over a file of yours, unless --force "
    "is given."
)
# What a user's mistake raises: reported in one line, with the exit status 2.
USER_ERRORS = (ValueError, FileNotFoundError, FileExistsError, NotADirectoryError,
               IsADirectoryError, PermissionError, ImportError)
# The library's argument names that the commands' options stand for.
OPTION_NAMES = {"source": "SOURCE", "num_shards": "--shards", "path_column": "--path-column",
                "labels": "--labels", "masks": "--masks", "boxes": "--boxes",
                "on_bad_file": "--on-bad-file", "num_images": "--num-images",
                "num_classes": "--num-classes", "force": "--force"}


def _show_warning(command, message, category, filename, lineno, file=None, line=None):
    """Prints a warning as one line, `dalipipe <command>: warning: ...` (a user
    warning) or with its category, without the source line it was raised at."""
    kind = "warning" if category is UserWarning else category.__name__
    print(f"dalipipe {command}: {kind}: {message}", file=file or sys.stderr)


def _user_message(error):
    """`error`'s text, naming the command's options where it names the library's
    arguments (`num_shards` -> `--shards`)."""
    from dalipipe.sample_data import FolderInUseError

    if isinstance(error, FolderInUseError):
        return error.message("--force")
    text = str(error)
    for name, option in OPTION_NAMES.items():
        text = re.sub(rf"(?<![\w-])(`?){name}(`|=)", rf"\g<1>{option}\g<2>", text)
    return text


def build_parser():
    """The `dalipipe` argument parser: a subcommand each, its function in `func`."""
    from dalipipe import __version__

    parser = argparse.ArgumentParser(prog="dalipipe", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    # Commands that load TensorFlow hide its start-up lines unless --verbose.
    loud = argparse.ArgumentParser(add_help=False)
    loud.add_argument("--verbose", action="store_true",
                      help="show TensorFlow's and DALI's own start-up and log lines, and "
                           "an error's traceback")

    sample = commands.add_parser(
        "sample-data", help="write a labeled JPEG dataset cut from shipped photographs"
    )
    sample.add_argument("directory",
                        help="folder for the class folders and labels.csv: absent, empty, or "
                             "one that dalipipe made (unless --force)")
    sample.add_argument("--num-images", type=int, default=5000,
                        help="JPEG images to write (default: %(default)s)")
    sample.add_argument("--num-classes", type=int, default=10,
                        help="classes, one photograph each (default: %(default)s)")
    sample.add_argument("--seed", type=int, default=0,
                        help="seed of the crops (default: %(default)s)")
    sample.add_argument("--force", action="store_true",
                        help="write into a folder that dalipipe did not make, over its files "
                             "of the same names (labels.csv included)")
    sample.add_argument("--masks-and-boxes", action="store_true",
                        help="write PNG images with shapes drawn over them, their "
                             "segmentation masks (masks/) and detection boxes "
                             "(instances.json, boxes.csv) instead of class folders")
    sample.set_defaults(func=_sample_data)

    demo = commands.add_parser(
        "demo", parents=[loud],
        help="make sample data and train a small Keras model from it through DALI",
    )
    demo.add_argument("--directory", default="data/sample",
                      help="folder for the sample images: absent, empty, or one that dalipipe "
                           "made, which is reused (default: %(default)s)")
    demo.add_argument("--force", action="store_true",
                      help="write the sample images into a folder that dalipipe did not make")
    demo.add_argument("--num-images", type=int, default=600,
                      help="sample images to make (default: %(default)s)")
    demo.add_argument("--num-classes", type=int, default=4,
                      help="classes of the sample images (default: %(default)s)")
    demo.add_argument("--epochs", type=int, default=6,
                      help="training epochs (default: %(default)s)")
    demo.add_argument("--batch-size", type=int, default=32,
                      help="images per batch (default: %(default)s)")
    demo.add_argument("--image-size", type=int, default=96,
                      help="side of the square images the model sees, in pixels "
                           "(default: %(default)s)")
    demo.add_argument("--device", default="auto", choices=("auto", "gpu", "cpu"),
                      help="where DALI decodes: auto picks the GPU when TensorFlow and DALI "
                           "both see one (default: %(default)s)")
    demo.set_defaults(func=_demo)

    bench = commands.add_parser(
        "bench", parents=[loud],
        help="compare dalipipe with the CPU loaders Keras users run instead",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="The tutorial pipeline (image_dataset_from_directory, then\n"
               ".cache().shuffle(1000).prefetch(AUTOTUNE)) against dalipipe's decoded-image\n"
               "cache, creation plus 5 epochs (each result's total_s):\n\n"
               "  dalipipe bench --workload stretch --runs 4 --rounds 3 --loaders \\\n"
               "    keras_tutorial,dalipipe_cpu_no_antialias,dalipipe_cache_memory,"
               "dalipipe_cache_folder",
    )
    bench.add_argument("--data", default=None,
                       help="image folder: one of the user's is read as it is (its class "
                            "folders), and nothing is written into it; one that is absent, "
                            "empty or made by dalipipe gets sample images "
                            "(default: data/bench, with --quick data/bench-quick)")
    bench.add_argument("--num-images", type=int, default=5000,
                       help="sample images to make in a --data folder that is absent, empty "
                            "or made by dalipipe (default: %(default)s)")
    bench.add_argument("--out", default="benchmarks/results/latest",
                       help="folder for results.json, results.md and chart.png "
                            "(default: %(default)s)")
    bench.add_argument("--loaders", default=None,
                       help="comma-separated subset of the loaders (default: those of each "
                            "workload)")
    bench.add_argument("--workload", default=None,
                       choices=("train", "eval", "stretch", "randaugment", "segmentation",
                                "all"),
                       help="stretch: the whole image to 224x224, image_dataset_from_directory's "
                            "default; randaugment: train, then RandAugment(2, 9); "
                            "segmentation: images with masks, 160x160, crop and flip; all: "
                            "the four image-level workloads (default: all; with --quick, "
                            "stretch)")
    bench.add_argument("--batch-size", type=int, default=64,
                       help="images per batch (default: %(default)s; with --quick, at most 16)")
    bench.add_argument("--runs", type=int, default=3,
                       help="timed epochs after the warm-up epoch; each result's total_s "
                            "is creation plus all the epochs, 5 with --runs 4 "
                            "(default: %(default)s)")
    bench.add_argument("--rounds", type=int, default=1,
                       help="rounds of every loader in turn, their order rotated each "
                            "round; the tables show each loader's median round "
                            "(default: %(default)s)")
    bench.add_argument("--train-steps", type=int, default=30,
                       help="steps of a small Keras model fed by each loader on the train "
                            "workload, for its input efficiency; 0 for none "
                            "(default: %(default)s)")
    bench.add_argument("--threads", type=int, default=None,
                       help="threads or workers per loader (default: every usable core)")
    bench.add_argument("--quick", action="store_true",
                       help="a smoke run, about two minutes on two cores: 64 images in "
                            "batches of at most 16, the stretch workload, each loader once "
                            "(a warm-up and one timed epoch; with several workloads, a "
                            "loader's run in turn in one "
                            "process), to see that every loader runs; its figures are too "
                            "small to compare loaders")
    bench.set_defaults(func=_bench)

    check = commands.add_parser(
        "check", help="check every image of a source before training; exit 1 if any is bad"
    )
    check.add_argument("source",
                       help="a directory of class folders (the images make_dali_dataset reads: "
                            "those in its class folders, or, without subfolders, its own), a "
                            "CSV file, TFRecord files (a glob pattern), or tar shards (a "
                            "brace or glob pattern)")
    check.add_argument("--path-column", default="path",
                       help="a CSV's column of image paths (default: %(default)s)")
    check.add_argument("--full", action="store_true", help="also decode every image")
    dense = check.add_mutually_exclusive_group()
    dense.add_argument("--masks", default=None,
                       help="also check each image's segmentation mask, as "
                            "make_dali_dataset(masks=MASKS) does: a folder of masks matched "
                            "to a flat SOURCE folder's images by file stem, a CSV "
                            "SOURCE's column of mask paths, or, for tar shards, the "
                            "extension of each sample's mask member (.seg.png); a mask is "
                            "bad where DALI's decoder rejects it (as for images, with --full "
                            "too), it is not one channel of class ids, or its size is not "
                            "its image's")
    dense.add_argument("--boxes", default=None,
                       help="also check each image's boxes, as "
                            "make_dali_dataset(boxes=BOXES) does: a COCO JSON or a CSV "
                            "table of boxes for a flat SOURCE folder, or, for tar shards, "
                            "the extension of each sample's boxes member (.json); boxes are "
                            "bad where the member is not JSON or does not fit the schema "
                            "(docs/shards.md), or a box lies outside its image")
    check.set_defaults(func=_check)

    convert = commands.add_parser(
        "convert", parents=[loud],
        help="check the images of a source, then write them into ImageNet-style TFRecord "
             "files with their indexes, or WebDataset tar shards (--format webdataset); "
             "exit 1 if any image is bad",
    )
    convert.add_argument("source", help="a directory of class folders or a CSV file; with "
                                        "--masks or --boxes, a flat folder of images")
    convert.add_argument("out_dir", help="folder for the TFRecord files (made if absent)")
    convert.add_argument("--shards", type=int, required=True,
                         help="number of TFRecord files or tar shards: the images are cut "
                              "into this many runs, as equal as can be")
    convert.add_argument("--format", default="tfrecord", choices=("tfrecord", "webdataset"),
                         help="tfrecord: PREFIX-00000-of-NNNNN.tfrecord files; webdataset: "
                              "PREFIX-000000.tar shards, each sample's image with its .cls "
                              "and .json members (default: %(default)s)")
    convert.add_argument("--prefix", default="train",
                         help="file names start with PREFIX (default: %(default)s)")
    convert.add_argument("--path-column", default="path",
                         help="a CSV's column of image paths (default: %(default)s)")
    convert.add_argument("--labels", default="inferred",
                         help="'inferred' (a directory's class folders), a CSV's label "
                              "column, or 'none' (default: %(default)s)")
    convert.add_argument("--on-bad-file", default="raise", choices=("raise", "skip"),
                         help="raise: write nothing when an image is bad (exit 1); skip: "
                              "leave the bad images out, name them, and write the rest, as "
                              "make_dali_dataset(on_bad_file='skip') trains on the rest "
                              "(default: %(default)s)")
    convert.add_argument("--masks", default=None,
                         help="with --format webdataset: a folder of masks matched to the "
                              "images by file stem, as make_dali_dataset(masks=MASKS) reads "
                              "them; each sample gets its mask as a greyscale PNG of class "
                              "ids, the member <key>.seg.png (read back with "
                              "masks='.seg.png')")
    convert.add_argument("--boxes", default=None,
                         help="with --format webdataset: a COCO instances JSON, or a CSV "
                              "table of boxes in xyxy columns (path,x1,y1,x2,y2,label); each "
                              "sample gets its boxes in the member <key>.json (read back with "
                              "boxes='.json')")
    convert.add_argument("--force", action="store_true",
                         help="replace the files named PREFIX-*-of-*.tfrecord (and their .idx "
                              "files beside them) or PREFIX-*.tar already in OUT_DIR")
    convert.set_defaults(func=_convert)

    doctor = commands.add_parser(
        "doctor", parents=[loud],
        help="report DALI, TensorFlow, Keras, the plugin, the GPUs and the driver, and run "
             "make_dali_dataset on a few images; exit 1 with the reasons if it cannot run",
    )
    doctor.set_defaults(func=_doctor)
    plugin = commands.add_parser(
        "install-plugin",
        help="install DALI's TensorFlow plugin for the installed DALI and TensorFlow "
             "(pip install --no-build-isolation nvidia-dali-tf-plugin-cudaXXX==<DALI version>)",
    )
    plugin.add_argument("-q", "--quiet", action="store_true", help="pass -q to pip")
    plugin.set_defaults(func=_install_plugin)
    return parser


def _sample_data(args):
    from dalipipe.sample_data import dataset_stats, make_dense_sample_dataset, make_sample_dataset

    if args.masks_and_boxes:
        labels_csv = make_dense_sample_dataset(args.directory, num_images=args.num_images,
                                               seed=args.seed, force=args.force)
        folder = os.path.dirname(labels_csv)
        print(f"{args.num_images} images with masks and boxes in {folder}: images/, masks/, "
              f"labels.csv (path, mask), instances.json (COCO), boxes.csv")
        return 0

    labels_csv = os.path.join(args.directory, "labels.csv")
    before = os.stat(labels_csv).st_mtime_ns if os.path.exists(labels_csv) else None
    make_sample_dataset(
        args.directory, num_images=args.num_images, num_classes=args.num_classes,
        seed=args.seed, force=args.force,
    )
    stats = dataset_stats(labels_csv)
    done = "kept" if os.stat(labels_csv).st_mtime_ns == before else "wrote"
    print(
        f"{done} {args.num_images} images in {args.num_classes} classes; labels: {labels_csv}\n"
        f"mean size {stats['mean_width']:.0f}x{stats['mean_height']:.0f} px, "
        f"mean file {stats['mean_bytes'] / 1024:.0f} KB"
    )
    return 0


def _demo(args):
    from dalipipe import demo

    return demo.run(args.directory, num_images=args.num_images, num_classes=args.num_classes,
                    epochs=args.epochs, batch_size=args.batch_size,
                    image_size=args.image_size, device=args.device, force=args.force)


def _doctor(args):
    from dalipipe import doctor

    return doctor.main()


def _install_plugin(args):
    from dalipipe import install

    return install.install_plugin(quiet=args.quiet)


def _check(args):
    from dalipipe import checks
    from dalipipe.ranges import samples as ranges

    level = "full" if args.full else "structure"
    started = time.perf_counter()
    if args.masks is None and args.boxes is None:
        index = _training_index(args.source, path_column=args.path_column)
        verdicts = checks.check_index(index, check=level, read_records=ranges.load_encoded,
                                      verbose=True)
    else:  # with masks or boxes: as make_dali_dataset judges them (tar shards too)
        from dalipipe.annotations.inputs import judge_boxes, judge_pairs
        from dalipipe.options import Options

        common = dict(check=level, device="cpu", path_column=args.path_column)
        if args.masks is not None:
            index, _, verdicts = judge_pairs(args.source, Options(masks=args.masks, **common))
        else:
            options = Options(boxes=args.boxes, bounding_box_format="xyxy", **common)
            index, _, _, verdicts = judge_boxes(args.source, options)
    bad = checks.bad_files(verdicts)
    print(f"checked {len(index)} files in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    if not bad:
        print(f"all {len(index)} files are sound")
        return 0
    _print_bad(bad, len(index), f"{len(bad)} of {len(index)} files are bad:")
    return 1


def _training_index(source, *, path_column):
    """The samples `make_dali_dataset(source)` reads: a directory's class folders
    (labels inferred), or, for a directory without subfolders, its own images
    (as with `labels=None`); tar shards' samples with their `.cls` labels where
    they have any (a missing or unreadable one is a bad file, as training reports
    it), else their images alone; a table's or TFRecord files' every sample."""
    from dalipipe import sources
    from dalipipe.ranges import tar

    labels = None
    shards = tar.tar_files(source)
    if shards is not None:
        if any(cls is not None for cls in tar.scan(shards).cls):
            labels = "inferred"
    elif os.path.isdir(source) and any(
            entry.is_dir() and not entry.name.startswith(".") for entry in os.scandir(source)):
        labels = "inferred"
    return sources.index_source(source, labels=labels, path_column=path_column,
                                allow_missing=True)


def _print_bad(bad, total, heading, *, shown=20):
    """Prints `heading`, the count of each kind of fault, the first `shown` bad files
    with their reasons, and the path of the report that lists them all."""
    from dalipipe import checks

    print(heading)
    kinds = collections.Counter(reason.split(" (")[0] for reason in bad.values())
    for kind, count in kinds.most_common():
        print(f"  {count:6d}  {kind}")
    for path, reason in sorted(bad.items())[:shown]:
        print(f"  {reason}: {path}")
    if len(bad) > shown:
        print(f"  ... and {len(bad) - shown} more")
    print(f"report: {checks.write_report(bad, total)}")


def _convert(args):
    from dalipipe import checks, sources, tfrecord
    from dalipipe.ranges import write as ranges_write

    if args.shards < 1:  # before any work
        raise ValueError(f"`--shards` must be a positive integer. Received: --shards={args.shards}")
    labels = None if args.labels.lower() == "none" else args.labels
    dense = {}
    if args.masks is not None or args.boxes is not None:
        index, dense = _dense_index(args)
        if index is None:
            return 1
    else:
        index = sources.index_source(args.source, labels=labels, path_column=args.path_column,
                                     allow_missing=True)
    if index.refs is not None:
        raise ValueError(
            "`SOURCE` must be a directory of class folders or a CSV file: these are "
            f"TFRecord files or tar shards already. Received: {args.source!r}"
        )
    tfrecord.check_write_args(index.file_paths, index.labels,
                              None if dense else index.class_names, args.shards, args.prefix)
    written = "*-of-*.tfrecord" if args.format == "tfrecord" else "*.tar"
    kind = "TFRecord file(s)" if args.format == "tfrecord" else "tar shard(s)"
    existing = sorted(glob.glob(os.path.join(glob.escape(args.out_dir),
                                             f"{glob.escape(args.prefix)}-{written}")))
    if existing and not args.force:
        raise FileExistsError(
            f"`OUT_DIR` already holds {len(existing)} {kind} named {args.prefix}-*: "
            f"{existing[0]}{', ...' if len(existing) > 1 else ''}. Choose another OUT_DIR or "
            "--prefix, or pass --force to write over them"
        )
    started = time.perf_counter()
    bad = {} if dense else checks.check_files(index.file_paths, verbose=True)
    print(f"checked {len(index)} files in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    if bad and (args.on_bad_file == "raise" or len(bad) == len(index)):
        _print_bad(bad, len(index), f"{len(bad)} of {len(index)} files are bad; nothing written:")
        return 1
    if bad:
        _print_bad(bad, len(index), f"{len(bad)} of {len(index)} files are bad; "
                                    f"left out (--on-bad-file skip):")
        index = index.without(bad, keep_classes=True)
        tfrecord.check_write_args(index.file_paths, index.labels,
                                  None if dense else index.class_names, args.shards, args.prefix)
    for path in existing:  # --force: the old set goes, whatever its number of files
        for old in (path, path + ".idx"):
            if os.path.isfile(old):
                os.remove(old)
    started = time.perf_counter()
    write = tfrecord.write_tfrecords if args.format == "tfrecord" else ranges_write.write_webdataset
    shards = write(
        index.file_paths, index.labels, index.class_names, args.out_dir,
        num_shards=args.shards, prefix=args.prefix, verbose=True, **dense,
    )
    size = sum(os.path.getsize(p) for p in shards)
    classes = f"records in {len(index.class_names)} classes" if index.labels is not None \
        else {"mask_paths": "records with masks", "boxes": "records with boxes"}.get(
            next(iter(dense), None), "unlabeled records")
    print(
        f"wrote {len(index)} {classes} to {len(shards)} {kind}, {size:,} bytes"
        f"{', with their indexes,' if args.format == 'tfrecord' else ''} in "
        f"{time.perf_counter() - started:.1f} s:\n"
        f"  {shards[0]}" + (f"\n  ...\n  {shards[-1]}" if len(shards) > 1 else "")
    )
    return 0


def _bench(args):
    from dalipipe.bench import loaders as loaders_lib, report

    loaders = args.loaders.split(",") if args.loaders else None
    workloads = {None: None, "all": loaders_lib.WORKLOADS}.get(args.workload, (args.workload,))
    data = args.data or ("data/bench-quick" if args.quick else "data/bench")
    result = report.run_bench(
        data=data, out=args.out, loaders=loaders, workloads=workloads,
        batch_size=args.batch_size, num_images=args.num_images, runs=args.runs,
        train_steps=args.train_steps, threads=args.threads, quick=args.quick,
        rounds=args.rounds,
    )
    print(report.markdown(result))
    print(f"wrote {args.out}/results.json, results.md, chart.png")
    if result.get("note"):
        print(result["note"])
    return 0


def _dense_index(args):
    """`(index, targets)` of `convert --masks` or `--boxes`: the images of a flat
    folder checked with their masks or boxes as `make_dali_dataset` checks them, the
    bad ones printed and left out (`--on-bad-file skip`), and the keywords of
    `write_webdataset` (`mask_paths`: greyscale PNGs of the ids; `boxes`); `(None,
    None)` where nothing is to be written."""
    from dalipipe import checks
    from dalipipe.annotations.inputs import judge_boxes, judge_pairs
    from dalipipe.annotations.masks import greyscale_masks
    from dalipipe.options import Options

    if args.format != "webdataset" or (args.masks is not None and args.boxes is not None):
        raise ValueError("`--masks` or `--boxes` (one of them) write WebDataset shards: pass "
                         f"--format webdataset. Received: --format {args.format}, --masks "
                         f"{args.masks}, --boxes {args.boxes}")
    common = dict(check="structure", device="cpu", path_column=args.path_column, verbose=False)
    if args.masks is not None:
        index, _, verdicts = judge_pairs(args.source, Options(masks=args.masks, **common))
        entries = None
    else:
        options = Options(boxes=args.boxes, bounding_box_format="xyxy", **common)
        index, entries, _, verdicts = judge_boxes(args.source, options, 0)
    bad = checks.bad_files(verdicts)
    if bad and (args.on_bad_file == "raise" or len(bad) == len(index)):
        _print_bad(bad, len(index), f"{len(bad)} of {len(index)} files are bad; nothing written:")
        return None, None
    if bad:
        _print_bad(bad, len(index), f"{len(bad)} of {len(index)} files are bad; "
                                    f"left out (--on-bad-file skip):")
        index = index.without(bad, keep_classes=True)
    if entries is None:
        return index, {"mask_paths": greyscale_masks(index.mask_paths)}
    return index, {"boxes": [e for e in entries if e.path not in bad]}


def _hide_start_up_lines():
    """Hides what TensorFlow's and DALI's C++ code writes to stderr as they start.

    Their log lines below FATAL are turned off (`TF_CPP_MIN_LOG_LEVEL=3`, unless
    already set), and what TensorFlow writes to file descriptor 2 before its logging
    is set up is dropped, unless the import fails: its import (which prints "All log
    messages before absl::InitializeLog() ...", then oneDNN's and the CUDA stub's
    lines, all of it twice), the import of DALI's
    TensorFlow plugin on Keras's TensorFlow backend, and CUDA's start (on a machine
    with CUDA's driver library and no usable GPU, "failed call to cuInit: ... (303)"),
    on every backend, since the commands ask TensorFlow for its GPUs on every one.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if "tensorflow" in sys.modules:
        return
    captured = None
    try:
        with captured_stderr() as captured:
            try:
                import tensorflow as tf

                if keras_backend() == "tensorflow":
                    import dalipipe.tf_dataset  # noqa: F401  (DALI's TensorFlow plugin)
                tf.config.list_physical_devices("GPU")  # CUDA's start-up lines
            except ImportError:
                pass  # the command says what is missing
    except BaseException:
        if captured is not None:  # None: the capture did not start
            sys.stderr.write(captured.text)
        raise


if __name__ == "__main__":
    sys.exit(main())
