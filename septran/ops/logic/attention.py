"""FlashAttention forward: O = softmax(Q K^T * scale, masked) V, with online softmax.

Q, O: (batch, heads, Sq, D); K, V: (batch, heads, Sk, D). The algorithm only;
mappings/<target>/attention.yaml say how. A program takes one block of query
rows of one head and walks the keys in tiles: scores S = Q K^T (starting from
the mask: 0 where a query may see a key, -inf elsewhere), then the running
row maximum m and sum l are updated, the accumulator O is rescaled by
exp(m_old - m_new) and P V is added. O is divided by l at the end. The causal
mask is aligned bottom-right: query i sees keys j <= i + Sk - Sq, and a block of
queries stops at the last key tile it can see.

An optional additive mask M (float, shape (Bm, Hm, Sq, Sk) with Bm 1 or batch and
Hm 1 or heads: M[None, None] for one (Sq, Sk) mask) is added to the scores before
the softmax (-inf hides a key); with mask="bool", M is bool and True lets the
query see the key (torch's bool attn_mask); without M the program is the plain one. With
gqa=True, K and V may have fewer heads than Q (grouped-query attention): query
head h reads key/value head h // (Hq // Hkv); Hq must be a multiple of Hkv.
"""
from septran import task

NEG_INF = float("-inf")
LOG2E = 1.44269504  # exp(x) = exp2(x * log2(e)): the scale folds it in, as FlashAttention does


