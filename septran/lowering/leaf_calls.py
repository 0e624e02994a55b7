"""Leaf invocations -> the target's statements: each primitive a bound leaf calls, in order.

A primitive with a matrix or reduction unit becomes a ``LeafCall`` of the bound
implementation's template for its kind. Elementwise code, ``task.compute``'s
and the named elementwise primitives' (``add_bias``, ``relu``, ``gelu``,
``silu``) alike, becomes one element expression resolved here: scalars become
numbers, positions (``global_index``) and sizes the program's integers, float
arithmetic on constants is folded, every read names its buffer element, and
every conversion between types is an explicit ``Cast``. The emitter prints
the tree and decides nothing.
"""
from __future__ import annotations

import dataclasses

from septran.errors import LoweringError
from septran.expr import Dim, Expr, GlobalExtent, GlobalStart, Var, leaves, substitute
from septran.frontend import elementwise as el
from septran.frontend.ir import Param, PrimCall, Privilege, walk
from septran.lowering import compute_forms
from septran.lowering import elem_types
from septran.lowering import flat_ir as fl
from septran.lowering import index_reads
from septran.lowering import reduce_loop
from septran.lowering import tile_ir as ir
from septran.lowering.tile_ir import Why
from septran.mapping.schema import InstanceMapping


def accum_dtype(inst: InstanceMapping) -> str:
    """What an instance accumulates in: its accum_dtype, float32 by default."""
    return inst.accum_dtype.value if inst.accum_dtype is not None else "float32"


def lower_leaf(st, s: fl.Invoke, views: list) -> list:
    """The bound implementation's statements for each primitive the leaf calls, in order.

    ``st``: the staging pass (its constants, names, buffers' types, and ``region()``).
    """
    impl = st.target.leaves[s.binding.value]
    by_param = {p.name: views[k] for k, p in enumerate(s.callee.params)}
    scalars = dict(s.scalars)
    prims = [p for p, _ in walk(s.callee.body) if isinstance(p, PrimCall)]
    # A compute the implementation runs as a vendor call of its form (compute_forms.py; bind.py checked it is one)
    prims = [p if impl.runs(p.signature) else compute_forms.recognise(p) for p in prims]
    return [_primitive(st, prim, s, by_param, scalars, impl) for prim in prims]


def _primitive(st, prim: PrimCall, s: fl.Invoke, by_param, scalars, impl):
    sig = prim.signature
    args, declared = [], []  # declared: each operand, for the types the implementation is declared for
    for k, pname in enumerate(sig.params):
        arg = prim.args[k]
        if not isinstance(arg, Param):
            raise LoweringError(f"a bound leaf must call {prim.name!r} on its parameters, not on tiles of them", prim.loc)
        view = by_param[arg.name]
        caller_param = s.operands[s.callee.params.index(arg)].param
        if sig.ranks[k] is not None and _batch_of_one(st, view, sig.ranks[k]):
            # A tile with leading dimensions of one element (a batch of one, in place in global memory): the
            # primitive reads its last dimensions; the region keeps them all, so addresses stay right.
            drop = len(view.extents) - sig.ranks[k]
            checked = dataclasses.replace(view, offsets=view.offsets[drop:], extents=view.extents[drop:])
        else:
            checked = view
        if sig.ranks[k] is not None and len(checked.extents) != sig.ranks[k]:
            raise LoweringError(
                f"{impl.name} takes {pname} as a {sig.ranks[k]}-D tile, but {s.caller.name} hands it a "
                f"{len(view.extents)}-D one ({'x'.join(str(st.consts.value(e)) for e in view.extents)})",
                s.binding.loc,
                hint="stage it in on-chip memory (mems) with a tile of 1 on every dimension the primitive does not read",
            )
        declared.append((pname, checked, caller_param))
        if sig.ranks[k] is not None:
            _check_operand(st, impl, sig, k, pname, checked, s.caller, caller_param, s.binding)
            _check_dtype(st, impl, sig, k, pname, checked, s, caller_param)
        args.append((pname, st.region(view)))
    why = Why(f"{s.callee.name} -> {impl.name}: {sig.meaning}", mapping=s.binding.loc, logic=prim.loc)
    if prim.expr is not None or sig.element is not None:
        _check_declared_dtypes(st, impl, sig, declared, s)
        halos = {p.name: s.caller.halo[o.param] for p, o in zip(s.callee.params, s.operands) if o.param in s.caller.halo}
        return _elementwise(st, prim, args, by_param, scalars, impl, why, halos)
    for (pname, region), arg in zip(args, prim.args):  # matrix units and reductions: floating point only
        if st.dtypes[region.of] in elem_types.INTS + ("bool",):
            raise LoweringError(f"{prim.name} takes floating-point tiles, but {pname} ({arg.name}) is "
                                f"{st.dtypes[region.of]}", prim.loc,
                                hint="call the kernel on float tensors, or convert in a task.compute into a float temp "
                                     "(task.cast)")
    form = sig.name in compute_forms.FORMS
    # (a form's weights may have another type where the implementation declares which: a float32 weight beside 16-bit
    # rows; its table is checked below)
    weights = compute_forms.WEIGHTS if form and _declared_combos(impl, sig) else ()
    read = {st.dtypes[r.of]: pname for k, (pname, r) in enumerate(args)
            if sig.privileges[k] is Privilege.READ and pname not in sig.own_type + weights}
    if len(read) > 1:
        raise LoweringError(f"{prim.name} reads its operands in one element type, but "
                            + ", ".join(f"{p} is {d}" for d, p in read.items()), prim.loc,
                            hint="call the kernel on tensors of one dtype, or convert one in a task.compute into a temp "
                                 "(task.temp(..., dtype=X))")
    _check_declared_dtypes(st, impl, sig, declared, s)  # after the checks at the logic's line, which say more
    if sig.kind == "reduce_axis" and "{body}" in impl.template(sig):
        return reduce_loop.lower(st, prim, args, by_param, impl, why, _safe_index_names)
    if form or sig.kind in ("reduce", "reduce_squares"):  # (a form: the in-bounds part, as the loops it replaces)
        args = [(pname, _in_bounds(st, region)) for pname, region in args]
    if sig.kind in ("reduce", "reduce_squares"):
        _refuse_reducing_padding(st, impl, sig, prim, s, args, by_param)
    written = ()
    if form:  # its output is only written (unless it is read too: Y = Y * s * w)
        written = tuple(k for k, p in enumerate(sig.privileges)
                        if p is Privilege.WRITE and all(a is not prim.args[k] for j, a in enumerate(prim.args) if j != k))
    flags = tuple((f, bool(on)) for f, on in sig.flags.items())
    return ir.LeafCall(impl.name, impl.template(sig), tuple(args), why, flags, attrs=tuple(sig.attrs.items()),
                       written=written)


