"""A config.json's `quantization_config`: counted as the logical (unquantized) model, with a note.

fp8 with per-block scales (DeepSeek-V3, Qwen3-FP8), gptq, awq and compressed-tensors are recognised;
the parameter counts are those of the unquantized model, and for block fp8 a note gives the stored
bytes. Expected numbers: transformers 5.24's *ForCausalLM on the meta device (sum of numel), and for
the bytes the same model after transformers' `replace_with_fp8_linear` (integrations.finegrained_fp8,
pre-quantized, its default modules_to_not_convert: lm_head): its float8_e4m3fn elements at 1 byte, its
float32 `weight_scale_inv` elements at 4, every other parameter at the checkpoint's bfloat16; DeepSeek-V3's
scales also by hand below. A quantized folder's weights are read and run: tests/test_quantized_weights.py.
"""

from __future__ import annotations

import json
import math
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from blockcli.count import count_parameters, fp8_stored_bytes
from blockcli.hf import config_from_hf

FP8 = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}

DEEPSEEK_V3 = {  # https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json (auto_map left out)
    "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "aux_loss_alpha": 0.001, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1, "first_k_dense_replace": 3,
    "hidden_act": "silu", "hidden_size": 7168, "initializer_range": 0.02, "intermediate_size": 18432,
    "kv_lora_rank": 512, "max_position_embeddings": 163840, "model_type": "deepseek_v3",
    "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256,
    "n_shared_experts": 1, "norm_topk_prob": True, "num_attention_heads": 128, "num_experts_per_tok": 8,
    "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "q_lora_rank": 1536,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "quantization_config": FP8, "rms_norm_eps": 1e-06,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
    "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "tie_word_embeddings": False,
    "topk_group": 4, "topk_method": "noaux_tc", "torch_dtype": "bfloat16", "transformers_version": "4.33.1",
    "use_cache": True, "v_head_dim": 128, "vocab_size": 129280,
}
QWEN3_8B_FP8 = {  # https://huggingface.co/Qwen/Qwen3-8B-FP8/blob/main/config.json
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 12288, "max_position_embeddings": 40960,
    "max_window_layers": 36, "model_type": "qwen3", "num_attention_heads": 32, "num_hidden_layers": 36,
    "num_key_value_heads": 8, "quantization_config": FP8, "rms_norm_eps": 1e-06, "rope_scaling": None,
    "rope_theta": 1000000, "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0", "use_cache": True, "use_sliding_window": False, "vocab_size": 151936,
}
BLOCKS_16X32 = {**FP8, "weight_block_size": [16, 32]}  # not square, and widths that leave partial blocks
TINY_QWEN3 = {**QWEN3_8B_FP8, "hidden_size": 40, "intermediate_size": 72, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 12, "vocab_size": 100,
              "max_position_embeddings": 64, "max_window_layers": 2, "bos_token_id": 0, "eos_token_id": 1,
              "quantization_config": BLOCKS_16X32}
TINY_DEEPSEEK_V3 = {**DEEPSEEK_V3, "hidden_size": 40, "intermediate_size": 72, "moe_intermediate_size": 32,
                    "num_hidden_layers": 3, "first_k_dense_replace": 1, "num_attention_heads": 4,
                    "num_key_value_heads": 4, "q_lora_rank": 20, "kv_lora_rank": 12, "qk_nope_head_dim": 8,
                    "qk_rope_head_dim": 4, "v_head_dim": 8, "n_routed_experts": 8, "num_experts_per_tok": 2,
                    "n_group": 2, "topk_group": 1, "vocab_size": 100, "max_position_embeddings": 256,
                    "rope_scaling": {**DEEPSEEK_V3["rope_scaling"], "original_max_position_embeddings": 64,
                                     "factor": 4},
                    "quantization_config": BLOCKS_16X32}

