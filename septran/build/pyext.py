"""The C entry of kernel calls (``fast_call.cpp``): a CPython extension built once per Python, torch and
compiler into the cache, and loaded on demand.

It is built against torch's C++ headers and libraries, so its name hashes
what it depends on: its source, the flags, Python's version and ABI tag,
torch's version and the files it reads the tensor object's layout from, and
the compiler's version. A library whose recorded hash does not match is
rebuilt (``shared_lib.built``). Building takes about 10 s of one core, so
``start()`` runs it on a background thread: calls go through Python until it
is loaded. Where it cannot be built or loaded (no compiler, no Python headers,
a torch whose tensor object it does not know) the Python path keeps running,
and a debug log says why.
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import logging
import sysconfig
import threading
from pathlib import Path
from typing import Optional

from septran.build import shared_lib, toolchain
from septran.errors import SepTranError

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("fast_call.cpp")
MODULE = "septran_fast_call"  # the name its PyInit_ function has
FLAGS = ("-std=c++20", "-O2", "-fPIC", "-shared", "-w")

# torch's Python tensor object (THPVariable) holds its tensor as one of these; the source declares the layout.
_LAYOUTS = {"c10::MaybeOwned<at::Tensor> cdata;": "-DSEPTRAN_THPVARIABLE_MAYBE_OWNED", "at::Tensor cdata;": None}

_lock = threading.Lock()
_state: dict = {"module": None, "thread": None, "why": None}


def module(wait: Optional[float] = 0.0):
    """The loaded extension, or None: not built yet (``wait``: seconds to wait for a build under way; None
    waits for it to end), or it cannot be (``why()`` says why)."""
    thread = _state["thread"]
    if _state["module"] is None and thread is not None and (wait is None or wait > 0):
        thread.join(wait)
    return _state["module"]


def why() -> Optional[str]:
    """Why the extension is not loaded (None while it is being built, or once it is)."""
    return _state["why"]


def start() -> None:
    """Builds (if the cache lacks it) and loads the extension on a background thread, once per process."""
    with _lock:
        if _state["thread"] is not None:
            return
        _state["thread"] = threading.Thread(target=_build_and_load, name="septran-fast-call-build", daemon=True)
        _state["thread"].start()


def _build_and_load() -> None:
    try:
        _state["module"] = load(build())
    except (SepTranError, OSError, ImportError, ValueError, AssertionError) as err:
        _state["why"] = f"{type(err).__name__}: {err}".splitlines()[0]
        log.debug("the C entry of kernel calls is not available: %s; calls go through Python", _state["why"])


def build() -> Path:
    """The extension's path in the cache, built if missing or damaged."""
    import torch

    torch_dir = Path(torch.__file__).parent
    include, lib = torch_dir / "include", torch_dir / "lib"
    header = include / "torch" / "csrc" / "autograd" / "python_variable.h"
    text = header.read_text() if header.is_file() else ""
    layout = next((flag for decl, flag in _LAYOUTS.items() if decl in text), "none")
    if layout == "none":
        raise ImportError(f"torch {torch.__version__}'s tensor object ({header}) has a layout this entry does not know")
    python_include = sysconfig.get_paths()["include"]
    if not (Path(python_include) / "Python.h").is_file():
        raise ImportError(f"Python's headers are not installed ({python_include}/Python.h)")
    abi = f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"
    flags = [*FLAGS, abi, *([layout] if layout else []), f"-I{python_include}", f"-I{include}"]
    libs = [f"-L{lib}", "-ltorch_python", "-ltorch_cpu", "-lc10", f"-Wl,-rpath,{lib}"]
    cxx = toolchain.cxx()
    digest = hashlib.sha256()
    for part in (SOURCE.read_text(), text, " ".join(flags + libs), torch.__version__,
                 sysconfig.get_config_var("EXT_SUFFIX") or "", sysconfig.get_python_version(),
                 toolchain.compiler_facts()["version"]):
        digest.update(part.encode() + b"\0")
    return shared_lib.built("pyext", MODULE, digest.hexdigest()[:16],
                            lambda out, src: [cxx, *flags, src, *libs, "-o", out],
                            "the C entry of kernel calls", source=(".cpp", SOURCE.read_text()))


def load(path: Path):
    """The extension at ``path``, imported and checked: it must read a tensor's address and shape as torch does."""
    import torch

    loader = importlib.machinery.ExtensionFileLoader(MODULE, str(path))
    spec = importlib.util.spec_from_file_location(MODULE, str(path), loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    for t in (torch.arange(6, dtype=torch.float32).reshape(2, 3),
              torch.nn.Parameter(torch.zeros(3, 1, 2, dtype=torch.float64))):
        got, want = mod.probe(t), (t.data_ptr(), tuple(t.shape), t.element_size())
        if got != want:
            raise ImportError(f"{path} reads a tensor as {got}, torch as {want}")
    log.info("the C entry of kernel calls: %s", path)
    return mod
