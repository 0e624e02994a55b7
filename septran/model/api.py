"""``septran.compile_model`` and ``septran.explain_model``: torch.compile with the ``"septran"`` backend."""
from __future__ import annotations

import functools
from typing import Optional, Sequence

import torch

from septran.model.backend import septran_backend
from septran.model.report import Report


def _as_tuple(example_inputs) -> tuple:
    if example_inputs is None:
        return ()
    return tuple(example_inputs) if isinstance(example_inputs, (list, tuple)) else (example_inputs,)


def compile_model(model, example_inputs: Optional[Sequence] = None, *, dynamic: Optional[bool] = None,
                  fullgraph: bool = False):
    """``model`` (a module or function) with SepTran kernels for what SepTran knows; the rest runs in torch.

    With ``example_inputs`` the model is captured and its kernels built now (under ``torch.no_grad()``), else
    at the first call. ``dynamic`` is torch.compile's. The result's ``septran_report()`` is the report of
    every graph compiled so far.
    """
    reports: list = []
    compiled = torch.compile(model, backend=functools.partial(septran_backend, reports=reports), dynamic=dynamic,
                             fullgraph=fullgraph)
    if example_inputs is not None:
        with torch.no_grad():
            compiled(*_as_tuple(example_inputs))

    def septran_report() -> Report:
        merged = Report()
        for r in reports:
            merged.extend(r)
        return merged

    compiled.septran_report = septran_report
    return compiled


def explain_model(model, example_inputs: Sequence, *, dynamic: Optional[bool] = None) -> Report:
    """The report of ``model`` on ``example_inputs``: every node of its captured graphs, the SepTran kernel that
    would run it or why it stays with torch, and the FLOPs share. Nothing is built; the model runs once in torch."""
    reports: list = []
    compiled = torch.compile(model, backend=functools.partial(septran_backend, reports=reports, dry=True),
                             dynamic=dynamic)
    with torch.no_grad():
        compiled(*_as_tuple(example_inputs))
    merged = Report()
    for r in reports:
        merged.extend(r)
    return merged
