"""Targets: the hardware facts and leaf implementations of ``backends/<name>/target.yaml``.

Everything that differs between targets is read from these files; no code
under ``septran/`` asks for a target by name.
"""
from __future__ import annotations

import functools
from pathlib import Path
from types import MappingProxyType
from typing import Mapping, Optional

from septran import resources
from septran.errors import MappingError, SepTranError, SourceLoc
from septran.mapping.yaml_source import Located, LocatedDict, load_located
from septran.names import name_problem
from septran.target_types import (  # noqa: F401  (the types, re-exported: septran.target is where they are used from)
    TargetError, MemorySpace, VendorLibrary, Vendor, Proc, LeafImpl, Perf, Target, VENDOR_OPS,
)


def _flag(d, key: str) -> bool:
    """A yes / no key of target.yaml (false where absent): true or false, nothing a truthy string would pass for."""
    val = d.get(key)
    if val is None:
        return False
    if not isinstance(val.value, bool):
        raise TargetError(f"{key} is true or false, got {val.value!r}", val.loc)
    return val.value


def _plain(val: Located):
    """A located value without locations (for nested plain data such as a TileLang target dict)."""
    v = val.value
    if isinstance(v, LocatedDict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def _need(d: LocatedDict, key: str, what: str) -> Located:
    if key not in d:
        raise TargetError(f"{what} has no {key!r}", d.loc)
    return d[key]


SCHEDULES = ("static", "dynamic", "guided")
BUILDERS = ("tilelang", "c")


def _schedules(proc: Located, name: str) -> tuple[str, ...]:
    given = tuple(_plain(proc.value.get("schedules", Located([], proc.loc))))
    unknown = [s for s in given if s not in SCHEDULES]
    if unknown:
        raise TargetError(f"proc {name}: unknown schedule {unknown[0]!r} (known: {', '.join(SCHEDULES)})", proc.loc)
    return given


def _builder(value, loc) -> str:
    if value not in BUILDERS:
        raise TargetError(f"tilelang.builder must be one of {', '.join(BUILDERS)}, got {value!r}", loc)
    return value


def _default_threads(threads: dict, loc: SourceLoc) -> Optional[int]:
    """``threads: {default: 128}``: a program's thread count where its mapping names none; one the target takes."""
    n = threads.get("default")
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, int) or n < 1 or n > threads["max"] or n % threads.get("multiple_of", 1):
        raise TargetError(f"threads.default must be a multiple of {threads.get('multiple_of', 1)} up to {threads['max']}, "
                          f"got {n!r}", loc)
    return n


