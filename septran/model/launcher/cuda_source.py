"""The CUDA C++ of one segment's launcher on a GPU target: each kernel's host entry called on one stream.

A GPU kernel TileLang 0.1.15 builds (``execution_backend: tvm_ffi``) exposes one host entry: a TVM-FFI function
(``Executable.jit().main``) taking a ``DLTensor*`` per parameter. It checks each tensor's dtype, device and
shape, binds the dynamic sizes from the shapes, and launches the kernel on the stream TVM-FFI's environment holds
for the device (``TVMFFIEnvGetStream``). So the launcher, per kernel call, fills one ``DLTensor`` per argument
(the pointer with its view's offset, the shape and the contiguous strides from the dynamic sizes: a plan hands
its kernel contiguous tensors only, and TileLang's entry reads NULL strides as all ones, not as contiguous)
and calls it through ``TVMFFIFunctionCall``, after setting the segment's stream with
``TVMFFIEnvSetStream`` (the previous one is put back before it returns).

The functions are
``int32_t septran_segment(void* const* F, char* const* P, const int64_t* S, char* A, void* stream, int32_t dev)``
and ``int64_t septran_segment_arena(const int64_t* S)``: ``F`` holds ``TVMFFIFunctionCall``, ``TVMFFIEnvSetStream``
and then the kernels' function handles (all bound at run time: the source names no address and no library),
``P`` the segment's buffers, ``S`` the dynamic sizes, ``A`` the device arena the scratch buffers lie in (its size
for these sizes from ``septran_segment_arena``; one per shape bucket, kept by the runner, so a captured CUDA
graph's scratch addresses stay valid), ``dev`` the CUDA device. Copies are ``cudaMemcpyAsync`` where both sides
are one run of memory and a small strided-copy kernel otherwise; an accumulator is zeroed with
``cudaMemsetAsync``. Nothing synchronises: everything is ordered on ``stream`` (which is what lets the runner
capture a launch as a CUDA graph). It returns 0, or ``1000 * (op + 1) + code``: code 1 where the kernel's host
entry failed (its error stays raised in TVM-FFI's thread-local slot), 2 where a CUDA call failed, 3 where a
copy has more than 8 dimensions left after merging.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from septran.model.launcher.cexpr import c_expr
from septran.model.launcher.source import Copy, Program, Ptr, Zero, copy_box

API = 2  # F[0] TVMFFIFunctionCall, F[1] TVMFFIEnvSetStream; kernel i is F[API + i]
ALIGN = 256  # scratch buffers start at multiples of this many bytes in the arena (cudaMalloc's own alignment)

# DLPack's (type code, bits) per torch dtype (dlpack.h: kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLBool 6),
# as torch's own DLPack export writes them
DL_TYPES = {torch.float16: (2, 16), torch.bfloat16: (4, 16), torch.float32: (2, 32), torch.float64: (2, 64),
            torch.int8: (0, 8), torch.int16: (0, 16), torch.int32: (0, 32), torch.int64: (0, 64),
            torch.uint8: (1, 8), torch.bool: (6, 8)}


@dataclass(frozen=True)
class Tensor:
    """One argument of a kernel's host entry: where it lies, its shape (expressions) and its DLPack type."""

    ptr: Ptr
    sizes: tuple
    strides: tuple  # elements (the contiguous ones)
    dtype: torch.dtype


@dataclass(frozen=True)
class KernelCall:
    fn: int  # index of the kernel's handle among F[API:]
    args: tuple  # Tensor per parameter, in the kernel's order

    def moved(self, ptr) -> "KernelCall":
        """The call with each argument's pointer mapped by ``ptr`` (``runner._with_slots``)."""
        return KernelCall(self.fn, tuple(Tensor(ptr(t.ptr), t.sizes, t.strides, t.dtype) for t in self.args))


