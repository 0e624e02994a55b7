/* dsa_ref: a reference DSA modelled in C (see dsa_ref.h for the contract). */
#include "dsa_ref.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QUEUE_DEPTH 64

typedef struct {
  int is_load;
  void* global;
  int32_t global_dtype, spad, spad_dtype, rows, cols, ld, valid_rows, valid_cols;
} Transfer;

static struct {
  unsigned char spad[DSA_REF_SCRATCH_BYTES];
  unsigned char pending_write[DSA_REF_SCRATCH_BYTES]; /* a queued load will write these bytes */
  unsigned char pending_read[DSA_REF_SCRATCH_BYTES];  /* a queued store will read these bytes */
  Transfer queue[QUEUE_DEPTH];
  int queued;
  int32_t error;
  char message[256];
  int debug; /* -1: not yet read from the environment */
  int32_t violations;
} dev = {.debug = -1};

static int32_t fail(int32_t code, const char* fmt, ...) {
  if (!dev.error) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dev.message, sizeof dev.message, fmt, ap);
    va_end(ap);
    dev.error = code;
  }
  return code;
}

static int debugging(void) {
  if (dev.debug < 0) {
    const char* env = getenv("DSA_REF_DEBUG");
    dev.debug = env && env[0] == '1';
  }
  return dev.debug;
}

static int elem_size(int32_t dtype) { return dtype == DSA_REF_F16 ? 2 : dtype == DSA_REF_F32 ? 4 : 0; }

static float half_to_float(uint16_t h) {
  int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
  float v = exp == 0 ? ldexpf((float)man, -24) : exp == 31 ? (man ? NAN : INFINITY) : ldexpf((float)(man | 1024), exp - 25);
  return sign ? -v : v;
}

static uint16_t float_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint16_t sign = (x >> 16) & 0x8000;
  int exp = (int)((x >> 23) & 255) - 127 + 15;
  uint32_t man = x & 0x7fffff;
  if (((x >> 23) & 255) == 255) return sign | 0x7c00 | (man ? 0x200 : 0);
  if (exp >= 31) return sign | 0x7c00;
  if (exp <= 0) { /* subnormal or zero: shift with round to nearest even */
    if (exp < -10) return sign;
    man |= 0x800000;
    int shift = 14 - exp;
    uint32_t half = man >> shift, rest = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rest > mid || (rest == mid && (half & 1))) half++;
    return sign | (uint16_t)half;
  }
  uint32_t half = ((uint32_t)exp << 10) | (man >> 13), rest = man & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1))) half++; /* may carry into the exponent: still right */
  return sign | (uint16_t)half;
}

static float load_elem(const void* base, int32_t dtype, long i) {
  return dtype == DSA_REF_F16 ? half_to_float(((const uint16_t*)base)[i]) : ((const float*)base)[i];
}

static void store_elem(void* base, int32_t dtype, long i, float v) {
  if (dtype == DSA_REF_F16) ((uint16_t*)base)[i] = float_to_half(v);
  else ((float*)base)[i] = v;
}

/* Checks that a tile lies in the scratchpad; in debug mode, counts touches of bytes in flight. */
static int32_t touch(const char* who, int32_t spad, int32_t dtype, int32_t rows, int32_t cols, int writes) {
  int size = elem_size(dtype);
  if (!size) return fail(2, "%s: unknown dtype code %d", who, dtype);
  if (rows <= 0 || cols <= 0) return fail(3, "%s: empty tile %dx%d", who, rows, cols);
  long bytes = (long)rows * cols * size;
  if (spad < 0 || spad + bytes > DSA_REF_SCRATCH_BYTES)
    return fail(4, "%s: tile of %ld bytes at offset %d exceeds the %d-byte scratchpad", who, bytes, spad,
                DSA_REF_SCRATCH_BYTES);
  if (debugging()) {
    for (long b = spad; b < spad + bytes; b++) {
      if (dev.pending_write[b] || (writes && dev.pending_read[b])) {
        if (!dev.violations)
          fprintf(stderr, "dsa_ref debug: %s %s scratchpad offset %ld while a transfer to it is not synchronised\n",
                  who, writes ? "writes" : "reads", b);
        dev.violations++;
        break;
      }
    }
  }
  return 0;
}

static void mark(unsigned char* map, const Transfer* t, unsigned char on) {
  memset(map + t->spad, on, (size_t)t->rows * t->cols * elem_size(t->spad_dtype));
}

static void perform(const Transfer* t) {
  void* tile = dev.spad + t->spad;
  for (int32_t r = 0; r < t->rows; r++)
    for (int32_t c = 0; c < t->cols; c++) {
      long s = (long)r * t->cols + c, g = (long)r * t->ld + c;
      int valid = r < t->valid_rows && c < t->valid_cols;
      if (t->is_load) store_elem(tile, t->spad_dtype, s, valid ? load_elem(t->global, t->global_dtype, g) : 0.0f);
      else if (valid) store_elem(t->global, t->global_dtype, g, load_elem(tile, t->spad_dtype, s));
    }
}

