"""From an entry task function to a ``TaskGraph``: trace, then infer privileges and ranks."""
from __future__ import annotations

from types import MappingProxyType

from septran.errors import FrontendError, SourceLoc
from septran.frontend.ir import Launch, Param, PrimCall, Privilege, TaskDef, TaskGraph, Temp, TileRef, root_param, walk
from septran.frontend.tracer import TaskFunction, trace


def build_graph(entry: TaskFunction, absent=None) -> TaskGraph:
    """Traces every task reachable from ``entry`` and infers what the logic implies.

    ``absent``: the entry's optional tensors not passed (default: all of them)."""
    tasks: dict[str, TaskDef] = {}
    functions: dict[str, TaskFunction] = {}
    pending = [(entry, frozenset(entry.optional if absent is None else absent))]
    while pending:
        tf, without = pending.pop()
        if tf.name in tasks:
            if functions[tf.name] is not tf:
                raise FrontendError(f"two different tasks are named {tf.name}", tf.loc, hint=f"the other is at {functions[tf.name].loc}")
            if set(tasks[tf.name].absent) != without:
                raise FrontendError(f"task {tf.name} is launched with different optional tensors passed "
                                    f"(without {', '.join(sorted(without)) or 'none'} and without "
                                    f"{', '.join(tasks[tf.name].absent) or 'none'})", tf.loc,
                                    hint="pass the same optional tensors at every launch, or define two tasks")
            continue
        tdef, callees, callee_absent = trace(tf, without)
        tasks[tf.name] = tdef
        functions[tf.name] = tf
        pending.extend((c, callee_absent.get(name, frozenset())) for name, c in callees.items())
    return assemble(entry.name, tasks)


def assemble(entry: str, tasks: dict[str, TaskDef]) -> TaskGraph:
    """The graph of traced (or rewritten: ``implicit_host``) tasks, with privileges and ranks inferred."""
    privileges = _infer_privileges(entry, tasks)
    ranks, rank_locs = _infer_ranks(entry, tasks)
    ordered = {name: tasks[name] for name in _reachable_order(entry, tasks)}
    return TaskGraph(
        entry,
        MappingProxyType(ordered),
        MappingProxyType(privileges),
        MappingProxyType(ranks),
        MappingProxyType(rank_locs),
    )


def _reachable_order(entry: str, tasks: dict[str, TaskDef]) -> list[str]:
    """Tasks in the order a reader meets them: entry first, callees depth first."""
    seen: list[str] = []

    def visit(name: str) -> None:
        if name in seen:
            return
        seen.append(name)
        for stmt, _ in walk(tasks[name].body):
            if isinstance(stmt, Launch):
                visit(stmt.callee)

    visit(entry)
    return seen


def _infer_privileges(entry: str, tasks: dict[str, TaskDef]) -> dict[tuple[str, str], Privilege]:
    """A parameter's privilege composes, in program order, what the primitives it reaches do to it."""
    out: dict[tuple[str, str], Privilege] = {}
    done: set[str] = set()
    active: list[str] = []

    def visit(name: str, loc: SourceLoc) -> None:
        if name in done:
            return
        if name in active:
            raise FrontendError(f"task {name} launches itself (recursion is not supported)", loc)
        active.append(name)
        task = tasks[name]
        for stmt, _ in walk(task.body):
            if isinstance(stmt, PrimCall):
                sig = stmt.signature
                pairs = [(arg, sig.privileges[k]) for k, arg in enumerate(stmt.args)]
            elif isinstance(stmt, Launch):
                visit(stmt.callee, stmt.loc)
                callee = tasks[stmt.callee]
                pairs = [(arg, out.get((callee.name, callee.params[k].name), Privilege.NONE)) for k, arg in enumerate(stmt.args)]
            else:
                continue
            for arg, priv in pairs:
                key = (name, root_param(arg).name)
                out[key] = out.get(key, Privilege.NONE).then(priv)
        active.pop()
        done.add(name)

    visit(entry, tasks[entry].loc)
    return out


