"""Each family's checkpoint tensor names, mapped onto blockcli's parameter keys. Data only.

A checkpoint saved by Hugging Face transformers names its tensors after the family's modules
(`model.layers.0.self_attn.q_proj.weight`); blockcli's `Model` calls the same array
`blocks.0.w_q`, shaped (in, out). Each family below is one `TensorMap`: for every stored
tensor, the blockcli key (or keys, for a fused tensor) it fills and the layout it is stored in:

    SAME      stored exactly as blockcli holds it: vectors, embedding tables (V, d), and GPT-2's
              Conv1D matrices, which are already (in, out)
    LINEAR    torch.nn.Linear's (out, in): transposed on load
    SPLIT     GPT-2's `c_attn`: Q | K | V side by side along the last axis (Conv1D layout)
    FUSED     nn.Linear whose output rows are its keys' outputs one after another, each as wide as
              that key's output (so unequal widths are fine): Phi-3's `qkv_proj` Q | K | V with
              fewer K/V heads, its `gate_up_proj` gate | up
    GROUPED_QKV  nn.Linear whose output rows are grouped per K/V head: each group is its h/h_kv
              query heads, then its K head, then its V head, [q…q k v | q…q k v | …], each d_h
              wide. One K/V head (multi-query) makes it Q | K | V; h_kv = h makes it GPT-NeoX's
              [q_i k_i v_i]: GPT-NeoX's, Falcon's `query_key_value` and GPTBigCode's `c_attn`, in
              every variant

    EXPERTS   a mixture's experts fused into one 3-D tensor (E, out, in), as transformers 5 holds them
              (and saves them with save_original_format=False): expert e's slice is nn.Linear's
              (out, in), its rows the keys' outputs one after another (gate_up_proj: gate | up)

`{e}` is an expert's index: a name with `{e}` is one tensor per expert (as save_pretrained writes
them, `experts.{e}.w1.weight`); keys with `{e}` in a name without it are all experts' in one fused
tensor. Either form may be stored: the one found covers the keys, the other is not expected.
A name `a|b` is stored under either (Falcon's norms are named by its block layout).
Names are relative to the family's base model (`prefix`): transformers saves
`transformer.h.0...` from GPT2LMHeadModel but `h.0...` from GPT2Model, and both are read. A
tensor marked `top` (the LM head) lives outside the base model. `{i}` is the layer index.
A tensor the config does not call for (a bias of a bias-free config, the LM head of a tied
model) is simply not expected. `buffers` are stored tensors that are not parameters (causal-mask
and rotary-frequency buffers of older checkpoints): recognised, never loaded.
"""

from __future__ import annotations

from dataclasses import dataclass

SAME, LINEAR, SPLIT, FUSED, GROUPED_QKV = "same", "linear", "split", "fused", "grouped_qkv"
EXPERTS = "experts"


@dataclass(frozen=True)
class Tensor:
    keys: tuple[str, ...]  # blockcli keys it fills: one, or Q, K, V for a fused tensor
    name: str  # the stored name, relative to the base model unless `top`
    layout: str = SAME
    top: bool = False


@dataclass(frozen=True)
class TensorMap:
    prefix: str  # the base model's attribute path in the *ForCausalLM checkpoint
    tensors: tuple[Tensor, ...]
    buffers: tuple[str, ...] = ()  # name patterns ({i} = a layer index) of non-parameter tensors


def _t(keys: str, name: str, layout: str = SAME, top: bool = False) -> Tensor:
    return Tensor(tuple(keys.split()), name, layout, top)


_QKV = "blocks.{i}.w_q blocks.{i}.w_k blocks.{i}.w_v"
_QKV_BIAS = "blocks.{i}.b_q blocks.{i}.b_k blocks.{i}.b_v"

