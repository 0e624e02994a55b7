"""A variant's lowered program and TileLang source, kept in the build cache for kernels that ask for it.

Why: a warm process finds each kernel's binary under a key of its emitted TileLang source, so it lowered and
emitted every variant first (a precompiled Llama block: 13 variants, about 0.2 s of its load). A kernel whose
logic and mapping are fixed by a name (the kernel library's: ``septran.ops.kernels`` names each kernel it
compiles) can have its lowering looked up instead, under a key known before lowering: that name, the variant's
shapes, dtypes and scalars, the chosen point of the search space, the text of all of SepTran's code and of the
mapping folders and target descriptions (``septran.build.code_digest``), SepTran's version, the mapping and
logic files' paths, the ``SEPTRAN_*`` settings, and the task graph as printed and the chosen mapping's repr
(every field, with its source locations). A kernel without a name (``septran.compile`` of a user's
logic) is lowered every time, as before: its logic could change under the same file name.

The entry is ``Entries("lowered", "variant", key)`` (``septran.build.store``): the pickled program and source.
Its sidecar binds it to its key; an entry that is missing, damaged, swapped or unreadable is lowered again.
"""
from __future__ import annotations

import hashlib
import json
import logging
import pickle
from typing import Optional

log = logging.getLogger(__name__)

STAGE, NAME, EXT = "lowered", "variant", "pkl"


def key(kernel, spec, choice) -> Optional[str]:
    """The entry's key, or None where the kernel has no name (``kernel.lowering_name``) or dumps are asked for."""
    from septran import env

    if kernel.lowering_name is None or env.dump_dir() is not None:
        return None
    from septran.build.code_digest import code_digest, keyed_settings
    from septran.frontend.printer import format_graph
    from septran.version import __version__

    facts = {
        "name": kernel.lowering_name,
        "septran": __version__,
        "code": code_digest(),
        "env": keyed_settings(),
        "target": kernel.target.name,
        "mapping": str(kernel.mapping.file),
        "logic": str(kernel.graph.entry_task.loc.file),
        "shapes": {n: [str(d) for d in s] for n, s in spec.shapes.items()},
        "dtypes": dict(spec.dtypes),
        "scalars": {n: repr(v) for n, v in spec.scalars.items()},
        "point": {k: repr(v) for k, v in choice.point.items()},
        # and, besides the name, what the logic and the mapping say (a test or a user that edits either in a
        # process under the same name finds nothing): the task graph as printed, the chosen mapping's repr
        "graph": hashlib.sha256(format_graph(kernel.graph).encode()).hexdigest(),
        "mapping_repr": hashlib.sha256(repr(choice.mapping).encode()).hexdigest(),
        # the CPU features the target's leaves ask for that this host has: a program lowered where AMX was (a leaf
        # that needs it passed the binding's check) is lowered again, and refused, where it is not
        "cpu_flags": _leaf_flags(kernel.target),
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()


def _leaf_flags(target) -> list[str]:
    wanted = {f for leaf in target.leaves.values() for f in leaf.cpu_flags}
    if not wanted:
        return []
    from septran.records import device

    return sorted(wanted & device.host_flags())


def read(k: str):
    """(program, TileLang source) kept under ``k``, or None."""
    from septran.build.store import Entries

    found = Entries(STAGE, NAME, k).read(EXT, "lowered program")
    if found is None:
        return None
    try:
        program, source = pickle.loads(found[0])
    except Exception:  # noqa: BLE001 - written by another SepTran: lowered again, as if missing
        log.info("septran: a cached lowered program cannot be read back; lowering again", exc_info=True)
        return None
    return program, source


def write(k: str, program, source: str) -> None:
    from septran.build.store import Entries

    try:
        data = pickle.dumps((program, source), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - a program pickle refuses: lowered at each load, as before
        log.info("septran: a lowered program could not be pickled; it is lowered at each load", exc_info=True)
        return
    Entries(STAGE, NAME, k).write(EXT, data)
