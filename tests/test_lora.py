"""Fine-tuning sizing (count --train --lora-*): LoRA's trainable parameters against PEFT's own count
(tests/fixtures/lora/peft_counts.json, written by tests/fixtures/lora/generate.py from transformers models
built on the meta device), and the memory and FLOPs around them against derivations written here."""

import json
import math

import pytest
from typer.testing import CliRunner

from blockcli.cli import app
from conftest import ROOT

runner = CliRunner()
FIXTURES = json.loads((ROOT / "tests" / "fixtures" / "lora" / "peft_counts.json").read_text())
CASES = [(family, name) for family, entry in FIXTURES.items() if not family.startswith("_") for name in entry["sets"]]


def count_json(*args):
    out = runner.invoke(app, ["count", *args, "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


def lora_json(config, roles, rank, *more):
    return count_json(str(config), "--train", "--lora-rank", str(rank), "--lora-targets", roles, *more)["training"]


def test_the_fixture_covers_five_architectures_and_three_target_sets_each():
    families = [f for f in FIXTURES if not f.startswith("_")]
    assert len(families) >= 5 and {"llama", "qwen2", "gpt2", "mixtral", "phi3", "gemma2"} <= set(families)
    assert all(len(FIXTURES[f]["sets"]) >= 2 for f in families)
    assert sum(len(FIXTURES[f]["sets"]) >= 3 for f in families) >= 5


@pytest.mark.parametrize("family,name", CASES)
def test_trainable_parameters_equal_peft(family, name):
    entry = FIXTURES[family]
    case = entry["sets"][name]
    tr = lora_json(ROOT / entry["config"], case["roles"], case["rank"])
    lora = tr["lora"]
    expected = case["trainable"]
    if family == "mixtral" and case["roles"] == "all-linear":
        # PEFT's all-linear on transformers 5's Mixtral converts the transformers-4 names w1, w3 into the fused
        # gate_up_proj at rank 2r (peft/utils/transformers_weight_conversion.py): L·E·r·(d + 2·d_e) more than
        # one rank-r adapter per expert's gate_up, which is what blockcli counts (and PEFT's target_parameters gives)
        config = json.loads((ROOT / entry["config"] / "config.json").read_text())
        L, E, d, d_e = (config[k] for k in ("num_hidden_layers", "num_local_experts", "hidden_size",
                                            "intermediate_size"))
        expected -= L * E * case["rank"] * (d + 2 * d_e)
    assert lora["trainable_parameters"] == expected
    assert lora["frozen"]["parameters"] == case["all"] - case["trainable"] == entry["parameters"]
    assert sum(a["parameters"] for a in lora["adapters"]) == expected


def test_gpt2_fused_c_attn_is_one_adapter_of_r_times_d_plus_3d(tmp_path):
    d, r, L = 768, 8, 12
    lora = lora_json(ROOT / "tests" / "fixtures" / "hf" / "gpt2", "q,k,v", r)["lora"]
    assert lora["layout"].startswith("GPT-2's modules")
    # the fixture's GPT-2 is 32 wide with 2 layers: one c_attn adapter per layer, r·(d + 3·d)
    assert [a["module"] for a in lora["adapters"]] == ["c_attn"]
    assert lora["trainable_parameters"] == 2 * r * (32 + 3 * 32)
    # the preset names its family (about.model_type: gpt2): PEFT's well-known 294,912 for c_attn at r = 8
    preset = lora_json("gpt2", "q,k,v", r)["lora"]
    assert preset["trainable_parameters"] == L * r * (d + 3 * d) == 294_912
    # a YAML config without about.model_type: one adapter per matrix, r·(d + d) for each of Q, K and V
    text = (ROOT / "blockcli" / "presets" / "gpt2.yaml").read_text()
    plain = tmp_path / "gpt2-plain.yaml"
    plain.write_text("".join(line for line in text.splitlines(True) if "model_type" not in line))
    separate = lora_json(plain, "q", r)["lora"]
    assert separate["trainable_parameters"] == L * r * (d + d)
    assert "Llama's layout" in separate["layout"]
    plain.write_text(text.replace("model_type: gpt2", "model_type: gpt3"))
    out = runner.invoke(app, ["count", str(plain), "--train", "--lora-rank", "4", "--lora-targets", "q,k,v"])
    assert out.exit_code == 2 and out.stderr.strip().splitlines()[0].startswith("blockcli: error: about.model_type:")


# ----------------------------------------------------------------------------- memory


def test_states_count_gradients_and_optimizer_for_the_adapters_only():
    # Llama-2-7B, q and v at rank 16: 32 layers × 2 matrices × 16·(4096 + 4096)
    r, L, d, total = 16, 32, 4096, 6_738_415_616
    n = L * 2 * r * (d + d)
    tr = lora_json("llama-2-7b", "q,v", r)
    assert tr["lora"]["trainable_parameters"] == n == 8_388_608
    states = tr["states_per_device"]
    assert states["weights"] == 2 * total + 2 * n  # the frozen base in bf16, the adapters' 16-bit weights
    assert states["gradients"] == 2 * n  # mixed precision: 16-bit gradients, of the adapters only
    assert states["optimizer"] == 12 * n  # fp32 master copy and Adam's two moments, of the adapters only
    fp32 = lora_json("llama-2-7b", "q,v", r, "--precision", "fp32", "--optimizer", "sgd")["states_per_device"]
    assert (fp32["weights"], fp32["gradients"], fp32["optimizer"]) == (2 * total + 4 * n, 4 * n, 0)
    # ZeRO stage 3 over 4 devices divides all three, the frozen base too
    z3 = lora_json("llama-2-7b", "q,v", r, "--dp", "4", "--zero", "3")["states_per_device"]
    assert z3["weights"] == -(-(2 * total + 2 * n) // 4) and z3["optimizer"] == 12 * n // 4


def _llama2_7b_matrices():
    d, d_ff, L = 4096, 11008, 32
    return [(d, d)] * 4 * L + [(d, d_ff)] * 2 * L + [(d_ff, d)] * L


def test_nf4_frozen_base_is_qlora_double_quantized_layout():
    """QLoRA (Dettmers et al. 2023, §3): 4-bit NF4 weights in blocks of 64, each block's absmax in 8 bits
    (double quantization, blocks of 256 absmax) plus one float32 per 256 absmax and the float32 mean that
    was subtracted; everything that is not a block matrix (embeddings, norms, LM head) stays 16-bit."""
    total, embeddings_and_head, norms = 6_738_415_616, 2 * 32000 * 4096, 65 * 4096
    matrices = _llama2_7b_matrices()
    expected = 0
    for shape in matrices:
        n = math.prod(shape)
        blocks = n // 64  # every Llama-2-7B matrix is a whole number of blocks
        expected += n // 2 + blocks + 4 * math.ceil(blocks / 256) + 4
    quantized = sum(math.prod(s) for s in matrices)
    assert quantized == total - embeddings_and_head - norms
    expected += 2 * (embeddings_and_head + norms)
    frozen = lora_json("llama-2-7b", "q,v", 16, "--frozen-dtype", "nf4")["lora"]["frozen"]
    assert frozen == {"parameters": total, "dtype": "nf4", "quantized_parameters": quantized, "bytes": expected}
    # the paper's figure: 4 + 8/64 + 32/(64·256) = 4.127 bits a weight
    bits = 8 * (expected - 2 * (embeddings_and_head + norms)) / quantized
    assert bits == pytest.approx(4 + 8 / 64 + 32 / (64 * 256), abs=1e-4)


def test_int8_and_int4_and_bf16_frozen_bases():
    total, outer = 6_738_415_616, 2 * 32000 * 4096 + 65 * 4096
    matrices = _llama2_7b_matrices()
    quantized = total - outer
    by = {dtype: lora_json("llama-2-7b", "q,v", 8, "--frozen-dtype", dtype)["lora"]["frozen"]["bytes"]
          for dtype in ("bf16", "int8", "int4")}
    assert by["bf16"] == 2 * total
    # LLM.int8(): one byte a weight and a float32 scale per output row (out = the second axis of (in, out))
    assert by["int8"] == quantized + 4 * sum(out for _, out in matrices) + 2 * outer
    assert by["int4"] == quantized // 2 + 2 * outer


def test_lora_alpha_changes_nothing_in_memory_or_flops():
    a = lora_json("llama-3-8b", "q,k,v,o", 8, "--lora-alpha", "16")
    b = lora_json("llama-3-8b", "q,k,v,o", 8, "--lora-alpha", "64")
    assert (a["lora"]["alpha"], a["lora"]["scale"], b["lora"]["scale"]) == (16, 2, 8)
    assert lora_json("llama-3-8b", "q", 4)["lora"]["alpha"] == 8  # peft.LoraConfig's default lora_alpha
    for key in ("states_per_device", "activations", "memory_bytes_per_device", "step"):
        assert a[key] == b[key]


def test_lora_keeps_each_adapted_matrix_x_times_a_for_the_backward_pass():
    s, b, r = 8, 1, 4  # llama-2-7b's run: 8 tokens, batch 1; q, k, v, o adapted: 4·r values a token, 16-bit
    full = count_json("llama-2-7b", "--train")["training"]["activations"]["per_layer"]
    tr = lora_json("llama-2-7b", "q,k,v,o", r)
    assert tr["activations"]["per_layer"] == full + 2 * s * b * 4 * r
    assert lora_json("llama-2-7b", "q,k,v,o", r, "--recompute", "full")["activations"]["per_layer"] == 2 * s * b * 4096


def test_lora_step_flops_skip_the_frozen_weights_gradients():
    """Backward: the frozen matrices' inputs' gradients only (1× their forward), the score products' two
    gradients (2×), the adapters' inputs' and weights' gradients (2× their forward)."""
    T, r, L, d, d_ff, V = 8, 8, 32, 4096, 11008, 32000
    dense = 2 * T * L * (4 * d * d + 3 * d * d_ff)
    head = 2 * T * d * V
    scores = 2 * L * 32 * (128 + 128) * T * T  # Q·Kᵀ and weights·V over the full table
    adapters = 2 * T * L * 2 * r * (d + d)  # q and v: x·A then ·B
    step = lora_json("llama-2-7b", "q,v", r)["step"]
    assert step["forward"]["full"]["flops"] == dense + head + scores + adapters
    assert step["backward"]["full"]["flops"] == dense + head + 2 * scores + 2 * adapters
    assert step["total"]["full"]["flops"] == 2 * (dense + head) + 3 * scores + 3 * adapters


def test_the_table_and_markdown_show_the_adapters_and_the_frozen_base():
    out = runner.invoke(app, ["count", "llama-2-7b", "--train", "--lora-rank", "16", "--lora-targets", "q,v",
                              "--frozen-dtype", "nf4", "--format", "markdown"])
    assert out.exit_code == 0, out.output
    assert "- LoRA: rank 16 on q, v: 8,388,608 trainable parameters" in out.stdout
    assert "NF4 with double quantization" in out.stdout
    assert "| q | 4,096 → 4,096 | 32 | 4,194,304 | 32·r·(4096 + 4096) |" in out.stdout
    table = runner.invoke(app, ["count", "llama-2-7b", "--train", "--lora-rank", "16", "--lora-targets", "q,v"],
                          env={"COLUMNS": "160"})
    assert table.exit_code == 0 and "LoRA adapters, rank 16" in table.stdout


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("args,names", [
    (["--train", "--lora-rank", "0", "--lora-targets", "q"], "--lora-rank"),
    (["--train", "--lora-rank", "-3", "--lora-targets", "q"], "--lora-rank"),
    (["--train", "--lora-rank", "4", "--lora-targets", "q,wq"], "wq"),
    (["--train", "--lora-rank", "4", "--lora-targets", ""], "--lora-targets"),
    (["--train", "--lora-rank", "4", "--lora-targets", "all-linear,q"], "all-linear"),
    (["--train", "--lora-rank", "4", "--lora-targets", "gate"], "gate"),  # GPT-2's MLP is plain
    (["--train", "--lora-rank", "4", "--lora-targets", "router"], "router"),  # and dense
    (["--train", "--lora-rank", "4"], "--lora-targets"),
    (["--train", "--lora-targets", "q"], "--lora-rank"),
    (["--lora-rank", "4", "--lora-targets", "q"], "--train"),
    (["--frozen-dtype", "nf4"], "--train"),
    (["--train", "--lora-rank", "4", "--lora-targets", "q", "--lora-alpha", "0"], "--lora-alpha"),
    (["--train", "--lora-rank", "4", "--lora-targets", "q", "--lora-alpha", "nan"], "--lora-alpha"),
])
def test_bad_lora_input_is_one_line_naming_it(args, names):
    out = runner.invoke(app, ["count", "gpt2", *args])  # blockcli's own checks: one line under CliRunner too
    assert out.exit_code == 2, out.output
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and names in lines[0], out.stderr


def test_an_unknown_frozen_dtype_is_one_line():
    from test_hostile_options import blockcli, short_error

    line = short_error(blockcli("count", "gpt2", "--train", "--lora-rank", "4", "--lora-targets", "q,k,v",
                                "--frozen-dtype", "fp8"))
    assert "--frozen-dtype" in line and "nf4" in line


def test_a_fused_module_is_targeted_whole():
    out = runner.invoke(app, ["count", str(ROOT / "tests" / "fixtures" / "hf" / "gpt2"), "--train", "--lora-rank", "4",
                              "--lora-targets", "q,v"])
    assert out.exit_code == 2
    assert out.stderr.strip().splitlines() == [
        "blockcli: error: --lora-targets: q, v shares the module 'c_attn' with k (GPT-2's modules (c_attn: q, k, v)); "
        "target q,k,v together"]
    mla = runner.invoke(app, ["count", "deepseek-v3", "--train", "--lora-rank", "4", "--lora-targets", "k"])
    assert mla.exit_code == 2 and "kv_a" in mla.stderr and "k,v" in mla.stderr


# ----------------------------------------------------------------------------- 6·N of a mixture of experts


def test_six_n_of_mixtral_uses_the_active_parameters():
    """Mixtral 8x7B: per layer Q and O (d·d each), K and V (d·1024 each), the router (d·8), two of the eight
    SwiGLU experts (3·d·d_e each), two RMSNorms; then the final norm and the untied LM head (d·V).
    Kaplan's N leaves out the token embedding."""
    L, d, kv, d_e, E, V, T = 32, 4096, 1024, 14336, 8, 32000, 8
    per_layer = 2 * d * d + 2 * d * kv + d * E + 2 * 3 * d * d_e + 2 * d
    active = L * per_layer + d + d * V
    step = count_json("mixtral-8x7b", "--train")["training"]["step"]
    assert step["six_n_parameters"] == active == 12_879_925_248 - V * d
    assert step["six_n_basis"] == "active_non_embedding"
    assert step["six_n"] == 6 * active * T
    out = runner.invoke(app, ["count", "mixtral-8x7b", "--train", "--format", "markdown"])
    assert f"N = {active:,} active non-embedding parameters per token" in out.stdout
    dense = count_json("llama-2-7b", "--train")["training"]["step"]
    assert dense["six_n_basis"] == "non_embedding" and dense["six_n_parameters"] == 6_738_415_616 - 32000 * 4096
