"""Closed-form parameter counts, and their reconciliation with the arrays the code creates.

The formula is written once here, from the hyperparameters, as polynomials in the shape
symbols (d, h, h_kv, d_h, d_ff, V, P, L): that gives both the number and the expression
shown beside it (`4·d² + 4·d`). It shares nothing with `blockcli.shapes`, where each layer
declares the shape of every parameter it holds: that is what makes comparing the two a real check.
The NumPy block is built from exactly those declarations (`DecoderBlock` refuses any other
parameter set), so the declared shapes are the block's arrays, and counting needs neither
NumPy nor an allocation (checklist item 10 compares with the arrays themselves).

Conventions: tied embeddings are counted once (the LM head row says "tied" and adds 0);
"non-embedding" excludes the token and position tables. A buffer (DeepSeek-V3's router selection
bias, which transformers stores but does not count among its parameters) has its own row, kind
"buffer", reconciled like any other but outside every parameter total. Memory and FLOPs of a workload are in
`blockcli.sizing`.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace
from typing import Callable, Mapping

from blockcli.activations import function_of
from blockcli.config import (BlockConfig, Config, GatedDeltaNet, LayerGroup, Mamba1, SharedBlock, layer_list,
                             projected_width)
from blockcli.shapes import Shape, block_parameter_shapes, counted_buffer, declared_sizes, is_buffer

# A polynomial: monomial (sorted tuple of symbols) → integer coefficient.
Poly = Counter
DECLARED = "declared shapes (nothing allocated)"  # the reconciliation's method without a checkpoint


def term(coef: int, *symbols: str) -> Poly:
    return Poly({tuple(sorted(symbols)): coef})


def evaluate(poly: Poly, values: Mapping[str, int]) -> int:
    return sum(c * math.prod(values[s] for s in mono) for mono, c in poly.items())


_ORDER = {"L": 0, "V": 1, "P": 2, "E": 3, "k": 4, "d": 5, "h": 6, "h_kv": 7, "d_h": 8, "d_ff": 9, "d_e": 10,
          "d_s": 11,
          # latent attention: query and K/V latent ranks, per-head widths without / with RoPE, values
          "r_q": 12, "r_kv": 13, "d_nope": 14, "d_rope": 15, "d_v": 16,
          # Gated DeltaNet: key heads and their width, value heads (d_v their width), the short conv's taps
          "h_k": 17, "d_k": 18, "h_v": 19, "K": 20,
          # a Mamba-2 mixer: SSM heads, their width, the state width, groups of B and C (K: the conv's kernel)
          "h_s": 21, "p": 22, "N": 23, "g": 24,
          # DeepSeek Sparse Attention's indexer: its heads and their width
          "h_I": 25, "d_I": 26,
          # a Mamba-1 mixer: its channels and Δ's rank (N its state width, K its conv's kernel)
          "d_in": 27, "R": 28,
          # Gemma 4's per-layer inputs: their width
          "d_p": 29,
          # a shared transformer block (Zamba2): its heads, K/V heads, their width, its MLP's width, the adapters' rank
          "h_a": 30, "h_akv": 31, "d_a": 32, "d_fa": 33, "r": 34,
          # Gemma 3n's AltUp streams and LAuReL rank
          "A": 35, "r_L": 36,
          # JetMoE's mixture of attention heads: its attention experts, and how many a token uses
          "E_a": 37, "k_a": 38}


def render(poly: Poly) -> str:
    """4·d² + 4·d: monomials by degree, symbols in a fixed order, powers as superscripts."""
    parts = []
    for mono in sorted((m for m in poly if poly[m]), key=lambda m: (-len(m), [_ORDER[s] for s in m])):
        counts = Counter(mono)
        symbols = "·".join(s + ("²" if counts[s] == 2 else "³" if counts[s] == 3 else "")
                           for s in sorted(counts, key=_ORDER.__getitem__))
        coef = poly[mono]
        parts.append(symbols if coef == 1 and symbols else f"{coef}·{symbols}" if symbols else str(coef))
    return " + ".join(parts) or "0"


@dataclass(frozen=True)
class Component:
    """One row of the breakdown: a tensor group, its shape, and where its count comes from."""

    name: str  # stable id, e.g. "attn.q"
    label: str  # what a person reads, e.g. "Q projection"
    shape: str  # e.g. "(512, 512) + (512,)"
    weights: int
    biases: int
    expression: str
    keys: tuple[str, ...] = ()  # the parameter names this row covers
    kind: str = "tensor"  # tensor | subtotal | total | tied | buffer (stored, not a parameter: in no total)
    active: int | None = None  # of `count`, what one token uses (a mixture's k of E experts); None: all of it
    group: int | None = None  # when layers differ: which of `ParameterCount.groups` a block row describes
    shapes: tuple[tuple[int, ...], ...] = ()  # the tensors `shape` describes (one expert's, for the routed experts)
    copies: int = 1  # how many times `shapes` is counted: E for the routed experts, else 1

    @property
    def count(self) -> int:
        return self.weights + self.biases

    @property
    def active_count(self) -> int:
        return self.count if self.active is None else self.active


@dataclass(frozen=True)
class Reconciliation:
    formula: int
    arrays: int
    method: str  # DECLARED (the shapes the block is built from) or "checkpoint" (a checkpoint's tensors)
    mismatches: tuple[str, ...] = ()
    buffers_formula: int = 0  # the buffers, reconciled apart from the parameters: the formula's
    buffers_arrays: int = 0  # and the declared shapes' or checkpoint's

    @property
    def match(self) -> bool:
        return self.formula == self.arrays and self.buffers_formula == self.buffers_arrays and not self.mismatches


@dataclass(frozen=True)
class ParameterCount:
    config: Config
    components: tuple[Component, ...]
    per_block: int
    total: int
    non_embedding: int
    reconciled: Reconciliation
    checkpoint: dict | None = None  # the checkpoint's files, when reconciled with one
    active: int = 0  # parameters one token uses: all but the routed experts it is not sent to (0: `total`)
    # the layers grouped by identical parameter rows (one group when all alike): blocks that differ only in what has
    # no parameter of its own (a RoPE base, a window, a residual scale) are one group, its `varies` saying what differs
    groups: tuple[LayerGroup, ...] = ()
    group_counts: tuple[int, ...] = ()  # one block of each group
    buffers: int = 0  # values stored beside the parameters but not counted in any total (router selection bias)

    @property
    def active_total(self) -> int:
        return self.active or self.total

    @property
    def layers_differ(self) -> bool:
        return len(self.groups) > 1

    @property
    def n_layers(self) -> int:
        return self.config.model.n_layers if self.config.model else 1


# ----------------------------------------------------------------------------- the formula


def symbol_values(config: Config | BlockConfig) -> dict[str, int]:
    b = config.block if isinstance(config, Config) else config
    m = config.model if isinstance(config, Config) else None
    values = {"d": b.d_model, "h": b.n_heads, "h_kv": b.n_kv_heads, "d_h": b.head_dim, "d_ff": b.d_ff,
              "d_p": b.per_layer_input}
    if b.altup:  # Gemma 3n's AltUp streams and its LAuReL rank
        values["A"] = b.altup
    if b.laurel_rank:
        values["r_L"] = b.laurel_rank
    if b.moe is not None:
        values.update(E=b.moe.n_experts, k=b.moe.top_k, d_e=b.moe.d_expert, d_s=b.moe.d_shared)
    if b.mla is not None:
        values.update(r_q=b.mla.q_lora_rank, r_kv=b.mla.kv_lora_rank, d_nope=b.mla.qk_nope_head_dim,
                      d_rope=b.mla.qk_rope_head_dim, d_v=b.mla.v_head_dim)
        if b.mla.index_heads:
            values.update(h_I=b.mla.index_heads, d_I=b.mla.index_head_dim)
    elif b.value_dim != b.head_dim:  # plain attention's narrower values (MiMo-V2-Flash)
        values["d_v"] = b.value_dim
    if b.linear_attention is not None:
        n = b.linear_attention
        values.update(h_k=n.key_heads, d_k=n.key_head_dim, h_v=n.value_heads, d_v=n.value_head_dim, K=n.conv_kernel)
    if b.short_conv is not None:
        values.update(K=b.short_conv.kernel)
    if b.moa is not None:
        values.update(E_a=b.moa.n_experts, k_a=b.moa.top_k)
    if isinstance(b.mamba, Mamba1):
        values.update(d_in=b.mamba.d_inner, R=b.mamba.dt_rank, N=b.mamba.d_state, K=b.mamba.conv_kernel)
    elif b.mamba is not None:
        values.update(h_s=b.mamba.n_heads, p=b.mamba.head_dim, N=b.mamba.d_state, g=b.mamba.n_groups,
                      K=b.mamba.conv_kernel)
    if b.shared is not None:
        values.update(_shared_values(b.shared))
    if m is not None:
        values.update(V=m.vocab_size, L=m.n_layers, P=m.max_positions + m.position_offset)
    return values


def _shared_values(s: SharedBlock) -> dict[str, int]:
    return {"h_a": s.n_heads, "h_akv": s.n_kv_heads, "d_a": s.head_dim, "d_fa": s.d_ff, "r": s.adapter_rank}


@dataclass(frozen=True)
class Row:
    """A formula row before evaluation: weight and bias polynomials plus its parameter keys."""

    name: str
    label: str
    weights: Poly
    biases: Poly
    keys: tuple[str, ...]
    active: Poly | None = None  # the weights and biases one token uses, when not all of them (routed experts: k of E)
    buffer: bool = False  # stored but not a parameter (no total counts it)


def block_formula(b: BlockConfig) -> list[Row]:
    """The hand count of one block, row by row in forward order."""
    q_width = ("d",) if b.n_heads * b.head_dim == b.d_model else ("h", "d_h")
    kv_width = ("d",) if b.n_kv_heads * b.head_dim == b.d_model else ("h_kv", "d_h")
    narrow = b.mla is None and b.value_dim != b.head_dim  # MiMo-V2-Flash: values d_v wide, not d_h
    v_width, heads_width = (("h_kv", "d_v"), ("h", "d_v")) if narrow else (kv_width, q_width)
    no = Poly()

    def norm(prefix: str, label: str) -> Row:  # a scale gamma (unless norm_scale is off) and a shift beta
        shift = term(1, "d") if b.bias.norm else no
        return Row(prefix, label, term(1, "d") if b.norm_scale else no, shift, (f"{prefix}_gamma", f"{prefix}_beta"))

    def proj(name: str, label: str, width: tuple[str, ...], bias: bool, out: bool = False) -> Row:
        matrix = term(1, *width, "d")
        bias_poly = (term(1, "d") if out else term(1, *width)) if bias else no
        letter = name[-1]
        return Row(name, label, matrix, bias_poly, (f"w_{letter}", f"b_{letter}"))

    rows = [
        norm("ln1", f"{_norm_name(b)} 1" if b.placement != "parallel_shared" else
             f"{_norm_name(b)} (shared by attention and MLP)"),
    ]
    if b.parts == "mlp":  # a layer of its MLP alone: LN 2 and the MLP rows below
        rows = []
    elif b.mamba is not None or b.short_conv is not None:
        rows.extend(_short_conv_rows(b) if b.mamba is None else
                    _mamba1_rows(b) if isinstance(b.mamba, Mamba1) else _mamba_rows(b))
        if b.parts == "mixer":  # (Zamba2: and this layer's use of a shared block)
            return rows + _shared_use_rows(b)
    if b.parts == "mlp" or (b.parts != "hybrid" and (b.mamba is not None or b.short_conv is not None)):
        pass  # no attention (hybrid: Falcon-H1's attention beside its Mamba-2 mixer, the rows below)
    elif b.mla is not None:
        rows.extend(_latent_attention_rows(b))
    elif b.linear_attention is not None:
        rows.extend(_kda_rows() if b.linear_attention.per_channel else _deltanet_rows(b.linear_attention))
    elif b.lightning is not None:
        rows.extend(_lightning_rows(q_width))
    elif b.moa is not None:
        rows.extend(_moa_rows(b))
    else:
        rows.extend([
            proj("attn.q", "Q projection", q_width, b.bias.qkv),
            *([] if b.kv_from >= 0 else [proj("attn.k", "K projection (its output the values too)" if b.k_eq_v
                                              else "K projection", kv_width, b.bias.qkv)]),
            *([] if b.kv_from >= 0 or b.k_eq_v else [proj("attn.v", "V projection", v_width, b.bias.qkv)]),
            proj("attn.o", "output projection W_O", heads_width, b.bias.out, out=True),
        ])
        if b.attention_gate and b.gate_per_head:  # one softplus (or σ) gate a head: h wide
            rows.insert(-1, Row("attn.gate", f"attention output gate ({'σ' if b.gate_sigmoid else 'softplus'}, one per "
                                             f"head)", term(1, "h", "d"),
                                term(1, "h") if b.bias.qkv else no, ("w_attn_gate", "b_attn_gate")))
        elif b.attention_gate:  # σ(x·W_gate) (or its softplus) times each head's output: as wide as Q
            rows.insert(-1, Row("attn.gate", f"attention output gate "
                                             f"({'σ' if b.attention_gate_form == 'sigmoid' else 'softplus'}, per head)",
                                term(1, *q_width, "d"), (term(1, *q_width) if b.bias.qkv else no)
                                + (term(1, "h") if b.attention_gate_head_bias else no),  # Beam: one bias a head
                                ("w_attn_gate", "b_attn_gate", "b_attn_gate_head")))
        if b.sub_norms:  # BitNet: the heads' output normalised before W_O, h·d_h features
            rows.insert(-1, _sub_norm(b, "attn.sub_norm", f"{_norm_name(b)} of the heads' output (before W_O)", q_width))
        if b.ngpt is not None:  # nGPT: the queries' s_qk and the gate's s_gate, one scale a channel each
            rows.insert(-1, Row("attn.ngpt_scales", "nGPT query and gate scales (s_qk, s_gate)", term(2, *q_width), no,
                                ("s_qk", "s_gate")))
        if b.differential is not None:  # DiffLlama: λ = exp(λ_q1·λ_k1) − exp(λ_q2·λ_k2) + λ_init, four d_h vectors
            rows.append(Row("attn.lambda", "differential attention's λ_q1, λ_k1, λ_q2, λ_k2", term(4, "d_h"), no,
                            ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2")))
    attends = b.parts == "hybrid" or (b.mamba is None and b.short_conv is None and b.lightning is None)  # sinks and q/k norms: attention's
    if b.attention_sinks and attends:  # one logit per query head, joined to each row's softmax
        rows.append(Row("attn.sinks", "attention sinks (a logit per head)", term(1, "h"), no, ("sinks",)))
    if b.qk_norm not in ("none", "head_unscaled") and attends:  # a scale (and shift) per feature of each head, or of the whole projection
        for letter, width in (("q", q_width), ("k", kv_width))[:1 if b.kv_from >= 0 else 2]:
            features = {"head": ("d_h",), "projection": width,
                        "each_head": ("h" if letter == "q" else "h_kv", "d_h")}[b.qk_norm]
            shift = term(1, *features) if b.bias.qk_norm else no  # (by default as bias.norm)
            label = f"{letter.upper()} norm " + {"head": "(per head)", "projection": "(all heads)",
                                                  "each_head": "(per head, weights of each head)"}[b.qk_norm]
            rows.append(Row(f"attn.{letter}_norm", label, term(1, *features) if b.norm_scale else no, shift,
                            (f"{letter}_norm_gamma", f"{letter}_norm_beta")))
    if b.cross_attention:  # Mllama: a tanh gate on the attention branch (the layer skipped without images)
        rows.append(Row("attn.cross_gate", "attention branch's tanh gate (cross-attention layer, skipped in a "
                                           "text-only pass)", term(1), no, ("cross_attn_gate",)))
    if b.parts == "mixer":  # a layer of its attention alone
        return rows
    if b.laurel_rank:  # Gemma 3n's LAuReL on LN1's output: d → r_L → d, then a norm of d
        rows += [Row("laurel.left", "LAuReL down (d → r_L)", term(1, "d", "r_L"), no, ("laurel_left",)),
                 Row("laurel.right", "LAuReL up (r_L → d)", term(1, "d", "r_L"), no, ("laurel_right",)),
                 replace(norm("laurel_norm", f"{_norm_name(b)} after LAuReL"), name="laurel.norm")]
    if b.sandwich:  # Gemma 2/3: the branch outputs are normalised too (kept beside LN 2, before the MLP rows)
        mixer = "the short conv" if b.short_conv is not None else "attention"  # LFM3's conv layers are sandwiched too
        rows.append(norm("ln1_post", f"{_norm_name(b)} after {mixer}"))
    if b.placement != "parallel_shared":  # a shared norm: attention and MLP both read LN1's output
        rows.append(norm("ln2", f"{_norm_name(b)} 2"))
    if b.sandwich:
        rows.append(norm("ln2_post", f"{_norm_name(b)} after the MLP"))
    if b.ngpt is not None:  # nGPT: the two residual rates λ_1, λ_2 (d each)
        rows.append(Row("ln_lambda", "nGPT residual rates (λ_1, λ_2, beside the norms)", term(2, "d"), no, ("lambda_1", "lambda_2")))
    if b.moe is not None:
        return rows + _dense_beside(b) + moe_formula(b) + _after_the_mlp(b)
    return rows + _dense_mlp(b) + _after_the_mlp(b)


def _shared_use_rows(b: BlockConfig) -> list[Row]:
    """What a layer using a shared block (Zamba2) holds of its own: each LoRA adapter A (in·r) and B (r·out), on Q,
    K and V (their input [h | x_0], 2d) with attention_adapters and on the MLP's gate | up (one A, two B); and the
    projection of the block's output (d²). The shared block's own weights are the model's (counted once there)."""
    s, no = b.shared, Poly()
    if s is None:
        return []
    rows = []
    if s.attention_adapters:
        for x, heads in (("q", "h_a"), ("k", "h_akv"), ("v", "h_akv")):
            rows.append(Row(f"shared.adapter_{x}", f"{x.upper()} adapter of this use (2d → r → out)",
                            term(2, "d", "r") + term(1, "r", heads, "d_a"), no, (f"adapter_{x}_a", f"adapter_{x}_b")))
    rows += [Row("shared.adapter_mlp", "gate | up adapter of this use (d → r → 2·d_ff)",
                 term(1, "d", "r") + term(2, "r", "d_fa"), no, ("adapter_mlp_a", "adapter_gate_b", "adapter_up_b")),
             Row("shared.out", "projection of the shared block's output (this layer's own)", term(1, "d", "d"), no,
                 ("w_shared_out",))]
    return rows


