/* septran_cpu.c -- the CPU target's vendor library; the contract is septran_cpu.h.
 *
 * Build: gcc -std=c11 -O3 -march=native -fopenmp -fPIC -shared septran_cpu.c septran_cpu_gemv.c
 *        <site-packages>/scipy_openblas32/lib/libscipy_openblas.so
 * (-fopenmp: the `omp simd` pragmas of the copies, and the one-row GEMM's own threads; the row reductions use
 * GCC's generic vectors.)
 * float16 uses _Float16 (gcc >= 12) and F16C conversions, 16 wide with AVX-512; bfloat16 is uint16_t bits,
 * converted 16 at a time (AVX-512; AVX512-BF16's VCVTNEPS2BF16 to narrow) or with AVX2.
 */
#include "septran_cpu.h"
#include "septran_cpu_gemv.h"
#include "septran_cpu_scratch.h"

#include <math.h>
#include <stdint.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX512F__) || defined(__F16C__) || defined(__AVX2__) || defined(__AVX__)
#include <immintrin.h>
#endif

/* OpenBLAS from the scipy-openblas32 wheel (32-bit ints, every symbol prefixed scipy_),
 * declared here so the build needs only the wheel's .so, not its headers. */
enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };
void scipy_cblas_sgemm(int order, int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a,
                       int lda, const float* b, int ldb, float beta, float* c, int ldc);
void scipy_cblas_sgemv(int order, int trans, int m, int n, float alpha, const float* a, int lda, const float* x,
                       int incx, float beta, float* y, int incy);
void scipy_openblas_set_num_threads(int num_threads);

/* Each kernel runs its grid on OpenMP threads and calls sgemm once per thread: OpenBLAS's own
 * threads would oversubscribe the cores, so it runs in the caller's thread. Runs at load time,
 * after OpenBLAS's own initialisation (a library's dependencies are initialised first). */
__attribute__((constructor)) static void openblas_in_caller_thread(void) { scipy_openblas_set_num_threads(1); }

static size_t elem_size(int32_t dtype) {
  return dtype == SEPTRAN_CPU_F32 ? 4 : dtype == SEPTRAN_CPU_F16 || dtype == SEPTRAN_CPU_BF16 ? 2 : 0;
}

/* What convert_row can do: a copy, or float32 to or from either 16-bit type (not float16 <-> bfloat16). */
static int convertible(int32_t dst_dtype, int32_t src_dtype) {
  return elem_size(dst_dtype) && elem_size(src_dtype) &&
         (dst_dtype == src_dtype || dst_dtype == SEPTRAN_CPU_F32 || src_dtype == SEPTRAN_CPU_F32);
}

/* ---- one row, converted: memcpy when the types agree, F16C / AVX-512 otherwise ----------- */

static void half_to_float(float* restrict d, const _Float16* restrict s, int32_t n) {
  int32_t j = 0;
#if defined(__AVX512F__)
  for (; j + 16 <= n; j += 16) _mm512_storeu_ps(d + j, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(s + j))));
#endif
#if defined(__F16C__)
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(d + j, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(s + j))));
#endif
  for (; j < n; j++) d[j] = (float)s[j];
}

#if defined(__AVX512F__)
/* 16 floats from s as float16, rounded to nearest even. The empty asm keeps the result in a register: g++
 * otherwise folds the store into VCVTPS2PH's memory form, which Zen 4 runs slowly (a float16 softmax 4096 x 1024
 * at 1 thread took 3.1 ms against 2.5 with 8-wide conversions); the register form takes a row of 1024 from L1 in
 * 140 cycles against 245 for two 8-wide ones. */
static __m256i float16_to_half(const float* s) {
  __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __asm__("" : "+v"(h));
  return h;
}
#elif defined(__F16C__) && defined(__AVX2__)
static __m256i float16_to_half(const float* s) {
  return _mm256_set_m128i(_mm256_cvtps_ph(_mm256_loadu_ps(s + 8), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                          _mm256_cvtps_ph(_mm256_loadu_ps(s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
#endif

static void float_to_half(_Float16* restrict d, const float* restrict s, int32_t n) {
  int32_t j = 0;
#if defined(__AVX512F__) || (defined(__F16C__) && defined(__AVX2__))
  for (; j + 16 <= n; j += 16) _mm256_storeu_si256((__m256i*)(d + j), float16_to_half(s + j));
#endif
#if defined(__F16C__)
  for (; j + 8 <= n; j += 8)
    _mm_storeu_si128((__m128i*)(d + j), _mm256_cvtps_ph(_mm256_loadu_ps(s + j), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
  for (; j < n; j++) d[j] = (_Float16)s[j];
}

/* bfloat16 is a float32's top half: widening is a shift, exact. */
static void bf16_to_float(float* restrict d, const uint16_t* restrict s, int32_t n) {
  int32_t j = 0;
#if defined(__AVX512F__)
  /* 16 wide: a row of 1024 in 142 cycles against 266 (Zen 4, from L1) */
  for (; j + 16 <= n; j += 16) {
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(s + j)));
    _mm512_storeu_si512(d + j, _mm512_slli_epi32(w, 16));
  }
#endif
#if defined(__AVX2__)
  for (; j + 8 <= n; j += 8) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(s + j)));
    _mm256_storeu_si256((__m256i*)(d + j), _mm256_slli_epi32(w, 16));
  }
#endif
  for (; j < n; j++) {
    uint32_t u = (uint32_t)s[j] << 16;
    memcpy(d + j, &u, 4);
  }
}

/* Round to nearest even on the bits (as torch does): add 0x7fff plus the kept half's last bit, so a tie goes
 * to the even neighbour and the largest floats round to inf. A NaN keeps its sign and top payload, made quiet
 * (adding could carry it into inf). */
static uint16_t float_bits_to_bf16(uint32_t u) {
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

#if defined(__AVX2__)
/* float_bits_to_bf16 on 8 lanes, as 32-bit results (the caller packs two vectors into 16 halves). */
static __m256i float8_to_bf16_lanes(__m256i u) {
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x0040));
  __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  return _mm256_blendv_epi8(rounded, quiet, nan);
}

/* 16 floats from s as 16 bfloat16 in order (packus works within 128-bit lanes: lo0-3 hi0-3 lo4-7 hi4-7, put back) */
static __m256i float16_to_bf16_bits(const float* s) {
  __m256i lo = float8_to_bf16_lanes(_mm256_loadu_si256((const __m256i*)s));
  __m256i hi = float8_to_bf16_lanes(_mm256_loadu_si256((const __m256i*)(s + 8)));
  return _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xD8);
}

