/* acme_npu.c -- the ACME NPU modelled in portable C11; the contract is acme_npu.h.
 *
 * Build: gcc -std=c11 -O2 -fPIC -c acme_npu.c   (no libm, no _Float16).
 * All device state lives in `npu`. Internal code never calls an exported function.
 *
 * Threads: each host thread has its own NPU (`npu` is thread-local: TCM, descriptor table,
 * transfer queue, error and reports), so kernels called from several threads at once (ctypes
 * releases Python's GIL) never see each other's tiles or handles, and the error a thread takes
 * is the one its kernel left. Only the debug setting is shared by the whole process.
 */
#include "acme_npu.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  int32_t live, addr, rows, cols, dtype;
} Desc;

typedef struct {
  int32_t inbound;
  Desc tile; /* a copy: the transfer outlives acme_release_all */
  unsigned char* global;
  int32_t stride, global_dtype, valid_rows, valid_cols;
} Xfer;

static _Thread_local struct {
  _Alignas(128) unsigned char tcm[ACME_TCM_BYTES];
  Desc desc[ACME_MAX_DESCRIPTORS + 1]; /* desc[h] for handle h; 0 is never a handle */
  Xfer xfers[ACME_XFER_QUEUE_DEPTH];
  int32_t nxfer;  /* queued, not performed */
  int32_t issued; /* since the last fence */
  int32_t first_error, later_errors;
  char text[256];
  int32_t violations;
  char violation_text[256];
} npu; /* zero-initialised per thread: no 128 KiB initialisation image */

/* the process's debug setting; -1: ACME_DEBUG not read yet */
static _Atomic int32_t debug_mode = -1;

/* ---- binary16 <-> binary32, round to nearest even ----------------------------------- */

