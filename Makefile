# Two commands do everything on a fresh machine (they create .venv first):
#   make demo   compile the GEMM example for this machine, run it, check it, print the TileLang
#   make test   run the test suite
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: setup demo test bench clean

$(BIN)/.septran-installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	# torch first and pinned: here 2.13.0 is a CPU build on local disk; unpinned, pip downloads a multi-GB CUDA build.
	$(BIN)/pip install --quiet -c constraints.txt torch==2.13.0
	$(BIN)/pip install --quiet -c constraints.txt -e '.[test]'
	touch $@

setup: $(BIN)/.septran-installed

demo: setup
	$(BIN)/python examples/gemm/run_gemm.py

test: setup
	$(BIN)/python -m pytest -q tests

bench: setup
	$(BIN)/python bench/cpu.py --autotune softmax,layernorm,rmsnorm

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
