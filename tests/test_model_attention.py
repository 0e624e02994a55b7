"""The model level's attention: septran.attention against torch's scaled_dot_product_attention, and the
pattern on the ATen graphs of small modules (causal, masks, grouped heads, Llama's repeat_kv, a KV cache)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from conftest import assert_flash_rule
from septran.ops import kernels
from septran.model.patterns.attention import Attention
from septran.model.patterns.base import Match, Refusal
from support.model_graphs import apply, capture, compile_with, matches
from support.model_graphs import count_builds as _count_builds
from support import emit_records

pytestmark = pytest.mark.build  # every test here captures a graph or runs an op: kernels are built

torch.manual_seed(0)


def _rand(*shape, seed, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _check(q, k, v, mask=None, causal=False, scale=None):
    """septran.attention against torch in the inputs' dtype, both against float64 (FlashAttention's rule)."""
    gqa = k.shape[1] != q.shape[1]
    mask64 = mask if mask is None or mask.dtype == torch.bool else mask.double()
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask64, is_causal=causal,
                                         scale=scale, enable_gqa=gqa)
    torch_out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale, enable_gqa=gqa)
    out = torch.ops.septran.attention(q, k, v, mask, causal, scale or 0.0, False)
    assert out.dtype == q.dtype and out.shape == torch_out.shape
    assert_flash_rule(out, ref, torch_out, f"q {tuple(q.shape)} k {tuple(k.shape)}")


# (batch, Hq, Hkv, Sq, Sk, D, mask, causal, scale)
CASES = [
    (2, 3, 3, 37, 37, 16, None, True, None),
    (1, 2, 2, 5, 70, 8, None, True, None),  # torch's causal is top-left: keys from Sq on are seen by nobody
    (1, 2, 2, 70, 5, 8, None, True, None),  # more queries than keys: rows from Sk on see every key
    (2, 6, 2, 19, 33, 16, None, False, 0.3),  # grouped heads 6 / 2, an explicit scale
    (2, 6, 2, 19, 33, 16, None, True, None),
    (2, 3, 3, 1, 77, 16, None, False, None),  # a decode step against a cache of 77
    (2, 4, 4, 17, 29, 8, "float (Sq, Sk)", False, None),
    (2, 4, 4, 17, 29, 8, "float (B, H, Sq, Sk)", False, None),
    (2, 6, 2, 17, 29, 8, "bool (B, 1, 1, Sk)", False, 0.5),  # a padding mask, grouped heads
    (1, 2, 2, 9, 9, 8, "bool rows hidden", False, None),  # a row that sees nothing: zeros, as torch gives
]


def _mask(kind, b, h, sq, sk):
    if kind is None:
        return None
    if kind == "float (Sq, Sk)":
        return _rand(sq, sk, seed=5) * 2
    if kind == "float (B, H, Sq, Sk)":
        return _rand(b, h, sq, sk, seed=5) * 2
    if kind == "bool (B, 1, 1, Sk)":
        return _rand(b, 1, 1, sk, seed=5) > -0.5
    m = _rand(sq, sk, seed=5) > 0
    m[3] = False
    return m


@pytest.mark.parametrize("b, hq, hkv, sq, sk, d, mask, causal, scale", CASES)
def test_op_matches_torch(b, hq, hkv, sq, sk, d, mask, causal, scale):
    q, k, v = _rand(b, hq, sq, d, seed=1), _rand(b, hkv, sk, d, seed=2), _rand(b, hkv, sk, d, seed=3)
    _check(q, k, v, _mask(mask, b, hq, sq, sk), causal, scale)


@pytest.mark.slow
@settings(max_examples=12, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate])
@given(b=st.integers(1, 2), heads=st.sampled_from([(2, 2), (6, 2), (4, 1)]), sq=st.integers(1, 70),
       sk=st.integers(1, 70), mask=st.sampled_from([None, "float", "bool"]), causal=st.booleans(),
       scale=st.sampled_from([None, 0.2]))
def test_op_property(b, heads, sq, sk, mask, causal, scale):
    """Any lengths (queries fewer or more than keys), grouped heads, masks of every broadcast, causal or not."""
    hq, hkv = heads
    q, k, v = _rand(b, hq, sq, 16, seed=sq), _rand(b, hkv, sk, 16, seed=sk + 100), _rand(b, hkv, sk, 16, seed=sk + 200)
    m = None
    if mask is not None and not causal:
        m = _rand(b, 1, sq, sk, seed=7) if mask == "float" else _rand(1, hq, 1, sk, seed=7) > -0.3
    _check(q, k, v, m, causal, scale)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
def test_op_half_precision(dtype, causal):
    q, k, v = (_rand(2, 4, 23, 16, seed=s, dtype=dtype) for s in (1, 2, 3))
    _check(q, k, v, causal=causal)
    _check(q, k, v, mask=_rand(23, 23, seed=4, dtype=dtype))


class SDPA(torch.nn.Module):
    def __init__(self, causal=False, scale=None, gqa=False):
        super().__init__()
        self.causal, self.scale, self.gqa = causal, scale, gqa

    def forward(self, q, k, v, mask=None):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=self.causal, scale=self.scale,
                                              enable_gqa=self.gqa)


def repeat_kv(x, n):
    """Llama's: each KV head n times, consecutively."""
    b, h, s, d = x.shape
    return x[:, :, None, :, :].expand(b, h, n, s, d).reshape(b, h * n, s, d)


