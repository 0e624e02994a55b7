"""The two DSA vendor libraries on their own (no SepTran): built with gcc into a temporary folder,
driven through ctypes and from a C++ caller that declares them the way TileLang does, checked
against torch (float64 references, torch's own float16 rounding)."""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from conftest import REPO, assert_gemm_close

I32, PTR, BUF = ctypes.c_int32, ctypes.c_void_p, ctypes.c_char_p
CFLAGS = ["-std=c11", "-O2", "-fPIC", "-Wall", "-Wextra", "-pedantic", "-Werror"]
VENDOR = {"ref": REPO / "backends/dsa_ref/vendor", "acme": REPO / "backends/dsa_acme/vendor"}
SOURCE = {"ref": "dsa_ref", "acme": "acme_npu"}

# Every exported function: name -> (argument types, result type). The libraries export nothing else.
API = {
    "ref": {
        "dsa_ref_dma_load": ([I32, PTR, I32, I32, I32, I32, I32, I32], I32),
        "dsa_ref_dma_store": ([PTR, I32, I32, I32, I32, I32, I32, I32, I32], I32),
        "dsa_ref_sync": ([], I32),
        "dsa_ref_pending": ([], I32),
        "dsa_ref_fill_zero": ([I32] * 4, I32),
        "dsa_ref_fill_zero_bytes": ([I32] * 2, I32),
        "dsa_ref_mma": ([I32] * 7, I32),
        "dsa_ref_take_error": ([BUF, I32], I32),
        "dsa_ref_set_debug": ([I32], I32),
        "dsa_ref_take_violations": ([BUF, I32], I32),
        "dsa_ref_debug_violations": ([], I32),
        "dsa_ref_reset": ([], None),
    },
    "acme": {
        "acme_tile_desc": ([I32] * 4, I32),
        "acme_release_all": ([], I32),
        "acme_xfer_in": ([I32, PTR, I32, I32, I32], I32),
        "acme_xfer_out": ([PTR, I32, I32, I32, I32, I32], I32),
        "acme_fence": ([], I32),
        "acme_pending": ([], I32),
        "acme_zero": ([I32], I32),
        "acme_matmul_acc": ([I32] * 3, I32),
        "acme_take_error": ([BUF, I32], I32),
        "acme_set_debug": ([I32], I32),
        "acme_take_violations": ([BUF, I32], I32),
        "acme_debug_violations": ([], I32),
        "acme_reset": ([], None),
    },
}


