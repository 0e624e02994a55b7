"""The C entry of kernel calls (septran/build/fast_call.cpp, runtime/fast_call.py): the plans it holds run in C,
and every call it cannot check exactly as Plan.run does goes through Python, with Python's errors.

A call counts as run in C when it succeeds with Plan.run patched to fail. Each error case is raised by a kernel
whose C entry holds the plan of a call of the same shapes, and compared with the error of a kernel without one.
"""
from __future__ import annotations

import pytest
import torch

import septran
from conftest import GEMM_LOGIC, edited_mapping, mapping_path
from septran.build import pyext
from septran.runtime import fast_call
from septran.runtime.plan import Plan

pytestmark = pytest.mark.build


@pytest.fixture(scope="module")
def entry():
    pyext.start()
    mod = pyext.module(wait=None)
    if mod is None:
        pytest.skip(f"the C entry cannot be built here: {pyext.why()}")
    return mod


def warmed(kernel, *args, **kwargs):
    """The kernel, called until its C entry holds the plan of this call."""
    for _ in range(fast_call.CALLS_BEFORE + 1):
        kernel(*args, **kwargs)
    assert kernel._fast is not None and kernel._fast.size() >= 1
    return kernel


@pytest.fixture(scope="module")
def gemm(entry):
    """A 16x16x16 GEMM whose C entry holds the positional call and the call with C passed by keyword."""
    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=mapping_path("cpu", "gemm"))
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    warmed(kernel, a, b)
    warmed(kernel, a, b, C=torch.empty(16, 16))
    return kernel


def _python_fails(monkeypatch):
    def boom(self, args, kwargs):
        raise AssertionError("the call went through Python")
    monkeypatch.setattr(Plan, "run", boom)


@pytest.fixture
def in_c(monkeypatch):
    """Plan.run fails: a call that succeeds ran in C."""
    _python_fails(monkeypatch)


def test_calls_run_in_c_and_compute_the_gemm(gemm, in_c):
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    first, second = gemm(a, b), gemm(a, b)
    torch.testing.assert_close(first, a @ b, rtol=1e-4, atol=1e-4)
    assert first is not second and first.data_ptr() != second.data_ptr()  # a fresh output per call
    out = torch.full((16, 16), float("nan"))
    assert gemm(a, b, C=out) is out
    torch.testing.assert_close(out, a @ b, rtol=1e-4, atol=1e-4)
    w = torch.nn.Parameter(b.clone())  # a module's weight: taken as a tensor
    torch.testing.assert_close(gemm(a, w).detach(), a @ b, rtol=1e-4, atol=1e-4)
    assert gemm.latest is not None and gemm.tuning["point"]


def _error(fn):
    with pytest.raises(septran.SepTranError) as info:
        fn()
    return type(info.value), str(info.value)


@pytest.mark.parametrize("case", ["dtype", "shape", "transposed", "strided", "aliased_input", "same_tensor", "device",
                                  "not_a_tensor", "extra_argument"])
def test_calls_it_cannot_take_fail_as_in_python(gemm, case):
    """Wrong dtype, shape, layout, device, an output sharing memory with an input: the Python path's error."""
    plain = septran.compile(logic_file=GEMM_LOGIC, mapping_file=mapping_path("cpu", "gemm"))  # no C entry
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    calls = {
        "dtype": lambda k: k(a.double(), b),
        "shape": lambda k: k(torch.randn(16, 17), b),
        "transposed": lambda k: k(a.t(), b),
        "strided": lambda k: k(torch.randn(16, 32)[:, ::2], b),
        "aliased_input": lambda k: k(a, b, C=a),
        "same_tensor": lambda k: k(a, b, C=b[:, :]),
        "device": lambda k: k(a.to("meta"), b),
        "not_a_tensor": lambda k: k(a.tolist(), b),
        "extra_argument": lambda k: k(a, b, a),
    }
    assert _error(lambda: calls[case](gemm)) == _error(lambda: calls[case](plain))
    torch.testing.assert_close(gemm(a, b), a @ b, rtol=1e-4, atol=1e-4)  # and the C entry still serves