#if defined(__AVX512BF16__) && defined(__AVX512DQ__)
/* VCVTNEPS2BF16 rounds to nearest even and quiets NaNs as float_bits_to_bf16 does, in one instruction, but
 * flushes subnormal inputs to zero: a vector holding one (VFPCLASSPS, class 0x20) is converted on the bits
 * instead. Every float32 checked equal to float_bits_to_bf16; a row of 1024 from L1 in 173 cycles against 347
 * (Zen 4; 103 without the check). */
static __m256i float16_to_bf16(const float* s) {
  __m512 f = _mm512_loadu_ps(s);
  if (__builtin_expect(_mm512_fpclass_ps_mask(f, 0x20) != 0, 0)) return float16_to_bf16_bits(s);
  return (__m256i)_mm512_cvtneps_pbh(f);
}
#else
static __m256i float16_to_bf16(const float* s) { return float16_to_bf16_bits(s); }
#endif
#endif

static void float_to_bf16(uint16_t* restrict d, const float* restrict s, int32_t n) {
  int32_t j = 0;
#if defined(__AVX2__)
  for (; j + 16 <= n; j += 16) _mm256_storeu_si256((__m256i*)(d + j), float16_to_bf16(s + j));
#endif
  for (; j < n; j++) {
    uint32_t u;
    memcpy(&u, s + j, 4);
    d[j] = float_bits_to_bf16(u);
  }
}

static void convert_row(void* dst, int32_t dst_dtype, const void* src, int32_t src_dtype, int32_t n) {
  if (dst_dtype == src_dtype)
    memcpy(dst, src, (size_t)n * elem_size(dst_dtype));
  else if (dst_dtype == SEPTRAN_CPU_F32 && src_dtype == SEPTRAN_CPU_F16)
    half_to_float(dst, src, n);
  else if (dst_dtype == SEPTRAN_CPU_F32)
    bf16_to_float(dst, src, n);
  else if (dst_dtype == SEPTRAN_CPU_F16)
    float_to_half(dst, src, n);
  else
    float_to_bf16(dst, src, n);
}

static char* row_at(void* base, int32_t dtype, int32_t i, int32_t ld) {
  return (char*)base + (size_t)i * (size_t)ld * elem_size(dtype);
}

static int32_t clamp(int32_t v, int32_t hi) { return v < 0 ? 0 : v > hi ? hi : v; }

/* A tile's rows are far apart in a large tensor, and each is too short for the hardware prefetcher to
 * learn: asking for a row a few rows ahead made loads from DRAM 10-15 % faster (17.8 -> 20.2 GB/s). */
enum { PREFETCH_ROWS = 4 };

static void prefetch_row(const char* p, size_t bytes) {
  for (size_t b = 0; b < bytes; b += 64) __builtin_prefetch(p + b);
}

/* ---- copies ---------------------------------------------------------------------------- */

int32_t septran_cpu_fill_zero(void* dst, int32_t dtype, int32_t rows, int32_t cols, int32_t ld) {
  size_t es = elem_size(dtype);
  if (!es || rows < 0 || cols < 0 || ld < 0) return SEPTRAN_CPU_E_ARGS;
  if (ld == cols) {
    memset(dst, 0, (size_t)rows * (size_t)cols * es);
    return 0;
  }
  for (int32_t i = 0; i < rows; i++) memset(row_at(dst, dtype, i, ld), 0, (size_t)cols * es);
  return 0;
}

int32_t septran_cpu_load(void* dst, int32_t dst_dtype, void* src, int32_t src_dtype, int32_t rows, int32_t cols,
                         int32_t ld_dst, int32_t ld_src, int32_t valid_rows, int32_t valid_cols) {
  size_t es = elem_size(dst_dtype);
  if (!convertible(dst_dtype, src_dtype) || rows < 0 || cols < 0 || ld_dst < 0 || ld_src < 0) return SEPTRAN_CPU_E_ARGS;
  int32_t vr = clamp(valid_rows, rows), vc = clamp(valid_cols, cols);
  size_t src_row_bytes = (size_t)vc * elem_size(src_dtype);
  for (int32_t i = 0; i < vr; i++) {
    if (i + PREFETCH_ROWS < vr) prefetch_row(row_at(src, src_dtype, i + PREFETCH_ROWS, ld_src), src_row_bytes);
    char* d = row_at(dst, dst_dtype, i, ld_dst);
    convert_row(d, dst_dtype, row_at(src, src_dtype, i, ld_src), src_dtype, vc);
    memset(d + (size_t)vc * es, 0, (size_t)(cols - vc) * es);
  }
  return septran_cpu_fill_zero(row_at(dst, dst_dtype, vr, ld_dst), dst_dtype, rows - vr, cols, ld_dst);
}

int32_t septran_cpu_store(void* dst, int32_t dst_dtype, void* src, int32_t src_dtype, int32_t valid_rows,
                          int32_t valid_cols, int32_t ld_dst, int32_t ld_src) {
  if (!convertible(dst_dtype, src_dtype) || ld_dst < 0 || ld_src < 0) return SEPTRAN_CPU_E_ARGS;
  if (valid_rows <= 0 || valid_cols <= 0) return 0; /* a tile wholly past the tensor's edge */
  for (int32_t i = 0; i < valid_rows; i++)
    convert_row(row_at(dst, dst_dtype, i, ld_dst), dst_dtype, row_at(src, src_dtype, i, ld_src), src_dtype,
                valid_cols);
  return 0;
}