# (config, transformers' total, its fp8 weights, float32 scales, other parameters, stored bytes)
FP8_CASES = [
    pytest.param(DEEPSEEK_V3, 671_026_404_352, 669_065_609_216, 40_838_232, 1_960_795_136, 673_150_552_416,
                 id="deepseek-v3"),
    pytest.param(QWEN3_8B_FP8, 8_190_735_360, 6_945_767_424, 423_936, 1_244_967_936, 9_437_399_040, id="qwen3-8b-fp8"),
    pytest.param(TINY_QWEN3, 37_048, 28_800, 98, 8_248, 45_688, id="tiny-qwen3-16x32"),
    pytest.param(TINY_DEEPSEEK_V3, 100_120, 91_104, 275, 9_016, 110_236, id="tiny-deepseek-v3-16x32"),
]


def write(tmp_path: Path, data: Any, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def blockcli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "blockcli", *args], capture_output=True, text=True, timeout=120)


def without_quantization(data: dict) -> dict:
    return {k: v for k, v in data.items() if k != "quantization_config"}


@pytest.mark.parametrize("hf, total, fp8, scales, plain, stored", FP8_CASES)
def test_fp8_counts_the_logical_model_and_notes_the_stored_bytes(
        tmp_path: Path, hf: dict, total: int, fp8: int, scales: int, plain: int, stored: int) -> None:
    run = blockcli("count", str(write(tmp_path, hf)), "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["total"] == total
    assert json.loads(run.stdout)["inference"]["parameter_bytes"] == stored  # sizing: the weights as stored
    plain_run = blockcli("count", str(write(tmp_path, without_quantization(hf), "plain.json")), "--json")
    assert json.loads(plain_run.stdout)["total"] == total and plain_run.stderr == ""
    lines = run.stderr.splitlines()
    assert len(lines) == 2 and all(line.startswith("blockcli: note: ") for line in lines), lines
    assert "quantization_config: fp8 (e4m3, " in lines[0] and "the counts are logical parameters" in lines[0]
    assert f"({stored:,} bytes)" in lines[1] and f"{scales:,} float32 scales" in lines[1]
    counted = fp8_stored_bytes(count_parameters(config_from_hf(write(tmp_path, hf, "again.json"))))
    assert (counted.quantized, counted.scales, counted.plain, counted.bytes) == (fp8, scales, plain, stored)


def test_deepseek_v3_scales_by_hand() -> None:
    def blocks(n_out: int, n_in: int) -> int:  # one float32 scale per 128x128 block of an (out, in) weight
        return math.ceil(n_out / 128) * math.ceil(n_in / 128)

    d, h = 7168, 128
    attention = (blocks(1536, d) + blocks(h * 192, 1536) + blocks(576, d) + blocks(h * 256, 512)
                 + blocks(d, h * 128))  # q_a, q_b, kv_a (576 = 4.5 blocks), kv_b, o
    dense = 2 * blocks(18432, d) + blocks(d, 18432)
    expert = 2 * blocks(2048, d) + blocks(d, 2048)
    assert 61 * attention + 3 * dense + 58 * (256 + 1) * expert == 40_838_232 == FP8_CASES[0].values[3]


QUANTIZED = [  # published quantization_config objects of each method (the model's own fields aside)
    # TheBloke/Llama-2-7B-GPTQ
    ({"bits": 4, "group_size": 128, "damp_percent": 0.01, "desc_act": False, "sym": True, "true_sequential": True,
      "model_name_or_path": None, "model_file_base_name": "model", "quant_method": "gptq"}, "gptq (4-bit, groups of 128)"),
    # TheBloke/Llama-2-7B-AWQ
    ({"quant_method": "awq", "zero_point": True, "group_size": 128, "bits": 4, "version": "gemm"},
     "awq (4-bit, groups of 128)"),
    # a w4a16 compressed-tensors checkpoint (llm-compressor's pack-quantized format)
    ({"quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
      "ignore": ["lm_head"], "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": None,
                                                           "weights": {"num_bits": 4, "type": "int", "symmetric": True,
                                                                       "group_size": 128, "strategy": "group"}}}},
     "compressed-tensors (4-bit weights, pack-quantized)"),
]


