"""The reference chapter's ten-item implementation checklist, as behavioural checks on a real block.

Each check returns data: id, name, passed, the figure it measured, the tolerance it used, and a
hint at the likely bug when it fails. Items 11–13 follow the ten: cached decoding, a slow
per-head reference, and float32 against float64. All checks run in float64 unless stated.

Every check can be run on a block whose operations were swapped (`blockcli.mutants`), which is
how the tests prove that each check catches the bug it is meant for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable

import numpy as np

from blockcli.block import DecoderBlock, block_parameter_shapes
from blockcli.config import Config, InputError
from blockcli.count import Formula, block_formula, evaluate, symbol_values
from blockcli.ops import STANDARD_OPS, Ops
from blockcli.reference import reference_block

NAMES = {
    1: "d_model divisible by n_heads (n_heads by n_kv_heads)",
    2: "Q, K, V are (B, h, T, d_h); head i holds columns i·d_h…(i+1)·d_h−1",
    3: "softmax runs over the key axis",
    4: "causal mask before softmax, diagonal allowed",
    5: "heads concatenated to (B, T, d) in order, then W_O",
    6: "residual additions combine same-shape tensors",
    7: "normalisation over the feature axis",
    8: "a future token never changes an earlier output",
    9: "attention rows finite and summing to 1",
    10: "hand parameter count equals the arrays",
    11: "K/V-cache decoding equals the full pass",
    12: "vectorised block equals a slow per-head reference",
    13: "float32 agrees with float64",
}

HINTS = {
    1: "pick n_heads dividing d_model (or set head_dim), and n_kv_heads dividing n_heads",
    2: "split heads with reshape(B, T, h, d_h) then transpose(0, 2, 1, 3), not a bare reshape",
    3: "softmax over axis=-1 (keys) of the (B, h, T, T) scores, not axis=-2",
    4: "set future scores to -inf before softmax with tril(ones(T, T)) (diagonal included), not after",
    5: "transpose (B, h, T, d_h) → (B, T, h, d_h) before reshaping to (B, T, d), and apply W_O",
    6: "add the full (B, T, d) sublayer output; a (B, 1, d) or (1, T, d) operand broadcasts silently",
    7: "take mean and variance over axis=-1 (features) with keepdims, not over batch or time",
    8: "look for a missing or late mask, softmax over queries, or anything mixing along the time axis",
    9: "a row with every key masked gives NaN: the diagonal must stay visible",
    10: "count every weight and bias of every tensor (norm shifts, projection biases, gate matrices)",
    11: "cached keys/values must be appended along time and RoPE positions offset by the cache length",
    12: "compare scale 1/√d_h, head grouping, activation and residual order with the equations",
    13: "look for float64-only constants or an unstable softmax/normalisation",
}

# Tolerances (float64 unless stated).
EXACT = 1e-12  # same computation, different association of sums
PERTURB = 1e-9  # batched perturbation runs: BLAS may round differently across batch sizes
STATS = 1e-6  # normalised mean ≈ 0, rows sum to 1
FLOAT32 = 1e-4  # relative agreement of float32 with float64

MAX_VERIFY_SEQ = 32
SCALE_LIMIT = 40_000_000  # blocks with more parameters are verified on a scaled copy


@dataclass(frozen=True)
class Check:
    id: int
    name: str
    passed: bool | None  # None: skipped, with the reason in `measured`
    measured: str
    tolerance: str
    hint: str = ""

    @property
    def status(self) -> str:
        return "SKIP" if self.passed is None else "PASS" if self.passed else "FAIL"


@dataclass
class Report:
    config: Config
    checks: list[Check]
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(c.passed is not False for c in self.checks)


class Context:
    """One forward pass with every intermediate kept, plus what the checks need to poke the block."""

    def __init__(self, block: DecoderBlock, x: np.ndarray, formula: Formula) -> None:
        self.block, self.x, self.formula = block, x, formula
        self.cfg = block.cfg
        self.inter: dict[str, np.ndarray] = {}
        self.inputs: dict[str, list[tuple[int, ...]]] = {}
        self.y = block(x, self._record)

    def _record(self, key: str, op: str, out: np.ndarray, inputs: Iterable[Any], **_: Any) -> None:
        self.inter[key] = out
        self.inputs[key] = [tuple(a.shape) for a in inputs]


def _max(a: Any) -> float:
    a = np.asarray(a, dtype=np.float64)
    return float(np.max(np.abs(a))) if a.size else 0.0


def _within(value: float, tol: float) -> bool:
    return bool(np.isfinite(value) and value <= tol)


def _fmt(value: float) -> str:
    return f"{value:.3g}"


# ----------------------------------------------------------------------------- the ten items


def check_divisibility(c: Context) -> tuple[bool, str, str]:
    b, p = c.cfg, c.block.params
    widths = (p["w_q"].shape[1], p["w_k"].shape[1])
    ok = (widths == (b.n_heads * b.head_dim, b.n_kv_heads * b.head_dim) and b.n_heads % b.n_kv_heads == 0)
    div = f"d_model % n_heads = {b.d_model % b.n_heads}" if b.n_heads * b.head_dim == b.d_model else \
        f"head_dim {b.head_dim} set explicitly (h·d_h = {b.n_heads * b.head_dim})"
    return ok, f"{div}; n_heads % n_kv_heads = {b.n_heads % b.n_kv_heads}; Q/K widths {widths}", "exact"


def check_head_split(c: Context) -> tuple[bool, str, str]:
    b, (B, T, _) = c.cfg, c.x.shape
    worst, shapes_ok = 0.0, True
    for name, heads in (("q", b.n_heads), ("k", b.n_kv_heads), ("v", b.n_kv_heads)):
        split, flat = c.inter[name], c.inter[f"{name}_proj"]
        shapes_ok &= split.shape == (B, heads, T, b.head_dim)
        if split.shape != (B, heads, T, b.head_dim):
            continue
        for i in range(heads):  # head i must hold columns i·d_h … (i+1)·d_h − 1 of the projection
            worst = max(worst, _max(split[:, i] - flat[..., i * b.head_dim:(i + 1) * b.head_dim]))
    q_shape = c.inter["q"].shape
    return shapes_ok and _within(worst, EXACT), f"Q {q_shape}; max |head − column slice| {_fmt(worst)}", \
        f"shape exact; {EXACT:g}"


def _softmax_keys(masked: np.ndarray) -> np.ndarray:
    top = np.max(masked, axis=-1, keepdims=True)
    e = np.exp(masked - top)
    return e / e.sum(axis=-1, keepdims=True)


def check_softmax_axis(c: Context) -> tuple[bool, str, str]:
    w, masked = c.inter["attn_weights"], c.inter["masked_scores"]
    rows = _max(w.sum(axis=-1) - 1.0)
    diff = _max(w - _softmax_keys(masked))
    return _within(rows, STATS) and _within(diff, EXACT), \
        f"max |row sum − 1| {_fmt(rows)}; max |w − softmax_keys(masked)| {_fmt(diff)}", f"{STATS:g}; {EXACT:g}"


def check_causal_mask(c: Context) -> tuple[bool, str, str]:
    w, scores, masked = c.inter["attn_weights"], c.inter["scores"], c.inter["masked_scores"]
    T = w.shape[-1]
    upper = np.triu(np.ones((T, T), dtype=bool), k=1)
    above = _max(w[..., upper])
    diag = float(np.min(np.diagonal(w, axis1=-2, axis2=-1))) if T else 1.0
    rows = _max(w.sum(axis=-1) - 1.0)
    # before softmax: the masked scores keep every visible score and hide every future one
    before = bool(np.all(np.isneginf(masked[..., upper])) and np.array_equal(masked[..., ~upper], scores[..., ~upper]))
    ok = above == 0.0 and diag > 0 and _within(rows, STATS) and before
    return ok, (f"max weight above diagonal {_fmt(above)}; min diagonal weight {_fmt(diag)}; "
                f"max |row sum − 1| {_fmt(rows)}; mask applied to scores: {'yes' if before else 'no'}"), \
        f"above = 0 exactly; diagonal > 0; {STATS:g}"


def check_concat(c: Context) -> tuple[bool, str, str]:
    b, (B, T, _) = c.cfg, c.x.shape
    heads, concat, out = c.inter["attn_heads"], c.inter["attn_concat"], c.inter["attn_out"]
    p = c.block.params
    shape_ok = concat.shape == (B, T, b.n_heads * b.head_dim)
    order = max((_max(concat[..., i * b.head_dim:(i + 1) * b.head_dim] - heads[:, i]) for i in range(b.n_heads)),
                default=0.0) if shape_ok else math.inf
    expected = concat @ p["w_o"] + p.get("b_o", 0.0) if shape_ok else None
    wo = _max(out - expected) if expected is not None and out.shape == expected.shape else math.inf
    return shape_ok and _within(order, EXACT) and _within(wo, EXACT), \
        f"concat {concat.shape}; max |slice i − head i| {_fmt(order)}; max |out − concat·W_O − b_O| {_fmt(wo)}", \
        f"shape exact; {EXACT:g}"


def _residual_pairs(c: Context) -> list[tuple[str, np.ndarray, np.ndarray]]:
    i = c.inter
    if c.cfg.placement == "post":
        return [("h_pre", c.x, i["attn_out"]), ("y_pre", i["h"], i["mlp_out"])]
    return [("h", c.x, i["attn_out"]), ("y", i["h"], i["mlp_out"])]


def check_residual(c: Context) -> tuple[bool, str, str]:
    worst, shapes = 0.0, []
    ok = True
    for key, left, right in _residual_pairs(c):
        result = c.inter[key]
        operands = c.inputs[key]
        ok &= len(set(operands)) == 1 and operands[0] == result.shape == left.shape == right.shape
        shapes.append(f"{key}: {' + '.join(str(s) for s in operands)}")
        if result.shape == left.shape == right.shape:
            worst = max(worst, _max(result - (left + right)))
        else:
            worst = math.inf
    return ok and _within(worst, EXACT), f"{'; '.join(shapes)}; max |sum − (a + b)| {_fmt(worst)}", \
        f"shapes equal; {EXACT:g}"


def check_norm_axis(c: Context) -> tuple[bool, str, str]:
    b, p = c.cfg, c.block.params
    norm = c.block.ln1
    out = norm(c.x)  # (B, T, d)
    beta = p.get("ln1_beta", 0.0)
    x_hat = (out - beta) / p["ln1_gamma"]  # undo scale and shift
    # The exact per-token target: variance σ²/(σ² + ε) for LayerNorm, RMS √(m/(m + ε)) for RMSNorm,
    # with σ² and m = mean(x²) taken over the features of the input token.
    if b.norm == "layernorm":
        var = c.x.var(axis=-1)
        mean = _max(x_hat.mean(axis=-1))
        spread = _max(x_hat.var(axis=-1) - var / (var + b.norm_eps))
        stats = f"max |token mean| {_fmt(mean)}; max |token variance − σ²/(σ²+ε)| {_fmt(spread)}"
    else:
        ms = (c.x**2).mean(axis=-1)
        mean = 0.0
        spread = _max(np.sqrt((x_hat**2).mean(axis=-1)) - np.sqrt(ms / (ms + b.norm_eps)))
        stats = f"max |token RMS − √(m/(m+ε))| {_fmt(spread)}"
    ok_stats = _within(mean, STATS) and _within(spread, STATS)
    moved = c.x.copy()
    moved[-1, -1] = moved[-1, -1] * 3.0 + 1.0  # change one token of one sequence
    other = norm(moved)
    leak = _max((other - out)[:-1]) + _max((other - out)[-1, :-1])
    return ok_stats and leak == 0.0, f"{stats}; other tokens changed by {_fmt(leak)}", \
        f"{STATS:g}; others unchanged exactly"


def check_causality(c: Context) -> tuple[bool, str, str]:
    """Perturb each position in turn (all at once, stacked along the batch) and compare earlier outputs."""
    B, T, d = c.x.shape
    rng = np.random.default_rng(12345)
    stacked = np.repeat(c.x[None], T, axis=0)  # (T, B, T, d): copy j has token j changed
    for j in range(T):
        stacked[j, :, j] = rng.standard_normal((B, d))
    y = c.block(stacked.reshape(T * B, T, d)).reshape(T, B, T, d)
    worst, where = 0.0, -1
    for j in range(1, T):
        diff = _max(y[j, :, :j] - c.y[:, :j])
        if not diff <= worst:  # also catches NaN
            worst, where = diff, j
    first = f" (perturbing position {where})" if where >= 0 and worst > 0 else ""
    return _within(worst, PERTURB), f"max change at earlier positions {_fmt(worst)}{first}, all {T} positions", \
        f"{PERTURB:g} (batched runs)"


def check_rows(c: Context) -> tuple[bool, str, str]:
    w = c.inter["attn_weights"]
    finite = bool(np.all(np.isfinite(w)))
    rows = _max(w.sum(axis=-1) - 1.0) if finite else math.inf
    return finite and _within(rows, STATS), f"all finite: {finite}; max |row sum − 1| {_fmt(rows)}", f"{STATS:g}"


def check_count(c: Context) -> tuple[bool, str, str]:
    values = symbol_values(c.cfg)
    arrays = {k: v.size for k, v in c.block.params.items()}
    bad, hand_total = [], 0
    rows = c.formula(c.cfg)
    for row in rows:
        hand = evaluate(row.weights + row.biases, values)
        hand_total += hand
        real = sum(arrays.get(k, 0) for k in row.keys)
        if hand != real:
            bad.append(f"{row.name} {hand:,} vs {real:,}")
    covered = {k for row in rows for k in row.keys}
    bad += [f"{k} not counted" for k in arrays if k not in covered]
    total = sum(arrays.values())
    return not bad, f"hand {hand_total:,} vs arrays {total:,}" + (f" ({'; '.join(bad)})" if bad else ""), "exact"


# ----------------------------------------------------------------------------- after the ten


def check_cache(c: Context) -> tuple[bool, str, str]:
    cache = c.block.new_cache()
    steps = [c.block.step(c.x[:, t:t + 1], cache) for t in range(c.x.shape[1])]
    diff = _max(np.concatenate(steps, axis=1) - c.y)
    return _within(diff, EXACT * 100), f"max |cached − full| {_fmt(diff)}", f"{EXACT * 100:g}"


def check_reference(c: Context) -> tuple[bool, str, str]:
    ref = reference_block(c.x, c.block.params, c.cfg)
    diff = _max(c.y - ref)
    return _within(diff, EXACT * 100), f"max |block − reference| {_fmt(diff)}", f"{EXACT * 100:g}"


def check_float32(c: Context) -> tuple[bool, str, str]:
    single = DecoderBlock(c.cfg, {k: v.astype(np.float32) for k, v in c.block.params.items()}, c.block.ops)
    y32 = single(c.x.astype(np.float32)).astype(np.float64)
    scale = max(_max(c.y), 1.0)
    rel = _max(y32 - c.y) / scale
    return _within(rel, FLOAT32), f"max |y32 − y64| / max|y64| {_fmt(rel)}", f"{FLOAT32:g} relative"


CHECKS: dict[int, Callable[[Context], tuple[bool, str, str]]] = {
    1: check_divisibility, 2: check_head_split, 3: check_softmax_axis, 4: check_causal_mask, 5: check_concat,
    6: check_residual, 7: check_norm_axis, 8: check_causality, 9: check_rows, 10: check_count,
    11: check_cache, 12: check_reference, 13: check_float32,
}


# ----------------------------------------------------------------------------- running


def verification_config(config: Config) -> tuple[Config, list[str]]:
    """The config verify runs: float64, batch ≥ 2, 4 ≤ T ≤ 32, and a scaled copy if the block is large."""
    notes = []
    run = config.run
    seq = min(max(run.seq_len, 4), MAX_VERIFY_SEQ)
    if seq != run.seq_len:
        notes.append(f"runs at T={seq} (config has {run.seq_len}): checks need 4 ≤ T ≤ {MAX_VERIFY_SEQ}")
    cfg = replace(config, model=None, run=replace(run, batch=max(2, min(run.batch, 4)), seq_len=seq, dtype="float64"))
    b = cfg.block
    size = sum(math.prod(s) for s in block_parameter_shapes(b).values())
    if size > SCALE_LIMIT:
        k = max(2, b.d_model // 256)
        step = 2 if b.rope else 1
        head_dim = max(step * 2, b.head_dim // k // step * step)
        d_model = b.n_heads * head_dim if b.n_heads * b.head_dim == b.d_model else max(1, b.d_model // k)
        small = replace(b, d_model=d_model, head_dim=head_dim, d_ff=max(1, b.d_ff // k))
        notes.append(f"the block has {size:,} parameters: verified on a copy with the same structure scaled down "
                     f"{k}× (d_model {d_model}, head_dim {head_dim}, d_ff {small.d_ff}, heads {b.n_heads}/{b.n_kv_heads})")
        cfg = replace(cfg, block=small)
    return cfg, notes


def parse_selection(text: str | None, option: str = "checks") -> set[int] | None:
    if text is None:
        return None
    try:
        ids = {int(part) for part in text.replace(" ", "").split(",") if part}
    except ValueError:
        raise InputError(f"{option}: expected check numbers such as 4,8; got '{text}'") from None
    unknown = sorted(ids - set(CHECKS))
    if unknown:
        raise InputError(f"{option}: no check numbered {unknown[0]}; checks are 1–{max(CHECKS)}")
    return ids


def verify(config: Config, *, weights: Any = None, ops: Ops = STANDARD_OPS, formula: Formula = block_formula,
           only: set[int] | None = None, skip: set[int] | None = None) -> Report:
    """Build the block (or its scaled copy), run it, and run the selected checks."""
    cfg, notes = verification_config(config)
    if weights is not None and notes and any("scaled" in n for n in notes):
        raise InputError("the block is too large to verify with the given --weights on this machine")
    block = DecoderBlock.from_config(cfg, weights, dtype="float64", ops=ops, attention="full")
    x = np.random.default_rng(cfg.run.seed + 1).standard_normal((cfg.run.batch, cfg.run.seq_len, cfg.block.d_model))
    selected = [i for i in CHECKS if (only is None or i in only) and not (skip and i in skip)]
    checks = []
    with np.errstate(all="ignore"):
        try:
            context: Context | None = Context(block, x, formula)
            failure = ""
        except Exception as exc:  # a broken block may raise anywhere in its forward pass
            context, failure = None, f"forward pass raised {type(exc).__name__}: {exc}"
        for i in selected:
            if context is None and i not in (1, 10):
                checks.append(Check(i, NAMES[i], False, failure, "", HINTS[i]))
                continue
            try:
                passed, measured, tolerance = CHECKS[i](context or _Bare(block, formula))
            except Exception as exc:
                passed, measured, tolerance = False, f"check raised {type(exc).__name__}: {exc}", ""
            checks.append(Check(i, NAMES[i], passed, measured, tolerance, "" if passed else HINTS[i]))
    return Report(config, checks, notes)


class _Bare:
    """What the structural checks (1 and 10) need when the forward pass itself failed."""

    def __init__(self, block: DecoderBlock, formula: Formula) -> None:
        self.block, self.cfg, self.formula = block, block.cfg, formula

