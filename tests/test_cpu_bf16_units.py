"""bfloat16 in the CPU target's vendor library (backends/cpu/vendor): the tile copies and the widened GEMM
(septran_cpu.c), and the GEMMs on the CPU's matrix units (septran_cpu_bf16.c: AVX512-BF16 and AMX).

The library is built here with gcc, as septran/build/vendor.py builds it plus septran_cpu_bf16.c, twice: as
SepTran builds it, and with -DSEPTRAN_CPU_EMULATE_UNITS, where the units' instructions are plain C with the
same semantics, so that the kernels' packing, blocking and edges run on any CPU. The units' kernels run for real
only where septran_cpu_units() finds them. Checked against torch in float64 from the same bfloat16 values: the
units' products are exact and summed in float32, so the error is within float32's (k + 2) roundings of
sum |a| |b|. Tiles sit inside tensors filled with NaN (A, B: a value read outside the product poisons C) and -0.0
(C: even adding zero there shows), and some end just before an unreadable page.
"""
from __future__ import annotations

import ctypes
import importlib.util
import mmap
import subprocess
import threading
from pathlib import Path

import pytest
import torch
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from conftest import REPO

pytestmark = pytest.mark.build  # builds the vendor library (twice, with gcc)

VENDOR = REPO / "backends/cpu/vendor"
SOURCES = ["septran_cpu.c", "septran_cpu_typed.c", "septran_cpu_gemv.c", "septran_cpu_bf16.c"]
F32, F16, BF16 = 0, 1, 2  # septran_cpu.h's dtype codes
E_ARGS, E_UNIT = -1, -3
AVX512BF16, AMX = 1, 2  # septran_cpu_units()'s bits
SIZES = [1, 2, 15, 16, 17, 31, 33, 64, 100, 129]
SETTINGS = dict(derandomize=True, deadline=None, phases=[Phase.explicit, Phase.generate])
I32, I64, PTR = ctypes.c_int32, ctypes.c_int64, ctypes.c_void_p


def openblas() -> Path:
    """The scipy-openblas32 wheel's library, found without importing the package (as septran/build/vendor.py)."""
    spec = importlib.util.find_spec("scipy_openblas32")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("scipy-openblas32 is not installed")
    return Path(spec.submodule_search_locations[0]) / "lib" / "libscipy_openblas.so"


@pytest.fixture(scope="module")
def libs(tmp_path_factory) -> dict[str, ctypes.CDLL]:
    """{"native": as SepTran builds it, "emulated": the units' instructions in plain C, "emulated_k64": the same with
    AMX's k blocks 64 deep}, built at once.
    -Bsymbolic: each binds its own functions, not those of a vendor library another test loaded RTLD_GLOBAL."""
    folder, blas = tmp_path_factory.mktemp("bf16_units"), openblas()
    # emulated_k64: AMX's k in blocks of 64, so that small products cross blocks (the shipped blocks are 512 deep)
    builds = {"native": [], "emulated": ["-DSEPTRAN_CPU_EMULATE_UNITS"],
              "emulated_k64": ["-DSEPTRAN_CPU_EMULATE_UNITS", "-DSEPTRAN_CPU_AMX_K_STEPS=2"]}
    jobs = {}
    for name, extra in builds.items():
        out = folder / f"libseptran_cpu_{name}.so"
        cmd = ["gcc", "-std=c11", "-O2", "-fPIC", "-shared", *(str(VENDOR / s) for s in SOURCES), "-march=native",
               "-fopenmp", *extra, str(blas), f"-Wl,-rpath,{blas.parent}", "-Wl,-Bsymbolic", "-o", str(out)]
        jobs[name] = (out, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    loaded = {}
    for name, (out, job) in jobs.items():
        log = job.communicate(timeout=120)[0]
        assert job.returncode == 0, f"the {name} build failed:\n{log}"
        loaded[name] = ctypes.CDLL(str(out))
    return loaded


def fn(lib, name: str, *argtypes):
    f = getattr(lib, name)
    f.restype, f.argtypes = I32, list(argtypes)
    return f


def gemm_fn(lib, name: str):
    """septran_cpu_typed.c's GEMM signature: C, A, B, trans_a, trans_b, then 9 int64 sizes and strides."""
    return fn(lib, name, PTR, PTR, PTR, I32, I32, *[I64] * 9)


def ptr(t: torch.Tensor) -> int:
    return t.view(torch.int16).data_ptr() if t.dtype == torch.bfloat16 else t.data_ptr()


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16 if t.element_size() == 2 else torch.int32)


