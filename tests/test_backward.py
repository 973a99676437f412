"""The backward pass against central differences in float64: the block with each feature switched on one at a
time, random blocks of every variant the schema allows (hypothesis), mixtures of experts, latent attention and
whole models with a tied head; the blocked attention backward equal to the whole table's; float32 against float64.

A directional check: for a random direction u over the input and every parameter at once, the central
difference of ⟨y, dy⟩ along u equals Σ ⟨gradient, u⟩. Where two step sizes disagree the function is not
smooth there (a ReLU's kink, a clamp's bound, a routing choice that flips), and the example is set aside.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from blockcli import DecoderBlock, Model
from blockcli.config import parse_config
from blockcli.shapes import is_buffer
from strategies import block_mappings, moe_mappings

STEP = 1e-6


def block_of(block: dict, attention: str = "chunked") -> DecoderBlock:
    return DecoderBlock.from_config(parse_config({"block": block, "run": {"dtype": "float64"}}), dtype="float64",
                                    attention=attention)


def directional(f, point: dict[str, np.ndarray], direction: dict[str, np.ndarray]) -> tuple[float, float]:
    """Central differences of f along `direction` at two step sizes (f reads the arrays of `point` in place)."""
    saved = {k: v.copy() for k, v in point.items()}

    def at(step: float) -> float:
        for k in point:
            point[k][...] = saved[k] + step * direction[k]
        return f()

    try:
        return ((at(STEP) - at(-STEP)) / (2 * STEP), (at(STEP / 2) - at(-STEP / 2)) / STEP)
    finally:
        for k in point:
            point[k][...] = saved[k]


def check_block(blk: DecoderBlock, B: int = 2, T: int = 5, seed: int = 0) -> bool:
    """Whether the block is smooth at a random point (else nothing is checked); if it is, its gradients agree."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((B, T, blk.cfg.d_model))
    dy = rng.standard_normal(x.shape)
    dx, grads = blk.vjp(x, dy)
    assert set(grads) == {k for k in blk.params if not is_buffer(k)}
    assert all(grads[k].shape == blk.params[k].shape and np.isfinite(grads[k]).all() for k in grads)
    point = {"x": x, **{k: blk.params[k] for k in grads}}
    direction = {k: rng.standard_normal(v.shape) for k, v in point.items()}
    coarse, fine = directional(lambda: float(np.sum(blk(x) * dy)), point, direction)
    scale = max(1.0, abs(fine))
    if abs(coarse - fine) > 1e-6 * scale:  # not smooth here
        return False
    analytic = float(np.sum(dx * direction["x"])) + sum(float(np.sum(grads[k] * direction[k])) for k in grads)
    assert abs(analytic - fine) <= 1e-6 * scale, (analytic, fine)
    return True


