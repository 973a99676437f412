"""DiffLlama (`diffllama`) and differential attention (`block.differential`, blockcli/differential.py).

Expected numbers come from outside blockcli: transformers 5.24's meta-device totals (DiffLlamaForCausalLM) for the
config class's defaults (the census) and a random config, the same derived by hand; the fixture
tests/fixtures/hf/diffllama (tests/fixtures/hf/generate.py: logits, every layer, a decode step and gradients, float32
and float64, checked by tests/test_checkpoint.py and tests/test_gradients.py); tests/reference.py's loop
implementation of differential attention; central differences for the gradients.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from blockcli import DecoderBlock, Model, load_config
from blockcli.config import ConfigError, parse_config
from blockcli.families.diffllama import lambda_init
from reference import differential_attention
from test_dense_families import assert_totals_are_transformers_own, mapped, total

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "hf" / "diffllama"

# DiffLlamaConfig's sizes
_SIZES = dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
              vocab_size=32000, max_position_embeddings=2048)
# a random DiffLlama: 6 heads of 10 over 2 K/V heads, q/k/v/o biases, GELU, tied, a linear RoPE scaling
_RANDOM = dict(hidden_size=24, num_attention_heads=6, num_key_value_heads=2, head_dim=10, intermediate_size=40,
               num_hidden_layers=3, vocab_size=300, max_position_embeddings=96, tie_word_embeddings=True,
               attention_bias=True, hidden_act="gelu", rms_norm_eps=1e-6,
               rope_parameters={"rope_type": "linear", "rope_theta": 5000.0, "factor": 2.0})


def _by_hand(d: int, h: int, kv: int, dh: int, f: int, L: int, V: int, tied: bool, bias: bool) -> int:
    """Per layer: Llama's q, k, v, o (biases on all four with attention_bias), the four λ vectors (d_h each), two
    norms, the gated MLP (3·d·f); the embeddings (and an untied head), the final norm."""
    q, k = h * dh, kv * dh
    attention = d * q + 2 * d * k + q * d + ((q + 2 * k + d) if bias else 0)
    layer = attention + 4 * dh + 2 * d + 3 * d * f
    return L * layer + V * d * (1 if tied else 2) + d


def test_counts_equal_transformers_totals_and_the_hand_formula() -> None:
    assert total("diffllama", _SIZES) == 1_204_885_504 == _by_hand(2048, 32, 32, 64, 8192, 16, 32000, False, False)
    assert total("diffllama", _RANDOM) == 28_020 == _by_hand(24, 6, 2, 10, 40, 3, 300, True, True)


@pytest.mark.torch
def test_the_totals_and_sizes_here_are_transformers_own() -> None:
    assert_totals_are_transformers_own("diffllama", _SIZES, (), 1_204_885_504, _RANDOM, 28_020)


def test_each_layer_has_its_lambda_init() -> None:
    config = parse_config(mapped("diffllama", _RANDOM))
    assert [config.layer_block(i).differential.lambda_init for i in range(3)] == [lambda_init(i) for i in range(3)]
    assert lambda_init(0) == pytest.approx(0.2) and lambda_init(2) == pytest.approx(0.8 - 0.6 * np.exp(-0.6))
    block = config.block
    assert (block.n_heads, block.n_kv_heads, block.head_dim, block.norm_eps) == (6, 2, 10, 1e-6)


@pytest.mark.parametrize("fields, named", [
    ({"num_key_value_heads": 3, "num_attention_heads": 6}, "num_key_value_heads"),  # odd: the values split in halves
    ({"attention_dropout": 0.1}, "attention_dropout"),  # DiffLlamaAttention refuses it too
])
def test_what_transformers_refuses_is_refused_naming_the_field(fields: dict, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        parse_config(mapped("diffllama", {**_RANDOM, **fields}))


_BLOCK = {"d_model": 12, "n_heads": 4, "n_kv_heads": 2, "head_dim": 6, "d_ff": 8, "norm": "rmsnorm", "norm_eps": 1e-5,
          "activation": "swiglu", "bias": {"qkv": True, "out": True, "mlp": False, "norm": False}, "rope": True,
          "rope_theta": 300.0, "differential": {"lambda_init": 0.37}}


@pytest.mark.parametrize("block, key", [
    ({"n_kv_heads": 1}, "n_kv_heads"),
    ({"qk_norm": "head"}, "qk_norm"),
    ({"attention_sinks": True}, "attention_sinks"),
    ({"lightning": {}}, "differential"),
])
def test_a_differential_block_refuses_what_it_cannot_have(block: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        parse_config({"block": {**_BLOCK, **block}})


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("attention", ["full", "chunked"])
def test_differential_attention_equals_the_loop_reference_and_decodes(seed: int, attention: str) -> None:
    cfg = parse_config({"block": _BLOCK, "run": {"dtype": "float64"}})
    block = DecoderBlock.from_config(cfg, seed=seed, dtype="float64", attention=attention)
    rng = np.random.default_rng(seed)
    for key in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):  # seeded small: make λ differ from λ_init
        block.params[key][...] = 0.5 * rng.standard_normal(6)
    p = {k: np.asarray(v, dtype=np.float64) for k, v in block.params.items()}
    x = rng.standard_normal((2, 6, 12))
    want = differential_attention(4, 2, 6, 300.0, 0.37, 1e-5, p, x)
    np.testing.assert_allclose(block.attn(x), want, rtol=0, atol=1e-12)
    cache = block.new_cache()
    got = [block.attn(x[:, :3], cache=cache)] + [block.attn(x[:, t:t + 1], cache=cache) for t in range(3, 6)]
    np.testing.assert_allclose(np.concatenate(got, axis=1), want, rtol=0, atol=1e-12)
    assert cache.v.shape == (2, 2, 6, 6)  # the cache keeps V as it is: h_kv heads of d_h


def test_token_by_token_decoding_equals_transformers_full_pass() -> None:
    with np.load(FIXTURE / "expected.npz") as data:
        ids, want = data["input_ids"], data["logits_float64"]
    model = Model.from_config(load_config(FIXTURE), weights=FIXTURE, dtype="float64")
    caches = model.new_cache()
    got = [model.step(ids[:, :2], caches)] + [model.step(ids[:, t:t + 1], caches) for t in range(2, ids.shape[1])]
    np.testing.assert_allclose(np.concatenate(got, axis=1), want, rtol=1e-9, atol=1e-12)


def test_the_lambdas_and_lambda_init_matter_for_the_fixture() -> None:
    """Without its λ vectors (λ = λ_init) or with another λ_init the fixture's logits move: both are read."""
    with np.load(FIXTURE / "expected.npz") as data:
        ids, want = data["input_ids"], data["logits_float64"]
    model = Model.from_config(load_config(FIXTURE), weights=FIXTURE, dtype="float64")
    np.testing.assert_allclose(model(ids), want, rtol=1e-9, atol=1e-12)
    for key in ("blocks.0.lambda_q1", "blocks.1.lambda_q2"):
        model.params[key][...] = 0.0
    assert np.abs(model(ids) - want).max() > 1e-6


