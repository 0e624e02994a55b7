"""RMSNorm over the last dimension: the example's logic file, which the kernel library ships.

The logic lives in ``septran/ops/logic/rmsnorm.py`` (installed with SepTran; the model level compiles it too).
This file is where the example finds it: ``septran.compile(logic_file="examples/rmsnorm/rmsnorm.py")`` and
``run_rmsnorm.py`` read the tasks imported here, and the mapping is ``mappings/<target>/rmsnorm.yaml`` as before.
"""
from septran.ops.logic.rmsnorm import *  # noqa: F401,F403 - the logic's tasks and builders
