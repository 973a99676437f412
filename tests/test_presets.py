"""Packaged model presets: exact parameter totals.

For every preset in blockcli/presets/ four things must agree:

1. a published figure (its source is named on each case below);
2. a hand formula written in this file from the hyperparameters of the model's
   Hugging Face ``config.json`` (transcribed here, not read from blockcli or from
   the YAML);
3. ``blockcli.count.count_parameters(blockcli.config.load_config(name)).total``;
4. ``about.parameters`` in the preset's YAML file.

The reference count is what HF transformers' ``AutoModelForCausalLM`` instantiates
for the config, counting each tensor once: a tied LM head is not counted a second
time, and buffers (causal masks, rotary ``inv_freq``, DeepSeek-V3's ``e_score_correction_bias``) are
not parameters. Every total below was also reproduced by instantiating the configs on the meta device
with transformers 5.24 (``sum(p.numel() for p in model.parameters())``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

PRESET_DIR = Path(__file__).resolve().parents[1] / "blockcli" / "presets"


# --------------------------------------------------------------------------
# Hand formulas, one per architecture family, written from the HF modeling code.
# d = hidden size, L = layers, V = vocab rows, ff = MLP inner size.
# --------------------------------------------------------------------------


def linear(n_in: int, n_out: int, bias: bool) -> int:
    return n_in * n_out + (n_out if bias else 0)


def gpt2_total(*, d: int, L: int, V: int, n_pos: int) -> int:
    """GPT2LMHeadModel: wte + wpe, pre-LN blocks with biases everywhere, ln_f, head tied to wte."""
    block = (
        2 * d                      # ln_1 (weight, bias)
        + linear(d, 3 * d, True)   # attn.c_attn (fused q, k, v)
        + linear(d, d, True)       # attn.c_proj
        + 2 * d                    # ln_2
        + linear(d, 4 * d, True)   # mlp.c_fc (n_inner = 4d)
        + linear(4 * d, d, True)   # mlp.c_proj
    )
    return V * d + n_pos * d + L * block + 2 * d  # + ln_f; lm_head shares wte


def opt_total(*, d: int, L: int, V: int, ff: int, n_pos: int, pos_offset: int) -> int:
    """OPTForCausalLM (do_layer_norm_before, word_embed_proj_dim == d): tied head."""
    block = (
        4 * linear(d, d, True)     # q_proj, k_proj, v_proj, out_proj
        + 2 * d                    # self_attn_layer_norm
        + linear(d, ff, True)      # fc1
        + linear(ff, d, True)      # fc2
        + 2 * d                    # final_layer_norm (per block)
    )
    return V * d + (n_pos + pos_offset) * d + L * block + 2 * d  # + decoder.final_layer_norm


def opt_350m_total(*, d: int, e: int, L: int, V: int, ff: int, n_pos: int, pos_offset: int) -> int:
    """OPTForCausalLM with do_layer_norm_before false and word_embed_proj_dim e != d: embed_tokens (V, e),
    embed_positions (n_pos + 2, d), project_in (d, e) and project_out (e, d) nn.Linear without bias, the same
    blocks as opt_total, no decoder.final_layer_norm; lm_head (e -> V) tied to embed_tokens."""
    block = 4 * linear(d, d, True) + 2 * d + linear(d, ff, True) + linear(ff, d, True) + 2 * d
    return V * e + (n_pos + pos_offset) * d + 2 * e * d + L * block


def neox_total(*, d: int, L: int, V: int, ff: int) -> int:
    """GPTNeoXForCausalLM: biases everywhere, two LayerNorms per block, untied embed_out without bias."""
    block = (
        2 * d + 2 * d              # input_layernorm, post_attention_layernorm
        + linear(d, 3 * d, True)   # attention.query_key_value
        + linear(d, d, True)       # attention.dense
        + linear(d, ff, True)      # mlp.dense_h_to_4h
        + linear(ff, d, True)      # mlp.dense_4h_to_h
    )
    return V * d + L * block + 2 * d + V * d  # embed_in + blocks + final_layer_norm + embed_out


def gated_rms_total(
    *, d: int, L: int, V: int, ff: int, n_heads: int, n_kv: int, head_dim: int,
    tied: bool, qkv_bias: bool = False,
) -> int:
    """Llama / Mistral / Qwen2 / Gemma: RMSNorm (weight only), gated 3-matrix MLP, no MLP/out biases."""
    q, kv = n_heads * head_dim, n_kv * head_dim
    block = (
        linear(d, q, qkv_bias)     # q_proj
        + 2 * linear(d, kv, qkv_bias)  # k_proj, v_proj
        + linear(q, d, False)      # o_proj
        + 3 * d * ff               # gate_proj, up_proj, down_proj
        + 2 * d                    # input_layernorm, post_attention_layernorm
    )
    head = 0 if tied else V * d
    return V * d + L * block + d + head  # embed_tokens + blocks + final norm + lm_head


def moe_total(*, d: int, L: int, V: int, n_heads: int, n_kv: int, head_dim: int, experts: int, d_expert: int,
              qk_norm: bool = False, used: int | None = None) -> int:
    """MixtralForCausalLM / Qwen3MoeForCausalLM: Llama's attention (no biases), the router gate (E, d) and
    E SwiGLU experts of 3·d·d_e in every layer, untied head. `used`: only that many experts per layer
    (the active parameters of one token: the router, embeddings and LM head all count)."""
    q, kv = n_heads * head_dim, n_kv * head_dim
    block = (
        d * q + 2 * d * kv + q * d  # q_proj, k_proj, v_proj, o_proj
        + (2 * head_dim if qk_norm else 0)  # q_norm, k_norm (per head)
        + 2 * d  # input_layernorm, post_attention_layernorm
        + d * experts  # the router's gate
        + (experts if used is None else used) * 3 * d * d_expert  # w1/w3/w2 (gate/up/down) of each expert
    )
    return V * d + L * block + d + V * d  # embed_tokens + blocks + final norm + lm_head
def deepseek_total(
    *, d: int, L: int, V: int, ff: int, n_heads: int, q_rank: int, kv_rank: int, d_nope: int, d_rope: int,
    d_v: int, dense: int, E: int, d_e: int, shared: int, experts_used: int | None = None,
) -> int:
    """DeepseekV2/V3ForCausalLM: latent attention (q_proj, or q_a_proj + q_a_layernorm + q_b_proj;
    kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj; no biases), two RMSNorms; layers 0..dense-1
    a SwiGLU MLP of ff, the others a router gate (E, d), E experts and `shared` experts of d_e fused into
    one MLP. `experts_used`: count only that many routed experts per layer (the active parameters of a
    token; embeddings and LM head included). The router's e_score_correction_bias is a buffer."""
    qk = d_nope + d_rope
    q = d * n_heads * qk if not q_rank else d * q_rank + q_rank + q_rank * n_heads * qk
    attention = q + d * (kv_rank + d_rope) + kv_rank + kv_rank * n_heads * (d_nope + d_v) + n_heads * d_v * d
    routed = E if experts_used is None else experts_used
    expert_mlp = d * E + routed * 3 * d * d_e + 3 * d * shared * d_e  # gate, routed experts, shared_experts
    layers = L * (attention + 2 * d) + dense * 3 * d * ff + (L - dense) * expert_mlp
    return V * d + layers + d + V * d  # embed_tokens + layers + norm + lm_head (untied)


DEEPSEEK_V3 = dict(d=7168, L=61, V=129280, ff=18432, n_heads=128, q_rank=1536, kv_rank=512, d_nope=128, d_rope=64,
                   d_v=128, dense=3, E=256, d_e=2048, shared=1)  # deepseek-ai/DeepSeek-V3 config.json, top-8
DEEPSEEK_V2_LITE = dict(d=2048, L=27, V=102400, ff=10944, n_heads=16, q_rank=0, kv_rank=512, d_nope=128, d_rope=64,
                        d_v=128, dense=1, E=64, d_e=1408, shared=2)  # deepseek-ai/DeepSeek-V2-Lite config.json, top-6


