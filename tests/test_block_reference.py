"""Compare blockcli's DecoderBlock / Model against the slow reference in reference.py.

Every expected value comes from tests/reference.py (written from the contract, no
blockcli code).  Weights are random arrays generated here and handed to both sides,
or read back from blockcli's ``params`` when it initialises them itself.
"""

import copy
import os
import sys
import zlib

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference as ref  # noqa: E402

from blockcli import DecoderBlock, Model  # noqa: E402
from blockcli.config import parse_config  # noqa: E402

TOL64 = 1e-12
TOL32_REL = 1e-4  # float32 vs float64: max|diff| <= TOL32_REL * max(1, max|ref|)


# ---------------------------------------------------------------------------- helpers

BASE_BLOCK = {
    "d_model": 16,
    "n_heads": 4,
    "d_ff": 32,
    "norm": "layernorm",
    "activation": "gelu_tanh",
    "bias": True,
    "placement": "pre",
    "rope": False,
    "dropout": 0.0,
}


def block_dict(**over):
    b = copy.deepcopy(BASE_BLOCK)
    b.update(over)
    return b


def make_cfg(block, model=None, batch=2, seq_len=5, dtype="float64", seed=0):
    mapping = {
        "block": copy.deepcopy(block),
        "run": {"batch": batch, "seq_len": seq_len, "dtype": dtype, "seed": seed},
    }
    if model is not None:
        mapping["model"] = copy.deepcopy(model)
    return parse_config(mapping)


def random_weights(shapes, seed):
    """normal*0.2 for everything; norm gains around 1 so the norms do something."""
    rng = np.random.default_rng(seed)
    w = {}
    for name in sorted(shapes):
        shape = shapes[name]
        if name.endswith("_gamma"):
            w[name] = 1.0 + 0.2 * rng.standard_normal(shape)
        else:
            w[name] = 0.2 * rng.standard_normal(shape)
    return w


def random_x(B, T, d, seed):
    return np.random.default_rng(1000 + seed).standard_normal((B, T, d))


def maxdiff(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.max(np.abs(a - b))) if a.size else 0.0


def np_params(params):
    return {k: np.asarray(v, dtype=np.float64) for k, v in params.items()}


def check_param_names(params, expected_shapes):
    got = {k: tuple(np.shape(v)) for k, v in params.items()}
    exp = {k: tuple(v) for k, v in expected_shapes.items()}
    missing = sorted(set(exp) - set(got))
    extra = sorted(set(got) - set(exp))
    assert not missing and not extra, "missing=%s extra=%s" % (missing, extra)
    bad = {k: (got[k], exp[k]) for k in exp if got[k] != exp[k]}
    assert not bad, "wrong shapes (got, expected): %s" % bad


# ------------------------------------------------------------------- block configs

