"""What a ``task.compute`` reads: its operands, their index letters and their privileges.

Operand 0 is the output, read (if at all) at its own indices. Every other
tile is read at any index sets: a dimension read at one plain index name in
every read ties its extent to that index (as einsum); a dimension read at an
offset (``j + 1``), a constant (``0``) or a gathered index (``T[i]``) keeps
the plain name of its other reads, or gets a letter of its own, tied to nothing: the verification proves those reads
inside the tile with the numbers. Tensors named only by sizes and offsets
(``X.shape[1] // 2``, ``global_size``) are operands that are never read.
"""
from __future__ import annotations

from septran.errors import FrontendError
from septran.expr import Dim, GlobalExtent, GlobalStart, leaves
from septran.frontend import elementwise as el
from septran.frontend.index_expr import Affine, Gather, name_of
from septran.frontend.ir import Privilege


def foreign(name: str, frame, loc) -> FrontendError:
    return FrontendError(f"task.compute: {name} is not a parameter of {frame.task.name} (a tensor of another task, "
                         "seen through Python's closure)", loc, hint=f"add {name} to {frame.task.name}'s parameters and launch it with it")


def collect(frame, value: el.Elem, names: tuple[str, ...], out_arg, loc):
    """(operands, dims, privileges) of a compute storing ``value`` into ``out_arg`` at ``names``."""
    operands = [out_arg]
    reads: dict[int, list[tuple]] = {}
    by_sym = {p.sym: p for p in frame.params}

    def sizes(expr) -> None:  # sizes and offsets name the tiles they are about
        for leaf in leaves(expr):
            if isinstance(leaf, (Dim, GlobalExtent, GlobalStart)):
                if leaf.param not in by_sym:
                    raise foreign(leaf.param.name, frame, loc)
                if by_sym[leaf.param] not in operands:
                    operands.append(by_sym[leaf.param])

    for node in el.nodes(value):
        if isinstance(node, el.IntExpr):
            sizes(node.expr)
            continue
        if isinstance(node, el.ScalarRef) and node.param not in frame.scalars:
            raise FrontendError(f"task.compute: {node.param.name} is a scalar of another task", loc,
                                hint=f"add {node.param.name}=<default> to {frame.task.name}'s parameters and pass it in the launch")
        arg = getattr(node, "arg", None)
        if arg is None:
            continue
        if arg not in frame.params:
            raise foreign(arg.name, frame, loc)
        if arg not in operands:
            operands.append(arg)
        k = operands.index(arg)
        used = [name_of(i) for i in node.idx] if isinstance(node, el.Load) else [node.idx] if isinstance(node, el.GlobalIndex) else []
        for n in used:
            if n is not None and n not in names:
                raise FrontendError(f"task.compute: index {n} is not a parameter of this compute's function", loc)
        if isinstance(node, el.Load):
            for i in node.idx:
                if isinstance(i, Affine):
                    sizes(i.offset)
            if k == 0 and node.idx != names:
                shown = el.describe(node, lambda a: a.name)
                raise FrontendError(f"task.compute: the output is read at {shown[shown.index('['):]}, "
                                    f"not at its own indices [{', '.join(names)}]", loc,
                                    hint="read the output only where the compute writes it; read another tile "
                                         "(a copy) at other indices")
            reads.setdefault(k, []).append(node.idx)
    for k, idxs in reads.items():
        if len({len(i) for i in idxs}) > 1:
            raise FrontendError(f"task.compute: {operands[k].name} is read with {' and '.join(str(len(i)) for i in idxs)} "
                                "indices; a tile has one rank", loc)
    dims = tuple(names if k == 0 else _letters(operands[k], reads.get(k), names) for k in range(len(operands)))
    out_priv = Privilege.READ_WRITE if 0 in reads else Privilege.WRITE
    # A tile used only for where it sits (global_index / global_size) is not read: it is never staged.
    in_privs = tuple(Privilege.READ if k in reads else Privilege.NONE for k in range(1, len(operands)))
    return tuple(operands), dims, (out_priv,) + in_privs


def _letters(arg, reads, names):
    """One letter per dimension: the one index name the plain reads use there (``X[i, j] - X[i, j + 1]``: j,
    X as wide as the output), else a letter tied to nothing."""
    if reads is None:
        return None
    if names in reads:  # read at the output's own indices (X[i, j] + X[j, i]): as large as the output
        return names
    out = []
    for axis in range(len(reads[0])):
        plain = {i[axis] for i in reads if isinstance(i[axis], str)}
        out.append(plain.pop() if len(plain) == 1 else f"{arg.name}@{axis}")
    return tuple(out)


def shifted(load: el.Load) -> bool:
    """A read at other than plain index names (an offset, a constant, a gather)."""
    return any(isinstance(i, (Affine, Gather)) for i in load.idx)
