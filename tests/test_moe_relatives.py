"""The mixtures of experts that are a diff of a family blockcli already reads (blockcli/families/moe_relatives.py):
HunYuan MoE, ERNIE 4.5 MoE (and ERNIE 4.5 dense's RoPE base), Cohere 2 MoE, PhiMoE, Solar Open, EXAONE MoE. Their parameter counts against transformers 5.24's own totals (the causal LM built on
the meta device from the config, sum of numel over parameters(), tied weights once) and a hand count, for the config
class's defaults (its sizes written out, as blockcli asks for them) and for a random config with other switches set;
the torch-marked test at the end recomputes every total and reads the sizes from the config class itself. Their
forward, decode step and gradients are held to transformers by tests/test_checkpoint.py and tests/test_gradients.py
on the fixtures tests/fixtures/hf/generate.py writes."""

from __future__ import annotations

import pytest

from blockcli.config import parse_config
from blockcli.count import count_parameters
from conftest import config_error_message
from test_dense_families import _sizes, assert_totals_are_transformers_own, mapped, total


def hunyuan_moe_by_hand(d: int, f: int, layers: int, q: int, kv: int, d_h: int, experts: int, vocab: int,
                        tied: bool, bias: bool) -> int:
    """Q, K, V, O (biases with attention_bias), query_layernorm and key_layernorm (d_h each), two RMSNorms, the
    router (E·d), E SwiGLU experts and the shared SwiGLU MLP, all intermediate_size wide; embedding, final norm,
    an untied head."""
    attention = 2 * d * q + 2 * d * kv + (q + 2 * kv + d if bias else 0) + 2 * d_h
    return layers * (attention + 2 * d + experts * d + (experts + 1) * 3 * d * f) + vocab * d * (1 if tied else 2) + d


_HUNYUAN_RANDOM = dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=2, head_dim=12, intermediate_size=40,
                       num_hidden_layers=3, vocab_size=300, max_position_embeddings=96, tie_word_embeddings=True,
                       attention_bias=True, num_experts=5, moe_topk=2, pad_token_id=0, rope_parameters={
                           "rope_type": "dynamic", "rope_theta": 10000.0, "alpha": 1000.0, "factor": 1.0})

def ernie_moe_by_hand(d: int, f: int, q: int, kv: int, d_e: int, experts: int, shared: int, kinds: list[str],
                      vocab: int, tied: bool) -> int:
    """Q, K, V, O without biases, two RMSNorms, and a dense SwiGLU MLP (intermediate_size) or the router (E·d), the
    selection bias (E, a parameter), E SwiGLU experts and the shared experts' one MLP (shared·d_e wide); the
    embedding, the final norm, an untied head."""
    attention = 2 * d * q + 2 * d * kv + 2 * d
    mixture = experts * d + experts + experts * 3 * d * d_e + 3 * d * shared * d_e
    return sum(attention + (3 * d * f if kind == "dense" else mixture) for kind in kinds) \
        + vocab * d * (1 if tied else 2) + d


_ERNIE_RANDOM = dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=2, intermediate_size=80,
                     num_hidden_layers=4, vocab_size=300, max_position_embeddings=96, tie_word_embeddings=False,
                     moe_intermediate_size=24, moe_k=3, moe_num_experts=7, moe_num_shared_experts=1,
                     moe_layer_start_index=0, moe_layer_end_index=2, moe_layer_interval=1)

def cohere2_moe_by_hand(d: int, f: int, q: int, kv: int, bias: bool, experts: int, shared: int, kinds: list[str],
                        d_dense: int, vocab: int, tied: bool) -> int:
    """Q, K, V, O (biases with attention_bias), the one norm a layer (its weight: no shift, or an RMSNorm), and a
    dense SwiGLU MLP (d_dense) or the router (E·d), E SwiGLU experts of intermediate_size and the shared experts'
    one MLP (shared·f wide); the embedding, the final norm, an untied head."""
    attention = 2 * d * q + 2 * d * kv + (q + 2 * kv + d if bias else 0) + d
    mixture = experts * d + experts * 3 * d * f + 3 * d * shared * f
    return sum(attention + (3 * d * d_dense if kind == "dense" else mixture) for kind in kinds) \
        + vocab * d * (1 if tied else 2) + d


