"""Hugging Face config.json import: `blockcli.hf` (reached through `load_config(path.json)`).

The configs below are transcriptions of the published `config.json` files on the Hugging Face
Hub (the URL is on each). For each one:

1. `count_parameters(load_config(path)).total` is the model's published parameter count
   (sources as in tests/test_presets.py: KerasHub presets' parameter counts, HF Hub safetensors
   totals, the EleutherAI Pythia card, an AMD Quark tutorial for OPT-125m);
2. the imported block and model sections equal the packaged preset's, field by field;
3. `to_yaml` of the mapping is YAML that `load_config` reads back to an equal Config.

Then the error contract: every problem is one line of `ConfigError` naming the file and the
field, never a traceback; a field blockcli cannot represent is named, never dropped.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from blockcli.config import ConfigError, parse_config
from blockcli.sources import load_config
from blockcli.count import count_parameters
from blockcli.hf import config_from_hf, hf_to_mapping, to_yaml
from conftest import config_error_message

# --------------------------------------------------------------------------- published configs

GPT2 = {  # https://huggingface.co/openai-community/gpt2/blob/main/config.json
    "activation_function": "gelu_new",
    "architectures": ["GPT2LMHeadModel"],
    "attn_pdrop": 0.1,
    "bos_token_id": 50256,
    "embd_pdrop": 0.1,
    "eos_token_id": 50256,
    "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05,
    "model_type": "gpt2",
    "n_ctx": 1024,
    "n_embd": 768,
    "n_head": 12,
    "n_layer": 12,
    "n_positions": 1024,
    "resid_pdrop": 0.1,
    "summary_activation": None,
    "summary_first_dropout": 0.1,
    "summary_proj_to_labels": True,
    "summary_type": "cls_index",
    "summary_use_proj": True,
    "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}},
    "vocab_size": 50257,
}

LLAMA_2_7B = {  # https://huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json
    "_name_or_path": "meta-llama/Llama-2-7b-hf",
    "architectures": ["LlamaForCausalLM"],
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 11008,
    "max_position_embeddings": 4096,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 32,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "transformers_version": "4.31.0.dev0",
    "use_cache": True,
    "vocab_size": 32000,
}

MISTRAL_7B = {  # https://huggingface.co/mistralai/Mistral-7B-v0.1/blob/main/config.json
    "architectures": ["MistralForCausalLM"],
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 32768,
    "model_type": "mistral",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0,
    "sliding_window": 4096,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.34.0.dev0",
    "use_cache": True,
    "vocab_size": 32000,
}

QWEN2_05B = {  # https://huggingface.co/Qwen/Qwen2-0.5B/blob/main/config.json
    "architectures": ["Qwen2ForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151643,
    "hidden_act": "silu",
    "hidden_size": 896,
    "initializer_range": 0.02,
    "intermediate_size": 4864,
    "max_position_embeddings": 131072,
    "max_window_layers": 24,
    "model_type": "qwen2",
    "num_attention_heads": 14,
    "num_hidden_layers": 24,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": 131072,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.40.1",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}

PYTHIA_160M = {  # https://huggingface.co/EleutherAI/pythia-160m/blob/main/config.json
    "architectures": ["GPTNeoXForCausalLM"],
    "bos_token_id": 0,
    "eos_token_id": 0,
    "hidden_act": "gelu",
    "hidden_size": 768,
    "initializer_range": 0.02,
    "intermediate_size": 3072,
    "layer_norm_eps": 1e-05,
    "max_position_embeddings": 2048,
    "model_type": "gpt_neox",
    "num_attention_heads": 12,
    "num_hidden_layers": 12,
    "rotary_emb_base": 10000,
    "rotary_pct": 0.25,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "transformers_version": "4.24.0",
    "use_cache": True,
    "use_parallel_residual": True,
    "vocab_size": 50304,
}

OPT_125M = {  # https://huggingface.co/facebook/opt-125m/blob/main/config.json
    "_name_or_path": "facebook/opt-125m",
    "_remove_final_layer_norm": False,
    "activation_dropout": 0.0,
    "activation_function": "relu",
    "architectures": ["OPTForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 2,
    "do_layer_norm_before": True,
    "dropout": 0.1,
    "eos_token_id": 2,
    "ffn_dim": 3072,
    "hidden_size": 768,
    "init_std": 0.02,
    "layerdrop": 0.0,
    "max_position_embeddings": 2048,
    "model_type": "opt",
    "num_attention_heads": 12,
    "num_hidden_layers": 12,
    "pad_token_id": 1,
    "prefix": "</s>",
    "torch_dtype": "float16",
    "transformers_version": "4.21.0.dev0",
    "use_cache": True,
    "vocab_size": 50272,
    "word_embed_proj_dim": 768,
}

GEMMA_2B = {  # https://huggingface.co/google/gemma-2b/blob/main/config.json
    "architectures": ["GemmaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 2,
    "eos_token_id": 1,
    "head_dim": 256,
    "hidden_act": "gelu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 16384,
    "max_position_embeddings": 8192,
    "model_type": "gemma",
    "num_attention_heads": 8,
    "num_hidden_layers": 18,
    "num_key_value_heads": 1,
    "pad_token_id": 0,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 10000.0,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.38.0.dev0",
    "use_cache": True,
    "vocab_size": 256000,
}

GPTJ_6B = {  # https://huggingface.co/EleutherAI/gpt-j-6b/blob/main/config.json
    "activation_function": "gelu_new",
    "architectures": ["GPTJForCausalLM"],
    "attn_pdrop": 0.0,
    "bos_token_id": 50256,
    "embd_pdrop": 0.0,
    "eos_token_id": 50256,
    "gradient_checkpointing": False,
    "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05,
    "model_type": "gptj",
    "n_embd": 4096,
    "n_head": 16,
    "n_inner": None,
    "n_layer": 28,
    "n_positions": 2048,
    "resid_pdrop": 0.0,
    "rotary": True,
    "rotary_dim": 64,
    "scale_attn_weights": True,
    "summary_activation": None,
    "summary_first_dropout": 0.1,
    "summary_proj_to_labels": True,
    "summary_type": "cls_index",
    "summary_use_proj": True,
    "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50, "temperature": 1.0}},
    "tie_word_embeddings": False,
    "tokenizer_class": "GPT2Tokenizer",
    "transformers_version": "4.18.0.dev0",
    "use_cache": True,
    "vocab_size": 50400,
}

PHI_2 = {  # https://huggingface.co/microsoft/phi-2/blob/main/config.json
    "_name_or_path": "microsoft/phi-2",
    "architectures": ["PhiForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 50256,
    "embd_pdrop": 0.0,
    "eos_token_id": 50256,
    "hidden_act": "gelu_new",
    "hidden_size": 2560,
    "initializer_range": 0.02,
    "intermediate_size": 10240,
    "layer_norm_eps": 1e-05,
    "max_position_embeddings": 2048,
    "model_type": "phi",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 32,
    "partial_rotary_factor": 0.4,
    "qk_layernorm": False,
    "resid_pdrop": 0.1,
    "rope_scaling": None,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "transformers_version": "4.37.0",
    "use_cache": True,
    "vocab_size": 51200,
}

GRANITE_3_1_2B = {  # https://huggingface.co/ibm-granite/granite-3.1-2b-base/blob/main/config.json
    "architectures": ["GraniteForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.1,
    "attention_multiplier": 0.015625,
    "bos_token_id": 0,
    "embedding_multiplier": 12.0,
    "eos_token_id": 0,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 8192,
    "logits_scaling": 8.0,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "model_type": "granite",
    "num_attention_heads": 32,
    "num_hidden_layers": 40,
    "num_key_value_heads": 8,
    "pad_token_id": 0,
    "residual_multiplier": 0.22,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "rope_theta": 5000000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.47.0",
    "use_cache": True,
    "vocab_size": 49155,
}

COMMAND_R_V01 = {  # https://huggingface.co/CohereForAI/c4ai-command-r-v01/blob/main/config.json
    "architectures": ["CohereForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 5,
    "eos_token_id": 255001,
    "hidden_act": "silu",
    "hidden_size": 8192,
    "initializer_range": 0.02,
    "intermediate_size": 22528,
    "layer_norm_eps": 1e-05,
    "logit_scale": 0.0625,
    "max_position_embeddings": 8192,
    "model_type": "cohere",
    "num_attention_heads": 64,
    "num_hidden_layers": 40,
    "num_key_value_heads": 64,
    "pad_token_id": 0,
    "rope_theta": 8000000.0,
    "torch_dtype": "float16",
    "transformers_version": "4.38.2",
    "use_cache": True,
    "use_qk_norm": False,
    "vocab_size": 256000,
}

STABLELM_2_1_6B = {  # https://huggingface.co/stabilityai/stablelm-2-1_6b/blob/main/config.json
    "architectures": ["StableLmForCausalLM"],
    "bos_token_id": 100257,
    "eos_token_id": 100257,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 5632,
    "max_position_embeddings": 4096,
    "model_type": "stablelm",
    "layer_norm_eps": 1e-05,
    "num_attention_heads": 32,
    "num_hidden_layers": 24,
    "num_key_value_heads": 32,
    "partial_rotary_factor": 0.25,
    "rope_theta": 10000,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "transformers_version": "4.38.0",
    "use_cache": True,
    "use_qkv_bias": True,
    "vocab_size": 100352,
}


PHI_3_MINI_4K = {  # https://huggingface.co/microsoft/Phi-3-mini-4k-instruct/blob/main/config.json
    "_name_or_path": "Phi-3-mini-4k-instruct",
    "architectures": ["Phi3ForCausalLM"],
    "attention_dropout": 0.0,
    "auto_map": {"AutoConfig": "configuration_phi3.Phi3Config",
                 "AutoModelForCausalLM": "modeling_phi3.Phi3ForCausalLM"},
    "bos_token_id": 1,
    "embd_pdrop": 0.0,
    "eos_token_id": 32000,
    "hidden_act": "silu",
    "hidden_size": 3072,
    "initializer_range": 0.02,
    "intermediate_size": 8192,
    "max_position_embeddings": 4096,
    "model_type": "phi3",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 32,
    "original_max_position_embeddings": 4096,
    "pad_token_id": 32000,
    "resid_pdrop": 0.0,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "rope_theta": 10000.0,
    "sliding_window": 2047,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.40.2",
    "use_cache": True,
    "attention_bias": False,
    "vocab_size": 32064,
}

STARCODER = {  # the fields of https://huggingface.co/bigcode/starcoder/blob/main/config.json
    "activation_function": "gelu_pytorch_tanh", "architectures": ["GPTBigCodeForCausalLM"],
    "attention_softmax_in_fp32": True, "attn_pdrop": 0.1, "bos_token_id": 0, "embd_pdrop": 0.1, "eos_token_id": 0,
    "inference_runner": 0, "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "max_batch_size": None,
    "max_sequence_length": None, "model_type": "gpt_bigcode", "multi_query": True, "n_embd": 6144, "n_head": 48,
    "n_inner": 24576, "n_layer": 40, "n_positions": 8192, "pad_key_length": True, "pre_allocate_kv_cache": False,
    "resid_pdrop": 0.1, "scale_attention_softmax_in_fp32": True, "scale_attn_weights": True,
    "summary_activation": None, "summary_first_dropout": 0.1, "summary_proj_to_labels": True,
    "summary_type": "cls_index", "summary_use_proj": True, "torch_dtype": "float32",
    "transformers_version": "4.28.1", "use_cache": True, "validate_runner_input": True, "vocab_size": 49152,
}

FALCON_7B = {  # https://huggingface.co/tiiuae/falcon-7b/blob/main/config.json
    "alibi": False, "apply_residual_connection_post_layernorm": False, "architectures": ["FalconForCausalLM"],
    "attention_dropout": 0.0,
    "auto_map": {"AutoConfig": "configuration_falcon.FalconConfig", "AutoModel": "modeling_falcon.FalconModel",
                 "AutoModelForCausalLM": "modeling_falcon.FalconForCausalLM"},
    "bias": False, "bos_token_id": 11, "eos_token_id": 11, "hidden_dropout": 0.0, "hidden_size": 4544,
    "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "falcon", "multi_query": True,
    "new_decoder_architecture": False, "num_attention_heads": 71, "num_hidden_layers": 32, "parallel_attn": True,
    "torch_dtype": "bfloat16", "transformers_version": "4.27.4", "use_cache": True, "vocab_size": 65024,
}
# https://huggingface.co/microsoft/Phi-3.5-mini-instruct/blob/main/config.json: Phi-3-mini's shapes with
# longrope scaling to 128K positions (its 48 short and 48 long factors transcribed)
PHI_3_5_MINI = {
    "architectures": ["Phi3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 1,
    "embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu", "hidden_size": 3072, "initializer_range": 0.02,
    "intermediate_size": 8192, "max_position_embeddings": 131072, "model_type": "phi3", "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 32, "original_max_position_embeddings": 4096,
    "pad_token_id": 32000, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
    "sliding_window": 262144, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.3", "use_cache": True, "vocab_size": 32064,
    "rope_scaling": {"type": "longrope", "long_factor": [
        1.0800000429153442, 1.1100000143051147, 1.1399999856948853, 1.340000033378601, 1.5899999141693115, 1.600000023841858,
        1.6200000047683716, 2.620000123977661, 3.2300000190734863, 3.2300000190734863, 4.789999961853027, 7.400000095367432,
        7.700000286102295, 9.09000015258789, 12.199999809265137, 17.670000076293945, 24.46000099182129, 28.57000160217285,
        30.420001983642578, 30.840002059936523, 32.590003967285156, 32.93000411987305, 42.320003509521484, 44.96000289916992,
        50.340003967285156, 50.45000457763672, 57.55000305175781, 57.93000411987305, 58.21000289916992, 60.1400032043457,
        62.61000442504883, 62.62000274658203, 62.71000289916992, 63.1400032043457, 63.1400032043457, 63.77000427246094,
        63.93000411987305, 63.96000289916992, 63.970001220703125, 64.02999877929688, 64.06999969482422, 64.08000183105469,
        64.12000274658203, 64.41000366210938, 64.4800033569336, 64.51000213623047, 64.52999877929688, 64.83999633789062,
    ], "short_factor": [
        1.0, 1.0199999809265137, 1.0299999713897705, 1.0299999713897705, 1.0499999523162842, 1.0499999523162842,
        1.0499999523162842, 1.0499999523162842, 1.0499999523162842, 1.0699999332427979, 1.0999999046325684, 1.1099998950958252,
        1.1599998474121094, 1.1599998474121094, 1.1699998378753662, 1.2899998426437378, 1.339999794960022, 1.679999828338623,
        1.7899998426437378, 1.8199998140335083, 1.8499997854232788, 1.8799997568130493, 1.9099997282028198, 1.9399996995925903,
        1.9899996519088745, 2.0199997425079346, 2.0199997425079346, 2.0199997425079346, 2.0199997425079346, 2.0199997425079346,
        2.0199997425079346, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914,
        2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0799996852874756, 2.0899996757507324,
        2.189999580383301, 2.2199995517730713, 2.5899994373321533, 2.729999542236328, 2.749999523162842, 2.8399994373321533,
    ]},
}
OLMO_1B = {  # https://huggingface.co/allenai/OLMo-1B-hf/blob/main/config.json
    "architectures": ["OlmoForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": None,
    "clip_qkv": None, "eos_token_id": 50279, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 8192, "max_position_embeddings": 2048, "model_type": "olmo", "num_attention_heads": 16,
    "num_hidden_layers": 16, "num_key_value_heads": 16, "pad_token_id": 1, "pretraining_tp": 1, "rope_scaling": None,
    "rope_theta": 10000.0, "tie_word_embeddings": True, "torch_dtype": "float32",
    "transformers_version": "4.40.0.dev0", "use_cache": True, "vocab_size": 50304,
}
# https://huggingface.co/bigscience/bloom-560m/blob/main/config.json
BLOOM_560M = {
    'apply_residual_connection_post_layernorm': False,
    'architectures': ['BloomForCausalLM'],
    'attention_dropout': 0.0,
    'attention_softmax_in_fp32': True,
    'bias_dropout_fusion': True,
    'bos_token_id': 1,
    'eos_token_id': 2,
    'hidden_dropout': 0.0,
    'hidden_size': 1024,
    'initializer_range': 0.02,
    'layer_norm_epsilon': 1e-05,
    'masked_softmax_fusion': True,
    'model_type': 'bloom',
    'n_head': 16,
    'n_inner': None,
    'n_layer': 24,
    'offset_alibi': 100,
    'pad_token_id': 3,
    'pretraining_tp': 1,
    'skip_bias_add': True,
    'skip_bias_add_qkv': False,
    'slow_but_exact': False,
    'transformers_version': '4.24.0',
    'unk_token_id': 0,
    'use_cache': True,
    'vocab_size': 250880,
}
# https://huggingface.co/facebook/opt-350m/blob/main/config.json
OPT_350M = {
    '_name_or_path': 'facebook/opt-350m',
    '_remove_final_layer_norm': False,
    'activation_dropout': 0.0,
    'activation_function': 'relu',
    'architectures': ['OPTForCausalLM'],
    'attention_dropout': 0.0,
    'bos_token_id': 2,
    'do_layer_norm_before': False,
    'dropout': 0.1,
    'eos_token_id': 2,
    'ffn_dim': 4096,
    'hidden_size': 1024,
    'init_std': 0.02,
    'layerdrop': 0.0,
    'max_position_embeddings': 2048,
    'model_type': 'opt',
    'num_attention_heads': 16,
    'num_hidden_layers': 24,
    'pad_token_id': 1,
    'prefix': '</s>',
    'torch_dtype': 'float16',
    'transformers_version': '4.20.0.dev0',
    'use_cache': True,
    'vocab_size': 50272,
    'word_embed_proj_dim': 512,
}
# Falcon-40B's shape (tiiuae/falcon-40b config.json): the new decoder architecture, GQA 128/8
FALCON_40B = {**FALCON_7B, "hidden_size": 8192, "num_attention_heads": 128, "num_kv_heads": 8,
                             "num_hidden_layers": 60, "new_decoder_architecture": True}

# (HF config, packaged preset with the same architecture, published parameter count and its source)
# https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json
MIXTRAL_8X7B = {"architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mixtral", "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": False, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02, "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.36.0.dev0", "use_cache": True, "vocab_size": 32000}
# https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json
QWEN3_30B_A3B = {"architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 6144, "max_position_embeddings": 40960, "max_window_layers": 48, "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 768, "norm_topk_prob": True, "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4, "output_router_logits": False, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": True, "use_sliding_window": False, "vocab_size": 151936}

# https://huggingface.co/openai/gpt-oss-20b/blob/main/config.json (OpenAI's fields experts_per_token and
# initial_context_length, and its MXFP4 quantization_config, included); gpt-oss-120b's differs in its 36 layers
# and 128 experts
GPT_OSS_20B = {'architectures': ['GptOssForCausalLM'], 'attention_bias': True, 'attention_dropout': 0.0, 'eos_token_id': 200002, 'experts_per_token': 4, 'head_dim': 64, 'hidden_act': 'silu', 'hidden_size': 2880, 'initial_context_length': 4096, 'initializer_range': 0.02, 'intermediate_size': 2880, 'layer_types': ['sliding_attention', 'full_attention', 'sliding_attention', 'full_attention', 'sliding_attention', 'full_attention', 'sliding_attention', 'full_attention', 'sliding_attention', 'full_attention', 'sliding_attention', 'full_attention', 'sliding_attention', 'full_attention', 'sliding_attention', 'full_attention', 'sliding_attention', 'full_attention', 'sliding_attention', 'full_attention', 'sliding_attention', 'full_attention', 'sliding_attention', 'full_attention'], 'max_position_embeddings': 131072, 'model_type': 'gpt_oss', 'num_attention_heads': 64, 'num_experts_per_tok': 4, 'num_hidden_layers': 24, 'num_key_value_heads': 8, 'num_local_experts': 32, 'output_router_logits': False, 'pad_token_id': 199999, 'quantization_config': {'modules_to_not_convert': ['model.layers.*.self_attn', 'model.layers.*.mlp.router', 'model.embed_tokens', 'lm_head'], 'quant_method': 'mxfp4'}, 'rms_norm_eps': 1e-05, 'rope_scaling': {'beta_fast': 32.0, 'beta_slow': 1.0, 'factor': 32.0, 'original_max_position_embeddings': 4096, 'rope_type': 'yarn', 'truncate': False}, 'rope_theta': 150000, 'router_aux_loss_coef': 0.9, 'sliding_window': 128, 'swiglu_limit': 7.0, 'tie_word_embeddings': False, 'transformers_version': '4.55.0.dev0', 'use_cache': True, 'vocab_size': 201088}
GPT_OSS_120B = {**GPT_OSS_20B, "num_hidden_layers": 36, "num_local_experts": 128,
                "layer_types": ["sliding_attention", "full_attention"] * 18}

# https://huggingface.co/Qwen/Qwen2.5-VL-7B-Instruct/blob/main/config.json: transformers 4's flat layout, the
# language model's fields at the top level beside vision_config, M-RoPE as rope_scaling type mrope
QWEN25_VL_7B = {'architectures': ['Qwen2_5_VLForConditionalGeneration'], 'attention_dropout': 0.0, 'bos_token_id': 151643, 'eos_token_id': 151645, 'vision_start_token_id': 151652, 'vision_end_token_id': 151653, 'vision_token_id': 151654, 'image_token_id': 151655, 'video_token_id': 151656, 'hidden_act': 'silu', 'hidden_size': 3584, 'initializer_range': 0.02, 'intermediate_size': 18944, 'max_position_embeddings': 128000, 'max_window_layers': 28, 'model_type': 'qwen2_5_vl', 'num_attention_heads': 28, 'num_hidden_layers': 28, 'num_key_value_heads': 4, 'rms_norm_eps': 1e-06, 'rope_theta': 1000000.0, 'sliding_window': 32768, 'tie_word_embeddings': False, 'torch_dtype': 'bfloat16', 'transformers_version': '4.41.2', 'use_cache': True, 'use_sliding_window': False, 'vision_config': {'depth': 32, 'hidden_act': 'silu', 'hidden_size': 1280, 'intermediate_size': 3420, 'num_heads': 16, 'in_chans': 3, 'out_hidden_size': 3584, 'patch_size': 14, 'spatial_merge_size': 2, 'spatial_patch_size': 14, 'window_size': 112, 'fullatt_block_indexes': [7, 15, 23, 31], 'tokens_per_second': 2, 'temporal_patch_size': 2}, 'rope_scaling': {'type': 'mrope', 'mrope_section': [16, 24, 24]}, 'vocab_size': 152064}
# https://huggingface.co/Qwen/Qwen3-VL-8B-Instruct/blob/main/config.json: text_config nested, interleaved M-RoPE
QWEN3_VL_8B = {'architectures': ['Qwen3VLForConditionalGeneration'], 'image_token_id': 151655, 'model_type': 'qwen3_vl', 'text_config': {'attention_bias': False, 'attention_dropout': 0.0, 'bos_token_id': 151643, 'dtype': 'bfloat16', 'eos_token_id': 151645, 'head_dim': 128, 'hidden_act': 'silu', 'hidden_size': 4096, 'initializer_range': 0.02, 'intermediate_size': 12288, 'max_position_embeddings': 262144, 'model_type': 'qwen3_vl_text', 'num_attention_heads': 32, 'num_hidden_layers': 36, 'num_key_value_heads': 8, 'rms_norm_eps': 1e-06, 'rope_scaling': {'mrope_interleaved': True, 'mrope_section': [24, 20, 20], 'rope_type': 'default'}, 'rope_theta': 5000000, 'use_cache': True, 'vocab_size': 151936}, 'tie_word_embeddings': False, 'transformers_version': '4.57.0.dev0', 'video_token_id': 151656, 'vision_config': {'deepstack_visual_indexes': [8, 16, 24], 'depth': 27, 'hidden_act': 'gelu_pytorch_tanh', 'hidden_size': 1152, 'in_channels': 3, 'initializer_range': 0.02, 'intermediate_size': 4304, 'model_type': 'qwen3_vl', 'num_heads': 16, 'num_position_embeddings': 2304, 'out_hidden_size': 4096, 'patch_size': 16, 'spatial_merge_size': 2, 'temporal_patch_size': 2}, 'vision_end_token_id': 151653, 'vision_start_token_id': 151652}


# https://huggingface.co/Qwen/Qwen3-VL-30B-A3B-Instruct/blob/main/config.json
QWEN3_VL_30B_A3B = {'architectures': ['Qwen3VLMoeForConditionalGeneration'], 'image_token_id': 151655, 'model_type': 'qwen3_vl_moe', 'text_config': {'attention_bias': False, 'attention_dropout': 0.0, 'bos_token_id': 151643, 'decoder_sparse_step': 1, 'dtype': 'bfloat16', 'eos_token_id': 151645, 'head_dim': 128, 'hidden_act': 'silu', 'hidden_size': 2048, 'initializer_range': 0.02, 'intermediate_size': 6144, 'max_position_embeddings': 262144, 'mlp_only_layers': [], 'model_type': 'qwen3_vl_moe_text', 'moe_intermediate_size': 768, 'norm_topk_prob': True, 'num_attention_heads': 32, 'num_experts': 128, 'num_experts_per_tok': 8, 'num_hidden_layers': 48, 'num_key_value_heads': 4, 'rms_norm_eps': 1e-06, 'rope_scaling': {'mrope_interleaved': True, 'mrope_section': [24, 20, 20], 'rope_type': 'default'}, 'rope_theta': 5000000, 'use_cache': True, 'vocab_size': 151936}, 'tie_word_embeddings': False, 'transformers_version': '4.57.0.dev0', 'video_token_id': 151656, 'vision_config': {'deepstack_visual_indexes': [8, 16, 24], 'depth': 27, 'hidden_act': 'gelu_pytorch_tanh', 'hidden_size': 1152, 'in_channels': 3, 'initializer_range': 0.02, 'intermediate_size': 4304, 'model_type': 'qwen3_vl_moe', 'num_heads': 16, 'num_position_embeddings': 2304, 'out_hidden_size': 2048, 'patch_size': 16, 'spatial_merge_size': 2, 'temporal_patch_size': 2}, 'vision_end_token_id': 151653, 'vision_start_token_id': 151652}



# The presets people ask for first (issue #31), each transcribed from its hub config.json
# https://huggingface.co/meta-llama/Llama-3.1-70B/blob/main/config.json
LLAMA_3_1_70B = {"architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 8192, "initializer_range": 0.02, "intermediate_size": 28672, "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "llama", "num_attention_heads": 64, "num_hidden_layers": 80, "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"}, "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.43.0.dev0", "use_cache": True, "vocab_size": 128256}
# https://huggingface.co/meta-llama/Llama-3.3-70B-Instruct/blob/main/config.json (its fields as Llama 3.1 70B's, plus head_dim; eos ids differ)
LLAMA_3_3_70B = {**LLAMA_3_1_70B, "eos_token_id": [128001, 128008, 128009], "head_dim": 128, "transformers_version": "4.47.0.dev0"}
# https://huggingface.co/meta-llama/Llama-3.1-405B/blob/main/config.json (Llama 3.1 70B's fields but the sizes)
LLAMA_3_1_405B = {**LLAMA_3_1_70B, "hidden_size": 16384, "intermediate_size": 53248, "num_attention_heads": 128, "num_hidden_layers": 126, "transformers_version": "4.43.0.dev0"}
# https://huggingface.co/meta-llama/Llama-3.2-3B/blob/main/config.json
LLAMA_3_2_3B = {"architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 128, "hidden_act": "silu", "hidden_size": 3072, "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "llama", "num_attention_heads": 24, "num_hidden_layers": 28, "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"}, "rope_theta": 500000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16", "transformers_version": "4.45.0.dev0", "use_cache": True, "vocab_size": 128256}
# https://huggingface.co/mistralai/Mistral-7B-v0.3/blob/main/config.json
MISTRAL_7B_V03 = {"architectures": ["MistralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.42.0.dev0", "use_cache": True, "vocab_size": 32768}
# https://huggingface.co/Qwen/Qwen2.5-72B/blob/main/config.json
QWEN2_5_72B = {"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 8192, "initializer_range": 0.02, "intermediate_size": 29568, "max_position_embeddings": 131072, "max_window_layers": 80, "model_type": "qwen2", "num_attention_heads": 64, "num_hidden_layers": 80, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.43.1", "use_cache": True, "use_sliding_window": False, "vocab_size": 152064}
# https://huggingface.co/Qwen/Qwen2.5-32B/blob/main/config.json (Qwen2.5-72B's fields but the sizes)
QWEN2_5_32B = {**QWEN2_5_72B, "hidden_size": 5120, "intermediate_size": 27648, "max_window_layers": 64, "num_attention_heads": 40, "num_hidden_layers": 64}
# https://huggingface.co/Qwen/Qwen2.5-14B/blob/main/config.json (Qwen2.5-72B's fields but the sizes)
QWEN2_5_14B = {**QWEN2_5_72B, "hidden_size": 5120, "intermediate_size": 13824, "max_window_layers": 48, "num_attention_heads": 40, "num_hidden_layers": 48}
# https://huggingface.co/Qwen/Qwen3-32B/blob/main/config.json
QWEN3_32B = {"architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120, "initializer_range": 0.02, "intermediate_size": 25600, "max_position_embeddings": 40960, "max_window_layers": 64, "model_type": "qwen3", "num_attention_heads": 64, "num_hidden_layers": 64, "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": True, "use_sliding_window": False, "vocab_size": 151936}


CASES = [
    # KerasHub gpt2_presets.py "gpt2_base_en" (HF GPT2LMHeadModel, tied head counted once).
    pytest.param(GPT2, "gpt2", 124_439_808, id="gpt2"),
    # KerasHub llama_presets.py "llama2_7b_en"; HF Hub safetensors F16 total of Llama-2-7b-hf.
    pytest.param(LLAMA_2_7B, "llama-2-7b", 6_738_415_616, id="llama-2-7b"),
    # KerasHub mistral_presets.py "mistral_7b_en" (Mistral-7B-v0.1).
    pytest.param(MISTRAL_7B, "mistral-7b", 7_241_732_096, id="mistral-7b-v0.1"),
    # KerasHub qwen_presets.py "qwen2.5_0.5b_en" / HF safetensors of Qwen2.5-0.5B-Instruct (same shapes).
    pytest.param(QWEN2_05B, "qwen2-0.5b", 494_032_768, id="qwen2-0.5b"),
    # EleutherAI Pythia README: 85,056,000 non-embedding + 2 x 50304 x 768 untied embeddings.
    pytest.param(PYTHIA_160M, "pythia-160m", 162_322_944, id="pythia-160m"),
    # AMD Quark depth-wise pruning tutorial: "the original model has 125239296 parameters".
    pytest.param(OPT_125M, "opt-125m", 125_239_296, id="opt-125m"),
    # KerasHub gemma_presets.py "gemma_2b_en".
    pytest.param(GEMMA_2B, "gemma-2b", 2_506_172_416, id="gemma-2b"),
    # transformers GPTJForCausalLM / PhiForCausalLM on the meta device (tests/test_presets.py).
    pytest.param(GPTJ_6B, "gpt-j-6b", 6_050_882_784, id="gpt-j-6b"),
    pytest.param(PHI_2, "phi-2", 2_779_683_840, id="phi-2"),
    # transformers GraniteForCausalLM on the meta device (tests/test_presets.py).
    pytest.param(GRANITE_3_1_2B, "granite-3.1-2b", 2_533_531_648, id="granite-3.1-2b"),
    pytest.param(COMMAND_R_V01, "command-r-v01", 34_980_831_232, id="command-r-v01"),
    pytest.param(STABLELM_2_1_6B, "stablelm-2-1.6b", 1_644_515_328, id="stablelm-2-1.6b"),
    # transformers Phi3ForCausalLM on the meta device (tests/test_presets.py); the model card's "3.8B".
    pytest.param(PHI_3_MINI_4K, "phi-3-mini-4k", 3_821_079_552, id="phi-3-mini-4k"),
    pytest.param(PHI_3_5_MINI, "phi-3.5-mini", 3_821_079_552, id="phi-3.5-mini"),
    # transformers GPTBigCodeForCausalLM on the meta device (tests/test_presets.py); the paper's "15.5B".
    pytest.param(STARCODER, "starcoder", 15_517_456_384, id="starcoder"),
    # transformers FalconForCausalLM on the meta device (tests/test_presets.py).
    pytest.param(FALCON_7B, "falcon-7b", 6_921_720_704, id="falcon-7b"),
    # transformers OlmoForCausalLM on the meta device (tests/test_presets.py).
    pytest.param(OLMO_1B, "olmo-1b", 1_176_764_416, id="olmo-1b"),
    # transformers BloomForCausalLM on the meta device (tests/test_presets.py); the model card's figure.
    pytest.param(BLOOM_560M, "bloom-560m", 559_214_592, id="bloom-560m"),
    # transformers OPTForCausalLM on the meta device (tests/test_presets.py); the OPT paper's "350M".
    pytest.param(OPT_350M, "opt-350m", 331_196_416, id="opt-350m"),
    # transformers 5.24 on the meta device (sum of numel), as the presets' tests say
    pytest.param(MIXTRAL_8X7B, "mixtral-8x7b", 46_702_792_704, id="mixtral-8x7b"),
    pytest.param(QWEN3_30B_A3B, "qwen3-30b-a3b", 30_532_122_624, id="qwen3-30b-a3b"),
    # transformers 5.24 GptOssForCausalLM on the meta device; "20.91B" and "116.83B" in OpenAI's model card
    pytest.param(GPT_OSS_20B, "gpt-oss-20b", 20_914_757_184, id="gpt-oss-20b"),
    pytest.param(GPT_OSS_120B, "gpt-oss-120b", 116_829_156_672, id="gpt-oss-120b"),
    # transformers 5.24 on the meta device, the parameters outside model.visual: the language models
    pytest.param(QWEN25_VL_7B, "qwen2.5-vl-7b", 7_615_616_512, id="qwen2.5-vl-7b"),
    pytest.param(QWEN3_VL_8B, "qwen3-vl-8b", 8_190_735_360, id="qwen3-vl-8b"),
    pytest.param(QWEN3_VL_30B_A3B, "qwen3-vl-30b-a3b", 30_532_122_624, id="qwen3-vl-30b-a3b"),
    # transformers 5.24 on the meta device (sum of numel), as tests/test_presets.py says
    pytest.param(LLAMA_3_1_70B, "llama-3.1-70b", 70_553_706_496, id="llama-3.1-70b"),
    pytest.param(LLAMA_3_3_70B, "llama-3.3-70b", 70_553_706_496, id="llama-3.3-70b"),
    pytest.param(LLAMA_3_1_405B, "llama-3.1-405b", 405_853_388_800, id="llama-3.1-405b"),
    pytest.param(LLAMA_3_2_3B, "llama-3.2-3b", 3_212_749_824, id="llama-3.2-3b"),
    pytest.param(MISTRAL_7B_V03, "mistral-7b-v0.3", 7_248_023_552, id="mistral-7b-v0.3"),
    pytest.param(QWEN2_5_14B, "qwen2.5-14b", 14_770_033_664, id="qwen2.5-14b"),
    pytest.param(QWEN2_5_32B, "qwen2.5-32b", 32_763_876_352, id="qwen2.5-32b"),
    pytest.param(QWEN2_5_72B, "qwen2.5-72b", 72_706_203_648, id="qwen2.5-72b"),
    pytest.param(QWEN3_32B, "qwen3-32b", 32_762_123_264, id="qwen3-32b"),
]


def write_json(tmp_path: Path, data: Any, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return path


def hf_error(source: Path | str) -> str:
    """Load `source` and return the ConfigError message; fail on success or on any other exception."""
    message = config_error_message(lambda: load_config(source), str(source))
    assert message.startswith(str(source)), f"message does not name the file: {message!r}"
    return message


def with_fields(base: dict, **changes: Any) -> dict:
    data = dict(base)
    for key, value in changes.items():
        if value is _DROP:
            data.pop(key, None)
        else:
            data[key] = value
    return data


_DROP = object()


# --------------------------------------------------------------------------- published models


@pytest.mark.parametrize("hf, preset, published", CASES)
def test_published_parameter_count(tmp_path: Path, hf: dict, preset: str, published: int) -> None:
    config = load_config(write_json(tmp_path, hf))
    assert count_parameters(config).total == published


@pytest.mark.parametrize("hf, preset, published", CASES)
def test_mapping_equals_packaged_preset_field_by_field(tmp_path: Path, hf: dict, preset: str,
                                                       published: int) -> None:
    imported = load_config(write_json(tmp_path, hf))
    packaged = load_config(preset)
    for section in ("block", "model"):
        got, want = asdict(getattr(imported, section)), asdict(getattr(packaged, section))
        assert got.keys() == want.keys()
        for key in want:
            assert got[key] == want[key], f"{section}.{key}: imported {got[key]!r}, preset {want[key]!r}"


@pytest.mark.parametrize("hf, preset, published", CASES)
def test_to_yaml_round_trips(tmp_path: Path, hf: dict, preset: str, published: int) -> None:
    path = write_json(tmp_path, hf)
    original = config_from_hf(path)
    text = to_yaml(hf_to_mapping(hf, str(path)), f"imported from {path}\nsecond comment line")
    assert text.startswith("# imported from ")
    assert "# second comment line\n" in text
    yaml_path = tmp_path / "imported.yaml"
    yaml_path.write_text(text, encoding="utf-8")
    again = load_config(yaml_path)
    assert (again.block, again.model, again.run, again.about) == \
           (original.block, original.model, original.run, original.about)


@pytest.mark.parametrize("hf, preset, published", CASES)
def test_run_and_about_sections(tmp_path: Path, hf: dict, preset: str, published: int) -> None:
    path = write_json(tmp_path, hf)
    config = load_config(path)
    assert (config.run.batch, config.run.seq_len, config.run.dtype, config.run.seed) == (1, 8, "float32", 0)
    assert config.about.source == str(path)
    assert f"model_type '{hf['model_type']}'" in config.about.description
    assert config.name == str(path)


def test_hf_to_mapping_is_plain_data_shaped_like_the_yaml() -> None:
    mapping = hf_to_mapping(QWEN2_05B, "qwen.json")
    assert list(mapping) == ["about", "block", "model", "run"]
    assert mapping["block"]["bias"] == {"qkv": True, "out": False, "mlp": False, "norm": False}
    assert mapping["block"]["activation"] == "swiglu"
    assert mapping["model"]["tie_embeddings"] is True
    json.dumps(mapping)  # nothing but JSON-able scalars and mappings


def test_mistral_sliding_window_is_modelled() -> None:
    assert block_of(MISTRAL_7B)["sliding_window"] == 4096


def test_gemma_embedding_scale_and_unit_offset_norm_are_modelled() -> None:
    mapping = hf_to_mapping(GEMMA_2B, "g.json")
    assert mapping["block"]["norm_unit_offset"] is True
    assert mapping["model"]["embedding_multiplier"] == 2048 ** 0.5


@pytest.mark.parametrize("value", [None, False])
def test_gemma_use_bidirectional_attention_off_is_accepted(value: Any) -> None:
    assert block_of(with_fields(GEMMA_2B, use_bidirectional_attention=value))["norm_unit_offset"] is True


def test_gemma_bidirectional_attention_is_refused(tmp_path: Path) -> None:
    message = hf_error(write_json(tmp_path, with_fields(GEMMA_2B, use_bidirectional_attention=True)))
    assert "field 'use_bidirectional_attention'" in message and "causal" in message


# --------------------------------------------------------------------------- family details


def block_of(data: dict) -> dict:
    return hf_to_mapping(data, "x.json")["block"]


def model_of(data: dict) -> dict:
    return hf_to_mapping(data, "x.json")["model"]


@pytest.mark.parametrize("name, expected", [("gelu_new", "gelu_tanh"), ("gelu", "gelu"), ("relu", "relu"),
                                            ("gelu_pytorch_tanh", "gelu_tanh"), ("silu", "silu")])
def test_gpt2_activations(name: str, expected: str) -> None:
    assert block_of(with_fields(GPT2, activation_function=name))["activation"] == expected


def test_gpt2_defaults_n_inner_and_tie() -> None:
    data = with_fields(GPT2, n_inner=None, tie_word_embeddings=_DROP, activation_function=_DROP)
    assert block_of(data)["d_ff"] == 4 * 768
    assert block_of(data)["activation"] == "gelu_tanh"
    assert model_of(data)["tie_embeddings"] is True
    assert block_of(with_fields(GPT2, n_inner=1000))["d_ff"] == 1000


def test_gpt2_max_positions_below_eight_shortens_the_run(tmp_path: Path) -> None:
    config = load_config(write_json(tmp_path, with_fields(GPT2, n_positions=4)))
    assert config.run.seq_len == 4 and config.model.max_positions == 4


def test_llama_biases_and_gqa() -> None:
    data = with_fields(LLAMA_2_7B, attention_bias=True, mlp_bias=False, num_key_value_heads=8)
    block = block_of(data)
    assert block["bias"] == {"qkv": True, "out": True, "mlp": False, "norm": False}
    assert block["n_kv_heads"] == 8
    assert block_of(with_fields(LLAMA_2_7B, mlp_bias=True))["bias"] == \
        {"qkv": False, "out": False, "mlp": True, "norm": False}


def test_llama_defaults() -> None:
    data = with_fields(LLAMA_2_7B, num_key_value_heads=_DROP, rms_norm_eps=_DROP, tie_word_embeddings=_DROP,
                       hidden_act=_DROP)
    block = block_of(data)
    assert (block["n_kv_heads"], block["norm_eps"], block["rope_theta"], block["activation"]) == \
        (32, 1e-6, 10000.0, "swiglu")
    assert model_of(data)["tie_embeddings"] is False


def test_llama_explicit_head_dim() -> None:
    block = block_of(with_fields(LLAMA_2_7B, head_dim=64))
    assert block["head_dim"] == 64


def test_llama_3_rope_theta(tmp_path: Path) -> None:
    # https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json
    data = with_fields(LLAMA_2_7B, intermediate_size=14336, num_key_value_heads=8, vocab_size=128256,
                       max_position_embeddings=8192, rope_theta=500000.0, bos_token_id=128000, eos_token_id=128001)
    imported, packaged = load_config(write_json(tmp_path, data)), load_config("llama-3-8b")
    assert (imported.block, imported.model) == (packaged.block, packaged.model)
    assert count_parameters(imported).total == 8_030_261_248


def test_transformers_5_rope_parameters() -> None:
    data = with_fields(LLAMA_2_7B, rope_scaling=_DROP, rope_parameters={"rope_type": "default", "rope_theta": 5e5})
    assert block_of(data)["rope_theta"] == 5e5


def test_neox_sequential_residual_and_rotary() -> None:
    block = block_of(with_fields(PYTHIA_160M, use_parallel_residual=False, rotary_pct=1.0, rotary_emb_base=20000))
    assert (block["placement"], block["rope"], block["rope_theta"]) == ("pre", 1.0, 20000.0)


def test_neox_attention_bias_false() -> None:
    assert block_of(with_fields(PYTHIA_160M, attention_bias=False))["bias"] == \
        {"qkv": False, "out": False, "mlp": True, "norm": True}


def test_opt_post_norm_has_no_final_norm() -> None:
    data = with_fields(OPT_125M, do_layer_norm_before=False)
    assert block_of(data)["placement"] == "post"
    assert model_of(data)["final_norm"] is False
    assert model_of(with_fields(OPT_125M, _remove_final_layer_norm=True))["final_norm"] is False


def test_opt_enable_bias_false_keeps_layernorm_shift() -> None:
    assert block_of(with_fields(OPT_125M, enable_bias=False))["bias"] == \
        {"qkv": False, "out": False, "mlp": False, "norm": True}


@pytest.mark.parametrize("act, hidden_activation", [("gelu", None), ("gelu_pytorch_tanh", None),
                                                    ("gelu", "gelu_pytorch_tanh")])
def test_gemma_activation_is_geglu(act: str, hidden_activation: str | None) -> None:
    data = with_fields(GEMMA_2B, hidden_act=act, hidden_activation=hidden_activation)
    assert block_of(data)["activation"] == "geglu"


def test_gemma_head_dim_default_is_256() -> None:
    assert block_of(with_fields(GEMMA_2B, head_dim=_DROP))["head_dim"] == 256


def test_qwen2_sliding_window_off_is_ignored_and_on_every_layer_is_modelled() -> None:
    assert "sliding_window" not in block_of(QWEN2_05B)
    on = with_fields(QWEN2_05B, use_sliding_window=True, sliding_window=4096, max_window_layers=0)
    assert block_of(on)["sliding_window"] == 4096


def test_qwen2_window_on_layers_from_max_window_layers_up_is_a_per_layer_override() -> None:
    """Qwen2Config: layer_types[i] = sliding_attention when the window is on and i >= max_window_layers."""
    on = with_fields(QWEN2_05B, use_sliding_window=True, sliding_window=4096, max_window_layers=21)
    mapping = hf_to_mapping(on, "q.json")
    assert "sliding_window" not in mapping["block"]  # layer 0 is a full-attention layer
    assert mapping["layers"] == [{"indices": [21, 22, 23], "block": {"sliding_window": 4096}}]
    config = parse_config(mapping)
    assert [config.layer_block(i).sliding_window for i in (0, 20, 21, 23)] == [0, 0, 4096, 4096]


def test_mixed_layer_types_are_per_layer_overrides() -> None:
    data = with_fields(QWEN2_05B, use_sliding_window=True, sliding_window=4096,
                       layer_types=["sliding_attention"] * 23 + ["full_attention"])
    mapping = hf_to_mapping(data, "q.json")
    assert mapping["block"]["sliding_window"] == 4096
    assert mapping["layers"] == [{"indices": [23], "block": {"sliding_window": 0}}]


def test_qwen2_layer_types_slide_only_with_use_sliding_window() -> None:
    """Qwen2Config sets sliding_window to None without use_sliding_window: no layer has a window."""
    data = with_fields(QWEN2_05B, sliding_window=4096, layer_types=["full_attention"] * 12 + ["sliding_attention"] * 12)
    mapping = hf_to_mapping(data, "q.json")
    assert "sliding_window" not in mapping["block"] and "layers" not in mapping


def test_mixed_layers_convert_round_trip(tmp_path: Path) -> None:
    on = with_fields(QWEN2_05B, use_sliding_window=True, sliding_window=4096, max_window_layers=21)
    mapping = hf_to_mapping(on, "q.json")
    path = tmp_path / "q.yaml"
    path.write_text(to_yaml(mapping))
    assert load_config(path).layer_blocks == parse_config(mapping).layer_blocks != ()


def test_mistral_window_follows_sliding_window_alone() -> None:
    """MistralConfig defaults sliding_window to 4096, and MistralForCausalLM ignores layer_types."""
    assert block_of(with_fields(MISTRAL_7B, sliding_window=_DROP))["sliding_window"] == 4096
    assert "sliding_window" not in block_of(with_fields(MISTRAL_7B, sliding_window=None))
    mixed = with_fields(MISTRAL_7B, layer_types=["full_attention"] * 32)
    assert block_of(mixed)["sliding_window"] == 4096


def test_qwen2_window_on_without_a_size_takes_the_config_default() -> None:
    on = with_fields(QWEN2_05B, use_sliding_window=True, sliding_window=_DROP, max_window_layers=0)
    assert block_of(on)["sliding_window"] == 4096


@pytest.mark.parametrize("fields, activation", [
    ({"hidden_act": "gelu"}, "geglu"),  # the legacy "gelu" of the original releases: tanh GELU in both versions
    ({"hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh"}, "geglu"),
    ({"hidden_act": _DROP, "hidden_activation": _DROP}, "geglu"),
])
def test_gemma_activation_where_transformers_versions_agree(fields: dict, activation: str) -> None:
    assert block_of(with_fields(GEMMA_2B, **fields))["activation"] == activation


@pytest.mark.parametrize("fields, named", [
    ({"hidden_act": _DROP, "hidden_activation": "silu"}, "hidden_activation"),  # 5 runs tanh GELU, 4 ran SiLU
    ({"hidden_act": "silu", "hidden_activation": _DROP}, "hidden_act"),  # 5 runs SiLU, 4 ran tanh GELU
])
def test_gemma_activation_where_transformers_versions_disagree(tmp_path: Path, fields: dict, named: str) -> None:
    message = hf_error(write_json(tmp_path, with_fields(GEMMA_2B, **fields)))
    assert f"field '{named}'" in message and "transformers 5 runs hidden_act" in message


def test_neox_reads_its_own_rope_fields_only() -> None:
    """GPTNeoXConfig reads rotary_emb_base and rotary_pct; top-level rope_theta / partial_rotary_factor are unused."""
    block = block_of(with_fields(PYTHIA_160M, rope_theta=500000.0, partial_rotary_factor=0.5))
    assert block["rope_theta"] == 10000.0 and block["rope"] == 0.25


def test_dynamic_rope_scales_past_max_position_embeddings_and_yarn_defaults_its_length() -> None:
    dynamic = block_of(with_fields(LLAMA_2_7B, rope_scaling={"rope_type": "dynamic", "factor": 2.0,
                                                             "original_max_position_embeddings": 2}))
    assert dynamic["rope_scaling"]["original_max_positions"] == 4096  # as transformers: the dict's value is unused
    yarn = block_of(with_fields(LLAMA_2_7B, rope_scaling={"rope_type": "yarn", "factor": 2.0}))
    assert yarn["rope_scaling"]["original_max_positions"] == 4096


def test_layer_types_all_full_attention() -> None:
    data = with_fields(QWEN2_05B, sliding_window=None, layer_types=["full_attention"] * 24)
    assert "sliding" not in hf_to_mapping(data, "q.json")["about"]["description"]


@pytest.mark.parametrize("window", [32768, 65536])
def test_sliding_window_at_least_max_positions_is_kept(window: int) -> None:
    # transformers masks by sliding_window whatever max_position_embeddings (32,768) says, and blockcli runs a RoPE
    # model on longer passes: the window binds there
    assert block_of(with_fields(MISTRAL_7B, sliding_window=window))["sliding_window"] == window


def test_integral_float_sizes_accepted() -> None:
    assert block_of(with_fields(GPT2, n_embd=768.0))["d_model"] == 768


def test_utf8_bom_accepted(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(GPT2).encode())
    assert load_config(path).block.d_model == 768


# --------------------------------------------------------------------------- to_yaml


def test_to_yaml_float_formatting_and_strings(tmp_path: Path) -> None:
    mapping = {
        "about": {"description": 'quote " backslash \\ tab \t newline \n é ✓ 😀', "source": "yes"},
        "block": {"d_model": 16, "n_heads": 2, "d_ff": 32, "norm_eps": 1e-05, "dropout": 2.5e-07,
                  "bias": {"qkv": True, "out": False, "mlp": True, "norm": False}},
        "model": {"n_layers": 1, "vocab_size": 10, "max_positions": 8},
        "run": {"batch": 1, "seq_len": 4, "dtype": "float64", "seed": 0},
    }
    text = to_yaml(mapping, "")
    assert "norm_eps: 1.0e-05" in text and "dropout: 2.5e-07" in text
    assert to_yaml({"x": {"a": 1e20, "b": 10000.0, "c": None}}) == "x:\n  a: 1.0e+20\n  b: 10000.0\n  c: null\n"
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    config = load_config(path)
    assert config.about.description == mapping["about"]["description"]
    assert config.about.source == "yes"
    assert config.block.norm_eps == 1e-05 and config.block.dropout == 2.5e-07
    assert (config.block.bias.qkv, config.block.bias.out) == (True, False)
    assert config.run.dtype == "float64"


@pytest.mark.parametrize("text", ["yes", "No", "ON", "off", "y", "N", "null", "True", "~", "", "1e-5", "0x10",
                                  "12", ".inf", "a: b", "- x", "#c", "x #y", "rope", "gelu_tanh", "float32",
                                  "a.b-c", " lead", "trail ", "'q'", "[1]", "{a}", "*ref", "&anchor", "!tag", "%d",
                                  "@x", "`x", "Ÿ", "\u2028"])
def test_to_yaml_strings_read_back_as_the_same_string(tmp_path: Path, text: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(to_yaml({"about": {"description": text}}), encoding="utf-8")
    assert load_config(path).about.description == text


def test_to_yaml_plain_words_are_unquoted() -> None:
    text = to_yaml(hf_to_mapping(GPT2, "g.json"))
    assert "  norm: layernorm\n" in text and "  dtype: float32\n" in text and "  activation: gelu_tanh\n" in text


def test_to_yaml_rejects_unsupported_values() -> None:
    with pytest.raises(TypeError):
        to_yaml({"block": {"d_model": {1, 2}}})  # a set has no YAML spelling here (lists are flow sequences)
    assert "short_factor: [1.0, 2.5]" in to_yaml({"block": {"rope_scaling": {"short_factor": [1.0, 2.5]}}})
    with pytest.raises(TypeError):
        to_yaml({"block": {"norm_eps": float("nan")}})


def test_hf_module_does_not_import_yaml() -> None:
    code = ("import sys, blockcli.hf as h; h.to_yaml(h.hf_to_mapping({'model_type': 'gpt2', 'n_embd': 8, "
            "'n_head': 2, 'n_layer': 1, 'n_positions': 8, 'vocab_size': 10}, 'x'), 'c'); "
            "assert 'yaml' not in sys.modules, 'yaml imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("base, key, value", [
    (LLAMA_2_7B, "rope_scaling", {"type": "proportional", "factor": 2.0}),
    (MISTRAL_7B, "num_local_experts", 8),  # Mixtral-style MoE field
    (MISTRAL_7B, "num_experts_per_tok", 2),
    (QWEN2_05B, "attention_bias", True),  # not a Qwen2 field: unknown, so not guessed at
    (GPT2, "add_cross_attention", True),
    (GPT2, "activation_function", "xielu"),  # an activation with learned parameters of its own
    (GPT2, "activation_function", "gelu_newest"),  # no such activation
    (GPT2, "quantization_config", {"load_in_8bit": True}),
    (LLAMA_2_7B, "hidden_act", "prelu"),
    (LLAMA_2_7B, "some_future_field", 1),
    (GEMMA_2B, "hidden_activation", "gelu"),
    (GEMMA_2B, "hidden_act", "silu"),
    (PYTHIA_160M, "rotary_pct", 0.3),  # 19.2 -> 19 rotated dims: odd
])
def test_unrepresentable_field_is_named(tmp_path: Path, base: dict, key: str, value: Any) -> None:
    path = write_json(tmp_path, with_fields(base, **{key: value}))
    message = hf_error(path)
    assert f"field '{key}'" in message
    assert "cannot be represented in blockcli's schema (" in message


@pytest.mark.parametrize("hf_name, activation, gated", [
    ("silu", "swiglu", None), ("swish", "swiglu", None), ("gelu_pytorch_tanh", "geglu", None),
    ("gelu_new", "geglu", None), ("relu", "reglu", None), ("gelu", "gelu", True), ("relu2", "relu2", True),
    ("quick_gelu", "quick_gelu", True), ("gelu_10", "gelu_10", True), ("tanh", "tanh", True),
])
def test_a_gated_mlp_takes_any_activation_transformers_has(hf_name: str, activation: str, gated: bool | None) -> None:
    """Structure and activation apart: Llama's gated MLP with each ACT2FN name, written by its gated form's name
    where it has one (silu: swiglu), else as the function with `gated: true`."""
    block = block_of(with_fields(LLAMA_2_7B, hidden_act=hf_name))
    assert block["activation"] == activation and block.get("gated") is gated
    assert parse_config(hf_to_mapping(with_fields(LLAMA_2_7B, hidden_act=hf_name), "x.json")).block.gated


@pytest.mark.parametrize("hf_name, activation", [("quick_gelu", "quick_gelu"), ("relu2", "relu2"), ("gelu", "gelu"),
                                                 ("gelu_fast", "gelu_tanh"), ("mish", "mish"), ("silu", "silu")])
def test_a_plain_mlp_takes_any_activation_transformers_has(hf_name: str, activation: str) -> None:
    block = block_of(with_fields(GPT2, activation_function=hf_name))
    assert block["activation"] == activation and "gated" not in block
    assert not parse_config(hf_to_mapping(with_fields(GPT2, activation_function=hf_name), "x.json")).block.gated


def test_rope_scaling_kinds_are_mapped() -> None:
    linear = block_of(with_fields(LLAMA_2_7B, rope_scaling={"type": "linear", "factor": 2.0}))
    assert linear["rope_scaling"] == {"type": "linear", "factor": 2.0}
    dynamic = block_of(with_fields(LLAMA_2_7B, rope_scaling={"rope_type": "dynamic", "factor": 2.0}))
    assert dynamic["rope_scaling"] == {"type": "dynamic", "factor": 2.0, "original_max_positions": 4096}
    yarn = block_of(with_fields(LLAMA_2_7B, rope_scaling=_DROP, rope_parameters={
        "rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0, "original_max_position_embeddings": 1024,
        "beta_fast": 16}))
    assert yarn["rope_theta"] == 1e6
    assert yarn["rope_scaling"] == {"type": "yarn", "factor": 4.0, "original_max_positions": 1024, "beta_fast": 16.0}




def test_unknown_rope_parameter_is_named(tmp_path: Path) -> None:
    data = with_fields(LLAMA_2_7B, rope_scaling={"rope_type": "linear", "factor": 2.0, "wobble": 1})
    assert "field 'rope_scaling.wobble'" in hf_error(write_json(tmp_path, data))


def test_invalid_json_names_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{\n  "model_type": "gpt2",\n  "n_embd": 768,,\n}\n', encoding="utf-8")
    message = hf_error(path)
    assert "invalid JSON at line 3, column" in message


def test_truncated_json(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "gpt2", "n_embd": ', encoding="utf-8")
    assert "invalid JSON at line 1" in hf_error(path)


def test_nan_is_not_json(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GPT2)[:-1] + ', "layer_norm_epsilon": NaN}', encoding="utf-8")
    assert "NaN" in hf_error(path)


def test_duplicate_key(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GPT2)[:-1] + ', "n_embd": 1024}', encoding="utf-8")
    assert "field 'n_embd' appears twice" in hf_error(path)


@pytest.mark.parametrize("model_type, hint", [("rwkv", ""), ("lama", "did you mean 'llama'"),
                                              ("gpt-2", "did you mean 'gpt2'")])
def test_unknown_model_type(tmp_path: Path, model_type: str, hint: str) -> None:
    message = hf_error(write_json(tmp_path, with_fields(GPT2, model_type=model_type)))
    assert f"field 'model_type' = '{model_type}' is not a supported model family" in message
    assert hint in message


def test_missing_model_type(tmp_path: Path) -> None:
    assert "field 'model_type' is missing" in hf_error(write_json(tmp_path, with_fields(GPT2, model_type=_DROP)))


@pytest.mark.parametrize("base, key", [(GPT2, "n_embd"), (LLAMA_2_7B, "intermediate_size"),
                                       (OPT_125M, "ffn_dim"), (PYTHIA_160M, "num_hidden_layers"),
                                       (GEMMA_2B, "vocab_size"), (QWEN2_05B, "max_position_embeddings")])
def test_missing_required_field(tmp_path: Path, base: dict, key: str) -> None:
    assert f"field '{key}' is missing" in hf_error(write_json(tmp_path, with_fields(base, **{key: _DROP})))


@pytest.mark.parametrize("key, value, expected", [
    ("n_embd", "768", "expected an integer"), ("n_embd", True, "expected an integer"),
    ("n_embd", 0, "expected an integer >= 1"), ("n_head", 7, "does not divide"),
    ("n_layer", None, "is null"), ("layer_norm_epsilon", "small", "expected a number"),
    ("layer_norm_epsilon", 0, "expected a number in (0, 1]"), ("tie_word_embeddings", "yes", "true or false"),
    ("n_embd", 10**15, "expected an integer <="),
])
def test_bad_values_name_the_field(tmp_path: Path, key: str, value: Any, expected: str) -> None:
    message = hf_error(write_json(tmp_path, with_fields(GPT2, **{key: value})))
    assert f"field '{key}'" in message and expected in message


@pytest.mark.parametrize("key, literal", [("n_embd", "9" * 400), ("n_embd", "1e400"), ("n_embd", "-" + "9" * 400),
                                          ("layer_norm_epsilon", "9" * 400), ("layer_norm_epsilon", "1e400"),
                                          ("n_embd", "9" * 5000)])
def test_huge_numbers(tmp_path: Path, key: str, literal: str) -> None:
    path = tmp_path / "config.json"
    text = json.dumps(with_fields(GPT2, **{key: 0})).replace(f'"{key}": 0', f'"{key}": {literal}')
    path.write_text(text, encoding="utf-8")
    message = hf_error(path)
    assert len(message) < 300
    assert f"field '{key}'" in message or "too many digits" in message


def test_kv_heads_must_divide_heads(tmp_path: Path) -> None:
    message = hf_error(write_json(tmp_path, with_fields(LLAMA_2_7B, num_key_value_heads=5)))
    assert "field 'num_key_value_heads' = 5 does not divide" in message


def test_gptj_shared_norm_interleaved_partial_rope_and_head_bias() -> None:
    block, model = block_of(GPTJ_6B), model_of(GPTJ_6B)
    assert (block["placement"], block["rope_layout"], block["rope"], block["rope_theta"]) == \
        ("parallel_shared", "interleaved", 64 / 256, 10000.0)
    assert block["bias"] == {"qkv": False, "out": False, "mlp": True, "norm": True}
    assert (block["d_ff"], model["lm_head_bias"], model["tie_embeddings"]) == (4 * 4096, True, False)
    assert block_of(with_fields(GPTJ_6B, n_inner=1000, rotary_dim=_DROP))["d_ff"] == 1000
    assert block_of(with_fields(GPTJ_6B, rotary_dim=_DROP))["rope"] == 64 / 256  # GPTJConfig's default


@pytest.mark.parametrize("rotary_dim, head_dim", [(30, 44), (26, 46), (6, 47), (2, 3), (64, 256)])
def test_gptj_rotary_dim_rotates_exactly_that_many_dims(tmp_path: Path, rotary_dim: int, head_dim: int) -> None:
    """rotary_dim / head_dim · head_dim can land a hair below rotary_dim (30/44·44 = 29.999…)."""
    data = with_fields(GPTJ_6B, n_embd=2 * head_dim, n_head=2, rotary_dim=rotary_dim)
    assert load_config(write_json(tmp_path, data)).block.rope_dims == rotary_dim


@pytest.mark.parametrize("changes, field", [
    ({"rotary_dim": None}, "rotary_dim"),  # transformers builds n_embd-wide tables: whole heads only if n_head = 1
    ({"rotary_dim": 5}, "rotary_dim"),  # odd: no whole pairs
    ({"rotary_dim": 512}, "rotary_dim"),  # wider than a head
    ({"rotary": False}, "rotary"),
    ({"scale_attn_weights": False}, "scale_attn_weights"),
    # GPT-J reads no rope_scaling at all: accepted with a note, at any value (tests/test_unread_fields.py)
])
def test_gptj_fields_it_cannot_represent(tmp_path: Path, changes: dict, field: str) -> None:
    assert f"field '{field}'" in hf_error(write_json(tmp_path, with_fields(GPTJ_6B, **changes)))


def test_phi_shared_norm_partial_rope_gqa_and_head_bias() -> None:
    block, model = block_of(PHI_2), model_of(PHI_2)
    assert (block["placement"], block["rope"], block.get("rope_layout", "half"), block["bias"]) == \
        ("parallel_shared", 0.4, "half", True)
    assert (model["lm_head_bias"], model["tie_embeddings"], model["positions"]) == (True, False, "rope")
    assert block_of(with_fields(PHI_2, num_key_value_heads=8))["n_kv_heads"] == 8
    assert block_of(with_fields(PHI_2, num_key_value_heads=None))["n_kv_heads"] == 32
    # transformers 5 keeps the fraction and the base in rope_parameters (as the fixture's config.json)
    v5 = with_fields(PHI_2, partial_rotary_factor=_DROP, rope_theta=_DROP, rope_scaling=_DROP, rope_parameters={
        "rope_type": "default", "rope_theta": 20000.0, "partial_rotary_factor": 0.25})
    assert (block_of(v5)["rope"], block_of(v5)["rope_theta"]) == (0.25, 20000.0)
    assert block_of(with_fields(PHI_2, partial_rotary_factor=_DROP))["rope"] == 0.5  # PhiConfig's default


def test_phi_1_5_counts_as_transformers_instantiates_it(tmp_path: Path) -> None:
    # https://huggingface.co/microsoft/phi-1_5/blob/main/config.json: num_key_value_heads null, half
    # of each head rotated; 1,418,270,720 is PhiForCausalLM's sum of numel on the meta device
    data = with_fields(PHI_2, _name_or_path="microsoft/phi-1_5", bos_token_id=None, eos_token_id=None,
                       hidden_size=2048, intermediate_size=8192, num_hidden_layers=24, num_key_value_heads=None,
                       partial_rotary_factor=0.5, resid_pdrop=0.0)
    config = load_config(write_json(tmp_path, data))
    assert (config.block.n_kv_heads, config.block.rope_dims) == (32, 32)
    assert count_parameters(config).total == 1_418_270_720


@pytest.mark.parametrize("changes, field", [
    ({"partial_rotary_factor": 0.5625}, "partial_rotary_factor"),  # int(80 · 9/16) = 45 dims: not whole pairs
    ({"partial_rotary_factor": 0.0}, "partial_rotary_factor"),
    ({"head_dim": 64}, "head_dim"),  # not a PhiConfig field
])
def test_phi_fields_it_cannot_represent(tmp_path: Path, changes: dict, field: str) -> None:
    assert f"field '{field}'" in hf_error(write_json(tmp_path, with_fields(PHI_2, **changes)))


@pytest.mark.parametrize("base, ignored", [
    (GPTJ_6B, {"attn_pdrop": 0.1, "embd_pdrop": 0.1, "resid_pdrop": 0.1, "summary_first_dropout": 0.2}),
    (PHI_2, {"attention_dropout": 0.1, "embd_pdrop": 0.1, "resid_pdrop": 0.2}),
])
def test_gptj_and_phi_training_only_fields_change_nothing(base: dict, ignored: dict) -> None:
    assert hf_to_mapping(with_fields(base, **ignored), "x.json")["block"] == block_of(base)


def test_granite_multipliers_are_mapped() -> None:
    block, model = block_of(GRANITE_3_1_2B), model_of(GRANITE_3_1_2B)
    assert (block["attention_scale"], block["residual_multiplier"]) == (0.015625, 0.22)
    assert (model["embedding_multiplier"], model["logit_multiplier"]) == (12.0, 1 / 8.0)  # logits / logits_scaling
    assert (block["activation"], block["norm"], block["bias"], model["tie_embeddings"]) == \
        ("swiglu", "rmsnorm", False, True)


def test_granite_defaults_are_granite_configs() -> None:
    """GraniteConfig's defaults: every multiplier 1.0 -- so scores are Q·Kᵀ times 1, not 1/√d_h."""
    data = with_fields(GRANITE_3_1_2B, attention_multiplier=_DROP, residual_multiplier=_DROP,
                       embedding_multiplier=_DROP, logits_scaling=_DROP, tie_word_embeddings=_DROP)
    block, model = block_of(data), model_of(data)
    assert (block["attention_scale"], block["residual_multiplier"]) == (1.0, 1.0)
    assert (model["embedding_multiplier"], model["logit_multiplier"], model["tie_embeddings"]) == (1.0, 1.0, False)


