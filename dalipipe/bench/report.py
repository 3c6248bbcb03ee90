"""`dalipipe bench` and `benchmarks/gpu_bench.py`: run loaders on the workloads and
write JSON, Markdown and PNG."""

import json
import os
import sys
import time

import numpy as np

from dalipipe.bench import harness, loaders as loaders_lib
from dalipipe.utils import usable_cores

DEFAULT_LOADERS = ("python_generator", "pydataset", "image_dataset_from_directory", "tf_data",
                   "tf_data_antialias", "dalipipe_cpu", "dalipipe_cpu_no_antialias",
                   "dalipipe_gpu")
# The segmentation workload's loaders unless others are asked for.
DEFAULT_SEGMENTATION_LOADERS = ("keras_oxford_pets", "tf_data_keras_layers", "dalipipe_cpu",
                                "dalipipe_cpu_no_antialias", "dalipipe_gpu")
DEFAULT_DENSE_LOADERS = {"segmentation": DEFAULT_SEGMENTATION_LOADERS,
                         "detection": loaders_lib.DETECTION_LOADERS}
# The loader the segmentation table divides by, unless the run's reference ran it.
SEGMENTATION_REFERENCE = "tf_data_keras_layers"

# A quick run: at most this many images, these workloads (unless others are asked for).
QUICK_IMAGES = 64
QUICK_BATCH = 16  # at most: a 64-image epoch of 4 steps
QUICK_WORKLOADS = ("stretch",)
# What a quick run's report says of its figures.
QUICK_NOTE = ("A quick smoke run (at most 64 images in batches of at most 16, 1 timed epoch): "
              "its figures are too small "
              "to compare loaders; run `dalipipe bench` without --quick for those.")


