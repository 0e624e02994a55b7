"""A task.compute that a vendor call computes whole (lowering/compute_forms.py): the cpu's ``row_affine`` runs the
norms' write, RMSNorm's ``X[i, j] * rstd[i] * W[j]`` and LayerNorm's ``(X[i, j] - mean[i]) * rstd[i] * W[j] + B[j]``.

Checked: which computes are forms (operand for operand, in the order written; others are not); a leaf bound to
the implementation whose compute is no form is refused at the binding, naming the forms; the shipped logics' writes
through it under the FlashAttention rule, float32 and 16-bit, odd shapes, in place and with X staged; Y is only
written (no zero fill: an output passed full of NaN comes back whole); Y staged on chip, or operands of two types,
refused at the mapping's line; the cost model counts the call.
"""
from __future__ import annotations

import pytest
import torch

import septran
from conftest import REPO, assert_flash_rule, edited_mapping, load_module
from septran import task
from septran.frontend.ir import PrimCall, walk
from septran.frontend.tracer import trace
from septran.lowering.compute_forms import recognise

LN = load_module(REPO / "examples" / "layernorm" / "layernorm.py")
RMS = load_module(REPO / "examples" / "rmsnorm" / "rmsnorm.py")
BOUND = {"rmsnorm": ("rms_write: vector_loops", "rms_write: row_affine"),
         "layernorm": ("ln_write: vector_loops", "ln_write: row_affine")}


def _leaf(compute):
    @task.define(leaf=True)
    def write(Y, X, W, B, c, s):
        task.compute(Y, compute(X, W, B, c, s))
    return write


@pytest.mark.parametrize("compute,form", [
    (lambda X, W, B, c, s: lambda i, j: X[i, j] * s[i] * W[j], ("row_scale", ["Y", "X", "s", "W"])),
    (lambda X, W, B, c, s: lambda i, j: (X[i, j] - c[i]) * s[i] * W[j] + B[j],
     ("row_normalize", ["Y", "X", "c", "s", "W", "B"])),
    (lambda X, W, B, c, s: lambda i, j: W[j] * X[i, j] * s[i], None),  # another order: no form
    (lambda X, W, B, c, s: lambda i, j: X[i, j] * s[i] * W[i], None),  # W read along the rows
    (lambda X, W, B, c, s: lambda i, j: X[j, i] * s[i] * W[j], None),  # X transposed
    (lambda X, W, B, c, s: lambda i, j: (X[i, j] + c[i]) * s[i] * W[j] + B[j], None),
    (lambda X, W, B, c, s: lambda i, j: (X[i, j] - c[i]) * s[i] * W[j] - B[j], None),
    (lambda X, W, B, c, s: lambda i, j: task.exp(X[i, j]) * s[i] * W[j], None),
], ids=["scale", "normalize", "order", "w_rows", "transposed", "plus_c", "minus_b", "exp"])
def test_which_computes_are_forms(compute, form):
    prim = next(p for p, _ in walk(trace(_leaf(compute))[0].body) if isinstance(p, PrimCall))
    found = recognise(prim)
    assert (None if found is None else (found.name, [a.name for a in found.args])) == form


def test_the_shipped_writes_are_forms():
    rms = septran.compile(RMS.rmsnorm_logic, mapping_file="mappings/cpu/rmsnorm.yaml").graph.tasks["rms_write"]
    ln = septran.compile(LN.layernorm_logic, mapping_file="mappings/cpu/layernorm.yaml").graph.tasks["ln_write"]
    assert [recognise(p).name for p, _ in walk(rms.body) if isinstance(p, PrimCall)] == ["row_scale"]
    assert [recognise(p).name for p, _ in walk(ln.body) if isinstance(p, PrimCall)] == ["row_normalize"]


def _kernel(tmp_path, op, *edits):
    logic = RMS.rmsnorm_logic if op == "rmsnorm" else LN.layernorm_logic
    return septran.compile(logic, mapping_file=edited_mapping(tmp_path, "cpu", op, BOUND[op], *edits))


def _inputs(rows, cols, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=gen) * 2 + 0.5
    return x.to(dtype), torch.randn(cols, generator=gen).to(dtype), torch.randn(cols, generator=gen).to(dtype)


def _refs(op, x, w, b):
    if op == "rmsnorm":
        f = lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w  # noqa: E731
        return f(x.double(), w.double()), f(x.float(), w.float()).to(x.dtype)
    ln = torch.nn.functional.layer_norm
    return ln(x.double(), x.shape[-1:], w.double(), b.double(), 1e-5), ln(x, x.shape[-1:], w, b, 1e-5)


def _call(k, op, x, w, b, **kw):
    return k(x, w, eps=1e-6, **kw) if op == "rmsnorm" else k(x, w, b, eps=1e-5, **kw)


@pytest.mark.build
@pytest.mark.parametrize("op,dtype", [("rmsnorm", torch.float32), ("rmsnorm", torch.float16), ("rmsnorm", torch.bfloat16),
                                      ("layernorm", torch.float32), ("layernorm", torch.float16)],
                         ids=["rms-fp32", "rms-fp16", "rms-bf16", "ln-fp32", "ln-fp16"])  # (LayerNorm's bfloat16
