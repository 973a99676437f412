"""Lightning attention and the MiniMax-Text-01 family built on it (`minimax`, issue #28).

Every expected number comes from outside blockcli:
- the fixture tests/fixtures/deltanet/minimax (tests/fixtures/deltanet/generate.py) holds transformers 5.24's logits,
  each layer's output, a decode step after a 6-token prompt and four single-token steps after a 3-token prompt
  (lightning, softmax attention, lightning; blocks of 4 tokens, so the 7-token pass spans two; every residual scale
  other than 1);
- tests/reference.py's `lightning_mixer` walks the recurrence one token, one head, one number at a time;
- the parameter totals are transformers' own (MiniMaxForCausalLM built on the meta device: sum of numel over its
  parameters) for MiniMaxConfig's defaults and for a random config, the defaults' also by hand; the torch-marked
  test recomputes them;
- the state bytes are derived by hand.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import reference as ref
from test_checkpoint import cli, relative
from blockcli import DecoderBlock, Model, load_config
from blockcli.config import ConfigError, InputError, parse_config
from blockcli.count import count_parameters
from blockcli.hf import hf_to_mapping
from blockcli.lightning import LightningState

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "deltanet" / "minimax"
TOLERANCE = {"float64": 1e-9, "float32": 1e-4}  # relative to the reference's largest magnitude


def expected() -> dict[str, np.ndarray]:
    with np.load(FIXTURE / "expected.npz") as data:
        return {k: data[k] for k in data.files}


# ----------------------------------------------------------------------------- parity with transformers


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_logits_every_layer_and_decode_steps_equal_transformers(dtype: str) -> None:
    want = expected()
    model = Model.from_config(load_config(FIXTURE), weights=FIXTURE, dtype=dtype)
    ids = want["input_ids"]
    layers = [model.embed(ids)]
    for block in model.blocks:
        layers.append(block(layers[-1]))
    prompt, steps = model.new_cache(), model.new_cache()
    model.step(ids[:, :-1], prompt)
    model.step(ids[:, :3], steps)
    got = {"logits": model(ids), "layers": np.stack(layers[1:]), "decode_logits": model.step(ids[:, -1:], prompt),
           "steps": np.stack([model.step(ids[:, t:t + 1], steps) for t in range(3, ids.shape[1])])}
    for key, value in got.items():
        assert relative(value, want[f"{key}_{dtype}"]) <= TOLERANCE[dtype], key


def test_transformers_own_steps_are_its_full_forward() -> None:
    """The fixture's decode steps are transformers' full forward at those positions (its steps given their
    position_ids, as generate() gives them): what the parity test above holds blockcli's steps to is decoding."""
    want = expected()
    full = want["logits_float64"]
    assert relative(want["steps_float64"][:, :, 0], np.moveaxis(full[:, 3:], 1, 0)) <= 1e-12
    assert relative(want["decode_logits_float64"][:, 0], full[:, -1]) <= 1e-12


def test_decoding_one_token_at_a_time_equals_the_full_forward() -> None:
    model = Model.from_config(load_config(FIXTURE), weights=FIXTURE, dtype="float64")
    ids = expected()["input_ids"]
    full = model(ids)
    caches = model.new_cache()
    steps = np.concatenate([model.step(ids[:, t:t + 1], caches) for t in range(ids.shape[1])], axis=1)
    assert relative(steps, full) <= 1e-12
    lightning = [c for c in caches if isinstance(c, LightningState)]
    assert len(lightning) == 2 and all(c.length == ids.shape[1] for c in caches)


def test_the_stored_state_is_constant_in_the_sequence_length() -> None:
    model = Model.from_config(load_config(FIXTURE), weights=FIXTURE, dtype="float64")
    ids = expected()["input_ids"]
    caches = model.new_cache()
    model.step(ids[:, :2], caches)
    shapes = [c.recurrent.shape for c in caches if isinstance(c, LightningState)]
    model.step(ids[:, 2:], caches)
    assert [c.recurrent.shape for c in caches if isinstance(c, LightningState)] == shapes == [(2, 4, 8, 8)] * 2


# ----------------------------------------------------------------------------- against the loop reference


