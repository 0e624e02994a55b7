"""GEMM, C = A @ B: the algorithm only. No memory spaces, threads or tile sizes here;
each target's mapping (mappings/<target>/gemm.yaml) says how."""
from septran import task


@task.define(leaf=True)
def gemm_leaf_logic(C, A, B):
    task.call_primitive("gemm", C, A, B)  # C += A @ B on tiles


@task.define
def gemm_block_logic(C, A, B):
    Ap = task.partition(A, by="blocks", tile=("BM", "BK"))
    Bp = task.partition(B, by="blocks", tile=("BK", "BN"))
    for k in task.range(Ap.shape[1]):  # sequential: may be pipelined
        task.launch(gemm_leaf_logic, C, Ap[0, k], Bp[k, 0])


@task.define
def gemm_host_logic(C, A, B):
    Cp = task.partition(C, by="blocks", tile=("BM", "BN"))
    Ap = task.partition(A, by="blocks", tile=("BM", None))  # None: whole dim
    Bp = task.partition(B, by="blocks", tile=(None, "BN"))
    for i, j in task.parallel_range(Cp.shape):  # parallel: may become the grid
        task.launch(gemm_block_logic, Cp[i, j], Ap[i, 0], Bp[0, j])