def starcoder2_total(*, d: int, L: int, V: int, ff: int, n_heads: int, n_kv: int, head_dim: int) -> int:
    """Starcoder2ForCausalLM: biases on every linear layer, two LayerNorms (weight, bias), plain MLP, tied head."""
    q, kv = n_heads * head_dim, n_kv * head_dim
    block = (
        linear(d, q, True) + 2 * linear(d, kv, True) + linear(q, d, True)  # q, k, v, o_proj
        + linear(d, ff, True) + linear(ff, d, True)  # mlp.c_fc, mlp.c_proj
        + 2 * 2 * d  # input_layernorm, post_attention_layernorm
    )
    return V * d + L * block + 2 * d  # embed_tokens + blocks + norm; lm_head shares embed_tokens


def parallel_shared_total(*, d: int, L: int, V: int, ff: int, qkv_bias: bool) -> int:
    """GPTJForCausalLM / PhiForCausalLM: ONE LayerNorm per block (ln_1 / input_layernorm) read by
    attention and MLP alike, fc_in/fc1 and fc_out/fc2 with biases, q/k/v/out biases in Phi only,
    final LayerNorm, untied lm_head nn.Linear(d, V) with its bias."""
    block = (
        2 * d                          # ln_1 / input_layernorm (weight, bias); no second norm
        + 4 * linear(d, d, qkv_bias)   # q_proj, k_proj, v_proj, out_proj / dense
        + linear(d, ff, True)          # fc_in / fc1
        + linear(ff, d, True)          # fc_out / fc2
    )
    return V * d + L * block + 2 * d + linear(d, V, True)  # wte + blocks + ln_f + lm_head (with bias)


def cohere_total(*, d: int, L: int, V: int, ff: int, n_heads: int, n_kv: int, head_dim: int) -> int:
    """CohereForCausalLM: ONE CohereLayerNorm per block (weight only, no bias) read by attention and
    the MLP side by side, bias-free q/k/v/o and gate/up/down, final norm, head tied to embed_tokens."""
    q, kv = n_heads * head_dim, n_kv * head_dim
    block = (
        d                              # input_layernorm (weight only)
        + d * q + 2 * d * kv + q * d   # q_proj, k_proj, v_proj, o_proj
        + 3 * d * ff                   # gate_proj, up_proj, down_proj
    )
    return V * d + L * block + d  # embed_tokens + blocks + norm; lm_head shares embed_tokens


def stablelm_total(*, d: int, L: int, V: int, ff: int, qkv_bias: bool) -> int:
    """StableLmForCausalLM (use_parallel_residual false): two nn.LayerNorms per block (weight and bias),
    q/k/v with biases if use_qkv_bias, o_proj and gate/up/down without, final LayerNorm, untied lm_head."""
    block = (
        2 * 2 * d                      # input_layernorm, post_attention_layernorm (weight, bias)
        + 3 * linear(d, d, qkv_bias)   # q_proj, k_proj, v_proj (32 K/V heads of 64: d wide)
        + linear(d, d, False)          # o_proj
        + 3 * d * ff                   # gate_proj, up_proj, down_proj
    )
    return V * d + L * block + 2 * d + V * d  # embed_tokens + blocks + norm + lm_head


def phi3_total(*, d: int, L: int, V: int, ff: int, n_heads: int, n_kv: int, head_dim: int) -> int:
    """Phi3ForCausalLM: Llama's block with fused matrices and no biases; RMSNorm weights only, untied head."""
    q, kv = n_heads * head_dim, n_kv * head_dim
    block = (
        d * (q + 2 * kv)   # self_attn.qkv_proj: Q | K | V rows
        + q * d            # self_attn.o_proj
        + d * 2 * ff       # mlp.gate_up_proj: gate | up rows
        + ff * d           # mlp.down_proj
        + 2 * d            # input_layernorm, post_attention_layernorm
    )
    return V * d + L * block + d + V * d  # embed_tokens + blocks + norm + lm_head


def gpt_bigcode_total(*, d: int, L: int, V: int, ff: int, n_heads: int, n_pos: int) -> int:
    """GPTBigCodeForCausalLM, multi-query: c_attn's rows Q (d) | K | V (one head each), biases and LayerNorm
    shifts everywhere, learned positions, tied head."""
    head_dim = d // n_heads
    block = (
        linear(d, d + 2 * head_dim, True)  # attn.c_attn
        + linear(d, d, True)               # attn.c_proj
        + linear(d, ff, True) + linear(ff, d, True)  # mlp.c_fc, mlp.c_proj
        + 2 * 2 * d                        # ln_1, ln_2
    )
    return V * d + n_pos * d + L * block + 2 * d  # wte + wpe + blocks + ln_f; lm_head shares wte


def olmo_total(*, d: int, L: int, V: int, ff: int) -> int:
    """OlmoForCausalLM: Llama's block without biases, but OlmoLayerNorm holds no weight and no bias, so the two
    block norms and the final norm add nothing; lm_head tied to embed_tokens (OLMo-1B)."""
    attn = 4 * d * d  # q, k, v, o (MHA, attention_bias false)
    mlp = 3 * d * ff  # gate, up, down
    return V * d + L * (attn + mlp)  # embed_tokens + blocks; no norm parameters anywhere


def bloom_total(*, d: int, L: int, V: int) -> int:
    """BloomForCausalLM: word_embeddings + word_embeddings_layernorm (weight, bias), pre-LN blocks with biases
    everywhere (query_key_value 3·d wide, dense, dense_h_to_4h / dense_4h_to_h at 4·d), ln_f; ALiBi has no
    parameters; lm_head tied to word_embeddings."""
    attn = linear(d, 3 * d, True) + linear(d, d, True)
    mlp = linear(d, 4 * d, True) + linear(4 * d, d, True)
    block = 2 * d + attn + 2 * d + mlp  # input_layernorm, attention, post_attention_layernorm, MLP
    return V * d + 2 * d + L * block + 2 * d


def falcon_7b_total(*, d: int, L: int, V: int, n_heads: int) -> int:
    """FalconForCausalLM, Falcon-7B's block: one LayerNorm (weight, bias) per block shared by parallel
    attention and MLP, multi-query query_key_value (Q | one K head | one V head), no linear biases, MLP 4d,
    tied head."""
    head_dim = d // n_heads
    block = (
        2 * d                      # input_layernorm
        + d * (d + 2 * head_dim)   # self_attention.query_key_value
        + d * d                    # self_attention.dense
        + d * 4 * d + 4 * d * d    # mlp.dense_h_to_4h, mlp.dense_4h_to_h
    )
    return V * d + L * block + 2 * d  # word_embeddings + blocks + ln_f; lm_head shares word_embeddings


def gpt_oss_total(*, d: int, L: int, V: int, h: int, kv: int, d_h: int, E: int, d_e: int, used: int | None = None) -> int:
    """GptOssForCausalLM: q/k/v/o with biases and a sink logit per head; router (E, d) with an E-wide bias; E
    experts each gate_up_proj (d, 2·d_e) + its bias (2·d_e) and down_proj (d_e, d) + its bias (d); two RMSNorm
    weights per layer, the final norm, an untied lm_head. `used`: only that many experts (what a token uses)."""
    attn = linear(d, h * d_h, True) + 2 * linear(d, kv * d_h, True) + linear(h * d_h, d, True) + h
    expert = d * 2 * d_e + 2 * d_e + d_e * d + d
    mlp = linear(d, E, True) + (E if used is None else used) * expert
    return V * d + L * (attn + mlp + 2 * d) + d + d * V


# --------------------------------------------------------------------------
# The cases. Hyperparameters are those of each model's HF config.json.
# --------------------------------------------------------------------------

# Hand totals shared by two presets each: a text model and the vision-language model built on its shapes
QWEN25_7B_HAND = gated_rms_total(d=3584, L=28, V=152064, ff=18944, n_heads=28, n_kv=4, head_dim=128, tied=False,
                                 qkv_bias=True)
QWEN3_8B_HAND = gated_rms_total(d=4096, L=36, V=151936, ff=12288, n_heads=32, n_kv=8, head_dim=128, tied=False) \
    + 36 * 2 * 128  # q_norm and k_norm: one RMSNorm weight of head_dim each per layer