@pytest.mark.parametrize("attention", ["full", "chunked"])
def test_the_gradients_equal_central_differences(attention: str) -> None:
    """Every parameter's gradient (the four λ vectors, the fused Q/K/V and their biases, W_O, …) and the input's against
    central differences of ⟨block(x), dy⟩, through either attention kernel's backward."""
    cfg = parse_config({"block": _BLOCK, "run": {"dtype": "float64"}})
    block = DecoderBlock.from_config(cfg, seed=3, dtype="float64", attention=attention)
    rng = np.random.default_rng(1)
    for key, value in block.params.items():  # seeded at zeros or small: make them matter
        if key.startswith(("lambda", "b_")):
            value[...] = 0.5 * rng.standard_normal(value.shape)
    x, dy = rng.standard_normal((1, 5, 12)), rng.standard_normal((1, 5, 12))
    dx, grads = block.vjp(x, dy)
    eps = 1e-6

    def moved(a: np.ndarray, at: tuple, by: float) -> float:
        keep = a[at]
        a[at] = keep + by
        value = float(np.sum(block(x) * dy))
        a[at] = keep
        return value

    for key, param in block.params.items():  # views into the fused Q/K/V included: indexed, never reshaped
        for i in range(0, param.size, max(1, param.size // 6)):
            at = np.unravel_index(i, param.shape)
            numeric = (moved(param, at, eps) - moved(param, at, -eps)) / (2 * eps)
            assert abs(numeric - grads[key][at]) < 1e-6, (key, at)
    for i in range(0, x.size, 7):
        at = np.unravel_index(i, x.shape)
        assert abs((moved(x, at, eps) - moved(x, at, -eps)) / (2 * eps) - dx[at]) < 1e-6


def test_train_runs_and_count_train_refuses_in_one_line() -> None:
    from test_checkpoint import cli

    proc = cli("train", str(FIXTURE), "--steps", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = cli("count", str(FIXTURE), "--train")  # the training step's activations of these layers: not modelled
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "differential" in proc.stderr


def test_verify_passes_and_catches_its_seeded_bugs() -> None:
    from test_checkpoint import cli

    proc = cli("verify", str(FIXTURE), "--grad")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = cli("verify", str(FIXTURE), "--mutants", "--grad")
    assert proc.returncode == 0 and "every seeded bug is caught" in proc.stdout, proc.stdout + proc.stderr


# ----------------------------------------------------------------------------- trace and sizing


def test_analytic_trace_rows_equal_the_executed_ones() -> None:
    from blockcli.trace import analytic_trace, run_trace, with_run

    for attention in ("full", "chunked"):
        config = with_run(load_config(FIXTURE), batch=2, seq_len=5)
        assert run_trace(config, attention=attention).rows == analytic_trace(config, attention).rows


def test_the_trace_shows_one_softmax_over_both_value_halves_and_the_pairs() -> None:
    from blockcli.trace import run_trace, with_run

    traced = run_trace(with_run(load_config(FIXTURE), batch=2, seq_len=5), attention="full")
    rows = {r.key: r for r in traced.rows}
    assert rows["blocks.0.v_both"].output_shape == (2, 2, 5, 16)  # (B, h_kv, T, 2·d_h)
    heads = rows["blocks.0.attn_heads"]
    assert heads.output_shape == (2, 4, 5, 16) and heads.matmul_flops == 2 * 2 * 4 * 5 * 5 * 16
    combine = rows["blocks.1.diff_combine"]
    assert combine.output_shape == (2, 2, 5, 16) and f"{lambda_init(1):.6g}" in combine.op
    assert rows["blocks.0.diff_norm"].symbolic == "(B, h/2, T, 2·d_h)"
    assert traced.totals["kv_cache_bytes"] == 2 * 2 * 5 * 2 * 16 * 4  # L·B·T·(K + V of h_kv·d_h), float32


def test_sizing_counts_the_scores_once_and_weights_times_both_halves() -> None:
    from blockcli.sizing import inference
    from blockcli.trace import run_trace, with_run

    config = load_config(FIXTURE)
    sized = inference(config, 7_216, 5, 1, "float32")
    traced = run_trace(with_run(config, batch=1, seq_len=5), attention="full").totals
    assert sized.prefill.total() == traced["matmul_flops"] and sized.kv_bytes == traced["kv_cache_bytes"]
    # Q·Kᵀ (d_h) and weights·[V | V'] (2·d_h) over the full 5 × 5 table, 4 heads, 2 layers
    assert sized.prefill.scores_full == 2 * 2 * 4 * 25 * (8 + 16)
