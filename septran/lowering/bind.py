"""Checking a mapping against the logic it maps and the target it names.

Runs before any code is generated, so that every mistake is reported at the
mapping's file:line with what to change, never as a TileLang traceback.
"""
from __future__ import annotations

import difflib

from septran.errors import LoweringError, MappingError
from septran.frontend.ir import Launch, PrimCall, TaskGraph, walk
from septran.mapping.schema import InstanceMapping, Mapping
from septran.target import Target


def _suggest(word, choices) -> str:
    close = difflib.get_close_matches(str(word), list(choices), n=1)
    return (f"did you mean {close[0]!r}? " if close else "") + f"choices: {', '.join(sorted(choices)) or '(none)'}"


def check_mapping(graph: TaskGraph, mapping: Mapping, target: Target) -> None:
    if mapping.target.value != target.name:
        raise MappingError(
            f"this mapping is for target {mapping.target.value!r}, but the compile is for {target.name!r}",
            mapping.target.loc,
            hint="pick the mapping of that target, or compile for the mapping's target",
        )
    for dim in mapping.search_dimensions:
        inst, key, val = dim
        raise LoweringError(
            f"tunable {key} of {inst} is a search dimension (!tune); autotuning is not implemented yet",
            val.loc,
            hint=f"pick one of {list(val.value.choices)} for now",
        )
    entry = mapping.instance(mapping.entrypoint.value)
    if entry.task_name.value != graph.entry:
        raise MappingError(
            f"the entrypoint {entry.name} maps task {entry.task_name.value}, but the logic's entry task is {graph.entry}",
            entry.task_name.loc,
        )
    _check_instance(graph, mapping, target, entry, set())


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
    params = [p.name for p in task.params] + [t.name for t in task.temps]
    for param, space in inst.mems.items():
        if param not in params:
            raise MappingError(
                f"{inst.name}.mems names {param!r}, which is not a parameter of {task.name}",
                inst.mems[param].loc,
                hint=_suggest(param, params),
            )
        if space.value not in proc.memories:
            raise MappingError(
                f"{inst.name} runs on {proc.name}, which cannot hold {param} in {space.value}",
                space.loc,
                hint=f"{proc.name} on {target.name} holds: {', '.join(proc.memories)}",
            )
    for t in task.temps:
        if t.name not in inst.mems:
            raise MappingError(
                f"{task.name} allocates temp {t.name} (logic {t.loc}) but {inst.name}.mems does not say where it lives",
                inst.key_loc("mems") if inst.mems else inst.loc,
                hint=f"add `{t.name}: <memory>` to mems; {proc.name} on {target.name} holds: {', '.join(proc.memories)}",
            )
    for param, loc_val in inst.copy.items():
        if param not in params:
            raise MappingError(f"{inst.name}.copy names {param!r}, which is not a parameter of {task.name}",
                               inst.key_loc("copy"), hint=_suggest(param, params))
        via = loc_val.get("via")
        if via is not None:
            mem = target.memories.get(via.value)
            if via.value not in proc.memories or mem is None or mem.is_global or mem.placed:
                raise MappingError(
                    f"{inst.name}.copy.{param}.via: {proc.name} on {target.name} cannot stage a transfer through {via.value}",
                    via.loc,
                    hint="name an on-chip memory TileLang allocates: "
                         + ", ".join(m for m in proc.memories if not target.memories[m].is_global and not target.memories[m].placed),
                )
    if inst.threads is not None and not target.has_threads:
        raise MappingError(f"target {target.name} has no thread count to choose", inst.key_loc("threads"), hint="delete `threads`")
    if inst.threads is not None:
        n = inst.threads.value
        if n > target.max_threads or n % target.thread_multiple:
            raise LoweringError(
                f"{inst.name}.threads is {n}; {target.name} takes a multiple of {target.thread_multiple} up to {target.max_threads}",
                inst.threads.loc,
            )
    launched = {s.callee: s for s, _ in walk(task.body) if isinstance(s, Launch)}
    for callee_task in inst.calls:
        if callee_task not in launched:
            raise MappingError(
                f"{inst.name}.calls maps {callee_task!r}, which {task.name} never launches",
                inst.calls[callee_task].loc,
                hint=_suggest(callee_task, [c for c in launched if not graph.tasks[c].leaf]),
            )
    for leaf_task, impl in inst.leaf_task_bindings.items():
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
        leaf = graph.tasks[leaf_task]
        prims = [s for s, _ in walk(leaf.body) if isinstance(s, PrimCall)]
        impl_ = target.leaves[impl.value]
        refused = [p for p in prims if not impl_.runs(p.signature)]
        if not prims or refused:
            raise MappingError(
                f"{impl.value} implements {', '.join(impl_.implements)}, but {leaf_task} calls "
                + (", ".join(f"{p.name!r} ({p.signature.kind}, {p.loc})" for p in refused) or "no primitive"),
                impl.loc,
                hint="bind an implementation that runs every primitive the leaf calls, or split the leaf",
            )
        for prim in prims:
            sig = prim.signature
            unsupported = [f for f, on in sig.flags.items() if on and f not in impl_.flags]
            if unsupported:
                raise MappingError(
                    f"{impl.value} cannot run {sig.name!r}: it does not support {', '.join(unsupported)}",
                    impl.loc,
                    hint=f"{sig.name}: {sig.meaning}; transpose the data, or bind another implementation",
                )
    for callee_task, stmt in launched.items():
        if graph.tasks[callee_task].leaf:
            if callee_task not in inst.leaf_task_bindings:
                raise MappingError(
                    f"{inst.name} launches leaf task {callee_task} (logic {stmt.loc}) but does not bind it",
                    inst.loc,
                    hint=f"add `leaf_task_bindings: {{{callee_task}: <impl>}}`; {target.name} has: {', '.join(target.leaves)}",
                )
            continue
        if callee_task not in inst.calls:
            raise MappingError(
                f"{inst.name} launches task {callee_task} (logic {stmt.loc}) but does not say which mapping runs it",
                inst.loc,
                hint=f"add `calls: {{{callee_task}: <task mapping>}}`",
            )
        callee = mapping.instance(inst.calls[callee_task].value)
        if callee.task_name.value not in graph.tasks:
            raise MappingError(f"unknown task {callee.task_name.value!r}", callee.task_name.loc,
                               hint=_suggest(callee.task_name.value, graph.tasks))
        if callee.task_name.value != callee_task:
            raise MappingError(
                f"{inst.name}.calls sends {callee_task} to {callee.name}, which maps task {callee.task_name.value}",
                inst.calls[callee_task].loc,
            )
        _check_instance(graph, mapping, target, callee, seen)
