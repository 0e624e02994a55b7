"""The grid's programs on every core: an OpenMP loop over the grid loops of the C that TileLang prints.

TileLang's C target prints the grid as perfectly nested loops, the first grid
index outermost, with each program's buffers declared once before them::

    int32_t gemm_host_kernel(float* A, float* B, float* C) {
      float C_local[1024];
      for (int32_t bx = 0; bx < 16; ++bx) {
        for (int32_t by = 0; by < 16; ++by) {

The lowering proved which grid indices no two programs share an output element
for (``lowering/writes.py``); those loops get ``#pragma omp parallel for
collapse(n)``, and the buffers become private to each thread. C of any other
shape is left as it is (one thread: slower, never wrong), with a warning.

A call whose tensors hold few elements in all (a decode step's one-row norm or
softmax) runs on one thread: the grid's loops are printed twice, under the
pragma and without, behind an ``if`` on the call's sizes, so no thread team
starts (a team's start and its barrier cost more than such a kernel's work,
milliseconds when a core is busy). The count is every tensor argument's
elements, inputs included: a one-row GEMM reads a whole weight matrix and stays
parallel. Dynamic sizes are the C function's arguments, so the test reads them
at the call; a static kernel's test is decided here (no pragma at all).

A grid of one program gets no pragma, and a dynamic grid none at a call where it
is one program: its leaves run outside any parallel region, where the vendor's
one-row GEMM splits the weight over the threads itself (the decode point of
``mappings/cpu/gemm.yaml`` is one program as wide as the weight). Not the
pragma's own ``if(...)`` clause: a region whose clause is false is a team of one,
and a team the vendor starts inside it is a nested one (see ``parallel_grid``).
"""
from __future__ import annotations

import logging
import re

from typing import Optional

from septran.expr import Const, Var
from septran.lowering.tile_ir import ParallelGrid, TileProgram

log = logging.getLogger(__name__)

_DECL = re.compile(r"^\s+[A-Za-z_][\w:]*\s+([A-Za-z_]\w*)(\[\d+\])?;$")

_LITERAL = re.compile(r"^(\(int(32|64)_t\))?\d+$")  # a grid extent TileLang printed as a number

# Below this many elements in all its tensors a call runs on one thread (128 KiB of float32: a few microseconds of
# one core's work, about what starting two threads costs on an idle machine).
ONE_THREAD_ELEMENTS = 32768


def definition(function: str) -> re.Pattern:
    """The line that opens ``function``'s definition in TileLang's C; group 1 is its parameter list."""
    return re.compile(rf"^int32_t {re.escape(function)}\((.*)\) \{{$", re.M)


def tensor_elements(program: TileProgram) -> Optional[str]:
    """The number of elements in all of ``program``'s tensor arguments, as a C expression over its dynamic sizes
    (the C function's arguments of the same names); None where a dimension is neither a number nor such a size."""
    static = {c.sym: c.value for c in program.consts if c.value is not None}
    dynamic = {c.sym for c in program.consts if c.value is None}
    fixed, terms = 0, []
    for p in program.params:
        count, sizes = 1, []
        for e in p.shape:
            if isinstance(e, Const):
                count *= e.value
            elif isinstance(e, Var) and e.sym in static:
                count *= static[e.sym]
            elif isinstance(e, Var) and e.sym in dynamic:
                sizes.append(f"(int64_t){e.sym.name}")
            else:
                return None
        if sizes:
            terms.append(" * ".join([str(count)] * (count != 1) + sizes))
        else:
            fixed += count
    return " + ".join(terms + [str(fixed)] * (fixed > 0 or not terms))


def parallel_grid(source: str, function: str, par: ParallelGrid, elements: Optional[str] = None) -> str:
    """``source`` with ``function``'s grid loops under an OpenMP pragma (see the module's docstring); ``elements``:
    ``tensor_elements``' count, or None for no test of the call's size."""
    lines = source.split("\n")
    head = definition(function)
    start = next((k for k, line in enumerate(lines) if head.match(line)), None)
    if start is None:
        return _unchanged(source, function, "its definition was not found")
    at, private = start + 1, []
    while at < len(lines) and (m := _DECL.match(lines[at])):
        private.append(m.group(1))
        at += 1
    extents = []
    for k, sym in enumerate(par.syms):
        loop = rf"^\s*for \(int(32|64)_t {sym.name} = (\(int64_t\))?0; {sym.name} < ([^;]+); \+\+{sym.name}\) \{{$"
        m = re.match(loop, lines[at + k]) if at + k < len(lines) else None
        if m is None:
            return _unchanged(source, function, f"the loop over {sym.name} is not where the grid's loops are printed")
        extents.append(m.group(3))
    if all(_LITERAL.match(e) for e in extents) and _product(extents) == 1:
        return source  # one program: no team (a leaf it calls may split its own work over the threads)
    indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
    clauses = f"collapse({len(par.syms)}) schedule({par.schedule})" + (f" private({', '.join(private)})" if private else "")
    tests = []
    if elements is not None:  # a small call on one thread
        tests.append(f"{elements} >= {ONE_THREAD_ELEMENTS}" if not elements.isdigit() else
                     str(int(int(elements) >= ONE_THREAD_ELEMENTS)))
    if not all(_LITERAL.match(e) for e in extents):
        # A grid that grows with a dynamic size may be one program at this call (a decode step's one row): no team
        # then, whose idle thread would wait at the barrier (milliseconds on a loaded machine).
        tests.append(f"{' * '.join(f'({e})' for e in extents)} > 1")
    if "0" in tests:  # decided here already: one thread, no OpenMP region at all
        return source
    tests = [t for t in tests if t != "1"]
    pragma = f"{indent}#pragma omp parallel for {clauses}"
    if not tests:
        lines.insert(at, pragma)
        return "\n".join(lines)
    # Decided at the call: the grid's loops twice, under the pragma and without, rather than the pragma's if(...)
    # clause. A region whose if(...) is false is still a parallel region (a team of one), so a vendor leaf that
    # then splits its own work over the threads opened a nested team, whose threads were not the ones torch's
    # OpenMP calls keep: both sets spun on the same cores (a float16 GEMM with a residual, 64 rows, one program,
    # 2 threads: 1.06 ms in that form, 0.55 in this; 0.29 on one thread; AMD EPYC Zen 4).
    end = _loop_end(lines, at)
    if end is None:
        return _unchanged(source, function, "the grid's loops do not close where expected")
    loop = lines[at:end + 1]
    lines[at:end + 1] = [f"{indent}if ({' && '.join(tests)}) {{", pragma, *loop, f"{indent}}} else {{", *loop,
                         f"{indent}}}"]
    return "\n".join(lines)


def _loop_end(lines: list[str], at: int) -> Optional[int]:
    """The line that closes the loop opened on line ``at`` (TileLang's C has no braces in strings or comments)."""
    depth = 0
    for k in range(at, len(lines)):
        depth += lines[k].count("{") - lines[k].count("}")
        if depth == 0:
            return k
    return None


def _product(extents: list[str]) -> int:
    out = 1
    for e in extents:
        out *= int(e.rsplit(")", 1)[-1])
    return out


def _unchanged(source: str, function: str, why: str) -> str:
    log.warning("%s runs its grid on one thread: %s in the C TileLang printed", function, why)
    return source
