"""A weights file of either format blockcli reads, handed to the module that reads it: a GGUF file to
`blockcli.gguf_weights`, anything else (a model folder, safetensors) to `blockcli.checkpoint`.

The two readers share checkpoint.py's matching and layouts, so the choice is made here, above both,
and neither imports the other's entry point.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from blockcli import checkpoint
from blockcli.config import Config


def _is_gguf(path: Path) -> bool:
    return path.suffix.lower() == ".gguf"


def checkpoint_sizes(path: Path, config: Config) -> tuple[dict[str, int], dict[str, Any]] | None:
    """For `count`: stored sizes under blockcli's keys and a description of the files, from the headers
    alone (see `checkpoint.checkpoint_sizes`)."""
    if _is_gguf(path):
        from blockcli.gguf_weights import gguf_sizes

        return gguf_sizes(path, config)
    return checkpoint.checkpoint_sizes(path, config)


def load_weights(path: Path, config: Config | None, dtype: str, notes: list[str], *, one_block: bool = False,
                 layer: int | None = None, stored: list[checkpoint.Match] | None = None) -> dict[str, Any]:
    """The model's parameters under blockcli's keys, in blockcli's layouts and `dtype` (see
    `checkpoint.load_weights`); a GGUF file's tensors dequantized by `blockcli.gguf_weights`."""
    if _is_gguf(path):
        from blockcli.gguf_weights import load_gguf_weights

        return load_gguf_weights(path, config, dtype, notes, one_block=one_block, layer=layer)
    return checkpoint.load_weights(path, config, dtype, notes, one_block=one_block, layer=layer, stored=stored)
