# `make demo` and `make test` set everything up on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# DALI for the CUDA version of the NVIDIA driver (CUDA 12 without one; `make CUDA=13`
# chooses), and TensorFlow with its CUDA libraries (the gpu extra) where there is a driver.
DRIVER_CUDA := $(shell nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9]*\).*/\1/p' | head -n 1)
CUDA ?= $(if $(filter 13 14 15 16,$(DRIVER_CUDA)),13,12)
# PyTorch for the torch-backend tests, first: this CPU build is on these machines' disk,
# where a plain `torch` requirement would download a CUDA build of several GB.
TORCH ?= torch==2.13.0
comma := ,
EXTRAS := cuda$(CUDA),test$(if $(DRIVER_CUDA),$(comma)gpu)

.PHONY: setup demo test quick clean

setup: $(STAMP)

# DALI's TensorFlow plugin compiles against the installed TensorFlow: it comes last,
# without build isolation, at the version of the installed DALI (`dalipipe
# install-plugin`). `dalipipe doctor` then runs a small dataset.
$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip setuptools wheel
	$(BIN)/pip install -q "$(TORCH)"
	$(BIN)/pip install -q -e ".[$(EXTRAS)]"
	$(BIN)/dalipipe install-plugin -q
	$(BIN)/dalipipe doctor
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/dalipipe demo

# One pytest worker per core (pytest-xdist), each test file on one worker, each notebook's
# execution on its own, the longest first (tests/conftest.py). Costs: tests/README.md.
PYTEST := $(BIN)/python -m pytest -q -n auto --dist loadfile

test: $(STAMP)
	$(PYTEST)

# Everyday runs: the suite without the tests marked `slow` (CI runs `make test`).
quick: $(STAMP)
	$(PYTEST) -m "not slow"

clean:
	rm -rf $(VENV) data .pytest_cache