int32_t septran_cpu_stream(void* dst, int32_t dst_dtype, void* src, int32_t src_dtype, int32_t valid_rows,
                           int32_t valid_cols, int32_t ld_dst, int32_t ld_src) {
#if defined(__AVX__)
  if (dst_dtype == SEPTRAN_CPU_F32 && src_dtype == SEPTRAN_CPU_F32) {
    if (ld_dst < 0 || ld_src < 0) return SEPTRAN_CPU_E_ARGS;
    for (int32_t i = 0; i < valid_rows; i++) {
      float* d = (float*)dst + (size_t)i * (size_t)ld_dst;
      const float* s = (const float*)src + (size_t)i * (size_t)ld_src;
      int32_t j = 0;
      for (; j < valid_cols && ((uintptr_t)(d + j) & 63); j++) d[j] = s[j]; /* to the first whole cache line */
      /* Past the caches whole lines only: a row whose ends share lines with the rows beside it (a bfloat16 row of
       * 700, 1400 bytes) wrote those lines half past the caches and half through them, and the stream ran slower
       * than plain stores (RMSNorm 2857 x 700 bfloat16, 1 thread: 0.56 -> 0.98x inductor; AMD EPYC Zen 4). */
      for (; j + 16 <= valid_cols; j += 16) {
        _mm256_stream_ps(d + j, _mm256_loadu_ps(s + j));
        _mm256_stream_ps(d + j + 8, _mm256_loadu_ps(s + j + 8));
      }
      for (; j < valid_cols; j++) d[j] = s[j];
    }
    /* No SFENCE: one per call waited for each tile's lines to reach memory (layernorm 4096 x 1024, 1 thread: the
     * gain halved). Another thread reads them after a locked instruction of this one (the end of OpenMP's
     * parallel region, a lock), which drains the write-combining buffers as a fence would; this thread reads its
     * own stores in order. */
    return 0;
  }
#endif
#if defined(__F16C__) && defined(__AVX2__)
  if (src_dtype == SEPTRAN_CPU_F32 && (dst_dtype == SEPTRAN_CPU_F16 || dst_dtype == SEPTRAN_CPU_BF16)) {
    if (ld_dst < 0 || ld_src < 0) return SEPTRAN_CPU_E_ARGS;
    const int f16 = dst_dtype == SEPTRAN_CPU_F16;
    for (int32_t i = 0; i < valid_rows; i++) { /* narrowed 16 at a time, 32 bytes past the caches */
      uint16_t* d = (uint16_t*)dst + (size_t)i * (size_t)ld_dst;
      const float* s = (const float*)src + (size_t)i * (size_t)ld_src;
      int32_t j = 0;
      while (j < valid_cols && ((uintptr_t)(d + j) & 63)) j++; /* to the first whole cache line */
      convert_row(d, dst_dtype, s, SEPTRAN_CPU_F32, j);
      for (; j + 32 <= valid_cols; j += 32) { /* whole lines only */
        _mm256_stream_si256((__m256i*)(d + j), f16 ? float16_to_half(s + j) : float16_to_bf16(s + j));
        _mm256_stream_si256((__m256i*)(d + j + 16), f16 ? float16_to_half(s + j + 16) : float16_to_bf16(s + j + 16));
      }
      convert_row(d + j, dst_dtype, s + j, SEPTRAN_CPU_F32, valid_cols - j);
    }
    return 0;
  }
#endif
  return septran_cpu_store(dst, dst_dtype, src, src_dtype, valid_rows, valid_cols, ld_dst, ld_src);
}

/* ---- row reductions: 32 partial results in registers, so the adds are not one chain ----- */

/* One vector accumulator (what `omp simd reduction` gave) makes every add wait for the last one: 3 to 4 cycles
 * a vector, and g++ 12 kept it in memory at znver1's 16-byte width. Four 8-float accumulators (GCC's generic
 * vectors: AVX or two SSE/NEON registers each) let the adds overlap. The order of a row's sum changes: 32
 * interleaved partial sums, then the lanes in order, then the tail. max/min keep `x > r ? x : r` (a NaN is
 * skipped, as before). */
typedef float septran_v8 __attribute__((vector_size(32)));
typedef int32_t septran_v8i __attribute__((vector_size(32)));

static inline septran_v8 v8_load(const float* x) {
  septran_v8 v;
  memcpy(&v, x, sizeof v);
  return v;
}

static inline septran_v8 v8_pick(septran_v8i take_a, septran_v8 a, septran_v8 b) {
  return (septran_v8)(((septran_v8i)a & take_a) | ((septran_v8i)b & ~take_a));
}

/* A row's reduction, 32 elements a step in four accumulators. vstep / sstep fold an element into an accumulator;
 * vjoin / sjoin join two accumulators (the same as the steps but for a sum of squares, whose step squares the
 * element). c (cv broadcast): the center a sum of squared deviations subtracts; the others ignore it. */
#define SEPTRAN_ROW_REDUCE(fn, init, vstep, sstep, vjoin, sjoin)                \
  static float fn(const float* x, int32_t n, float c) {                        \
    septran_v8 a0, a1, a2, a3, v, cv;                                          \
    for (int k = 0; k < 8; k++) a0[k] = init, cv[k] = c;                       \
    (void)cv;                                                                  \
    a1 = a2 = a3 = a0;                                                         \
    int32_t j = 0;                                                             \
    for (; j + 32 <= n; j += 32) {                                             \
      v = v8_load(x + j);      a0 = vstep(a0, v);                              \
      v = v8_load(x + j + 8);  a1 = vstep(a1, v);                              \
      v = v8_load(x + j + 16); a2 = vstep(a2, v);                              \
      v = v8_load(x + j + 24); a3 = vstep(a3, v);                              \
    }                                                                          \
    a0 = vjoin(vjoin(a0, a1), vjoin(a2, a3));                                  \
    float r = init;                                                            \
    for (int k = 0; k < 8; k++) r = sjoin(r, a0[k]);                           \
    for (; j < n; j++) r = sstep(r, x[j]);                                     \
    return r;                                                                  \
  }

