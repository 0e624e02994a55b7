/* septran_cpu_moments.c -- a row's mean and sum of squared deviations from one read (LayerNorm's statistics).
 *
 * The rows logic read each row twice for them, in two calls: its sum (the mean), then the sum of squared deviations
 * from that mean (the variance, two passes for accuracy). Here one read gives both: the sums of x - c and of its
 * squares, c the mean of the row's first 64 elements, so that the sums hold values of the deviations' size; a row
 * whose subtraction would still cancel more than 4 bits (its first elements stand apart from the rest) is summed
 * again from its mean, the two-pass way. Measured in C (AMD EPYC Zen 4, thread CPU time, cycles a row, against the
 * two calls): 1024 columns 171 against 261 from L1, 542 against 749 from memory; 4097 columns 581 against 1102 and
 * 2733 against 3166; 256 columns 76 against 62 from L1. Against float64 (tests/test_cpu_moments.py): means within 2
 * ulp plus 5 roundings of the deviations' size, sums of squared deviations within 55 roundings of themselves, 1 to
 * 9000 columns, data 0 to 10^4 from zero, and rows whose first 64 elements lie 10^5 deviations from the rest.
 * (Welford's update per lane was as stable, but took five vector operations an element to these three: 8 to 11 %
 * slower than the two calls over a row of 1024 to 1500 in L1.)
 *
 * The statistics are merged into running ones (mean, m2, count per row, Chan's formula), so that a row may come in
 * column tiles: count 0 starts a row.
 */
#include "septran_cpu.h"

#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__) || defined(__AVX__)
#include <immintrin.h>
#endif

/* 16 floats a vector where the CPU has AVX-512, else 8 (AVX, or two SSE / NEON registers); four accumulators each,
 * so that the adds of a chain overlap. */
#if defined(__AVX512F__)
enum { W = 16 };
#else
enum { W = 8 };
#endif
typedef float vec __attribute__((vector_size(W * 4)));

enum { LANES = 4 * W, HALF_CHUNK = 512, SHIFT_FROM = 64 };
static const float CANCELS = 16.0f; /* sum y^2 over m2 past which the one-pass m2 is summed again */

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

/* The row's statistics over float32 elements, and (with AVX-512) over float16 elements widened in registers as they
 * are read: one function body, its element type and loads given by the macro below. */
#define STATS(SUFFIX, T, LOADV, ELEM)                                                                                \
/* s = the sum of x[j] - k over the row, q = the sum of its squares: four accumulators each, so the adds overlap */    \
static void sums_from##SUFFIX(const T* x, int32_t n, float k, float* s, float* q) {                                 \
  vec a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, q0 = {0}, q1 = {0}, q2 = {0}, q3 = {0}, y;                            \
  int32_t j = 0;                                                                                                     \
  for (; j + LANES <= n; j += LANES) {                                                                               \
    y = LOADV(x + j) - k;         a0 += y; q0 += y * y;                                                              \
    y = LOADV(x + j + W) - k;     a1 += y; q1 += y * y;                                                              \
    y = LOADV(x + j + 2 * W) - k; a2 += y; q2 += y * y;                                                              \
    y = LOADV(x + j + 3 * W) - k; a3 += y; q3 += y * y;                                                              \
  }                                                                                                                  \
  float sum = lanes_sum((a0 + a1) + (a2 + a3)), sq = lanes_sum((q0 + q1) + (q2 + q3));                              \
  for (; j < n; j++) {                                                                                               \
    float t = ELEM(x, j) - k;                                                                                        \
    sum += t, sq += t * t;                                                                                           \
  }                                                                                                                  \
  *s = sum, *q = sq;                                                                                                 \
}                                                                                                                    \
                                                                                                                     \
static void row##SUFFIX(const T* x, int32_t n, float* mean, float* m2) {                                            \
  if (n <= 0) {                                                                                                      \
    *mean = 0.0f, *m2 = 0.0f;                                                                                        \
    return;                                                                                                          \
  }                                                                                                                  \
  float c = 0.0f;                                                                                                    \
  if (n >= SHIFT_FROM) {                                                                                             \
    vec f = {0};                                                                                                     \
    for (int32_t j = 0; j < SHIFT_FROM; j += W) f += LOADV(x + j);                                                   \
    c = lanes_sum(f) / SHIFT_FROM;                                                                                   \
  } else {                                                                                                           \
    for (int32_t j = 0; j < n; j++) c += ELEM(x, j);                                                                 \
    c /= (float)n;                                                                                                   \
  }                                                                                                                  \
  float s, q;                                                                                                        \
  sums_from##SUFFIX(x, n, c, &s, &q);                                                                                \
  float my = s / (float)n, d = q - s * my;                                                                           \
  if (q > CANCELS * d) {                                                                                             \
    float mc = my + c;                                                                                               \
    sums_from##SUFFIX(x, n, mc, &s, &d);                                                                             \
    *mean = mc + s / (float)n, d -= s * (s / (float)n);                                                              \
  } else {                                                                                                           \
    *mean = c + my;                                                                                                  \
  }                                                                                                                  \
  *m2 = d < 0.0f ? 0.0f : d;                                                                                         \
}

