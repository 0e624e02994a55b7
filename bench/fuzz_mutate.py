"""Seeded mutations of the shipped mappings (bytes) and of the example logic files (Python tokens).

Each mutator takes a ``random.Random`` and the original and returns
``(mutated, description)``. Mapping mutators work on bytes: anything may come
out, and the loader must turn it into a mapping or a located error. Logic
mutators come in two families:

- ``TRACER``: mutations whose outcome must be a located error, or a program
  that means what the original meant (invalid constants, names that are not
  defined or are of the wrong kind, inserted ``raise``, broken syntax, a second
  ``@task.define``). The test suite runs these.
- ``INDEX``: tile indices moved off the partition's grid (``k`` -> ``k - 1``,
  ``0`` -> ``1`` in a subscript); a correct compiler refuses every one of them
  (the lowering's bounds verification). Only the bench script runs these.
- ``DTYPE``: element types drawn for temps (``task.temp(..., dtype=...)``) and
  outputs (``@task.define(dtype={...})`` on the entry): int32, int64, bool,
  float16, bfloat16. The kernel must compute what torch computes in that type
  (the case compares with the reference cast to it), or refuse at a line.

Mapping mutators also draw accumulator types (``accum_dtype``), memories of any
target for a ``mems`` entry, and leaves of any target for a binding.
"""
from __future__ import annotations

import functools
import io
import random
import re
import tokenize

# mappings ---------------------------------------------------------------------------------------

_NUM = re.compile(rb"(?<![\w.])\d+(?![\w.])")
_KEY = re.compile(rb"(?m)^(\s*)([A-Za-z_]\w*)(\s*:)|([{,]\s*)([A-Za-z_]\w*)(\s*:)")
_SCALAR = re.compile(rb"(?<=: )[A-Za-z_0-9]+")
_VALUE_START = re.compile(rb": ")

CONTROL = [b"\x00", b"\x1b", b"\x07", b"\x7f", b"\r", b"\t", b"\x85", b"\xff", b"\xc3", b"\x0c", b"\xe2\x80\xa8"]
TAGS = [b"!!int ", b"!!float ", b"!!map ", b"!!seq ", b"!!str ", b"!!bool ", b"!!null ", b"!!binary ",
        b"!!python/object/apply:os.system ", b"!tune ", b"!custom ", b"&a ", b"*a ", b"!!timestamp "]
NUMBERS = [b"0", b"1", b"2", b"3", b"7", b"8", b"16", b"48", b"64", b"-1", b"1.5", b"1e400", b".nan", b".inf",
           b"2147483646", b"2147483647", b"2147483648", b"1000000000000000000000000000000", b"9" * 5000, b"0x10",
           b"true", b"null", b"''"]
NAMES = [b"None", b"import", b"lambda", b"T", b"print", b"float", b"__import__", b"match", b"x y", b"'a\\nb'",
         b"BM", b"BN", b"BK", b"GLOBAL", b"LOCAL", b"SHARED", b"REGISTER", b"HOST", b"BLOCK", b"C", b"A", b"B",
         b"gemm_host", b"threads", b"pipeline", b"mems", b"copy", b"calls", b"tunables", b"accum_dtype", b"float16"]


def _spot(rng: random.Random, data: bytes) -> int:
    return rng.randrange(len(data) + 1)


def m_flip(rng, data):
    if not data:
        return data, "flip (empty)"
    i = rng.randrange(len(data))
    bit = 1 << rng.randrange(8)
    return data[:i] + bytes([data[i] ^ bit]) + data[i + 1:], f"flip bit {bit:#x} at {i}"


def m_delete(rng, data):
    i = _spot(rng, data)
    n = rng.choice([1, 1, 2, 5, 20])
    return data[:i] + data[i + n:], f"delete {n} bytes at {i}"


def m_control(rng, data):
    i, c = _spot(rng, data), rng.choice(CONTROL)
    return data[:i] + c + data[i:], f"insert {c!r} at {i}"


def m_tag(rng, data):
    spots = [m.end() for m in _VALUE_START.finditer(data)]
    i, t = rng.choice(spots), rng.choice(TAGS)
    return data[:i] + t + data[i:], f"insert tag {t.decode()!r} at {i}"


def m_number(rng, data):
    spots = list(_NUM.finditer(data))
    if not spots:
        return m_flip(rng, data)
    m, n = rng.choice(spots), rng.choice(NUMBERS)
    return data[:m.start()] + n + data[m.end():], f"number {m.group().decode()} -> {n[:20].decode()}"


