"""Multi-head latent attention (DeepSeek-V2/V3) across the schema, count, sizing, trace and verify.

Expected values are derived here by hand from DeepSeek-V2's §2.1 equations and transformers'
DeepseekV3Attention (its module sizes, `yarn_apply_mscale`), never from blockcli's output.
"""

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from blockcli.block import DecoderBlock
from blockcli.cli import app
from blockcli.config import parse_config
from blockcli.count import count_parameters
from blockcli.trace import analytic_trace, run_trace
from blockcli.verify import verify
from conftest import config_error_message

runner = CliRunner()

# DeepSeek-V3's attention (its config.json): d 7168, 128 heads, r_q 1536, r_kv 512, d_nope 128, d_rope 64, d_v 128
V3_MLA = {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
          "v_head_dim": 128}
V3_BLOCK = {"d_model": 7168, "n_heads": 128, "d_ff": 18432, "norm": "rmsnorm", "norm_eps": 1e-6,
            "activation": "swiglu", "bias": False, "rope": True, "rope_layout": "interleaved", "mla": V3_MLA}
TINY = {"d_model": 24, "n_heads": 3, "d_ff": 40, "norm": "rmsnorm", "activation": "swiglu", "bias": False,
        "rope": True, "mla": {"q_lora_rank": 10, "kv_lora_rank": 6, "qk_nope_head_dim": 4, "qk_rope_head_dim": 4,
                              "v_head_dim": 5}}


def test_deepseek_v3_attention_per_layer_by_hand():
    rows = {c.name: c for c in count_parameters(parse_config({"block": V3_BLOCK})).components}
    q_a, q_norm, q_b = 7168 * 1536, 1536, 1536 * 128 * (128 + 64)
    kv_a, kv_norm, kv_b = 7168 * (512 + 64), 512, 512 * 128 * (128 + 128)
    o = 128 * 128 * 7168
    assert [rows[k].count for k in ("attn.q_a", "attn.q_a_norm", "attn.q_b", "attn.kv_a", "attn.kv_a_norm",
                                    "attn.kv_b", "attn.o")] == [q_a, q_norm, q_b, kv_a, kv_norm, kv_b, o]
    assert rows["attention"].count == 187_107_328 == q_a + q_norm + q_b + kv_a + kv_norm + kv_b + o
    assert rows["attention"].expression == ("d·h·d_v + h·r_q·d_nope + h·r_kv·d_nope + h·r_q·d_rope + h·r_kv·d_v "
                                            "+ d·r_q + d·r_kv + d·d_rope + r_q + r_kv")


def test_full_query_projection_and_biases_of_the_down_projections():
    block = {**TINY, "bias": {"qkv": True, "out": True, "mlp": False, "norm": False},
             "mla": {**TINY["mla"], "q_lora_rank": 0}}
    result = count_parameters(parse_config({"block": block}))
    rows = {c.name: c for c in result.components}
    assert "attn.q_a" not in rows and rows["attn.q"].count == 24 * 3 * (4 + 4)  # no bias: DeepSeek's q_proj has none
    assert rows["attn.kv_a"].count == 24 * (6 + 4) + (6 + 4)
    assert rows["attn.o"].count == 3 * 5 * 24 + 24
    assert result.reconciled.match