def _infer_ranks(entry: str, tasks: dict[str, TaskDef]):
    """Each parameter's rank, from its partitions and the primitives and launches it reaches.

    Ranks flow both ways along launches until nothing changes; a conflict is
    reported at the partition or call that disagrees with what reaches it.
    """
    ranks: dict[tuple[str, str], int] = {}
    locs: dict[tuple[str, str], SourceLoc] = {}

    def arg_rank(task: str, arg) -> tuple[int | None, tuple[str, str] | None]:
        if isinstance(arg, (TileRef, Temp)):
            return arg.rank, None
        key = (task, arg.name)
        return ranks.get(key), key

    def settle(key: tuple[str, str], rank: int, loc: SourceLoc, why: str) -> bool:
        known = ranks.get(key)
        if known is None:
            ranks[key] = rank
            locs[key] = loc
            return True
        if known != rank:
            raise FrontendError(
                f"{why} has rank {rank}, but {key[1]} of task {key[0]} has rank {known} (from {locs[key]})",
                loc,
                hint="a partition's tile needs one entry per dimension of the tensor it splits",
            )
        return False

    for name, task in tasks.items():
        for part in task.partitions:
            if isinstance(part.source, Param):
                settle((name, part.source.name), part.rank, part.loc, f"the tile of {part.sym.name}")

    def propagate() -> None:
        changed = True
        while changed:
            changed = False
            for name, task in tasks.items():
                for stmt, _ in walk(task.body):
                    if not isinstance(stmt, Launch):
                        continue
                    callee = tasks[stmt.callee]
                    for k, arg in enumerate(stmt.args):
                        inner = (callee.name, callee.params[k].name)
                        rank, outer = arg_rank(name, arg)
                        if rank is not None:
                            # A conflict is the callee's fault when it partitions what it was given.
                            where = locs.get(inner, stmt.loc)
                            changed |= settle(inner, rank, where if inner in ranks else stmt.loc,
                                              f"the tensor passed as {inner[1]} at {stmt.loc}")
                        elif inner in ranks and outer is not None:
                            changed |= settle(outer, ranks[inner], stmt.loc, f"parameter {inner[1]} of {callee.name}")

    # Ranks come from partitions and flow along launches; a primitive's operand
    # whose rank nothing else fixes gets the primitive's own (no batch).
    propagate()
    prim_calls = [(name, stmt) for name, task in tasks.items() for stmt, _ in walk(task.body) if isinstance(stmt, PrimCall)]
    for name, stmt in prim_calls:
        sig = stmt.signature
        for k, arg in enumerate(stmt.args):
            rank, key = arg_rank(name, arg)
            if rank is None and sig.ranks[k] is not None:
                settle(key, sig.ranks[k], stmt.loc, f"argument {sig.params[k]} of {stmt.name!r}")
    propagate()
    for name, stmt in prim_calls:
        sig = stmt.signature
        extra = {arg_rank(name, arg)[0] - sig.ranks[k] for k, arg in enumerate(stmt.args)
                 if sig.ranks[k] is not None and arg_rank(name, arg)[0] is not None}
        if not extra:
            continue
        # Leading batch dimensions may differ between operands (a 2-D temp beside a tile of a
        # 4-D tensor): the lowering drops those of extent one and refuses the others.
        bad = min(extra) < 0 or (not sig.batched and extra != {0})
        if bad:
            got = ", ".join(f"{sig.params[k]}: {arg_rank(name, a)[0]}" for k, a in enumerate(stmt.args))
            want = ", ".join(f"{p}: {r}" for p, r in zip(sig.params, sig.ranks) if r is not None)
            raise FrontendError(
                f"primitive {stmt.name!r} takes operands of rank {want}"
                + (" (plus leading batch dimensions)" if sig.batched else "")
                + f"; got {got}",
                stmt.loc,
            )
    return ranks, locs
