"""Softmax and log-softmax (examples/softmax): numerics on the CPU, generated code for every target."""
from __future__ import annotations

import importlib.util

import pytest
import torch

import septran
from conftest import REPO, assert_flash_rule, mapping_path, needs_nvcc
from support.cuda_tools import nvcc_resource_usage

_spec = importlib.util.spec_from_file_location("softmax_logic_module", REPO / "examples" / "softmax" / "softmax.py")
logic = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(logic)

KERNELS: dict = {}


def kernel(log: bool, target: str = "cpu"):
    key = (log, target)
    if key not in KERNELS:
        KERNELS[key] = septran.compile(logic.softmax(log), mapping_file=mapping_path(target, "softmax"))
    return KERNELS[key]


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("rows,cols", [(7, 1), (33, 1000), (5, 4097)])
def test_cpu_matches_torch(log, dtype, rows, cols):
    """Rows of one column, of less than one tile... and of 4097: more than one tile, the last overhanging."""
    fn = torch.log_softmax if log else torch.softmax
    x = (3 * torch.randn(rows, cols, generator=torch.Generator().manual_seed(rows * cols))).to(dtype)
    out = kernel(log)(x)
    assert out.dtype == dtype and out.shape == x.shape
    assert_flash_rule(out, fn(x.float(), dim=-1), fn(x, dim=-1), f"{rows}x{cols} {dtype}")


def test_large_values_do_not_overflow():
    """The running maximum keeps exp() in range where a naive softmax overflows."""
    x = torch.randn(4, 600, generator=torch.Generator().manual_seed(1)) * 30 + 500
    assert_flash_rule(kernel(False)(x), torch.softmax(x, -1), torch.softmax(x, -1))


@pytest.mark.parametrize("target", ["cpu", "sm80", "sm90", "gfx942"])
def test_emitted_softmax_matches_golden(target, golden):
    dtype = "float32" if target == "cpu" else "float16"
    golden(f"softmax.{target}.py", kernel(False, target).specialize(X=((1000, 4097), dtype)).tilelang_source)


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize("target,arch", [("sm90", "sm_90a"), ("sm80", "sm_80")])
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_cubin_has_no_spills(target, arch, log):
    src = kernel(log, target).specialize(X=((1000, 4097), "float16")).device_source
    usage = nvcc_resource_usage(src, arch)
    assert usage["spill_stores"] == 0 and usage["spill_loads"] == 0, usage