def m_nesting(rng, data):
    spots = list(_SCALAR.finditer(data))
    m, depth = rng.choice(spots), rng.choice([5, 31, 33, 200, 1500])
    kind = rng.choice([(b"[", b"]"), (b"{a: ", b"}")])
    return data[:m.start()] + kind[0] * depth + m.group() + kind[1] * depth + data[m.end():], f"nest {depth} deep"


def m_rename_key(rng, data):
    spots = list(_KEY.finditer(data))
    m = rng.choice(spots)
    g = 2 if m.group(2) else 5
    new = rng.choice(NAMES)
    return data[:m.start(g)] + new + data[m.end(g):], f"key {m.group(g).decode()} -> {new.decode()}"


def m_rename_value(rng, data):
    spots = list(_SCALAR.finditer(data))
    m, new = rng.choice(spots), rng.choice(NAMES + NUMBERS[:12])
    return data[:m.start()] + new + data[m.end():], f"value {m.group().decode()} -> {new[:20].decode()}"


def m_swap_values(rng, data):
    spots = list(_SCALAR.finditer(data))
    a, b = sorted(rng.sample(spots, 2), key=lambda m: m.start())
    out = data[:a.start()] + b.group() + data[a.end():b.start()] + a.group() + data[b.end():]
    return out, f"swap {a.group().decode()} <-> {b.group().decode()}"


def m_lines(rng, data):
    lines = data.split(b"\n")
    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
    op = rng.choice(["delete", "duplicate", "swap", "indent", "dedent"])
    if op == "delete":
        del lines[i]
    elif op == "duplicate":
        lines.insert(i, lines[i])
    elif op == "swap":
        lines[i], lines[j] = lines[j], lines[i]
    elif op == "indent":
        lines[i] = b"  " + lines[i]
    else:
        lines[i] = lines[i].lstrip()
    return b"\n".join(lines), f"line {op} {i}"


def m_encoding(rng, data):
    op = rng.choice(["utf-16", "utf-16-le", "utf-32", "bom8", "bom16", "latin1", "cp1252"])
    text = data.decode("utf-8", "replace")
    if op in ("utf-16", "utf-16-le", "utf-32"):
        return text.encode(op), f"encode {op}"
    if op == "bom8":
        return b"\xef\xbb\xbf" + data, "utf-8 BOM"
    if op == "bom16":
        return b"\xff\xfe" + data, "utf-16 BOM on utf-8 bytes"
    i = _spot(rng, data)
    return data[:i] + "é".encode(op) + data[i:], f"{op} byte at {i}"


DTYPES = ["int32", "int64", "bool", "float16", "bfloat16", "float32", "float64"]
MEMORIES = [b"GLOBAL", b"LOCAL", b"SHARED", b"REGISTER", b"SCRATCH", b"TCM"]
LEAVES = [b"gemm_leaf_blas", b"gemm_leaf_cpu", b"vector_loops", b"tile_loops", b"gemm_leaf_tensorcore",
          b"gemm_leaf_tensorcore_rows", b"gemm_leaf_matrixcore", b"global_parallel", b"tile_parallel",
          b"gemm_leaf_systolic", b"gemm_leaf_mxu"]
_PROC = re.compile(rb"(?m)^(\s+)proc: (?!HOST)\w+\n")
_MEMS = re.compile(rb"mems: \{([^}]*)\}")
_BINDING = re.compile(rb"leaf_task_bindings: \{([^}]*)\}")


def m_accum_dtype(rng, data):
    """An accumulator type for a program's instance (a float16 or int accumulator a leaf may not take)."""
    spots = list(_PROC.finditer(data))
    m, dtype = rng.choice(spots), rng.choice(DTYPES).encode()
    line = m.group(1) + b"accum_dtype: " + dtype + b"\n"
    if b"accum_dtype:" in data:
        return re.sub(rb"accum_dtype: [^\n]*", b"accum_dtype: " + dtype, data, count=1), f"accum_dtype -> {dtype.decode()}"
    return data[:m.end()] + line + data[m.end():], f"accum_dtype: {dtype.decode()}"


def _entry_value(rng, data, pattern, values, what):
    spots = [(m, e) for m in pattern.finditer(data) for e in re.finditer(rb"(\w+|\"\*\"): (\w+)", m.group(1))]
    m, e = rng.choice(spots)
    new = rng.choice(values)
    start, end = m.start(1) + e.start(2), m.start(1) + e.end(2)
    return data[:start] + new + data[end:], f"{what} {e.group(1).decode()}: {e.group(2).decode()} -> {new.decode()}"