class LlamaAttention(torch.nn.Module):
    """Projections, heads as Llama splits them (a transpose of (B, S, H, D)), repeat_kv, causal SDPA, o_proj."""

    def __init__(self, dim=32, heads=4, kv_heads=2, repeat="repeat_kv"):
        super().__init__()
        self.h, self.kv, self.d, self.repeat = heads, kv_heads, dim // heads, repeat
        self.q = torch.nn.Linear(dim, heads * self.d, bias=False)
        self.k = torch.nn.Linear(dim, kv_heads * self.d, bias=False)
        self.v = torch.nn.Linear(dim, kv_heads * self.d, bias=False)
        self.o = torch.nn.Linear(heads * self.d, dim, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.h, self.d).transpose(1, 2)
        k = self.k(x).view(b, s, self.kv, self.d).transpose(1, 2)
        v = self.v(x).view(b, s, self.kv, self.d).transpose(1, 2)
        n = self.h // self.kv
        if self.repeat == "repeat_kv":
            k, v = repeat_kv(k, n), repeat_kv(v, n)
        else:
            k, v = k.repeat_interleave(n, dim=1), v.repeat_interleave(n, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(o.transpose(1, 2).reshape(b, s, self.h * self.d))


def _only_match(gm):
    found = [m for m in matches(gm, Attention())]
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize("causal, scale, mask", [(True, None, None), (False, 0.25, "float"), (False, None, "bool")])
def test_pattern_matches_sdpa(causal, scale, mask):
    q, k, v = _rand(2, 4, 9, 8, seed=1), _rand(2, 4, 12, 8, seed=2), _rand(2, 4, 12, 8, seed=3)
    m = None if mask is None else (_rand(9, 12, seed=4) if mask == "float" else _rand(9, 12, seed=4) > 0)
    inputs = (q, k, v) if m is None else (q, k, v, m)
    (gm,) = capture(SDPA(causal, scale), *inputs)
    match = _only_match(gm)
    assert isinstance(match, Match) and match.op is torch.ops.septran.attention.default
    assert match.args[4] is causal and match.args[5] == (scale or 0.0)
    assert match.flops == 2 * 2 * 4 * 9 * 12 * (8 + 8)
    if mask == "bool":  # read through torch's where(mask, 0, -inf)
        assert match.args[3].meta["val"].dtype == torch.bool and "bool mask" in match.kernel
    apply(gm, Attention())
    targets = {n.target for n in gm.graph.nodes if n.op == "call_function"}
    assert targets == {torch.ops.septran.attention.default}, targets
    ref = SDPA(causal, scale)(*(t if t.dtype == torch.bool else t.double() for t in inputs))
    assert_flash_rule(_run(gm, inputs), ref, SDPA(causal, scale)(*inputs))


def _run(gm, inputs):
    """A captured graph takes its placeholders in its own order: match them to the inputs by shape and dtype."""
    holders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    pool = list(inputs)
    args = []
    for h in holders:
        v = h.meta["val"]
        t = next(t for t in pool if tuple(t.shape) == tuple(v.shape) and t.dtype == v.dtype)
        pool.remove(t)
        args.append(t)
    out = gm(*args)
    return out[0] if isinstance(out, (tuple, list)) else out


def test_pattern_grouped_heads_enable_gqa():
    q, k, v = _rand(1, 6, 7, 8, seed=1), _rand(1, 2, 7, 8, seed=2), _rand(1, 2, 7, 8, seed=3)
    (gm,) = capture(SDPA(gqa=True), q, k, v)
    match = _only_match(gm)
    assert isinstance(match, Match) and "grouped heads" in match.kernel


@pytest.mark.parametrize("repeat", ["repeat_kv", "repeat_interleave"])
def test_llama_attention_reads_through_repeat_kv(repeat):
    """The pattern reads K and V before repeat_kv: the clones that repeat them leave the graph."""
    model = LlamaAttention(repeat=repeat).eval()
    x = _rand(2, 11, 32, seed=1)
    found = []
    compiled = compile_with(model, Attention(), record=found)
    with torch.no_grad():
        out, expected = compiled(x), model(x)
        ref = model.double()(x.double())
    assert len(found) == 1 and "grouped heads" in found[0].kernel and "causal" in found[0].kernel
    assert sum(n.target is torch.ops.aten.clone.default for n in found[0].nodes) == 2
    assert found[0].args[6] is True  # the layout torch gave the output: q's, (B, S, H, D) in memory
    assert_flash_rule(out, ref, expected)


@pytest.mark.parametrize("shape, dtype, why", [
    ((1, 2, 5, 8), torch.float64, "float64 is not a dtype"),
])
def test_pattern_refuses_with_a_reason(shape, dtype, why):
    q, k, v = (_rand(*shape, seed=s, dtype=dtype) for s in (1, 2, 3))
    (gm,) = capture(SDPA(), q, k, v)
    found = _only_match(gm)
    assert isinstance(found, Refusal) and why in found.why, found


class Decode(torch.nn.Module):
    """One decode step with grouped heads against a KV cache of any length (Llama's repeat_kv)."""

    def forward(self, q, k_cache, v_cache):
        return F.scaled_dot_product_attention(q, repeat_kv(k_cache, 3), repeat_kv(v_cache, 3))




def test_decode_at_32_cache_lengths_builds_once(monkeypatch):
    kernels.clear()
    built = _count_builds(monkeypatch)
    found = []
    compiled = compile_with(Decode(), Attention(), record=found)
    lengths = [1, 2, 3, 5, 8, 13, 17, 31, 32, 33, 47, 63, 64, 65, 77, 96, 100, 127, 128, 129, 150, 191, 200, 255,
               256, 257, 300, 333, 400, 511, 512, 513]
    assert len(set(lengths)) == 32
    q = _rand(1, 6, 1, 16, seed=1)
    for n, sk in enumerate(lengths):
        k, v = _rand(1, 2, sk, 16, seed=2 * n), _rand(1, 2, sk, 16, seed=2 * n + 1)
        with torch.no_grad():
            out = compiled(q, k, v)
        ref = Decode()(q.double(), k.double(), v.double())
        assert_flash_rule(out, ref, Decode()(q, k, v), f"cache {sk}")
    assert found and all(m.op is torch.ops.septran.attention.default for m in found)
    assert len(built) == 1, f"{len(built)} builds for 32 cache lengths"


def test_prefill_lengths_share_the_causal_build(monkeypatch):
    """Causal prefill at several lengths, and queries against a longer cache (top-left: the same causal kernel
    on the first Sq keys): one build (up to 8 queries run the decode mapping's kernel, tested below)."""
    kernels.clear()
    built = _count_builds(monkeypatch)
    for sq, sk in ((9, 9), (40, 40), (13, 50), (129, 129)):
        q, k, v = _rand(1, 2, sq, 16, seed=sq), _rand(1, 2, sk, 16, seed=sk + 1), _rand(1, 2, sk, 16, seed=sk + 2)
        _check(q, k, v, causal=True)
    assert len(built) == 1


def test_op_empty_sizes_are_torchs():
    q, k = _rand(1, 2, 3, 4, seed=1), torch.zeros(1, 2, 0, 4)
    assert torch.equal(torch.ops.septran.attention(q, k, k, None, False, 0.0, False), torch.zeros(1, 2, 3, 4))
    assert torch.ops.septran.attention(q[:, :, :0], q, q, None, True, 0.0, True).shape == (1, 2, 0, 4)


@pytest.mark.parametrize("hide_a_row", [False, True])
def test_op_float_mask_of_finfo_min(hide_a_row):
    """HF's float masks hide keys with finfo.min, which the logic's M / scale would overflow: where a row sees
    some key the weights are the same (0), and a row hidden entirely gets torch's average of V, not zeros."""
    q, k, v = _rand(2, 2, 6, 8, seed=1), _rand(2, 2, 9, 8, seed=2), _rand(2, 2, 9, 8, seed=3)
    hidden = torch.ones(6, 9, dtype=torch.bool).triu(4)
    mask = torch.zeros(2, 1, 6, 9).masked_fill(hidden, torch.finfo(torch.float32).min)
    if hide_a_row:
        mask[1, 0, 2] = torch.finfo(torch.float32).min
    _check(q, k, v, mask)


class LlamaLayer(torch.nn.Module):
    """A Llama decoder layer's attention and MLP as HF writes them (RMSNorm left to torch here), with a KV cache:
    RoPE on q and k, the new keys appended to the cache, repeat_kv, SDPA (causal in the prefill, the whole cache
    in a decode step), o_proj, then the SwiGLU MLP."""

    def __init__(self, dim=64, heads=4, kv_heads=2):
        super().__init__()
        self.attn = LlamaAttention(dim, heads, kv_heads)
        self.gate = torch.nn.Linear(dim, 96, bias=False)
        self.up = torch.nn.Linear(dim, 96, bias=False)
        self.down = torch.nn.Linear(96, dim, bias=False)

    def forward(self, x, cos, sin, k_cache, v_cache):
        from test_model_rope_swiglu import apply_rotary

        a, (b, s, _) = self.attn, x.shape
        q = apply_rotary(a.q(x).view(b, s, a.h, a.d).transpose(1, 2), cos, sin)
        k = apply_rotary(a.k(x).view(b, s, a.kv, a.d).transpose(1, 2), cos, sin)
        v = a.v(x).view(b, s, a.kv, a.d).transpose(1, 2)
        k, v = torch.cat([k_cache, k], dim=2), torch.cat([v_cache, v], dim=2)
        n = a.h // a.kv
        o = F.scaled_dot_product_attention(q, repeat_kv(k, n), repeat_kv(v, n), is_causal=s > 1)
        h = x + a.o(o.transpose(1, 2).reshape(b, s, a.h * a.d))
        return h + self.down(F.silu(self.gate(h)) * self.up(h)), k, v


def test_llama_layer_prefill_and_decode(monkeypatch):
    """Every RoPE, the attention and the SwiGLU of the layer run in SepTran; a prefill and 12 decode steps match
    eager torch; decode steps after the first build nothing."""
    from septran.model.patterns.rope import Rope
    from septran.model.patterns.swiglu import SwiGLU
    from test_model_rope_swiglu import tables

    torch.manual_seed(0)
    model = LlamaLayer().eval()
    record = []
    compiled = compile_with(model, SwiGLU(), Attention(), Rope(), record=record)
    kernels.clear()
    built = _count_builds(monkeypatch)
    cos_all, sin_all = tables(1, 40, 16)
    x = _rand(1, 21, 64, seed=1)
    k_cache = v_cache = torch.zeros(1, 2, 0, 16)
    ref_k = ref_v = k_cache
    steps = [x] + [_rand(1, 1, 64, seed=10 + i) for i in range(12)]
    pos = 0
    for i, x in enumerate(steps):
        cos, sin = cos_all[:, pos:pos + x.shape[1]], sin_all[:, pos:pos + x.shape[1]]
        with torch.no_grad():
            out, k_cache, v_cache = compiled(x, cos, sin, k_cache, v_cache)
            ref, ref_k, ref_v = model.double()(x.double(), cos.double(), sin.double(), ref_k, ref_v)
            before = slice(0, ref_k.shape[2] - x.shape[1])  # the cache as it was before this step
            torch_out = model.float()(x, cos, sin, ref_k.float()[:, :, before], ref_v.float()[:, :, before])[0]
        assert_flash_rule(out, ref, torch_out, f"step {i}")
        pos += x.shape[1]
        if i == 1:
            after_first_decode = len(built)
        if i == 0:
            kinds = sorted(m.pattern for m in record)
            assert kinds == ["attention", "rope", "rope", "swiglu"], kinds
    assert len(built) == after_first_decode, "a decode step after the first built a kernel"


def test_pattern_on_an_exported_graph():
    """torch.export keeps scaled_dot_product_attention whole (before run_decompositions): matched there too."""
    model = LlamaAttention().eval()
    ep = torch.export.export(model, (_rand(2, 7, 32, seed=1),))
    (found,) = matches(ep.graph_module, Attention())
    assert isinstance(found, Match) and "grouped heads" in found.kernel and "causal" in found.kernel


class ChunkDecode(torch.nn.Module):
    """A few new queries against a KV cache, causal aligned bottom-right, as torch writes it: an explicit mask."""

    def forward(self, q, k, v):
        sq, sk = q.shape[2], k.shape[2]
        mask = torch.ones(sq, sk, dtype=torch.bool, device=q.device).tril(sk - sq)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def test_bottom_right_causal_mask_is_the_logics_causal(monkeypatch):
    """The mask ones(Sq, Sk).tril(Sk - Sq) becomes the logic's causal mask (no mask tensor), at any lengths, one
    build; with more queries than keys the first rows see nothing and get zeros, as torch gives."""
    kernels.clear()
    built = _count_builds(monkeypatch)
    found = []
    compiled = compile_with(ChunkDecode(), Attention(), record=found)
    for sq, sk in ((3, 9), (4, 40), (2, 17), (5, 5), (7, 3)):
        q, k, v = _rand(1, 2, sq, 16, seed=sq), _rand(1, 2, sk, 16, seed=sk), _rand(1, 2, sk, 16, seed=sk + 1)
        with torch.no_grad():
            out = compiled(q, k, v)
        ref = ChunkDecode()(q.double(), k.double(), v.double())
        assert_flash_rule(out, ref, ChunkDecode()(q, k, v), f"{sq} queries, {sk} keys")
    assert found and all(m.args[3] is None and m.args[4] is True and m.args[7] is True for m in found)
    assert "bottom-right" in found[0].kernel
    assert len(built) == 1


def test_sm90_program_with_a_bool_mask_and_dynamic_lengths():
    """TileLang's TMA lowering stopped on bool tiles in SHARED ("Check failed: (0) is false: bool"): sm90's
    target.yaml now copies bool tiles without TMA (``copy_by_dtype``), so the program lowers."""
    from septran.ops.attention import attention_kernel

    f16 = "float16"
    variant = attention_kernel("sm90", False, True, "bool").specialize(
        Q=((1, 8, 128, 64), f16), K=((1, 2, 128, 64), f16), V=((1, 2, 128, 64), f16), M=((1, 1, 128, 128), "bool"))
    assert emit_records.emitted(variant, "sm90")  # TileLang lowers it (recorded: support/emit_records.py)


def test_unused_log_sum_exp_goes_with_the_call_and_a_used_one_is_refused():
    import operator

    q = _rand(1, 2, 5, 8, seed=1)
    (gm,) = capture(SDPA(), q, q, q)
    call = next(n for n in gm.graph.nodes if n.op == "call_function" and n.target is not operator.getitem)
    with gm.graph.inserting_after(call):
        lse = gm.graph.call_function(operator.getitem, (call, 1))
    (found,) = matches(gm, Attention())
    assert isinstance(found, Match) and lse in found.nodes
    with gm.graph.inserting_after(lse):
        gm.graph.call_function(torch.ops.aten.neg.default, (lse,))
    (found,) = matches(gm, Attention())
    assert isinstance(found, Refusal) and "log-sum-exp" in found.why


def test_few_queries_run_the_decode_mapping():
    """Up to 8 queries use mappings/<target>/attention_decode.yaml (blocks of a few rows), more the prefill one:
    attention_full.yaml without the causal mask (larger query blocks), attention.yaml with it."""
    from septran.ops.attention import attention_kernel

    kernels.clear()
    q, k = _rand(1, 2, 8, 16, seed=1), _rand(1, 2, 30, 16, seed=2)
    _check(q, k, k)
    _check(_rand(1, 2, 9, 16, seed=3), k, k)
    assert {key[0] for key in kernels._CACHE} == {"attention_decode", "attention_full"}
    _check(_rand(1, 2, 30, 16, seed=4), k, k, causal=True)
    assert {key[0] for key in kernels._CACHE} == {"attention_decode", "attention_full", "attention"}
    assert "BM = 1" in attention_kernel("cpu", False, False, "none", decode=True).tilelang_source


def test_long_sequences_run_the_large_tiles(cpu_flags):
    """512 queries and keys or more without the causal mask run attention_full.yaml's 256 x 256 point (two OpenBLAS
    calls per product where 64-key tiles made eight), or 128 x 128 at a head dim of at most 32: odd lengths (the
    last tiles overhang), a padding mask that hides the last keys, float16; a shorter call keeps the first point."""
    from septran.ops.attention import attention_kernel

    cpu_flags()  # no Zen 5 entry (entry 1: the scores' leaf)
    q, k, v = _rand(1, 2, 515, 40, seed=11), _rand(1, 2, 600, 40, seed=12), _rand(1, 2, 600, 40, seed=13)
    pad = torch.ones(1, 1, 1, 600, dtype=torch.bool)
    pad[..., 530:] = False
    _check(q, k, v, pad)
    assert "shape_points entry 5" in attention_kernel("cpu", False, False, "bool").tuning["source"]
    _check(q.half(), k.half(), v.half())
    assert "shape_points entry 5" in attention_kernel("cpu", False, False, "none").tuning["source"]
    _check(q[:, :, :300], k, v)
    assert "shape_points entry 2" in attention_kernel("cpu", False, False, "none").tuning["source"]
    _check(q[..., :32], k[..., :32], v[..., :32], pad)  # a head dim of at most 32: 128 x 128 tiles
    assert "shape_points entry 4" in attention_kernel("cpu", False, False, "bool").tuning["source"]
