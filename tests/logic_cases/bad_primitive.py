from septran import task


@task.define(leaf=True)
def typo(C, A, B):
    task.call_primitive("gemn", C, A, B)  # <- unknown primitive


@task.define
def not_leaf(C, A, B):
    task.call_primitive("gemm", C, A, B)  # <- not a leaf
