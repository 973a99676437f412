"""`blockcli report`: one self-contained HTML page of a model (or two, side by side).

What the page shows is computed by the modules the other commands use, never again here: the
breakdown is `count_parameters` (the rows `count --json` prints), the memory and FLOPs are
`sizing.inference` at each length (what `count --seq T --json` prints), the shape flow is the
analytic trace (`trace --shapes-only --json`), the attention maps are the softmax weights a real
traced pass keeps (`trace --save`), the checklist is `verify`. This module only chooses, arranges
and draws (charts from `blockcli.svg`).

The page: no script, no external reference (every style and image inline, system fonts), so it
loads offline and reads the same without JavaScript; hover texts are SVG <title>s. Same input, same
bytes: nothing depends on the clock, the machine or the run. It sits at the render level: it may
import count/trace/verify/sizing, and only `cli` imports it.

A page is a list of sections, each built by one function from a `ModelReport`; later features add
a section (or rows to one) rather than reshaping the page: the gradient checks of `verify --grad`
join the checklist's table, `--gpu` timings join the cost charts as more series, and
`count --sweep`'s points can replace `sweep_points`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from blockcli import __version__
from blockcli.config import BlockConfig, Config, InputError, clipped, layer_list, parse_json, read_text_file
from blockcli.svg import PALETTE, Canvas, Series, esc, heatmap, line_chart
from blockcli.units import human_bytes

MAP_SEQ = 24  # tokens of the pass the attention maps come from: enough to see a causal triangle and small windows
MAP_HEADS = 4  # heads drawn per layer, spread over the K/V groups
MAP_LAYERS = 3  # at most this many layer groups get maps
MODEL_PASS_LIMIT = 50_000_000  # parameters: a model this small runs whole, its maps from its own residual stream
BLOCK_PASS_LIMIT = 60_000_000  # weights one block's pass may draw; past it the MLP is narrowed (see attention_maps)
SWEEP_MIN, SWEEP_MAX = 128, 2 ** 20  # the lengths of the cost charts: powers of two in this range
TRAIN_LOG_MAX_STEPS = 1_000_000


def human(x: float) -> str:
    """1234567 → '1.23M' (SI prefixes; FLOPs and counts in charts)."""
    for unit, scale in (("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


def exact(value: int) -> str:
    return f"{value:,}"


# ----------------------------------------------------------------------------- the data


@dataclass(frozen=True)
class AttentionMap:
    layer: int | None  # None: a lone block
    head: int
    kv_group: int
    window: int  # the block's sliding window (0: none)
    weights: Any  # (T, T) float array, query × key
    label: str


@dataclass(frozen=True)
class TrainStep:
    step: int
    loss: float
    grad_norm: float


@dataclass
class ModelReport:
    """Everything one model's page shows, computed once."""

    config: Config
    source: str  # what the user named: a preset, a file, a folder
    count: Any  # count.ParameterCount
    inference: Any  # sizing.Inference at the chosen workload
    trace: Any  # trace.Trace, analytic, at the workload
    trace_rows: list[Any]  # its rows with layers collapsed, as `trace` prints them
    maps: list[AttentionMap]
    map_notes: list[str]
    sweep: list[Any]  # sizing.Inference at each length of the cost charts
    checks: Any  # verify's reports, one per kind of layer (as `verify` runs them), or None when it could not run
    check_note: str
    train_log: list[TrainStep] | None = None
    train_log_name: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        """A check failed or the formula and the arrays disagree: the command exits 1 (the page is written)."""
        return (self.checks is not None and not all(r.passed for r in self.checks)) or not self.count.reconciled.match


def build(config: Config, source: str, *, weights: Path | None = None, seq: int | None = None,
          batch: int | None = None, dtype: str | None = None, kv_dtype: str | None = None,
          train_log: Path | None = None) -> ModelReport:
    """Compute a model's report. `weights`: a model folder (or .safetensors file) whose own tensors
    the maps and the checklist use, and whose headers the count is reconciled with."""
    from blockcli import sizing
    from blockcli.count import count_parameters
    from blockcli.trace import analytic_trace, collapse_layers, with_run

    steps = read_train_log(train_log) if train_log is not None else None
    T, B = seq or config.run.seq_len, batch or config.run.batch
    sizing.check_workload(config, T)
    size_dtype = dtype or config.run.dtype
    stored = None
    if weights is not None:
        from blockcli.weight_files import checkpoint_sizes

        stored = checkpoint_sizes(weights, config)
    result = count_parameters(config, checkpoint=stored[0] if stored else None,
                              checkpoint_info=stored[1] if stored else None)
    inference = sizing.inference(config, result.total, T, B, size_dtype, kv_dtype)
    # the trace's bytes in the dtype a pass can run in (trace takes float32 or float64)
    trace_dtype = size_dtype if size_dtype in ("float32", "float64") else config.run.dtype
    traced = analytic_trace(with_run(config, B, T, trace_dtype))
    rows = traced.rows
    if config.model:
        rows = collapse_layers(rows, config.model.n_layers, [g.layers for g in config.layer_groups()])
    notes = []
    if trace_dtype != size_dtype:
        notes.append(f"the shape flow's bytes are in {trace_dtype} (a pass runs in float32 or float64); "
                     f"the sizes elsewhere in {size_dtype}")
    maps, map_notes = attention_maps(config, weights)
    checks, check_note = checklist(config, weights)
    return ModelReport(config, source, result, inference, traced, rows, maps, map_notes,
                       sweep_points(config, result.total, B, size_dtype, kv_dtype), checks, check_note, steps,
                       str(train_log) if train_log is not None else "", notes)


