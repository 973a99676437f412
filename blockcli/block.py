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
`block.attention_softcap` c (Gemma 2) turns the scores into c·tanh(scores/c) before the mask;
`model.logit_softcap` does the same to the logits.
`block.residual_multiplier` r (Granite) scales each branch's output before its add: H = X + r·MHA(LN1(X)).

Every layer declares its parameter shapes from the config alone (`blockcli.shapes`), so counts
and memory estimates never need to allocate. The forward pass can report each operation to a
`record` callback (see `blockcli.trace`); with none given it costs nothing.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from blockcli import ops as F
from blockcli.config import BlockConfig, Config, InputError, ModelConfig
from blockcli.inputs import check_in_range, check_token_ids, load_npz
from blockcli.checkpoint import is_checkpoint_path
from blockcli.ops import STANDARD_OPS, Array, Ops
from blockcli.parallel import share_out
from blockcli.shapes import Shape, block_parameter_shapes, model_parameter_shapes

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
    return f"blocked attention: softmax(mask(Q·Kᵀ/√d_h{' + ALiBi' if cfg.alibi else ''}){sinks})·V"


def softmax_label(cfg: BlockConfig) -> str:
    """The trace's name for the softmax row of the full table."""
    return "softmax over keys and each head's sink logit (its weight dropped)" if cfg.attention_sinks else \
        "softmax over keys"


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
                    notes: list[str] | None = None) -> dict[str, Array]:
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
            from blockcli.checkpoint import load_weights  # safetensors only for checkpoints

            weights = load_weights(Path(weights), config, dtype, notes if notes is not None else [],
                                   one_block=one_block, layer=layer)
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
    layers = sorted({int(k.split(".")[1]) for k in weights if k.startswith("blocks.") and k.split(".")[1].isdigit()})
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

    def __call__(self, x: Array) -> Array:
        """x (…, d) → (…, d). With the standard ops, in row tiles shared among the cores (a seeded
        bug may normalise across rows, so it gets the whole tensor)."""
        fn = self.ops.layer_norm if self.kind == "layernorm" else self.ops.rms_norm
        scale = norm_scale(self.gamma, self.unit_offset)  # (d,), computed per call: edits of gamma count
        if self.ops is not STANDARD_OPS:
            return fn(x, scale, self.beta, self.eps)

        def fill(rows: Array, out: Array) -> None:
            out[...] = fn(rows, scale, self.beta, self.eps)

        dtype = x.dtype if self.gamma is None else np.result_type(x, self.gamma)
        return F.by_rows(fill, x, x.shape[-1], dtype, work=4 * x.size)


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

    def __post_init__(self) -> None:
        p = self.p
        self.w_qkv = np.concatenate([p["w_q"], p["w_k"], p["w_v"]], axis=1)  # (d, (h + 2·h_kv)·d_h)
        self.b_qkv = np.concatenate([p["b_q"], p["b_k"], p["b_v"]]) if "b_q" in p else None
        q_width, kv_width = p["w_q"].shape[1], p["w_k"].shape[1]
        bounds = {"q": (0, q_width), "k": (q_width, q_width + kv_width), "v": (q_width + kv_width, None)}
        for name, (lo, hi) in bounds.items():
            p[f"w_{name}"] = self.w_qkv[:, lo:hi]
            if self.b_qkv is not None:
                p[f"b_{name}"] = self.b_qkv[lo:hi]

    def __call__(self, x: Array, rec: Record = _ignore, cache: KVCache | None = None,
                 drop: Callable[[Array], Array] | None = None) -> Array:
        """x (B, T, d) → (B, T, d). `drop`, in a training-mode pass, is dropout on the attention
        probabilities (it needs the whole table, so it takes the full-table path)."""
        cfg, p, ops = self.cfg, self.p, self.ops
        h, h_kv = cfg.n_heads, cfg.n_kv_heads
        B, T, _ = x.shape
        start = cache.length if cache is not None else 0

        qkv = F.linear(x, self.w_qkv, self.b_qkv)  # (B, T, (h + 2·h_kv)·d_h): one GEMM for Q, K and V
        q_width, kv_width = p["w_q"].shape[1], p["w_k"].shape[1]
        q_flat = qkv[..., :q_width]  # (B, T, h·d_h)
        rec("q_proj", "Q projection", q_flat, (x, p["w_q"]), kind="linear", params=("w_q", "b_q"))
        k_flat = qkv[..., q_width:q_width + kv_width]  # (B, T, h_kv·d_h)
        rec("k_proj", "K projection", k_flat, (x, p["w_k"]), kind="linear", params=("w_k", "b_k"))
        v_flat = qkv[..., q_width + kv_width:]  # (B, T, h_kv·d_h)
        rec("v_proj", "V projection", v_flat, (x, p["w_v"]), kind="linear", params=("w_v", "b_v"))
        if cfg.clip_qkv:  # OLMo: each projection clamped to [-c, c]
            q_flat, k_flat, v_flat = self._clip(q_flat, k_flat, v_flat, rec)

        if cfg.qk_norm == "projection":  # OLMo2: over all of Q's (K's) features, before the heads are split
            q_flat, k_flat = self._qk_norm(q_flat, k_flat, rec)  # (B, T, h·d_h), (B, T, h_kv·d_h)
        q = ops.split_heads(q_flat, h)  # (B, h, T, d_h)
        rec("q", "split heads Q", q, (q_flat,), kind="reshape")
        k = ops.split_heads(k_flat, h_kv)  # (B, h_kv, T, d_h)
        rec("k", "split heads K", k, (k_flat,), kind="reshape")
        v = ops.split_heads(v_flat, h_kv)  # (B, h_kv, T, d_h)
        rec("v", "split heads V", v, (v_flat,), kind="reshape")
        if cfg.qk_norm in ("head", "each_head"):  # Qwen3, Gemma 3 (Command R+: each head its own weights), before RoPE
            q, k = self._qk_norm(q, k, rec)  # (B, h, T, d_h), (B, h_kv, T, d_h)

        if cfg.rope:
            cos, sin = F.rope_tables(np.arange(start, start + T), cfg.rope_dims, cfg.rope_theta, x.dtype,
                                     cfg.rope_scaling)  # (T, r/2) each
            # pairs (i, i + r/2), or (2i, 2i + 1) in the interleaved layout
            q_rot = ops.rotate_pairs(q, cos, sin, cfg.rope_layout)  # (B, h, T, d_h)
            rec("q_rope", "RoPE on Q", q_rot, (q,), kind="rope")
            k_rot = ops.rotate_pairs(k, cos, sin, cfg.rope_layout)  # (B, h_kv, T, d_h)
            rec("k_rope", "RoPE on K", k_rot, (k,), kind="rope")
            q, k = q_rot, k_rot

        if cache is not None:
            k, v = cache.append(k, v)  # (B, h_kv, T_seen, d_h)
        heads = self._attend(q, k, v, start, rec, drop)  # (B, h, T, d_h)
        concat = ops.combine_heads(heads)  # (B, T, h·d_h)
        rec("attn_concat", "combine heads", concat, (heads,), kind="reshape")
        out = ops.project_out(concat, p["w_o"], p.get("b_o"))  # (B, T, d)
        rec("attn_out", "output projection", out, (concat, p["w_o"]), kind="linear", params=("w_o", "b_o"))
        return out

    def _clip(self, q: Array, k: Array, v: Array, rec: Record) -> tuple[Array, Array, Array]:
        """Q, K and V projections clamped to [-clip_qkv, clip_qkv], each its own array."""
        c, out = self.cfg.clip_qkv, []
        for name, a in (("q", q), ("k", k), ("v", v)):
            clipped = np.clip(a, -c, c)  # same shape as a
            rec(f"{name}_clip", f"clip {name.upper()} to ±{c:g}", clipped, (a,), kind="clip")
            out.append(clipped)
        return out[0], out[1], out[2]

    def _qk_norm(self, q: Array, k: Array, rec: Record) -> tuple[Array, Array]:
        """The block's kind of norm over the last axis of queries and keys, each with its own scale."""
        cfg, p = self.cfg, self.p
        out = []
        for name, a in (("q", q), ("k", k)):
            if cfg.qk_norm == "each_head":  # weights (heads, d_h): broadcast over (B, heads, T, d_h)
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
                        cfg.norm_unit_offset)
            normed = norm(a)  # same shape as a
            rec(f"{name}_norm", f"{name.upper()} norm", normed, (a,), kind=cfg.norm,
                params=(f"{name}_norm_gamma", f"{name}_norm_beta"))
            out.append(normed)
        return out[0], out[1]

    def _attend(self, q: Array, k: Array, v: Array, start: int, rec: Record,
                drop: Callable[[Array], Array] | None = None) -> Array:
        """softmax(mask(Q·Kᵀ/√d_h))·V for q (B, h, T_q, d_h) and k, v (B, h_kv, T_k, d_h).

        `full` builds the whole (B, h, T_q, T_k) table from the `Ops` table, one recorded step at a
        time: the obviously correct path, which traces and seeded bugs (any non-standard `Ops`)
        use. Otherwise the blocked kernel computes the same numbers without ever holding the
        table (tests hold them equal).
        """
        B, h, T_q, _ = q.shape
        T_k = k.shape[2]
        table_bytes = B * h * T_q * T_k * q.itemsize
        if (self.ops is not STANDARD_OPS or drop is not None
                or full_table(self.attention, table_bytes, rec is not _ignore, self.chunk_bytes)):
            k_all, v_all = k, v  # grouped-query: each K/V head serves h / h_kv query heads
            if k.shape[1] != h:
                k_all = np.repeat(k, h // k.shape[1], axis=1)  # (B, h, T_k, d_h)
                v_all = np.repeat(v, h // v.shape[1], axis=1)  # (B, h, T_k, d_h)
            scores = self.ops.attention_scores(q, k_all)  # (B, h, T_q, T_k)
            if self.cfg.attention_scale:  # an override of 1/√d_h (Granite's attention_multiplier)
                scores *= np.asarray(self.cfg.attention_scale * math.sqrt(q.shape[-1]), dtype=scores.dtype)
            if self.cfg.softmax_mscale != 1.0:  # DeepSeek's yarn mscale, squared, on the softmax scale
                scores *= np.asarray(self.cfg.softmax_mscale ** 2, dtype=scores.dtype)
            if self.cfg.attention_softcap:  # Gemma 2: c·tanh(scores/c), before the mask
                scores = soft_cap(scores, self.cfg.attention_softcap)
            rec("scores", scores_label(self.cfg), scores, (q, k), kind="matmul")
            if self.cfg.alibi:  # BLOOM: each head's slope times the distance to each key, unscaled
                biased = scores + F.alibi_bias(self.ops.alibi_slopes(h), T_q, T_k, start, scores.dtype)
                rec("alibi_scores", "add ALiBi biases", biased, (scores,), kind="add")
                scores = biased  # (B, h, T_q, T_k)
            allowed = self.ops.causal_mask(T_q, T_k, start)  # (T_q, T_k)
            if self.cfg.sliding_window:
                allowed = allowed & F.window_mask(T_q, T_k, start, self.cfg.sliding_window)
            if self.cfg.attention_sinks:  # gpt-oss: each head's sink logit as one more, always visible key
                masked, weights = self._with_sinks(scores, allowed)
            else:
                masked, weights = self.ops.attention_weights(scores, allowed)
            rec("masked_scores", "causal mask", masked, (scores,), kind="mask")
            rec("attn_weights", softmax_label(self.cfg), weights, (masked,), kind="softmax", params=("sinks",))
            if drop is not None:
                weights = drop(weights)  # (B, h, T_q, T_k): training mode only
            heads = weights @ v_all  # (B, h, T_q, d_h)
            rec("attn_heads", "weights·V", heads, (weights, v), kind="matmul")
            return heads
        heads = self._attend_blocked(q, k, v, start)
        rec("attn_heads", blocked_label(self.cfg), heads, (q, k, v), kind="attention", params=("sinks",))
        return heads

    def _with_sinks(self, scores: Array, allowed: Array) -> tuple[Array, Array]:
        """(masked scores, weights) (B, h, T_q, T_k) when each head's learned sink logit joins its rows'
        softmax as one more key, visible to every query, whose weight is then dropped: a row's weights
        sum to less than 1, the rest going to no value at all."""
        B, h, T_q, T_k = scores.shape
        sinks = np.broadcast_to(self.p["sinks"].astype(scores.dtype)[:, None, None], (B, h, T_q, 1))
        masked, weights = self.ops.attention_weights(np.concatenate([scores, sinks], axis=-1),  # (B, h, T_q, T_k + 1)
                                                     np.pad(allowed, ((0, 0), (0, 1)), constant_values=True))
        return masked[..., :T_k], weights[..., :T_k]

    def _attend_blocked(self, q: Array, k: Array, v: Array, start: int) -> Array:
        """Tiles of query rows × K/V heads (`attention_tile`), shared among the cores.

        A tile sees keys [0, start + end of its rows) only (the rest are all in the future), Q, K
        and V are made contiguous per head (Q with the score scale folded in), only the tile's diagonal
        square needs the mask, the softmax runs in place in one buffer per worker, and rows are
        normalised after ·V (d_h columns instead of T_k), their sums coming out of the same GEMM
        when V is copied. Grouped-query heads share their K/V head without copying it. Attention
        sinks join a row's maximum and its sum (the sink's weight goes to no value).
        """
        B, h, T, d_h = q.shape
        h_kv, T_k, d_v = k.shape[1], k.shape[2], v.shape[-1]  # d_v: the values' width (d_h but under MLA)
        group = h // h_kv
        dtype = np.result_type(q, k)
        qs = np.multiply(q, self.cfg.score_scale, dtype=dtype, order="C").reshape(B, h_kv, group, T, d_h)
        # a tile's keys in one run of memory, not rows strided through the QKV output (15% faster at L)
        k = _rows_contiguous(k)  # (B, h_kv, T_k, d_h)
        # V strided through the QKV output is copied anyway: then with a column of ones beside it, so that
        # weights·[V | 1] also yields each row's sum, one pass over the scores fewer. A K/V cache's
        # buffer is read in place (a copy would cost each decode step O(T_k)) and its sums taken apart.
        v_ones = None
        if not _row_contiguous(v):
            v_ones = np.empty(v.shape[:3] + (d_v + 1,), dtype=np.result_type(dtype, v))  # (B, h_kv, T_k, d_v + 1)
            v_ones[..., :d_v] = v
            v_ones[..., d_v] = 1
        out = np.empty((B, T, h_kv, group, d_v), dtype=dtype)  # written in the combined-heads layout
        rows, heads = attention_tile(h, h_kv, T, T_k, q.itemsize, self.tile_bytes)
        future = np.triu(np.full((rows, rows), -np.inf, dtype=dtype), k=1)  # (C, C)
        window, cap = self.cfg.sliding_window, self.cfg.attention_softcap
        slopes = (F.alibi_slopes(h).astype(dtype).reshape(h_kv, group, 1, 1)  # (h_kv, g, 1, 1): ALiBi's per head
                  if self.cfg.alibi else None)
        sinks = (self.p["sinks"].astype(dtype).reshape(h_kv, group, 1, 1)  # (h_kv, g, 1, 1): each head's sink logit
                 if self.cfg.attention_sinks else None)

        def keys(lo: int, hi: int) -> tuple[int, int]:
            """The keys [first, last) that some query row in [lo, hi) may see."""
            return (max(0, start + lo - window + 1) if window else 0), start + hi

        def run(tiles: Iterable[tuple[int, int, int]]) -> None:
            buf = np.empty(heads * group * rows * T_k, dtype=dtype)
            for b, g, lo in tiles:
                hi = min(T, lo + rows)
                (first, last), kv = keys(lo, hi), slice(g, min(h_kv, g + heads))
                c, seen, n = hi - lo, last - first, kv.stop - g
                q_tile = qs[b, kv, :, lo:hi].reshape(n, group * c, d_h)  # (n, g·C, d_h)
                s = buf[:n * group * c * seen].reshape(n, group * c, seen)
                np.matmul(q_tile, k[b, kv, first:last].swapaxes(-1, -2), out=s)  # (n, g·C, T_seen)
                if cap:
                    soft_cap(s, cap)  # (n, g·C, T_seen), before the mask as in the full path
                if window:  # the band of the window, as in the full path
                    allowed = F.causal_mask(c, seen, start + lo - first) & F.window_mask(c, seen, start + lo - first,
                                                                                         window)  # (C, T_seen)
                    s.reshape(n, group, c, seen)[...] += np.where(allowed, 0.0, -np.inf).astype(dtype)
                else:
                    s.reshape(n, group, c, seen)[..., seen - c:] += future[:c, :c]  # the diagonal square
                if slopes is not None:  # slope · (key − query position) for the tile's heads, rows and keys
                    distance = (np.arange(first, last)[None, :] - (start + np.arange(lo, hi))[:, None]).astype(dtype)
                    s.reshape(n, group, c, seen)[...] += slopes[kv] * distance  # (n, g, C, T_seen)
                top = s.max(axis=-1, keepdims=True)  # (n, g·C, 1)
                sunk = None
                if sinks is not None:  # the sink is one more logit of the row: in its maximum and its sum
                    sink = np.broadcast_to(sinks[kv], (n, group, c, 1)).reshape(n, group * c, 1)  # (n, g·C, 1)
                    np.maximum(top, sink, out=top)
                    sunk = np.exp(sink - top)  # (n, g·C, 1): the sink's unnormalised weight
                s -= top
                np.exp(s, out=s)
                if v_ones is None:
                    total = s.sum(axis=-1, keepdims=True)  # (n, g·C, 1)
                    mixed = s @ v[b, kv, first:last]  # (n, g·C, d_v)
                else:
                    both = s @ v_ones[b, kv, first:last]  # (n, g·C, d_v + 1): weights·V | row sums
                    mixed, total = both[..., :d_v], both[..., d_v:]  # (n, g·C, d_v), (n, g·C, 1)
                if sunk is not None:
                    total = total + sunk
                mixed = np.divide(mixed, total)  # (n, g·C, d_v)
                out[b, lo:hi, kv] = mixed.reshape(n, group, c, d_v).transpose(2, 0, 1, 3)

        def cost(tile: tuple[int, int, int]) -> int:
            first, last = keys(tile[2], min(T, tile[2] + rows))
            return last - first

        tiles = [(b, g, lo) for b in range(B) for g in range(0, h_kv, heads) for lo in range(0, T, rows)]
        share_out(run, tiles, cost=cost,
                  work=B * h * T * (start + T / 2) * (d_h + d_v))  # Q·Kᵀ and weights·V, causal half
        return out.reshape(B, T, h, d_v).transpose(0, 2, 1, 3)  # (B, h, T, d_v) view


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

    def _latent_norm(self, name: str, a: Array, rec: Record, label: str) -> Array:
        cfg, p = self.cfg, self.p
        assert cfg.mla is not None
        norm = Norm(cfg.norm, p[f"{name}_gamma"], p.get(f"{name}_beta"), cfg.mla.latent_norm_eps, self.ops,
                    cfg.norm_unit_offset)
        out = self.ops.normalise_latent(a, norm)  # same shape as a
        rec(name, label, out, (a,), kind=cfg.norm, params=(f"{name}_gamma", f"{name}_beta"))
        return out

    def __call__(self, x: Array, rec: Record = _ignore, cache: KVCache | None = None,
                 drop: Callable[[Array], Array] | None = None) -> Array:
        cfg, p, ops, m = self.cfg, self.p, self.ops, self.cfg.mla
        assert m is not None
        h, r_kv, d_rope = cfg.n_heads, m.kv_lora_rank, m.qk_rope_head_dim
        B, T, _ = x.shape
        start = cache.length if cache is not None else 0

        if m.q_lora_rank:
            q_lat = F.linear(x, p["w_q_a"], p.get("b_q_a"))  # (B, T, r_q)
            rec("q_a", "Q down-projection (latent)", q_lat, (x, p["w_q_a"]), kind="linear", params=("w_q_a", "b_q_a"))
            q_lat = self._latent_norm("q_a_norm", q_lat, rec, "Q latent norm")  # (B, T, r_q)
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
        latent = self._latent_norm("kv_a_norm", kv_a[..., :r_kv], rec, "K/V latent norm")  # (B, T, r_kv)
        k_pe = kv_a[:, None, :, r_kv:]  # (B, 1, T, d_rope): one RoPE key for every head

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

        heads = self._attend(q_cat, k, v, start, rec, drop)  # (B, h, T, d_v)
        concat = ops.combine_heads(heads)  # (B, T, h·d_v)
        rec("attn_concat", "combine heads", concat, (heads,), kind="reshape")
        out = ops.project_out(concat, p["w_o"], p.get("b_o"))  # (B, T, d)
        rec("attn_out", "output projection", out, (concat, p["w_o"]), kind="linear", params=("w_o", "b_o"))
        return out


def _row_contiguous(a: Array) -> bool:
    """Whether each head's (T, d_h) rows of `a` lie in one run of memory (as in a K/V cache's buffer)."""
    return a.strides[-1] == a.itemsize and a.strides[-2] == a.shape[-1] * a.itemsize


def _rows_contiguous(a: Array) -> Array:
    """`a` with each head's (T, d_h) rows in one run of memory: as it is when they already are (a K/V
    cache's buffer), else copied (rows strided through the QKV output)."""
    return a if _row_contiguous(a) else np.ascontiguousarray(a)


def mlp_branches(cfg: BlockConfig) -> tuple[Callable[[Array], Array], Callable[[Array], Array]]:
    """(the activation of x·W_gate + b (x·W_up + b in a plain MLP), what a gated MLP does to the up branch before
    the product):
    the activation and the identity, or gpt-oss's clamped SwiGLU, min(g, c)·σ(α·min(g, c)) · (clip(u, ±c) + 1)."""
    if cfg.activation == "clamped_swiglu":
        alpha, limit = cfg.swiglu_alpha, cfg.swiglu_limit
        return (lambda g: F.clamped_swiglu_gate(g, alpha, limit)), (lambda u: F.clamped_swiglu_up(u, limit))
    return F.ACTIVATION_KERNELS[cfg.activation][0], lambda u: u


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

    def __call__(self, x: Array, rec: Record = _ignore) -> Array:
        """x (B, T, d) → (B, T, d). Untraced, the rows go through in tiles of ROW_TILE shared among
        the cores: the same arithmetic per row, without ever holding the (B, T, d_ff) activation."""
        if rec is not _ignore:
            return self._rows(x, rec)
        d, d_ff = self.p["w_up"].shape
        return F.by_rows(self._fused_rows, x, d, np.result_type(x, self.p["w_up"], self.p["w_down"]),
                         work=x.size * d_ff * (3 if self.cfg.gated else 2))

    def _fused_rows(self, x: Array, out: Array) -> None:
        """One row tile x (r, d) of the untraced pass into out (r, d): `_rows`' arithmetic, with the
        biases, the activation and the gate applied in place a slab of rows at a time, so their
        passes over the (r, d_ff) activation stay in cache instead of streaming it through memory."""
        p, (act, partner), first = self.p, mlp_branches(self.cfg), activated(self.cfg)
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
            z[...] = a
        np.matmul(pre, p["w_down"], out=out)  # (r, d)
        if "b_down" in p:
            out += p["b_down"]

    def _rows(self, x: Array, rec: Record = _ignore) -> Array:
        p, (activation, partner), first = self.p, mlp_branches(self.cfg), activated(self.cfg)
        pre = F.linear(x, p["w_" + first], p.get("b_" + first))  # (…, d_ff)
        rec("mlp_pre", "MLP " + mlp_stage(self.cfg, "pre"), pre, (x, p["w_" + first]), kind="linear",
            params=("w_" + first, "b_" + first))
        act = activation(pre)  # (…, d_ff)
        inputs: tuple[Array, ...] = (pre,)
        if self.cfg.gated:
            up = F.linear(x, p["w_up"], p.get("b_up"))  # (…, d_ff)
            rec("mlp_up", "MLP " + mlp_stage(self.cfg, "up"), up, (x, p["w_up"]), kind="linear", params=("w_up", "b_up"))
            act = act * partner(up)
            inputs = (pre, up)  # act(gate) ⊙ up reads both
        rec("mlp_act", f"activation ({self.cfg.mlp_kind})", act, inputs, kind=self.cfg.mlp_kind)
        out = F.linear(act, p["w_down"], p.get("b_down"))  # (…, d)
        rec("mlp_out", "MLP " + mlp_stage(self.cfg, "out"), out, (act, p["w_down"]), kind="linear",
            params=("w_down", "b_down"))
        return out


def experts_label(stage: str, moe: Any, tokens: int) -> str:
    """The trace's name for one stage of all routed experts together (analytic rows, merged rows):
    the routed rows in all are exactly tokens·k; per expert only their expectation is known."""
    rows = tokens * moe.top_k
    return (f"experts {stage} (all {moe.n_experts}: {rows:,} routed rows = B·T·k; "
            f"expected B·T·k/E = {rows / moe.n_experts:.3g} per expert)")


def routing_label(moe: Any) -> str:
    """The trace's name for the routing weights, with what is done to them."""
    return ("routing weights" + (" (softmax of the k logits)" if moe.order == "topk_softmax" else "")
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

    def route(self, x: Array, rec: Record = _ignore) -> tuple[Array, Array]:
        """(chosen experts (B, T, k), their weights (B, T, k)) for x (B, T, d)."""
        moe, p, ops = self.cfg.moe, self.p, self.ops
        assert moe is not None
        B, T, d = x.shape
        N, E, k = B * T, moe.n_experts, moe.top_k
        logits = x.reshape(N, d) @ p["router"]  # (N, E)
        if moe.logit_bias:  # gpt-oss: the router is a linear layer with a bias
            logits += p["b_router"]
        logits3 = logits.reshape(B, T, E)
        rec("router_logits", "router logits", logits3, (x, p["router"]), kind="linear", params=("router", "b_router"))
        if moe.order == "topk_softmax":  # the k largest logits, then a softmax over those k
            chosen = ops.top_k(logits, k)  # (N, k)
            weights = ops.router_probabilities(np.take_along_axis(logits, chosen, axis=-1), "softmax")  # (N, k)
            scores3 = logits3
        else:
            scores = ops.router_probabilities(logits, moe.scoring)  # (N, E)
            scores3 = scores.reshape(B, T, E)
            rec("router_scores", f"router scores ({moe.scoring} over experts)", scores3, (logits3,), kind=moe.scoring)
            choice = scores
            if moe.selection_bias:  # for choosing only: the weights are the unbiased scores
                choice = scores + p["router_bias"]  # (N, E)
            if moe.n_groups > 1:  # only the experts of the top_groups best groups may be chosen
                grouped = choice.reshape(N, moe.n_groups, E // moe.n_groups)  # (N, G, E/G)
                group_scores = (grouped.max(axis=-1) if moe.group_score == "max"
                                else np.sort(grouped, axis=-1)[..., -2:].sum(axis=-1))  # (N, G)
                allowed = np.zeros((N, moe.n_groups), dtype=bool)
                np.put_along_axis(allowed, ops.top_k(group_scores, moe.top_groups), True, axis=-1)
                choice = np.where(np.repeat(allowed, E // moe.n_groups, axis=-1), choice, -np.inf)  # (N, E)
            chosen = ops.top_k(choice, k)  # (N, k)
            weights = np.take_along_axis(scores, chosen, axis=-1)  # (N, k)
            if moe.renormalize:
                weights = ops.renormalize(weights)
        if moe.routed_scaling != 1.0:
            weights = weights * np.asarray(moe.routed_scaling, dtype=weights.dtype)
        chosen3, weights3 = chosen.reshape(B, T, -1), weights.reshape(B, T, -1)  # (B, T, k) each
        rec("router_choice", f"top-{k} experts per token", chosen3, (scores3,), kind="topk")
        rec("router_weights", routing_label(moe), weights3, (scores3,), kind="gather")
        return chosen3, weights3

    def __call__(self, x: Array, rec: Record = _ignore) -> Array:
        """x (B, T, d) → (B, T, d)."""
        moe, p = self.cfg.moe, self.p
        assert moe is not None
        B, T, d = x.shape
        flat = x.reshape(B * T, d)  # (N, d)
        chosen3, weights3 = self.route(x, rec)  # (B, T, k) each
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
            ye = self._mlp(xe, key, f"expert {e}", rec)  # (n_e, d)
            outs.append(ye)
            out[rows] += weights[slots, None] * ye  # each token once per expert: no repeated rows
        routed = out.reshape(B, T, d)
        label = f"weighted sum of the {moe.top_k} routed experts' outputs"
        if not moe.d_shared:
            rec("mlp_out", label, routed, (weights3, *outs), kind="combine")
            return routed
        rec("moe_routed", label, routed, (weights3, *outs), kind="combine")
        shared = self._mlp(x, "shared_", "shared expert", rec)  # (B, T, d)
        if moe.shared_gate:
            gate = x @ p["shared_gate"]  # (B, T, 1)
            rec("shared_gate", "shared expert gate logit", gate, (x, p["shared_gate"]), kind="linear",
                params=("shared_gate",))
            gated = F.sigmoid(gate) * shared  # (B, T, d)
            rec("shared_gated", "shared expert × sigmoid(gate)", gated, (gate, shared), kind="gate")
            shared = gated
        total = self.ops.add_shared(routed, shared)  # (B, T, d)
        rec("mlp_out", "routed + shared experts", total, (routed, shared), kind="add")
        return total

    def _mlp(self, x: Array, key: str, label: str, rec: Record) -> Array:
        """One expert's MLP on its rows x (n, d) (or (B, T, d) for the shared one): as `MLP`, its biases when
        block.bias.mlp."""
        p, act_name, (activation, partner), first = self.p, self.cfg.mlp_kind, mlp_branches(self.cfg), activated(self.cfg)

        def linear(a: Array, role: str) -> Array:
            out = a @ p[key + "w_" + role]
            if key + "b_" + role in p:
                out += p[key + "b_" + role]
            return out

        pre = linear(x, first)  # (n, d_e)
        rec(key + "pre", f"{label} {mlp_stage(self.cfg, 'pre')}", pre, (x, p[key + "w_" + first]), kind="linear",
            params=(key + "w_" + first, key + "b_" + first))
        act = activation(pre)  # (n, d_e)
        inputs: tuple[Array, ...] = (pre,)
        if self.cfg.gated:
            up = linear(x, "up")  # (n, d_e)
            rec(key + "up", f"{label} {mlp_stage(self.cfg, 'up')}", up, (x, p[key + "w_up"]), kind="linear",
                params=(key + "w_up", key + "b_up"))
            act = act * partner(up)
            inputs = (pre, up)
        rec(key + "act", f"{label} activation ({act_name})", act, inputs, kind=act_name)
        out = linear(act, "down")  # (n, d)
        rec(key + "out", f"{label} {mlp_stage(self.cfg, 'out')}", out, (act, p[key + "w_down"]), kind="linear",
            params=(key + "w_down", key + "b_down"))
        return out


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
        self.ln1 = Norm(cfg.norm, p.get("ln1_gamma"), p.get("ln1_beta"), cfg.norm_eps, self.ops, cfg.norm_unit_offset)
        self.attn = (LatentAttention if cfg.mla else MultiHeadAttention)(cfg, p, self.ops, self.attention)
        self.ln2 = (None if cfg.shared_norm else
                    Norm(cfg.norm, p.get("ln2_gamma"), p.get("ln2_beta"), cfg.norm_eps, self.ops, cfg.norm_unit_offset))
        self.mlp = MixtureOfExperts(cfg, p, self.ops) if cfg.moe is not None else MLP(cfg, p)
        # sandwich: the norms of the two branch outputs (None otherwise)
        self.ln1_post, self.ln2_post = ((Norm(cfg.norm, p.get(f"{w}_gamma"), p.get(f"{w}_beta"), cfg.norm_eps, self.ops,
                                              cfg.norm_unit_offset) for w in ("ln1_post", "ln2_post"))
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
                 train: bool = False, rng: np.random.Generator | None = None) -> Array:
        """x (B, T, d) → y (B, T, d). `train` applies dropout to the attention probabilities
        (`attention_dropout`) and to the two branch outputs (`dropout`), all drawn from `rng`."""
        check_block_input(x, self.cfg.d_model)
        add, norm = self.ops.residual_add, self.cfg.norm
        rng = rng or np.random.default_rng()
        drop = _dropout(self.cfg.dropout, rng) if train and self.cfg.dropout else (lambda a: a)
        r = _residual_scale(self.cfg.residual_multiplier)  # r·branch; recorded steps read the branch itself
        drop_probs = _dropout(self.cfg.attention_dropout, rng) if train and self.cfg.attention_dropout else None
        if self.cfg.placement == "pre":
            n1 = self.ln1(x)  # (B, T, d)
            rec("ln1_out", "LN1", n1, (x,), kind=norm, params=("ln1_gamma", "ln1_beta"))
            a = drop(self.attn(n1, rec, cache, drop_probs))  # (B, T, d)
            h = add(x, r(a))  # (B, T, d)
            rec("h", "residual add", h, (x, a), kind="add")
            n2 = self.ln2(h)  # (B, T, d)
            rec("ln2_out", "LN2", n2, (h,), kind=norm, params=("ln2_gamma", "ln2_beta"))
            m = drop(self.mlp(n2, rec))  # (B, T, d)
            y = add(h, r(m))  # (B, T, d)
            rec("y", "residual add", y, (h, m), kind="add")
        elif self.cfg.placement == "post":
            a = drop(self.attn(x, rec, cache, drop_probs))
            s1 = add(x, r(a))
            rec("h_pre", "residual add", s1, (x, a), kind="add")
            h = self.ln1(s1)
            rec("h", "LN1 (post)", h, (s1,), kind=norm, params=("ln1_gamma", "ln1_beta"))
            m = drop(self.mlp(h, rec))
            s2 = add(h, r(m))
            rec("y_pre", "residual add", s2, (h, m), kind="add")
            y = self.ln2(s2)
            rec("y", "LN2 (post)", y, (s2,), kind=norm, params=("ln2_gamma", "ln2_beta"))
        elif self.cfg.placement == "sandwich":  # Gemma 2/3: a norm before and after each branch
            n1 = self.ln1(x)  # (B, T, d)
            rec("ln1_out", "LN1", n1, (x,), kind=norm, params=("ln1_gamma", "ln1_beta"))
            a = drop(self.attn(n1, rec, cache, drop_probs))  # (B, T, d)
            p1 = self.ln1_post(a)  # (B, T, d)
            rec("ln1_post_out", "LN1' (of the attention output)", p1, (a,), kind=norm,
                params=("ln1_post_gamma", "ln1_post_beta"))
            h = add(x, r(p1))  # (B, T, d)
            rec("h", "residual add", h, (x, p1), kind="add")
            n2 = self.ln2(h)  # (B, T, d)
            rec("ln2_out", "LN2", n2, (h,), kind=norm, params=("ln2_gamma", "ln2_beta"))
            m = drop(self.mlp(n2, rec))  # (B, T, d)
            p2 = self.ln2_post(m)  # (B, T, d)
            rec("ln2_post_out", "LN2' (of the MLP output)", p2, (m,), kind=norm,
                params=("ln2_post_gamma", "ln2_post_beta"))
            y = add(h, r(p2))  # (B, T, d)
            rec("y", "residual add", y, (h, p2), kind="add")
        elif self.cfg.placement == "post_branch":  # OLMo2: each branch's output normalised, then added
            a = drop(self.attn(x, rec, cache, drop_probs))  # (B, T, d)
            n1 = self.ln1(r(a))  # (B, T, d)
            rec("ln1_out", "LN1 (of the attention output)", n1, (a,), kind=norm, params=("ln1_gamma", "ln1_beta"))
            h = add(x, n1)  # (B, T, d)
            rec("h", "residual add", h, (x, n1), kind="add")
            m = drop(self.mlp(h, rec))  # (B, T, d)
            n2 = self.ln2(r(m))  # (B, T, d)
            rec("ln2_out", "LN2 (of the MLP output)", n2, (m,), kind=norm, params=("ln2_gamma", "ln2_beta"))
            y = add(h, n2)  # (B, T, d)
            rec("y", "residual add", y, (h, n2), kind="add")
        else:  # parallel: both branches read x, through their own norms or one shared norm
            n1 = self.ln1(x)
            rec("ln1_out", "LN1", n1, (x,), kind=norm, params=("ln1_gamma", "ln1_beta"))
            a = drop(self.attn(n1, rec, cache, drop_probs))
            h = add(x, r(a))
            rec("h", "residual add (attention)", h, (x, a), kind="add")
            n2 = n1  # parallel_shared: the MLP reads LN1's output too
            if self.ln2 is not None:
                n2 = self.ln2(x)
                rec("ln2_out", "LN2", n2, (x,), kind=norm, params=("ln2_gamma", "ln2_beta"))
            m = drop(self.mlp(n2, rec))
            y = add(h, r(m))
            rec("y", "residual add (MLP)", y, (h, m), kind="add")
        return y

    def new_cache(self) -> KVCache:
        return KVCache()

    def step(self, x_new: Array, cache: KVCache, rec: Record = _ignore) -> Array:
        """Incremental decoding: the outputs for tokens appended after those already in `cache`."""
        return self(x_new, rec, cache)


def _residual_scale(multiplier: float) -> Callable[[Array], Array]:
    """A branch's output times the residual multiplier (Granite), in the output's dtype."""
    if multiplier == 1.0:
        return lambda a: a
    return lambda a: a * np.asarray(multiplier, dtype=a.dtype)


def _dropout(rate: float, rng: np.random.Generator) -> Callable[[Array], Array]:
    def drop(a: Array) -> Array:
        keep = rng.random(a.shape) >= rate
        return np.where(keep, a / (1.0 - rate), 0).astype(a.dtype)

    return drop


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
            self.blocks.append(block)
        b = self.config.block
        self.emb_ln = (Norm(b.norm, self.params.get("emb_ln_gamma"), self.params.get("emb_ln_beta"), b.norm_eps,
                            self.ops, b.norm_unit_offset) if model.embedding_norm else None)
        self.ln_f = (Norm(b.norm, self.params.get("ln_f_gamma"), self.params.get("ln_f_beta"), b.norm_eps, self.ops,
                          b.norm_unit_offset) if model.final_norm else None)

    @classmethod
    def from_config(cls, config: Config, weights: str | Path | Mapping[str, Any] | None = None, *,
                    dtype: str | None = None, seed: int | None = None, ops: Ops = STANDARD_OPS,
                    attention: str = "auto") -> "Model":
        if config.model is None:
            raise InputError(f"{config.name}: has no 'model' section; a model needs n_layers and vocab_size")
        dtype = dtype or config.run.dtype
        seed = config.run.seed if seed is None else seed
        notes: list[str] = []
        params = resolve_weights(weights, model_parameter_shapes(config), seed, dtype, config=config, notes=notes)
        return cls(config, params, ops, attention, notes)

    @property
    def model_config(self) -> ModelConfig:
        assert self.config.model is not None
        return self.config.model

    def embed(self, ids: Array, start: int = 0, rec: Record = _ignore) -> Array:
        """Token ids (B, T) → X_0 (B, T, d): E[ids] plus positions (none for rope/alibi/none), then the
        embedding norm if the model has one."""
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
            table = F.sinusoidal_positions(positions, d, tokens.dtype)  # (T, d)
            x = tokens + table  # (B, T, d)
            rec("embed", "add sinusoidal positions", x, (tokens, table), kind="add")
        else:
            x = tokens  # rope rotates q and k inside attention, alibi biases the scores; none adds nothing
        if self.emb_ln is not None:  # BLOOM's word_embeddings_layernorm
            normed = self.emb_ln(x)  # (B, T, d)
            rec("embed_norm", "embedding norm", normed, (x,), kind=self.config.block.norm,
                params=("emb_ln_gamma", "emb_ln_beta"))
            x = normed
        return x

    def head(self, x: Array, rec: Record = _ignore) -> Array:
        """Final norm and vocabulary projection: (B, T, d) → (B, T, V)."""
        if self.ln_f is not None:
            normed = self.ln_f(x)  # (B, T, d)
            rec("ln_f_out", "final norm", normed, (x,), kind=self.config.block.norm, params=("ln_f_gamma", "ln_f_beta"))
            x = normed
        if "proj_out" in self.params:  # OPT-350m: back to the embeddings' width e
            narrow = F.linear(x, self.params["proj_out"], None)  # (B, T, e)
            rec("proj_out", "project out (d → e)", narrow, (x, self.params["proj_out"]), kind="linear",
                params=("proj_out",))
            x = narrow
        if self.model_config.tie_embeddings:
            w = self.params["wte"].T  # (d, V): the embedding table reused
            params: tuple[str, ...] = ("wte (tied)",)
        else:
            w, params = self.params["lm_head"], ("lm_head",)
        logits = F.linear(x, w, self.params.get("lm_head_bias"))  # (B, T, V)
        multiplier = self.model_config.logit_multiplier
        if multiplier != 1.0:  # Cohere's logit_scale, Granite's 1 / logits_scaling
            logits *= np.asarray(multiplier, dtype=logits.dtype)
        if self.model_config.logit_softcap:  # Gemma 2's final_logit_softcapping
            logits = soft_cap(logits, self.model_config.logit_softcap)
        rec("logits", logits_label(self.model_config), logits, (x, w), kind="linear", params=params + ("lm_head_bias",))
        return logits

    def __call__(self, ids: Array, rec: Record = _ignore, caches: list[KVCache] | None = None) -> Array:
        start = caches[0].length if caches else 0
        x = self.embed(ids, start, rec)
        for i, block in enumerate(self.blocks):
            x = block(x, _prefixed(rec, i), caches[i] if caches else None)
        return self.head(x, rec)

    def new_cache(self) -> list[KVCache]:
        return [KVCache() for _ in self.blocks]

    def step(self, ids_new: Array, caches: list[KVCache], rec: Record = _ignore) -> Array:
        """Incremental decoding: logits for tokens appended after those already in `caches`."""
        return self(ids_new, rec, caches)


def _prefixed(rec: Record, layer: int) -> Record:
    if rec is _ignore:
        return rec

    def inner(key: str, *args: Any, **kwargs: Any) -> None:
        rec(f"blocks.{layer}.{key}", *args, layer=layer, **kwargs)

    return inner
