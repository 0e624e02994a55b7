"""Finding target folders and mapping files, in a source tree or an installed wheel.

In the repository they are the top-level ``backends/`` and ``mappings/``; the
wheel installs the same folders as ``septran/backends`` and
``septran/mappings``. Third-party targets add folders through the
``septran.targets`` entry point group (each entry point loads to a path).
"""
from __future__ import annotations

import logging
from importlib import metadata
from pathlib import Path
from typing import Optional

from septran import env
from septran.names import name_problem

log = logging.getLogger(__name__)

_PACKAGE = Path(__file__).resolve().parent


def _packaged(name: str) -> Path:
    installed = _PACKAGE / name
    return installed if installed.is_dir() else _PACKAGE.parent / name


def target_folders() -> dict[str, Path]:
    """Target name -> folder holding its ``target.yaml``."""
    found: dict[str, Path] = {}
    for entry in sorted(_packaged("backends").iterdir()):
        if (entry / "target.yaml").is_file():
            found[entry.name] = entry
    for ep in metadata.entry_points(group="septran.targets"):
        if name_problem(ep.name) is not None:  # a target's name is written into generated programs
            log.warning("target plugin %r is ignored: its name %s", ep.name, name_problem(ep.name))
            continue
        try:
            folder = Path(ep.load())
        except Exception as err:  # a broken plugin must not break the packaged targets
            log.warning("target plugin %s could not be loaded: %s", ep.name, err)
            continue
        if (folder / "target.yaml").is_file():
            found.setdefault(ep.name, folder)
        else:
            log.warning("target plugin %s points at %s, which has no target.yaml", ep.name, folder)
    return found


def target_folder(name: str) -> Optional[Path]:
    """One target's folder, or None. A shipped target wins over a plugin of the same name (as in
    ``target_folders``), so it is found without the entry-point scan: 20 ms of a warm process's first compile."""
    shipped = _packaged("backends") / name
    if (shipped / "target.yaml").is_file():
        return shipped
    return target_folders().get(name)


def mapping_folders() -> list[Path]:
    """Folders searched for ``<target>/<op>.yaml``: the user's first, then the packaged ones."""
    return env.mapping_path() + [_packaged("mappings")]


def display_name(path: str) -> str:
    """A file's name for generated text (comments of a program, explain()): relative to the source tree
    when inside it, else its base name, so that the text never depends on the working directory, and
    printable ASCII only, so that a newline in a user's path can never end a comment."""
    p = Path(path)
    try:
        text = str(p.resolve().relative_to(_PACKAGE.parent))
    except (ValueError, OSError):
        text = p.name
    return "".join(c if " " <= c <= "~" else "?" for c in text)
