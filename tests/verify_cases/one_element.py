"""A one-element read: Y = X * s[()], s a tensor of shape (1,) read whole in every block."""
from septran import task


@task.define(leaf=True)
def rows_scale(Y, X, s):
    task.compute(Y, lambda i, j: X[i, j] * s[()])  # <- one element


@task.define
def rows_block(Y, X, s):  # a block of rows, every column
    task.launch(rows_scale, Y, X, s)


@task.define
def rows_logic(Y, X, s):
    Yp = task.partition(Y, by="blocks", tile=("BM", None))
    Xp = task.partition(X, by="blocks", tile=("BM", None))
    for i in task.parallel_range(Yp.shape[0]):
        task.launch(rows_block, Yp[i, 0], Xp[i, 0], s)
