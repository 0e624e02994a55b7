"""Pass: check. The mapping against the logic it maps and the target it names, one function per rule.

Runs once per compile, before any code is generated, so that every mistake is
reported at the mapping's file:line with what to change, never as a TileLang
traceback. Later passes assume what these rules establish: every name
resolves, every memory is reachable, every launched task is mapped.
"""
from __future__ import annotations

import difflib

from septran.errors import LoweringError, MappingError
from septran.frontend.ir import Launch, Loop, PrimCall, TaskDef, TaskGraph, walk
from septran.lowering import compute_forms
from septran.lowering.dynamic import check_dynamic
from septran.mapping.schema import DEFAULT, InstanceMapping, Mapping
from septran.target import Target


def _suggest(word, choices) -> str:
    close = difflib.get_close_matches(str(word), list(choices), n=1)
    return (f"did you mean {close[0]!r}? " if close else "") + f"choices: {', '.join(sorted(choices)) or '(none)'}"


def check_mapping(graph: TaskGraph, mapping: Mapping, target: Target) -> None:
    _same_target(mapping, target)
    entry = _entry(graph, mapping)
    seen: set = set()
    _check_instance(graph, mapping, target, entry, seen)
    _grid(graph, mapping, target, entry)
    check_dynamic(graph, mapping)
    _space_names(mapping, target)
    _kept_dtypes(mapping, target)
    _staged_dtypes(mapping, target)


# whole-mapping rules ------------------------------------------------------------------
def _same_target(mapping: Mapping, target: Target) -> None:
    if mapping.target.value != target.name:
        raise MappingError(
            f"this mapping is for target {mapping.target.value!r}, but the compile is for {target.name!r}",
            mapping.target.loc,
            hint="pick the mapping of that target, or compile for the mapping's target",
        )


def _kept_dtypes(mapping: Mapping, target: Target) -> None:
    """``keep_dtypes`` names types the target would convert only where it can hold them unconverted."""
    for item in mapping.keep_dtypes:
        if item.value in target.converts and item.value not in target.holds_as_bits:
            raise MappingError(f"target {target.name} computes {item.value} in {target.converts[item.value]} and "
                               f"cannot hand a program {item.value} tensors as they are", item.loc,
                               hint=f"delete {item.value} from keep_dtypes")


def _staged_dtypes(mapping: Mapping, target: Target) -> None:
    """``stage_dtypes`` widens tiles only to a type the target computes in."""
    for narrow, wide in mapping.stage_dtypes:
        if wide.value not in target.dtypes or wide.value in target.converts:
            raise MappingError(f"stage_dtypes.{narrow.value}: target {target.name} does not compute in {wide.value}",
                               wide.loc, hint=f"delete {narrow.value} from stage_dtypes")


def _space_names(mapping: Mapping, target: Target) -> None:
    """Every choice of a ``!tune`` that names a leaf implementation or a memory names one the target has: the
    rules above check the first point only, and a typo among the other choices was pruned silently by the tuner
    (or, from a tuning record, failed at a call) instead of being reported at its line like the first."""
    if mapping.space is None:
        return
    for d in mapping.space.dimensions:
        parts = d.path.split(".")
        if len(parts) != 4 or parts[2] not in ("leaf_task_bindings", "mems"):
            continue
        if parts[2] == "leaf_task_bindings":
            names, what = target.leaves, f"target {target.name} has no leaf implementation"
        else:
            inst = mapping.instances.get(parts[1])
            proc = target.procs.get(inst.proc.value) if inst is not None else None
            if proc is None:
                continue  # the processor's own rule reports it
            names, what = proc.memories, f"{parts[1]} runs on {proc.name}, which has no memory"
        for choice in d.choices:
            if not isinstance(choice, str) or choice not in names:
                raise MappingError(f"{what} {choice!r} (a choice of this !tune)", d.loc, hint=_suggest(choice, names))


def _entry(graph: TaskGraph, mapping: Mapping) -> InstanceMapping:
    entry = mapping.instance(mapping.entrypoint.value)
    if entry.task_name.value != graph.entry:
        raise MappingError(
            f"the entrypoint {entry.name} maps task {entry.task_name.value}, but the logic's entry task is {graph.entry}",
            entry.task_name.loc,
        )
    return entry