def _after_the_mlp(b: BlockConfig) -> list[Row]:
    """Gemma 4's per-layer input (its gate d·d_p, its projection d_p·d, its norm d) and the stored layer scalar."""
    rows = []
    if b.per_layer_input:
        rows += [Row("ple.gate", "per-layer input gate (activated)", term(1, "d", "d_p"), Poly(), ("ple_gate",)),
                 Row("ple.proj", "per-layer input projection", term(1, "d", "d_p"), Poly(), ("ple_proj",)),
                 Row("ln_ple", f"{_norm_name(b)} after the per-layer input", term(1, "d") if b.norm_scale else Poly(),
                     term(1, "d") if b.bias.norm else Poly(), ("ple_norm_gamma", "ple_norm_beta"))]
    if b.cross_attention:  # Mllama: the MLP branch's tanh gate
        rows.append(Row("mlp.cross_gate", "MLP branch's tanh gate (cross-attention layer)", term(1), Poly(),
                        ("cross_mlp_gate",)))
    if b.layer_scalar:
        rows.append(Row("layer_scalar", "layer scalar (buffer, not a parameter)", term(1), Poly(), ("layer_scalar",),
                        buffer=True))
    if b.altup:  # Gemma 3n's AltUp over A streams: the router of A modalities and its norm, the A² prediction
        # coefficients from them (A·A²), the A correction coefficients (A·A), the corrected output's scale d
        rows += [Row("altup.router", "AltUp router (d → A modalities)", term(1, "d", "A"), Poly(), ("altup_router",)),
                 Row("altup.router_norm", f"AltUp router's {_norm_name(b)}", term(1, "d") if b.norm_scale else Poly(),
                     term(1, "d") if b.bias.norm else Poly(), ("altup_router_norm_gamma", "altup_router_norm_beta")),
                 Row("altup.predict", "AltUp prediction coefficients (A → A²)", term(1, "A", "A", "A"), Poly(),
                     ("altup_predict",)),
                 Row("altup.correct", "AltUp correction coefficients (A → A)", term(1, "A", "A"), Poly(),
                     ("altup_correct",)),
                 Row("altup.scale", "AltUp corrected output's scale", term(1, "d"), Poly(), ("altup_scale",))]
    return rows


