"""A one-leaf elementwise operator over blocks of rows, and its cpu mapping: the smallest whole program."""
from __future__ import annotations

from septran import task

ROWS_MAPPING = """
target: cpu
entrypoint: host
task_mappings:
  host: {{task_name: host, proc: HOST, mems: {{Y: GLOBAL, X: GLOBAL}}, tunables: {{BM: {bm}}}, calls: {{rows: blk}}}}
  blk: {{task_name: rows, proc: BLOCK, mems: {{Y: GLOBAL, X: GLOBAL}}, leaf_task_bindings: {{{leaf}: vector_loops}}}}
"""


def rows_mapping(leaf: str, bm: int = 4) -> str:
    """The cpu mapping of ``rows_logic``'s tasks around a leaf named ``leaf``: X and Y in place, BM rows a program."""
    return ROWS_MAPPING.format(leaf=leaf, bm=bm)


def rows_logic(leaf):
    """``host(Y, X)``: one program per BM rows, each launching ``leaf(Y, X)`` on its rows."""

    @task.define
    def rows(Y, X):
        task.launch(leaf, Y, X)

    @task.define
    def host(Y, X):
        Yp = task.partition(Y, by="blocks", tile=("BM", None))
        Xp = task.partition(X, by="blocks", tile=("BM", None))
        for i in task.parallel_range(Yp.shape[0]):
            task.launch(rows, Yp[i, 0], Xp[i, 0])

    return host