def _in_bounds(st, region):
    """A reduction reduces a tile's part inside its tensor: for a tile staged on chip from one that overhangs its
    tensor, the staged tile's in-bounds extents (past them the load wrote zeros, which a maximum, or a sum of
    squared deviations, would count: a softmax over 257 columns in 1024-wide LOCAL tiles summed to 0.01)."""
    valid = st.staged_valid.get(region.of)
    if valid is None or region.extents != tuple(st.shapes[region.of]):
        return region
    return dataclasses.replace(region, valid=valid)


def _refuse_reducing_padding(st, impl, sig, prim, s, args, by_param) -> None:
    """A row reduction over a staged tile that may overhang its tensor's rows, by an implementation that reduces whole tiles
    (TileLang's ``T.reduce_*``: the template names no valid extent): the zeros the load wrote past the tensor's end,
    or what elementwise code computed from them, would be reduced too (a softmax's sum of exps). Silently wrong;
    refused at the binding."""
    template = impl.template(sig)
    for k, (pname, region) in enumerate(args):
        # (rows past the tensor's end reduce into statistics of rows that are never stored: harmless)
        if not region.valid or region.valid[-1] == region.extents[-1] or "valid" in template:
            continue
        arg = prim.args[k].name
        view = by_param[arg]
        tile = "x".join(str(st.consts.known(e) or e) for e in view.extents)
        raise LoweringError(
            f"{impl.name} reduces {arg}'s whole {tile} tile, which may reach past the end of the tensor it is staged "
            f"from: the padding would be reduced as well", s.binding.loc,
            hint=f"bind {s.callee.name} to a leaf whose reduction takes the tile's extent inside the tensor, choose tiles "
                 f"that divide the tensor, or reduce a temp that the logic fills past the end with the reduction's "
                 f"identity (task.where(inside, x, -inf) for a maximum, 0 for a sum), as softmax_logic does")


def _batch_of_one(st, view, rank: int) -> bool:
    extra = len(view.extents) - rank
    return extra > 0 and all(st.consts.value(e) == 1 for e in view.extents[:extra])