def load_target_file(path: Path) -> Target:
    root = load_located(path.read_text(), str(path))
    d = root.value
    if not isinstance(d, LocatedDict):
        raise TargetError("target.yaml must be a mapping", root.loc)
    tl = _need(d, "tilelang", "target.yaml").value
    procs = {
        name: Proc(name, tuple(_plain(_need(p.value, "memories", f"proc {name}"))), bool(_plain(p.value.get("grid", Located(False, p.loc)))),
                   _schedules(p, name))
        for name, p in _need(d, "procs", "target.yaml").value.items()
    }
    memories = {}
    for name, m in _need(d, "memories", "target.yaml").value.items():
        mp = _plain(m) or {}
        ops = mp.get("ops", {})
        for op in ops:
            if op not in VENDOR_OPS:
                raise TargetError(f"memory {name}: unknown op {op!r} (known: {', '.join(VENDOR_OPS)})", m.loc)
        placed = mp.get("placement") == "address"
        if placed and not all(op in ops for op in ("load", "store", "fill_zero")):
            raise TargetError(f"memory {name} is placed by address and needs ops load, store and fill_zero", m.loc)
        memories[name] = MemorySpace(
            name, mp.get("alloc"), mp.get("suffix", name.lower()), mp.get("capacity_bytes"),
            bool(mp.get("per_stage", False)), placed, int(mp.get("align_bytes", 64)), MappingProxyType(dict(ops)),
            own_index_only=bool(mp.get("own_index_only", False)),
            op_dtypes=tuple(mp.get("op_dtypes", ())),
            copy_by_dtype=MappingProxyType({str(t): MappingProxyType(dict(o)) for t, o in mp.get("copy_by_dtype", {}).items()}),
        )
    for proc in procs.values():
        for mem in proc.memories:
            if mem not in memories:
                raise TargetError(f"proc {proc.name} names memory {mem}, which the target does not declare", d["procs"].loc)
    leaves = {}
    for name, leaf in (d.get("leaves").value.items() if d.get("leaves") else ()):
        lp = _plain(leaf)
        implements = lp["implements"]
        implements = (implements,) if isinstance(implements, str) else tuple(implements)
        templates = lp["tilelang"]
        if isinstance(templates, str):
            if len(implements) != 1:
                raise TargetError(f"leaf {name} implements {', '.join(implements)}: give `tilelang` one template per entry "
                                  "({kind: template})", leaf.loc)
            templates = {implements[0]: templates}
        missing = [k for k in implements if k not in templates]
        if missing:
            raise TargetError(f"leaf {name} has no template for {', '.join(missing)}", leaf.loc)
        leaves[name] = LeafImpl(
            name=name,
            implements=implements,
            meaning=lp.get("meaning", ""),
            mems=MappingProxyType({k: tuple(v) for k, v in lp.get("mems", {}).items()}),
            tile_multiple=MappingProxyType({str(k): int(v) for k, v in lp.get("tile_multiple", {}).items()}),
            flags=tuple(lp.get("flags", ())),
            templates=MappingProxyType(dict(templates)),
            loc=leaf.loc,
            accum_dtypes=tuple(lp.get("accum_dtypes", ())),
            dtypes_in=MappingProxyType({k: tuple(v) for k, v in lp.get("dtypes_in", {}).items()}),
            reduced_power_of_two=tuple(lp.get("reduced_power_of_two", ())),
            operand_dtypes=_operand_dtypes(lp.get("operand_dtypes", {}), leaf.loc),
            cpu_flags=tuple(lp.get("cpu_flags", ())),
        )
    threads = _plain(d["threads"]) if "threads" in d else None
    vendor = _vendor(d["vendor"], path.parent) if "vendor" in d else None
    tlp = {k: _plain(v) for k, v in tl.items()}
    return Target(
        name=_plain(_need(d, "name", "target.yaml")),
        folder=path.parent,
        loc=root.loc,
        description=_plain(d.get("description", Located("", root.loc))),
        tilelang_target=tlp["target"],
        language=tlp.get("language", "tilelang.language"),
        execution_backend=tlp.get("execution_backend", "tvm_ffi"),
        builder=_builder(tlp.get("builder", "tilelang"), tl.loc),
        atomic_add=_flag(d, "atomic_add"),
        two_kernels=_flag(d, "two_kernels"),
        one_tile_versions=_flag(d, "one_tile_versions"),
        clip_staged_loops=_flag(d, "clip_staged_loops"),
        reuse_buffers=_flag(d, "reuse_buffers"),
        parallel_in_program=_flag(d, "parallel_in_program"),
        compile_flags=tuple(tlp.get("compile_flags", ())),
        pass_configs=MappingProxyType(dict(tlp.get("pass_configs", {}))),
        torch_device=_plain(_need(d, "torch_device", "target.yaml")),
        detect=MappingProxyType(_plain(d["detect"]) if "detect" in d else {}),
        device_source_ext=tlp.get("device_source_ext", "cu"),
        dtypes=tuple(_plain(_need(d, "dtypes", "target.yaml"))),
        max_threads=threads["max"] if threads else None,
        thread_multiple=threads.get("multiple_of", 1) if threads else 1,
        default_threads=_default_threads(threads, d["threads"].loc) if threads else None,
        procs=MappingProxyType(procs),
        memories=MappingProxyType(memories),
        leaves=MappingProxyType(leaves),
        dtype_codes=MappingProxyType(_plain(d["dtype_codes"]) if "dtype_codes" in d else {}),
        converts=MappingProxyType(_plain(d["converts"]) if "converts" in d else {}),
        holds_as_bits=MappingProxyType(_plain(d["holds_as_bits"]) if "holds_as_bits" in d else {}),
        dynamic_pipeline_stages=_plain(d["dynamic_pipeline_stages"]) if "dynamic_pipeline_stages" in d else None,
        nested_tma_pipelines_wrong=bool(_plain(d.get("nested_tma_pipelines_wrong", Located(False, root.loc)))),
        vendor=vendor,
        copy_options=tuple(_plain(d["copy_options"])) if "copy_options" in d else (),
        perf=_perf(d["perf"], memories) if "perf" in d else None,
        model_fusions=tuple(_plain(d["model_fusions"])) if "model_fusions" in d else (),
    )


