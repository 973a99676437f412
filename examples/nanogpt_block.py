"""nanoGPT's Block, verified as it is: a four-line factory (needs torch and nanoGPT's model.py importable,
say from a nanoGPT checkout on PYTHONPATH).

    PYTHONPATH=path/to/nanoGPT blockcli verify configs/nanogpt-block.yaml --impl examples/nanogpt_block.py:block

blockcli calls block(config) and fills the module's parameters from its own weights by name
(ln_1, attn.c_attn = W_Q | W_K | W_V, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj; nn.Linear's (out, in)
transposed). nanoGPT uses exact GELU, LayerNorm eps 1e-5 and biases: the config needs
`activation: gelu` and `bias: true`.
"""

from model import Block, GPTConfig  # nanoGPT's model.py


def block(config):
    b = config["block"]
    return Block(GPTConfig(n_embd=b["d_model"], n_head=b["n_heads"], bias=True, dropout=0.0))