@pytest.mark.parametrize("changes, field", [
    ({"logits_scaling": 0}, "logits_scaling"),  # logits / 0
    ({"attention_multiplier": -0.1}, "attention_multiplier"),
    ({"residual_multiplier": "0.22"}, "residual_multiplier"),
    ({"embedding_multiplier": True}, "embedding_multiplier"),
])
def test_granite_bad_multipliers_are_refused(tmp_path: Path, changes: dict, field: str) -> None:
    assert f"field '{field}'" in hf_error(write_json(tmp_path, with_fields(GRANITE_3_1_2B, **changes)))


def test_granite_training_only_fields_change_nothing() -> None:
    assert block_of(with_fields(GRANITE_3_1_2B, attention_dropout=0.3)) == block_of(GRANITE_3_1_2B)


def test_cohere_shared_shift_free_layernorm_interleaved_rope_and_logit_scale() -> None:
    block, model = block_of(COMMAND_R_V01), model_of(COMMAND_R_V01)
    assert (block["placement"], block["norm"], block["bias"], block["rope_layout"], block["rope"]) == \
        ("parallel_shared", "layernorm", False, "interleaved", True)
    assert (block["activation"], block["rope_theta"], model["logit_multiplier"], model["tie_embeddings"]) == \
        ("swiglu", 8000000.0, 0.0625, True)
    assert block_of(with_fields(COMMAND_R_V01, attention_bias=True))["bias"] == \
        {"qkv": True, "out": True, "mlp": False, "norm": False}
    defaults = with_fields(COMMAND_R_V01, logit_scale=_DROP, rope_theta=_DROP, use_qk_norm=None)
    assert (model_of(defaults)["logit_multiplier"], block_of(defaults)["rope_theta"]) == (0.0625, 500000.0)


