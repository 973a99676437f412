"""Pieces the family maps share: `Family`, activations, RoPE parameters, windows, the Llama-like block."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from blockcli.activations import ACTIVATIONS, FROM_TRANSFORMERS, GATED_NAMES, spelling
from blockcli.config import ConfigError
from blockcli.families.fields import Fields
from blockcli.tensor_names import TensorMap

TRAINING_ONLY = frozenset({"attention_dropout"})  # the Llama-like families' one field that acts in training only


@dataclass(frozen=True)
class Family:
    """One `model_type`: how its config.json maps onto blockcli's schema and how its checkpoints name tensors."""

    model_type: str
    title: str  # as people write it, for messages ("Qwen2")
    read: Callable[[Fields], tuple[dict, dict]]  # config.json → blockcli's `block` and `model` sections
    tensors: TensorMap
    ignored: frozenset[str] = frozenset()  # fields that cannot change the network, beyond COMMON_IGNORED
    # fields of published configs that the family's transformers modelling code never reads (checked in
    # transformers 5.24's modeling_*.py), each with the reason: accepted at any value with a note, never mapped
    unread: Mapping[str, str] = field(default_factory=dict, hash=False)
    # its token embedding is nn.Embedding(…, padding_idx=pad_token_id), whose padding row never gets a gradient
    padding_idx: bool = True
    # its causal LM adds router_aux_loss_coef × the router's load-balancing loss when output_router_logits is set
    aux_loss: bool = False


@dataclass(frozen=True)
class Composite:
    """A vision-language `model_type` whose config.json nests its language model's config under
    `text_config`. blockcli reads, counts and runs that language model; the vision tower and the
    projector that feed it image features are set aside (their fields ignored, their tensors noted).
    Whether the LM head is tied (`tie`): the top level's `tie_word_embeddings` decides, as in
    transformers 5 (`top`: Gemma 3); the language model's own (`text`: Mistral 3, where transformers 5's
    top-level default of true would tie Mistral Small's untied head, transformers issue #42313); or
    either one's true ties it (`either`: Qwen2-VL and Qwen2.5-VL, whose config classes set the top
    level's to true when text_config's is; Qwen3-VL's do not, so it is `top`). transformers saves
    `text_config` as its differences from the text config class, so a size missing there takes that
    class's default (`text_defaults`). With
    `flat`, a config without `text_config` holds the language model's fields at its top level, beside
    the vision side's (transformers 4's Qwen2-VL and Qwen2.5-VL configs). In checkpoints the language
    model's base lives under one of `bases`, its LM head under one of `heads`, and the parts under
    `aside` are set aside (blockcli/tensor_names.py, `nested`). `others`: the other language models a
    `text_config` may name by its model_type (Mistral 3's later releases hold a Ministral 3), each with its
    text config class's sizes."""

    model_type: str
    title: str  # as people write it ("Gemma 3")
    text_model_type: str  # text_config's model_type when it names none (transformers' default)
    tie_default: bool  # the composite config class's default tie_word_embeddings
    ignored: frozenset[str]  # top-level fields of the vision side and its image-token bookkeeping
    text_defaults: Mapping[str, Any]  # the text config class's sizes, for those text_config leaves out
    tie: str = "top"  # top | text | either: whose tie_word_embeddings decides whether the LM head is tied
    flat: bool = False  # the language model's fields may sit at the top level, with no text_config
    bases: tuple[str, ...] = ("model.language_model.", "language_model.model.", "language_model.")
    heads: tuple[str, ...] = ("", "language_model.")
    aside: tuple[str, ...] = ("vision_tower.", "multi_modal_projector.", "model.vision_tower.",
                              "model.multi_modal_projector.")
    others: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, hash=False)
    # text_config fields the composite's model class never applies (its own forward, not the language model's
    # class, computes that step), each with the reason: read as absent, with a note when set
    unapplied: Mapping[str, str] = field(default_factory=dict, hash=False)
    remark: str = ""  # said in the note too: what of the composite's text-only pass blockcli does not run
    # a `flat` config's top-level keys the composite class hands its language model (empty: every one not `ignored`);
    # the others stay at the top level, where `flat_neutral`'s are accepted at the value the language model takes
    # whatever they say (key: (value, why)) and any other is refused (FuyuConfig moves only its size fields)
    moves: frozenset[str] = frozenset()
    flat_neutral: Mapping[str, tuple[Any, str]] = field(default_factory=dict, hash=False)