def _run(cmd, **kw):
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))}\n{done.stdout}{done.stderr}"
    return done


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Each library compiled the way the integration does (plus -Werror -pedantic) and linked as a .so."""
    out = tmp_path_factory.mktemp("vendor")
    libs = {}
    for vendor, folder in VENDOR.items():
        obj, so = out / f"{SOURCE[vendor]}.o", out / f"lib{SOURCE[vendor]}.so"
        _run(["gcc", *CFLAGS, "-c", folder / f"{SOURCE[vendor]}.c", "-o", obj])
        _run(["gcc", "-shared", obj, "-o", so])  # no -lm: the libraries need only libc
        libs[vendor] = so
    return libs


@pytest.fixture(scope="module")
def libs(built):
    loaded = {}
    for vendor, path in built.items():
        lib = ctypes.CDLL(str(path))
        for name, (args, res) in API[vendor].items():
            getattr(lib, name).argtypes, getattr(lib, name).restype = args, res
        loaded[vendor] = lib
    return loaded


def _ptr(t: torch.Tensor):
    assert t.dim() < 2 or t.stride(-1) == 1
    return ctypes.c_void_p(t.data_ptr())


def _take(fn, size=512) -> tuple[int, str]:
    buf = ctypes.create_string_buffer(size)
    return fn(buf, size), buf.value.decode()


def _rand(rows, cols, dtype, gen=None):
    return (torch.rand(rows, cols, generator=gen) * 2 - 1).to(dtype)


# ---- one face for both vendors, so that the shared tests read the same -----------------------


@dataclass
class Tile:
    arg: int  # what the vendor's calls take: a scratchpad offset (dsa_ref) or a descriptor handle (acme)
    addr: int
    rows: int
    cols: int
    dtype: torch.dtype


class Ref:
    CODES = {torch.float32: 0, torch.float16: 1}
    MMA, SYNC, NOT_SYNCED, QUEUE, LAYOUT = "dsa_ref_mma", "dsa_ref_sync", "not synchronised", 64, "row-major"
    UNIT = (16, 16, 16)

    def __init__(self, lib):
        self.lib = lib

    def tile(self, addr, rows, cols, dtype):
        return Tile(addr, addr, rows, cols, dtype)

    def load(self, t, src, valid_rows, valid_cols):
        c = self.CODES[t.dtype]
        return self.lib.dsa_ref_dma_load(t.arg, _ptr(src), c, t.rows, t.cols, src.stride(0), valid_rows, valid_cols)

    def store(self, dst, t, valid_rows, valid_cols):
        return self.lib.dsa_ref_dma_store(_ptr(dst), self.CODES[dst.dtype], t.arg, self.CODES[t.dtype], t.rows, t.cols,
                                          dst.stride(0), valid_rows, valid_cols)

    def zero(self, t):
        return self.lib.dsa_ref_fill_zero(t.arg, self.CODES[t.dtype], t.rows, t.cols)

    def mma(self, c, a, b):
        return self.lib.dsa_ref_mma(c.arg, a.arg, b.arg, self.CODES[a.dtype], c.rows, c.cols, a.cols)

    def provoke_error(self):
        return self.lib.dsa_ref_fill_zero(-64, 0, 16, 16)

    def sync(self):
        return self.lib.dsa_ref_sync()

    def pending(self):
        return self.lib.dsa_ref_pending()

    def set_debug(self, on):
        return self.lib.dsa_ref_set_debug(int(on))

    def take_error(self, size=512):
        return _take(self.lib.dsa_ref_take_error, size)

    def violations(self):
        return _take(self.lib.dsa_ref_take_violations)

    def reset(self):
        self.lib.dsa_ref_reset()


class Acme(Ref):
    CODES = {torch.float16: 1, torch.float32: 2}
    MMA, SYNC, NOT_SYNCED, QUEUE, LAYOUT = "acme_matmul_acc", "acme_fence", "not fenced", 32, "column-major"
    UNIT = (32, 32, 8)

    def tile(self, addr, rows, cols, dtype):
        handle = self.lib.acme_tile_desc(addr, rows, cols, self.CODES[dtype])
        assert handle > 0, self.take_error()
        return Tile(handle, addr, rows, cols, dtype)

    def load(self, t, src, valid_rows, valid_cols):
        return self.lib.acme_xfer_in(t.arg, _ptr(src), src.stride(0), valid_rows, valid_cols)

    def store(self, dst, t, valid_rows, valid_cols):
        return self.lib.acme_xfer_out(_ptr(dst), dst.stride(0), self.CODES[dst.dtype], t.arg, valid_rows, valid_cols)

    def zero(self, t):
        return self.lib.acme_zero(t.arg)

    def mma(self, c, a, b):
        return self.lib.acme_matmul_acc(c.arg, a.arg, b.arg)

    def provoke_error(self):
        return self.lib.acme_tile_desc(0, 0, 0, 2)

    def sync(self):
        return self.lib.acme_fence()

    def pending(self):
        return self.lib.acme_pending()

    def set_debug(self, on):
        return self.lib.acme_set_debug(int(on))

    def take_error(self, size=512):
        return _take(self.lib.acme_take_error, size)

    def violations(self):
        return _take(self.lib.acme_take_violations)

    def reset(self):
        self.lib.acme_reset()


def tiles(dev, *specs, at=0):
    """Tiles (rows, cols, dtype) placed one after another, 128-byte aligned."""
    out = []
    for rows, cols, dtype in specs:
        out.append(dev.tile(at, rows, cols, dtype))
        at += (rows * cols * dtype.itemsize + 127) // 128 * 128
    return out


@pytest.fixture(params=["ref", "acme"])
def dev(request, libs):
    d = (Ref if request.param == "ref" else Acme)(libs[request.param])
    d.reset()
    d.set_debug(False)
    yield d
    d.set_debug(False)


@pytest.fixture
def ref(libs):
    libs["ref"].dsa_ref_reset()
    libs["ref"].dsa_ref_set_debug(0)
    return libs["ref"]


@pytest.fixture
def acme(libs):
    libs["acme"].acme_reset()
    libs["acme"].acme_set_debug(0)
    return libs["acme"]


# ---- the build ---------------------------------------------------------------------------------


@pytest.mark.parametrize("vendor", ["ref", "acme"])
def test_exports_exactly_the_documented_api_and_headers_compile_as_c_and_cpp(built, vendor):
    symbols = [line.split()[-2:] for line in _run(["nm", "-D", "--defined-only", built[vendor]]).stdout.splitlines()]
    assert {name for _, name in symbols} == set(API[vendor]), "the documented functions, nothing else"
    assert all(kind == "T" for kind, _ in symbols), "no exported data: the device state is static"
    header = VENDOR[vendor] / f"{SOURCE[vendor]}.h"
    _run(["gcc", "-std=c11", "-Wall", "-Wextra", "-pedantic", "-Werror", "-fsyntax-only", "-x", "c", header])
    _run(["g++", "-std=c++17", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", "-x", "c++", header])


# ---- data movement -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("shape", [(48, 32, 37, 23), (16, 16, 1, 1), (32, 32, 32, 32), (40, 8, 0, 0), (1, 64, 1, 63)],
                         ids=lambda s: "{}x{}_valid_{}x{}".format(*s))
def test_strided_tile_round_trip_with_zero_fill(dev, dtype, shape):
    rows, cols, vr, vc = shape
    tile = dev.tile(256, rows, cols, dtype)
    junk = torch.full((rows, cols), 9.0, dtype=dtype)  # the zero fill must overwrite this
    dev.load(tile, junk, rows, cols)  # (a queued transfer's global buffer must live until the sync)
    dev.sync()
    src = _rand(rows + 13, cols + 11, dtype)
    view = src[5:5 + vr, 3:3 + vc]  # row stride cols + 11
    assert dev.load(tile, view, vr, vc) == 0
    dev.sync()
    whole = torch.full((rows, cols), 7.0, dtype=dtype)
    dev.store(whole, tile, rows, cols)
    big = torch.full((rows + 4, cols + 6), -3.0, dtype=dtype)
    dev.store(big[2:, 1:], tile, vr, vc)  # only the valid part is written
    dev.sync()
    expect = torch.zeros(rows, cols, dtype=dtype)
    expect[:vr, :vc] = view
    assert torch.equal(whole, expect)
    expect = torch.full_like(big, -3.0)
    expect[2:2 + vr, 1:1 + vc] = view
    assert torch.equal(big, expect)
    assert dev.take_error() == (0, "")


def test_float16_to_float32_is_exact_for_every_bit_pattern(dev):
    bits = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).reshape(256, 256)
    halves = bits.view(torch.float16)
    tile = dev.tile(0, 256, 256, torch.float16)  # 128 KiB: all of acme's TCM
    out = torch.empty(256, 256)
    dev.load(tile, halves, 256, 256)
    dev.sync()
    dev.store(out, tile, 256, 256)
    dev.sync()
    want = halves.float()
    nan = want.isnan()
    assert torch.equal(out.isnan(), nan) and nan.sum() == 2046
    assert torch.equal(out[~nan].view(torch.int32), want[~nan].view(torch.int32))  # signed zeros, subnormals too


def _float32_probes() -> torch.Tensor:
    finite = torch.arange(0, 0x7C00, dtype=torch.int32).to(torch.int16).view(torch.float16).float()  # +0 .. 65504
    mid = ((finite[:-1].double() + finite[1:].double()) / 2).float()  # exact ties between neighbours
    up, down = torch.nextafter(mid, torch.tensor(float("inf"))), torch.nextafter(mid, torch.tensor(0.0))
    gen = torch.Generator().manual_seed(0)
    wide = torch.randn(20000, generator=gen) * torch.exp2(torch.randint(-30, 18, (20000,), generator=gen).float())
    special = torch.tensor([65504.0, 65519.99, 65520.0, 65536.0, 1e10, float("inf"), float("nan"), 2.0**-25,
                            2.0**-25 * 1.0000001, 2.0**-26, 1e-40, 1e-45, 6.0e-8, 3.0e-8])
    x = torch.cat([finite, mid, up, down, wide, special])
    return torch.cat([x, -x])


def test_store_rounds_float32_to_float16_like_torch(dev):
    """The accumulator -> float16 output path: round to nearest even, subnormals, overflow to inf, NaN."""
    probes = _float32_probes()
    chunk = 128 * 256
    probes = torch.cat([probes, torch.zeros(-len(probes) % chunk)]).reshape(-1, 128, 256)
    tile = dev.tile(0, 128, 256, torch.float32)
    for block in probes:
        out = torch.empty(128, 256, dtype=torch.float16)
        dev.load(tile, block, 128, 256)
        dev.sync()
        dev.store(out, tile, 128, 256)
        dev.sync()
        want = block.half()
        nan = want.isnan()
        assert torch.equal(out.isnan(), nan)
        bad = (out.view(torch.int16) != want.view(torch.int16)) & ~nan
        assert not bad.any(), f"{block[bad][:5].tolist()} -> {out[bad][:5].tolist()}, torch: {want[bad][:5].tolist()}"


def test_layout_seen_through_an_aliasing_tile(dev):
    """The on-chip layout only shows when a second tile of another shape describes the same bytes."""
    x = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    tile, alias = dev.tile(0, 4, 3, torch.float32), dev.tile(0, 12, 1, torch.float32)
    dev.load(tile, x, 4, 3)
    dev.sync()
    out = torch.empty(12, 1)
    dev.store(out, alias, 12, 1)
    dev.sync()
    assert out.flatten().tolist() == (x.flatten() if dev.LAYOUT == "row-major" else x.t().flatten()).tolist()


# ---- the matrix unit ---------------------------------------------------------------------------

MMA_CASES = [("ref", 16, 16, 16), ("ref", 32, 48, 16), ("ref", 64, 32, 80), ("ref", 16, 128, 48),
             ("acme", 32, 32, 8), ("acme", 64, 32, 24), ("acme", 32, 96, 40), ("acme", 96, 64, 16)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["f32", "f16_in_f32_acc"])
@pytest.mark.parametrize("dev,m,n,k", MMA_CASES, indirect=["dev"], ids=lambda v: str(v))
def test_matrix_unit_matches_float64(dev, m, n, k, dtype):
    gen = torch.Generator().manual_seed(m * 10000 + n * 100 + k)
    a, b, c0 = _rand(m, k, dtype, gen), _rand(k, n, dtype, gen), _rand(m, n, torch.float32, gen)
    tc, ta, tb = tiles(dev, (m, n, torch.float32), (m, k, dtype), (k, n, dtype))
    for t, x in ((tc, c0), (ta, a), (tb, b)):
        assert dev.load(t, x, *x.shape) == 0
    dev.sync()
    assert dev.mma(tc, ta, tb) == 0 and dev.mma(tc, ta, tb) == 0  # accumulates: C = c0 + 2 A @ B
    out = torch.empty(m, n)
    dev.store(out, tc, m, n)
    dev.sync()
    want = c0.double() + 2 * (a.double() @ b.double())
    err = (out.double() - want).abs().max().item()
    assert err <= 1e-5 * (2 * k + 1), f"max error {err:.2e}: not a float32 accumulation"
    assert dev.take_error() == (0, "")


def test_ref_matrix_unit_takes_16x16x16_multiples_only(ref):
    for (m, n, k), text in [((16, 16, 24), "k=24 is not a multiple of the matrix unit's 16"),
                            ((8, 16, 16), "m=8 is not a multiple of the matrix unit's 16"),
                            ((16, 0, 16), "n=0 is not a positive multiple of the matrix unit's 16")]:
        assert ref.dsa_ref_mma(0, 4096, 8192, 0, m, n, k) == 6
        assert _take(ref.dsa_ref_take_error) == (6, f"dsa_ref_mma: {text}")
    assert ref.dsa_ref_mma(0, 512, 8192, 0, 16, 16, 16) == 7  # C [0, 1024) overlaps A
    assert _take(ref.dsa_ref_take_error) == (7, "dsa_ref_mma: C [0, 1024) overlaps A")
    assert ref.dsa_ref_mma(0, 4096, 8192, 5, 16, 16, 16) == 1
    assert "unknown dtype code 5 for A" in _take(ref.dsa_ref_take_error)[1]


def test_acme_matrix_engine_checks_descriptors(acme):
    def desc(addr, rows, cols, dtype=2):
        return acme.acme_tile_desc(addr, rows, cols, dtype)

    cases = [((48, 32, 8), 7, "M=48 is not a multiple of the MXU's 32 (it takes 32x32x8)"),
             ((32, 16, 8), 7, "N=16 is not a multiple of the MXU's 32"),
             ((32, 32, 12), 7, "K=12 is not a multiple of the MXU's 8")]
    for (m, n, k), code, text in cases:
        acme.acme_release_all()
        assert acme.acme_matmul_acc(desc(0, m, n), desc(16384, m, k), desc(32768, k, n)) == -code
        got = _take(acme.acme_take_error)
        assert got[0] == code and got[1].startswith(f"acme_matmul_acc: {text}"), got
    acme.acme_release_all()
    assert acme.acme_matmul_acc(desc(0, 32, 32), desc(16384, 32, 8), desc(32768, 16, 32)) == -2
    assert _take(acme.acme_take_error) == (2, "acme_matmul_acc: shapes disagree: acc 32x32 += lhs 32x8 @ rhs 16x32")
    acme.acme_release_all()
    assert acme.acme_matmul_acc(desc(0, 32, 32, 1), desc(16384, 32, 8), desc(32768, 8, 32)) == -1
    assert _take(acme.acme_take_error) == (1, "acme_matmul_acc: acc must be f32 (2), not 1")
    acme.acme_release_all()
    assert acme.acme_matmul_acc(desc(0, 32, 32), desc(2048, 32, 8), desc(32768, 8, 32)) == -9
    assert _take(acme.acme_take_error) == (9, "acme_matmul_acc: acc overlaps lhs in the TCM")


# ---- errors ------------------------------------------------------------------------------------


def test_ref_scratchpad_overflow_is_an_error(ref):
    x = torch.ones(16, 16)
    assert ref.dsa_ref_fill_zero(262144 - 512, 0, 16, 16) == 3
    assert _take(ref.dsa_ref_take_error) == (
        3, "dsa_ref_fill_zero: tile of 1024 bytes at offset 261632 exceeds the 262144-byte scratchpad")
    assert ref.dsa_ref_dma_load(262144 - 256, _ptr(x), 0, 16, 16, 16, 16, 16) == 3
    assert ref.dsa_ref_pending() == 0, "a failing call has no effect"
    assert "dsa_ref_dma_load: tile of 1024 bytes at offset 261888 exceeds" in _take(ref.dsa_ref_take_error)[1]
    assert ref.dsa_ref_mma(262144 - 1024 + 4, 0, 4096, 0, 16, 16, 16) == 3  # C runs 4 bytes past the end
    assert ref.dsa_ref_fill_zero_bytes(262144 - 100, 101) == 3 and ref.dsa_ref_take_error(None, 0) == 3
    big = 2**31 - 1  # the size is computed without overflow
    assert ref.dsa_ref_fill_zero(0, 0, big, big) == 3
    assert "tile of 18446744056529682436 bytes at offset 0 exceeds" in _take(ref.dsa_ref_take_error)[1]
    assert ref.dsa_ref_fill_zero_bytes(262144 - 100, 100) == 0 and ref.dsa_ref_fill_zero(262144 - 1024, 0, 16, 16) == 0
    assert ref.dsa_ref_dma_load(2, _ptr(x), 0, 16, 16, 16, 16, 16) == 4  # misaligned float32 tile
    assert ref.dsa_ref_dma_load(0, _ptr(x), 0, 16, 16, 16, 17, 16) == 2  # valid part larger than the tile
    assert ref.dsa_ref_dma_load(0, _ptr(x), 0, 16, 16, 8, 16, 16) == 2  # row stride < valid width
    assert ref.dsa_ref_dma_load(0, None, 0, 16, 16, 16, 16, 16) == 5
    assert ref.dsa_ref_dma_load(0, None, 0, 16, 16, 16, 0, 0) == 0  # an all-zero tile reads nothing
    assert _take(ref.dsa_ref_take_error) == (4, "dsa_ref_dma_load: tile at offset 2 is not aligned to its 4-byte "
                                                "elements (and 3 later errors)")


def test_acme_tcm_overflow_and_descriptor_table(acme):
    assert acme.acme_tile_desc(0, 1024, 1024, 2) == -3
    assert _take(acme.acme_take_error) == (3, "acme_tile_desc: a 1024x1024 tile (4194304 bytes) at 0 exceeds the "
                                              "131072-byte TCM")
    assert acme.acme_tile_desc(131072 - 60, 4, 4, 2) == -3 and acme.acme_take_error(None, 0) == 3
    assert acme.acme_tile_desc(64, 2**31 - 1, 2**31 - 1, 2) == -3 and acme.acme_take_error(None, 0) == 3
    assert acme.acme_tile_desc(0, 256, 128, 2) == 1  # exactly the whole TCM
    assert [acme.acme_tile_desc(128 * i, 32, 32, 1) for i in range(15)] == list(range(2, 17))
    assert acme.acme_tile_desc(0, 32, 32, 1) == -6
    assert _take(acme.acme_take_error) == (6, "acme_tile_desc: all 16 descriptors are in use (acme_release_all frees "
                                              "them)")
    acme.acme_release_all()
    x = torch.zeros(8, 8)
    assert acme.acme_xfer_in(5, _ptr(x), 8, 8, 8) == -5  # released
    assert _take(acme.acme_take_error) == (5, "acme_xfer_in: handle 5 is not a live tile handle")
    assert acme.acme_tile_desc(0, 8, 8, 2) == 1  # handles are reused after acme_release_all
    assert acme.acme_xfer_in(-6, _ptr(x), 8, 8, 8) == -5  # a failed acme_tile_desc's result used as a handle
    assert acme.acme_xfer_in(1, _ptr(x), 8, 9, 8) == -2 and acme.acme_xfer_in(1, None, 8, 8, 8) == -8
    assert acme.acme_tile_desc(2, 8, 8, 2) == -4 and acme.acme_tile_desc(0, 8, 8, 3) == -1
    assert acme.acme_pending() == 0
    assert _take(acme.acme_take_error)[1].endswith("(and 4 later errors)")


def test_errors_are_sticky_silent_and_cleared_by_take(dev, capfd):
    first = dev.provoke_error()
    assert first != 0
    code, text = dev.take_error()
    assert code == abs(first) and text
    assert dev.provoke_error() == first and dev.provoke_error() == first
    t = dev.tile(0, 32, 32, torch.float32)  # later calls still work
    assert dev.zero(t) == 0
    assert dev.take_error() == (code, f"{text} (and 1 later error)")
    assert dev.take_error() == (0, "")
    dev.provoke_error()
    assert dev.take_error(size=8) == (code, text[:7])  # truncated to the buffer, NUL-terminated
    assert capfd.readouterr() == ("", ""), "errors print nothing"


# ---- asynchrony and the debug mode -------------------------------------------------------------


def test_without_sync_the_matrix_unit_reads_stale_tiles(dev, capfd):
    m, n, k = 32, 32, 16
    gen = torch.Generator().manual_seed(1)
    old_a, old_b, a, b = _rand(m, k, torch.float32, gen), _rand(k, n, torch.float32, gen), \
        _rand(m, k, torch.float32, gen), _rand(k, n, torch.float32, gen)
    tc, ta, tb = tiles(dev, (m, n, torch.float32), (m, k, torch.float32), (k, n, torch.float32))
    dev.load(ta, old_a, m, k)
    dev.load(tb, old_b, k, n)
    dev.sync()

    def gemm(sync_loads: bool) -> torch.Tensor:
        dev.load(ta, a, m, k)
        dev.load(tb, b, k, n)
        if sync_loads:
            dev.sync()
        dev.zero(tc)
        dev.mma(tc, ta, tb)
        out = torch.empty(m, n)
        dev.store(out, tc, m, n)
        dev.sync()
        return out

    dev.set_debug(True)
    stale = gemm(sync_loads=False)
    count, text = dev.violations()
    assert count >= 1 and text.startswith(f"{dev.MMA} reads") and dev.NOT_SYNCED in text, text
    torch.testing.assert_close(stale, old_a @ old_b)  # computed on what the scratchpad held before
    assert not torch.allclose(stale, a @ b, atol=1e-3)
    assert text in capfd.readouterr().err, "debug mode prints its first report"
    good = gemm(sync_loads=True)
    assert dev.violations() == (0, "")
    torch.testing.assert_close(good, a @ b)
    dev.set_debug(False)
    torch.testing.assert_close(gemm(sync_loads=False), a @ b)  # (the scratchpad holds a, b by now)
    assert dev.violations() == (0, "") and dev.take_error() == (0, "")


def test_a_store_lands_in_global_memory_at_the_sync(dev):
    t, ones = dev.tile(0, 16, 16, torch.float32), torch.ones(16, 16)
    dev.load(t, ones, 16, 16)
    assert dev.pending() == 1
    dev.sync()
    out = torch.zeros(16, 16)
    dev.store(out, t, 16, 16)
    assert dev.pending() == 1 and torch.all(out == 0)
    dev.sync()
    assert dev.pending() == 0 and torch.all(out == 1)


HAZARDS = {
    "store_reads_an_unsynced_load": lambda d, t, u, o: (d.load(t, o, 32, 32), d.store(o, t, 32, 32)),
    "zero_over_an_unsynced_load": lambda d, t, u, o: (d.load(t, o, 32, 32), d.zero(t)),
    "load_over_an_unsynced_store": lambda d, t, u, o: (d.store(o, t, 32, 32), d.load(t, o, 32, 32)),
    "load_over_an_unsynced_load": lambda d, t, u, o: (d.load(t, o, 32, 32), d.load(t, o, 32, 32)),
    "mma_writes_a_tile_a_store_reads": lambda d, t, u, o: (d.store(o, t, 32, 32), d.mma(t, *u)),
    "queue_full_without_sync": lambda d, t, u, o: [d.store(o, t, 32, 32) for _ in range(d.QUEUE + 1)],
}


@pytest.mark.parametrize("hazard", sorted(HAZARDS))
def test_debug_mode_reports_each_hazard_once(dev, hazard):
    t, a, b = tiles(dev, (32, 32, torch.float32), (32, 32, torch.float32), (32, 32, torch.float32))
    dev.set_debug(True)
    host = torch.ones(32, 32)  # must outlive the queued transfers
    HAZARDS[hazard](dev, t, (a, b), host)
    count, text = dev.violations()
    assert count == 1, (count, text)
    assert ("is full" in text) if hazard.startswith("queue") else (dev.NOT_SYNCED in text), text
    dev.sync()
    assert dev.violations() == (0, "") and dev.take_error() == (0, "")


def test_debug_mode_accepts_double_buffering(dev):
    """Loading the next tiles while the unit works on others is the point of async DMA: no report."""
    c, a0, b0, a1, b1 = tiles(dev, (32, 32, torch.float32), *[(32, 32, torch.float16)] * 4)
    x = torch.ones(32, 32, dtype=torch.float16)
    dev.set_debug(True)
    dev.zero(c)
    dev.load(a0, x, 32, 32)
    dev.load(b0, x, 32, 32)
    dev.sync()
    dev.load(a1, x, 32, 32)
    dev.load(b1, x, 32, 32)
    dev.mma(c, a0, b0)
    dev.sync()
    dev.mma(c, a1, b1)
    out = torch.empty(32, 32)
    dev.store(out, c, 32, 32)
    dev.sync()
    assert dev.violations() == (0, "") and torch.all(out == 64)


ENV_PROBE = """
import ctypes, sys
lib, vendor = ctypes.CDLL(sys.argv[1]), sys.argv[2]
buf = (ctypes.c_float * 1024)()
if vendor == "ref":
    lib.dsa_ref_dma_load(0, buf, 0, 16, 16, 16, 16, 16)
    lib.dsa_ref_mma(4096, 0, 2048, 0, 16, 16, 16)  # reads A before the sync
    print(lib.dsa_ref_debug_violations())
