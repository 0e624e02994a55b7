"""Issue 8's cases, one function each: ``case_<name>(tmp)`` raises AssertionError when SepTran gets it wrong.

The tests in tests/test_verify_*.py call these functions in-process. Some of the
programs crash the process today (SIGSEGV), so every case can also be run on its
own, in a child process:

    python tests/verify_cases/cases.py                 # every case, each in its own process: a table
    python tests/verify_cases/cases.py softmax_swapped_lambda   # one case, in this process

and ``SEPTRAN_TEST_ISOLATE=1 pytest tests/test_verify_*.py`` makes the tests run
each case in a child process (a crash then fails one test, not the run).

A refused program must raise ``LoweringError`` (``MappingError`` for mapping
mistakes) at compile or specialize time, located at the user's line (the logic
file, or the mapping file for mapping mistakes), with the numbers in the message.
"""
from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Optional

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
REPO = TESTS.parent
if str(TESTS) not in sys.path:  # run as a script: conftest's helpers
    sys.path.insert(0, str(TESTS))

import torch  # noqa: E402

import septran  # noqa: E402
from conftest import assert_flash_rule, assert_gemm_close, edited_mapping, mapping_path  # noqa: E402

EXAMPLES = REPO / "examples"
LIBRARY = REPO / "septran" / "ops" / "logic"  # the logic files examples/<op>/<op>.py import (edited as text here)
SEPTRAN_DIR = str(Path(septran.__file__).resolve().parent) + os.sep
_INTERNAL = re.compile(r"septran/(lowering|frontend|runtime|emit_tilelang|mapping|errors|target)|Traceback")


# helpers ------------------------------------------------------------------------------------------


def edited_file(tmp: Path, source: Path, name: str, *edits: tuple[str, str]) -> Path:
    """``source`` with each ``(old, new)`` replaced (``old`` must occur exactly once), written as tmp/name."""
    text = source.read_text()
    for old, new in edits:
        assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in {source}"
        text = text.replace(old, new)
    path = tmp / name
    path.write_text(text)
    return path


def line_of(path: Path, needle: str) -> int:
    """The 1-based number of the one line of ``path`` that contains ``needle``."""
    hits = [n for n, text in enumerate(Path(path).read_text().splitlines(), 1) if needle in text]
    assert len(hits) == 1, f"{needle!r} is on lines {hits} of {path}"
    return hits[0]


def marked_line(path: Path, marker: str) -> int:
    """The line of ``path`` that ends with ``# <- marker``."""
    hits = [n for n, text in enumerate(Path(path).read_text().splitlines(), 1) if text.rstrip().endswith(f"# <- {marker}")]
    assert len(hits) == 1, f"marker {marker!r} is on lines {hits} of {path}"
    return hits[0]


def refused(action: Callable[[], object], kinds=(septran.LoweringError,)) -> septran.SepTranError:
    """Runs ``action`` (a compile, then a specialize or a call) and returns the error it must raise."""
    try:
        result = action()
    except kinds as err:
        return err
    except septran.SepTranError as err:
        raise AssertionError(f"expected {' or '.join(k.__name__ for k in kinds)}, got {type(err).__name__}:\n{err}") from err
    except Exception as err:  # noqa: BLE001 - the point: any other exception is a failure of its own kind
        raise AssertionError(f"expected {' or '.join(k.__name__ for k in kinds)}, got {type(err).__name__}: {err}") from err
    raise AssertionError(f"the program was not refused (expected {' or '.join(k.__name__ for k in kinds)}); it gave {result!r}")


def assert_located(err: septran.SepTranError, file: Path, line: int, *patterns: str) -> None:
    """``err`` points at file:line, says no SepTran-internal file, and matches each regex of ``patterns``."""
    text = str(err)
    assert err.loc is not None, f"the error has no location:\n{text}"
    assert (Path(err.loc.file).resolve(), err.loc.line) == (Path(file).resolve(), line), (
        f"reported at {err.loc}, expected {file}:{line} ({Path(file).read_text().splitlines()[line - 1].strip()!r}):\n{text}")
    assert SEPTRAN_DIR not in text and not _INTERNAL.search(text), f"SepTran-internal detail in the message:\n{text}"
    for pattern in patterns:
        assert re.search(pattern, text), f"{pattern!r} not found in the message:\n{text}"


