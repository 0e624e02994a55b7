"""A build worker: ``python -m septran.tuning.build_worker`` compiles generated programs into the caches.

Reads one JSON job per line on stdin (``{"source", "name", "target"}``) and
answers one JSON line per job on stdout (``{"error": null | text}``). A
separate process per core, started once per search: no fork of a process
that holds threads, and no re-import of the caller's script (a notebook or
a script without a ``__main__`` guard works).
"""
from __future__ import annotations

import json
import logging
import sys


def main() -> int:
    logging.disable(logging.WARNING)
    out = sys.stdout
    sys.stdout = sys.stderr  # what TileLang prints must not mix with the answers
    from septran.tuning.measure import _build_one

    for line in sys.stdin:
        job = json.loads(line)
        error = _build_one((job["source"], job["name"], job["target"]))
        out.write(json.dumps({"error": error}) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