_COHERE2_MOE_RANDOM = dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=2, head_dim=12,
                           intermediate_size=40, num_hidden_layers=5, vocab_size=300, max_position_embeddings=96,
                           tie_word_embeddings=False, num_experts=5, num_experts_per_tok=2, num_shared_experts=2,
                           shared_expert_combination_strategy="sum", expert_selection_fn="sigmoid",
                           mlp_layer_types=["dense", "dense", "sparse", "sparse", "sparse"],
                           prefix_dense_intermediate_size=56, attention_bias=True, rms_norm_eps=1e-6)

def phimoe_by_hand(d: int, f: int, layers: int, q: int, kv: int, bias: bool, experts: int, vocab: int, tied: bool,
                   head_bias: bool) -> int:
    """Q, K, V, O (biases with attention_bias), two LayerNorms (weight and bias), the router (E·d) and E SwiGLU
    experts; the embedding, the final LayerNorm, an untied head and its bias."""
    attention = 2 * d * q + 2 * d * kv + (q + 2 * kv + d if bias else 0)
    return layers * (attention + 4 * d + experts * d + experts * 3 * d * f) + vocab * d * (1 if tied else 2) + 2 * d \
        + (vocab if head_bias else 0)


_PHIMOE_RANDOM = dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=2, intermediate_size=40,
                      num_hidden_layers=3, vocab_size=300, max_position_embeddings=96, num_local_experts=5,
                      attention_bias=True, lm_head_bias=True, tie_word_embeddings=True, router_jitter_noise=0.3)

def solar_open_by_hand(d: int, layers: int, q: int, kv: int, bias: bool, d_e: int, experts: int, shared: int,
                       vocab: int, tied: bool) -> int:
    """Q, K, V, O (q/k/v biases with attention_bias; o_proj never), two RMSNorms, the router (E·d), E SwiGLU experts
    and the shared experts' one MLP (shared·d_e wide) on every layer (the selection bias a buffer); the embedding,
    the final norm, an untied head."""
    attention = 2 * d * q + 2 * d * kv + (q + 2 * kv if bias else 0)
    mixture = experts * d + experts * 3 * d * d_e + 3 * d * shared * d_e
    return layers * (attention + 2 * d + mixture) + vocab * d * (1 if tied else 2) + d


_SOLAR_RANDOM = dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=2, head_dim=12, num_hidden_layers=3,
                     vocab_size=300, max_position_embeddings=96, moe_intermediate_size=24, n_routed_experts=8,
                     num_experts_per_tok=3, n_shared_experts=2, n_group=2, topk_group=1, routed_scaling_factor=2.5,
                     norm_topk_prob=False, attention_bias=True, tie_word_embeddings=True)

def exaone_moe_by_hand(d: int, f: int, q: int, kv: int, d_h: int, d_e: int, experts: int, shared: int,
                       kinds: list[str], vocab: int, tied: bool) -> int:
    """Q, K, V, O without biases, q_norm and k_norm (d_h each), two RMSNorms, and a dense SwiGLU MLP or the router
    (E·d), E SwiGLU experts and the shared experts' one MLP (the selection bias a buffer); embedding, final norm,
    an untied head."""
    attention = 2 * d * q + 2 * d * kv + 2 * d_h + 2 * d
    mixture = experts * d + experts * 3 * d * d_e + 3 * d * shared * d_e
    return sum(attention + (3 * d * f if kind == "dense" else mixture) for kind in kinds) \
        + vocab * d * (1 if tied else 2) + d


_EXAONE_MOE_RANDOM = dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=2, head_dim=12,
                          intermediate_size=80, num_hidden_layers=4, vocab_size=300, max_position_embeddings=96,
                          moe_intermediate_size=24, num_experts=8, num_experts_per_tok=3, num_shared_experts=2,
                          n_group=2, topk_group=1, first_k_dense_replace=2, tie_word_embeddings=True,
                          sliding_window=16, sliding_window_pattern=2)

