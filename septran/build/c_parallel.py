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
"""
from __future__ import annotations

import logging
import re

from septran.lowering.tile_ir import ParallelGrid

log = logging.getLogger(__name__)

_DECL = re.compile(r"^\s+[A-Za-z_][\w:]*\s+([A-Za-z_]\w*)(\[\d+\])?;$")

_LITERAL = re.compile(r"^(\(int(32|64)_t\))?\d+$")  # a grid extent TileLang printed as a number


def definition(function: str) -> re.Pattern:
    """The line that opens ``function``'s definition in TileLang's C; group 1 is its parameter list."""
    return re.compile(rf"^int32_t {re.escape(function)}\((.*)\) \{{$", re.M)


def parallel_grid(source: str, function: str, par: ParallelGrid) -> str:
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
    indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
    clauses = f"collapse({len(par.syms)}) schedule({par.schedule})" + (f" private({', '.join(private)})" if private else "")
    if not all(_LITERAL.match(e) for e in extents):
        # A grid that grows with a dynamic size may be one program at this call (a decode step's one row): no team
        # then, whose idle thread would wait at the barrier (milliseconds on a loaded machine).
        clauses += f" if({' * '.join(f'({e})' for e in extents)} > 1)"
    lines.insert(at, f"{indent}#pragma omp parallel for {clauses}")
    return "\n".join(lines)


def _unchanged(source: str, function: str, why: str) -> str:
    log.warning("%s runs its grid on one thread: %s in the C TileLang printed", function, why)
    return source
