from septran import task


@task.define
def compute_not_leaf(Y, X):
    task.compute(Y, lambda i, j: X[i, j])  # <- not a leaf


@task.define(leaf=True)
def temp_in_leaf(Y, X):
    S = task.temp(4, 4)  # <- temp in leaf
    task.compute(Y, lambda i, j: S[i, j])


@task.define(leaf=True)
def leaf(Y, X):
    task.compute(Y, lambda i, j: X[i, j])


@task.define
def temp_unnamed(Y, X):
    task.launch(leaf, Y, task.temp(4, 4))  # <- unnamed temp


@task.define(leaf=True)
def stencil(Y, X):
    task.compute(Y, lambda i, j: X[i + j, j])  # <- stencil


@task.define(leaf=True)
def index_as_value(Y, X):
    task.compute(Y, lambda i, j: X[i, j] * j)  # <- index as value


@task.define(leaf=True)
def two_orders(Y, X):
    task.compute(Y, lambda i, j: X[i, j] + X[i])  # <- two orders


@task.define(leaf=True)
def output_transposed(Y, X):
    task.compute(Y, lambda i, j: Y[j, i] + X[i, j])  # <- output transposed


@task.define(leaf=True)
def bad_arity(Y, X):
    task.compute(Y, lambda i, j: task.exp(X[i, j], X[i, j]))  # <- arity


@task.define
def size_of_a_tile(Y, X):
    Xp = task.partition(X, by="blocks", tile=("BM", "BN"))
    for k in task.range(task.global_size(Xp[0, 0], 1)):  # <- size of a tile
        task.launch(leaf, Y, Xp[0, k])


def make_leaked_scalar():
    @task.define
    def outer(Y, X, eps=1e-5):
        @task.define(leaf=True)
        def inner(Y, X):
            task.compute(Y, lambda i, j: X[i, j] + eps)  # <- leaked scalar

        task.launch(inner, Y, X)

    return outer


@task.define(leaf=True)
def scaled(Y, X, s=1.0):
    task.compute(Y, lambda i, j: X[i, j] * s)


@task.define
def bad_scalar_arg(Y, X):
    task.launch(scaled, Y, X, "two")  # <- scalar arg



def make_leaked_tensor():
    @task.define
    def outer(Y, X):
        @task.define(leaf=True)
        def inner(Y):
            task.compute(Y, lambda i, j: X[i, j])  # <- leaked tensor

        task.launch(inner, Y)

    return outer
