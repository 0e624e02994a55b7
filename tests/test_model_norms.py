"""The model level's norms: softmax / log-softmax, LayerNorm, RMSNorm as custom ops and as patterns over the
ATen graphs AOTAutograd gives (the septran backend's view), checked against eager torch under FlashAttention's
rule (error vs float64 at most twice torch's own in the same dtype)."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import septran.ops.norms  # noqa: F401 - registers torch.ops.septran.*
from septran.ops import kernels
from septran.model.patterns import PATTERNS
from septran.model.patterns.base import Match, Refusal
from support.model_graphs import assert_flash_rule, compiled
from support.model_graphs import count_builds as _count_builds
from support import emit_records

pytestmark = pytest.mark.build  # every test here captures a graph or runs an op: kernels are built

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
ops = torch.ops.septran


def _x(shape, dtype, seed=0):
    return (2 * torch.randn(shape, generator=torch.Generator().manual_seed(seed))).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, dim", [((5, 1025), -1), ((3, 7, 37), -1), ((3, 7, 37), 1), ((4, 9, 5), 0)])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_op(dtype, shape, dim, log):
    x = _x(shape, dtype)
    fn = torch.log_softmax if log else torch.softmax
    assert_flash_rule(ops.softmax(x, dim, log, dtype), fn(x.double(), dim), fn(x, dim))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("affine", ["both", "weight", "none"])
def test_layer_norm_op(dtype, affine):
    x = _x((3, 11, 129), dtype)
    w = _x(129, dtype, 1) if affine != "none" else None
    b = _x(129, dtype, 2) if affine == "both" else None
    ref = F.layer_norm(x.double(), (129,), None if w is None else w.double(), None if b is None else b.double(), 1e-5)
    assert_flash_rule(ops.layer_norm(x, 129, w, b, 1e-5), ref, F.layer_norm(x, (129,), w, b, 1e-5))


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_op_with_deviations_whose_squares_overflow_float16(dtype):
    """Rows of float16 with deviations of hundreds (an LLM's outlier features): the squares summed in float32.
    They went through Y's float16 tile once, overflowed, and the output was all zeros."""
    x = _x((3, 1029), dtype) * 200
    ref = F.layer_norm(x.double(), (1029,), None, None, 1e-5)
    got = ops.layer_norm(x, 1029, None, None, 1e-5)
    assert got.abs().amax() > 1
    assert_flash_rule(got, ref, F.layer_norm(x, (1029,), None, None, 1e-5))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("weight", [True, False])
def test_rms_norm_op(dtype, weight):
    x = _x((2, 13, 67), dtype)
    w = _x(67, dtype, 1) if weight else None
    ref = F.rms_norm(x.double(), (67,), None if w is None else w.double(), 1e-6)
    assert_flash_rule(ops.rms_norm(x, 67, w, 1e-6, dtype), ref, F.rms_norm(x, (67,), w, 1e-6))


def test_rms_norm_over_two_dims_and_into_another_dtype():
    x = _x((3, 4, 5, 6), torch.bfloat16)
    out = ops.rms_norm(x, 30, None, 1e-6, torch.float32)  # the upcast form: float32 out of a bfloat16 input
    assert out.dtype == torch.float32
    ref = F.rms_norm(x.double(), (5, 6), None, 1e-6)
    assert (out.double() - ref).abs().max().item() < 1e-5




def test_thirty_two_row_counts_build_once(monkeypatch):
    """Rows are the mapping's dynamic dimension: sequence lengths 1..32 share one build per op."""
    kernels.clear()
    built = _count_builds(monkeypatch)
    w, b = _x(48, torch.float32, 1), _x(48, torch.float32, 2)
    for s in range(1, 33):
        x = _x((2, s, 48), torch.float32, s)
        assert (ops.softmax(x, -1, False, torch.float32) - torch.softmax(x, -1)).abs().max() < 1e-6
        assert (ops.layer_norm(x, 48, w, b, 1e-5) - F.layer_norm(x, (48,), w, b)).abs().max() < 1e-5
        assert (ops.rms_norm(x, 48, w, 1e-6, torch.float32) - F.rms_norm(x, (48,), w, 1e-6)).abs().max() < 1e-5
    assert len(built) <= 3  # one per op (none where a build is on disk already)
    assert all(len(k._variants) == 1 for k in kernels._CACHE.values())


class HandRMS(nn.Module):
    """RMSNorm as models write it, in the input's dtype."""

    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.w, self.eps = nn.Parameter(torch.randn(d)), eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.w


class LlamaRMS(nn.Module):
    """Llama's: float32 inside, back to the input's dtype before the weight."""

    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.randn(d)), eps

    def forward(self, h):
        dtype = h.dtype
        h = h.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


