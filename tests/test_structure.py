"""The package's shape: one definition of the options, imports that point one way."""

import argparse
import ast
import inspect
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

from dalipipe import make_dali_pipeline
from dalipipe.cli import build_parser
from dalipipe.options import Options
from dalipipe.utils import child_env

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "dalipipe"
# Arguments of make_dali_dataset that are not options of the graph.
DATASET_ONLY = ("strategy",)
# A finder that refuses TensorFlow, as a machine without it would, for a Python
# process started by a test (put before the others in `sys.meta_path`).
NO_TENSORFLOW = textwrap.dedent("""
    import sys

    class NoTensorFlow:
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] == "tensorflow":
                raise ImportError(f"No module named {name!r} (refused by the test)")

    sys.meta_path.insert(0, NoTensorFlow())
""")
# The command line's arguments named as options whose defaults are the command's
# own, not the option's: the demo's model and the benchmark's batch, the sample
# data's seed.
# The command line's own settings under an option's name: `convert --format` is the
# written files' format (TFRecord or WebDataset), not the dataset's `format`.
CLI_OWN_DEFAULTS = {("demo", "batch_size"), ("demo", "image_size"), ("bench", "batch_size"),
                    ("sample-data", "seed"), ("convert", "format")}


def option_defaults():
    return {name: Options.__dataclass_fields__[name].default for name in Options.names()}


def signature_defaults(function, skip=()):
    parameters = inspect.signature(function).parameters
    return {name: p.default for name, p in parameters.items()
            if name not in ("directory", "source", *skip) and p.kind is not p.VAR_KEYWORD}


def test_make_dali_pipeline_takes_exactly_the_options():
    # Its signature is made from `Options` (`pipeline_signature`), without `format`.
    pipeline_defaults = {k: v for k, v in option_defaults().items() if k != "format"}
    assert signature_defaults(make_dali_pipeline) == pipeline_defaults
    assert list(signature_defaults(make_dali_pipeline)) == list(Options.names(pipeline=True))
    assert all(p.kind is p.KEYWORD_ONLY for name, p in
               inspect.signature(make_dali_pipeline).parameters.items() if name != "directory")


def run_without_tensorflow(code):
    """The standard output of Python `code` run in a process where TensorFlow cannot
    be imported, with this checkout's `dalipipe`."""
    process = subprocess.run([sys.executable, "-c", NO_TENSORFLOW + textwrap.dedent(code)],
                             cwd=ROOT, env=child_env(), capture_output=True, text=True,
                             timeout=120)
    assert process.returncode == 0, process.stderr
    return process.stdout


def test_make_dali_dataset_takes_the_options_and_strategy():
    # Its explicit signature restates `Options`' defaults (IDEs read the source). It
    # is read where TensorFlow cannot be imported: `dalipipe.dataset` imports none.
    shown = run_without_tensorflow("""
        import inspect
        from dalipipe.dataset import make_dali_dataset
        assert "tensorflow" not in sys.modules
        parameters = inspect.signature(make_dali_dataset).parameters
        print(repr({name: p.default for name, p in parameters.items()
                    if p.kind is p.KEYWORD_ONLY}))
    """)
    parameters = ast.literal_eval(shown)
    defaults = {k: v for k, v in parameters.items() if k not in ("source", *DATASET_ONLY)}
    assert defaults == option_defaults()
    assert list(defaults) == list(Options.names())
    assert parameters["strategy"] is None


def test_the_command_line_restates_the_options_defaults():
    # `dalipipe check` and `convert` read a source as `make_dali_dataset` reads it;
    # flags (such as `--verbose`, the start-up lines) are not options.
    (commands,) = [action.choices for action in build_parser()._actions
                   if isinstance(action, argparse._SubParsersAction)]
    defaults = option_defaults()
    restated = {(command, action.dest): action.default
                for command, parser in commands.items() for action in parser._actions
                if action.dest in defaults and action.nargs != 0
                and (command, action.dest) not in CLI_OWN_DEFAULTS}
    assert ("convert", "on_bad_file") in restated
    assert all(v == defaults[dest] for (_, dest), v in restated.items()), restated


def readme_options():
    """`{name: default}` from the options table of `docs/options.md`, which the
    README links to (defaults as Python literals)."""
    text = (ROOT / "docs" / "options.md").read_text(encoding="utf-8")
    rows = {}
    for line in text.splitlines():
        match = re.match(r"\|\s*`(\w+)`\s*\|\s*`([^`]*)`\s*\|", line)
        if match:
            rows[match.group(1)] = ast.literal_eval(match.group(2))
    return rows


def test_readme_options_table_names_every_option_with_its_default():
    rows = readme_options()
    expected = {**option_defaults(), "strategy": None}
    assert rows == expected


def imports_of(path):
    """The dalipipe modules `path` imports, at any depth of the file."""
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    if module.endswith(".__init__"):
        module = module[: -len(".__init__")]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("dalipipe")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dalipipe"):
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                is_module = (ROOT / submodule.replace(".", "/")).with_suffix(".py").exists() \
                    or (ROOT / submodule.replace(".", "/")).is_dir()
                found.add(submodule if is_module else node.module)
    found.discard(module)
    return module, found


