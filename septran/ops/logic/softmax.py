"""Softmax and log-softmax over the last dimension, for rows of any length.

The algorithm only; mappings/<target>/softmax.yaml say how. Two algorithms, and
each target's mapping names the one it runs by its entry task (``task_name``):

``softmax_logic`` (online): a program takes a block of rows and walks them in
column tiles twice: an online pass keeps each row's running maximum m and sum l
of exp(x - m) (rescaling l when m grows), then a second pass writes
exp(x - m) / l, or x - m - log(l). Two passes over memory, exp twice per
element: for GPUs, where a pass over global memory costs more than an exp.

``softmax_cached_logic`` (exp once): the row's maximum first, then exp(x - m)
once per element, summed and written, then the row scaled by 1 / sum (log-softmax:
x - m - log(sum)). Three passes over the row, which a CPU program keeps in its
caches (a block of rows at a time): there an exp costs more than a pass.
``softmax(...)`` returns the online entry task and carries the other as
``.alternatives``, built with the same arguments, so a mapping may name either.
"""
from septran import task

NEG_INF = float("-inf")


def softmax(log: bool = False, axis: int = -1, rank: int = 2):
    """The entry task: softmax, or log-softmax when ``log``, over ``axis`` of a tensor of ``rank`` dimensions."""
    if rank not in (2, 3, 4) or not -rank <= axis < rank:
        raise ValueError(f"softmax over axis {axis} of rank {rank}: rank is 2, 3 or 4 and axis one of its dimensions")
    if (axis % rank, rank) != (1, 2):
        online = _softmax_any(log, axis % rank, rank)
    else:
        online = _softmax_last(log)
    online.alternatives = {"softmax_cached_logic": _softmax_cached(log, axis % rank, rank)}
    return online


def _softmax_last(log: bool):
    """The online algorithm over the last axis of a 2-D tensor."""

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


def each(rank: int, fn):
    """``fn`` as a function of ``rank`` indices, the form ``task.compute`` takes."""
    return [lambda a: fn(a), lambda a, b: fn(a, b), lambda a, b, c: fn(a, b, c),
            lambda a, b, c, d: fn(a, b, c, d)][rank - 1]


def _softmax_any(log: bool, axis: int, rank: int):
    """The same algorithm over any axis: a program owns BM elements along the last kept dimension (one along the
    others) and walks the reduced axis in tiles of BN; the running max and sum have X's kept dimensions."""
    kept = [d for d in range(rank) if d != axis]
    inner = kept[-1]

    def drop(ix):  # the statistics' indices: X's less the reduced one
        return tuple(i for d, i in enumerate(ix) if d != axis)

    @task.define(leaf=True)
    def softmax_start(m, l):
        task.compute(m, each(rank - 1, lambda *ix: NEG_INF))
        task.compute(l, each(rank - 1, lambda *ix: 0.0))

    @task.define(leaf=True)
    def softmax_stats(m, m_prev, l, S, X):
        task.compute(m_prev, each(rank - 1, lambda *ix: m[ix]))
        task.compute(S, each(rank, lambda *ix: task.where(
            task.global_index(X, axis, ix[axis]) < task.global_size(X, axis), X[ix], NEG_INF)))
        task.call_primitive("reduce_max", m, S, axis=axis, rank=rank)
        task.compute(l, each(rank - 1, lambda *ix: l[ix] * task.exp(m_prev[ix] - m[ix])))
        task.compute(S, each(rank, lambda *ix: task.exp(S[ix] - m[drop(ix)])))
        task.compute(m_prev, each(rank - 1, lambda *ix: 0.0))
        task.call_primitive("reduce_sum", m_prev, S, axis=axis, rank=rank)
        task.compute(l, each(rank - 1, lambda *ix: l[ix] + m_prev[ix]))

    @task.define(leaf=True)
    def softmax_write(Y, X, m, l):
        if log:
            task.compute(Y, each(rank, lambda *ix: X[ix] - m[drop(ix)] - task.log(l[drop(ix)])))
        else:
            task.compute(Y, each(rank, lambda *ix: task.exp(X[ix] - m[drop(ix)]) / l[drop(ix)]))

    @task.define
    def softmax_rows(Y, X):  # BM elements along the last kept dimension, all of the reduced axis
        walk = tuple("BN" if d == axis else None for d in range(rank))
        Xp = task.partition(X, by="blocks", tile=walk)
        Yp = task.partition(Y, by="blocks", tile=walk)
        stats = [X.shape[d] for d in kept]
        m = task.temp(*stats)  # running maximum
        m_prev = task.temp(*stats)
        l = task.temp(*stats)  # running sum of exp(x - m)
        S = task.temp(*(X.shape[d] if d != axis else "BN" for d in range(rank)))
        at = lambda k: tuple(k if d == axis else 0 for d in range(rank))  # noqa: E731
        task.launch(softmax_start, m, l)
        for k in task.range(Xp.shape[axis]):
            task.launch(softmax_stats, m, m_prev, l, S, Xp[at(k)])
        for k in task.range(Xp.shape[axis]):
            task.launch(softmax_write, Yp[at(k)], Xp[at(k)], m, l)

    @task.define
    def softmax_logic(Y, X):
        tile = tuple("BM" if d == inner else None if d == axis else 1 for d in range(rank))
        Yp = task.partition(Y, by="blocks", tile=tile)
        Xp = task.partition(X, by="blocks", tile=tile)
        for ix in task.parallel_range(tuple(Yp.shape[d] for d in kept)):  # parallel: may become the grid
            at = dict(zip(kept, ix if isinstance(ix, tuple) else (ix,)))
            where = tuple(at.get(d, 0) for d in range(rank))
            task.launch(softmax_rows, Yp[where], Xp[where])

    return softmax_logic