def test_cohere_qk_norm_has_weights_for_each_head(tmp_path: Path) -> None:
    """Command R+'s use_qk_norm: CohereLayerNorm weights (h, d_h) for q and (h_kv, d_h) for k, no bias."""
    plain = load_config(write_json(tmp_path, COMMAND_R_V01))
    normed = load_config(write_json(tmp_path, with_fields(COMMAND_R_V01, use_qk_norm=True), "plus.json"))
    assert (plain.block.qk_norm, normed.block.qk_norm) == ("none", "each_head")
    b = normed.block
    L = COMMAND_R_V01["num_hidden_layers"]
    assert count_parameters(normed).total - count_parameters(plain).total == L * (b.n_heads + b.n_kv_heads) * b.head_dim


@pytest.mark.parametrize("changes, field", [
    ({"logit_scale": None}, "logit_scale"),  # transformers would multiply the logits by None
    ({"logit_scale": 0.0}, "logit_scale"),
])
def test_cohere_fields_it_cannot_represent(tmp_path: Path, changes: dict, field: str) -> None:
    assert f"field '{field}'" in hf_error(write_json(tmp_path, with_fields(COMMAND_R_V01, **changes)))


def test_stablelm_layernorm_qkv_bias_partial_rope_and_parallel_residual() -> None:
    block, model = block_of(STABLELM_2_1_6B), model_of(STABLELM_2_1_6B)
    assert (block["norm"], block["bias"], block["placement"], block["rope"], block["norm_eps"]) == \
        ("layernorm", {"qkv": True, "out": False, "mlp": False, "norm": True}, "pre", 0.25, 1e-5)
    assert (block["activation"], model["tie_embeddings"]) == ("swiglu", False)
    # one shared input_layernorm (no post_attention_layernorm) when the residual is parallel
    assert block_of(with_fields(STABLELM_2_1_6B, use_parallel_residual=True))["placement"] == "parallel_shared"
    assert block_of(with_fields(STABLELM_2_1_6B, use_qkv_bias=False))["bias"] == \
        {"qkv": False, "out": False, "mlp": False, "norm": True}
    # StableLmConfig's defaults: a quarter of each head rotated, 32 K/V heads
    defaults = with_fields(STABLELM_2_1_6B, partial_rotary_factor=_DROP, num_key_value_heads=_DROP)
    assert (block_of(defaults)["rope"], block_of(defaults)["n_kv_heads"]) == (0.25, 32)
    assert block_of(with_fields(STABLELM_2_1_6B, layer_norm_eps=1e-6))["norm_eps"] == 1e-6


