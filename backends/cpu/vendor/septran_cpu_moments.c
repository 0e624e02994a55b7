/* septran_cpu_moments.c -- a row's mean and sum of squared deviations in one pass (LayerNorm's statistics).
 *
 * The rows logic read each row twice for them, in two calls: its sum (the mean), then the sum of squared deviations
 * from that mean (the variance, two passes for accuracy). The second pass ran from the caches while memory idled:
 * at 512 x 4097 float32 it was 14 to 20 % of LayerNorm's time (AMD EPYC Zen 4, 2 threads, the pass left out). Here a
 * row longer than TWO_PASSES_UP_TO comes from one read, as torch's RowwiseMoments does, and as stably: Welford's
 * update per lane (each lane a running mean and the sum of squared deviations from it, never E[x^2] - E[x]^2), the
 * lanes joined by Chan's formula; a shorter one, which L1 holds between two reads, the two-pass way in one call.
 * Against float64 (tests/test_cpu_moments.py): means within 2 ulp plus 1.8 float32 roundings of the deviations'
 * size, sums of squared deviations within 11.4 roundings, 1 to 9000 columns, data 0 to 10^4 from zero.
 *
 * The statistics are merged into running ones (mean, m2, count per row), so that a row may come in column tiles:
 * count 0 starts a row.
 */
#include "septran_cpu.h"

#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__) || defined(__AVX__)
#include <immintrin.h>
#endif

/* 16 floats a vector where the CPU has AVX-512 (64 lanes in four accumulators: each Welford step waits on the
 * last, so twice the lanes halve the steps), else 8 (AVX, or two SSE / NEON registers). */
#if defined(__AVX512F__)
enum { W = 16 };
#else
enum { W = 8 };
#endif
typedef float vec __attribute__((vector_size(W * 4)));

enum { LANES = 4 * W, HALF_CHUNK = 512, TWO_PASSES_UP_TO = 512 };

static inline vec load(const float* x) {
  vec v;
  memcpy(&v, x, sizeof v);
  return v;
}

