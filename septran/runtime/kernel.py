"""The compiled operator a user calls: argument checks, output allocation, per-shape variants."""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Optional

from septran import env
from septran.errors import CallError
from septran.frontend.ir import Privilege, TaskGraph
from septran.frontend.shapes import ShapeRelations
from septran.lowering import Specialization
from septran.lowering.bind import check_mapping
from septran.mapping.schema import Mapping
from septran.runtime import dynamic_dims, notebook, optional, outputs as passed_outputs, points, workspaces
from septran.runtime import scalars as scalar_args, vendor
from septran.runtime.variant import Variant
from septran.target import Target

log = logging.getLogger(__name__)


def _dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


@dataclass(frozen=True)
class _Arg:
    name: str
    role: str  # input, output, inout
    privilege: Privilege


def _call_key(args) -> tuple:
    """A positional call's plan: tensors' shapes and dtypes, scalars' types and exact values (True == 1, -0.0 == 0.0)."""
    return tuple([(a.shape, a.dtype) if hasattr(a, "data_ptr") else (type(a), repr(a)) for a in args])


class _Plan:
    """A call whose shapes, dtypes and scalars were seen before: only what must be checked again per call
    (the tensors' device and layout), the outputs' allocation and the kernel's call."""

    def __init__(self, kernel: "Kernel", variant: Variant, outputs: dict, device):
        import torch

        self.kernel, self.variant, self.fn = kernel, variant, variant.build()
        self.n_inputs = len(kernel.inputs)
        self.device = device  # the call's (a kernel whose outputs are all read-write allocates none)
        zeros = variant.program.read_outputs
        self.outputs = tuple((torch.zeros if a.name in zeros else torch.empty, tuple(outputs[a.name].shape), outputs[a.name].dtype)
                             for a in kernel.outputs)
        vendor_lib = kernel.target.vendor
        self.checks_errors = vendor_lib is not None and vendor_lib.take_error is not None

    def __call__(self, args):
        ins = args[: self.n_inputs]
        device = self.device
        for t in ins:
            if t.device != device or not t.is_contiguous():
                return None  # the full path explains what is wrong
        # torch.empty(*shape, ...) costs half of torch.empty(shape, ...): for a small kernel, the call's overhead is
        # mostly this allocation.
        outs = [make(*shape, dtype=dtype, device=device) for make, shape, dtype in self.outputs]
        self.fn(*ins, *outs, *workspaces.allocate(self.variant.program, device))
        if self.checks_errors:
            vendor.check_errors(self.kernel.target, self.variant.program.name)
        self.kernel._last = self.variant
        return outs[0] if len(outs) == 1 else tuple(outs)


