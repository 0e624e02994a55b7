"""Batched GEMM, C[b] = A[b] @ B[b]: the example's logic file, which the kernel library ships.

The logic lives in ``septran/ops/logic/bmm.py`` (installed with SepTran; the model level compiles it too).
This file is where the example finds it: ``septran.compile(logic_file="examples/bmm/bmm.py")`` and
``run_bmm.py`` read the tasks imported here, and the mapping is ``mappings/<target>/bmm.yaml`` as before.
"""
from septran.ops.logic.bmm import *  # noqa: F401,F403 - the logic's tasks and builders