BLOCK_CASES = {
    "base_gelu_tanh_pre_layernorm": block_dict(),
    "single_head": block_dict(d_model=8, n_heads=1, d_ff=16),
    "head_dim_1_default": block_dict(d_model=4, n_heads=4, d_ff=8),
    "head_dim_1_explicit": block_dict(d_model=8, n_heads=4, head_dim=1, d_ff=12),
    "gqa_4_2": block_dict(n_heads=4, n_kv_heads=2),
    "mqa_4_1": block_dict(n_heads=4, n_kv_heads=1),
    "head_dim_ne_d_over_h": block_dict(d_model=12, n_heads=4, head_dim=5, d_ff=20),
    "rmsnorm_nobias_silu": block_dict(norm="rmsnorm", bias=False, activation="silu"),
    "rmsnorm_groupbias": block_dict(
        norm="rmsnorm", bias={"qkv": True, "out": False, "mlp": True, "norm": False}),
    "swiglu": block_dict(activation="swiglu"),
    "swiglu_nobias": block_dict(activation="swiglu", bias=False, norm="rmsnorm"),
    "swiglu_mlp_multipliers": block_dict(activation="swiglu", mlp_multipliers=[0.6, 1.7]),  # Falcon-H1's gate, down
    "geglu": block_dict(activation="geglu"),
    "gelu_exact": block_dict(activation="gelu"),
    "relu": block_dict(activation="relu"),
    # Apertus: xIELU with its layer's scalars, plain and gated, per-head q/k RMSNorm before RoPE
    "xielu_rms_qk_norm": block_dict(norm="rmsnorm", bias=False, activation="xielu", n_kv_heads=2, rope=True,
                                    qk_norm="head"),
    "gated_xielu": block_dict(activation="xielu", gated=True),
    "silu": block_dict(activation="silu"),
    "post_norm": block_dict(placement="post"),
    "post_norm_rms_swiglu": block_dict(placement="post", norm="rmsnorm", bias=False,
                                       activation="swiglu"),
    "parallel": block_dict(placement="parallel"),
    "post_branch": block_dict(placement="post_branch"),
    "sandwich_layernorm": block_dict(placement="sandwich"),
    "gemma2_like_sandwich_softcap_window": block_dict(
        placement="sandwich", norm="rmsnorm", bias=False, norm_unit_offset=True, activation="geglu", rope=True,
        n_kv_heads=2, attention_scale=0.3, attention_softcap=0.8, sliding_window=3),
    "post_branch_rms_qk_projection": block_dict(placement="post_branch", norm="rmsnorm", bias=False, rope=True,
                                                qk_norm="projection", activation="swiglu", n_kv_heads=2),
    "rope_full": block_dict(rope=True),
    "rope_full_theta500": block_dict(rope=True, rope_theta=500.0),
    "rope_half_dh8": block_dict(d_model=16, n_heads=2, rope=0.5),
    "rope_half_dh4": block_dict(rope=0.5),
    "no_bias": block_dict(bias=False),
    "bias_qkv_norm_only": block_dict(
        bias={"qkv": True, "out": False, "mlp": False, "norm": True}),
    "bias_out_mlp_only": block_dict(
        bias={"qkv": False, "out": True, "mlp": True, "norm": False}),
    "bias_mlp_only_geglu": block_dict(
        activation="geglu", bias={"qkv": False, "out": False, "mlp": True, "norm": False}),
    "norm_eps_1e-2": block_dict(norm_eps=1e-2),
    "sliding_window_2": block_dict(sliding_window=2),
    "sliding_window_1_sees_itself_only": block_dict(sliding_window=1),
    "sliding_window_gqa_rope": block_dict(sliding_window=3, n_kv_heads=2, rope=True, norm="rmsnorm", bias=False),
    "unit_offset_rmsnorm": block_dict(norm="rmsnorm", norm_unit_offset=True, bias=False, activation="geglu"),
    "unit_offset_layernorm_post": block_dict(norm_unit_offset=True, placement="post"),
    "rope_linear": block_dict(rope=True, rope_scaling={"type": "linear", "factor": 2.0}),
    "rope_dynamic_past_original": block_dict(rope=True, rope_scaling={"type": "dynamic", "factor": 2.0,
                                                                      "original_max_positions": 3}),
    "rope_llama3": block_dict(rope=True, rope_scaling={"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                       "high_freq_factor": 4.0, "original_max_positions": 16}),
    "rope_yarn": block_dict(rope=True, rope_scaling={"type": "yarn", "factor": 4.0, "original_max_positions": 16}),
    "rope_yarn_mscale_partial": block_dict(d_model=16, n_heads=2, rope=0.5, rope_scaling={
        "type": "yarn", "factor": 4.0, "original_max_positions": 16, "mscale": 0.7, "mscale_all_dim": 0.5,
        "truncate": False}),
    "rope_longrope_long": block_dict(rope=True, rope_scaling={"type": "longrope", "factor": 4.0,
                                                              "original_max_positions": 3, "short_factor": [1.0, 1.5],
                                                              "long_factor": [2.0, 7.5]}),
    "qk_norm_per_head_gqa_rope": block_dict(norm="rmsnorm", bias=False, n_kv_heads=2, rope=True, qk_norm="head",
                                            activation="swiglu"),
    "qk_norm_projection_layernorm": block_dict(qk_norm="projection", rope=0.5),
    "qk_norm_per_head_unit_offset": block_dict(norm="rmsnorm", bias=False, qk_norm="head", norm_unit_offset=True),
    "parallel_shared": block_dict(placement="parallel_shared"),
    "parallel_shared_rms_swiglu_gqa": block_dict(placement="parallel_shared", norm="rmsnorm", bias=False,
                                                 activation="swiglu", n_kv_heads=2),
    "rope_interleaved_full": block_dict(rope=True, rope_layout="interleaved"),
    "rope_interleaved_partial_gqa": block_dict(d_model=16, n_heads=2, n_kv_heads=1, rope=0.5,
                                               rope_layout="interleaved"),
    "rope_interleaved_yarn": block_dict(rope=True, rope_layout="interleaved", rope_scaling={
        "type": "yarn", "factor": 4.0, "original_max_positions": 16}),
    "gptj_like_shared_interleaved_partial": block_dict(
        d_model=32, n_heads=2, d_ff=40, rope=0.25, rope_layout="interleaved", placement="parallel_shared",
        bias={"qkv": False, "out": False, "mlp": True, "norm": True}),
    "combo_gqa_rope_swiglu_rms_parallel": block_dict(
        d_model=24, n_heads=6, n_kv_heads=2, head_dim=8, d_ff=40, rope=0.5,
        activation="swiglu", norm="rmsnorm", placement="parallel", bias=False,
        rope_theta=1000.0),
    "attention_scale_override_gqa": block_dict(d_model=16, n_heads=4, n_kv_heads=2, rope=True, attention_scale=0.7),
    "residual_multiplier_pre": block_dict(norm="rmsnorm", bias=False, activation="swiglu", residual_multiplier=0.7),
    "residual_multiplier_parallel_shared": block_dict(placement="parallel_shared", residual_multiplier=1.3),
    "residual_multiplier_post_and_scale": block_dict(placement="post", residual_multiplier=1.3,
                                                     attention_scale=0.2),
    # OLMo: LayerNorms without scale or shift, q/k/v clamped (0.5 binds on most entries)
    "olmo_parameter_free_norms_clip_qkv": block_dict(norm="layernorm", norm_scale=False, bias={
        "qkv": True, "out": True, "mlp": False, "norm": False}, activation="swiglu", n_kv_heads=2, rope=True,
        clip_qkv=0.5),
    "clip_qkv_with_projection_qk_norm_post": block_dict(placement="post", qk_norm="projection", clip_qkv=0.3),
    # Ministral 3's query scale, stepping up every 3 positions (and in the K/V-cached pass, which starts later)
    "query_scale_rms_gqa_window": block_dict(norm="rmsnorm", bias=False, activation="swiglu", n_kv_heads=2, rope=True,
                                             sliding_window=4, query_scale=0.4, query_scale_length=3),
    # HunYuan's q/k norms per head after RoPE (partial, so the norm reads rotated and unrotated dims)
    "qk_norm_after_rope_rms_gqa": block_dict(norm="rmsnorm", bias=False, activation="swiglu", n_kv_heads=2, rope=0.5,
                                             qk_norm="head", qk_norm_after_rope=True),
    "scale_free_norms_with_shift_shared": block_dict(placement="parallel_shared", norm_scale=False),
    # Llama 4's RoPE layer: chunks of 2 (the 5 tokens span three), weight-free q/k norms after interleaved RoPE, and
    # its mixture (sigmoid weights on the experts' input, a shared expert); its NoPE layer: temperature tuning
    # counted from t + 1, stepping every 2 positions
    "llama4_chunked_rope_unscaled_qk_norm_moe": block_dict(
        norm="rmsnorm", bias=False, activation="swiglu", n_kv_heads=2, rope=True, rope_layout="interleaved",
        attention_chunk=2, qk_norm="head_unscaled", qk_norm_after_rope=True,
        moe={"n_experts": 4, "top_k": 2, "d_expert": 6, "scoring": "sigmoid", "d_shared": 5, "scale_input": True}),
    "llama4_nope_temperature_tuning": block_dict(norm="rmsnorm", bias=False, activation="swiglu", n_kv_heads=2,
                                                 query_scale=0.6, query_scale_length=2, query_scale_offset=1),
    # q/k norms per head with each head's own weights (Command R+), LayerNorm with a shift, GQA, RoPE
    "qk_norm_each_head_layernorm_gqa": block_dict(n_kv_heads=2, rope=True, qk_norm="each_head"),
    # StableLM 2 12B: a shift-free LayerNorm per head of q and k (bias.qk_norm false) in a block whose other
    # LayerNorms have their shift, GQA, partial RoPE, one shared norm
    "qk_norm_each_head_no_shift_stablelm": block_dict(n_kv_heads=2, rope=0.5, qk_norm="each_head",
                                                      placement="parallel_shared",
                                                      bias={"qkv": True, "out": False, "mlp": False, "norm": True,
                                                            "qk_norm": False}),
    "qk_norm_each_head_rms_unit_offset": block_dict(norm="rmsnorm", bias=False, qk_norm="each_head",
                                                    norm_unit_offset=True, placement="parallel_shared"),
    # ALiBi with 6 heads (not a power of two), with 8, and with GQA, a sliding window and a scale override
    "alibi_6_heads": block_dict(d_model=24, n_heads=6, d_ff=16, alibi=True),
    "alibi_8_heads_post": block_dict(d_model=16, n_heads=8, d_ff=16, alibi=True, placement="post"),
    "alibi_gqa_window_scale": block_dict(d_model=24, n_heads=6, n_kv_heads=3, d_ff=16, alibi=True, sliding_window=3,
                                         attention_scale=0.4),
    # mixtures of experts, one per routing variant (the experts' outputs differ, so the routing matters)
    "moe_mixtral": block_dict(norm="rmsnorm", bias=False, activation="swiglu",
                              moe={"n_experts": 4, "top_k": 2, "d_expert": 8, "renormalize": True}),
    "moe_qwen2_shared_gate": block_dict(norm="rmsnorm", bias={"qkv": True, "out": False, "mlp": False, "norm": False},
                                        activation="swiglu",
                                        moe={"n_experts": 6, "top_k": 2, "d_expert": 5, "d_shared": 7,
                                             "shared_gate": True}),
    "moe_topk_softmax_gelu": block_dict(bias={"qkv": True, "out": True, "mlp": False, "norm": True},
                                        moe={"n_experts": 3, "top_k": 2, "d_expert": 6, "order": "topk_softmax"}),
    "moe_deepseek_v3": block_dict(norm="rmsnorm", bias=False, activation="swiglu",
                                  moe={"n_experts": 8, "top_k": 3, "d_expert": 4, "scoring": "sigmoid",
                                       "renormalize": True, "routed_scaling": 2.5, "n_groups": 4,
                                       "top_groups": 2, "group_score": "top2_sum", "selection_bias": True,
                                       "d_shared": 8}),
    # Kolibri-1's router: top-k of the logits plus the selection bias, the weights the chosen logits' sigmoids
    "moe_kolibri_bias_on_logits": block_dict(norm="rmsnorm", bias=False, activation="swiglu", placement="sandwich",
                                             moe={"n_experts": 6, "top_k": 2, "d_expert": 4, "scoring": "sigmoid",
                                                  "renormalize": True, "selection_bias": True,
                                                  "selection_on": "logits", "d_shared": 5}),
    # A.X-K1: DeepSeek-V3's mixture with an RMSNorm on its output (routed + shared)
    "moe_axk1_out_norm": block_dict(norm="rmsnorm", bias=False, activation="swiglu",
                                    moe={"n_experts": 8, "top_k": 3, "d_expert": 4, "scoring": "sigmoid",
                                         "renormalize": True, "routed_scaling": 2.5, "n_groups": 4, "top_groups": 2,
                                         "group_score": "top2_sum", "selection_bias": True, "d_shared": 8,
                                         "out_norm": True}),
    "moe_deepseek_v2_groups": block_dict(norm="rmsnorm", bias=False, activation="swiglu", placement="parallel",
                                         moe={"n_experts": 6, "top_k": 2, "d_expert": 4, "routed_scaling": 1.5,
                                              "n_groups": 3, "top_groups": 1, "d_shared": 4}),
    "moe_top1_of_1": block_dict(bias=False, moe={"n_experts": 1, "top_k": 1, "d_expert": 9}),
    # PhiMoE's sparsemixer (eval mode), its margin wide enough that a stage's softmax spans several experts
    "moe_sparsemixer": block_dict(norm="layernorm", bias={"qkv": True, "out": True, "mlp": False, "norm": True},
                                  activation="swiglu", moe={"n_experts": 5, "top_k": 2, "d_expert": 6,
                                                            "order": "sparsemixer", "sparsemixer_eps": 0.4}),
    # gpt-oss: sink logits, biased experts behind a biased router (top 2 of the logits softmaxed), the clamped
    # SwiGLU at a limit that binds (0.4), a window, GQA, RoPE; and sinks beside ALiBi over a dense clamped MLP
    "gpt_oss_sinks_clamped_moe": block_dict(norm="rmsnorm", bias={"qkv": True, "out": True, "mlp": True, "norm": False},
                                            activation="clamped_swiglu", swiglu_limit=0.4, swiglu_alpha=1.3,
                                            attention_sinks=True, n_kv_heads=2, rope=True, sliding_window=3,
                                            moe={"n_experts": 4, "top_k": 2, "d_expert": 6, "order": "topk_softmax",
                                                 "logit_bias": True}),
    "sinks_alibi_clamped_dense": block_dict(d_model=16, n_heads=4, activation="clamped_swiglu", swiglu_limit=0.3,
                                            attention_sinks=True, alibi=True),
    "moe_biased_experts_and_shared": block_dict(activation="geglu", moe={"n_experts": 3, "top_k": 1, "d_expert": 5,
                                                                        "d_shared": 4, "logit_bias": True}),
    # multi-head latent attention (DeepSeek): Q through its latent or one projection, values of their own width
    "mla_q_latent_interleaved": block_dict(norm="rmsnorm", bias=False, activation="swiglu", rope=True,
                                           rope_layout="interleaved", mla={
                                               "q_lora_rank": 6, "kv_lora_rank": 5, "qk_nope_head_dim": 3,
                                               "qk_rope_head_dim": 4, "v_head_dim": 2}),
    "mla_full_q_half_biases": block_dict(rope=True, mla={"kv_lora_rank": 7, "qk_nope_head_dim": 5,
                                                         "qk_rope_head_dim": 2, "v_head_dim": 6,
                                                         "latent_norm_eps": 1e-2}),
    "mla_yarn_mscale_window": block_dict(norm="rmsnorm", bias=False, rope=True, sliding_window=3, rope_layout="interleaved",
                                         rope_scaling={"type": "yarn", "factor": 40.0, "original_max_positions": 4,
                                                       "mscale": 1.0, "mscale_all_dim": 0.8, "beta_fast": 32.0,
                                                       "beta_slow": 1.0},
                                         mla={"q_lora_rank": 4, "kv_lora_rank": 6, "qk_nope_head_dim": 4,
                                              "qk_rope_head_dim": 4, "v_head_dim": 4}),
    # BitNet's sub-norms: the heads' output and the MLP's hidden normalised before W_O and W_down
    "sub_norms_rms_gated_relu2": block_dict(norm="rmsnorm", bias=False, activation="relu2", gated=True, rope=True,
                                            n_kv_heads=2, sub_norms=True),
    "rope_half_reversed_gqa": block_dict(norm="rmsnorm", bias=False, rope=True, rope_layout="half_reversed",
                                         n_kv_heads=2),
    "sub_norms_layernorm_plain_post": block_dict(activation="gelu_tanh", placement="post", head_dim=3,
                                                 sub_norms=True),
    # MiMo-V2-Flash's values: narrower than the queries and keys (d_v 3 beside d_h 4), times 0.6, with sinks and a window
    "narrow_scaled_values_gqa": block_dict(norm="rmsnorm", bias={"qkv": True, "out": False, "mlp": False, "norm": False},
                                           rope=0.5, n_kv_heads=2, v_head_dim=3, value_scale=0.6, attention_sinks=True,
                                           sliding_window=3),
    # Beam's sandwich: each add α·skip + β·branch, the queries times (1 + (t + 1)/L)^β without RoPE
    "sandwich_scaled_adds_power_query_scale": block_dict(norm="rmsnorm", bias=False, placement="sandwich",
                                                         attn_skip_scale=0.8, attn_branch_scale=0.6,
                                                         mlp_skip_scale=0.9, mlp_branch_scale=0.45, query_scale=0.3,
                                                         query_scale_length=2, query_scale_offset=1,
                                                         query_scale_form="power"),
    # MiniMax's scaled adds with placement pre and normed_residual
    "pre_scaled_adds": block_dict(norm="rmsnorm", bias=False, rope=True, attn_skip_scale=1.3, attn_branch_scale=0.7,
                                  mlp_skip_scale=0.5, mlp_branch_scale=1.2),
    "normed_residual_scaled_adds": block_dict(placement="normed_residual", attn_skip_scale=0.6, attn_branch_scale=1.1,
                                              mlp_skip_scale=1.4, mlp_branch_scale=0.8),
}


@pytest.mark.parametrize("name", sorted(BLOCK_CASES))
def test_block_forward_matches_reference(name):
    bd = BLOCK_CASES[name]
    B, T = 2, 5
    cfg = make_cfg(bd, batch=B, seq_len=T)
    shapes = ref.block_param_shapes(bd)
    w = random_weights(shapes, seed=zlib.crc32(name.encode()) % 1000)
    blk = DecoderBlock.from_config(cfg, weights=w)
    check_param_names(blk.params, shapes)
    x = random_x(B, T, bd["d_model"], seed=1)
    y = np.asarray(blk(x))
    assert y.shape == (B, T, bd["d_model"])
    assert y.dtype == np.float64
    y_ref = ref.block_forward(bd, w, x)
    assert maxdiff(y, y_ref) <= TOL64, maxdiff(y, y_ref)


@pytest.mark.parametrize("name", sorted(BLOCK_CASES))
def test_block_tiled_threaded_pass_matches_reference(name, shared_tiles):
    """The untraced pass in tiles of 3 rows shared among threads, with the MLP's biases, activation
    and gate applied in place one row slab at a time, equals the loop reference in every variant."""
    bd = BLOCK_CASES[name]
    B, T = 2, 7
    cfg = make_cfg(bd, batch=B, seq_len=T)
    w = random_weights(ref.block_param_shapes(bd), seed=zlib.crc32(name.encode()) % 1000 + 1)
    x = random_x(B, T, bd["d_model"], seed=2)
    y = DecoderBlock.from_config(cfg, weights=w, attention="chunked")(x)
    assert maxdiff(y, ref.block_forward(bd, w, x)) <= TOL64


@pytest.mark.parametrize("name", ["base_gelu_tanh_pre_layernorm", "single_head",
                                  "head_dim_1_default", "rope_full", "mqa_4_1"])
def test_block_single_token(name):
    bd = BLOCK_CASES[name]
    cfg = make_cfg(bd, batch=3, seq_len=1)
    w = random_weights(ref.block_param_shapes(bd), seed=7)
    blk = DecoderBlock.from_config(cfg, weights=w)
    x = random_x(3, 1, bd["d_model"], seed=2)
    y = np.asarray(blk(x))
    assert y.shape == (3, 1, bd["d_model"])
    assert maxdiff(y, ref.block_forward(bd, w, x)) <= TOL64


@pytest.mark.parametrize("name", ["base_gelu_tanh_pre_layernorm",
                                  "combo_gqa_rope_swiglu_rms_parallel",
                                  "bias_qkv_norm_only", "post_norm"])
def test_block_default_init_matches_reference(name):
    """weights=None: blockcli initialises; the reference runs on blk.params."""
    bd = BLOCK_CASES[name]
    cfg = make_cfg(bd, batch=2, seq_len=4, seed=3)
    blk = DecoderBlock.from_config(cfg, weights=None)
    check_param_names(blk.params, ref.block_param_shapes(bd))
    params = np_params(blk.params)
    x = random_x(2, 4, bd["d_model"], seed=3)
    y = np.asarray(blk(x))
    assert maxdiff(y, ref.block_forward(bd, params, x)) <= TOL64


def test_block_default_init_is_seeded():
    bd = BLOCK_CASES["base_gelu_tanh_pre_layernorm"]
    p1 = DecoderBlock.from_config(make_cfg(bd, seed=5)).params
    p2 = DecoderBlock.from_config(make_cfg(bd, seed=5)).params
    for k in p1:
        assert np.array_equal(p1[k], p2[k]), k


def test_rmsnorm_with_norm_bias_reports_reading():
    """Contract is ambiguous here: the key table says beta only for layernorm, the
    semantics say RMSNorm adds beta when bias.norm.  Accept either reading as long
    as params and forward are consistent with it."""
    bd = block_dict(norm="rmsnorm", bias=True)
    cfg = make_cfg(bd)
    blk = DecoderBlock.from_config(cfg, weights=None)
    rms_beta = "ln1_beta" in blk.params
    check_param_names(blk.params, ref.block_param_shapes(bd, rms_beta=rms_beta))
    # make beta non-zero (if present) to exercise it
    w = random_weights(ref.block_param_shapes(bd, rms_beta=rms_beta), seed=11)
    blk = DecoderBlock.from_config(cfg, weights=w)
    x = random_x(2, 5, 16, seed=4)
    y = np.asarray(blk(x))
    assert maxdiff(y, ref.block_forward(bd, w, x, rms_beta=rms_beta)) <= TOL64


# -------------------------------------------------------------------------- model

MODEL_BLOCK = block_dict(d_model=16, n_heads=4, d_ff=24)
MODEL_BASE = {"n_layers": 2, "vocab_size": 13, "max_positions": 8}

MODEL_CASES = {
    "learned_offset2_tied": (MODEL_BLOCK, dict(MODEL_BASE, positions="learned",
                                               position_offset=2, tie_embeddings=True)),
    "learned_untied_lmbias": (MODEL_BLOCK, dict(MODEL_BASE, positions="learned",
                                                tie_embeddings=False, lm_head_bias=True)),
    "sinusoidal_untied": (MODEL_BLOCK, dict(MODEL_BASE, positions="sinusoidal",
                                            tie_embeddings=False)),
    "rope_tied": (block_dict(d_model=16, n_heads=4, d_ff=24, rope=True),
                  dict(MODEL_BASE, positions="rope", tie_embeddings=True)),
    "rope_gqa_swiglu_rms_untied": (
        block_dict(d_model=16, n_heads=4, n_kv_heads=2, d_ff=24, rope=True,
                   activation="swiglu", norm="rmsnorm", bias=False),
        dict(MODEL_BASE, positions="rope", tie_embeddings=False)),
    "none_untied_no_final_norm": (MODEL_BLOCK, dict(MODEL_BASE, positions="none",
                                                    tie_embeddings=False, final_norm=False)),
    "none_tied": (MODEL_BLOCK, dict(MODEL_BASE, positions="none", tie_embeddings=True)),
    "tied_with_lm_head_bias": (MODEL_BLOCK, dict(MODEL_BASE, positions="learned",
                                                 tie_embeddings=True, lm_head_bias=True)),
    "rope_positions_block_rope_unset": (  # positions: rope with block.rope false -> whole head
        MODEL_BLOCK, dict(MODEL_BASE, positions="rope", tie_embeddings=True)),
    "sinusoidal_odd_d": (block_dict(d_model=15, n_heads=3, d_ff=20),
                         dict(MODEL_BASE, positions="sinusoidal", tie_embeddings=False)),
    # CTRL's table: all sines, then all cosines (an odd width: one more sine than cosines)
    "sinusoidal_halves_odd_d": (block_dict(d_model=15, n_heads=3, d_ff=20),
                                dict(MODEL_BASE, positions="sinusoidal", sinusoidal_layout="halves",
                                     tie_embeddings=False)),
    # XGLM's: fairseq's frequencies, rows offset by 2, row 4 (padding_idx: position 2) zero, a zero column
    "sinusoidal_fairseq_offset_padding_odd_d": (block_dict(d_model=15, n_heads=3, d_ff=20),
                                                dict(MODEL_BASE, positions="sinusoidal", sinusoidal_layout="fairseq",
                                                     position_offset=2, padding_idx=4, tie_embeddings=True)),
    "post_norm_learned": (block_dict(d_model=16, n_heads=4, d_ff=24, placement="post"),
                          dict(MODEL_BASE, positions="learned", tie_embeddings=False)),
    "gptj_like_untied_lmbias_interleaved_shared": (
        block_dict(d_model=32, n_heads=2, d_ff=24, rope=0.25, rope_layout="interleaved", placement="parallel_shared",
                   bias={"qkv": False, "out": False, "mlp": True, "norm": True}),
        dict(MODEL_BASE, positions="rope", tie_embeddings=False, lm_head_bias=True)),
    "phi_like_untied_lmbias_half_shared": (
        block_dict(d_model=16, n_heads=2, d_ff=24, rope=0.5, placement="parallel_shared"),
        dict(MODEL_BASE, positions="rope", tie_embeddings=False, lm_head_bias=True)),
    "gemma_like_scaled_embeddings_unit_offset_window": (
        block_dict(d_model=16, n_heads=4, n_kv_heads=1, d_ff=24, rope=True, activation="geglu", norm="rmsnorm",
                   bias=False, norm_unit_offset=True, sliding_window=3),
        dict(MODEL_BASE, positions="rope", tie_embeddings=True, embedding_multiplier=4.0)),
    "gemma2_like_softcaps_sandwich": (
        block_dict(d_model=16, n_heads=4, n_kv_heads=2, d_ff=24, rope=True, activation="geglu", norm="rmsnorm",
                   bias=False, norm_unit_offset=True, placement="sandwich", attention_softcap=0.9,
                   sliding_window=3),
        dict(MODEL_BASE, positions="rope", tie_embeddings=True, embedding_multiplier=4.0, logit_softcap=1.5)),
    "bloom_like_alibi_embedding_norm": (
        block_dict(d_model=18, n_heads=3, d_ff=24), dict(MODEL_BASE, positions="alibi", tie_embeddings=True,
                                                          embedding_norm=True)),
    "embedding_rmsnorm_learned": (
        block_dict(d_model=16, n_heads=4, d_ff=24, norm="rmsnorm", bias=False),
        dict(MODEL_BASE, positions="learned", tie_embeddings=False, embedding_norm=True)),
    "opt_350m_like_projected_embeddings_post_norm": (
        block_dict(d_model=16, n_heads=4, d_ff=24, placement="post", activation="relu"),
        dict(MODEL_BASE, positions="learned", position_offset=2, tie_embeddings=True, final_norm=False,
             embedding_dim=6)),
    "projected_embeddings_untied_lm_bias": (
        block_dict(d_model=16, n_heads=4, d_ff=24), dict(MODEL_BASE, positions="rope", tie_embeddings=False,
                                                          lm_head_bias=True, embedding_dim=20)),
    "olmo_like_parameter_free_norms_clip": (
        block_dict(d_model=16, n_heads=4, n_kv_heads=2, d_ff=24, rope=True, activation="swiglu", norm="layernorm",
                   bias=False, norm_scale=False, clip_qkv=0.4),
        dict(MODEL_BASE, positions="rope", tie_embeddings=True)),
    "granite_like_multipliers": (
        block_dict(d_model=16, n_heads=4, n_kv_heads=2, d_ff=24, rope=True, activation="swiglu", norm="rmsnorm",
                   bias=False, attention_scale=0.7, residual_multiplier=0.7),
        dict(MODEL_BASE, positions="rope", tie_embeddings=True, embedding_multiplier=1.3, logit_multiplier=0.7)),
    "deepseek_like_mla_untied": (
        block_dict(d_model=16, n_heads=4, d_ff=24, rope=True, activation="swiglu", norm="rmsnorm", bias=False,
                   rope_layout="interleaved", mla={"q_lora_rank": 6, "kv_lora_rank": 5, "qk_nope_head_dim": 3,
                                                   "qk_rope_head_dim": 2, "v_head_dim": 4}),
        dict(MODEL_BASE, positions="rope", tie_embeddings=False)),
}


def random_ids(B, T, V, seed):
    return np.random.default_rng(2000 + seed).integers(0, V, size=(B, T))


@pytest.mark.parametrize("name", sorted(MODEL_CASES))
def test_model_logits_match_reference(name):
    bd, md = MODEL_CASES[name]
    B, T = 2, 6
    cfg = make_cfg(bd, model=md, batch=B, seq_len=T)
    shapes = ref.model_param_shapes(bd, md)
    w = random_weights(shapes, seed=zlib.crc32(name.encode()) % 1000)
    m = Model.from_config(cfg, weights=w)
    check_param_names(m.params, shapes)
    ids = random_ids(B, T, md["vocab_size"], seed=1)
    logits = np.asarray(m(ids))
    assert logits.shape == (B, T, md["vocab_size"])
    assert maxdiff(logits, ref.model_forward(bd, md, w, ids)) <= TOL64


@pytest.mark.parametrize("name", ["learned_offset2_tied", "rope_tied", "sinusoidal_untied"])
def test_model_default_init_matches_reference(name):
    bd, md = MODEL_CASES[name]
    cfg = make_cfg(bd, model=md, batch=2, seq_len=5, seed=4)
    m = Model.from_config(cfg, weights=None)
    check_param_names(m.params, ref.model_param_shapes(bd, md))
    ids = random_ids(2, 5, md["vocab_size"], seed=2)
    logits = np.asarray(m(ids))
    assert maxdiff(logits, ref.model_forward(bd, md, np_params(m.params), ids)) <= TOL64


# ------------------------------------------------------------------------ causality

CAUSAL_BLOCKS = ["base_gelu_tanh_pre_layernorm", "rope_half_dh4", "gqa_4_2", "post_norm",
                 "parallel", "combo_gqa_rope_swiglu_rms_parallel"]


@pytest.mark.parametrize("name", CAUSAL_BLOCKS)
def test_block_last_token_change_leaves_prefix_bit_identical(name):
    bd = BLOCK_CASES[name]
    B, T = 2, 6
    cfg = make_cfg(bd, batch=B, seq_len=T)
    w = random_weights(ref.block_param_shapes(bd), seed=21)
    blk = DecoderBlock.from_config(cfg, weights=w)
    x = random_x(B, T, bd["d_model"], seed=5)
    x2 = x.copy()
    x2[:, -1, :] = np.random.default_rng(99).standard_normal((B, bd["d_model"]))
    y1 = np.asarray(blk(x))
    y2 = np.asarray(blk(x2))
    assert np.array_equal(y1[:, :-1], y2[:, :-1])
    assert not np.array_equal(y1[:, -1], y2[:, -1])


@pytest.mark.parametrize("name", ["learned_offset2_tied", "rope_gqa_swiglu_rms_untied"])
def test_model_last_token_change_leaves_prefix_bit_identical(name):
    bd, md = MODEL_CASES[name]
    B, T = 2, 6
    m = Model.from_config(make_cfg(bd, model=md, batch=B, seq_len=T),
                          weights=random_weights(ref.model_param_shapes(bd, md), seed=22))
    ids = random_ids(B, T, md["vocab_size"], seed=3)
    ids2 = ids.copy()
    ids2[:, -1] = (ids2[:, -1] + 1) % md["vocab_size"]
    l1 = np.asarray(m(ids))
    l2 = np.asarray(m(ids2))
    assert np.array_equal(l1[:, :-1], l2[:, :-1])
    assert not np.array_equal(l1[:, -1], l2[:, -1])


# ------------------------------------------------------------------------- K/V cache

CACHE_BLOCKS = ["sub_norms_rms_gated_relu2", "rope_half_reversed_gqa", "base_gelu_tanh_pre_layernorm", "rope_full", "rope_half_dh8", "mqa_4_1",
                "post_norm", "parallel", "combo_gqa_rope_swiglu_rms_parallel", "mla_q_latent_interleaved",
                "mla_yarn_mscale_window", "olmo_parameter_free_norms_clip_qkv", "alibi_6_heads",
                "alibi_gqa_window_scale", "qk_norm_each_head_layernorm_gqa", "qk_norm_each_head_no_shift_stablelm"]


def _run_block_chunks(blk, x, chunk):
    cache = blk.new_cache()
    outs = []
    T = x.shape[1]
    for t in range(0, T, chunk):
        piece = x[:, t:t + chunk]
        y_t = np.asarray(blk.step(piece, cache))
        assert y_t.shape == piece.shape
        outs.append(y_t)
    return np.concatenate(outs, axis=1)


@pytest.mark.parametrize("chunk", [1, 2])
@pytest.mark.parametrize("name", CACHE_BLOCKS)
def test_block_incremental_decoding_matches_full(name, chunk):
    bd = BLOCK_CASES[name]
    B, T = 2, 7  # T odd: the last chunk of 2 is a single token
    cfg = make_cfg(bd, batch=B, seq_len=T)
    w = random_weights(ref.block_param_shapes(bd), seed=31)
    blk = DecoderBlock.from_config(cfg, weights=w)
    x = random_x(B, T, bd["d_model"], seed=6)
    full = np.asarray(blk(x))
    inc = _run_block_chunks(blk, x, chunk)
    assert maxdiff(inc, full) <= TOL64
    assert maxdiff(inc, ref.block_forward(bd, w, x)) <= TOL64


@pytest.mark.parametrize("chunk", [1, 2])
@pytest.mark.parametrize("name", ["learned_offset2_tied", "sinusoidal_untied", "sinusoidal_fairseq_offset_padding_odd_d",
                                  "rope_gqa_swiglu_rms_untied", "deepseek_like_mla_untied",
                                  "olmo_like_parameter_free_norms_clip", "bloom_like_alibi_embedding_norm",
                                  "opt_350m_like_projected_embeddings_post_norm"])
def test_model_incremental_decoding_matches_full(name, chunk):
    bd, md = MODEL_CASES[name]
    B, T = 2, 7
    w = random_weights(ref.model_param_shapes(bd, md), seed=32)
    m = Model.from_config(make_cfg(bd, model=md, batch=B, seq_len=T), weights=w)
    ids = random_ids(B, T, md["vocab_size"], seed=4)
    full = np.asarray(m(ids))
    caches = m.new_cache()
    outs = []
    for t in range(0, T, chunk):
        lt = np.asarray(m.step(ids[:, t:t + chunk], caches))
        assert lt.shape == (B, min(chunk, T - t), md["vocab_size"])
        outs.append(lt)
    inc = np.concatenate(outs, axis=1)
    assert maxdiff(inc, full) <= TOL64
    assert maxdiff(inc, ref.model_forward(bd, md, w, ids)) <= TOL64


# -------------------------------------------- optional chunked attention code path

@pytest.mark.parametrize("table_rows", [1, 3])
@pytest.mark.parametrize("name", ["base_gelu_tanh_pre_layernorm",
                                  "combo_gqa_rope_swiglu_rms_parallel", "mla_full_q_half_biases",
                                  "olmo_parameter_free_norms_clip_qkv", "alibi_6_heads", "alibi_gqa_window_scale"])
def test_block_chunked_attention_matches_reference(name, table_rows, shared_tiles):
    """blockcli computes attention in tiles that never hold the full table, shared among threads.
    Force small tiles and compare, full and cached."""
    bd = BLOCK_CASES[name]
    B, T = 2, 7
    cfg = make_cfg(bd, batch=B, seq_len=T)
    w = random_weights(ref.block_param_shapes(bd), seed=51)
    blk = DecoderBlock.from_config(cfg, weights=w, attention="chunked")
    # a tile holds `table_rows` query rows of one K/V head's query group
    blk.attn.tile_bytes = table_rows * cfg.block.n_heads // cfg.block.n_kv_heads * T * 8
    x = random_x(B, T, bd["d_model"], seed=8)
    y_ref = ref.block_forward(bd, w, x)
    assert maxdiff(np.asarray(blk(x)), y_ref) <= TOL64
    assert maxdiff(_run_block_chunks(blk, x, 3), y_ref) <= TOL64


# --------------------------------------------------------------------------- float32

@pytest.mark.parametrize("name", ["base_gelu_tanh_pre_layernorm", "rope_full",
                                  "combo_gqa_rope_swiglu_rms_parallel", "post_norm"])
def test_block_float32_close_to_float64_reference(name):
    bd = BLOCK_CASES[name]
    B, T = 2, 5
    w = random_weights(ref.block_param_shapes(bd), seed=41)
    blk32 = DecoderBlock.from_config(make_cfg(bd, batch=B, seq_len=T, dtype="float32"),
                                     weights=w)
    for k, v in blk32.params.items():
        assert np.asarray(v).dtype == np.float32, k
    x = random_x(B, T, bd["d_model"], seed=7)
    y32 = np.asarray(blk32(x.astype(np.float32)))
    assert y32.dtype == np.float32
    y_ref = ref.block_forward(bd, w, x)
    assert maxdiff(y32, y_ref) <= TOL32_REL * max(1.0, float(np.max(np.abs(y_ref))))


def test_model_float32_close_to_float64_reference():
    bd, md = MODEL_CASES["rope_tied"]
    B, T = 2, 5
    w = random_weights(ref.model_param_shapes(bd, md), seed=42)
    m32 = Model.from_config(make_cfg(bd, model=md, batch=B, seq_len=T, dtype="float32"),
                            weights=w)
    ids = random_ids(B, T, md["vocab_size"], seed=5)
    l32 = np.asarray(m32(ids))
    assert l32.dtype == np.float32
    l_ref = ref.model_forward(bd, md, w, ids)
    assert maxdiff(l32, l_ref) <= TOL32_REL * max(1.0, float(np.max(np.abs(l_ref))))


# ------------------------------------------------- sanity checks of the reference itself

def test_reference_interleaved_rope_turns_adjacent_pairs():
    v = np.random.default_rng(1).standard_normal(8)
    r = ref.rope_vec(v, 3, 0.5, 10000.0, layout="interleaved")
    assert np.array_equal(r[4:], v[4:])
    # pair 0 is dims (0, 1), turned by 3 * theta^0; pair 1 is dims (2, 3), turned by 3 * theta^(-1/2)
    for (a, b), angle in (((0, 1), 3.0), ((2, 3), 3.0 / 100.0)):
        c, s = np.cos(angle), np.sin(angle)
        assert abs(r[a] - (v[a] * c - v[b] * s)) < 1e-12 and abs(r[b] - (v[b] * c + v[a] * s)) < 1e-12


def test_rope_layouts_differ_once_two_pairs_rotate():
    """The cases above test each layout; here the two are shown to be different functions."""
    bd = BLOCK_CASES["rope_interleaved_full"]
    w = random_weights(ref.block_param_shapes(bd), seed=5)
    x = random_x(1, 4, bd["d_model"], seed=5)
    half = DecoderBlock.from_config(make_cfg(dict(bd, rope_layout="half"), batch=1, seq_len=4), weights=w)(x)
    interleaved = DecoderBlock.from_config(make_cfg(bd, batch=1, seq_len=4), weights=w)(x)
    assert maxdiff(half, interleaved) > 1e-3


def test_reference_rope_position0_is_identity_and_preserves_norm():
    v = np.random.default_rng(0).standard_normal(8)
    assert np.array_equal(ref.rope_vec(v, 0, 1.0, 10000.0), v)
    r = ref.rope_vec(v, 3, 0.5, 10000.0)
    assert np.array_equal(r[4:], v[4:])
    assert abs(np.dot(r[:4], r[:4]) - np.dot(v[:4], v[:4])) < 1e-12
    # pair (0, 2) rotated by angle 3 * theta^0 = 3
    c, s = np.cos(3.0), np.sin(3.0)
    assert abs(r[0] - (v[0] * c - v[2] * s)) < 1e-15
    assert abs(r[2] - (v[2] * c + v[0] * s)) < 1e-15


def test_reference_single_token_attention_is_value_projection():
    """With T=1 the softmax weight is 1: attention = (x W_v + b_v) W_o + b_o."""
    bd = block_dict(d_model=8, n_heads=2, d_ff=8)
    w = random_weights(ref.block_param_shapes(bd), seed=3)
    x = np.random.default_rng(3).standard_normal(8)
    out = ref._attention(ref.resolve_block(bd), w, "", [x], 0.0)[0]
    expect = (x @ w["w_v"] + w["b_v"]) @ w["w_o"] + w["b_o"]
    assert np.max(np.abs(out - expect)) < 1e-12


# ------------------------------------------------------ blockcli.ops norms (direct)

def test_ops_layer_norm_standardises_each_token():
    from blockcli import ops
    rng = np.random.default_rng(8)
    x = 3.0 + 2.5 * rng.standard_normal((2, 5, 16))
    d = x.shape[-1]
    for beta in (None, np.zeros(d)):
        y = np.asarray(ops.layer_norm(x, np.ones(d), beta, 1e-5))
        assert y.shape == x.shape
        assert np.max(np.abs(y.mean(-1))) < 1e-12
        assert np.max(np.abs(y.var(-1) - 1.0)) < 1e-4
    gamma, beta = 1.0 + 0.2 * rng.standard_normal(d), 0.2 * rng.standard_normal(d)
    y = np.asarray(ops.layer_norm(x, gamma, beta, 1e-5))
    for b in range(2):
        for t in range(5):
            assert maxdiff(y[b, t], ref.layer_norm_vec(x[b, t], gamma, beta, 1e-5)) <= TOL64


def test_ops_rms_norm_matches_reference():
    from blockcli import ops
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 4, 8))
    gamma = 1.0 + 0.2 * rng.standard_normal(8)
    y = np.asarray(ops.rms_norm(x, gamma, None, 1e-5))
    for b in range(2):
        for t in range(4):
            assert maxdiff(y[b, t], ref.rms_norm_vec(x[b, t], gamma, None, 1e-5)) <= TOL64