def run_bench(*, data, out, loaders=None, workloads=None,
              batch_size=64, num_images=5000, runs=3, train_steps=30, threads=None, seed=0,
              quick=False, reference="tf_data", timeout=1800, time_budget=None,
              stream=None, dense_data=None, rounds=1):
    """Measures `loaders` on `workloads` over the images in `data`.

    `data` that is absent, empty or made by dalipipe gets `num_images` sample images
    (`sample_data.sample_data_unless_in_use`); any other folder is read as it is,
    its class folders as `make_dali_dataset` indexes them, and nothing is written
    into it.

    Each (loader, workload) and DALI's decode-only ceilings (CPU, GPU) run in a fresh
    process (`harness.run_task_in_subprocess`); with `quick`, each loader's workloads
    run in turn in one process (`harness.measure_in_turn`). One that cannot run here
    (`loaders.unavailable`) is recorded as `{"skipped": reason}`, as is every one
    not started before `time_budget` seconds have passed (None: no budget); one
    that fails, runs past `timeout` seconds or past the budget is recorded as
    `{"error": message}`.
    `out/results.json` is rewritten after each; `results.md` and, where matplotlib
    is installed, `chart.png` are written at the end.

    The dense workloads (segmentation, detection) read images with masks and boxes
    that they make in `dense_data` (`dalipipe.bench.dense_data`, `num_images` of
    them); `data` is then made or read only for the other workloads. With `rounds`
    above 1, each workload's loaders run in turn round after round, their order
    rotated every round, so that the machine's other work falls on all of them; every
    round's result is kept (`"round"`), and the tables and the chart show the median
    round of each (`combined`).

    Args:
        loaders: the loaders to run on every workload; a pair that cannot run
            (`loaders.unsupported`) is recorded as skipped. Defaults to
            `DEFAULT_LOADERS` on the classification workloads and
            `DEFAULT_DENSE_LOADERS` on the dense ones.
        dense_data: the folder of the dense workloads' data. Defaults to
            `data` with "-segmentation" added.
        workloads: the workloads to run. Defaults to all of them (`loaders.WORKLOADS`),
            with `quick` to `QUICK_WORKLOADS` (stretch).
        reference: the loader whose images/s the others are divided by in the
            Markdown tables.
        stream: where progress is written. Defaults to `sys.stderr`.
        quick: a smoke run: at most 64 images (of a folder of the user's, 64 spread
            over it), the stretch workload unless `workloads` says otherwise, batch 16,
            1 timed epoch after the warm-up, 2 train steps, each loader's workloads
            in one process (every code path runs, with one process start per
            loader); its report carries `QUICK_NOTE` as "note". Every loader reads
            the same files (Keras's directory loader a folder of links to them,
            `loaders.link_folder`).

    Returns:
        The results dict that is also written to `out/results.json`.
    """
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"`rounds` must be an integer of at least 1. Received: rounds={rounds!r}")
    from dalipipe.sample_data import image_stats

    stream = stream or sys.stderr

    unknown = sorted(set(loaders or ()) - set(loaders_lib.LOADERS))
    if unknown:
        raise ValueError(
            f"`loaders` must be among {sorted(loaders_lib.LOADERS)}. Received unknown: {unknown}"
        )
    if workloads is None:
        workloads = QUICK_WORKLOADS if quick else loaders_lib.WORKLOADS
    if quick:
        num_images, runs, train_steps = min(num_images, QUICK_IMAGES), 1, min(train_steps, 2)
        batch_size = min(batch_size, QUICK_BATCH)
    threads = threads or usable_cores()
    shared = dict(batch_size=batch_size, threads=threads, seed=seed, runs=runs)
    common, report = None, {"machine": harness.machine_info()}
    if set(workloads) - set(loaders_lib.DENSE_WORKLOADS):
        index = _classification_index(data, num_images, quick, stream)
        common = dict(files=index.file_paths, labels=index.labels.tolist(),
                      num_classes=len(index.class_names), **shared)
        report["dataset"] = {**image_stats(index.file_paths, index.class_names),
                             "directory": os.path.abspath(data)}
    if set(workloads) & set(loaders_lib.DENSE_WORKLOADS):
        dense = _dense_data(dense_data or data.rstrip("/\\") + "-segmentation", num_images,
                            seed, stream)
        dense_common = dict(files=dense.images, num_classes=0, **shared)
        report["dense_dataset"] = {**image_stats(dense.images),
                                   "directory": os.path.abspath(dense.directory),
                                   "masks": os.path.abspath(dense.masks_folder)}
        common = common or dict(dense_common, labels=dense.masks)
        report.setdefault("dataset", report["dense_dataset"])
    tasks = [dict(kind="decode", device=device, **common) for device in ("cpu", "gpu")]
    names = {}
    for workload in workloads:
        is_dense = workload in loaders_lib.DENSE_WORKLOADS
        names[workload] = list(loaders or DEFAULT_DENSE_LOADERS.get(workload, DEFAULT_LOADERS))
        for number in range(rounds):
            shift = number % len(names[workload])
            for loader in names[workload][shift:] + names[workload][:shift]:
                tasks.append(dict(kind="measure", loader=loader, workload=workload,
                                  train_steps=train_steps if workload == "train" else 0,
                                  **({"round": number + 1} if rounds > 1 else {}),
                                  **(dict(dense_common, labels=dense.targets(workload))
                                     if is_dense else common)))
    report.update({
        "config": dict(batch_size=batch_size, images=len(common["files"]), runs=runs,
                       workloads=list(workloads), rounds=rounds,
                       train_steps=train_steps, threads=threads, seed=seed, quick=quick,
                       reference=reference, timeout=timeout, time_budget=time_budget,
                       processes="one per loader" if quick else "one per loader and workload"),
        "loaders": {name: loaders_lib.DESCRIPTIONS[name]
                    for name in dict.fromkeys(n for w in workloads for n in names[w])},
        "results": [],
    })
    if quick:
        report["note"] = QUICK_NOTE
    os.makedirs(out, exist_ok=True)
    reasons = {}
    started = time.perf_counter()
    units = _units(tasks, quick)
    for i, unit in enumerate(units):
        name = harness.task_name(unit[0])
        workloads_of = [task.get("workload", "decode") for task in unit]
        _progress(stream, i, len(units), f"{name} {','.join(workloads_of)}", started)
        if name not in reasons:
            reasons[name] = loaders_lib.unavailable(name)
        left = None if time_budget is None else time_budget - (time.perf_counter() - started)
        if left is not None and left <= 0:
            reasons[name] = f"time budget of {time_budget:g} s spent"
        why = [reasons[name] or loaders_lib.unsupported(name, w) for w in workloads_of]
        load_before = os.getloadavg()  # other work on the machine, per process
        found = iter(_measured([t for t, reason in zip(unit, why) if not reason],
                               timeout, left))
        for task, workload, reason in zip(unit, workloads_of, why):
            result = ({"loader": name, "workload": workload, "skipped": reason} if reason
                      else next(found))
            if "round" in task:
                result["round"] = task["round"]
            result.update(load_average_before=load_before, load_average_after=os.getloadavg())
            report["results"].append(result)
        _write_json(report, os.path.join(out, "results.json"))
    _progress(stream, len(units), len(units), "done", started)
    print(file=stream)
    report["seconds"] = time.perf_counter() - started
    _write_json(report, os.path.join(out, "results.json"))
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(markdown(report))
    try:
        chart(report, os.path.join(out, "chart.png"))
    except ImportError as e:
        print(f"no chart.png: {e}", file=stream)
    return report


