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
#if defined(__AVX2__) || defined(__F16C__) || defined(__FMA__)
#include <immintrin.h>
#endif
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- 16-bit B (a bfloat16 or float16 weight), widened in registers: read once, at half float32's bytes ----- */

typedef uint16_t u16x8 __attribute__((vector_size(16), aligned(2)));
typedef uint32_t u32x8 __attribute__((vector_size(32)));
typedef _Float16 h8 __attribute__((vector_size(16), aligned(2)));

/* Eight at a time by AVX2's / F16C's one-instruction widenings where compiled for them: g++ 12 lowers the generic
 * conversions to 128-bit halves and inserts on znver1 (7 GB/s for bf16, 2 for float16, measured; fp32: 13). */
static inline v8 bf16x8(const uint16_t* p) { /* a bfloat16 is a float32's top half: exact */
#if defined(__AVX2__)
  return (v8)_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16);
#else
  u32x8 w = __builtin_convertvector(*(const u16x8*)p, u32x8) << 16;
  v8 f;
  __builtin_memcpy(&f, &w, sizeof f);
  return f;
#endif
}
static inline v8 f16x8(const uint16_t* p) {
#if defined(__F16C__)
  return (v8)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p));
#else
  return __builtin_convertvector(*(const h8*)p, v8);
#endif
}
/* acc + x * y in one rounding: -std=c11 turns g++'s contraction off, and a separate multiply and add halved the
 * loops' rate (measured: 8 GB/s of bf16 against 14 of float32) */
static inline v8 fma8(v8 acc, v8 x, v8 y) {
#if defined(__FMA__)
  return (v8)_mm256_fmadd_ps((__m256)x, (__m256)y, (__m256)acc);
#else
  return acc + x * y;
#endif
}
static inline float bf16_1(const uint16_t* p) {
  uint32_t w = (uint32_t)*p << 16;
  float f;
  __builtin_memcpy(&f, &w, sizeof f);
  return f;
}
static inline float f16_1(const uint16_t* p) { return (float)*(const _Float16*)p; }

/* rows_into for 16-bit B (NAME widens with WIDEN8 / WIDEN1) */
#define ROWS_INTO_16(NAME, WIDEN8, WIDEN1)                                                                        \
  static void NAME(float* c, const float* a, int32_t inc, const uint16_t* b, int32_t k, int32_t n, int32_t ldb) { \
    int32_t r = 0;                                                                                               \
    for (; r + ROWS <= k; r += ROWS) {                                                                           \
      const uint16_t* p[ROWS];                                                                                   \
      v8 s[ROWS];                                                                                                \
      for (int q = 0; q < ROWS; q++) {                                                                           \
        p[q] = b + (size_t)(r + q) * ldb;                                                                        \
        float x = a[(size_t)(r + q) * inc];                                                                      \
        s[q] = (v8){x, x, x, x, x, x, x, x};                                                                     \
      }                                                                                                          \
      int32_t j = 0;                                                                                             \
      for (; j + 32 <= n; j += 32) { /* a cache line of each row: one prefetch each */                          \
        v8 c0 = *(const v8*)(c + j), c1 = *(const v8*)(c + j + 8);                                               \
        v8 c2 = *(const v8*)(c + j + 16), c3 = *(const v8*)(c + j + 24);                                         \
        for (int q = 0; q < ROWS; q++) {                                                                         \
          __builtin_prefetch(p[q] + j + 2 * PREFETCH_FLOATS);                                                    \
          c0 = fma8(c0, s[q], WIDEN8(p[q] + j));                                                                         \
          c1 = fma8(c1, s[q], WIDEN8(p[q] + j + 8));                                                                     \
          c2 = fma8(c2, s[q], WIDEN8(p[q] + j + 16));                                                                    \
          c3 = fma8(c3, s[q], WIDEN8(p[q] + j + 24));                                                                    \
        }                                                                                                        \
        *(v8*)(c + j) = c0;                                                                                      \
        *(v8*)(c + j + 8) = c1;                                                                                  \
        *(v8*)(c + j + 16) = c2;                                                                                 \
        *(v8*)(c + j + 24) = c3;                                                                                 \
      }                                                                                                          \
      for (; j + 8 <= n; j += 8) {                                                                               \
        v8 lo = *(const v8*)(c + j);                                                                             \
        for (int q = 0; q < ROWS; q++) lo = fma8(lo, s[q], WIDEN8(p[q] + j));                                            \
        *(v8*)(c + j) = lo;                                                                                      \
      }                                                                                                          \
      for (; j < n; j++) {                                                                                       \
        float t = c[j];                                                                                          \
        for (int q = 0; q < ROWS; q++) t += a[(size_t)(r + q) * inc] * WIDEN1(p[q] + j);                         \
        c[j] = t;                                                                                                \
      }                                                                                                          \
    }                                                                                                            \
    for (; r < k; r++) {                                                                                         \
      const float x = a[(size_t)r * inc];                                                                        \
      const uint16_t* p = b + (size_t)r * ldb;                                                                   \
      for (int32_t j = 0; j < n; j++) c[j] += x * WIDEN1(p + j);                                                 \
    }                                                                                                            \
  }