PRELUDE = r"""#include <stdint.h>
#include <cuda_runtime.h>
#include <tvm/ffi/c_api.h>
#include <tvm/ffi/extra/c_env_api.h>

typedef int (*st_call_t)(TVMFFIObjectHandle, TVMFFIAny*, int32_t, TVMFFIAny*);
typedef int (*st_set_stream_t)(int32_t, int32_t, TVMFFIStreamHandle, TVMFFIStreamHandle*);

static inline int64_t st_floordiv(int64_t a, int64_t b) { int64_t q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; }
static inline int64_t st_mod(int64_t a, int64_t b) { int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
static inline int64_t st_max(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t st_min(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t st_align(int64_t n) { return (st_max(n, INT64_C(1)) + INT64_C(255)) / INT64_C(256) * INT64_C(256); }

/* A strided box of up to 8 dimensions (sizes, and both sides' strides in elements). */
struct st_box {
  int64_t size[8], ds[8], ss[8];
  int rank;
};

/* dst[i...] = src[i...] over the box, one element per thread of a grid-stride loop. */
template <typename T>
__global__ void st_copy_kernel(char* dst, const char* src, st_box b, int64_t total) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = i, d = 0, s = 0;
    for (int k = b.rank - 1; k >= 0; --k) {
      int64_t c = r % b.size[k];
      r /= b.size[k];
      d += c * b.ds[k];
      s += c * b.ss[k];
    }
    ((T*)dst)[d] = ((const T*)src)[s];
  }
}

/* The box after merging the dimensions that are one run in both and dropping those of size 1 (as the cpu
   launcher's st_copy): one cudaMemcpyAsync where what is left is one contiguous run, else the copy kernel.
   0, or 2 (a CUDA error) or 3 (more than 8 dimensions left). */
static int st_copy(char* dst, const char* src, int rank, const int64_t* size0, const int64_t* ds0, const int64_t* ss0,
                   int64_t item, cudaStream_t stream) {
  st_box b;
  int r = 0;
  int64_t total = 1;
  for (int d = 0; d < rank; ++d) {
    if (size0[d] == 0) return 0;
    total *= size0[d];
    if (size0[d] == 1) continue;
    if (r > 0 && b.ds[r - 1] == size0[d] * ds0[d] && b.ss[r - 1] == size0[d] * ss0[d]) {
      b.size[r - 1] *= size0[d]; b.ds[r - 1] = ds0[d]; b.ss[r - 1] = ss0[d];
    } else if (r < 8) {
      b.size[r] = size0[d]; b.ds[r] = ds0[d]; b.ss[r] = ss0[d]; ++r;
    } else {
      return 3;
    }
  }
  b.rank = r;
  if (r == 0 || (r == 1 && b.ds[0] == 1 && b.ss[0] == 1))
    return cudaMemcpyAsync(dst, src, (size_t)(total * item), cudaMemcpyDeviceToDevice, stream) == cudaSuccess ? 0 : 2;
  int64_t blocks = st_min((total + 255) / 256, INT64_C(4096));
  switch (item) {
    case 1: st_copy_kernel<uint8_t><<<(unsigned)blocks, 256, 0, stream>>>(dst, src, b, total); break;
    case 2: st_copy_kernel<uint16_t><<<(unsigned)blocks, 256, 0, stream>>>(dst, src, b, total); break;
    case 4: st_copy_kernel<uint32_t><<<(unsigned)blocks, 256, 0, stream>>>(dst, src, b, total); break;
    case 8: st_copy_kernel<uint64_t><<<(unsigned)blocks, 256, 0, stream>>>(dst, src, b, total); break;
    default: return 3;
  }
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
"""


def _ptr(p: Ptr, symbols: dict) -> str:
    base = f"P[{p.base}]" if isinstance(p.base, int) else f"T{p.base[1]}"
    return f"({base} + {c_expr(p.offset, symbols)})"


def _arena(program: Program, symbols: dict) -> list[str]:
    lines = ['extern "C" int64_t septran_segment_arena(const int64_t* S) {', "  (void)S;", "  int64_t n = 0;"]
    for size in program.scratch:
        lines.append(f"  n += st_align({c_expr(size, symbols)});")
    lines += ["  return n;", "}", ""]
    return lines


