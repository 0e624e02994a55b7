"""gemm_leaf_mkl: the cpu target's GEMM leaf on the MKL that torch carries (backends/cpu/vendor/septran_cpu_mkl.c).

The vendor library is the one SepTran builds for the kernels; in this process torch is loaded, so the leaf finds MKL in
libtorch_cpu.so (where this torch has none, the tests that need it skip). Its GEMMs are checked as the matrix
units' are (test_cpu_bf16_units.check_gemm: tiles inside NaN-filled tensors, against float64), for float32, float16
and bfloat16 operands; a process without torch gets OpenBLAS's result and SEPTRAN_CPU_E_UNIT. At the mapping level,
an Intel CPU's float32 GEMMs (gemm, bmm, the epilogue) run it, an AMD CPU's epilogue too (its gemm and bmm run
OpenBLAS), and its kernels are right.
"""
from __future__ import annotations

import ctypes
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings

import septran
from conftest import REPO, assert_flash_rule, mapping_path
from test_cpu_bf16_units import E_UNIT, SETTINGS, SHAPES, check_gemm, fn, gemm_fn, tiles

pytestmark = pytest.mark.build  # builds the vendor library (and kernels) with gcc

MKL_F32, MKL_BF16 = 1, 2  # septran_cpu_mkl()'s bits
TYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
LEAF = "gemm_leaf_mkl"


@pytest.fixture(scope="module")
def lib() -> Path:
    """The vendor library as SepTran builds it for the kernels (backends/cpu/target.yaml's sources and flags)."""
    from septran.build import vendor
    from septran.target import load_target

    target = load_target("cpu")
    vendor.library(target)
    return vendor.library_path(target.vendor)


@pytest.fixture(scope="module")
def found(lib) -> int:
    bits = fn(ctypes.CDLL(str(lib)), "septran_cpu_mkl")()
    if not bits:
        pytest.skip("this torch carries no MKL (libtorch_cpu.so exports no sgemm_): the leaf runs OpenBLAS")
    return bits


@pytest.fixture(scope="module", params=list(TYPES))
def typed(request, lib, found):
    assert found == MKL_F32 | MKL_BF16, "torch's MKL has sgemm but not its bf16 GEMM"
    return gemm_fn(ctypes.CDLL(str(lib)), f"septran_cpu_gemm_mkl_{request.param}_{request.param}"), TYPES[request.param]


@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (0, 1), (1, 0), (1, 1)])
@pytest.mark.parametrize("m,n,k", SHAPES[::2] + [(17, 16, 5), (16, 40, 9), (40, 1, 9)])  # (16 rows, a column: OpenBLAS's paths)
def test_gemm(typed, m, n, k, trans_a, trans_b):
    f, dtype = typed
    check_gemm(f, m, n, k, trans_a, trans_b, seed=m * 10000 + n * 100 + k, dtype=dtype)


@settings(max_examples=20, **SETTINGS)
@given(tile=tiles())
def test_gemm_on_tiles_inside_tensors(typed, tile):
    f, dtype = typed
    m, n, k, trans_a, trans_b, extra, pads = tile
    check_gemm(f, m, n, k, trans_a, trans_b, extra, pads, seed=m + n + k, dtype=dtype)


def test_torch_keeps_its_thread_count_after_a_call(typed):
    """The leaf runs MKL on one thread for its call only: torch's own MKL calls on this thread keep torch's count."""
    f, dtype = typed
    before = torch.get_num_threads()
    check_gemm(f, 40, 33, 20, 0, 0, dtype=dtype)
    assert torch.get_num_threads() == before
    a = torch.randn(300, 300)
    assert torch.allclose(a @ a, (a.double() @ a.double()).float(), atol=1e-3)


