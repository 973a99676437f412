"""Dory (NVIDIA Nemotron-Labs Dory): a looped normalized transformer (nGPT), as transformers' modular_dory.py writes it
on AFMoE's attention, Gemma 2's sandwich layer and Llama 4's L2 norm.

Every norm projects onto the unit sphere, x/√(Σx² + 1e-6) without a scale (block.norm l2norm); the layer is Gemma 2's
sandwich, but each residual add an interpolation from the normalised input, h = n + |λ·α/σ|⊙(branch − n) (block.ngpt;
σ the config's initializer_range, α its ngpt_alpha_init); AFMoE's gated attention with unit-norm queries and keys per
head before RoPE, the rotated queries times (s_qk·√d_h/σ)² per channel, the gate σ(x·W_gate ⊙ (s_gate·d^¼/σ)²) and the
gated heads normalised before W_O; a SwiGLU MLP whose gate and up are times s_uv·√d per channel and whose hidden is
normalised before W_down. RoPE on every layer, one base per layer type (rope_parameters.sliding_attention 10,000,
.full_attention 10⁷), the window (1024) on the sliding ones (every layer but each fourth by default). The layers
[n_input_layers, + n_recurrent_layers) run n_recurrent_loops times with the same weights, each pass from
norm(h) + norm(x_in) (model.recurrent_*); the logits times a learned (V,) scale / σ (model.logit_scale).
Released config.json files list each layer as an attention and an mlp entry of layer_types, with every layer count
doubled: read as DoryConfig reads them (halved).
"""

from __future__ import annotations

from blockcli.families.common import TRAINING_ONLY, Family, layer_type_ropes, refuse_nulls, sliding_layers, with_data
from blockcli.families.afmoe import typed_rope_block
from blockcli.families.fields import Fields
from blockcli.families.llama import LLAMA
from blockcli.tensor_names import LINEAR, SAME, TensorMap, tensor

_LAYER_COUNTS = ("num_hidden_layers", "n_input_layers", "n_recurrent_layers", "n_output_layers")


def _released_layout(f: Fields) -> Fields:
    """DoryConfig.__post_init__: layer_types naming "mlp" blocks is the released layout, each (attention, mlp) pair
    one layer and every layer count doubled: halved here, as transformers reads it."""
    types = f.raw("layer_types", None)
    if not isinstance(types, list) or "mlp" not in types:
        return f
    data = dict(f.data)
    data["layer_types"] = types[::2]
    for key in _LAYER_COUNTS:
        value = data.get(key, {"num_hidden_layers": 36, "n_input_layers": 8, "n_output_layers": 8}.get(key))
        if isinstance(value, int) and not isinstance(value, bool):
            data[key] = value // 2
    return with_data(f, data)


