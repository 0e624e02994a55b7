"""The seed GEMM written with `:` (a whole dimension) instead of 0 on the tiled-by-None axes."""
from septran import task


@task.define(leaf=True)
def gemm_leaf_logic(C, A, B):
    task.call_primitive("gemm", C, A, B)


@task.define
def gemm_block_logic(C, A, B):
    Ap = task.partition(A, by="blocks", tile=("BM", "BK"))
    Bp = task.partition(B, by="blocks", tile=("BK", "BN"))
    for k in task.range(Ap.shape[1]):
        task.launch(gemm_leaf_logic, C, Ap[0, k], Bp[k, 0])


@task.define
def gemm_host_logic(C, A, B):
    Cp = task.partition(C, by="blocks", tile=("BM", "BN"))
    Ap = task.partition(A, by="blocks", tile=("BM", "BK"))
    Bp = task.partition(B, by="blocks", tile=("BK", "BN"))
    for i, j in task.parallel_range(Cp.shape):
        task.launch(gemm_block_logic, Cp[i, j], Ap[i, :], Bp[:, j])
