"""The suite's lowering records (support/lowering_records.py) in a child process a test starts: a test puts this
folder first on the child's PYTHONPATH (``lowering_records.child_env``), and Python imports this module at start-up.

Nothing is imported now: when the child first imports ``septran.build.tilelang_api``, the records are stood in at
its seam, as conftest does in the test processes."""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from pathlib import Path

_RECORDS = Path(__file__).resolve().parents[1] / "lowering_records.py"
_SEAM = "septran.build.tilelang_api"


class _AfterSeamImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != _SEAM:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        loader, run = spec.loader, spec.loader.exec_module

        def exec_module(module):
            run(module)
            records_spec = importlib.util.spec_from_file_location("septran_test_lowering_records", _RECORDS)
            records = importlib.util.module_from_spec(records_spec)
            records_spec.loader.exec_module(records)
            records.install()

        loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _AfterSeamImport())
