"""Families built on DeepSeek-V3's latent attention (issue #28), each a diff of a family blockcli has: Youtu-LLM
(DeepSeek-V3's attention on every layer with Qwen3's dense MLP), Sarvam-105B (DeepSeek-V3 with SarvamMLAConfig's defaults
and its translation of the original config format), Sarvam-30B (GLM-4.5's block with SarvamMoEConfig's defaults, its
checkpoints' own tensor names), Kolibri-1 (EXAONE 4.0's attention in GLM-4's sandwich with a mixture chosen by the logits
plus the selection bias: `moe.selection_on: logits`).

Every expected total is transformers 5.24's own (the *ForCausalLM on the meta device, sum of numel over
parameters()), for the config class's defaults (as the census holds them) and a random config; the defaults' totals
are derived by hand too. The fixtures (tests/fixtures/hf/generate.py) check logits, every layer, a decode step and
the gradients against transformers (tests/test_checkpoint.py, tests/test_gradients.py); the fuzz draws
(tests/fixtures/cases/draws.py) random configs (tests/test_random_configs.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from blockcli import Model
from blockcli.config import ConfigError, parse_config
from blockcli.hf import hf_to_mapping
from conftest import ROOT
from test_dense_families import _sizes, assert_totals_are_transformers_own, mapped, total

FIXTURES = ROOT / "tests" / "fixtures" / "hf"


def _youtu_by_hand() -> int:
    """32 layers of q_a (2048·1536) and its norm (1536), q_b (1536·16·192), kv_a (2048·(512 + 64)) and its norm
    (512), kv_b (512·16·(128 + 128)), o (16·128·2048), the MLP (3·2048·6144), two norms (2·2048); tied embeddings
    (128256·2048); the final norm."""
    d, f, h = 2048, 6144, 16
    layer = d * 1536 + 1536 + 1536 * h * 192 + d * 576 + 512 + 512 * h * 256 + h * 128 * d + 3 * d * f + 2 * d
    return 32 * layer + 128256 * d + d


# YoutuConfig's sizes (Youtu-LLM-2B)
_YOUTU_SIZES = _sizes(2048, 6144, 32, 16, 128256, 131072)
# a random Youtu: 5 heads (48 is not a multiple), queries through one q_proj (q_lora_rank null), attention biases,
# rotate-half RoPE, untied
_YOUTU_RANDOM = dict(hidden_size=48, num_attention_heads=5, num_key_value_heads=5, intermediate_size=80,
                     num_hidden_layers=3, vocab_size=300, max_position_embeddings=96, tie_word_embeddings=False,
                     q_lora_rank=None, kv_lora_rank=10, qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=7,
                     attention_bias=True, rope_interleave=False)

def _sarvam_mla_by_hand() -> int:
    """32 layers of q (4096·64·192), kv_a (4096·(512 + 64)) and its norm (512), kv_b (512·64·(128 + 128)),
    o (64·128·4096), two norms (2·4096); layer 0's dense MLP (3·4096·16384), the 31 others' router (128·4096), 128
    experts and one shared expert (129·3·4096·2048); embeddings and an untied head (262144·4096 each); the final
    norm."""
    d, h = 4096, 64
    attention = d * h * 192 + d * 576 + 512 + 512 * h * 256 + h * 128 * d + 2 * d
    experts = 128 * d + 129 * 3 * d * 2048
    return 32 * attention + 3 * d * 16384 + 31 * experts + 2 * 262144 * d + d


# SarvamMLAConfig's sizes (Sarvam-105B)
_SARVAM_MLA_SIZES = _sizes(4096, 16384, 32, 64, 262144, 4096)
# a random Sarvam MLA: 5 heads (48 is not a multiple), the query latent on (q_lora_rank 12), two dense layers, 6
# experts in 2 groups, 2 shared, attention biases, rotate-half RoPE, tied
_SARVAM_MLA_RANDOM = dict(hidden_size=48, num_attention_heads=5, intermediate_size=80, moe_intermediate_size=12,
                          num_hidden_layers=3, vocab_size=300, max_position_embeddings=96, tie_word_embeddings=True,
                          q_lora_rank=12, kv_lora_rank=10, qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=7,
                          attention_bias=True, rope_interleave=False, first_k_dense_replace=2, n_routed_experts=6,
                          n_group=2, topk_group=1, num_experts_per_tok=2, n_shared_experts=2)

def _sarvam_moe_by_hand() -> int:
    """19 layers of q (4096·64·64), k and v (4096·4·64 each), o (64·64·4096), the q/k norms (2·64), two norms
    (2·4096); layer 0's dense MLP (3·4096·8192), the 18 others' router (128·4096), 128 experts and one shared
    expert (129·3·4096·1024); embeddings and an untied head (262144·4096 each); the final norm."""
    d = 4096
    attention = d * 4096 + 2 * d * 256 + 4096 * d + 2 * 64 + 2 * d
    experts = 128 * d + 129 * 3 * d * 1024
    return 19 * attention + 3 * d * 8192 + 18 * experts + 2 * 262144 * d + d


# SarvamMoEConfig's sizes (Sarvam-30B)
_SARVAM_MOE_SIZES = _sizes(4096, 8192, 19, 64, 262144, 131072)
# a random Sarvam MoE: heads of 12 (not 48 / 6), 2 K/V heads, half of each head rotated, no q/k norms, q/k/v biases,
# two dense layers, 6 experts (top 2), 2 shared, tied
_SARVAM_MOE_RANDOM = dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=2, head_dim=12,
                          intermediate_size=80, moe_intermediate_size=12, num_hidden_layers=3, vocab_size=300,
                          max_position_embeddings=96, tie_word_embeddings=True, first_k_dense_replace=2,
                          n_routed_experts=6, num_experts_per_tok=2, n_shared_experts=2, partial_rotary_factor=0.5,
                          use_qk_norm=False, attention_bias=True)

def _kolibri1_by_hand() -> int:
    """50 layers of q and o (2560·48·128 each), k and v (2560·4·128 each), the q/k norms (2·128), four norms
    (4·2560), the router (384·2560), 384 experts and the shared expert (385·3·2560·512); embeddings and an untied
    head (128000·2560 each); the final norm."""
    d = 2560
    layer = 2 * d * 6144 + 2 * d * 512 + 2 * 128 + 4 * d + 384 * d + 385 * 3 * d * 512
    return 50 * layer + 2 * 128000 * d + d


# Kolibri1Config's sizes (Kolibri-1): no intermediate_size (no dense MLP)
_KOLIBRI1_SIZES = dict(hidden_size=2560, num_hidden_layers=50, num_attention_heads=48, vocab_size=128000,
                       max_position_embeddings=262144)
# a random Kolibri-1: heads of 10 (not 48 / 6), 3 K/V heads, 6 experts of 12 (top 2, renormalised), a shared expert of
# 20, layer 1 windowed (7) and the others global without positions, tied
_KOLIBRI1_RANDOM = dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=3, head_dim=10,
                        moe_intermediate_size=12, shared_expert_intermediate_size=20, num_hidden_layers=3,
                        vocab_size=300, max_position_embeddings=96, tie_word_embeddings=True, num_experts=6,
                        num_experts_per_tok=2, norm_topk_prob=True, sliding_window=7,
                        layer_types=["full_attention", "sliding_attention", "full_attention"])

def _axk1_by_hand() -> int:
    """61 layers of q_a (7168·1536) and its norm (1536), q_b (1536·64·192), kv_a (7168·(512 + 64)) and its norm (512),
    kv_b (512·64·(128 + 128)), o (64·128·7168), two norms (2·7168); layer 0's dense MLP (3·7168·18432), the 60 others'
    router (192·7168), 192 experts and one shared expert (193·3·7168·2048) and the norm of their output (7168);
    embeddings and an untied head (163840·7168 each); the final norm."""
    d, h = 7168, 64
    attention = d * 1536 + 1536 + 1536 * h * 192 + d * 576 + 512 + 512 * h * 256 + h * 128 * d + 2 * d
    experts = 192 * d + 193 * 3 * d * 2048 + d
    return 61 * attention + 3 * d * 18432 + 60 * experts + 2 * 163840 * d + d


# AXK1Config's sizes (A.X-K1)
_AXK1_SIZES = _sizes(7168, 18432, 61, 64, 163840, 32768)
# a random A.X-K1: 5 heads (48 is not a multiple), the query latent 12, attention biases, rotate-half RoPE, its
# legacy first_k_dense_replace 0 and moe_layer_freq 2 (layers 0 and 2 sparse, 1 dense), 6 experts in 2 groups, 2
# shared, tied
_AXK1_RANDOM = dict(hidden_size=48, num_attention_heads=5, num_key_value_heads=5, intermediate_size=80,
                    moe_intermediate_size=12, num_hidden_layers=3, vocab_size=300, max_position_embeddings=96,
                    tie_word_embeddings=True, q_lora_rank=12, kv_lora_rank=10, qk_nope_head_dim=6, qk_rope_head_dim=4,
                    v_head_dim=7, attention_bias=True, rope_interleave=False, first_k_dense_replace=0,
                    moe_layer_freq=2, n_routed_experts=6, n_group=2, topk_group=1, num_experts_per_tok=2,
                    n_shared_experts=2, bos_token_id=1, eos_token_id=2)

# model_type → (sizes, the config class's nulls blockcli needs, transformers' total for the defaults, by hand,
# random config, transformers' total for it)
CASES = {
    "youtu": (_YOUTU_SIZES, (), 1_961_560_064, _youtu_by_hand(), _YOUTU_RANDOM, 80_118),
    "sarvam_moe": (_SARVAM_MOE_SIZES, (), 32_152_648_064, _sarvam_moe_by_hand(), _SARVAM_MOE_RANDOM, 79_896),
    "kolibri1": (_KOLIBRI1_SIZES, (), 78_103_055_360, _kolibri1_by_hand(), _KOLIBRI1_RANDOM, 81_612),
    "sarvam_mla": (_SARVAM_MLA_SIZES, (), 106_031_763_456, _sarvam_mla_by_hand(), _SARVAM_MLA_RANDOM, 64_710),
    "axk1": (_AXK1_SIZES, (), 518_983_052_288, _axk1_by_hand(), _AXK1_RANDOM, 67_398),
}


@pytest.mark.parametrize("model_type", sorted(CASES))
def test_counts_equal_transformers_totals(model_type: str) -> None:
    sizes, _, defaults_total, by_hand, fields, random_total = CASES[model_type]
    assert by_hand == defaults_total
    assert total(model_type, sizes) == defaults_total
    assert total(model_type, fields) == random_total


@pytest.mark.torch
@pytest.mark.parametrize("model_type", sorted(CASES))
def test_the_totals_and_sizes_here_are_transformers_own(model_type: str) -> None:
    sizes, needed, defaults_total, _, fields, random_total = CASES[model_type]
    assert_totals_are_transformers_own(model_type, sizes, needed, defaults_total, fields, random_total)


def _switched(tmp_path: Path, name: str, switch: dict) -> Model:
    """The fixture's model with `switch` merged into its block: a feature turned off."""
    data = hf_to_mapping(json.loads((FIXTURES / name / "config.json").read_text()), "config.json")
    data["block"] = {**data["block"], **switch}
    return Model.from_config(parse_config(data), weights=FIXTURES / name, dtype="float64")


