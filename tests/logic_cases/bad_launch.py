from septran import task


@task.define(leaf=True)
def leaf(C, A, B):
    task.call_primitive("gemm", C, A, B)


@task.define
def host(C, A, B):
    Cp = task.partition(C, by="blocks", tile=("BM", "BN"))
    for i, j in task.parallel_range(Cp.shape):
        task.launch(leaf, Cp[i, j], A)  # <- error here


def helper(C, A, B):
    pass


@task.define
def launches_non_task(C, A, B):
    task.launch(helper, C, A, B)  # <- not a task
