"""Seeded bugs: the real block with exactly one operation swapped for a classic mistake.

Each mutant replaces one field of `Ops` (or the hand-count formula), so it differs from the
truth by one operation and there is only one block to maintain. `expected` names the checklist
items that are meant to catch it; the tests assert them, and `verify --mutants` shows the matrix.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Callable

import numpy as np

from blockcli import ops as F
from blockcli.count import Formula, Poly, Row, block_formula
from blockcli.config import BlockConfig, Config, InputError
from blockcli.ops import STANDARD_OPS, Array, Ops


def _always(cfg: BlockConfig) -> str | None:
    return None


@dataclass(frozen=True)
class Mutant:
    name: str
    description: str
    expected: tuple[int, ...]  # checklist items meant to catch it
    ops: Ops = STANDARD_OPS
    formula: Formula = block_formula
    # why this bug cannot show in a config (None: it can), e.g. forgetting biases a config has none of
    inapplicable: Callable[[BlockConfig], str | None] = _always
    backward: bool = False  # a bug of the backward alone: only the gradient checks (--grad) can see it
    tied_head: bool = False  # a bug of a model's tied embedding table: needs a model config whose head is tied


def _one_head(cfg: BlockConfig) -> str | None:
    return "with one head, splitting and combining heads is the identity" if cfg.n_heads == 1 else None


def _no_bias(cfg: BlockConfig) -> str | None:
    b = cfg.bias
    # a Gated DeltaNet or lightning layer's projections have none
    attention = (b.qkv or b.out) and cfg.linear_attention is None and cfg.lightning is None
    return None if (attention or b.mlp or b.norm) else "the config has no biases or shifts to forget"


def _unit_head(cfg: BlockConfig) -> str | None:
    return "with head_dim 1, 1/√d_h is 1" if cfg.head_dim == 1 else None


def _one_pair(cfg: BlockConfig) -> str | None:
    if not cfg.rope:
        return "RoPE is off"
    return "one rotated pair: both layouts pair dims 0 and 1" if cfg.rope_dims < 4 else None


def _other_rope_layout(x: Array, cos: Array, sin: Array, layout: str) -> Array:
    return F.ROPE_LAYOUTS["half" if layout == "interleaved" else "interleaved"](x, cos, sin)


def _no_alibi(cfg: BlockConfig) -> str | None:
    if not cfg.alibi:
        return "ALiBi is off"
    power_of_two = cfg.n_heads & (cfg.n_heads - 1) == 0
    return f"with {cfg.n_heads} heads (a power of two) the naive rule is the right one" if power_of_two else None


def _naive_alibi_slopes(n_heads: int) -> Array:
    return 2.0 ** (-8.0 * np.arange(1, n_heads + 1) / n_heads)  # the paper's rule, right for 2^k heads only


def _split_without_transpose(x: Array, n_heads: int) -> Array:
    B, T, width = x.shape
    return x.reshape(B, n_heads, T, width // n_heads)  # wrong axes: mixes time and head features


def _softmax_over_queries(scores: Array, allowed: Array) -> tuple[Array, Array]:
    masked = np.where(allowed, scores, -np.inf)
    return masked, F.softmax(masked, axis=-2)


def _softmax_without_max(scores: Array, allowed: Array) -> tuple[Array, Array]:
    masked = np.where(allowed, scores, -np.inf)
    e = np.exp(masked)  # no row-maximum shift: overflows once scores pass ~709
    return masked, e / e.sum(axis=-1, keepdims=True)


def _mask_after_softmax(scores: Array, allowed: Array) -> tuple[Array, Array]:
    return scores, np.where(allowed, F.softmax(scores.copy(), axis=-1), 0.0)


def _mask_hiding_diagonal(t_q: int, t_k: int, offset: int = 0) -> Array:
    return np.arange(t_k)[None, :] < (offset + np.arange(t_q))[:, None]


def _no_mask(t_q: int, t_k: int, offset: int = 0) -> Array:
    return np.ones((t_q, t_k), dtype=bool)


def _skip_output_projection(concat: Array, w_o: Array, b_o: Array | None) -> Array:
    return concat


def _combine_reversed(x: Array) -> Array:
    return F.combine_heads(x[:, ::-1])


def _residual_broadcast(x: Array, update: Array) -> Array:
    return x + update[:, -1:, :]  # (B, 1, d) broadcast across time


def _norm_over(axis: int, rms: bool):
    def norm(x: Array, gamma: Array, beta: Array | None, eps: float) -> Array:
        if rms:
            out = x / np.sqrt(np.mean(x * x, axis=axis, keepdims=True) + eps) * gamma
        else:
            mean = x.mean(axis=axis, keepdims=True)
            out = (x - mean) / np.sqrt(x.var(axis=axis, keepdims=True) + eps) * gamma
        return out if beta is None else out + beta

    return norm


def _unscaled_scores(q: Array, k: Array) -> Array:
    return q @ k.swapaxes(-1, -2)


def _no_moe(cfg: BlockConfig) -> str | None:
    return "the block has no mixture of experts" if cfg.moe is None else None


def _one_choice(cfg: BlockConfig) -> str | None:
    if cfg.moe is None:
        return "the block has no mixture of experts"
    return "one expert of one: any k other than 1 is impossible" if cfg.moe.n_experts == 1 else None


def _unnormalised_reference(cfg: BlockConfig) -> str | None:
    if cfg.moe is None:
        return "the block has no mixture of experts"
    if not cfg.moe.renormalize or cfg.moe.order == "topk_softmax":
        return "the routing weights are not renormalised here (or a softmax over the k normalises them)"
    return None if cfg.moe.top_k < cfg.moe.n_experts else "k = E: the chosen scores already sum to 1"


def _no_shared(cfg: BlockConfig) -> str | None:
    if cfg.moe is None:
        return "the block has no mixture of experts"
    return None if cfg.moe.d_shared else "the mixture has no shared expert"


def _router_softmax_over_tokens(logits: Array, scoring: str) -> Array:
    return F.softmax(logits.copy(), axis=0) if scoring == "softmax" else F.sigmoid(logits)


def _top_k_off_by_one(values: Array, k: int) -> Array:
    return F.top_k(values, k + 1 if k < values.shape[-1] else k - 1)


def _interpolated(cfg: BlockConfig) -> str | None:
    return "nGPT's residual is an interpolation, not an addition (block.ngpt)" if cfg.ngpt is not None else None


def _unit_sphere_scores(cfg: BlockConfig) -> str | None:
    return ("nGPT's queries and keys are normalised to norm 1, so scaled W_Q and W_K never sharpen the scores "
            "(block.ngpt)" if cfg.ngpt is not None else None)


def _no_latent(cfg: BlockConfig) -> str | None:
    return None if cfg.mla is not None else "no latent attention (block.mla)"


def _rope_on_the_nope_part(x: Array, rope_dims: int) -> tuple[Array, Array]:
    return x[..., rope_dims:], x[..., :rope_dims]  # turns the head's first d_rope dims, which belong to Q_nope


def _latent_unnormalised(latent: Array, norm: Callable[[Array], Array]) -> Array:
    return latent


def _softmax_backward_without_row_sum(weights: Array, d_weights: Array, axis: int = -1) -> Array:
    return weights * d_weights  # P ⊙ dP: the − Σ P ⊙ dP term of every logit's share in its row forgotten


def _layer_norm_backward_without_mean(x: Array, scale: Array | float, eps: float, dy: Array) -> tuple[Array, Array]:
    centred = x - x.mean(axis=-1, keepdims=True)
    inv = 1.0 / np.sqrt(np.mean(centred * centred, axis=-1, keepdims=True) + eps)
    xhat, g = centred * inv, dy * scale
    return (g - xhat * np.mean(g * xhat, axis=-1, keepdims=True)) * inv, dy * xhat  # no − mean(g): μ's share


def _rms_norm_backward_without_cross(x: Array, scale: Array | float, eps: float, dy: Array) -> tuple[Array, Array]:
    inv = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return inv * (dy * scale), dy * (x * inv)  # as if the rms were a constant: no − x·r³·mean(g·x)


def _weight_grad_transposed(x: Array, dy: Array) -> Array:
    n_in, n_out = x.shape[-1], dy.shape[-1]
    return (dy.reshape(-1, n_out).T @ x.reshape(-1, n_in)).reshape(n_in, n_out)  # dYᵀ·X, laid into W's shape


def _sum_groups_first_head(d: Array, n_kv_heads: int) -> Array:
    B, h, T, d_h = d.shape
    return d.reshape(B, n_kv_heads, h // n_kv_heads, T, d_h)[:, :, 0]  # only the group's first query head


def _rope_backward_forward(dy: Array, cos: Array, sin: Array, layout: str) -> Array:
    return F.ROPE_LAYOUTS[layout](dy, cos, sin)  # turned by +θ again instead of back by −θ


def _no_layernorm(cfg: BlockConfig) -> str | None:
    return None if cfg.norm == "layernorm" else "the block's norms are RMSNorms"


def _no_rmsnorm(cfg: BlockConfig) -> str | None:
    return None if cfg.norm == "rmsnorm" else "the block's norms are LayerNorms"


def _no_groups(cfg: BlockConfig) -> str | None:
    if cfg.mla is not None:
        return "latent attention has no K/V groups"
    return None if cfg.n_kv_heads < cfg.n_heads else "every query head has its own K/V head"


def _no_rope(cfg: BlockConfig) -> str | None:
    return None if cfg.rope else "RoPE is off"


def _formula_without_biases(cfg: BlockConfig) -> list[Row]:
    return [replace(row, biases=Poly()) for row in block_formula(cfg)]


def _ops(**changes: Any) -> Ops:
    return replace(STANDARD_OPS, **changes)


MUTANTS: tuple[Mutant, ...] = (
    Mutant("split-no-transpose", "head split reshapes (B, T, d) straight to (B, h, T, d_h) without the transpose",
           (2,), _ops(split_heads=_split_without_transpose), inapplicable=_one_head),
    Mutant("softmax-query-axis", "softmax normalises score columns (the query axis) instead of rows",
           (3, 8), _ops(attention_weights=_softmax_over_queries)),
    Mutant("mask-after-softmax", "causal mask applied after softmax, so rows no longer sum to 1",
           (3, 4, 8, 9), _ops(attention_weights=_mask_after_softmax)),
    Mutant("mask-hides-diagonal", "causal mask excludes the diagonal: the first query sees nothing (NaN)",
           (4, 9), _ops(causal_mask=_mask_hiding_diagonal)),
    Mutant("no-mask", "no causal mask: every query sees future keys", (4, 8), _ops(causal_mask=_no_mask)),
    Mutant("missing-wo", "output projection W_O forgotten: concatenated heads go straight to the residual",
           (5,), _ops(project_out=_skip_output_projection)),
    Mutant("heads-wrong-order", "heads concatenated in reverse order", (5,), _ops(combine_heads=_combine_reversed),
           inapplicable=_one_head),
    Mutant("residual-broadcast", "residual adds the last token's update (B, 1, d) to every position",
           (6, 8), _ops(residual_add=_residual_broadcast), inapplicable=_interpolated),
    Mutant("norm-time-axis", "LayerNorm statistics taken over the time axis", (7, 8),
           _ops(layer_norm=_norm_over(1, False), rms_norm=_norm_over(1, True))),
    Mutant("norm-batch-axis", "LayerNorm statistics taken over the batch axis", (7,),
           _ops(layer_norm=_norm_over(0, False), rms_norm=_norm_over(0, True))),
    Mutant("unscaled-scores", "scores not divided by √d_h", (12,), _ops(attention_scores=_unscaled_scores),
           inapplicable=_unit_head),
    Mutant("softmax-no-max", "softmax exponentiates the scores without subtracting the row maximum", (17,),
           _ops(attention_weights=_softmax_without_max), inapplicable=_unit_sphere_scores),
    Mutant("rope-wrong-layout", "RoPE pairs the wrong dims: rotate-half (i, i + r/2) on an interleaved-pair model "
           "(GPT-J), or interleaved pairs (2i, 2i + 1) on a rotate-half one", (12,),
           _ops(rotate_pairs=_other_rope_layout), inapplicable=_one_pair),
    Mutant("mla-rope-on-nope", "latent attention rotates the first d_rope dims of each query head (part of its "
           "no-RoPE half) instead of its RoPE part, the last d_rope", (12,),
           _ops(split_rope_part=_rope_on_the_nope_part), inapplicable=_no_latent),
    Mutant("mla-latent-norm-skipped", "latent attention uses its latents without their RMSNorms (q_a_layernorm, "
           "kv_a_layernorm)", (12,), _ops(normalise_latent=_latent_unnormalised), inapplicable=_no_latent),
    Mutant("alibi-naive-slopes", "ALiBi slopes 2^(−8i/h) for every head count, where BLOOM interleaves the slopes of "
           "the next power of two for the heads beyond the last one", (12,), _ops(alibi_slopes=_naive_alibi_slopes),
           inapplicable=_no_alibi),
    Mutant("count-forgets-biases", "hand parameter count leaves out every bias and shift", (10,),
           formula=_formula_without_biases, inapplicable=_no_bias),
    Mutant("router-softmax-token-axis", "router softmax over the tokens (axis 0 of the (B·T, E) logits) instead of "
           "the experts", (8, 11, 12, 15), _ops(router_probabilities=_router_softmax_over_tokens),
           inapplicable=lambda cfg: _no_moe(cfg) or (None if cfg.moe.scoring == "softmax" else
                                                     "sigmoid scores have no softmax axis")),
    Mutant("router-wrong-k", "top-k picks k + 1 experts per token (k − 1 when k = E)", (12, 18),
           _ops(top_k=_top_k_off_by_one), inapplicable=_one_choice),
    Mutant("router-no-renormalize", "the k chosen routing weights are not divided by their sum", (12, 19),
           _ops(renormalize=lambda w, eps: w), inapplicable=_unnormalised_reference),
    Mutant("shared-expert-dropped", "the shared expert's output is never added", (12,),
           _ops(add_shared=lambda routed, shared: routed), inapplicable=_no_shared),
    # bugs of the backward alone: the forward is right, so only the gradient checks (--grad) see them
    Mutant("softmax-backward-no-row-sum", "softmax backward P ⊙ dP, without the row-sum term − P ⊙ Σ P ⊙ dP",
           (20, 23, 24), _ops(softmax_backward=_softmax_backward_without_row_sum), backward=True),
    Mutant("layernorm-backward-no-mean", "LayerNorm backward without the mean term (the gradient through μ)",
           (20, 23, 24), _ops(layer_norm_backward=_layer_norm_backward_without_mean), inapplicable=_no_layernorm,
           backward=True),
    Mutant("rmsnorm-backward-no-cross", "RMSNorm backward without the cross term (the gradient through the rms)",
           (20, 23, 24), _ops(rms_norm_backward=_rms_norm_backward_without_cross), inapplicable=_no_rmsnorm,
           backward=True),
    Mutant("weight-grad-transposed", "attention weight gradients dYᵀ·X laid into W's shape, where Xᵀ·dY belongs",
           (20, 23, 24), _ops(weight_grad=_weight_grad_transposed), backward=True),
    Mutant("score-grad-unmasked", "the backward recomputes the softmax without the causal mask, so the score "
           "gradient reaches future keys", (20, 21, 23, 24), _ops(backward_mask=_no_mask), backward=True),
    Mutant("gqa-grad-one-head", "a K/V head's gradient taken from the first query head of its group only, not "
           "summed over the group", (20, 23, 24), _ops(sum_groups=_sum_groups_first_head), inapplicable=_no_groups,
           backward=True),
    Mutant("tied-embedding-one-use", "a tied embedding table's gradient from the token lookup only: the LM head's "
           "use of the same table forgotten", (24,), _ops(head_grad_to_table=lambda d: np.zeros(d.shape[::-1], d.dtype)),
           backward=True, tied_head=True),
    Mutant("rope-backward-forward-rotation", "RoPE's backward rotates by +θ (the forward's turn) instead of back by "
           "−θ", (20, 23, 24), _ops(rotate_pairs_backward=_rope_backward_forward), inapplicable=_no_rope,
           backward=True),
)


def find_mutant(name: str) -> Mutant:
    for mutant in MUTANTS:
        if mutant.name == name:
            return mutant
    import difflib

    close = difflib.get_close_matches(name, [m.name for m in MUTANTS], n=1)
    hint = f"; did you mean '{close[0]}'?" if close else "; see `blockcli verify --list-mutants`"
    raise InputError(f"--inject: no seeded bug named '{name}'{hint}")


def checked_block(config: Config, layer: int | None = None) -> BlockConfig:
    """The block verify's checks really run on (that layer's, the scaled copy of a large one)."""
    from blockcli.verify import verification_config

    chosen = config.for_layer(layer or 0) if config.model is not None and config.layers_differ else config
    return verification_config(chosen)[0].block


# the operations only softmax attention calls (a Gated DeltaNet layer none of them)
SOFTMAX_ATTENTION_OPS = frozenset({"split_heads", "combine_heads", "attention_scores", "causal_mask",
                                   "attention_weights", "project_out", "rotate_pairs", "split_rope_part",
                                   "normalise_latent", "alibi_slopes", "softmax_backward", "rotate_pairs_backward",
                                   "sum_groups", "backward_mask", "head_grad_to_table"})


def why_not(mutant: Mutant, config: Config, layer: int | None, grad: bool) -> str | None:
    """Why this seeded bug cannot show on this config's checked block (None: it can)."""
    if mutant.backward and not grad:
        return "a bug of the backward: --grad runs the checks that see it"
    if mutant.tied_head and not (config.model is not None and config.model.tie_embeddings):
        return "no tied embedding table: a model config (preset, config.json) whose LM head reuses it"
    from blockcli.verify import unmodelled

    block = checked_block(config, layer)
    changed = {f.name for f in fields(Ops) if getattr(mutant.ops, f.name) is not getattr(STANDARD_OPS, f.name)}
    if changed and changed <= SOFTMAX_ATTENTION_OPS:
        if block.linear_attention is not None:
            return (f"a {'Kimi Delta Attention' if block.linear_attention.per_channel else 'Gated DeltaNet'} layer "
                    f"runs none of softmax attention's operations, which this bug changes")
        if block.lightning is not None:
            return "a lightning-attention layer runs none of softmax attention's operations, which this bug changes"
        if (block.mamba is not None and block.parts != "hybrid") or block.short_conv is not None or block.parts == "mlp":
            mixer = "its MLP alone (parts: mlp)" if block.parts == "mlp" else \
                f"a Mamba-{getattr(block.mamba, 'version', 2)} mixer" if block.mamba is not None else "a short convolution"
            return f"the checked layer has no attention: {mixer}"
    if mutant.expected and all(unmodelled(i, block) for i in mutant.expected):  # Gated DeltaNet, gated attention
        return f"the checks that see it ({', '.join(map(str, mutant.expected))}) do not apply to this layer: " + \
            "; ".join(dict.fromkeys(unmodelled(i, block) for i in mutant.expected))
    return mutant.inapplicable(block)