def _far(model: Model, name: str) -> float:
    with np.load(FIXTURES / name / "expected.npz") as want:
        got, ref = model(want["input_ids"]), want["logits_float64"]
    return float(np.abs(got - ref).max() / np.abs(ref).max())


# ----------------------------------------------------------------------------- Youtu-LLM


def test_youtu_reads_latent_attention_and_a_dense_mlp_on_every_layer() -> None:
    data = mapped("youtu", _YOUTU_SIZES)
    block, model = data["block"], data["model"]
    assert block["mla"] == {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                            "v_head_dim": 128} and block["rope_layout"] == "interleaved"
    assert "moe" not in block and "layers" not in data and block["activation"] == "swiglu" and block["bias"] is False
    assert model["tie_embeddings"] is True
    random = mapped("youtu", _YOUTU_RANDOM)["block"]
    assert random["mla"]["q_lora_rank"] == 0 and random["rope_layout"] == "half"
    assert random["bias"] == {"qkv": True, "out": True, "mlp": False, "norm": False}


@pytest.mark.parametrize("field, value", [
    ("n_routed_experts", 8),  # YoutuConfig removes DeepSeek-V3's expert fields: not a field of its
    ("first_k_dense_replace", 1),
    ("mlp_bias", True),  # Qwen3's MLP has no biases and YoutuConfig no such field
    ("num_key_value_heads", 1),  # latent attention: one K and V per query head
])
def test_youtu_refuses_what_its_config_class_does_not_have(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=field):
        parse_config(mapped("youtu", {**_YOUTU_SIZES, field: value}))


