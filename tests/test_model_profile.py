"""``septran.profile`` on the Llama block (examples/llama_block, cut down): the profile table and the Chrome trace
of one decode step, FLOPs at the call's real sizes, and what SEPTRAN_PROFILE writes at exit.

One compile (a prefill graph and a decode graph) in a module-scoped fixture; the blocks' small sizes."""
from __future__ import annotations

import json
import math

import pytest
import torch

import septran
from conftest import REPO
from septran.model import profile as profile_module

pytestmark = pytest.mark.build  # the block's kernels are built

PROMPT, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTER = 16, 64, 4, 2, 16, 172


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    import sys

    sys.path.insert(0, str(REPO / "examples"))
    import model_runner

    m = model_runner.load(REPO / "examples" / "llama_block" / "model.py", "septran_example_llama_block_model")
    model = m.build(m.LlamaConfig(max_len=PROMPT + 8, hidden=HIDDEN, heads=HEADS, kv_heads=KV_HEADS, head_dim=HEAD_DIM,
                                  intermediate=INTER))
    kc, vc = model.new_cache()
    gen = torch.Generator().manual_seed(0)
    xp, xd = torch.randn(1, PROMPT, HIDDEN, generator=gen), torch.randn(1, 1, HIDDEN, generator=gen)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="septran", fullgraph=True)
    with torch.no_grad():
        compiled(xp, 0, kc, vc)
        folder = tmp_path_factory.mktemp("profile")
        decode = septran.profile(compiled, xd, PROMPT, kc, vc, steps=2, trace=folder / "decode.json")
        prefill = septran.profile(compiled, xp, 0, kc, vc, steps=1)
        out = compiled(xd, PROMPT, kc, vc)
        ke, ve = model.new_cache()
        model(xp, 0, ke, ve)
        eager = model(xd, PROMPT, ke, ve)
    torch._dynamo.reset()
    return decode, prefill, folder / "decode.json", out, eager


def test_the_profile_table_of_a_decode_step(profiled):
    decode, _, _, out, eager = profiled
    assert (out - eager).abs().max().item() < 1e-4  # the profiled graph still computes the block
    table = str(decode)
    print(table)
    head = table.splitlines()[0]
    assert all(w in head for w in ("node", "point", "us", "GFLOP/s", "GB/s", "share"))
    rows = decode.rows()
    kernels = [r for r in rows if r.kind == "septran"]
    ops = {r.op for r in kernels}
    assert {"septran.gemm", "septran.attention", "septran.rms_norm", "septran.rope", "septran.swiglu"} <= ops, ops
    for r in kernels:
        assert r.calls == 2 and r.us > 0 and r.kernel_us > 0 and r.us >= r.kernel_us
        assert r.kernel and r.point.split(":")[0] in ("first", "tuned", "fixed", "bucket"), (r.kernel, r.point)
        assert r.flops > 0 and r.bytes > 0 and r.gflops > 0 and r.gbs > 0
    assert 0 < sum(r.share for r in rows) <= 1.0 + 1e-9
    assert decode.share("septran") > 0 and "SepTran kernels" in table.splitlines()[-1]


def _gemm_flops(rows) -> list[int]:
    return sorted(r.flops for r in rows if r.op == "septran.gemm")


def test_flops_are_at_the_calls_real_sizes(profiled):
    """The decode step's GEMMs have one row, the prefill's PROMPT rows: each one's FLOPs 2 M N K at its own M."""
    decode, prefill, *_ = profiled
    projections = {2 * HIDDEN * HEADS * HEAD_DIM, 2 * HIDDEN * KV_HEADS * HEAD_DIM, 2 * HIDDEN * INTER,
                   2 * HIDDEN * (HEADS + 2 * KV_HEADS) * HEAD_DIM}  # Q, K and V alone, or as one fused GEMM
    one_row = _gemm_flops(decode.rows())
    assert one_row and set(one_row) <= projections, one_row
    assert _gemm_flops(prefill.rows()) == [PROMPT * f for f in one_row]
    attention = next(r for r in decode.rows() if r.op == "septran.attention")
    keys = attention.flops / (HEADS * (4 * HEAD_DIM + 5))
    assert keys == int(keys) and PROMPT < keys <= PROMPT + 8  # one query row over the cache it was given
    attention = next(r for r in prefill.rows() if r.op == "septran.attention")
    assert attention.flops == HEADS * PROMPT * PROMPT * (4 * HEAD_DIM + 5)  # every query row over every key


def test_the_chrome_trace_of_a_decode_step(profiled):
    decode, _, path, *_ = profiled
    trace = json.loads(path.read_text())
    events = trace["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    steps = [e for e in spans if e["cat"] == "step"]
    graphs = [e for e in spans if e["cat"] == "graph"]
    kernels = [e for e in spans if e["cat"] == "septran"]
    assert len(steps) == 2 and len(graphs) == 2
    assert len(kernels) == 2 * len([r for r in decode.rows() if r.kind == "septran"])
    for k in kernels:
        assert any(s["ts"] <= k["ts"] and k["ts"] + k["dur"] <= s["ts"] + s["dur"] + 1e-3 for s in steps)
        assert {"kernel", "point", "flops", "bytes", "GFLOP/s", "GB/s", "shapes"} <= set(k["args"])
    assert all(math.isfinite(e["ts"]) and e["dur"] >= 0 for e in spans)


def test_septran_profile_at_exit_writes_the_table_and_the_trace(profiled, tmp_path):
    decode, *_ = profiled
    profile_module._write_at_exit(decode, tmp_path / "run.trace.json")
    assert json.loads((tmp_path / "run.trace.json").read_text())["traceEvents"]
    assert "GFLOP/s" in (tmp_path / "run.txt").read_text()
    assert profile_module.wrap(len, None, 0, False) is len  # profile=False: the graph runs as it is