def units(lib) -> int:
    return fn(lib, "septran_cpu_units")()


# (build, function, the unit it needs): each unit's kernel emulated; natively where the CPU has the unit; the
# widened GEMM (OpenBLAS) everywhere.
KERNELS = [("emulated", "septran_cpu_gemm_avx512bf16_bf16", AVX512BF16), ("emulated", "septran_cpu_gemm_amx_bf16", AMX),
           ("emulated_k64", "septran_cpu_gemm_amx_bf16", AMX),
           ("native", "septran_cpu_gemm_avx512bf16_bf16", AVX512BF16), ("native", "septran_cpu_gemm_amx_bf16", AMX),
           ("native", "septran_cpu_gemm_bf16_bf16", 0)]


@pytest.fixture(scope="module", params=KERNELS, ids=[f"{b}-{f.removeprefix('septran_cpu_gemm_')}" for b, f, _ in KERNELS])
def kernel(request, libs):
    build, name, unit = request.param
    if unit and not units(libs[build]) & unit:
        pytest.skip(f"this CPU (or OS) has no {'AVX512-BF16' if unit == AVX512BF16 else 'AMX'}: runs emulated only")
    return gemm_fn(libs[build], name)


# ---- the GEMMs -----------------------------------------------------------------------------------------------


def nan_tensor(rows: int, cols: int, dtype) -> torch.Tensor:
    return torch.full((rows, cols), float("nan"), dtype=dtype)


def embed(used: torch.Tensor, told: tuple[int, int], pad: int, fill: float = float("nan")):
    """`used` at (1, 1) of a tensor of `fill` whose rows are told[1] + pad + 2 long: (the tensor, the tile at
    (1, 1) that the call is told holds told[0] x told[1] valid elements, the row stride)."""
    big = torch.full((told[0] + 2, told[1] + pad + 2), fill, dtype=used.dtype)
    big[1:1 + used.shape[0], 1:1 + used.shape[1]] = used
    return big, big[1:, 1:], big.stride(0)


def check_gemm(f, m: int, n: int, k: int, trans_a: int, trans_b: int, extra=(0, 0, 0, 0, 0, 0), pads=(0, 0, 0),
               seed: int = 0, dtype=torch.bfloat16) -> None:
    """C (m x n, on non-zero C) += op(A) @ op(B) with each operand told it holds more than the product uses
    (extra: C's rows, C's columns, op(A)'s rows, op(A)'s columns, op(B)'s rows, op(B)'s columns; of each pair
    that bounds m, n or k at most one is more), inside tensors of NaN (A, B) and -0.0 (C) with rows `pads` longer
    than the tile; A and B of `dtype`, C float32."""
    gen = torch.Generator().manual_seed(seed)
    ec_r, ec_c, ea_r, ea_c, eb_r, eb_c = extra
    op_a = torch.randn(m, k, generator=gen).to(dtype)
    op_b = torch.randn(k, n, generator=gen).to(dtype)
    c0 = torch.randn(m, n, generator=gen)
    a_told, b_told = (m + ea_r, k + ea_c), (k + eb_r, n + eb_c)
    a_big, a, lda = embed(op_a.T.contiguous() if trans_a else op_a, a_told[::-1] if trans_a else a_told, pads[1])
    b_big, b, ldb = embed(op_b.T.contiguous() if trans_b else op_b, b_told[::-1] if trans_b else b_told, pads[2])
    c_big, c, ldc = embed(c0, (m + ec_r, n + ec_c), pads[0], fill=-0.0)  # -0.0 + 0.0 is +0.0
    before = c_big.clone()
    a_rows, a_cols = a_told[::-1] if trans_a else a_told
    b_rows, b_cols = b_told[::-1] if trans_b else b_told
    rc = f(ptr(c), ptr(a), ptr(b), trans_a, trans_b, m + ec_r, n + ec_c, a_rows, a_cols, b_rows, b_cols, ldc, lda, ldb)
    assert rc == 0
    out = c_big[1:1 + m, 1:1 + n].double()
    outside = torch.ones_like(c_big, dtype=torch.bool)
    outside[1:1 + m, 1:1 + n] = False
    assert torch.equal(bits(c_big)[outside], bits(before)[outside]), "C written outside the product"
    ref = c0.double() + op_a.double() @ op_b.double()
    scale = c0.double().abs() + op_a.double().abs() @ op_b.double().abs()
    rtol = max(1e-5, (k + 2) * 2.0 ** -24)
    err = (out - ref).abs()
    assert not out.isnan().any(), "NaN in C: a value outside the operands' product was read"
    assert (err <= rtol * scale).all(), f"max error / scale {(err / scale).max():.3e}"


