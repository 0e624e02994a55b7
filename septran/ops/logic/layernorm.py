"""LayerNorm over the last dimension: Y = (X - mean) / sqrt(var + eps) * W + B.

The algorithm only; mappings/<target>/layernorm.yaml say how. A program takes
a block of rows and walks them in column tiles: it sums X into a tile-shaped
accumulator and reduces it once (the mean), does the same with (X - mean)^2
(the variance, two passes as Triton's tutorial does, for accuracy), then
writes the output tile by tile. ``eps`` is a scalar argument: kernel(x, w, b, eps=1e-6).

A second algorithm, ``layernorm_sums_logic``, which the CPU mapping names by its entry task
(``layernorm(...)`` carries it as ``.alternatives``, built with the same arguments): one walk for the
statistics, each column tile's mean and squared deviations from it (two passes over the tile, which the caches
hold) joined into the running mean and sum of squared deviations by Chan's formula (over a matrix's rows the
primitive ``row_moments`` reads the tile once, in place); then the walk that writes the output. No tile-shaped
accumulator to clear and read back (a GPU's accumulator lives in registers; a CPU's is memory), and X read once
for its statistics, not twice.
"""
from septran import task


def layernorm(axis: int = -1, rank: int = 2):
    """The entry task over ``axis`` of a tensor of ``rank`` dimensions (W and B have that axis's length)."""
    _check(axis, rank)
    if (axis % rank, rank) == (1, 2):
        return layernorm_logic  # carries its alternative (set below, once)
    logic = _layernorm_any(axis % rank, rank)
    logic.alternatives = {"layernorm_sums_logic": _layernorm_sums(axis % rank, rank)}
    return logic


def _check(axis: int, rank: int) -> None:
    """Refuses a rank or axis the algorithms are not written for (before any loop runs over ``rank``)."""
    if rank not in (2, 3, 4) or not -rank <= axis < rank:
        raise ValueError(f"layernorm over axis {axis} of rank {rank}: rank is 2, 3 or 4 and axis one of its dimensions")


@task.define(leaf=True)
def ln_clear(acc):
    task.compute(acc, lambda i, j: 0.0)


@task.define(leaf=True)
def ln_add(acc, X):  # padding past the row's end is zero, so plain sums need no mask
    task.compute(acc, lambda i, j: acc[i, j] + X[i, j])


@task.define(leaf=True)
def ln_add_square_dev(acc, X, mean):
    inside = lambda j: task.global_index(X, 1, j) < task.global_size(X, 1)  # noqa: E731
    # Past the row's end the deviation is 0: the mean stands in for x there. (A select of x, not of the square: a
    # select around the product stays a branch in C, which g++ does not vectorise on every CPU.)
    dev = lambda i, j: task.where(inside(j), X[i, j], mean[i]) - mean[i]  # noqa: E731
    task.compute(acc, lambda i, j: acc[i, j] + dev(i, j) * dev(i, j))


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


def each(rank: int, fn):
    """``fn`` as a function of ``rank`` indices, the form ``task.compute`` takes."""
    return [lambda a: fn(a), lambda a, b: fn(a, b), lambda a, b, c: fn(a, b, c),
            lambda a, b, c, d: fn(a, b, c, d)][rank - 1]


