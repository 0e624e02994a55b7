"""The matrix of issue 22: for every target, every leaf it lists, every primitive kind the leaf implements (and the named primitive silu for elementwise leaves), every
dtype the target lists and every memory the leaf may hold its operands in, one small generated kernel.

On a target whose kernels run on this host (cpu, the DSAs' simulators) the kernel runs and its result is compared
with torch's; on a GPU target its device source is emitted (TileLang's lowering, no nvcc). Each cell's outcome is
one of: ``ran right``, ``emitted``, ``refused at file:line`` (a SepTranError with a location), or a failure of the
issue's kinds (``WRONG``, ``BUILD FAILURE``, ``UNLOCATED``, ``INTERNAL``, ``RAW``).
"""
from __future__ import annotations

import textwrap
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import septran
from septran.errors import BuildError, InternalError, SepTranError
from septran.target import load_target
from support import emit_records

TARGETS = ("cpu", "dsa_ref", "dsa_acme", "sm80", "sm90", "gfx942")
GOOD = ("ran right", "emitted", "refused")
M, N, K = 40, 64, 64  # M not a multiple of the tiles: an overhanging last tile on every target
TILE = 32  # a multiple of every matrix unit's (16x8x16, 16x16x16, 32x32x8)

# One leaf task per kind; the block task launches it on tiles staged where the mapping says.
LOGIC = {
    "elementwise": '''
@task.define(leaf=True)
def mx_leaf(Y, X):
    task.compute(Y, lambda i, j: X[i, j] + X[i, j])

@task.define
def mx_block(Y, X):
    task.launch(mx_leaf, Y, X)

@task.define(dtype={"Y": "X"})
def mx_logic(Y, X):
    Yp = task.partition(Y, by="blocks", tile=("BM", "BN"))
    Xp = task.partition(X, by="blocks", tile=("BM", "BN"))
    for i, j in task.parallel_range(Yp.shape):
        task.launch(mx_block, Yp[i, j], Xp[i, j])
''',
    "silu": '''
@task.define(leaf=True)
def mx_leaf(Y, X):
    task.compute(Y, lambda i, j: X[i, j])
    task.call_primitive("silu", Y)

@task.define
def mx_block(Y, X):
    task.launch(mx_leaf, Y, X)

@task.define(dtype={"Y": "X"})
def mx_logic(Y, X):
    Yp = task.partition(Y, by="blocks", tile=("BM", "BN"))
    Xp = task.partition(X, by="blocks", tile=("BM", "BN"))
    for i, j in task.parallel_range(Yp.shape):
        task.launch(mx_block, Yp[i, j], Xp[i, j])
''',
    "reduce": '''
@task.define(leaf=True)
def mx_leaf(Y, X):
    task.call_primitive("row_sum", Y, X)

@task.define
def mx_block(Y, X):
    task.launch(mx_leaf, Y, X)

@task.define(dtype={"Y": "X"})
def mx_logic(Y, X):
    Yp = task.partition(Y, by="blocks", tile=("BM",))
    Xp = task.partition(X, by="blocks", tile=("BM", None))
    for i in task.parallel_range(Yp.shape[0]):
        task.launch(mx_block, Yp[i], Xp[i, 0])
''',
    "reduce_axis": '''
@task.define(leaf=True)
def mx_leaf(Y, X):
    task.compute(Y, lambda i: 0.0)
    task.call_primitive("reduce_sum", Y, X, axis=1, rank=2)

@task.define
def mx_block(Y, X):
    task.launch(mx_leaf, Y, X)

@task.define(dtype={"Y": "X"})
def mx_logic(Y, X):
    Yp = task.partition(Y, by="blocks", tile=("BM",))
    Xp = task.partition(X, by="blocks", tile=("BM", None))
    for i in task.parallel_range(Yp.shape[0]):
        task.launch(mx_block, Yp[i], Xp[i, 0])
''',
    "gemm": '''
@task.define(leaf=True)
def mx_leaf(C, A, B):
    task.call_primitive("gemm", C, A, B)

@task.define
def mx_block(C, A, B):
    Ap = task.partition(A, by="blocks", tile=("BM", "BK"))
    Bp = task.partition(B, by="blocks", tile=("BK", "BN"))
    for k in task.range(Ap.shape[1]):
        task.launch(mx_leaf, C, Ap[0, k], Bp[k, 0])

@task.define(dtype={"C": "A"})
def mx_logic(C, A, B):
    Cp = task.partition(C, by="blocks", tile=("BM", "BN"))
    Ap = task.partition(A, by="blocks", tile=("BM", None))
    Bp = task.partition(B, by="blocks", tile=(None, "BN"))
    for i, j in task.parallel_range(Cp.shape):
        task.launch(mx_block, Cp[i, j], Ap[i, 0], Bp[0, j])
''',
}
PARAMS = {"elementwise": ("Y", "X"), "silu": ("Y", "X"), "reduce": ("Y", "X"), "reduce_axis": ("Y", "X"), "gemm": ("C", "A", "B")}
LEAF_PARAMS = {"elementwise": ("out", "X"), "silu": ("out", "X"), "reduce": ("out", "X"), "reduce_axis": ("out", "X"), "gemm": ("C", "A", "B")}


