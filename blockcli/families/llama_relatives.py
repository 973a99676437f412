"""Llama's later relatives, each a small diff of Llama's block as its transformers modular_*.py writes it:
Helium (Kyutai), Arcee (AFM), EXAONE 3.0/3.5, InternLM3.

- Helium: interleaved RoPE over the whole head, an o_proj as wide as the model, RMSNorm eps 1e-8.
- Arcee: Llama with Nemotron's plain MLP, act(x·W_up)·W_down, ReLU² by default.
- EXAONE 3: transformers runs it as Llama (LlamaForCausalLM); its configs spell three fields their own way
  (`num_layers`, `layer_norm_epsilon`, `activation_function`), its original checkpoints name tensors after
  GPT-2 (`transformer.h.{i}.attn.attention.q_proj`), both read.
- InternLM3: transformers runs it as Llama too; `qkv_bias` and `bias` are its names for `attention_bias` and
  `mlp_bias`, which must agree.
- Nemotron (Minitron, Nemotron-4): Arcee's plain ReLU² MLP with LayerNorm1P (a LayerNorm with a bias and
  scale 1 + w) and RoPE on half of each head.
- Apertus (Swiss AI): Arcee's plain MLP with xIELU, an activation with two learned scalars per layer (a_p, a_n:
  parameters; its β and ε stored buffers), per-head q/k RMSNorms before RoPE (Qwen3's), its two norms
  named attention_layernorm and feedforward_layernorm, and llama3 RoPE on base 1.2e7 by default. Apertus 1.5's
  language model (apertus1p5_text) is Apertus with a larger vocabulary.
- BitNet (b1.58 2B4T, in its unpacked float form): Llama's attention with Gemma's gated MLP (ReLU² by default)
  and two more RMSNorms, attn_sub_norm over the heads' output before o_proj and ffn_sub_norm over the MLP's
  hidden before down_proj (block.sub_norms); 5 K/V heads, RoPE base 500,000. Its published checkpoint's packed
  ternary weights (quantization_config "bitnet") are refused by the quantization reader, naming the method.
- NanoChat (Karpathy's nanochat): Llama's attention with parameter-free RMSNorms everywhere (the two of each
  layer, q and k per head after RoPE, the embeddings before the first layer and the output), a plain ReLU² MLP
  without biases (fc1, fc2), logits soft-capped at 15.
- HunYuan (dense): Llama's block with per-head q/k RMSNorms after RoPE (`query_layernorm`, `key_layernorm`),
  and the checkpoints' "dynamic" RoPE with an `alpha`, which is a fixed, larger base θ·α^(d_h/(d_h − 2)).
"""

from __future__ import annotations

from typing import Any, Mapping

from blockcli.config import ConfigError
from blockcli.families.common import (TRAINING_ONLY, Family, bias_groups, gated_rms, mlp_activation, silu_gate,
                                      with_data)
from blockcli.families.fields import Fields
from blockcli.families.llama import LLAMA, theta_default
from blockcli.tensor_names import LINEAR, SCALAR, TensorMap, tensor


def _helium(f: Fields) -> tuple[dict, dict]:
    """Helium: Llama's block with RoPE on interleaved pairs (2i, 2i + 1), q/k/v biases by `attention_bias`, none
    on o_proj, which maps hidden_size to hidden_size (so h·d_h must be d)."""
    block, model = gated_rms(f, silu_gate, kv_default=20, tie_default=False, head_dim_default=128,
                             out_bias=False, eps_default=1e-8)
    if block["n_heads"] * block["head_dim"] != block["d_model"]:
        raise ConfigError(f"{f.where}: fields 'num_attention_heads' × 'head_dim' = {block['n_heads']} × "
                          f"{block['head_dim']} must equal 'hidden_size' = {block['d_model']} (Helium's o_proj maps "
                          f"hidden_size to hidden_size)")
    block["rope_layout"] = "interleaved"
    return block, model


def _arcee(f: Fields) -> tuple[dict, dict]:
    """Arcee (AFM-4.5B): Llama's attention with a plain MLP (up_proj, down_proj) of `hidden_act`, ReLU² by default."""
    return gated_rms(f, lambda g: mlp_activation(g, "hidden_act", "relu2", gated=False), kv_default=None,
                     tie_default=False, eps_default=1e-5)