FAMILIAR_PRESETS = ("gpt2", "llama-3.1-8b", "mixtral-8x7b", "deepseek-v3")  # suggested first, when the bug shows


def preset_it_shows_on(mutant: Mutant) -> str | None:
    """The first preset whose checked block this bug can show on (None: none can)."""
    from blockcli.config import preset_names
    from blockcli.sources import load_config

    known = [n for n in FAMILIAR_PRESETS if n in preset_names()]
    for name in known + [n for n in preset_names() if n not in known]:
        config = load_config(name)
        layers = [None] if config.model is None or not config.layers_differ else \
            [g.layers[0] for g in config.layer_groups()]
        if any(why_not(mutant, config, k, grad=True) is None for k in layers):
            return name
    return None


def run_mutants(config: Config, grad: bool = False, **options: Any) -> tuple[list[tuple[Mutant, Any]], dict[str, str]]:
    """The checklist on every seeded bug that can show in this config: ([(mutant, report)], {name: why not});
    the backward's bugs with `grad` only (the checks that see them)."""
    from blockcli.verify import verify

    skipped = {m.name: why for m in MUTANTS if (why := why_not(m, config, options.get("layer"), grad))}
    from blockcli.progress import report

    chosen_mutants = [m for m in MUTANTS if m.name not in skipped]
    rows = []
    for i, m in enumerate(chosen_mutants):
        report("seeded bugs", i, len(chosen_mutants), m.name)
        rows.append((m, verify(config, ops=m.ops, formula=m.formula, grad=grad, **options)))
    report("seeded bugs", len(chosen_mutants), len(chosen_mutants))
    return rows, skipped
