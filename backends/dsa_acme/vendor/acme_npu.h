/* acme_npu.h -- ACME NPU runtime, C API (modelled on the host CPU).
 *
 * ===== The device =====================================================================
 *
 *   - 128 KiB of tightly coupled memory, the TCM (ACME_TCM_BYTES). TCM addresses are int32_t
 *     byte offsets.
 *   - TILE DESCRIPTORS: software describes each tile it keeps in the TCM (address, rows,
 *     cols, dtype) with acme_tile_desc() and then names the tile by the returned HANDLE
 *     (a small integer, 1 .. ACME_MAX_DESCRIPTORS) in every other call. The table holds
 *     ACME_MAX_DESCRIPTORS descriptors; acme_release_all() empties it (at a kernel's end).
 *     Descriptors may alias (describe overlapping TCM bytes).
 *   - a TRANSFER ENGINE between global memory and the TCM (asynchronous, see below).
 *   - a MATRIX ENGINE (MXU) computing acc += lhs @ rhs with M, N multiples of 32 and
 *     K a multiple of 8 (ACME_MXU_M, ACME_MXU_N, ACME_MXU_K).
 *
 * ===== Layouts and element types ======================================================
 *
 *   - Tiles in the TCM are COLUMN-MAJOR and dense: element (r, c) of a rows x cols tile is at
 *     byte  addr + (c * rows + r) * elem_size.
 *   - Global memory is ROW-MAJOR with a row stride in ELEMENTS: (r, c) is at
 *     ptr + (r * row_stride + c) * elem_size. The transfer engine transposes on the way.
 *   - dtype codes: ACME_F16 = 1 (IEEE binary16, 2 bytes, uint16_t bits / void*),
 *                  ACME_F32 = 2 (IEEE binary32, 4 bytes).
 *     float32 -> float16 rounds to nearest, ties to even; overflow gives inf.
 *
 * ===== Asynchrony =====================================================================
 *
 *   acme_xfer_in / acme_xfer_out QUEUE a transfer and return at once; it is guaranteed
 *   complete only after acme_fence(). The model performs queued transfers at the fence: an
 *   engine call on a tile whose xfer_in was not fenced computes on STALE TCM data, and a
 *   result whose xfer_out was not fenced is not in global memory yet (acme_pending() tells).
 *   Queued transfers are not ordered among themselves. The global buffer of a queued transfer
 *   is used at the fence: it must stay valid (and, for xfer_in, unchanged) until then. The queue holds
 *   ACME_XFER_QUEUE_DEPTH transfers; one more without a fence drains it early (reported in
 *   debug mode). acme_zero and acme_matmul_acc are SYNCHRONOUS.
 *
 * ===== Errors (sticky) ================================================================
 *
 *   A failing call returns the NEGATIVE of its error code (-ACME_E_*), prints nothing, has
 *   no effect, and records its message if no error is recorded yet (the first error wins;
 *   later ones are counted). acme_take_error() returns the POSITIVE code and the message,
 *   and clears them. (Negative, so that acme_tile_desc's handle and its errors never mix.)
 *
 * ===== Debug mode =====================================================================
 *
 *   acme_set_debug(1), or ACME_DEBUG=1 in the environment (read at the first call that needs
 *   it unless acme_set_debug came first), checks every TCM access against the unfenced
 *   transfers and reports a "violation" for
 *     - an engine READ (acme_matmul_acc's lhs, rhs, acc; the source of an acme_xfer_out) of
 *       TCM bytes that an unfenced acme_xfer_in writes;
 *     - a WRITE (acme_zero, acme_matmul_acc's acc, acme_xfer_in) of TCM bytes that an
 *       unfenced transfer reads or writes;
 *     - a queue that filled up without a fence, and acme_release_all() with unfenced
 *       transfers.
 *   Checks are by TCM byte ranges, so aliasing descriptors are caught too. A violation is
 *   not an error: the call still runs (on stale data). The first violation's text since the
 *   last clear is kept and printed once to stderr. acme_take_violations() returns the count
 *   and that text and clears both; acme_debug_violations() does so without the text.
 *
 * ===== Threads ========================================================================
 *
 *   Each host thread has its OWN NPU: TCM, descriptor table, transfer queue, recorded error
 *   and debug violations are per thread, so kernels may run on several threads at once, and
 *   acme_take_error(), acme_take_violations() and acme_reset() act on the calling thread's
 *   NPU (call them on the thread that ran the kernel). The debug setting (acme_set_debug,
 *   ACME_DEBUG) is one for the whole process.
 *
 * Every function a kernel calls takes only int32_t and pointer arguments and returns int32_t.
 */
