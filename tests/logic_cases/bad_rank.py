from septran import task


@task.define
def twice(C, A):
    Ap = task.partition(A, by="blocks", tile=("BM", "BK"))
    Aq = task.partition(A, by="blocks", tile=("BM", "BK", 1))  # <- error here


@task.define(leaf=True)
def leaf(C, A, B):
    task.call_primitive("gemm", C, A, B)


@task.define
def block(C, A, B):
    Cq = task.partition(C, by="blocks", tile=(16, 16, 16))  # <- callee rank error
    task.launch(leaf, C, A, B)


@task.define
def host(C, A, B):
    Cp = task.partition(C, by="blocks", tile=("BM", "BN"))
    for i, j in task.parallel_range(Cp.shape):
        task.launch(block, Cp[i, j], A, B)


@task.define
def tile_of_tile(C, A):
    Cp = task.partition(C, by="blocks", tile=("BM", "BN"))
    for i, j in task.parallel_range(Cp.shape):
        Cs = task.partition(Cp[i, j], by="blocks", tile=(1, 1, 1))  # <- tile of a tile