QWEN3_30B_A3B_HAND = moe_total(d=2048, L=48, V=151936, n_heads=32, n_kv=4, head_dim=128, experts=128, d_expert=768,
                               qk_norm=True)

CASES = [
    # the language models of vision-language presets: transformers 5.24 on the meta device, the parameters
    # outside model.visual (Qwen2_5_VLForConditionalGeneration, Qwen3VLForConditionalGeneration,
    # Qwen3VLMoeForConditionalGeneration from each hub config.json)
    pytest.param(
        "qwen2.5-vl-7b", 7_615_616_512,
        QWEN25_7B_HAND,
        {"d_model": 3584, "n_heads": 28, "n_kv_heads": 4, "d_ff": 18944, "n_layers": 28, "vocab_size": 152064},
        id="qwen2.5-vl-7b[transformers Qwen2_5_VLForConditionalGeneration without model.visual on meta=7615616512]",
    ),
    pytest.param(
        "qwen3-vl-8b", 8_190_735_360,
        QWEN3_8B_HAND,
        {"d_model": 4096, "n_heads": 32, "n_kv_heads": 8, "head_dim": 128, "d_ff": 12288, "n_layers": 36,
         "vocab_size": 151936},
        id="qwen3-vl-8b[transformers Qwen3VLForConditionalGeneration without model.visual on meta=8190735360]",
    ),
    pytest.param(
        "qwen3-vl-30b-a3b", 30_532_122_624,
        QWEN3_30B_A3B_HAND,
        {"d_model": 2048, "n_heads": 32, "n_kv_heads": 4, "n_layers": 48, "vocab_size": 151936},
        id="qwen3-vl-30b-a3b[transformers Qwen3VLMoeForConditionalGeneration without model.visual on meta=30532122624]",
    ),
    pytest.param(
        "gpt-oss-20b", 20_914_757_184,
        gpt_oss_total(d=2880, L=24, V=201088, h=64, kv=8, d_h=64, E=32, d_e=2880),
        {"d_model": 2880, "n_heads": 64, "n_kv_heads": 8, "n_layers": 24, "vocab_size": 201088},
        # transformers 5.24 GptOssForCausalLM on the meta device from
        # https://huggingface.co/openai/gpt-oss-20b/blob/main/config.json (sum of numel, the MXFP4 experts as the
        # dequantized parameters they load into); "20.91B" total in OpenAI's gpt-oss model card
        id="gpt-oss-20b[transformers GptOssForCausalLM on meta=20914757184]",
    ),
    pytest.param(
        "gpt-oss-120b", 116_829_156_672,
        gpt_oss_total(d=2880, L=36, V=201088, h=64, kv=8, d_h=64, E=128, d_e=2880),
        {"d_model": 2880, "n_heads": 64, "n_kv_heads": 8, "n_layers": 36, "vocab_size": 201088},
        # the same for https://huggingface.co/openai/gpt-oss-120b/blob/main/config.json; "116.83B" in the card
        id="gpt-oss-120b[transformers GptOssForCausalLM on meta=116829156672]",
    ),
    pytest.param(
        "mixtral-8x7b", 46_702_792_704,
        moe_total(d=4096, L=32, V=32000, n_heads=32, n_kv=8, head_dim=128, experts=8, d_expert=14336),
        {"d_model": 4096, "n_heads": 32, "n_kv_heads": 8, "n_layers": 32, "vocab_size": 32000},
        # transformers 5.24 MixtralForCausalLM instantiated on the meta device from
        # https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json (sum of numel); "46.7B" in
        # Mistral AI's announcement
        id="mixtral-8x7b[transformers MixtralForCausalLM on meta=46702792704]",
    ),
    pytest.param(
        "qwen3-30b-a3b", 30_532_122_624,
        QWEN3_30B_A3B_HAND,
        {"d_model": 2048, "n_heads": 32, "n_kv_heads": 4, "n_layers": 48, "vocab_size": 151936},
        # transformers 5.24 Qwen3MoeForCausalLM instantiated on the meta device from
        # https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json (sum of numel); "30.5B" on the model card
        id="qwen3-30b-a3b[transformers Qwen3MoeForCausalLM on meta=30532122624]",
    ),
    pytest.param(
        "gpt2", 124_439_808,
        gpt2_total(d=768, L=12, V=50257, n_pos=1024),
        {"d_model": 768, "n_heads": 12, "d_ff": 3072, "n_layers": 12, "vocab_size": 50257},
        # KerasHub gpt2_presets.py "gpt2_base_en" params (keras-team/keras-hub).
        # The HF Hub API's safetensors total for openai-community/gpt2 is 137,022,720: the
        # checkpoint also stores 12 attn.bias causal-mask buffers of 1024*1024 (12,582,912).
        id="gpt2[KerasHub gpt2_base_en=124439808]",
    ),
    pytest.param(
        "gpt2-medium", 354_823_168,
        gpt2_total(d=1024, L=24, V=50257, n_pos=1024),
        {"d_model": 1024, "n_heads": 16, "d_ff": 4096, "n_layers": 24, "vocab_size": 50257},
        # KerasHub gpt2_presets.py "gpt2_medium_en" params.
        id="gpt2-medium[KerasHub gpt2_medium_en=354823168]",
    ),
    pytest.param(
        "gpt2-large", 774_030_080,
        gpt2_total(d=1280, L=36, V=50257, n_pos=1024),
        {"d_model": 1280, "n_heads": 20, "d_ff": 5120, "n_layers": 36, "vocab_size": 50257},
        # KerasHub gpt2_presets.py "gpt2_large_en" params.
        id="gpt2-large[KerasHub gpt2_large_en=774030080]",
    ),
    pytest.param(
        "gpt2-xl", 1_557_611_200,
        gpt2_total(d=1600, L=48, V=50257, n_pos=1024),
        {"d_model": 1600, "n_heads": 25, "d_ff": 6400, "n_layers": 48, "vocab_size": 50257},
        # KerasHub gpt2_presets.py "gpt2_extra_large_en" params.
        id="gpt2-xl[KerasHub gpt2_extra_large_en=1557611200]",
    ),
    pytest.param(
        "opt-125m", 125_239_296,
        opt_total(d=768, L=12, V=50272, ff=3072, n_pos=2048, pos_offset=2),
        {"d_model": 768, "n_heads": 12, "d_ff": 3072, "n_layers": 12, "vocab_size": 50272,
         "max_positions": 2048, "position_offset": 2},
        # AMD Quark LLM depth-wise pruning tutorial: "the original model has 125239296
        # parameters" (facebook/opt-125m, HF OPTForCausalLM). KerasHub's opt_125m_en says
        # 125,237,760 = this minus 2*768: its position table has no +2 offset rows.
        id="opt-125m[AMD Quark tutorial=125239296]",
    ),
    pytest.param(
        "pythia-160m", 162_322_944,
        neox_total(d=768, L=12, V=50304, ff=3072),
        {"d_model": 768, "n_heads": 12, "d_ff": 3072, "n_layers": 12, "vocab_size": 50304},
        # EleutherAI Pythia model card / README: 85,056,000 non-embedding parameters for 160M,
        # plus untied embed_in and embed_out of 50304*768 each = 162,322,944.
        id="pythia-160m[EleutherAI card 85056000 non-emb + 2x50304x768]",
    ),
    pytest.param(
        "llama-2-7b", 6_738_415_616,
        gated_rms_total(d=4096, L=32, V=32000, ff=11008, n_heads=32, n_kv=32, head_dim=128, tied=False),
        {"d_model": 4096, "n_heads": 32, "d_ff": 11008, "n_layers": 32, "vocab_size": 32000},
        # KerasHub llama_presets.py "llama2_7b_en" params; HF Hub API safetensors for
        # meta-llama/Llama-2-7b-hf: F16 6,738,415,616 (+ F32 2,048 = 32 stored inv_freq buffers).
        id="llama-2-7b[KerasHub llama2_7b_en / HF safetensors F16=6738415616]",
    ),
    pytest.param(
        "llama-2-13b", 13_015_864_320,
        gated_rms_total(d=5120, L=40, V=32000, ff=13824, n_heads=40, n_kv=40, head_dim=128, tied=False),
        {"d_model": 5120, "n_heads": 40, "d_ff": 13824, "n_layers": 40, "vocab_size": 32000},
        # HF Hub safetensors BF16 count of cais/HarmBench-Llama-2-13b-cls, a Llama-2-13b fine-tune
        # with identical shapes (quoted in public repos); no first-party exact figure was found.
        id="llama-2-13b[HF safetensors of a Llama-2-13b fine-tune=13015864320]",
    ),
    pytest.param(
        "llama-2-70b", 68_976_648_192,
        gated_rms_total(d=8192, L=80, V=32000, ff=28672, n_heads=64, n_kv=8, head_dim=128, tied=False),
        {"d_model": 8192, "n_heads": 64, "n_kv_heads": 8, "d_ff": 28672, "n_layers": 80, "vocab_size": 32000},
        # Together AI fine-tuning client's parameter table: "togethercomputer/llama-2-70b": 68976648192.
        id="llama-2-70b[Together AI client table=68976648192]",
    ),
    pytest.param(
        "llama-3-8b", 8_030_261_248,
        gated_rms_total(d=4096, L=32, V=128256, ff=14336, n_heads=32, n_kv=8, head_dim=128, tied=False),
        {"d_model": 4096, "n_heads": 32, "n_kv_heads": 8, "d_ff": 14336, "n_layers": 32, "vocab_size": 128256},
        # HF Hub API safetensors for meta-llama/Meta-Llama-3-8B: BF16 8,030,261,248.
        id="llama-3-8b[HF safetensors BF16=8030261248]",
    ),
    pytest.param(
        "mistral-7b", 7_241_732_096,
        gated_rms_total(d=4096, L=32, V=32000, ff=14336, n_heads=32, n_kv=8, head_dim=128, tied=False),
        {"d_model": 4096, "n_heads": 32, "n_kv_heads": 8, "d_ff": 14336, "n_layers": 32, "vocab_size": 32000},
        # KerasHub mistral_presets.py "mistral_7b_en" params (Mistral-7B-v0.1).
        id="mistral-7b[KerasHub mistral_7b_en=7241732096]",
    ),
    pytest.param(
        "qwen2-0.5b", 494_032_768,
        gated_rms_total(d=896, L=24, V=151936, ff=4864, n_heads=14, n_kv=2, head_dim=64, tied=True, qkv_bias=True),
        {"d_model": 896, "n_heads": 14, "n_kv_heads": 2, "d_ff": 4864, "n_layers": 24, "vocab_size": 151936},
        # KerasHub qwen_presets.py "qwen2.5_0.5b_en" params and HF Hub safetensors BF16 of
        # Qwen/Qwen2.5-0.5B-Instruct: 494,032,768. Qwen2.5-0.5B has the same shapes as Qwen2-0.5B
        # (its config differs only in max_position_embeddings / sliding_window, which hold no weights).
        id="qwen2-0.5b[KerasHub qwen2.5_0.5b_en (same shapes)=494032768]",
    ),
    pytest.param(
        "gemma-2b", 2_506_172_416,
        gated_rms_total(d=2048, L=18, V=256000, ff=16384, n_heads=8, n_kv=1, head_dim=256, tied=True),
        {"d_model": 2048, "n_heads": 8, "n_kv_heads": 1, "head_dim": 256, "d_ff": 16384, "n_layers": 18,
         "vocab_size": 256000},
        # KerasHub gemma_presets.py "gemma_2b_en" params.
        id="gemma-2b[KerasHub gemma_2b_en=2506172416]",
    ),
    pytest.param(
        "llama-3.1-8b", 8_030_261_248,
        gated_rms_total(d=4096, L=32, V=128256, ff=14336, n_heads=32, n_kv=8, head_dim=128, tied=False),
        {"d_model": 4096, "n_heads": 32, "n_kv_heads": 8, "d_ff": 14336, "n_layers": 32, "vocab_size": 128256},
        # HF Hub API safetensors for meta-llama/Llama-3.1-8B: BF16 8,030,261,248 (the rope_scaling
        # changes frequencies, not shapes: the same total as Llama 3 8B).
        id="llama-3.1-8b[HF safetensors BF16=8030261248]",
    ),
    pytest.param(
        "llama-3.2-1b", 1_235_814_400,
        gated_rms_total(d=2048, L=16, V=128256, ff=8192, n_heads=32, n_kv=8, head_dim=64, tied=True),
        {"d_model": 2048, "n_heads": 32, "n_kv_heads": 8, "head_dim": 64, "d_ff": 8192, "n_layers": 16,
         "vocab_size": 128256},
        # HF Hub API safetensors for meta-llama/Llama-3.2-1B: BF16 1,235,814,400 (tied head).
        id="llama-3.2-1b[HF safetensors BF16=1235814400]",
    ),
    pytest.param(
        "qwen2.5-7b", 7_615_616_512,
        QWEN25_7B_HAND,
        {"d_model": 3584, "n_heads": 28, "n_kv_heads": 4, "d_ff": 18944, "n_layers": 28, "vocab_size": 152064},
        # HF Hub API safetensors for Qwen/Qwen2.5-7B: BF16 7,615,616,512 (the model card's "7.61B").
        id="qwen2.5-7b[HF safetensors BF16=7615616512]",
    ),
    pytest.param(
        "qwen3-8b", 8_190_735_360,
        QWEN3_8B_HAND,
        {"d_model": 4096, "n_heads": 32, "n_kv_heads": 8, "head_dim": 128, "d_ff": 12288, "n_layers": 36,
         "vocab_size": 151936},
        # HF Hub API safetensors for Qwen/Qwen3-8B: BF16 8,190,735,360 (the model card's "8.2B").
        id="qwen3-8b[HF safetensors BF16=8190735360]",
    ),
    pytest.param(
        "starcoder2-7b", 7_173_923_840,
        starcoder2_total(d=4608, L=32, V=49152, ff=18432, n_heads=36, n_kv=4, head_dim=128),
        {"d_model": 4608, "n_heads": 36, "n_kv_heads": 4, "d_ff": 18432, "n_layers": 32, "vocab_size": 49152},
        # HF Hub API safetensors for bigcode/starcoder2-7b: BF16 7,173,923,840 (tied head: the config
        # has no tie_word_embeddings, and Starcoder2Config defaults it to true).
        id="starcoder2-7b[HF safetensors BF16=7173923840]",
    ),
    pytest.param(
        "olmo-2-7b", 7_298_617_344,
        gated_rms_total(d=4096, L=32, V=100352, ff=11008, n_heads=32, n_kv=32, head_dim=128, tied=False)
        + 32 * 2 * 4096,  # q_norm (h·d_h) and k_norm (h_kv·d_h) over the whole projection, per layer
        {"d_model": 4096, "n_heads": 32, "n_kv_heads": 32, "d_ff": 11008, "n_layers": 32, "vocab_size": 100352},
        # HF Hub API safetensors for allenai/OLMo-2-1124-7B: F32 7,298,617,344 (the model card's "7.30B").
        id="olmo-2-7b[HF safetensors F32=7298617344]",
    ),
    pytest.param(
        "gpt-j-6b", 6_050_882_784,
        parallel_shared_total(d=4096, L=28, V=50400, ff=4 * 4096, qkv_bias=False),
        {"d_model": 4096, "n_heads": 16, "head_dim": 256, "d_ff": 16384, "n_layers": 28, "vocab_size": 50400},
        # transformers 5.24 GPTJForCausalLM instantiated on the meta device from
        # https://huggingface.co/EleutherAI/gpt-j-6b/blob/main/config.json (sum of numel).
        # The mesh-transformer-jax README's "n_parameters 6,053,381,344" is 2,498,560 more: the JAX
        # model's own count, which no reading of the HF architecture reproduces.
        id="gpt-j-6b[transformers GPTJForCausalLM on meta=6050882784]",
    ),
    pytest.param(
        "phi-2", 2_779_683_840,
        parallel_shared_total(d=2560, L=32, V=51200, ff=10240, qkv_bias=True),
        {"d_model": 2560, "n_heads": 32, "head_dim": 80, "d_ff": 10240, "n_layers": 32, "vocab_size": 51200},
        # transformers 5.24 PhiForCausalLM instantiated on the meta device from
        # https://huggingface.co/microsoft/phi-2/blob/main/config.json (sum of numel).
        id="phi-2[transformers PhiForCausalLM on meta=2779683840]",
    ),
    pytest.param(
        "granite-3.1-2b", 2_533_531_648,
        gated_rms_total(d=2048, L=40, V=49155, ff=8192, n_heads=32, n_kv=8, head_dim=64, tied=True),
        {"d_model": 2048, "n_heads": 32, "n_kv_heads": 8, "head_dim": 64, "d_ff": 8192, "n_layers": 40,
         "vocab_size": 49155, "attention_scale": 0.015625, "residual_multiplier": 0.22,
         "embedding_multiplier": 12.0, "logit_multiplier": 1 / 8.0},
        # transformers 5.24 GraniteForCausalLM instantiated on the meta device from
        # https://huggingface.co/ibm-granite/granite-3.1-2b-base/blob/main/config.json (sum of numel).
        # The four multipliers hold no weights: Llama's count with a tied head.
        id="granite-3.1-2b[transformers GraniteForCausalLM on meta=2533531648]",
    ),
    pytest.param(
        "command-r-v01", 34_980_831_232,
        cohere_total(d=8192, L=40, V=256000, ff=22528, n_heads=64, n_kv=64, head_dim=128),
        {"d_model": 8192, "n_heads": 64, "n_kv_heads": 64, "d_ff": 22528, "n_layers": 40, "vocab_size": 256000,
         "placement": "parallel_shared", "rope_layout": "interleaved", "logit_multiplier": 0.0625},
        # transformers 5.24 CohereForCausalLM instantiated on the meta device from
        # https://huggingface.co/CohereForAI/c4ai-command-r-v01/blob/main/config.json (sum of numel;
        # tie_word_embeddings is absent and CohereConfig defaults it to true).
        id="command-r-v01[transformers CohereForCausalLM on meta=34980831232]",
    ),
    pytest.param(
        "stablelm-2-1.6b", 1_644_515_328,
        stablelm_total(d=2048, L=24, V=100352, ff=5632, qkv_bias=True),
        {"d_model": 2048, "n_heads": 32, "n_kv_heads": 32, "d_ff": 5632, "n_layers": 24, "vocab_size": 100352,
         "rope": 0.25, "placement": "pre"},
        # transformers 5.24 StableLmForCausalLM instantiated on the meta device from
        # https://huggingface.co/stabilityai/stablelm-2-1_6b/blob/main/config.json (sum of numel).
        id="stablelm-2-1.6b[transformers StableLmForCausalLM on meta=1644515328]",
    ),
    pytest.param(
        "phi-3-mini-4k", 3_821_079_552,
        phi3_total(d=3072, L=32, V=32064, ff=8192, n_heads=32, n_kv=32, head_dim=96),
        {"d_model": 3072, "n_heads": 32, "n_kv_heads": 32, "d_ff": 8192, "n_layers": 32, "vocab_size": 32064},
        # transformers 5.24 Phi3ForCausalLM instantiated on the meta device from
        # https://huggingface.co/microsoft/Phi-3-mini-4k-instruct/blob/main/config.json (sum of numel); the
        # model card's "3.8B". Phi-3.5-mini-instruct has the same shapes (only its RoPE scaling and context differ).
        id="phi-3-mini-4k[transformers Phi3ForCausalLM on meta=3821079552]",
    ),
    pytest.param(
        "phi-3.5-mini", 3_821_079_552,
        phi3_total(d=3072, L=32, V=32064, ff=8192, n_heads=32, n_kv=32, head_dim=96),
        {"d_model": 3072, "n_heads": 32, "n_kv_heads": 32, "d_ff": 8192, "n_layers": 32, "vocab_size": 32064,
         "max_positions": 131072},
        # transformers 5.24 Phi3ForCausalLM instantiated on the meta device from
        # https://huggingface.co/microsoft/Phi-3.5-mini-instruct/blob/main/config.json (sum of numel): its
        # longrope lists (48 short, 48 long factors) change no shape, so the total is Phi-3-mini's.
        id="phi-3.5-mini[transformers Phi3ForCausalLM on meta=3821079552]",
    ),
    pytest.param(
        "olmo-1b", 1_176_764_416,
        olmo_total(d=2048, L=16, V=50304, ff=8192),
        {"d_model": 2048, "n_heads": 16, "n_kv_heads": 16, "d_ff": 8192, "n_layers": 16, "vocab_size": 50304,
         "norm_scale": False, "bias": False},
        # transformers 5.24 OlmoForCausalLM instantiated on the meta device from
        # https://huggingface.co/allenai/OLMo-1B-hf/blob/main/config.json (sum of numel; tied head); the model
        # card's "1B" (1.18B).
        id="olmo-1b[transformers OlmoForCausalLM on meta=1176764416]",
    ),
    pytest.param(
        "bloom-560m", 559_214_592,
        bloom_total(d=1024, L=24, V=250880),
        {"d_model": 1024, "n_heads": 16, "d_ff": 4096, "n_layers": 24, "vocab_size": 250880, "positions": "alibi",
         "embedding_norm": True},
        # transformers 5.24 BloomForCausalLM instantiated on the meta device from
        # https://huggingface.co/bigscience/bloom-560m/blob/main/config.json (sum of numel; tied head); the model
        # card's "559,214,592 parameters".
        id="bloom-560m[transformers BloomForCausalLM on meta=559214592]",
    ),
    pytest.param(
        "opt-350m", 331_196_416,
        opt_350m_total(d=1024, e=512, L=24, V=50272, ff=4096, n_pos=2048, pos_offset=2),
        {"d_model": 1024, "n_heads": 16, "d_ff": 4096, "n_layers": 24, "vocab_size": 50272, "embedding_dim": 512,
         "placement": "post", "final_norm": False},
        # transformers 5.24 OPTForCausalLM instantiated on the meta device from
        # https://huggingface.co/facebook/opt-350m/blob/main/config.json (sum of numel; tied head); the OPT
        # paper's "350M".
        id="opt-350m[transformers OPTForCausalLM on meta=331196416]",
    ),
    pytest.param(
        "starcoder", 15_517_456_384,
        gpt_bigcode_total(d=6144, L=40, V=49152, ff=24576, n_heads=48, n_pos=8192),
        {"d_model": 6144, "n_heads": 48, "n_kv_heads": 1, "d_ff": 24576, "n_layers": 40, "vocab_size": 49152},
        # transformers 5.24 GPTBigCodeForCausalLM instantiated on the meta device from the sizes of
        # https://huggingface.co/bigcode/starcoder/blob/main/config.json (sum of numel); the paper's "15.5B".
        id="starcoder[transformers GPTBigCodeForCausalLM on meta=15517456384]",
    ),
    pytest.param(
        "falcon-7b", 6_921_720_704,
        falcon_7b_total(d=4544, L=32, V=65024, n_heads=71),
        {"d_model": 4544, "n_heads": 71, "n_kv_heads": 1, "d_ff": 18176, "n_layers": 32, "vocab_size": 65024},
        # transformers 5.24 FalconForCausalLM instantiated on the meta device from
        # https://huggingface.co/tiiuae/falcon-7b/blob/main/config.json (sum of numel); the model card's "7B".
        id="falcon-7b[transformers FalconForCausalLM on meta=6921720704]",
    ),
]