#ifndef ACME_NPU_H
#define ACME_NPU_H
#include <stdint.h>

#define ACME_TCM_BYTES 131072
#define ACME_MAX_DESCRIPTORS 16
#define ACME_XFER_QUEUE_DEPTH 32
#define ACME_MXU_M 32
#define ACME_MXU_N 32
#define ACME_MXU_K 8

/* dtype codes */
#define ACME_F16 1
#define ACME_F32 2

/* error codes: a failing call returns -code; acme_take_error returns code */
#define ACME_OK 0
#define ACME_E_DTYPE 1      /* unknown dtype code, or a dtype the call does not take         */
#define ACME_E_SHAPE 2      /* empty tile, valid part larger than the tile, shapes disagree  */
#define ACME_E_RANGE 3      /* tile outside the TCM                                          */
#define ACME_E_ALIGN 4      /* TCM address not aligned to the element size                   */
#define ACME_E_HANDLE 5     /* not a live descriptor handle                                  */
#define ACME_E_TABLE_FULL 6 /* all ACME_MAX_DESCRIPTORS descriptors in use                   */
#define ACME_E_MXU_SHAPE 7  /* M, N, K not multiples of the MXU's 32 x 32 x 8                */
#define ACME_E_NULL 8       /* null global pointer for a non-empty transfer                  */
#define ACME_E_ALIAS 9      /* acme_matmul_acc: acc overlaps lhs or rhs                      */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- descriptors ------------------------------------------------------------------- */

/* Describe a rows x cols tile of `dtype` at TCM byte offset `tcm_addr` (column-major, must lie
 * in the TCM and be aligned to the element size). Returns its handle (>= 1), or -code. */
int32_t acme_tile_desc(int32_t tcm_addr, int32_t rows, int32_t cols, int32_t dtype);

/* Forget every descriptor (call at a kernel's end). Unfenced transfers are completed first
 * (a debug violation). Returns 0. */
int32_t acme_release_all(void);

/* ---- transfers (asynchronous) ------------------------------------------------------ */

/* Queue global -> TCM into tile `handle`: reads the top-left valid_rows x valid_cols elements
 * of the tile's dtype from `src` (row-major, row stride `src_row_stride` elements, at least
 * valid_cols when valid_rows > 1) and writes zeros to the rest of the tile. */
int32_t acme_xfer_in(int32_t handle, void* src, int32_t src_row_stride, int32_t valid_rows, int32_t valid_cols);

/* Queue TCM -> global: the top-left valid_rows x valid_cols part of tile `handle` to `dst`
 * (row-major, row stride `dst_row_stride` elements), converted to `dst_dtype` (e.g. a float32
 * accumulator to float16). Nothing outside the valid part is written. */
int32_t acme_xfer_out(void* dst, int32_t dst_row_stride, int32_t dst_dtype, int32_t handle, int32_t valid_rows,
                      int32_t valid_cols);

/* Complete every queued transfer. Returns 0. */
int32_t acme_fence(void);

/* Transfers issued since the last fence (or release_all). */
int32_t acme_pending(void);

/* ---- engine (synchronous) ---------------------------------------------------------- */

/* Zero tile `handle`. */
int32_t acme_zero(int32_t handle);

/* acc += lhs @ rhs, shapes from the descriptors: acc is M x N float32, lhs M x K and rhs K x N
 * of one dtype (float16 or float32); float32 products and sums. M, N multiples of 32, K of 8.
 * acc must not overlap lhs or rhs. */
int32_t acme_matmul_acc(int32_t acc, int32_t lhs, int32_t rhs);

/* ---- host side --------------------------------------------------------------------- */

/* Return the recorded error's (positive) code, 0 if none; copy its message into buf
 * (NUL-terminated, at most len - 1 characters, "" if none) when buf != NULL and len > 0;
 * clear it. */
int32_t acme_take_error(char* buf, int32_t len);

/* Debug mode on (on != 0) or off; returns the previous setting. Overrides ACME_DEBUG. */
int32_t acme_set_debug(int32_t on);

/* Return the number of debug violations since the last clear, copy the first one's text into
 * buf, clear both. */
int32_t acme_take_violations(char* buf, int32_t len);

/* acme_take_violations(NULL, 0). */
int32_t acme_debug_violations(void);

/* Fresh device: zero the TCM, drop descriptors and queued transfers (never performed), clear
 * error and violations. The debug setting is kept. */
void acme_reset(void);

#ifdef __cplusplus
}
#endif
#endif /* ACME_NPU_H */
