# `make demo` and `make test` set everything up on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TF_SPEC := tensorflow>=2.16,<2.22

.PHONY: setup demo test quick clean

setup: $(STAMP)

# DALI's TensorFlow plugin compiles against the installed TensorFlow: it comes last,
# without build isolation, at the version of the installed DALI. On a machine with an
# NVIDIA driver, TensorFlow comes with its CUDA libraries so that it sees the GPU.
$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip setuptools wheel
	if nvidia-smi >/dev/null 2>&1; then $(BIN)/pip install -q "tensorflow[and-cuda]$(subst tensorflow,,$(TF_SPEC))"; fi
	$(BIN)/pip install -q -e ".[test]"
	$(BIN)/pip install -q --no-build-isolation \
	  "nvidia-dali-tf-plugin-cuda120==$$($(BIN)/python -c 'import importlib.metadata as m; print(m.version("nvidia-dali-cuda120"))')"
	$(BIN)/python -c "import nvidia.dali.plugin.tf, dalipipe; print('dalipipe ready')"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/dalipipe demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

# Everyday runs: the suite without the tests marked `slow` (CI runs `make test`).
quick: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

clean:
	rm -rf $(VENV) data .pytest_cache
