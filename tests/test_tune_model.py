"""``septran tune-model``'s refusals (what it lists of a block's prefill and decode step is tested with the
block's compile, tests/test_model_blocks.py)."""
from __future__ import annotations

import pytest

from conftest import REPO
from septran.cli import main
from septran.commands.tune_model import calls_of, load_model, model_module
from septran.errors import CallError

LLAMA_SMALL = dict(hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=172)


def test_a_folder_without_a_model_or_a_prompt_past_the_cache_is_refused(tmp_path, capsys):
    assert main(["tune-model", str(tmp_path)]) == 2
    assert "no model.py here" in capsys.readouterr().err
    (tmp_path / "model.py").write_text("x = 1\n")
    with pytest.raises(CallError, match="defines no build"):
        load_model(tmp_path)
    module = model_module(REPO / "examples" / "llama_block")
    with pytest.raises(CallError, match="max_len is 8"):
        calls_of(module.build(module.LlamaConfig(max_len=8, **LLAMA_SMALL)), 8)
