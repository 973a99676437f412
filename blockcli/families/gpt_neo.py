"""GPT-Neo (EleutherAI): GPT-2's pre-LN block with separate q/k/v projections (no biases on them), unscaled
attention scores, and local attention (a window) on the layers `attention_types` marks.
"""

from __future__ import annotations

from typing import Any

from blockcli.config import ConfigError
from blockcli.families.common import Family, bias_groups, divides, model_section, plain_activation, window_width
from blockcli.families.fields import Fields
from blockcli.families.gpt2 import GPT_BIGCODE
from blockcli.tensor_names import LINEAR, TensorMap, tensor


def _attention_kinds(f: Fields, n_layers: int) -> list[str]:
    """`attention_types` ([[kinds, repeats], ...], GPTNeoConfig's [[["global", "local"], 12]] by default) as
    one kind per layer, as GPTNeoConfig.expand_attention_types_params spells it out."""
    types: Any = f.raw("attention_types", [[["global", "local"], 12]])
    kinds: list[str] = []
    for item in types if isinstance(types, list) else [None]:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], list)
                and isinstance(item[1], int) and not isinstance(item[1], bool) and 0 <= item[1] <= n_layers):
            raise f.invalid("attention_types", types, 'a list of [kinds, repeats] pairs such as [[["global", '
                                                      '"local"], 12]]')
        for kind in item[0]:
            if kind not in ("global", "local"):
                raise f.invalid("attention_types", kind, "'global' or 'local'")
        kinds.extend(item[0] * item[1])
    if len(kinds) != n_layers:
        raise ConfigError(f"{f.where}: field 'attention_types' spells out {len(kinds)} layers; expected 'num_layers' = "
                          f"{n_layers}")
    return kinds


def _gpt_neo(f: Fields) -> tuple[dict, dict]:
    """GPT-Neo: LayerNorm with shift, q/k/v without biases and out_proj, c_fc, c_proj with them, a plain MLP of
    `activation_function` (intermediate_size, 4·hidden_size when null), learned positions, a tied head; the
    scores are Q·Kᵀ without 1/√d_h (`attention_scale: 1`); the "local" layers see the last `window_size` keys."""
    d, heads, n_layers = f.int("hidden_size"), f.int("num_heads"), f.int("num_layers")
    block = {
        "d_model": d, "n_heads": heads, "n_kv_heads": heads, "head_dim": divides(f, "hidden_size", d, "num_heads", heads),
        "d_ff": f.int("intermediate_size", 4 * d), "norm": "layernorm", "norm_eps": f.float("layer_norm_epsilon", 1e-5),
        "activation": plain_activation(f, "activation_function", "gelu_new"),
        "bias": bias_groups(False, True, True, True), "placement": "pre", "rope": False, "attention_scale": 1.0,
    }
    model = model_section(n_layers, f.int("vocab_size"), "learned", f.int("max_position_embeddings"),
                          f.bool("tie_word_embeddings", True))
    local = [kind == "local" for kind in _attention_kinds(f, n_layers)]
    f.ignore("attention_layers")  # GPTNeoConfig recomputes it from attention_types, whatever the file says
    window = window_width(f, "window_size", f.int("window_size", 256)) if any(local) else 0
    if local[0]:
        block["sliding_window"] = window
    others = [i for i, kind in enumerate(local) if kind != local[0]]
    if others:
        f.layers.append({"indices": others, "block": {"sliding_window": 0 if local[0] else window}})
    else:
        f.ignore("window_size")
    return block, model


# GPTBigCode's names (nn.Linear layers: wte, wpe, ln_1, ln_2, mlp.c_fc, mlp.c_proj, ln_f) with GPT-Neo's attention
_ATTENTION = (
    *(tensor(f"blocks.{{i}}.w_{x}", f"h.{{i}}.attn.attention.{x}_proj.weight", LINEAR) for x in "qkv"),
    tensor("blocks.{i}.w_o", "h.{i}.attn.attention.out_proj.weight", LINEAR),
    tensor("blocks.{i}.b_o", "h.{i}.attn.attention.out_proj.bias"),
)
GPT_NEO = TensorMap("transformer.", tuple(t for t in GPT_BIGCODE.tensors if ".attn." not in t.name) + _ATTENTION,
                    buffers=("h.{i}.attn.attention.bias", "h.{i}.attn.attention.masked_bias"))  # older files' masks


FAMILIES = (
    Family("gpt_neo", "GPT-Neo", _gpt_neo, GPT_NEO, frozenset({
        "attention_dropout", "embed_dropout", "resid_dropout",  # training-only dropout
        "classifier_dropout",  # GPTNeoForTokenClassification's, not part of the LM
    }), padding_idx=False),
)
