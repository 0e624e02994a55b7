"""Fused elementwise chains: the generated Task Lang kernel of each table op and of chains against torch
(FlashAttention's rule), input kinds and one build for many sizes, and the pattern on the ATen graphs of small
functions: maximal one-output chains, inner results used elsewhere, broadcasts it refuses with a reason."""
from __future__ import annotations

import json

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from hypothesis import example, given, settings, strategies as st

from septran.ops import kernels
from septran.ops import elementwise as ew
from septran.ops.logic.elementwise_chain import OPS, check
from septran.model.patterns import PATTERNS
from septran.model.patterns.base import Match, Refusal
from support.model_graphs import assert_flash_rule, compiled

pytestmark = pytest.mark.build  # every test here captures a graph or runs an op: kernels are built

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
run = torch.ops.septran.elementwise

UNARY_TORCH = {
    "neg": torch.neg, "exp": torch.exp, "log": torch.log, "tanh": torch.tanh, "sigmoid": torch.sigmoid,
    "relu": torch.relu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu,
    "erf": torch.erf, "rsqrt": torch.rsqrt, "sqrt": torch.sqrt, "abs": torch.abs, "reciprocal": torch.reciprocal,
    "same": lambda x: x,
}
BINARY_TORCH = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
                "maximum": torch.maximum, "minimum": torch.minimum}
POSITIVE = {"log", "rsqrt", "sqrt", "reciprocal"}


def _x(shape, dtype=torch.float32, seed=0, positive=False):
    x = 2 * torch.randn(shape, generator=torch.Generator().manual_seed(seed))
    return (x.abs() + 0.25 if positive else x).to(dtype)


def _spec(*ops) -> str:
    return ew.spec_of(ops)


def test_the_table_is_covered():
    assert set(OPS) == set(UNARY_TORCH) | set(BINARY_TORCH) | {"where"}


@pytest.mark.parametrize("name, dtype", [(n, torch.float32) for n in sorted(UNARY_TORCH)] + [
    (n, d) for n in ("exp", "gelu", "silu", "rsqrt", "same") for d in (torch.bfloat16, torch.float16)])
def test_each_unary_op(name, dtype):
    x = _x((3, 37), dtype, positive=name in POSITIVE)
    out = run([x], _spec((name, ("i", 0))), dtype)
    ref = UNARY_TORCH[name](x.double())
    assert_flash_rule(out, ref, UNARY_TORCH[name](x), eps=1e-5 if dtype == torch.float32 else 1e-2)


@pytest.mark.parametrize("name", sorted(BINARY_TORCH))
def test_each_binary_op(name):
    a, b = _x((5, 33), seed=1), _x((5, 33), seed=2, positive=name == "div")
    out = run([a, b], _spec((name, ("i", 0), ("i", 1))), torch.float32)
    assert_flash_rule(out, BINARY_TORCH[name](a.double(), b.double()), BINARY_TORCH[name](a, b))


@pytest.mark.parametrize("p", [-2.0, -1.0, -0.5, 0.5, 2.0, 3.0])
def test_pow_by_constants(p):
    x = _x((4, 21), positive=True)
    out = run([x], _spec(("pow", ("i", 0), ("c", p))), torch.float32)
    assert_flash_rule(out, x.double() ** p, x ** p)


def test_kinds_of_inputs_and_one_build_for_many_sizes(monkeypatch):
    """full, a last-dim vector, one value per row, a single value, a bool condition; rows of any count and
    columns of any length share one build on cpu (both dynamic)."""
    from support.model_graphs import count_builds

    kernels.clear()
    built = count_builds(monkeypatch)
    spec = _spec(("mul", ("i", 0), ("c", 2.0)), ("add", ("v", 0), ("i", 1)), ("sigmoid", ("v", 1)),
                 ("mul", ("v", 2), ("i", 2)), ("where", ("i", 4), ("v", 3), ("i", 3)))
    for n, (s, c) in enumerate([(1, 7), (3, 40), (17, 40), (5, 129), (64, 3)]):
        x, bias, row, one = _x((2, s, c), seed=n), _x(c, seed=9), _x((2, s, 1), seed=8), _x((), seed=7)
        cond = _x((2, s, c), seed=6) > 0
        out = run([x, bias, row, one, cond], spec, torch.float32)
        ref = torch.where(cond, torch.sigmoid(x * 2 + bias) * row, one)
        assert (out - ref).abs().max().item() < 1e-6
    assert len(built) <= 1 and len(kernels._CACHE) == 1
    assert len(next(iter(kernels._CACHE.values()))._variants) == 1


