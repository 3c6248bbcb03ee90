"""The options are described once: the table of `docs/options.md`, which the `Args` of
`make_dali_dataset`'s docstring repeat word for word. Docstrings cite no C++ sources.
The code of `docs/viewing.md` runs on real batches."""

import ast
import logging
import pathlib
import re

import numpy as np
import pytest

from dalipipe import dataset
from dalipipe.options import Options

ROOT = pathlib.Path(__file__).resolve().parent.parent
OPTIONS_MD = ROOT / "docs" / "options.md"
LINK = re.compile(r"\[([^\]]*)\]\(([^)]*)\)")


def table_rows():
    """`{option: description}` of the table, in its order, with links as their text."""
    rows = {}
    for line in OPTIONS_MD.read_text(encoding="utf-8").splitlines():
        match = re.match(r"\|\s*`(\w+)`\s*\|\s*`[^`]*`\s*\|\s*(.*?)\s*\|\s*$", line)
        if match:
            rows[match.group(1)] = LINK.sub(r"\1", match.group(2))
    return rows


def docstring_args(function):
    """`{argument: (description, number of lines)}` of `function`'s `Args:` section."""
    lines = function.__doc__.splitlines()
    start = lines.index("    Args:") + 1
    args, name = {}, None
    for line in lines[start:]:
        if not line.strip():
            break
        match = re.match(r" {8}(\w+): (.*)", line)
        if match:
            name = match.group(1)
            args[name] = [match.group(2)]
        else:
            assert line.startswith(" " * 12), line
            args[name].append(line.strip())
    return {name: (" ".join(text), len(text)) for name, text in args.items()}


def test_the_docstring_takes_each_option_s_line_from_the_docs_table():
    rows = table_rows()
    args = docstring_args(dataset.make_dali_dataset)
    assert list(args) == ["directory", "source", *Options.names(), "strategy"]
    assert list(rows) == [*Options.names(), "strategy"]
    for name, description in rows.items():
        assert args[name][0] == f"{description}.", name


def test_each_argument_takes_a_line_or_two():
    args = docstring_args(dataset.make_dali_dataset)
    lines = [n for _, n in args.values()]
    assert max(lines) <= 3 and sum(lines) <= 2 * len(lines), args
    assert len(dataset.make_dali_dataset.__doc__.splitlines()) < 120


def anchors_of(text):
    """The anchors of a Markdown text's headings, as GitHub makes them."""
    return {re.sub(r"[^\w -]", "", heading).strip().lower().replace(" ", "-")
            for heading in re.findall(r"^#+ (.*)$", text, re.MULTILINE)}


def test_the_sections_the_table_links_to_exist():
    text = OPTIONS_MD.read_text(encoding="utf-8")
    anchors = anchors_of(text)
    targets = [target for _, target in LINK.findall(text)]
    assert [t for t in targets if t.startswith("#") and t[1:] not in anchors] == []
    for target in targets:
        if not target.startswith(("#", "http")):
            path, _, anchor = target.partition("#")
            assert (OPTIONS_MD.parent / path).exists(), target
            if anchor:
                linked = (OPTIONS_MD.parent / path).read_text(encoding="utf-8")
                assert anchor in anchors_of(linked), target
    for section in re.findall(r"\(see ([A-Z][\w ]*)\)", "".join(table_rows().values())):
        assert section.lower().replace(" ", "-") in anchors, section


def test_docstrings_cite_no_cpp_sources():
    """C++ functions and files a docstring relies on belong in comments by the code."""
    cited = []
    for path in sorted((ROOT / "dalipipe").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node) or ""
                if re.search(r"\w\.(cc|cpp|cu|cuh|h)\b", doc):
                    cited.append(f"{path.relative_to(ROOT)}:{getattr(node, 'name', '')}")
    assert cited == []


def python_blocks(path):
    """The ```python blocks of a Markdown file, in order."""
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.DOTALL)


def test_the_viewing_recipe_shows_a_batch_as_its_0_255_pixels(color_dir, caplog):
    """`docs/viewing.md`'s code on real batches of noisy JPEGs: the default output cast
    to uint8 is shown as it is, and each normalization undone gives the default
    output's pixels (within one grey level), with nothing clipped by `plt.imshow`;
    the default float image as it is would be clipped."""
    pytest.importorskip("tensorflow")
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dalipipe import make_dali_dataset, make_dali_pipeline

    def clipped():
        return [r for r in caplog.records if r.getMessage().startswith("Clipping input data")]

    caplog.set_level(logging.WARNING, logger="matplotlib")
    batch, default, any_normalization = python_blocks(ROOT / "docs" / "viewing.md")
    common = dict(image_size=(16, 16), batch_size=8, shuffle=False, device="cpu",
                  verbose=False)
    plain = make_dali_dataset(color_dir, **common)
    run = {"ds": plain}
    exec(batch, run)
    reference, labels = run["images"], run["labels"]
    assert reference.dtype == np.float32 and reference.shape == (8, 16, 16, 3)
    assert reference.max() > 200  # 0-255, which a float image for imshow is not
    exec(default, run)
    np.testing.assert_array_equal(plt.gca().images[-1].get_array(),
                                  reference[0].astype(np.uint8))
    assert clipped() == []
    plt.figure()
    plt.imshow(reference[0])  # the float32 image as it is: clipped to [0, 1]
    assert len(clipped()) == 1
    plt.close("all")
    caplog.clear()

    run["ds"] = make_dali_dataset(color_dir, normalization="imagenet", **common)
    exec(batch, run)
    assert run["images"].min() < -1 and run["images"].max() < 3
    exec(any_normalization, run)
    assert clipped() == []
    axes = plt.gcf().axes
    assert len(axes) == 4
    expected = np.round(reference).astype(int)
    for ax, image, label in zip(axes, expected, np.asarray(labels)):
        shown = np.asarray(ax.images[0].get_array())
        assert shown.dtype == np.uint8 and np.abs(shown - image).max() <= 1
        assert ax.get_title() == plain.class_names[int(label)]
    plt.close("all")
    to_uint8 = run["to_uint8"]
    np.testing.assert_array_equal(to_uint8(reference), expected)
    for normalization in ("unit", "symmetric", "imagenet"):
        pipe = make_dali_pipeline(color_dir, normalization=normalization, **common)
        images = next(iter(pipe.epoch()))[0]
        assert np.abs(to_uint8(images, normalization) - expected).max() <= 1, normalization
