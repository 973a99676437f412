"""Hugging Face `config.json` → blockcli config (and back out as commented YAML).

`config_from_hf(path)` reads a `config.json` as saved by HF transformers and maps it onto
blockcli's schema: a plain mapping shaped like a preset YAML (`about`, `block`, `model`,
`run`) that `blockcli.config.parse_config` validates. `hf_to_mapping` is that mapping step on
already-parsed JSON; `to_yaml` writes a mapping out as YAML text (by hand: only config.py
imports yaml) that `load_config` reads back to an equal Config. Each family's own map lives in
blockcli/families/ (one table row per `model_type`).

The rule for every key of the JSON object is one of four, and never "silently dropped":

1. **mapped**: it determines a blockcli field (sizes, norm, activation, biases, positions, ...);
2. **ignored on purpose**: it cannot change the architecture or the inference-time function
   (token ids, dtype, `use_cache`, initializer ranges, `architectures`, generation settings,
   and dropout rates, which only act in training; blockcli's presets describe the model in
   eval mode, so `block.dropout` stays 0). Each family has an explicit allow-list;
3. **unread by transformers**: a field of the family's published configs that its transformers
   modelling code never reads (`Family.unread`, each with the reason it was checked by): accepted at
   any value, with a note naming it, and never mapped, so it changes no number (transformers' model
   is the same with or without it);
4. **an error**: anything else, including a known field at a value blockcli cannot express
   (an exact-erf gated GELU, `layer_norm_elementwise_affine: false`, ...), and any key no
   family map reads. The message names the field: ``<file>: field 'alibi' = True cannot be
   represented in blockcli's schema (why)``. `--allow-field NAME` accepts one unknown key at the
   user's risk, and the Config's notes say so.

`quantization_config` is read by `fields.read_quantization`: a method blockcli recognises (fp8 with
per-block scales, gptq, awq, compressed-tensors) becomes `Config.quantization`, the counts stay those of
the logical model and a note says so; any other is an error naming its quant_method.

A vision-language config (Gemma 3 4B and up, Mistral Small 3.1: `model_type` gemma3, mistral3) is
read as its `text_config`, the language model blockcli counts and runs; its top level is checked like
a family's, and a note says the vision tower and projector are not counted
(blockcli/families/common.py: `Composite`).

Defaults for absent optional fields are those of the HF config class of the family (e.g.
`rms_norm_eps` 1e-6 for Llama, `head_dim` 256 for Gemma, `num_key_value_heads` 8 for Mistral,
`tie_word_embeddings` true for GPT-2/OPT/Gemma). Sizes (width, heads, layers, MLP width,
vocabulary, context length) have no default here: a config.json without them is an error.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

from blockcli.config import Config, ConfigError, Quantization, parse_config, parse_json, read_text_file
from blockcli.families import COMPOSITES, FAMILIES
from blockcli.families.common import Composite, refuse_nulls
from blockcli.families.fields import COMMON_IGNORED, COMMON_NEUTRAL, Fields, an, json_kind, short
from blockcli.families.not_decoders import not_a_decoder

RUN_DEFAULTS = {"batch": 1, "seq_len": 8, "dtype": "float32", "seed": 0}
SECTION_ORDER = ("about", "block", "model", "layers", "run")


# --------------------------------------------------------------------------- entry points


def config_from_hf(path: str | Path, allow_fields: tuple[str, ...] = (), *, tensors_beside: bool = False) -> Config:
    """Read a Hugging Face config.json and return the validated blockcli Config."""
    return read_hf(path, allow_fields, tensors_beside=tensors_beside)[1]


def read_hf(path: str | Path, allow_fields: tuple[str, ...] = (), *, tensors_beside: bool = False
            ) -> tuple[dict[str, Any], Config]:
    """Read a Hugging Face config.json: the blockcli mapping (for `to_yaml`) and its validated Config.
    `allow_fields` are unknown fields the user accepts unchecked (`--allow-field`); the Config's
    notes say which were used. `tensors_beside`: the config was read for a model folder holding its weights
    (a quantization's note then says the stored bytes are its tensors', which are known)."""
    path = Path(path)
    return read_hf_text(read_text_file(path, "a Hugging Face config.json"), str(path), allow_fields,
                        tensors_beside=tensors_beside)


def read_hf_text(text: str, where: str, allow_fields: tuple[str, ...] = (), *, tensors_beside: bool = False
                 ) -> tuple[dict[str, Any], Config]:
    """`read_hf` on a config.json's text (standard input, say); `where` names it in messages."""
    data = parse_json(text, where)
    mapping, set_aside, quant = _mapped(data, where, allow_fields, tensors_beside)
    present, known = _keys(data)
    notes = tuple(f"{where}: {note}" for note in set_aside) + tuple(  # set_aside: said on every command
        _allowed_note(where, key, key in present, key in known) for key in dict.fromkeys(allow_fields))
    try:
        return mapping, replace(parse_config(mapping, name=where), notes=notes, quantization=quant)
    except ConfigError as exc:  # a mapped value blockcli rejects: say which file it came from
        raise ConfigError(f"{where}: {exc} (after mapping the Hugging Face config onto blockcli's schema)") from None


