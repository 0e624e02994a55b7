"""A readable dump of a task graph (what SEPTRAN_DUMP_DIR writes as *.taskgraph.txt)."""
from __future__ import annotations

from septran.frontend.ir import FULL, Arg, Launch, Loop, Param, PrimCall, TaskGraph, Temp


def _arg(a: Arg) -> str:
    if isinstance(a, (Param, Temp)):
        return a.name
    idx = ", ".join(":" if i is FULL else str(i) for i in a.index)
    return f"{a.partition.sym.name}[{idx}]"


def _body(stmts, depth: int, out: list[str]) -> None:
    pad = "    " * depth
    for s in stmts:
        where = f"  # line {s.loc.line}"
        if isinstance(s, Loop):
            kind = "parallel_range" if s.parallel else "range"
            names = ", ".join(v.name for v in s.vars)
            exts = ", ".join(str(e) for e in s.extents)
            out.append(f"{pad}for {names} in {kind}({exts}):{where}")
            _body(s.body, depth + 1, out)
        elif isinstance(s, Launch):
            scalars = [a.name if hasattr(a, "name") else f"{a:g}" for a in s.scalars]
            out.append(f"{pad}launch {s.callee}({', '.join([_arg(a) for a in s.args] + scalars)}){where}")
        elif isinstance(s, PrimCall) and s.expr is not None:
            out.append(f"{pad}compute {s.signature.meaning}{where}")
        elif isinstance(s, PrimCall):
            out.append(f"{pad}primitive {s.name}({', '.join(_arg(a) for a in s.args)}){where}")


def format_graph(graph: TaskGraph) -> str:
    out = [f"task graph, entry {graph.entry}"]
    for name, task in graph.tasks.items():
        params = ", ".join(
            [f"{p.name}: {graph.privilege(name, p.name).value}, rank {graph.ranks.get((name, p.name), '?')}" for p in task.params]
            + [f"{s.name}={s.default:g}" for s in task.scalars]
        )
        out.append(f"\ntask {name}({params}){' leaf' if task.leaf else ''}  # {task.loc}")
        for part in task.partitions:
            tile = ", ".join("None" if t is None else str(t) for t in part.tile)
            by = ', by="windows"' if part.by == "windows" else ""
            out.append(f"    {part.sym.name} = partition({_arg(part.source)}{by}, tile=({tile}))  # line {part.loc.line}")
        for t in task.temps:
            dtype = f", dtype of {t.dtype_of}" if t.dtype_of else f", {t.dtype}" if t.dtype else ""
            out.append(f"    {t.name} = temp({', '.join(str(e) for e in t.shape)}{dtype})  # line {t.loc.line}")
        _body(task.body, 1, out)
    return "\n".join(out) + "\n"
