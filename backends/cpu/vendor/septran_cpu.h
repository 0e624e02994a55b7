/* septran_cpu.h -- the CPU target's vendor library: tile copies, row reductions and GEMM
 * leaves that TileLang's C target reaches through T.call_extern.
 *
 * Every function takes only pointers and int32_t (the matrix units' GEMMs: int64_t sizes, as
 * the kernels call them) and returns int32_t, because TileLang declares each extern itself
 * from its arguments (extern "C", typed pointers such as float* or half*): a kernel must NOT
 * include this header (its void* would conflict).
 *
 * Tiles are row-major; ld* is the row stride in ELEMENTS. dtype codes: SEPTRAN_CPU_F32 = 0,
 * SEPTRAN_CPU_F16 = 1 (IEEE binary16; float32 -> float16 rounds to nearest even), SEPTRAN_CPU_BF16 = 2
 * (bfloat16: a float32's top 16 bits; float32 -> bfloat16 rounds to nearest even, inf stays inf, NaN
 * stays NaN, made quiet; float16 <-> bfloat16 is refused).
 * Return value: 0, or SEPTRAN_CPU_E_ARGS for a negative size, an unknown dtype or a row
 * stride shorter than a row (nothing is written then), SEPTRAN_CPU_E_NOMEM when the
 * float16 or bfloat16 GEMM's scratch cannot grow, SEPTRAN_CPU_E_UNIT when a matrix unit's GEMM
 * runs on a CPU (or under an OS) without that unit (C then holds the widened GEMM's result). Every
 * function is thread-safe: one call per thread, as the OpenMP grid makes them.
 */
#ifndef SEPTRAN_CPU_H
#define SEPTRAN_CPU_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { SEPTRAN_CPU_F32 = 0, SEPTRAN_CPU_F16 = 1, SEPTRAN_CPU_BF16 = 2 };
enum { SEPTRAN_CPU_E_ARGS = -1, SEPTRAN_CPU_E_NOMEM = -2, SEPTRAN_CPU_E_UNIT = -3 };

/* C[m x n] (float32, stride ldc) += op(A)[m x k] @ op(B)[k x n], A and B of `dtype`.
 * op(A) = A stored m x k (stride lda), or with trans_a A stored k x m; op(B) = B stored
 * k x n (stride ldb), or with trans_b B stored n x k. m, n or k zero: C unchanged.
 * float32 is OpenBLAS's sgemm (one thread); float16 and bfloat16 are converted to float32 first. */
int32_t septran_cpu_gemm(float* C, void* A, void* B, int32_t dtype, int32_t m, int32_t n, int32_t k,
                         int32_t ldc, int32_t lda, int32_t ldb, int32_t trans_a, int32_t trans_b);

/* The same on tiles that may overhang their tensors: each operand's valid (in-bounds) rows and columns as
 * stored; the product covers only what every operand holds (m = min(C's rows, op(A)'s rows), ...). */
int32_t septran_cpu_gemm_tiles(float* C, void* A, void* B, int32_t dtype, int32_t trans_a, int32_t trans_b,
                               int32_t c_rows, int32_t c_cols, int32_t a_rows, int32_t a_cols, int32_t b_rows,
                               int32_t b_cols, int32_t ldc, int32_t lda, int32_t ldb);

/* out[i] = op(clear ? identity : out[i], op over j < cols of x[i*ldx + j]), i < rows, float32.
 * Identities: max -inf, min +inf, sum 0. NaN inputs: unspecified (not propagated reliably). sumsq: the sum of
 * x[i*ldx + j]^2 (each square summed as it is read). */