_VENDOR_KEYS = {"sources", "cflags", "libraries", "include", "take_error", "reset", "set_debug", "debug_violations"}


def _section(node: Located, section: str, known, what: str) -> LocatedDict:
    """A section of target.yaml that must be a mapping of known keys."""
    d = node.value
    if not isinstance(d, LocatedDict):
        raise TargetError(f"{section} must be a mapping ({what})", node.loc)
    for key, val in d.items():
        if key not in known:
            raise TargetError(f"{section}: unknown key {key!r} (known: {', '.join(sorted(known))})", val.loc)
    return d


def _vendor(node: Located, folder: Path) -> Vendor:
    d = _section(node, "vendor", _VENDOR_KEYS, "sources, cflags, libraries, include, take_error, ...")
    libraries = []
    for lib in (d["libraries"].value if "libraries" in d else ()):
        lp = _plain(lib)
        fields = set(lp) if isinstance(lp, dict) else set()
        if fields != {"package", "file", "dist"} or not all(isinstance(v, str) for v in lp.values()):
            raise TargetError("vendor.libraries: each entry is {package: <import name>, file: <path inside it>, "
                              "dist: <distribution to pip install>}", lib.loc)
        if not lp["package"].isidentifier():  # find_spec of a dotted name would import its parents
            raise TargetError(f"vendor.libraries: package {lp['package']!r} must be a top-level import name", lib.loc)
        libraries.append(VendorLibrary(lp["package"], lp["file"], lp["dist"]))
    vp = _plain(node)
    return Vendor(
        sources=tuple(folder / s for s in _plain(_need(d, "sources", "vendor"))),
        cflags=tuple(vp.get("cflags", ())),
        take_error=vp.get("take_error"),
        reset=vp.get("reset"),
        set_debug=vp.get("set_debug"),
        debug_violations=vp.get("debug_violations"),
        libraries=tuple(libraries),
        include=tuple(folder / h for h in vp.get("include", ())),
    )


_PERF_KEYS = {"units", "peak_flops", "vector_flops", "bandwidth_bytes", "launch_seconds", "overlap", "shared_space",
              "shared_bytes_per_unit", "shared_reserved_bytes", "threads_per_unit", "programs_per_unit",
              "registers_per_unit"}


def _perf(node: Located, memories: Mapping[str, MemorySpace]) -> Perf:
    d = _section(node, "perf", _PERF_KEYS, "hardware facts")

    def number(key: str, integer: bool = False, required: bool = True):
        if key not in d:
            if required:
                raise TargetError(f"perf has no {key!r}", node.loc)
            return None
        return _positive(d[key], f"perf.{key}", integer)

    peaks = d["peak_flops"].value if "peak_flops" in d else None
    if not isinstance(peaks, LocatedDict) or not peaks:
        raise TargetError("perf.peak_flops must map dtypes to FLOP/s ({float16: 989.4e+12, ...})",
                          d["peak_flops"].loc if "peak_flops" in d else node.loc)
    space = _plain(d["shared_space"]) if "shared_space" in d else None
    if space is not None and space not in memories:
        raise TargetError(f"perf.shared_space names memory {space!r}, which the target does not declare", d["shared_space"].loc)
    if space is not None and "shared_bytes_per_unit" not in d:
        raise TargetError("perf.shared_space needs perf.shared_bytes_per_unit", d["shared_space"].loc)
    return Perf(
        units=number("units", integer=True),
        peak_flops=MappingProxyType({k: _positive(v, f"perf.peak_flops.{k}") for k, v in peaks.items()}),
        vector_flops=number("vector_flops"),
        bandwidth_bytes=number("bandwidth_bytes"),
        launch_seconds=float(_plain(d["launch_seconds"])) if "launch_seconds" in d else 0.0,
        loc=node.loc,
        overlap=bool(_plain(d["overlap"])) if "overlap" in d else True,
        shared_space=space,
        shared_bytes_per_unit=number("shared_bytes_per_unit", integer=True, required=False),
        shared_reserved_bytes=int(_plain(d["shared_reserved_bytes"])) if "shared_reserved_bytes" in d else 0,
        threads_per_unit=number("threads_per_unit", integer=True, required=False),
        programs_per_unit=number("programs_per_unit", integer=True, required=False),
        registers_per_unit=number("registers_per_unit", integer=True, required=False),
    )


