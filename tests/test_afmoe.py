"""AFMoE and its descendants (blockcli/families/afmoe.py: AFMoE, Mellum, Laguna), and Flint (a row of
blockcli/families/moe.py: Qwen3-MoE with sinks and sigmoid routing) and HY V3 (a row of blockcli/families/moe_relatives.py:
Apertus' attention with MiniMax-M2's mixture and biased shared experts). Their parameter counts against transformers 5.24's own
totals (the causal LM built on the meta device from the config, sum of numel over parameters(), tied weights once) and
a hand count, for the config class's defaults (its sizes written out, as blockcli asks for them) and for a random
config with other switches set; the torch-marked test recomputes every total and reads the sizes from the config class
itself. Their forward, every layer, the decode step and the gradients are held to transformers by
tests/test_checkpoint.py and tests/test_gradients.py on the fixtures tests/fixtures/hf/generate.py writes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from blockcli import Model
from blockcli.config import parse_config
from blockcli.hf import hf_to_mapping
from blockcli.shapes import model_parameter_shapes
from conftest import ROOT, config_error_message
from test_dense_families import _sizes, assert_totals_are_transformers_own, mapped, total


def afmoe_by_hand(d: int, f: int, layers: int, q: int, kv: int, d_h: int, dense: int, d_e: int, experts: int,
                  shared: int, vocab: int, tied: bool) -> int:
    """Q, K, V, O and the gate (d·q each but K, V: d·kv), q_norm and k_norm (d_h each), four RMSNorms (d each); the
    first `dense` layers a SwiGLU MLP (3·d·f), the others the router (E·d), E SwiGLU experts (3·d·d_e each), the
    shared ones as one SwiGLU MLP of shared·d_e and the selection bias (E); embeddings, an untied head, the final
    norm."""
    attention = 3 * d * q + 2 * d * kv + 2 * d_h + 4 * d
    expert_layer = experts * d + experts * 3 * d * d_e + 3 * d * shared * d_e + experts
    return (layers * attention + dense * 3 * d * f + (layers - dense) * expert_layer
            + vocab * d * (1 if tied else 2) + d)


# AfmoeConfig's sizes (Trinity-Mini's shape)
_AFMOE_SIZES = _sizes(2048, 6144, 32, 16, 200192, 16384)
# a random AFMoE: 6 heads of 10 over 3 K/V heads, 2 dense layers, 5 experts of 12 top 3, 3 shared, every second
# layer global, muP's embedding scale, tied
_AFMOE_RANDOM = dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=3, head_dim=10, num_hidden_layers=4,
                     intermediate_size=40, moe_intermediate_size=12, num_experts=5, num_experts_per_tok=3,
                     num_shared_experts=3, num_dense_layers=2, route_scale=2.0, global_attn_every_n_layers=2,
                     sliding_window=16, vocab_size=300, tie_word_embeddings=True, mup_enabled=True,
                     max_position_embeddings=96, rms_norm_eps=1e-6,
                     rope_parameters={"rope_type": "default", "rope_theta": 500000.0})

def mellum_by_hand(d: int, f: int, layers: int, q: int, kv: int, d_h: int, kinds: str, d_e: int, experts: int,
                   vocab: int, tied: bool, bias: bool) -> int:
    """Q, K, V, O (biases with attention_bias), q_norm and k_norm (d_h each), two RMSNorms; a "dense" (d) layer a
    SwiGLU MLP (3·d·f), a "sparse" (s) one the router (E·d) and E SwiGLU experts (3·d·d_e each); embeddings, an
    untied head, the final norm. No multi-token-prediction layer: transformers builds none."""
    attention = 2 * d * q + 2 * d * kv + (q + 2 * kv + d if bias else 0) + 2 * d_h + 2 * d
    mlps = sum(3 * d * f if kind == "d" else experts * d + experts * 3 * d * d_e for kind in kinds)
    return layers * attention + mlps + vocab * d * (1 if tied else 2) + d


# MellumConfig's sizes (Mellum2-12B-A2.5B)
_MELLUM_SIZES = _sizes(2304, 7168, 28, 32, 98304, 131072)
# a random Mellum: 6 heads of 10 over 3, biases, layers 1 and 2 global, 0 and 2 dense, 5 experts of 12 top 3, tied,
# one MTP layer (not built), a RoPE per layer type
_MELLUM_RANDOM = dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=3, head_dim=10, num_hidden_layers=4,
                      intermediate_size=40, moe_intermediate_size=12, num_experts=5, num_experts_per_tok=3,
                      attention_bias=True, tie_word_embeddings=True, mlp_layer_types=["dense", "sparse", "dense", "sparse"],
                      layer_types=["sliding_attention", "full_attention", "full_attention", "sliding_attention"],
                      sliding_window=16, vocab_size=300, max_position_embeddings=96, norm_topk_prob=False,
                      num_mtp_layers=1, rope_parameters={
                          "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                          "sliding_attention": {"rope_type": "default", "rope_theta": 5000.0}})

def laguna_by_hand(d: int, f: int, layers: int, q: int, kv: int, d_h: int, gate: int, kinds: str, d_e: int,
                   experts: int, shared: int, vocab: int, tied: bool) -> int:
    """Q, K, V, O (d·q, d·kv, d·kv, q·d), the gate (d·gate: one column a head, or one a channel), q_norm and k_norm (d_h
    each), two RMSNorms; a "dense" (d) layer a SwiGLU MLP (3·d·f), a "sparse" (s) one the router (E·d), its selection
    bias (E), E SwiGLU experts (3·d·d_e each) and the shared expert (3·d·shared); embeddings, an untied head, the final
    norm."""
    attention = 2 * d * q + 2 * d * kv + d * gate + 2 * d_h + 2 * d
    mlps = sum(3 * d * f if kind == "d" else experts * d + experts + experts * 3 * d * d_e + 3 * d * shared
               for kind in kinds)
    return layers * attention + mlps + vocab * d * (1 if tied else 2) + d


# LagunaConfig's sizes (laguna-XS.2)
_LAGUNA_SIZES = _sizes(2048, 8192, 40, 48, 100352, 131072)
# a random Laguna: 6 heads of 10 over 3, a gate per channel, layers 1 and 2 global (RoPE on 4 of 10 dims, base 1e6),
# 0 and 2 dense, 5 experts of 12 top 3 times 2, a shared expert of 20, tied
_LAGUNA_RANDOM = dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=3, head_dim=10, num_hidden_layers=4,
                      intermediate_size=40, moe_intermediate_size=12, num_experts=5, num_experts_per_tok=3,
                      shared_expert_intermediate_size=20, moe_routed_scaling_factor=2.0, tie_word_embeddings=True,
                      gating="per-element", mlp_layer_types=["dense", "sparse", "dense", "sparse"],
                      layer_types=["sliding_attention", "full_attention", "full_attention", "sliding_attention"],
                      sliding_window=16, vocab_size=300, max_position_embeddings=96, rope_parameters={
                          "full_attention": {"rope_type": "default", "rope_theta": 1000000.0,
                                             "partial_rotary_factor": 0.4},
                          "sliding_attention": {"rope_type": "default", "rope_theta": 5000.0}})

def flint_by_hand(d: int, f: int, layers: int, q: int, kv: int, d_h: int, h: int, kinds: str, d_e: int,
                  experts: int, shared: int, vocab: int, tied: bool, bias: bool) -> int:
    """Q, K, V, O (biases with attention_bias), q_norm and k_norm (d_h each), a sink per head (h), two RMSNorms; a
    "dense" (d) layer a SwiGLU MLP (3·d·f), a "sparse" (s) one the router (E·d), E SwiGLU experts (3·d·d_e each) and
    the ungated shared expert (3·d·shared); embeddings, an untied head, the final norm."""
    attention = 2 * d * q + 2 * d * kv + (q + 2 * kv + d if bias else 0) + 2 * d_h + h + 2 * d
    mlps = sum(3 * d * f if kind == "d" else experts * d + experts * 3 * d * d_e + 3 * d * shared for kind in kinds)
    return layers * attention + mlps + vocab * d * (1 if tied else 2) + d


# FlintConfig's sizes
_FLINT_SIZES = _sizes(2048, 6144, 49, 32, 150144, 262144)
# a random Flint: 6 heads of 10 over 3, biases, the default layer types of 5 layers (0, 1 and 4 global), every second
# layer sparse but layer 0 dense (layers 1 and 3 sparse), 5 experts of 12 top 3 not renormalised, a shared expert of
# 20, tied
_FLINT_RANDOM = dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=3, head_dim=10, num_hidden_layers=5,
                     intermediate_size=40, moe_intermediate_size=12, num_experts=5, num_experts_per_tok=3,
                     shared_expert_intermediate_size=20, attention_bias=True, tie_word_embeddings=True,
                     decoder_sparse_step=2, mlp_only_layers=[0], norm_topk_prob=False, sliding_window=16,
                     vocab_size=300, max_position_embeddings=96)

def hy_v3_by_hand(d: int, f: int, layers: int, q: int, kv: int, d_h: int, kinds: str, d_e: int, experts: int,
                  shared: int, vocab: int, tied: bool, mlp_bias: bool) -> int:
    """Q, K, V, O (no biases), q_norm and k_norm (d_h each), two RMSNorms; a "dense" (d) layer a SwiGLU MLP (3·d·f, and
    2·f + d biases with mlp_bias), a "sparse" (s) one the router (E·d), E SwiGLU experts (3·d·d_e each, never biased)
    and the shared experts, one SwiGLU MLP of shared·d_e (intermediate_size when shared is 0), biased with mlp_bias;
    the selection bias a buffer, outside the total; embeddings, an untied head, the final norm."""
    def mlp(width: int) -> int:
        return 3 * d * width + (2 * width + d if mlp_bias else 0)

    attention = 2 * d * q + 2 * d * kv + 2 * d_h + 2 * d
    mlps = sum(mlp(f) if kind == "d" else experts * d + experts * 3 * d * d_e + mlp(shared * d_e or f)
               for kind in kinds)
    return layers * attention + mlps + vocab * d * (1 if tied else 2) + d


# HYV3Config's sizes (Hy3-preview)
_HY_V3_SIZES = _sizes(4096, 13312, 80, 64, 120832, 131072)
# a random HY V3: 6 heads of 10 over 3, layer 1 dense, 5 experts of 12 top 3 times 1.5, no shared expert count (so one
# of intermediate_size), mlp_bias, tied
_HY_V3_RANDOM = dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=3, head_dim=10, num_hidden_layers=4,
                     intermediate_size=40, moe_intermediate_size=12, num_experts=5, num_experts_per_tok=3,
                     num_shared_experts=0, mlp_bias=True, tie_word_embeddings=True,
                     mlp_layer_types=["sparse", "dense", "sparse", "sparse"], router_scaling_factor=1.5,
                     vocab_size=300, max_position_embeddings=96)

# model_type → (sizes, transformers' total for the defaults, by hand, random config, transformers' total, by hand)
CASES: dict[str, tuple[dict, int, int, dict, int, int]] = {
    "afmoe": (_AFMOE_SIZES, 19_232_600_000,
              afmoe_by_hand(2048, 6144, 32, 2048, 2048, 128, 1, 1408, 64, 2, 200192, False),
              _AFMOE_RANDOM, 101_034, afmoe_by_hand(48, 40, 4, 60, 30, 10, 2, 12, 5, 3, 300, True)),
    "mellum": (_MELLUM_SIZES, 12_149_923_072,
               mellum_by_hand(2304, 7168, 28, 4096, 512, 128, "s" * 28, 896, 64, 98304, False, False),
               _MELLUM_RANDOM, 79_424, mellum_by_hand(48, 40, 4, 60, 30, 10, "dsds", 12, 5, 300, True, True)),
    "laguna": (_LAGUNA_SIZES, 33_189_975_808,
               laguna_by_hand(2048, 8192, 40, 6144, 1024, 128, 48, "d" + "s" * 39, 512, 256, 512, 100352, False),
               _LAGUNA_RANDOM, 96_042, laguna_by_hand(48, 40, 4, 60, 30, 10, 60, "dsds", 12, 5, 20, 300, True)),
    "flint": (_FLINT_SIZES, 39_785_287_456,
              flint_by_hand(2048, 6144, 49, 4096, 512, 128, 32, "dd" + "s" * 47, 512, 256, 1024, 150144, False, False),
              _FLINT_RANDOM, 99_898, flint_by_hand(48, 40, 5, 60, 30, 10, 6, "dsdsd", 12, 5, 20, 300, True, True)),
    "hy_v3": (_HY_V3_SIZES, 295_033_528_320,
              hy_v3_by_hand(4096, 13312, 80, 8192, 1024, 128, "d" + "s" * 79, 1536, 192, 1, 120832, False, False),
              _HY_V3_RANDOM, 99_664, hy_v3_by_hand(48, 40, 4, 60, 30, 10, "sdss", 12, 5, 0, 300, True, True)),
}


@pytest.mark.parametrize("model_type", sorted(CASES))
def test_the_config_class_defaults_count_as_transformers_and_by_hand(model_type: str) -> None:
    sizes, transformers_total, by_hand, _, _, _ = CASES[model_type]
    assert total(model_type, sizes) == transformers_total == by_hand


@pytest.mark.parametrize("model_type", sorted(CASES))
def test_a_random_config_counts_as_transformers_and_by_hand(model_type: str) -> None:
    _, _, _, fields, transformers_total, by_hand = CASES[model_type]
    assert total(model_type, fields) == transformers_total == by_hand


def test_afmoe_reads_its_gate_sandwich_rope_on_sliding_layers_and_sigmoid_routing() -> None:
    data = mapped("afmoe", _AFMOE_RANDOM)
    block, model = data["block"], data["model"]
    assert block["attention_gate"] is True and block["qk_norm"] == "head" and block["placement"] == "sandwich"
    assert block["sliding_window"] == 16 and block["rope_theta"] == 500000.0
    assert block["moe"] == {"n_experts": 5, "top_k": 3, "d_expert": 12, "scoring": "sigmoid", "selection_bias": True,
                            "selection_bias_frozen": True, "renormalize": True, "routed_scaling": 2.0, "d_shared": 36}
    assert model["embedding_multiplier"] == 48 ** 0.5
    # layers 1 and 3 global (every second): no window, no RoPE; layers 0 and 1 dense
    assert data["layers"] == [{"indices": [0], "block": {"moe": None}},
                              {"indices": [1], "block": {"sliding_window": 0, "rope": False, "moe": None}},
                              {"indices": [3], "block": {"sliding_window": 0, "rope": False}}]


def test_afmoe_layer_types_decide_over_the_global_every_n() -> None:
    types = ["full_attention", "sliding_attention", "sliding_attention", "sliding_attention"]
    data = mapped("afmoe", {**_AFMOE_RANDOM, "layer_types": types})
    assert "sliding_window" not in data["block"] and data["block"]["rope"] is True
    assert data["layers"] == [{"indices": [0], "block": {"rope": False, "moe": None}},
                              {"indices": [1], "block": {"sliding_window": 16, "moe": None}},
                              {"indices": [2, 3], "block": {"sliding_window": 16}}]


def test_afmoe_with_every_layer_dense_has_no_mixture() -> None:
    data = mapped("afmoe", {**_AFMOE_RANDOM, "num_dense_layers": 4})
    assert "moe" not in data["block"] and all("moe" not in entry["block"] for entry in data["layers"])


@pytest.mark.parametrize("change, field", [
    ({"attention_bias": True}, "attention_bias"),  # q/k/v/o biased, the gate not: blockcli's gate follows q/k/v
    ({"num_dense_layers": None}, "num_dense_layers"),
    ({"route_scale": None}, "route_scale"),
    ({"num_experts_per_tok": 6}, "num_experts_per_tok"),  # more than the 5 experts
])
def test_afmoe_what_blockcli_cannot_run_is_refused_naming_the_field(change: dict, field: str) -> None:
    message = config_error_message(lambda: mapped("afmoe", {**_AFMOE_RANDOM, **change}), field)
    assert f"field '{field}'" in message and "\n" not in message


def test_mellum_reads_qwen3_moe_attention_a_rope_per_layer_type_and_its_mlp_kinds() -> None:
    data = mapped("mellum", _MELLUM_RANDOM)
    block = data["block"]
    assert block["qk_norm"] == "head" and block["bias"] == {"qkv": True, "out": True, "mlp": False, "norm": False}
    assert block["sliding_window"] == 16
    assert block["rope_theta"] == 5000.0 and "attention_gate" not in block and block["placement"] == "pre"
    assert block["moe"] == {"n_experts": 5, "top_k": 3, "d_expert": 12, "renormalize": False}
    assert data["layers"] == [{"indices": [0], "block": {"moe": None}},
                              {"indices": [1], "block": {"sliding_window": 0, "rope_theta": 1000000.0}},
                              {"indices": [2], "block": {"sliding_window": 0, "rope_theta": 1000000.0, "moe": None}}]


def test_mellum_defaults_rotate_every_layer_with_the_full_attention_base() -> None:
    data = mapped("mellum", {**_MELLUM_SIZES})
    assert data["block"]["rope_theta"] == 500000.0 and "sliding_window" not in data["block"]
    assert "layers" not in data and data["block"]["moe"]["renormalize"] is True


@pytest.mark.parametrize("change, field", [
    ({"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5},
                          "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}},
     "rope_parameters.full_attention.partial_rotary_factor"),  # Llama's rotation of the whole head
    ({"mlp_layer_types": ["dense", "sparse"]}, "mlp_layer_types"),
    ({"num_experts_per_tok": 6}, "num_experts_per_tok"),
    ({"head_dim": None}, "head_dim"),
])
def test_mellum_what_blockcli_cannot_run_is_refused_naming_the_field(change: dict, field: str) -> None:
    message = config_error_message(lambda: mapped("mellum", {**_MELLUM_RANDOM, **change}), field)
    assert f"field '{field}'" in message


def test_laguna_reads_a_softplus_gate_a_partial_rope_per_layer_type_and_sigmoid_routing() -> None:
    data = mapped("laguna", _LAGUNA_RANDOM)
    block = data["block"]
    assert block["attention_gate"] is True and block["attention_gate_form"] == "softplus" and block["qk_norm"] == "head"
    assert block["placement"] == "pre" and block["sliding_window"] == 16 and block["rope"] is True
    assert block["rope_theta"] == 5000.0
    assert block["moe"] == {"n_experts": 5, "top_k": 3, "d_expert": 12, "scoring": "sigmoid", "selection_bias": True,
                            "selection_bias_frozen": True, "renormalize": True, "routed_scaling": 2.0, "d_shared": 20}
    assert data["layers"] == [{"indices": [0], "block": {"moe": None}},
                              {"indices": [1], "block": {"sliding_window": 0, "rope_theta": 1000000.0, "rope": 0.4}},
                              {"indices": [2], "block": {"sliding_window": 0, "rope_theta": 1000000.0, "rope": 0.4,
                                                         "moe": None}}]


@pytest.mark.parametrize("gating, form", [(True, "softplus_head"), ("per-head", "softplus_head"),
                                          ("per-element", "softplus"), (False, "softplus")])
def test_laguna_gating_is_one_gate_per_head_unless_per_element(gating: object, form: str) -> None:
    assert mapped("laguna", {**_LAGUNA_RANDOM, "gating": gating})["block"]["attention_gate_form"] == form


@pytest.mark.parametrize("change, field", [
    ({"attention_bias": True}, "attention_bias"),
    ({"moe_router_logit_softcapping": 30.0}, "moe_router_logit_softcapping"),
    ({"moe_apply_router_weight_on_input": True}, "moe_apply_router_weight_on_input"),
    ({"num_attention_heads_per_layer": [6, 3, 6, 6]}, "num_attention_heads_per_layer"),
    ({"gating": "per-token"}, "gating"),
    ({"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.3},
                          "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}},
     "rope_parameters.full_attention.partial_rotary_factor"),  # 3 of 10 dims: an odd rotation
])
def test_laguna_what_blockcli_cannot_run_is_refused_naming_the_field(change: dict, field: str) -> None:
    message = config_error_message(lambda: mapped("laguna", {**_LAGUNA_RANDOM, **change}), field)
    assert f"field '{field}'" in message


@pytest.mark.parametrize("form", ["softplus_head", "softplus", "sigmoid"])
def test_the_attention_gates_gradients_equal_central_differences(form: str) -> None:
    """Each gate form's backward (a gate per head summed over its d_h; softplus' slope σ): every attention parameter's
    gradient against central differences of the loss in float64; the per-head gate's W_gate is (d, h)."""
    from blockcli.block import Model

    cfg = parse_config({"block": {"d_model": 8, "n_heads": 2, "n_kv_heads": 1, "head_dim": 4, "d_ff": 6,
                                  "norm": "rmsnorm", "gated": True, "attention_gate": True, "attention_gate_form": form,
                                  "qk_norm": "head", "rope": 0.5, "bias": {"qkv": True, "out": False, "mlp": False,
                                                                           "norm": False}},
                        "model": {"n_layers": 1, "vocab_size": 11, "max_positions": 8, "positions": "rope"},
                        "run": {"dtype": "float64"}})
    model = Model.from_config(cfg, seed=3)
    assert model.params["blocks.0.w_attn_gate"].shape == ((8, 2) if form == "softplus_head" else (8, 8))
    ids = np.array([[1, 4, 2, 9, 3]])
    _, grads = model.loss_and_grads(ids)
    # ln1 reaches the loss through Q, K, V and the gate: its gradient holds the gate's share of dx too
    for key in ("blocks.0.w_attn_gate", "blocks.0.b_attn_gate", "blocks.0.w_o", "blocks.0.ln1_gamma"):
        param = model.params[key]
        flat, numeric = param.reshape(-1), np.empty(param.size)
        for i in range(param.size):
            keep = flat[i]
            flat[i] = keep + 1e-6
            up = model.loss(ids)
            flat[i] = keep - 1e-6
            down = model.loss(ids)
            flat[i] = keep
            numeric[i] = (up - down) / 2e-6
        assert np.max(np.abs(grads[key].reshape(-1) - numeric)) <= 1e-7 * max(1.0, np.max(np.abs(numeric))), key


