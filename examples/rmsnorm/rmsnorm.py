"""RMSNorm over the last dimension: Y = X / sqrt(mean(X^2) + eps) * W.

The algorithm only; mappings/<target>/rmsnorm.yaml say how. A program takes a
block of rows, sums X^2 over column tiles into a tile-shaped accumulator,
reduces it once, then writes the output tile by tile. ``eps`` is a scalar
argument: kernel(x, w, eps=1e-5).
"""
from septran import task


@task.define(leaf=True)
def rms_clear(acc):
    task.compute(acc, lambda i, j: 0.0)


@task.define(leaf=True)
def rms_add_square(acc, X):  # padding past the row's end is zero and adds nothing
    task.compute(acc, lambda i, j: acc[i, j] + X[i, j] * X[i, j])


@task.define(leaf=True)
def rms_rstd(rstd, acc, X, eps=1e-6):  # X: only its row length is used
    task.call_primitive("row_sum", rstd, acc)
    task.compute(rstd, lambda i: task.rsqrt(rstd[i] / task.global_size(X, 1) + eps))


@task.define(leaf=True)
def rms_write(Y, X, W, rstd):
    task.compute(Y, lambda i, j: X[i, j] * rstd[i] * W[j])


@task.define
def rmsnorm_rows(Y, X, W, eps=1e-6):  # a block of rows, every column
    Xp = task.partition(X, by="blocks", tile=(None, "BN"))
    Yp = task.partition(Y, by="blocks", tile=(None, "BN"))
    Wp = task.partition(W, by="blocks", tile=("BN",))
    acc = task.temp(X.shape[0], "BN")
    rstd = task.temp(X.shape[0])
    task.launch(rms_clear, acc)
    for k in task.range(Xp.shape[1]):
        task.launch(rms_add_square, acc, Xp[0, k])
    task.launch(rms_rstd, rstd, acc, X, eps)
    for k in task.range(Xp.shape[1]):
        task.launch(rms_write, Yp[0, k], Xp[0, k], Wp[k], rstd)


@task.define
def rmsnorm_logic(Y, X, W, eps=1e-6):
    Yp = task.partition(Y, by="blocks", tile=("BM", None))
    Xp = task.partition(X, by="blocks", tile=("BM", None))
    for i in task.parallel_range(Yp.shape[0]):  # parallel: may become the grid
        task.launch(rmsnorm_rows, Yp[i, 0], Xp[i, 0], W, eps)