def assert_not_a_sepran_bug(action: Callable[[], object]):
    """Runs ``action``; a legal program must not surface as a BuildError / InternalError."""
    try:
        return action()
    except septran.BuildError as err:
        raise AssertionError(f"TileLang could not take the generated program (BuildError):\n{err}") from err
    except septran.InternalError as err:
        raise AssertionError(f"InternalError for a legal program:\n{err}") from err


def compile_and_specialize(logic: Path, mapping: Path, **shapes):
    return lambda: septran.compile(logic_file=logic, mapping_file=mapping).specialize(**shapes)


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _rand(*shape, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=_gen(seed))


# 1. an index name shared by two tiles ties their extents (the lambda's parameters swapped) ------------

SOFTMAX_WRITE = "task.compute(Y, lambda i, j: task.exp(X[i, j] - m[i]) / l[i])"
RMS_WRITE = "task.compute(Y, lambda i, j: X[i, j] * rstd[i] * W[j])"
ROW_TILES = ("{BM: 1, BN: 1024}", "{BM: 8, BN: 64}")  # not square: 8 rows, 64 columns


def case_softmax_swapped_lambda(tmp: Path) -> None:
    """``lambda j, i:`` on an 8 x 64 tile: i runs to 63 over X's tile of 8 rows. SIGSEGV today when run."""
    logic = edited_file(tmp, LIBRARY / "softmax.py", "softmax_swapped.py",
                        (SOFTMAX_WRITE, SOFTMAX_WRITE.replace("lambda i, j:", "lambda j, i:")))
    mapping = edited_mapping(tmp, "cpu", "softmax_online", ROW_TILES)  # the online algorithm, whose write is edited
    err = refused(compile_and_specialize(logic, mapping, X=((7, 1000), "float32")))
    assert_located(err, logic, line_of(logic, "lambda j, i:"), r"\b(63|64)\b", r"\b8\b")


def case_rmsnorm_swapped_lambda(tmp: Path) -> None:
    """The same swap in rmsnorm's write. SIGSEGV today when run."""
    logic = edited_file(tmp, LIBRARY / "rmsnorm.py", "rmsnorm_swapped.py",
                        (RMS_WRITE, RMS_WRITE.replace("lambda i, j:", "lambda j, i:")))
    mapping = edited_mapping(tmp, "cpu", "rmsnorm", ROW_TILES)
    err = refused(compile_and_specialize(logic, mapping, X=((7, 1000), "float32"), W=((1000,), "float32")))
    assert_located(err, logic, line_of(logic, "lambda j, i:"), r"\b(63|64)\b", r"\b8\b")


# 2. a tile index outside its partition's grid, far outside (the offset wraps in 32 bits) --------------


def case_bmm_batch_index_far_outside(tmp: Path) -> None:
    """``Bp[1000000, 0, j]`` with 2 batch entries: Bp's grid has 2 rows of tiles. SIGSEGV today when run."""
    logic = edited_file(tmp, LIBRARY / "bmm.py", "bmm_far.py", ("Bp[b, 0, j]", "Bp[1000000, 0, j]"))
    err = refused(compile_and_specialize(logic, mapping_path("cpu", "bmm"),
                                         A=((2, 64, 64), "float32"), B=((2, 64, 64), "float32")))
    assert_located(err, logic, line_of(logic, "Bp[1000000, 0, j]"), r"1000000|1,000,000|1e\+?0?6", r"\b2\b")


# 3. small tile-index mistakes in gemm's block task, and its loop bound ------------------------------

