"""The newer mixture-of-experts families read from config.json (OLMoE, FlexOlmo, MiniMax-M2, GLM-4.7-Flash, dots1,
Granite MoE and its shared-expert variant, Aria's language model): their parameter counts against transformers 5.24's own totals (the
model built on the meta device from the config, sum of numel over parameters(), tied weights once) and a hand count,
for the config class's defaults and for random configs with other switches set; and the fields each one refuses.
Their forward, decode step and gradients are held to transformers by tests/test_checkpoint.py and
tests/test_gradients.py on the fixtures generate.py writes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from blockcli.block import Model
from blockcli.config import parse_config
from blockcli.count import count_parameters
from blockcli.hf import hf_to_mapping
from blockcli.sources import load_config
from conftest import ROOT, config_error_message


def total(data: dict) -> int:
    return count_parameters(parse_config(hf_to_mapping(data, "x.json"))).total


def olmoe_by_hand(d: int, layers: int, heads: int, kv: int, d_e: int, experts: int, vocab: int, tied: bool,
                  bias: bool) -> int:
    """Q, K, V, O (with biases if attention_bias), q_norm (d) and k_norm (kv·d_h), two RMSNorms, the router
    (E·d) and E SwiGLU experts; the embedding, the final norm and an untied head."""
    d_h = d // heads
    attention = 2 * d * d + 2 * d * kv * d_h + (2 * d + 2 * kv * d_h if bias else 0) + d + kv * d_h
    layer = attention + 2 * d + experts * d + experts * 3 * d * d_e
    return layers * layer + vocab * d * (1 if tied else 2) + d


# OlmoeConfig's sizes (blockcli asks for the sizes themselves; every other field takes the class's default)
OLMOE_SIZES = {"model_type": "olmoe", "hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 16,
               "intermediate_size": 2048, "vocab_size": 50304, "max_position_embeddings": 4096}

FLEX_OLMO_SIZES = {"model_type": "flex_olmo", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
                   "intermediate_size": 11008, "vocab_size": 100352, "max_position_embeddings": 4096}


@pytest.mark.parametrize("data, transformers_total, by_hand", [
    # OlmoeConfig() on the meta device: 64 experts, top 8, no K/V grouping, untied
    (OLMOE_SIZES, 13_361_612_800, olmoe_by_hand(2048, 16, 16, 16, 2048, 64, 50304, False, False)),
    # a random config: GQA 6/2, 7 experts of 40, biases on q/k/v/o, tied
    ({"model_type": "olmoe", "hidden_size": 96, "num_attention_heads": 6, "num_key_value_heads": 2,
      "num_hidden_layers": 3, "intermediate_size": 40, "num_experts": 7, "num_experts_per_tok": 3, "vocab_size": 1000,
      "max_position_embeddings": 4096, "tie_word_embeddings": True, "attention_bias": True},
     415_488, olmoe_by_hand(96, 3, 6, 2, 40, 7, 1000, True, True)),
    # FlexOlmoConfig() on the meta device: 7 experts, top 5; its norms after the branches count as OLMoE's before
    (FLEX_OLMO_SIZES, 33_270_665_216, olmoe_by_hand(4096, 32, 32, 32, 11008, 7, 100352, False, False)),
    # FlexOlmo on the random config above
    ({"model_type": "flex_olmo", "hidden_size": 96, "num_attention_heads": 6, "num_key_value_heads": 2,
      "num_hidden_layers": 3, "intermediate_size": 40, "num_experts": 7, "num_experts_per_tok": 3, "vocab_size": 1000,
      "max_position_embeddings": 4096, "tie_word_embeddings": True, "attention_bias": True, "pad_token_id": 0},
     415_488, olmoe_by_hand(96, 3, 6, 2, 40, 7, 1000, True, True)),
])
def test_olmoe_and_flex_olmo_count_as_transformers(data: dict, transformers_total: int, by_hand: int) -> None:
    assert total(data) == by_hand == transformers_total
    placement = hf_to_mapping(data, "x.json")["block"]["placement"]
    assert placement == ("post_branch" if data["model_type"] == "flex_olmo" else "pre")


def test_olmoe_block_is_llama_with_projection_qk_norms_and_softmax_routing() -> None:
    block = hf_to_mapping({**OLMOE_SIZES, "norm_topk_prob": True, "num_experts": 8, "num_experts_per_tok": 2},
                          "x.json")["block"]
    assert block["qk_norm"] == "projection" and block["placement"] == "pre" and block["n_kv_heads"] == 16
    assert block["moe"] == {"n_experts": 8, "top_k": 2, "d_expert": 2048, "renormalize": True}
    assert block["norm_eps"] == 1e-5


def test_olmoe_clip_qkv_clamps_after_the_qk_norms_and_a_zero_bound_is_refused(tmp_path: Path) -> None:
    """(the logits against transformers': tests/test_random_configs.py's olmoe-clip-qkv case)"""
    path = tmp_path / "config.json"
    text = ('{"model_type": "olmoe", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, '
            '"intermediate_size": 32, "vocab_size": 100, "max_position_embeddings": 64, "clip_qkv": %s}')
    path.write_text(text % "8.0")
    block = load_config(path).block
    assert (block.clip_qkv, block.clip_after_qk_norm) == (8.0, True)
    path.write_text(text % "0")
    assert "field 'clip_qkv'" in config_error_message(lambda: load_config(path), path)


def minimax_m2_by_hand(d: int, layers: int, heads: int, kv: int, d_h: int, d_e: int, experts: int, vocab: int,
                       tied: bool) -> int:
    """Q, K, V, O without biases, q_norm (h·d_h) and k_norm (kv·d_h), two RMSNorms, the router (E·d) and E
    SwiGLU experts (the selection bias is a buffer, not a parameter); the embedding, the final norm, the head."""
    attention = 2 * d * heads * d_h + 2 * d * kv * d_h + heads * d_h + kv * d_h
    layer = attention + 2 * d + experts * d + experts * 3 * d * d_e
    return layers * layer + vocab * d * (1 if tied else 2) + d


# MiniMaxM2Config's sizes
MINIMAX_M2_SIZES = {"model_type": "minimax_m2", "hidden_size": 3072, "num_hidden_layers": 62,
                    "num_attention_heads": 48, "intermediate_size": 1536, "vocab_size": 200064,
                    "max_position_embeddings": 196608}


@pytest.mark.parametrize("data, transformers_total, by_hand", [
    # MiniMaxM2Config() on the meta device: 256 experts, top 8, GQA 48/8 of 128, untied
    (MINIMAX_M2_SIZES, 228_689_748_992, minimax_m2_by_hand(3072, 62, 48, 8, 128, 1536, 256, 200064, False)),
    # a random config: GQA 6/3 of 20 (not hidden_size / heads), 7 experts of 40, half of each head rotated, tied
    ({"model_type": "minimax_m2", "hidden_size": 96, "num_attention_heads": 6, "num_key_value_heads": 3,
      "head_dim": 20, "num_hidden_layers": 3, "intermediate_size": 40, "num_local_experts": 7,
      "num_experts_per_tok": 3, "vocab_size": 1000, "max_position_embeddings": 4096, "tie_word_embeddings": True,
      "rotary_dim": 10}, 444_828, minimax_m2_by_hand(96, 3, 6, 3, 20, 40, 7, 1000, True)),
])
def test_minimax_m2_counts_as_transformers(data: dict, transformers_total: int, by_hand: int) -> None:
    assert total(data) == by_hand == transformers_total


def test_minimax_m2_routes_by_biased_sigmoid_and_rotates_rotary_dim() -> None:
    block = hf_to_mapping({**MINIMAX_M2_SIZES, "rotary_dim": 64}, "x.json")["block"]
    assert block["moe"] == {"n_experts": 256, "top_k": 8, "d_expert": 1536, "scoring": "sigmoid",
                            "selection_bias": True, "renormalize": True}
    assert block["qk_norm"] == "projection" and block["head_dim"] == 128 and block["n_kv_heads"] == 8
    assert int(128 * block["rope"]) == 64 and block["rope_theta"] == 5e6


def glm4_moe_lite_by_hand(d: int, heads: int, q_rank: int, kv_rank: int, nope: int, rope: int, v: int, bias: bool,
                          d_ff: int, d_e: int, experts: int, shared: int, kinds: list[str], vocab: int,
                          tied: bool) -> int:
    """Latent attention (q_a_proj, q_a_layernorm, q_b_proj, or one q_proj when the rank is null; kv_a_proj_with_mqa,
    kv_a_layernorm, kv_b_proj; o_proj; attention_bias on q_a, kv_a and o), two RMSNorms, and a dense SwiGLU MLP
    or the router, E experts and the shared experts; the embedding, the final norm and an untied head."""
    q = d * q_rank + q_rank + q_rank * heads * (nope + rope) + (q_rank if bias else 0) if q_rank \
        else d * heads * (nope + rope)
    kv = d * (kv_rank + rope) + (kv_rank + rope if bias else 0) + kv_rank + kv_rank * heads * (nope + v)
    attention = q + kv + heads * v * d + (d if bias else 0) + 2 * d
    mixture = experts * d + experts * 3 * d * d_e + 3 * d * d_e * shared
    return sum(attention + (3 * d * d_ff if kind == "dense" else mixture) for kind in kinds) \
        + vocab * d * (1 if tied else 2) + d


# Glm4MoeLiteConfig's sizes
GLM4_MOE_LITE_SIZES = {"model_type": "glm4_moe_lite", "hidden_size": 2048, "num_hidden_layers": 47,
                       "num_attention_heads": 20, "intermediate_size": 10240, "vocab_size": 154880,
                       "max_position_embeddings": 202752}
GLM_RANDOM = {"model_type": "glm4_moe_lite", "hidden_size": 96, "num_attention_heads": 6, "num_key_value_heads": 6,
              "num_hidden_layers": 4, "intermediate_size": 80, "moe_intermediate_size": 24, "n_routed_experts": 6,
              "num_experts_per_tok": 2, "n_shared_experts": 2, "q_lora_rank": None, "kv_lora_rank": 32,
              "qk_nope_head_dim": 12, "qk_rope_head_dim": 8, "v_head_dim": 10, "attention_bias": True,
              "mlp_layer_types": ["dense", "sparse", "dense", "sparse"], "vocab_size": 1000,
              "max_position_embeddings": 4096, "tie_word_embeddings": True}


@pytest.mark.parametrize("data, transformers_total, by_hand", [
    # Glm4MoeLiteConfig() on the meta device: layer 0 dense, 46 layers of 64 experts (top 4) and one shared
    (GLM4_MOE_LITE_SIZES, 29_943_390_976, glm4_moe_lite_by_hand(
        2048, 20, 768, 512, 192, 64, 256, False, 10240, 1536, 64, 1, ["dense"] + ["sparse"] * 46, 154880, False)),
    # a random config: one q_proj (q_lora_rank null), attention biases, dense layers 0 and 2, 2 shared experts, tied
    (GLM_RANDOM, 356_736, glm4_moe_lite_by_hand(96, 6, 0, 32, 12, 8, 10, True, 80, 24, 6, 2,
                                                GLM_RANDOM["mlp_layer_types"], 1000, True)),
])
def test_glm4_moe_lite_counts_as_transformers(data: dict, transformers_total: int, by_hand: int) -> None:
    assert total(data) == by_hand == transformers_total


def test_glm4_moe_lite_reads_mlp_layer_types_and_not_first_k_dense_replace() -> None:
    mapping = hf_to_mapping({**GLM_RANDOM, "first_k_dense_replace": 3}, "x.json")
    assert mapping["layers"] == [{"indices": [0, 2], "block": {"moe": None}}]
    assert mapping["block"]["moe"]["routed_scaling"] == 1.8 and mapping["block"]["moe"]["selection_bias"]
    bad = {**GLM_RANDOM, "mlp_layer_types": ["dense", "moe", "dense", "sparse"]}
    assert "field 'mlp_layer_types'" in config_error_message(lambda: hf_to_mapping(bad, "x.json"))


def granitemoe_by_hand(d: int, layers: int, heads: int, kv: int, d_e: int, experts: int, vocab: int, tied: bool,
                       bias: bool) -> int:
    """Q, K, V, O (biases if attention_bias), two RMSNorms, the router (E·d) and E SwiGLU experts; the embedding,
    the final norm and an untied head (the four multipliers are scalars of the config, not parameters)."""
    d_h = d // heads
    attention = 2 * d * d + 2 * d * kv * d_h + (2 * d + 2 * kv * d_h if bias else 0)
    return layers * (attention + 2 * d + experts * d + experts * 3 * d * d_e) + vocab * d * (1 if tied else 2) + d


GRANITEMOE_SIZES = {"model_type": "granitemoe", "hidden_size": 4096, "num_hidden_layers": 32,
                    "num_attention_heads": 32, "intermediate_size": 11008, "vocab_size": 32000,
                    "max_position_embeddings": 2048}


@pytest.mark.parametrize("data, transformers_total, by_hand", [
    # GraniteMoeConfig() on the meta device: 8 experts, top 2, no K/V grouping, untied
    (GRANITEMOE_SIZES, 37_039_116_288, granitemoe_by_hand(4096, 32, 32, 32, 11008, 8, 32000, False, False)),
    # a random config: GQA 6/2, 7 experts of 40, biases on q/k/v/o, tied
    ({"model_type": "granitemoe", "hidden_size": 96, "num_attention_heads": 6, "num_key_value_heads": 2,
      "num_hidden_layers": 3, "intermediate_size": 40, "num_local_experts": 7, "num_experts_per_tok": 3,
      "vocab_size": 1000, "max_position_embeddings": 4096, "tie_word_embeddings": True, "attention_bias": True},
     415_104, granitemoe_by_hand(96, 3, 6, 2, 40, 7, 1000, True, True)),
])
def test_granitemoe_counts_as_transformers(data: dict, transformers_total: int, by_hand: int) -> None:
    assert total(data) == by_hand == transformers_total


def test_granitemoe_softmaxes_the_top_k_logits_and_keeps_granites_scalars() -> None:
    mapping = hf_to_mapping({**GRANITEMOE_SIZES, "attention_multiplier": 0.25, "logits_scaling": 4.0}, "x.json")
    assert mapping["block"]["moe"] == {"n_experts": 8, "top_k": 2, "d_expert": 11008, "order": "topk_softmax"}
    assert mapping["block"]["attention_scale"] == 0.25 and mapping["model"]["logit_multiplier"] == 0.25


@pytest.mark.parametrize("data, transformers_total, by_hand", [
    # GraniteMoeSharedConfig() on the meta device: shared_intermediate_size 0, no shared expert: Granite MoE's total
    ({**GRANITEMOE_SIZES, "model_type": "granitemoeshared"}, 37_039_116_288,
     granitemoe_by_hand(4096, 32, 32, 32, 11008, 8, 32000, False, False)),
    # a random config with a shared expert of 56 (gate | up fused, and down: 3·d·56 a layer)
    ({"model_type": "granitemoeshared", "hidden_size": 96, "num_attention_heads": 6, "num_key_value_heads": 2,
      "num_hidden_layers": 3, "intermediate_size": 40, "shared_intermediate_size": 56, "num_local_experts": 7,
      "num_experts_per_tok": 3, "vocab_size": 1000, "max_position_embeddings": 4096, "tie_word_embeddings": True,
      "attention_bias": True}, 463_488, granitemoe_by_hand(96, 3, 6, 2, 40, 7, 1000, True, True) + 3 * 3 * 96 * 56),
])
def test_granitemoeshared_counts_as_transformers(data: dict, transformers_total: int, by_hand: int) -> None:
    assert total(data) == by_hand == transformers_total



def dots1_by_hand(d: int, layers: int, heads: int, kv: int, d_h: int, bias: bool, d_ff: int, dense: int, d_e: int,
                  experts: int, shared: int, vocab: int, tied: bool) -> int:
    """Q, K, V, O (biases if attention_bias), q_norm and k_norm (d_h each), two RMSNorms, and the dense SwiGLU MLP
    on the first `dense` layers, the router, E experts and the shared experts on the others; embedding, final
    norm, untied head (the selection bias is a buffer)."""
    attention = 2 * d * heads * d_h + 2 * d * kv * d_h + ((heads + 2 * kv) * d_h + d if bias else 0) + 2 * d_h + 2 * d
    mixture = experts * d + experts * 3 * d * d_e + 3 * d * d_e * shared
    return layers * attention + dense * 3 * d * d_ff + (layers - dense) * mixture + vocab * d * (1 if tied else 2) + d


@pytest.mark.parametrize("data, transformers_total, by_hand", [
    # Dots1Config() on the meta device with the expert counts it leaves unset given (128 experts, top 6, 2 shared):
    # every layer a mixture (first_k_dense_replace 0), 32 heads of 144
    ({"model_type": "dots1", "hidden_size": 4608, "num_hidden_layers": 62, "num_attention_heads": 32,
      "intermediate_size": 10944, "vocab_size": 152064, "max_position_embeddings": 2048, "n_routed_experts": 128,
      "num_experts_per_tok": 6, "n_shared_experts": 2}, 163_585_920_960,
     dots1_by_hand(4608, 62, 32, 32, 144, False, 10944, 0, 1408, 128, 2, 152064, False)),
    # a random config: GQA 6/2 of 20, biases, layers 0 and 1 dense, tied
    ({"model_type": "dots1", "hidden_size": 96, "num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": 20,
      "num_hidden_layers": 4, "intermediate_size": 80, "moe_intermediate_size": 24, "n_routed_experts": 6,
      "num_experts_per_tok": 2, "n_shared_experts": 1, "first_k_dense_replace": 2, "attention_bias": True,
      "vocab_size": 1000, "max_position_embeddings": 4096, "tie_word_embeddings": True}, 365_088,
     dots1_by_hand(96, 4, 6, 2, 20, True, 80, 2, 24, 6, 1, 1000, True)),
])
def test_dots1_counts_as_transformers(data: dict, transformers_total: int, by_hand: int) -> None:
    assert total(data) == by_hand == transformers_total


def test_dots1_needs_the_expert_counts_its_config_class_leaves_unset() -> None:
    data = {"model_type": "dots1", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "intermediate_size": 96, "vocab_size": 100, "max_position_embeddings": 64,
            "num_experts_per_tok": 2, "n_shared_experts": 1}
    assert "field 'n_routed_experts' is missing" in config_error_message(lambda: hf_to_mapping(data, "x.json"))


def aria_text_by_hand(d: int, layers: int, heads: int, kv: int, d_h: int, d_ff: int, experts: int, shared: int,
                      vocab: int, tied: bool, attention_bias: bool, mlp_bias: bool) -> int:
    """Llama's attention (Q and O h·d_h wide, K and V kv·d_h), two RMSNorms, the router (E·d), E SiLU-gated experts
    d_ff wide without biases, and one shared SwiGLU MLP d_ff·shared wide (biased by mlp_bias); the embedding, the
    final norm and an untied head."""
    attention = 2 * d * heads * d_h + 2 * d * kv * d_h + (heads * d_h + 2 * kv * d_h + d if attention_bias else 0)
    shared_mlp = 3 * d * d_ff * shared + (2 * d_ff * shared + d if mlp_bias else 0)
    layer = attention + 2 * d + experts * d + experts * 3 * d * d_ff + shared_mlp
    return layers * layer + vocab * d * (1 if tied else 2) + d


ARIA_TEXT_RANDOM = {"model_type": "aria_text", "hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 4,
                    "head_dim": 96, "intermediate_size": 1536, "moe_num_experts": 16, "moe_topk": 4,
                    "moe_num_shared_experts": 1, "vocab_size": 10000, "num_hidden_layers": 5, "attention_bias": True,
                    "mlp_bias": True, "tie_word_embeddings": True, "max_position_embeddings": 4096}


@pytest.mark.parametrize("data, transformers_total, by_hand", [
    # AriaTextConfig's defaults (rhymes-ai/Aria's language model): 18,517,069,824, the census's meta-device total
    ({"model_type": "aria_text", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
      "intermediate_size": 4096, "vocab_size": 32000, "max_position_embeddings": 2048}, 18_517_069_824,
     aria_text_by_hand(4096, 32, 32, 32, 128, 4096, 8, 2, 32000, False, False, False)),
    # every switch away from its default: AriaTextForCausalLM built from it on the meta device gives 431,111,424
    (ARIA_TEXT_RANDOM, 431_111_424, aria_text_by_hand(1024, 5, 16, 4, 96, 1536, 16, 1, 10000, True, True, True)),
])
def test_aria_text_counts_as_transformers(data: dict, transformers_total: int, by_hand: int) -> None:
    assert total(data) == transformers_total == by_hand


def test_aria_text_softmaxes_the_top_k_logits_beside_its_shared_experts() -> None:
    block = parse_config(hf_to_mapping(ARIA_TEXT_RANDOM, "x.json")).block
    moe = block.moe
    assert (moe.n_experts, moe.top_k, moe.d_expert, moe.d_shared) == (16, 4, 1536, 1536)
    assert moe.order == "topk_softmax" and not moe.routed_bias and not moe.shared_gate


@pytest.mark.parametrize("change, field", [
    ({"hidden_act": "gelu"}, "hidden_act"),  # AriaExperts is SiLU-gated whatever hidden_act says
    ({"moe_num_shared_experts": 0}, "moe_num_shared_experts"),  # with mlp_bias: a down_proj bias and no MLP
])
def test_aria_text_refuses_what_its_experts_would_not_do(change: dict, field: str) -> None:
    message = config_error_message(lambda: hf_to_mapping({**ARIA_TEXT_RANDOM, **change}, "x.json"), change)
    assert f"field '{field}'" in message


def test_aria_text_reads_transformers_in_memory_expert_names(tmp_path: Path) -> None:
    """The fixture's experts saved as AriaExperts holds them (gate_up_proj, down_proj) instead of the published
    fc1/fc2: the same model, transformers' logits."""
    folder = ROOT / "tests" / "fixtures" / "hf" / "aria_text"
    tensors = {k.replace("experts.fc1.weight", "experts.gate_up_proj").replace("experts.fc2.weight",
                                                                              "experts.down_proj"): v
               for k, v in load_file(folder / "model.safetensors").items()}
    assert any(k.endswith("experts.gate_up_proj") for k in tensors)
    (tmp_path / "config.json").write_bytes((folder / "config.json").read_bytes())
    save_file(tensors, tmp_path / "model.safetensors")
    expected = np.load(folder / "expected.npz")
    model = Model.from_config(load_config(tmp_path), weights=tmp_path, dtype="float64")
    logits, want = model(expected["input_ids"]), expected["logits_float64"]
    assert np.abs(logits - want).max() <= 1e-9 * np.abs(want).max()