# ExaoneConfig's attribute_map: its own spellings of three LlamaConfig fields
_EXAONE_NAMES = {"num_layers": "num_hidden_layers", "layer_norm_epsilon": "rms_norm_eps",
                 "activation_function": "hidden_act"}


def _renamed(f: Fields, names: Mapping[str, str]) -> Fields:
    """`f` with each alias read as the field it stands for (transformers' attribute_map); an alias and its
    field both set must agree."""
    data = dict(f.data)
    for alias, key in names.items():
        if alias not in data:
            continue
        f.ignore(alias)
        value = data.pop(alias)
        if key in data and data[key] != value:
            raise f.unrepresentable(alias, value, f"it disagrees with '{key}' = {data[key]!r}, which it stands for")
        data[key] = value
    return with_data(f, data)


def _exaone(f: Fields) -> tuple[dict, dict]:
    """EXAONE 3.0/3.5: Llama's block (transformers builds a LlamaForCausalLM) with ExaoneConfig's defaults: 8 K/V
    heads, RoPE base 500,000, no biases."""
    f.ignore("embed_dropout")  # the original code's dropout on the embeddings: training only
    g = _renamed(f, _EXAONE_NAMES)
    block, model = gated_rms(g, silu_gate, kv_default=8, tie_default=False, eps_default=1e-5)
    theta_default(g, block, 500_000.0)
    return block, model


def _internlm3(f: Fields) -> tuple[dict, dict]:
    """InternLM3: Llama's block (transformers builds a LlamaForCausalLM) with 2 K/V heads of 128; `qkv_bias`
    (`attention_bias`: q, k, v and o) and `bias` (`mlp_bias`) must agree, as InternLM3Config checks."""
    g = _renamed(f, {"qkv_bias": "attention_bias", "bias": "mlp_bias"})
    attention, mlp = g.data.get("attention_bias", False), g.data.get("mlp_bias", False)
    if attention != mlp:
        key = "qkv_bias" if "qkv_bias" in f.data else "attention_bias"
        raise f.unrepresentable(key, attention, "InternLM3Config refuses a qkv_bias (attention_bias) different from "
                                               "bias (mlp_bias)")
    return gated_rms(g, silu_gate, kv_default=2, tie_default=False, head_dim_default=128, eps_default=1e-5)


def _nemotron(f: Fields) -> tuple[dict, dict]:
    """Nemotron: Llama's attention (`attention_bias` on q/k/v and o) rotating the first `partial_rotary_factor`
    (0.5) of each head, a plain MLP of `hidden_act` (ReLU²; `mlp_bias`) and NemotronLayerNorm1P everywhere:
    LayerNorm with a bias, its scale 1 + w, eps `norm_eps` (NemotronConfig has no rms_norm_eps)."""
    # NemotronAttention divides the heads by it: transformers fails without it (NemotronConfig's default is null)
    f.int("num_key_value_heads", why="transformers' Nemotron attention reads it and fails on null")
    block, model = layernorm_relu2(f, "norm_eps", fraction_keys=("partial_rotary_factor",), fraction_default=0.5)
    block["norm_unit_offset"] = True
    return block, model


def layernorm_relu2(f: Fields, eps_key: str, **rope: Any) -> tuple[dict, dict]:
    """Llama's attention with a plain MLP of `hidden_act` (ReLU² by default) and LayerNorms with a bias, eps
    `eps_key` (Nemotron, Jais 2: their config classes have no rms_norm_eps, refused if present)."""
    block, model = gated_rms(with_data(f, {k: v for k, v in f.data.items() if k != "rms_norm_eps"}),
                             lambda g: mlp_activation(g, "hidden_act", "relu2", gated=False), kv_default=None,
                             tie_default=False, **rope)
    f.used.discard("rms_norm_eps")  # not theirs: refused if present
    groups = block["bias"] if isinstance(block["bias"], dict) else dict.fromkeys(("qkv", "out", "mlp"), block["bias"])
    block.update(norm="layernorm", norm_eps=f.float(eps_key, 1e-5),
                 bias=bias_groups(groups["qkv"], groups["out"], groups["mlp"], True))
    return block, model