GPT2 = TensorMap("transformer.", (
    _t("wte", "wte.weight"),
    _t("wpe", "wpe.weight"),
    _t("blocks.{i}.ln1_gamma", "h.{i}.ln_1.weight"),
    _t("blocks.{i}.ln1_beta", "h.{i}.ln_1.bias"),
    _t(_QKV, "h.{i}.attn.c_attn.weight", SPLIT),
    _t(_QKV_BIAS, "h.{i}.attn.c_attn.bias", SPLIT),
    _t("blocks.{i}.w_o", "h.{i}.attn.c_proj.weight"),
    _t("blocks.{i}.b_o", "h.{i}.attn.c_proj.bias"),
    _t("blocks.{i}.ln2_gamma", "h.{i}.ln_2.weight"),
    _t("blocks.{i}.ln2_beta", "h.{i}.ln_2.bias"),
    _t("blocks.{i}.w_1", "h.{i}.mlp.c_fc.weight"),
    _t("blocks.{i}.b_1", "h.{i}.mlp.c_fc.bias"),
    _t("blocks.{i}.w_2", "h.{i}.mlp.c_proj.weight"),
    _t("blocks.{i}.b_2", "h.{i}.mlp.c_proj.bias"),
    _t("ln_f_gamma", "ln_f.weight"),
    _t("ln_f_beta", "ln_f.bias"),
    _t("lm_head", "lm_head.weight", LINEAR, top=True),
), buffers=("h.{i}.attn.bias", "h.{i}.attn.masked_bias"))

OPT = TensorMap("model.", (
    _t("wte", "decoder.embed_tokens.weight"),
    _t("wpe", "decoder.embed_positions.weight"),  # max_positions + 2 rows: OPT's offset
    _t("blocks.{i}.ln1_gamma", "decoder.layers.{i}.self_attn_layer_norm.weight"),
    _t("blocks.{i}.ln1_beta", "decoder.layers.{i}.self_attn_layer_norm.bias"),
    *(_t(f"blocks.{{i}}.w_{x}", f"decoder.layers.{{i}}.self_attn.{x}_proj.weight", LINEAR) for x in "qkv"),
    *(_t(f"blocks.{{i}}.b_{x}", f"decoder.layers.{{i}}.self_attn.{x}_proj.bias") for x in "qkv"),
    _t("blocks.{i}.w_o", "decoder.layers.{i}.self_attn.out_proj.weight", LINEAR),
    _t("blocks.{i}.b_o", "decoder.layers.{i}.self_attn.out_proj.bias"),
    _t("blocks.{i}.ln2_gamma", "decoder.layers.{i}.final_layer_norm.weight"),
    _t("blocks.{i}.ln2_beta", "decoder.layers.{i}.final_layer_norm.bias"),
    _t("blocks.{i}.w_1", "decoder.layers.{i}.fc1.weight", LINEAR),
    _t("blocks.{i}.b_1", "decoder.layers.{i}.fc1.bias"),
    _t("blocks.{i}.w_2", "decoder.layers.{i}.fc2.weight", LINEAR),
    _t("blocks.{i}.b_2", "decoder.layers.{i}.fc2.bias"),
    _t("ln_f_gamma", "decoder.final_layer_norm.weight"),
    _t("ln_f_beta", "decoder.final_layer_norm.bias"),
    _t("lm_head", "lm_head.weight", LINEAR, top=True),
))

GPT_NEOX = TensorMap("gpt_neox.", (
    _t("wte", "embed_in.weight"),
    _t("blocks.{i}.ln1_gamma", "layers.{i}.input_layernorm.weight"),
    _t("blocks.{i}.ln1_beta", "layers.{i}.input_layernorm.bias"),
    _t(_QKV, "layers.{i}.attention.query_key_value.weight", GROUPED_QKV),  # one K/V head per query head
    _t(_QKV_BIAS, "layers.{i}.attention.query_key_value.bias", GROUPED_QKV),
    _t("blocks.{i}.w_o", "layers.{i}.attention.dense.weight", LINEAR),
    _t("blocks.{i}.b_o", "layers.{i}.attention.dense.bias"),
    _t("blocks.{i}.ln2_gamma", "layers.{i}.post_attention_layernorm.weight"),
    _t("blocks.{i}.ln2_beta", "layers.{i}.post_attention_layernorm.bias"),
    _t("blocks.{i}.w_1", "layers.{i}.mlp.dense_h_to_4h.weight", LINEAR),
    _t("blocks.{i}.b_1", "layers.{i}.mlp.dense_h_to_4h.bias"),
    _t("blocks.{i}.w_2", "layers.{i}.mlp.dense_4h_to_h.weight", LINEAR),
    _t("blocks.{i}.b_2", "layers.{i}.mlp.dense_4h_to_h.bias"),
    _t("ln_f_gamma", "final_layer_norm.weight"),
    _t("ln_f_beta", "final_layer_norm.bias"),
    _t("lm_head", "embed_out.weight", LINEAR, top=True),
), buffers=("layers.{i}.attention.bias", "layers.{i}.attention.masked_bias",
            "layers.{i}.attention.rotary_emb.inv_freq"))

