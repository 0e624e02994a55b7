// tilelang target: {"kind":"c","tag":"","keys":["cpu"],"host":{"kind":"c","tag":"","keys":["cpu"]}}
#include <tl_templates/cpp/common.h>

#ifdef __cplusplus
extern "C"
#endif
int32_t gemm_host_kernel(half* A, half* B, half* C);
#ifdef __cplusplus
extern "C"
#endif
int32_t dsa_ref_fill_zero(int32_t, int32_t, int32_t, int32_t);
#ifdef __cplusplus
extern "C"
#endif
int32_t dsa_ref_dma_load(int32_t, half*, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t);
#ifdef __cplusplus
extern "C"
#endif
int32_t dsa_ref_dma_load(int32_t, half*, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t);
#ifdef __cplusplus
extern "C"
#endif
int32_t dsa_ref_sync();
#ifdef __cplusplus
extern "C"
#endif
int32_t dsa_ref_mma(int32_t, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t);
#ifdef __cplusplus
extern "C"
#endif
int32_t dsa_ref_dma_store(half*, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t);
#ifdef __cplusplus
extern "C"
#endif
int32_t dsa_ref_sync();
#ifdef __cplusplus
extern "C"
#endif
int32_t gemm_host_kernel(half* A, half* B, half* C) {
  for (int32_t bx = 0; bx < 3; ++bx) {
    for (int32_t by = 0; by < 4; ++by) {
      dsa_ref_fill_zero(0, 0, 64, 64);
      for (int32_t k = 0; k < 3; ++k) {
        int32_t v_ = 200 - (by * 64);
        dsa_ref_dma_load(16384, (&(A[((by * 6144) + (k * 32))])), 1, 64, 32, 96, ((64) < (v_) ? (64) : (v_)), 32);
        int32_t v__1 = 150 - (bx * 64);
        dsa_ref_dma_load(20480, (&(B[((k * 4800) + (bx * 64))])), 1, 32, 64, 150, 32, ((64) < (v__1) ? (64) : (v__1)));
        dsa_ref_sync();
        dsa_ref_mma(0, 16384, 20480, 1, 64, 64, 32);
      }
      int32_t v__2 = 200 - (by * 64);
      int32_t v__3 = 150 - (bx * 64);
      dsa_ref_dma_store((&(C[((by * 9600) + (bx * 64))])), 1, 0, 0, 64, 64, 150, ((64) < (v__2) ? (64) : (v__2)), ((64) < (v__3) ? (64) : (v__3)));
      dsa_ref_sync();
    }
  }
  return 0;
}