def _allowed_note(where: str, key: str, present: bool, known: bool) -> str:
    """What `--allow-field key` did, for the Config's notes: only an unknown field present is accepted."""
    if not present:
        return f"{where}: --allow-field {key}: no such field in this config.json, so it allows nothing"
    if known:
        return f"{where}: --allow-field {key}: blockcli already reads this field, so it allows nothing"
    return f"{where}: field '{key}' accepted unchecked (--allow-field): blockcli assumes it changes nothing"


def _keys(data: Mapping[str, Any]) -> tuple[set[str], set[str]]:
    """The keys of `data`, and those its family maps or ignores on purpose (all but unknown fields);
    for a vision-language config, of its top level and its text_config together."""
    present, known = set(data), COMMON_IGNORED | set(COMMON_NEUTRAL)
    composite = COMPOSITES.get(data["model_type"])
    if composite is not None:
        present |= set(data.get("text_config", ()))  # a flat config's fields are its top level's
        known |= composite.ignored | {"text_config", "tie_word_embeddings"}
        data = _language_model(data, "", composite, tuple(data))[0]  # every top-level key allowed: only reading
    family = FAMILIES[data["model_type"]]
    fields = Fields(data, "", family.title)
    family.read(fields)
    return present, known | fields.used | set(family.ignored) | set(family.unread)


def _language_model(data: Mapping[str, Any], where: str, composite: Composite,
                    allow_fields: tuple[str, ...] = ()) -> tuple[dict[str, Any], str, str, Quantization | None]:
    """A vision-language config's `text_config` (or, for a `flat` composite, the language model's fields
    at its top level) as a language model's own config.json: its model_type filled in, the head tied as
    the composite's `tie` rule says; where it is, and a note on what is set aside. The top level's own
    fields are checked like any family's; a quantization_config there is returned too."""
    flat_layout = composite.flat and "text_config" not in data
    if flat_layout:  # transformers 4's layout: the language model's fields at the top
        moved = (lambda k: k in composite.moves) if composite.moves else (lambda k: k not in composite.ignored)
        data = {**{k: v for k, v in data.items() if not moved(k) or k in ("model_type", "tie_word_embeddings")},
                "text_config": {k: v for k, v in data.items()
                                if moved(k) and k not in ("model_type", "tie_word_embeddings")}}
        inner = where
    else:
        inner = f"{where}: text_config"
    top = Fields(data, where, composite.title)
    if flat_layout:
        for key, (value, why) in composite.flat_neutral.items():
            top.neutral(key, value, why)
    text = top.raw("text_config", why="the language model's config, which is what blockcli reads")
    if not isinstance(text, Mapping):
        raise top.invalid("text_config", text, "an object (the language model's config)")
    if composite.flat:  # transformers 4.52-4.56 wrote the text fields at both levels; transformers reads text_config's
        for key in set(data) & set(text) - composite.ignored - {"model_type", "tie_word_embeddings"}:
            if data[key] != text[key]:
                raise top.unrepresentable(key, data[key], f"it disagrees with text_config's {short(text[key])}, "
                                                          f"which transformers reads")
            top.ignore(key)
    # the vision side's token ids, which transformers 4.52-4.56 also wrote into text_config
    text = {k: v for k, v in text.items() if k not in composite.ignored}
    if "tie_word_embeddings" in text:
        Fields(text, inner, composite.title).bool("tie_word_embeddings")  # true or false, nothing else
    refuse_nulls(top, "tie_word_embeddings")
    tie = top.bool("tie_word_embeddings", composite.tie_default)
    top.check_leftovers(composite.ignored | frozenset(allow_fields))
    quant = top.quantization
    text_type = text.get("model_type", composite.text_model_type)
    sizes = {composite.text_model_type: composite.text_defaults, **composite.others}
    if not isinstance(text_type, str) or text_type not in sizes:
        raise ConfigError(f"{inner}: field 'model_type' = {short(text_type)}: {an(composite.title)} config's "
                          f"language model is expected to be {' or '.join(map(repr, sizes))}")
    note = (f"the language model of {an(composite.title)} model: its vision tower and multimodal projector "
            f"are not counted or run")
    if composite.remark:
        note += f"; {composite.remark}"
    for key, why in composite.unapplied.items():
        if text.get(key) is not None:
            note += f"; text_config's {key} {short(text[key])} is not applied: {why}"
    text = {k: v for k, v in text.items() if k not in composite.unapplied}
    language = {**sizes[text_type], **text, "model_type": text_type}
    if composite.tie == "either":  # transformers' config class ties the top level when text_config ties
        return {**language, "tie_word_embeddings": tie or text.get("tie_word_embeddings", False)}, inner, note, quant
    if composite.tie == "text":  # the language model's own field (its family's default when absent) decides
        if "tie_word_embeddings" in data and "tie_word_embeddings" in text and text["tie_word_embeddings"] != tie:
            note += (f"; the LM head is {'tied' if text['tie_word_embeddings'] else 'untied'} as text_config's "
                     f"tie_word_embeddings says, not the top level's")
        return language, inner, note, quant
    if "tie_word_embeddings" in text and text["tie_word_embeddings"] != tie:
        note += (f"; the LM head is {'tied' if tie else 'untied'} as the top level's tie_word_embeddings says "
                 f"(transformers reads that one), not text_config's")
    return {**language, "tie_word_embeddings": tie}, inner, note, quant