CASES.append(pytest.param(
    "gemma-2-9b", 9_241_705_984,
    # Gemma2ForCausalLM: Gemma's gated block with four RMSNorms (input, post_attention, pre_feedforward,
    # post_feedforward), so two more d-vectors per layer than the gated RMSNorm formula; tied head
    gated_rms_total(d=3584, L=42, V=256000, ff=14336, n_heads=16, n_kv=8, head_dim=256, tied=True) + 42 * 2 * 3584,
    {"d_model": 3584, "n_heads": 16, "n_kv_heads": 8, "head_dim": 256, "d_ff": 14336, "n_layers": 42,
     "vocab_size": 256000},
    # transformers 5.24 Gemma2ForCausalLM instantiated on the meta device from the fields of
    # https://huggingface.co/google/gemma-2-9b/blob/main/config.json (sum of numel); Google's "9B"
    # (the model card's 9.24B).
    id="gemma-2-9b[transformers Gemma2ForCausalLM on meta=9241705984]",
))

CASES.append(pytest.param(
    "gemma-3-1b", 999_885_952,
    # Gemma3ForCausalLM: Gemma 2's four RMSNorms per layer and q_norm, k_norm of head_dim each; tied head
    gated_rms_total(d=1152, L=26, V=262144, ff=6912, n_heads=4, n_kv=1, head_dim=256, tied=True)
    + 26 * (2 * 1152 + 2 * 256),
    {"d_model": 1152, "n_heads": 4, "n_kv_heads": 1, "head_dim": 256, "d_ff": 6912, "n_layers": 26,
     "vocab_size": 262144},
    # transformers 5.24 Gemma3ForCausalLM instantiated on the meta device from the fields of
    # https://huggingface.co/google/gemma-3-1b-pt/blob/main/config.json (sum of numel); Google's "1B".
    id="gemma-3-1b[transformers Gemma3ForCausalLM on meta=999885952]",
))