# model_type → (the config class's sizes (with what it leaves null that transformers needs), transformers' total for
#               them, the total by hand, a random config, transformers' total for it, its total by hand)
CASES: dict[str, tuple[dict, int, int, dict, int, int]] = {
    # HunYuanMoEV1Config's sizes with the head_dim transformers needs (its default null fails): one expert, top 1,
    # every head its own K/V, untied
    "hunyuan_v1_moe": ({**_sizes(4096, 11008, 32, 32, 290943, 2048), "head_dim": 128}, 13_188_337_664,
                       hunyuan_moe_by_hand(4096, 11008, 32, 4096, 4096, 128, 1, 290943, False, False),
                       _HUNYUAN_RANDOM, 147_360, hunyuan_moe_by_hand(48, 40, 3, 72, 24, 12, 5, 300, True, True)),
    # Ernie4_5_MoeConfig() (ERNIE-4.5-21B-A3B): layer 0 dense, layers 1-27 64 experts (top 6) and 2 shared, GQA 20/4
    # of 128, tied; the random config: experts on layers 0-2 (the end index), layer 3 dense, one shared, untied
    "ernie4_5_moe": (_sizes(2560, 12288, 28, 20, 103424, 131072), 21_825_437_888,
                     ernie_moe_by_hand(2560, 12288, 2560, 512, 1536, 64, 2, ["dense"] + ["moe"] * 27, 103424, True),
                     _ERNIE_RANDOM, 149_301,
                     ernie_moe_by_hand(48, 80, 48, 16, 24, 7, 1, ["moe"] * 3 + ["dense"], 300, False)),
    # Cohere2MoeConfig(): 40 layers of 8 experts (top 2) of 22,528, 64 heads of 128 (each its own K/V), tied; the random
    # config: layers 0-1 dense (56 wide), 5 experts of 40 and 2 shared, attention biases, RMSNorm, untied
    "cohere2_moe": (_sizes(8192, 22528, 40, 64, 256000, 8192), 190_004_928_512,
                    cohere2_moe_by_hand(8192, 22528, 8192, 8192, False, 8, 0, ["sparse"] * 40, 0, 256000, True),
                    _COHERE2_MOE_RANDOM, 213_816,
                    cohere2_moe_by_hand(48, 40, 72, 24, True, 5, 2, _COHERE2_MOE_RANDOM["mlp_layer_types"], 56, 300,
                                        False)),
    # PhimoeConfig() (Phi-3.5-MoE): 16 experts of 6,400, top 2, GQA 32/8, untied; the random config: q/k/v/o biases,
    # the LM head's bias, tied, a wide margin
    "phimoe": (_sizes(4096, 6400, 32, 32, 32064, 131072), 41_872_793_600,
               phimoe_by_hand(4096, 6400, 32, 4096, 1024, False, 16, 32064, False, False),
               _PHIMOE_RANDOM, 121_308, phimoe_by_hand(48, 40, 3, 48, 16, True, 5, 300, True, True)),
    # SolarOpenConfig() (Solar Open 100B): 48 layers of 128 experts of 1,280 (top 8) and one shared, GQA 64/8 of 128,
    # untied (it has no intermediate_size); the random config: groups, scaling, no renormalisation, biases, tied
    "solar_open": ({"hidden_size": 4096, "num_hidden_layers": 48, "num_attention_heads": 64, "vocab_size": 196608,
                    "max_position_embeddings": 131072}, 102_651_793_408,
                   solar_open_by_hand(4096, 48, 8192, 1024, False, 1280, 128, 1, 196608, False),
                   _SOLAR_RANDOM, 147_576, solar_open_by_hand(48, 3, 72, 24, True, 24, 8, 2, 300, True)),
    # ExaoneMoeConfig(): layer 0 dense, 31 layers of 64 experts of 1,024 (top 8) and one shared, 32 heads of 128 each
    # its own K/V, untied; the random config: layers 0-1 dense, groups, 2 shared, tied, a pattern of 2
    "exaone_moe": (_sizes(4096, 16384, 32, 32, 102400, 2048), 28_550_639_616,
                   exaone_moe_by_hand(4096, 16384, 4096, 4096, 128, 1024, 64, 1, ["dense"] + ["sparse"] * 31, 102400,
                                      False),
                   _EXAONE_MOE_RANDOM, 144_720,
                   exaone_moe_by_hand(48, 80, 72, 24, 12, 24, 8, 2, ["dense"] * 2 + ["sparse"] * 2, 300, True)),
}

# fields a config class leaves null that transformers cannot build the model without (set in CASES' sizes)
NEEDED = {"hunyuan_v1_moe": ("head_dim",)}


@pytest.mark.parametrize("model_type", sorted(CASES))
def test_the_config_class_defaults_count_as_transformers_and_by_hand(model_type: str) -> None:
    sizes, transformers_total, by_hand, _, _, _ = CASES[model_type]
    assert total(model_type, sizes) == transformers_total == by_hand


