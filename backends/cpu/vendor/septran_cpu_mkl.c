/* septran_cpu_mkl.c -- GEMM leaves on the MKL that torch carries (gemm_leaf_mkl).
 *
 * float32 through MKL's sgemm, bfloat16 through cblas_gemm_bf16bf16f32 (AMX or AVX512-BF16 where MKL finds them).
 * float16 takes the OpenBLAS leaf's widening path: MKL's cblas_gemm_f16f16f32 ran at 0.6 to 0.85x of it on an AMD
 * EPYC Zen 4 (attention's scores in float16, 1x8x512x512x64); AVX512-FP16's FMAs sum in float16, so on the Xeons
 * before AMX-FP16 a float16 GEMM that sums in float32 widens its operands either way.
 *
 * torch's x86-64 wheels link Intel's MKL into libtorch_cpu.so and export its BLAS: torch's own float32 matmul is
 * that `sgemm`. The library is found in the running process (dlopen RTLD_NOLOAD: never loaded, never a
 * dependency of the build), once per process. Where it is absent (a torch without MKL, a process without torch)
 * every call here is septran_cpu_gemm_tiles, OpenBLAS's leaf, and returns SEPTRAN_CPU_E_UNIT: C is right either way.
 *
 * MKL runs one thread per call here: the kernel's grid already has a program on every core; a kernel of one program
 * over a whole C (called outside a parallel region) gives it the threads. Its thread count is set for the calling
 * thread only (MKL_Set_Num_Threads_Local) and put back after the call, so torch's own MKL calls
 * on the same thread keep torch's count.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <omp.h>
#include <pthread.h>
#include <stdint.h>

#include "septran_cpu.h"
#include "septran_cpu_gemv.h"

enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };

/* MKL's LP64 interface (32-bit ints), declared here: the build needs no MKL headers. */
typedef void (*sgemm_fn)(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                         const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
                         const float* beta, float* c, const int* ldc);
typedef void (*gemm16_fn)(int layout, int transa, int transb, int m, int n, int k, float alpha, const uint16_t* a,
                          int lda, const uint16_t* b, int ldb, float beta, float* c, int ldc);
typedef int (*threads_fn)(int nthreads);

static struct {
  sgemm_fn sgemm;
  gemm16_fn gemm_bf16; /* cblas_gemm_bf16bf16f32: AMX or AVX512-BF16 where MKL finds them */
  threads_fn set_local_threads;
} mkl;
static pthread_once_t mkl_once = PTHREAD_ONCE_INIT;

static void find_mkl(void) {
  void* lib = dlopen("libtorch_cpu.so", RTLD_NOLOAD | RTLD_LAZY);
  if (!lib) return;
  threads_fn local = (threads_fn)dlsym(lib, "MKL_Set_Num_Threads_Local");
  if (!local) return; /* no thread control: not usable from the grid's threads */
  mkl.sgemm = (sgemm_fn)dlsym(lib, "sgemm_");
  mkl.gemm_bf16 = (gemm16_fn)dlsym(lib, "cblas_gemm_bf16bf16f32");
  mkl.set_local_threads = local;
  /* the handle stays open: libtorch_cpu.so outlives every kernel */
}

