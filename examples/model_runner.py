"""What the model examples share: compile a block with a backend, run a prefill and decode steps, check every
output and both KV caches against eager torch, time both, and print SepTran's report of the graph.

Backends: ``septran`` (``torch.compile(model, backend="septran")``: the operators SepTran knows run as its
kernels, the rest stays with torch), ``inductor`` (torch.compile's default), ``aot_eager`` (torch.compile's capture
with nothing compiled: checks that the model's graph is captured whole) and ``eager`` (the model itself). Every
compile uses ``fullgraph=True``: a graph break is an error, not a slowdown.

The check is the FlashAttention rule: the same model in float64 (the weights of the checked dtype, widened) is
the reference; the backend's largest error against it may be at most twice eager torch's own in the same dtype,
plus two units of the dtype's rounding at the output's scale.
"""
from __future__ import annotations

import copy
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import torch

BACKENDS = ("septran", "inductor", "aot_eager", "eager")


def load(path: Path, name: str):
    """A module by its path (both model examples' files are called model.py: names must not clash)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


def unavailable(backend: str) -> str | None:
    """Why ``backend`` cannot run here, or None."""
    if backend not in BACKENDS:
        return f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}"
    if backend != "septran":
        return None
    try:
        import septran.model  # noqa: F401  (registers the backend with torch._dynamo)
    except ImportError as err:
        return f"septran.model does not import: {err}"
    import torch._dynamo

    if "septran" not in torch._dynamo.list_backends(exclude_tags=()):
        return "the torch.compile backend 'septran' is not registered (septran.model.backend)"
    return None


def compiled(model, backend: str):
    """``model`` as ``backend`` runs it."""
    why = unavailable(backend)
    if why:
        raise RuntimeError(why)
    if backend == "eager":
        return model
    return torch.compile(model, backend=backend, fullgraph=True)


def median_seconds(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bound(eager_err: float, ref: torch.Tensor, dtype: torch.dtype) -> float:
    """The FlashAttention rule's largest allowed error: 2 x eager torch's, plus 2 roundings at the output's scale."""
    return 2 * eager_err + 2 * torch.finfo(dtype).eps * max(1.0, ref.abs().max().item())


def check_run(model, backend: str, prompt: int, steps: int, dtype: torch.dtype, seed: int = 0,
              verbose: bool = True) -> dict:
    """A prefill of ``prompt`` tokens, then ``steps`` decode steps, through ``backend``, eager torch (same dtype) and
    the float64 reference, each with its own caches. Returns the errors, the bounds and whether every output and
    cache row written so far kept the rule (``ok``)."""
    fn = compiled(model, backend)
    ref_model = copy.deepcopy(model).double()
    hidden = model.cfg.hidden
    gen = torch.Generator().manual_seed(seed)
    caches = {name: m.new_cache(dtype=d) for name, m, d in
              (("backend", model, dtype), ("eager", model, dtype), ("ref", ref_model, torch.float64))}
    rows, pos, ok = [], 0, True
    with torch.no_grad():
        for s in [prompt] + [1] * steps:
            x = torch.randn(1, s, hidden, generator=gen).to(dtype)
            start = time.perf_counter()
            out = fn(x, pos, *caches["backend"])
            seconds = time.perf_counter() - start
            eager = model(x, pos, *caches["eager"])
            ref = ref_model(x.double(), pos, *caches["ref"])
            row = {"pos": pos, "tokens": s, "seconds": seconds}
            for what, got, want, ours in [("out", out, ref, eager)] + [
                    (kv, c[:, :, :pos + s], r[:, :, :pos + s], e[:, :, :pos + s])
                    for kv, c, r, e in zip("kv", caches["backend"], caches["ref"], caches["eager"])]:
                err = (got.double() - want).abs().max().item()
                eager_err = (ours.double() - want).abs().max().item()
                row[what] = {"err": err, "eager_err": eager_err, "bound": bound(eager_err, want, dtype)}
                ok &= err <= row[what]["bound"]
            rows.append(row)
            if verbose:
                o = row["out"]
                print(f"  pos {pos:4d}, {s:3d} new: max |out - ref| {backend} {o['err']:.3e}   eager {o['eager_err']:.3e}"
                      f"   (bound {o['bound']:.3e}; caches {max(row['k']['err'], row['v']['err']):.3e})"
                      f"   {seconds * 1e3:9.2f} ms{' (with compile)' if len(rows) <= 2 and backend != 'eager' else ''}")
            pos += s
    return {"ok": ok, "rows": rows, "max_err": max(r["out"]["err"] for r in rows)}


