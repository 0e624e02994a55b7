"""LayerNorm over the last dimension: the example's logic file, which the kernel library ships.

The logic lives in ``septran/ops/logic/layernorm.py`` (installed with SepTran; the model level compiles it too).
This file is where the example finds it: ``septran.compile(logic_file="examples/layernorm/layernorm.py")`` and
``run_layernorm.py`` read the tasks imported here, and the mapping is ``mappings/<target>/layernorm.yaml`` as before.
"""
from septran.ops.logic.layernorm import *  # noqa: F401,F403 - the logic's tasks and builders