GEMM_LAUNCH = "task.launch(gemm_leaf_logic, C, Ap[0, k], Bp[k, 0])"
GEMM_RANGE = "for k in task.range(Ap.shape[1]):"
GEMM_SHAPES = dict(A=((64, 64), "float32"), B=((64, 64), "float32"))  # BK = 32: Ap's grid in a block is 1 x 2


def _gemm_variant(tmp: Path, name: str, old: str, new: str) -> Path:
    return edited_file(tmp, LIBRARY / "gemm.py", f"{name}.py", (old, new))


def _gemm_index_refused(tmp: Path, name: str, new_launch: str, *patterns: str) -> None:
    logic = _gemm_variant(tmp, name, GEMM_LAUNCH, new_launch)
    err = refused(compile_and_specialize(logic, mapping_path("cpu", "gemm"), **GEMM_SHAPES))
    assert_located(err, logic, line_of(logic, new_launch), *patterns)


def case_gemm_a_tile_k_minus_one(tmp: Path) -> None:
    """``Ap[0, k - 1]``: k - 1 reaches -1 on the first iteration."""
    _gemm_index_refused(tmp, "gemm_a_km1", "task.launch(gemm_leaf_logic, C, Ap[0, k - 1], Bp[k, 0])", r"-\s?1\b", r"\b1 tile\b")


def case_gemm_b_tile_k_minus_one(tmp: Path) -> None:
    """``Bp[k - 1, 0]``: the same on B's partition (one tile of rows: the shipped BK covers K)."""
    _gemm_index_refused(tmp, "gemm_b_km1", "task.launch(gemm_leaf_logic, C, Ap[0, k], Bp[k - 1, 0])", r"-\s?1\b", r"\b1 tile\b")


def case_gemm_constant_minus_one(tmp: Path) -> None:
    """A constant index -1 (Ap's grid has one row of tiles in a block)."""
    _gemm_index_refused(tmp, "gemm_const_m1", "task.launch(gemm_leaf_logic, C, Ap[-1, k], Bp[k, 0])", r"-\s?1\b")


def case_gemm_range_negative(tmp: Path) -> None:
    """``task.range(-1)``: a loop extent below zero, refused at the range's line (by the tracer, a number
    while tracing; the verification refuses extents that become negative only with the shapes)."""
    logic = _gemm_variant(tmp, "gemm_range_m1", GEMM_RANGE, "for k in task.range(-1):")
    err = refused(compile_and_specialize(logic, mapping_path("cpu", "gemm"), **GEMM_SHAPES),
                  (septran.LoweringError, septran.FrontendError))
    assert_located(err, logic, line_of(logic, "task.range(-1)"), r"-\s?1\b")


def case_gemm_range_zero(tmp: Path) -> None:
    """``task.range(0)``: no iterations, legal; C is what was written, the cleared accumulator: zeros."""
    logic = _gemm_variant(tmp, "gemm_range_0", GEMM_RANGE, "for k in task.range(0):")
    kernel = septran.compile(logic_file=logic, mapping_file=mapping_path("cpu", "gemm"))
    a, b = _rand(40, 24, seed=1), _rand(24, 36, seed=2)
    c = assert_not_a_sepran_bug(lambda: kernel(a, b))
    assert c.shape == (40, 36)
    assert bool((c == 0).all()), f"gemm with no k iterations must give zeros; max |C| = {c.abs().max().item():.3e}"


# 4. grouped-query attention: K and V have fewer heads; query head h reads KV head h // g ---------------

GQA_LOGIC = HERE / "gqa_attention.py"


def _sdpa_gqa(q, k, v):
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    return torch.softmax(s, dim=-1) @ v


def case_gqa_divisible_heads_correct(tmp: Path) -> None:
    """8 query heads over 4 KV heads (g = 2): correct against torch."""
    kernel = septran.compile(logic_file=GQA_LOGIC, mapping_file=mapping_path("cpu", "attention"))
    q, k, v = _rand(2, 8, 45, 32, seed=1), _rand(2, 4, 70, 32, seed=2), _rand(2, 4, 70, 32, seed=3)
    out = assert_not_a_sepran_bug(lambda: kernel(q, k, v))
    ref = _sdpa_gqa(q.double(), k.double(), v.double())
    torch_out = _sdpa_gqa(q, k, v)
    assert_flash_rule(out, ref, torch_out, "GQA, 8 query heads over 4 KV heads")


