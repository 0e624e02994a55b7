/* dsa_ref: the reference DSA's runtime library (a vendor C API, modelled on the CPU).
 *
 * The device has one on-chip scratchpad of DSA_REF_SCRATCH_BYTES bytes,
 * addressed by byte offsets, a DMA engine between global memory and the
 * scratchpad, and a matrix unit that works on scratchpad tiles.
 *
 *   Tiles in the scratchpad are row-major and dense (row stride = cols).
 *   dtype codes: DSA_REF_F32 = 0, DSA_REF_F16 = 1 (IEEE binary16 bits).
 *
 * Asynchrony: dsa_ref_dma_load / dsa_ref_dma_store only *queue* a transfer.
 * A transfer is guaranteed complete only after dsa_ref_sync(). Computing on
 * a tile before the sync that completes its load reads stale data.
 *
 * Errors are sticky: a failing call returns a nonzero code and records the
 * first error; dsa_ref_take_error() returns it (and its message) and clears it.
 *
 * Debug mode (dsa_ref_set_debug(1), or DSA_REF_DEBUG=1 in the environment):
 * every read or write of scratchpad bytes that a queued, unsynchronised
 * transfer will write or read is counted as a violation;
 * dsa_ref_debug_violations() returns the count and clears it.
 */
#ifndef DSA_REF_H
#define DSA_REF_H
#include <stdint.h>

#define DSA_REF_SCRATCH_BYTES 262144
#define DSA_REF_MMA_M 16
#define DSA_REF_MMA_N 16
#define DSA_REF_MMA_K 16
#define DSA_REF_F32 0
#define DSA_REF_F16 1

#ifdef __cplusplus
extern "C" {
#endif

/* Queue global -> scratchpad: a rows x cols tile at spad_dst from src (row stride src_ld
 * elements); only valid_rows x valid_cols are read, the rest of the tile is zero. */
int32_t dsa_ref_dma_load(int32_t spad_dst, void* src, int32_t dtype, int32_t rows, int32_t cols,
                         int32_t src_ld, int32_t valid_rows, int32_t valid_cols);
/* Queue scratchpad -> global: the valid part of a rows x cols tile, converting src_dtype to dst_dtype. */
int32_t dsa_ref_dma_store(void* dst, int32_t dst_dtype, int32_t spad_src, int32_t src_dtype, int32_t rows,
                          int32_t cols, int32_t dst_ld, int32_t valid_rows, int32_t valid_cols);
/* Complete every queued transfer, in order. */
int32_t dsa_ref_sync(void);
/* Zero a rows x cols tile. */
int32_t dsa_ref_fill_zero(int32_t spad, int32_t dtype, int32_t rows, int32_t cols);
/* C[m, n] (float32) += A[m, k] @ B[k, n] (in_dtype); m, n, k multiples of the unit's 16 x 16 x 16. */
int32_t dsa_ref_mma(int32_t spad_c, int32_t spad_a, int32_t spad_b, int32_t in_dtype, int32_t m, int32_t n, int32_t k);

int32_t dsa_ref_take_error(char* buf, int32_t len);
void dsa_ref_set_debug(int32_t on);
int32_t dsa_ref_debug_violations(void);
void dsa_ref_reset(void);

#ifdef __cplusplus
}
#endif
#endif
