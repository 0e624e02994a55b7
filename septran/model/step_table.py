"""Which step runs a node: the fast steps by the op's name (``septran.model.steps`` and ``steps_attention``), the
op's own Python for any other. Its own module so that the attention steps, which subclass ``steps.Step``, and
``steps`` import in one direction only."""
from __future__ import annotations

import torch

from septran.model import steps
from septran.model.steps_attention import Attention, AttentionWritten

FAST = {"attention": Attention, "rope": steps.Rope, "gemm": steps.Gemm, "rms_norm": steps.RMSNorm,
        "layer_norm": steps.LayerNorm, "softmax": steps.Softmax, "bmm": steps.Bmm, "swiglu": steps.SwiGLU,
        "elementwise": steps.Elementwise}


def make(op: torch._ops.OpOverload) -> steps.Step:
    """The step for one node calling ``op`` (a ``torch.ops.septran.*`` overload)."""
    name = op._overloadpacket.__name__
    return AttentionWritten(op) if name == "attention_written" else FAST.get(name, steps.Step)(op)