def case_gqa_heads_not_divisible_refused(tmp: Path) -> None:
    """8 query heads over 3 KV heads: g = 2 and h // 2 reaches 3, but K has 3 heads (0..2). Today one head
    silently comes out as zeros."""
    shapes = dict(Q=((1, 8, 16, 32), "float32"), K=((1, 3, 16, 32), "float32"), V=((1, 3, 16, 32), "float32"))
    err = refused(compile_and_specialize(GQA_LOGIC, mapping_path("cpu", "attention"), **shapes))
    assert_located(err, GQA_LOGIC, marked_line(GQA_LOGIC, "gqa launch"), r"\b3\b", r"\bK\b|\bV\b|head")


# 5. a parameter written whole by one leaf and as two halves by the next ones (RoPE) ----------------------

ROPE_LOGIC = HERE / "rope.py"
ROPE_MAPPING = HERE / "rope.yaml"
ROPE_COS, ROPE_SIN = 0.6, 0.8  # the values rope.py uses


def case_rope_halves_after_whole_correct(tmp: Path) -> None:
    """Y = X whole, then each half of Y rotated with the other half of X: correct against torch.
    Today the halves are staged apart from the whole tile, loaded from the uninitialised output: garbage."""
    kernel = septran.compile(logic_file=ROPE_LOGIC, mapping_file=ROPE_MAPPING)
    for rows in (5, 8):
        x = _rand(rows, 64, seed=rows)
        y = assert_not_a_sepran_bug(lambda: kernel(x))
        x1, x2 = x.double()[:, :32], x.double()[:, 32:]
        ref = torch.cat([x1 * ROPE_COS - x2 * ROPE_SIN, x2 * ROPE_COS + x1 * ROPE_SIN], dim=1)
        torch_x1, torch_x2 = x[:, :32], x[:, 32:]
        torch_out = torch.cat([torch_x1 * ROPE_COS - torch_x2 * ROPE_SIN, torch_x2 * ROPE_COS + torch_x1 * ROPE_SIN], dim=1)
        assert_flash_rule(y, ref, torch_out, f"RoPE-style halves, {rows} rows")


# 6. operands and the bias read at the wrong letters -------------------------------------------------------

SWAPPED_LAUNCH = "task.launch(gemm_leaf_logic, C, Bp[k, 0], Ap[0, k])"


def case_gemm_swapped_operands_square(tmp: Path) -> None:
    """Square tiles, square problem: every extent is 32, yet C's m is BM and the swapped A's m is BK.
    Today it runs and gives a wrong result."""
    logic = _gemm_variant(tmp, "gemm_swapped", GEMM_LAUNCH, SWAPPED_LAUNCH)
    err = refused(compile_and_specialize(logic, mapping_path("cpu", "gemm"), **GEMM_SHAPES))
    assert_located(err, logic, line_of(logic, SWAPPED_LAUNCH), r"BM|BK|BN|\b32\b")


def case_gemm_swapped_operands_rectangular(tmp: Path) -> None:
    """BM 32, BN 16, BK 8: the swapped tiles' extents disagree. Today a BuildError full of TileLang internals."""
    logic = _gemm_variant(tmp, "gemm_swapped", GEMM_LAUNCH, SWAPPED_LAUNCH)
    mapping = edited_mapping(tmp, "cpu", "gemm", ("{BM: 256, BN: 256, BK: 512}", "{BM: 32, BN: 16, BK: 8}"))
    err = refused(compile_and_specialize(logic, mapping, A=((64, 64), "float32"), B=((64, 64), "float32")))
    assert_located(err, logic, line_of(logic, SWAPPED_LAUNCH))
    numbers = {n for n in ("32", "16", "8") if re.search(rf"\b{n}\b", str(err))}
    assert len(numbers) >= 2, f"the message should name the two extents that disagree:\n{err}"


