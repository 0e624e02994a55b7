"""RoPE's aliasing pattern: Y written whole by one leaf, then as two halves by the next two leaves.

Y = X, then Y1 = Y1 * cos - X2 * sin and Y2 = Y2 * cos + X1 * sin (one rotation
angle for every element, cos 0.6, sin 0.8), X1, X2 and Y1, Y2 the halves of a row.
The halves of Y are sub-tiles of a tile the block already holds: they must see
what the first leaf wrote, and the block must store what the last ones wrote.
"""
from septran import task

COS, SIN = 0.6, 0.8


@task.define(leaf=True)
def rope_copy(Y, X):
    task.compute(Y, lambda i, j: X[i, j])


@task.define(leaf=True)
def rope_first_half(Y1, X2):
    task.compute(Y1, lambda i, j: Y1[i, j] * COS - X2[i, j] * SIN)


@task.define(leaf=True)
def rope_second_half(Y2, X1):
    task.compute(Y2, lambda i, j: Y2[i, j] * COS + X1[i, j] * SIN)


@task.define
def rope_block(Y, X):  # a block of rows, every column
    Yh = task.partition(Y, by="blocks", tile=(None, "HALF"))  # <- halves of Y
    Xh = task.partition(X, by="blocks", tile=(None, "HALF"))
    task.launch(rope_copy, Y, X)  # <- whole
    task.launch(rope_first_half, Yh[0, 0], Xh[0, 1])
    task.launch(rope_second_half, Yh[0, 1], Xh[0, 0])


@task.define
def rope_logic(Y, X):
    Yp = task.partition(Y, by="blocks", tile=("BM", None))
    Xp = task.partition(X, by="blocks", tile=("BM", None))
    for i in task.parallel_range(Yp.shape[0]):  # parallel: may become the grid
        task.launch(rope_block, Yp[i, 0], Xp[i, 0])
