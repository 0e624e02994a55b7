"""Patterns over an ATen FX graph: each finds the nodes one SepTran kernel computes (``base.Pattern``).

``PATTERNS`` is the order they are tried at each node: the larger patterns (a GEMM with its epilogue, RMSNorm
in its decomposed form, SwiGLU) before the smaller ones that would take a part of them.
"""
from __future__ import annotations

PATTERNS: list = []  # filled by the pattern modules below, in this order

from septran.model.patterns import attention, rope, swiglu  # noqa: E402
PATTERNS += [swiglu.SwiGLU(), attention.Attention(), rope.Rope()]  # SwiGLU before GEMM takes its projections
from septran.model.patterns import gemm as _gemm; _gemm.register(PATTERNS)  # noqa: E402,E702 - mm/addmm/linear (+act), bmm
from septran.model.patterns.norms import PATTERNS as _norms; PATTERNS += _norms  # noqa: E402,E702
# last: chains take what no larger pattern takes
from septran.model.patterns.elementwise import PATTERNS as _ew; PATTERNS += _ew  # noqa: E402,E702
