"""TileLang itself: generated source -> a TileLang prim_func -> a compiled kernel or device source.

The one module of SepTran that imports TileLang (besides ``tl_cache``'s eviction
from TileLang's memory), and only inside its functions: a process that finds
its builds cached never calls them. TileLang's parsing and lowering hold the
GIL and keep state per thread, so they run one at a time (``_LOCK``); the
compilers they start run in parallel.

TileLang parses ``@T.prim_func`` bodies from their source file, so the
generated program is written to a content-addressed file under the cache
folder and imported from there: the text a user reads is the text compiled.
A file found there is used only if it is exactly the text its name hashes;
anything else (truncated, edited) is rewritten, with a warning.
"""
from __future__ import annotations

import hashlib
import importlib.util
import logging
import sys
import threading
from pathlib import Path

from septran import env
from septran.errors import BuildError, InternalError
from septran.build import integrity, tl_cache, vendor
from septran.target import Target

log = logging.getLogger(__name__)

_LOCK = threading.RLock()


def source_file(source: str, name: str) -> Path:
    data = source.encode()
    digest = hashlib.sha256(data).hexdigest()[:16]
    folder = env.cache_dir() / "sources"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}_{digest}.py"
    try:
        if path.read_bytes() == data:
            return path
        log.warning("cached TileLang source %s does not match the hash in its name (truncated or edited); rewriting it", path)
    except FileNotFoundError:
        pass
    except OSError as err:
        log.warning("cached TileLang source %s cannot be read (%s); rewriting it", path, err)
    integrity.write_atomic(path, data)  # atomic: concurrent processes never read half a file
    return path


def load_prim_func(source: str, name: str, path: Path | None = None):
    """Imports the generated module (from ``path``, a file holding exactly ``source``) and returns its prim_func."""
    with _LOCK:
        return _load_prim_func(source, name, path or source_file(source, name))


def _load_prim_func(source: str, name: str, path: Path):
    import tilelang  # noqa: F401  (registers TileLang's TVM before the module imports its dialect)

    module_name = f"septran_generated.{path.stem}"
    if module_name in sys.modules:
        return getattr(sys.modules[module_name], name)
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    try:
        # From the checked text, not through the import system: no __pycache__ to go stale or bad.
        exec(compile(source, str(path), "exec"), module.__dict__)
    except Exception as err:  # the program SepTran generated does not parse: SepTran's bug, never the user's
        raise InternalError("emitter", f"TileLang rejected the generated program {path}: {type(err).__name__}: {err}",
                            f"the generated file {path}") from err
    sys.modules[module_name] = module
    return getattr(module, name)


def compile_kernel(prim_func, target: Target, path_hint: str):
    """tilelang.compile with the target's backend, flags and pass configs."""
    import tilelang

    def once():
        return tilelang.compile(
            prim_func,
            target=_tl_target(target),
            execution_backend=target.execution_backend,
            compile_flags=list(target.compile_flags) + vendor.link_flags(target) or None,
            pass_configs=dict(target.pass_configs) or None,
        )

    try:
        return tl_cache.checked(once)
    except Exception as err:
        raise _rejected(err, "build", path_hint, target) from err


def device_source_of(job) -> str:
    """The device source (CUDA, HIP, C) TileLang prints for a build job's TileLang source: parsed and lowered
    here. Both builders' device stage; one seam, looked up at each call, where the test suite stands in its
    records of TileLang's answers (tests/support/lowering_records.py)."""
    return lower_device_source(job.prim_func(), job.target, str(job.path("tilelang")))


def lower_device_source(prim_func, target: Target, path_hint: str) -> str:
    """The device source (CUDA, HIP or C) without building it: works with no GPU or vendor compiler."""
    import tilelang
    import tvm

    try:
        with _LOCK:
            t = tvm.target.Target(_tl_target(target))
            with tvm.transform.PassContext(opt_level=3, config=dict(target.pass_configs)), t:
                return tilelang.lower(prim_func, target=t).kernel_source
    except Exception as err:
        raise _rejected(err, "lower", path_hint, target) from err


def _rejected(err: Exception, what: str, path_hint: str, target: Target) -> Exception:
    """The machine failed (a compiler missing, a full disk): a BuildError. TileLang refused a program that
    passed every check of SepTran's: SepTran's bug, an InternalError."""
    text = f"TileLang could not {what} {path_hint} for {target.name}: {type(err).__name__}: {str(err)[:2000]}"
    if isinstance(err, OSError):
        return BuildError(text, hint="check that the target's compiler is installed and the cache folder is writable")
    return InternalError("TileLang " + what, text, f"the generated file {path_hint}")


def _tl_target(target: Target):
    t = target.tilelang_target
    return dict(t) if not isinstance(t, str) else t
