from septran import task


@task.define
def bool_default(Y, X, flag=True):  # <- bool default
    pass
