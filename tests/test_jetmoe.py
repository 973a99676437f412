"""JetMoE (`jetmoe`) and its mixture of attention heads (`block.moa`, blockcli/moa.py).

Expected numbers come from outside blockcli: transformers 5.24's meta-device totals (JetMoeForCausalLM, sum of numel
over parameters()) for the config class's defaults (the census) and a random config, the same derived by hand; the
fixture tests/fixtures/hf/jetmoe (tests/fixtures/hf/generate.py: logits, every layer, a decode step and gradients,
float32 and float64, checked by tests/test_checkpoint.py and tests/test_gradients.py); tests/reference.py's loop
implementation of the mixture; central differences for the gradients.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from blockcli import DecoderBlock, Model, load_config
from blockcli.config import ConfigError, parse_config
from blockcli.count import count_parameters
from reference import mixture_of_attention
from test_dense_families import assert_totals_are_transformers_own, mapped, total

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "hf" / "jetmoe"

# JetMoeConfig's sizes (its defaults: a JetMoE 4B style configuration)
_SIZES = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=12, num_key_value_heads=16, kv_channels=128,
              vocab_size=32000, max_position_embeddings=4096, num_local_experts=8, num_experts_per_tok=2)
# a random JetMoE: 5 experts of which 3, 3 K/V heads of 6 (9 query heads a token), GELU experts of 20, untied
_RANDOM = dict(hidden_size=24, num_key_value_heads=3, kv_channels=6, num_local_experts=5, num_experts_per_tok=3,
               intermediate_size=20, num_hidden_layers=3, vocab_size=300, max_position_embeddings=96,
               tie_word_embeddings=False, activation_function="gelu",
               rope_parameters={"rope_type": "default", "rope_theta": 5000.0})


def _by_hand(d: int, w: int, E: int, f: int, L: int, V: int, tied: bool) -> int:
    """Per layer: the attention router d·E, E experts' W_q and W_o (2·d·w each), the shared K/V (2·d·w), the mixture's
    bias d, two norms 2·d, the MLP router d·E, E gated experts (3·d·f each), the mixture's bias d; the embeddings V·d
    (and an untied head V·d), the final norm d."""
    layer = d * E + 2 * E * d * w + 2 * d * w + d + 2 * d + d * E + 3 * E * d * f + d
    return L * layer + V * d * (1 if tied else 2) + d


def test_counts_equal_transformers_totals_and_the_hand_formula() -> None:
    assert total("jetmoe", _SIZES) == 4_293_888_000 == _by_hand(2048, 2048, 8, 5632, 12, 32000, tied=True)
    assert total("jetmoe", _RANDOM) == 52_584 == _by_hand(24, 18, 5, 20, 3, 300, tied=False)


@pytest.mark.torch
def test_the_totals_and_sizes_here_are_transformers_own() -> None:
    assert_totals_are_transformers_own("jetmoe", _SIZES, (), 4_293_888_000, _RANDOM, 52_584)


def test_the_active_parameters_are_k_of_e_experts_in_both_mixtures() -> None:
    result = count_parameters(parse_config(mapped("jetmoe", _RANDOM)))
    d, w, f, L, V = 24, 18, 20, 3, 300
    idle = L * (2 * 2 * d * w + 2 * 3 * d * f)  # 2 of 5 attention experts (W_q, W_o) and 2 of 5 MLP experts unused
    assert result.active == 52_584 - idle
    rows = {c.name: c for c in result.components}
    assert rows["attn.experts"].active == 3 * 2 * d * w and rows["attn.experts"].count == 5 * 2 * d * w
    assert rows["attention"].active == d * 5 + 3 * 2 * d * w + 2 * d * w + d
    assert rows["mlp"].active == d * 5 + 3 * 3 * d * f + d
    assert V  # the embeddings and head are used whole


def test_the_family_maps_onto_the_mixture_of_attention_and_experts() -> None:
    block = mapped("jetmoe", _RANDOM)["block"]
    assert (block["n_heads"], block["n_kv_heads"], block["head_dim"]) == (9, 3, 6)  # k·h_kv query heads
    assert block["moa"] == {"n_experts": 5, "top_k": 3}
    assert block["moe"] == {"n_experts": 5, "top_k": 3, "d_expert": 20, "order": "topk_softmax", "out_bias": True}
    assert (block["activation"], block["gated"], block["rope_theta"], block["bias"]) == ("gelu", True, 5000.0, False)


def test_head_dim_is_read_as_kv_channels_and_a_stored_num_attention_heads_is_not_read() -> None:
    as_head_dim = {k: v for k, v in {**_RANDOM, "head_dim": 8}.items() if k != "kv_channels"}
    assert mapped("jetmoe", as_head_dim)["block"]["head_dim"] == 8  # JetMoeConfig's attribute_map
    data = mapped("jetmoe", {**_RANDOM, "num_attention_heads": 4})
    assert data["block"]["n_heads"] == 9  # JetMoeConfig overwrites it with num_key_value_heads · num_experts_per_tok


@pytest.mark.parametrize("fields, named", [
    ({"rms_norm_eps": 1e-5}, "rms_norm_eps"),  # the layers' norms keep 1e-6: one eps cannot be both
    ({"output_router_logits": True}, "output_router_logits"),  # the load-balancing loss over both routers
    ({"num_experts_per_tok": 6}, "num_experts_per_tok"),  # more than num_local_experts
    ({"activation_function": "no_such_act"}, "activation_function"),
])
def test_what_blockcli_does_not_implement_is_refused_naming_the_field(fields: dict, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        parse_config(mapped("jetmoe", {**_RANDOM, **fields}))


_BLOCK = {"d_model": 12, "n_heads": 4, "n_kv_heads": 2, "head_dim": 4, "d_ff": 8, "norm": "rmsnorm",
          "activation": "swiglu", "bias": False, "rope": True, "rope_theta": 300.0,
          "moa": {"n_experts": 3, "top_k": 2},
          "moe": {"n_experts": 3, "top_k": 2, "d_expert": 6, "order": "topk_softmax", "out_bias": True}}


@pytest.mark.parametrize("block, key", [
    ({"n_heads": 2}, "n_heads"),  # not top_k · n_kv_heads
    ({"qk_norm": "head"}, "qk_norm"),
    ({"bias": True}, "bias"),
    ({"lightning": {}}, "moa"),
    ({"parts": "mixer"}, "moa"),
    ({"moa": {"n_experts": 2, "top_k": 3}}, "top_k"),
])
def test_a_mixture_of_attention_block_refuses_what_it_cannot_have(block: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        parse_config({"block": {**_BLOCK, **block}})


def _mixer_and_weights(seed: int) -> tuple[DecoderBlock, dict]:
    cfg = parse_config({"block": _BLOCK, "run": {"dtype": "float64"}})
    block = DecoderBlock.from_config(cfg, seed=seed, dtype="float64")
    p = {k: np.asarray(v, dtype=np.float64) for k, v in block.params.items()}
    for key in ("moa_bias", "moe_bias"):  # initialised at zeros: make them matter
        p[key] = np.random.default_rng(seed).standard_normal(12) * 0.3
        block.params[key][...] = p[key]
    return block, p


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_mixture_equals_the_loop_reference_and_decodes_from_its_cache(seed: int) -> None:
    block, p = _mixer_and_weights(seed)
    x = np.random.default_rng(seed + 10).standard_normal((2, 6, 12))
    want, _ = mixture_of_attention(3, 2, 2, 4, 300.0, p, x)
    np.testing.assert_allclose(block.attn(x), want, rtol=0, atol=1e-12)
    cache = block.new_cache()
    first = block.attn(x[:, :4], cache=cache)  # a prompt of 4, then one token at a time
    steps = [block.attn(x[:, t:t + 1], cache=cache) for t in (4, 5)]
    np.testing.assert_allclose(np.concatenate([first, *steps], axis=1), want, rtol=0, atol=1e-12)
    assert cache.k.shape == (2, 2, 6, 4)  # the K/V cache: h_kv heads only, shared by the experts


def test_token_by_token_decoding_equals_transformers_full_pass() -> None:
    with np.load(FIXTURE / "expected.npz") as data:
        ids, want = data["input_ids"], data["logits_float64"]
    model = Model.from_config(load_config(FIXTURE), weights=FIXTURE, dtype="float64")
    caches = model.new_cache()
    got = [model.step(ids[:, :2], caches)] + [model.step(ids[:, t:t + 1], caches) for t in range(2, ids.shape[1])]
    np.testing.assert_allclose(np.concatenate(got, axis=1), want, rtol=1e-9, atol=1e-12)


def test_the_fixture_routes_tokens_to_different_attention_experts() -> None:
    """The fixture is worth its name only if the tokens' choices differ (else one expert would do)."""
    from blockcli import moa as MOA
    from blockcli.ops import STANDARD_OPS

    model = Model.from_config(load_config(FIXTURE), weights=FIXTURE, dtype="float64")
    with np.load(FIXTURE / "expected.npz") as data:
        x = model.embed(data["input_ids"])
    _, chosen, _ = MOA.route(model.blocks[0].ln1(x), model.params["blocks.0.moa_router"], 2, STANDARD_OPS)
    assert len({tuple(sorted(c)) for c in chosen.reshape(-1, 2).tolist()}) > 1
    assert json.loads((FIXTURE / "config.json").read_text())["num_local_experts"] == 4


