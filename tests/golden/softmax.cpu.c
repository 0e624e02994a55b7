// tilelang target: {"kind":"c","tag":"","keys":["cpu"],"host":{"kind":"c","tag":"","keys":["cpu"]}}
#include <tl_templates/cpp/common.h>

#ifdef __cplusplus
extern "C"
#endif
int32_t softmax_cached_kernel(float* X, float* Y);
#ifdef __cplusplus
extern "C"
#endif
int32_t septran_cpu_fill_zero_f32(float*, int64_t, int64_t, int64_t);
#ifdef __cplusplus
extern "C"
#endif
int32_t septran_cpu_reduce_max_f32(float*, float*, int64_t, int64_t, int64_t, int32_t);
#ifdef __cplusplus
extern "C"
#endif
float expf(float);
#ifdef __cplusplus
extern "C"
#endif
int32_t septran_cpu_reduce_sum_f32(float*, float*, int64_t, int64_t, int64_t, int32_t);
#ifdef __cplusplus
extern "C"
#endif
int32_t softmax_cached_kernel(float* X, float* Y) {
  float m[1];
  float l[1];
  float s[1];
  for (int64_t bx = (int64_t)0; bx < (int64_t)8; ++bx) {
    m[(int64_t)0] = -INFINITY;
    septran_cpu_fill_zero_f32((&(l[0])), (int64_t)1, (int64_t)1, (int64_t)1);
    septran_cpu_reduce_max_f32((&(m[0])), (&(X[(bx * (int64_t)300)])), (int64_t)1, (int64_t)300, (int64_t)300, 0);
    for (int64_t b = (int64_t)0; b < (int64_t)300; ++b) {
      Y[((bx * (int64_t)300) + b)] = expf((X[((bx * (int64_t)300) + b)] - m[(int64_t)0]));
    }
    septran_cpu_reduce_sum_f32((&(s[0])), (&(Y[(bx * (int64_t)300)])), (int64_t)1, (int64_t)300, (int64_t)300, 1);
    l[(int64_t)0] = (l[(int64_t)0] + s[(int64_t)0]);
    l[(int64_t)0] = (1.000000e+00f / l[(int64_t)0]);
    for (int64_t b_1 = (int64_t)0; b_1 < (int64_t)300; ++b_1) {
      Y[((bx * (int64_t)300) + b_1)] = (Y[((bx * (int64_t)300) + b_1)] * l[(int64_t)0]);
    }
  }
  return 0;
}

