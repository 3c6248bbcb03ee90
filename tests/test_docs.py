"""The options are described once: the table of `docs/options.md`, which the `Args` of
`make_dali_dataset`'s docstring repeat word for word. Docstrings cite no C++ sources."""

import ast
import pathlib
import re

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
