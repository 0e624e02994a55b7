"""Every example is a test: each script's main() runs and checks itself."""
from __future__ import annotations

import math

import pytest

from conftest import REPO, load_module as _load

pytestmark = pytest.mark.build  # 8 of its 11 tests build kernels


def test_run_gemm_on_cpu(monkeypatch, capsys):
    monkeypatch.setenv("SEPTRAN_TARGET", "cpu")
    monkeypatch.delenv("SEPTRAN_MAPPING", raising=False)
    run_gemm = _load(REPO / "examples" / "gemm" / "run_gemm.py")
    err = run_gemm.main(M=96, N=80, K=70, dtype="float32", repeats=1)
    assert err < 1e-4
    out = capsys.readouterr().out
    assert "@T.prim_func" in out and "GFLOP/s" in out


def test_run_bmm_on_cpu(monkeypatch, capsys):
    monkeypatch.setenv("SEPTRAN_TARGET", "cpu")
    monkeypatch.delenv("SEPTRAN_MAPPING", raising=False)
    run_bmm = _load(REPO / "examples" / "bmm" / "run_bmm.py")
    assert run_bmm.main(batch=3, M=40, N=24, K=56, dtype="float32", repeats=1) < 1e-4
    assert "T.Kernel(T.ceildiv(B_dim2, BN), T.ceildiv(A_dim1, BM), A_dim0)" in capsys.readouterr().out


def test_run_gemm_epilogue_on_cpu(monkeypatch, capsys, cpu_flags):
    cpu_flags()  # MKL's point: a CPU but Zen 5 (no VP2INTERSECT)
    monkeypatch.setenv("SEPTRAN_TARGET", "cpu")
    monkeypatch.delenv("SEPTRAN_MAPPING", raising=False)
    run = _load(REPO / "examples" / "gemm_epilogue" / "run_gemm_epilogue.py")
    assert run.main(M=48, N=40, K=56, act="silu", transpose_a=True, dtype="float32", repeats=1) < 1e-4
    out = capsys.readouterr().out
    assert "C = silu(A^T @ B + bias)" in out and "septran_cpu_gemm_mkl_f32_f32" in out  # MKL, A transposed by a flag


@pytest.mark.parametrize("target", ["sm90", "gfx942"])
def test_run_gemm_shows_code_where_the_device_is_absent(monkeypatch, capsys, target):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU; the script would run the kernel")
    monkeypatch.setenv("SEPTRAN_TARGET", target)
    monkeypatch.delenv("SEPTRAN_MAPPING", raising=False)
    run_gemm = _load(REPO / "examples" / "gemm" / "run_gemm.py")
    assert math.isnan(run_gemm.main(M=256, N=256, K=128))
    out = capsys.readouterr().out
    assert "showing the generated code only" in out and "T.Pipelined" in out


@pytest.mark.parametrize("script, kwargs, title", [
    ("softmax/run_softmax.py", dict(rows=9, cols=700, log=True), "Y = log_softmax(X, dim=-1), 9x700"),
    ("layernorm/run_layernorm.py", dict(rows=5, cols=300), "Y = layer_norm(X) * W + B, 5x300"),
    ("rmsnorm/run_rmsnorm.py", dict(rows=5, cols=300), "Y = X / rms(X) * W, 5x300"),
    ("swiglu_mlp/run_swiglu_mlp.py", dict(tokens=37, dim=65, hidden=171),
     "Y = (silu(X @ Wg) * (X @ Wu)) @ Wd, 37 tokens, 65 -> 171 -> 65"),
    ("rope/run_rope.py", dict(batch=2, seq=37, heads=3, head_dim=16), "Y = rope(X, cos, sin), 2x37x3x16"),
    ("reduce/run_reduce.py", dict(size=(9, 3, 70), op="max", axis=1), "Y = X.max(dim=1), 9x3x70"),
    ("attention/run_attention.py", dict(batch=1, heads=2, sq=37, sk=70, d=16, causal=True),
     "O = attention(Q, K, V, causal), 1x2 heads, Sq 37, Sk 70, D 16"),
])
def test_run_operator_on_cpu(monkeypatch, capsys, script, kwargs, title):
    monkeypatch.setenv("SEPTRAN_TARGET", "cpu")
    monkeypatch.delenv("SEPTRAN_MAPPING", raising=False)
    run = _load(REPO / "examples" / script)
    assert run.main(**kwargs, dtype="float32", repeats=1) < 1e-5
    out = capsys.readouterr().out
    assert title in out and "@T.prim_func" in out


def test_run_conv2d_on_cpu(monkeypatch, capsys):
    monkeypatch.setenv("SEPTRAN_TARGET", "cpu")
    monkeypatch.delenv("SEPTRAN_MAPPING", raising=False)
    run = _load(REPO / "examples" / "conv2d" / "run_conv2d.py")
    assert run.main(N=2, H=13, W=13, Ci=5, Co=7, dtype="float32", repeats=1) < 1e-4
    out = capsys.readouterr().out
    assert "Y = conv2d(X, W), NHWC 2x13x13x5 * 3x3x5x7 -> (2, 11, 11, 7), float32" in out and "@T.prim_func" in out


def test_run_cross_entropy_on_cpu(monkeypatch, capsys):
    """50,000 classes, float16 logits, int64 class ids: every loss against torch's, in float64."""
    monkeypatch.setenv("SEPTRAN_TARGET", "cpu")
    monkeypatch.delenv("SEPTRAN_MAPPING", raising=False)
    run = _load(REPO / "examples" / "cross_entropy" / "run_cross_entropy.py")
    assert run.main(rows=5, classes=50000, dtype="float16", repeats=1) < 1e-4
    out = capsys.readouterr().out
    assert "L = cross_entropy(X, Y, reduction='none'), 5x50000, float16" in out and "@T.prim_func" in out


