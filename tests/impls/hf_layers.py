"""transformers' own Qwen3 and Gemma decoder layers as --impl targets (tests/test_torch.py; needs transformers).

Each wrapper builds the layer from the YAML block as a plain dict, and passes the causal mask and the RoPE
tables the layer expects. Qwen3 normalises q and k per head (self_attn.q_norm / k_norm), Gemma scales its
RMSNorms by (1 + w): blockcli must fill both from its own weights.
"""

import torch
from transformers import Qwen3Config, GemmaConfig
from transformers.models.qwen3.modeling_qwen3 import Qwen3DecoderLayer, Qwen3RotaryEmbedding
from transformers.models.gemma.modeling_gemma import GemmaDecoderLayer, GemmaRotaryEmbedding


class _Layer(torch.nn.Module):
    def forward(self, x):
        positions = torch.arange(x.shape[1])[None]
        future = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).triu(1)
        mask = torch.zeros(future.shape, dtype=x.dtype).masked_fill(future, float("-inf"))[None, None]
        return self.layer(x, attention_mask=mask, position_ids=positions, position_embeddings=self.rotary(x, positions))


class Qwen3Layer(_Layer):
    def __init__(self, config):
        super().__init__()
        b = config["block"]
        hf = Qwen3Config(hidden_size=b["d_model"], num_attention_heads=b["n_heads"], num_key_value_heads=b["n_kv_heads"],
                         head_dim=b["head_dim"], intermediate_size=b["d_ff"], rms_norm_eps=b["norm_eps"],
                         rope_theta=b["rope_theta"], attention_bias=False, attn_implementation="eager")
        self.layer = Qwen3DecoderLayer(hf, layer_idx=0)
        self.rotary = Qwen3RotaryEmbedding(hf)


class GemmaLayer(_Layer):
    def __init__(self, config):
        super().__init__()
        b = config["block"]
        hf = GemmaConfig(hidden_size=b["d_model"], num_attention_heads=b["n_heads"], num_key_value_heads=b["n_kv_heads"],
                         head_dim=b["head_dim"], intermediate_size=b["d_ff"], rms_norm_eps=b["norm_eps"],
                         rope_theta=b["rope_theta"], hidden_activation="gelu_pytorch_tanh", attn_implementation="eager")
        self.layer = GemmaDecoderLayer(hf, layer_idx=0)
        self.rotary = GemmaRotaryEmbedding(hf)
