"""Task Lang calls in plain functions (no @task.define): each is refused at the line that makes it."""
from septran import task


def partitions(A):
    return task.partition(A, by="blocks", tile=("BM",))  # <- partition outside


def launches(A):
    task.launch(partitions, A)  # <- launch outside


def loops(A):
    for k in task.range(4):  # <- range outside
        pass


def parallel_loops(A):
    for i, j in task.parallel_range((2, 2)):  # <- parallel_range outside
        pass


def calls_a_primitive(C, A, B):
    task.call_primitive("gemm", C, A, B)  # <- call_primitive outside