def test_mixed_dtypes_compute_in_float32_and_store_once():
    x, bias = _x((3, 10), torch.bfloat16), _x(10, torch.float32, 1)
    out = run([x, bias], _spec(("add", ("i", 0), ("i", 1)), ("tanh", ("v", 0))), torch.float32)
    assert out.dtype == torch.float32
    assert (out.double() - torch.tanh(x.double() + bias.double())).abs().max().item() < 1e-6


@pytest.mark.parametrize("ops, kinds, message", [
    ((("frobnicate", ("i", 0)),), ("full",), "not an elementwise op"),
    ((("add", ("i", 0)),), ("full",), "not an elementwise op"),
    ((("pow", ("i", 0), ("c", 7.0)),), ("full",), "exponents"),
    ((("exp", ("i", 3)),), ("full",), "no input"),
    ((("exp", ("v", 0)),), ("full",), "no earlier result"),
    ((("exp", ("i", 0)),), ("diagonal",), "kinds"),
    ((("add", ("i", 0), ("c", "1; import os")),), ("full",), "not a number"),
])
def test_malformed_chains_are_refused(ops, kinds, message):
    with pytest.raises(ValueError, match=message):
        check(ops, kinds)


def test_the_op_refuses_a_bad_spec_and_a_bad_broadcast():
    with pytest.raises(ValueError, match="not an elementwise op"):
        run([_x((2, 3))], json.dumps([["system", ["i", 0]]]), torch.float32)
    with pytest.raises(ValueError, match="broadcasts"):
        run([_x((2, 3, 4)), _x((2, 1, 4))], _spec(("add", ("i", 0), ("i", 1))), torch.float32)


_UN = sorted(set(UNARY_TORCH) - POSITIVE)


@settings(max_examples=6, deadline=None, derandomize=True)
@example([("abs", 0), ("exp", 0), ("exp", 0)])  # past float32's range (found by a run of random draws)
@given(st.lists(st.tuples(st.sampled_from(_UN + sorted(BINARY_TORCH)), st.integers(0, 10)), min_size=1, max_size=6))
def test_random_chains_match_torch(steps):
    """Random chains over two inputs: each step applies an op to the last result (and an earlier value)."""
    a, b = _x((3, 19), seed=1), _x((3, 19), seed=2)
    ops, vals = [], [("i", 0), ("i", 1)]
    refs = {dtype: [a.to(dtype), b.to(dtype)] for dtype in (torch.float64, torch.float32)}  # torch in both
    last = ("i", 0)
    for name, k in steps:
        if name in BINARY_TORCH:
            other = vals[k % len(vals)]
            if name == "div":
                name, other = "mul", other  # keep values finite
            ops.append((name, last, other))
            for r in refs.values():
                r.append(BINARY_TORCH[name](r[vals.index(last)], r[vals.index(other)]))
        else:
            ops.append((name, last))
            for r in refs.values():
                r.append(UNARY_TORCH[name](r[vals.index(last)]))
        last = ("v", len(ops) - 1)
        vals.append(last)
    out = run([a, b], _spec(*ops), torch.float32)
    # Where torch's float32 chain leaves float32's range (exp(exp(|x|)): inf), the kernel's does too; elsewhere it
    # is the float64 chain's value within float32's error (a random draw of exp twice found the float64 reference
    # finite past float32's range, compared with an atol scaled by it).
    ref, ref32 = refs[torch.float64][-1], refs[torch.float32][-1]
    inside = ref32.isfinite() & ref.isfinite() & (ref.abs() < torch.finfo(torch.float32).max)
    assert torch.equal(out[~inside].isnan(), ref32[~inside].isnan())
    assert torch.equal(out[~inside].isinf(), ref32[~inside].isinf())
    scale = (ref[inside].abs().max().item() if bool(inside.any()) else 0.0) + 1
    assert torch.allclose(out.double()[inside], ref[inside], rtol=1e-4, atol=1e-4 * scale)


def _compile(f, x, dtype=torch.float32):
    results = []
    with torch.no_grad():
        out = compiled(f, PATTERNS, results)(x)
    return out, results


def _kernels(results, kind=Match):
    return [r for r in results if isinstance(r, kind)]


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_chain_is_one_kernel(dtype):
    b = _x(40, dtype, 3)
    f = lambda x: torch.sigmoid(x * 2 + 1) * F.gelu(x + b) + F.silu(x).pow(2) / 3  # noqa: E731
    x = _x((2, 5, 40), dtype)
    out, results = _compile(f, x)
    (m,) = _kernels(results)
    assert m.pattern == "elementwise" and len(m.nodes) >= 9 and m.flops > 0
    assert_flash_rule(out, f(x.double()) if dtype == torch.float32 else
                      (lambda x: torch.sigmoid(x * 2 + 1) * F.gelu(x + b.double()) + F.silu(x).pow(2) / 3)(x.double()),
                      f(x), eps=1e-5)


