"""The compiled operator a user calls: one call path (bind, plan, run) and per-shape variants.

A call's signature (its arguments' places, shapes, dtypes and scalar values) names a plan
(``septran.runtime.plan``): the first call of a signature binds its arguments, checks them, chooses and
builds the variant, and lays out what to pass, allocate and copy back; every call then runs the plan.
Positional and keyword calls take the same path.
"""
from __future__ import annotations

import logging
import math
import os
import sys
from dataclasses import dataclass
from typing import Optional

from septran.errors import CallError, SourceLoc
from septran.frontend.ir import Privilege, TaskGraph
from septran.frontend.shapes import ShapeRelations
from septran.lowering import Specialization
from septran.lowering.bind import check_mapping
from septran.mapping import shape_points
from septran.mapping.schema import Mapping
from septran.records import TuningKey
from septran.runtime import binding, dynamic_dims, notebook, observers, optional, outputs as passed_outputs, points, workspaces
from septran.runtime import fast_call, scalars as scalar_args, vendor
from septran.runtime.plan import Plan, call_key, lay_out
from septran.runtime.points import Tuner
from septran.runtime.variant import Variant
from septran.target import Target

log = logging.getLogger(__name__)


def _user_line() -> Optional[SourceLoc]:
    """The first line of the caller's code outside SepTran (where ``specialize()`` was called)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the septran package
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(here + os.sep):
        frame = frame.f_back
    return SourceLoc(frame.f_code.co_filename, frame.f_lineno) if frame is not None else None


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


@dataclass(frozen=True)
class _Arg:
    name: str
    role: str  # input, output, inout
    privilege: Privilege


class Kernel:
    """``septran.compile``'s result: call it on torch tensors.

    ``tuner``: called for a shape the tuning database holds no point for (``septran.compile(..., autotune=True)``
    hands ``septran.tuning``'s); without one, the search space's first point runs.
    """

    def __init__(self, graph: TaskGraph, mapping: Mapping, target: Target, tuner: Optional[Tuner] = None, logic=None):
        self.graph = graph
        self.logic = logic  # the entry task function (or implicit_host.ImplicitHost): traced again for a call that passes optional tensors
        self.optional = graph.entry_task.absent  # the optional tensors (M=None); `graph` is the trace without them
        self.mapping = mapping  # for a search space (!tune): its first point, with .space
        self.target = target
        self.tuner = tuner
        check_mapping(graph, mapping, target)  # mapping mistakes surface at compile time, not at the first call
        self.shapes = ShapeRelations(graph)
        self.dynamic = dynamic_dims.dynamic_axes(mapping, self.shapes)  # (param, axis) that stay symbolic
        entry = graph.entry_task
        self.args = tuple(
            _Arg(p.name, graph.privilege(entry.name, p.name).role, graph.privilege(entry.name, p.name)) for p in entry.params
        )
        self.inputs = tuple(a for a in self.args if a.role != "output")
        self.outputs = tuple(a for a in self.args if a.role == "output")
        self.scalars = {sp.name: sp.default for sp in entry.scalars}  # name -> default, after the inputs
        self._input_names = frozenset(a.name for a in self.inputs)
        passed_outputs.check_declared(self)
        self._with_optional: dict[tuple, "Kernel"] = {}
        # A name that fixes this kernel's logic and mapping (the kernel library's): its variants' lowerings are kept
        # in the build cache under it (runtime/lowered.py). None: lowered every time. Not passed to .at() or
        # .with_optional() kernels (another mapping, another graph).
        self.lowering_name: Optional[str] = None
        self._warned_first_point = False
        self._specs: dict[tuple, Specialization] = {}
        self._variants: dict[tuple, Variant] = {}
        self._last: Optional[Variant] = None
        self._plans: dict[tuple, Plan] = {}  # call signature -> what to pass, allocate and run
        self._fast = None  # the C entry of calls (runtime/fast_call.py): the plans it holds, checked and run in C
        # A mapping whose shape_points ask for a thread count (``threads: 1``): the point, so the variant and the plan,
        # depend on torch's thread count at the call, which then joins their keys (the C entry checks it too).
        self._by_threads = mapping.space is not None and shape_points.asks_threads(mapping.shape_points)

    def signature(self) -> str:
        """``entry(inputs, M=None, eps=1e-05) -> (outputs)``: how it is called."""
        ins = ", ".join([a.name for a in self.inputs] + [f"{n}=None" for n in self.optional]
                        + [f"{k}={v:g}" for k, v in self.scalars.items()])
        return f"{self.graph.entry}({ins}) -> ({', '.join(a.name for a in self.outputs)})"

    def __repr__(self) -> str:
        return f"<septran.Kernel {self.signature()} on {self.target.name}, mapping {self.mapping.file}>"

    def _repr_markdown_(self) -> str:  # Jupyter
        return notebook.kernel_markdown(self)

    # kernels it stands for ---------------------------------------------------------
    def at(self, point: dict) -> "Kernel":
        """The kernel at one point of the mapping's search space (an ordinary mapping: what the tuner measures)."""
        return Kernel(self.graph, self.mapping.at(point), self.target, logic=self.logic)

    def with_optional(self, present: tuple) -> "Kernel":
        """The kernel for calls that pass the optional tensors ``present`` (traced on first use)."""
        from septran.frontend.implicit_host import graph_of

        sub = self._with_optional.get(present)
        if sub is None:
            if self.logic is None:
                raise CallError(f"this kernel was built from a task graph: it cannot take the optional tensors "
                                f"{', '.join(present)}", hint="compile it with septran.compile(logic, ...)")
            graph = graph_of(self.logic, absent=frozenset(self.optional) - set(present))
            sub = Kernel(graph, self.mapping, self.target, self.tuner)
            sub.optional = ()  # it takes exactly these; this kernel routes
            optional.check_roles(sub, present)
            self._with_optional[present] = sub
        return sub

    # specialisation ------------------------------------------------------------
    def specialize(self, **args) -> Variant:
        """The variant for given input shapes and dtypes, without running it.

        Each input (and each output given) is a tensor (any device, ``meta`` included) or a ``(shape, dtype)``
        pair: ``kernel.specialize(A=((1024, 512), "float16"), B=((512, 256), "float16"))``;
        scalars (``eps=1e-6``) take their defaults unless given.
        """
        if self.optional:
            kernel, args = optional.specialize_args(self, args)
            if kernel is not self:
                self._last = kernel.specialize(**args)
                return self._last
        described = {}
        for a in self.inputs + tuple(o for o in self.outputs if o.name in args):  # outputs: optional, as in a call
            if a.name not in args:
                raise CallError(f"specialize() needs input {a.name}", _user_line(),
                                hint=f"inputs: {', '.join(x.name for x in self.inputs)}; e.g. "
                                     f"{a.name}=((64, 64), 'float32') or a tensor")
            val = args.pop(a.name)
            if hasattr(val, "shape") and hasattr(val, "dtype"):
                described[a.name] = (tuple(val.shape), _dtype_name(val.dtype))
            else:
                try:
                    shape, dtype = val
                    described[a.name] = (tuple(int(s) for s in shape), _dtype_name(dtype))
                except (TypeError, ValueError):
                    raise CallError(f"specialize(): {a.name} must be a tensor or a (shape, dtype) pair, not "
                                    f"{_short(val)}", _user_line(), hint=f"{a.name}=((64, 64), 'float32')") from None
        scalars = self.scalar_values({k: args.pop(k) for k in list(args) if k in self.scalars})
        if args:
            raise CallError(f"specialize() got unknown arguments {', '.join(args)}", _user_line(),
                            hint=f"inputs: {', '.join(x.name for x in self.inputs)}"
                                 + (f"; scalars: {', '.join(self.scalars)}" if self.scalars else ""))
        return self.variant(described, scalars)

    def scalar_values(self, given: dict) -> dict[str, float]:
        """Every scalar's value for a call that gives ``given`` (name -> number): checked, defaults filled in."""
        out = dict(self.scalars)
        for name, value in given.items():
            out[name] = scalar_args.value(name, value)
        return out

    def specialization(self, described: dict[str, tuple[tuple[int, ...], str]], scalars: dict) -> Specialization:
        """Every parameter's shape and dtype for these inputs ({name: (shape, dtype)}), checked; cheap (no
        lowering), cached. ``scalars``: every scalar's value (``scalar_values``)."""
        return self._specialization(described, scalars)[1]

    def tuning_key(self, spec: Specialization) -> TuningKey:
        """Where the tuning database keeps this specialisation's records (this kernel's search space)."""
        return points.record_key(self, spec)

    def variant(self, described: dict[str, tuple[tuple[int, ...], str]], scalars: Optional[dict] = None) -> Variant:
        """The variant for these inputs ({name: (shape, dtype)}) and scalars (default: the defaults): its point
        chosen (the tuning database, else the tuner handed in, else the space's first point) and lowered."""
        key, spec = self._specialization(described, scalars if scalars is not None else dict(self.scalars))
        return self._variant(key, spec, described)

    @property
    def latest(self) -> Optional[Variant]:
        """The variant of the latest call or specialisation (None before the first)."""
        return self._last

    @property
    def variants(self) -> tuple[Variant, ...]:
        """Every variant made so far, in the order made."""
        return tuple(self._variants.values())

    def _specialization(self, described: dict, scalars: dict) -> tuple[tuple, Specialization]:
        # A scalar is part of the program (like Triton's constexpr): a new value is a new variant.
        key = tuple(sorted(described.items())) + tuple(sorted((k, scalar_args.key(v)) for k, v in scalars.items()))
        spec = self._specs.get(key)
        if spec is None:
            self._check_described(described)
            shapes = self.shapes.solve({n: s for n, (s, _) in described.items()})
            spec = self._specs[key] = Specialization(shapes, passed_outputs.program_dtypes(self, described), scalars)
        return key, spec

    def _variant(self, key: tuple, spec: Specialization, described: dict) -> Variant:
        if observers._OBSERVERS:
            observers.notify(self, spec, described)
        if self.dynamic:  # one variant serves every size of the dynamic dimensions (in one shape_points bucket)
            dynamic_dims.check_sizes(spec.shapes, self.dynamic)
            key = tuple(sorted(dynamic_dims.masked_described(described, self.dynamic).items())) + key[len(described):] \
                + (("shape_points", points.bucket(self, spec)),)
        elif self._by_threads:
            key = key + (("shape_points", points.bucket(self, spec)),)
        variant = self._variants.get(key)
        if variant is None:
            choice = points.choose(self, spec, described, self.tuner, self._first_point_warning)
            spec = dynamic_dims.any_size(spec, self.dynamic)  # (the spec itself where nothing is dynamic)
            variant = self._variants[key] = Variant(self, spec, choice)
            log.info("specialised %s for %s", self.graph.entry, key)
        self._last = variant
        return variant

    def _first_point_warning(self) -> bool:
        """True the first time only: the untuned first point is announced once per kernel."""
        first, self._warned_first_point = not self._warned_first_point, True
        return first

    def _check_described(self, described) -> None:
        for name, (shape, dtype) in described.items():
            rank = self.graph.ranks.get((self.graph.entry, name))
            if rank is not None and len(shape) != rank:
                where = self.graph.rank_locs.get((self.graph.entry, name))
                raise CallError(f"{name} must have rank {rank} (the logic partitions it so), got shape {tuple(shape)}", where)
            if dtype not in self.target.dtypes:
                raise CallError(
                    f"{name} has dtype {dtype}; target {self.target.name} supports {', '.join(self.target.dtypes)}",
                    hint="convert the tensor, e.g. x.to(torch.float16)",
                )

    # calling: bind, plan, run ---------------------------------------------------
    def __call__(self, *args, **kwargs):
        fast = self._fast
        if fast is not None:  # NotImplemented: not a call it holds the plan of, or not one it can check
            out = fast(args, kwargs)
            if out is not NotImplemented:
                return out
        if self.optional:  # one trace per set of optional tensors passed
            kernel, args, kwargs = optional.route(self, args, kwargs)
            if kernel is not self:
                out = kernel(*args, **kwargs)
                self._last = kernel.latest
                return out
        try:
            key = self._plan_key(args, kwargs)
            plan = self._plans.get(key)
        except TypeError:  # an unhashable argument: binding says what is wrong with it
            key = plan = None
        if plan is not None:
            out = plan.run(args, kwargs)
            if out is not None:
                if plan.variant is not None:
                    self._last = plan.variant
                if plan.fast_left:
                    fast_call.offer(self, plan, args, kwargs)
                return out
        plan = self.plan(args, kwargs)
        if key is not None:
            self._plans[key] = plan
        out = plan.run(args, kwargs)
        if plan.variant is not None:
            self._last = plan.variant
        return out

    def prepared(self, args: tuple, kwargs: dict, without_optional: bool = False) -> Optional[Plan]:
        """The plan of calls with this call's signature (made and kept if new). A caller that knows its calls
        repeat a signature (a compiled graph's step) keeps the plan and calls ``plan.run`` itself, skipping the
        signature's lookup; ``run`` returning None (another device or layout) sends it back to ``__call__``.
        A kernel with optional tensors routes its calls first: None, unless ``without_optional`` says that the
        call passes none of them and leaves their places out (``kernel(q, k, v, sm_scale)``)."""
        if self.optional and not without_optional:
            return None
        key = self._plan_key(args, kwargs)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self.plan(args, kwargs)
        return plan

    def _plan_key(self, args: tuple, kwargs: dict) -> tuple:
        """The key of the plan of a call like this one: its signature, and torch's thread count where the point
        depends on it (TypeError for an unhashable argument, as ``call_key``)."""
        key = call_key(args, kwargs)
        return (key, points.current_threads()) if self._by_threads else key

    def plan(self, args: tuple, kwargs: dict) -> Plan:
        """The plan of a call like this one: its arguments bound and checked, its variant chosen and built."""
        import torch

        tensors, sources, given = binding.bind(self.graph.entry, [a.name for a in self.inputs], list(self.scalars),
                                               [a.name for a in self.outputs], args, kwargs)
        binding.check_tensors(tensors, self.target)
        scalars = self.scalar_values(given)
        described = {n: (tuple(t.shape), _dtype_name(t.dtype)) for n, t in tensors.items()}
        key, spec = self._specialization(described, scalars)  # shapes without lowering: empty outputs need no program
        roles = {a.name: a.role for a in self.args}
        passed_outputs.check_views(tensors, roles)
        passed_outputs.check_passed(tensors, [n for n in tensors if roles.get(n, "input") != "input"], roles)
        written = [spec.shapes[a.name] for a in self.outputs] + [spec.shapes[a.name] for a in self.inputs if a.role == "inout"]
        # Empty inputs do not stop the program: a nonempty output still needs it (a sum over K = 0 is its
        # identity, then the epilogue runs; TileLang takes extents of 0). Only where there is nothing to
        # write is there nothing to run, and nothing to compile.
        runs = not written or any(math.prod(s) for s in written)
        variant = self._variant(*self._variant_key(key, spec, described, scalars)) if runs else None
        layout = lay_out(tuple((a.name, a.role) for a in self.inputs + self.outputs), sources, tensors, spec,
                         passed_outputs.user_dtypes(self, described),
                         variant.program.read_outputs if variant is not None else None)
        device = next(iter(tensors.values())).device if tensors else torch.device(self.target.torch_device)
        if variant is None:
            return Plan(layout, None, device, (), None, None)
        vendor_lib = self.target.vendor
        check = (lambda: vendor.check_errors(self.target, variant.program.name)) \
            if vendor_lib is not None and vendor_lib.take_error is not None else None
        plan = Plan(layout, variant.build(), device, workspaces.shapes(variant.program), check, variant)
        if self._by_threads:
            plan.threads = points.current_threads()  # the C entry runs it only at this count
        return plan

    def _variant_key(self, key: tuple, spec: Specialization, described: dict, scalars: dict) -> tuple:
        """A call that passes outputs the inputs already determine (same shapes, same types) runs the variant of
        the call that does not: (key, spec, described) of the inputs alone, else the call's own."""
        ins = {n: d for n, d in described.items() if n in self._input_names}
        if len(ins) == len(described):
            return key, spec, described
        try:
            own_key, own = self._specialization(ins, scalars)
        except CallError:  # an output only a passed tensor gives the shape of
            return key, spec, described
        same = dict(own.shapes) == dict(spec.shapes) and dict(own.dtypes) == dict(spec.dtypes)
        return (own_key, own, ins) if same else (key, spec, described)

    # inspection ------------------------------------------------------------------
    def _latest(self) -> Variant:
        if self._last is None:
            raise CallError(
                "this kernel has not been specialised yet",
                hint="call it on tensors, or use kernel.specialize(A=((M, K), 'float16'), ...) to generate code without running",
            )
        return self._last

    @property
    def tilelang_source(self) -> str:
        """The TileLang program of the latest call (or specialisation)."""
        return self._latest().tilelang_source

    @property
    def device_source(self) -> str:
        return self._latest().device_source

    def explain(self) -> str:
        return self._latest().explain()

    @property
    def tuning(self) -> dict:
        """Which point of the mapping's search space the latest call ran, and where it came from."""
        choice = self._latest().choice
        return {"point": dict(choice.point), "source": choice.source,
                "space": self.mapping.space.size if self.mapping.space is not None else 1}
