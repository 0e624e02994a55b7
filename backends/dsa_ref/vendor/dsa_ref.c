/* dsa_ref.c -- the reference DSA modelled in portable C11; the contract is dsa_ref.h.
 *
 * Build: gcc -std=c11 -O2 -fPIC -c dsa_ref.c   (no libm, no _Float16).
 * All device state lives in `dev`. Internal code never calls an exported function, so a
 * second copy of this library loaded into the same process cannot interpose on it.
 *
 * Threads: each host thread has its own device (`dev` is thread-local: scratchpad, DMA queue,
 * error and reports), so kernels called from several threads at once (ctypes releases Python's
 * GIL) never see each other's tiles, and the error a thread takes is the one its kernel left.
 * Only the debug setting is shared by the whole process.
 */
#include "dsa_ref.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  int32_t is_load;
  unsigned char* global;
  int32_t global_dtype, spad, spad_dtype, rows, cols, ld, valid_rows, valid_cols;
} Transfer;

static _Thread_local struct {
  _Alignas(64) unsigned char spad[DSA_REF_SCRATCH_BYTES];
  Transfer queue[DSA_REF_DMA_QUEUE_DEPTH];
  int32_t queued; /* transfers in queue[], not yet performed */
  int32_t issued; /* transfers issued since the last dsa_ref_sync (queued or drained early) */
  int32_t error, later_errors;
  char error_text[256];
  int32_t violations;
  char violation_text[256];
} dev; /* zero-initialised per thread: no 256 KiB initialisation image */

/* the process's debug setting; -1: DSA_REF_DEBUG not read yet */
static _Atomic int32_t debug_mode = -1;

/* ---- IEEE binary16 <-> binary32, round to nearest even ------------------------------ */

static float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13); /* inf, NaN (payload kept) */
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else { /* subnormal: man * 2^-24, normalise */
    exp = 113;
    while (!(man & 0x400u)) {
      man <<= 1;
      exp--;
    }
    bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static uint16_t float_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  uint32_t fexp = (x >> 23) & 0xffu, man = x & 0x7fffffu, kept, rest, mid;
  if (fexp == 0xff) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0u));
  int32_t exp = (int32_t)fexp - 112; /* the binary16 exponent field, if the result is normal */
  if (exp >= 31) return (uint16_t)(sign | 0x7c00u);
  if (exp < -10) return sign; /* below half of the smallest subnormal: +-0 */
  if (exp > 0) {
    kept = ((uint32_t)exp << 10) | (man >> 13);
    rest = man & 0x1fffu;
    mid = 0x1000u;
  } else { /* subnormal result */
    uint32_t shift = (uint32_t)(14 - exp);
    man |= 0x800000u;
    kept = man >> shift;
    rest = man & ((1u << shift) - 1);
    mid = 1u << (shift - 1);
  }
  if (rest > mid || (rest == mid && (kept & 1u))) kept++; /* a carry into the exponent is right */
  return (uint16_t)(sign | kept);
}

static int32_t elem_size(int32_t dtype) { return dtype == DSA_REF_F32 ? 4 : dtype == DSA_REF_F16 ? 2 : 0; }

static float get(const unsigned char* p, int32_t dtype) {
  if (dtype == DSA_REF_F32) {
    float v;
    memcpy(&v, p, 4);
    return v;
  }
  uint16_t h;
  memcpy(&h, p, 2);
  return half_to_float(h);
}

static void put(unsigned char* p, int32_t dtype, float v) {
  if (dtype == DSA_REF_F32) {
    memcpy(p, &v, 4);
  } else {
    uint16_t h = float_to_half(v);
    memcpy(p, &h, 2);
  }
}

/* n elements, converting dtype when the two differ */
static void copy_row(unsigned char* dst, int32_t dst_dtype, const unsigned char* src, int32_t src_dtype, int32_t n) {
  if (dst_dtype == src_dtype) {
    memcpy(dst, src, (size_t)n * (size_t)elem_size(src_dtype));
    return;
  }
  int32_t ds = elem_size(dst_dtype), ss = elem_size(src_dtype);
  for (int32_t i = 0; i < n; i++) put(dst + (size_t)i * ds, dst_dtype, get(src + (size_t)i * ss, src_dtype));
}

/* ---- errors and debug reports ------------------------------------------------------- */

