"""The primitives a leaf task may call, with what each does to its arguments.

A primitive's signature gives each argument's privilege (which is how
privileges are inferred) and the shape equalities it imposes (which is how
an output's shape is inferred from the inputs). Targets implement primitives
in their leaf libraries (``backends/<target>/target.yaml``).
"""
from __future__ import annotations

from dataclasses import dataclass

from septran.frontend.ir import Privilege


@dataclass(frozen=True)
class PrimitiveSig:
    name: str
    params: tuple[str, ...]
    privileges: tuple[Privilege, ...]
    ranks: tuple[int, ...]
    # ((arg, axis), (arg, axis)) pairs whose extents are equal; axes count from the end (-1: last)
    equal_dims: tuple[tuple[tuple[int, int], tuple[int, int]], ...]
    meaning: str
    # Operands may share leading batch dimensions (equal extents), in front of `ranks`.
    batched: bool = False


PRIMITIVES: dict[str, PrimitiveSig] = {
    "gemm": PrimitiveSig(
        name="gemm",
        params=("C", "A", "B"),
        privileges=(Privilege.REDUCE, Privilege.READ, Privilege.READ),
        ranks=(2, 2, 2),
        equal_dims=(((0, -2), (1, -2)), ((0, -1), (2, -1)), ((1, -1), (2, -2))),
        meaning="C[..., m, n] += sum_k A[..., m, k] * B[..., k, n] (leading dimensions: a batch)",
        batched=True,
    ),
}