def _layernorm_any(axis: int, rank: int):
    """The same algorithm over any axis: a program owns BM elements along the last kept dimension (one along the
    others) and walks the normalised axis in tiles of BN; mean and rstd have X's kept dimensions."""
    kept = [d for d in range(rank) if d != axis]
    inner = kept[-1]

    def drop(ix):  # the statistics' indices: X's less the normalised one
        return tuple(i for d, i in enumerate(ix) if d != axis)

    @task.define(leaf=True)
    def ln_clear(acc):
        task.compute(acc, each(rank, lambda *ix: 0.0))

    @task.define(leaf=True)
    def ln_add(acc, X):  # padding past the end is zero, so plain sums need no mask
        task.compute(acc, each(rank, lambda *ix: acc[ix] + X[ix]))

    @task.define(leaf=True)
    def ln_add_square_dev(acc, X, mean):
        inside = lambda ix: task.global_index(X, axis, ix[axis]) < task.global_size(X, axis)  # noqa: E731
        dev = lambda ix: task.where(inside(ix), X[ix], mean[drop(ix)]) - mean[drop(ix)]  # noqa: E731 (0 past the end)
        task.compute(acc, each(rank, lambda *ix: acc[ix] + dev(ix) * dev(ix)))

    @task.define(leaf=True)
    def ln_mean(mean, acc, X):  # X: only its length along the axis is used
        task.compute(mean, each(rank - 1, lambda *ix: 0.0))
        task.call_primitive("reduce_sum", mean, acc, axis=axis, rank=rank)
        task.compute(mean, each(rank - 1, lambda *ix: mean[ix] / task.global_size(X, axis)))

    @task.define(leaf=True)
    def ln_rstd(rstd, acc, X, eps=1e-5):
        task.compute(rstd, each(rank - 1, lambda *ix: 0.0))
        task.call_primitive("reduce_sum", rstd, acc, axis=axis, rank=rank)
        task.compute(rstd, each(rank - 1, lambda *ix: task.rsqrt(rstd[ix] / task.global_size(X, axis) + eps)))

    @task.define(leaf=True)
    def ln_write(Y, X, W, B, mean, rstd):
        task.compute(Y, each(rank, lambda *ix: (X[ix] - mean[drop(ix)]) * rstd[drop(ix)] * W[ix[axis]] + B[ix[axis]]))

    @task.define
    def layernorm_rows(Y, X, W, B, eps=1e-5):  # BM elements along the last kept dimension, all of the axis
        walk = tuple("BN" if d == axis else None for d in range(rank))
        Xp = task.partition(X, by="blocks", tile=walk)
        Yp = task.partition(Y, by="blocks", tile=walk)
        Wp = task.partition(W, by="blocks", tile=("BN",))
        Bp = task.partition(B, by="blocks", tile=("BN",))
        acc = task.temp(*(X.shape[d] if d != axis else "BN" for d in range(rank)))
        mean = task.temp(*(X.shape[d] for d in kept))
        rstd = task.temp(*(X.shape[d] for d in kept))
        at = lambda k: tuple(k if d == axis else 0 for d in range(rank))  # noqa: E731
        task.launch(ln_clear, acc)
        for k in task.range(Xp.shape[axis]):
            task.launch(ln_add, acc, Xp[at(k)])
        task.launch(ln_mean, mean, acc, X)
        task.launch(ln_clear, acc)
        for k in task.range(Xp.shape[axis]):
            task.launch(ln_add_square_dev, acc, Xp[at(k)], mean)
        task.launch(ln_rstd, rstd, acc, X, eps)
        for k in task.range(Xp.shape[axis]):
            task.launch(ln_write, Yp[at(k)], Xp[at(k)], Wp[k], Bp[k], mean, rstd)

    @task.define
    def layernorm_logic(Y, X, W, B, eps=1e-5):
        tile = tuple("BM" if d == inner else None if d == axis else 1 for d in range(rank))
        Yp = task.partition(Y, by="blocks", tile=tile)
        Xp = task.partition(X, by="blocks", tile=tile)
        for ix in task.parallel_range(tuple(Yp.shape[d] for d in kept)):  # parallel: may become the grid
            at = dict(zip(kept, ix if isinstance(ix, tuple) else (ix,)))
            where = tuple(at.get(d, 0) for d in range(rank))
            task.launch(layernorm_rows, Yp[where], Xp[where], W, B, eps)

    return layernorm_logic


def _write_any(axis: int, rank: int, drop):
    """ln_write over any axis (``drop``: the statistics' indices from X's)."""
    @task.define(leaf=True)
    def ln_write(Y, X, W, B, mean, rstd):
        task.compute(Y, each(rank, lambda *ix: (X[ix] - mean[drop(ix)]) * rstd[drop(ix)] * W[ix[axis]] + B[ix[axis]]))

    return ln_write


