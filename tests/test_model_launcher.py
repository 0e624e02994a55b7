"""The cpu launcher (septran/model/launcher): a compiled block's decode step runs each segment of steps and glue as
one generated C function. A step makes one Python-to-C crossing per segment (counted: launches plus any kernel
called from Python), gives eager torch's values at odd sizes, builds nothing new across 32 cache lengths, and a
segment the launcher cannot take runs its steps as before."""
from __future__ import annotations

import functools

import pytest
import torch

from conftest import REPO, load_module
from support.model_graphs import count_builds

model_runner = load_module(REPO / "examples" / "model_runner.py")
pytestmark = [pytest.mark.build, pytest.mark.skipif(model_runner.unavailable("septran") is not None,
                                                   reason=str(model_runner.unavailable("septran")))]
llama = model_runner.load(REPO / "examples" / "llama_block" / "model.py", "septran_example_llama_block_model")
gpt2 = model_runner.load(REPO / "examples" / "gpt2_block" / "model.py", "septran_example_gpt2_block_model")
# odd sizes: 3 query heads over 1 KV head, head_dim 16 (48 wide), an MLP of 100
ODD = dict(hidden=48, heads=3, kv_heads=1, head_dim=16, intermediate=100, max_len=48)
STEPS = 33  # decode steps: the first records, the next 32 each at a new cache length


@pytest.fixture(autouse=True)
def _fresh_dynamo(monkeypatch):
    monkeypatch.setenv("SEPTRAN_DIRECT", "1")
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _compiled(model, monkeypatch, launch: bool = True):
    from septran.model import executor
    from septran.model.backend import septran_backend

    monkeypatch.setenv("SEPTRAN_LAUNCHER", "1" if launch else "0")
    made, real = [], executor.lower

    def keep(gm, **kw):
        done = real(gm, **kw)
        made.append(done)
        return done

    monkeypatch.setattr(executor, "lower", keep)
    return torch.compile(model, backend=functools.partial(septran_backend), fullgraph=True), made


def _crossings(monkeypatch) -> list:
    """Every call from Python into C from now on: a segment's launch, or a kernel called on its own."""
    from septran.build.c_builder import CKernel
    from septran.model.launcher.runner import Segment

    seen = []
    real_kernel, real_launch = CKernel.__call__, Segment._launch
    monkeypatch.setattr(CKernel, "__call__", lambda self, *a: (seen.append("kernel"), real_kernel(self, *a))[1])
    monkeypatch.setattr(Segment, "_launch", lambda self, inputs: (seen.append(self.__name__),
                                                                  real_launch(self, inputs))[1])
    return seen


@pytest.fixture(scope="module")
def llama_run():
    """A prefill and STEPS decode steps of the odd-sized Llama block, launcher on, against eager (shared)."""
    mp = pytest.MonkeyPatch()
    try:
        torch._dynamo.reset()
        mp.setenv("SEPTRAN_DIRECT", "1")
        model = llama.build(llama.LlamaConfig(**ODD))
        fn, made = _compiled(model, mp)
        from septran.model.launcher import build

        gen = torch.Generator().manual_seed(0)
        caches, eager_caches, pos, out = model.new_cache(), model.new_cache(), 0, {"errors": []}
        with torch.no_grad():
            for i in range(STEPS + 1):
                x = torch.randn(1, 7 if i == 0 else 1, 48, generator=gen)
                if i == 2:  # the decode graph compiled and its segments recorded: count from here
                    out["crossings"], out["builds"] = _crossings(mp), count_builds(mp)
                    out["launchers_before"] = build.BUILDS[0]
                got, want = fn(x, pos, *caches), model(x, pos, *eager_caches)
                out["errors"].append((got - want).abs().max().item())
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
                pos += x.shape[1]
        out.update(made=made, caches=caches, eager_caches=eager_caches, launchers_after=build.BUILDS[0])
        yield out
    finally:
        mp.undo()
        torch._dynamo.reset()


