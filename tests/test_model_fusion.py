"""Graph-level fusion in the direct runner, against eager torch under the FlashAttention rule on odd sizes:
sibling projections (Q, K, V) as one GEMM on weights concatenated once (septran/model/patterns/fuse_gemms.py),
KV-cache writes in place (septran/model/inplace.py: a slice's and Hugging Face's index_copy_), the static cache's
masked attention inside one launcher, and the written-out GELU (tanh) as a GEMM's epilogue
(septran/model/patterns/gelu_written.py)."""
from __future__ import annotations

import functools
import math

import pytest
import torch
from torch import nn

from conftest import REPO, load_module

model_runner = load_module(REPO / "examples" / "model_runner.py")
pytestmark = [pytest.mark.build, pytest.mark.skipif(model_runner.unavailable("septran") is not None,
                                                   reason=str(model_runner.unavailable("septran")))]


class QKV(nn.Module):
    """Three projections of one input: two split their last dimension (heads), one is read flat."""

    def __init__(self, hidden=37, q=29, kv=11):
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(hidden, n, bias=False) for n in (q, kv, kv))

    def forward(self, x, cache):
        b, s, _ = x.shape
        q = self.q(x)
        k = self.k(x).view(b, s, 1, 11)
        v = self.v(x)
        cache[:, 1:1 + s] = v  # a write into an input, in place
        return q.sum(-1, keepdim=True) * k.flatten(2).sum(-1, keepdim=True) + v.reshape(b * s, 11).view(b, s, 11)[..., :1]


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _lowered(monkeypatch) -> list:
    from septran.model import executor

    made, real = [], executor.lower
    monkeypatch.setattr(executor, "lower", lambda gm, **kw: made.append((gm, real(gm, **kw))) or made[-1][1])
    return made


def test_qkv_as_one_gemm_and_the_cache_write_in_place(monkeypatch):
    from septran.model.backend import septran_backend
    from septran.model.patterns.fuse_gemms import ConcatWeights

    made = _lowered(monkeypatch)
    torch.manual_seed(0)
    model = QKV().eval()
    ref = QKV().double().eval()
    ref.load_state_dict({k: v.double() for k, v in model.state_dict().items()})
    fn = torch.compile(model, backend=functools.partial(septran_backend), fullgraph=True)
    with torch.no_grad():
        for s in (5, 7):  # the second size: a dynamic graph
            x = torch.randn(2, s, 37)
            cache, eager_cache, ref_cache = torch.zeros(2, 9, 11), torch.zeros(2, 9, 11), torch.zeros(2, 9, 11).double()
            got, eager, want = fn(x, cache), model(x, eager_cache), ref(x.double(), ref_cache)
            for a, e, w in ((got, eager, want), (cache, eager_cache, ref_cache)):
                bound = model_runner.bound((e.double() - w).abs().max().item(), w, torch.float32)
                assert (a.double() - w).abs().max().item() <= bound
        gm, ex = made[-1]
        concat = [n.target for n in gm.graph.nodes if isinstance(n.target, ConcatWeights)]
        assert len(concat) == 1 and len([s for s in ex.steps if s.kind == "gemm"]) == 1, gm.code
        assert not any(n.target is torch.ops.aten.slice_scatter.default for n in gm.graph.nodes), gm.code
        made_before = concat[0].made
        fn(x, cache)
        assert concat[0].made == made_before  # the weights are concatenated once, not per call
        model.k.weight.mul_(2)  # a weight written in place: concatenated again, the result follows it
        ref.k.weight.mul_(2)
        cache, ref_cache = torch.zeros(2, 9, 11), torch.zeros(2, 9, 11).double()
        torch.testing.assert_close(fn(x, cache).double(), ref(x.double(), ref_cache), rtol=1e-4, atol=1e-4)
        assert concat[0].made == made_before + 1


def test_inference_mode_weights_are_concatenated_once(monkeypatch):
    """A model whose weights are inference tensors (no version counter) concatenates Q, K and V once too."""
    from septran.model.backend import septran_backend
    from septran.model.patterns.fuse_gemms import ConcatWeights

    made = _lowered(monkeypatch)
    torch.manual_seed(1)
    with torch.inference_mode():
        model = QKV().eval()
        ref = QKV().double().eval()
        ref.load_state_dict({k: v.double() for k, v in model.state_dict().items()})
        fn = torch.compile(model, backend=functools.partial(septran_backend), fullgraph=True)
        x = torch.randn(3, 5, 37)
        for _ in range(3):
            cache, eager_cache, ref_cache = torch.zeros(3, 9, 11), torch.zeros(3, 9, 11), torch.zeros(3, 9, 11).double()
            got, eager, want = fn(x, cache), model(x, eager_cache), ref(x.double(), ref_cache)
            bound = model_runner.bound((eager.double() - want).abs().max().item(), want, torch.float32)
            assert (got.double() - want).abs().max().item() <= bound
        gm, _ = made[-1]
        concat = [n.target for n in gm.graph.nodes if isinstance(n.target, ConcatWeights)]
        assert len(concat) == 1 and concat[0].made == 1, gm.code