else:
    c, a, b = (lib.acme_tile_desc(addr, 32, 32, 2) for addr in (0, 4096, 8192))
    lib.acme_xfer_in(a, buf, 32, 32, 32)
    lib.acme_matmul_acc(c, a, b)  # reads lhs before the fence
    print(lib.acme_debug_violations())
"""


@pytest.mark.parametrize("on", [True, False], ids=["env_on", "env_off"])
@pytest.mark.parametrize("vendor", ["ref", "acme"])
def test_debug_mode_from_the_environment(built, vendor, on):
    var = "DSA_REF_DEBUG" if vendor == "ref" else "ACME_DEBUG"
    env = {k: v for k, v in os.environ.items() if k not in ("DSA_REF_DEBUG", "ACME_DEBUG")}
    if on:
        env[var] = "1"
    done = _run([sys.executable, "-c", ENV_PROBE, built[vendor], vendor], env=env)
    assert done.stdout.strip() == ("1" if on else "0")
    assert ("debug:" in done.stderr) == on


def test_acme_release_all_completes_unfenced_transfers(acme):
    x, out = torch.randn(32, 32), torch.zeros(32, 32)
    h = acme.acme_tile_desc(0, 32, 32, 2)
    acme.acme_xfer_in(h, _ptr(x), 32, 32, 32)
    acme.acme_fence()
    acme.acme_set_debug(1)
    acme.acme_xfer_out(_ptr(out), 32, 2, h, 32, 32)
    assert acme.acme_release_all() == 0 and torch.equal(out, x) and acme.acme_pending() == 0
    assert _take(acme.acme_take_violations) == (1, "acme_release_all: 1 transfer was not fenced; the engine completed "
                                                   "them")


def test_reset_drops_queued_transfers_errors_and_data(dev):
    t, ones = dev.tile(0, 16, 16, torch.float32), torch.ones(16, 16)
    dev.load(t, ones, 16, 16)
    dev.sync()
    out = torch.full((16, 16), 5.0)
    dev.store(out, t, 16, 16)
    dev.provoke_error()
    dev.reset()
    assert dev.pending() == 0 and dev.take_error() == (0, "")
    dev.sync()
    assert torch.all(out == 5), "the queued store was dropped, not performed"
    t = dev.tile(0, 16, 16, torch.float32)
    dev.store(out, t, 16, 16)
    dev.sync()
    assert torch.all(out == 0), "the on-chip memory is zero again"


# ---- from a C++ translation unit that declares the functions as TileLang does ------------------

CALLER_HEAD = r"""
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>
struct half { uint16_t bits; };  // TileLang's 16-bit type: only its name reaches the declarations
#define EXTERN extern "C"
static int32_t lo(int32_t a, int32_t b) { return a < b ? a : b; }
"""

CALLER_MAIN = r"""
static void io(const char* path, std::vector<half>& v, const char* mode) {
  FILE* f = std::fopen(path, mode);
  size_t n = mode[0] == 'r' ? std::fread(v.data(), 2, v.size(), f) : std::fwrite(v.data(), 2, v.size(), f);
  std::fclose(f);
  if (n != v.size()) std::exit(2);
}
int main(int argc, char** argv) {
  if (argc != 7) return 2;
  int32_t M = std::atoi(argv[1]), N = std::atoi(argv[2]), K = std::atoi(argv[3]);
  std::vector<half> A(M * K), B(K * N), C(M * N);
  io(argv[4], A, "rb");
  io(argv[5], B, "rb");
  gemm(A.data(), B.data(), C.data(), M, N, K);
  io(argv[6], C, "wb");
  char msg[256];
  int32_t code = TAKE_ERROR(msg, 256);
  std::printf("%d %d %d %s\n", code, VIOLATIONS(), PENDING(), msg);
  return 0;
}
"""

CALLERS = {
    "ref": r"""