/* B stored n x k (a Linear's weight): c[j] += a . B[j, :], four of B's rows at a time against one pass of a */
#define DOTS_INTO_16(NAME, WIDEN8, WIDEN1)                                                                      \
  static void NAME(float* c, const float* a, int32_t inc, const uint16_t* b, int32_t k, int32_t n, int32_t ldb) { \
    int32_t j = 0;                                                                                             \
    for (; j < n; j += 4) {                                                                                    \
      int rows = n - j < 4 ? n - j : 4;                                                                        \
      const uint16_t* p[4];                                                                                    \
      for (int q = 0; q < 4; q++) p[q] = b + (size_t)(j + (q < rows ? q : 0)) * ldb;                           \
      v8 s[4] = {{0}, {0}, {0}, {0}}, u[4] = {{0}, {0}, {0}, {0}};                                             \
      int32_t e = 0;                                                                                           \
      if (inc == 1) {                                                                                          \
        for (; e + 32 <= k; e += 32) { /* a cache line of each row: one prefetch each */                       \
          v8 x0 = *(const v8*)(a + e), x1 = *(const v8*)(a + e + 8);                                           \
          v8 x2 = *(const v8*)(a + e + 16), x3 = *(const v8*)(a + e + 24);                                     \
          for (int q = 0; q < 4; q++) {                                                                        \
            __builtin_prefetch(p[q] + e + 2 * PREFETCH_FLOATS);                                                \
            s[q] = fma8(fma8(s[q], x0, WIDEN8(p[q] + e)), x2, WIDEN8(p[q] + e + 16));                                        \
            u[q] = fma8(fma8(u[q], x1, WIDEN8(p[q] + e + 8)), x3, WIDEN8(p[q] + e + 24));                                    \
          }                                                                                                    \
        }                                                                                                      \
        for (; e + 8 <= k; e += 8) {                                                                           \
          v8 x = *(const v8*)(a + e);                                                                          \
          for (int q = 0; q < 4; q++) s[q] = fma8(s[q], x, WIDEN8(p[q] + e));                                            \
        }                                                                                                      \
      }                                                                                                        \
      for (int q = 0; q < rows; q++) {                                                                         \
        float t = 0;                                                                                           \
        for (int l = 0; l < 8; l++) t += s[q][l] + u[q][l];                                                    \
        for (int32_t f = e; f < k; f++) t += a[(size_t)f * inc] * WIDEN1(p[q] + f);                            \
        c[j + q] += t;                                                                                         \
      }                                                                                                        \
    }                                                                                                          \
  }