BIAS_PRIMITIVE = 'task.call_primitive("add_bias", C, bias)'
EPI_TILES = ("{BM: 256, BN: 256, BK: 512}", "{BM: 32, BN: 16, BK: 32}")


def _epilogue_with_bias(tmp: Path, name: str, index: str) -> Path:
    compute = f"task.compute(C, lambda i, j: C[i, j] + bias[{index}])"
    return edited_file(tmp, LIBRARY / "gemm_epilogue.py", f"{name}.py", (BIAS_PRIMITIVE, compute))


def case_epilogue_bias_by_column_correct(tmp: Path) -> None:
    """The control for the next case: the epilogue's bias as a task.compute, ``bias[j]``: correct."""
    logic = _epilogue_with_bias(tmp, "epi_bias_j", "j")
    mapping = edited_mapping(tmp, "cpu", "gemm_epilogue", EPI_TILES)
    kernel = septran.compile(logic_file=logic, mapping_file=mapping)
    a, b, bias = _rand(50, 40, seed=1), _rand(40, 45, seed=2), _rand(45, seed=3)
    c = assert_not_a_sepran_bug(lambda: kernel(a, b, bias))
    ref = torch.relu(a.double() @ b.double() + bias.double())
    torch_out = torch.relu(a @ b + bias)
    assert_flash_rule(c, ref, torch_out, "epilogue with bias[j]")


def case_epilogue_bias_by_row_refused(tmp: Path) -> None:
    """``bias[i]`` where ``bias[j]`` was meant: i runs over C's 32 rows, the bias tile has 16 entries."""
    logic = _epilogue_with_bias(tmp, "epi_bias_i", "i")
    mapping = edited_mapping(tmp, "cpu", "gemm_epilogue", EPI_TILES)
    shapes = dict(A=((50, 40), "float32"), B=((40, 45), "float32"), bias=((45,), "float32"))
    err = refused(compile_and_specialize(logic, mapping, **shapes))
    assert_located(err, logic, line_of(logic, "bias[i]"), r"\b(31|32)\b", r"\b16\b")


# 7. mapping mistakes ---------------------------------------------------------------------------------------

MAPPING_ERRORS = (septran.MappingError, septran.LoweringError)
ONE_STEP_LOGIC = HERE / "gemm_one_step.py"


def case_pipeline_without_a_sequential_range(tmp: Path) -> None:
    """``pipeline: 4`` on a block task that has no task.range: refused at the pipeline line."""
    mapping = edited_mapping(tmp, "cpu", "gemm", ("    proc: BLOCK\n", "    proc: BLOCK\n    pipeline: 4\n"),
                             ("{BM: 256, BN: 256, BK: 512}", "{BM: 32, BN: 32}"))
    err = refused(compile_and_specialize(ONE_STEP_LOGIC, mapping, **GEMM_SHAPES), MAPPING_ERRORS)
    assert_located(err, mapping, line_of(mapping, "pipeline: 4"), r"pipeline|range")


def case_pipeline_one_step_control(tmp: Path) -> None:
    """The control: gemm_one_step.py without the pipeline key (nor BK, which it never uses) runs and is correct."""
    mapping = edited_mapping(tmp, "cpu", "gemm", ("{BM: 256, BN: 256, BK: 512}", "{BM: 32, BN: 32}"))
    kernel = septran.compile(logic_file=ONE_STEP_LOGIC, mapping_file=mapping)
    a, b = _rand(40, 24, seed=1), _rand(24, 36, seed=2)
    assert_gemm_close(assert_not_a_sepran_bug(lambda: kernel(a, b)), a, b)


