"""Static pruning: every point of a space through the checks and the lowering, with no compile.

Cheapest first: the mapping's rules and the lowering's passes (verification,
leaf legality, tile multiples, capacities) decide most points in milliseconds;
for CUDA targets the survivors' register use and spills come from nvcc (a
cubin build each, so only for the points the search may measure). Every pruned
point keeps the rule that pruned it: the pass, and its message with the
numbers left out, so that points pruned for one reason count together.
"""
from __future__ import annotations

import dataclasses
import logging
import re
from collections import Counter
from dataclasses import dataclass
from typing import Optional

from septran.errors import MappingError, SepTranError
from septran.lowering import Specialization, lower
from septran.lowering import tile_ir as ir
from septran.lowering.bind import check_mapping
from septran.mapping.schema import Mapping

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Candidate:
    """One point of a space, and what the static stages made of it."""

    point: dict
    mapping: Optional[Mapping]  # the point as an ordinary mapping (no space)
    program: Optional[ir.TileProgram]  # lowered, when it survived
    rule: Optional[str] = None  # why it was pruned (None: it survives)
    message: str = ""
    resources: Optional[dict] = None  # nvcc's registers and spills (CUDA targets)

    @property
    def ok(self) -> bool:
        return self.rule is None


def rule_of(err: SepTranError) -> str:
    """``verify: index N of Ap reaches N ...``: the pass and the message without its numbers."""
    stage = getattr(err, "lowering_pass", None) or ("check" if isinstance(err, MappingError) else err.stage)
    head = re.split(r"[;:(]", err.message, maxsplit=1)[0]
    return f"{stage}: {re.sub(r'[0-9]+', 'N', head).strip()}"[:100]


def prune_static(graph, relations, space_mapping: Mapping, target, spec: Specialization) -> list[Candidate]:
    """Every point of ``space_mapping``'s space through the checks and the lowering passes."""
    out = []
    for point in space_mapping.space.points():
        try:
            mapping = space_mapping.at(point)
            check_mapping(graph, mapping, target)
            program = lower(graph, mapping, target, spec, relations, checked=True)
        except SepTranError as err:
            out.append(Candidate(point, None, None, rule_of(err), err.message))
            continue
        out.append(Candidate(point, mapping, program))
    return out


def prune_resources(candidates: list[Candidate], target, device_source, limit: Optional[int] = None) -> list[Candidate]:
    """For CUDA targets: spills and register use from nvcc, for the first ``limit`` survivors (in the given order).

    ``device_source(candidate) -> str`` makes the CUDA of a candidate.
    """
    tl = target.tilelang_target
    if not isinstance(tl, dict) or tl.get("kind") != "cuda":
        return candidates
    arch = tl["arch"]
    from septran.tuning import nvcc

    if nvcc.nvcc_path() is None:
        log.warning("nvcc not found: the register and spill check of the search space is skipped")
        return candidates
    out, seen = [], 0
    for c in candidates:
        if not c.ok or (limit is not None and seen >= limit):
            out.append(c)
            continue
        seen += 1
        try:
            usage = nvcc.resource_usage(device_source(c), arch)
        except Exception as err:  # noqa: BLE001 - a point nvcc cannot build is pruned, with the reason
            out.append(dataclasses.replace(c, rule="nvcc: the build failed", message=str(err)[:500]))
            continue
        threads = c.program.kernel.threads or 1
        if usage["spill_stores"] or usage["spill_loads"]:
            out.append(dataclasses.replace(c, rule="nvcc: registers spill", resources=usage,
                                           message=f"{usage['spill_stores']} bytes spill stores"))
        elif usage["registers"] * threads > nvcc.REGISTERS_PER_SM:
            out.append(dataclasses.replace(c, rule="nvcc: registers exceed one SM", resources=usage,
                                           message=f"{usage['registers']} registers x {threads} threads"))
        else:
            out.append(dataclasses.replace(c, resources=usage))
    return out


def most_common_rule(candidates: list[Candidate]) -> tuple[str, int, Candidate]:
    counts = Counter(c.rule for c in candidates if not c.ok)
    rule, n = counts.most_common(1)[0]
    return rule, n, next(c for c in candidates if c.rule == rule)
