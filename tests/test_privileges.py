"""Privilege composition in program order: what a task does first decides whether it sees its input."""
from __future__ import annotations

import pytest

from septran.frontend.ir import Privilege as P

CASES = [
    (P.NONE, P.READ, P.READ),
    (P.READ, P.NONE, P.READ),
    (P.READ, P.READ, P.READ),
    (P.READ, P.WRITE, P.READ_WRITE),
    (P.READ, P.REDUCE, P.READ_WRITE),
    (P.WRITE, P.READ, P.WRITE),  # reads only what it wrote: the input is never seen
    (P.WRITE, P.READ_WRITE, P.WRITE),
    (P.REDUCE, P.REDUCE, P.REDUCE),  # gemm over k: still one reduction
    (P.REDUCE, P.READ_WRITE, P.REDUCE),  # a fused epilogue after the gemm: still an output that starts at zero
    (P.REDUCE, P.READ, P.REDUCE),
    (P.READ_WRITE, P.WRITE, P.READ_WRITE),
]


@pytest.mark.parametrize("first,then,expected", CASES, ids=lambda p: p.value if isinstance(p, P) else p)
def test_then(first, then, expected):
    assert first.then(then) is expected


@pytest.mark.parametrize("priv,role", [(P.READ, "input"), (P.WRITE, "output"), (P.REDUCE, "output"),
                                       (P.READ_WRITE, "inout"), (P.NONE, "input")])
def test_roles(priv, role):
    assert priv.role == role