def case_unused_tunable(tmp: Path) -> None:
    """``BKK: 32`` in gemm's tunables, which the logic never names: refused there, with a did-you-mean BK."""
    mapping = edited_mapping(tmp, "cpu", "gemm", ("{BM: 256, BN: 256, BK: 512}", "{BM: 32, BN: 32, BK: 32, BKK: 32}"))
    err = refused(compile_and_specialize(EXAMPLES / "gemm" / "gemm.py", mapping, **GEMM_SHAPES), MAPPING_ERRORS)
    assert_located(err, mapping, line_of(mapping, "BKK: 32"), r"BKK")
    assert re.search(r"\bBK\b", str(err).replace("BKK", "")), f"no did-you-mean naming BK:\n{err}"


HOST_LEAF_LOGIC = HERE / "host_launches_leaf.py"
HOST_LEAF_MAPPING = """\
target: cpu
entrypoint: host
task_mappings:
  host:
    task_name: host_logic
    proc: HOST
    mems: {C: GLOBAL, A: GLOBAL, B: GLOBAL}
    tunables: {BM: 32, BN: 32}
    LEAF_KEY
"""


def case_host_launches_a_leaf(tmp: Path) -> None:
    """A HOST instance that launches a leaf directly: a located SepTranError (today a raw KeyError), whether
    the mapping binds the leaf (``leaf_task_bindings``) or names it as a call."""
    for n, key in enumerate(("leaf_task_bindings: {leaf: gemm_leaf_cpu}", "calls: {leaf: gemm_leaf_cpu}", "")):
        mapping = tmp / f"host_leaf_{n}.yaml"
        mapping.write_text(HOST_LEAF_MAPPING.replace("LEAF_KEY", key))
        kernel_call = compile_and_specialize(HOST_LEAF_LOGIC, mapping, **GEMM_SHAPES)
        err = refused(kernel_call, (septran.SepTranError,))
        assert err.loc is not None and Path(err.loc.file).resolve() in (HOST_LEAF_LOGIC, mapping.resolve()), (
            f"mapping variant {key!r}: not located in the logic or the mapping:\n{err}")
        assert not _INTERNAL.search(str(err)), str(err)


# 8. legal programs whose TileLang code TileLang could not parse -----------------------------------------------

EMPTY_RANGE_LOGIC = HERE / "empty_range.py"
ROWS_MAPPING = HERE / "rows.yaml"


def case_compute_in_empty_range(tmp: Path) -> None:
    """A compute inside ``task.range(0)`` never happens: Y = X. Today: a ``for`` with no body (IndentationError)."""
    kernel = septran.compile(logic_file=EMPTY_RANGE_LOGIC, mapping_file=ROWS_MAPPING)
    x = _rand(6, 24, seed=4)
    y = assert_not_a_sepran_bug(lambda: kernel(x))
    assert torch.equal(y, x), f"max |Y - X| = {(y - x).abs().max().item():.3e}"


NAN_LOGIC = HERE / "nan_constant.py"


def case_nan_constant(tmp: Path) -> None:
    """``float("nan")`` in a compute: NaN exactly where torch has it. Today ``nan`` is printed (NameError)."""
    kernel = septran.compile(logic_file=NAN_LOGIC, mapping_file=ROWS_MAPPING)
    x = _rand(6, 24, seed=5)
    y = assert_not_a_sepran_bug(lambda: kernel(x))
    ref = torch.where(x > 0, x, torch.full_like(x, float("nan")))
    assert torch.equal(y.isnan(), ref.isnan()), "NaN not where torch has it"
    assert torch.equal(y[~ref.isnan()], ref[~ref.isnan()])


ONE_ELEMENT_LOGIC = HERE / "one_element.py"
ONE_ELEMENT_MAPPING = HERE / "one_element.yaml"


