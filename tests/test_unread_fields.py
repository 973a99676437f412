"""Fields of published configs that the family's transformers modelling code never reads (`Family.unread`).

Such a field is accepted at any value with one `blockcli: note:` line naming it, and changes no number;
a field that no table lists is still refused, naming it and `--allow-field`. The six configs below are
reconstructions of the published config.json files (the URL on each); each carries the field that
blockcli refused before it was listed. Expected totals: transformers 5.24's *ForCausalLM built from the
same config.json (with and without the field) on the meta device, sum of numel over parameters(); the
tiny variants (widths <= 64, 2 layers) likewise, and GPT-2's and MiniMax-M2's tiny ones by hand below.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from blockcli.count import count_parameters
from blockcli.families import FAMILIES
from blockcli.families.fields import COMMON_IGNORED, COMMON_NEUTRAL
from blockcli.hf import config_from_hf

GPT2_MEDIUM = {  # https://huggingface.co/openai-community/gpt2-medium/blob/main/config.json
    "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
    "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 1024, "n_head": 16,
    "n_layer": 24, "n_positions": 1024, "n_special": 0, "predict_special_tokens": True, "resid_pdrop": 0.1,
    "summary_activation": None, "summary_first_dropout": 0.1, "summary_proj_to_labels": True,
    "summary_type": "cls_index", "summary_use_proj": True,
    "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}}, "vocab_size": 50257,
}
SANTACODER = {  # https://huggingface.co/bigcode/gpt_bigcode-santacoder/blob/main/config.json
    "activation_function": "gelu_pytorch_tanh", "architectures": ["GPTBigCodeForCausalLM"],
    "attention_softmax_in_fp32": True, "attn_pdrop": 0.1, "bos_token_id": 49152, "embd_pdrop": 0.1,
    "eos_token_id": 49152, "inference_runner": 0, "initializer_range": 0.02, "layer_norm_epsilon": 1e-05,
    "max_batch_size": None, "max_sequence_length": None, "model_type": "gpt_bigcode", "multi_query": True,
    "n_embd": 2048, "n_head": 16, "n_inner": 8192, "n_layer": 24, "n_positions": 2048, "pad_key_length": True,
    "pre_allocate_kv_cache": False, "resid_pdrop": 0.1, "runner_max_sequence_length": None,
    "scale_attention_softmax_in_fp32": True, "scale_attn_weights": True, "summary_activation": None,
    "summary_first_dropout": 0.1, "summary_proj_to_labels": True, "summary_type": "cls_index",
    "summary_use_proj": True, "torch_dtype": "float32", "transformers_version": "4.27.0.dev0", "use_cache": True,
    "validate_runner_input": True, "vocab_size": 49280,
}
PHI_4_MINI = {  # https://huggingface.co/microsoft/Phi-4-mini-instruct/blob/main/config.json (auto_map left out;
    # the 48 longrope factors are placeholders: they change no count)
    "architectures": ["Phi3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 199999, "embd_pdrop": 0.0, "eos_token_id": 199999, "full_attn_mod": 1, "hidden_act": "silu",
    "hidden_size": 3072, "initializer_range": 0.02, "intermediate_size": 8192, "interpolate_factor": 1,
    "lm_head_bias": False, "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "phi3",
    "num_attention_heads": 24, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "original_max_position_embeddings": 4096, "pad_token_id": 199999, "partial_rotary_factor": 0.75,
    "resid_pdrop": 0.0, "rms_norm_eps": 1e-05,
    "rope_scaling": {"long_factor": [1.0] * 48, "short_factor": [1.0] * 48, "type": "longrope"},
    "rope_theta": 10000.0, "sliding_window": 262144, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
    "transformers_version": "4.45.0", "use_cache": True, "vocab_size": 200064,
}
STARCODER2_7B = {  # https://huggingface.co/bigcode/starcoder2-7b/blob/main/config.json
    "activation_function": "gelu_pytorch_tanh", "architectures": ["Starcoder2ForCausalLM"],
    "attention_dropout": 0.1, "residual_dropout": 0.1, "embedding_dropout": 0.1, "bos_token_id": 0,
    "eos_token_id": 0, "hidden_act": "gelu_pytorch_tanh", "hidden_size": 4608, "initializer_range": 0.018042,
    "intermediate_size": 18432, "layer_norm_epsilon": 1e-05, "max_position_embeddings": 16384,
    "mlp_type": "default", "model_type": "starcoder2", "norm_epsilon": 1e-05, "norm_type": "layer_norm",
    "num_attention_heads": 36, "num_hidden_layers": 32, "num_key_value_heads": 4, "rope_theta": 1000000,
    "sliding_window": 4096, "torch_dtype": "bfloat16", "transformers_version": "4.37.0.dev0", "use_bias": True,
    "use_cache": True, "vocab_size": 49152,
}
GPTJ_6B = {  # https://huggingface.co/EleutherAI/gpt-j-6b/blob/main/config.json
    "activation_function": "gelu_new", "architectures": ["GPTJForCausalLM"], "attn_pdrop": 0.0,
    "bos_token_id": 50256, "embd_pdrop": 0.0, "eos_token_id": 50256, "gradient_checkpointing": False,
    "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "gptj", "n_embd": 4096, "n_head": 16,
    "n_inner": None, "n_layer": 28, "n_positions": 2048, "resid_pdrop": 0.0, "rope_scaling": {"rope_type": "gptj"},
    "rotary": True, "rotary_dim": 64, "scale_attn_weights": True, "summary_activation": None,
    "summary_first_dropout": 0.1, "summary_proj_to_labels": True, "summary_type": "cls_index",
    "summary_use_proj": True,
    "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50, "temperature": 1.0}},
    "tie_word_embeddings": False, "tokenizer_class": "GPT2Tokenizer", "transformers_version": "4.18.0.dev0",
    "use_cache": True, "vocab_size": 50400,
}

MINIMAX_M2 = {  # https://huggingface.co/MiniMaxAI/MiniMax-M2/blob/main/config.json (auto_map and the FP8
    # quantization_config left out: the count is of the model's parameters, not of a checkpoint's scales)
    "architectures": ["MiniMaxM2ForCausalLM"], "attn_type_list": [1] * 62, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 3072, "intermediate_size": 1536, "max_position_embeddings": 196608, "model_type": "minimax_m2",
    "mtp_transformer_layers": 1, "num_attention_heads": 48, "num_experts_per_tok": 8, "num_hidden_layers": 62,
    "num_key_value_heads": 8, "num_local_experts": 256, "num_mtp_modules": 3, "output_router_logits": False,
    "qk_norm_type": "per_layer", "rms_norm_eps": 1e-06, "rope_theta": 5000000, "rotary_dim": 64,
    "router_aux_loss_coef": 0.001, "router_jitter_noise": 0.0, "scoring_func": "sigmoid",
    "shared_intermediate_size": 0, "tie_word_embeddings": False, "transformers_version": "4.57.1", "use_cache": True,
    "use_mtp": True, "use_qk_norm": True, "use_routing_bias": True, "vocab_size": 200064,
}

# (config, the field blockcli refused, transformers' total, tiny widths, transformers' total of the tiny one)
CASES = [
    pytest.param(GPT2_MEDIUM, "predict_special_tokens", 354_823_168,
                 {"n_embd": 32, "n_head": 4, "n_layer": 2, "n_positions": 64, "n_ctx": 64, "vocab_size": 100}, 30_720,
                 id="gpt2-medium"),
    pytest.param(SANTACODER, "runner_max_sequence_length", 1_124_886_528,
                 {"n_embd": 32, "n_head": 4, "n_inner": 64, "n_layer": 2, "n_positions": 64, "vocab_size": 100},
                 19_232, id="santacoder"),
    pytest.param(PHI_4_MINI, "full_attn_mod", 3_836_021_760,
                 {"hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
                  "intermediate_size": 64, "vocab_size": 100, "max_position_embeddings": 256,
                  "original_max_position_embeddings": 64, "sliding_window": 64, "pad_token_id": 99,
                  "bos_token_id": 99, "eos_token_id": 99,
                  "rope_scaling": {"long_factor": [1.0] * 3, "short_factor": [1.0] * 3, "type": "longrope"}},
                 21_792, id="phi-4-mini"),
    pytest.param(STARCODER2_7B, "activation_function", 7_173_923_840,
                 {"hidden_size": 48, "num_attention_heads": 6, "num_key_value_heads": 2, "num_hidden_layers": 2,
                  "intermediate_size": 64, "vocab_size": 100, "max_position_embeddings": 64, "sliding_window": 32},
                 30_336, id="starcoder2-7b"),
    pytest.param(GPTJ_6B, "rope_scaling", 6_050_882_784,
                 {"n_embd": 64, "n_head": 4, "n_layer": 2, "n_positions": 64, "rotary_dim": 8, "vocab_size": 100},
                 112_228, id="gpt-j-6b"),
    pytest.param(MINIMAX_M2, "scoring_func", 228_689_748_992,
                 {"hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
                  "num_hidden_layers": 2, "attn_type_list": [1, 1], "intermediate_size": 16, "num_local_experts": 4,
                  "num_experts_per_tok": 2, "rotary_dim": 4, "vocab_size": 100, "max_position_embeddings": 64},
                 25_344, id="minimax-m2"),
]


def count(tmp_path: Path, data: dict, *args: str, name: str = "config.json") -> tuple[int, int | None, list[str]]:
    """`blockcli count config.json --json`: exit code, total, stderr lines."""
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    run = subprocess.run([sys.executable, "-m", "blockcli", "count", str(path), "--json", *args],
                         capture_output=True, text=True, timeout=120)
    total = json.loads(run.stdout)["total"] if run.returncode == 0 else None
    return run.returncode, total, run.stderr.splitlines()


def names(note: str, field: str) -> bool:
    """Whether `note` is the note on fields transformers never reads and lists `field` among them."""
    _, said, listed = note.partition("modelling code never reads")
    return bool(said) and re.search(rf"(?<![\w.]){re.escape(field)}(?![\w.])", listed) is not None


def without(data: dict, key: str) -> dict:
    return {k: v for k, v in data.items() if k != key}


@pytest.mark.parametrize("hf, field, transformers_total, tiny, tiny_total", CASES)
def test_published_config_counts_with_a_note_and_as_without_the_field(
        tmp_path: Path, hf: dict, field: str, transformers_total: int, tiny: dict, tiny_total: int) -> None:
    code, total, stderr = count(tmp_path, hf)
    assert code == 0, stderr
    assert total == transformers_total
    notes = [line for line in stderr if line.startswith("blockcli: note: ")]
    assert len(notes) == 1 == len(stderr), stderr  # one line, however many fields it names
    assert names(notes[0], field)
    code, bare, stderr = count(tmp_path, without(hf, field), name="bare.json")
    assert (code, bare) == (0, transformers_total)
    assert not any(names(line, field) for line in stderr)


@pytest.mark.parametrize("hf, field, transformers_total, tiny, tiny_total", CASES)
def test_tiny_variants_count_as_transformers_builds_them(
        tmp_path: Path, hf: dict, field: str, transformers_total: int, tiny: dict, tiny_total: int) -> None:
    small = {**hf, **tiny}
    assert count_parameters(config_from_hf(_write(tmp_path, small))).total == tiny_total
    assert count_parameters(config_from_hf(_write(tmp_path, without(small, field), "bare.json"))).total == tiny_total


def test_gpt2_tiny_total_by_hand() -> None:
    d, L, V, P = 32, 2, 100, 64  # GPT-2 medium's tiny variant: tied head, learned positions, biases everywhere
    per_layer = 2 * 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * 4 * d + 4 * d) + (4 * d * d + d)
    assert V * d + P * d + L * per_layer + 2 * d == 30_720 == CASES[0].values[4]


def test_minimax_m2_tiny_total_by_hand() -> None:
    d, L, V, h, kv, d_h, E, d_e = 32, 2, 100, 4, 2, 8, 4, 16  # q/k norms over the projections, router, SwiGLU experts
    attention = 2 * d * h * d_h + 2 * d * kv * d_h + h * d_h + kv * d_h
    per_layer = attention + 2 * d + E * d + E * 3 * d * d_e
    assert L * per_layer + 2 * V * d + d == 25_344 == CASES[-1].values[4]


def _write(tmp_path: Path, data: dict, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.mark.parametrize("hf, field, value", [
    (GPT2_MEDIUM, "predict_special_tokens", False),
    (GPT2_MEDIUM, "n_special", 2),
    (SANTACODER, "runner_max_sequence_length", 8192),
    (PHI_4_MINI, "lm_head_bias", True),  # transformers' Phi-3 has no LM-head bias whatever this says
    (PHI_4_MINI, "mlp_bias", True),
    (STARCODER2_7B, "activation_function", "relu"),  # transformers runs hidden_act
    (STARCODER2_7B, "layer_norm_epsilon", 0.5),  # ... and norm_epsilon
    (GPTJ_6B, "rope_scaling", {"rope_type": "linear", "factor": 4.0}),  # GPT-J's tables ignore it
    (GPTJ_6B, "rope_parameters", {"rope_type": "gptj"}),  # transformers 5's spelling of the same
    (MINIMAX_M2, "use_qk_norm", False),  # MiniMaxM2Attention normalises q and k whatever this says
    (MINIMAX_M2, "shared_intermediate_size", 4096),  # ... and builds no shared expert
])
def test_an_unread_field_changes_no_number_at_any_value(tmp_path: Path, hf: dict, field: str, value: Any) -> None:
    plain = config_from_hf(_write(tmp_path, without(hf, field), "plain.json"))
    config = config_from_hf(_write(tmp_path, {**hf, field: value}))
    assert (config.block, config.model, config.layer_blocks) == (plain.block, plain.model, plain.layer_blocks)
    assert any(names(note, field) for note in config.notes)


@pytest.mark.parametrize("hf, field", [
    (GPT2_MEDIUM, "predict_special_token"),  # a near miss of a listed field
    (PHI_4_MINI, "full_attn_mode"),
    (GPTJ_6B, "some_future_field"),
])
def test_a_field_no_table_lists_is_still_refused_in_one_line(tmp_path: Path, hf: dict, field: str) -> None:
    code, total, stderr = count(tmp_path, {**hf, field: 1})
    assert code == 2 and total is None
    assert len(stderr) == 1 and stderr[0].startswith("blockcli: error: ")
    assert f"field '{field}'" in stderr[0] and f"--allow-field {field}" in stderr[0]


@pytest.mark.parametrize("base, field", [
    # unread by one family is no licence in another: Llama's modelling code might read it
    ({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
      "num_hidden_layers": 2, "vocab_size": 100, "max_position_embeddings": 64}, "full_attn_mod"),
    ({"model_type": "gpt_neox", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
      "num_hidden_layers": 2, "vocab_size": 100, "max_position_embeddings": 64}, "predict_special_tokens"),
])
def test_a_field_is_unread_only_in_the_family_that_lists_it(tmp_path: Path, base: dict, field: str) -> None:
    code, _, stderr = count(tmp_path, {**base, field: 1})
    assert code == 2 and len(stderr) == 1 and f"field '{field}'" in stderr[0]


def test_allow_field_on_an_unread_field_allows_nothing_more(tmp_path: Path) -> None:
    config = config_from_hf(_write(tmp_path, GPT2_MEDIUM), allow_fields=("predict_special_tokens",))
    assert any("--allow-field predict_special_tokens: blockcli already reads this field, so it allows nothing" in note
               for note in config.notes)


def test_the_tables_are_disjoint_and_give_reasons() -> None:
    """A field is unread, ignored on purpose or neutral, never two of them; every unread field has a reason."""
    for model_type, family in FAMILIES.items():
        unread = set(family.unread)
        assert not unread & (family.ignored | COMMON_IGNORED | set(COMMON_NEUTRAL)), model_type
        assert all(isinstance(why, str) and len(why) > 10 for why in family.unread.values()), model_type
