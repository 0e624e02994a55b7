"""Issue 21: bfloat16 GEMMs on the cpu target without float32 copies, on the CPU's matrix units where it has them.

The gemm mapping keeps bfloat16 tensors as they are (``keep_dtypes``); the program holds them as uint16 bits
(target.yaml ``holds_as_bits``) that only vendor functions named for bf16 touch; the matrix units' leaves are
refused on a CPU without them, and ``shape_points`` sends bfloat16 calls to them where the CPU has them. The
units' kernels themselves are tested in tests/test_cpu_bf16_units.py (emulated where the CPU lacks them).
"""
from __future__ import annotations

import pytest
import torch

import septran
from conftest import REPO, assert_flash_rule, edited_mapping, forbid_tilelang, mapping_path
from septran.records import device

GEMM = REPO / "septran" / "ops" / "logic" / "gemm.py"
SOFTMAX = REPO / "examples" / "softmax" / "softmax.py"
AMX = frozenset({"amx_tile", "amx_bf16", "avx512_bf16", "avx2"})
BF16 = {"A": ((37, 50), "bfloat16"), "B": ((50, 29), "bfloat16")}


def _leaf(variant) -> str:
    return variant.choice.point["task_mappings.gemm_block_cpu.leaf_task_bindings.gemm_leaf_logic"]


def test_bfloat16_reaches_the_program_as_uint16_bits(cpu_flags):
    cpu_flags({"avx2"})  # the widening leaf: the one every host has
    kernel = septran.compile(logic_file=GEMM, mapping_file=mapping_path("cpu"))
    src = kernel.specialize(**BF16).tilelang_source
    for name in ("A", "B", "C"):
        assert f'"uint16"),  # bfloat16, held as its bits' in next(l for l in src.splitlines() if l.strip().startswith(f"{name}: T.Tensor"))
    assert "septran_cpu_gemm_bf16_bf16" in src and "septran_cpu_store_bf16_f32" in src
    assert "float32" not in kernel.specialize(**BF16).spec.dtypes.values()


def test_shape_points_send_bfloat16_to_the_unit_the_cpu_has(cpu_flags):
    kernel = septran.compile(logic_file=GEMM, mapping_file=mapping_path("cpu"))
    cpu_flags({"avx2"})
    assert _leaf(kernel.specialize(**BF16)) == "gemm_leaf_blas"
    cpu_flags({"avx2", "avx512_bf16"})
    assert _leaf(septran.compile(logic_file=GEMM, mapping_file=mapping_path("cpu")).specialize(**BF16)) == "gemm_leaf_avx512bf16"
    cpu_flags(AMX)
    k = septran.compile(logic_file=GEMM, mapping_file=mapping_path("cpu"))
    amx = k.specialize(**BF16)
    assert _leaf(amx) == "gemm_leaf_amx" and "septran_cpu_gemm_amx_bf16" in amx.tilelang_source
    assert "shape_points entry 7" in amx.choice.source  # after the few-row entries: those stream B
    # a decode step's few rows stream B through the widening leaf (the units' leaves pack all of B per call)
    for rows in (1, 16):
        dec = k.specialize(A=((rows, 50), "bfloat16"), B=((50, 29), "bfloat16"))
        assert "septran_cpu_gemm_bf16_bf16" in dec.tilelang_source and "avx512bf16" not in dec.tilelang_source, rows
    bmm = septran.compile(logic_file=REPO / "examples" / "bmm" / "bmm.py", mapping_file=mapping_path("cpu", "bmm"))
    for rows, unit in ((1, False), (16, False), (17, True)):
        src = bmm.specialize(A=((3, rows, 40), "bfloat16"), B=((3, 40, 24), "bfloat16")).tilelang_source
        assert ("septran_cpu_gemm_amx_bf16" in src) == unit and ("septran_cpu_gemm_bf16_bf16" in src) != unit, rows
    # float32 calls never reach a unit's leaf
    f32 = k.specialize(A=((37, 50), "float32"), B=((50, 29), "float32"))
    assert "bf16" not in f32.tilelang_source and "uint16" not in f32.tilelang_source


def test_golden_amx_program(cpu_flags, golden):
    cpu_flags(AMX)
    kernel = septran.compile(logic_file=GEMM, mapping_file=mapping_path("cpu"))
    golden("gemm_bf16_amx.cpu.py", kernel.specialize(A=((1000, 520), "bfloat16"), B=((520, 777), "bfloat16")).tilelang_source)


