"""torch.compile's ``mode=`` and ``options=`` with the septran backend (septran/model/modes.py), the progress lines
of a first compile (septran/progress.py) and the settings that switch them. Nothing here builds a kernel."""
from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch

import septran
import septran.model  # noqa: F401  (registers the backend)
from septran import env, progress
from septran.model import modes
from septran.model.backend import _autotuning
from septran.ops import kernels


def test_each_mode_torch_knows_is_accepted_and_says_what_it_does():
    assert modes.settings() == modes.Settings("default", autotune=False)
    assert modes.settings("reduce-overhead") == modes.Settings("reduce-overhead", autotune=False)
    assert modes.settings("max-autotune").autotune and modes.settings("max-autotune-no-cudagraphs").autotune
    assert not modes.settings("max-autotune", {"autotune": False}).autotune  # an option says more than the mode
    s = modes.settings(None, {"profile": True, "progress": False})
    assert (s.profile, s.progress, s.autotune) == (True, False, False)


@pytest.mark.parametrize("mode, options, words", [
    ("fastest", None, ["no mode 'fastest'", "reduce-overhead", "max-autotune"]),
    (None, {"triton.cudagraphs": False}, ["no option 'triton.cudagraphs'", "'autotune' (bool)", "inductor"]),
    (None, {"profile": "yes"}, ["option 'profile' must be a bool"]),
])
def test_an_unknown_mode_or_option_is_refused_with_what_there_is(mode, options, words):
    with pytest.raises(modes.CompileOptionError) as info:
        modes.settings(mode, options)
    assert all(w in str(info.value) for w in words), str(info.value)


def test_torch_compile_passes_mode_and_options_to_the_backend():
    """torch passes ``mode=`` (not "default") or ``options=`` (torch takes one of them) to the backend function;
    HF's CompileConfig always sets mode "reduce-overhead". A graph of views only: the rewrite finds nothing to build."""
    x = torch.arange(12.0).reshape(3, 4)
    for how in (dict(mode="reduce-overhead"), dict(mode="max-autotune"), dict(options={"profile": False})):
        torch._dynamo.reset()
        f = torch.compile(lambda t: t.reshape(-1)[:5], backend="septran", **how)
        assert torch.equal(f(x), x.reshape(-1)[:5])
    for how, words in ((dict(mode="fastest"), "no mode 'fastest'"), (dict(options={"max_autotune": True}),
                                                                      "no option 'max_autotune'")):
        torch._dynamo.reset()
        bad = torch.compile(lambda t: t.reshape(-1)[:5], backend="septran", **how)
        with pytest.raises(Exception, match=words):
            bad(x)
    torch._dynamo.reset()


def test_max_autotune_hands_the_library_kernels_the_tuner(monkeypatch):
    from septran.tuning.api import autotuner

    assert _autotuning(kernels._AUTOTUNE.get)() is True and kernels._AUTOTUNE.get() is False
    made = SimpleNamespace(tuner=None)  # a kernel compiled earlier without a tuner
    monkeypatch.setitem(kernels._CACHE, ("test", "modes"), made)
    assert kernels.kernel(("test", "modes"), "cpu", "gemm", None).tuner is None
    with kernels.autotuning():
        assert kernels.kernel(("test", "modes"), "cpu", "gemm", None).tuner is autotuner


def test_progress_is_off_under_pytest_and_on_when_asked(monkeypatch, caplog):
    monkeypatch.delenv("SEPTRAN_PROGRESS", raising=False)
    assert not progress.enabled()
    monkeypatch.setenv("SEPTRAN_PROGRESS", "1")
    assert progress.enabled()
    monkeypatch.setenv("SEPTRAN_PROGRESS", "maybe")
    with pytest.raises(env.SettingError, match="SEPTRAN_PROGRESS"):
        progress.enabled()
    monkeypatch.setenv("SEPTRAN_PROGRESS", "0")
    progress.enable(True)  # the option progress=True says more than the environment
    try:
        with caplog.at_level(logging.INFO, logger="septran.progress"):
            with progress.building("gemm_512x512", cached=False):
                pass
            with progress.building("softmax_64", cached=True):  # only loaded: no line
                pass
            progress.note("graph %d rewritten", 3)
    finally:
        progress.enable(None)
    lines = [r.getMessage() for r in caplog.records if r.name == "septran.progress"]
    assert len(lines) == 2 and "built: gemm_512x512 (" in lines[0] and lines[1] == "graph 3 rewritten", lines


def test_the_profile_setting(monkeypatch, tmp_path):
    monkeypatch.delenv("SEPTRAN_DUMP_DIR", raising=False)
    for off in ("", "0"):
        monkeypatch.setenv("SEPTRAN_PROFILE", off)
        assert env.profile() is None
    monkeypatch.setenv("SEPTRAN_PROFILE", "1")
    monkeypatch.chdir(tmp_path)
    assert env.profile() == tmp_path / "septran_profile.trace.json"
    monkeypatch.setenv("SEPTRAN_PROFILE", str(tmp_path / "step.json"))
    assert env.profile() == tmp_path / "step.json"


def test_septran_profile_compiles_a_model_given_uncompiled():
    """A function of views only (nothing built): compiled by septran.profile, warmed up once, its steps timed."""
    x = torch.arange(12.0).reshape(3, 4)
    torch._dynamo.reset()
    prof = septran.profile(lambda t: t.reshape(-1)[:5], x, steps=2)
    torch._dynamo.reset()
    assert len(prof.steps) == 2 and len(prof.graph_runs) == 2 and prof.events
    assert {e.kind for e in prof.events} == {"glue"} and "2 step(s)" in str(prof)
    with pytest.raises(septran.CallError, match="steps >= 1"):
        septran.profile(lambda t: t, x, steps=0)