BASE = {"d_model": 16, "n_heads": 4, "d_ff": 24}
FEATURES = {
    "default": {},
    "rmsnorm": {"norm": "rmsnorm", "bias": False},
    "unit offset norms": {"norm": "rmsnorm", "norm_unit_offset": True},
    "no norm scale": {"norm_scale": False, "bias": {"qkv": True, "out": True, "mlp": True, "norm": False}},
    "rope": {"rope": True},
    "partial rope, interleaved": {"rope": 0.5, "rope_layout": "interleaved"},
    "rope yarn": {"rope": True, "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_positions": 2}},
    "rope longrope": {"rope": True, "rope_scaling": {"type": "longrope", "factor": 4.0, "original_max_positions": 2,
                                                     "short_factor": [1.0, 1.5], "long_factor": [2.0, 3.0]}},
    "alibi": {"alibi": True},
    "sliding window": {"sliding_window": 2},
    "attention soft cap": {"attention_softcap": 2.0},
    "attention sinks": {"attention_sinks": True},
    "grouped-query": {"n_kv_heads": 2},
    "multi-query": {"n_kv_heads": 1},
    "attention scale": {"attention_scale": 0.3},
    "q/k norm per head": {"qk_norm": "head", "norm": "rmsnorm"},
    "q/k norm each head": {"qk_norm": "each_head"},
    "q/k norm each head without shift": {"qk_norm": "each_head",  # StableLM 2 12B's
                                         "bias": {"qkv": True, "out": True, "mlp": True, "norm": True, "qk_norm": False}},
    "q/k norm over the projection": {"qk_norm": "projection"},
    "clip qkv": {"clip_qkv": 0.4},
    "clip qkv after the q/k norms": {"clip_qkv": 0.4, "qk_norm": "projection", "clip_after_qk_norm": True},
    "q/k norm per head after rope": {"qk_norm": "head", "norm": "rmsnorm", "rope": True, "qk_norm_after_rope": True},
    "query scale": {"rope": True, "query_scale": 0.5, "query_scale_length": 2},
    "query scale from t + 1": {"query_scale": 0.5, "query_scale_length": 2, "query_scale_offset": 1},
    "chunked attention": {"rope": True, "attention_chunk": 4},
    "q/k norm per head unscaled after rope": {"qk_norm": "head_unscaled", "norm": "rmsnorm", "rope": True,
                                              "rope_layout": "interleaved", "qk_norm_after_rope": True},
    "moe weights on the experts' input": {"activation": "swiglu", "bias": {"qkv": True, "out": True, "mlp": False,
                                                                           "norm": True},
                                          "moe": {"n_experts": 4, "top_k": 2, "d_expert": 6, "scoring": "sigmoid",
                                                  "d_shared": 5, "scale_input": True}},
    "post": {"placement": "post"},
    "parallel": {"placement": "parallel"},
    "parallel, shared norm": {"placement": "parallel_shared"},
    "post branch": {"placement": "post_branch"},
    "sandwich": {"placement": "sandwich"},
    "normed residual": {"placement": "normed_residual"},
    "moe, routed experts unbiased": {"moe": {"n_experts": 3, "top_k": 2, "d_expert": 4, "d_shared": 5,
                                             "routed_bias": False}},
    "residual multiplier": {"residual_multiplier": 0.6},
    "swiglu": {"activation": "swiglu"},
    "mlp multipliers (Falcon-H1's gate and down)": {"activation": "swiglu", "mlp_multipliers": [0.7, 1.4]},
    "gated exact gelu": {"activation": "gelu", "gated": True},
    "clamped swiglu": {"activation": "clamped_swiglu", "swiglu_limit": 0.4, "swiglu_alpha": 1.3},
    "xielu": {"activation": "xielu"},
    "gated xielu": {"activation": "xielu", "gated": True},
    "relu": {"activation": "relu"},
    "mish": {"activation": "mish"},
    "moe": {"activation": "swiglu", "moe": {"n_experts": 4, "top_k": 2, "d_expert": 6, "renormalize": True}},
    "moe sigmoid, groups, shared": {"moe": {"n_experts": 4, "top_k": 2, "d_expert": 6, "scoring": "sigmoid",
                                            "selection_bias": True, "n_groups": 2, "top_groups": 1,
                                            "routed_scaling": 2.5, "renormalize": True, "d_shared": 5,
                                            "shared_gate": True}},
    "moe topk softmax, biased router": {"moe": {"n_experts": 3, "top_k": 2, "d_expert": 6, "order": "topk_softmax",
                                                "logit_bias": True}},
    "moe, a norm of its output (A.X-K1)": {"norm": "rmsnorm", "moe": {"n_experts": 4, "top_k": 2, "d_expert": 6,
                                                                    "scoring": "sigmoid", "d_shared": 5,
                                                                    "out_norm": True}},
    "moe, a LayerNorm of its output": {"moe": {"n_experts": 3, "top_k": 2, "d_expert": 4, "out_norm": True}},
    "moe sparsemixer": {"moe": {"n_experts": 4, "top_k": 2, "d_expert": 6, "order": "sparsemixer",
                                "sparsemixer_eps": 0.4}},
    "latent attention": {"rope": True, "norm": "rmsnorm", "mla": {"kv_lora_rank": 6, "q_lora_rank": 5,
                                                                  "qk_nope_head_dim": 4, "qk_rope_head_dim": 2,
                                                                  "v_head_dim": 3}},
    "latent attention, no query latent": {"rope": True, "mla": {"kv_lora_rank": 6, "qk_nope_head_dim": 2,
                                                                "qk_rope_head_dim": 4, "v_head_dim": 5}},
}


