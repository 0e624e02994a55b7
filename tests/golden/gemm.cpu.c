// tilelang target: {"kind":"c","tag":"","keys":["cpu"],"host":{"kind":"c","tag":"","keys":["cpu"]}}
#include <tl_templates/cpp/common.h>

#ifdef __cplusplus
extern "C"
#endif
int32_t gemm_host_kernel(float* A, float* B, float* C);
#ifdef __cplusplus
extern "C"
#endif
int32_t septran_cpu_gemm_f32_f32(float*, float*, float*, int32_t, int32_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
#ifdef __cplusplus
extern "C"
#endif
int32_t gemm_host_kernel(float* A, float* B, float* C) {
  septran_cpu_gemm_f32_f32((&(C[0])), (&(A[0])), (&(B[0])), 0, 0, (int64_t)1000, (int64_t)777, (int64_t)1000, (int64_t)520, (int64_t)520, (int64_t)777, (int64_t)777, (int64_t)520, (int64_t)777);
  return 0;
}

