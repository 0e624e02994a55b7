"""The points of one kernel's space run on one device: the reference answer, each candidate checked and timed."""
from __future__ import annotations

from septran.errors import InternalError, SepTranError
from septran.tuning import measure as ms


class Measurer:
    """Runs points of a kernel's space on one device: the reference answer, each candidate checked and timed.

    In this process by default; ``septran.tuning.distributed`` runs the same class as a Ray actor.
    """

    def __init__(self, kernel, described: dict, scalars: dict, seed: int):
        self.kernel, self.scalars = kernel, scalars
        self.tensors = _random_inputs(kernel, described, kernel.target.torch_device, seed)
        self.expected = None

    def _kernel(self, point: dict):
        return self.kernel.at(point)

    def _call(self, kernel):
        return kernel(*self.tensors, **self.scalars)

    def reference(self, point: dict) -> None:
        self.expected = self._call(self._kernel(point))

    def measure(self, point: dict):
        """(status, timing, rule): the point's answer checked against the reference, then timed."""
        try:
            kernel = self._kernel(point)
            out = self._call(kernel)
        except (SepTranError, InternalError) as err:
            return "compile_error", None, str(err)[:2000]
        differs = ms.same_answer(out, self.expected)
        if differs:
            return "wrong", None, differs
        return "ok", ms.time_call(lambda: self._call(kernel), self.kernel.target.torch_device), None

    def interleaved(self, points: list, rounds: int = 7) -> list:
        kernels = [self._kernel(p) for p in points]
        return ms.interleaved([lambda k=k: self._call(k) for k in kernels], self.kernel.target.torch_device, rounds=rounds)


def _random_inputs(kernel, described: dict, device: str, seed: int) -> list:
    import torch

    gen = torch.Generator().manual_seed(seed)
    out = []
    for a in kernel.inputs:
        shape, dtype = described[a.name]
        t = torch.randn(shape, generator=gen, dtype=torch.float32).to(getattr(torch, dtype))
        out.append(t.to(device))
    return out