def _layernorm_sums(axis: int, rank: int):
    """The per-tile statistics algorithm (see the module's docstring) over any axis: a program owns BM elements
    along the last kept dimension (one along the others) and walks the normalised axis in tiles of BN, twice."""
    _check(axis, rank)
    kept = [d for d in range(rank) if d != axis]
    inner = kept[-1]
    rows = (axis, rank) == (1, 2)  # a matrix's rows: the row primitives (the vendor's vector code on a CPU)

    def drop(ix):  # the statistics' indices: X's less the normalised one
        return tuple(i for d, i in enumerate(ix) if d != axis)

    def inside(X, ix):  # the element lies in the tensor (the last tile may overhang the axis)
        return task.global_index(X, axis, ix[axis]) < task.global_size(X, axis)

    stat = lambda fn: each(rank - 1, fn)  # noqa: E731
    elem = lambda fn: each(rank, fn)  # noqa: E731

    def tile_sum(s, S):  # s = the sum of S over the axis
        task.compute(s, stat(lambda *ix: 0.0))
        task.call_primitive("reduce_sum", s, S, axis=axis, rank=rank)

    @task.define(leaf=True)
    def ln_sums_start(mean, m2, count):
        task.compute(mean, stat(lambda *ix: 0.0))
        task.compute(m2, stat(lambda *ix: 0.0))
        task.compute(count, stat(lambda *ix: 0.0))

    if rows:
        @task.define(leaf=True)
        def ln_sums_add(mean, m2, count, X):  # the tile's statistics from one read of it, joined to the running ones
            task.call_primitive("row_moments", mean, m2, count, X)
    else:
        @task.define(leaf=True)
        def ln_sums_add(s, q, mean, m2, count, S, X):
            """The tile's mean s and squared deviations q (two passes over the tile, which the caches hold), joined to
            the running mean and m2 over count elements by Chan's formula."""
            n = task.minimum(X.shape[axis], task.global_size(X, axis) - task.global_offset(X, axis))  # inside the tensor
            task.compute(S, elem(lambda *ix: X[ix]))  # 0 past the end
            tile_sum(s, S)
            task.compute(s, stat(lambda *ix: s[ix] / n))
            dev = lambda ix: task.where(inside(X, ix), X[ix], s[drop(ix)]) - s[drop(ix)]  # noqa: E731 (0 past the end)
            task.compute(S, elem(lambda *ix: dev(ix) * dev(ix)))
            tile_sum(q, S)
            # (m2 first: it reads the mean and count the tile joins; then the mean, then the count)
            task.compute(m2, stat(lambda *ix: m2[ix] + q[ix] + (s[ix] - mean[ix]) * (s[ix] - mean[ix])
                                  * count[ix] * n / (count[ix] + n)))
            task.compute(mean, stat(lambda *ix: mean[ix] + (s[ix] - mean[ix]) * n / (count[ix] + n)))
            task.compute(count, stat(lambda *ix: count[ix] + n))

    @task.define(leaf=True)
    def ln_sums_rstd(rstd, X, eps=1e-5):  # rstd held the sum of squared deviations
        task.compute(rstd, stat(lambda *ix: task.rsqrt(rstd[ix] / task.global_size(X, axis) + eps)))

    write = ln_write if rows else _write_any(axis, rank, drop)  # a matrix's rows: the first algorithm's own leaf

    @task.define
    def layernorm_sums_rows(Y, X, W, B, eps=1e-5):
        walk = tuple("BN" if d == axis else None for d in range(rank))
        Xp = task.partition(X, by="blocks", tile=walk)
        Yp = task.partition(Y, by="blocks", tile=walk)
        Wp = task.partition(W, by="blocks", tile=("BN",))
        Bp = task.partition(B, by="blocks", tile=("BN",))
        stats = [X.shape[d] for d in kept]
        mean = task.temp(*stats)
        rstd = task.temp(*stats)  # the sum of squared deviations, then 1 / sqrt(variance + eps)
        count = task.temp(*stats)  # the elements joined so far
        s = task.temp(*stats)  # one tile's mean (s, q and S: unused over a matrix's rows)
        q = task.temp(*stats)  # one tile's squared deviations from its mean
        S = task.temp(*(X.shape[d] if d != axis else "BN" for d in range(rank)))
        at = lambda k: tuple(k if d == axis else 0 for d in range(rank))  # noqa: E731
        task.launch(ln_sums_start, mean, rstd, count)
        for k in task.range(Xp.shape[axis]):
            if rows:
                task.launch(ln_sums_add, mean, rstd, count, Xp[at(k)])
            else:
                task.launch(ln_sums_add, s, q, mean, rstd, count, S, Xp[at(k)])
        task.launch(ln_sums_rstd, rstd, X, eps)
        for k in task.range(Xp.shape[axis]):
            task.launch(write, Yp[at(k)], Xp[at(k)], Wp[k], Bp[k], mean, rstd)

    @task.define
    def layernorm_sums_logic(Y, X, W, B, eps=1e-5):
        tile = tuple("BM" if d == inner else None if d == axis else 1 for d in range(rank))
        Yp = task.partition(Y, by="blocks", tile=tile)
        Xp = task.partition(X, by="blocks", tile=tile)
        for ix in task.parallel_range(tuple(Yp.shape[d] for d in kept)):  # parallel: may become the grid
            at = dict(zip(kept, ix if isinstance(ix, tuple) else (ix,)))
            where = tuple(at.get(d, 0) for d in range(rank))
            task.launch(layernorm_sums_rows, Yp[where], Xp[where], W, B, eps)

    return layernorm_sums_logic


layernorm_logic.alternatives = {"layernorm_sums_logic": _layernorm_sums(1, 2)}
layernorm_sums_logic = layernorm_logic.alternatives["layernorm_sums_logic"]  # the CPU mapping's algorithm