def covering(sizes: list[int]) -> list[tuple[int, int, int]]:
    """Triples in which every size appears once as m, once as n and once as k."""
    return [(s, sizes[(i + 3) % len(sizes)], sizes[(i + 7) % len(sizes)]) for i, s in enumerate(sizes)]


# Whole blocks (AVX512: 8 x 32, AMX: 2 x 2 tiles of 16 x 16 over 32 k), one short of and one past them, and a k
# past the AVX512 kernel's k blocking (256 pairs). AMX reads A in place when k is a multiple of 32 (the m edge's
# tile rows packed: 49 and 63 rows pair a tile row in place with a packed one, 100 ends on a packed row alone),
# and packs B's whole pairs with shuffles (two panels at once from its rows; 16 x 16 transposes when stored n x k).
SHAPES = covering(SIZES) + [(1, 1, 1), (8, 32, 2), (32, 32, 64), (9, 33, 65), (16, 16, 32), (47, 63, 1031),
                            (49, 48, 64), (100, 96, 96), (63, 80, 160), (129, 33, 32)]


@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (0, 1), (1, 0), (1, 1)])
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_gemm(kernel, m, n, k, trans_a, trans_b):
    check_gemm(kernel, m, n, k, trans_a, trans_b, seed=m * 10000 + n * 100 + k)


@st.composite
def tiles(draw):
    """A product inside bigger tiles (what each operand is told it holds), inside bigger tensors."""
    size = st.one_of(st.sampled_from(SIZES), st.integers(1, 40))
    m, n, k = draw(size), draw(size), draw(size)
    extra = [0] * 6
    for first, second in ((0, 2), (1, 5), (3, 4)):  # m: C's rows or op(A)'s; n: C's columns or op(B)'s; k
        extra[draw(st.sampled_from([first, second]))] = draw(st.integers(0, 3))
    pads = tuple(draw(st.sampled_from([0, 1, 7])) for _ in range(3))
    return m, n, k, draw(st.integers(0, 1)), draw(st.integers(0, 1)), tuple(extra), pads


@settings(max_examples=30, **SETTINGS)
@given(tile=tiles())
def test_gemm_on_tiles_inside_tensors(kernel, tile):
    m, n, k, trans_a, trans_b, extra, pads = tile
    check_gemm(kernel, m, n, k, trans_a, trans_b, extra, pads, seed=m + n + k)


@pytest.mark.parametrize("sizes", [(0, 5, 4, 4, 4, 5), (5, 5, 0, 4, 4, 5), (5, 5, 5, 4, 0, 5), (5, 0, 5, 4, 4, 5),
                                   (5, 5, 5, 0, 4, 5)])
def test_gemm_with_an_empty_product_leaves_c_alone(kernel, sizes):
    c_rows, c_cols, a_rows, a_cols, b_rows, b_cols = sizes
    c, a, b = torch.full((6, 6), 3.0), torch.ones(6, 6, dtype=torch.bfloat16), torch.ones(6, 6, dtype=torch.bfloat16)
    assert kernel(ptr(c), ptr(a), ptr(b), 0, 0, c_rows, c_cols, a_rows, a_cols, b_rows, b_cols, 6, 6, 6) == 0
    assert (c == 3).all()


def test_gemm_refuses_bad_arguments(kernel):
    c, a, b = torch.zeros(4, 4), torch.ones(4, 4, dtype=torch.bfloat16), torch.ones(4, 4, dtype=torch.bfloat16)
    assert kernel(ptr(c), ptr(a), ptr(b), 0, 0, -1, 4, 4, 4, 4, 4, 4, 4, 4) == E_ARGS
    assert kernel(ptr(c), ptr(a), ptr(b), 0, 0, 4, 4, 4, 4, 4, 4, 4, 2, 4) == E_ARGS  # A's rows overlap
    assert kernel(ptr(c), ptr(a), ptr(b), 0, 0, 4, 4, 4, 4, 4, 4, 3, 4, 4) == E_ARGS  # C's rows overlap
    assert not c.any()
    # one row: the stride means nothing (septran_cpu_gemm's rule)
    assert kernel(ptr(c), ptr(a), ptr(b), 0, 0, 1, 4, 1, 4, 4, 4, 0, 0, 4) == 0
    assert (c[0] == 4).all() and not c[1:].any()


