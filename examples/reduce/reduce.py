"""Reductions over any axis: Y = sum (max, min) of X over one axis, X of rank 1 to 4.

The algorithm only; mappings/<target>/reduce.yaml say how. Each program owns
a tile of Y (a block of BN along Y's last dimension, one element along the
others) and walks the reduced axis of X in tiles of BK, folding each into an
accumulator: column sums of a matrix are ``reduce("sum", axis=0)``, row sums
``reduce("sum", axis=1)``.
"""
from septran import task

IDENTITY = {"sum": 0.0, "max": float("-inf"), "min": float("inf")}


def each(rank: int, fn):
    """``fn`` as a function of ``rank`` indices, the form ``task.compute`` takes."""
    return [lambda a: fn(a), lambda a, b: fn(a, b), lambda a, b, c: fn(a, b, c),
            lambda a, b, c, d: fn(a, b, c, d)][rank - 1]


def reduce(op: str = "sum", axis: int = 0, rank: int = 2):
    """The entry task: Y = op over ``axis`` of X, X of ``rank`` dimensions (Y has the others, in order)."""
    if op not in IDENTITY or rank not in (2, 3, 4):
        raise ValueError("op is sum, max or min; rank 2, 3 or 4")
    axis %= rank
    kept = [d for d in range(rank) if d != axis]  # X's dimensions that Y keeps
    inner = kept[-1]  # blocked by BN; the others by 1

    @task.define(leaf=True)
    def reduce_start(acc):
        task.compute(acc, each(rank - 1, lambda *ix: IDENTITY[op]))

    @task.define(leaf=True)
    def reduce_fold(acc, S, X):  # fold one tile of X into the accumulator
        if op == "sum":  # a tile's overhang reads 0 where it is staged: nothing to mask
            task.call_primitive("reduce_sum", acc, X, axis=axis, rank=rank)
        else:  # elements past the end of the reduced axis must not count
            task.compute(S, each(rank, lambda *ix: task.where(
                task.global_index(X, axis, ix[axis]) < task.global_size(X, axis), X[ix], IDENTITY[op])))
            task.call_primitive("reduce_" + op, acc, S, axis=axis, rank=rank)

    @task.define(leaf=True)
    def reduce_write(Y, acc):
        task.compute(Y, each(rank - 1, lambda *ix: acc[ix]))

    @task.define
    def reduce_block(Y, X):  # one tile of Y, the whole reduced axis of X
        Xp = task.partition(X, by="blocks", tile=tuple("BK" if d == axis else None for d in range(rank)))
        acc = task.temp(*(Y.shape[k] for k in range(rank - 1)))
        S = task.temp(*(X.shape[d] if d != axis else "BK" for d in range(rank)))
        task.launch(reduce_start, acc)
        for k in task.range(Xp.shape[axis]):
            task.launch(reduce_fold, acc, S, Xp[tuple(k if d == axis else 0 for d in range(rank))])
        task.launch(reduce_write, Y, acc)

    @task.define
    def reduce_logic(Y, X):
        Yp = task.partition(Y, by="blocks", tile=tuple("BN" if d == inner else 1 for d in kept))
        Xp = task.partition(X, by="blocks", tile=tuple("BN" if d == inner else None if d == axis else 1
                                                       for d in range(rank)))
        for ix in task.parallel_range(Yp.shape):  # parallel: may become the grid
            ix = ix if isinstance(ix, tuple) else (ix,)
            at = dict(zip(kept, ix))
            task.launch(reduce_block, Yp[ix], Xp[tuple(at.get(d, 0) for d in range(rank))])

    return reduce_logic


reduce_logic = reduce()  # what `septran.compile(logic_file=...)` finds: column sums of a matrix
