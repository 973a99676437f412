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
from fractions import Fraction
from typing import Any, Mapping, Sequence

import numpy as np

from blockcli import progress
from blockcli.activations import MLP_KIND_FLOPS, function_of
from blockcli.block import (CROSS_ATTENTION_SKIPPED, GATE_LABELS, MIXER_SUM_LABEL, DecoderBlock, Model, activated, mlp_stage, attention_tile, block_parameter_shapes, blocked_label, experts_label,
                            full_table, load_label, logits_label, mask_label, model_parameter_shapes, moe_sum_label,
                            LOOP_LABEL, NGPT_GATE_LABEL, NGPT_Q_LABEL, NGPT_RESIDUAL, qk_norm_label, query_scale_label, routing_label, scales_said, scores_label, softmax_label,
                            value_scale_label)
from blockcli.config import (BlockConfig, Config, InputError, Mamba1, clipped, layer_passes, projected_width,
                             whole_number)
from blockcli.deltanet import SYMBOLIC_DELTANET, SYMBOLIC_KDA, state_bytes
from blockcli.deltanet import analytic_rows as deltanet_analytic_rows
from blockcli import lightning as LA
from blockcli import moa as MOA
from blockcli import differential as DIFF
from blockcli import mamba as M1
from blockcli.mamba import DT_LABEL, IN_LABEL, OUT_LABEL, SKIP_LABEL, conv_label, norm_label, scan_label
from blockcli.mamba import SYMBOLIC as MAMBA_SYMBOLIC
from blockcli import short_conv as SC
from blockcli.parallel import fit_blas_threads, worker_count
from blockcli.shapes import declared_sizes

# Per-element FLOPs of the elementwise operations (a convention, stated in the README).
ELEMENT_FLOPS = {
    "add": 1, "layernorm": 5, "rmsnorm": 3, "softmax": 4, "mask": 0, "rope": 3,
    **MLP_KIND_FLOPS,  # an MLP's activation step, as the activation registry costs it (gated: + the product)
    "reshape": 0, "gather": 0, "clip": 1, "scale": 1,
    "sigmoid": 4, "topk": 0, "count": 0, "gate": 1,  # a mixture of experts' routing and shared gate
    "sigmoid_gate": 5,  # gated attention: σ(gate) times the heads' output
    "softplus_gate": 5,  # Laguna's: softplus(gate) (log1p(e^g), as σ's exp and an add) times the heads' output
    # Gated DeltaNet (blockcli/deltanet.py): the conv's and the delta rule's products are matmul FLOPs (see
    # _matmul_flops), the decay of the state d_k per output element (see Recorder)
    "conv": 0, "delta_rule": 0, "l2norm": 3, "decay": 5, "gated_norm": 8,
    "differential": 2,  # differential attention: head i − λ·head i + h/2, a multiply and a subtract per element
    "lightning": 0,  # lightning attention: its products are matmul FLOPs, the state's decay d_h per output element
    # "combine" (the weighted sum of a token's k expert outputs) costs 2·k per output element: see Recorder
    "softplus": 4, "skip": 2, "gated_rmsnorm": 8,  # a Mamba-2 layer's Δ, its D·x skip, its y ⊙ silu(z) normalised
    # "conv" (K multiply-adds per output) and "ssd" (2·N for x ⊗ B into the state and 2·N for S·C per output, N for
    # the state's decay) are products: see _matmul_flops and Recorder
}

# The symbolic shape of each recorded tensor, in the one shape vocabulary.
SYMBOLIC = {
    "tok_emb": "(B, T, d)", "embed": "(B, T, d)", "ln1_out": "(B, T, d)", "h": "(B, T, d)",
    "h_pre": "(B, T, d)", "ln2_out": "(B, T, d)", "y_pre": "(B, T, d)", "y": "(B, T, d)",
    "q_proj": "(B, T, h·d_h)", "k_proj": "(B, T, h_kv·d_h)", "v_proj": "(B, T, h_kv·d_h)",
    "q": "(B, h, T, d_h)", "k": "(B, h_kv, T, d_h)", "v": "(B, h_kv, T, d_h)",
    "q_rope": "(B, h, T, d_h)", "k_rope": "(B, h_kv, T, d_h)", "q_scale": "(B, h, T, d_h)",
    "scores": "(B, h, T, T)", "masked_scores": "(B, h, T, T)", "attn_weights": "(B, h, T, T)",
    "attn_heads": "(B, h, T, d_h)", "attn_concat": "(B, T, h·d_h)", "attn_out": "(B, T, d)",
    "mlp_pre": "(B, T, d_ff)", "mlp_up": "(B, T, d_ff)", "mlp_act": "(B, T, d_ff)", "mlp_out": "(B, T, d)",
    "attn_sub_norm": "(B, T, h·d_h)", "mlp_sub_norm": "(B, T, d_ff)",
    "ln_f_out": "(B, T, d)", "logits": "(B, T, V)",
    "q_norm": "(B, h, T, d_h)", "k_norm": "(B, h_kv, T, d_h)",  # per head; over the projection, 3-D:
    "alibi_scores": "(B, h, T, T)", "embed_norm": "(B, T, d)", "tok_emb_e": "(B, T, e)", "proj_out": "(B, T, e)",
    "q_clip": "(B, T, h·d_h)", "k_clip": "(B, T, h_kv·d_h)", "v_clip": "(B, T, h_kv·d_h)",
    # a mixture of experts: E experts, k per token, n_e rows routed to expert e, d_e / d_s expert widths
    "router_logits": "(B, T, E)", "router_scores": "(B, T, E)", "router_choice": "(B, T, k)",
    "router_weights": "(B, T, k)", "expert_load": "(E,)", "in": "(n_e, d)", "pre": "(n_e, d_e)",
    "up": "(n_e, d_e)", "act": "(n_e, d_e)", "out": "(n_e, d)", "moe_routed": "(B, T, d)", "moe_sum": "(B, T, d)",
    "shared_pre": "(B, T, d_s)", "shared_up": "(B, T, d_s)", "shared_act": "(B, T, d_s)",
    "shared_out": "(B, T, d)", "shared_gate": "(B, T, 1)", "shared_gated": "(B, T, d)",
    **SC.SYMBOLIC,  # a short-conv layer's
    **MAMBA_SYMBOLIC,  # a Mamba-2 layer's: h_s heads of p, state N, g groups, c = d_in + 2·g·N channels
}
# all E experts' rows together (analytic rows, `merge_expert_rows`): B·T·k routed rows in all
SYMBOLIC_ALL_EXPERTS = {"in": "(B·T·k, d)", "scaled_in": "(B·T·k, d)", "pre": "(B·T·k, d_e)", "up": "(B·T·k, d_e)", "act": "(B·T·k, d_e)",
                        "out": "(B·T·k, d)"}
ALL_EXPERTS = "experts.all."  # the key prefix of those rows
SYMBOLIC_PROJECTION_NORM = {"q_norm": "(B, T, h·d_h)", "k_norm": "(B, T, h_kv·d_h)"}
# Latent attention's tensors (DeepSeek): its own, and those whose widths it changes (d_h = d_nope + d_rope)
SYMBOLIC_LATENT = {
    "q_a": "(B, T, r_q)", "q_a_norm": "(B, T, r_q)", "kv_a": "(B, T, r_kv + d_rope)", "kv_a_norm": "(B, T, r_kv)",
    "q_rope": "(B, h, T, d_rope)", "k_rope": "(B, 1, T, d_rope)", "kv_proj": "(B, T, h·(d_nope + d_v))",
    "k": "(B, h, T, d_h)", "v": "(B, h, T, d_v)", "q_cat": "(B, h, T, d_h)", "attn_heads": "(B, h, T, d_v)",
    "attn_concat": "(B, T, h·d_v)",
}

