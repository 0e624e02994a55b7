"""The SwiGLU MLP example: the fused gate/up kernel (two accumulators, one staged X) and the whole MLP."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

import septran
from conftest import REPO, load_module, mapping_path, needs_nvcc
from support.cuda_tools import nvcc_resource_usage

logic = load_module(REPO / "examples" / "swiglu_mlp" / "swiglu_mlp.py")
run = load_module(REPO / "examples" / "swiglu_mlp" / "run_swiglu_mlp.py")


def _gate_up(target: str):
    return septran.compile(logic.swiglu_mlp_logic, mapping_file=mapping_path(target, "swiglu_mlp"))


@pytest.fixture(scope="module")
def cpu_kernel():
    return _gate_up("cpu")


def _check(out, ref64, torch_out):
    """FlashAttention's rule: at most twice torch's own error in the input dtype (ref in float64)."""
    torch_err = (torch_out.double() - ref64).abs().max().item()
    err = (out.double() - ref64).abs().max().item()
    assert err <= 2 * torch_err + 1e-5, f"max |out - ref| = {err:.3e}, torch's = {torch_err:.3e}"


@settings(max_examples=6, deadline=None, derandomize=True)
@given(tokens=st.integers(1, 300), dim=st.integers(1, 300), hidden=st.integers(1, 300),
       dtype=st.sampled_from([torch.float32, torch.float16]))
@pytest.mark.build
def test_gate_up_matches_torch(cpu_kernel, tokens, dim, hidden, dtype):
    gen = torch.Generator().manual_seed(tokens * 7919 + dim * 31 + hidden)
    x, wg, wu = (torch.randn(*s, generator=gen).to(dtype) for s in ((tokens, dim), (dim, hidden), (dim, hidden)))
    h = cpu_kernel(x, wg, wu)
    assert h.shape == (tokens, hidden) and h.dtype == dtype

    def ref(x, wg, wu):
        return torch.nn.functional.silu(x @ wg) * (x @ wu)

    _check(h, ref(x.double(), wg.double(), wu.double()), ref(x, wg, wu))


@pytest.mark.build
def test_whole_mlp_matches_torch(monkeypatch):
    monkeypatch.setenv("SEPTRAN_TARGET", "cpu")
    monkeypatch.delenv("SEPTRAN_MAPPING", raising=False)
    mlp = run.SwiGLUMLP()
    gen = torch.Generator().manual_seed(3)
    x, wg, wu, wd = (torch.randn(*s, generator=gen) / 8 for s in ((37, 65), (65, 171), (65, 171), (171, 65)))
    _check(mlp(x, wg, wu, wd), run.reference(x.double(), wg.double(), wu.double(), wd.double()), run.reference(x, wg, wu, wd))


@pytest.mark.parametrize("target", ["cpu", "sm80", "sm90", "gfx942"])
def test_emitted_gate_up_matches_golden(target, golden):
    dtype = "float32" if target == "cpu" else "float16"
    variant = _gate_up(target).specialize(X=((1000, 1024), dtype), Wg=((1024, 2816), dtype), Wu=((1024, 2816), dtype))
    golden(f"swiglu_mlp.{target}.py", variant.tilelang_source)


@pytest.mark.parametrize("target,needles", [("sm90", ("tl::tma_load(", "wgmma")), ("sm80", ("cp_async", "mma")),
                                            ("gfx942", ("mfma",))])
@pytest.mark.build
def test_device_code(target, needles):
    src = _gate_up(target).specialize(X=((512, 512), "float16"), Wg=((512, 1024), "float16"),
                                      Wu=((512, 1024), "float16")).device_source
    for needle in needles:
        assert needle in src


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize("target,arch", [("sm90", "sm_90a"), ("sm80", "sm_80")])
def test_cubin_has_no_spills(target, arch):
    src = _gate_up(target).specialize(X=((1024, 1024), "float16"), Wg=((1024, 2816), "float16"),
                                      Wu=((1024, 2816), "float16")).device_source
    usage = nvcc_resource_usage(src, arch)
    assert usage["spill_stores"] == 0 and usage["spill_loads"] == 0, usage
