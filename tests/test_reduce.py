"""Reductions over any axis (examples/reduce, the reduce_* primitives): numerics on the CPU, code for every target."""
from __future__ import annotations

import pytest
import torch

import septran
from conftest import REPO, load_module, mapping_path, needs_nvcc
from septran.errors import FrontendError
from septran import task
from septran.frontend.graph import build_graph
from support.cuda_tools import nvcc_resource_usage

logic = load_module(REPO / "examples" / "reduce" / "reduce.py")
KERNELS: dict = {}
TORCH = {"sum": lambda x, d: x.sum(dim=d), "max": lambda x, d: x.amax(dim=d), "min": lambda x, d: x.amin(dim=d)}
SHAPES = {2: (37, 301), 3: (3, 29, 70), 4: (2, 3, 17, 65)}


def kernel(op: str, axis: int, rank: int, target: str = "cpu"):
    key = (op, axis, rank, target)
    if key not in KERNELS:
        KERNELS[key] = septran.compile(logic.reduce(op, axis, rank), mapping_file=mapping_path(target, "reduce"))
    return KERNELS[key]


@pytest.mark.parametrize("rank,axis,op", [(r, a, op) for r in (2, 3, 4) for a in range(r) for op in ("sum", "max")]
                         + [(2, 0, "min"), (3, 2, "min")])
@pytest.mark.build
def test_cpu_matches_torch(rank, axis, op):
    x = torch.randn(*SHAPES[rank], generator=torch.Generator().manual_seed(rank * 10 + axis))
    out = kernel(op, axis, rank)(x)
    ref = TORCH[op](x.double(), axis)
    assert out.shape == ref.shape
    assert (out.double() - ref).abs().max().item() <= 1e-5 * max(1.0, x.shape[axis] ** 0.5)


@pytest.mark.build
def test_cpu_fp16_column_sums():
    x = torch.randn(130, 67, generator=torch.Generator().manual_seed(3)).half()
    out = kernel("sum", 0, 2)(x)
    assert out.dtype == torch.float16
    assert torch.allclose(out.double(), x.double().sum(0), atol=2e-2, rtol=1e-3)


@pytest.mark.parametrize("target", ["cpu", "sm80", "sm90", "gfx942"])
def test_emitted_reduce_matches_golden(target, golden):
    dtype = "float32" if target == "cpu" else "float16"
    golden(f"reduce.{target}.py", kernel("sum", 0, 2, target).specialize(X=((1000, 4097), dtype)).tilelang_source)


def test_gpu_reduces_with_the_axis_as_dim():
    src = kernel("max", 1, 3, "sm90").specialize(X=((6, 100, 300), "float16")).tilelang_source
    assert "T.reduce_max(S, acc, dim=1, clear=False)" in src


@pytest.mark.parametrize("options, message", [
    ({}, "needs axis="), ({"axis": 2}, "axis=2 is not a dimension of a 2-D tile"),
    ({"axis": 0, "rank": 9}, "rank= must be 1 to 8"), ({"axis": 0, "dims": 1}, "takes the keywords axis= and rank="),
])
def test_bad_axis_is_refused_at_the_line(options, message):
    @task.define(leaf=True)
    def leaf(out, X):
        task.call_primitive("reduce_sum", out, X, **options)

    @task.define
    def entry(Y, X):
        task.launch(leaf, Y, X)

    with pytest.raises(FrontendError, match=message):
        build_graph(entry)


def test_a_misspelt_keyword_gets_a_suggestion():
    @task.define(leaf=True)
    def leaf(out, X):
        task.call_primitive("reduce_sum", out, X, axs=0)

    @task.define
    def entry(Y, X):
        task.launch(leaf, Y, X)

    with pytest.raises(FrontendError) as info:
        build_graph(entry)
    assert "did you mean axs= -> axis=" in str(info.value)


def test_fixed_primitives_take_no_keywords():
    @task.define(leaf=True)
    def leaf(out, X):
        task.call_primitive("row_sum", out, X, axis=0)

    @task.define
    def entry(Y, X):
        task.launch(leaf, Y, X)

    with pytest.raises(FrontendError, match="takes no keywords"):
        build_graph(entry)


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize("target,arch", [("sm90", "sm_90a"), ("sm80", "sm_80")])
@pytest.mark.parametrize("op,axis,rank", [("sum", 0, 2), ("sum", 1, 2), ("max", 1, 3)])
def test_cubin_has_no_spills(target, arch, op, axis, rank):
    shape = {2: (1000, 4097), 3: (6, 100, 300)}[rank]
    usage = nvcc_resource_usage(kernel(op, axis, rank, target).specialize(X=(shape, "float16")), arch)
    assert usage["spill_stores"] == 0 and usage["spill_loads"] == 0, usage


@pytest.mark.parametrize("shape,parts", [((1000, 4097), 256), ((7, 13, 5), 8), ((3,), 16), ((1,), 1)])
@pytest.mark.build
def test_total_sum_split_across_programs(shape, parts):
    """run_reduce.total: partial sums spread over the programs (row sums), then one program sums them."""
    run = load_module(REPO / "examples" / "reduce" / "run_reduce.py")
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(5))
    out = run.total(x, parts)
    assert out.shape == (1,)
    assert abs(out.double().item() - x.double().sum().item()) <= 1e-6 * x.numel() ** 0.5 * 10 + 1e-5
