"""Issue 22, errors that name the culprit: each finding gives a located error at the user's line, or the IEEE
result torch gives."""
from __future__ import annotations


import pytest
import torch

import septran

# An elementwise kernel whose compute is EXPR: one BM x BN tile per program, read and written in place.
ELEMENTWISE = '''
from septran import task

@task.define(leaf=True)
def ew_leaf(Y, X):
    task.compute(Y, lambda i, j: EXPR)

@task.define
def ew_block(Y, X):
    task.launch(ew_leaf, Y, X)

@task.define
def ew_logic(Y, X):
    Yp = task.partition(Y, by="blocks", tile=("BM", "BN"))
    Xp = task.partition(X, by="blocks", tile=("BM", "BN"))
    for i, j in task.parallel_range(Yp.shape):
        task.launch(ew_block, Yp[i, j], Xp[i, j])
'''
EW_MAPPING = '''
target: cpu
entrypoint: h
task_mappings:
  h:
    task_name: ew_logic
    proc: HOST
    mems: {"*": GLOBAL}
    tunables: {BM: 8, BN: 16}
    calls: {ew_block: b}
  b:
    task_name: ew_block
    proc: BLOCK
    mems: {"*": GLOBAL}
    leaf_task_bindings: {ew_leaf: vector_loops}
'''


def _elementwise(tmp_path, expr: str):
    logic, mapping = tmp_path / "ew.py", tmp_path / "ew.yaml"
    logic.write_text(ELEMENTWISE.replace("EXPR", expr))
    mapping.write_text(EW_MAPPING)
    return logic, septran.compile(logic_file=logic, mapping_file=mapping)


