"""The decoder block in NumPy: LayerNorm/RMSNorm, MultiHeadAttention, MLP, DecoderBlock, Model.

Shapes: B batch, T sequence, d model width, h query heads, h_kv key/value heads, d_h head width,
d_ff MLP width, V vocabulary. Linear layers compute y = x @ W + b with W shaped (in, out).

Pre-norm (the default), as in the reference chapter:
    H = X + MHA(LN1(X))
    Y = H + MLP(LN2(H))
post-norm: H = LN1(X + MHA(X)), Y = LN2(H + MLP(H)); parallel (GPT-NeoX): Y = X + MHA(LN1(X)) + MLP(LN2(X));
post_branch (OLMo2): H = X + LN1(MHA(X)), Y = H + LN2(MLP(H));
parallel_shared (GPT-J, Phi): Y = X + MHA(LN1(X)) + MLP(LN1(X)), one norm read by both branches.
sandwich (Gemma 2/3): H = X + LN1'(MHA(LN1(X))), Y = H + LN2'(MLP(LN2(H))), a norm before and after each branch.
normed_residual (BLOOM's apply_residual_connection_post_layernorm): H = LN1(X) + MHA(LN1(X)),
Y = LN2(H) + MLP(LN2(H)): pre-norm whose residual is each norm's output.
`block.attention_softcap` c (Gemma 2) turns the scores into c·tanh(scores/c) before the mask;
`model.logit_softcap` does the same to the logits.
`block.residual_multiplier` r (Granite) scales each branch's output before its add: H = X + r·MHA(LN1(X)).
`block.attn_skip_scale` α and `attn_branch_scale` β (and mlp_*) make an add α·skip + β·branch (MiniMax:
H = α₁·LN1(X) + β₁·mixer(LN1(X)) with placement normed_residual). `block.lightning` puts MiniMax's lightning
attention in place of softmax attention (blockcli/lightning.py); `block.moa` JetMoE's mixture of attention heads,
routed W_Q and W_O around shared K/V (blockcli/moa.py, the class MixtureOfAttentionHeads here).

Every layer declares its parameter shapes from the config alone (`blockcli.shapes`), so counts
and memory estimates never need to allocate. The forward pass can report each operation to a
`record` callback (see `blockcli.trace`); with none given it costs nothing.
"""

from __future__ import annotations

import math
import re
from statistics import NormalDist
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

import numpy as np

from blockcli import ops as F
from blockcli.activations import BUFFER_VALUES, function_of
from blockcli.config import (GEMMA4_NO_BACKWARD, Bias, BlockConfig, Config, InputError, ModelConfig, gemma4_field,
                             layer_passes)
from blockcli.inputs import check_in_range, check_token_ids, load_npz
from blockcli.mamba import NO_BACKWARD as MAMBA_NO_BACKWARD, MambaCache, Mamba2Mixer, mixer_class
from blockcli.short_conv import ConvCache, ShortConvMixer
from blockcli.checkpoint import is_checkpoint_path
from blockcli import indexer
from blockcli.ops import STANDARD_OPS, Array, Ops
from blockcli.parallel import share_out
from blockcli.shapes import Shape, block_parameter_shapes, is_buffer, model_parameter_shapes, projections
from blockcli.tape import Tape
from blockcli.deltanet import DeltaNetState, GatedDeltaNetMixer
from blockcli.lightning import LightningMixer, LightningState
from blockcli import moa as MOA
from blockcli import differential as DIFF

Record = Callable[..., None]  # record(key, op, out, inputs, kind=..., params=...)

# In auto mode a traced pass builds the full score table up to this size; above it, and in every
# untraced pass, the blocked kernel works in tiles that never hold the table.
CHUNK_TABLE_BYTES = 64 * 2**20
# One attention tile's scores at most: small enough to stay in cache through the softmax's passes
# (measured on 2 cores: 1-4 MiB tiles 25% faster than 64 MiB ones at T=4096).
TILE_BYTES = 2 * 2**20
TILE_ROWS = 128  # query rows per attention tile at most (measured best among 64, 128, 256)


