"""The primitives a leaf task may call, with what each does to its arguments.

A primitive names each operand's dimensions with letters, as einsum does
(gemm: C "mn", A "mk", B "kn"): operands that share a letter have equal
extents there, which is how an output's shape is inferred from the inputs and
how a target states the tile multiples its matrix unit takes. Each operand's
privilege is how privileges are inferred. Primitives of one ``kind`` share
target implementations: the gemm variants differ only in ``flags`` passed to
the implementation; elementwise primitives carry their meaning as an element
expression of their operands (``element``), the same trees ``task.compute``
builds, and targets supply the loop.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable, Mapping, Optional

from septran.frontend import elementwise as el
from septran.frontend.ir import Privilege


@dataclass(frozen=True)
class PrimitiveSig:
    name: str
    kind: str  # which family of target implementations can run it
    params: tuple[str, ...]
    privileges: tuple[Privilege, ...]
    # One letter (or index name) per dimension of each operand; None: any rank (a
    # task.compute operand used only for where it sits, never read).
    dims: tuple[Optional[tuple[str, ...] | str], ...]
    meaning: str
    batched: bool = False  # operands may share leading batch dimensions
    flags: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))
    # elementwise: the new value of operand 0 as an element expression of the operands' elements
    element: Optional[Callable[..., el.Elem]] = field(default=None, compare=False)
    attrs: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))  # fixed template fields ({op})
    # task.compute: (operand, axis from the end, index, rank) for a dimension read at the output's index but tied
    # to nothing (a shifted or guarded read beside it): the extent an allocated output takes where nothing ties
    # it, from a rank 0 (an unguarded plain read) before a rank 1 (guarded reads only; the longest).
    defaults: tuple[tuple[int, int, str, int], ...] = ()
    # operands read in a type of their own (a row's float32 statistic beside float16 rows), not the one shared type
    own_type: tuple[str, ...] = ()

    @property
    def ranks(self) -> tuple[Optional[int], ...]:
        return tuple(len(d) if d is not None else None for d in self.dims)

    @property
    def per_operand_batch(self) -> bool:
        """task.compute: each operand may carry its own leading dimensions of one (a batch of one)."""
        return self.name == "compute"

    @property
    def equal_dims(self) -> tuple[tuple[tuple[int, int], tuple[int, int]], ...]:
        """((operand, axis), (operand, axis)) pairs with equal extents; axes count from the end."""
        first: dict[str, tuple[int, int]] = {}
        pairs = []
        for k, letters in enumerate(self.dims):
            for pos, letter in enumerate(letters or ()):
                where = (k, pos - len(letters))
                if letter in first:
                    pairs.append((first[letter], where))
                else:
                    first[letter] = where
        return tuple(pairs)

    def letter(self, operand: int, axis: int) -> str:
        """The letter of ``axis`` (counted in the operand without batch dimensions)."""
        return self.dims[operand][axis]


def _gemm(name: str, a: str, b: str, meaning: str, **flags) -> PrimitiveSig:
    return PrimitiveSig(
        name=name, kind="gemm", params=("C", "A", "B"),
        privileges=(Privilege.REDUCE, Privilege.READ, Privilege.READ),
        dims=("mn", a, b), meaning=meaning + " (leading dimensions: a batch)", batched=True,
        flags=MappingProxyType(flags),
    )


def _elementwise(name: str, params: tuple[str, ...], dims: tuple[str, ...], element, meaning: str) -> PrimitiveSig:
    return PrimitiveSig(
        name=name, kind="elementwise", params=params,
        privileges=(Privilege.READ_WRITE,) + (Privilege.READ,) * (len(params) - 1),
        dims=dims, meaning=meaning, batched=len(params) == 1, element=element,
    )


def _gelu(x: el.Elem) -> el.Elem:
    return x * 0.5 * (1.0 + el.Call("erf", (x * 0.7071067811865476,)))


def _gelu_tanh(x: el.Elem) -> el.Elem:
    return x * 0.5 * (1.0 + el.Call("tanh", (0.7978845608028654 * (x + 0.044715 * x * x * x),)))


def _reduce(name: str, op: str, out_priv: Privilege, clear: bool, meaning: str, kind: str = "reduce") -> PrimitiveSig:
    return PrimitiveSig(
        name=name, kind=kind, params=("out", "X"), privileges=(out_priv, Privilege.READ),
        dims=("i", "ij"), meaning=meaning, attrs=MappingProxyType({"op": op, "clear": clear}),
    )


PRIMITIVES: dict[str, PrimitiveSig] = {
    p.name: p
    for p in (
        _gemm("gemm", "mk", "kn", "C[m, n] += sum_k A[m, k] * B[k, n]", transpose_A=False, transpose_B=False),
        _gemm("gemm_at", "km", "kn", "C[m, n] += sum_k A[k, m] * B[k, n]", transpose_A=True, transpose_B=False),
        _gemm("gemm_bt", "mk", "nk", "C[m, n] += sum_k A[m, k] * B[n, k]", transpose_A=False, transpose_B=True),
        _elementwise("add_bias", ("C", "bias"), ("ij", "j"), lambda c, bias: c + bias, "C[i, j] += bias[j]"),
        _elementwise("relu", ("X",), ("ij",), lambda x: el.Call("maximum", (x, el.Num(0.0))), "X = max(X, 0)"),
        _elementwise("gelu", ("X",), ("ij",), _gelu, "X = X * (1 + erf(X / sqrt(2))) / 2 (torch's exact GELU)"),
        _elementwise("gelu_tanh", ("X",), ("ij",), _gelu_tanh,
                     "X = X * (1 + tanh(sqrt(2 / pi) * (X + 0.044715 X^3))) / 2 (torch's GELU, approximate='tanh')"),
        _reduce("row_max", "max", Privilege.READ_WRITE, False, "out[i] = max(out[i], max_j X[i, j])"),
        _reduce("row_sum", "sum", Privilege.WRITE, True, "out[i] = sum_j X[i, j]"),
        # its own kind: TileLang has no reduction of squares, so only a target that says so runs it (RMSNorm's sum
        # of squares read from X in one pass, no tile of squares written and read back)
        _reduce("row_sum_squares", "sumsq", Privilege.WRITE, True, "out[i] = sum_j X[i, j]^2", kind="reduce_squares"),
        PrimitiveSig(  # a variance's numerator in one pass over X, the squares in float32 (LayerNorm's second pass)
            name="row_sum_squared_deviations", kind="reduce_squares", params=("out", "X", "center"),
            privileges=(Privilege.WRITE, Privilege.READ, Privilege.READ), dims=("i", "ij", "i"),
            meaning="out[i] = sum_j (X[i, j] - center[i])^2", attrs=MappingProxyType({"op": "sumsq_dev", "clear": True}),
            own_type=("center",)),
        PrimitiveSig(  # LayerNorm's statistics in one pass over X (shifted sums, Chan's join): merged into running
            # ones, so that a row may come in tiles; count 0 starts a row
            name="row_moments", kind="reduce_squares", params=("mean", "m2", "count", "X"),
            privileges=(Privilege.READ_WRITE,) * 3 + (Privilege.READ,), dims=("i", "i", "i", "ij"),
            meaning="mean[i], m2[i], count[i]: the mean of X's row i, the sum of its squared deviations from that mean "
                    "and its length, joined with the values they held (count 0: none)",
            attrs=MappingProxyType({"op": "moments"}), own_type=("mean", "m2", "count")),
        _elementwise("silu", ("X",), ("ij",), lambda x: x / (1.0 + el.Call("exp", (-x,))), "X = X * sigmoid(X)"),
    )
}