def sweep_points(config: Config, parameters: int, batch: int, dtype: str, kv_dtype: str | None) -> list[Any]:
    """sizing.inference at each power-of-two length from SWEEP_MIN (less for a context under 4,096) to
    the model's context (its max_positions; 32,768 for a lone block), at most SWEEP_MAX."""
    from blockcli import sizing

    limit = min(SWEEP_MAX, config.model.max_positions if config.model else 32768)
    lengths = []
    T = max(1, min(SWEEP_MIN, limit // 32))  # a short context still gets six points
    while T <= limit:
        lengths.append(T)
        T *= 2
    if lengths[-1] != limit:
        lengths.append(limit)
    return [sizing.inference(config, parameters, T, batch, dtype, kv_dtype) for T in lengths]


def checklist(config: Config, weights: Path | None) -> tuple[Any, str]:
    """verify's reports for one layer of each kind, as `verify` picks them (seeded weights, or the
    folder's own weights of that layer), or None and why they could not run."""
    from blockcli.verify import layers_to_verify, verify

    layers = [0 if weights is not None and k is None else k for k in layers_to_verify(config)]
    try:
        return [verify(config, weights=weights, layer=k) for k in layers], ""
    except InputError as exc:
        return None, f"the checklist could not run: {exc}"


def spread_heads(n_heads: int, n_kv_heads: int, count: int = MAP_HEADS) -> list[int]:
    """`count` heads evenly spaced over 0..n_heads-1 (so over the K/V groups), all when fewer."""
    if n_heads <= count:
        return list(range(n_heads))
    return sorted({i * n_heads // count for i in range(count)})


def _attention_key(b: BlockConfig) -> BlockConfig:
    """The block with its MLP fields neutral: two layers with equal keys draw equal seeded attention."""
    return replace(b, d_ff=1, moe=None, activation="relu", gated=False, placement="pre", dropout=0.0)


def _narrow_mlp(b: BlockConfig) -> BlockConfig:
    """The block with a width-8 dense MLP. Its attention sees exactly what the full block's does:
    attention reads the block input (or LN1 of it) in every placement, and the seeded weights are
    drawn in declaration order, where LN1 and attention come before everything the MLP holds."""
    return replace(b, d_ff=8, moe=None)


def attention_maps(config: Config, weights: Path | None) -> tuple[list[AttentionMap], list[str]]:
    """The softmax weights of a few heads, from a real pass of MAP_SEQ tokens (batch 1, float32).

    A model of at most MODEL_PASS_LIMIT parameters runs whole on seeded token ids, and the maps are
    those of the first layer of each layer group. A larger one runs one block per group, on the
    seeded N(0, 1) input `trace --layer L` uses, with that layer's weights (the folder's own, or
    seeded); when seeded weights of a block would pass BLOCK_PASS_LIMIT, its MLP is narrowed, which
    leaves the maps unchanged (see _narrow_mlp)."""
    from blockcli.shapes import block_parameter_shapes, model_parameter_shapes
    from blockcli.trace import available_bytes, forward_bytes_estimate, run_trace, with_run

    notes: list[str] = []
    m = config.model
    T = min(MAP_SEQ, m.max_positions) if m is not None and m.positions == "learned" else MAP_SEQ
    groups = config.layer_groups()
    recurrent = [g for g in groups if g.block.linear_attention is not None]  # Gated DeltaNet: no softmax to map
    if recurrent:
        kinds = " and ".join(dict.fromkeys("Kimi Delta Attention" if g.block.linear_attention.per_channel else
                                           "Gated DeltaNet" for g in recurrent))
        notes.append(f"no maps of {layer_list(tuple(i for g in recurrent for i in g.layers))}: {kinds} layers "
                     f"mix tokens through a recurrent state, with no attention weights")
    def attends(b: BlockConfig) -> bool:  # a hybrid layer (Falcon-H1's) has attention beside its Mamba-2 mixer
        return b.parts == "hybrid" or (b.linear_attention is None and b.mamba is None and b.short_conv is None
                                       and b.lightning is None and b.parts != "mlp" and not b.cross_attention)

    lightning = [g for g in groups if g.block.lightning is not None]  # MiniMax: no softmax to map either
    if lightning:
        notes.append(f"no maps of {layer_list(tuple(i for g in lightning for i in g.layers))}: lightning-attention "
                     f"layers mix tokens through a decayed recurrent state, with no attention weights")
    if any(not attends(g.block) and g.block.linear_attention is None and g.block.lightning is None for g in groups):
        notes.append("no maps of the layers without attention (Mamba-1 and Mamba-2 mixers, short convolutions, MLPs "
                     "alone, cross-attention layers a text-only pass skips)")
    groups = [g for g in groups if attends(g.block)]
    shown = groups[:MAP_LAYERS]
    if len(groups) > MAP_LAYERS:
        notes.append(f"maps of the first {MAP_LAYERS} of {len(groups)} layer groups")
    maps: list[AttentionMap] = []

    def add(block: BlockConfig, layer: int | None, heads_weights: Any) -> None:
        group = block.n_heads // block.n_kv_heads
        for head in spread_heads(block.n_heads, block.n_kv_heads):
            where = f"layer {layer}, " if layer is not None else ""
            window = f", window {block.sliding_window}" if block.sliding_window else ""
            maps.append(AttentionMap(layer, head, head // group, block.sliding_window, heads_weights[head],
                                     f"{where}head {head} (K/V group {head // group}){window}"))

    size = sum(math.prod(s) for s in (model_parameter_shapes(config) if m else {}).values())
    if m is not None and size <= MODEL_PASS_LIMIT:
        cfg = with_run(config, 1, T, "float32")
        if forward_bytes_estimate(cfg, "full") > available_bytes():
            return [], ["no attention maps: a pass would need more memory than is available"]
        result = run_trace(cfg, weights=weights, attention="full", keep=True)
        for g in shown:
            layer = g.layers[0]
            add(g.block, layer, result.arrays[f"blocks.{layer}.attn_weights"][0])
        how = "the folder's own weights" if weights is not None else f"seeded weights (run.seed {config.run.seed})"
        notes.insert(0, f"a real pass of the whole model over {T} seeded token ids (batch 1, float32), {how}; "
                        f"as `blockcli trace --seq {T} --batch 1 --save FILE` keeps them")
        return maps, notes
    seen: dict[BlockConfig, int] = {}
    for g in shown:
        layer = g.layers[0] if m is not None else None
        block = g.block
        if weights is None and _attention_key(block) in seen:  # same seeded draws: the same maps
            notes.append(f"layer {layer}: the same attention as layer {seen[_attention_key(block)]} "
                         f"under seeded weights (its layers differ in the MLP only)")
            continue
        seen[_attention_key(block)] = layer if layer is not None else 0
        run_block, narrowed = block, False
        drawn = sum(math.prod(s) for s in block_parameter_shapes(block).values())
        if drawn > BLOCK_PASS_LIMIT and weights is None:
            run_block, narrowed = _narrow_mlp(block), True
        cfg = with_run(replace(config.for_layer(layer) if layer is not None else config, block=run_block, model=None,
                               layer_blocks=()), 1, T, "float32")
        if forward_bytes_estimate(cfg, "full") > available_bytes():
            notes.append(f"layer {layer}: no maps, its pass would need more memory than is available")
            continue
        result = run_trace(cfg, weights=weights, attention="full", keep=True, layer=layer if weights else None,
                           model_config=config if weights else None)
        add(block, layer, result.arrays["attn_weights"][0])
        if narrowed:
            notes.append(f"{'layer ' + str(layer) if layer is not None else 'the block'}: its MLP narrowed to width 8 "
                         f"for the pass (the block holds {drawn:,} weights); attention reads the block's input "
                         f"before the MLP and its seeded weights are drawn first, so the maps are the full block's")
    where = f"each layer group's first block (`blockcli trace --layer L --seq {T} --batch 1`)" if m else \
        f"the block (`blockcli trace --seq {T} --batch 1`)"
    how = "the folder's own weights" if weights is not None else f"seeded weights (run.seed {config.run.seed})"
    notes.insert(0, f"a real pass of {where} on seeded N(0, 1) inputs, float32, {how}")
    return maps, notes


def read_train_log(path: Path) -> list[TrainStep]:
    """A `blockcli train --json` log: {"steps": [{"step": int, "loss": float, "grad_norm": float}, ...]},
    steps strictly increasing, losses and norms finite (norms ≥ 0). Other keys are ignored."""
    where = f"--train-log {path}"
    data = parse_json(read_text_file(path, "a JSON training log"), where, InputError)  # nesting, digits, NaN: one line
    if not isinstance(data, dict) or not isinstance(data.get("steps"), list):
        raise InputError(f'{where}: expected a JSON object with a "steps" list, as `blockcli train --json` writes')
    entries = data["steps"]
    if not entries:
        raise InputError(f"{where}: steps is empty; nothing to draw")
    if len(entries) > TRAIN_LOG_MAX_STEPS:
        raise InputError(f"{where}: {len(entries):,} steps; at most {TRAIN_LOG_MAX_STEPS:,} are drawn")
    steps = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise InputError(f"{where}: steps[{i}]: expected an object with step, loss and grad_norm")
        step = entry.get("step")
        if isinstance(step, bool) or not isinstance(step, int):
            raise InputError(f"{where}: steps[{i}].step: expected an integer, got {clipped(json.dumps(step))}")
        values = []
        for name in ("loss", "grad_norm"):
            value = entry.get(name)
            try:
                number = math.nan if isinstance(value, bool) or not isinstance(value, (int, float)) else float(value)
            except OverflowError:  # an integer past the float range
                number = math.inf
            if not math.isfinite(number):
                raise InputError(f"{where}: steps[{i}].{name}: expected a finite number, got "
                                 f"{clipped(json.dumps(value))}")
            values.append(number)
        if values[1] < 0:
            raise InputError(f"{where}: steps[{i}].grad_norm: a norm is ≥ 0, got {values[1]}")
        if steps and step <= steps[-1].step:
            raise InputError(f"{where}: steps[{i}].step: {step} after {steps[-1].step}; expected increasing steps")
        steps.append(TrainStep(step, values[0], values[1]))
    return steps


# ----------------------------------------------------------------------------- words


PLACEMENT_WORDS = {
    "pre": "pre-norm: H = X + MHA(LN1(X)), Y = H + MLP(LN2(H))",
    "post": "post-norm: H = LN1(X + MHA(X)), Y = LN2(H + MLP(H))",
    "parallel": "parallel branches, each with its norm: Y = X + MHA(LN1(X)) + MLP(LN2(X))",
    "parallel_shared": "parallel branches reading one norm: Y = X + MHA(LN1(X)) + MLP(LN1(X))",
    "sandwich": "a norm before and after each branch: H = X + LN1′(MHA(LN1(X))), Y = H + LN2′(MLP(LN2(H)))",
    "post_branch": "each branch's output normalised: H = X + LN1(MHA(X)), Y = H + LN2(MLP(H))",
    "normed_residual": "pre-norm with each norm's output as the residual: H = LN1(X) + MHA(LN1(X)), "
                       "Y = LN2(H) + MLP(LN2(H))",
}
NORM_WORDS = {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm", "l2norm": "L2 norm (onto the unit sphere)"}
ACTIVATION_WORDS = {"gelu_tanh": "GELU (tanh)", "gelu": "GELU (exact)", "relu": "ReLU", "silu": "SiLU",
                    "swiglu": "SwiGLU", "geglu": "GeGLU", "reglu": "ReGLU", "clamped_swiglu": "clamped SwiGLU"}


def activation_words(b: BlockConfig) -> str:
    """The MLP's activation as people write it (SwiGLU, GELU (tanh)); the registry's name otherwise."""
    return ACTIVATION_WORDS.get(b.mlp_kind, b.mlp_kind)


def attention_words(b: BlockConfig) -> str:
    if b.mla is not None:
        q = f"queries through a rank-{b.mla.q_lora_rank} latent" if b.mla.q_lora_rank else "queries through one projection"
        return (f"multi-head latent attention: {b.n_heads} heads; keys and values from a {b.mla.kv_lora_rank}-wide "
                f"latent, {q}; heads of {b.mla.qk_nope_head_dim} + {b.mla.qk_rope_head_dim} rotated dims, "
                f"values {b.mla.v_head_dim}")
    if b.n_kv_heads == b.n_heads:
        return f"multi-head attention: {b.n_heads} heads of {b.head_dim}"
    if b.n_kv_heads == 1:
        return f"multi-query attention: {b.n_heads} query heads of {b.head_dim} share one K/V head"
    return (f"grouped-query attention: {b.n_heads} query heads of {b.head_dim} in {b.n_kv_heads} K/V groups "
            f"of {b.n_heads // b.n_kv_heads}")


def position_words(b: BlockConfig) -> list[str]:
    out = []
    if b.rope:
        rotated = f"{b.rope_dims} of {b.head_dim}" if b.rope_dims != b.head_dim else f"all {b.head_dim}"
        theta = f"{int(b.rope_theta):,}" if b.rope_theta == int(b.rope_theta) else f"{b.rope_theta:g}"
        text = f"RoPE on {rotated} dims per head, base θ = {theta}"
        if b.rope_layout != "half":
            text += f", {b.rope_layout} pairs"
        if b.rope_scaling is not None:
            text += f", {b.rope_scaling.type} scaling ×{b.rope_scaling.factor:g}"
        out.append(text)
    if b.alibi:
        out.append("ALiBi: a per-head linear bias on the scores instead of positions")
    return out


def block_features(b: BlockConfig) -> list[str]:
    """The block's distinctive choices, in words."""
    out = [attention_words(b), *position_words(b)]
    if b.sliding_window:
        out.append(f"sliding window: each query sees its last {b.sliding_window:,} keys")
    if b.attention_chunk:
        out.append(f"chunked attention: each query sees only the keys of its own chunk of {b.attention_chunk:,}")
    if b.qk_norm != "none":
        out.append({"head": "QK-norm per head (one scale over d_h)", "projection": "QK-norm over the whole projection",
                    "each_head": "QK-norm per head, each head its own scale",
                    "head_unscaled": "QK-norm per head without weights (an L2 norm)"}[b.qk_norm])
    if b.attention_softcap:
        out.append(f"attention scores soft-capped: c·tanh(s/c), c = {b.attention_softcap:g}")
    if b.attention_sinks:
        out.append("a learned sink logit per head joins each softmax (rows then sum to less than 1)")
    if b.attention_scale:
        out.append(f"scores scaled by {b.attention_scale:g} instead of 1/√d_h")
    if b.clip_qkv:
        out.append(f"Q, K, V clamped to ±{b.clip_qkv:g}")
    if b.query_scale:
        out.append(f"queries scaled by 1 + {b.query_scale:g}·ln(1 + ⌊t / {b.query_scale_length:,}⌋) after RoPE")
    norm = NORM_WORDS[b.norm] + (" with scale 1 + γ" if b.norm_unit_offset else "") + ("" if b.norm_scale else
                                                                                       " without parameters")
    out.append(f"{norm}; {PLACEMENT_WORDS[b.placement]}")
    if b.ngpt is not None:
        out.append("nGPT: each residual add an interpolation n + |λ·α|⊙(branch − n) from the normalised input; the "
                   "queries, the attention gate and the MLP's gate and up scaled per channel by learned vectors")
    if b.residual_multiplier != 1:
        out.append(f"each branch scaled by {b.residual_multiplier:g} before its residual add")
    act = activation_words(b)
    if b.moe is not None:
        e = b.moe
        text = (f"mixture of {e.n_experts} {act} experts of width {e.d_expert}, top-{e.top_k} per token "
                f"({e.scoring} router")
        text += (f", in {e.n_groups} groups of which {e.top_groups} may be chosen" if e.n_groups > 1 else "") + ")"
        if e.d_shared:
            text += f"; a shared expert of width {e.d_shared}" + (" behind a sigmoid gate" if e.shared_gate else "")
        out.append(text)
    else:
        out.append(f"{act} MLP: d {b.d_model:,} → d_ff {b.d_ff:,} → d" + (" (gated: two input projections)"
                                                                          if b.gated else ""))
    biases = [name for name, on in (("Q/K/V", b.bias.qkv), ("output", b.bias.out), ("MLP", b.bias.mlp)) if on]
    out.append("biases on " + ", ".join(biases) if biases else "no linear biases")
    return out


def model_features(config: Config) -> list[str]:
    m = config.model
    if m is None:
        return ["a lone block (no model section): no embeddings, no LM head"]
    out = [f"{m.n_layers} layers, vocabulary {m.vocab_size:,}, context {m.max_positions:,} positions"]
    if m.positions in ("learned", "sinusoidal"):
        out.append(f"{m.positions} absolute positions")
    out.append("LM head tied to the token embedding (counted once)" if m.tie_embeddings else "untied LM head")
    if m.embedding_multiplier != 1:
        out.append(f"embeddings × {m.embedding_multiplier:g}")
    if m.embedding_norm:
        out.append("a norm on the embeddings")
    if m.embedding_dim and m.embedding_dim != config.block.d_model:
        out.append(f"embeddings {m.embedding_dim} wide, projected in and out")
    if m.logit_softcap:
        out.append(f"logits soft-capped at {m.logit_softcap:g}")
    if m.logit_multiplier != 1:
        out.append(f"logits × {m.logit_multiplier:g}")
    if not m.final_norm:
        out.append("no final norm")
    if config.layers_differ:
        out += [f"{g.describe()}" for g in config.layer_groups()]
    return out


# ----------------------------------------------------------------------------- sections


@dataclass(frozen=True)
class Section:
    id: str
    title: str
    body: str


def _table(headers: Sequence[str], rows: Sequence[str], cls: str, numeric: Sequence[int] = ()) -> str:
    head = "".join(f'<th{" class=num" if i in numeric else ""}>{esc(h)}</th>' for i, h in enumerate(headers))
    return (f'<div class="scroll"><table class="{cls}"><thead><tr>{head}</tr></thead><tbody>'
            + "".join(rows) + "</tbody></table></div>")


def _cell(text: object, cls: str = "", title: str = "") -> str:
    attrs = (f' class="{cls}"' if cls else "") + (f' title="{esc(title)}"' if title else "")
    return f"<td{attrs}>{esc(text)}</td>"


def _notes(notes: Sequence[str]) -> str:
    return "".join(f'<p class="note">{esc(n)}</p>' for n in notes)


def overview_section(r: ModelReport) -> Section:
    cfg, c, inf = r.config, r.count, r.inference
    b = cfg.block
    figures = [
        ("total", "parameters", exact(c.total), human(c.total)),
        ("active", "active per token", exact(c.active_total), f"{100 * c.active_total / c.total:.1f}% of the total"
         if c.total else ""),
        ("non_embedding", "non-embedding", exact(c.non_embedding), "without token and position tables"),
        ("per_block", "per block", exact(c.per_block), f"{c.n_layers} block{'s' if c.n_layers != 1 else ''}"),
        ("memory", f"inference memory, {inf.batch} × {inf.seq_len:,} tokens", exact(inf.memory_bytes),
         f"{human_bytes(inf.memory_bytes)}: weights {human_bytes(inf.parameter_bytes)} ({inf.dtype}) + K/V cache "
         f"{human_bytes(inf.kv_bytes)} ({inf.kv_dtype}) + activations {human_bytes(inf.activation_bytes)}"),
        ("kv_per_token", "K/V cache per token", exact(inf.kv_bytes_per_token), f"bytes, {inf.kv_dtype}"),
    ]
    dims = (f"d = {b.d_model:,}, h = {b.n_heads}, h_kv = {b.n_kv_heads}, d_h = {b.head_dim}, "
            + (f"d_ff = {b.d_ff:,}" if b.moe is None else f"d_expert = {b.moe.d_expert:,}")
            + (f", V = {cfg.model.vocab_size:,}, L = {cfg.model.n_layers}" if cfg.model else ""))
    about = cfg.about
    body = [f'<p class="lead">{esc(about.description)}</p>' if about.description else "",
            '<dl class="figures">']
    for key, name, value, detail in figures:
        body.append(f'<div><dt>{esc(name)}</dt><dd data-figure="{key}">{esc(value)}</dd>'
                    f'<dd class="detail">{esc(detail)}</dd></div>')
    body.append("</dl>")
    body.append(f'<p class="dims">{esc(dims)}</p>')
    source = r.source or "the built-in default block"
    body.append(f'<p>Source: <code>{esc(source)}</code>'
                + (f"; published as {esc(about.source)}" if about.source else "") + "</p>")
    body.append("<h3>What sets it apart</h3><ul class=features>"
                + "".join(f"<li>{esc(f)}</li>" for f in model_features(cfg) + block_features(b)) + "</ul>")
    body.append(_notes(list(r.notes) + list(cfg.notes)))
    return Section("overview", "Overview", "".join(body))


# --- the architecture diagram

BOX_W, LANE_X, MID_X, DIAGRAM_W = 270, 34, 215, 400
KIND_FILL = {"norm": "#eef3fb", "attention": "#fdf1dc", "mlp": "#e3f4ec", "io": "#f2f2f2"}
KIND_STROKE = {"norm": "#6a8fc7", "attention": "#c98a16", "mlp": "#2f9a6a", "io": "#888"}


@dataclass(frozen=True)
class Box:
    kind: str
    lines: tuple[str, ...]
    glyph: tuple[int, int, int] | None = None  # (count, groups or chosen, kind: 0 heads, 1 experts)


def _wrap(text: str, width: int = 40) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width) or [""]


def _norm_box(b: BlockConfig, name: str) -> Box:
    return Box("norm", (f"{name}: {NORM_WORDS[b.norm]}" + (" (1 + γ)" if b.norm_unit_offset else ""),))


def _attention_box(b: BlockConfig) -> Box:
    lines = [("latent attention" if b.mla else "causal self-attention") + f", {b.n_heads} heads"]
    if b.mla is None and b.n_kv_heads != b.n_heads:
        lines.append(f"{b.n_kv_heads} K/V group{'s' if b.n_kv_heads > 1 else ''} of {b.n_heads // b.n_kv_heads} heads")
    extras = [*position_words(b)]
    if b.sliding_window:
        extras.append(f"window {b.sliding_window:,} keys")
    if b.attention_chunk:
        extras.append(f"chunks of {b.attention_chunk:,} keys")
    if b.qk_norm != "none":
        extras.append("QK-norm")
    if b.attention_softcap:
        extras.append(f"soft-cap {b.attention_softcap:g}")
    if b.attention_sinks:
        extras.append("sinks")
    if b.parts == "hybrid" and b.mamba is not None:  # Falcon-H1: a Mamba-2 mixer beside it, their outputs summed
        m = b.mamba
        extras.append(f"∥ Mamba-2 beside it: {m.n_heads} heads of {m.head_dim}, state {m.d_state}; outputs summed")
    for extra in extras:
        lines += _wrap(extra)
    groups = b.n_heads if b.mla else b.n_kv_heads
    return Box("attention", tuple(lines), (b.n_heads, groups, 0))


def _mlp_box(b: BlockConfig) -> Box:
    act = activation_words(b)
    if b.moe is None:
        return Box("mlp", (f"{act} MLP", f"{b.d_model:,} → {b.d_ff:,} → {b.d_model:,}"))
    e = b.moe
    lines = [f"{e.n_experts} experts ({act}), top-{e.top_k}", f"each {b.d_model:,} → {e.d_expert:,} → {b.d_model:,}"]
    if e.d_shared:
        lines.append(f"+ shared expert of {e.d_shared:,}")
    return Box("mlp", tuple(lines), (e.n_experts, e.top_k, 1))


def _box_height(box: Box) -> float:
    return 12 + 15 * len(box.lines) + (16 if box.glyph else 0)


def _draw_box(canvas: Canvas, box: Box, cx: float, y: float, width: float) -> float:
    h = _box_height(box)
    canvas.rect(cx - width / 2, y, width, h, KIND_FILL[box.kind], stroke=KIND_STROKE[box.kind], rx=6)
    for i, line in enumerate(box.lines):
        canvas.text(cx, y + 19 + 15 * i, line, size=12 if i == 0 else 11, anchor="middle",
                    weight="600" if i == 0 else "")
    if box.glyph:
        count, groups, kind = box.glyph
        shown = min(count, 64)
        size = min(8.0, (width - 24) / shown - 1)
        x0 = cx - shown * (size + 1) / 2
        gy = y + h - 14
        for i in range(shown):
            if kind == 0:  # heads, coloured by K/V group
                colour = PALETTE[(i * groups // count) % 6] if groups < count else PALETTE[0]
                canvas.rect(x0 + i * (size + 1), gy, size, size, colour)
            else:  # experts: the top-k a token uses filled, the rest outlined
                canvas.rect(x0 + i * (size + 1), gy, size, size, KIND_STROKE["mlp"] if i < groups else "#ffffff",
                            stroke=KIND_STROKE["mlp"])
        if count > shown:
            canvas.text(cx + width / 2 - 6, gy + 8, f"…{count}", size=9, anchor="end")
    return h


def _branches(b: BlockConfig) -> list[tuple[str, list[Box]]]:
    """The block as residual steps: ('seq', boxes) adds the boxes' output to the stream, ('post', [norm])
    normalises the stream itself, ('par', [...]) is handled by the caller."""
    ln1, ln2 = _norm_box(b, "LN1"), _norm_box(b, "LN2")
    attn, mlp = _attention_box(b), _mlp_box(b)
    if b.placement in ("pre", "normed_residual"):  # (normed_residual: the adds start from each norm's output)
        return [("seq", [ln1, attn]), ("seq", [ln2, mlp])]
    if b.placement == "sandwich":
        return [("seq", [ln1, attn, _norm_box(b, "LN1′")]), ("seq", [ln2, mlp, _norm_box(b, "LN2′")])]
    if b.placement == "post_branch":
        return [("seq", [attn, ln1]), ("seq", [mlp, ln2])]
    if b.placement == "post":
        return [("seq", [attn]), ("post", [ln1]), ("seq", [mlp]), ("post", [ln2])]
    return []  # parallel placements


def block_diagram(b: BlockConfig, label: str) -> str:
    """Boxes and arrows from X to Y: norms, attention (its heads coloured by K/V group), MLP or experts,
    the residual paths on the left lane with ⊕ where they join."""
    canvas = Canvas(DIAGRAM_W, 0)
    y = 8
    io = Box("io", ("X (B, T, d)",))
    y += _draw_box(canvas, io, MID_X, y, 150)
    steps = _branches(b)
    if steps:
        for kind, boxes in steps:
            if kind == "post":
                canvas.arrow(MID_X, y, MID_X, y + 18)
                y += 18
                y += _draw_box(canvas, boxes[0], MID_X, y, BOX_W)
                continue
            split = y + 10
            canvas.line(MID_X, y, MID_X, split, "#444", 1.5)
            canvas.circle(MID_X, split, 3, "#444")
            canvas.path(f"M{MID_X} {split}H{LANE_X}", stroke="#444", width=1.5)
            y = split
            for box in boxes:
                canvas.arrow(MID_X, y, MID_X, y + 16)
                y += 16
                y += _draw_box(canvas, box, MID_X, y, BOX_W)
            join = y + 22
            canvas.arrow(MID_X, y, MID_X, join - 9)
            canvas.path(f"M{LANE_X} {split}V{join}H{MID_X - 10}", stroke="#444", width=1.5)
            canvas.circle(MID_X, join, 9, "#ffffff", "residual add", stroke="#444")
            canvas.text(MID_X, join + 4, "+", size=14, anchor="middle", weight="700")
            canvas.text(LANE_X - 4, (split + join) / 2, "residual", size=10, anchor="middle", fill="#666", rotate=True)
            y = join + 9
    else:  # parallel: both branches read X
        shared = b.placement == "parallel_shared"
        split = y + 10
        canvas.line(MID_X, y, MID_X, split, "#444", 1.5)
        canvas.circle(MID_X, split, 3, "#444")
        left_x, right_x, width = 135, 305, 160
        top = split
        if shared:
            canvas.arrow(MID_X, split, MID_X, split + 16)
            top = split + 16 + _draw_box(canvas, _norm_box(b, "LN1 (shared)"), MID_X, split + 16, BOX_W)
        columns = [(left_x, [] if shared else [_norm_box(b, "LN1")], _attention_box(b)),
                   (right_x, [] if shared else [_norm_box(b, "LN2")], _mlp_box(b))]
        bottom = top
        ends = []
        for cx, norms, main in columns:
            yy = top
            canvas.path(f"M{MID_X} {top}H{cx}", stroke="#444", width=1.5)
            for box in norms + [main]:
                canvas.arrow(cx, yy, cx, yy + 16)
                yy += 16
                yy += _draw_box(canvas, box, cx, yy, width)
            ends.append((cx, yy))
            bottom = max(bottom, yy)
        join = bottom + 24
        for cx, yy in ends:
            canvas.path(f"M{cx} {yy}V{join}H{MID_X + (-10 if cx < MID_X else 10)}", stroke="#444", width=1.5)
        canvas.path(f"M{MID_X} {split}H{LANE_X}V{join}H{left_x}", stroke="#444", width=1.5)
        canvas.circle(MID_X, join, 9, "#ffffff", "residual add of both branches", stroke="#444")
        canvas.text(MID_X, join + 4, "+", size=14, anchor="middle", weight="700")
        y = join + 9
    canvas.arrow(MID_X, y, MID_X, y + 18)
    y += 18
    y += _draw_box(canvas, Box("io", ("Y (B, T, d)",)), MID_X, y, 150)
    canvas.height = y + 8
    return canvas.render(label, "diagram")


def stack_diagram(config: Config) -> str:
    """The layers as a strip of cells coloured by layer group, between the embeddings and the head
    (the words in HTML beside it, so they wrap on a narrow screen)."""
    m = config.model
    assert m is not None
    groups = config.layer_groups()
    owner = {layer: i for i, g in enumerate(groups) for layer in g.layers}
    canvas = Canvas(700, 30)
    cell = 700 / m.n_layers
    for layer in range(m.n_layers):
        g = owner[layer]
        canvas.rect(layer * cell, 1, max(cell - (1 if cell > 4 else 0), 0.5), 28, PALETTE[g % len(PALETTE)],
                    f"layer {layer}: group {g + 1}")
    tied = " (the LM head reuses it)" if m.tie_embeddings else ""
    legend = "".join(f'<li><span class="swatch" style="background:{PALETTE[i % len(PALETTE)]}"></span>'
                     f"group {i + 1}: {esc(g.describe())}</li>" for i, g in enumerate(groups))
    return (f'<div class="stack"><p>token embedding {m.vocab_size:,} × {config.block.d_model:,}{tied} → '
            f"{m.n_layers} blocks, layer 0 on the left:</p>{canvas.render(f'the layer stack of {config.name}', 'strip')}"
            f"<p>→ {'final norm → ' if m.final_norm else ''}LM head {config.block.d_model:,} × {m.vocab_size:,}</p>"
            f'<ul class="groups">{legend}</ul></div>')


def architecture_section(r: ModelReport) -> Section:
    cfg = r.config
    groups = cfg.layer_groups()
    body = []
    if cfg.model is not None:
        body.append(stack_diagram(cfg))
    figures = []
    for i, g in enumerate(groups[:4]):
        caption = (f"group {i + 1}: {g.describe()}" if len(groups) > 1 else "the block")
        figures.append(f'<figure class="block">{block_diagram(g.block, caption)}'
                       f"<figcaption>{esc(caption)}</figcaption></figure>")
    body.append('<div class="diagrams">' + "".join(figures) + "</div>")
    if len(groups) > 4:
        body.append(_notes([f"{len(groups) - 4} more layer groups are listed under the stack above"]))
    body.append('<p class="legend">Heads are coloured by the K/V group they share; of the experts, the filled '
                "squares are the top-k one token uses. The left lane carries the residual stream.</p>")
    return Section("architecture", "Architecture", "".join(body))


# --- where the parameters are

PART_COLOURS = {"attention": PALETTE[1], "mlp": PALETTE[2], "norms": PALETTE[0], "embedding": PALETTE[3],
                "head": PALETTE[5], "other": PALETTE[4]}


def parameter_parts(r: ModelReport) -> list[tuple[str, int, str, str]]:
    """The total split into parts that add up to it: each layer group's attention, MLP and norms
    subtotals times its layer count, then the model's own tensors. (name, count, formula, colour key)."""
    c = r.count
    groups = c.groups
    sizes = [len(g.layers) for g in groups] if c.config.model else [1]
    parts = []
    after_blocks = False  # past the block's rows: the model's own tensors
    for comp in c.components:
        if comp.kind == "subtotal" and comp.name in ("attention", "mlp", "norms"):
            g = comp.group or 0
            layers = sizes[g] if g < len(sizes) else 1
            where = f"group {g + 1} " if comp.group is not None and len(groups) > 1 else ""
            name = f"{where}{comp.label} × {layers}" if c.config.model else comp.label
            parts.append((name, comp.count * layers, f"{layers}·({comp.expression})" if layers > 1 else comp.expression,
                          comp.name))
        if comp.name == "block" and comp.kind == "total":
            after_blocks = True  # the model's own rows follow the (first) block total
            continue
        if after_blocks and comp.kind == "tensor" and comp.group is None:
            key = "embedding" if comp.name.startswith("embed") else "head" if comp.name == "lm_head" else "other"
            parts.append((comp.label, comp.count, comp.expression, key))
    return parts


def share_bars(parts: Sequence[tuple[str, int, str, str]], total: int) -> str:
    """Horizontal bars in HTML (they wrap and scale with the text on any screen), lengths relative to
    the largest part, each row's exact count and formula on hover."""
    top = max((count for _, count, _, _ in parts), default=0) or 1
    rows = []
    for name, count, formula, key in parts:
        share = count / total if total else 0.0
        rows.append(f'<li title="{esc(name)}: {count:,} parameters, {100 * share:.2f}% ({esc(formula)})" '
                    f'data-part="{esc(name)}" data-count="{count}"><span class="label">{esc(name)}</span>'
                    f'<span class="track"><span class="fill" style="width:{100 * count / top:.2f}%;'
                    f'background:{PART_COLOURS.get(key, PALETTE[4])}"></span></span>'
                    f'<span class="value">{esc(human(count))} ({100 * share:.1f}%)</span></li>')
    return '<ul class="bars" aria-label="parameter shares">' + "".join(rows) + "</ul>"


def parameters_section(r: ModelReport) -> Section:
    from blockcli.render import count_footer_lines

    c = r.count
    parts = parameter_parts(r)
    chart = share_bars(parts, c.total)
    rows = []
    for comp in c.components:
        if c.layers_differ and comp.group is not None and comp.name == "ln1":
            rows.append(f'<tr class="grouphead"><td colspan="7">block {comp.group + 1}: '
                        f"{esc(c.groups[comp.group].describe())}</td></tr>")
        share = comp.count / c.total if c.total else 0.0
        cls = {"total": "total", "subtotal": "subtotal", "tied": "dim", "buffer": "dim"}.get(comp.kind, "")
        group = "" if comp.group is None else f' data-group="{comp.group}"'
        rows.append(f'<tr data-component="{esc(comp.name)}"{group} class="{cls}">'
                    + _cell(comp.label) + _cell(comp.shape, "shape") + _cell(exact(comp.weights), "num")
                    + _cell(exact(comp.biases), "num") + _cell(exact(comp.count), "num count")
                    + f'<td class="num share"><span class="sharebar" style="width:{min(100.0, 100 * share):.1f}%">'
                    f"</span>{100 * share:.2f}%</td>" + _cell(comp.expression, "formula") + "</tr>")
    table = _table(("component", "shape", "weights", "biases", "count", "share", "formula"), rows, "params",
                   (2, 3, 4, 5))
    rec = c.reconciled
    verdict = "match" if rec.match else "MISMATCH"
    lines = [line for line in count_footer_lines(c, r.inference) if not line.startswith(("workload", "FLOPs ="))]
    body = (f'<p class="verdict {"pass" if rec.match else "fail"}" data-reconciled="{verdict}">Reconciliation: the '
            f"formula gives {rec.formula:,}, the {esc(rec.method)} give {rec.arrays:,}: {verdict}</p>"
            f"{chart}{table}" + '<ul class="footer">' + "".join(f"<li>{esc(line)}</li>" for line in lines) + "</ul>")
    return Section("parameters", "Where the parameters are", body)


# --- the shape flow


def shapes_section(r: ModelReport) -> Section:
    from blockcli.render import FLOPS_NOTE, trace_header

    t = r.trace
    rows = []
    top = max((row.bytes for row in r.trace_rows), default=1) or 1
    last_part = None
    for row in r.trace_rows:
        part = "model" if row.layer is None else row.key.split(".")[1]
        if part != last_part:
            if part == "model":
                title = "before the blocks" if last_part is None else "after the blocks"
            else:
                layers = part if part != "*" else f"0-{r.config.model.n_layers - 1}" if r.config.model else "0"
                title = (f"one block, standing for layers {layers} (×{row.repeat}); FLOPs and bytes per layer"
                         if r.config.model else "the block")
            rows.append(f'<tr class="grouphead"><td colspan="8">{esc(title)}</td></tr>')
            last_part = part
        causal = f" ({row.causal_flops:,} causal)" if row.causal_flops is not None else ""
        kind = "score" if row.kind in ("matmul", "mask", "softmax") and len(row.output_shape) == 4 and \
            row.output_shape[-1] == t.seq_len and row.output_shape[-2] == t.seq_len else ""
        shapes = " ".join("(" + ", ".join(map(str, s)) + ")" for s in row.input_shapes)
        out = "(" + ", ".join(map(str, row.output_shape)) + ")"
        rows.append(f'<tr data-step="{row.step}" data-key="{esc(row.key)}" class="{kind}">'
                    + _cell(row.step, "num") + _cell(row.op, "op") + _cell(shapes, "shape in")
                    + _cell(out, "shape out") + _cell(row.symbolic, "sym")
                    + _cell(exact(row.params) if row.params else "", "num params")
                    + f'<td class="num flops">{row.flops:,}<small>{esc(causal)}</small></td>'
                    + f'<td class="num bytes"><span class="sharebar" style="width:{100 * row.bytes / top:.1f}%"></span>'
                      f"{row.bytes:,}<small> {esc(human_bytes(row.bytes))}</small></td></tr>")
    table = _table(("#", "operation", "inputs", "output", "symbolic", "params", "FLOPs", "bytes"), rows, "trace",
                   (0, 5, 6, 7))
    totals = t.totals
    body = (f"<p>{esc(trace_header(t))}. Rows from shapes alone (what <code>blockcli trace --shapes-only</code> prints); "
            f"the score rows (B, h, T, T) are shaded.</p>{table}"
            f'<p class="footer" data-total-flops="{totals["flops"]}">total FLOPs {totals["flops"]:,} '
            f"({human(totals['flops'])}); matmul FLOPs {totals['matmul_flops']:,} (causal half "
            f"{totals['causal_matmul_flops']:,}). {esc(FLOPS_NOTE)}.</p>")
    return Section("shapes", "Shape flow of one block", body)


# --- attention maps


def attention_section(r: ModelReport) -> Section:
    by_layer: dict[int | None, list[str]] = {}
    for amap in r.maps:
        T = len(amap.weights)
        rows = [[float(w) for w in row] for row in amap.weights]
        by_layer.setdefault(amap.layer, []).append(
            f'<figure class="map" data-layer="{"" if amap.layer is None else amap.layer}" data-head="{amap.head}">'
            f'{heatmap(rows, "attention weights, " + amap.label, cell=240 / T)}<figcaption>{esc(amap.label)}'
            f"</figcaption></figure>")
    figures = [(f"<h3>layer {layer}</h3>" if layer is not None else "") + '<div class="maps">' + "".join(maps) + "</div>"
               for layer, maps in by_layer.items()]
    windows = sorted({a.window for a in r.maps if a.window})
    explain = ["Row t is a query, column s a key; darker is more weight (square-root scale), grey is exactly 0: "
               "the causal mask hides every later key"]
    for w in windows:
        explain.append(f"a window of {w:,} keys" + (" also greys the keys more than that far back" if w < MAP_SEQ
                                                     else f", wider than these {MAP_SEQ} tokens, hides nothing here"))
    body = f"<p>{esc('; '.join(explain))}.</p>" + _notes(r.map_notes) + "".join(figures)
    if not r.maps:
        body += "<p>No maps.</p>"
    return Section("attention", "Attention maps", body)


# --- how cost grows


def tokens_text(x: float) -> str:
    """A token count as people write context lengths: 512, 4K, 128K, 1M (binary multiples)."""
    value = int(round(x))
    for unit, scale in (("M", 2 ** 20), ("K", 2 ** 10)):
        if value >= scale and value % scale == 0:
            return f"{value // scale}{unit}"
    return f"{value:,}"


def cost_section(r: ModelReport) -> Section:
    points = r.sweep
    xs = [p.seq_len for p in points]
    memory = [Series("weights", tuple((p.seq_len, float(p.parameter_bytes)) for p in points), PALETTE[0]),
              Series("K/V cache", tuple((p.seq_len, float(p.kv_bytes)) for p in points), PALETTE[1]),
              Series("activations", tuple((p.seq_len, float(p.activation_bytes)) for p in points), PALETTE[2]),
              Series("total", tuple((p.seq_len, float(p.memory_bytes)) for p in points), PALETTE[7], "5 3")]
    flops = [Series("prefill, causal", tuple((p.seq_len, float(p.prefill.total(causal=True))) for p in points),
                    PALETTE[5]),
             Series("prefill per token", tuple((p.seq_len, float(p.prefill.total(causal=True)) /
                                                (p.seq_len * p.batch)) for p in points), PALETTE[3], "5 3"),
             Series("decode step", tuple((p.seq_len, float(p.decode)) for p in points), PALETTE[4])]
    batch = points[0].batch if points else 1
    mem_chart = line_chart(memory, "inference memory against sequence length", tokens_text, human_bytes,
                           "tokens per sequence T", "bytes", x_base=2, y_base=2)
    flop_chart = line_chart(flops, "FLOPs against sequence length", tokens_text, human, "tokens per sequence T",
                            "FLOPs", x_base=2)
    rows = []
    for p in points:
        rows.append(f'<tr data-seq="{p.seq_len}">' + _cell(exact(p.seq_len), "num")
                    + _cell(exact(p.parameter_bytes), "num weights", human_bytes(p.parameter_bytes))
                    + _cell(exact(p.kv_bytes), "num kv", human_bytes(p.kv_bytes))
                    + _cell(exact(p.activation_bytes), "num act", human_bytes(p.activation_bytes))
                    + _cell(exact(p.memory_bytes), "num memory", human_bytes(p.memory_bytes))
                    + _cell(exact(p.prefill.total(causal=True)), "num prefill", human(p.prefill.total(causal=True)))
                    + _cell(exact(p.decode), "num decode", human(p.decode)) + "</tr>")
    table = _table(("T", "weights (bytes)", "K/V cache", "activations", "memory", "prefill FLOPs (causal)",
                    "decode step FLOPs"), rows, "sweep", (0, 1, 2, 3, 4, 5, 6))
    first = points[0] if points else None
    dtypes = f"weights and activations {first.dtype}, K/V cache {first.kv_dtype}" if first else ""
    body = (f"<p>Batch {batch}, {dtypes}, T from {xs[0]:,} to {xs[-1]:,} (the model's context): the numbers "
            f"<code>blockcli count --seq T --batch {batch} --json</code> gives. Both axes logarithmic; hover a point "
            f"for its value.</p>"
            f'<div class="charts"><figure>{mem_chart}<figcaption>memory: weights + K/V cache + one layer\'s '
            f"activations</figcaption></figure><figure>{flop_chart}<figcaption>FLOPs = 2 × multiply-adds of the "
            f"matrix products; a decode step at context T</figcaption></figure></div>{table}")
    return Section("cost", "How cost grows with sequence length", body)


# --- checklist


def checklist_section(r: ModelReport) -> Section:
    from blockcli.render import verify_summary

    if r.checks is None:
        return Section("checklist", "Checklist", _notes([r.check_note]))
    several = len(r.checks) > 1
    rows, verdicts = [], []
    for rep in r.checks:
        for c in rep.checks:
            status, key = c.status, f"{rep.layer}:{c.id}" if several else str(c.id)
            rows.append(f'<tr data-check="{key}" class="{status.lower()}">' + _cell(c.id, "num")
                        + (_cell(rep.layer, "num layer") if several else "") + _cell(c.name, "name")
                        + f'<td class="status"><span class="badge {status.lower()}">{status}</span></td>'
                        + _cell(c.measured, "measured") + _cell(c.tolerance, "tolerance")
                        + _cell(c.hint if c.passed is False else "", "hint") + "</tr>")
        verdicts.append(f'<p class="verdict {"pass" if rep.passed else "fail"}">{esc(verify_summary(rep))}</p>')
    header = ("#", *(("layer",) if several else ()), "check", "result", "measured", "tolerance", "hint")
    table = _table(header, rows, "checks", (0, 1) if several else (0,))
    passed = all(rep.passed for rep in r.checks)
    notes = list(dict.fromkeys(n for rep in r.checks for n in rep.notes))
    errors = [e for rep in r.checks for e in rep.errors]
    body = (f'<div data-passed="{str(passed).lower()}">{"".join(verdicts)}</div>{table}'
            + _notes(notes + [f"error {i}: {e}" for i, e in enumerate(errors, 1)]))
    return Section("checklist", "Checklist", body)


# --- training


def training_section(r: ModelReport) -> Section | None:
    steps = r.train_log
    if not steps:
        return None
    loss = Series("loss", tuple((s.step, s.loss) for s in steps), PALETTE[5])
    norm = Series("gradient norm", tuple((s.step, s.grad_norm) for s in steps), PALETTE[0])
    number = lambda x: f"{x:.4g}"  # noqa: E731
    step_text = lambda x: f"{int(round(x)):,}"  # noqa: E731
    log_loss = all(s.loss > 0 for s in steps)
    charts = (f'<div class="charts"><figure>{line_chart([loss], "training loss", step_text, number, "step", "loss", log_x=False, log_y=log_loss)}'
              f"<figcaption>loss{' (log scale)' if log_loss else ''}</figcaption></figure>"
              f'<figure>{line_chart([norm], "gradient norm", step_text, number, "step", "norm", log_x=False, log_y=all(s.grad_norm > 0 for s in steps))}'
              f"<figcaption>gradient norm</figcaption></figure></div>")
    best = min(steps, key=lambda s: s.loss)
    rows = [f'<tr data-row="{key}">' + _cell(name) + _cell(s.step, "num step") + _cell(f"{s.loss:.6g}", "num loss")
            + _cell(f"{s.grad_norm:.6g}", "num norm") + "</tr>"
            for key, name, s in (("first", "first step", steps[0]), ("lowest", "lowest loss", best),
                                 ("last", "last step", steps[-1]))]
    body = (f"<p>{len(steps):,} steps from <code>{esc(r.train_log_name)}</code> (as <code>blockcli train --json</code> "
            f"writes them).</p>{charts}" + _table(("", "step", "loss", "gradient norm"), rows, "train", (1, 2, 3)))
    return Section("training", "Training", body)


SECTIONS: tuple[Callable[[ModelReport], Section | None], ...] = (
    overview_section, architecture_section, parameters_section, shapes_section, attention_section, cost_section,
    checklist_section, training_section)


# ----------------------------------------------------------------------------- comparing two


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for k, v in data.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: data}


def _show(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def key_figures(r: ModelReport) -> list[tuple[str, str, Any]]:
    """(name, text, value compared) for the comparison table."""
    c, inf, b = r.count, r.inference, r.config.block
    m = r.config.model
    prefill = inf.prefill.total(causal=True)
    return [
        ("parameters", exact(c.total), c.total),
        ("active per token", exact(c.active_total), c.active_total),
        ("non-embedding", exact(c.non_embedding), c.non_embedding),
        ("per block", exact(c.per_block), c.per_block),
        ("layers", str(m.n_layers if m else 1), m.n_layers if m else 1),
        ("d_model", exact(b.d_model), b.d_model),
        ("heads / K/V heads", f"{b.n_heads} / {b.n_kv_heads}", (b.n_heads, b.n_kv_heads)),
        ("head dim", str(b.head_dim), b.head_dim),
        ("d_ff", exact(b.d_ff) if b.moe is None else f"{b.moe.n_experts} × {b.moe.d_expert:,}",
         b.d_ff if b.moe is None else (b.moe.n_experts, b.moe.d_expert)),
        ("vocabulary", exact(m.vocab_size) if m else "—", m.vocab_size if m else None),
        ("context", exact(m.max_positions) if m else "—", m.max_positions if m else None),
        (f"memory at {inf.batch} × {inf.seq_len:,}", f"{exact(inf.memory_bytes)} ({human_bytes(inf.memory_bytes)})",
         inf.memory_bytes),
        ("K/V cache per token (bytes)", exact(inf.kv_bytes_per_token), inf.kv_bytes_per_token),
        ("prefill FLOPs (causal)", f"{exact(prefill)} ({human(prefill)})", prefill),
        ("decode step FLOPs", f"{exact(inf.decode)} ({human(inf.decode)})", inf.decode),
        ("checklist", "—" if r.checks is None else "PASS" if all(c.passed for c in r.checks) else "FAIL",
         None if r.checks is None else all(c.passed for c in r.checks)),
    ]


def differences_section(a: ModelReport, b: ModelReport) -> Section:
    rows = []
    for (name, ta, va), (_, tb, vb) in zip(key_figures(a), key_figures(b)):
        differ = va != vb
        rows.append(f'<tr class="{"diff" if differ else "same"}" data-figure="{esc(name)}">' + _cell(name)
                    + _cell(ta, "num a") + _cell(tb, "num b") + _cell("≠" if differ else "=", "mark") + "</tr>")
    figures = _table(("", a.config.name, b.config.name, ""), rows, "compare", (1, 2))
    fa, fb = _flat(a.config.to_dict()), _flat(b.config.to_dict())
    fields = []
    for key in sorted(set(fa) | set(fb)):
        if key.startswith("run.") or fa.get(key) == fb.get(key):
            continue
        fields.append(f'<tr class="diff" data-field="{esc(key)}">' + _cell(key, "field") + _cell(_show(fa.get(key)), "a")
                      + _cell(_show(fb.get(key)), "b") + "</tr>")
    same = len([k for k in set(fa) | set(fb) if not k.startswith("run.") and fa.get(k) == fb.get(k)])
    field_table = (_table(("config field", a.config.name, b.config.name), fields, "fields")
                   if fields else "<p>The configs agree in every field.</p>")
    ca = {(c.group, c.name): c for c in a.count.components}
    cb = {(c.group, c.name): c for c in b.count.components}
    comp_rows = []
    for key in list(ca) + [k for k in cb if k not in ca]:
        x, y = ca.get(key), cb.get(key)
        label = (x or y).label + (f" (block {key[0] + 1})" if key[0] is not None else "")
        nx, ny = (x.count if x else None), (y.count if y else None)
        delta = "" if nx is None or ny is None else f"{ny - nx:+,}"
        comp_rows.append(f'<tr class="{"diff" if nx != ny else "same"}" data-component="{esc(key[1])}">' + _cell(label)
                         + _cell(_show(nx), "num a") + _cell(_show(ny), "num b") + _cell(delta, "num delta") + "</tr>")
    comps = _table(("component", a.config.name, b.config.name, "B − A"), comp_rows, "compare", (1, 2, 3))
    body = (f"<p>A: <code>{esc(a.source or 'default')}</code>; B: <code>{esc(b.source or 'default')}</code>. "
            f"Rows that differ are highlighted and marked ≠.</p>{figures}"
            f"<h3>Config fields that differ</h3>{field_table}<p class=note>{same} other fields are equal.</p>"
            f"<h3>Parameters by component</h3>{comps}")
    return Section("differences", "Differences", body)


# ----------------------------------------------------------------------------- the page

CSS = """
:root{--ink:#1d1d1f;--muted:#5b5b60;--line:#d9d9de;--bg:#ffffff;--panel:#f6f7f9;--pass:#0a7a3f;--fail:#b3261e;
--diff:#fff3c4;--accent:#0072B2}
*{box-sizing:border-box}
html{-webkit-text-size-adjust:100%}
body{margin:0;font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans","DejaVu Sans",sans-serif;
color:var(--ink);background:var(--bg)}
main{max-width:1240px;margin:0 auto;padding:12px 16px 40px}
header.top{border-bottom:2px solid var(--ink);margin-bottom:8px}
h1{font-size:1.6rem;margin:.4em 0 .1em}
h1,h2,h3,p,li,figcaption,footer{overflow-wrap:anywhere}
h2{font-size:1.25rem;margin:0 0 .5em;padding-top:.3em;border-top:1px solid var(--line)}
h3{font-size:1rem;margin:1em 0 .4em}
section{margin:22px 0;break-inside:auto}
nav.toc ol{display:flex;flex-wrap:wrap;gap:4px 14px;padding:0;margin:6px 0;list-style:none;font-size:.9rem}
nav.toc a{color:var(--accent)}
code{font:13px ui-monospace,"DejaVu Sans Mono",monospace;background:var(--panel);padding:0 3px;border-radius:3px;
overflow-wrap:anywhere}
.lead{font-size:1.05rem}
.note{color:var(--muted);font-size:.88rem;margin:.3em 0}
dl.figures{display:grid;grid-template-columns:repeat(auto-fill,minmax(220px,1fr));gap:10px;margin:10px 0}
dl.figures div{background:var(--panel);border-radius:8px;padding:8px 12px}
dl.figures dt{font-size:.82rem;color:var(--muted)}
dl.figures dd{margin:0;font-size:1.2rem;font-weight:600;font-variant-numeric:tabular-nums;overflow-wrap:anywhere}
dl.figures dd.detail{font-size:.8rem;font-weight:400;color:var(--muted)}
ul.features{columns:2 360px;margin:.3em 0;padding-left:1.2em}
ul.features li{break-inside:avoid;margin-bottom:2px}
.scroll{overflow-x:auto;margin:8px 0;-webkit-overflow-scrolling:touch}
table{border-collapse:collapse;font-size:.86rem;font-variant-numeric:tabular-nums;min-width:100%}
th,td{border-bottom:1px solid var(--line);padding:3px 8px;text-align:left;vertical-align:top}
th{background:var(--panel);position:sticky;top:0}
td.num,th.num{text-align:right;white-space:nowrap}
td.formula,td.sym,td.shape{font-family:ui-monospace,"DejaVu Sans Mono",monospace;font-size:.8rem;white-space:nowrap}
td small{color:var(--muted);display:block}
tr.total td{font-weight:700}
tr.subtotal td{font-style:italic}
tr.dim td{color:var(--muted)}
tr.grouphead td{background:var(--panel);font-weight:600}
tr.score td{background:#fff8ec}
td.share,td.bytes{position:relative}
.sharebar{position:absolute;left:0;top:2px;bottom:2px;background:#cfe3f5;z-index:-1;max-width:100%}
td.share,td.bytes{z-index:0}
tr:hover td{background:#eef4fb}
.verdict{font-weight:600;padding:6px 10px;border-radius:6px;display:inline-block;margin:4px 0}
.verdict.pass{background:#e5f4ea;color:var(--pass)}
.verdict.fail{background:#fbe7e5;color:var(--fail)}
.badge{font-weight:700;font-size:.78rem;padding:1px 6px;border-radius:4px;color:#fff}
.badge.pass{background:var(--pass)}.badge.fail{background:var(--fail)}
.badge.skip{background:#8a6d00}.badge.error{background:#7b1fa2}
tr.fail td{background:#fdf0ef}
tr.diff td{background:var(--diff)}
td.mark{font-weight:700;text-align:center}
svg{display:block;max-width:100%;height:auto}
svg text{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif}
svg.chart{width:100%;max-width:640px}
figure{margin:8px 0}
figcaption{font-size:.82rem;color:var(--muted)}
.diagrams{display:grid;grid-template-columns:repeat(auto-fill,minmax(300px,420px));gap:12px}
.maps{display:grid;grid-template-columns:repeat(auto-fill,minmax(160px,1fr));gap:10px}
.maps svg{width:100%}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(300px,1fr));gap:12px}
ul.footer{font-size:.84rem;color:var(--muted);padding-left:1.2em}
p.footer{font-size:.84rem;color:var(--muted)}
ul.bars{list-style:none;padding:0;margin:10px 0;max-width:900px}
ul.bars li{display:grid;grid-template-columns:minmax(90px,14em) 1fr 9em;gap:8px;align-items:center;margin:3px 0;
font-size:.88rem}
ul.bars .label{text-align:right}
ul.bars .track{background:var(--panel);height:16px;border-radius:3px;overflow:hidden}
ul.bars .fill{display:block;height:100%;min-width:1px}
ul.bars .value{color:var(--muted);font-variant-numeric:tabular-nums}
.stack p{margin:.3em 0}
ul.groups{list-style:none;padding:0;margin:.3em 0;font-size:.88rem}
.swatch{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:6px;vertical-align:-1px}
svg.strip{width:100%;max-width:900px}
.pair{display:grid;grid-template-columns:1fr;gap:24px}
@media (min-width:1100px){.pair{grid-template-columns:1fr 1fr}.pair .diagrams{grid-template-columns:1fr}}
.pair>div{min-width:0}
.pair h2 small{font-weight:400;color:var(--muted)}
footer{margin-top:30px;font-size:.8rem;color:var(--muted);border-top:1px solid var(--line);padding-top:8px}
@media (max-width:600px){body{font-size:14px}main{padding:8px 10px 30px}h1{font-size:1.3rem}
dl.figures{grid-template-columns:1fr 1fr}dl.figures dd{font-size:1rem}ul.features{columns:1}
ul.bars li{grid-template-columns:7em 1fr 6.5em;font-size:.8rem}}
@media print{body{font-size:11pt}main{max-width:none;padding:0}nav.toc{display:none}
section{break-inside:avoid-page}h2{break-after:avoid}figure,tr{break-inside:avoid}
th{position:static}.scroll{overflow:visible}table{font-size:8pt}
*{-webkit-print-color-adjust:exact;print-color-adjust:exact}tr:hover td{background:none}}
"""


def _document(title: str, toc: Sequence[tuple[str, str]], content: str, command: str) -> str:
    nav = ('<nav class="toc" aria-label="sections"><ol>'
           + "".join(f'<li><a href="#{esc(i)}">{esc(t)}</a></li>' for i, t in toc) + "</ol></nav>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            '<meta name="viewport" content="width=device-width,initial-scale=1">'
            f'<meta name="generator" content="blockcli {esc(__version__)}"><title>{esc(title)}</title>'
            f"<style>{CSS}</style></head><body><main>"
            f'<header class="top"><h1>{esc(title)}</h1>{nav}</header>{content}'
            f"<footer>Made by blockcli {esc(__version__)}: <code>{esc(command)}</code>. Every number on this page is "
            f"what <code>blockcli count</code>, <code>trace</code> and <code>verify</code> give for the same "
            f"config; the page holds no script and loads nothing.</footer></main></body></html>\n")


def _section_html(s: Section, prefix: str = "", suffix: str = "") -> str:
    return (f'<section id="{prefix}{s.id}" data-section="{s.id}"><h2>{esc(s.title)}{suffix}</h2>{s.body}</section>')


def sections_of(r: ModelReport) -> list[Section]:
    return [s for s in (build_section(r) for build_section in SECTIONS) if s is not None]


def page(r: ModelReport, command: str) -> str:
    """One model's page."""
    sections = sections_of(r)
    content = "".join(_section_html(s) for s in sections)
    return _document(f"blockcli report: {r.config.name}", [(s.id, s.title) for s in sections], content, command)


def compare_page(a: ModelReport, b: ModelReport, command: str) -> str:
    """Two models: their differences first, then each section of both side by side (A left, B right
    on a wide screen; one after the other on a narrow one)."""
    diff = differences_section(a, b)
    sa, sb = sections_of(a), sections_of(b)
    ids = [s.id for s in sa] + [s.id for s in sb if s.id not in {x.id for x in sa}]
    by_a, by_b = {s.id: s for s in sa}, {s.id: s for s in sb}
    content = [_section_html(diff)]
    toc = [(diff.id, diff.title)]
    for sid in ids:
        halves = []
        for prefix, r, by in (("a-", a, by_a), ("b-", b, by_b)):
            if sid in by:
                halves.append(f'<div class="side" data-side="{prefix[0]}">'
                              + _section_html(by[sid], prefix, f" <small>{esc(prefix[0].upper())}: "
                                                               f"{esc(r.config.name)}</small>") + "</div>")
            else:
                halves.append(f'<div class="side" data-side="{prefix[0]}"></div>')
        content.append(f'<div class="pair" id="{esc(sid)}">' + "".join(halves) + "</div>")
        toc.append((sid, (by_a.get(sid) or by_b[sid]).title))
    return _document(f"blockcli report: {a.config.name} vs {b.config.name}", toc, "".join(content), command)
