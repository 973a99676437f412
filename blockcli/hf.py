"""Hugging Face `config.json` → blockcli config (and back out as commented YAML).

`config_from_hf(path)` reads a `config.json` as saved by HF transformers and maps it onto
blockcli's schema: a plain mapping shaped like a preset YAML (`about`, `block`, `model`,
`run`) that `blockcli.config.parse_config` validates. `hf_to_mapping` is that mapping step on
already-parsed JSON; `to_yaml` writes a mapping out as YAML text (by hand: only config.py
imports yaml) that `load_config` reads back to an equal Config.

Supported `model_type`s: gpt2, llama, mistral, qwen2, qwen3, gemma, gpt_neox, opt, olmo2, starcoder2, gptj,
phi, granite, cohere, stablelm, phi3, gpt_bigcode, falcon, mixtral, qwen2_moe, qwen3_moe.

The rule for every key of the JSON object is one of three, and never "silently dropped":

1. **mapped**: it determines a blockcli field (sizes, norm, activation, biases, positions, ...);
2. **ignored on purpose**: it cannot change the architecture or the inference-time function
   (token ids, dtype, `use_cache`, initializer ranges, `architectures`, generation settings,
   and dropout rates, which only act in training; blockcli's presets describe the model in
   eval mode, so `block.dropout` stays 0). Each family has an explicit allow-list;
3. **an error**: anything else, including a known field at a value blockcli cannot express
   (`rope_scaling` not null, `word_embed_proj_dim != hidden_size`, an exact-erf gated GELU,
   `layer_norm_elementwise_affine: false`, ...), and any key this module does not know.
   The message names the field: ``<file>: field 'rope_scaling' = {...} cannot be represented
   in blockcli's schema (why)``.

Defaults for absent optional fields are those of the HF config class of the family (e.g.
`rms_norm_eps` 1e-6 for Llama, `head_dim` 256 for Gemma, `num_key_value_heads` 8 for Mistral,
`tie_word_embeddings` true for GPT-2/OPT/Gemma). Sizes (width, heads, layers, MLP width,
vocabulary, context length) have no default here: a config.json without them is an error.

Sliding-window attention (Mistral `sliding_window`; Qwen2 with `use_sliding_window: true`; a
`layer_types` list of `sliding_attention`) is modelled as `block.sliding_window`: each query sees
the last W keys, itself included. A window at least `max_position_embeddings` wide can never bind
and is dropped. A window on some layers only (Qwen2's `max_window_layers`, mixed `layer_types`)
is an error: blockcli's layers are all alike.

Gemma multiplies token embeddings by sqrt(hidden_size) (`model.embedding_multiplier`) and its
RMSNorm scales by (1 + w) (`block.norm_unit_offset`).

GPT-J and Phi run attention and the MLP side by side on one LayerNorm's output
(`placement: parallel_shared`) and add a bias to the LM head (`model.lm_head_bias`); GPT-J
rotates interleaved pairs (`block.rope_layout: interleaved`) of its first `rotary_dim` dims, Phi
rotates halves of int(head_dim · partial_rotary_factor) dims.

Granite is Llama with scalar multipliers: `block.attention_scale` (its attention_multiplier, in
place of 1/√d_h), `block.residual_multiplier`, `model.embedding_multiplier` and
`model.logit_multiplier` (1 / logits_scaling). Cohere runs attention and the MLP side by side on one
LayerNorm without a shift, rotates interleaved pairs, and multiplies its logits by `logit_scale`
(`model.logit_multiplier`). StableLM 2 rotates halves of int(head_dim · partial_rotary_factor) dims
and, with `use_parallel_residual`, reads its one input_layernorm in both branches (`parallel_shared`).

Phi-3 is Llama's block stored with fused projections (Q | K | V in `qkv_proj`, gate | up in
`gate_up_proj`; the checkpoint loader splits them), rotating int(head_dim · partial_rotary_factor)
dims, with longrope scaling (whose original length is the top-level
`original_max_position_embeddings`) and an optional sliding window.

GPTBigCode (SantaCoder, StarCoder) is GPT-2's block with nn.Linear layers and multi-query
attention (`multi_query`, default true: one K/V head, `c_attn` rows Q | K | V); with `multi_query:
false` every head has its own K and V and `c_attn` groups its rows per head, as GPT-NeoX.

Falcon: `parallel_attn` (Falcon-7B) runs attention and MLP side by side on one LayerNorm
(`placement: parallel_shared`), with multi-query attention; `new_decoder_architecture` (Falcon-40B,
180B) gives each branch its own norm (`placement: parallel`) and `num_kv_heads` K/V heads. ALiBi
(`alibi: true`) is refused.

Mixtral, Qwen2-MoE and Qwen3-MoE replace the MLP by `block.moe`: softmax router scores, top-k
(`num_experts_per_tok` of `num_local_experts` / `num_experts`), renormalised always (Mixtral) or
per `norm_topk_prob`; Qwen2-MoE adds its shared expert (`shared_expert_intermediate_size`) with its
sigmoid gate. Layers that mix dense and MoE MLPs (`decoder_sparse_step` > 1, a non-empty
`mlp_only_layers`) are refused until per-layer overrides land; the dense layers' `intermediate_size`
is then unused and ignored.
"""

from __future__ import annotations

import difflib
import json
import math
from pathlib import Path
from typing import Any, Callable, Mapping

from dataclasses import replace

from blockcli.config import MAX_SIZE, Config, ConfigError, parse_config, read_text_file

RUN_DEFAULTS = {"batch": 1, "seq_len": 8, "dtype": "float32", "seed": 0}
SECTION_ORDER = ("about", "block", "model", "run")

_MISSING = object()

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
    "quantization_config": (None, "blockcli counts and runs unquantized weights"),
}

# Activation names (HF ACT2FN keys) → blockcli names, for plain (non-gated) MLPs.
PLAIN_ACTIVATIONS = {
    "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh",
    "gelu": "gelu", "relu": "relu", "silu": "silu", "swish": "silu",
}
# For gated MLPs act(x·W_gate) * (x·W_up): which act gives which blockcli gated activation.
GATED_ACTIVATIONS = {
    "silu": "swiglu", "swish": "swiglu",
    "gelu_pytorch_tanh": "geglu", "gelu_new": "geglu", "gelu_fast": "geglu",
}


# --------------------------------------------------------------------------- entry points


def config_from_hf(path: str | Path, allow_fields: tuple[str, ...] = ()) -> Config:
    """Read a Hugging Face config.json and return the validated blockcli Config."""
    return read_hf(path, allow_fields)[1]


def read_hf(path: str | Path, allow_fields: tuple[str, ...] = ()) -> tuple[dict[str, Any], Config]:
    """Read a Hugging Face config.json: the blockcli mapping (for `to_yaml`) and its validated Config.
    `allow_fields` are unknown fields the user accepts unchecked (`--allow-field`); the Config's
    notes say which were used."""
    path = Path(path)
    where = str(path)
    data = _parse_json(read_text_file(path, "a Hugging Face config.json"), where)
    mapping = hf_to_mapping(data, where, allow_fields)
    accepted = tuple(f"{where}: field '{k}' accepted unchecked (--allow-field): blockcli assumes it changes nothing"
                     for k in allow_fields if k in data and k not in _known_keys(data))
    try:
        return mapping, replace(parse_config(mapping, name=where), notes=accepted)
    except ConfigError as exc:  # a mapped value blockcli rejects: say which file it came from
        raise ConfigError(f"{where}: {exc} (after mapping the Hugging Face config onto blockcli's schema)") from None


def _known_keys(data: Mapping[str, Any]) -> set[str]:
    """The keys of `data` its family maps or ignores on purpose (everything but unknown fields)."""
    family = FAMILIES[data["model_type"]]
    fields = _Fields(data, "", family.title)
    family.mapper(fields)
    return fields.used | set(family.ignored) | COMMON_IGNORED | set(COMMON_NEUTRAL)


