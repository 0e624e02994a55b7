"""A block that splits the C tile it gets into sub-tiles of SM rows."""
from septran import task


@task.define(leaf=True)
def leaf(C, A, B):
    task.call_primitive("gemm", C, A, B)


@task.define
def block(C, A, B):
    Cs = task.partition(C, by="blocks", tile=("SM", None))  # <- split
    As = task.partition(A, by="blocks", tile=("SM", None))
    for s in task.range(Cs.shape[0]):
        task.launch(leaf, Cs[s, 0], As[s, 0], B)


@task.define
def host(C, A, B):
    Cp = task.partition(C, by="blocks", tile=("BM", "BN"))
    Ap = task.partition(A, by="blocks", tile=("BM", None))
    Bp = task.partition(B, by="blocks", tile=(None, "BN"))
    for i, j in task.parallel_range(Cp.shape):
        task.launch(block, Cp[i, j], Ap[i, 0], Bp[0, j])
