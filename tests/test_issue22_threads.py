"""Issue 22, threads: a kernel called from several Python threads at once gives every thread its right answer.

ctypes releases the GIL during a kernel, so on the DSAs two kernels used to share one simulated scratchpad and
one DMA queue (dsa_ref: wrong products; dsa_acme: another thread's tile handles, spurious DeviceErrors). The
vendor simulators now keep one device per host thread.
"""
from __future__ import annotations

import ctypes
import threading

import pytest
import torch

import septran
from septran.runtime import vendor
from septran.target import load_target
from conftest import GEMM_LOGIC, mapping_path

THREADS, CALLS = 4, 40
SHAPES = [(96, 64, 80), (33, 17, 40), (64, 128, 32), (1, 48, 16)]

pytestmark = pytest.mark.build  # every test here builds (or finds built) kernels


def _run_in_threads(work) -> list[BaseException]:
    failures: list[BaseException] = []

    def guarded(t):
        try:
            work(t)
        except BaseException as e:  # noqa: BLE001 -- reported by the main thread
            failures.append(e)

    threads = [threading.Thread(target=guarded, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return failures


@pytest.mark.parametrize("target", ["cpu", "dsa_ref", "dsa_acme"])
def test_gemm_from_four_threads_is_right_every_call(target):
    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=mapping_path(target))
    wrong: list[tuple] = []

    def work(t):
        gen = torch.Generator().manual_seed(1000 + t)
        for i in range(CALLS):
            M, N, K = SHAPES[(t + i) % len(SHAPES)]
            a, b = torch.randn(M, K, generator=gen), torch.randn(K, N, generator=gen)
            c = kernel(a, b)  # a DeviceError here fails the test
            if not torch.allclose(c, a @ b, atol=1e-3, rtol=1e-3):
                wrong.append((t, i, (M, N, K), (c - a @ b).abs().max().item()))

    failures = _run_in_threads(work)
    assert not failures, failures[:3]
    assert not wrong, f"{len(wrong)} of {THREADS * CALLS} results wrong: {wrong[:5]}"


@pytest.mark.parametrize("target, fail, take", [
    ("dsa_ref", lambda lib: lib.dsa_ref_fill_zero(ctypes.c_int32(0), ctypes.c_int32(9), ctypes.c_int32(1),
                                                  ctypes.c_int32(1)), "dsa_ref_take_error"),
    ("dsa_acme", lambda lib: lib.acme_zero(ctypes.c_int32(7)), "acme_take_error"),
])
def test_a_device_error_stays_with_the_thread_that_made_it(target, fail, take):
    """The error a thread takes after its kernel is its own: another thread's failure neither shows up in it nor
    is lost from its own thread."""
    lib = vendor.library(load_target(target))
    take_fn = getattr(lib, take)
    take_fn.restype = ctypes.c_int32
    seen: dict[str, int] = {}
    failed, checked = threading.Event(), threading.Event()

    def failing():
        fail(lib)
        failed.set()
        checked.wait(10)
        seen["failing"] = take_fn(None, ctypes.c_int32(0))

    def clean():
        failed.wait(10)
        seen["clean"] = take_fn(None, ctypes.c_int32(0))
        checked.set()

    threads = [threading.Thread(target=failing), threading.Thread(target=clean)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert seen["clean"] == 0 and seen["failing"] != 0, seen
