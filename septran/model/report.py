"""The model level's report: one row per node of a captured graph, what runs it, and the FLOPs share.

``str(report)`` is the table; ``report.to_json()`` the same as data. With SEPTRAN_DUMP_DIR set the rewrite
writes both there per compiled graph (``model_graph<N>.txt`` / ``.json``).
"""
from __future__ import annotations

import itertools
import json
import logging
from dataclasses import asdict, dataclass, field
from typing import Optional

log = logging.getLogger(__name__)

_GRAPHS = itertools.count()


@dataclass
class Row:
    """One node: ``runs`` is ``"SepTran: <kernel>"``, ``"torch: <why>"``, ``"input"`` or ``"output"``."""

    graph: int
    name: str
    op: str
    shape: str
    runs: str
    flops: int = 0

    @property
    def in_septran(self) -> bool:
        return self.runs.startswith("SepTran")


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    # the direct runner of each graph (septran.model.executor.Executor): its memory plan's arena, once run
    executors: list = field(default_factory=list, repr=False, compare=False)

    @property
    def arena_bytes(self) -> int:
        """The intermediates' memory: the largest arena each graph's memory plan has made so far, summed."""
        return sum(e.peak_bytes for e in self.executors)

    @property
    def total_flops(self) -> int:
        return sum(r.flops for r in self.rows)

    @property
    def septran_flops(self) -> int:
        return sum(r.flops for r in self.rows if r.in_septran)

    @property
    def septran_share(self) -> float:
        """The share of the FLOPs that run in SepTran kernels (1.0 for a graph without any)."""
        total = self.total_flops
        return self.septran_flops / total if total else 1.0

    def row(self, name: str, graph: Optional[int] = None) -> Row:
        """The row of node ``name`` (in ``graph``, else the first graph that has one)."""
        for r in self.rows:
            if r.name == name and (graph is None or r.graph == graph):
                return r
        raise KeyError(name)

    def extend(self, other: "Report") -> None:
        self.rows.extend(other.rows)
        self.executors.extend(other.executors)

    def summary(self) -> str:
        n_sep = sum(r.in_septran for r in self.rows)
        return (f"{len(self.rows)} nodes, {n_sep} in SepTran kernels; FLOPs {self.total_flops:,} of which "
                f"{self.septran_flops:,} in SepTran ({100 * self.septran_share:.1f} %)"
                + (f"; intermediates in {self.arena_bytes:,} bytes of arena" if self.arena_bytes else ""))

    def __str__(self) -> str:
        head = ("graph", "node", "op", "shape / dtype", "FLOPs", "runs in")
        body = [(str(r.graph), r.name, r.op, r.shape, f"{r.flops:,}", r.runs) for r in self.rows]
        widths = [max(len(x) for x in col) for col in zip(head, *body)] if body else [len(h) for h in head]
        widths[-1] = 0  # the last column is not padded
        lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in [head, *body]]
        return "\n".join(lines + [self.summary()])

    def to_json(self) -> dict:
        return {"rows": [asdict(r) for r in self.rows], "total_flops": self.total_flops,
                "septran_flops": self.septran_flops, "septran_share": self.septran_share,
                "arena_bytes": self.arena_bytes}

    def dump(self) -> None:
        """Writes the table and its JSON to SEPTRAN_DUMP_DIR, when it is set."""
        from septran import env

        folder = env.dump_dir()
        if folder is None or not self.rows:
            return
        folder.mkdir(parents=True, exist_ok=True)
        stem = folder / f"model_graph{self.rows[0].graph}"
        stem.with_suffix(".txt").write_text(str(self) + "\n")
        stem.with_suffix(".json").write_text(json.dumps(self.to_json(), indent=1) + "\n")
        log.info("model report written to %s.txt/.json", stem)


def next_graph_id() -> int:
    """A number per captured graph of this process (names the dump files)."""
    return next(_GRAPHS)
