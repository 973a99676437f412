"""Trace a forward pass: one row per operation, with shapes, parameters, FLOPs and bytes.

The block reports each operation to a `Recorder` as it executes, so the shapes in a trace are
the shapes of the real arrays. For configs too large to run, `analytic_trace` feeds the same
recorder shape-only stand-ins in the same order (a test holds the two equal).

FLOPs convention: 2 × multiply-adds for matmuls (`matmul_flops`); the score products count the
full T×T table, as the code computes it, and the causal half (pairs s <= t) is shown beside them.
Elementwise work is added to `flops` at the fixed per-element costs in `ELEMENT_FLOPS`.
"""

from __future__ import annotations

import math
import os
import tracemalloc
import weakref
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

import numpy as np

from blockcli.block import (CHUNK_TABLE_BYTES, DecoderBlock, Model, attention_tile, block_parameter_shapes,
                            full_table, model_parameter_shapes)
from blockcli.config import Config, InputError

# Per-element FLOPs of the elementwise operations (a convention, stated in the README).
ELEMENT_FLOPS = {
    "add": 1, "layernorm": 5, "rmsnorm": 3, "softmax": 4, "mask": 0, "rope": 3,
    "gelu_tanh": 8, "gelu": 8, "relu": 1, "silu": 4, "swiglu": 5, "geglu": 9,
    "reshape": 0, "gather": 0,
}

# The symbolic shape of each recorded tensor, in the one shape vocabulary.
SYMBOLIC = {
    "tok_emb": "(B, T, d)", "embed": "(B, T, d)", "ln1_out": "(B, T, d)", "h": "(B, T, d)",
    "h_pre": "(B, T, d)", "ln2_out": "(B, T, d)", "y_pre": "(B, T, d)", "y": "(B, T, d)",
    "q_proj": "(B, T, h·d_h)", "k_proj": "(B, T, h_kv·d_h)", "v_proj": "(B, T, h_kv·d_h)",
    "q": "(B, h, T, d_h)", "k": "(B, h_kv, T, d_h)", "v": "(B, h_kv, T, d_h)",
    "q_rope": "(B, h, T, d_h)", "k_rope": "(B, h_kv, T, d_h)",
    "scores": "(B, h, T, T)", "masked_scores": "(B, h, T, T)", "attn_weights": "(B, h, T, T)",
    "attn_heads": "(B, h, T, d_h)", "attn_concat": "(B, T, h·d_h)", "attn_out": "(B, T, d)",
    "mlp_pre": "(B, T, d_ff)", "mlp_up": "(B, T, d_ff)", "mlp_act": "(B, T, d_ff)", "mlp_out": "(B, T, d)",
    "ln_f_out": "(B, T, d)", "logits": "(B, T, V)",
}

@dataclass
class OpRow:
    step: int
    key: str  # e.g. "q", or "blocks.3.q" inside a model
    op: str
    kind: str
    layer: int | None
    input_shapes: list[tuple[int, ...]]
    output_shape: tuple[int, ...]
    symbolic: str
    params: int
    flops: int
    matmul_flops: int
    causal_flops: int | None
    bytes: int
    repeat: int = 1  # > 1 for a row standing for the same op in every layer
    sources: list[int | None] = field(default_factory=list)  # per input: producing step, 0 the pass input, None a parameter


@dataclass
class ShapeOnly:
    """A stand-in for an array: what the recorder reads, and nothing allocated."""

    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize


