/* ACME NPU, modelled in C (see acme_npu.h). */
#include "acme_npu.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  int32_t addr, rows, cols, dtype;
} Desc;

typedef struct {
  int32_t inbound, handle, stride, global_dtype, valid_rows, valid_cols;
  void* global;
} Xfer;

enum { XFER_SLOTS = 32 };

static struct {
  unsigned char tcm[ACME_TCM_BYTES];
  Desc desc[ACME_MAX_DESCRIPTORS + 1]; /* handle 0 is never valid */
  int32_t ndesc;
  Xfer xfers[XFER_SLOTS];
  int32_t nxfer;
  int32_t in_flight[ACME_MAX_DESCRIPTORS + 1]; /* unfenced transfers per handle */
  int32_t first_error;
  char text[256];
  int32_t debug, debug_known, violations;
} npu;

static int32_t acme_error(int32_t code, const char* fmt, ...) {
  if (npu.first_error == 0) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(npu.text, sizeof npu.text, fmt, args);
    va_end(args);
    npu.first_error = code;
  }
  return -code;
}

static int32_t bytes_of(int32_t dtype) {
  switch (dtype) {
    case ACME_F16: return 2;
    case ACME_F32: return 4;
    default: return 0;
  }
}

/* binary16 <-> binary32, round to nearest even */
static float f16_decode(uint16_t bits) {
  int32_t e = (bits >> 10) & 0x1f, m = bits & 0x3ff;
  float mag = e == 0 ? ldexpf((float)m, -24) : (e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(0x400 + m), e - 25));
  return (bits & 0x8000) ? -mag : mag;
}

static uint16_t f16_encode(float value) {
  uint32_t u;
  memcpy(&u, &value, sizeof u);
  uint16_t s = (uint16_t)((u >> 16) & 0x8000);
  int32_t e8 = (int32_t)((u >> 23) & 0xff), e = e8 - 112;
  uint32_t m = u & 0x7fffff;
  if (e8 == 0xff) return s | 0x7c00 | (m ? 0x200 : 0);
  if (e >= 31) return s | 0x7c00;
  if (e < -10) return s;
  uint32_t full = m | (e8 ? 0x800000u : 0), shift = (uint32_t)(e > 0 ? 13 : 14 - e);
  uint32_t kept = e > 0 ? (((uint32_t)e << 10) | (m >> 13)) : (full >> shift);
  uint32_t dropped = (e > 0 ? m : full) & ((1u << shift) - 1), halfway = 1u << (shift - 1);
  if (dropped > halfway || (dropped == halfway && (kept & 1))) kept++;
  return s | (uint16_t)kept;
}

static float get(const void* p, int32_t dtype, long i) {
  return dtype == ACME_F32 ? ((const float*)p)[i] : f16_decode(((const uint16_t*)p)[i]);
}

static void put(void* p, int32_t dtype, long i, float v) {
  if (dtype == ACME_F32) ((float*)p)[i] = v;
  else ((uint16_t*)p)[i] = f16_encode(v);
}

static int debug_on(void) {
  if (!npu.debug_known) {
    const char* v = getenv("ACME_DEBUG");
    npu.debug = v != NULL && strcmp(v, "1") == 0;
    npu.debug_known = 1;
  }
  return npu.debug;
}

static Desc* lookup(int32_t handle, const char* who) {
  if (handle < 1 || handle > npu.ndesc) {
    acme_error(10, "%s: %d is not a live tile handle", who, handle);
    return NULL;
  }
  return &npu.desc[handle];
}

/* An engine access to a tile: in debug mode, one that an unfenced transfer still moves is a violation. */
static void engine_access(int32_t handle, const char* who) {
  if (debug_on() && npu.in_flight[handle]) {
    if (npu.violations == 0)
      fprintf(stderr, "acme debug: %s uses tile %d before acme_fence() completed its transfer\n", who, handle);
    npu.violations++;
  }
}

int32_t acme_tile_desc(int32_t tcm_addr, int32_t rows, int32_t cols, int32_t dtype) {
  if (!bytes_of(dtype)) return acme_error(11, "acme_tile_desc: unknown dtype %d", dtype);
  long size = (long)rows * cols * bytes_of(dtype);
  if (rows <= 0 || cols <= 0 || tcm_addr < 0 || tcm_addr + size > ACME_TCM_BYTES)
    return acme_error(12, "acme_tile_desc: a %dx%d tile at %d exceeds the %d-byte TCM", rows, cols, tcm_addr,
                      ACME_TCM_BYTES);
  if (npu.ndesc == ACME_MAX_DESCRIPTORS)
    return acme_error(13, "acme_tile_desc: all %d descriptors are in use", ACME_MAX_DESCRIPTORS);
  npu.desc[++npu.ndesc] = (Desc){tcm_addr, rows, cols, dtype};
  return npu.ndesc;
}