#if defined(__AVX__)
/* MAXPS a, b is a > b ? a : b (b where either is NaN): the same choice in one instruction, where the compare
 * and blend took two (a row of 1024: 80 cycles against 222, Zen 4) */
#define V_MAX(a, v) ((septran_v8)_mm256_max_ps((__m256)(v), (__m256)(a)))
#define V_MIN(a, v) ((septran_v8)_mm256_min_ps((__m256)(v), (__m256)(a)))
#else
#define V_MAX(a, v) v8_pick((v) > (a), (v), (a))
#define V_MIN(a, v) v8_pick((v) < (a), (v), (a))
#endif
#define V_ADD(a, v) ((a) + (v))
#define V_ADD_SQUARE_DEV(a, v) ((a) + ((v) - cv) * ((v) - cv))
#define S_MAX(r, x) ((x) > (r) ? (x) : (r))
#define S_MIN(r, x) ((x) < (r) ? (x) : (r))
#define S_ADD(r, x) ((r) + (x))
#define S_ADD_SQUARE_DEV(r, x) ((r) + ((x) - c) * ((x) - c))

SEPTRAN_ROW_REDUCE(row_max, -INFINITY, V_MAX, S_MAX, V_MAX, S_MAX)
SEPTRAN_ROW_REDUCE(row_min, INFINITY, V_MIN, S_MIN, V_MIN, S_MIN)
SEPTRAN_ROW_REDUCE(row_sum, 0.0f, V_ADD, S_ADD, V_ADD, S_ADD)
/* the sum of (x - c)^2, squared as they are read, float32 throughout (a sum of squares: c = 0) */
SEPTRAN_ROW_REDUCE(row_sumsq_dev, 0.0f, V_ADD_SQUARE_DEV, S_ADD_SQUARE_DEV, V_ADD, S_ADD)

static float max2(float a, float b) { return b > a ? b : a; }
static float min2(float a, float b) { return b < a ? b : a; }
static float add2(float a, float b) { return a + b; }

#if defined(__AVX512F__)
/* 16 elements of a 16-bit row as floats, and back (float16: F16C; bfloat16: a shift, and float16_to_bf16). */
static inline __m512 load16(const void* p, int32_t dtype) {
  __m256i h = _mm256_loadu_si256((const __m256i*)p);
  return dtype == SEPTRAN_CPU_F16 ? _mm512_cvtph_ps(h) : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static inline void store16(void* p, __m512 v, int32_t dtype) {
  float f[16];
  if (dtype == SEPTRAN_CPU_F16) {  /* in a register first: see float16_to_half */
    __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __asm__("" : "+v"(h));
    _mm256_storeu_si256((__m256i*)p, h);
    return;
  }
  _mm512_storeu_ps(f, v);
  _mm256_storeu_si256((__m256i*)p, float16_to_bf16(f));
}

/* The 16-bit rows in one pass, 16 elements at a time in registers (as inductor's code): the multiple of 16 of
 * each row; the rest goes through the chunked path. w and b of the rows' type, or float32 (w_f32, a constant once
 * inlined: each case compiles as its own loop; with the weights' type tested per 16 elements the float16 LayerNorm
 * of 4096 x 1024 took 15% to 20% longer, Zen 5). */
static inline __attribute__((always_inline)) void affine16_rows(void* y, const void* x, int32_t dtype, const float* c,
                                                                const float* s, const void* w, const void* b,
                                                                int w_f32, int32_t rows, int32_t cols, int32_t ldy,
                                                                int32_t ldx) {
  for (int32_t i = 0; i < rows; i++) {
    const uint16_t* xr = (const uint16_t*)x + (size_t)i * (size_t)ldx;
    uint16_t* yr = (uint16_t*)y + (size_t)i * (size_t)ldy;
    const __m512 ci = _mm512_set1_ps(c ? c[i] : 0.0f), si = _mm512_set1_ps(s[i]);
    for (int32_t j = 0; j < cols; j += 16) {
      __m512 wv = w_f32 ? _mm512_loadu_ps((const float*)w + j) : load16((const uint16_t*)w + j, dtype);
      __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_sub_ps(load16(xr + j, dtype), ci), si), wv);
      if (b) v = _mm512_add_ps(v, w_f32 ? _mm512_loadu_ps((const float*)b + j) : load16((const uint16_t*)b + j, dtype));
      store16(yr + j, v, dtype);
    }
  }
}

static void rows_affine16(void* y, const void* x, int32_t dtype, const float* c, const float* s, const void* w,
                          const void* b, int32_t rows, int32_t cols, int32_t ldy, int32_t ldx) {
  affine16_rows(y, x, dtype, c, s, w, b, 0, rows, cols, ldy, ldx);
}

static void rows_affine16_wf32(void* y, const void* x, int32_t dtype, const float* c, const float* s, const float* w,
                               const float* b, int32_t rows, int32_t cols, int32_t ldy, int32_t ldx) {
  affine16_rows(y, x, dtype, c, s, w, b, 1, rows, cols, ldy, ldx);
}

/* The sum of (x - c)^2 over a 16-bit row, widened in registers as it is read (four accumulators, so the adds
 * overlap): one read of the row, where a chunk copy wrote it to L1 as floats and read it back. */
