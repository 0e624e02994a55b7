"""A compute inside a loop of no iterations: Y = X, the update never happens."""
from septran import task


@task.define(leaf=True)
def rows_copy(Y, X):
    task.compute(Y, lambda i, j: X[i, j])


@task.define(leaf=True)
def rows_update(Y, X):
    task.compute(Y, lambda i, j: Y[i, j] + X[i, j] + 1.0)


@task.define
def rows_block(Y, X):  # a block of rows, every column
    task.launch(rows_copy, Y, X)
    for k in task.range(0):  # <- empty range
        task.launch(rows_update, Y, X)


@task.define
def rows_logic(Y, X):
    Yp = task.partition(Y, by="blocks", tile=("BM", None))
    Xp = task.partition(X, by="blocks", tile=("BM", None))
    for i in task.parallel_range(Yp.shape[0]):
        task.launch(rows_block, Yp[i, 0], Xp[i, 0])
