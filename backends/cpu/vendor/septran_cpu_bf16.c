/* septran_cpu_bf16.c -- bfloat16 GEMMs on the CPU's matrix units: AVX512-BF16 (VDPBF16PS) and AMX (TDPBF16PS).
 * The contract is septran_cpu.h (septran_cpu_units, septran_cpu_gemm_avx512bf16_bf16, septran_cpu_gemm_amx_bf16).
 *
 * Both kernels share everything above the instructions: the argument rules (septran_cpu_gemm_tiles's), a
 * per-thread scratch, the packing of A and B into zero-padded blocks (so that every edge block computes as a
 * full one and only its valid part is added into C). The AVX512 kernel packs less (A read in place where it
 * can be, B a slice at a time, mostly while computing): see its section. Only the lowest layer differs between
 * builds: the intrinsics, or, with -DSEPTRAN_CPU_EMULATE_UNITS, plain C with the same semantics, so that the
 * packing, blocking and edge logic runs (and is tested) on CPUs with neither unit.
 *
 * Each unit's code is compiled for it through target attributes, so the library builds with -march=native on
 * any x86-64 CPU and runs that code only where septran_cpu_units() finds the unit. The AVX512-BF16 kernel is
 * measured on an AMD EPYC Zen 4, the AMX kernel on an Intel Xeon (family 6, model 207: the host of a lent GPU
 * machine), where its native tests pass too (README; the emulation follows Intel's pseudo-code, without its
 * denormal flushing).
 */
#define _GNU_SOURCE /* syscall() and sched_yield() under -std=c11 */
#include "septran_cpu.h"
#include "septran_cpu_scratch.h"

#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(SEPTRAN_CPU_EMULATE_UNITS)
#define SEPTRAN_UNITS 1
#elif defined(__x86_64__)
#define SEPTRAN_UNITS 1
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#else
#define SEPTRAN_UNITS 0
#endif

/* ---- which units: CPUID, the OS's saved state (XCR0), Linux's AMX permission; once per process -------- */

#if defined(SEPTRAN_CPU_EMULATE_UNITS)
static int32_t detect_units(void) { return SEPTRAN_CPU_UNIT_AVX512BF16 | SEPTRAN_CPU_UNIT_AMX; }
#elif defined(__x86_64__)
static uint64_t xcr0(void) {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t)hi << 32 | lo;
}

/* Linux gives a process the AMX tile data state only when asked (arch_prctl, Linux >= 5.16); without it the
 * first tile instruction faults. Process-wide, so asked once. */
enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
static int amx_permitted(void) { return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0; }

static int32_t detect_units(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c >> 27 & 1)) return 0; /* no OSXSAVE: XGETBV would fault */
  uint64_t x = xcr0();
  int zmm_state = (x & 0xe6) == 0xe6;        /* SSE, AVX, opmask, ZMM0-15 upper halves, ZMM16-31 */
  int tile_state = (x & 0x60000) == 0x60000; /* XTILECFG, XTILEDATA */
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
  unsigned subleaves = a;
  int avx512f = b >> 16 & 1, amx = (d >> 22 & 1) && (d >> 24 & 1); /* AMX-BF16, AMX-TILE */
  int avx512_bf16 = subleaves >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 5 & 1);
  int32_t units = 0;
  if (avx512f && avx512_bf16 && zmm_state) units |= SEPTRAN_CPU_UNIT_AVX512BF16;
  /* the AMX code is compiled with avx512f too (its C additions may be vectorised with it) */
  if (amx && avx512f && zmm_state && tile_state && amx_permitted()) units |= SEPTRAN_CPU_UNIT_AMX;
  return units;
}
#else
static int32_t detect_units(void) { return 0; }
#endif

static int32_t units_found = -1; /* -2 while the first caller looks */

