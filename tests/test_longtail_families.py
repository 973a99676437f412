"""The long tail of issue #28 (GPT-Neo, MPT, ...): what each family's config.json maps onto.

Their totals (the config class's defaults, by hand too, and a random config, against transformers' meta-device
builds) are rows of tests/test_dense_families.py's CASES; their fixtures in tests/fixtures/hf/<family>/ check
logits, every layer, a decode step and the gradients against transformers (tests/test_checkpoint.py,
tests/test_gradients.py).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from blockcli.config import ConfigError
from blockcli.hf import hf_to_mapping
from test_dense_families import CASES, mapped


# ----------------------------------------------------------------------------- what each family maps onto


def test_gpt_neo_leaves_its_scores_unscaled_and_windows_the_local_layers() -> None:
    data = mapped("gpt_neo", CASES["gpt_neo"][0])
    block = data["block"]
    assert (block["attention_scale"], block["d_ff"], block["activation"], "sliding_window" in block) == \
        (1.0, 8192, "gelu_tanh", False)  # gelu_new is GELU's tanh approximation
    assert block["bias"] == {"qkv": False, "out": True, "mlp": True, "norm": True}
    assert data["layers"] == [{"indices": list(range(1, 24, 2)), "block": {"sliding_window": 256}}]
    random = mapped("gpt_neo", CASES["gpt_neo"][3])  # local, global, local
    assert random["block"]["sliding_window"] == 5 and random["layers"] == [{"indices": [1], "block": {"sliding_window": 0}}]
    only_global = mapped("gpt_neo", {**CASES["gpt_neo"][0], "attention_types": [[["global"], 24]]})
    assert "layers" not in only_global and "sliding_window" not in only_global["block"]


@pytest.mark.parametrize("types, said", [
    ([[["global", "local"], 11]], "spells out 22 layers; expected 'num_layers' = 24"),
    ([[["global", "dilated"], 12]], "'global' or 'local'"),
    ([["global", 24]], "a list of [kinds, repeats] pairs"),
    ("global", "a list of [kinds, repeats] pairs"),
])
def test_gpt_neo_attention_types_that_do_not_spell_out_its_layers_are_refused(types: Any, said: str) -> None:
    with pytest.raises(ConfigError, match=f"field 'attention_types'.*{re.escape(said)}"):
        mapped("gpt_neo", {**CASES["gpt_neo"][0], "attention_types": types})


def test_mpt_runs_alibi_without_biases_and_reads_its_attention_config() -> None:
    block = mapped("mpt", CASES["mpt"][3])["block"]
    assert (block["bias"], block["norm"], block["d_ff"], block["activation"]) == (False, "layernorm", 192, "gelu")
    assert (block["clip_qkv"], block["attention_scale"], block["rope"]) == (3.0, 0.2, False)
    model = mapped("mpt", CASES["mpt"][0])["model"]
    assert (model["positions"], model["max_positions"], model["tie_embeddings"]) == ("alibi", 2048, True)


def test_mpt_fields_transformers_never_reads_are_accepted_with_a_note_when_they_differ() -> None:
    from blockcli.hf import _mapped

    _, said, _ = _mapped({"model_type": "mpt", **CASES["mpt"][0], "expansion_ratio": 4,
                          "attn_config": {"alibi": True, "qk_ln": False}}, "m.json", ())
    assert not said  # at the values transformers' MPT runs
    _, said, _ = _mapped({"model_type": "mpt", **CASES["mpt"][0], "expansion_ratio": 2,
                          "attn_config": {"qk_ln": True}}, "m.json", ())
    assert said == ["expansion_ratio = 2 is not read by transformers' MPT (MptMLP is 4·d_model wide whatever it says)",
                    "attn_config.qk_ln = True is not read by transformers' MPT (MptAttention normalises neither "
                    "queries nor keys)"]


@pytest.mark.parametrize("fields, said", [
    ({"n_heads": 8, "d_model": 48}, None),
    ({"n_heads": 6, "d_model": 48}, "field 'n_heads' = 6 cannot be represented"),
    ({"attn_config": {"softmax_scale": 0.1, "rope": True}}, "m.json: attn_config: field 'rope' = True cannot be"),
    ({"attn_config": [1]}, "field 'attn_config': expected an object"),
])
def test_mpt_heads_that_are_not_a_power_of_2_and_unknown_attention_fields_are_refused(fields: dict, said: Any) -> None:
    data = {"model_type": "mpt", **CASES["mpt"][0], **fields}
    if said is None:
        assert hf_to_mapping(data, "m.json")["block"]["n_heads"] == 8
        return
    with pytest.raises(ConfigError, match=re.escape(said)):
        hf_to_mapping(data, "m.json")


def test_codegens_qkv_proj_is_four_shards_of_q_v_k_rows() -> None:
    """CodeGenAttention views qkv_proj's 3·d outputs as 4 shards of [q v k], each d/4 wide: with d = 24, rows
    0-5 are Q's first quarter, 6-11 V's, 12-17 K's, 18-23 Q's second quarter, and so on."""
    import numpy as np

    from blockcli.checkpoint import _pack, _unpack
    from blockcli.tensor_names import SHARDED_QVK

    value = np.arange(72 * 5, dtype=np.float64).reshape(72, 5)  # (3·d, in): row r holds 5r … 5r + 4
    q, k, v = _unpack(value, SHARDED_QVK, 2, ((5, 24),) * 3)
    rows = {name: [int(x) // 5 for x in part[0]] for name, part in (("q", q), ("k", k), ("v", v))}
    shard = [list(range(s, s + 6)) for s in range(0, 72, 6)]  # the 12 blocks of 6 rows: q v k q v k …
    assert rows == {"q": sum(shard[0::3], []), "v": sum(shard[1::3], []), "k": sum(shard[2::3], [])}
    assert np.array_equal(_pack([q, k, v], SHARDED_QVK, 2, value.shape), value)


def test_codegen_is_gptj_and_needs_a_width_that_splits_into_four_shards() -> None:
    block = mapped("codegen", CASES["codegen"][3])["block"]
    assert (block["placement"], block["rope"], block["rope_layout"]) == ("parallel_shared", 8 / 12, "interleaved")
    with pytest.raises(ConfigError, match="field 'n_embd' = 54 cannot be represented .*4 equal shards"):
        mapped("codegen", {**CASES["codegen"][3], "n_embd": 54, "n_head": 3, "rotary_dim": 8})


def test_iquestcoder_heads_are_128_wide_unless_head_dim_is_null_and_its_refused_options_are_refused() -> None:
    assert mapped("iquestcoder", CASES["iquestcoder"][0])["block"]["head_dim"] == 128
    assert mapped("iquestcoder", CASES["iquestcoder"][3])["block"]["head_dim"] == 8  # 48 // 6
    for key, value in (("clip_qkv", 8.0), ("use_sliding_window", True)):
        with pytest.raises(ConfigError, match=f"field '{key}'.*IQuestCoderConfig refuses it"):
            mapped("iquestcoder", {**CASES["iquestcoder"][0], key: value})


def test_hyperclovax_is_granite_with_a_norm_after_each_branch_and_its_logits_multiplied() -> None:
    data = mapped("hyperclovax", {**CASES["hyperclovax"][0], "logits_scaling": 0.25, "attention_multiplier": None})
    assert (data["block"]["placement"], data["block"]["attention_scale"]) == ("sandwich", 128 ** -0.5)
    assert data["model"]["logit_multiplier"] == 0.25  # GraniteForCausalLM would divide: 4
    assert mapped("hyperclovax", CASES["hyperclovax"][3])["block"]["placement"] == "pre"  # use_post_norm false


def test_jais2_is_a_layernorm_relu2_block_with_every_bias_by_default() -> None:
    block = mapped("jais2", CASES["jais2"][0])["block"]
    assert (block["norm"], block["norm_eps"], block["activation"], block["bias"]) == ("layernorm", 1e-5, "relu2", True)
    assert "norm_unit_offset" not in block  # nn.LayerNorm's plain scale, not Nemotron's 1 + w
    with pytest.raises(ConfigError, match="rms_norm_eps"):
        mapped("jais2", {**CASES["jais2"][0], "rms_norm_eps": 1e-6})


def test_cwm_windows_three_layers_of_four_and_rotates_with_its_own_llama3_rope_by_default() -> None:
    data = mapped("cwm", {**CASES["cwm"][0], "rope_theta": 5000.0})  # not read without rope_parameters
    block = data["block"]
    assert (block["rope_theta"], block["rope_scaling"]["type"], block["rope_scaling"]["factor"]) == (1e6, "llama3", 16.0)
    assert "sliding_window" not in block  # layer 0 global
    assert data["layers"] == [{"indices": [i for i in range(64) if i % 4], "block": {"sliding_window": 8192}}]
    default = mapped("cwm", {**CASES["cwm"][0], "rope_parameters": {"rope_type": "default"}})["block"]
    assert default["rope_theta"] == 1e6 and "rope_scaling" not in default  # CwmConfig's default_theta
    for key, value in (("attention_bias", True), ("head_dim", None)):
        with pytest.raises(ConfigError, match=f"field '{key}'"):
            mapped("cwm", {**CASES["cwm"][0], key: value})


def test_granite_swa_sinks_windows_and_a_rope_base_per_layer() -> None:
    data = mapped("granite_swa", CASES["granite_swa"][3])
    block = data["block"]
    assert (block["attention_sinks"], block["sliding_window"], block["rope_theta"]) == (True, 16, 10000.0)
    assert data["layers"] == [{"indices": [1], "block": {"sliding_window": 0, "rope": False}},
                              {"indices": [2], "block": {"rope_theta": 50000.0}}]
    default = mapped("granite_swa", CASES["granite_swa"][0])
    assert default["layers"] == [{"indices": [i for i in range(24) if i % 4], "block": {"sliding_window": 128}}]
    with pytest.raises(ConfigError, match="field 'layer_rope_theta': expected a list of 3 RoPE bases"):
        mapped("granite_swa", {**CASES["granite_swa"][3], "layer_rope_theta": [1.0, 2.0]})