def test_a_gate_per_head_counts_d_times_h() -> None:
    """count's attn.gate row for one gate a head: d·h weights (and h biases with bias.qkv), by its own formula."""
    from blockcli.count import count_parameters

    def gate_params(form: str) -> int:
        block = {"d_model": 8, "n_heads": 2, "n_kv_heads": 1, "head_dim": 4, "d_ff": 6, "norm": "rmsnorm",
                 "attention_gate": True, "attention_gate_form": form, "bias": {"qkv": True, "out": False,
                                                                              "mlp": False, "norm": False}}
        return count_parameters(parse_config({"block": block})).per_block

    assert gate_params("softplus") - gate_params("softplus_head") == (8 * 8 + 8) - (8 * 2 + 2)


def test_a_gate_form_without_the_gate_is_refused() -> None:
    message = config_error_message(lambda: parse_config({"block": {"attention_gate_form": "softplus"}}), "form")
    assert message.startswith("block.attention_gate_form:")


def test_flint_reads_sinks_rope_on_sliding_layers_and_sigmoid_routing_with_a_shared_expert() -> None:
    data = mapped("flint", _FLINT_RANDOM)
    block = data["block"]
    assert block["attention_sinks"] is True and block["qk_norm"] == "head" and "sliding_window" not in block
    assert block["moe"] == {"n_experts": 5, "top_k": 3, "d_expert": 12, "scoring": "sigmoid", "renormalize": False,
                            "d_shared": 20}
    # layers 0, 1 and 4 global (no window, no RoPE), 2 and 3 sliding; 0, 2 and 4 dense
    assert data["layers"] == [{"indices": [0, 4], "block": {"rope": False, "moe": None}},
                              {"indices": [1], "block": {"rope": False}},
                              {"indices": [2], "block": {"sliding_window": 16, "moe": None}},
                              {"indices": [3], "block": {"sliding_window": 16}}]