def test_youtu_notes_that_transformers_zeroes_the_pad_row_on_loading() -> None:
    said = mapped("youtu", {**_YOUTU_SIZES, "pad_token_id": 128001})["about"]["description"]
    assert "zeroes embedding row 128001 (pad_token_id)" in said
    assert "zeroes" not in mapped("youtu", _YOUTU_SIZES)["about"]["description"]  # YoutuConfig's: no pad token


def test_the_youtu_fixture_exercises_its_attention_biases_and_interleaved_rope(tmp_path: Path) -> None:
    assert _far(_switched(tmp_path, "youtu", {}), "youtu") < 1e-9
    assert _far(_switched(tmp_path, "youtu", {"rope_layout": "half"}), "youtu") > 1e-3


# ----------------------------------------------------------------------------- Sarvam-105B (sarvam_mla)


def test_sarvam_mla_reads_deepseek_v3_with_its_config_class_defaults() -> None:
    data = mapped("sarvam_mla", _SARVAM_MLA_SIZES)
    block = data["block"]
    assert block["mla"]["q_lora_rank"] == 0  # one q_proj
    assert (block["moe"]["n_experts"], block["moe"]["n_groups"], block["moe"]["top_groups"]) == (128, 1, 1)
    assert data["layers"] == [{"indices": [0], "block": {"moe": None}}]  # first_k_dense_replace 1