EXTERN int32_t dsa_ref_fill_zero(int32_t, int32_t, int32_t, int32_t);
EXTERN int32_t dsa_ref_dma_load(int32_t, half*, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t);
EXTERN int32_t dsa_ref_sync();
EXTERN int32_t dsa_ref_mma(int32_t, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t);
EXTERN int32_t dsa_ref_dma_store(half*, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t);
EXTERN int32_t dsa_ref_take_error(char*, int32_t);
EXTERN int32_t dsa_ref_debug_violations();
EXTERN int32_t dsa_ref_pending();
#define TAKE_ERROR dsa_ref_take_error
#define VIOLATIONS dsa_ref_debug_violations
#define PENDING dsa_ref_pending
static void gemm(half* A, half* B, half* C, int32_t M, int32_t N, int32_t K) {
  const int32_t T = 32;  // C (float32) at 0, A at 4096, B at 6144 (float16)
  for (int32_t i = 0; i < M; i += T)
    for (int32_t j = 0; j < N; j += T) {
      dsa_ref_fill_zero(0, 0, T, T);
      for (int32_t p = 0; p < K; p += T) {
        dsa_ref_dma_load(4096, &A[i * K + p], 1, T, T, K, lo(T, M - i), lo(T, K - p));
        dsa_ref_dma_load(6144, &B[p * N + j], 1, T, T, N, lo(T, K - p), lo(T, N - j));
        dsa_ref_sync();
        dsa_ref_mma(0, 4096, 6144, 1, T, T, T);
      }
      dsa_ref_dma_store(&C[i * N + j], 1, 0, 0, T, T, N, lo(T, M - i), lo(T, N - j));
      dsa_ref_sync();
    }
}
""",
    "acme": r"""
