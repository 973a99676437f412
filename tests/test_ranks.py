"""Model parallelism (count --tp/--pp/--sp/--ep/--micro-batches/--vpp): each device's parameters, model states
and activations against derivations written here from the hyperparameters — Korthikanti et al. 2022's Table 2
for GPT-3 175B, Megatron-LM's theoretical-memory formula (reproduced below from
megatron/training/theoretical_memory_usage.py, not imported) with the differences its conventions make,
and hand counts of Llama-2-70B's and Mixtral-8x7B's shards."""

import json
import math

import pytest
from typer.testing import CliRunner

from blockcli.cli import app
from conftest import ROOT

runner = CliRunner()
GPT3 = str(ROOT / "configs" / "gpt3-175b.yaml")


def parallel(*args):
    out = runner.invoke(app, ["count", *args, "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)["parallel"]


def error(*args):
    out = runner.invoke(app, ["count", *args])
    assert out.exit_code == 2, out.output
    return out.stderr


def padded(V, tp):
    step = 128 * tp
    return -(-V // step) * step


# GPT-3 175B: 96 layers, d 12,288, 96 heads, d_ff 4·d, learned positions 2,048, V 50,257, tied, biases everywhere
L, D, A, S, V = 96, 12288, 96, 2048, 50257


def gpt3_layer_shard(tp):
    """One layer on one tensor-parallel rank: Q, K, V and W_up by columns (with their biases), W_O and W_down
    by rows; b_o, b_down and the two LayerNorms (gamma and beta) whole."""
    return (3 * D * D + 3 * D + D * D + 4 * D * D + 4 * D + 4 * D * D) // tp + D + D + 4 * D


@pytest.mark.parametrize("tp, pp", [(8, 1), (8, 8), (4, 12), (1, 4)])
def test_gpt3_parameters_per_rank(tp, pp):
    stages = parallel(GPT3, "--train", "--tp", str(tp), "--pp", str(pp))["stages"]
    per_stage = L // pp * gpt3_layer_shard(tp)
    table = padded(V, tp) // tp * D  # a vocabulary-parallel table's rows
    first = per_stage + table + S * D  # the token table's rows, and the whole position table
    last = per_stage + 2 * D + (table if pp > 1 else 0)  # the final norm; tied: the head's own copy of the table
    assert len(stages) == pp
    if pp == 1:
        assert stages[0]["parameters"] == per_stage + table + S * D + 2 * D
    else:
        assert stages[0]["parameters"] == first
        assert stages[-1]["parameters"] == last
        assert all(s["parameters"] == per_stage for s in stages[1:-1])
        assert stages[1]["layers"] == list(range(L // pp, 2 * L // pp))


@pytest.mark.parametrize("recompute", ["none", "selective"])
@pytest.mark.parametrize("sp", [False, True])
def test_gpt3_activations_per_layer_follow_korthikanti_table_2(recompute, sp):
    """Korthikanti et al. 2022, Table 2, bytes per layer: tensor parallel sbh(10 + 24/t + 5as/(ht)); with
    sequence parallelism sbh(34/t + 5as/(ht)); selective recomputation drops the 5as/(ht) term."""
    t, b = 8, 1
    args = [GPT3, "--train", "--tp", str(t), "--recompute", recompute, "--seq", str(S)] + (["--sp"] if sp else [])
    stage = parallel(*args)["stages"][0]
    sbh = S * b * D
    scores = 5 * A * S / (D * t) if recompute == "none" else 0
    per_layer = sbh * (34 / t + scores) if sp else sbh * (10 + 24 / t + scores)
    assert stage["activations_per_micro_batch"] - _head(t, sp, b) == L * per_layer


def _head(t, sp, b):
    """The last (here the only) stage's final-norm and LM-head inputs (2 bytes each, split by sp) and its
    float32 logits over its part of the padded vocabulary."""
    return 2 * 2 * S * b * D // (t if sp else 1) + 4 * S * b * padded(V, t) // t


def megatron_most_loaded_parameters(L, d, a, g, ffn, Vp, tp, pp, swiglu, untied):
    """Megatron-LM's compute_weight_and_optimizer_memory, num_parameters_on_most_loaded_model_shard: its
    conventions are no linear biases, LayerNorms of gamma and beta, no position table, everything (norms too)
    divided by tp."""
    gated = 3 / 2 if swiglu else 1
    layers = 2 * L * d * d * ((1 + g / a) * 1 + ffn / d * gated + 2 / d + 1 / (L * d))
    embedding = d * Vp
    shard = (layers / pp + embedding) / tp
    if untied and pp == 1:
        shard += embedding / tp
    return shard


def test_megatron_theoretical_memory_parameters_under_its_conventions(tmp_path):
    """A config inside Megatron's formula (no linear biases, LayerNorm with beta, RoPE, untied, GQA, GELU):
    blockcli's first stage equals Megatron's most loaded shard, but for the norms blockcli keeps whole on
    every tensor-parallel rank (Megatron divides them by tp) and the final norm it places on the last stage
    (Megatron spreads it over the stages)."""
    l, d, a, g, ffn, v, tp, pp = 24, 2048, 16, 4, 8192, 50000, 4, 4
    config = tmp_path / "m.yaml"
    config.write_text(f"block: {{d_model: {d}, n_heads: {a}, n_kv_heads: {g}, d_ff: {ffn}, bias: {{qkv: false, "
                      f"out: false, mlp: false, norm: true}}, rope: true}}\n"
                      f"model: {{n_layers: {l}, vocab_size: {v}, positions: rope, max_positions: 4096, "
                      f"tie_embeddings: false}}\n")
    stages = parallel(str(config), "--train", "--tp", str(tp), "--pp", str(pp), "--seq", "512")["stages"]
    megatron = megatron_most_loaded_parameters(l, d, a, g, ffn, padded(v, tp), tp, pp, False, True)
    norms_whole = l // pp * 4 * d * (1 - 1 / tp)  # two LayerNorms a layer, gamma and beta
    final_norm_share = 2 * d / (pp * tp)
    assert stages[0]["parameters"] == pytest.approx(megatron + norms_whole - final_norm_share, abs=1e-6)


def megatron_activation_memory(s, b, h, ffn, L, Vp, tp, pp, vpp, m):
    """Megatron-LM's compute_activation_memory (sequence parallelism and selective recomputation, the first
    stage): 34·sbh per GPT layer for ffn = 4h, the embedding's input ids and dropout mask, the interleaved
    penalty, the pipeline's fill."""
    act = s * b * h * (18 + 4 * ffn / h) * L
    act += 8 * s * b * pp + s * b * h * pp
    if vpp is not None:
        act *= 1 + (pp - 1) / (pp * vpp)
    elif pp > 1:
        act *= min(1, m / pp)
    if pp == 1:
        act += s * b * h * 4 * (1 + Vp / h)
    return act / tp


@pytest.mark.parametrize("pp, vpp, m", [(8, None, 8), (8, None, 4), (4, 3, 8)])
def test_megatron_theoretical_activations_of_the_first_stage(pp, vpp, m):
    """GPT-3 with tp 8, sp, selective: blockcli's first stage equals Megatron's figure less the two embedding
    terms blockcli does not model (8·s·b int64 ids and an s·b·h dropout mask per micro-batch in flight)."""
    tp, b = 8, 1
    args = [GPT3, "--train", "--tp", str(tp), "--sp", "--recompute", "selective", "--seq", str(S),
            "--pp", str(pp), "--micro-batches", str(m)] + (["--vpp", str(vpp)] if vpp else [])
    first = parallel(*args)["stages"][0]
    megatron = megatron_activation_memory(S, b, D, 4 * D, L, padded(V, tp), tp, pp, vpp, m)
    factor = 1 + (pp - 1) / (pp * vpp) if vpp else min(1, m / pp)
    embedding_terms = (8 * S * b * pp + S * b * D * pp) * factor / tp
    assert first["activations"] == pytest.approx(megatron - embedding_terms, rel=1e-9, abs=1)


def test_pipeline_stages_keep_fewer_micro_batches_down_the_pipe():
    stages = parallel(GPT3, "--train", "--tp", "8", "--pp", "8", "--micro-batches", "16")["stages"]
    assert [s["in_flight"] for s in stages] == [8, 7, 6, 5, 4, 3, 2, 1]
    few = parallel(GPT3, "--train", "--tp", "8", "--pp", "8", "--micro-batches", "3")["stages"]
    assert [s["in_flight"] for s in few] == [3, 3, 3, 3, 3, 3, 2, 1]


def test_interleaved_chunks_are_round_robin():
    stages = parallel(GPT3, "--train", "--pp", "4", "--vpp", "3", "--micro-batches", "8")["stages"]
    chunk = L // 12
    assert stages[1]["layers"] == [i for c in (1, 5, 9) for i in range(c * chunk, (c + 1) * chunk)]


def test_model_states_are_partitioned_over_dp_and_experts_over_dp_over_ep():
    """Mixtral-8x7B, tp 2, ep 4, dp 8, ZeRO 1: mixed-precision AdamW's 2 + 2 bytes per parameter held, the 12
    optimizer bytes split over 8 for the dense part and over 8 / 4 = 2 for the experts (their data-parallel
    replicas)."""
    d, h, kv, dh, de, E, layers, V8 = 4096, 32, 8, 128, 14336, 8, 32, 32000
    stage = parallel("mixtral-8x7b", "--train", "--tp", "2", "--ep", "4", "--dp", "8", "--zero", "1")["stages"][0]
    experts = layers * (E // 4) * 3 * d * de // 2
    dense = layers * ((h * dh * d * 2 + kv * dh * d * 2) // 2 + 2 * d + d * E) + 2 * (padded(V8, 2) // 2 * d) + d
    assert stage["expert_parameters"] == experts
    assert stage["parameters"] == dense + experts
    st = stage["states"]
    assert st["weights"] == 2 * (dense + experts) and st["gradients"] == 2 * (dense + experts)
    assert st["optimizer"] == math.ceil(12 * dense / 8) + math.ceil(12 * experts / 2)


@pytest.mark.parametrize("tp, kv_per_rank", [(4, 2), (8, 1), (16, 1)])
def test_kv_heads_split_or_replicated(tp, kv_per_rank):
    """Llama-2-70B has 8 K/V heads of 128 and 64 query heads: tp 16 gives each rank one K/V head (each held
    by two ranks). Serving 4 × 4,096 tokens in bfloat16, the rank's K/V cache is its heads' share."""
    stage = parallel("llama-2-70b", "--tp", str(tp), "--seq", "4096", "--batch", "4", "--dtype", "bfloat16")["stages"][0]
    assert stage["kv_cache_bytes"] == 80 * 2 * kv_per_rank * 128 * 4096 * 4 * 2
    d, ff = 8192, 28672
    layer = (64 * 128 * d * 2) // tp + 2 * kv_per_rank * 128 * d + 3 * d * ff // tp + 2 * d
    table = padded(32000, tp) // tp * d
    assert stage["parameters"] == 80 * layer + 2 * table + d
    assert stage["weight_bytes"] == 2 * stage["parameters"]


def test_most_loaded_device_is_what_max_memory_checks():
    data = json.loads(runner.invoke(app, ["count", GPT3, "--train", "--tp", "8", "--pp", "8", "--json"]).stdout)
    worst = max(data["parallel"]["stages"], key=lambda s: s["memory_bytes"])
    assert data["parallel"]["memory_bytes"] == worst["memory_bytes"]
    assert data["parallel"]["most_loaded_stage"] == worst["stage"]
    fits = runner.invoke(app, ["count", GPT3, "--train", "--tp", "8", "--pp", "8",
                               "--max-memory", str(worst["memory_bytes"])])
    assert fits.exit_code == 0, fits.output
    over = runner.invoke(app, ["count", GPT3, "--train", "--tp", "8", "--pp", "8",
                               "--max-memory", str(worst["memory_bytes"] - 1)])
    assert over.exit_code == 1 and "most loaded device" in over.stderr


@pytest.mark.parametrize("args, needle", [
    (["--tp", "5"], "--tp 5 does not divide the 96 attention heads"),
    (["--pp", "5"], "--pp 5 does not divide the 96 layers"),
    (["--train", "--pp", "4", "--vpp", "5"], "--pp 4 × --vpp 5 = 20 does not divide the 96 layers"),
    (["--train", "--vpp", "2"], "--vpp interleaves pipeline stages: it needs --pp > 1"),
    (["--train", "--pp", "4", "--vpp", "2", "--micro-batches", "6"], "a multiple of --pp 4"),
    (["--ep", "2"], "no mixture of experts"),
    (["--sp"], "--sp sizes a training step; add --train"),
    (["--train", "--tp", "2", "--lora-rank", "8", "--lora-targets", "q,v"], "not modelled"),
])
def test_impossible_layouts_are_refused_naming_the_constraint(args, needle):
    message = error(GPT3, *args)
    assert needle in message and message.count("\n") == 1


def test_kv_heads_neither_split_nor_replicated_and_ep_outside_dp(tmp_path):
    config = tmp_path / "kv12.yaml"  # 48 query heads in 12 groups: tp 8 divides the first, not the second
    config.write_text("block: {d_model: 768, n_heads: 48, n_kv_heads: 12, d_ff: 2048}\n")
    assert "the 12 K/V heads (layer 0) can neither be split evenly nor replicated" in error(str(config), "--tp", "8")
    assert "--ep 4 must divide --dp 2" in error("mixtral-8x7b", "--train", "--ep", "4", "--dp", "2")
    assert "--ep 3 does not divide the 8 routed experts" in error("mixtral-8x7b", "--train", "--ep", "3", "--dp", "3")


def test_sp_without_tp_is_noted_and_changes_nothing():
    plain = parallel(GPT3, "--train", "--pp", "2")
    with_sp = parallel(GPT3, "--train", "--pp", "2", "--sp")
    assert with_sp["stages"] == plain["stages"] and with_sp["sp"] is False
    assert any("--sp needs --tp > 1" in n for n in with_sp["notes"])


def test_micro_batches_multiply_the_step_tokens_and_flops():
    one = json.loads(runner.invoke(app, ["count", GPT3, "--train", "--json"]).stdout)["training"]
    four = json.loads(runner.invoke(app, ["count", GPT3, "--train", "--pp", "2", "--micro-batches", "4",
                                          "--json"]).stdout)["training"]
    assert four["tokens_per_step"] == 4 * one["tokens_per_step"]
    assert four["step"]["total"]["full"]["flops"] == 4 * one["step"]["total"]["full"]["flops"]