static float row16_sumsq_dev(const void* x, int32_t n, float c, int32_t dtype) {
  const uint16_t* h = (const uint16_t*)x;
  const __m512 cv = _mm512_set1_ps(c);
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, v;
  int32_t j = 0;
  for (; j + 64 <= n; j += 64) {
    v = _mm512_sub_ps(load16(h + j, dtype), cv);      a0 = _mm512_fmadd_ps(v, v, a0);
    v = _mm512_sub_ps(load16(h + j + 16, dtype), cv); a1 = _mm512_fmadd_ps(v, v, a1);
    v = _mm512_sub_ps(load16(h + j + 32, dtype), cv); a2 = _mm512_fmadd_ps(v, v, a2);
    v = _mm512_sub_ps(load16(h + j + 48, dtype), cv); a3 = _mm512_fmadd_ps(v, v, a3);
  }
  for (; j + 16 <= n; j += 16) {
    v = _mm512_sub_ps(load16(h + j, dtype), cv);
    a0 = _mm512_fmadd_ps(v, v, a0);
  }
  float r = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
  if (j < n) {
    float tail[16];
    convert_row(tail, SEPTRAN_CPU_F32, h + j, dtype, n - j);
    for (int32_t k = 0; k < n - j; k++) r += (tail[k] - c) * (tail[k] - c);
  }
  return r;
}
#endif

typedef float (*row_fn)(const float*, int32_t, float);
typedef float (*join_fn)(float, float);

/* out[i] = row(x's row i) joined into out[i] unless clear; center: a value per row for row (NULL: 0). Inlined
 * into each caller below, so row and join are direct calls. */
static inline __attribute__((always_inline)) int32_t reduce_rows(float* out, const float* x, const float* center,
                                                                 int32_t rows, int32_t cols, int32_t ldx,
                                                                 int32_t clear, row_fn row, join_fn join) {
  if (rows < 0 || cols < 0 || ldx < 0) return SEPTRAN_CPU_E_ARGS;
  for (int32_t i = 0; i < rows; i++) {
    float r = row(x + (size_t)i * (size_t)ldx, cols, center ? center[i] : 0.0f);
    out[i] = clear ? r : join(out[i], r);
  }
  return 0;
}

/* float16 or bfloat16 rows (a kernel's tensor reduced in place, without a float32 copy): widened a chunk at a time
 * into a stack buffer that stays in L1, reduced there, the chunks combined in order. */
enum { HALF_CHUNK = 512 };

static inline __attribute__((always_inline)) int32_t reduce_half_rows(float* out, const void* x, const float* center,
                                                                      int32_t rows, int32_t cols, int32_t ldx,
                                                                      int32_t clear, row_fn row, join_fn join,
                                                                      float init, int32_t dtype) {
  if (rows < 0 || cols < 0 || ldx < 0) return SEPTRAN_CPU_E_ARGS;
#if defined(__AVX512F__)
  if (row == row_sumsq_dev) { /* (a constant here: the function is inlined into each caller) */
    for (int32_t i = 0; i < rows; i++) {
      float r = row16_sumsq_dev((const uint16_t*)x + (size_t)i * (size_t)ldx, cols, center ? center[i] : 0.0f, dtype);
      out[i] = clear ? r : join(out[i], r);
    }
    return 0;
  }
#endif
  float chunk[HALF_CHUNK];
  for (int32_t i = 0; i < rows; i++) {
    const uint16_t* h = (const uint16_t*)x + (size_t)i * (size_t)ldx;
    float r = init;
    for (int32_t j = 0; j < cols; j += HALF_CHUNK) {
      int32_t n = cols - j < HALF_CHUNK ? cols - j : HALF_CHUNK;
      convert_row(chunk, SEPTRAN_CPU_F32, h + j, dtype, n);
      r = join(r, row(chunk, n, center ? center[i] : 0.0f));
    }
    out[i] = clear ? r : join(out[i], r);
  }
  return 0;
}

#define REDUCE(name, row, join, init)                                                                  \
  int32_t name(float* out, float* x, int32_t rows, int32_t cols, int32_t ldx, int32_t clear) {        \
    return reduce_rows(out, x, NULL, rows, cols, ldx, clear, row, join);                              \
  }                                                                                                   \
  int32_t name##_half(float* out, void* x, int32_t rows, int32_t cols, int32_t ldx, int32_t clear) {  \
    return reduce_half_rows(out, x, NULL, rows, cols, ldx, clear, row, join, init, SEPTRAN_CPU_F16);  \
  }                                                                                                   \
  int32_t name##_bfloat16(float* out, void* x, int32_t rows, int32_t cols, int32_t ldx, int32_t clear) { \
    return reduce_half_rows(out, x, NULL, rows, cols, ldx, clear, row, join, init, SEPTRAN_CPU_BF16); \
  }

REDUCE(septran_cpu_reduce_max, row_max, max2, -INFINITY)
REDUCE(septran_cpu_reduce_min, row_min, min2, INFINITY)
REDUCE(septran_cpu_reduce_sum, row_sum, add2, 0.0f)
REDUCE(septran_cpu_reduce_sumsq, row_sumsq_dev, add2, 0.0f)

/* A variance's numerator in one pass, float32 throughout: squares written into a float16 tile and summed after
 * overflowed past a deviation of 256. */
int32_t septran_cpu_reduce_sumsq_dev(float* out, float* x, float* center, int32_t rows, int32_t cols, int32_t ldx,
                                     int32_t clear) {
  return reduce_rows(out, x, center, rows, cols, ldx, clear, row_sumsq_dev, add2);
}

int32_t septran_cpu_reduce_sumsq_dev_half(float* out, void* x, float* center, int32_t rows, int32_t cols, int32_t ldx,
                                          int32_t clear) {
  return reduce_half_rows(out, x, center, rows, cols, ldx, clear, row_sumsq_dev, add2, 0.0f, SEPTRAN_CPU_F16);
}

/* ---- the norms' write: y = ((x - c) * s) * w + b, a row at a time ------------------------- */

