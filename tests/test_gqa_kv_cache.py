"""examples/gqa_kv_cache: GQA decoding over a KV cache written into the caller's tensors (issue 12).

Two kernels: append (the caches are read-write parameters, written in place at ``pos`` through
``task.as_index``), then attend (the new tokens over the caches' first pos + S rows, causal). Numerics on cpu
against torch; the generated programs of every target pinned by golden files; what cannot be right is refused.
"""
from __future__ import annotations

import pytest
import torch

import septran
from conftest import REPO, load_module, mapping_path

LOGIC = load_module(REPO / "examples" / "gqa_kv_cache" / "gqa_kv_cache.py")
RUN = load_module(REPO / "examples" / "gqa_kv_cache" / "run_gqa_kv_cache.py")
KERNELS: dict = {}


def kernels(target: str = "cpu"):
    if target not in KERNELS:
        KERNELS[target] = (septran.compile(LOGIC.gqa_kv_cache_append_logic, mapping_path(target, "gqa_kv_cache_append")),
                           septran.compile(LOGIC.gqa_kv_cache_logic, mapping_path(target, "gqa_kv_cache")))
    return KERNELS[target]


def _rand(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.build
def test_append_writes_only_its_rows_in_place():
    append, _ = kernels()
    kc, vc = _rand(2, 3, 40, 8, seed=1), _rand(2, 3, 40, 8, seed=2)
    before_k, before_v = kc.clone(), vc.clone()
    kn, vn = _rand(2, 3, 5, 8, seed=3), _rand(2, 3, 5, 8, seed=4)
    append(kc, vc, kn, vn, pos=11)  # the caches are the results
    assert torch.equal(kc[:, :, 11:16], kn) and torch.equal(vc[:, :, 11:16], vn)
    rest = torch.ones(40, dtype=torch.bool)
    rest[11:16] = False
    assert torch.equal(kc[:, :, rest], before_k[:, :, rest]) and torch.equal(vc[:, :, rest], before_v[:, :, rest])


@pytest.mark.build
def test_attend_ignores_what_the_cache_holds_past_pos():
    """Rows past pos + S of K may hold anything (NaN); those of V anything finite."""
    _, attend = kernels()
    q, k, v = _rand(1, 4, 3, 16, seed=5), _rand(1, 2, 50, 16, seed=6), _rand(1, 2, 50, 16, seed=7)
    pos = 20
    k[:, :, pos + 3:] = float("nan")
    v[:, :, pos + 3:] = 1e30
    out = attend(q, k, v, pos=pos)
    ref = RUN.reference(q.double(), k[:, :, :pos + 3].double(), v[:, :, :pos + 3].double(), pos)
    assert (out.double() - ref).abs().max().item() < 1e-5


def test_a_position_past_the_cache_is_refused():
    append, attend = kernels()
    kc = torch.zeros(1, 2, 10, 8)
    with pytest.raises(septran.LoweringError, match=r"index \(pos \+ t\) reaches 10 .*0\.\.9"):
        append(kc, kc.clone(), torch.zeros(1, 2, 3, 8), torch.zeros(1, 2, 3, 8), pos=8)
    with pytest.raises(septran.LoweringError, match="pos is 2.5, but the logic uses it as an index"):
        append(kc, kc.clone(), torch.zeros(1, 2, 1, 8), torch.zeros(1, 2, 1, 8), pos=2.5)


def test_query_heads_that_do_not_divide_are_refused():
    _, attend = kernels()
    with pytest.raises(septran.LoweringError, match=r"Q\.shape\[1\] = 5, Kc\.shape\[1\] = 2"):
        attend(torch.zeros(1, 5, 1, 8), torch.zeros(1, 2, 10, 8), torch.zeros(1, 2, 10, 8), pos=3)


@pytest.mark.parametrize("target", ["cpu", "sm80", "sm90", "gfx942"])
def test_generated_programs_match_golden(target, golden):
    append, attend = kernels(target)
    dtype = "float32" if target == "cpu" else "float16"
    kv, new = ((2, 2, 4096, 128), dtype), ((2, 2, 1, 128), dtype)
    golden(f"gqa_kv_cache_append.{target}.py", append.specialize(Kc=kv, Vc=kv, Knew=new, Vnew=new, pos=100).tilelang_source)
    golden(f"gqa_kv_cache.{target}.py", attend.specialize(Q=((2, 8, 1, 128), dtype), Kc=kv, Vc=kv, pos=100).tilelang_source)


def test_as_index_takes_a_scalar_of_its_task():
    from septran import task
    from septran.frontend.graph import build_graph

    @task.define
    def bad(Y, X, pos=0.0):
        Yp = task.partition(Y, by="blocks", tile=(1, None))
        for i in task.parallel_range(task.as_index(3)):
            task.launch(LOGIC.dec_finish, Yp[i, 0], X)

    with pytest.raises(septran.FrontendError, match="task.as_index takes a scalar parameter of this task"):
        build_graph(bad)