# the original sarvam-105b format (for its remote code) beside the DeepSeek-V3 format SarvamMLAConfig converts it to
_LEGACY = {**_SARVAM_MLA_RANDOM, "num_experts": 6, "num_shared_experts": 2, "head_dim": 10 + 4, "q_head_dim": 10,
           "rope_theta": 50000.0, "rope_scaling": {"type": "deepseek_yarn", "factor": 4.0, "beta_fast": 32,
                                                   "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0,
                                                   "original_max_position_embeddings": 24}}
_CONVERTED = {**_SARVAM_MLA_RANDOM, "rope_parameters": {
    "rope_type": "yarn", "rope_theta": 50000.0, "factor": 4.0, "beta_fast": 32, "beta_slow": 1, "mscale": 1.0,
    "mscale_all_dim": 1.0, "original_max_position_embeddings": 24}}
for _key in ("n_routed_experts", "n_shared_experts"):
    _LEGACY.pop(_key)


def test_sarvam_mla_reads_the_original_format_as_its_config_class_converts_it() -> None:
    legacy, converted = mapped("sarvam_mla", _LEGACY), mapped("sarvam_mla", _CONVERTED)
    assert legacy["block"] == converted["block"] and legacy["model"] == converted["model"]
    assert legacy["block"]["rope_scaling"]["type"] == "yarn" and legacy["block"]["moe"]["n_experts"] == 6


