/* septran_cpu_typed.c -- the library's calls as the kernels call them.
 *
 * TileLang declares an extern from the arguments of each call (float* here, half* there), and C
 * forbids two declarations of one name with different types: so each function of septran_cpu.h
 * that takes tiles has one name per element type, e.g. septran_cpu_load_f32_f16 (a float32 tile
 * loaded from a float16 one); the dtype codes of the generic calls follow from the names. The
 * target indexes with 64 bits (tl.config_index_bitwidth), so sizes and strides arrive as int64_t
 * (SepTran's emitter widens every one); flags stay int32_t. Tiles are far below 2^31 elements.
 */
#include <stddef.h>
#include <stdint.h>

#include "septran_cpu.h"

typedef uint16_t f16;  /* IEEE binary16 bits (TileLang's half) */
typedef uint16_t bf16; /* bfloat16 bits (a float32's top half), as the program holds them */
typedef float f32;
typedef int64_t i64;

#define LOAD(D, S, DC, SC)                                                                                      \
  int32_t septran_cpu_load_##D##_##S(D* dst, S* src, i64 rows, i64 cols, i64 ld_dst,             \
                                     i64 ld_src, i64 valid_rows, i64 valid_cols) {                \
    return septran_cpu_load(dst, DC, src, SC, rows, cols, ld_dst, ld_src, valid_rows, valid_cols);            \
  }                                                                                                           \
  int32_t septran_cpu_store_##D##_##S(D* dst, S* src, i64 valid_rows, i64 valid_cols, i64 ld_dst, \
                                      i64 ld_src) {                                                       \
    return septran_cpu_store(dst, DC, src, SC, valid_rows, valid_cols, ld_dst, ld_src);                       \
  }                                                                                                           \
  int32_t septran_cpu_stream_##D##_##S(D* dst, S* src, i64 valid_rows, i64 valid_cols, i64 ld_dst,           \
                                       i64 ld_src) {                                                          \
    return septran_cpu_stream(dst, DC, src, SC, valid_rows, valid_cols, ld_dst, ld_src);                      \
  }

LOAD(f32, f32, SEPTRAN_CPU_F32, SEPTRAN_CPU_F32)
LOAD(f32, f16, SEPTRAN_CPU_F32, SEPTRAN_CPU_F16)
LOAD(f16, f32, SEPTRAN_CPU_F16, SEPTRAN_CPU_F32)
LOAD(f16, f16, SEPTRAN_CPU_F16, SEPTRAN_CPU_F16)
LOAD(f32, bf16, SEPTRAN_CPU_F32, SEPTRAN_CPU_BF16)
LOAD(bf16, f32, SEPTRAN_CPU_BF16, SEPTRAN_CPU_F32)
LOAD(bf16, bf16, SEPTRAN_CPU_BF16, SEPTRAN_CPU_BF16)

#define FILL(T, C)                                                                       \
  int32_t septran_cpu_fill_zero_##T(T* dst, i64 rows, i64 cols, i64 ld) {   \
    return septran_cpu_fill_zero(dst, C, rows, cols, ld);                                \
  }

FILL(f32, SEPTRAN_CPU_F32)
FILL(f16, SEPTRAN_CPU_F16)
FILL(bf16, SEPTRAN_CPU_BF16)

#define GEMM(T, C)                                                                                                   \
  int32_t septran_cpu_gemm_##T##_##T(f32* c, T* a, T* b, int32_t trans_a, int32_t trans_b, i64 c_rows,            \
                                     i64 c_cols, i64 a_rows, i64 a_cols, i64 b_rows, i64 b_cols,  \
                                     i64 ldc, i64 lda, i64 ldb) {                                         \
    return septran_cpu_gemm_tiles(c, a, b, C, trans_a, trans_b, c_rows, c_cols, a_rows, a_cols, b_rows, b_cols, ldc, \
                                  lda, ldb);                                                                          \
  }

