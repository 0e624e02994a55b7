"""The two vendor libraries on their own, through ctypes: layouts, zero fill, conversions, limits."""
from __future__ import annotations

import ctypes

import pytest
import torch

from septran.runtime import vendor
from septran.target import load_target


def _lib(name):
    lib = vendor.library(load_target(name))
    for fn in ("dsa_ref_take_error", "acme_take_error", "acme_tile_desc"):
        if hasattr(lib, fn):
            getattr(lib, fn).restype = ctypes.c_int32
    return lib


def _ptr(t: torch.Tensor):
    return ctypes.c_void_p(t.data_ptr())


def _error(lib, fn) -> str:
    buf = ctypes.create_string_buffer(256)
    assert getattr(lib, fn)(buf, 256) != 0
    return buf.value.decode()


@pytest.mark.parametrize("dtype,code", [(torch.float32, 0), (torch.float16, 1)])
def test_dsa_ref_round_trip_with_zero_fill(dtype, code):
    lib = _lib("dsa_ref")
    lib.dsa_ref_reset()
    src = torch.randn(50, 40).to(dtype)
    out = torch.full((48, 32), 7.0, dtype=dtype)
    # rows 10..46, cols 3..25 of src: a 37x23 valid part in a 48x32 tile
    view = src[10:, 3:]
    lib.dsa_ref_dma_load(1024, ctypes.c_void_p(view.data_ptr()), code, 48, 32, 40, 37, 23)
    lib.dsa_ref_sync()
    lib.dsa_ref_dma_store(_ptr(out), code, 1024, code, 48, 32, 32, 48, 32)
    lib.dsa_ref_sync()
    assert torch.equal(out[:37, :23], src[10:47, 3:26])
    assert torch.all(out[37:] == 0) and torch.all(out[:, 23:] == 0)
    assert lib.dsa_ref_take_error(None, 0) == 0


def test_dsa_ref_store_converts_float32_to_float16():
    lib = _lib("dsa_ref")
    lib.dsa_ref_reset()
    x = torch.randn(16, 16) * 1000
    x[0, :4] = torch.tensor([65504.0, 1e-6, -2.0 ** -20, 70000.0])  # largest, subnormal, subnormal, overflow
    out = torch.empty(16, 16, dtype=torch.float16)
    lib.dsa_ref_dma_load(0, _ptr(x), 0, 16, 16, 16, 16, 16)
    lib.dsa_ref_dma_store(_ptr(out), 1, 0, 0, 16, 16, 16, 16, 16)
    lib.dsa_ref_sync()
    assert torch.equal(out, x.half())  # round to nearest even, as torch does


def test_dsa_ref_limits():
    lib = _lib("dsa_ref")
    lib.dsa_ref_reset()
    lib.dsa_ref_mma(0, 4096, 8192, 0, 16, 16, 24)
    assert "16x16x24 is not a multiple of the matrix unit's 16x16x16" in _error(lib, "dsa_ref_take_error")
    lib.dsa_ref_fill_zero(262144 - 64, 0, 16, 16)
    assert "exceeds the 262144-byte scratchpad" in _error(lib, "dsa_ref_take_error")


def test_acme_column_major_tiles_round_trip_and_multiply():
    lib = _lib("dsa_acme")
    lib.acme_reset()
    a, b = torch.randn(32, 8), torch.randn(8, 32)
    ha, hb, hc = lib.acme_tile_desc(0, 32, 8, 2), lib.acme_tile_desc(1024, 8, 32, 2), lib.acme_tile_desc(2048, 32, 32, 2)
    assert (ha, hb, hc) == (1, 2, 3)
    lib.acme_xfer_in(ha, _ptr(a), 8, 32, 8)
    lib.acme_xfer_in(hb, _ptr(b), 32, 8, 32)
    lib.acme_fence()
    lib.acme_zero(hc)
    lib.acme_matmul_acc(hc, ha, hb)
    c = torch.empty(32, 32)
    lib.acme_xfer_out(_ptr(c), 32, 2, hc, 32, 32)
    lib.acme_fence()
    torch.testing.assert_close(c, a @ b, rtol=1e-5, atol=1e-5)
    assert lib.acme_take_error(None, 0) == 0
    lib.acme_release_all()


def test_acme_limits():
    lib = _lib("dsa_acme")
    lib.acme_reset()
    for _ in range(16):
        assert lib.acme_tile_desc(0, 32, 32, 1) > 0
    assert lib.acme_tile_desc(0, 32, 32, 1) < 0
    assert "all 16 descriptors are in use" in _error(lib, "acme_take_error")
    lib.acme_release_all()
    acc, lhs, rhs = lib.acme_tile_desc(0, 32, 32, 2), lib.acme_tile_desc(8192, 32, 12, 2), lib.acme_tile_desc(16384, 12, 32, 2)
    lib.acme_matmul_acc(acc, lhs, rhs)
    assert "not a multiple of the MXU's 32x32x8" in _error(lib, "acme_take_error")
    lib.acme_release_all()
