"""Part of the stage pass: an operand staged with a halo (the mapping's ``halo: {X: [0, 1]}``).

The buffer holds the tile widened by the halo on each side; it is filled by
an elementwise loop of the leaf's own implementation (the ``elementwise``
template), which reads the tensor where the widened box lies inside it and 0
past its ends, as an overhanging tile's copy holds. The leaf's view into the
buffer starts at ``before``, so its reads at ``j - 1`` and ``j + 1`` land in
the halo. The verify pass proved every read inside the widened box.
"""
from __future__ import annotations

from septran.errors import LoweringError
from septran.expr import Const, Var, leaves, simplify
from septran.frontend import elementwise as el
from septran.lowering import elem_types, index_reads
from septran.lowering import flat_ir as fl
from septran.lowering import tile_ir as ir
from septran.lowering.tile_ir import Why


def stage_halo(st, op: fl.Operand, s: fl.Invoke, scopes, halo, resident) -> fl.View:
    """The leaf's view of ``op``, in a new buffer holding its tile and the halo around it."""
    view = op.view
    impl = st.target.leaves[s.binding.value]
    template = impl.templates.get("elementwise")
    if template is None:
        raise LoweringError(f"{s.caller.name}.halo.{op.param}: {impl.name} has no elementwise loop to fill a halo with",
                            halo.loc, hint="bind the leaf to an implementation of elementwise code, or drop the halo")
    mem = st.target.memories[op.want.value]
    offsets = tuple(simplify(o - Const(b)) for o, (b, _) in zip(view.offsets, halo.pairs))
    shape = tuple(simplify(e + Const(b + a)) for e, (b, a) in zip(view.extents, halo.pairs))
    free = {l.sym for e in view.offsets for l in leaves(e) if isinstance(l, Var)}
    scope = next((sc for sc in reversed(scopes) if sc.var in free), scopes[0])
    sym = st.names.new(f"{op.param}_{mem.suffix}")
    dtype = st.dtypes[view.of]
    why = Why(f"{op.param} of {s.caller_task.name} lives in {op.want.value} ({s.caller.name}.mems) with a halo "
              f"({s.caller.name}.halo): one {st._size(shape, op.param, halo.loc)} tile", mapping=halo.loc, logic=s.launch.loc)
    buf = st._new_buffer(sym, shape, dtype, mem, why, halo.loc, stages=scope.stages, holds=view.of)
    res = resident(view.of, offsets, shape, buf, op.want.value, view.origin)
    res.source, res.scope = view, scope
    scope.residents.append(res)
    idx = [st.names.new(f"{op.param}_h{d}") for d in range(len(shape))]
    at = tuple(simplify(o + Var(i)) for o, i in zip(offsets, idx))
    full = st.shapes[view.of]
    value = el.Elt(view.of, at)
    for d, (b, a) in enumerate(halo.pairs):
        # Before the tensor's start (a halo) and past its end (a halo, or a tile that overhangs): 0.
        value = index_reads.bounded(value, at[d], full[d], st.consts.known, elem_types.zero(dtype), low=bool(b))
    store = el.Elt(sym, tuple(Var(i) for i in idx))
    value = elem_types.typed(value, lambda x: st.dtypes[x], dtype, None)
    region = st.region(fl.View(sym, tuple(Const(0) for _ in shape), shape, op.want.value, True, view.origin))
    fill = Why(f"copy {op.param} in with its halo, 0 past the tensor's ends", mapping=halo.loc, logic=s.launch.loc)
    scope.stmts.append(ir.LeafCall(impl.name, template, (("out", region),), fill, store=store, expr=value,
                                   loop=tuple(i.name for i in idx)))
    return st._within(view, res)


def refuse_held(op: fl.Operand, s: fl.Invoke, halo) -> None:
    raise LoweringError(
        f"{s.caller.name}.halo.{op.param}: {op.param} is already held in {op.want.value} by an outer task's buffer, so "
        "the leaf's instance cannot stage the halo around it", halo.loc,
        hint=f"keep {op.param} in global memory in the outer tasks' mems, so that the leaf's instance stages it")