int32_t septran_cpu_reduce_max(float* out, float* x, int32_t rows, int32_t cols, int32_t ldx, int32_t clear);
int32_t septran_cpu_reduce_min(float* out, float* x, int32_t rows, int32_t cols, int32_t ldx, int32_t clear);
int32_t septran_cpu_reduce_sum(float* out, float* x, int32_t rows, int32_t cols, int32_t ldx, int32_t clear);
int32_t septran_cpu_reduce_sumsq(float* out, float* x, int32_t rows, int32_t cols, int32_t ldx, int32_t clear);
/* The same over float16 x (IEEE binary16), out float32: a tensor reduced in place. */
int32_t septran_cpu_reduce_max_half(float* out, void* x, int32_t rows, int32_t cols, int32_t ldx, int32_t clear);
int32_t septran_cpu_reduce_min_half(float* out, void* x, int32_t rows, int32_t cols, int32_t ldx, int32_t clear);
int32_t septran_cpu_reduce_sum_half(float* out, void* x, int32_t rows, int32_t cols, int32_t ldx, int32_t clear);
int32_t septran_cpu_reduce_sumsq_half(float* out, void* x, int32_t rows, int32_t cols, int32_t ldx, int32_t clear);
/* And over bfloat16 x (a float32's top half). */
int32_t septran_cpu_reduce_max_bfloat16(float* out, void* x, int32_t rows, int32_t cols, int32_t ldx, int32_t clear);
int32_t septran_cpu_reduce_min_bfloat16(float* out, void* x, int32_t rows, int32_t cols, int32_t ldx, int32_t clear);
int32_t septran_cpu_reduce_sum_bfloat16(float* out, void* x, int32_t rows, int32_t cols, int32_t ldx, int32_t clear);
int32_t septran_cpu_reduce_sumsq_bfloat16(float* out, void* x, int32_t rows, int32_t cols, int32_t ldx, int32_t clear);
/* out[i] = (clear ? 0 : out[i]) + the sum over j < cols of (x[i*ldx + j] - center[i])^2, in float32 (x float32, or
 * float16 for _half). */
int32_t septran_cpu_reduce_sumsq_dev(float* out, float* x, float* center, int32_t rows, int32_t cols, int32_t ldx,
                                     int32_t clear);
int32_t septran_cpu_reduce_sumsq_dev_half(float* out, void* x, float* center, int32_t rows, int32_t cols, int32_t ldx,
                                          int32_t clear);

/* A row's statistics in one pass (septran_cpu_moments.c): the mean of x's row i and the sum of its squared
 * deviations from that mean (cols elements, float32 or float16 for _half) joined into mean[i], m2[i] over count[i]
 * elements (count[i] 0: they start the row). Shifted sums from one read (the row summed again from its mean where
 * they would cancel), Chan's join: as stable as two passes. */
int32_t septran_cpu_moments(float* mean, float* m2, float* count, float* x, int32_t rows, int32_t cols, int32_t ldx);
int32_t septran_cpu_moments_half(float* mean, float* m2, float* count, void* x, int32_t rows, int32_t cols,
                                 int32_t ldx);
/* The same over bfloat16 x, as the kernels call it (int64_t sizes). */
int32_t septran_cpu_moments_bf16(float* mean, float* m2, float* count, void* x, int64_t rows, int64_t cols,
                                 int64_t ldx);

/* The norms' write, for rows x cols of y and x (both of dtype; ldy, ldx elements apart), c and s a row's float32
 * statistics, w and b a column's weight and bias (of dtype): y[i, j] = ((x[i, j] - c[i]) * s[i]) * w[j] + b[j],
 * computed in float32 and rounded once into y; c or b NULL: not subtracted, not added. y may be x. */
int32_t septran_cpu_rows_affine(void* y, const void* x, int32_t dtype, const float* c, const float* s, const void* w,
                                const void* b, int32_t rows, int32_t cols, int32_t ldy, int32_t ldx);
/* The same with w and b of wdtype: the rows' type, or float32 (a weight kept in float32 beside 16-bit rows). */
int32_t septran_cpu_rows_affine_w(void* y, const void* x, int32_t dtype, const float* c, const float* s, const void* w,
                                  const void* b, int32_t wdtype, int32_t rows, int32_t cols, int32_t ldy, int32_t ldx);

/* A rows x cols tile: dst[i*ld_dst + j] = convert(src[i*ld_src + j]) where i < valid_rows and
 * j < valid_cols, else 0 (valid_* are clamped to [0, rows] and [0, cols]). */
int32_t septran_cpu_load(void* dst, int32_t dst_dtype, void* src, int32_t src_dtype, int32_t rows, int32_t cols,
                         int32_t ld_dst, int32_t ld_src, int32_t valid_rows, int32_t valid_cols);

/* Only the valid part: dst[i*ld_dst + j] = convert(src[i*ld_src + j]), i < valid_rows, j < valid_cols. */
int32_t septran_cpu_store(void* dst, int32_t dst_dtype, void* src, int32_t src_dtype, int32_t valid_rows,
                          int32_t valid_cols, int32_t ld_dst, int32_t ld_src);

/* The same as septran_cpu_store, written past the caches where both are float32 (non-temporal stores, then a
 * store fence): an output much larger than the caches that nothing reads soon then costs no read of each of its
 * lines before the write. Other types: septran_cpu_store. The mapping asks for it (copy eviction_policy evict_first). */
