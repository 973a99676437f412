"""Where a config comes from: the one entry point that reads every kind of source.

A preset name, a YAML file or `-` go to blockcli.config; a Hugging Face config.json, a model
folder (its config.json) or a .safetensors file beside one go to blockcli.hf. Keeping the
dispatch here lets config.py sit at the bottom of the imports with nothing above it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

from blockcli.config import (Config, ConfigError, load_yaml_config, parse_config, parse_yaml_text, read_text_file,
                             regular_file)


def load_config(source: str | Path | Mapping[str, Any] | None = None, allow_fields: tuple[str, ...] = ()) -> Config:
    """Load a config from a YAML path, a preset name, a Hugging Face config.json or model folder
    (its config.json; also for a .safetensors file beside one), a GGUF file (its metadata), or a mapping.

    None gives the built-in default: the reference chapter's block (d=512, h=8, d_ff=2048).
    `allow_fields` names config.json fields to accept unchecked (the user's risk; noted in `notes`).
    """
    if source is None:
        return parse_config({}, name="default")
    if isinstance(source, Mapping):
        return parse_config(source, name="<mapping>")
    if str(source) == "-":
        return _standard_input(allow_fields)
    path = Path(source)
    if path.suffix.lower() == ".gguf":  # llama.cpp's file: its metadata is the config
        from blockcli.gguf_file import gguf_config

        return gguf_config(path)
    tensors = False  # a model folder holding its weights (or one of them): their stored bytes are known
    if path.is_dir() or path.suffix.lower() == ".safetensors":  # a model folder, or weights beside config.json
        tensors = holds_tensors(path)
        path = model_folder_config(path)
    if path.suffix.lower() == ".json":
        from blockcli.hf import config_from_hf  # lazy: families and JSON only for HF configs

        return config_from_hf(path, allow_fields, tensors_beside=tensors)
    return load_yaml_config(str(source))


def model_folder_config(path: Path) -> Path:
    """The config.json that describes a model folder or a .safetensors file beside it."""
    folder = path if path.is_dir() else path.parent
    config = folder / "config.json"
    if not regular_file(config, "a Hugging Face config.json", ConfigError):  # a directory, a dangling link: named
        what = "model folder" if path.is_dir() else "safetensors file"
        raise ConfigError(f"{path}: a {what} needs the model's config.json beside its weights "
                          f"(none in {folder}); a YAML config is a file")
    return config


def holds_tensors(path: Path) -> bool:
    """A .safetensors file, or a model folder with one (its weights; checkpoint.py reads and checks them)."""
    return not path.is_dir() or any(path.glob("*.safetensors"))


def _standard_input(allow_fields: tuple[str, ...]) -> Config:
    """`-`: a YAML config, or a Hugging Face config.json (a JSON object with a `model_type`)."""
    text = read_text_file(Path("-"), "a YAML config or a config.json")
    if text.lstrip().startswith("{") and '"model_type"' in text:
        from blockcli.hf import read_hf_text

        return replace(read_hf_text(text, "<stdin>", allow_fields)[1], name="<stdin>")
    return parse_config(parse_yaml_text(text, "<stdin>"), name="<stdin>")
