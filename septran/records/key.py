"""The tuning key: everything that changes which point of a search space is fastest.

A record is reused only when the WHOLE key matches: the logic, the search
space, the target, the device, the entry dtypes, shapes and scalars, and the
SepTran and TileLang versions. TVM MetaSchedule's database ignores the
target and TileLang's autotuner keys by the arch string; both reuse answers
measured elsewhere. Here a changed field is a miss.

The one deliberate exception is ``point_digest``: the key without the space
hash, so that a search over an extended space reuses the points it already
measured (each point names its own values).
"""
from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Union

from septran.version import tilelang_version

Pairs = tuple[tuple[str, Any], ...]


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces: the same bytes for the same value on every run."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def septran_version() -> str:
    from septran.version import __version__

    return __version__


def scalar_text(value: Union[float, int, str]) -> str:
    """A scalar's canonical text: ``float.hex`` (exact; ``nan``, ``inf``, ``-inf`` for the rest)."""
    if isinstance(value, str):
        value = float.fromhex(value)  # a key read back from JSON; ValueError when it is not one
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"a scalar must be a number, not {type(value).__name__}")
    number = float(value)
    return "nan" if math.isnan(number) else number.hex()


def dtype_text(value: Any) -> str:
    """``torch.float16`` or ``"float16"`` -> ``"float16"``."""
    text = str(value)
    return text[len("torch."):] if text.startswith("torch.") else text


@dataclass(frozen=True)
class TuningKey:
    """Where a measurement holds. Mappings given for device, dtypes, shapes and scalars become sorted pairs.

    ``logic_hash``: sha256 of the logic file's bytes (or of the task graph's
    printed form); ``space_hash``: the search space's hash; both computed by
    the caller. ``device``: ``device.device_identity(target.torch_device)``.
    Versions default to the running SepTran's and TileLang's.
    """

    logic_hash: str
    space_hash: str
    target: str
    device: Pairs
    dtypes: Pairs
    shapes: Pairs
    scalars: Pairs = ()
    septran_version: str = ""
    tilelang_version: str = ""

    def __post_init__(self) -> None:
        for name in ("logic_hash", "space_hash", "target"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"TuningKey.{name} must be a non-empty str, not {getattr(self, name)!r}")
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731 (frozen dataclass)
        set_("device", _pairs(self.device, "device", _device_value))
        set_("dtypes", _pairs(self.dtypes, "dtypes", dtype_text))
        set_("shapes", _pairs(self.shapes, "shapes", _shape))
        set_("scalars", _pairs(self.scalars, "scalars", scalar_text))
        set_("septran_version", self.septran_version or septran_version())
        set_("tilelang_version", self.tilelang_version or tilelang_version())

    def to_json(self) -> dict[str, Any]:
        """The key's fields as JSON values: dicts for the pairs, lists for shapes."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, tuple):
                value = {k: list(v) if isinstance(v, tuple) else v for k, v in value}
            out[f.name] = value
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "TuningKey":
        """The key held in a record's JSON object (other members are ignored)."""
        return cls(**{f.name: data[f.name] for f in fields(cls)})

    def digest(self) -> str:
        """sha256 of the canonical JSON of every field: equal keys, equal digests, on any machine."""
        return sha256_text(canonical_json(self.to_json()))

    def point_digest(self) -> str:
        """The digest of this key with the space hash left out: the same for every space over the same work."""
        data = self.to_json()
        del data["space_hash"]
        return sha256_text(canonical_json(data))

    def with_space(self, space_hash: str) -> "TuningKey":
        return replace(self, space_hash=space_hash)


def _pairs(value: Any, what: str, convert) -> Pairs:
    items = value.items() if isinstance(value, Mapping) else value
    try:
        pairs = [(k, convert(v)) for k, v in items]
    except (TypeError, ValueError) as e:
        raise ValueError(f"TuningKey.{what}: {e}") from None
    for k, _ in pairs:
        if not isinstance(k, str):
            raise ValueError(f"TuningKey.{what}: names must be str, not {k!r}")
    if len({k for k, _ in pairs}) != len(pairs):
        raise ValueError(f"TuningKey.{what}: a name appears twice")
    return tuple(sorted(pairs))


def _shape(value: Any) -> tuple[int, ...]:
    dims = tuple(value)
    # -1: a dynamic dimension (mapping `dynamic`): one record serves every size of it, as one compile does
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= -1 for d in dims):
        raise ValueError(f"a shape holds non-negative ints (or -1, any size), not {list(dims)!r}")
    return dims


def _device_value(value: Any) -> Union[str, int]:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ValueError(f"a device identity holds str and int values, not {value!r}")
    return value