def attention(causal: bool = False, gqa: bool = False, mask: str = "add"):
    """The entry task; it takes the optional mask ``M`` and the scalar ``sm_scale`` (0, the default, means 1 / sqrt(D)).

    ``mask``: what M holds: "add", a float added to the scores; "bool", True where the query may see the key.
    """
    if mask not in ("add", "bool"):
        raise ValueError(f'attention(mask=...) is "add" or "bool", not {mask!r}')

    @task.define(leaf=True)
    def attn_start(O, m, l):
        task.compute(O, lambda i, j: 0.0)
        task.compute(l, lambda i: 0.0)
        task.compute(m, lambda i: NEG_INF)

    @task.define(leaf=True)
    def attn_mask(S, Q, K, M=None, sm_scale=0.0):  # Q and K: only where they sit is used; M: a tile of the caller's mask
        q = lambda i: task.global_index(Q, 2, i)  # noqa: E731
        k = lambda j: task.global_index(K, 2, j)  # noqa: E731
        if M is not None:  # the mask where a key may be seen (keys past the end are hidden whatever M says), divided
            # by the scale attn_softmax multiplies the scores by: softmax(Q K^T * scale + M)
            scale = task.where(sm_scale > 0.0, sm_scale, 1.0 / task.sqrt(task.maximum(task.global_size(Q, 3), 1.0)))
            past = task.global_size(K, 2) - task.global_size(Q, 2)
            seen = (lambda i, j: q(i) + past >= k(j)) if causal else (lambda i, j: k(j) < task.global_size(K, 2))
            if mask == "bool":
                task.compute(S, lambda i, j: task.where(seen(i, j), task.where(M[i, j], 0.0, NEG_INF), NEG_INF))
            else:
                task.compute(S, lambda i, j: task.where(seen(i, j), M[i, j] / scale, NEG_INF))
        elif causal:
            past = task.global_size(K, 2) - task.global_size(Q, 2)
            task.compute(S, lambda i, j: task.where(q(i) + past >= k(j), 0.0, NEG_INF))
        else:  # keys past the end (the last tile may overhang) get no weight
            task.compute(S, lambda i, j: task.where(k(j) >= task.global_size(K, 2), NEG_INF, 0.0))

    @task.define(leaf=True)
    def attn_scores(S, Q, K):
        task.call_primitive("gemm_bt", S, Q, K)  # S += Q K^T

    def softmax_leaves(masked: bool):
        """attn_softmax and attn_finish; ``masked``: for a call with a mask M, which may hide every key of a row."""

        @task.define(leaf=True)
        def attn_softmax(S, P, m, m_prev, alpha, l, rowsum, Q, sm_scale=0.0):  # Q: only its head dim is used
            # A head dim of 0 makes every score 0 whatever the scale (torch then averages V): 1, not 1 / sqrt(0).
            scale = task.where(sm_scale > 0.0, sm_scale, 1.0 / task.sqrt(task.maximum(task.global_size(Q, 3), 1.0))) * LOG2E
            task.compute(m_prev, lambda i: m[i])
            task.compute(m, lambda i: NEG_INF)
            task.call_primitive("row_max", m, S)
            task.compute(m, lambda i: task.maximum(m[i], m_prev[i]))
            # With a mask a row may see no key of a whole tile: its maximum is still -inf, and 0 stands in for it.
            top = (lambda i: task.where(m[i] > NEG_INF, m[i], 0.0)) if masked else (lambda i: m[i])  # noqa: E731
            task.compute(alpha, lambda i: task.exp2(m_prev[i] * scale - top(i) * scale))
            task.compute(S, lambda i, j: task.exp2(S[i, j] * scale - top(i) * scale))
            task.call_primitive("row_sum", rowsum, S)
            task.compute(l, lambda i: l[i] * alpha[i] + rowsum[i])
            task.compute(P, lambda i, j: S[i, j])  # in V's type, for the second product

        @task.define(leaf=True)
        def attn_finish(O, l, Q, K):  # Q and K: only where they sit is used
            # A query that sees no key (there are none, or the causal mask hides them all) gets zeros, as
            # torch's scaled_dot_product_attention gives, not 0 / 0 or NaN. Shapes are constants of the
            # program, so where every query sees a key the check folds away and the division is all that is left.
            if masked:  # a row the mask hides entirely has l = 0 (with a key it sees, l >= 1)
                sees = lambda i: l[i] > 0.0  # noqa: E731
            elif causal:
                sees = lambda i: task.global_index(Q, 2, i) + task.global_size(K, 2) >= task.global_size(Q, 2)  # noqa: E731
            else:
                sees = lambda i: task.minimum(task.global_size(K, 2), 1.0) > 0.0  # there is a key  # noqa: E731
            task.compute(O, lambda i, j: task.where(sees(i), O[i, j] / l[i], 0.0))

        return attn_softmax, attn_finish

    plain_leaves, masked_leaves = softmax_leaves(False), softmax_leaves(True)  # one name each: the mapping binds it

    @task.define(leaf=True)
    def attn_rescale(O, alpha):
        task.compute(O, lambda i, j: O[i, j] * alpha[i])

    @task.define(leaf=True)
    def attn_values(O, P, V):
        task.call_primitive("gemm", O, P, V)  # O += P V

    @task.define
    def attention_block(O, Q, K, V, M=None, sm_scale=0.0):  # one block of query rows of one head; all its keys
        Kp = task.partition(K, by="blocks", tile=(1, 1, "BN", None))
        Vp = task.partition(V, by="blocks", tile=(1, 1, "BN", None))
        Mp = task.partition(M, by="blocks", tile=(1, 1, None, "BN")) if M is not None else None
        attn_softmax, attn_finish = masked_leaves if M is not None else plain_leaves
        S = task.temp(Q.shape[2], "BN")  # scores, then probabilities
        P = task.temp(Q.shape[2], "BN", dtype=V)
        m = task.temp(Q.shape[2])  # running row maximum of the scores
        m_prev = task.temp(Q.shape[2])
        alpha = task.temp(Q.shape[2])  # how much the old accumulator shrinks
        l = task.temp(Q.shape[2])  # running row sum of the probabilities
        rowsum = task.temp(Q.shape[2])
        tiles = Kp.shape[2]
        if causal:  # only the key tiles that reach this block's last query
            last = task.global_offset(Q, 2) + Q.shape[2] + task.global_size(K, 2) - task.global_size(Q, 2)
            tiles = task.minimum(tiles, task.ceildiv(last, "BN"))
        task.launch(attn_start, O, m, l)
        for k in task.range(tiles):  # sequential: may be pipelined
            if M is not None:
                task.launch(attn_mask, S, Q, Kp[0, 0, k, 0], Mp[0, 0, 0, k], sm_scale)
            else:
                task.launch(attn_mask, S, Q, Kp[0, 0, k, 0])
            task.launch(attn_scores, S, Q, Kp[0, 0, k, 0])
            task.launch(attn_softmax, S, P, m, m_prev, alpha, l, rowsum, Q, sm_scale)
            task.launch(attn_rescale, O, alpha)
            task.launch(attn_values, O, P, Vp[0, 0, k, 0])
        task.launch(attn_finish, O, l, Q, K)

    @task.define
    def attention_logic(O, Q, K, V, M=None, sm_scale=0.0):
        Op = task.partition(O, by="blocks", tile=(1, 1, "BM", None))
        Qp = task.partition(Q, by="blocks", tile=(1, 1, "BM", None))
        Kp = task.partition(K, by="blocks", tile=(1, 1, None, None))
        Vp = task.partition(V, by="blocks", tile=(1, 1, None, None))
        Mp = task.partition(M, by="blocks", tile=(1, 1, "BM", None)) if M is not None else None
        for b, h, i in task.parallel_range(Op.shape[:3]):  # parallel: may become the grid
            # GQA: a group of Hq // Hkv query heads shares a key/value head (the verify pass refuses a head
            # count that does not divide: the last query heads would read past K's heads).
            kv = h // (Q.shape[1] // K.shape[1]) if gqa else h
            # M's batch and head extents are 1 (shared) or the full extent: b // (B // 1) is 0, b // (B // B) is b.
            tile = Mp[b // (Q.shape[0] // M.shape[0]), h // (Q.shape[1] // M.shape[1]), i, 0] if M is not None else None
            task.launch(attention_block, Op[b, h, i, 0], Qp[b, h, i, 0], Kp[b, kv, 0, 0], Vp[b, kv, 0, 0], tile, sm_scale)

    return attention_logic


attention_logic = attention()  # what `septran.compile(logic_file=...)` finds: not causal
