"""LayerNorm and RMSNorm (examples/layernorm, examples/rmsnorm): numerics on the CPU, code for every target."""
from __future__ import annotations


import pytest
import torch

import septran
from conftest import REPO, assert_flash_rule, load_module, mapping_path, needs_nvcc
from support.cuda_tools import nvcc_resource_usage


LN = load_module(REPO / "examples" / "layernorm" / "layernorm.py")
RMS = load_module(REPO / "examples" / "rmsnorm" / "rmsnorm.py")
KERNELS: dict = {}


def kernel(op: str, target: str = "cpu"):
    key = (op, target)
    if key not in KERNELS:
        entry = LN.layernorm_logic if op == "layernorm" else RMS.rmsnorm_logic
        KERNELS[key] = septran.compile(entry, mapping_file=mapping_path(target, op))
    return KERNELS[key]


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def references(op: str, x, w, b, narrow):
    """The norm in float64 (the reference) and torch's in ``narrow``, the narrowest type of the call's tensors."""
    cols = x.shape[-1]
    if op == "rmsnorm":
        return rms_norm(x.double(), w.double(), 1e-6), rms_norm(x.to(narrow), w.to(narrow), 1e-6)
    ln = torch.nn.functional.layer_norm
    return ln(x.double(), (cols,), w.double(), b.double(), 1e-5), ln(x.to(narrow), (cols,), w.to(narrow), b.to(narrow), 1e-5)


def _inputs(rows, cols, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=gen) * 2 + 0.5  # a non-zero mean: the variance must not cancel
    return x.to(dtype), torch.randn(cols, generator=gen).to(dtype), torch.randn(cols, generator=gen).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("rows,cols", [(9, 1), (5, 768), (6, 4097)])