# A StableLM-2-12B-like shape, not its published config.json (not at hand): the width, layers and heads of its model
# card (d 5120, 40 layers, 32 heads, 8 K/V heads; one input LayerNorm read by attention and MLP side by side; no
# biases in the MLP or attention), with qk_layernorm, and an ASSUMED intermediate_size of 13,824
STABLELM_12B_LIKE = with_fields(STABLELM_2_1_6B, hidden_size=5120, intermediate_size=13824, num_hidden_layers=40,
                             num_key_value_heads=8, use_qkv_bias=False, use_parallel_residual=True,
                             qk_layernorm=True)


def test_stablelm_qk_layernorm_is_a_shift_free_layernorm_per_head_with_weights_of_its_own(tmp_path: Path) -> None:
    """StableLmLayerNormPerHead: nn.LayerNorm(d_h, bias=False) for each of the h query heads and h_kv key heads,
    before RoPE: qk_norm each_head without the shift the block's other LayerNorms have."""
    block = block_of(STABLELM_12B_LIKE)
    assert (block["qk_norm"], block["bias"], block["placement"]) == (
        "each_head", {"qkv": False, "out": False, "mlp": False, "norm": True, "qk_norm": False}, "parallel_shared")
    plain = load_config(write_json(tmp_path, with_fields(STABLELM_12B_LIKE, qk_layernorm=False)))
    normed = load_config(write_json(tmp_path, STABLELM_12B_LIKE, "12b.json"))
    b = normed.block
    assert (b.bias.norm, b.bias.qk_norm) == (True, False)
    # a weight of d_h per head, q's h heads and k's h_kv, no bias, in each of the 40 layers
    assert count_parameters(normed).total - count_parameters(plain).total == 40 * (32 + 8) * 160
    # transformers 5.24's StableLmForCausalLM built on the meta device from this config: 12,143,185,920 (the real
    # model's card says 12,143,605,760: this is a stand-in of its shape, the assumed intermediate_size included)
    assert count_parameters(normed).total == 12_143_185_920


@pytest.mark.parametrize("changes, field", [
    ({"partial_rotary_factor": 0.5 / 64}, "partial_rotary_factor"),  # int(64 / 128) = 0 dims
    ({"partial_rotary_factor": 3 / 64}, "partial_rotary_factor"),  # 3 dims: not whole pairs
])
def test_stablelm_fields_it_cannot_represent(tmp_path: Path, changes: dict, field: str) -> None:
    assert f"field '{field}'" in hf_error(write_json(tmp_path, with_fields(STABLELM_2_1_6B, **changes)))


def test_stablelm_training_only_fields_change_nothing() -> None:
    data = with_fields(STABLELM_2_1_6B, hidden_dropout=0.1, attention_dropout=0.2)
    assert block_of(data) == block_of(STABLELM_2_1_6B)


@pytest.mark.parametrize("data, kind", [([1, 2], "an array"), ("gpt2", "a string"), (None, "null"), (3, "a number")])
def test_top_level_not_an_object(tmp_path: Path, data: Any, kind: str) -> None:
    message = hf_error(write_json(tmp_path, data))
    assert "top level must be a JSON object" in message and kind in message


def test_missing_file(tmp_path: Path) -> None:
    assert "file not found" in hf_error(tmp_path / "nope" / "config.json")


def test_directory_named_json(tmp_path: Path) -> None:
    folder = tmp_path / "model.json"
    folder.mkdir()  # a folder is read as a model folder, whose config.json is missing
    assert "a model folder needs the model's config.json" in hf_error(folder)


def test_binary_and_non_utf8(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(b"\x00\x01\x02")
    assert "binary file" in hf_error(path)
    path.write_bytes(b'{"model_type": "\xff"}')
    assert "not UTF-8" in hf_error(path)


def test_deeply_nested_json(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    hf_error(path)


def test_neox_rotary_pct_zero_means_no_positions(tmp_path: Path) -> None:
    # HF rotates int(head_dim * 0.0) = 0 dimensions: no positional signal at all.
    data = with_fields(PYTHIA_160M, rotary_pct=0.0)
    mapping = hf_to_mapping(data, "p.json")
    assert mapping["model"]["positions"] == "none" and mapping["block"]["rope"] is False
    assert load_config(write_json(tmp_path, data)).block.rope == 0.0


def test_blockcli_rejection_after_mapping_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Defensive path: should the mapping ever hold a value parse_config rejects, the message still names the file.
    import blockcli.hf

    monkeypatch.setattr(blockcli.hf, "_mapped", lambda data, where, allow=(), tensors_beside=False: (
        {"block": {"d_model": -1}}, [], None))
    message = hf_error(write_json(tmp_path, GPT2))
    assert "block.d_model" in message


# --------------------------------------------------------------------------- fuzz: never a traceback

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=6,
)
BASES = [c.values[0] for c in CASES]
ALL_KEYS = sorted({k for base in BASES for k in base} | {"rope_parameters", "layer_types", "head_dim",
                                                            "hidden_activation", "use_sliding_window"})


@given(base=st.sampled_from(BASES), key=st.sampled_from(ALL_KEYS), value=JSON_VALUES)
def test_any_value_in_any_field_loads_or_is_a_one_line_config_error(base: dict, key: str, value: Any) -> None:
    data = with_fields(base, **{key: value})
    try:
        mapping = hf_to_mapping(data, "fuzz.json")
    except ConfigError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("fuzz.json: ")
        return
    from blockcli.config import parse_config

    try:
        parse_config(mapping, name="fuzz.json")
    except ConfigError as exc:  # config_from_hf prefixes the file name to these
        assert "\n" not in str(exc)


# ----------------------------------------------------------------------------- fields that change nothing


def test_exporter_metadata_and_switches_that_are_off_are_accepted() -> None:
    smollm2 = with_fields(LLAMA_2_7B, is_llama_config=True, rope_interleaved=False,
                          **{"transformers.js_config": {"kv_cache_dtype": {"q4f16": "float16"}}})
    assert block_of(smollm2) == block_of(LLAMA_2_7B)
    assert block_of(with_fields(QWEN2_05B, use_mrope=False)) == block_of(QWEN2_05B)
    assert block_of(with_fields(GPT2, n_special=0)) == block_of(GPT2)


@pytest.mark.parametrize("base, key, value", [
    (LLAMA_2_7B, "rope_interleaved", True),
    (QWEN2_05B, "use_mrope", True),
])
def test_switches_that_are_on_are_refused(tmp_path: Path, base: dict, key: str, value: Any) -> None:
    assert f"field '{key}'" in hf_error(write_json(tmp_path, with_fields(base, **{key: value})))


def test_allow_field_accepts_an_unknown_field_and_says_so(tmp_path: Path) -> None:
    path = write_json(tmp_path, with_fields(LLAMA_2_7B, fancy_new_thing=3))
    assert "--allow-field fancy_new_thing accepts it" in hf_error(path)
    config = config_from_hf(path, allow_fields=("fancy_new_thing",))
    assert config.block == config_from_hf(write_json(tmp_path, LLAMA_2_7B, "plain.json")).block
    assert len(config.notes) == 1 and "field 'fancy_new_thing' accepted unchecked" in config.notes[0]
    known = config_from_hf(write_json(tmp_path, LLAMA_2_7B, "known.json"), allow_fields=("rms_norm_eps",))
    assert known.block == config.block  # a known field is mapped as usual, not "accepted unchecked" ...
    assert known.notes == (f"{tmp_path / 'known.json'}: --allow-field rms_norm_eps: blockcli already reads this "
                           f"field, so it allows nothing",)  # ... and the user hears that the flag did nothing
    absent = config_from_hf(write_json(tmp_path, LLAMA_2_7B, "absent.json"), allow_fields=("fancy_new_thnig",))
    assert absent.notes == (f"{tmp_path / 'absent.json'}: --allow-field fancy_new_thnig: no such field in this "
                            f"config.json, so it allows nothing",)


STARCODER2_7B = {  # https://huggingface.co/bigcode/starcoder2-7b/blob/main/config.json
    "architectures": ["Starcoder2ForCausalLM"], "attention_dropout": 0.1, "residual_dropout": 0.1,
    "embedding_dropout": 0.1, "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "gelu_pytorch_tanh",
    "hidden_size": 4608, "initializer_range": 0.018042, "intermediate_size": 18432, "layer_norm_epsilon": 1e-05,
    "max_position_embeddings": 16384, "mlp_type": "default", "model_type": "starcoder2", "norm_epsilon": 1e-05,
    "norm_type": "layer_norm", "num_attention_heads": 36, "num_hidden_layers": 32, "num_key_value_heads": 4,
    "rope_theta": 1000000, "sliding_window": 4096, "torch_dtype": "bfloat16", "transformers_version": "4.37.0.dev0",
    "use_bias": True, "use_cache": True, "vocab_size": 49152,
}


def test_starcoder2_7b_maps_onto_its_preset(tmp_path: Path) -> None:
    imported = load_config(write_json(tmp_path, STARCODER2_7B))
    assert imported.block == load_config("starcoder2-7b").block
    assert imported.model == load_config("starcoder2-7b").model


@pytest.mark.parametrize("key, value", [("norm_type", "rms_norm"), ("mlp_type", "gated")])
def test_starcoder2_legacy_fields_at_other_values_are_refused(tmp_path: Path, key: str, value: str) -> None:
    assert f"field '{key}'" in hf_error(write_json(tmp_path, with_fields(STARCODER2_7B, **{key: value})))


def test_phi3_is_llama_like_with_its_window_and_no_biases() -> None:
    block, model = block_of(PHI_3_MINI_4K), model_of(PHI_3_MINI_4K)
    assert (block["norm"], block["activation"], block["placement"], block["bias"], block["rope"]) == \
        ("rmsnorm", "swiglu", "pre", False, True)
    assert (block["sliding_window"], block["n_kv_heads"], block["head_dim"]) == (2047, 32, 96)
    assert (model["tie_embeddings"], model["lm_head_bias"]) == (False, False)
    assert "sliding_window" not in block_of(with_fields(PHI_3_MINI_4K, sliding_window=None))
    assert block_of(with_fields(PHI_3_MINI_4K, num_key_value_heads=8))["n_kv_heads"] == 8
    assert block_of(with_fields(PHI_3_MINI_4K, num_key_value_heads=None))["n_kv_heads"] == 32


def test_phi3_longrope_takes_its_original_length_from_the_top_level(tmp_path: Path) -> None:
    # Phi-3.5-mini-instruct's shape of config: 128k positions, longrope factors (48 per list: one per
    # rotary pair of a 96-wide head; the values here are stand-ins), a window wider than its positions (kept: it binds
    # on a pass longer than 262,144 tokens, as in transformers)
    data = with_fields(PHI_3_MINI_4K, max_position_embeddings=131072, sliding_window=262144, rope_scaling={
        "type": "longrope", "short_factor": [1.0 + i / 100 for i in range(48)],
        "long_factor": [1.5 + i for i in range(48)]})
    block = block_of(data)
    assert block["sliding_window"] == 262144
    scaling = block["rope_scaling"]
    assert (scaling["type"], scaling["original_max_positions"], scaling["factor"]) == ("longrope", 4096, 32.0)
    assert scaling["long_factor"][:2] == [1.5, 2.5] and len(scaling["short_factor"]) == 48
    assert count_parameters(load_config(write_json(tmp_path, data))).total == 3_821_079_552  # RoPE adds none


def test_phi3_partial_rotary_factor_as_phi_4_mini() -> None:
    # microsoft/Phi-4-mini-instruct (model_type phi3): 24 heads of 128, GQA 8, 3/4 of each head rotated
    data = with_fields(PHI_3_MINI_4K, num_attention_heads=24, num_key_value_heads=8, partial_rotary_factor=0.75)
    assert (block_of(data)["rope"], block_of(data)["n_kv_heads"], block_of(data)["head_dim"]) == (0.75, 8, 128)


@pytest.mark.parametrize("changes, field", [
    ({"attention_bias": True}, "attention_bias"),  # Phi-3 has no biases
    ({"rope_scaling": {"type": "su", "short_factor": [1.0] * 48, "long_factor": [2.0] * 48}}, "rope_scaling"),
    ({"rope_scaling": {"type": "yarn", "factor": 2.0}}, "rope_scaling"),  # transformers reads it as longrope
    ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "rope_scaling"),  # Phi3Config refuses it
    ({"partial_rotary_factor": 0.01}, "partial_rotary_factor"),  # rotates no pair
    ({"rope_parameters": {"rope_type": "dynamic", "factor": 2.0}}, "rope_parameters"),
    ({"fancy_new_thing": 1}, "fancy_new_thing"),
])
def test_phi3_fields_it_cannot_represent(tmp_path: Path, changes: dict, field: str) -> None:
    assert f"field '{field}'" in hf_error(write_json(tmp_path, with_fields(PHI_3_MINI_4K, **changes)))


