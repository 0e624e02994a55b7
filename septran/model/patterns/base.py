"""What a pattern returns: the nodes one SepTran kernel computes, and the call that replaces them."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union

import torch.fx as fx


@dataclass(frozen=True)
class Match:
    """``nodes`` (the pattern's nodes, ``output`` among them) are computed by ``op(*args, **kwargs)``.

    ``op`` is a ``torch.ops.septran.*`` custom op; ``args`` hold fx nodes (the graph's values) and constants.
    The rewrite replaces ``output``'s uses by the call and erases the other nodes once nothing else uses them;
    a node of ``nodes`` that is still used outside the match keeps its own computation.
    """

    pattern: str  # the pattern's name, for the report ("gemm", "rms_norm", ...)
    nodes: tuple[fx.Node, ...]
    output: fx.Node
    op: Callable
    args: tuple
    kwargs: dict = field(default_factory=dict)
    kernel: str = ""  # what runs, for the report: "examples/gemm_epilogue (bias, gelu)"
    flops: int = 0  # of the nodes it replaces, as the report counts them


@dataclass(frozen=True)
class Refusal:
    """A node the pattern knows but does not take, and why (the report's reason it stayed with torch)."""

    pattern: str
    node: fx.Node
    why: str


Result = Union[Match, Refusal, None]  # None: not this pattern's node


class Pattern:
    """One kind of SepTran kernel. ``match`` looks at a node (the last node of what it computes) and its inputs."""

    name: str = ""

    def match(self, node: fx.Node) -> Result:  # pragma: no cover - interface
        raise NotImplementedError


def val(node: Any) -> Optional[Any]:
    """The fake tensor (shape, dtype, device) an fx node computes, or None."""
    return node.meta.get("val") if isinstance(node, fx.Node) else None