GEMM(f32, SEPTRAN_CPU_F32)
GEMM(f16, SEPTRAN_CPU_F16)
GEMM(bf16, SEPTRAN_CPU_BF16) /* widened to float32 for OpenBLAS; the matrix units' GEMMs: septran_cpu_bf16.c */

#define REDUCE(OP)                                                                                     \
  int32_t septran_cpu_reduce_##OP##_f32(f32* out, f32* x, i64 rows, i64 cols, i64 ldx,    \
                                        int32_t clear) {                                               \
    return septran_cpu_reduce_##OP(out, x, rows, cols, ldx, clear);                                    \
  }

REDUCE(max)
REDUCE(min)
REDUCE(sum)
REDUCE(sumsq)

#define REDUCE_F16(OP)                                                                           \
  int32_t septran_cpu_reduce_##OP##_f16(f32* out, f16* x, i64 rows, i64 cols, i64 ldx, int32_t clear) { \
    return septran_cpu_reduce_##OP##_half(out, x, rows, cols, ldx, clear);                       \
  }

REDUCE_F16(max)
REDUCE_F16(min)
REDUCE_F16(sum)
REDUCE_F16(sumsq)

#define REDUCE_BF16(OP)                                                                                   \
  int32_t septran_cpu_reduce_##OP##_bf16(f32* out, bf16* x, i64 rows, i64 cols, i64 ldx, int32_t clear) { \
    return septran_cpu_reduce_##OP##_bfloat16(out, x, rows, cols, ldx, clear);                            \
  }

REDUCE_BF16(max)
REDUCE_BF16(min)
REDUCE_BF16(sum)
REDUCE_BF16(sumsq)

int32_t septran_cpu_reduce_sumsq_dev_f32(f32* out, f32* x, f32* center, i64 rows, i64 cols, i64 ldx, int32_t clear) {
  return septran_cpu_reduce_sumsq_dev(out, x, center, rows, cols, ldx, clear);
}

int32_t septran_cpu_reduce_sumsq_dev_f16(f32* out, f16* x, f32* center, i64 rows, i64 cols, i64 ldx, int32_t clear) {
  return septran_cpu_reduce_sumsq_dev_half(out, x, center, rows, cols, ldx, clear);
}

/* The norms' write (lowering/compute_forms.py): RMSNorm's y = x * s[i] * w[j], LayerNorm's
 * y = (x - c[i]) * s[i] * w[j] + b[j]; x and y of one type (T), w and b of that type or float32 (W), the row
 * statistics float32: septran_cpu_row_scale_<T>_w<W>. */
#define ROWS(T, C, W, WC)                                                                                              \
  int32_t septran_cpu_row_scale_##T##_w##W(T* y, T* x, f32* s, W* w, i64 rows, i64 cols, i64 ldy, i64 ldx) {         \
    return septran_cpu_rows_affine_w(y, x, C, NULL, s, w, NULL, WC, (int32_t)rows, (int32_t)cols, (int32_t)ldy,     \
                                     (int32_t)ldx);                                                                   \
  }                                                                                                                    \
  int32_t septran_cpu_row_normalize_##T##_w##W(T* y, T* x, f32* c, f32* s, W* w, W* b, i64 rows, i64 cols, i64 ldy,  \
                                               i64 ldx) {                                                             \
    return septran_cpu_rows_affine_w(y, x, C, c, s, w, b, WC, (int32_t)rows, (int32_t)cols, (int32_t)ldy,           \
                                     (int32_t)ldx);                                                                   \
  }

ROWS(f32, SEPTRAN_CPU_F32, f32, SEPTRAN_CPU_F32)
ROWS(f16, SEPTRAN_CPU_F16, f16, SEPTRAN_CPU_F16)
ROWS(bf16, SEPTRAN_CPU_BF16, bf16, SEPTRAN_CPU_BF16)
ROWS(f16, SEPTRAN_CPU_F16, f32, SEPTRAN_CPU_F32)
ROWS(bf16, SEPTRAN_CPU_BF16, f32, SEPTRAN_CPU_F32)