class Recorder:
    """The `rec` callback of the forward pass: turns each reported operation into an OpRow."""

    def __init__(self, param_sizes: Mapping[str, int], keep: bool = False, pass_input: Any = None) -> None:
        self.param_sizes = param_sizes
        self.keep = keep
        self.rows: list[OpRow] = []
        self.arrays: dict[str, np.ndarray] = {}
        self.first_nonfinite: OpRow | None = None
        # Data flow: which step produced each live array (an entry goes when its array dies,
        # so a reused id never points at the wrong step).
        self._producer: dict[int, int] = {}
        if pass_input is not None:
            self._track(pass_input, 0)

    def _track(self, array: Any, step: int) -> None:
        self._producer[id(array)] = step
        weakref.finalize(array, self._producer.pop, id(array), None)

    def __call__(self, key: str, op: str, out: Any, inputs: Sequence[Any], kind: str,
                 params: Sequence[str] = (), layer: int | None = None) -> None:
        prefix = f"blocks.{layer}." if layer is not None else ""
        used = [self.param_sizes[prefix + p] for p in params if prefix + p in self.param_sizes]
        if "wte (tied)" in params:
            used.append(self.param_sizes["wte"])
        matmul, causal = _matmul_flops(kind, out, inputs)
        has_bias = kind == "linear" and len(used) > 1
        element = ELEMENT_FLOPS.get(kind, 0) * out.size + (out.size if has_bias else 0)
        base = key.rsplit(".", 1)[-1]
        self.rows.append(OpRow(
            step=len(self.rows) + 1, key=key, op=op, kind=kind, layer=layer,
            input_shapes=[tuple(a.shape) for a in inputs], output_shape=tuple(out.shape),
            symbolic=SYMBOLIC.get(base, ""), params=sum(used), flops=matmul + element,
            matmul_flops=matmul, causal_flops=causal, bytes=int(out.nbytes),
            sources=[self._producer.get(id(a)) for a in inputs]))
        self._track(out, len(self.rows))
        if (self.first_nonfinite is None and kind != "mask" and isinstance(out, np.ndarray)
                and not np.isfinite(out).all()):  # the masked scores hold -inf on purpose
            self.first_nonfinite = self.rows[-1]
        if self.keep and isinstance(out, np.ndarray):
            self.arrays[key] = out


def _matmul_flops(kind: str, out: Any, inputs: Sequence[Any]) -> tuple[int, int | None]:
    """(full-table matmul FLOPs, causal-half FLOPs or None) for one operation."""
    if kind == "linear":
        return 2 * out.size * inputs[0].shape[-1], None
    if kind == "matmul":  # scores (q, k) or weights·V (weights, v): 2·B·h·T_q·T_k·d_h either way
        a, b = inputs  # b is K or V, (B, h_kv, T_k, d_h): its last axis is d_h either way
        t_q, t_k, d_h = a.shape[-2], b.shape[-2], b.shape[-1]
        full = 2 * math.prod(a.shape[:-2]) * t_q * t_k * d_h
        return full, int(full * _causal_fraction(t_q, t_k))
    if kind == "attention":  # chunked: both products at once
        q, k, _ = inputs
        full = 4 * math.prod(q.shape[:-2]) * q.shape[-2] * k.shape[-2] * q.shape[-1]
        return full, int(full * _causal_fraction(q.shape[-2], k.shape[-2]))
    return 0, None


def _causal_fraction(t_q: int, t_k: int):
    """Fraction of the (t_q, t_k) table a causal query can see, as an exact rational."""
    from fractions import Fraction

    visible = sum(min(t_k, t_k - t_q + i + 1) for i in range(t_q)) if t_q <= t_k else t_q * t_k
    return Fraction(visible, t_q * t_k)


