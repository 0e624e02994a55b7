"""What ``torch.compile``'s ``mode=`` and ``options=`` mean to the ``"septran"`` backend.

torch hands both to a backend function when they are not the defaults (``mode != "default"``, a non-empty
``options``); Hugging Face's ``CompileConfig`` always sets ``mode="reduce-overhead"``. SepTran's meaning:

    default                     the graph's SepTran kernels run each shape's point from the tuning database, else
                                their search space's first point (untuned, logged once per kernel)
    reduce-overhead             the same: SepTran always runs its lowest-overhead path (torch's meaning, CUDA
                                graphs, is the launcher's business, not a switch; nothing else changes)
    max-autotune                as default, and a kernel with a search space meets a shape the database has no
    max-autotune-no-cudagraphs  record for: it is tuned then (``septran.tuning``, as SEPTRAN_AUTOTUNE=1), and the
                                record is kept for the next process

``options`` (a dict) takes SepTran's own keys only; any other key (an inductor config name such as
``"triton.cudagraphs"``) is refused with a ``CompileOptionError``, rather than ignored:

    autotune   bool   tune untuned shapes now (what max-autotune sets)
    profile    bool   time every kernel of the graph (as SEPTRAN_PROFILE=1; see ``septran.model.profile``)
    progress   bool   one stderr line per kernel build, for the whole process (see ``septran.progress``)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from septran.errors import SepTranError

MODES = {
    "default": "tuned points from the tuning database, else each space's first point",
    "reduce-overhead": "as default (SepTran always runs its lowest-overhead path)",
    "max-autotune": "as default, and shapes with no tuning record are tuned now",
    "max-autotune-no-cudagraphs": "as max-autotune",
}
OPTIONS = {"autotune": bool, "profile": bool, "progress": bool}


class CompileOptionError(SepTranError):
    """``torch.compile(..., backend="septran")`` was given a mode or an option SepTran does not know."""

    stage = "torch.compile"


@dataclass(frozen=True)
class Settings:
    """One compile's settings: ``None`` for profile and progress leaves them to SEPTRAN_PROFILE and the terminal."""

    mode: str = "default"
    autotune: bool = False
    profile: Optional[bool] = None
    progress: Optional[bool] = None


def settings(mode: Optional[str] = None, options: Optional[dict[str, Any]] = None) -> Settings:
    """The settings of ``torch.compile(..., mode=mode, options=options)``, checked."""
    mode = mode or "default"
    if mode not in MODES:
        raise CompileOptionError(f"the septran backend has no mode {mode!r}",
                                 hint="one of: " + ", ".join(f"{m} ({what})" for m, what in MODES.items()))
    options = dict(options or {})
    unknown = sorted(set(options) - set(OPTIONS), key=str)
    if unknown:
        raise CompileOptionError(
            f"the septran backend takes no option {', '.join(map(repr, unknown))}",
            hint="its options are " + ", ".join(f"{k!r} ({t.__name__})" for k, t in OPTIONS.items())
            + "; inductor's options (torch._inductor.config) do not apply to it")
    for key, value in options.items():
        if not isinstance(value, OPTIONS[key]):
            raise CompileOptionError(f"option {key!r} must be a {OPTIONS[key].__name__}, got {value!r}")
    autotune = options.get("autotune", mode.startswith("max-autotune"))
    return Settings(mode, autotune, options.get("profile"), options.get("progress"))
