"""Grouped-query attention decoding with a KV cache: append the new keys and values, then attend.

Q: (batch, Hq, S, D); Knew, Vnew: (batch, Hkv, S, D); the caller's caches Kc, Vc: (batch, Hkv, Smax, D);
Hq a multiple of Hkv (query head h reads key/value head h // (Hq // Hkv)). The S new tokens sit at positions
pos .. pos + S - 1 (S = 1: one decoding step; pos = 0: the prompt). Two kernels, so that no program reads a
cache row another one is writing:

* ``gqa_kv_cache_append_logic(Kc, Vc, Knew, Vnew, pos)`` writes Knew and Vnew into the caches at rows pos .. pos + S - 1,
  in place (the caches are read-write parameters: the caller's tensors); the other rows keep their values;
* ``gqa_kv_cache_logic(O, Q, Kc, Vc, pos, sm_scale)`` is attention of Q over the caches' first pos + S rows,
  causal: new token i (position pos + i) sees the keys at positions <= pos + i. Online softmax as in
  examples/attention; a block of queries walks only the key tiles up to its last position.

``pos`` is a scalar, a constant of the program: each position compiles its own variant (see the README).
The cache rows past pos + S (not written yet) must hold finite numbers (a cache made with torch.zeros): their
probabilities are 0, and 0 x NaN would be NaN. Their scores are replaced, so K's may hold anything.
"""
from septran import task

NEG_INF = float("-inf")
LOG2E = 1.44269504


@task.define(leaf=True)
def copy_row(C, X):
    # Reads C so that the cache is read-write: the caller's tensor, written in place (where picks X always).
    task.compute(C, lambda b, g, i, j: task.where(task.global_index(C, 2, i) >= 0, X[b, g, i, j], C[b, g, i, j]))


@task.define
def append_row(Kc, Vc, Knew, Vnew):
    task.launch(copy_row, Kc, Knew)
    task.launch(copy_row, Vc, Vnew)


@task.define
def gqa_kv_cache_append_logic(Kc, Vc, Knew, Vnew, pos=0.0):
    Kcp = task.partition(Kc, by="blocks", tile=(1, 1, 1, None))  # one row of the cache per tile
    Vcp = task.partition(Vc, by="blocks", tile=(1, 1, 1, None))
    Knp = task.partition(Knew, by="blocks", tile=(1, 1, 1, None))
    Vnp = task.partition(Vnew, by="blocks", tile=(1, 1, 1, None))
    at = task.as_index(pos)  # rows past the cache's end are refused by the verification pass
    for b, g, t in task.parallel_range(Knp.shape[:3]):
        task.launch(append_row, Kcp[b, g, at + t, 0], Vcp[b, g, at + t, 0], Knp[b, g, t, 0], Vnp[b, g, t, 0])


@task.define(leaf=True)
def dec_start(O, m, l):
    task.compute(O, lambda i, j: 0.0)
    task.compute(l, lambda i: 0.0)
    task.compute(m, lambda i: NEG_INF)


@task.define(leaf=True)
def dec_clear(S):
    task.compute(S, lambda i, j: 0.0)


@task.define(leaf=True)
def dec_scores(S, Q, K):
    task.call_primitive("gemm_bt", S, Q, K)  # S += Q K^T


@task.define(leaf=True)
def dec_mask(S, Q, K, pos=0.0):  # Q and K: only where they sit is used
    # After the product, so that a score of a cache row not written yet (NaN, say) is replaced, not added to.
    seen = lambda i, j: task.global_index(K, 2, j) <= task.global_index(Q, 2, i) + pos  # noqa: E731
    task.compute(S, lambda i, j: task.where(seen(i, j), S[i, j], NEG_INF))


@task.define(leaf=True)
def dec_softmax(S, P, m, m_prev, alpha, l, rowsum, Q, sm_scale=0.0):  # Q: only its head dim is used
    scale = task.where(sm_scale > 0.0, sm_scale, 1.0 / task.sqrt(task.maximum(task.global_size(Q, 3), 1.0))) * LOG2E
    task.compute(m_prev, lambda i: m[i])
    task.compute(m, lambda i: NEG_INF)
    task.call_primitive("row_max", m, S)
    task.compute(m, lambda i: task.maximum(m[i], m_prev[i]))
    task.compute(alpha, lambda i: task.exp2(m_prev[i] * scale - m[i] * scale))
    task.compute(S, lambda i, j: task.exp2(S[i, j] * scale - m[i] * scale))
    task.call_primitive("row_sum", rowsum, S)
    task.compute(l, lambda i: l[i] * alpha[i] + rowsum[i])
    task.compute(P, lambda i, j: S[i, j])


@task.define(leaf=True)
def dec_rescale(O, alpha):
    task.compute(O, lambda i, j: O[i, j] * alpha[i])


@task.define(leaf=True)
def dec_values(O, P, V):
    task.call_primitive("gemm", O, P, V)  # O += P V


@task.define(leaf=True)
def dec_finish(O, l):
    task.compute(O, lambda i, j: O[i, j] / l[i])  # every new token sees itself: l >= 1


@task.define
def decode_block(O, Q, K, V, pos=0.0, sm_scale=0.0):  # one block of new tokens of one query head
    Kp = task.partition(K, by="blocks", tile=(1, 1, "BN", None))
    Vp = task.partition(V, by="blocks", tile=(1, 1, "BN", None))
    S = task.temp(Q.shape[2], "BN")
    P = task.temp(Q.shape[2], "BN", dtype=V)
    m = task.temp(Q.shape[2])
    m_prev = task.temp(Q.shape[2])
    alpha = task.temp(Q.shape[2])
    l = task.temp(Q.shape[2])
    rowsum = task.temp(Q.shape[2])
    # the key tiles up to this block's last position, pos + (its last query)
    tiles = task.minimum(Kp.shape[2], task.ceildiv(task.as_index(pos) + task.global_offset(Q, 2) + Q.shape[2], "BN"))
    task.launch(dec_start, O, m, l)
    for k in task.range(tiles):
        task.launch(dec_clear, S)
        task.launch(dec_scores, S, Q, Kp[0, 0, k, 0])
        task.launch(dec_mask, S, Q, Kp[0, 0, k, 0], pos)
        task.launch(dec_softmax, S, P, m, m_prev, alpha, l, rowsum, Q, sm_scale)
        task.launch(dec_rescale, O, alpha)
        task.launch(dec_values, O, P, Vp[0, 0, k, 0])  # P is 0 past pos + S: those rows of Vc must be finite
    task.launch(dec_finish, O, l)


@task.define
def gqa_kv_cache_logic(O, Q, Kc, Vc, pos=0.0, sm_scale=0.0):
    Op = task.partition(O, by="blocks", tile=(1, 1, "BM", None))
    Qp = task.partition(Q, by="blocks", tile=(1, 1, "BM", None))
    Kp = task.partition(Kc, by="blocks", tile=(1, 1, None, None))
    Vp = task.partition(Vc, by="blocks", tile=(1, 1, None, None))
    for b, h, i in task.parallel_range(Op.shape[:3]):
        kv = h // (Q.shape[1] // Kc.shape[1])  # the group's key/value head; a head count that does not divide is refused
        task.launch(decode_block, Op[b, h, i, 0], Qp[b, h, i, 0], Kp[b, kv, 0, 0], Vp[b, kv, 0, 0], pos, sm_scale)
