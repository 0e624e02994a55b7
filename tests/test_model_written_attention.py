"""Attention written out by hand (GPT-2's q @ k^T, scale, mask, softmax, @ v) -> septran.attention: the GPT-2 block
against eager torch (FlashAttention's rule), and small graphs whose mask or scale the pattern must read right or
leave alone."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from conftest import REPO, assert_flash_rule, load_module
from septran.model.patterns.base import Match, Refusal
from septran.model.patterns.written_attention import WrittenAttention
from support.model_graphs import apply, capture, matches

pytestmark = pytest.mark.build  # graphs are captured and attention kernels run

GPT2_SMALL = dict(hidden=64, heads=4, mlp=256)  # test_model_blocks' sizes: the same kernels


def _rand(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class Written(torch.nn.Module):
    """softmax(q k^T * scale, masked) v, as GPT-2 writes it; ``fill``: how the mask is applied."""

    def __init__(self, scale=0.25, fill="masked_fill", divide=False):
        super().__init__()
        self.scale, self.fill, self.divide = scale, fill, divide

    def forward(self, q, k, v, m=None):
        att = q @ k.transpose(-2, -1)
        if self.scale is not None:
            att = att / self.scale if self.divide else att * self.scale
        if self.fill == "masked_fill":
            att = att.masked_fill(~m, float("-inf"))
        elif self.fill == "where":
            att = torch.where(m, att, float("-inf"))
        elif self.fill == "hide_true":  # masked_fill(m, -inf): hides where m is True
            att = att.masked_fill(m, float("-inf"))
        elif self.fill == "causal":  # the causal mask built in the graph, aligned bottom-right
            sq, sk = q.shape[2], k.shape[2]
            att = att.masked_fill(~torch.ones(sq, sk, dtype=torch.bool).tril(sk - sq), float("-inf"))
        return F.softmax(att, dim=-1) @ v


def _qkv(sq=7, sk=11, b=2, h=3, d=8, dv=6):
    return _rand(b, h, sq, d, seed=1), _rand(b, h, sk, d, seed=2), _rand(b, h, sk, dv, seed=3)


def _run(gm, inputs):
    """The captured graph's placeholders in its own order, found by shape (each input's shape differs here)."""
    by_shape = {tuple(t.shape): t for t in inputs}
    args = [by_shape[tuple(n.meta["val"].shape)] for n in gm.graph.nodes if n.op == "placeholder"]
    return gm(*args)[0]


def _one(gm):
    found = [r for r in matches(gm, WrittenAttention())]
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize("fill, scale, divide", [("causal", 0.3, False), ("causal", 4.0, True), (None, None, False)])
def test_written_attention_matches_and_runs_as_eager(fill, scale, divide):
    """The causal mask built in the graph is the logic's own; the scale is read from a mul or a div; no mask, no
    scale: a plain attention with scale 1."""
    q, k, v = _qkv()
    module = Written(scale, fill, divide)
    inputs = (q, k, v)
    (gm,) = capture(module, *inputs)
    match = _one(gm)
    assert isinstance(match, Match) and match.op is torch.ops.septran.attention.default
    want_scale = 1.0 if scale is None else (1 / scale if divide else scale)
    assert match.args[5] == pytest.approx(want_scale)
    assert match.args[3] is None
    assert match.args[4] is match.args[7] is (fill == "causal")
    apply(gm, WrittenAttention())
    assert {n.target for n in gm.graph.nodes if n.op == "call_function"} <= {torch.ops.septran.attention.default}
    out = _run(gm, inputs)
    ref = module(*(t if t.dtype == torch.bool else t.double() for t in inputs))
    assert_flash_rule(out, ref, module(*inputs))


@pytest.mark.parametrize("module, why", [
    (Written(-0.5), "scaled by -0.5"),  # a negative scale: the op takes a positive one
    (Written(0.25, "hide_true"), None),  # hides where the mask is True: no node of its keep-mask, left alone
])
def test_other_masks_and_scales_are_left_alone(module, why):
    q, k, v = _qkv()
    m = _rand(7, 11, seed=4) > 0
    (gm,) = capture(module, q, k, v, m)
    found = matches(gm, WrittenAttention())
    if why is None:
        assert found == []
    else:
        assert len(found) == 1 and isinstance(found[0], Refusal) and why in found[0].why, found


@pytest.fixture(scope="module")
def run_time_masks():
    """Both written forms of a mask known only at run time, captured and rewritten once: (module, graph)."""
    q, k, v = _qkv()
    m = _rand(7, 11, seed=4) > 0
    out = []
    for module in (Written(0.25, "masked_fill"), Written(3.0, "where", True)):
        (gm,) = capture(module, q, k, v, m)
        match = _one(gm)
        assert isinstance(match, Match) and match.op is torch.ops.septran.attention_written.default, match
        apply(gm, WrittenAttention())
        assert {n.target for n in gm.graph.nodes if n.op == "call_function"} == {
            torch.ops.septran.attention_written.default}
        out.append((module, gm))
    return out


def _causal(sq=7, sk=11):
    return torch.ones(sq, sk, dtype=torch.bool).tril(sk - sq)


@pytest.mark.parametrize("form", [0, 1])
def test_run_time_mask_causal_runs_the_kernel_any_other_is_eager(run_time_masks, form, monkeypatch):
    """A mask only the run knows (GPT-2's buffer): the causal triangle (bottom-right, 7 queries, 11 keys) runs the
    causal attention kernel, its check kept while the tensor is unchanged; a random mask, a mask hiding a whole
    row (NaN written out) and the causal mask written to in place give eager's answer."""
    from septran.model import causal_mask, written_attention_op

    module, gm = run_time_masks[form]
    q, k, v = _qkv()
    written = []  # calls that ran the written-out torch operators
    real = written_attention_op.written
    monkeypatch.setattr(written_attention_op, "written", lambda *a: written.append(1) or real(*a))

    def check(m, kernel: bool):
        before, calls = causal_mask.checks, len(written)
        got = _run(gm, (q, k, v, m))
        ref = module(q.double(), k.double(), v.double(), m)
        assert_flash_rule(got, ref, module(q, k, v, m))
        assert len(written) - calls == (0 if kernel else 1)
        return causal_mask.checks - before

    m = _causal()
    assert check(m, True) == 1  # read once
    assert check(m, True) == 0  # unchanged: the kept answer
    assert causal_mask.lower_right(m, 7, 11) and causal_mask.lower_right(m[None, None], 7, 11)
    m[3, 2] = False  # written in place: its version changes, so it is read again, and it is not causal now
    assert check(m, False) == 1 and not causal_mask.lower_right(m, 7, 11)
    check(_rand(7, 11, seed=5) > 0, False)
    hides_a_row = _causal()
    hides_a_row[0] = False  # a row that sees no key: NaN written out (zeros from the kernel)
    check(hides_a_row, False)
    # more queries than keys: the triangle hides whole rows (NaN written out), so never the kernel
    assert not written_attention_op.causal(_rand(1, 1, 11, 8, seed=6), _rand(1, 1, 7, 8, seed=7), _causal(11, 7))
    assert not causal_mask.lower_right(_causal().float(), 7, 11)


def test_weights_used_elsewhere_are_refused():
    class Both(torch.nn.Module):
        def forward(self, q, k, v):
            p = F.softmax(q @ k.transpose(-2, -1) * 0.5, dim=-1)
            return p @ v, p

    (gm,) = capture(Both(), *_qkv())
    (found,) = matches(gm, WrittenAttention())
    assert isinstance(found, Refusal) and "weights are used elsewhere" in found.why


def test_gpt2_block_prefill_and_decode_run_septran_attention(capsys):
    """The GPT-2 block (odd prompt, decode steps over the cache) against float64 under the FlashAttention rule; the
    report runs its decode attention as one SepTran attention kernel (no mask); the prefill's mask is the block's
    buffer (a graph input), so its attention is ``attention_written``, which checks the mask at run time."""
    run = load_module(REPO / "examples" / "gpt2_block" / "run_gpt2_block.py")
    torch._dynamo.reset()
    result = run.main(**GPT2_SMALL, prompt=37, steps=3, backend="septran", dtype="float32", repeats=0, quiet=True)
    torch._dynamo.reset()
    assert result["ok"], [(r["pos"], r["out"]) for r in result["rows"]]
    prefill, decode = result["reports"]
    runs = [r.runs for r in decode.rows]
    attention = [r for r in runs if r.startswith("SepTran: examples/attention (written out") and "part of" not in r]
    assert len(attention) == 1, runs
    assert not [r for r in runs if "bmm" in r or "softmax" in r], runs
    runs = [r.runs for r in prefill.rows]
    attention = [r for r in runs if r.startswith("SepTran: examples/attention (written out, causal when the mask is")
                 and "part of" not in r]
    assert len(attention) == 1, runs
    assert not [r for r in runs if "bmm" in r or "softmax" in r], runs


def test_gpt2_block_with_its_mask_buffer_changed_gives_eagers_answer():
    """Compiled once; its causal buffer is then written to in place (a key hidden from some queries), and then
    replaced by a new tensor (no key hidden): each prefill, through the direct runner's step, gives eager's answer,
    never the causal kernel's."""
    from septran.model import causal_mask, steps_attention

    model_runner = load_module(REPO / "examples" / "model_runner.py")
    module = model_runner.load(REPO / "examples" / "gpt2_block" / "model.py", "septran_example_gpt2_block_model")
    model = module.build(module.GPT2Config(max_len=48, **GPT2_SMALL))
    x = _rand(1, 37, GPT2_SMALL["hidden"], seed=8)
    torch._dynamo.reset()
    fn = torch.compile(model, backend="septran", fullgraph=True)
    calls = []
    real = steps_attention.AttentionWritten.__call__

    def counted(self, *args):
        before = self.checked_calls
        out = real(self, *args)
        calls.append(self.checked_calls - before)  # 1: the causal kernel ran
        return out

    def compare():
        with torch.no_grad():
            got = fn(x, 0, *model.new_cache())
            ref = model.double()(x.double(), 0, *model.new_cache(dtype=torch.float64))
            model.float()
            assert_flash_rule(got, ref, model(x, 0, *model.new_cache()))

    try:
        steps_attention.AttentionWritten.__call__ = counted
        compare()
        assert calls == [1]
        before = causal_mask.checks
        model.attn.causal[20, 3] = False  # in place: query 20 no longer sees key 3
        compare()
        assert calls[-1] == 0 and causal_mask.checks == before + 1
        model.attn.causal = torch.ones(48, 48, dtype=torch.bool)  # a new tensor: every query sees every key
        compare()
        assert calls[-1] == 0
    finally:
        steps_attention.AttentionWritten.__call__ = real
        torch._dynamo.reset()
