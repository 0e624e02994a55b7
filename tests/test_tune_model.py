"""``septran tune-model``: the kernels a block's prefill and decode step specialise, one per tuning key (the
decode step's GEMMs in their own shape bucket), and its refusals."""
from __future__ import annotations

import pytest

from conftest import REPO
from septran.cli import main
from septran.commands.tune_model import calls_of, load_model, model_module
from septran.errors import CallError

LLAMA_SMALL = dict(hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=172)


@pytest.mark.build
def test_a_prefill_and_a_decode_step_list_their_kernels_once_per_bucket():
    module = model_module(REPO / "examples" / "llama_block")
    model = module.build(module.LlamaConfig(max_len=24, **LLAMA_SMALL))
    calls = calls_of(model, 19)
    entries = [k.graph.entry for k, _, _ in calls]
    assert all(k.mapping.space is not None for k, _, _ in calls)
    keys = {(id(k), k.tuning_key(k.specialization(d, s)).digest()) for k, d, s in calls}
    assert len(keys) == len(calls)  # one per key: a later call of the same bucket adds none
    gemms = [(k, d) for k, d, _ in calls if "gemm" in k.graph.entry]
    rows = {d["A"][0][0] for _, d in gemms}
    assert {1, 19} <= rows, entries  # the decode step's one row and the prefill's 19, each its own key
    assert "attention_logic" in entries


def test_a_folder_without_a_model_or_a_prompt_past_the_cache_is_refused(tmp_path, capsys):
    assert main(["tune-model", str(tmp_path)]) == 2
    assert "no model.py here" in capsys.readouterr().err
    (tmp_path / "model.py").write_text("x = 1\n")
    with pytest.raises(CallError, match="defines no build"):
        load_model(tmp_path)
    module = model_module(REPO / "examples" / "llama_block")
    with pytest.raises(CallError, match="max_len is 8"):
        calls_of(module.build(module.LlamaConfig(max_len=8, **LLAMA_SMALL)), 8)
