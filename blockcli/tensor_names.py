"""How a checkpoint's tensor names map onto blockcli's parameter keys: the layouts and the table types.

A checkpoint saved by Hugging Face transformers names its tensors after the family's modules
(`model.layers.0.self_attn.q_proj.weight`); blockcli's `Model` calls the same array
`blocks.0.w_q`, shaped (in, out). Each family (blockcli/families/) declares one `TensorMap`: for every
stored tensor, the blockcli key (or keys, for a fused tensor) it fills and the layout it is stored in:

    SAME      stored exactly as blockcli holds it: vectors, embedding tables (V, d), and GPT-2's
              Conv1D matrices, which are already (in, out)
    LINEAR    torch.nn.Linear's (out, in): transposed on load
    SPLIT     GPT-2's `c_attn`: Q | K | V side by side along the last axis (Conv1D layout)
    FUSED     nn.Linear whose output rows are its keys' outputs one after another, each as wide as
              that key's output (so unequal widths are fine): Phi-3's `qkv_proj` Q | K | V with
              fewer K/V heads, its `gate_up_proj` gate | up
    STACKED   its keys, each in blockcli's own layout, one after another along the first axis: DBRX's expert
              `w2` (E·d_e, d), expert e's down projection (d_e, d) its rows e·d_e … (e + 1)·d_e − 1 (its `w1` and
              `v1` are FUSED: nn.Linear's (out, in) blocks)
    ROW       a vector stored as a one-row matrix (1, n): ERNIE 4.5's e_score_correction_bias (1, E)
    SCALAR    a number stored as a 0-dimensional tensor, held as (1,): xIELU's β and ε buffers (Apertus)
    PER_HEAD  a vector of one number per head stored (1, 1, h, 1), broadcast over (B, T, h, d): Kimi Delta
              Attention's A_log
    GROUPED_QKV  nn.Linear whose output rows are grouped per K/V head: each group is its h/h_kv
              query heads, then its K head, then its V head, [q…q k v | q…q k v | …], each d_h
              wide. One K/V head (multi-query) makes it Q | K | V; h_kv = h makes it GPT-NeoX's
              [q_i k_i v_i]: GPT-NeoX's, Falcon's `query_key_value` and GPTBigCode's `c_attn`, in
              every variant
    SHARDED_QVK  nn.Linear whose output rows are 4 shards (the model-parallel shards CodeGen was trained on),
              each a quarter of Q, then of V, then of K: [q₀ v₀ k₀ | q₁ v₁ k₁ | …], each d/4 rows: CodeGen's
              `qkv_proj`

    GROUPED_HEADS  nn.Linear whose output rows are grouped per attention head: each group holds each key's
              share (its width / h) one after another: Qwen3-Next's q_proj, [q_i (d_h) | gate_i (d_h)] per head
    GROUPED_KEY_HEADS  the same grouping per linear-attention key head (h_k groups): Qwen3-Next's
              in_proj_qkvz, [q_i k_i v_i z_i] per key head (v_i, z_i the r value heads it serves), and
              in_proj_ba, [b_i a_i]
    DEPTHWISE nn.Conv1d's depthwise (C, 1, K) weight, held as (C, K); with several keys, their channels one after
              another (transformers' in-memory Kimi-Linear conv1d: q | k | v)
    HEAD_ROW  one row of a (heads, n) key, each head's row its own stored vector (n,): `{h}` in the name is the
              head, one tensor per row of the key's shape; StableLM 2's per-head LayerNorms
              `q_layernorm.norms.{h}.weight`, gathered into q_norm_gamma (h, d_h) and k_norm_gamma (h_kv, d_h)

A name `a|b` is stored under either (Falcon's norms are named by its block layout); a layout `a|b`
is either, the one the stored shape fits (the first when both do).
Names are relative to the family's base model (`prefix`): transformers saves
`transformer.h.0...` from GPT2LMHeadModel but `h.0...` from GPT2Model, and both are read. A
tensor marked `top` (the LM head) lives outside the base model. `{i}` is the layer index.
A tensor the config does not call for (a bias of a bias-free config, the LM head of a tied
model) is simply not expected. `buffers` are stored tensors that are not parameters (causal-mask
and rotary-frequency buffers of older checkpoints): recognised, never loaded.
A mixture of experts adds three layouts:

    EXPERTS   a mixture's experts fused into one 3-D tensor (E, out, in), as transformers 5 holds them
              (and saves them with save_original_format=False): expert e's slice is nn.Linear's
              (out, in), its rows the keys' outputs one after another (gate_up_proj: gate | up)

    EXPERTS_INTERLEAVED  the experts stacked along the first axis, each in blockcli's own layout ((in, out)
              matrices, vectors), its keys interleaved along the last axis: gpt-oss's `gate_up_proj`
              (E, d, 2·d_e), gate in the even columns and up in the odd ones; with one key, plain
              stacking (`down_proj` (E, d_e, d), the biases (E, d))
    EXPERTS_SIDE_BY_SIDE  the same stacking, each expert's keys one after another along the last axis:
              Qwen3-VL-MoE's `gate_up_proj` (E, d, 2·d_e) as its checkpoints store it, gate | up

`{e}` is an expert's index: a name with `{e}` is one tensor per expert (as save_pretrained writes
them, `experts.{e}.w1.weight`); keys with `{e}` in a name without it are all experts' in one fused
tensor. Either form may be stored: the one found covers the keys, the other is not expected.

A vision-language model (Gemma 3 4B and up) stores its language model under another path:
`language_model.model.layers.0...` and `language_model.lm_head.weight` as transformers 4 saved
it, `model.language_model.layers.0...` and `lm_head.weight` as transformers 5 does (Qwen2-VL and
its successors: `model.layers.0...` as transformers 4 saved them, and the tower under `visual.`).
`nested` turns the language model's own map into that one, under the paths its `Composite` names;
the vision tower's and projector's tensors are `aside`: recognised, counted in a note, never loaded.
"""

