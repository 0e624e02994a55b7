"""Softmax and log-softmax over the last dimension, for rows of any length.

The algorithm only; mappings/<target>/softmax.yaml say how. A program takes a
block of rows and walks them in column tiles twice: an online pass keeps each
row's running maximum m and sum l of exp(x - m) (rescaling l when m grows),
then a second pass writes exp(x - m) / l, or x - m - log(l).
"""
from septran import task

NEG_INF = float("-inf")


def softmax(log: bool = False):
    """The entry task: softmax, or log-softmax when ``log``."""

    @task.define(leaf=True)
    def softmax_start(m, l):
        task.compute(m, lambda i: NEG_INF)
        task.compute(l, lambda i: 0.0)

    @task.define(leaf=True)
    def softmax_stats(m, m_prev, l, S, X):  # fold one column tile into the running max and sum
        task.compute(m_prev, lambda i: m[i])
        # Columns past the row's end (the last tile may overhang it) must not count.
        task.compute(S, lambda i, j: task.where(task.global_index(X, 1, j) < task.global_size(X, 1), X[i, j], NEG_INF))
        task.call_primitive("row_max", m, S)
        task.compute(l, lambda i: l[i] * task.exp(m_prev[i] - m[i]))
        task.compute(S, lambda i, j: task.exp(S[i, j] - m[i]))
        task.call_primitive("row_sum", m_prev, S)  # m_prev is free now: it holds the tile's sum
        task.compute(l, lambda i: l[i] + m_prev[i])

    @task.define(leaf=True)
    def softmax_write(Y, X, m, l):
        if log:
            task.compute(Y, lambda i, j: X[i, j] - m[i] - task.log(l[i]))
        else:
            task.compute(Y, lambda i, j: task.exp(X[i, j] - m[i]) / l[i])

    @task.define
    def softmax_rows(Y, X):  # a block of rows, every column
        Xp = task.partition(X, by="blocks", tile=(None, "BN"))
        Yp = task.partition(Y, by="blocks", tile=(None, "BN"))
        m = task.temp(X.shape[0])  # running row maximum
        m_prev = task.temp(X.shape[0])
        l = task.temp(X.shape[0])  # running sum of exp(x - m)
        S = task.temp(X.shape[0], "BN")
        task.launch(softmax_start, m, l)
        for k in task.range(Xp.shape[1]):
            task.launch(softmax_stats, m, m_prev, l, S, Xp[0, k])
        for k in task.range(Xp.shape[1]):
            task.launch(softmax_write, Yp[0, k], Xp[0, k], m, l)

    @task.define
    def softmax_logic(Y, X):
        Yp = task.partition(Y, by="blocks", tile=("BM", None))
        Xp = task.partition(X, by="blocks", tile=("BM", None))
        for i in task.parallel_range(Yp.shape[0]):  # parallel: may become the grid
            task.launch(softmax_rows, Yp[i, 0], Xp[i, 0])

    return softmax_logic


softmax_logic = softmax()  # what `septran.compile(logic_file=...)` finds
