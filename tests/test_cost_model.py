"""The static cost model (septran/tuning/cost.py): counts checked by hand, orderings it has reasons for,
the target facts it reads, and one small measured check on the cpu (printed, not asserted)."""
from __future__ import annotations

import dataclasses

import pytest

import septran
from conftest import GEMM_LOGIC, REPO, edited_mapping, load_module, mapping_path
from septran.target import TargetError, load_target, load_target_file
from septran.tuning import cost
from septran.tuning.cost import CostModelError, estimate, program_value, rank_correlation

F32 = "float32"


# The cpu gemm with its tiles staged in LOCAL and TileLang's T.gemm: every copy is counted traffic.
STAGED = (("{C: LOCAL, A: GLOBAL, B: GLOBAL}", "{C: LOCAL, A: LOCAL, B: LOCAL}"), ("{gemm_leaf_logic: gemm_leaf_blas}", "{gemm_leaf_logic: gemm_leaf_cpu}"))


def gemm_program(target: str, m: int, k: int, n: int, dtype: str = F32, mapping=None):
    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=mapping or mapping_path(target))
    return kernel.specialize(A=((m, k), dtype), B=((k, n), dtype)).program


def estimate_of(program, target: str, **kw):
    return estimate(program, load_target(target), program_value(program), **kw)


