"""bench/models.py's Hugging Face models: small configs with random weights (no download), the phases timed.

A causal LM's phases are what ``model.generate``'s compiled path (``cache_implementation="static"``) calls: the
prefill, ``forward(prompt, StaticCache)`` at position 0, and a decode step, ``forward(one token, StaticCache)`` at
position P. The cache's length (each layer's ``cumulative_length``, a tensor the graph reads) is set back before
each call, so every call writes the same slots and a timed loop repeats the same step. BERT has one phase, a
forward of the prompt.

Each backend is checked before it is timed, as the blocks are: the last position's logits (BERT: the last hidden
state) of the prefill and of a decode step against the same model in float64, under the FlashAttention rule;
and the greedy tokens of a prefill and ``GREEDY`` decode steps, against eager's (reported, not failed: random
weights may leave two logits within rounding of each other).
"""
from __future__ import annotations

import copy
from typing import Optional

import torch

MODELS = ("llama", "qwen2", "gpt2", "bert")
GREEDY = 4
VOCAB = {"full": 2048, "small": 128}
# hidden, layers, heads, kv heads, intermediate: the example blocks' sizes (full), cut down for the smoke test
SIZES = {"full": dict(hidden=256, layers=2, heads=8, kv_heads=2, intermediate=688),
         "small": dict(hidden=64, layers=1, heads=4, kv_heads=2, intermediate=128)}


def build(name: str, sizes: str, max_len: int):
    """(model in eval mode, fp32, seeded; a description of its sizes)."""
    import transformers as tf

    s, vocab = SIZES[sizes], VOCAB[sizes]
    torch.manual_seed(0)
    if name == "llama":
        cfg = tf.LlamaConfig(vocab_size=vocab, hidden_size=s["hidden"], intermediate_size=s["intermediate"],
                             num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
                             num_key_value_heads=s["kv_heads"], max_position_embeddings=max_len)
        model = tf.LlamaForCausalLM(cfg)
    elif name == "qwen2":
        cfg = tf.Qwen2Config(vocab_size=vocab, hidden_size=s["hidden"], intermediate_size=s["intermediate"],
                             num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
                             num_key_value_heads=s["kv_heads"], max_position_embeddings=max_len)
        model = tf.Qwen2ForCausalLM(cfg)
    elif name == "gpt2":
        cfg = tf.GPT2Config(vocab_size=vocab, n_embd=s["hidden"], n_layer=s["layers"], n_head=s["heads"],
                            n_positions=max_len, bos_token_id=None, eos_token_id=None)  # 50256 is past the vocabulary
        model = tf.GPT2LMHeadModel(cfg)
    elif name == "bert":
        cfg = tf.BertConfig(vocab_size=vocab, hidden_size=s["hidden"], num_hidden_layers=s["layers"],
                            num_attention_heads=s["heads"], intermediate_size=4 * s["hidden"],
                            max_position_embeddings=max_len)
        model = tf.BertModel(cfg, add_pooling_layer=False)
    else:
        raise ValueError(f"unknown model {name!r}")
    kv = f", kv heads {s['kv_heads']}" if name in ("llama", "qwen2") else ""
    inter = s["intermediate"] if name in ("llama", "qwen2") else 4 * s["hidden"]
    return model.eval(), (f"hidden {s['hidden']}, layers {s['layers']}, heads {s['heads']}{kv}, "
                          f"intermediate {inter}, vocab {vocab}")


def phases(name: str) -> tuple[str, ...]:
    return ("forward",) if name == "bert" else ("prefill", "decode")