def mlp_activation(f: Fields, key: str, default: str, *, gated: bool,
                   exact_gelu_is_tanh: bool = False, own_parameters: bool = False) -> dict[str, Any]:
    """The block fields of an MLP whose activation is transformers' `ACT2FN[f[key]]`, gated or plain:
    `activation` (a gated form by its own name, swiglu for SiLU), and `gated: true` where no such name
    says it. `exact_gelu_is_tanh`: the family runs "gelu" as the tanh approximation (Gemma's legacy).
    `own_parameters`: the family's tensor map names an activation's own parameters (Apertus' xIELU); elsewhere
    such an activation is refused."""
    name = f.str(key, default)
    function = "gelu_tanh" if exact_gelu_is_tanh and name == "gelu" else FROM_TRANSFORMERS.get(name)
    if function is not None and ACTIVATIONS[function].params and not own_parameters:
        raise f.unrepresentable(key, name, "an activation with learned parameters of its own: blockcli reads them "
                                           "in Apertus' checkpoints only")
    if function is None:
        raise f.unrepresentable(key, name, "not one of transformers' activations blockcli runs: " + ", ".join(
            sorted(n for n, a in FROM_TRANSFORMERS.items() if own_parameters or not ACTIVATIONS[a].params)))
    written = spelling(function, gated)
    return {"activation": written, **({"gated": True} if gated and written not in GATED_NAMES else {})}


def plain_activation(f: Fields, key: str, default: str) -> str:
    """block.activation of a plain MLP act(x·W_up)·W_down."""
    return mlp_activation(f, key, default, gated=False)["activation"]


# transformers' rope_scaling / rope_parameters keys → blockcli's block.rope_scaling fields
_ROPE_SCALING_KEYS = {
    "factor": "factor", "original_max_position_embeddings": "original_max_positions",
    "low_freq_factor": "low_freq_factor", "high_freq_factor": "high_freq_factor", "beta_fast": "beta_fast",
    "beta_slow": "beta_slow", "mscale": "mscale", "mscale_all_dim": "mscale_all_dim",
    "attention_factor": "attention_factor", "truncate": "truncate", "short_factor": "short_factor",
    "long_factor": "long_factor",
}
# what transformers' rope validation requires of a kind where blockcli's schema would fill in a default
_ROPE_REQUIRED = {"llama3": ("low_freq_factor", "high_freq_factor")}
_ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn", "longrope")


def rope_base(f: Fields, theta_keys: tuple[str, ...], default: float, fraction_keys: tuple[str, ...] = (),
              fraction_default: float = 1.0, max_positions: int | None = None
              ) -> tuple[float, float, dict[str, Any] | None]:
    """(rope_theta, rotated fraction, block.rope_scaling or None) from top-level keys and the
    scaling dict: `rope_scaling` (transformers 4) or `rope_parameters` (transformers 5)."""
    theta = first_of(f, theta_keys, lambda k: f.float(k, low=0.0, high=1e12), default)
    fraction = first_of(f, fraction_keys, lambda k: f.float(k, low=0.0, high=1.0, low_open=False), fraction_default)
    scaling = None
    for key in ("rope_scaling", "rope_parameters"):
        params = f.raw(key, None)
        if params is None:
            continue
        if not isinstance(params, Mapping):
            raise f.invalid(key, params, "an object")
        inner, kind = rope_type(f, key, params)
        if key == "rope_parameters":  # transformers 5 keeps the base and the fraction here too
            got_theta = inner.float("rope_theta", theta, low=0.0, high=1e12)
            got_fraction = inner.float("partial_rotary_factor", fraction, low=0.0, high=1.0, low_open=False)
            for name, top, nested in (("rope_theta", theta, got_theta), ("partial_rotary_factor", fraction, got_fraction)):
                if f.has(name) and name in theta_keys + fraction_keys and top != nested:
                    raise f.unrepresentable(f"rope_parameters.{name}", nested, f"it disagrees with the top-level '{name}'")
            theta, fraction = got_theta, got_fraction
        found = rope_scaling(f, key, params, inner, kind, max_positions)
        for name, value in params.items():
            if name not in inner.used:
                raise f.unrepresentable(f"{key}.{name}", value, "not a RoPE parameter blockcli knows")
        if found is not None and scaling is not None and found != scaling:
            raise f.unrepresentable("rope_parameters", dict(params), "it disagrees with rope_scaling")
        scaling = found or scaling
    return theta, fraction, scaling


