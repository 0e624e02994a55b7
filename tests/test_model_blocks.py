"""The model examples under torch.compile(backend="septran"): the Llama and GPT-2 blocks match eager torch (the
FlashAttention rule, float64 reference), >= 90 % of their FLOPs run in SepTran kernels, the report has a row per
node, and 32 decode steps at 32 cache lengths build nothing after the first.

Skipped while the "septran" backend is not registered (septran.model's backend, another part of issue 13)."""
from __future__ import annotations

import pytest
import torch

from conftest import REPO, load_module
from septran.commands.tune_model import tunable_specialisations
from support.model_graphs import count_builds as _count_builds

model_runner = load_module(REPO / "examples" / "model_runner.py")
pytestmark = [pytest.mark.build, pytest.mark.skipif(model_runner.unavailable("septran") is not None,
                                                   reason=str(model_runner.unavailable("septran")))]

LLAMA_SMALL = dict(hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=172)
GPT2_SMALL = dict(hidden=64, heads=4, mlp=256)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()




@pytest.mark.parametrize("script, sizes", [
    ("llama_block/run_llama_block.py", dict(LLAMA_SMALL, gqa="repeat")),
    ("llama_block/run_llama_block.py", dict(LLAMA_SMALL, gqa="sdpa")),
    ("gpt2_block/run_gpt2_block.py", GPT2_SMALL),
])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_block_on_septran_matches_eager(capsys, script, sizes, dtype):
    run = load_module(REPO / "examples" / script)
    result = run.main(**sizes, prompt=37, steps=3, backend="septran", dtype=dtype, repeats=0)
    assert result["ok"], [(r["pos"], r["out"]) for r in result["rows"]]
    prefill, decode = result["reports"]
    for report in (prefill, decode):
        assert report.septran_share >= 0.9, str(report)
        assert report.rows and all(r.runs for r in report.rows)  # every node says what runs it
        assert any(r.runs.startswith("torch") for r in report.rows)  # the cache writes, views: torch's
    out = capsys.readouterr().out
    assert "of the FLOPs run in SepTran kernels" in out and "in SepTran (" in out


@pytest.mark.parametrize("script, sizes", [("llama_block/run_llama_block.py", LLAMA_SMALL),
                                           ("gpt2_block/run_gpt2_block.py", GPT2_SMALL)])
def test_decode_steps_at_32_cache_lengths_build_once(monkeypatch, script, sizes):
    """A prefill, one decode step (builds what decoding needs), then 32 steps at 32 cache lengths: no new build.
    (GPT-2's softmax runs over the cache length: its columns must be dynamic too.)"""
    import septran.ops.kernels

    run = load_module(REPO / "examples" / script)
    config = run.model.LlamaConfig if hasattr(run.model, "LlamaConfig") else run.model.GPT2Config
    model = run.model.build(config(max_len=64, **sizes))
    septran.ops.kernels.clear()  # kernels planned by earlier tests would not be specialised (observed) again
    fn = torch.compile(model, backend="septran", fullgraph=True)
    gen = torch.Generator().manual_seed(0)
    caches, eager_caches = model.new_cache(), model.new_cache()
    close = dict(rtol=1e-4, atol=1e-4)
    with torch.no_grad(), tunable_specialisations() as tunable:  # what `septran tune-model` would tune
        x = torch.randn(1, 20, sizes["hidden"], generator=gen)
        torch.testing.assert_close(fn(x, 0, *caches), model(x, 0, *eager_caches), **close)
        x = torch.randn(1, 1, sizes["hidden"], generator=gen)
        torch.testing.assert_close(fn(x, 20, *caches), model(x, 20, *eager_caches), **close)
    # One entry per tuning key; the GEMMs of the prefill (20 rows) and of the decode step (1 row) in their own
    # shape buckets, so each gets its own tuned point.
    keys = {(id(k), k.tuning_key(k.specialization(d, s)).digest()) for k, d, s in tunable}
    assert len(keys) == len(tunable) and all(k.mapping.space is not None for k, _, _ in tunable)
    assert {1, 20} <= {d["A"][0][0] for k, d, _ in tunable if "gemm" in k.graph.entry}, [k.graph.entry for k, _, _ in tunable]
    with torch.no_grad():
        built = _count_builds(monkeypatch)
        for pos in range(21, 53):
            x = torch.randn(1, 1, sizes["hidden"], generator=gen)
            torch.testing.assert_close(fn(x, pos, *caches), model(x, pos, *eager_caches), **close)
    assert built == [], f"decode steps built {built}"
    for ours, eager in zip(caches, eager_caches):
        torch.testing.assert_close(ours[:, :, :53], eager[:, :, :53], **close)