def _units(tasks, quick):
    """The tasks as they run: each alone in its process, or with `quick` one loader's
    measurements of a round together (in the order of their first task)."""
    if not quick:
        return [[task] for task in tasks]
    units = {}
    for task in tasks:
        key = (task["loader"], task.get("round")) if task["kind"] == "measure" else len(units)
        units.setdefault(key, []).append(task)
    return list(units.values())


def _measured(tasks, timeout, left):
    """The results of `tasks` (one loader's): one task in a fresh process, several in
    one process in turn (`harness.measure_in_turn`), within `timeout` seconds each
    (`left`: at most those in all). Where that process fails, each task has its error."""
    if not tasks:
        return []
    limit = timeout * len(tasks) if left is None else min(timeout * len(tasks), left)
    if len(tasks) == 1:
        return [harness.run_task_in_subprocess(tasks[0], timeout=limit)]
    found = harness.run_task_in_subprocess(
        dict(kind="in_turn", loader=tasks[0]["loader"], tasks=tasks), timeout=limit)
    if "results" in found:
        return found["results"]
    return [{"loader": found["loader"], "workload": task["workload"], "error": found["error"]}
            for task in tasks]


def _classification_index(data, num_images, quick, stream):
    """The classification workloads' images: sample images made in `data` when it is
    free (`is_free_folder`), else the user's folder as it is (with `quick`,
    `num_images` spread over it)."""
    from dalipipe import sources
    from dalipipe.sample_data import is_free_folder, make_sample_dataset

    if is_free_folder(data):
        print(f"sample data: {num_images} images in {data} (made unless already there)",
              file=stream)
        make_sample_dataset(data, num_images=num_images, num_classes=10 if num_images >= 10 else 1)
        return sources.index_source(data)
    index = sources.index_source(data)
    if quick and len(index) > num_images:
        index = index.take(np.linspace(0, len(index) - 1, num_images).round().astype(int))
    print(f"benchmarking {len(index)} images of {data} as they are", file=stream)
    return index


def _dense_data(directory, num_images, seed, stream):
    from dalipipe.bench.dense_data import dense_data

    print(f"segmentation data: {num_images} images with masks in {directory} (made unless "
          "already there)", file=stream)
    return dense_data(directory, num_images=num_images, seed=seed)


def targets_words(r):
    """A dense result's first batch of targets in words: its boxes' dtype, shape, how
    many were kept and their labels, or its masks' dtype, shape and ids; else "–"."""
    if "box_shape" in r:
        return (f"{r['box_dtype']} {r['box_shape']}, {r['boxes_kept']} kept, "
                f"labels {r['box_labels']}")
    if "mask_ids" in r:
        return f"{r['mask_dtype']} {r['mask_shape']}, ids {r['mask_ids']}"
    return "–"