def refuse_nulls(f: Fields, *keys: str) -> None:
    """A null in these fields is an error, not the default: transformers' config class refuses it."""
    for key in keys:
        if key in f.data and f.data[key] is None:
            raise f.invalid(key, None, "a value (transformers' config class refuses null)")


def with_data(f: Fields, data: Mapping[str, Any]) -> Fields:
    """`f` reading `data` instead (a default filled in, a field rewritten), with the same record of the keys
    read, the notes and the per-layer overrides."""
    g = Fields(data, f.where, f.family)
    g.used, g.notes, g.said, g.layers = f.used, f.notes, f.said, f.layers
    return g


def layer_type_bases(f: Fields, sliding: list[bool], unread: tuple[str, ...] = ()) -> list[float | None]:
    """Each layer's RoPE base from transformers 5's per-type `rope_parameters`, one entry for every layer type the
    layers use (transformers fails without one): a RoPE object of rope_type default with its rope_theta (the keys
    `unread` beside it are never read), or null: no positions (None). Cohere Compass's, Beam's."""
    params = f.raw("rope_parameters", None)
    kinds = {"sliding_attention" if kind else "full_attention" for kind in sliding}
    if not isinstance(params, Mapping) or not kinds <= set(params):
        raise f.invalid("rope_parameters", params, f"an object with a RoPE object (or null) for each layer type the "
                                                   f"layers use ({', '.join(sorted(kinds))}): transformers fails "
                                                   f"without one")
    theta: dict[str, float | None] = {}
    for kind in kinds:
        own = params[kind]
        if own is None:
            theta[kind] = None
            continue
        inner = Fields(own, f"{f.where}: rope_parameters.{kind}", f.family) if isinstance(own, Mapping) else None
        if inner is None or inner.raw("rope_type", "default") != "default" or set(own) - {"rope_type", "rope_theta",
                                                                                          *unread}:
            raise f.unrepresentable(f"rope_parameters.{kind}", own, "a RoPE object of rope_type default with its "
                                                                    "rope_theta, or null")
        theta[kind] = inner.float("rope_theta", high=1e12)
    return [theta["sliding_attention" if kind else "full_attention"] for kind in sliding]


def apply_bases(f: Fields, block: dict, model: dict, bases: list[float | None], nope: Mapping[str, Any]) -> None:
    """Each layer's RoPE base (layer_type_bases): the base block rotates by the first base, the layers without
    positions override `rope: false` and the fields `nope` (Beam's query scale), the layers of another base their
    rope_theta; a model none of whose layers rotates has no positions."""
    rotating = [b for b in bases if b is not None]
    if not rotating:
        block.update(nope, rope=False)
        model["positions"] = "none"
        return
    block.update(rope=True, rope_theta=rotating[0])
    override_layers(f, [i for i, b in enumerate(bases) if b is None], {"rope": False, **nope})
    others = [i for i, b in enumerate(bases) if b is not None and b != rotating[0]]
    if others:
        override_layers(f, others, {"rope_theta": bases[others[0]]})


def layer_type_ropes(f: Fields, block: dict, model: dict, sliding: list[bool], bases: tuple[float, str, float],
                     title: str) -> None:
    """The RoPE of each layer type of a family whose global and sliding layers rotate differently
    (Gemma 3, OLMo 3): the base block takes layer 0's kind, the layers of the other kind an override
    where theirs differs. `bases`: (the global default, the sliding base's key, its default)."""
    rope = {kind: _typed_rope(f, "sliding_attention" if kind else "full_attention", model["max_positions"], bases,
                              title) for kind in (True, False)}  # layer kind (sliding?) → (theta, scaling)
    (theta, scaling), (other_theta, other_scaling) = rope[sliding[0]], rope[not sliding[0]]
    block["rope_theta"] = theta
    if scaling:
        block["rope_scaling"] = scaling
    override = {**({"rope_theta": other_theta} if other_theta != theta else {}),
                **({"rope_scaling": other_scaling} if other_scaling != scaling else {})}
    others = [i for i, kind in enumerate(sliding) if kind != sliding[0]]
    if others and override:
        override_layers(f, others, override)