def test_a_unit_the_cpu_lacks_is_refused_at_the_binding(tmp_path, monkeypatch, cpu_flags):
    cpu_flags({"avx2", "avx512_bf16"})
    path = edited_mapping(tmp_path, "cpu", "gemm", ("gemm_leaf_logic: gemm_leaf_blas", "gemm_leaf_logic: gemm_leaf_amx"))
    forbid_tilelang(monkeypatch, "refused before TileLang")
    with pytest.raises(septran.MappingError, match=r"gemm_leaf_amx needs a CPU that reports amx_tile, amx_bf16; "
                                                   r"this one \(.*\) lacks amx_tile, amx_bf16") as info:
        septran.compile(logic_file=GEMM, mapping_file=path).specialize(**BF16)
    assert "gemm_leaf_amx" in path.read_text().splitlines()[info.value.loc.line - 1]


def test_tuning_skips_a_unit_the_cpu_lacks(tmp_path, cpu_flags):
    """The space lists the units' leaves: on a CPU without them, static pruning drops their points (the binding
    names what the CPU lacks) and keeps the rest."""
    from septran.lowering import Specialization
    from septran.tuning.prune import prune_static

    cpu_flags({"avx2"})
    leaves = "!tune [gemm_leaf_blas, gemm_leaf_cpu, gemm_leaf_amx, gemm_leaf_avx512bf16]"
    path = edited_mapping(tmp_path, "cpu", "gemm", ("gemm_leaf_logic: gemm_leaf_blas", f"gemm_leaf_logic: {leaves}"),
                          ("{C: LOCAL, A: GLOBAL, B: GLOBAL}", "{C: LOCAL, A: LOCAL, B: LOCAL}"), ("BK: 512", "BK: 128"))
    k = septran.compile(logic_file=GEMM, mapping_file=path)
    spec = Specialization(k.shapes.solve({n: s for n, (s, _) in BF16.items()}), {"A": "bfloat16", "B": "bfloat16", "C": "bfloat16"})
    key = "task_mappings.gemm_block_cpu.leaf_task_bindings.gemm_leaf_logic"
    by_leaf = {}
    for c in prune_static(k.graph, k.shapes, k.mapping, k.target, spec):
        by_leaf.setdefault(c.point[key], []).append(c)
    for unit in ("gemm_leaf_amx", "gemm_leaf_avx512bf16"):
        assert by_leaf[unit] and not any(c.ok for c in by_leaf[unit])
        assert all("lacks" in c.message for c in by_leaf[unit])
    assert all(c.ok for c in by_leaf["gemm_leaf_blas"] + by_leaf["gemm_leaf_cpu"])


def _twice(tmp_path, block_mems: str):
    from test_issue22_leaf_types import LOCAL_COPY, LOCAL_MAPPING

    logic, mapping = tmp_path / "twice.py", tmp_path / "twice.yaml"
    logic.write_text(LOCAL_COPY)
    text = LOCAL_MAPPING.replace("entrypoint: h", "entrypoint: h\nkeep_dtypes: [bfloat16]")
    mapping.write_text(text.replace('mems: {"*": LOCAL}', f'mems: {{"*": {block_mems}}}'))
    return septran.compile(logic_file=logic, mapping_file=mapping), mapping


def test_elementwise_code_on_kept_bits_is_refused(tmp_path, monkeypatch):
    """Elementwise code reading X where it lies would read bfloat16 bits as integers."""
    kernel, path = _twice(tmp_path, "GLOBAL")
    forbid_tilelang(monkeypatch, "refused before TileLang")
    with pytest.raises(septran.MappingError, match=r"[XY] stays bfloat16 \(keep_dtypes\), which cpu holds as uint16 "
                                                   r"bits, but elementwise code reads or writes it") as info:
        kernel.specialize(X=((7, 33), "bfloat16"))
    assert "keep_dtypes" in path.read_text().splitlines()[info.value.loc.line - 1]
    assert "delete bfloat16 from keep_dtypes" in info.value.hint


@pytest.mark.build
def test_kept_bits_staged_in_local_are_computed_converted(tmp_path):
    """The same code on tiles the vendor's copies convert (bf16 -> f32 on load, f32 -> bf16 on store) is right."""
    kernel, _ = _twice(tmp_path, "LOCAL")
    assert "float32" in kernel.specialize(X=((7, 33), "bfloat16")).tilelang_source
    x = torch.randn(20, 30).to(torch.bfloat16)
    y = kernel(x)
    assert y.dtype == torch.bfloat16 and torch.equal(y, x * 2)


def test_keep_dtypes_is_checked(tmp_path):
    path = edited_mapping(tmp_path, "cpu", "gemm", ("keep_dtypes: [bfloat16]", "keep_dtypes: [bfloat17]"))
    with pytest.raises(septran.MappingError, match="keep_dtypes: 'bfloat17' is not an element type"):
        septran.compile(logic_file=GEMM, mapping_file=path)


