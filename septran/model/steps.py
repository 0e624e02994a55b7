"""The SepTran nodes of a compiled graph as direct steps: each calls its kernel's prepared plan, not the custom op.

The rewrite puts ``torch.ops.septran.*`` calls in the graph (they trace, export and run under ``fullgraph=True``);
at run time each goes through torch's dispatcher (about 23 us a call on this machine) and then the op's Python,
which looks its kernel up and binds the call again (about 21 us). A step is made once per node: it keeps its
kernel, and per shape signature the kernel's plan (``Kernel.prepared``), so a call is the op's view arithmetic
and ``plan.run``. A step whose output the memory plan places is handed ``out`` (a view of the graph's arena).

Anything unusual (an empty tensor, a non-contiguous input, another device than the plan's) runs the op's own
Python (``CustomOpDef._init_fn``, the same code the custom op runs), so a step is never wrong where the op is
right. ``make`` returns a generic step (the op's Python without the dispatcher) for ops without a fast one.
"""
from __future__ import annotations

import contextlib
import itertools
import logging
import threading
from typing import Callable, Optional

import torch

log = logging.getLogger(__name__)
_NUMBERS = itertools.count()
_RECORDING = threading.local()  # a list while a segment launcher records (septran.model.launcher.record)


@contextlib.contextmanager
def recording(calls: list):
    """Within: each kernel call a step makes appends (plan, kernel function, the tensors passed, the call's own
    tensors) to ``calls``."""
    before = getattr(_RECORDING, "calls", None)
    _RECORDING.calls = calls
    try:
        yield calls
    finally:
        _RECORDING.calls = before


def recording_now() -> bool:
    """Whether a segment launcher is recording the step that asks (its kernel calls become C calls)."""
    return getattr(_RECORDING, "calls", None) is not None


def _raw(op: torch._ops.OpOverload) -> Callable:
    """The Python function behind a ``torch.library.custom_op`` (what its CPU and CUDA kernels call)."""
    from septran import ops

    ops.load()
    name = _MODULES[op._overloadpacket.__name__]
    module = __import__(name if "." in name else f"septran.ops.{name}", fromlist=["_"])
    return getattr(module, op._overloadpacket.__name__)._init_fn


_MODULES = {"gemm": "gemm", "bmm": "bmm", "attention": "attention", "softmax": "norms", "layer_norm": "norms",
            "rms_norm": "norms", "rope": "rope", "swiglu": "swiglu", "elementwise": "elementwise",
            "attention_written": "septran.model.written_attention_op"}


class Step:
    """A SepTran node called from the graph: ``step(out, *the op's arguments)``; ``out`` is None or the arena's
    view the output is written into (only for steps with ``takes_out``)."""

    takes_out = False
    without_optional = False  # the step calls a kernel with optional tensors, passing none of them

    def __init__(self, op: torch._ops.OpOverload):
        self.op = op
        self.kind = op._overloadpacket.__name__
        self.raw = _raw(op)
        # FX's code generator names a call's target by these (the step is a global of the generated code)
        self.__name__ = f"septran_{self.kind}_{next(_NUMBERS)}"
        self.__module__ = __name__
        self.kernel = None
        self._plans: dict = {}
        self.calls = 0  # how many times the step ran (tests count them)
        self.slow_calls = 0  # of which through the op's own Python

    def __repr__(self) -> str:
        return f"<septran step {self.__name__}>"

    def __call__(self, out, *args):
        self.calls += 1
        return self.raw(*args)

    def _slow(self, *args):
        """The op's own Python, for a call the fast path does not take."""
        self.slow_calls += 1
        return self.raw(*args)

    def _run(self, key, args: tuple, kwargs: dict):
        """The kernel's plan for ``key`` (this node's shapes), run; None when the plan does not take the call."""
        plan = self._plans.get(key)
        if plan is None:
            plan = self.kernel.prepared(args, kwargs, self.without_optional)
            if plan is None:
                return None
            self._plans[key] = plan
        calls = getattr(_RECORDING, "calls", None)
        if calls is not None:
            return _recorded(plan, args, kwargs, calls)
        return plan.run(args, kwargs)


def _recorded(plan, args: tuple, kwargs: dict, calls: list):
    """``plan.run`` with the tensors it hands its kernel written down, and the call's own tensors (the plan's pool
    before it converts any to the program's types)."""
    fn, seen = plan.fn, []
    given = tuple(args[s] if isinstance(s, int) else kwargs[s] for s in plan.layout.take)

    def capture(*tensors):
        seen.append(tensors)
        return fn(*tensors)

    plan.fn = capture
    try:
        out = plan.run(args, kwargs)
    finally:
        plan.fn = fn
    calls.extend((plan, fn, t, given) for t in seen)
    return out


def _target(device) -> str:
    from septran.ops import kernels

    return kernels.target_for(device)


