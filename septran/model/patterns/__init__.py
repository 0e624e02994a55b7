"""Patterns over an ATen FX graph: each finds the nodes one SepTran kernel computes (``base.Pattern``).

``PATTERNS`` is the order they are tried at each node: the larger patterns (a GEMM with its epilogue, RMSNorm
in its decomposed form, SwiGLU) before the smaller ones that would take a part of them.
"""
from __future__ import annotations

PATTERNS: list = []  # filled by the pattern modules' register()

from septran.model.patterns import attention, rope, swiglu  # noqa: E402  helper attn's; SwiGLU before GEMM
PATTERNS[:0] = [swiglu.SwiGLU(), attention.Attention(), rope.Rope()]
