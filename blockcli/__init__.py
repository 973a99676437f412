"""blockcli: a shape and parameter inspector for the transformer decoder block.

The NumPy core is usable as a library; nothing here imports typer or rich:

    from blockcli import load_config, DecoderBlock
    block = DecoderBlock.from_config(load_config())   # the reference chapter's block
    y = block(x)                                      # x (B, T, d) → y (B, T, d)

Names are imported on first use, so `blockcli --version` does not pay for NumPy.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "DecoderBlock": "blockcli.block", "KVCache": "blockcli.block", "Model": "blockcli.block",
    "Config": "blockcli.config", "ConfigError": "blockcli.config", "InputError": "blockcli.config",
    "load_config": "blockcli.sources",
}
__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'blockcli' has no attribute {name!r}")