@pytest.mark.parametrize("model_type", sorted(CASES))
def test_a_random_config_counts_as_transformers_and_by_hand(model_type: str) -> None:
    _, _, _, fields, transformers_total, by_hand = CASES[model_type]
    assert total(model_type, fields) == transformers_total == by_hand


def test_hunyuan_moe_is_hunyuan_dense_with_a_shared_mlp_beside_renormalised_experts() -> None:
    block = mapped("hunyuan_v1_moe", _HUNYUAN_RANDOM)["block"]
    assert block["moe"] == {"n_experts": 5, "top_k": 2, "d_expert": 40, "renormalize": True, "d_shared": 40}
    assert (block["qk_norm"], block["qk_norm_after_rope"]) == ("head", True)
    assert block["rope_theta"] == pytest.approx(10000.0 * 1000.0 ** (12 / 10), rel=1e-15)


@pytest.mark.parametrize("key", ["num_experts", "moe_topk"])
def test_hunyuan_moe_per_layer_expert_arrays_are_refused_naming_the_field(key: str) -> None:
    data = {**_HUNYUAN_RANDOM, key: [2, 2, 2]}
    assert f"field '{key}'" in config_error_message(lambda: mapped("hunyuan_v1_moe", data))


@pytest.mark.parametrize("fields, transformers_total, kinds", [
    # every other layer a mixture (moe_layer_interval 2: layers 1 and 3), 6 experts top 2 and no shared expert
    ({"moe_intermediate_size": 24, "moe_k": 2, "moe_num_experts": 6, "moe_num_shared_experts": 0,
      "moe_layer_interval": 2}, 104_508, ["dense", "moe", "dense", "moe"]),
])
def test_ernie_moe_layers_follow_start_end_and_interval(fields: dict, transformers_total: int, kinds: list) -> None:
    data = {**_ERNIE_RANDOM, "tie_word_embeddings": True, "moe_layer_start_index": 1, "moe_layer_end_index": -1,
            **fields}
    assert total("ernie4_5_moe", data) == transformers_total == ernie_moe_by_hand(48, 80, 48, 16, 24, 6, 0, kinds,
                                                                                300, True)
    assert mapped("ernie4_5_moe", data)["layers"] == [{"indices": [0, 2], "block": {"moe": None}}]


def test_ernie_moe_with_no_expert_layer_reads_use_bias_everywhere_and_the_lm_head_bias() -> None:
    """Every layer dense (moe_layer_start_index past the last): use_bias on q, k, v, o, the MLP and the LM head;
    81,900 is transformers' meta-device total (head_dim 12, given, read as LlamaAttention reads it)."""
    data = dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=3, head_dim=12, intermediate_size=80,
                num_hidden_layers=3, vocab_size=300, max_position_embeddings=96, use_bias=True, moe_layer_start_index=3)
    mapping = mapped("ernie4_5_moe", data)
    assert "moe" not in mapping["block"] and mapping["model"]["lm_head_bias"] and mapping["block"]["bias"] == {
        "qkv": True, "out": True, "mlp": True, "norm": False}
    d, q, kv, f = 48, 72, 36, 80
    layer = 2 * d * q + 2 * d * kv + (q + 2 * kv + d) + 2 * d + 3 * d * f + 2 * f + d
    assert total("ernie4_5_moe", data) == 81_900 == 3 * layer + 300 * d + 300 + d


def test_ernie_moe_routes_softmax_scores_with_a_counted_selection_bias_and_interleaved_rope() -> None:
    mapping = mapped("ernie4_5_moe", _sizes(2560, 12288, 28, 20, 103424, 131072))
    block = mapping["block"]
    assert block["moe"] == {"n_experts": 64, "top_k": 6, "d_expert": 1536, "renormalize": True, "selection_bias": True,
                            "selection_bias_frozen": True, "d_shared": 3072}
    assert (block["rope_layout"], block["rope_theta"], block["n_kv_heads"], block["head_dim"]) == (
        "interleaved", 500000.0, 4, 128)
    rows = {c.name: c for c in count_parameters(parse_config(mapping)).components}
    assert (rows["mlp.router_bias"].kind, rows["mlp.router_bias"].count) == ("tensor", 64)


def test_ernie_dense_and_moe_rotate_with_base_500000_by_default() -> None:
    """Ernie4_5Config.default_theta and Ernie4_5_MoeConfig.default_theta: 500,000 when the config gives no base."""
    for model_type in ("ernie4_5", "ernie4_5_moe"):
        assert mapped(model_type, _sizes(64, 96, 2, 4, 100, 64))["block"]["rope_theta"] == 500000.0