def _sub_norm(b: BlockConfig, name: str, label: str, features: tuple[str, ...]) -> Row:
    """BitNet's norm over `features` (the heads' output or the MLP's hidden), not d."""
    shift = term(1, *features) if b.bias.norm else Poly()
    key = name.replace(".", "_")
    return Row(name, label, term(1, *features) if b.norm_scale else Poly(), shift, (f"{key}_gamma", f"{key}_beta"))


def _dense_beside(b: BlockConfig) -> list[Row]:
    """Gemma 4's dense MLP beside the experts, with the norm of its output, and the experts' two norms."""
    if b.moe is None or not b.moe.beside_dense:
        return []
    name = _norm_name(b)

    def norm(prefix: str, label: str) -> Row:
        return Row(prefix, label, term(1, "d") if b.norm_scale else Poly(), term(1, "d") if b.bias.norm else Poly(),
                   (f"{prefix}_gamma", f"{prefix}_beta"))

    return _dense_mlp(b) + [norm("ln2_post1", f"{name} after the dense MLP"), norm("ln2b", f"{name} before the experts"),
                            norm("ln2_post2", f"{name} after the experts")]


def _dense_mlp(b: BlockConfig) -> list[Row]:
    no, rows = Poly(), []
    mlp_bias = b.bias.mlp
    if b.gated:
        rows.append(Row("mlp.gate", "MLP gate (w_gate, activated)", term(1, "d", "d_ff"),
                        term(1, "d_ff") if mlp_bias else no, ("w_gate", "b_gate")))
    rows.append(Row("mlp.up", "MLP up (w_up, the gate's partner)" if b.gated else "MLP up (w_up, expansion)",
                    term(1, "d", "d_ff"), term(1, "d_ff") if mlp_bias else no, ("w_up", "b_up")))
    if b.sub_norms:  # BitNet: the MLP's hidden normalised before W_down, d_ff features
        rows.append(_sub_norm(b, "mlp.sub_norm", f"{_norm_name(b)} of the MLP's hidden (before W_down)", ("d_ff",)))
    if b.ngpt is not None:  # nGPT: the gate's and the up projection's per-channel scales
        rows.append(Row("mlp.ngpt_scales", "nGPT gate and up scales (s_uv)", term(2, "d_ff"), no,
                        ("s_uv_gate", "s_uv_up")))
    rows.append(Row("mlp.down", "MLP down (w_down, contraction)", term(1, "d", "d_ff"), term(1, "d") if mlp_bias else no,
                    ("w_down", "b_down")))
    act = function_of(b.activation)
    if act.params:  # xIELU: a_p and a_n, one number each per layer
        rows.append(Row("mlp.act", f"{b.activation} scalars ({', '.join(act.params)})", term(len(act.params)), no,
                        tuple(f"act_{name}" for name in act.params)))
    if act.buffers:  # and its β and ε, stored but never trained
        names = tuple(name for name, _ in act.buffers)
        rows.append(Row("mlp.act_buffers", f"{b.activation} constants ({', '.join(names)}; buffers, not parameters)",
                        term(len(names)), no, tuple(f"act_{name}" for name in names), buffer=True))
    return rows