MODULES = {
    "softmax": (lambda: (lambda x: F.softmax(x, -1)), "softmax"),
    "log_softmax_dim1": (lambda: (lambda x: F.log_softmax(x, 1)), "softmax"),
    "layer_norm": (lambda: nn.LayerNorm(40), "layer_norm"),
    "layer_norm_plain": (lambda: nn.LayerNorm(40, elementwise_affine=False), "layer_norm"),
    "rms_norm": (lambda: nn.RMSNorm(40, eps=1e-6), "rms_norm"),
    "rms_norm_plain": (lambda: nn.RMSNorm(40, elementwise_affine=False), "rms_norm"),
    "hand_rms": (lambda: HandRMS(40), "rms_norm"),
    "llama_rms": (lambda: LlamaRMS(40), "rms_norm"),
    "f_rms_norm": (lambda: (lambda x: F.rms_norm(x, (40,), None, 1e-5)), "rms_norm"),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(MODULES))
def test_patterns_take_the_graphs_of_modules(name, dtype):
    make, pattern = MODULES[name]
    torch.manual_seed(0)
    mod = make()
    ref_m = copy.deepcopy(mod).double() if isinstance(mod, nn.Module) else mod
    mod = mod.to(dtype) if isinstance(mod, nn.Module) else mod
    x = _x((2, 5, 40), dtype)
    results = []
    with torch.no_grad():
        out = compiled(mod, PATTERNS, results)(x)
        ref = ref_m(x.double())
        eager = mod(x)
    matches = [r for r in results if isinstance(r, Match)]
    assert [r.pattern for r in matches] == [pattern], results
    assert len(matches[0].nodes) >= 1 and matches[0].flops > 0
    assert_flash_rule(out, ref, eager)


def test_rms_norm_with_the_weight_first_and_x_times_x():
    w = torch.randn(24)
    results = []
    f = lambda x: w * (x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5))  # noqa: E731
    x = _x((3, 24), torch.float32)
    with torch.no_grad():
        out = compiled(f, PATTERNS, results)(x)
    assert [r.pattern for r in results if isinstance(r, Match)] == ["rms_norm"]
    assert (out - f(x)).abs().max().item() < 1e-5


def test_refusals_say_why():
    results = []
    with torch.no_grad():
        x = torch.randn(4, 6, dtype=torch.float64)
        compiled(lambda x: F.softmax(x, -1), PATTERNS, results)(x)
    assert any(isinstance(r, Refusal) and "float64" in r.why for r in results), results
    results = []
    f = lambda x: x * torch.rsqrt(x.pow(2).mean(1, keepdim=True) + 1e-6)  # noqa: E731 - over a middle dim
    with torch.no_grad():
        x = torch.randn(2, 5, 7)
        out = compiled(f, PATTERNS, results)(x)
    assert any(isinstance(r, Refusal) and r.pattern == "rms_norm" and "not the last" in r.why for r in results)
    assert (out - f(x)).abs().max().item() < 1e-5  # still right: the rest stayed with torch or went to chains


@pytest.mark.parametrize("op, args", [
    ("softmax", lambda x, w, b: (x, -1, False, torch.float32)),
    ("layer_norm", lambda x, w, b: (x, 16, w, b, 1e-5)),
    ("layer_norm", lambda x, w, b: (x, 16, None, None, 1e-5)),
    ("rms_norm", lambda x, w, b: (x, 16, w, 1e-6, torch.float32)),
])
def test_custom_ops_pass_opcheck(op, args):
    """Schema, fake kernel and AOTAutograd (static and dynamic shapes): what torch.compile and export rely on."""
    x, w, b = _x((3, 5, 16), torch.float32), _x(16, torch.float32, 1), _x(16, torch.float32, 2)
    torch.library.opcheck(getattr(ops, op).default, args(x, w, b),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_static",
                                      "test_aot_dispatch_dynamic"))