def test_ernie_moe_fixture_chooses_by_its_selection_bias() -> None:
    """The fixture's random (1, E) selection bias changes which experts its tokens get: with it zeroed the logits
    are far from transformers' (tests/test_checkpoint.py holds them equal with it)."""
    from test_checkpoint import FIXTURES, expected, relative

    from blockcli import Model, load_config

    folder, want = FIXTURES / "ernie4_5_moe", expected("ernie4_5_moe")
    model = Model.from_config(load_config(folder), weights=folder, dtype="float64")
    assert relative(model(want["input_ids"]), want["logits_float64"]) < 1e-9
    model.params["blocks.1.router_bias"][...] = 0.0
    assert relative(model(want["input_ids"]), want["logits_float64"]) > 1e-3


@pytest.mark.parametrize("change, field", [
    ({"use_bias": True}, "use_bias"),  # the routed experts have no biases
    ({"moe_norm_min": 0.5}, "moe_norm_min"),  # above k/E = 3/7 it would clamp the sum
    ({"moe_k": 8}, "moe_k"),
])
def test_ernie_moe_what_blockcli_cannot_run_is_refused_naming_the_field(change: dict, field: str) -> None:
    assert f"field '{field}'" in config_error_message(lambda: mapped("ernie4_5_moe", {**_ERNIE_RANDOM, **change}))


def test_cohere2_moe_softmaxes_the_top_k_logits_and_rotates_only_windowed_or_prefix_dense_layers() -> None:
    """Cohere2MoeConfig's defaults: three layers of four windowed (4,096) with RoPE, the fourth global without; the
    softmax of the top 2 logits; a shift-free LayerNorm. A prefix dense layer rotates even when global
    (prefix_dense_sliding_window_pattern 1: force_rope); its MLP is prefix_dense_intermediate_size wide."""
    mapping = mapped("cohere2_moe", _sizes(8192, 22528, 8, 64, 256000, 8192))
    block = mapping["block"]
    assert block["moe"] == {"n_experts": 8, "top_k": 2, "d_expert": 22528, "order": "topk_softmax"}
    assert (block["norm"], block["placement"], block["rope_layout"], block["sliding_window"]) == (
        "layernorm", "parallel_shared", "interleaved", 4096)
    assert mapping["layers"] == [{"indices": [3, 7], "block": {"sliding_window": 0, "rope": False}}]
    prefixed = mapped("cohere2_moe", {**_sizes(64, 96, 4, 4, 100, 64), "first_k_dense_replace": 2,
                                      "prefix_dense_intermediate_size": 48, "sliding_window_pattern": 2})
    # layers 0-1 dense and global (prefix pattern 1) but rotated; then the pattern of 2 over layers 2-3: 2 windowed,
    # 3 global without positions
    assert "sliding_window" not in prefixed["block"] and prefixed["block"]["rope"] is True
    assert prefixed["layers"] == [{"indices": [0, 1], "block": {"moe": None, "d_ff": 48}},
                                  {"indices": [2], "block": {"sliding_window": 4096}},
                                  {"indices": [3], "block": {"rope": False}}]


@pytest.mark.parametrize("change, field", [
    ({"shared_expert_combination_strategy": "average"}, "shared_expert_combination_strategy"),  # halves the sum
    ({"expert_selection_fn": "relu"}, "expert_selection_fn"),
    ({"mlp_layer_types": ["dense", "moe", "sparse", "sparse", "sparse"]}, "mlp_layer_types"),
])
def test_cohere2_moe_what_blockcli_cannot_run_is_refused_naming_the_field(change: dict, field: str) -> None:
    data = {**_COHERE2_MOE_RANDOM, **change}
    assert f"field '{field}'" in config_error_message(lambda: mapped("cohere2_moe", data))


def test_phimoe_routes_by_sparsemixer_with_its_jitter_as_the_margin() -> None:
    block = mapped("phimoe", _PHIMOE_RANDOM)["block"]
    assert block["moe"] == {"n_experts": 5, "top_k": 2, "d_expert": 40, "order": "sparsemixer", "sparsemixer_eps": 0.3}
    assert block["norm"] == "layernorm" and block["bias"] == {"qkv": True, "out": True, "mlp": False, "norm": True}
    assert mapped("phimoe", _sizes(64, 96, 2, 8, 100, 64))["block"]["rope_theta"] == 1e6  # PhimoeConfig.default_theta
    message = config_error_message(lambda: mapped("phimoe", {**_PHIMOE_RANDOM, "num_experts_per_tok": 3}))
    assert "field 'num_experts_per_tok'" in message and "always chooses 2" in message