def mimo_v2_flash_by_hand(d: int, h: int, kv: int, d_h: int, d_v: int, layers: int, d_ff: int, d_e: int, experts: int,
                          vocab: int, bias: bool, tied: bool, full: set[int], dense: set[int]) -> int:
    """Per layer: Q (d·h·d_h), K (d·h_kv·d_h) and V (d·h_kv·d_v) with biases under attention_bias, O (h·d_v·d, never
    biased), twice the K/V heads and a sink logit per head on the sliding layers; two RMSNorms; the dense SwiGLU MLP
    or the router (E·d; its selection bias a buffer) and E SwiGLU experts. The embedding, the final norm, the head."""
    count = vocab * d * (1 if tied else 2) + d
    for i in range(layers):
        k = kv if i in full else 2 * kv
        attention = d * h * d_h + d * k * d_h + d * k * d_v + h * d_v * d
        attention += (h * d_h + k * d_h + k * d_v if bias else 0) + (0 if i in full else h)
        count += attention + 2 * d + (3 * d * d_ff if i in dense else experts * d + experts * 3 * d * d_e)
    return count


# MiMoV2FlashConfig's defaults (XiaomiMiMo/MiMo-V2-Flash's shapes): global attention on layer 0 and every sixth
MIMO_FULL = {0} | {i for i in range(48) if (i + 1) % 6 == 0}