# ApertusConfig.__post_init__'s RoPE when the config gives none (a top-level rope_theta is then not read)
APERTUS_ROPE = {"rope_type": "llama3", "rope_theta": 12_000_000.0, "factor": 8.0, "original_max_position_embeddings": 8192,
                "low_freq_factor": 1.0, "high_freq_factor": 4.0}


def class_rope(f: Fields, rope: Mapping[str, Any], config_class: str) -> Fields:
    """`f` with the config class's own RoPE (its __post_init__'s `rope`) when the config gives none; a top-level
    rope_theta is then not read, and a note says so (CWM, Apertus)."""
    data = dict(f.data)
    if data.get("rope_parameters") is None and data.get("rope_scaling") is None:
        if data.pop("rope_theta", None) is not None:
            f.said.append(f"rope_theta is not read: without rope_parameters {config_class} rotates with its own "
                          f"({rope['rope_type']}, base {rope['rope_theta']:,.0f})")
        data["rope_parameters"] = rope
    return with_data(f, data)


def _apertus(f: Fields) -> tuple[dict, dict]:
    """Apertus: Arcee's block (`attention_bias` on q/k/v and o, no MLP biases: ApertusMLP builds its two without)
    with `hidden_act` xIELU, q/k RMSNorm over each head before RoPE, and APERTUS_ROPE when none is given."""
    g = class_rope(f, APERTUS_ROPE, "ApertusConfig")
    block, model = gated_rms(g, lambda h: mlp_activation(h, "hidden_act", "xielu", gated=False,
                                                                         own_parameters=True), kv_default=None,
                             tie_default=False, mlp_bias=False, eps_default=1e-5)
    block["qk_norm"] = "head"  # q_norm and k_norm: RMSNorm over each head's d_h, before RoPE
    theta_default(g, block, 12_000_000.0)
    return block, model


def _apertus1p5_text(f: Fields) -> tuple[dict, dict]:
    """Apertus 1.5's language model: Apertus with 266,752 tokens by default, its LM head as wide unless
    `output_vocab_size` prunes it (not represented: refused)."""
    pruned = f.data.get("output_vocab_size")
    if pruned is not None and pruned != f.data.get("vocab_size", 266_752):
        raise f.unrepresentable("output_vocab_size", pruned, "blockcli's LM head is as wide as the vocabulary")
    f.ignore("output_vocab_size")  # null or the vocabulary's size: the head is unpruned
    return _apertus(with_data(f, {"vocab_size": 266_752, **f.data}))


def _bitnet(f: Fields) -> tuple[dict, dict]:
    """BitNet: Llama's attention (`attention_bias` on q/k/v and o) with Gemma's gated MLP of `hidden_act` (ReLU²)
    and no MLP biases, RMSNorms over the heads' output and the MLP's hidden before their projections out; 5 K/V
    heads and RoPE base 500,000 by default. attn_sub_norm is hidden_size wide: h·d_h must be d."""
    block, model = gated_rms(f, lambda g: mlp_activation(g, "hidden_act", "relu2", gated=True), kv_default=5,
                             tie_default=False, mlp_bias=False, eps_default=1e-5)
    if block["n_heads"] * block["head_dim"] != block["d_model"]:
        raise ConfigError(f"{f.where}: fields 'num_attention_heads' × 'head_dim' = {block['n_heads']} × "
                          f"{block['head_dim']} must equal 'hidden_size' = {block['d_model']} (BitNet's "
                          f"attn_sub_norm normalises hidden_size features of the heads' output)")
    theta_default(f, block, 500_000.0)
    block["sub_norms"] = True
    return block, model


def _nanochat(f: Fields) -> tuple[dict, dict]:
    """NanoChat: Llama's attention (`attention_bias` on q/k/v and o), CLIP's plain MLP of `hidden_act` (ReLU²)
    without biases, every RMSNorm without a scale (Llama 4's L2 norm, eps `rms_norm_eps`): the layers' two, q and
    k per head after RoPE, the embeddings' before the first layer, the final one; `final_logit_softcapping` (15;
    null: none) on the logits."""
    block, model = gated_rms(f, lambda g: mlp_activation(g, "hidden_act", "relu2", gated=False), kv_default=None,
                             tie_default=False, mlp_bias=False, eps_default=1e-6)
    # NanoChat's rotate_half is cat(x2, −x1): each pair turns by −θ
    block.update(norm_scale=False, qk_norm="head_unscaled", qk_norm_after_rope=True, rope_layout="half_reversed")
    model["embedding_norm"] = True
    if f.has("final_logit_softcapping") and f.data["final_logit_softcapping"] is None:
        f.ignore("final_logit_softcapping")  # null: no cap
    else:
        model["logit_softcap"] = f.float("final_logit_softcapping", 15.0, low=0.0, high=1e9)
    return block, model


