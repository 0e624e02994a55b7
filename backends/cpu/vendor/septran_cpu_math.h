/* septran_cpu_math.h -- force-included (g++ -include) into every kernel of the CPU target.
 *
 * TileLang's C target prints expf(x), exp2f(x), ... inside elementwise loops. g++ vectorises
 * such a loop only if it knows a vector version of the function: `omp declare simd` below
 * promises glibc's libmvec (_ZGVeN16v_expf for AVX-512, _ZGVdN8v_expf for AVX2, ...).
 * It takes effect with -fopenmp or -fopenmp-simd, needs -fno-math-errno (a call that may set
 * errno is not vectorised) and the kernel must link -lmvec. glibc's own math.h declares the
 * same only under -ffast-math, which the kernels do not use (it drops inf/NaN semantics).
 * Listed: what libmvec has in every x86-64 width, by the glibc version that added it.
 */
#ifndef SEPTRAN_CPU_MATH_H
#define SEPTRAN_CPU_MATH_H

#include <math.h>
#include <stdint.h>

#if defined(__x86_64__) && defined(__GLIBC__) && !defined(__FAST_MATH__)
#ifdef __cplusplus
extern "C" {
#endif
/* In libmvec since glibc 2.22. */
#pragma omp declare simd notinbranch
float expf(float);
#pragma omp declare simd notinbranch
float logf(float);
#pragma omp declare simd notinbranch
float sinf(float);
#pragma omp declare simd notinbranch
float cosf(float);
#pragma omp declare simd notinbranch
float powf(float, float);
#if __GLIBC_PREREQ(2, 35)
#pragma omp declare simd notinbranch
float exp2f(float);
#pragma omp declare simd notinbranch
float expm1f(float);
#pragma omp declare simd notinbranch
float log2f(float);
#pragma omp declare simd notinbranch
float log10f(float);
#pragma omp declare simd notinbranch
float log1pf(float);
#pragma omp declare simd notinbranch
float tanhf(float);
#pragma omp declare simd notinbranch
float erff(float);
#endif
#ifdef __cplusplus
}
#endif
#endif

/* exp and exp2, the functions softmax and attention spend their time in: inline polynomials that g++
 * vectorises in place (1.6 times libmvec's speed on AVX-512), replacing TileLang's expf/exp2f calls by
 * name. x = n ln2 + r with |r| <= ln2 / 2; e^r by a degree-6 polynomial (at most 3 ulp from the true
 * value over [-104, 89]); 2^n from the exponent bits in two halves, so subnormal results come out
 * right. Special values as IEEE says: -inf gives 0, +inf and overflow +inf, NaN NaN. The clamp does it:
 * x is clamped to [-105, 89] (exp2: [-151, 128]), where the two halves scale the polynomial to exactly 0
 * below and to +inf above, and a NaN fails both comparisons and stays NaN through the polynomial; no
 * selection after it (three fewer per element than before: softmax's exp pass 1.2x faster on znver1).
 * (fminf/fmaxf would stop g++ vectorising: the clamps are comparisons, selected as bit masks.) */