def moe_formula(b: BlockConfig) -> list[Row]:
    """A mixture of experts: router d·E (+ E for its bias), E experts of (2 or 3)·d·d_e (+ (1 or 2)·d_e + d
    with biases) of which a token uses k, the shared expert (2 or 3)·d·d_s and its d-wide gate; the E-wide
    selection bias a buffer row."""
    moe = b.moe
    assert moe is not None
    matrices = 3 if b.gated else 2
    names = ("w_gate", "w_up", "w_down") if b.gated else ("w_up", "w_down")
    if b.bias.mlp:
        names += ("b_gate", "b_up", "b_down") if b.gated else ("b_up", "b_down")

    def expert_biases(count: str | None, width: str) -> Poly:  # (1 or 2)·d_e + d per expert, times E or k
        if not b.bias.mlp or (count and not moe.routed_bias):  # DeepSeek-V2: the shared expert's alone
            return Poly()
        per = ((count,) if count else ())
        return term(matrices - 1, *per, width) + term(1, *per, "d")

    rows = [Row("mlp.router", "router", term(1, "d", "E"), term(1, "E") if moe.logit_bias else Poly(),
                ("router", "b_router"))]
    if moe.router_norm:  # Gemma 4: the router input's learned scale
        rows.append(Row("mlp.router_scale", "router input scale", term(1, "d"), Poly(), ("router_scale",)))
    if moe.expert_scale:
        rows.append(Row("mlp.expert_scale", "per-expert scale of the routing weights", term(1, "E"), Poly(),
                        ("expert_scale",)))
    if moe.selection_bias_frozen:  # ERNIE 4.5's e_score_correction_bias: a parameter no gradient reaches
        rows.append(Row("mlp.router_bias", "router selection bias (a parameter, never trained)", term(1, "E"),
                        Poly(), ("router_bias",)))
    elif moe.selection_bias:  # transformers' DeepseekV3TopkRouter.e_score_correction_bias: a buffer
        rows.append(Row("mlp.router_bias", "router selection bias (buffer, not a parameter)", term(1, "E"), Poly(),
                        ("router_bias",), buffer=True))
    rows += [Row("mlp.experts", f"{moe.n_experts} routed experts (top-{moe.top_k} per token)",
                 term(matrices, "E", "d", "d_e"), expert_biases("E", "d_e"),
                 tuple(f"experts.{e}.{n}" for e in range(moe.n_experts) for n in names
                       if moe.routed_bias or not n.startswith("b_")),
                 active=term(matrices, "k", "d", "d_e") + expert_biases("k", "d_e"))]
    if moe.out_bias:  # JetMoE: one bias on the mixture's output
        rows.append(Row("mlp.moe_bias", "the mixture's output bias", Poly(), term(1, "d"), ("moe_bias",)))
    if moe.d_shared:
        rows.append(Row("mlp.shared", "shared expert", term(matrices, "d", "d_s"), expert_biases(None, "d_s"),
                        tuple(f"shared_{n}" for n in names)))
        if moe.shared_gate:
            rows.append(Row("mlp.shared_gate", "shared expert gate", term(1, "d"), Poly(), ("shared_gate",)))
    if moe.out_norm:  # A.X-K1: a norm of the block's kind on the mixture's output, d wide
        rows.append(Row("mlp.moe_norm", f"{_norm_name(b)} of the mixture's output",
                        term(1, "d") if b.norm_scale else Poly(), term(1, "d") if b.bias.norm else Poly(),
                        ("moe_norm_gamma", "moe_norm_beta")))
    return rows


def _latent_attention_rows(b: BlockConfig) -> list[Row]:
    """Multi-head latent attention (DeepSeek-V2 §2.1): every head's query is d_nope + d_rope wide,
    its key the same (d_nope from the latent, d_rope shared), its value d_v. The two down-projections
    carry block.bias.qkv's bias; the up-projections have none."""
    no, m = Poly(), b.mla
    assert m is not None
    per_head_qk = term(1, "h", "d_nope") + term(1, "h", "d_rope")

    def latent_norm(name: str, label: str, rank: str) -> Row:
        return Row(f"attn.{name}", label, term(1, rank), term(1, rank) if b.bias.norm else no,
                   (f"{name}_gamma", f"{name}_beta"))

    rows = []
    if m.q_lora_rank:
        rows += [Row("attn.q_a", "Q down-projection to its latent", term(1, "d", "r_q"),
                     term(1, "r_q") if b.bias.qkv else no, ("w_q_a", "b_q_a")),
                 latent_norm("q_a_norm", f"Q latent {_norm_name(b)}", "r_q"),
                 Row("attn.q_b", "Q up-projection (every head's d_nope + d_rope)",
                     Poly({tuple(sorted(("r_q",) + k)): c for k, c in per_head_qk.items()}), no, ("w_q_b",))]
    else:
        rows.append(Row("attn.q", "Q projection (every head's d_nope + d_rope)",
                        Poly({tuple(sorted(("d",) + k)): c for k, c in per_head_qk.items()}), no, ("w_q",)))
    rows += [Row("attn.kv_a", "K/V down-projection (latent r_kv + shared RoPE key d_rope)",
                 term(1, "d", "r_kv") + term(1, "d", "d_rope"),
                 term(1, "r_kv") + term(1, "d_rope") if b.bias.qkv else no, ("w_kv_a", "b_kv_a")),
             latent_norm("kv_a_norm", f"K/V latent {_norm_name(b)}", "r_kv"),
             Row("attn.kv_b", "K/V up-projection (every head's K d_nope and V d_v)",
                 term(1, "r_kv", "h", "d_nope") + term(1, "r_kv", "h", "d_v"), no, ("w_kv_b",)),
             Row("attn.o", "output projection W_O", term(1, "h", "d_v", "d"), term(1, "d") if b.bias.out else no,
                 ("w_o", "b_o"))]
    if m.own_indexer:  # DeepSeek-V3.2 §2.1: the lightning indexer (in transformers: self_attn.indexer)
        rows += [Row("attn.idx_q", "indexer Q projection from the query latent (h_I heads of d_I)",
                     term(1, "r_q", "h_I", "d_I"), no, ("idx_w_q",)),
                 Row("attn.idx_k", "indexer K projection (one d_I key per token)", term(1, "d", "d_I"), no,
                     ("idx_w_k",)),
                 Row("attn.idx_k_norm", "indexer key LayerNorm", term(1, "d_I"), term(1, "d_I"),
                     ("idx_k_norm_gamma", "idx_k_norm_beta")),
                 Row("attn.idx_weights", "indexer head weights (one per head and token)", term(1, "d", "h_I"), no,
                     ("idx_w_weights",))]
    return rows
def _moa_rows(b: BlockConfig) -> list[Row]:
    """JetMoE's mixture of attention heads (ModuleFormer §2, JetMoE §2.2): a router d·E_a; E_a attention experts,
    each a query projection d → h_kv·d_h and an output projection h_kv·d_h → d, of which a token uses k_a; one K/V
    projection d → 2·h_kv·d_h shared by all experts; a bias d on the mixture's output."""
    no = Poly()
    m = b.moa
    assert m is not None
    experts = tuple(f"attn_experts.{e}.{n}" for e in range(m.n_experts) for n in ("w_q", "w_o"))
    return [Row("attn.moa_router", f"attention router (top-{m.top_k} of {m.n_experts} experts per token)",
                term(1, "d", "E_a"), no, ("moa_router",)),
            Row("attn.experts", f"{m.n_experts} attention experts: W_q and W_o each (top-{m.top_k} per token)",
                term(2, "E_a", "d", "h_kv", "d_h"), no, experts, active=term(2, "k_a", "d", "h_kv", "d_h")),
            Row("attn.kv", "K and V projection (shared by the experts)", term(2, "d", "h_kv", "d_h"), no,
                ("w_k", "w_v")),
            Row("attn.moa_bias", "the mixture's output bias", no, term(1, "d"), ("moa_bias",))]


def _lightning_rows(width: tuple[str, ...]) -> list[Row]:
    """Lightning attention (blockcli/lightning.py): q, k and v h·d_h wide each (one qkv_proj), the output gate as
    wide, the output RMSNorm's γ over all h·d_h, W_out; no biases. Its decay rates are buffers recomputed from the
    config (transformers' slope_rate and decay tables), not parameters."""
    no = Poly()
    return [Row("attn.la_qkv", "lightning: q | k | v projection (qkv_proj)", term(3, *width, "d"), no,
                ("la_q", "la_k", "la_v")),
            Row("attn.la_gate", "lightning: output gate", term(1, *width, "d"), no, ("la_gate",)),
            Row("attn.la_norm", "lightning: output RMSNorm (over h·d_h)", term(1, *width), no, ("la_norm_gamma",)),
            Row("attn.la_out", "lightning: output projection W_out", term(1, *width, "d"), no, ("la_out",))]


def _deltanet_rows(m: GatedDeltaNet) -> list[Row]:
    """The Gated DeltaNet token mixer (blockcli/deltanet.py): q and k h_k·d_k wide, v and the output gate z
    h_v·d_v, the write strength b and the decay input a one per value head; the short conv's K taps on each of
    q | k | v's channels (no bias); dt_bias and A_log per value head; the output RMSNorm's γ over d_v; W_O."""
    no = Poly()
    return [Row("attn.dn_q", "linear attention: q projection", term(1, "d", "h_k", "d_k"), no, ("dn_q",)),
            Row("attn.dn_k", "linear attention: k projection", term(1, "d", "h_k", "d_k"), no, ("dn_k",)),
            Row("attn.dn_v", "linear attention: v projection", term(1, "d", "h_v", "d_v"), no, ("dn_v",)),
            Row("attn.dn_z", "linear attention: output gate z", term(1, "d", "h_v", "d_v"), no, ("dn_z",)),
            Row("attn.dn_b", "linear attention: write strength β (b)", term(1, "d", "h_v"), no, ("dn_b",)),
            Row("attn.dn_a", "linear attention: decay input (a)", term(1, "d", "h_v"), no, ("dn_a",)),
            Row("attn.dn_conv", "linear attention: short conv" + ("s of q, k and v" if m.split_conv else
                                                                  " over q | k | v"),
                term(2, "K", "h_k", "d_k") + term(1, "K", "h_v", "d_v"), no,
                ("dn_q_conv", "dn_k_conv", "dn_v_conv") if m.split_conv else ("dn_conv",)),
            Row("attn.dn_decay", "linear attention: dt_bias and A_log", term(2, "h_v"), no, ("dn_dt_bias", "dn_A_log")),
            Row("attn.dn_norm", "linear attention: output RMSNorm (over d_v)", term(1, "d_v"), no, ("dn_norm_gamma",)),
            Row("attn.dn_out", "linear attention: output projection W_O", term(1, "h_v", "d_v", "d"), no, ("dn_out",))]


