"""DiffLlama (`diffllama`): Llama's block with differential attention (`block.differential`, blockcli/differential.py).

Llama's attention (q/k/v/o biases by `attention_bias`), RoPE, RMSNorm (eps `rms_norm_eps`, 1e-5 by default, which
the differential heads' parameter-free RMSNorm reads too), Llama's gated MLP without biases (`hidden_act`), untied by
default. Each layer l has four learned λ vectors (`self_attn.lambda_q1` … `lambda_k2`, head_dim each) and λ_init
0.8 − 0.6·exp(−0.3·l) (transformers' lambda_init_fn): layer 0's on the block, the others as `layers:` overrides.
`num_key_value_heads` must be even (DiffLlamaAttention splits the values along the K/V heads) and
`attention_dropout` 0 (it refuses any other); `lambda_std_dev` only initialises the λ vectors.
"""

from __future__ import annotations

import math

from blockcli.families.common import Family, gated_rms, override_layers, silu_gate
from blockcli.families.fields import Fields
from blockcli.families.llama import LLAMA
from blockcli.tensor_names import TensorMap, tensor


def lambda_init(layer: int) -> float:
    """DiffLlama's λ_init of layer `layer` (transformers' lambda_init_fn)."""
    return 0.8 - 0.6 * math.exp(-0.3 * layer)


def _diffllama(f: Fields) -> tuple[dict, dict]:
    """DiffLlama: DiffLlamaConfig's defaults (d 2048, 16 layers, 32 heads, K/V heads as many, d_ff 8192, RMSNorm
    eps 1e-5, vocabulary 32000, 2048 positions, untied) with differential attention in every layer."""
    block, model = gated_rms(f, silu_gate, kv_default=None, tie_default=False, mlp_bias=False, eps_default=1e-5)
    if block["n_kv_heads"] % 2:
        raise f.unrepresentable("num_key_value_heads", block["n_kv_heads"], "DiffLlama splits the values into two "
                                "halves of K/V heads: it needs an even number (transformers refuses an odd one too)")
    if f.float("attention_dropout", 0.0, low=0.0, high=1.0, low_open=False) != 0.0:
        raise f.unrepresentable("attention_dropout", f.data["attention_dropout"], "DiffLlamaAttention refuses "
                                "attention dropout (the differential combination defines none)")
    f.ignore("lambda_std_dev")  # the λ vectors' initialisation only
    block["differential"] = {"lambda_init": lambda_init(0)}
    for i in range(1, model["n_layers"]):
        override_layers(f, [i], {"differential": {"lambda_init": lambda_init(i)}})
    return block, model


DIFFLLAMA = TensorMap("model.", LLAMA.tensors + tuple(
    tensor(f"blocks.{{i}}.lambda_{name}", f"layers.{{i}}.self_attn.lambda_{name}") for name in ("q1", "k1", "q2", "k2")
), buffers=LLAMA.buffers)

FAMILIES = (
    Family("diffllama", "DiffLlama", _diffllama, DIFFLLAMA, frozenset()),
)
