"""The front door: ``septran.compile`` and ``@septran.jit``.

It stands above the runtime and the tuner: a kernel compiled with ``autotune=True`` is handed the tuner
(``septran.tuning``), which the runtime calls for a shape the tuning database holds no point for.
"""
from __future__ import annotations

import functools
import threading
from pathlib import Path
from typing import Optional, Union

from septran import env
from septran.errors import SepTranError
from septran.frontend import implicit_host
from septran.frontend.tracer import TaskFunction
from septran.mapping.schema import Mapping
from septran.runtime.kernel import Kernel
from septran.runtime.select import Logic, choose_mapping, find_task, logic_namespace, op_name, with_target
from septran.target import TargetError, check_target_name, load_target


def compile(  # noqa: A001 - the name users expect, as tilelang.compile
    logic: Optional[Logic] = None,
    mapping: Union[Mapping, str, Path, dict, None] = None,
    *,
    logic_file: Union[str, Path, None] = None,
    mapping_file: Union[str, Path, None] = None,
    target: Optional[str] = None,
    autotune: Optional[bool] = None,
) -> Kernel:
    """Fuses a logic and a mapping into a callable kernel.

    ``logic`` is a task function, a module or a logic file path (or pass
    ``logic_file=``). ``mapping`` is a mapping file path (or ``mapping_file=``), YAML text (a string with a
    line break, e.g. a notebook cell's) or a dict of what the YAML would hold;
    without one, SEPTRAN_MAPPING or ``mappings/<target>/<op>.yaml`` is used.
    ``target`` defaults to the mapping's ``target``. For a mapping with
    ``!tune``, each call's shapes run the tuning database's best point; with
    ``autotune=True`` (or SEPTRAN_AUTOTUNE=1) a shape with none is tuned first,
    otherwise the space's first point runs.
    """
    if (logic is None) == (logic_file is None):
        raise TypeError("septran.compile takes the logic either as `logic` or as `logic_file=`, exactly once")
    if mapping is not None and mapping_file is not None:
        raise TypeError("septran.compile takes the mapping either as `mapping` or as `mapping_file=`, not both")
    if target is not None:  # a name from the registry, checked before any file is read
        check_target_name(target, source="the `target` argument", error=TargetError)
    logic = logic if logic is not None else logic_file
    names, file = logic_namespace(logic)
    m = with_target(choose_mapping(op_name(file, logic), mapping if mapping is not None else mapping_file, target), target)
    tgt = load_target(m.target.value, m.target.loc)
    entry = m.instance(m.entrypoint.value)
    entry_fn = implicit_host.find(names, m) or find_task(names, file, logic, entry.task_name.value, entry.task_name.loc)
    return Kernel(implicit_host.graph_of(entry_fn), m, tgt, tuner=_tuner(autotune), logic=entry_fn)


def _tuner(autotune: Optional[bool]):
    """The tuner a kernel is handed: ``septran.tuning``'s with ``autotune`` (default: SEPTRAN_AUTOTUNE), else none."""
    if not (env.autotune() if autotune is None else autotune):
        return None
    from septran.tuning.api import autotuner

    return autotuner


class JITKernel:
    """``@septran.jit``: compiles on first use with the mapping the environment selects."""

    def __init__(self, fn: TaskFunction, mapping, target):
        if not isinstance(fn, TaskFunction):
            raise TypeError("@septran.jit goes above @task.define (decorate a task)")
        self.fn = fn
        self._mapping = mapping
        self._target = target
        self._kernel: Optional[Kernel] = None
        self._lock = threading.Lock()
        functools.update_wrapper(self, fn.fn)

    @property
    def kernel(self) -> Kernel:
        with self._lock:
            if self._kernel is None:
                self._kernel = compile(self.fn, self._mapping, target=self._target)
            return self._kernel

    def __call__(self, *args, **kwargs):
        return self.kernel(*args, **kwargs)

    def __repr__(self) -> str:
        """As ``septran.compile``'s kernel renders (compiling is cheap: tracing and checks, nothing built)."""
        try:
            return repr(self.kernel)
        except SepTranError as err:
            return f"<septran.jit {self.fn.name}: does not compile: {err.message}>"

    def _repr_markdown_(self) -> str:  # Jupyter
        try:
            return self.kernel._repr_markdown_()
        except SepTranError as err:
            return f"**SepTran kernel** `{self.fn.name}` (`@septran.jit`) does not compile:\n\n```\n{err}\n```\n"

    def specialize(self, **args):
        return self.kernel.specialize(**args)

    @property
    def tilelang_source(self) -> str:
        return self.kernel.tilelang_source

    @property
    def device_source(self) -> str:
        return self.kernel.device_source

    def explain(self) -> str:
        return self.kernel.explain()


def jit(fn: Optional[TaskFunction] = None, *, mapping: Union[str, Path, dict, Mapping, None] = None, target: Optional[str] = None):
    """``@septran.jit`` or ``@septran.jit(mapping=..., target=...)`` above ``@task.define``."""
    if fn is None:
        return lambda f: JITKernel(f, mapping, target)
    return JITKernel(fn, mapping, target)
