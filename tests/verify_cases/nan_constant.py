"""A NaN constant in a compute: Y = X where X > 0, else NaN."""
from septran import task


@task.define(leaf=True)
def rows_copy(Y, X):
    task.compute(Y, lambda i, j: X[i, j])


@task.define(leaf=True)
def rows_update(Y, X):
    task.compute(Y, lambda i, j: task.where(Y[i, j] > 0.0, Y[i, j], float("nan")))  # <- nan


@task.define
def rows_block(Y, X):  # a block of rows, every column
    task.launch(rows_copy, Y, X)
    task.launch(rows_update, Y, X)


@task.define
def rows_logic(Y, X):
    Yp = task.partition(Y, by="blocks", tile=("BM", None))
    Xp = task.partition(X, by="blocks", tile=("BM", None))
    for i in task.parallel_range(Yp.shape[0]):
        task.launch(rows_block, Yp[i, 0], Xp[i, 0])
