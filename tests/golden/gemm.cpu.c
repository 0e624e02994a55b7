// tilelang target: {"kind":"c","tag":"","keys":["cpu"],"host":{"kind":"c","tag":"","keys":["cpu"]}}
#include <tl_templates/cpp/common.h>

#ifdef __cplusplus
extern "C"
#endif
int32_t gemm_host_kernel(float* A, float* B, float* C);
#ifdef __cplusplus
extern "C"
#endif
int32_t septran_cpu_fill_zero_f32(float*, int64_t, int64_t, int64_t);
#ifdef __cplusplus
extern "C"
#endif
int32_t septran_cpu_gemm_f32_f32(float*, float*, float*, int32_t, int32_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
#ifdef __cplusplus
extern "C"
#endif
int32_t septran_cpu_store_f32_f32(float*, float*, int64_t, int64_t, int64_t, int64_t);
#ifdef __cplusplus
extern "C"
#endif
int32_t gemm_host_kernel(float* A, float* B, float* C) {
  float C_local[32768];
  #pragma omp parallel for collapse(2) schedule(dynamic) private(C_local)
  for (int64_t bx = (int64_t)0; bx < (int64_t)4; ++bx) {
    for (int64_t by = (int64_t)0; by < (int64_t)8; ++by) {
      septran_cpu_fill_zero_f32((&(C_local[0])), (int64_t)128, (int64_t)256, (int64_t)256);
      for (int64_t k = (int64_t)0; k < (int64_t)2; ++k) {
        int64_t v_ = (int64_t)128;
        int64_t v__1 = (int64_t)1000 - (by * (int64_t)128);
        int64_t v__2 = (int64_t)512;
        int64_t v__3 = (int64_t)520 - (k * (int64_t)512);
        int64_t v__4 = (int64_t)256;
        int64_t v__5 = (int64_t)777 - (bx * (int64_t)256);
        septran_cpu_gemm_f32_f32((&(C_local[0])), (&(A[((by * (int64_t)66560) + (k * (int64_t)512))])), (&(B[((k * (int64_t)397824) + (bx * (int64_t)256))])), 0, 0, (int64_t)128, (int64_t)256, ((v_) < (v__1) ? (v_) : (v__1)), ((v__2) < (v__3) ? (v__2) : (v__3)), ((v__2) < (v__3) ? (v__2) : (v__3)), ((v__4) < (v__5) ? (v__4) : (v__5)), (int64_t)256, (int64_t)520, (int64_t)777);
      }
      int64_t v__6 = (int64_t)128;
      int64_t v__7 = (int64_t)1000 - (by * (int64_t)128);
      int64_t v__8 = (int64_t)256;
      int64_t v__9 = (int64_t)777 - (bx * (int64_t)256);
      septran_cpu_store_f32_f32((&(C[((by * (int64_t)99456) + (bx * (int64_t)256))])), (&(C_local[0])), ((v__6) < (v__7) ? (v__6) : (v__7)), ((v__8) < (v__9) ? (v__8) : (v__9)), (int64_t)777, (int64_t)256);
    }
  }
  return 0;
}