int32_t septran_cpu_mkl(void) {
  pthread_once(&mkl_once, find_mkl);
  return (mkl.sgemm ? SEPTRAN_CPU_MKL_F32 : 0) | (mkl.gemm_bf16 ? SEPTRAN_CPU_MKL_BF16 : 0);
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Few rows or one column go to the OpenBLAS leaf's own paths: they stream B once (septran_cpu_gemv.c), where a
 * BLAS call packs it first. */
static int streamed(int64_t m, int64_t n) { return m <= 16 || n == 1; }

static int32_t gemm_mkl(float* c, void* a, void* b, int32_t dtype, int32_t trans_a, int32_t trans_b, int64_t c_rows,
                        int64_t c_cols, int64_t a_rows, int64_t a_cols, int64_t b_rows, int64_t b_cols, int64_t ldc,
                        int64_t lda, int64_t ldb) {
  if (dtype == SEPTRAN_CPU_F16) /* widened for OpenBLAS (above) */
    return septran_cpu_gemm_tiles(c, a, b, dtype, trans_a, trans_b, c_rows, c_cols, a_rows, a_cols, b_rows, b_cols, ldc,
                                  lda, ldb);
  /* the part every operand holds, as septran_cpu_gemm_tiles multiplies */
  int64_t m = min64(c_rows, trans_a ? a_cols : a_rows);
  int64_t n = min64(c_cols, trans_b ? b_rows : b_cols);
  int64_t k = min64(trans_a ? a_rows : a_cols, trans_b ? b_cols : b_rows);
  int found = septran_cpu_mkl() & (dtype == SEPTRAN_CPU_F32 ? SEPTRAN_CPU_MKL_F32 : SEPTRAN_CPU_MKL_BF16);
  if (!found || streamed(m, n) || m < 0 || n < 0 || k < 0 || m > INT32_MAX || n > INT32_MAX || k > INT32_MAX ||
      ldc < n || lda < (trans_a ? m : k) || ldb < (trans_b ? k : n) || ldc > INT32_MAX || lda > INT32_MAX ||
      ldb > INT32_MAX) {
    int32_t rc = septran_cpu_gemm_tiles(c, a, b, dtype, trans_a, trans_b, c_rows, c_cols, a_rows, a_cols, b_rows,
                                        b_cols, ldc, lda, ldb);
    return rc ? rc : found ? 0 : SEPTRAN_CPU_E_UNIT;
  }
  if (m == 0 || n == 0 || k == 0) return 0;
  int im = (int)m, in = (int)n, ik = (int)k, ilda = (int)lda, ildb = (int)ldb, ildc = (int)ldc;
  /* one thread inside the grid's parallel region; a kernel's one program over a whole C runs MKL's own threads */
  int before = mkl.set_local_threads(septran_cpu_whole_threads(m, n, k) > 1 ? omp_get_max_threads() : 1);
  if (dtype == SEPTRAN_CPU_F32) {
    /* column-major BLAS: C^T += op(B)^T op(A)^T, each row-major matrix read as its transpose */
    const float one = 1.0f;
    const char ta = trans_a ? 'T' : 'N', tb = trans_b ? 'T' : 'N';
    mkl.sgemm(&tb, &ta, &in, &im, &ik, &one, b, &ildb, a, &ilda, &one, c, &ildc);
  } else {
    mkl.gemm_bf16(CBLAS_ROW_MAJOR, trans_a ? CBLAS_TRANS : CBLAS_NO_TRANS, trans_b ? CBLAS_TRANS : CBLAS_NO_TRANS, im,
                  in, ik, 1.0f, a, ilda, b, ildb, 1.0f, c, ildc);
  }
  mkl.set_local_threads(before);
  return 0;
}

/* As the kernels call them (septran_cpu_typed.c's argument order). */
#define GEMM_MKL(T, TYPE, CODE)                                                                                   \
  int32_t septran_cpu_gemm_mkl_##T##_##T(float* c, TYPE* a, TYPE* b, int32_t trans_a, int32_t trans_b,          \
                                         int64_t c_rows, int64_t c_cols, int64_t a_rows, int64_t a_cols,         \
                                         int64_t b_rows, int64_t b_cols, int64_t ldc, int64_t lda, int64_t ldb) { \
    return gemm_mkl(c, a, b, CODE, trans_a, trans_b, c_rows, c_cols, a_rows, a_cols, b_rows, b_cols, ldc, lda,    \
                    ldb);                                                                                         \
  }

GEMM_MKL(f32, float, SEPTRAN_CPU_F32)
GEMM_MKL(f16, uint16_t, SEPTRAN_CPU_F16)
GEMM_MKL(bf16, uint16_t, SEPTRAN_CPU_BF16)
