"""The `dalipipe` command line: `dalipipe sample-data DIR`, `dalipipe demo`,
`dalipipe check SOURCE`, `dalipipe convert SOURCE OUT_DIR --shards N`, `dalipipe bench`,
`dalipipe doctor`, `dalipipe install-plugin`."""

import argparse
import os
import sys
import time
import warnings

from dalipipe.keras_config import keras_backend
from dalipipe.utils import captured_stderr


def main(argv=None):
    parser = argparse.ArgumentParser(prog="dalipipe", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    # Commands that load TensorFlow hide its start-up lines unless --verbose.
    loud = argparse.ArgumentParser(add_help=False)
    loud.add_argument("--verbose", action="store_true",
                      help="show TensorFlow's and DALI's own start-up and log lines")

    sample = commands.add_parser(
        "sample-data", help="write a labeled JPEG dataset cut from shipped photographs"
    )
    sample.add_argument("directory")
    sample.add_argument("--num-images", type=int, default=5000)
    sample.add_argument("--num-classes", type=int, default=10)
    sample.add_argument("--seed", type=int, default=0)

    demo = commands.add_parser(
        "demo", parents=[loud],
        help="make sample data and train a small Keras model from it through DALI",
    )
    demo.add_argument("--directory", default="data/sample")
    demo.add_argument("--num-images", type=int, default=600)
    demo.add_argument("--num-classes", type=int, default=4)
    demo.add_argument("--epochs", type=int, default=6)
    demo.add_argument("--batch-size", type=int, default=32)
    demo.add_argument("--image-size", type=int, default=96)
    demo.add_argument("--device", default="auto", choices=("auto", "gpu", "cpu"))

    bench = commands.add_parser(
        "bench", parents=[loud],
        help="compare dalipipe with the CPU loaders Keras users run instead",
    )
    bench.add_argument("--data", default="data/bench", help="image folder (made if absent)")
    bench.add_argument("--num-images", type=int, default=5000)
    bench.add_argument("--out", default="benchmarks/results/latest")
    bench.add_argument("--loaders", default=None,
                       help="comma-separated subset of the loaders (default: all)")
    bench.add_argument("--workload", default="all", choices=("train", "eval", "stretch", "all"),
                       help="stretch: the whole image to 224x224, image_dataset_from_directory's "
                            "default (default: all three)")
    bench.add_argument("--batch-size", type=int, default=64)
    bench.add_argument("--runs", type=int, default=3)
    bench.add_argument("--train-steps", type=int, default=30)
    bench.add_argument("--threads", type=int, default=None)
    bench.add_argument("--quick", action="store_true", help="a smoke run on 64 images")

    check = commands.add_parser(
        "check", help="check every image of a source before training; exit 1 if any is bad"
    )
    check.add_argument("source", help="a directory of images, a CSV file, or TFRecord files (a glob pattern)")
    check.add_argument("--path-column", default="path")
    check.add_argument("--full", action="store_true", help="also decode every image")

    convert = commands.add_parser(
        "convert", parents=[loud],
        help="check the images of a source, then write them into ImageNet-style TFRecord "
             "files with their indexes; exit 1 if any image is bad",
    )
    convert.add_argument("source", help="a directory of class folders or a CSV file")
    convert.add_argument("out_dir", help="folder for the TFRecord files (made if absent)")
    convert.add_argument("--shards", type=int, required=True, help="number of TFRecord files")
    convert.add_argument("--prefix", default="train",
                         help="file names are PREFIX-00000-of-NNNNN.tfrecord")
    convert.add_argument("--path-column", default="path")
    convert.add_argument("--labels", default="inferred",
                         help="'inferred' (a directory's class folders), a CSV's label "
                              "column, or 'none'")

    commands.add_parser(
        "doctor", parents=[loud],
        help="report DALI, TensorFlow, Keras, the plugin, the GPUs and the driver, and run "
             "make_dali_dataset on a few images; exit 1 with the reasons if it cannot run",
    )
    plugin = commands.add_parser(
        "install-plugin",
        help="install DALI's TensorFlow plugin for the installed DALI and TensorFlow "
             "(pip install --no-build-isolation nvidia-dali-tf-plugin-cudaXXX==<DALI version>)",
    )
    plugin.add_argument("-q", "--quiet", action="store_true", help="pass -q to pip")

    args = parser.parse_args(argv)
    if hasattr(args, "verbose") and not args.verbose:
        _hide_start_up_lines()
    if args.command == "doctor":
        from dalipipe import doctor

        return doctor.main()
    if args.command == "install-plugin":
        from dalipipe import install

        try:
            return install.install_plugin(quiet=args.quiet)
        except ImportError as e:
            print(f"dalipipe install-plugin: error: {e}", file=sys.stderr)
            return 2
    if args.command == "check":
        return _check(args)
    if args.command == "convert":
        return _convert(args)
    if args.command == "bench":
        return _bench(args)
    if args.command == "sample-data":
        from dalipipe.sample_data import dataset_stats, make_sample_dataset

        labels_csv = make_sample_dataset(
            args.directory, num_images=args.num_images, num_classes=args.num_classes,
            seed=args.seed,
        )
        stats = dataset_stats(labels_csv)
        print(
            f"wrote {args.num_images} images in {args.num_classes} classes; labels: {labels_csv}\n"
            f"mean size {stats['mean_width']:.0f}x{stats['mean_height']:.0f} px, "
            f"mean file {stats['mean_bytes'] / 1024:.0f} KB"
        )
        return 0
    return _demo(args)


def _check(args):
    import collections

    from dalipipe import checks, sources, tfrecord

    index = sources.index_source(args.source, labels=None, path_column=args.path_column,
                                 allow_missing=True)
    started = time.perf_counter()
    bad, _ = checks.check_index(index, check="full" if args.full else "structure",
                                read_records=tfrecord.load_encoded, verbose=True)
    print(f"checked {len(index)} files in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    if not bad:
        print(f"all {len(index)} files are sound")
        return 0
    kinds = collections.Counter(reason.split(" (")[0] for reason in bad.values())
    print(f"{len(bad)} of {len(index)} files are bad:")
    for kind, count in kinds.most_common():
        print(f"  {count:6d}  {kind}")
    print(f"report: {checks.write_report(bad, len(index))}")
    return 1


def _convert(args):
    from dalipipe import checks, sources, tfrecord

    labels = None if args.labels.lower() == "none" else args.labels
    try:
        index = sources.index_source(args.source, labels=labels, path_column=args.path_column,
                                     allow_missing=True)
        if index.refs is not None:
            raise ValueError(
                "`source` must be a directory of class folders or a CSV file: these are "
                f"TFRecord files already. Received: source={args.source!r}"
            )
        tfrecord.check_write_args(index.file_paths, index.labels, index.class_names,
                                  args.shards, args.prefix)
    except ValueError as e:
        print(f"dalipipe convert: error: {e}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    bad = checks.check_files(index.file_paths, verbose=True)
    print(f"checked {len(index)} files in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    if bad:
        print(f"{len(bad)} of {len(index)} files are bad; nothing written:")
        for path, reason in sorted(bad.items())[:20]:
            print(f"  {reason}: {path}")
        if len(bad) > 20:
            print(f"  ... and {len(bad) - 20} more")
        print(f"report: {checks.write_report(bad, len(index))}")
        return 1
    started = time.perf_counter()
    shards = tfrecord.write_tfrecords(
        index.file_paths, index.labels, index.class_names, args.out_dir,
        num_shards=args.shards, prefix=args.prefix, verbose=True,
    )
    size = sum(os.path.getsize(p) for p in shards)
    classes = f"records in {len(index.class_names)} classes" if index.labels is not None \
        else "unlabeled records"
    print(
        f"wrote {len(index)} {classes} to {len(shards)} TFRecord file(s), "
        f"{size:,} bytes, with their indexes, in {time.perf_counter() - started:.1f} s:\n"
        f"  {shards[0]}" + (f"\n  ...\n  {shards[-1]}" if len(shards) > 1 else "")
    )
    return 0


def _bench(args):
    from dalipipe.bench import loaders as loaders_lib, report

    loaders = args.loaders.split(",") if args.loaders else report.DEFAULT_LOADERS
    workloads = loaders_lib.WORKLOADS if args.workload == "all" else (args.workload,)
    result = report.run_bench(
        data=args.data, out=args.out, loaders=loaders, workloads=workloads,
        batch_size=args.batch_size, num_images=args.num_images, runs=args.runs,
        train_steps=args.train_steps, threads=args.threads, quick=args.quick,
    )
    print(report.markdown(result))
    print(f"wrote {args.out}/results.json, results.md, chart.png")
    return 0


def _demo(args):
    from dalipipe.sample_data import make_sample_dataset

    make_sample_dataset(args.directory, num_images=args.num_images, num_classes=args.num_classes)
    print(f"sample data: {args.num_images} JPEGs in {args.num_classes} classes under {args.directory}")

    import keras

    from dalipipe import make_dali_dataset

    # Keras 3 warns on every fit with a tf.data.Dataset; shuffling is the dataset's job.
    warnings.filterwarnings("ignore", message="`shuffle=True` was passed")

    common = dict(
        image_size=(args.image_size, args.image_size), batch_size=args.batch_size,
        validation_split=0.2, seed=42, device=args.device,
    )
    # Augmentation and shuffling apply to the training half; the validation half is
    # read in file order.
    train_ds, val_ds = make_dali_dataset(args.directory, subset="both", augment=True, **common)
    print(
        f"classes: {train_ds.class_names}; {len(train_ds.file_paths)} training and "
        f"{len(val_ds.file_paths)} validation images; {int(train_ds.cardinality())} batches "
        f"per epoch"
    )
    model = keras.Sequential([
        keras.Input((args.image_size, args.image_size, 3)),
        keras.layers.Conv2D(16, 3, strides=2, activation="relu"),
        keras.layers.Conv2D(32, 3, strides=2, activation="relu"),
        keras.layers.Conv2D(64, 3, strides=2, activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(len(train_ds.class_names), activation="softmax"),
    ])
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )

    class Throughput(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            seconds = time.perf_counter() - self.start
            print(
                f"epoch {epoch + 1}: {len(train_ds.file_paths) / seconds:7.1f} images/s "
                f"(training + validation pass), accuracy {logs['accuracy']:.3f}, "
                f"val_accuracy {logs['val_accuracy']:.3f}"
            )

    model.fit(train_ds, validation_data=val_ds, epochs=args.epochs, verbose=0,
              callbacks=[Throughput()])
    loss, accuracy = model.evaluate(val_ds, verbose=0)
    print(f"validation accuracy {accuracy:.3f} over {len(val_ds.file_paths)} images")
    return 0


def _hide_start_up_lines():
    """Hides what TensorFlow's and DALI's C++ code writes to stderr as they start.

    Their log lines below FATAL are turned off (`TF_CPP_MIN_LOG_LEVEL=3`, unless
    already set), and what the import of TensorFlow (and of DALI's TensorFlow plugin
    and CUDA's start, on Keras's TensorFlow backend) writes to file descriptor 2
    before its logging is set up ("All log messages before absl::InitializeLog()
    ...", the CUDA stub's lines) is dropped, unless the import fails.
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