@pytest.mark.build
@pytest.mark.parametrize("mems,leaf", [("A: GLOBAL, B: GLOBAL", "gemm_leaf_blas"),
                                       ("A: LOCAL, B: LOCAL", "gemm_leaf_blas"),
                                       ("A: LOCAL, B: LOCAL", "gemm_leaf_cpu")])
def test_bfloat16_gemm_is_right_without_float32_copies(tmp_path, mems, leaf):
    """The flash rule against float64 on odd shapes, bfloat16 in and out: OpenBLAS widening each tile in place,
    the vendor's bf16 -> f32 copies into LOCAL tiles, and the f32 -> bf16 store (round to nearest even)."""
    path = edited_mapping(tmp_path, "cpu", "gemm", ("{C: LOCAL, A: GLOBAL, B: GLOBAL}", f"{{C: LOCAL, {mems}}}"),
                          ("gemm_leaf_logic: gemm_leaf_blas", f"gemm_leaf_logic: {leaf}"),
                          ("BM: 256", "BM: 64"), ("BN: 256", "BN: 32"), ("BK: 512", "BK: 48"))
    kernel = septran.compile(logic_file=GEMM, mapping_file=path)
    g = torch.Generator().manual_seed(21)
    for m, k, n in ((37, 50, 29), (1, 97, 65), (130, 7, 33)):
        a = torch.randn(m, k, generator=g).to(torch.bfloat16)
        b = torch.randn(k, n, generator=g).to(torch.bfloat16)
        out = kernel(a, b)
        assert out.dtype == torch.bfloat16
        assert_flash_rule(out, a.double() @ b.double(), a @ b, f"{m}x{k}x{n} {mems} {leaf}")


@pytest.mark.build
@pytest.mark.parametrize("leaf,flags", [("gemm_leaf_amx", ("amx_tile", "amx_bf16")), ("gemm_leaf_avx512bf16", ("avx512_bf16",))])
def test_the_units_leaves_are_right_where_the_cpu_has_them(tmp_path, leaf, flags):
    """On the hardware (skipped elsewhere: tests/test_cpu_bf16_units.py runs the same kernels emulated): the
    flash rule on odd shapes and both transposes' neighbours, through the shipped mapping's bfloat16 point."""
    if not set(flags) <= device.host_flags():
        pytest.skip(f"this CPU lacks {', '.join(flags)}")
    kernel = septran.compile(logic_file=GEMM, mapping_file=mapping_path("cpu"))
    g = torch.Generator().manual_seed(7)
    for m, k, n in ((37, 50, 29), (17, 97, 65), (300, 1031, 257)):  # more than 16 rows: fewer stream B (shape_points)
        a = torch.randn(m, k, generator=g).to(torch.bfloat16)
        b = torch.randn(k, n, generator=g).to(torch.bfloat16)
        out = kernel(a, b)
        assert _leaf(kernel.latest) == leaf or leaf == "gemm_leaf_avx512bf16" and "amx_bf16" in device.host_flags()
        assert_flash_rule(out, a.double() @ b.double(), a @ b, f"{m}x{k}x{n} {leaf}")


@pytest.mark.build
@pytest.mark.parametrize("act,w_transposed", [("none", True), ("gelu", False), ("silu", True)])
def test_bfloat16_linear_layers_are_right_and_keep_their_type(act, w_transposed):
    """The model level's GEMMs (septran::gemm, septran::gemm_residual: the epilogue mapping keeps bfloat16 too,
    the bias and the residual reaching the epilogue through the vendor's converting copies), a Linear's (N, K)
    weight read in place: the flash rule against float64 on odd shapes."""
    import septran.ops.gemm  # noqa: F401  (registers torch.ops.septran.gemm)
    import septran.ops.gemm_residual  # noqa: F401

    g = torch.Generator().manual_seed(3)
    m, k, n = 37, 70, 45
    x = torch.randn(m, k, generator=g).to(torch.bfloat16)
    w = torch.randn(*((n, k) if w_transposed else (k, n)), generator=g).to(torch.bfloat16)
    bias = torch.randn(n, generator=g).to(torch.bfloat16)
    r = torch.randn(m, n, generator=g).to(torch.bfloat16)
    acts = {"none": lambda t: t, "gelu": torch.nn.functional.gelu, "silu": torch.nn.functional.silu}
    wt = w.t() if w_transposed else w
    out = torch.ops.septran.gemm(x, w, bias, w_transposed, act)
    assert out.dtype == torch.bfloat16
    ref = acts[act](x.double() @ wt.double() + bias.double())
    assert_flash_rule(out, ref, acts[act](x @ wt + bias), f"gemm {act} {w_transposed}")
    if act == "none":
        out = torch.ops.septran.gemm_residual(x, w, bias, r, w_transposed)
        ref = x.double() @ wt.double() + bias.double() + r.double()
        assert_flash_rule(out, ref, x @ wt + bias + r, "gemm_residual")


