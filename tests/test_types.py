"""Types (issue 12): per-input dtypes, outputs' dtypes, task.cast, integer arithmetic, == and != in computes."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

import septran
from septran import task
from septran.errors import LoweringError
from septran.frontend import elementwise as el
from septran.lowering import elem_types

DTYPES = ["float16", "bfloat16", "float32", "int32", "int64", "bool"]
INTS = ["int32", "int64"]

MAPPING = """
target: cpu
entrypoint: host
task_mappings:
  host: {task_name: host, proc: HOST, mems: {Y: GLOBAL, A: GLOBAL, B: GLOBAL}, tunables: {BM: 4}, calls: {rows: blk}}
  blk: {task_name: rows, proc: BLOCK, mems: {Y: GLOBAL, A: GLOBAL, B: GLOBAL}, leaf_task_bindings: {leaf: vector_loops}}
"""


def two_inputs(body, out_dtype=None):
    """``host(Y, A, B)``: Y[i, j] = body(A[i, j], B[i, j], i, j, A, B) over blocks of 4 rows, in place on the cpu."""

    @task.define(leaf=True)
    def leaf(Y, A, B):
        task.compute(Y, lambda i, j: body(A[i, j], B[i, j], i, j, A, B))

    @task.define
    def rows(Y, A, B):
        task.launch(leaf, Y, A, B)

    @task.define(dtype=out_dtype)
    def host(Y, A, B):
        Yp = task.partition(Y, by="blocks", tile=("BM", None))
        Ap = task.partition(A, by="blocks", tile=("BM", None))
        Bp = task.partition(B, by="blocks", tile=("BM", None))
        for i in task.parallel_range(Yp.shape[0]):
            task.launch(rows, Yp[i, 0], Ap[i, 0], Bp[i, 0])

    return septran.compile(host, MAPPING)


def tensor(dtype: str, shape=(6, 5), seed: int = 0, low: int = -50, high: int = 50):
    gen = torch.Generator().manual_seed(seed)
    if dtype == "bool":
        return torch.randint(0, 2, shape, generator=gen).bool()
    if dtype in INTS:
        return torch.randint(low, high, shape, generator=gen).to(getattr(torch, dtype))
    return (10 * torch.randn(shape, generator=gen)).to(getattr(torch, dtype))


# typing rules, without a build ---------------------------------------------------------------------
class _Buf:
    def __init__(self, dtype):
        self.dtype, self.name = dtype, f"b_{dtype}"


def _elt(dtype):
    return el.Elt(_Buf(dtype), ())


def _typed(e, out="float32"):
    return elem_types._typed(e, lambda b: b.dtype, None) if out is None else elem_types.typed(e, lambda b: b.dtype, out, None)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.sampled_from(DTYPES), st.sampled_from(DTYPES), st.sampled_from(["+", "-", "*", "/", "<", "==", "!="]))
def test_binary_operands_meet_in_one_type(a, b, op):
    """Both operands end in one type: integers stay integers (the wider), anything with a float is float32."""
    value, got = _typed(el.Bin(op, _elt(a), _elt(b)), None)

    def type_of(x):
        if isinstance(x, el.Cast):
            return x.dtype
        return elem_types._typed(x, lambda buf: buf.dtype, None)[1]

    assert type_of(value.lhs) == type_of(value.rhs)
    ints = [d for d in (a, b) if d in INTS + ["bool"]]
    if op == "/" or len(ints) < 2:
        assert type_of(value.lhs) == "float32"
    else:
        assert type_of(value.lhs) == ("int64" if "int64" in (a, b) else "int32")
    assert got == ("bool" if op in ("<", "==", "!=") else type_of(value.lhs))


def test_a_python_int_takes_the_type_of_the_integer_it_meets():
    value, got = _typed(el.Bin("+", _elt("int64"), el.Num(1)), None)
    assert got == "int64" and value.rhs.dtype == "int64" and value.rhs.value == 1
    value, got = _typed(el.Bin("+", _elt("float16"), el.Num(1)), None)
    assert got == "float32" and value.rhs.value == 1.0 and isinstance(value.rhs.value, float)


def test_floor_division_of_a_float_is_refused():
    with pytest.raises(LoweringError, match="'//' takes integers"):
        _typed(el.Bin("//", _elt("float32"), el.Num(2)))


def test_elements_compare_with_eq_and_stay_usable_in_containers():
    a, b = el.Load("A", ("i",)), el.Load("B", ("i",))
    assert isinstance(a == b, el.Bin) and (a == b).op == "==" and (a != 1).op == "!="
    nodes = [a, b]
    assert b in nodes and nodes.index(b) == 1 and a not in [b] and (a == None) is False  # noqa: E711
    with pytest.raises(TypeError, match="no truth value"):
        bool(a == 1)


# whole programs on the cpu -------------------------------------------------------------------------
@settings(max_examples=8, deadline=None, derandomize=True)
@given(st.sampled_from(DTYPES), st.sampled_from(["float16", "bfloat16", "float32", "int32", "int64"]))
@pytest.mark.build
def test_inputs_of_different_dtypes(a, b):
    """Each input keeps its dtype; the output takes the first floating-point input's (else float32)."""
    k = KERNELS.setdefault("add", two_inputs(lambda x, y, *_: task.where(x != x, 0.0, task.cast(x, "float32")) + y))
    ta, tb = tensor(a, seed=1), tensor(b, seed=2)
    out = k(ta, tb)
    floats = [d for d in (a, b) if d in ("float16", "bfloat16", "float32")]
    assert out.dtype == getattr(torch, floats[0] if floats else "float32")
    ref = ta.double() + tb.double()
    tol = 1e-2 * ref.abs().max().item() if out.dtype in (torch.float16, torch.bfloat16) else 1e-5
    assert (out.double() - ref).abs().max().item() <= tol