def _typed_rope(f: Fields, kind: str, max_positions: int, bases: tuple[float, str, float], title: str
                ) -> tuple[float, dict[str, Any] | None]:
    """(theta, block.rope_scaling or None) of one layer type: from transformers 5's per-type
    `rope_parameters`, else from rope_theta and rope_scaling (the global layers; the sliding ones are
    never scaled) with the sliding layers' base under its own key."""
    full, local_key, local = bases
    params = f.raw("rope_parameters", None)
    if params is not None:
        if not isinstance(params, Mapping) or kind not in params or not isinstance(params[kind], Mapping):
            raise f.invalid("rope_parameters", params, "an object with one RoPE object per layer type "
                                                       "(full_attention, sliding_attention)")
        for name in params:
            if name not in ("full_attention", "sliding_attention"):
                raise f.unrepresentable(f"rope_parameters.{name}", params[name], f"{title}'s RoPE is set per layer "
                                                                                 "type: full_attention, sliding_attention")
        own, key = params[kind], f"rope_parameters.{kind}"
    else:
        scaling = f.raw("rope_scaling", None) if kind == "full_attention" else None
        if scaling is not None and not isinstance(scaling, Mapping):
            raise f.invalid("rope_scaling", scaling, "an object")
        own = dict(scaling or {})
        own["rope_theta"] = f.float("rope_theta" if kind == "full_attention" else local_key,
                                    full if kind == "full_attention" else local, low=0.0, high=1e12)
        key = "rope_scaling"
    inner, scaling_type = rope_type(f, key, own)
    theta = inner.float("rope_theta", full if kind == "full_attention" else local, low=0.0, high=1e12)
    found = rope_scaling(f, key, own, inner, scaling_type, max_positions)
    for name, value in own.items():
        if name not in inner.used:
            raise f.unrepresentable(f"{key}.{name}", value, "not a RoPE parameter blockcli knows")
    return theta, found


def rope_type(f: Fields, key: str, params: Mapping[str, Any]) -> tuple[Fields, str]:
    """A RoPE dict's fields and its rope_type (`type` in older configs), one blockcli knows."""
    inner = Fields(params, f.where, f.family)
    kind = params.get("rope_type", params.get("type", "default"))
    inner.ignore("rope_type", "type")
    if kind not in _ROPE_TYPES:
        raise f.unrepresentable(key, dict(params), f"rope_type {kind!r}: blockcli's RoPE scalings are "
                                                   f"{', '.join(_ROPE_TYPES[1:])}")
    return inner, kind


def rope_scaling(f: Fields, key: str, params: Mapping[str, Any], inner: Fields, kind: str,
                  max_positions: int | None) -> dict[str, Any] | None:
    """One scaling dict onto block.rope_scaling, with transformers' defaults filled in."""
    if kind == "default":
        return None
    out: dict[str, Any] = {"type": kind}
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
    for name in _ROPE_REQUIRED.get(kind, ()):  # blockcli's schema has defaults for these; transformers has none
        if name not in params:
            raise ConfigError(f"{f.where}: field '{key}.{name}' is missing; transformers' {kind} RoPE needs it (its "
                              f"config refuses a {kind} scaling without {' and '.join(_ROPE_REQUIRED[kind])})")
    if kind == "dynamic" and max_positions is not None:
        # transformers' dynamic NTK always scales past max_position_embeddings (an
        # original_max_position_embeddings in the dict is ignored there, so here too)
        out["original_max_positions"] = max_positions
    elif "original_max_positions" not in out and kind in ("longrope", "llama3", "yarn"):
        # Phi-3 keeps the original length at the top level; otherwise transformers falls back to
        # max_position_embeddings
        top = f.int("original_max_position_embeddings", max_positions) if kind == "longrope" else max_positions
        if top is not None:
            out["original_max_positions"] = top
    if kind == "longrope" and "factor" not in out and max_positions and out.get("original_max_positions"):
        out["factor"] = max_positions / out["original_max_positions"]  # as transformers derives it
    return out


def first_of(f: Fields, keys: tuple[str, ...], read: Callable[[str], Any], default: Any) -> Any:
    """Read the first present of several alias keys; every alias present must agree."""
    found = [(k, read(k)) for k in keys if f.data.get(k) is not None]
    f.ignore(*keys)
    if not found:
        return default
    for key, value in found[1:]:
        if value != found[0][1]:
            raise f.unrepresentable(key, f.data[key], f"it disagrees with '{found[0][0]}' = {f.data[found[0][0]]!r}")
    return found[0][1]