def _kda_rows() -> list[Row]:
    """Kimi Delta Attention (blockcli/deltanet.py, decay: channel; h_k = h_v, d_k = d_v): q, k, v as the Gated
    DeltaNet's; the decay input and the output gate each low-rank, d → d_k → h·d_k (no z, no a); b one per head;
    the short conv; dt_bias per key channel and A_log per head; the output RMSNorm's γ over d_v; W_O."""
    no = Poly()
    return [Row("attn.dn_q", "linear attention: q projection", term(1, "d", "h_k", "d_k"), no, ("dn_q",)),
            Row("attn.dn_k", "linear attention: k projection", term(1, "d", "h_k", "d_k"), no, ("dn_k",)),
            Row("attn.dn_v", "linear attention: v projection", term(1, "d", "h_v", "d_v"), no, ("dn_v",)),
            Row("attn.dn_f", "linear attention: decay input (low-rank, through d_k)",
                term(1, "d", "d_k") + term(1, "d_k", "h_k", "d_k"), no, ("dn_f_a", "dn_f_b")),
            Row("attn.dn_b", "linear attention: write strength β (b)", term(1, "d", "h_v"), no, ("dn_b",)),
            Row("attn.dn_g", "linear attention: output gate (low-rank, through d_v)",
                term(1, "d", "d_v") + term(1, "d_v", "h_v", "d_v"), no, ("dn_g_a", "dn_g_b")),
            Row("attn.dn_conv", "linear attention: short convs of q, k and v",
                term(2, "K", "h_k", "d_k") + term(1, "K", "h_v", "d_v"), no, ("dn_q_conv", "dn_k_conv", "dn_v_conv")),
            Row("attn.dn_decay", "linear attention: dt_bias (per key channel) and A_log (per head)",
                term(1, "h_k", "d_k") + term(1, "h_v"), no, ("dn_dt_bias", "dn_A_log")),
            Row("attn.dn_norm", "linear attention: output RMSNorm (over d_v)", term(1, "d_v"), no, ("dn_norm_gamma",)),
            Row("attn.dn_out", "linear attention: output projection W_O", term(1, "h_v", "d_v", "d"), no, ("dn_out",))]


def _mamba_rows(b: BlockConfig) -> list[Row]:
    """A Mamba-2 mixer (the SSD paper's §7 block): the in-projection to z and x (h_s·p each), B and C (g·N each)
    and dt (h_s); the depthwise conv over x, B and C (K taps per channel, a bias each); dt_bias, A_log and D per
    head; the gated RMSNorm's scale over h_s·p; the out-projection. The projections' biases with proj_bias."""
    m, no = b.mamba, Poly()
    assert m is not None
    width = term(2, "h_s", "p") + term(2, "g", "N") + term(1, "h_s")  # z | x B C | dt
    channels = term(1, "h_s", "p") + term(2, "g", "N")  # x | B | C
    return [Row("attn.ssm_in", "SSM in-projection (z, x, B, C, dt)",
                Poly({tuple(sorted(("d",) + k)): c for k, c in width.items()}), width if m.proj_bias else no,
                ("w_ssm_in", "b_ssm_in")),
            Row("attn.ssm_conv", "causal conv over x, B, C (K taps per channel)",
                Poly({tuple(sorted(("K",) + k)): c for k, c in channels.items()}), channels if m.conv_bias else no,
                ("ssm_conv", "b_ssm_conv")),
            Row("attn.ssm_heads", "per SSM head: dt_bias, A_log, D", term(3, "h_s"), no,
                ("ssm_dt_bias", "ssm_A_log", "ssm_D")),
            *([Row("attn.ssm_norm", "gated RMSNorm scale" if m.norm == "gated" else "RMSNorm scale (before the gate)",
                   term(1, "h_s", "p"), no, ("ssm_norm_gamma",))] if m.norm != "none" else []),
            Row("attn.ssm_out", "SSM out-projection", term(1, "h_s", "p", "d"), term(1, "d") if m.has_out_bias else no,
                ("w_ssm_out", "b_ssm_out"))]


def _mamba1_rows(b: BlockConfig) -> list[Row]:
    """A Mamba-1 mixer (Gu & Dao 2023, §3.4): the in-projection to x and z (d_in each); the depthwise conv over x (K
    taps per channel, a bias each); the x-projection to δ (R), B and C (N each), without bias; Δ's projection from R
    to d_in with its bias; A_log (N per channel) and D; the learned RMSNorm scales of δ, B and C (Jamba); the
    out-projection. The in- and out-projections' biases with proj_bias."""
    m, no = b.mamba, Poly()
    assert isinstance(m, Mamba1)
    rows = [Row("attn.ssm_in", "SSM in-projection (x, z)", term(2, "d", "d_in"),
                term(2, "d_in") if m.proj_bias else no, ("w_ssm_in", "b_ssm_in")),
            Row("attn.ssm_conv", "causal conv over x (K taps per channel)", term(1, "K", "d_in"),
                term(1, "d_in") if m.conv_bias else no, ("ssm_conv", "b_ssm_conv")),
            Row("attn.ssm_x", "x-projection (δ, B, C)", term(1, "d_in", "R") + term(2, "d_in", "N"), no,
                ("w_ssm_x",)),
            Row("attn.ssm_dt", "Δ projection (rank R to d_in)", term(1, "R", "d_in"), term(1, "d_in"),
                ("w_ssm_dt", "b_ssm_dt")),
            Row("attn.ssm_channels", "per channel: A_log (N), D", term(1, "d_in", "N") + term(1, "d_in"), no,
                ("ssm_A_log", "ssm_D"))]
    if m.bc_norm == "learned":
        rows.append(Row("attn.ssm_bc_norm", "RMSNorm scales of δ, B, C", term(1, "R") + term(2, "N"), no,
                        ("ssm_dt_norm", "ssm_B_norm", "ssm_C_norm")))
    rows.append(Row("attn.ssm_out", "SSM out-projection", term(1, "d_in", "d"), term(1, "d") if m.proj_bias else no,
                    ("w_ssm_out", "b_ssm_out")))
    return rows


def _short_conv_rows(b: BlockConfig) -> list[Row]:
    """A gated short convolution (LFM2): the in-projection to b, c and x (3·d²), the depthwise conv (K taps per
    channel), the out-projection (d²); each with a bias (3·d, d, d) with short_conv.bias."""
    c, no = b.short_conv, Poly()
    assert c is not None
    return [Row("attn.conv_in", "conv in-projection (b, c, x)", term(3, "d", "d"), term(3, "d") if c.bias else no,
                ("w_conv_in", "b_conv_in")),
            Row("attn.short_conv", "causal conv over T (K taps per channel)", term(1, "K", "d"),
                term(1, "d") if c.bias else no, ("short_conv", "b_short_conv")),
            Row("attn.conv_out", "conv out-projection", term(1, "d", "d"), term(1, "d") if c.bias else no,
                ("w_conv_out", "b_conv_out"))]


def _norms_label(n: int) -> str:
    """'one norm', 'two norms', 'four norms' (sandwich): the block's norm subtotal row."""
    return f"{ {1: 'one', 2: 'two', 4: 'four'}.get(n, str(n))} norm{'s' if n != 1 else ''}"


def _norm_name(b: BlockConfig) -> str:
    return ({"layernorm": "LayerNorm", "l2norm": "L2 norm"}.get(b.norm, "RMSNorm")) + ("" if b.norm_scale or b.bias.norm else
                                                                   " (parameter-free)")


Formula = Callable[[BlockConfig], list[Row]]


# ----------------------------------------------------------------------------- the breakdown