@dataclass
class Trace:
    config: Config
    rows: list[OpRow]
    mode: str  # "executed" or "analytic"
    batch: int
    seq_len: int
    dtype: str
    attention: str  # full | chunked
    notes: list[str] = field(default_factory=list)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    output: np.ndarray | None = None
    peak_bytes: int = 0
    peak_measured: bool = False

    @property
    def totals(self) -> dict[str, Any]:
        cfg = self.config
        b = cfg.block
        itemsize = np.dtype(self.dtype).itemsize
        layers = cfg.model.n_layers if cfg.model else 1
        shapes = model_parameter_shapes(cfg) if cfg.model else block_parameter_shapes(b)
        T = self.seq_len
        rows, heads = attention_tile(b.n_heads, b.n_kv_heads, T, T, itemsize)
        return {
            "flops": sum(r.flops for r in self.rows),
            "matmul_flops": sum(r.matmul_flops for r in self.rows),
            "causal_matmul_flops": sum(int(r.causal_flops) if r.causal_flops is not None else r.matmul_flops
                                       for r in self.rows),
            "parameters": sum(math.prod(s) for s in shapes.values()),
            "peak_activation_bytes": self.peak_bytes,
            "peak_measured": self.peak_measured,
            "largest_score_table_bytes": (self.batch * b.n_heads * T * T if self.attention == "full" else
                                          heads * b.n_heads // b.n_kv_heads * rows * T) * itemsize,
            "kv_cache_bytes": 2 * layers * self.batch * self.seq_len * b.n_kv_heads * b.head_dim * itemsize,
        }


# ----------------------------------------------------------------------------- running


def with_run(config: Config, batch: int | None = None, seq_len: int | None = None,
             dtype: str | None = None) -> Config:
    """The config with --batch/--seq/--dtype applied."""
    for name, value in (("--batch", batch), ("--seq", seq_len)):
        if value is not None and value < 1:
            raise InputError(f"{name}: expected a positive integer, got {value}")
    if dtype is not None and dtype not in ("float32", "float64"):
        raise InputError(f"--dtype: expected float32 or float64, got '{dtype}'")
    run = replace(config.run, batch=batch or config.run.batch, seq_len=seq_len or config.run.seq_len,
                  dtype=dtype or config.run.dtype)
    m = config.model
    if m is not None and m.positions == "learned" and run.seq_len > m.max_positions:
        raise InputError(f"sequence of {run.seq_len} tokens exceeds model.max_positions={m.max_positions} "
                         f"(learned positions); use a smaller --seq")
    return replace(config, run=run)


def forward_bytes_estimate(config: Config, attention: str = "auto") -> int:
    """Bytes a real forward pass needs: parameters, the residual stream, and one layer's intermediates."""
    b, m, run = config.block, config.model, config.run
    B, T, itemsize = run.batch, run.seq_len, np.dtype(run.dtype).itemsize
    shapes = model_parameter_shapes(config) if m else block_parameter_shapes(b)
    params = sum(math.prod(s) for s in shapes.values())
    table = B * b.n_heads * T * T
    if not full_table(attention, table * itemsize, traced=True):
        table = min(table, CHUNK_TABLE_BYTES // itemsize)
    per_layer = (8 * B * T * b.d_model + 3 * B * T * b.d_ff
                 + 3 * B * T * (b.n_heads + 2 * b.n_kv_heads) * b.head_dim + 3 * table)
    logits = B * T * m.vocab_size if m else 0
    return (params + per_layer + 2 * logits) * itemsize


def available_bytes() -> int:
    """Memory this process may use: BLOCKCLI_MEMORY_LIMIT if set, else MemAvailable."""
    limit = os.environ.get("BLOCKCLI_MEMORY_LIMIT")
    if limit:
        if not (limit.strip().isascii() and limit.strip().isdigit()):  # isdigit alone accepts "²"
            raise InputError(f"BLOCKCLI_MEMORY_LIMIT: expected a number of bytes, got '{limit}'")
        return int(limit)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))


def seeded_input(config: Config) -> np.ndarray:
    """The input a trace runs on when none is given: ids for a model, N(0, 1) states for a block."""
    rng = np.random.default_rng(config.run.seed + 1)
    shape = (config.run.batch, config.run.seq_len)
    if config.model:
        return rng.integers(0, config.model.vocab_size, size=shape)
    return rng.standard_normal(shape + (config.block.d_model,)).astype(config.run.dtype)