def test_gemm_from_threads_at_once(kernel):
    """One call per thread, as the OpenMP grid makes them: the packed operands (and AMX's tiles) are per thread."""
    errors = []

    def work(i):
        try:
            for j in range(3):
                check_gemm(kernel, 20 + 7 * i, 40 - 5 * i, 33 + 30 * j, i % 2, j % 2, seed=i * 10 + j)
        except AssertionError as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


_LIBC = ctypes.CDLL(None, use_errno=True)
_PAGES = []  # the mappings behind guarded tensors, kept for the process (a mapping with views cannot close)


def guarded(values: torch.Tensor, ld: int) -> torch.Tensor:
    """`values` (rows x cols) in a tensor of row stride ld whose last element is the last one before a page that
    cannot be read or written: a kernel that touches anything past the tile's last element faults."""
    rows, cols = values.shape
    size, page = values.element_size(), mmap.PAGESIZE
    span = (rows - 1) * ld + cols
    pages = -(-span * size // page)
    mem = mmap.mmap(-1, (pages + 1) * page)
    base = ctypes.addressof(ctypes.c_char.from_buffer(mem))
    assert _LIBC.mprotect(ctypes.c_void_p(base + pages * page), ctypes.c_size_t(page), 0) == 0  # PROT_NONE
    _PAGES.append(mem)
    usable = pages * page // size
    t = torch.frombuffer(mem, dtype=values.dtype, count=usable).as_strided((rows, cols), (ld, 1), usable - span)
    t.copy_(values)
    return t


@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (0, 1), (1, 0), (1, 1)])
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (17, 3, 33), (5, 31, 2), (33, 17, 15)])
def test_gemm_touches_nothing_past_the_tiles_end(kernel, m, n, k, trans_a, trans_b):
    """Each operand's last element is its tensor's last, the page after it unmapped, as a tile at a tensor's end
    is; the row strides are longer than the rows."""
    gen = torch.Generator().manual_seed(m + n + k)
    op_a, op_b = (torch.randn(r, c, generator=gen).to(torch.bfloat16) for r, c in ((m, k), (k, n)))
    a_val, b_val = (op_a.T if trans_a else op_a), (op_b.T if trans_b else op_b)
    a, b = guarded(a_val, a_val.shape[1] + 3), guarded(b_val, b_val.shape[1] + 5)
    c0 = torch.randn(m, n, generator=gen)
    c = guarded(c0, n + 2)
    assert kernel(ptr(c), ptr(a), ptr(b), trans_a, trans_b, m, n, *a.shape, *b.shape, c.stride(0), a.stride(0),
                  b.stride(0)) == 0
    ref = c0.double() + op_a.double() @ op_b.double()
    scale = c0.double().abs() + op_a.double().abs() @ op_b.double().abs()
    assert ((c.double() - ref).abs() <= 1e-5 * scale).all()


def cpu_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def test_units_are_the_cpus_and_a_missing_one_refuses(libs):
    """Natively, septran_cpu_units() is what the CPU has (on an AVX2 host without AVX-512: nothing); a unit's GEMM
    where it is missing returns SEPTRAN_CPU_E_UNIT after the widened GEMM computed C (a kernel ignores what its
    leaves return: never an untouched C). Emulated: both."""
    native, flags = libs["native"], cpu_flags()
    found = units(native)
    assert bool(found & AVX512BF16) == ({"avx512f", "avx512_bf16"} <= flags)
    assert bool(found & AMX) == ({"amx_tile", "amx_bf16", "avx512f"} <= flags)
    assert units(libs["emulated"]) == AVX512BF16 | AMX
    gen = torch.Generator().manual_seed(5)
    a, b = torch.randn(17, 9, generator=gen).to(torch.bfloat16), torch.randn(9, 33, generator=gen).to(torch.bfloat16)
    for name, unit in [("septran_cpu_gemm_avx512bf16_bf16", AVX512BF16), ("septran_cpu_gemm_amx_bf16", AMX)]:
        if found & unit:
            continue
        f = gemm_fn(native, name)
        for m, n, k in [(17, 33, 9), (0, 33, 9), (17, 33, 0)]:
            c = torch.randn(17, 33, generator=gen)
            want = c.clone()
            want[:m, :n] += (a[:m, :k].double() @ b[:k, :n].double()).float()
            assert f(ptr(c), ptr(a), ptr(b), 0, 0, m, n, m, k, k, n, 33, 9, 33) == E_UNIT
            torch.testing.assert_close(c, want, rtol=1e-5, atol=1e-5)