def _line_of(path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


@pytest.mark.parametrize("expr, reference", [
    ("X[i, j] / 0.0", lambda x: x / 0.0),
    ("X[i, j] / -0.0", lambda x: x / -0.0),
    ("X[i, j] / 0", lambda x: x / 0),
    ("X[i, j] * 1e300", lambda x: x * 1e300),  # beyond float32: infinities, as torch rounds it
])
@pytest.mark.build
def test_a_division_by_the_constant_zero_gives_ieee_results_like_torch(tmp_path, expr, reference):
    _, kernel = _elementwise(tmp_path, expr)
    x = torch.randn(20, 30)
    x[0, :4] = torch.tensor([0.0, float("nan"), float("inf"), -float("inf")])
    torch.testing.assert_close(kernel(x), reference(x), equal_nan=True)


@pytest.mark.parametrize("expr, dtype, error, phrase", [
    ("X[i, j] * 10 ** 400", torch.float32, septran.FrontendError, "does not fit in 64 bits"),
    ("X[i, j] * 2 ** 70", torch.float32, septran.FrontendError, "does not fit in 64 bits"),
    ("X[i, j] * 2 ** 40", torch.int32, septran.LoweringError, "does not fit in int32"),
    ("X[i, j] // 0", torch.int32, septran.LoweringError, "by the constant 0"),
    ("X[i, j] % 0", torch.int32, septran.LoweringError, "by the constant 0"),
])
def test_a_constant_out_of_range_is_refused_at_the_compute_line(tmp_path, expr, dtype, error, phrase):
    x = torch.arange(600, dtype=dtype).reshape(20, 30)
    with pytest.raises(error, match=phrase) as info:
        logic, kernel = _elementwise(tmp_path, expr)
        kernel(x)
    assert info.value.loc is not None and info.value.loc.file == str(tmp_path / "ew.py")
    assert info.value.loc.line == _line_of(tmp_path / "ew.py", "task.compute(Y")


SOFTMAX = __import__("conftest").REPO / "septran" / "ops" / "logic" / "softmax.py"  # the logic the example imports


@pytest.mark.parametrize("old, new, typo, right", [
    ('Yp = task.partition(Y, by="blocks", tile=(None, "BN"))', 'Yp = task.partition(Y, by="blocks", tile=(None, "Bn"))',
     "Bn", "BN"),
    ('Yp = task.partition(Y, by="blocks", tile=("BM", None))', 'Yp = task.partition(Y, by="blocks", tile=("Bm", None))',
     "Bm", "BM"),
])
def test_a_tile_name_typo_is_named_at_its_partition(tmp_path, old, new, typo, right):
    from conftest import mapping_path

    logic = tmp_path / "softmax.py"
    text = SOFTMAX.read_text()
    assert old in text
    logic.write_text(text.replace(old, new))
    kernel = septran.compile(logic_file=logic, mapping_file=mapping_path("cpu", "softmax_online"))
    with pytest.raises(septran.CallError, match=f"tile name '{typo}'.*did you mean '{right}'") as info:
        kernel(torch.randn(8, 40))
    assert info.value.loc.file == str(logic) and info.value.loc.line == _line_of(logic, new)


T_LOGIC = '''
from septran import task

@task.define(leaf=True)
def scale_leaf(Y, T, s=1.5):
    task.compute(Y, lambda T_, j: T[T_, j] * 2.0 + s)

@task.define(leaf=True)
def position_leaf(Y, T):
    task.compute(Y, lambda T, j: task.global_index(Y, 0, T) * 1.0)

@task.define
def scale_block(Y, T, s=1.5):
    task.launch(scale_leaf, Y, T, s)

@task.define
def scale_logic(Y, T, s=1.5):
    Yp = task.partition(Y, by="blocks", tile=("T", "BN"))
    Xp = task.partition(T, by="blocks", tile=("T", "BN"))
    for i, j in task.parallel_range(Yp.shape):
        task.launch(scale_block, Yp[i, j], Xp[i, j], s)

@task.define
def position_block(Y, T):
    task.launch(position_leaf, Y, T)

@task.define
def position_logic(Y, T):
    Yp = task.partition(Y, by="blocks", tile=("T", "BN"))
    Xp = task.partition(T, by="blocks", tile=("T", "BN"))
    for i, j in task.parallel_range(Yp.shape):
        task.launch(position_block, Yp[i, j], Xp[i, j])
'''


@pytest.mark.parametrize("entry, expected", [
    ("scale", lambda x: x * 2.0 + 1.5),
    ("position", lambda x: torch.arange(x.shape[0], dtype=x.dtype)[:, None].expand_as(x)),
])
@pytest.mark.build
def test_a_parameter_tunable_or_index_named_T_works(tmp_path, entry, expected):
    """T is the generated program's name for TileLang's module: SepTran renames its own use of the user's T
    (T_2, T_3 in the program), never asks the user to rename."""
    logic, mapping = tmp_path / "t.py", tmp_path / "t.yaml"
    logic.write_text(T_LOGIC)
    mapping.write_text(EW_MAPPING.replace("ew_logic", f"{entry}_logic").replace("ew_block", f"{entry}_block")
                       .replace("ew_leaf", f"{entry}_leaf").replace("BM: 8", "T: 8")
                       .replace('mems: {"*": GLOBAL}\n    tunables', "mems: {Y: GLOBAL, T: GLOBAL}\n    tunables"))
    kernel = septran.compile(logic_file=logic, mapping_file=mapping)
    x = torch.randn(20, 30)
    torch.testing.assert_close(kernel(x), expected(x))


def test_a_task_named_T_is_still_refused_at_its_line(tmp_path):
    """A task's name is the one name written into the program as it is."""
    logic = tmp_path / "t.py"
    logic.write_text(T_LOGIC.replace("def scale_leaf(", "def T(").replace("task.launch(scale_leaf,", "task.launch(T,"))
    with pytest.raises(septran.FrontendError, match="TileLang module's name") as info:
        septran.compile(logic_file=logic, mapping_file=tmp_path / "absent.yaml")
    assert info.value.loc.file == str(logic)


@pytest.mark.parametrize("bn", [17, 24])
def test_gfx942_softmax_with_a_reduced_extent_not_a_power_of_two_is_refused_at_the_tunable(tmp_path, bn, monkeypatch):
    """T.reduce_* on gfx942 needs a power-of-two reduced extent (target.yaml: reduced_power_of_two); TileLang's own
    check came late, as an InternalError."""
    from conftest import edited_mapping, forbid_tilelang

    path = edited_mapping(tmp_path, "gfx942", "softmax", ("BN: 512", f"BN: {bn}"))
    kernel = septran.compile(logic_file=SOFTMAX, mapping_file=path)
    forbid_tilelang(monkeypatch, "refused before TileLang")
    with pytest.raises(septran.LoweringError, match=f"does only over a power of two; the tile has {bn}") as info:
        kernel.specialize(X=((64, 300), "float32"))
    assert info.value.loc.file == str(path) and f"BN: {bn}" in path.read_text().splitlines()[info.value.loc.line - 1]


ZERO_TRIP = '''
from septran import task

@task.define(leaf=True)
def last_leaf(Y, X):
    task.compute(Y, lambda i, j: X[i, j] * 2.0)

@task.define
def last_block(Y, X, W):
    Wp = task.partition(W, by="blocks", tile=("BN", None))
    for k in task.range(Wp.shape[0]):
        task.launch(last_leaf, Y, X)

@task.define
def last_logic(Y, X, W):
    Yp = task.partition(Y, by="blocks", tile=("BM", "BN"))
    Xp = task.partition(X, by="blocks", tile=("BM", "BN"))
    for i, j in task.parallel_range(Yp.shape):
        task.launch(last_block, Yp[i, j], Xp[i, j], W)
'''


@pytest.mark.build
def test_an_output_written_only_in_a_loop_that_never_runs_is_refused(tmp_path):
    """Y is written inside a loop over W's tiles: with W empty no statement writes Y, which came back as whatever
    torch.empty held. An empty Y is still fine (no program runs)."""
    logic, mapping = tmp_path / "last.py", tmp_path / "last.yaml"
    logic.write_text(ZERO_TRIP)
    mapping.write_text(EW_MAPPING.replace("ew_", "last_"))
    kernel = septran.compile(logic_file=logic, mapping_file=mapping)
    x = torch.randn(20, 30)
    torch.testing.assert_close(kernel(x, torch.randn(5, 3)), 2 * x)
    with pytest.raises(septran.LoweringError, match="output Y is written only inside this loop, which runs 0 times") as info:
        kernel(x, torch.randn(0, 3))
    assert info.value.loc.file == str(logic) and info.value.loc.line == _line_of(logic, "for k in task.range")
    assert kernel(torch.randn(0, 30), torch.randn(0, 3)).shape == (0, 30)


# A block handed a BM x BN tile that partitions it into HALF x BN tiles and writes only the first: the rest of Y
# came back as whatever memory held (the fuzzer's conv2d finding: a host tile of 1 mutated to None).
PARTLY = '''
from septran import task

@task.define(leaf=True)
def part_leaf(Y, X):
    task.compute(Y, lambda i, j: X[i, j] * 2.0)

@task.define
def part_block(Y, X):
    Yp = task.partition(Y, by="blocks", tile=("HALF", "BN"))
    Xp = task.partition(X, by="blocks", tile=("HALF", "BN"))
    for r in task.range(ROWS):
        task.launch(part_leaf, Yp[r, 0], Xp[r, 0])

@task.define
def part_logic(Y, X):
    Yp = task.partition(Y, by="blocks", tile=("BM", "BN"))
    Xp = task.partition(X, by="blocks", tile=("BM", "BN"))
    for i, j in task.parallel_range(Yp.shape):
        task.launch(part_block, Yp[i, j], Xp[i, j])
'''


@pytest.mark.parametrize("rows, covered", [("Yp.shape[0]", True), ("1", False)])
def test_a_program_that_writes_part_of_its_output_tile_is_refused_at_the_launch(tmp_path, rows, covered):
    logic, mapping = tmp_path / "part.py", tmp_path / "part.yaml"
    logic.write_text(PARTLY.replace("ROWS", rows))
    mapping.write_text(EW_MAPPING.replace("ew_", "part_").replace("BN: 16}", "BN: 16, HALF: 4}"))
    kernel = septran.compile(logic_file=logic, mapping_file=mapping)
    x = torch.randn(19, 30)
    if covered:
        kernel.specialize(X=x)
        return
    with pytest.raises(septran.LoweringError, match=r"is handed Y\[0:8, 0:16\] but no statement in it writes "
                                                    r"Y\[4:8, 0:16\]") as info:
        kernel.specialize(X=x)
    assert info.value.loc.file == str(logic) and info.value.loc.line == _line_of(logic, "task.launch(part_block")


def test_the_fuzzers_conv2d_with_a_whole_batch_per_program_is_refused(tmp_path):
    """Fuzz seed 24's four accepted-and-wrong cases: conv2d's host tile (1, 1, "BW", None) mutated to
    (None, 1, "BW", None); the block still partitions Y one image at a time and wrote image 0 only."""
    from pathlib import Path

    source = Path(__file__).resolve().parents[1] / "examples" / "conv2d" / "conv2d.py"
    text = source.read_text()
    old = 'Yp = task.partition(Y, by="blocks", tile=(1, 1, "BW", None))'
    assert old in text
    logic = tmp_path / "conv2d.py"
    logic.write_text(text.replace(old, old.replace("(1, 1,", "(None, 1,")))
    mapping = Path(__file__).resolve().parents[1] / "mappings" / "cpu" / "conv2d.yaml"
    kernel = septran.compile(logic_file=logic, mapping_file=mapping)
    x, w, y = torch.randn(2, 9, 11, 5), torch.randn(3, 3, 5, 7), torch.empty(2, 7, 9, 7)
    with pytest.raises(septran.LoweringError, match=r"is handed Y\[0:2, 0, .*no statement in it writes Y\[1, 0, "):
        kernel.specialize(X=x, W=w, Y=y)


def test_a_tile_so_large_that_the_trip_count_wraps_is_refused_at_the_tunable(tmp_path):
    """Fuzz seed 24's mapping finding: swiglu's BK = 2147483646 over K = 37. TileLang computes ceildiv(37, BK) in
    32-bit integers, (37 + BK - 1) wraps, TVM folded the K loop away and both GEMMs with it: H came back as
    silu(0) * 0 = 0 (max error 201) with exit 0."""
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    text = (repo / "mappings" / "cpu" / "swiglu_mlp.yaml").read_text()
    old = "BK: !tune [512, "
    assert old in text
    mapping = tmp_path / "swiglu_mlp.yaml"
    mapping.write_text(text.replace(old, "BK: !tune [2147483646, "))
    kernel = septran.compile(logic_file=repo / "examples" / "swiglu_mlp" / "swiglu_mlp.py", mapping_file=mapping)
    x, wg, wu = torch.randn(19, 37), torch.randn(37, 45), torch.randn(37, 45)
    with pytest.raises(septran.LoweringError, match=r"ceildiv\(X_dim1, BK\) .* reaches 2147483682 .* would wrap") as info:
        kernel.specialize(X=x, Wg=wg, Wu=wu)
    assert info.value.loc.file == str(mapping) and info.value.loc.line == _line_of(mapping, "BK: !tune")
    assert "make BK no larger" in info.value.hint