#ifdef __cplusplus
extern "C" {
#endif
/* a if take_a else b, as bit masks rather than `?:`: with -march=native = znver1, g++ 12 keeps `?:` in the
 * inlined loop as a branch ("control flow in loop") and leaves the loop scalar (6.3 ns an exp, measured);
 * as masks it is vectorised (2.2 ns, 128-bit vectors, znver1's preferred width). */
static inline float septran_select(int32_t take_a, float a, float b) {
  union { float f; int32_t i; } ua, ub, r;
  ua.f = a;
  ub.f = b;
  int32_t m = -take_a;
  r.i = (ua.i & m) | (ub.i & ~m);
  return r.f;
}

static inline float septran_clamp(float x, float lo, float hi) {
  return septran_select(x < lo, lo, septran_select(x > hi, hi, x));
}

/* p * 2^n for an integer n in [-151, 128], in two halves, so that a subnormal result comes out right */
static inline float septran_times_pow2(float p, float n) {
  int32_t ni = (int32_t)n, h = ni >> 1;
  union { int32_t i; float f; } s1, s2;
  s1.i = (h + 127) << 23;
  s2.i = (ni - h + 127) << 23;
  return p * s1.f * s2.f;
}

static inline float septran_exp_scaled(float n, float r) {
  float p = 1.3981999e-3f;
  p = p * r + 8.3334519e-3f;
  p = p * r + 4.1665795e-2f;
  p = p * r + 1.6666665e-1f;
  p = p * r + 5.0000001e-1f;
  p = p * (r * r) + r + 1.0f;
  return septran_times_pow2(p, n);
}

static inline float septran_expf(float x) {
  float xc = septran_clamp(x, -105.0f, 89.0f);
  float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest (1.5 * 2^23) */
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  return septran_exp_scaled(n, r);
}

/* 2^f on [-0.5, 0.5], minimax for relative error (this scalar form and the 8-wide one below). exp2 evaluates it
 * at f = x - n, which is exact: e^r at r = f ln2 (the product rounded) was up to 2 ulp off (measured on an EPYC
 * Zen 4), this is within 1. */
#define SEPTRAN_EXP2_C6 1.534581243e-4f
#define SEPTRAN_EXP2_C5 1.339993091e-3f
#define SEPTRAN_EXP2_C4 9.618489072e-3f
#define SEPTRAN_EXP2_C3 5.550328642e-2f
#define SEPTRAN_EXP2_C2 2.402264625e-1f
#define SEPTRAN_EXP2_C1 6.931471825e-1f

static inline float septran_exp2_poly(float f) {
  float p = SEPTRAN_EXP2_C6;
  p = p * f + SEPTRAN_EXP2_C5;
  p = p * f + SEPTRAN_EXP2_C4;
  p = p * f + SEPTRAN_EXP2_C3;
  p = p * f + SEPTRAN_EXP2_C2;
  p = p * f + SEPTRAN_EXP2_C1;
  return p * f + 1.0f;
}

static inline float septran_exp2f(float x) {
  float xc = septran_clamp(x, -151.0f, 128.0f);
  float n = (xc + 12582912.0f) - 12582912.0f;
  return septran_times_pow2(septran_exp2_poly(xc - n), n);
}
#ifdef __cplusplus
}
#endif
/* expf on AVX2 CPUs without AVX-512 (AMD Zen 1, measured on an EPYC, family 23 model 1): glibc's 8-wide
 * _ZGVdN8v_expf takes 1.0 ns an element, the inline polynomial above 1.8 ns (vectorised at the 128 bits g++
 * prefers for znver1; 1.6 ns at 256) and libmvec's 4-wide one 1.6 ns; softmax 4096 x 1024 on one thread 1.2x.
 * So there expf stays glibc's (declared `omp declare simd` above: vectorised loops call libmvec, at most 2.6 ulp,
 * special values and subnormal results kept) and the kernel's loops are vectorised 256 bits wide, which that
 * variant takes. Elsewhere (AVX-512: the polynomial is 1.6x libmvec there) expf is the polynomial. */
#if defined(__x86_64__) && defined(__GLIBC__) && !defined(__FAST_MATH__) && defined(__AVX2__) && !defined(__AVX512F__)
#define SEPTRAN_EXPF_LIBMVEC 1
#pragma GCC target("prefer-vector-width=256")
#else
#define expf septran_expf
#endif

/* exp2 on the same CPUs (AVX2 and FMA, no AVX-512) is an 8-wide function of this header's own, which the vectorised
 * loops call as they call libmvec's: exp2f is declared `omp declare simd` under the name septran_exp2f_v, and GCC's
 * vector-function ABI names its 8-lane AVX2 variant _ZGVdN8v_septran_exp2f_v, defined below (hidden in each kernel;
 * weak, so that two files with the header link into one library). Where every lane is in [-126, 126] (attention's
 * scaled scores less their row maximum, nearly always) 2^x = 2^n p(x - n), n = round(x), p of degree 6, 2^n added
 * to p's exponent bits: 15 instructions, 0.95 ns an element on an EPYC (Zen 1) against 1.7 for the inline
 * polynomial above (its clamps and two half scales run on every element) and 0.92 for glibc's 8-wide exp2f. Any
 * other vector (a mask's -inf among its lanes, a subnormal or overflowing result, NaN) takes the exact path: the
 * polynomial scaled in two halves, with the lanes below -151 set to 0 without arithmetic on them (a subnormal
 * intermediate costs a microcode assist on Zen): 1.3 ns an element with half the lanes -inf, where glibc's calls
 * its scalar exp2f for each such vector (3.8 ns) and the inline polynomial takes 2.6. At most 0.95 ulp from exp2
 * over one float in 31 of the 2^32, special values as IEEE says; a scalar call takes the same path, so a lane's
 * result does not depend on its neighbours. Non-causal attention 1x8x512x512x64 on one thread: 1.04 to 1.06x
 * torch's SDPA with it, 0.98x with the inline polynomial (both 256 x 256 tiles; CPU time, median of 7 rounds). */
