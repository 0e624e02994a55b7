"""Pass: place. Memories that TileLang does not know (a DSA's scratchpad) get addresses and vendor calls.

Only a target whose ``target.yaml`` gives a memory ``placement: address`` or
``ops`` is touched, so this pass is the target's own. A memory TileLang
allocates may still move its data with the vendor's calls (``ops: {load,
store, fill_zero}``: a CPU's contiguous copies instead of TileLang's gathers).
In a placed memory each buffer gets a byte
offset (a constant of the program, aligned as the memory says) and, where the
vendor names tiles by handle, a descriptor made before anything else; its
copies become the memory's ``load`` / ``store`` calls, its clears ``fill_zero``;
a ``sync`` waits for transfers in before a leaf reads them and for transfers
out before the program moves on; descriptors are released at the end.
"""
from __future__ import annotations

import dataclasses

from septran.errors import LoweringError
from septran.expr import Const
from septran.lowering import tile_ir as ir
from septran.lowering.constants import Context
from septran.lowering.constants import Names
from septran.lowering.tile_ir import Why

def place(ctx: Context, program: ir.TileProgram, value) -> ir.TileProgram:
    """``value``: an integer expression's value (the program's constants are numbers)."""
    target = ctx.target
    if not any(m.placed or m.ops for m in target.memories.values()):
        return program
    names = Names(program.names)
    consts = list(program.consts)
    k = program.kernel
    buffers, prologue, released, next_address = [], [], [], {}
    for buf in k.buffers:
        mem = target.memories[buf.space]
        if not mem.placed:
            buffers.append(buf)
            continue
        size = ir.buffer_bytes(buf, value, stages=False)
        offset = -(-next_address.get(mem.name, 0) // mem.align_bytes) * mem.align_bytes
        next_address[mem.name] = offset + size
        handle = "declare" in mem.ops
        address = names.new(f"{buf.sym.name}_addr") if handle else buf.sym
        consts.append(ir.Const(address, offset, Why(f"byte offset of {buf.sym.name} in {mem.name}")))
        placed = dataclasses.replace(buf, alloc=None, address=address, handle=handle)
        buffers.append(placed)
        if handle:
            prologue.append(ir.VendorOp("declare", mem.ops["declare"], (("buf", _whole(buf, target)),),
                                        Why(f"describe {buf.sym.name} to the vendor library"), result=buf.sym))
        if "release" in mem.ops and mem.name not in released:
            released.append(mem.name)
    dtypes = {**{t.sym: t.dtype for t in program.params}, **{b.sym: b.dtype for b in k.buffers}}
    body, _ = _rewrite(list(k.body), {b.sym: b for b in k.buffers}, target, set(), dtypes)
    body = prologue + body
    for name in released:
        body.append(ir.VendorOp("release", target.memories[name].ops["release"], (), Why(f"release this program's {name} descriptors")))
    kernel = dataclasses.replace(k, buffers=tuple(buffers), body=tuple(body))
    return dataclasses.replace(program, consts=tuple(consts), kernel=kernel, names=frozenset(names.used))


def _rewrite(stmts: list, bufs, target, pending: set, dtypes) -> tuple[list, set]:
    """Copies and clears of placed memories as vendor calls, with the syncs their transfers need. ``dtypes``: each
    tensor's and buffer's element type (a memory's ops may exist for some types only: ``op_dtypes``)."""
    out, stored = [], []
    for s in stmts:
        if isinstance(s, ir.For):
            body, pending = _rewrite(list(s.body), bufs, target, pending, dtypes)
            out.append(dataclasses.replace(s, body=tuple(body)))
            continue
        if isinstance(s, ir.LeafCall):
            for name in sorted(pending):  # asynchronous transfers must be complete before the data is used
                mem = target.memories[name]
                if "sync" in mem.ops:
                    out.append(ir.VendorOp("sync", mem.ops["sync"], (), Why(f"wait for the transfers into {name} before they are read",
                                                                            logic=s.why.logic)))
            pending = set()
            out.append(s)
            continue
        mem_of = lambda r: target.memories[bufs[r.of].space] if r.of in bufs else None  # noqa: E731
        if isinstance(s, ir.Fill) and s.dst in bufs:
            mem = target.memories[bufs[s.dst].space]
            # other values, and buffers beyond rows x columns (the vendor's ops are 2-D): TileLang's T.fill
            if mem.placed or (s.value == 0 and "fill_zero" in mem.ops and _plane(bufs[s.dst].shape)
                              and _has_ops_for(mem, dtypes[s.dst])):
                out.append(ir.VendorOp("fill_zero", mem.ops["fill_zero"], (("dst", _whole(bufs[s.dst], target)),), s.why))
                continue
        if isinstance(s, ir.Copy):
            src, dst = mem_of(s.src), mem_of(s.dst)
            load, store = dst is not None and "load" in dst.ops, src is not None and "store" in src.ops
            if (load or store) and not any(mem.placed for mem in (src, dst) if mem is not None) and not (
                    _plane(s.src.extents) and _plane(s.dst.extents)):
                load = store = False  # rows x columns only: a copy of more dimensions stays TileLang's T.copy
            if (load or store) and not any(mem.placed for mem in (src, dst) if mem is not None) and not (
                    _has_ops_for(dst if load else src, dtypes[s.src.of], dtypes[s.dst.of])):
                load = store = False  # a type the vendor has no copy for (int64, bool): TileLang's T.copy
            if load or store:
                op, mem = ("load", dst) if load else ("store", src)
                template = mem.ops[_with_options(op, mem, dict(s.options), s.why)]
                if op == "load":
                    pending.add(mem.name)
                else:
                    stored.append(mem.name)
                out.append(ir.VendorOp(op, template, (("dst", s.dst), ("src", s.src)), s.why))
                continue
        out.append(s)
    for name in sorted(set(stored)):  # results must have left the device before the program ends or the tile is reused
        mem = target.memories[name]
        if "sync" in mem.ops:
            out.append(ir.VendorOp("sync", mem.ops["sync"], (), Why(f"wait for the transfers out of {name}")))
    return out, pending


def _with_options(op: str, mem, options: dict, why) -> str:
    """The memory's op (its key in ``ops``) a copy's options pick: ``eviction_policy`` names a variant of the op
    where the memory has one (``store_evict_first``: written past the caches), else the op itself; other options
    are TileLang's."""
    policy = options.pop("eviction_policy", None)
    if options:
        raise LoweringError(f"copy options {options} are TileLang's; {mem.name} moves data with vendor calls",
                            why.mapping)
    return f"{op}_{policy}" if policy is not None and f"{op}_{policy}" in mem.ops else op


def _has_ops_for(mem, *dtypes) -> bool:
    return not mem.op_dtypes or all(d in mem.op_dtypes for d in dtypes)


def _plane(extents) -> bool:
    """Rows x columns: every dimension before the last two has one element (the vendor's copies are 2-D)."""
    return all(e == Const(1) for e in tuple(extents)[:-2])


def _whole(buf: ir.Buffer, target) -> ir.Region:
    return ir.Region(buf.sym, tuple(Const(0) for _ in buf.shape), buf.shape, True, buf.shape,
                     buf.shape[-1] if len(buf.shape) > 1 else Const(1), buf.dtype, target.dtype_codes.get(buf.dtype))