/* float32 rows, and the 16-bit rows' last columns (all of them without AVX-512, where rows_affine16 takes the
 * multiples of 16): a chunk of a row in L1, x (and w, b) widened into float32 where they are 16-bit, the
 * arithmetic on float32 as the elementwise loops do it (one rounding, at the store), the result narrowed into y;
 * w and b widened once per chunk of columns for every row of the tile. */
enum { ROWS_CHUNK = 512 };

int32_t septran_cpu_rows_affine(void* y, const void* x, int32_t dtype, const float* c, const float* s, const void* w,
                                const void* b, int32_t rows, int32_t cols, int32_t ldy, int32_t ldx) {
  return septran_cpu_rows_affine_w(y, x, dtype, c, s, w, b, dtype, rows, cols, ldy, ldx);
}

int32_t septran_cpu_rows_affine_w(void* y, const void* x, int32_t dtype, const float* c, const float* s, const void* w,
                                  const void* b, int32_t wdtype, int32_t rows, int32_t cols, int32_t ldy, int32_t ldx) {
  size_t es = elem_size(dtype), ws = elem_size(wdtype);
  if (!es || !ws || (wdtype != dtype && wdtype != SEPTRAN_CPU_F32) || rows < 0 || cols < 0 || ldy < 0 || ldx < 0 ||
      !s || !w)
    return SEPTRAN_CPU_E_ARGS;
#if defined(__AVX512F__)
  if (dtype != SEPTRAN_CPU_F32 && cols >= 16) {
    int32_t head = cols & ~15;
    if (wdtype == SEPTRAN_CPU_F32)
      rows_affine16_wf32(y, x, dtype, c, s, (const float*)w, (const float*)b, rows, head, ldy, ldx);
    else
      rows_affine16(y, x, dtype, c, s, w, b, rows, head, ldy, ldx);
    if (head == cols) return 0;
    y = (char*)y + (size_t)head * es;
    x = (const char*)x + (size_t)head * es;
    w = (const char*)w + (size_t)head * ws;
    b = b ? (const char*)b + (size_t)head * ws : NULL;
    cols -= head;
  }
#endif
  float xb[ROWS_CHUNK], wb[ROWS_CHUNK], bb[ROWS_CHUNK], yb[ROWS_CHUNK];
  for (int32_t j0 = 0; j0 < cols; j0 += ROWS_CHUNK) {
    int32_t n = cols - j0 < ROWS_CHUNK ? cols - j0 : ROWS_CHUNK;
    const float* wf = wb;
    const float* bf = bb;
    if (wdtype == SEPTRAN_CPU_F32) {
      wf = (const float*)w + j0;
      bf = b ? (const float*)b + j0 : NULL;
    } else {
      convert_row(wb, SEPTRAN_CPU_F32, (const char*)w + (size_t)j0 * ws, wdtype, n);
      if (b) convert_row(bb, SEPTRAN_CPU_F32, (const char*)b + (size_t)j0 * ws, wdtype, n);
      else bf = NULL;
    }
    for (int32_t i = 0; i < rows; i++) {
      const char* xr = (const char*)x + ((size_t)i * (size_t)ldx + (size_t)j0) * es;
      char* yr = (char*)y + ((size_t)i * (size_t)ldy + (size_t)j0) * es;
      const float* xf = (const float*)xr;
      float* yf = dtype == SEPTRAN_CPU_F32 ? (float*)yr : yb;
      if (dtype != SEPTRAN_CPU_F32) {
        convert_row(xb, SEPTRAN_CPU_F32, xr, dtype, n);
        xf = xb;
      }
      const float ci = c ? c[i] : 0.0f, si = s[i];
      if (c && bf) {
        for (int32_t j = 0; j < n; j++) yf[j] = (xf[j] - ci) * si * wf[j] + bf[j];
      } else if (c) {
        for (int32_t j = 0; j < n; j++) yf[j] = (xf[j] - ci) * si * wf[j];
      } else if (bf) {
        for (int32_t j = 0; j < n; j++) yf[j] = xf[j] * si * wf[j] + bf[j];
      } else {
        for (int32_t j = 0; j < n; j++) yf[j] = xf[j] * si * wf[j];
      }
      if (dtype != SEPTRAN_CPU_F32) convert_row(yr, dtype, yb, SEPTRAN_CPU_F32, n);
    }
  }
  return 0;
}

/* ---- GEMM ------------------------------------------------------------------------------ */

/* One row (or one column) of C is a matrix-vector product: sgemv reads the matrix once, where OpenBLAS 0.3's
 * sgemm packs it first (2.5 times sgemv's time for 1 x 4096 x 4096 on one core, measured). */

/* septran_cpu_scratch.h: here the float16 or bfloat16 operands converted to float32; septran_cpu_bf16.c packs
 * the matrix units' operands into the same buffer. */
static _Thread_local void* scratch;
static _Thread_local size_t scratch_bytes;

void* septran_cpu_scratch(size_t bytes) {
  if (bytes > scratch_bytes) {
    size_t rounded = (bytes + 63) & ~(size_t)63;
    void* grown = aligned_alloc(64, rounded);
    if (!grown) return NULL;
    free(scratch);
    scratch = grown;
    scratch_bytes = rounded;
  }
  return scratch;
}

static float* scratch_for(size_t floats) { return septran_cpu_scratch(floats * sizeof(float)); }

/* A^T (A stored k x m, stride ld) of float16 or bfloat16 as a dense row-major float32 m x k */
static void widen_transposed(float* d, const void* s, int32_t dtype, int32_t m, int32_t k, int32_t ld) {
  const uint16_t* h = s;
  for (int32_t i = 0; i < m; i++)
    for (int32_t e = 0; e < k; e++) {
      uint16_t v = h[(size_t)e * ld + i];
      if (dtype == SEPTRAN_CPU_BF16) {
        uint32_t w = (uint32_t)v << 16;
        memcpy(&d[(size_t)i * k + e], &w, sizeof w);
      } else {
        _Float16 f;
        memcpy(&f, &v, sizeof f);
        d[(size_t)i * k + e] = (float)f;
      }
    }
}