int32_t septran_cpu_units(void) {
  int32_t u = __atomic_load_n(&units_found, __ATOMIC_ACQUIRE);
  if (u >= 0) return u;
  int32_t unknown = -1;
  if (__atomic_compare_exchange_n(&units_found, &unknown, -2, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    u = detect_units();
    __atomic_store_n(&units_found, u, __ATOMIC_RELEASE);
    return u;
  }
  while ((u = __atomic_load_n(&units_found, __ATOMIC_ACQUIRE)) < 0) sched_yield(); /* a CPUID and a syscall */
  return u;
}

/* ---- the call: septran_cpu_gemm_tiles's rules, as one product m x n x k -------------------------------- */

typedef struct {
  float* c;
  const uint16_t *a, *b;
  int64_t m, n, k, ldc, lda, ldb;
  int32_t trans_a, trans_b;
} gemm_t;

static int64_t min64(int64_t x, int64_t y) { return x < y ? x : y; }

/* A single row makes the stride meaningless (septran_cpu_gemm's rule). */
static int ld_ok(int64_t* ld, int64_t rows, int64_t cols) {
  if (rows == 1 && *ld < cols) *ld = cols;
  return *ld >= cols;
}

/* The product covers only what every operand holds. 0 with g filled in (a zero size: nothing to do), or
 * SEPTRAN_CPU_E_ARGS. */
static int32_t gemm_args(gemm_t* g, float* c, uint16_t* a, uint16_t* b, int32_t trans_a, int32_t trans_b,
                         int64_t c_rows, int64_t c_cols, int64_t a_rows, int64_t a_cols, int64_t b_rows,
                         int64_t b_cols, int64_t ldc, int64_t lda, int64_t ldb) {
  int64_t m = min64(c_rows, trans_a ? a_cols : a_rows), n = min64(c_cols, trans_b ? b_rows : b_cols);
  int64_t k = min64(trans_a ? a_rows : a_cols, trans_b ? b_cols : b_rows);
  if (m < 0 || n < 0 || k < 0) return SEPTRAN_CPU_E_ARGS;
  *g = (gemm_t){c, a, b, m, n, k, ldc, lda, ldb, trans_a, trans_b};
  if (m == 0 || n == 0 || k == 0) return 0;
  if (!ld_ok(&g->ldc, m, n) || !ld_ok(&g->lda, trans_a ? k : m, trans_a ? m : k) ||
      !ld_ok(&g->ldb, trans_b ? n : k, trans_b ? k : n))
    return SEPTRAN_CPU_E_ARGS;
  return 0;
}

#if SEPTRAN_UNITS

/* ---- shared: the packing (into the library's per-thread scratch, septran_cpu_scratch.h) ------------------ */

static size_t round64(size_t bytes) { return (bytes + 63) & ~(size_t)63; }
static int64_t ceil_div(int64_t x, int64_t y) { return (x + y - 1) / y; }
static float bf16_to_float(uint16_t h) { /* exact: a float32's top half (so are the products of two) */
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* op(A) (m x k) in blocks of R rows; a block's k in kg groups of G elements, each group R rows of G: element
 * (i, kk) at ((i / R * kg + kk / G) * R + i % R) * G + kk % G. Zeros past m and k. The AVX512 kernel's G = 2
 * makes each row's pair one 32-bit word to broadcast; AMX's G = 32 makes each group one 16 x 32 A tile. */
static void pack_a(uint16_t* d, const gemm_t* g, int R, int G, int64_t kg) {
  for (int64_t p = 0; p < ceil_div(g->m, R); p++)
    for (int64_t q = 0; q < kg; q++) {
      int64_t k0 = q * G, kw = k0 >= g->k ? 0 : min64(G, g->k - k0);
      for (int r = 0; r < R; r++, d += G) {
        int64_t i = p * R + r, w = i < g->m ? kw : 0, e = 0;
        if (w && !g->trans_a)
          for (const uint16_t* s = g->a + i * g->lda + k0; e < w; e++) d[e] = s[e];
        else if (w)
          for (const uint16_t* s = g->a + k0 * g->lda + i; e < w; e++) d[e] = s[e * g->lda];
        for (; e < G; e++) d[e] = 0;
      }
    }
}

/* The pairs of one pair-row q of a panel: word j = op(B)[2q][j0 + j] | op(B)[2q + 1][j0 + j] << 16, j < W;
 * zeros past k and n (w = the panel's valid columns). */
static void pack_pair_row(uint32_t* row, const gemm_t* g, int64_t q, int64_t j0, int64_t w, int W) {
  int64_t k0 = 2 * q, j = 0;
  if (k0 >= g->k) w = 0;
  int both = k0 + 1 < g->k;
  if (w && !g->trans_b) { /* two rows of B, interleaved */
    const uint16_t* lo = g->b + k0 * g->ldb + j0;
    if (both)
      for (; j < w; j++) row[j] = lo[j] | (uint32_t)lo[j + g->ldb] << 16;
    else
      for (; j < w; j++) row[j] = lo[j];
  } else if (w) { /* B stored n x k: a pair is two neighbours in B's row j */
    const uint16_t* s = g->b + j0 * g->ldb + k0;
    for (; j < w; j++, s += g->ldb) row[j] = s[0] | (both ? (uint32_t)s[1] << 16 : 0);
  }
  for (; j < W; j++) row[j] = 0;
}

/* A block's sums (rows x cols valid, row stride ld_sums) added into C. */
static void add_valid(float* c, int64_t ldc, const float* sums, int ld_sums, int rows, int cols) {
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < cols; j++) c[r * ldc + j] += sums[r * ld_sums + j];
}

/* ---- AVX512-BF16: the lowest layer ---------------------------------------------------------------------- */

#if !defined(SEPTRAN_CPU_EMULATE_UNITS)
#define AVX512BF16_FN __attribute__((target("avx512f,avx512bw,avx512bf16")))
#define AVX512BF16_OP static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512bf16")))
typedef __m512 vacc;     /* 16 float32 sums */
typedef __m512bh vpairs; /* 16 pairs of bfloat16 */
AVX512BF16_OP vacc vacc_zero(void) { return _mm512_setzero_ps(); }
AVX512BF16_OP vacc vacc_load(const float* p) { return _mm512_loadu_ps(p); }
AVX512BF16_OP void vacc_store(float* p, vacc v) { _mm512_storeu_ps(p, v); }
AVX512BF16_OP vacc vacc_add(vacc x, vacc y) { return _mm512_add_ps(x, y); }
AVX512BF16_OP vpairs vpairs_load(const uint32_t* p) { return (vpairs)_mm512_load_si512(p); }
/* p: two bfloat16, 2-byte aligned (a row of A with an odd stride) */
AVX512BF16_OP vpairs vpairs_bcast(const uint16_t* p) {
  int w;
  memcpy(&w, p, 4);
  return (vpairs)_mm512_set1_epi32(w);
}
AVX512BF16_OP vacc vdot(vacc acc, vpairs x, vpairs y) { return _mm512_dpbf16_ps(acc, x, y); }
AVX512BF16_OP void prefetch(const void* p) { _mm_prefetch(p, _MM_HINT_T0); }
/* Two rows of B (32 columns each) as 32 pairs: x0 = columns 0-15, x1 = 16-31, lo[j] | hi[j] << 16. */
AVX512BF16_OP void vpairs_rows(const uint16_t* lo, const uint16_t* hi, vpairs* x0, vpairs* x1) {
  __m512i l = _mm512_loadu_si512(lo), h = _mm512_loadu_si512(hi);
  __m512i a = _mm512_unpacklo_epi16(l, h), b = _mm512_unpackhi_epi16(l, h); /* 128-bit lanes of columns */
  *x0 = (vpairs)_mm512_permutex2var_epi64(a, _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0), b);
  *x1 = (vpairs)_mm512_permutex2var_epi64(a, _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4), b);
}
AVX512BF16_OP void vpairs_store(uint32_t* p, vpairs x) { _mm512_store_si512(p, (__m512i)x); }
/* d[c * ldd + r] = the 32-bit word at s + r * lds + 2c, r, c < 16 (B stored n x k: its pairs transposed) */
AVX512BF16_OP void pairs_transpose16(uint32_t* d, int64_t ldd, const uint16_t* s, int64_t lds) {
  __m512i r[16], t[16];
  for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_si512(s + i * lds);
  for (int i = 0; i < 16; i += 2)
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]), t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  for (int g = 0; g < 16; g += 4) { /* r[g + c], lane L: rows g..g+3 of column 4L + c */
    r[g] = _mm512_unpacklo_epi64(t[g], t[g + 2]), r[g + 1] = _mm512_unpackhi_epi64(t[g], t[g + 2]);
    r[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]), r[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
  }
  for (int c = 0; c < 4; c++) {
    __m512i v0 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x88), v1 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xdd);
    __m512i w0 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x88), w1 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xdd);
    _mm512_storeu_si512(d + c * ldd, _mm512_shuffle_i32x4(v0, w0, 0x88));
    _mm512_storeu_si512(d + (4 + c) * ldd, _mm512_shuffle_i32x4(v1, w1, 0x88));
    _mm512_storeu_si512(d + (8 + c) * ldd, _mm512_shuffle_i32x4(v0, w0, 0xdd));
    _mm512_storeu_si512(d + (12 + c) * ldd, _mm512_shuffle_i32x4(v1, w1, 0xdd));
  }
}
#else
/* What the hardware would fault on (#UD, #GP) aborts. */
static void emu_check(int ok) {
  if (!ok) abort();
}

