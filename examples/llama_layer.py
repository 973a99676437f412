"""transformers' LlamaDecoderLayer, verified as it is (needs torch and transformers).

    blockcli verify configs/gqa-swiglu-rope.yaml --impl examples/llama_layer.py:LlamaLayer --rtol 1e-6

blockcli calls LlamaLayer(config) (config: the YAML as a plain dict) and gets a torch.nn.Module; it
fills the layer's parameters from its own weights by name (input_layernorm, self_attn.{q,k,v,o}_proj,
post_attention_layernorm, mlp.{gate,up,down}_proj), runs it in float64, in eval mode, without
gradients, and hooks the submodules for intermediates. The layer needs the causal mask and the RoPE
cos/sin tables passed in, so this wrapper builds both. transformers computes RMSNorm, the RoPE tables
and the softmax in float32 even on float64 input: agreement stops near 1e-7, hence --rtol 1e-6.
"""

import torch

try:
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding
except ImportError as exc:
    raise ImportError(f"examples/llama_layer.py needs transformers (pip install transformers): {exc}") from None


class LlamaLayer(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        b = config["block"]
        hf = LlamaConfig(hidden_size=b["d_model"], num_attention_heads=b["n_heads"],
                         num_key_value_heads=b["n_kv_heads"], head_dim=b["head_dim"], intermediate_size=b["d_ff"],
                         rms_norm_eps=b["norm_eps"], rope_theta=b["rope_theta"], attention_bias=b["bias"]["qkv"],
                         mlp_bias=b["bias"]["mlp"], attn_implementation="eager")  # eager: returns the weights
        self.layer = LlamaDecoderLayer(hf, layer_idx=0)
        self.rotary = LlamaRotaryEmbedding(hf)

    def forward(self, x):  # x (B, T, d)
        positions = torch.arange(x.shape[1])[None]  # (1, T)
        future = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).triu(1)  # (T, T)
        mask = torch.zeros(future.shape, dtype=x.dtype).masked_fill(future, float("-inf"))[None, None]
        return self.layer(x, attention_mask=mask, position_ids=positions,
                          position_embeddings=self.rotary(x, positions))
