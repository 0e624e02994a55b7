"""The C++ of one segment's launcher: each kernel's C entry called straight, copies done in place.

The function is ``int32_t septran_segment(void* const* F, char* const* P, const int64_t* S)``: ``F`` the kernels'
entry points (bound at run time, so the source names no address and is the same in every process), ``P`` the
segment's buffers (its inputs, then the outputs Python allocates), ``S`` the dynamic sizes. Scratch buffers
(copies made contiguous for a kernel, outputs no one outside reads) are allocated per call. It returns 0, or
``1000 * (op + 1) + code`` for the first kernel that returned a nonzero ``code`` (``-1`` where a scratch
allocation failed).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from septran.model.launcher.cexpr import c_expr

PRELUDE = r"""#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline int64_t st_floordiv(int64_t a, int64_t b) { int64_t q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; }
static inline int64_t st_mod(int64_t a, int64_t b) { int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
static inline int64_t st_max(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t st_min(int64_t a, int64_t b) { return a < b ? a : b; }

/* dst[i...] = src[i...] over a strided box of `rank` dimensions (strides in elements, the last one's run copied
   with memcpy where both are unit-stride) */
static void st_copy(char* dst, const char* src, int rank, const int64_t* size, const int64_t* ds, const int64_t* ss,
                    int64_t item) {
  if (rank == 0) { memcpy(dst, src, item); return; }
  for (int d = 0; d < rank; ++d) if (size[d] == 0) return;
  if (rank == 1) {
    if (ds[0] == 1 && ss[0] == 1) { memcpy(dst, src, size[0] * item); return; }
    for (int64_t i = 0; i < size[0]; ++i) memcpy(dst + i * ds[0] * item, src + i * ss[0] * item, item);
    return;
  }
  for (int64_t i = 0; i < size[0]; ++i)
    st_copy(dst + i * ds[0] * item, src + i * ss[0] * item, rank - 1, size + 1, ds + 1, ss + 1, item);
}
"""


@dataclass(frozen=True)
class Ptr:
    """A pointer: buffer ``base`` (an index into P, or ``("scratch", i)``) plus ``offset`` bytes (an expression)."""

    base: object
    offset: object  # sympy


@dataclass(frozen=True)
class Call:
    fn: int  # index into F
    args: tuple  # Ptr per tensor argument
    sizes: tuple  # (expression, "int32_t" or "int64_t") per size argument


@dataclass(frozen=True)
class Copy:
    dst: Ptr
    src: Ptr
    sizes: tuple
    dst_strides: tuple
    src_strides: tuple
    item: int


@dataclass(frozen=True)
class Zero:
    """An output the kernel reads before writing (an accumulator): zero-filled before its call, as its plan does."""

    dst: Ptr
    nbytes: object


@dataclass
class Program:
    ops: list = field(default_factory=list)
    scratch: list = field(default_factory=list)  # byte sizes (expressions)


def _ptr(p: Ptr, symbols: dict) -> str:
    base = f"P[{p.base}]" if isinstance(p.base, int) else f"T{p.base[1]}"
    return f"({base} + {c_expr(p.offset, symbols)})"


def emit(program: Program, symbols: dict) -> str:
    """The launcher's source."""
    lines = [PRELUDE, 'extern "C" int32_t septran_segment(void* const* F, char* const* P, const int64_t* S) {',
             "  (void)F; (void)P; (void)S;", "  int32_t rc = 0;"]
    for i in range(len(program.scratch)):
        lines.append(f"  char* T{i} = NULL;")
    for i, size in enumerate(program.scratch):
        lines.append(f"  T{i} = (char*)malloc((size_t)st_max({c_expr(size, symbols)}, INT64_C(64)));")
        lines.append(f"  if (!T{i}) {{ rc = -1; goto done; }}")
    for k, op in enumerate(program.ops):
        if isinstance(op, Call):
            types = ["void*"] * len(op.args) + [ctype for _, ctype in op.sizes]
            values = [_ptr(a, symbols) for a in op.args] + [f"({ctype}){c_expr(e, symbols)}" for e, ctype in op.sizes]
            lines.append(f"  rc = ((int32_t (*)({', '.join(types)}))F[{op.fn}])({', '.join(values)});")
            lines.append(f"  if (rc) {{ rc = 1000 * {k + 1} + rc; goto done; }}")
        elif isinstance(op, Zero):
            lines.append(f"  memset({_ptr(op.dst, symbols)}, 0, (size_t){c_expr(op.nbytes, symbols)});")
        else:
            rank = len(op.sizes)
            arrays = ", ".join(f"{{{', '.join(c_expr(e, symbols) for e in xs) or '0'}}}"
                               for xs in (op.sizes, op.dst_strides, op.src_strides))
            lines.append("  {")
            lines.append(f"    const int64_t box[3][{max(rank, 1)}] = {{{arrays}}};")
            lines.append(f"    st_copy({_ptr(op.dst, symbols)}, {_ptr(op.src, symbols)}, {rank}, "
                         f"box[0], box[1], box[2], {op.item});")
            lines.append("  }")
    lines.append("done:")
    for i in range(len(program.scratch)):
        lines.append(f"  free(T{i});")
    lines.append("  return rc;")
    lines.append("}")
    return "\n".join(lines) + "\n"
