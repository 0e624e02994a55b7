// tilelang target: {"kind":"c","tag":"","keys":["cpu"],"host":{"kind":"c","tag":"","keys":["cpu"]}}
#include <tl_templates/cpp/common.h>

#ifdef __cplusplus
extern "C"
#endif
int32_t gemm_host_kernel(half* A, half* B, half* C);
#ifdef __cplusplus
extern "C"
#endif
int32_t acme_tile_desc(int32_t, int32_t, int32_t, int32_t);
#ifdef __cplusplus
extern "C"
#endif
int32_t acme_tile_desc(int32_t, int32_t, int32_t, int32_t);
#ifdef __cplusplus
extern "C"
#endif
int32_t acme_tile_desc(int32_t, int32_t, int32_t, int32_t);
#ifdef __cplusplus
extern "C"
#endif
int32_t acme_zero(int32_t);
#ifdef __cplusplus
extern "C"
#endif
int32_t acme_xfer_in(int32_t, half*, int32_t, int32_t, int32_t);
#ifdef __cplusplus
extern "C"
#endif
int32_t acme_xfer_in(int32_t, half*, int32_t, int32_t, int32_t);
#ifdef __cplusplus
extern "C"
#endif
int32_t acme_fence();
#ifdef __cplusplus
extern "C"
#endif
int32_t acme_matmul_acc(int32_t, int32_t, int32_t);
#ifdef __cplusplus
extern "C"
#endif
int32_t acme_xfer_out(half*, int32_t, int32_t, int32_t, int32_t, int32_t);
#ifdef __cplusplus
extern "C"
#endif
int32_t acme_fence();
#ifdef __cplusplus
extern "C"
#endif
int32_t acme_release_all();
#ifdef __cplusplus
extern "C"
#endif
int32_t gemm_host_kernel(half* A, half* B, half* C) {
  int32_t C_tcm[1];
  int32_t A_tcm[1];
  int32_t B_tcm[1];
  for (int32_t bx = 0; bx < 5; ++bx) {
    for (int32_t by = 0; by < 4; ++by) {
      C_tcm[0] = acme_tile_desc(0, 64, 32, 2);
      A_tcm[0] = acme_tile_desc(8192, 64, 16, 1);
      B_tcm[0] = acme_tile_desc(10240, 16, 32, 1);
      acme_zero(C_tcm[0]);
      for (int32_t k = 0; k < 6; ++k) {
        int32_t v_ = 200 - (by * 64);
        acme_xfer_in(A_tcm[0], (&(A[((by * 6144) + (k * 16))])), 96, ((64) < (v_) ? (64) : (v_)), 16);
        int32_t v__1 = 150 - (bx * 32);
        acme_xfer_in(B_tcm[0], (&(B[((k * 2400) + (bx * 32))])), 150, 16, ((32) < (v__1) ? (32) : (v__1)));
        acme_fence();
        acme_matmul_acc(C_tcm[0], A_tcm[0], B_tcm[0]);
      }
      int32_t v__2 = 200 - (by * 64);
      int32_t v__3 = 150 - (bx * 32);
      acme_xfer_out((&(C[((by * 9600) + (bx * 32))])), 150, 1, C_tcm[0], ((64) < (v__2) ? (64) : (v__2)), ((32) < (v__3) ? (32) : (v__3)));
      acme_fence();
      acme_release_all();
    }
  }
  return 0;
}