#define AVX512BF16_FN
#define AVX512BF16_OP static inline
typedef struct { float f[16]; } vacc;
typedef struct { uint32_t w[16]; } vpairs;
AVX512BF16_OP vacc vacc_zero(void) { return (vacc){{0}}; }
AVX512BF16_OP vacc vacc_load(const float* p) { vacc v; memcpy(v.f, p, sizeof v.f); return v; }
AVX512BF16_OP void vacc_store(float* p, vacc v) { memcpy(p, v.f, sizeof v.f); }
AVX512BF16_OP vacc vacc_add(vacc x, vacc y) {
  for (int i = 0; i < 16; i++) x.f[i] += y.f[i];
  return x;
}
AVX512BF16_OP vpairs vpairs_load(const uint32_t* p) {
  emu_check(((uintptr_t)p & 63) == 0); /* VMOVDQA32 faults otherwise */
  vpairs v;
  memcpy(v.w, p, sizeof v.w);
  return v;
}
AVX512BF16_OP vpairs vpairs_bcast(const uint16_t* p) {
  vpairs v;
  uint32_t w = p[0] | (uint32_t)p[1] << 16;
  for (int i = 0; i < 16; i++) v.w[i] = w;
  return v;
}
/* VDPBF16PS: per lane, the odd pair's exact product added, then the even one's (Intel's pseudo-code order). */
AVX512BF16_OP vacc vdot(vacc acc, vpairs x, vpairs y) {
  for (int i = 0; i < 16; i++) {
    acc.f[i] += bf16_to_float(x.w[i] >> 16) * bf16_to_float(y.w[i] >> 16);
    acc.f[i] += bf16_to_float(x.w[i] & 0xffff) * bf16_to_float(y.w[i] & 0xffff);
  }
  return acc;
}
AVX512BF16_OP void prefetch(const void* p) { (void)p; }
AVX512BF16_OP void vpairs_rows(const uint16_t* lo, const uint16_t* hi, vpairs* x0, vpairs* x1) {
  for (int j = 0; j < 16; j++)
    x0->w[j] = lo[j] | (uint32_t)hi[j] << 16, x1->w[j] = lo[16 + j] | (uint32_t)hi[16 + j] << 16;
}
AVX512BF16_OP void vpairs_store(uint32_t* p, vpairs x) {
  emu_check(((uintptr_t)p & 63) == 0);
  memcpy(p, x.w, sizeof x.w);
}
AVX512BF16_OP void pairs_transpose16(uint32_t* d, int64_t ldd, const uint16_t* s, int64_t lds) {
  for (int r = 0; r < 16; r++)
    for (int c = 0; c < 16; c++) d[c * ldd + r] = s[r * lds + 2 * c] | (uint32_t)s[r * lds + 2 * c + 1] << 16;
}
#endif

/* ---- AVX512-BF16: the kernel ---------------------------------------------------------------------------- */

/* 8 rows x 32 columns of float32 sums: 16 of the 32 zmm registers, 16 VDPBF16PS per two loads of B and 8
 * broadcasts of A. On Zen 4 VDPBF16PS zmm issues 1 a cycle with 6 cycles' latency (measured): 16 chains hide
 * it, and from L1 this loop runs at the instruction's peak (about 230 GFLOP/s a core). V_KC = 256 pairs: the
 * whole k of the mapping's 256 x 256 x 512 call, so C is read and written once per call (128 and 64 measured
 * 2% and 4% slower, though their slice would stay in L1). */
enum { V_MR = 8, V_NR = 32, V_KC = 256 };

/* Row r of an 8-row block as a, a3 = a + 3 ar or a6 = a + 6 ar plus 0, 1, 2 or 4 ar: x86 addressing's scaled
 * index, three bases and one stride instead of eight pointers (which spilled). */
#define ROW8(a, a3, a6, ar, r)                                                                              \
  ((r) == 0 ? (a) : (r) == 1 ? (a) + (ar) : (r) == 2 ? (a) + 2 * (ar) : (r) == 3 ? (a3) : (r) == 4 ? (a) + 4 * (ar) \
   : (r) == 5 ? (a3) + 2 * (ar) : (r) == 6 ? (a6) : (a3) + 4 * (ar))

/* One pair-row q of a block: B's two vectors (loaded from the slice, or, packing, made from B's rows at src
 * and stored into the slice), 16 VDPBF16PS with A's 8 broadcasts. */
