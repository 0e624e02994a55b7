"""FlashAttention forward: the example's logic file, which the kernel library ships.

The logic lives in ``septran/ops/logic/attention.py`` (installed with SepTran; the model level compiles it too).
This file is where the example finds it: ``septran.compile(logic_file="examples/attention/attention.py")`` and
``run_attention.py`` read the tasks imported here, and the mapping is ``mappings/<target>/attention.yaml`` as before.
"""
from septran.ops.logic.attention import *  # noqa: F401,F403 - the logic's tasks and builders
