"""``task.as_index(pos)``: a scalar parameter's value as an integer of tile indices and loop bounds.

A scalar is a constant of the program (each value its own variant), so in an index it is a number once a call
fixes it: the lowering substitutes it, and refuses a value that is not an integer. Used to place a tile at a
position the caller chooses (a KV cache written at ``pos``).
"""
from __future__ import annotations

from septran.errors import FrontendError
from septran.expr import Var
from septran.frontend import elementwise as el
from septran.frontend import tracer


def as_index(scalar):
    """The value of scalar parameter ``scalar`` (``pos=0``) as an integer for tile indices and loop bounds."""
    frame = tracer.current("as_index")
    loc = tracer.caller_loc()
    if not isinstance(scalar, el.ScalarRef):
        raise FrontendError(f"task.as_index takes a scalar parameter of this task (pos=0), got {type(scalar).__name__}", loc)
    if scalar.param not in frame.scalars:
        raise FrontendError(f"task.as_index: {scalar.param.name} is a scalar of another task", loc,
                            hint=f"add {scalar.param.name}=<default> to {frame.task.name}'s parameters and pass it down")
    return Var(scalar.param.sym)