def test_flint_without_experts_is_dense() -> None:
    data = mapped("flint", {**_FLINT_RANDOM, "num_experts": 0})
    assert "moe" not in data["block"] and all("moe" not in entry["block"] for entry in data["layers"])


@pytest.mark.parametrize("change, field", [
    ({"num_experts_per_tok": 6}, "num_experts_per_tok"),
    ({"decoder_sparse_step": None}, "decoder_sparse_step"),
    ({"layer_types": ["full_attention"] * 4}, "layer_types"),
])
def test_flint_what_blockcli_cannot_run_is_refused_naming_the_field(change: dict, field: str) -> None:
    message = config_error_message(lambda: mapped("flint", {**_FLINT_RANDOM, **change}), field)
    assert f"field '{field}'" in message


def test_hy_v3_reads_its_qk_norms_base_and_mixture_with_biased_shared_experts() -> None:
    data = mapped("hy_v3", _HY_V3_RANDOM)
    block = data["block"]
    assert block["qk_norm"] == "head" and block["rope_theta"] == 11_158_840.0 and "sliding_window" not in block
    assert block["bias"] == {"qkv": False, "out": False, "mlp": True, "norm": False}
    assert block["moe"] == {"n_experts": 5, "top_k": 3, "d_expert": 12, "scoring": "sigmoid", "selection_bias": True,
                            "renormalize": True, "routed_scaling": 1.5, "d_shared": 40, "routed_bias": False}
    assert data["layers"] == [{"indices": [1], "block": {"moe": None}}]
    defaults = mapped("hy_v3", _HY_V3_SIZES)
    assert defaults["block"]["moe"]["d_shared"] == 1536 and defaults["layers"] == [{"indices": [0], "block": {"moe": None}}]