def count_parameters(config: Config, formula: Formula = block_formula, checkpoint: Mapping[str, int] | None = None,
                     checkpoint_info: Mapping[str, object] | None = None) -> ParameterCount:
    """Exact breakdown for one block, and for the whole model when the config has one: one set of
    block rows per group of identical layers.

    The closed form is reconciled with the declared shapes the block is built from (blockcli.shapes;
    `DecoderBlock` accepts no other parameter set), so nothing is allocated. `checkpoint` (model key →
    stored size, as `blockcli.checkpoint.stored_sizes` reads them from a checkpoint's headers) makes the
    reconciliation against those tensors instead, row by row and layer by layer; `checkpoint_info`
    describes the files.
    """
    if checkpoint is not None:
        return _with_checkpoint(count_parameters(config, formula), formula, checkpoint, checkpoint_info or {})
    mismatches: list[str] = []
    config_groups = config.layer_groups()
    alike: dict[tuple, list[int]] = {}  # one block's rows → the config groups that have exactly these rows
    blocks: list[tuple[list[Component], tuple[Poly, Poly], int, int, int]] = []
    for index, group in enumerate(config_groups):
        one = config.for_layer(group.layers[0])
        tag = f"{layer_list(group.layers)}: " if len(config_groups) > 1 else ""
        rows_, (block_w, block_b), idle, stored_only = _block_rows(one, formula, mismatches, tag)
        n = evaluate(block_w + block_b, symbol_values(one))
        key = (n, idle, stored_only, tuple((c.name, c.label, c.shape, c.weights, c.biases, c.expression, c.kind,
                                            c.active) for c in rows_))
        if key not in alike:
            blocks.append((rows_, (block_w, block_b), n, idle, stored_only))
        alike.setdefault(key, []).append(index)
    groups = [_merged([config_groups[i] for i in members]) for members in alike.values()]
    components: list[Component] = []
    polys = [b[1] for b in blocks]
    per_group = [b[2] for b in blocks]
    unused = [b[3] for b in blocks]  # per group: one block's parameters a token does not use (routed experts)
    buffers = [b[4] for b in blocks]  # per group: one block's buffers (stored, not parameters)
    for index, (rows_, *_) in enumerate(blocks):
        components.extend(replace(c, group=index if len(groups) > 1 else None) for c in rows_)
    per_block = per_group[0]

    total, non_embedding, idle_total, buffer_total = per_block, per_block, unused[0], buffers[0]
    if config.model is not None:
        model_rows, total, non_embedding = _model_rows(config, groups, polys, per_group, unused)
        components.extend(model_rows)
        idle_total = sum(n * len(g.layers) for n, g in zip(unused, groups))
        buffer_total = sum(n * len(g.layers) for n, g in zip(buffers, groups))
    declared, declared_buffers = declared_sizes(config)

    reconciled = Reconciliation(total, declared, DECLARED, tuple(mismatches), buffer_total, declared_buffers)
    return ParameterCount(config, tuple(components), per_block, total, non_embedding, reconciled,
                          active=total - idle_total if idle_total else 0, groups=tuple(groups),
                          group_counts=tuple(per_group), buffers=buffer_total)


def _merged(members: list[LayerGroup]) -> LayerGroup:
    """Config groups whose blocks differ only in what has no parameter of its own (a RoPE base, a residual scale),
    as one group of count's: every member's layers, the first's block, the overrides they share, the fields that
    differ among them."""
    if len(members) == 1:
        return members[0]
    first = members[0]
    shared = {k: v for k, v in first.overrides.items() if all(k in m.overrides and m.overrides[k] == v
                                                               for m in members)}
    varies = tuple(dict.fromkeys(k for m in members for k in m.overrides if k not in shared))
    layers = tuple(sorted(i for m in members for i in m.layers))
    return LayerGroup(layers, first.block, shared, varies)


def _block_rows(config: Config, formula: Formula, mismatches: list[str],
                tag: str) -> tuple[list[Component], tuple[Poly, Poly], int, int]:
    """One block's rows and subtotals, its (weights, biases) polynomials, how many of its parameters
    a token does not use (the routed experts it is not sent to), and its buffers (in no subtotal).
    Each row is checked against the block's declared shapes; mismatches are appended, prefixed with `tag`."""
    values = symbol_values(config)
    rows = formula(config.block)
    shapes = block_parameter_shapes(config.block)
    arrays = {k: math.prod(s) for k, s in shapes.items()}
    components: list[Component] = []
    groups = {"attn": (Poly(), Poly()), "mlp": (Poly(), Poly()), "ln": (Poly(), Poly()), "ple": (Poly(), Poly()),
              "shared": (Poly(), Poly()),
              "laurel": (Poly(), Poly()), "altup": (Poly(), Poly())}
    block_w, block_b = Poly(), Poly()
    idle = buffers = 0
    group_idle: dict[str, int] = {}  # what a token does not use, by group: the MLP's experts, attention's (JetMoE)
    for row in rows:
        w, bias = evaluate(row.weights, values), evaluate(row.biases, values)
        active = None if row.active is None else evaluate(row.active, values)
        if active is not None:
            idle += w + bias - active
            group_idle[row.name.split(".")[0]] = group_idle.get(row.name.split(".")[0], 0) + w + bias - active
        measured = sum(arrays.get(k, 0) for k in row.keys)
        if measured != w + bias:
            mismatches.append(f"{tag}{row.name}: formula {w + bias:,} vs arrays {measured:,}")
        text, tensors, copies = _shapes_of(row.keys, config.block, shapes)
        components.append(Component(row.name, row.label, text, w, bias, render(row.weights + row.biases), row.keys,
                                    active=active, kind="buffer" if row.buffer else "tensor", shapes=tensors,
                                    copies=copies))
        if row.buffer:
            buffers += w + bias
            continue
        group_w, group_b = groups["ln" if row.name.startswith("ln") else row.name.split(".")[0]]
        for poly in (group_w, block_w):
            poly.update(row.weights)
        for poly in (group_b, block_b):
            poly.update(row.biases)

    covered = {k for row in rows for k in row.keys}
    mismatches.extend(f"{tag}{k}: array not in the formula" for k in arrays if k not in covered)
    attention = "attention (Q, K, V, O, sinks)" if config.block.attention_sinks else "attention (Q, K, V, O)"
    if isinstance(config.block.mamba, Mamba1):
        attention = "Mamba-1 mixer (in, conv, x, Δ, SSM, out)"
    if config.block.mamba is not None and config.block.parts == "hybrid":
        attention = "Mamba-2 mixer and attention (Q, K, V, O) side by side"
    elif config.block.mamba is not None:
        attention = "Mamba-2 mixer (in, conv, SSM, norm, out)"
    elif config.block.short_conv is not None:
        attention = "short conv (in, conv, out)"
    elif config.block.lightning is not None:
        attention = "lightning attention (qkv, gate, norm, out)"
    elif config.block.differential is not None:
        attention = "differential attention (Q, K, V, O, λ)"
    elif config.block.moa is not None:
        attention = "mixture of attention heads (router, experts' Q and O, shared K/V, bias)"
    elif config.block.linear_attention is not None or config.block.attention_gate:
        attention = (("linear attention (Kimi Delta Attention)" if config.block.linear_attention.per_channel else
                      "linear attention (Gated DeltaNet)") if config.block.linear_attention is not None else
                     "attention (Q, K, V, gate, O)")
    ple = (("per_layer_input", "per-layer input (gate, projection)", groups["ple"]),) \
        if config.block.per_layer_input else ()
    if config.block.shared is not None:  # Zamba2: this use's adapters and projection, beside the mixer
        ple = (("shared_use", f"its use of shared block {config.block.shared.index} (adapters, W_s)",
                groups["shared"]),) + ple
    ple += (("laurel", "LAuReL (down, up, norm)", groups["laurel"]),) if config.block.laurel_rank else ()
    ple += (("altup", "AltUp (router, its norm, coefficients, scale)", groups["altup"]),) if config.block.altup else ()
    mlp_label = "MLP and experts (beside it)" if config.block.moe is not None and config.block.moe.beside_dense else "MLP"
    for name, label, (w, bias) in (("attention", attention, groups["attn"]),
                                   ("mlp", mlp_label, groups["mlp"]), *ple,
                                   ("norms", _norms_label(sum(r.name.startswith("ln") for r in rows)),
                                    groups["ln"]),
                                   ("block", "block total", (block_w, block_b))):
        count = evaluate(w, values) + evaluate(bias, values)
        short = {"attention": "attn"}.get(name, name)
        components.append(Component(name, label, "", evaluate(w, values), evaluate(bias, values),
                                    render(w + bias), kind="total" if name == "block" else "subtotal",
                                    active=(count - idle if idle and name == "block" else
                                            count - group_idle.get(short, 0) if group_idle.get(short) else None)))
    return components, (block_w, block_b), idle, buffers