class Kernel:
    """``septran.compile``'s result: call it on torch tensors."""

    def __init__(self, graph: TaskGraph, mapping: Mapping, target: Target, autotune: Optional[bool] = None, logic=None):
        self.graph = graph
        self.logic = logic  # the entry task function: traced again for a call that passes optional tensors
        self.optional = graph.entry_task.absent  # the optional tensors (M=None); `graph` is the trace without them
        self._with_optional: dict[tuple, "Kernel"] = {}
        self.mapping = mapping  # for a search space (!tune): its first point, with .space
        self.target = target
        self.autotune = env.autotune() if autotune is None else autotune
        self._warned_first_point = False
        check_mapping(graph, mapping, target)  # mapping mistakes surface at compile time, not at the first call
        self.shapes = ShapeRelations(graph)
        self.dynamic = dynamic_dims.dynamic_axes(mapping, self.shapes)  # (param, axis) that stay symbolic
        self._specs: dict[tuple, Specialization] = {}
        self._variants: dict[tuple, Variant] = {}
        self._last: Optional[Variant] = None
        self._plans: dict[tuple, _Plan] = {}  # positional calls seen before -> what to allocate and run
        entry = graph.entry_task
        self.args = tuple(
            _Arg(p.name, graph.privilege(entry.name, p.name).role, graph.privilege(entry.name, p.name)) for p in entry.params
        )
        self.inputs = tuple(a for a in self.args if a.role != "output")
        self.outputs = tuple(a for a in self.args if a.role == "output")
        self.scalars = {sp.name: sp.default for sp in entry.scalars}  # name -> default, after the inputs
        passed_outputs.check_declared(self)

    def signature(self) -> str:
        """``entry(inputs, M=None, eps=1e-05) -> (outputs)``: how it is called."""
        ins = ", ".join([a.name for a in self.inputs] + [f"{n}=None" for n in self.optional]
                        + [f"{k}={v:g}" for k, v in self.scalars.items()])
        return f"{self.graph.entry}({ins}) -> ({', '.join(a.name for a in self.outputs)})"

    def __repr__(self) -> str:
        return f"<septran.Kernel {self.signature()} on {self.target.name}, mapping {self.mapping.file}>"

    def _repr_markdown_(self) -> str:  # Jupyter
        return notebook.kernel_markdown(self)

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
                raise CallError(f"specialize() needs input {a.name}", hint=f"inputs: {', '.join(x.name for x in self.inputs)}")
            val = args.pop(a.name)
            if hasattr(val, "shape") and hasattr(val, "dtype"):
                described[a.name] = (tuple(val.shape), _dtype_name(val.dtype))
            else:
                shape, dtype = val
                described[a.name] = (tuple(int(s) for s in shape), _dtype_name(dtype))
        scalars = self._scalar_values({k: args.pop(k) for k in list(args) if k in self.scalars})
        if args:
            raise CallError(f"specialize() got unknown arguments {', '.join(args)}")
        return self._variant(described, scalars)

    def _scalar_values(self, given: dict) -> dict[str, float]:
        out = dict(self.scalars)
        for name, value in given.items():
            out[name] = scalar_args.value(name, value)
        return out

    def _specialization(self, described: dict[str, tuple[tuple[int, ...], str]], scalars: dict) -> tuple[tuple, Specialization]:
        """Every parameter's shape and dtype for these inputs, checked; cheap (no lowering), cached."""
        # A scalar is part of the program (like Triton's constexpr): a new value is a new variant.
        key = tuple(sorted(described.items())) + tuple(sorted((k, scalar_args.key(v)) for k, v in scalars.items()))
        spec = self._specs.get(key)
        if spec is None:
            self._check_described(described)
            shapes = self.shapes.solve({n: s for n, (s, _) in described.items()})
            spec = self._specs[key] = Specialization(shapes, passed_outputs.program_dtypes(self, described), scalars)
        return key, spec

    def _variant(self, described: dict[str, tuple[tuple[int, ...], str]], scalars: Optional[dict] = None) -> Variant:
        key, spec = self._specialization(described, scalars if scalars is not None else dict(self.scalars))
        if self.dynamic:  # one variant serves every size of the dynamic dimensions
            dynamic_dims.check_sizes(spec.shapes, self.dynamic)
            key = tuple(sorted(dynamic_dims.masked_described(described, self.dynamic).items())) + key[len(described):]
        variant = self._variants.get(key)
        if variant is None:
            spec = dynamic_dims.any_size(spec, self.dynamic)  # (the spec itself where nothing is dynamic)
            variant = self._variants[key] = Variant(self, spec, points.choose(self, spec, described))
            log.info("specialised %s for %s", self.graph.entry, key)
        self._last = variant
        return variant

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

    # calling -------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if self.optional:  # one trace per set of optional tensors passed
            kernel, args, kwargs = optional.route(self, args, kwargs)
            if kernel is not self:
                out = kernel(*args, **kwargs)
                self._last = kernel._last
                return out
        if not kwargs:  # a call like an earlier one: no binding, no shape solving, no lookup of the variant
            try:
                plan = self._plans.get(_call_key(args))
            except TypeError:  # an unhashable argument: the full path says what is wrong with it
                plan = None
            if plan is not None:
                done = plan(args)
                if done is not None:
                    return done
        return self._call(args, kwargs)

    def _call(self, args, kwargs):
        import torch

        positional = not kwargs  # before _bind takes the scalars out of kwargs
        tensors, scalars = self._bind(args, kwargs)
        for name, t in tensors.items():
            if not isinstance(t, torch.Tensor):
                raise CallError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
            if t.device.type != self.target.torch_device:
                raise CallError(
                    f"{name} is on {t.device}, but target {self.target.name} runs on {self.target.torch_device} tensors",
                    hint=f"move it with .to('{self.target.torch_device}'), or compile for another target (SEPTRAN_TARGET)",
                )
            if not t.is_contiguous():
                raise CallError(f"{name} is not contiguous", hint=f"pass {name}.contiguous()")
        described = {n: (tuple(t.shape), _dtype_name(t.dtype)) for n, t in tensors.items()}
        _, spec = self._specialization(described, scalars)  # shapes without lowering: empty outputs need no program
        passed_outputs.check_passed(self, tensors)
        given, user = tensors, passed_outputs.user_dtypes(self, described)
        tensors, write_back = passed_outputs.to_program(self, tensors, spec.dtypes)
        device = next(iter(tensors.values())).device if tensors else torch.device(self.target.torch_device)
        written = [spec.shapes[a.name] for a in self.outputs] + [tensors[a.name].shape for a in self.inputs if a.role == "inout"]
        # Empty inputs do not stop the program: a nonempty output still needs it (a sum over K = 0 is its
        # identity, then the epilogue runs; TileLang takes extents of 0). Only where there is nothing to
        # write is there nothing to run, and nothing to compile.
        variant = self._variant(described, scalars) if not written or any(math.prod(s) for s in written) else None
        outputs = {}
        for a in (a for a in self.outputs if a.name in tensors and variant is not None):
            if a.name in variant.program.read_outputs:  # a passed accumulator starts from zero, as an allocated one
                tensors[a.name].zero_()
        for a in (a for a in self.outputs if a.name not in tensors):
            # Only an output the program reads before writing it (an accumulator kept in global memory) needs a
            # first value: zeros, a sum's identity. Filling the others would cost a pass over memory per call.
            zero = variant is not None and a.name in variant.program.read_outputs
            make = torch.zeros if zero else torch.empty
            outputs[a.name] = make(spec.shapes[a.name], dtype=getattr(torch, spec.dtypes[a.name]), device=device)
        if variant is not None:
            every = [tensors[a.name] if a.name in tensors else outputs[a.name] for a in self.inputs + self.outputs]
            every = [t.reshape(1) if t.dim() == 0 else t for t in every]  # the program holds a rank-0 tensor as (1,)
            variant.build()(*map(passed_outputs.row_major, every), *workspaces.allocate(variant.program, device))
            vendor.check_errors(self.target, variant.program.name)
            if positional and not write_back and given is tensors and all(t.numel() and t.dim() for t in every):
                self._plans[_call_key(args)] = _Plan(self, variant, outputs, device)
        for name, t in write_back.items():
            t.copy_(tensors[name])
        result = tuple(given[a.name] if a.name in given else outputs[a.name].to(getattr(torch, user[a.name]))
                       for a in self.outputs)
        return result[0] if len(result) == 1 else result

    def _bind(self, args, kwargs) -> tuple[dict, dict]:
        names = [a.name for a in self.inputs]
        scalar_names = list(self.scalars)
        if len(args) > len(names) + len(scalar_names):
            raise CallError(
                f"{self.graph.entry} takes {len(names)} inputs ({', '.join(names)})"
                + (f" and the scalars {', '.join(scalar_names)}" if scalar_names else "") + f", got {len(args)} arguments",
                hint="outputs (" + ", ".join(a.name for a in self.outputs) + ") are allocated and returned by the kernel, "
                     "or passed by name (" + ", ".join(f"{a.name}=..." for a in self.outputs) + ")",
            )
        bound = dict(zip(names, args))
        given = dict(zip(scalar_names, args[len(names):]))
        for k in [k for k in kwargs if k in self.scalars]:
            if k in given:
                raise CallError(f"scalar {k} given twice")
            given[k] = kwargs.pop(k)
        out_names = [a.name for a in self.outputs]
        for k, v in kwargs.items():
            if k in out_names:  # an output the caller passes: the kernel writes into it
                bound[k] = v
                continue
            if k not in names:
                raise CallError(f"{self.graph.entry} has no input or output {k!r}",
                                hint=f"inputs: {', '.join(names)}; outputs: {', '.join(out_names)}")
            if k in bound:
                raise CallError(f"input {k} given twice")
            bound[k] = v
        missing = [n for n in names if n not in bound]
        if missing:
            raise CallError(f"missing input {', '.join(missing)}", hint=f"call with ({', '.join(names)})")
        return bound, self._scalar_values(given)

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
