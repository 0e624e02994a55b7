/* septran_cpu_gemv.h -- inside the vendor library: one row of C against a whole matrix (septran_cpu_gemv.c). */
#ifndef SEPTRAN_CPU_GEMV_H
#define SEPTRAN_CPU_GEMV_H

#include <stdint.h>

/* c[0:n] += a . op(B), float32: a is k elements a stride inc_a apart; B is k x n (stride ldb), or with trans_b
 * n x k. Outside a parallel region the work is split over the OpenMP threads. */
void septran_cpu_row_gemm(float* c, const float* a, int32_t inc_a, const float* b, int32_t k, int32_t n,
                          int32_t ldb, int32_t trans_b);

/* From this many elements of B a call outside a parallel region splits over the threads; 0: SEPTRAN_CPU_GEMV_SPLIT
 * or the default again (for the tests). */
void septran_cpu_gemv_split(int64_t elements);

#endif
