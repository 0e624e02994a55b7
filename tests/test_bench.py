"""The benchmark's code paths stay working (timings belong to the benchmark, not here)."""
from __future__ import annotations

import pytest


import septran
from conftest import GEMM_LOGIC, REPO, load_module, mapping_path, needs_nvcc


def _bench():
    return load_module(REPO / "bench" / "gemm.py")


@pytest.mark.build
def test_bench_runs_on_cpu():
    rows = _bench().main("cpu", "float32", [64], repeats=1)
    assert rows[0]["n"] == 64 and rows[0]["septran_ms"] > 0 and rows[0]["handwritten_ms"] > 0


@needs_nvcc
def test_bench_builds_the_handwritten_sm90_baseline():
    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=mapping_path("sm90"))
    kernel.specialize(A=((512, 512), "float16"), B=((512, 512), "float16"))
    hand = _bench().handwritten(kernel, 512, "float16")
    assert "tma_load" in hand.get_kernel_source()


def _attention_bench():
    return load_module(REPO / "bench" / "attention.py")


@pytest.mark.build
def test_attention_bench_runs_on_cpu():
    rows = _attention_bench().main("cpu", "float32", [(1, 1, 40, 70, 16)], causal=True, repeats=1)
    assert rows[0]["septran_ms"] > 0 and rows[0]["handwritten_ms"] is None and rows[0]["causal"]


@needs_nvcc
def test_attention_bench_builds_tilelangs_example_for_sm90():
    bench = _attention_bench()
    kernel = septran.compile(bench.attention(False), mapping_file=mapping_path("sm90", "attention"))
    shapes = dict(Q=((1, 2, 512, 64), "float16"), K=((1, 2, 512, 64), "float16"), V=((1, 2, 512, 64), "float16"))
    kernel.specialize(**shapes)
    hand = bench.handwritten(kernel, (1, 2, 512, 512, 64), False)
    src = hand.get_kernel_source()
    assert "tma_load" in src and "wgmma" in src


def _fuzz():
    """bench/fuzz.py imported by name: its worker function must be picklable for spawned processes."""
    import importlib
    import sys

    sys.path.insert(0, str(REPO / "bench"))
    return importlib.import_module("fuzz")


@pytest.mark.build  # the fuzz cases build in worker processes
def test_fuzz_script_counts_outcomes(tmp_path):
    import json

    report = _fuzz().main(["--mappings", "6", "--logic", "4", "--jobs", "1", "--json", str(tmp_path / "f.json")])
    counts = json.loads((tmp_path / "f.json").read_text())["counts"]
    assert sum(sum(c.values()) for c in counts.values()) == 10 and report["counts"] == counts


@pytest.mark.build  # the fuzz cases build in worker processes
def test_fuzz_pool_records_crashes_and_hangs_and_goes_on():
    fuzz = _fuzz()
    cases = [{"kind": "probe", "action": a, "index": i} for i, a in enumerate(["ok", "crash", "ok", "hang", "ok"])]
    results = {c["index"]: r["outcome"] for c, r in fuzz.run_all(cases, jobs=1, timeout=3)}
    assert results == {0: "correct", 1: "crash", 2: "correct", 3: "hang", 4: "correct"}


def test_the_gpu_benches_skip_cleanly_without_a_gpu(capsys):
    """make gpu's benchmarks on a machine without an NVIDIA GPU: a line each, exit status 0, nothing built."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: make gpu runs them")
    assert load_module(REPO / "bench" / "gpu.py").main() == 0
    assert load_module(REPO / "bench" / "models_gpu.py").main([]) == 0
    out = capsys.readouterr().out
    assert "no NVIDIA GPU, the GPU benchmarks are skipped" in out and "no NVIDIA GPU, skipped" in out
