"""The C of the launcher's glue: the small torch operations between a segment's kernels (``glue``), done inside it.

Two kinds of operation, each a frozen record with its C (``emit``) and a copy with its pointers moved (``moved``,
for ``runner._with_slots``):
- ``Each``: an elementwise result over a strided box, each element a C expression of the inputs' elements at the
  same place (broadcast inputs have stride 0) and of the loop indices: ``arange``, ``add``, ``le``, ``cos``, a
  dtype conversion. Strides are expressions over the dynamic sizes, as the copies' are.
- ``Indexed``: a box copied per index read at run time from an integer tensor: ``embedding`` and
  ``index_select`` gather (``dst[k] = src[idx[k]]``), ``index_copy_`` scatters (``dst[idx[k]] = src[k]``). An
  index outside its dimension returns an error code, as torch raises.
"""
from __future__ import annotations

from dataclasses import dataclass

from septran.model.launcher.cexpr import c_expr

# C types of the dtypes the glue computes in (torch.bool is one byte, as C++'s bool on every target we build for)
CTYPES = {"float32": "float", "float64": "double", "int64": "int64_t", "int32": "int32_t", "int16": "int16_t",
          "int8": "int8_t", "uint8": "uint8_t", "bool": "bool"}

PRELUDE = r"""#include <math.h>

/* bfloat16 (its bits) <-> float32, as torch converts: widening is exact; narrowing rounds to nearest even, and a
   NaN becomes 0x7FC0 (c10's round_to_nearest_even). A kernel that computes bfloat16 in float32 copies gets them
   through these (record.Recorder._converted). */
static inline float st_bf16_f32(uint16_t b) { uint32_t u = (uint32_t)b << 16; float f; memcpy(&f, &u, 4); return f; }
static inline uint16_t st_f32_bf16(float f) {
  if (f != f) return UINT16_C(0x7FC0);
  uint32_t u; memcpy(&u, &f, 4);
  return (uint16_t)((u + UINT32_C(0x7FFF) + ((u >> 16) & 1)) >> 16);
}

/* per index k (idx[k * istride], int64 or int32) the box of `rank` dimensions from src to dst: a gather reads
   src at idx[k] along its indexed dimension (stride s_dim) and writes dst at k (d_dim); a scatter the other way.
   Returns 1 where an index lies outside [0, limit) (nothing after it is copied), as torch raises. */
static int st_indexed(char* dst, const char* src, const char* idx, int idx_bytes, int64_t n, int64_t istride,
                      int64_t limit, int scatter, int64_t d_dim, int64_t s_dim, int rank, const int64_t* size,
                      const int64_t* ds, const int64_t* ss, int64_t item) {
  for (int64_t k = 0; k < n; ++k) {
    int64_t i = idx_bytes == 8 ? ((const int64_t*)idx)[k * istride] : (int64_t)((const int32_t*)idx)[k * istride];
    if (i < 0 || i >= limit) return 1;
    int64_t at_dst = scatter ? i : k, at_src = scatter ? k : i;
    st_copy(dst + at_dst * d_dim * item, src + at_src * s_dim * item, rank, size, ds, ss, item);
  }
  return 0;
}
"""


def _box(xs, symbols: dict) -> str:
    return "{" + (", ".join(c_expr(e, symbols) for e in xs) or "0") + "}"


@dataclass(frozen=True)
class Load:
    """An input of an ``Each``: its pointer, its strides over the output's box (0 where broadcast), its C type."""

    ptr: object  # source.Ptr
    strides: tuple
    ctype: str


@dataclass(frozen=True)
class Each:
    """``out[i...] = (out type)(body)``: ``body`` a C expression of ``x0``, ``x1``... (the inputs' elements, as
    their C types) and ``i0``, ``i1``... (the loop indices)."""

    out: object  # source.Ptr
    sizes: tuple
    strides: tuple
    ctype: str
    ins: tuple  # Load per input
    body: str
    scalars: tuple = ()  # expressions over the dynamic sizes the body names c0, c1...

    def moved(self, ptr) -> "Each":
        return Each(ptr(self.out), self.sizes, self.strides, self.ctype,
                    tuple(Load(ptr(x.ptr), x.strides, x.ctype) for x in self.ins), self.body, self.scalars)

    def emit(self, symbols: dict, spell) -> list:
        rank = len(self.sizes)
        lines = ["  {"]
        lines.append(f"    {self.ctype}* o = ({self.ctype}*){spell(self.out)};")
        for k, x in enumerate(self.ins):
            lines.append(f"    const {x.ctype}* a{k} = (const {x.ctype}*){spell(x.ptr)};")
        for k, e in enumerate(self.scalars):
            lines.append(f"    const int64_t c{k} = {c_expr(e, symbols)};")
        pad = "    "
        for d, e in enumerate(self.sizes):
            lines.append(f"{pad}for (int64_t i{d} = 0; i{d} < {c_expr(e, symbols)}; ++i{d}) {{")
            pad += "  "

        def at(strides) -> str:
            terms = [f"i{d} * {c_expr(s, symbols)}" for d, s in enumerate(strides) if not (s.is_number and s == 0)]
            return " + ".join(terms) or "0"

        for k, x in enumerate(self.ins):
            lines.append(f"{pad}const {x.ctype} x{k} = a{k}[{at(x.strides)}];")
        lines.append(f"{pad}o[{at(self.strides)}] = ({self.ctype})({self.body});")
        for _ in range(rank):
            pad = pad[:-2]
            lines.append(f"{pad}}}")
        lines.append("  }")
        return lines


@dataclass(frozen=True)
class Indexed:
    """A gather or a scatter of boxes along one dimension, by an integer index tensor (``st_indexed``)."""

    dst: object  # source.Ptr
    src: object
    idx: object  # source.Ptr of the first index
    idx_bytes: int
    count: object  # how many indices (expression)
    idx_stride: object
    limit: object  # the indexed dimension's length
    scatter: bool
    dst_dim: object  # strides along the indexed / counted dimension
    src_dim: object
    sizes: tuple  # the box copied per index
    dst_strides: tuple
    src_strides: tuple
    item: int

    def moved(self, ptr) -> "Indexed":
        return Indexed(ptr(self.dst), ptr(self.src), ptr(self.idx), self.idx_bytes, self.count, self.idx_stride,
                       self.limit, self.scatter, self.dst_dim, self.src_dim, self.sizes, self.dst_strides,
                       self.src_strides, self.item)

    def emit(self, symbols: dict, spell) -> list:
        rank = len(self.sizes)
        arrays = ", ".join(_box(xs, symbols) for xs in (self.sizes, self.dst_strides, self.src_strides))
        c = lambda e: c_expr(e, symbols)  # noqa: E731
        return ["  {",
                f"    const int64_t box[3][{max(rank, 1)}] = {{{arrays}}};",
                f"    if (st_indexed({spell(self.dst)}, {spell(self.src)}, {spell(self.idx)}, {self.idx_bytes}, "
                f"{c(self.count)}, {c(self.idx_stride)}, {c(self.limit)}, {int(self.scatter)}, {c(self.dst_dim)}, "
                f"{c(self.src_dim)}, {rank}, box[0], box[1], box[2], {self.item})) {{ rc = ST_RC; goto done; }}",
                "  }"]