@pytest.mark.parametrize("attention", ["chunked", "full"])
@pytest.mark.parametrize("feature", sorted(FEATURES))
def test_each_feature_matches_central_differences(feature: str, attention: str) -> None:
    assert check_block(block_of({**BASE, **FEATURES[feature]}, attention), T=6)


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(block_mappings(), st.integers(1, 2), st.integers(1, 6), st.sampled_from(["chunked", "full"]))
def test_random_blocks_match_central_differences(block: dict, B: int, T: int, attention: str) -> None:
    assume(check_block(block_of(block, attention), B, T))


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(moe_mappings(), st.integers(1, 6))
def test_random_mixtures_match_central_differences(block: dict, T: int) -> None:
    assume(check_block(block_of(block), 2, T))


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(block_mappings(), st.integers(1, 2), st.integers(1, 9), st.integers(0, 2**31))
def test_the_blocked_backward_equals_the_whole_tables(block: dict, B: int, T: int, seed: int) -> None:
    """Tiles of one query row and one K/V head (every tile boundary exercised) against the full table's backward."""
    blocked, full = block_of(block, "chunked"), block_of(block, "full")
    blocked.attn.tile_bytes = 1
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((B, T, blocked.cfg.d_model))
    dy = rng.standard_normal(x.shape)
    (dx_b, g_b), (dx_f, g_f) = blocked.vjp(x, dy), full.vjp(x, dy)
    assert np.allclose(dx_b, dx_f, rtol=1e-10, atol=1e-12)
    assert all(np.allclose(g_b[k], g_f[k], rtol=1e-10, atol=1e-12) for k in g_f)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(block_mappings(), st.integers(1, 6))
def test_float32_gradients_follow_float64(block: dict, T: int) -> None:
    cfg = parse_config({"block": block})
    b64 = DecoderBlock.from_config(cfg, dtype="float64")
    b32 = DecoderBlock.from_config(cfg, dtype="float32")
    x = np.random.default_rng(T).standard_normal((2, T, cfg.block.d_model))
    dy = np.random.default_rng(T + 1).standard_normal(x.shape)
    (dx64, g64), (dx32, g32) = b64.vjp(x, dy), b32.vjp(x.astype(np.float32), dy.astype(np.float32))
    assert dx32.dtype == np.float32 and all(g.dtype == np.float32 for g in g32.values())
    # relative to each array's largest, with an absolute floor: a gradient that cancels to nearly 0 keeps
    # float32's rounding of the terms it cancels
    floor = 1e-5 * max(1.0, np.max(np.abs(dx64)), *(np.max(np.abs(g)) for g in g64.values()))
    assert np.max(np.abs(dx32 - dx64)) <= 1e-3 * np.max(np.abs(dx64)) + floor
    for k, g in g64.items():
        assert np.max(np.abs(g32[k] - g)) <= 1e-3 * np.max(np.abs(g)) + floor, k