def test_the_mixtures_gradients_equal_central_differences() -> None:
    block, _ = _mixer_and_weights(4)
    x = np.random.default_rng(5).standard_normal((1, 5, 12))
    dy = np.random.default_rng(6).standard_normal((1, 5, 12))
    dx, grads = block.vjp(x, dy)
    eps = 1e-6

    def loss() -> float:
        return float(np.sum(block(x) * dy))

    for key in ("moa_router", "attn_experts.0.w_q", "attn_experts.1.w_o", "attn_experts.2.w_q", "w_k", "w_v",
                "moa_bias", "router", "moe_bias", "ln1_gamma"):
        param = block.params[key]
        flat = param.reshape(-1)
        for i in range(0, flat.size, max(1, flat.size // 7)):
            keep = flat[i]
            flat[i] = keep + eps
            up = loss()
            flat[i] = keep - eps
            down = loss()
            flat[i] = keep
            assert abs((up - down) / (2 * eps) - grads[key].reshape(-1)[i]) < 1e-6, (key, i)
    for i in range(0, x.size, 9):
        keep = x.reshape(-1)[i]
        x.reshape(-1)[i] = keep + eps
        up = loss()
        x.reshape(-1)[i] = keep - eps
        down = loss()
        x.reshape(-1)[i] = keep
        assert abs((up - down) / (2 * eps) - dx.reshape(-1)[i]) < 1e-6


# ----------------------------------------------------------------------------- trace and sizing


def test_analytic_trace_rows_equal_the_executed_ones() -> None:
    from blockcli.trace import analytic_trace, merge_expert_rows, run_trace, with_run

    config = with_run(load_config(FIXTURE), batch=2, seq_len=5)
    assert merge_expert_rows(run_trace(config).rows, config, 10) == analytic_trace(config).rows


def test_the_trace_names_the_routers_top_k_and_the_expert_shapes() -> None:
    from blockcli.trace import run_trace, with_run

    traced = run_trace(with_run(load_config(FIXTURE), batch=2, seq_len=5))
    rows = {r.key: r for r in traced.rows}
    assert rows["blocks.0.moa_choice"].op == "top-2 of 4 attention experts per token"
    assert rows["blocks.0.moa_choice"].output_shape == (2, 5, 2)
    q, o = rows["blocks.0.q_proj"], rows["blocks.0.moa_experts_out"]
    assert "W_q (d, h_kv·d_h = 8)" in q.op and q.output_shape == (2, 5, 16) and q.params == 4 * 16 * 8
    assert "W_o (h_kv·d_h = 8 → d)" in o.op and o.output_shape == (2, 5, 2, 16) and o.params == 4 * 8 * 16
    # per token: its 2 experts' queries (2·8 wide from d = 16) and outputs (8 → 16 each), multiply-adds × 2
    assert q.matmul_flops == 2 * 10 * 16 * 16 and o.matmul_flops == 2 * 10 * 2 * 8 * 16
    assert rows["blocks.0.k_proj"].output_shape == (2, 5, 8)  # the shared K: h_kv·d_h
    assert traced.totals["kv_cache_bytes"] == 2 * 2 * 5 * 2 * 8 * 4  # L·B·T·(K + V of h_kv·d_h), float32


def test_sizing_counts_the_shared_kv_cache_and_the_routed_projections() -> None:
    from blockcli.sizing import inference
    from blockcli.trace import run_trace, with_run

    config = load_config(FIXTURE)
    sized = inference(config, 9_104, 5, 1, "float32")
    assert sized.kv_bits_per_token == 2 * 2 * 8 * 32  # 2·L·h_kv·d_h in float32, whatever the experts
    traced = run_trace(with_run(config, batch=1, seq_len=5)).totals
    assert sized.prefill.total() == traced["matmul_flops"] and sized.kv_bytes == traced["kv_cache_bytes"]
    model = Model.from_config(config, weights=FIXTURE, dtype="float32")
    caches = model.new_cache()
    model.step(np.array([[1, 2, 3, 4, 5]]), caches)
    assert sum(c.k.nbytes + c.v.nbytes for c in caches) == sized.kv_bytes


def test_verify_and_its_seeded_bugs_on_the_fixture() -> None:
    """verify passes (its softmax and head-split items that need one W_Q or W_O skipped, saying why) and every seeded bug
    that can show on a mixture of attention heads is caught, softmax-no-max through the experts' W_q too."""
    from test_checkpoint import cli

    proc = cli("verify", str(FIXTURE), "--grad")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = cli("verify", str(FIXTURE), "--mutants")
    assert proc.returncode == 0 and "every seeded bug is caught" in proc.stdout, proc.stdout + proc.stderr
