"""GEMM with a fused epilogue: the example's logic file, which the kernel library ships.

The logic lives in ``septran/ops/logic/gemm_epilogue.py`` (installed with SepTran; the model level compiles it too).
This file is where the example finds it: ``septran.compile(logic_file="examples/gemm_epilogue/gemm_epilogue.py")`` and
``run_gemm_epilogue.py`` read the tasks imported here, and the mapping is ``mappings/<target>/gemm_epilogue.yaml`` as before.
"""
from septran.ops.logic.gemm_epilogue import *  # noqa: F401,F403 - the logic's tasks and builders