# statistics over X in place have no vendor function: its X is staged, in float32, another type than Y's)
@pytest.mark.parametrize("rows,cols", [(9, 1), (5, 768), (6, 4097), (33, 1000), (3, 17)])
def test_the_norms_through_the_form_match_torch(tmp_path, op, dtype, rows, cols):
    k = _kernel(tmp_path, op)
    x, w, b = _inputs(rows, cols, dtype, rows * cols)
    out = _call(k, op, x, w, b)
    src = k.latest.tilelang_source
    assert ("septran_cpu_row_scale_" if op == "rmsnorm" else "septran_cpu_row_normalize_") in src
    ref, theirs = _refs(op, x, w, b)
    assert_flash_rule(out, ref, theirs, f"{op} {rows}x{cols} {dtype}")


@pytest.mark.build
@pytest.mark.parametrize("op", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("rows,cols", [(5, 768), (6, 4097), (300, 17)])
def test_float32_weights_beside_16_bit_rows_go_through_the_form(op, dtype, rows, cols):
    """A model that keeps its norms' weights in float32: 16-bit rows with a float32 W (and B) run the form in place
    with the weights as they are (the shipped mappings), right under the FlashAttention rule."""
    logic = RMS.rmsnorm_logic if op == "rmsnorm" else LN.layernorm_logic
    k = septran.compile(logic, mapping_file=f"mappings/cpu/{op}.yaml")
    x, w, b = _inputs(rows, cols, torch.float32, rows + cols)
    x = x.to(dtype)
    out = _call(k, op, x, w, b)
    src = k.latest.tilelang_source
    short = "f16" if dtype == torch.float16 else "bf16"
    assert out.dtype == dtype and f"{'row_scale' if op == 'rmsnorm' else 'row_normalize'}_{short}_wf32" in src
    ref, theirs = _refs(op, x, w, b)
    assert_flash_rule(out, ref, theirs, f"{op} {rows}x{cols} {dtype} with float32 weights")


@pytest.mark.build
def test_x_staged_on_chip_feeds_the_form(tmp_path):
    """X in a LOCAL float32 tile (float32 rows: one type for X, W and Y), walked in 1024-wide tiles over 4097."""
    k = _kernel(tmp_path, "rmsnorm", ("X: GLOBAL, W: GLOBAL, rstd", "X: LOCAL, W: GLOBAL, rstd"))
    x, w, _ = _inputs(6, 4097, torch.float32, 1)
    out = k(x, w, eps=1e-6)
    assert "X_local" in k.latest.tilelang_source
    ref, theirs = _refs("rmsnorm", x, w, None)
    assert_flash_rule(out, ref, theirs, "6x4097 X staged")


@pytest.mark.build
def test_y_is_only_written(tmp_path):
    """Y starts from nothing: no zero fill before the call, and an output passed full of NaN is written whole."""
    k = _kernel(tmp_path, "layernorm")
    x, w, b = _inputs(7, 1500, torch.float16, 7)
    y = torch.full_like(x, float("nan"))
    _call(k, "layernorm", x, w, b, Y=y)
    assert not k.latest.program.read_outputs
    assert not y.isnan().any()
    ref, theirs = _refs("layernorm", x, w, b)
    assert_flash_rule(y, ref, theirs, "7x1500 passed output")


def test_a_compute_that_is_no_form_is_refused_at_the_binding(tmp_path):
    path = edited_mapping(tmp_path, "cpu", "rmsnorm", ("rms_sums_rstd: vector_loops", "rms_sums_rstd: row_affine"))
    with pytest.raises(septran.MappingError, match=r"row_affine implements row_scale, row_normalize, but "
                                                   r"rms_sums_rstd calls 'compute'") as err:
        septran.compile(RMS.rmsnorm_logic, mapping_file=path)
    assert "row_scale: Y[i, j] = X[i, j] * s[i] * w[j]" in str(err.value)
    assert err.value.loc.line == path.read_text().splitlines().index(
        next(l for l in path.read_text().splitlines() if "rms_sums_rstd: row_affine" in l)) + 1


@pytest.mark.build
def test_y_on_chip_or_two_types_are_refused(tmp_path):
    k = _kernel(tmp_path, "rmsnorm", ("mems: {Y: GLOBAL, X: GLOBAL, W: GLOBAL, rstd", "mems: {Y: LOCAL, X: GLOBAL, W: GLOBAL, rstd"))
    x, w, _ = _inputs(4, 64, torch.float32, 2)
    with pytest.raises(septran.LoweringError, match="row_affine takes Y in GLOBAL"):
        k(x, w, eps=1e-6)
    k = _kernel(tmp_path, "rmsnorm", ("X: GLOBAL, W: GLOBAL, rstd", "X: LOCAL, W: GLOBAL, rstd"))
    x, w, _ = _inputs(4, 64, torch.float16, 3)  # X staged widens it to float32 beside a float16 weight
    with pytest.raises(septran.SepTranError, match="row_scale"):
        k(x, w, eps=1e-6)


def test_the_cost_model_counts_the_form(tmp_path):
    from septran.target import load_target
    from septran.tuning.cost import estimate, program_value
    k = _kernel(tmp_path, "rmsnorm")
    program = k.specialize(X=((64, 512), "float16"), W=((512,), "float16")).program
    est = estimate(program, load_target("cpu"), program_value(program))
    assert est.flops >= 64 * 512 * 2 and not any("not counted" in n for n in est.notes)
