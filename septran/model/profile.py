"""Where a model's time goes: every node of its compiled graphs timed, SepTran's kernels with their points.

    prof = septran.profile(model, *inputs)          # compiles (or takes a compiled model), runs, times
    print(prof)                                     # the table; prof.write_trace("step.json") for Perfetto
    SEPTRAN_PROFILE=1 python run.py                 # every compiled graph's runs but its first, written at exit

While a profile is on, a graph compiled by the septran backend runs node by node (``fx.Interpreter``) with a
clock around each node, instead of its usual path: each SepTran op is timed with its dispatch (``time``) and
its kernel call alone (``kernel``: the plan and the C), and its row names the variant that ran and its point
of the search space (``tuned``: from the tuning database; ``shipped``: from the one SepTran ships; ``bucket``: the mapping's point for the shape's
bucket, ``shape_points:``; ``first``: the untuned first point; ``fixed``: a mapping without ``!tune``). FLOPs and bytes are the call's, at its real sizes (``call_cost``). Per node and
call the interpreter adds a few microseconds, so a profiled step is slower than an unprofiled one; the shares
are of the profiled step.

The kernels called inside a node are seen by wrapping ``Kernel.__call__`` while a profile is on: the runtime
stands below the model level and knows no profiler, and its hot path keeps no hook for one.
"""
from __future__ import annotations

import atexit
import json
import logging
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import torch
import torch.fx as fx

from septran.model import call_cost
from septran.model.flops import is_view

log = logging.getLogger(__name__)


@dataclass
class Event:
    """One node's run: times in nanoseconds from the profile's start."""

    graph: int
    node: str
    op: str
    kind: str  # "septran", "torch" (compute), "glue" (views, shape arithmetic, getitem)
    start_ns: int
    dur_ns: int
    flops: int = 0
    bytes: int = 0
    kernel_ns: int = 0  # SepTran: the Kernel calls inside the node
    kernel: str = ""  # SepTran: the variant's tag
    point: str = ""  # SepTran: where its point came from, and the point
    shapes: str = ""


@dataclass
class Row:
    """A node over every recorded call: means per call."""

    graph: int
    node: str
    op: str
    kind: str
    calls: int
    us: float
    kernel_us: float
    flops: int
    bytes: int
    share: float
    kernel: str
    point: str

    @property
    def gflops(self) -> float:
        return self.flops / (self.us * 1e3) if self.us else 0.0

    @property
    def gbs(self) -> float:
        return self.bytes / (self.us * 1e3) if self.us else 0.0