# Llama, Mistral, Qwen2, Qwen3, Gemma, Granite and Cohere (with no post_attention_layernorm) share their
# module names; Gemma's norm weights are the
# offset w of its (1 + w) scale, which `block.norm_unit_offset` says.
LLAMA = TensorMap("model.", (
    _t("wte", "embed_tokens.weight"),
    _t("blocks.{i}.ln1_gamma", "layers.{i}.input_layernorm.weight"),
    *(_t(f"blocks.{{i}}.w_{x}", f"layers.{{i}}.self_attn.{x}_proj.weight", LINEAR) for x in "qkvo"),
    *(_t(f"blocks.{{i}}.b_{x}", f"layers.{{i}}.self_attn.{x}_proj.bias") for x in "qkvo"),
    _t("blocks.{i}.q_norm_gamma", "layers.{i}.self_attn.q_norm.weight"),  # qwen3, olmo2
    _t("blocks.{i}.k_norm_gamma", "layers.{i}.self_attn.k_norm.weight"),  # qwen3, olmo2
    _t("blocks.{i}.ln2_gamma", "layers.{i}.post_attention_layernorm.weight"),
    _t("blocks.{i}.w_1", "layers.{i}.mlp.gate_proj.weight", LINEAR),
    _t("blocks.{i}.b_1", "layers.{i}.mlp.gate_proj.bias"),
    _t("blocks.{i}.w_3", "layers.{i}.mlp.up_proj.weight", LINEAR),
    _t("blocks.{i}.b_3", "layers.{i}.mlp.up_proj.bias"),
    _t("blocks.{i}.w_2", "layers.{i}.mlp.down_proj.weight", LINEAR),
    _t("blocks.{i}.b_2", "layers.{i}.mlp.down_proj.bias"),
    _t("ln_f_gamma", "norm.weight"),
    _t("lm_head", "lm_head.weight", LINEAR, top=True),
), buffers=("layers.{i}.self_attn.rotary_emb.inv_freq",))

# StarCoder2: Llama's attention names, LayerNorms with a shift, a plain MLP of nn.Linear c_fc / c_proj
STARCODER2 = TensorMap("model.", (
    _t("wte", "embed_tokens.weight"),
    _t("blocks.{i}.ln1_gamma", "layers.{i}.input_layernorm.weight"),
    _t("blocks.{i}.ln1_beta", "layers.{i}.input_layernorm.bias"),
    *(_t(f"blocks.{{i}}.w_{x}", f"layers.{{i}}.self_attn.{x}_proj.weight", LINEAR) for x in "qkvo"),
    *(_t(f"blocks.{{i}}.b_{x}", f"layers.{{i}}.self_attn.{x}_proj.bias") for x in "qkvo"),
    _t("blocks.{i}.ln2_gamma", "layers.{i}.post_attention_layernorm.weight"),
    _t("blocks.{i}.ln2_beta", "layers.{i}.post_attention_layernorm.bias"),
    _t("blocks.{i}.w_1", "layers.{i}.mlp.c_fc.weight", LINEAR),
    _t("blocks.{i}.b_1", "layers.{i}.mlp.c_fc.bias"),
    _t("blocks.{i}.w_2", "layers.{i}.mlp.c_proj.weight", LINEAR),
    _t("blocks.{i}.b_2", "layers.{i}.mlp.c_proj.bias"),
    _t("ln_f_gamma", "norm.weight"),
    _t("ln_f_beta", "norm.bias"),
    _t("lm_head", "lm_head.weight", LINEAR, top=True),
))

# StableLM: Llama's names with LayerNorms that have a shift (nn.LayerNorm); with use_parallel_residual
# there is no post_attention_layernorm
STABLELM = TensorMap("model.", (
    _t("wte", "embed_tokens.weight"),
    _t("blocks.{i}.ln1_gamma", "layers.{i}.input_layernorm.weight"),
    _t("blocks.{i}.ln1_beta", "layers.{i}.input_layernorm.bias"),
    *(_t(f"blocks.{{i}}.w_{x}", f"layers.{{i}}.self_attn.{x}_proj.weight", LINEAR) for x in "qkvo"),
    *(_t(f"blocks.{{i}}.b_{x}", f"layers.{{i}}.self_attn.{x}_proj.bias") for x in "qkv"),
    _t("blocks.{i}.ln2_gamma", "layers.{i}.post_attention_layernorm.weight"),
    _t("blocks.{i}.ln2_beta", "layers.{i}.post_attention_layernorm.bias"),
    _t("blocks.{i}.w_1", "layers.{i}.mlp.gate_proj.weight", LINEAR),
    _t("blocks.{i}.w_3", "layers.{i}.mlp.up_proj.weight", LINEAR),
    _t("blocks.{i}.w_2", "layers.{i}.mlp.down_proj.weight", LINEAR),
    _t("ln_f_gamma", "norm.weight"),
    _t("ln_f_beta", "norm.bias"),
    _t("lm_head", "lm_head.weight", LINEAR, top=True),
), buffers=("layers.{i}.self_attn.rotary_emb.inv_freq",))

