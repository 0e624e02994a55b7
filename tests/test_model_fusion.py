"""Graph-level fusion in the direct runner, against eager torch under the FlashAttention rule on odd sizes:
sibling projections (Q, K, V) as one GEMM on weights concatenated once (septran/model/patterns/fuse_gemms.py),
and KV-cache writes in place (septran/model/inplace.py)."""
from __future__ import annotations

import functools

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