def _dory(f: Fields) -> tuple[dict, dict]:
    """Dory: see the module's docstring."""
    refuse_nulls(f, "head_dim", "num_key_value_heads", "sliding_window", "n_input_layers", "n_output_layers",
                 "n_recurrent_loops", "initializer_range", "ngpt_alpha_init")
    f = _released_layout(f)
    if f.bool("attention_bias", False):  # q/k/v/o biased, but gate_proj never is
        raise f.unrepresentable("attention_bias", True, "Dory's attention gate has no bias beside biased q/k/v; "
                                "blockcli's gate takes the q/k/v bias setting")
    mode = f.raw("recurrent_kv_cache_mode", "per_loop")
    if mode != "per_loop":
        raise f.unrepresentable("recurrent_kv_cache_mode", mode, "blockcli keeps one K/V cache per recurrent loop "
                                                                 "(per_loop)")
    sigma = f.float("initializer_range", 0.0177, high=1e6)
    alpha = f.float("ngpt_alpha_init", 0.05, high=1e6)
    n = f.int("num_hidden_layers", 36)
    types = f.raw("layer_types", None)
    if types is None:
        types = ["full_attention" if (i + 1) % 4 == 0 else "sliding_attention" for i in range(n)]
        f = with_data(f, {**f.data, "layer_types": types})
    if not isinstance(types, list) or len(types) != n or any(t not in ("full_attention", "sliding_attention")
                                                             for t in types):
        raise f.invalid("layer_types", types, f"an array of {n} layer types, full_attention or sliding_attention "
                                              f"(or the released layout with mlp entries)")
    f.ignore("layer_types")
    sliding = [t == "sliding_attention" for t in types]
    defaults = {kind: {"rope_type": "default", "rope_theta": _THETAS[kind]} for kind in set(types)}
    block, model, f = typed_rope_block(f, defaults, "Dory", kv_default=4, tie_default=False, head_dim_default=256,
                                       qkv_bias=False, out_bias=False, mlp_bias=None, eps_default=1e-6)
    f.ignore("rms_norm_eps")  # not a DoryConfig field: its L2 norms' eps is Llama4TextL2Norm's 1e-6
    block.update(norm="l2norm", norm_eps=1e-6, norm_scale=False, placement="sandwich", qk_norm="head_unscaled",
                 attention_gate=True, sub_norms=True,
                 ngpt={"alpha": alpha / sigma, "qk": block["head_dim"] ** 0.5 / sigma,
                       "gate": block["d_model"] ** 0.25 / sigma, "mlp": block["d_model"] ** 0.5})
    sliding_layers(f, block, sliding, default=1024)
    if f.has("rope_parameters") and not all(k in ("full_attention", "sliding_attention")
                                            for k in (f.data["rope_parameters"] or {})):
        raise f.invalid("rope_parameters", f.data["rope_parameters"], "one RoPE object per layer type "
                                                                      "(full_attention, sliding_attention)")
    params = dict(f.data["rope_parameters"])
    for kind in ("full_attention", "sliding_attention"):  # a layer type absent from layer_types has no RoPE of its own
        params.setdefault(kind, {"rope_type": "default", "rope_theta": _THETAS[kind]})
    f = with_data(f, {**f.data, "rope_parameters": params})
    layer_type_ropes(f, block, model, sliding, (_THETAS["full_attention"], "rope_theta", _THETAS["sliding_attention"]),
                     "Dory")
    n_in, n_out = f.int("n_input_layers", 8, minimum=0), f.int("n_output_layers", 8, minimum=0)
    rest = n - n_in - n_out
    n_rec = f.int("n_recurrent_layers", rest, minimum=0) if f.raw("n_recurrent_layers", None) is not None else rest
    f.ignore("n_recurrent_layers")
    if n_in + n_rec + n_out != n:
        raise f.invalid("n_recurrent_layers", n_rec, f"n_input_layers + n_recurrent_layers + n_output_layers = "
                                                     f"num_hidden_layers ({n})")
    model.update(recurrent_start=n_in, recurrent_layers=n_rec, recurrent_loops=f.int("n_recurrent_loops", 2),
                 logit_scale=1.0 / sigma)
    if not n_rec:
        model.pop("recurrent_layers")
    return block, model


_THETAS = {"sliding_attention": 10000.0, "full_attention": 10000000.0}


def _both(name: str) -> str:
    """A base-model name as transformers 5 saves Dory (backbone., embeddings, g_proj) or holds it (model.)."""
    saved = name.replace("embed_tokens.", "embeddings.").replace("self_attn.gate_proj.", "self_attn.g_proj.")
    return f"backbone.{saved}|model.{name}"


# Dory: Llama's projections and MLP with AFMoE's gate, no norm weights; the nGPT scales under the attention (sqk,
# s_gate), the MLP (suv_gate, suv_up) and the layer (lambda_1, lambda_2); the logit scale beside the LM head. Read under
# the names save_pretrained writes (backbone.embeddings, self_attn.g_proj) and transformers' own (model.embed_tokens,
# self_attn.gate_proj); the released two-block layout (layers.{2i}.mixer …, layers.{2i+1}.mixer …) is not read
DORY = TensorMap("", tuple(
    tensor(" ".join(t.keys), _both(t.name), t.layout, top=True)
    for t in LLAMA.tensors if "norm" not in t.name and not t.top) + tuple(
    tensor(keys, _both(name), layout, top=True) for keys, name, layout in (
        ("blocks.{i}.w_attn_gate", "layers.{i}.self_attn.gate_proj.weight", LINEAR),
        ("blocks.{i}.s_qk", "layers.{i}.self_attn.sqk", SAME),
        ("blocks.{i}.s_gate", "layers.{i}.self_attn.s_gate", SAME),
        ("blocks.{i}.s_uv_gate", "layers.{i}.mlp.suv_gate", SAME),
        ("blocks.{i}.s_uv_up", "layers.{i}.mlp.suv_up", SAME),
        ("blocks.{i}.lambda_1", "layers.{i}.lambda_1", SAME),
        ("blocks.{i}.lambda_2", "layers.{i}.lambda_2", SAME))) + (
    tensor("lm_head", "lm_head.weight", LINEAR, top=True),
    tensor("logit_scale", "lm_head.logit_scale", top=True),
))

FAMILIES = (
    Family("dory", "Dory", _dory, DORY, TRAINING_ONLY),
)
