"""``import task_lang as task``: the design notes' spelling of Task Lang, an alias of ``septran.task``.

The README writes ``from septran import task``; both name one module, so a logic file may use either.
"""
import sys

from septran.frontend import task as _task

sys.modules[__name__] = _task
