"""The emitted TileLang per target, pinned by golden files; and one logic for all targets."""
from __future__ import annotations

import pytest

import septran
import septran.frontend.printer
from conftest import GEMM_LOGIC, REPO, load_module, mapping_path

TARGETS = ["cpu", "sm80", "sm90", "gfx942"]


def _specialize(target: str):
    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=mapping_path(target))
    dtype = "float32" if kernel.target.torch_device == "cpu" else "float16"
    return kernel, kernel.specialize(A=((1000, 520), dtype), B=((520, 777), dtype))


@pytest.mark.parametrize("target", TARGETS)
def test_emitted_tilelang_matches_golden(target, golden):
    _, variant = _specialize(target)
    golden(f"gemm.{target}.py", variant.tilelang_source)


@pytest.mark.parametrize("target", TARGETS)
def test_emission_is_deterministic(target):
    """Two separate compiles (fresh symbols, fresh traces) print the same text."""
    assert _specialize(target)[1].tilelang_source == _specialize(target)[1].tilelang_source


def test_one_logic_file_every_target():
    """The same logic file compiles for every target (GPUs, CPU, DSAs); only the mapping differs."""
    graphs = set()
    targets = sorted(p.parent.name for p in (REPO / "mappings").glob("*/gemm.yaml"))
    assert set(TARGETS + ["dsa_ref", "dsa_acme"]) <= set(targets)
    for target in targets:
        kernel, variant = _specialize(target)
        assert kernel.target.name == target
        assert variant.program.target == target
        graphs.add(septran.frontend.printer.format_graph(kernel.graph))
    assert len(graphs) == 1, "the task graph must not depend on the target"


def test_sm90_reads_like_tilelang_example():
    """With design.md's mapping, the sm90 program is TileLang's own GEMM example, line for line."""
    src = _specialize("sm90")[1].tilelang_source
    body = src[src.index("    with T.Kernel"):]
    assert body == (
        "    with T.Kernel(T.ceildiv(B_dim1, BN), T.ceildiv(A_dim0, BM), threads=256) as (bx, by):\n"
        "        A_shared = T.alloc_shared((BM, BK), \"float16\")\n"
        "        B_shared = T.alloc_shared((BK, BN), \"float16\")\n"
        "        C_local = T.alloc_fragment((BM, BN), \"float32\")\n"
        "        T.clear(C_local)\n"
        "        for k in T.Pipelined(T.ceildiv(A_dim1, BK), num_stages=3):\n"
        "            T.copy(A[by * BM, k * BK], A_shared)\n"
        "            T.copy(B[k * BK, bx * BN], B_shared)\n"
        "            T.gemm(A_shared, B_shared, C_local)\n"
        "        T.copy(C_local, C[by * BM, bx * BN])\n"
    )


def _softmax_cpu():
    softmax = load_module(REPO / "examples" / "softmax" / "softmax.py")
    kernel = septran.compile(softmax.softmax(), mapping_file=mapping_path("cpu", "softmax"))
    return kernel.specialize(X=((8, 300), "float32"))


@pytest.mark.build
@pytest.mark.parametrize("name", ["gemm", "softmax"])
def test_cpu_c_matches_golden(name, golden):
    """The C the cpu target builds (TileLang's C with SepTran's OpenMP pragma): a TileLang upgrade shows as a diff."""
    variant = _specialize("cpu")[1] if name == "gemm" else _softmax_cpu()
    golden(f"{name}.cpu.c", variant.device_source)
