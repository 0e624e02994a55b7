"""Kernels SepTran builds from C (``tilelang.builder: c``): TileLang lowers the program, g++ builds, ctypes calls.

Why not ``tilelang.compile``: TileLang 0.1.15's C path goes from the C it
prints straight to g++ (its C post-processing hook is never called for the
"c" target), so the grid's loops could not become an OpenMP loop; and its
adapter re-checks every tensor on every call (about 13 us), which SepTran has
checked already. Here the C is TileLang's, unchanged but for the OpenMP
pragma (``c_parallel``), built with the target's flags and the vendor's, and
called with the tensors' addresses in the prim_func's parameter order.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import subprocess

from septran.errors import DeviceError, InternalError
from septran.lowering.tile_ir import TileProgram
from septran.runtime import c_parallel, dynamic_dims, shared_lib, vendor
from septran.target import Target

# OpenMP for the grid's pragma and for `declare simd` math; g++ links the OpenMP runtime torch has loaded
# (libgomp.so.1), so the kernels' threads follow torch.set_num_threads and OMP_NUM_THREADS.
# -z defs: a call of a function no library defines (a vendor call for an element type it lacks) fails the
# build, with the name, instead of the load.
BUILDER_FLAGS = ("-std=c++17", "-fPIC", "-shared", "-fopenmp", "-Wl,-z,defs")


class CKernel:
    """A built kernel: call it with the tensors in the program's parameter order."""

    def __init__(self, path, function: str, params: list[str], source: str, dims=()):
        self.path = path
        self.source = source
        self._lib = ctypes.CDLL(str(path))
        self._fn = getattr(self._lib, function)
        # TileLang's C orders the parameters by name, not as the prim_func does, and drops those never read
        # (A and B of a product over K = 0).
        # A dynamic dimension is an integer argument after the tensors: its value read off a tensor's shape.
        declared = _c_parameters(source, function)  # (C type, name)
        order = [name for _, name in declared]
        sizes = {name: (k, axis) for name, k, axis in dims}
        if not set(order) <= set(params) | set(sizes):
            raise InternalError("C build", f"{function} takes ({', '.join(order)}) in the C TileLang printed, "
                                f"the program has ({', '.join(params)})", function)
        self._order = [params.index(name) for name in order if name not in sizes]
        self._sizes = [sizes[name] for name in order if name in sizes]
        if order[:len(self._order)] != [params[k] for k in self._order]:
            raise InternalError("C build", f"{function} takes its sizes before its tensors", function)
        self._fn.argtypes = [ctypes.c_void_p] * len(self._order) + [ctypes.c_int64 if ctype == "int64_t" else ctypes.c_int32
                                                                     for ctype, name in declared if name in sizes]
        self._fn.restype = ctypes.c_int32
        self._name = function

    @property
    def function(self):
        """The compiled function (ctypes): its arguments are addresses, in ``order`` (bench/cpu.py's call floor)."""
        return self._fn

    @property
    def order(self) -> list[int]:
        """For each argument of ``function``, the index of its tensor in the program's parameter order."""
        return self._order

    def __call__(self, *tensors) -> None:
        code = self._fn(*[tensors[k].data_ptr() for k in self._order], *[tensors[k].shape[a] for k, a in self._sizes])
        if code:
            raise DeviceError(f"{self._name} returned {code}")

    def get_kernel_source(self) -> str:
        return self.source


def c_source(program: TileProgram, device_source: str) -> str:
    """The C that is built: TileLang's, with the grid's loops run by OpenMP where the lowering proved it safe."""
    if program.parallel is None:
        return device_source
    return c_parallel.parallel_grid(device_source, _function(program), program.parallel)


def build(program: TileProgram, source: str, target: Target) -> CKernel:
    """``source``: the C to build, ``c_source``'s."""
    flags = (*target.compile_flags, *vendor.link_flags(target))
    cxx, version, templates = _toolchain()
    digest = hashlib.sha256("\0".join((source, *flags, cxx, version, templates)).encode()).hexdigest()[:16]
    path = shared_lib.built("c", program.name, digest, lambda out, src: [cxx, *BUILDER_FLAGS, f"-I{templates}", src, *flags, "-o", out],
                            f"the C of {program.name}", source=(".cpp", source))
    return CKernel(path, _function(program), [p.sym.name for p in program.params], source, dynamic_dims.c_arguments(program))


def _c_parameters(source: str, function: str) -> list[tuple[str, str]]:
    """(first type word, name) of each parameter of ``function``'s definition, in order."""
    m = c_parallel.definition(function).search(source)
    if m is None:
        raise InternalError("C build", f"no definition of {function} in the C TileLang printed", function)
    return [(p.split()[0], p.split()[-1].lstrip("*")) for p in m.group(1).split(",") if p.strip()]


def _function(program: TileProgram) -> str:
    return f"{program.name}_kernel"  # TileLang's C target names the kernel's function so


@functools.lru_cache(maxsize=None)
def _toolchain() -> tuple[str, str, str]:
    """The C++ compiler, its version, and TileLang's template folder (both change what is built)."""
    from tilelang.contrib.cc import get_cplus_compiler
    from tilelang.env import TILELANG_TEMPLATE_PATH

    cxx = get_cplus_compiler() or "g++"
    try:
        version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    except OSError:
        version = "unknown"
    return cxx, version, TILELANG_TEMPLATE_PATH
