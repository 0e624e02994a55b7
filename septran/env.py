"""Every environment variable SepTran reads, in one place (as tilelang/env.py does).

Values are untrusted: a path with a control character is refused here, with
the variable's name (see ``septran.paths``); a target is checked against the
registry where it is used (``septran.target.check_target_name``).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from septran.errors import MappingError, SepTranError
from septran.paths import check_user_path


class SettingError(SepTranError):
    """An environment variable holds a value SepTran refuses."""

    stage = "setting"


def _path(variable: str, error: type[SepTranError] = SettingError) -> Optional[Path]:
    value = os.environ.get(variable)
    if not value:
        return None
    return Path(check_user_path(value, f"{variable}=", error))


def target_override() -> Optional[str]:
    """SEPTRAN_TARGET: the target to use instead of the detected one (cpu, sm80, sm90, gfx942, ...)."""
    return os.environ.get("SEPTRAN_TARGET") or None


def mapping_override() -> Optional[Path]:
    """SEPTRAN_MAPPING: one mapping file to use for every compile."""
    return _path("SEPTRAN_MAPPING", MappingError)


def mapping_path() -> list[Path]:
    """SEPTRAN_MAPPING_PATH: folders of a user's own mappings, searched before the packaged ones."""
    value = os.environ.get("SEPTRAN_MAPPING_PATH", "")
    return [Path(check_user_path(p, "a folder of SEPTRAN_MAPPING_PATH,", MappingError)) for p in value.split(os.pathsep) if p]


def dump_dir() -> Optional[Path]:
    """SEPTRAN_DUMP_DIR: where every stage's output is written, when set."""
    return _path("SEPTRAN_DUMP_DIR")


def cache_dir() -> Path:
    """SEPTRAN_CACHE_DIR: where generated TileLang sources are kept (TileLang parses them from files)."""
    return _path("SEPTRAN_CACHE_DIR") or Path.home() / ".cache" / "septran"


def tuning_db() -> Path:
    """SEPTRAN_TUNING_DB: the tuning records, one JSON object per line; default tuning.jsonl in the cache folder."""
    return _path("SEPTRAN_TUNING_DB") or cache_dir() / "tuning.jsonl"


def autotune() -> bool:
    """SEPTRAN_AUTOTUNE=1: a kernel whose mapping has !tune tunes each new shape it meets (else its first point runs)."""
    return _switch("SEPTRAN_AUTOTUNE") is True


def shipped_tuning() -> bool:
    """SEPTRAN_SHIPPED_TUNING=0: never read the tuning database that ships with SepTran (septran/tuned/), only
    SEPTRAN_TUNING_DB's; set by the test suite, so that its kernels do not depend on the CPU it runs on."""
    return _switch("SEPTRAN_SHIPPED_TUNING") is not False


def _switch(variable: str) -> Optional[bool]:
    """A yes/no variable: None when unset (the caller's default)."""
    value = os.environ.get(variable, "").strip().lower()
    if value == "":
        return None
    if value in ("0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise SettingError(f"{variable}={value!r}: use 1 or 0")


def progress() -> Optional[bool]:
    """SEPTRAN_PROGRESS=1/0: a line per kernel build on stderr, or none; unset: on in an interactive terminal,
    off under CI and pytest (septran.progress)."""
    return _switch("SEPTRAN_PROGRESS")


def profile() -> Optional[Path]:
    """SEPTRAN_PROFILE=1 (or a path ending in .json): the model level times every kernel it runs and, at exit,
    writes the profile table and its Chrome trace (to that path, else SEPTRAN_DUMP_DIR or the current folder,
    as septran_profile.txt / septran_profile.trace.json). None when unset or 0."""
    value = os.environ.get("SEPTRAN_PROFILE", "").strip()
    if value.endswith(".json"):
        return Path(check_user_path(value, "SEPTRAN_PROFILE=", SettingError))
    if not _switch("SEPTRAN_PROFILE"):
        return None
    return (dump_dir() or Path.cwd()) / "septran_profile.trace.json"


def direct_runner() -> bool:
    """SEPTRAN_DIRECT=0: a compiled graph calls its SepTran kernels through their torch custom ops (as captured),
    not through the direct runner (``septran.model.executor``) and its memory plan. On by default."""
    return _switch("SEPTRAN_DIRECT") is not False


def launcher() -> bool:
    """SEPTRAN_LAUNCHER=0: the direct runner calls each step from Python, not a generated C launcher per segment
    (``septran.model.launcher``). On by default."""
    return _switch("SEPTRAN_LAUNCHER") is not False


def launcher_cuda() -> bool:
    """SEPTRAN_LAUNCHER_CUDA=1: a graph on a CUDA device runs its segments as CUDA launchers too (built with nvcc,
    captured as CUDA graphs; ``septran.model.launcher.cuda_runner``). Off by default: never run on a device yet."""
    return _switch("SEPTRAN_LAUNCHER_CUDA") is True


def cuda_graphs() -> bool:
    """SEPTRAN_CUDA_GRAPHS=0: a CUDA launcher (``SEPTRAN_LAUNCHER_CUDA=1``) launches directly at every call, never
    capturing a CUDA graph per shape bucket. On by default."""
    return _switch("SEPTRAN_CUDA_GRAPHS") is not False
