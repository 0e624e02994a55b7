"""The gate and up projections of a SwiGLU MLP, fused: the example's logic file, which the kernel library ships.

The logic lives in ``septran/ops/logic/swiglu_mlp.py`` (installed with SepTran; the model level compiles it too).
This file is where the example finds it: ``septran.compile(logic_file="examples/swiglu_mlp/swiglu_mlp.py")`` and
``run_swiglu_mlp.py`` read the tasks imported here, and the mapping is ``mappings/<target>/swiglu_mlp.yaml`` as before.
"""
from septran.ops.logic.swiglu_mlp import *  # noqa: F401,F403 - the logic's tasks and builders
