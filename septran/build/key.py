"""The build key: known before any stage runs, so that a warm process finds every stage's output without TileLang.

It hashes what changes what is built (Triton's compiler keys the same way):
SepTran's emitted TileLang source (every decision of the lowering is in it),
the builder and its flags (the target's compile flags, TileLang target and
pass configs, the vendor library's digest, which covers the headers every
kernel force-includes), what ``-march=native`` resolves to on this CPU (not
the flag's text), and the versions of SepTran, TileLang and the C++ compiler.
No absolute path goes in: a cache folder moved elsewhere still hits.
"""
from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

from septran.build import toolchain, vendor
from septran.target import Target
from septran.version import __version__, tilelang_version


def build_key(source: str, builder: str, target: Target, compiler: bool) -> str:
    """64 hex digits. ``compiler``: the builder runs the C++ compiler itself (its version and the CPU count)."""
    facts = {
        "septran": __version__,
        "tilelang": tilelang_version(),
        "builder": builder,
        "tilelang_target": target.tilelang_target if isinstance(target.tilelang_target, str) else dict(target.tilelang_target),
        "execution_backend": target.execution_backend,
        "pass_configs": {k: str(v) for k, v in dict(target.pass_configs).items()},
        "flags": list(target.compile_flags),
        "vendor": vendor.digest(target),
        "rewrites": _rewrites_digest(builder),
    }
    if compiler:
        c = toolchain.compiler_facts()
        facts["cxx"] = c["version"]
        facts["native"] = toolchain.native_flags(target.compile_flags)
    text = json.dumps(facts, sort_keys=True, default=str)
    return hashlib.sha256(f"{text}\0{source}".encode()).hexdigest()


# The modules that make each builder's stages from TileLang's output (the C builder's OpenMP pragma and loop
# split): an edit to one changes what a cached stage would hold, so their text is in the key, not only the version.
_REWRITERS = {"c": ("c_builder.py", "c_parallel.py", "c_split.py"), "tilelang": ("tilelang_builder.py",)}


@functools.lru_cache(maxsize=None)
def _rewrites_digest(builder: str) -> str:
    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for name in _REWRITERS.get(builder, ()):
        h.update(name.encode() + b"\0" + (here / name).read_bytes())
    return h.hexdigest()[:16]
