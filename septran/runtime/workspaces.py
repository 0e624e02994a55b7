"""Tensors a program's kernels pass between them (lowering/two_kernels.py: partial sums, one slot per program).

They are the program's last parameters; the runtime allocates them at each call, zero-filled (a slot that no
program writes adds nothing), on the device of the call's tensors.
"""
from __future__ import annotations


def shapes(program) -> tuple:
    """(shape, torch dtype) of each workspace: what a call's plan allocates."""
    import torch

    return tuple((tuple(shape), getattr(torch, dtype)) for _, shape, dtype in program.workspaces)

