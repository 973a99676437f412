"""Typed, recorded access to a config.json object's fields, and the fields every family shares."""

from __future__ import annotations

import math
from typing import Any, Mapping

from blockcli.config import MAX_EXPERTS, MAX_LAYERS, MAX_SIZE, ConfigError, Quantization

# the families' names for the depth and the experts, which are walked one by one: bounded as the schema bounds them
COUNT_LIMITS = {**dict.fromkeys(("num_hidden_layers", "n_layer", "num_layers"), MAX_LAYERS),
                **dict.fromkeys(("num_local_experts", "num_experts", "n_routed_experts"), MAX_EXPERTS)}

MISSING = object()


# Keys every PretrainedConfig may carry that never change the network: bookkeeping, token ids,
# task heads' labels, generation settings. Ignored for every family.
COMMON_IGNORED = frozenset({
    "_name_or_path", "architectures", "auto_map", "model_type", "transformers_version", "torch_dtype",
    "dtype", "use_cache", "initializer_range", "bos_token_id", "eos_token_id", "pad_token_id",
    "sep_token_id", "unk_token_id", "decoder_start_token_id", "tokenizer_class", "prefix",
    "task_specific_params", "id2label", "label2id", "num_labels", "problem_type", "finetuning_task",
    "return_dict", "output_attentions", "output_hidden_states", "torchscript", "use_return_dict",
    "is_decoder", "tie_encoder_decoder", "chunk_size_feed_forward", "gradient_checkpointing",
    "_commit_hash", "_attn_implementation", "_attn_implementation_autoset",
    # generation defaults stored in older config.json files
    "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups",
    "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty",
    "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
    "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
    "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty",
    "suppress_tokens", "begin_suppress_tokens",
    # metadata of exporters and converters, never read by the modelling code
    "transformers.js_config", "is_llama_config",
})


# Keys accepted only at the value that means "a plain decoder-only LM"; anything else is an error.
COMMON_NEUTRAL: dict[str, tuple[Any, str]] = {
    "is_encoder_decoder": (False, "blockcli models decoder-only stacks"),
    "add_cross_attention": (False, "blockcli's blocks have no cross-attention"),
    "pruned_heads": ({}, "blockcli gives every layer the same number of heads"),
}

# quantization_config's quant_method values blockcli recognises (`read_quantization`), for messages
QUANT_METHODS = "fp8 (with weight_block_size), gptq, awq, compressed-tensors"
_FP8_KEYS = frozenset({"quant_method", "fmt", "activation_scheme", "weight_block_size", "modules_to_not_convert"})
_WEIGHT_BITS = (2, 3, 4, 8)


def read_quantization(f: "Fields") -> Quantization | None:
    """A config.json's `quantization_config`: None when absent or null; a Quantization for a method blockcli
    recognises (the counts stay those of the logical model); an error naming quant_method for any other."""
    f.used.add("quantization_config")
    quant = f.data.get("quantization_config")
    if quant is None:
        return None
    if not isinstance(quant, Mapping):
        raise f.invalid("quantization_config", quant, "an object")
    method = quant.get("quant_method")
    stored = f.data.get("torch_dtype", f.data.get("dtype"))
    stored = stored if stored in ("bfloat16", "float16", "float32") else "bfloat16"
    if method == "fp8":
        for key in quant:
            if key not in _FP8_KEYS:
                raise f.unrepresentable(f"quantization_config.{key}", quant[key], "not a field of an fp8 "
                                        "quantization_config blockcli knows")
        block = quant.get("weight_block_size")
        if not (isinstance(block, list) and len(block) == 2
                and all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in block)):
            raise f.unrepresentable("quantization_config", dict(quant), "blockcli recognises fp8 with a "
                                    "weight_block_size of two positive integers (per-block scales)")
        if quant.get("fmt", "e4m3") != "e4m3":
            raise f.unrepresentable("quantization_config.fmt", quant["fmt"], "blockcli recognises fp8 as e4m3")
        if quant.get("activation_scheme", "dynamic") not in ("dynamic", "static"):
            raise f.unrepresentable("quantization_config.activation_scheme", quant["activation_scheme"],
                                    "expected dynamic or static")
        kept = quant.get("modules_to_not_convert")
        if kept is not None and not (isinstance(kept, list) and all(isinstance(k, str) for k in kept)):
            raise f.invalid("quantization_config.modules_to_not_convert", kept, "null or an array of names")
        # the bytes follow from the shapes when nothing beyond the LM head and the embedding stays unquantized
        plain = all(k.split(".")[-1] in ("lm_head", "embed_tokens") for k in kept or ())
        return Quantization("fp8", (8,), (block[0], block[1]), stored, plain,
                            f"fp8 (e4m3, {block[0]}x{block[1]} blocks)")
    if method in ("gptq", "awq"):
        key = "bits" if "bits" in quant or method == "gptq" else "w_bit"  # AutoAWQ's older spelling
        bits = quant.get(key)
        if isinstance(bits, bool) or bits not in _WEIGHT_BITS:
            raise f.invalid(f"quantization_config.{key}", bits, f"the bits of a {method} weight: "
                                                                f"{', '.join(map(str, _WEIGHT_BITS))}")
        group = quant.get("group_size", quant.get("q_group_size"))
        grouped = f", groups of {group}" if isinstance(group, int) and not isinstance(group, bool) and group > 0 else ""
        return Quantization(method, (bits,), None, stored, False, f"{method} ({bits}-bit{grouped})")
    if method == "compressed-tensors":
        groups = quant.get("config_groups")
        found = sorted({g["weights"]["num_bits"] for g in groups.values()
                        if isinstance(g, Mapping) and isinstance(g.get("weights"), Mapping)
                        and isinstance(g["weights"].get("num_bits"), int)}) if isinstance(groups, Mapping) else []
        if not found:
            raise f.unrepresentable("quantization_config", dict(quant), "blockcli recognises compressed-tensors "
                                    "by its config_groups' weights.num_bits, and finds none")
        form = quant.get("format")
        return Quantization(method, tuple(found), None, stored, False,
                            f"compressed-tensors ({'/'.join(map(str, found))}-bit weights"
                            f"{f', {form}' if isinstance(form, str) else ''})")
    raise f.unrepresentable("quantization_config", dict(quant), f"quant_method {short(method)}: blockcli "
                            f"recognises {QUANT_METHODS}")


