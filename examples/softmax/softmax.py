"""Softmax and log-softmax over the last dimension, for rows of any length: the example's logic file, which the kernel library ships.

The logic lives in ``septran/ops/logic/softmax.py`` (installed with SepTran; the model level compiles it too).
This file is where the example finds it: ``septran.compile(logic_file="examples/softmax/softmax.py")`` and
``run_softmax.py`` read the tasks imported here, and the mapping is ``mappings/<target>/softmax.yaml`` as before.
"""
from septran.ops.logic.softmax import *  # noqa: F401,F403 - the logic's tasks and builders
