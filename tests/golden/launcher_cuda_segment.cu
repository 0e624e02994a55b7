#include <stdint.h>
#include <cuda_runtime.h>
#include <tvm/ffi/c_api.h>
#include <tvm/ffi/extra/c_env_api.h>

typedef int (*st_call_t)(TVMFFIObjectHandle, TVMFFIAny*, int32_t, TVMFFIAny*);
typedef int (*st_set_stream_t)(int32_t, int32_t, TVMFFIStreamHandle, TVMFFIStreamHandle*);

static inline int64_t st_floordiv(int64_t a, int64_t b) { int64_t q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; }
static inline int64_t st_mod(int64_t a, int64_t b) { int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
static inline int64_t st_max(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t st_min(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t st_align(int64_t n) { return (st_max(n, INT64_C(1)) + INT64_C(255)) / INT64_C(256) * INT64_C(256); }

/* A strided box of up to 8 dimensions (sizes, and both sides' strides in elements). */
struct st_box {
  int64_t size[8], ds[8], ss[8];
  int rank;
};

/* dst[i...] = src[i...] over the box, one element per thread of a grid-stride loop. */
template <typename T>
__global__ void st_copy_kernel(char* dst, const char* src, st_box b, int64_t total) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = i, d = 0, s = 0;
    for (int k = b.rank - 1; k >= 0; --k) {
      int64_t c = r % b.size[k];
      r /= b.size[k];
      d += c * b.ds[k];
      s += c * b.ss[k];
    }
    ((T*)dst)[d] = ((const T*)src)[s];
  }
}

/* The box after merging the dimensions that are one run in both and dropping those of size 1 (as the cpu
   launcher's st_copy): one cudaMemcpyAsync where what is left is one contiguous run, else the copy kernel.
   0, or 2 (a CUDA error) or 3 (more than 8 dimensions left). */
static int st_copy(char* dst, const char* src, int rank, const int64_t* size0, const int64_t* ds0, const int64_t* ss0,
                   int64_t item, cudaStream_t stream) {
  st_box b;
  int r = 0;
  int64_t total = 1;
  for (int d = 0; d < rank; ++d) {
    if (size0[d] == 0) return 0;
    total *= size0[d];
    if (size0[d] == 1) continue;
    if (r > 0 && b.ds[r - 1] == size0[d] * ds0[d] && b.ss[r - 1] == size0[d] * ss0[d]) {
      b.size[r - 1] *= size0[d]; b.ds[r - 1] = ds0[d]; b.ss[r - 1] = ss0[d];
    } else if (r < 8) {
      b.size[r] = size0[d]; b.ds[r] = ds0[d]; b.ss[r] = ss0[d]; ++r;
    } else {
      return 3;
    }
  }
  b.rank = r;
  if (r == 0 || (r == 1 && b.ds[0] == 1 && b.ss[0] == 1))
    return cudaMemcpyAsync(dst, src, (size_t)(total * item), cudaMemcpyDeviceToDevice, stream) == cudaSuccess ? 0 : 2;
  int64_t blocks = st_min((total + 255) / 256, INT64_C(4096));
  switch (item) {
    case 1: st_copy_kernel<uint8_t><<<(unsigned)blocks, 256, 0, stream>>>(dst, src, b, total); break;
    case 2: st_copy_kernel<uint16_t><<<(unsigned)blocks, 256, 0, stream>>>(dst, src, b, total); break;
    case 4: st_copy_kernel<uint32_t><<<(unsigned)blocks, 256, 0, stream>>>(dst, src, b, total); break;
    case 8: st_copy_kernel<uint64_t><<<(unsigned)blocks, 256, 0, stream>>>(dst, src, b, total); break;
    default: return 3;
  }
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}

extern "C" int64_t septran_segment_arena(const int64_t* S) {
  (void)S;
  int64_t n = 0;
  n += st_align(INT64_C(192));
  return n;
}

extern "C" int32_t septran_segment(void* const* F, char* const* P, const int64_t* S, char* A, void* stream_, int32_t dev) {
  (void)P; (void)S; (void)A;
  cudaStream_t stream = (cudaStream_t)stream_;
  st_call_t call = (st_call_t)F[0];
  st_set_stream_t set_stream = (st_set_stream_t)F[1];
  (void)call;
  TVMFFIStreamHandle before = NULL;
  if (set_stream(kDLCUDA, dev, stream_, &before) != 0) return -1;
  int32_t rc = 0;
  int64_t at = 0;
  (void)at;
  char* T0 = A + at;
  at += st_align(INT64_C(192));
  (void)T0;
  {
    int64_t sh0[2] = {INT64_C(1), INT64_C(48)};
    int64_t st0[2] = {INT64_C(48), INT64_C(1)};
    DLTensor t0 = {(void*)(P[0] + INT64_C(0)), {kDLCUDA, dev}, 2, {2, 32, 1}, sh0, st0, 0};
    int64_t sh1[2] = {INT64_C(1), INT64_C(48)};
    int64_t st1[2] = {INT64_C(48), INT64_C(1)};
    DLTensor t1 = {(void*)(T0 + INT64_C(0)), {kDLCUDA, dev}, 2, {2, 32, 1}, sh1, st1, 0};
    TVMFFIAny a[2];
    a[0].type_index = kTVMFFIDLTensorPtr; a[0].zero_padding = 0; a[0].v_ptr = &t0;
    a[1].type_index = kTVMFFIDLTensorPtr; a[1].zero_padding = 0; a[1].v_ptr = &t1;
    TVMFFIAny res;
    res.type_index = kTVMFFINone; res.zero_padding = 0; res.v_int64 = 0;
    if (call(F[2], a, 2, &res) != 0) { rc = 1001; goto done; }
  }
  {
    const int64_t box[3][3] = {{INT64_C(3), INT64_C(1), INT64_C(16)}, {(INT64_C(16) * S[0]), INT64_C(16), INT64_C(1)}, {INT64_C(16), INT64_C(16), INT64_C(1)}};
    int e = st_copy((P[1] + (INT64_C(-64) + (INT64_C(64) * S[0]))), (T0 + INT64_C(0)), 3, box[0], box[1], box[2], 4, stream);
    if (e) { rc = 2000 + e; goto done; }
  }
  if (cudaMemsetAsync((P[2] + INT64_C(0)), 0, (size_t)INT64_C(192), stream) != cudaSuccess) { rc = 3002; goto done; }
  {
    int64_t sh0[3] = {INT64_C(3), S[0], INT64_C(16)};
    int64_t st0[3] = {(INT64_C(16) * S[0]), INT64_C(16), INT64_C(1)};
    DLTensor t0 = {(void*)(P[3] + INT64_C(0)), {kDLCUDA, dev}, 3, {4, 16, 1}, sh0, st0, 0};
    int64_t sh1[2] = {INT64_C(1), INT64_C(48)};
    int64_t st1[2] = {INT64_C(48), INT64_C(1)};
    DLTensor t1 = {(void*)(P[2] + INT64_C(0)), {kDLCUDA, dev}, 2, {2, 32, 1}, sh1, st1, 0};
    TVMFFIAny a[2];
    a[0].type_index = kTVMFFIDLTensorPtr; a[0].zero_padding = 0; a[0].v_ptr = &t0;
    a[1].type_index = kTVMFFIDLTensorPtr; a[1].zero_padding = 0; a[1].v_ptr = &t1;
    TVMFFIAny res;
    res.type_index = kTVMFFINone; res.zero_padding = 0; res.v_int64 = 0;
    if (call(F[3], a, 2, &res) != 0) { rc = 4001; goto done; }
  }
done:
  set_stream(kDLCUDA, dev, before, NULL);
  return rc;
}
