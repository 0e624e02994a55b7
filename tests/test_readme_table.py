"""The README's N + M table (lines of logic and of mapping per operator and target) is measured, not typed."""
from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

from conftest import REPO

FIRST = ["gemm", "bmm", "gemm_epilogue", "softmax", "layernorm", "rmsnorm", "attention"]
# every example with a logic file of its own name is a row: wave 1's in their order, then the others by name
OPERATORS = FIRST + sorted(p.parent.name for p in (REPO / "examples").glob("*/*.py")
                           if p.stem == p.parent.name and p.stem not in FIRST)
TARGETS = ["cpu", "sm80", "sm90", "gfx942", "dsa_ref", "dsa_acme"]


def code_lines(path: Path) -> int:
    """Lines holding code: no blanks, comments or docstrings."""
    text = path.read_text()
    if path.suffix in (".yaml", ".yml"):
        return sum(1 for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#"))
    docstrings = set()
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            docstrings.update(range(body[0].lineno, body[0].end_lineno + 1))
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING, tokenize.ENDMARKER}
    lines = {tok.start[0] for tok in tokenize.generate_tokens(io.StringIO(text).readline) if tok.type not in skip}
    return len(lines - docstrings)


def table() -> str:
    head = "| operator | logic | " + " | ".join(TARGETS) + " |"
    rule = "| --- | --- | " + " | ".join("---" for _ in TARGETS) + " |"
    rows = [head, rule]
    for op in OPERATORS:
        maps = [str(code_lines(REPO / "mappings" / t / f"{op}.yaml")) if (REPO / "mappings" / t / f"{op}.yaml").exists() else "-"
                for t in TARGETS]
        library = REPO / "septran" / "ops" / "logic" / f"{op}.py"  # the kernel library's logic, which the example imports
        logic = library if library.exists() else REPO / "examples" / op / f"{op}.py"
        rows.append(f"| {op} | {code_lines(logic)} | " + " | ".join(maps) + " |")
    return "\n".join(rows)


def test_readme_table_is_measured():
    assert table() in (REPO / "README.md").read_text(), "update the README's table to:\n" + table()


def test_readme_softmax_excerpt_is_the_example():
    """The README quotes the online-softmax leaf; every line of the quote is in examples/softmax/softmax.py."""
    readme = (REPO / "README.md").read_text()
    block = readme.split("The online-softmax step of `examples/softmax/softmax.py`", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    source = {line.strip() for line in (REPO / "septran" / "ops" / "logic" / "softmax.py").read_text().splitlines()}
    quoted = [line.strip() for line in block.splitlines() if line.strip()]
    assert len(quoted) >= 8 and all(line in source for line in quoted), [q for q in quoted if q not in source]