@pytest.mark.parametrize("data, transformers_total, by_hand", [
    # MiMoV2FlashConfig() on the meta device: 309B ("309B total parameters" on the model card)
    ({"model_type": "mimo_v2_flash", "hidden_size": 4096, "num_hidden_layers": 48, "num_attention_heads": 64,
      "num_key_value_heads": 4, "intermediate_size": 16384, "vocab_size": 152576, "max_position_embeddings": 131072},
     308_778_768_832, mimo_v2_flash_by_hand(4096, 64, 4, 192, 128, 48, 16384, 2048, 256, 152576, False, False,
                                            MIMO_FULL, {0})),
    # a random config: d_h 20 beside d_v 12 (neither hidden_size / heads), 3 groups of 2 experts, biased q/k/v, dense
    # layers 0 and 2 by mlp_layer_types, tied; layers 0 and 5 global by the class's default pattern
    ({"model_type": "mimo_v2_flash", "hidden_size": 96, "num_attention_heads": 6, "num_key_value_heads": 3,
      "head_dim": 20, "v_head_dim": 12, "num_hidden_layers": 7, "intermediate_size": 200, "moe_intermediate_size": 24,
      "n_routed_experts": 6, "num_experts_per_tok": 2, "n_group": 3, "topk_group": 2, "attention_bias": True,
      "vocab_size": 1000, "max_position_embeddings": 4096, "tie_word_embeddings": True,
      "mlp_layer_types": ["dense", "sparse", "dense", "sparse", "sparse", "sparse", "sparse"]},
     664_518, mimo_v2_flash_by_hand(96, 6, 3, 20, 12, 7, 200, 24, 6, 1000, True, True, {0, 5}, {0, 2})),
])
def test_mimo_v2_flash_counts_as_transformers(data: dict, transformers_total: int, by_hand: int) -> None:
    assert total(data) == by_hand == transformers_total


