"""septran.precompile / septran.load_precompiled (septran/model/precompile.py): a Llama block at odd sizes compiled
once for a prefill and a (dynamic) decode step, saved, and loaded in a fresh process that runs it with no Dynamo or
AOTAutograd trace and without importing TileLang, right against float64 torch under the FlashAttention rule."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from conftest import REPO, load_module, swap_entries
from support import lowering_records

model_runner = load_module(REPO / "examples" / "model_runner.py")
pytestmark = [pytest.mark.build, pytest.mark.skipif(model_runner.unavailable("septran") is not None,
                                                   reason=str(model_runner.unavailable("septran")))]
MODEL = REPO / "examples" / "llama_block" / "model.py"
ODD = dict(hidden=48, heads=3, kv_heads=1, head_dim=16, intermediate=100, max_len=48)
PROMPT = 13

# The child: builds the same block, loads the file, runs a prefill and decode steps at new cache lengths, and
# reports its errors against the block in float64 (and eager float32's, for the bound), and how many graphs it
# rewrote.
CHILD = r"""
import json, sys, time
import torch
sys.path.insert(0, sys.argv[3])
import model_runner
llama = model_runner.load(sys.argv[4], "septran_example_llama_block_model")
import septran
from septran.model import rewrite
rewrites, real = [], rewrite.rewrite
rewrite.rewrite = lambda gm, *a, **k: rewrites.append(gm) or real(gm, *a, **k)
from septran.model import executor, steps
lowered, slow, real_lower, real_slow = [], [], executor.lower, steps.Step._slow
executor.lower = lambda gm, **k: lowered.append(real_lower(gm, **k)) or lowered[-1]
steps.Step._slow = lambda self, *a: slow.append(self.__name__) or real_slow(self, *a)
cfg = llama.LlamaConfig(**json.loads(sys.argv[2]))
torch.manual_seed(0)
model = llama.build(cfg)
ref = __import__("copy").deepcopy(model).double()
start = time.perf_counter()
fn = septran.load_precompiled(model, sys.argv[1])
gen = torch.Generator().manual_seed(1)
kc, vc = model.new_cache()
ke, ve = model.new_cache()
kr, vr = ref.new_cache(dtype=torch.float64)
errs, eager, scales = [], [], []
with torch.no_grad():
    for pos, s in [(0, int(sys.argv[5]))] + [(p, 1) for p in range(int(sys.argv[5]), int(sys.argv[5]) + 6)]:
        x = torch.randn(1, s, cfg.hidden, generator=gen)
        want = ref(x.double(), pos, kr, vr)
        errs.append((fn(x, pos, kc, vc).double() - want).abs().max().item())
        eager.append((model(x, pos, ke, ve).double() - want).abs().max().item())
        scales.append(want.abs().max().item())
print(json.dumps({"errs": errs, "eager": eager, "scales": scales, "tilelang": "tilelang" in sys.modules,
                  "rewrites": len(rewrites), "slow": slow,
                  "not_launched": [s.why_not for g in lowered for s in g.segments if s.fn is None],
                  "seconds": time.perf_counter() - start}))