int32_t dsa_ref_sync(void) {
  for (int i = 0; i < dev.queued; i++) {
    perform(&dev.queue[i]);
    mark(dev.queue[i].is_load ? dev.pending_write : dev.pending_read, &dev.queue[i], 0);
  }
  dev.queued = 0;
  return 0;
}

static int32_t enqueue(Transfer t, const char* who) {
  if (!elem_size(t.global_dtype)) return fail(2, "%s: unknown dtype code %d", who, t.global_dtype);
  if (t.valid_rows > t.rows || t.valid_cols > t.cols || t.valid_rows < 0 || t.valid_cols < 0 || t.ld < t.valid_cols)
    return fail(5, "%s: valid part %dx%d (row stride %d) does not fit the %dx%d tile", who, t.valid_rows,
                t.valid_cols, t.ld, t.rows, t.cols);
  int32_t err = touch(who, t.spad, t.spad_dtype, t.rows, t.cols, t.is_load);
  if (err) return err;
  if (dev.queued == QUEUE_DEPTH) dsa_ref_sync(); /* the engine drains when its queue is full */
  dev.queue[dev.queued++] = t;
  mark(t.is_load ? dev.pending_write : dev.pending_read, &t, 1);
  return 0;
}

int32_t dsa_ref_dma_load(int32_t spad_dst, void* src, int32_t dtype, int32_t rows, int32_t cols, int32_t src_ld,
                         int32_t valid_rows, int32_t valid_cols) {
  Transfer t = {1, src, dtype, spad_dst, dtype, rows, cols, src_ld, valid_rows, valid_cols};
  return enqueue(t, "dsa_ref_dma_load");
}

int32_t dsa_ref_dma_store(void* dst, int32_t dst_dtype, int32_t spad_src, int32_t src_dtype, int32_t rows,
                          int32_t cols, int32_t dst_ld, int32_t valid_rows, int32_t valid_cols) {
  Transfer t = {0, dst, dst_dtype, spad_src, src_dtype, rows, cols, dst_ld, valid_rows, valid_cols};
  if (!elem_size(src_dtype)) return fail(2, "dsa_ref_dma_store: unknown dtype code %d", src_dtype);
  return enqueue(t, "dsa_ref_dma_store");
}

int32_t dsa_ref_fill_zero(int32_t spad, int32_t dtype, int32_t rows, int32_t cols) {
  int32_t err = touch("dsa_ref_fill_zero", spad, dtype, rows, cols, 1);
  if (err) return err;
  memset(dev.spad + spad, 0, (size_t)rows * cols * elem_size(dtype));
  return 0;
}

int32_t dsa_ref_mma(int32_t spad_c, int32_t spad_a, int32_t spad_b, int32_t in_dtype, int32_t m, int32_t n, int32_t k) {
  if (m % DSA_REF_MMA_M || n % DSA_REF_MMA_N || k % DSA_REF_MMA_K || m <= 0 || n <= 0 || k <= 0)
    return fail(6, "dsa_ref_mma: %dx%dx%d is not a multiple of the matrix unit's %dx%dx%d", m, n, k, DSA_REF_MMA_M,
                DSA_REF_MMA_N, DSA_REF_MMA_K);
  int32_t err = touch("dsa_ref_mma", spad_a, in_dtype, m, k, 0);
  if (!err) err = touch("dsa_ref_mma", spad_b, in_dtype, k, n, 0);
  if (!err) err = touch("dsa_ref_mma", spad_c, DSA_REF_F32, m, n, 1);
  if (err) return err;
  float* c = (float*)(dev.spad + spad_c);
  const void *a = dev.spad + spad_a, *b = dev.spad + spad_b;
  for (int32_t i = 0; i < m; i++)
    for (int32_t p = 0; p < k; p++) {
      float av = load_elem(a, in_dtype, (long)i * k + p);
      for (int32_t j = 0; j < n; j++) c[(long)i * n + j] += av * load_elem(b, in_dtype, (long)p * n + j);
    }
  return 0;
}

int32_t dsa_ref_take_error(char* buf, int32_t len) {
  int32_t code = dev.error;
  if (buf && len > 0) snprintf(buf, (size_t)len, "%s", code ? dev.message : "");
  dev.error = 0;
  dev.message[0] = 0;
  return code;
}

void dsa_ref_set_debug(int32_t on) { dev.debug = on != 0; }

int32_t dsa_ref_debug_violations(void) {
  int32_t n = dev.violations;
  dev.violations = 0;
  return n;
}

void dsa_ref_reset(void) {
  int debug = dev.debug;
  memset(&dev, 0, sizeof dev);
  dev.debug = debug;
}
