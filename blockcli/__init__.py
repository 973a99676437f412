"""blockcli: a shape and parameter inspector for the transformer decoder block.

The NumPy core is usable as a library; nothing here imports typer or rich:

    from blockcli import load_config, DecoderBlock
    block = DecoderBlock.from_config(load_config())   # the reference chapter's block
    y = block(x)                                      # x (B, T, d) → y (B, T, d)
"""

from blockcli.block import DecoderBlock, KVCache, Model
from blockcli.config import Config, ConfigError, InputError, load_config

__version__ = "0.1.0"
__all__ = ["Config", "ConfigError", "DecoderBlock", "InputError", "KVCache", "Model", "load_config", "__version__"]