# OLMo 2: Llama's names, but its two norms follow the branches (post_attention_layernorm normalises
# the attention output, post_feedforward_layernorm the MLP's), and q/k norms span the projection
OLMO2 = TensorMap("model.", (
    _t("wte", "embed_tokens.weight"),
    *(_t(f"blocks.{{i}}.w_{x}", f"layers.{{i}}.self_attn.{x}_proj.weight", LINEAR) for x in "qkvo"),
    *(_t(f"blocks.{{i}}.b_{x}", f"layers.{{i}}.self_attn.{x}_proj.bias") for x in "qkvo"),
    _t("blocks.{i}.q_norm_gamma", "layers.{i}.self_attn.q_norm.weight"),
    _t("blocks.{i}.k_norm_gamma", "layers.{i}.self_attn.k_norm.weight"),
    _t("blocks.{i}.ln1_gamma", "layers.{i}.post_attention_layernorm.weight"),
    _t("blocks.{i}.w_1", "layers.{i}.mlp.gate_proj.weight", LINEAR),
    _t("blocks.{i}.w_3", "layers.{i}.mlp.up_proj.weight", LINEAR),
    _t("blocks.{i}.w_2", "layers.{i}.mlp.down_proj.weight", LINEAR),
    _t("blocks.{i}.ln2_gamma", "layers.{i}.post_feedforward_layernorm.weight"),
    _t("ln_f_gamma", "norm.weight"),
    _t("lm_head", "lm_head.weight", LINEAR, top=True),
))

# GPT-J and Phi: one norm per block (ln_1 / input_layernorm), read by attention and MLP alike
GPTJ = TensorMap("transformer.", (
    _t("wte", "wte.weight"),
    _t("blocks.{i}.ln1_gamma", "h.{i}.ln_1.weight"),
    _t("blocks.{i}.ln1_beta", "h.{i}.ln_1.bias"),
    *(_t(f"blocks.{{i}}.w_{x}", f"h.{{i}}.attn.{x}_proj.weight", LINEAR) for x in "qkv"),
    _t("blocks.{i}.w_o", "h.{i}.attn.out_proj.weight", LINEAR),
    _t("blocks.{i}.w_1", "h.{i}.mlp.fc_in.weight", LINEAR),
    _t("blocks.{i}.b_1", "h.{i}.mlp.fc_in.bias"),
    _t("blocks.{i}.w_2", "h.{i}.mlp.fc_out.weight", LINEAR),
    _t("blocks.{i}.b_2", "h.{i}.mlp.fc_out.bias"),
    _t("ln_f_gamma", "ln_f.weight"),
    _t("ln_f_beta", "ln_f.bias"),
    _t("lm_head", "lm_head.weight", LINEAR, top=True),
    _t("lm_head_bias", "lm_head.bias", top=True),
), buffers=("h.{i}.attn.bias", "h.{i}.attn.masked_bias"))

PHI = TensorMap("model.", (
    _t("wte", "embed_tokens.weight"),
    _t("blocks.{i}.ln1_gamma", "layers.{i}.input_layernorm.weight"),
    _t("blocks.{i}.ln1_beta", "layers.{i}.input_layernorm.bias"),
    *(_t(f"blocks.{{i}}.w_{x}", f"layers.{{i}}.self_attn.{x}_proj.weight", LINEAR) for x in "qkv"),
    *(_t(f"blocks.{{i}}.b_{x}", f"layers.{{i}}.self_attn.{x}_proj.bias") for x in "qkv"),
    _t("blocks.{i}.w_o", "layers.{i}.self_attn.dense.weight", LINEAR),
    _t("blocks.{i}.b_o", "layers.{i}.self_attn.dense.bias"),
    _t("blocks.{i}.w_1", "layers.{i}.mlp.fc1.weight", LINEAR),
    _t("blocks.{i}.b_1", "layers.{i}.mlp.fc1.bias"),
    _t("blocks.{i}.w_2", "layers.{i}.mlp.fc2.weight", LINEAR),
    _t("blocks.{i}.b_2", "layers.{i}.mlp.fc2.bias"),
    _t("ln_f_gamma", "final_layernorm.weight"),
    _t("ln_f_beta", "final_layernorm.bias"),
    _t("lm_head", "lm_head.weight", LINEAR, top=True),
    _t("lm_head_bias", "lm_head.bias", top=True),
), buffers=("layers.{i}.self_attn.rotary_emb.inv_freq",))

