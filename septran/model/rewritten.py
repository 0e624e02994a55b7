"""A saved graph's rewrite, kept in the build cache: a warm ``septran.load_precompiled`` does not rewrite again.

Why: a precompiled model holds AOTAutograd's ATen graph from before the rewrite (``septran.model.precompiled``),
and each loading process rewrote it again: for a Llama block's prefill and decode graphs, deserialising the ATen
graphs' fake values (0.37 s of CPU, most of it the decode graph's symbolic sizes) and the rewrite itself
(0.17 s, its patterns imported and each match checked against its op's fake), a third of the load. The
rewritten graph is about half as many nodes, and reading it back takes a fifth of the time.

The entry is ``Entries("graphs", "rewritten", key)`` (``septran.build.store``): a JSON line of the report's rows,
then torch's ``GraphPickler`` bytes of the rewritten graph (its fake values, ATen and SepTran ops by name). Its
sidecar binds it to its key: an entry under another key (swapped, renamed) or damaged is rewritten, never used.

The key is known before anything is deserialised: the saved graph's bytes as the file holds them, and every
fact that could change what the rewrite makes of them: SepTran's version and the text of its code and data (all
of ``septran/``, as the lowered programs' key has it: the patterns, the ops' fakes; the mapping folders and the
targets' ``target.yaml``, which the patterns ask whether an op runs), torch's version, the C++
compiler and the CPU features ``-march=native`` resolves to, the ``SEPTRAN_*`` settings (but the cache and dump
folders: a cache moved elsewhere still hits), torch.compile's mode and options. The entry is SepTran's own
output, in SepTran's cache, as its kernel libraries are; the precompile file holds none of it.
"""
from __future__ import annotations

import hashlib
import importlib
import json
import logging
from typing import Any, Optional

log = logging.getLogger(__name__)

STAGE = "graphs"  # the cache's folder (septran.build.store.Entries' "builder")
NAME = "rewritten"
EXT = "fxg"


def key(serialized: bytes, mode: Optional[str], options: Optional[dict]) -> str:
    """64 hex digits: the saved ATen graph ``serialized`` and what its rewrite depends on (module docstring)."""
    import torch

    from septran.build import toolchain
    from septran.build.code_digest import code_digest, keyed_settings
    from septran.version import __version__

    facts = {
        "septran": __version__,
        "code": code_digest(),  # (the mapping folders named by SEPTRAN_MAPPING_PATH: read once per process)
        "torch": torch.__version__,
        "cxx": toolchain.compiler_facts(),
        "env": keyed_settings(),
        "mode": mode,
        "options": options,
    }
    h = hashlib.sha256(json.dumps(facts, sort_keys=True, default=repr).encode())
    h.update(b"\0")
    h.update(serialized)
    return h.hexdigest()


def _entries(k: str):
    from septran.build.store import Entries

    return Entries(STAGE, NAME, k)


def read(k: str, fake_mode) -> Optional[tuple[Any, list]]:
    """The rewritten graph module (its fake values in ``fake_mode``) and its report's rows (numbered as a new
    graph of this process), or None when the cache holds no trusted entry under ``k``."""
    found = _entries(k).read(EXT, "rewritten graph")
    if found is None:
        return None
    from torch.fx._graph_pickler import GraphPickler

    from septran.model.report import Row, next_graph_id

    data = found[0]
    head, _, body = data.partition(b"\n")
    try:
        head = json.loads(head)
        rows = head["rows"]
        for module in head["modules"]:  # SepTran's ops the graph calls, registered before they are looked up
            if module.split(".")[0] == "septran":
                importlib.import_module(module)
        gm = GraphPickler.loads(body, fake_mode)
        from septran.model import steps_fused

        steps_fused.register()  # (its pattern registers the fused GEMM's step where it matches; none runs here)
    except Exception:  # noqa: BLE001 - an entry this torch cannot read back: rewritten, as if missing
        log.warning("septran: the cached rewritten graph %s cannot be read back; rewriting it",
                    _entries(k).path(EXT), exc_info=True)
        return None
    graph = next_graph_id()  # (gm's code is not generated: compile_saved copies its graph into a new module)
    return gm, [Row(graph, *r) for r in rows]


def _op_modules(graph) -> list[str]:
    """The modules that define the SepTran ops ``graph`` calls (``torch.library.custom_op``: registered when
    their module is imported, and a graph refers to them by name)."""
    import torch
    from torch._library.custom_ops import OPDEFS

    names = {n.target._schema.name for n in graph.nodes
             if isinstance(n.target, torch._ops.OpOverload) and n.target.namespace == "septran"}
    return sorted({OPDEFS[name]._init_fn.__module__ for name in names if name in OPDEFS})


def write(k: str, gm, report) -> None:
    """Keeps ``gm`` (just rewritten, not yet lowered) and its report under ``k``; a graph torch cannot
    serialize is not kept (logged), the load rewrites it each time as before."""
    from torch.fx._graph_pickler import GraphPickler, Options

    metas = {n: n.meta for n in gm.graph.nodes}
    try:
        for n in gm.graph.nodes:  # only the fake values: nothing after the rewrite reads the rest
            n.meta = {"val": n.meta["val"]} if "val" in n.meta else {}
        body = GraphPickler.dumps(gm, Options(ops_filter=None))
    except Exception:  # noqa: BLE001 - e.g. an argument of a SepTran op pickle refuses
        log.info("septran: a rewritten graph could not be serialized; it is rewritten at each load", exc_info=True)
        return
    finally:
        for n, meta in metas.items():
            n.meta = meta
    rows = [[r.name, r.op, r.shape, r.runs, r.flops] for r in report.rows]
    head = json.dumps({"rows": rows, "modules": _op_modules(gm.graph)}, separators=(",", ":")).encode()
    try:
        _entries(k).write(EXT, head + b"\n" + body)
    except OSError as err:  # a read-only cache still loads; it rewrites again next time
        log.info("septran: could not keep the rewritten graph: %s", err)