/* (row: one read of the row: the sums of y = x - c and of y^2, then m2 = sum y^2 - (sum y)^2 / n.
 * c is the mean of the row's first SHIFT_FROM elements, so the sums hold values of the deviations' size, not the
 * data's distance from zero, and the subtraction cancels little: its relative error is a few roundings times
 * 1 + (mean - c)^2 / variance, which is at most 1 + n / SHIFT_FROM (c is the mean of SHIFT_FROM of the n elements)
 * and about 1 + 1 / SHIFT_FROM for rows of one distribution; past CANCELS the row is summed again from its mean,
 * which corrects the mean and gives m2 the two-pass way. Three vector operations an element, as the two-pass sums
 * took over their two reads. The first SHIFT_FROM elements are summed in vectors: a scalar chain of 64 adds took
 * 160 cycles, the rest of a 1024 row 170.) */
#define ELEM_F32(x, j) ((x)[j])
STATS(, float, load, ELEM_F32)

#if defined(__AVX512F__)
/* 16 float16 elements widened (VCVTPH2PS), as a vec */
static inline vec load_half(const uint16_t* x) {
  __m512 v = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)x));
  vec r;
  memcpy(&r, &v, sizeof r);
  return r;
}
#define ELEM_F16(x, j) ((float)((const _Float16*)(x))[j])
STATS(_half, uint16_t, load_half, ELEM_F16)

/* 16 bfloat16 elements widened (a float32's top half: a shift), as a vec */
static inline vec load_bf16(const uint16_t* x) {
  __m512i v = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)x)), 16);
  vec r;
  memcpy(&r, &v, sizeof r);
  return r;
}
static inline float bf16_elem(const uint16_t* x, int32_t j) {
  uint32_t u = (uint32_t)x[j] << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
STATS(_bf16, uint16_t, load_bf16, bf16_elem)

#endif

int32_t septran_cpu_moments(float* mean, float* m2, float* count, float* x, int32_t rows, int32_t cols, int32_t ldx) {
  if (rows < 0 || cols < 0 || ldx < 0) return SEPTRAN_CPU_E_ARGS;
  for (int32_t i = 0; i < rows; i++) {
    float mb, m2b;
    row(x + (size_t)i * (size_t)ldx, cols, &mb, &m2b);
    join(mean + i, m2 + i, count + i, mb, m2b, (float)cols);
  }
  return 0;
}

/* float16 rows, widened a chunk at a time into a stack buffer that stays in L1 (as the other row reductions), by the
 * library's tile copy (F16C: g++ converts _Float16 one element at a time and vectorises no such loop) */
int32_t septran_cpu_moments_half(float* mean, float* m2, float* count, void* x, int32_t rows, int32_t cols,
                                 int32_t ldx) {
  if (rows < 0 || cols < 0 || ldx < 0) return SEPTRAN_CPU_E_ARGS;
#if defined(__AVX512F__)
  /* widened in registers as the row is read: one pass, one shift, one join a row (the chunks below took a call of
   * the tile copy and a join each) */
  for (int32_t i = 0; i < rows; i++) {
    float mb, m2b;
    row_half((const uint16_t*)x + (size_t)i * (size_t)ldx, cols, &mb, &m2b);
    join(mean + i, m2 + i, count + i, mb, m2b, (float)cols);
  }
#else
  float chunk[HALF_CHUNK];
  for (int32_t i = 0; i < rows; i++) {
    const _Float16* h = (const _Float16*)x + (size_t)i * (size_t)ldx;
    for (int32_t j = 0; j < cols; j += HALF_CHUNK) {
      int32_t n = cols - j < HALF_CHUNK ? cols - j : HALF_CHUNK;
      septran_cpu_load(chunk, SEPTRAN_CPU_F32, (void*)(h + j), SEPTRAN_CPU_F16, 1, n, n, n, 1, n);
      float mb, m2b;
      row(chunk, n, &mb, &m2b);
      join(mean + i, m2 + i, count + i, mb, m2b, (float)n);
    }
  }
#endif
  return 0;
}

/* bfloat16 rows: widened in registers with AVX-512, else a chunk at a time as float16's */
int32_t septran_cpu_moments_bf16(float* mean, float* m2, float* count, void* x, int64_t rows, int64_t cols,
                                 int64_t ldx) {
  if (rows < 0 || cols < 0 || ldx < 0) return SEPTRAN_CPU_E_ARGS;
  for (int64_t i = 0; i < rows; i++) {
    const uint16_t* r = (const uint16_t*)x + (size_t)i * (size_t)ldx;
#if defined(__AVX512F__)
    float mb, m2b;
    row_bf16(r, (int32_t)cols, &mb, &m2b);
    join(mean + i, m2 + i, count + i, mb, m2b, (float)cols);
#else
    float chunk[HALF_CHUNK];
    for (int64_t j = 0; j < cols; j += HALF_CHUNK) {
      int32_t n = (int32_t)(cols - j < HALF_CHUNK ? cols - j : HALF_CHUNK);
      septran_cpu_load(chunk, SEPTRAN_CPU_F32, (void*)(r + j), SEPTRAN_CPU_BF16, 1, n, n, n, 1, n);
      float mb, m2b;
      row(chunk, n, &mb, &m2b);
      join(mean + i, m2 + i, count + i, mb, m2b, (float)n);
    }
#endif
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