def _count_json(tmp_path, block, *args):
    path = tmp_path / "mla.yaml"
    path.write_text(json.dumps({"block": block, "model": {"n_layers": 61, "vocab_size": 129280,
                                                          "positions": "rope", "max_positions": 163840,
                                                          "tie_embeddings": False}}))
    out = runner.invoke(app, ["count", str(path), *args, "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)["inference"]


def test_kv_cache_two_ways_for_deepseek_v3(tmp_path):
    inf = _count_json(tmp_path, V3_BLOCK, "--seq", "4096", "--batch", "2", "--dtype", "bfloat16")
    kv = inf["kv_cache"]
    # the latent: 512 + 64 per layer (DeepSeek-V2 §2.1.2: (d_c + d_h^R)·l elements per token)
    assert kv["bytes_per_token"] == 61 * (512 + 64) * 2 == 70_272
    assert kv["bytes"] == 70_272 * 4096 * 2
    # expanded: 128 heads' keys (128 + 64) and values (128) in 61 layers
    assert kv["expanded"]["bytes_per_token"] == 61 * 128 * (192 + 128) * 2 == 4_997_120
    assert kv["expanded"]["bytes"] == 4_997_120 * 4096 * 2
    assert "MLA-aware" in kv["stores"] and "expanded" in kv["expanded"]["stores"]


def test_flops_are_those_of_the_low_rank_products(tmp_path):
    T, B = 64, 1
    inf = _count_json(tmp_path, V3_BLOCK, "--seq", str(T), "--batch", str(B))
    d, h, d_ff, V_ = 7168, 128, 18432, 129280
    per_layer = (7168 * 1536 + 1536 * h * 192 + d * 576 + 512 * h * 256 + h * 128 * d  # attention's products
                 + 3 * d * d_ff)  # this block's MLP (dense here)
    dense = 2 * (61 * per_layer + d * V_)
    pair = 61 * h * 2 * (192 + 128)  # Q·Kᵀ over d_h = 192, weights·V over d_v = 128
    assert inf["decode_step"]["flops"] == dense + pair * T
    assert inf["prefill"]["causal"]["flops"] == T * dense + pair * T * (T + 1) // 2


def test_prefill_flops_equal_the_matmuls_of_a_traced_pass(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(json.dumps({"block": TINY, "run": {"batch": 2, "seq_len": 6}}))
    traced = run_trace(parse_config({"block": TINY, "run": {"batch": 2, "seq_len": 6}})).totals
    inf = json.loads(runner.invoke(app, ["count", str(path), "--json"]).stdout)["inference"]
    assert inf["prefill"]["full"]["flops"] == traced["matmul_flops"]
    assert inf["prefill"]["causal"]["flops"] == traced["causal_matmul_flops"]


def test_softmax_scale_with_yarn_mscale_as_transformers():
    # DeepSeek-V3's rope_scaling: yarn, factor 40, mscale 1.0, mscale_all_dim 1.0
    scaling = {"type": "yarn", "factor": 40.0, "original_max_positions": 4096, "mscale": 1.0, "mscale_all_dim": 1.0,
               "beta_fast": 32.0, "beta_slow": 1.0}
    b = parse_config({"block": {**V3_BLOCK, "rope_scaling": scaling}}).block
    mscale = 0.1 * 1.0 * math.log(40.0) + 1.0  # yarn_get_mscale(40, 1.0)
    assert b.score_scale == pytest.approx(192 ** -0.5 * mscale * mscale, rel=1e-15)
    assert parse_config({"block": V3_BLOCK}).block.score_scale == pytest.approx(192 ** -0.5, rel=1e-15)
    without = {**scaling, "mscale_all_dim": 0.0}  # mscale_all_dim 0: no change of the softmax scale
    assert parse_config({"block": {**V3_BLOCK, "rope_scaling": without}}).block.score_scale == \
        pytest.approx(192 ** -0.5, rel=1e-15)


def test_trace_rows_are_named_with_the_latent_shapes():
    cfg = parse_config({"block": TINY, "run": {"batch": 2, "seq_len": 5}})
    rows = {r.key: r for r in run_trace(cfg).rows}
    assert rows["kv_a"].output_shape == (2, 5, 6 + 4) and rows["kv_a"].symbolic == "(B, T, r_kv + d_rope)"
    assert rows["k_rope"].output_shape == (2, 1, 5, 4) and rows["k_rope"].symbolic == "(B, 1, T, d_rope)"
    assert rows["kv_proj"].output_shape == (2, 5, 3 * (4 + 5))
    assert rows["attn_heads"].output_shape == (2, 3, 5, 5) and rows["attn_heads"].symbolic == "(B, h, T, d_v)"
    assert rows["kv_proj"].matmul_flops == 2 * 2 * 5 * 6 * 3 * 9  # (B·T) latents of r_kv through W_kv_b
    assert analytic_trace(cfg).rows == run_trace(cfg).rows


def test_kv_cache_holds_the_latent_and_decodes_as_the_full_pass():
    cfg = parse_config({"block": TINY, "run": {"batch": 2, "seq_len": 7, "dtype": "float64"}})
    block = DecoderBlock.from_config(cfg)
    x = np.random.default_rng(3).standard_normal((2, 7, 24))
    cache = block.new_cache()
    steps = np.concatenate([block.step(x[:, t:t + 1], cache) for t in range(7)], axis=1)
    assert cache.k.shape == (2, 1, 7, 6) and cache.v.shape == (2, 1, 7, 4)  # norm(c) and RoPE'd k_R
    assert np.abs(steps - block(x)).max() < 1e-12


def test_verify_passes_and_reports_latent_widths():
    report = verify(parse_config({"block": TINY}))
    assert report.passed, [(c.id, c.measured) for c in report.checks if not c.passed]
    checks = {c.id: c for c in report.checks}
    assert "K/V latent | RoPE key 10 (expected 10)" in checks[1].measured
    assert checks[2].passed and "shared key" in checks[2].measured


def test_verify_scales_deepseek_v3_attention_down():
    report = verify(parse_config({"block": V3_BLOCK}), only={1, 2, 8, 11, 12, 15})
    assert report.passed and any("scaled down" in n for n in report.notes)


@pytest.mark.parametrize("change,field", [
    ({"mla": {"kv_lora_rank": 4, "qk_nope_head_dim": 2, "qk_rope_head_dim": 3, "v_head_dim": 2}},
     "block.mla.qk_rope_head_dim"),
    ({"mla": {"kv_lora_rank": 4, "qk_rope_head_dim": 2, "v_head_dim": 2}}, "block.mla.qk_nope_head_dim"),
    ({"mla": {**TINY["mla"], "kv_rank": 3}}, "block.mla.kv_rank"),
    ({"mla": 4}, "block.mla"),
    # without rotary positions latent attention is NoPE (Kimi-Linear, tests/test_kimi_linear.py); its indexer is not
    ({"rope": False, "mla": {**TINY["mla"], "q_lora_rank": 4, "index_heads": 2, "index_head_dim": 4,
                             "index_topk": 2}}, "block.mla.index_heads"),
    ({"rope": 0.5}, "block.rope"),
    ({"n_kv_heads": 1}, "block.n_kv_heads"),
    ({"head_dim": 7}, "block.head_dim"),
    ({"qk_norm": "head"}, "block.qk_norm"),
    ({"attention_scale": 0.5}, "block.attention_scale"),
])
def test_bad_latent_attention_configs_name_the_field(change, field):
    message = config_error_message(lambda: parse_config({"block": {**TINY, **change}}), change)
    assert message.startswith(field + ":"), message


@pytest.mark.parametrize("seq, attention", [(300, "full"), (300, "chunked"), (64, "auto")])
def test_shapes_only_peak_estimate_within_1_5x_of_measured(seq, attention):
    block = {**TINY, "d_model": 64, "n_heads": 4, "mla": {"q_lora_rank": 24, "kv_lora_rank": 32, "qk_nope_head_dim": 16,
                                                          "qk_rope_head_dim": 8, "v_head_dim": 16}}
    cfg = parse_config({"block": block, "run": {"batch": 2, "seq_len": seq}})
    measured = run_trace(cfg, attention=attention).peak_bytes
    estimate = analytic_trace(cfg, attention).peak_bytes
    assert measured / 1.5 <= estimate <= 1.5 * measured, (estimate, measured)