def divides(f: Fields, width_key: str, width: int, heads_key: str, heads: int) -> int:
    if width % heads:
        raise ConfigError(f"{f.where}: field '{heads_key}' = {heads} does not divide '{width_key}' = {width} "
                          f"(a {f.family} model needs whole heads)")
    return width // heads


def window_width(f: Fields, key: str, window: Any) -> int:
    """An active sliding window as block.sliding_window, kept however it compares with max_position_embeddings:
    transformers applies it to any longer pass, and blockcli runs RoPE models past their max positions."""
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise f.invalid(key, window, "a positive integer or null")
    return window


def bias_groups(qkv: bool, out: bool, mlp: bool, norm: bool) -> bool | dict[str, bool]:
    groups = {"qkv": qkv, "out": out, "mlp": mlp, "norm": norm}
    return qkv if len(set(groups.values())) == 1 else groups


def model_section(n_layers: int, vocab: int, positions: str, max_positions: int, tie: bool,
                  final_norm: bool = True, position_offset: int = 0) -> dict[str, Any]:
    model: dict[str, Any] = {"n_layers": n_layers, "vocab_size": vocab, "positions": positions,
                             "max_positions": max_positions}
    if positions == "learned":
        model["position_offset"] = position_offset
    model.update(tie_embeddings=tie, final_norm=final_norm, lm_head_bias=False)
    return model


def gated_rms(f: Fields, activation: Callable[[Fields], dict[str, Any]], *, kv_default: int | None,
              tie_default: bool, head_dim_default: int | None = None, qkv_bias: bool | None = None,
              out_bias: bool | None = None, mlp_bias: bool | None = None, eps_default: float = 1e-6,
              fraction_keys: tuple[str, ...] = (), fraction_default: float = 1.0,
              odd_rounds_up: bool = False) -> tuple[dict, dict]:
    """Llama, Mistral, Qwen2, Gemma: RMSNorm, gated MLP, RoPE over the whole head.

    A bias argument of None means "read it from the config" (`attention_bias` for q/k/v and o,
    `mlp_bias`); a bool fixes it for the family (Qwen2: q/k/v yes, o no). RMSNorm has no shift.
    `kv_default` is the HF config class's default for an absent `num_key_value_heads` (None:
    the number of query heads); an explicit null always means "as many as query heads".
    `fraction_keys` name the field of a family that rotates only part of each head (by default
    `fraction_default`: all). `odd_rounds_up`: a family whose rotation is as wide as its cos table rotates an odd
    int(head_dim · fraction) rounded up (GLM-4.5; unscaled RoPE only).
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
        head_dim = divides(f, "hidden_size", d, "num_attention_heads", heads)
    theta, fraction, scaling = rope_base(f, ("rope_theta",), 10000.0, fraction_keys, fraction_default,
                                         max_positions=f.int("max_position_embeddings"))
    rotated = int(head_dim * fraction)
    if odd_rounds_up and fraction != 1.0 and rotated % 2 and not scaling and rotated < head_dim:
        # transformers' inverse frequencies θ^(-2i/r) for i < ⌈r/2⌉ and a rotation as wide as its cos table,
        # r + 1: blockcli's r + 1 pairs turn by θ'^(-2i/(r+1)), the same frequencies when θ' = θ^((r+1)/r)
        theta, rotated = theta ** ((rotated + 1) / rotated), rotated + 1
        fraction = rotating(rotated, head_dim)
    if fraction != 1.0 and rotated % 2:
        raise f.unrepresentable(next((k for k in fraction_keys if f.has(k)), "partial_rotary_factor"), fraction,
                                f"it rotates {rotated} of {head_dim} dimensions per head; rotary pairs need an even "
                                f"number")
    attention_bias = f.bool("attention_bias", False) if qkv_bias is None else qkv_bias
    block = {
        "d_model": d, "n_heads": heads, "n_kv_heads": kv, "head_dim": head_dim,
        "d_ff": f.int("intermediate_size"), "norm": "rmsnorm", "norm_eps": f.float("rms_norm_eps", eps_default),
        **activation(f),
        "bias": bias_groups(attention_bias, attention_bias if out_bias is None else out_bias,
                            f.bool("mlp_bias", False) if mlp_bias is None else mlp_bias, False),
        "placement": "pre", "rope": True if fraction == 1.0 else fraction if rotated else False, "rope_theta": theta,
    }
    if scaling and rotated:
        block["rope_scaling"] = scaling
    # a fraction rotating no dimension leaves the model without positions, as in transformers
    model = model_section(f.int("num_hidden_layers"), f.int("vocab_size"), "rope" if rotated else "none",
                          f.int("max_position_embeddings"), f.bool("tie_word_embeddings", tie_default))
    return block, model


def silu_gate(f: Fields) -> dict[str, Any]:
    """A gated MLP with `hidden_act` (SiLU by default: SwiGLU)."""
    return mlp_activation(f, "hidden_act", "silu", gated=True)


def layer_types(f: Fields, n_layers: int) -> list[bool] | None:
    """transformers >= 4.53 `layer_types`: which layers use sliding attention (None if absent)."""
    types = f.raw("layer_types", None)
    if types is None:
        return None
    if not isinstance(types, list) or len(types) != n_layers:
        raise f.invalid("layer_types", types, f"an array of {n_layers} layer types")
    for item in types:
        if item not in ("full_attention", "sliding_attention"):
            raise f.unrepresentable("layer_types", item, "blockcli's layers use full or sliding-window attention")
    return [t == "sliding_attention" for t in types]


def sliding_layers(f: Fields, block: dict, sliding: list[bool], default: int | None = None) -> None:
    """The window on the layers `sliding` marks: on the base block when layer 0 slides, and as
    per-layer overrides (`layers:`) on the layers whose kind differs from layer 0's."""
    apply_window(f, block, sliding[0], default)
    if len(set(sliding)) == 1:
        return
    windowed: dict = {}
    apply_window(f, windowed, True, default)
    others = [i for i, kind in enumerate(sliding) if kind != sliding[0]]
    f.layers.append({"indices": others, "block": {"sliding_window": 0 if sliding[0] else windowed["sliding_window"]}})


