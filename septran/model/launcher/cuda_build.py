"""A GPU segment launcher's shared library: built with nvcc and cached like the cpu launcher (``build``).

The key hashes the launcher's CUDA source, nvcc's flags (the architecture among them), nvcc's version, the
TVM-FFI whose headers it includes (the kernels' host entries take its ``TVMFFIAny`` and DLPack's ``DLTensor``),
and SepTran's version; the entry is bound to its key by its sidecar, so a swapped or damaged library is rebuilt,
never run. The CUDA runtime is linked statically (nvcc's default): the library needs no libcudart of its own
version on the machine, only a driver new enough for this nvcc. Building needs no GPU.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import logging
import subprocess
from pathlib import Path

from septran.errors import BuildError
from septran.version import __version__

log = logging.getLogger(__name__)
FLAGS = ("-std=c++17", "-O2", "-shared", "-Xcompiler", "-fPIC", "-cudart", "static")
FUNCTION, ARENA = "septran_segment", "septran_segment_arena"
BUILDS = [0]  # GPU launchers compiled in this process (tests count them)


def nvcc() -> str:
    from septran.build.toolchain import nvcc_path

    found = nvcc_path()
    if found is None:
        raise BuildError("a GPU segment launcher needs nvcc, which is not installed",
                         hint="install the CUDA toolkit, or set SEPTRAN_LAUNCHER=0 to run the steps one by one")
    return found


@functools.lru_cache(maxsize=None)
def nvcc_version() -> str:
    done = subprocess.run([nvcc(), "--version"], capture_output=True, text=True)
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""


def tvm_ffi_include() -> Path:
    import tvm_ffi

    return Path(tvm_ffi.__file__).parent / "include"


def tvm_ffi_version() -> str:
    import tvm_ffi

    return str(tvm_ffi.__version__)


def flags(arch: str) -> list[str]:
    """nvcc's flags for ``arch`` (``sm_80``, ``sm_90a``), without the include folder (its version is keyed)."""
    return [*FLAGS, f"-arch={arch}"]


def key(source: str, arch: str) -> str:
    facts = {"septran": __version__, "flags": flags(arch), "nvcc": nvcc_version(), "tvm_ffi": tvm_ffi_version()}
    text = json.dumps(facts, sort_keys=True)
    return hashlib.sha256(f"launcher-cuda\0{text}\0{source}".encode()).hexdigest()


def built(source: str, arch: str) -> Path:
    """The library's path, built if no trusted entry holds it (as the cpu launcher's, ``build.built``)."""
    from septran.model.launcher import build

    return build.built(f"segment_{arch}", key(source, arch), source, "cu",
                       lambda src, out: [nvcc(), *flags(arch), f"-I{tvm_ffi_include()}", str(src), "-o", str(out)],
                       "GPU segment launcher", BUILDS)


def load(source: str, arch: str):
    """(library, segment function, arena-size function), through ctypes. Keep the library while they are used."""
    lib = ctypes.CDLL(str(built(source, arch)))
    fn = getattr(lib, FUNCTION)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                   ctypes.c_int32]
    fn.restype = ctypes.c_int32
    arena = getattr(lib, ARENA)
    arena.argtypes = [ctypes.c_void_p]
    arena.restype = ctypes.c_int64
    return lib, fn, arena


def api() -> list[int]:
    """The addresses of TVM-FFI's C functions the launcher calls (``cuda_source.API`` entries of ``F``)."""
    from tvm_ffi import libinfo

    lib = _tvm_ffi_lib(libinfo.find_libtvm_ffi())
    return [ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
            for name in ("TVMFFIFunctionCall", "TVMFFIEnvSetStream")]


@functools.lru_cache(maxsize=None)
def _tvm_ffi_lib(path: str):
    return ctypes.CDLL(path)


class _ByteArray(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("size", ctypes.c_size_t)]


_OBJECT_HEADER = 24  # sizeof(TVMFFIObject): the error cell (kind, message, ...) follows it (TVMFFIErrorGetCellPtr)


def raised_error() -> str | None:
    """The error a kernel's host entry left raised in this thread's TVM-FFI slot, as ``kind: message`` (taken, so
    the slot is empty again), or None."""
    from tvm_ffi import libinfo

    lib = _tvm_ffi_lib(libinfo.find_libtvm_ffi())
    handle = ctypes.c_void_p()
    lib.TVMFFIErrorMoveFromRaised(ctypes.byref(handle))
    if not handle.value:
        return None
    try:
        kind, message = (_ByteArray.from_address(handle.value + _OBJECT_HEADER + i * ctypes.sizeof(_ByteArray))
                         for i in range(2))
        return f"{ctypes.string_at(kind.data, kind.size).decode(errors='replace')}: " \
               f"{ctypes.string_at(message.data, message.size).decode(errors='replace')}"
    finally:
        lib.TVMFFIObjectDecRef(handle)