def m_memory(rng, data):
    """A memory of any target for one ``mems`` entry."""
    return _entry_value(rng, data, _MEMS, MEMORIES, "mems")


def m_leaf(rng, data):
    """A leaf of any target for one binding."""
    return _entry_value(rng, data, _BINDING, LEAVES, "leaf")


MAPPING_MUTATORS = [m_flip, m_delete, m_control, m_tag, m_number, m_number, m_nesting, m_rename_key, m_rename_value,
                    m_swap_values, m_lines, m_encoding, m_accum_dtype, m_memory, m_memory, m_leaf]


def mutate_mapping(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """One to three mutations of a mapping file's bytes."""
    notes = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        try:
            data, note = rng.choice(MAPPING_MUTATORS)(rng, data)
        except (ValueError, IndexError):  # nothing to mutate of that kind
            data, note = m_flip(rng, data)
        notes.append(note)
    return data, "; ".join(notes)


# logic files ------------------------------------------------------------------------------------

_BAD_NUMBERS = ["10**400", "10**12", "2**31", "1.5", "'x'", "-2**40"]
_BAD_NAMES = ["None", "True", "'x'", "print", "T", "lambda", "import", "object()", "undefined_name_x", "(1, 2)"]
_EXCEPTIONS = ["NameError('mutant')", "ZeroDivisionError", "ValueError('mutant')", "KeyError('k')",
               "RecursionError", "AttributeError('a')", "TypeError('t')", "IndexError", "AssertionError"]


@functools.lru_cache(maxsize=64)
def _tokens(source: str) -> tuple:
    """The source's tokens; cached, since every mutation starts from one of a few shipped files."""
    return tuple(tokenize.generate_tokens(io.StringIO(source).readline))


def _offset(lines: list[str], row: int, col: int) -> int:
    return sum(len(x) for x in lines[:row - 1]) + col


def _replace_token(source: str, tok, new: str) -> str:
    lines = source.splitlines(keepends=True)
    a = _offset(lines, *tok.start)
    b = _offset(lines, *tok.end)
    return source[:a] + new + source[b:]


@functools.lru_cache(maxsize=64)
def _factory_params(source: str) -> frozenset[str]:
    """Parameters of the functions that build the operator (causal, log, activation...): changing them is
    changing which operator it is, not a mistake."""
    out = set()
    for m in re.finditer(r"(?m)^def \w+\(([^)]*)\)", source):
        out |= {p.split(":")[0].split("=")[0].strip() for p in m.group(1).split(",") if p.strip()}
    return frozenset(out)


def l_bad_number(rng, source):
    toks = [t for t in _tokens(source) if t.type == tokenize.NUMBER and re.fullmatch(r"\d+", t.string)]
    tok, new = rng.choice(toks), rng.choice(_BAD_NUMBERS)
    return _replace_token(source, tok, new), f"line {tok.start[0]}: number {tok.string} -> {new}"


def l_bad_name(rng, source):
    skip = _factory_params(source) | {"from", "import", "def", "for", "in", "if", "else", "return", "lambda", "not",
                                      "and", "or", "is", "None", "True", "False", "pass"}
    toks = [t for t in _tokens(source) if t.type == tokenize.NAME and t.string not in skip]
    tok, new = rng.choice(toks), rng.choice(_BAD_NAMES)
    return _replace_token(source, tok, new), f"line {tok.start[0]}: name {tok.string} -> {new}"


def l_raise(rng, source):
    lines = source.splitlines(keepends=True)
    body = [i for i, l in enumerate(lines) if l.startswith("    ") and l.strip() and not l.strip().startswith(("#", "@", '"'))
            and not lines[i - 1].rstrip().endswith(("(", ","))]
    i = rng.choice(body)
    indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
    exc = rng.choice(_EXCEPTIONS)
    lines.insert(i, f"{indent}raise {exc}\n")
    return "".join(lines), f"line {i + 1}: raise {exc}"


def l_syntax(rng, source):
    """Text that breaks the syntax or changes nothing (inside a comment). Not ':' or deleting a character:
    ``task.com:pute(...)`` is a valid annotation and ``exp2`` -> ``exp`` a valid other program."""
    i = rng.randrange(len(source))
    op = rng.choice(["paren", "indent", "quote", "bracket"])
    ins = {"paren": "(", "indent": "\n   ", "quote": "'", "bracket": "]"}[op]
    return source[:i] + ins + source[i:], f"insert {ins!r} at {i}"


def l_delete_token(rng, source):
    params = _factory_params(source)
    toks = [t for t in _tokens(source) if t.type in (tokenize.NAME, tokenize.OP) and t.string not in params]
    tok = rng.choice(toks)
    return _replace_token(source, tok, ""), f"line {tok.start[0]}: delete {tok.string!r}"


def l_define_twice(rng, source):
    lines = source.splitlines(keepends=True)
    spots = [i for i, l in enumerate(lines) if l.strip().startswith("@task.define")]
    i = rng.choice(spots)
    lines.insert(i, lines[i])
    return "".join(lines), f"line {i + 1}: @task.define twice"


def i_shift_index(rng, source):
    """``X[.., k, ..]`` -> ``X[.., k - 1, ..]`` (or + 1): off the grid at the first or last step."""
    spots = [m for m in re.finditer(r"(?<=[\[, ])([ijkbh])(?=[,\]])", source)
             if "[" in source[source.rfind("\n", 0, m.start()):m.start()] and "lambda" not in
             source[source.rfind("\n", 0, m.start()):m.start()]]
    m, delta = rng.choice(spots), rng.choice([" - 1", " + 1"])
    return source[:m.end()] + delta + source[m.end():], f"index {m.group()} -> {m.group()}{delta}"


def i_zero_to_one(rng, source):
    """``Ap[0, k]`` -> ``Ap[1, k]``: every such 0 indexes a dimension whose grid has one tile."""
    # Not a default value on a ``def`` line (``axis: int = 0`` of the operator's builder): that is another operator.
    spots = [m for m in re.finditer(r"(?<=[\[, ])0(?=[,\]])", source)
             if not source[source.rfind("\n", 0, m.start()) + 1:m.start()].lstrip().startswith("def ")]
    m = rng.choice(spots)
    return source[:m.start()] + "1" + source[m.end():], f"subscript 0 -> 1 at {m.start()}"


def i_tile_to_none(rng, source):
    """A tile size of 1 -> None (the whole dimension): the loop indices over it then leave the grid."""
    spots = [m for m in re.finditer(r"(?<=tile=\()[^)]*", source)]
    m = rng.choice(spots)
    ones = [k.start() + m.start() for k in re.finditer(r"\b1\b", m.group())]
    i = rng.choice(ones)
    return source[:i] + "None" + source[i + 1:], f"tile size 1 -> None at {i}"


def d_temp_dtype(rng, source):
    """``task.temp(...)`` -> ``task.temp(..., dtype="<drawn>")`` (an existing dtype= replaced)."""
    spots = [m for m in re.finditer(r"task\.temp\(([^()]|\([^()]*\))*\)", source)]
    m, dtype = rng.choice(spots), rng.choice(DTYPES[:5])
    call = re.sub(r",\s*dtype=[^,)]*", "", m.group())
    new = call[:-1] + f", dtype=\"{dtype}\")"
    return source[:m.start()] + new + source[m.end():], f"line {source.count(chr(10), 0, m.start()) + 1}: temp dtype {dtype}"


def d_output_dtype(rng, source):
    """The entry task's outputs typed ``@task.define(dtype={...})``: the last task defined is the entry (the
    example files end with it); its first parameter is an output in every example."""
    defs = list(re.finditer(r"(?m)^( *)@task\.define(\([^\n]*\))?\n\1def (\w+)\((\w+)", source))
    m, dtype = defs[-1], rng.choice(DTYPES[:5])
    new = f"{m.group(1)}@task.define(dtype={{\"{m.group(4)}\": \"{dtype}\"}})\n"
    line_end = source.index("\n", m.start()) + 1
    return source[:m.start()] + new + source[line_end:], f"output {m.group(4)} of {m.group(3)} as {dtype}"


TRACER = [l_bad_number, l_bad_name, l_raise, l_syntax, l_delete_token, l_define_twice]
INDEX = [i_shift_index, i_zero_to_one, i_tile_to_none]
DTYPE = [d_temp_dtype, d_output_dtype]


def mutate_logic(rng: random.Random, source: str, families=("tracer",)) -> tuple[str, str, str]:
    """One mutation of a logic file's text: (mutated, family, description)."""
    pool = ([("tracer", f) for f in TRACER if "tracer" in families] + [("index", f) for f in INDEX if "index" in families]
            + [("dtype", f) for f in DTYPE if "dtype" in families])
    family, fn = rng.choice(pool)
    try:
        text, note = fn(rng, source)
    except (ValueError, IndexError, tokenize.TokenError):
        family, (text, note) = "tracer", l_syntax(rng, source)
    return text, family, note
