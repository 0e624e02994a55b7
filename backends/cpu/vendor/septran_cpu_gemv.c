/* septran_cpu_gemv.c -- one row of C (a decode step's GEMM), read at the memory's speed and split over the cores.
 *
 * c[0:n] += a . op(B): B is the whole weight matrix and the step's time is reading it once. Two things decide it:
 * - B as k rows of n (c += sum_k a[k] B[k, :]): eight rows are streamed at once with software prefetch 512 bytes
 *   ahead in each, over the full width. OpenBLAS's sgemv reached 15.7 GB/s on one Zen 1 core for 1 x 11008 x 4096,
 *   torch (MKL) 17, this loop 17 to 18 (measured side by side, loaded machine, best of 21); 2048 to 4096-wide
 *   column panels of the same loop lost 10 to 25 % (each panel restarts the hardware prefetcher's streams).
 * - The cores: a call made outside a parallel region (a kernel whose grid is this one program) with a B of at
 *   least 2^24 elements splits the columns (or B's rows, transposed) over the OpenMP threads itself; any other
 *   runs on the calling thread, as every other leaf does (see SPLIT_ELEMENTS).
 * Built with -fopenmp; the OpenMP runtime is the one torch loaded (libgomp.so.1), so the thread count follows
 * torch.set_num_threads.
 */
#include "septran_cpu_gemv.h"

#include <omp.h>
#include <stddef.h>
#include <stdlib.h>

void scipy_cblas_sgemv(int order, int trans, int m, int n, float alpha, const float* a, int lda, const float* x,
                       int incx, float beta, float* y, int incy);
enum { ROW_MAJOR = 101, NO_TRANS = 111 };

typedef float v8 __attribute__((vector_size(32), aligned(4))); /* aligned(4): an unaligned load or store */

enum { ROWS = 8, PREFETCH_FLOATS = 128, CHUNK = 64 }; /* CHUNK: a thread's columns start on a 256-byte boundary */

/* c[0:n] += sum_r a[r * inc] * b[r * ldb + 0:n] for r < k */
static void rows_into(float* c, const float* a, int32_t inc, const float* b, int32_t k, int32_t n, int32_t ldb) {
  int32_t r = 0;
  for (; r + ROWS <= k; r += ROWS) {
    const float* p[ROWS];
    v8 s[ROWS];
    for (int q = 0; q < ROWS; q++) {
      p[q] = b + (size_t)(r + q) * ldb;
      float x = a[(size_t)(r + q) * inc];
      s[q] = (v8){x, x, x, x, x, x, x, x};
    }
    int32_t j = 0;
    for (; j + 16 <= n; j += 16) {
      v8 lo = *(const v8*)(c + j), hi = *(const v8*)(c + j + 8);
      for (int q = 0; q < ROWS; q++) {
        __builtin_prefetch(p[q] + j + PREFETCH_FLOATS);
        lo += s[q] * *(const v8*)(p[q] + j);
        hi += s[q] * *(const v8*)(p[q] + j + 8);
      }
      *(v8*)(c + j) = lo;
      *(v8*)(c + j + 8) = hi;
    }
    for (; j < n; j++) {
      float t = c[j];
      for (int q = 0; q < ROWS; q++) t += a[(size_t)(r + q) * inc] * p[q][j];
      c[j] = t;
    }
  }
  for (; r < k; r++) {
    const float x = a[(size_t)r * inc], *p = b + (size_t)r * ldb;
    for (int32_t j = 0; j < n; j++) c[j] += x * p[j];
  }
}

/* [*start, *end) of `n` for thread `t` of `threads`, in whole CHUNKs */
static void share(int32_t n, int t, int threads, int32_t* start, int32_t* end) {
  int32_t chunks = (n + CHUNK - 1) / CHUNK, per = chunks / threads, extra = chunks % threads;
  int32_t first = t * per + (t < extra ? t : extra), count = per + (t < extra);
  *start = first * CHUNK < n ? first * CHUNK : n;
  *end = (first + count) * CHUNK < n ? (first + count) * CHUNK : n;
}

/* Below this many elements of B (16 MB of float32, a 4096 x 4096 weight) a call stays on its thread. Waking
 * the OpenMP team is cheap, but its threads then spin for a while after the call, and in a model's decode step
 * they compete with torch's own OpenMP threads on the same cores: with every GEMM of at least 2^17 elements
 * split, a Llama block's decode step at 2 threads went from 0.6 to 4.1 ms (whole 4 ms scheduler slices lost;
 * OMP_WAIT_POLICY=passive gave 0.88), measured on an idle 2-core Zen 1. A weight this large takes milliseconds
 * to stream, which the second core halves. */
enum { SPLIT_ELEMENTS = 1 << 24 };

/* SEPTRAN_CPU_GEMV_SPLIT (elements) overrides it, read once (getenv walks the environment: a decode step's
 * attention makes dozens of small calls); septran_cpu_gemv_split sets it from the tests. */
static int64_t split_at; /* 0: not read yet (a race writes the same value twice) */

void septran_cpu_gemv_split(int64_t elements) { split_at = elements; }

static int64_t split_elements(void) {
  if (split_at <= 0) {
    const char* v = getenv("SEPTRAN_CPU_GEMV_SPLIT");
    long long x = v ? atoll(v) : 0;
    split_at = x > 0 ? (int64_t)x : SPLIT_ELEMENTS;
  }
  return split_at;
}

static int threads_for(int32_t n, int32_t k) {
  if (omp_in_parallel() || (int64_t)n * k < split_elements()) return 1;
  int t = omp_get_max_threads(), most = (n + CHUNK - 1) / CHUNK;
  return t < most ? t : most;
}

void septran_cpu_row_gemm(float* c, const float* a, int32_t inc_a, const float* b, int32_t k, int32_t n,
                          int32_t ldb, int32_t trans_b) {
  int threads = threads_for(n, k);
  if (threads == 1) { /* no OpenMP region at all: entering even a serialised one costs a decode step's small calls */
    if (!trans_b)
      rows_into(c, a, inc_a, b, k, n, ldb);
    else
      scipy_cblas_sgemv(ROW_MAJOR, NO_TRANS, n, k, 1.0f, b, ldb, a, inc_a, 1.0f, c, 1);
    return;
  }
  if (!trans_b) {
#pragma omp parallel num_threads(threads)
    {
      int32_t start, end;
      share(n, omp_get_thread_num(), omp_get_num_threads(), &start, &end);
      if (end > start) rows_into(c + start, a, inc_a, b + start, k, end - start, ldb);
    }
    return;
  }
  /* B is n rows of k: each of c's elements is a dot product over one of B's rows (OpenBLAS's sgemv, per share) */
#pragma omp parallel num_threads(threads)
  {
    int32_t start, end;
    share(n, omp_get_thread_num(), omp_get_num_threads(), &start, &end);
    if (end > start)
      scipy_cblas_sgemv(ROW_MAJOR, NO_TRANS, end - start, k, 1.0f, b + (size_t)start * ldb, ldb, a, inc_a, 1.0f,
                        c + start, 1);
  }
}