KERNELS: dict = {}


@pytest.mark.build
def test_integer_arithmetic_stays_integer():
    """int64 values beyond float32's 24 bits: + * // % in integers, exactly."""
    k = two_inputs(lambda x, y, *_: (x * 3 + y) // 7 - x % 5, out_dtype={"Y": "int64"})
    a = tensor("int64", low=2**40, high=2**41, seed=3)
    b = tensor("int64", low=-2**30, high=2**30, seed=4)
    out = k(a, b)
    assert out.dtype == torch.int64
    assert torch.equal(out, torch.div(a * 3 + b, 7, rounding_mode="floor") - torch.remainder(a, 5))


@pytest.mark.build
def test_division_of_integers_is_float():
    k = two_inputs(lambda x, y, *_: x / y, out_dtype={"Y": "float32"})
    a, b = tensor("int32", seed=5), tensor("int32", seed=6, low=1, high=9)
    torch.testing.assert_close(k(a, b), a.float() / b.float())


@pytest.mark.build
def test_comparisons_give_bool_and_bool_inputs_are_conditions():
    k = two_inputs(lambda x, y, i, j, A, B: task.where(y, x == 3, task.global_index(A, 1, j) != 2),
                   out_dtype={"Y": "bool"})
    a, b = tensor("int32", seed=7, low=0, high=6), tensor("bool", seed=8)
    out = k(a, b)
    cols = torch.arange(5).expand(6, 5)
    assert out.dtype == torch.bool and torch.equal(out, torch.where(b, a == 3, cols != 2))


@pytest.mark.build
def test_output_dtype_named_by_an_input_and_cast_to_a_parameter():
    k = two_inputs(lambda x, y, i, j, A, B: task.cast(x, B) + y, out_dtype={"Y": "B"})
    a, b = tensor("float32", seed=9), tensor("int32", seed=10)
    out = k(a, b)
    assert out.dtype == torch.int32 and torch.equal(out, a.to(torch.int32) + b)  # float -> int truncates, as torch


@pytest.mark.build
def test_a_passed_output_keeps_its_dtype():
    k = KERNELS.setdefault("add", two_inputs(lambda x, y, *_: task.where(x != x, 0.0, task.cast(x, "float32")) + y))
    a, b = tensor("float16", seed=11), tensor("float16", seed=12)
    out = torch.empty(6, 5, dtype=torch.float32)
    assert k(a, b, Y=out) is out
    torch.testing.assert_close(out, a.float() + b.float())
    out16 = torch.empty(6, 5, dtype=torch.bfloat16)  # converted on the cpu: computed in float32, written back
    assert k(a, b, Y=out16) is out16
    torch.testing.assert_close(out16, (a.float() + b.float()).bfloat16())


@pytest.mark.build
def test_bfloat16_is_computed_in_float32_on_the_cpu():
    k = KERNELS.setdefault("add", two_inputs(lambda x, y, *_: task.where(x != x, 0.0, task.cast(x, "float32")) + y))
    a, b = tensor("bfloat16", seed=13), tensor("bfloat16", seed=14)
    out = k(a, b)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, (a.float() + b.float()).bfloat16())
    assert 'T.Tensor((A_dim0, A_dim1), "float32")' in k.tilelang_source  # the program never sees bfloat16
    assert k.specialize(A=((6, 5), "bfloat16"), B=((6, 5), "bfloat16")).spec.dtypes["A"] == "float32"


