"""Llama 4 (Scout, Maverick): `llama4_text`, and the `llama4` vision-language composite whose language model it is.

A Llama block with four departures, each a per-layer setting (transformers 5.24's Llama4TextConfig and
modeling_llama4.py):

- iRoPE: `no_rope_layers` marks each layer 1 (RoPE) or 0 (NoPE: no positions at all); absent or empty, every
  `no_rope_layer_interval`-th layer (default 4) is NoPE. RoPE turns the pairs (2i, 2i + 1) (its complex form),
  `rope_layout: interleaved`.
- Chunked local attention on the layers `layer_types` marks `chunked_attention` (default: the RoPE layers, when
  `attention_chunk_size` is set, 8192): a query sees only the keys of its own chunk (`block.attention_chunk`).
- On the RoPE layers, `use_qk_norm` (default true) normalises each head's rotated q and k by x/√(mean x² + ε)
  without weights (Llama4TextL2Norm, ε rms_norm_eps): `qk_norm: head_unscaled`, after RoPE. On the NoPE layers,
  `attn_temperature_tuning` (default true) multiplies the queries by 1 + attn_scale·ln(1 + ⌊(p + 1) / floor_scale⌋)
  (`query_scale` with `query_scale_offset: 1`).
- The MLP: a mixture on the layers `moe_layers` lists (absent: every `interleave_moe_layer_step`-th, from
  step − 1), the others dense SwiGLU MLPs `intermediate_size_mlp` wide. The mixture's router picks the top
  `num_experts_per_tok` of `num_local_experts` logits and weighs each by its sigmoid; the weight multiplies the
  expert's INPUT (`moe.scale_input`); a shared SwiGLU expert, `intermediate_size` wide like the routed ones, is
  added ungated.

Checkpoints hold the experts fused, `feed_forward.experts.gate_up_proj` (E, d, 2·d_e), gate | up along the last
axis, and `feed_forward.experts.down_proj` (E, d_e, d): the EXPERTS_SIDE_BY_SIDE layout. Llama4ForCausalLM adds no
load-balancing loss (its forward never reads router_aux_loss_coef), and its router never adds jitter.
"""

from __future__ import annotations

from typing import Any

from blockcli.families.common import TRAINING_ONLY, Composite, Family, gated_rms, override_layers, silu_gate
from blockcli.families.fields import Fields
from blockcli.families.llama import LLAMA, theta_default
from blockcli.tensor_names import EXPERTS_SIDE_BY_SIDE, LINEAR, TensorMap, tensor


def _flags(f: Fields, key: str, n_layers: int, what: str) -> list[int] | None:
    """A per-layer list of 0/1 flags (None when absent, null or empty, as Llama4TextConfig treats them); transformers
    reads the first n_layers, so a longer list is fine."""
    value = f.raw(key, None)
    if not value:
        return None
    if (not isinstance(value, list) or len(value) < n_layers
            or any(isinstance(v, bool) or v not in (0, 1) for v in value)):
        raise f.invalid(key, value, f"an array of at least {n_layers} flags, {what}")
    return list(value[:n_layers])


def _moe_layers(f: Fields, n_layers: int) -> set[int]:
    """The layers with a mixture: `moe_layers`, or every interleave_moe_layer_step-th from step − 1."""
    listed = f.raw("moe_layers", None)
    if listed is None:
        step = f.int("interleave_moe_layer_step", 1)
        return set(range(step - 1, n_layers, step))
    f.ignore("interleave_moe_layer_step")  # Llama4TextConfig reads it only without moe_layers
    if not isinstance(listed, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in listed):
        raise f.invalid("moe_layers", listed, "an array of layer indices")
    return {i for i in listed if 0 <= i < n_layers}


def _chunked(f: Fields, rotates: list[int], n_layers: int) -> list[bool]:
    """Which layers attend in chunks: `layer_types` (full_attention | chunked_attention), or by default the RoPE
    layers when attention_chunk_size is set."""
    types = f.raw("layer_types", None)
    if types is None:
        on = f.data.get("attention_chunk_size", 8192) is not None
        return [on and bool(r) for r in rotates]
    if not isinstance(types, list) or len(types) != n_layers:
        raise f.invalid("layer_types", types, f"an array of {n_layers} layer types")
    for item in types:
        if item not in ("full_attention", "chunked_attention"):
            raise f.unrepresentable("layer_types", item, "Llama 4's layers use full or chunked attention")
    return [t == "chunked_attention" for t in types]