class Residual(nn.Module):
    """Residual adds after projections: without and with bias, the residual on either side; one add that must
    stay (an activation between), one whose product is read twice (stays), one broadcast residual (stays)."""

    def __init__(self, hidden=37):
        super().__init__()
        self.up = nn.Linear(hidden, hidden, bias=False)
        self.back = nn.Linear(hidden, hidden)
        self.act = nn.Linear(hidden, hidden, bias=False)
        self.twice = nn.Linear(hidden, hidden, bias=False)
        self.row = nn.Linear(hidden, hidden, bias=False)

    def forward(self, x):
        h = x * 0.5 + self.up(x)  # no bias, residual first
        y = self.back(h) + x  # bias, residual second
        z = torch.relu(self.act(y)) + y  # an activation: the add stays
        t = self.twice(z)
        w = t + z + t * 2  # the product read twice: stays
        return self.row(w) + w[:, :1]  # broadcast residual: stays


def test_residual_add_in_the_gemm_epilogue(monkeypatch):
    from septran.model.backend import septran_backend

    made = _lowered(monkeypatch)
    torch.manual_seed(2)
    model = Residual().eval()
    ref = Residual().double().eval()
    ref.load_state_dict({k: v.double() for k, v in model.state_dict().items()})
    fn = torch.compile(model, backend=functools.partial(septran_backend), fullgraph=True)
    with torch.no_grad():
        for b, s in ((3, 7), (1, 1), (2, 9)):  # a one-row call (its own point) and a dynamic size
            x = torch.randn(b, s, 37)
            got, eager, want = fn(x), model(x), ref(x.double())
            bound = model_runner.bound((eager.double() - want).abs().max().item(), want, torch.float32)
            assert (got.double() - want).abs().max().item() <= bound, (b, s)
    gm, ex = made[-1]
    kinds = [s.kind for s in ex.steps]
    assert kinds.count("gemm_residual") == 2, gm.code
    assert kinds.count("gemm") == 3, gm.code
    assert all(s.slow_calls == 0 for s in ex.steps if s.kind == "gemm_residual"), gm.code


@pytest.mark.parametrize("rows", [1, 3])
def test_gemm_residual_op_against_float64(rows):
    """The op itself on odd sizes, the weight either way, with and without bias (1 row: the one-row point)."""
    import septran.ops.gemm_residual as gr

    gen = torch.Generator().manual_seed(rows)
    for transposed, with_bias in ((True, False), (False, True)):
        x = torch.randn(rows, 2, 45, generator=gen)
        w = torch.randn(*((31, 45) if transposed else (45, 31)), generator=gen)
        bias = torch.randn(31, generator=gen) if with_bias else None
        r = torch.randn(rows, 2, 31, generator=gen)
        got = torch.ops.septran.gemm_residual(x, w, bias, r, transposed)
        want = gr.reference(x.double(), w.double(), None if bias is None else bias.double(), r.double(), transposed)
        eager = gr.reference(x, w, bias, r, transposed)
        bound = model_runner.bound((eager.double() - want).abs().max().item(), want, torch.float32)
        assert (got.double() - want).abs().max().item() <= bound


class Heads(nn.Module):
    """GPT-2's attention scores (q @ k^T leaves expands to the shape the heads already have and views around a
    bmm), a same-shape view of an input, and a same-shape view the graph returns (kept: an output)."""

    def forward(self, q, k, x):
        att = torch.softmax((q @ k.transpose(-2, -1)) * 0.3, dim=-1)
        y = x.view(x.shape) * 2
        return att @ k, y, y.view(y.shape)