def test_gpu_programs_read_bfloat16_and_integers():
    """On the GPUs every type is the program's own: bfloat16 loads are widened in the program."""
    @task.define(leaf=True)
    def leaf(Y, A, B):
        task.compute(Y, lambda i, j: A[i, j] * task.cast(B[i, j], "float32"))

    @task.define
    def rows(Y, A, B):
        task.launch(leaf, Y, A, B)

    @task.define
    def host(Y, A, B):
        Yp = task.partition(Y, by="blocks", tile=("BM", None))
        Ap = task.partition(A, by="blocks", tile=("BM", None))
        Bp = task.partition(B, by="blocks", tile=("BM", None))
        for i in task.parallel_range(Yp.shape[0]):
            task.launch(rows, Yp[i, 0], Ap[i, 0], Bp[i, 0])

    gpu = (MAPPING.replace("target: cpu", "target: sm90").replace("vector_loops", "tile_parallel")
           .replace("proc: BLOCK,", "proc: BLOCK, threads: 128,")
           .replace("mems: {Y: GLOBAL, A: GLOBAL, B: GLOBAL}, leaf", "mems: {Y: REGISTER, A: REGISTER, B: REGISTER}, leaf"))
    src = septran.compile(host, gpu).specialize(A=((64, 32), "bfloat16"), B=((64, 32), "int64")).tilelang_source
    assert 'T.Tensor((A_dim0, A_dim1), "bfloat16")' in src and '"int64"' in src
    assert 'T.Cast("bfloat16", T.Cast("float32", A_local[i, j]) * T.Cast("float32", B_local[i, j]))' in src


@pytest.mark.build
def test_temp_of_a_named_dtype():
    """task.temp(..., dtype="int32"): an int32 buffer, filled with integers."""
    @task.define(leaf=True)
    def count(Y, C, A):
        task.compute(C, lambda i, j: task.where(A[i, j] > 0, 1, 0))
        task.compute(Y, lambda i, j: C[i, j] * 2)

    @task.define
    def rows(Y, A, B):
        C = task.temp("BM", 5, dtype="int32")
        task.launch(count, Y, C, A)

    @task.define(dtype={"Y": "int32"})
    def host(Y, A, B):
        Yp = task.partition(Y, by="blocks", tile=("BM", None))
        Ap = task.partition(A, by="blocks", tile=("BM", None))
        Bp = task.partition(B, by="blocks", tile=("BM", None))
        for i in task.parallel_range(Yp.shape[0]):
            task.launch(rows, Yp[i, 0], Ap[i, 0], Bp[i, 0])

    mapping = MAPPING.replace("leaf_task_bindings: {leaf: vector_loops}", "leaf_task_bindings: {count: vector_loops}")
    mapping = mapping.replace("B: GLOBAL}, leaf_task", "B: GLOBAL, C: LOCAL}, leaf_task")
    k = septran.compile(host, mapping)
    a = tensor("float32", seed=15)
    out = k(a, a)
    assert out.dtype == torch.int32 and torch.equal(out, (a > 0).int() * 2)
    assert 'C = T.alloc_local((BM, 5), "int32")' in k.tilelang_source
    with pytest.raises(septran.FrontendError, match="is not a type"):
        @task.define
        def host(Y, A, B):  # noqa: F811
            task.temp(4, dtype="int8")

        septran.compile(host, MAPPING)


def test_define_dtype_must_name_a_type_or_parameter():
    with pytest.raises(septran.FrontendError, match="must be one of"):
        @task.define(dtype={"Y": "float8"})
        def host(Y, X):
            pass
    with pytest.raises(septran.FrontendError, match="not a parameter"):
        @task.define(dtype={"Z": "float32"})
        def host2(Y, X):
            pass


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.integers(-2**40, 2**40), st.integers(-2**40, 2**40).filter(bool), st.sampled_from(["+", "-", "*", "//", "%", "/"]))
def test_constants_fold_exactly(a, b, op):
    """Integer constants fold in integers (no float rounding past 2**24); '/' folds as a float division."""
    got = el.fold(el.Bin(op, el.Num(a), el.Size("n", b)))
    want = {"+": a + b, "-": a - b, "*": a * b, "//": a // b, "%": a % b, "/": a / b}[op]
    assert isinstance(got, el.Num) and got.value == want and isinstance(got.value, int) == (op != "/")
