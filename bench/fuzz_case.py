"""One fuzz case: compile a (mutated) mapping or logic file, run what is accepted, say what came out.

Outcomes: ``correct`` (accepted, run on the CPU, equal to torch), ``accepted``
(accepted for a target that does not run here: TileLang source generated),
``wrong`` (accepted, run, not equal to torch), ``located`` (a SepTranError at a
line of the mutated file or of the file it was compiled with), ``unlocated``
(a SepTranError without one), ``internal`` (septran.InternalError), ``other``
(any other exception). The bench script adds ``crash`` and ``hang``.
"""
from __future__ import annotations

import importlib.util
import logging
import math
import os
import re
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # fuzz_mutate beside this file

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
MAPPINGS = REPO / "mappings"
RUNS_HERE = ("cpu", "dsa_ref", "dsa_acme")  # targets whose kernels run on this machine
SEPTRAN_DIR = str(REPO / "septran") + os.sep
LOGIC_DIR = str(REPO / "septran" / "ops" / "logic") + os.sep

OUTCOMES = ("correct", "accepted", "located", "unlocated", "internal", "other", "crash", "hang", "wrong")


def _module(path: Path):
    spec = importlib.util.spec_from_file_location(f"fuzz_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_refs: dict = {}


def references() -> dict:
    """op -> (inputs(generator) -> dict of tensors, reference(**inputs) -> tensor), as the run scripts compute them."""
    if _refs:
        return _refs
    import torch
    import torch.nn.functional as F

    att = _module(EXAMPLES / "attention" / "run_attention.py")
    rms = _module(EXAMPLES / "rmsnorm" / "run_rmsnorm.py")
    epi = _module(EXAMPLES / "gemm_epilogue" / "run_gemm_epilogue.py")
    rope = _module(EXAMPLES / "rope" / "run_rope.py")
    gqa = _module(EXAMPLES / "gqa_kv_cache" / "run_gqa_kv_cache.py")

    def rand(g, *shape):
        return torch.randn(*shape, generator=g)

    _refs.update({
        "gemm": (lambda g: {"A": rand(g, 37, 29), "B": rand(g, 29, 45)}, lambda A, B: A @ B),
        "bmm": (lambda g: {"A": rand(g, 3, 37, 29), "B": rand(g, 3, 29, 45)}, lambda A, B: torch.bmm(A, B)),
        "gemm_epilogue": (lambda g: {"A": rand(g, 37, 29), "B": rand(g, 29, 45), "bias": rand(g, 45)},
                          lambda A, B, bias: epi.ACTIVATIONS["relu"](A @ B + bias)),
        "softmax": (lambda g: {"X": 3 * rand(g, 19, 77)}, lambda X: torch.softmax(X, dim=-1)),
        "layernorm": (lambda g: {"X": rand(g, 19, 77) + 1, "W": rand(g, 77), "B": rand(g, 77)},
                      lambda X, W, B: F.layer_norm(X, (X.shape[-1],), W, B, 1e-5)),
        "rmsnorm": (lambda g: {"X": rand(g, 19, 77), "W": rand(g, 77)}, lambda X, W: rms.rms_norm(X, W, 1e-6)),
        "rope": (lambda g: {"X": rand(g, 2, 19, 3, 16), "C": rand(g, 19, 16), "S": rand(g, 19, 16)},
                 lambda X, C, S: rope.apply_rope(X, C, S)),
        "attention": (lambda g: {"Q": rand(g, 1, 2, 33, 16), "K": rand(g, 1, 2, 41, 16), "V": rand(g, 1, 2, 41, 16)},
                      lambda Q, K, V: att.reference(Q, K, V, False)),
        # The output's shape is tied to no input: the case passes Y (given outputs are named in GIVEN).
        "conv2d": (lambda g: {"X": rand(g, 2, 9, 11, 5), "W": rand(g, 3, 3, 5, 7), "Y": torch.empty(2, 7, 9, 7)},
                   lambda X, W, Y: F.conv2d(X.permute(0, 3, 1, 2), W.permute(3, 2, 0, 1)).permute(0, 2, 3, 1)),
        "cross_entropy": (lambda g: {"X": 3 * rand(g, 19, 77), "Y": torch.randint(0, 77, (19,), generator=g)},
                          lambda X, Y: F.cross_entropy(X, Y.long(), reduction="none")),
        # the attend kernel at pos 0: the new tokens over the caches' first rows (the others finite, unread)
        "gqa_kv_cache": (lambda g: {"Q": rand(g, 1, 4, 5, 16), "Kc": rand(g, 1, 2, 23, 16), "Vc": rand(g, 1, 2, 23, 16)},
                         lambda Q, Kc, Vc: gqa.reference(Q, Kc[:, :, :5], Vc[:, :, :5], 0)),
        "swiglu_mlp": (lambda g: {"X": rand(g, 19, 37), "Wg": rand(g, 37, 45), "Wu": rand(g, 37, 45)},
                       lambda X, Wg, Wu: F.silu(X @ Wg) * (X @ Wu)),
        "reduce": (lambda g: {"X": rand(g, 19, 77)}, lambda X: X.sum(dim=0)),  # the logic file's default: column sums
    })
    return _refs


GIVEN = {"conv2d": ("Y",)}  # outputs the case passes (their shapes are the caller's)


def _same(out, ref, typed: bool = False) -> bool:
    """``out`` equals the float64 reference ``ref`` as far as its type allows (a typed output or temp, the dtype
    family's, is compared with the reference cast to the output's type, looser for 16-bit floats)."""
    import torch

    if out.dtype in (torch.float16, torch.bfloat16) or (typed and out.dtype.is_floating_point):
        ref, tol = ref.to(out.dtype).double(), (5e-2, 5e-2)
    elif not out.dtype.is_floating_point:  # int or bool: the reference cast as torch casts (truncation), +-1
        ref = ref.nan_to_num(0.0, 0.0, 0.0)
        ref, tol = ref.to(out.dtype).double(), (0.0, 0.0 if out.dtype == torch.bool else 1.0)
    else:
        tol = (1e-3, 1e-4)
    out, ref = out.double(), ref.double()
    if out.shape != ref.shape or not bool((out.isnan() == ref.isnan()).all()):
        return False
    keep = ~ref.isnan()
    return bool(torch.allclose(out[keep], ref[keep], rtol=tol[0], atol=tol[1]))


def _from_threads(kernel, inputs: dict, n: int = 3, calls: int = 3) -> list:
    """The kernel called from ``n`` threads at once, ``calls`` times each: every result (or the first exception)."""
    import threading

    results: list = []

    def work():
        try:
            for _ in range(calls):
                results.append(kernel(**inputs))
        except BaseException as e:  # noqa: BLE001 - reported by the caller
            results.append(e)

    threads = [threading.Thread(target=work) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def _overlapping_output(kernel, inputs: dict, out):
    """The call's inputs with the first input moved into a buffer the output (passed by name) partly overlaps:
    (inputs, output name, output tensor), or None when the kernel has no output one may pass."""
    import torch

    names = [a.name for a in kernel.outputs]
    first = next((k for k, v in inputs.items() if hasattr(v, "numel") and v.numel() and v.dtype == out.dtype), None)
    if len(names) != 1 or first is None or not out.numel():
        return None
    x = inputs[first]
    base = torch.zeros(x.numel() + out.numel(), dtype=out.dtype)
    moved = base[: x.numel()].view(x.shape)
    moved.copy_(x)
    start = max(0, x.numel() - out.numel() // 2 - 1)  # the output's start inside the input
    return {**inputs, first: moved}, names[0], base[start: start + out.numel()].view(out.shape)


def classify(err: BaseException, files: tuple[str, ...]) -> tuple[str, str]:
    import septran

    text = f"{type(err).__name__}: {err}"
    if isinstance(err, septran.InternalError):
        return "internal", text
    if isinstance(err, septran.SepTranError):
        # The kernel library's logic files (septran/ops/logic) are logic a user reads, not SepTran's internals.
        if SEPTRAN_DIR in str(err).replace(LOGIC_DIR, "") or "Traceback (most recent call last)" in str(err):
            return "unlocated", "message names SepTran's files: " + text
        located = err.loc is not None and err.loc.file in files and err.loc.line >= 1
        return ("located" if located else "unlocated"), text
    return "other", text


def compile_and_check(logic: Path, mapping: Path, op: str, target: str, seed: int, run: bool,
                      probes: tuple = (), typed: bool = False) -> tuple[str, str]:
    """Compiles, specialises (source), and where ``run`` builds and compares with torch. ``probes``: "threads"
    (the kernel called from threads at once: every result right), "overlap" (an output passed partly over an
    input: refused). ``typed``: the logic's temps or outputs have drawn element types."""
    import torch
    import septran
    import septran.runtime.vendor
    import tilelang  # noqa: F401 - imported first so that its logger's level sticks

    logging.getLogger("tilelang").setLevel(logging.ERROR)
    make, reference = references()[op]
    inputs = make(torch.Generator().manual_seed(seed))
    try:
        kernel = septran.compile(logic_file=logic, mapping_file=mapping)
        if target not in RUNS_HERE or not run:
            kernel.specialize(**inputs)
            return "accepted", "source generated"
        if op in GIVEN:  # until outputs can be passed to kernel(...): run the variant on inputs, then outputs
            variant = kernel.specialize(**inputs)
            ins = [v for k, v in inputs.items() if k not in GIVEN[op]]
            variant.build()(*ins, *(inputs[k] for k in GIVEN[op]))
            septran.runtime.vendor.check_errors(kernel.target, variant.program.name)
            out = inputs[GIVEN[op][0]]
        else:
            out = kernel(**inputs)
    except Exception as err:  # noqa: BLE001 - classifying every exception is the point
        return classify(err, (str(logic), str(mapping)))
    ref = reference(**{k: v.double() for k, v in inputs.items()})
    if not _same(out, ref, typed):
        if typed and any(f'dtype="{d}"' in logic.read_text() for d in ("int32", "int64", "bool")):
            return "correct", "an integer temp: no reference in its type (ran, no crash)"
        err = (out.double() - ref).abs().nan_to_num(math.inf).max().item() if out.shape == ref.shape else math.inf
        return "wrong", f"max |out - ref| = {err:.3g}, shape {tuple(out.shape)} vs {tuple(ref.shape)}"
    if "threads" in probes and op not in GIVEN:
        for r in _from_threads(kernel, inputs):
            if isinstance(r, BaseException):
                return classify(r, (str(logic), str(mapping)))[0] if not isinstance(r, septran.SepTranError) else "wrong", \
                    f"from threads: {type(r).__name__}: {r}"
            if not _same(r, ref, typed):
                return "wrong", "a call from one of 3 threads gave another result"
    if "overlap" in probes and op not in GIVEN:
        given = _overlapping_output(kernel, inputs, out)
        if given is not None:
            args, name, overlapping = given
            try:
                kernel(**args, **{name: overlapping})
            except septran.CallError as err:
                if "shares memory" not in str(err):
                    return "other", f"overlapping output: {err}"
            except Exception as err:  # noqa: BLE001
                return classify(err, (str(logic), str(mapping)))
            else:
                return "wrong", f"output {name} passed partly over an input was accepted"
    return "correct", ""


def run_case(case: dict) -> dict:
    """``case``: kind ("mapping" | "logic"), op, target, seed, data (bytes or str), run (bool)."""
    sys.dont_write_bytecode = True
    if case["kind"] == "probe":  # the harness's own test: a case that crashes or hangs its worker
        if case["action"] == "crash":
            os._exit(3)
        if case["action"] == "hang":
            import time

            time.sleep(3600)
        return {"outcome": "correct", "detail": "probe"}
    folder = Path(tempfile.mkdtemp(prefix="septran-fuzz-"))
    warnings.simplefilter("ignore", SyntaxWarning)  # mutants are full of them; they are not outcomes
    try:
        if case["kind"] == "mapping":
            mapping = folder / f"{case['op']}.yaml"
            mapping.write_bytes(case["data"])
            logic = EXAMPLES / case["op"] / f"{case['op']}.py"
        else:
            logic = folder / f"{case['op']}.py"
            logic.write_text(case["data"])
            mapping = MAPPINGS / case["target"] / f"{case['op']}.yaml"
        # A drawn 16-bit accumulator (accum_dtype) is as exact as its type: compared like a typed output.
        typed = case.get("family") == "dtype" or (case["kind"] == "mapping" and
                                                  re.search(rb"accum_dtype:\s*(float16|bfloat16)", case["data"]) is not None)
        outcome, detail = compile_and_check(logic, mapping, case["op"], case["target"], case["seed"], case.get("run", True),
                                            tuple(case.get("probes", ())), typed)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return {"outcome": outcome, "detail": detail[:400]}


def shipped_mappings() -> list[tuple[str, str, Path]]:
    """(target, op, path) of every shipped mapping whose operator has an example logic file."""
    return [(p.parent.name, p.stem, p) for p in sorted(MAPPINGS.glob("*/*.yaml"))
            if (EXAMPLES / p.stem / f"{p.stem}.py").is_file()]


def mapping_cases(n: int, seed: int, targets=None):
    """``n`` seeded mutations of the shipped mappings (of ``targets``, default all)."""
    import random

    from fuzz_mutate import mutate_mapping

    rng = random.Random(seed)
    pool = [m for m in shipped_mappings() if targets is None or m[0] in targets]
    originals = {path: path.read_bytes() for _, _, path in pool}
    for index in range(n):
        target, op, path = rng.choice(pool)
        data, note = mutate_mapping(rng, originals[path])
        yield {"kind": "mapping", "index": index, "op": op, "target": target, "seed": seed * 1_000_003 + index,
               "data": data, "mutation": f"{target}/{op}.yaml: {note}", "probes": _probes(seed, index)}


def _probes(seed: int, index: int) -> tuple:
    """One case in four is also called from threads at once, one in four with an output over an input (drawn
    apart from the mutations, so a seed's mutations stay what they were)."""
    import random

    rng = random.Random(seed * 7_919 + index)
    return tuple(p for p in ("threads", "overlap") if rng.random() < 0.25)


def logic_source(op: str) -> str:
    """An example's logic: the kernel library's file where the example only imports it."""
    text = (EXAMPLES / op / f"{op}.py").read_text()
    library = REPO / "septran" / "ops" / "logic" / f"{op}.py"
    if f"from septran.ops.logic.{op} import *" in text and library.is_file():
        return library.read_text()
    return text


def logic_cases(n: int, seed: int, families=("tracer",)):
    """``n`` seeded mutations of the example logic files, compiled with their cpu mapping."""
    import random

    from fuzz_mutate import mutate_logic

    rng = random.Random(seed)
    ops = sorted(op for _, op, _ in shipped_mappings() if (MAPPINGS / "cpu" / f"{op}.yaml").is_file())
    sources = {op: logic_source(op) for op in ops}
    for index in range(n):
        op = rng.choice(ops)
        text, family, note = mutate_logic(rng, sources[op], families)
        yield {"kind": "logic", "index": index, "op": op, "target": "cpu", "seed": seed * 1_000_003 + index,
               "data": text, "family": family, "mutation": f"{op}.py: {note}", "probes": _probes(seed, index)}