def case_one_element_read(tmp: Path) -> None:
    """Y = X * s[()], s a tensor of rank 0: correct, or a located Lowering/Mapping/FrontendError; never TileLang's
    SyntaxError on ``s_local[]`` (today: a BuildError, "this is a SepTran bug")."""
    x, s = _rand(6, 24, seed=6), torch.tensor(2.5)
    try:
        kernel = septran.compile(logic_file=ONE_ELEMENT_LOGIC, mapping_file=ONE_ELEMENT_MAPPING)
        y = assert_not_a_sepran_bug(lambda: kernel(x, s))
    except (septran.LoweringError, septran.MappingError, septran.FrontendError) as err:
        assert err.loc is not None and Path(err.loc.file).resolve() in (ONE_ELEMENT_LOGIC, ONE_ELEMENT_MAPPING), str(err)
        assert not _INTERNAL.search(str(err)), str(err)
        return
    assert torch.equal(y, x * 2.5), f"max |Y - 2.5 X| = {(y - x * 2.5).abs().max().item():.3e}"


# 9. the generated source does not depend on the working directory ------------------------------------------------


def source_from(cwd: Path, logic: Path, mapping: Path) -> str:
    old = os.getcwd()
    os.chdir(cwd)
    try:
        return septran.compile(logic_file=logic, mapping_file=mapping).specialize(**GEMM_SHAPES).tilelang_source
    finally:
        os.chdir(old)


def _same_source(one: str, two: str, what: str) -> None:
    assert one == two, f"the TileLang source of {what} depends on the working directory:\n" + "\n".join(
        f"  {a!r}\n  {b!r}" for a, b in zip(one.splitlines(), two.splitlines()) if a != b)


def case_source_independent_of_cwd(tmp: Path) -> None:
    """The same program compiled from two working directories: the same TileLang source (one cache entry).
    Today the header's paths are relative to the working directory when the file lies under it."""
    logic, mapping = LIBRARY / "gemm.py", mapping_path("cpu", "gemm")
    _same_source(source_from(REPO, logic, mapping), source_from(REPO / "examples", logic, mapping), "examples/gemm")
    own = tmp / "own"
    own.mkdir()
    logic = edited_file(own, logic, "my_gemm.py")
    mapping = own / "my_gemm.yaml"
    mapping.write_text(mapping_path("cpu", "gemm").read_text())
    _same_source(source_from(own, logic, mapping), source_from(REPO, logic, mapping), "a logic file outside the repository")


# running cases on their own ------------------------------------------------------------------------------------

CASES = {name[len("case_"):]: fn for name, fn in sorted(globals().items()) if name.startswith("case_") and callable(fn)}


def run_isolated(name: str, timeout: float = 600) -> tuple[str, str]:
    """Runs one case in a child process: ``("pass" | "fail" | "crash (signal N)" | "timeout", output)``."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    try:
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), name], capture_output=True, text=True,
                              timeout=timeout, env=env)
    except subprocess.TimeoutExpired as err:
        return "timeout", str(err)
    out = proc.stdout + proc.stderr
    if proc.returncode < 0:
        return f"crash (signal {-proc.returncode})", out
    return ("pass" if proc.returncode == 0 else "fail"), out


def run_case(name: str, tmp: Optional[Path] = None) -> None:
    """What a test calls: the case in this process, or with SEPTRAN_TEST_ISOLATE=1 in a child process."""
    if os.environ.get("SEPTRAN_TEST_ISOLATE") == "1":
        outcome, out = run_isolated(name)
        assert outcome == "pass", f"case {name}: {outcome}\n{out[-6000:]}"
        return
    if tmp is None:
        with tempfile.TemporaryDirectory() as folder:
            CASES[name](Path(folder))
    else:
        CASES[name](tmp)


def main(argv: list[str]) -> int:
    if argv:
        for name in argv:
            run_case(name)
            print(f"{name}: pass")
        return 0
    failed = 0
    for name in CASES:
        outcome, out = run_isolated(name)
        failed += outcome != "pass"
        last = [ln for ln in out.splitlines() if ln.strip() and "TileLang:tilelang" not in ln]
        print(f"{name:45s} {outcome:18s} {last[-1][:150] if last and outcome != 'pass' else ''}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
