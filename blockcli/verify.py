"""The reference chapter's ten-item implementation checklist, as behavioural checks on a real block.

Each check returns data: id, name, passed, the figure it measured, the tolerance it used, and a
hint at the likely bug when it fails. Items 11–13 follow the ten: cached decoding, a slow
per-head reference, and float32 against float64. All checks run in float64 unless stated.

Every check can be run on a block whose operations were swapped (`blockcli.mutants`), which is
how the tests prove that each check catches the bug it is meant for. A user's implementation
(`blockcli.impl`) is judged only on what it returned; when it fails (raises, exits, times out,
changes its input), the failure is recorded once in `Report.errors` and the checks it prevented are
ERROR, not FAIL.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from blockcli.block import DecoderBlock, block_parameter_shapes, norm_scale, resolve_weights
from blockcli.checkpoint import is_checkpoint_path
from blockcli.config import (BlockConfig, Config, InputError, Mamba1, clipped, gemma4_field, layer_list,
                             open_regular)
from blockcli.count import Formula, block_formula, evaluate, symbol_values
from blockcli.ops import STANDARD_OPS, Ops, apply_rope, rope_tables
from blockcli.parallel import fit_blas_threads
from blockcli import progress
from blockcli.reference import reference_block
from blockcli.subject import Subject, SubjectError

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
    12: "agrees with an independent reference (blockcli's slow loop; for --impl, blockcli's block)",
    13: "float32 agrees with float64",
    14: "output has the input's shape and dtype",
    15: "one sequence's output ignores the other sequences",
    16: "deterministic: two calls give the same output",
    17: "finite output for large inputs and very sharp attention scores",
    18: "each token uses exactly k distinct routed experts (mixture of experts)",
    19: "routing weights sum to 1 where the reference renormalises them (mixture of experts)",
    20: "gradients equal central finite differences along seeded random directions",
    21: "causal in backward: an output's gradient reaches no later position's input",
    22: "every parameter receives a gradient",
    23: "gradients equal blockcli's reference backward (the input's and every parameter's)",
    24: "a model's loss gradients equal finite differences (embeddings, positions, final norm, head)",
}
GRAD_CHECKS = (20, 21, 22, 23, 24)  # run with --grad (or named in --only)

# The checks as a matrix's legend names them (its column heads are the numbers)
SHORT_NAMES = {
    1: "divisible widths", 2: "head split", 3: "softmax axis", 4: "causal mask", 5: "heads concatenated, W_O",
    6: "residual shapes", 7: "norm axis", 8: "no future leak", 9: "rows finite, sum 1", 10: "parameter count",
    11: "K/V cache", 12: "independent reference", 13: "float32 vs float64", 14: "output shape and dtype",
    15: "batch independence", 16: "determinism", 17: "large inputs", 18: "k distinct experts",
    19: "routing weights sum to 1", 20: "finite differences", 21: "causal backward", 22: "no dead parameter",
    23: "reference gradients", 24: "model gradients",
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
    14: "return y of shape (B, T, d): the residual stream keeps its width",
    15: "no statistic (norm, softmax, mean) may run over the batch axis",
    16: "no hidden state, randomness (dropout at evaluation) or in-place update of the weights",
    17: "subtract the row maximum before exp in softmax; keep eps inside the square root",
    18: "take top-k with k = num_experts_per_tok over the expert axis of the router scores, without repeats",
    19: "divide the k chosen weights by their sum (norm_topk_prob / renormalize) before routed_scaling_factor",
    20: "the backward does not differentiate the forward: hold each step's VJP against its forward (softmax's row-sum "
        "term, a norm's mean and cross terms, a transposed weight gradient, RoPE turned back by −θ)",
    21: "mask the score gradient as the scores are masked: zero dS above the diagonal (recompute P under the mask)",
    22: "the parameter is detached (.detach(), torch.no_grad(), a NumPy copy) or multiplied by zero on its way to "
        "the output",
    23: "compare each gradient with blockcli's: a transposed weight gradient, a K/V head's gradient not summed over "
        "its query heads, RoPE's backward rotating by +θ",
    24: "a tied embedding's gradient is the sum of both uses (the token lookup's rows and the LM head's product); "
        "check the shifted targets, the final norm and the positions' rows too",
}

# Tolerances (float64 unless stated).
EXACT = 1e-12  # same computation, different association of sums
PERTURB = 1e-9  # batched perturbation runs: BLAS may round differently across batch sizes
STATS = 1e-6  # normalised mean ≈ 0, rows sum to 1
FLOAT32 = 1e-4  # relative agreement of float32 with float64
AGREE = 1e-9  # a user's float64 block against blockcli's, relative to the output's scale
LARGE = 1e4  # the input scale of check 17
QK_SCALE = 100.0  # check 17's W_Q and W_K scale: scores grow 10⁴-fold, past exp's range without the max shift
LONG_SEQ = 64  # items 8 and 12 also run an --impl target at max(LONG_SEQ, 4·T): a mask cached at a fixed size
FD_STEP = 1e-5  # item 20's central-difference step along a unit-norm direction
FD_RTOL = 1e-5  # item 20: |analytic − numeric| within this share of their size, plus the rounding floor below
FD_ROUNDING = 1e-13  # of Σ|dy ⊙ y| / step: what float64 rounding of the loss leaves in a difference quotient
DEAD = 1e-12  # item 22: a gradient this share of the largest one is none

MAX_VERIFY_SEQ = 32
MODEL_VOCAB = 48  # item 24's model: the verified block once, under a vocabulary this small
SCALE_LIMIT = 40_000_000  # blocks with more parameters are verified on a scaled copy


FLOAT32_HINT = ("agreement stops at float32 level on float64 input: float32 arithmetic happens somewhere — a norm "
                "that upcasts to float32, RoPE cos/sin tables built in float32, a softmax with dtype=float32, or a "
                "module or parameter left in float32; if that is intended, loosen --rtol (1e-6 usually suffices)")
ROPE_HINT = ("your output matches blockcli's block with interleaved RoPE pairs (2i, 2i+1); blockcli and Hugging Face "
             "rotate halves, pairing dims i and i + r/2 (permute W_Q/W_K's columns or use rotate_half)")


@dataclass(frozen=True)
class Figure:
    """One number a check measured, and the bound it was held to (None: a count or a size, no bound)."""

    quantity: str
    value: float
    tolerance: float | None = None


@dataclass(frozen=True)
class Check:
    id: int
    name: str
    passed: bool | None  # None: skipped, with the reason in `measured`
    measured: str
    tolerance: str
    hint: str = ""
    error: bool = False  # the subject failed (raised, exited, timed out) before the check could measure
    figures: tuple[Figure, ...] = ()  # the numbers of `measured` and `tolerance`, for JSON readers

    @property
    def status(self) -> str:
        return "ERROR" if self.error else "SKIP" if self.passed is None else "PASS" if self.passed else "FAIL"


@dataclass
class Report:
    config: Config
    checks: list[Check]
    notes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # each failure of the subject, once, numbered in the rows
    tracebacks: list[str] = field(default_factory=list)  # the same failures' tracebacks (for --traceback)
    layer: int | None = None  # the model layer whose block was verified, when its layers differ (else None)
    kind: str = ""  # that layer's group of identical blocks, as LayerGroup.describe() says it

    @property
    def passed(self) -> bool:
        """No check failed and the subject raised no error (one outside every check too: a thread left running)."""
        return all(c.passed is not False for c in self.checks) and not self.errors


class Skip(Exception):
    """A check that cannot run on this subject; the message says why (reported as SKIP, never PASS)."""


def block_subject(block: DecoderBlock) -> Subject:
    def intermediates(x: np.ndarray) -> dict[str, np.ndarray]:
        return Recording(block, x).inter

    with np.errstate(over="ignore"):  # a weight beyond float32's range becomes inf: check 13 reports it
        single = DecoderBlock(block.cfg, {k: v.astype(np.float32) for k, v in block.params.items()}, block.ops,
                              block.attention)

    def rebuild(weights: dict[str, np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
        return DecoderBlock(block.cfg, weights, block.ops, block.attention)

    return Subject(block, block.params, intermediates, lambda: block.params, single, block, rebuild,
                   gradients=block.vjp)


class Recording:
    """One forward pass of a blockcli block with every intermediate and operand shape kept."""

    def __init__(self, block: DecoderBlock, x: np.ndarray) -> None:
        self.inter: dict[str, np.ndarray] = {}
        self.inputs: dict[str, list[tuple[int, ...]]] = {}
        self.y = block(x, self._record)

    def _record(self, key: str, op: str, out: np.ndarray, inputs: Iterable[Any], **_: Any) -> None:
        self.inter[key] = out
        self.inputs[key] = [tuple(a.shape) for a in inputs]


class Measuring:
    """What a check context keeps of the numbers the running check measures (`figures`)."""

    figures: list[Figure]

    def figure(self, quantity: str, value: float, tolerance: float | None = None) -> None:
        """Record a number the running check measured, and the bound it holds it to."""
        self.figures.append(Figure(quantity, float(value), None if tolerance is None else float(tolerance)))


class Context(Measuring):
    """A subject run once on x, with blockcli's own block on the same weights as the truth."""

    def __init__(self, subject: Subject, cfg: BlockConfig, x: np.ndarray, formula: Formula,
                 rtol: float | None = None, atol: float | None = None, model: Config | None = None) -> None:
        self.subject, self.cfg, self.x, self.formula = subject, cfg, x, formula
        self.model = model  # the whole model's config (item 24), None for a lone block
        self.figures: list[Figure] = []  # what the check running now measured
        self.loosened = rtol is not None or atol is not None  # --rtol/--atol given: they also floor the others
        self._long: tuple[np.ndarray, np.ndarray] | None = None
        self.dy = np.random.default_rng(13).standard_normal(x.shape)  # the gradient checks' cotangent (B, T, d)
        self._grads: tuple[np.ndarray, dict[str, np.ndarray | None]] | None = None
        self._reference_grads: tuple[np.ndarray, dict[str, np.ndarray]] | None = None
        self.rtol, self.atol = AGREE if rtol is None else rtol, 0.0 if atol is None else atol
        truth = Recording(DecoderBlock(cfg, subject.weights, attention="full"), x)
        self.truth, self.truth_y = truth.inter, truth.y
        if subject.block is not None:
            run = Recording(subject.block, x)
            self.y, self.inter, self.inputs = run.y, run.inter, run.inputs
        else:
            self.y = subject.forward(x)
            self.inter = subject.intermediates(x) if subject.intermediates else {}
            self.inputs = {}

    def need(self, *keys: str) -> list[np.ndarray]:
        """The subject's own intermediates (never blockcli's): Skip, naming what is missing, without them."""
        missing = [k for k in keys if k not in self.inter]
        if missing and self.cfg.parts == "mlp":
            raise Skip("a layer of its MLP alone (parts: mlp): no attention heads, scores or weights")
        if missing and self.cfg.mamba is not None:
            raise Skip(f"a Mamba-{getattr(self.cfg.mamba, 'version', 2)} layer: no attention heads, scores or weights "
                       f"(its mixer is a state space)")
        if missing and self.cfg.lightning is not None:
            raise Skip("a lightning-attention layer: no attention heads, scores or weights (its mixer is a decayed "
                       "linear recurrence)")
        if missing and self.cfg.short_conv is not None:
            raise Skip("a short-conv layer: no attention heads, scores or weights (its mixer is a convolution)")
        if missing:
            how = "no hook of a torch module can see them" if self.subject.torch else \
                "return them with return_intermediates=True"
            raise Skip(f"needs the intermediate{'s' if len(missing) > 1 else ''} {', '.join(missing)} ({how})")
        return [self.inter[k] for k in keys]

    def long(self) -> tuple[np.ndarray, np.ndarray]:
        """One sequence at T = max(LONG_SEQ, 4·T), x (1, T_long, d), and the subject's y on it (one call, kept):
        for a mask or table cached at a fixed size."""
        if self._long is None:
            T, d = self.x.shape[1:]
            x = np.random.default_rng(7).standard_normal((1, max(LONG_SEQ, 4 * T), d))
            self._long = x, self.subject.forward(x)
        return self._long

    def gradients(self) -> tuple[np.ndarray, dict[str, np.ndarray | None]]:
        """The subject's own backward at (x, dy) for the seeded cotangent dy (one call, kept); Skip without one."""
        if self._grads is None:
            if self.subject.gradients is None:
                raise Skip("the target has no backward: a torch.nn.Module (its autograd) or a NumPy block with a "
                           "backward(dy) method returning (dx, {weight key: gradient})")
            dx, grads = self.subject.gradients(self.x, self.dy)
            if np.shape(dx) != self.x.shape:
                raise SubjectError(f"the backward returned dx of shape {np.shape(dx)}, expected {self.x.shape}")
            for key, g in grads.items():
                if g is not None and key in self.subject.weights and np.shape(g) != self.subject.weights[key].shape:
                    raise SubjectError(f"the backward returned {key}'s gradient of shape {np.shape(g)}, expected "
                                       f"{self.subject.weights[key].shape} (the weight's)")
            self._grads = np.asarray(dx, dtype=np.float64), grads
        return self._grads

    def reference_gradients(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """blockcli's own backward (standard operations, the whole score table) on the same weights, x and dy."""
        if self._reference_grads is None:
            self._reference_grads = DecoderBlock(self.cfg, self.subject.weights, attention="full").vjp(self.x, self.dy)
        return self._reference_grads

    def tolerance(self, default: float, reference: Any) -> float:
        """A check's own tolerance, or, when --rtol/--atol are given, the larger of it and
        atol + rtol · max(1, max |reference|)."""
        return max(default, self.atol + self.rtol * _scale(reference)) if self.loosened else default


def _max(a: Any) -> float:
    a = np.asarray(a, dtype=np.float64)
    return float(np.max(np.abs(a))) if a.size else 0.0


def _scale(a: Any) -> float:
    """max(1, max |a| over a's finite entries): what relative tolerances are relative to (−inf masks excluded)."""
    a = np.abs(np.asarray(a, dtype=np.float64))
    finite = a[np.isfinite(a)]
    return max(1.0, float(finite.max())) if finite.size else 1.0


def _diff(a: np.ndarray, b: np.ndarray) -> float:
    """max |a − b| with equal entries (−inf and −inf included) counting 0; inf when the shapes differ (never a
    silent broadcast); NaN when either holds a NaN the other does not."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return math.inf
    with np.errstate(invalid="ignore"):
        return _max(np.where(a == b, 0.0, np.abs(a.astype(np.float64) - b)))


def _within(value: float, tol: float) -> bool:
    return bool(np.isfinite(value) and value <= tol)


def _fmt(value: float) -> str:
    return f"{value:.3g}"


# ----------------------------------------------------------------------------- the ten items


def check_divisibility(c: Context) -> tuple[bool, str, str]:
    b, p = c.cfg, c.subject.weights
    if b.parts == "mlp":
        raise Skip("a layer of its MLP alone (parts: mlp): no heads to divide")
    if b.lightning is not None:  # its projections' widths: h heads of d_h for q, k, v and the gate
        widths = {f"{what} width": (p[key].shape[1], b.n_heads * b.head_dim)
                  for key, what in (("la_q", "q"), ("la_k", "k"), ("la_v", "v"), ("la_gate", "gate"))}
        for k, (got, want) in widths.items():
            c.figure(f"{k} − expected", got - want, 0)
        return (all(got == want for got, want in widths.values()),
                "; ".join(f"{k} {got} (expected {want})" for k, (got, want) in widths.items()), "exact")
    if b.moa is not None:  # a mixture of attention heads: each expert's W_q and W_o, the shared K/V, the router
        w, m = b.n_kv_heads * b.head_dim, b.moa
        widths = {"each expert's W_q width (h_kv·d_h)": (max(p[f"attn_experts.{e}.w_q"].shape[1] for e in range(m.n_experts)), w),
                  "each expert's W_o rows (h_kv·d_h)": (max(p[f"attn_experts.{e}.w_o"].shape[0] for e in range(m.n_experts)), w),
                  "K width": (p["w_k"].shape[1], w), "V width": (p["w_v"].shape[1], w),
                  "router width (E_a)": (p["moa_router"].shape[1], m.n_experts),
                  "query heads (k_a·h_kv)": (b.n_heads, m.top_k * b.n_kv_heads)}
        for k, (got, want) in widths.items():
            c.figure(f"{k} − expected", got - want, 0)
        return (all(got == want for got, want in widths.values()),
                "; ".join(f"{k} {got} (expected {want})" for k, (got, want) in widths.items()), "exact")
    if b.short_conv is not None:  # its projections' and conv's widths
        widths = {"in-projection (b, c, x)": (p["w_conv_in"].shape[1], 3 * b.d_model),
                  "conv channels": (p["short_conv"].shape[0], b.d_model)}
        for k, (got, want) in widths.items():
            c.figure(f"{k} − expected", got - want, 0)
        return (all(got == want for got, want in widths.values()),
                "; ".join(f"{k} {got} (expected {want})" for k, (got, want) in widths.items()), "exact")
    if isinstance(b.mamba, Mamba1):  # a Mamba-1 layer: its projections' widths
        m = b.mamba
        widths = {"in-projection (x, z)": (p["w_ssm_in"].shape[1], 2 * m.d_inner),
                  "x-projection (δ, B, C)": (p["w_ssm_x"].shape[1], m.dt_rank + 2 * m.d_state),
                  "Δ projection (R → d_in)": (p["w_ssm_dt"].shape[1], m.d_inner),
                  "out-projection rows (d_in)": (p["w_ssm_out"].shape[0], m.d_inner),
                  "conv channels (x)": (p["ssm_conv"].shape[0], m.d_inner)}
        for k, (got, want) in widths.items():
            c.figure(f"{k} − expected", got - want, 0)
        return (all(got == want for got, want in widths.values()),
                "; ".join(f"{k} {got} (expected {want})" for k, (got, want) in widths.items()), "exact")
    if b.mamba is not None:  # a Mamba-2 layer: its projections' widths and the heads' groups
        m = b.mamba
        widths = {"in-projection (z, x, B, C, dt)": (p["w_ssm_in"].shape[1], 2 * m.d_inner + 2 * m.n_groups * m.d_state
                                                     + m.n_heads),
                  "out-projection rows (h·p)": (p["w_ssm_out"].shape[0], m.d_inner),
                  "conv channels (x, B, C)": (p["ssm_conv"].shape[0], m.conv_dim)}
        for k, (got, want) in widths.items():
            c.figure(f"{k} − expected", got - want, 0)
        c.figure("n_heads % n_groups (SSM)", m.n_heads % m.n_groups, 0)
        ok = all(got == want for got, want in widths.values()) and m.n_heads % m.n_groups == 0
        said = (f"SSM n_heads % n_groups = {m.n_heads % m.n_groups}; " + "; ".join(
            f"{k} {got} (expected {want})" for k, (got, want) in widths.items()))
        if b.parts == "hybrid":  # Falcon-H1: the attention beside it too, checked as a block of attention alone
            c.cfg = b.attention_part
            try:
                attention_ok, attention_said, _ = check_divisibility(c)
            finally:
                c.cfg = b
            return ok and attention_ok, f"{said}; attention: {attention_said}", "exact"
        return ok, said, "exact"
    if b.mla is not None:  # every head's widths come from the latent's projections
        m = b.mla
        widths = {"Q": (p["w_q_b" if m.q_lora_rank else "w_q"].shape[1], b.n_heads * m.qk_head_dim),
                  "K/V latent | RoPE key": (p["w_kv_a"].shape[1], m.kv_lora_rank + m.qk_rope_head_dim),
                  "K_nope | V": (p["w_kv_b"].shape[1], b.n_heads * (m.qk_nope_head_dim + m.v_head_dim)),
                  "W_O rows": (p["w_o"].shape[0], b.n_heads * m.v_head_dim)}
        ok = all(got == want for got, want in widths.values())
        for k, (got, want) in widths.items():
            c.figure(f"{k} width − expected", got - want, 0)
        return ok, "latent attention widths: " + "; ".join(f"{k} {got} (expected {want})"
                                                          for k, (got, want) in widths.items()), "exact"
    widths = (p["w_q"].shape[1], p["w_k"].shape[1])
    ok = (widths == (b.n_heads * b.head_dim, b.n_kv_heads * b.head_dim) and b.n_heads % b.n_kv_heads == 0)
    div = f"d_model % n_heads = {b.d_model % b.n_heads}" if b.n_heads * b.head_dim == b.d_model else \
        f"head_dim {b.head_dim} set explicitly (h·d_h = {b.n_heads * b.head_dim})"
    if b.n_heads * b.head_dim == b.d_model:
        c.figure("d_model % n_heads", b.d_model % b.n_heads, 0)
    c.figure("n_heads % n_kv_heads", b.n_heads % b.n_kv_heads, 0)
    c.figure("Q width − h·d_h", widths[0] - b.n_heads * b.head_dim, 0)
    c.figure("K width − h_kv·d_h", widths[1] - b.n_kv_heads * b.head_dim, 0)
    return ok, f"{div}; n_heads % n_kv_heads = {b.n_heads % b.n_kv_heads}; Q/K widths {widths}", "exact"


def _latent_head_split(c: Context) -> tuple[bool, str, str]:
    """Latent attention: query head i is columns i·d_h…(i+1)·d_h − 1 of the Q projection; head i's key
    part and value are its slice i·(d_nope + d_v)… of the K/V up-projection; the RoPE key is shared."""
    b, (B, T, _) = c.cfg, c.x.shape
    m, h = b.mla, b.n_heads
    assert m is not None
    d_h, d_n, d_v = m.qk_head_dim, m.qk_nope_head_dim, m.v_head_dim
    q, q_flat, k, v, kv = c.need("q", "q_proj", "k", "v", "kv_proj")
    # the shared key part: rotated, or (NoPE, Kimi-Linear) the down-projection's last d_rope columns as they are
    k_rope = c.need("k_rope")[0] if b.rope else c.need("kv_a")[0][:, None, :, m.kv_lora_rank:]
    expected = {"Q": (q, (B, h, T, d_h)), "K": (k, (B, h, T, d_h)), "V": (v, (B, h, T, d_v))}
    shapes_ok = all(a.shape == shape for a, shape in expected.values())
    worst = math.inf
    if shapes_ok and q_flat.shape == (B, T, h * d_h) and kv.shape == (B, T, h * (d_n + d_v)):
        q_cols = np.stack([q_flat[..., i * d_h:(i + 1) * d_h] for i in range(h)], axis=1)  # (B, h, T, d_h)
        kv_cols = np.stack([kv[..., i * (d_n + d_v):(i + 1) * (d_n + d_v)] for i in range(h)], axis=1)
        worst = max(_diff(q, q_cols), _diff(k[..., :d_n], kv_cols[..., :d_n]), _diff(v, kv_cols[..., d_n:]),
                    _diff(k[..., d_n:], np.broadcast_to(k_rope, (B, h, T, m.qk_rope_head_dim))))
    shapes = "; ".join(f"{n} {a.shape}" + ("" if a.shape == shape else f" (expected {shape})")
                       for n, (a, shape) in expected.items())
    tol = c.tolerance(EXACT * 100, q_flat)
    c.figure("max |head − column slice|", worst, tol)
    return shapes_ok and _within(worst, tol), f"{shapes}; max |head − column slice| {_fmt(worst)} (K's RoPE part: " \
        f"the shared key)", f"shape exact; {tol:.3g}"


def check_head_split(c: Context) -> tuple[bool, str, str]:
    b, (B, T, _) = c.cfg, c.x.shape
    if b.mla is not None:
        return _latent_head_split(c)
    heads = {"q": b.n_heads, "k": b.n_kv_heads, "v": b.n_kv_heads}
    width = {"q": b.head_dim, "k": b.head_dim, "v": b.value_dim}  # (MiMo-V2-Flash's values are narrower)
    split = dict(zip(heads, c.need(*heads)))
    # the projections (B, T, n·d_h), or their clipped (clip_qkv) or normalised form (qk_norm over the projection)
    flat = dict(zip(heads, c.need(*(_flat_key(b, n) for n in heads))))
    worst, shapes_ok = 0.0, True
    for name, n in heads.items():
        w = width[name]
        shapes_ok &= split[name].shape == (B, n, T, w)
        if split[name].shape != (B, n, T, w) or flat[name].shape != (B, T, n * w):
            worst = math.inf
            continue
        # head i must hold columns i·d_h … (i+1)·d_h − 1 of the projection (q and k may be returned rotated)
        columns = np.stack([flat[name][..., i * w:(i + 1) * w] for i in range(n)], axis=1)
        error = _diff(split[name], columns)
        if name in "qk" and b.rope:
            cos, sin = rope_tables(np.arange(T), b.rope_dims, b.rope_theta, np.dtype(np.float64), b.rope_scaling)
            error = min(error, _diff(split[name], apply_rope(columns, cos, sin)))
        worst = max(worst, error)
    shapes = "; ".join(f"{n.upper()} {split[n].shape}" + ("" if split[n].shape == (B, heads[n], T, width[n])
                                                          else f" (expected {(B, heads[n], T, width[n])})")
                       for n in heads)
    tol = c.tolerance(EXACT * 100, flat["q"])
    c.figure("max |head − column slice|", worst, tol)
    return shapes_ok and _within(worst, tol), f"{shapes}; max |head − column slice| {_fmt(worst)}", \
        f"shape exact; {tol:.3g}"


def _flat_key(b: BlockConfig, name: str) -> str:
    """The recorded (B, T, n·d_h) tensor that the head split of q, k or v reads."""
    if b.clip_qkv and (b.clip_after_qk_norm or not (b.qk_norm == "projection" and name in "qk")):
        return f"{name}_clip"  # the last step before the split: the clamp (OLMoE's comes after the q/k norms)
    return f"{name}_norm" if b.qk_norm == "projection" and name in "qk" else f"{name}_proj"


def _sinks(c: Context) -> np.ndarray | None:
    """Each head's sink logit as (1, h, 1, 1), when the block has attention sinks (gpt-oss)."""
    if not c.cfg.attention_sinks:
        return None
    return np.asarray(c.subject.weights["sinks"], dtype=np.float64).reshape(1, -1, 1, 1)


def _softmax_keys(masked: np.ndarray, sinks: np.ndarray | None = None) -> np.ndarray:
    """Softmax over the key axis; with sinks, each head's sink logit is one more key whose weight is dropped."""
    top = np.max(masked, axis=-1, keepdims=True)
    if sinks is not None:
        top = np.maximum(top, sinks)
    e = np.exp(masked - top)
    total = e.sum(axis=-1, keepdims=True) + (0.0 if sinks is None else np.exp(sinks - top))
    return e / total


def _row_sums(c: Context, w: np.ndarray) -> tuple[float, str]:
    """(worst deviation of w's row sums from what they must be, what that is): 1, or with attention sinks
    1 − the sink's weight, from the subject's masked scores (blockcli's when it returns none)."""
    sinks = _sinks(c)
    if sinks is None:
        return _max(w.sum(axis=-1) - 1.0), "max |row sum − 1|"
    masked = _masked(c) if "masked_scores" in c.inter or _scores_key(c.cfg) in c.inter else c.truth["masked_scores"]
    expected = _softmax_keys(masked, sinks).sum(axis=-1)
    return _max(w.sum(axis=-1) - expected), "max |row sum − (1 − sink weight)|"


def _scores_key(b: BlockConfig) -> str:
    """The recorded scores the causal mask reads: Q·Kᵀ/√d_h, or with ALiBi's biases added."""
    return "alibi_scores" if b.alibi else "scores"


def _masked(c: Context) -> np.ndarray:
    """The scores after the causal mask: recorded, or the subject's scores masked the standard way."""
    if "masked_scores" in c.inter:
        return c.inter["masked_scores"]
    (scores,) = c.need(_scores_key(c.cfg))
    T = scores.shape[-1]
    return np.where(np.tril(np.ones((T, T), dtype=bool)), scores, -np.inf)


def check_softmax_axis(c: Context) -> tuple[bool, str, str]:
    (w,) = c.need("attn_weights")
    rows, what = _row_sums(c, w)
    c.figure(what, rows, STATS)
    if _scores_key(c.cfg) not in c.inter and "masked_scores" not in c.inter:  # rows alone still catch a column softmax
        return _within(rows, STATS), f"{what} {_fmt(rows)} (no scores returned: weights not compared " \
            f"with a softmax of them)", f"{STATS:g}"
    tol = c.tolerance(EXACT * 100, 1.0)
    diff = _diff(w, _softmax_keys(_masked(c), _sinks(c)))
    c.figure("max |w − softmax_keys(masked)|", diff, tol)
    sinks = " with the sinks" if c.cfg.attention_sinks else ""
    return _within(rows, STATS) and _within(diff, tol), \
        f"{what} {_fmt(rows)}; max |w − softmax_keys(masked{sinks})| {_fmt(diff)}", f"{STATS:g}; {tol:.3g}"


def check_causal_mask(c: Context) -> tuple[bool, str, str]:
    (w,) = c.need("attn_weights")
    T = w.shape[-1]
    hidden = np.triu(np.ones((T, T), dtype=bool), k=1)
    if c.cfg.sliding_window:  # keys older than the window are hidden as well as future ones
        hidden |= np.tril(np.ones((T, T), dtype=bool), k=-c.cfg.sliding_window)
    if c.cfg.attention_chunk:  # keys of an earlier chunk are hidden too (Llama 4's chunked layers)
        position = np.arange(T) // c.cfg.attention_chunk
        hidden |= position[:, None] != position[None, :]
    chosen = c.inter.get("idx_topk")  # DeepSeek Sparse Attention: (B, T, T) the keys the indexer kept
    if chosen is not None:  # the others are hidden too, the query's own key among them when not chosen
        hidden = np.broadcast_to(hidden | ~chosen[:, None], w.shape)  # (B, h, T, T)
    above = _max(w[..., hidden])
    seen_diag = np.diagonal(~hidden, axis1=-2, axis2=-1) if hidden.ndim > 2 else np.ones(T, dtype=bool)
    diag = float(np.min(np.diagonal(w, axis1=-2, axis2=-1)[..., seen_diag])) if seen_diag.any() else 1.0
    rows, what = _row_sums(c, w)
    where = ("outside the window or above the diagonal" if c.cfg.sliding_window else
             "outside the query's chunk or above the diagonal" if c.cfg.attention_chunk else "above diagonal")
    measured = (f"max weight {where} {_fmt(above)}; min diagonal weight {_fmt(diag)}; "
                f"{what} {_fmt(rows)}")
    c.figure(f"max weight {where}", above, 0)
    c.figure("min diagonal weight (must be > 0)", diag)
    c.figure(what, rows, STATS)
    before = True
    if _scores_key(c.cfg) in c.inter and "masked_scores" in c.inter:
        # before softmax: the masked scores keep every visible score and hide every hidden one
        scores, masked = c.inter[_scores_key(c.cfg)], c.inter["masked_scores"]
        before = bool(np.all(np.isneginf(masked[..., hidden])) and np.array_equal(masked[..., ~hidden],
                                                                                  scores[..., ~hidden]))
        measured += f"; mask applied to scores: {'yes' if before else 'no'}"
    capped = True
    cap = c.cfg.attention_softcap
    if cap and "masked_scores" in c.inter:  # Gemma 2: c·tanh(·/c) bounds every visible score by c
        masked = c.inter["masked_scores"]
        worst = _max(masked[..., ~hidden])
        capped = worst <= cap
        c.figure("max |visible score|", worst, cap)
        measured += f"; soft cap: max |visible score| {_fmt(worst)} (c = {cap:g})"
    ok = above == 0.0 and diag > 0 and _within(rows, STATS) and before and capped
    return ok, measured, f"above = 0 exactly; diagonal > 0; {STATS:g}" + (f"; |score| <= {cap:g}" if cap else "")


def check_concat(c: Context) -> tuple[bool, str, str]:
    b, (B, T, _) = c.cfg, c.x.shape
    if "attn_concat" not in c.inter and "w_o" in c.subject.unused:
        return False, f"the output projection {c.subject.unused['w_o']} (filled from w_o) never ran", "called once"
    (concat,) = c.need("attn_concat")
    d_v = b.value_dim
    shape_ok = concat.shape == (B, T, b.n_heads * d_v)
    heads, source = _heads(c)
    measured = f"concat {concat.shape}"
    order = 0.0
    if heads is not None:
        order = max((_diff(concat[..., i * d_v:(i + 1) * d_v], heads[:, i])
                     for i in range(b.n_heads)), default=0.0) if shape_ok and heads.ndim == 4 else math.inf
        measured += f"; max |slice i − head i{source}| {_fmt(order)}"
        c.figure("max |slice i − head i|", order, c.tolerance(EXACT * 100, concat))
    else:
        measured += "; head order not compared (needs attn_heads, or attn_weights and v_proj)"
    wo = 0.0
    if "attn_out" in c.inter:
        p = c.subject.weights
        what = "norm(concat)" if b.sub_norms else "concat"  # BitNet: the heads normalised before W_O
        read = _sub_norm(concat, p, b) if b.sub_norms and shape_ok else concat
        wo = _diff(c.inter["attn_out"], read @ p["w_o"] + p.get("b_o", 0.0)) if shape_ok else math.inf
        measured += f"; max |out − {what}·W_O − b_O| {_fmt(wo)}"
        c.figure(f"max |out − {what}·W_O − b_O|", wo, c.tolerance(EXACT * 100, concat))
    elif heads is None:
        raise Skip("needs attn_concat with attn_heads (or attn_weights and v_proj) or attn_out")
    tol = c.tolerance(EXACT * 100, concat)
    return shape_ok and _within(order, tol) and _within(wo, tol), measured, f"shape exact; {tol:.3g}"


def _sub_norm(concat: np.ndarray, p: Mapping[str, Any], b: BlockConfig) -> np.ndarray:
    """BitNet's attn_sub_norm of the combined heads (B, T, h·d_h), written out: (x − μ)/σ or x/rms, times its
    scale (1 + γ with unit-offset norms), plus its shift."""
    x = concat - concat.mean(axis=-1, keepdims=True) if b.norm == "layernorm" else concat
    out = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + b.norm_eps)
    if "attn_sub_norm_gamma" in p:
        out = out * (p["attn_sub_norm_gamma"] + (1.0 if b.norm_unit_offset else 0.0))
    return out + p.get("attn_sub_norm_beta", 0.0)