ROWS_INTO_16(rows_into_bf16, bf16x8, bf16_1)
ROWS_INTO_16(rows_into_f16, f16x8, f16_1)
DOTS_INTO_16(dots_into_bf16, bf16x8, bf16_1)
DOTS_INTO_16(dots_into_f16, f16x8, f16_1)

/* A few rows of C (at most SEPTRAN_CPU_FEW_ROWS; a batch's decode step): c[i, 0:n] += sum_r op(A)[i, r] B[r, 0:n],
 * B (k x n) streamed once, eight of its rows at a time: each 16-column strip of them comes from memory once
 * (prefetched) and every row of C takes it from L1. op(A)[i, r] is a[i * a_row + r * a_col]. OpenBLAS's sgemm packs
 * all of B first, reading it twice: 4 x 4096 x 4096 at 1 thread 9.5 to 10.5 -> 4.3 ms (torch 9.3), AMD EPYC Zen 4.
 * A strip of B is loaded into registers before any row of C is stored: loaded after each row's store, the loads of
 * a B whose rows lie as many bytes from C's as a multiple of 4 KB (B 4096 floats wide and C's tile, at some stack
 * depths) waited on those stores (4K aliasing: the core compares address bits 0-11 only): 16 x 4096 x 4096 at 1
 * thread 39 ms against 11 where they do not (torch 13), 8 rows 16 against 5.5; now 9.2 to 9.9 and 4.7 to 5.6. */
#define LOAD8_F32(p) (*(const v8*)(p))
#define LOAD1_F32(p) (*(p))
#define FEW_ROWS_BODY(NAME, T, LOAD8, LOAD1)                                                                     \
  static void NAME(float* c, int32_t ldc, const float* a, size_t a_row, size_t a_col, int32_t m, const void* bv,  \
                   int32_t k, int32_t n, int32_t ldb) {                                                          \
    const T* b = (const T*)bv;                                                                                   \
    int32_t r = 0;                                                                                               \
    for (; r + ROWS <= k; r += ROWS) {                                                                           \
      const T* p[ROWS];                                                                                          \
      float x[SEPTRAN_CPU_FEW_ROWS][ROWS];                                                                       \
      for (int q = 0; q < ROWS; q++) {                                                                           \
        p[q] = b + (size_t)(r + q) * ldb;                                                                        \
        for (int32_t i = 0; i < m; i++) x[i][q] = a[i * a_row + (size_t)(r + q) * a_col];                        \
      }                                                                                                          \
      int32_t j = 0;                                                                                             \
      for (; j + 16 <= n; j += 16) {                                                                             \
        v8 blo[ROWS], bhi[ROWS]; /* the strip of B, loaded before any row of C is stored (see above) */          \
        for (int q = 0; q < ROWS; q++) {                                                                         \
          __builtin_prefetch(p[q] + j + PREFETCH_FLOATS);                                                        \
          blo[q] = LOAD8(p[q] + j);                                                                              \
          bhi[q] = LOAD8(p[q] + j + 8);                                                                          \
        }                                                                                                        \
        for (int32_t i = 0; i < m; i++) {                                                                        \
          float* ci = c + (size_t)i * ldc + j;                                                                   \
          v8 lo = *(const v8*)ci, hi = *(const v8*)(ci + 8);                                                     \
          for (int q = 0; q < ROWS; q++) {                                                                       \
            float e = x[i][q];                                                                                   \
            v8 s = {e, e, e, e, e, e, e, e};                                                                     \
            lo = fma8(lo, s, blo[q]);                                                                            \
            hi = fma8(hi, s, bhi[q]);                                                                            \
          }                                                                                                      \
          *(v8*)ci = lo;                                                                                         \
          *(v8*)(ci + 8) = hi;                                                                                   \
        }                                                                                                        \
      }                                                                                                          \
      for (; j < n; j++)                                                                                         \
        for (int32_t i = 0; i < m; i++) {                                                                        \
          float t = c[(size_t)i * ldc + j];                                                                      \
          for (int q = 0; q < ROWS; q++) t += x[i][q] * LOAD1(p[q] + j);                                         \
          c[(size_t)i * ldc + j] = t;                                                                            \
        }                                                                                                        \
    }                                                                                                            \
    for (; r < k; r++) {                                                                                         \
      const T* p = b + (size_t)r * ldb;                                                                          \
      for (int32_t i = 0; i < m; i++) {                                                                          \
        const float e = a[i * a_row + (size_t)r * a_col];                                                        \
        float* ci = c + (size_t)i * ldc;                                                                         \
        for (int32_t j = 0; j < n; j++) ci[j] += e * LOAD1(p + j);                                               \
      }                                                                                                          \
    }                                                                                                            \
  }