# Phi-3: Llama's block with Q | K | V in one nn.Linear and gate | up in another; no biases
PHI3 = TensorMap("model.", (
    _t("wte", "embed_tokens.weight"),
    _t("blocks.{i}.ln1_gamma", "layers.{i}.input_layernorm.weight"),
    _t(_QKV, "layers.{i}.self_attn.qkv_proj.weight", FUSED),
    _t("blocks.{i}.w_o", "layers.{i}.self_attn.o_proj.weight", LINEAR),
    _t("blocks.{i}.ln2_gamma", "layers.{i}.post_attention_layernorm.weight"),
    _t("blocks.{i}.w_1 blocks.{i}.w_3", "layers.{i}.mlp.gate_up_proj.weight", FUSED),
    _t("blocks.{i}.w_2", "layers.{i}.mlp.down_proj.weight", LINEAR),
    _t("ln_f_gamma", "norm.weight"),
    _t("lm_head", "lm_head.weight", LINEAR, top=True),
))

# GPTBigCode (SantaCoder, StarCoder): GPT-2's names, but nn.Linear layers, and multi-query c_attn
GPT_BIGCODE = TensorMap("transformer.", (
    _t("wte", "wte.weight"),
    _t("wpe", "wpe.weight"),
    _t("blocks.{i}.ln1_gamma", "h.{i}.ln_1.weight"),
    _t("blocks.{i}.ln1_beta", "h.{i}.ln_1.bias"),
    _t(_QKV, "h.{i}.attn.c_attn.weight", GROUPED_QKV),
    _t(_QKV_BIAS, "h.{i}.attn.c_attn.bias", GROUPED_QKV),
    _t("blocks.{i}.w_o", "h.{i}.attn.c_proj.weight", LINEAR),
    _t("blocks.{i}.b_o", "h.{i}.attn.c_proj.bias"),
    _t("blocks.{i}.ln2_gamma", "h.{i}.ln_2.weight"),
    _t("blocks.{i}.ln2_beta", "h.{i}.ln_2.bias"),
    _t("blocks.{i}.w_1", "h.{i}.mlp.c_fc.weight", LINEAR),
    _t("blocks.{i}.b_1", "h.{i}.mlp.c_fc.bias"),
    _t("blocks.{i}.w_2", "h.{i}.mlp.c_proj.weight", LINEAR),
    _t("blocks.{i}.b_2", "h.{i}.mlp.c_proj.bias"),
    _t("ln_f_gamma", "ln_f.weight"),
    _t("ln_f_beta", "ln_f.bias"),
    _t("lm_head", "lm_head.weight", LINEAR, top=True),
))

# Falcon: one fused query_key_value grouped per K/V head in every variant; the norms are
# input_layernorm (shared by parallel attention and MLP, or before attention) and post_attention_layernorm
# (sequential blocks), or ln_attn and ln_mlp (the new decoder architecture's two parallel norms)
FALCON = TensorMap("transformer.", (
    _t("wte", "word_embeddings.weight"),
    _t("blocks.{i}.ln1_gamma", "h.{i}.input_layernorm.weight|h.{i}.ln_attn.weight"),
    _t("blocks.{i}.ln1_beta", "h.{i}.input_layernorm.bias|h.{i}.ln_attn.bias"),
    _t(_QKV, "h.{i}.self_attention.query_key_value.weight", GROUPED_QKV),
    _t(_QKV_BIAS, "h.{i}.self_attention.query_key_value.bias", GROUPED_QKV),
    _t("blocks.{i}.w_o", "h.{i}.self_attention.dense.weight", LINEAR),
    _t("blocks.{i}.b_o", "h.{i}.self_attention.dense.bias"),
    _t("blocks.{i}.ln2_gamma", "h.{i}.post_attention_layernorm.weight|h.{i}.ln_mlp.weight"),
    _t("blocks.{i}.ln2_beta", "h.{i}.post_attention_layernorm.bias|h.{i}.ln_mlp.bias"),
    _t("blocks.{i}.w_1", "h.{i}.mlp.dense_h_to_4h.weight", LINEAR),
    _t("blocks.{i}.b_1", "h.{i}.mlp.dense_h_to_4h.bias"),
    _t("blocks.{i}.w_2", "h.{i}.mlp.dense_4h_to_h.weight", LINEAR),
    _t("blocks.{i}.b_2", "h.{i}.mlp.dense_4h_to_h.bias"),
    _t("ln_f_gamma", "ln_f.weight"),
    _t("ln_f_beta", "ln_f.bias"),
    _t("lm_head", "lm_head.weight", LINEAR, top=True),
))