def test_decode_matches_eager_at_odd_sizes(llama_run):
    for ours, eager in zip(llama_run["caches"], llama_run["eager_caches"]):
        torch.testing.assert_close(ours, eager, rtol=1e-4, atol=1e-4)  # the KV-cache writes made in C


def test_decode_crosses_once_per_segment(llama_run):
    decode = llama_run["made"][-1]
    assert decode.segments and all(s.fn is not None for s in decode.segments), \
        [(s, s.why_not) for s in decode.segments]
    names = [s.__name__ for s in decode.segments]
    # every decode step after the recording one: exactly one crossing per segment, no kernel called on its own
    assert llama_run["crossings"] == names * (STEPS - 1), llama_run["crossings"][:20]
    assert sum(s.nsteps for s in decode.segments) == len(decode.steps)  # every step of the graph in a segment


def test_no_build_across_32_cache_lengths(llama_run):
    assert llama_run["builds"] == []  # no kernel
    assert llama_run["launchers_after"] == llama_run["launchers_before"]  # no launcher


def test_gpt2_decode_launches_and_matches_eager(monkeypatch):
    model = gpt2.build(gpt2.GPT2Config(hidden=48, heads=3, mlp=100, max_len=24))
    fn, made = _compiled(model, monkeypatch)
    gen = torch.Generator().manual_seed(1)
    caches, eager_caches, pos = model.new_cache(), model.new_cache(), 0
    with torch.no_grad():
        for i in range(5):
            x = torch.randn(1, 5 if i == 0 else 1, 48, generator=gen)
            torch.testing.assert_close(fn(x, pos, *caches), model(x, pos, *eager_caches), rtol=1e-4, atol=1e-4)
            pos += x.shape[1]
    decode = made[-1]
    # every step in a launched segment (its attention as bmm, softmax, bmm over the cache's strided slices)
    assert decode.segments and all(s.launches == 3 for s in decode.segments), \
        [(s, s.why_not, s.launches) for s in decode.segments]
    assert sum(s.nsteps for s in decode.segments) == len(decode.steps)
    # the attention reads each head's keys and values where they lie in the cache (one call per head): the only
    # copies are the two KV-cache writes, none of the slices the attention reads
    source = "".join(s.source for s in decode.segments)
    assert source.count("st_copy(") - source.count("static void st_copy(") == 2, source
    for ours, eager in zip(caches, eager_caches):
        torch.testing.assert_close(ours, eager, rtol=1e-4, atol=1e-4)


def test_a_node_the_launcher_cannot_take_keeps_its_steps(monkeypatch):
    """A view the recorder cannot follow: the segment says why and runs its steps; the values stay right."""
    from septran.model.launcher import record
    from septran.model.launcher.cexpr import Unsupported

    def refuse(self, n, d, v, meta):
        raise Unsupported(f"{n.name}: refused by the test")

    monkeypatch.setattr(record.Recorder, "_view", refuse)
    model = llama.build(llama.LlamaConfig(**ODD))
    fn, made = _compiled(model, monkeypatch)
    gen = torch.Generator().manual_seed(2)
    caches, eager_caches, pos = model.new_cache(), model.new_cache(), 0
    with torch.no_grad():
        for i in range(4):
            x = torch.randn(1, 3 if i == 0 else 1, 48, generator=gen)
            torch.testing.assert_close(fn(x, pos, *caches), model(x, pos, *eager_caches), rtol=1e-4, atol=1e-4)
            pos += x.shape[1]
    decode = made[-1]
    assert decode.segments and all(s.fn is None and "refused by the test" in s.why_not for s in decode.segments)
    assert all(s.calls == 3 for s in decode.steps)  # every decode step ran every step once, from Python
    for ours, eager in zip(caches, eager_caches):
        torch.testing.assert_close(ours, eager, rtol=1e-4, atol=1e-4)


