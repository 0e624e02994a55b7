"""Hugging Face models through the septran backend, as a user runs them: ``model.generate`` (greedy) gives the
same tokens as eager torch, through ``torch.compile(backend="septran")`` and through HF's documented compiled
generation (``cache_implementation="static"`` with ``CompileConfig(backend="septran")``, whose default mode is
``"reduce-overhead"``: torch passes ``mode=`` to the backend).

Tiny configs with random weights (no download): one layer, hidden 64, a vocabulary of 128; the weights' scale
is raised so that greedy decoding has clear winners (each step's top two logits apart by far more than the
kernels' rounding) and the tokens vary. One compile per model and path, in module-scoped fixtures.
"""
from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

import septran.model  # noqa: F401,E402  (registers the backend)
from septran.runtime.plan import Plan  # noqa: E402

pytestmark = pytest.mark.build  # the models' kernels are built

PROMPT, NEW = 6, 5


def _llama():
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                                   initializer_range=0.3)
    return transformers.LlamaForCausalLM(cfg)


def _gpt2():
    cfg = transformers.GPT2Config(vocab_size=128, n_embd=64, n_layer=1, n_head=4, n_positions=32,
                                  initializer_range=0.3, bos_token_id=None, eos_token_id=None)  # 50256: no such token
    return transformers.GPT2LMHeadModel(cfg)


MODELS = {"llama": _llama, "gpt2": _gpt2}


def _model(name: str):
    torch.manual_seed(0)
    return MODELS[name]().eval()


def _prompt() -> torch.Tensor:
    return torch.randint(0, 128, (1, PROMPT), generator=torch.Generator().manual_seed(1))


def _generate(model, **extra):
    with torch.no_grad():
        out = model.generate(_prompt(), max_new_tokens=NEW, do_sample=False, pad_token_id=0, output_scores=True,
                             return_dict_in_generate=True, **extra)
    return out.sequences[0, PROMPT:].tolist(), out.scores


@pytest.fixture(scope="module", params=sorted(MODELS))
def eager(request):
    tokens, scores = _generate(_model(request.param))
    top2 = [s[0].topk(2).values for s in scores]
    margin = min((t[0] - t[1]).item() for t in top2)
    assert margin > 1e-3, f"a tie in eager greedy decoding ({margin:.2e}): choose other weights"
    assert len(set(tokens)) > 1, tokens
    return request.param, tokens


def _counting(monkeypatch) -> list:
    """Every SepTran kernel run from now on (so a path that silently ran torch alone fails): a kernel's plan runs
    every call, through ``Kernel.__call__`` or straight from the direct runner's steps."""
    calls = []
    real = Plan.run

    def counted(self, args, kwargs):
        calls.append(self.variant)
        return real(self, args, kwargs)

    monkeypatch.setattr(Plan, "run", counted)
    return calls


def _lowered(monkeypatch) -> list:
    """Every graph's direct runner (its steps and launcher segments) lowered from now on."""
    from septran.model import executor

    made, real = [], executor.lower
    monkeypatch.setattr(executor, "lower", lambda gm, **kw: made.append(real(gm, **kw)) or made[-1])
    return made


def test_generate_through_torch_compile(eager, monkeypatch):
    name, want = eager
    model = _model(name)
    model.forward = torch.compile(model.forward, backend="septran")
    calls = _counting(monkeypatch)
    got, _ = _generate(model)
    assert got == want
    assert len(calls) >= NEW  # every step ran SepTran kernels
    torch._dynamo.reset()


def test_generate_through_hf_static_cache_compile_config(eager, monkeypatch):
    name, want = eager
    model = _model(name)
    config = transformers.CompileConfig(backend="septran")  # mode "reduce-overhead", HF's default
    assert config.mode == "reduce-overhead"
    config._compile_all_devices = True  # HF compiles on accelerators only, unless told (its own test flag)
    calls = _counting(monkeypatch)
    made = _lowered(monkeypatch)
    got, _ = _generate(model, cache_implementation="static", compile_config=config)
    assert got == want
    assert hasattr(model, "_compiled_call"), "generate did not take HF's compiled path"
    assert len(calls) >= NEW - 1  # the decode steps (HF runs the prefill uncompiled)
    # every segment of a decode step (the cache written in place by index_copy_, the attention with its bool
    # mask) runs as one launcher: one Python-to-C crossing per segment
    segments = [s for ex in made for s in ex.segments]
    assert segments and all(s.why_not is None for s in segments), [(s.__name__, s.why_not) for s in segments]
    assert all(s.launches >= 1 for s in segments)
    # the glue between the kernels (positions, mask, rotary tables, embedding, the cache writes) runs inside the
    # launcher too (septran.model.launcher.glue): a decode step is one segment, one crossing
    assert all(len(ex.segments) == 1 for ex in made), [len(ex.segments) for ex in made]
    torch._dynamo.reset()


def test_static_cache_prefill_launches_around_its_masked_attention(monkeypatch):
    """A prefill over HF's static cache: its attention reads the mask's values at every call, so it stays out of
    the segments (``segments._reads_its_mask``) and the steps around it launch, rope's input copied into its
    heads layout inside the launcher (``record._relaid_copy``); the replayed logits match eager's."""
    from transformers import StaticCache

    model = _model("llama")
    ref = _model("llama").double()
    made = _lowered(monkeypatch)
    fn = torch.compile(model.forward, backend="septran", fullgraph=True)
    caches = [StaticCache(config=m.config, max_cache_len=16) for m in (model, model, ref)]
    ids = _prompt()
    with torch.no_grad():
        for _ in range(3):  # the first two calls compile (the cache made, then written) and record; the third launches
            for c in caches:
                for layer in c.layers:
                    if getattr(layer, "cumulative_length", None) is not None:
                        layer.cumulative_length.fill_(0)
            got = fn(input_ids=ids, past_key_values=caches[0], use_cache=True).logits
        want = model(input_ids=ids, past_key_values=caches[1], use_cache=True).logits
        want64 = ref(input_ids=ids, past_key_values=caches[2], use_cache=True).logits
    from tests.support.model_graphs import assert_flash_rule

    assert_flash_rule(got, want64, want, eps=1e-4)
    segments = made[-1].segments  # (the graph of a prefill into a cache already made: the one called again)
    assert segments and all(s.why_not is None and s.launches >= 1 for s in segments), \
        [(s.__name__, s.why_not) for s in segments]
    torch._dynamo.reset()
