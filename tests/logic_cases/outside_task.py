from septran import task


def not_a_task(A):
    return task.partition(A, by="blocks", tile=("BM",))  # <- error here
