/* ACME NPU runtime, C API.
 *
 * The NPU has 128 KiB of tightly coupled memory (TCM). Software describes each
 * tile it keeps there with a *tile descriptor* (address, shape, dtype) and then
 * names the tile by the descriptor's handle in every call. Tiles in TCM are
 * COLUMN-MAJOR. The matrix engine multiplies tiles whose M and N are
 * multiples of 32 and K a multiple of 8.
 *
 * dtype codes: ACME_F16 = 1, ACME_F32 = 2.
 *
 * Transfers (acme_xfer_in / acme_xfer_out) are asynchronous: they complete at
 * acme_fence(). Engine calls (acme_zero, acme_matmul_acc) run at once.
 *
 * Errors are sticky; acme_take_error() returns the first one and clears it.
 * Debug mode (acme_set_debug(1) or ACME_DEBUG=1) counts every engine access to
 * a tile that an unfenced transfer is still moving; acme_debug_violations()
 * returns and clears the count.
 */
#ifndef ACME_NPU_H
#define ACME_NPU_H
#include <stdint.h>

#define ACME_TCM_BYTES 131072
#define ACME_MAX_DESCRIPTORS 16
#define ACME_MXU_M 32
#define ACME_MXU_N 32
#define ACME_MXU_K 8
#define ACME_F16 1
#define ACME_F32 2

#ifdef __cplusplus
extern "C" {
#endif

/* Describe a rows x cols tile at tcm_addr; returns its handle (>= 1), or a negative error. */
int32_t acme_tile_desc(int32_t tcm_addr, int32_t rows, int32_t cols, int32_t dtype);
/* Queue global (row-major, row stride in elements) -> TCM tile; zero outside valid_rows x valid_cols. */
int32_t acme_xfer_in(int32_t handle, void* src, int32_t src_row_stride, int32_t valid_rows, int32_t valid_cols);
/* Queue TCM tile -> global (row-major), the valid part only, converting to dst_dtype. */
int32_t acme_xfer_out(void* dst, int32_t dst_row_stride, int32_t dst_dtype, int32_t handle, int32_t valid_rows,
                      int32_t valid_cols);
/* Complete every queued transfer. */
int32_t acme_fence(void);
int32_t acme_zero(int32_t handle);
/* acc (ACME_F32, M x N) += lhs (M x K) @ rhs (K x N); lhs and rhs share a dtype. */
int32_t acme_matmul_acc(int32_t acc, int32_t lhs, int32_t rhs);
/* Forget every descriptor (at the end of a program). */
int32_t acme_release_all(void);

int32_t acme_take_error(char* buf, int32_t len);
void acme_set_debug(int32_t on);
int32_t acme_debug_violations(void);
void acme_reset(void);

#ifdef __cplusplus
}
#endif
#endif
