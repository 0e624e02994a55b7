"""RMSNorm over the last dimension: Y = X / sqrt(mean(X^2) + eps) * W.

The algorithm only; mappings/<target>/rmsnorm.yaml say how. A program takes a
block of rows, sums X^2 over column tiles into a tile-shaped accumulator,
reduces it once, then writes the output tile by tile. ``eps`` is a scalar
argument: kernel(x, w, eps=1e-5).

A second algorithm, ``rmsnorm_sums_logic``, which the CPU mapping names by its entry task (``rmsnorm(...)``
carries it as ``.alternatives``, built with the same arguments): each column tile's squares are summed by the
row primitive ``row_sum_squares`` straight away (over another axis: written into a float32 tile and reduced),
into a per-row running sum; no tile-shaped accumulator to clear and to read back on every element (a GPU's
accumulator lives in registers; a CPU's is memory).
"""
from septran import task


def rmsnorm(axis: int = -1, rank: int = 2):
    """The entry task over ``axis`` of a tensor of ``rank`` dimensions (W has that axis's length)."""
    _check(axis, rank)
    if (axis % rank, rank) == (1, 2):
        return rmsnorm_logic  # carries its alternative (set below, once)
    logic = _rmsnorm_any(axis % rank, rank)
    logic.alternatives = {"rmsnorm_sums_logic": _rmsnorm_sums(axis % rank, rank)}
    return logic


def _check(axis: int, rank: int) -> None:
    """Refuses a rank or axis the algorithms are not written for (before any loop runs over ``rank``)."""
    if rank not in (2, 3, 4) or not -rank <= axis < rank:
        raise ValueError(f"rmsnorm over axis {axis} of rank {rank}: rank is 2, 3 or 4 and axis one of its dimensions")


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


def each(rank: int, fn):
    """``fn`` as a function of ``rank`` indices, the form ``task.compute`` takes."""
    return [lambda a: fn(a), lambda a, b: fn(a, b), lambda a, b, c: fn(a, b, c),
            lambda a, b, c, d: fn(a, b, c, d)][rank - 1]


def _rmsnorm_any(axis: int, rank: int):
    """The same algorithm over any axis: a program owns BM elements along the last kept dimension (one along the
    others) and walks the normalised axis in tiles of BN; rstd has X's kept dimensions."""
    kept = [d for d in range(rank) if d != axis]
    inner = kept[-1]

    def drop(ix):  # rstd's indices: X's less the normalised one
        return tuple(i for d, i in enumerate(ix) if d != axis)

    @task.define(leaf=True)
    def rms_clear(acc):
        task.compute(acc, each(rank, lambda *ix: 0.0))

    @task.define(leaf=True)
    def rms_add_square(acc, X):  # padding past the end is zero and adds nothing
        task.compute(acc, each(rank, lambda *ix: acc[ix] + X[ix] * X[ix]))

    @task.define(leaf=True)
    def rms_rstd(rstd, acc, X, eps=1e-6):  # X: only its length along the axis is used
        task.compute(rstd, each(rank - 1, lambda *ix: 0.0))
        task.call_primitive("reduce_sum", rstd, acc, axis=axis, rank=rank)
        task.compute(rstd, each(rank - 1, lambda *ix: task.rsqrt(rstd[ix] / task.global_size(X, axis) + eps)))

    @task.define(leaf=True)
    def rms_write(Y, X, W, rstd):
        task.compute(Y, each(rank, lambda *ix: X[ix] * rstd[drop(ix)] * W[ix[axis]]))

    @task.define
    def rmsnorm_rows(Y, X, W, eps=1e-6):  # BM elements along the last kept dimension, all of the axis
        walk = tuple("BN" if d == axis else None for d in range(rank))
        Xp = task.partition(X, by="blocks", tile=walk)
        Yp = task.partition(Y, by="blocks", tile=walk)
        Wp = task.partition(W, by="blocks", tile=("BN",))
        acc = task.temp(*(X.shape[d] if d != axis else "BN" for d in range(rank)))
        rstd = task.temp(*(X.shape[d] for d in kept))
        at = lambda k: tuple(k if d == axis else 0 for d in range(rank))  # noqa: E731
        task.launch(rms_clear, acc)
        for k in task.range(Xp.shape[axis]):
            task.launch(rms_add_square, acc, Xp[at(k)])
        task.launch(rms_rstd, rstd, acc, X, eps)
        for k in task.range(Xp.shape[axis]):
            task.launch(rms_write, Yp[at(k)], Xp[at(k)], Wp[k], rstd)

    @task.define
    def rmsnorm_logic(Y, X, W, eps=1e-6):
        tile = tuple("BM" if d == inner else None if d == axis else 1 for d in range(rank))
        Yp = task.partition(Y, by="blocks", tile=tile)
        Xp = task.partition(X, by="blocks", tile=tile)
        for ix in task.parallel_range(tuple(Yp.shape[d] for d in kept)):  # parallel: may become the grid
            at = dict(zip(kept, ix if isinstance(ix, tuple) else (ix,)))
            where = tuple(at.get(d, 0) for d in range(rank))
            task.launch(rmsnorm_rows, Yp[where], Xp[where], W, eps)

    return rmsnorm_logic