def hunyuan_dense(f: Fields) -> tuple[dict, dict]:
    """HunYuan dense (Hunyuan-0.5B … 7B): Llama's block without MLP biases, q/k RMSNorm over each head after RoPE
    (`qk_norm_after_rope`), and NTK-alpha RoPE: a "dynamic" RoPE dict with `alpha` rotates with the fixed base
    θ·α^(d_h/(d_h − 2)) (HunYuanDenseV1RotaryEmbedding's ntk_alpha); its other keys are then unread."""
    f.ignore("eod_token_id", "pretraining_tp")  # a token id; a Llama field HunYuan's modelling code never reads
    # HunYuanDenseV1Attention scales by config.head_dim ** -0.5: transformers fails without it (its default is null)
    f.int("head_dim", why="transformers' HunYuan attention reads it and fails on null")
    data = dict(f.data)
    for key in ("rope_scaling", "rope_parameters"):
        params = data.get(key)
        if not isinstance(params, Mapping) or params.get("rope_type", params.get("type")) != "dynamic" \
                or not params.get("alpha"):
            continue
        inner = Fields(params, f.where, f.family)
        alpha = inner.float("alpha", low=0.0, high=1e12)
        head_dim = f.int("head_dim", minimum=4)
        theta = inner.float("rope_theta", f.data.get("rope_theta", 10000.0), low=0.0, high=1e12)
        f.ignore(key, "rope_theta")
        data.pop(key)
        data["rope_theta"] = theta * alpha ** (head_dim / (head_dim - 2))
        f.notes.append(f"{key}: dynamic RoPE with alpha {alpha:g} is NTK-alpha: a fixed base "
                       f"{theta:g}·{alpha:g}^({head_dim}/{head_dim - 2}) = {data['rope_theta']:.6g}")
    g = with_data(f, data)
    block, model = gated_rms(g, silu_gate, kv_default=None, tie_default=False, mlp_bias=False, eps_default=1e-5)
    block.update(qk_norm="head", qk_norm_after_rope=True)
    return block, model


# EXAONE's original checkpoints (its own modelling code's names, which transformers renames on load) or Llama's
_EXAONE_ORIGINAL = {
    "embed_tokens.weight": "transformer.wte.weight", "norm.weight": "transformer.ln_f.weight",
    "layers.{i}.input_layernorm.weight": "transformer.h.{i}.ln_1.weight",
    "layers.{i}.post_attention_layernorm.weight": "transformer.h.{i}.ln_2.weight",
    **{f"layers.{{i}}.self_attn.{x}_proj.weight": f"transformer.h.{{i}}.attn.attention.{x}_proj.weight" for x in "qkv"},
    "layers.{i}.self_attn.o_proj.weight": "transformer.h.{i}.attn.attention.out_proj.weight",
    "layers.{i}.mlp.gate_proj.weight": "transformer.h.{i}.mlp.c_fc_0.weight",
    "layers.{i}.mlp.up_proj.weight": "transformer.h.{i}.mlp.c_fc_1.weight",
    "layers.{i}.mlp.down_proj.weight": "transformer.h.{i}.mlp.c_proj.weight",
}
EXAONE = TensorMap("", tuple(
    tensor(" ".join(t.keys), t.name if t.top else f"model.{t.name}|{_EXAONE_ORIGINAL[t.name]}", t.layout, t.top)
    for t in LLAMA.tensors if t.top or t.name in _EXAONE_ORIGINAL))

# Arcee: Llama's names without the gate
ARCEE = TensorMap("model.", tuple(t for t in LLAMA.tensors if ".gate_proj." not in t.name))

# Nemotron: Arcee's names and each LayerNorm1P's bias
NEMOTRON = TensorMap("model.", ARCEE.tensors + (
    tensor("blocks.{i}.ln1_beta", "layers.{i}.input_layernorm.bias"),
    tensor("blocks.{i}.ln2_beta", "layers.{i}.post_attention_layernorm.bias"),
    tensor("ln_f_beta", "norm.bias"),
))