@dataclass
class Profile:
    """The events of every profiled graph run; ``steps``: the spans of the model calls septran.profile made."""

    events: list[Event] = field(default_factory=list)
    graph_runs: list[tuple[int, int, int]] = field(default_factory=list)  # (graph, start_ns, dur_ns)
    steps: list[tuple[int, int]] = field(default_factory=list)  # (start_ns, dur_ns)
    origin_ns: int = field(default_factory=time.perf_counter_ns)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    # recording ---------------------------------------------------------------------------------------
    def run_graph(self, gm: fx.GraphModule, graph: int, args: tuple):
        start = time.perf_counter_ns()
        out = _Timed(gm, graph, self).run(*args)
        end = time.perf_counter_ns()
        with self._lock:
            self.graph_runs.append((graph, start - self.origin_ns, end - start))
        return out

    def step(self, fn: Callable[[], Any]):
        """Runs ``fn`` (one call of the model) as a step: the shares are of the steps' time."""
        start = time.perf_counter_ns()
        out = fn()
        self.steps.append((start - self.origin_ns, time.perf_counter_ns() - start))
        return out

    def add(self, event: Event) -> None:
        with self._lock:
            self.events.append(event)

    # reading -----------------------------------------------------------------------------------------
    @property
    def total_ns(self) -> int:
        """The time the shares are of: the steps', else the graph runs'."""
        spans = self.steps or [(s, d) for _, s, d in self.graph_runs]
        return sum(d for _, d in spans)

    @property
    def calls(self) -> int:
        """Model calls (steps), else graph runs."""
        return len(self.steps) or len(self.graph_runs)

    def rows(self, glue: bool = False) -> list[Row]:
        """One row per node, in the order they first ran (views and other glue only with ``glue``)."""
        groups: dict[tuple[int, str], list[Event]] = {}
        for e in self.events:
            if glue or e.kind != "glue":
                groups.setdefault((e.graph, e.node), []).append(e)
        total = self.total_ns or 1
        out = []
        for (graph, node), evs in groups.items():
            n = len(evs)
            last = evs[-1]
            out.append(Row(graph, node, last.op, last.kind, n, sum(e.dur_ns for e in evs) / n / 1e3,
                           sum(e.kernel_ns for e in evs) / n / 1e3, sum(e.flops for e in evs) // n,
                           sum(e.bytes for e in evs) // n, sum(e.dur_ns for e in evs) / total, last.kernel, last.point))
        return out

    def share(self, kind: str) -> float:
        """The share of the time that nodes of ``kind`` (septran, torch, glue) took."""
        return sum(e.dur_ns for e in self.events if e.kind == kind) / (self.total_ns or 1)

    def __str__(self) -> str:
        head = ("graph", "node", "runs", "point", "us", "kernel us", "GFLOP/s", "GB/s", "share")
        body = []
        for r in self.rows():
            runs = f"SepTran {r.kernel or r.op}" if r.kind == "septran" else f"torch {r.op}"
            body.append((str(r.graph), r.node, runs, r.point, f"{r.us:.1f}", f"{r.kernel_us:.1f}" if r.kernel_us else "",
                         f"{r.gflops:.2f}", f"{r.gbs:.2f}", f"{100 * r.share:.1f} %"))
        widths = [max(len(x) for x in col) for col in zip(head, *body)] if body else [len(h) for h in head]
        lines = ["  ".join(c.rjust(w) if i >= 4 else c.ljust(w) for i, (c, w) in enumerate(zip(line, widths))).rstrip()
                 for line in [head, *body]]
        per = self.total_ns / max(self.calls, 1) / 1e3
        lines.append(f"{self.calls} {'step' if self.steps else 'graph run'}(s), {per:.1f} us each (profiled); "
                     f"SepTran kernels {100 * self.share('septran'):.1f} %, torch compute {100 * self.share('torch'):.1f} %, "
                     f"views and glue {100 * self.share('glue'):.1f} %, the rest (interpreter, guards) "
                     f"{100 * max(0.0, 1 - self.share('septran') - self.share('torch') - self.share('glue')):.1f} %")
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"rows": [dict(asdict(r), gflops=r.gflops, gbs=r.gbs) for r in self.rows(glue=True)],
                "total_us": self.total_ns / 1e3, "calls": self.calls,
                "shares": {k: self.share(k) for k in ("septran", "torch", "glue")}}

    def chrome_trace(self) -> dict:
        """The Trace Event Format (chrome://tracing, ui.perfetto.dev): one complete event per node run, inside one
        per graph run, inside one per step."""
        us = 1e-3
        events: list[dict] = [{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "septran"}},
                              {"name": "thread_name", "ph": "M", "pid": 1, "tid": 1, "args": {"name": "model"}}]
        for i, (start, dur) in enumerate(self.steps):
            events.append({"name": f"step {i}", "cat": "step", "ph": "X", "ts": start * us, "dur": dur * us, "pid": 1, "tid": 1})
        for graph, start, dur in self.graph_runs:
            events.append({"name": f"graph {graph}", "cat": "graph", "ph": "X", "ts": start * us, "dur": dur * us,
                           "pid": 1, "tid": 1})
        for e in self.events:
            args = {"op": e.op, "shapes": e.shapes, "flops": e.flops, "bytes": e.bytes,
                    "GFLOP/s": round(e.flops / e.dur_ns, 3) if e.dur_ns else 0.0,
                    "GB/s": round(e.bytes / e.dur_ns, 3) if e.dur_ns else 0.0}
            if e.kind == "septran":
                args.update(kernel=e.kernel, point=e.point, kernel_us=e.kernel_ns * us)
            events.append({"name": e.kernel.split(".")[0] if e.kernel else e.node, "cat": e.kind, "ph": "X",
                           "ts": e.start_ns * us, "dur": e.dur_ns * us, "pid": 1, "tid": 1, "args": args})
        return {"traceEvents": events, "displayTimeUnit": "ns"}

    def write_trace(self, path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.chrome_trace()) + "\n")
        return path


