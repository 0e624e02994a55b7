# Two commands do everything on a fresh machine (they create .venv first):
#   make demo   compile the GEMM example for this machine, run it, check it, print the TileLang
#   make test   run the test suite: everything CI (.ci/run) runs, on $(JOBS) pytest-xdist workers (10 min on 2 cores)
# The tiers (markers in pyproject.toml, unknown markers refused by --strict-markers):
#   make quick  the loop while working (under 2 minutes): the tests that build nothing, i.e. no marker of
#               build (lowers or builds a kernel), slow, gpu or nvcc. tests/support/build_guard.py fails an
#               unmarked test that starts a build: mark it @pytest.mark.build (or the module's pytestmark).
#   make gpu    every GPU test (marker gpu) and the GPU benchmarks (bench/gpu.py: bench/gemm.py, bench/attention.py
#               at the GPU's target), for the day a device is lent; without an NVIDIA GPU the tests skip, the benches too.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
# Workers share SEPTRAN_CACHE_DIR (atomic writes); one file per worker at a time, so a module's fixtures (its
# captured graphs, its kernels) are made once and the tests that count builds see their own process only.
JOBS   ?= 2
# make gpu's workers: its tests are mostly TileLang and nvcc builds on the host's cores, one GPU between them.
GPU_JOBS ?= 4
PYTEST  = $(BIN)/python -m pytest -q

.PHONY: setup demo test quick gpu bench clean

$(BIN)/.septran-installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	# torch first and pinned: here 2.13.0 is a CPU build on local disk; unpinned, pip downloads a multi-GB CUDA build.
	$(BIN)/pip install --quiet -c constraints.txt torch==2.13.0
	$(BIN)/pip install --quiet -c constraints.txt -e '.[test]'
	touch $@

setup: $(BIN)/.septran-installed

demo: setup
	$(BIN)/python examples/gemm/run_gemm.py

# --max-worker-restart 0: a worker that dies (the OOM killer, a segfault) fails the run at once, naming its test;
# xdist's default replaces it and, under --dist loadfile, then waits for ever at the end.
test: setup
	$(PYTEST) -n $(JOBS) --dist loadfile --max-worker-restart 0 --durations=20 tests

quick: setup
	$(PYTEST) -n $(JOBS) --max-worker-restart 0 -m "not build and not slow and not gpu and not nvcc" tests

gpu: setup
	$(PYTEST) -n $(GPU_JOBS) --max-worker-restart 0 -m gpu -rs tests
	$(BIN)/python bench/gpu.py

bench: setup
	$(BIN)/python bench/cpu.py --autotune softmax,layernorm,rmsnorm

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