# Apertus: Arcee's names, its norms called attention_layernorm and feedforward_layernorm, Qwen3's q/k norms, xIELU's
# two scalars and its two buffers β and ε (0-dimensional)
_APERTUS_NORMS = {"layers.{i}.input_layernorm.weight": "layers.{i}.attention_layernorm.weight",
                  "layers.{i}.post_attention_layernorm.weight": "layers.{i}.feedforward_layernorm.weight"}
APERTUS = TensorMap("model.", tuple(tensor(" ".join(t.keys), _APERTUS_NORMS.get(t.name, t.name), t.layout, t.top)
                                    for t in ARCEE.tensors) + (
    tensor("blocks.{i}.act_alpha_p", "layers.{i}.mlp.act_fn.alpha_p"),
    tensor("blocks.{i}.act_alpha_n", "layers.{i}.mlp.act_fn.alpha_n"),
    tensor("blocks.{i}.act_beta", "layers.{i}.mlp.act_fn.beta", SCALAR),
    tensor("blocks.{i}.act_eps", "layers.{i}.mlp.act_fn.eps", SCALAR),
), buffers=LLAMA.buffers)

# HunYuan: Llama's names, its q/k norms called query_layernorm and key_layernorm
_HUNYUAN_QK = {"layers.{i}.self_attn.q_norm.weight": "layers.{i}.self_attn.query_layernorm.weight",
               "layers.{i}.self_attn.k_norm.weight": "layers.{i}.self_attn.key_layernorm.weight"}
HUNYUAN = TensorMap("model.", tuple(tensor(" ".join(t.keys), _HUNYUAN_QK.get(t.name, t.name), t.layout, t.top)
                                    for t in LLAMA.tensors))

# BitNet: Llama's names and the two sub-norms
BITNET = TensorMap("model.", LLAMA.tensors + (
    tensor("blocks.{i}.attn_sub_norm_gamma", "layers.{i}.self_attn.attn_sub_norm.weight"),
    tensor("blocks.{i}.mlp_sub_norm_gamma", "layers.{i}.mlp.ffn_sub_norm.weight"),
), buffers=LLAMA.buffers)

# NanoChat: Llama's attention names, no norm weights, CLIP's fc1 and fc2
NANOCHAT = TensorMap("model.", (
    tensor("wte", "embed_tokens.weight"),
    *(tensor(f"blocks.{{i}}.w_{x}", f"layers.{{i}}.self_attn.{x}_proj.weight", LINEAR) for x in "qkvo"),
    *(tensor(f"blocks.{{i}}.b_{x}", f"layers.{{i}}.self_attn.{x}_proj.bias") for x in "qkvo"),
    tensor("blocks.{i}.w_up", "layers.{i}.mlp.fc1.weight", LINEAR),
    tensor("blocks.{i}.w_down", "layers.{i}.mlp.fc2.weight", LINEAR),
    tensor("lm_head", "lm_head.weight", LINEAR, top=True),
), buffers=LLAMA.buffers)

FAMILIES = (
    Family("helium", "Helium", _helium, LLAMA, TRAINING_ONLY),
    Family("arcee", "Arcee", _arcee, ARCEE, TRAINING_ONLY),
    Family("exaone", "EXAONE 3", _exaone, EXAONE, TRAINING_ONLY),
    Family("internlm3", "InternLM3", _internlm3, LLAMA, TRAINING_ONLY),
    Family("nemotron", "Nemotron", _nemotron, NEMOTRON, TRAINING_ONLY),
    Family("apertus", "Apertus", _apertus, APERTUS, TRAINING_ONLY),
    Family("apertus1p5_text", "Apertus 1.5 (text)", _apertus1p5_text, APERTUS, TRAINING_ONLY),
    Family("hunyuan_v1_dense", "HunYuan (dense)", hunyuan_dense, HUNYUAN, TRAINING_ONLY),
    Family("bitnet", "BitNet", _bitnet, BITNET, TRAINING_ONLY),
    Family("nanochat", "NanoChat", _nanochat, NANOCHAT, TRAINING_ONLY),
)