def hf_to_mapping(data: Any, where: str, allow_fields: tuple[str, ...] = ()) -> dict[str, Any]:
    """Map a parsed HF config (a dict) onto a plain blockcli mapping; ConfigError on anything unrepresentable."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: top level must be a JSON object (a Hugging Face config.json), "
                          f"got {_json_kind(data)}")
    if "model_type" not in data:
        raise ConfigError(f"{where}: field 'model_type' is missing; expected one of: {', '.join(sorted(FAMILIES))}")
    model_type = data["model_type"]
    if not isinstance(model_type, str) or model_type not in FAMILIES:
        close = difflib.get_close_matches(str(model_type), list(FAMILIES), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise ConfigError(f"{where}: field 'model_type' = {_short(model_type)} is not a supported model family "
                          f"(supported: {', '.join(sorted(FAMILIES))}){hint}")
    family = FAMILIES[model_type]
    fields = _Fields(data, where, family.title)
    block, model = family.mapper(fields)
    fields.check_leftovers(family.ignored | frozenset(allow_fields))

    run = dict(RUN_DEFAULTS)
    run["seq_len"] = min(run["seq_len"], model["max_positions"])
    description = f"{family.title} (model_type '{model_type}') from a Hugging Face config.json"
    if fields.notes:
        description += "; " + "; ".join(fields.notes)
    about = {"description": description, "source": where}
    return {"about": about, "block": block, "model": model, "run": run}


def to_yaml(config_mapping: Mapping[str, Any], comment: str = "") -> str:
    """Render a blockcli mapping (as from `hf_to_mapping`) as YAML text with `comment` as a header.

    Values must be None, bools, ints, finite floats, strings, or mappings of those (one level,
    as in `block.bias`). Floats are written so that YAML 1.1 loaders read them back as floats
    (`1.0e-05`, never `1e-05`, which PyYAML reads as a string). Sections come out in the order
    about, block, model, run, then any others in mapping order.
    """
    lines = [f"# {line}".rstrip() for line in comment.splitlines()] if comment else []
    keys = [k for k in SECTION_ORDER if k in config_mapping]
    keys += [k for k in config_mapping if k not in SECTION_ORDER]
    for key in keys:
        lines.extend(_yaml_entry(key, config_mapping[key], 0))
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- reading the file


def _parse_json(text: str, where: str) -> Any:
    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for key, value in pairs:
            if key in seen:
                raise ConfigError(f"{where}: field '{key}' appears twice in one JSON object")
            seen[key] = value
        return seen

    def no_constant(name: str) -> Any:
        raise ConfigError(f"{where}: invalid JSON: {name} is not a JSON number")

    try:
        return json.loads(text, object_pairs_hook=no_duplicates, parse_constant=no_constant)
    except ConfigError:
        raise
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except ValueError:  # Python's limit on digits in an integer literal (4300)
        raise ConfigError(f"{where}: invalid JSON: a number has too many digits") from None
    except RecursionError:
        raise ConfigError(f"{where}: JSON nested too deeply") from None


# --------------------------------------------------------------------------- field access


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, (int, float)):
        text = str(value)
        return f"a number ({text if len(text) <= 24 else text[:8] + f'... ({len(text)} characters)'})"
    if isinstance(value, str):
        return f"a string ({_short(value)})"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Fields:
    """Typed access to the JSON object's keys; remembers which keys were looked at."""

    def __init__(self, data: Mapping[str, Any], where: str, family: str) -> None:
        self.data, self.where, self.family = data, where, family
        self.used: set[str] = set()
        self.notes: list[str] = []

    # -- errors

    def unrepresentable(self, key: str, value: Any, why: str) -> ConfigError:
        return ConfigError(f"{self.where}: field '{key}' = {_short(value)} cannot be represented in "
                           f"blockcli's schema ({why})")

    def invalid(self, key: str, value: Any, expected: str) -> ConfigError:
        return ConfigError(f"{self.where}: field '{key}': expected {expected}, got {_json_kind(value)}")

    # -- access

    def has(self, key: str) -> bool:
        return key in self.data

    def raw(self, key: str, default: Any = _MISSING, why: str = "") -> Any:
        """The value; `default` when absent (or null, when the default is not _MISSING)."""
        self.used.add(key)
        value = self.data.get(key)
        if value is None:
            if default is _MISSING:
                what = "missing" if key not in self.data else "null"
                raise ConfigError(f"{self.where}: field '{key}' is {what}; a {self.family} config.json "
                                  f"needs it{f' ({why})' if why else ''}")
            return default
        return value

    def int(self, key: str, default: Any = _MISSING, why: str = "", minimum: int = 1) -> int:
        value = self.raw(key, default, why)
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # 4096.0 from some JSON writers
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.invalid(key, value, "an integer")
        if value < minimum:
            raise self.invalid(key, value, f"an integer >= {minimum}")
        if value > MAX_SIZE:
            raise self.invalid(key, value, f"an integer <= {MAX_SIZE:,}")
        return value

    def float(self, key: str, default: Any = _MISSING, low: float = 0.0, high: float = 1.0,
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

    def bool(self, key: str, default: Any = _MISSING) -> bool:
        value = self.raw(key, default)
        if not isinstance(value, bool):
            raise self.invalid(key, value, "true or false")
        return value

    def str(self, key: str, default: Any = _MISSING) -> str:
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
        for key, (neutral, why) in COMMON_NEUTRAL.items():
            if key not in self.used:
                self.neutral(key, neutral, why)
        for key, value in self.data.items():
            if key not in self.used and key not in ignored and key not in COMMON_IGNORED:
                raise self.unrepresentable(
                    key, value, f"not a field blockcli knows for a {self.family} config; it might change "
                                f"the architecture, so it is not ignored; --allow-field {key} accepts it at your "
                                f"own risk")


# --------------------------------------------------------------------------- shared pieces


def _plain_activation(f: _Fields, key: str, default: str) -> str:
    name = f.str(key, default)
    if name not in PLAIN_ACTIVATIONS:
        raise f.unrepresentable(key, name, "blockcli's activations are gelu_tanh (gelu_new, gelu_pytorch_tanh, "
                                           "gelu_fast), gelu, relu and silu")
    return PLAIN_ACTIVATIONS[name]


def _gated_activation(f: _Fields, key: str, default: str, exact_gelu_is_tanh: bool = False) -> str:
    name = f.str(key, default)
    if exact_gelu_is_tanh and name == "gelu":
        return "geglu"
    if name not in GATED_ACTIVATIONS:
        why = ("blockcli's gated activations are swiglu (silu) and geglu, whose GELU is the tanh approximation"
               if name == "gelu" else "blockcli's gated activations are swiglu (silu) and geglu (tanh GELU)")
        raise f.unrepresentable(key, name, why)
    return GATED_ACTIVATIONS[name]


# transformers' rope_scaling / rope_parameters keys → blockcli's block.rope_scaling fields
_ROPE_SCALING_KEYS = {
    "factor": "factor", "original_max_position_embeddings": "original_max_positions",
    "low_freq_factor": "low_freq_factor", "high_freq_factor": "high_freq_factor", "beta_fast": "beta_fast",
    "beta_slow": "beta_slow", "mscale": "mscale", "mscale_all_dim": "mscale_all_dim",
    "attention_factor": "attention_factor", "truncate": "truncate", "short_factor": "short_factor",
    "long_factor": "long_factor",
}
_ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn", "longrope")


def _rope_base(f: _Fields, theta_keys: tuple[str, ...], default: float, fraction_keys: tuple[str, ...] = (),
               fraction_default: float = 1.0, max_positions: int | None = None
               ) -> tuple[float, float, dict[str, Any] | None]:
    """(rope_theta, rotated fraction, block.rope_scaling or None) from top-level keys and the
    scaling dict: `rope_scaling` (transformers 4) or `rope_parameters` (transformers 5)."""
    theta = _first(f, theta_keys, lambda k: f.float(k, low=0.0, high=1e12), default)
    fraction = _first(f, fraction_keys, lambda k: f.float(k, low=0.0, high=1.0, low_open=False), fraction_default)
    scaling = None
    for key in ("rope_scaling", "rope_parameters"):
        params = f.raw(key, None)
        if params is None:
            continue
        if not isinstance(params, Mapping):
            raise f.invalid(key, params, "an object")
        inner = _Fields(params, f.where, f.family)
        rope_type = params.get("rope_type", params.get("type", "default"))
        inner.ignore("rope_type", "type")
        if rope_type not in _ROPE_TYPES:
            raise f.unrepresentable(key, dict(params), f"rope_type {rope_type!r}: blockcli's RoPE scalings are "
                                                       f"{', '.join(_ROPE_TYPES[1:])}")
        if key == "rope_parameters":  # transformers 5 keeps the base and the fraction here too
            got_theta = inner.float("rope_theta", theta, low=0.0, high=1e12)
            got_fraction = inner.float("partial_rotary_factor", fraction, low=0.0, high=1.0, low_open=False)
            for name, top, nested in (("rope_theta", theta, got_theta), ("partial_rotary_factor", fraction, got_fraction)):
                if f.has(name) and name in theta_keys + fraction_keys and top != nested:
                    raise f.unrepresentable(f"rope_parameters.{name}", nested, f"it disagrees with the top-level '{name}'")
            theta, fraction = got_theta, got_fraction
        found = _rope_scaling(f, key, params, inner, rope_type, max_positions)
        for name, value in params.items():
            if name not in inner.used:
                raise f.unrepresentable(f"{key}.{name}", value, "not a RoPE parameter blockcli knows")
        if found is not None and scaling is not None and found != scaling:
            raise f.unrepresentable("rope_parameters", dict(params), "it disagrees with rope_scaling")
        scaling = found or scaling
    return theta, fraction, scaling


def _rope_scaling(f: _Fields, key: str, params: Mapping[str, Any], inner: _Fields, rope_type: str,
                  max_positions: int | None) -> dict[str, Any] | None:
    """One scaling dict onto block.rope_scaling, with transformers' defaults filled in."""
    if rope_type == "default":
        return None
    out: dict[str, Any] = {"type": rope_type}
    for name, field_name in _ROPE_SCALING_KEYS.items():
        value = params.get(name)
        inner.used.add(name)
        if value is None:
            continue
        if name == "truncate":
            out[field_name] = inner.bool(name)
        elif name in ("short_factor", "long_factor"):
            if not isinstance(value, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                      for x in value):
                raise f.invalid(f"{key}.{name}", value, "an array of numbers")
            out[field_name] = [float(x) for x in value]
        elif name == "original_max_position_embeddings":
            out[field_name] = inner.int(name)
        else:
            out[field_name] = inner.float(name, low=0.0, high=1e6, low_open=name not in ("mscale", "mscale_all_dim",
                                                                                          "attention_factor"))
    if rope_type == "dynamic" and max_positions is not None:
        # transformers' dynamic NTK always scales past max_position_embeddings (an
        # original_max_position_embeddings in the dict is ignored there, so here too)
        out["original_max_positions"] = max_positions
    elif "original_max_positions" not in out and rope_type in ("longrope", "llama3", "yarn"):
        # Phi-3 keeps the original length at the top level; otherwise transformers falls back to
        # max_position_embeddings
        top = f.int("original_max_position_embeddings", max_positions) if rope_type == "longrope" else max_positions
        if top is not None:
            out["original_max_positions"] = top
    if rope_type == "longrope" and "factor" not in out and max_positions and out.get("original_max_positions"):
        out["factor"] = max_positions / out["original_max_positions"]  # as transformers derives it
    return out


def _first(f: _Fields, keys: tuple[str, ...], read: Callable[[str], Any], default: Any) -> Any:
    """Read the first present of several alias keys; every alias present must agree."""
    found = [(k, read(k)) for k in keys if f.data.get(k) is not None]
    f.ignore(*keys)
    if not found:
        return default
    for key, value in found[1:]:
        if value != found[0][1]:
            raise f.unrepresentable(key, f.data[key], f"it disagrees with '{found[0][0]}' = {f.data[found[0][0]]!r}")
    return found[0][1]


def _divides(f: _Fields, width_key: str, width: int, heads_key: str, heads: int) -> int:
    if width % heads:
        raise ConfigError(f"{f.where}: field '{heads_key}' = {heads} does not divide '{width_key}' = {width} "
                          f"(a {f.family} model needs whole heads)")
    return width // heads


def _window(f: _Fields, key: str, window: Any, max_positions: int) -> int:
    """An active sliding window as block.sliding_window; 0 when it is too wide to ever bind."""
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise f.invalid(key, window, "a positive integer or null")
    return 0 if window >= max_positions else window


def _bias(qkv: bool, out: bool, mlp: bool, norm: bool) -> bool | dict[str, bool]:
    groups = {"qkv": qkv, "out": out, "mlp": mlp, "norm": norm}
    return qkv if len(set(groups.values())) == 1 else groups


def _model(n_layers: int, vocab: int, positions: str, max_positions: int, tie: bool,
           final_norm: bool = True, position_offset: int = 0) -> dict[str, Any]:
    model: dict[str, Any] = {"n_layers": n_layers, "vocab_size": vocab, "positions": positions,
                             "max_positions": max_positions}
    if positions == "learned":
        model["position_offset"] = position_offset
    model.update(tie_embeddings=tie, final_norm=final_norm, lm_head_bias=False)
    return model


# --------------------------------------------------------------------------- families


def _gpt2(f: _Fields) -> tuple[dict, dict]:
    d = f.int("n_embd")
    heads = f.int("n_head")
    head_dim = _divides(f, "n_embd", d, "n_head", heads)
    d_ff = f.int("n_inner", 4 * d)  # null means 4·n_embd
    f.neutral("scale_attn_weights", True, "blockcli always scales attention scores by 1/sqrt(head_dim)")
    f.neutral("scale_attn_by_inverse_layer_idx", False, "blockcli's blocks do not depend on the layer index")
    block = {
        "d_model": d, "n_heads": heads, "n_kv_heads": heads, "head_dim": head_dim, "d_ff": d_ff,
        "norm": "layernorm", "norm_eps": f.float("layer_norm_epsilon", 1e-5),
        "activation": _plain_activation(f, "activation_function", "gelu_new"),
        "bias": True, "placement": "pre", "rope": False,
    }
    model = _model(f.int("n_layer"), f.int("vocab_size"), "learned", f.int("n_positions"),
                   f.bool("tie_word_embeddings", True))
    return block, model


def _opt(f: _Fields) -> tuple[dict, dict]:
    d = f.int("hidden_size")
    heads = f.int("num_attention_heads")
    head_dim = _divides(f, "hidden_size", d, "num_attention_heads", heads)
    proj = f.int("word_embed_proj_dim", d)
    if proj != d:
        raise f.unrepresentable("word_embed_proj_dim", proj, f"OPT then adds project_in/project_out matrices "
                                                             f"between {proj} and hidden_size {d}; blockcli's "
                                                             f"embeddings have width d_model")
    f.neutral("layer_norm_elementwise_affine", True, "blockcli's LayerNorms always have a scale gamma")
    pre = f.bool("do_layer_norm_before", True)
    remove_final = f.bool("_remove_final_layer_norm", False)
    bias = f.bool("enable_bias", True)
    block = {
        "d_model": d, "n_heads": heads, "n_kv_heads": heads, "head_dim": head_dim, "d_ff": f.int("ffn_dim"),
        "norm": "layernorm", "norm_eps": 1e-5,  # OPT uses torch.nn.LayerNorm's default eps
        "activation": _plain_activation(f, "activation_function", "relu"),
        # enable_bias switches the linear layers' biases; the LayerNorms keep their shift.
        "bias": _bias(bias, bias, bias, True),
        "placement": "pre" if pre else "post", "rope": False,
    }
    model = _model(f.int("num_hidden_layers"), f.int("vocab_size"), "learned", f.int("max_position_embeddings"),
                   f.bool("tie_word_embeddings", True), final_norm=pre and not remove_final, position_offset=2)
    return block, model


def _neox(f: _Fields) -> tuple[dict, dict]:
    d = f.int("hidden_size")
    heads = f.int("num_attention_heads")
    head_dim = _divides(f, "hidden_size", d, "num_attention_heads", heads)
    # GPTNeoXConfig takes its RoPE defaults from rotary_emb_base and rotary_pct only: a top-level
    # rope_theta or partial_rotary_factor is never read by transformers, so not here either
    f.ignore("rope_theta", "partial_rotary_factor")
    theta, fraction, scaling = _rope_base(f, ("rotary_emb_base",), 10000.0, ("rotary_pct",), 0.25,
                                          f.int("max_position_embeddings"))
    rotated = int(head_dim * fraction)
    if rotated % 2:
        raise f.unrepresentable("rotary_pct", fraction, f"it rotates {rotated} of {head_dim} dimensions per head; "
                                                        f"rotary pairs need an even number")
    attn_bias = f.bool("attention_bias", True)
    block = {
        "d_model": d, "n_heads": heads, "n_kv_heads": heads, "head_dim": head_dim,
        "d_ff": f.int("intermediate_size"), "norm": "layernorm", "norm_eps": f.float("layer_norm_eps", 1e-5),
        "activation": _plain_activation(f, "hidden_act", "gelu"),
        "bias": _bias(attn_bias, attn_bias, True, True),
        "placement": "parallel" if f.bool("use_parallel_residual", True) else "pre",
        "rope": fraction if rotated else False,
    }
    if rotated:
        block["rope_theta"] = theta
        if scaling:
            block["rope_scaling"] = scaling
    model = _model(f.int("num_hidden_layers"), f.int("vocab_size"), "rope" if rotated else "none",
                   f.int("max_position_embeddings"), f.bool("tie_word_embeddings", False))
    return block, model


def _gated_rms(f: _Fields, activation: Callable[[_Fields], str], *, kv_default: int | None,
               tie_default: bool, head_dim_default: int | None = None, qkv_bias: bool | None = None,
               out_bias: bool | None = None, mlp_bias: bool | None = None, eps_default: float = 1e-6,
               fraction_keys: tuple[str, ...] = ()) -> tuple[dict, dict]:
    """Llama, Mistral, Qwen2, Gemma: RMSNorm, gated MLP, RoPE over the whole head.

    A bias argument of None means "read it from the config" (`attention_bias` for q/k/v and o,
    `mlp_bias`); a bool fixes it for the family (Qwen2: q/k/v yes, o no). RMSNorm has no shift.
    `kv_default` is the HF config class's default for an absent `num_key_value_heads` (None:
    the number of query heads); an explicit null always means "as many as query heads".
    `fraction_keys` name the field of a family that rotates only part of each head (default: all).
    """
    d = f.int("hidden_size")
    heads = f.int("num_attention_heads")
    if f.has("num_key_value_heads") or kv_default is None:
        kv = f.int("num_key_value_heads", heads)
    else:
        kv = f.int("num_key_value_heads", kv_default)
    if heads % kv:
        raise ConfigError(f"{f.where}: field 'num_key_value_heads' = {kv} does not divide "
                          f"'num_attention_heads' = {heads}")
    if f.data.get("head_dim") is not None or head_dim_default is not None:
        head_dim = f.int("head_dim", head_dim_default)
    else:
        f.ignore("head_dim")
        head_dim = _divides(f, "hidden_size", d, "num_attention_heads", heads)
    theta, fraction, scaling = _rope_base(f, ("rope_theta",), 10000.0, fraction_keys,
                                          max_positions=f.int("max_position_embeddings"))
    attention_bias = f.bool("attention_bias", False) if qkv_bias is None else qkv_bias
    block = {
        "d_model": d, "n_heads": heads, "n_kv_heads": kv, "head_dim": head_dim,
        "d_ff": f.int("intermediate_size"), "norm": "rmsnorm", "norm_eps": f.float("rms_norm_eps", eps_default),
        "activation": activation(f),
        "bias": _bias(attention_bias, attention_bias if out_bias is None else out_bias,
                      f.bool("mlp_bias", False) if mlp_bias is None else mlp_bias, False),
        "placement": "pre", "rope": True if fraction == 1.0 else fraction, "rope_theta": theta,
    }
    if scaling:
        block["rope_scaling"] = scaling
    model = _model(f.int("num_hidden_layers"), f.int("vocab_size"), "rope", f.int("max_position_embeddings"),
                   f.bool("tie_word_embeddings", tie_default))
    return block, model


def _silu_gate(f: _Fields) -> str:
    return _gated_activation(f, "hidden_act", "silu")


def _layer_types(f: _Fields, n_layers: int) -> bool | None:
    """transformers >= 4.53 `layer_types`: whether the layers use sliding attention (None if absent)."""
    types = f.raw("layer_types", None)
    if types is None:
        return None
    if not isinstance(types, list) or len(types) != n_layers:
        raise f.invalid("layer_types", types, f"an array of {n_layers} layer types")
    for item in types:
        if item not in ("full_attention", "sliding_attention"):
            raise f.unrepresentable("layer_types", item, "blockcli's layers use full or sliding-window attention")
    if len(set(types)) > 1:
        raise f.unrepresentable("layer_types", types, "some layers slide and some do not; blockcli's layers are all "
                                                      "alike")
    return types[0] == "sliding_attention"


def _sliding(f: _Fields, block: dict, model: dict, active: bool, default: int | None = None) -> None:
    """block.sliding_window when the config turns the window on; `default` is the config class's
    window for an absent `sliding_window` key (an explicit null means no window)."""
    window = f.raw("sliding_window", None) if f.has("sliding_window") else default
    f.ignore("sliding_window")
    if not active:
        return
    if window is None:
        raise f.invalid("sliding_window", window, "a window size, since this config turns sliding attention on")
    width = _window(f, "sliding_window", window, model["max_positions"])
    if width:
        block["sliding_window"] = width


def _llama(f: _Fields) -> tuple[dict, dict]:
    f.ignore("pretraining_tp")  # splits the same matmuls into slices: the same function
    # nanotron's exports (SmolLM2) say which RoPE layout they use; true would be GPT-J's interleaved pairs
    f.neutral("rope_interleaved", False, "transformers' Llama rotates halves (i, i + r/2) whatever it says, so "
                                         "interleaved-pair weights would not give the model it describes")
    return _gated_rms(f, _silu_gate, kv_default=None, tie_default=False)


def _mistral(f: _Fields) -> tuple[dict, dict]:
    block, model = _gated_rms(f, _silu_gate, kv_default=8, tie_default=False,
                              qkv_bias=False, out_bias=False, mlp_bias=False)
    # MistralForCausalLM masks by sliding_window alone (MistralConfig defaults it to 4096) and only
    # warns about layer_types, which Ministral reads
    f.ignore("layer_types")
    _window_by_key(f, block, model, default=4096)
    return block, model


def _window_by_key(f: _Fields, block: dict, model: dict, default: int | None) -> None:
    """Families whose window is on whenever `sliding_window` is not null (Mistral, StarCoder2)."""
    window_on = f.data.get("sliding_window") is not None if f.has("sliding_window") else default is not None
    _sliding(f, block, model, window_on, default)


def _qwen2(f: _Fields) -> tuple[dict, dict]:
    f.neutral("use_mrope", False, "multimodal RoPE (Qwen2-VL) splits positions over time, height and width")
    block, model = _gated_rms(f, _silu_gate, kv_default=32, tie_default=False,
                              qkv_bias=True, out_bias=False, mlp_bias=False)
    _qwen_window(f, block, model)
    return block, model


def _qwen_window(f: _Fields, block: dict, model: dict) -> None:
    """Qwen2/Qwen3: `use_sliding_window` puts the window on layers max_window_layers and up."""
    use_window = f.bool("use_sliding_window", False)
    f.ignore("max_window_layers")  # read only when the window is on
    sliding = _layer_types(f, model["n_layers"])
    if sliding is None and use_window:
        first = f.int("max_window_layers", 28, minimum=0)
        if 0 < first < model["n_layers"]:
            raise f.unrepresentable("max_window_layers", first, f"the window applies to layers {first} and up only; "
                                                                f"blockcli's layers are all alike")
        sliding = first == 0
    _sliding(f, block, model, bool(sliding), default=4096)  # Qwen2Config/Qwen3Config: sliding_window 4096


def _qwen3(f: _Fields) -> tuple[dict, dict]:
    block, model = _gated_rms(f, _silu_gate, kv_default=32, tie_default=False, head_dim_default=128,
                              mlp_bias=False)
    block["qk_norm"] = "head"  # q_norm and k_norm: RMSNorm over each head's d_h, before RoPE
    _qwen_window(f, block, model)
    return block, model


def _olmo2(f: _Fields) -> tuple[dict, dict]:
    """OLMo 2: Llama's gated MLP and RMSNorm, but each branch's output is normalised before its residual
    add (no norm on the branch inputs), and Q and K are normalised over the whole projection."""
    block, model = _gated_rms(f, _silu_gate, kv_default=None, tie_default=False, mlp_bias=False, eps_default=1e-5)
    block.update(placement="post_branch", qk_norm="projection")
    return block, model


def _starcoder2(f: _Fields) -> tuple[dict, dict]:
    """StarCoder2: LayerNorm with shift, a plain (ungated) MLP, `use_bias` on every linear layer, GQA, RoPE."""
    # the published configs carry fields of the original training code that transformers never reads
    f.neutral("norm_type", "layer_norm", "blockcli maps StarCoder2's LayerNorm; another norm_type is another model")
    f.neutral("mlp_type", "default", "blockcli maps StarCoder2's plain MLP; another mlp_type is another model")
    f.ignore("layer_norm_epsilon")  # unread by transformers, which takes norm_epsilon
    d = f.int("hidden_size")
    heads = f.int("num_attention_heads")
    kv = f.int("num_key_value_heads", 2)
    if heads % kv:
        raise ConfigError(f"{f.where}: field 'num_key_value_heads' = {kv} does not divide "
                          f"'num_attention_heads' = {heads}")
    head_dim = f.int("head_dim") if f.data.get("head_dim") is not None else _divides(
        f, "hidden_size", d, "num_attention_heads", heads)
    f.ignore("head_dim")
    theta, _, scaling = _rope_base(f, ("rope_theta",), 10000.0, max_positions=f.int("max_position_embeddings"))
    bias = f.bool("use_bias", True)
    block = {
        "d_model": d, "n_heads": heads, "n_kv_heads": kv, "head_dim": head_dim,
        "d_ff": f.int("intermediate_size"), "norm": "layernorm", "norm_eps": f.float("norm_epsilon", 1e-5),
        "activation": _plain_activation(f, "hidden_act", "gelu_pytorch_tanh"),
        "bias": _bias(bias, bias, bias, True),  # nn.LayerNorm keeps its shift whatever use_bias says
        "placement": "pre", "rope": True, "rope_theta": theta,
    }
    if scaling:
        block["rope_scaling"] = scaling
    model = _model(f.int("num_hidden_layers"), f.int("vocab_size"), "rope", f.int("max_position_embeddings"),
                   f.bool("tie_word_embeddings", True))
    f.ignore("layer_types")  # Starcoder2ForCausalLM masks by sliding_window alone (default: none)
    _window_by_key(f, block, model, default=None)
    return block, model


def _gemma_gate(f: _Fields) -> str:
    """Which gated activation Gemma runs, where transformers' versions agree on it.

    transformers 5 runs `hidden_act` (default gelu_pytorch_tanh; the legacy "gelu" of the original
    releases means the tanh approximation) and ignores `hidden_activation`; transformers 4 ran
    `hidden_activation`, or gelu_pytorch_tanh when it was absent. A config on which the two
    disagree is refused, naming the field.
    """
    act = _gated_activation(f, "hidden_act", "gelu_pytorch_tanh", exact_gelu_is_tanh=True)  # transformers 5
    if f.data.get("hidden_activation") is None:
        f.ignore("hidden_activation")
        older = "geglu"  # transformers 4 without hidden_activation: gelu_pytorch_tanh
    else:
        older = _gated_activation(f, "hidden_activation", "gelu_pytorch_tanh")
    if act != older:
        key = "hidden_activation" if f.data.get("hidden_activation") is not None else "hidden_act"
        raise f.unrepresentable(key, f.data[key], "transformers 5 runs hidden_act (gelu_pytorch_tanh by default) and "
                                                  "transformers 4 ran hidden_activation (gelu_pytorch_tanh by default): "
                                                  "on this config they run different activations")
    return act


def _gemma(f: _Fields) -> tuple[dict, dict]:
    # transformers 5 writes `use_bidirectional_attention: null`; true would make attention non-causal
    if f.data.get("use_bidirectional_attention") is not None:
        f.neutral("use_bidirectional_attention", False, "blockcli's attention is causal")
    f.ignore("use_bidirectional_attention")
    block, model = _gated_rms(f, _gemma_gate, kv_default=16, tie_default=True, head_dim_default=256, mlp_bias=False)
    block["norm_unit_offset"] = True  # RMSNorm scales by (1 + w)
    model["embedding_multiplier"] = math.sqrt(block["d_model"])
    return block, model


def _gptj(f: _Fields) -> tuple[dict, dict]:
    """GPT-J: one LayerNorm read by attention and MLP side by side, interleaved-pair RoPE on the first
    `rotary_dim` dims of each head (base 10000, not configurable), bias-free attention, an untied
    LM head with a bias."""
    d = f.int("n_embd")
    heads = f.int("n_head")
    head_dim = _divides(f, "n_embd", d, "n_head", heads)
    if f.has("rotary_dim") and f.data["rotary_dim"] is None:  # transformers then builds n_embd-wide tables
        raise f.unrepresentable("rotary_dim", None, "transformers' GPT-J then rotates whole heads with tables "
                                                    "n_embd wide, which only fit a single head")
    rotary_dim = f.int("rotary_dim", 64)
    if rotary_dim % 2 or rotary_dim > head_dim:
        raise f.unrepresentable("rotary_dim", rotary_dim, f"expected an even number of dims of a {head_dim}-wide head")
    # the original GPT-J config.json says rotary: true and scale_attn_weights: true; transformers reads neither
    f.neutral("rotary", True, "transformers' GPT-J always rotates q and k")
    f.neutral("scale_attn_weights", True, "blockcli always scales attention scores by 1/sqrt(head_dim)")
    block = {
        "d_model": d, "n_heads": heads, "n_kv_heads": heads, "head_dim": head_dim,
        "d_ff": f.int("n_inner", 4 * d),  # null means 4·n_embd
        "norm": "layernorm", "norm_eps": f.float("layer_norm_epsilon", 1e-5),
        "activation": _plain_activation(f, "activation_function", "gelu_new"),
        "bias": _bias(False, False, True, True),
        "placement": "parallel_shared", "rope": _rotating(rotary_dim, head_dim), "rope_theta": 10000.0,
        "rope_layout": "interleaved",
    }
    model = _model(f.int("n_layer"), f.int("vocab_size"), "rope", f.int("n_positions"),
                   f.bool("tie_word_embeddings", False))
    model["lm_head_bias"] = True
    return block, model


def _rotating(rotated: int, head_dim: int) -> float:
    """The fraction block.rope for exactly `rotated` dims: int(head_dim * fraction) == rotated (the
    plain quotient can land a hair below, e.g. 30/44·44 = 29.999…)."""
    fraction = rotated / head_dim
    return fraction if int(head_dim * fraction) == rotated else math.nextafter(fraction, 2.0)


def _phi(f: _Fields) -> tuple[dict, dict]:
    """Phi-1/1.5/2: one LayerNorm read by attention and MLP side by side, rotate-half RoPE on
    int(head_dim · partial_rotary_factor) dims, biases everywhere, an untied LM head with a bias."""
    d = f.int("hidden_size")
    heads = f.int("num_attention_heads")
    kv = f.int("num_key_value_heads", heads)
    if heads % kv:
        raise ConfigError(f"{f.where}: field 'num_key_value_heads' = {kv} does not divide "
                          f"'num_attention_heads' = {heads}")
    head_dim = _divides(f, "hidden_size", d, "num_attention_heads", heads)
    f.neutral("qk_layernorm", False, "a LayerNorm over each head's q and k, which blockcli's Phi does not have")
    theta, fraction, scaling = _rope_base(f, ("rope_theta",), 10000.0, ("partial_rotary_factor",), 0.5,
                                          f.int("max_position_embeddings"))
    rotated = int(head_dim * fraction)
    if rotated % 2 or not rotated:
        raise f.unrepresentable("partial_rotary_factor", fraction, f"it rotates {rotated} of {head_dim} dimensions "
                                                                   f"per head; expected an even number, at least 2")
    block = {
        "d_model": d, "n_heads": heads, "n_kv_heads": kv, "head_dim": head_dim,
        "d_ff": f.int("intermediate_size"), "norm": "layernorm", "norm_eps": f.float("layer_norm_eps", 1e-5),
        "activation": _plain_activation(f, "hidden_act", "gelu_new"),
        "bias": True, "placement": "parallel_shared", "rope": fraction, "rope_theta": theta,
    }
    if scaling:
        block["rope_scaling"] = scaling
    model = _model(f.int("num_hidden_layers"), f.int("vocab_size"), "rope", f.int("max_position_embeddings"),
                   f.bool("tie_word_embeddings", False))
    model["lm_head_bias"] = True
    return block, model


def _granite(f: _Fields) -> tuple[dict, dict]:
    """Granite: Llama with four scalars. Token embeddings times `embedding_multiplier`, each branch
    output times `residual_multiplier` before its add, attention scores Q·Kᵀ times
    `attention_multiplier` (in place of 1/√d_h; its default 1.0 is used as given), logits divided by
    `logits_scaling` (`model.logit_multiplier` = 1 / logits_scaling)."""
    block, model = _gated_rms(f, _silu_gate, kv_default=None, tie_default=False)
    block["attention_scale"] = f.float("attention_multiplier", 1.0, high=1e6)
    block["residual_multiplier"] = f.float("residual_multiplier", 1.0, high=1e6)
    model["embedding_multiplier"] = f.float("embedding_multiplier", 1.0, high=1e6)
    model["logit_multiplier"] = 1.0 / f.float("logits_scaling", 1.0, low=1e-6, high=1e6)
    return block, model


def _kv_heads(f: _Fields, heads: int, default: int) -> int:
    """`num_key_value_heads` (`default` when absent or null), which must divide the query heads."""
    kv = f.int("num_key_value_heads", default)
    if heads % kv:
        raise ConfigError(f"{f.where}: field 'num_key_value_heads' = {kv} does not divide "
                          f"'num_attention_heads' = {heads}")
    return kv


def _cohere(f: _Fields) -> tuple[dict, dict]:
    """Cohere (Command-R): one LayerNorm without a shift (mean-centred, in float32) read by attention and
    the SwiGLU MLP side by side, interleaved-pair RoPE over the whole head, logits times `logit_scale`,
    tied embeddings by default."""
    qk_norm = f.raw("use_qk_norm", None)
    if qk_norm not in (None, False):  # null and false both leave the norms out (`if self.use_qk_norm`)
        raise f.unrepresentable("use_qk_norm", qk_norm, "Command R+'s LayerNorm over each head of q and k, with "
                                                        "weights (h, d_h) per head, which blockcli does not model")
    if f.has("logit_scale") and f.data["logit_scale"] is None:
        raise f.unrepresentable("logit_scale", None, "transformers multiplies the logits by it, so null is no model")
    d = f.int("hidden_size")
    heads = f.int("num_attention_heads")
    kv = _kv_heads(f, heads, heads)
    head_dim = f.int("head_dim") if f.data.get("head_dim") is not None else _divides(
        f, "hidden_size", d, "num_attention_heads", heads)
    f.ignore("head_dim")
    max_positions = f.int("max_position_embeddings")
    theta, _, scaling = _rope_base(f, ("rope_theta",), 500000.0, max_positions=max_positions)  # CohereConfig's
    bias = f.bool("attention_bias", False)
    block = {
        "d_model": d, "n_heads": heads, "n_kv_heads": kv, "head_dim": head_dim,
        "d_ff": f.int("intermediate_size"), "norm": "layernorm", "norm_eps": f.float("layer_norm_eps", 1e-5),
        "activation": _silu_gate(f),
        "bias": _bias(bias, bias, False, False),  # CohereLayerNorm has no shift; the MLP no biases
        "placement": "parallel_shared", "rope": True, "rope_theta": theta, "rope_layout": "interleaved",
    }
    if scaling:
        block["rope_scaling"] = scaling
    model = _model(f.int("num_hidden_layers"), f.int("vocab_size"), "rope", max_positions,
                   f.bool("tie_word_embeddings", True))
    model["logit_multiplier"] = f.float("logit_scale", 0.0625, high=1e6)
    return block, model


def _stablelm(f: _Fields) -> tuple[dict, dict]:
    """StableLM (2): LayerNorm with a shift, SwiGLU without biases, q/k/v biases if `use_qkv_bias`,
    rotate-half RoPE on int(head_dim · partial_rotary_factor) dims; `use_parallel_residual` runs
    attention and the MLP side by side on the one input_layernorm (no second norm)."""
    f.neutral("qk_layernorm", False, "StableLM 2 12B's LayerNorm per head of q and k, one weight (and bias) per "
                                     "head, which blockcli does not model")
    d = f.int("hidden_size")
    heads = f.int("num_attention_heads")
    kv = _kv_heads(f, heads, 32)  # StableLmConfig's default
    head_dim = _divides(f, "hidden_size", d, "num_attention_heads", heads)
    max_positions = f.int("max_position_embeddings")
    theta, fraction, scaling = _rope_base(f, ("rope_theta",), 10000.0, ("partial_rotary_factor",), 0.25,
                                          max_positions)
    rotated = int(head_dim * fraction)
    if rotated % 2 or not rotated:
        raise f.unrepresentable("partial_rotary_factor", fraction, f"it rotates {rotated} of {head_dim} dimensions "
                                                                   f"per head; expected an even number, at least 2")
    qkv_bias = f.bool("use_qkv_bias", False)
    block = {
        "d_model": d, "n_heads": heads, "n_kv_heads": kv, "head_dim": head_dim,
        "d_ff": f.int("intermediate_size"), "norm": "layernorm", "norm_eps": f.float("layer_norm_eps", 1e-5),
        "activation": _silu_gate(f),
        "bias": _bias(qkv_bias, False, False, True),  # o_proj and the MLP never have biases; nn.LayerNorm does
        "placement": "parallel_shared" if f.bool("use_parallel_residual", False) else "pre",
        "rope": _rotating(rotated, head_dim), "rope_theta": theta,
    }
    if scaling:
        block["rope_scaling"] = scaling
    model = _model(f.int("num_hidden_layers"), f.int("vocab_size"), "rope", max_positions,
                   f.bool("tie_word_embeddings", False))
    return block, model


def _phi3(f: _Fields) -> tuple[dict, dict]:
    """Phi-3/3.5 (and Phi-4-mini): Llama's pre-norm block (RMSNorm, SiLU-gated MLP, GQA) with Q | K | V fused
    in one matrix and gate | up in another, no biases, rotate-half RoPE on int(head_dim ·
    partial_rotary_factor) dims, longrope scaling, an optional sliding window."""
    f.neutral("attention_bias", False, "transformers' Phi-3 has no biases")  # the published configs say false
    for key in ("rope_scaling", "rope_parameters"):
        params = f.data.get(key)
        kind = params.get("rope_type", params.get("type", "default")) if isinstance(params, Mapping) else "default"
        if kind in ("su", "yarn"):  # Phi3Config renames both
            raise f.unrepresentable(key, dict(params), f"transformers' Phi-3 reads rope type {kind!r} as "
                                                       f"'longrope'; say 'longrope' to mean that")
        if kind not in ("default", "longrope"):
            raise f.unrepresentable(key, dict(params), f"transformers' Phi-3 accepts only longrope scaling, "
                                                       f"not {kind!r}")
    block, model = _gated_rms(f, _silu_gate, kv_default=None, tie_default=False, qkv_bias=False, out_bias=False,
                              mlp_bias=False, eps_default=1e-5, fraction_keys=("partial_rotary_factor",))
    rotated = int(block["head_dim"] * block["rope"])
    if rotated % 2 or not rotated:
        raise f.unrepresentable("partial_rotary_factor", block["rope"], f"it rotates {rotated} of "
                                                                        f"{block['head_dim']} dimensions per head; "
                                                                        f"expected an even number, at least 2")
    f.ignore("original_max_position_embeddings")  # read by longrope; without it, unused
    _window_by_key(f, block, model, default=None)  # Phi3Config: no window unless sliding_window says
    return block, model


def _gpt_bigcode(f: _Fields) -> tuple[dict, dict]:
    """GPTBigCode (SantaCoder, StarCoder): GPT-2's block (learned positions, LayerNorm, biases everywhere,
    plain MLP; nn.Linear rather than Conv1D, which only the tensor map sees) with multi-query attention,
    one K/V head, unless `multi_query` is false."""
    block, model = _gpt2(f)
    kv = 1 if f.bool("multi_query", True) else block["n_heads"]
    # transformers 5 writes the K/V head count multi_query implies; its modelling code reads multi_query only
    f.neutral("num_key_value_heads", kv, f"GPTBigCode has {kv} K/V head(s) when multi_query is "
                                         f"{str(kv == 1).lower()}; it has no grouped-query attention")
    block["n_kv_heads"] = kv
    return block, model


def _falcon(f: _Fields) -> tuple[dict, dict]:
    """Falcon: LayerNorm, plain MLP, RoPE over whole heads, `bias` on every linear layer. Falcon-7B's blocks
    run attention and MLP in parallel on one norm, with multi-query attention; the new decoder architecture
    (Falcon-40B/180B) gives each branch its own norm and has `num_kv_heads` K/V heads."""
    if f.data.get("alibi"):
        raise f.unrepresentable("alibi", f.data["alibi"], "ALiBi attention biases are not modelled; blockcli's "
                                                          "Falcon uses rotary positions")
    f.ignore("alibi")
    # the original RefinedWeb configs carry it; transformers never reads it (true would put the residual after
    # the norm)
    f.neutral("apply_residual_connection_post_layernorm", False, "transformers' Falcon adds the residual before "
                                                                 "any norm whatever it says")
    d = _first(f, ("hidden_size", "n_embed"), lambda k: f.int(k), None)  # n_embed: the legacy name
    if d is None:
        f.int("hidden_size")  # raises: missing
    heads = f.int("num_attention_heads")
    head_dim = _divides(f, "hidden_size", d, "num_attention_heads", heads)
    kv_field = f.int("num_kv_heads", heads)
    parallel = f.bool("parallel_attn", True)
    norms = f.int("num_ln_in_parallel_attn") if f.raw("num_ln_in_parallel_attn", None) is not None else None
    if f.bool("new_decoder_architecture", False):
        f.ignore("multi_query")  # the new decoder reads num_kv_heads instead
        if not parallel:
            raise f.unrepresentable("parallel_attn", False, "transformers' Falcon cannot run the new decoder "
                                                            "architecture with sequential attention and MLP")
        kv = kv_field
        if heads % kv:
            raise ConfigError(f"{f.where}: field 'num_kv_heads' = {kv} does not divide "
                              f"'num_attention_heads' = {heads}")
        if norms not in (None, 1, 2):
            raise f.invalid("num_ln_in_parallel_attn", norms, "1 or 2")
        placement = "parallel_shared" if norms == 1 else "parallel"  # None means 2: ln_attn and ln_mlp
    else:
        kv = 1 if f.bool("multi_query", True) else heads
        if kv == heads and kv_field != heads:  # transformers would reshape heads·d_h keys into num_kv_heads heads
            raise f.unrepresentable("num_kv_heads", kv_field, "without multi_query or the new decoder "
                                                              "architecture, every Falcon head has its own K/V")
        if parallel and norms not in (None, 1):
            raise f.unrepresentable("num_ln_in_parallel_attn", norms, "transformers' Falcon reads two parallel "
                                                                      "norms only in the new decoder architecture")
        placement = "parallel_shared" if parallel else "pre"
    max_positions = f.int("max_position_embeddings", 2048)
    theta, _, scaling = _rope_base(f, ("rope_theta",), 10000.0, max_positions=max_positions)
    bias = f.bool("bias", False)
    block = {
        "d_model": d, "n_heads": heads, "n_kv_heads": kv, "head_dim": head_dim,
        "d_ff": f.int("ffn_hidden_size", 4 * d),  # null means 4·hidden_size
        "norm": "layernorm", "norm_eps": f.float("layer_norm_epsilon", 1e-5),
        "activation": _plain_activation(f, "activation", "gelu"),
        "bias": _bias(bias, bias, bias, True),  # torch's LayerNorm keeps its shift whatever `bias` says
        "placement": placement, "rope": True, "rope_theta": theta,
    }
    if scaling:
        block["rope_scaling"] = scaling
    model = _model(f.int("num_hidden_layers"), f.int("vocab_size"), "rope", max_positions,
                   f.bool("tie_word_embeddings", True))
    return block, model


def _moe_layers(f: _Fields) -> None:
    """Qwen-MoE: every layer must be a MoE layer (blockcli's layers are all alike, for now)."""
    step = f.int("decoder_sparse_step", 1)
    if step != 1:  # layers with (i + 1) % step == 0 are MoE, the others dense
        raise f.unrepresentable("decoder_sparse_step", step, "MoE on every k-th layer only mixes dense and MoE "
                                                             "layers; blockcli's layers are all alike until "
                                                             "per-layer overrides land")
    only = f.raw("mlp_only_layers", [])
    if not isinstance(only, list):
        raise f.invalid("mlp_only_layers", only, "an array of layer indices")
    if only:
        raise f.unrepresentable("mlp_only_layers", only, "dense MLPs on some layers mix dense and MoE layers; "
                                                         "blockcli's layers are all alike until per-layer "
                                                         "overrides land")


def _mixtral(f: _Fields) -> tuple[dict, dict]:
    """Mixtral: Mistral's block (GQA, RMSNorm, RoPE θ 1e6 by default, a window only if `sliding_window`
    is set) with a SwiGLU mixture of experts: softmax over `num_local_experts`, top `num_experts_per_tok`,
    the k weights renormalised (MixtralTopKRouter always divides by their sum)."""
    block, model = _gated_rms(f, _silu_gate, kv_default=8, tie_default=False, qkv_bias=False, out_bias=False,
                              mlp_bias=False, eps_default=1e-5)
    params = f.data.get("rope_parameters")
    if f.data.get("rope_theta") is None and not (isinstance(params, dict) and params.get("rope_theta") is not None):
        block["rope_theta"] = 1e6  # MixtralConfig.default_theta
    _window_by_key(f, block, model, default=None)
    block["moe"] = {"n_experts": f.int("num_local_experts", 8), "top_k": f.int("num_experts_per_tok", 2),
                    "d_expert": block["d_ff"], "renormalize": True}
    return block, model


def _qwen_moe(f: _Fields, block: dict, model: dict, d_expert_default: int, top_k_default: int,
              experts_default: int) -> None:
    _moe_layers(f)
    f.ignore("intermediate_size")  # the dense layers' width: no layer is dense here
    # transformers 5 writes Qwen3-MoE's num_experts as num_local_experts (its attribute_map)
    n_experts = _first(f, ("num_experts", "num_local_experts"), lambda key: f.int(key), experts_default)
    block["moe"] = {"n_experts": n_experts,
                    "top_k": f.int("num_experts_per_tok", top_k_default),
                    "d_expert": f.int("moe_intermediate_size", d_expert_default),
                    "renormalize": f.bool("norm_topk_prob", False)}


def _qwen2_moe(f: _Fields) -> tuple[dict, dict]:
    """Qwen2-MoE (Qwen1.5-MoE): Qwen2's attention (q/k/v biases if `qkv_bias`, default true) and a mixture of
    experts with a shared expert gated by sigmoid(x·shared_expert_gate)."""
    block, model = _gated_rms(f, _silu_gate, kv_default=16, tie_default=False,
                              qkv_bias=f.bool("qkv_bias", True), out_bias=False, mlp_bias=False)
    if f.bool("use_sliding_window", False):
        raise f.unrepresentable("use_sliding_window", True, "Qwen2-MoE slides on alternate layers below "
                                                            "max_window_layers; blockcli's layers are all alike")
    f.ignore("sliding_window", "max_window_layers")  # read only when the window is on
    if _layer_types(f, model["n_layers"]):
        raise f.unrepresentable("layer_types", f.data["layer_types"], "use_sliding_window is false, so "
                                                                     "transformers would not slide")
    _qwen_moe(f, block, model, 1408, 4, 60)
    shared = f.int("shared_expert_intermediate_size", 5632)
    block["moe"].update(d_shared=shared, shared_gate=True)
    return block, model


def _qwen3_moe(f: _Fields) -> tuple[dict, dict]:
    """Qwen3-MoE: Qwen3's attention (q_norm and k_norm per head, `attention_bias` on q/k/v/o) and a mixture
    of experts without a shared one; `use_sliding_window` slides on every layer."""
    block, model = _gated_rms(f, _silu_gate, kv_default=4, tie_default=False, mlp_bias=False)
    block["qk_norm"] = "head"
    f.ignore("max_window_layers")  # Qwen3's field, written into Qwen3-MoE configs; Qwen3-MoE never reads it
    _sliding(f, block, model, f.bool("use_sliding_window", False), default=4096)
    _qwen_moe(f, block, model, 768, 8, 128)
    return block, model


class _Family:
    def __init__(self, title: str, mapper: Callable[[_Fields], tuple[dict, dict]], ignored: set[str]) -> None:
        self.title, self.mapper, self.ignored = title, mapper, frozenset(ignored)


_LLAMA_LIKE_IGNORED = {"attention_dropout"}  # training-only
# the router's load-balancing loss (its coefficient, and whether the logits are returned for it): training only
_MOE_IGNORED = _LLAMA_LIKE_IGNORED | {"output_router_logits", "router_aux_loss_coef"}

FAMILIES: dict[str, _Family] = {
    "gpt2": _Family("GPT-2", _gpt2, {
        "n_ctx",  # legacy duplicate of n_positions, unused by HF GPT-2
        "n_special",  # OpenAI GPT's count of special tokens, unused by HF GPT-2 (gpt2-medium's config has it)
        "attn_pdrop", "embd_pdrop", "resid_pdrop", "summary_first_dropout",  # training-only dropout
        "reorder_and_upcast_attn",  # numerics of fp16 training, same function
        # GPT2DoubleHeadsModel / sequence-classification heads, not part of the LM
        "summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
    }),
    "opt": _Family("OPT", _opt, {
        "dropout", "attention_dropout", "activation_dropout", "layerdrop",  # training-only
        "init_std",
    }),
    "gpt_neox": _Family("GPT-NeoX", _neox, {
        "attention_dropout", "hidden_dropout", "classifier_dropout",  # training-only
        "use_memory_efficient_attention",
    }),
    "llama": _Family("LLaMA", _llama, _LLAMA_LIKE_IGNORED),
    "mistral": _Family("Mistral", _mistral, _LLAMA_LIKE_IGNORED),
    "qwen2": _Family("Qwen2", _qwen2, _LLAMA_LIKE_IGNORED),
    "qwen3": _Family("Qwen3", _qwen3, _LLAMA_LIKE_IGNORED),
    "olmo2": _Family("OLMo 2", _olmo2, _LLAMA_LIKE_IGNORED),
    "starcoder2": _Family("StarCoder2", _starcoder2, {
        "attention_dropout", "residual_dropout", "embedding_dropout",  # training-only
    }),
    "gemma": _Family("Gemma", _gemma, _LLAMA_LIKE_IGNORED),
    "gptj": _Family("GPT-J", _gptj, {
        "attn_pdrop", "embd_pdrop", "resid_pdrop", "summary_first_dropout",  # training-only dropout
        # GPTJForSequenceClassification / double-heads settings, not part of the LM
        "summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
    }),
    "granite": _Family("Granite", _granite, _LLAMA_LIKE_IGNORED),
    "cohere": _Family("Cohere", _cohere, _LLAMA_LIKE_IGNORED),
    "stablelm": _Family("StableLM", _stablelm, {"attention_dropout", "hidden_dropout"}),  # training-only
    "phi": _Family("Phi", _phi, {
        "attention_dropout", "embd_pdrop", "resid_pdrop",  # training-only dropout
    }),
    "phi3": _Family("Phi-3", _phi3, {
        "attention_dropout", "embd_pdrop", "resid_pdrop",  # training-only dropout
    }),
    "gpt_bigcode": _Family("GPTBigCode", _gpt_bigcode, {
        "attn_pdrop", "embd_pdrop", "resid_pdrop", "summary_first_dropout",  # training-only dropout
        # where the softmax runs in half-precision training; transformers' eager attention ignores both
        "attention_softmax_in_fp32", "scale_attention_softmax_in_fp32",
        # settings of BigCode's own inference runner and exporter, never read by transformers
        "inference_runner", "validate_runner_input", "max_batch_size", "max_sequence_length", "pad_key_length",
        "pre_allocate_kv_cache", "n_ctx",
        # sequence-classification / double-heads settings, not part of the LM
        "summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
    }),
    "falcon": _Family("Falcon", _falcon, {
        "hidden_dropout", "attention_dropout",  # training-only
    }),
    "mixtral": _Family("Mixtral", _mixtral, _MOE_IGNORED | {"router_jitter_noise"}),  # jitter: training only
    "qwen2_moe": _Family("Qwen2-MoE", _qwen2_moe, _MOE_IGNORED),
    "qwen3_moe": _Family("Qwen3-MoE", _qwen3_moe, _MOE_IGNORED),
}


# --------------------------------------------------------------------------- YAML writing


def _yaml_entry(key: Any, value: Any, indent: int) -> list[str]:
    pad = " " * indent
    name = _yaml_key(key)
    if isinstance(value, Mapping):
        if not value:
            return [f"{pad}{name}: {{}}"]
        lines = [f"{pad}{name}:"]
        for sub_key, sub_value in value.items():
            lines.extend(_yaml_entry(sub_key, sub_value, indent + 2))
        return lines
    return [f"{pad}{name}: {_yaml_scalar(value)}"]


def _yaml_key(key: Any) -> str:
    if not isinstance(key, str):
        raise TypeError(f"to_yaml: keys must be strings, got {key!r}")
    return key if _plain_ok(key) else _yaml_string(key)


# Words a YAML 1.1 loader (PyYAML) reads as something other than the same string.
_YAML_SPECIAL_WORDS = frozenset({"null", "true", "false", "yes", "no", "on", "off", "y", "n"})


def _plain_ok(text: str) -> bool:
    """Whether `text` can be written unquoted and read back as the same string: identifier-like words."""
    return (bool(text) and text.isascii() and (text[0].isalpha() or text[0] == "_")
            and all(c.isalnum() or c in "_.-" for c in text) and text.lower() not in _YAML_SPECIAL_WORDS)


def _yaml_scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError(f"to_yaml: non-finite float {value!r}")
        text = repr(value)
        if "e" in text or "E" in text:
            mantissa, exponent = text.lower().split("e")
            if "." not in mantissa:
                mantissa += ".0"
            if exponent[0] not in "+-":
                exponent = "+" + exponent
            text = f"{mantissa}e{exponent}"
        elif "." not in text:
            text += ".0"
        return text
    if isinstance(value, str):
        return value if _plain_ok(value) else _yaml_string(value)
    if isinstance(value, (list, tuple)):  # a flow sequence of scalars (longrope's factors)
        return "[" + ", ".join(_yaml_scalar(item) for item in value) + "]"
    raise TypeError(f"to_yaml: cannot write {type(value).__name__} value {value!r}")


def _yaml_string(text: str) -> str:
    """A double-quoted YAML scalar: printable ASCII kept, everything else escaped."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif 0x20 <= code < 0x7F:
            out.append(ch)
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return '"' + "".join(out) + '"'