def _grid(graph: TaskGraph, mapping: Mapping, target: Target, inst: InstanceMapping) -> None:
    """The entrypoint launches the grid: one parallel_range (of any rank: grid_fold.py), one launch of an inner task."""
    task = graph.tasks[inst.task_name.value]
    proc = target.procs[inst.proc.value]
    if not proc.grid:
        raise LoweringError(
            f"the entrypoint {inst.name} must run on a processor that launches the grid",
            inst.proc.loc,
            hint=f"use one of: {', '.join(p.name for p in target.procs.values() if p.grid)}",
        )
    body = task.body
    if len(body) != 1 or not isinstance(body[0], Loop) or not body[0].parallel:
        raise LoweringError(
            f"{task.name} runs on {inst.proc.value}, which launches a grid: its body must be one task.parallel_range loop",
            body[0].loc if body else task.loc,
            hint="move other work into the task it launches",
        )
    loop = body[0]
    if len(loop.body) != 1 or not isinstance(loop.body[0], Launch):
        raise LoweringError("a grid loop must contain exactly one task.launch (one program per grid point)", loop.loc)
    launch = loop.body[0]
    if graph.tasks[launch.callee].leaf:
        raise LoweringError(
            f"{task.name} launches leaf task {launch.callee} straight from the grid; a program is an inner task",
            launch.loc,
            hint=f"launch an inner task that launches {launch.callee}, and map it with `calls:` in {inst.name}",
        )
    callee = mapping.instance(inst.calls[launch.callee].value)
    if target.has_threads and callee.threads is None and target.default_threads is None:
        raise LoweringError(f"{callee.name} is one program of the grid and needs a thread count", callee.loc,
                            hint="add `threads: <n>`, e.g. 128 (or give the target a default: threads.default)")


# per-instance rules ----------------------------------------------------------------------
def _check_instance(graph: TaskGraph, mapping: Mapping, target: Target, inst: InstanceMapping, seen: set) -> None:
    if inst.name in seen:
        return
    seen.add(inst.name)
    task = graph.tasks.get(inst.task_name.value)
    if task is None:
        raise MappingError(f"unknown task {inst.task_name.value!r}", inst.task_name.loc, hint=_suggest(inst.task_name.value, graph.tasks))
    proc = target.procs.get(inst.proc.value)
    if proc is None:
        raise MappingError(
            f"target {target.name} has no processor {inst.proc.value!r}", inst.proc.loc, hint=_suggest(inst.proc.value, target.procs)
        )
    launched = {s.callee: s for s, _ in walk(task.body) if isinstance(s, Launch)}
    for rule in (_mems, _temps_placed, _copy, _halo, _threads, _schedule, _pipeline, _calls, _leaf_bindings, _accum_dtype, _launches_mapped):
        rule(graph, target, inst, task, proc, launched)
    for callee_task in launched:
        if not graph.tasks[callee_task].leaf:
            callee = _callee(graph, mapping, inst, callee_task)
            _check_instance(graph, mapping, target, callee, seen)


def _params(task: TaskDef) -> list[str]:
    return [p.name for p in task.params] + [t.name for t in task.temps]


def _mems(graph, target, inst, task, proc, launched) -> None:
    for param, space in inst.mems.items():
        if param != DEFAULT and param not in _params(task) + list(task.absent):  # (an optional tensor not passed)
            raise MappingError(f"{inst.name}.mems names {param!r}, which is not a parameter of {task.name}",
                               inst.mems[param].loc, hint=_suggest(param, _params(task)))
        if space.value not in proc.memories:
            what = "its parameters and temps" if param == DEFAULT else param
            raise MappingError(f"{inst.name} runs on {proc.name}, which cannot hold {what} in {space.value}",
                               space.loc, hint=f"{proc.name} on {target.name} holds: {', '.join(proc.memories)}")


def _temps_placed(graph, target, inst, task, proc, launched) -> None:
    for t in task.temps:
        if inst.mem(t.name) is None:
            raise MappingError(
                f"{task.name} allocates temp {t.name} (logic {t.loc}) but {inst.name}.mems does not say where it lives",
                inst.key_loc("mems") if inst.mems else inst.loc,
                hint=f"add `{t.name}: <memory>` to mems; {proc.name} on {target.name} holds: {', '.join(proc.memories)}",
            )