def test_gpt_bigcode_multi_query_is_one_kv_head() -> None:
    block, model = block_of(STARCODER), model_of(STARCODER)
    assert (block["n_kv_heads"], block["head_dim"], block["bias"], block["norm"], block["rope"]) == \
        (1, 128, True, "layernorm", False)
    assert (model["positions"], model["position_offset"], model["tie_embeddings"]) == ("learned", 0, True)
    assert block_of(with_fields(STARCODER, multi_query=False))["n_kv_heads"] == 48
    assert block_of(with_fields(STARCODER, multi_query=_DROP))["n_kv_heads"] == 1  # GPTBigCodeConfig's default
    # transformers 5 writes the K/V head count multi_query implies
    assert block_of(with_fields(STARCODER, num_key_value_heads=1))["n_kv_heads"] == 1
    assert block_of(with_fields(STARCODER, multi_query=False, num_key_value_heads=48))["n_kv_heads"] == 48
    assert block_of(with_fields(STARCODER, n_inner=None))["d_ff"] == 4 * 6144


@pytest.mark.parametrize("changes, field", [
    ({"num_key_value_heads": 4}, "num_key_value_heads"),  # GPTBigCode has no grouped-query attention
    ({"multi_query": False, "num_key_value_heads": 1}, "num_key_value_heads"),
    ({"add_cross_attention": True}, "add_cross_attention"),
    ({"n_head": 5}, "n_head"),  # 6144 is not 5 whole heads
    ({"fancy_new_thing": 1}, "fancy_new_thing"),
])
def test_gpt_bigcode_fields_it_cannot_represent(tmp_path: Path, changes: dict, field: str) -> None:
    assert f"field '{field}'" in hf_error(write_json(tmp_path, with_fields(STARCODER, **changes)))


def test_falcon_7b_shares_one_norm_and_one_kv_head() -> None:
    block, model = block_of(FALCON_7B), model_of(FALCON_7B)
    assert (block["placement"], block["n_kv_heads"], block["d_ff"], block["activation"]) == \
        ("parallel_shared", 1, 4 * 4544, "gelu")
    assert block["bias"] == {"qkv": False, "out": False, "mlp": False, "norm": True}
    assert (model["max_positions"], model["tie_embeddings"], block["rope_theta"]) == (2048, True, 10000.0)
    # transformers 5 writes num_kv_heads = num_attention_heads, which multi-query attention ignores
    assert block_of(with_fields(FALCON_7B, num_kv_heads=71))["n_kv_heads"] == 1
    sequential = with_fields(FALCON_7B, parallel_attn=False, multi_query=False, bias=True)
    assert (block_of(sequential)["placement"], block_of(sequential)["n_kv_heads"], block_of(sequential)["bias"]) \
        == ("pre", 71, True)
    assert block_of(with_fields(FALCON_7B, hidden_size=_DROP, n_embed=4544))["d_model"] == 4544  # legacy name


def test_falcon_new_decoder_architecture_has_two_norms_and_grouped_kv(tmp_path: Path) -> None:
    block = block_of(FALCON_40B)
    assert (block["placement"], block["n_kv_heads"], block["head_dim"]) == ("parallel", 8, 64)
    assert block_of(with_fields(FALCON_40B, num_ln_in_parallel_attn=1))["placement"] == "parallel_shared"
    # 41,303,293,952: FalconForCausalLM on the meta device for this config (transformers 5.24)
    assert count_parameters(load_config(write_json(tmp_path, FALCON_40B))).total == 41_303_293_952


@pytest.mark.parametrize("base, changes, field", [
    (FALCON_7B, {"alibi": True}, "alibi"),
    (FALCON_7B, {"apply_residual_connection_post_layernorm": True}, "apply_residual_connection_post_layernorm"),
    (FALCON_7B, {"num_ln_in_parallel_attn": 2}, "num_ln_in_parallel_attn"),  # two norms need the new decoder
    (FALCON_7B, {"multi_query": False, "num_kv_heads": 8}, "num_kv_heads"),
    (FALCON_7B, {"hidden_size": 4544, "n_embed": 4096}, "n_embed"),  # the two names disagree
    (FALCON_7B, {"hidden_size": _DROP}, "hidden_size"),
    (FALCON_40B, {"parallel_attn": False}, "parallel_attn"),
    (FALCON_40B, {"num_kv_heads": 7}, "num_kv_heads"),
    (FALCON_40B, {"num_ln_in_parallel_attn": 3}, "num_ln_in_parallel_attn"),
    (FALCON_7B, {"fancy_new_thing": 1}, "fancy_new_thing"),
])
def test_falcon_fields_it_cannot_represent(tmp_path: Path, base: dict, changes: dict, field: str) -> None:
    assert f"field '{field}'" in hf_error(write_json(tmp_path, with_fields(base, **changes)))


# --------------------------------------------------------------------------- DeepSeek (latent attention)

DEEPSEEK_V3 = {  # https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json (auto_map, fp8 quantization_config left out)
    "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "aux_loss_alpha": 0.001, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1, "first_k_dense_replace": 3,
    "hidden_act": "silu", "hidden_size": 7168, "initializer_range": 0.02, "intermediate_size": 18432,
    "kv_lora_rank": 512, "max_position_embeddings": 163840, "model_type": "deepseek_v3",
    "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256,
    "n_shared_experts": 1, "norm_topk_prob": True, "num_attention_heads": 128, "num_experts_per_tok": 8,
    "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "q_lora_rank": 1536,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
    "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "tie_word_embeddings": False,
    "topk_group": 4, "topk_method": "noaux_tc", "torch_dtype": "bfloat16", "transformers_version": "4.33.1",
    "use_cache": True, "v_head_dim": 128, "vocab_size": 129280,
}
DEEPSEEK_V3_DENSE = with_fields(DEEPSEEK_V3, first_k_dense_replace=61)  # a valid config: every layer dense
FIXTURE_V2 = json.loads((Path(__file__).parent / "fixtures" / "hf" / "deepseek_v2" / "config.json").read_text())