def _check_operand(st, impl, sig, k, pname, view, inst, caller_param, binding) -> None:
    allowed = impl.accepts(pname)
    if allowed and view.space not in allowed:
        where = inst.mem(caller_param)
        raise LoweringError(
            f"{impl.name} takes {pname} in {' or '.join(allowed)}, but {inst.name} holds {caller_param} in {view.space}",
            where.loc if where else inst.loc,
            hint=f"set `mems: {{{caller_param}: {allowed[0]}}}` in {inst.name}",
        )
    _check_reduced_extent(st, impl, sig, k, pname, view, binding)
    for axis, letter in enumerate(sig.dims[k]):
        multiple = impl.tile_multiple.get(letter)
        if not multiple:
            continue
        extent = st.consts.value(view.extents[axis])  # (a dynamic extent cannot be shown a multiple: refused)
        if extent % multiple:
            const = next((c for c in st.consts.consts if Var(c.sym) == view.extents[axis] and c.why.mapping), None)
            raise LoweringError(
                f"{impl.name} needs dimension {axis} of {pname} ({letter!r} of {sig.name} {pname}[{', '.join(sig.dims[k])}]) "
                f"to be a multiple of {multiple}; the tile has {extent}",
                const.why.mapping if const else binding.loc,
                hint=f"the matrix unit of {st.target.name} takes tiles in multiples of "
                     + ", ".join(f"{l}={m}" for l, m in impl.tile_multiple.items()),
            )


def _tunable_line(st, extent, binding):
    """The mapping line that sets a tile extent (its tunable's), else the binding's."""
    const = next((c for c in st.consts.consts if Var(c.sym) == extent and c.why.mapping), None)
    return const.why.mapping if const else binding.loc


def _check_reduced_extent(st, impl, sig, k, pname, view, binding) -> None:
    """A reduction the implementation does only over a power-of-two extent (target.yaml: reduced_power_of_two)."""
    if sig.kind not in impl.reduced_power_of_two or k != 1:  # operand 1 (X) is the one reduced
        return
    for axis, letter in enumerate(sig.dims[k]):
        if letter in sig.dims[0]:
            continue
        extent = st.consts.known(view.extents[axis])
        if extent and extent & (extent - 1):
            lower = 1 << (extent.bit_length() - 1)
            raise LoweringError(
                f"{impl.name} reduces dimension {axis} of {pname} ({sig.name}) across threads, which {st.target.name} "
                f"does only over a power of two; the tile has {extent}",
                _tunable_line(st, view.extents[axis], binding),
                hint=f"make the tile's extent a power of two ({lower} or {lower * 2})",
            )


def _declared_combos(impl, sig) -> tuple:
    """The operand types the implementation declares for this primitive (target.yaml operand_dtypes), by its name
    or its kind; () where it declares none."""
    return impl.operand_dtypes.get(sig.name) or impl.operand_dtypes.get(sig.kind) or ()


def _check_declared_dtypes(st, impl, sig, operands: list, s: fl.Invoke) -> None:
    """Every operand, outputs and temps included, has a type the implementation's functions are declared for
    (target.yaml: operand_dtypes), all of them in one declared combination: a float16 temp handed to a function
    that writes floats into it would be overwritten past its end; a type the vendor has no function for would
    reach the linker; a float16 accumulator fed bfloat16 operands would reach nvcc's static assertion.
    ``operands``: (leaf parameter, its view, the caller's parameter)."""
    combos = _declared_combos(impl, sig)
    if not combos:
        return
    dtypes = {pname: st.dtypes[view.of] for pname, view, _ in operands}

    def misses(combo) -> list:
        return [p for p, _, _ in operands if combo.get(p) and dtypes[p] not in combo[p]]

    if any(not misses(c) for c in combos):
        return
    combo = min(combos, key=lambda c: len(misses(c)))
    pname = misses(combo)[0]
    caller_param = next(c for p, _, c in operands if p == pname)
    allowed = combo[pname]
    temp = next((t for t in s.caller_task.temps if t.sym.name == caller_param), None)
    what = (f"temp {caller_param} of {s.caller_task.name} (task.temp at {temp.loc})" if temp is not None
            else f"{caller_param} of {s.caller_task.name}")
    if len(combos) == 1:
        says = f"for {pname} of {' or '.join(allowed)} only"
    else:
        says = "for " + " or ".join("(" + "; ".join(f"{p} {'/'.join(d)}" for p, d in c.items()) + ")" for c in combos) + " only"
    given = ", ".join(f"{p} {dtypes[p]}" for p, _, _ in operands if p != pname)
    accumulates = s.caller.accum_dtype is not None and dtypes[pname] == accum_dtype(s.caller)
    raise LoweringError(
        f"{impl.name} implements {sig.name} {says}, but {what} is {dtypes[pname]}" + (f" (with {given})" if given else ""),
        s.binding.loc,
        hint=(f"give the temp dtype=\"{allowed[0]}\" (or drop dtype=)" if temp is not None
              else f"set `accum_dtype: {allowed[0]}` (or call the kernel on tensors of a type it takes)" if accumulates
              else f"call the kernel on {allowed[0]} tensors") + f", or bind {s.callee.name} to another leaf",
    )


