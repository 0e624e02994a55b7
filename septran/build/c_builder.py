"""The ``c`` builder (``tilelang.builder: c``): TileLang lowers the program to C, SepTran adds OpenMP and builds it
with g++, ctypes calls it.

Why not ``tilelang.compile``: TileLang 0.1.15's C path goes from the C it
prints straight to g++ (its C post-processing hook is never called for the
"c" target), so the grid's loops could not become an OpenMP loop; and its
adapter re-checks every tensor on every call (about 13 us), which SepTran has
checked already. Here the C is TileLang's, unchanged but for the OpenMP
pragma (``c_parallel``), built with the target's flags and the vendor's.

TileLang's C calling convention (the parameters ordered by name, those never
read dropped, dynamic sizes as integers after the tensors) is read off the C
once, when the library is built, and recorded in the library's sidecar: a
warm process loads the library and calls it without TileLang.
"""
from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Callable, Optional

from septran.build import c_parallel, c_split, precompiled, shared_lib, tilelang_api, toolchain, vendor
from septran.build.stages import Builder, Stage
from septran.build.store import Entries
from septran.errors import BuildError, DeviceError, InternalError
from septran.lowering.tile_ir import TileProgram
from septran.target import Target

# OpenMP for the grid's pragma and for `declare simd` math; g++ links the OpenMP runtime torch has loaded
# (libgomp.so.1), so the kernels' threads follow torch.set_num_threads and OMP_NUM_THREADS.
# -z defs: a call of a function no library defines (a vendor call for an element type it lacks) fails the
# build, with the name, instead of the load.
BUILDER_FLAGS = ("-std=c++17", "-fPIC", "-shared", "-fopenmp", "-Wl,-z,defs")


class CKernel:
    """A built kernel: call it with the tensors in the program's parameter order."""

    def __init__(self, path: Path, convention: dict, source: Callable[[], str]):
        self.path = path
        self._source = source
        self._lib = ctypes.CDLL(str(path))
        self._name = convention["function"]
        self._fn = getattr(self._lib, self._name)
        self._order = list(convention["order"])
        self._sizes = [(k, axis) for k, axis, _ in convention["sizes"]]
        self._fn.argtypes = [ctypes.c_void_p] * len(self._order) + [
            ctypes.c_int64 if ctype == "int64_t" else ctypes.c_int32 for _, _, ctype in convention["sizes"]]
        self._fn.restype = ctypes.c_int32

    @property
    def function(self):
        """The compiled function (ctypes): its arguments are addresses, in ``order`` (bench/cpu.py's call floor)."""
        return self._fn

    @property
    def order(self) -> list[int]:
        """For each argument of ``function``, the index of its tensor in the program's parameter order."""
        return self._order

    @property
    def sizes(self) -> list[tuple[int, int]]:
        """(tensor index, axis) of each size argument after the addresses (the C entry of calls passes them)."""
        return self._sizes

    @property
    def source(self) -> str:
        return self._source()

    def __call__(self, *tensors) -> None:
        code = self._fn(*[tensors[k].data_ptr() for k in self._order], *[tensors[k].shape[a] for k, a in self._sizes])
        if code:
            raise DeviceError(f"{self._name} returned {code}")

    def get_kernel_source(self) -> str:
        return self._source()


# The stages --------------------------------------------------------------------------------------------------

def _c(job, tilelang_source: str) -> str:
    """TileLang's C, with the grid's loops run by OpenMP where the lowering proved it safe, and loops over an
    overhanging tile split where the tensor ends (``c_split``)."""
    c = tilelang_api.device_source_of(job)
    if job.program.parallel is not None:
        c = c_parallel.parallel_grid(c, function_name(job.program), job.program.parallel,
                                     c_parallel.tensor_elements(job.program))
    return c_split.split_overhang_loops(c)


def _library(job, _) -> CKernel:
    vendor.load(job.target)  # first, with RTLD_GLOBAL: the kernel and SepTran share the vendor's state
    convention = _convention(job.entries.check("so", "kernel library"))
    if convention is None:
        convention = build(job.program, job.text("c"), job.target, job.entries)
    return CKernel(job.entries.path("so"), convention, lambda: job.text("c"))