_BLOCK = {"d_model": 12, "n_heads": 3, "head_dim": 5, "d_ff": 16, "norm": "rmsnorm", "activation": "swiglu",
          "bias": False, "lightning": {"decay_scale": 0.6, "block_size": 3}}


@pytest.mark.parametrize("block_size", [1, 3, 4, 64])
def test_the_mixer_equals_the_loop_reference_and_continues_from_its_state(block_size: int) -> None:
    """Any block size gives the recurrence's result: one block, several, a last one cut short, one token each."""
    block = DecoderBlock.from_config(parse_config({"block": {**_BLOCK, "lightning": {"decay_scale": 0.6,
                                                                                     "block_size": block_size}}}),
                                     dtype="float64", seed=3)
    x = np.random.default_rng(0).standard_normal((2, 7, 12))
    want, state = ref.lightning_mixer(3, 5, 0.6, block.params, x)
    assert relative(block.attn(x), want) <= 1e-12
    cache = LightningState()
    first, rest = block.attn(x[:, :5], cache=cache), block.attn(x[:, 5:], cache=cache)
    assert relative(np.concatenate([first, rest], axis=1), want) <= 1e-12
    assert relative(cache.recurrent, state) <= 1e-12 and cache.length == 7
    again, _ = ref.lightning_mixer(3, 5, 0.6, block.params, x[:, 5:], ref.lightning_mixer(3, 5, 0.6, block.params,
                                                                                           x[:, :5])[1])
    assert relative(rest, again) <= 1e-12


def test_the_residual_scales_are_alpha_skip_plus_beta_branch() -> None:
    """normed_residual with the scales: h = α₁·LN1(x) + β₁·mixer(LN1(x)), y = α₂·LN2(h) + β₂·MLP(LN2(h)), rebuilt
    from the block's own mixer, norms and MLP."""
    scales = dict(attn_skip_scale=1.7, attn_branch_scale=0.4, mlp_skip_scale=0.9, mlp_branch_scale=1.3)
    block = DecoderBlock.from_config(parse_config({"block": {**_BLOCK, "placement": "normed_residual", **scales}}),
                                     dtype="float64", seed=5)
    x = np.random.default_rng(1).standard_normal((2, 4, 12))
    n1 = block.ln1(x)
    h = 1.7 * n1 + 0.4 * block.attn(n1)
    n2 = block.ln2(h)
    assert relative(block(x), 0.9 * n2 + 1.3 * block.mlp(n2)) <= 1e-14


@pytest.mark.parametrize("placement", ["pre", "normed_residual"])
def test_the_backward_of_scaled_residuals_is_central_differences(placement: str) -> None:
    """The scales on an attention block (the lightning mixer's own backward is refused): dx and a weight's gradient
    against central differences of the forward."""
    block_cfg = {k: v for k, v in _BLOCK.items() if k != "lightning"}
    cfg = parse_config({"block": {**block_cfg, "placement": placement, "attn_skip_scale": 1.6,
                                  "attn_branch_scale": 0.7, "mlp_skip_scale": 0.8, "mlp_branch_scale": 1.4}})
    block = DecoderBlock.from_config(cfg, dtype="float64", seed=2)
    rng = np.random.default_rng(3)
    x, dy = rng.standard_normal((1, 3, 12)), rng.standard_normal((1, 3, 12))
    dx, grads = block.vjp(x, dy)
    eps = 1e-6
    for index in [(0, 0, 0), (0, 2, 5), (0, 1, 11)]:
        bump = np.zeros_like(x)
        bump[index] = eps
        numeric = np.sum((block(x + bump) - block(x - bump)) * dy) / (2 * eps)
        assert abs(dx[index] - numeric) <= 1e-7 * max(1.0, abs(numeric))
    w = block.params["w_q"]
    saved = w[1, 2]
    w[1, 2] = saved + eps
    up = np.sum(block(x) * dy)
    w[1, 2] = saved - eps
    down = np.sum(block(x) * dy)
    w[1, 2] = saved
    assert abs(grads["w_q"][1, 2] - (up - down) / (2 * eps)) <= 1e-7 * max(1.0, abs(up - down) / (2 * eps))