def test_phimoe_fixture_routes_through_its_margin() -> None:
    """The fixture's margin (2·0.3) puts several experts into some stages' softmax: with a margin of 0 (each stage
    weighs its expert 1) the logits are far from transformers'."""
    import dataclasses

    from test_checkpoint import FIXTURES, expected, relative

    from blockcli import Model, load_config

    folder, want = FIXTURES / "phimoe", expected("phimoe")
    config = load_config(folder)
    moe = dataclasses.replace(config.block.moe, sparsemixer_eps=0.0)
    narrow = dataclasses.replace(config, block=dataclasses.replace(config.block, moe=moe))
    params = Model.from_config(config, weights=folder, dtype="float64").params
    assert relative(Model.from_config(narrow, weights=params, dtype="float64")(want["input_ids"]),
                    want["logits_float64"]) > 1e-3


def test_solar_open_is_llama_attention_with_glm4_moe_routing_on_every_layer() -> None:
    mapping = mapped("solar_open", {**_SOLAR_RANDOM, "intermediate_size": 999})
    block = mapping["block"]
    assert (block["rope"], block["rope_theta"], block["bias"]) == (True, 1e6, {"qkv": True, "out": False,
                                                                               "mlp": False, "norm": False})
    assert block["moe"]["scoring"] == "sigmoid" and block["moe"]["n_groups"] == 2 and "layers" not in mapping
    assert total("solar_open", {**_SOLAR_RANDOM, "intermediate_size": 999}) == 147_576  # not read, with a note
    partial = {**_SOLAR_RANDOM, "rope_parameters": {"rope_type": "default", "rope_theta": 1e6,
                                                    "partial_rotary_factor": 0.5}}
    assert "partial_rotary_factor" in config_error_message(lambda: mapped("solar_open", partial))


def test_exaone_moe_windows_and_rotates_all_but_every_patternth_layer() -> None:
    mapping = mapped("exaone_moe", _EXAONE_MOE_RANDOM)
    assert (mapping["block"]["qk_norm"], mapping["block"]["placement"], mapping["block"]["sliding_window"]) == (
        "head", "pre", 16)
    assert mapping["layers"] == [{"indices": [0], "block": {"moe": None}},
                                 {"indices": [1], "block": {"sliding_window": 0, "rope": False, "moe": None}},
                                 {"indices": [3], "block": {"sliding_window": 0, "rope": False}}]
    for change, field in (({"sliding_window": None}, "sliding_window"), ({"sliding_window_pattern": "LG"},
                                                                          "sliding_window_pattern")):
        message = config_error_message(lambda: mapped("exaone_moe", {**_EXAONE_MOE_RANDOM, **change}))
        assert f"field '{field}'" in message


# ----------------------------------------------------------------------------- against transformers itself


@pytest.mark.torch
@pytest.mark.parametrize("model_type", sorted(CASES))
def test_the_totals_and_sizes_here_are_transformers_own(model_type: str) -> None:
    """The config class's sizes are the ones written above, and transformers on the meta device counts the
    totals written above, for them and for the random config; blockcli reads the whole of the config class's
    to_dict() (every default spelled out) to the same total."""
    sizes, defaults_total, _, fields, random_total, _ = CASES[model_type]
    assert_totals_are_transformers_own(model_type, sizes, NEEDED.get(model_type, ()), defaults_total, fields,
                                       random_total)


@pytest.mark.torch
@pytest.mark.parametrize("fields, want", [
    ({**_ERNIE_RANDOM, "tie_word_embeddings": True, "moe_layer_start_index": 1, "moe_layer_end_index": -1,
      "moe_intermediate_size": 24, "moe_k": 2, "moe_num_experts": 6, "moe_num_shared_experts": 0,
      "moe_layer_interval": 2}, 104_508),
    (dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=3, head_dim=12, intermediate_size=80,
          num_hidden_layers=3, vocab_size=300, max_position_embeddings=96, use_bias=True, moe_layer_start_index=3),
     81_900),
])
def test_the_other_ernie_moe_totals_here_are_transformers_own(fields: dict, want: int) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model("ernie4_5_moe", **fields))
    assert sum(p.numel() for p in model.parameters()) == want == total("ernie4_5_moe", fields)
