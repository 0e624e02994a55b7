"""A host task that launches a leaf directly, with no block task between them."""
from septran import task


@task.define(leaf=True)
def leaf(C, A, B):
    task.call_primitive("gemm", C, A, B)


@task.define
def host_logic(C, A, B):
    Cp = task.partition(C, by="blocks", tile=("BM", "BN"))
    Ap = task.partition(A, by="blocks", tile=("BM", None))
    Bp = task.partition(B, by="blocks", tile=(None, "BN"))
    for i, j in task.parallel_range(Cp.shape):
        task.launch(leaf, Cp[i, j], Ap[i, 0], Bp[0, j])  # <- host launches leaf