def run_trace(config: Config, *, weights: Any = None, x: np.ndarray | None = None,
              attention: str = "auto", keep: bool = False) -> Trace:
    """Run a real forward pass and record every operation."""
    if x is None:
        x = seeded_input(config)
    elif config.model is None:
        x = x.astype(config.run.dtype)
    net = (Model if config.model else DecoderBlock).from_config(config, weights, attention=attention)
    sizes = {k: v.size for k, v in net.params.items()}
    rec = Recorder(sizes, keep=keep, pass_input=x)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        baseline = tracemalloc.get_traced_memory()[0]
        try:
            with np.errstate(over="raise", invalid="raise"):  # overflow is an error, never a quiet NaN or 0
                out = net(x, rec)
        except FloatingPointError as exc:
            last = rec.rows[-1] if rec.rows else None
            where = f"after step {last.step} ({last.op}, {last.key})" if last else "in the first step"
            raise InputError(f"the forward pass overflowed {where} in {config.run.dtype} ({exc}); "
                             + _overflow_hint(config)) from None
        peak = tracemalloc.get_traced_memory()[1] - baseline
    finally:
        tracemalloc.stop()
    bad = rec.first_nonfinite
    if bad is not None:
        raise InputError(f"the forward pass overflowed: non-finite values first appear at step {bad.step} "
                         f"({bad.op}, {bad.key}) in {config.run.dtype}; " + _overflow_hint(config))
    chunked = any(r.kind == "attention" for r in rec.rows)
    return Trace(config, rec.rows, "executed", x.shape[0], x.shape[1], config.run.dtype,
                 "chunked" if chunked else "full", arrays=rec.arrays, output=out,
                 peak_bytes=peak, peak_measured=True)


def _overflow_hint(config: Config) -> str:
    if config.run.dtype == "float32":
        return "use --dtype float64 or smaller inputs or weights"
    return "use smaller inputs or weights"


def analytic_trace(config: Config, attention: str = "auto") -> Trace:
    """The same rows as `run_trace`, from shapes alone: nothing is allocated."""
    b, m, run = config.block, config.model, config.run
    dt = np.dtype(run.dtype)
    B, T = run.batch, run.seq_len
    S = lambda *shape: ShapeOnly(tuple(shape), dt)  # noqa: E731
    shapes = model_parameter_shapes(config) if m else block_parameter_shapes(b)
    rec = Recorder({k: math.prod(s) for k, s in shapes.items()})
    chunked = not full_table(attention, B * b.n_heads * T * T * dt.itemsize, traced=True)
    if m:
        ids, wte = ShapeOnly((B, T), np.dtype(np.int64)), S(m.vocab_size, b.d_model)
        rec("tok_emb", "token embedding", S(B, T, b.d_model), (ids, wte), kind="gather", params=("wte",))
        if m.positions in ("learned", "sinusoidal"):
            rec("embed", f"add {m.positions} positions", S(B, T, b.d_model), (S(B, T, b.d_model), S(T, b.d_model)),
                kind="add", params=("wpe",) if m.positions == "learned" else ())
        for layer in range(m.n_layers):
            _analytic_block(config, lambda key, *a, **k: rec(f"blocks.{layer}.{key}", *a, layer=layer, **k),
                            S, chunked)
        d = b.d_model
        if m.final_norm:
            rec("ln_f_out", "final norm", S(B, T, d), (S(B, T, d),), kind=b.norm, params=("ln_f_gamma", "ln_f_beta"))
        w, names = (S(d, m.vocab_size), ("wte (tied)",)) if m.tie_embeddings else (S(d, m.vocab_size), ("lm_head",))
        rec("logits", "LM head", S(B, T, m.vocab_size), (S(B, T, d), w), kind="linear",
            params=names + ("lm_head_bias",))
    else:
        _analytic_block(config, rec, S, chunked)
    estimate = forward_bytes_estimate(config, attention) - sum(math.prod(s) for s in shapes.values()) * dt.itemsize
    return Trace(config, rec.rows, "analytic", B, T, run.dtype, "chunked" if chunked else "full",
                 peak_bytes=estimate, peak_measured=False)