def _write_any(axis: int, rank: int, drop):
    """rms_write over any axis (``drop``: rstd's indices from X's)."""
    @task.define(leaf=True)
    def rms_write(Y, X, W, rstd):
        task.compute(Y, each(rank, lambda *ix: X[ix] * rstd[drop(ix)] * W[ix[axis]]))

    return rms_write


def _rmsnorm_sums(axis: int, rank: int):
    """The per-tile-sums algorithm (see the module's docstring) over any axis: a program owns BM elements along
    the last kept dimension (one along the others) and walks the normalised axis in tiles of BN, twice."""
    _check(axis, rank)
    kept = [d for d in range(rank) if d != axis]
    inner = kept[-1]
    rows = (axis, rank) == (1, 2)  # a matrix's rows: the row primitives (the vendor's vector code on a CPU)

    def drop(ix):  # rstd's indices: X's less the normalised one
        return tuple(i for d, i in enumerate(ix) if d != axis)

    stat = lambda fn: each(rank - 1, fn)  # noqa: E731
    elem = lambda fn: each(rank, fn)  # noqa: E731

    @task.define(leaf=True)
    def rms_sums_start(rstd):
        task.compute(rstd, stat(lambda *ix: 0.0))

    @task.define(leaf=True)
    def rms_sums_add_square(s, rstd, S, X):  # the sum of x^2 over the tile's part inside the tensor, into rstd
        if rows:  # squared as they are read (clears s): no tile S written and read back
            # Through S this was a store and a load per element, and it ran at the mercy of where S lay: on Zen 4 the
            # 4096x1024 rows at 1 thread took 1.5 to 2.3 ms by S's address modulo 4 KB against X's (inductor 1.3)
            task.call_primitive("row_sum_squares", s, X)
        else:  # S = x^2 (0 past the end)
            task.compute(S, elem(lambda *ix: X[ix] * X[ix]))
            task.compute(s, stat(lambda *ix: 0.0))
            task.call_primitive("reduce_sum", s, S, axis=axis, rank=rank)
        task.compute(rstd, stat(lambda *ix: rstd[ix] + s[ix]))

    @task.define(leaf=True)
    def rms_sums_rstd(rstd, X, eps=1e-6):  # rstd held the sum of squares; X: only its length along the axis
        task.compute(rstd, stat(lambda *ix: task.rsqrt(rstd[ix] / task.global_size(X, axis) + eps)))

    write = rms_write if rows else _write_any(axis, rank, drop)  # a matrix's rows: the first algorithm's own leaf

    @task.define
    def rmsnorm_sums_rows(Y, X, W, eps=1e-6):
        walk = tuple("BN" if d == axis else None for d in range(rank))
        Xp = task.partition(X, by="blocks", tile=walk)
        Yp = task.partition(Y, by="blocks", tile=walk)
        Wp = task.partition(W, by="blocks", tile=("BN",))
        stats = [X.shape[d] for d in kept]
        rstd = task.temp(*stats)  # the sum of squares, then 1 / sqrt(mean + eps)
        s = task.temp(*stats)  # one tile's sum
        S = task.temp(*(X.shape[d] if d != axis else "BN" for d in range(rank)))
        at = lambda k: tuple(k if d == axis else 0 for d in range(rank))  # noqa: E731
        task.launch(rms_sums_start, rstd)
        for k in task.range(Xp.shape[axis]):
            task.launch(rms_sums_add_square, s, rstd, S, Xp[at(k)])
        task.launch(rms_sums_rstd, rstd, X, eps)
        for k in task.range(Xp.shape[axis]):
            task.launch(write, Yp[at(k)], Xp[at(k)], Wp[k], rstd)

    @task.define
    def rmsnorm_sums_logic(Y, X, W, eps=1e-6):
        tile = tuple("BM" if d == inner else None if d == axis else 1 for d in range(rank))
        Yp = task.partition(Y, by="blocks", tile=tile)
        Xp = task.partition(X, by="blocks", tile=tile)
        for ix in task.parallel_range(tuple(Yp.shape[d] for d in kept)):  # parallel: may become the grid
            at = dict(zip(kept, ix if isinstance(ix, tuple) else (ix,)))
            where = tuple(at.get(d, 0) for d in range(rank))
            task.launch(rmsnorm_sums_rows, Yp[where], Xp[where], W, eps)

    return rmsnorm_sums_logic


rmsnorm_logic.alternatives = {"rmsnorm_sums_logic": _rmsnorm_sums(1, 2)}
rmsnorm_sums_logic = rmsnorm_logic.alternatives["rmsnorm_sums_logic"]  # the CPU mapping's algorithm