def test_the_backward_is_refused_in_one_line() -> None:
    proc = cli("verify", FIXTURE, "--grad")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "lightning-attention layer are not implemented" in proc.stderr and "Traceback" not in proc.stderr
    block = DecoderBlock.from_config(parse_config({"block": _BLOCK}), dtype="float64", seed=0)
    with pytest.raises(InputError, match="lightning"):
        block.vjp(np.zeros((1, 2, 12)), np.zeros((1, 2, 12)))


# ----------------------------------------------------------------------------- counts against transformers


def _minimax_by_hand(d: int, layers: int, linear: int, vocab: int, h: int, kv: int, d_h: int, d_ff: int, E: int,
                     tied: bool = False) -> int:
    """MiniMax by hand: attention layers Q, K, V, O; lightning layers q | k | v (3·d·h·d_h), the output gate
    (d·h·d_h), the output norm (h·d_h), W_out (h·d_h·d); every layer the router (d·E), E SwiGLU experts (3·d·d_ff) and
    two norms; the final norm, the embeddings and (untied) the LM head."""
    attention = 2 * d * h * d_h + 2 * d * kv * d_h
    lightning = 5 * d * h * d_h + h * d_h
    per_layer = d * E + 3 * E * d * d_ff + 2 * d
    return (layers - linear) * attention + linear * lightning + layers * per_layer + d + (1 if tied else 2) * vocab * d


# MiniMaxConfig's defaults (32 layers alternating, full attention first; 8 experts of 14336), and a random config:
# 6 heads over 3 K/V heads of 10, three of five layers lightning, 6 experts (top 3) of 20, tied, other scales
_DEFAULTS = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                 vocab_size=32000, max_position_embeddings=131072)
_RANDOM = dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=3, head_dim=10, num_hidden_layers=5,
               intermediate_size=20, vocab_size=300, max_position_embeddings=96, num_local_experts=6,
               num_experts_per_tok=3, tie_word_embeddings=True, block_size=16, full_attn_alpha_factor=2.5,
               linear_attn_beta_factor=0.6,
               layer_types=["linear_attention", "linear_attention", "full_attention", "linear_attention",
                            "full_attention"])
DEFAULTS_TOTAL, RANDOM_TOTAL = 47_373_946_880, 163_428


def _count(fields: dict[str, Any]):
    return count_parameters(parse_config(hf_to_mapping({"model_type": "minimax", **fields}, "config.json")))


def test_the_defaults_and_a_random_config_count_as_transformers_and_by_hand() -> None:
    counted = [_count(f) for f in (_DEFAULTS, _RANDOM)]
    assert [c.total for c in counted] == [DEFAULTS_TOTAL, RANDOM_TOTAL]
    assert DEFAULTS_TOTAL == _minimax_by_hand(4096, 32, 16, 32000, 32, 8, 128, 14336, 8)
    assert RANDOM_TOTAL == _minimax_by_hand(48, 5, 3, 300, 6, 3, 10, 20, 6, tied=True)
    assert all(c.reconciled.match for c in counted)


@pytest.mark.torch
def test_the_totals_here_are_transformers_own() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    for fields, want in ((_DEFAULTS, DEFAULTS_TOTAL), (_RANDOM, RANDOM_TOTAL)):
        config = transformers.AutoConfig.for_model("minimax", **fields)
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(config)
        assert sum(p.numel() for p in model.parameters()) == want
        data = {k: v for k, v in config.to_dict().items() if k != "transformers_version"}  # every field spelled out
        assert count_parameters(parse_config(hf_to_mapping(data, "config.json"))).total == want


def test_the_fixture_counts_as_transformers_and_reconciles_with_its_tensors() -> None:
    total = int(expected()["parameters"])
    assert count_parameters(load_config(FIXTURE)).total == total
    proc = cli("count", FIXTURE)
    assert proc.returncode == 0, proc.stderr
    assert f"formula {total:,} vs checkpoint tensors" in proc.stdout
    assert "match" in proc.stdout.split("vs checkpoint tensors")[1].splitlines()[0]