def override_layers(f: Fields, indices: list[int], fields: dict[str, Any]) -> None:
    """Add `fields` to the per-layer overrides of the layers `indices` (SmolLM3's and Cohere 2's layers
    without positions, beside their windows), regrouping `f.layers` so that each layer is in one entry."""
    per_layer = {i: dict(entry["block"]) for entry in f.layers for i in entry["indices"]}
    for i in indices:
        per_layer[i] = {**per_layer.get(i, {}), **fields}
    groups: dict[str, tuple[list[int], dict[str, Any]]] = {}
    for i in sorted(per_layer):
        groups.setdefault(repr(sorted(per_layer[i].items())), ([], per_layer[i]))[0].append(i)
    f.layers[:] = [{"indices": layers, "block": block} for layers, block in groups.values()]


def apply_window(f: Fields, block: dict, active: bool, default: int | None = None) -> None:
    """block.sliding_window when the config turns the window on; `default` is the config class's
    window for an absent `sliding_window` key (an explicit null means no window)."""
    window = f.raw("sliding_window", None) if f.has("sliding_window") else default
    f.ignore("sliding_window")
    if not active:
        return
    if window is None:
        raise f.invalid("sliding_window", window, "a window size, since this config turns sliding attention on")
    block["sliding_window"] = window_width(f, "sliding_window", window)


def window_by_key(f: Fields, block: dict, default: int | None) -> None:
    """Families whose window is on whenever `sliding_window` is not null (Mistral, StarCoder2)."""
    window_on = f.data.get("sliding_window") is not None if f.has("sliding_window") else default is not None
    apply_window(f, block, window_on, default)


def kv_heads(f: Fields, heads: int, default: int) -> int:
    """`num_key_value_heads` (`default` when absent or null), which must divide the query heads."""
    kv = f.int("num_key_value_heads", default)
    if heads % kv:
        raise ConfigError(f"{f.where}: field 'num_key_value_heads' = {kv} does not divide "
                          f"'num_attention_heads' = {heads}")
    return kv


def rotating(rotated: int, head_dim: int) -> float:
    """The fraction block.rope for exactly `rotated` dims: int(head_dim * fraction) == rotated (the
    plain quotient can land a hair below, e.g. 30/44·44 = 29.999…)."""
    fraction = rotated / head_dim
    return fraction if int(head_dim * fraction) == rotated else math.nextafter(fraction, 2.0)
