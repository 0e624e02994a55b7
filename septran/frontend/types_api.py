"""Task Lang's types: ``task.cast`` in computes and ``@task.define(dtype=...)`` for outputs' element types."""
from __future__ import annotations

import inspect

from septran.dtypes import DTYPES
from septran.errors import FrontendError
from septran.frontend import elementwise as el
from septran.frontend import tracer
from septran.frontend.ir import Param
from septran.frontend.tracer import TaskFunction, caller_loc

__all__ = ["DTYPES", "cast", "temp_dtype", "with_dtypes"]


def with_dtypes(tf: TaskFunction, dtype, loc) -> TaskFunction:
    if dtype is None:
        return tf
    params = inspect.signature(tf.fn).parameters
    if not isinstance(dtype, dict):
        raise FrontendError("@task.define: dtype= takes a dict, e.g. dtype={\"loss\": \"float32\"}", loc)
    for out, want in dtype.items():
        if out not in params:
            raise FrontendError(f"@task.define: dtype= names {out!r}, which is not a parameter of {tf.name}", loc)
        if not isinstance(want, str) or (want not in DTYPES and want not in params):
            raise FrontendError(f"@task.define: the dtype of {out} must be one of {', '.join(DTYPES)} or a parameter's "
                                f"name, got {want!r}", loc)
    tf.dtypes = dict(dtype)
    return tf


def cast(x, dtype):
    """``x`` converted in task.compute: ``task.cast(T[i], "float32")``, or ``task.cast(x, X)`` (X's element type)."""
    loc = caller_loc()
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise FrontendError(f"task.cast: {dtype!r} is not a type; use one of {', '.join(DTYPES)}", loc)
        to = dtype
    else:
        to = tracer.unwrap(dtype, "cast", "the type", loc)
        if not isinstance(to, Param):
            raise FrontendError("task.cast: the type is a type's name or a parameter of this task", loc)
    try:
        return el.Cast(to, el.as_elem(x))
    except TypeError as err:
        raise FrontendError(f"task.cast: {err}", loc) from None


def temp_dtype(dtype, loc) -> tuple:
    """``task.temp``'s dtype=: (the parameter whose type it takes, or None; a type by name, or None)."""
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise FrontendError(f"task.temp: dtype {dtype!r} is not a type; use one of {', '.join(DTYPES)}", loc)
        return None, dtype
    if dtype is None:
        return None, None
    arg = tracer.unwrap(dtype, "temp", "dtype", loc)
    if not isinstance(arg, Param):
        raise FrontendError("task.temp: dtype= takes a type's name or a parameter of this task (its element type is used)", loc)
    return arg.name, None
