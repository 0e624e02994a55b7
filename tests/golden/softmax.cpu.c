// tilelang target: {"kind":"c","tag":"","keys":["cpu"],"host":{"kind":"c","tag":"","keys":["cpu"]}}
#include <tl_templates/cpp/common.h>

#ifdef __cplusplus
extern "C"
#endif
int32_t softmax_kernel(float* X, float* Y);
#ifdef __cplusplus
extern "C"
#endif
int32_t septran_cpu_fill_zero_f32(float*, int64_t, int64_t, int64_t);
#ifdef __cplusplus
extern "C"
#endif
int32_t septran_cpu_load_f32_f32(float*, float*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
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
float expf(float);
#ifdef __cplusplus
extern "C"
#endif
int32_t septran_cpu_reduce_sum_f32(float*, float*, int64_t, int64_t, int64_t, int32_t);
#ifdef __cplusplus
extern "C"
#endif
float expf(float);
#ifdef __cplusplus
extern "C"
#endif
int32_t softmax_kernel(float* X, float* Y) {
  float m[1];
  float l[1];
  float m_prev[1];
  float S[1024];
  #pragma omp parallel for collapse(1) schedule(static) private(m, l, m_prev, S)
  for (int64_t bx = (int64_t)0; bx < (int64_t)8; ++bx) {
    m[(int64_t)0] = -INFINITY;
    septran_cpu_fill_zero_f32((&(l[0])), (int64_t)1, (int64_t)1, (int64_t)1);
    septran_cpu_load_f32_f32((&(m_prev[0])), (&(m[0])), (int64_t)1, (int64_t)1, (int64_t)1, (int64_t)1, (int64_t)1, (int64_t)1);
    for (int64_t j = (int64_t)0; j < (int64_t)1024; ++j) {
      float condval;
      if ((j < (int64_t)300)) {
        condval = X[((bx * (int64_t)300) + j)];
      } else {
        condval = -INFINITY;
      }
      S[j] = condval;
    }
    septran_cpu_reduce_max_f32((&(m[0])), (&(S[0])), (int64_t)1, (int64_t)1024, (int64_t)1024, 0);
    l[(int64_t)0] = (l[(int64_t)0] * expf((m_prev[(int64_t)0] - m[(int64_t)0])));
    for (int64_t j_1 = (int64_t)0; j_1 < (int64_t)1024; ++j_1) {
      S[j_1] = expf((S[j_1] - m[(int64_t)0]));
    }
    septran_cpu_reduce_sum_f32((&(m_prev[0])), (&(S[0])), (int64_t)1, (int64_t)1024, (int64_t)1024, 1);
    l[(int64_t)0] = (l[(int64_t)0] + m_prev[(int64_t)0]);
    for (int64_t j_2 = (int64_t)0; j_2 < (int64_t)300; ++j_2) {
      Y[((bx * (int64_t)300) + j_2)] = (expf((X[((bx * (int64_t)300) + j_2)] - m[(int64_t)0])) / l[(int64_t)0]);
    }
  }
  return 0;
}