def _softmax_cached(log: bool, axis: int, rank: int):
    """Exp once per element (see the module's docstring), over any axis: a program owns BM elements along the last
    kept dimension (one along the others) and walks the reduced axis in tiles of BN, three times."""
    kept = [d for d in range(rank) if d != axis]
    inner = kept[-1]

    def drop(ix):  # the statistics' indices: X's less the reduced one
        return tuple(i for d, i in enumerate(ix) if d != axis)

    def inside(X, ix):  # the element lies in the tensor (the last tile may overhang the reduced axis)
        return task.global_index(X, axis, ix[axis]) < task.global_size(X, axis)

    stat = lambda fn: each(rank - 1, fn)  # noqa: E731
    elem = lambda fn: each(rank, fn)  # noqa: E731
    rows = (axis, rank) == (1, 2)  # a matrix's rows: the row primitives (vector code on a CPU)

    def fold(op, out, X):  # out = op(out, op over the axis of X)
        if rows:
            task.call_primitive("row_max", out, X) if op == "max" else task.call_primitive("row_sum", out, X)
        else:
            task.call_primitive(f"reduce_{op}", out, X, axis=axis, rank=rank)

    @task.define(leaf=True)
    def softmax_cached_start(m, l):
        task.compute(m, stat(lambda *ix: NEG_INF))
        task.compute(l, stat(lambda *ix: 0.0))

    if rows:
        @task.define(leaf=True)
        def softmax_cached_max(m, X):  # the row primitive reduces the tile's part inside the tensor: no copy
            fold("max", m, X)
    else:
        @task.define(leaf=True)
        def softmax_cached_max(m, S, X):  # fold one tile into the maximum (columns past the end count as -inf)
            task.compute(S, elem(lambda *ix: task.where(inside(X, ix), X[ix], NEG_INF)))
            fold("max", m, S)

    def exp_tile(s, l, S, X, m):  # S = exp(x - m), 0 past the end (exp(-inf)); l += its sum
        # The select inside the exp, not around it: a conditional exp stays a branch in C, which g++ does not vectorise.
        task.compute(S, elem(lambda *ix: task.exp(task.where(inside(X, ix), X[ix], NEG_INF) - m[drop(ix)])))
        if not rows:  # row_sum clears s itself
            task.compute(s, stat(lambda *ix: 0.0))
        fold("sum", s, S)
        task.compute(l, stat(lambda *ix: l[ix] + s[ix]))

    if rows:
        @task.define(leaf=True)
        def softmax_cached_exp(Y, s, l, X, m):  # the exps written to Y (its part inside the tensor), then summed
            # from it: one pass less than through S and a copy (Y's row is still in L1 for the sum and the scaling).
            # Log-softmax overwrites them in its write pass: through S, whose tile overhangs the row, each element
            # was selected before its exp (512 x 4097, 1 thread, Zen 4: 1.6 -> 1.2 ms).
            task.compute(Y, elem(lambda *ix: task.exp(X[ix] - m[drop(ix)])))
            fold("sum", s, Y)
            task.compute(l, stat(lambda *ix: l[ix] + s[ix]))
    elif log:
        @task.define(leaf=True)
        def softmax_cached_exp(s, l, S, X, m):
            exp_tile(s, l, S, X, m)
    else:
        @task.define(leaf=True)
        def softmax_cached_exp(Y, s, l, S, X, m):  # the exps written as they are summed
            exp_tile(s, l, S, X, m)
            task.compute(Y, elem(lambda *ix: S[ix]))

    if log:
        @task.define(leaf=True)
        def softmax_cached_norm(l):
            task.compute(l, stat(lambda *ix: task.log(l[ix])))

        @task.define(leaf=True)
        def softmax_cached_write(Y, X, m, l):
            task.compute(Y, elem(lambda *ix: X[ix] - m[drop(ix)] - l[drop(ix)]))
    else:
        @task.define(leaf=True)
        def softmax_cached_norm(l):  # one division per row; the elements are multiplied
            task.compute(l, stat(lambda *ix: 1.0 / l[ix]))

        @task.define(leaf=True)
        def softmax_cached_write(Y, X, m, l):  # Y holds the exps: where it held them rounded, they are computed again
            # (a 16-bit row walked in tiles stores its exps; scaling them read back rounds twice, torch once)
            task.compute(Y, elem(lambda *ix: task.recomputable(Y[ix], task.exp(X[ix] - m[drop(ix)])) * l[drop(ix)]))

    @task.define
    def softmax_cached_rows(Y, X):
        walk = tuple("BN" if d == axis else None for d in range(rank))
        Xp = task.partition(X, by="blocks", tile=walk)
        Yp = task.partition(Y, by="blocks", tile=walk)
        stats = [X.shape[d] for d in kept]
        m = task.temp(*stats)  # the maximum
        l = task.temp(*stats)  # the sum of exp(x - m), then 1 / sum (log-softmax: log(sum))
        s = task.temp(*stats)  # one tile's sum
        # A tile of exps (any axis's but a matrix's rows, whose exps go into Y and leave S unused: the mappings name S
        # for both).
        S = task.temp(*(X.shape[d] if d != axis else "BN" for d in range(rank)))
        at = lambda k: tuple(k if d == axis else 0 for d in range(rank))  # noqa: E731
        task.launch(softmax_cached_start, m, l)
        for k in task.range(Xp.shape[axis]):
            task.launch(softmax_cached_max, m, Xp[at(k)]) if rows else task.launch(softmax_cached_max, m, S, Xp[at(k)])
        for k in task.range(Xp.shape[axis]):
            if rows:
                task.launch(softmax_cached_exp, Yp[at(k)], s, l, Xp[at(k)], m)
            elif log:
                task.launch(softmax_cached_exp, s, l, S, Xp[at(k)], m)
            else:
                task.launch(softmax_cached_exp, Yp[at(k)], s, l, S, Xp[at(k)], m)
        task.launch(softmax_cached_norm, l)
        for k in task.range(Xp.shape[axis]):
            task.launch(softmax_cached_write, Yp[at(k)], Xp[at(k)], m, l)

    @task.define
    def softmax_cached_logic(Y, X):
        tile = tuple("BM" if d == inner else None if d == axis else 1 for d in range(rank))
        Yp = task.partition(Y, by="blocks", tile=tile)
        Xp = task.partition(X, by="blocks", tile=tile)
        for ix in task.parallel_range(tuple(Yp.shape[d] for d in kept)):  # parallel: may become the grid
            at = dict(zip(kept, ix if isinstance(ix, tuple) else (ix,)))
            where = tuple(at.get(d, 0) for d in range(rank))
            task.launch(softmax_cached_rows, Yp[where], Xp[where])

    return softmax_cached_logic


softmax_logic = softmax()  # what `septran.compile(logic_file=...)` finds
softmax_cached_logic = softmax_logic.alternatives["softmax_cached_logic"]  # the exp-once algorithm (CPU mappings)