@pytest.mark.parametrize("quant, described", QUANTIZED)
def test_other_methods_count_the_logical_model_without_bytes(tmp_path: Path, quant: dict, described: str) -> None:
    hf = {**without_quantization(QWEN3_8B_FP8), "quantization_config": quant}
    run = blockcli("count", str(write(tmp_path, hf)), "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["total"] == 8_190_735_360
    assert run.stderr.splitlines() == [
        f"blockcli: note: {tmp_path / 'config.json'}: quantization_config: {described}: the counts are logical "
        f"parameters, as the unquantized model has them; the stored bytes depend on the quantization"]


@pytest.mark.parametrize("quant, named", [
    ({"quant_method": "fp8"}, "quantization_config"),  # per-tensor or unknown blocks: no weight_block_size
    ({**FP8, "fmt": "e5m2"}, "quantization_config.fmt"),
    ({**FP8, "weight_block_size": [128]}, "quantization_config"),
    ({**FP8, "some_new_option": 1}, "quantization_config.some_new_option"),
    ({"quant_method": "gptq", "bits": 5}, "quantization_config.bits"),
    ({"load_in_8bit": True, "quant_method": "bitsandbytes"}, "quantization_config"),
    ({"quant_method": "mxfp4"}, "quantization_config"),  # gpt-oss's own; not a Qwen3's
    ({"quant_method": "compressed-tensors", "config_groups": {}}, "quantization_config"),
    ("fp8", "quantization_config"),
])
def test_unrecognised_quantization_is_one_line_naming_it(tmp_path: Path, quant: Any, named: str) -> None:
    hf = {**without_quantization(QWEN3_8B_FP8), "quantization_config": quant}
    run = blockcli("count", str(write(tmp_path, hf)))
    assert run.returncode == 2 and run.stdout == ""
    assert len(run.stderr.splitlines()) == 1 and f"field '{named}'" in run.stderr


def _safetensors(path: Path, tensors: dict[str, tuple[str, list[int], int]]) -> None:
    """A safetensors file of zeros: name → (dtype, shape, bytes per element)."""
    header, offset = {}, 0
    for name, (dtype, shape, size) in tensors.items():
        n = math.prod(shape) * size
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + bytes(offset))


def test_a_quantized_folder_is_reconciled_with_its_tensors(tmp_path: Path) -> None:
    """Its weights are read now (tests/test_quantized_weights.py): a folder holding one fp8 matrix of a model is
    reconciled with the config and refused naming what is missing, in one line."""
    folder = tmp_path / "qwen3-fp8"
    folder.mkdir()
    write(folder, TINY_QWEN3)
    _safetensors(folder / "model.safetensors", {
        "model.layers.0.self_attn.q_proj.weight": ("F8_E4M3", [48, 40], 1),
        "model.layers.0.self_attn.q_proj.weight_scale_inv": ("F32", [3, 2], 4),
    })
    for command in (["count", str(folder)], ["trace", str(folder), "--layer", "0"],
                    ["verify", str(folder), "--layer", "0"]):
        run = blockcli(*command)
        assert run.returncode == 2 and len(run.stderr.splitlines()) == 1, (command, run.stderr)
        assert "missing tensor 'model.embed_tokens.weight'" in run.stderr and str(folder) in run.stderr
    config_only = blockcli("trace", str(folder / "config.json"), "--layer", "0", "--shapes-only")
    assert config_only.returncode == 0, config_only.stderr  # the logical model on seeded weights


def test_yaml_weights_from_a_quantized_folder_are_checked_too(tmp_path: Path) -> None:
    folder = tmp_path / "quantized"
    folder.mkdir()
    write(folder, {**TINY_QWEN3, "quantization_config": {"quant_method": "gptq", "bits": 4}})
    _safetensors(folder / "model.safetensors", {"model.layers.0.self_attn.q_proj.qweight": ("I32", [5, 48], 4)})
    plain = write(tmp_path, without_quantization(TINY_QWEN3), "plain.json")
    run = blockcli("trace", str(plain), "--weights", str(folder), "--layer", "0")
    assert run.returncode == 2 and len(run.stderr.splitlines()) == 1
    assert "'model.layers.0.self_attn.q_proj' has no tensor 'model.layers.0.self_attn.q_proj.qzeros'" in run.stderr