@dataclass(frozen=True)
class Cell:
    target: str
    leaf: str
    kind: str
    dtype: str
    memory: str

    @property
    def name(self) -> str:
        return f"{self.target}/{self.leaf}/{self.kind}/{self.dtype}/{self.memory}"


def cells(target_name: str) -> list[Cell]:
    """Every (leaf, kind, dtype, memory) of a target: the memories are those of the block processor the leaf may
    take (each operand placed there where the leaf allows it, else in the leaf's first memory for it)."""
    target = load_target(target_name)
    block = _block_proc(target)
    out = []
    for leaf in target.leaves.values():
        memories = [m for m in block.memories if any(m in ms for ms in leaf.mems.values())]
        for kind in leaf.implements + (("silu",) if "elementwise" in leaf.implements else ()):  # a named primitive
            if kind not in LOGIC:
                continue
            for dtype in target.dtypes:
                for memory in memories:
                    out.append(Cell(target_name, leaf.name, kind, dtype, memory))
    return out


def _block_proc(target):
    return next(p for p in target.procs.values() if not p.grid)


def mapping_text(cell: Cell) -> str:
    target = load_target(cell.target)
    leaf = target.leaves[cell.leaf]
    host = next(p for p in target.procs.values() if p.grid)
    block = _block_proc(target)
    mems = {}
    for param, leaf_param in zip(PARAMS[cell.kind], LEAF_PARAMS[cell.kind]):
        allowed = leaf.mems.get(leaf_param) or leaf.mems.get("*") or block.memories
        mems[param] = cell.memory if cell.memory in allowed else allowed[0]
    tunables = {"gemm": {"BM": TILE, "BN": TILE, "BK": TILE}, "elementwise": {"BM": 8, "BN": TILE},
                "silu": {"BM": 8, "BN": TILE}}.get(cell.kind, {"BM": 8})
    threads = "    threads: 128\n" if target.has_threads else ""
    mem_text = ", ".join(f"{p}: {m}" for p, m in mems.items())
    return textwrap.dedent(f'''\
        target: {cell.target}
        entrypoint: mx_host
        task_mappings:
          mx_host:
            task_name: mx_logic
            proc: {host.name}
            mems: {{"*": GLOBAL}}
            tunables: {{{", ".join(f"{k}: {v}" for k, v in tunables.items())}}}
            calls: {{mx_block: mx_block_i}}
          mx_block_i:
            task_name: mx_block
            proc: {block.name}
        ''') + threads + f"    mems: {{{mem_text}}}\n    leaf_task_bindings: {{mx_leaf: {cell.leaf}}}\n"