EXTERN int32_t acme_tile_desc(int32_t, int32_t, int32_t, int32_t);
EXTERN int32_t acme_zero(int32_t);
EXTERN int32_t acme_xfer_in(int32_t, half*, int32_t, int32_t, int32_t);
EXTERN int32_t acme_fence();
EXTERN int32_t acme_matmul_acc(int32_t, int32_t, int32_t);
EXTERN int32_t acme_xfer_out(half*, int32_t, int32_t, int32_t, int32_t, int32_t);
EXTERN int32_t acme_release_all();
EXTERN int32_t acme_take_error(char*, int32_t);
EXTERN int32_t acme_debug_violations();
EXTERN int32_t acme_pending();
#define TAKE_ERROR acme_take_error
#define VIOLATIONS acme_debug_violations
#define PENDING acme_pending
static void gemm(half* A, half* B, half* C, int32_t M, int32_t N, int32_t K) {
  for (int32_t i = 0; i < M; i += 64)
    for (int32_t j = 0; j < N; j += 32) {
      int32_t c = acme_tile_desc(0, 64, 32, 2), a = acme_tile_desc(8192, 64, 16, 1), b = acme_tile_desc(10240, 16, 32, 1);
      acme_zero(c);
      for (int32_t p = 0; p < K; p += 16) {
        acme_xfer_in(a, &A[i * K + p], K, lo(64, M - i), lo(16, K - p));
        acme_xfer_in(b, &B[p * N + j], N, lo(16, K - p), lo(32, N - j));
        acme_fence();
        acme_matmul_acc(c, a, b);
      }
      acme_xfer_out(&C[i * N + j], N, 1, c, lo(64, M - i), lo(32, N - j));
      acme_fence();
      acme_release_all();
    }
}
""",
}


@pytest.mark.parametrize("vendor", ["ref", "acme"])
def test_a_tilelang_style_cpp_caller_links_and_computes(built, vendor, tmp_path):
    """g++, extern "C" declarations written from the argument types (half*, int32_t), no vendor header."""
    src, exe = tmp_path / "caller.cpp", tmp_path / "caller"
    src.write_text(CALLER_HEAD + CALLERS[vendor] + CALLER_MAIN)
    lib = built[vendor]
    _run(["g++", "-std=c++17", "-O1", "-Wall", "-Werror", src, "-o", exe, f"-L{lib.parent}", f"-l:{lib.name}",
          f"-Wl,-rpath,{lib.parent}"])
    M, N, K = 45, 70, 50
    gen = torch.Generator().manual_seed(7)
    a, b = _rand(M, K, torch.float16, gen), _rand(K, N, torch.float16, gen)
    for name, t in (("a", a), ("b", b)):
        (tmp_path / name).write_bytes(ctypes.string_at(t.data_ptr(), t.numel() * 2))
    env = {k: v for k, v in os.environ.items() if k not in ("DSA_REF_DEBUG", "ACME_DEBUG")}
    env["DSA_REF_DEBUG" if vendor == "ref" else "ACME_DEBUG"] = "1"
    done = _run([exe, M, N, K, tmp_path / "a", tmp_path / "b", tmp_path / "c"], env=env)
    assert done.stdout.split() == ["0", "0", "0"], "no error, no debug report, nothing left in flight"
    c = torch.frombuffer(bytearray((tmp_path / "c").read_bytes()), dtype=torch.float16).reshape(M, N)
    assert_gemm_close(c, a, b)
