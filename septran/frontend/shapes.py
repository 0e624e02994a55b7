"""Which tensor dimensions the logic says are equal: how outputs get their shapes.

``kernel(a, b)`` must allocate C without being told its shape. Three rules
tie dimensions together, on the tree of launches from the entry task:

1. a primitive's signature (gemm: C[m, n], A[m, k], B[k, n]);
2. a launch that passes a whole dimension (a parameter, a ``None`` tile entry
   or a ``:`` index): the callee's dimension *is* the caller's;
3. two tiles indexed by the same loop variable with the same tile size cover
   the same iteration space, so the dimensions they split are equal
   (``Cp[i, j]`` and ``Ap[i, 0]`` with tile BM: C.shape[0] == A.shape[0]).
   Windows (``task.window``) never tie: a convolution's output has H - KH + 1
   rows, not its input's H; such an output's shape comes from the caller.

A compute's plain read ties as a primitive does (rule 1); a shifted or
guarded read ties nothing (``compute_operands``: verify proves it in bounds),
but suggests its extent to an output the kernel allocates whose dimension
nothing ties (``PrimitiveSig.defaults``): ``X[i, j + 1] - X[i, j]`` gives an
allocated Y X's width (and verify then refuses the read past the row), while a
Y passed one column narrower is the valid-mode stencil.

Dimensions tied this way form classes; a call binds the classes that hold an
input's dimension and reads the outputs' shapes off them.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Mapping, Optional

from septran.errors import CallError, SourceLoc
from septran.expr import Tunable, Var
from septran.frontend.ir import Arg, Launch, PrimCall, TaskGraph, Temp, TileRef, walk

Node = tuple  # (launch path: a number per launch, task name, param name, axis)


@dataclass(frozen=True)
class DimClass:
    """Entry dimensions that must be equal, with the logic line that says so."""

    members: tuple[tuple[str, int], ...]  # (entry param, axis), in parameter order
    reasons: tuple[SourceLoc, ...]


class ShapeRelations:
    def __init__(self, graph: TaskGraph):
        self.graph = graph
        self._parent: dict[Node, Node] = {}
        self._reason: dict[Node, SourceLoc] = {}
        self._edges: dict[Node, list[tuple[Node, SourceLoc, bool, str]]] = {}  # node -> (node, line, a tie?, hint)
        self._defaults: list[tuple[Node, Node, int]] = []  # (output's dimension, a dimension it may take, rank)
        self._launch_ids: dict[Launch, int] = {}  # equal launches, one number (as the statements compared)
        self._split: list[tuple[Node, str, SourceLoc]] = []  # (dimension, the tunable tile splitting it, partition line)
        self._walk(graph.entry, ())
        entry = graph.entry_task
        groups: dict[Node, list[tuple[str, int]]] = {}
        for p in entry.params:
            for axis in range(graph.ranks.get((entry.name, p.name), 0)):
                groups.setdefault(self._find(((), entry.name, p.name, axis)), []).append((p.name, axis))
        members = self._members()
        self.classes: tuple[DimClass, ...] = tuple(
            DimClass(tuple(m), tuple(sorted({self._reason[n] for n in members[root] if n in self._reason},
                                            key=lambda l: (l.file, l.line))))
            for root, m in groups.items()
        )
        self._root_class = {root: ci for ci, root in enumerate(groups)}
        # Pairs of classes a compute reads beside each other (its defaults): where a call gives them one size,
        # the program names it once, as it did when such reads tied (lowering/constants.py).
        beside = set()
        for a, b, _ in self._defaults:
            ca, cb = self._root_class.get(self._find(a)), self._root_class.get(self._find(b))
            if ca is not None and cb is not None and ca != cb:
                beside.add((min(ca, cb), max(ca, cb)))
        self.beside: tuple[tuple[int, int], ...] = tuple(sorted(beside))

    # union-find -----------------------------------------------------------
    def _find(self, n: Node) -> Node:
        self._parent.setdefault(n, n)
        while self._parent[n] != n:
            self._parent[n] = self._parent[self._parent[n]]
            n = self._parent[n]
        return n

    def _union(self, a: Optional[Node], b: Optional[Node], loc: SourceLoc, tie: bool = True, hint: str = "") -> None:
        """``tie``: the line says the two are equal (a primitive, tiles sharing a loop index); else it only
        hands a whole dimension on (a launch). ``hint``: what to change where the two must differ."""
        if a is None or b is None:
            return
        self._edges.setdefault(a, []).append((b, loc, tie, hint))
        self._edges.setdefault(b, []).append((a, loc, tie, hint))
        ra, rb = self._find(a), self._find(b)
        if ra != rb:
            self._parent[ra] = rb
            self._reason.setdefault(a, loc)
            self._reason.setdefault(b, loc)

    def _members(self) -> dict[Node, list[Node]]:
        """Each root's nodes, in one pass over the nodes (a pass per class cost a warm compile 10 ms)."""
        members: dict[Node, list[Node]] = {}
        for n in list(self._parent):
            members.setdefault(self._find(n), []).append(n)
        return members

    # the three rules -------------------------------------------------------
    def _dim(self, path, task: str, arg: Arg, axis: int) -> Optional[Node]:
        """The node of ``arg``'s extent along ``axis``, or None where it is a tile size."""
        while isinstance(arg, TileRef):
            if not arg.is_whole(axis):
                return None
            arg = arg.partition.source
        if isinstance(arg, Temp):
            return None  # a temp's extents are tile sizes, never a tensor's
        return (path, task, arg.name, axis)

    def _rank(self, task: str, arg: Arg) -> int:
        return arg.rank if isinstance(arg, (TileRef, Temp)) else self.graph.ranks[(task, arg.name)]

    def _walk(self, name: str, path: tuple) -> None:
        task = self.graph.tasks[name]
        co_indexed: dict[tuple, Node] = {}
        for stmt, _ in walk(task.body):
            if isinstance(stmt, PrimCall):
                sig = stmt.signature
                ranks = [self._rank(name, arg) for arg in stmt.args]
                for (a, da), (b, db) in sig.equal_dims:
                    self._union(self._dim(path, name, stmt.args[a], da % ranks[a]),
                                self._dim(path, name, stmt.args[b], db % ranks[b]), stmt.loc,
                                hint=_guard_hint(stmt, b, db, ranks[b]) if stmt.expr is not None else "")
                for k, axis, index, rank in sig.defaults:
                    out = sig.dims[0].index(index) - len(sig.dims[0])
                    a, b = self._dim(path, name, stmt.args[0], out % ranks[0]), self._dim(path, name, stmt.args[k], axis % ranks[k])
                    if a is not None and b is not None:
                        self._defaults.append((a, b, rank))
                batch = 0 if sig.per_operand_batch else ranks[0] - sig.ranks[0]
                for axis in range(batch):  # batch dimensions, between operands that have as many
                    for k, arg in enumerate(stmt.args[1:], 1):
                        if ranks[k] - sig.ranks[k] != batch:
                            continue
                        self._union(self._dim(path, name, stmt.args[0], axis), self._dim(path, name, arg, axis), stmt.loc)
            if isinstance(stmt, Launch):
                callee = self.graph.tasks[stmt.callee]
                # A launch enters the path as a small number: a node's hash must not walk the launch's argument
                # trees on every union-find step (a Llama block's seven kernels spent 0.3 s hashing them).
                inner = path + (self._launch_ids.setdefault(stmt, len(self._launch_ids)),)
                for k, arg in enumerate(stmt.args):
                    rank = self.graph.ranks.get((callee.name, callee.params[k].name), 0)
                    for axis in range(rank):
                        self._union((inner, callee.name, callee.params[k].name, axis),
                                    self._dim(path, name, arg, axis), stmt.loc, tie=False)
                self._walk(stmt.callee, inner)
            if isinstance(stmt, (Launch, PrimCall)):
                for arg in stmt.args:
                    self._co_index(path, name, arg, co_indexed, stmt.loc)

    def _co_index(self, path, name, arg: Arg, seen: dict, loc: SourceLoc) -> None:
        scalars = {s.sym for s in self.graph.tasks[name].scalars}  # task.as_index(pos): a position, not a loop
        while isinstance(arg, TileRef):
            part = arg.partition
            for axis, (idx, tile) in enumerate(zip(arg.index, part.tile)):
                if isinstance(tile, Tunable):
                    self._split.append((self._dim(path, name, part.source, axis), tile.name, part.loc))
                # A window's index is where it starts, not which tile: two windows at one start tie no extents.
                if isinstance(idx, Var) and tile is not None and part.by == "blocks" and idx.sym not in scalars:
                    node = self._dim(path, name, part.source, axis)
                    key = (idx, tile)
                    if key in seen:
                        self._union(seen[key][0], node, loc, hint=_tiles_hint(seen[key][1], part.source, axis, idx, tile))
                    elif node is not None:
                        seen[key] = (node, part.source)
            arg = part.source

    # binding a call --------------------------------------------------------
    def solve(self, shapes: Mapping[str, tuple[int, ...]], call_loc: Optional[SourceLoc] = None) -> dict[str, tuple[int, ...]]:
        """Every entry parameter's shape, from the shapes of those the caller passed.

        Raises ``CallError`` where two passed dimensions that the logic ties
        differ, or where an output dimension is tied to no input.
        """
        entry = self.graph.entry_task
        value: dict[int, tuple[int, str]] = {}
        for ci, cls in enumerate(self.classes):
            for pname, axis in cls.members:
                if pname in shapes:
                    size = shapes[pname][axis]
                    if ci in value and value[ci][0] != size:
                        where, why = self._why_equal(value[ci][2], (pname, axis))
                        raise CallError(
                            f"{value[ci][1]} is {value[ci][0]} but {pname}.shape[{axis}] is {size}; "
                            f"the logic needs them equal",
                            where or (cls.reasons[0] if cls.reasons else call_loc),
                            hint="check the shapes of the tensors you pass" + (f"; {why}" if why else ""),
                        )
                    value.setdefault(ci, (size, f"{pname}.shape[{axis}]", (pname, axis)))
        self._take_defaults(value)
        out: dict[str, tuple[int, ...]] = {}
        for p in entry.params:
            if p.name in shapes:
                out[p.name] = tuple(shapes[p.name])
                continue
            dims = []
            for axis in range(self.graph.ranks.get((entry.name, p.name), 0)):
                ci = next(i for i, c in enumerate(self.classes) if (p.name, axis) in c.members)
                if ci not in value:
                    self._refuse_a_typo(p.name, axis)
                    raise CallError(
                        f"cannot tell the shape of output {p.name}: its dimension {axis} is tied to no input",
                        entry.loc,
                        hint=f"pass it by name ({p.name}=...), and the kernel writes into it; or, in the logic, "
                             "index it with the same loop variable and tile as an input",
                    )
                dims.append(value[ci][0])
            out[p.name] = tuple(dims)
        return out

    def _take_defaults(self, value: dict) -> None:
        """An allocated output's dimension that nothing ties takes the extent a compute reads beside it at a plain
        index: an unguarded read's (``X[i, j + 1] - X[i, j]``: X's; two different ones: refused), else the longest
        guarded one (each guard pads a read that may be shorter: RoPE's half-width tables beside X)."""
        entry = self.graph.entry_task
        while True:
            offers: dict[int, dict[int, dict[int, tuple]]] = {}  # class -> rank -> value -> (size, name, member)
            for a, b, rank in self._defaults:
                ca, cb = self._root_class.get(self._find(a)), self._root_class.get(self._find(b))
                for want, have in ((ca, cb), (cb, ca)):
                    if want is not None and have is not None and want not in value and have in value:
                        offers.setdefault(want, {}).setdefault(rank, {}).setdefault(value[have][0], value[have])
            if not offers:
                return
            for ci, ranks in offers.items():
                found = ranks[min(ranks)]
                if min(ranks) == 1:  # guarded reads only: each may be the shorter one, padded by its guard
                    found = {max(found): found[max(found)]}
                if len(found) > 1:
                    pname, axis = self.classes[ci].members[0]
                    shown = " or ".join(f"{v[1]} ({v[0]})" for v in found.values())
                    raise CallError(
                        f"cannot tell the shape of output {pname}: its dimension {axis} is tied to no input, and the "
                        f"computes that read beside it suggest {shown}", entry.loc,
                        hint=f"pass it by name ({pname}=...), and the kernel writes into it")
                value[ci] = next(iter(found.values()))

    def _refuse_a_typo(self, output: str, axis: int) -> None:
        """An output dimension tied to no input, split by a tile name the logic uses nowhere else and close to one
        it does use ("Bn" for "BN"): the typo, at its partition's line, is the culprit to name."""
        root = self._find(((), self.graph.entry, output, axis))
        names = [t.name for task in self.graph.tasks.values() for part in task.partitions for t in part.tile
                 if isinstance(t, Tunable)]
        for node, tile, loc in self._split:
            if node is None or self._find(node) != root or names.count(tile) > 1:
                continue
            others = sorted({n for n in names if n != tile})
            close = [n for n in others if n.lower() == tile.lower()] or difflib.get_close_matches(tile, others, n=1)
            if close:
                raise CallError(
                    f"tile name {tile!r} appears in this partition only, so dimension {axis} of output {output} is "
                    f"tied to no input and its shape cannot be told; did you mean {close[0]!r}?",
                    loc,
                    hint=f"the other tile names of the logic: {', '.join(others)}",
                )

    def _why_equal(self, a: tuple[str, int], b: tuple[str, int]) -> tuple[Optional[SourceLoc], str]:
        """(the line that makes entry dimensions ``a`` and ``b`` equal, its hint): on the chain of unions between
        them, the first that ties (a primitive, a shared loop index) rather than hands a dimension on."""
        entry = self.graph.entry
        start, goal = ((), entry, a[0], a[1]), ((), entry, b[0], b[1])
        came: dict[Node, tuple[Node, SourceLoc, bool]] = {start: None}
        queue = [start]
        while queue:
            node = queue.pop(0)
            if node == goal:
                break
            for nxt, loc, tie, hint in self._edges.get(node, ()):
                if nxt not in came:
                    came[nxt] = (node, loc, tie, hint)
                    queue.append(nxt)
        if goal not in came:
            return None, ""
        path = []
        node = goal
        while came[node] is not None:
            prev, loc, tie, hint = came[node]
            path.append((loc, tie, hint))
            node = prev
        path.reverse()
        return next(((loc, hint) for loc, tie, hint in path if tie), (path[0][0], "") if path else (None, ""))

    def class_of(self, param: str, axis: int) -> int:
        return next(i for i, c in enumerate(self.classes) if (param, axis) in c.members)


