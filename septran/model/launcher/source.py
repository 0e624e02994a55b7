"""The C++ of one segment's launcher: each kernel's C entry called straight, copies done in place.

The function is ``int32_t septran_segment(void* const* F, char* const* P, const int64_t* S)``: ``F`` the kernels'
entry points (bound at run time, so the source names no address and is the same in every process), ``P`` the
segment's buffers (its inputs, then the outputs Python allocates), ``S`` the dynamic sizes. Scratch buffers
(copies made contiguous for a kernel, outputs no one outside reads) are kept per thread from call to call (a
fresh large allocation faults its pages in at every call). It returns 0, or
``1000 * (op + 1) + code`` for the first kernel that returned a nonzero ``code`` (``-1`` where a scratch
allocation failed).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from septran.model.launcher.cexpr import c_expr

PRELUDE = r"""#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A scratch buffer kept from call to call (per thread, grown when a call needs more, freed at the thread's exit):
   a fresh malloc of a large buffer is an mmap, or heap the allocator trims, and faults its pages in at every
   call (about 0.25 ms for a decode step's 1 MB of KV-cache copies). */
struct st_scratch {
  char* p = nullptr;
  int64_t n = 0;
  char* get(int64_t want) {
    if (want > n) { free(p); p = (char*)malloc((size_t)want); n = p ? want : 0; }
    return p;
  }
  ~st_scratch() { free(p); }
};

static inline int64_t st_floordiv(int64_t a, int64_t b) { int64_t q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; }
static inline int64_t st_mod(int64_t a, int64_t b) { int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
static inline int64_t st_max(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t st_min(int64_t a, int64_t b) { return a < b ? a : b; }

/* dst[i...] = src[i...] over a strided box of `rank` dimensions (strides in elements, the last one's run copied
   with memcpy where both are unit-stride) */
static void st_copy_box(char* dst, const char* src, int rank, const int64_t* size, const int64_t* ds, const int64_t* ss,
                        int64_t item) {
  if (rank == 0) { memcpy(dst, src, item); return; }
  if (rank == 1) {
    if (ds[0] == 1 && ss[0] == 1) { memcpy(dst, src, size[0] * item); return; }
    for (int64_t i = 0; i < size[0]; ++i) memcpy(dst + i * ds[0] * item, src + i * ss[0] * item, item);
    return;
  }
  for (int64_t i = 0; i < size[0]; ++i)
    st_copy_box(dst + i * ds[0] * item, src + i * ss[0] * item, rank - 1, size + 1, ds + 1, ss + 1, item);
}

/* st_copy_box after merging the dimensions that are one run in both (a KV cache's (heads, length, head_dim) slice
   is one memcpy per head, not one per row) and dropping those of size 1; a large copy splits its outer
   dimension across the OpenMP threads */
static void st_copy(char* dst, const char* src, int rank, const int64_t* size0, const int64_t* ds0, const int64_t* ss0,
                    int64_t item) {
  int64_t size[16], ds[16], ss[16];
  int r = 0;
  int64_t total = 1;
  for (int d = 0; d < rank; ++d) {
    if (size0[d] == 0) return;
    total *= size0[d];
    if (size0[d] == 1) continue;
    if (r > 0 && ds[r - 1] == size0[d] * ds0[d] && ss[r - 1] == size0[d] * ss0[d]) {
      size[r - 1] *= size0[d]; ds[r - 1] = ds0[d]; ss[r - 1] = ss0[d];
    } else if (r < 16) {
      size[r] = size0[d]; ds[r] = ds0[d]; ss[r] = ss0[d]; ++r;
    } else {
      st_copy_box(dst, src, rank, size0, ds0, ss0, item); return;
    }
  }
  if (r >= 2 && total * item >= (INT64_C(1) << 18)) {
    #pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < size[0]; ++i)
      st_copy_box(dst + i * ds[0] * item, src + i * ss[0] * item, r - 1, size + 1, ds + 1, ss + 1, item);
    return;
  }
  st_copy_box(dst, src, r, size, ds, ss, item);
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


def copy_box(op: Copy, symbols: dict) -> str:
    """A ``Copy``'s sizes and both strides as the C array ``box[3][rank]`` its copy call reads (the GPU launcher's
    too)."""
    arrays = ", ".join(f"{{{', '.join(c_expr(e, symbols) for e in xs) or '0'}}}"
                       for xs in (op.sizes, op.dst_strides, op.src_strides))
    return f"    const int64_t box[3][{max(len(op.sizes), 1)}] = {{{arrays}}};"


def emit(program: Program, symbols: dict) -> str:
    """The launcher's source."""
    from septran.model.launcher import glue_source

    glue = any(hasattr(op, "emit") for op in program.ops)  # (the glue's helpers only where a glue op is)
    lines = [PRELUDE + (glue_source.PRELUDE if glue else ""), 'extern "C" int32_t septran_segment(void* const* F, char* const* P, const int64_t* S) {',
             "  (void)F; (void)P; (void)S;", "  int32_t rc = 0;"]
    if program.scratch:
        lines.append(f"  static thread_local st_scratch kept[{len(program.scratch)}];")
    for i in range(len(program.scratch)):
        lines.append(f"  char* T{i} = NULL;")
    for i, size in enumerate(program.scratch):
        lines.append(f"  T{i} = kept[{i}].get(st_max({c_expr(size, symbols)}, INT64_C(64)));")
        lines.append(f"  if (!T{i}) {{ rc = -1; goto done; }}")
    for k, op in enumerate(program.ops):
        if isinstance(op, Call):
            types = ["void*"] * len(op.args) + [ctype for _, ctype in op.sizes]
            values = [_ptr(a, symbols) for a in op.args] + [f"({ctype}){c_expr(e, symbols)}" for e, ctype in op.sizes]
            lines.append(f"  rc = ((int32_t (*)({', '.join(types)}))F[{op.fn}])({', '.join(values)});")
            lines.append(f"  if (rc) {{ rc = 1000 * {k + 1} + rc; goto done; }}")
        elif hasattr(op, "emit"):  # the glue's operations (glue_source)
            rc = f"1000 * {k + 1} + 1"
            lines.extend(line.replace("ST_RC", rc) for line in op.emit(symbols, lambda p: _ptr(p, symbols)))
        elif isinstance(op, Zero):
            lines.append(f"  memset({_ptr(op.dst, symbols)}, 0, (size_t){c_expr(op.nbytes, symbols)});")
        else:
            rank = len(op.sizes)
            lines.append("  {")
            lines.append(copy_box(op, symbols))
            lines.append(f"    st_copy({_ptr(op.dst, symbols)}, {_ptr(op.src, symbols)}, {rank}, "
                         f"box[0], box[1], box[2], {op.item});")
            lines.append("  }")
    lines.append("done:")
    lines.append("  return rc;")
    lines.append("}")
    return "\n".join(lines) + "\n"