def test_the_layers_read_their_kind_decay_and_scales() -> None:
    config = parse_config(hf_to_mapping({"model_type": "minimax", **_RANDOM}, "config.json"))
    blocks = [config.layer_block(i) for i in range(5)]
    assert [b.lightning is not None for b in blocks] == [True, True, False, True, False]
    # MiniMaxLightningAttention's factor 1 − l/(L − 1 + 1e-5) + 1e-5 for layers 0, 1 and 3 of 5
    assert [b.lightning.decay_scale for b in blocks if b.lightning] == [1 + 1e-5, 1 - 1 / (4 + 1e-5) + 1e-5,
                                                                        1 - 3 / (4 + 1e-5) + 1e-5]
    assert all(b.lightning.block_size == 16 for b in blocks if b.lightning)
    assert [(b.attn_skip_scale, b.attn_branch_scale) for b in blocks] == [(1.0, 0.6), (1.0, 0.6), (2.5, 1.0),
                                                                          (1.0, 0.6), (2.5, 1.0)]
    assert all(b.placement == "normed_residual" and b.rope_theta == 1e6 for b in blocks)
    defaults = parse_config(hf_to_mapping({"model_type": "minimax", **_DEFAULTS}, "config.json"))
    assert [defaults.layer_block(i).lightning is not None for i in range(4)] == [False, True, False, True]


@pytest.mark.parametrize("fields, key", [
    ({"postnorm": False}, "postnorm"),
    ({"shared_intermediate_size": 64}, "shared_intermediate_size"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"attn_type_list": [0, 1, 0, 1]}, "attn_type_list"),  # transformers would not read it: alternating layers
    ({"attn_type_list": [1, 1, 1, 1], "layer_types": ["full_attention", "linear_attention"] * 2}, "attn_type_list"),
    ({"layer_types": ["full_attention", "mamba", "full_attention", "linear_attention"]}, "layer_types"),
])
def test_what_transformers_would_read_otherwise_is_refused_naming_the_field(fields: dict, key: str) -> None:
    data = {"model_type": "minimax", **_DEFAULTS, "num_hidden_layers": 4, **fields}
    with pytest.raises(ConfigError, match=f"'{key}'"):
        hf_to_mapping(data, "config.json")


def test_the_published_configs_unread_fields_are_accepted_with_a_note(tmp_path: Path) -> None:
    """rotary_dim (transformers' MiniMax rotates the whole head) and shared_moe_mode: said, not refused."""
    data = {"model_type": "minimax", **_RANDOM, "rotary_dim": 5, "shared_moe_mode": "sigmoid", "postnorm": True,
            "shared_intermediate_size": 0}
    (tmp_path / "config.json").write_text(json.dumps(data))
    proc = cli("count", tmp_path / "config.json")
    assert proc.returncode == 0, proc.stderr
    assert "rotary_dim" in proc.stderr and f"{RANDOM_TOTAL:,}" in proc.stdout