/* A rows x cols matrix of float16 or bfloat16 (row stride ld) as dense float32 at d. */
static void widen(float* d, const void* s, int32_t dtype, int32_t rows, int32_t cols, int32_t ld) {
  for (int32_t i = 0; i < rows; i++)
    convert_row(d + (size_t)i * cols, SEPTRAN_CPU_F32, row_at((void*)s, dtype, i, ld), dtype, cols);
}

/* OpenBLAS's Haswell sgemm kernel (the one it picks on AVX2 CPUs such as AMD Zen 1) prefetches the next packed
 * panel of B while it computes on this one, and past the last panel that is buffer memory no call has written
 * yet. A prefetch of a page that is not mapped is dropped after a page walk, every time: on a KVM guest with
 * a Zen 1 EPYC a 256 x 256 x 512 tile ran at 9 GFLOP/s per core instead of 32 (76 % of the kernel's samples on
 * that prefetch), until some call of 512 or more columns had written further into the buffer; then every
 * later call ran at 32. OpenBLAS's buffers are per thread, so each thread makes one such call, zeros times
 * zeros into a scratch it frees, before its first sgemm: about 16 MFLOP, well under a millisecond, once. */
enum { WARM_M = 64, WARM_N = 512, WARM_K = 512 };
static _Thread_local int blas_warm;

static void warm_blas_buffer(void) {
  blas_warm = 1;
  float* s = calloc((size_t)WARM_M * WARM_K + (size_t)WARM_K * WARM_N + (size_t)WARM_M * WARM_N, sizeof(float));
  if (!s) return; /* only slower */
  float *a = s, *b = a + (size_t)WARM_M * WARM_K, *c = b + (size_t)WARM_K * WARM_N;
  scipy_cblas_sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_NO_TRANS, WARM_M, WARM_N, WARM_K, 1.0f, a, WARM_K, b,
                    WARM_N, 0.0f, c, WARM_N);
  free(s);
}

/* BLAS wants ld >= cols even where a single row makes the stride meaningless. */
static int ld_ok(int32_t* ld, int32_t rows, int32_t cols) {
  if (rows == 1 && *ld < cols) *ld = cols;
  return *ld >= cols;
}

/* From this many elements of B a few rows stream it (septran_cpu_few_rows_gemm) rather than call sgemm */
enum { FEW_ROWS_STREAMED_FROM = 1 << 16 };

static void sgemm_part(float* C, const float* a, const float* b, int32_t m, int32_t n, int32_t k, int32_t ldc,
                       int32_t lda, int32_t ldb, int32_t trans_a, int32_t trans_b) {
  if (!blas_warm) warm_blas_buffer();
  scipy_cblas_sgemm(CBLAS_ROW_MAJOR, trans_a ? CBLAS_TRANS : CBLAS_NO_TRANS, trans_b ? CBLAS_TRANS : CBLAS_NO_TRANS,
                    m, n, k, 1.0f, a, lda, b, ldb, 1.0f, C, ldc);
}

