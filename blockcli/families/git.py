"""GIT (GenerativeImage2Text, Microsoft): a BERT-style text decoder whose causal language model reads image features.

GitConfig keeps the text decoder's fields at its top level beside `vision_config`. The decoder is BERT's post-norm
layer run causally: learned positions added to the token embeddings, then a LayerNorm of them (eps
`layer_norm_eps`, 1e-12); each layer LN1(x + attention(x)), LN2(h + MLP(h)) with biases everywhere and a plain MLP
of `hidden_act` (GELU); no final norm; the LM head (`output`, biased) untied by default. Its image encoder and the
projection of its features (`git.image_encoder.`, `git.visual_projection.`, with `num_image_with_embedding` the
per-frame embeddings `git.img_temporal_embedding.`) are set aside: without pixel values the text runs alone.
"""

from __future__ import annotations

from blockcli.families.common import Family, divides, model_section, plain_activation
from blockcli.families.fields import Fields
from blockcli.tensor_names import LINEAR, TensorMap, tensor

ASIDE_NOTE = ("its vision tower and multimodal projector are not counted or run (the image encoder, the visual "
              "projection)")


def _git(f: Fields) -> tuple[dict, dict]:
    d, heads = f.int("hidden_size"), f.int("num_attention_heads")
    block = {
        "d_model": d, "n_heads": heads, "n_kv_heads": heads, "head_dim": divides(f, "hidden_size", d,
                                                                                 "num_attention_heads", heads),
        "d_ff": f.int("intermediate_size"), "norm": "layernorm", "norm_eps": f.float("layer_norm_eps", 1e-12),
        "activation": plain_activation(f, "hidden_act", "gelu"), "bias": True, "placement": "post", "rope": False,
    }
    model = model_section(f.int("num_hidden_layers"), f.int("vocab_size"), "learned",
                          f.int("max_position_embeddings"), f.bool("tie_word_embeddings", False), final_norm=False)
    model.update(embedding_norm=True, lm_head_bias=True)
    f.ignore("vision_config", "num_image_with_embedding")  # the image side, set aside
    f.said.append(f"the language model of a GIT model: {ASIDE_NOTE}")
    return block, model


_LAYER = "encoder.layer.{i}."
GIT = TensorMap("git.", (
    tensor("wte", "embeddings.word_embeddings.weight"),
    tensor("wpe", "embeddings.position_embeddings.weight"),
    tensor("emb_ln_gamma", "embeddings.LayerNorm.weight"),
    tensor("emb_ln_beta", "embeddings.LayerNorm.bias"),
    *(tensor(f"blocks.{{i}}.{kind}_{x}", f"{_LAYER}attention.self.{name}.{part}", *((LINEAR,) if kind == "w" else ()))
      for x, name in (("q", "query"), ("k", "key"), ("v", "value")) for kind, part in (("w", "weight"), ("b", "bias"))),
    tensor("blocks.{i}.w_o", f"{_LAYER}attention.output.dense.weight", LINEAR),
    tensor("blocks.{i}.b_o", f"{_LAYER}attention.output.dense.bias"),
    tensor("blocks.{i}.ln1_gamma", f"{_LAYER}attention.output.LayerNorm.weight"),
    tensor("blocks.{i}.ln1_beta", f"{_LAYER}attention.output.LayerNorm.bias"),
    tensor("blocks.{i}.w_up", f"{_LAYER}intermediate.dense.weight", LINEAR),
    tensor("blocks.{i}.b_up", f"{_LAYER}intermediate.dense.bias"),
    tensor("blocks.{i}.w_down", f"{_LAYER}output.dense.weight", LINEAR),
    tensor("blocks.{i}.b_down", f"{_LAYER}output.dense.bias"),
    tensor("blocks.{i}.ln2_gamma", f"{_LAYER}output.LayerNorm.weight"),
    tensor("blocks.{i}.ln2_beta", f"{_LAYER}output.LayerNorm.bias"),
    tensor("lm_head", "output.weight", LINEAR, top=True),
    tensor("lm_head_bias", "output.bias", top=True),
), aside=("git.image_encoder.", "git.visual_projection.", "git.img_temporal_embedding."))

FAMILIES = (
    Family("git", "GIT", _git, GIT, frozenset({"hidden_dropout_prob", "attention_probs_dropout_prob"})),
)
