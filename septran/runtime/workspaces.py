"""Tensors a program's kernels pass between them (lowering/two_kernels.py: partial sums, one slot per program).

They are the program's last parameters; the runtime allocates them at each call, zero-filled (a slot that no
program writes adds nothing), on the device of the call's tensors.
"""
from __future__ import annotations


def allocate(program, device) -> list:
    import torch

    return [torch.zeros(shape, dtype=getattr(torch, dtype), device=device) for _, shape, dtype in program.workspaces]
