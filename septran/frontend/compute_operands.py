"""What a ``task.compute`` reads: its operands, their index letters and their privileges.

Operand 0 is the output, read (if at all) at its own indices. Every other
tile is read at any index sets. The rule for extents:

* a dimension read at one plain index name in every read, none of them under a
  guard on that index, ties its extent to that index (as einsum: ``X[i, j] *
  W[j]``: W as long as X is wide);
* a dimension read anywhere at an offset (``j + 1``), a constant (``0``), a
  gathered index (``T[i]``), at several names, or at a plain name inside a guard
  on it (``task.where(task.global_index(M, 1, j) < task.global_size(M, 1),
  M[i, j], 0.0)``) gets a letter of its own and ties nothing: the verification
  proves every read of it inside the tile, with the numbers, or refuses. So a
  valid-mode stencil (``X[i, j + 1] - X[i, j]`` into a Y one column narrower),
  half-width tables and a shorter mask are accepted where their reads are in
  bounds. Such a dimension still suggests an extent for an output the kernel
  allocates (``PrimitiveSig.defaults``): an unguarded plain read's, else the
  longest guarded one's.

Tensors named only by sizes and offsets (``X.shape[1] // 2``, ``global_size``)
are operands that are never read.
"""
from __future__ import annotations

from septran.errors import FrontendError
from septran.expr import Dim, GlobalExtent, GlobalStart, leaves
from septran.frontend import elementwise as el
from septran.frontend.guards import narrowed_loads
from septran.frontend.index_expr import Affine, Gather, name_of
from septran.frontend.ir import Privilege


def foreign(name: str, frame, loc) -> FrontendError:
    return FrontendError(f"task.compute: {name} is not a parameter of {frame.task.name} (a tensor of another task, "
                         "seen through Python's closure)", loc, hint=f"add {name} to {frame.task.name}'s parameters and launch it with it")


def collect(frame, value: el.Elem, names: tuple[str, ...], out_arg, loc):
    """(operands, dims, privileges, defaults) of a compute storing ``value`` into ``out_arg`` at ``names``."""
    operands = [out_arg]
    reads: dict[int, list[tuple]] = {}
    narrowed = narrowed_loads(value)
    guarded: dict[int, list[frozenset]] = {}  # operand -> per read, the names a guard narrows there
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
            guarded.setdefault(k, []).append(narrowed.get(id(node), frozenset()))
    for k, idxs in reads.items():
        if len({len(i) for i in idxs}) > 1:
            raise FrontendError(f"task.compute: {operands[k].name} is read with {' and '.join(str(len(i)) for i in idxs)} "
                                "indices; a tile has one rank", loc)
    letters = [_letters(operands[k], reads.get(k), guarded.get(k), names) if k else (names, ()) for k in range(len(operands))]
    dims = tuple(d for d, _ in letters)
    defaults = tuple((k, axis - len(dims[k]), n, rank) for k, (_, near) in enumerate(letters) for axis, n, rank in near)
    out_priv = Privilege.READ_WRITE if 0 in reads else Privilege.WRITE
    # A tile used only for where it sits (global_index / global_size) is not read: it is never staged.
    in_privs = tuple(Privilege.READ if k in reads else Privilege.NONE for k in range(1, len(operands)))
    return tuple(operands), dims, (out_priv,) + in_privs, defaults


def _letters(arg, reads, guarded, names):
    """(one letter per dimension, [(axis, index, rank)]): the index name where every read is plain at that one
    name and unguarded, else a letter tied to nothing, with the plain name it is read at, if one (rank 0:
    unguarded, 1: only guarded), as the extent an allocated output may take."""
    if reads is None:
        return None, ()
    if names in reads and all(all(isinstance(e, str) for e in i) for i in reads) and not any(guarded):
        return names, ()  # read at plain indices only, the output's own among them (X[i, j] + X[j, i]): its size
    out, near = [], []
    for axis in range(len(reads[0])):
        plain = {i[axis] for i in reads if isinstance(i[axis], str)}
        free = {i[axis] for i, g in zip(reads, guarded) if isinstance(i[axis], str) and i[axis] not in g}
        if len(plain) == 1 and free == plain and all(isinstance(i[axis], str) for i in reads):
            out.append(plain.pop())
            continue
        out.append(f"{arg.name}@{axis}")
        for rank, found in enumerate((free, plain)):
            if len(found) == 1:
                near.append((axis, next(iter(found)), rank))
                break
    return tuple(out), tuple(near)


def shifted(load: el.Load) -> bool:
    """A read at other than plain index names (an offset, a constant, a gather)."""
    return any(isinstance(i, (Affine, Gather)) for i in load.idx)