#if defined(__x86_64__) && !defined(__FAST_MATH__) && defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
#include <immintrin.h>
#pragma GCC target("prefer-vector-width=256")
#ifdef __cplusplus
extern "C" {
#endif
static inline __m256 septran_exp2_poly8(__m256 f) { /* septran_exp2_poly, 8 lanes */
  __m256 p = _mm256_set1_ps(SEPTRAN_EXP2_C6);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(SEPTRAN_EXP2_C5));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(SEPTRAN_EXP2_C4));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(SEPTRAN_EXP2_C3));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(SEPTRAN_EXP2_C2));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(SEPTRAN_EXP2_C1));
  return _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
}

static __attribute__((noinline)) __m256 septran_exp2_exact8(__m256 x) {
  __m256 zero = _mm256_cmp_ps(x, _mm256_set1_ps(-151.0f), _CMP_LT_OQ); /* 0 (also -inf) */
  __m256 xc = _mm256_blendv_ps(x, _mm256_setzero_ps(), zero);
  xc = _mm256_blendv_ps(xc, _mm256_set1_ps(128.0f), _mm256_cmp_ps(xc, _mm256_set1_ps(128.0f), _CMP_GT_OQ));
  __m256 n = _mm256_round_ps(xc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 p = septran_exp2_poly8(_mm256_sub_ps(xc, n)); /* NaN stays NaN */
  __m256i ni = _mm256_cvtps_epi32(n), h = _mm256_srai_epi32(ni, 1), bias = _mm256_set1_epi32(127);
  __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h, bias), 23));
  __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, h), bias), 23));
  return _mm256_andnot_ps(zero, _mm256_mul_ps(_mm256_mul_ps(p, s1), s2)); /* 2^128 overflows to inf */
}

__attribute__((weak, visibility("hidden"))) __m256 _ZGVdN8v_septran_exp2f_v(__m256 x) {
  __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 p = septran_exp2_poly8(_mm256_sub_ps(x, n));
  __m256 r = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23)));
  __m256 in_range = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), x), _mm256_set1_ps(126.0f), _CMP_LE_OQ);
  return _mm256_movemask_ps(in_range) == 0xff ? r : septran_exp2_exact8(x);
}

/* The scalar function the vectorised loops' clone stands for (a loop g++ leaves scalar calls it). */
__attribute__((weak, visibility("hidden"))) float septran_exp2f_v(float x) {
  return _mm256_cvtss_f32(_ZGVdN8v_septran_exp2f_v(_mm256_set1_ps(x)));
}
#pragma omp declare simd notinbranch simdlen(8)
__attribute__((const, nothrow)) float septran_exp2f_avx2(float) __asm__("septran_exp2f_v");
#ifdef __cplusplus
}
#endif
#define exp2f septran_exp2f_avx2
#else
#define exp2f septran_exp2f
#endif

/* erf, the function GELU spends its time in: the rational approximation XLA and Eigen use for float32 (x P(x^2) /
 * Q(x^2) on x clamped to [-4, 4], where erf is +-1 in float32 beyond), FMAs and one division, which g++ vectorises
 * in place. At most 3.9e-7 from erf (float64) over every float, 4 to 7 ulp near 1 (libm's erff: 0.9 ulp); erf(+-inf)
 * = +-1, NaN stays NaN (the clamp's comparisons fail), -0 stays -0. A GELU loop of 16384 elements on an EPYC Zen
 * 4: 0.37 ns an element against 0.73 with libmvec's 16-wide erff (0.36 against 0.62 at 256 bits, the width an AVX2
 * CPU runs). The product c (P / Q) keeps a tiny x's result exact to 1.4 ulp where c P would go subnormal first. */
#ifdef __cplusplus
extern "C" {
#endif
static inline float septran_erff(float x) {
  float c = septran_clamp(x, -4.0f, 4.0f);
  float x2 = c * c;
  float p = x2 * -2.72614225801306e-10f + 2.77068142495902e-08f;
  p = x2 * p + -2.10102402082508e-06f;
  p = x2 * p + -5.69250639462346e-05f;
  p = x2 * p + -7.34990630326855e-04f;
  p = x2 * p + -2.95459980854025e-03f;
  p = x2 * p + -1.60960333262415e-02f;
  float q = x2 * -1.45660718464996e-05f + -2.13374055278905e-04f;
  q = x2 * q + -1.68282697438203e-03f;
  q = x2 * q + -7.37332916720468e-03f;
  q = x2 * q + -1.42647390514189e-02f;
  return c * (p / q);
}
#ifdef __cplusplus
}
#endif
#define erff septran_erff

#endif /* SEPTRAN_CPU_MATH_H */