/* float32 B, and a 16-bit B widened in registers a strip at a time (a batch's decode step on a bfloat16 or
 * float16 weight: never copied to float32 first) */
FEW_ROWS_BODY(few_rows_body, float, LOAD8_F32, LOAD1_F32)
FEW_ROWS_BODY(few_rows_body_bf16, uint16_t, bf16x8, bf16_1)
FEW_ROWS_BODY(few_rows_body_f16, uint16_t, f16x8, f16_1)

typedef void (*few_rows_fn)(float*, int32_t, const float*, size_t, size_t, int32_t, const void*, int32_t, int32_t,
                            int32_t);

/* C's rows in a buffer of this thread's own (kept, as septran_cpu_scratch's: the kernels' OpenMP threads live as
 * long as the process) whose rows lie 64 bytes past a multiple of 4 KB apart, 2 KB from B's rows modulo 4 KB: a
 * C of n = 4096 floats (a decode step's tile) has rows exactly 16 KB apart, so each row's loads waited on the row
 * before's stores (4K aliasing), as did B's loads where B lay so too. Copied in and out: 2 m n floats each way,
 * against the k n of B streamed. 16 x 4096 x 4096 at 1 thread, Zen 4: 12 to 16 ms in place (by where C's tile
 * lay), 9.2 here (torch 12.6). */
static _Thread_local float* c_rows;
static _Thread_local size_t c_rows_floats;

static void few_rows_into(few_rows_fn body, float* c, int32_t ldc, const float* a, size_t a_row, size_t a_col,
                          int32_t m, const void* b, int32_t k, int32_t n, int32_t ldb) {
  size_t ld = ((size_t)(n > 16 ? n - 16 : 0) + 1023) / 1024 * 1024 + 16; /* >= n, and 16 past a multiple of 1024 */
  size_t need = (size_t)m * ld + 1024;                                     /* + room to place it against B */
  if (need > c_rows_floats) {
    float* grown = aligned_alloc(64, need * sizeof(float));
    if (!grown) { /* no memory for it: in place */
      body(c, ldc, a, a_row, a_col, m, b, k, n, ldb);
      return;
    }
    free(c_rows);
    c_rows = grown;
    c_rows_floats = need;
  }
  size_t shift = (((uintptr_t)b + 2048 - (uintptr_t)c_rows) & 4095) / 4 & ~(size_t)15; /* 64-byte steps */
  float* w = c_rows + shift;
  for (int32_t i = 0; i < m; i++) memcpy(w + (size_t)i * ld, c + (size_t)i * ldc, (size_t)n * sizeof(float));
  body(w, (int32_t)ld, a, a_row, a_col, m, b, k, n, ldb);
  for (int32_t i = 0; i < m; i++) memcpy(c + (size_t)i * ldc, w + (size_t)i * ld, (size_t)n * sizeof(float));
}

/* A few rows of C against a B stored n x k (a Linear's weight; a batch's decode step): c[i, j] += a[i, :] . B[j, :],
 * a float32 m x k with row stride lda, B float32 or 16-bit (widened in registers). Blocks of 4 rows of B by 4 rows of a: the 16 sums
 * stay in registers over the whole depth, each 8 of B's elements widened once for the 4 rows of a (widening all
 * of B to float32 first, as the general path does, read it three times: 4 x 11008 x 4096 bfloat16 with its bias,
 * 0.13 / 0.18x torch at 2 / 1 threads, AMD EPYC Zen 4). */