int32_t septran_cpu_stream(void* dst, int32_t dst_dtype, void* src, int32_t src_dtype, int32_t valid_rows,
                           int32_t valid_cols, int32_t ld_dst, int32_t ld_src);

/* dst[i*ld + j] = 0 for i < rows, j < cols. */
int32_t septran_cpu_fill_zero(void* dst, int32_t dtype, int32_t rows, int32_t cols, int32_t ld);

/* ---- bfloat16 on the CPU's matrix units (septran_cpu_bf16.c) ---------------------------------------- */

/* Which units this CPU and OS let the library use: SEPTRAN_CPU_UNIT_AVX512BF16 (VDPBF16PS, with the OS
 * keeping ZMM state), SEPTRAN_CPU_UNIT_AMX (AMX-TILE and AMX-BF16, tile state enabled and Linux's permission
 * granted). Found once per process. Built with -DSEPTRAN_CPU_EMULATE_UNITS: both, emulated in plain C. */
enum { SEPTRAN_CPU_UNIT_AVX512BF16 = 1, SEPTRAN_CPU_UNIT_AMX = 2 };
int32_t septran_cpu_units(void);

/* septran_cpu_gemm_tiles for bfloat16 A and B (uint16_t bits), C float32, on one unit: the products are exact
 * and summed in float32 (the unit's order, not OpenBLAS's). As the kernels call them: sizes and strides are
 * int64_t here, as in septran_cpu_typed.c's names. Where septran_cpu_units() lacks the unit: the widened GEMM
 * (septran_cpu_gemm_bf16_bf16) computes C, and the call returns SEPTRAN_CPU_E_UNIT. */
int32_t septran_cpu_gemm_avx512bf16_bf16(float* c, uint16_t* a, uint16_t* b, int32_t trans_a, int32_t trans_b,
                                         int64_t c_rows, int64_t c_cols, int64_t a_rows, int64_t a_cols,
                                         int64_t b_rows, int64_t b_cols, int64_t ldc, int64_t lda, int64_t ldb);
int32_t septran_cpu_gemm_amx_bf16(float* c, uint16_t* a, uint16_t* b, int32_t trans_a, int32_t trans_b,
                                  int64_t c_rows, int64_t c_cols, int64_t a_rows, int64_t a_cols, int64_t b_rows,
                                  int64_t b_cols, int64_t ldc, int64_t lda, int64_t ldb);

/* ---- the MKL that torch carries (septran_cpu_mkl.c) ------------------------------------------------ */

/* Which of MKL's GEMMs this process has (found in torch's libtorch_cpu.so once per process; 0 without it):
 * SEPTRAN_CPU_MKL_F32 (sgemm), SEPTRAN_CPU_MKL_BF16 (cblas_gemm_bf16bf16f32). */
enum { SEPTRAN_CPU_MKL_F32 = 1, SEPTRAN_CPU_MKL_BF16 = 2 };
int32_t septran_cpu_mkl(void);

/* septran_cpu_gemm_tiles through MKL on the calling thread (T: f32 or bf16 for A and B; C float32), sizes as the
 * kernels pass them. f16, at most 16 rows or one column of C: the OpenBLAS leaf's paths (widening, streaming). Where
 * the process lacks MKL's GEMM of that type: the OpenBLAS leaf computes C and the call returns SEPTRAN_CPU_E_UNIT. */
int32_t septran_cpu_gemm_mkl_f32_f32(float* c, float* a, float* b, int32_t trans_a, int32_t trans_b, int64_t c_rows,
                                     int64_t c_cols, int64_t a_rows, int64_t a_cols, int64_t b_rows, int64_t b_cols,
                                     int64_t ldc, int64_t lda, int64_t ldb);
int32_t septran_cpu_gemm_mkl_f16_f16(float* c, uint16_t* a, uint16_t* b, int32_t trans_a, int32_t trans_b,
                                     int64_t c_rows, int64_t c_cols, int64_t a_rows, int64_t a_cols, int64_t b_rows,
                                     int64_t b_cols, int64_t ldc, int64_t lda, int64_t ldb);
int32_t septran_cpu_gemm_mkl_bf16_bf16(float* c, uint16_t* a, uint16_t* b, int32_t trans_a, int32_t trans_b,
                                       int64_t c_rows, int64_t c_cols, int64_t a_rows, int64_t a_cols, int64_t b_rows,
                                       int64_t b_cols, int64_t ldc, int64_t lda, int64_t ldb);

#ifdef __cplusplus
}
#endif

#endif /* SEPTRAN_CPU_H */