CASES.append(pytest.param(
    "gemma-3-27b", 27_009_346_304,
    # the language model of Gemma3ForConditionalGeneration: Gemma 3 1B's block at GQA 32/16, tied head
    gated_rms_total(d=5376, L=62, V=262208, ff=21504, n_heads=32, n_kv=16, head_dim=128, tied=True)
    + 62 * (2 * 5376 + 2 * 128),
    {"d_model": 5376, "n_heads": 32, "n_kv_heads": 16, "head_dim": 128, "d_ff": 21504, "n_layers": 62,
     "vocab_size": 262208},
    # transformers 5.24 Gemma3ForConditionalGeneration instantiated on the meta device from
    # https://huggingface.co/google/gemma-3-27b-it/blob/main/config.json: 27,432,406,640 in all, of which
    # the vision tower and projector are 423,060,336 (sum of numel); Google's "27B".
    id="gemma-3-27b[transformers Gemma3ForConditionalGeneration's language model on meta=27009346304]",
))

def glm45_total(d: int, L: int, V: int, h: int, kv: int, d_h: int, ff: int, E: int, d_e: int, dense: int,
                used: int | None = None) -> int:
    """GLM-4.5: attention with q/k/v biases (no o bias), two RMSNorms per layer, `dense` layers with the
    gated MLP and then a router, E experts (or `used` of them) and one shared expert; untied head."""
    attention = d * h * d_h + h * d_h + 2 * (d * kv * d_h + kv * d_h) + h * d_h * d
    expert_layer = attention + 2 * d + d * E + (used or E) * 3 * d * d_e + 3 * d * d_e
    return dense * (attention + 2 * d + 3 * d * ff) + (L - dense) * expert_layer + 2 * V * d + d


