"""A logic file that uses Task Lang at module level: refused while SepTran loads the file."""
from septran import task


@task.define(leaf=True)
def gemm_leaf_logic(C, A, B):
    task.call_primitive("gemm", C, A, B)


for k in task.range(4):  # <- error here
    pass