def _call(k: int, op: KernelCall, symbols: dict) -> list[str]:
    lines = ["  {"]
    for j, t in enumerate(op.args):
        code, bits = DL_TYPES[t.dtype]
        shape = ", ".join(c_expr(e, symbols) for e in t.sizes) or "0"
        strides = ", ".join(c_expr(e, symbols) for e in t.strides) or "0"
        lines.append(f"    int64_t sh{j}[{max(len(t.sizes), 1)}] = {{{shape}}};")
        lines.append(f"    int64_t st{j}[{max(len(t.sizes), 1)}] = {{{strides}}};")
        lines.append(f"    DLTensor t{j} = {{(void*){_ptr(t.ptr, symbols)}, {{kDLCUDA, dev}}, {len(t.sizes)}, "
                     f"{{{code}, {bits}, 1}}, sh{j}, st{j}, 0}};")
    n = len(op.args)
    lines.append(f"    TVMFFIAny a[{max(n, 1)}];")
    for j in range(n):
        lines.append(f"    a[{j}].type_index = kTVMFFIDLTensorPtr; a[{j}].zero_padding = 0; a[{j}].v_ptr = &t{j};")
    lines.append("    TVMFFIAny res;")
    lines.append("    res.type_index = kTVMFFINone; res.zero_padding = 0; res.v_int64 = 0;")
    lines.append(f"    if (call(F[{API + op.fn}], a, {n}, &res) != 0) {{ rc = {1000 * (k + 1) + 1}; goto done; }}")
    lines.append("  }")
    return lines


def emit(program: Program, symbols: dict) -> str:
    """The launcher's CUDA C++ source (``program``'s ops: ``KernelCall``, ``Copy`` and ``Zero``)."""
    lines = [PRELUDE]
    lines += _arena(program, symbols)
    lines += ['extern "C" int32_t septran_segment(void* const* F, char* const* P, const int64_t* S, char* A, '
              "void* stream_, int32_t dev) {",
              "  (void)P; (void)S; (void)A;",
              "  cudaStream_t stream = (cudaStream_t)stream_;",
              "  st_call_t call = (st_call_t)F[0];",
              "  st_set_stream_t set_stream = (st_set_stream_t)F[1];",
              "  (void)call;",
              "  TVMFFIStreamHandle before = NULL;",
              "  if (set_stream(kDLCUDA, dev, stream_, &before) != 0) return -1;",
              "  int32_t rc = 0;",
              "  int64_t at = 0;",
              "  (void)at;"]
    for i, size in enumerate(program.scratch):
        lines.append(f"  char* T{i} = A + at;")
        lines.append(f"  at += st_align({c_expr(size, symbols)});")
        lines.append(f"  (void)T{i};")
    for k, op in enumerate(program.ops):
        if isinstance(op, KernelCall):
            lines += _call(k, op, symbols)
        elif isinstance(op, Zero):
            lines.append(f"  if (cudaMemsetAsync({_ptr(op.dst, symbols)}, 0, (size_t){c_expr(op.nbytes, symbols)}, "
                         f"stream) != cudaSuccess) {{ rc = {1000 * (k + 1) + 2}; goto done; }}")
        elif isinstance(op, Copy):
            rank = len(op.sizes)
            lines.append("  {")
            lines.append(copy_box(op, symbols))
            lines.append(f"    int e = st_copy({_ptr(op.dst, symbols)}, {_ptr(op.src, symbols)}, {rank}, "
                         f"box[0], box[1], box[2], {op.item}, stream);")
            lines.append(f"    if (e) {{ rc = {1000 * (k + 1)} + e; goto done; }}")
            lines.append("  }")
        else:
            raise TypeError(f"no CUDA launcher code for {type(op).__name__}")
    lines += ["done:", "  set_stream(kDLCUDA, dev, before, NULL);", "  return rc;", "}"]
    return "\n".join(lines) + "\n"