@pytest.mark.parametrize("model", [
    {"tie_embeddings": True},
    {"tie_embeddings": False, "lm_head_bias": True, "logit_softcap": 3.0, "logit_multiplier": 0.7},
    {"positions": "rope", "embedding_multiplier": 2.0, "embedding_norm": True},
    {"embedding_dim": 6, "final_norm": True},
    {"positions": "sinusoidal", "final_norm": False, "padding_idx": 2},
])
def test_models_match_central_differences(model: dict) -> None:
    cfg = parse_config({"block": {**BASE, "n_kv_heads": 2}, "run": {"dtype": "float64"},
                        "model": {"n_layers": 2, "vocab_size": 13, "max_positions": 8, **model}})
    m = Model.from_config(cfg)
    rng = np.random.default_rng(3)
    for name in m.params:  # the seeded embeddings are N(0, 1): logits far from the softmax's smooth middle
        if name in ("wte", "lm_head"):
            m.params[name] *= 0.3
    ids = rng.integers(0, 13, size=(2, 6))
    loss, grads = m.loss_and_grads(ids)
    assert set(grads) == set(m.params)
    point = {k: m.params[k] for k in grads}
    direction = {k: rng.standard_normal(v.shape) for k, v in point.items()}
    if cfg.model.padding_idx is not None:  # its lookups train it not, by definition: no difference to compare
        direction["wte"][cfg.model.padding_idx] = 0
    coarse, fine = directional(lambda: m.loss(ids), point, direction)
    analytic = sum(float(np.sum(grads[k] * direction[k])) for k in grads)
    assert abs(coarse - fine) <= 1e-6 * max(1.0, abs(fine))
    assert abs(analytic - fine) <= 1e-6 * max(1.0, abs(fine)), (analytic, fine)


def test_the_attention_backward_never_holds_a_score_table(monkeypatch):
    """At T = 256 the tiles are 64 KiB: every array the backward allocates is far smaller than B·h·T·T."""
    import tracemalloc

    blk = block_of({"d_model": 32, "n_heads": 4, "d_ff": 32})
    blk.attn.tile_bytes = 64 * 2**10
    x = np.random.default_rng(0).standard_normal((1, 256, 32))
    table = 4 * 256 * 256 * 8  # 2 MiB
    tracemalloc.start()
    try:
        blk.vjp(x, np.ones_like(x))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < table, peak


# ----------------------------------------------------------------------------- what the forward keeps


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(block_mappings(), st.integers(1, 2), st.integers(1, 9), st.sampled_from(["chunked", "full"]),
       st.sampled_from(["float32", "float64"]))
def test_the_saved_bytes_equal_their_closed_form(block: dict, B: int, T: int, attention: str, dtype: str) -> None:
    from blockcli.saved import block_saved_bytes
    from blockcli.tape import Tape

    cfg = parse_config({"block": block})
    blk = DecoderBlock.from_config(cfg, dtype=dtype, attention=attention)
    expected = block_saved_bytes(cfg.block, B, T, np.dtype(dtype).itemsize, blocked=attention == "chunked")
    assume(expected is not None)  # latent attention, or a clamp before a q/k norm: measured only
    tape = Tape()
    blk(np.random.default_rng(T).standard_normal((B, T, cfg.block.d_model)).astype(dtype), tape=tape)
    assert tape.saved_bytes() == tape.peak_bytes == expected


@pytest.mark.parametrize("model", [{}, {"positions": "rope", "final_norm": False}, {"embedding_dim": 6},
                                   {"embedding_norm": True, "tie_embeddings": False}])
def test_a_models_saved_bytes_equal_their_closed_form(model: dict) -> None:
    from blockcli.saved import model_saved_bytes

    cfg = parse_config({"block": {**BASE, "placement": "parallel"}, "run": {"dtype": "float32"},
                        "layers": [{"indices": [1], "block": {"placement": "sandwich", "d_ff": 40}}],
                        "model": {"n_layers": 2, "vocab_size": 13, "max_positions": 8, **model}})
    m = Model.from_config(cfg, attention="chunked")
    ids = np.random.default_rng(0).integers(0, 13, size=(2, 7))
    _, tape = m.backward_pass(ids)
    assert tape.peak_bytes == model_saved_bytes(cfg, 2, 7, 4)
    assert tape.saved == {}  # every operation took back what it kept
