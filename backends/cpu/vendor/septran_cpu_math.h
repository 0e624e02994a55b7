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

#endif /* SEPTRAN_CPU_MATH_H */