@pytest.mark.build
def test_layernorm_matches_torch(dtype, rows, cols):
    x, w, b = _inputs(rows, cols, dtype, rows + cols)
    out = kernel("layernorm")(x, w, b, eps=1e-5)
    ref = torch.nn.functional.layer_norm(x.float(), (cols,), w.float(), b.float(), 1e-5)
    assert_flash_rule(out, ref, torch.nn.functional.layer_norm(x, (cols,), w, b, 1e-5), f"{rows}x{cols} {dtype}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("rows,cols", [(9, 1), (5, 768), (6, 4097)])
@pytest.mark.build
def test_rmsnorm_matches_torch(dtype, rows, cols):
    x, w, _ = _inputs(rows, cols, dtype, rows * cols)
    out = kernel("rmsnorm")(x, w, 1e-6)  # a scalar may also follow the inputs positionally
    assert_flash_rule(out, rms_norm(x.float(), w.float(), 1e-6), rms_norm(x, w, 1e-6), f"{rows}x{cols} {dtype}")


@pytest.mark.parametrize("x_dtype, w_dtype, y_dtype", [
    (torch.bfloat16, torch.float32, torch.bfloat16), (torch.float32, torch.bfloat16, torch.float32),
    (torch.bfloat16, torch.bfloat16, torch.float32), (torch.float32, torch.float32, torch.bfloat16)])
@pytest.mark.parametrize("rows,cols", [(3, 257), (1030, 1024)])  # the plain store, and the streamed one (> 4 MB)
@pytest.mark.parametrize("op", ["rmsnorm", "layernorm"])
@pytest.mark.build
def test_norms_keep_bfloat16_tensors_and_widen_them_in_the_vendor(op, x_dtype, w_dtype, y_dtype, rows, cols):
    """The cpu mappings keep bfloat16 (keep_dtypes): each such tensor, input or output, is staged in LOCAL through
    the vendor's converting copies, or read and written in place by its row functions (bfloat16 rows with a float32
    weight), never copied into float32 by the runtime, whatever the others' types."""
    src = run_mixed(op, x_dtype, w_dtype, y_dtype, rows, cols)
    params = (("X", x_dtype), ("W", w_dtype), ("Y", y_dtype)) + ((("B", w_dtype),) if op == "layernorm" else ())
    for name, dtype in params:
        held = f"uint16_t* {name}" in src
        assert held == (dtype == torch.bfloat16), f"{name} ({dtype}) held as {'bits' if held else 'floats'}"
    if x_dtype == y_dtype == torch.bfloat16 and w_dtype == torch.float32:
        assert "_bf16_wf32" in src and "septran_cpu_load_f32_bf16" not in src
    else:
        assert "septran_cpu_load_f32_bf16" in src or x_dtype == w_dtype == torch.float32


def run_mixed(op: str, x_dtype, w_dtype, y_dtype, rows: int, cols: int) -> str:
    """The norm of X, W (and B) of these types into a Y of its own type, under the FlashAttention rule against
    float64 (torch's error in the narrowest of the types); the program's C."""
    x, w, b = _inputs(rows, cols, torch.float32, rows + cols)
    x, w, b = x.to(x_dtype), w.to(w_dtype), b.to(w_dtype)
    y = torch.empty(rows, cols, dtype=y_dtype)
    k = kernel(op)
    out = k(x, w, eps=1e-6, Y=y) if op == "rmsnorm" else k(x, w, b, eps=1e-5, Y=y)
    assert out is y
    ref, tor = references(op, x, w, b, min((x_dtype, w_dtype, y_dtype), key=lambda d: torch.finfo(d).bits))
    assert_flash_rule(out, ref, tor.to(y_dtype), f"{op} {rows}x{cols} {x_dtype} {w_dtype} {y_dtype}")
    return k.latest.device_source


@pytest.mark.build
def test_eps_is_a_scalar_argument():
    """eps defaults to the logic's 1e-5; another value is another program (a constant in it, as Triton's constexpr)."""
    x, w, b = _inputs(3, 100, torch.float32, 0)
    kern = kernel("layernorm")
    big = kern(x, w, b, eps=10.0)
    ref = torch.nn.functional.layer_norm(x, (100,), w, b, 10.0)
    assert_flash_rule(big, ref, ref)
    assert (big - kern(x, w, b)).abs().max() > 0.1
    assert "T.float32(10.0)" in kern.specialize(X=x, W=w, B=b, eps=10.0).tilelang_source
    assert "T.float32(1e-05)" in kern.specialize(X=x, W=w, B=b).tilelang_source
    assert kern.scalars == {"eps": 1e-5}


def test_scalar_argument_errors():
    x, w, b = _inputs(3, 100, torch.float32, 0)
    with pytest.raises(septran.CallError, match="eps must be a number, got str"):
        kernel("layernorm")(x, w, b, eps="small")
    with pytest.raises(septran.CallError, match="scalar eps given twice"):
        kernel("layernorm")(x, w, b, 1e-3, eps=1e-3)
    with pytest.raises(septran.CallError, match="takes 3 inputs"):
        kernel("layernorm")(x, w, b, 1e-3, 2.0)


@pytest.mark.parametrize("op", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize("target", ["cpu", "sm80", "sm90", "gfx942"])
def test_emitted_norm_matches_golden(op, target, golden):
    dtype = "float32" if target == "cpu" else "float16"
    shapes = dict(X=((1000, 4097), dtype), W=((4097,), dtype))
    if op == "layernorm":
        shapes["B"] = ((4097,), dtype)
    golden(f"{op}.{target}.py", kernel(op, target).specialize(**shapes).tilelang_source)


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize("target,arch", [("sm90", "sm_90a"), ("sm80", "sm_80")])
@pytest.mark.parametrize("op", ["layernorm", "rmsnorm"])
def test_cubin_has_no_spills(target, arch, op):
    shapes = dict(X=((1000, 4097), "float16"), W=((4097,), "float16"))
    if op == "layernorm":
        shapes["B"] = ((4097,), "float16")
    usage = nvcc_resource_usage(kernel(op, target).specialize(**shapes), arch)
    assert usage["spill_stores"] == 0 and usage["spill_loads"] == 0, usage


@pytest.mark.build
def test_jit_with_a_scalar(monkeypatch):
    """A notebook's @septran.jit over the RMSNorm logic: the mapping from SEPTRAN_MAPPING, eps by keyword."""
    monkeypatch.setenv("SEPTRAN_MAPPING", str(mapping_path("cpu", "rmsnorm")))
    rms = septran.jit(RMS.rmsnorm_logic)
    x, w, _ = _inputs(4, 50, torch.float32, 5)
    assert_flash_rule(rms(x, w, eps=0.5), rms_norm(x, w, 0.5), rms_norm(x, w, 0.5))
    assert "T.float32(0.5)" in rms.tilelang_source