def _moe_tensors(router: str, experts: str, names: tuple[str, str, str], fused: str | None) -> tuple[Tensor, ...]:
    """A mixture's router and experts under `experts` (per expert: `{experts}.{e}.<gate|up|down>.weight`;
    fused 3-D: `{fused}.gate_up_proj` and `{fused}.down_proj`)."""
    gate, up, down = names
    per_expert = (_t("blocks.{i}.router", f"{router}.weight", LINEAR),
                  _t("blocks.{i}.experts.{e}.w_1", f"{experts}.{{e}}.{gate}.weight", LINEAR),
                  _t("blocks.{i}.experts.{e}.w_3", f"{experts}.{{e}}.{up}.weight", LINEAR),
                  _t("blocks.{i}.experts.{e}.w_2", f"{experts}.{{e}}.{down}.weight", LINEAR))
    if fused is None:
        return per_expert
    return per_expert + (_t("blocks.{i}.experts.{e}.w_1 blocks.{i}.experts.{e}.w_3", f"{fused}.gate_up_proj", EXPERTS),
                         _t("blocks.{i}.experts.{e}.w_2", f"{fused}.down_proj", EXPERTS))


_LLAMA_ATTENTION = tuple(t for t in LLAMA.tensors if ".mlp." not in t.name)

# Mixtral: Llama's attention; the router and experts under block_sparse_moe as save_pretrained writes them
# (w1 gate, w3 up, w2 down), or transformers 5's in-memory names, mlp.gate and the fused mlp.experts
MIXTRAL = TensorMap("model.", _LLAMA_ATTENTION + (
    _t("blocks.{i}.router", "layers.{i}.block_sparse_moe.gate.weight|layers.{i}.mlp.gate.weight", LINEAR),
    *_moe_tensors("layers.{i}.block_sparse_moe.gate", "layers.{i}.block_sparse_moe.experts", ("w1", "w3", "w2"),
                  "layers.{i}.mlp.experts")[1:],
), buffers=LLAMA.buffers)

# Qwen2-MoE (with its shared expert and the shared expert's gate) and Qwen3-MoE (q_norm, k_norm): mlp.gate,
# mlp.experts.{e}.gate_proj / up_proj / down_proj, or the fused mlp.experts.gate_up_proj / down_proj
QWEN_MOE = TensorMap("model.", _LLAMA_ATTENTION + _moe_tensors(
    "layers.{i}.mlp.gate", "layers.{i}.mlp.experts", ("gate_proj", "up_proj", "down_proj"), "layers.{i}.mlp.experts") + (
    _t("blocks.{i}.shared_w_1", "layers.{i}.mlp.shared_expert.gate_proj.weight", LINEAR),
    _t("blocks.{i}.shared_w_3", "layers.{i}.mlp.shared_expert.up_proj.weight", LINEAR),
    _t("blocks.{i}.shared_w_2", "layers.{i}.mlp.shared_expert.down_proj.weight", LINEAR),
    _t("blocks.{i}.shared_gate", "layers.{i}.mlp.shared_expert_gate.weight", LINEAR),
), buffers=LLAMA.buffers)

TENSOR_MAPS: dict[str, TensorMap] = {
    "gpt2": GPT2, "opt": OPT, "gpt_neox": GPT_NEOX,
    "llama": LLAMA, "mistral": LLAMA, "qwen2": LLAMA, "qwen3": LLAMA, "gemma": LLAMA, "starcoder2": STARCODER2,
    "olmo2": OLMO2, "gptj": GPTJ, "phi": PHI, "granite": LLAMA, "cohere": LLAMA,
    "stablelm": STABLELM, "phi3": PHI3, "gpt_bigcode": GPT_BIGCODE, "falcon": FALCON,
    "mixtral": MIXTRAL, "qwen2_moe": QWEN_MOE, "qwen3_moe": QWEN_MOE,
}