def _check_dtype(st, impl, sig, k, pname, view, s: fl.Invoke, caller_param: str) -> None:
    """An operand the implementation reads from a memory where it takes only some element types."""
    allowed = impl.dtypes_in.get(view.space)
    dtype = st.dtypes[view.of]
    if allowed and sig.privileges[k] is Privilege.READ and dtype not in allowed:
        raise LoweringError(
            f"{impl.name} cannot read {pname} as {dtype} from {view.space} ({caller_param} of {s.caller_task.name}); "
            f"there it takes {' or '.join(allowed)}",
            s.binding.loc,
            hint=f"call the kernel on {allowed[0]} inputs, give the temp dtype= of a {allowed[0]} input, "
                 f"or hold {caller_param} in another memory",
        )


def _safe_index_names(st, names) -> dict[str, str]:
    """Loop index names that shadow nothing of the program (a loop variable ``j``, a buffer ``m``)."""
    out: dict[str, str] = {}
    for n in names:
        new, k = n, 2
        while new in st.names.used or new in out.values():
            new, k = f"{n}_{k}", k + 1
        out[n] = new
    return out


def _elementwise(st, prim: PrimCall, args, by_param, scalars, impl, why: Why, halos=None):
    """A fill, a copy, or the target's loop over the output storing the resolved expression."""
    sig = prim.signature
    regions = {prim.args[k].name: r for k, (_, r) in enumerate(args)}  # by the leaf's parameter names
    out_name = prim.args[0].name
    names_in = tuple(sig.dims[0])
    # A staged tile whose readers read its in-bounds part only: the loop runs over that part (clip_staged.py).
    inside = st.clip.get(regions[out_name].of.name) if regions[out_name].whole else None
    clipped = inside is not None and len(inside) == len(names_in) == len(by_param[out_name].extents)
    if clipped:
        regions[out_name] = dataclasses.replace(regions[out_name], valid=inside)
        args = [(args[0][0], regions[out_name])] + list(args[1:])
    rename = _safe_index_names(st, names_in)
    names = tuple(rename[n] for n in names_in)
    if prim.expr is not None:
        expr = prim.expr
    else:  # a named primitive: its element function of the operands' elements
        expr = sig.element(*(el.Load(prim.args[k], tuple(sig.dims[k])) for k in range(len(sig.params))))
    # task.recomputable(Y[i, j], value): Y's element where it holds what was stored unrounded, else value again.
    chosen: list[str] = []

    def exact(load: el.Load) -> bool:
        held = st.holds_exactly(by_param[load.arg.name].of)
        chosen.append(f"{load.arg.name} read (it holds the value as computed)" if held else
                      f"{load.arg.name}'s value computed again (what it holds here was rounded)")
        return held

    expr = el.choose_recomputed(expr, exact)
    if chosen:  # explain() says which
        why = dataclasses.replace(why, text=f"{why.text}; recomputable: {', '.join(chosen)}")

    def arg_of(sym):
        return next(a for a in prim.args if a.sym == sym)

    def integer(e: Expr) -> el.Size:
        env = {}
        for leaf in leaves(e):
            view = by_param[arg_of(leaf.param).name] if hasattr(leaf, "param") else None
            if isinstance(leaf, (GlobalStart, GlobalExtent)):
                if leaf.axis >= len(view.origin):
                    raise LoweringError(f"{leaf}: the tile has {len(view.origin)} dimensions", prim.loc)
                env[leaf] = view.origin[leaf.axis][0 if isinstance(leaf, GlobalStart) else 1]
            elif isinstance(leaf, Dim):
                env[leaf] = view.extents[leaf.axis]
            else:
                raise LoweringError(f"{leaf} cannot be used inside task.compute", prim.loc)
        out = substitute(e, env)
        return el.Size(out, st.consts.known(out))  # None: depends on a block index or a dynamic size

    def resolve(e: el.Elem) -> el.Elem:
        """Positions, sizes and scalars become what this program knows of them."""
        if isinstance(e, el.GlobalIndex):
            view = by_param[e.arg.name]
            if e.axis >= len(view.origin):
                raise LoweringError(f"global_index({e.arg.name}, {e.axis}): {e.arg.name} has {len(view.origin)} dimensions",
                                    prim.loc)
            return el.Position(view.origin[e.axis][0], e.idx)
        if isinstance(e, el.IntExpr):
            return integer(e.expr)
        if isinstance(e, el.ScalarRef):
            return el.Num(float(scalars[e.param.name]))
        return e

    value = el.rename_indices(el.fold(el.map_leaves(expr, resolve)), rename)
    out = regions[out_name]
    if out.whole and isinstance(value, el.Num):
        exact = st.dtypes[out.of] in elem_types.INTS and isinstance(value.value, int)
        return ir.Fill(out.of, value.value if exact else float(value.value), why)
    if (out.whole and isinstance(value, el.Load) and value.idx == names
            and regions[value.arg.name].whole and regions[value.arg.name].extents == out.extents):
        return ir.Copy(regions[value.arg.name], out, (), why)

    def element(name: str, idx: tuple) -> el.Elt:
        return index_reads.element(by_param[name], idx, integer, st.dtypes)[0]

    def overhangs(name: str) -> list[int]:
        """The dimensions along which a tile read in place from global memory may leave its tensor (and those along
        which a clipped output's loop stops short of its buffer)."""
        view, region = by_param[name], regions[name]
        if not st.target.memories[view.space].is_global and not (clipped and name == out_name):
            return []
        return [d for d, (v, e) in enumerate(zip(region.valid, region.extents)) if v != e]

    def kept_in_by_the_loop(e: el.Load, d: int) -> bool:
        """The loop over an overhanging output's in-bounds part keeps this read inside its tensor along ``d``: the
        read's index there is a loop index that runs along an output dimension with the same in-bounds extent (the
        same tile of a tensor as long, e.g. softmax's Y written from X). No guard then: a guarded load in the loop
        keeps g++ from vectorising it (a dynamic row length's kernel ran element by element). Every target's
        elementwise template loops over ``{out.shape}``, which is the in-bounds part of such an output."""
        read, out_region = regions[e.arg.name], regions[out_name]
        if len(e.idx) != len(read.offsets) or not isinstance(e.idx[d], str) or e.idx[d] not in names:
            return False
        dd = names.index(e.idx[d])
        return (dd in overhangs(out_name) and len(out_region.valid) == len(names) and len(read.valid) > d
                and read.valid[d] == out_region.valid[dd])

    def loads(e: el.Elem) -> el.Elem:
        if isinstance(e, el.Load):
            got, gathered = index_reads.element(by_param[e.arg.name], e.idx, integer, st.dtypes)
            dtype = st.dtypes[got.of]
            zero = elem_types.zero(dtype)
            value = index_reads.guarded(got, gathered, st.consts.known, zero)
            # Past the tensor's end an in-place tile reads 0, as a staged copy of it holds (the copy pads with
            # zeros): the same program whichever memory the mapping chooses, and no read out of bounds.
            shape = st.shapes[got.of]
            halo = (halos or {}).get(e.arg.name) if st.target.memories[by_param[e.arg.name].space].is_global else None
            ends = set(overhangs(e.arg.name)) | ({d for d, (b, a) in enumerate(halo.pairs) if a} if halo else set())
            for d in sorted(d for d in ends if isinstance(got.index[d], Expr) and not kept_in_by_the_loop(e, d)):
                # (gathers: guarded already)
                value = index_reads.bounded(value, got.index[d], shape[d], st.consts.known, zero)
            for d in (d for d, (b, a) in enumerate(halo.pairs) if b) if halo else ():
                # a halo read in place reaches before the tensor's start: 0 there, as a staged halo holds
                value = index_reads.bounded(value, got.index[d], shape[d], st.consts.known, zero, low=True, high=False)
            return value
        return e

    out_view = by_param[out_name]
    if overhangs(out_name) and len(out_view.extents) != len(names):
        raise LoweringError(f"{out_name} is written in place in {out_view.space} with {len(names)} indices, but its tile has "
                            f"{len(out_view.extents)} dimensions", prim.loc,
                            hint=f"stage {out_name} in on-chip memory (mems)")

    value = el.map_leaves(value, loads)
    store = element(out_name, names)

    def dtype_of(x) -> str:  # a buffer, or a parameter of the leaf (task.cast(x, X))
        return st.dtypes[by_param[x.name].of] if hasattr(x, "position") else st.dtypes[x]

    value = elem_types.typed(value, dtype_of, st.dtypes[store.of], prim.loc)
    return ir.LeafCall(impl.name, impl.template(sig), tuple(args), why, store=store, expr=value, loop=names)