def timings(model, backend: str, prompt: int, dtype: torch.dtype, repeats: int) -> dict:
    """Median seconds of a prefill of ``prompt`` tokens and of a decode step at position ``prompt``, for eager torch
    and ``backend`` (each compiled once before it is timed)."""
    out = {}
    gen = torch.Generator().manual_seed(1)
    xp = torch.randn(1, prompt, model.cfg.hidden, generator=gen).to(dtype)
    xd = torch.randn(1, 1, model.cfg.hidden, generator=gen).to(dtype)
    with torch.no_grad():
        for name in dict.fromkeys(["eager", backend]):
            fn, (kc, vc) = compiled(model, name), model.new_cache(dtype=dtype)
            fn(xp, 0, kc, vc)
            out[name] = {"prefill": median_seconds(lambda: fn(xp, 0, kc, vc), repeats),
                         "decode": median_seconds(lambda: fn(xd, prompt, kc, vc), repeats)}
    return out


def explain(model, prompt: int, dtype: torch.dtype, show_table: bool = True) -> list:
    """SepTran's report of the prefill's and a decode step's graphs (``septran.explain_model``): the table and the
    share of the FLOPs that SepTran's kernels run. The reports, or [] where SepTran has no model level here."""
    import septran

    explain_model = getattr(septran, "explain_model", None)
    if explain_model is None or unavailable("septran"):
        print("septran.explain_model is not available here: no report")
        return []
    reports = []
    gen = torch.Generator().manual_seed(2)
    for what, s, pos in (("prefill", prompt, 0), ("decode step", 1, prompt)):
        kc, vc = model.new_cache(dtype=dtype)
        x = torch.randn(1, s, model.cfg.hidden, generator=gen).to(dtype)
        with torch.no_grad():
            report = explain_model(model, (x, pos, kc, vc))
        reports.append(report)
        share = flops_share(report)
        print(f"\n{what} ({s} tokens at position {pos}): "
              + (f"{share:.1%} of the FLOPs run in SepTran kernels" if share is not None else "FLOPs share not reported"))
        if show_table:
            print(report)
    return reports


def flops_share(report) -> float | None:
    """The report's share of the FLOPs in SepTran kernels (0..1), under the names it may have."""
    for name in ("septran_share", "flops_share", "share"):
        value = getattr(report, name, None)
        if value is not None:
            return float(value() if callable(value) else value)
    return None


def main(title: str, build, backend: str, prompt: int, steps: int, dtype: str, repeats: int, quiet: bool) -> dict:
    """The run script's body: the check, the report (septran), the timings; returns the check's result."""
    dt = getattr(torch, dtype)
    model = build(dt)
    print(f"{title}, {dtype}, backend {backend}: prefill {prompt} tokens + {steps} decode steps")
    result = check_run(model, backend, prompt, steps, dt)
    print(f"  {'OK' if result['ok'] else 'WRONG'}: every output and cache row within the FlashAttention rule"
          f" (2 x eager's error vs float64, + 2 roundings)")
    if backend == "septran":
        result["reports"] = explain(model, prompt, dt, show_table=not quiet)
    if repeats:
        t = timings(model, backend, prompt, dt, repeats)
        result["timings"] = t
        print(f"\nmedian of {repeats}: " + "   ".join(
            f"{name}: prefill {v['prefill'] * 1e3:.2f} ms, decode step {v['decode'] * 1e3:.3f} ms" for name, v in t.items()))
    return result
