"""Recording a segment: its nodes run once in Python, and every pointer, size and copy is written down symbolically.

Each value of the segment gets a ``Desc``: the buffer it lies in (an input of the segment, or a scratch buffer the
launcher allocates), its offset, sizes and strides as expressions over the graph's dynamic sizes. Inputs and steps'
results take theirs from the graph's metadata (``node.meta["val"]``, symbolic), views from their operation
(``views``); a step's kernel call is caught below its plan
(``steps.recording``) with the tensors it passed, and each is tied to a value of the graph by its address: the
same memory read in place (a view or a reshape of it), a contiguous copy of it (``contiguous()`` on a strided KV
cache), or a fresh output of the kernel (then the step's result, which the metadata describes, says its shape).
Every description is checked against the real tensors of this run (addresses, sizes, strides); anything the
launcher cannot express or that does not check raises ``Unsupported`` and the segment keeps running its steps.
The nodes run exactly once either way (a KV-cache write is never done twice).
"""
from __future__ import annotations

import ctypes
import math
import operator
from typing import Optional

import sympy
import torch
import torch.fx as fx

from septran.model import steps
from septran.model.launcher.cexpr import Unsupported, expr, value
from septran.model.launcher.conversions import Conversions
from septran.model.launcher.glue import Glue
from septran.model.launcher.source import Call, Copy, Program, Ptr, Zero
from septran.model.launcher.split_calls import SplitCalls
from septran.model.launcher.views import Defer, Desc, Views, same, contiguous_strides

aten = torch.ops.aten