class Gemm(Step):
    takes_out = True

    def __init__(self, op):
        super().__init__(op)
        self._bias: Optional[torch.Tensor] = None

    def __call__(self, out, x, w, bias, w_transposed, act):
        self.calls += 1
        k = x.shape[-1]
        n = w.shape[0] if w_transposed else w.shape[1]
        if not x.numel() or not n or not x.is_contiguous():
            return self._slow(x, w, bias, w_transposed, act)
        plain = bias is None and act == "none" and not w_transposed
        if self.kernel is None:
            from septran.ops.gemm import _check_act, gemm_kernel

            _check_act(act)
            self.kernel = gemm_kernel(_target(x.device), act, w_transposed, plain)
        a = x.view(-1, k)
        if bias is None and not plain:
            bias = self._bias
            if bias is None or bias.shape[0] != n or bias.dtype != x.dtype or bias.device != x.device:
                bias = self._bias = torch.zeros(n, dtype=x.dtype, device=x.device)
        args = (a, w) if plain else (a, w, bias)
        if out is None:
            c = self._run((a.shape, w.shape), args, {})
        else:
            c = self._run((a.shape, w.shape, 1), args, {"C": out.view(-1, n)})
        if c is None:
            return self._slow(x, w, bias, w_transposed, act)
        return c.view(*x.shape[:-1], n)


class RMSNorm(Step):
    takes_out = True

    def __call__(self, out, x, n, weight, eps, out_dtype):
        self.calls += 1
        if not x.numel() or not x.is_contiguous():
            return self._slow(x, n, weight, eps, out_dtype)
        if self.kernel is None:
            from septran.ops import norms

            self.kernel = norms._kernel("rmsnorm", x.device, (), lambda: norms.kernels.logic("rmsnorm").rmsnorm(
                axis=1, rank=2))
        from septran.ops.norms import _constant

        rows = x.numel() // n
        w = weight.view(n) if weight is not None and weight.is_contiguous() else (
            weight.reshape(n).contiguous() if weight is not None else _constant(1.0, n, x))
        y = out if out is not None else torch.empty(x.shape, dtype=out_dtype, device=x.device)
        done = self._run((x.shape, n), (x.view(rows, n), w), {"eps": float(eps), "Y": y.view(rows, n)})
        return self._slow(x, n, weight, eps, out_dtype) if done is None else y


class LayerNorm(Step):
    """``F.layer_norm`` over the last dimensions on its plan (the op's Python without its per-call lookups)."""

    takes_out = True

    def __call__(self, out, x, n, weight, bias, eps):
        self.calls += 1
        if not x.numel() or not x.is_contiguous():
            return self._slow(x, n, weight, bias, eps)
        from septran.ops import norms

        if self.kernel is None:
            self.kernel = norms._kernel("layernorm", x.device, (), lambda: norms.kernels.logic("layernorm").layernorm(
                axis=1, rank=2))
        rows = x.numel() // n
        w, b = (t.view(n) if t is not None and t.is_contiguous() else
                t.reshape(n).contiguous() if t is not None else norms._constant(fill, n, x)
                for t, fill in ((weight, 1.0), (bias, 0.0)))
        y = out if out is not None else torch.empty(x.shape, dtype=x.dtype, device=x.device)
        done = self._run((x.shape, n), (x.view(rows, n), w, b), {"eps": float(eps), "Y": y.view(rows, n)})
        return self._slow(x, n, weight, bias, eps) if done is None else y


class Softmax(Step):
    """Softmax (or log-softmax) over one dimension on its plan; the columns dynamic as the op's (a decode step's
    scores over a KV cache grow by one column per step)."""

    takes_out = True

    def __init__(self, op):
        super().__init__(op)
        self._kernels: dict = {}

    def __call__(self, out, x, dim, log, out_dtype):
        self.calls += 1
        if x.dim() == 0 or not x.numel() or not x.is_contiguous():
            return self._slow(x, dim, log, out_dtype)
        import math

        from septran.ops import norms

        d = dim % x.dim()
        n, outer, inner = x.shape[d], math.prod(x.shape[:d]), math.prod(x.shape[d + 1:])
        rank = 2 if inner == 1 else 3
        kernel = self._kernels.get(rank)
        if kernel is None:
            mod = norms.kernels.logic("softmax")
            kernel = self._kernels[rank] = norms._kernel(
                "softmax", x.device, (bool(log), rank), lambda: mod.softmax(log=bool(log), axis=1, rank=rank),
                dynamic=(("X", (0, 1)),) if rank == 2 else (("X", (0, 2)),))
        self.kernel = kernel
        xv = x.view(outer, n) if rank == 2 else x.view(outer, n, inner)
        y = out if out is not None else torch.empty(x.shape, dtype=out_dtype, device=x.device)
        done = self._run((rank, x.shape, y.dtype), (xv,), {"Y": y.view(xv.shape)})
        return self._slow(x, dim, log, out_dtype) if done is None else y


