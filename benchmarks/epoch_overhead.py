"""Cost of starting an epoch: DALI's TensorFlow plugin rebuilds the pipeline for each
new iterator, and Keras makes one per epoch (and one more at its end that it never
reads). Measures, on the sample dataset, the time from `iter(dataset)` to the first
batch against the median time of later batches, one whole epoch, and the time to
make and drop an iterator that is never read, and writes them as JSON.

    python benchmarks/epoch_overhead.py [--num-images 600] [--out benchmarks/results]
"""

import argparse
import json
import os
import statistics
import time


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--directory", default="data/sample")
    parser.add_argument("--num-images", type=int, default=600)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()

    from dalipipe import make_dali_dataset
    from dalipipe.bench.harness import cpu_model
    from dalipipe.sample_data import sample_data_unless_in_use

    sample_data_unless_in_use(args.directory, num_images=args.num_images)
    ds = make_dali_dataset(args.directory, image_size=(args.image_size,) * 2,
                           batch_size=args.batch_size, augment=True, seed=0, device=args.device,
                           normalization="imagenet", verbose=False)
    first, rest, epochs, unread = [], [], [], []
    for _ in range(args.epochs):
        start = time.perf_counter()
        iterator = iter(ds)
        del iterator
        unread.append(time.perf_counter() - start)
        start = time.perf_counter()
        iterator = iter(ds)
        next(iterator)
        first.append(time.perf_counter() - start)
        last = time.perf_counter()
        for _batch in iterator:
            now = time.perf_counter()
            rest.append(now - last)
            last = now
        epochs.append(last - start)
    steady = statistics.median(rest)
    result = {
        "machine": f"{cpu_model()}, {os.cpu_count()} cores",
        "device": args.device,
        "images": args.num_images,
        "image_size": args.image_size,
        "batch_size": args.batch_size,
        "first_batch_s_median": statistics.median(first),
        "later_batch_s_median": steady,
        "epoch_start_overhead_s": statistics.median(first) - steady,
        "epoch_s_median": statistics.median(epochs),
        "unread_iterator_s_median": statistics.median(unread),
    }
    result["overhead_fraction_of_epoch"] = result["epoch_start_overhead_s"] / result["epoch_s_median"]
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "epoch_overhead.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