# ------------------------------------------------------- randomised configurations

from hypothesis import given, settings, HealthCheck, strategies as st  # noqa: E402


@st.composite
def block_configs(draw):
    h_kv = draw(st.sampled_from([1, 2]))
    h = h_kv * draw(st.sampled_from([1, 2, 3]))
    d_h = draw(st.sampled_from([1, 2, 4, 6]))
    d = draw(st.sampled_from([4, 6, 8]))
    rope_opts = [False] + [f for f in (True, 0.5) if int(d_h * float(f)) % 2 == 0
                           and int(d_h * float(f)) > 0]
    norm = draw(st.sampled_from(["layernorm", "rmsnorm"]))
    bias = {g: draw(st.booleans()) for g in ("qkv", "out", "mlp", "norm")}
    if norm == "rmsnorm":
        bias["norm"] = False  # ambiguous corner, covered separately
    bd = {
        "d_model": d, "n_heads": h, "n_kv_heads": h_kv, "head_dim": d_h,
        "d_ff": draw(st.sampled_from([4, 10])), "norm": norm,
        "activation": draw(st.sampled_from(list(ref.ACTIVATIONS))),
        "bias": bias, "placement": draw(st.sampled_from(list(ref.PLACEMENTS))),
        "rope": draw(st.sampled_from(rope_opts)), "dropout": 0.0,
    }
    if bd["activation"] in ref.FUNCTIONS:  # any function in a gated MLP as well as in a plain one
        bd["gated"] = draw(st.booleans())
    return bd, draw(st.integers(1, 2)), draw(st.integers(1, 4)), draw(st.integers(0, 10**6))


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(block_configs())
def test_random_block_configs_match_reference(case):
    bd, B, T, seed = case
    shapes = ref.block_param_shapes(bd)
    w = random_weights(shapes, seed=seed)
    blk = DecoderBlock.from_config(make_cfg(bd, batch=B, seq_len=T), weights=w)
    check_param_names(blk.params, shapes)
    x = random_x(B, T, d=bd["d_model"], seed=seed)
    assert maxdiff(np.asarray(blk(x)), ref.block_forward(bd, w, x)) <= TOL64