class Bmm(Step):
    """C[b] = A[b] @ B[b] on its plan (the operands made contiguous, as the op does)."""

    def __call__(self, out, a, b):
        self.calls += 1
        if not a.numel() or not b.numel():
            return self._slow(a, b)
        if self.kernel is None:
            from septran.ops.bmm import bmm_kernel

            self.kernel = bmm_kernel(_target(a.device))
        a, b = a.contiguous(), b.contiguous()
        c = self._run((a.shape, b.shape), (a, b), {})
        return self._slow(a, b) if c is None else c


class SwiGLU(Step):
    takes_out = True

    def __call__(self, out, x, wg, wu, transposed):
        self.calls += 1
        k = x.shape[-1]
        n = wg.shape[0] if transposed else wg.shape[1]
        if not x.numel() or not n or not x.is_contiguous():
            return self._slow(x, wg, wu, transposed)
        if self.kernel is None:
            from septran.ops.swiglu import swiglu_kernel

            self.kernel = swiglu_kernel(_target(x.device), transposed)
        x2 = x.view(-1, k)
        if out is None:
            h = self._run((x2.shape, wg.shape, wu.shape), (x2, wg, wu), {})
        else:
            h = self._run((x2.shape, wg.shape, wu.shape, 1), (x2, wg, wu), {"H": out.view(-1, n)})
        return self._slow(x, wg, wu, transposed) if h is None else h.view(*x.shape[:-1], n)


class Elementwise(Step):
    takes_out = True

    def __init__(self, op):
        super().__init__(op)
        self._shapes: dict = {}  # the inputs' shapes -> (output shape, rows, cols, kinds)
        self._ops = None

    def __call__(self, out, inputs, spec, out_dtype):
        self.calls += 1
        from septran.ops import elementwise as ew

        key = tuple(x.shape for x in inputs)
        found = self._shapes.get(key)
        if found is None:
            import math

            from septran.ops.logic.elementwise_chain import chain_logic, check, kind_of

            ops = ew.parse(spec)
            shape = torch.broadcast_shapes(*key)
            kinds = tuple(kind_of(s, shape) for s in key)
            if None in kinds or not math.prod(shape) or any(x.dim() == 0 or x.device != inputs[0].device
                                                           for x in inputs):
                return self._slow(inputs, spec, out_dtype)
            check(ops, kinds)
            cols = shape[-1]
            target = _target(inputs[0].device)
            kernel = ew.kernels.kernel(("elementwise_chain", target, ops, kinds), target, "elementwise_chain",
                                       lambda: chain_logic(ops, kinds))
            found = self._shapes[key] = (shape, math.prod(shape) // cols, cols, kinds, kernel)
        shape, rows, cols, kinds, self.kernel = found
        y = out if out is not None else torch.empty(shape, dtype=out_dtype, device=inputs[0].device)
        views = tuple(ew._view(x, kd, rows, cols, y.device) for x, kd in zip(inputs, kinds))
        done = self._run(key, views, {"Y": y.view(rows, cols)})
        return self._slow(inputs, spec, out_dtype) if done is None else y


class Rope(Step):
    """The op's common case (one cos/sin table for every batch, x contiguous in either heads layout) on its plan."""

    def __call__(self, out, x, cos, sin, seq_major):
        self.calls += 1
        from septran.ops import rope as ops_rope
        from septran.ops.heads import in_layout

        b, h, s, d = x.shape
        if not x.numel():
            return self._slow(x, cos, sin, seq_major)
        x_seq_major = x.transpose(1, 2).is_contiguous()
        c, sn = ops_rope._tables(cos, s, d), ops_rope._tables(sin, s, d)
        if c.shape[0] != 1 or sn.shape[0] != 1:
            return self._slow(x, cos, sin, seq_major)
        if not x_seq_major and not x.is_contiguous():
            # neither layout (a column slice of a fused QKV projection): one copy into the layout the node
            # returns, so that no second copy follows (the op's own Python copies to (B, H, S, D) and back)
            x = (x.transpose(1, 2).contiguous().transpose(1, 2) if seq_major else x.contiguous())
            x_seq_major = seq_major
        c, sn = c[0], sn[0]
        if not (c.is_contiguous() and sn.is_contiguous()):
            return self._slow(x, cos, sin, seq_major)
        if self.kernel is None:
            self.kernel = ops_rope.rope_kernel(_target(x.device))
        y = self._run((x.shape, x_seq_major), (ops_rope._as_logic(x, x_seq_major), c, sn), {})
        if y is None:
            return self._slow(x, cos, sin, seq_major)
        return in_layout(y.transpose(1, 2) if x_seq_major else y.view(b, h, s, d), seq_major)