static void move(const Xfer* x) {
  const Desc* d = &npu.desc[x->handle];
  void* tile = npu.tcm + d->addr;
  for (int32_t c = 0; c < d->cols; c++)
    for (int32_t r = 0; r < d->rows; r++) {
      long t = (long)c * d->rows + r, g = (long)r * x->stride + c; /* TCM is column-major */
      int inside = r < x->valid_rows && c < x->valid_cols;
      if (x->inbound) put(tile, d->dtype, t, inside ? get(x->global, x->global_dtype, g) : 0.0f);
      else if (inside) put(x->global, x->global_dtype, g, get(tile, d->dtype, t));
    }
}

int32_t acme_fence(void) {
  for (int32_t i = 0; i < npu.nxfer; i++) {
    move(&npu.xfers[i]);
    npu.in_flight[npu.xfers[i].handle]--;
  }
  npu.nxfer = 0;
  return 0;
}

static int32_t queue(Xfer x, const char* who) {
  const Desc* d = lookup(x.handle, who);
  if (!d) return -10;
  if (!bytes_of(x.global_dtype)) return acme_error(11, "%s: unknown dtype %d", who, x.global_dtype);
  if (x.valid_rows < 0 || x.valid_rows > d->rows || x.valid_cols < 0 || x.valid_cols > d->cols)
    return acme_error(14, "%s: valid part %dx%d exceeds the %dx%d tile", who, x.valid_rows, x.valid_cols, d->rows,
                      d->cols);
  if (npu.nxfer == XFER_SLOTS) acme_fence();
  npu.xfers[npu.nxfer++] = x;
  npu.in_flight[x.handle]++;
  return 0;
}

int32_t acme_xfer_in(int32_t handle, void* src, int32_t src_row_stride, int32_t valid_rows, int32_t valid_cols) {
  const Desc* d = lookup(handle, "acme_xfer_in");
  if (!d) return -10;
  Xfer x = {1, handle, src_row_stride, d->dtype, valid_rows, valid_cols, src};
  return queue(x, "acme_xfer_in");
}

int32_t acme_xfer_out(void* dst, int32_t dst_row_stride, int32_t dst_dtype, int32_t handle, int32_t valid_rows,
                      int32_t valid_cols) {
  Xfer x = {0, handle, dst_row_stride, dst_dtype, valid_rows, valid_cols, dst};
  return queue(x, "acme_xfer_out");
}

int32_t acme_zero(int32_t handle) {
  const Desc* d = lookup(handle, "acme_zero");
  if (!d) return -10;
  engine_access(handle, "acme_zero");
  memset(npu.tcm + d->addr, 0, (size_t)d->rows * d->cols * bytes_of(d->dtype));
  return 0;
}

int32_t acme_matmul_acc(int32_t acc, int32_t lhs, int32_t rhs) {
  const Desc *c = lookup(acc, "acme_matmul_acc"), *a = lookup(lhs, "acme_matmul_acc"), *b = lookup(rhs, "acme_matmul_acc");
  if (!c || !a || !b) return -10;
  if (c->dtype != ACME_F32 || a->dtype != b->dtype)
    return acme_error(15, "acme_matmul_acc: the accumulator must be f32 and lhs, rhs one dtype");
  if (a->rows != c->rows || b->cols != c->cols || a->cols != b->rows)
    return acme_error(16, "acme_matmul_acc: shapes %dx%d += %dx%d @ %dx%d do not agree", c->rows, c->cols, a->rows,
                      a->cols, b->rows, b->cols);
  if (c->rows % ACME_MXU_M || c->cols % ACME_MXU_N || a->cols % ACME_MXU_K)
    return acme_error(17, "acme_matmul_acc: %dx%dx%d is not a multiple of the MXU's %dx%dx%d", c->rows, c->cols,
                      a->cols, ACME_MXU_M, ACME_MXU_N, ACME_MXU_K);
  engine_access(lhs, "acme_matmul_acc");
  engine_access(rhs, "acme_matmul_acc");
  engine_access(acc, "acme_matmul_acc");
  float* out = (float*)(npu.tcm + c->addr);
  const void *x = npu.tcm + a->addr, *y = npu.tcm + b->addr;
  for (int32_t j = 0; j < c->cols; j++)
    for (int32_t p = 0; p < a->cols; p++) {
      float yv = get(y, b->dtype, (long)j * b->rows + p);
      for (int32_t i = 0; i < c->rows; i++) out[(long)j * c->rows + i] += get(x, a->dtype, (long)p * a->rows + i) * yv;
    }
  return 0;
}

int32_t acme_release_all(void) {
  if (npu.nxfer) acme_fence(); /* descriptors of tiles in flight stay valid until their transfers finish */
  npu.ndesc = 0;
  memset(npu.in_flight, 0, sizeof npu.in_flight);
  return 0;
}

int32_t acme_take_error(char* buf, int32_t len) {
  int32_t code = npu.first_error;
  if (buf != NULL && len > 0) snprintf(buf, (size_t)len, "%s", code ? npu.text : "");
  npu.first_error = 0;
  return code;
}

void acme_set_debug(int32_t on) {
  npu.debug = on ? 1 : 0;
  npu.debug_known = 1;
}

int32_t acme_debug_violations(void) {
  int32_t count = npu.violations;
  npu.violations = 0;
  return count;
}

void acme_reset(void) { memset(&npu, 0, sizeof npu); }
