"""The GPU segment launcher on a device (SEPTRAN_LAUNCHER_CUDA=1): an odd-sized Llama block's prefill and decode
steps on CUDA (float16) run as CUDA launchers, give the same values as the same kernels called step by step, and a step
repeated at the same sizes and addresses is captured as a CUDA graph and replayed. Marked gpu (skipped where torch
sees no NVIDIA GPU). Written on a machine without one: never run yet."""
from __future__ import annotations

import functools

import pytest
import torch

from conftest import REPO, load_module, needs_gpu, needs_nvcc

model_runner = load_module(REPO / "examples" / "model_runner.py")
llama = model_runner.load(REPO / "examples" / "llama_block" / "model.py", "septran_example_llama_block_model")
pytestmark = [pytest.mark.build, pytest.mark.skipif(model_runner.unavailable("septran") is not None,
                                                   reason=str(model_runner.unavailable("septran")))]
ODD = dict(hidden=48, heads=3, kv_heads=1, head_dim=16, intermediate=100, max_len=48)


def _compiled(model, monkeypatch, launch: bool):
    from septran.model import executor
    from septran.model.backend import septran_backend

    monkeypatch.setenv("SEPTRAN_DIRECT", "1")
    monkeypatch.setenv("SEPTRAN_LAUNCHER_CUDA", "1" if launch else "0")
    made, real = [], executor.lower

    def keep(gm, **kw):
        done = real(gm, **kw)
        made.append(done)
        return done

    monkeypatch.setattr(executor, "lower", keep)
    torch._dynamo.reset()
    return torch.compile(model, backend=functools.partial(septran_backend), fullgraph=True), made


def _steps(fn, model, xs: list, repeat: int) -> list:
    """A prefill, a decode step per ``xs``, then the last step ``repeat`` more times (same sizes and tensors)."""
    caches, pos, outs = model.new_cache(device="cuda"), 0, []
    with torch.no_grad():
        for x in xs:
            outs.append(fn(x, pos, *caches).clone())
            pos += x.shape[1]
        pos -= xs[-1].shape[1]
        for _ in range(repeat):
            outs.append(fn(xs[-1], pos, *caches).clone())
    torch.cuda.synchronize()
    return outs


@needs_gpu
@needs_nvcc
@pytest.mark.parametrize("graphs", ["1", "0"])
def test_llama_block_on_cuda_launches_and_matches_its_steps(monkeypatch, graphs):
    from septran.model.launcher.cuda_runner import CudaSegment

    monkeypatch.setenv("SEPTRAN_CUDA_GRAPHS", graphs)
    model = llama.build(llama.LlamaConfig(**ODD), dtype=torch.float16).cuda()  # (what GPU targets are for)
    gen = torch.Generator(device="cuda").manual_seed(0)
    xs = [torch.randn(1, 7 if i == 0 else 1, 48, device="cuda", generator=gen, dtype=torch.float16)
          for i in range(6)]
    try:
        fn, _ = _compiled(model, monkeypatch, launch=False)
        want = _steps(fn, model, xs, repeat=4)
        fn, made = _compiled(model, monkeypatch, launch=True)
        got = _steps(fn, model, xs, repeat=4)
    finally:
        torch._dynamo.reset()
    for g, w in zip(got, want):  # the same kernels on the same tensors
        torch.testing.assert_close(g, w, rtol=1e-3, atol=1e-3)
    with torch.no_grad():  # and eager's values, in float16
        torch.testing.assert_close(got[0], model(xs[0], 0, *model.new_cache(device="cuda")), rtol=3e-2, atol=3e-2)
    segments = [s for done in made for s in done.segments]
    assert segments and all(isinstance(s, CudaSegment) for s in segments)
    launched = [s for s in segments if s.fn is not None]
    assert launched, [s.why_not for s in segments]
    captures, replays = sum(s.captures for s in launched), sum(s.replays for s in launched)
    if graphs == "1":
        assert captures >= 1 and replays >= captures
    else:
        assert captures == 0 and replays == 0