def test_off_keeps_the_steps(monkeypatch):
    model = llama.build(llama.LlamaConfig(**ODD))
    fn, made = _compiled(model, monkeypatch, launch=False)
    with torch.no_grad():
        fn(torch.randn(1, 3, 48), 0, *model.new_cache())
    assert made and all(e.segments == [] for e in made)


def test_two_threads_share_a_compiled_decode(monkeypatch):
    """Two threads run the same compiled decode graph at once: the one the arena is lent to launches on it, the
    other on fresh buffers; neither frees the arena the other uses (both direct-runner paths checked)."""
    import threading

    model = llama.build(llama.LlamaConfig(**ODD))
    fn, made = _compiled(model, monkeypatch)
    gen = torch.Generator().manual_seed(3)
    xs = [torch.randn(1, 1, 48, generator=gen) for _ in range(2)]
    with torch.no_grad():
        prefix = torch.randn(1, 4, 48, generator=gen)
        caches = [model.new_cache() for _ in range(2)]
        for c in caches:
            fn(prefix, 0, *c)
        want = []
        for x in xs:
            c = model.new_cache()
            model(prefix, 0, *c)
            want.append(model(x, 4, *c))
        fn(xs[0], 4, *[t.clone() for t in caches[0]])  # the decode graph compiled and recorded
        got, errors = {}, []

        def work(i):
            try:
                with torch.no_grad():
                    for _ in range(30):
                        got[i] = fn(xs[i], 4, *caches[i])
            except Exception as err:  # noqa: BLE001 - reported below
                errors.append(err)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors
    for i in range(2):
        torch.testing.assert_close(got[i], want[i], rtol=1e-4, atol=1e-4)
    assert made[-1].segments and all(s.fn is not None for s in made[-1].segments)


@pytest.mark.parametrize("which", ["llama", "gpt2"])
def test_bfloat16_decode_launches_with_its_conversions_and_matches_the_steps(monkeypatch, which):
    """A bf16 block's norms, RoPE, attention and elementwise kernels compute in float32 copies (their plans convert):
    the launcher widens their inputs into scratch copies before each call and narrows their outputs after it, as
    the plans do, so every prefill and decode segment launches, and its outputs and KV caches are bit for bit those
    of the same compiled block running its steps from Python (odd sizes, a prefill, 6 decode steps, a prefill
    again)."""
    def run(launch: bool):
        torch._dynamo.reset()
        model = (llama.build(llama.LlamaConfig(**ODD), dtype=torch.bfloat16) if which == "llama" else
                 gpt2.build(gpt2.GPT2Config(hidden=48, heads=3, mlp=100, max_len=24), dtype=torch.bfloat16))
        fn, made = _compiled(model, monkeypatch, launch=launch)
        gen = torch.Generator().manual_seed(5)
        caches, pos, outs = model.new_cache(dtype=torch.bfloat16), 0, []
        with torch.no_grad():
            for i in range(7):
                x = torch.randn(1, 5 if i == 0 else 1, 48, generator=gen).to(torch.bfloat16)
                outs.append(fn(x, pos, *caches).clone())
                pos += x.shape[1]
            # a second prefill on fresh caches: the prefill graph's segments launch (its first call recorded them)
            caches = caches + model.new_cache(dtype=torch.bfloat16)
            outs.append(fn(torch.randn(1, 5, 48, generator=gen).to(torch.bfloat16), 0, *caches[2:]).clone())
        return outs, caches, made

    launched, launched_caches, made = run(True)
    for graph in (made[0], made[-1]):  # the prefill's (its attention's output relaid after narrowing) and the decode's
        assert graph.segments and all(s.fn is not None for s in graph.segments), \
            [(s, s.why_not) for s in graph.segments]
        assert "st_bf16_f32" in "".join(s.source for s in graph.segments)
    steps, step_caches, _ = run(False)
    for a, b in zip(launched, steps):
        assert a.dtype == torch.bfloat16 and torch.equal(a, b)
    for a, b in zip(launched_caches, step_caches):
        assert torch.equal(a, b)
