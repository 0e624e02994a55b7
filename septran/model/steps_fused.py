"""Direct-runner steps of the ops that graph-level fusion adds (``septran.model.patterns.residual``).

They live here, not in ``septran.model.steps``, and register themselves there (``register``): the same
contract as ``steps.Gemm`` (``step(out, *the op's arguments)``, the op's own Python for any call the fast path
does not take), so the memory plan places their outputs like any other step's.
"""
from __future__ import annotations

from typing import Optional

import torch

from septran.model import step_table, steps


class GemmResidual(steps.Step):
    """``septran::gemm_residual`` on its plan: x @ op(w) + bias + residual, written into ``out`` when given."""

    takes_out = True

    def __init__(self, op):
        super().__init__(op)
        self._bias: Optional[torch.Tensor] = None

    def __call__(self, out, x, w, bias, residual, w_transposed):
        self.calls += 1
        k = x.shape[-1]
        n = w.shape[0] if w_transposed else w.shape[1]
        if not x.numel() or not n or not k or not x.is_contiguous() or not residual.is_contiguous() \
                or residual.shape != (*x.shape[:-1], n):
            return self._slow(x, w, bias, residual, w_transposed)
        if self.kernel is None:
            from septran.ops.gemm_residual import gemm_residual_kernel

            self.kernel = gemm_residual_kernel(steps._target(x.device), w_transposed)
        if bias is None:
            bias = self._bias
            if bias is None or bias.shape[0] != n or bias.dtype != x.dtype or bias.device != x.device:
                bias = self._bias = torch.zeros(n, dtype=x.dtype, device=x.device)
        a, r = x.view(-1, k), residual.view(-1, n)
        if out is None:
            c = self._run((a.shape, w.shape), (a, w, bias, r), {})
        else:
            c = self._run((a.shape, w.shape, 1), (a, w, bias, r), {"C": out.view(-1, n)})
        if c is None:
            return self._slow(x, w, bias, residual, w_transposed)
        return c.view(*x.shape[:-1], n)


def register() -> None:
    """Makes ``step_table.make`` give these ops their steps (idempotent)."""
    steps._MODULES.setdefault("gemm_residual", "gemm_residual")
    step_table.FAST.setdefault("gemm_residual", GemmResidual)
