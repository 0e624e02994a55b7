"""Column sums split across programs: Y[j] = sum_i X[i, j], the rows cut into slices of BP, one program per
(slice, block of BN columns). Each program sums its slice into an accumulator and adds that into Y's tile:
programs of one column block share it. The mapping says how they combine (`combine: atomic`), or the target
runs them one after another; Y starts from zeros (the program reads it before it writes it)."""
from septran import task


@task.define(leaf=True)
def split_start(acc):
    task.compute(acc, lambda j: 0.0)


@task.define(leaf=True)
def split_fold(acc, X):  # a tile's overhang reads 0: nothing to mask
    task.call_primitive("reduce_sum", acc, X, axis=0, rank=2)


@task.define(leaf=True)
def split_add(Y, acc):  # the combine: this program's partial sum added into Y
    task.compute(Y, lambda j: Y[j] + acc[j])


@task.define
def split_block(Y, X):  # one slice of BP rows, one block of BN columns
    Xp = task.partition(X, by="blocks", tile=("BK", None))
    acc = task.temp(Y.shape[0])
    task.launch(split_start, acc)
    for k in task.range(Xp.shape[0]):
        task.launch(split_fold, acc, Xp[k, 0])
    task.launch(split_add, Y, acc)


@task.define
def split_sum(Y, X):
    Yp = task.partition(Y, by="blocks", tile=("BN",))
    Xp = task.partition(X, by="blocks", tile=("BP", "BN"))
    for p, j in task.parallel_range((Xp.shape[0], Yp.shape[0])):  # programs p share Y's tile j
        task.launch(split_block, Yp[j], Xp[p, j])