def attention_tile(n_heads: int, n_kv_heads: int, t_q: int, t_k: int, itemsize: int,
                   tile_bytes: int = TILE_BYTES) -> tuple[int, int]:
    """(query rows, K/V heads) of one tile of the blocked kernel. A tile holds the scores of its
    K/V heads' query groups against t_k keys: at most `tile_bytes` unless one row alone is more."""
    row_bytes = n_heads // n_kv_heads * t_k * itemsize  # one query row of one K/V head's group
    rows = int(min(t_q, TILE_ROWS, max(1, tile_bytes // row_bytes)))
    return rows, int(min(n_kv_heads, max(1, tile_bytes // (rows * row_bytes))))


def full_table(attention: str, table_bytes: int, traced: bool, chunk_bytes: int = CHUNK_TABLE_BYTES) -> bool:
    """Whether attention builds the whole (B, h, T_q, T_k) score table: always for `full`, never for
    `chunked`, and for `auto` only in a traced pass whose table fits in `chunk_bytes`."""
    return attention == "full" or (attention == "auto" and traced and table_bytes <= chunk_bytes)


def scores_label(cfg: BlockConfig) -> str:
    """The trace's name for the score table: Q·Kᵀ/√d_h, or times an attention-scale override, soft-capped."""
    label = f"scores Q·Kᵀ × {cfg.attention_scale:g}" if cfg.attention_scale else "scores Q·Kᵀ/√d_h"
    return label + (f", soft-capped c·tanh(·/c), c = {cfg.attention_softcap:g}" if cfg.attention_softcap else "")


def blocked_label(cfg: BlockConfig) -> str:
    """The trace's name for the blocked kernel's one row."""
    sinks = ", with each head's sink logit" if cfg.attention_sinks else ""
    chunks = f", within chunks of {cfg.attention_chunk:,}" if cfg.attention_chunk else ""
    return f"blocked attention: softmax(mask(Q·Kᵀ/√d_h{' + ALiBi' if cfg.alibi else ''}){sinks})·V{chunks}"


def softmax_label(cfg: BlockConfig) -> str:
    """The trace's name for the softmax row of the full table."""
    return "softmax over keys and each head's sink logit (its weight dropped)" if cfg.attention_sinks else \
        "softmax over keys"


def value_scale_label(cfg: BlockConfig) -> str:
    return f"V × {cfg.value_scale:g} (value_scale)"


def query_scale_label(cfg: BlockConfig) -> str:
    t = f"(t + {cfg.query_scale_offset})" if cfg.query_scale_offset else "t"
    if cfg.query_scale_form == "power":
        return f"query scale (1 + {t} / {cfg.query_scale_length})^{cfg.query_scale:g}"
    return f"query scale 1 + {cfg.query_scale:g}·ln(1 + ⌊{t} / {cfg.query_scale_length}⌋)"


def qk_norm_label(cfg: BlockConfig, name: str) -> str:
    """The trace's name for the q or k norm: Llama 4's weight-free one says so."""
    return f"{name.upper()} L2 norm (no weights)" if cfg.qk_norm == "head_unscaled" else f"{name.upper()} norm"


def mask_label(cfg: BlockConfig) -> str:
    """The trace's name for the mask row: causal, within each query's chunk, or with the indexer's choice."""
    if cfg.attention_chunk:
        return f"causal mask within chunks of {cfg.attention_chunk:,} (⌊s / C⌋ = ⌊t / C⌋)"
    if cfg.mla is not None and cfg.mla.index_heads:
        return "causal mask and the indexer's top-k keys"
    return "causal mask"


def local_mask(cfg: BlockConfig, t_q: int, t_k: int, offset: int) -> Array | None:
    """(T_q, T_k) booleans of the keys the block's window or chunk lets each query see (None: every key), on top
    of the causal mask: query t at position offset + t."""
    if cfg.sliding_window:
        return F.window_mask(t_q, t_k, offset, cfg.sliding_window)
    if cfg.attention_chunk:
        return F.chunk_mask(t_q, t_k, offset, cfg.attention_chunk)
    return None


def logits_label(model: ModelConfig) -> str:
    """The trace's name for the LM head, with its logit multiplier and soft cap when there are."""
    return ("LM head" + (f" × {model.logit_multiplier:g}" if model.logit_multiplier != 1.0 else "")
            + (f", soft-capped c·tanh(·/c), c = {model.logit_softcap:g}" if model.logit_softcap else ""))


def soft_cap(a: Array, cap: float) -> Array:
    """a → cap·tanh(a/cap) in place, in a's dtype (Gemma 2's soft-capping of scores and logits)."""
    c = np.asarray(cap, dtype=a.dtype)
    np.divide(a, c, out=a)
    np.tanh(a, out=a)
    np.multiply(a, c, out=a)
    return a


def query_scales(cfg: BlockConfig, positions: Array, dtype: Any) -> Array:
    """The query scale of each position (T,): 1 + β·ln(1 + ⌊(t + o) / L⌋), β `query_scale`, L `query_scale_length`,
    o `query_scale_offset` (Ministral 3's get_llama_4_attn_scale, o = 0: 1 for the first L positions, then a step
    up every L; Llama 4's attention temperature tuning, o = 1: a step at every t + 1 that L divides); with
    query_scale_form power, (1 + (t + o) / L)^β, smooth in t (Beam's scalable softmax, o = 1, L = 2048, β = 0.1)."""
    shifted = positions + cfg.query_scale_offset
    if cfg.query_scale_form == "power":
        return np.exp(cfg.query_scale * np.log1p(shifted / cfg.query_scale_length)).astype(dtype)
    return (1.0 + cfg.query_scale * np.log1p(np.floor(shifted / cfg.query_scale_length))).astype(dtype)


# the gated heads' trace label of each block.attention_gate_form
GATE_LABELS = {"sigmoid": "heads × σ(gate)", "softplus": "heads × softplus(gate)",
               "softplus_head": "heads × softplus(gate), one per head", "sigmoid_head": "heads × σ(gate), one per head"}


def gate_values(gate: Array, form: str) -> Array:
    """The attention gate's values from its pre-activation (B, T, h·d_h) or (B, T, h): σ, or softplus."""
    return F.sigmoid(gate) if form in ("sigmoid", "sigmoid_head") else F.softplus(gate)


def gate_heads(concat: Array, values: Array, h: int) -> Array:
    """The heads' output (B, T, h·d_h) times the gate's values, elementwise ((B, T, h·d_h)) or one per head ((B, T, h),
    broadcast over each head's d_h)."""
    if values.shape[-1] == concat.shape[-1]:
        return concat * values
    heads = concat.reshape(*concat.shape[:-1], h, -1)  # (B, T, h, d_h)
    return (heads * values[..., None]).reshape(concat.shape)


def _ignore(*_args: Any, **_kwargs: Any) -> None:
    """The record callback used when nobody is tracing."""


def parameter_bytes(shapes: Mapping[str, Shape], dtype: str) -> int:
    return sum(math.prod(s) for s in shapes.values()) * np.dtype(dtype).itemsize


# ----------------------------------------------------------------------------- weights


def init_parameters(shapes: Mapping[str, Shape], seed: int, dtype: str) -> dict[str, Array]:
    """Deterministic weights from a seed, drawn in float64 so float32 and float64 runs share them.

    Matrices ~ N(0, 1/fan_in) keep activations at unit scale; biases, shifts and the deviation of
    scales from 1 are N(0, 0.1²), so that no parameter is a silent zero the checks cannot see.
    """
    rng = np.random.default_rng(seed)
    params = {}
    for name, shape in shapes.items():
        base = name.rsplit(".", 1)[-1]
        if len(shape) == 2 and base in ("wte", "wpe"):
            values = rng.standard_normal(shape)
        elif len(shape) == 2:
            values = rng.standard_normal(shape) / math.sqrt(shape[0])
        elif base in BUFFER_VALUES:  # an activation's stored constant (xIELU's β, ε): its own value
            values = np.full(shape, BUFFER_VALUES[base])
        elif base.endswith("_gamma"):
            values = 1.0 + 0.1 * rng.standard_normal(shape)
        else:
            values = 0.1 * rng.standard_normal(shape)
        params[name] = values.astype(dtype)
    return params


def check_keys(given: Mapping[str, Any], shapes: Mapping[str, Shape], source: str) -> None:
    """Every declared key present in `given`, and nothing else."""
    missing = [k for k in shapes if k not in given]
    if missing:
        raise InputError(f"{source}: missing weight '{missing[0]}' (expected shape {shapes[missing[0]]})"
                         + (f" and {len(missing) - 1} more" if len(missing) > 1 else ""))
    extra = [k for k in given if k not in shapes]
    if extra:
        raise InputError(f"{source}: unexpected weight '{extra[0]}' for this config "
                         f"(expected keys: {', '.join(shapes)})")


def check_parameters(given: Mapping[str, Any], shapes: Mapping[str, Shape], dtype: str,
                     source: str) -> dict[str, Array]:
    """Match user weights to the declared shapes: every key present, no extras, shapes exact."""
    check_keys(given, shapes, source)
    params = {}
    for key, shape in shapes.items():
        value = np.asarray(given[key])
        if value.dtype.kind not in "fiu":
            raise InputError(f"{source}: weight '{key}' has dtype {value.dtype}, expected a real number array")
        if value.shape != shape:
            raise InputError(f"{source}: weight '{key}' has shape {value.shape}, expected {shape}")
        if not np.all(np.isfinite(value)):
            raise InputError(f"{source}: weight '{key}' contains NaN or Inf")
        check_in_range(value, dtype, f"{source}: weight '{key}'")
        params[key] = value.astype(dtype)
    return params


# GPT-2 checkpoint names → blockcli's flat keys (c_attn packs q|k|v along its output axis).
GPT2_NAMES = {
    "ln_1.weight": "ln1_gamma", "ln_1.bias": "ln1_beta",
    "attn.c_proj.weight": "w_o", "attn.c_proj.bias": "b_o",
    "ln_2.weight": "ln2_gamma", "ln_2.bias": "ln2_beta",
    "mlp.c_fc.weight": "w_up", "mlp.c_fc.bias": "b_up",
    "mlp.c_proj.weight": "w_down", "mlp.c_proj.bias": "b_down",
}


def from_gpt2_names(weights: Mapping[str, Array], source: str) -> dict[str, Array]:
    """Rename one GPT-2 checkpoint block (optionally under an `h.N.` prefix) to blockcli keys."""
    prefixes = {k.split(".", 2)[0] + "." + k.split(".", 2)[1] + "." for k in weights
                if k.startswith("h.") and k.count(".") >= 3}
    if len(prefixes) > 1:
        raise InputError(f"{source}: holds several GPT-2 blocks ({', '.join(sorted(prefixes))}); "
                         f"blockcli loads one block")
    prefix = prefixes.pop() if prefixes else ""
    out: dict[str, Array] = {}
    origin: dict[str, str] = {}

    def put(name: str, value: Any, key: str) -> None:
        if name in out:
            raise InputError(f"{source}: weight '{name}' is given twice, as '{origin[name]}' and as '{key}'")
        out[name], origin[name] = value, key

    for key, value in weights.items():
        name = key[len(prefix):] if prefix and key.startswith(prefix) else key
        if name in ("attn.c_attn.weight", "attn.c_attn.bias"):
            arr = np.asarray(value)
            if arr.shape[-1] % 3:
                raise InputError(f"{source}: weight '{key}' has shape {arr.shape}, expected its last "
                                 f"axis to pack q|k|v (a multiple of 3)")
            letter = "w" if name.endswith("weight") else "b"
            for part, chunk in zip("qkv", np.split(arr, 3, axis=-1)):
                put(f"{letter}_{part}", chunk, key)
        elif name in GPT2_NAMES:
            put(GPT2_NAMES[name], value, key)
        elif name.endswith(("attn.bias", "attn.masked_bias")):
            continue  # GPT-2's stored causal-mask buffers, not parameters
        else:
            put(key, value, key)  # left as is: reported as unexpected by check_parameters
    return out


# Room in a weights file beyond the parameters themselves, for buffers such as GPT-2's stored masks.
WEIGHTS_SLACK_BYTES = 64 * 2**20


def weights_file_limit(shapes: Mapping[str, Shape]) -> int:
    """Most array bytes a weights file for these shapes may hold: every parameter in float64, plus slack."""
    return 8 * sum(math.prod(s) for s in shapes.values()) + WEIGHTS_SLACK_BYTES


def resolve_weights(weights: str | Path | Mapping[str, Any] | None, shapes: Mapping[str, Shape],
                    seed: int, dtype: str, *, config: Config | None = None, layer: int | None = None,
                    notes: list[str] | None = None, stored: list[Any] | None = None) -> dict[str, Array]:
    """The parameters for `shapes`: seeded, or from weights (an .npz, a model folder or .safetensors
    file, or a name → array mapping). `layer` picks one block out of a whole model's weights;
    `config` tells a checkpoint which model it holds (else its own config.json does); `notes`
    collects what the caller should be told (dtype widening, the layer taken)."""
    one_block = "wte" not in shapes
    if layer is not None and (weights is None or not one_block):
        raise InputError("--layer picks one block of a model's weights; give --weights or a model folder"
                         if weights is None else "--layer picks one block, but the whole model is being run")
    if weights is None:
        return init_parameters(shapes, seed, dtype)
    source = "weights"
    if isinstance(weights, (str, Path)):
        source = str(weights)
        if is_checkpoint_path(Path(weights)):
            from blockcli.weight_files import load_weights  # safetensors only for checkpoints

            weights = load_weights(Path(weights), config, dtype, notes if notes is not None else [],
                                   one_block=one_block, layer=layer, stored=stored)
            return check_parameters(weights, shapes, dtype, source)
        # one block's shapes may be read out of a whole model's file: then the model bounds it
        whole = model_parameter_shapes(config) if config is not None and config.model else shapes
        limit = None if layer is not None and whole is shapes else weights_file_limit(whole)
        weights = load_npz(weights, limit=limit, expected=shapes)
    if any(k.endswith(("c_attn.weight", "ln_1.weight")) for k in weights):
        weights = from_gpt2_names(weights, source)
    weights = _renamed_mlp_keys(weights, notes)
    if one_block:  # take it out of a whole model's weights, if that is what they are
        weights = _one_block(weights, layer, source, notes)
    return check_parameters(weights, shapes, dtype, source)


_OLD_MLP_KEY = re.compile(r"(.*?)([wb])_([123])$")


def _renamed_mlp_keys(weights: Mapping[str, Any], notes: list[str] | None) -> Mapping[str, Any]:
    """Weights saved under blockcli 0.1's MLP keys read under today's: w_1 (the activated matrix) is w_gate
    where its MLP has a w_3 (gated) and w_up where not, w_3 is w_up, w_2 is w_down; the same for b_."""
    old = {k: m for k in weights if (m := _OLD_MLP_KEY.fullmatch(k))}
    if not old:
        return weights
    gated = {m.group(1) for m in old.values() if m.group(3) == "3"}
    roles = {"1": lambda prefix: "gate" if prefix in gated else "up", "3": lambda prefix: "up",
             "2": lambda prefix: "down"}
    if notes is not None:
        notes.append("MLP weights under blockcli 0.1's keys (w_1, w_3, w_2) read as w_gate/w_up, w_up and w_down")
    return {(f"{m.group(1)}{m.group(2)}_{roles[m.group(3)](m.group(1))}" if (m := old.get(k)) else k): v
            for k, v in weights.items()}


def _one_block(weights: Mapping[str, Any], layer: int | None, source: str, notes: list[str] | None) -> Mapping[str, Any]:
    # a layer index is ASCII digits of sane length: 'blocks.².w_q' or a 5,000-digit one is an unexpected key, reported
    layers = sorted({int(m[1]) for k in weights if (m := re.match(r"blocks\.([0-9]{1,9})\.", k))})
    if not layers:
        if layer is not None:
            raise InputError(f"{source}: holds one block's weights; --layer picks a block of a whole model's")
        return weights
    if layer is None:
        raise InputError(f"{source}: holds the weights of {len(layers)} blocks; pick one with --layer N "
                         f"(0..{layers[-1]})")
    if layer not in layers:
        raise InputError(f"--layer {layer}: {source} holds blocks 0..{layers[-1]}")
    prefix = f"blocks.{layer}."
    if notes is not None:
        notes.append(f"weights of layer {layer} of {len(layers)}")
    return {k[len(prefix):]: v for k, v in weights.items() if k.startswith(prefix)}


# ----------------------------------------------------------------------------- layers


NGPT_NO_BACKWARD = ("the backward of nGPT's normalized block (Dory: block.ngpt, its L2 norms and looped layers) is not "
                    "implemented: gradients, verify --grad, train and trace --backward are refused")


def l2_norm_of(rms_norm: Callable[..., Array]) -> Callable[..., Array]:
    """nGPT's L2 norm x/√(Σx² + ε) (…, n) as an RMSNorm: x/√(mean(x²) + ε/n) · γ/√n is the same number."""
    def l2_norm(x: Array, scale: Array | float, beta: Array | None, eps: float) -> Array:
        n = x.shape[-1]
        return rms_norm(x, scale * np.asarray(n ** -0.5, dtype=x.dtype), beta, eps / n)
    return l2_norm


def norm_scale(gamma: Array | None, unit_offset: bool) -> Array | float:
    """What a norm multiplies by: gamma, or 1 + gamma for a unit-offset norm (Gemma's RMSNorm), or 1
    for a norm without a scale (OLMo's)."""
    if gamma is None:
        return 1.0
    return gamma + 1.0 if unit_offset else gamma


@dataclass
class Norm:
    """LayerNorm or RMSNorm over the feature axis."""

    kind: str
    gamma: Array | None  # (d,); None: no scale (block.norm_scale false)
    beta: Array | None  # (d,)
    eps: float
    ops: Ops = STANDARD_OPS
    unit_offset: bool = False  # scale by 1 + gamma (Gemma stores the scale's offset from 1)
    name: str = ""  # its parameters are <name>_gamma and <name>_beta; its saved input goes under <name>

    def __call__(self, x: Array, tape: Tape | None = None) -> Array:
        """x (…, d) → (…, d). With the standard ops, in row tiles shared among the cores (a seeded
        bug may normalise across rows, so it gets the whole tensor). A tape keeps x."""
        if tape is not None:
            tape.keep(self.name, x=x)  # its backward recomputes μ and σ from x
        fn = self.ops.layer_norm if self.kind == "layernorm" else self.ops.rms_norm
        if self.kind == "l2norm":
            fn = l2_norm_of(fn)
        scale = norm_scale(self.gamma, self.unit_offset)  # (d,), computed per call: edits of gamma count
        if self.ops is not STANDARD_OPS:
            return fn(x, scale, self.beta, self.eps)

        def fill(rows: Array, out: Array) -> None:
            out[...] = fn(rows, scale, self.beta, self.eps)

        dtype = x.dtype if self.gamma is None else np.result_type(x, self.gamma)
        return F.by_rows(fill, x, x.shape[-1], dtype, work=4 * x.size)

    def backward(self, dy: Array, tape: Tape) -> Array:
        """dy (…, d) → dx (…, d); adds the gradients of its scale (of 1 + γ's γ, the same) and shift."""
        x = tape.take(self.name)["x"]
        fn = self.ops.layer_norm_backward if self.kind == "layernorm" else self.ops.rms_norm_backward
        if self.kind == "l2norm":
            raise InputError(NGPT_NO_BACKWARD)
        dx, d_scale = fn(x, norm_scale(self.gamma, self.unit_offset), self.eps, dy)  # (…, d) each
        if self.gamma is not None:
            tape.add(f"{self.name}_gamma", F.unbroadcast(d_scale, self.gamma.shape))
        if self.beta is not None:
            tape.add(f"{self.name}_beta", F.unbroadcast(dy, self.beta.shape))
        return dx


@dataclass
class KVCache:
    """Keys and values seen so far by one attention layer, (B, h_kv, T_seen, d_h) each.

    The buffers grow geometrically (doubling), so appending one token copies only that token: a
    decode step costs its own work, not a copy of the whole cache. `k` and `v` are views of the
    filled part.
    """

    _k: Array | None = None  # (B, h_kv, capacity, d_h)
    _v: Array | None = None
    length: int = 0
    index: "KVCache | None" = None  # DeepSeek Sparse Attention: the indexer's keys (B, 1, T_seen, d_I) in its k

    @property
    def k(self) -> Array | None:
        return None if self._k is None else self._k[:, :, :self.length]

    @property
    def v(self) -> Array | None:
        return None if self._v is None else self._v[:, :, :self.length]

    def append(self, k: Array, v: Array) -> tuple[Array, Array]:
        """Add k, v (B, h_kv, T_new, d_h); return all keys and values so far."""
        end = self.length + k.shape[2]
        if self._k is None or end > self._k.shape[2] or self._k.dtype != np.result_type(self._k, k):
            capacity = max(end, 2 * (self._k.shape[2] if self._k is not None else 0), 16)
            dtype = k.dtype if self._k is None else np.result_type(self._k, k)
            grown_k = np.empty(k.shape[:2] + (capacity,) + k.shape[3:], dtype=dtype)
            grown_v = np.empty(v.shape[:2] + (capacity,) + v.shape[3:], dtype=np.result_type(dtype, v))
            if self._k is not None:
                grown_k[:, :, :self.length] = self.k
                grown_v[:, :, :self.length] = self.v
            self._k, self._v = grown_k, grown_v
        self._k[:, :, self.length:end] = k
        self._v[:, :, self.length:end] = v
        self.length = end
        return self.k, self.v

    def append_index(self, keys: Array) -> Array:
        """Add the indexer's keys (B, 1, T_new, d_I); return all of them so far (B, 1, T_seen, d_I)."""
        if self.index is None:
            self.index = KVCache()
        return self.index.append(keys, keys[..., :0])[0]


class ScoreTiles:
    """The tiles both blocked attention kernels walk: query rows × K/V heads (`attention_tile`), each tile
    seeing keys [first, last) only (those before its rows are in the window, the rest in the future);
    Q with the score scale folded in and K, each head's rows in one run of memory; and the scores of a
    tile, soft-capped, masked (only the tile's diagonal square, or the window's band) and ALiBi-biased
    as the full path makes them."""

    def __init__(self, cfg: BlockConfig, p: Mapping[str, Array], q: Array, k: Array, start: int,
                 tile_bytes: int) -> None:
        self.B, h, self.T, self.d_h = q.shape
        self.h_kv, self.T_k = k.shape[1], k.shape[2]
        self.group, self.start = h // self.h_kv, start
        self.dtype = dtype = np.result_type(q, k)
        self.qs = np.multiply(q, cfg.score_scale, dtype=dtype, order="C").reshape(
            self.B, self.h_kv, self.group, self.T, self.d_h)
        # a tile's keys in one run of memory, not rows strided through the QKV output (15% faster at L)
        self.k = _rows_contiguous(k)  # (B, h_kv, T_k, d_h)
        self.rows, self.heads = attention_tile(h, self.h_kv, self.T, self.T_k, q.itemsize, tile_bytes)
        self.future = np.triu(np.full((self.rows, self.rows), -np.inf, dtype=dtype), k=1)  # (C, C)
        self.window, self.cap = cfg.sliding_window, cfg.attention_softcap
        self.chunk, self.cfg = cfg.attention_chunk, cfg
        self.slopes = (F.alibi_slopes(h).astype(dtype).reshape(self.h_kv, self.group, 1, 1)  # (h_kv, g, 1, 1)
                       if cfg.alibi else None)
        self.sinks = (p["sinks"].astype(dtype).reshape(self.h_kv, self.group, 1, 1)  # (h_kv, g, 1, 1)
                      if cfg.attention_sinks else None)

    def keys(self, lo: int, hi: int) -> tuple[int, int]:
        """The keys [first, last) that some query row in [lo, hi) may see."""
        if self.chunk:  # the first key of row lo's chunk
            return (self.start + lo) // self.chunk * self.chunk, self.start + hi
        return (max(0, self.start + lo - self.window + 1) if self.window else 0), self.start + hi

    def tiles(self) -> list[tuple[int, int, int]]:
        return [(b, g, lo) for b in range(self.B) for g in range(0, self.h_kv, self.heads)
                for lo in range(0, self.T, self.rows)]

    def cost(self, tile: tuple[int, int, int]) -> int:
        first, last = self.keys(tile[2], min(self.T, tile[2] + self.rows))
        return last - first

    def buffer(self) -> Array:
        """Room for one tile's scores (a worker's scratch)."""
        return np.empty(self.heads * self.group * self.rows * self.T_k, dtype=self.dtype)

    def scores(self, buf: Array, tile: tuple[int, int, int], capped: Array | None = None
               ) -> tuple[Array, tuple[int, slice, int, int, int, int]]:
        """The tile's scores (n, g·C, T_seen) in `buf`, and where it is: (b, its K/V heads, its rows lo:hi,
        its keys first:last). `capped`, given, receives the soft-capped scores before mask and biases."""
        b, g, lo = tile
        hi = min(self.T, lo + self.rows)
        (first, last), kv = self.keys(lo, hi), slice(g, min(self.h_kv, g + self.heads))
        c, seen, n, group = hi - lo, last - first, kv.stop - g, self.group
        q_tile = self.qs[b, kv, :, lo:hi].reshape(n, group * c, self.d_h)  # (n, g·C, d_h)
        s = buf[:n * group * c * seen].reshape(n, group * c, seen)
        np.matmul(q_tile, self.k[b, kv, first:last].swapaxes(-1, -2), out=s)  # (n, g·C, T_seen)
        if self.cap:
            soft_cap(s, self.cap)  # (n, g·C, T_seen), before the mask as in the full path
            if capped is not None:
                capped[:s.size] = s.ravel()
        at = self.start + lo - first  # the tile's first query position, counted from its first key
        if self.window or self.chunk:  # the band of the window, or the tile's chunks, as in the full path
            allowed = F.causal_mask(c, seen, at) & local_mask(self.cfg, c, seen, at)  # (C, T_seen)
            s.reshape(n, group, c, seen)[...] += np.where(allowed, 0.0, -np.inf).astype(self.dtype)
        else:
            s.reshape(n, group, c, seen)[..., seen - c:] += self.future[:c, :c]  # the diagonal square
        if self.slopes is not None:  # slope · (key − query position) for the tile's heads, rows and keys
            distance = (np.arange(first, last)[None, :] - (self.start + np.arange(lo, hi))[:, None]).astype(self.dtype)
            s.reshape(n, group, c, seen)[...] += self.slopes[kv] * distance  # (n, g, C, T_seen)
        return s, (b, kv, lo, hi, first, last)

    def sink(self, kv: slice, n: int, c: int) -> Array | None:
        """The tile's rows' sink logits (n, g·C, 1), or None without sinks."""
        if self.sinks is None:
            return None
        return np.broadcast_to(self.sinks[kv], (n, self.group, c, 1)).reshape(n, self.group * c, 1)


@dataclass
class MultiHeadAttention:
    """Causal multi-head self-attention with grouped-query K/V and optional RoPE.

    W_Q, W_K and W_V are stored side by side in one (d, (h + 2·h_kv)·d_h) matrix, so the three
    projections are one GEMM; `p["w_q"]` and friends are views into it, so the parameters a user
    reads or edits in place are the ones the block uses.
    """

    cfg: BlockConfig
    p: dict[str, Array]
    ops: Ops = STANDARD_OPS
    attention: str = "auto"  # auto | full | chunked
    chunk_bytes: int = CHUNK_TABLE_BYTES  # auto: a full score table above this is computed in tiles
    tile_bytes: int = TILE_BYTES  # the scores of one tile of the blocked kernel
    # latent attention with an indexer: the keys its last pass let each query see (B, 1, T_q, T_k)
    selection: Array | None = field(default=None, init=False)
    # a layer reusing the indexer choice of the layer before (mla.index_shared): that layer's attention
    previous: "MultiHeadAttention | None" = field(default=None, init=False)

    # Gemma 4's kv_from: the layer whose keys and values this one attends to (set by Model), and what each layer's
    # last pass attended to: its K, V (B, h_kv, T_k, d_h) and the position its queries started at
    source: "MultiHeadAttention | None" = field(default=None, init=False)
    last_kv: tuple[Array, Array, int] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        p, cfg = self.p, self.cfg
        # BitNet's norm of the heads' output before W_O (None without block.sub_norms)
        self.sub_norm = (Norm(cfg.norm, p.get("attn_sub_norm_gamma"), p.get("attn_sub_norm_beta"), cfg.norm_eps,
                              self.ops, cfg.norm_unit_offset, name="attn_sub_norm") if cfg.sub_norms else None)
        names = "qkv"[:projections(cfg)]  # k_eq_v: no W_V; kv_from: W_Q alone
        self.w_qkv = np.concatenate([p[f"w_{x}"] for x in names], axis=1)  # (d, (h + 2·h_kv)·d_h)
        self.b_qkv = np.concatenate([p[f"b_{x}"] for x in names]) if "b_q" in p else None
        q_width = p["w_q"].shape[1]
        kv_width = p["w_k"].shape[1] if "w_k" in p else 0
        bounds = {"q": (0, q_width), "k": (q_width, q_width + kv_width), "v": (q_width + kv_width, None)}
        for name in names:
            lo, hi = bounds[name]
            p[f"w_{name}"] = self.w_qkv[:, lo:hi]
            if self.b_qkv is not None:
                p[f"b_{name}"] = self.b_qkv[lo:hi]

    def __call__(self, x: Array, rec: Record = _ignore, cache: KVCache | None = None,
                 drop: Callable[[Array], Array] | None = None, tape: Tape | None = None) -> Array:
        """x (B, T, d) → (B, T, d). `drop`, in a training-mode pass, is dropout on the attention
        probabilities (it needs the whole table, so it takes the full-table path). A tape keeps x, the
        projections a clamp or a norm changes, Q, K and V as attention reads them, its output and (blocked)
        each row's log-sum-exp: never the score table, which the backward recomputes tile by tile."""
        assert tape is None or (cache is None and drop is None), "a backward runs on a whole pass, without dropout"
        cfg, p, ops = self.cfg, self.p, self.ops
        h, h_kv = cfg.n_heads, cfg.n_kv_heads
        B, T, _ = x.shape
        start = cache.length if cache is not None else 0

        if cfg.kv_from >= 0 or cfg.k_eq_v or cfg.v_norm:  # Gemma 4's attention
            if tape is not None:
                raise InputError(GEMMA4_NO_BACKWARD.format(field=gemma4_field(cfg)))
            return self._shared_kv(x, rec, cache)
        qkv = F.linear(x, self.w_qkv, self.b_qkv)  # (B, T, (h + 2·h_kv)·d_h): one GEMM for Q, K and V
        q_width, kv_width = p["w_q"].shape[1], p["w_k"].shape[1]
        q_flat = qkv[..., :q_width]  # (B, T, h·d_h)
        rec("q_proj", "Q projection", q_flat, (x, p["w_q"]), kind="linear", params=("w_q", "b_q"))
        k_flat = qkv[..., q_width:q_width + kv_width]  # (B, T, h_kv·d_h)
        rec("k_proj", "K projection", k_flat, (x, p["w_k"]), kind="linear", params=("w_k", "b_k"))
        v_flat = qkv[..., q_width + kv_width:]  # (B, T, h_kv·d_h)
        rec("v_proj", "V projection", v_flat, (x, p["w_v"]), kind="linear", params=("w_v", "b_v"))
        saved: dict[str, Any] = {"x": x}
        late_clip = cfg.clip_after_qk_norm  # OLMoE: the normalised projections clamped, not the raw ones
        if cfg.clip_qkv and not late_clip:  # OLMo: each projection clamped to [-c, c]
            saved["unclipped"] = qkv  # (B, T, (h + 2·h_kv)·d_h): where it is inside ±c, the gradient passes
            q_flat, k_flat, v_flat = self._clip(q_flat, k_flat, v_flat, rec)

        if cfg.qk_norm == "projection":  # OLMo2: over all of Q's (K's) features, before the heads are split
            q_flat, k_flat = self._qk_norm(q_flat, k_flat, rec, tape)  # (B, T, h·d_h), (B, T, h_kv·d_h)
        if late_clip:
            saved["unclipped"] = np.concatenate([q_flat, k_flat, v_flat], axis=-1)  # (B, T, (h + 2·h_kv)·d_h)
            q_flat, k_flat, v_flat = self._clip(q_flat, k_flat, v_flat, rec)
        q = ops.split_heads(q_flat, h)  # (B, h, T, d_h)
        rec("q", "split heads Q", q, (q_flat,), kind="reshape")
        k = ops.split_heads(k_flat, h_kv)  # (B, h_kv, T, d_h)
        rec("k", "split heads K", k, (k_flat,), kind="reshape")
        v = ops.split_heads(v_flat, h_kv)  # (B, h_kv, T, d_v)
        rec("v", "split heads V", v, (v_flat,), kind="reshape")
        if cfg.value_scale != 1.0:  # MiMo-V2-Flash: the values times a constant, cached so
            v_scaled = v * np.asarray(cfg.value_scale, dtype=v.dtype)  # (B, h_kv, T, d_v)
            rec("v_scale", value_scale_label(cfg), v_scaled, (v,), kind="scale")
            v = v_scaled
        per_head = cfg.qk_norm in ("head", "each_head", "head_unscaled")
        if per_head and not cfg.qk_norm_after_rope:  # Qwen3, Gemma 3 (Command R+: each its own weights), before RoPE
            q, k = self._qk_norm(q, k, rec, tape)  # (B, h, T, d_h), (B, h_kv, T, d_h)

        if cfg.rope:
            cos, sin = F.rope_tables(np.arange(start, start + T), cfg.rope_dims, cfg.rope_theta, x.dtype,
                                     cfg.rope_scaling)  # (T, r/2) each
            # pairs (i, i + r/2), or (2i, 2i + 1) in the interleaved layout
            q_rot = ops.rotate_pairs(q, cos, sin, cfg.rope_layout)  # (B, h, T, d_h)
            rec("q_rope", "RoPE on Q", q_rot, (q,), kind="rope")
            k_rot = ops.rotate_pairs(k, cos, sin, cfg.rope_layout)  # (B, h_kv, T, d_h)
            rec("k_rope", "RoPE on K", k_rot, (k,), kind="rope")
            q, k = q_rot, k_rot
        if per_head and cfg.qk_norm_after_rope:  # HunYuan: the rotated queries and keys, each head's d_h
            q, k = self._qk_norm(q, k, rec, tape)  # (B, h, T, d_h), (B, h_kv, T, d_h)
        if cfg.query_scale:  # Ministral 3, Llama 4's NoPE layers: every query times its position's scale, after RoPE
            q_scaled = q * query_scales(cfg, np.arange(start, start + T), q.dtype)[:, None]  # (B, h, T, d_h)
            rec("q_scale", query_scale_label(cfg), q_scaled, (q,), kind="scale")
            q = q_scaled
        if cfg.ngpt is not None:  # nGPT: the rotated queries times (s_qk·f)², one scale a channel
            if tape is not None:
                raise InputError(NGPT_NO_BACKWARD)
            q_scaled = q * np.square(p["s_qk"] * cfg.ngpt.qk).astype(q.dtype, copy=False).reshape(h, 1, -1)
            rec("q_ngpt_scale", NGPT_Q_LABEL, q_scaled, (q,), kind="scale", params=("s_qk",))
            q = q_scaled  # (B, h, T, d_h)

        if cache is not None:
            k, v = cache.append(k, v)  # (B, h_kv, T_seen, d_h)
        if cfg.differential is not None:  # DiffLlama: paired heads over both halves of the values
            out = self._differential(q, k, v, start, rec, drop, saved if tape is not None else None)
            if tape is not None:
                tape.keep("attn", **saved)
            return out
        heads = self._attend(q, k, v, start, rec, drop, saved if tape is not None else None)  # (B, h, T, d_h)
        concat = ops.combine_heads(heads)  # (B, T, h·d_h)
        rec("attn_concat", "combine heads", concat, (heads,), kind="reshape")
        if cfg.attention_gate:  # Qwen3-Next, AFMoE: each head's output times σ(x·W_gate), elementwise (Laguna: softplus)
            gate = F.linear(x, p["w_attn_gate"], p.get("b_attn_gate"))  # (B, T, h·d_h), or (B, T, h): one per head
            if cfg.attention_gate_head_bias:  # Beam: each head's bias on its d_h pre-activations
                gate = gate + np.repeat(p["b_attn_gate_head"], cfg.head_dim).astype(gate.dtype, copy=False)
            rec("attn_gate", "attention gate projection", gate, (x, p["w_attn_gate"]), kind="linear",
                params=("w_attn_gate", "b_attn_gate", "b_attn_gate_head"))
            if cfg.ngpt is not None:  # nGPT: the gate's pre-activation times (s_gate·f)², per channel
                scaled = gate * np.square(p["s_gate"] * cfg.ngpt.gate).astype(gate.dtype, copy=False)
                rec("attn_gate_scale", NGPT_GATE_LABEL, scaled, (gate,), kind="scale", params=("s_gate",))
                gate = scaled  # (B, T, h·d_h)
            gated = gate_heads(concat, gate_values(gate, cfg.attention_gate_form), h)  # (B, T, h·d_h)
            rec("attn_gated", GATE_LABELS[cfg.attention_gate_form], gated, (concat, gate),
                kind="sigmoid_gate" if cfg.gate_sigmoid else "softplus_gate")
            concat = gated
            saved["gate"] = gate  # the backward reads σ(gate) and its derivative
        if cfg.sub_norms:  # BitNet: the heads' output normalised over its h·d_h features before W_O
            normed = self.sub_norm(concat, tape)  # (B, T, h·d_h); a tape keeps concat
            rec("attn_sub_norm", "norm of the heads' output (attn_sub_norm)", normed, (concat,), kind=cfg.norm,
                params=("attn_sub_norm_gamma", "attn_sub_norm_beta"))
            concat = normed
        out = ops.project_out(concat, p["w_o"], p.get("b_o"))  # (B, T, d)
        rec("attn_out", "output projection", out, (concat, p["w_o"]), kind="linear", params=("w_o", "b_o"))
        if tape is not None:
            tape.keep("attn", **saved)
        return out

    def _differential(self, q: Array, k: Array, v: Array, start: int, rec: Record,
                      drop: Callable[[Array], Array] | None, saved: dict[str, Any] | None = None) -> Array:
        """Differential attention (blockcli/differential.py) from the rotated q (B, h, T, d_h) and the K, V seen
        (B, h_kv, T_k, d_h): one softmax per query head over the values of both halves (B, h_kv, T_k, 2·d_h), head i
        minus λ·head i + h/2, RMS-normalised over its 2·d_h without a scale, × (1 − λ_init), then W_O → (B, T, d)."""
        cfg, p, ops, m = self.cfg, self.p, self.ops, DIFF.mixer_of(self.cfg)
        h = cfg.n_heads
        both = DIFF.both_halves(v)  # (B, h_kv, T_k, 2·d_h)
        rec("v_both", DIFF.VALUES_LABEL, both, (v,), kind="reshape")
        heads = self._attend(q, k, both, start, rec, drop, saved)  # (B, h, T, 2·d_h)
        lam = DIFF.lambda_of(p, m.lambda_init, heads.dtype)  # ()
        combined = heads[:, :h // 2] - lam * heads[:, h // 2:]  # (B, h/2, T, 2·d_h)
        rec("diff_combine", DIFF.combine_label(m), combined, (heads,), kind="differential",
            params=("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"))
        normed = ops.rms_norm(combined, 1.0, None, cfg.norm_eps) * np.asarray(1 - m.lambda_init, dtype=heads.dtype)
        rec("diff_norm", DIFF.norm_label(m), normed, (combined,), kind="rmsnorm")
        concat = ops.combine_heads(normed)  # (B, T, h·d_h): pair i's 2·d_h at columns i·2·d_h …
        rec("attn_concat", "combine heads", concat, (normed,), kind="reshape")
        out = ops.project_out(concat, p["w_o"], p.get("b_o"))  # (B, T, d)
        rec("attn_out", "output projection", out, (concat, p["w_o"]), kind="linear", params=("w_o", "b_o"))
        if saved is not None:  # the backward reads the pairs before and after their norm
            saved.update(combined=combined, normed=normed)
        return out

    def _differential_backward(self, d_out: Array, tape: Tape) -> Array:
        """d_out (B, T, d) → dx (B, T, d) through differential attention in reverse: W_O; the scale 1 − λ_init and the
        RMSNorm without scale; the pairs H_i − λ·H_(i+h/2) (dλ = −Σ d·H_(i+h/2), to the four λ vectors through
        exp(λ_q·λ_k)); attention over both halves of V (each half's gradient summed over the two K/V heads that
        read it); RoPE rotated back; the Q/K/V projection (one GEMM)."""
        cfg, p, ops, m = self.cfg, self.p, self.ops, DIFF.mixer_of(self.cfg)
        h, h_kv, d_h = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        saved = tape.take("attn")
        x, heads, combined = saved["x"], saved["heads"], saved["combined"]  # (B, T, d), (B, h, T, 2·d_h), (B, h/2, …)
        d_concat = self._project_out_backward(d_out, saved["normed"], tape)  # (B, T, h·d_h)
        d_normed = ops.split_heads(d_concat, h // 2) * (1 - m.lambda_init)  # (B, h/2, T, 2·d_h)
        d_combined = F.rms_norm_backward(combined, 1.0, cfg.norm_eps, d_normed)[0]  # (B, h/2, T, 2·d_h)
        lam = DIFF.lambda_of(p, m.lambda_init, heads.dtype)
        d_lam = -float(np.sum(d_combined * heads[:, h // 2:]))
        one = math.exp(float(np.sum(p["lambda_q1"].astype(np.float64) * p["lambda_k1"])))
        two = math.exp(float(np.sum(p["lambda_q2"].astype(np.float64) * p["lambda_k2"])))
        tape.add("lambda_q1", d_lam * one * p["lambda_k1"])
        tape.add("lambda_k1", d_lam * one * p["lambda_q1"])
        tape.add("lambda_q2", -d_lam * two * p["lambda_k2"])
        tape.add("lambda_k2", -d_lam * two * p["lambda_q2"])
        d_heads = np.concatenate([d_combined, -lam * d_combined], axis=1)  # (B, h, T, 2·d_h)
        dq, dk, d_both = self._attend_backward(saved, d_heads, tape)  # (B, h, T, d_h), (B, h_kv, T, d_h / 2·d_h)
        half = h_kv // 2
        dv = np.concatenate([d_both[:, :half, :, :d_h] + d_both[:, half:, :, :d_h],
                             d_both[:, :half, :, d_h:] + d_both[:, half:, :, d_h:]], axis=1)  # (B, h_kv, T, d_h)
        if cfg.rope:
            cos, sin = F.rope_tables(np.arange(x.shape[1]), cfg.rope_dims, cfg.rope_theta, x.dtype, cfg.rope_scaling)
            dq = ops.rotate_pairs_backward(dq, cos, sin, cfg.rope_layout)  # (B, h, T, d_h)
            dk = ops.rotate_pairs_backward(dk, cos, sin, cfg.rope_layout)  # (B, h_kv, T, d_h)
        d_qkv = np.concatenate([ops.combine_heads(dq), ops.combine_heads(dk), ops.combine_heads(dv)], axis=-1)
        dw = ops.weight_grad(x, d_qkv)  # (d, (h + 2·h_kv)·d_h)
        q_width, kv_width = h * d_h, h_kv * d_h
        bounds = {"q": (0, q_width), "k": (q_width, q_width + kv_width), "v": (q_width + kv_width, None)}
        db = F.sum_rows(d_qkv) if self.b_qkv is not None else None
        for name, (lo, hi) in bounds.items():
            tape.add(f"w_{name}", dw[:, lo:hi])
            if db is not None:
                tape.add(f"b_{name}", db[lo:hi])
        return d_qkv @ self.w_qkv.T  # (B, T, d)

    def _shared_kv(self, x: Array, rec: Record, cache: KVCache | None) -> Array:
        """Gemma 4's attention, x (B, T, d) → (B, T, d): queries through their per-head norm and RoPE; keys and
        values of the layer's own (W_K; W_V, or the K projection itself with k_eq_v; the per-head k norm and RoPE
        on K, an RMSNorm without scale on V with v_norm) or, with kv_from, those layer kv_from attended to in this
        pass (its cache included); then attention as every layer's."""
        cfg, p, ops = self.cfg, self.p, self.ops
        h, h_kv = cfg.n_heads, cfg.n_kv_heads
        T = x.shape[1]
        qkv = F.linear(x, self.w_qkv, self.b_qkv)  # (B, T, (h + 2·h_kv)·d_h), or without V, or Q alone
        q_width = p["w_q"].shape[1]
        q_flat = qkv[..., :q_width]  # (B, T, h·d_h)
        rec("q_proj", "Q projection", q_flat, (x, p["w_q"]), kind="linear", params=("w_q", "b_q"))
        q = ops.split_heads(q_flat, h)  # (B, h, T, d_h)
        rec("q", "split heads Q", q, (q_flat,), kind="reshape")
        if cfg.kv_from >= 0:
            if self.source is None or self.source.last_kv is None:
                raise InputError(f"this layer attends to the keys and values of layer {cfg.kv_from} (block.kv_from): "
                                 f"it runs only inside its model, after that layer")
            k, v, start = self.source.last_kv  # (B, h_kv, T_k, d_h) each
            if start + T != k.shape[2]:
                raise InputError(f"block.kv_from: layer {cfg.kv_from}'s last pass was not this pass")
        else:
            start = cache.length if cache is not None else 0
            k_flat = qkv[..., q_width:q_width + h_kv * cfg.head_dim]  # (B, T, h_kv·d_h)
            rec("k_proj", "K projection", k_flat, (x, p["w_k"]), kind="linear", params=("w_k", "b_k"))
            v_flat = k_flat if cfg.k_eq_v else qkv[..., q_width + h_kv * cfg.head_dim:]  # (B, T, h_kv·d_h)
            if not cfg.k_eq_v:
                rec("v_proj", "V projection", v_flat, (x, p["w_v"]), kind="linear", params=("w_v", "b_v"))
            k = ops.split_heads(k_flat, h_kv)  # (B, h_kv, T, d_h)
            rec("k", "split heads K", k, (k_flat,), kind="reshape")
            v = ops.split_heads(v_flat, h_kv)  # (B, h_kv, T, d_h)
            rec("v", "split heads V" + (" (the K projection: k_eq_v)" if cfg.k_eq_v else ""), v, (v_flat,),
                kind="reshape")
        if cfg.qk_norm == "head":  # q norm (and k norm, when the keys are the layer's own)
            q_normed = Norm(cfg.norm, p.get("q_norm_gamma"), p.get("q_norm_beta"), cfg.norm_eps, ops,
                            cfg.norm_unit_offset, name="q_norm")(q)  # (B, h, T, d_h)
            rec("q_norm", qk_norm_label(cfg, "q"), q_normed, (q,), kind=cfg.norm, params=("q_norm_gamma", "q_norm_beta"))
            q = q_normed
            if cfg.kv_from < 0:
                k_normed = Norm(cfg.norm, p.get("k_norm_gamma"), p.get("k_norm_beta"), cfg.norm_eps, ops,
                                cfg.norm_unit_offset, name="k_norm")(k)  # (B, h_kv, T, d_h)
                rec("k_norm", qk_norm_label(cfg, "k"), k_normed, (k,), kind=cfg.norm,
                    params=("k_norm_gamma", "k_norm_beta"))
                k = k_normed
        if cfg.v_norm and cfg.kv_from < 0:  # Gemma 4: RMSNorm without scale over each value head's d_h
            v_normed = ops.rms_norm(v, 1.0, None, cfg.norm_eps)  # (B, h_kv, T, d_h)
            rec("v_norm", "V norm (per head, RMSNorm without scale)", v_normed, (v,), kind="rmsnorm")
            v = v_normed
        if cfg.rope:
            cos, sin = F.rope_tables(np.arange(start, start + T), cfg.rope_dims, cfg.rope_theta, x.dtype,
                                     cfg.rope_scaling)  # (T, r/2) each
            q_rot = ops.rotate_pairs(q, cos, sin, cfg.rope_layout)  # (B, h, T, d_h)
            rec("q_rope", "RoPE on Q", q_rot, (q,), kind="rope")
            q = q_rot
            if cfg.kv_from < 0:
                k_rot = ops.rotate_pairs(k, cos, sin, cfg.rope_layout)  # (B, h_kv, T, d_h)
                rec("k_rope", "RoPE on K", k_rot, (k,), kind="rope")
                k = k_rot
        if cfg.kv_from < 0:
            if cache is not None:
                k, v = cache.append(k, v)  # (B, h_kv, T_seen, d_h)
            self.last_kv = (k, v, start)
        heads = self._attend(q, k, v, start, rec)  # (B, h, T, d_h)
        concat = ops.combine_heads(heads)  # (B, T, h·d_h)
        rec("attn_concat", "combine heads", concat, (heads,), kind="reshape")
        out = ops.project_out(concat, p["w_o"], p.get("b_o"))  # (B, T, d)
        rec("attn_out", "output projection", out, (concat, p["w_o"]), kind="linear", params=("w_o", "b_o"))
        return out

    def backward(self, d_out: Array, tape: Tape) -> Array:
        """d_out (B, T, d) → dx (B, T, d), the forward in reverse: output projection, attention, RoPE
        (rotated back), the q/k norms, the clamp, the Q/K/V projection (one GEMM for all three)."""
        cfg, p, ops = self.cfg, self.p, self.ops
        if cfg.differential is not None:
            return self._differential_backward(d_out, tape)
        h, h_kv = cfg.n_heads, cfg.n_kv_heads
        saved = tape.take("attn")
        x = saved["x"]
        dx_gate = 0.0
        if cfg.attention_gate:  # out = (heads ⊙ σ(g))·W_O, g = x·W_gate + b_gate
            d_concat, dx_gate = self._gate_backward(d_out, saved, tape)  # (B, T, h·d_h), (B, T, d)
        elif cfg.sub_norms:  # out = norm(heads)·W_O: W_O's gradients from the normed heads, recomputed
            concat = ops.combine_heads(saved["heads"])  # (B, T, h·d_h)
            tape.add("w_o", ops.weight_grad(self.sub_norm(concat), d_out))
            if "b_o" in p:
                tape.add("b_o", F.sum_rows(d_out))
            d_concat = self.sub_norm.backward(d_out @ p["w_o"].T, tape)  # (B, T, h·d_h)
        else:
            d_concat = self._project_out_backward(d_out, saved["heads"], tape)  # (B, T, h·d_h)
        q_width, kv_width = p["w_q"].shape[1], p["w_k"].shape[1]
        # dQ, dK, dV written straight into their columns of one (B, T, (h + 2·h_kv)·d_h) array, the Q/K/V GEMM's
        d_qkv = np.empty(x.shape[:2] + (self.w_qkv.shape[1],), dtype=np.result_type(x, d_out))
        d_flat = d_qkv[..., :q_width], d_qkv[..., q_width:q_width + kv_width], d_qkv[..., q_width + kv_width:]
        dq, dk, dv = (ops.split_heads(a, heads) for a, heads in zip(d_flat, (h, h_kv, h_kv)))  # views (B, n, T, d_h)
        self._attend_backward(saved, ops.split_heads(d_concat, h), tape, (dq, dk, dv))
        if cfg.value_scale != 1.0:  # dV = dV_scaled · c
            dv *= cfg.value_scale
        if cfg.query_scale:  # dQ_rot = dQ_scaled · scale(t)
            dq *= query_scales(cfg, np.arange(x.shape[1]), dq.dtype)[:, None]  # (B, h, T, d_h)
        per_head = cfg.qk_norm in ("head", "each_head", "head_unscaled")
        if per_head and cfg.qk_norm_after_rope:
            dq[...], dk[...] = self._qk_norm_backward(dq, dk, tape)
        if cfg.rope:
            cos, sin = F.rope_tables(np.arange(x.shape[1]), cfg.rope_dims, cfg.rope_theta, x.dtype, cfg.rope_scaling)
            dq[...] = ops.rotate_pairs_backward(dq, cos, sin, cfg.rope_layout)  # (B, h, T, d_h)
            dk[...] = ops.rotate_pairs_backward(dk, cos, sin, cfg.rope_layout)  # (B, h_kv, T, d_h)
        if per_head and not cfg.qk_norm_after_rope:
            dq[...], dk[...] = self._qk_norm_backward(dq, dk, tape)
        if cfg.clip_after_qk_norm:  # the clamp came after the q/k norms: its mask first
            d_qkv *= np.abs(saved["unclipped"]) <= cfg.clip_qkv
        if cfg.qk_norm == "projection":
            d_flat[0][...], d_flat[1][...] = self._qk_norm_backward(d_flat[0], d_flat[1], tape)
        if cfg.clip_qkv and not cfg.clip_after_qk_norm:  # the gradient passes inside [−c, c], bounds included
            d_qkv *= np.abs(saved["unclipped"]) <= cfg.clip_qkv
        dw = ops.weight_grad(x, d_qkv)  # (d, (h + 2·h_kv)·d_h)
        bounds = {"q": (0, q_width), "k": (q_width, q_width + kv_width), "v": (q_width + kv_width, None)}
        db = F.sum_rows(d_qkv) if self.b_qkv is not None else None
        for name, (lo, hi) in bounds.items():
            tape.add(f"w_{name}", dw[:, lo:hi])
            if db is not None:
                tape.add(f"b_{name}", db[lo:hi])
        return d_qkv @ self.w_qkv.T + dx_gate  # (B, T, d)

    def _gate_backward(self, d_out: Array, saved: Mapping[str, Any], tape: Tape) -> tuple[Array, Array]:
        """The attention gate's step in reverse: W_O's gradients from the gated heads, W_gate's (and b_gate's) from
        d(gate) = d(gated)·heads·a'(gate) (a = σ or softplus, whose derivative is σ; summed over each head's d_h
        for a gate per head); returns d(heads) (B, T, h·d_h) and the gate's share of dx (B, T, d)."""
        p, ops, form, h = self.p, self.ops, self.cfg.attention_gate_form, self.cfg.n_heads
        concat, gate = ops.combine_heads(saved["heads"]), saved["gate"]  # (B, T, h·d_h); (B, T, h·d_h) or (B, T, h)
        s = gate_values(gate, form)
        tape.add("w_o", ops.weight_grad(gate_heads(concat, s, h), d_out))
        if "b_o" in p:
            tape.add("b_o", F.sum_rows(d_out))
        d_gated = d_out @ p["w_o"].T  # (B, T, h·d_h)
        slope = s * (1.0 - s) if self.cfg.gate_sigmoid else F.sigmoid(gate)  # a'(gate), as wide as the gate
        product = d_gated * concat  # (B, T, h·d_h)
        if self.cfg.gate_per_head:  # each head's gate read by its d_h outputs: their products summed
            product = product.reshape(*product.shape[:-1], h, -1).sum(axis=-1)  # (B, T, h)
        d_gate = product * slope  # (B, T, h·d_h), or (B, T, h)
        tape.add("w_attn_gate", ops.weight_grad(saved["x"], d_gate))
        if "b_attn_gate" in p:
            tape.add("b_attn_gate", F.sum_rows(d_gate))
        if "b_attn_gate_head" in p:  # each head's bias read by its d_h pre-activations
            tape.add("b_attn_gate_head", F.sum_rows(d_gate).reshape(h, -1).sum(axis=-1))
        return gate_heads(d_gated, s, h), d_gate @ p["w_attn_gate"].T

    def _project_out_backward(self, d_out: Array, heads: Array, tape: Tape) -> Array:
        """W_O's gradients from the attention output (B, h, T, d_v) and d_out (B, T, d); returns d_concat."""
        p = self.p
        concat = self.ops.combine_heads(heads)  # (B, T, h·d_v)
        tape.add("w_o", self.ops.weight_grad(concat, d_out))
        if "b_o" in p:
            tape.add("b_o", F.sum_rows(d_out))
        return d_out @ p["w_o"].T  # (B, T, h·d_v)

    def _clip(self, q: Array, k: Array, v: Array, rec: Record) -> tuple[Array, Array, Array]:
        """Q, K and V projections clamped to [-clip_qkv, clip_qkv], each its own array."""
        c, out = self.cfg.clip_qkv, []
        for name, a in (("q", q), ("k", k), ("v", v)):
            clipped = np.clip(a, -c, c)  # same shape as a
            rec(f"{name}_clip", f"clip {name.upper()} to ±{c:g}", clipped, (a,), kind="clip")
            out.append(clipped)
        return out[0], out[1], out[2]

    def _qk_norm(self, q: Array, k: Array, rec: Record, tape: Tape | None = None) -> tuple[Array, Array]:
        """The block's kind of norm over the last axis of queries and keys, each with its own scale."""
        cfg, p = self.cfg, self.p
        out = []
        for name, a in (("q", q), ("k", k)):
            if cfg.qk_norm == "each_head":  # weights (heads, d_h): broadcast over (B, heads, T, d_h)
                if tape is not None:
                    tape.keep(f"{name}_norm", x=a)
                fn = self.ops.layer_norm if cfg.norm == "layernorm" else self.ops.rms_norm
                gamma, beta = p.get(f"{name}_norm_gamma"), p.get(f"{name}_norm_beta")
                scale = norm_scale(gamma, cfg.norm_unit_offset)
                normed = fn(a, scale[:, None, :] if gamma is not None else scale,
                            None if beta is None else beta[:, None, :], cfg.norm_eps)
                rec(f"{name}_norm", f"{name.upper()} norm", normed, (a,), kind=cfg.norm,
                    params=(f"{name}_norm_gamma", f"{name}_norm_beta"))
                out.append(normed)
                continue
            norm = Norm(cfg.norm, p.get(f"{name}_norm_gamma"), p.get(f"{name}_norm_beta"), cfg.norm_eps, self.ops,
                        cfg.norm_unit_offset, name=f"{name}_norm")
            normed = norm(a, tape)  # same shape as a
            rec(f"{name}_norm", qk_norm_label(cfg, name), normed, (a,), kind=cfg.norm,
                params=(f"{name}_norm_gamma", f"{name}_norm_beta"))
            out.append(normed)
        return out[0], out[1]

    def _qk_norm_backward(self, dq: Array, dk: Array, tape: Tape) -> tuple[Array, Array]:
        cfg, p = self.cfg, self.p
        out = []
        for name, d in (("q", dq), ("k", dk)):
            gamma, beta = p.get(f"{name}_norm_gamma"), p.get(f"{name}_norm_beta")
            if cfg.qk_norm != "each_head":
                out.append(Norm(cfg.norm, gamma, beta, cfg.norm_eps, self.ops, cfg.norm_unit_offset,
                                name=f"{name}_norm").backward(d, tape))
                continue
            a = tape.take(f"{name}_norm")["x"]  # (B, heads, T, d_h), weights (heads, d_h) per head
            fn = self.ops.layer_norm_backward if cfg.norm == "layernorm" else self.ops.rms_norm_backward
            scale = norm_scale(gamma, cfg.norm_unit_offset)
            dx, d_scale = fn(a, scale[:, None, :] if gamma is not None else scale, cfg.norm_eps, d)
            if gamma is not None:
                tape.add(f"{name}_norm_gamma", F.unbroadcast(d_scale, gamma[:, None, :].shape).reshape(gamma.shape))
            if beta is not None:
                tape.add(f"{name}_norm_beta", F.unbroadcast(d, beta[:, None, :].shape).reshape(beta.shape))
            out.append(dx)
        return out[0], out[1]

    def _attend(self, q: Array, k: Array, v: Array, start: int, rec: Record,
                drop: Callable[[Array], Array] | None = None, saved: dict[str, Any] | None = None) -> Array:
        """softmax(mask(Q·Kᵀ/√d_h))·V for q (B, h, T_q, d_h) and k, v (B, h_kv, T_k, d_h).

        `full` builds the whole (B, h, T_q, T_k) table from the `Ops` table, one recorded step at a
        time: the obviously correct path, which traces and seeded bugs (any non-standard `Ops`)
        use. Otherwise the blocked kernel computes the same numbers without ever holding the
        table (tests hold them equal).
        """
        B, h, T_q, _ = q.shape
        T_k = k.shape[2]
        table_bytes = B * h * T_q * T_k * q.itemsize
        full = (self.ops is not STANDARD_OPS or drop is not None or self.selection is not None
                or full_table(self.attention, table_bytes, rec is not _ignore, self.chunk_bytes))
        if saved is not None:  # what the backward reads: Q, K, V as attention sees them (after RoPE)
            saved.update(q=q, k=k, v=v)
        if full:
            v_all = self._per_query_head(v)  # (B, h, T_k, d_h)
            _, scores, masked, weights = self._table(q, k, start, rec)
            weights = weights[..., :T_k]  # a sink's weight goes to no value
            rec("masked_scores", mask_label(self.cfg), masked, (scores,), kind="mask")
            rec("attn_weights", softmax_label(self.cfg), weights, (masked,), kind="softmax", params=("sinks",))
            if drop is not None:
                weights = drop(weights)  # (B, h, T_q, T_k): training mode only
            heads = weights @ v_all  # (B, h, T_q, d_h)
            rec("attn_heads", "weights·V", heads, (weights, v), kind="matmul")
            if saved is not None:
                saved["heads"] = heads
            return heads
        lse = np.empty((B, h, T_q), dtype=np.result_type(q, k)) if saved is not None else None
        heads = self._attend_blocked(q, k, v, start, lse)
        if saved is not None:
            saved.update(heads=heads, lse=lse)  # (B, h, T, d_v), (B, h, T): each row's log Σ exp(scores)
        rec("attn_heads", blocked_label(self.cfg), heads, (q, k, v), kind="attention", params=("sinks",))
        return heads

    def _per_query_head(self, kv: Array) -> Array:
        """K or V (B, h_kv, T_k, d) as one head per query head (B, h, T_k, d): grouped-query attention's
        K/V head j serves query heads j·g … j·g + g − 1."""
        h = self.cfg.n_heads
        return kv if kv.shape[1] == h else np.repeat(kv, h // kv.shape[1], axis=1)

    def _table(self, q: Array, k: Array, start: int, rec: Record = _ignore, backward: bool = False
               ) -> tuple[Array, Array, Array, Array]:
        """The whole score table, one `Ops` step at a time: (the scores after any soft cap, then with ALiBi's
        biases, the masked scores, the softmax weights), each (B, h, T_q, T_k); with attention sinks the
        weights have one more column, each head's sink logit's, a key every query sees (its weight is then
        dropped: a row's weights on the keys sum to less than 1)."""
        cfg, ops = self.cfg, self.ops
        B, h, T_q, _ = q.shape
        T_k = k.shape[2]
        scores = ops.attention_scores(q, self._per_query_head(k))  # (B, h, T_q, T_k)
        if cfg.attention_scale:  # an override of 1/√d_h (Granite's attention_multiplier)
            scores *= np.asarray(cfg.attention_scale * math.sqrt(q.shape[-1]), dtype=scores.dtype)
        if cfg.softmax_mscale != 1.0:  # DeepSeek's yarn mscale, squared, on the softmax scale
            scores *= np.asarray(cfg.softmax_mscale ** 2, dtype=scores.dtype)
        if cfg.attention_softcap:  # Gemma 2: c·tanh(scores/c), before the mask
            scores = soft_cap(scores, cfg.attention_softcap)
        rec("scores", scores_label(cfg), scores, (q, k), kind="matmul")
        capped = scores
        if cfg.alibi:  # BLOOM: each head's slope times the distance to each key, unscaled
            scores = scores + F.alibi_bias(ops.alibi_slopes(h), T_q, T_k, start, scores.dtype)  # (B, h, T_q, T_k)
            rec("alibi_scores", "add ALiBi biases", scores, (capped,), kind="add")
        allowed = (ops.backward_mask if backward else ops.causal_mask)(T_q, T_k, start)  # (T_q, T_k)
        if (local := local_mask(cfg, T_q, T_k, start)) is not None:  # a window or a chunk
            allowed = allowed & local
        if self.selection is not None:  # DeepSeek Sparse Attention: only the keys the indexer chose
            allowed = allowed & self.selection  # (B, 1, T_q, T_k)
        if not cfg.attention_sinks:
            masked, weights = ops.attention_weights(scores, allowed)
            return capped, scores, masked, weights
        sinks = np.broadcast_to(self.p["sinks"].astype(scores.dtype)[:, None, None], (B, h, T_q, 1))
        masked, weights = ops.attention_weights(np.concatenate([scores, sinks], axis=-1),  # (B, h, T_q, T_k + 1)
                                                np.pad(allowed, ((0, 0), (0, 1)), constant_values=True))
        return capped, scores, masked[..., :T_k], weights

    def _attend_backward(self, saved: dict[str, Any], d_heads: Array, tape: Tape,
                         out: tuple[Array, Array, Array] | None = None) -> tuple[Array, Array, Array]:
        """(dQ (B, h, T, d_h), dK, dV (B, h_kv, T, d)) from d_heads (B, h, T, d_v), written into `out` when
        given, by the path the forward took: the blocked kernel's (from each row's log-sum-exp) or the whole
        table's; the sinks' gradient added to the tape."""
        q, k, v = saved["q"], saved["k"], saved["v"]
        if "lse" in saved:
            dq, dk, dv, d_sinks = self._attend_blocked_backward(q, k, v, saved["heads"], saved["lse"], d_heads, out)
        else:
            dq, dk, dv, d_sinks = self._attend_full_backward(q, k, v, d_heads)
            if out is not None:
                for into, value in zip(out, (dq, dk, dv)):
                    into[...] = value
                dq, dk, dv = out
        if d_sinks is not None:
            tape.add("sinks", d_sinks)
        return dq, dk, dv

    def _attend_full_backward(self, q: Array, k: Array, v: Array, d_heads: Array
                              ) -> tuple[Array, Array, Array, Array | None]:
        """The whole table's backward, through the `Ops` table: dV = Pᵀ·dO, dP = dO·Vᵀ, dS = softmax's VJP,
        through the soft cap (1 − tanh²), then dQ = dS·K·s and dK = dSᵀ·Q·s; grouped K/V heads sum their
        query heads' gradients. The mask needs nothing: P is 0 where it hides a key, so dS is too."""
        cfg, ops = self.cfg, self.ops
        T_k = k.shape[2]
        k_all, v_all = self._per_query_head(k), self._per_query_head(v)  # (B, h, T_k, d)
        capped, _, _, weights_all = self._table(q, k, 0, backward=True)
        weights = weights_all[..., :T_k]  # (B, h, T_q, T_k)
        dv_all = weights.swapaxes(-1, -2) @ d_heads  # (B, h, T_k, d_v)
        d_weights = d_heads @ v_all.swapaxes(-1, -2)  # (B, h, T_q, T_k)
        if cfg.attention_sinks:  # the sink column: no value, so no dP of its own
            d_weights = np.concatenate([d_weights, np.zeros_like(d_weights[..., :1])], axis=-1)
        d_scores_all = ops.softmax_backward(weights_all, d_weights)  # (B, h, T_q, T_k [+ 1])
        d_sinks = d_scores_all[..., T_k].sum(axis=(0, 2)) if cfg.attention_sinks else None  # (h,)
        d_scores = d_scores_all[..., :T_k]
        if cfg.attention_softcap:  # d(c·tanh(s/c))/ds = 1 − tanh² = 1 − (capped/c)²
            d_scores = d_scores * (1.0 - (capped / cfg.attention_softcap) ** 2)
        scale = cfg.score_scale
        dq = (d_scores @ k_all) * scale  # (B, h, T_q, d_h)
        dk_all = (d_scores.swapaxes(-1, -2) @ q) * scale  # (B, h, T_k, d_h)
        h_kv = k.shape[1]
        return dq, ops.sum_groups(dk_all, h_kv), ops.sum_groups(dv_all, h_kv), d_sinks

    def _attend_blocked(self, q: Array, k: Array, v: Array, start: int, lse: Array | None = None) -> Array:
        """Tiles of query rows × K/V heads (`attention_tile`), shared among the cores; `lse` (B, h, T), when
        given, receives each row's log-sum-exp of its scores (the sink's logit included), all a backward
        needs to recompute the row's softmax.

        A tile sees keys [0, start + end of its rows) only (the rest are all in the future), Q, K
        and V are made contiguous per head (Q with the score scale folded in), only the tile's diagonal
        square needs the mask, the softmax runs in place in one buffer per worker, and rows are
        normalised after ·V (d_h columns instead of T_k), their sums coming out of the same GEMM
        when V is copied. Grouped-query heads share their K/V head without copying it. Attention
        sinks join a row's maximum and its sum (the sink's weight goes to no value).
        """
        B, h, T, _ = q.shape
        d_v = v.shape[-1]  # the values' width (d_h but under MLA)
        grid = ScoreTiles(self.cfg, self.p, q, k, start, self.tile_bytes)
        h_kv, group, dtype = grid.h_kv, grid.group, grid.dtype
        # V strided through the QKV output is copied anyway: then with a column of ones beside it, so that
        # weights·[V | 1] also yields each row's sum, one pass over the scores fewer. A K/V cache's
        # buffer is read in place (a copy would cost each decode step O(T_k)) and its sums taken apart.
        v_ones = None
        if not _row_contiguous(v):
            v_ones = np.empty(v.shape[:3] + (d_v + 1,), dtype=np.result_type(dtype, v))  # (B, h_kv, T_k, d_v + 1)
            v_ones[..., :d_v] = v
            v_ones[..., d_v] = 1
        out = np.empty((B, T, h_kv, group, d_v), dtype=dtype)  # written in the combined-heads layout
        row_lse = None if lse is None else lse.reshape(B, h_kv, group, T)  # a view: written in place

        def run(tiles: Iterable[tuple[int, int, int]]) -> None:
            buf = grid.buffer()
            for tile in tiles:
                s, (b, kv, lo, hi, first, last) = grid.scores(buf, tile)  # (n, g·C, T_seen)
                n, c = s.shape[0], hi - lo
                top = s.max(axis=-1, keepdims=True)  # (n, g·C, 1)
                sink = grid.sink(kv, n, c)  # (n, g·C, 1) or None
                if sink is not None:  # the sink is one more logit of the row: in its maximum and its sum
                    np.maximum(top, sink, out=top)
                s -= top
                np.exp(s, out=s)
                if v_ones is None:
                    total = s.sum(axis=-1, keepdims=True)  # (n, g·C, 1)
                    mixed = s @ v[b, kv, first:last]  # (n, g·C, d_v)
                else:
                    both = s @ v_ones[b, kv, first:last]  # (n, g·C, d_v + 1): weights·V | row sums
                    mixed, total = both[..., :d_v], both[..., d_v:]  # (n, g·C, d_v), (n, g·C, 1)
                if sink is not None:
                    total = total + np.exp(sink - top)  # the sink's unnormalised weight
                mixed = np.divide(mixed, total)  # (n, g·C, d_v)
                out[b, lo:hi, kv] = mixed.reshape(n, group, c, d_v).transpose(2, 0, 1, 3)
                if row_lse is not None:
                    row_lse[b, kv, :, lo:hi] = (top + np.log(total)).reshape(n, group, c)

        share_out(run, grid.tiles(), cost=grid.cost,
                  work=B * h * T * (start + T / 2) * (grid.d_h + d_v))  # Q·Kᵀ and weights·V, causal half
        return out.reshape(B, T, h, d_v).transpose(0, 2, 1, 3)  # (B, h, T, d_v) view

    def _attend_blocked_backward(self, q: Array, k: Array, v: Array, out: Array, lse: Array, d_out: Array,
                                 into: tuple[Array, Array, Array] | None = None
                                 ) -> tuple[Array, Array, Array, Array | None]:
        """FlashAttention's backward, tile by tile as the forward ran, never holding the table: each tile's
        P = exp(S − lse) is recomputed from Q, K and the saved row log-sum-exp; then dV += Pᵀ·dO,
        dP = dO·Vᵀ, dS = P ⊙ (dP − D) with D = rowsum(dO ⊙ O) (softmax's row-sum term, computed once),
        through the soft cap, dQ = dS·K·s and dK += dSᵀ·(Q·s). A sink's logit gets −Σ P_sink·D. The workers
        share out the K/V heads (and batch rows), each running every row tile of its own, so dK and dV are
        summed in place, each by one worker. Returns (dQ (B, h, T, d_h), dK, dV (B, h_kv, T_k, d), d_sinks
        (h,) or None)."""
        B, h, T, d_h = q.shape
        T_k, d_v = k.shape[2], v.shape[-1]
        grid = ScoreTiles(self.cfg, self.p, q, k, 0, self.tile_bytes)
        h_kv, group, dtype, cap, scale = grid.h_kv, grid.group, grid.dtype, grid.cap, self.cfg.score_scale
        v = _rows_contiguous(v)  # (B, h_kv, T_k, d_v)
        d_o = np.ascontiguousarray(d_out, dtype=dtype).reshape(B, h_kv, group, T, d_v)
        D = np.einsum("bhtd,bhtd->bht", d_out, out).reshape(B, h_kv, group, T)  # rowsum(dO ⊙ O)
        row_lse = lse.reshape(B, h_kv, group, T)
        if into is None:
            into = (np.empty((B, h, T, d_h), dtype=dtype), np.empty((B, h_kv, T_k, d_h), dtype=dtype),
                    np.empty((B, h_kv, T_k, d_v), dtype=dtype))
        dq, dk, dv = into  # dQ is written tile by tile, dK and dV summed over the tiles
        dk[...] = 0
        dv[...] = 0
        d_sinks = np.zeros((B, h_kv, group), dtype=dtype)
        tiles = grid.tiles()

        def run(units: Iterable[tuple[int, int]]) -> None:
            buf, d_p_buf = grid.buffer(), grid.buffer()
            capped_buf = grid.buffer() if cap else None
            for b, g in units:  # every row tile of these K/V heads: their dK and dV are this worker's alone
                for tile in (t for t in tiles if t[:2] == (b, g)):
                    s, (_, kv, lo, hi, first, last) = grid.scores(buf, tile, capped_buf)  # (n, g·C, T_seen)
                    n, c = s.shape[0], hi - lo
                    s -= row_lse[b, kv, :, lo:hi].reshape(n, group * c, 1)
                    np.exp(s, out=s)  # P, the forward's weights
                    d_o_tile = d_o[b, kv, :, lo:hi].reshape(n, group * c, d_v)  # (n, g·C, d_v)
                    dv[b, kv, first:last] += s.swapaxes(-1, -2) @ d_o_tile  # (n, T_seen, d_v)
                    d_p = d_p_buf[:s.size].reshape(s.shape)
                    np.matmul(d_o_tile, v[b, kv, first:last].swapaxes(-1, -2), out=d_p)  # (n, g·C, T_seen): dP
                    d_row = D[b, kv, :, lo:hi].reshape(n, group * c, 1)
                    d_p -= d_row
                    d_p *= s  # dS
                    if cap:  # through c·tanh(s/c): 1 − tanh²
                        t = capped_buf[:s.size].reshape(s.shape)
                        t /= cap
                        np.multiply(t, t, out=t)
                        np.subtract(1.0, t, out=t)
                        d_p *= t
                    heads = slice(kv.start * group, kv.stop * group)  # the query heads of these K/V heads
                    dq[b, heads, lo:hi] = ((d_p @ grid.k[b, kv, first:last]) * scale).reshape(n * group, c, d_h)
                    dk[b, kv, first:last] += d_p.swapaxes(-1, -2) @ grid.qs[b, kv, :, lo:hi].reshape(n, group * c, d_h)
                    sink = grid.sink(kv, n, c)
                    if sink is not None:  # the sink's weight exp(sink − lse), with no value: dS_sink = −P_sink·D
                        p_sink = np.exp(sink - row_lse[b, kv, :, lo:hi].reshape(n, group * c, 1))
                        d_sinks[b, kv] -= (p_sink * d_row).reshape(n, group, c).sum(axis=-1)

        units = sorted({t[:2] for t in tiles})
        share_out(run, units, cost=lambda unit: 1,
                  work=B * h * T * (T / 2) * (3 * d_h + 2 * d_v))  # Q·Kᵀ, dS·K, dSᵀ·Q; Pᵀ·dO, dO·Vᵀ
        return dq, dk, dv, d_sinks.sum(axis=0).reshape(h) if self.cfg.attention_sinks else None


@dataclass
class LatentAttention(MultiHeadAttention):
    """Multi-head latent attention (DeepSeek-V2/V3), as transformers' DeepseekV3Attention computes it.

    Shapes: r_q query latent, r_kv K/V latent, d_nope and d_rope each head's query/key parts
    without and with RoPE (d_h = d_nope + d_rope), d_v each head's value width.

        Q        = x·W_q, or norm(x·W_q_a + b)·W_q_b      (B, h, T, d_nope + d_rope) per head
        c | k_R  = x·W_kv_a + b                           (B, T, r_kv), (B, T, d_rope)
        K_nope|V = norm(c)·W_kv_b                         per head (B, h, T, d_nope), (B, h, T, d_v)
        K        = [K_nope | RoPE(k_R)]                   k_R shared by every head
        out      = softmax(mask(Q·Kᵀ · s))·V · W_O        s = 1/√d_h (× yarn mscale²)

    The K/V cache holds the compressed latent, as transformers and MLA-aware engines do: norm(c)
    (B, 1, T, r_kv) in the cache's `k` and RoPE'd k_R (B, 1, T, d_rope) in its `v`; each pass
    expands the K_nope and V of every cached position from it.
    """

    def __post_init__(self) -> None:
        pass  # no fused Q/K/V: the projections differ in input (x or the latents) and width

    def _latent_norm(self, name: str, a: Array, rec: Record = _ignore, label: str = "",
                     tape: Tape | None = None) -> Array:
        norm = self._norm(name)
        out = self.ops.normalise_latent(a, lambda x: norm(x, tape))  # same shape as a
        rec(name, label, out, (a,), kind=self.cfg.norm, params=(f"{name}_gamma", f"{name}_beta"))
        return out

    def _norm(self, name: str) -> Norm:
        cfg, p = self.cfg, self.p
        assert cfg.mla is not None
        return Norm(cfg.norm, p[f"{name}_gamma"], p.get(f"{name}_beta"), cfg.mla.latent_norm_eps, self.ops,
                    cfg.norm_unit_offset, name=name)

    def __call__(self, x: Array, rec: Record = _ignore, cache: KVCache | None = None,
                 drop: Callable[[Array], Array] | None = None, tape: Tape | None = None) -> Array:
        """x (B, T, d) → (B, T, d); a tape keeps x, the normalised latents, and attention's Q, K, V, output
        and row log-sum-exps (the latents' norms keep their inputs)."""
        assert tape is None or (cache is None and drop is None), "a backward runs on a whole pass, without dropout"
        cfg, p, ops, m = self.cfg, self.p, self.ops, self.cfg.mla
        assert m is not None
        h, r_kv, d_rope = cfg.n_heads, m.kv_lora_rank, m.qk_rope_head_dim
        B, T, _ = x.shape
        start = cache.length if cache is not None else 0

        if m.q_lora_rank:
            q_lat = F.linear(x, p["w_q_a"], p.get("b_q_a"))  # (B, T, r_q)
            rec("q_a", "Q down-projection (latent)", q_lat, (x, p["w_q_a"]), kind="linear", params=("w_q_a", "b_q_a"))
            q_lat = self._latent_norm("q_a_norm", q_lat, rec, "Q latent norm", tape)  # (B, T, r_q)
            if m.own_indexer:  # DeepSeek Sparse Attention: the indexer picks each query's keys
                self.selection = indexer.select(cfg, p, x, q_lat, start, cache, rec)  # (B, 1, T, T_k)
            elif m.index_shared:  # GLM-5's shared layers: the choice of the layer before, in this same pass
                if self.previous is None:
                    raise InputError("this layer reuses the previous layer's indexer choice (mla.index_shared): "
                                     "run it within its model, not alone")
                self.selection = self.previous.selection  # (B, 1, T, T_k)
            q_flat = F.linear(q_lat, p["w_q_b"], None)  # (B, T, h·d_h)
            rec("q_proj", "Q up-projection", q_flat, (q_lat, p["w_q_b"]), kind="linear", params=("w_q_b",))
        else:
            q_flat = F.linear(x, p["w_q"], None)  # (B, T, h·d_h)
            rec("q_proj", "Q projection", q_flat, (x, p["w_q"]), kind="linear", params=("w_q",))
        q = ops.split_heads(q_flat, h)  # (B, h, T, d_nope + d_rope)
        rec("q", "split heads Q", q, (q_flat,), kind="reshape")
        q_nope, q_pe = ops.split_rope_part(q, d_rope)  # (B, h, T, d_nope), (B, h, T, d_rope)

        kv_a = F.linear(x, p["w_kv_a"], p.get("b_kv_a"))  # (B, T, r_kv + d_rope)
        rec("kv_a", "K/V down-projection (latent | RoPE key)", kv_a, (x, p["w_kv_a"]), kind="linear",
            params=("w_kv_a", "b_kv_a"))
        latent = self._latent_norm("kv_a_norm", kv_a[..., :r_kv], rec, "K/V latent norm", tape)  # (B, T, r_kv)
        k_pe = kv_a[:, None, :, r_kv:]  # (B, 1, T, d_rope): one RoPE key for every head

        if cfg.rope:  # without rotary positions (Kimi-Linear's NoPE layers) both parts are read as they are
            cos, sin = F.rope_tables(np.arange(start, start + T), d_rope, cfg.rope_theta, x.dtype,
                                     cfg.rope_scaling)  # (T, d_rope/2) each
            q_pe = ops.rotate_pairs(q_pe, cos, sin, cfg.rope_layout)  # (B, h, T, d_rope)
            rec("q_rope", "RoPE on Q's RoPE part", q_pe, (q,), kind="rope")
            k_pe = ops.rotate_pairs(k_pe, cos, sin, cfg.rope_layout)  # (B, 1, T, d_rope)
            rec("k_rope", "RoPE on the shared key", k_pe, (kv_a,), kind="rope")

        if cache is not None:
            cached, k_pe = cache.append(latent[:, None], k_pe)  # (B, 1, T_seen, r_kv), (B, 1, T_seen, d_rope)
            latent = cached[:, 0]  # (B, T_seen, r_kv)
        kv = F.linear(latent, p["w_kv_b"], None)  # (B, T_k, h·(d_nope + d_v))
        rec("kv_proj", "K/V up-projection (from the latent)", kv, (latent, p["w_kv_b"]), kind="linear",
            params=("w_kv_b",))
        kv = ops.split_heads(kv, h)  # (B, h, T_k, d_nope + d_v)
        d_nope = m.qk_nope_head_dim
        T_k = kv.shape[2]
        k = np.empty((B, h, T_k, d_nope + d_rope), dtype=kv.dtype)  # [K_nope | k_R], k_R repeated per head
        k[..., :d_nope] = kv[..., :d_nope]
        k[..., d_nope:] = k_pe
        rec("k", "keys: K_nope | shared RoPE key", k, (kv, k_pe), kind="reshape")
        v = kv[..., d_nope:]  # (B, h, T_k, d_v)
        rec("v", "values V", v, (kv,), kind="reshape")
        q_cat = np.concatenate((q_nope, q_pe), axis=-1)  # (B, h, T, d_nope + d_rope)
        rec("q_cat", "queries: Q_nope | RoPE'd Q_rope", q_cat, (q, q_pe), kind="reshape")

        saved: dict[str, Any] | None = ({"x": x, "latent": latent, "q_latent": q_lat if m.q_lora_rank else None}
                                        if tape is not None else None)
        heads = self._attend(q_cat, k, v, start, rec, drop, saved)  # (B, h, T, d_v)
        concat = ops.combine_heads(heads)  # (B, T, h·d_v)
        rec("attn_concat", "combine heads", concat, (heads,), kind="reshape")
        out = ops.project_out(concat, p["w_o"], p.get("b_o"))  # (B, T, d)
        rec("attn_out", "output projection", out, (concat, p["w_o"]), kind="linear", params=("w_o", "b_o"))
        if tape is not None:
            tape.keep("attn", **saved)
        return out

    def backward(self, d_out: Array, tape: Tape) -> Array:
        """d_out (B, T, d) → dx (B, T, d): W_O, attention, then the queries' and the keys' RoPE parts rotated
        back (the shared key's gradient summed over the heads that read it), K_nope and V back through the
        up-projection and the latent's norm, the two down-projections."""
        cfg, p, ops, m = self.cfg, self.p, self.ops, self.cfg.mla
        assert m is not None
        h, d_rope, d_nope = cfg.n_heads, m.qk_rope_head_dim, m.qk_nope_head_dim
        saved = tape.take("attn")
        x = saved["x"]
        d_concat = self._project_out_backward(d_out, saved["heads"], tape)  # (B, T, h·d_v)
        dq, dk, dv = self._attend_backward(saved, ops.split_heads(d_concat, h), tape)  # (B, h, T, d_h), …, (…, d_v)
        if cfg.rope:
            cos, sin = F.rope_tables(np.arange(x.shape[1]), d_rope, cfg.rope_theta, x.dtype, cfg.rope_scaling)
            unrotate = lambda a: ops.rotate_pairs_backward(a, cos, sin, cfg.rope_layout)  # noqa: E731
        else:  # NoPE: the parts were never rotated
            unrotate = lambda a: a  # noqa: E731
        dq = np.concatenate((dq[..., :d_nope], unrotate(dq[..., d_nope:])), axis=-1)  # (B, h, T, d_nope + d_rope)
        dq_flat = ops.combine_heads(dq)  # (B, T, h·d_h)
        if m.q_lora_rank:
            tape.add("w_q_b", ops.weight_grad(saved["q_latent"], dq_flat))
            d_q_lat = self._norm("q_a_norm").backward(dq_flat @ p["w_q_b"].T, tape)  # (B, T, r_q)
            tape.add("w_q_a", ops.weight_grad(x, d_q_lat))
            if "b_q_a" in p:
                tape.add("b_q_a", F.sum_rows(d_q_lat))
            dx = d_q_lat @ p["w_q_a"].T
        else:
            tape.add("w_q", ops.weight_grad(x, dq_flat))
            dx = dq_flat @ p["w_q"].T
        d_k_pe = unrotate(dk[..., d_nope:].sum(axis=1, keepdims=True))  # (B, 1, T, d_rope): every head read it
        d_kv = ops.combine_heads(np.concatenate((dk[..., :d_nope], dv), axis=-1))  # (B, T, h·(d_nope + d_v))
        tape.add("w_kv_b", ops.weight_grad(saved["latent"], d_kv))
        d_kv_a = np.concatenate((self._norm("kv_a_norm").backward(d_kv @ p["w_kv_b"].T, tape), d_k_pe[:, 0]),
                                axis=-1)  # (B, T, r_kv + d_rope)
        tape.add("w_kv_a", ops.weight_grad(x, d_kv_a))
        if "b_kv_a" in p:
            tape.add("b_kv_a", F.sum_rows(d_kv_a))
        return dx + d_kv_a @ p["w_kv_a"].T


class MixtureOfAttentionHeads(MultiHeadAttention):
    """JetMoE's mixture of attention heads (blockcli/moa.py has the formulas): a router picks k_a of E_a attention
    experts per token; each chosen expert's W_q gives h_kv query heads that attend to the shared K/V (RoPE on Q and
    K, the K/V cache of h_kv heads as any attention's), its heads' output goes through its own W_o, times its routing
    weight; the k_a outputs are summed, plus the mixture's bias."""

    def __post_init__(self) -> None:
        pass  # no fused Q/K/V: the queries come from each token's own experts

    def __call__(self, x: Array, rec: Record = _ignore, cache: KVCache | None = None,
                 drop: Callable[[Array], Array] | None = None, tape: Tape | None = None) -> Array:
        """x (B, T, d) → (B, T, d). A tape keeps x, the choice and its weights, attention's Q, K, V (after RoPE),
        output and row log-sum-exps, and each slot's heads and expert output."""
        assert tape is None or (cache is None and drop is None), "a backward runs on a whole pass, without dropout"
        cfg, p, ops, m = self.cfg, self.p, self.ops, MOA.mixture_of(self.cfg)
        h, h_kv, d_h, k_a = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, m.top_k
        B, T, _ = x.shape
        start = cache.length if cache is not None else 0
        logits, chosen, weights = MOA.route(x, p["moa_router"], k_a, ops)  # (B, T, E_a), (B, T, k_a) twice
        rec("moa_logits", MOA.logits_label(m), logits, (x, p["moa_router"]), kind="linear", params=("moa_router",))
        rec("moa_choice", MOA.choice_label(m), chosen, (logits,), kind="topk")
        rec("moa_weights", MOA.weights_label(m), weights, (chosen,), kind="softmax")
        q_slots = MOA.expert_queries(x, chosen, p, m.n_experts)  # (B, T, k_a, h_kv·d_h)
        q_flat = q_slots.reshape(B, T, k_a * h_kv * d_h)  # (B, T, k_a·h_kv·d_h)
        rec("q_proj", MOA.query_label(cfg), q_flat, (x, p["attn_experts.0.w_q"]), kind="linear",
            params=tuple(f"attn_experts.{e}.w_q" for e in range(m.n_experts)))
        k_flat = F.linear(x, p["w_k"], None)  # (B, T, h_kv·d_h)
        rec("k_proj", "K projection (shared by the experts)", k_flat, (x, p["w_k"]), kind="linear", params=("w_k",))
        v_flat = F.linear(x, p["w_v"], None)  # (B, T, h_kv·d_h)
        rec("v_proj", "V projection (shared by the experts)", v_flat, (x, p["w_v"]), kind="linear", params=("w_v",))
        # query head i·k_a + j: expert slot j's head i, so grouped-query attention's head group i reads K/V head i
        q = q_slots.reshape(B, T, k_a, h_kv, d_h).transpose(0, 3, 2, 1, 4).reshape(B, h, T, d_h)  # (B, h, T, d_h)
        rec("q", MOA.split_label(cfg), q, (q_flat,), kind="reshape")
        k = ops.split_heads(k_flat, h_kv)  # (B, h_kv, T, d_h)
        rec("k", "split heads K", k, (k_flat,), kind="reshape")
        v = ops.split_heads(v_flat, h_kv)  # (B, h_kv, T, d_h)
        rec("v", "split heads V", v, (v_flat,), kind="reshape")
        if cfg.rope:
            cos, sin = F.rope_tables(np.arange(start, start + T), cfg.rope_dims, cfg.rope_theta, x.dtype,
                                     cfg.rope_scaling)  # (T, r/2) each
            q_rot = ops.rotate_pairs(q, cos, sin, cfg.rope_layout)  # (B, h, T, d_h)
            rec("q_rope", "RoPE on Q", q_rot, (q,), kind="rope")
            k_rot = ops.rotate_pairs(k, cos, sin, cfg.rope_layout)  # (B, h_kv, T, d_h)
            rec("k_rope", "RoPE on K", k_rot, (k,), kind="rope")
            q, k = q_rot, k_rot
        if cache is not None:
            k, v = cache.append(k, v)  # (B, h_kv, T_seen, d_h)
        saved: dict[str, Any] | None = {"x": x, "chosen": chosen, "weights": weights} if tape is not None else None
        heads = self._attend(q, k, v, start, rec, drop, saved)  # (B, h, T, d_h)
        per_slot = heads.reshape(B, h_kv, k_a, T, d_h).transpose(0, 3, 2, 1, 4).reshape(B, T, k_a, h_kv * d_h)
        rec("attn_concat", "combine heads per expert", per_slot, (heads,), kind="reshape")
        outs = MOA.expert_outputs(per_slot, chosen, p, m.n_experts)  # (B, T, k_a, d)
        rec("moa_experts_out", MOA.experts_out_label(cfg), outs, (per_slot, p["attn_experts.0.w_o"]), kind="linear",
            params=tuple(f"attn_experts.{e}.w_o" for e in range(m.n_experts)))
        summed = np.einsum("btk,btkd->btd", weights, outs)  # (B, T, d)
        rec("moa_sum", MOA.sum_label(cfg), summed, (weights, outs), kind="combine")
        out = summed + p["moa_bias"]  # (B, T, d)
        rec("attn_out", MOA.OUT_LABEL, out, (summed,), kind="add", params=("moa_bias",))
        if saved is not None:
            tape.keep("attn", **saved, per_slot=per_slot, outs=outs)
        return out

    def backward(self, d_out: Array, tape: Tape) -> Array:
        """d_out (B, T, d) → dx (B, T, d): the bias; each slot's routing weight (d_out · its expert's output) back
        through the softmax of the k chosen logits to the router (none through the choice, as torch's top-k); each
        slot's W_o; attention; RoPE rotated back; each slot's W_q and the shared W_k, W_v."""
        cfg, p, ops, m = self.cfg, self.p, self.ops, MOA.mixture_of(self.cfg)
        h, h_kv, d_h, k_a = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, m.top_k
        saved = tape.take("attn")
        x, chosen, weights, per_slot, outs = (saved[key] for key in ("x", "chosen", "weights", "per_slot", "outs"))
        B, T, d = x.shape
        tape.add("moa_bias", F.sum_rows(d_out))
        d_weights = np.einsum("btd,btkd->btk", d_out, outs)  # (B, T, k_a)
        d_outs = weights[..., None] * d_out[:, :, None, :]  # (B, T, k_a, d)
        d_slot = MOA.experts_backward(per_slot, d_outs, chosen, p, "w_o", m.n_experts, tape)  # (B, T, k_a, h_kv·d_h)
        d_heads = d_slot.reshape(B, T, k_a, h_kv, d_h).transpose(0, 3, 2, 1, 4).reshape(B, h, T, d_h)
        dq, dk, dv = self._attend_backward(saved, d_heads, tape)  # (B, h, T, d_h), (B, h_kv, T, d_h) twice
        if cfg.rope:
            cos, sin = F.rope_tables(np.arange(T), cfg.rope_dims, cfg.rope_theta, x.dtype, cfg.rope_scaling)
            dq = ops.rotate_pairs_backward(dq, cos, sin, cfg.rope_layout)  # (B, h, T, d_h)
            dk = ops.rotate_pairs_backward(dk, cos, sin, cfg.rope_layout)  # (B, h_kv, T, d_h)
        d_q_slots = dq.reshape(B, h_kv, k_a, T, d_h).transpose(0, 3, 2, 1, 4).reshape(B, T, k_a, h_kv * d_h)
        x_slots = np.broadcast_to(x[:, :, None, :], (B, T, k_a, d))  # each slot's input: the token itself
        dx = MOA.experts_backward(x_slots, d_q_slots, chosen, p, "w_q", m.n_experts, tape).sum(axis=2)  # (B, T, d)
        dk_flat, dv_flat = ops.combine_heads(dk), ops.combine_heads(dv)  # (B, T, h_kv·d_h) each
        tape.add("w_k", ops.weight_grad(x, dk_flat))
        tape.add("w_v", ops.weight_grad(x, dv_flat))
        dx = dx + dk_flat @ p["w_k"].T + dv_flat @ p["w_v"].T
        d_chosen = ops.softmax_backward(weights, d_weights).reshape(B * T, k_a)  # (N, k_a)
        d_logits = np.zeros((B * T, m.n_experts), dtype=d_chosen.dtype)  # (N, E_a)
        np.put_along_axis(d_logits, chosen.reshape(B * T, k_a), d_chosen, axis=-1)
        tape.add("moa_router", ops.weight_grad(x, d_logits))
        return dx + (d_logits @ p["moa_router"].T).reshape(B, T, d)


def _row_contiguous(a: Array) -> bool:
    """Whether each head's (T, d_h) rows of `a` lie in one run of memory (as in a K/V cache's buffer)."""
    return a.strides[-1] == a.itemsize and a.strides[-2] == a.shape[-1] * a.itemsize


def _rows_contiguous(a: Array) -> Array:
    """`a` with each head's (T, d_h) rows in one run of memory: as it is when they already are (a K/V
    cache's buffer), else copied (rows strided through the QKV output)."""
    return a if _row_contiguous(a) else np.ascontiguousarray(a)


def mlp_branches(cfg: BlockConfig, p: Mapping[str, Array] | None = None
                 ) -> tuple[Callable[[Array], Array], Callable[[Array], Array]]:
    """(the activation of x·W_gate + b (x·W_up + b in a plain MLP), what a gated MLP does to the up branch before
    the product):
    the activation and the identity, or gpt-oss's clamped SwiGLU, min(g, c)·σ(α·min(g, c)) · (clip(u, ±c) + 1);
    xIELU reads its layer's two scalars from `p`."""
    if cfg.activation == "xielu":
        assert p is not None
        scalars = (p["act_alpha_p"], p["act_alpha_n"], p["act_beta"], p["act_eps"])
        return (lambda x: F.xielu(x, *scalars)), lambda u: u
    if cfg.activation == "clamped_swiglu":
        alpha, limit = cfg.swiglu_alpha, cfg.swiglu_limit
        return (lambda g: F.clamped_swiglu_gate(g, alpha, limit)), (lambda u: F.clamped_swiglu_up(u, limit))
    act = F.ACTIVATION_KERNELS[cfg.activation][0]
    if cfg.ngpt is not None:  # nGPT: act(gate ⊙ s_uv_gate·m) ⊙ (up ⊙ s_uv_up·m), per channel
        assert p is not None
        s_gate, s_up = p["s_uv_gate"] * cfg.ngpt.mlp, p["s_uv_up"] * cfg.ngpt.mlp  # (d_ff,) each
        return (lambda x: act(x * s_gate.astype(x.dtype, copy=False))), \
            (lambda u: u * s_up.astype(u.dtype, copy=False))
    g = cfg.mlp_multipliers[0]
    if g != 1.0:  # Falcon-H1: act(m_g·pre)
        return (lambda x: act(x * np.asarray(g, dtype=x.dtype))), lambda u: u
    return act, lambda u: u


def mlp_branch_grads(cfg: BlockConfig, p: Mapping[str, Array] | None = None, scalars: dict[str, float] | None = None
                     ) -> tuple[Callable[[Array, Array], Array], Callable[[Array, Array], Array]]:
    """The backward of each of `mlp_branches`: (x, dy) → dx, the activation's and the up branch's; xIELU's adds
    its scalars' gradients into `scalars` (act_alpha_p, act_alpha_n) at each call."""
    if cfg.activation == "xielu":
        assert p is not None and scalars is not None
        stored = (p["act_alpha_p"], p["act_alpha_n"], p["act_beta"], p["act_eps"])

        def xielu_grad(x: Array, dy: Array) -> Array:
            dx, d_p, d_n = F.xielu_backward(x, dy, *stored)
            scalars["act_alpha_p"] = scalars.get("act_alpha_p", 0.0) + d_p
            scalars["act_alpha_n"] = scalars.get("act_alpha_n", 0.0) + d_n
            return dx
        return xielu_grad, lambda u, dy: dy
    if cfg.activation == "clamped_swiglu":
        alpha, limit = cfg.swiglu_alpha, cfg.swiglu_limit
        return ((lambda g, dy: F.clamped_swiglu_gate_backward(g, dy, alpha, limit)),
                (lambda u, dy: F.clamped_swiglu_up_backward(u, dy, limit)))
    grad = F.ACTIVATION_KERNELS[cfg.activation][1]
    g = cfg.mlp_multipliers[0]
    if g != 1.0:  # d act(m_g·x)/dx = m_g·act'(m_g·x)
        return (lambda x, dy: grad(x * np.asarray(g, dtype=x.dtype), dy) * np.asarray(g, dtype=x.dtype)), \
            lambda u, dy: dy
    return grad, lambda u, dy: dy


def mlp_sub_norm(cfg: BlockConfig, p: Mapping[str, Array], name: str = "") -> Callable[[Array], Array] | None:
    """BitNet's norm of the MLP's hidden before W_down, (…, d_ff) → (…, d_ff), row by row (None without
    block.sub_norms)."""
    if not cfg.sub_norms:
        return None
    fn = F.layer_norm if cfg.norm == "layernorm" else l2_norm_of(F.rms_norm) if cfg.norm == "l2norm" else F.rms_norm
    gamma, beta = p.get(name + "mlp_sub_norm_gamma"), p.get(name + "mlp_sub_norm_beta")
    return lambda a: fn(a, norm_scale(gamma, cfg.norm_unit_offset), beta, cfg.norm_eps)


def mlp_roles(cfg: BlockConfig) -> tuple[str, ...]:
    """The MLP's matrices by role: gate, up, down (gated), or up, down (plain)."""
    return ("gate", "up", "down") if cfg.gated else ("up", "down")


def activated(cfg: BlockConfig) -> str:
    """The role of the matrix whose output the activation reads: gate (gated), or up (plain)."""
    return "gate" if cfg.gated else "up"


def mlp_stage(cfg: BlockConfig, stage: str) -> str:
    """The trace's name for an MLP's matrix product `stage` (pre, up, out), by the matrix's role."""
    return {"pre": f"{activated(cfg)} (expand)", "up": "up (gate partner)", "out": "down (contract)"}[stage]


@dataclass
class MLP:
    """Expand, activate, contract: act(x W_up + b_up) W_down + b_down, or gated
    (act(x W_gate + b_gate) ⊙ (x W_up + b_up)) W_down + b_down."""

    cfg: BlockConfig
    p: Mapping[str, Array]

    def __call__(self, x: Array, rec: Record = _ignore, tape: Tape | None = None) -> Array:
        """x (B, T, d) → (B, T, d). Untraced, the rows go through in tiles of ROW_TILE shared among
        the cores: the same arithmetic per row, without ever holding the (B, T, d_ff) activation; traced or
        taped, whole."""
        if self.cfg.activation_sparsity:  # Gemma 3n's sparse gate: whole rows (each row's mean and σ)
            return self._sparse(x, rec)
        down = self.cfg.mlp_multipliers[1]
        if down != 1.0:  # Falcon-H1: the MLP's output times m_d
            out = self._unscaled(x, rec, tape)
            return out * np.asarray(down, dtype=out.dtype)
        return self._unscaled(x, rec, tape)

    def _unscaled(self, x: Array, rec: Record = _ignore, tape: Tape | None = None) -> Array:
        if rec is not _ignore or tape is not None:
            return self._rows(x, rec, tape)
        d, d_ff = self.p["w_up"].shape
        return F.by_rows(self._fused_rows, x, d, np.result_type(x, self.p["w_up"], self.p["w_down"]),
                         work=x.size * d_ff * (3 if self.cfg.gated else 2))

    def _sparse(self, x: Array, rec: Record = _ignore) -> Array:
        """Gemma 3n's gated MLP with its gaussian top-k: the gate pre-activation g (…, d_ff) becomes
        max(g − (mean(g) + σ(g)·Φ⁻¹(s)), 0) over each row (σ the population deviation, Φ⁻¹ the standard normal
        quantile of the sparsity s), then act(·) ⊙ up, · W_down."""
        cfg, p = self.cfg, self.p
        act, partner = mlp_branches(cfg, p)
        gate = F.linear(x, p["w_gate"], p.get("b_gate"))  # (…, d_ff)
        rec("mlp_pre", "MLP gate projection", gate, (x, p["w_gate"]), kind="linear", params=("w_gate", "b_gate"))
        z = np.asarray(NormalDist().inv_cdf(cfg.activation_sparsity), dtype=gate.dtype)
        cutoff = gate.mean(axis=-1, keepdims=True) + gate.std(axis=-1, keepdims=True) * z  # (…, 1)
        kept = np.maximum(gate - cutoff, 0)  # (…, d_ff)
        rec("mlp_sparse", f"gaussian top-k: keep what exceeds mean + σ·Φ⁻¹({cfg.activation_sparsity:g})", kept,
            (gate,), kind="clip")
        up = F.linear(x, p["w_up"], p.get("b_up"))  # (…, d_ff)
        rec("mlp_up", "MLP up projection", up, (x, p["w_up"]), kind="linear", params=("w_up", "b_up"))
        hidden = act(kept) * partner(up)  # (…, d_ff)
        rec("mlp_act", f"{cfg.activation}(gate) ⊙ up", hidden, (kept, up), kind=cfg.mlp_kind)
        out = F.linear(hidden, p["w_down"], p.get("b_down"))  # (…, d)
        rec("mlp_out", "MLP down projection", out, (hidden, p["w_down"]), kind="linear", params=("w_down", "b_down"))
        return out

    def _fused_rows(self, x: Array, out: Array) -> None:
        """One row tile x (r, d) of the untraced pass into out (r, d): `_rows`' arithmetic, with the
        biases, the activation and the gate applied in place a slab of rows at a time, so their
        passes over the (r, d_ff) activation stay in cache instead of streaming it through memory."""
        p, (act, partner), first = self.p, mlp_branches(self.cfg, self.p), activated(self.cfg)
        sub_norm = mlp_sub_norm(self.cfg, p)
        b_first, b_up = p.get("b_" + first), p.get("b_up")
        pre = x @ p["w_" + first]  # (r, d_ff)
        up = x @ p["w_up"] if self.cfg.gated else None  # (r, d_ff)
        for rows in F.slabs(pre):
            z = pre[rows]  # (s, d_ff), a view
            if b_first is not None:
                z += b_first
            a = act(z)
            if up is not None:
                partner_rows = up[rows]
                if b_up is not None:
                    partner_rows += b_up
                a *= partner(partner_rows)
            z[...] = a if sub_norm is None else sub_norm(a)  # BitNet: each row normalised before W_down
        np.matmul(pre, p["w_down"], out=out)  # (r, d)
        if "b_down" in p:
            out += p["b_down"]

    def _rows(self, x: Array, rec: Record = _ignore, tape: Tape | None = None) -> Array:
        saved: dict[str, Any] | None = {} if tape is not None else None
        out = mlp_rows(self.cfg, self.p, x, "", "mlp_", ("MLP", "activation"), rec, saved)
        if tape is not None:
            tape.keep("mlp", **saved)
        return out

    def backward(self, dy: Array, tape: Tape) -> Array:
        """dy (B, T, d) → dx (B, T, d), and the gradients of W_gate, W_up, W_down and their biases."""
        down = self.cfg.mlp_multipliers[1]
        return mlp_backward(self.cfg, self.p, "", tape.take("mlp"), dy * down if down != 1.0 else dy, tape)


def mlp_rows(cfg: BlockConfig, p: Mapping[str, Array], x: Array, name: str, key: str, labels: tuple[str, str],
             rec: Record = _ignore, saved: dict[str, Any] | None = None) -> Array:
    """An MLP on x (…, d), whole: the dense MLP's traced pass, each expert's rows, the shared expert. Its
    parameters are `name` + w_gate …, its recorded rows `key` + pre …, named after `labels` (the MLP's, its
    activation's). `saved`, given, receives what its backward reads: x, the pre-activation, the up branch."""
    (activation, partner), first = mlp_branches(cfg, p), activated(cfg)
    sub_norm = mlp_sub_norm(cfg, p, name)

    def linear(a: Array, role: str) -> Array:
        return F.linear(a, p[name + "w_" + role], p.get(name + "b_" + role))

    pre = linear(x, first)  # (…, d_ff)
    rec(key + "pre", f"{labels[0]} {mlp_stage(cfg, 'pre')}", pre, (x, p[name + "w_" + first]), kind="linear",
        params=(name + "w_" + first, name + "b_" + first))
    if saved is not None and rec is _ignore:  # a pass for gradients: the activation a chunk of rows at a time
        up = linear(x, "up") if cfg.gated else None  # (…, d_ff)
        saved.update(x=x, pre=pre, up=up)
        flat_pre, flat_up = pre.reshape(-1, pre.shape[-1]), up.reshape(-1, up.shape[-1]) if up is not None else None
        out = np.empty((flat_pre.shape[0], x.shape[-1]), dtype=np.result_type(pre, p[name + "w_down"]))
        for lo in range(0, flat_pre.shape[0], BACKWARD_ROWS):
            rows = slice(lo, lo + BACKWARD_ROWS)
            act = activation(flat_pre[rows])  # (r, d_ff); the identity's is pre itself: never changed in place
            if flat_up is not None:
                act = act * partner(flat_up[rows])
            out[rows] = linear(act if sub_norm is None else sub_norm(act), "down")
        return out.reshape(x.shape)
    act = activation(pre)  # (…, d_ff)
    inputs: tuple[Array, ...] = (pre,)
    up = None
    if cfg.gated:
        up = linear(x, "up")  # (…, d_ff)
        rec(key + "up", f"{labels[0]} {mlp_stage(cfg, 'up')}", up, (x, p[name + "w_up"]), kind="linear",
            params=(name + "w_up", name + "b_up"))
        act = act * partner(up)
        inputs = (pre, up)  # act(gate) ⊙ up reads both
    rec(key + "act", f"{labels[1]} ({cfg.mlp_kind})", act, inputs, kind=cfg.mlp_kind,
        params=tuple(name + f"act_{scalar}" for scalar in function_of(cfg.activation).params))
    if sub_norm is not None:  # BitNet: the hidden normalised over its d_ff features before W_down
        normed = sub_norm(act)  # (…, d_ff)
        rec(key + "sub_norm", "norm of the MLP's hidden (ffn_sub_norm)", normed, (act,), kind=cfg.norm,
            params=(name + "mlp_sub_norm_gamma", name + "mlp_sub_norm_beta"))
        act = normed
    out = linear(act, "down")  # (…, d)
    rec(key + "out", f"{labels[0]} {mlp_stage(cfg, 'out')}", out, (act, p[name + "w_down"]), kind="linear",
        params=(name + "w_down", name + "b_down"))
    if saved is not None:
        saved.update(x=x, pre=pre, up=up)
    return out


# rows of an MLP's backward at a time: its d_ff-wide temporaries stay small (at d_ff = 4096 in float32, 4 MiB
# each), its GEMMs still large enough for BLAS's full rate
BACKWARD_ROWS = 256


def mlp_backward(cfg: BlockConfig, p: Mapping[str, Array], name: str, saved: Mapping[str, Any], dy: Array,
                 tape: Tape) -> Array:
    """An MLP's backward from what `mlp_rows` saved, BACKWARD_ROWS rows at a time: the activation recomputed
    from the pre-activation, dW_down = actᵀ·dy, d_act = dy·W_downᵀ, then through the activation (and the
    product with the up branch), dW_gate/dW_up = xᵀ·d, dx = d·Wᵀ. Each weight's gradient is summed over the
    chunks through one scratch buffer of its size. Returns dx, shaped as x."""
    scalars: dict[str, float] = {}  # the activation's own parameters' gradients (xIELU's), summed over the chunks
    (activation, partner), (activation_grad, partner_grad), first = mlp_branches(cfg, p), \
        mlp_branch_grads(cfg, p, scalars), activated(cfg)
    x, pre, up = saved["x"], saved["pre"], saved["up"]
    shape = x.shape
    x, pre, dy = x.reshape(-1, shape[-1]), pre.reshape(-1, pre.shape[-1]), dy.reshape(-1, dy.shape[-1])
    up = up.reshape(pre.shape) if up is not None else None
    w_first, w_down = p[name + "w_" + first], p[name + "w_down"]
    dtype = np.result_type(x, dy, w_first)
    grads = {role: np.zeros(p[name + "w_" + role].shape, dtype=dtype) for role in mlp_roles(cfg)}
    scratch = {role: np.empty_like(g) for role, g in grads.items()}
    biases = {role: np.zeros(p[name + "b_" + role].shape, dtype=dtype) for role in mlp_roles(cfg)
              if name + "b_" + role in p}
    dx = np.empty(x.shape, dtype=dtype)
    sub_norm = mlp_sub_norm(cfg, p, name)  # BitNet's norm of the hidden before W_down, recomputed per chunk
    sub_norm_grad = F.layer_norm_backward if cfg.norm == "layernorm" else F.rms_norm_backward
    sub_scale = norm_scale(p.get(name + "mlp_sub_norm_gamma"), cfg.norm_unit_offset)
    sub_grads = {part: np.zeros((pre.shape[-1],), dtype=dtype) for part in ("gamma", "beta")}

    def add_weight_grad(role: str, a: Array, d: Array) -> None:  # grads[role] += aᵀ·d
        np.matmul(a.T, d, out=scratch[role])
        grads[role] += scratch[role]

    for lo in range(0, x.shape[0], BACKWARD_ROWS):
        rows = slice(lo, lo + BACKWARD_ROWS)
        a = activation(pre[rows])  # (r, d_ff)
        u = partner(up[rows]) if up is not None else None
        hidden = a * u if u is not None else a  # (r, d_ff)
        add_weight_grad("down", hidden if sub_norm is None else sub_norm(hidden), dy[rows])  # the contraction's input
        d_h = dy[rows] @ w_down.T  # (r, d_ff)
        if sub_norm is not None:  # back through BitNet's norm of the hidden: its scale's (and shift's) gradients
            if name + "mlp_sub_norm_beta" in p:
                sub_grads["beta"] += d_h.sum(axis=0)
            d_h, d_scale = sub_norm_grad(hidden, sub_scale, cfg.norm_eps, d_h)  # (r, d_ff) each
            if name + "mlp_sub_norm_gamma" in p:
                sub_grads["gamma"] += d_scale.sum(axis=0)
        if "down" in biases:
            biases["down"] += dy[rows].sum(axis=0)
        if up is not None:
            d_up = partner_grad(up[rows], d_h * a)  # (r, d_ff)
            add_weight_grad("up", x[rows], d_up)
            np.matmul(d_up, p[name + "w_up"].T, out=dx[rows])
            if "up" in biases:
                biases["up"] += d_up.sum(axis=0)
            del d_up
            d_h *= u
        d_pre = activation_grad(pre[rows], d_h)  # (r, d_ff)
        add_weight_grad(first, x[rows], d_pre)
        if up is not None:
            dx[rows] += d_pre @ w_first.T
        else:
            np.matmul(d_pre, w_first.T, out=dx[rows])
        if first in biases:
            biases[first] += d_pre.sum(axis=0)
    for role, g in grads.items():
        tape.add(name + "w_" + role, g)
    for role, g in biases.items():
        tape.add(name + "b_" + role, g)
    for key, g in scalars.items():
        tape.add(name + key, np.full((1,), g, dtype=dtype))
    for part, g in sub_grads.items():
        if sub_norm is not None and name + f"mlp_sub_norm_{part}" in p:
            tape.add(name + f"mlp_sub_norm_{part}", g)
    return dx.reshape(shape)


def experts_label(stage: str, moe: Any, tokens: int) -> str:
    """The trace's name for one stage of all routed experts together (analytic rows, merged rows):
    the routed rows in all are exactly tokens·k; per expert only their expectation is known."""
    rows = tokens * moe.top_k
    return (f"experts {stage} (all {moe.n_experts}: {rows:,} routed rows = B·T·k; "
            f"expected B·T·k/E = {rows / moe.n_experts:.3g} per expert)")


def moe_sum_label(moe: Any) -> str:
    """The trace's name for the routed experts' combination: their outputs weighted, or (scale_input) summed."""
    if moe.scale_input:
        return f"sum of the {moe.top_k} routed experts' outputs (each read its input × its weight)"
    return f"weighted sum of the {moe.top_k} routed experts' outputs"


def routing_label(moe: Any) -> str:
    """The trace's name for the routing weights, with what is done to them."""
    return ("routing weights" + (" (softmax of the k logits)" if moe.order == "topk_softmax" else "")
            + (" (sparsemixer: each stage's softmax over the experts near its best)" if moe.order == "sparsemixer"
               else "")
            + (" (renormalised)" if moe.renormalize else "")
            + (f" × {moe.routed_scaling:g}" if moe.routed_scaling != 1.0 else ""))


def load_label(moe: Any, tokens: int, load: Array | None = None) -> str:
    """The trace's name for the tokens each expert received: the counts of a real pass (the first 16),
    or in analytic rows their expectation B·T·k/E."""
    if load is None:
        return f"tokens per expert (load; expected B·T·k/E = {tokens * moe.top_k / moe.n_experts:.3g} each)"
    shown = ", ".join(str(n) for n in load[:16]) + (", …" if len(load) > 16 else "")
    return f"tokens per expert (load): {shown}"


@dataclass
class MixtureOfExperts:
    """Router → top-k routed experts per token (each a gated or plain MLP, with biases if block.bias.mlp), their
    outputs weighted and summed; plus an optional shared expert (sigmoid-gated or not).

    Each expert runs only on the rows routed to it (rows sorted by expert once, then one GEMM per
    expert and matrix). Routing follows `blockcli.config.MoE`; ties in top-k go to the lower index.
    """

    cfg: BlockConfig
    p: Mapping[str, Array]
    ops: Ops = STANDARD_OPS

    def route(self, x: Array, rec: Record = _ignore, saved: dict[str, Any] | None = None) -> tuple[Array, Array]:
        """(chosen experts (B, T, k), their weights (B, T, k)) for x (B, T, d). `saved`, given, receives what
        the routing's backward reads: the probabilities (or the chosen logits' softmax) and the choice."""
        moe, p, ops = self.cfg.moe, self.p, self.ops
        assert moe is not None
        B, T, d = x.shape
        N, E, k = B * T, moe.n_experts, moe.top_k
        if moe.router_norm:  # Gemma 4: x/rms(x) ⊙ s · d^−½, then the router
            if saved is not None:
                raise InputError(GEMMA4_NO_BACKWARD.format(field="moe.router_norm"))
            normed = self.ops.rms_norm(x, p["router_scale"], None, self.cfg.norm_eps) * np.asarray(
                d ** -0.5, dtype=x.dtype)  # (B, T, d)
            rec("router_in", "router input: RMSNorm × scale × d^-1/2", normed, (x,), kind="rmsnorm",
                params=("router_scale",))
            x = normed
        logits = x.reshape(N, d) @ p["router"]  # (N, E)
        if moe.logit_bias:  # gpt-oss: the router is a linear layer with a bias
            logits += p["b_router"]
        logits3 = logits.reshape(B, T, E)
        rec("router_logits", "router logits", logits3, (x, p["router"]), kind="linear", params=("router", "b_router"))
        if moe.order == "topk_softmax":  # the k largest logits, then a softmax over those k
            chosen = ops.top_k(logits, k)  # (N, k)
            weights = ops.router_probabilities(np.take_along_axis(logits, chosen, axis=-1), "softmax")  # (N, k)
            scores3 = logits3
            probabilities = weights
        elif moe.order == "sparsemixer":  # PhiMoE: two stages, each a softmax over the experts near its best
            chosen, weights, probabilities = F.sparsemixer(logits, moe.sparsemixer_eps)  # (N, 2) twice, (2, N, E)
            scores3 = probabilities[0].reshape(B, T, E)
            rec("router_scores", f"router scores ({moe.scoring} over experts)", scores3, (logits3,), kind=moe.scoring)
        else:
            scores = ops.router_probabilities(logits, moe.scoring)  # (N, E)
            scores3 = scores.reshape(B, T, E)
            rec("router_scores", f"router scores ({moe.scoring} over experts)", scores3, (logits3,), kind=moe.scoring)
            choice = scores
            if moe.selection_bias:  # for choosing only: the weights are the unbiased scores
                # on the scores (DeepSeek-V3), or on the logits before the sigmoid (Kolibri-1)
                choice = (logits if moe.selection_on == "logits" else scores) + p["router_bias"]  # (N, E)
            if moe.n_groups > 1:  # only the experts of the top_groups best groups may be chosen
                grouped = choice.reshape(N, moe.n_groups, E // moe.n_groups)  # (N, G, E/G)
                group_scores = (grouped.max(axis=-1) if moe.group_score == "max"
                                else np.sort(grouped, axis=-1)[..., -2:].sum(axis=-1))  # (N, G)
                allowed = np.zeros((N, moe.n_groups), dtype=bool)
                np.put_along_axis(allowed, ops.top_k(group_scores, moe.top_groups), True, axis=-1)
                choice = np.where(np.repeat(allowed, E // moe.n_groups, axis=-1), choice, -np.inf)  # (N, E)
            chosen = ops.top_k(choice, k)  # (N, k)
            weights = np.take_along_axis(scores, chosen, axis=-1)  # (N, k)
            probabilities = scores
            if moe.renormalize:
                weights = ops.renormalize(weights, moe.renormalize_eps)
        if moe.routed_scaling != 1.0:
            weights = weights * np.asarray(moe.routed_scaling, dtype=weights.dtype)
        if moe.expert_scale:  # Gemma 4: each chosen expert's weight times its learned scale
            weights = weights * p["expert_scale"][chosen]  # (N, k)
        chosen3, weights3 = chosen.reshape(B, T, -1), weights.reshape(B, T, -1)  # (B, T, k) each
        rec("router_choice", f"top-{k} experts per token", chosen3, (scores3,), kind="topk")
        rec("router_weights", routing_label(moe), weights3, (scores3,), kind="gather")
        if saved is not None:  # the raw logits too: the load-balancing loss softmaxes them over every expert
            saved.update(probabilities=probabilities, chosen=chosen, logits=logits)
        return chosen3, weights3

    def route_backward(self, x: Array, saved: Mapping[str, Any], d_weights: Array, tape: Tape) -> Array:
        """The routing's backward: d_weights (N, k) of the chosen experts' weights → dx (N, d) through the
        scaling, the renormalisation (w = s/Σs: ds = (dw − Σ dw·w)/Σs), the chosen scores (none flows
        through the choice itself, as torch's top-k passes none) and the softmax or sigmoid, to the
        router's logits; the router's weight and bias gradients added to the tape."""
        moe, p = self.cfg.moe, self.p
        assert moe is not None
        probabilities, chosen = saved["probabilities"], saved["chosen"]  # (N, E) or (N, k); (N, k)
        d_weights = d_weights * moe.routed_scaling
        if moe.order == "topk_softmax":  # the softmax of the k chosen logits
            d_logits = np.zeros((chosen.shape[0], moe.n_experts), dtype=d_weights.dtype)
            np.put_along_axis(d_logits, chosen, self.ops.softmax_backward(probabilities, d_weights), axis=-1)
        elif moe.order == "sparsemixer":  # each stage's masked softmax (2, N, E)
            d_logits = F.sparsemixer_backward(probabilities, chosen, d_weights)
        else:
            if moe.renormalize:
                raw = np.take_along_axis(probabilities, chosen, axis=-1)  # (N, k)
                total = raw.sum(axis=-1, keepdims=True) + moe.renormalize_eps
                d_weights = (d_weights - np.sum(d_weights * raw / total, axis=-1, keepdims=True)) / total
            d_scores = np.zeros_like(probabilities)  # (N, E)
            np.put_along_axis(d_scores, chosen, d_weights, axis=-1)
            d_logits = (self.ops.softmax_backward(probabilities, d_scores) if moe.scoring == "softmax"
                        else d_scores * probabilities * (1.0 - probabilities))  # σ' = σ·(1 − σ)
        if "aux_grad" in saved:  # the load-balancing loss's share (Model.aux_loss)
            d_logits = d_logits + saved["aux_grad"]
        flat = x.reshape(-1, x.shape[-1])
        tape.add("router", self.ops.weight_grad(flat, d_logits))
        if moe.logit_bias:
            tape.add("b_router", d_logits.sum(axis=0))
        return d_logits @ p["router"].T  # (N, d)

    def out_norm(self) -> Norm:
        """A.X-K1's norm of the mixture's output (block.moe.out_norm): the block's kind, eps and scale."""
        cfg = self.cfg
        return Norm(cfg.norm, self.p.get("moe_norm_gamma"), self.p.get("moe_norm_beta"), cfg.norm_eps, self.ops,
                    cfg.norm_unit_offset, name="moe_norm")

    def __call__(self, x: Array, rec: Record = _ignore, tape: Tape | None = None, router_input: Array | None = None
                 ) -> Array:
        """x (B, T, d) → (B, T, d). A tape keeps x, the routing, each expert's rows, saved MLP and output, and
        the shared expert's. `router_input` (B, T, d): what the router reads, when not x (Gemma 4: the residual
        stream, the experts its LN2b). With moe.out_norm the sum goes through a norm (A.X-K1)."""
        assert self.cfg.moe is not None
        if not self.cfg.moe.out_norm:
            return self._mixture(x, rec, tape, router_input, "mlp_out")
        total = self._mixture(x, rec, tape, router_input, "moe_sum")  # (B, T, d)
        normed = self.out_norm()(total, tape)  # (B, T, d); a tape keeps the sum
        rec("mlp_out", f"{'LayerNorm' if self.cfg.norm == 'layernorm' else 'RMSNorm'} of the mixture's output "
                       f"(moe_norm)", normed, (total,), kind=self.cfg.norm, params=("moe_norm_gamma", "moe_norm_beta"))
        return normed

    def _mixture(self, x: Array, rec: Record, tape: Tape | None, router_input: Array | None, last: str) -> Array:
        """The routed (and shared) experts' sum (B, T, d), recorded as `last`."""
        moe, p = self.cfg.moe, self.p
        assert moe is not None
        B, T, d = x.shape
        flat = x.reshape(B * T, d)  # (N, d)
        saved: dict[str, Any] | None = {"x": x, "experts": {}} if tape is not None else None
        chosen3, weights3 = self.route(x if router_input is None else router_input, rec, saved)  # (B, T, k) each
        chosen, weights = chosen3.reshape(B * T, -1), weights3.reshape(-1)  # (N, k), (N·k,)
        traced = rec is not _ignore
        order = np.argsort(chosen, axis=None, kind="stable")  # (N·k,): routed slots sorted by expert
        load = np.bincount(chosen.ravel(), minlength=moe.n_experts)  # (E,) rows per expert
        rec("expert_load", load_label(moe, B * T, load), load, (chosen3,), kind="count")
        out = np.zeros((B * T, d), dtype=np.result_type(x, p["router"]))  # (N, d)
        ends = np.cumsum(load)
        outs = []
        for e in range(moe.n_experts):
            if not load[e] and not traced:
                continue  # an expert no token chose costs nothing
            slots = order[ends[e] - load[e]:ends[e]]  # (n_e,) positions in the flattened (N, k) choice
            rows = slots // chosen.shape[1]  # (n_e,) the tokens routed to expert e
            key = f"experts.{e}."
            xe = flat[rows]  # (n_e, d)
            rec(key + "in", f"expert {e}: gather its {load[e]} rows", xe, (x,), kind="gather")
            if moe.scale_input:  # Llama 4: the expert reads its rows times their routing weights
                gathered, xe = xe, weights[slots, None] * xe  # (n_e, d) each
                rec(key + "scaled_in", f"expert {e}: its rows × their routing weights", xe, (gathered, weights3),
                    kind="scale")
            kept: dict[str, Any] | None = {} if saved is not None else None
            ye = mlp_rows(self.cfg, p, xe, key, key, (f"expert {e}", f"expert {e} activation"), rec, kept)  # (n_e, d)
            if saved is not None:
                saved["experts"][e] = dict(kept, rows=rows, slots=slots, out=ye)
            outs.append(ye)
            # each token once per expert: no repeated rows
            out[rows] += ye if moe.scale_input else weights[slots, None] * ye
        routed = out.reshape(B, T, d)
        label = moe_sum_label(moe)
        if moe.out_bias:  # JetMoE: the mixture's one bias after the weighted sum (no shared expert beside it)
            rec("moe_routed", label, routed, (weights3, *outs), kind="combine")
            biased = routed + p["moe_bias"]  # (B, T, d)
            rec("mlp_out", "+ the mixture's output bias (moe_bias)", biased, (routed,), kind="add", params=("moe_bias",))
            if tape is not None:
                tape.keep("mlp", **saved, weights=weights)
            return biased
        if not moe.d_shared:
            rec(last, label, routed, (weights3, *outs), kind="combine")
            if tape is not None:
                tape.keep("mlp", **saved, weights=weights)
            return routed
        rec("moe_routed", label, routed, (weights3, *outs), kind="combine")
        kept = {} if saved is not None else None
        shared = mlp_rows(self.cfg, p, x, "shared_", "shared_", ("shared expert", "shared expert activation"), rec,
                          kept)  # (B, T, d)
        if saved is not None:
            saved["shared"] = dict(kept, out=shared)
        if moe.shared_gate:
            gate = x @ p["shared_gate"]  # (B, T, 1)
            rec("shared_gate", "shared expert gate logit", gate, (x, p["shared_gate"]), kind="linear",
                params=("shared_gate",))
            gated = F.sigmoid(gate) * shared  # (B, T, d)
            rec("shared_gated", "shared expert × sigmoid(gate)", gated, (gate, shared), kind="gate")
            if saved is not None:
                saved["shared"]["gate"] = gate
            shared = gated
        total = self.ops.add_shared(routed, shared)  # (B, T, d)
        rec(last, "routed + shared experts", total, (routed, shared), kind="add")
        if tape is not None:
            tape.keep("mlp", **saved, weights=weights)
        return total

    def backward(self, d_out: Array, tape: Tape) -> Array:
        """d_out (B, T, d) → dx (B, T, d): each expert's rows back through its MLP, scaled by their routing
        weights, the weights' own gradient (d_out · the expert's output) back through the router, and the
        shared expert (and its gate)."""
        moe, p = self.cfg.moe, self.p
        assert moe is not None
        if moe.out_norm:  # A.X-K1: back through the norm of the sum first (its scale's gradient on the tape)
            d_out = self.out_norm().backward(d_out, tape)  # (B, T, d)
        saved = tape.take("mlp")
        x = saved["x"]
        B, T, d = x.shape
        d_flat = d_out.reshape(B * T, d)  # (N, d)
        if moe.out_bias:  # out = routed + b: b's gradient is d_out summed over the tokens
            tape.add("moe_bias", d_flat.sum(axis=0))
        weights = saved["weights"]  # (N·k,)
        d_weights = np.zeros_like(weights)
        dx = np.zeros((B * T, d), dtype=np.result_type(x, d_out))
        for e, kept in saved["experts"].items():
            rows, slots = kept["rows"], kept["slots"]
            if moe.scale_input:  # y = MLP(w·x): d(w·x) from the MLP, then dw = Σ d(w·x)·x and dx = w·d(w·x)
                d_in = mlp_backward(self.cfg, p, f"experts.{e}.", kept, d_flat[rows], tape)  # (n_e, d)
                d_weights[slots] = np.sum(d_in * x.reshape(B * T, d)[rows], axis=-1)
                dx[rows] += weights[slots, None] * d_in
                continue
            d_weights[slots] = np.sum(d_flat[rows] * kept["out"], axis=-1)
            dx[rows] += mlp_backward(self.cfg, p, f"experts.{e}.", kept, weights[slots, None] * d_flat[rows], tape)
        dx += self.route_backward(x, saved, d_weights.reshape(B * T, -1), tape)
        if moe.d_shared:
            kept = saved["shared"]
            d_shared = d_out
            if moe.shared_gate:  # shared·σ(g): dg = Σ d_out·shared · σ(1 − σ)
                gate = F.sigmoid(kept["gate"])  # (B, T, 1)
                d_gate = np.sum(d_out * kept["out"], axis=-1, keepdims=True) * gate * (1.0 - gate)
                tape.add("shared_gate", self.ops.weight_grad(x, d_gate))
                dx += (d_gate @ p["shared_gate"].T).reshape(B * T, d)
                d_shared = d_out * gate
            dx += mlp_backward(self.cfg, p, "shared_", kept, d_shared, tape).reshape(B * T, d)
        return dx.reshape(B, T, d)

@dataclass
class ParallelCache:
    """A layer of two mixers side by side (block.parts hybrid): attention's K/V and the Mamba-2 state."""

    kv: KVCache = field(default_factory=KVCache)
    ssm: MambaCache = field(default_factory=MambaCache)

    @property
    def length(self) -> int:
        return self.kv.length


class ParallelMixer:
    """Falcon-H1's token mixer: attention and a Mamba-2 mixer both reading LN1's output u (B, T, d),
    out = m_ssm·Mamba2(u) + m_out·Attention(m_in·u), each multiplier as block.mamba.out_multiplier and
    block.attention_in_multiplier / attention_out_multiplier say. Its cache is a ParallelCache."""

    def __init__(self, cfg: BlockConfig, p: dict[str, Array], ops: Ops = STANDARD_OPS, attention: str = "auto") -> None:
        assert cfg.mamba is not None and cfg.parts == "hybrid"
        self.cfg = cfg
        self.mamba = Mamba2Mixer(cfg, p, ops)
        self.attention = MultiHeadAttention(cfg.attention_part, p, ops, attention)

    def __call__(self, u: Array, rec: Record = _ignore, cache: ParallelCache | None = None, drop_probs: Any = None,
                 tape: Tape | None = None) -> Array:
        cfg, m = self.cfg, self.cfg.mamba
        assert m is not None

        def rec_ssm(key: str, *args: Any, **kwargs: Any) -> None:  # the Mamba-2 mixer's output row: ssm_out
            rec("ssm_out" if key == "attn_out" else key, *args, **kwargs)

        s = self.mamba(u, rec_ssm, cache.ssm if cache is not None else None, drop_probs, tape)  # (B, T, d)
        a_in = u * np.asarray(cfg.attention_in_multiplier, dtype=u.dtype) if cfg.attention_in_multiplier != 1.0 else u
        a = self.attention(a_in, rec, cache.kv if cache is not None else None, drop_probs, tape)  # (B, T, d)
        out = (s * np.asarray(m.out_multiplier, dtype=s.dtype) + a * np.asarray(cfg.attention_out_multiplier,
                                                                                   dtype=a.dtype))  # (B, T, d)
        rec("mixer_out", MIXER_SUM_LABEL, out, (s, a), kind="add")
        return out

    def backward(self, dy: Array, tape: Any) -> Array:
        return self.mamba.backward(dy, tape)


# a shared transformer block runs only before a Mamba-2 mixer (config checks it): its layers' gradients are refused as
# the mixer's are, in the same line
SHARED_NO_BACKWARD = MAMBA_NO_BACKWARD


class SharedTransformer:
    """A shared transformer block (config.SharedBlock, Zamba2's) as one layer uses it: the model's weights
    `weights` (shared.{index}.*, the same arrays at every use) with this use's LoRA adapters `own` added to the
    matrices they adapt (W + A·B: x·W + (x·A)·B, summed once per pass), and its output projection W_s.
    (h, x_0) (B, T, d) each → t (B, T, d) = MLP(LN_m(W_O·attn(LN_a([h | x_0]))))·W_s, no residual add inside."""

    def __init__(self, cfg: BlockConfig, weights: Mapping[str, Array], own: Mapping[str, Array],
                 ops: Ops = STANDARD_OPS, attention: str = "auto") -> None:
        s = cfg.shared
        assert s is not None
        self.cfg, self.own = cfg, own

        def adapted(name: str, key: str, adapter: str) -> Array:  # W + A·B, or W where this use has no adapter
            if f"adapter_{adapter}_b" not in own:
                return weights[key]
            a = own[f"adapter_{adapter}_a" if adapter in "qkv" else "adapter_mlp_a"]
            return weights[key] + a @ own[f"adapter_{adapter}_b"]  # (in, out)

        no_bias = Bias(qkv=False, out=False, mlp=s.bias, norm=False)
        # attention over [h | x_0]: 2d in, d out; the scores times (d_h/2)^(-1/2), as Zamba's attention scales them
        self.attn_cfg = BlockConfig(d_model=2 * cfg.d_model, n_heads=s.n_heads, n_kv_heads=s.n_kv_heads,
                                    head_dim=s.head_dim, d_ff=s.d_ff, norm="rmsnorm", norm_eps=cfg.norm_eps,
                                    bias=no_bias, rope=1.0 if s.rope else 0.0, rope_theta=s.rope_theta,
                                    attention_scale=(s.head_dim / 2) ** -0.5)
        self.attention = MultiHeadAttention(self.attn_cfg, {"w_q": adapted("q", "w_q", "q"),
                                                            "w_k": adapted("k", "w_k", "k"),
                                                            "w_v": adapted("v", "w_v", "v"),
                                                            "w_o": weights["w_o"]}, ops, attention)
        self.mlp_cfg = BlockConfig(d_model=cfg.d_model, n_heads=1, d_ff=s.d_ff, norm="rmsnorm", norm_eps=cfg.norm_eps,
                                   activation=s.activation, gated=True, bias=no_bias)
        mlp_p = {"w_gate": adapted("gate", "w_gate", "gate"), "w_up": adapted("up", "w_up", "up"),
                 "w_down": weights["w_down"]}
        mlp_p.update({k: weights[k] for k in ("b_gate", "b_up", "b_down") if k in weights})
        self.mlp = MLP(self.mlp_cfg, mlp_p)
        self.ln_attn = Norm("rmsnorm", weights["ln_attn_gamma"], None, cfg.norm_eps, ops, name="shared_ln_attn")
        self.ln_mlp = Norm("rmsnorm", weights["ln_mlp_gamma"], None, cfg.norm_eps, ops, name="shared_ln_mlp")

    def __call__(self, h: Array, x0: Array, rec: Record = _ignore, cache: KVCache | None = None) -> Array:
        rec = _within(rec, "shared")
        u = np.concatenate([h, x0], axis=-1)  # (B, T, 2d)
        rec("input", "[h | token embeddings]", u, (h, x0), kind="concat")
        n = self.ln_attn(u)  # (B, T, 2d)
        rec("ln_attn_out", "RMSNorm (2d)", n, (u,), kind="rmsnorm", params=("ln_attn_gamma",))
        a = self.attention(n, rec, cache)  # (B, T, d)
        m = self.ln_mlp(a)  # (B, T, d)
        rec("ln_mlp_out", "RMSNorm", m, (a,), kind="rmsnorm", params=("ln_mlp_gamma",))
        t = self.mlp(m, rec)  # (B, T, d)
        out = F.linear(t, self.own["w_shared_out"], None)  # (B, T, d)
        rec("ws_out", "shared block's output projection W_s", out, (t, self.own["w_shared_out"]), kind="linear",
            params=("w_shared_out",))
        return out


MIXER_SUM_LABEL = "m_ssm·SSM out + m_attn·attention out"


@dataclass
class DecoderBlock:
    """One decoder block: two norms, attention and MLP joined by residual additions."""

    cfg: BlockConfig
    params: dict[str, Array]
    ops: Ops = STANDARD_OPS
    attention: str = "auto"
    notes: list[str] = field(default_factory=list)  # what loading the weights had to say
    ln1: Norm = field(init=False)
    attn: MultiHeadAttention = field(init=False)
    ln2: Norm | None = field(init=False)  # None: parallel_shared, the MLP reads LN1's output
    mlp: MLP | MixtureOfExperts = field(init=False)
    ln1_post: Norm | None = field(init=False)  # sandwich only: the norm of the attention output
    ln2_post: Norm | None = field(init=False)  # sandwich only: the norm of the MLP output

    def __post_init__(self) -> None:
        self.params = p = dict(self.params)  # the block's own mapping: attention rewrites its QKV entries
        cfg = self.cfg
        declared = block_parameter_shapes(cfg)  # a block holds exactly these: what `count` reconciles with
        check_keys(p, declared, "block parameters")
        wrong = next((k for k, s in declared.items() if np.shape(p[k]) != s), None)
        if wrong is not None:
            raise InputError(f"block parameters: weight '{wrong}' has shape {np.shape(p[wrong])}, "
                             f"expected {declared[wrong]}")
        self.ln1 = Norm(cfg.norm, p.get("ln1_gamma"), p.get("ln1_beta"), cfg.norm_eps, self.ops, cfg.norm_unit_offset,
                        name="ln1")
        if cfg.parts == "hybrid":  # attention and Mamba-2 side by side (Falcon-H1)
            self.attn = ParallelMixer(cfg, p, self.ops, self.attention)
        elif cfg.parts != "mlp":  # the token mixer: Mamba-1 or -2, a short conv, Gated DeltaNet, latent or multi-head attention
            if cfg.mamba or cfg.short_conv:
                self.attn = (ShortConvMixer if cfg.short_conv else mixer_class(cfg))(cfg, p, self.ops)
            else:
                mixer = (LightningMixer if cfg.lightning else GatedDeltaNetMixer if cfg.linear_attention else
                         LatentAttention if cfg.mla else MixtureOfAttentionHeads if cfg.moa else MultiHeadAttention)
                self.attn = mixer(cfg, p, self.ops, self.attention)
        self.ln2 = (None if cfg.shared_norm else
                    Norm(cfg.norm, p.get("ln2_gamma"), p.get("ln2_beta"), cfg.norm_eps, self.ops, cfg.norm_unit_offset,
                         name="ln2"))
        if cfg.parts != "mixer":
            self.mlp = MixtureOfExperts(cfg, p, self.ops) if cfg.moe is not None else MLP(cfg, p)
        # Gemma 4: the experts beside a dense MLP (self.mlp then the dense one), and their three norms
        self.experts = None
        if cfg.moe is not None and cfg.moe.beside_dense:
            self.experts, self.mlp = self.mlp, MLP(cfg, p)
            self.ln2_post1, self.ln2b, self.ln2_post2 = (
                Norm(cfg.norm, p.get(f"{w}_gamma"), p.get(f"{w}_beta"), cfg.norm_eps, self.ops, cfg.norm_unit_offset,
                     name=w) for w in ("ln2_post1", "ln2b", "ln2_post2"))
        self.per_layer_in: Array | None = None  # Gemma 4: this layer's per-layer input (B, T, d_p), set by Model
        # Zamba2: the shared block this layer runs before its mixer, and the token embeddings (B, T, d) it reads,
        # both set by Model
        self.shared: SharedTransformer | None = None
        self.embeddings: Array | None = None
        # sandwich: the norms of the two branch outputs (None otherwise)
        self.ln1_post, self.ln2_post = ((Norm(cfg.norm, p.get(f"{w}_gamma"), p.get(f"{w}_beta"), cfg.norm_eps, self.ops,
                                              cfg.norm_unit_offset, name=w) for w in ("ln1_post", "ln2_post"))
                                        if cfg.sandwich else (None, None))

    @classmethod
    def from_config(cls, config: Config | BlockConfig, weights: str | Path | Mapping[str, Any] | None = None,
                    *, dtype: str | None = None, seed: int | None = None, ops: Ops = STANDARD_OPS,
                    attention: str = "auto", layer: int | None = None,
                    model_config: Config | None = None) -> "DecoderBlock":
        """Build a block: weights from an .npz, a model folder or .safetensors file (block `layer`
        of the model; `model_config` says which model, else `config` or the folder's config.json),
        a name → array mapping, or None (seeded init)."""
        if isinstance(config, Config):  # layer `layer`'s own block when the model's layers differ
            block_cfg = config.layer_block(layer) if layer is not None and config.layers_differ else config.block
        else:
            block_cfg = config
        run = config.run if isinstance(config, Config) else None
        dtype = dtype or (run.dtype if run else "float64")
        seed = seed if seed is not None else (run.seed if run else 0)
        notes: list[str] = []
        if model_config is None and isinstance(config, Config) and config.model:
            model_config = config
        params = resolve_weights(weights, block_parameter_shapes(block_cfg), seed, dtype, layer=layer, notes=notes,
                                 config=model_config)
        return cls(block_cfg, params, ops, attention, notes)

    def __call__(self, x: Array, rec: Record = _ignore, cache: KVCache | None = None,
                 train: bool = False, rng: np.random.Generator | None = None, tape: Tape | None = None) -> Array:
        """x (B, T, d) → y (B, T, d). `train` applies dropout to the attention probabilities
        (`attention_dropout`) and to the two branch outputs (`dropout`), all drawn from `rng`. A tape keeps
        what `backward` reads (a pass for gradients runs without dropout and without a K/V cache).
        With AltUp (block.altup N), x and y are the N streams (N, B, T, d)."""
        assert tape is None or not train, "gradients are taken of the deterministic pass"
        if self.cfg.cross_attention:  # Mllama: no image states in a text-only pass, so transformers skips the layer
            check_block_input(x, self.cfg.d_model)
            rec("y", CROSS_ATTENTION_SKIPPED, x, (x,), kind="reshape")
            return x
        if self.cfg.altup:
            if tape is not None:
                raise InputError(GEMMA4_NO_BACKWARD.format(field="altup"))
            return self._altup(x, rec, cache, train, rng)
        return self._layer(x, rec, cache, train, rng, tape)

    def _altup(self, x: Array, rec: Record, cache: KVCache | None, train: bool,
               rng: np.random.Generator | None) -> Array:
        """Gemma 3n's AltUp around the layer, on the N streams x (N, B, T, d): predict every stream from all of
        them, x̂_i = x_i + Σ_j P_ij x_j (P (B, T, N, N) from the active stream's modalities); run the layer on the
        active stream x̂_a; correct every stream, x̃_i = x̂_i + (1 + c_i)·(y − x̂_a) (c (B, T, N) from y's
        modalities); then the per-layer input, read from x̃_a (times its learned scale), joins streams 1 … N−1."""
        cfg, p = self.cfg, self.params
        n, a, d = cfg.altup, cfg.altup_active, cfg.d_model
        if not isinstance(x, np.ndarray) or x.ndim != 4 or x.shape[0] != n or x.shape[-1] != d or 0 in x.shape:
            shape = getattr(x, "shape", type(x).__name__)
            raise InputError(f"input: expected the {n} AltUp streams (N={n}, B, T, d={d}) with B, T >= 1, got {shape}")
        P = self._modalities(x[a], rec, "predict") @ p["altup_predict"].astype(x.dtype)  # (B, T, N·N)
        P = P.reshape(*P.shape[:-1], n, n)  # (B, T, N, N): row i mixes the streams into stream i's prediction
        mixed = np.einsum("btij,jbtd->ibtd", P, x)  # (N, B, T, d)
        predicted = x + mixed  # (N, B, T, d)
        rec("altup_predicted", "AltUp: predicted streams x + P·x", predicted, (x, P), kind="add",
            params=("altup_predict",))
        active = predicted[a]  # (B, T, d)
        y = self._layer(active, rec, cache, train, rng, None)  # (B, T, d)
        c = self._modalities(y, rec, "correct") @ p["altup_correct"].astype(x.dtype) + 1.0  # (B, T, N)
        innovation = y - active  # (B, T, d)
        corrected = predicted + np.moveaxis(c, -1, 0)[..., None] * innovation  # (N, B, T, d)
        rec("altup_corrected", "AltUp: corrected streams x̂ + (1 + c)·(y − x̂_a)", corrected, (predicted, y, c),
            kind="add", params=("altup_correct",))
        if cfg.per_layer_input:
            first = corrected[a]  # (B, T, d)
            if cfg.altup_correct_scale:
                first = first * p["altup_scale"].astype(x.dtype)  # (B, T, d)
                rec("altup_scaled", "AltUp: active stream × its learned scale", first, (corrected,), kind="scale",
                    params=("altup_scale",))
            extra = self._per_layer_branch(first, rec)  # (B, T, d)
            corrected = corrected.copy()
            corrected[1:] += extra  # streams 1 … N−1, whichever is active (Gemma3nTextDecoderLayer)
            rec("y_streams", "streams 1 … N−1 + per-layer branch", corrected, (corrected, extra), kind="add")
        return corrected

    def _modalities(self, x: Array, rec: Record, step: str) -> Array:
        """AltUp's router: tanh(norm(x)/d · W_r) (B, T, N), over the N streams."""
        p, cfg = self.params, self.cfg
        normed = Norm(cfg.norm, p.get("altup_router_norm_gamma"), p.get("altup_router_norm_beta"), cfg.norm_eps,
                      self.ops, cfg.norm_unit_offset, name="altup_router_norm")(x)  # (B, T, d)
        routed = F.linear(normed * np.asarray(1.0 / cfg.d_model, dtype=x.dtype), p["altup_router"], None)  # (B, T, N)
        out = np.tanh(routed)  # (B, T, N)
        rec(f"altup_{step}_modalities", f"AltUp router ({step}): tanh(norm(x)/d · W_r)", out, (x, p["altup_router"]),
            kind="linear", params=("altup_router", "altup_router_norm_gamma"))
        return out

    def _layer(self, x: Array, rec: Record = _ignore, cache: KVCache | None = None,
               train: bool = False, rng: np.random.Generator | None = None, tape: Tape | None = None) -> Array:
        check_block_input(x, self.cfg.d_model)
        if tape is not None and self.cfg.ngpt is not None:
            raise InputError(NGPT_NO_BACKWARD)
        if tape is not None and (self.cfg.laurel_rank or self.cfg.activation_sparsity):
            raise InputError(GEMMA4_NO_BACKWARD.format(field=gemma4_field(self.cfg)))
        add, norm = self.ops.residual_add, self.cfg.norm
        rng = rng or np.random.default_rng()
        drop = _dropout(self.cfg.dropout, rng) if train and self.cfg.dropout else (lambda a: a)
        r = _residual_scale(self.cfg.residual_multiplier)  # r·branch; recorded steps read the branch itself
        drop_probs = _dropout(self.cfg.attention_dropout, rng) if train and self.cfg.attention_dropout else None
        if self.cfg.parts == "mixer" and self.cfg.shared is not None:  # Zamba2: Y = X + mixer(LN1(X + shared(X, x_0)))
            if tape is not None:
                raise InputError(SHARED_NO_BACKWARD)
            x_in = self._with_shared(x, rec, cache.kv if cache is not None else None)  # (B, T, d)
            n1 = self.ln1(x_in)  # (B, T, d)
            rec("ln1_out", "LN1", n1, (x_in,), kind=norm, params=("ln1_gamma", "ln1_beta"))
            a = drop(self.attn(n1, rec, cache.ssm if cache is not None else None, drop_probs))  # (B, T, d)
            y = add(x, r(a))  # (B, T, d)
            rec("y", "residual add", y, (x, a), kind="add")
        elif self.cfg.parts == "mixer":  # a layer of its mixer alone: Y = X + r·mixer(LN1(X))
            n1 = self.ln1(x, tape)  # (B, T, d)
            rec("ln1_out", "LN1", n1, (x,), kind=norm, params=("ln1_gamma", "ln1_beta"))
            a = drop(self.attn(n1, rec, cache, drop_probs, tape))  # (B, T, d)
            y = add(x, r(a))  # (B, T, d)
            rec("y", "residual add", y, (x, a), kind="add")
        elif self.cfg.parts == "mlp":  # a layer of its MLP alone: Y = X + r·MLP(LN2(X))
            n2 = self.ln2(x, tape)  # (B, T, d)
            rec("ln2_out", "LN2", n2, (x,), kind=norm, params=("ln2_gamma", "ln2_beta"))
            m = drop(self.mlp(n2, rec, tape))  # (B, T, d)
            y = add(x, r(m))  # (B, T, d)
            rec("y", "residual add", y, (x, m), kind="add")
        elif self.cfg.placement in ("pre", "normed_residual"):
            normed = self.cfg.placement == "normed_residual"  # BLOOM's switch: each norm's output is the residual
            said = (" (to LN1's output)", " (to LN2's output)") if normed else ("", "")
            c = self.cfg  # MiniMax: each add α·skip + β·branch
            skip1, branch1 = _residual_scale(c.attn_skip_scale), _residual_scale(c.attn_branch_scale)
            skip2, branch2 = _residual_scale(c.mlp_skip_scale), _residual_scale(c.mlp_branch_scale)
            n1 = self.ln1(x, tape)  # (B, T, d)
            rec("ln1_out", "LN1", n1, (x,), kind=norm, params=("ln1_gamma", "ln1_beta"))
            a = drop(self.attn(n1, rec, cache, drop_probs, tape))  # (B, T, d)
            base = n1 if normed else x  # (B, T, d)
            h = add(skip1(base), branch1(r(a)))  # (B, T, d)
            rec("h", "residual add" + said[0] + scales_said(c.attn_skip_scale, c.attn_branch_scale), h, (base, a),
                kind="add")
            n2 = self.ln2(h, tape)  # (B, T, d)
            rec("ln2_out", "LN2", n2, (h,), kind=norm, params=("ln2_gamma", "ln2_beta"))
            m = drop(self.mlp(n2, rec, tape))  # (B, T, d)
            base = n2 if normed else h  # (B, T, d)
            y = add(skip2(base), branch2(r(m)))  # (B, T, d)
            rec("y", "residual add" + said[1] + scales_said(c.mlp_skip_scale, c.mlp_branch_scale), y, (base, m),
                kind="add")
        elif self.cfg.placement == "post":
            a = drop(self.attn(x, rec, cache, drop_probs, tape))
            s1 = add(x, r(a))
            rec("h_pre", "residual add", s1, (x, a), kind="add")
            h = self.ln1(s1, tape)
            rec("h", "LN1 (post)", h, (s1,), kind=norm, params=("ln1_gamma", "ln1_beta"))
            m = drop(self.mlp(h, rec, tape))
            s2 = add(h, r(m))
            rec("y_pre", "residual add", s2, (h, m), kind="add")
            y = self.ln2(s2, tape)
            rec("y", "LN2 (post)", y, (s2,), kind=norm, params=("ln2_gamma", "ln2_beta"))
        elif self.cfg.placement == "sandwich":  # Gemma 2/3: a norm before and after each branch
            n1 = self.ln1(x, tape)  # (B, T, d)
            rec("ln1_out", "LN1", n1, (x,), kind=norm, params=("ln1_gamma", "ln1_beta"))
            a = drop(self.attn(n1, rec, cache, drop_probs, tape))  # (B, T, d)
            p1 = self.ln1_post(a, tape)  # (B, T, d)
            mixer = "short conv" if self.cfg.short_conv else "attention"  # LFM3's conv layers are sandwiched too
            rec("ln1_post_out", f"LN1' (of the {mixer} output)", p1, (a,), kind=norm,
                params=("ln1_post_gamma", "ln1_post_beta"))
            if self.cfg.ngpt is not None:  # nGPT: from the normalised input towards the branch, h = n + |λ_1·α|⊙(p − n)
                h = _interpolate(n1, p1, self.params["lambda_1"], self.cfg.ngpt.alpha)  # (B, T, d)
                rec("h", NGPT_RESIDUAL.format(i="₁"), h, (n1, p1), kind="add")
            else:  # (Beam: each add α·skip + β·branch, α² + β² = 1 by depth)
                c = self.cfg
                h = add(_residual_scale(c.attn_skip_scale)(x), _residual_scale(c.attn_branch_scale)(r(p1)))  # (B, T, d)
                rec("h", "residual add" + scales_said(c.attn_skip_scale, c.attn_branch_scale), h, (x, p1), kind="add")
            if self.cfg.laurel_rank:  # Gemma 3n: (x + LN1'(attn) + LAuReL(n1)) / √2
                h = self._laurel(n1, h, rec)  # (B, T, d)
            n2 = self.ln2(h, tape)  # (B, T, d)
            rec("ln2_out", "LN2", n2, (h,), kind=norm, params=("ln2_gamma", "ln2_beta"))
            m = drop(self.mlp(n2, rec, tape))  # (B, T, d)
            if self.experts is not None:  # Gemma 4: the experts beside the dense MLP
                m = self._beside(h, m, rec)  # (B, T, d)
            p2 = self.ln2_post(m, tape)  # (B, T, d)
            rec("ln2_post_out", "LN2' (of the MLP output)", p2, (m,), kind=norm,
                params=("ln2_post_gamma", "ln2_post_beta"))
            if self.cfg.ngpt is not None:
                y = _interpolate(n2, p2, self.params["lambda_2"], self.cfg.ngpt.alpha)  # (B, T, d)
                rec("y", NGPT_RESIDUAL.format(i="₂"), y, (n2, p2), kind="add")
            else:
                c = self.cfg
                y = add(_residual_scale(c.mlp_skip_scale)(h), _residual_scale(c.mlp_branch_scale)(r(p2)))  # (B, T, d)
                rec("y", "residual add" + scales_said(c.mlp_skip_scale, c.mlp_branch_scale), y, (h, p2), kind="add")
        elif self.cfg.placement == "post_branch":  # OLMo2: each branch's output normalised, then added
            a = drop(self.attn(x, rec, cache, drop_probs, tape))  # (B, T, d)
            n1 = self.ln1(r(a), tape)  # (B, T, d)
            rec("ln1_out", "LN1 (of the attention output)", n1, (a,), kind=norm, params=("ln1_gamma", "ln1_beta"))
            h = add(x, n1)  # (B, T, d)
            rec("h", "residual add", h, (x, n1), kind="add")
            m = drop(self.mlp(h, rec, tape))  # (B, T, d)
            n2 = self.ln2(r(m), tape)  # (B, T, d)
            rec("ln2_out", "LN2 (of the MLP output)", n2, (m,), kind=norm, params=("ln2_gamma", "ln2_beta"))
            y = add(h, n2)  # (B, T, d)
            rec("y", "residual add", y, (h, n2), kind="add")
        else:  # parallel: both branches read x, through their own norms or one shared norm
            n1 = self.ln1(x, tape)
            rec("ln1_out", "LN1", n1, (x,), kind=norm, params=("ln1_gamma", "ln1_beta"))
            a = drop(self.attn(n1, rec, cache, drop_probs, tape))
            h = add(x, r(a))
            rec("h", "residual add (attention)", h, (x, a), kind="add")
            n2 = n1  # parallel_shared: the MLP reads LN1's output too
            if self.ln2 is not None:
                n2 = self.ln2(x, tape)
                rec("ln2_out", "LN2", n2, (x,), kind=norm, params=("ln2_gamma", "ln2_beta"))
            m = drop(self.mlp(n2, rec, tape))
            y = add(h, r(m))
            rec("y", "residual add (MLP)", y, (h, m), kind="add")
        if (self.cfg.per_layer_input and not self.cfg.altup) or self.cfg.layer_scalar:  # AltUp: its own tail
            if tape is not None:
                raise InputError(GEMMA4_NO_BACKWARD.format(field=gemma4_field(self.cfg)))
            y = self._gemma4_tail(y, rec)
        return y

    def _with_shared(self, x: Array, rec: Record, cache: KVCache | None) -> Array:
        """Zamba2's mixer input: x + the shared block's output on [x | x_0] (B, T, d)."""
        if self.shared is None or self.embeddings is None or self.embeddings.shape != x.shape:
            raise InputError("this layer runs a shared transformer block (block.shared), which reads the model's "
                             "weights and token embeddings: it runs only inside its model")
        t = self.shared(x, self.embeddings, rec, cache)  # (B, T, d)
        x_in = x + t  # (B, T, d)
        rec("shared_in", "h + shared block's output", x_in, (x, t), kind="add")
        return x_in
    def _laurel(self, n1: Array, h: Array, rec: Record) -> Array:
        """Gemma 3n's LAuReL: (h + n1 + norm(n1·W_l·W_r)) / √2, a rank-r residual of LN1's output n1 (B, T, d)."""
        cfg, p = self.cfg, self.params
        narrow = F.linear(n1, p["laurel_left"], None)  # (B, T, r)
        rec("laurel_left", f"LAuReL down: LN1 output · W_l (rank {cfg.laurel_rank})", narrow, (n1, p["laurel_left"]),
            kind="linear", params=("laurel_left",))
        low = F.linear(narrow, p["laurel_right"], None)  # (B, T, d)
        rec("laurel_right", "LAuReL up: · W_r", low, (narrow, p["laurel_right"]), kind="linear", params=("laurel_right",))
        normed = Norm(cfg.norm, p.get("laurel_norm_gamma"), p.get("laurel_norm_beta"), cfg.norm_eps, self.ops,
                      cfg.norm_unit_offset, name="laurel_norm")(low)  # (B, T, d)
        out = (h + (n1 + normed)) / np.asarray(math.sqrt(2.0), dtype=h.dtype)  # (B, T, d)
        rec("h_laurel", "(residual add + LN1 output + norm(LAuReL)) / √2", out, (h, n1, normed), kind="add",
            params=("laurel_norm_gamma", "laurel_norm_beta"))
        return out

    def _beside(self, h: Array, dense: Array, rec: Record) -> Array:
        """Gemma 4's MLP step: LN2a'(dense MLP(LN2(h))) + LN2b'(experts(LN2b(h)), routed by h itself) (B, T, d)."""
        norm = self.cfg.norm
        m1 = self.ln2_post1(dense)  # (B, T, d)
        rec("ln2_post1_out", "norm of the dense MLP's output", m1, (dense,), kind=norm, params=("ln2_post1_gamma",))
        xe = self.ln2b(h)  # (B, T, d)
        rec("ln2b_out", "LN2b (the experts' input)", xe, (h,), kind=norm, params=("ln2b_gamma",))
        assert self.experts is not None
        e = self.experts(xe, _within(rec, "moe"), router_input=h)  # (B, T, d)
        m2 = self.ln2_post2(e)  # (B, T, d)
        rec("ln2_post2_out", "norm of the experts' output", m2, (e,), kind=norm, params=("ln2_post2_gamma",))
        both = m1 + m2  # (B, T, d)
        rec("mlp_both", "dense MLP + experts (each normed)", both, (m1, m2), kind="add")
        return both

    def _gemma4_tail(self, y: Array, rec: Record) -> Array:
        """Gemma 4 after the MLP: y + norm(act(y·W_pg) ⊙ e_l)·W_pp with this layer's per-layer input e_l (B, T, d_p),
        then the output times the stored layer scalar."""
        cfg, p = self.cfg, self.params
        if cfg.per_layer_input:
            normed = self._per_layer_branch(y, rec)  # (B, T, d)
            z = y + normed  # (B, T, d)
            rec("y_ple", "residual add (per-layer input)", z, (y, normed), kind="add")
            y = z
        if cfg.layer_scalar:
            scaled = y * p["layer_scalar"].astype(y.dtype)  # (B, T, d)
            rec("y_scaled", "× layer scalar", scaled, (y,), kind="scale", params=("layer_scalar",))
            y = scaled
        return y

    def _per_layer_branch(self, y: Array, rec: Record) -> Array:
        """norm(act(y·W_pg) ⊙ e_l)·W_pp (B, T, d), this layer's per-layer input e_l (B, T, d_p) gated by y."""
        cfg, p = self.cfg, self.params
        e = self.per_layer_in
        if e is None or e.shape[:2] != y.shape[:2]:
            raise InputError("this layer reads its per-layer input (block.per_layer_input), which its model "
                             "computes from the token ids: it runs only inside its model")
        gate = F.linear(y, p["ple_gate"], None)  # (B, T, d_p)
        rec("ple_gate", "per-layer input gate", gate, (y, p["ple_gate"]), kind="linear", params=("ple_gate",))
        act = F.ACTIVATION_KERNELS[cfg.activation][0](gate) * e  # (B, T, d_p)
        rec("ple_act", f"{cfg.activation}(gate) × per-layer input", act, (gate, e), kind="gate")
        proj = F.linear(act, p["ple_proj"], None)  # (B, T, d)
        rec("ple_proj", "per-layer input projection", proj, (act, p["ple_proj"]), kind="linear",
            params=("ple_proj",))
        normed = Norm(cfg.norm, p.get("ple_norm_gamma"), p.get("ple_norm_beta"), cfg.norm_eps, self.ops,
                      cfg.norm_unit_offset, name="ple_norm")(proj)  # (B, T, d)
        rec("ple_norm", "norm of the per-layer branch", normed, (proj,), kind=cfg.norm,
            params=("ple_norm_gamma", "ple_norm_beta"))
        return normed

    def backward(self, dy: Array, tape: Tape) -> Array:
        """dy (B, T, d) → dx (B, T, d): the forward of `__call__` read in reverse, placement by placement,
        each residual add passing its gradient to both of its inputs and each branch's multiplier r scaling
        what flows into the branch; the parameters' gradients added to the tape."""
        if self.cfg.cross_attention:  # the identity: no parameter gets a gradient
            return dy
        r, place, c = self.cfg.residual_multiplier, self.cfg.placement, self.cfg
        a1, b1, a2, b2 = c.attn_skip_scale, c.attn_branch_scale * r, c.mlp_skip_scale, c.mlp_branch_scale * r
        if place == "pre":  # y = α₂·h + β₂·r·MLP(LN2(h)), h = α₁·x + β₁·r·MHA(LN1(x))
            dh = _scaled(a2, dy) + self.ln2.backward(self.mlp.backward(b2 * dy, tape), tape)
            return _scaled(a1, dh) + self.ln1.backward(self.attn.backward(b1 * dh, tape), tape)
        if place == "normed_residual":  # y = α₂·n2 + β₂·r·MLP(n2), n2 = LN2(h); h = α₁·n1 + β₁·r·MHA(n1), n1 = LN1(x)
            d_n2 = _scaled(a2, dy) + self.mlp.backward(b2 * dy, tape)
            dh = self.ln2.backward(d_n2, tape)
            return self.ln1.backward(_scaled(a1, dh) + self.attn.backward(b1 * dh, tape), tape)
        if place == "post":  # y = LN2(h + r·MLP(h)), h = LN1(x + r·MHA(x))
            d_s2 = self.ln2.backward(dy, tape)
            d_s1 = self.ln1.backward(d_s2 + self.mlp.backward(r * d_s2, tape), tape)
            return d_s1 + self.attn.backward(r * d_s1, tape)
        if place == "sandwich":  # y = α₂·h + β₂·r·LN2'(MLP(LN2(h))), h = α₁·x + β₁·r·LN1'(MHA(LN1(x)))
            dh = _scaled(a2, dy) + self.ln2.backward(self.mlp.backward(self.ln2_post.backward(b2 * dy, tape), tape),
                                                     tape)
            return _scaled(a1, dh) + self.ln1.backward(self.attn.backward(self.ln1_post.backward(b1 * dh, tape), tape),
                                                       tape)
        if place == "post_branch":  # y = h + LN2(r·MLP(h)), h = x + LN1(r·MHA(x))
            dh = dy + self.mlp.backward(r * self.ln2.backward(dy, tape), tape)
            return dh + self.attn.backward(r * self.ln1.backward(dh, tape), tape)
        # parallel: y = x + r·MHA(LN1(x)) + r·MLP(LN2(x)), or both branches reading LN1(x) (parallel_shared)
        d_mlp_in = self.mlp.backward(r * dy, tape)
        d_attn_in = self.attn.backward(r * dy, tape)
        if self.ln2 is None:
            return dy + self.ln1.backward(d_attn_in + d_mlp_in, tape)
        return dy + self.ln1.backward(d_attn_in, tape) + self.ln2.backward(d_mlp_in, tape)

    def vjp(self, x: Array, dy: Array) -> tuple[Array, dict[str, Array]]:
        """The block's vector-Jacobian product at x (B, T, d): (dy·∂y/∂x, {parameter key: dy·∂y/∂p}) for
        dy (B, T, d), every parameter present (zeros where none flows)."""
        check_block_input(x, self.cfg.d_model)
        tape = Tape()
        y = self(x, tape=tape)
        if np.shape(dy) != y.shape:
            raise InputError(f"dy: expected shape {y.shape} (the block's output), got {np.shape(dy)}")
        dx = self.backward(np.asarray(dy, dtype=y.dtype), tape)
        return dx, complete_grads(tape.grads, self.params)

    def new_cache(self) -> KVCache | DeltaNetState | MambaCache | ConvCache:
        """What decoding keeps for this layer: its K/V, its Gated DeltaNet, Mamba-2 or conv state (constant in T),
        or (an MLP alone) only the length."""
        if self.cfg.parts == "mlp":
            return KVCache()
        if self.cfg.parts == "hybrid" or self.cfg.shared is not None:  # K/V of its attention beside the state
            return ParallelCache()
        if self.cfg.lightning is not None:
            return LightningState()
        return (DeltaNetState() if self.cfg.linear_attention else MambaCache() if self.cfg.mamba is not None else
                ConvCache() if self.cfg.short_conv else KVCache())

    def step(self, x_new: Array, cache: KVCache, rec: Record = _ignore) -> Array:
        """Incremental decoding: the outputs for tokens appended after those already in `cache`."""
        return self(x_new, rec, cache)


def complete_grads(grads: Mapping[str, Array], params: Mapping[str, Array]) -> dict[str, Array]:
    """A gradient for every parameter, in the parameters' order and shapes: zeros where none flowed (an
    expert no token chose); buffers (DeepSeek's selection bias) have none."""
    return {k: grads[k].reshape(v.shape).astype(v.dtype, copy=False) if k in grads else np.zeros_like(v)
            for k, v in params.items() if not is_buffer(k)}


def _interpolate(n: Array, branch: Array, lam: Array, alpha: float) -> Array:
    """nGPT's residual (B, T, d): n + |λ·α| ⊙ (branch − n), the rate per channel."""
    rate = np.abs(lam * alpha).astype(n.dtype, copy=False)  # (d,)
    return n + rate * (branch - n)


def _residual_scale(multiplier: float) -> Callable[[Array], Array]:
    """A branch's output times the residual multiplier (Granite), in the output's dtype."""
    if multiplier == 1.0:
        return lambda a: a
    return lambda a: a * np.asarray(multiplier, dtype=a.dtype)


def _scaled(scale: float, a: Array) -> Array:
    return a if scale == 1.0 else a * np.asarray(scale, dtype=a.dtype)


def scales_said(skip: float, branch: float) -> str:
    """How a residual add's record names its scales (MiniMax's α·skip + β·branch); '' when both are 1."""
    return "" if skip == branch == 1.0 else f" ({skip:g}·skip + {branch:g}·branch)"


CROSS_ATTENTION_SKIPPED = "cross-attention layer skipped (no image states in a text-only pass): y = x"


def _dropout(rate: float, rng: np.random.Generator) -> Callable[[Array], Array]:
    def drop(a: Array) -> Array:
        keep = rng.random(a.shape) >= rate
        return np.where(keep, a / (1.0 - rate), 0).astype(a.dtype)

    return drop


def _rescaled(s: Array, target: Array) -> Array:
    """s (B, T, d) scaled to the root-mean-square `target` (B, T, 1), its own floored at √1e-5 (Gemma 3n's AltUp)."""
    return s * target / np.sqrt(np.maximum(np.mean(s ** 2, axis=-1, keepdims=True), 1e-5))


def check_block_input(x: Any, d_model: int) -> None:
    if not isinstance(x, np.ndarray) or x.ndim != 3 or x.shape[-1] != d_model or 0 in x.shape:
        shape = getattr(x, "shape", type(x).__name__)
        raise InputError(f"input: expected an array of shape (B, T, d={d_model}) with B, T >= 1, got {shape}")


# ----------------------------------------------------------------------------- model


@dataclass
class Model:
    """Token embedding + positions → N blocks → final norm → logits (B, T, V)."""

    config: Config
    params: dict[str, Array]
    ops: Ops = STANDARD_OPS
    attention: str = "auto"
    notes: list[str] = field(default_factory=list)  # what loading the weights had to say
    # how a checkpoint stored the weights (checkpoint.Match: name, layout, keys), for gradients by stored name
    stored: list[Any] = field(default_factory=list)
    blocks: list[DecoderBlock] = field(init=False)

    def __post_init__(self) -> None:
        model = self.config.model
        assert model is not None, "Model needs a config with a model section"
        self.blocks = []
        for i in range(model.n_layers):
            prefix = f"blocks.{i}."
            p = {k[len(prefix):]: v for k, v in self.params.items() if k.startswith(prefix)}
            block = DecoderBlock(self.config.layer_block(i), p, self.ops, self.attention)
            self.params.update({prefix + k: v for k, v in block.params.items()})  # share, never copy
            if block.cfg.mla is not None and block.cfg.mla.index_shared:  # it reuses the indexer choice of the one before
                block.attn.previous = self.blocks[-1].attn
            if block.cfg.kv_from >= 0:  # Gemma 4: it attends to an earlier layer's keys and values
                block.attn.source = self.blocks[block.cfg.kv_from].attn
            if block.cfg.shared is not None:  # Zamba2: the model's shared block, with this layer's adapters
                head = f"shared.{block.cfg.shared.index}."
                weights = {k[len(head):]: v for k, v in self.params.items() if k.startswith(head)}
                block.shared = SharedTransformer(block.cfg, weights, block.params, self.ops, self.attention)
            self.blocks.append(block)
        self.reads_embeddings = any(b.shared is not None for b in self.blocks)
        b = self.config.block
        self.emb_ln = (Norm(b.norm, self.params.get("emb_ln_gamma"), self.params.get("emb_ln_beta"), b.norm_eps,
                            self.ops, b.norm_unit_offset, name="emb_ln") if model.embedding_norm else None)
        self.ln_f = (Norm(b.norm, self.params.get("ln_f_gamma"), self.params.get("ln_f_beta"), b.norm_eps, self.ops,
                          b.norm_unit_offset, name="ln_f") if model.final_norm else None)

    @classmethod
    def from_config(cls, config: Config, weights: str | Path | Mapping[str, Any] | None = None, *,
                    dtype: str | None = None, seed: int | None = None, ops: Ops = STANDARD_OPS,
                    attention: str = "auto") -> "Model":
        if config.model is None:
            raise InputError(f"{config.name}: has no 'model' section; a model needs n_layers and vocab_size")
        dtype = dtype or config.run.dtype
        seed = config.run.seed if seed is None else seed
        notes: list[str] = []
        stored: list[Any] = []
        params = resolve_weights(weights, model_parameter_shapes(config), seed, dtype, config=config, notes=notes,
                                 stored=stored)
        return cls(config, params, ops, attention, notes, stored)

    @property
    def model_config(self) -> ModelConfig:
        assert self.config.model is not None
        return self.config.model

    def embed(self, ids: Array, start: int = 0, rec: Record = _ignore, tape: Tape | None = None) -> Array:
        """Token ids (B, T) → X_0 (B, T, d): E[ids] plus positions (none for rope/alibi/none), then the
        embedding norm if the model has one. A tape keeps the ids (and the narrow embeddings a projection reads)."""
        m, d = self.model_config, self.config.block.d_model
        check_token_ids(ids, m.vocab_size)
        T = ids.shape[1]
        positions = np.arange(start, start + T)
        if m.positions == "learned" and start + T > m.max_positions:
            raise InputError(f"input: sequence of {start + T} tokens exceeds model.max_positions={m.max_positions}")
        wte = self.params["wte"]
        tokens = wte[ids]  # (B, T, d), or (B, T, e) when projected in
        if m.embedding_multiplier != 1.0:  # in the run's dtype, as the reference implementations do
            tokens *= np.asarray(m.embedding_multiplier, dtype=tokens.dtype)
        narrow = "proj_in" in self.params  # OPT-350m: e-wide embeddings, projected in to d
        rec("tok_emb_e" if narrow else "tok_emb",
            "token embedding" + (f" × {m.embedding_multiplier:g}" if m.embedding_multiplier != 1.0 else ""),
            tokens, (ids, wte), kind="gather", params=("wte",))
        if tape is not None:
            tape.keep("embed", ids=ids, narrow=tokens if narrow else None)
        if narrow:
            wide = F.linear(tokens, self.params["proj_in"], None)  # (B, T, d)
            rec("tok_emb", "project in (e → d)", wide, (tokens, self.params["proj_in"]), kind="linear",
                params=("proj_in",))
            tokens = wide
        if m.positions == "learned":
            table = self.params["wpe"][positions + m.position_offset]  # (T, d)
            x = tokens + table  # (B, T, d)
            rec("embed", "add learned positions", x, (tokens, table), kind="add", params=("wpe",))
        elif m.positions == "sinusoidal":
            # rows t + offset of the fixed table (XGLM's 2), laid out as model.sinusoidal_layout says
            table = F.sinusoidal_positions(positions + m.position_offset, d, tokens.dtype, m.sinusoidal_layout,
                                           m.padding_idx)  # (T, d)
            x = tokens + table  # (B, T, d)
            rec("embed", "add sinusoidal positions" + ("" if m.sinusoidal_layout == "interleaved" else
                                                       f" ({m.sinusoidal_layout})"), x, (tokens, table), kind="add")
        else:
            x = tokens  # rope rotates q and k inside attention, alibi biases the scores; none adds nothing
        if self.emb_ln is not None:  # BLOOM's word_embeddings_layernorm
            normed = self.emb_ln(x, tape)  # (B, T, d)
            rec("embed_norm", "embedding norm", normed, (x,), kind=self.config.block.norm,
                params=("emb_ln_gamma", "emb_ln_beta"))
            x = normed
        if m.per_layer_dim:
            if tape is not None:
                raise InputError(GEMMA4_NO_BACKWARD.format(field="per_layer_input"))
            self._per_layer_inputs(ids, x, rec)
        if self.reads_embeddings:  # Zamba2: the shared blocks read the token embeddings beside each layer's input
            if tape is not None:
                raise InputError(SHARED_NO_BACKWARD)
            for block in self.blocks:
                block.embeddings = x
        if self.config.block.altup:
            if tape is not None:
                raise InputError(GEMMA4_NO_BACKWARD.format(field="altup"))
            x = self._altup_streams(x, rec)  # (N, B, T, d)
        return x

    def _altup_streams(self, x: Array, rec: Record) -> Array:
        """Gemma 3n: x_0 (B, T, d) → the N AltUp streams (N, B, T, d): x_0 itself, then x_0·W_j for each of the
        N − 1 projections `altup_in.{j}`, each rescaled to x_0's root-mean-square (its own floored at √1e-5)."""
        target = np.sqrt(np.mean(x ** 2, axis=-1, keepdims=True))  # (B, T, 1)
        streams = [x]
        for j in range(self.config.block.altup - 1):
            projected = F.linear(x, self.params[f"altup_in.{j}"], None)  # (B, T, d)
            rec(f"altup_in_{j}", f"AltUp: x_0 · W_in{j + 1} (stream {j + 1})", projected,
                (x, self.params[f"altup_in.{j}"]), kind="linear", params=(f"altup_in.{j}",))
            streams.append(_rescaled(projected, target))
        out = np.stack(streams)  # (N, B, T, d)
        rec("altup_streams", "AltUp: x_0 and its projections, each at x_0's RMS", out, tuple(streams), kind="scale")
        return out

    def _altup_merge(self, x: Array, rec: Record) -> Array:
        """Gemma 3n: the N streams (N, B, T, d) → their mean (B, T, d): stream 0 itself, stream j ≥ 1 through
        `altup_out.{j−1}` rescaled to stream 0's root-mean-square."""
        n = self.config.block.altup
        target = np.sqrt(np.mean(x[0] ** 2, axis=-1, keepdims=True))  # (B, T, 1)
        streams = [x[0]]
        for j in range(1, n):
            projected = F.linear(x[j], self.params[f"altup_out.{j - 1}"], None)  # (B, T, d)
            rec(f"altup_out_{j - 1}", f"AltUp: stream {j} · W_out{j}", projected,
                (x[j], self.params[f"altup_out.{j - 1}"]), kind="linear", params=(f"altup_out.{j - 1}",))
            streams.append(_rescaled(projected, target))
        out = np.mean(np.stack(streams), axis=0)  # (B, T, d)
        rec("altup_merged", "AltUp: the mean of stream 0 and the others at its RMS", out, tuple(streams), kind="add")
        return out

    def _per_layer_inputs(self, ids: Array, x: Array, rec: Record) -> None:
        """Gemma 4's per-layer embeddings: for each layer l, e_l = (norm(x_0·W_P / √d)_l + √d_p·E_P[ids]_l) / √2, its
        d_p-wide slice of both (the table E_P (V_p, L·d_p), the projection W_P (d, L·d_p), the norm over d_p);
        handed to each block (B, T, d_p)."""
        m, b, p = self.model_config, self.config.block, self.params
        B, T = ids.shape
        L, d_p = m.n_layers, m.per_layer_dim
        if m.per_layer_clamp:  # Gemma 3n: ids past the per-layer table read its row 0
            ids = np.where(ids < p["ple_wte"].shape[0], ids, 0)
        if int(ids.max(initial=0)) >= p["ple_wte"].shape[0]:
            raise InputError(f"input: token id {int(ids.max())} is past the per-layer embeddings' "
                             f"{p['ple_wte'].shape[0]} rows (model.per_layer_vocab)")
        tokens = p["ple_wte"][ids] * np.asarray(math.sqrt(d_p), dtype=x.dtype)  # (B, T, L·d_p)
        rec("ple_tokens", f"per-layer embeddings × √{d_p}", tokens, (ids, p["ple_wte"]), kind="gather",
            params=("ple_wte",))
        projected = F.linear(x, p["ple_proj"], None) * np.asarray(b.d_model ** -0.5, dtype=x.dtype)  # (B, T, L·d_p)
        rec("ple_projected", "embeddings · W_P / √d", projected, (x, p["ple_proj"]), kind="linear", params=("ple_proj",))
        normed = Norm(b.norm, p.get("ple_proj_norm_gamma"), p.get("ple_proj_norm_beta"), b.norm_eps, self.ops,
                      b.norm_unit_offset, name="ple_proj_norm")(projected.reshape(B, T, L, d_p))  # (B, T, L, d_p)
        both = (normed + tokens.reshape(B, T, L, d_p)) * np.asarray(2 ** -0.5, dtype=x.dtype)  # (B, T, L, d_p)
        rec("ple_inputs", "per-layer inputs (norm(projection) + embeddings) / √2", both, (normed, tokens), kind="add",
            params=("ple_proj_norm_gamma",))
        for i, block in enumerate(self.blocks):
            block.per_layer_in = both[:, :, i]  # (B, T, d_p)

    def embed_backward(self, dx: Array, tape: Tape) -> None:
        """The embeddings' gradients from dX_0 (B, T, d): through the embedding norm, the learned positions'
        rows (summed over the batch), the projection in, the multiplier, and into the token table's rows,
        each row the sum over every position that looked it up."""
        m = self.model_config
        saved = tape.take("embed")
        if self.emb_ln is not None:
            dx = self.emb_ln.backward(dx, tape)
        if m.positions == "learned":
            d_table = np.zeros_like(self.params["wpe"])
            d_table[m.position_offset:m.position_offset + dx.shape[1]] = dx.sum(axis=0)
            tape.add("wpe", d_table)
        if saved["narrow"] is not None:
            tape.add("proj_in", self.ops.weight_grad(saved["narrow"], dx))
            dx = dx @ self.params["proj_in"].T  # (B, T, e)
        if m.embedding_multiplier != 1.0:
            dx = dx * np.asarray(m.embedding_multiplier, dtype=dx.dtype)
        d_wte = scatter_rows(saved["ids"].ravel(), dx.reshape(-1, dx.shape[-1]), self.params["wte"].shape[0])
        if m.padding_idx is not None:  # as nn.Embedding(padding_idx=…): that row is never trained by its lookups
            d_wte[m.padding_idx] = 0
        tape.add("wte", d_wte)

    def hidden(self, x: Array, rec: Record = _ignore, tape: Tape | None = None) -> Array:
        """The LM head's input: the final norm of the last block's output (B, T, d), projected out to e
        (OPT-350m); Gemma 3n's AltUp streams (N, B, T, d) merged first."""
        if self.config.block.altup:
            if tape is not None:
                raise InputError(GEMMA4_NO_BACKWARD.format(field="altup"))
            x = self._altup_merge(x, rec)  # (B, T, d)
        if self.ln_f is not None:
            normed = self.ln_f(x, tape)  # (B, T, d)
            rec("ln_f_out", "final norm", normed, (x,), kind=self.config.block.norm, params=("ln_f_gamma", "ln_f_beta"))
            x = normed
        if "proj_out" in self.params:  # OPT-350m: back to the embeddings' width e
            if tape is not None:
                tape.keep("proj_out", x=x)
            narrow = F.linear(x, self.params["proj_out"], None)  # (B, T, e)
            rec("proj_out", "project out (d → e)", narrow, (x, self.params["proj_out"]), kind="linear",
                params=("proj_out",))
            x = narrow
        return x

    def hidden_backward(self, d_hidden: Array, tape: Tape) -> Array:
        if "proj_out" in self.params:
            tape.add("proj_out", self.ops.weight_grad(tape.take("proj_out")["x"], d_hidden))
            d_hidden = d_hidden @ self.params["proj_out"].T
        return self.ln_f.backward(d_hidden, tape) if self.ln_f is not None else d_hidden

    def head_weight(self) -> tuple[Array, tuple[str, ...]]:
        """The vocabulary projection (e, V) and what it is: the token table transposed, when tied."""
        if self.model_config.tie_embeddings:
            return self.params["wte"].T, ("wte (tied)",)  # (d, V): the embedding table reused
        return self.params["lm_head"], ("lm_head",)

    def logits_of(self, hidden: Array) -> Array:
        """Logits (…, V) of the LM head's input (…, e): the projection and its bias, the logit multiplier and
        the final soft cap."""
        w, _ = self.head_weight()
        logits = F.linear(hidden, w, self.params.get("lm_head_bias"))  # (…, V)
        multiplier = self.model_config.logit_multiplier
        if multiplier != 1.0:  # Cohere's logit_scale, Granite's 1 / logits_scaling
            logits *= np.asarray(multiplier, dtype=logits.dtype)
        if self.model_config.logit_softcap:  # Gemma 2's final_logit_softcapping
            logits = soft_cap(logits, self.model_config.logit_softcap)
        if self.model_config.logit_scale:  # Dory: each token's logit times its learned scale times s
            logits = logits * (self.params["logit_scale"] * self.model_config.logit_scale).astype(logits.dtype,
                                                                                                   copy=False)
        return logits

    def head(self, x: Array, rec: Record = _ignore) -> Array:
        """Final norm and vocabulary projection: (B, T, d) → (B, T, V)."""
        x = self.hidden(x, rec)
        logits = self.logits_of(x)  # (B, T, V)
        w, params = self.head_weight()
        rec("logits", logits_label(self.model_config), logits, (x, w), kind="linear", params=params + ("lm_head_bias",))
        return logits

    def __call__(self, ids: Array, rec: Record = _ignore, caches: list[KVCache] | None = None) -> Array:
        start = max(c.length for c in caches) if caches else 0  # a layer of its MLP alone keeps no length
        x = self.embed(ids, start, rec)
        for x in self.passes(x, rec, caches):
            pass
        return self.head(x, rec)

    def layer_passes(self) -> list[tuple[int, int, int]]:
        return layer_passes(self.model_config)

    def passes(self, x: Array, rec: Record = _ignore, caches: list[Any] | None = None) -> Iterator[Array]:
        """The blocks on X_0 (B, T, d): each layer pass's output in turn (`layer_passes`). A loop of the recurrent
        section starts from norm(h) + norm(x_in), x_in the output of the layers before it (the norm of the block's
        kind, without a scale); its later loops' rows are not recorded (the first loop's are)."""
        x_in: Array | None = None
        for i, c, loop in self.layer_passes():
            if loop >= 0 and i == self.model_config.recurrent_start:
                b = self.config.block
                norm = Norm(b.norm, None, None, b.norm_eps, self.ops, name="loop_norm")
                if x_in is None:
                    x_in = norm(x)  # (B, T, d)
                x = norm(x) + x_in  # (B, T, d)
                rec(f"loop_{loop}_in", LOOP_LABEL.format(loop=loop + 1), x, (x_in,), kind="add")
            x = self.blocks[i](x, _prefixed(rec, i) if loop <= 0 else _looped(rec, i, loop),
                               caches[c] if caches else None)
            yield x

    def new_cache(self) -> list[KVCache | DeltaNetState | MambaCache]:
        own = [block.new_cache() for block in self.blocks]  # and one of each recurrent layer for each later loop
        return own + [self.blocks[i].new_cache() for i, c, _ in self.layer_passes() if c >= len(own)]

    def step(self, ids_new: Array, caches: list[KVCache], rec: Record = _ignore) -> Array:
        """Incremental decoding: logits for tokens appended after those already in `caches`."""
        return self(ids_new, rec, caches)

    # ------------------------------------------------------------------------- training

    def loss(self, ids: Array, labels: Array | None = None) -> float:
        """The mean cross-entropy of position t predicting label t + 1 (labels default to the ids; -100 is
        ignored), as transformers' causal-LM loss: from the logits as `__call__` makes them, a chunk of
        tokens at a time, so the (B, T, V) table is never held."""
        targets = shifted_targets(ids, labels, self.model_config.vocab_size)
        tape = Tape() if self._aux_layers() else None  # the load-balancing loss reads every router's logits
        x = self.embed(ids, tape=tape)
        if tape is None:  # every layer pass (Dory's recurrent layers once a loop)
            for x in self.passes(x):
                pass
        else:
            for i, block in enumerate(self.blocks):
                x = block(x, tape=tape.within(f"blocks.{i}."))
        loss, _ = self._cross_entropy(self.hidden(x), targets, None)
        return loss + (self.aux_loss(tape, grad=False) if tape is not None else 0.0)

    def loss_and_grads(self, ids: Array, labels: Array | None = None) -> tuple[float, dict[str, Array]]:
        """(`loss`, the gradient of every parameter): one forward that keeps what the backward reads, then the
        backward, block by block in reverse. Keyed by blockcli's keys, or, for a model loaded from a checkpoint,
        by the checkpoint's tensor names in their stored layouts and shapes (GPT-2's fused c_attn (in, out),
        nn.Linear's (out, in), fused experts as stored), in the run's dtype. A tied embedding's gradient sums
        its two uses, once; an expert no token chose gets zeros; DeepSeek's selection bias, a buffer, none."""
        loss, tape = self.backward_pass(ids, labels)
        grads = complete_grads(tape.grads, self.params)
        if not self.stored:  # blockcli's own keys (seeded weights, an .npz)
            return loss, grads
        from blockcli.checkpoint import to_stored

        return loss, to_stored(self.stored, grads, self.config.block.n_heads, config=self.config)

    def backward_pass(self, ids: Array, labels: Array | None = None, tape: Tape | None = None) -> tuple[float, Tape]:
        """The loss, and the tape after the backward: its gradients under blockcli's keys, and the most the
        forward kept for it (`peak_bytes`). Weights dequantized from a quantized checkpoint are frozen."""
        frozen = [m.stored.name for m in self.stored if m.stored.dtype not in FLOAT_STORAGE]
        if frozen:
            raise InputError(f"gradients of quantized weights are not taken (they are frozen): {frozen[0]}"
                             + (f" and {len(frozen) - 1} more tensors" if len(frozen) > 1 else "")
                             + " are stored quantized; dequantize them to a float checkpoint first")
        targets = shifted_targets(ids, labels, self.model_config.vocab_size)
        if self.config.block.ngpt is not None or self.model_config.recurrent_layers:
            raise InputError(NGPT_NO_BACKWARD)
        tape = tape if tape is not None else Tape()
        x = self.embed(ids, tape=tape)
        for i, block in enumerate(self.blocks):
            x = block(x, tape=tape.within(f"blocks.{i}."))
        loss, d_hidden = self._cross_entropy(self.hidden(x, tape=tape), targets, tape)
        loss += self.aux_loss(tape, grad=True)
        dx = self.hidden_backward(d_hidden, tape)
        for i in reversed(range(len(self.blocks))):
            dx = self.blocks[i].backward(dx, tape.within(f"blocks.{i}."))
        self.embed_backward(dx, tape)
        return loss, tape

    def _aux_layers(self) -> list[int]:
        return [i for i, b in enumerate(self.blocks) if b.cfg.moe is not None and b.cfg.moe.aux_loss_coef]

    def aux_loss(self, tape: Tape, grad: bool) -> float:
        """The mixture layers' load-balancing loss times its coefficient, as transformers' load_balancing_loss_func
        adds it (Switch Transformer, eqs. 4-6): with every layer's tokens pooled (R rows), f_e the share of the
        top-k choices (of the softmax over all E experts) that went to expert e and P_e its mean probability,
        E·Σ_e f_e·P_e. The choices are constants; with `grad`, each layer's dlogits = softmax's VJP of E·f/R
        (times the coefficient) is left beside its routing's saved arrays for its backward."""
        layers = self._aux_layers()
        if not layers:
            return 0.0
        moe = self.blocks[layers[0]].cfg.moe
        assert moe is not None
        E, coef = moe.n_experts, moe.aux_loss_coef
        saved = [tape.saved[f"blocks.{i}.mlp"] for i in layers]
        probs = [F.softmax(kept["logits"].copy(), axis=-1) for kept in saved]  # (N, E) each
        rows = sum(p.shape[0] for p in probs)
        counts = sum(np.bincount(F.top_k(p, moe.top_k).ravel(), minlength=E) for p in probs)  # (E,)
        share, mean_probability = counts / rows, sum(p.sum(axis=0) for p in probs) / rows  # (E,) each
        if grad:
            d_probability = np.asarray(coef * E * share / rows, dtype=probs[0].dtype)  # (E,): d(aux)/dP per row
            for kept, p in zip(saved, probs):
                kept["aux_grad"] = F.softmax_backward(p, np.broadcast_to(d_probability, p.shape))
        return coef * E * float(np.sum(share * mean_probability))

    def _cross_entropy(self, hidden: Array, targets: Array, tape: Tape | None) -> tuple[float, Array | None]:
        """The mean of −log softmax(logits)[target] over the targets that are not -100, LOSS_CHUNK_BYTES of
        logits at a time (a stable log-softmax: each row's maximum taken out before exp). With a tape, each
        chunk's dlogits = (softmax − one-hot)/n back through the soft cap and the multiplier into the head's
        weight and its bias (on the tape) and the head's input (returned, (B, T, e)); never more than a chunk
        of the table. Returns (the loss, that gradient or None)."""
        m = self.model_config
        rows_in, width = hidden.reshape(-1, hidden.shape[-1]), hidden.shape[-1]
        flat = targets.ravel()
        valid = flat != IGNORE_INDEX
        count = int(valid.sum())
        w, _ = self.head_weight()
        bias, cap, multiplier = self.params.get("lm_head_bias"), m.logit_softcap, m.logit_multiplier
        chunk = max(1, LOSS_CHUNK_BYTES // (m.vocab_size * rows_in.itemsize))
        d_hidden = np.empty_like(rows_in) if tape is not None else None
        d_w = np.zeros(w.shape, dtype=rows_in.dtype) if tape is not None else None
        d_bias = np.zeros(m.vocab_size, dtype=rows_in.dtype) if tape is not None and bias is not None else None
        total = 0.0
        for lo in range(0, rows_in.shape[0], chunk):
            rows, keep, target = rows_in[lo:lo + chunk], valid[lo:lo + chunk], flat[lo:lo + chunk]
            logits = self.logits_of(rows)  # (r, V)
            capped_slope = 1.0 - (logits / cap) ** 2 if cap and tape is not None else None  # d(c·tanh(z/c))/dz
            top = logits.max(axis=-1, keepdims=True)  # (r, 1)
            shifted = logits - top
            lse = np.log(np.exp(shifted).sum(axis=-1, keepdims=True))  # (r, 1): log Σ exp, less the maximum
            picked = np.take_along_axis(shifted, np.where(keep, target, 0)[:, None], axis=-1)  # (r, 1)
            total += float(np.sum((lse - picked)[keep], dtype=np.float64))
            if tape is None:
                continue
            d_logits = np.exp(shifted - lse)  # (r, V): softmax
            d_logits[np.flatnonzero(keep), target[keep]] -= 1.0
            d_logits[~keep] = 0.0
            d_logits /= count
            if capped_slope is not None:
                d_logits *= capped_slope
            if multiplier != 1.0:
                d_logits *= multiplier
            d_w += self.ops.weight_grad(rows, d_logits)
            if d_bias is not None:
                d_bias += d_logits.sum(axis=0)
            d_hidden[lo:lo + chunk] = d_logits @ w.T
        if tape is None:
            return total / count, None
        tape.add(*(("wte", self.ops.head_grad_to_table(d_w)) if m.tie_embeddings else ("lm_head", d_w)))
        if d_bias is not None:
            tape.add("lm_head_bias", d_bias)
        return total / count, d_hidden.reshape(hidden.shape[:-1] + (width,))


IGNORE_INDEX = -100  # a label the loss skips (transformers' ignore_index)
FLOAT_STORAGE = ("F64", "F32", "F16", "BF16")  # stored dtypes a gradient can be taken for
LOSS_CHUNK_BYTES = 64 * 2**20  # logits of this many bytes at a time: V = 256k, T = 4096 would be 4 GiB whole


def shifted_targets(ids: Array, labels: Array | None, vocab_size: int) -> Array:
    """What each position predicts (B, T): the next position's label (the ids when no labels are given), -100
    at the last position and where a label is -100. Labels must be ids of the vocabulary or -100, shaped as
    the ids, with at least one left to predict."""
    check_token_ids(ids, vocab_size)
    if labels is None:
        labels = ids
    labels = np.asarray(labels)
    if labels.shape != ids.shape:
        raise InputError(f"labels: expected the ids' shape {ids.shape}, got {labels.shape}")
    if labels.dtype.kind not in "iu":
        raise InputError(f"labels: expected integer token ids (or {IGNORE_INDEX}), got dtype {labels.dtype}")
    if np.any((labels != IGNORE_INDEX) & ((labels < 0) | (labels >= vocab_size))):
        bad = labels[(labels != IGNORE_INDEX) & ((labels < 0) | (labels >= vocab_size))][0]
        raise InputError(f"labels: {bad} is neither a token id below vocab_size={vocab_size} nor {IGNORE_INDEX}")
    targets = np.full(ids.shape, IGNORE_INDEX, dtype=np.int64)
    targets[:, :-1] = labels[:, 1:]
    if not np.any(targets != IGNORE_INDEX):
        raise InputError("labels: no position has a label to predict (each position t predicts label t + 1; "
                         f"the last has none, and {IGNORE_INDEX} is skipped)")
    return targets


def scatter_rows(index: Array, rows: Array, n: int) -> Array:
    """(n, width) with rows[j] added into row index[j], repeated indices summed (a lookup's backward):
    sorted once, summed by run, instead of np.add.at's element-wise loop."""
    order = np.argsort(index, kind="stable")
    sorted_index = index[order]
    starts = np.flatnonzero(np.r_[True, sorted_index[1:] != sorted_index[:-1]])
    out = np.zeros((n, rows.shape[-1]), dtype=rows.dtype)
    out[sorted_index[starts]] = np.add.reduceat(rows[order], starts, axis=0)
    return out


def _prefixed(rec: Record, layer: int) -> Record:
    if rec is _ignore:
        return rec

    def inner(key: str, *args: Any, **kwargs: Any) -> None:
        rec(f"blocks.{layer}.{key}", *args, layer=layer, **kwargs)

    return inner


LOOP_LABEL = "recurrent loop {loop}: norm(h) + norm(x_in)"
NGPT_Q_LABEL = "queries × (s_qk·√d_h/σ)² per channel (nGPT)"
NGPT_GATE_LABEL = "gate × (s_gate·d^¼/σ)² per channel (nGPT)"
NGPT_RESIDUAL = "residual interpolation (nGPT: n + |λ{i}·α|⊙(branch − n))"


def _looped(rec: Record, layer: int, loop: int) -> Record:
    """A later loop's pass of a recurrent layer: its rows under `loop_<j>.blocks.<i>.`, its weights (the first loop's)
    not counted again."""
    if rec is _ignore:
        return rec

    def inner(key: str, *args: Any, **kwargs: Any) -> None:
        kwargs.pop("params", None)
        rec(f"loop_{loop}.blocks.{layer}.{key}", *args, layer=layer, **kwargs)

    return inner


def _within(rec: Record, part: str) -> Record:
    """A part's recorded steps under `part.`, apart from the layer's own: Zamba2's shared block (`shared.`, beside
    its mixer's) and Gemma 4's experts beside the dense MLP (`moe.`, beside the dense MLP's)."""
    if rec is _ignore:
        return rec

    def inner(key: str, *args: Any, **kwargs: Any) -> None:
        rec(f"{part}.{key}", *args, **kwargs)

    return inner
