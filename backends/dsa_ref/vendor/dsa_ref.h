/* dsa_ref.h -- runtime library of the reference DSA (vendor C API, modelled on the host CPU).
 *
 * ===== The device =====================================================================
 *
 *   - one on-chip SCRATCHPAD of DSA_REF_SCRATCH_BYTES (256 KiB). A scratchpad address is an
 *     int32_t BYTE OFFSET into it. Every byte a call touches must lie in [0, 262144): an
 *     access past the end is an error (DSA_REF_E_RANGE). An address must be aligned to the
 *     size of the elements stored there (DSA_REF_E_ALIGN).
 *   - a DMA ENGINE that moves 2-D tiles between global memory and the scratchpad. It is
 *     ASYNCHRONOUS (see below).
 *   - a MATRIX UNIT that multiplies scratchpad tiles in blocks of
 *     DSA_REF_MMA_M x DSA_REF_MMA_N x DSA_REF_MMA_K = 16 x 16 x 16.
 *
 * ===== Layouts and element types ======================================================
 *
 *   - A TILE of rows x cols in the scratchpad is ROW-MAJOR and DENSE: element (r, c) is at
 *     byte  addr + (r * cols + c) * elem_size.
 *   - A tile in GLOBAL memory is row-major with a row stride `ld` counted in ELEMENTS:
 *     element (r, c) is at  ptr + (r * ld + c) * elem_size.
 *   - dtype codes: DSA_REF_F32 = 0 (IEEE binary32, 4 bytes),
 *                  DSA_REF_F16 = 1 (IEEE binary16, 2 bytes; passed as uint16_t bits / void*).
 *     float32 -> float16 conversion rounds to nearest, ties to even; overflow gives inf.
 *
 * ===== Asynchrony =====================================================================
 *
 *   dsa_ref_dma_load and dsa_ref_dma_store only QUEUE a transfer and return at once. Neither
 *   the scratchpad (load) nor global memory (store) is guaranteed to hold the new data until
 *   dsa_ref_sync() returns. The model takes this literally: queued transfers are performed
 *   at dsa_ref_sync(), so a program that computes on a tile before syncing its load
 *   computes on STALE scratchpad data, and a program that returns before syncing its store
 *   leaves global memory unwritten (dsa_ref_pending() tells). Transfers queued together are
 *   NOT ordered with respect to each other (think of several DMA channels): a store that
 *   reads what a queued load writes needs a sync in between. The global buffer of a queued
 *   transfer is read or written at the sync: it must stay valid (and, for a load, unchanged)
 *   until then.
 *   The queue holds DSA_REF_DMA_QUEUE_DEPTH transfers. Issuing one more without a sync makes
 *   the engine drain the queue early; debug mode reports it, because the program relied on
 *   timing rather than on dsa_ref_sync().
 *   dsa_ref_fill_zero*, dsa_ref_mma are SYNCHRONOUS: done when they return.
 *
 * ===== Errors (sticky) ================================================================
 *
 *   Kernels usually ignore return codes, so errors are sticky. A failing call
 *     - returns its nonzero error code (DSA_REF_E_*), prints nothing, and has no effect;
 *     - records its message if no error is recorded yet (the FIRST error wins; later ones
 *       are only counted and mentioned at the end of the first one's message).
 *   The host calls dsa_ref_take_error() after a kernel to fetch and clear it.
 *
 * ===== Debug mode =====================================================================
 *
 *   dsa_ref_set_debug(1), or DSA_REF_DEBUG=1 in the environment (read at the first call into
 *   the library that needs it, unless dsa_ref_set_debug was called before), checks every
 *   scratchpad access against the transfers queued since the last dsa_ref_sync() and
 *   reports (a "violation"):
 *     - a READ of scratchpad bytes that a queued load will write (dsa_ref_mma reading A, B
 *       or C, a store whose source a queued load writes);
 *     - a WRITE of scratchpad bytes that a queued transfer will read or write (dsa_ref_mma's
 *       C, dsa_ref_fill_zero*, a load onto a tile a queued load/store has not finished with);
 *     - a queue that filled up without a sync (see Asynchrony).
 *   Only scratchpad bytes are checked, not global memory. A violation is not an error: the
 *   call still runs (on stale data, as the hardware would). Violations are counted; the
 *   text of the first one since the last clear is kept and printed once to stderr.
 *   dsa_ref_take_violations() returns the count and that text and clears both;
 *   dsa_ref_debug_violations() does the same without the text.
 *
 * ===== Threads ========================================================================
 *
 *   Each host thread has its OWN device: scratchpad, DMA queue, recorded error and debug
 *   violations are per thread, so kernels may run on several threads at once, and
 *   dsa_ref_take_error(), dsa_ref_take_violations() and dsa_ref_reset() act on the calling
 *   thread's device (call them on the thread that ran the kernel). The debug setting
 *   (dsa_ref_set_debug, DSA_REF_DEBUG) is one for the whole process.
 *
 * All functions a kernel calls take only int32_t and pointer arguments and return int32_t,
 * so a kernel may declare them itself (extern "C", e.g. with half* for void*).
 */