def test_without_torch_openblas_computes_c_and_the_call_says_so(lib):
    """A process that never loaded torch has no MKL: the leaf's result is OpenBLAS's, and it returns E_UNIT."""
    script = f"""
import ctypes, random
lib = ctypes.CDLL({str(lib)!r})
lib.septran_cpu_mkl.restype = ctypes.c_int32
assert lib.septran_cpu_mkl() == 0
f = lib.septran_cpu_gemm_mkl_f32_f32
f.restype = ctypes.c_int32
f.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int32] * 2 + [ctypes.c_int64] * 9
m, n, k = 20, 7, 5
rnd = random.Random(0)
a = [rnd.uniform(-1, 1) for _ in range(m * k)]
b = [rnd.uniform(-1, 1) for _ in range(k * n)]
A, B, C = (ctypes.c_float * (m * k))(*a), (ctypes.c_float * (k * n))(*b), (ctypes.c_float * (m * n))()
assert f(C, A, B, 0, 0, m, n, m, k, k, n, n, k, n) == {E_UNIT}
ref = [sum(a[i * k + p] * b[p * n + j] for p in range(k)) for i in range(m) for j in range(n)]
assert max(abs(x - y) for x, y in zip(C, ref)) < 1e-5
assert "torch" not in __import__("sys").modules
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


# ---- the mappings: an Intel CPU's float32 GEMMs on MKL --------------------------------------------------------

GEMM_LOGIC = REPO / "septran" / "ops" / "logic"


def _leaves(variant) -> set[str]:
    return {v for p, v in variant.choice.mapping.point.items() if p.endswith(("gemm_leaf_logic", "bmm_leaf_logic", "epi_gemm_leaf"))}


def _kernel(op: str):
    """A new kernel (a kernel keeps the variant of a static shape: a process's CPU does not change)."""
    from septran.ops.logic.gemm_epilogue import gemm_epilogue

    logic = gemm_epilogue("gelu", False, True) if op == "gemm_epilogue" else None
    return septran.compile(logic, logic_file=None if logic else GEMM_LOGIC / f"{op}.py", mapping_file=mapping_path("cpu", op))


def _args(op: str, rows: int, dtype=torch.float32, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen).to(dtype)  # noqa: E731
    if op == "gemm":
        return r(rows, 50), r(50, 29)
    if op == "bmm":
        return r(3, rows, 50), r(3, 50, 29)
    return r(rows, 50), r(29, 50), r(29)  # the epilogue's weight stored n x k, as a Linear's


def _spec(args):
    """The inputs as specialize() takes them (the logic's parameters after C: A, B and the epilogue's bias)."""
    return {name: (tuple(a.shape), str(a.dtype).removeprefix("torch.")) for name, a in zip(("A", "B", "bias"), args)}


@pytest.mark.parametrize("op", ["gemm", "bmm", "gemm_epilogue"])
def test_an_intel_cpu_runs_float32_gemms_on_mkl_and_an_amd_one_on_openblas(cpu_maker, cpu_flags, op):
    """gemm and bmm (B as stored: OpenBLAS is the faster on AMD's cores); the epilogue, whose B is a Linear's weight
    stored n x k (MKL the faster on Zen 4 and Intel), on MKL but on Zen 5 (an AMD CPU reporting VP2INTERSECT: OpenBLAS's
    AVX-512 kernels use its full-width units)."""
    amd = LEAF if op == "gemm_epilogue" else "gemm_leaf_blas"
    for vendor, flags, rows, want in (("GenuineIntel", (), 37, LEAF), ("AuthenticAMD", (), 37, amd),
                                      ("AuthenticAMD", ("avx512_vp2intersect",), 37, "gemm_leaf_blas"),
                                      ("GenuineIntel", ("avx512_vp2intersect",), 37, LEAF),
                                      ("GenuineIntel", (), 4, "gemm_leaf_blas"),   # a decode step streams B
                                      ("GenuineIntel", (), 700, LEAF)):
        cpu_maker(vendor)
        cpu_flags(flags)
        kernel = _kernel(op)
        assert _leaves(kernel.specialize(**_spec(_args(op, rows, torch.float32)))) == {want}, (vendor, flags, rows)


@pytest.mark.parametrize("op", ["gemm", "bmm", "gemm_epilogue"])
def test_the_mkl_leaf_kernels_are_right_on_odd_shapes(cpu_maker, op):
    if not torch.backends.mkl.is_available():
        pytest.skip("this torch carries no MKL")
    cpu_maker("GenuineIntel")
    kernel = _kernel(op)
    for rows in (37, 300):
        args = _args(op, rows, seed=rows)
        out = kernel(*args)
        assert _leaves(kernel.latest) == {LEAF}
        if op == "gemm_epilogue":
            x, w, bias = args
            ref = torch.nn.functional.gelu(x.double() @ w.double().T + bias.double())
            torch_out = torch.nn.functional.gelu(x @ w.T + bias)
        else:
            ref = args[0].double() @ args[1].double()
            torch_out = args[0] @ args[1]
        assert_flash_rule(out, ref, torch_out, f"{op} {rows} rows")


def test_swiglu_runs_float32_on_mkl_and_is_right(cpu_maker, cpu_flags):
    """SwiGLU's gate and up GEMMs read Linear weights stored n x k: float32 calls of more than 16 rows run on MKL on
    any CPU but Zen 5 (test_shape_points.py); a decode step's rows stream the weights through OpenBLAS's leaf."""
    from septran.ops.logic.swiglu_mlp import swiglu_mlp

    cpu_maker("AuthenticAMD")
    cpu_flags()  # a Zen 4: no VP2INTERSECT
    kernel = septran.compile(swiglu_mlp(transpose_b=True), mapping_file=mapping_path("cpu", "swiglu_mlp"))
    gen = torch.Generator().manual_seed(5)
    for rows, want in ((37, LEAF), (3, "gemm_leaf_blas")):
        x, wg, wu = (torch.randn(*s, generator=gen) for s in ((rows, 40), (24, 40), (24, 40)))
        out = kernel(x, wg, wu)
        point = kernel.latest.choice.mapping.point
        assert {v for p, v in point.items() if p.endswith(("swiglu_gate", "swiglu_up"))} == {want}
        ref = torch.nn.functional.silu(x.double() @ wg.double().T) * (x.double() @ wu.double().T)
        assert_flash_rule(out, ref, torch.nn.functional.silu(x @ wg.T) * (x @ wu.T), f"swiglu {rows} rows")


@pytest.mark.parametrize("op", ["gemm", "gemm_epilogue"])
@pytest.mark.parametrize("vendor", ["GenuineIntel", "AuthenticAMD"])
def test_a_whole_c_runs_as_one_program_on_every_thread(cpu_maker, op, vendor):
    """A float32 C of more than 400 rows and columns (the epilogue: over a depth of more than 384; an Intel CPU's gemm:
    any of more than 16 rows) runs as one
    program over the whole of C in GLOBAL: one vendor call, which splits C over the threads itself (OpenBLAS in
    panels, MKL its own threads); right at odd sizes on 1 and 2 threads, with torch's thread count kept."""
    if vendor == "GenuineIntel" and not torch.backends.mkl.is_available():
        pytest.skip("this torch carries no MKL")
    cpu_maker(vendor)
    kernel = _kernel(op)
    gen = torch.Generator().manual_seed(7)
    before = torch.get_num_threads()
    try:
        for threads, (m, n, k) in ((2, (437, 411, 403)), (1, (403, 521, 397)), (2, (419, 433, 4101))):  # 4101: two depth steps
            torch.set_num_threads(threads)
            x = torch.randn(m, k, generator=gen)
            args = (x, torch.randn(k, n, generator=gen)) if op == "gemm" else \
                (x, torch.randn(n, k, generator=gen), torch.randn(n, generator=gen))
            out = kernel(*args)
            point = kernel.latest.choice.mapping.point
            mems = {p.rsplit(".", 1)[1]: v for p, v in point.items() if ".mems." in p}
            assert mems.get("C", mems.get("*")) == "GLOBAL", point  # gemm names C; the epilogue "*" (C, bias)
            assert _leaves(kernel.latest) == {LEAF if vendor == "GenuineIntel" else "gemm_leaf_blas"}
            assert torch.get_num_threads() == threads
            if op == "gemm":
                ref, torch_out = args[0].double() @ args[1].double(), args[0] @ args[1]
            else:
                ref = torch.nn.functional.gelu(x.double() @ args[1].double().T + args[2].double())
                torch_out = torch.nn.functional.gelu(x @ args[1].T + args[2])
            assert_flash_rule(out, ref, torch_out, f"{op} {m}x{n}x{k} on {threads} threads")
            if op == "gemm":  # the program reads C before writing it: a C passed in starts from zeros, not from its NaNs
                given = torch.full((m, n), float("nan"))
                assert kernel(*args, C=given) is given
                assert_flash_rule(given, ref, torch_out, f"{op} {m}x{n}x{k} into a NaN-filled C")
    finally:
        torch.set_num_threads(before)


def test_mkl_runs_its_own_threads_for_a_whole_c(typed):
    """Called outside a parallel region with 2^22 multiply-adds or more (a kernel of one program over a whole C), the
    leaf gives MKL torch's thread count for the call; right on every transpose, and torch's count is kept."""
    f, dtype = typed
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for trans_a, trans_b in ((0, 0), (0, 1), (1, 0), (1, 1)):
            check_gemm(f, 301, 150, 97, trans_a, trans_b, seed=trans_a * 2 + trans_b, dtype=dtype)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("vendor", ["GenuineIntel", "AuthenticAMD"])
def test_the_residual_variant_runs_a_whole_c_too(cpu_maker, vendor):
    """The model level's gemm_residual (the epilogue logic's residual variant, on the same mapping) meets the whole-C
    entries as the epilogue does: R and the bias are read in GLOBAL with C, never staged in a LOCAL tile as large as
    C (which the cpu's 1 MiB refuses); right at odd sizes, and a small C keeps its LOCAL tiles."""
    if vendor == "GenuineIntel" and not torch.backends.mkl.is_available():
        pytest.skip("this torch carries no MKL")
    from septran.ops import kernels
    from septran.ops.logic.gemm_epilogue import gemm_epilogue

    cpu_maker(vendor)
    kernel = septran.compile(gemm_epilogue("none", False, True, residual=True),
                             kernels.mapping("cpu", "gemm_epilogue", unbound=("epi_act_leaf",)))
    gen = torch.Generator().manual_seed(11)
    for (m, n, k), mem in (((437, 411, 403), "GLOBAL"), ((37, 411, 403), "LOCAL")):
        x, w, bias, r = (torch.randn(*s, generator=gen) for s in ((m, k), (n, k), (n,), (m, n)))
        out = kernel(x, w, bias, r)
        point = kernel.latest.choice.mapping.point
        assert {v for p, v in point.items() if p.endswith("mems.*")} == {mem}, point
        ref = x.double() @ w.double().T + bias.double() + r.double()
        assert_flash_rule(out, ref, x @ w.T + bias + r, f"gemm_residual {m}x{n}x{k}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_16_bit_c_over_a_whole_c_point_is_refused(dtype):
    """A bfloat16 or float16 C kept as it is cannot be a GEMM leaf's float32 accumulator: a point that puts it in
    GLOBAL (the float32 whole-C point, forced on 16-bit operands) is refused at the mapping's line, naming the leaf
    and C's type, never run into C's 16-bit bits."""
    from septran.errors import LoweringError

    kernel = _kernel("gemm")
    a, b = (torch.randn(*s).to(dtype) for s in ((437, 203), (203, 411)))
    kernel(a, b)  # the mapping's own point for these types
    point = {**kernel.latest.choice.mapping.point, "task_mappings.gemm_block_cpu.mems.C": "GLOBAL",
             "task_mappings.gemm_host.tunables.BM": 4096, "task_mappings.gemm_host.tunables.BN": 16384}
    with pytest.raises(LoweringError, match=r"gemm\.yaml:\d+:\d+: .*implements gemm for .*C of gemm_block_logic"):
        kernel.at(point)(a, b)