@pytest.mark.parametrize("change, field", [
    ({"num_shared_experts": None}, "num_shared_experts"),
    ({"mlp_layer_types": ["dense", "sparse"]}, "mlp_layer_types"),
    ({"num_experts_per_tok": 6}, "num_experts_per_tok"),
])
def test_hy_v3_what_blockcli_cannot_run_is_refused_naming_the_field(change: dict, field: str) -> None:
    message = config_error_message(lambda: mapped("hy_v3", {**_HY_V3_RANDOM, **change}), field)
    assert f"field '{field}'" in message


FIXTURES = ROOT / "tests" / "fixtures" / "hf"


@pytest.mark.parametrize("name, switch_off, model_switch_off", [
    ("afmoe", {"attention_gate": False}, {}),  # the heads' output times σ(x·W_gate)
    ("afmoe", {"placement": "pre"}, {}),  # the norms after each branch
    ("afmoe", {"qk_norm": "none"}, {}),
    ("afmoe", {"rope": False}, {"positions": "none"}),  # on the sliding layers 0 and 1 (layer 2 has none anyway)
    ("afmoe", {}, {"embedding_multiplier": 1.0}),  # muP's √d
    ("mellum", {"rope_theta": 50.0}, {}),  # the sliding layers 0 and 2 rotate with their own base, 10000
    ("mellum", {"qk_norm": "none"}, {}),
    ("laguna", {"attention_gate": False, "attention_gate_form": "sigmoid"}, {}),  # its softplus gate, one a head
    ("laguna", {"rope_theta": 50.0}, {}),  # the sliding layers 0 and 2 rotate with their own base, 10000
    ("laguna", {"rope": 0.5}, {}),  # the sliding layers rotate the whole head, the global one half of it
    ("flint", {"attention_sinks": False}, {}),
    ("flint", {"rope": False}, {"positions": "none"}),  # on the sliding layer 0
    ("hy_v3", {"qk_norm": "none"}, {}),
])
def test_the_modelled_feature_matters_for_the_fixture(name: str, switch_off: dict, model_switch_off: dict) -> None:
    """Without the feature (switched off on the base block, which every layer's override inherits) the logits are far
    from transformers': the fixture really exercises it. The fixture's own pass equals them (tests/test_checkpoint.py)."""
    folder = FIXTURES / name
    with np.load(folder / "expected.npz") as data:
        ids, want = data["input_ids"], data["logits_float64"]
    mapping = hf_to_mapping(json.loads((folder / "config.json").read_text()), "config.json")
    mapping["block"].update(switch_off)
    mapping["model"].update(model_switch_off)
    changed = parse_config(mapping)
    params = Model.from_config(parse_config(hf_to_mapping(json.loads((folder / "config.json").read_text()),
                                                          "config.json")), weights=folder, dtype="float64").params
    kept = {k: v for k, v in params.items() if k in model_parameter_shapes(changed)}
    got = Model.from_config(changed, weights=kept, dtype="float64")(ids)
    assert np.max(np.abs(got - want)) / np.max(np.abs(want)) > 1e-3


@pytest.mark.torch
@pytest.mark.parametrize("model_type", sorted(CASES))
def test_the_totals_and_sizes_here_are_transformers_own(model_type: str) -> None:
    sizes, defaults_total, _, fields, random_total, _ = CASES[model_type]
    assert_totals_are_transformers_own(model_type, sizes, (), defaults_total, fields, random_total)
