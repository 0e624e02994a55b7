"""Leaf launches -> the target's statements: each primitive a bound leaf calls, in order.

A named primitive becomes a ``LeafCall`` of the bound implementation's template
for its kind; a ``task.compute`` becomes a fill, a copy, or a ``LeafCall`` whose
element expression is resolved here: scalars become numbers, positions
(``global_index``) and sizes become the program's integer expressions, and
float arithmetic on constants is folded (``1 / sqrt(head_dim)`` is one number).
A mixin of the lowerer (``septran/lowering/lower.py``), which owns the state.
"""
from __future__ import annotations

from septran.errors import LoweringError
from septran.expr import Dim, Expr, GlobalExtent, GlobalStart, Var, leaves, substitute
from septran.frontend import elementwise as el
from septran.frontend.ir import Launch, Param, PrimCall, TaskDef, root_param, walk
from septran.lowering import tile_ir as ir
from septran.lowering.tile_ir import Why
from septran.mapping.schema import InstanceMapping


class LeafCalls:
    def _leaf(self, launch: Launch, leaf: TaskDef, regions: list, inst: InstanceMapping, scalars) -> list:
        """The bound implementation's statements for each primitive the leaf calls, in order."""
        binding = inst.leaf_task_bindings[leaf.name]
        impl = self.target.leaves[binding.value]
        by_param = {p.name: regions[k] for k, p in enumerate(leaf.params)}
        by_param.update(scalars)
        out = []
        for prim in (s for s, _ in walk(leaf.body) if isinstance(s, PrimCall)):
            out.append(self._primitive(prim, launch, leaf, by_param, inst, binding, impl))
        return out

    def _primitive(self, prim: PrimCall, launch: Launch, leaf: TaskDef, by_param, inst, binding, impl):
        sig = prim.signature
        args = []
        for k, pname in enumerate(sig.params):
            arg = prim.args[k]
            if not isinstance(arg, Param):
                raise LoweringError(f"a bound leaf must call {prim.name!r} on its parameters, not on tiles of them", prim.loc)
            view = by_param[arg.name]
            caller_param = root_param(launch.args[leaf.params.index(arg)]).name
            if sig.ranks[k] is not None and len(view.extents) != sig.ranks[k]:
                raise LoweringError(
                    f"{impl.name} takes {pname} as a {sig.ranks[k]}-D tile, but {inst.name} hands it a "
                    f"{len(view.extents)}-D one ({'x'.join(str(self._value(e)) for e in view.extents)})",
                    binding.loc,
                    hint="stage it in on-chip memory (mems) with a tile of 1 on every dimension the primitive does not read",
                )
            if sig.ranks[k] is not None:
                self._check_operand(impl, sig, k, pname, view, inst, caller_param, binding)
            args.append((pname, self._ir_region(view)))
        why = Why(f"{leaf.name} -> {impl.name}: {sig.meaning}", mapping=binding.loc, logic=prim.loc)
        if prim.expr is not None:
            return self._compute(prim, args, by_param, impl, why)
        flags = tuple((f, on) for f, on in sig.flags.items() if on)
        return ir.LeafCall(impl.name, impl.template(sig), tuple(args), why, flags, sig.scalar,
                           self._loop_indices(sig), attrs=tuple(sig.attrs.items()))

    def _safe_index_names(self, names) -> dict[str, str]:
        """Loop index names that shadow nothing of the program (a loop variable ``j``, a buffer ``m``)."""
        out: dict[str, str] = {}
        for n in names:
            new, k = n, 2
            while new in self.used_names or new in out.values():
                new, k = f"{n}_{k}", k + 1
            out[n] = new
        return out

    def _loop_indices(self, sig) -> tuple:
        """Each operand's index names for an elementwise template's ``{body}``, renamed where they would shadow."""
        letters = sorted({c for d in sig.dims if d for c in d})
        rename = self._safe_index_names(letters)
        return tuple((p, tuple(rename[c] for c in (d or ()))) for p, d in zip(sig.params, sig.dims))

    def _check_operand(self, impl, sig, k, pname, view, inst, caller_param, binding) -> None:
        allowed = impl.accepts(pname)
        if allowed and view.space not in allowed:
            where = inst.mems.get(caller_param)
            raise LoweringError(
                f"{impl.name} takes {pname} in {' or '.join(allowed)}, but {inst.name} holds {caller_param} in {view.space}",
                where.loc if where else inst.loc,
                hint=f"set `mems: {{{caller_param}: {allowed[0]}}}` in {inst.name}",
            )
        for axis, letter in enumerate(sig.dims[k]):
            multiple = impl.tile_multiple.get(letter)
            extent = self._value(view.extents[axis])
            if multiple and extent % multiple:
                tun = next((n for n, (s, _) in self.tunable_syms.items() if view.extents[axis] == Var(s)), None)
                loc = self.tunable_syms[tun][1].tunables[tun].loc if tun else binding.loc
                raise LoweringError(
                    f"{impl.name} needs dimension {axis} of {pname} ({letter!r} of {sig.name} {pname}[{', '.join(sig.dims[k])}]) "
                    f"to be a multiple of {multiple}; the tile has {extent}",
                    loc,
                    hint=f"the matrix unit of {self.target.name} takes tiles in multiples of "
                         + ", ".join(f"{l}={m}" for l, m in impl.tile_multiple.items()),
                )

    def _compute(self, prim: PrimCall, args, by_param, impl, why: Why):
        """task.compute: a fill, a copy, or the target's loop over the output with the folded expression."""
        regions = dict(args)
        rename = self._safe_index_names(prim.signature.dims[0])
        names = tuple(rename[n] for n in prim.signature.dims[0])

        def view_of(arg, axis: int, what: str) -> object:
            view = by_param[arg.name]
            if axis >= len(view.origin):
                raise LoweringError(f"{what}({arg.name}, {axis}): {arg.name} has {len(view.origin)} dimensions", prim.loc)
            return view

        def integer(e: Expr) -> el.Size:
            env = {}
            for leaf in leaves(e):
                if isinstance(leaf, (GlobalStart, GlobalExtent)):
                    view = by_param[next(a.name for a in prim.args if a.sym == leaf.param)]
                    if leaf.axis >= len(view.origin):
                        raise LoweringError(f"{leaf}: the tile has {len(view.origin)} dimensions", prim.loc)
                    env[leaf] = view.origin[leaf.axis][0 if isinstance(leaf, GlobalStart) else 1]
                elif isinstance(leaf, Dim):
                    env[leaf] = by_param[next(a.name for a in prim.args if a.sym == leaf.param)].extents[leaf.axis]
                else:
                    raise LoweringError(f"{leaf} cannot be used inside task.compute", prim.loc)
            out = substitute(e, env)
            try:
                return el.Size(out, self._value(out))
            except KeyError:
                return el.Size(out, None)  # depends on where the program is (a block index)

        def resolve(e: el.Elem) -> el.Elem:
            """Positions, sizes and scalars become what this program knows of them."""
            if isinstance(e, el.GlobalIndex):
                return el.Position(view_of(e.arg, e.axis, "global_index").origin[e.axis][0], e.idx)
            if isinstance(e, el.IntExpr):
                return integer(e.expr)
            if isinstance(e, el.ScalarRef):
                return el.Num(by_param[e.param.name])
            return e

        value = el.rename_indices(el.fold(el.map_leaves(prim.expr, resolve)), rename)
        out_name = prim.signature.params[0]
        out = regions[out_name]
        if out.whole and isinstance(value, el.Num):
            return ir.Fill(out.of, value.value, why)
        if (out.whole and isinstance(value, el.Load) and value.idx == names
                and regions[value.arg.name].whole and regions[value.arg.name].extents == out.extents):
            return ir.Copy(regions[value.arg.name], out, (), why)
        return ir.LeafCall(impl.name, impl.template(prim.signature), tuple(args), why,
                           indices=tuple((p, tuple(rename[n] for n in (d or ()))) for p, d in
                                         zip(prim.signature.params, prim.signature.dims)),
                           expr=value, loop=names)