static float f16_decode(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, bits;
  if (e == 0x1f) {
    bits = sign | 0x7f800000u | (m << 13);
  } else if (e) {
    bits = sign | ((e + 112) << 23) | (m << 13);
  } else if (!m) {
    bits = sign;
  } else {
    for (e = 113; !(m & 0x400u); e--) m <<= 1;
    bits = sign | (e << 23) | ((m & 0x3ffu) << 13);
  }
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static uint16_t f16_encode(float value) {
  uint32_t u;
  memcpy(&u, &value, sizeof u);
  uint32_t s = (u >> 16) & 0x8000u, e8 = (u >> 23) & 0xffu, m = u & 0x7fffffu, kept, dropped, halfway;
  int32_t e = (int32_t)e8 - 112;
  if (e8 == 0xff) return (uint16_t)(s | 0x7c00u | (m ? 0x200u | (m >> 13) : 0u));
  if (e >= 31) return (uint16_t)(s | 0x7c00u);
  if (e < -10) return (uint16_t)s;
  if (e > 0) {
    kept = ((uint32_t)e << 10) | (m >> 13);
    dropped = m & 0x1fffu;
    halfway = 0x1000u;
  } else {
    uint32_t shift = (uint32_t)(14 - e);
    kept = (m | 0x800000u) >> shift;
    dropped = (m | 0x800000u) & ((1u << shift) - 1);
    halfway = 1u << (shift - 1);
  }
  if (dropped > halfway || (dropped == halfway && (kept & 1u))) kept++;
  return (uint16_t)(s | kept);
}

static int32_t bytes_of(int32_t dtype) { return dtype == ACME_F16 ? 2 : dtype == ACME_F32 ? 4 : 0; }

static float get(const unsigned char* p, int32_t dtype) {
  if (dtype == ACME_F32) {
    float v;
    memcpy(&v, p, 4);
    return v;
  }
  uint16_t h;
  memcpy(&h, p, 2);
  return f16_decode(h);
}

static void put(unsigned char* p, int32_t dtype, float v) {
  if (dtype == ACME_F32) {
    memcpy(p, &v, 4);
  } else {
    uint16_t h = f16_encode(v);
    memcpy(p, &h, 2);
  }
}

/* ---- errors, debug reports ----------------------------------------------------------- */

static int32_t acme_error(int32_t code, const char* fmt, ...) {
  if (npu.first_error) {
    npu.later_errors++;
    return -code;
  }
  va_list args;
  va_start(args, fmt);
  vsnprintf(npu.text, sizeof npu.text, fmt, args);
  va_end(args);
  npu.first_error = code;
  return -code;
}

static int32_t debug_on(void) {
  int32_t on = debug_mode;
  if (on < 0) {
    const char* v = getenv("ACME_DEBUG");
    int32_t unread = -1;
    on = v != NULL && strcmp(v, "1") == 0;
    if (!atomic_compare_exchange_strong(&debug_mode, &unread, on)) on = debug_mode; /* set meanwhile */
  }
  return on;
}

static void violation(const char* fmt, ...) {
  if (npu.violations++) return;
  va_list args;
  va_start(args, fmt);
  vsnprintf(npu.violation_text, sizeof npu.violation_text, fmt, args);
  va_end(args);
  fprintf(stderr, "acme debug: %s\n", npu.violation_text);
}

static int64_t end_of(const Desc* d) { return (int64_t)d->addr + (int64_t)d->rows * d->cols * bytes_of(d->dtype); }

static int overlap(const Desc* a, const Desc* b) { return a->addr < end_of(b) && b->addr < end_of(a); }

/* Debug mode: `who` reads (writes == 0) or writes tile `d` (its operand `what`). */
static void hazard(const char* who, const char* what, const Desc* d, int writes) {
  if (!debug_on()) return;
  for (int32_t i = 0; i < npu.nxfer; i++) {
    const Xfer* x = &npu.xfers[i];
    if ((x->inbound || writes) && overlap(d, &x->tile)) {
      violation("%s %s TCM [%d, %lld) (%s) while an acme_xfer_%s [%d, %lld) is not fenced (no acme_fence)", who,
                writes ? "writes" : "reads", d->addr, (long long)end_of(d), what, x->inbound ? "in to" : "out from",
                x->tile.addr, (long long)end_of(&x->tile));
      return;
    }
  }
}

static const Desc* lookup(int32_t handle, const char* who, const char* what) {
  if (handle < 1 || handle > ACME_MAX_DESCRIPTORS || !npu.desc[handle].live) {
    acme_error(ACME_E_HANDLE, "%s: %s %d is not a live tile handle", who, what, handle);
    return NULL;
  }
  return &npu.desc[handle];
}

/* ---- descriptors ---------------------------------------------------------------------- */

int32_t acme_tile_desc(int32_t tcm_addr, int32_t rows, int32_t cols, int32_t dtype) {
  static const char who[] = "acme_tile_desc";
  int32_t size = bytes_of(dtype);
  if (!size) return acme_error(ACME_E_DTYPE, "%s: unknown dtype %d (1 = f16, 2 = f32)", who, dtype);
  if (rows <= 0 || cols <= 0) return acme_error(ACME_E_SHAPE, "%s: empty %dx%d tile", who, rows, cols);
  uint64_t bytes = (uint64_t)rows * (uint64_t)cols * (uint64_t)size; /* < 2^64 for int32 dims */
  if (tcm_addr < 0 || bytes > ACME_TCM_BYTES || tcm_addr + (int64_t)bytes > ACME_TCM_BYTES)
    return acme_error(ACME_E_RANGE, "%s: a %dx%d tile (%llu bytes) at %d exceeds the %d-byte TCM", who, rows, cols,
                      (unsigned long long)bytes, tcm_addr, ACME_TCM_BYTES);
  if (tcm_addr % size)
    return acme_error(ACME_E_ALIGN, "%s: TCM address %d is not aligned to %d-byte elements", who, tcm_addr, size);
  for (int32_t h = 1; h <= ACME_MAX_DESCRIPTORS; h++)
    if (!npu.desc[h].live) {
      npu.desc[h] = (Desc){1, tcm_addr, rows, cols, dtype};
      return h;
    }
  return acme_error(ACME_E_TABLE_FULL, "%s: all %d descriptors are in use (acme_release_all frees them)", who,
                    ACME_MAX_DESCRIPTORS);
}

/* ---- transfers ------------------------------------------------------------------------ */

static void move(const Xfer* x) {
  const Desc* d = &x->tile;
  int32_t ts = bytes_of(d->dtype), gs = bytes_of(x->global_dtype);
  int any = x->valid_rows > 0 && x->valid_cols > 0;
  if (x->inbound && !(any && x->valid_rows == d->rows && x->valid_cols == d->cols))
    memset(npu.tcm + d->addr, 0, (size_t)end_of(d) - (size_t)d->addr); /* zero fill, then the valid part */
  if (!any) return;
  for (int32_t r = 0; r < x->valid_rows; r++) {
    unsigned char* grow = x->global + (size_t)r * (size_t)x->stride * (size_t)gs;
    for (int32_t c = 0; c < x->valid_cols; c++) {
      unsigned char* t = npu.tcm + d->addr + ((size_t)c * (size_t)d->rows + (size_t)r) * (size_t)ts; /* column-major */
      if (x->inbound) put(t, d->dtype, get(grow + (size_t)c * (size_t)gs, x->global_dtype));
      else put(grow + (size_t)c * (size_t)gs, x->global_dtype, get(t, d->dtype));
    }
  }
}

static void drain(void) {
  for (int32_t i = 0; i < npu.nxfer; i++) move(&npu.xfers[i]);
  npu.nxfer = 0;
}

static int32_t queue(const char* who, Xfer x) {
  if (x.valid_rows < 0 || x.valid_cols < 0 || x.valid_rows > x.tile.rows || x.valid_cols > x.tile.cols)
    return acme_error(ACME_E_SHAPE, "%s: valid part %dx%d does not fit the %dx%d tile", who, x.valid_rows,
                      x.valid_cols, x.tile.rows, x.tile.cols);
  if (x.valid_rows > 0 && x.valid_cols > 0) {
    if (x.global == NULL) return acme_error(ACME_E_NULL, "%s: null global pointer", who);
    if (x.valid_rows > 1 && x.stride < x.valid_cols)
      return acme_error(ACME_E_SHAPE, "%s: row stride %d is less than the valid width %d", who, x.stride,
                        x.valid_cols);
  }
  hazard(who, x.inbound ? "destination" : "source", &x.tile, x.inbound);
  if (npu.nxfer == ACME_XFER_QUEUE_DEPTH) {
    if (debug_on())
      violation("%s: the transfer queue (%d) is full without an acme_fence; the engine drained it early", who,
                ACME_XFER_QUEUE_DEPTH);
    drain();
  }
  npu.xfers[npu.nxfer++] = x;
  npu.issued++;
  return ACME_OK;
}

int32_t acme_xfer_in(int32_t handle, void* src, int32_t src_row_stride, int32_t valid_rows, int32_t valid_cols) {
  const Desc* d = lookup(handle, "acme_xfer_in", "handle");
  if (!d) return -ACME_E_HANDLE;
  Xfer x = {1, *d, (unsigned char*)src, src_row_stride, d->dtype, valid_rows, valid_cols};
  return queue("acme_xfer_in", x);
}

int32_t acme_xfer_out(void* dst, int32_t dst_row_stride, int32_t dst_dtype, int32_t handle, int32_t valid_rows,
                      int32_t valid_cols) {
  if (!bytes_of(dst_dtype))
    return acme_error(ACME_E_DTYPE, "acme_xfer_out: unknown dtype %d (1 = f16, 2 = f32)", dst_dtype);
  const Desc* d = lookup(handle, "acme_xfer_out", "handle");
  if (!d) return -ACME_E_HANDLE;
  Xfer x = {0, *d, (unsigned char*)dst, dst_row_stride, dst_dtype, valid_rows, valid_cols};
  return queue("acme_xfer_out", x);
}

int32_t acme_fence(void) {
  drain();
  npu.issued = 0;
  return ACME_OK;
}

int32_t acme_pending(void) { return npu.issued; }

int32_t acme_release_all(void) {
  if (npu.issued && debug_on())
    violation("acme_release_all: %d transfer%s not fenced; the engine completed them", npu.issued,
              npu.issued == 1 ? " was" : "s were");
  drain();
  npu.issued = 0;
  memset(npu.desc, 0, sizeof npu.desc);
  return ACME_OK;
}

/* ---- engine --------------------------------------------------------------------------- */

int32_t acme_zero(int32_t handle) {
  const Desc* d = lookup(handle, "acme_zero", "handle");
  if (!d) return -ACME_E_HANDLE;
  hazard("acme_zero", "tile", d, 1);
  memset(npu.tcm + d->addr, 0, (size_t)end_of(d) - (size_t)d->addr);
  return ACME_OK;
}

int32_t acme_matmul_acc(int32_t acc, int32_t lhs, int32_t rhs) {
  static const char who[] = "acme_matmul_acc";
  const Desc *c = lookup(acc, who, "acc"), *a = c ? lookup(lhs, who, "lhs") : NULL, *b = a ? lookup(rhs, who, "rhs") : NULL;
  if (!b) return -ACME_E_HANDLE;
  if (c->dtype != ACME_F32) return acme_error(ACME_E_DTYPE, "%s: acc must be f32 (2), not %d", who, c->dtype);
  if (a->dtype != b->dtype)
    return acme_error(ACME_E_DTYPE, "%s: lhs (dtype %d) and rhs (dtype %d) differ", who, a->dtype, b->dtype);
  if (a->rows != c->rows || b->cols != c->cols || a->cols != b->rows)
    return acme_error(ACME_E_SHAPE, "%s: shapes disagree: acc %dx%d += lhs %dx%d @ rhs %dx%d", who, c->rows, c->cols,
                      a->rows, a->cols, b->rows, b->cols);
  const int32_t dims[3] = {c->rows, c->cols, a->cols}, unit[3] = {ACME_MXU_M, ACME_MXU_N, ACME_MXU_K};
  for (int i = 0; i < 3; i++)
    if (dims[i] % unit[i])
      return acme_error(ACME_E_MXU_SHAPE, "%s: %c=%d is not a multiple of the MXU's %d (it takes %dx%dx%d)", who,
                        "MNK"[i], dims[i], unit[i], ACME_MXU_M, ACME_MXU_N, ACME_MXU_K);
  if (overlap(c, a) || overlap(c, b))
    return acme_error(ACME_E_ALIAS, "%s: acc overlaps %s in the TCM", who, overlap(c, a) ? "lhs" : "rhs");
  hazard(who, "lhs", a, 0);
  hazard(who, "rhs", b, 0);
  hazard(who, "acc", c, 1);

  /* column-major: acc[:, j] += lhs[:, p] * rhs[p, j], 32 rows of a column at a time */
  int32_t M = c->rows, N = c->cols, K = a->cols;
  size_t es = (size_t)bytes_of(a->dtype);
  const unsigned char *x = npu.tcm + a->addr, *y = npu.tcm + b->addr;
  unsigned char* out = npu.tcm + c->addr;
  float col[ACME_MXU_M];
  for (int32_t j = 0; j < N; j++)
    for (int32_t i0 = 0; i0 < M; i0 += ACME_MXU_M) {
      unsigned char* o = out + ((size_t)j * (size_t)M + (size_t)i0) * 4;
      for (int i = 0; i < ACME_MXU_M; i++) col[i] = get(o + (size_t)i * 4, ACME_F32);
      for (int32_t p = 0; p < K; p++) {
        float yv = get(y + ((size_t)j * (size_t)K + (size_t)p) * es, b->dtype);
        const unsigned char* xp = x + ((size_t)p * (size_t)M + (size_t)i0) * es;
        for (int i = 0; i < ACME_MXU_M; i++) col[i] += get(xp + (size_t)i * es, a->dtype) * yv;
      }
      for (int i = 0; i < ACME_MXU_M; i++) put(o + (size_t)i * 4, ACME_F32, col[i]);
    }
  return ACME_OK;
}

/* ---- host side ------------------------------------------------------------------------ */

int32_t acme_take_error(char* buf, int32_t len) {
  int32_t code = npu.first_error;
  if (buf != NULL && len > 0) {
    if (code && npu.later_errors)
      snprintf(buf, (size_t)len, "%s (and %d later error%s)", npu.text, npu.later_errors,
               npu.later_errors == 1 ? "" : "s");
    else
      snprintf(buf, (size_t)len, "%s", code ? npu.text : "");
  }
  npu.first_error = npu.later_errors = 0;
  npu.text[0] = '\0';
  return code;
}

int32_t acme_set_debug(int32_t on) {
  int32_t previous = debug_on();
  debug_mode = on != 0;
  return previous;
}

int32_t acme_take_violations(char* buf, int32_t len) {
  int32_t count = npu.violations;
  if (buf != NULL && len > 0) snprintf(buf, (size_t)len, "%s", count ? npu.violation_text : "");
  npu.violations = 0;
  npu.violation_text[0] = '\0';
  return count;
}

int32_t acme_debug_violations(void) {
  int32_t count = npu.violations;
  npu.violations = 0;
  npu.violation_text[0] = '\0';
  return count;
}

void acme_reset(void) { memset(&npu, 0, sizeof npu); }