def test_gemm_counts_equal_hand_computed_numbers(tmp_path):
    """1000x520 @ 520x777 with staged 32x32x32 tiles: a grid of 25 x 32 programs, 17 k-tiles each.

    FLOPs are the work the program does: padded tiles (the last row, column and k tiles overhang and
    compute on zeros). Bytes are what the copies move: the in-bounds part of every A and B tile,
    re-read once per output tile (A once per tile column, B once per tile row), and C written once."""
    path = edited_mapping(tmp_path, "cpu", "gemm", ("{BM: 256, BN: 256, BK: 512}", "{BM: 32, BN: 32, BK: 32}"), *STAGED)
    est = estimate_of(gemm_program("cpu", 1000, 520, 777, mapping=path), "cpu")
    assert est.programs == 25 * 32
    assert est.flops == 2 * (32 * 32) * (25 * 32) * (17 * 32) == 891_289_600  # 2*M*N*K = 808,080,000 unpadded
    a_bytes = 25 * 1000 * 520 * 4
    b_bytes = 32 * 777 * 520 * 4
    c_bytes = 1000 * 777 * 4
    assert est.bytes == a_bytes + b_bytes + c_bytes == 106_825_120
    perf = load_target("cpu").perf  # cpu: copies and compute add up (no overlap), one program per core at a time
    assert est.waves == 800 / perf.units and est.occupancy == 1.0 and est.bound == "compute"
    per_program = (est.flops / perf.peak_flops[F32] + est.bytes / perf.bandwidth_bytes) * perf.units / 800
    assert est.seconds == pytest.approx(perf.launch_seconds + 800 // perf.units * per_program)


def test_sampled_edges_and_midpoints_sum_like_every_block(monkeypatch):
    """Long grid dimensions and loops are sampled (edges plus midpoints); here that changes nothing."""
    program = gemm_program("cpu", 1000, 520, 777)
    sampled = estimate_of(program, "cpu")
    monkeypatch.setattr(cost, "EXACT", 10**6)
    exact = estimate_of(program, "cpu")
    assert (sampled.flops, sampled.bytes) == (exact.flops, exact.bytes)


def attention_program(causal: bool, target: str = "cpu", dtype: str = F32, s: int = 512, heads: int = 2):
    logic = load_module(REPO / "examples" / "attention" / "attention.py")
    kernel = septran.compile(logic.attention(causal), mapping_file=mapping_path(target, "attention"))
    shape = ((1, heads, s, 64), dtype)
    return kernel.specialize(Q=shape, K=shape, V=shape).program


@pytest.mark.parametrize("target,dtype,s,heads", [("cpu", F32, 512, 2), ("sm90", "float16", 4096, 32)])
def test_causal_attention_is_about_half_the_work(target, dtype, s, heads, monkeypatch):
    """A causal block of queries walks only the key tiles it can see: (1 + 8) / 2 of 8 on average at
    Sq = Sk = 512 with 64-row blocks (cpu), (1 + 32) / 2 of 32 at 4096 with 128-row blocks (sm90)."""
    full, causal = (estimate_of(attention_program(c, target, dtype, s, heads), target) for c in (False, True))
    tiles = s // (64 if target == "cpu" else 128)
    assert causal.flops / full.flops == pytest.approx((tiles + 1) / 2 / tiles, rel=0.02)
    assert 0.45 < causal.seconds / full.seconds < 0.65
    monkeypatch.setattr(cost, "EXACT", 10**6)  # the midpoint sampling is exact for a trip count linear in the block
    assert estimate_of(attention_program(True, target, dtype, s, heads), target).flops == pytest.approx(causal.flops)


def test_a_grid_smaller_than_a_wave_waits_for_its_slowest_program():
    """8 causal programs on 132 SMs: the last block of queries sees every key tile and sets the time."""
    full, causal = (estimate_of(attention_program(c, "sm90", "float16"), "sm90") for c in (False, True))
    assert causal.flops < 0.7 * full.flops and causal.seconds == pytest.approx(full.seconds)


def test_cpu_big_tiles_move_fewer_bytes_and_are_estimated_faster(tmp_path):
    """512^3: 32x32x32 tiles re-read A and B once per 32-wide tile of C, 128x128x16 once per 128-wide one:
    about 4x the bytes, at the same FLOPs. On the cpu the copies do not overlap compute, so they add."""
    def est(bm, bn, bk):
        path = edited_mapping(tmp_path, "cpu", "gemm", ("{BM: 256, BN: 256, BK: 512}", f"{{BM: {bm}, BN: {bn}, BK: {bk}}}"), *STAGED)
        return estimate_of(gemm_program("cpu", 512, 512, 512, mapping=path), "cpu")

    small, big = est(32, 32, 32), est(128, 128, 16)
    assert small.flops == big.flops == 2 * 512**3
    c = 512 * 512 * 4
    assert (small.bytes - c) == 4 * (big.bytes - c) == 4 * (2 * 4 * 512 * 512 * 512 // 128)
    assert big.seconds < small.seconds


def test_sm90_more_shared_memory_per_program_lowers_occupancy(tmp_path):
    """fp16 128x256 tiles, 256 threads (8 programs fit an SM's threads): BK 64 over 3 stages needs
    145 KiB of shared memory (one program per SM); BK 32 over 2 stages 48 KiB (four)."""
    lean = edited_mapping(tmp_path, "sm90", "gemm", ("BK: 64", "BK: 32"), ("pipeline: 3", "pipeline: 2"))
    shipped = estimate_of(gemm_program("sm90", 4096, 4096, 4096, "float16"), "sm90")
    smaller = estimate_of(gemm_program("sm90", 4096, 4096, 4096, "float16", mapping=lean), "sm90")
    assert shipped.occupancy == 1 / 8 and smaller.occupancy == 4 / 8
    assert shipped.waves == 512 / 132 and smaller.waves == 512 / (132 * 4)
    assert any("SHARED" in n for n in shipped.notes)
    # the hook for nvcc's register counts: 240 registers x 256 threads leave one program per SM
    assert estimate_of(gemm_program("sm90", 4096, 4096, 4096, "float16", mapping=lean), "sm90",
                       registers_per_thread=240).occupancy == 1 / 8


def test_a_target_without_speeds_is_an_error_that_says_where_to_add_them():
    target = dataclasses.replace(load_target("cpu"), perf=None)
    program = gemm_program("cpu", 64, 64, 64)
    with pytest.raises(CostModelError, match="gives no speeds") as err:
        estimate(program, target, program_value(program))
    assert "perf:" in err.value.hint and "target.yaml" in err.value.hint


def test_every_shipped_target_has_speeds():
    for name in ("cpu", "sm80", "sm90", "gfx942", "dsa_ref", "dsa_acme"):
        perf = load_target(name).perf
        assert perf is not None and perf.units >= 1 and {"float16", "float32"} <= set(perf.peak_flops)


@pytest.mark.parametrize("bad,message", [("units: 2", "units: -1"), ("bandwidth_bytes: 20.0e+9", "bandwidth_bytes: fast"),
                                         ("  overlap: false\n", "  overlap: false\n  shared_space: NOWHERE\n")])
def test_malformed_speeds_are_target_errors(tmp_path, bad, message):
    folder = tmp_path / "cpu"
    folder.mkdir()
    text = (REPO / "backends" / "cpu" / "target.yaml").read_text()
    assert bad in text
    (folder / "target.yaml").write_text(text.replace(bad, message))
    with pytest.raises(TargetError, match="perf"):
        load_target_file(folder / "target.yaml")


def test_dsa_vendor_transfers_are_counted():
    """On a DSA the copies are vendor loads and stores; the same bytes as the cpu's copies."""
    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=mapping_path("dsa_ref"))
    program = kernel.specialize(A=((256, 128), F32), B=((128, 192), F32)).program
    est = estimate(program, kernel.target, program_value(program))
    consts = {c.sym.name: c.value for c in program.consts}
    bm, bn = consts["BM"], consts["BN"]
    assert est.flops == 2 * 256 * 128 * 192 and est.programs == (256 // bm) * (192 // bn)
    assert est.bytes == 4 * (256 * 128 * (192 // bn) + 128 * 192 * (256 // bm) + 256 * 192)


def test_rank_correlation():
    assert rank_correlation([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert rank_correlation([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert rank_correlation([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)
    assert rank_correlation([1, 1, 2], [5, 5, 9]) == pytest.approx(1.0)


@pytest.mark.build
def test_measured_rank_correlation_on_cpu_is_reported():
    """Four tile configurations of GEMM 512^3, estimated and timed; the correlation is printed, not asserted
    (the machine is shared; bench/cost_model.py measures eight configurations and writes JSON)."""
    bench = load_module(REPO / "bench" / "cost_model.py")
    result = bench.run(512, configs=[(32, 32, 32), (128, 128, 16), (16, 16, 16), (64, 64, 32)], rounds=2, reps=2)
    print("\n" + bench.table(result))
    assert all(r["estimate_s"] > 0 and r["measured_s"] > 0 for r in result["rows"])
    assert -1.0 <= result["spearman"] <= 1.0


def test_a_clipped_loop_counts_its_in_bounds_elements():
    """bfloat16 softmax rows of 1500 and 4104 in one 65536-wide LOCAL tile: the exps and the scaling run over the row
    only (lowering/clip_staged.py), and the vector work counts the row's elements, not the tile's."""
    from septran.ops.logic import softmax as logic
    kernel = septran.compile(logic.softmax(False), mapping_file=mapping_path("cpu", "softmax"))
    narrow, wide = (estimate_of(kernel.specialize(X=((4, cols), "bfloat16")).program, "cpu") for cols in (1500, 4104))
    assert all("BN = 65536" in kernel.specialize(X=((4, cols), "bfloat16")).tilelang_source for cols in (1500, 4104))
    assert narrow.flops == pytest.approx(wide.flops * 1500 / 4104, rel=0.02)
