"""GEMM with a fused epilogue: C = act(op(A) @ op(B) + bias), act in relu / gelu / gelu_tanh / silu or
"none", op(X) = X or X transposed. The algorithm only; mappings/<target>/gemm_epilogue.yaml say how.

``gemm_epilogue(...)`` builds the operator for one activation and layout; the
task names do not change with them, so one mapping per target serves all.
``gemm_epilogue(residual=True)`` (no activation) adds a residual R (M, N) in the
same epilogue, C = op(A) @ op(B) + bias + R: a transformer's ``x + proj(h)``
without a second pass over C.
"""
from septran import task

GEMMS = {(False, False): "gemm", (True, False): "gemm_at", (False, True): "gemm_bt"}


def gemm_epilogue(activation: str = "relu", transpose_a: bool = False, transpose_b: bool = False,
                  residual: bool = False):
    """The entry task; A is (K, M) when transpose_a, B is (N, K) when transpose_b; with ``residual`` (activation
    "none" only) it takes R (M, N) after bias and adds it in the bias leaf."""
    if residual:
        if activation != "none":
            raise ValueError("gemm_epilogue: a residual is added after the bias, so only with activation 'none'")
        return _with_residual(GEMMS[(transpose_a, transpose_b)], transpose_a, transpose_b)
    gemm = GEMMS[(transpose_a, transpose_b)]

    @task.define(leaf=True)
    def epi_gemm_leaf(C, A, B):
        task.call_primitive(gemm, C, A, B)

    @task.define(leaf=True)
    def epi_bias_leaf(C, bias):
        task.call_primitive("add_bias", C, bias)

    @task.define(leaf=True)
    def epi_act_leaf(C):
        task.call_primitive(activation, C)

    @task.define
    def epi_block_logic(C, A, B, bias):
        Ap = task.partition(A, by="blocks", tile=("BK", "BM") if transpose_a else ("BM", "BK"))
        Bp = task.partition(B, by="blocks", tile=("BN", "BK") if transpose_b else ("BK", "BN"))
        for k in task.range(Ap.shape[0] if transpose_a else Ap.shape[1]):  # sequential: may be pipelined
            task.launch(epi_gemm_leaf, C, Ap[k, 0] if transpose_a else Ap[0, k], Bp[0, k] if transpose_b else Bp[k, 0])
        task.launch(epi_bias_leaf, C, bias)  # the epilogue, on the finished tile
        if activation != "none":  # "none": bias only; the mapping then binds no epi_act_leaf
            task.launch(epi_act_leaf, C)

    @task.define
    def gemm_epilogue_logic(C, A, B, bias):
        Cp = task.partition(C, by="blocks", tile=("BM", "BN"))
        Ap = task.partition(A, by="blocks", tile=(None, "BM") if transpose_a else ("BM", None))
        Bp = task.partition(B, by="blocks", tile=("BN", None) if transpose_b else (None, "BN"))
        biasp = task.partition(bias, by="blocks", tile=("BN",))
        for i, j in task.parallel_range(Cp.shape):  # parallel: may become the grid
            task.launch(epi_block_logic, Cp[i, j], Ap[0, i] if transpose_a else Ap[i, 0],
                        Bp[j, 0] if transpose_b else Bp[0, j], biasp[j])

    return gemm_epilogue_logic


def _with_residual(gemm: str, transpose_a: bool, transpose_b: bool):
    """C = op(A) @ op(B) + bias + R: the same tasks, the bias leaf adding R's tile too (its binding serves both)."""

    @task.define(leaf=True)
    def epi_gemm_leaf(C, A, B):
        task.call_primitive(gemm, C, A, B)

    @task.define(leaf=True)
    def epi_bias_leaf(C, bias, R):
        task.compute(C, lambda i, j: C[i, j] + bias[j] + R[i, j])

    @task.define
    def epi_block_logic(C, A, B, bias, R):
        Ap = task.partition(A, by="blocks", tile=("BK", "BM") if transpose_a else ("BM", "BK"))
        Bp = task.partition(B, by="blocks", tile=("BN", "BK") if transpose_b else ("BK", "BN"))
        for k in task.range(Ap.shape[0] if transpose_a else Ap.shape[1]):  # sequential: may be pipelined
            task.launch(epi_gemm_leaf, C, Ap[k, 0] if transpose_a else Ap[0, k], Bp[0, k] if transpose_b else Bp[k, 0])
        task.launch(epi_bias_leaf, C, bias, R)  # the epilogue, on the finished tile

    @task.define
    def gemm_epilogue_logic(C, A, B, bias, R):
        Cp = task.partition(C, by="blocks", tile=("BM", "BN"))
        Ap = task.partition(A, by="blocks", tile=(None, "BM") if transpose_a else ("BM", None))
        Bp = task.partition(B, by="blocks", tile=("BN", None) if transpose_b else (None, "BN"))
        biasp = task.partition(bias, by="blocks", tile=("BN",))
        Rp = task.partition(R, by="blocks", tile=("BM", "BN"))
        for i, j in task.parallel_range(Cp.shape):  # parallel: may become the grid
            task.launch(epi_block_logic, Cp[i, j], Ap[0, i] if transpose_a else Ap[i, 0],
                        Bp[j, 0] if transpose_b else Bp[0, j], biasp[j], Rp[i, j])

    return gemm_epilogue_logic


gemm_epilogue_logic = gemm_epilogue()  # what `septran.compile(logic_file=...)` finds: relu, no transposes