# What tracing itself holds, measured with tracemalloc on small passes: per recorded operation (its
# OpRow and data-flow entry) and once per pass (the recorder, NumPy's error state, the worker pool).
RECORD_BYTES, TRACE_BYTES = 512, 12 * 1024

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
    tied: bool = False  # the LM head reusing the token embedding: its weights are counted there


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

    def __init__(self, param_sizes: Mapping[str, int], keep: bool = False, pass_input: Any = None,
                 symbolic: Mapping[str, str] | None = None) -> None:
        self.param_sizes = param_sizes
        self.symbolic = {**SYMBOLIC, **(symbolic or {})}  # the block's own shapes over the defaults
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
        # a tied LM head reuses the token embedding, whose row counts it: the head adds only its bias
        used = [self.param_sizes[prefix + p] for p in params if prefix + p in self.param_sizes]
        matmul, causal = _matmul_flops(kind, out, inputs)
        has_bias = kind in ("linear", "conv") and any(prefix + p in self.param_sizes and
                                            (p.rsplit(".", 1)[-1].startswith("b_") or p.endswith("_bias"))
                                            for p in params)
        element = ELEMENT_FLOPS.get(kind, 0) * out.size + (out.size if has_bias else 0)
        if kind == "combine":  # each output element: k multiply-adds of the weighted expert outputs
            element = 2 * inputs[0].shape[-1] * out.size
        if kind in ("delta_rule", "lightning"):  # each step decays the whole state: d_k (d_h) per output element
            element = inputs[0].shape[-1] * out.size
        elif kind == "ssd":  # each state entry decayed once per step: N per output element
            element = inputs[2].shape[-1] * out.size
        base = key.rsplit(".", 1)[-1]
        symbolic = SYMBOLIC_ALL_EXPERTS.get(base, "") if ALL_EXPERTS in key else self.symbolic.get(base, "")
        self.rows.append(OpRow(
            step=len(self.rows) + 1, key=key, op=op, kind=kind, layer=layer,
            input_shapes=[tuple(a.shape) for a in inputs], output_shape=tuple(out.shape),
            symbolic=(SYMBOLIC_PROJECTION_NORM[base] if base in SYMBOLIC_PROJECTION_NORM and len(out.shape) == 3
                      else symbolic), params=sum(used), flops=matmul + element,
            matmul_flops=matmul, causal_flops=causal, bytes=int(out.nbytes),
            sources=[self._producer.get(id(a)) for a in inputs], tied="wte (tied)" in params))
        self._track(out, len(self.rows))
        if (self.first_nonfinite is None and kind != "mask" and isinstance(out, np.ndarray)
                and not np.isfinite(out).all()):  # the masked scores hold -inf on purpose
            self.first_nonfinite = self.rows[-1]
        if self.keep and isinstance(out, np.ndarray):
            self.arrays[key] = out


def _matmul_flops(kind: str, out: Any, inputs: Sequence[Any]) -> tuple[int, int | None]:
    if kind == "conv":  # a depthwise conv: K multiply-adds per output element, weight (c, K)
        return 2 * inputs[1].shape[1] * out.size, None
    if kind == "ssd":  # x ⊗ B into the state and S·C out: N multiply-adds each per output element, B (…, N)
        return 4 * inputs[2].shape[-1] * out.size, None
    """(full-table matmul FLOPs, causal-half FLOPs or None) for one operation."""
    if kind == "linear":
        return 2 * out.size * inputs[0].shape[-1], None
    if kind == "matmul":  # scores (q, k) or weights·V (weights, v): 2·B·h·T_q·T_k·d_h either way
        a, b = inputs  # b is K or V, (B, h_kv, T_k, d_h): its last axis is d_h either way
        t_q, t_k, d_h = a.shape[-2], b.shape[-2], b.shape[-1]
        full = 2 * math.prod(a.shape[:-2]) * t_q * t_k * d_h
        return full, int(full * _causal_fraction(t_q, t_k))
    if kind == "conv":  # a depthwise conv: K multiply-adds per output element (weights (C, K))
        return 2 * out.size * inputs[1].shape[-1], None
    if kind == "delta_rule":  # per token and value head: Sᵀk, k δᵀ, Sᵀq, d_k·d_v multiply-adds each
        return 6 * out.size * inputs[0].shape[-1], None
    if kind == "lightning":  # per token and head: kᵀv into S and q·S out, d_h·d_h multiply-adds each
        return 4 * out.size * inputs[0].shape[-1], None
    if kind == "attention":  # chunked: both products at once, 2·d_h for Q·Kᵀ and 2·d_v for weights·V
        q, k, v = inputs
        full = 2 * math.prod(q.shape[:-2]) * q.shape[-2] * k.shape[-2] * (q.shape[-1] + v.shape[-1])
        return full, int(full * _causal_fraction(q.shape[-2], k.shape[-2]))
    return 0, None