CASES.append(pytest.param(
    "glm-4.5-air", 106_852_245_504,
    glm45_total(d=4096, L=46, V=151552, h=96, kv=8, d_h=128, ff=10944, E=128, d_e=1408, dense=1),
    {"d_model": 4096, "n_heads": 96, "n_kv_heads": 8, "head_dim": 128, "d_ff": 10944, "n_layers": 46,
     "vocab_size": 151552},
    # transformers 5.24 Glm4MoeForCausalLM instantiated on the meta device from
    # https://huggingface.co/zai-org/GLM-4.5-Air/blob/main/config.json (sum of numel); Z.ai's "106B total"
    id="glm-4.5-air[transformers Glm4MoeForCausalLM on meta=106852245504]",
))

CASES.append(pytest.param(
    "command-r7b", 8_028_033_024,
    # Cohere2ForCausalLM: one shift-free LayerNorm per layer (d), GQA 32/8 of dim 128, SwiGLU; tied head
    32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 4096) + 256000 * 4096 + 4096,
    {"d_model": 4096, "n_heads": 32, "n_kv_heads": 8, "head_dim": 128, "d_ff": 14336, "n_layers": 32,
     "vocab_size": 256000},
    # transformers 5.24 Cohere2ForCausalLM instantiated on the meta device from
    # https://huggingface.co/CohereLabs/c4ai-command-r7b-12-2024/blob/main/config.json (sum of numel)
    id="command-r7b[transformers Cohere2ForCausalLM on meta=8028033024]",
))

CASES.append(pytest.param(
    "mistral-small-3.1-24b", 23_572_403_200,
    # the language model of Mistral3ForConditionalGeneration: Mistral's block, untied head
    gated_rms_total(d=5120, L=40, V=131072, ff=32768, n_heads=32, n_kv=8, head_dim=128, tied=False),
    {"d_model": 5120, "n_heads": 32, "n_kv_heads": 8, "head_dim": 128, "d_ff": 32768, "n_layers": 40,
     "vocab_size": 131072},
    # transformers 5.24 Mistral3ForConditionalGeneration instantiated on the meta device from
    # https://huggingface.co/mistralai/Mistral-Small-3.1-24B-Instruct-2503/blob/main/config.json with the top
    # level's tie_word_embeddings false: 24,011,361,280 in all, 438,958,080 of them the vision tower and projector
    id="mistral-small-3.1-24b[transformers Mistral3ForConditionalGeneration's language model on meta=23572403200]",
))

CASES.append(pytest.param(
    "smollm3-3b", 3_075_098_624,
    # SmolLM3ForCausalLM: Llama's block (its NoPE layers drop RoPE, not parameters); tied head
    gated_rms_total(d=2048, L=36, V=128256, ff=11008, n_heads=16, n_kv=4, head_dim=128, tied=True),
    {"d_model": 2048, "n_heads": 16, "n_kv_heads": 4, "head_dim": 128, "d_ff": 11008, "n_layers": 36,
     "vocab_size": 128256},
    # transformers 5.24 SmolLM3ForCausalLM instantiated on the meta device from
    # https://huggingface.co/HuggingFaceTB/SmolLM3-3B/blob/main/config.json (sum of numel); "3B".
    id="smollm3-3b[transformers SmolLM3ForCausalLM on meta=3075098624]",
))

CASES.append(pytest.param(
    "deepseek-v3", 671_026_404_352, deepseek_total(**DEEPSEEK_V3),
    {"d_model": 7168, "n_heads": 128, "d_ff": 18432, "n_layers": 61, "vocab_size": 129280},
    # transformers 5.24 DeepseekV3ForCausalLM instantiated on the meta device from
    # https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json (sum of numel over parameters(); the
    # 14,848 e_score_correction_bias values are buffers): DeepSeek's "671B total", without the 14B
    # multi-token-prediction module transformers does not build.
    id="deepseek-v3[transformers DeepseekV3ForCausalLM on meta=671026404352]",
))
CASES.append(pytest.param(
    "deepseek-v2-lite", 15_706_484_224, deepseek_total(**DEEPSEEK_V2_LITE),
    {"d_model": 2048, "n_heads": 16, "d_ff": 10944, "n_layers": 27, "vocab_size": 102400},
    # transformers 5.24 DeepseekV2ForCausalLM instantiated on the meta device from
    # https://huggingface.co/deepseek-ai/DeepSeek-V2-Lite/blob/main/config.json (sum of numel); DeepSeek's "15.7B".
    id="deepseek-v2-lite[transformers DeepseekV2ForCausalLM on meta=15706484224]",
))


def indexer_total(*, d: int, L: int, q_rank: int, h_i: int, d_i: int) -> int:
    """DeepSeek Sparse Attention's lightning indexer in each of L layers: wq_b (q_rank → h_i·d_i), wk (d → d_i),
    its k_norm LayerNorm (weight, bias), weights_proj (d → h_i), no biases."""
    return L * (q_rank * h_i * d_i + d * d_i + 2 * d_i + d * h_i)


GLM_5 = dict(d=6144, L=78, V=154880, ff=12288, n_heads=64, q_rank=2048, kv_rank=512, d_nope=192, d_rope=64,
             d_v=256, dense=3, E=256, d_e=2048, shared=1)  # transformers 5.24 GlmMoeDsaConfig's defaults