def _positive(val: Located, what: str, integer: bool = False):
    """A positive number; YAML reads 989e12 (no dot, no sign) as text, so numeric text is accepted."""
    v = val.value
    try:
        out = float(v) if isinstance(v, str) and not isinstance(v, bool) else v
    except ValueError:
        out = None
    if isinstance(out, bool) or not isinstance(out, (int, float)) or not out > 0 or out != out or out == float("inf"):
        raise TargetError(f"{what} must be a positive number, got {v!r}", val.loc)
    if integer:
        if int(out) != out:
            raise TargetError(f"{what} must be a whole number, got {v!r}", val.loc)
        return int(out)
    return float(out)


@functools.lru_cache(maxsize=None)
def _load_cached(path: Path) -> Target:
    return load_target_file(path)


def available_targets() -> list[str]:
    return sorted(resources.target_folders())


def check_target_name(name, loc: Optional[SourceLoc] = None, source: str = "",
                      error: type[SepTranError] = MappingError) -> Path:
    """The folder of target ``name``: a name from the registry, never a path (``../x``, ``/tmp/x``)."""
    if isinstance(name, str) and name_problem(name) is None:  # a plain name, never a path, before it is joined
        folder = resources.target_folder(name)
        if folder is not None:
            return folder
    folders = resources.target_folders()
    import difflib

    shown = repr(name) if len(repr(name)) <= 60 else repr(name)[:60] + "..."
    close = difflib.get_close_matches(name, list(folders), n=1) if isinstance(name, str) else []
    raise error(
        f"unknown target {shown}" + (f" ({source})" if source else "") + "; a target is a name from the registry, not a path",
        loc,
        hint=(f"did you mean {close[0]!r}? " if close else "") + f"targets: {', '.join(sorted(folders))}",
    )


def load_target(name: str, loc: Optional[SourceLoc] = None) -> Target:
    folder = check_target_name(name, loc)
    target = _load_cached(folder / "target.yaml")
    if target.name != name:
        raise TargetError(f"target folder {name} declares name {target.name!r}", target.loc)
    return target


def detect_target() -> str:
    """The target of this machine's accelerator, from each target's ``detect`` facts; cpu if none."""
    import torch

    fallback = None
    candidates = []
    for name in available_targets():
        t = load_target(name)
        if t.detect.get("fallback"):
            fallback = name
        candidates.append(t)
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        arch = getattr(props, "gcnArchName", "") or ""
        for t in candidates:
            cap = t.detect.get("cuda_capability")
            if cap and torch.version.hip is None and list(torch.cuda.get_device_capability(0)) == list(cap):
                return t.name
            hip = t.detect.get("hip_arch")
            if hip and torch.version.hip is not None and arch.split(":")[0] == hip:
                return t.name
    if fallback is None:
        raise TargetError("no accelerator found and no target declares `detect: {fallback: true}`",
                          hint="set SEPTRAN_TARGET to one of: " + ", ".join(available_targets()))
    return fallback


def _operand_dtypes(table, loc) -> MappingProxyType:
    """``operand_dtypes``: kind -> one combination ``{C: [float32], A: [...]}`` or a list of them."""
    out = {}
    for kind, combos in table.items():
        combos = combos if isinstance(combos, list) else [combos]
        if not combos or not all(isinstance(c, dict) for c in combos):
            raise TargetError(f"operand_dtypes.{kind}: give {{operand: [dtypes]}} or a list of them", loc)
        out[str(kind)] = tuple(MappingProxyType({str(p): tuple(v) for p, v in c.items()}) for c in combos)
    return MappingProxyType(out)