def _with_checkpoint(result: ParameterCount, formula: Formula, stored: Mapping[str, int],
                     info: Mapping[str, object]) -> ParameterCount:
    """The same breakdown, reconciled with a checkpoint's tensors: every block row in every layer,
    every model-level row, and nothing stored that no row accounts for."""
    config = result.config
    assert config.model is not None
    mismatches: list[str] = []
    covered: set[str] = set()
    for i in range(config.model.n_layers):  # each layer against its own block's rows
        block = config.layer_block(i)
        for row in formula(block):
            expected = evaluate(row.weights + row.biases, symbol_values(block))
            keys = [f"blocks.{i}.{k}" for k in row.keys]
            covered.update(keys)
            found = sum(stored.get(k, 0) for k in keys)
            if found != expected:
                mismatches.append(f"layer {i} {row.name}: formula {expected:,} vs checkpoint {found:,}")
    for c in result.components:
        if c.name.startswith(("embed.", "final_norm", "lm_head", "shared_block.")) or c.name == "altup.out":  # lm_head.project_out too
            covered.update(c.keys)
            found = sum(stored.get(k, 0) for k in c.keys)
            if found != c.count:
                mismatches.append(f"{c.name}: formula {c.count:,} vs checkpoint {found:,}")
    mismatches.extend(f"{k}: stored tensor not in the formula" for k in stored if k not in covered)
    uncounted = {k for k in stored if is_buffer(k) and not counted_buffer(k, config)}
    reconciled = Reconciliation(result.total, sum(n for k, n in stored.items() if k not in uncounted), "checkpoint",
                                tuple(mismatches), result.buffers, sum(n for k, n in stored.items() if k in uncounted))
    return replace(result, reconciled=reconciled, checkpoint=dict(info))


def _model_rows(config: Config, groups: list[LayerGroup], polys: list[tuple[Poly, Poly]],
                per_group: list[int], unused: list[int]) -> tuple[list[Component], int, int]:
    """The model-level rows; `unused[g]`: one block of group g's parameters a token does not use."""
    m, b = config.model, config.block
    assert m is not None
    block_w = block_b = 0
    for group, (w, bias) in zip(groups, polys):
        values = symbol_values(config.for_layer(group.layers[0]))
        block_w += evaluate(w, values) * len(group.layers)
        block_b += evaluate(bias, values) * len(group.layers)
    alike = len({(render(w + bias), n) for (w, bias), n in zip(polys, per_group)}) == 1  # same formula, same value
    expression = (f"L·({render(polys[0][0] + polys[0][1])})" if alike else  # symbols differ per group: numbers
                  " + ".join(f"{len(g.layers)}·{n:,}" for g, n in zip(groups, per_group)))
    d = b.d_model
    e = projected_width(m, d)  # OPT-350m: embeddings e wide, with project_in (e, d) and project_out (d, e)
    v_rows, x = m.vocab_size + m.extra_token_rows, m.extra_token_rows  # Mllama: 8 rows past the vocabulary
    rows = [Component("embed.tokens", "token embedding", str((v_rows, e or d)), v_rows * (e or d), 0,
                      (f"(V + {x})" if x else "V") + ("·e" if e else "·d"), ("wte",), shapes=((v_rows, e or d),))]
    if e:
        rows.append(Component("embed.project_in", f"project in (e = {e:,} → d)", str((e, d)), e * d, 0, "e·d",
                              ("proj_in",), shapes=((e, d),)))
    pos = 0
    if m.positions == "learned":
        P = m.max_positions + m.position_offset
        pos = P * d
        note = "P·d" if not m.position_offset else f"P·d (P = {m.max_positions:,} + offset {m.position_offset})"
        rows.append(Component("embed.positions", "position embedding", str((P, d)), pos, 0, note, ("wpe",),
                              shapes=((P, d),)))
    if m.embedding_norm:  # BLOOM's word_embeddings_layernorm
        rows.append(_model_norm("embed.norm", "embedding", "emb_ln", b))
    ple_table = 0
    if m.per_layer_dim:  # Gemma 4's per-layer embeddings: a table, the projection of the embeddings, its norm
        v_p, width = m.per_layer_vocab or m.vocab_size, m.n_layers * m.per_layer_dim
        ple_table = v_p * width
        rows += [Component("embed.per_layer", "per-layer embeddings (a d_p-wide slice per layer)", str((v_p, width)),
                           ple_table, 0, "V_p·L·d_p", ("ple_wte",), shapes=((v_p, width),)),
                 Component("embed.per_layer_projection", "per-layer projection of the embeddings", str((d, width)),
                           d * width, 0, "d·L·d_p", ("ple_proj",), shapes=((d, width),)),
                 Component("embed.per_layer_norm", f"per-layer projection's {_norm_name(b)}",
                           str((m.per_layer_dim,)), m.per_layer_dim if b.norm_scale else 0,
                           m.per_layer_dim if b.bias.norm else 0, "d_p", ("ple_proj_norm_gamma", "ple_proj_norm_beta"),
                           shapes=((m.per_layer_dim,),))]
    rows += _shared_block_rows(config)
    streams = max(b.altup - 1, 0)  # Gemma 3n: x_0 projected into streams 1 … N−1, each (d, d)
    if streams:
        rows.append(Component("embed.altup", f"AltUp: x_0 into {streams} more streams", f"{streams} × {(d, d)}",
                              streams * d * d, 0, "(A−1)·d·d", tuple(f"altup_in.{j}" for j in range(streams)),
                              shapes=((d, d),) * streams))
    shape = (f"{m.n_layers} × block" if len(groups) == 1 else
             " + ".join(f"{len(g.layers)} × block {i + 1}" for i, g in enumerate(groups)))
    idle = sum(n * len(g.layers) for n, g in zip(unused, groups))  # routed experts a token does not use
    rows.append(Component("blocks", f"{m.n_layers} blocks", shape, block_w, block_b, expression, kind="subtotal",
                          active=block_w + block_b - idle if idle else None))
    if streams:  # and each projected back out before their mean
        rows.append(Component("altup.out", f"AltUp: {streams} streams projected back", f"{streams} × {(d, d)}",
                              streams * d * d, 0, "(A−1)·d·d", tuple(f"altup_out.{j}" for j in range(streams)),
                              shapes=((d, d),) * streams))
    if m.final_norm:
        rows.append(_model_norm("final_norm", "final", "ln_f", b))
    if e:
        rows.append(Component("lm_head.project_out", f"project out (d → e = {e:,})", str((d, e)), d * e, 0, "d·e",
                              ("proj_out",), shapes=((d, e),)))
    head_bias = m.vocab_size if m.lm_head_bias else 0
    width, symbol = (e, "e") if e else (d, "d")
    if m.tie_embeddings:
        rows.append(Component("lm_head", "LM head (tied to token embedding)", str((width, m.vocab_size)),
                              0, head_bias, "0 (tied)" + (" + V" if head_bias else ""), ("lm_head_bias",),
                              kind="tied", shapes=((width, m.vocab_size),) + (((m.vocab_size,),) if head_bias else ())))
    else:
        rows.append(Component("lm_head", "LM head", str((width, m.vocab_size)), width * m.vocab_size, head_bias,
                              f"{symbol}·V" + (" + V" if head_bias else ""), ("lm_head", "lm_head_bias"),
                              shapes=((width, m.vocab_size),) + (((m.vocab_size,),) if head_bias else ())))
    if m.logit_scale:  # Dory: a learned scale per vocabulary entry on the logits
        rows.append(Component("lm_head.logit_scale", "logit scale (one per token)", str((m.vocab_size,)),
                              m.vocab_size, 0, "V", ("logit_scale",), shapes=((m.vocab_size,),)))
    weights = sum(r.weights for r in rows)
    biases = sum(r.biases for r in rows)
    total = weights + biases
    embeddings = m.vocab_size * (e or d) + pos + ple_table
    rows.append(Component("total", "model total", "", weights, biases, "", kind="total",
                          active=total - idle if idle else None))
    rows.append(Component("non_embedding", "non-embedding total", "", weights - embeddings, biases,
                          "total − token − position embeddings" + (" − per-layer embeddings" if ple_table else ""),
                          kind="total"))
    return rows, total, total - embeddings