# the node-by-node run ------------------------------------------------------------------------------------

class _Timed(fx.Interpreter):
    def __init__(self, gm: fx.GraphModule, graph: int, profile: Profile):
        super().__init__(gm)
        self.graph_id, self.profile = graph, profile

    def run_node(self, n: fx.Node):
        if n.op in ("placeholder", "output", "get_attr"):
            return super().run_node(n)
        sub = getattr(n.target, "sub", None)  # a launcher's segment (septran.model.launcher): its nodes, each timed
        if n.op == "call_function" and isinstance(sub, fx.GraphModule):
            args, _ = self.fetch_args_kwargs_from_env(n)
            return tuple(_Timed(sub, self.graph_id, self.profile).run(*args))
        with self._set_current_node(n):
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            kernels: list = []
            _CALLS.calls = kernels
            start = time.perf_counter_ns()
            try:
                out = getattr(self, n.op)(n.target, args, kwargs)
            finally:
                dur = time.perf_counter_ns() - start
                _CALLS.calls = None
        self.profile.add(_event(n, self.graph_id, start - self.profile.origin_ns, dur, args, kwargs, out, kernels))
        return out


def _event(n: fx.Node, graph: int, start: int, dur: int, args, kwargs, out, kernels: list) -> Event:
    from septran.model.rewrite import _op_text

    op = call_cost.septran_op(n)
    if op is not None:
        kind = "septran"
    elif isinstance(n.target, torch._ops.OpOverload) and not is_view(n) and _holds_tensor(out):
        kind = "torch"
    else:  # views, getitem, shape arithmetic, a memory plan's arena
        kind = "glue"
    text = f"septran.{op._overloadpacket.__name__}" if op is not None else _op_text(n)
    event = Event(graph, n.name, text, kind, start, dur, call_cost.flops(n, args, kwargs, out),
                  call_cost.nbytes(args, kwargs, out) if kind != "glue" else 0,
                  shapes=call_cost.shapes_text(args[1:] if call_cost.is_step(n) else args))
    if kind != "septran":
        return event
    variant = None
    if call_cost.is_step(n):  # the direct runner calls the kernel's plan itself: the step's time is the kernel's
        event.kernel_ns = dur
        plans = [p for p in getattr(n.target, "_plans", {}).values() if getattr(p, "variant", None) is not None]
        variant = plans[-1].variant if plans else getattr(n.target.kernel, "latest", None)
    elif kernels:
        event.kernel_ns = sum(d for _, d in kernels)
        variant = kernels[-1][0].latest
    if variant is not None:
        event.kernel, event.point = variant.tag, _point(variant.choice)
    return event


def _holds_tensor(value) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_holds_tensor(v) for v in value)
    return hasattr(value, "data_ptr")


def _point(choice) -> str:
    source = choice.source
    how = "tuned" if source.startswith("the tuning database") else "shipped" if source.startswith("the shipped") else \
        "first" if "first point" in source else \
        "fixed" if "no !tune" in source else "bucket" if source.startswith("the mapping's point") else source.split(":")[0]
    point = ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in sorted(choice.point.items()))
    return f"{how}: {point}" if point else how


# which kernels a node calls -------------------------------------------------------------------------------

class _Calls(threading.local):
    calls: Optional[list] = None


_CALLS = _Calls()
_WRAPPED: dict = {}
_WRAP_LOCK = threading.Lock()


def _observe_kernels(on: bool) -> None:
    """Wraps ``Kernel.__call__`` (on) or restores it (off): each call inside a timed node is noted with its time."""
    from septran.runtime.kernel import Kernel

    with _WRAP_LOCK:
        if on and not _WRAPPED:
            original = _WRAPPED["call"] = Kernel.__call__

            def observed(self, *args, **kwargs):
                calls = _CALLS.calls
                if calls is None:
                    return original(self, *args, **kwargs)
                start = time.perf_counter_ns()
                out = original(self, *args, **kwargs)
                calls.append((self, time.perf_counter_ns() - start))
                return out

            Kernel.__call__ = observed
        elif not on and _WRAPPED:
            Kernel.__call__ = _WRAPPED.pop("call")