"""


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    import septran

    llama = model_runner.load(MODEL, "septran_example_llama_block_model")
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = llama.build(llama.LlamaConfig(**ODD))
    gen = torch.Generator().manual_seed(2)
    kc, vc = model.new_cache()
    xp, xd = torch.randn(1, PROMPT, ODD["hidden"], generator=gen), torch.randn(1, 1, ODD["hidden"], generator=gen)
    path = tmp_path_factory.mktemp("precompile") / "llama.pt2"
    compiled = septran.precompile(model, [(xp, 0, kc, vc), (xd, PROMPT, kc, vc)], path, dynamic=[False, True])
    yield path, model, compiled
    torch._dynamo.reset()


def test_a_fresh_process_runs_the_saved_block_without_tracing_or_tilelang(saved):
    path = saved[0]
    env = lowering_records.child_env(dict(os.environ))
    run = subprocess.run([sys.executable, "-c", CHILD, str(path), json.dumps(ODD), str(REPO / "examples"), str(MODEL),
                          str(PROMPT)], capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert not out["tilelang"]  # every kernel came from the build cache
    assert out["rewrites"] == 0  # both graphs' rewrites too: the saving process kept them (septran.model.rewritten)
    # as fast as torch.compile's graphs: no step ran the op's own Python and every segment is one C launch (a
    # dynamic example once made RMSNorm's eps a tensor input: no norm fused, decode steps 25x slower)
    assert out["slow"] == [] and out["not_launched"] == [], (out["slow"], out["not_launched"])
    bound = [2 * e + 2 * torch.finfo(torch.float32).eps * max(1.0, m) for e, m in zip(out["eager"], out["scales"])]
    assert all(e <= b for e, b in zip(out["errs"], bound)), (out["errs"], bound)


def test_the_compiled_model_is_right_in_the_saving_process(saved):
    _, model, compiled = saved
    ref = __import__("copy").deepcopy(model).double()
    gen = torch.Generator().manual_seed(3)
    kc, vc = model.new_cache()
    kr, vr = ref.new_cache(dtype=torch.float64)
    with torch.no_grad():
        for pos, s in [(0, PROMPT), (PROMPT, 1), (PROMPT + 1, 1)]:
            x = torch.randn(1, s, ODD["hidden"], generator=gen)
            want = ref(x.double(), pos, kr, vr)
            err = (compiled(x, pos, kc, vc).double() - want).abs().max().item()
            assert err <= 1e-4 * max(1.0, want.abs().max().item())


def test_a_call_no_saved_graph_accepts_is_refused(saved):
    path, model, _ = saved
    import septran

    fn = septran.load_precompiled(model, path)
    kc, vc = model.new_cache()
    with torch.no_grad(), pytest.raises(RuntimeError, match="Guard"):
        fn(torch.randn(1, PROMPT + 1, ODD["hidden"]), 0, kc, vc)  # a prefill of another length: never compiled


def test_bad_arguments_name_the_fix(tmp_path):
    import septran
    from septran.errors import CallError

    with pytest.raises(CallError, match="at least one example"):
        septran.precompile(torch.nn.Linear(2, 2), [], tmp_path / "x.pt2")
    with pytest.raises(CallError, match="dynamic flags"):
        septran.precompile(torch.nn.Linear(2, 2), [(torch.randn(1, 2),)], tmp_path / "x.pt2", dynamic=[True, False])
    with pytest.raises(CallError, match="torch.nn.Module"):
        septran.precompile(lambda x: x, [(torch.randn(1, 2),)], tmp_path / "x.pt2")
    (tmp_path / "junk.pt2").write_bytes(b"not a pickle")
    with pytest.raises(CallError, match="not a file septran.precompile wrote"):
        septran.load_precompiled(torch.nn.Linear(2, 2), tmp_path / "junk.pt2")


def _right(fn, model, seed: int, steps: int = 2) -> None:
    """``fn`` (a loaded model) gives ``model``'s results on a prefill and ``steps`` decode steps, within the
    FlashAttention rule's bound (twice eager float32's error against float64, plus rounding)."""
    ref = __import__("copy").deepcopy(model).double()
    gen = torch.Generator().manual_seed(seed)
    kc, vc = model.new_cache()
    ke, ve = model.new_cache()
    kr, vr = ref.new_cache(dtype=torch.float64)
    with torch.no_grad():
        for pos, s in [(0, PROMPT)] + [(PROMPT + i, 1) for i in range(steps)]:
            x = torch.randn(1, s, ODD["hidden"], generator=gen)
            want = ref(x.double(), pos, kr, vr)
            err = (fn(x, pos, kc, vc).double() - want).abs().max().item()
            eager = (model(x, pos, ke, ve).double() - want).abs().max().item()
            assert err <= 2 * eager + 2 * torch.finfo(torch.float32).eps * max(1.0, want.abs().max().item())


def test_a_second_load_reads_its_rewrite_from_the_build_cache_and_stays_right(saved, monkeypatch, tmp_path):
    """septran.model.rewritten: the first load rewrites each graph and keeps the rewrite; the next finds it (no
    rewrite runs), and both run right; another SepTran version rewrites them again."""
    path, model, _ = saved
    import septran
    from septran.build.store import Entries
    from septran.model import rewrite, rewritten

    def entries(k):
        e = Entries(rewritten.STAGE, rewritten.NAME, k)
        e.folder = tmp_path  # an empty cache of rewrites (the kernels' stays warm)
        return e

    monkeypatch.setattr(rewritten, "_entries", entries)
    calls = []
    real = rewrite.rewrite
    monkeypatch.setattr(rewrite, "rewrite", lambda gm, *a, **k: calls.append(gm) or real(gm, *a, **k))
    _right(septran.load_precompiled(model, path), model, 4)
    assert len(calls) == 2 and len(list(tmp_path.glob(f"{rewritten.NAME}_*.{rewritten.EXT}"))) == 2
    _right(septran.load_precompiled(model, path), model, 5)
    assert len(calls) == 2  # both graphs' rewrites came from the cache
    import septran.version

    monkeypatch.setattr(septran.version, "__version__", "99.0")  # another SepTran rewrites them again
    septran.load_precompiled(model, path)  # (loaded, not run: its kernels would be another version's too)
    assert len(calls) == 4 and len(list(tmp_path.glob(f"{rewritten.NAME}_*.{rewritten.EXT}"))) == 4


def test_the_rewrite_cache_key_names_the_graph_septran_and_the_settings(monkeypatch):
    import septran.version
    from septran.model import rewritten

    base = rewritten.key(b"graph", None, None)
    assert rewritten.key(b"graph", None, None) == base
    assert rewritten.key(b"graph2", None, None) != base  # another graph
    assert rewritten.key(b"graph", "max-autotune", None) != base
    assert rewritten.key(b"graph", None, {"septran.profile": True}) != base
    monkeypatch.setenv("SEPTRAN_CACHE_DIR", "/elsewhere")  # a cache moved elsewhere still hits
    assert rewritten.key(b"graph", None, None) == base
    monkeypatch.setenv("SEPTRAN_LAUNCHER", "0")
    assert rewritten.key(b"graph", None, None) != base
    monkeypatch.delenv("SEPTRAN_LAUNCHER")
    monkeypatch.setattr(septran.version, "__version__", "99.0")  # another SepTran
    assert rewritten.key(b"graph", None, None) != base
    monkeypatch.undo()
    monkeypatch.setattr("septran.build.code_digest.code_digest", lambda: "edited")  # a pattern edited, same version
    assert rewritten.key(b"graph", None, None) != base


def test_a_swapped_rewrite_entry_is_not_used(monkeypatch, tmp_path, caplog):
    from septran.build.store import Entries
    from septran.model import rewritten

    monkeypatch.setenv("SEPTRAN_CACHE_DIR", str(tmp_path))
    k1, k2 = rewritten.key(b"one", None, None), rewritten.key(b"two", None, None)
    for k in (k1, k2):
        Entries(rewritten.STAGE, rewritten.NAME, k).write(rewritten.EXT, b'{"rows":[],"modules":[]}\n' + k.encode())
    a, b = (Entries(rewritten.STAGE, rewritten.NAME, k).path(rewritten.EXT) for k in (k1, k2))
    swap_entries(a, b)
    with caplog.at_level("WARNING"):
        assert rewritten.read(k1, None) is None and rewritten.read(k2, None) is None
    assert "another key" in caplog.text
