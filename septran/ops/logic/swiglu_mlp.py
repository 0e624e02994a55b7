"""The gate and up projections of a SwiGLU MLP, fused: H = silu(X @ Wg) * (X @ Wu).

The algorithm only; mappings/<target>/swiglu_mlp.yaml say how. A program takes a
BM x BN tile of H and walks K: both products accumulate side by side from the
same tile of X, then silu(g) * u = g / (1 + exp(-g)) * u is written once. The
whole MLP, Y = H @ Wd, runs the down projection with the GEMM logic
(septran/ops/logic/gemm.py): a grid-wide dependency is two kernels. ``swiglu_mlp(transpose_b=True)``
takes the weights as torch.nn.Linear keeps them, (N, K), and reads them in place.
"""
from septran import task


def swiglu_mlp(transpose_b: bool = False):
    """The entry task; with transpose_b, Wg and Wu are (N, K), as torch.nn.Linear keeps its weights."""
    gemm = "gemm_bt" if transpose_b else "gemm"

    @task.define(leaf=True)
    def swiglu_zero(G, U):  # the accumulators start at zero
        task.compute(G, lambda i, j: 0.0)
        task.compute(U, lambda i, j: 0.0)

    @task.define(leaf=True)
    def swiglu_gate(G, X, Wg):
        task.call_primitive(gemm, G, X, Wg)  # G += X @ Wg (Wg^T when transposed)

    @task.define(leaf=True)
    def swiglu_up(U, X, Wu):
        task.call_primitive(gemm, U, X, Wu)  # U += X @ Wu

    @task.define(leaf=True)
    def swiglu_act(H, G, U):
        task.compute(H, lambda i, j: G[i, j] / (1.0 + task.exp(-G[i, j])) * U[i, j])

    @task.define
    def swiglu_block(H, X, Wg, Wu):  # one BM x BN tile of H; all of K
        Xp = task.partition(X, by="blocks", tile=("BM", "BK"))
        Wgp = task.partition(Wg, by="blocks", tile=("BN", "BK") if transpose_b else ("BK", "BN"))
        Wup = task.partition(Wu, by="blocks", tile=("BN", "BK") if transpose_b else ("BK", "BN"))
        G = task.temp("BM", "BN")  # X @ Wg, in the accumulator type
        U = task.temp("BM", "BN")  # X @ Wu
        task.launch(swiglu_zero, G, U)
        for k in task.range(Xp.shape[1]):  # sequential: may be pipelined
            w = (0, k) if transpose_b else (k, 0)
            task.launch(swiglu_gate, G, Xp[0, k], Wgp[w])
            task.launch(swiglu_up, U, Xp[0, k], Wup[w])
        task.launch(swiglu_act, H, G, U)

    @task.define
    def swiglu_mlp_logic(H, X, Wg, Wu):
        Hp = task.partition(H, by="blocks", tile=("BM", "BN"))
        Xp = task.partition(X, by="blocks", tile=("BM", None))
        Wgp = task.partition(Wg, by="blocks", tile=("BN", None) if transpose_b else (None, "BN"))
        Wup = task.partition(Wu, by="blocks", tile=("BN", None) if transpose_b else (None, "BN"))
        for i, j in task.parallel_range(Hp.shape):  # parallel: may become the grid
            w = (j, 0) if transpose_b else (0, j)
            task.launch(swiglu_block, Hp[i, j], Xp[i, 0], Wgp[w], Wup[w])

    return swiglu_mlp_logic


swiglu_mlp_logic = swiglu_mlp()  # what `septran.compile(logic_file=...)` finds: weights (K, N)