class _Block(nn.Module):
    """RMSNorm -> linear -> scaled softmax -> residual chain -> LayerNorm: five patterns."""

    def __init__(self, d=32):
        super().__init__()
        self.n1, self.ln, self.lin = nn.RMSNorm(d, eps=1e-6), nn.LayerNorm(d), nn.Linear(d, d)

    def forward(self, x):
        a = torch.softmax(self.lin(self.n1(x)) * 0.125, -1)
        return self.ln(x + a * 2.0)


def test_a_block_at_32_sequence_lengths_builds_each_kernel_once(monkeypatch):
    """Under torch.compile (automatic dynamic shapes after the second length), 32 sequence lengths run with
    one build per kernel and one variant each, per shape bucket of its mapping (``shape_points``: the cpu GEMM's
    calls of one row, and of at most 16 rows, run points of their own)."""
    kernels.clear()
    built = _count_builds(monkeypatch)
    torch.manual_seed(0)
    m, results = _Block(), []
    g = compiled(m, PATTERNS, results, dynamic=None)
    with torch.no_grad():
        for s in range(1, 33):
            x = _x((1, s, 32), torch.float32, s)
            assert (g(x) - m(x)).abs().max().item() < 1e-5
    assert {r.pattern for r in results if isinstance(r, Match)} == {"rms_norm", "gemm", "softmax", "layer_norm", "elementwise"}
    buckets = {name: {key[-1] for key in k._variants} for name, k in kernels._CACHE.items()}  # ("shape_points", k)
    assert len(built) <= sum(len(b) for b in buckets.values())
    assert all(len(k._variants) == len(buckets[name]) <= 3 for name, k in kernels._CACHE.items())


@pytest.mark.parametrize("target", ["sm80", "sm90", "gfx942"])
@pytest.mark.parametrize("op", ["softmax", "layernorm", "rmsnorm"])
def test_gpu_targets_lower_the_rows_dynamic_norms(target, op):
    import septran
    logic = {"softmax": lambda m: m.softmax(), "layernorm": lambda m: m.layernorm(), "rmsnorm": lambda m: m.rmsnorm()}
    kernel = septran.compile(logic[op](kernels.logic(op)), kernels.mapping(target, op, (("X", (0,)),)), target=target)
    x, v = ((37, 4097), "float16"), ((4097,), "float16")
    shapes = {"softmax": {"X": x}, "layernorm": {"X": x, "W": v, "B": v}, "rmsnorm": {"X": x, "W": v}}[op]
    v = kernel.specialize(**shapes)
    assert 'T.dynamic("X_dim0"' in v.tilelang_source
    assert emit_records.emitted(v, target)  # TileLang lowers it (recorded: support/emit_records.py)


def test_the_undecomposed_forms_torch_export_keeps():
    """torch.export (no decompositions) keeps aten.rms_norm, aten.layer_norm, aten.softmax.int and
    aten._fused_rms_norm: the patterns take those too."""
    from support.model_graphs import apply_patterns

    class M(nn.Module):
        def forward(self, x, w):
            fused = torch.ops.aten._fused_rms_norm(x, [16], w, 1e-5)[0]
            return F.rms_norm(x, (16,), w, 1e-6) + F.layer_norm(x, (16,), w, None) + torch.log_softmax(x, -1) + fused

    x, w = _x((3, 16), torch.float32), _x(16, torch.float32, 1)
    gm = torch.export.export(M(), (x, w)).module()
    results = []
    with torch.no_grad():
        out = apply_patterns(gm, PATTERNS, results)(x, w)
    taken = sorted(r.pattern for r in results if isinstance(r, Match))
    assert taken[:4] == ["elementwise", "layer_norm", "rms_norm", "rms_norm"] and "softmax" in taken, results
    assert (out - M()(x, w)).abs().max().item() < 1e-5


def test_a_missing_mapping_is_a_refusal_and_the_model_still_runs(monkeypatch):
    from septran.errors import MappingError
    def missing(target, op):
        raise MappingError(f"no mapping of operator {op!r} for target {target!r}")

    monkeypatch.setattr(kernels, "mapping_file", missing)
    f = lambda x: F.softmax(x, -1) * 2  # noqa: E731
    x, results = _x((3, 9), torch.float32), []
    with torch.no_grad():
        out = compiled(f, PATTERNS, results)(x)
    why = {r.pattern: r.why for r in results if isinstance(r, Refusal)}
    assert "cannot run softmax" in why["softmax"] and "cannot run elementwise_chain" in why["elementwise"]
    assert not any(isinstance(r, Match) for r in results) and torch.equal(out, f(x))