def _copy(graph, target, inst, task, proc, launched) -> None:
    for param, options in inst.copy.items():
        if param not in _params(task) + list(task.absent):
            raise MappingError(f"{inst.name}.copy names {param!r}, which is not a parameter of {task.name}",
                               inst.key_loc("copy"), hint=_suggest(param, _params(task)))
        for key, val in options.items():
            if key != "via" and key not in target.copy_options:
                raise MappingError(
                    f"{inst.name}.copy.{param}: {target.name} does not take the copy option {key!r}", val.loc,
                    hint=f"{target.name} takes: {', '.join(('via',) + target.copy_options)}")
        via = options.get("via")
        if via is not None:
            mem = target.memories.get(via.value)
            if via.value not in proc.memories or mem is None or mem.is_global or mem.placed:
                raise MappingError(
                    f"{inst.name}.copy.{param}.via: {proc.name} on {target.name} cannot stage a transfer through {via.value}",
                    via.loc,
                    hint="name an on-chip memory TileLang allocates: "
                         + ", ".join(m for m in proc.memories if not target.memories[m].is_global and not target.memories[m].placed),
                )


def _halo(graph, target, inst, task, proc, launched) -> None:
    for param, halo in inst.halo.items():
        if param not in _params(task) + list(task.absent):
            raise MappingError(f"{inst.name}.halo names {param!r}, which is not a parameter of {task.name}",
                               halo.loc, hint=_suggest(param, _params(task)))
        if not any(graph.tasks[c].leaf for c in launched):
            raise MappingError(f"{inst.name}.halo: {task.name} launches no leaf, and a halo widens what a leaf reads",
                               halo.loc, hint="put `halo` on the instance whose task launches the leaf (next to its mems)")


def _threads(graph, target, inst, task, proc, launched) -> None:
    if inst.threads is None:
        return
    if not target.has_threads:
        raise MappingError(f"target {target.name} has no thread count to choose", inst.key_loc("threads"), hint="delete `threads`")
    n = inst.threads.value
    if n > target.max_threads or n % target.thread_multiple:
        raise LoweringError(
            f"{inst.name}.threads is {n}; {target.name} takes a multiple of {target.thread_multiple} up to {target.max_threads}",
            inst.threads.loc,
        )


def _schedule(graph, target, inst, task, proc, launched) -> None:
    """``schedule:`` spreads a grid over threads: only where the processor runs the grid and offers schedules."""
    if inst.schedule is None:
        return
    if not proc.grid or not proc.schedules:
        offered = [p.name for p in target.procs.values() if p.grid and p.schedules]
        raise MappingError(
            f"{inst.name}.schedule: processor {proc.name} of {target.name} has no grid schedules to choose",
            inst.key_loc("schedule"),
            hint=f"set it on the instance mapped to {offered[0]}" if offered else "delete `schedule`")
    if inst.schedule.value not in proc.schedules:
        raise MappingError(f"{inst.name}.schedule is {inst.schedule.value!r}; {proc.name} offers {', '.join(proc.schedules)}",
                           inst.schedule.loc, hint=_suggest(inst.schedule.value, proc.schedules))


def _pipeline(graph, target, inst, task, proc, launched) -> None:
    """``pipeline: N`` pipelines the task's own sequential ranges: it needs one."""
    if inst.pipeline is not None and not any(isinstance(s, Loop) and not s.parallel for s in task.body):
        raise MappingError(
            f"{inst.name}.pipeline: {task.name} has no task.range at its top level to pipeline",
            inst.pipeline.loc, hint="delete `pipeline`, or set it on the instance whose task loops with task.range")


def _calls(graph, target, inst, task, proc, launched) -> None:
    for callee_task in inst.calls:
        if callee_task not in launched and not _elsewhere(graph, callee_task):
            raise MappingError(
                f"{inst.name}.calls maps {callee_task!r}, which {task.name} never launches",
                inst.calls[callee_task].loc,
                hint=_suggest(callee_task, [c for c in launched if not graph.tasks[c].leaf]),
            )