BUILDER = Builder(
    name="c",
    stages=(
        Stage("tile", "txt", "tile program", lambda job, _: job.text("tile")),
        Stage("tilelang", "py", "TileLang source", lambda job, _: job.text("tilelang")),
        Stage("c", "c", "C source", _c),
        Stage("so", "so", "kernel library", _library),
    ),
    device="c",
    runs_compiler=True,
)


# g++ ---------------------------------------------------------------------------------------------------------

def build(program: TileProgram, source: str, target: Target, entries: Entries) -> dict:
    """g++ on ``source`` (the C stage's output) into the cache entry; returns the calling convention it records."""
    convention = calling_convention(program, source)
    # The kernel finds the vendor library beside itself: a cache folder moved elsewhere still loads.
    rpath = "$ORIGIN/" + os.path.relpath(vendor.folder(), entries.folder) if target.vendor is not None else ""
    vendor_flags = vendor.link_flags(target, rpath=rpath)
    flags = (*target.compile_flags, *vendor_flags)
    pch = precompiled.header(tuple(target.compile_flags), tuple(vendor_flags))
    first = ("-include", str(pch)) if pch is not None else ()  # before any other -include: g++ takes it only first
    out, src = entries.temporary("so"), entries.temporary("cpp")

    def compile_with(*first: str) -> None:
        shared_lib.run_compiler([toolchain.cxx(), *BUILDER_FLAGS, *first, f"-I{toolchain.tilelang_templates()}", str(src),
                                 *flags, "-o", str(out)], f"the C of {program.name}")

    try:
        src.write_text(source)
        try:
            compile_with(*first)
        except BuildError:
            if pch is None:
                raise
            # A damaged .gch can fail a build g++ would otherwise pass: once more without it, and it is made anew.
            precompiled.discard(pch)
            compile_with()
        entries.adopt("so", out, **convention)
    finally:
        for path in (out, src):
            path.unlink(missing_ok=True)
    return convention


def function_name(program: TileProgram) -> str:
    return f"{program.name}_kernel"  # TileLang's C target names the kernel's function so


def calling_convention(program: TileProgram, source: str) -> dict:
    """The C function's name, and for each of its arguments the tensor (its index among the program's parameters)
    or the dynamic size (tensor, axis, C type) it takes."""
    function = function_name(program)
    params = [p.sym.name for p in program.params]
    declared = _c_parameters(source, function)  # (C type, name)
    order = [name for _, name in declared]
    sizes = {name: (k, axis) for name, k, axis in size_arguments(program)}
    if not set(order) <= set(params) | set(sizes):
        raise InternalError("C build", f"{function} takes ({', '.join(order)}) in the C TileLang printed, "
                            f"the program has ({', '.join(params)})", function)
    tensors = [params.index(name) for name in order if name not in sizes]
    if order[:len(tensors)] != [params[k] for k in tensors]:
        raise InternalError("C build", f"{function} takes its sizes before its tensors", function)
    return {"function": function, "order": tensors,
            "sizes": [[*sizes[name], ctype] for ctype, name in declared if name in sizes]}


def size_arguments(program: TileProgram) -> list[tuple[str, int, int]]:
    """(name, parameter index, axis) of each dynamic dimension: the C function takes its value after the tensors."""
    out = []
    for c in program.consts:
        if c.value is not None:
            continue
        found = next(((k, a) for k, p in enumerate(program.params) for a, e in enumerate(p.shape)
                      if getattr(e, "sym", None) is c.sym), None)
        if found is not None:  # a dimension no tensor holds as a whole is no argument of the C either
            out.append((c.sym.name, *found))
    return out


def _c_parameters(source: str, function: str) -> list[tuple[str, str]]:
    """(first type word, name) of each parameter of ``function``'s definition, in order."""
    m = c_parallel.definition(function).search(source)
    if m is None:
        raise InternalError("C build", f"no definition of {function} in the C TileLang printed", function)
    return [(p.split()[0], p.split()[-1].lstrip("*")) for p in m.group(1).split(",") if p.strip()]


def _convention(meta: Optional[dict]) -> Optional[dict]:
    """The recorded calling convention, if the sidecar holds a well-formed one."""
    if meta is None:
        return None
    try:
        ok = (isinstance(meta["function"], str) and all(isinstance(k, int) for k in meta["order"])
              and all(isinstance(k, int) and isinstance(a, int) and isinstance(t, str) for k, a, t in meta["sizes"]))
    except (KeyError, TypeError, ValueError):
        ok = False
    return meta if ok else None