static inline float lanes_sum(vec v) { /* a tree of shuffles where the CPU has them, not W dependent adds */
#if defined(__AVX512F__)
  return _mm512_reduce_add_ps((__m512)v);
#elif defined(__AVX__)
  __m128 h = _mm_add_ps(_mm256_castps256_ps128((__m256)v), _mm256_extractf128_ps((__m256)v, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
#else
  float r = 0.0f;
  for (int k = 0; k < W; k++) r += v[k];
  return r;
#endif
}

/* (mean, m2) of a group of na elements and one of nb joined (Chan et al.): the deviation of the two means, weighted */
static inline void join(float* mean, float* m2, float* count, float mb, float m2b, float nb) {
  float na = *count;
  if (nb == 0.0f) return;
  if (na == 0.0f) {
    *mean = mb, *m2 = m2b, *count = nb;
    return;
  }
  float n = na + nb, d = mb - *mean;
  *mean += d * (nb / n);
  *m2 += m2b + d * d * (na * (nb / n));
  *count = n;
}

/* A short row (at most TWO_PASSES_UP_TO elements: it stays in L1 between its two reads) the two-pass way: its sum,
 * then the squared deviations from its mean; four accumulators each, so the adds overlap. */
static void row_two_passes(const float* x, int32_t n, float c, float* mean, float* m2) {
  vec a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
  int32_t j = 0;
  for (; j + LANES <= n; j += LANES)
    a0 += load(x + j) - c, a1 += load(x + j + W) - c, a2 += load(x + j + 2 * W) - c, a3 += load(x + j + 3 * W) - c;
  float s = lanes_sum((a0 + a1) + (a2 + a3));
  for (; j < n; j++) s += x[j] - c;
  float m = n ? s / (float)n : 0.0f;
  vec d, q0 = {0}, q1 = {0}, q2 = {0}, q3 = {0};
  for (j = 0; j + LANES <= n; j += LANES) {
    d = (load(x + j) - c) - m;         q0 += d * d;
    d = (load(x + j + W) - c) - m;     q1 += d * d;
    d = (load(x + j + 2 * W) - c) - m; q2 += d * d;
    d = (load(x + j + 3 * W) - c) - m; q3 += d * d;
  }
  float q = lanes_sum((q0 + q1) + (q2 + q3));
  for (; j < n; j++) q += ((x[j] - c) - m) * ((x[j] - c) - m);
  *mean = m, *m2 = q;
}

/* A longer row in one read: LANES lanes in four accumulators step through it together (step t weighs its element
 * 1 / t into the lane's mean); the lanes, of equal counts, join as the mean of their means and their sums of
 * squared deviations plus each mean's own; the last n % LANES elements by Welford's scalar update. */
static void row_one_pass(const float* x, int32_t n, float c, float* mean, float* m2) {
  vec a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0}, v, d;
  int32_t steps = n / LANES;
  for (int32_t t = 0; t < steps; t++) {
    float w = 1.0f / (float)(t + 1);
    const float* p = x + (size_t)t * LANES;
    v = load(p) - c;         d = v - a0; a0 += d * w; s0 += d * (v - a0);
    v = load(p + W) - c;     d = v - a1; a1 += d * w; s1 += d * (v - a1);
    v = load(p + 2 * W) - c; d = v - a2; a2 += d * w; s2 += d * (v - a2);
    v = load(p + 3 * W) - c; d = v - a3; a3 += d * w; s3 += d * (v - a3);
  }
  float m = lanes_sum((a0 + a1) + (a2 + a3)) / LANES, k = (float)steps * LANES;
  vec e0 = a0 - m, e1 = a1 - m, e2 = a2 - m, e3 = a3 - m;
  float q = lanes_sum((s0 + s1) + (s2 + s3)) + lanes_sum((e0 * e0 + e1 * e1) + (e2 * e2 + e3 * e3)) * (float)steps;
  for (int32_t j = steps * LANES; j < n; j++) {
    float y = x[j] - c, e = y - m;
    k += 1.0f;
    m += e / k;
    q += e * (y - m);
  }
  *mean = m, *m2 = q;
}

/* The row's statistics of x - c, c its first element: the sums then run over values of the deviations' size (x - c
 * is exact for x within a factor of two of c), and round at that size, not at the data's distance from zero (rows
 * of 10^4 +- 3: means 4 ulp off unshifted, within 0.4 shifted); the mean is c + theirs. */
static void row(const float* x, int32_t n, float* mean, float* m2) {
  float c = n ? x[0] : 0.0f, m;
  if (n <= TWO_PASSES_UP_TO)
    row_two_passes(x, n, c, &m, m2);
  else
    row_one_pass(x, n, c, &m, m2);
  *mean = c + m;
}

int32_t septran_cpu_moments(float* mean, float* m2, float* count, float* x, int32_t rows, int32_t cols, int32_t ldx) {
  if (rows < 0 || cols < 0 || ldx < 0) return SEPTRAN_CPU_E_ARGS;
  for (int32_t i = 0; i < rows; i++) {
    float mb, m2b;
    row(x + (size_t)i * (size_t)ldx, cols, &mb, &m2b);
    join(mean + i, m2 + i, count + i, mb, m2b, (float)cols);
  }
  return 0;
}

/* float16 rows, widened a chunk at a time into a stack buffer that stays in L1 (as the other row reductions) */
int32_t septran_cpu_moments_half(float* mean, float* m2, float* count, void* x, int32_t rows, int32_t cols,
                                 int32_t ldx) {
  if (rows < 0 || cols < 0 || ldx < 0) return SEPTRAN_CPU_E_ARGS;
  float chunk[HALF_CHUNK];
  for (int32_t i = 0; i < rows; i++) {
    const _Float16* h = (const _Float16*)x + (size_t)i * (size_t)ldx;
    for (int32_t j = 0; j < cols; j += HALF_CHUNK) {
      int32_t n = cols - j < HALF_CHUNK ? cols - j : HALF_CHUNK;
      for (int32_t e = 0; e < n; e++) chunk[e] = (float)h[j + e];
      float mb, m2b;
      row(chunk, n, &mb, &m2b);
      join(mean + i, m2 + i, count + i, mb, m2b, (float)n);
    }
  }
  return 0;
}

/* As the kernels call them (septran_cpu_typed.c's names and argument types). */
int32_t septran_cpu_moments_f32(float* mean, float* m2, float* count, float* x, int64_t rows, int64_t cols,
                                int64_t ldx) {
  return septran_cpu_moments(mean, m2, count, x, (int32_t)rows, (int32_t)cols, (int32_t)ldx);
}

int32_t septran_cpu_moments_f16(float* mean, float* m2, float* count, void* x, int64_t rows, int64_t cols,
                                int64_t ldx) {
  return septran_cpu_moments_half(mean, m2, count, x, (int32_t)rows, (int32_t)cols, (int32_t)ldx);
}
