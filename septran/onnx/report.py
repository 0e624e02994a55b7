"""The ONNX report: one row per ONNX node, saying whether its computation ran in SepTran kernels (and which),
in torch (and why), or was folded into a constant when the model was imported. It is read off the model level's
report (one row per ATen node) through each ATen node's ONNX origin."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from septran.model.report import Report

_NO_COMPUTE = ("torch: a view", "torch: takes a result", "torch: shape arithmetic", "unused after the rewrite")


@dataclass
class OnnxRow:
    index: int
    name: str
    op: str
    runs: str  # "SepTran: ...", "SepTran and torch: ...", "torch: ...", "constant (folded at import)", "no compute"
    flops: int = 0
    septran_flops: int = 0

    @property
    def in_septran(self) -> bool:
        """Some of the node's computation ran in a SepTran kernel."""
        return self.runs.startswith("SepTran")

    @property
    def all_septran(self) -> bool:
        return self.runs.startswith("SepTran:")


@dataclass
class OnnxReport:
    model: str
    rows: list[OnnxRow] = field(default_factory=list)
    aten: Report = field(default_factory=Report)

    @property
    def septran_nodes(self) -> list[OnnxRow]:
        return [r for r in self.rows if r.in_septran]

    def row(self, name_or_index) -> OnnxRow:
        for r in self.rows:
            if r.index == name_or_index or (r.name and r.name == name_or_index):
                return r
        raise KeyError(name_or_index)

    def summary(self) -> str:
        n = len(self.rows)
        full = sum(r.all_septran for r in self.rows)
        part = sum(r.in_septran for r in self.rows) - full
        folded = sum(r.runs.startswith("constant") for r in self.rows)
        return (f"{self.model}: {n} ONNX nodes, {full} in SepTran kernels, {part} partly, {folded} folded at import; "
                f"FLOPs in SepTran {100 * self.aten.septran_share:.1f} %")

    def __str__(self) -> str:
        head = ("#", "node", "op", "FLOPs", "runs in")
        body = [(str(r.index), r.name, r.op, f"{r.flops:,}", r.runs) for r in self.rows]
        widths = [max(len(x) for x in col) for col in zip(head, *body)]
        widths[-1] = 0
        lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in [head, *body]]
        return "\n".join(lines + [self.summary()])

    def to_json(self) -> dict:
        return {"model": self.model, "rows": [asdict(r) for r in self.rows], "aten": self.aten.to_json(),
                "septran_nodes": len(self.septran_nodes)}


def onnx_report(model_name: str, nodes, aten: Report, origin: dict, folded) -> OnnxReport:
    """Per ONNX node (``nodes``: the graph's NodeProtos), from the ATen rows whose origin is that node."""
    per: dict[int, list] = {}
    for r in aten.rows:
        if r.name in origin and r.runs not in ("input", "output"):
            per.setdefault(origin[r.name], []).append(r)
    rows = []
    for index, proto in enumerate(nodes):
        mine = per.get(index, [])
        compute = [r for r in mine if not r.runs.startswith(_NO_COMPUTE)]
        sep = [r for r in compute if r.in_septran]
        rest = [r for r in compute if not r.in_septran]
        kernels = sorted({r.runs.removeprefix("SepTran: ").split(" (part of")[0] for r in sep})
        if sep and not rest:
            runs = "SepTran: " + "; ".join(kernels)
        elif sep:
            runs = "SepTran and torch: " + "; ".join(kernels) + " | torch: " + ", ".join(sorted({r.op for r in rest}))
        elif rest:
            runs = rest[-1].runs
        elif index in folded:
            runs = "constant (folded at import)"
        else:
            runs = "no compute (a view, a copy or an identity)"
        rows.append(OnnxRow(index, proto.name, proto.op_type, runs, sum(r.flops for r in compute),
                            sum(r.flops for r in sep)))
    return OnnxReport(model_name, rows, aten)
