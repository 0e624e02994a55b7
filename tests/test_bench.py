"""The benchmark's code paths stay working (timings belong to the benchmark, not here)."""
from __future__ import annotations

import importlib.util

import septran
from conftest import GEMM_LOGIC, REPO, mapping_path, needs_nvcc


def _bench():
    spec = importlib.util.spec_from_file_location("bench_gemm", REPO / "bench" / "gemm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_runs_on_cpu():
    rows = _bench().main("cpu", "float32", [64], repeats=1)
    assert rows[0]["n"] == 64 and rows[0]["septran_ms"] > 0 and rows[0]["handwritten_ms"] > 0


@needs_nvcc
def test_bench_builds_the_handwritten_sm90_baseline():
    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=mapping_path("sm90"))
    kernel.specialize(A=((512, 512), "float16"), B=((512, 512), "float16"))
    hand = _bench().handwritten(kernel, 512, "float16")
    assert "tma_load" in hand.get_kernel_source()