def hf_to_mapping(data: Any, where: str, allow_fields: tuple[str, ...] = ()) -> dict[str, Any]:
    """Map a parsed HF config (a dict) onto a plain blockcli mapping; ConfigError on anything unrepresentable."""
    return _mapped(data, where, allow_fields)[0]


def _mapped(data: Any, where: str, allow_fields: tuple[str, ...], tensors_beside: bool = False
            ) -> tuple[dict[str, Any], list[str], Quantization | None]:
    """`hf_to_mapping`, the notes every command says (what a vision-language config's reading sets aside, the
    fields transformers never reads, a quantization), and the quantization_config recognised, if any.
    `tensors_beside`: the model folder holds the weights, whose stored bytes are then known from them."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: top level must be a JSON object (a Hugging Face config.json), "
                          f"got {json_kind(data)}")
    supported = ", ".join(sorted([*FAMILIES, *COMPOSITES]))
    if "model_type" not in data:
        raise ConfigError(f"{where}: field 'model_type' is missing; expected one of: {supported}")
    model_type, source, set_aside, quant = data["model_type"], where, [], None
    title = None  # whose config.json the messages name: the family's, or a flat composite's own (Phi-4-multimodal)
    if isinstance(model_type, str) and model_type in COMPOSITES:
        composite = COMPOSITES[model_type]
        title = composite.title if composite.flat and "text_config" not in data else None
        data, where, note, quant = _language_model(data, where, composite, allow_fields)
        set_aside.append(note)
    if not isinstance(model_type, str) or model_type not in FAMILIES and model_type not in COMPOSITES:
        if (why := not_a_decoder(model_type)) is not None:
            raise ConfigError(f"{where}: field 'model_type' = {short(model_type)} {why}")
        close = difflib.get_close_matches(str(model_type), [*FAMILIES, *COMPOSITES], n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise ConfigError(f"{where}: field 'model_type' = {short(model_type)} is not a supported model family "
                          f"(supported: {supported}){hint}")
    family = FAMILIES[data["model_type"]]
    fields = Fields(data, where, title or family.title)
    block, model = family.read(fields)
    set_aside.extend(fields.said)
    unread = [key for key in family.unread if key in data and key not in fields.used]
    fields.ignore(*unread)
    fields.check_leftovers(family.ignored | frozenset(allow_fields))
    if family.aux_loss and data.get("output_router_logits") is True and "moe" in block:  # the loss adds it
        block["moe"]["aux_loss_coef"] = fields.float("router_aux_loss_coef", 0.001, low=0.0, high=1e6, low_open=False)
    pad = data.get("pad_token_id")  # nn.Embedding's padding_idx: that row's gradient is always 0
    if family.padding_idx and isinstance(pad, int) and not isinstance(pad, bool) and 0 <= pad < model["vocab_size"]:
        model["padding_idx"] = pad

    run = dict(RUN_DEFAULTS)
    run["seq_len"] = min(run["seq_len"], model["max_positions"])
    description = f"{family.title} (model_type '{model_type}') from a Hugging Face config.json"
    if set_aside + fields.notes:
        description += "; " + "; ".join(set_aside + fields.notes)
    about = {"description": description, "source": source}
    if unread:  # said on every command, like a composite's note, but not part of the model's description
        set_aside.append(_unread_note(family.title, {key: family.unread[key] for key in unread}))
    quant = fields.quantization or quant
    if quant is not None:
        if quant.method == "fp8":  # the bytes follow from the shapes when every matrix is blocked on its own
            alone = not any(len(t.keys) > 1 and t.layout != "experts" for t in family.tensors.tensors)
            quant = replace(quant, exact_bytes=quant.exact_bytes and alone)
        stored = ("the stored bytes are its tensors' own (count reads them from the checkpoint's headers)"
                  if tensors_beside else "the stored bytes depend on the quantization")
        set_aside.append(f"quantization_config: {quant.description}: the counts are logical parameters, as the "
                         f"unquantized model has them; {stored}")
    mapping = {"about": about, "block": block, "model": model, "run": run}
    if fields.layers:
        mapping["layers"] = fields.layers
    return mapping, set_aside, quant


def _unread_note(title: str, unread: Mapping[str, str]) -> str:
    """One line naming the fields accepted because transformers' modelling code never reads them, grouped
    by their reason."""
    by_reason: dict[str, list[str]] = {}
    for key, why in unread.items():
        by_reason.setdefault(why, []).append(key)
    listed = "; ".join(f"{', '.join(keys)} ({why})" for why, keys in by_reason.items())
    word = "field" if len(unread) == 1 else "fields"
    return (f"{word} transformers' {title} modelling code never reads, accepted and ignored (no count or "
            f"number depends on {'it' if len(unread) == 1 else 'them'}): {listed}")


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


# --------------------------------------------------------------------------- YAML writing


def _yaml_entry(key: Any, value: Any, indent: int) -> list[str]:
    pad = " " * indent
    name = _yaml_key(key)
    if isinstance(value, list) and all(isinstance(v, Mapping) for v in value) and value:  # `layers:` entries
        lines = [f"{pad}{name}:"]
        for item in value:
            entry = [line for k, v in item.items() for line in _yaml_entry(k, v, indent + 4)]
            lines.append(f"{pad}  - {entry[0].lstrip()}")
            lines.extend(entry[1:])
        return lines
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


# --------------------------------------------------------------------------- blockcli → config.json

def to_hf(config: Config) -> dict[str, Any]:
    """The Hugging Face config.json of a model blockcli can write as a transformers folder: a GPT-2 (LayerNorm,
    learned positions, plain MLP, biases) or a Llama (RMSNorm, RoPE, gated MLP) shaped model. Each candidate is
    read back through this module's own reader and must give the very same block and model; the first field
    that neither reproduces is named in the error (`blockcli train --save` of any other architecture)."""
    from blockcli.activations import ACTIVATIONS

    b, m = config.block, config.model
    if m is None:
        raise ConfigError(f"{config.name}: a single block; a Hugging Face folder holds a whole model (a 'model' section)")
    act = ACTIVATIONS[b.activation].hf_names
    candidates = {
        "gpt2": {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": b.d_model,
                 "n_head": b.n_heads, "n_layer": m.n_layers, "n_positions": m.max_positions, "n_inner": b.d_ff,
                 "vocab_size": m.vocab_size, "activation_function": act[0] if act else b.activation,
                 "layer_norm_epsilon": b.norm_eps, "tie_word_embeddings": m.tie_embeddings,
                 # GPT2Config's <|endoftext|> (50256) exists only in GPT-2's own vocabulary
                 **({"bos_token_id": None, "eos_token_id": None} if m.vocab_size <= 50256 else {})},
        "llama": {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": b.d_model,
                  "intermediate_size": b.d_ff, "num_attention_heads": b.n_heads, "num_key_value_heads": b.n_kv_heads,
                  "head_dim": b.head_dim, "num_hidden_layers": m.n_layers, "vocab_size": m.vocab_size,
                  "max_position_embeddings": m.max_positions, "rms_norm_eps": b.norm_eps, "rope_theta": b.rope_theta,
                  "hidden_act": act[0] if act else b.activation, "attention_bias": b.bias.qkv,
                  "mlp_bias": b.bias.mlp, "tie_word_embeddings": m.tie_embeddings},
    }
    if m.padding_idx is not None:  # Llama's embedding has one (GPT-2's none: it cannot reproduce it)
        candidates["llama"]["pad_token_id"] = m.padding_idx
    differences = []
    for model_type, data in candidates.items():
        try:
            back = parse_config(hf_to_mapping(data, "config.json"))
        except ConfigError:
            continue
        wrong = _first_difference(config, back)
        if wrong is None:
            return data
        differences.append(f"as {model_type}, {wrong}")
    raise ConfigError(f"{config.name}: blockcli writes Hugging Face folders of GPT-2- and Llama-shaped models, and this "
                      f"is neither ({'; '.join(differences) or 'no candidate reads back'})")


def _first_difference(want: Config, got: Config) -> str | None:
    """'block.norm is rmsnorm, not layernorm': the first field where `got` does not reproduce `want`."""
    from dataclasses import fields

    for section in ("block", "model"):
        a, b = getattr(want, section), getattr(got, section)
        for f in fields(a):
            if getattr(a, f.name) != getattr(b, f.name):
                return f"{section}.{f.name} would be {getattr(b, f.name)!r}, not {getattr(a, f.name)!r}"
    if want.layers_differ or got.layers_differ:
        return "its layers differ from one another"
    return None