static inline __attribute__((always_inline)) AVX512BF16_FN void
avx512_step(vacc acc[V_MR][2], const uint16_t* a, const uint16_t* a3, const uint16_t* a6, int64_t ar, uint32_t* b,
            int pack, const uint16_t* src, int64_t ldb) {
  vpairs b0, b1;
  if (pack) {
    prefetch(src + 32 * ldb), prefetch(src + 33 * ldb); /* 16 pair-rows ahead: B's rows are far apart */
    vpairs_rows(src, src + ldb, &b0, &b1);
    vpairs_store(b, b0), vpairs_store(b + 16, b1);
  } else {
    b0 = vpairs_load(b), b1 = vpairs_load(b + 16);
  }
#pragma GCC unroll 8
  for (int r = 0; r < V_MR; r++) {
    vpairs x = vpairs_bcast(ROW8(a, a3, a6, ar, r));
    acc[r][0] = vdot(acc[r][0], x, b0);
    acc[r][1] = vdot(acc[r][1], x, b1);
  }
}

/* C[rows x cols] += A's pairs (pair q of row r at a + r * ar + q * aq, in bfloat16 elements) times kc pair-rows
 * of a B slice b (V_NR words each). pack: the pairs come from B's rows (2q, 2q + 1 at src + 2q * ldb; a whole
 * panel, inside k) and are stored into b on the way: the slice's packing rides on the first row block's
 * arithmetic instead of a pass of its own. next (A read in place): the row block after this one, each of its
 * rows' lines prefetched twice. Inlined with pack, ar, aq, next's presence constant. */
static inline __attribute__((always_inline)) AVX512BF16_FN void
avx512_block(const uint16_t* a, int64_t ar, int64_t aq, uint32_t* b, int64_t kc, float* c, int64_t ldc, int rows,
             int cols, int pack, const uint16_t* src, int64_t ldb, const uint16_t* next) {
  vacc acc[V_MR][2];
#pragma GCC unroll 8
  for (int r = 0; r < V_MR; r++) acc[r][0] = acc[r][1] = vacc_zero();
  for (int r = 0; r < rows; r++) prefetch(c + r * ldc), prefetch(c + r * ldc + V_NR - 1); /* needed at the end */
  const uint16_t *a3 = a + 3 * ar, *a6 = a + 6 * ar;
  int64_t q = 0;
  if (next) { /* 8 steps, each prefetching a line of one of next's rows */
    const uint16_t *n3 = next + 3 * ar, *n6 = next + 6 * ar;
    for (; q + 8 <= kc; q += 8) {
#pragma GCC unroll 8
      for (int u = 0; u < 8; u++) {
        int64_t o = (q + u) * aq;
        avx512_step(acc, a + o, a3 + o, a6 + o, ar, b + (q + u) * V_NR, 0, NULL, 0);
        prefetch(ROW8(next, n3, n6, ar, u) + 2 * q);
      }
    }
  }
  for (; q < kc; q++, src += 2 * ldb)
    avx512_step(acc, a + q * aq, a3 + q * aq, a6 + q * aq, ar, b + q * V_NR, pack, src, ldb);
  if (rows == V_MR && cols == V_NR) {
#pragma GCC unroll 8
    for (int r = 0; r < V_MR; r++) {
      float* cr = c + r * ldc;
      vacc_store(cr, vacc_add(vacc_load(cr), acc[r][0]));
      vacc_store(cr + 16, vacc_add(vacc_load(cr + 16), acc[r][1]));
    }
    return;
  }
  float sums[V_MR][V_NR]; /* a block past m or n: its padding stays here */
#pragma GCC unroll 8
  for (int r = 0; r < V_MR; r++) vacc_store(sums[r], acc[r][0]), vacc_store(sums[r] + 16, acc[r][1]);
  add_valid(c, ldc, &sums[0][0], V_NR, rows, cols);
}

/* A packed (pack_a's layout, G = 2): edge rows, trans_a, odd k. */
static AVX512BF16_FN void avx512_block_packed(const uint16_t* a, uint32_t* b, int64_t kc, float* c, int64_t ldc,
                                              int rows, int cols) {
  avx512_block(a, 2, 2 * V_MR, b, kc, c, ldc, rows, cols, 0, NULL, 0, NULL);
}

/* A read in place: a whole row block (its rows lda apart), whole panel; next prefetched. */
static AVX512BF16_FN void avx512_block_direct(const uint16_t* a, int64_t lda, uint32_t* b, int64_t kc, float* c,
                                              int64_t ldc, const uint16_t* next) {
  avx512_block(a, lda, 2, b, kc, c, ldc, V_MR, V_NR, 0, NULL, 0, next);
}

/* The same, packing the slice from B's rows as it goes (the first row block of a whole panel). */
static AVX512BF16_FN void avx512_block_direct_packing(const uint16_t* a, int64_t lda, uint32_t* b, int64_t kc,
                                                      float* c, int64_t ldc, const uint16_t* src, int64_t ldb) {
  avx512_block(a, lda, 2, b, kc, c, ldc, V_MR, V_NR, 1, src, ldb, NULL);
}

/* A read in place, an n edge (cols < V_NR). */
static AVX512BF16_FN void avx512_block_direct_edge(const uint16_t* a, int64_t lda, uint32_t* b, int64_t kc,
                                                   float* c, int64_t ldc, int cols) {
  avx512_block(a, lda, 2, b, kc, c, ldc, V_MR, cols, 0, NULL, 0, NULL);
}

/* Pair-rows q0 .. q0 + n of B's 32 columns from j0 (B stored k x n, both halves of every pair inside k), with
 * vector shuffles: pair-row q's columns j0 .. j0 + 15 at lo + q * ld, the next 16 at hi + q * ld (words). */
static AVX512BF16_FN void pack_pair_rows32(uint32_t* lo, uint32_t* hi, int64_t ld, const gemm_t* g, int64_t q0,
                                           int64_t n, int64_t j0) {
  for (int64_t q = 0; q < n; q++) {
    const uint16_t* row = g->b + 2 * (q0 + q) * g->ldb + j0;
    vpairs x0, x1;
    vpairs_rows(row, row + g->ldb, &x0, &x1);
    vpairs_store(lo + q * ld, x0), vpairs_store(hi + q * ld, x1);
  }
}