# https://huggingface.co/deepseek-ai/DeepSeek-V2-Lite/blob/main/config.json (auto_map left out)
DEEPSEEK_V2_LITE = {
    "architectures": ["DeepseekV2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "aux_loss_alpha": 0.001, "bos_token_id": 100000, "eos_token_id": 100001, "first_k_dense_replace": 1,
    "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 10944,
    "kv_lora_rank": 512, "max_position_embeddings": 163840, "model_type": "deepseek_v2",
    "moe_intermediate_size": 1408, "moe_layer_freq": 1, "n_group": 1, "n_routed_experts": 64, "n_shared_experts": 2,
    "norm_topk_prob": False, "num_attention_heads": 16, "num_experts_per_tok": 6, "num_hidden_layers": 27,
    "num_key_value_heads": 16, "pretraining_tp": 1, "q_lora_rank": None, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707, "mscale_all_dim": 0.707,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
    "rope_theta": 10000, "routed_scaling_factor": 1.0, "scoring_func": "softmax", "seq_aux": True,
    "tie_word_embeddings": False, "topk_group": 1, "topk_method": "greedy", "torch_dtype": "bfloat16",
    "transformers_version": "4.33.1", "use_cache": True, "v_head_dim": 128, "vocab_size": 102400,
}


@pytest.mark.parametrize("hf, preset, dense, transformers_total, buffers", [
    # totals: transformers 5.24 DeepseekV3/V2ForCausalLM instantiated on the meta device from the config
    # (sum of numel over parameters()); buffers: V3's e_score_correction_bias, 256 in each of the 58 expert layers
    (DEEPSEEK_V3, "deepseek-v3", 3, 671_026_404_352, 58 * 256),
    (DEEPSEEK_V2_LITE, "deepseek-v2-lite", 1, 15_706_484_224, 0),
])
def test_deepseek_published_config_maps_to_the_packaged_preset(tmp_path: Path, hf: dict, preset: str, dense: int,
                                                               transformers_total: int, buffers: int) -> None:
    imported, packaged = load_config(write_json(tmp_path, hf)), load_config(preset)
    assert (imported.block, imported.model, imported.layer_blocks) == \
        (packaged.block, packaged.model, packaged.layer_blocks)
    # layers 0..first_k_dense_replace-1 dense (intermediate_size wide), the rest experts
    assert [imported.layer_block(i).moe is None for i in range(dense + 2)] == [True] * dense + [False, False]
    assert imported.layer_block(0).d_ff == hf["intermediate_size"]
    result = count_parameters(imported)
    assert result.total == transformers_total and result.buffers == buffers and result.reconciled.match


def test_deepseek_v3_all_dense_maps_latent_attention_and_yarn() -> None:
    block = block_of(DEEPSEEK_V3_DENSE)
    assert block["mla"] == {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
                            "qk_rope_head_dim": 64, "v_head_dim": 128}
    assert "head_dim" not in block and "n_kv_heads" not in block
    assert block["rope_layout"] == "interleaved" and block["norm"] == "rmsnorm" and block["activation"] == "swiglu"
    assert block["rope_scaling"] == {"type": "yarn", "factor": 40.0, "original_max_positions": 4096,
                                     "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}


def test_deepseek_v3_all_dense_count_by_hand(tmp_path: Path) -> None:
    d, h, V, L = 7168, 128, 129280, 61
    attention = d * 1536 + 1536 + 1536 * h * 192 + d * 576 + 512 + 512 * h * 256 + h * 128 * d
    per_layer = attention + 3 * d * 18432 + 2 * d  # dense SwiGLU MLP, two RMSNorms
    total = count_parameters(load_config(write_json(tmp_path, DEEPSEEK_V3_DENSE))).total
    assert total == L * per_layer + 2 * V * d + d == 37_445_852_160


@pytest.mark.parametrize("change, key", [
    ({"num_key_value_heads": 64}, "num_key_value_heads"),
    ({"quantization_config": {"quant_method": "fp8"}}, "quantization_config"),
    ({"rope_interleave": True}, "rope_interleave"),  # not a DeepseekV2Config field: V2 always interleaves
])
def test_deepseek_unrepresentable_fields_are_named(tmp_path: Path, change: dict, key: str) -> None:
    base = FIXTURE_V2 if key == "rope_interleave" else DEEPSEEK_V3_DENSE
    message = hf_error(write_json(tmp_path, with_fields(base, **change)))
    assert f"field '{key}'" in message


def test_deepseek_query_rank_layout_and_stored_head_dims() -> None:
    assert block_of(with_fields(DEEPSEEK_V3_DENSE, q_lora_rank=None))["mla"]["q_lora_rank"] == 0  # one q_proj
    assert block_of(with_fields(DEEPSEEK_V3_DENSE, q_lora_rank=_DROP))["mla"]["q_lora_rank"] == 1536  # the default
    assert block_of(with_fields(DEEPSEEK_V3_DENSE, rope_interleave=False))["rope_layout"] == "half"
    # transformers overwrites head_dim (qk_rope_head_dim) and qk_head_dim itself: stored values change nothing
    assert block_of(with_fields(DEEPSEEK_V3_DENSE, head_dim=7, qk_head_dim=3)) == block_of(DEEPSEEK_V3_DENSE)
    v2 = block_of(FIXTURE_V2)
    assert v2["rope_layout"] == "interleaved" and v2["mla"]["q_lora_rank"] == 0
    assert v2["bias"] == {"qkv": True, "out": True, "mlp": True, "norm": False}


# --------------------------------------------------------------------------- OLMo (v1)


def test_olmo_norms_have_no_parameters_and_clip_qkv_maps(tmp_path: Path) -> None:
    """OlmoLayerNorm has no weight and no bias (eps 1e-5 fixed); clip_qkv clamps q, k, v (null: off)."""
    plain = load_config(write_json(tmp_path, OLMO_1B))
    assert (plain.block.norm, plain.block.norm_scale, plain.block.bias.norm, plain.block.clip_qkv) == \
        ("layernorm", False, False, 0.0)
    assert plain.block.norm_eps == 1e-5
    clipped = load_config(write_json(tmp_path, with_fields(OLMO_1B, clip_qkv=8.0, attention_bias=True)))
    assert clipped.block.clip_qkv == 8.0
    assert (clipped.block.bias.qkv, clipped.block.bias.out, clipped.block.bias.mlp) == (True, True, False)
    # 4·d² + 4·d more than without biases: q, k, v and o each get a bias of d; the norms still add nothing
    d = 2048
    assert count_parameters(clipped).total - count_parameters(plain).total == 16 * 4 * d


@pytest.mark.parametrize("value", [0, -1.0, "big"])
def test_olmo_clip_qkv_that_is_no_bound_is_refused(tmp_path: Path, value: Any) -> None:
    message = hf_error(write_json(tmp_path, with_fields(OLMO_1B, clip_qkv=value)))
    assert "clip_qkv" in message


# --------------------------------------------------------------------------- BLOOM


def test_bloom_maps_alibi_and_the_embedding_norm(tmp_path: Path) -> None:
    config = load_config(write_json(tmp_path, BLOOM_560M))
    assert (config.model.positions, config.block.alibi, config.block.rope, config.model.embedding_norm) == \
        ("alibi", True, 0.0, True)
    assert (config.block.d_ff, config.block.activation, config.block.placement) == (4 * 1024, "gelu_tanh", "pre")
    # the legacy names of BLOOM's first checkpoints map the same way
    legacy = with_fields(BLOOM_560M, hidden_size=_DROP, n_embed=1024, n_head=_DROP, num_attention_heads=16)
    assert load_config(write_json(tmp_path, legacy, "legacy.json")).block == config.block


def test_bloom_residual_after_the_norm_is_the_normed_residual_placement() -> None:
    """(its logits against transformers': tests/test_random_configs.py's bloom-residual-post-layernorm case)"""
    assert block_of(with_fields(BLOOM_560M, apply_residual_connection_post_layernorm=True))["placement"] == \
        "normed_residual"
    assert block_of(BLOOM_560M)["placement"] == "pre"


# --------------------------------------------------------------------------- OPT-350m


def test_opt_word_embed_proj_dim_maps_to_projected_embeddings(tmp_path: Path) -> None:
    config = load_config(write_json(tmp_path, OPT_350M))
    assert (config.model.embedding_dim, config.block.placement, config.model.final_norm) == (512, "post", False)
    # the same width as hidden_size is no projection at all: OPT-125m's configs say 768 and 768
    same = load_config(write_json(tmp_path, with_fields(OPT_350M, word_embed_proj_dim=1024), "same.json"))
    d, e, V = 1024, 512, 50272
    # the narrow table and the two projections against a d-wide table
    assert count_parameters(config).total - count_parameters(same).total == V * e + 2 * d * e - V * d
def _count_json(args: list[str], stdin: str | None = None) -> tuple[int, dict | None, str]:
    run = subprocess.run([sys.executable, "-m", "blockcli", "count", *args, "--json"], input=stdin, text=True,
                         capture_output=True, timeout=120)
    return run.returncode, json.loads(run.stdout) if run.returncode == 0 else None, run.stderr


def test_a_config_json_on_standard_input_is_read_as_one():
    data = {"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2, "vocab_size": 100, "n_positions": 32}
    code, counted, stderr = _count_json(["-"], json.dumps(data, indent=2))
    assert (code, stderr) == (0, "")
    d, v, p, layers = 64, 100, 32, 2
    per_block = 2 * 2 * d + 3 * d * d + 3 * d + d * d + d + 4 * d * d + 4 * d + 4 * d * d + d  # GPT-2, by hand
    assert counted["total"] == v * d + p * d + layers * per_block + 2 * d  # tied head, final LayerNorm


def test_standard_input_still_reads_yaml_and_a_broken_config_json_names_its_field():
    code, counted, _ = _count_json(["-"], "block: {d_model: 64, n_heads: 4, d_ff: 256}\n")
    assert code == 0 and counted["total"] == 2 * 2 * 64 + 4 * (64 * 64 + 64) + 64 * 256 + 256 + 256 * 64 + 64
    code, _, stderr = _count_json(["-"], '{"model_type": "gpt2", "n_embd": 64}')
    assert code == 2 and stderr.strip() == ("blockcli: error: <stdin>: field 'n_head' is missing; "
                                            "a GPT-2 config.json needs it")
# Gemma 2 9B's published config.json (https://huggingface.co/google/gemma-2-9b/blob/main/config.json)
GEMMA2_9B = {
    "architectures": ["Gemma2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "attn_logit_softcapping": 50.0, "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": 1,
    "final_logit_softcapping": 30.0, "head_dim": 256, "hidden_act": "gelu_pytorch_tanh",
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 3584, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 8192, "model_type": "gemma2", "num_attention_heads": 16,
    "num_hidden_layers": 42, "num_key_value_heads": 8, "pad_token_id": 0, "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 4096, "sliding_window_size": 4096,
    "torch_dtype": "float32", "transformers_version": "4.42.0.dev0", "use_cache": True, "vocab_size": 256000,
}


def test_gemma2_published_config_maps_to_the_packaged_preset(tmp_path: Path) -> None:
    imported, packaged = load_config(write_json(tmp_path, GEMMA2_9B)), load_config("gemma-2-9b")
    assert (imported.block, imported.model, imported.layer_blocks) == \
        (packaged.block, packaged.model, packaged.layer_blocks)
    # Gemma2Config: layer i slides when (i + 1) % 2; 9,241,705,984 as transformers instantiates it on meta
    assert [imported.layer_block(i).sliding_window for i in range(4)] == [4096, 0, 4096, 0]
    assert count_parameters(imported).total == 9_241_705_984


def test_gemma2_scale_caps_and_layer_types() -> None:
    mapping = hf_to_mapping(with_fields(GEMMA2_9B, query_pre_attn_scalar=144, attn_logit_softcapping=None,
                                        final_logit_softcapping=_DROP,
                                        layer_types=["full_attention"] + ["sliding_attention"] * 41), "g.json")
    assert mapping["block"]["attention_scale"] == 144 ** -0.5  # in place of 1/sqrt(head_dim)
    assert "attention_softcap" not in mapping["block"]  # null: no cap
    assert mapping["model"]["logit_softcap"] == 30.0  # absent: Gemma2Config's default
    assert "sliding_window" not in mapping["block"]  # layer 0 is global
    assert mapping["layers"] == [{"indices": list(range(1, 42)), "block": {"sliding_window": 4096}}]


def test_gemma2_bidirectional_attention_is_refused(tmp_path: Path) -> None:
    assert "field 'use_bidirectional_attention'" in hf_error(
        write_json(tmp_path, with_fields(GEMMA2_9B, use_bidirectional_attention=True)))


@pytest.mark.parametrize("command", ["count", "trace", "verify"])
def test_vaultgemma_bidirectional_attention_is_refused_unless_false(tmp_path: Path, command: str) -> None:
    """A causal LM that attends both ways is not the causal block blockcli runs: one line naming the field, exit 2;
    false and null (transformers 5's default) are the causal model the fixture holds."""
    data = json.loads((Path(__file__).parent / "fixtures" / "hf" / "vaultgemma" / "config.json").read_text())
    for value, refused in ((True, True), (False, False), (None, False)):
        path = write_json(tmp_path, dict(data, use_bidirectional_attention=value))
        proc = subprocess.run([sys.executable, "-m", "blockcli", command, str(path)],
                              capture_output=True, text=True)
        if refused:
            assert proc.returncode == 2 and proc.stdout == "", proc.stderr
            line, = proc.stderr.strip().splitlines()
            assert line.startswith("blockcli: error: ") and "field 'use_bidirectional_attention' = True" in line
            assert "causal" in line
        else:
            assert proc.returncode == 0, proc.stderr


# Gemma 3 1B's published config.json (https://huggingface.co/google/gemma-3-1b-pt/blob/main/config.json)
GEMMA3_1B = {
    "architectures": ["Gemma3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "attn_logit_softcapping": None, "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": 1,
    "final_logit_softcapping": None, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152,
    "initializer_range": 0.02, "intermediate_size": 6912, "max_position_embeddings": 32768,
    "model_type": "gemma3_text", "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1,
    "pad_token_id": 0, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000,
    "rope_scaling": None, "rope_theta": 1000000, "sliding_window": 512, "sliding_window_pattern": 6,
    "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0", "use_cache": True, "vocab_size": 262144,
}


def test_gemma3_published_config_maps_to_the_packaged_preset(tmp_path: Path) -> None:
    imported, packaged = load_config(write_json(tmp_path, GEMMA3_1B)), load_config("gemma-3-1b")
    assert (imported.block, imported.model, imported.layer_blocks) == \
        (packaged.block, packaged.model, packaged.layer_blocks)
    # Gemma3TextConfig: layer i slides unless (i + 1) % 6 == 0; the sliding layers rotate with base 10^4
    assert [(i, imported.layer_block(i).rope_theta) for i in (0, 5, 6, 11)] == \
        [(0, 1e4), (5, 1e6), (6, 1e4), (11, 1e6)]
    assert count_parameters(imported).total == 999_885_952  # as transformers instantiates it on meta


def test_gemma3_rope_scaling_goes_to_the_global_layers_only() -> None:
    """Gemma3TextConfig applies rope_scaling to full_attention's RoPE; the sliding layers keep the default."""
    mapping = hf_to_mapping(with_fields(GEMMA3_1B, rope_scaling={"rope_type": "linear", "factor": 8.0}), "g.json")
    assert "rope_scaling" not in mapping["block"]  # layer 0 slides
    assert mapping["layers"][0]["block"]["rope_scaling"] == {"type": "linear", "factor": 8.0}


def test_gemma3_rope_parameters_per_layer_type() -> None:
    data = with_fields(GEMMA3_1B, rope_theta=_DROP, rope_local_base_freq=_DROP, rope_scaling=_DROP,
                       rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 5e5},
                                        "sliding_attention": {"rope_type": "default", "rope_theta": 2e4}})
    mapping = hf_to_mapping(data, "g.json")
    assert mapping["block"]["rope_theta"] == 2e4 and mapping["layers"][0]["block"]["rope_theta"] == 5e5


def test_gemma3_rope_parameters_of_an_unknown_layer_type_is_refused(tmp_path: Path) -> None:
    data = with_fields(GEMMA3_1B, rope_parameters={"full_attention": {"rope_type": "default"},
                                                   "sliding_attention": {"rope_type": "default"},
                                                   "chunked_attention": {"rope_type": "default"}})
    assert "field 'rope_parameters.chunked_attention'" in hf_error(write_json(tmp_path, data))


# Gemma 3 4B's published config.json (https://huggingface.co/google/gemma-3-4b-it/blob/main/config.json):
# a SigLIP vision tower beside a gemma3_text language model whose text_config names only what differs
# from Gemma3TextConfig's defaults (8 heads, 4 K/V heads of dim 256, vocabulary 262,208, 131,072 positions)
GEMMA3_4B = {
    "architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999, "eoi_token_index": 256000,
    "eos_token_id": [1, 106], "image_token_index": 262144, "initializer_range": 0.02, "mm_tokens_per_image": 256,
    "model_type": "gemma3",
    "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                    "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                    "sliding_window": 1024},
    "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
    "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
                      "model_type": "siglip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 27,
                      "patch_size": 14, "vision_use_head": False},
}
# the 12B and 27B text_config objects of the same family's published configs
GEMMA3_12B_TEXT = {"hidden_size": 3840, "intermediate_size": 15360, "model_type": "gemma3_text",
                   "num_attention_heads": 16, "num_hidden_layers": 48, "num_key_value_heads": 8,
                   "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024}
GEMMA3_27B_TEXT = {"head_dim": 128, "hidden_size": 5376, "intermediate_size": 21504, "model_type": "gemma3_text",
                   "num_attention_heads": 32, "num_hidden_layers": 62, "num_key_value_heads": 16,
                   "query_pre_attn_scalar": 168, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                   "sliding_window": 1024}


@pytest.mark.parametrize("text, language_model", [
    # transformers 5.24 Gemma3ForConditionalGeneration instantiated on the meta device from each config
    # (sum of numel outside model.vision_tower and model.multi_modal_projector; tied head once)
    (GEMMA3_4B["text_config"], 3_880_263_168),  # 4,300,079,472 with the vision side
    (GEMMA3_12B_TEXT, 11_766_034_176),  # 12,187,325,040
    (GEMMA3_27B_TEXT, 27_009_346_304),  # 27,432,406,640
])
def test_gemma3_vision_language_configs_count_their_language_model(tmp_path: Path, text: dict,
                                                                   language_model: int) -> None:
    config = load_config(write_json(tmp_path, with_fields(GEMMA3_4B, text_config=text)))
    assert count_parameters(config).total == language_model
    assert any("vision tower and multimodal projector are not counted" in note for note in config.notes)


def test_gemma3_27b_published_config_maps_to_the_packaged_preset(tmp_path: Path) -> None:
    imported = load_config(write_json(tmp_path, with_fields(GEMMA3_4B, text_config=GEMMA3_27B_TEXT)))
    packaged = load_config("gemma-3-27b")
    assert (imported.block, imported.model, imported.layer_blocks) == \
        (packaged.block, packaged.model, packaged.layer_blocks)


def test_gemma3_vision_language_defaults_are_gemma3_text_configs() -> None:
    """A text_config holds what differs from Gemma3TextConfig: the sizes it leaves out are that class's."""
    block, model = (hf_to_mapping(GEMMA3_4B, "g.json")[k] for k in ("block", "model"))
    assert (block["n_heads"], block["n_kv_heads"], block["head_dim"]) == (8, 4, 256)
    assert (model["vocab_size"], model["max_positions"], model["n_layers"]) == (262_208, 131_072, 34)
    assert model["tie_embeddings"] is True  # Gemma3Config's own default


def test_gemma3_tying_follows_the_top_level_field() -> None:
    """transformers ties Gemma3ForConditionalGeneration's head by the top level's tie_word_embeddings."""
    untied = hf_to_mapping(with_fields(GEMMA3_4B, tie_word_embeddings=False), "g.json")
    assert untied["model"]["tie_embeddings"] is False
    overruled = with_fields(GEMMA3_4B, text_config=dict(GEMMA3_4B["text_config"], tie_word_embeddings=False))
    mapping = hf_to_mapping(overruled, "g.json")
    assert mapping["model"]["tie_embeddings"] is True
    assert "as the top level's tie_word_embeddings says" in mapping["about"]["description"]


@pytest.mark.parametrize("change, field", [
    ({"text_config": _DROP}, "field 'text_config' is missing"),
    ({"text_config": [1, 2]}, "field 'text_config': expected an object"),
    ({"text_config": dict(GEMMA3_4B["text_config"], model_type="llama")}, "text_config: field 'model_type'"),
    ({"text_config": dict(GEMMA3_4B["text_config"], hidden_size=-1)}, "text_config: field 'hidden_size'"),
    ({"text_config": dict(GEMMA3_4B["text_config"], frobnicate=1)}, "text_config: field 'frobnicate'"),
    ({"frobnicate": 1}, "field 'frobnicate'"),
    ({"tie_word_embeddings": "yes"}, "field 'tie_word_embeddings'"),
])
def test_gemma3_vision_language_mistakes_name_the_field(tmp_path: Path, change: dict, field: str) -> None:
    assert field in hf_error(write_json(tmp_path, with_fields(GEMMA3_4B, **change)))


def test_gemma3_vision_language_allow_field_reaches_both_levels(tmp_path: Path) -> None:
    data = with_fields(GEMMA3_4B, frobnicate=1, text_config=dict(GEMMA3_4B["text_config"], twiddle=2))
    config = load_config(write_json(tmp_path, data), allow_fields=("frobnicate", "twiddle"))
    assert count_parameters(config).total == 3_880_263_168
    assert sum("accepted unchecked" in note for note in config.notes) == 2


# Mistral Small 3.1's published config.json
# (https://huggingface.co/mistralai/Mistral-Small-3.1-24B-Instruct-2503/blob/main/config.json)
MISTRAL_SMALL_31 = {
    "architectures": ["Mistral3ForConditionalGeneration"], "image_token_index": 10, "model_type": "mistral3",
    "multimodal_projector_bias": False, "projector_hidden_act": "gelu", "spatial_merge_size": 2,
    "text_config": {"attention_dropout": 0.0, "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120,
                    "initializer_range": 0.02, "intermediate_size": 32768, "max_position_embeddings": 131072,
                    "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 40,
                    "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 1000000000.0,
                    "sliding_window": None, "use_cache": True, "vocab_size": 131072},
    "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
    "vision_config": {"attention_dropout": 0.0, "head_dim": 64, "hidden_act": "silu", "hidden_size": 1024,
                      "image_size": 1540, "initializer_range": 0.02, "intermediate_size": 4096, "model_type": "pixtral",
                      "num_attention_heads": 16, "num_channels": 3, "num_hidden_layers": 24, "patch_size": 14,
                      "rope_theta": 10000.0},
    "vision_feature_layer": -1,
}


def test_mistral_small_31_counts_its_untied_language_model(tmp_path: Path) -> None:
    """text_config's tie_word_embeddings (MistralConfig's default, false) decides: the published checkpoint
    stores language_model.lm_head. transformers 5.24 on the meta device counts this language model as
    23,572,403,200 with the top level's tie_word_embeddings false (24,011,361,280 with the vision side, the
    model card's "24B"); left out, its top-level default of true ties the head (transformers issue #42313)."""
    config = load_config(write_json(tmp_path, MISTRAL_SMALL_31))
    assert config.model.tie_embeddings is False and config.block.sliding_window == 0
    by_hand = 40 * (2 * 5120 * 4096 + 2 * 5120 * 1024 + 3 * 5120 * 32768 + 2 * 5120) + 2 * 131072 * 5120 + 5120
    assert count_parameters(config).total == by_hand == 23_572_403_200
    packaged = load_config("mistral-small-3.1-24b")
    assert (config.block, config.model, config.layer_blocks) == (packaged.block, packaged.model, packaged.layer_blocks)


def test_mistral3_ties_by_its_text_config() -> None:
    tied = with_fields(MISTRAL_SMALL_31, text_config=dict(MISTRAL_SMALL_31["text_config"], tie_word_embeddings=True))
    assert hf_to_mapping(tied, "m.json")["model"]["tie_embeddings"] is True  # Ministral 3's configs
    overruled = with_fields(tied, tie_word_embeddings=False)
    mapping = hf_to_mapping(overruled, "m.json")
    assert mapping["model"]["tie_embeddings"] is True
    assert "as text_config's tie_word_embeddings says, not the top level's" in mapping["about"]["description"]


def test_mistral3_sizes_it_leaves_out_are_mistral_configs() -> None:
    model = hf_to_mapping(with_fields(MISTRAL_SMALL_31, text_config={"model_type": "mistral"}), "m.json")["model"]
    assert (model["vocab_size"], model["n_layers"], model["max_positions"]) == (32000, 32, 131072)


# SmolLM3-3B's published config.json (https://huggingface.co/HuggingFaceTB/SmolLM3-3B/blob/main/config.json)
SMOLLM3_3B = {
    "architectures": ["SmolLM3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": None,
    "eos_token_id": 128012, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 11008, "max_position_embeddings": 65536, "max_window_layers": 28, "mlp_bias": False,
    "model_type": "smollm3", "no_rope_layer_interval": 4, "no_rope_layers": [0 if i % 4 == 3 else 1 for i in range(36)],
    "num_attention_heads": 16, "num_hidden_layers": 36, "num_key_value_heads": 4, "pad_token_id": 128004,
    "pretraining_tp": 2, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 5000000.0, "sliding_window": None,
    "torch_dtype": "bfloat16", "transformers_version": "4.54.0.dev0", "use_cache": False,
    "use_sliding_window": False, "vocab_size": 128256,
}


# transformers 5.24 SmolLM3ForCausalLM instantiated on the meta device from SMOLLM3_3B (sum of numel, tied
# head once); by hand, Llama's gated block: 36·(2·2048² + 2·2048·512 + 3·2048·11008 + 2·2048) + 128256·2048 + 2048
SMOLLM3_3B_PARAMETERS = 3_075_098_624


def test_smollm3_published_config_leaves_every_fourth_layer_without_positions(tmp_path: Path) -> None:
    config = load_config(write_json(tmp_path, SMOLLM3_3B))
    assert [i for i in range(36) if not config.layer_block(i).rope] == list(range(3, 36, 4))
    assert config.layer_block(0).rope == 1.0 and config.layer_block(0).rope_theta == 5e6
    assert not any(config.layer_block(i).sliding_window for i in range(36))
    assert SMOLLM3_3B_PARAMETERS == 36 * (2 * 2048**2 + 2 * 2048 * 512 + 3 * 2048 * 11008 + 2 * 2048) + 128256 * 2048 + 2048
    assert count_parameters(config).total == SMOLLM3_3B_PARAMETERS


def test_smollm3_published_config_maps_to_the_packaged_preset(tmp_path: Path) -> None:
    imported, packaged = load_config(write_json(tmp_path, SMOLLM3_3B)), load_config("smollm3-3b")
    assert (imported.block, imported.model, imported.layer_blocks) == \
        (packaged.block, packaged.model, packaged.layer_blocks)


def test_smollm3_interval_gives_the_nope_layers_when_no_list_is_given() -> None:
    mapping = hf_to_mapping(with_fields(SMOLLM3_3B, no_rope_layers=_DROP, no_rope_layer_interval=3), "s.json")
    assert mapping["layers"] == [{"indices": list(range(2, 36, 3)), "block": {"rope": False}}]


def test_smollm3_window_goes_on_the_nope_layers() -> None:
    mapping = hf_to_mapping(with_fields(SMOLLM3_3B, use_sliding_window=True, sliding_window=4096), "s.json")
    assert "sliding_window" not in mapping["block"]
    assert mapping["layers"] == [{"indices": list(range(3, 36, 4)), "block": {"sliding_window": 4096, "rope": False}}]


def test_smollm3_scaled_rope_is_dropped_on_the_nope_layers() -> None:
    data = with_fields(SMOLLM3_3B, rope_scaling={"rope_type": "yarn", "factor": 2.0,
                                                 "original_max_position_embeddings": 32768})
    config = parse_config(hf_to_mapping(data, "s.json"))
    assert config.layer_block(0).rope_scaling is not None and config.layer_block(3).rope_scaling is None


@pytest.mark.parametrize("value", [[1] * 35, [1] * 35 + [2], [True] * 36, "1110"])
def test_smollm3_malformed_no_rope_layers_is_refused(tmp_path: Path, value: Any) -> None:
    assert "field 'no_rope_layers'" in hf_error(write_json(tmp_path, with_fields(SMOLLM3_3B, no_rope_layers=value)))


# GLM-4.5-Air's published config.json (https://huggingface.co/zai-org/GLM-4.5-Air/blob/main/config.json)
GLM45_AIR = {
    "architectures": ["Glm4MoeForCausalLM"], "attention_bias": True, "attention_dropout": 0.0, "pad_token_id": 151329,
    "eos_token_id": [151329, 151336, 151338], "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096,
    "partial_rotary_factor": 0.5, "initializer_range": 0.02, "intermediate_size": 10944,
    "max_position_embeddings": 131072, "model_type": "glm4_moe", "moe_intermediate_size": 1408,
    "norm_topk_prob": True, "num_attention_heads": 96, "n_group": 1, "topk_group": 1, "n_routed_experts": 128,
    "n_shared_experts": 1, "routed_scaling_factor": 1.0, "num_experts_per_tok": 8, "first_k_dense_replace": 1,
    "num_hidden_layers": 46, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_scaling": None,
    "rope_theta": 1000000, "num_nextn_predict_layers": 1, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.54.0", "use_cache": True, "use_qk_norm": False, "vocab_size": 151552,
}


def test_glm45_air_counts_as_transformers_and_by_hand(tmp_path: Path) -> None:
    result = count_parameters(load_config(write_json(tmp_path, GLM45_AIR)))
    # transformers 5.24 Glm4MoeForCausalLM instantiated on the meta device from this config (sum of numel;
    # the 45 e_score_correction_bias buffers of 128 are not parameters); GLM's "106B total"
    assert result.total == 106_852_245_504
    d, L, V, h, kv, d_h, ff, E, k, d_e = 4096, 46, 151552, 96, 8, 128, 10944, 128, 8, 1408
    attention = d * h * d_h + h * d_h + 2 * (d * kv * d_h + kv * d_h) + h * d_h * d  # q/k/v biases, no o bias
    moe_layer = attention + 2 * d + d * E + E * 3 * d * d_e + 3 * d * d_e  # router, experts, one shared expert
    dense_layer = attention + 2 * d + 3 * d * ff
    assert result.total == dense_layer + (L - 1) * moe_layer + 2 * V * d + d
    assert result.active == result.total - (L - 1) * (E - k) * 3 * d * d_e  # a token uses 8 of 128 experts


def test_glm45_air_published_config_maps_to_the_packaged_preset(tmp_path: Path) -> None:
    imported, packaged = load_config(write_json(tmp_path, GLM45_AIR)), load_config("glm-4.5-air")
    assert (imported.block, imported.model, imported.layer_blocks) == \
        (packaged.block, packaged.model, packaged.layer_blocks)


def test_glm45_maps_its_attention_and_router() -> None:
    mapping = hf_to_mapping(with_fields(GLM45_AIR, use_qk_norm=True), "g.json")
    block = mapping["block"]
    assert block["rope"] == 0.5 and block["qk_norm"] == "head" and block["head_dim"] == 128
    assert block["bias"] == {"qkv": True, "out": False, "mlp": False, "norm": False}
    assert block["moe"] == {"n_experts": 128, "top_k": 8, "d_expert": 1408, "routed_scaling": 1.0, "d_shared": 1408,
                              "scoring": "sigmoid", "selection_bias": True, "group_score": "top2_sum",
                              "renormalize": True, "n_groups": 1, "top_groups": 1}
    assert mapping["layers"] == [{"indices": [0], "block": {"moe": None}}]
    assert hf_to_mapping(with_fields(GLM45_AIR, partial_rotary_factor=_DROP), "g.json")["block"]["rope"] == 0.5


# Command R7B's published config.json (https://huggingface.co/CohereLabs/c4ai-command-r7b-12-2024/blob/main/config.json),
# with the fields of Cohere's own codebase that transformers does not read
COMMAND_R7B = {
    "architectures": ["Cohere2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 5,
    "cache_implementation": "hybrid", "eos_token_id": 255001, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336, "layer_norm_eps": 1e-05,
    "logit_scale": 0.25, "max_position_embeddings": 132096, "model_type": "cohere2", "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "order_of_interleaved_layers": "local_attn_first",
    "pad_token_id": 0, "position_embedding_type": "rope_gptj", "rope_scaling": None, "rope_theta": 50000,
    "rotary_pct": 1.0, "sliding_window": 4096, "sliding_window_pattern": 4, "torch_dtype": "bfloat16",
    "transformers_version": "4.48.0.dev0", "use_cache": True, "use_embedding_sharder": True,
    "use_gated_activation": True, "use_parallel_block": True, "use_parallel_embedding": True, "vocab_size": 256000,
}


def test_command_r7b_windows_three_layers_of_four_and_leaves_the_fourth_without_positions(tmp_path: Path) -> None:
    config = load_config(write_json(tmp_path, COMMAND_R7B))
    for i in range(32):
        block = config.layer_block(i)
        if i % 4 == 3:  # global: no window, no RoPE (Cohere2Attention rotates only in a windowed layer)
            assert (block.sliding_window, block.rope, block.rope_layout) == (0, 0.0, "half")
        else:
            assert (block.sliding_window, block.rope, block.rope_layout) == (4096, 1.0, "interleaved")
    # transformers 5.24 Cohere2ForCausalLM instantiated on the meta device from this config (sum of numel, tied
    # head once); by hand: one shift-free LayerNorm per layer, GQA 32/8 of dim 128, SwiGLU
    by_hand = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 4096) + 256000 * 4096 + 4096
    assert count_parameters(config).total == by_hand == 8_028_033_024


def test_command_r7b_published_config_maps_to_the_packaged_preset(tmp_path: Path) -> None:
    imported, packaged = load_config(write_json(tmp_path, COMMAND_R7B)), load_config("command-r7b")
    assert (imported.block, imported.model, imported.layer_blocks) == \
        (packaged.block, packaged.model, packaged.layer_blocks)


@pytest.mark.parametrize("field, value", [("use_parallel_block", False), ("rotary_pct", 0.5),
                                          ("use_gated_activation", False), ("position_embedding_type", "rope")])
def test_command_r7b_codebase_fields_at_another_value_are_refused(tmp_path: Path, field: str, value: Any) -> None:
    assert f"field '{field}'" in hf_error(write_json(tmp_path, with_fields(COMMAND_R7B, **{field: value})))


def test_cohere2_layer_types_may_put_a_global_layer_first() -> None:
    types = ["full_attention", "sliding_attention", "sliding_attention", "sliding_attention"] * 8
    mapping = hf_to_mapping(with_fields(COMMAND_R7B, layer_types=types, sliding_window_pattern=_DROP), "c.json")
    config = parse_config(mapping)
    assert [(config.layer_block(i).rope, config.layer_block(i).sliding_window) for i in range(4)] == \
        [(0.0, 0), (1.0, 4096), (1.0, 4096), (1.0, 4096)]


# A config shaped like OLMo 3 7B's (allenai/Olmo-3-1025-7B): transformers 4's rope_theta and rope_scaling keys
OLMO3_7B = {
    "architectures": ["Olmo3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "eos_token_id": 100257,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 11008,
    "max_position_embeddings": 65536, "model_type": "olmo3", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 32, "pad_token_id": 100277, "rms_norm_eps": 1e-06,
    "rope_scaling": {"attention_factor": 1.2079441541679836, "beta_fast": 32, "beta_slow": 1, "factor": 8.0,
                     "original_max_position_embeddings": 8192, "rope_type": "yarn"},
    "rope_theta": 500000, "sliding_window": 4096, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "use_cache": True, "vocab_size": 100278,
}


def test_olmo3_windows_three_layers_of_four_and_scales_the_global_ones_rope(tmp_path: Path) -> None:
    config = load_config(write_json(tmp_path, OLMO3_7B))
    for i in range(32):
        block = config.layer_block(i)
        assert block.rope_theta == 500000.0 and block.placement == "post_branch" and block.qk_norm == "projection"
        if i % 4 == 3:
            assert block.sliding_window == 0 and block.rope_scaling.type == "yarn" and block.rope_scaling.factor == 8
        else:
            assert block.sliding_window == 4096 and block.rope_scaling is None
    # transformers 5.24 Olmo3ForCausalLM instantiated on the meta device from this config (sum of numel); by
    # hand OLMo 2's block: four d² projections, SwiGLU, two norms after the branches and q/k norms of width d
    by_hand = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096 + 2 * 4096) + 2 * 100278 * 4096 + 4096
    assert count_parameters(config).total == by_hand == 7_298_011_136


def test_olmo3_rope_parameters_per_layer_type_read_as_the_legacy_keys() -> None:
    """transformers 5 saves the same RoPEs as one object per layer type."""
    typed = with_fields(OLMO3_7B, rope_theta=_DROP, rope_scaling=_DROP, rope_parameters={
        "sliding_attention": {"rope_type": "default", "rope_theta": 500000.0},
        "full_attention": dict(OLMO3_7B["rope_scaling"], rope_theta=500000)})
    assert hf_to_mapping(typed, "o.json") | {"about": None} == hf_to_mapping(OLMO3_7B, "o.json") | {"about": None}


MINISTRAL = {"model_type": "ministral", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
             "head_dim": 128, "num_hidden_layers": 36, "intermediate_size": 12288, "vocab_size": 131072,
             "max_position_embeddings": 32768, "sliding_window": 8192, "rope_theta": 100000000.0}


@pytest.mark.parametrize("changes, windows", [
    ({}, {8192}),  # MinistralConfig: every layer sliding when layer_types is absent
    ({"sliding_window": None}, {0}),
    ({"layer_types": ["full_attention"] + ["sliding_attention"] * 35}, {0, 8192}),
])
def test_ministral_windows_the_layers_layer_types_marks(changes: dict, windows: set) -> None:
    config = parse_config(hf_to_mapping(with_fields(MINISTRAL, **changes), "m.json"))
    assert {config.layer_block(i).sliding_window for i in range(36)} == windows
    if "layer_types" in changes:
        assert config.layer_block(0).sliding_window == 0 and config.layer_block(1).sliding_window == 8192


# Shaped like EXAONE 4.0 32B: every fourth layer global (and without positions, since a window is set)
EXAONE4_32B = {"model_type": "exaone4", "hidden_size": 5120, "num_hidden_layers": 64, "num_attention_heads": 40,
               "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 27392, "vocab_size": 102400,
               "max_position_embeddings": 131072, "sliding_window": 4096, "sliding_window_pattern": 4,
               "tie_word_embeddings": False}


def test_exaone4_counts_as_transformers_and_leaves_the_global_layers_without_positions() -> None:
    config = parse_config(hf_to_mapping(EXAONE4_32B, "e.json"))
    assert [(config.layer_block(i).sliding_window, config.layer_block(i).rope) for i in range(4)] == \
        [(4096, 1.0), (4096, 1.0), (4096, 1.0), (0, 0.0)]
    assert config.block.placement == "post_branch" and config.block.qk_norm == "head"
    # transformers 5.24 Exaone4ForCausalLM on the meta device from this config (sum of numel); by hand
    layer = 2 * 5120 * 5120 + 2 * 5120 * 1024 + 3 * 5120 * 27392 + 2 * 5120 + 2 * 128
    assert count_parameters(config).total == 64 * layer + 2 * 102400 * 5120 + 5120 == 32_003_216_384


@pytest.mark.parametrize("changes, sliding, rotating", [
    ({"sliding_window_pattern": "LLG"}, [True, True, False, True], [True, True, False, True]),
    ({"sliding_window": None}, [False] * 4, [True] * 4),  # no window: every layer global, and every one rotates
    ({"layer_types": ["sliding_attention", "full_attention"] * 32, "sliding_window_pattern": _DROP},
     [True, False, True, False], [True, False, True, False]),
])
def test_exaone4_layer_kinds(changes: dict, sliding: list, rotating: list) -> None:
    config = parse_config(hf_to_mapping(with_fields(EXAONE4_32B, **changes), "e.json"))
    assert [bool(config.layer_block(i).sliding_window) for i in range(4)] == sliding
    assert [bool(config.layer_block(i).rope) for i in range(4)] == rotating


@pytest.mark.parametrize("pattern", [0, "LLXG", "", True])
def test_exaone4_malformed_pattern_is_refused(tmp_path: Path, pattern: Any) -> None:
    assert "field 'sliding_window_pattern'" in hf_error(
        write_json(tmp_path, with_fields(EXAONE4_32B, sliding_window_pattern=pattern)))


@pytest.mark.parametrize("data, total, by_hand", [
    # transformers 5.24 on the meta device from each config class's defaults (model_type alone; sum of numel):
    # Seed-OSS's q/k/v biases (attention_bias true) and no o_proj bias, untied head
    ({"model_type": "seed_oss"}, 28_921_040_896,
     64 * (4096 * 10240 + 10240 + 2 * (4096 * 1024 + 1024) + 10240 * 4096 + 3 * 4096 * 27648 + 2 * 4096)
     + 2 * 155136 * 4096 + 4096),
    # ERNIE-4.5-0.3B's sizes, tied head
    ({"model_type": "ernie4_5"}, 360_748_032,
     18 * (2 * 1024 * 2048 + 2 * 1024 * 256 + 3 * 1024 * 3072 + 2 * 1024) + 103424 * 1024 + 1024),
])
def test_seed_oss_and_ernie45_defaults_count_as_transformers(data: dict, total: int, by_hand: int) -> None:
    sizes = {"seed_oss": dict(hidden_size=4096, num_hidden_layers=64, num_attention_heads=80, intermediate_size=27648,
                              vocab_size=155136, max_position_embeddings=524288),
             "ernie4_5": dict(hidden_size=1024, num_hidden_layers=18, num_attention_heads=16, intermediate_size=3072,
                              vocab_size=103424, max_position_embeddings=131072)}[data["model_type"]]
    config = parse_config(hf_to_mapping({**data, **sizes}, "x.json"))  # blockcli asks for the sizes explicitly
    assert count_parameters(config).total == by_hand == total


def test_ernie45_rotates_interleaved_pairs_and_biases_everything() -> None:
    block = block_of({"model_type": "ernie4_5", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                      "intermediate_size": 96, "vocab_size": 100, "max_position_embeddings": 32, "use_bias": True})
    assert block["rope_layout"] == "interleaved" and block["head_dim"] == 128
    assert block["bias"] == {"qkv": True, "out": True, "mlp": True, "norm": False}  # RMSNorm has no shift


def test_a_rotary_fraction_that_rotates_nothing_leaves_no_positions(tmp_path: Path) -> None:
    """transformers rotates int(head_dim · 0.0) = 0 dimensions: no positional signal at all (as GPT-NeoX's
    rotary_pct 0), not model.positions rope's whole head."""
    config = load_config(write_json(tmp_path, with_fields(GLM45_AIR, partial_rotary_factor=0.0)))
    assert config.model.positions == "none" and config.block.rope == 0.0


def test_a_rotary_fraction_rotating_an_odd_number_of_dimensions(tmp_path: Path) -> None:
    # int(128 · 0.33) = 42 dimensions: 21 pairs; int(128 · 0.15) = 19: Glm4MoeRotaryEmbedding's 10 frequencies
    # θ^(-2i/19), rotated over its cos table's 20 dims (as 20 with base θ^(20/19)); with a scaling, refused
    assert parse_config(hf_to_mapping(with_fields(GLM45_AIR, partial_rotary_factor=0.33), "g.json")).block.rope_dims == 42
    odd = parse_config(hf_to_mapping(with_fields(GLM45_AIR, partial_rotary_factor=0.15), "g.json")).block
    assert odd.rope_dims == 20 and odd.rope_theta == pytest.approx(GLM45_AIR["rope_theta"] ** (20 / 19), rel=1e-15)
    message = hf_error(write_json(tmp_path, with_fields(GLM45_AIR, partial_rotary_factor=0.15, rope_scaling={
        "rope_type": "linear", "factor": 2.0})))
    assert "field 'partial_rotary_factor'" in message and "rotates 19 of 128" in message


# DeepSeek with expert layers from the first (first_k_dense_replace 0, DeepseekV2Config's default): block.moe
V3_MOE = {"model_type": "deepseek_v3", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4,
          "num_hidden_layers": 3, "intermediate_size": 96, "moe_intermediate_size": 16, "vocab_size": 128,
          "max_position_embeddings": 64, "q_lora_rank": 12, "kv_lora_rank": 8, "qk_nope_head_dim": 6,
          "qk_rope_head_dim": 4, "v_head_dim": 5, "first_k_dense_replace": 0, "n_routed_experts": 8, "n_group": 4,
          "topk_group": 2, "num_experts_per_tok": 3, "n_shared_experts": 2}
V2_MOE = {"model_type": "deepseek_v2", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 3,
          "intermediate_size": 96, "moe_intermediate_size": 16, "vocab_size": 128, "max_position_embeddings": 64,
          "q_lora_rank": None, "kv_lora_rank": 8, "qk_nope_head_dim": 6, "qk_rope_head_dim": 4, "v_head_dim": 5,
          "first_k_dense_replace": 0, "n_routed_experts": 6, "n_group": 3, "topk_group": 1, "num_experts_per_tok": 2,
          "n_shared_experts": 2, "topk_method": "group_limited_greedy"}


def test_deepseek_v3_expert_layers_map_to_its_routing() -> None:
    assert block_of(V3_MOE)["moe"] == {"n_experts": 8, "top_k": 3, "d_expert": 16, "routed_scaling": 2.5,
                                       "d_shared": 32, "scoring": "sigmoid", "selection_bias": True,
                                       "group_score": "top2_sum", "renormalize": True, "n_groups": 4, "top_groups": 2}


def test_deepseek_v2_expert_layers_map_to_its_routing() -> None:
    assert block_of(V2_MOE)["moe"] == {"n_experts": 6, "top_k": 2, "d_expert": 16, "routed_scaling": 1.0,
                                       "d_shared": 32, "n_groups": 3, "top_groups": 1, "group_score": "max"}
    greedy = block_of(with_fields(V2_MOE, topk_method="greedy", norm_topk_prob=True))["moe"]
    assert "n_groups" not in greedy and "renormalize" not in greedy  # V2's router never renormalises


@pytest.mark.parametrize("dense", [0, 1])
@pytest.mark.parametrize("data, transformers_totals", [(V3_MOE, (121_532, 108_732)), (V2_MOE, (106_616, 100_088))])
def test_deepseek_expert_layers_count_total_and_active_by_hand(tmp_path: Path, data: dict, dense: int,
                                                               transformers_totals: tuple[int, int]) -> None:
    """transformers_totals: sum of numel of DeepseekV3/V2ForCausalLM's parameters on the meta device, with
    first_k_dense_replace 0 and 1. V3's e_score_correction_bias (8 per expert layer) is a buffer there, not a
    parameter: blockcli stores it (router_bias) and reports it apart from the totals."""
    result = count_parameters(load_config(write_json(tmp_path, with_fields(data, first_k_dense_replace=dense))))
    d, h, L, V = 64, 4, 3, 128
    E, k, d_e = data["n_routed_experts"], data["num_experts_per_tok"], 16
    q = d * 12 + 12 + 12 * h * 10 if data["q_lora_rank"] else d * h * 10
    attention = q + d * (8 + 4) + 8 + 8 * h * (6 + 5) + h * 5 * d
    experts, shared, router = E * 3 * d * d_e, 3 * d * 2 * d_e, d * E
    expert_layer, dense_layer = attention + router + experts + shared + 2 * d, attention + 3 * d * 96 + 2 * d
    assert result.total == dense * dense_layer + (L - dense) * expert_layer + 2 * V * d + d \
        == transformers_totals[dense]
    assert result.active == result.total - (L - dense) * (E - k) * 3 * d * d_e  # all but the E − k routed experts
    assert result.buffers == (L - dense) * (E if data["model_type"] == "deepseek_v3" else 0)
    assert result.reconciled.match


@pytest.mark.parametrize("data", [V3_MOE, V2_MOE])
def test_deepseek_dense_first_layers_are_a_per_layer_override(tmp_path: Path, data: dict) -> None:
    mapping = hf_to_mapping(with_fields(data, first_k_dense_replace=2), "d.json")
    assert mapping["layers"] == [{"indices": [0, 1], "block": {"moe": None}}] and "moe" in mapping["block"]
    path = tmp_path / "d.yaml"
    path.write_text(to_yaml(mapping))  # convert's YAML loads back to the same layers
    assert load_config(path).layer_blocks == parse_config(mapping).layer_blocks != ()
    # first_k_dense_replace >= num_hidden_layers: every layer dense, no overrides
    assert "layers" not in hf_to_mapping(with_fields(data, first_k_dense_replace=3), "d.json")


@pytest.mark.parametrize("change, key", [
    ({"moe_layer_freq": 2}, "moe_layer_freq"),  # transformers' DeepSeek builds experts on every layer past the dense ones
    ({"topk_method": "noaux_tc"}, "topk_method"),
    ({"scoring_func": "sigmoid"}, "scoring_func"),  # (mlp_bias: supported, tests/test_random_configs.py)
])
def test_deepseek_expert_layers_refusals_name_the_field(tmp_path: Path, change: dict, key: str) -> None:
    message = hf_error(write_json(tmp_path, with_fields(V2_MOE, **change)))
    assert f"field '{key}'" in message


def test_deepseek_dense_first_layers_trace_verify_and_sizing_per_layer(tmp_path: Path) -> None:
    """V3_MOE with layer 0 dense: trace and verify --layer run that layer's block, and the decode FLOPs
    differ from the all-experts config's by one layer's MLP matmuls (2 FLOPs per weight a token uses)."""
    from blockcli.sizing import inference

    path = write_json(tmp_path, with_fields(V3_MOE, first_k_dense_replace=1))
    for layer, dense in ((0, True), (1, False)):
        run = subprocess.run([sys.executable, "-m", "blockcli", "trace", str(path), "--layer", str(layer), "--json"],
                             capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        shapes = {op["key"]: op["output_shape"] for op in json.loads(run.stdout)["ops"]}
        assert ("router_logits" not in shapes) == dense
        assert shapes.get("router_logits", [1, 8, 8]) == [1, 8, 8]  # (B, T, E)
        checked = subprocess.run([sys.executable, "-m", "blockcli", "verify", str(path), "--layer", str(layer)],
                                 capture_output=True, text=True)
        assert checked.returncode == 0, checked.stdout + checked.stderr
    d, E, k, d_e, d_s, T, B = 64, 8, 3, 16, 32, 6, 2
    mixed, experts = (inference(load_config(write_json(tmp_path, with_fields(V3_MOE, first_k_dense_replace=n),
                                                       f"c{n}.json")), 0, T, B, "float32") for n in (1, 0))
    dense_mlp, expert_mlp = 3 * d * 96, d * E + 3 * d * d_e * k + 3 * d * d_s  # router, k experts, shared expert
    assert mixed.decode - experts.decode == B * 2 * (dense_mlp - expert_mlp)
    assert mixed.kv_bytes_per_token == experts.kv_bytes_per_token == 4 * 3 * (8 + 4)  # the latent: L·(r_kv + d_rope)
# --------------------------------------------------------------------------- mixtures of experts


@pytest.mark.parametrize("field, value, dense", [("decoder_sparse_step", 2, list(range(0, 48, 2))),
                                                ("mlp_only_layers", [0, 5, 99], [0, 5])])
def test_qwen_moe_dense_layers_are_per_layer_overrides(tmp_path: Path, field: str, value: Any, dense: list) -> None:
    """Qwen3MoeDecoderLayer: dense unless (i + 1) % decoder_sparse_step == 0 and i not in mlp_only_layers (an
    index past the last layer is never read); the dense layers are intermediate_size wide. transformers 5.24
    instantiates these two configs on the meta device at 16,936,286,208 and 29,399,136,256 parameters."""
    config = load_config(write_json(tmp_path, with_fields(QWEN3_30B_A3B, **{field: value})))
    assert [i for i in range(48) if config.layer_block(i).moe is None] == dense
    d, V, n_moe = 2048, 151936, 48 - len(dense)
    attention_and_norms = 2 * d * 32 * 128 + 2 * d * 4 * 128 + 2 * 128 + 2 * d  # Q, O; K, V; q/k norms; two norms
    experts, dense_mlp = 128 * 3 * d * 768, 3 * d * 6144
    total = 48 * attention_and_norms + n_moe * (d * 128 + experts) + len(dense) * dense_mlp + 2 * V * d + d
    counted = count_parameters(config)
    assert counted.total == total == {"decoder_sparse_step": 16_936_286_208, "mlp_only_layers": 29_399_136_256}[field]
    assert counted.active_total == total - n_moe * (128 - 8) * 3 * d * 768  # a token uses 8 of 128 experts
    assert load_config(write_json(tmp_path, with_fields(QWEN3_30B_A3B, decoder_sparse_step=99))).block.moe is None


def test_qwen2_moe_maps_its_shared_expert_and_gate(tmp_path: Path) -> None:
    # Qwen1.5-MoE-A2.7B's shape (https://huggingface.co/Qwen/Qwen1.5-MoE-A2.7B/blob/main/config.json)
    hf = {"model_type": "qwen2_moe", "hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 16,
          "num_hidden_layers": 24, "intermediate_size": 5632, "moe_intermediate_size": 1408,
          "shared_expert_intermediate_size": 5632, "num_experts": 60, "num_experts_per_tok": 4,
          "norm_topk_prob": False, "decoder_sparse_step": 1, "vocab_size": 151936, "max_position_embeddings": 8192,
          "rope_theta": 1000000.0, "use_sliding_window": False, "sliding_window": 32768, "max_window_layers": 21,
          "router_aux_loss_coef": 0.001, "output_router_logits": False, "tie_word_embeddings": False}
    config = load_config(write_json(tmp_path, hf))
    moe = config.block.moe
    assert (moe.n_experts, moe.top_k, moe.d_expert, moe.d_shared, moe.shared_gate, moe.renormalize) == \
        (60, 4, 1408, 5632, True, False)
    assert config.block.bias.qkv and not config.block.bias.out  # qkv_bias defaults to true
    # by hand: attention 4·d² + 3·d (q/k/v biases), router d·60, 60 experts and the shared one 3·d·width,
    # the shared gate d, two norms; embeddings, final norm and an untied head
    d = 2048
    layer = 4 * d * d + 3 * d + d * 60 + 60 * 3 * d * 1408 + 3 * d * 5632 + d + 2 * d
    assert count_parameters(config).total == 24 * layer + 2 * 151936 * d + d
    hf["use_sliding_window"] = True
    assert "field 'use_sliding_window'" in hf_error(write_json(tmp_path, hf))


def test_mixtral_window_and_theta_defaults(tmp_path: Path) -> None:
    hf = with_fields(MIXTRAL_8X7B, rope_theta=_DROP, sliding_window=4096)
    block = load_config(write_json(tmp_path, hf)).block
    assert block.rope_theta == 1e6 and block.sliding_window == 4096  # MixtralConfig's default_theta


def test_gpt_oss_without_rope_fields_takes_gpt_oss_configs_defaults(tmp_path: Path) -> None:
    """GptOssConfig.__post_init__ (transformers 5.24): with no rope_parameters, yarn with factor 32 over 4,096
    original positions, beta_fast 32, beta_slow 1, not truncated, on default_theta 150,000; with no layer_types,
    the even layers slide; num_experts_per_tok 4, swiglu_alpha 1.702, swiglu_limit 7."""
    hf = with_fields(GPT_OSS_20B, rope_scaling=_DROP, rope_theta=_DROP, layer_types=_DROP, experts_per_token=_DROP,
                     num_experts_per_tok=_DROP, swiglu_limit=_DROP, quantization_config=_DROP)
    config = load_config(write_json(tmp_path, hf))
    b = config.block
    assert (b.rope_theta, b.rope_scaling.type, b.rope_scaling.factor, b.rope_scaling.original_max_positions,
            b.rope_scaling.beta_fast, b.rope_scaling.beta_slow, b.rope_scaling.truncate) == (
        150000.0, "yarn", 32.0, 4096, 32.0, 1.0, False)
    assert [config.layer_block(i).sliding_window for i in range(4)] == [128, 0, 128, 0]
    assert (b.moe.top_k, b.swiglu_alpha, b.swiglu_limit, b.attention_sinks, b.moe.logit_bias) == (
        4, 1.702, 7.0, True, True)
    assert count_parameters(config).total == 20_914_757_184  # the same model as the published config


@pytest.mark.parametrize("changes, message", [
    ({"experts_per_token": 2}, "field 'experts_per_token' = 2 cannot be represented"),
    ({"quantization_config": {"quant_method": "gptq", "bits": 4}}, "field 'quantization_config'"),
    ({"quantization_config": "mxfp4"}, "field 'quantization_config'"),
    ({"swiglu_limit": 0}, "field 'swiglu_limit': expected a number in (0, 1e+06]"),
    ({"layer_types": ["chunked_attention"] * 24}, "field 'layer_types'"),
    ({"experts_per_token": "4"}, "field 'experts_per_token': expected an integer"),
    ({"experts_per_token": True}, "field 'experts_per_token': expected an integer"),
    ({"head_dim": None}, "field 'head_dim': expected a value"),
    ({"rope_theta": None}, "field 'rope_theta': expected a value"),
    ({"swiglu_limit": None}, "field 'swiglu_limit': expected a value"),
])
def test_gpt_oss_fields_it_cannot_represent_are_one_line_errors(tmp_path: Path, changes: dict, message: str) -> None:
    assert message in hf_error(write_json(tmp_path, with_fields(GPT_OSS_20B, **changes)))


def test_gpt_oss_attention_biases_default_on_and_num_experts_is_an_alias(tmp_path: Path) -> None:
    """GptOssConfig: attention_bias defaults to true; num_experts is num_local_experts by its attribute_map.
    The hand count of a config without attention_bias: each of 24 layers' q, k, v, o biases, 64·64 + 2·8·64
    + 2880, are the difference from attention_bias false."""
    no_field = load_config(write_json(tmp_path, with_fields(GPT_OSS_20B, attention_bias=_DROP), "a.json"))
    off = load_config(write_json(tmp_path, with_fields(GPT_OSS_20B, attention_bias=False), "b.json"))
    assert count_parameters(no_field).total == 20_914_757_184
    assert count_parameters(no_field).total - count_parameters(off).total == 24 * (64 * 64 + 2 * 8 * 64 + 2880)
    alias = with_fields(GPT_OSS_20B, num_local_experts=_DROP, num_experts=32)
    assert count_parameters(load_config(write_json(tmp_path, alias, "c.json"))).total == 20_914_757_184


def test_gpt_oss_mxfp4_config_is_read_with_a_note(tmp_path: Path) -> None:
    config = load_config(write_json(tmp_path, GPT_OSS_20B))
    assert "stored as MXFP4; counted and run dequantized" in config.about.description


@pytest.mark.parametrize("hf, total", [
    # transformers 5.24 Qwen2_5_VLForConditionalGeneration / Qwen3VLForConditionalGeneration on the meta device,
    # the parameters outside model.visual (the language model and its untied lm_head); the same shapes as
    # Qwen2.5-7B's and Qwen3-8B's, whose presets count 7,615,616,512 and 8,190,735,360 as well
    (QWEN25_VL_7B, 7_615_616_512), (QWEN3_VL_8B, 8_190_735_360),
])
def test_qwen_vl_configs_count_their_language_model(tmp_path: Path, hf: dict, total: int) -> None:
    config = load_config(write_json(tmp_path, hf))
    assert count_parameters(config).total == total
    assert config.block.rope and config.block.rope_scaling is None  # M-RoPE on text alone: plain RoPE
    assert any("not counted or run" in note for note in config.notes)


def test_qwen_vl_flat_and_nested_layouts_read_alike(tmp_path: Path) -> None:
    """transformers 4's flat Qwen2.5-VL config and the same model with its language model under text_config
    (as transformers 5 saves it) are one model; either level's tie_word_embeddings true ties the head."""
    text = {k: v for k, v in QWEN25_VL_7B.items() if k not in (
        "vision_config", "image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id",
        "vision_token_id", "model_type", "tie_word_embeddings", "architectures", "transformers_version")}
    nested = {k: QWEN25_VL_7B[k] for k in ("vision_config", "image_token_id", "model_type")}
    flat, inner = (load_config(write_json(tmp_path, data, name)) for data, name in (
        (QWEN25_VL_7B, "flat.json"), ({**nested, "text_config": {**text, "model_type": "qwen2_5_vl_text"}}, "n.json")))
    assert asdict(flat.block) == asdict(inner.block) and asdict(flat.model) == asdict(inner.model)
    for top, own in ((True, None), (False, True), (None, True)):
        data = {**nested, "text_config": {**text, **({} if own is None else {"tie_word_embeddings": own})},
                **({} if top is None else {"tie_word_embeddings": top})}
        assert load_config(write_json(tmp_path, data)).model.tie_embeddings
    assert not load_config(write_json(tmp_path, {**QWEN25_VL_7B, "tie_word_embeddings": False})).model.tie_embeddings


# adept/fuyu-8b's config.json as transformers 4 wrote it: flat, the language model's fields beside the vision side's
FUYU_8B = {"architectures": ["FuyuForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "relu2",
           "hidden_dropout": 0.0, "hidden_size": 4096, "image_size": 300, "initializer_range": 0.02,
           "intermediate_size": 16384, "layer_norm_eps": 1e-05, "max_position_embeddings": 16384, "model_type": "fuyu",
           "num_attention_heads": 64, "num_channels": 3, "num_hidden_layers": 36, "partial_rotary_factor": 0.5,
           "patch_size": 30, "qk_layernorm": True, "rope_scaling": None, "rope_theta": 25000.0,
           "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.35.0.dev0",
           "use_cache": True, "vocab_size": 262144}


def test_fuyu_flat_and_nested_layouts_read_alike(tmp_path: Path) -> None:
    """FuyuConfig hands a flat config's size fields (and rope_theta) to its Persimmon language model, which rotates
    half of each head: the same model as its nested form. 9,397,175,296: FuyuForCausalLM's meta-device total for
    these shapes (the census's, 9,408,238,592) less vision_embed_tokens, 30·30·3 · 4096 + 4096."""
    moved = {k: v for k, v in FUYU_8B.items() if k in ("hidden_size", "num_attention_heads", "num_hidden_layers",
                                                       "intermediate_size", "vocab_size", "max_position_embeddings",
                                                       "hidden_act", "layer_norm_eps", "qk_layernorm")}
    nested = {"model_type": "fuyu", "patch_size": 30, "num_channels": 3, "image_size": 300,
              "tie_word_embeddings": False, "text_config": {**moved, "model_type": "persimmon", "rope_parameters": {
                  "rope_type": "default", "rope_theta": 25000.0, "partial_rotary_factor": 0.5}}}
    flat, inner = (load_config(write_json(tmp_path, data, name)) for data, name in ((FUYU_8B, "flat.json"),
                                                                                  (nested, "nested.json")))
    assert asdict(flat.block) == asdict(inner.block) and asdict(flat.model) == asdict(inner.model)
    assert count_parameters(flat).total == 9_408_238_592 - (30 * 30 * 3 * 4096 + 4096) == 9_397_175_296
    assert any("not counted or run" in note for note in flat.notes)
    # a flat partial_rotary_factor stays at the top level, where FuyuConfig never reads it: refused unless 0.5
    message = hf_error(write_json(tmp_path, {**FUYU_8B, "partial_rotary_factor": 0.25}, "a.json"))
    assert "field 'partial_rotary_factor' = 0.25 cannot be represented" in message
    # text_config's own is the language model's
    quarter = {**nested, "text_config": {**nested["text_config"], "rope_parameters": {
        "rope_type": "default", "rope_theta": 25000.0, "partial_rotary_factor": 0.25}}}
    assert load_config(write_json(tmp_path, quarter, "b.json")).block.rope == 0.25
    # a field of the language model FuyuConfig does not move is refused at the top level, naming it
    assert "'num_key_value_heads'" in hf_error(write_json(tmp_path, {**FUYU_8B, "num_key_value_heads": 8}, "c.json"))


def test_qwen3_vl_moe_counts_its_language_model(tmp_path: Path) -> None:
    """transformers 5.24 Qwen3VLMoeForConditionalGeneration on the meta device, outside model.visual:
    30,532,122,624, the shapes and count of Qwen3-30B-A3B (its preset), 3,353,032,704 of them active."""
    result = count_parameters(load_config(write_json(tmp_path, QWEN3_VL_30B_A3B)))
    assert (result.total, result.active_total) == (30_532_122_624, 3_353_032_704)
    text = QWEN3_VL_30B_A3B["text_config"]
    # fields Qwen3VLMoeTextConfig never reads: the same model, with a note
    unread = load_config(write_json(tmp_path, {**QWEN3_VL_30B_A3B, "text_config": {
        **text, "norm_topk_prob": False, "sliding_window": 4096}}, "a.json"))
    assert count_parameters(unread).total == 30_532_122_624 and unread.block.moe.renormalize
    assert "norm_topk_prob False is not read" in unread.about.description
    # Qwen3VLMoeTextConfig's default is 16 K/V heads: 32 query heads of 128, so K and V are 2·16·128 wide
    default_kv = load_config(write_json(tmp_path, {**QWEN3_VL_30B_A3B, "text_config": {
        k: v for k, v in text.items() if k != "num_key_value_heads"}}, "b.json"))
    assert count_parameters(default_kv).total - 30_532_122_624 == 48 * 2 * 2048 * (16 - 4) * 128
    for key in ("num_experts", "moe_intermediate_size", "decoder_sparse_step", "rope_theta"):
        nulled = {**QWEN3_VL_30B_A3B, "text_config": {**text, key: None}}
        assert f"field '{key}': expected a" in hf_error(write_json(tmp_path, nulled, "c.json"))
    nested_null = {**QWEN3_VL_30B_A3B, "text_config": {**text, "rope_scaling": {**text["rope_scaling"], "rope_theta": None}}}
    assert "field 'rope_scaling.rope_theta'" in hf_error(write_json(tmp_path, nested_null, "d.json"))
    assert "field 'tie_word_embeddings': expected a value" in hf_error(
        write_json(tmp_path, {**QWEN3_VL_30B_A3B, "tie_word_embeddings": None}, "e.json"))


def test_qwen3_vl_ties_by_the_top_level_only(tmp_path: Path) -> None:
    """Qwen3VLConfig, unlike Qwen2-VL's classes, never copies text_config's tie_word_embeddings up, and
    transformers ties by the top level's: tied, the head's V·d = 151,936·4,096 are counted once."""
    text_tied = {**QWEN3_VL_8B, "text_config": {**QWEN3_VL_8B["text_config"], "tie_word_embeddings": True}}
    assert not load_config(write_json(tmp_path, text_tied, "a.json")).model.tie_embeddings
    top_tied = {**QWEN3_VL_8B, "tie_word_embeddings": True}
    assert count_parameters(load_config(write_json(tmp_path, top_tied, "b.json"))).total == \
        8_190_735_360 - 151_936 * 4_096


def test_qwen_vl_configs_of_transformers_4_52_hold_the_text_fields_at_both_levels(tmp_path: Path) -> None:
    """transformers 4.52-4.56 saved Qwen2.5-VL with the text fields at the top level and in text_config, whose
    copy also carries the vision side's token ids (image_token_id null): transformers reads text_config."""
    text = {k: v for k, v in QWEN25_VL_7B.items() if k not in ("vision_config", "model_type", "architectures")}
    both = {**QWEN25_VL_7B, "text_config": {**text, "model_type": "qwen2_5_vl_text", "image_token_id": None}}
    assert count_parameters(load_config(write_json(tmp_path, both, "a.json"))).total == 7_615_616_512
    differing = {**both, "num_hidden_layers": 27}
    assert "field 'num_hidden_layers' = 27 cannot be represented" in hf_error(write_json(tmp_path, differing, "b.json"))


def test_qwen_vl_windows_sections_and_heads_as_transformers_reads_them(tmp_path: Path) -> None:
    """A null sliding_window leaves every layer full even with use_sliding_window (Qwen2VLTextConfig's
    layer_types); Qwen3-VL's interleaved sections need not add up to d_h / 2, nor be given at all."""
    windowless = load_config(write_json(tmp_path, {**QWEN25_VL_7B, "use_sliding_window": True,
                                                   "sliding_window": None}, "a.json"))
    assert windowless.block.sliding_window == 0 and not windowless.layers_differ
    for rope in ({"rope_type": "default", "mrope_section": [2, 2, 2], "mrope_interleaved": True},
                 {"rope_type": "default", "mrope_interleaved": True}):
        data = {**QWEN3_VL_8B, "text_config": {**QWEN3_VL_8B["text_config"], "rope_scaling": rope}}
        assert count_parameters(load_config(write_json(tmp_path, data, "b.json"))).total == 8_190_735_360


@pytest.mark.parametrize("hf, changes, message", [
    (QWEN25_VL_7B, {"hidden_size": 3580, "head_dim": 128}, "does not divide 'hidden_size' = 3580"),
    (QWEN25_VL_7B, {"rope_theta": None}, "field 'rope_theta': expected a number"),
    (QWEN3_VL_8B, {"text_config": {**QWEN3_VL_8B["text_config"], "tie_word_embeddings": "yes"}},
     "field 'tie_word_embeddings': expected true or false"),
    (QWEN25_VL_7B, {"rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 16]}},
     "field 'rope_scaling.mrope_section' = [16, 24, 16] cannot be represented in blockcli's schema (its sections add "
     "up to 56 rotary pairs, but a head of 128 has 64)"),
    (QWEN25_VL_7B, {"rope_scaling": {"type": "mrope", "mrope_section": "16,24,24"}}, "rope_scaling.mrope_section"),
    (QWEN25_VL_7B, {"head_dim": 64}, "field 'head_dim' = 64 cannot be represented"),
    (QWEN25_VL_7B, {"text_config": "none"}, "field 'text_config'"),
    (QWEN3_VL_8B, {"text_config": {**QWEN3_VL_8B["text_config"], "rope_scaling": {
        "rope_type": "default", "mrope_section": [24, 20, 20], "mrope_interleaved": "yes"}}},
     "rope_scaling.mrope_interleaved"),
    (QWEN3_VL_8B, {"text_config": {**QWEN3_VL_8B["text_config"], "model_type": "qwen3"}}, "expected to be 'qwen3_vl_text'"),
])
def test_qwen_vl_fields_it_cannot_represent_are_one_line_errors(tmp_path: Path, hf: dict, changes: dict,
                                                                 message: str) -> None:
    assert message in hf_error(write_json(tmp_path, with_fields(hf, **changes)))


# --------------------------------------------------------------------------- fuzz: the newer families too

NEWER = [GEMMA3_4B, MISTRAL_SMALL_31, SMOLLM3_3B, GLM45_AIR, COMMAND_R7B, OLMO3_7B, EXAONE4_32B, MINISTRAL, GPT_OSS_20B,
         QWEN25_VL_7B, QWEN3_VL_8B, QWEN3_VL_30B_A3B]
NEWER_KEYS = sorted({k for base in NEWER for k in base} | {"rope_parameters", "layer_types", "no_rope_layers",
                                                           "sliding_window_pattern", "use_qk_norm", "text_config",
                                                           "swiglu_alpha", "mrope_section"})


@given(base=st.sampled_from(NEWER), key=st.sampled_from(NEWER_KEYS), value=JSON_VALUES,
       nested=st.booleans())
def test_any_value_in_any_field_of_the_newer_families_is_a_config_or_a_one_line_error(base: dict, key: str,
                                                                                       value: Any,
                                                                                       nested: bool) -> None:
    """The same for the families added since, a vision-language config's text_config included."""
    if nested and "text_config" in base:
        data = with_fields(base, text_config=with_fields(base["text_config"], **{key: value}))
    else:
        data = with_fields(base, **{key: value})
    from blockcli.hf import read_hf_text

    try:
        read_hf_text(json.dumps(data), "fuzz.json")  # the whole reading, notes and all
    except ConfigError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("fuzz.json: ")
