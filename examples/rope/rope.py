"""Rotary position embedding (RoPE), NeoX's "rotate_half" form: the example's logic file, which the kernel library ships.

The logic lives in ``septran/ops/logic/rope.py`` (installed with SepTran; the model level compiles it too).
This file is where the example finds it: ``septran.compile(logic_file="examples/rope/rope.py")`` and
``run_rope.py`` read the tasks imported here, and the mapping is ``mappings/<target>/rope.yaml`` as before.
"""
from septran.ops.logic.rope import *  # noqa: F401,F403 - the logic's tasks and builders