def _heads(c: Context) -> tuple[np.ndarray | None, str]:
    """The subject's per-head outputs (B, h, T, d_h): returned, or its own weights times its own V columns."""
    if "attn_heads" in c.inter:
        return c.inter["attn_heads"], ""
    v_key = _flat_key(c.cfg, "v")  # V's projection, or its clipped form
    if "attn_weights" not in c.inter or v_key not in c.inter or c.cfg.mla is not None:
        return None, ""
    b, w, v = c.cfg, c.inter["attn_weights"], c.inter[v_key]  # (B, h, T, T), (B, T, h_kv·d_v)
    group, d_v = b.n_heads // b.n_kv_heads, b.value_dim
    if w.ndim != 4 or w.shape[1] != b.n_heads or v.shape[-1] != b.n_kv_heads * d_v:
        return None, ""
    heads = np.stack([w[:, i] @ v[..., i // group * d_v:(i // group + 1) * d_v]
                      for i in range(b.n_heads)], axis=1) * b.value_scale
    return heads, " (attn_weights · V columns)"


def check_residual(c: Context) -> tuple[bool, str, str]:
    post = c.cfg.placement == "post"
    first, second = ("h_pre", "y_pre") if post else ("h", "y")
    # what each residual add adds: the branch output, or (post_branch) its normalised form
    branches = {"post_branch": ("ln1_out", "ln2_out"), "sandwich": ("ln1_post_out", "ln2_post_out")}.get(
        c.cfg.placement, ("mixer_out", "mlp_out") if c.cfg.parts == "hybrid" else ("attn_out", "mlp_out"))
    h, attn_out, mlp_out = c.need(first, *branches)
    # a residual multiplier (Granite) scales the branch before its add; post_branch adds the norm's output
    r = 1.0 if c.cfg.placement == "post_branch" else c.cfg.residual_multiplier
    mlp_out = mlp_out * c.cfg.mlp_multipliers[1]  # the MLP's output multiplier after W_down (Falcon-H1's; else 1)
    # what each add adds them to: the stream, or (normed_residual) each norm's output
    normed = c.cfg.placement == "normed_residual"
    b = c.cfg  # MiniMax: each add α·skip + β·branch (1 and 1 elsewhere)
    pairs = [(first, h, b.attn_skip_scale * (c.inter["ln1_out"] if normed else c.x), b.attn_branch_scale * r * attn_out)]
    if second in c.inter:
        pairs.append((second, c.inter[second], b.mlp_skip_scale * (c.inter["ln2_out"] if normed else c.inter["h"]),
                      b.mlp_branch_scale * r * mlp_out))
    worst, ok, shapes = 0.0, True, []
    for key, result, left, right in pairs:
        operands = c.inputs.get(key, [left.shape, right.shape])
        ok &= len(set(operands)) == 1 and operands[0] == result.shape == c.x.shape
        shapes.append(f"{key}: {' + '.join(str(s) for s in operands)}")
        worst = max(worst, _diff(result, left + right) if left.shape == right.shape else math.inf)
    tol = c.tolerance(EXACT, c.x)
    c.figure("max |sum − (a + b)|", worst, tol)
    return ok and _within(worst, tol), f"{'; '.join(shapes)}; max |sum − (a + b)| {_fmt(worst)}", \
        f"shapes equal; {tol:.3g}"


def check_norm_axis(c: Context) -> tuple[bool, str, str]:
    b, p = c.cfg, c.subject.weights
    if b.placement == "post":
        raise Skip("post-norm: the first norm's input is the residual sum, checked through item 6 and 12")
    # the first norm reads the block input, or (post_branch) the attention output
    norm_input = c.need("attn_out")[0] * b.residual_multiplier if b.placement == "post_branch" else c.x
    (out,) = c.need("ln1_out")
    x_hat = (out - p.get("ln1_beta", 0.0)) / norm_scale(p.get("ln1_gamma"), b.norm_unit_offset)  # undo scale and shift
    # The exact per-token target: variance σ²/(σ² + ε) for LayerNorm, RMS √(m/(m + ε)) for RMSNorm,
    # with σ² and m = mean(x²) taken over the features of the input token.
    if b.norm == "layernorm":
        var = norm_input.var(axis=-1)
        mean = _max(x_hat.mean(axis=-1))
        spread = _max(x_hat.var(axis=-1) - var / (var + b.norm_eps))
        stats = f"max |token mean| {_fmt(mean)}; max |token variance − σ²/(σ²+ε)| {_fmt(spread)}"
        c.figure("max |token mean|", mean, STATS)
        c.figure("max |token variance − σ²/(σ²+ε)|", spread, STATS)
    else:
        ms = (norm_input**2).mean(axis=-1)
        mean = 0.0
        spread = _max(np.sqrt((x_hat**2).mean(axis=-1)) - np.sqrt(ms / (ms + b.norm_eps)))
        stats = f"max |token RMS − √(m/(m+ε))| {_fmt(spread)}"
        c.figure("max |token RMS − √(m/(m+ε))|", spread, STATS)
    ok = _within(mean, STATS) and _within(spread, STATS)
    if c.subject.block is not None:  # blockcli's norm can be run alone: move one token, watch the others
        norm = c.subject.block.ln1
        moved = c.x.copy()
        moved[-1, -1] = moved[-1, -1] * 3.0 + 1.0
        change = norm(moved) - norm(c.x)
        leak = _max(change[:-1]) + _max(change[-1, :-1])
        ok &= leak == 0.0
        c.figure("other tokens changed by", leak, 0)
        stats += f"; other tokens changed by {_fmt(leak)}"
    return ok, stats, f"{STATS:g}; others unchanged exactly"


def check_causality(c: Context) -> tuple[bool, str, str]:
    """Perturb each position in turn and compare every earlier output."""
    B, T, d = c.x.shape
    rng = np.random.default_rng(12345)
    stacked = np.repeat(c.x[None], T, axis=0)  # (T, B, T, d): copy j has token j changed
    for j in range(T):
        stacked[j, :, j] = rng.standard_normal((B, d))
    if c.subject.block is not None:  # one batched pass: blockcli's block is known to batch cleanly
        y = c.subject.forward(stacked.reshape(T * B, T, d)).reshape(T, B, T, d)
    else:  # a black box: one call per position, so batch mixing is not mistaken for leaking
        y = np.stack([c.subject.forward(stacked[j]) for j in range(T)])
    worst, where = 0.0, -1
    for j in range(1, T):
        diff = _diff(y[j, :, :j], c.y[:, :j])
        if not diff <= worst:  # also catches NaN
            worst, where = diff, j
    first = f" (perturbing position {where})" if where >= 0 and worst > 0 else ""
    tol = c.tolerance(PERTURB, c.y)
    measured = f"max change at earlier positions {_fmt(worst)}{first}, all {T} positions"
    c.figure("max change at earlier positions", worst, tol)
    if c.subject.block is None and _within(worst, tol):  # a user's block: also two positions at a long T
        x, y = c.long()
        long_worst, at = 0.0, -1
        for j in (x.shape[1] // 2, x.shape[1] - 1):
            moved = x.copy()
            moved[:, j] = rng.standard_normal((x.shape[0], d))
            diff = _diff(c.subject.forward(moved)[:, :j], y[:, :j])
            if not diff <= long_worst:
                long_worst, at = diff, j
        c.figure(f"max change at earlier positions, T={x.shape[1]}", long_worst, tol)
        worst = max(worst, long_worst) if not math.isnan(long_worst) else long_worst
        measured += (f"; at T={x.shape[1]}, perturbing positions T/2 and T−1: {_fmt(long_worst)}"
                     + (f" (perturbing position {at})" if at >= 0 and long_worst > 0 else ""))
    return _within(worst, tol), measured, f"{tol:.3g}"


def check_rows(c: Context) -> tuple[bool, str, str]:
    (w,) = c.need("attn_weights")
    finite = bool(np.all(np.isfinite(w)))
    rows, what = _row_sums(c, w) if finite else (math.inf, "max |row sum − 1|")
    c.figure(what, rows, STATS)
    return finite and _within(rows, STATS), f"all finite: {finite}; {what} {_fmt(rows)}", f"{STATS:g}"


def check_count(c: Context) -> tuple[bool, str, str]:
    if c.subject.parameters is None:
        raise Skip("the implementation exposes no parameters() method or params attribute")
    arrays = {k: int(np.asarray(v).size) for k, v in c.subject.parameters().items()}
    values = symbol_values(c.cfg)
    rows = c.formula(c.cfg)
    hand_total = sum(evaluate(row.weights + row.biases, values) for row in rows)
    total = sum(arrays.values())
    bad = []
    covered = {k for row in rows for k in row.keys}
    if set(arrays) <= covered:  # blockcli's keys: compare component by component
        for row in rows:
            hand, real = evaluate(row.weights + row.biases, values), sum(arrays.get(k, 0) for k in row.keys)
            if hand != real:
                bad.append(f"{row.name} {hand:,} vs {real:,}")
    elif hand_total != total:
        bad.append("totals differ (names are not blockcli's, so components are not compared)")
    c.figure("hand count", hand_total)
    c.figure("array count", total)
    c.figure("hand − arrays", hand_total - total, 0)
    return not bad, f"hand {hand_total:,} vs arrays {total:,}" + (f" ({'; '.join(bad)})" if bad else ""), "exact"


# ----------------------------------------------------------------------------- after the ten


def check_cache(c: Context) -> tuple[bool, str, str]:
    block = c.subject.block
    if block is None:
        raise Skip("an --impl target has no K/V-cache interface")
    scaling = c.cfg.rope_scaling
    if scaling is not None and scaling.type in ("dynamic", "longrope") and c.x.shape[1] > scaling.original_max_positions:
        raise Skip(f"{scaling.type} RoPE picks its frequencies by each pass's length: token-by-token decoding past "
                   f"original_max_positions={scaling.original_max_positions} differs from one full pass, as in "
                   f"transformers")
    cache = block.new_cache()
    steps = [block.step(c.x[:, t:t + 1], cache) for t in range(c.x.shape[1])]
    diff = _diff(np.concatenate(steps, axis=1), c.y)
    c.figure("max |cached − full|", diff, EXACT * 100)
    return _within(diff, EXACT * 100), f"max |cached − full| {_fmt(diff)}", f"{EXACT * 100:g}"


def check_reference(c: Context) -> tuple[bool, str, str] | tuple[bool, str, str, str]:
    """blockcli's block against the slow loop reference; a user's block against blockcli's."""
    if c.subject.block is not None:
        diff = _diff(c.y, reference_block(c.x, c.subject.weights, c.cfg))
        c.figure("max |block − slow reference|", diff, EXACT * 100)
        return _within(diff, EXACT * 100), f"max |block − slow reference| {_fmt(diff)}", f"{EXACT * 100:g}"
    diff = _diff(c.y, c.truth_y)
    scale = _scale(c.truth_y)
    tol = c.atol + c.rtol * scale
    measured = f"max |y − blockcli| {_fmt(diff)} (relative {_fmt(diff / scale)})"
    tolerance = f"atol {c.atol:g} + rtol {c.rtol:g} · max(1, max|y|)"
    c.figure("max |y − blockcli|", diff, tol)
    c.figure("relative: max |y − blockcli| / max(1, max|y|)", diff / scale)
    if _within(diff, tol):
        x, y = c.long()
        truth = DecoderBlock(c.cfg, c.subject.weights, attention="full")(x)
        long_diff = _diff(y, truth)
        measured += f"; at T={x.shape[1]}: {_fmt(long_diff)}"
        long_ok = _within(long_diff, c.atol + c.rtol * _scale(truth))
        c.figure(f"max |y − blockcli|, T={x.shape[1]}", long_diff, c.atol + c.rtol * _scale(truth))
        return long_ok, measured, tolerance, "" if long_ok else \
            f"it agrees at T={c.x.shape[1]} but not at T={x.shape[1]}: look for a mask, RoPE table or buffer " \
            f"built for a fixed length"
    first = _first_divergence(c, diff / scale)
    if first:
        measured += f"; first diverging intermediate: {first}"
    hint = HINTS[12]
    if 1e-8 <= diff / scale <= 1e-4 and c.x.dtype == np.float64:
        hint = FLOAT32_HINT
    elif c.cfg.rope and c.cfg.mla is None and _diff(c.y, _interleaved_rope_truth(c)) / scale <= max(c.rtol, 1e-5):
        hint = ROPE_HINT
    return False, measured, tolerance, hint


def _first_divergence(c: Context, relative: float) -> str:
    """The first intermediate, in forward order, where the subject's own value leaves blockcli's (−inf-aware) by
    more than the tolerance and by at least 1% of the output's relative difference (so float32 rounding early on
    is not blamed for a large difference that starts later)."""
    for key, truth in c.truth.items():
        if key not in c.inter:
            continue
        scale = _scale(truth)
        mine, tol = c.inter[key], max(c.atol + c.rtol * scale, 0.01 * relative * scale)
        agrees = _within(_diff(mine, truth), tol)
        if key in ("q", "k") and f"{key}_rope" in c.truth:  # a user's q and k may be returned rotated
            agrees = agrees or _within(_diff(mine, c.truth[f"{key}_rope"]), tol)
        if not agrees:
            return key
    return ""


def _interleaved_rope_truth(c: Context) -> np.ndarray:
    """blockcli's output for a block rotating pairs (2i, 2i+1): the same as rotate-half on W_Q and W_K whose
    rotated columns are reordered within each head (even dims first, then odd)."""
    b, p = c.cfg, dict(c.subject.weights)
    r = b.rope_dims
    order = np.concatenate([np.arange(0, r, 2), np.arange(1, r, 2), np.arange(r, b.head_dim)])
    for key, n in (("w_q", b.n_heads), ("b_q", b.n_heads), ("w_k", b.n_kv_heads), ("b_k", b.n_kv_heads)):
        if key in p:
            cols = (np.arange(n)[:, None] * b.head_dim + order[None, :]).ravel()
            p[key] = p[key][..., cols]
    return DecoderBlock(b, p, attention="full")(c.x)


def check_float32(c: Context) -> tuple[bool, str, str]:
    if c.subject.forward32 is None:
        raise Skip("no float32 instance of the implementation")
    y32 = np.asarray(c.subject.forward32(c.x.astype(np.float32)), dtype=np.float64)
    rel = _diff(y32, c.y) / max(_max(c.y), 1.0)
    c.figure("max |y32 − y64| / max|y64|", rel, FLOAT32)
    return _within(rel, FLOAT32), f"max |y32 − y64| / max|y64| {_fmt(rel)}", f"{FLOAT32:g} relative"


def check_output_shape(c: Context) -> tuple[bool, str, str] | tuple[bool, str, str, str]:
    y = c.y
    ok = isinstance(y, np.ndarray) and y.shape == c.x.shape and y.dtype.kind == "f"
    measured = f"input {c.x.shape} {c.x.dtype}, output {getattr(y, 'shape', type(y).__name__)} " \
        f"{getattr(y, 'dtype', '')}"
    if ok and y.dtype != c.x.dtype:
        return False, measured, "shape and dtype equal", \
            f"the output is {y.dtype} for {c.x.dtype} input: something casts (a module or weights in {y.dtype}?)"
    return ok, measured, "shape and dtype equal"


def check_batch_independence(c: Context) -> tuple[bool, str, str]:
    other = c.x.copy()
    other[1:] = np.random.default_rng(999).standard_normal(other[1:].shape)
    diff = _diff(c.subject.forward(other)[0], c.y[0])
    tol = c.tolerance(PERTURB, c.y)
    c.figure("max change of the first sequence", diff, tol)
    return _within(diff, tol), f"first sequence changed by {_fmt(diff)} when the others changed", f"{tol:.3g}"


def check_determinism(c: Context) -> tuple[bool, str, str]:
    again = c.subject.forward(c.x.copy())
    same = bool(np.array_equal(again, c.y))
    c.figure("max |second call − first call|", 0.0 if same else _diff(again, c.y), 0)
    return same, "two calls on the same input are bit-identical" if same else \
        f"two calls differ by {_fmt(_diff(again, c.y))}", "bit-identical"


def check_large_inputs(c: Context) -> tuple[bool, str, str]:
    finite = bool(np.all(np.isfinite(c.subject.forward(c.x * LARGE))))
    measured = f"output finite for inputs scaled by {LARGE:g}: {finite}"
    if c.subject.rebuild is not None:  # the pre-norm undoes an input scale; scaled W_Q, W_K make the scores huge
        p = dict(c.subject.weights)
        keys = ("w_q", "b_q", "w_k", "b_k") if c.cfg.mla is None else ("w_q_b" if "w_q_b" in p else "w_q",)
        if c.cfg.moa is not None:  # a mixture of attention heads: every attention expert's W_q, and the shared W_K
            keys = tuple(f"attn_experts.{e}.w_q" for e in range(c.cfg.moa.n_experts)) + ("w_k",)
        for key in keys:
            if key in p:  # latent attention: its keys come out of a normalised latent, so Q takes both scales
                p[key] = p[key] * (QK_SCALE if c.cfg.mla is None else QK_SCALE ** 2)
        if c.cfg.qk_norm != "none":  # normalised queries and keys undo W_Q's scale: scale the norms' outputs
            offset = 1.0 if c.cfg.norm_unit_offset else 0.0  # a (1 + γ) scale: γ' = s·(1 + γ) − 1
            for name in ("q_norm", "k_norm"):
                if f"{name}_gamma" not in p:  # a norm without a scale (norm_scale false) cannot be sharpened
                    continue
                p[f"{name}_gamma"] = QK_SCALE * (p[f"{name}_gamma"] + offset) - offset
                if f"{name}_beta" in p:
                    p[f"{name}_beta"] = p[f"{name}_beta"] * QK_SCALE
        sharp = bool(np.all(np.isfinite(c.subject.rebuild(p)(c.x))))
        scaled = f"W_Q, W_K scaled by {QK_SCALE:g}" if c.cfg.mla is None else f"W_Q scaled by {QK_SCALE ** 2:g}"
        measured += f"; with {scaled} (scores ×{QK_SCALE ** 2:g}): {sharp}"
        finite &= sharp
    return finite, measured, "no NaN or Inf"


def _moe(c: Context) -> Any:
    if c.cfg.moe is None:
        raise Skip("the block has no mixture of experts")
    return c.cfg.moe


def check_experts_per_token(c: Context) -> tuple[bool, str, str]:
    moe = _moe(c)
    (chosen,) = c.need("router_choice")
    B, T = c.x.shape[:2]
    chosen = np.asarray(chosen)
    if chosen.shape != (B, T, moe.top_k):
        return False, f"chosen experts {chosen.shape}, expected (B, T, k) = {(B, T, moe.top_k)}", "exact"
    rows = chosen.reshape(B * T, moe.top_k)
    distinct = [len(set(r.tolist())) for r in rows]
    in_range = bool(np.all((rows >= 0) & (rows < moe.n_experts)))
    ok = in_range and min(distinct) == max(distinct) == moe.top_k
    c.figure("fewest distinct experts of a token", min(distinct), moe.top_k)
    c.figure("most distinct experts of a token", max(distinct), moe.top_k)
    return ok, (f"distinct experts per token {min(distinct)}…{max(distinct)} (k = {moe.top_k}); all in "
                f"0…{moe.n_experts - 1}: {in_range}"), "exact"


def check_routing_weights(c: Context) -> tuple[bool, str, str]:
    moe = _moe(c)
    if not moe.renormalize and moe.order != "topk_softmax":
        raise Skip("the reference does not renormalise (renormalize: false): its weights are the chosen scores")
    (weights,) = c.need("router_weights")
    sums = np.asarray(weights, dtype=np.float64).sum(axis=-1) / moe.routed_scaling
    target = 1.0
    if moe.renormalize_eps > 1e-12 and moe.order == "softmax_topk":  # LFM2-MoE's ε 1e-6: Σ/(Σ + ε), not 1
        scores, chosen = c.need("router_scores", "router_choice")
        picked = np.take_along_axis(np.asarray(scores, dtype=np.float64), np.asarray(chosen), axis=-1).sum(axis=-1)
        target = picked / (picked + moe.renormalize_eps)
    worst = _max(sums - target)
    want = "1" if isinstance(target, float) else f"Σ/(Σ + {moe.renormalize_eps:g})"
    c.figure(f"max |Σ weights − {want}|", worst, STATS)
    scaled = f" (after dividing by routed_scaling {moe.routed_scaling:g})" if moe.routed_scaling != 1.0 else ""
    return _within(worst, STATS), f"max |Σ weights − {want}| {_fmt(worst)}{scaled}", f"{STATS:g}"


# ----------------------------------------------------------------------------- gradients (--grad)


def _peak(a: np.ndarray | None) -> float:
    """max |a|, 0 for none."""
    return 0.0 if a is None else float(np.max(np.abs(a), initial=0.0))


def check_finite_differences(c: Context) -> tuple[bool, str, str]:
    """⟨dy, y⟩'s directional derivative along a seeded unit direction, one per tensor (the input, each
    weight), from the subject's gradient and from a central difference of two forward passes."""
    dx, grads = c.gradients()
    rng = np.random.default_rng(17)

    def loss(y: np.ndarray) -> float:
        return float(np.vdot(c.dy, y))

    off = _diff(c.y, c.truth_y) / _scale(c.truth_y)
    if AGREE < off <= FLOAT32:  # float32 arithmetic inside: a difference quotient would measure its rounding
        raise Skip(f"the target's forward is {_fmt(off)} off blockcli's (relative), float32 arithmetic inside: "
                   f"finite differences would measure its rounding; item 23 holds its gradients to blockcli's")
    floor = FD_ROUNDING * float(np.sum(np.abs(c.dy * c.y))) / FD_STEP
    worst = (0.0, "", 0.0, 0.0)  # (error over tolerance, tensor, analytic, numeric)
    failed = []

    def compare(name: str, gradient: np.ndarray | None, plus: np.ndarray, minus: np.ndarray, u: np.ndarray) -> None:
        nonlocal worst
        analytic = 0.0 if gradient is None else float(np.vdot(gradient, u))
        numeric = (loss(plus) - loss(minus)) / (2 * FD_STEP)
        tol = FD_RTOL * max(abs(analytic), abs(numeric)) + floor
        ratio = abs(analytic - numeric) / tol
        if not ratio <= 1:  # NaN fails too
            failed.append(name)
        if not ratio <= worst[0]:
            worst = (ratio, name, analytic, numeric)

    u = rng.standard_normal(c.x.shape)
    u /= np.linalg.norm(u)
    compare("x", dx, c.subject.forward(c.x + FD_STEP * u), c.subject.forward(c.x - FD_STEP * u), u)
    rebuild = c.subject.rebuild
    keys = list(c.reference_gradients()[1]) if rebuild is not None else []
    for key in keys:
        w = c.subject.weights[key]
        u = rng.standard_normal(w.shape)
        u /= np.linalg.norm(u)
        runs = [rebuild({**c.subject.weights, key: w + sign * FD_STEP * u})(c.x) for sign in (1, -1)]
        compare(key, grads.get(key), runs[0], runs[1], u)
    ratio, name, analytic, numeric = worst
    c.figure("max |analytic − numeric| / tolerance", ratio, 1.0)
    measured = (f"{len(keys) + 1} tensors (x and every weight), one direction each; worst {name}: analytic "
                f"{analytic:.8g}, numeric {numeric:.8g} ({_fmt(ratio)} of the tolerance)")
    if failed:
        measured += f"; differ: {', '.join(failed)}"
    return not failed, measured, f"rtol {FD_RTOL:g} + float64 rounding at step {FD_STEP:g}"


def check_backward_causality(c: Context) -> tuple[bool, str, str]:
    """dy at one position t only: the input gradient at every later position must be exactly 0."""
    if c.subject.gradients is None:
        c.gradients()  # the Skip that says why
    T = c.x.shape[1]
    positions = sorted({0, T // 2, T - 2})
    worst, at, scale = 0.0, -1, 0.0
    for t in positions:
        dy = np.zeros_like(c.dy)
        dy[:, t] = c.dy[:, t]
        dx, _ = c.subject.gradients(c.x, dy)
        dx = np.asarray(dx)
        leak = _peak(dx[:, t + 1:])
        scale = max(scale, _peak(dx[:, :t + 1]))
        if not leak <= worst:
            worst, at = leak, t
    tol = EXACT * max(1.0, scale)
    c.figure("max |dx| after the position of dy", worst, tol)
    where = f" (dy at position {at})" if worst > 0 else ""
    return _within(worst, tol), (f"max |dx| at later positions {_fmt(worst)}{where}, dy at positions "
                                 f"{', '.join(map(str, positions))}"), f"{tol:.3g}"


def check_dead_parameters(c: Context) -> tuple[bool, str, str]:
    """Every weight that blockcli's reference gives a gradient receives one from the subject."""
    _, grads = c.gradients()
    _, reference = c.reference_gradients()
    largest = max((_peak(g) for g in grads.values() if g is not None), default=0.0)
    largest_ref = max((_peak(g) for g in reference.values()), default=0.0)
    idle = [k for k, g in reference.items() if _peak(g) <= DEAD * largest_ref]  # none flows to them at all
    dead = [k for k in reference if k not in idle and (grads.get(k) is None or _peak(grads[k]) <= DEAD * largest)]
    c.figure("parameters without a gradient", len(dead), 0)
    measured = f"{len(reference) - len(dead)} of {len(reference)} parameters receive a gradient"
    if dead:
        missing = [k for k in dead if grads.get(k) is None]
        zero = [k for k in dead if k not in missing]
        measured += "".join(f"; {what}: {', '.join(keys)}" for what, keys in
                            (("none returned", missing), ("all zeros", zero)) if keys)
    if idle:
        named = ", ".join(idle[:4]) + (f" and {len(idle) - 4} more" if len(idle) > 4 else "")
        measured += f"; none flows to {named} in blockcli's reference either (not counted)"
    return not dead, measured, f"nonzero: max |g| > {DEAD:g} · the largest"


def check_reference_gradients(c: Context) -> tuple[bool, str, str]:
    """The subject's dx and weight gradients against blockcli's backward, each within atol + rtol · max(1, max|g|)."""
    if c.subject.block is not None and c.subject.block.ops is STANDARD_OPS:
        raise Skip("blockcli's block is the reference; item 20 holds its gradients to finite differences")
    dx, grads = c.gradients()
    ref_dx, reference = c.reference_gradients()
    worst, failed = (0.0, "x"), []
    for name, got, want in [("x", dx, ref_dx), *((k, grads.get(k), g) for k, g in reference.items())]:
        tol = c.atol + c.rtol * _scale(want)
        diff = math.inf if got is None else _diff(np.asarray(got, dtype=np.float64), want)
        if not _within(diff, tol):
            failed.append(name)
        if not diff / _scale(want) <= worst[0]:
            worst = (diff / _scale(want), name)
    c.figure("max relative |g − blockcli|", worst[0], c.rtol)
    measured = f"{len(reference) + 1} gradients (dx and every weight's); worst {worst[1]}: relative {_fmt(worst[0])}"
    if failed:
        measured += f"; differ: {', '.join(failed)}"
    return not failed, measured, f"atol {c.atol:g} + rtol {c.rtol:g} · max(1, max|g|)"


def small_model(config: Config, block: BlockConfig) -> Config:
    """Item 24's model: the model's embeddings, positions, final norm and head (tied or not) around one layer of
    the verified block, under a vocabulary of MODEL_VOCAB tokens (and an embedding width of 8 where it is its
    own)."""
    assert config.model is not None
    m = config.model
    padding = None if m.padding_idx is None else min(m.padding_idx, MODEL_VOCAB - 1)
    small = replace(m, n_layers=1, vocab_size=MODEL_VOCAB, max_positions=max(m.max_positions, MAX_VERIFY_SEQ),
                    embedding_dim=8 if m.embedding_dim else 0, padding_idx=padding)
    return replace(config, block=block, model=small, layer_blocks=())


def check_model_gradients(c: Context) -> tuple[bool, str, str]:
    """The mean cross-entropy of shifted targets: each parameter tensor's gradient from `Model.loss_and_grads`
    (with the subject's operations) against a central difference of the loss along a seeded unit direction."""
    from blockcli.block import Model

    if c.model is None or c.model.model is None:
        raise Skip("a block config has no model around it (vocab_size, n_layers): a preset or a config.json has")
    if c.subject.block is None:
        raise Skip("an --impl target is one block; the model's embeddings and head are blockcli's")
    config = small_model(c.model, c.cfg)
    model = Model.from_config(config, dtype="float64", seed=3, ops=c.subject.block.ops, attention="full")
    rng = np.random.default_rng(19)
    tokens = [t for t in range(MODEL_VOCAB) if t != config.model.padding_idx]  # the padding row: nn.Embedding's
    ids = rng.choice(tokens, (c.x.shape[0], c.x.shape[1]))  # rule stops its lookups' gradient, not its use
    loss, grads = model.loss_and_grads(ids)
    floor = 1e3 * FD_ROUNDING * max(1.0, abs(loss)) / FD_STEP  # the loss is a mean: few terms to round
    worst, failed = (0.0, ""), []
    for key, g in grads.items():
        w = model.params[key]
        u = rng.standard_normal(w.shape)
        u /= np.linalg.norm(u)
        f = [Model(config, {**model.params, key: w + sign * FD_STEP * u}, model.ops, "full").loss(ids)
             for sign in (1, -1)]
        analytic, numeric = float(np.vdot(g, u)), (f[0] - f[1]) / (2 * FD_STEP)
        ratio = abs(analytic - numeric) / (FD_RTOL * max(abs(analytic), abs(numeric)) + floor)
        if not ratio <= 1:
            failed.append(key)
        if not ratio <= worst[0]:
            worst = (ratio, key)
    c.figure("max |analytic − numeric| / tolerance", worst[0], 1.0)
    tied = "tied" if config.model.tie_embeddings else "untied"
    measured = (f"{len(grads)} tensors of a 1-layer model (V={MODEL_VOCAB}, {tied} head), loss {loss:.6g}; worst "
                f"{worst[1]}: {_fmt(worst[0])} of the tolerance")
    if failed:
        measured += f"; differ: {', '.join(failed)}"
    return not failed, measured, f"rtol {FD_RTOL:g} + the loss's rounding at step {FD_STEP:g}"


CHECKS: dict[int, Callable[[Context], tuple[bool, str, str]]] = {
    1: check_divisibility, 2: check_head_split, 3: check_softmax_axis, 4: check_causal_mask, 5: check_concat,
    6: check_residual, 7: check_norm_axis, 8: check_causality, 9: check_rows, 10: check_count,
    11: check_cache, 12: check_reference, 13: check_float32, 14: check_output_shape,
    15: check_batch_independence, 16: check_determinism, 17: check_large_inputs,
    18: check_experts_per_token, 19: check_routing_weights,
    20: check_finite_differences, 21: check_backward_causality, 22: check_dead_parameters,
    23: check_reference_gradients, 24: check_model_gradients,
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
        while b.rope and int(head_dim * b.rope) // 2 * 2 < 2:  # keep at least one rotated pair
            head_dim += step
        d_model = b.n_heads * head_dim if b.n_heads * b.head_dim == b.d_model else max(1, b.d_model // k)
        small = replace(b, d_model=d_model, head_dim=head_dim, d_ff=max(1, b.d_ff // k))
        if b.mla is not None:  # the latent's ranks and widths scaled alike; RoPE keeps at least one pair
            m = b.mla
            mla = replace(m, kv_lora_rank=max(1, m.kv_lora_rank // k), q_lora_rank=m.q_lora_rank and
                          max(1, m.q_lora_rank // k), qk_nope_head_dim=max(1, m.qk_nope_head_dim // k),
                          qk_rope_head_dim=max(2, m.qk_rope_head_dim // k // 2 * 2), v_head_dim=max(1, m.v_head_dim // k))
            head_dim = mla.qk_head_dim
            small = replace(small, d_model=max(1, b.d_model // k), head_dim=head_dim, mla=mla)
        scaling = small.rope_scaling
        if scaling is not None and scaling.short_factor and len(scaling.short_factor) != small.rope_dims // 2:
            pairs = small.rope_dims // 2  # longrope: one factor per rotated pair, so every len(f)/pairs-th one
            small = replace(small, rope_scaling=replace(scaling, **{
                name: tuple(f[i * len(f) // pairs] for i in range(pairs))
                for name, f in (("short_factor", scaling.short_factor), ("long_factor", scaling.long_factor))}))
        if b.linear_attention is not None:  # Gated DeltaNet: as many heads, each k times narrower
            n = b.linear_attention
            small = replace(small, linear_attention=replace(n, key_head_dim=max(1, n.key_head_dim // k),
                                                            value_head_dim=max(1, n.value_head_dim // k)))
        if isinstance(b.mamba, Mamba1):  # Mamba-1: k times fewer channels and a k times lower Δ rank, the same state
            m = b.mamba
            small = replace(small, mamba=replace(m, d_inner=max(1, m.d_inner // k), dt_rank=max(1, m.dt_rank // k)))
        if b.moe is not None:  # as many experts, each k times narrower
            small = replace(small, moe=replace(b.moe, d_expert=max(1, b.moe.d_expert // k),
                                               d_shared=b.moe.d_shared and max(1, b.moe.d_shared // k)))
        notes.append(f"the block has {size:,} parameters: verified on a copy with the same structure scaled down "
                     f"{k}× (d_model {small.d_model}, head_dim {head_dim}, d_ff {small.d_ff}, heads {b.n_heads}/{b.n_kv_heads})"
                     + (f", {b.moe.n_experts} experts of width {small.moe.d_expert}" if small.moe else "")
                     + (f", Mamba-1 d_inner {small.mamba.d_inner}, dt_rank {small.mamba.dt_rank}"
                        if isinstance(small.mamba, Mamba1) else ""))
        cfg = replace(cfg, block=small)
    return cfg, notes


def parse_selection(text: str | None, option: str = "checks") -> set[int] | None:
    if text is None:
        return None
    try:
        ids = {int(part) for part in text.replace(" ", "").split(",") if part}
    except ValueError:
        raise InputError(f"{option}: expected check numbers such as 4,8; got '{clipped(text)}'") from None
    if not ids:
        raise InputError(f"{option}: expected at least one check number, such as 4,8")
    unknown = sorted(ids - set(CHECKS))
    if unknown:
        raise InputError(f"{option}: no check numbered {unknown[0]}; checks are 1–{max(CHECKS)}")
    return ids


def unverified_layers_note(config: Config) -> str | None:
    """Which layers `layers_to_verify` leaves out, and why: those running a shared transformer block (Zamba2), and
    the cross-attention layers a text-only pass skips (Mllama)."""
    if config.model is None:
        return None
    shared = [i for i in range(config.model.n_layers) if config.layer_block(i).shared is not None]
    cross = [i for i in range(config.model.n_layers) if config.layer_block(i).cross_attention]
    said = []
    if shared:
        said.append(f"{layer_list(shared)} run a shared transformer block (block.shared), which reads the model's "
                    f"weights and token embeddings, so they cannot run alone: not verified (their forward is checked "
                    f"against transformers' logits, tests/test_mamba.py)")
    if cross:
        said.append(f"{layer_list(cross)}: cross-attention, {CROSS_UNVERIFIED}")
    return "; ".join(said) or None


# why verify leaves out a cross-attention layer (block.cross_attention)
CROSS_UNVERIFIED = "which a text-only pass skips (the identity): nothing to verify"


def layers_to_verify(config: Config) -> list[int | None]:
    """One layer of each kind: the first layer of each group of identical blocks (dense and mixture of
    experts, sliding and global, with and without RoPE...); [None] for a block, or a model whose layers
    are all alike."""
    if config.model is None or not config.layers_differ:
        return [None]
    # a layer reusing the previous layer's indexer choice (GLM-5's shared layers) cannot run alone, nor one running
    # a shared transformer block (Zamba2's: it reads the model's weights and token embeddings)
    chosen = [group.layers[0] for group in config.layer_groups()
              if (group.block.mla is None or not group.block.mla.index_shared) and group.block.shared is None
              and not group.block.cross_attention]
    if not chosen:
        raise InputError(f"{config.name}: every layer runs a shared transformer block (block.shared), which reads the "
                         f"model's weights and token embeddings, so none can run alone: nothing to verify")
    return chosen


def verify(config: Config, *, weights: Any = None, ops: Ops = STANDARD_OPS, formula: Formula = block_formula,
           only: set[int] | None = None, skip: set[int] | None = None, impl: str | None = None,
           timeout: float = 60.0, rtol: float | None = None, atol: float | None = None, per_sequence: bool = False,
           weights_map: Any = None, layer: int | None = None, grad: bool = False) -> Report:
    """Build the subject (blockcli's block, a seeded bug, or a user's `impl`), run it, run the checks.
    `layer` picks one block out of a whole model's weights, and that layer's block when layers differ
    (default: layer 0's)."""
    for option, tolerance in (("--rtol", rtol), ("--atol", atol)):  # inf would pass every comparison, NaN none
        if tolerance is not None and not (math.isfinite(tolerance) and tolerance >= 0):
            raise InputError(f"{option}: expected a finite tolerance >= 0, got {tolerance}")
    layer_note, whole = [], config  # `whole`: the model the weights belong to
    shown, kind = None, ""
    n_layers = config.model.n_layers if config.model is not None else 1
    gemma4 = next((f for i in range(n_layers) if (f := gemma4_field(config.layer_block(i)))), None)
    if gemma4 is not None:
        raise InputError(f"{config.name}: verify runs one layer alone against blockcli's independent reference, "
                         f"which has none of Gemma 4's and Gemma 3n's mechanisms (block.{gemma4}: per-layer "
                         f"inputs, keys shared across layers, experts beside the MLP, AltUp's streams, LAuReL, the "
                         f"sparse gate); its forward is checked against transformers' "
                         f"logits instead (tests/test_checkpoint.py)")
    if config.model is not None and config.layers_differ:
        shown = layer or 0
        if not 0 <= shown < config.model.n_layers:
            raise InputError(f"--layer {layer}: the model has layers 0..{config.model.n_layers - 1}")
        kind = config.group_of(shown).describe()
        mla = config.layer_block(shown).mla
        if config.layer_block(shown).shared is not None:
            raise InputError(f"--layer {shown}: it runs a shared transformer block (block.shared), which reads the "
                             f"model's weights and token embeddings, so it cannot run alone; verify a layer without "
                             f"one (its forward is checked against transformers' logits: tests/test_mamba.py)")
        if config.layer_block(shown).cross_attention:
            raise InputError(f"--layer {shown}: a cross-attention layer, {CROSS_UNVERIFIED}; verify another layer")
        if mla is not None and mla.index_shared:
            raise InputError(f"--layer {shown}: it reuses the previous layer's indexer choice (mla.index_shared), "
                             f"so it cannot run alone; verify another layer")
        layer_note.append(f"layers differ: verified layer {shown}'s block, {kind}"
                          + ("; --layer N picks another" if layer is None else ""))
        config = config.for_layer(shown)
        if weights is None:
            layer = None  # the layer picks a block config; there are no weights to pick from
    fit_blas_threads()  # as many BLAS threads as there are cores free: small products on busy cores otherwise wait
    cfg, notes = verification_config(config)
    notes = layer_note + notes
    if weights is not None and any("scaled" in n for n in notes):
        if isinstance(weights, (str, Path)) and not is_checkpoint_path(Path(weights)):
            open_regular(Path(weights), ".npz archive").close()  # a missing or unreadable file is said first
        size = sum(math.prod(s) for s in block_parameter_shapes(config.block).values())
        raise InputError(f"--weights: this block has {size:,} parameters; verify runs blocks of more than "
                         f"{SCALE_LIMIT:,} on a scaled-down copy, which given weights do not fit, so it cannot "
                         f"check them (a limit of verify, not of this machine's memory)")
    params = resolve_weights(weights, block_parameter_shapes(cfg.block), cfg.run.seed, "float64", layer=layer,
                             notes=notes, config=whole if whole.model else None)
    threads_before = threading.enumerate()  # any thread alive after the checks and not in here is the target's
    if impl is None:
        subject = block_subject(DecoderBlock(cfg.block, params, ops, attention="full"))
    else:
        from blockcli.impl import impl_subject  # lazy: loading users' modules is only for --impl

        subject = impl_subject(impl, params, cfg, timeout, per_sequence=per_sequence, weights_map=weights_map)
    x = np.random.default_rng(cfg.run.seed + 1).standard_normal((cfg.run.batch, cfg.run.seq_len, cfg.block.d_model))
    selected = [i for i in CHECKS if (only is None or i in only) and not (skip and i in skip)
                and (grad or only is not None or i not in GRAD_CHECKS)]  # --grad's checks: on request
    report = Report(config, [], notes, layer=shown, kind=kind)
    report.checks = run_checks(subject, cfg.block, x, formula, selected, report, rtol, atol,
                               config if config.model is not None else None)
    report.notes.extend(subject.notes)
    if impl is not None:
        from blockcli.impl import threads_left_running

        running = threads_left_running(threads_before, timeout)
        if running is not None:  # an error of the target: the report fails (and the CLI exits without waiting)
            report.errors.append(running)
            report.tracebacks.append("")
    return report


def run_checks(subject: Subject, cfg: BlockConfig, x: np.ndarray, formula: Formula, selected: Iterable[int],
               report: Report, rtol: float | None = None, atol: float | None = None,
               model: Config | None = None) -> list[Check]:
    """Run the selected checks. A failure of the subject is recorded once in `report.errors`; the checks it
    prevented are ERROR rows pointing at it, never FAILs with unrelated hints."""
    checks = []

    def error_row(i: int, exc: SubjectError, where: str) -> Check:
        message = str(exc)
        if message not in report.errors:
            report.errors.append(message)
            report.tracebacks.append(exc.traceback)
        return Check(i, NAMES[i], False, f"not run: error {report.errors.index(message) + 1} ({where})", "", "",
                     error=True)

    with np.errstate(all="ignore"):
        failure: SubjectError | None = None
        try:
            context: Any = Context(subject, cfg, x, formula, rtol, atol, model)
        except SubjectError as exc:  # a broken block may fail anywhere in its forward pass
            context, failure = _Structure(subject, cfg, formula), exc
        except Exception as exc:  # blockcli's own block with a seeded bug
            context, failure = _Structure(subject, cfg, formula), SubjectError(
                f"the forward pass raised {type(exc).__name__}: {exc}")
        selected = list(selected)
        for n, i in enumerate(selected):
            progress.report("checks", n, len(selected), f"{i}. {SHORT_NAMES[i]}")
            if failure and i == 11 and subject.block is None:
                checks.append(Check(i, NAMES[i], None, "an --impl target has no K/V-cache interface", ""))
                continue
            if failure and i not in (1, 10):
                checks.append(error_row(i, failure, "the first call failed"))
                continue
            context.figures = []
            if (why := unmodelled(i, cfg)) is not None:
                checks.append(Check(i, NAMES[i], None, why, ""))
                continue
            try:
                passed, measured, tolerance, *hint = CHECKS[i](context)
            except Skip as reason:
                checks.append(Check(i, NAMES[i], None, str(reason), ""))
                continue
            except SubjectError as exc:
                checks.append(error_row(i, exc, "in this check's call"))
                continue
            except Exception as exc:  # the subject's values broke a comparison (a wrong shape, a wrong type)
                passed, measured, tolerance, hint = False, f"could not compare: {type(exc).__name__}: {exc}", "", []
            checks.append(Check(i, NAMES[i], passed, measured, tolerance,
                                "" if passed else (hint[0] if hint else HINTS[i]), figures=tuple(context.figures)))
        progress.report("checks", len(selected), len(selected))
    return checks


def unmodelled(i: int, cfg: BlockConfig) -> str | None:
    """Why check i does not apply to a Gated DeltaNet (or KDA), lightning, gated-attention or mixture-of-attention layer
    (None: it does)."""
    kda = cfg.linear_attention is not None and cfg.linear_attention.per_channel
    mixer = "Kimi Delta Attention" if kda else "Gated DeltaNet"
    if cfg.linear_attention is not None and i in (1, 2, 3, 4, 5, 9):
        return f"a {mixer} layer has no softmax attention heads"
    if cfg.lightning is not None and i in (2, 3, 4, 5, 9):
        return "a lightning-attention layer has no softmax attention heads"
    if cfg.lightning is not None and i == 12:
        return ("blockcli's slow reference has no lightning attention; tests/test_lightning.py holds it to "
                "transformers and to a loop reference")
    if cfg.ngpt is not None and i == 6:
        return ("nGPT's residual is an interpolation n + |λ·α|⊙(branch − n) from the normalised input, not an "
                "addition")
    if cfg.ngpt is not None and i == 7:
        return "nGPT's norms project onto the unit sphere (L2 norm 1, not RMS 1)"
    if cfg.ngpt is not None and i == 12:
        return ("blockcli's slow reference has no nGPT block; tests/test_dory.py holds it to transformers "
                "(tests/fixtures/hf/dory, tests/fixtures/cases/fuzz-dory-0)")
    if cfg.differential is not None and i == 5:
        return ("differential attention combines head i with head i + h/2 and RMS-normalises each pair before W_O "
                "(no concatenation of the heads as they are)")
    if cfg.differential is not None and i == 12:
        return ("blockcli's slow reference has no differential attention; tests/test_diffllama.py holds it to "
                "transformers and to a loop reference")
    if cfg.moa is not None and i == 2:
        return "a mixture of attention heads takes each token's queries from its chosen experts (no one Q projection)"
    if cfg.moa is not None and i == 5:
        return "a mixture of attention heads sends each expert's heads through its own W_o, weighted (no one W_O)"
    if cfg.moa is not None and i == 12:
        return ("blockcli's slow reference has no mixture of attention heads; tests/test_jetmoe.py holds it to "
                "transformers and to a loop reference")
    if cfg.attention_gate and i == 5:
        return "the heads pass through the attention gate (σ(x·W_gate)) before W_O"
    if kda and i == 12:
        return ("blockcli's slow reference has no Kimi Delta Attention; tests/test_kimi_linear.py holds it to "
                "transformers and to a loop reference")
    if (cfg.linear_attention is not None or cfg.attention_gate) and i == 12:
        return ("blockcli's slow reference has neither the Gated DeltaNet nor the attention gate; tests/test_deltanet.py "
                "holds them to transformers and to a loop reference")
    return None


@dataclass
class _Structure(Measuring):
    """What the structural checks (1 and 10) need when the forward pass itself failed."""

    subject: Subject
    cfg: BlockConfig
    formula: Formula
    figures: list[Figure] = field(default_factory=list)