class Runner:
    """One backend's calls of one model: its forward (compiled or not) and its own static cache."""

    def __init__(self, model, forward, prompt: int, new: int):
        from transformers import StaticCache

        self.model, self.forward, self.prompt = model, forward, prompt
        self.causal = hasattr(model, "generate") and model.config.model_type != "bert"
        self.cache = StaticCache(config=model.config, max_cache_len=prompt + new) if self.causal else None

    def _at(self, pos: int) -> None:
        for layer in self.cache.layers:  # in place: the tensor's address is marked static for torch.compile
            layer.cumulative_length.fill_(pos)

    def prefill(self, ids):
        if not self.causal:
            return self.forward(input_ids=ids).last_hidden_state
        self._at(0)
        return self.forward(input_ids=ids, past_key_values=self.cache, use_cache=True, logits_to_keep=1).logits

    def decode(self, token, pos: Optional[int]):
        """One step at ``pos`` (None: where the cache is)."""
        if pos is not None:
            self._at(pos)
        return self.forward(input_ids=token, past_key_values=self.cache, use_cache=True).logits

    def greedy(self, ids, steps: int) -> list[int]:
        tokens = []
        nxt = self.prefill(ids)[:, -1].argmax(-1, keepdim=True)
        for _ in range(steps):
            tokens.append(int(nxt))
            nxt = self.decode(nxt, None)[:, -1].argmax(-1, keepdim=True)
        return tokens


def forward_of(model, backend: str):
    if backend == "eager":
        return model.forward
    return torch.compile(model.forward, backend=backend, fullgraph=True)


def prepare(name: str, backends: list[str], sizes: str, prompt: int, unavailable, bound) -> tuple[dict, dict, list, str]:
    """Per backend that runs and passes the check: its phases' calls (the same step each call). Also each one's
    compile seconds and errors, the notes of backends skipped, failed or wrong, and the model's sizes."""
    import time

    model, described = build(name, sizes, prompt + GREEDY + 8)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (1, prompt), generator=gen)
    token = torch.randint(0, model.config.vocab_size, (1, 1), generator=gen)
    with torch.no_grad():
        ref = Runner(copy.deepcopy(model).double(), None, prompt, GREEDY + 1)
        ref.forward = ref.model.forward
        want = [ref.prefill(ids)[:, -1]] + ([ref.decode(token, prompt)[:, -1]] if ref.causal else [])
    calls, info, notes, eager_err, eager_tokens = {}, {}, [], None, None
    names = phases(name)
    for backend in ["eager"] + [b for b in backends if b != "eager"]:
        if why := unavailable(backend):
            notes.append({"backend": backend, "skipped": why})
            continue
        try:
            run = Runner(model, forward_of(model, backend), prompt, GREEDY + 1)
            start = time.perf_counter()
            with torch.no_grad():
                got = [run.prefill(ids)[:, -1]] + ([run.decode(token, prompt)[:, -1]] if run.causal else [])
                compile_s = time.perf_counter() - start
                tokens = run.greedy(ids, GREEDY) if run.causal else []
        except Exception as err:  # a backend that cannot compile or run is reported; the others still run
            notes.append({"backend": backend, "error": f"FAILED: {type(err).__name__}: {str(err).splitlines()[0][:200]}"})
            continue
        errs = [(g.double() - w).abs().max().item() for g, w in zip(got, want)]
        eager_err = eager_err or errs
        eager_tokens = eager_tokens if eager_tokens is not None else tokens
        bounds = [bound(e, w, torch.float32) for e, w in zip(eager_err, want)]
        info[backend] = {"compile_s": compile_s, "max_abs_err": dict(zip(names, errs)), "bound": dict(zip(names, bounds)),
                         "greedy_tokens": tokens}
        if any(e > b for e, b in zip(errs, bounds)):
            notes.append({"backend": backend, "error": "WRONG: max |out - float64| " + ", ".join(
                f"{p} {e:.3g} (bound {b:.3g})" for p, e, b in zip(names, errs, bounds))})
            continue
        if tokens != eager_tokens:
            notes.append({"backend": backend, "note": f"greedy tokens {tokens} differ from eager's {eager_tokens} "
                                                      "(within the rule: near-ties of random weights)"})
        if backend not in backends:
            continue
        with torch.no_grad():
            run.prefill(ids)  # the cache as the decode step expects it
        calls[backend] = {"prefill": lambda r=run: r.prefill(ids), "forward": lambda r=run: r.prefill(ids),
                          "decode": lambda r=run: r.decode(token, prompt)}
    return calls, info, notes, described