def test_a_negative_view_is_resolved_by_python(gemm):
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    torch.testing.assert_close(gemm(torch._neg_view(a), b), -a @ b, rtol=1e-4, atol=1e-4)
    with pytest.raises(septran.CallError, match="negative"):
        gemm(a, b, C=torch._neg_view(torch.empty(16, 16)))


def test_an_accumulator_starts_from_zeros_each_call(entry, tmp_path, monkeypatch):
    """C kept in global memory (the program reads it before writing it): the C entry hands it zeros, as Python."""
    path = edited_mapping(tmp_path, "cpu", "gemm", ("{C: LOCAL, A: GLOBAL, B: GLOBAL}", "{C: GLOBAL, A: GLOBAL, B: GLOBAL}"))
    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=path)
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    warmed(kernel, a, b)
    _python_fails(monkeypatch)
    for _ in range(3):
        torch.testing.assert_close(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def chain(entry):
    """An elementwise chain with dynamic rows and columns: its C function takes the sizes after the addresses."""
    from septran.ops import kernels
    from septran.ops.logic.elementwise_chain import chain_logic

    kernel = septran.compile(chain_logic((("mul", ("i", 0), ("c", 2.0)),), ("full",)),
                             kernels.mapping("cpu", "elementwise_chain"))
    for shape in ((5, 7), (3, 300)):
        warmed(kernel, torch.randn(*shape))
    return kernel


def test_dynamic_sizes_are_passed(chain, in_c):
    for shape in ((5, 7), (3, 300)):
        x = torch.randn(*shape)
        torch.testing.assert_close(chain(x), 2 * x)


def test_a_kernel_only_called_a_few_times_stays_in_python(entry):
    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=mapping_path("cpu", "gemm"))
    a = torch.randn(16, 16)
    for _ in range(fast_call.CALLS_BEFORE - 1):
        kernel(a, a)
    assert kernel._fast is None


def test_where_it_cannot_be_built_calls_stay_in_python(monkeypatch):
    monkeypatch.setattr(pyext, "_state", {"module": None, "thread": object(), "why": "no compiler"})
    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=mapping_path("cpu", "gemm"))
    a = torch.randn(16, 16)
    for _ in range(fast_call.CALLS_BEFORE + 3):
        torch.testing.assert_close(kernel(a, a), a @ a, rtol=1e-4, atol=1e-4)
    assert kernel._fast is None
    assert all(p.fast_left == 0 for p in kernel._plans.values())