#ifndef DSA_REF_H
#define DSA_REF_H
#include <stdint.h>

#define DSA_REF_SCRATCH_BYTES 262144
#define DSA_REF_MMA_M 16
#define DSA_REF_MMA_N 16
#define DSA_REF_MMA_K 16
#define DSA_REF_DMA_QUEUE_DEPTH 64

/* dtype codes */
#define DSA_REF_F32 0
#define DSA_REF_F16 1

/* error codes (returned by a failing call, and by dsa_ref_take_error) */
#define DSA_REF_OK 0
#define DSA_REF_E_DTYPE 1     /* unknown dtype code                                        */
#define DSA_REF_E_SHAPE 2     /* empty/negative tile, valid part larger than the tile, ld  */
#define DSA_REF_E_RANGE 3     /* bytes outside the scratchpad                              */
#define DSA_REF_E_ALIGN 4     /* scratchpad address not aligned to the element size        */
#define DSA_REF_E_NULL 5      /* null global pointer for a non-empty transfer              */
#define DSA_REF_E_MMA_SHAPE 6 /* m, n or k not a positive multiple of the matrix unit's    */
#define DSA_REF_E_ALIAS 7     /* dsa_ref_mma: C overlaps A or B                            */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- data movement (asynchronous) -------------------------------------------------- */

/* Queue a load of a rows x cols tile of `dtype` from global memory at `src` (row stride
 * `src_ld` elements) into the scratchpad at byte offset `spad_dst`. Only the top-left
 * valid_rows x valid_cols elements are read from `src` (0 <= valid_rows <= rows,
 * 0 <= valid_cols <= cols, src_ld >= valid_cols when valid_rows > 1); the rest of the tile is
 * written with zeros (a tile that overhangs its tensor). Complete after dsa_ref_sync(). */
int32_t dsa_ref_dma_load(int32_t spad_dst, void* src, int32_t dtype, int32_t rows, int32_t cols,
                         int32_t src_ld, int32_t valid_rows, int32_t valid_cols);

/* Queue a store of the top-left valid_rows x valid_cols part of the rows x cols tile of
 * `src_dtype` at scratchpad offset `spad_src` into global memory at `dst` (row stride `dst_ld`
 * elements, elements of `dst_dtype`), converting each element (e.g. a float32 accumulator to
 * a float16 output). Global elements outside the valid part are not written. Complete after
 * dsa_ref_sync(). */
int32_t dsa_ref_dma_store(void* dst, int32_t dst_dtype, int32_t spad_src, int32_t src_dtype, int32_t rows,
                          int32_t cols, int32_t dst_ld, int32_t valid_rows, int32_t valid_cols);

/* Perform every queued transfer; on return all of them are complete. Returns 0. */
int32_t dsa_ref_sync(void);

/* Number of transfers issued since the last dsa_ref_sync() (queued or drained early). A
 * kernel that returns with this nonzero forgot its final sync. */
int32_t dsa_ref_pending(void);

/* ---- compute (synchronous) --------------------------------------------------------- */

/* Zero the rows x cols tile of `dtype` at scratchpad offset `spad`. */
int32_t dsa_ref_fill_zero(int32_t spad, int32_t dtype, int32_t rows, int32_t cols);

/* Zero `bytes` bytes (>= 0) of the scratchpad from offset `spad`. */
int32_t dsa_ref_fill_zero_bytes(int32_t spad, int32_t bytes);

/* C[m, n] += A[m, k] @ B[k, n] on the matrix unit. C is float32 at `spad_c`; A and B are of
 * `in_dtype` (float32 or float16) at `spad_a`, `spad_b`; all three are dense row-major tiles.
 * Products and sums are float32. m, n, k must be positive multiples of DSA_REF_MMA_M, _N,
 * _K (16); C must not overlap A or B (A and B may overlap each other). */
int32_t dsa_ref_mma(int32_t spad_c, int32_t spad_a, int32_t spad_b, int32_t in_dtype, int32_t m, int32_t n,
                    int32_t k);

/* ---- host side: errors, debug mode, reset ------------------------------------------ */

/* Return the recorded error's code (0 if none), copy its message (NUL-terminated, truncated
 * to len - 1 characters; "" if none) into buf when buf != NULL and len > 0, and clear it. */
int32_t dsa_ref_take_error(char* buf, int32_t len);

/* Switch debug mode on (on != 0) or off; returns the previous setting (0/1). Overrides
 * DSA_REF_DEBUG. */
int32_t dsa_ref_set_debug(int32_t on);

/* Return the number of debug violations since the last clear, copy the first one's text into
 * buf (as dsa_ref_take_error does), and clear count and text. */
int32_t dsa_ref_take_violations(char* buf, int32_t len);

/* dsa_ref_take_violations(NULL, 0). */
int32_t dsa_ref_debug_violations(void);

/* Fresh device: zero the scratchpad, DROP queued transfers (they are never performed), clear
 * the error and the violations. The debug setting is kept. */
void dsa_ref_reset(void);

#ifdef __cplusplus
}
#endif
#endif /* DSA_REF_H */