def _analytic_block(config: Config, rec: Any, S: Any, chunked: bool) -> None:
    """Report one block's operations in the order DecoderBlock executes them."""
    b, run = config.block, config.run
    B, T, d, h, h_kv, d_h, d_ff = (run.batch, run.seq_len, b.d_model, b.n_heads, b.n_kv_heads,
                                   b.head_dim, b.d_ff)
    x = S(B, T, d)

    def attention() -> None:
        for name, heads in (("q", h), ("k", h_kv), ("v", h_kv)):
            rec(f"{name}_proj", f"{name.upper()} projection", S(B, T, heads * d_h), (x, S(d, heads * d_h)),
                kind="linear", params=(f"w_{name}", f"b_{name}"))
        for name, heads in (("q", h), ("k", h_kv), ("v", h_kv)):
            rec(name, f"split heads {name.upper()}", S(B, heads, T, d_h), (S(B, T, heads * d_h),), kind="reshape")
        if b.rope:
            rec("q_rope", "RoPE on Q", S(B, h, T, d_h), (S(B, h, T, d_h),), kind="rope")
            rec("k_rope", "RoPE on K", S(B, h_kv, T, d_h), (S(B, h_kv, T, d_h),), kind="rope")
        q, k = S(B, h, T, d_h), S(B, h_kv, T, d_h)
        if chunked:
            rec("attn_heads", "blocked attention: softmax(mask(Q·Kᵀ/√d_h))·V", q, (q, k, k), kind="attention")
        else:
            rec("scores", "scores Q·Kᵀ/√d_h", S(B, h, T, T), (q, k), kind="matmul")
            rec("masked_scores", "causal mask", S(B, h, T, T), (S(B, h, T, T),), kind="mask")
            rec("attn_weights", "softmax over keys", S(B, h, T, T), (S(B, h, T, T),), kind="softmax")
            rec("attn_heads", "weights·V", q, (S(B, h, T, T), k), kind="matmul")
        rec("attn_concat", "combine heads", S(B, T, h * d_h), (q,), kind="reshape")
        rec("attn_out", "output projection", x, (S(B, T, h * d_h), S(h * d_h, d)), kind="linear",
            params=("w_o", "b_o"))

    def mlp() -> None:
        rec("mlp_pre", "MLP expand", S(B, T, d_ff), (x, S(d, d_ff)), kind="linear", params=("w_1", "b_1"))
        if b.gated:
            rec("mlp_up", "MLP up (gate partner)", S(B, T, d_ff), (x, S(d, d_ff)), kind="linear",
                params=("w_3", "b_3"))
        rec("mlp_act", f"activation ({b.activation})", S(B, T, d_ff), (S(B, T, d_ff),), kind=b.activation)
        rec("mlp_out", "MLP contract", x, (S(B, T, d_ff), S(d_ff, d)), kind="linear", params=("w_2", "b_2"))

    def norm(key: str, op: str, which: str) -> None:
        rec(key, op, x, (x,), kind=b.norm, params=(f"{which}_gamma", f"{which}_beta"))

    add = lambda key, op: rec(key, op, x, (x, x), kind="add")  # noqa: E731
    if b.placement == "pre":
        norm("ln1_out", "LN1", "ln1"), attention(), add("h", "residual add")
        norm("ln2_out", "LN2", "ln2"), mlp(), add("y", "residual add")
    elif b.placement == "post":
        attention(), add("h_pre", "residual add"), norm("h", "LN1 (post)", "ln1")
        mlp(), add("y_pre", "residual add"), norm("y", "LN2 (post)", "ln2")
    else:
        norm("ln1_out", "LN1", "ln1"), attention(), add("h", "residual add (attention)")
        norm("ln2_out", "LN2", "ln2"), mlp(), add("y", "residual add (MLP)")


def collapse_layers(rows: list[OpRow], n_layers: int) -> list[OpRow]:
    """Show layer 0's rows once, marked ×n_layers, in place of every layer's rows."""
    out = []
    for row in rows:
        if row.layer is None:
            out.append(row)
        elif row.layer == 0:
            out.append(replace(row, repeat=n_layers, key=row.key.replace("blocks.0.", "blocks.*.", 1)))
    return out