def test_views_to_their_own_shape_are_removed(monkeypatch):
    made = _lowered(monkeypatch)
    gen = torch.Generator().manual_seed(3)
    q, k = torch.randn(2, 3, 5, 7, generator=gen), torch.randn(2, 3, 9, 7, generator=gen)
    x = torch.randn(5, 11, generator=gen)
    fn = torch.compile(Heads(), backend="septran", fullgraph=True)
    with torch.no_grad():
        got = fn(q, k, x)
    want = Heads()(q.double(), k.double(), x.double())
    eager = Heads()(q, k, x)
    for g, e, w in zip(got, eager, want):
        bound = model_runner.bound((e.double() - w).abs().max().item(), w, torch.float32)
        assert (g.double() - w).abs().max().item() <= bound
    gm, _ = made[-1]
    aten = torch.ops.aten
    assert not any(n.target is aten.expand.default for n in gm.graph.nodes), gm.code
    assert got[2].data_ptr() == got[1].data_ptr() and got[2].shape == got[1].shape


class StaticCacheStep(nn.Module):
    """Hugging Face's static-cache attention in small: the new keys and values written by position
    (``index_copy_``, as ``StaticCache`` writes), then attention over the whole cache with a bool mask that hides
    the slots past each query's position (``kv <= position``, as HF's sdpa mask); the heads read back flat."""

    def __init__(self, hidden=37, heads=3, dim=7):
        super().__init__()
        self.heads, self.dim = heads, dim
        self.q, self.k, self.v = (nn.Linear(hidden, heads * dim) for _ in range(3))
        self.o = nn.Linear(heads * dim, hidden)

    def forward(self, x, pos, kc, vc):
        b, s, _ = x.shape
        q, k, v = (p(x).view(b, s, self.heads, self.dim).transpose(1, 2) for p in (self.q, self.k, self.v))
        kc.index_copy_(2, pos, k)
        vc.index_copy_(2, pos, v)
        mask = torch.arange(kc.shape[2])[None, None, None, :] <= pos[None, None, :, None]
        o = nn.functional.scaled_dot_product_attention(q, kc, vc, attn_mask=mask)
        return self.o(o.transpose(1, 2).reshape(b, s, -1))


def test_static_cache_write_in_place_and_the_masked_attention_launched(monkeypatch):
    """The write is one in-place index_copy_ per cache (no whole-cache copy, no copy back); the decode step's
    attention with its bool mask runs on its kernel's plan, and every segment runs as one launcher."""
    from septran.model.backend import septran_backend

    made = _lowered(monkeypatch)
    torch.manual_seed(4)
    model = StaticCacheStep().eval()
    ref = StaticCacheStep().double().eval()
    ref.load_state_dict({k: v.double() for k, v in model.state_dict().items()})
    fn = torch.compile(model, backend=functools.partial(septran_backend), fullgraph=True)
    caches = [torch.randn(1, 3, 13, 7) for _ in range(2)]
    mine, eager, want = ([c.clone() for c in caches] for _ in range(3))
    want = [c.double() for c in want]
    with torch.no_grad():
        # a prefill of 9 tokens at positions 1..9 (its mask read: the causal kernel over 10 keys), then one token
        # per call (the launcher records on the first, replays after)
        for pos in (torch.arange(1, 10), torch.tensor([10]), torch.tensor([11]), torch.tensor([12])):
            x, p = torch.randn(1, len(pos), 37), int(pos[0])
            got, e, w = fn(x, pos, *mine), model(x, pos, *eager), ref(x.double(), pos, *want)
            for a, b, c in ((got, e, w), *zip(mine, eager, want)):
                bound = model_runner.bound((b.double() - c).abs().max().item(), c, torch.float32)
                assert (a.double() - c).abs().max().item() <= bound, p
    gm, ex = made[-1]
    aten = torch.ops.aten
    # (the writes run inside the launcher's segments now: their subgraphs count too)
    targets = [n.target for g in (gm, *(s.sub for s in ex.segments)) for n in g.graph.nodes]
    assert aten.index_copy.default not in targets and targets.count(aten.index_copy_.default) == 2, gm.code
    attention = [s for s in ex.steps if s.kind == "attention"]
    assert attention and all(s.slow_calls == 0 for s in attention), gm.code
    assert ex.segments and all(s.why_not is None and s.launches >= 2 for s in ex.segments), \
        [(s.__name__, s.why_not) for s in ex.segments]
    prefill = [s for s in made[0][1].steps if s.kind == "attention"]
    assert prefill and all(s.decided == 1 and s.slow_calls == 0 for s in prefill), made[0][0].code


