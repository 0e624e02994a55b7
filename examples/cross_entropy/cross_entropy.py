"""Cross-entropy per row: loss[i] = logsumexp(X[i, :]) - X[i, Y[i]], Y holding int64 class ids.

The algorithm only; mappings/<target>/cross_entropy.yaml say how. A program
takes a block of rows and walks them in column tiles once, keeping each row's
running maximum m and sum l of exp(x - m) (online softmax) and the logit of
the row's class, picked by a masked row sum: the column's global index and
Y[i] are compared as integers, so no class id is ever rounded through a float.
"""
from septran import task

NEG_INF = float("-inf")


@task.define(leaf=True)
def ce_start(m, l, p):
    task.compute(m, lambda i: NEG_INF)
    task.compute(l, lambda i: 0.0)
    task.compute(p, lambda i: 0.0)


@task.define(leaf=True)
def ce_stats(m, m_prev, l, p, S, X, Y):  # fold one column tile into the running max, sum and picked logit
    task.compute(m_prev, lambda i: m[i])
    # Columns past the row's end (the last tile may overhang it) must not count.
    task.compute(S, lambda i, j: task.where(task.global_index(X, 1, j) < task.global_size(X, 1), X[i, j], NEG_INF))
    task.call_primitive("row_max", m, S)
    task.compute(l, lambda i: l[i] * task.exp(m_prev[i] - m[i]))
    task.compute(S, lambda i, j: task.exp(S[i, j] - m[i]))
    task.call_primitive("row_sum", m_prev, S)  # m_prev is free now: it holds the tile's sum
    task.compute(l, lambda i: l[i] + m_prev[i])
    # The logit of the row's class, where this tile holds it: an integer comparison.
    task.compute(S, lambda i, j: task.where(task.global_index(X, 1, j) == Y[i], X[i, j], 0.0))
    task.call_primitive("row_sum", m_prev, S)
    task.compute(p, lambda i: p[i] + m_prev[i])


@task.define(leaf=True)
def ce_write(L, m, l, p):
    task.compute(L, lambda i: m[i] + task.log(l[i]) - p[i])


@task.define
def ce_rows(L, X, Y):  # a block of rows, every column
    Xp = task.partition(X, by="blocks", tile=(None, "BN"))
    m = task.temp(X.shape[0])  # running row maximum
    m_prev = task.temp(X.shape[0])
    l = task.temp(X.shape[0])  # running sum of exp(x - m)
    p = task.temp(X.shape[0])  # the logit of the row's class
    S = task.temp(X.shape[0], "BN")
    task.launch(ce_start, m, l, p)
    for k in task.range(Xp.shape[1]):
        task.launch(ce_stats, m, m_prev, l, p, S, Xp[0, k], Y)
    task.launch(ce_write, L, m, l, p)


@task.define(dtype={"L": "float32"})
def cross_entropy_logic(L, X, Y):
    Lp = task.partition(L, by="blocks", tile=("BM",))
    Xp = task.partition(X, by="blocks", tile=("BM", None))
    Yp = task.partition(Y, by="blocks", tile=("BM",))
    for i in task.parallel_range(Lp.shape[0]):  # parallel: may become the grid
        task.launch(ce_rows, Lp[i], Xp[i, 0], Yp[i])
