"""bench/gemm_leaves.py's smoke test: one small case through its machinery (the shipped point, a kernel per leaf of
the mapping's !tune list that this CPU runs, interleaved with torch). The timings belong to the benchmark."""
from __future__ import annotations

import sys

import pytest
import torch

from conftest import REPO

pytestmark = pytest.mark.build  # builds a kernel per leaf


def test_a_small_case_times_every_leaf_this_cpu_runs(capsys):
    sys.path.insert(0, str(REPO / "bench"))
    import gemm_leaves

    case = dict(name="gemm_f32", logic="gemm", shapes=[(40, 24), (24, 36)], dtype=torch.float32, torch=torch.matmul,
                flops=2.0 * 40 * 36 * 24, shape="40x36x24")
    (row,) = gemm_leaves.run_case(case, [1], rounds=2, sample_s=0.001)
    assert not row["wrong"] and row["shipped_leaf"] in row["ratio"]
    assert {"gemm_leaf_blas", "gemm_leaf_mkl"} <= set(row["ratio"]) and "gemm_leaf_cpu" not in row["ratio"]
    assert {"gemm_leaf_blas_one_call", "gemm_leaf_mkl_one_call"} <= set(row["ratio"])  # 1 thread: one whole call each
    assert all(v > 0 for v in row["gflops"].values()) and "torch" in row["gflops"]
    assert "gemm_f32" in capsys.readouterr().out
