"""Patterns over an ATen FX graph: each finds the nodes one SepTran kernel computes (``base.Pattern``).

``PATTERNS`` is the order they are tried at each node: the larger patterns (a GEMM with its epilogue, RMSNorm
in its decomposed form, SwiGLU) before the smaller ones that would take a part of them. It is made at its first
use (PEP 562's module ``__getattr__``): a process that runs a rewrite it finds in the build cache (a precompiled
model) imports this package for ``fuse_gemms`` and never needs the patterns.
"""
from __future__ import annotations


def _patterns() -> list:
    from septran.model.patterns import attention, residual, rope, swiglu, written_attention
    from septran.model.patterns import gemm as _gemm
    from septran.model.patterns.elementwise import PATTERNS as _ew
    from septran.model.patterns.norms import PATTERNS as _norms

    # SwiGLU before GEMM takes its projections; attention written out before bmm and softmax take its parts; the
    # residual add before GEMM and the elementwise chains
    patterns = [swiglu.SwiGLU(), written_attention.WrittenAttention(), attention.Attention(), rope.Rope(),
                residual.GemmResidual()]
    _gemm.register(patterns)  # mm/addmm/linear (+act), bmm
    patterns += _norms
    return patterns + _ew  # last: chains take what no larger pattern takes


def __getattr__(name: str):
    if name == "PATTERNS":
        made = globals()["PATTERNS"] = _patterns()
        return made
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