/* Pair-rows q0 .. q0 + kc of the B panel at column j0 (w valid columns) into d (kc x V_NR words): whole pairs
 * of a whole panel with vector shuffles (B stored n x k: 16 x 16 transposes of its pairs), the rest (past n,
 * past k, an odd k's last) as pack_pair_row. */
static AVX512BF16_FN void avx512_pack_slice(uint32_t* d, const gemm_t* g, int64_t q0, int64_t kc, int64_t j0,
                                            int64_t w) {
  int64_t whole = w < V_NR ? 0 : min64(kc, g->k / 2 - q0), q = 0; /* pairs with both halves inside k */
  if (whole > 0 && !g->trans_b) {
    pack_pair_rows32(d, d + 16, V_NR, g, q0, whole, j0);
    q = whole;
  } else if (whole > 0) {
    for (; q + 16 <= whole; q += 16)
      for (int64_t j = 0; j < V_NR; j += 16)
        pairs_transpose16(d + q * V_NR + j, V_NR, g->b + (j0 + j) * g->ldb + 2 * (q0 + q), g->ldb);
  }
  for (; q < kc; q++) pack_pair_row(d + q * V_NR, g, q0 + q, j0, w, V_NR);
}

/* C += op(A)[:, k0 .. k) op(B)[k0 .. k, :] in float32, a column of A and a row of B at a time (each product of
 * two bfloat16 is exact in float32): the few columns of k a unit's kernel leaves, so that it reads A in place. */
static void add_k_columns(const gemm_t* g, int64_t k0) {
  enum { W = 512 };
  float bk[W];
  for (int64_t kk = k0; kk < g->k; kk++)
    for (int64_t j0 = 0; j0 < g->n; j0 += W) {
      int64_t w = min64(W, g->n - j0);
      for (int64_t j = 0; j < w; j++)
        bk[j] = bf16_to_float(g->trans_b ? g->b[(j0 + j) * g->ldb + kk] : g->b[kk * g->ldb + j0 + j]);
      for (int64_t i = 0; i < g->m; i++) {
        float a = bf16_to_float(g->trans_a ? g->a[kk * g->lda + i] : g->a[i * g->lda + kk]);
        float* c = g->c + i * g->ldc + j0;
        for (int64_t j = 0; j < w; j++) c[j] += a * bk[j];
      }
    }
}

/* For each k block, each B panel: its slice (kc x V_NR words, 32 KB) packed into one buffer (by the first row
 * block where it can be), which every row block of A then passes. A stays where it is when trans_a = 0 and k
 * is even (a row's pair is one 32-bit word to broadcast), except the rows of an m edge, packed zero-padded; an
 * odd k runs its even part so and adds its last column after (packing all of A element by element took 0.26 of
 * the time of 333 x 555 x 777); A stored k x m is packed whole (pack_a). */
static int32_t avx512_gemm(const gemm_t* g) {
  if (!g->trans_a && g->k % 2 && g->k > 1) {
    gemm_t even = *g;
    even.k--;
    int32_t err = avx512_gemm(&even);
    if (!err) add_k_columns(g, even.k);
    return err;
  }
  int64_t qp = ceil_div(g->k, 2), mb = ceil_div(g->m, V_MR), nb = ceil_div(g->n, V_NR);
  int64_t mfull = !g->trans_a && g->k % 2 == 0 ? g->m / V_MR : 0; /* row blocks read in place */
  size_t b_bytes = (size_t)V_KC * V_NR * 4, a_bytes = round64((size_t)((mb - mfull) * V_MR * qp) * 4);
  unsigned char* s = septran_cpu_scratch(b_bytes + a_bytes);
  if (!s) return SEPTRAN_CPU_E_NOMEM;
  uint32_t* pb = (uint32_t*)s;
  uint16_t* pa = (uint16_t*)(s + b_bytes); /* row blocks mfull .. mb */
  if (mfull < mb) {
    gemm_t rest = *g;
    rest.m = g->m - mfull * V_MR;
    rest.a = g->trans_a ? g->a + mfull * V_MR : g->a + mfull * V_MR * g->lda;
    pack_a(pa, &rest, V_MR, 2, qp);
  }
  for (int64_t q0 = 0; q0 < qp; q0 += V_KC) {
    int64_t kc = min64(V_KC, qp - q0);
    for (int64_t jb = 0; jb < nb; jb++) {
      int64_t j0 = jb * V_NR, ib = 0;
      int cols = (int)min64(V_NR, g->n - j0);
      float* c = g->c + j0;
      const uint16_t* a = g->a + 2 * q0; /* row block ib at a + ib * V_MR * lda */
      if (mfull && cols == V_NR && !g->trans_b && 2 * (q0 + kc) <= g->k) {
        avx512_block_direct_packing(a, g->lda, pb, kc, c, g->ldc, g->b + 2 * q0 * g->ldb + j0, g->ldb);
        ib = 1;
      } else {
        avx512_pack_slice(pb, g, q0, kc, j0, cols);
      }
      for (; ib < mfull; ib++)
        if (cols == V_NR) /* prefetching the next row block, or the first again for the next panel */
          avx512_block_direct(a + ib * V_MR * g->lda, g->lda, pb, kc, c + ib * V_MR * g->ldc, g->ldc,
                              a + (ib + 1 < mfull ? ib + 1 : 0) * V_MR * g->lda);
        else
          avx512_block_direct_edge(a + ib * V_MR * g->lda, g->lda, pb, kc, c + ib * V_MR * g->ldc, g->ldc, cols);
      for (; ib < mb; ib++)
        avx512_block_packed(pa + ((ib - mfull) * qp + q0) * V_MR * 2, pb, kc, c + ib * V_MR * g->ldc, g->ldc,
                            (int)min64(V_MR, g->m - ib * V_MR), cols);
    }
  }
  return 0;
}

/* ---- AMX: the lowest layer ------------------------------------------------------------------------------ */

