"""Benchmarks: the loaders dalipipe is compared with, and the harness that measures them."""