def _leaf_bindings(graph, target, inst, task, proc, launched) -> None:
    for leaf_task, impl in inst.leaf_task_bindings.items():
        if _elsewhere(graph, leaf_task):
            continue
        if leaf_task not in launched or not graph.tasks[leaf_task].leaf:
            raise MappingError(
                f"{inst.name}.leaf_task_bindings binds {leaf_task!r}, which is not a leaf task {task.name} launches",
                inst.leaf_task_bindings[leaf_task].loc,
                hint=_suggest(leaf_task, [c for c in launched if graph.tasks[c].leaf]),
            )
        if impl.value not in target.leaves:
            raise MappingError(
                f"target {target.name} has no leaf implementation {impl.value!r}", impl.loc, hint=_suggest(impl.value, target.leaves)
            )
        prims = [s for s, _ in walk(graph.tasks[leaf_task].body) if isinstance(s, PrimCall)]
        impl_ = target.leaves[impl.value]
        _cpu_flags(target, impl_, impl)
        refused = [p for p in prims if not impl_.runs(p.signature) and not _runs_as_form(impl_, p)]
        if not prims or refused:
            forms = compute_forms.described(impl_.implements)
            raise MappingError(
                f"{impl.value} implements {', '.join(impl_.implements)}, but {leaf_task} calls "
                + (", ".join(f"{p.name!r} ({p.signature.kind}, {p.loc}"
                             + (f": {p.signature.meaning}" if p.name == "compute" and forms else "") + ")"
                             for p in refused) or "no primitive"),
                impl.loc,
                hint=(f"{impl.value} computes a task.compute written as one of its forms ({forms}); "
                      if forms else "") + "bind an implementation that runs every primitive the leaf calls, or split the leaf",
            )
        for prim in prims:
            unsupported = [f for f, on in prim.signature.flags.items() if on and f not in impl_.flags]
            if unsupported:
                raise MappingError(
                    f"{impl.value} cannot run {prim.signature.name!r}: it does not support {', '.join(unsupported)}",
                    impl.loc,
                    hint=f"{prim.signature.name}: {prim.signature.meaning}; transpose the data, or bind another implementation",
                )


def _runs_as_form(impl, prim) -> bool:
    """A compute the implementation computes as one of its forms (lowering/compute_forms.py)."""
    form = compute_forms.recognise(prim)
    return form is not None and impl.runs(form.signature)


def _cpu_flags(target, impl, binding) -> None:
    """A leaf that needs CPU features (a matrix unit) runs only where the host CPU reports them."""
    if not impl.cpu_flags:
        return
    from septran.records import device

    missing = [f for f in impl.cpu_flags if f not in device.host_flags()]
    if missing:
        raise MappingError(
            f"{impl.name} needs a CPU that reports {', '.join(impl.cpu_flags)}; this one "
            f"({device.host_label()}) lacks {', '.join(missing)}", binding.loc,
            hint="bind another leaf here (tuning skips this one on this CPU), or run on a CPU that has it")


def _elsewhere(graph, task_name: str) -> bool:
    """A task this trace does not reach, where some optional tensor was not passed: another set of optional
    tensors may launch it (that trace checks it)."""
    return task_name not in graph.tasks and any(t.absent for t in graph.tasks.values())


def _accum_dtype(graph, target, inst, task, proc, launched) -> None:
    """An accumulator type every leaf the instance binds can accumulate in."""
    dtype = inst.accum_dtype.value if inst.accum_dtype is not None else "float32"
    for leaf_task, impl in inst.leaf_task_bindings.items():
        takes = target.leaves[impl.value].accum_dtypes
        if takes and dtype not in takes:
            raise MappingError(
                f"{impl.value} accumulates in {' or '.join(takes)}, but {inst.name} accumulates in {dtype}",
                inst.accum_dtype.loc if inst.accum_dtype is not None else impl.loc,
                hint=f"set `accum_dtype: {takes[0]}`, or bind another implementation")


def _launches_mapped(graph, target, inst, task, proc, launched) -> None:
    for callee_task, stmt in launched.items():
        if graph.tasks[callee_task].leaf:
            if callee_task not in inst.leaf_task_bindings:
                raise MappingError(
                    f"{inst.name} launches leaf task {callee_task} (logic {stmt.loc}) but does not bind it",
                    inst.loc,
                    hint=f"add `leaf_task_bindings: {{{callee_task}: <impl>}}`; {target.name} has: {', '.join(target.leaves)}",
                )
        elif callee_task not in inst.calls:
            raise MappingError(
                f"{inst.name} launches task {callee_task} (logic {stmt.loc}) but does not say which mapping runs it",
                inst.loc,
                hint=f"add `calls: {{{callee_task}: <task mapping>}}`",
            )


def _callee(graph: TaskGraph, mapping: Mapping, inst: InstanceMapping, callee_task: str) -> InstanceMapping:
    callee = mapping.instance(inst.calls[callee_task].value)
    if callee.task_name.value not in graph.tasks:
        raise MappingError(f"unknown task {callee.task_name.value!r}", callee.task_name.loc,
                           hint=_suggest(callee.task_name.value, graph.tasks))
    if callee.task_name.value != callee_task:
        raise MappingError(
            f"{inst.name}.calls sends {callee_task} to {callee.name}, which maps task {callee.task_name.value}",
            inst.calls[callee_task].loc,
        )
    return callee
