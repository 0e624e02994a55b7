"""A segment at run time: one ctypes call into its launcher, or (until recorded, or where it cannot be) its nodes.

The first call records the segment (``record.Recorder``) while running it, writes the launcher's C, and loads it
(built once per source and CPU, see ``build``). Later calls fill the buffer addresses and the dynamic sizes into
two arrays and make one call; the outputs are views of the inputs or of buffers allocated here, with the sizes
and strides of this call's dynamic sizes (evaluated once per set of sizes and kept).
"""
from __future__ import annotations

import ctypes
import logging
import math
from collections import OrderedDict
from typing import Optional

import torch
import torch.fx as fx

from septran.errors import DeviceError
from septran.runtime.vendor import check_errors
from septran.model.launcher import build, source
from septran.model.launcher.cexpr import Unsupported, compiled
from septran.model.launcher.record import Defer, Recorder

log = logging.getLogger(__name__)
TRIES = 4  # calls that may defer the recording (a dynamic size of 1) before the segment stays with its steps
SIZES_KEPT = 64  # sets of dynamic sizes whose output layouts are kept


class Segment:
    """The graph's node for one segment: ``segment(*inputs) -> tuple of the values read after it``."""

    recorder = Recorder  # (``cuda_runner.CudaSegment``: its own recorder, source and build)

    def __init__(self, sub: fx.GraphModule, name: str, nsteps: int):
        self.sub = sub
        self.nsteps = nsteps
        self.__name__ = name
        self.__module__ = __name__
        self.fn = None
        self.why_not: Optional[str] = None  # why the segment runs its nodes (None: launched, or not yet recorded)
        self.tries = 0
        self.launches = 0  # Python-to-C crossings made (tests count them)
        self.source: Optional[str] = None

    def __repr__(self) -> str:
        return f"<septran segment {self.__name__} ({self.nsteps} steps)>"

    def __call__(self, *inputs):
        if self.fn is not None:
            return self._launch(inputs)
        if self.why_not is not None:
            return self.sub(*inputs)
        return self._record(inputs)

    # recording --------------------------------------------------------------------------------------------------
    def _record(self, inputs: tuple):
        self.tries += 1
        rec = self.recorder(self.sub.graph, inputs)
        result = rec.run()
        if rec.failed is None:
            try:
                self._prepare(rec)
            except Unsupported as err:
                rec.failed = f"{type(err).__name__}: {err}"
        if rec.failed is not None:
            deferred = rec.failed.startswith(Defer.__name__) and self.tries < TRIES
            if not deferred:
                self.why_not = rec.failed
                log.info("septran: segment %s runs its %d steps from Python: %s", self.__name__, self.nsteps,
                         rec.failed)
        return tuple(result)

    def _prepare(self, rec: Recorder) -> None:
        symbols = sorted(rec.sources, key=str)
        index = {s: i for i, s in enumerate(symbols)}
        n_in = len(rec.inputs)
        self._sources = [rec.sources[s] for s in symbols]
        self._tensor_inputs = [i for i, v in enumerate(rec.inputs) if isinstance(v, torch.Tensor)]
        self._n_in = n_in
        self._pinned = list(rec.pinned)
        # buffers Python allocates: scratch buffers an output lies in
        escaping = sorted({d.base[1] for d in rec.out_descs if isinstance(d.base, tuple) and d.base[0] == "tmp"})
        self._allocs = [(t, rec.program.scratch[t]) for t in escaping]
        slot = {}
        for j, i in enumerate(range(n_in)):
            slot[i] = j
        for j in range(len(self._pinned)):
            slot[("pin", j)] = n_in + j
        for j, (t, _) in enumerate(self._allocs):
            slot[("tmp", t)] = n_in + len(self._pinned) + j
        # the escaping scratch buffers become P slots: the source is re-emitted with them as inputs
        self._load(rec, slot, index)
        # P and S are made per call (a graph may run in two threads at once); the pinned tensors' addresses are
        # fixed (a step's own zero bias), written into each P
        self._P = ctypes.c_void_p * max(1, n_in + len(self._pinned) + len(self._allocs))
        self._pinned_ptrs = [(n_in + j, t.data_ptr()) for j, t in enumerate(self._pinned)]
        self._S = ctypes.c_int64 * max(1, len(symbols))
        self._checks = list(rec.checks)
        self._outs = [(slot[d.base], d) for d in rec.out_descs]
        self._symbols = symbols
        self._layouts: OrderedDict = OrderedDict()
        self._values = None
        self.fn = self.fn_c
        log.info("septran: segment %s: %d steps in one launcher (%d buffers, %d sizes)", self.__name__, self.nsteps,
                 len(self._P()), len(symbols))

    def _load(self, rec: Recorder, slot: dict, index: dict) -> None:
        """The launcher's source, its built function (``fn_c``) and the kernels' entry points (``_F``)."""
        self.source = source.emit(_with_slots(rec.program, slot), index)
        self._lib, self.fn_c = build.load(self.source)
        self._F = (ctypes.c_void_p * max(1, len(rec.kernels)))(*[f for f, _ in rec.kernels])
        self._kernels = [k for _, k in rec.kernels]  # kept alive: their libraries hold the functions in F

    # launching -------------------------------------------------------------------------------------------------
    def _layout(self, key: tuple):
        """For these sizes: per buffer Python allocates, (bytes, or the one output it holds as a whole: its sizes,
        strides and dtype, allocated as itself); per output, (slot, sizes, strides, offset, dtype)."""
        if self._values is None:  # every expression, compiled once to Python (a new cache length costs no sympy)
            exprs = [e for _, d in self._outs for e in (*d.sizes, *d.strides, d.offset)]
            exprs += [nbytes for _, nbytes in self._allocs]
            self._values = compiled(exprs, {s: i for i, s in enumerate(self._symbols)})
        it = iter(self._values(key))
        outs = []
        for slot, d in self._outs:
            sizes = tuple(next(it) for _ in d.sizes)
            strides = tuple(next(it) for _ in d.strides)
            outs.append((slot, sizes, strides, next(it), d.dtype))
        base = self._n_in + len(self._pinned)
        allocs = []
        for j, _ in enumerate(self._allocs):
            n = next(it)
            held = [o for o in outs if o[0] == base + j]
            whole = None
            if len(held) == 1 and held[0][3] == 0:
                _, sizes, strides, _, dtype = held[0]
                item = torch.empty((), dtype=dtype).element_size()
                if math.prod(sizes) * item == n and \
                        torch.empty_strided(sizes, strides, dtype=dtype, device="meta").is_contiguous():
                    whole = (sizes, strides, dtype)
            allocs.append((n, whole))
        outs = [(o, None) if any(a[1] is not None and i == o[0] - base for i, a in enumerate(allocs)) else (o, o[1:])
                for o in outs]
        found = self._layouts[key] = (allocs, outs)
        while len(self._layouts) > SIZES_KEPT:
            self._layouts.popitem(last=False)
        return found

    def _sized(self, inputs: tuple) -> tuple:
        """This call's dynamic sizes (``key``), and the buffers to allocate and the outputs' views for them."""
        key = tuple(inputs[i] if axis is None else inputs[i].shape[axis] for i, axis in self._sources)
        found = self._layouts.get(key)
        if found is None:
            found = self._layout(key)
        return key, *found

    def _launch(self, inputs: tuple):
        key, allocs, outs = self._sized(inputs)
        P, S = self._P(), self._S(*key)
        for j, ptr in self._pinned_ptrs:
            P[j] = ptr
        for i in self._tensor_inputs:
            P[i] = inputs[i].data_ptr()
        buffers = self._allocate(allocs)
        for slot, buf in buffers.items():
            P[slot] = buf.data_ptr()
        rc = self.fn(self._F, P, S)
        self.launches += 1
        if rc:
            raise DeviceError(f"segment {self.__name__}: its launcher returned {rc} (op {rc // 1000 - 1}, code "
                              f"{rc % 1000})" if rc > 0 else f"segment {self.__name__}: a scratch allocation failed")
        for target in self._checks:  # a vendor error of any of the segment's kernels (the channel keeps it)
            check_errors(target, f"a kernel of segment {self.__name__}")
        return self._results(inputs, buffers, outs)

    def _allocate(self, allocs: list, device=None) -> dict:
        """The buffers Python allocates for a call, by P slot: a whole output as itself, else raw bytes."""
        buffers = {}
        base = self._n_in + len(self._pinned)
        for j, (nbytes, whole) in enumerate(allocs):
            if whole is not None:
                buffers[base + j] = torch.empty_strided(whole[0], whole[1], dtype=whole[2], device=device)
            else:
                buffers[base + j] = torch.empty(nbytes, dtype=torch.uint8, device=device)
        return buffers

    def _results(self, inputs: tuple, buffers: dict, outs: list, clone: bool = False) -> tuple:
        """The values read after the segment: its buffers (``clone``: copies, where a later call overwrites them)
        or views of them, and views of its inputs."""
        results = []
        for (slot, *_), view in outs:
            if view is None:  # the buffer is the output
                results.append(buffers[slot].clone() if clone else buffers[slot])
                continue
            sizes, strides, offset, dtype = view
            if slot in buffers:
                t = buffers[slot].view(dtype).as_strided(sizes, strides, offset)
                results.append(t.clone() if clone else t)
            else:
                t = inputs[slot]
                results.append(t.as_strided(sizes, strides, t.storage_offset() + offset))
        return tuple(results)