def combined(results):
    """One result per (loader, workload): where several rounds ran, the median round
    by images/s (the lower of the two middle ones), with every round's images/s under
    `"rounds_images_per_s"`; a pair with no round measured keeps its last result."""
    groups = {}
    for r in results:
        groups.setdefault((r.get("loader"), r.get("workload")), []).append(r)
    merged = []
    for group in groups.values():
        measured = sorted((r for r in group if "images_per_s" in r),
                          key=lambda r: r["images_per_s"])
        if len(group) == 1 or not measured:
            merged.append(group[-1])
            continue
        middle = measured[(len(measured) - 1) // 2]
        merged.append({**middle, "rounds_images_per_s": [r.get("images_per_s") for r in group]})
    return merged


def _write_json(report, path):
    with open(path + ".tmp", "w") as f:
        json.dump(report, f, indent=2)
    os.replace(path + ".tmp", path)


def _progress(stream, done, total, label, started):
    """A progress bar redrawn in place on a terminal, else one line per step."""
    width = 30
    filled = width * done // total
    elapsed = time.perf_counter() - started
    redraw = stream.isatty()
    print(("\r" if redraw else "") + f"[{'#' * filled}{'.' * (width - filled)}] "
          f"{done}/{total} {elapsed:5.0f}s {label:<40}",
          end="" if redraw else "\n", file=stream, flush=True)


def markdown(report):
    """The results as Markdown tables, one per workload."""
    machine, config, data = report["machine"], report["config"], report["dataset"]
    versions = machine["versions"]
    libraries = ", ".join(f"{label} {versions.get(key)}" for label, key in (
        ("DALI", "dali"), ("TensorFlow", "tensorflow"), ("torch", "torch"))
        if versions.get(key)) or "no DALI"
    lines = [f"**{report['note']}**", ""] if report.get("note") else []
    lines += [
        f"Machine: {machine['cpu']}, {machine['cores']} cores, GPU: {machine['gpu']}; "
        f"{libraries}, Python {machine['python']}.",
        f"Data: {data['images']} JPEGs, mean {data['mean_width']:.0f}x{data['mean_height']:.0f} px, "
        f"{data['mean_bytes'] / 1024:.0f} KB. Batch {config['batch_size']}, {config['threads']} "
        f"threads or workers per loader, median of {config['runs']} timed epochs after a warm-up.",
    ]
    dense = report.get("dense_dataset")
    if dense:
        lines.append(
            f"Dense data: {dense['images']} JPEGs with greyscale PNG masks and a COCO "
            "JSON of their shapes' boxes, mean "
            f"{dense['mean_width']:.0f}x{dense['mean_height']:.0f} px, "
            f"{dense['mean_bytes'] / 1024:.0f} KB.")
    if config.get("rounds", 1) > 1:
        lines.append(f"{config['rounds']} rounds, the loaders in turn, their order rotated "
                     "every round; each row is the loader's median round.")
    lines.append("")
    by_key = {(r.get("loader"), r.get("workload")): r for r in combined(report["results"])}
    for r in report["results"]:
        if r.get("workload") == "decode":
            lines.append(f"Decode-only ceiling ({r['loader']}): " + (
                f"{r['images_per_s']:.0f} images/s." if "images_per_s" in r
                else not_run(r) + "."))
    lines.append("")
    for workload in loaders_lib.WORKLOADS + loaders_lib.DENSE_WORKLOADS:
        rows = [r for (name, w), r in by_key.items() if w == workload]
        if not rows:
            continue
        dense = workload in loaders_lib.DENSE_WORKLOADS
        reference = config.get("reference", "tf_data")
        if dense and (reference, workload) not in by_key:
            reference = SEGMENTATION_REFERENCE
        reference_ips = by_key.get((reference, workload), {}).get("images_per_s")
        extra = {"train": "input efficiency", "segmentation": "masks of the first batch",
                 "detection": "boxes of the first batch"}.get(workload,
                                                              "error vs PIL (grey levels)")
        lines += [f"### {workload}", ""]
        if fastest(rows):
            lines += [fastest(rows), ""]
        lines += [
            f"| loader | images/s | × {reference} | CPU s / 1000 images | peak RSS (MB) | {extra} "
            "| note |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            if "images_per_s" not in r:
                lines.append(f"| {r['loader']} | {_cell(not_run(r))} | | | | | |")
                continue
            ratio = f"{r['images_per_s'] / reference_ips:.2f}" if reference_ips else "–"
            value = (r.get("input_efficiency") if workload == "train"
                     else r.get("mean_abs_error_vs_pil"))
            value = "–" if value is None else f"{value:.2f}"
            if workload == "segmentation":
                value = f"{r.get('mask_dtype')}, ids {r.get('mask_ids')}"
            elif dense:
                value = targets_words(r)
            lines.append(
                f"| {r['loader']} | {r['images_per_s']:.0f} | {ratio} | "
                f"{r['cpu_s_per_1000']:.2f} | {r['peak_rss_mb']:.0f} | "
                f"{value} | {_cell(r.get('note') or '')} |"
            )
        lines.append("")
        totals = [r for r in rows if "total_s" in r]
        if any(r["loader"] in loaders_lib.CACHED_LOADERS for r in totals):
            lines += [f"Creation plus {config['runs'] + 1} epochs (s): " + ", ".join(
                f"`{r['loader']}` {r['total_s']:.2f}" for r in totals) + ".", ""]
        settings = [r for r in rows if r.get("settings")]
        if settings:
            lines += ["Settings:", ""]
            lines += [f"- `{r['loader']}`: {r['settings']}" for r in settings] + [""]
    gpu_rows = [r for r in report["results"] if "gpu_memory_used_mb_after" in r]
    if gpu_rows:
        lines += [
            "### GPU pipelines",
            "",
            "| loader | workload | first batch of the first pipeline (s) | of a rebuilt one (s) "
            "| GPU memory in use after (MB) | of it since the start (MB) |",
            "|---|---|---|---|---|---|",
        ]
        for r in gpu_rows:
            first = r.get("first_batch_s", r.get("build_s"))
            later = r.get("rebuild_first_batch_s", r.get("rebuild_s"))
            lines.append(
                f"| {r['loader']} | {r['workload']} | {_number(first, '.2f')} | "
                f"{_number(later, '.2f')} | {_number(r['gpu_memory_used_mb_after'], '.0f')} | "
                f"{_number(r.get('gpu_memory_mb'), '.0f')} |"
            )
        lines.append("")
    lines += ["Loaders:", ""] + [f"- `{k}`: {v}" for k, v in report["loaders"].items()]
    return "\n".join(lines) + "\n"


def fastest(rows):
    """Which of a workload's results is fastest, and by how much, as a sentence; None
    when none was measured."""
    measured = sorted((r for r in rows if "images_per_s" in r),
                      key=lambda r: r["images_per_s"], reverse=True)
    if not measured:
        return None
    first = measured[0]
    text = f"Fastest: `{first['loader']}`, {first['images_per_s']:.0f} images/s"
    if len(measured) == 1:
        return text + ", the only loader measured."
    second = measured[1]
    return (text + f", {first['images_per_s'] / second['images_per_s']:.2f}× the next, "
            f"`{second['loader']}` ({second['images_per_s']:.0f} images/s).")


def not_run(result, limit=160):
    """Why a result has no images/s, in one line of at most `limit` characters."""
    if "skipped" in result:
        text = f"skipped: {result['skipped']}"
    else:
        text = f"error: {result.get('error', 'no result')}"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _cell(text):
    return text.replace("|", "/")


def _number(value, spec):
    return "–" if value is None else format(value, spec)


def chart_rows(report, workload):
    """The chart's bars for `workload`: `(loader, images/s, None)` for each one
    measured, `(loader, 0, reason)` for each one not, its reason in one line
    (`not_run`)."""
    return [(r["loader"], r["images_per_s"], None) if "images_per_s" in r
            else (r["loader"], 0, not_run(r, limit=80))
            for r in combined(report["results"]) if r.get("workload") == workload]


def chart(report, path):
    """Bar chart of images/s per loader, one panel per workload, with the decode ceiling."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = [w for w in loaders_lib.WORKLOADS + loaders_lib.DENSE_WORKLOADS
                 if any(r.get("workload") == w for r in report["results"])]
    ceilings = [r for r in report["results"]
                if r.get("workload") == "decode" and "images_per_s" in r]
    figure, axes = plt.subplots(1, len(workloads), figsize=(7.5 * len(workloads), 4),
                                squeeze=False)
    for ax, workload in zip(axes[0], workloads):
        rows = chart_rows(report, workload)
        names = [name for name, _, _ in rows]
        values = [value for _, value, _ in rows]
        colors = ["tab:green" if n.startswith("dalipipe") else "tab:gray" for n in names]
        ax.barh(names, values, color=colors)
        for y, (_, _, reason) in enumerate(rows):
            if reason:
                ax.text(0, y, " " + reason, color="tab:red", fontsize=6.5, va="center")
        for c in ceilings:
            ax.axvline(c["images_per_s"], linestyle="--", color="tab:red")
            ax.text(c["images_per_s"], len(names) - 0.5, " " + c["loader"].replace("dali_", ""),
                    color="tab:red", fontsize=8, va="top")
        ax.set_title(f"{workload} workload")
        ax.set_xlabel("images/s (higher is better)")
        ax.invert_yaxis()
    machine = report["machine"]
    quick = "; quick smoke run: too small to compare" if report.get("note") else ""
    figure.suptitle(f"{machine['cpu']}, {machine['cores']} cores, GPU: {machine['gpu']}{quick}",
                    fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
