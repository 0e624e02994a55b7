/* septran_cpu_gemv.h -- inside the vendor library: one row of C against a whole matrix (septran_cpu_gemv.c). */
#ifndef SEPTRAN_CPU_GEMV_H
#define SEPTRAN_CPU_GEMV_H

#include <stdint.h>

/* c[0:n] += a . op(B), float32: a is k elements a stride inc_a apart; B is k x n (stride ldb), or with trans_b
 * n x k. Outside a parallel region the work is split over the OpenMP threads. */
void septran_cpu_row_gemm(float* c, const float* a, int32_t inc_a, const float* b, int32_t k, int32_t n,
                          int32_t ldb, int32_t trans_b);

/* The same for a 16-bit B (bf16 != 0: bfloat16, else IEEE float16), widened in registers: a decode step's
 * bfloat16 or float16 weight read once, never copied to float32 first. */
void septran_cpu_row_gemm_16(float* c, const float* a, int32_t inc_a, const uint16_t* b, int32_t bf16, int32_t k,
                             int32_t n, int32_t ldb, int32_t trans_b);

/* C (m x n, stride ldc) += op(A) B for 2 <= m <= SEPTRAN_CPU_FEW_ROWS, float32 (at 16 rows level with sgemm, at
 * 2 to 12 1.1 to 2.5x torch's matmul, 1 thread, 4096 x 4096, AMD EPYC Zen 4): A m x k (trans_a: k x m), stride
 * lda; B k x n, stride ldb, read once. Outside a parallel region a large B is split over the threads by columns. */
enum { SEPTRAN_CPU_FEW_ROWS = 16 };
void septran_cpu_few_rows_gemm(float* c, int32_t ldc, const float* a, int32_t lda, int32_t trans_a, int32_t m,
                               const float* b, int32_t k, int32_t n, int32_t ldb);
/* The same for a 16-bit B (bf16 != 0: bfloat16, else IEEE float16), widened in registers a strip at a time: a
 * batch's decode step on a bfloat16 or float16 weight, read once and never copied to float32 first. */
void septran_cpu_few_rows_gemm_16(float* c, int32_t ldc, const float* a, int32_t lda, int32_t trans_a, int32_t m,
                                  const uint16_t* b, int32_t bf16, int32_t k, int32_t n, int32_t ldb);
/* C (m x n, stride ldc) += a B^T for m <= SEPTRAN_CPU_FEW_ROWS, a row-major m x k float32 and a 16-bit B stored
 * n x k (a Linear's weight), widened in registers, read once. Split over the threads by B's rows as above. */
void septran_cpu_few_dots_gemm_16(float* c, int32_t ldc, const float* a, int32_t m, const uint16_t* b, int32_t bf16,
                                  int32_t k, int32_t n, int32_t ldb);
/* The same for float32: a m x k with row stride lda, B float32 n x k (a Linear's weight), read once. */
void septran_cpu_few_dots_gemm(float* c, int32_t ldc, const float* a, int32_t lda, int32_t m, const float* b,
                               int32_t k, int32_t n, int32_t ldb);
/* The same for bfloat16 A (m x k, row stride lda) and B on AVX512-BF16 dot products (VDPBF16PS); only where
 * septran_cpu_few_dots_unit() says this library was built with them (-march=native on such a CPU). */
int septran_cpu_few_dots_unit(void);
void septran_cpu_few_dots_gemm_bf16(float* c, int32_t ldc, const uint16_t* a, int32_t lda, int32_t m,
                                    const uint16_t* b, int32_t k, int32_t n, int32_t ldb);
/* How many threads a call with n columns of C and depth k splits over (1 inside a parallel region or below the
 * split size), and thread t's rows or columns [start, end) of n, in chunks of 64 (256 bytes of float32): for
 * septran_cpu_gemm's few rows, and its whole C. */
int septran_cpu_split_threads(int32_t n, int32_t k);
void septran_cpu_split_share(int32_t n, int t, int threads, int32_t* start, int32_t* end);
/* A whole GEMM called outside a parallel region: the threads it runs on (1: the caller's alone) */
int septran_cpu_whole_threads(int64_t m, int64_t n, int64_t k);
/* From this many elements of B a call outside a parallel region splits over the threads; 0: SEPTRAN_CPU_GEMV_SPLIT
 * or the default again (for the tests). */
void septran_cpu_gemv_split(int64_t elements);

#endif