#if !defined(SEPTRAN_CPU_EMULATE_UNITS)
#define AMX_FN __attribute__((target("amx-tile,amx-bf16,avx512f")))
/* gcc 12's tile macros tell the compiler of no memory they read (and _tile_loadconfig of 8 of its 64 bytes):
 * a compiler barrier that is handed the pointer makes every store to it (packing, the config) happen first. */
#define READS(p) __asm__ volatile("" : : "r"(p) : "memory")
#define TILE_CONFIG(cfg) do { READS(cfg); _tile_loadconfig(cfg); } while (0)
#define TILE_LOAD(t, p, stride) do { READS(p); _tile_loadd(t, p, stride); } while (0)
#define TILE_STORE(t, p, stride) _tile_stored(t, p, stride) /* clobbers "memory" itself */
#define TILE_ZERO(t) _tile_zero(t)
#define TILE_DP(c, a, b) _tile_dpbf16ps(c, a, b)
#define TILE_RELEASE() _tile_release()
#else
#define AMX_FN
/* The 8 tile registers of this thread as arrays (16 rows of 64 bytes), with the configured shapes. A shape
 * the hardware would refuse (#UD) aborts. */
static _Thread_local struct {
  int on;
  int rows[8], colsb[8];
  unsigned char t[8][16][64];
} tiles;

static void emu_config(const unsigned char* cfg) {
  emu_check(cfg[0] == 1); /* palette 1 */
  for (int t = 0; t < 8; t++) {
    tiles.colsb[t] = cfg[16 + 2 * t] | cfg[17 + 2 * t] << 8;
    tiles.rows[t] = cfg[48 + t];
    emu_check(tiles.colsb[t] <= 64 && tiles.colsb[t] % 4 == 0 && tiles.rows[t] <= 16);
  }
  memset(tiles.t, 0, sizeof tiles.t);
  tiles.on = 1;
}

static void emu_load(int t, const void* p, int64_t stride) {
  emu_check(tiles.on);
  memset(tiles.t[t], 0, sizeof tiles.t[t]); /* past the configured shape: zero, as TILELOADD leaves it */
  for (int r = 0; r < tiles.rows[t]; r++) memcpy(tiles.t[t][r], (const char*)p + r * stride, tiles.colsb[t]);
}

static void emu_store(int t, void* p, int64_t stride) {
  emu_check(tiles.on);
  for (int r = 0; r < tiles.rows[t]; r++) memcpy((char*)p + r * stride, tiles.t[t][r], tiles.colsb[t]);
}

static void emu_zero(int t) {
  emu_check(tiles.on);
  memset(tiles.t[t], 0, sizeof tiles.t[t]);
}

static uint32_t emu_word(int t, int r, int i) {
  uint32_t w;
  memcpy(&w, tiles.t[t][r] + 4 * i, 4);
  return w;
}

/* TDPBF16PS: C[m][n] += A's pair k of row m . B's pair n of row k, the even products' sum first (Intel's
 * pseudo-code order). */
static void emu_dp(int c, int a, int b) {
  int rows = tiles.rows[c], cols = tiles.colsb[c] / 4, pairs = tiles.colsb[a] / 4;
  emu_check(tiles.on && tiles.rows[a] == rows && tiles.rows[b] == pairs && tiles.colsb[b] == tiles.colsb[c]);
  for (int m = 0; m < rows; m++)
    for (int n = 0; n < cols; n++) {
      float sum;
      memcpy(&sum, tiles.t[c][m] + 4 * n, 4);
      for (int k = 0; k < pairs; k++) {
        uint32_t x = emu_word(a, m, k), y = emu_word(b, k, n);
        sum += bf16_to_float(x & 0xffff) * bf16_to_float(y & 0xffff);
        sum += bf16_to_float(x >> 16) * bf16_to_float(y >> 16);
      }
      memcpy(tiles.t[c][m] + 4 * n, &sum, 4);
    }
}

#define TILE_CONFIG(cfg) emu_config(cfg)
#define TILE_LOAD(t, p, stride) emu_load(t, p, stride)
#define TILE_STORE(t, p, stride) emu_store(t, p, stride)
#define TILE_ZERO(t) emu_zero(t)
#define TILE_DP(c, a, b) emu_dp(c, a, b)
#define TILE_RELEASE() (tiles.on = 0)
#endif

/* ---- AMX: the kernel ------------------------------------------------------------------------------------ */

/* Tiles: C 16 x 16 float32; A 16 rows x 32 k; B 16 pair-rows (32 k) x 16 columns. Every tile register is
 * configured 16 rows x 64 bytes: A is read where it lies only in whole tiles (16 rows, k a multiple of 32), the
 * packing pads the rest with zeros, so no block needs another shape. Registers: 0-3 a 2 x 2 block of C tiles
 * (32 x 32), 4-5 its two A tiles, 6-7 its two B tiles (oneDNN's brgemm blocking: 4 products per 4 loads). */
enum { T_M = 16, T_N = 16, T_K = 32, T_A = T_M * T_K /* bf16 */, T_B = T_K / 2 * T_N /* words */ };

/* k in blocks of this many tile steps (16: 512 k). Each TDPBF16PS of the 2 x 2 block wants 1 KB of tiles, about 64
 * bytes a cycle: more than L2 gives. Over a block, the two B panels (2 x 16 KB) stay in L1 while every tile row of A
 * passes them and only A's tiles come from L2; over the whole k of a 1024-deep call they were 64 KB, past L1, and
 * both operands came from L2 (the fifteenth session measured this kernel at 0.64 to 0.83x torch's oneDNN as one
 * call, Intel Xeon, family 6 model 207). C's tiles then pass through the unit once a block, not once a call. Set
 * smaller by a test build, so that small products cross blocks. */
#ifndef SEPTRAN_CPU_AMX_K_STEPS
#define SEPTRAN_CPU_AMX_K_STEPS 16
#endif

static AMX_FN void amx_configure(void) {
  _Alignas(64) unsigned char cfg[64] = {1}; /* palette 1, start row 0 */
  for (int t = 0; t < 8; t++) cfg[16 + 2 * t] = 64, cfg[48 + t] = 16;
  TILE_CONFIG(cfg);
}