@pytest.mark.parametrize("shape", [(2, 0, 16), (0, 5, 16), (2, 5, 15), (2, 5)])
def test_block_refuses_an_input_it_cannot_run_naming_the_shape(shape):
    from blockcli.config import InputError
    blk = DecoderBlock.from_config(make_cfg(BASE_BLOCK))
    with pytest.raises(InputError, match=r"expected an array of shape \(B, T, d=16\)") as err:
        blk(np.zeros(shape))
    assert str(shape) in str(err.value)


@pytest.mark.parametrize("shape", [(1, 0), (0, 3)])
def test_model_refuses_empty_token_ids(shape):
    from blockcli.config import InputError
    model = Model.from_config(make_cfg(BASE_BLOCK, model={"n_layers": 1, "vocab_size": 11, "max_positions": 8}))
    with pytest.raises(InputError, match=r"token ids of shape \(B, T\) with B, T >= 1"):
        model(np.zeros(shape, dtype=np.int64))


def test_clamped_swiglu_far_below_zero_stays_finite_in_both_references():
    """The gate is clamped from above only: at g ≪ 0, g·σ(αg) is 0 to double precision, not an overflow of
    exp(−αg) (verify's item 12 compares with blockcli's slow reference, which must not raise there)."""
    from blockcli.reference import reference_block

    bd = block_dict(activation="clamped_swiglu", swiglu_limit=0.5, norm="rmsnorm", bias=False)
    cfg = make_cfg(bd)
    blk = DecoderBlock.from_config(cfg)
    blk.params["w_gate"] *= 3000.0  # gate pre-activations of ±thousands
    x = np.random.default_rng(3).standard_normal((2, 5, cfg.block.d_model))
    y = blk(x)
    weights = {k: np.asarray(v) for k, v in blk.params.items()}
    assert np.all(np.isfinite(y))
    assert np.max(np.abs(y - reference_block(x, weights, cfg.block))) < 1e-9
    assert np.max(np.abs(y - ref.block_forward(bd, weights, x))) < 1e-9