from __future__ import annotations

from dataclasses import dataclass

SAME, LINEAR, SPLIT, FUSED, GROUPED_QKV = "same", "linear", "split", "fused", "grouped_qkv"
STACKED = "stacked"
GROUPED_HEADS, GROUPED_KEY_HEADS, DEPTHWISE = "grouped_heads", "grouped_key_heads", "depthwise"
ROW, SCALAR, PER_HEAD, HEAD_ROW = "row", "scalar", "per_head", "head_row"
SHARDED_QVK, QVK_SHARDS = "sharded_qvk", 4
EXPERTS, EXPERTS_INTERLEAVED, EXPERTS_SIDE_BY_SIDE = "experts", "experts_interleaved", "experts_side_by_side"


@dataclass(frozen=True)
class Tensor:
    keys: tuple[str, ...]  # blockcli keys it fills: one, or Q, K, V for a fused tensor
    name: str  # the stored name, relative to the base model unless `top`
    layout: str = SAME
    top: bool = False
    row: int = -1  # HEAD_ROW: the row of its key it fills (the head in its name); -1: the whole key


@dataclass(frozen=True)
class TensorMap:
    prefix: str  # the base model's attribute path in the *ForCausalLM checkpoint
    tensors: tuple[Tensor, ...]
    buffers: tuple[str, ...] = ()  # name patterns ({i} = a layer index) of non-parameter tensors
    aside: tuple[str, ...] = ()  # name prefixes of the parts blockcli does not model (a vision tower)
    # what stored layers past the model's last are (DeepSeek-V3's multi-token-prediction layers, which
    # transformers skips too): set aside with a note; empty: such a layer's tensors are unexpected
    extra_layers: str = ""


def nested(tmap: TensorMap, bases: tuple[str, ...], heads: tuple[str, ...], aside: tuple[str, ...]) -> TensorMap:
    """The map of a language model saved inside a vision-language model: every name under each of
    the paths it may have there, its base's under `bases`, its LM head's under `heads` (absolute names,
    so `top`), and the parts under `aside` set aside."""
    def renamed(entry: Tensor) -> Tensor:
        paths = heads if entry.top else bases
        names = "|".join(path + name for name in entry.name.split("|") for path in paths)
        return Tensor(entry.keys, names, entry.layout, top=True)

    return TensorMap("", tuple(map(renamed, tmap.tensors)),
                     tuple(path + pattern for pattern in tmap.buffers for path in bases), aside)


def tensor(keys: str, name: str, layout: str = SAME, top: bool = False) -> Tensor:
    """A table row: `keys` is space-separated (several for a fused tensor)."""
    return Tensor(tuple(keys.split()), name, layout, top)


QKV = "blocks.{i}.w_q blocks.{i}.w_k blocks.{i}.w_v"
QKV_BIAS = "blocks.{i}.b_q blocks.{i}.b_k blocks.{i}.b_v"
