"""Patterns over an ATen FX graph: each finds the nodes one SepTran kernel computes (``base.Pattern``).

``PATTERNS`` is the order they are tried at each node: the larger patterns (a GEMM with its epilogue, RMSNorm
in its decomposed form, SwiGLU) before the smaller ones that would take a part of them.
"""
from __future__ import annotations

PATTERNS: list = []  # filled by the pattern modules below, in this order

from septran.model.patterns import attention, residual, rope, swiglu, written_attention  # noqa: E402
# SwiGLU before GEMM takes its projections; attention written out before bmm and softmax take its parts; the
# residual add before GEMM and the elementwise chains
PATTERNS += [swiglu.SwiGLU(), written_attention.WrittenAttention(), attention.Attention(), rope.Rope(), residual.GemmResidual()]
from septran.model.patterns import gemm as _gemm; _gemm.register(PATTERNS)  # noqa: E402,E702 - mm/addmm/linear (+act), bmm
from septran.model.patterns.norms import PATTERNS as _norms; PATTERNS += _norms  # noqa: E402,E702
# last: chains take what no larger pattern takes
from septran.model.patterns.elementwise import PATTERNS as _ew; PATTERNS += _ew  # noqa: E402,E702