#define FEW_DOTS(NAME, T, WIDEN8, WIDEN1)                                                                        \
  static void NAME(float* c, int32_t ldc, const void* av, int32_t lda, int32_t m, const void* bv, int32_t k,   \
                   int32_t n, int32_t ldb) {                                                                     \
    const float* a = av;                                                                                         \
    const T* b = bv;                                                                                             \
    for (int32_t j = 0; j < n; j += 4) {                                                                         \
      int nb = n - j < 4 ? n - j : 4;                                                                            \
      const T* p[4];                                                                                                \
      for (int q = 0; q < 4; q++) p[q] = b + (size_t)(j + (q < nb ? q : 0)) * ldb;                               \
      for (int32_t i0 = 0; i0 < m; i0 += 4) {                                                                    \
        int na = m - i0 < 4 ? m - i0 : 4;                                                                        \
        const float* x[4];                                                                                       \
        for (int t = 0; t < 4; t++) x[t] = a + (size_t)(i0 + (t < na ? t : 0)) * lda;                            \
        v8 s[4][4];                                                                                              \
        for (int t = 0; t < 4; t++)                                                                              \
          for (int q = 0; q < 4; q++) s[t][q] = (v8){0, 0, 0, 0, 0, 0, 0, 0};                                    \
        int32_t e = 0;                                                                                           \
        for (; e + 8 <= k; e += 8) {                                                                             \
          v8 w[4];                                                                                               \
          for (int q = 0; q < 4; q++) {                                                                          \
            __builtin_prefetch(p[q] + e + 2 * PREFETCH_FLOATS);                                                  \
            w[q] = WIDEN8(p[q] + e);                                                                             \
          }                                                                                                      \
          for (int t = 0; t < 4; t++) {                                                                          \
            v8 xt = *(const v8*)(x[t] + e);                                                                      \
            for (int q = 0; q < 4; q++) s[t][q] = fma8(s[t][q], xt, w[q]);                                       \
          }                                                                                                      \
        }                                                                                                        \
        for (int t = 0; t < na; t++)                                                                             \
          for (int q = 0; q < nb; q++) {                                                                         \
            float tot = 0;                                                                                       \
            for (int l = 0; l < 8; l++) tot += s[t][q][l];                                                       \
            for (int32_t f = e; f < k; f++) tot += x[t][f] * WIDEN1(p[q] + f);                                   \
            c[(size_t)(i0 + t) * ldc + j + q] += tot;                                                            \
          }                                                                                                      \
      }                                                                                                          \
    }                                                                                                            \
  }

FEW_DOTS(few_dots_f32, float, LOAD8_F32, LOAD1_F32)
FEW_DOTS(few_dots_bf16, uint16_t, bf16x8, bf16_1)
FEW_DOTS(few_dots_f16, uint16_t, f16x8, f16_1)

#if defined(__AVX512BF16__) && defined(__AVX512F__)
/* The same for bfloat16 A and B on a CPU with AVX512-BF16 (this library is built for the CPU it runs on:
 * -march=native): VDPBF16PS sums the products of 32 pairs a step straight from bfloat16, twice the rate of the
 * widened FMAs where the rows make it compute-bound (a Linear of 16 x 4096 x 4096 with its bias, x torch's
 * oneDNN, 2 / 1 threads, Zen 4: widened 0.58 / 0.60, here 1.32 / 1.16; 4 x 11008 x 4096 0.89 / 1.07 -> 1.00 /
 * 1.24). a is bfloat16 too here, m x k with row stride lda. */