# ---- bfloat16 copies (septran_cpu.c) -------------------------------------------------------------------------


def load(lib, dst: torch.Tensor, src: torch.Tensor, valid=None) -> int:
    """septran_cpu_load_<dst>_<src> of a whole 2-D tile (valid: the source's valid rows and columns)."""
    names = {torch.float32: "f32", torch.bfloat16: "bf16"}
    f = fn(lib, f"septran_cpu_load_{names[dst.dtype]}_{names[src.dtype]}", PTR, PTR, *[I64] * 6)
    rows, cols = dst.shape
    vr, vc = valid or (rows, cols)
    return f(ptr(dst), ptr(src), rows, cols, dst.stride(0), src.stride(0), vr, vc)


def f32_from_bits(values: list[int]) -> torch.Tensor:
    return torch.tensor([v - (1 << 32) if v >= 1 << 31 else v for v in values], dtype=torch.int32).view(torch.float32)


# float32 bits and the bfloat16 bits they round to (nearest, ties to even); NaNs keep sign and payload, made quiet.
ROUNDING = {
    0x3F808000: 0x3F80, 0x3F818000: 0x3F82,  # ties: to the even neighbour
    0x3F807FFF: 0x3F80, 0x3F808001: 0x3F81,  # either side of a tie
    0xBF818000: 0xBF82, 0x00008000: 0x0000, 0x00018000: 0x0002, 0x80000000: 0x8000,  # negative, subnormal, -0
    0x7F800000: 0x7F80, 0xFF800000: 0xFF80,  # inf stays inf
    0x7F7FFFFF: 0x7F80, 0x7F7F8000: 0x7F80, 0x7F7F7FFF: 0x7F7F, 0xFF7FFFFF: 0xFF80,  # past bfloat16's largest: inf
    0x7FC00000: 0x7FC0, 0x7F800001: 0x7FC0, 0xFF800001: 0xFFC0, 0x7FFFFFFF: 0x7FFF, 0x7FA12345: 0x7FE1,  # NaNs
}