def json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, (int, float)):
        text = str(value)
        return f"a number ({text if len(text) <= 24 else text[:8] + f'... ({len(text)} characters)'})"
    if isinstance(value, str):
        return f"a string ({short(value)})"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


def an(title: str) -> str:
    """The title with its indefinite article ("a Qwen2", "an OLMo", "an Emu3")."""
    return f"{'an' if title[:1] in 'AEIOU' else 'a'} {title}"


def short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Fields:
    """Typed access to the JSON object's keys; remembers which keys were looked at."""

    def __init__(self, data: Mapping[str, Any], where: str, family: str) -> None:
        self.data, self.where, self.family = data, where, family
        self.used: set[str] = set()
        self.notes: list[str] = []  # said in the model's description
        self.said: list[str] = []  # said on every command, as a note on stderr: where a number differs from the field
        self.layers: list[dict[str, Any]] = []  # per-layer overrides ({indices, block}) the map found
        self.quantization: Quantization | None = None  # the quantization_config check_leftovers recognised

    # -- errors

    def unrepresentable(self, key: str, value: Any, why: str) -> ConfigError:
        return ConfigError(f"{self.where}: field '{key}' = {short(value)} cannot be represented in "
                           f"blockcli's schema ({why})")

    def invalid(self, key: str, value: Any, expected: str) -> ConfigError:
        return ConfigError(f"{self.where}: field '{key}': expected {expected}, got {json_kind(value)}")

    # -- access

    def has(self, key: str) -> bool:
        return key in self.data

    def raw(self, key: str, default: Any = MISSING, why: str = "") -> Any:
        """The value; `default` when absent (or null, when the default is not MISSING)."""
        self.used.add(key)
        value = self.data.get(key)
        if value is None:
            if default is MISSING:
                what = "missing" if key not in self.data else "null"
                raise ConfigError(f"{self.where}: field '{key}' is {what}; {an(self.family)} config.json "
                                  f"needs it{f' ({why})' if why else ''}")
            return default
        return value

    def int(self, key: str, default: Any = MISSING, why: str = "", minimum: int = 1) -> int:
        value = self.raw(key, default, why)
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # 4096.0 from some JSON writers
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.invalid(key, value, "an integer")
        if value < minimum:
            raise self.invalid(key, value, f"an integer >= {minimum}")
        maximum = COUNT_LIMITS.get(key, MAX_SIZE)
        if value > maximum:
            raise self.invalid(key, value, f"an integer <= {maximum:,}")
        return value

    def float(self, key: str, default: Any = MISSING, low: float = 0.0, high: float = 1.0,
              low_open: bool = True) -> float:
        value = self.raw(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.invalid(key, value, "a number")
        try:
            value = float(value)
        except OverflowError:  # an integer beyond the float range
            raise self.invalid(key, value, f"a number in ({low:g}, {high:g}]") from None
        if not math.isfinite(value) or (value <= low if low_open else value < low) or value > high:
            raise self.invalid(key, value, f"a number in {'(' if low_open else '['}{low:g}, {high:g}]")
        return value

    def bool(self, key: str, default: Any = MISSING) -> bool:
        value = self.raw(key, default)
        if not isinstance(value, bool):
            raise self.invalid(key, value, "true or false")
        return value

    def str(self, key: str, default: Any = MISSING) -> str:
        value = self.raw(key, default)
        if not isinstance(value, str):
            raise self.invalid(key, value, "a string")
        return value

    def neutral(self, key: str, neutral: Any, why: str) -> None:
        """Accept `key` only if absent or equal to `neutral` (null counts as absent when neutral is None)."""
        self.used.add(key)
        if key not in self.data:
            return
        value = self.data[key]
        if value is None and neutral is None:
            return
        if isinstance(value, bool) != isinstance(neutral, bool) or value != neutral:
            raise self.unrepresentable(key, value, why)

    def ignore(self, *keys: str) -> None:
        self.used.update(keys)

    def check_leftovers(self, ignored: frozenset[str]) -> None:
        if "quantization_config" not in self.used:  # read here unless the family reads its own (gpt-oss's MXFP4)
            self.quantization = read_quantization(self)
        for key, (neutral, why) in COMMON_NEUTRAL.items():
            if key not in self.used:
                self.neutral(key, neutral, why)
        for key, value in self.data.items():
            if key not in self.used and key not in ignored and key not in COMMON_IGNORED:
                raise self.unrepresentable(
                    key, value, f"not a field blockcli knows for {an(self.family)} config; it might change "
                                f"the architecture, so it is not ignored; --allow-field {key} accepts it at your "
                                f"own risk")