# which profile is on ------------------------------------------------------------------------------------

_SCOPED: Optional[Profile] = None  # septran.profile's, while it runs
_PROCESS: Optional[Profile] = None  # SEPTRAN_PROFILE's (or the profile option's), written at exit


@contextmanager
def recording():
    """A profile of every septran graph run within (the graphs compiled with the profile option False excepted)."""
    global _SCOPED
    if _SCOPED is not None:
        yield _SCOPED
        return
    prof = _SCOPED = Profile()
    _observe_kernels(True)
    try:
        yield prof
    finally:
        _SCOPED = None
        if _PROCESS is None:
            _observe_kernels(False)


def _process_profile(trace: Optional[Path]) -> Profile:
    global _PROCESS
    with _WRAP_LOCK:
        if _PROCESS is None:
            _PROCESS = Profile()
            atexit.register(_write_at_exit, _PROCESS, trace)
    _observe_kernels(True)
    return _PROCESS


def _write_at_exit(prof: Profile, trace: Optional[Path]) -> None:
    if not prof.events:
        return
    from septran import env

    trace = trace or (env.dump_dir() or Path.cwd()) / "septran_profile.trace.json"
    try:
        prof.write_trace(trace)
        table = trace.with_name(trace.name.removesuffix(".json").removesuffix(".trace") + ".txt")
        table.write_text(str(prof) + "\n")
    except OSError as err:
        log.warning("septran profile: could not write %s: %s", trace, err)
        return
    from septran import progress

    progress.show(always=True)  # SEPTRAN_PROFILE asked for it: say where it is even without a logging set-up
    log.warning("profile of %d graph runs written to %s and %s", len(prof.graph_runs), table, trace)


def wrap(run: Callable, gm: fx.GraphModule, graph: int, option: Optional[bool]) -> Callable:
    """What the backend returns for a compiled graph: ``run`` itself, or, while a profile is on, ``gm`` (the
    rewritten graph) run node by node. ``option``: the compile's profile option (False: never profiled; True:
    always, as SEPTRAN_PROFILE=1; None: SEPTRAN_PROFILE and septran.profile decide)."""
    if option is False:
        return run
    from septran import env

    trace = env.profile()
    always = _process_profile(trace) if option or trace is not None else None
    first = [True]  # SEPTRAN_PROFILE leaves out each graph's first run: it builds the kernels

    def call(*args):
        prof = _SCOPED
        if prof is None and always is not None and not first[0]:
            prof = always
        first[0] = False
        if prof is None:
            return run(*args)
        return prof.run_graph(gm, graph, args)

    return call


def profile(model, *inputs, steps: int = 3, warmup: int = 1, trace=None, **compile_kwargs) -> Profile:
    """Times ``model(*inputs)``: compiled with the septran backend unless it is compiled already (a
    ``torch.compile`` result), run ``warmup`` times (the compile and the builds), then ``steps`` times with
    every node timed. ``trace``: a path the Chrome trace is written to. ``compile_kwargs`` go to ``torch.compile``
    (``dynamic``, ``fullgraph``, ``mode``)."""

    from septran.errors import CallError

    if steps < 1 or warmup < 0:
        raise CallError(f"septran.profile needs steps >= 1 and warmup >= 0, got steps={steps}, warmup={warmup}")
    compiled = model if isinstance(model, torch._dynamo.eval_frame.OptimizedModule) or hasattr(model, "septran_report") \
        else None
    if compiled is None:  # (by name: septran.model registered it; the backend module stands above this one)
        compiled = torch.compile(model, backend="septran", **compile_kwargs)
    with torch.no_grad():
        for _ in range(warmup if compiled is model else max(warmup, 1)):  # the first call compiles and builds
            compiled(*inputs)
        with recording() as prof:
            for _ in range(steps):
                prof.step(lambda: compiled(*inputs))
    if trace is not None:
        prof.write_trace(trace)
    return prof
