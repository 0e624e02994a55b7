"""Batched GEMM, C[b] = A[b] @ B[b]: the algorithm only. Each target's
mapping (mappings/<target>/bmm.yaml) says how."""
from septran import task


@task.define(leaf=True)
def bmm_leaf_logic(C, A, B):
    task.call_primitive("gemm", C, A, B)  # C[b] += A[b] @ B[b] on tiles of one batch entry


@task.define
def bmm_block_logic(C, A, B):
    Ap = task.partition(A, by="blocks", tile=(1, "BM", "BK"))
    Bp = task.partition(B, by="blocks", tile=(1, "BK", "BN"))
    for k in task.range(Ap.shape[2]):  # sequential: may be pipelined
        task.launch(bmm_leaf_logic, C, Ap[0, 0, k], Bp[0, k, 0])


@task.define
def bmm_host_logic(C, A, B):
    Cp = task.partition(C, by="blocks", tile=(1, "BM", "BN"))
    Ap = task.partition(A, by="blocks", tile=(1, "BM", None))
    Bp = task.partition(B, by="blocks", tile=(1, None, "BN"))
    for b, i, j in task.parallel_range(Cp.shape):  # parallel: may become the grid
        task.launch(bmm_block_logic, Cp[b, i, j], Ap[b, i, 0], Bp[b, 0, j])