CASES.append(pytest.param(
    # transformers 5.24 DeepseekV32ForCausalLM on the meta device from DeepseekV32Config() (its defaults: the
    # deepseek-ai/DeepSeek-V3.2-Exp checkpoint's shapes), 61 indexers of 64 heads of 128 on DeepSeek-V3's shapes
    "deepseek-v3.2", 671_877_929_216,
    deepseek_total(**DEEPSEEK_V3) + indexer_total(d=7168, L=61, q_rank=1536, h_i=64, d_i=128),
    {"d_model": 7168, "n_heads": 128, "d_ff": 18432, "n_layers": 61, "vocab_size": 129280},
    id="deepseek-v3.2[transformers DeepseekV32ForCausalLM on meta=671877929216]",
))
CASES.append(pytest.param(
    # transformers 5.24 GlmMoeDsaForCausalLM on the meta device from GlmMoeDsaConfig() (zai-org/GLM-5's shapes)
    "glm-5", 743_911_199_232, deepseek_total(**GLM_5) + indexer_total(d=6144, L=78, q_rank=2048, h_i=32, d_i=128),
    {"d_model": 6144, "n_heads": 64, "d_ff": 12288, "n_layers": 78, "vocab_size": 154880},
    id="glm-5[transformers GlmMoeDsaForCausalLM on meta=743911199232]",
))

# The presets people ask for first (issue #31). Each total is what transformers 5.24 instantiates on the meta
# device from the model's hub config.json (AutoModelForCausalLM.from_config, sum of numel).
ASKED_FOR = [
    # meta-llama/Llama-3.1-70B and Llama-3.3-70B-Instruct, the same shapes
    ("llama-3.1-70b", 70_553_706_496, dict(d=8192, L=80, V=128256, ff=28672, n_heads=64, n_kv=8, head_dim=128,
                                           tied=False)),
    ("llama-3.3-70b", 70_553_706_496, dict(d=8192, L=80, V=128256, ff=28672, n_heads=64, n_kv=8, head_dim=128,
                                           tied=False)),
    # meta-llama/Llama-3.1-405B
    ("llama-3.1-405b", 405_853_388_800, dict(d=16384, L=126, V=128256, ff=53248, n_heads=128, n_kv=8, head_dim=128,
                                             tied=False)),
    # meta-llama/Llama-3.2-3B, tied head
    ("llama-3.2-3b", 3_212_749_824, dict(d=3072, L=28, V=128256, ff=8192, n_heads=24, n_kv=8, head_dim=128,
                                         tied=True)),
    # mistralai/Mistral-7B-v0.3: v0.1's block with a 32,768-token vocabulary
    ("mistral-7b-v0.3", 7_248_023_552, dict(d=4096, L=32, V=32768, ff=14336, n_heads=32, n_kv=8, head_dim=128,
                                            tied=False)),
    # Qwen/Qwen2.5-14B, -32B and -72B: q/k/v biases
    ("qwen2.5-14b", 14_770_033_664, dict(d=5120, L=48, V=152064, ff=13824, n_heads=40, n_kv=8, head_dim=128,
                                         tied=False, qkv_bias=True)),
    ("qwen2.5-32b", 32_763_876_352, dict(d=5120, L=64, V=152064, ff=27648, n_heads=40, n_kv=8, head_dim=128,
                                         tied=False, qkv_bias=True)),
    ("qwen2.5-72b", 72_706_203_648, dict(d=8192, L=80, V=152064, ff=29568, n_heads=64, n_kv=8, head_dim=128,
                                         tied=False, qkv_bias=True)),
]
for _name, _total, _shape in ASKED_FOR:
    CASES.append(pytest.param(
        _name, _total, gated_rms_total(**_shape),
        {"d_model": _shape["d"], "n_heads": _shape["n_heads"], "n_kv_heads": _shape["n_kv"],
         "head_dim": _shape["head_dim"], "d_ff": _shape["ff"], "n_layers": _shape["L"], "vocab_size": _shape["V"]},
        id=f"{_name}[transformers on meta={_total}]"))
CASES.append(pytest.param(
    # Qwen/Qwen3-32B: Qwen3's q_norm and k_norm add two head_dim weights per layer
    "qwen3-32b", 32_762_123_264,
    gated_rms_total(d=5120, L=64, V=151936, ff=25600, n_heads=64, n_kv=8, head_dim=128, tied=False) + 64 * 2 * 128,
    {"d_model": 5120, "n_heads": 64, "n_kv_heads": 8, "head_dim": 128, "d_ff": 25600, "n_layers": 64,
     "vocab_size": 151936},
    id="qwen3-32b[transformers Qwen3ForCausalLM on meta=32762123264]"))



def mamba1_layer(d, d_in, N, R, K, learned_norms=False):
    """A Mamba-1 mixer from MambaMixer's modules: in_proj (d → 2·d_in), conv1d (d_in taps of K and a bias),
    x_proj (d_in → R + 2·N, no bias), dt_proj (R → d_in and its bias), A_log (d_in, N), D (d_in); Jamba's RMSNorm
    weights of δ (R), B and C (N each)."""
    return 2 * d * d_in + d_in * (K + 1) + d_in * (R + 2 * N) + R * d_in + d_in + d_in * N + d_in + d_in * d + (
        R + 2 * N if learned_norms else 0)


# state-spaces/mamba-2.8b-hf and tiiuae/falcon-mamba-7b: every layer one RMSNorm and the mixer, the final norm_f;
# transformers 5.24 MambaForCausalLM / FalconMambaForCausalLM on the meta device from their config.json
CASES.append(pytest.param(
    "mamba-2.8b", 2_768_345_600, 64 * (2560 + mamba1_layer(2560, 5120, 16, 160, 4)) + 50280 * 2560 + 2560,
    {"d_model": 2560, "n_layers": 64, "vocab_size": 50280},
    id="mamba-2.8b[transformers MambaForCausalLM on meta=2768345600]"))
CASES.append(pytest.param(
    "falcon-mamba-7b", 7_272_665_088, 64 * (4096 + mamba1_layer(4096, 8192, 16, 256, 4)) + 2 * 65024 * 4096 + 4096,
    {"d_model": 4096, "n_layers": 64, "vocab_size": 65024},
    id="falcon-mamba-7b[transformers FalconMambaForCausalLM on meta=7272665088]"))
# ai21labs/AI21-Jamba-1.5-Mini: 28 Mamba-1 layers and 4 of attention (i % 8 == 4, no biases, no positions), experts
# on the 16 odd layers (the router d·E and 16 SwiGLUs), a dense SwiGLU on the others; two norms a layer; untied
_JAMBA_ATTENTION = 2 * 4096 * 4096 + 2 * 4096 * 1024
CASES.append(pytest.param(
    "jamba-1.5-mini", 51_570_323_328,
    28 * mamba1_layer(4096, 8192, 16, 256, 4, learned_norms=True) + 4 * _JAMBA_ATTENTION
    + 16 * 3 * 4096 * 14336 + 16 * (4096 * 16 + 16 * 3 * 4096 * 14336) + 32 * 2 * 4096 + 2 * 65536 * 4096 + 4096,
    {"d_model": 4096, "n_heads": 32, "n_kv_heads": 8, "d_ff": 14336, "n_layers": 32, "vocab_size": 65536},
    id="jamba-1.5-mini[transformers JambaForCausalLM on meta=51570323328]"))

# MiniMaxAI/MiniMax-M2: Mixtral's block with q/k RMSNorms over the whole projections (h·d_h and h_kv·d_h) and the
# router (E, d) beside 256 SwiGLU experts in every layer (its selection bias a buffer); transformers 5.24
# MiniMaxM2ForCausalLM on the meta device from its config.json
CASES.append(pytest.param(
    "minimax-m2", 228_689_748_992,
    moe_total(d=3072, L=62, V=200064, n_heads=48, n_kv=8, head_dim=128, experts=256, d_expert=1536) + 62 * (48 + 8) * 128,
    {"d_model": 3072, "n_heads": 48, "n_kv_heads": 8, "n_layers": 62, "vocab_size": 200064},
    id="minimax-m2[transformers MiniMaxM2ForCausalLM on meta=228689748992]"))


