"""A recorded kernel call whose plan converts types (``record.Recorder``'s mixin): on cpu, a step whose kernel
computes bfloat16 in float32 copies (the norms, RoPE, attention, elementwise kernels) is launched with the plan's
conversions around its call, as ``Plan._run`` makes them: each converted tensor a float32 scratch buffer, an input
widened into it before the call (exact), a written tensor narrowed back after it, as torch rounds (to nearest even;
``glue_source``'s ``st_f32_bf16``). The recorder describes the graph's own (bfloat16) tensors as for any call, then
puts the copies between them and the kernel."""
from __future__ import annotations

import math

import sympy
import torch

from septran.model.launcher.cexpr import Unsupported
from septran.model.launcher.glue_source import Each, Load
from septran.model.launcher.views import Desc, contiguous_strides


class Conversions:
    """Needs ``program``, ``_tmp``, ``_ptr``, ``_check``, ``_zeros`` and ``_call`` (record.Recorder)."""

    @staticmethod
    def _converts(lay) -> bool:
        """A plan the launcher calls with conversions around it: bfloat16 tensors the program computes in float32
        copies (inputs widened before the call; outputs, and in-out tensors, written back narrowed after it; an
        allocated output returned narrowed), otherwise as the plain plan (no reordering or reshape)."""
        narrowed = [dtype for _, dtype in lay.results if dtype is not None]
        return bool(lay.convert or narrowed) and lay.order is None and not lay.reshape and \
            all(dtype == torch.bfloat16 for dtype in narrowed) and \
            all(dtype == torch.float32 for _, dtype, _ in lay.convert) and \
            set(lay.write_back) <= {i for i, _, _ in lay.convert}

    def _graph_tensors(self, n, lay, kernel_tensors, given, result) -> list:
        """The tensors of the call as the graph holds them: the call's own where the plan converts (its float32
        copies become scratch buffers, ``_converted``), and an output returned narrowed as the step's result holds
        it (that buffer itself or a view of it, which ``_match`` follows), else as the narrowed output alone (a
        result in another layout: ``Recorder._relayout`` checks that it is a copy of it)."""
        tensors = list(kernel_tensors)
        for i, _, _ in lay.convert:
            tensors[i] = given[i]
        for k, dtype in lay.results:
            if dtype is None:
                continue
            t = kernel_tensors[k]
            if not isinstance(result, torch.Tensor) or k < len(lay.take) or len(lay.results) != 1:
                raise Unsupported(f"{n.name}: its kernel's output is converted into a result the launcher cannot place")
            tensors[k] = want = t.to(result.dtype)
            if result.untyped_storage().nbytes() == t.numel() * result.element_size():
                narrowed = torch.empty(0, dtype=result.dtype).set_(result.untyped_storage(), 0, t.shape, t.stride())
                if torch.equal(narrowed, want):
                    tensors[k] = narrowed
        return tensors

    def _planned_call(self, n, plan, fn, kernel_tensors, params: dict, converts: bool) -> None:
        """The kernel's call as its plan makes it: accumulators zeroed, then the call; with the conversions around it
        where the plan converts (``params``: the graph's tensors)."""
        if converts:
            self._converted(n, plan, fn, kernel_tensors, params)
        else:
            self._zeros(n, plan.layout, kernel_tensors, params)
            self._call(n, plan, fn, [params[k] for k in range(len(kernel_tensors))])

    def _converted(self, n, plan, fn, kernel_tensors, params: dict) -> None:
        """The kernel's call on float32 scratch copies of the converted tensors (``params`` describes the graph's
        bfloat16 values): each input widened into its copy before the call, each written one narrowed back after
        it, as ``Plan._run`` does."""
        lay, kparams, after = plan.layout, dict(params), []
        # (index, widened before the call, narrowed after it)
        moves = [(i, not fresh, i in lay.write_back) for i, _, fresh in lay.convert] + \
            [(k, False, True) for k, dtype in lay.results if dtype is not None]
        for i, widen, narrow in moves:
            d, t = params[i], kernel_tensors[i]
            if d.dtype != torch.bfloat16 or t.dtype != torch.float32 or not t.is_contiguous():
                raise Unsupported(f"{n.name}: its plan converts {d.dtype} to {t.dtype}")
            dense = contiguous_strides(d.sizes)
            nbytes = math.prod(d.sizes, start=sympy.Integer(1)) * t.element_size()
            copy = Desc(self._tmp(nbytes, t.data_ptr()), sympy.Integer(0), d.sizes, dense, torch.float32)
            self._check(t, copy, f"{n.name} (a float32 copy of its parameter {i})")
            kparams[i] = copy
            if widen:
                self.program.ops.append(Each(self._ptr(copy), d.sizes, dense, "float",
                                             (Load(self._ptr(d), d.strides, "uint16_t"),), "st_bf16_f32(x0)"))
            if narrow:
                after.append(Each(self._ptr(d), d.sizes, d.strides, "uint16_t",
                                  (Load(self._ptr(copy), dense, "float"),), "st_f32_bf16(x0)"))
        self._zeros(n, lay, kernel_tensors, kparams)
        self._call(n, plan, fn, [kparams[k] for k in range(len(kernel_tensors))])
        self.program.ops.extend(after)