def _causal_fraction(t_q: int, t_k: int) -> Fraction:
    """Fraction of the (t_q, t_k) table a causal query can see, as an exact rational. The t_q queries
    are the last of t_k positions: query i (from 0) sees t_k − t_q + i + 1 keys, so in closed form
    t_q·(t_k − t_q + 1) + t_q·(t_q − 1)/2 of the t_q·t_k pairs."""
    visible = t_q * (t_k - t_q + 1) + t_q * (t_q - 1) // 2 if t_q <= t_k else t_q * t_k
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
        T = self.seq_len
        rows, heads = attention_tile(b.n_heads, b.n_kv_heads, T, T, itemsize)
        return {
            "flops": sum(r.flops for r in self.rows),
            "matmul_flops": sum(r.matmul_flops for r in self.rows),
            "causal_matmul_flops": sum(int(r.causal_flops) if r.causal_flops is not None else r.matmul_flops
                                       for r in self.rows),
            "parameters": declared_sizes(cfg)[0],  # as count's total: the buffers stored beside them not among them
            "peak_activation_bytes": self.peak_bytes,
            "peak_measured": self.peak_measured,
            "largest_score_table_bytes": (self.batch * b.n_heads * T * T if self.attention == "full" else
                                          heads * b.n_heads // b.n_kv_heads * rows * T) * itemsize,
            "kv_cache_bytes": sum(kv_cache_bytes(cfg.layer_block(i), 1, self.batch, self.seq_len, itemsize)
                                  for i, _, _ in (layer_passes(cfg.model) if cfg.model else [(0, 0, -1)])),
        }


def kv_cache_bytes(b: BlockConfig, layers: int, batch: int, seq_len: int, itemsize: int) -> int:
    """What blockcli's decode cache holds after the pass: K and V (h_kv·d_h each) per token and layer, or
    latent attention's compressed latent (r_kv + d_rope); a recurrent layer's state and its conv's last K − 1
    inputs, whatever seq_len; nothing for a layer of its MLP alone, one reading another layer's keys and values
    (Gemma 4's kv_from), or a skipped cross-attention layer (Mllama's)."""
    if b.parts == "mlp" or b.kv_from >= 0 or b.cross_attention:
        return 0
    if b.linear_attention is not None:  # Gated DeltaNet: S (B, h_v, d_k, d_v) and the window (B, K − 1, C)
        return layers * state_bytes(b, batch, itemsize)
    if b.lightning is not None:  # lightning attention: S (B, h, d_h, d_h)
        return layers * LA.state_bytes(b, batch, itemsize)
    if b.mamba is not None:  # Mamba-2: S (B, h, p, N) and the window (B, K − 1, d_in + 2·g·N); Mamba-1's (B, d_in, N), c = d_in
        m = b.mamba
        state = layers * batch * (m.d_inner * m.d_state + (m.conv_kernel - 1) * m.conv_dim) * itemsize
        if b.shared is not None:  # Zamba2: and the shared block's attention's K/V (h_kv·d_h each, its own heads)
            s = b.shared
            return state + layers * batch * seq_len * 2 * s.n_kv_heads * s.head_dim * itemsize
        if b.parts != "hybrid":
            return state
        return state + kv_cache_bytes(b.attention_part, layers, batch, seq_len, itemsize)  # and attention's K/V
    if b.short_conv is not None:  # the window (B, K − 1, d)
        return layers * batch * (b.short_conv.kernel - 1) * b.d_model * itemsize
    per_token = (b.mla.kv_lora_rank + b.mla.qk_rope_head_dim + (b.mla.index_head_dim if b.mla.own_indexer else 0)
                 if b.mla else b.n_kv_heads * (b.head_dim + b.value_dim))  # and the indexer's key (DeepSeek Sparse Attention)
    return layers * batch * seq_len * per_token * itemsize


# DeepSeek Sparse Attention's indexer (blockcli/indexer.py): h_I heads of d_I, one key per token
SYMBOLIC_INDEXER = {
    "idx_q": "(B, T, h_I·d_I)", "idx_k": "(B, T, d_I)", "idx_k_norm": "(B, T, d_I)", "idx_q_rope": "(B, h_I, T, d_I)",
    "idx_k_rope": "(B, 1, T, d_I)", "idx_scores": "(B, h_I, T, T)", "idx_weights": "(B, T, h_I)",
    "idx_index": "(B, T, T)", "idx_topk": "(B, T, T)",
}


def symbolic_shapes(b: BlockConfig) -> dict[str, str]:
    """The symbolic shapes this block's tensors have where they differ from the defaults (`SYMBOLIC`)."""
    if b.linear_attention is not None:
        return dict(SYMBOLIC_KDA if b.linear_attention.per_channel else SYMBOLIC_DELTANET)
    if isinstance(b.mamba, Mamba1):  # a Mamba-1 layer's: d_in channels, R Δ's rank, N the state
        return dict(M1.SYMBOLIC1)
    if b.lightning is not None:
        return dict(LA.SYMBOLIC)
    if b.moa is not None:
        return dict(MOA.SYMBOLIC)
    if b.differential is not None:
        return dict(DIFF.SYMBOLIC)
    if b.mla is not None and b.mla.index_heads:
        return {**SYMBOLIC_LATENT, **SYMBOLIC_INDEXER}
    return dict(SYMBOLIC_LATENT) if b.mla is not None else {}


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
    """Bytes a real forward pass needs: its parameters, the float64 draw of the largest one while
    seeded weights are made (then cast), and its peak of activations."""
    shapes = model_parameter_shapes(config) if config.model else block_parameter_shapes(config.block)
    params = sum(math.prod(s) for s in shapes.values()) * np.dtype(config.run.dtype).itemsize
    drawing = 2 * max(math.prod(s) for s in shapes.values()) * 8  # a standard_normal draw and its scaled copy
    return params + drawing + activation_peak_estimate(config, attention)


def activation_peak_estimate(config: Config, attention: str = "auto", n_rows: int = 0) -> int:
    """Bytes alive at the busiest moment of a traced forward pass of `n_rows` rows, beyond the
    parameters and the pass's input: the largest of the attention, MLP and LM-head phases of
    `DecoderBlock` and `Model` as they execute, plus what tracing itself holds (the recorder's rows
    and its finiteness check). `tests/test_trace.py` holds it within 1.5× of the measured peak."""
    b, m, run = config.block, config.model, config.run
    B, T, itemsize = run.batch, run.seq_len, np.dtype(run.dtype).itemsize
    d, h, h_kv, d_h, d_ff = b.d_model, b.n_heads, b.n_kv_heads, b.head_dim, b.d_ff
    tokens, q_width, kv_width, table = B * T, h * d_h, h_kv * d_h, B * h * T * T
    stream = tokens * d if m else 0  # a model's residual stream; a block's input is the pass's own
    full = full_table(attention, table * itemsize, traced=True)
    if full:  # scores, masked scores and weights; K and V repeated per query head under GQA
        scores = (4 if b.alibi else 3) * table + (2 * tokens * q_width if h_kv != h else 0)  # ALiBi: biased too
    else:  # per worker one tile of scores; Q (scaled), K and V made contiguous; the output
        rows, heads = attention_tile(h, h_kv, T, T, itemsize)
        scores = worker_count() * heads * (h // h_kv) * rows * T + tokens * (q_width + 2 * kv_width)
    rope = tokens * (q_width + kv_width) if b.rope else 0
    # the norm's output, the fused QKV output, RoPE's rotated Q and K, the scores, the heads
    attention_phase = stream + tokens * (d + q_width + 2 * kv_width + q_width) + rope + scores
    # h, the norm's output and the MLP's; d_ff-wide: pre and act, or gate, activated gate, up and product
    mlp_phase = stream + 3 * tokens * d + (4 if b.gated else 2) * tokens * d_ff
    head_phase = tokens * (2 * d + m.vocab_size) if m else 0  # the final norm's input and output, logits
    # the finiteness check of each recorded array holds one byte per element while it runs
    checked = max(table if full else 0, tokens * d_ff, tokens * m.vocab_size if m else 0)
    return max(attention_phase, mlp_phase, head_phase) * itemsize + checked + RECORD_BYTES * n_rows + TRACE_BYTES


def available_bytes() -> int:
    """Memory this process may use: BLOCKCLI_MEMORY_LIMIT if set, else MemAvailable."""
    limit = os.environ.get("BLOCKCLI_MEMORY_LIMIT")
    if limit:
        if not (limit.strip().isascii() and limit.strip().isdigit()):  # isdigit alone accepts "²"
            raise InputError(f"BLOCKCLI_MEMORY_LIMIT: expected a number of bytes, got '{clipped(limit)}'")
        return whole_number(limit.strip(), "BLOCKCLI_MEMORY_LIMIT")
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
              attention: str = "auto", keep: bool = False, layer: int | None = None,
              model_config: Config | None = None) -> Trace:
    """Run a real forward pass and record every operation; `layer` picks a block of the weights of
    the model `model_config` describes."""
    if x is None:
        x = seeded_input(config)
    elif config.model is None:
        x = x.astype(config.run.dtype)
    progress.report("weights", 0, None, "drawing the seeded weights" if weights is None else f"loading {weights}")
    if config.model:
        net: Model | DecoderBlock = Model.from_config(config, weights, attention=attention)
    else:
        net = DecoderBlock.from_config(config, weights, attention=attention, layer=layer, model_config=model_config)
    progress.report("weights", 1, 1)
    sizes = {k: v.size for k, v in net.params.items()}
    rec = Recorder(sizes, keep=keep, pass_input=x, symbolic=symbolic_shapes(config.block))
    layers = config.model.n_layers if config.model else 0
    at = [-1]

    def reporting(key: str, *args: Any, **kwargs: Any) -> None:  # the pass's layer, as progress
        layer_now = kwargs.get("layer")
        if layer_now is not None and layer_now != at[0]:
            at[0] = layer_now
            progress.report("forward pass", layer_now, layers, f"layer {layer_now}")
        rec(key, *args, **kwargs)
    _import_sharing_modules()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        baseline = tracemalloc.get_traced_memory()[0]
        try:
            with np.errstate(over="raise", invalid="raise"):  # overflow is an error, never a quiet NaN or 0
                out = net(x, reporting if layers else rec)
        except FloatingPointError as exc:
            last = rec.rows[-1] if rec.rows else None
            where = f"after step {last.step} ({last.op}, {last.key})" if last else "in the first step"
            raise InputError(f"the forward pass overflowed {where} in {config.run.dtype} ({exc}); "
                             + _overflow_hint(config)) from None
        peak = tracemalloc.get_traced_memory()[1] - baseline
    finally:
        tracemalloc.stop()
        if layers:
            progress.report("forward pass", layers, layers)
    bad = rec.first_nonfinite
    if bad is not None:
        raise InputError(f"the forward pass overflowed: non-finite values first appear at step {bad.step} "
                         f"({bad.op}, {bad.key}) in {config.run.dtype}; " + _overflow_hint(config))
    chunked = any(r.kind == "attention" for r in rec.rows)
    return Trace(config, rec.rows, "executed", x.shape[0], x.shape[1], config.run.dtype,
                 "chunked" if chunked else "full", arrays=rec.arrays, output=out,
                 peak_bytes=peak, peak_measured=True, notes=list(net.notes))


def _import_sharing_modules() -> None:
    """Import what sharing a pass's tiles among the cores loads on first use (threadpoolctl, the thread
    pool and its queue and logging), so that the measured peak holds no module objects."""
    import concurrent.futures.thread  # noqa: F401  (and with it queue)

    fit_blas_threads()  # imports threadpoolctl, and sizes BLAS to the cores free of other work


def _overflow_hint(config: Config) -> str:
    if config.run.dtype == "float32":
        return "use --dtype float64 or smaller inputs or weights"
    return "use smaller inputs or weights"


def analytic_trace(config: Config, attention: str = "auto") -> Trace:
    """The same rows as `run_trace`, from shapes alone: nothing is allocated. Each stand-in is passed
    on to the operations that read it, as the arrays are, so the data flow (`sources`) is the same."""
    b, m, run = config.block, config.model, config.run
    dt = np.dtype(run.dtype)
    B, T, d = run.batch, run.seq_len, b.d_model
    S = lambda *shape: ShapeOnly(tuple(shape), dt)  # noqa: E731
    shapes = model_parameter_shapes(config) if m else block_parameter_shapes(b)
    chunked = not full_table(attention, B * b.n_heads * T * T * dt.itemsize, traced=True)
    chunked = chunked and not (b.mla is not None and b.mla.index_heads)  # the indexer's choice: the whole table
    x = ShapeOnly((B, T), np.dtype(np.int64)) if m else S(B, T, d)
    rec = Recorder({k: math.prod(s) for k, s in shapes.items()}, pass_input=x, symbolic=symbolic_shapes(b))
    if m:
        e = projected_width(m, d)
        tokens = S(B, T, e or d)
        rows = m.vocab_size + m.extra_token_rows  # Mllama: 8 rows past the vocabulary
        rec("tok_emb_e" if e else "tok_emb", "token embedding", tokens, (x, S(rows, e or d)), kind="gather",
            params=("wte",))
        if e:
            wide = S(B, T, d)
            rec("tok_emb", "project in (e → d)", wide, (tokens, S(e, d)), kind="linear", params=("proj_in",))
            tokens = wide
        x = tokens
        if m.positions in ("learned", "sinusoidal"):
            x = S(B, T, d)
            rec("embed", f"add {m.positions} positions", x, (tokens, S(T, d)), kind="add",
                params=("wpe",) if m.positions == "learned" else ())
        if m.embedding_norm:
            normed = S(B, T, d)
            rec("embed_norm", "embedding norm", normed, (x,), kind=b.norm, params=("emb_ln_gamma", "emb_ln_beta"))
            x = normed
        x_in = None
        for layer, _, loop in layer_passes(m):  # Dory: the recurrent layers once a loop, their weights counted once
            if loop >= 0 and layer == m.recurrent_start:
                x_in = S(B, T, d) if x_in is None else x_in
                x = S(B, T, d)
                rec(f"loop_{loop}_in", LOOP_LABEL.format(loop=loop + 1), x, (x_in,), kind="add")
            prefix = f"blocks.{layer}." if loop <= 0 else f"loop_{loop}.blocks.{layer}."
            x = _analytic_block(config.for_layer(layer),
                                lambda key, *a, prefix=prefix, layer=layer, loop=loop, **k: rec(
                                    prefix + key, *a, layer=layer, **({key: v for key, v in k.items() if key != "params"}
                                                                      if loop > 0 else k)), S, chunked, x)
        if m.final_norm:
            normed = S(B, T, d)
            rec("ln_f_out", "final norm", normed, (x,), kind=b.norm, params=("ln_f_gamma", "ln_f_beta"))
            x = normed
        if e:
            narrow = S(B, T, e)
            rec("proj_out", "project out (d → e)", narrow, (x, S(d, e)), kind="linear", params=("proj_out",))
            x = narrow
        names = ("wte (tied)",) if m.tie_embeddings else ("lm_head",)
        rec("logits", logits_label(m), S(B, T, m.vocab_size), (x, S(e or d, m.vocab_size)), kind="linear",
            params=names + ("lm_head_bias",))
    else:
        _analytic_block(config, rec, S, chunked, x)
    return Trace(config, rec.rows, "analytic", B, T, run.dtype, "chunked" if chunked else "full",
                 peak_bytes=activation_peak_estimate(config, attention, len(rec.rows)), peak_measured=False)


def _analytic_block(config: Config, rec: Any, S: Any, chunked: bool, x: ShapeOnly) -> ShapeOnly:
    """Report one block's operations in the order DecoderBlock executes them; returns y's stand-in."""
    b, run = config.block, config.run
    B, T, d, h, h_kv, d_h, d_ff = (run.batch, run.seq_len, b.d_model, b.n_heads, b.n_kv_heads,
                                   b.head_dim, b.d_ff)
    chunked = chunked and not (b.mla is not None and b.mla.index_heads)  # the indexer's choice: the whole table

    def scores_and_heads(q: ShapeOnly, k: ShapeOnly, v: ShapeOnly, d_v: int, inp: ShapeOnly | None = None,
                         heads_only: bool = False) -> ShapeOnly:
        heads_out = S(B, h, T, d_v)
        if chunked:
            rec("attn_heads", blocked_label(b), heads_out, (q, k, v), kind="attention", params=("sinks",))
        else:
            scores, masked, weights = S(B, h, T, T), S(B, h, T, T), S(B, h, T, T)
            rec("scores", scores_label(b), scores, (q, k), kind="matmul")
            if b.alibi:
                biased = S(B, h, T, T)
                rec("alibi_scores", "add ALiBi biases", biased, (scores,), kind="add")
                scores = biased
            rec("masked_scores", mask_label(b), masked, (scores,), kind="mask")
            rec("attn_weights", softmax_label(b), weights, (masked,), kind="softmax", params=("sinks",))
            rec("attn_heads", "weights·V", heads_out, (weights, v), kind="matmul")
        if heads_only:  # the mixture of attention heads combines them itself (blockcli/moa.py)
            return heads_out
        concat, out = S(B, T, h * d_v), S(B, T, d)
        rec("attn_concat", "combine heads", concat, (heads_out,), kind="reshape")
        if b.attention_gate and inp is not None:  # as MultiHeadAttention: the heads times σ(x·W_gate)
            width = h if b.gate_per_head else h * d_v  # one gate a head, or one an element
            gate, gated = S(B, T, width), S(B, T, h * d_v)
            rec("attn_gate", "attention gate projection", gate, (inp, S(d, width)), kind="linear",
                params=("w_attn_gate", "b_attn_gate", "b_attn_gate_head"))
            if b.ngpt is not None:  # as MultiHeadAttention: nGPT's per-channel gate scales
                scaled = S(B, T, width)
                rec("attn_gate_scale", NGPT_GATE_LABEL, scaled, (gate,), kind="scale", params=("s_gate",))
                gate = scaled
            rec("attn_gated", GATE_LABELS[b.attention_gate_form], gated, (concat, gate),
                kind="sigmoid_gate" if b.gate_sigmoid else "softplus_gate")
            concat = gated
        if b.sub_norms:  # as MultiHeadAttention: BitNet's norm of the heads' output
            normed = S(B, T, h * d_v)
            rec("attn_sub_norm", "norm of the heads' output (attn_sub_norm)", normed, (concat,), kind=b.norm,
                params=("attn_sub_norm_gamma", "attn_sub_norm_beta"))
            concat = normed
        rec("attn_out", "output projection", out, (concat, S(h * d_v, d)), kind="linear", params=("w_o", "b_o"))
        return out

    def indexer_rows(inp: ShapeOnly, q_lat: ShapeOnly) -> None:  # as indexer.select
        m = b.mla
        H, D, r = m.index_heads, m.index_head_dim, m.qk_rope_head_dim
        q_flat, k_raw, k_normed = S(B, T, H * D), S(B, T, D), S(B, T, D)
        rec("idx_q", "indexer Q projection (from the Q latent)", q_flat, (q_lat, S(m.q_lora_rank, H * D)),
            kind="linear", params=("idx_w_q",))
        rec("idx_k", "indexer K projection", k_raw, (inp, S(d, D)), kind="linear", params=("idx_w_k",))
        rec("idx_k_norm", "indexer key LayerNorm", k_normed, (k_raw,), kind="layernorm",
            params=("idx_k_norm_gamma", "idx_k_norm_beta"))
        q, keys = S(B, H, T, D), S(B, 1, T, D)
        rec("idx_q_rope", f"RoPE on the indexer queries' first {r} dims", q, (q_flat,), kind="rope")
        rec("idx_k_rope", f"RoPE on the indexer keys' first {r} dims", keys, (k_normed,), kind="rope")
        scores, weights, index = S(B, H, T, T), S(B, T, H), S(B, T, T)
        rec("idx_scores", "indexer scores ReLU(q·k/√d_I)", scores, (q, keys), kind="matmul")
        rec("idx_weights", "indexer head weights x·W_Iw/√h_I", weights, (inp, S(d, H)), kind="linear",
            params=("idx_w_weights",))
        rec("idx_index", "index scores Σ_h w·ReLU(…)", index, (weights, scores), kind="combine")
        rec("idx_topk", f"indexer's top-{m.index_topk} keys per query", ShapeOnly((B, T, T), np.dtype(bool)),
            (index,), kind="topk")

    def latent_attention(inp: ShapeOnly) -> ShapeOnly:  # as LatentAttention.__call__
        m = b.mla
        r_kv, d_rope, d_nope, d_v = m.kv_lora_rank, m.qk_rope_head_dim, m.qk_nope_head_dim, m.v_head_dim
        if m.q_lora_rank:
            q_lat, q_normed = S(B, T, m.q_lora_rank), S(B, T, m.q_lora_rank)
            rec("q_a", "Q down-projection (latent)", q_lat, (inp, S(d, m.q_lora_rank)), kind="linear",
                params=("w_q_a", "b_q_a"))
            rec("q_a_norm", "Q latent norm", q_normed, (q_lat,), kind=b.norm, params=("q_a_norm_gamma", "q_a_norm_beta"))
            if m.own_indexer:
                indexer_rows(inp, q_normed)
            q_flat = S(B, T, h * d_h)
            rec("q_proj", "Q up-projection", q_flat, (q_normed, S(m.q_lora_rank, h * d_h)), kind="linear",
                params=("w_q_b",))
        else:
            q_flat = S(B, T, h * d_h)
            rec("q_proj", "Q projection", q_flat, (inp, S(d, h * d_h)), kind="linear", params=("w_q",))
        q = S(B, h, T, d_h)
        rec("q", "split heads Q", q, (q_flat,), kind="reshape")
        kv_a = S(B, T, r_kv + d_rope)
        rec("kv_a", "K/V down-projection (latent | RoPE key)", kv_a, (inp, S(d, r_kv + d_rope)), kind="linear",
            params=("w_kv_a", "b_kv_a"))
        latent = S(B, T, r_kv)
        rec("kv_a_norm", "K/V latent norm", latent, (S(B, T, r_kv),), kind=b.norm,
            params=("kv_a_norm_gamma", "kv_a_norm_beta"))
        q_pe, k_pe = S(B, h, T, d_rope), S(B, 1, T, d_rope)
        if b.rope:  # NoPE latent attention (Kimi-Linear) rotates neither part
            rec("q_rope", "RoPE on Q's RoPE part", q_pe, (q,), kind="rope")
            rec("k_rope", "RoPE on the shared key", k_pe, (kv_a,), kind="rope")
        kv = S(B, T, h * (d_nope + d_v))
        rec("kv_proj", "K/V up-projection (from the latent)", kv, (latent, S(r_kv, h * (d_nope + d_v))),
            kind="linear", params=("w_kv_b",))
        kv_heads = S(B, h, T, d_nope + d_v)
        k, v = S(B, h, T, d_h), S(B, h, T, d_v)
        rec("k", "keys: K_nope | shared RoPE key", k, (kv_heads, k_pe), kind="reshape")
        rec("v", "values V", v, (kv_heads,), kind="reshape")
        q_cat = S(B, h, T, d_h)
        rec("q_cat", "queries: Q_nope | RoPE'd Q_rope", q_cat, (q, q_pe), kind="reshape")
        return scores_and_heads(q_cat, k, v, d_v)

    def mamba1(inp: ShapeOnly) -> ShapeOnly:  # as Mamba1Mixer.__call__
        m = b.mamba
        d_in, R, N = m.d_inner, m.dt_rank, m.d_state
        xz, conv, act, dbc = S(B, T, 2 * d_in), S(B, T, d_in), S(B, T, d_in), S(B, T, R + 2 * N)
        rec("ssm_in", M1.IN1_LABEL, xz, (inp, S(d, 2 * d_in)), kind="linear", params=("w_ssm_in", "b_ssm_in"))
        rec("ssm_conv", M1.conv1_label(m), conv, (xz, S(d_in, m.conv_kernel)), kind="conv",
            params=("ssm_conv", "b_ssm_conv"))
        rec("ssm_conv_act", "SiLU", act, (conv,), kind="silu")
        rec("ssm_x", M1.X_LABEL, dbc, (act, S(d_in, R + 2 * N)), kind="linear", params=("w_ssm_x",))
        dt = S(B, T, R)
        if m.bc_norm != "none":
            rec("ssm_bc_norm", M1.bc_norm_label(m), S(B, T, R + 2 * N), (dbc,), kind="rmsnorm",
                params=("ssm_dt_norm", "ssm_B_norm", "ssm_C_norm") if m.bc_norm == "learned" else ())
        dt_in, delta = S(B, T, d_in), S(B, T, d_in)
        rec("ssm_dt_proj", M1.DT_PROJ_LABEL, dt_in, (dt, S(R, d_in)), kind="linear", params=("w_ssm_dt", "b_ssm_dt"))
        rec("ssm_dt", M1.DT1_LABEL, delta, (dt_in,), kind="softplus")
        scan, y, gated, out = S(B, T, d_in), S(B, T, d_in), S(B, T, d_in), S(B, T, d)
        rec("ssm_scan", M1.scan1_label(m), scan, (act, delta, S(B, T, N), S(B, T, N)), kind="ssd",
            params=("ssm_A_log",))
        rec("ssm_skip", SKIP_LABEL, y, (scan, act), kind="skip", params=("ssm_D",))
        rec("ssm_gate", M1.GATE1_LABEL, gated, (y, xz), kind="swiglu")
        rec("attn_out", OUT_LABEL, out, (gated, S(d_in, d)), kind="linear", params=("w_ssm_out", "b_ssm_out"))
        return out

    def mamba(inp: ShapeOnly, out_key: str = "attn_out") -> ShapeOnly:  # as Mamba2Mixer.__call__
        m = b.mamba
        d_in, c, h_s, N = m.d_inner, m.conv_dim, m.n_heads, m.d_state
        if m.in_multiplier != 1.0:  # the input times ssm_in_multiplier: a new array
            inp = S(B, T, d)
        zxbcdt, conv, act, delta = S(B, T, d_in + c + h_s), S(B, T, c), S(B, T, c), S(B, T, h_s)
        rec("ssm_in", IN_LABEL, zxbcdt, (inp, S(d, d_in + c + h_s)), kind="linear", params=("w_ssm_in", "b_ssm_in"))
        rec("ssm_conv", conv_label(m), conv, (zxbcdt, S(c, m.conv_kernel)), kind="conv",
            params=("ssm_conv", "b_ssm_conv"))
        rec("ssm_conv_act", "SiLU", act, (conv,), kind="silu")
        rec("ssm_dt", DT_LABEL, delta, (zxbcdt,), kind="softplus", params=("ssm_dt_bias",))
        scan, y, normed, out = S(B, T, h_s, m.head_dim), S(B, T, d_in), S(B, T, d_in), S(B, T, d)
        rec("ssm_scan", scan_label(m), scan, (act, delta, S(B, T, h_s, N), S(B, T, h_s, N)), kind="ssd",
            params=("ssm_A_log",))
        rec("ssm_skip", SKIP_LABEL, y, (scan, act), kind="skip", params=("ssm_D",))
        rec("ssm_norm", norm_label(m), normed, (y, zxbcdt), kind="gated_rmsnorm", params=("ssm_norm_gamma",))
        rec(out_key, OUT_LABEL, out, (normed, S(d_in, d)), kind="linear", params=("w_ssm_out", "b_ssm_out"))
        return out

    def hybrid(inp: ShapeOnly) -> ShapeOnly:  # as ParallelMixer.__call__: Mamba-2 and attention side by side
        ssm = mamba(inp, "ssm_out")
        attended = attention(S(B, T, d) if b.attention_in_multiplier != 1.0 else inp, plain=True)
        out = S(B, T, d)
        rec("mixer_out", MIXER_SUM_LABEL, out, (ssm, attended), kind="add")
        return out

    def short_conv(inp: ShapeOnly) -> ShapeOnly:  # as ShortConvMixer.__call__
        bcx, gated, conv, y, out = S(B, T, 3 * d), S(B, T, d), S(B, T, d), S(B, T, d), S(B, T, d)
        rec("conv_in", SC.IN_LABEL, bcx, (inp, S(d, 3 * d)), kind="linear", params=("w_conv_in", "b_conv_in"))
        rec("conv_gate_in", SC.GATE_IN_LABEL, gated, (bcx,), kind="gate")
        rec("short_conv", SC.conv_label(b.short_conv.kernel), conv, (gated, S(d, b.short_conv.kernel)), kind="conv",
            params=("short_conv", "b_short_conv"))
        rec("conv_gate_out", SC.GATE_OUT_LABEL, y, (bcx, conv), kind="gate")
        rec("attn_out", SC.OUT_LABEL, out, (y, S(d, d)), kind="linear", params=("w_conv_out", "b_conv_out"))
        return out

    def attention(inp: ShapeOnly, plain: bool = False) -> ShapeOnly:
        if b.short_conv is not None:
            return short_conv(inp)
        if b.parts == "hybrid" and not plain:
            return hybrid(inp)
        if b.mamba is not None and not plain:
            return mamba1(inp) if isinstance(b.mamba, Mamba1) else mamba(inp)
        if b.mla is not None:
            return latent_attention(inp)
        if b.linear_attention is not None:  # a Gated DeltaNet layer: its own rows (blockcli/deltanet.py)
            return deltanet_analytic_rows(b, rec, S, inp, B, T)
        if b.lightning is not None:  # a lightning-attention layer: its own rows (blockcli/lightning.py)
            return LA.analytic_rows(b, rec, S, inp, B, T)
        if b.moa is not None:  # a mixture of attention heads: its own rows around attention's (blockcli/moa.py)
            return MOA.analytic_rows(b, rec, S, inp, B, T,
                                     lambda q, k, v: scores_and_heads(q, k, v, d_h, heads_only=True),
                                     lambda *shape: ShapeOnly(shape, np.dtype(np.intp)))
        flat, split = {}, {}
        d_v = b.value_dim  # each head's value width (MiMo-V2-Flash: not d_h)
        widths = (("q", h, d_h), ("k", h_kv, d_h), ("v", h_kv, d_v))
        for name, heads, width in widths:
            flat[name] = S(B, T, heads * width)
            rec(f"{name}_proj", f"{name.upper()} projection", flat[name], (inp, S(d, heads * width)),
                kind="linear", params=(f"w_{name}", f"b_{name}"))
        def clip() -> None:  # as MultiHeadAttention._clip
            for name in ("q", "k", "v"):
                clipped = S(*flat[name].shape)
                rec(f"{name}_clip", f"clip {name.upper()} to ±{b.clip_qkv:g}", clipped, (flat[name],), kind="clip")
                flat[name] = clipped

        if b.clip_qkv and not b.clip_after_qk_norm:
            clip()

        def qk_norm(stand_ins: dict) -> None:  # as MultiHeadAttention._qk_norm: Q's, then K's
            for name in ("q", "k"):
                normed = S(*stand_ins[name].shape)
                rec(f"{name}_norm", qk_norm_label(b, name), normed, (stand_ins[name],), kind=b.norm,
                    params=(f"{name}_norm_gamma", f"{name}_norm_beta"))
                stand_ins[name] = normed

        if b.qk_norm == "projection":
            qk_norm(flat)
        if b.clip_after_qk_norm:  # OLMoE: the normalised projections clamped
            clip()
        for name, heads, width in widths:
            split[name] = S(B, heads, T, width)
            rec(name, f"split heads {name.upper()}", split[name], (flat[name],), kind="reshape")
        if b.value_scale != 1.0:  # as MultiHeadAttention: MiMo-V2-Flash's values times a constant
            scaled = S(B, h_kv, T, d_v)
            rec("v_scale", value_scale_label(b), scaled, (split["v"],), kind="scale")
            split["v"] = scaled
        per_head = b.qk_norm in ("head", "each_head", "head_unscaled")
        if per_head and not b.qk_norm_after_rope:
            qk_norm(split)
        q, k, v = split["q"], split["k"], split["v"]
        if b.rope:
            q_rot, k_rot = S(B, h, T, d_h), S(B, h_kv, T, d_h)
            rec("q_rope", "RoPE on Q", q_rot, (q,), kind="rope")
            rec("k_rope", "RoPE on K", k_rot, (k,), kind="rope")
            q, k = q_rot, k_rot
        if per_head and b.qk_norm_after_rope:  # HunYuan: the rotated Q and K
            rotated = {"q": q, "k": k}
            qk_norm(rotated)
            q, k = rotated["q"], rotated["k"]
        if b.query_scale:  # as MultiHeadAttention: the queries times their positions' scale
            q_scaled = S(B, h, T, d_h)
            rec("q_scale", query_scale_label(b), q_scaled, (q,), kind="scale")
            q = q_scaled
        if b.ngpt is not None:  # as MultiHeadAttention: nGPT's per-channel query scales
            q_scaled = S(B, h, T, d_h)
            rec("q_ngpt_scale", NGPT_Q_LABEL, q_scaled, (q,), kind="scale", params=("s_qk",))
            q = q_scaled
        if b.differential is not None:  # DiffLlama: the softmax over both halves of the values, then its own rows
            both = S(B, h_kv, T, 2 * d_h)
            rec("v_both", DIFF.VALUES_LABEL, both, (v,), kind="reshape")
            return DIFF.analytic_rows(b, rec, S, scores_and_heads(q, k, both, 2 * d_h, heads_only=True), B, T)
        return scores_and_heads(q, k, v, d_v, inp)

    def expert_mlp(inp: ShapeOnly, rows: tuple[int, ...], width: int, key: str, label: Any,
                   names: Any) -> ShapeOnly:
        """One MLP's rows (as MixtureOfExperts._mlp); label(stage) names a row, names(w) matrix w's parameters."""
        pre, act, out = S(*rows, width), S(*rows, width), S(*rows, d)
        first = activated(b)
        rec(key + "pre", label(mlp_stage(b, "pre")), pre, (inp, S(d, width)), kind="linear",
            params=names("w_" + first) + names("b_" + first))
        inputs: tuple[ShapeOnly, ...] = (pre,)
        if b.gated:
            up = S(*rows, width)
            rec(key + "up", label(mlp_stage(b, "up")), up, (inp, S(d, width)), kind="linear",
                params=names("w_up") + names("b_up"))
            inputs = (pre, up)
        rec(key + "act", label(f"activation ({b.mlp_kind})"), act, inputs, kind=b.mlp_kind)
        rec(key + "out", label(mlp_stage(b, "out")), out, (act, S(width, d)), kind="linear",
            params=names("w_down") + names("b_down"))
        return out

    def moe(inp: ShapeOnly) -> ShapeOnly:
        """As MixtureOfExperts, with all E experts' rows as one set: B·T·k rows in all, exactly."""
        spec = b.moe
        E, k, ints = spec.n_experts, spec.top_k, np.dtype(np.intp)
        logits = S(B, T, E)
        rec("router_logits", "router logits", logits, (inp, S(d, E)), kind="linear", params=("router", "b_router"))
        scores = logits
        if spec.order != "topk_softmax":
            scores = S(B, T, E)
            rec("router_scores", f"router scores ({spec.scoring} over experts)", scores, (logits,), kind=spec.scoring)
        chosen, weights = ShapeOnly((B, T, k), ints), S(B, T, k)
        rec("router_choice", f"top-{k} experts per token", chosen, (scores,), kind="topk")
        rec("router_weights", routing_label(spec), weights, (scores,), kind="gather")
        rec("expert_load", load_label(spec, B * T), ShapeOnly((E,), np.dtype(np.int64)), (chosen,), kind="count")
        rows = S(B * T * k, d)
        rec(ALL_EXPERTS + "in", experts_label("gather their rows", spec, B * T), rows, (inp,), kind="gather")
        if spec.scale_input:  # Llama 4: each routed row times its weight before its expert reads it
            scaled = S(B * T * k, d)
            rec(ALL_EXPERTS + "scaled_in", experts_label("rows × their routing weights", spec, B * T), scaled,
                (rows, weights), kind="scale")
            rows = scaled
        outs = expert_mlp(rows, (B * T * k,), spec.d_expert, ALL_EXPERTS, lambda st: experts_label(st, spec, B * T),
                          lambda w: tuple(f"experts.{e}.{w}" for e in range(E)))
        routed = S(B, T, d)
        label = moe_sum_label(spec)
        if spec.out_bias:  # JetMoE: the mixture's output bias after the weighted sum
            rec("moe_routed", label, routed, (weights, outs), kind="combine")
            biased = S(B, T, d)
            rec("mlp_out", "+ the mixture's output bias (moe_bias)", biased, (routed,), kind="add", params=("moe_bias",))
            return biased
        last = "moe_sum" if spec.out_norm else "mlp_out"  # A.X-K1: the sum, then its norm (as MixtureOfExperts)
        if not spec.d_shared:
            rec(last, label, routed, (weights, outs), kind="combine")
            return out_norm(routed)
        rec("moe_routed", label, routed, (weights, outs), kind="combine")
        shared = expert_mlp(inp, (B, T), spec.d_shared, "shared_", lambda st: f"shared expert {st}",
                            lambda w: ("shared_" + w,))
        if spec.shared_gate:
            gate, gated = S(B, T, 1), S(B, T, d)
            rec("shared_gate", "shared expert gate logit", gate, (inp, S(d, 1)), kind="linear", params=("shared_gate",))
            rec("shared_gated", "shared expert × sigmoid(gate)", gated, (gate, shared), kind="gate")
            shared = gated
        total = S(B, T, d)
        rec(last, "routed + shared experts", total, (routed, shared), kind="add")
        return out_norm(total)

    def out_norm(total: ShapeOnly) -> ShapeOnly:
        if not b.moe.out_norm:
            return total
        normed = S(B, T, d)
        rec("mlp_out", f"{'LayerNorm' if b.norm == 'layernorm' else 'RMSNorm'} of the mixture's output (moe_norm)",
            normed, (total,), kind=b.norm, params=("moe_norm_gamma", "moe_norm_beta"))
        return normed

    def mlp(inp: ShapeOnly) -> ShapeOnly:
        if b.moe is not None:
            return moe(inp)
        pre, act, out = S(B, T, d_ff), S(B, T, d_ff), S(B, T, d)
        first = activated(b)
        rec("mlp_pre", "MLP " + mlp_stage(b, "pre"), pre, (inp, S(d, d_ff)), kind="linear",
            params=("w_" + first, "b_" + first))
        inputs: tuple[ShapeOnly, ...] = (pre,)
        if b.gated:
            up = S(B, T, d_ff)
            rec("mlp_up", "MLP " + mlp_stage(b, "up"), up, (inp, S(d, d_ff)), kind="linear", params=("w_up", "b_up"))
            inputs = (pre, up)
        rec("mlp_act", f"activation ({b.mlp_kind})", act, inputs, kind=b.mlp_kind,
            params=tuple(f"act_{name}" for name in function_of(b.activation).params))
        if b.sub_norms:  # as mlp_rows: BitNet's norm of the hidden
            normed = S(B, T, d_ff)
            rec("mlp_sub_norm", "norm of the MLP's hidden (ffn_sub_norm)", normed, (act,), kind=b.norm,
                params=("mlp_sub_norm_gamma", "mlp_sub_norm_beta"))
            act = normed
        rec("mlp_out", "MLP " + mlp_stage(b, "out"), out, (act, S(d_ff, d)), kind="linear", params=("w_down", "b_down"))
        return S(B, T, d) if b.mlp_multipliers[1] != 1.0 else out  # times the output multiplier: a new array

    def norm(key: str, op: str, which: str, inp: ShapeOnly) -> ShapeOnly:
        out = S(B, T, d)
        rec(key, op, out, (inp,), kind=b.norm, params=(f"{which}_gamma", f"{which}_beta"))
        return out

    def add(key: str, op: str, left: ShapeOnly, right: ShapeOnly) -> ShapeOnly:
        out = S(B, T, d)
        rec(key, op, out, (left, right), kind="add")
        return out

    if b.cross_attention:  # as DecoderBlock: Mllama's cross-attention layer, skipped by a text-only pass
        out = S(B, T, d)
        rec("y", CROSS_ATTENTION_SKIPPED, out, (x,), kind="reshape")
        return out
    if b.parts == "mixer":  # as DecoderBlock: a layer of one part
        return add("y", "residual add", x, attention(norm("ln1_out", "LN1", "ln1", x)))
    if b.parts == "mlp":
        return add("y", "residual add", x, mlp(norm("ln2_out", "LN2", "ln2", x)))
    said = (scales_said(b.attn_skip_scale, b.attn_branch_scale), scales_said(b.mlp_skip_scale, b.mlp_branch_scale))
    if b.placement == "pre":
        hid = add("h", "residual add" + said[0], x, attention(norm("ln1_out", "LN1", "ln1", x)))
        return add("y", "residual add" + said[1], hid, mlp(norm("ln2_out", "LN2", "ln2", hid)))
    if b.placement == "normed_residual":
        n1 = norm("ln1_out", "LN1", "ln1", x)
        hid = add("h", "residual add (to LN1's output)" + said[0], n1, attention(n1))
        n2 = norm("ln2_out", "LN2", "ln2", hid)
        return add("y", "residual add (to LN2's output)" + said[1], n2, mlp(n2))
    if b.placement == "post":
        hid = norm("h", "LN1 (post)", "ln1", add("h_pre", "residual add", x, attention(x)))
        return norm("y", "LN2 (post)", "ln2", add("y_pre", "residual add", hid, mlp(hid)))
    if b.placement == "sandwich" and b.ngpt is not None:  # as DecoderBlock: nGPT's interpolations from the norms
        n1 = norm("ln1_out", "LN1", "ln1", x)
        hid = add("h", NGPT_RESIDUAL.format(i="₁"), n1,
                  norm("ln1_post_out", "LN1' (of the attention output)", "ln1_post", attention(n1)))
        n2 = norm("ln2_out", "LN2", "ln2", hid)
        return add("y", NGPT_RESIDUAL.format(i="₂"), n2,
                   norm("ln2_post_out", "LN2' (of the MLP output)", "ln2_post", mlp(n2)))
    if b.placement == "sandwich":
        mixer = "short conv" if b.short_conv else "attention"  # LFM3's conv layers are sandwiched too
        attended = norm("ln1_post_out", f"LN1' (of the {mixer} output)", "ln1_post",
                        attention(norm("ln1_out", "LN1", "ln1", x)))
        hid = add("h", "residual add" + said[0], x, attended)
        mixed = norm("ln2_post_out", "LN2' (of the MLP output)", "ln2_post", mlp(norm("ln2_out", "LN2", "ln2", hid)))
        return add("y", "residual add" + said[1], hid, mixed)
    if b.placement == "post_branch":
        hid = add("h", "residual add", x, norm("ln1_out", "LN1 (of the attention output)", "ln1", attention(x)))
        return add("y", "residual add", hid, norm("ln2_out", "LN2 (of the MLP output)", "ln2", mlp(hid)))
    n1 = norm("ln1_out", "LN1", "ln1", x)
    hid = add("h", "residual add (attention)", x, attention(n1))
    n2 = n1 if b.placement == "parallel_shared" else norm("ln2_out", "LN2", "ln2", x)  # one norm, read twice
    return add("y", "residual add (MLP)", hid, mlp(n2))




def merge_expert_rows(rows: list[OpRow], config: Config, tokens: int) -> list[OpRow]:
    """An executed trace with each layer's E experts' rows folded into one row per stage, as the
    analytic trace shows them: shapes and FLOPs summed over the experts (B·T·k rows in all, whatever
    the routing), the load row showing its expectation, steps renumbered and data-flow sources pointed
    at the merged rows."""
    moe = config.block.moe
    if moe is None:
        return rows
    out: list[OpRow] = []
    step_of: dict[int, int] = {}  # old step → new step
    merged: dict[tuple[int | None, str], OpRow] = {}
    for row in rows:
        prefix, _, rest = row.key.partition("experts.")
        number, _, base = rest.partition(".")
        if not rest or not number.isdigit():
            new = replace(row, step=len(out) + 1, sources=[step_of.get(s, s) if s else s for s in row.sources])
            if row.kind == "count":  # the experts' load: its expectation, as analytic rows give it
                new.op = load_label(moe, tokens)
            # its inputs: the weights, then every expert's output (now one row); the attention experts' sum (JetMoE's
            # moa_sum) reads one (B, T, k_a, d) array already
            if row.kind == "combine" and not row.key.endswith("moa_sum"):
                new.input_shapes = [row.input_shapes[0], (sum(sh[0] for sh in row.input_shapes[1:]), config.block.d_model)]
                new.sources = new.sources[:2]
            out.append(new)
            step_of[row.step] = new.step
            continue
        group = merged.get((row.layer, base))
        if group is None:
            stage = ("gather their rows" if base == "in" else mlp_stage(config.block, base) if base in ("pre", "up", "out")
                     else "rows × their routing weights" if base == "scaled_in"
                     else f"activation ({config.block.mlp_kind})")
            group = replace(row, step=len(out) + 1, key=f"{prefix}{ALL_EXPERTS}{base}",
                            op=experts_label(stage, moe, tokens), params=0, flops=0,
                            matmul_flops=0, bytes=0, output_shape=(0,) + row.output_shape[1:],
                            input_shapes=[(0,) + sh[1:] if _per_expert(base, i) else sh
                                          for i, sh in enumerate(row.input_shapes)],
                            symbolic=SYMBOLIC_ALL_EXPERTS.get(base, ""),
                            sources=[step_of.get(s, s) if s else s for s in row.sources])
            merged[(row.layer, base)] = group
            out.append(group)
        group.params += row.params
        group.flops += row.flops
        group.matmul_flops += row.matmul_flops
        group.bytes += row.bytes
        group.output_shape = (group.output_shape[0] + row.output_shape[0],) + group.output_shape[1:]
        group.input_shapes = [(g[0] + sh[0],) + g[1:] if _per_expert(base, i) else g
                              for i, (g, sh) in enumerate(zip(group.input_shapes, row.input_shapes))]
        step_of[row.step] = group.step
    return out


def _per_expert(base: str, index: int) -> bool:
    """Whether input `index` of an expert's `base` row is that expert's own rows (summed when merging):
    not the gathered-from stream, nor a weight matrix."""
    return base != "in" and not (base in ("pre", "up", "out", "scaled_in") and index == 1)


def collapse_layers(rows: list[OpRow], n_layers: int, groups: list[tuple[int, ...]] | None = None) -> list[OpRow]:
    """Show layer 0's rows once, marked ×n_layers, in place of every layer's rows; when layers differ
    (`groups` of identical layers), each group's first layer once, marked × its size, keyed
    `blocks.<its layers>.`."""
    groups = groups or [tuple(range(n_layers))]
    first = {g[0]: g for g in groups}
    out = []
    for row in rows:
        if row.layer is None:
            out.append(row)
        elif row.layer in first:
            group = first[row.layer]
            name = "*" if len(groups) == 1 else ",".join(map(str, group))
            out.append(replace(row, repeat=len(group), key=row.key.replace(f"blocks.{row.layer}.", f"blocks.{name}.", 1)))
    return out


# ----------------------------------------------------------------------------- the backward


# FLOPs per element of each elementwise operation's backward (the convention of ELEMENT_FLOPS): a norm's VJP
# recomputes its statistics and applies the mean and cross terms, a rotation turns back, an add passes dy on
BACKWARD_ELEMENT_FLOPS = {
    "add": 0, "layernorm": 8, "rmsnorm": 6, "softmax": 4, "mask": 0, "rope": 3, "reshape": 0, "gather": 1,
    "clip": 1, "scale": 1, "sigmoid": 3, "topk": 0, "count": 0, "gate": 2,
    "sigmoid_gate": 5, "softplus_gate": 5, "l2norm": 6, "decay": 5, "gated_norm": 12,  # gated attention, DeltaNet
}


@dataclass
class BackwardRow:
    step: int
    key: str  # "d:" + the forward operation's key
    op: str
    layer: int | None
    grad_shapes: list[tuple[int, ...]]  # the gradients it produces: of its inputs that are activations
    symbolic: str  # the symbolic shape of the gradient it reads, dY (its forward's output's)
    flops: int
    matmul_flops: int
    repeat: int = 1


def _backward_flops(row: OpRow, config: Config) -> tuple[str, int, int]:
    """(what the backward of `row` does, its FLOPs, of them matmul FLOPs)."""
    out = math.prod(row.output_shape)
    if row.key.rsplit(".", 1)[-1].startswith("idx_"):  # DeepSeek Sparse Attention's indexer runs without gradients
        return "none: the indexer's choice is a constant of the pass", 0, 0
    if row.kind == "linear":  # and the bias's sum over the rows, as many FLOPs as its forward add
        return "dX = dY·Wᵀ and dW = Xᵀ·dY", 2 * row.matmul_flops + row.flops - row.matmul_flops, 2 * row.matmul_flops
    if row.kind == "matmul" and row.key.rsplit(".", 1)[-1] == "scores":  # the table is not kept: recomputed
        return "Q·Kᵀ recomputed, then dQ = dS·K and dK = dSᵀ·Q", 3 * row.matmul_flops, 3 * row.matmul_flops
    if row.kind == "matmul":  # weights·V
        return "dV = Pᵀ·dO and dP = dO·Vᵀ", 2 * row.matmul_flops, 2 * row.matmul_flops
    if row.kind == "attention":  # the blocked kernel: Q·Kᵀ recomputed per tile, then four products
        q, _, v = row.input_shapes
        d_h, d_v = q[-1], v[-1]
        recompute = row.matmul_flops * d_h // (d_h + d_v)
        return (f"recompute score tiles Q·Kᵀ from each row's log-sum-exp ({recompute:,} FLOPs), then dV = Pᵀ·dO, "
                f"dP = dO·Vᵀ, dQ = dS·K, dK = dSᵀ·Q", row.matmul_flops * (3 * d_h + 2 * d_v) // (d_h + d_v),
                row.matmul_flops * (3 * d_h + 2 * d_v) // (d_h + d_v))
    if row.kind == "conv":  # the depthwise conv: dX and dW, K multiply-adds per element each
        return "dX and dW of the depthwise conv", 2 * row.matmul_flops, 2 * row.matmul_flops
    if row.kind == "delta_rule":  # walked back from the last token: S'ᵀk and S recomputed, then seven products
        return ("the recurrence walked back: S'ᵀk and S recomputed, then dq = S·dO, dS += q·dOᵀ, dδ = dSᵀk, "
                "dk = dS·δ + S'·dr, dS += k·drᵀ, dg = Σ dS ⊙ S'", 3 * row.matmul_flops
                + 2 * (row.flops - row.matmul_flops), 3 * row.matmul_flops)
    if row.kind in MLP_KIND_FLOPS:
        from blockcli.activations import function_of

        gated = len(row.input_shapes) == 2
        per = function_of(config.block.activation).backward_flops + (2 if gated else 0)
        return "through the activation" + (" and the product with the up branch" if gated else ""), per * out, 0
    per = BACKWARD_ELEMENT_FLOPS.get(row.kind, 0)
    return "", per * out, 0


def backward_rows(rows: list[OpRow], config: Config) -> list[BackwardRow]:
    """The backward's rows, in the order it runs (the forward's reversed), each with the gradients it produces
    (those of its inputs that are activations, then its parameters') and its FLOPs as `_backward_flops` counts
    them. Rows without a backward of their own (the token ids' lookup reads no gradient) are kept: their
    parameters still get one."""
    out = []
    for row in reversed(rows):
        what, flops, matmul = _backward_flops(row, config)
        grads = [s for s, src in zip(row.input_shapes, row.sources) if src is not None and src != 0 or
                 (src == 0 and row.kind != "gather")]
        out.append(BackwardRow(len(out) + 1, "d:" + row.key, f"∂ {row.op}" + (f": {what}" if what else ""),
                               row.layer, grads, row.symbolic, flops, matmul, row.repeat))
    return out


@dataclass
class BackwardReport:
    rows: list[BackwardRow]
    forward_flops: int
    flops: int
    matmul_flops: int
    saved_bytes: int | None  # measured: the tape's peak (None for --shapes-only)
    closed_form_bytes: int | None  # blockcli.saved's formula (None: latent attention, experts)
    saved_by_operation: dict[str, int]  # measured, each operation's arrays (shared ones in each)
    gradients: int  # parameter tensors that got a gradient of their own shape
    parameters: int  # parameter tensors in all (buffers aside)
    unrouted: list[str]  # parameters no gradient reached: those of experts no token was routed to
    korthikanti_bytes: int | None  # count --train's activation figure for the same workload, precision fp32
    # DeepSeek Sparse Attention's indexer parameters: no gradient by design (it runs under no_grad, as in transformers)
    indexer: list[str] = field(default_factory=list)
    # the parameters of layers the pass skips (Mllama's cross-attention layers without image states): no gradient
    skipped: list[str] = field(default_factory=list)


def backward_report(trace: Trace, rows: list[OpRow], weights: Any = None, x: np.ndarray | None = None) -> BackwardReport:
    """The backward of the traced pass: rows (from the collapsed forward rows shown), FLOPs against the
    forward's, and, for an executed trace, a real backward's measured saves and gradients."""
    from blockcli.saved import model_saved_bytes
    from blockcli.shapes import is_buffer
    from blockcli.sizing import activation_terms
    from blockcli.tape import Tape

    cfg = trace.config
    b_rows = backward_rows(rows, cfg)
    flops = sum(r.flops * r.repeat for r in b_rows)
    matmul = sum(r.matmul_flops * r.repeat for r in b_rows)
    itemsize = np.dtype(trace.dtype).itemsize
    closed = model_saved_bytes(cfg, trace.batch, trace.seq_len, itemsize, blocked=trace.attention == "chunked")
    shapes = model_parameter_shapes(cfg) if cfg.model else block_parameter_shapes(cfg.block)
    n_params = sum(1 for k in shapes if not is_buffer(k))
    saved = None
    by_op: dict[str, int] = {}
    got, unrouted, indexer, skipped = 0, [], [], []
    if trace.mode == "executed":
        tape = Tape()
        if cfg.model:
            model = Model.from_config(cfg, weights, attention=trace.attention)
            ids = np.random.default_rng(cfg.run.seed).integers(0, cfg.model.vocab_size,
                                                               size=(trace.batch, trace.seq_len))
            _, tape = model.backward_pass(ids, tape=tape)
            grads, params = tape.grads, model.params
        else:
            blk = DecoderBlock.from_config(cfg, weights, attention=trace.attention)
            inp = seeded_input(cfg) if x is None else x
            y = blk(inp, tape=tape)
            blk.backward(np.ones_like(y), tape)
            grads, params = tape.grads, blk.params
        saved, by_op = tape.peak_bytes, dict(tape.at_backward or {})
        got = sum(1 for k, v in params.items() if not is_buffer(k) and k in grads and grads[k].size == v.size)
        unrouted = [k for k in params if not is_buffer(k) and k not in grads and ".experts." in "." + k]
        indexer = [k for k in params if k not in grads and k.rsplit(".", 1)[-1].startswith("idx_")]
        skipped_layers = {f"blocks.{i}." for i in range(cfg.model.n_layers if cfg.model else 0)
                          if cfg.layer_block(i).cross_attention}
        skipped = [k for k in params if k not in grads and k.startswith(tuple(skipped_layers))]
    korthikanti = sum(t.bytes for t in activation_terms(cfg.block, trace.seq_len, trace.batch, "fp32", "none")) * \
        (cfg.model.n_layers if cfg.model else 1)
    return BackwardReport(b_rows, sum(r.flops * r.repeat for r in rows), flops, matmul, saved, closed, by_op, got,
                          n_params, unrouted, korthikanti, indexer, skipped)