def _llama4_text(f: Fields) -> tuple[dict, dict]:
    """Llama 4's language model (Llama4TextConfig): 40 heads and 8 K/V heads of 128, RoPE base 5e5, RMSNorm ε 1e-5,
    16 experts (top 1) by default; see the module docstring for its per-layer settings."""
    block, model = gated_rms(f, silu_gate, kv_default=8, tie_default=False, head_dim_default=128, mlp_bias=False,
                             eps_default=1e-5)
    theta_default(f, block, 5e5)
    n_layers = model["n_layers"]
    block["rope_layout"] = "interleaved"  # apply_rotary_emb: view_as_complex over (2i, 2i + 1)
    rotates = _flags(f, "no_rope_layers", n_layers, "1 (RoPE) or 0 (NoPE)")
    if rotates is None:
        interval = f.int("no_rope_layer_interval", 4)
        rotates = [int((i + 1) % interval != 0) for i in range(n_layers)]
    else:
        f.ignore("no_rope_layer_interval")
    chunked = _chunked(f, rotates, n_layers)
    chunk = f.data["attention_chunk_size"] if f.has("attention_chunk_size") else 8192  # null: no chunked layers
    if any(chunked):
        if chunk is None:
            raise f.invalid("attention_chunk_size", chunk, "a chunk size, since layer_types has chunked_attention "
                                                           "layers")
        chunk = f.int("attention_chunk_size", 8192)
    else:
        f.ignore("attention_chunk_size")
    qk_norm = f.bool("use_qk_norm", True)
    tuning = f.bool("attn_temperature_tuning", True)  # a number (4) is refused by Llama4TextConfig too
    scale, floor = f.float("attn_scale", 0.1, low=0.0, high=1e6, low_open=False), f.int("floor_scale", 8192)

    def attention(i: int) -> dict[str, Any]:  # every per-layer attention field, at its value or off
        normed, tuned = bool(rotates[i] and qk_norm), bool(not rotates[i] and tuning and scale)
        return {"rope": bool(rotates[i]), "attention_chunk": chunk if chunked[i] else 0,
                "qk_norm": "head_unscaled" if normed else "none", "qk_norm_after_rope": normed,
                "query_scale": scale if tuned else 0.0, "query_scale_length": floor if tuned else 0,
                "query_scale_offset": 1 if tuned else 0}

    d_e = block["d_ff"]  # intermediate_size: each routed expert's and the shared expert's width
    dense_width = f.int("intermediate_size_mlp", 16384)
    moe = {"n_experts": f.int("num_local_experts", 16), "top_k": f.int("num_experts_per_tok", 1), "d_expert": d_e,
           "scoring": "sigmoid", "d_shared": d_e, "scale_input": True}
    sparse = _moe_layers(f, n_layers)
    layers = [{**attention(i), "moe": moe if i in sparse else None, "d_ff": d_e if i in sparse else dense_width}
              for i in range(n_layers)]
    # the base block: the first RoPE layer's attention (so that RoPE's settings have a rotating block to live in)
    # and the mixture if any layer has one (checkpoints' expert tensors are expected by it); every layer's
    # differences from it are overrides
    mlp = layers[min(sparse)] if sparse else layers[0]
    base = {**layers[rotates.index(1) if any(rotates) else 0], "moe": mlp["moe"], "d_ff": mlp["d_ff"]}
    if not any(rotates):  # no layer rotates: the model has no positions
        base["rope"] = block["rope"] = False
        block.pop("rope_layout")
        block.pop("rope_scaling", None)
        model["positions"] = "none"
    block.update({k: v for k, v in base.items() if k != "rope" and v is not None and v != "none" and v != 0})
    for i, settings in enumerate(layers):
        differs = {k: v for k, v in settings.items() if v != base[k]}
        if differs:
            override_layers(f, [i], differs)
    return block, model



# Llama 4's names: Llama's attention and norms; feed_forward the mixture (router, experts fused, shared_expert) or
# the dense MLP (gate_proj, up_proj, down_proj)
LLAMA4 = TensorMap("model.", tuple(t for t in LLAMA.tensors if ".mlp." not in t.name and "_norm.weight" not in t.name
                                   or "layernorm" in t.name) + (
    tensor("blocks.{i}.router", "layers.{i}.feed_forward.router.weight", LINEAR),
    tensor("blocks.{i}.experts.{e}.w_gate blocks.{i}.experts.{e}.w_up", "layers.{i}.feed_forward.experts.gate_up_proj",
           EXPERTS_SIDE_BY_SIDE),
    tensor("blocks.{i}.experts.{e}.w_down", "layers.{i}.feed_forward.experts.down_proj", EXPERTS_SIDE_BY_SIDE),
    *(tensor(f"blocks.{{i}}.shared_w_{x}", f"layers.{{i}}.feed_forward.shared_expert.{x}_proj.weight", LINEAR)
      for x in ("gate", "up", "down")),
    *(tensor(f"blocks.{{i}}.w_{x}", f"layers.{{i}}.feed_forward.{x}_proj.weight", LINEAR) for x in ("gate", "up", "down")),
), buffers=LLAMA.buffers)

COMPOSITES = (
    # Llama 4 Scout and Maverick as released: a vision tower and projector beside the language model, which
    # Llama4ForConditionalGeneration holds as language_model (model.embed_tokens …, lm_head), a Llama4ForCausalLM
    # whose own config, text_config, ties its head (or not): the top-level tie_word_embeddings is not read
    Composite("llama4", "Llama 4 (vision-language)", "llama4_text", False, frozenset({
        "vision_config", "boi_token_index", "eoi_token_index", "image_token_index"}),
              # Llama4TextConfig's sizes (its other defaults are _llama4_text's)
              {"vocab_size": 202048, "hidden_size": 5120, "intermediate_size": 8192, "num_hidden_layers": 48,
               "num_attention_heads": 40, "max_position_embeddings": 131072},
              tie="text", bases=("language_model.model.",), heads=("language_model.",),
              aside=("vision_model.", "multi_modal_projector.")),
)

FAMILIES = (
    Family("llama4_text", "Llama 4", _llama4_text, LLAMA4, TRAINING_ONLY | {"output_router_logits"},
           unread={"router_aux_loss_coef": "Llama4ForCausalLM adds no load-balancing loss",
                   "router_jitter_noise": "Llama4Router adds no jitter",
                   "for_llm_compressor": "a flag of Meta's quantization tooling; no Llama 4 module reads it"}),
)