def inputs(cell: Cell):
    import torch

    gen = torch.Generator().manual_seed(22)
    dtype = getattr(torch, cell.dtype)

    def make(*shape):
        if dtype == torch.bool:
            return torch.rand(*shape, generator=gen) > 0.5
        if not dtype.is_floating_point:
            return torch.randint(-50, 50, shape, generator=gen, dtype=dtype)
        return torch.randn(*shape, generator=gen).to(dtype)

    if cell.kind == "gemm":
        return make(M, K), make(K, N)
    return (make(M, N),)


def reference(cell: Cell, args):
    import torch

    if cell.kind == "gemm":
        a, b = args
        return (a.float() @ b.float()).to(a.dtype)
    (x,) = args
    if cell.kind == "elementwise":
        return x + x
    if cell.kind == "silu":  # torch has no integer SiLU: the float result, cast as torch casts
        return torch.nn.functional.silu(x.float()).to(x.dtype)
    return x.float().sum(1).to(x.dtype)


def close(cell: Cell, got, want) -> bool:
    import torch

    if got.dtype != want.dtype or got.shape != want.shape:
        return False
    if not want.dtype.is_floating_point:
        return bool(torch.equal(got, want))
    tol = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2}[cell.dtype] * (K if cell.kind == "gemm" else N) ** 0.5
    return bool(torch.allclose(got.float(), want.float(), atol=tol, rtol=tol))


def outcome(cell: Cell, folder: Path, runs: bool) -> str:
    """One cell: its kernel compiled, then run and checked (``runs``) or its device source emitted."""
    logic = folder / f"mx_{cell.kind}.py"
    if not logic.exists():
        logic.write_text("from septran import task\n" + LOGIC[cell.kind])
    try:
        kernel = septran.compile(logic_file=logic, mapping=mapping_text(cell))
        args = inputs(cell)
        if not runs:
            described = {p: (tuple(a.shape), cell.dtype) for p, a in zip(PARAMS[cell.kind][1:], args)}
            assert emit_records.emitted(kernel.specialize(**described), cell.target)
            return "emitted"
        got = kernel(*args)
        return "ran right" if close(cell, got, reference(cell, args)) else "WRONG"
    except BuildError as e:
        return f"BUILD FAILURE: {str(e).splitlines()[0][:120]}"
    except SepTranError as e:
        if e.loc is None or not e.loc.file:
            return f"UNLOCATED: {type(e).__name__}: {e.message[:120]}"
        where = "mapping" if str(e.loc.file).startswith("<") or str(e.loc.file).endswith(".yaml") else Path(e.loc.file).name
        return f"refused at {where}:{e.loc.line} ({type(e).__name__}: {e.message[:90]})"
    except InternalError as e:
        return f"INTERNAL: {str(e).splitlines()[0][:120]}"
    except Exception as e:  # noqa: BLE001 -- the matrix reports it
        return f"RAW: {type(e).__name__}: {str(e)[:100]} at {traceback.extract_tb(e.__traceback__)[-1].filename}"


def table(rows: list[tuple[Cell, str]]) -> str:
    """The matrix as text: one line per cell, then the counts per target."""
    lines = [f"{'target':9} {'leaf':26} {'kind':12} {'dtype':9} {'memory':9} outcome"]
    for cell, result in rows:
        lines.append(f"{cell.target:9} {cell.leaf:26} {cell.kind:12} {cell.dtype:9} {cell.memory:9} {result}")
    counts: dict = {}
    for cell, result in rows:
        key = result.split(" (")[0].split(":")[0] if not result.startswith("refused") else "refused"
        counts.setdefault(cell.target, {}).setdefault(key, 0)
        counts[cell.target][key] += 1
    lines.append("")
    for target, c in counts.items():
        lines.append(f"{target}: " + ", ".join(f"{v} {k}" for k, v in sorted(c.items())))
    return "\n".join(lines)


def first_bad(rows: list[tuple[Cell, str]]) -> Optional[str]:
    bad = [f"{c.name}: {r}" for c, r in rows if not r.startswith(GOOD)]
    return "\n".join(bad) if bad else None