int32_t septran_cpu_gemm(float* C, void* A, void* B, int32_t dtype, int32_t m, int32_t n, int32_t k,
                         int32_t ldc, int32_t lda, int32_t ldb, int32_t trans_a, int32_t trans_b) {
  if (!elem_size(dtype) || m < 0 || n < 0 || k < 0) return SEPTRAN_CPU_E_ARGS;
  if (m == 0 || n == 0 || k == 0) return 0;
  int32_t a_rows = trans_a ? k : m, a_cols = trans_a ? m : k, b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
  if (!ld_ok(&ldc, m, n) || !ld_ok(&lda, a_rows, a_cols) || !ld_ok(&ldb, b_rows, b_cols)) return SEPTRAN_CPU_E_ARGS;
  const float* a = A;
  const float* b = B;
  int threads;
  if (dtype != SEPTRAN_CPU_F32 && m == 1) { /* a decode step: only a is widened, B streams once as it is */
    float* s = scratch_for((size_t)k);
    if (!s) return SEPTRAN_CPU_E_NOMEM;
    widen(s, A, dtype, a_rows, a_cols, lda); /* 1 x k, or k x 1: k dense floats either way */
    septran_cpu_row_gemm_16(C, s, 1, B, dtype == SEPTRAN_CPU_BF16, k, n, ldb, trans_b);
    return 0;
  }
  if (dtype != SEPTRAN_CPU_F32 && m <= SEPTRAN_CPU_FEW_ROWS && !trans_b && (int64_t)n * k >= FEW_ROWS_STREAMED_FROM) {
    /* a few rows (a batch's decode step): only A is widened, B streams once as it is (widening all of B first
     * read it three times: 4 x 4096 x 4096 bfloat16 0.43 / 0.64x torch at 2 / 1 threads, Zen 4) */
    float* s = scratch_for((size_t)a_rows * a_cols);
    if (!s) return SEPTRAN_CPU_E_NOMEM;
    widen(s, A, dtype, a_rows, a_cols, lda);
    septran_cpu_few_rows_gemm_16(C, ldc, s, a_cols, trans_a, m, B, dtype == SEPTRAN_CPU_BF16, k, n, ldb);
    return 0;
  }
  if (dtype != SEPTRAN_CPU_F32 && m <= SEPTRAN_CPU_FEW_ROWS && trans_b && (int64_t)n * k >= FEW_ROWS_STREAMED_FROM) {
    /* the same with a Linear's weight (B stored n x k): dot products with B's rows, of bfloat16 pairs where the
     * CPU has AVX512-BF16 (A read in place, or its transpose copied), else of op(A) widened row-major */
    if (dtype == SEPTRAN_CPU_BF16 && septran_cpu_few_dots_unit()) {
      const uint16_t* ah = A;
      int32_t ld_a = lda;
      if (trans_a) {
        uint16_t* t = septran_cpu_scratch((size_t)m * k * sizeof(uint16_t));
        if (!t) return SEPTRAN_CPU_E_NOMEM;
        for (int32_t i = 0; i < m; i++)
          for (int32_t e = 0; e < k; e++) t[(size_t)i * k + e] = ah[(size_t)e * lda + i];
        ah = t, ld_a = k;
      }
      septran_cpu_few_dots_gemm_bf16(C, ldc, ah, ld_a, m, B, k, n, ldb);
      return 0;
    }
    float* s = scratch_for((size_t)m * k);
    if (!s) return SEPTRAN_CPU_E_NOMEM;
    if (trans_a)
      widen_transposed(s, A, dtype, m, k, lda);
    else
      widen(s, A, dtype, m, k, lda);
    septran_cpu_few_dots_gemm_16(C, ldc, s, m, B, dtype == SEPTRAN_CPU_BF16, k, n, ldb);
    return 0;
  }
  if (dtype != SEPTRAN_CPU_F32) {
    size_t a_size = (size_t)a_rows * a_cols;
    float* s = scratch_for(a_size + (size_t)b_rows * b_cols);
    if (!s) return SEPTRAN_CPU_E_NOMEM;
    widen(s, A, dtype, a_rows, a_cols, lda);
    widen(s + a_size, B, dtype, b_rows, b_cols, ldb);
    a = s, b = s + a_size, lda = a_cols, ldb = b_cols;
  }
  if (m == 1) { /* a row of C (a decode step): op(B)^T a, B read once (septran_cpu_gemv.c) */
    septran_cpu_row_gemm(C, a, trans_a ? lda : 1, b, k, n, ldb, trans_b);
  } else if (n == 1) { /* a column of C: op(A) b */
    scipy_cblas_sgemv(CBLAS_ROW_MAJOR, trans_a ? CBLAS_TRANS : CBLAS_NO_TRANS, a_rows, a_cols, 1.0f, a, lda, b,
                      trans_b ? 1 : ldb, 1.0f, C, ldc);
  } else if (m <= SEPTRAN_CPU_FEW_ROWS && !trans_b && (int64_t)n * k >= FEW_ROWS_STREAMED_FROM) {
    septran_cpu_few_rows_gemm(C, ldc, a, lda, trans_a, m, b, k, n, ldb); /* B read once (septran_cpu_gemv.c) */
  } else if (m <= SEPTRAN_CPU_FEW_ROWS && trans_b && !trans_a && (int64_t)n * k >= FEW_ROWS_STREAMED_FROM) {
    /* a Linear's weight (B stored n x k): dot products of four of its rows by four of A's, B read once, where
     * sgemm packed it first (with its bias and ReLU, x torch, 1 / 2 threads, Zen 4: 2 x 4096 x 4096 0.61 / 1.16
     * -> 1.93 / 3.50, 4 x 11008 x 4096 0.84 / 1.07 -> 2.50 / 3.24, 16 x 4096 x 4096 0.73 / 1.03 -> 1.33 / 1.68) */
    septran_cpu_few_dots_gemm(C, ldc, a, lda, m, b, k, n, ldb);
  } else if ((m <= SEPTRAN_CPU_FEW_ROWS && (threads = septran_cpu_split_threads(n, k)) > 1) ||
             (threads = septran_cpu_whole_threads(m, n, k)) > 1) {
    /* The kernel's one program, outside a parallel region: C's longer side split over the threads in panels of 64,
     * one sgemm each (OpenBLAS runs one thread per call). A few rows of a transposed B (a Linear's weight) split B's
     * columns, as a row's are (measured when the untransposed B went this way too: 16 x 4096 x 4096 at 2 threads 13.1
     * -> 7.2 ms, torch 8.6, AMD EPYC Zen 4); a whole C (a mapping's point with C in GLOBAL and one tile: the grid
     * has nothing to share out) its rows or columns, each thread packing all of the other operand (k n against
     * the m n k / threads it computes). */
    int32_t along = m >= n ? m : n;
#pragma omp parallel num_threads(threads)
    {
      int32_t start, end;
      septran_cpu_split_share(along, omp_get_thread_num(), omp_get_num_threads(), &start, &end);
      if (end > start && m >= n)
        sgemm_part(C + (size_t)start * ldc, trans_a ? a + start : a + (size_t)start * lda, b, end - start, n, k, ldc,
                   lda, ldb, trans_a, trans_b);
      else if (end > start)
        sgemm_part(C + start, a, trans_b ? b + (size_t)start * ldb : b + start, m, end - start, k, ldc, lda, ldb,
                   trans_a, trans_b);
    }
  } else {
    sgemm_part(C, a, b, m, n, k, ldc, lda, ldb, trans_a, trans_b);
  }
  return 0;
}

static int32_t min32(int32_t a, int32_t b) { return a < b ? a : b; }

int32_t septran_cpu_gemm_tiles(float* C, void* A, void* B, int32_t dtype, int32_t trans_a, int32_t trans_b,
                               int32_t c_rows, int32_t c_cols, int32_t a_rows, int32_t a_cols, int32_t b_rows,
                               int32_t b_cols, int32_t ldc, int32_t lda, int32_t ldb) {
  /* A tile that overhangs its tensor holds fewer rows or columns than its neighbours: multiply only the
   * part every operand holds, so that nothing past a tensor's end is read. */
  int32_t m = min32(c_rows, trans_a ? a_cols : a_rows);
  int32_t n = min32(c_cols, trans_b ? b_rows : b_cols);
  int32_t k = min32(trans_a ? a_rows : a_cols, trans_b ? b_cols : b_rows);
  return septran_cpu_gemm(C, A, B, dtype, m, n, k, ldc, lda, ldb, trans_a, trans_b);
}
