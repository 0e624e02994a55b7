"""The direct runner (septran/model/executor.py, steps.py): a compiled Llama block's decode steps call no SepTran
custom op through torch's dispatcher, give what the custom ops give and what eager torch gives, and place their
intermediates in one arena whose size is reported and smaller than fresh buffers would hold."""
from __future__ import annotations

import functools

import pytest
import torch

from conftest import REPO, load_module

model_runner = load_module(REPO / "examples" / "model_runner.py")
pytestmark = [pytest.mark.build, pytest.mark.skipif(model_runner.unavailable("septran") is not None,
                                                   reason=str(model_runner.unavailable("septran")))]
llama = model_runner.load(REPO / "examples" / "llama_block" / "model.py", "septran_example_llama_block_model")
SMALL = dict(hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=172, max_len=48)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _dispatched(monkeypatch) -> list:
    """The SepTran custom ops torch's dispatcher runs from now on, by name."""
    from septran import ops

    ops.load()
    seen = []
    for name in ("gemm", "rms_norm", "rope", "attention", "swiglu", "elementwise"):
        op = getattr(torch.ops.septran, name).default
        custom = torch._library.custom_ops._maybe_get_opdef(op)
        real = custom._backend_fns[None]
        monkeypatch.setitem(custom._backend_fns, None,
                            lambda *a, _real=real, _name=name, **k: (seen.append(_name), _real(*a, **k))[1])
    return seen


def _compiled(model, direct: bool, monkeypatch, executors: list, reports=None):
    from septran.model import executor
    from septran.model.backend import septran_backend

    monkeypatch.setenv("SEPTRAN_DIRECT", "1" if direct else "0")
    monkeypatch.setenv("SEPTRAN_LAUNCHER", "0")  # the steps called one by one (the launcher: test_model_launcher.py)
    real = executor.lower

    def keep(gm, **kw):
        done = real(gm, **kw)
        executors.append(done)
        return done

    monkeypatch.setattr(executor, "lower", keep)
    # a backend of its own: dynamo keeps a compiled frame per backend, so the two runs do not share graphs
    return torch.compile(model, backend=functools.partial(septran_backend, reports=reports), fullgraph=True)


def test_decode_runs_no_custom_op_and_matches_eager(monkeypatch):
    model = llama.build(llama.LlamaConfig(**SMALL))
    gen = torch.Generator().manual_seed(0)
    xs = [torch.randn(1, 13, 64, generator=gen)] + [torch.randn(1, 1, 64, generator=gen) for _ in range(4)]
    executors: list = []
    reports: list = []
    fn = _compiled(model, True, monkeypatch, executors, reports)
    caches, eager_caches, pos, seen = model.new_cache(), model.new_cache(), 0, None
    with torch.no_grad():
        for i, x in enumerate(xs):
            if i == 2:  # the prefill and the first decode step compiled: count from here
                seen = _dispatched(monkeypatch)
            got = fn(x, pos, *caches)
            torch.testing.assert_close(got, model(x, pos, *eager_caches), rtol=1e-4, atol=1e-4)
            pos += x.shape[1]
        assert seen == [], f"the direct runner dispatched {seen}"
        torch.ops.septran.rms_norm.default(xs[1], 64, None, 1e-6, torch.float32)
        assert seen == ["rms_norm"]  # the counter sees a dispatched op
    for ours, eager in zip(caches, eager_caches):
        torch.testing.assert_close(ours, eager, rtol=1e-4, atol=1e-4)
    # both graphs (prefill, decode) lowered; their steps ran; an arena planned, smaller than fresh buffers
    assert len(executors) == 2 and all(e.steps for e in executors)
    decode = executors[-1]
    assert all(s.calls == len(xs) - 1 for s in decode.steps), [(s, s.calls) for s in decode.steps]
    assert all(s.slow_calls == 0 for s in decode.steps), [(s, s.slow_calls) for s in decode.steps]  # all on plans
    assert decode.arena is not None and len(decode.arena.buckets) == 1  # every cache length: one bucket
    (_, views, (shapes, placement)), = decode.arena.buckets.values()
    assert 0 < decode.peak_bytes == placement.peak < placement.unplanned
    assert reports[-1].executors == [decode] and reports[-1].arena_bytes == decode.peak_bytes  # the peak reported
    assert f"{decode.peak_bytes:,} bytes of arena" in reports[-1].summary()


def test_direct_off_keeps_the_custom_ops(monkeypatch):
    """SEPTRAN_DIRECT=0: the graph runs as rewritten, through the custom ops."""
    model = llama.build(llama.LlamaConfig(**SMALL))
    executors: list = []
    fn = _compiled(model, False, monkeypatch, executors)
    x = torch.randn(1, 5, 64)
    with torch.no_grad():
        fn(x, 0, *model.new_cache())
        seen = _dispatched(monkeypatch)
        fn(x, 0, *model.new_cache())
    assert executors == [] and "gemm" in seen