@pytest.mark.parametrize("cols", [1, 7, 16, 37])  # the 16-wide AVX2 loop, its tail, both
def test_float32_to_bfloat16_rounds_to_nearest_even(libs, cols):
    lib = libs["native"]
    specials = f32_from_bits(list(ROUNDING))
    src = torch.cat([specials, torch.randint(-2 ** 31, 2 ** 31 - 1, (400,), dtype=torch.int32).view(torch.float32)])
    src = src[: (src.numel() // cols) * cols].reshape(-1, cols)
    dst = torch.zeros(src.shape, dtype=torch.bfloat16)
    assert load(lib, dst, src) == 0
    got, want = bits(dst).flatten().tolist(), bits(src.to(torch.bfloat16)).flatten().tolist()
    nan = src.isnan().flatten().tolist()
    for i, (g, w, x) in enumerate(zip(got, want, bits(src).flatten().tolist())):
        g, x = g & 0xFFFF, x & 0xFFFFFFFF
        if x in ROUNDING:
            assert g == ROUNDING[x], f"{x:#010x} -> {g:#06x}, want {ROUNDING[x]:#06x}"
        if nan[i]:  # torch makes every NaN its one quiet NaN
            assert g & 0x7FC0 == 0x7FC0 and g >> 15 == x >> 31, f"NaN {x:#010x} -> {g:#06x}"
        else:
            assert g == w & 0xFFFF, f"{x:#010x} -> {g:#06x}, torch {w & 0xFFFF:#06x}"


def test_subnormals_among_normals_round_as_torch(libs):
    """Where the CPU has AVX512-BF16 the store converts 16 floats in one instruction, which flushes subnormals
    to zero: a vector holding one is converted on the bits instead. One subnormal in each lane of 16, and whole
    vectors of them; values near the smallest normal either side."""
    gen = torch.Generator().manual_seed(11)
    normals = torch.randn(16 * 17, generator=gen).reshape(17, 16)
    lane = torch.arange(16)
    sub = torch.randint(1, 1 << 23, (16,), generator=gen, dtype=torch.int32).view(torch.float32) * torch.where(lane % 2 == 0, 1.0, -1.0)
    normals[lane, lane] = sub  # row i holds a subnormal in lane i
    normals[16] = sub  # a vector of nothing else
    edge = f32_from_bits([0x00800000, 0x007FFFFF, 0x007F8000, 0x007F7FFF, 0x80800000, 0x807FFFFF, 0x00000001, 0x80000001,
                          0x00808000, 0x00818000, 0x0000FFFF, 0x00017FFF, 0x00008001, 0x3F800000, 0, 0x80000000])
    src = torch.cat([normals, edge[None]]).reshape(-1, 48)  # 48: three vectors a row
    dst = torch.zeros(src.shape, dtype=torch.bfloat16)
    assert load(libs["native"], dst, src) == 0
    assert torch.equal(bits(dst), bits(src.to(torch.bfloat16)))


def test_bfloat16_to_float32_is_exact(libs):
    every = torch.arange(-2 ** 15, 2 ** 15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    src = every[:65535].reshape(-1, 255)  # 255: the 8-wide loop and a tail
    dst = torch.zeros(src.shape, dtype=torch.float32)
    assert load(libs["native"], dst, src) == 0
    want = src.float()
    nan = want.isnan()
    assert torch.equal(dst.isnan(), nan)
    assert torch.equal(bits(dst)[~nan], bits(want)[~nan])


@pytest.mark.parametrize("src_dtype", [torch.bfloat16, torch.float32])
def test_bfloat16_tile_load_and_store_keep_to_the_valid_part(libs, src_dtype):
    lib, gen = libs["native"], torch.Generator().manual_seed(3)
    big = torch.randn(12, 30, generator=gen).to(src_dtype)
    src = big[2:, 3:]  # a tile inside a tensor (row stride 30), 5 x 9 of it valid
    dst_big = nan_tensor(8, 20, torch.bfloat16)
    dst = dst_big[:, 1:13]  # 8 x 12, row stride 20
    assert load(lib, dst, src, valid=(5, 9)) == 0
    want = torch.zeros(8, 12, dtype=torch.bfloat16)
    want[:5, :9] = src[:5, :9].to(torch.bfloat16)
    assert torch.equal(bits(dst), bits(want))
    assert dst_big[:, 0].isnan().all() and dst_big[:, 13:].isnan().all()
    # and back: only the valid part written
    names = {torch.float32: "f32", torch.bfloat16: "bf16"}
    store = fn(lib, f"septran_cpu_store_{names[src_dtype]}_bf16", PTR, PTR, *[I64] * 4)
    out_big = nan_tensor(10, 30, src_dtype)
    out = out_big[1:, 2:]
    assert store(ptr(out), ptr(dst), 5, 9, out.stride(0), dst.stride(0)) == 0
    assert torch.equal(out[:5, :9], dst[:5, :9].to(src_dtype))
    rest = torch.ones_like(out_big, dtype=torch.bool)
    rest[1:6, 2:11] = False
    assert out_big[rest].isnan().all()


def test_bfloat16_fill_zero_and_refused_conversions(libs):
    lib = libs["native"]
    big = nan_tensor(6, 10, torch.bfloat16)
    fill = fn(lib, "septran_cpu_fill_zero_bf16", PTR, *[I64] * 3)
    assert fill(ptr(big), 4, 7, 10) == 0
    assert not bits(big[:4, :7]).any() and big[:4, 7:].isnan().all() and big[4:].isnan().all()
    generic_load = fn(lib, "septran_cpu_load", PTR, I32, PTR, I32, *[I32] * 6)
    generic_store = fn(lib, "septran_cpu_store", PTR, I32, PTR, I32, *[I32] * 4)
    half, bf = torch.ones(4, 4, dtype=torch.float16), torch.full((4, 4), 2.0, dtype=torch.bfloat16)
    assert generic_load(ptr(half), F16, ptr(bf), BF16, 4, 4, 4, 4, 4, 4) == E_ARGS  # float16 <-> bfloat16: refused
    assert generic_store(ptr(bf), BF16, ptr(half), F16, 4, 4, 4, 4) == E_ARGS
    assert (half == 1).all() and (bf == 2).all()