def _shared_block_rows(config: Config) -> list[Component]:
    """Each shared transformer block (Zamba2), counted once however many layers use it: its attention over
    [h | x_0] (the norm's scale 2d; W_q 2d·h_a·d_a; W_k, W_v 2d·h_akv·d_a each; W_O h_a·d_a·d) and its MLP (the
    norm's scale d; gate, up d·d_fa each; down d_fa·d; with bias 2·d_fa + d)."""
    rows, d = [], config.block.d_model
    found: dict[int, SharedBlock] = {}
    for i in range(config.model.n_layers if config.model is not None else 0):
        s = config.layer_block(i).shared
        if s is not None:
            found.setdefault(s.index, s)
    for index, s in sorted(found.items()):
        values = {"d": d, **_shared_values(s)}
        attn = term(2, "d") + term(2, "d", "h_a", "d_a") + term(4, "d", "h_akv", "d_a") + term(1, "h_a", "d_a", "d")
        mlp_w = term(1, "d") + term(3, "d", "d_fa")
        mlp_b = term(2, "d_fa") + term(1, "d") if s.bias else Poly()
        q, kv = s.n_heads * s.head_dim, s.n_kv_heads * s.head_dim
        head = f"shared.{index}."
        rows += [Component(f"shared_block.{index}.attention", f"shared block {index}: RMSNorm (2d) and attention (Q, K, V, O)",
                           f"{(2 * d,)} + {(2 * d, q)} + 2 × {(2 * d, kv)} + {(q, d)}", evaluate(attn, values), 0,
                           render(attn), tuple(head + k for k in ("ln_attn_gamma", "w_q", "w_k", "w_v", "w_o")),
                           shapes=((2 * d,), (2 * d, q), (2 * d, kv), (2 * d, kv), (q, d))),
                 Component(f"shared_block.{index}.mlp", f"shared block {index}: RMSNorm and gated MLP",
                           f"{(d,)} + 2 × {(d, s.d_ff)} + {(s.d_ff, d)}", evaluate(mlp_w, values),
                           evaluate(mlp_b, values), render(mlp_w + mlp_b),
                           tuple(head + k for k in ("ln_mlp_gamma", "w_gate", "w_up", "w_down", "b_gate", "b_up",
                                                    "b_down")),
                           shapes=((d,), (d, s.d_ff), (d, s.d_ff), (s.d_ff, d)))]
    return rows


def _model_norm(name: str, where: str, prefix: str, b: BlockConfig) -> Component:
    """A norm outside the blocks, of the blocks' kind: its scale (unless norm_scale is off) and shift."""
    d = b.d_model
    scale, shift = d if b.norm_scale else 0, d if b.bias.norm else 0
    parts = (scale > 0) + (shift > 0)
    return Component(name, f"{where} {_norm_name(b)}", " + ".join([str((d,))] * parts) or "none (no scale, no shift)",
                     scale, shift, ("0", "d", "2·d")[parts], (f"{prefix}_gamma", f"{prefix}_beta"),
                     shapes=((d,),) * parts)


def _shapes_of(keys: tuple[str, ...], b: BlockConfig,
               shapes: Mapping[str, Shape]) -> tuple[str, tuple[tuple[int, ...], ...], int]:
    """A row's tensors: as the table writes them, as a tuple of shapes, and how many copies of those."""
    if b.moe is not None and keys and keys[0].startswith("experts."):  # E experts of the same shapes
        first = tuple(tuple(shapes[k]) for k in keys if k.startswith("experts.0."))
        return f"{b.moe.n_experts} × (" + " + ".join(str(s) for s in first) + ")", first, b.moe.n_experts
    if b.moa is not None and keys and keys[0].startswith("attn_experts."):  # E_a attention experts alike
        first = tuple(tuple(shapes[k]) for k in keys if k.startswith("attn_experts.0."))
        return f"{b.moa.n_experts} × (" + " + ".join(str(s) for s in first) + ")", first, b.moa.n_experts
    tensors = tuple(tuple(shapes[k]) for k in keys if k in shapes)
    return " + ".join(str(s) for s in tensors), tensors, 1


# ----------------------------------------------------------------------------- budgets for CI

_SUFFIXES = {"K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9, "T": 10**12}


def parse_amount(text: str, option: str = "count") -> tuple[int, int]:
    """'3152384', '3,152,384', '3.15M' → (value, tolerance). A suffixed decimal is exact to its last digit:
    '3.15M' is 3,150,000 ± 5,000 and '3.1523840M' is 3,152,384 exactly."""
    from blockcli.config import InputError, clipped, whole_number

    raw = text.strip().replace("_", "")
    scale = 1
    if raw and raw[-1].upper() in _SUFFIXES:
        scale = _SUFFIXES[raw[-1].upper()]
        raw = raw[:-1]
    whole, _, frac = raw.partition(".")
    grouped = "," in whole
    digits = whole.replace(",", "")
    decimal = lambda t: t.isascii() and t.isdigit()  # noqa: E731 - str.isdigit alone accepts '²'
    well_formed = (decimal(digits) and not raw.endswith(".") and (not frac or decimal(frac)) and (scale > 1 or not frac)
                   and (not grouped or all(len(g) == 3 for g in whole.split(",")[1:]) and 1 <= len(whole.split(",")[0]) <= 3))
    if not well_formed:
        raise InputError(f"{option}: expected a parameter count such as 3152384, 3,152,384 or 3.15M; "
                         f"got '{clipped(text)}'")
    whole_number(digits + frac, option)  # digits past any count: one line, not int()'s limit
    places = 10 ** len(frac)
    scaled = (int(digits) * places + (int(frac) if frac else 0)) * scale  # the value times `places`
    if scaled % places:
        raise InputError(f"{option}: '{text}' is not a whole number of parameters")
    half_unit = scale // places // 2 if scale > places else 0  # half the last digit's place value
    return scaled // places, half_unit


# --------------------------------------------------------------------------- a quantized checkpoint's bytes

# the block rows whose matrices are nn.Linear weights, which a block-fp8 checkpoint stores quantized; the other
# rows (norms, biases, routers, which transformers builds as plain parameters) keep the checkpoint's dtype
_FP8_ROWS = frozenset({"attn.q", "attn.k", "attn.v", "attn.o", "attn.q_a", "attn.q_b", "attn.kv_a", "attn.kv_b",
                       "mlp.gate", "mlp.up", "mlp.down", "mlp.experts", "mlp.shared"})
_STORED_SIZE = {"bfloat16": 2, "float16": 2, "float32": 4}


@dataclass(frozen=True)
class Fp8Bytes:
    """What a block-fp8 checkpoint of the counted model stores (buffers aside)."""

    quantized: int  # weights stored as one byte each
    scales: int  # float32 scales, one per weight block
    plain: int  # the other parameters, at the checkpoint's own dtype
    bytes: int


def fp8_stored_bytes(result: ParameterCount) -> Fp8Bytes | None:
    """The stored bytes of the model `result` counts, as a block-fp8 checkpoint (DeepSeek-V3's, Qwen3's FP8)
    holds it: each block's linear matrix (in, out) as fp8, one byte a weight, plus one float32 scale per
    block of its (out, in) weight, ceil(out / rows) · ceil(in / columns); embeddings, the LM head, norms,
    biases and routers at the checkpoint's dtype. None when the config's quantization is not such an fp8, or
    when the shapes do not say it exactly (fused storage, modules kept unquantized, a matrix of another kind)."""
    quant, config = result.config.quantization, result.config
    if quant is None or quant.method != "fp8" or quant.block is None or not quant.exact_bytes or config.model is None:
        return None
    rows, cols = quant.block
    n_layers = config.model.n_layers
    last_block = max(i for i, c in enumerate(result.components) if c.kind == "total" and c.name == "block")
    quantized = scales = 0
    for index, c in enumerate(result.components):
        if index > last_block or c.kind != "tensor":
            continue
        matrices = [s for s in c.shapes if len(s) == 2]
        if not matrices:
            continue
        if c.name not in _FP8_ROWS:
            if "router" in c.name:
                continue
            return None  # a matrix blockcli cannot say is a linear layer's
        layers = len(result.groups[c.group].layers) if c.group is not None else n_layers
        for n_in, n_out in matrices:
            quantized += layers * c.copies * n_in * n_out
            scales += layers * c.copies * math.ceil(n_out / rows) * math.ceil(n_in / cols)
    plain = result.total - quantized
    return Fp8Bytes(quantized, scales, plain, quantized + 4 * scales + _STORED_SIZE[quant.stored_dtype] * plain)
