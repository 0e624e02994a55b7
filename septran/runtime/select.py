"""Which logic task and which mapping file a compile uses.

Mapping selection, strongest first: an explicit mapping argument, then
SEPTRAN_MAPPING, then ``<folder>/<target>/<op>.yaml`` in the SEPTRAN_MAPPING_PATH
folders and the packaged ``mappings/``; the target is the explicit one, else
SEPTRAN_TARGET, else the detected accelerator's, else cpu.
"""
from __future__ import annotations

import difflib
import hashlib
import importlib.util
import types
from pathlib import Path
from typing import Optional, Union

import yaml

from septran import env, resources
from septran.errors import FrontendError, MappingError, SourceLoc
from septran.frontend.tracer import TaskFunction
from septran.frontend.user_errors import import_logic_module
from septran.mapping.schema import Mapping, load_mapping, parse_mapping
from septran.paths import check_user_path
from septran.target import TargetError, check_target_name, detect_target

Logic = Union[TaskFunction, types.ModuleType, str, Path]


def load_logic_file(path: Union[str, Path]) -> types.ModuleType:
    check_user_path(path, "the logic file's path", FrontendError)
    path = Path(path).resolve()
    check_user_path(path, "the logic file's path", FrontendError)
    if not path.is_file():
        raise FrontendError(f"logic file {path} does not exist")
    name = f"septran_logic.{path.stem}_{hashlib.sha256(str(path).encode()).hexdigest()[:8]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise FrontendError(f"logic file {path} is not a Python file", hint="name it <op>.py")
    return import_logic_module(spec, str(path))


def logic_namespace(logic: Logic) -> tuple[dict, Optional[str]]:
    """The names a logic defines (where the mapping's task names are looked up) and its file."""
    if isinstance(logic, (str, Path)):
        logic = load_logic_file(logic)
    if isinstance(logic, types.ModuleType):
        return vars(logic), getattr(logic, "__file__", None)
    if isinstance(logic, TaskFunction):
        names = logic.fn.__globals__
        return names, names.get("__file__")
    raise FrontendError(f"the logic must be a task function, a module or a file path, got {type(logic).__name__}")


def op_name(file: Optional[str], logic: Logic) -> str:
    """The operator's name, which names its mapping files: the logic file's stem."""
    if file:
        return Path(file).stem
    return logic.name.removesuffix("_logic") if isinstance(logic, TaskFunction) else str(logic)


def find_task(names: dict, file: Optional[str], logic: Logic, name: str, loc: SourceLoc) -> TaskFunction:
    if isinstance(logic, TaskFunction) and logic.name == name:
        return logic
    if isinstance(logic, TaskFunction) and name in getattr(logic, "alternatives", {}):
        return logic.alternatives[name]  # another algorithm built with the same arguments (a mapping picks it)
    found = names.get(name)
    if isinstance(found, TaskFunction):
        return found
    tasks = [k for k, v in names.items() if isinstance(v, TaskFunction)]
    close = difflib.get_close_matches(name, tasks, n=1)
    raise MappingError(
        f"the logic has no task {name!r}",
        loc,
        hint=(f"did you mean {close[0]!r}? " if close else "") + f"tasks in {file or 'the logic'}: {', '.join(tasks)}",
    )


def mapping_from(value: Union[str, Path, dict]) -> Mapping:
    """A mapping given as a file path, as YAML text (a string with a line break: a notebook cell) or as a dict
    (what the YAML would hold; no ``!tune`` there). Errors name ``<mapping text>`` or ``<mapping dict>`` and the line."""
    if isinstance(value, dict):
        try:
            text = yaml.safe_dump(value, sort_keys=False)
        except yaml.YAMLError as err:
            raise MappingError(f"the mapping dict cannot be written as YAML: {err}",
                               hint="use only dicts, lists, strings and numbers") from None
        return parse_mapping(text, "<mapping dict>")
    if isinstance(value, str) and "\n" in value:
        return parse_mapping(value, "<mapping text>")
    if not isinstance(value, (str, Path)):
        raise MappingError(f"a mapping is a file path, YAML text or a dict, got {type(value).__name__}")
    return load_mapping(value)


def with_target(mapping: Mapping, target: Optional[str]) -> Mapping:
    """The mapping with its target settled: a file that names none (the design notes' spelling) takes ``target``
    (the compile's argument), else SEPTRAN_TARGET, else this machine's (as a mapping file is chosen); one that
    names a target other than ``target`` is refused, naming both. A mapping's own ``target:`` wins over
    SEPTRAN_TARGET, which chooses among mapping files (SEPTRAN_MAPPING's with it), as before."""
    named = mapping.target.value
    if named is None:
        if target is not None:
            chosen, source = target, f"septran.compile(..., target={target!r})"
        elif env.target_override() is not None:
            chosen, source = env.target_override(), f"SEPTRAN_TARGET={env.target_override()}"
        else:
            chosen = detect_target()
            source = f"this machine's target, {chosen}: {mapping.file} names none; set SEPTRAN_TARGET or pass target="
        check_target_name(chosen, source=f"from {source}", error=TargetError)
        return mapping.with_target(chosen, SourceLoc(f"<{source}>", 0))
    if target is not None and target != named:
        raise MappingError(
            f"asked to compile for {target!r} with a mapping for {named!r}: septran.compile(..., target={target!r}) "
            f"and {mapping.file}'s `target: {named}` disagree",
            mapping.target.loc,
            hint="pass that target's mapping, or leave `target` out",
        )
    return mapping


def choose_mapping(op: str, mapping: Union[Mapping, str, Path, None], target: Optional[str]) -> Mapping:
    if env.target_override() is not None:  # refused when set at all, not only where it is used
        check_target_name(env.target_override(), source="from SEPTRAN_TARGET", error=TargetError)
    if isinstance(mapping, Mapping):
        return mapping
    if mapping is not None:
        chosen = mapping_from(mapping)
        override, named = env.target_override(), chosen.target.value
        if target is None and override is not None and named is not None and named != override:
            # a mapping passed by the caller, for another target than SEPTRAN_TARGET names: say so, never pick one
            # silently (SEPTRAN_MAPPING, which forces one file whatever the target, is the documented exception)
            raise MappingError(
                f"SEPTRAN_TARGET={override} and {chosen.file}'s `target: {named}` disagree",
                chosen.target.loc,
                hint=f"pass target={named!r} to compile for the mapping's target, pass {override}'s mapping, "
                     "or unset SEPTRAN_TARGET",
            )
        return chosen
    forced = env.mapping_override()
    if forced is not None:
        return load_mapping(forced)
    target = target or env.target_override() or detect_target()
    check_target_name(target, error=TargetError)
    tried = []
    for folder in resources.mapping_folders():
        candidate = folder / target / f"{op}.yaml"
        tried.append(str(candidate))
        if candidate.is_file():
            return load_mapping(candidate)
    raise MappingError(
        f"no mapping of operator {op!r} for target {target!r}",
        hint="looked for " + ", ".join(tried) + "; write one, add its folder to SEPTRAN_MAPPING_PATH, or set SEPTRAN_MAPPING",
    )