static int32_t fail(int32_t code, const char* fmt, ...) {
  if (dev.error) {
    dev.later_errors++;
    return code;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(dev.error_text, sizeof dev.error_text, fmt, ap);
  va_end(ap);
  dev.error = code;
  return code;
}

static int32_t debugging(void) {
  int32_t on = debug_mode;
  if (on < 0) {
    const char* env = getenv("DSA_REF_DEBUG");
    int32_t unread = -1;
    on = env != NULL && strcmp(env, "1") == 0;
    if (!atomic_compare_exchange_strong(&debug_mode, &unread, on)) on = debug_mode; /* set meanwhile */
  }
  return on;
}

static void violation(const char* fmt, ...) {
  if (dev.violations++) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(dev.violation_text, sizeof dev.violation_text, fmt, ap);
  va_end(ap);
  fprintf(stderr, "dsa_ref debug: %s\n", dev.violation_text);
}

static int64_t tile_bytes(int32_t dtype, int32_t rows, int32_t cols) {
  return (int64_t)rows * cols * elem_size(dtype);
}

/* Debug mode: `who` reads (writes == 0) or writes scratchpad bytes [lo, hi) of its operand `what`. */
static void hazard(const char* who, const char* what, int64_t lo, int64_t hi, int writes) {
  if (!debugging()) return;
  for (int32_t i = 0; i < dev.queued; i++) {
    const Transfer* t = &dev.queue[i];
    int64_t tlo = t->spad, thi = tlo + tile_bytes(t->spad_dtype, t->rows, t->cols);
    if ((t->is_load || writes) && lo < thi && tlo < hi) {
      violation("%s %s scratchpad [%lld, %lld) (%s) while a %s [%lld, %lld) is not synchronised (no dsa_ref_sync)",
                who, writes ? "writes" : "reads", (long long)lo, (long long)hi, what,
                t->is_load ? "dsa_ref_dma_load to" : "dsa_ref_dma_store from", (long long)tlo, (long long)thi);
      return;
    }
  }
}

/* ---- argument checks (a failing call has no effect) --------------------------------- */

static int32_t check_bytes(const char* who, const char* what, int32_t addr, int64_t bytes, int32_t align) {
  if (addr < 0 || (int64_t)addr + bytes > DSA_REF_SCRATCH_BYTES)
    return fail(DSA_REF_E_RANGE, "%s: %s of %lld bytes at offset %d exceeds the %d-byte scratchpad", who, what,
                (long long)bytes, addr, DSA_REF_SCRATCH_BYTES);
  if (addr % align)
    return fail(DSA_REF_E_ALIGN, "%s: %s at offset %d is not aligned to its %d-byte elements", who, what, addr, align);
  return DSA_REF_OK;
}

static int32_t check_tile(const char* who, const char* what, int32_t addr, int32_t dtype, int32_t rows, int32_t cols) {
  if (!elem_size(dtype))
    return fail(DSA_REF_E_DTYPE, "%s: unknown dtype code %d for %s (0 = float32, 1 = float16)", who, dtype, what);
  if (rows <= 0 || cols <= 0) return fail(DSA_REF_E_SHAPE, "%s: %s is an empty %dx%d tile", who, what, rows, cols);
  uint64_t bytes = (uint64_t)rows * (uint64_t)cols * (uint64_t)elem_size(dtype); /* < 2^64 for int32 dims */
  if (bytes > DSA_REF_SCRATCH_BYTES)
    return fail(DSA_REF_E_RANGE, "%s: %s of %llu bytes at offset %d exceeds the %d-byte scratchpad", who, what,
                (unsigned long long)bytes, addr, DSA_REF_SCRATCH_BYTES);
  return check_bytes(who, what, addr, (int64_t)bytes, elem_size(dtype));
}

static int32_t check_transfer(const char* who, const Transfer* t) {
  if (!elem_size(t->global_dtype))
    return fail(DSA_REF_E_DTYPE, "%s: unknown dtype code %d (0 = float32, 1 = float16)", who, t->global_dtype);
  int32_t err = check_tile(who, "tile", t->spad, t->spad_dtype, t->rows, t->cols);
  if (err) return err;
  if (t->valid_rows < 0 || t->valid_cols < 0 || t->valid_rows > t->rows || t->valid_cols > t->cols)
    return fail(DSA_REF_E_SHAPE, "%s: valid part %dx%d does not fit the %dx%d tile", who, t->valid_rows,
                t->valid_cols, t->rows, t->cols);
  if (t->valid_rows > 0 && t->valid_cols > 0) {
    if (t->global == NULL) return fail(DSA_REF_E_NULL, "%s: null global pointer", who);
    if (t->valid_rows > 1 && t->ld < t->valid_cols)
      return fail(DSA_REF_E_SHAPE, "%s: row stride %d is less than the valid width %d", who, t->ld, t->valid_cols);
  }
  return DSA_REF_OK;
}

/* ---- the DMA engine ------------------------------------------------------------------ */

static void perform(const Transfer* t) {
  int32_t ss = elem_size(t->spad_dtype), gs = elem_size(t->global_dtype);
  int any = t->valid_rows > 0 && t->valid_cols > 0;
  for (int32_t r = 0; r < t->rows; r++) {
    unsigned char* row = dev.spad + t->spad + (size_t)r * t->cols * ss;
    unsigned char* grow = any && r < t->valid_rows ? t->global + (size_t)r * t->ld * gs : NULL;
    if (t->is_load) {
      int32_t done = grow ? t->valid_cols : 0; /* the valid part, then zeros */
      if (grow) copy_row(row, t->spad_dtype, grow, t->global_dtype, done);
      memset(row + (size_t)done * ss, 0, (size_t)(t->cols - done) * ss);
    } else if (grow) {
      copy_row(grow, t->global_dtype, row, t->spad_dtype, t->valid_cols);
    }
  }
}

static void drain(void) {
  for (int32_t i = 0; i < dev.queued; i++) perform(&dev.queue[i]);
  dev.queued = 0;
}

static int32_t enqueue(const char* who, Transfer t) {
  int32_t err = check_transfer(who, &t);
  if (err) return err;
  hazard(who, t.is_load ? "destination" : "source", t.spad, t.spad + tile_bytes(t.spad_dtype, t.rows, t.cols),
         t.is_load);
  if (dev.queued == DSA_REF_DMA_QUEUE_DEPTH) {
    if (debugging())
      violation("%s: the DMA queue (%d transfers) is full without a dsa_ref_sync; the engine drained it early", who,
                DSA_REF_DMA_QUEUE_DEPTH);
    drain();
  }
  dev.queue[dev.queued++] = t;
  dev.issued++;
  return DSA_REF_OK;
}

int32_t dsa_ref_dma_load(int32_t spad_dst, void* src, int32_t dtype, int32_t rows, int32_t cols, int32_t src_ld,
                         int32_t valid_rows, int32_t valid_cols) {
  Transfer t = {1, (unsigned char*)src, dtype, spad_dst, dtype, rows, cols, src_ld, valid_rows, valid_cols};
  return enqueue("dsa_ref_dma_load", t);
}

int32_t dsa_ref_dma_store(void* dst, int32_t dst_dtype, int32_t spad_src, int32_t src_dtype, int32_t rows,
                          int32_t cols, int32_t dst_ld, int32_t valid_rows, int32_t valid_cols) {
  Transfer t = {0, (unsigned char*)dst, dst_dtype, spad_src, src_dtype, rows, cols, dst_ld, valid_rows, valid_cols};
  return enqueue("dsa_ref_dma_store", t);
}

int32_t dsa_ref_sync(void) {
  drain();
  dev.issued = 0;
  return DSA_REF_OK;
}

int32_t dsa_ref_pending(void) { return dev.issued; }

/* ---- compute ------------------------------------------------------------------------- */

static int32_t zero_bytes(const char* who, int32_t spad, int64_t bytes, int32_t align) {
  int32_t err = check_bytes(who, "tile", spad, bytes, align);
  if (err) return err;
  hazard(who, "tile", spad, spad + bytes, 1);
  memset(dev.spad + spad, 0, (size_t)bytes);
  return DSA_REF_OK;
}

int32_t dsa_ref_fill_zero(int32_t spad, int32_t dtype, int32_t rows, int32_t cols) {
  int32_t err = check_tile("dsa_ref_fill_zero", "tile", spad, dtype, rows, cols);
  return err ? err : zero_bytes("dsa_ref_fill_zero", spad, tile_bytes(dtype, rows, cols), elem_size(dtype));
}

int32_t dsa_ref_fill_zero_bytes(int32_t spad, int32_t bytes) {
  if (bytes < 0) return fail(DSA_REF_E_SHAPE, "dsa_ref_fill_zero_bytes: negative size %d", bytes);
  return zero_bytes("dsa_ref_fill_zero_bytes", spad, bytes, 1);
}

int32_t dsa_ref_mma(int32_t spad_c, int32_t spad_a, int32_t spad_b, int32_t in_dtype, int32_t m, int32_t n,
                    int32_t k) {
  static const char who[] = "dsa_ref_mma";
  const int32_t dims[3] = {m, n, k}, unit[3] = {DSA_REF_MMA_M, DSA_REF_MMA_N, DSA_REF_MMA_K};
  for (int d = 0; d < 3; d++)
    if (dims[d] <= 0 || dims[d] % unit[d])
      return fail(DSA_REF_E_MMA_SHAPE, "%s: %c=%d is not a %smultiple of the matrix unit's %d", who, "mnk"[d],
                  dims[d], dims[d] <= 0 ? "positive " : "", unit[d]);
  int32_t err = check_tile(who, "A", spad_a, in_dtype, m, k);
  if (!err) err = check_tile(who, "B", spad_b, in_dtype, k, n);
  if (!err) err = check_tile(who, "C", spad_c, DSA_REF_F32, m, n);
  if (err) return err;
  int64_t a_hi = spad_a + tile_bytes(in_dtype, m, k), b_hi = spad_b + tile_bytes(in_dtype, k, n);
  int64_t c_hi = spad_c + tile_bytes(DSA_REF_F32, m, n);
  if ((spad_c < a_hi && spad_a < c_hi) || (spad_c < b_hi && spad_b < c_hi))
    return fail(DSA_REF_E_ALIAS, "%s: C [%d, %lld) overlaps %s", who, spad_c, (long long)c_hi,
                spad_c < a_hi && spad_a < c_hi ? "A" : "B");
  hazard(who, "A", spad_a, a_hi, 0);
  hazard(who, "B", spad_b, b_hi, 0);
  hazard(who, "C", spad_c, c_hi, 1);

  /* the unit works block by block: a 16x16 float32 accumulator, 16x16 operand blocks */
  const unsigned char *a = dev.spad + spad_a, *b = dev.spad + spad_b;
  unsigned char* c = dev.spad + spad_c;
  size_t es = (size_t)elem_size(in_dtype);
  float acc[DSA_REF_MMA_M][DSA_REF_MMA_N], ta[DSA_REF_MMA_M][DSA_REF_MMA_K], tb[DSA_REF_MMA_K][DSA_REF_MMA_N];
  for (int32_t i0 = 0; i0 < m; i0 += DSA_REF_MMA_M)
    for (int32_t j0 = 0; j0 < n; j0 += DSA_REF_MMA_N) {
      for (int i = 0; i < DSA_REF_MMA_M; i++)
        for (int j = 0; j < DSA_REF_MMA_N; j++) acc[i][j] = get(c + ((size_t)(i0 + i) * n + j0 + j) * 4, DSA_REF_F32);
      for (int32_t p0 = 0; p0 < k; p0 += DSA_REF_MMA_K) {
        for (int i = 0; i < DSA_REF_MMA_M; i++)
          for (int p = 0; p < DSA_REF_MMA_K; p++) ta[i][p] = get(a + ((size_t)(i0 + i) * k + p0 + p) * es, in_dtype);
        for (int p = 0; p < DSA_REF_MMA_K; p++)
          for (int j = 0; j < DSA_REF_MMA_N; j++) tb[p][j] = get(b + ((size_t)(p0 + p) * n + j0 + j) * es, in_dtype);
        for (int i = 0; i < DSA_REF_MMA_M; i++)
          for (int p = 0; p < DSA_REF_MMA_K; p++)
            for (int j = 0; j < DSA_REF_MMA_N; j++) acc[i][j] += ta[i][p] * tb[p][j];
      }
      for (int i = 0; i < DSA_REF_MMA_M; i++)
        for (int j = 0; j < DSA_REF_MMA_N; j++) put(c + ((size_t)(i0 + i) * n + j0 + j) * 4, DSA_REF_F32, acc[i][j]);
    }
  return DSA_REF_OK;
}

/* ---- host side ----------------------------------------------------------------------- */

static void copy_text(char* buf, int32_t len, const char* text, int32_t more) {
  if (buf == NULL || len <= 0) return;
  if (more) snprintf(buf, (size_t)len, "%s (and %d later error%s)", text, more, more == 1 ? "" : "s");
  else snprintf(buf, (size_t)len, "%s", text);
}

int32_t dsa_ref_take_error(char* buf, int32_t len) {
  int32_t code = dev.error;
  copy_text(buf, len, code ? dev.error_text : "", code ? dev.later_errors : 0);
  dev.error = dev.later_errors = 0;
  dev.error_text[0] = '\0';
  return code;
}

int32_t dsa_ref_set_debug(int32_t on) {
  int32_t previous = debugging();
  debug_mode = on != 0;
  return previous;
}

int32_t dsa_ref_take_violations(char* buf, int32_t len) {
  int32_t count = dev.violations;
  copy_text(buf, len, count ? dev.violation_text : "", 0);
  dev.violations = 0;
  dev.violation_text[0] = '\0';
  return count;
}

int32_t dsa_ref_debug_violations(void) {
  int32_t count = dev.violations;
  dev.violations = 0;
  dev.violation_text[0] = '\0';
  return count;
}

void dsa_ref_reset(void) { memset(&dev, 0, sizeof dev); }
