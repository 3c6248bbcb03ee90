"""`dalipipe bench`: runs every loader on both workloads and writes JSON, Markdown and PNG."""

import json
import os
import sys
import time

from dalipipe.bench import harness, loaders as loaders_lib

DEFAULT_LOADERS = ("python_generator", "pydataset", "image_dataset_from_directory", "tf_data",
                   "tf_data_antialias", "dalipipe_cpu", "dalipipe_cpu_no_antialias",
                   "dalipipe_gpu")


def run_bench(*, data, out, loaders=DEFAULT_LOADERS, workloads=loaders_lib.WORKLOADS,
              batch_size=64, num_images=5000, runs=3, train_steps=30, threads=None, seed=0,
              quick=False, stream=sys.stderr):
    """Measures `loaders` on `workloads` over the images in `data` (made if absent).

    Returns:
        The results dict that is also written to `out/results.json`.
    """
    from dalipipe import sources
    from dalipipe.graph import dali_gpu_count
    from dalipipe.sample_data import dataset_stats, make_sample_dataset

    if quick:
        num_images, runs, train_steps = min(num_images, 64), 1, 2
        batch_size = min(batch_size, 16)
    labels_csv = os.path.join(data, "labels.csv")
    if not os.path.exists(labels_csv):
        print(f"making {num_images} sample images in {data} ...", file=stream)
        make_sample_dataset(data, num_images=num_images, num_classes=10 if num_images >= 10 else 1)
    index = sources.index_source(data)
    threads = threads or harness.machine_info()["cores"]
    unknown = sorted(set(loaders) - set(loaders_lib.LOADERS))
    if unknown:
        raise ValueError(
            f"`loaders` must be among {sorted(loaders_lib.LOADERS)}. Received unknown: {unknown}"
        )
    if "dalipipe_gpu" in loaders and dali_gpu_count() == 0:
        loaders = [name for name in loaders if name != "dalipipe_gpu"]
        print("no GPU: skipping dalipipe_gpu", file=stream)

    common = dict(files=index.file_paths, labels=index.labels.tolist(), batch_size=batch_size,
                  threads=threads, seed=seed, runs=runs, directory=os.path.abspath(data),
                  num_classes=len(index.class_names))
    tasks = [dict(kind="decode", device="cpu", **common)]
    if dali_gpu_count() > 0:
        tasks.append(dict(kind="decode", device="gpu", **common))
    for workload in workloads:
        for loader in loaders:
            tasks.append(dict(kind="measure", loader=loader, workload=workload,
                              train_steps=train_steps if workload == "train" else 0, **common))
    results = []
    started = time.perf_counter()
    for i, task in enumerate(tasks):
        name = task.get("loader", f"dali_decode_only_{task.get('device')}")
        _progress(stream, i, len(tasks), f"{name} {task.get('workload', 'decode')}", started)
        result = harness.run_task_in_subprocess(task)
        results.append(result)
    _progress(stream, len(tasks), len(tasks), "done", started)
    print(file=stream)

    report = {
        "machine": harness.machine_info(),
        "config": dict(batch_size=batch_size, images=len(index), runs=runs,
                       train_steps=train_steps, threads=threads, seed=seed, quick=quick),
        "dataset": {**dataset_stats(labels_csv), "directory": os.path.abspath(data)},
        "loaders": {name: loaders_lib.DESCRIPTIONS[name] for name in loaders},
        "results": results,
    }
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(report, f, indent=2)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(markdown(report))
    chart(report, os.path.join(out, "chart.png"))
    return report


def _progress(stream, done, total, label, started):
    width = 30
    filled = width * done // total
    elapsed = time.perf_counter() - started
    print(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {elapsed:5.0f}s {label:<40}",
          end="", file=stream, flush=True)


def markdown(report):
    """The results as Markdown tables, one per workload."""
    machine, config, data = report["machine"], report["config"], report["dataset"]
    lines = [
        f"Machine: {machine['cpu']}, {machine['cores']} cores, GPU: {machine['gpu']}; "
        f"DALI {machine['versions'].get('nvidia-dali-cuda120')}, "
        f"TensorFlow {machine['versions'].get('tensorflow')}, Python {machine['python']}.",
        f"Data: {data['images']} JPEGs, mean {data['mean_width']:.0f}x{data['mean_height']:.0f} px, "
        f"{data['mean_bytes'] / 1024:.0f} KB. Batch {config['batch_size']}, {config['threads']} "
        f"threads or workers per loader, median of {config['runs']} timed epochs after a warm-up.",
        "",
    ]
    by_key = {(r.get("loader"), r.get("workload")): r for r in report["results"]}
    for r in report["results"]:
        if r.get("workload") == "decode" and "images_per_s" in r:
            lines.append(f"Decode-only ceiling ({r['loader']}): {r['images_per_s']:.0f} images/s.")
    lines.append("")
    for workload in ("train", "eval"):
        rows = [r for (name, w), r in by_key.items() if w == workload]
        if not rows:
            continue
        reference = by_key.get(("tf_data", workload), {}).get("images_per_s")
        extra = "error vs PIL (grey levels)" if workload == "eval" else "input efficiency"
        lines += [
            f"### {workload}",
            "",
            f"| loader | images/s | × tf_data | CPU s / 1000 images | peak RSS (MB) | {extra} |",
            "|---|---|---|---|---|---|",
        ]
        for r in rows:
            if "error" in r:
                lines.append(f"| {r['loader']} | error: {r['error'][:120]} | | | | |")
                continue
            ratio = f"{r['images_per_s'] / reference:.2f}" if reference else "–"
            value = (r.get("mean_abs_error_vs_pil") if workload == "eval"
                     else r.get("input_efficiency"))
            lines.append(
                f"| {r['loader']} | {r['images_per_s']:.0f} | {ratio} | "
                f"{r['cpu_s_per_1000']:.2f} | {r['peak_rss_mb']:.0f} | "
                f"{'–' if value is None else f'{value:.2f}'} |"
            )
        lines.append("")
    lines += ["Loaders:", ""] + [f"- `{k}`: {v}" for k, v in report["loaders"].items()]
    return "\n".join(lines) + "\n"


def chart(report, path):
    """Bar chart of images/s per loader, one panel per workload, with the decode ceiling."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = [w for w in ("train", "eval")
                 if any(r.get("workload") == w for r in report["results"])]
    ceilings = [r for r in report["results"]
                if r.get("workload") == "decode" and "images_per_s" in r]
    figure, axes = plt.subplots(1, len(workloads), figsize=(6 * len(workloads), 4), squeeze=False)
    for ax, workload in zip(axes[0], workloads):
        rows = [r for r in report["results"] if r.get("workload") == workload and "images_per_s" in r]
        names = [r["loader"] for r in rows]
        values = [r["images_per_s"] for r in rows]
        colors = ["tab:green" if n.startswith("dalipipe") else "tab:gray" for n in names]
        ax.barh(names, values, color=colors)
        for c in ceilings:
            ax.axvline(c["images_per_s"], linestyle="--", color="tab:red")
            ax.text(c["images_per_s"], len(names) - 0.5, " " + c["loader"].replace("dali_", ""),
                    color="tab:red", fontsize=8, va="top")
        ax.set_title(f"{workload} workload")
        ax.set_xlabel("images/s (higher is better)")
        ax.invert_yaxis()
    machine = report["machine"]
    figure.suptitle(f"{machine['cpu']}, {machine['cores']} cores, GPU: {machine['gpu']}", fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