@pytest.mark.torch
def test_sarvam_mla_config_class_converts_the_original_format_so() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.for_model("sarvam_mla", **_LEGACY).to_dict()
    assert config["rope_parameters"] == _CONVERTED["rope_parameters"] and config["head_dim"] == 4
    assert (config["n_routed_experts"], config["n_shared_experts"]) == (6, 2)


@pytest.mark.parametrize("fields, named", [
    ({"num_experts": 7, "n_routed_experts": 6}, "num_experts"),  # an alias and its field disagree
    ({"num_key_value_heads": 1}, "num_key_value_heads"),  # latent attention: one K and V per query head
    ({"rope_scaling": {"type": "longrope_ds", "factor": 2.0}}, "rope_scaling"),  # not the deepseek_yarn it converts
])
def test_sarvam_mla_refuses_naming_the_field(fields: dict, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        parse_config(mapped("sarvam_mla", {**_SARVAM_MLA_RANDOM, **fields}))


# ----------------------------------------------------------------------------- Sarvam-30B (sarvam_moe)


def test_sarvam_moe_reads_glm4_moe_with_its_config_class_defaults() -> None:
    data = mapped("sarvam_moe", _SARVAM_MOE_SIZES)  # no RoPE given: SarvamMoEConfig's default_theta
    block = data["block"]
    assert (block["head_dim"], block["n_kv_heads"], block["rope"], block["rope_theta"]) == (64, 4, True, 8e6)
    assert (block["qk_norm"], block["norm_eps"], block["bias"]) == ("head", 1e-6, False)
    assert (block["moe"]["d_expert"], block["moe"]["top_k"], block["moe"]["routed_scaling"]) == (1024, 6, 2.5)
    assert data["layers"] == [{"indices": [0], "block": {"moe": None}}]
    given = mapped("sarvam_moe", {**_SARVAM_MOE_SIZES, "rope_parameters": {"rope_type": "default", "rope_theta": 1e4}})
    assert given["block"]["rope_theta"] == 1e4


def test_sarvam_moe_reads_its_original_spellings_as_the_fields_they_stand_for() -> None:
    spelled = {k: v for k, v in _SARVAM_MOE_RANDOM.items() if k not in ("n_routed_experts", "n_shared_experts",
                                                                         "attention_bias")}
    spelled.update(num_experts=6, num_shared_experts=2, use_qkv_bias=True)
    assert mapped("sarvam_moe", spelled)["block"] == mapped("sarvam_moe", _SARVAM_MOE_RANDOM)["block"]
    with pytest.raises(ConfigError, match="use_qkv_bias"):
        mapped("sarvam_moe", {**_SARVAM_MOE_RANDOM, "use_qkv_bias": False})  # disagrees with attention_bias


@pytest.mark.parametrize("fields, named", [
    ({"pretraining_tp": 1}, "pretraining_tp"),  # not a field of SarvamMoEConfig (nor of Glm4MoeConfig)
    ({"mlp_bias": True}, "mlp_bias"),  # nor is this: Glm4MoeMLP has no biases
    ({"num_key_value_heads": 4}, "num_key_value_heads"),  # does not divide the 6 heads
])
def test_sarvam_moe_refuses_naming_the_field(fields: dict, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        parse_config(mapped("sarvam_moe", {**_SARVAM_MOE_RANDOM, **fields}))


def test_sarvam_moe_reads_transformers_in_memory_names_as_its_stored_ones(tmp_path: Path) -> None:
    """The fixture holds the published names (query_key_value fused, dense, query/key_layernorm, expert_bias,
    word_embeddings: transformers saves them back so); the same tensors under GLM-4.5's names run the same."""
    from safetensors.numpy import load_file, save_file

    stored = load_file(FIXTURES / "sarvam_moe" / "model.safetensors")
    config = json.loads((FIXTURES / "sarvam_moe" / "config.json").read_text())
    q, kv = config["num_attention_heads"] * config["head_dim"], config["num_key_value_heads"] * config["head_dim"]
    renamed = {}
    for name, value in stored.items():
        if "query_key_value" in name:
            for part, rows in zip("qkv", np.split(value, [q, q + kv])):
                renamed[name.replace("attention.query_key_value", f"self_attn.{part}_proj")] = rows
            continue
        for old, new in (("word_embeddings", "embed_tokens"), ("attention.dense", "self_attn.o_proj"),
                         ("attention.query_layernorm", "self_attn.q_norm"),
                         ("attention.key_layernorm", "self_attn.k_norm"), ("gate.expert_bias", "gate.e_score_correction_bias")):
            name = name.replace(old, new)
        renamed[name] = value
    folder = tmp_path / "sarvam_moe"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    save_file({k: np.ascontiguousarray(v) for k, v in renamed.items()}, folder / "model.safetensors")
    model = Model.from_config(parse_config(hf_to_mapping(config, "config.json")), weights=folder, dtype="float64")
    assert _far(model, "sarvam_moe") < 1e-9
    # the fixture's RoPE base is SarvamMoEConfig's 8,000,000 (its config.json gives it): GLM-4.5's 10,000 is far off
    assert _far(_switched(tmp_path, "sarvam_moe", {"rope_theta": 10000.0}), "sarvam_moe") > 1e-3


# ----------------------------------------------------------------------------- Kolibri-1


def test_kolibri1_reads_exaone4_attention_sandwich_norms_and_its_router() -> None:
    data = mapped("kolibri1", _KOLIBRI1_SIZES)
    block = data["block"]
    assert (block["placement"], block["qk_norm"], block["sliding_window"], block["n_kv_heads"]) == (
        "sandwich", "head", 513, 4)
    assert block["moe"] == {"n_experts": 384, "top_k": 6, "d_expert": 512, "scoring": "sigmoid",
                            "selection_bias": True, "selection_on": "logits", "renormalize": False, "d_shared": 512}
    # every fifth layer global, without positions (Kolibri1Config's layer_types)
    assert data["layers"] == [{"indices": list(range(4, 50, 5)), "block": {"sliding_window": 0, "rope": False}}]
    every_full = mapped("kolibri1", {**_KOLIBRI1_RANDOM, "sliding_window": None,
                                     "layer_types": ["full_attention"] * 3})
    assert "layers" not in every_full and every_full["block"]["rope"] is True  # no window: every layer rotates


@pytest.mark.parametrize("fields, named", [
    ({"intermediate_size": 64}, "intermediate_size"),  # Kolibri1Config removes Qwen3-MoE's dense MLP width
    ({"attention_bias": True}, "attention_bias"),  # and these of its fields
    ({"mlp_only_layers": [0]}, "mlp_only_layers"),
    ({"router_aux_loss_coef": 0.01}, "router_aux_loss_coef"),
    ({"sliding_window": None}, "sliding_window"),  # sliding layers need a window (Kolibri1Config fails)
    ({"num_experts": 8, "num_local_experts": 6}, "num_experts"),  # the two spellings disagree
])
def test_kolibri1_refuses_naming_the_field(fields: dict, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        parse_config(mapped("kolibri1", {**_KOLIBRI1_RANDOM, **fields}))


def test_the_kolibri1_fixture_exercises_its_router_and_nope_layers(tmp_path: Path) -> None:
    assert _far(_switched(tmp_path, "kolibri1", {}), "kolibri1") < 1e-9
    model = _switched(tmp_path, "kolibri1", {})
    data = hf_to_mapping(json.loads((FIXTURES / "kolibri1" / "config.json").read_text()), "config.json")
    data["block"]["moe"] = {**data["block"]["moe"], "selection_on": "scores"}  # DeepSeek-V3's choice instead
    scores = Model.from_config(parse_config(data), weights=FIXTURES / "kolibri1", dtype="float64")
    assert _far(scores, "kolibri1") > 1e-3
    data["block"]["moe"]["selection_on"] = "logits"
    data["layers"] = [{"indices": [1], "block": {"sliding_window": 0}}]  # the global layer with RoPE
    assert _far(Model.from_config(parse_config(data), weights=FIXTURES / "kolibri1", dtype="float64"),
                "kolibri1") > 1e-3
    assert model.config.block.moe.selection_on == "logits"


@pytest.mark.parametrize("moe, named", [
    ({"selection_on": "logits"}, "selection_bias true"),  # no bias to add
    ({"selection_on": "logits", "selection_bias": True, "n_experts": 4, "n_groups": 2}, "one group"),
    ({"selection_on": "probabilities", "selection_bias": True}, "selection_on"),
])
def test_selection_on_logits_is_refused_where_it_cannot_apply(moe: dict, named: str) -> None:
    block = {"d_model": 16, "n_heads": 2, "d_ff": 8, "moe": {"n_experts": 4, "top_k": 2, "d_expert": 4,
                                                             "scoring": "sigmoid", **moe}}
    with pytest.raises(ConfigError, match=named):
        parse_config({"block": block})


# ----------------------------------------------------------------------------- A.X-K1


def test_axk1_reads_deepseek_v3_with_the_norm_of_the_mixture_output() -> None:
    data = mapped("axk1", _AXK1_SIZES)
    block = data["block"]
    assert block["moe"] == {"n_experts": 192, "top_k": 8, "d_expert": 2048, "routed_scaling": 2.5, "d_shared": 2048,
                            "scoring": "sigmoid", "selection_bias": True, "group_score": "top2_sum",
                            "renormalize": True, "n_groups": 8, "top_groups": 4, "out_norm": True}
    assert block["mla"] == {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
                            "qk_rope_head_dim": 64, "v_head_dim": 128}
    assert (block["norm_eps"], block["rope_layout"]) == (1e-6, "interleaved")
    assert data["layers"] == [{"indices": [0], "block": {"moe": None}}]  # the dense layer has no such norm
    # the legacy fields as AXK1Config reads them: sparse where i >= first_k_dense_replace and moe_layer_freq divides i
    assert mapped("axk1", _AXK1_RANDOM)["layers"] == [{"indices": [1], "block": {"moe": None}}]
    given = mapped("axk1", {**_AXK1_RANDOM, "mlp_layer_types": ["sparse", "sparse", "dense"]})
    assert given["layers"] == [{"indices": [2], "block": {"moe": None}}]


@pytest.mark.parametrize("fields, named", [
    ({"q_lora_rank": None}, "q_lora_rank"),  # AXK1Attention always has the query latent (transformers fails)
    ({"num_key_value_heads": 1}, "num_key_value_heads"),  # one K and V per query head
    ({"mlp_layer_types": ["dense", "moe", "dense"]}, "mlp_layer_types"),
])
def test_axk1_refuses_naming_the_field(fields: dict, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        parse_config(mapped("axk1", {**_AXK1_RANDOM, **fields}))


def test_the_axk1_fixture_exercises_the_norm_of_the_mixture_output(tmp_path: Path) -> None:
    assert _far(_switched(tmp_path, "axk1", {}), "axk1") < 1e-9
    from safetensors.numpy import load_file, save_file
    stored = load_file(FIXTURES / "axk1" / "model.safetensors")
    save_file({k: v for k, v in stored.items() if "post_mlp_layernorm" not in k}, tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text((FIXTURES / "axk1" / "config.json").read_text())  # its tensor names
    data = hf_to_mapping(json.loads((FIXTURES / "axk1" / "config.json").read_text()), "config.json")
    data["block"]["moe"] = {**data["block"]["moe"], "out_norm": False}  # the mixture's output not normalised
    without = Model.from_config(parse_config(data), weights=tmp_path, dtype="float64")
    assert _far(without, "axk1") > 1e-3


def test_out_norm_is_refused_beside_an_output_bias() -> None:
    with pytest.raises(ConfigError, match="out_norm"):
        parse_config({"block": {"moe": {"n_experts": 2, "top_k": 1, "d_expert": 4, "out_bias": True,
                                        "out_norm": True}}})
