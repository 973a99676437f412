"""Sizing a workload (count --seq/--batch/--dtype/--train): every figure against a derivation written
here from the hyperparameters, and the published figures where there are some (Llama-3-8B's K/V
cache, ZeRO's bytes per parameter and its 7.5B example, Korthikanti et al.'s activation bytes for
GPT-3 175B, the Megatron training-FLOPs formula, Kaplan et al.'s 6·N)."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from blockcli.block import DecoderBlock
from blockcli.cli import app
from blockcli.config import parse_config
from blockcli.sources import load_config
from blockcli.sizing import activation_terms, parse_size, state_bytes, states_per_device
from blockcli.trace import run_trace
from conftest import ROOT

runner = CliRunner()
GPT3 = str(ROOT / "configs" / "gpt3-175b.yaml")


def count_json(*args):
    out = runner.invoke(app, ["count", *args, "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


# Llama-3-8B (Meta's config.json): 32 layers, d 4096, 32 query heads, 8 KV heads of 128, d_ff 14336,
# vocabulary 128,256, untied head; 8,030,261,248 parameters.
L, D, H, H_KV, D_H, D_FF, V = 32, 4096, 32, 8, 128, 14336, 128256


def test_llama3_8b_kv_cache_at_8k_in_bf16_is_exactly_one_gib():
    data = count_json("llama-3-8b", "--seq", "8192", "--batch", "1", "--dtype", "bfloat16")
    kv = data["inference"]["kv_cache"]
    assert kv["bytes_per_token"] == 2 * L * H_KV * D_H * 2 == 131_072  # K and V, 8 heads of 128, 2 bytes
    assert kv["bytes"] == 2**30
    assert data["inference"]["parameter_bytes"] == 2 * 8_030_261_248


def test_sliding_window_bounds_the_kv_cache_and_the_attention_work():
    """Mistral-7B's window of 4096: a cache keeps the last 4096 tokens (as transformers' sliding-window
    cache does), a decode step reads 4096 keys, and query t of a prefill sees min(t + 1, 4096) keys."""
    T, W, B = 16384, 4096, 2
    inf = count_json("mistral-7b", "--seq", str(T), "--batch", str(B), "--dtype", "bfloat16")["inference"]
    L_, d, h, h_kv, d_h, d_ff, vocab = 32, 4096, 32, 8, 128, 14336, 32000
    per_token = 2 * L_ * h_kv * d_h * 2  # K and V of 8 heads of 128 in 32 layers, bfloat16
    assert inf["kv_cache"]["bytes"] == per_token * W * B
    weights = d * (h * d_h + 2 * h_kv * d_h) + h * d_h * d + 3 * d * d_ff  # Q, K, V, O, gated MLP
    pair = 4 * L_ * h * d_h  # 2·d_h for Q·Kᵀ and 2·d_h for weights·V, per (query, key) pair, all layers and heads
    windowed_pairs = sum(min(t + 1, W) for t in range(T))
    dense = 2 * B * T * (L_ * weights + d * vocab)
    assert inf["prefill"]["causal"]["flops"] == dense + B * pair * windowed_pairs
    assert inf["prefill"]["full"]["flops"] == dense + B * pair * T * T
    assert inf["decode_step"]["flops"] == B * (2 * (L_ * weights + d * vocab) + pair * W)


def test_kv_dtype_and_int4_packing():
    data = count_json("llama-3-8b", "--seq", "8192", "--batch", "4", "--dtype", "int4", "--kv-dtype", "float8")
    inf = data["inference"]
    assert inf["kv_cache"]["bytes"] == 4 * 8192 * 2 * L * H_KV * D_H * 1
    assert inf["parameter_bytes"] == 8_030_261_248 // 2  # two 4-bit weights per byte
    assert inf["parameter_bytes_by_dtype"]["float32"] == 4 * 8_030_261_248


def test_llama3_8b_prefill_and_decode_flops():
    T = 8192
    inf = count_json("llama-3-8b", "--seq", str(T), "--batch", "1", "--dtype", "bfloat16")["inference"]
    # multiply-adds per token: Q (d·h·d_h), K and V (d·h_kv·d_h each), O, three MLP matrices; head d·V
    per_layer = D * H * D_H + 2 * D * H_KV * D_H + H * D_H * D + 3 * D * D_FF
    dense = 2 * (L * per_layer + D * V)
    # one new token attends to T keys: Q·Kᵀ and weights·V, 2·d_h FLOPs each per head and key
    assert inf["decode_step"]["flops"] == dense + L * H * 4 * D_H * T == 19_304_284_160
    assert inf["decode_step"]["macs"] == inf["decode_step"]["flops"] // 2
    assert inf["prefill"]["full"]["flops"] == T * dense + L * H * 4 * D_H * T * T
    assert inf["prefill"]["causal"]["flops"] == T * dense + L * H * 4 * D_H * T * (T + 1) // 2
    assert inf["prefill_per_token"]["full"]["flops"] == inf["prefill"]["full"]["flops"] // T


def test_decode_steps_add_up_to_the_causal_prefill():
    cfg = ROOT / "configs" / "tiny-gpt.yaml"
    T = 7
    prefill = count_json(str(cfg), "--seq", str(T), "--batch", "3")["inference"]["prefill"]["causal"]["flops"]
    steps = sum(count_json(str(cfg), "--seq", str(t), "--batch", "3")["inference"]["decode_step"]["flops"]
                for t in range(1, T + 1))
    assert steps == prefill


@pytest.mark.parametrize("name", ["tiny-gpt.yaml", "gqa-swiglu-rope.yaml"])
def test_prefill_flops_equal_the_matmuls_of_a_real_traced_pass(name):
    # the trace records the shapes of the real arrays; its matmul FLOPs are counted from them
    cfg = load_config(ROOT / "configs" / name)
    traced = run_trace(cfg).totals
    inf = count_json(str(ROOT / "configs" / name))["inference"]
    assert inf["prefill"]["full"]["flops"] == traced["matmul_flops"]
    assert inf["prefill"]["causal"]["flops"] == traced["causal_matmul_flops"]


# ----------------------------------------------------------------------------- model states (ZeRO)


@pytest.mark.parametrize("optimizer,precision,expected", [
    ("adamw", "mixed", 16),  # Rajbhandari et al. 2020 §3.1: 2Ψ + 2Ψ + 12Ψ
    ("adamw", "fp32", 16),  # 4 weights + 4 gradients + 4 + 4 moments
    ("sgd", "fp32", 8), ("sgd-momentum", "fp32", 12),
    ("sgd", "mixed", 8), ("sgd-momentum", "mixed", 12),  # 2 + 2 + 4 master (+ 4 momentum)
])
def test_bytes_per_parameter(optimizer, precision, expected):
    assert state_bytes(optimizer, precision).total == expected


def test_zero_paper_figure_1_example():
    # ZeRO, Figure 1: Ψ = 7.5B, N_d = 64, K = 12: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB per device
    psi, per = 7_500_000_000, state_bytes("adamw", "mixed")
    gb = [sum(states_per_device(psi, per, 64, stage).values()) / 1e9 for stage in range(4)]
    assert [round(x, 1) for x in gb] == [120.0, 31.4, 16.6, 1.9]
    assert gb[1] == pytest.approx(psi * (2 + 2 + 12 / 64) / 1e9)


def test_zero_stage_3_in_the_cli():
    data = count_json("llama-3-8b", "--train", "--dp", "8", "--zero", "3", "--seq", "8192", "--batch", "1")
    states = data["training"]["states_per_device"]
    # 16 bytes a parameter over 8 devices, and the largest module (the 128,256 × 4,096 embedding or LM head) gathered
    assert states["total"] == pytest.approx(16 * 8_030_261_248 / 8 + 4 * V * D, abs=3)


# ----------------------------------------------------------------------------- activations (Korthikanti)

S, HID, A = 2048, 12288, 96  # GPT-3 175B: sequence, hidden size, heads


@pytest.mark.parametrize("recompute,per_layer", [
    ("none", S * HID * (34 + 5 * A * S // HID)),  # Korthikanti et al. 2022, eq. (1): s·b·h·(34 + 5·a·s/h)
    ("selective", 34 * S * HID),  # §5: 34·s·b·h
    ("full", 2 * S * HID),  # §4.3: only the layer input, 2·s·b·h
])
def test_gpt3_175b_activation_bytes_per_layer(recompute, per_layer):
    act = count_json(GPT3, "--train", "--recompute", recompute)["training"]["activations"]
    assert act["per_layer"] == per_layer
    V = 50257
    outside = 2 * S * HID + 2 * S * HID + 4 * S * V  # final LayerNorm input, head input, float32 logits
    assert act["total"] == 96 * per_layer + outside


def test_variant_terms_gqa_swiglu_rmsnorm_without_dropout(tmp_path):
    path = tmp_path / "variant.yaml"
    path.write_text("block: {d_model: 64, n_heads: 8, n_kv_heads: 2, d_ff: 96, activation: swiglu, "
                    "norm: rmsnorm, bias: false}\nrun: {batch: 3, seq_len: 10}\n")
    b, s, d, h, h_kv, d_h, d_ff = 3, 10, 64, 8, 2, 8, 96
    for precision, beta in (("mixed", 2), ("fp32", 4)):
        act = count_json(str(path), "--train", "--precision", precision)["training"]["activations"]
        # two norm inputs, QKV input, Q and K, V, output-projection input, MLP input: d- and d_h-wide;
        # the softmax output (no dropout: no masks, no dropout output); four d_ff-wide gated tensors
        expected = (beta * s * b * (4 * d + (h + h_kv) * d_h + h_kv * d_h + h * d_h + 4 * d_ff)
                    + beta * b * h * s * s)
        assert act["per_layer"] == expected
        assert act["total"] == expected  # a lone block has no head


@pytest.mark.parametrize("placement,norm_inputs,branch_inputs", [("pre", 2, 2), ("post", 2, 2), ("parallel", 1, 2),
                                                                   ("parallel_shared", 1, 1)])
def test_placements_keep_their_own_norm_inputs(placement, norm_inputs, branch_inputs):
    # the default block (d 512, 8 heads of 64, GELU d_ff 2048, no dropout) at s = 5, b = 2, 16-bit;
    # parallel_shared: one norm's output is the input of Q, K, V and of the MLP, kept once
    block = parse_config({"block": {"placement": placement}}).block
    s, b, d, h, d_ff = 5, 2, 512, 8, 2048
    # norm inputs, QKV and MLP inputs, Q and K, V, W_O input; softmax output; GELU input and output
    expected = 2 * s * b * (norm_inputs * d + branch_inputs * d + 2 * d + d + d + 2 * d_ff) + 2 * b * h * s * s
    assert sum(t.bytes for t in activation_terms(block, s, b, "mixed", "none")) == expected
    assert sum(t.bytes for t in activation_terms(block, s, b, "fp32", "full")) == 4 * s * b * d


# ----------------------------------------------------------------------------- training FLOPs


def test_gpt3_175b_training_flops_match_megatron_formula_and_kaplan():
    B, s, l, h, V = 1, 2048, 96, 12288, 50257
    step = count_json(GPT3, "--train")["training"]["step"]
    # Narayanan et al. 2021 / Korthikanti et al. 2022: 72·B·s·l·h²·(1 + s/6h + V/12hl), as integers
    assert step["total"]["full"]["flops"] == 72 * B * s * l * h * h + 12 * B * s * s * l * h + 6 * B * s * h * V
    full = count_json(GPT3, "--train", "--recompute", "full")["training"]["step"]
    # full recomputation: 96·B·s·l·h²·(1 + s/6h + V/16hl)
    assert full["total"]["full"]["flops"] == 96 * B * s * l * h * h + 16 * B * s * s * l * h + 6 * B * s * h * V
    # selective recomputation repeats the forward of the s²-terms only, Q·Kᵀ and weights·V: 4·B·s²·h per
    # layer (Korthikanti et al. 2022, appendix A: "all terms with s² are recomputed")
    selective = count_json(GPT3, "--train", "--recompute", "selective")["training"]["step"]
    assert selective["total"]["full"]["flops"] == step["total"]["full"]["flops"] + 4 * B * s * s * h * l
    non_embedding = 174_604_259_328 - V * h - s * h
    assert step["six_n"] == 6 * non_embedding * B * s  # Kaplan et al. 2020: C ≈ 6·N per token
    assert step["total"]["full"]["flops"] / step["six_n"] == pytest.approx(1 + s / (6 * h) + V / (12 * h * l),
                                                                             rel=1e-3)


def test_data_parallel_multiplies_tokens_and_flops():
    one = count_json(GPT3, "--train")["training"]
    eight = count_json(GPT3, "--train", "--dp", "8")["training"]
    assert eight["tokens_per_step"] == 8 * one["tokens_per_step"] == 8 * 2048
    assert eight["step"]["total"]["full"]["flops"] == 8 * one["step"]["total"]["full"]["flops"]
    assert eight["activations"] == one["activations"]  # a device holds its own micro-batch's


# ----------------------------------------------------------------------------- budget gate and errors


@pytest.mark.parametrize("text,value", [("80GiB", 80 * 2**30), ("40GB", 40 * 10**9), ("1.5TiB", 3 * 2**39),
                                        ("123", 123), ("512 MiB", 512 * 2**20)])
def test_parse_size(text, value):
    assert parse_size(text) == value


def test_max_memory_gate():
    args = ["count", "llama-3-8b", "--seq", "8192", "--batch", "1", "--dtype", "bfloat16"]
    assert runner.invoke(app, [*args, "--max-memory", "80GiB"]).exit_code == 0
    over = runner.invoke(app, [*args, "--max-memory", "16GiB"])  # 15 GiB weights + 1 GiB K/V + activations
    assert over.exit_code == 1 and "--max-memory 16GiB" in over.stderr
    train = runner.invoke(app, [*args, "--train", "--max-memory", "80GiB"])  # 16 B/param alone is 120 GiB
    assert train.exit_code == 1 and "training memory per device" in train.stderr
    assert runner.invoke(app, [*args, "--max-memory", "lots"]).exit_code == 2
    data = json.loads(runner.invoke(app, [*args, "--max-memory", "16GiB", "--json"]).stdout)
    assert data["budget"]["memory_bytes"] > 16 * 2**30 and data["budget"]["within"] is False and data["budget"]["max_memory_bytes"] == 16 * 2**30


@pytest.mark.parametrize("args,message", [
    (["--optimizer", "sgd"], "--train"),
    (["gpt2", "--seq", "2048"], "max_positions"),
    (["--dtype", "float16x"], "--dtype"),
    (["--zero", "4", "--train"], "--zero"),
    (["--train", "--dp", "0"], "--dp"),
])
def test_bad_workload_options(args, message):
    out = runner.invoke(app, ["count", *args])
    assert out.exit_code == 2 and message in out.stderr


# ----------------------------------------------------------------------------- attention dropout


def test_attention_dropout_acts_on_the_probabilities_in_training_mode_only():
    cfg = parse_config({"block": {"d_model": 8, "n_heads": 2, "d_ff": 12, "attention_dropout": 0.5},
                        "run": {"dtype": "float64", "batch": 1, "seq_len": 4}})
    block = DecoderBlock.from_config(cfg)
    x = np.random.default_rng(1).standard_normal((1, 4, 8))
    plain = DecoderBlock.from_config(parse_config({"block": {"d_model": 8, "n_heads": 2, "d_ff": 12},
                                                   "run": {"dtype": "float64"}}))
    assert np.array_equal(block(x), plain(x))  # evaluation is unaffected
    assert np.array_equal(block(x, train=True, rng=np.random.default_rng(5)),
                          block(x, train=True, rng=np.random.default_rng(5)))
    # the same step by hand: probabilities P, kept where the seeded draw >= 0.5, scaled by 1/(1 - 0.5)
    p = block.params
    n1 = block.ln1(x)
    q, k, v = (np.einsum("btd,de->bte", n1, p[f"w_{n}"]) + p[f"b_{n}"] for n in "qkv")
    split = lambda a: a.reshape(1, 4, 2, 4).transpose(0, 2, 1, 3)  # noqa: E731
    q, k, v = split(q), split(k), split(v)
    scores = q @ k.transpose(0, 1, 3, 2) / 2.0
    scores = np.where(np.tril(np.ones((4, 4), bool)), scores, -np.inf)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    keep = np.random.default_rng(5).random(probs.shape) >= 0.5
    heads = np.where(keep, probs / 0.5, 0) @ v
    attn = heads.transpose(0, 2, 1, 3).reshape(1, 4, 8) @ p["w_o"] + p["b_o"]
    h = x + attn
    expected = h + block.mlp(block.ln2(h))
    assert np.max(np.abs(block(x, train=True, rng=np.random.default_rng(5)) - expected)) < 1e-12


def test_zero3_adds_the_largest_module_gathered_whole():
    """DeepSpeed's ZeRO-3 estimator adds 4 bytes × the largest module's own parameters: GPT-3's token
    embedding (50,257 × 12,288); Mixtral's fused routed experts of one layer (8 × 3 × 4,096 × 14,336)."""
    gpt3 = count_json(GPT3, "--train", "--dp", "64", "--zero", "3")["training"]["states_per_device"]
    assert gpt3["gathered_layer"] == 4 * 50257 * 12288
    assert gpt3["total"] == gpt3["weights"] + gpt3["gradients"] + gpt3["optimizer"] + gpt3["gathered_layer"]
    mixtral = count_json("mixtral-8x7b", "--train", "--dp", "64", "--zero", "3")["training"]
    assert mixtral["states_per_device"]["gathered_layer"] == 4 * 8 * 3 * 4096 * 14336
    assert any("routed experts" in n for n in mixtral["notes"])
    assert "gathered_layer" not in count_json(GPT3, "--train", "--dp", "64", "--zero", "2")["training"]["states_per_device"]


def test_a_windowed_cache_says_what_transformers_keeps():
    out = runner.invoke(app, ["count", "configs/alternating-window.yaml", "--seq", "200", "-f", "markdown"])
    assert out.exit_code == 0 and "keeps a whole prefill's 200 until the next update" in out.stdout
    short = runner.invoke(app, ["count", "configs/alternating-window.yaml", "--seq", "100", "-f", "markdown"])
    assert "whole prefill" not in short.stdout
