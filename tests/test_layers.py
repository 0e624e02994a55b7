"""The package's layers (design.md section 11), read from the code's own imports: no import points up.

Every ``import`` in ``septran/**/*.py`` counts, those inside functions too (a lazy import is still a
dependency). Bottom up: facts (env, paths, errors, version, targets) -> records (the tuning database) ->
frontend / mapping / lowering / emitter -> build -> runtime -> tuning, model, CLI.
"""
from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path


from conftest import REPO

PACKAGE = REPO / "septran"
FACE = "septran"  # the package's front door (__init__.py): it re-exports every layer, so it is above them all


@lru_cache(maxsize=None)
def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _resolve(module: str, names: list[str], known: dict) -> list[str]:
    """The modules an import reaches: ``from a.b import c`` is ``a.b.c`` where that is a module, else ``a.b``."""
    out = []
    for name in names:
        full = f"{module}.{name}"
        out.append(full if full in known else module)
    return out


@lru_cache(maxsize=None)
def face_exports() -> dict[str, str]:
    """Name -> module the front door takes it from (``from septran import task`` is an import of frontend)."""
    out = {}
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                out[alias.asname or alias.name] = node.module
    return out


def _imports(tree: ast.AST):
    """Every import statement, at any depth, but those under ``if TYPE_CHECKING:`` (annotations only: never run)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for child in node.orelse for n in _imports(ast.Module(body=[child], type_ignores=[])))
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        yield from _imports(node)


@lru_cache(maxsize=None)
def edges() -> dict[str, set[str]]:
    """module -> the septran modules it imports, anywhere in its text."""
    known = modules()
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                names = [a.name for a in node.names]
                if base == FACE and name != FACE:  # through the front door to where the name comes from
                    for n in names:
                        source = face_exports().get(n, FACE) if f"{FACE}.{n}" not in known else FACE
                        found.update(_resolve(source, [n], known))
                    continue
                found.update(_resolve(base, names, known))
        graph[name] = {m for m in found if m in known and m != name}
    return graph


def floor_of(module: str) -> str:
    """The top-level folder (or file) of septran a module belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else FACE


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_sees_lazy_and_relative_imports():
    graph = edges()
    assert "septran.errors" in graph["septran.env"]
    assert len(modules()) > 100 and sum(map(len, graph.values())) > 300


def test_no_import_cycle_between_top_level_folders():
    """An import from one folder of septran into another never comes back: the folders stand in floors."""
    graph = edges()
    floors: dict[str, set[str]] = {}
    for module, targets in graph.items():
        if module == FACE:
            continue  # the front door re-exports every floor (and loads the model level lazily)
        floors.setdefault(floor_of(module), set()).update(floor_of(t) for t in targets if floor_of(t) != floor_of(module))
    found = _cycles(floors)
    ties = [f"{a} -> {b}" for cycle in found for a, targets in sorted(graph.items()) for b in sorted(targets)
            if floor_of(a) in cycle and floor_of(b) in cycle and floor_of(a) != floor_of(b) and a != FACE]
    assert not found, f"folders that import each other: {found}; through: " + "; ".join(ties)


# Circles this branch does not own: the model level moves into a kernel library package on another branch
# (issue 19, item 3). patterns/elementwise.py reads the list its package face fills (a lazy import).
ELSEWHERE = [["septran.model.patterns", "septran.model.patterns.elementwise"]]


def test_no_import_cycle_between_modules():
    """No circle of files either: each module can be read knowing only the ones below it."""
    found = [c for c in _cycles({m: t - {FACE} for m, t in edges().items() if m != FACE}) if c not in ELSEWHERE]
    assert not found, f"modules that import each other: {found}"


def test_the_runtime_never_imports_the_tuner():
    """The runtime chooses a point from the records; a tuner is handed in from above (septran.compile's autotune)."""
    bad = [f"{m} -> {t}" for m, targets in edges().items() if floor_of(m) == "runtime"
           for t in targets if floor_of(t) == "tuning"]
    assert not bad, bad


def test_facts_and_records_import_nothing_above_them():
    """The ground floor (env, paths, errors, version, names, dtypes) and the records stand on the ground only."""
    ground = {"env", "paths", "errors", "version", "names", "dtypes"}
    bad = [f"{m} -> {t}" for m, targets in edges().items() if floor_of(m) in ground
           for t in targets if floor_of(t) not in ground]
    bad += [f"{m} -> {t}" for m, targets in edges().items() if floor_of(m) == "records"
            for t in targets if floor_of(t) not in ground | {"records"}]
    assert not bad, bad


def _builder_tests_outside_build() -> list[str]:
    return [f"{p.relative_to(REPO)}:{n}" for p in sorted(PACKAGE.rglob("*.py")) if "build" not in p.relative_to(PACKAGE).parts[:1]
            for n, line in enumerate(p.read_text().splitlines(), 1) if "builder ==" in line or "builder !=" in line]


def test_only_the_build_package_tests_which_builder():
    """Which builder makes a binary is the build package's business: nobody else branches on it."""
    found = _builder_tests_outside_build()
    assert not found, found