def test_a_dropped_output_is_recycled_only_when_nothing_can_tell(gemm, in_c):
    """Small outputs are handed out again once their caller dropped them; never one that is still seen (a view,
    an attribute, a weak reference, autograd) or that differs from a new one (version, inference mode)."""
    import weakref

    a, b = torch.randn(16, 16), torch.randn(16, 16)
    y = gemm(a, b)
    view = y[0]
    kept = view.clone()
    del y
    gemm(2 * a, b)
    assert torch.equal(view, kept)  # the view's memory was not written
    y = gemm(a, b)
    y.tag = 1
    del y
    assert not hasattr(gemm(a, b), "tag")
    y = gemm(a, b)
    ref = weakref.ref(y)
    del y
    z = gemm(a, b)
    assert ref() is not z
    y = gemm(a, b)
    y.add_(1)
    del y
    assert gemm(a, b)._version == 0
    y = gemm(a, b)
    y.requires_grad_()
    del y
    assert not gemm(a, b).requires_grad
    del z
    gemm(a, b)  # dropped at once
    with torch.inference_mode():
        assert gemm(a, b).is_inference()
    assert not gemm(a, b).is_inference()
    torch.testing.assert_close(gemm(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_kernel_call_dispatches_in_c_and_can_still_be_wrapped(gemm, monkeypatch):
    """Once a plan is held, Kernel.__call__ is the C Dispatch around the Python one; a wrapper (the model
    profile's) still sees every call, and the Python __call__ is its fallback."""
    from septran.build import pyext
    from septran.runtime.kernel import Kernel

    mod = pyext.module()
    assert isinstance(Kernel.__dict__["__call__"], mod.Dispatch)
    assert Kernel.__call__.__wrapped__.__qualname__ == "Kernel.__call__"
    seen = []
    original = Kernel.__call__

    def observed(self, *args, **kwargs):
        seen.append(len(args))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Kernel, "__call__", observed)
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    torch.testing.assert_close(gemm(a, b), a @ b, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(gemm(a, b, C=torch.empty(16, 16)), a @ b, rtol=1e-4, atol=1e-4)
    assert seen == [2, 2]
    assert gemm.__call__(a, b).shape == (16, 16)  # bound through the descriptor


def test_install_puts_the_call_slot_in_c_only_under_a_dispatch(entry):
    """``install`` gives a class whose own __call__ is a Dispatch a call slot in C (keyword calls then skip
    CPython's re-packing); whatever it does not hold runs the class's __call__, and assigning __call__ again
    (a wrapper) puts CPython's slot back."""
    class Callee:
        def __call__(self, x, scale=1):
            return ("python", x * scale)

    assert entry.install(Callee) is False
    Callee.__call__ = entry.Dispatch(Callee.__dict__["__call__"])
    assert entry.install(Callee) is True
    callee = Callee()
    assert callee(2) == ("python", 2) and callee(2, scale=3) == ("python", 6) and callee(x=4) == ("python", 4)
    with pytest.raises(TypeError, match="unexpected keyword"):
        callee(2, bad=1)
    Callee.__call__ = lambda self, x: ("wrapper", x)
    assert callee(5) == ("wrapper", 5)

    class Reassigns:  # its Python __call__ replaces the Dispatch it was reached through, mid-call
        def __call__(self, x):
            type(self).__call__ = lambda self, x: ("after", x)
            return ("python", x)

    Reassigns.__call__ = entry.Dispatch(Reassigns.__dict__["__call__"])
    assert entry.install(Reassigns) is True
    reassigns = Reassigns()
    assert reassigns(1) == ("python", 1) and reassigns(2) == ("after", 2)
    with pytest.raises(TypeError, match="class defined in Python"):
        entry.install(int)


def test_threads_share_held_plans(chain):
    """Large calls let other threads run meanwhile (the GIL released): each thread gets its own, right result."""
    import threading

    xs = [torch.randn(300, 300) for _ in range(4)]
    warmed(chain, xs[0])
    failures = []

    def work(x):
        for _ in range(20):
            if not torch.equal(chain(x), 2 * x):
                failures.append(1)

    threads = [threading.Thread(target=work, args=(x,)) for x in xs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


def test_a_scalar_is_matched_by_its_exact_value(entry, monkeypatch):
    """eps=1e-6 as the held call gave it (by keyword or position) runs in C; another value, -0.0 for 0.0, or
    another type is a new signature: Python makes its plan (here: refused, so that nothing is built)."""
    from conftest import REPO
    from septran.runtime.kernel import Kernel

    kernel = septran.compile(logic_file=REPO / "examples" / "rmsnorm" / "rmsnorm.py",
                             mapping_file=mapping_path("cpu", "rmsnorm"))
    x, w = torch.randn(8, 64), torch.randn(64)
    warmed(kernel, x, w, eps=1e-6)
    warmed(kernel, x, w, 0.0)
    _python_fails(monkeypatch)

    def no_new_plan(self, args, kwargs):
        raise LookupError("a new signature")
    monkeypatch.setattr(Kernel, "plan", no_new_plan)
    ref = torch.nn.functional.rms_norm(x, (64,), w, 1e-6)
    torch.testing.assert_close(kernel(x, w, eps=float("1e-6")), ref)
    torch.testing.assert_close(kernel(x, w, 0.0), torch.nn.functional.rms_norm(x, (64,), w, 0.0))
    for args, kwargs in [((x, w), {"eps": 1e-5}), ((x, w, -0.0), {}), ((x, w, 0), {}), ((x, w), {"eps": True}),
                         ((x, w, 1e-6), {}), ((x, w), {})]:
        with pytest.raises((LookupError, AssertionError)):
            kernel(*args, **kwargs)