@pytest.mark.parametrize("block, key", [
    ({**_BLOCK, "qk_norm": "head"}, "qk_norm"),
    ({**_BLOCK, "sliding_window": 4}, "sliding_window"),
    ({**_BLOCK, "placement": "post", "attn_skip_scale": 2.0}, "attn_skip_scale"),
    ({**_BLOCK, "lightning": {"decay": 1.0}}, "decay"),
])
def test_a_lightning_block_refuses_what_it_cannot_have(block: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        parse_config({"block": block})


# ----------------------------------------------------------------------------- trace and sizing


def test_analytic_trace_rows_equal_the_executed_ones() -> None:
    from blockcli.trace import analytic_trace, merge_expert_rows, run_trace, with_run

    config = with_run(load_config(FIXTURE), batch=2, seq_len=5)
    assert merge_expert_rows(run_trace(config).rows, config, 10) == analytic_trace(config).rows


def test_the_trace_names_the_recurrence_and_counts_its_products_by_hand() -> None:
    from blockcli.trace import run_trace, with_run

    config = with_run(parse_config({"block": _BLOCK}), batch=2, seq_len=7)
    traced = run_trace(config)
    rows = {r.key: r for r in traced.rows}
    rule = rows["la_recurrence"]
    assert rule.output_shape == (2, 3, 7, 5) and rule.symbolic == "(B, h, T, d_h)" and "B, h, d_h, d_h" in rule.op
    # per token and head: kᵀv into S and q·S, d_h·d_h multiply-adds each; the decay d_h·d_h multiplies
    assert rule.matmul_flops == 2 * 2 * (2 * 7 * 3) * 5 * 5 and rule.flops == rule.matmul_flops + (2 * 7 * 3) * 5 * 5
    assert rows["la_qkv"].params == 3 * 12 * 15 and rows["la_gate"].params == 12 * 15
    assert traced.totals["kv_cache_bytes"] == 2 * 3 * 5 * 5 * 4  # S (B, h, d_h, d_h), float32, whatever T


def test_the_state_bytes_are_what_decoding_holds_and_constant_in_t() -> None:
    from blockcli.sizing import inference

    config = load_config(FIXTURE)
    model = Model.from_config(config, weights=FIXTURE, dtype="float32")
    caches = model.new_cache()
    model.step(expected()["input_ids"][:, :5], caches)
    held = sum(c.recurrent.nbytes for c in caches if isinstance(c, LightningState))
    short, long = (inference(config, 40_608, T, 2, "float32") for T in (5, 50))
    assert short.state_bytes == long.state_bytes == held == 2 * 2 * 4 * 8 * 8 * 4  # 2 layers, B·h·d_h² float32
    assert short.state_of == "lightning"
    assert long.kv_bytes == 10 * short.kv_bytes == 2 * 50 * 2 * 2 * 8 * 4  # the one attention layer's K and V


def test_the_decode_step_of_a_lightning_layer_costs_the_same_at_any_context() -> None:
    from blockcli.sizing import inference

    config = parse_config(hf_to_mapping({"model_type": "minimax", **_RANDOM,
                                         "layer_types": ["linear_attention"] * 5}, "config.json"))
    flops = [inference(config, 1, T, 1, "float32").decode for T in (10, 1000)]
    assert flops[0] == flops[1]


def test_count_train_refuses_the_lightning_layers_in_one_line() -> None:
    proc = cli("count", FIXTURE, "--train")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "lightning" in proc.stderr


# ----------------------------------------------------------------------------- the preset


# https://huggingface.co/MiniMaxAI/MiniMax-Text-01-hf/blob/main/config.json's fields: seven lightning layers, then one of
# softmax attention, ten times
TEXT_01 = dict(model_type="minimax", hidden_size=6144, intermediate_size=9216, num_hidden_layers=80,
               num_attention_heads=64, num_key_value_heads=8, head_dim=128, vocab_size=200064,
               max_position_embeddings=10240000, rms_norm_eps=1e-05, rope_theta=10000000, rotary_dim=64,
               num_local_experts=32, num_experts_per_tok=2, tie_word_embeddings=False, postnorm=True,
               shared_intermediate_size=0, shared_moe_mode="sigmoid", sliding_window=None,
               layer_types=(["linear_attention"] * 7 + ["full_attention"]) * 10,
               **{f"{kind}_{ab}_factor": 3.5565588200778455 if ab == "alpha" else 1.0
                  for kind in ("full_attn", "linear_attn", "mlp") for ab in ("alpha", "beta")})
TEXT_01_TOTAL = 456_089_655_296


def test_the_preset_counts_as_transformers_by_hand_and_as_its_config_json() -> None:
    import yaml

    config = load_config("minimax-text-01")
    counted = count_parameters(config)
    assert counted.total == TEXT_01_TOTAL == _minimax_by_hand(6144, 80, 70, 200064, 64, 8, 128, 9216, 32)
    path = Path(__file__).resolve().parents[1] / "blockcli" / "presets" / "minimax-text-01.yaml"
    assert yaml.safe_load(path.read_text(encoding="utf-8"))["about"]["parameters"] == TEXT_01_TOTAL
    converted = parse_config(hf_to_mapping(TEXT_01, "config.json"))
    assert [converted.layer_block(i) for i in range(80)] == [config.layer_block(i) for i in range(80)]
    assert converted.model == config.model
    embeddings = 2 * 200064 * 6144  # the model card's 45.9B active: without the embeddings and the LM head
    assert counted.active - embeddings == 45_944_920_064


@pytest.mark.torch
def test_the_preset_total_is_transformers_own() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**TEXT_01))
    assert sum(p.numel() for p in model.parameters()) == TEXT_01_TOTAL
