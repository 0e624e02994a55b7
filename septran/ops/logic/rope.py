"""Rotary position embedding (RoPE), NeoX's "rotate_half" form: the algorithm only.

    Y = X * C + rotate_half(X) * S,   rotate_half(X) = concat(-X[..., half:], X[..., :half])

X is (batch, seq, heads, head_dim); C and S, the cos and sin tables, are
(seq, head_dim) (a table of (seq, head_dim / 2) repeated twice, as
transformers builds it). A program takes a block of positions with every head
and the whole head dimension; the element j of the first half reads X at
j + half, of the second half at j - half: index arithmetic, which the
verification proves inside the tile on each side of the task.where.
A second algorithm, ``rope_heads_logic``, takes a block of BH heads per program as well (GPU mappings name
it: TileLang 0.1.15 lays out no tile whose head count is not a power of two, and a block of heads can be one).
mappings/<target>/rope.yaml say how.
"""
from septran import task


@task.define(leaf=True)
def rope_rows(Y, X, C, S):
    half = X.shape[3] // 2  # the tile holds the whole head dimension
    task.compute(Y, lambda b, s, h, j: X[b, s, h, j] * C[s, j] + S[s, j] * task.where(
        task.global_index(X, 3, j) < half, -X[b, s, h, j + half], X[b, s, h, j - half]))


@task.define
def rope_block(Y, X, C, S):  # one program: a block of positions, every head (or a block of them)
    task.launch(rope_rows, Y, X, C, S)


@task.define
def rope_logic(Y, X, C, S):
    Yp = task.partition(Y, by="blocks", tile=(1, "BS", None, None))
    Xp = task.partition(X, by="blocks", tile=(1, "BS", None, None))
    Cp = task.partition(C, by="blocks", tile=("BS", None))
    Sp = task.partition(S, by="blocks", tile=("BS", None))
    for b, s in task.parallel_range((Yp.shape[0], Yp.shape[1])):  # parallel: the grid
        task.launch(rope_block, Yp[b, s, 0, 0], Xp[b, s, 0, 0], Cp[s, 0], Sp[s, 0])


@task.define
def rope_heads_logic(Y, X, C, S):
    """The same, the heads in blocks of BH too: a program per block of positions and block of heads."""
    Yp = task.partition(Y, by="blocks", tile=(1, "BS", "BH", None))
    Xp = task.partition(X, by="blocks", tile=(1, "BS", "BH", None))
    Cp = task.partition(C, by="blocks", tile=("BS", None))
    Sp = task.partition(S, by="blocks", tile=("BS", None))
    for b, s, h in task.parallel_range((Yp.shape[0], Yp.shape[1], Yp.shape[2])):  # parallel: the grid
        task.launch(rope_block, Yp[b, s, h, 0], Xp[b, s, h, 0], Cp[s, 0], Sp[s, 0])