def test_mimo_v2_flash_reads_its_layer_kinds_values_and_windows() -> None:
    config = parse_config(hf_to_mapping({"model_type": "mimo_v2_flash", "hidden_size": 64, "num_hidden_layers": 7,
                                         "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 24,
                                         "v_head_dim": 16, "intermediate_size": 64, "vocab_size": 100,
                                         "max_position_embeddings": 256, "sliding_window_size": 128,
                                         "attention_value_scale": None}, "x.json"))
    full, sliding = config.layer_block(5), config.layer_block(1)
    assert (full.n_kv_heads, full.attention_sinks, full.sliding_window) == (2, False, 0)
    # sliding_window_size counts the keys before the query: transformers' window is one more
    assert (sliding.n_kv_heads, sliding.attention_sinks, sliding.sliding_window) == (4, True, 129)
    assert full.value_dim == sliding.value_dim == 16 and full.value_scale == 1.0  # a null scale: none
    assert (full.rope_theta, sliding.rope_theta) == (5e6, 1e4) and full.rope_dims == sliding.rope_dims == 8  # int(24·0.334)
    assert config.layer_block(0).moe is None and config.layer_block(1).moe.n_groups == 1


@pytest.mark.parametrize("change, field", [
    ({"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.2},
                          "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}},
     "rope_parameters.full_attention.partial_rotary_factor"),  # int(25 · 0.2) = 5 dims: rotary pairs need an even number
    ({"head_dim": None}, "head_dim"),  # MiMoV2FlashConfig refuses null
])
def test_mimo_v2_flash_refuses_what_blockcli_cannot_represent(change: dict, field: str) -> None:
    data = {"model_type": "mimo_v2_flash", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 8,
            "num_key_value_heads": 2, "head_dim": 25, "v_head_dim": 16, "intermediate_size": 64, "vocab_size": 100,
            "max_position_embeddings": 256, **change}
    assert f"field '{field}'" in config_error_message(lambda: hf_to_mapping(data, "x.json"), "x.json")


def beam_by_hand(d: int, h: int, kv: int, d_h: int, layers: int, d_ff: int, experts: int, d_e: int, vocab: int,
                 dense: int, tied: bool) -> int:
    """Per layer: Q, K, V, O (no biases), the gate's projection (d·h·d_h) and its bias per head (h), the q/k norms
    (d_h each), four RMSNorms; the first `dense` layers a SwiGLU MLP, the others the router (E·d; its selection bias
    a buffer) and E SwiGLU experts. The embedding, the final norm, the head."""
    attention = d * h * d_h + 2 * d * kv * d_h + h * d_h * d + d * h * d_h + h + 2 * d_h
    return vocab * d * (1 if tied else 2) + d + sum(
        attention + 4 * d + (3 * d * d_ff if i < dense else experts * d + experts * 3 * d * d_e) for i in range(layers))


@pytest.mark.parametrize("data, transformers_total, by_hand", [
    # BeamConfig() on the meta device: 501B (reflection/Beam-1.0-501B-A23B)
    ({"model_type": "beam", "hidden_size": 5120, "num_hidden_layers": 52, "num_attention_heads": 48,
      "num_key_value_heads": 8, "intermediate_size": 20480, "vocab_size": 151936, "max_position_embeddings": 8192},
     501_267_599_808, beam_by_hand(5120, 48, 8, 128, 52, 20480, 256, 2560, 151936, 3, False)),
    # a random config: GQA 6/2 of 20, 3 groups of 2 experts, two dense layers, tied; layers 5 and 6 global by the
    # class's pattern (every sixth, and the last)
    ({"model_type": "beam", "hidden_size": 96, "num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": 20,
      "num_hidden_layers": 7, "intermediate_size": 200, "moe_intermediate_size": 24, "num_experts": 6,
      "num_experts_per_tok": 2, "n_group": 3, "topk_group": 2, "vocab_size": 1000, "max_position_embeddings": 4096,
      "tie_word_embeddings": True,
      "mlp_layer_types": ["dense", "dense", "sparse", "sparse", "sparse", "sparse", "sparse"]},
     720_226, beam_by_hand(96, 6, 2, 20, 7, 200, 6, 24, 1000, 2, True)),
])
def test_beam_counts_as_transformers(data: dict, transformers_total: int, by_hand: int) -> None:
    assert total(data) == by_hand == transformers_total


def test_beam_scales_each_residual_add_by_depth_and_its_nope_queries_by_position() -> None:
    config = parse_config(hf_to_mapping({"model_type": "beam", "hidden_size": 64, "num_hidden_layers": 7,
                                         "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 64,
                                         "vocab_size": 100, "max_position_embeddings": 256}, "x.json"))
    for i in range(7):
        b, k = config.layer_block(i), 2 * (i + 1)  # the model's k-th and (k + 1)-th residual adds
        assert (b.attn_skip_scale ** 2, b.attn_branch_scale ** 2) == pytest.approx(((k - 1) / k, 1 / k), rel=1e-15)
        assert (b.mlp_skip_scale ** 2, b.mlp_branch_scale ** 2) == pytest.approx((k / (k + 1), 1 / (k + 1)), rel=1e-15)
        nope = i in (5, 6)  # global: every sixth layer and the last
        assert (b.rope == 0, b.sliding_window == 0, b.query_scale) == (nope, nope, 0.1 if nope else 0.0)
        assert b.placement == "sandwich" and b.attention_gate_head_bias and (b.moe is None) == (i < 3)
    from blockcli.block import query_scales

    scales = query_scales(config.layer_block(5), np.arange(4096), np.float64)
    np.testing.assert_allclose(scales, [(1 + (t + 1) / 2048) ** 0.1 for t in range(4096)], rtol=1e-15)
    assert config.model.logit_softcap == 30.0 and config.layer_block(6).moe.n_groups == 8