/* op(A)'s tiles: tile (i, s) at a + i * row_step + s * k_step (bfloat16 elements), its rows stride bytes apart:
 * A itself (its rows, 32 k a step) or pack_a's copy (1 KB tiles one after another). */
typedef struct {
  const uint16_t* a;
  int64_t row_step, k_step, stride;
} a_tiles;

/* C[rows x cols] += (A tiles i0, i0 + 1) . (B panels b0, b1) over kt steps of 32 k; two_a / b1 say whether the
 * block has a second tile row / column. A whole 32 x 32 block keeps its sums in C itself (loaded into the
 * tiles, stored back); an edge block's sums leave the tiles through a float32 block, of which only the valid
 * part is added into C. */
static AMX_FN void amx_block(a_tiles A, int64_t i0, int two_a, const uint32_t* b0, const uint32_t* b1, int64_t kt,
                             float* c, int64_t ldc, int rows, int cols) {
  const uint16_t *a0 = A.a + i0 * A.row_step, *a1 = a0 + A.row_step;
  int whole = rows == 2 * T_M && cols == 2 * T_N;
  if (whole) {
    TILE_LOAD(0, c, ldc * 4);
    TILE_LOAD(1, c + T_N, ldc * 4);
    TILE_LOAD(2, c + T_M * ldc, ldc * 4);
    TILE_LOAD(3, c + T_M * ldc + T_N, ldc * 4);
  } else {
    TILE_ZERO(0);
    TILE_ZERO(1);
    TILE_ZERO(2);
    TILE_ZERO(3);
  }
  for (int64_t s = 0; s < kt; s++) {
    TILE_LOAD(4, a0 + s * A.k_step, A.stride);
    TILE_LOAD(6, b0 + s * T_B, 64);
    TILE_DP(0, 4, 6);
    if (b1) {
      TILE_LOAD(7, b1 + s * T_B, 64);
      TILE_DP(1, 4, 7);
    }
    if (two_a) {
      TILE_LOAD(5, a1 + s * A.k_step, A.stride);
      TILE_DP(2, 5, 6);
      if (b1) TILE_DP(3, 5, 7);
    }
  }
  if (whole) {
    TILE_STORE(0, c, ldc * 4);
    TILE_STORE(1, c + T_N, ldc * 4);
    TILE_STORE(2, c + T_M * ldc, ldc * 4);
    TILE_STORE(3, c + T_M * ldc + T_N, ldc * 4);
    return;
  }
  float sums[2 * T_M][2 * T_N];
  TILE_STORE(0, &sums[0][0], sizeof sums[0]);
  if (b1) TILE_STORE(1, &sums[0][T_N], sizeof sums[0]);
  if (two_a) TILE_STORE(2, &sums[T_M][0], sizeof sums[0]);
  if (two_a && b1) TILE_STORE(3, &sums[T_M][T_N], sizeof sums[0]);
  add_valid(c, ldc, &sums[0][0], 2 * T_N, rows, cols);
}

/* op(B) (k x n) as B tiles: panels of 16 columns, each qp (>= ceil(k / 2)) pair-rows of 16 words: the pair
 * (2q, 2q + 1) of column j at (j / 16 * qp + q) * 16 + j % 16, the even k in the low half (the units' VNNI
 * layout), zeros past k and n. The whole pairs of two whole panels at once from B's rows, or of one whole panel
 * from B stored n x k (16 x 16 transposes of its pairs), with vector shuffles; the rest (past n, past k, an odd
 * k's last pair) as pack_pair_row. Packed once per call: every row block of A reads it. */
static AVX512BF16_FN void amx_pack_b(uint32_t* d, const gemm_t* g, int64_t qp) {
  int64_t np = ceil_div(g->n, T_N), pairs = g->k / 2; /* pair-rows with both halves inside k */
  for (int64_t p = 0; p < np; p++) {
    int64_t j0 = p * T_N, w = min64(T_N, g->n - j0), q = 0;
    uint32_t* dp = d + p * qp * T_N;
    if (!g->trans_b && j0 + (p % 2 ? T_N : 2 * T_N) <= g->n) {
      /* panels p and p + 1 (p even) from the same two rows of B; an odd panel's pairs went with its partner's */
      if (p % 2 == 0) pack_pair_rows32(dp, dp + qp * T_N, T_N, g, 0, pairs, j0);
      q = pairs;
    } else if (g->trans_b && w == T_N) {
      for (; q + 16 <= pairs; q += 16) pairs_transpose16(dp + q * T_N, T_N, g->b + j0 * g->ldb + 2 * q, g->ldb);
    }
    for (; q < qp; q++) pack_pair_row(dp + q * T_N, g, q, j0, w, T_N);
  }
}

/* A is read where it lies when trans_a = 0 and k is a multiple of 32 (its rows, 32 k at a time, are whole A
 * tiles), except the rows of an m edge, packed zero-padded; a longer k that is not runs its whole tiles' depth
 * so and the rest (under 32 columns) on AVX512-BF16, which every CPU with AMX has (packing all of A element by
 * element was a quarter of a 333 x 555 x 777 call on AVX512-BF16, whose arithmetic is slower); A stored k x m is
 * packed whole. B is packed whole (the units' pair layout). For each k block, two B panels' part of it (2 x 16 KB)
 * stays in L1 while every tile row of A passes it. */
