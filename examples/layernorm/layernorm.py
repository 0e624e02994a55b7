"""LayerNorm over the last dimension: Y = (X - mean) / sqrt(var + eps) * W + B.

The algorithm only; mappings/<target>/layernorm.yaml say how. A program takes
a block of rows and walks them in column tiles: it sums X into a tile-shaped
accumulator and reduces it once (the mean), does the same with (X - mean)^2
(the variance, two passes as Triton's tutorial does, for accuracy), then
writes the output tile by tile. ``eps`` is a scalar argument: kernel(x, w, b, eps=1e-6).
"""
from septran import task


@task.define(leaf=True)
def ln_clear(acc):
    task.compute(acc, lambda i, j: 0.0)


@task.define(leaf=True)
def ln_add(acc, X):  # padding past the row's end is zero, so plain sums need no mask
    task.compute(acc, lambda i, j: acc[i, j] + X[i, j])


@task.define(leaf=True)
def ln_add_square_dev(acc, X, mean):
    inside = lambda j: task.global_index(X, 1, j) < task.global_size(X, 1)  # noqa: E731
    task.compute(acc, lambda i, j: acc[i, j] + task.where(inside(j), (X[i, j] - mean[i]) * (X[i, j] - mean[i]), 0.0))


@task.define(leaf=True)
def ln_mean(mean, acc, X):  # X: only its row length is used
    task.call_primitive("row_sum", mean, acc)
    task.compute(mean, lambda i: mean[i] / task.global_size(X, 1))


@task.define(leaf=True)
def ln_rstd(rstd, acc, X, eps=1e-5):
    task.call_primitive("row_sum", rstd, acc)
    task.compute(rstd, lambda i: task.rsqrt(rstd[i] / task.global_size(X, 1) + eps))


@task.define(leaf=True)
def ln_write(Y, X, W, B, mean, rstd):
    task.compute(Y, lambda i, j: (X[i, j] - mean[i]) * rstd[i] * W[j] + B[j])


@task.define
def layernorm_rows(Y, X, W, B, eps=1e-5):  # a block of rows, every column
    Xp = task.partition(X, by="blocks", tile=(None, "BN"))
    Yp = task.partition(Y, by="blocks", tile=(None, "BN"))
    Wp = task.partition(W, by="blocks", tile=("BN",))
    Bp = task.partition(B, by="blocks", tile=("BN",))
    acc = task.temp(X.shape[0], "BN")
    mean = task.temp(X.shape[0])
    rstd = task.temp(X.shape[0])
    task.launch(ln_clear, acc)
    for k in task.range(Xp.shape[1]):
        task.launch(ln_add, acc, Xp[0, k])
    task.launch(ln_mean, mean, acc, X)
    task.launch(ln_clear, acc)
    for k in task.range(Xp.shape[1]):
        task.launch(ln_add_square_dev, acc, Xp[0, k], mean)
    task.launch(ln_rstd, rstd, acc, X, eps)
    for k in task.range(Xp.shape[1]):
        task.launch(ln_write, Yp[0, k], Xp[0, k], Wp[k], Bp[k], mean, rstd)


@task.define
def layernorm_logic(Y, X, W, B, eps=1e-5):
    Yp = task.partition(Y, by="blocks", tile=("BM", None))
    Xp = task.partition(X, by="blocks", tile=("BM", None))
    for i in task.parallel_range(Yp.shape[0]):  # parallel: may become the grid
        task.launch(layernorm_rows, Yp[i, 0], Xp[i, 0], W, B, eps)
