"""2-D convolution as an implicit GEMM, NHWC, stride 1, over an input the caller has padded ("valid"):

    Y[n, h, w, co] = sum_{kh, kw, ci} X[n, h + kh, w + kw, ci] * W[kh, kw, ci, co]

X: (N, H, W, Ci), W: (KH, KW, Ci, Co), Y: (N, H - KH + 1, W - KW + 1, Co); Y's shape is the caller's
(kernel.specialize(X=x, W=w, Y=y)): no input has it. The algorithm only; mappings/<target>/conv2d.yaml
say how. A program computes BW output pixels of one output row. For each filter tap (kh, kw) the BW
input pixels under them, shifted by the tap, are a window of X: a BW x Ci matrix which, times the
Ci x Co matrix W[kh, kw], adds the tap's share to Y: a GEMM per tap, tiled over the channels.
"""
from septran import task


@task.define(leaf=True)
def conv2d_leaf_logic(Y, X, W):
    task.call_primitive("gemm", Y, X, W)  # Y[w, co] += X[w, ci] @ W[ci, co] on tiles


@task.define
def conv2d_tap_logic(Y, X, W):
    """One filter tap: Y (BW x BCo) += X (BW pixels x Ci channels) @ W (Ci x BCo), over tiles of Ci."""
    Xp = task.partition(X, by="blocks", tile=(1, 1, "BW", "BK"))
    Wp = task.partition(W, by="blocks", tile=(1, 1, "BK", "BCo"))
    for k in task.range(Xp.shape[3]):  # sequential: may be pipelined
        task.launch(conv2d_leaf_logic, Y, Xp[0, 0, 0, k], Wp[0, 0, k, 0])


@task.define
def conv2d_block_logic(Y, X, W):
    """Y: BW output pixels of output row (n, h), every channel; X and W: whole."""
    n, h, w = task.global_offset(Y, 0), task.global_offset(Y, 1), task.global_offset(Y, 2)
    Yp = task.partition(Y, by="blocks", tile=(1, 1, "BW", "BCo"))
    Wp = task.partition(W, by="blocks", tile=(1, 1, None, "BCo"))
    for c in task.range(Yp.shape[3]):  # tiles of output channels
        for kh in task.range(W.shape[0]):
            for kw in task.range(W.shape[1]):
                # The input pixels under the BW outputs for tap (kh, kw): a window at an element offset.
                Xw = task.window(X, start=(n, h + kh, w + kw, 0), shape=(1, 1, "BW", None))
                task.launch(conv2d_tap_logic, Yp[0, 0, 0, c], Xw, Wp[kh, kw, 0, c])


@task.define
def conv2d_host_logic(Y, X, W):
    Yp = task.partition(Y, by="blocks", tile=(1, 1, "BW", None))
    for n, h, j in task.parallel_range((Yp.shape[0], Yp.shape[1], Yp.shape[2])):  # parallel: may become the grid
        task.launch(conv2d_block_logic, Yp[n, h, j, 0], X, W)