static void few_dots_bf16_unit(float* c, int32_t ldc, const void* av, int32_t lda, int32_t m, const void* bv,
                               int32_t k, int32_t n, int32_t ldb) {
  const uint16_t *a = av, *b = bv;
  for (int32_t j = 0; j < n; j += 4) {
    int nb = n - j < 4 ? n - j : 4;
    const uint16_t* p[4];
    for (int q = 0; q < 4; q++) p[q] = b + (size_t)(j + (q < nb ? q : 0)) * ldb;
    for (int32_t i0 = 0; i0 < m; i0 += 4) {
      int na = m - i0 < 4 ? m - i0 : 4;
      const uint16_t* x[4];
      for (int t = 0; t < 4; t++) x[t] = a + (size_t)(i0 + (t < na ? t : 0)) * lda;
      __m512 s[4][4];
      for (int t = 0; t < 4; t++)
        for (int q = 0; q < 4; q++) s[t][q] = _mm512_setzero_ps();
      int32_t e = 0;
      for (; e + 32 <= k; e += 32) {
        __m512bh w[4];
        for (int q = 0; q < 4; q++) {
          __builtin_prefetch(p[q] + e + 2 * PREFETCH_FLOATS);
          w[q] = (__m512bh)_mm512_loadu_si512((const void*)(p[q] + e));
        }
        for (int t = 0; t < 4; t++) {
          __m512bh xt = (__m512bh)_mm512_loadu_si512((const void*)(x[t] + e));
          for (int q = 0; q < 4; q++) s[t][q] = _mm512_dpbf16_ps(s[t][q], xt, w[q]);
        }
      }
      for (int t = 0; t < na; t++)
        for (int q = 0; q < nb; q++) {
          float tot = _mm512_reduce_add_ps(s[t][q]);
          for (int32_t f = e; f < k; f++) tot += bf16_1(x[t] + f) * bf16_1(p[q] + f);
          c[(size_t)(i0 + t) * ldc + j + q] += tot;
        }
    }
  }
}

#endif

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

int septran_cpu_split_threads(int32_t n, int32_t k) { return threads_for(n, k); }

/* A GEMM of at least this many multiply-adds called outside a parallel region (a kernel of one program) runs on
 * the threads, its longer side shared in CHUNKs (septran_cpu_split_share); smaller ones stay on the caller's (the
 * team's wake-up and spin outlast them). */
enum { WHOLE_FROM = 1 << 22 };

int septran_cpu_whole_threads(int64_t m, int64_t n, int64_t k) {
  if (omp_in_parallel() || m * n * k < WHOLE_FROM) return 1;
  int64_t along = m >= n ? m : n, most = (along + CHUNK - 1) / CHUNK;
  int t = omp_get_max_threads();
  return t < most ? t : (int)most;
}