static AMX_FN int32_t amx_gemm(const gemm_t* g) {
  if (!g->trans_a && g->k % T_K && g->k > T_K) {
    gemm_t head = *g, tail = *g;
    head.k = g->k - g->k % T_K;
    tail.k = g->k - head.k;
    tail.a = g->a + head.k;
    tail.b = g->trans_b ? g->b + head.k : g->b + head.k * g->ldb;
    int32_t err = amx_gemm(&head);
    if (err) return err;
    if (septran_cpu_units() & SEPTRAN_CPU_UNIT_AVX512BF16) return avx512_gemm(&tail);
    add_k_columns(&tail, 0);
    return 0;
  }
  int64_t kt = ceil_div(g->k, T_K), mt = ceil_div(g->m, T_M), nt = ceil_div(g->n, T_N);
  int64_t mfull = !g->trans_a && g->k % T_K == 0 ? g->m / T_M : 0; /* tile rows read in place */
  size_t b_bytes = round64((size_t)(nt * kt * T_B) * 4), a_bytes = (size_t)((mt - mfull) * kt * T_A) * 2;
  unsigned char* s = septran_cpu_scratch(b_bytes + a_bytes);
  if (!s) return SEPTRAN_CPU_E_NOMEM;
  const uint32_t* pb = (const uint32_t*)s;
  uint16_t* pa = (uint16_t*)(s + b_bytes);
  amx_pack_b((uint32_t*)s, g, kt * T_K / 2); /* tile (j, s) at pb + (j * kt + s) * T_B */
  if (mfull < mt) {
    gemm_t rest = *g;
    rest.m = g->m - mfull * T_M;
    rest.a = g->trans_a ? g->a + mfull * T_M : g->a + mfull * T_M * g->lda;
    pack_a(pa, &rest, T_M, T_K, kt); /* tile (mfull + i, s) at pa + (i * kt + s) * T_A */
  }
  amx_configure();
  for (int64_t s0 = 0; s0 < kt; s0 += SEPTRAN_CPU_AMX_K_STEPS) { /* k blocks: see SEPTRAN_CPU_AMX_K_STEPS */
    int64_t ks = min64(SEPTRAN_CPU_AMX_K_STEPS, kt - s0);
    a_tiles in_place = {g->a + s0 * T_K, T_M * g->lda, T_K, g->lda * 2}, packed = {pa + s0 * T_A, kt * T_A, T_A, 64};
    for (int64_t j = 0; j < nt; j += 2) {
      const uint32_t* b0 = pb + (j * kt + s0) * T_B;
      const uint32_t* b1 = j + 1 < nt ? b0 + kt * T_B : NULL;
      for (int64_t i = 0; i < mt; i += 2) {
        /* a pair of tile rows both in place, or both packed (an in-place row next to a packed one: two blocks) */
        int two = i + 1 < mt && (i + 1 < mfull || i >= mfull);
        float* c = g->c + i * T_M * g->ldc + j * T_N;
        int cols = (int)min64(2 * T_N, g->n - j * T_N);
        amx_block(i < mfull ? in_place : packed, i < mfull ? i : i - mfull, two, b0, b1, ks, c, g->ldc,
                  (int)min64(two ? 2 * T_M : T_M, g->m - i * T_M), cols);
        if (i + 1 < mt && !two) {
          amx_block(packed, 0, 0, b0, b1, ks, c + T_M * g->ldc, g->ldc, (int)min64(T_M, g->m - (i + 1) * T_M), cols);
        }
      }
    }
  }
  TILE_RELEASE();
  return 0;
}

#else /* neither x86-64 nor the emulation: no unit to run on */
static int32_t avx512_gemm(const gemm_t* g) { (void)g; return SEPTRAN_CPU_E_UNIT; }
static int32_t amx_gemm(const gemm_t* g) { (void)g; return SEPTRAN_CPU_E_UNIT; }
#endif

/* ---- the entry points: the kernels' signature (septran_cpu_typed.c's GEMM) -------------------------------- */

static int32_t gemm_on(int32_t unit, int32_t (*run)(const gemm_t*), float* c, uint16_t* a, uint16_t* b,
                       int32_t trans_a, int32_t trans_b, int64_t c_rows, int64_t c_cols, int64_t a_rows,
                       int64_t a_cols, int64_t b_rows, int64_t b_cols, int64_t ldc, int64_t lda, int64_t ldb) {
  if (!(septran_cpu_units() & unit)) {
    /* A kernel ignores what its leaves return: one that reaches a CPU without the unit (a binary moved to
     * another machine; SepTran refuses the binding there) gets the widened product, never an untouched C. */
    int32_t err = septran_cpu_gemm_tiles(c, a, b, SEPTRAN_CPU_BF16, trans_a, trans_b, (int32_t)c_rows,
                                         (int32_t)c_cols, (int32_t)a_rows, (int32_t)a_cols, (int32_t)b_rows,
                                         (int32_t)b_cols, (int32_t)ldc, (int32_t)lda, (int32_t)ldb);
    return err ? err : SEPTRAN_CPU_E_UNIT;
  }
  gemm_t g;
  int32_t err = gemm_args(&g, c, a, b, trans_a, trans_b, c_rows, c_cols, a_rows, a_cols, b_rows, b_cols, ldc, lda,
                          ldb);
  if (err || !g.m || !g.n || !g.k) return err;
  return run(&g);
}

int32_t septran_cpu_gemm_avx512bf16_bf16(float* c, uint16_t* a, uint16_t* b, int32_t trans_a, int32_t trans_b,
                                         int64_t c_rows, int64_t c_cols, int64_t a_rows, int64_t a_cols,
                                         int64_t b_rows, int64_t b_cols, int64_t ldc, int64_t lda, int64_t ldb) {
  return gemm_on(SEPTRAN_CPU_UNIT_AVX512BF16, avx512_gemm, c, a, b, trans_a, trans_b, c_rows, c_cols, a_rows,
                 a_cols, b_rows, b_cols, ldc, lda, ldb);
}

int32_t septran_cpu_gemm_amx_bf16(float* c, uint16_t* a, uint16_t* b, int32_t trans_a, int32_t trans_b,
                                  int64_t c_rows, int64_t c_cols, int64_t a_rows, int64_t a_cols, int64_t b_rows,
                                  int64_t b_cols, int64_t ldc, int64_t lda, int64_t ldb) {
  return gemm_on(SEPTRAN_CPU_UNIT_AMX, amx_gemm, c, a, b, trans_a, trans_b, c_rows, c_cols, a_rows, a_cols, b_rows,
                 b_cols, ldc, lda, ldb);
}
