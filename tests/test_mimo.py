"""MiMo-V2-Flash (`mimo_v2_flash`) and the two block fields it brought: `block.v_head_dim` (values narrower than
queries and keys) and `block.value_scale` (the values times a constant).

Expected numbers come from outside blockcli: the fixture tests/fixtures/hf/mimo_v2_flash (tests/fixtures/hf/generate.py:
logits, every layer, a decode step and gradients from transformers, checked by tests/test_checkpoint.py and
tests/test_gradients.py) and its fuzz draw; transformers' meta-device totals (tests/test_moe_families.py); hand
derivations of the cache and the FLOPs below; and an identity: scaling the values by c is scaling W_V and b_V by c.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from blockcli import DecoderBlock, load_config
from blockcli.block import block_parameter_shapes
from blockcli.config import ConfigError, parse_config

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "hf" / "mimo_v2_flash"
# the fixture's shapes (generate.py): d 16, 4 heads of 12 for queries and keys, values of 8; layers 0 and 2 sliding
# (window 3) with 2 K/V heads and sinks, layer 1 global with 1
D, H, D_H, D_V, KV = 16, 4, 12, 8, (2, 1, 2)


def test_the_fixture_reads_as_transformers_built_it() -> None:
    config = load_config(FIXTURE)
    for i, kv in enumerate(KV):
        b = config.layer_block(i)
        assert (b.n_kv_heads, b.head_dim, b.value_dim, b.value_scale) == (kv, D_H, D_V, 0.6)
        assert b.attention_sinks == (kv == 2) and b.sliding_window == (3 if kv == 2 else 0)
        shapes = block_parameter_shapes(b)
        assert shapes["w_v"] == (D, kv * D_V) and shapes["w_o"] == (H * D_V, D) and shapes["w_k"] == (D, kv * D_H)


ATTENTION_ROWS = ("q_proj", "k_proj", "v_proj", "q", "k", "v", "v_scale", "q_rope", "k_rope", "scores", "masked_scores",
                  "attn_weights", "attn_heads", "attn_concat", "attn_out")


def test_analytic_attention_rows_equal_the_executed_ones() -> None:
    """Every layer's attention rows (the mixture's differ by design: the analytic trace cannot know each expert's
    load, and runs them as one set), field by field but their step numbers."""
    from blockcli.trace import analytic_trace, run_trace, with_run

    def attention_rows(rows: list) -> list:
        return [(r.key, r.op, r.kind, r.input_shapes, r.output_shape, r.params, r.flops, r.matmul_flops, r.causal_flops,
                 r.bytes) for r in rows if r.key.split(".")[-1] in ATTENTION_ROWS]

    for attention in ("full", "chunked"):
        config = with_run(load_config(FIXTURE), batch=2, seq_len=5)
        executed = attention_rows(run_trace(config, attention=attention).rows)
        assert len(executed) >= 3 * 12 and executed == attention_rows(analytic_trace(config, attention).rows)


def test_the_trace_shows_narrow_values_and_their_scale() -> None:
    from blockcli.trace import run_trace, with_run

    traced = run_trace(with_run(load_config(FIXTURE), batch=2, seq_len=5), attention="full")
    rows = {r.key: r for r in traced.rows}
    assert rows["blocks.0.v"].output_shape == (2, 2, 5, D_V) and rows["blocks.1.v"].output_shape == (2, 1, 5, D_V)
    assert rows["blocks.0.v_scale"].op == "V × 0.6 (value_scale)"
    heads = rows["blocks.1.attn_heads"]  # weights·V: 2·d_v FLOPs a key, over the full 5 × 5 table
    assert heads.output_shape == (2, H, 5, D_V) and heads.matmul_flops == 2 * 2 * H * 5 * 5 * D_V
    assert rows["blocks.1.attn_out"].matmul_flops == 2 * 2 * 5 * H * D_V * D
    # K (h_kv·d_h) and V (h_kv·d_v) of every token, 5 of them (all inside the pass), float32
    assert traced.totals["kv_cache_bytes"] == 2 * 5 * sum(kv * (D_H + D_V) for kv in KV) * 4


def test_sizing_agrees_with_the_trace_and_the_hand_count() -> None:
    from blockcli.sizing import inference
    from blockcli.trace import run_trace, with_run

    config = load_config(FIXTURE)
    sized = inference(config, 9_260, 5, 1, "float32")
    traced = run_trace(with_run(config, batch=1, seq_len=5), attention="full").totals
    assert sized.prefill.total() == traced["matmul_flops"]
    assert sized.kv_bytes_per_token == sum(kv * (D_H + D_V) for kv in KV) * 4 and sized.narrow_values
    # a cache bounded by each layer's window: the sliding layers keep the last 3 of the 5 tokens
    assert sized.kv_bytes == sum(kv * (D_H + D_V) * (3 if kv == 2 else 5) for kv in KV) * 4
    # Q·Kᵀ (d_h) and weights·V (d_v) over the full 5 × 5 table, 4 heads, 3 layers
    assert sized.prefill.scores_full == 2 * 3 * H * 25 * (D_H + D_V)


def test_count_says_the_value_width_in_its_formulas(tmp_path: Path) -> None:
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-m", "blockcli", "count", str(FIXTURE), "--seq", "8"], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "d·h_kv·d_v" in run.stdout and "d·h·d_v" in run.stdout
    assert "K/V cache (attention layers only)" not in run.stdout and "L·h_kv·(d_h + d_v) × float32" in run.stdout


def _block(extra: dict, seed: int = 0) -> tuple[dict, dict]:
    data = {"d_model": 16, "n_heads": 4, "n_kv_heads": 2, "head_dim": 6, "v_head_dim": 5, "d_ff": 24,
            "norm": "rmsnorm", "activation": "swiglu", "rope": 0.5, **extra}
    cfg = parse_config({"block": data}).block
    rng = np.random.default_rng(seed)
    params = {k: rng.standard_normal(s) * 0.3 for k, s in block_parameter_shapes(cfg).items()}
    return cfg, params


def test_scaling_the_values_is_scaling_w_v_and_its_bias() -> None:
    scaled_cfg, params = _block({"value_scale": 0.37, "sliding_window": 3, "attention_sinks": True})
    plain_cfg, _ = _block({"sliding_window": 3, "attention_sinks": True})
    folded = {**params, "w_v": params["w_v"] * 0.37, "b_v": params["b_v"] * 0.37}
    x = np.random.default_rng(1).standard_normal((2, 7, 16))
    np.testing.assert_allclose(DecoderBlock(scaled_cfg, params)(x), DecoderBlock(plain_cfg, folded)(x),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("extra, field", [
    ({"attention_gate": True}, "block.v_head_dim"),  # the gate is as wide as the queries
    ({"sub_norms": True}, "block.v_head_dim"),
    ({"linear_attention": {}}, "block.v_head_dim"),  # another token mixer
    ({"v_head_dim": 0, "value_scale": 0.5, "parts": "mlp"}, "block.value_scale"),
    ({"v_head_dim": 0, "value_scale": 0.0}, "block.value_scale"),  # a positive number
])
def test_the_value_fields_belong_to_plain_attention(extra: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=f"^{field}"):
        _block(extra)
