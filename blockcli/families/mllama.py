"""Llama 3.2 Vision (Mllama): a Llama language model with tanh-gated cross-attention layers to the image's states.

MllamaTextConfig (`mllama_text_model`, the `text_config` of an `mllama` config): Llama's self-attention layers (8 K/V
heads of hidden_size / heads, no biases, RoPE base 500,000, RMSNorm eps 1e-5) and, at `cross_attention_layers` (by
default 3, 8, …, 38 of 40), cross-attention layers: Q, K, V and O as wide as the self-attention's, an RMSNorm over
each head's d_h on Q and on K, both norms, the MLP and a tanh gate on each branch. A text-only pass has no image
states, and transformers skips those layers (MllamaTextModel.forward): blockcli counts and loads them
(`block.cross_attention`) and runs them as the identity. The token embedding holds 8 rows past the vocabulary, which
the LM head does not output (`model.extra_token_rows`).
"""

from __future__ import annotations

from blockcli.config import ConfigError
from blockcli.families.common import Composite, Family, gated_rms, override_layers, silu_gate
from blockcli.families.fields import Fields
from blockcli.families.llama import LLAMA, theta_default
from blockcli.tensor_names import TensorMap, tensor

CROSS_DEFAULT = [3, 8, 13, 18, 23, 28, 33, 38]  # MllamaTextConfig's cross_attention_layers when null


def _mllama_text(f: Fields) -> tuple[dict, dict]:
    f.neutral("tie_word_embeddings", False, "Mllama's token embedding holds 8 rows more than its LM head outputs")
    d, heads = f.int("hidden_size"), f.int("num_attention_heads")
    if f.data.get("head_dim") is not None and f.data["head_dim"] * heads != d:
        raise f.unrepresentable("head_dim", f.data["head_dim"], "Mllama's attention heads are hidden_size / "
                                                               "num_attention_heads wide, whatever head_dim says")
    f.ignore("head_dim", "dropout")  # dropout: the attention probabilities', in training only
    block, model = gated_rms(f, silu_gate, kv_default=8, tie_default=False, qkv_bias=False, out_bias=False,
                             mlp_bias=False, eps_default=1e-5)
    theta_default(f, block, 500_000.0)
    model["extra_token_rows"] = 8
    n = model["n_layers"]
    cross = f.raw("cross_attention_layers", None)
    cross = CROSS_DEFAULT if cross is None else cross
    if not (isinstance(cross, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in cross)):
        raise f.invalid("cross_attention_layers", cross, "a list of layer indices")
    layers = sorted({i for i in cross if 0 <= i < n})  # transformers tests `idx in cross_attention_layers`
    if len(layers) == n:
        raise ConfigError(f"{f.where}: field 'cross_attention_layers' names every layer: a text-only pass would skip "
                          f"them all")
    if layers:
        override_layers(f, layers, {"cross_attention": True, "qk_norm": "head", "rope": False})
    return block, model


def _either(name: str) -> str:
    """A self-attention layer's tensor name, or the cross-attention layer's (cross_attn)."""
    return f"{name}|{name.replace('self_attn', 'cross_attn')}" if "self_attn" in name else name


MLLAMA_TEXT = TensorMap("model.", (
    *(tensor(" ".join(t.keys), _either(t.name), t.layout, t.top) for t in LLAMA.tensors
      if "_norm_gamma" not in t.keys[0] and not t.keys[0].startswith("blocks.{i}.b_")),
    tensor("blocks.{i}.q_norm_gamma", "layers.{i}.cross_attn.q_norm.weight"),
    tensor("blocks.{i}.k_norm_gamma", "layers.{i}.cross_attn.k_norm.weight"),
    tensor("blocks.{i}.cross_attn_gate", "layers.{i}.cross_attn_attn_gate"),
    tensor("blocks.{i}.cross_mlp_gate", "layers.{i}.cross_attn_mlp_gate"),
), buffers=LLAMA.buffers)

FAMILIES = (
    Family("mllama_text_model", "Mllama language model", _mllama_text, MLLAMA_TEXT, frozenset()),
)

COMPOSITES = (
    # Llama 3.2 Vision: its vision encoder and projector beside the language model (transformers 5:
    # model.language_model. and lm_head; the original checkpoints: language_model.model. and language_model.lm_head)
    Composite("mllama", "Llama 3.2 Vision", "mllama_text_model", False, frozenset({"vision_config",
                                                                                  "image_token_index"}),
              # MllamaTextConfig's sizes (its other defaults are _mllama_text's)
              {"vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 40,
               "num_attention_heads": 32, "max_position_embeddings": 131072}, tie="text",
              aside=("vision_model.", "multi_modal_projector.", "model.vision_model.", "model.multi_modal_projector."),
              remark="a text-only pass skips its cross-attention layers (counted, run as the identity)"),
)
