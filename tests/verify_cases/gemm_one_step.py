"""GEMM whose block task has no sequential range: one leaf call takes the whole K of its tiles."""
from septran import task


@task.define(leaf=True)
def gemm_leaf_logic(C, A, B):
    task.call_primitive("gemm", C, A, B)


@task.define
def gemm_block_logic(C, A, B):  # no task.range: nothing to pipeline
    task.launch(gemm_leaf_logic, C, A, B)


@task.define
def gemm_host_logic(C, A, B):
    Cp = task.partition(C, by="blocks", tile=("BM", "BN"))
    Ap = task.partition(A, by="blocks", tile=("BM", None))
    Bp = task.partition(B, by="blocks", tile=(None, "BN"))
    for i, j in task.parallel_range(Cp.shape):
        task.launch(gemm_block_logic, Cp[i, j], Ap[i, 0], Bp[0, j])