def test_run_gqa_kv_cache_on_cpu(monkeypatch, capsys):
    """A prompt, then decoding steps: the caches (the caller's tensors) and each step's output checked."""
    monkeypatch.setenv("SEPTRAN_TARGET", "cpu")
    monkeypatch.delenv("SEPTRAN_MAPPING", raising=False)
    run = _load(REPO / "examples" / "gqa_kv_cache" / "run_gqa_kv_cache.py")
    assert run.main(batch=1, hq=6, hkv=3, prompt=21, steps=2, smax=40, d=16, dtype="float32") < 1e-5
    out = capsys.readouterr().out
    assert "pos   22, 1 new" in out and "@T.prim_func" in out and "GQA with a KV cache" in out


LLAMA_SMALL = dict(hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=172)
GPT2_SMALL = dict(hidden=64, heads=4, mlp=256)


@pytest.mark.parametrize("script, sizes, title", [
    ("llama_block/run_llama_block.py", dict(LLAMA_SMALL, gqa="repeat"), "Llama block: hidden 64, 4 query heads over 2 KV heads"),
    ("llama_block/run_llama_block.py", dict(LLAMA_SMALL, gqa="sdpa"), "GQA by sdpa"),
    ("gpt2_block/run_gpt2_block.py", GPT2_SMALL, "GPT-2 block: hidden 64, 4 heads, GELU MLP 256"),
])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_run_model_block_captures_whole_graphs(capsys, script, sizes, title, dtype):
    """The model examples under torch.compile's capture (aot_eager: AOTAutograd, fullgraph, nothing compiled): a
    prefill and decode steps, every output and cache row within the FlashAttention rule. The septran backend's
    run is tests/test_model_blocks.py."""
    import torch._dynamo

    torch._dynamo.reset()
    run = _load(REPO / "examples" / script)
    result = run.main(**sizes, prompt=19, steps=3, backend="aot_eager", dtype=dtype, repeats=1)
    assert result["ok"] and [r["pos"] for r in result["rows"]] == [0, 19, 20, 21]
    out = capsys.readouterr().out
    assert title in out and "pos   21,   1 new" in out and "decode step" in out


@pytest.mark.parametrize("script, sizes", [
    ("llama_block/run_llama_block.py", dict(LLAMA_SMALL, gqa="repeat")),
    ("llama_block/run_llama_block.py", dict(LLAMA_SMALL, gqa="sdpa")),
    ("gpt2_block/run_gpt2_block.py", GPT2_SMALL),
])
def test_model_block_cache_is_the_whole_prefill(script, sizes):
    """The checks above compare a block with itself in float64; this one checks the block's own KV cache logic, in
    float64 and eager: 23 tokens at once = 15 tokens, then a chunk of 5 at position 15, then 3 decode steps."""
    import torch

    module = _load(REPO / "examples" / script).model
    config = module.LlamaConfig if hasattr(module, "LlamaConfig") else module.GPT2Config
    model = module.build(config(max_len=30, **sizes), dtype=torch.float64)
    x = torch.randn(1, 23, sizes["hidden"], dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        whole_caches, caches = model.new_cache(), model.new_cache()
        whole = model(x, 0, *whole_caches)
        parts = [model(x[:, :15], 0, *caches), model(x[:, 15:20], 15, *caches)]
        parts += [model(x[:, p:p + 1], p, *caches) for p in range(20, 23)]
    torch.testing.assert_close(torch.cat(parts, 1), whole, rtol=1e-10, atol=1e-10)
    for part, full in zip(caches, whole_caches):
        torch.testing.assert_close(part, full, rtol=1e-10, atol=1e-10)


def test_llama_block_attention_is_grouped_query_attention():
    """repeat_kv + SDPA, SDPA's enable_gqa and attention written out with each KV head shared by its group agree."""
    import math

    import torch

    module = _load(REPO / "examples" / "llama_block" / "run_llama_block.py").model
    cfg = module.LlamaConfig(max_len=16, **LLAMA_SMALL)
    models = {gqa: module.build(module.LlamaConfig(**{**cfg.__dict__, "gqa": gqa}), dtype=torch.float64)
              for gqa in ("repeat", "sdpa")}
    x = torch.randn(1, 11, cfg.hidden, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        outs = {gqa: m(x, 0, *m.new_cache()) for gqa, m in models.items()}
        attn, h = models["repeat"].self_attn, models["repeat"].input_layernorm(x)
        q = attn.q_proj(h).view(1, 11, cfg.heads, cfg.head_dim).transpose(1, 2)
        k = attn.k_proj(h).view(1, 11, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
        v = attn.v_proj(h).view(1, 11, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
        q, k = module.apply_rope(q, k, attn.cos[:11], attn.sin[:11])
        group = torch.arange(cfg.heads) // (cfg.heads // cfg.kv_heads)  # query head -> its KV head
        s = q @ k[:, group].transpose(-1, -2) / math.sqrt(cfg.head_dim)
        s = s.masked_fill(~torch.ones(11, 11, dtype=torch.bool).tril(), float("-inf"))
        o = attn.o_proj((torch.softmax(s, -1) @ v[:, group]).transpose(1, 2).reshape(1, 11, -1))
        hand = x + o
        hand = hand + models["repeat"].mlp(models["repeat"].post_attention_layernorm(hand))
    torch.testing.assert_close(outs["repeat"], outs["sdpa"], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(outs["repeat"], hand, rtol=1e-10, atol=1e-10)