def _guard_hint(stmt: PrimCall, k: int, axis: int, rank: int) -> str:
    """What to write where a compute's plain read ties operand ``k``'s dimension and it may be shorter."""
    letters = stmt.signature.dims[k]
    name, index = stmt.args[k].name, letters[axis]
    ax = axis % rank
    read = f"{name}[{', '.join(letters)}]"
    return (f"a plain index shared by two tiles ties their extents; where {name} may be shorter along {index}, read "
            f"it under a guard: task.where(task.global_index({name}, {ax}, {index}) < task.global_size({name}, {ax}), "
            f"{read}, 0.0) (a guarded or shifted read, such as {name}[..., {index} + 1], ties nothing: verify proves "
            "it in bounds)")


def _tiles_hint(first: Arg, other: Arg, axis: int, idx: Var, tile) -> str:
    """What to write where two tiles indexed by one loop variable may come from tensors of different extents."""
    while isinstance(first, TileRef):
        first = first.partition.source
    while isinstance(other, TileRef):
        other = other.partition.source
    a, b = first.name, other.name
    return (f"tiles of {a} and {b} indexed by the same loop variable {idx} with the same tile ({tile}) must come from "
            f"tensors as long; pad the shorter to the other's extent, or pass it whole along that dimension (None in "
            f"its partition) and read it in the leaf under a guard: task.where(task.global_index({b}, {axis}, j) < "
            f"task.global_size({b}, {axis}), {b}[...], 0.0)")