def test_the_import_graph_has_no_cycle():
    graph = dict(imports_of(path) for path in PACKAGE.rglob("*.py"))
    state, cycle = {}, []

    def visit(node, stack):
        state[node] = "open"
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                cycle.extend(stack[stack.index(target):] + [target])
                return True
            if target not in state and visit(target, stack + [target]):
                return True
        state[node] = "done"
        return False

    for module in sorted(graph):
        if module not in state and visit(module, [module]):
            break
    assert not cycle, " -> ".join(cycle)


def test_the_device_module_reaches_no_module_that_reads_its_placement():
    # `devices.place` decides first and the pipeline and the adapters read its
    # `Placement`: imports point from them to `devices`, never back.
    graph = dict(imports_of(path) for path in PACKAGE.rglob("*.py"))
    reached, todo = set(), ["dalipipe.devices"]
    while todo:
        for target in graph.get(todo.pop(), ()):
            if target not in reached:
                reached.add(target)
                todo.append(target)
    readers = {"dalipipe.options", "dalipipe.pipeline", "dalipipe.dataset",
               "dalipipe.tf_dataset", "dalipipe.py_dataset", "dalipipe.grain_dataset",
               "dalipipe.native", "dalipipe.passes"}
    assert not reached & readers, reached & readers


def imported_names(nodes):
    """The top-level package names that the import statements among `nodes` import."""
    names = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def importers_of(package, *, top_level_only=False):
    """The dalipipe modules that import `package`, anywhere in the file or (with
    `top_level_only`) in the module's own body, where importing the module runs it."""
    importers = set()
    for path in PACKAGE.rglob("*.py"):
        module, _ = imports_of(path)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        nodes = tree.body if top_level_only else ast.walk(tree)
        if package in imported_names(nodes):
            importers.add(module)
    return importers


def test_only_the_tensorflow_side_imports_tensorflow():
    # The TensorFlow adapter and its parts, the command line and the baselines; the
    # device module asks TensorFlow inside its functions only.
    on_import = {"dalipipe.tf_dataset", "dalipipe.tf_inputs", "dalipipe.tf_keras_dataset",
                 "dalipipe.tf_hooks", "dalipipe.cli", "dalipipe.doctor",
                 "dalipipe.bench.harness", "dalipipe.bench.loaders",
                 "dalipipe.bench.keras_segmentation", "dalipipe.bench.cached_loaders"}
    importers = importers_of("tensorflow")
    assert importers <= on_import | {"dalipipe.devices"}, importers - on_import
    top_level = importers_of("tensorflow", top_level_only=True)
    assert top_level <= on_import, top_level - on_import


@pytest.mark.parametrize("package", ["tensorflow", "torch", "jax", "keras"])
def test_devices_sharding_and_keras_config_import_no_framework_on_import(package):
    """`dalipipe.devices` runs where there is no TensorFlow (the GPU tests,
    `gpu_bench.py`); the frameworks are asked inside the functions that need them."""
    light = {"dalipipe.devices", "dalipipe.sharding", "dalipipe.keras_config",
             "dalipipe.options", "dalipipe.pipeline", "dalipipe.graph", "dalipipe.native"}
    assert not light & importers_of(package, top_level_only=True)


def test_the_package_shows_its_public_names_only():
    import dalipipe

    public = ["AutoAugment", "BackupAndRestore", "CutMix", "ImagePipeline", "InputReport",
              "MixUp", "RandAugment", "TrivialAugmentWide", "make_dali_dataset",
              "make_dali_pipeline", "make_sample_dataset"]
    assert sorted(dalipipe.__all__) == public
    assert [n for n in dir(dalipipe) if not n.startswith("_")] == public
    for name in public:
        assert getattr(dalipipe, name).__name__ == name


def test_framework_internals_are_reached_from_their_hooks_module_only():
    """Keras's private modules from `keras_hooks`, TensorFlow's from `tf_hooks`, DALI's
    private attributes from `dali_hooks`; the stack is walked by `keras_hooks` (fit's
    frame) and `calls.warn` (the user's line) only."""
    owners = {
        r"\bkeras\.src\b": {"dalipipe/keras_hooks.py"},
        r"\btensorflow\.python\b": {"dalipipe/tf_hooks.py"},
        r"\bauto_augment\._|\b_shutdown\(": {"dalipipe/dali_hooks.py"},
        r"\b_getframe\b|\bf_back\b": {"dalipipe/keras_hooks.py", "dalipipe/calls.py"},
    }
    for pattern, allowed in owners.items():
        found = {path.relative_to(ROOT).as_posix() for path in PACKAGE.rglob("*.py")
                 if re.search(pattern, path.read_text(encoding="utf-8"))}
        assert found <= allowed, (pattern, found - allowed)
