"""GEMM, C = A @ B: the example's logic file, which the kernel library ships.

The logic lives in ``septran/ops/logic/gemm.py`` (installed with SepTran; the model level compiles it too).
This file is where the example finds it: ``septran.compile(logic_file="examples/gemm/gemm.py")`` and
``run_gemm.py`` read the tasks imported here, and the mapping is ``mappings/<target>/gemm.yaml`` as before.
"""
from septran.ops.logic.gemm import *  # noqa: F401,F403 - the logic's tasks and builders
