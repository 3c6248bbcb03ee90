"""The project's benchmark and QA scripts, importable (`from benchmarks import fuzz`)
from a checkout: each runs as `python benchmarks/NAME.py`, and the ones that start
workers run them as `python -m benchmarks.NAME` with `dalipipe.utils.child_env`."""