def _swiglu_leaves(variant) -> set:
    p = variant.choice.point
    return {p[f"task_mappings.swiglu_block_cpu.leaf_task_bindings.swiglu_{g}"] for g in ("gate", "up")}


def test_swiglu_sends_bfloat16_to_the_unit_the_cpu_has(cpu_flags):
    """The SwiGLU MLP's gate and up GEMMs, as gemm's (mappings/cpu/swiglu_mlp.yaml): the unit's leaf for more than 16
    rows of bfloat16, the widening leaf for a decode step's rows and where the CPU has no unit."""
    from septran.ops.logic.swiglu_mlp import swiglu_mlp

    def variant(rows, flags, dtype="bfloat16"):
        cpu_flags(flags)
        kernel = septran.compile(swiglu_mlp(transpose_b=True), mapping_file=mapping_path("cpu", "swiglu_mlp"))
        return kernel.specialize(X=((rows, 40), dtype), Wg=((24, 40), dtype), Wu=((24, 40), dtype))

    assert _swiglu_leaves(variant(37, {"avx2"})) == {"gemm_leaf_blas"}
    assert _swiglu_leaves(variant(37, {"avx2", "avx512_bf16"})) == {"gemm_leaf_avx512bf16"}
    amx = variant(37, AMX)
    assert _swiglu_leaves(amx) == {"gemm_leaf_amx"} and "septran_cpu_gemm_amx_bf16" in amx.tilelang_source
    for rows in (1, 16):  # the few-row entries come first: they stream the weights through the widening leaf
        src = variant(rows, AMX).tilelang_source
        assert "septran_cpu_gemm_bf16_bf16" in src and "amx" not in src, rows
    assert "bf16" not in variant(37, AMX, "float32").tilelang_source


@pytest.mark.build
def test_bfloat16_swiglu_is_right_on_the_unit_the_cpu_has():
    """The flash rule against float64 on odd shapes through the shipped mapping's bfloat16 point (the unit's leaf
    where this CPU has one, else the widening one), the weights (N, K) read in place."""
    from septran.ops.logic.swiglu_mlp import swiglu_mlp

    kernel = septran.compile(swiglu_mlp(transpose_b=True), mapping_file=mapping_path("cpu", "swiglu_mlp"))
    g = torch.Generator().manual_seed(11)
    for m, k, n in ((37, 50, 29), (130, 97, 65), (17, 256, 688)):
        x = torch.randn(m, k, generator=g).to(torch.bfloat16)
        wg, wu = (torch.randn(n, k, generator=g).to(torch.bfloat16) for _ in range(2))
        out = kernel(x, wg, wu)
        assert out.dtype == torch.bfloat16
        silu = torch.nn.functional.silu
        assert_flash_rule(out, silu(x.double() @ wg.double().T) * (x.double() @ wu.double().T),
                          silu(x @ wg.T) * (x @ wu.T), f"swiglu {m}x{k}x{n} {_swiglu_leaves(kernel.latest)}")


def test_a_small_bfloat16_prefill_gets_small_tiles_on_the_unit(cpu_flags):
    """gemm_epilogue.yaml: a bfloat16 C of at most 256 x 1024 (a small model's prefill) runs the unit's leaf in 128 x 128
    tiles, so that both cores get programs; a larger C the unit's leaf at the first point's tiles."""
    from septran.ops.logic.gemm_epilogue import gemm_epilogue

    def point(rows, cols, flags):
        cpu_flags(flags)
        k = septran.compile(gemm_epilogue("gelu"), mapping_file=mapping_path("cpu", "gemm_epilogue"))
        v = k.specialize(A=((rows, 64), "bfloat16"), B=((64, cols), "bfloat16"), bias=((cols,), "bfloat16"))
        p = v.choice.point
        return (p["task_mappings.epi_block_cpu.leaf_task_bindings.epi_gemm_leaf"],
                p.get("task_mappings.epi_host.tunables.BM"), p.get("task_mappings.epi_host.tunables.BN"))

    for flags, leaf in (({"avx2", "avx512_bf16"}, "gemm_leaf_avx512bf16"), (AMX, "gemm_leaf_amx")):
        assert point(128, 1024, flags) == (leaf, 128, 128)
        assert point(300, 1024, flags)[0] == leaf and point(300, 1024, flags)[1:] != (128, 128)