def mimo_v2_flash_total(*, used: int | None = None) -> int:
    """MiMoV2FlashForCausalLM from MiMoV2FlashConfig's defaults: 48 layers, global on 0 and every sixth (4 K/V heads),
    sliding on the rest (8 K/V heads and a sink logit per head); q and k 192 per head, v 128; o_proj h·128 → d; two
    RMSNorms; layer 0 a dense SwiGLU of 16384, the others a router (256, d; its selection bias a buffer) and 256
    SwiGLU experts of 2048 (`used`: only that many); the embedding, the final norm, an untied head."""
    d, h, kv, d_h, d_v, V = 4096, 64, 4, 192, 128, 152576
    total = 2 * V * d + d
    for i in range(48):
        full = i == 0 or (i + 1) % 6 == 0
        k = kv if full else 2 * kv
        attention = d * h * d_h + d * k * d_h + d * k * d_v + h * d_v * d + (0 if full else h)
        mlp = 3 * d * 16384 if i == 0 else 256 * d + (used or 256) * 3 * d * 2048
        total += attention + 2 * d + mlp
    return total


# XiaomiMiMo/MiMo-V2-Flash: "309B total"; transformers 5.24 MiMoV2FlashForCausalLM on the meta device from its config
# class's defaults (which carry the published model's shapes)
CASES.append(pytest.param(
    "mimo-v2-flash", 308_778_768_832, mimo_v2_flash_total(),
    {"d_model": 4096, "n_heads": 64, "n_kv_heads": 4, "head_dim": 192, "v_head_dim": 128, "n_layers": 48,
     "vocab_size": 152576},
    id="mimo-v2-flash[transformers MiMoV2FlashForCausalLM on meta=308778768832]"))


def beam_total(*, used: int | None = None) -> int:
    """BeamForCausalLM from BeamConfig's defaults: 52 layers of q/k/v/o without biases (48 heads, 8 K/V heads of 128),
    the gate's projection (d → h·128) and its bias per head, q/k norms of 128, four RMSNorms; three dense SwiGLU MLPs
    of 20480, then a router (256, d; its selection bias a buffer) and 256 SwiGLU experts of 2560 (`used`: only that
    many); the embedding, the final norm, an untied head."""
    d, h, kv, d_h, V = 5120, 48, 8, 128, 151936
    attention = d * h * d_h + 2 * d * kv * d_h + h * d_h * d + d * h * d_h + h + 2 * d_h
    return 2 * V * d + d + sum(attention + 4 * d + (3 * d * 20480 if i < 3 else 256 * d + (used or 256) * 3 * d * 2560)
                               for i in range(52))


# reflection/Beam-1.0-501B-A23B: "501B" in its name; transformers 5.24 BeamForCausalLM on the meta device from its config
# class's defaults (which carry the named checkpoint's shapes)
CASES.append(pytest.param(
    "beam-1.0-501b-a23b", 501_267_599_808, beam_total(),
    {"d_model": 5120, "n_heads": 48, "n_kv_heads": 8, "head_dim": 128, "n_layers": 52, "vocab_size": 151936},
    id="beam-1.0-501b-a23b[transformers BeamForCausalLM on meta=501267599808]"))

PRESET_NAMES = [c.values[0] for c in CASES]


def _preset_yaml(name: str) -> dict:
    path = PRESET_DIR / f"{name}.yaml"
    assert path.is_file(), f"missing preset file {path}"
    with path.open(encoding="utf-8") as fh:
        return yaml.safe_load(fh)


@pytest.mark.parametrize("name, published, hand, shape", CASES)
def test_hand_formula_reproduces_published_figure(name, published, hand, shape):
    assert hand == published


@pytest.mark.parametrize("name, published, hand, shape", CASES)
def test_yaml_about_parameters_is_published_figure(name, published, hand, shape):
    assert _preset_yaml(name)["about"]["parameters"] == published


@pytest.mark.parametrize("name, published, hand, shape", CASES)
def test_yaml_shape_matches_hand_formula_inputs(name, published, hand, shape):
    # Ties the YAML to the hyperparameters the hand formula above was written from.
    doc = _preset_yaml(name)
    block, model = doc["block"], doc["model"]
    effective = {
        **block,
        **model,
        "n_kv_heads": block.get("n_kv_heads", block["n_heads"]),
        "head_dim": block.get("head_dim", block["d_model"] // block["n_heads"]),
    }
    for key, want in shape.items():
        assert effective[key] == want, key


@pytest.mark.parametrize("name, published, hand, shape", CASES)
def test_blockcli_counts_published_figure(name, published, hand, shape):
    from blockcli.sources import load_config
    from blockcli.count import count_parameters

    total = count_parameters(load_config(name)).total
    assert total == published == hand


@pytest.mark.parametrize("name, hand, top_k, expected", [
    # hand: deepseek_total with only the top-k routed experts of each expert layer counted, embeddings and LM
    # head included; DeepSeek's model cards round what a token activates to "37B" (V3) and "2.4B" (V2-Lite)
    ("deepseek-v3", deepseek_total(**DEEPSEEK_V3, experts_used=8), 8, 37_552_282_624),
    ("deepseek-v2-lite", deepseek_total(**DEEPSEEK_V2_LITE, experts_used=6), 6, 2_661_150_208),
])
def test_blockcli_counts_active_parameters_by_hand(name, hand, top_k, expected):
    from blockcli.sources import load_config
    from blockcli.count import count_parameters

    result = count_parameters(load_config(name))
    assert result.config.layer_block(result.n_layers - 1).moe.top_k == top_k
    assert result.active == hand == expected


def test_every_required_preset_is_packaged():
    packaged = {p.stem for p in PRESET_DIR.glob("*.yaml")}
    assert set(PRESET_NAMES) <= packaged


# Active parameters per token: the same hand formula with only the k experts a token is routed to.
ACTIVE = [
    # Mixtral-8x7B: 12,879,925,248 (the issue's figure from transformers' module sizes; "12.9B active" in
    # Mistral AI's announcement)
    ("mixtral-8x7b", 12_879_925_248,
     moe_total(d=4096, L=32, V=32000, n_heads=32, n_kv=8, head_dim=128, experts=8, d_expert=14336, used=2)),
    # Qwen3-30B-A3B: "3.3B activated" on the model card
    ("qwen3-30b-a3b", 3_353_032_704,
     moe_total(d=2048, L=48, V=151936, n_heads=32, n_kv=4, head_dim=128, experts=128, d_expert=768, qk_norm=True,
               used=8)),
    # gpt-oss: "3.61B" and "5.13B" active in OpenAI's model card, which leaves out the 579,133,440 of the embedding
    ("gpt-oss-20b", 4_187_440_704,
     gpt_oss_total(d=2880, L=24, V=201088, h=64, kv=8, d_h=64, E=32, d_e=2880, used=4)),
    ("gpt-oss-120b", 5_711_982_912,
     gpt_oss_total(d=2880, L=36, V=201088, h=64, kv=8, d_h=64, E=128, d_e=2880, used=4)),
    # MiniMax-M2: "10B active" on its model card, without the 1.23B of embeddings and head counted here
    ("minimax-m2", 11_030_537_216,
     moe_total(d=3072, L=62, V=200064, n_heads=48, n_kv=8, head_dim=128, experts=256, d_expert=1536, used=8)
     + 62 * (48 + 8) * 128),
    # Beam-1.0-501B-A23B: "A23B" in its name
    ("beam-1.0-501b-a23b", 23_431_516_608, beam_total(used=8)),
    # MiMo-V2-Flash: "15B active" on its model card
    ("mimo-v2-flash", 15_445_924_288, mimo_v2_flash_total(used=8)),
    # GLM-4.5-Air: "12B active" on its model card, without the 1.24B of embeddings and head counted here
    ("glm-4.5-air", 13_424_123_904,
     glm45_total(d=4096, L=46, V=151552, h=96, kv=8, d_h=128, ff=10944, E=128, d_e=1408, dense=1, used=8)),
]


@pytest.mark.parametrize("name, active, hand", ACTIVE)
def test_blockcli_counts_active_parameters_per_token(name, active, hand):
    from blockcli.sources import load_config
    from blockcli.count import count_parameters

    assert count_parameters(load_config(name)).active_total == active == hand