def _with_slots(program: source.Program, slot: dict) -> source.Program:
    """``program`` with each base in ``slot`` read from P, and the scratch buffers renumbered (an op with a
    ``moved(ptr)``: the glue's, a GPU kernel call, moves itself)."""
    keep = [i for i in range(len(program.scratch)) if ("tmp", i) not in slot]
    renumber = {("tmp", i): ("tmp", j) for j, i in enumerate(keep)}

    def ptr(p: source.Ptr) -> source.Ptr:
        return source.Ptr(slot.get(p.base, renumber.get(p.base, p.base)) if not isinstance(p.base, int) else p.base,
                          p.offset)

    ops = []
    for op in program.ops:
        if isinstance(op, source.Call):
            ops.append(source.Call(op.fn, tuple(ptr(a) for a in op.args), op.sizes))
        elif isinstance(op, source.Zero):
            ops.append(source.Zero(ptr(op.dst), op.nbytes))
        elif hasattr(op, "moved"):  # the glue's operations (glue_source), a GPU launcher's kernel calls
            ops.append(op.moved(ptr))
        else:
            ops.append(source.Copy(ptr(op.dst), ptr(op.src), op.sizes, op.dst_strides, op.src_strides, op.item))
    return source.Program(ops, [program.scratch[i] for i in keep])
