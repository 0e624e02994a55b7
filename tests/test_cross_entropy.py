"""Cross-entropy (examples/cross_entropy): int64 class ids, float16/bfloat16/float32 logits, 50,000 classes."""
from __future__ import annotations

import pytest
import torch

import septran
from conftest import REPO, edited_mapping, mapping_path, needs_nvcc
from support.cuda_tools import nvcc_resource_usage

LOGIC = REPO / "examples" / "cross_entropy" / "cross_entropy.py"
KERNELS: dict = {}


def kernel(target: str = "cpu"):
    if target not in KERNELS:
        KERNELS[target] = septran.compile(logic_file=LOGIC, mapping_file=mapping_path(target, "cross_entropy"))
    return KERNELS[target]


def check(k, rows: int, classes: int, dtype, seed: int = 0, tol: float = 2e-5) -> None:
    gen = torch.Generator().manual_seed(seed)
    x = (4 * torch.randn(rows, classes, generator=gen)).to(dtype)
    y = torch.randint(0, classes, (rows,), generator=gen)
    y[0] = classes - 1  # the last class: in the last, overhanging column tile
    loss = k(x, y)
    ref = torch.nn.functional.cross_entropy(x.double(), y, reduction="none")  # float64, ids never rounded
    assert loss.dtype == torch.float32 and loss.shape == (rows,)
    err = (loss.double() - ref).abs().max().item()
    assert err < tol * max(1.0, ref.abs().max().item()), f"{rows}x{classes} {dtype}: {err}"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("rows,classes", [(1, 1), (3, 7), (13, 1025), (5, 50000)])
@pytest.mark.build
def test_cpu_matches_torch(dtype, rows, classes):
    check(kernel(), rows, classes, dtype, seed=rows + classes)


@pytest.mark.build
def test_class_ids_past_float16_precision():
    """Ids above 2048 are not exact in float16, above 2**24 not in float32: the comparison is between integers.
    Neighbouring classes hold very different logits, so a rounded id would pick the wrong one."""
    rows, classes = 6, 50000
    x = torch.zeros(rows, classes, dtype=torch.float16)
    x[:, 1::2] = 8.0  # odd classes: 8, even: 0
    y = torch.tensor([49999, 49998, 2049, 2050, 40001, 40002])
    ref = torch.nn.functional.cross_entropy(x.double(), y, reduction="none")
    assert (kernel()(x, y).double() - ref).abs().max().item() < 1e-5


@pytest.mark.build
def test_blocks_of_rows_that_overhang(tmp_path):
    """Blocks of 8 rows over 13 rows: the last block reads past the ids' end, and must not write there."""
    path = edited_mapping(tmp_path, "cpu", "cross_entropy", ("BM: 1,", "BM: 8,"), ("BN: 1024", "BN: 128"))
    k = septran.compile(logic_file=LOGIC, mapping_file=path)
    check(k, 13, 300, torch.float16)


@pytest.mark.build
def test_loss_into_a_passed_tensor():
    """(float32 losses against float64: a float32 tolerance; float64's default of 1e-7 failed one loss in a few
    hundred runs by half an ulp.)"""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(4, 100, generator=gen)
    y = torch.randint(0, 100, (4,), generator=gen)
    out = torch.full((4,), float("nan"))
    assert kernel()(x, y, L=out) is out
    torch.testing.assert_close(out.double(), torch.nn.functional.cross_entropy(x.double(), y, reduction="none"),
                               rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("target", ["cpu", "sm80", "sm90", "gfx942"])
def test_emitted_cross_entropy_matches_golden(target, golden):
    dtype = "float32" if target == "cpu" else "float16"
    variant = kernel(target).specialize(X=((1000, 50000), dtype), Y=((1000,), "int64"))
    golden(f"cross_entropy.{target}.py", variant.tilelang_source)


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize("target,arch", [("sm90", "sm_90a"), ("sm80", "sm_80")])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_cubin_has_no_spills(target, arch, dtype):
    variant = kernel(target).specialize(X=((1000, 50000), dtype), Y=((1000,), "int64"))
    usage = nvcc_resource_usage(variant, arch)
    assert usage["spill_stores"] == 0 and usage["spill_loads"] == 0, usage
