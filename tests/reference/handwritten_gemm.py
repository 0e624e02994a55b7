"""TileLang's own GEMM example, written by hand: the baseline SepTran's output is compared with."""
from __future__ import annotations


def handwritten_gemm(M, N, K, block_M, block_N, block_K, num_stages, threads, dtype="float16", accum_dtype="float32"):
    """TileLang's GEMM example for GPUs (CUDA and HIP): the kernel SepTran's GPU output must equal."""
    import tilelang.language as T

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[k * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return main


def handwritten_gemm_cpu(M, N, K, block_M, block_N, block_K, dtype="float32", accum_dtype="float32"):
    """The same kernel in TileLang's CPU dialect (no threads; local arrays)."""
    import tilelang.cpu.language as T

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M)) as (bx, by):
            C_local = T.alloc_local((block_M, block_N), accum_dtype)
            A_local = T.alloc_local((block_M, block_K), dtype)
            B_local = T.alloc_local((block_K, block_N), dtype)
            T.clear(C_local)
            for k in T.serial(T.ceildiv(K, block_K)):
                T.copy(A[by * block_M, k * block_K], A_local)
                T.copy(B[k * block_K, bx * block_N], B_local)
                T.gemm(A_local, B_local, C_local)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return main
