"""Pass: bits_dtypes. Tensors of a type TileLang cannot compute in, handed to the program as they are.

A mapping's ``keep_dtypes`` asks for a type the target would otherwise convert (cpu: bfloat16, which
TileLang's C cannot even name) to reach the program unconverted; the target holds it as the bits of another
type (``holds_as_bits: {bfloat16: uint16}``). Such a tensor may only be handed to functions that read those
bits as the type: a leaf whose ``operand_dtypes`` lists it, and a memory's vendor ops (their names carry the
type: ``septran_cpu_load_f32_bf16``). Anything TileLang itself would compute with (elementwise code, a
reduction's template, ``T.copy``, ``T.fill``) would take the bits for integers: refused here, at the mapping's
line, before any program is emitted.
"""
from __future__ import annotations

import dataclasses

from septran.errors import MappingError
from septran.frontend import elementwise as el
from septran.lowering import tile_ir as ir
from septran.lowering.constants import Context


def hold_as_bits(ctx: Context, program: ir.TileProgram) -> ir.TileProgram:
    bits = ctx.target.holds_as_bits
    held = {p.sym: p for p in program.params if p.dtype in bits}
    if not held:
        return program
    for kernel in (program.kernel, *program.after):
        for stmt in ir.statements(kernel.body):
            _check(ctx, stmt, held)
    params = tuple(dataclasses.replace(p, storage=bits[p.dtype]) if p.sym in held else p for p in program.params)
    return dataclasses.replace(program, params=params)


def _check(ctx: Context, stmt, held: dict) -> None:
    if isinstance(stmt, ir.VendorOp):
        return  # named for its operands' types ({dst.type}): a type the vendor lacks fails to link, never computes
    if isinstance(stmt, ir.LeafCall) and stmt.expr is None and stmt.store is None:
        impl = ctx.target.leaves[stmt.impl]
        for pname, region in stmt.args:
            if region.of in held and not _declared(impl, pname, held[region.of].dtype):
                _refuse(ctx, held[region.of], f"{impl.name} ({pname})", stmt.why)
        return
    if isinstance(stmt, ir.LeafCall) and stmt.expr is not None:  # elementwise: the tensors it loads and stores
        # (a tensor named for its size only, task.global_size(X, 1), is not read: its bits never reach the code)
        data = [n.of for n in el.nodes(stmt.expr) if isinstance(n, el.Elt)] + [stmt.store.of]
        touched = [s for s in data if s in held]
    else:
        touched = [s for s in ir.syms(stmt) if s in held]
    if touched:
        p = held[touched[0]]
        what = {ir.Copy: "a copy (TileLang's T.copy)", ir.Fill: "a fill"}.get(type(stmt), "elementwise code")
        _refuse(ctx, p, what, stmt.why)


def _declared(impl, pname: str, dtype: str) -> bool:
    """The leaf's functions are declared for ``dtype`` in ``pname`` (target.yaml operand_dtypes, listed)."""
    return any(dtype in combo.get(pname, ()) for combos in impl.operand_dtypes.values() for combo in combos)


def _refuse(ctx: Context, param: ir.TensorParam, what: str, why: ir.Why) -> None:
    kept = next(k for k in ctx.mapping.keep_dtypes if k.value == param.dtype)
    raise MappingError(
        f"{param.sym.name} stays {param.dtype} (keep_dtypes), which {ctx.target.name} holds as "
        f"{ctx.target.holds_as_bits[param.dtype]} bits, but {what} reads or writes it: {why.text}", kept.loc,
        hint=f"stage {param.sym.name} in a memory whose copies convert it (mems), bind a leaf declared for "
             f"{param.dtype}, or delete {param.dtype} from keep_dtypes (then the program computes in "
             f"{ctx.target.converts.get(param.dtype, 'another type')})")