class Recorder(Conversions, Glue, SplitCalls, Views):
    """One recording run of a segment's subgraph (``sub``: placeholders, nodes, one output tuple)."""

    def __init__(self, sub: fx.Graph, inputs: tuple):
        self.sub, self.inputs = sub, inputs
        self.sub_values: dict = {}  # symbol -> this run's value
        self.sources: dict = {}  # symbol -> (input index, axis or None)
        self.descs: dict = {}  # node -> Desc
        self.ptrs: dict = {}  # base -> this run's address
        self.program = Program()
        self.kernels: list = []  # (kernel function address, CKernel) per distinct kernel
        self.checks: list = []  # targets whose vendor library is asked for errors after a launch
        self.pinned: list = []  # tensors a step keeps (a zero bias): their addresses go in P after the inputs
        self.failed: Optional[str] = None
        self.int_inputs: dict = {}  # integer inputs (placeholders) -> their expression

    # the run -------------------------------------------------------------------------------------------------
    def run(self):
        """The segment's results (always), after recording; ``self.failed`` says why not, where it could not."""
        env: dict = {}
        placeholders = [n for n in self.sub.nodes if n.op == "placeholder"]
        for i, (p, v) in enumerate(zip(placeholders, self.inputs)):
            env[p] = v
            if self.failed is None:
                self._guard(lambda: self._input(i, p, v))
        result = None
        for n in self.sub.nodes:
            if n.op == "placeholder":
                continue
            args = fx.node.map_arg(n.args, lambda a: env[a])
            kwargs = fx.node.map_arg(n.kwargs, lambda a: env[a])
            if n.op == "output":
                result = args[0]
                if self.failed is None:
                    self._guard(lambda: self._outputs(n.args[0], result))
                break
            if self.failed is not None:
                env[n] = n.target(*args, **kwargs)
            elif isinstance(n.target, steps.Step):
                env[n] = self._step(n, args, kwargs, env)
            else:
                env[n] = n.target(*args, **kwargs)
                self._guard(lambda: self._glue(n, env))
        return result

    def _guard(self, fn) -> None:
        try:
            fn()
        except Unsupported as err:
            self.failed = f"{type(err).__name__}: {err}"
        except (TypeError, ValueError, AttributeError, IndexError, KeyError, RuntimeError, ZeroDivisionError) as err:
            self.failed = f"{type(err).__name__}: {err}"

    # values ---------------------------------------------------------------------------------------------------
    def _input(self, i: int, p: fx.Node, v) -> None:
        meta = p.meta.get("val")
        if isinstance(v, int) and not isinstance(v, bool):
            if isinstance(meta, torch.SymInt) and isinstance(meta.node.expr, sympy.Symbol):
                sym = meta.node.expr
            else:  # (s + 1): a size variable of its own
                sym = sympy.Symbol(f"septran_in{i}", integer=True)
            self._source(sym, v, (i, None))
            self.int_inputs[p] = sym
        if not isinstance(v, torch.Tensor):
            return
        if not isinstance(meta, torch.Tensor) or meta.dtype != v.dtype or meta.dim() != v.dim():
            raise Unsupported(f"input {p.name} does not match its metadata")
        for axis, s in enumerate(meta.shape):
            if isinstance(s, torch.SymInt) and isinstance(s.node.expr, sympy.Symbol):
                self._source(s.node.expr, v.shape[axis], (i, axis))
        self.ptrs[i] = v.data_ptr()
        d = Desc(i, sympy.Integer(0), tuple(expr(s) for s in meta.shape), tuple(expr(s) for s in meta.stride()),
                 v.dtype)
        self._check(v, d, p.name)
        self.descs[p] = d

    def _source(self, sym, v, where) -> None:
        if sym not in self.sources:
            self.sources[sym] = where
            self.sub_values[sym] = int(v)

    def _check(self, t: torch.Tensor, d: Desc, what: str) -> None:
        """``d`` describes ``t`` in this run (sizes, strides of dimensions longer than 1, address)."""
        sub = self.sub_values
        for e in (*d.sizes, *d.strides, d.offset):
            if not e.free_symbols <= set(sub):
                raise Unsupported(f"{what}: a size depends on {e.free_symbols - set(sub)}, which no input gives")
        for e in d.sizes:
            if e.free_symbols and value(e, sub) <= 1:
                raise Defer(f"{what}: a dynamic size is {value(e, sub)} in this call")
        sizes = tuple(value(e, sub) for e in d.sizes)
        if sizes != tuple(t.shape) or t.dtype != d.dtype:
            raise Unsupported(f"{what}: sizes {tuple(t.shape)} are not the recorded {sizes}")
        for s, e, real in zip(sizes, d.strides, t.stride()):
            if s > 1 and value(e, sub) != real:
                raise Unsupported(f"{what}: strides {t.stride()} are not the recorded ones")
        if t.numel() and self.ptrs[d.base] + value(d.offset, sub) * t.element_size() != t.data_ptr():
            raise Unsupported(f"{what}: its address is not the recorded one")

    def _glue(self, n: fx.Node, env: dict) -> None:
        if self._glue_op(n, env):  # an operation the launcher computes itself (glue.py)
            return
        v, meta = env[n], n.meta.get("val")
        if n.target in (aten.split.Tensor, aten.split_with_sizes.default):
            self.descs[n] = self._split(n, v)
            return
        if n.target is operator.getitem:
            pieces = self.descs.get(n.args[0])
            if not isinstance(pieces, list) or not isinstance(n.args[1], int):
                raise Unsupported(f"{n.name} takes a piece the launcher does not hold")
            self._check(v, pieces[n.args[1]], n.name)
            self.descs[n] = pieces[n.args[1]]
            return
        if not isinstance(v, torch.Tensor) or not isinstance(meta, torch.Tensor):
            raise Unsupported(f"{n.name} gives no tensor")
        src = n.args[0]
        d_in = self.descs.get(src)
        if d_in is None:
            raise Unsupported(f"{n.name} reads a value the launcher does not hold")
        if n.target is aten.copy_.default:
            other = self.descs.get(n.args[1])
            same_sizes = other is not None and len(other.sizes) == len(d_in.sizes) and \
                all(same(a, b) for a, b in zip(other.sizes, d_in.sizes))
            if not same_sizes or len(n.args) != 2 or n.kwargs or other.dtype != d_in.dtype:
                raise Unsupported(f"{n.name}: a copy that broadcasts or converts")
            self.program.ops.append(Copy(self._ptr(d_in), self._ptr(other), d_in.sizes, d_in.strides, other.strides,
                                         v.element_size()))
            self.descs[n] = d_in
            return
        d = self._view(n, d_in, v, meta)
        self._check(v, d, n.name)
        self.descs[n] = d

    def _ptr(self, d: Desc) -> Ptr:
        item = torch.empty((), dtype=d.dtype).element_size()
        return Ptr(d.base, d.offset * item)

    def _tmp(self, nbytes, address: int):
        self.program.scratch.append(nbytes)
        base = ("tmp", len(self.program.scratch) - 1)
        self.ptrs[base] = address
        return base

    # steps ------------------------------------------------------------------------------------------------------
    def _step(self, n: fx.Node, args, kwargs, env: dict):
        step = n.target
        slow, decided = step.slow_calls, getattr(step, "decided", 0)
        calls: list = []
        with steps.recording(calls):
            result = step(*args, **kwargs)
        if getattr(step, "decided", 0) != decided:
            self.failed = f"Unsupported: {n.name} chose its kernel from a tensor's values"
            return result
        self._guard(lambda: self._calls(n, step, slow, calls, result, env))
        return result

    def _calls(self, n, step, slow: int, calls: list, result, env: dict) -> None:
        if step.slow_calls != slow:
            raise Unsupported(f"{n.name} ran the op's own Python")
        if len(calls) > 1 and getattr(step, "splits", False):
            return self._split_calls(n, calls, result)
        if len(calls) != 1:
            raise Unsupported(f"{n.name} made {len(calls)} kernel calls")
        plan, fn, kernel_tensors, given = calls[0]
        lay = plan.layout
        converts = self._converts(lay)
        if not self._takes(fn) or not (self._plain(lay) or converts) or plan.workspaces or len(kernel_tensors) != \
                len(plan.layout.take) + len(plan.layout.allocate):
            raise Unsupported(f"{n.name}: its kernel's plan converts, zero-fills, reorders or takes workspaces "
                              f"(order {lay.order}, convert {lay.convert}, zero {lay.zero}, reshape {lay.reshape}, "
                              f"workspaces {plan.workspaces})")
        tensors = self._graph_tensors(n, lay, kernel_tensors, given, result)
        taken = len(plan.layout.take)
        readable = [a for a in n.all_input_nodes if a in self.descs]
        params: dict = {}
        fresh = list(range(taken, len(tensors)))  # outputs in memory the step made for this call
        for k, t in enumerate(tensors[:taken]):
            role = plan.layout.roles[k]
            try:
                params[k] = self._param(n, step, t, role, readable, env)
            except Defer:
                raise
            except Unsupported:
                if role != "output":
                    raise
                fresh.append(k)
        # the step's result lies in one of the tensors the kernel wrote
        meta = n.meta.get("val")
        if not isinstance(result, torch.Tensor) or not isinstance(meta, torch.Tensor):
            raise Unsupported(f"{n.name} gives no tensor")
        written = [k for k in range(len(tensors)) if k >= taken or plan.layout.roles[k] != "input"]
        home = next((k for k in written if tensors[k].data_ptr() == result.data_ptr()), None)
        sizes, strides = tuple(expr(s) for s in meta.shape), tuple(expr(s) for s in meta.stride())
        if home is None:
            relaid = self._relayout(n, step, result, tensors, [k for k in written if k in fresh], sizes, strides,
                                    params)
            self._planned_call(n, plan, fn, kernel_tensors, params, converts)  # (narrowed first where it converts)
            src, d = params[relaid], self.descs[n]
            self.program.ops.append(Copy(self._ptr(d), self._ptr(src), sizes, d.strides, src.strides,
                                         result.element_size()))
            return
        if home not in fresh:
            d = Desc(params[home].base, params[home].offset, sizes, strides, result.dtype)
        else:
            d = Desc(("pending",), sympy.Integer(0), sizes, strides, result.dtype)
            self.ptrs[d.base] = result.data_ptr()
        self._check(result, d, n.name)
        for k in fresh:
            if k != home:
                raise Unsupported(f"{n.name}: its kernel allocates an output the step does not return")
            found = self._match(tensors[k], d, n.name)
            nbytes = math.prod(found.sizes) * tensors[k].element_size()
            base = self._tmp(nbytes, tensors[k].data_ptr())
            params[k] = Desc(base, found.offset, found.sizes, found.strides, found.dtype)
            d = Desc(base, d.offset, d.sizes, d.strides, d.dtype)
            del self.ptrs[("pending",)]
        self.descs[n] = d
        self._planned_call(n, plan, fn, kernel_tensors, params, converts)

    def _zeros(self, n, lay, tensors, params: dict) -> None:
        for k in lay.zero:
            p = params[k]
            if not all(same(a, b) for a, b, e in zip(p.strides, contiguous_strides(p.sizes), p.sizes)
                       if not (e.is_number and e == 1)):
                raise Unsupported(f"{n.name}: an accumulator that is not contiguous ({p.sizes}, {p.strides})")
            item = tensors[k].element_size()
            self.program.ops.append(Zero(self._ptr(p), math.prod(p.sizes, start=sympy.Integer(1)) * item))

    def _relayout(self, n, step, result, tensors, fresh: list, sizes, strides, params: dict) -> int:
        """A step whose result is its kernel's fresh output copied into another layout (``step.relayouts``: the
        attention's sequence-major heads, ``septran.ops.heads.in_layout``): both become scratch buffers, the
        kernel's contiguous, the result in the layout its metadata gives, and a copy follows the call. Returns
        the index of the kernel's output among its tensors."""
        if not getattr(step, "relayouts", False) or len(fresh) != 1:
            raise Unsupported(f"{n.name}: its result is not what its kernel wrote")
        k = fresh[0]
        out, item = tensors[k], result.element_size()
        dense = result.storage_offset() == 0 and result.untyped_storage().nbytes() == result.numel() * item
        if out.shape != result.shape or out.dtype != result.dtype or not out.is_contiguous() or not dense \
                or out.data_ptr() == result.data_ptr() or not torch.equal(out, result):
            raise Unsupported(f"{n.name}: its result is not its kernel's output, nor a copy of it in another layout")
        nbytes = math.prod(sizes, start=sympy.Integer(1)) * item
        params[k] = Desc(self._tmp(nbytes, out.data_ptr()), sympy.Integer(0), sizes, contiguous_strides(sizes),
                         out.dtype)
        self._check(out, params[k], f"{n.name} (its kernel's output)")
        d = Desc(self._tmp(nbytes, result.data_ptr()), sympy.Integer(0), sizes, strides, result.dtype)
        self._check(result, d, n.name)
        self.descs[n] = d
        return k

    def _param(self, n, step, t: torch.Tensor, role: str, readable: list, env: dict) -> Desc:
        """The description of a tensor a step passed its kernel."""
        for a in readable:
            v = env[a]
            if isinstance(v, torch.Tensor) and v.data_ptr() == t.data_ptr() and v.dtype == t.dtype:
                try:
                    return self._match(t, self.descs[a], n.name)
                except Defer:
                    raise
                except Unsupported:
                    continue
        # a tensor the step keeps (a zero bias), before any guess that it copies a value of the graph
        if role == "input" and any(t is x for x in vars(step).values()):
            self.pinned.append(t)
            base = ("pin", len(self.pinned) - 1)
            self.ptrs[base] = t.data_ptr()
            return Desc(base, sympy.Integer(0), tuple(map(sympy.Integer, t.shape)),
                        tuple(map(sympy.Integer, t.stride())), t.dtype)
        for a in readable:
            v = env[a]
            if role == "input" and isinstance(v, torch.Tensor) and v.shape == t.shape and v.dtype == t.dtype \
                    and t.is_contiguous() and not v.is_contiguous() and torch.equal(v, t):
                src = self.descs[a]
                strides = contiguous_strides(src.sizes)
                base = self._tmp(math.prod(src.sizes) * t.element_size(), t.data_ptr())
                d = Desc(base, sympy.Integer(0), src.sizes, strides, t.dtype)
                self._check(t, d, f"{n.name} (a contiguous copy)")
                self.program.ops.append(Copy(self._ptr(d), self._ptr(src), src.sizes, strides, src.strides,
                                             t.element_size()))
                return d
        for a in readable:
            found = self._relaid_copy(n, t, role, env[a], a)
            if found is not None:
                return found
        raise Unsupported(f"{n.name} passes its kernel a tensor the launcher cannot place")

    @staticmethod
    def _plain(lay) -> bool:
        """A kernel plan's layout the launcher calls as it is: no reordering, conversion, reshape or write-back
        (zero-filled outputs are: a memset before the call)."""
        return lay.order is None and not lay.convert and not lay.reshape and not lay.write_back and \
            all(dtype is None for _, dtype in lay.results)

    def _takes(self, fn) -> bool:
        """Whether the launcher can call this kernel function (the cpu launcher: a kernel's C entry)."""
        from septran.build.c_builder import CKernel

        return isinstance(fn, CKernel)

    def _relaid_copy(self, n, t: torch.Tensor, role: str, v, a) -> Optional[Desc]:
        """``t`` a view (a reshape, a transposition) of a contiguous copy of the value ``v``, in ``v``'s order or
        with its dimensions 1 and 2 swapped (a heads layout: rope's ``x`` in a prefill, a column slice of a fused
        QKV projection): the copy is done in the launcher, and ``t`` described as a view of it."""
        if role != "input" or not isinstance(v, torch.Tensor) or v.is_contiguous() or v.dtype != t.dtype or \
                v.numel() != t.numel() or not t.numel():
            return None
        item = t.element_size()
        if t.untyped_storage().nbytes() != t.numel() * item or t.storage_offset():
            return None
        flat = t.as_strided((t.numel(),), (1,), 0)
        src = self.descs[a]
        swap = v.dim() >= 3 and v.shape[1] > 1 and v.shape[2] > 1  # (else both orders are one layout)
        orders = [tuple(range(v.dim()))] + ([(0, 2, 1, *range(3, v.dim()))] if swap else [])
        matching = [o for o in orders if torch.equal(flat, v.permute(o).reshape(-1))]
        if len(matching) != 1:  # none, or values that cannot tell the layouts apart (never a guess)
            return None
        for order in matching:
            sizes, strides = tuple(src.sizes[i] for i in order), tuple(src.strides[i] for i in order)
            dense = contiguous_strides(sizes)
            d = Desc(self._tmp(math.prod(sizes, start=sympy.Integer(1)) * item, t.data_ptr()), sympy.Integer(0),
                     sizes, dense, t.dtype)
            try:
                found = self._match(t, d, f"{n.name} (a copy in another layout)")
            except Defer:
                raise
            except Unsupported:
                self.program.scratch.pop()
                continue
            self.program.ops.append(Copy(self._ptr(d), self._ptr(src), sizes, dense, strides, item))
            return found
        return None

    def _call(self, n, plan, fn, params: list) -> None:
        f = ctypes.cast(fn.function, ctypes.c_void_p).value
        index = next((i for i, (g, _) in enumerate(self.kernels) if g == f), None)
        if index is None:
            self.kernels.append((f, fn))
            index = len(self.kernels) - 1
        types = fn.function.argtypes[len(fn.order):]
        sizes = []
        for (k, axis), ctype in zip(fn._sizes, types):
            sizes.append((params[k].sizes[axis], "int64_t" if ctype is ctypes.c_int64 else "int32_t"))
        passed = [e for e, _ in sizes]
        for d in params:  # a dynamic dimension the kernel does not take would be baked into its C
            for e in d.sizes:
                if e.free_symbols and not any(same(e, p) for p in passed):
                    raise Unsupported(f"{n.name}: its kernel is static in a dimension that varies ({e})")
        self.program.ops.append(Call(index, tuple(self._ptr(params[k]) for k in fn.order), tuple(sizes)))
        if plan.check_errors is not None:  # the vendor's error channel, asked once per launch (per target)
            target = n.target.kernel.target
            if all(t is not target for t in self.checks):
                self.checks.append(target)

    def _outputs(self, nodes, values) -> None:
        self.out_descs = []
        for node, v in zip(nodes, values):
            d = self.descs.get(node)
            if d is None or not isinstance(v, torch.Tensor):
                raise Unsupported(f"output {node} is no tensor the launcher holds")
            self.out_descs.append(d)