def test_an_inner_result_used_twice_ends_chains():
    f = lambda x: (lambda y: (y * 2 + 1, y - 3))(torch.exp(x))  # noqa: E731
    x = _x((3, 8))
    out, results = _compile(f, x)
    ms = _kernels(results)
    assert len(ms) == 3 and all(m.pattern == "elementwise" for m in ms)
    assert sorted(len(m.nodes) for m in ms) == [1, 1, 2]
    for o, r in zip(out, f(x)):
        assert (o - r).abs().max().item() < 1e-5


def test_an_unknown_op_in_the_middle_stays_with_torch():
    f = lambda x: torch.cumsum(torch.tanh(x) * 2, -1) + 1  # noqa: E731
    x = _x((3, 8))
    out, results = _compile(f, x)
    ms = _kernels(results)
    assert len(ms) == 2 and not any("cumsum" in str(n.target) for m in ms for n in m.nodes)
    assert (out - f(x)).abs().max().item() < 1e-5


def test_refusals_say_why():
    noise = _x((2, 1, 6), seed=4)
    _, results = _compile(lambda x: x + noise, _x((2, 3, 6)))
    (r,) = _kernels(results, Refusal)
    assert "broadcasts to (2, 3, 6) other than along leading dimensions" in r.why
    _, results = _compile(lambda x: (x > 0).to(torch.int32) * 3, _x((2, 3)))
    assert any("int32 is not a dtype" in r.why for r in _kernels(results, Refusal))
    _, results = _compile(lambda x: torch.add(x, x, alpha=2), _x((2, 3)))
    assert any("alpha" in r.why for r in _kernels(results, Refusal))


def test_a_larger_pattern_keeps_its_last_node():
    """h + rmsnorm(x) * 2: the RMSNorm pattern takes its nodes, the chain reads its result."""
    norm = nn.RMSNorm(16, eps=1e-6)
    f = lambda x: x + norm(x) * 2  # noqa: E731
    x = _x((4, 16))
    out, results = _compile(f, x)
    assert sorted(m.pattern for m in _kernels(results)) == ["elementwise", "rms_norm"]
    with torch.no_grad():
        assert (out - f(x)).abs().max().item() < 1e-5


def test_dynamic_shapes_under_torch_compile():
    f = lambda x: F.silu(x) * 3 + x  # noqa: E731
    results = []
    g = compiled(f, PATTERNS, results, dynamic=True)
    with torch.no_grad():
        for s in (3, 5, 9):
            x = _x((2, s, 12), seed=s)
            assert (g(x) - f(x)).abs().max().item() < 1e-5
    assert any(isinstance(r, Match) for r in results)


def test_the_op_passes_opcheck_and_exports():
    spec = _spec(("mul", ("i", 0), ("c", 2.0)), ("add", ("v", 0), ("i", 1)), ("silu", ("v", 1)))
    x, b = _x((3, 5, 16)), _x(16, seed=1)
    torch.library.opcheck(run.default, ([x, b], spec, torch.float32),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_static",
                                      "test_aot_dispatch_dynamic"))

    class M(nn.Module):
        def forward(self, x, b):
            return run([x, b], spec, torch.float32)

    ep = torch.export.export(M(), (x, b))
    assert any(n.target is run.default for n in ep.graph.nodes)
    assert torch.equal(ep.module()(x, b), M()(x, b))


@pytest.mark.parametrize("target", ["sm80", "sm90", "gfx942"])
def test_gpu_targets_lower_a_chain_with_every_input_kind(target):
    """The generated logic with the GPU mappings lowers to CUDA / HIP (running it needs the GPU)."""
    import septran
    from septran.ops.logic.elementwise_chain import chain_logic

    ops_ = (("mul", ("i", 0), ("c", 2.0)), ("add", ("v", 0), ("i", 1)), ("sigmoid", ("v", 1)),
            ("mul", ("v", 2), ("i", 2)), ("where", ("i", 4), ("v", 3), ("i", 3)))
    kernel = septran.compile(chain_logic(ops_, ("full", "col", "row", "one", "full")),
                             kernels.mapping(target, "elementwise_chain"), target=target)
    v = kernel.specialize(X0=((37, 40), "bfloat16"), X1=((40,), "bfloat16"), X2=((37,), "float32"),
                          X3=((1,), "bfloat16"), X4=((37, 40), "bool"), Y=((37, 40), "bfloat16"))
    assert 'T.dynamic("X0_dim0"' in v.tilelang_source and "T.Parallel" in v.tilelang_source
    assert "ew_host" in v.device_source