void septran_cpu_split_share(int32_t n, int t, int threads, int32_t* start, int32_t* end) {
  share(n, t, threads, start, end);
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

static void few_rows_gemm(few_rows_fn body, size_t elem, float* c, int32_t ldc, const float* a, int32_t lda,
                          int32_t trans_a, int32_t m, const void* b, int32_t k, int32_t n, int32_t ldb) {
  size_t a_row = trans_a ? 1 : (size_t)lda, a_col = trans_a ? (size_t)lda : 1;
  int threads = threads_for(n, k);
  if (threads == 1) {
    few_rows_into(body, c, ldc, a, a_row, a_col, m, b, k, n, ldb);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    int32_t start, end;
    share(n, omp_get_thread_num(), omp_get_num_threads(), &start, &end);
    if (end > start)
      few_rows_into(body, c + start, ldc, a, a_row, a_col, m, (const char*)b + start * elem, k, end - start, ldb);
  }
}

void septran_cpu_few_rows_gemm(float* c, int32_t ldc, const float* a, int32_t lda, int32_t trans_a, int32_t m,
                               const float* b, int32_t k, int32_t n, int32_t ldb) {
  few_rows_gemm(few_rows_body, sizeof(float), c, ldc, a, lda, trans_a, m, b, k, n, ldb);
}

/* The dot-product kernels over the threads (B's rows split) outside a parallel region: part is one of the above,
 * a and b its types' (B's elements elem bytes). */
typedef void (*few_dots_fn)(float*, int32_t, const void*, int32_t, int32_t, const void*, int32_t, int32_t, int32_t);

static void few_dots_gemm(few_dots_fn part, size_t elem, float* c, int32_t ldc, const void* a, int32_t lda, int32_t m,
                          const void* b, int32_t k, int32_t n, int32_t ldb) {
  int threads = threads_for(n, k);
  if (threads == 1) {
    part(c, ldc, a, lda, m, b, k, n, ldb);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    int32_t start, end;
    share(n, omp_get_thread_num(), omp_get_num_threads(), &start, &end);
    if (end > start) part(c + start, ldc, a, lda, m, (const char*)b + (size_t)start * ldb * elem, k, end - start, ldb);
  }
}

void septran_cpu_few_dots_gemm_16(float* c, int32_t ldc, const float* a, int32_t m, const uint16_t* b, int32_t bf16,
                                  int32_t k, int32_t n, int32_t ldb) {
  few_dots_gemm(bf16 ? few_dots_bf16 : few_dots_f16, sizeof(uint16_t), c, ldc, a, k, m, b, k, n, ldb);
}

void septran_cpu_few_dots_gemm(float* c, int32_t ldc, const float* a, int32_t lda, int32_t m, const float* b,
                               int32_t k, int32_t n, int32_t ldb) {
  few_dots_gemm(few_dots_f32, sizeof(float), c, ldc, a, lda, m, b, k, n, ldb);
}

#if defined(__AVX512BF16__) && defined(__AVX512F__)
int septran_cpu_few_dots_unit(void) { return 1; }

void septran_cpu_few_dots_gemm_bf16(float* c, int32_t ldc, const uint16_t* a, int32_t lda, int32_t m,
                                    const uint16_t* b, int32_t k, int32_t n, int32_t ldb) {
  few_dots_gemm(few_dots_bf16_unit, sizeof(uint16_t), c, ldc, a, lda, m, b, k, n, ldb);
}
#else
int septran_cpu_few_dots_unit(void) { return 0; }

void septran_cpu_few_dots_gemm_bf16(float* c, int32_t ldc, const uint16_t* a, int32_t lda, int32_t m,
                                    const uint16_t* b, int32_t k, int32_t n, int32_t ldb) {
  (void)c, (void)ldc, (void)a, (void)lda, (void)m, (void)b, (void)k, (void)n, (void)ldb; /* never called here */
}
#endif

void septran_cpu_few_rows_gemm_16(float* c, int32_t ldc, const float* a, int32_t lda, int32_t trans_a, int32_t m,
                                  const uint16_t* b, int32_t bf16, int32_t k, int32_t n, int32_t ldb) {
  few_rows_gemm(bf16 ? few_rows_body_bf16 : few_rows_body_f16, sizeof(uint16_t), c, ldc, a, lda, trans_a, m, b, k, n,
                ldb);
}

/* septran_cpu_row_gemm for a 16-bit B (bf16: 1, else float16), widened in registers as it streams by */
void septran_cpu_row_gemm_16(float* c, const float* a, int32_t inc_a, const uint16_t* b, int32_t bf16, int32_t k,
                             int32_t n, int32_t ldb, int32_t trans_b) {
  void (*part)(float*, const float*, int32_t, const uint16_t*, int32_t, int32_t, int32_t) =
      trans_b ? (bf16 ? dots_into_bf16 : dots_into_f16) : (bf16 ? rows_into_bf16 : rows_into_f16);
  int threads = threads_for(n, k);
  if (threads == 1) {
    part(c, a, inc_a, b, k, n, ldb);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    int32_t start, end;
    share(n, omp_get_thread_num(), omp_get_num_threads(), &start, &end);
    if (end > start) part(c + start, a, inc_a, trans_b ? b + (size_t)start * ldb : b + start, k, end - start, ldb);
  }
}