def test_visible_prefix_of_a_static_cache_mask():
    """The run-time reading of HF's static-cache mask: key j visible iff j <= i + p; anything else is None."""
    from septran.model.causal_mask import visible_prefix

    def mask(sq, sk, p):
        return torch.arange(sk)[None, :] <= (torch.arange(sq) + p)[:, None]

    assert visible_prefix(mask(5, 9, 0), 5, 9) == 0
    assert visible_prefix(mask(5, 9, 4)[None, None], 5, 9) == 4
    assert visible_prefix(mask(5, 9, 4).expand(2, 3, 5, 9), 5, 9) == 4
    assert visible_prefix(mask(5, 9, 5), 5, 9) is None  # p + Sq past the keys: the last rows see every key
    holed = mask(5, 9, 2)
    holed[3, 0] = False
    assert visible_prefix(holed, 5, 9) is None
    two = torch.stack([mask(5, 9, 1), mask(5, 9, 2)])[:, None]  # one batch row shifted otherwise
    assert visible_prefix(two, 5, 9) is None
    assert visible_prefix(mask(5, 9, 1).float(), 5, 9) is None
    assert visible_prefix(mask(5, 9, 1), 4, 9) is None  # not the call's shape


def _gelu_new(x, c=0.044715):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + c * torch.pow(x, 3.0))))


class WrittenGelu(nn.Module):
    """GPT-2's MLP with Hugging Face's NewGELUActivation written out; then a chain with another constant (not
    GELU: it stays an elementwise chain)."""

    def __init__(self, hidden=37, inner=53):
        super().__init__()
        self.fc, self.proj = nn.Linear(hidden, inner), nn.Linear(inner, hidden)

    def forward(self, x):
        h = self.proj(_gelu_new(self.fc(x)))
        return _gelu_new(h, c=0.05)


def test_written_out_gelu_is_the_gemm_epilogue(monkeypatch):
    from septran.model.backend import septran_backend

    made = _lowered(monkeypatch)
    torch.manual_seed(5)
    model = WrittenGelu().eval()
    ref = WrittenGelu().double().eval()
    ref.load_state_dict({k: v.double() for k, v in model.state_dict().items()})
    reports: list = []
    fn = torch.compile(model, backend=functools.partial(septran_backend, reports=reports), fullgraph=True)
    with torch.no_grad():
        x = torch.randn(2, 5, 37) * 3  # into tanh's flat ends too
        got, eager, want = fn(x), model(x), ref(x.double())
    bound = model_runner.bound((eager.double() - want).abs().max().item(), want, torch.float32)
    assert (got.double() - want).abs().max().item() <= bound
    gm, ex = made[-1]
    assert [s.kind for s in ex.steps].count("gemm") == 2, gm.code
    assert any("gelu_tanh" in r.runs for r in reports[-1].rows), str(reports[-1])  # the first: an epilogue
    assert [s.kind for s in ex.steps].count("elementwise") == 1, gm.code  # the other constant: a chain


class BiasedQKV(nn.Module):
    """Qwen2's and BERT's projections: Q, K and V each with a bias, on one input; one more projection of the same
    input without a bias (a group of its own)."""

    def __init__(self, hidden=37):
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(hidden, n) for n in (29, 11, 11))
        self.plain = nn.Linear(hidden, 13, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        k = self.k(x).view(b, s, 1, 11)
        return self.q(x).sum(-1, keepdim=True) * k.flatten(2) + self.v(x) + self.plain(x)[..., :1]


def test_biased_projections_as_one_gemm(monkeypatch):
    from septran.model.backend import septran_backend
    from septran.model.patterns.fuse_gemms import ConcatWeights

    made = _lowered(monkeypatch)
    torch.manual_seed(6)
    model = BiasedQKV().eval()
    ref = BiasedQKV().double().eval()
    ref.load_state_dict({k: v.double() for k, v in model.state_dict().items()})
    fn = torch.compile(model, backend=functools.partial(septran_backend), fullgraph=True)
    with torch.no_grad():
        x = torch.randn(2, 5, 37)
        got, eager, want = fn(x), model(x), ref(x.double())
        bound = model_runner.bound((eager.double() - want).abs().max().item(), want, torch.float32)
        assert (got.double() - want).abs().max().item() <= bound
        model.k.bias.add_(1)  # a bias written in place: concatenated again
        ref.k.bias.add_(1)
        torch.testing.assert_close(fn(x).double(), ref(x.double()), rtol=1e-4, atol=1e-4)
    gm, ex = made[-1]
    concat = [n.target for n in gm.graph.nodes if isinstance(n.target, ConcatWeights)]
    assert len(concat) == 2 and [s.kind for s in ex.steps].count("gemm") == 2, gm.code
