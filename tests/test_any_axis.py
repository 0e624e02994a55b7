"""Softmax, log-softmax, LayerNorm and RMSNorm over every axis of 2-, 3- and 4-D inputs, on the CPU against torch.

The factories take the axis and the rank (``softmax(log, axis, rank)``, ``layernorm(axis, rank)``,
``rmsnorm(axis, rank)``); the shipped mappings serve every one. The reference is float64; shapes are odd, and
long enough along some axes that the column tile (BN) overhangs.
"""
from __future__ import annotations

import pytest
import torch

import septran
from conftest import REPO, load_module, mapping_path

softmax = load_module(REPO / "examples" / "softmax" / "softmax.py")
layernorm = load_module(REPO / "examples" / "layernorm" / "layernorm.py")
rmsnorm = load_module(REPO / "examples" / "rmsnorm" / "rmsnorm.py")

SHAPES = {2: (13, 1031), 3: (3, 1029, 7), 4: (2, 5, 3, 1027)}
CASES = [(rank, axis) for rank in (2, 3, 4) for axis in range(rank)]


def _input(rank: int, axis: int) -> torch.Tensor:
    return 3 * torch.randn(*SHAPES[rank], generator=torch.Generator().manual_seed(10 * rank + axis)) + 1


def _close(out, ref, what, torch_out):
    """FlashAttention's rule, as the other operators' tests: max |out - ref| <= 2 max |torch - ref| + 1e-5."""
    assert out.shape == ref.shape, what
    err = (out.double() - ref).abs().max().item()
    bound = 2 * (torch_out.double() - ref).abs().max().item() + 1e-5
    assert err <= bound, f"{what}: max |out - ref| = {err}, torch's {bound}"


@pytest.mark.parametrize("rank,axis", CASES)
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.build
def test_softmax_any_axis(rank, axis, log):
    x = _input(rank, axis)
    kernel = septran.compile(softmax.softmax(log, axis, rank), mapping_file=mapping_path("cpu", "softmax"))
    fn = torch.log_softmax if log else torch.softmax
    _close(kernel(x), fn(x.double(), dim=axis), f"rank {rank} axis {axis}", fn(x, dim=axis))


@pytest.mark.parametrize("rank,axis", CASES)
@pytest.mark.build
def test_layernorm_any_axis(rank, axis):
    x = _input(rank, axis)
    n = x.shape[axis]
    gen = torch.Generator().manual_seed(1)
    w, b = torch.randn(n, generator=gen), torch.randn(n, generator=gen)
    kernel = septran.compile(layernorm.layernorm(axis, rank), mapping_file=mapping_path("cpu", "layernorm"))
    def ln(x, w, b):
        return torch.nn.functional.layer_norm(x.movedim(axis, -1), (n,), w, b, 1e-5).movedim(-1, axis)

    _close(kernel(x, w, b), ln(x.double(), w.double(), b.double()), f"rank {rank} axis {axis}", ln(x, w, b))


@pytest.mark.parametrize("rank,axis", CASES)
@pytest.mark.build
def test_rmsnorm_any_axis(rank, axis):
    x = _input(rank, axis)
    n = x.shape[axis]
    w = torch.randn(n, generator=torch.Generator().manual_seed(2))
    kernel = septran.compile(rmsnorm.rmsnorm(axis, rank), mapping_file=mapping_path("cpu", "rmsnorm"))
    view = [n if d == axis else 1 for d in range(rank)]

    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(dim=axis, keepdim=True) + 1e-6) * w.view(view)

    _close(kernel(x, w), rms(x.double(), w.double()), f"rank {rank} axis {axis}", rms(x, w))


def test_default_is_the_last_axis_program():
    """The default axis and rank give today's tasks (the goldens of test_softmax and test_norms hold their code)."""
    assert layernorm.layernorm() is layernorm.layernorm(1, 2) is layernorm.layernorm_logic
    assert rmsnorm.rmsnorm() is rmsnorm.rmsnorm(-1, 2) is rmsnorm.rmsnorm_logic
    src = septran.compile(softmax.softmax(), mapping_file=mapping_path("cpu", "softmax")).specialize(
        X=((8, 300), "float32")).tilelang_source
    assert "septran_cpu_reduce_max_f32" in src  # the row reductions of the last-axis program


@pytest.mark.parametrize("bad", [(2, 2), (5, 0), (2, -3)])
def test_bad_axis_or_rank_is_refused(bad):
    rank, axis = bad
    with pytest.raises(ValueError):
        softmax.softmax(False, axis, rank)
