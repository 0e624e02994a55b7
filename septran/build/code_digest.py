"""The text of SepTran's own code and data, hashed: a cache whose entry SepTran's code made (a rewritten graph, a
lowered program) is keyed by it, so an edit without a version change never finds the old entry."""
from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]


@functools.lru_cache(maxsize=None)
def code_digest() -> str:
    """The package's ``.py`` and ``.yaml`` files, the mapping folders' ``.yaml`` and the ``target.yaml`` of every
    target they hold mappings for (read once per process: SEPTRAN_MAPPING_PATH is read once too)."""
    from septran import resources

    h = hashlib.sha256()
    mappings = resources.mapping_folders()
    folders = [(PACKAGE, (".py", ".yaml"))] + [(f, (".yaml",)) for f in mappings]
    targets = sorted({d.name for f in mappings if f.is_dir() for d in f.iterdir() if d.is_dir()})
    folders += [(f, ("target.yaml",)) for f in map(resources.target_folder, targets) if f is not None]
    for top, suffixes in folders:
        for folder, subs, files in os.walk(top):
            subs[:] = sorted(d for d in subs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith(suffixes):
                    with open(os.path.join(folder, name), "rb") as f:
                        h.update(name.encode() + b"\0" + f.read() + b"\0")
    return h.hexdigest()


# SEPTRAN_* settings that change no cached output: where things are kept, what is shown or timed
UNKEYED = frozenset({"SEPTRAN_CACHE_DIR", "SEPTRAN_DUMP_DIR", "SEPTRAN_PROGRESS", "SEPTRAN_PROFILE"})


def keyed_settings() -> dict[str, str]:
    """The SEPTRAN_* environment a cached output may depend on."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith("SEPTRAN_") and k not in UNKEYED}
