"""Block configs: YAML (or a preset name) → validated, frozen dataclasses.

This is the only module that imports yaml. Every problem a user can cause raises
`ConfigError`, whose message is one line that starts with the field path
(`block.n_heads: ...`) or the file name, and says what was expected.

Conventions: sizes are positive integers; float fields also accept numeric strings
such as "1e-5", because YAML 1.1 loaders read `1e-5` (no dot) as a string.
"""

from __future__ import annotations

import difflib
import errno
import math
import os
import re
import stat
import sys
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any, Iterator, Mapping

from blockcli.activations import GATED_NAMES, SPELLINGS, mlp_kind, spelling

NORMS = ("layernorm", "rmsnorm", "l2norm")  # l2norm: x / √(Σx² + eps), nGPT's unit sphere (Dory)
PLACEMENTS = ("pre", "post", "parallel", "post_branch", "parallel_shared", "sandwich", "normed_residual")
ROPE_LAYOUTS = ("half", "interleaved", "half_reversed")
POSITIONS = ("learned", "sinusoidal", "rope", "none", "alibi")
# how a sinusoidal table lays out its sines and cosines (ops.sinusoidal_positions)
SINUSOIDAL_LAYOUTS = ("interleaved", "halves", "fairseq")
DTYPES = ("float32", "float64")
BIAS_GROUPS = ("qkv", "out", "mlp", "norm", "qk_norm")
DELTANET_DECAYS = ("head", "channel")  # block.linear_attention.decay: per value head, or per key channel (KDA)
QK_NORMS = ("none", "head", "projection", "each_head", "head_unscaled")
ROUTER_SCORINGS = ("softmax", "sigmoid")
ROUTER_ORDERS = ("softmax_topk", "topk_softmax", "sparsemixer")
GROUP_SCORES = ("max", "top2_sum")
SELECTION_ON = ("scores", "logits")  # block.moe.selection_on: what the selection bias is added to
MAX_SIZE = 10**12  # far beyond any real model; keeps arithmetic and messages sane
# layers are counted, traced and checked one by one: a million would take minutes; the deepest published
# models have a few hundred
MAX_LAYERS = 100_000
MAX_EXPERTS = 100_000  # likewise the experts (the most in a published model: a few hundred)
MAX_CONFIG_BYTES = 2**20  # 1 MiB: real configs are a few KiB; a bigger file is a mistake and slow to parse
MAX_DIGITS = 100  # in an option's number: 10^100 of anything is past every model (and int() stops at 4,300)


class InputError(ValueError):
    """Something the user supplied (config, weights, input, option) is invalid: exit code 2."""


class ConfigError(InputError):
    """A config the user wrote is invalid; the message names the field."""


@dataclass(frozen=True)
class Bias:
    qkv: bool = True
    out: bool = True
    mlp: bool = True
    norm: bool = True  # the LayerNorm shift beta (and an RMSNorm shift, if asked for)
    # the q/k norms' shift (block.qk_norm); None: as `norm` says (StableLM 2's per-head LayerNorms have none
    # where its other LayerNorms have one)
    qk_norm: bool | None = None

    def __post_init__(self) -> None:
        if self.qk_norm is None:
            object.__setattr__(self, "qk_norm", self.norm)


ROPE_SCALINGS = ("linear", "dynamic", "llama3", "yarn", "longrope", "proportional")


@dataclass(frozen=True)
class RopeScaling:
    """How RoPE's frequencies are stretched for long contexts, as transformers' `rope_type`s do it.

    linear: every frequency / factor. dynamic (NTK): past original_max_positions the base grows
    with the pass's length. llama3: low frequencies / factor, high ones kept, a smooth blend
    between (low_freq_factor, high_freq_factor). yarn: a ramp between interpolated and original
    frequencies (beta_fast, beta_slow, truncate), and cos/sin times an attention factor (from
    mscale, mscale_all_dim, or given). longrope: per-frequency short_factor, or long_factor once a
    pass reaches past original_max_positions, and an attention factor. 0 means "not given".
    """

    type: str
    factor: float = 1.0
    original_max_positions: int = 0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float = 0.0
    mscale_all_dim: float = 0.0
    attention_factor: float = 0.0
    truncate: bool = True
    short_factor: tuple[float, ...] = ()
    long_factor: tuple[float, ...] = ()
    # proportional (Gemma 4's full layers): the first int(fraction·r/2) pairs turn by θ^(−2i/r) / factor, the
    # others not at all (frequency 0), r the whole head
    fraction: float = 1.0


@dataclass(frozen=True)
class MoE:
    """A mixture-of-experts MLP in place of the dense one: a router picks `top_k` of `n_experts`
    routed experts per token (each a gated or plain MLP of width `d_expert`, with biases if
    block.bias.mlp), their outputs summed with the routing weights; optionally shared experts every
    token uses.

    Routing, as transformers' routers do it: logits = x·W_router (+ a learned bias if `logit_bias`,
    gpt-oss); scores = softmax or sigmoid of the logits;
    `selection_bias` (DeepSeek-V3's e_score_correction_bias) is added to the scores for choosing
    only; with n_groups > 1 only the experts of the `top_groups` best groups (a group's score: its
    max, or the sum of its top two) may be chosen; top-k (ties: the lower expert index first, as
    torch.topk returns them); weights = the chosen scores, renormalised to sum 1 if `renormalize`,
    times `routed_scaling`. `order: topk_softmax` takes the top-k logits and softmaxes those k
    (Mixtral's original code; it equals softmax_topk with renormalize).
    """

    n_experts: int
    top_k: int
    d_expert: int
    scoring: str = "softmax"  # softmax | sigmoid (DeepSeek-V3)
    order: str = "softmax_topk"  # softmax_topk | topk_softmax
    renormalize: bool = False  # the k chosen weights divided by their sum (Mixtral; Qwen's norm_topk_prob)
    # ε added to that sum: DeepSeek-V3's 1e-20 (sigmoid scores may all underflow to 0); LFM2-MoE's router adds 1e-6
    renormalize_eps: float = 1e-20
    routed_scaling: float = 1.0  # the routed experts' weights times this (DeepSeek's routed_scaling_factor)
    n_groups: int = 1  # experts in this many equal groups for group-limited routing (DeepSeek's n_group)
    top_groups: int = 1  # the best groups whose experts may be chosen (DeepSeek's topk_group)
    group_score: str = "max"  # a group's score: max of its scores (DeepSeek-V2) or sum of its top two (V3)
    selection_bias: bool = False  # a learned (n_experts,) bias added to the scores for the choice only
    # what the selection bias is added to for the choice: the scores (DeepSeek-V3), or the logits before the sigmoid
    # (Kolibri-1: top-k of x·W + b, the weights the chosen logits' sigmoids); one group
    selection_on: str = "scores"
    # the selection bias a parameter (ERNIE 4.5's moe_statics.e_score_correction_bias, an nn.Parameter built with
    # requires_grad false), counted in the totals; otherwise a buffer outside them (DeepSeek-V3). Either way only the
    # choice reads it: no gradient reaches it, and blockcli never trains it
    selection_bias_frozen: bool = False
    # `order: sparsemixer` (PhiMoE, eval mode): the relative margin ε of each stage's experts (router_jitter_noise)
    sparsemixer_eps: float = 0.01
    logit_bias: bool = False  # the router is a linear layer with a bias b_router: logits = x·W + b (gpt-oss)
    d_shared: int = 0  # width of the shared expert MLP every token uses (0: none)
    shared_gate: bool = False  # the shared expert's output times sigmoid(x·w_gate) (Qwen2-MoE)
    # the loss adds this times Switch Transformer's load-balancing loss, E·Σ_e f_e·P_e over every mixture layer's
    # tokens (transformers' router_aux_loss_coef, when output_router_logits); 0: none. Training only
    aux_loss_coef: float = 0.0
    # the routed experts carry block.bias.mlp's biases too; false: only the dense and shared MLPs do (DeepSeek-V2's
    # mlp_bias: DeepseekV2MLP is biased, DeepseekV2Experts never)
    routed_bias: bool = True
    # the routing weight multiplies each chosen expert's input, not its output: expert(w·x) (Llama 4); no biases
    scale_input: bool = False
    # Gemma 4: the experts run beside the dense MLP (block.d_ff), not in its place: the dense MLP reads LN2(h), the
    # experts LN2b(h), each output has a norm of its own (ln2_post1, ln2_post2), their sum goes through LN2' (sandwich)
    beside_dense: bool = False
    # the router reads x/rms(x) ⊙ s · d^−½ (RMSNorm without scale, a learned (d,) scale `router_scale`; Gemma 4)
    router_norm: bool = False
    # each chosen expert's routing weight times a learned per-expert scale (`expert_scale` (E,); Gemma 4)
    expert_scale: bool = False
    # a learned (d,) bias `moe_bias` added to the mixture's output, after the weighted sum (JetMoE's mlp.bias)
    out_bias: bool = False
    # a norm of the block's kind (`moe_norm_gamma`, and `moe_norm_beta` with bias.norm) on the mixture's output, after
    # the routed and shared experts are summed (A.X-K1's post_mlp_layernorm); the dense layers have none
    out_norm: bool = False


@dataclass(frozen=True)
class LatentAttention:
    """Multi-head latent attention (DeepSeek-V2/V3): queries through an optional low-rank latent,
    keys and values through one shared compressed latent, and a RoPE part shared by all heads.

    Q = [Q_nope | Q_rope] per head, from x·W_q or norm(x·W_q_a)·W_q_b (rank q_lora_rank);
    [c_kv | k_rope] = x·W_kv_a, c_kv (kv_lora_rank wide) normalised, then c_kv·W_kv_b gives each
    head's K_nope (qk_nope_head_dim) and V (v_head_dim); k_rope (qk_rope_head_dim) is one key part
    read by every head. Each head's query/key width is qk_nope_head_dim + qk_rope_head_dim.
    """

    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    q_lora_rank: int = 0  # 0: queries through one full projection (DeepSeek-V2-Lite)
    latent_norm_eps: float = 1e-6  # the latents' RMSNorms: DeepSeek builds them with the default eps
    # DeepSeek Sparse Attention's lightning indexer (DeepSeek-V3.2, GLM-5): index_heads > 0 heads of
    # index_head_dim score every query against every earlier key; each query attends to its index_topk best
    index_heads: int = 0  # 0: no indexer, every query sees every earlier key
    index_head_dim: int = 0
    index_topk: int = 0
    index_rope_layout: str = "half"  # the indexer's RoPE on its first qk_rope_head_dim dims: half (V3.2) | interleaved (GLM-5)
    index_shared: bool = False  # no indexer of its own: the previous layer's choice (GLM-5's indexer_types "shared")

    @property
    def own_indexer(self) -> bool:
        """Whether the layer runs an indexer with weights of its own (not one reusing the previous layer's choice)."""
        return bool(self.index_heads) and not self.index_shared

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


@dataclass(frozen=True)
class GatedDeltaNet:
    """The Gated DeltaNet token mixer (Qwen3-Next, Qwen3.5's linear-attention layers): a recurrent
    state S (h_v, d_k, d_v) per sequence in place of softmax attention over a K/V cache.

    q, k (key_heads of key_head_dim) and v (value_heads of value_head_dim) from x, each through a causal
    depthwise conv of conv_kernel taps and SiLU; q and k L2-normalised, each key head read by
    value_heads / key_heads value heads; per value head a decay g = −exp(A_log)·softplus(x·W_a + dt_bias)
    and a write strength β = σ(x·W_b) (times beta_scale); then per step S ← e^g·S, S ← S + k (β(v − Sᵀk))ᵀ,
    o = Sᵀq/√d_k; o through an RMSNorm (its own scale, d_v wide) times SiLU(x·W_z), then W_O.

    decay "channel" is Kimi Delta Attention (Kimi-Linear's KDA): as many key as value heads, d_k = d_v, and the
    decay per key channel, g = −exp(A_log)·softplus(x·W_fa·W_fb + dt_bias) (B, T, h, d_k) with A_log per head and
    dt_bias per channel, so S ← diag(e^g)·S; no z projection but an output gate σ(x·W_ga·W_gb) in place of
    SiLU(x·W_z); both W_fa·W_fb and W_ga·W_gb low-rank through d_k.
    """

    key_heads: int = 16
    value_heads: int = 32
    key_head_dim: int = 128
    value_head_dim: int = 128
    conv_kernel: int = 4
    norm_eps: float = 1e-6  # the gated RMSNorm of the output
    # β = beta_scale·σ(x·W_b): 2 lets the state's eigenvalues go negative, β in (0, 2) (OLMo Hybrid's
    # linear_allow_neg_eigval); 1: β in (0, 1) (Qwen3-Next)
    beta_scale: float = 1.0
    # the short conv's taps as three parameters, one each for q, k and v (dn_q_conv, dn_k_conv, dn_v_conv), as OLMo
    # Hybrid's checkpoints store them; false: one dn_conv over q | k | v (Qwen3-Next). The same sums either way
    split_conv: bool = False
    decay: str = "head"  # head: one decay per value head (Gated DeltaNet); channel: per key channel (KDA)

    @property
    def per_channel(self) -> bool:
        """Kimi Delta Attention: the decay per key channel, the low-rank decay and output-gate projections."""
        return self.decay == "channel"

    @property
    def three_convs(self) -> bool:
        """The conv's taps held as three parameters (q, k, v): Kimi Delta Attention's, or with split_conv."""
        return self.per_channel or self.split_conv

    @property
    def key_width(self) -> int:
        return self.key_heads * self.key_head_dim

    @property
    def value_width(self) -> int:
        return self.value_heads * self.value_head_dim

    @property
    def conv_width(self) -> int:
        """The channels the short conv runs over: q | k | v."""
        return 2 * self.key_width + self.value_width


@dataclass(frozen=True)
class Mamba2:
    """A Mamba-2 (SSD) token mixer in place of attention (Granite 4.0-H, Bamba, Nemotron-H), per head h of
    width p = head_dim with an N = d_state wide state, the heads in n_groups groups sharing B and C:

        [z | x B C | dt] = u·W_in                      z, x (d_in = h·p), B, C (g·N each), dt (h)
        x B C = silu(causal depthwise conv1d over T, kernel conv_kernel, of x B C)
        Δ = max(softplus(dt + dt_bias), dt_min), A = −exp(A_log)    (B, T, h), (h,)
        S_t = exp(Δ_t·A)·S_{t−1} + Δ_t·x_t ⊗ B_t       S (B, h, p, N), from zeros
        y_t = S_t·C_t + D·x_t                          (B, T, h, p)
        out = RMSNorm_grouped(y ⊙ silu(z))·W_out        the norm over each of g groups of d_in/g

    Falcon-H1's options: the norm before W_out (`norm`: that gated one, RMSNorm_grouped(y)·γ ⊙ silu(z), or none,
    y ⊙ silu(z)), W_out's bias apart from W_in's (`out_bias`), u times `in_multiplier`, W_in's five output segments
    each times its own of `multipliers`, the output times `out_multiplier` (beside attention: block.parts hybrid).

    Its state is constant in T: (B, h, p, N) plus the conv's last conv_kernel − 1 inputs (B, K−1, d_in + 2·g·N).
    """

    n_heads: int
    head_dim: int
    d_state: int
    n_groups: int = 1
    conv_kernel: int = 4
    conv_bias: bool = True  # the conv1d has a bias per channel
    proj_bias: bool = False  # in_proj and out_proj have biases (out_proj's as out_bias says, when it is set)
    norm_eps: float = 1e-6  # the gated RMSNorm's eps
    dt_min: float = 0.0  # Δ clamped below to this after the softplus (Nemotron-H's time_step_min); 0: no clamp
    # the norm before W_out: gated, RMSNorm_grouped(y ⊙ silu(z))·γ; norm_gate, RMSNorm_grouped(y)·γ ⊙ silu(z)
    # (Falcon-H1's mamba_norm_before_gate); none, y ⊙ silu(z) without a norm or γ (Falcon-H1's mamba_rms_norm false)
    norm: str = "gated"
    out_bias: bool | None = None  # out_proj's bias; None: as proj_bias (Falcon-H1's projectors_bias sets it apart)
    in_multiplier: float = 1.0  # the mixer's input u times this before W_in (Falcon-H1's ssm_in_multiplier)
    # W_in's output, segment by segment z, x, B, C, dt, times these (Falcon-H1's ssm_multipliers, its µP vector)
    multipliers: tuple[float, float, float, float, float] = (1.0, 1.0, 1.0, 1.0, 1.0)
    out_multiplier: float = 1.0  # the mixer's output times this (Falcon-H1's ssm_out_multiplier)

    @property
    def d_inner(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        """The channels the conv runs over: x, B and C."""
        return self.d_inner + 2 * self.n_groups * self.d_state

    @property
    def has_out_bias(self) -> bool:
        return self.proj_bias if self.out_bias is None else self.out_bias

    @property
    def in_width(self) -> int:
        """W_in's output: z, x (d_in each), B, C (g·N each), dt (h)."""
        return 2 * self.d_inner + 2 * self.n_groups * self.d_state + self.n_heads


MAMBA1_NORMS = ("none", "weightless", "learned")


@dataclass(frozen=True)
class Mamba1:
    """A Mamba-1 (S6, the selective scan) token mixer in place of attention (Mamba, Falcon-Mamba, Jamba), over
    d_in = d_inner channels, each with its own N = d_state wide state, Δ through a rank-R (dt_rank) projection:

        [x | z] = u·W_in                               (B, T, d_in) each
        x = silu(causal depthwise conv1d over T, kernel conv_kernel, of x)
        [δ | B | C] = x·W_x                            (B, T, R), (B, T, N), (B, T, N); no bias
        δ, B, C = RMSNorm(δ), RMSNorm(B), RMSNorm(C)    with bc_norm: weightless (Falcon-Mamba) or learned (Jamba)
        Δ = softplus(δ·W_dt + b_dt), A = −exp(A_log)    (B, T, d_in), (d_in, N)
        S_t = exp(Δ_t ⊗ A) ⊙ S_{t−1} + (Δ_t ⊙ x_t) ⊗ B_t   S (B, d_in, N), from zeros
        y_t = S_t·C_t + D ⊙ x_t                        (B, T, d_in)
        out = (y ⊙ silu(z))·W_out

    Its state is constant in T: (B, d_in, N) plus the conv's last conv_kernel − 1 inputs (B, K−1, d_in).
    Written under block.mamba with `version: 1` (Mamba-2's sections have none, or `version: 2`).
    """

    d_inner: int
    d_state: int
    dt_rank: int
    conv_kernel: int = 4
    conv_bias: bool = True  # the conv1d has a bias per channel
    proj_bias: bool = False  # in_proj and out_proj have biases (x_proj never; dt_proj always)
    bc_norm: str = "none"  # RMSNorm of δ, B and C before Δ and the scan: none | weightless | learned (a scale each)
    bc_norm_eps: float = 1e-6
    version: int = 1

    @property
    def conv_dim(self) -> int:
        """The channels the conv runs over: x alone."""
        return self.d_inner


@dataclass(frozen=True)
class ShortConv:
    """A gated short convolution in place of attention (LFM2): [B | C | x] = u·W_in (d each), then
    y = C ⊙ conv1d(B ⊙ x) over T (causal, depthwise, `kernel` taps), out = y·W_out. Its state is the conv's last
    inputs (B, kernel, d), constant in T."""

    kernel: int = 3
    bias: bool = False  # the in-/out-projections and the conv have biases (LFM2's conv_bias)


@dataclass(frozen=True)
class Lightning:
    """MiniMax's lightning attention in place of softmax attention: linear attention with a fixed exponential
    decay per head, over the block's n_heads heads of head_dim. [q_i | k_i | v_i] = SiLU(x·W_qkv) per head;
    per step S ← λ_i·S + kᵀv, o = q·S (S (d_h, d_h) per head, no 1/√d_h, no RoPE); λ_i = exp(−s_i),
    s_i = 2^(−8(i+1)/h)·decay_scale; out = (σ(x·W_gate) ⊙ RMSNorm(o over h·d_h))·W_out. Its state is
    (B, h, d_h, d_h), constant in T."""

    decay_scale: float = 1.0  # MiniMax's per-layer factor 1 − l/(L − 1 + 1e-5) + 1e-5 on every head's rate
    block_size: int = 256  # the prefill walks the tokens in blocks of this many (the result is the same for any)
    norm_eps: float = 1e-6  # the output RMSNorm's eps (transformers builds it with its default)


@dataclass(frozen=True)
class SharedBlock:
    """Zamba2's shared transformer block, one of the model's few, run before this layer's Mamba-2 mixer. Its weights
    (`shared.{index}.*`, counted once however many layers use it) are RMSNorm (2d) → attention → RMSNorm (d) → a gated
    MLP, without residual adds: u = [h | x_0] (the layer's input beside the token embeddings, 2d wide), a = W_O·attn(
    LN_a(u)) (queries, keys and values 2d → h·d_h; the scores times (d_h/2)^(-1/2); RoPE with `rope`), t = MLP(LN_m(a))
    (d → d_ff → d). Each use has its own LoRA adapters: W_gate|W_up + A·B (rank `adapter_rank`), and, with
    `attention_adapters`, W_q, W_k, W_v + A·B; and its own output projection W_s (d, d). The layer then runs its
    mixer on LN1(h + t·W_s), its residual h: y = h + Mamba2(LN1(h + t·W_s))."""

    index: int = 0  # which of the model's shared blocks (Zamba2: the use's order modulo num_mem_blocks)
    n_heads: int = 8
    n_kv_heads: int = 8
    head_dim: int = 0  # 0: 2·d / n_heads
    d_ff: int = 0  # 0: 4·d
    activation: str = "gelu"  # the MLP's act(gate) ⊙ up
    adapter_rank: int = 128
    attention_adapters: bool = False  # LoRA adapters on W_q, W_k, W_v too (use_shared_attention_adapter)
    rope: bool = False  # RoPE on the whole of each head (use_mem_rope)
    rope_theta: float = 10000.0
    bias: bool = False  # the MLP's biases (add_bias_linear)


@dataclass(frozen=True)
class MixtureOfAttention:
    """JetMoE's mixture of attention heads in place of W_Q and W_O: a router (d, E) picks `top_k` of `n_experts`
    attention experts per token (the top-k logits, softmaxed over those k); each expert has its own query projection
    (d, h_kv·d_h) and output projection (h_kv·d_h, d); K and V (h_kv heads of d_h, RoPE on K) are one projection
    shared by every expert. Each chosen expert's h_kv query heads attend to the shared K/V (head i to K/V head i), its
    heads' output goes through its own W_O, times its routing weight; the k outputs are summed, plus a (d,) bias.
    The block's n_heads is top_k·n_kv_heads (transformers' num_attention_heads); the K/V cache is h_kv heads."""

    n_experts: int
    top_k: int


@dataclass(frozen=True)
class NGPT:
    """nGPT's normalized transformer (Dory): a sandwich block whose norms are l2norm without scales; each residual add
    an interpolation towards the branch, h = n + |λ·alpha|⊙(branch − n) from the normalised input n (learned λ_1, λ_2
    (d,) a layer); the queries (after the per-head norm and RoPE) times (s_qk·qk)² per channel; the attention gate
    σ(x·W_gate ⊙ (s_gate·gate)²); the gated MLP's gate and up projections times s_gate·mlp and s_up·mlp per channel
    (learned s_qk, s_gate (h·d_h,), s_uv gate/up (d_ff,) each). The factors are the config's constant rescalings."""

    alpha: float = 1.0  # DoryConfig: ngpt_alpha_init / initializer_range
    qk: float = 1.0  # √d_h / initializer_range
    gate: float = 1.0  # d^(1/4) / initializer_range
    mlp: float = 1.0  # √d


@dataclass(frozen=True)
class Differential:
    """Differential attention (DiffLlama, the Differential Transformer): the block's softmax attention, each query head
    reading the values of two K/V heads side by side, [V_j | V_(j + h_kv/2)] for its K/V head j < h_kv/2 (h_kv even);
    query head i and head i + h/2 (i < h/2) are a pair: o_i = A_i·[V | V'] − λ·A_(i+h/2)·[V | V'] (2·d_h wide),
    λ = exp(λ_q1·λ_k1) − exp(λ_q2·λ_k2) + λ_init (four learned (d_h,) vectors); each o_i is RMS-normalised over its
    2·d_h without a scale (eps the block's norm_eps), times (1 − λ_init); the h/2 pairs (h·d_h) go through W_O."""

    lambda_init: float = 0.2  # DiffLlama: 0.8 − 0.6·exp(−0.3·l) for layer l (layer 0's by default)


# what one layer holds: a mixer and an MLP, or one of them (Nemotron-H); hybrid: two mixers side by side, attention
# and block.mamba both reading LN1's output, their outputs summed, then the MLP (Falcon-H1)
LAYER_PARTS = ("both", "mixer", "mlp", "hybrid")
# block.attention_gate_form: σ per element, softplus per element, one softplus per head, one σ per head (LFM3)
GATE_FORMS = ("sigmoid", "softplus", "softplus_head", "sigmoid_head")
QUERY_SCALE_FORMS = ("log", "power")  # block.query_scale_form
MAMBA_NORMS = ("gated", "norm_gate", "none")


@dataclass(frozen=True)
class BlockConfig:
    d_model: int = 512
    n_heads: int = 8
    d_ff: int = 2048
    n_kv_heads: int = 0  # 0 in the constructor means "same as n_heads"; resolved by parse
    head_dim: int = 0  # 0 means d_model // n_heads
    norm: str = "layernorm"
    norm_eps: float = 1e-5
    activation: str = "gelu_tanh"  # a function of blockcli.activations (a gated form's name, swiglu, sets gated)
    bias: Bias = field(default_factory=Bias)
    placement: str = "pre"
    rope: float = 0.0  # fraction of each head rotated; 0 is off, 1 is the whole head
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling | None = None
    dropout: float = 0.0
    norm_unit_offset: bool = False  # the norms scale by (1 + gamma) instead of gamma (Gemma)
    sliding_window: int = 0  # a query sees at most this many keys, itself included; 0: every earlier key
    qk_norm: str = "none"  # normalise queries and keys: per head over d_h (Qwen3), or over the projection (OLMo2),
    # or per head over d_h with each head's own weights (each_head: Command R+, weights (h, d_h) and (h_kv, d_h))
    attention_dropout: float = 0.0  # on the attention probabilities, training-mode passes only
    # rotated pairs (i, i + r/2) as GPT-NeoX/Llama, or (2i, 2i + 1) as GPT-J; half_reversed: half's pairs by −θ (NanoChat)
    rope_layout: str = "half"
    attention_scale: float = 0.0  # scores are Q·Kᵀ times this; 0 means 1/√d_h (Granite: attention_multiplier)
    residual_multiplier: float = 1.0  # each branch's output times this before its residual add (Granite)
    moe: MoE | None = None  # a mixture-of-experts MLP in place of the dense one (d_ff then unused)
    mla: LatentAttention | None = None  # multi-head latent attention in place of Q/K/V projections (DeepSeek)
    norm_scale: bool = True  # every norm has its scale gamma; false: parameter-free norms (OLMo, with bias.norm false)
    clip_qkv: float = 0.0  # q, k and v clamped to [-c, c] after their projections (OLMo); 0 is off
    alibi: bool = False  # scores + slope_head · (s − t) (BLOOM's ALiBi); model.positions: alibi sets it
    attention_softcap: float = 0.0  # c > 0: scores become c·tanh(scores/c) before the mask (Gemma 2); 0: off
    attention_sinks: bool = False  # a learned logit per head joins every row's softmax, then is dropped (gpt-oss)
    swiglu_alpha: float = 1.702  # clamped_swiglu: the gate's g·sigmoid(α·g)
    swiglu_limit: float = 7.0  # clamped_swiglu: the gate clamped to ≤ c, the up branch to [−c, c]
    gated: bool = False  # act(x·W_gate) ⊙ x·W_up, then W_down; a gated form's name (swiglu) implies it
    # β > 0: the query at position p times 1 + β·ln(1 + ⌊p / query_scale_length⌋), after RoPE (Ministral 3's
    # llama_4_scaling_beta over its original_max_position_embeddings); 0: off
    query_scale: float = 0.0
    query_scale_length: int = 0
    qk_norm_after_rope: bool = False  # qk_norm head normalises the rotated queries and keys (HunYuan), not before RoPE
    # the Gated DeltaNet token mixer in place of softmax attention (Qwen3-Next's and Qwen3.5's linear layers)
    linear_attention: GatedDeltaNet | None = None
    attention_gate: bool = False  # the attention output times σ(x·W_gate), per head (W_q twice as wide: Qwen3-Next)
    # the gate's form: sigmoid (σ(g) per element: Qwen3-Next, AFMoE), softplus (softplus(g) per element) or
    # softplus_head (one softplus(g) per head, broadcast over its d_h: W_gate is (d, h); Laguna), sigmoid_head (one
    # σ(g) per head, W_gate (d, h): LFM3's g_proj)
    attention_gate_form: str = "sigmoid"
    # the query scale's positions counted from this: 1 + β·ln(1 + ⌊(p + offset) / L⌋) (Llama 4's temperature
    # tuning: 1, (p + 1) / floor_scale; Ministral 3: 0)
    query_scale_offset: int = 0
    # C > 0: chunked local attention, query p sees only the keys of its own chunk of C positions (⌊s / C⌋ = ⌊p / C⌋,
    # s <= p), Llama 4's attention_chunk_size; 0: off
    attention_chunk: int = 0
    mamba: Mamba1 | Mamba2 | None = None  # a Mamba-1 or Mamba-2 state-space mixer in place of attention (blockcli.mamba)
    short_conv: ShortConv | None = None  # a gated short convolution in place of attention (blockcli.short_conv)
    # mixer: the layer is LN1 + its mixer + residual only; mlp: LN2 + its MLP + residual only (Nemotron-H)
    parts: str = "both"
    clip_after_qk_norm: bool = False  # clip_qkv clamps the normalised Q and K (and V) of qk_norm projection (OLMoE)
    # parts hybrid: attention's input times this, its output times the other (Falcon-H1's attention_in_multiplier,
    # attention_out_multiplier)
    attention_in_multiplier: float = 1.0
    attention_out_multiplier: float = 1.0
    # the MLP's gate pre-activation times the first, its output (after W_down) times the second (Falcon-H1's
    # mlp_multipliers): act(m_g·(x·W_gate + b))…, m_d·(…·W_down + b)
    mlp_multipliers: tuple[float, float] = (1.0, 1.0)
    # a norm of the block's kind on the heads' output before W_O (h·d_h wide) and on the MLP's hidden act before
    # W_down (d_ff wide): BitNet's attn_sub_norm and ffn_sub_norm
    sub_norms: bool = False
    v_norm: bool = False  # values RMS-normalised over each head's d_h, without scale (Gemma 4)
    k_eq_v: bool = False  # no W_V: the values are the K projection (before the k norm and RoPE; Gemma 4's full layers)
    # N >= 0: no K/V projections of its own; the layer attends to layer N's keys and values (after their norms and
    # RoPE, cached with that layer's cache): Gemma 4's num_kv_shared_layers. -1: its own
    kv_from: int = -1
    layer_scalar: bool = False  # the block's output times a stored scalar (buffer `layer_scalar` (1,); Gemma 4)
    # Mllama's tanh-gated cross-attention layer (to the image's states), which a text-only pass skips: its parameters
    # (attention's Q, K, V and O, per-head q/k norms, both norms, the MLP, and a tanh gate (1,) on each branch,
    # `cross_attn_gate` and `cross_mlp_gate`) are counted and loaded; the layer is the identity
    cross_attention: bool = False
    # d_p > 0: a per-layer input (model.per_layer_dim) joins after the MLP: y + norm(act(y·W_pg) ⊙ e_l)·W_pp (Gemma 4)
    per_layer_input: int = 0
    lightning: Lightning | None = None  # MiniMax's lightning attention in place of softmax attention (blockcli.lightning)
    moa: MixtureOfAttention | None = None  # JetMoE's mixture of attention heads in place of W_Q and W_O (blockcli.moa)
    differential: Differential | None = None  # differential attention (DiffLlama; blockcli.differential)
    ngpt: NGPT | None = None  # nGPT's normalized block (Dory): interpolated residuals, learned per-channel scales
    # each residual add as α·skip + β·branch (MiniMax's alpha/beta factors), for the attention and the MLP add
    attn_skip_scale: float = 1.0
    attn_branch_scale: float = 1.0
    mlp_skip_scale: float = 1.0
    mlp_branch_scale: float = 1.0
    # a shared transformer block run before this layer's mixer, its output added to the mixer's input (Zamba2)
    shared: SharedBlock | None = None
    # Gemma 3n's AltUp: N >= 1 residual streams (B, T, d) each, (N, B, T, d) in all; the block predicts every
    # stream from all of them, runs its layer on stream `altup_active`, and corrects every stream by how far the
    # layer's output fell from that stream's prediction (altup_num_inputs, altup_active_idx). 0: one stream
    altup: int = 0
    altup_active: int = 0
    altup_correct_scale: bool = False  # the corrected active stream times a learned scale before the per-layer input
    # r > 0: LAuReL, a low-rank residual n1 + norm(n1·W_l·W_r) of LN1's output joins the attention add, and the sum
    # is divided by √2 (Gemma 3n's laurel_rank)
    laurel_rank: int = 0
    # s in (0, 1): the gated MLP's gate pre-activation keeps only what exceeds its row's mean + σ·Φ⁻¹(s), shifted
    # down by that cut-off (Gemma 3n's gaussian top-k, activation_sparsity_pattern); 0: off
    activation_sparsity: float = 0.0
    # d_v > 0: each head's value width when it differs from head_dim (W_V (d, h_kv·d_v), W_O (h·d_v, d)): MiMo-V2-Flash's
    # v_head_dim, 128 beside queries and keys of 192; 0: head_dim
    v_head_dim: int = 0
    value_scale: float = 1.0  # the values times this constant, before attention and the cache (MiMo's attention_value_scale)
    # the query scale's form: log, 1 + β·ln(1 + ⌊(p + o) / L⌋) (Ministral 3, Llama 4); power, (1 + (p + o) / L)^β (Beam's
    # scalable softmax on its NoPE layers)
    query_scale_form: str = "log"
    attention_gate_head_bias: bool = False  # a learned bias per head in the gate's pre-activation (Beam's gate_bias (h,))

    def __post_init__(self) -> None:
        # one form per MLP, however it was built: `swiglu` is (activation silu, gated)
        if self.activation in GATED_NAMES:
            object.__setattr__(self, "gated", True)
            object.__setattr__(self, "activation", GATED_NAMES[self.activation])

    @property
    def mlp_kind(self) -> str:
        """The MLP's activation step by the name people know it: `swiglu`, `gelu_tanh`, `gated_relu2`."""
        return mlp_kind(spelling(self.activation, self.gated), self.gated)

    @property
    def attention_part(self) -> "BlockConfig":
        """parts hybrid: the attention beside the Mamba-2 mixer, as a block of attention alone would hold it."""
        return replace(self, mamba=None, parts="both")

    @property
    def gate_per_head(self) -> bool:
        """The attention gate is one value per head (W_gate (d, h)), broadcast over its d_h: softplus_head, sigmoid_head."""
        return self.attention_gate_form in ("softplus_head", "sigmoid_head")

    @property
    def gate_sigmoid(self) -> bool:
        """The attention gate's function is σ (per element or per head); else softplus."""
        return self.attention_gate_form in ("sigmoid", "sigmoid_head")

    @property
    def sandwich(self) -> bool:
        """Each branch's output is normalised again before its residual add (Gemma 2/3): four norms."""
        return self.placement == "sandwich"

    @property
    def shared_norm(self) -> bool:
        """Attention and MLP both read LN1(x): the block has no second norm (GPT-J, Phi)."""
        return self.placement == "parallel_shared"

    @property
    def rope_dims(self) -> int:
        """Rotated dimensions per head (even), as GPT-NeoX's int(head_dim * rotary_pct); latent
        attention rotates its qk_rope_head_dim (none without rotary positions: Kimi-Linear's NoPE)."""
        if self.mla is not None:
            return self.mla.qk_rope_head_dim if self.rope else 0
        return int(self.head_dim * self.rope) // 2 * 2

    @property
    def value_dim(self) -> int:
        """Each head's value width d_v: head_dim, v_head_dim where it differs, or latent attention's v_head_dim."""
        return self.mla.v_head_dim if self.mla is not None else self.v_head_dim or self.head_dim

    @property
    def softmax_mscale(self) -> float:
        """DeepSeek's yarn mscale of the softmax scale, latent attention only (transformers'
        `yarn_apply_mscale`): 0.1·mscale_all_dim·ln(factor) + 1 when the RoPE scaling sets
        mscale_all_dim and factor > 1; the scores are multiplied by its square. 1 otherwise."""
        s = self.rope_scaling
        if self.mla is None or s is None or not s.mscale_all_dim or s.factor <= 1:
            return 1.0
        return 0.1 * s.mscale_all_dim * math.log(s.factor) + 1.0

    @property
    def score_scale(self) -> float:
        """What Q·Kᵀ is multiplied by: block.attention_scale, or 1/√d_h when that is not set (times
        the square of latent attention's mscale, when it has one)."""
        return (self.attention_scale or 1.0 / math.sqrt(self.head_dim)) * self.softmax_mscale ** 2


@dataclass(frozen=True)
class ModelConfig:
    n_layers: int = 12
    vocab_size: int = 50257
    positions: str = "learned"
    max_positions: int = 1024
    position_offset: int = 0  # extra rows at the start of a learned or sinusoidal table (OPT, XGLM: 2)
    # interleaved: sin|cos pairs (Vaswani); halves: all sines, then all cosines (CTRL); fairseq: halves with
    # fairseq's frequencies 10000^(−j/(⌊d/2⌋−1)), a zero column when d is odd, the padding_idx row zero (XGLM)
    sinusoidal_layout: str = "interleaved"
    tie_embeddings: bool = True
    final_norm: bool = True
    lm_head_bias: bool = False
    embedding_multiplier: float = 1.0  # token embeddings are multiplied by this (Gemma: sqrt(d_model))
    logit_multiplier: float = 1.0  # logits times this (Cohere's logit_scale; Granite: 1 / logits_scaling)
    logit_softcap: float = 0.0  # c > 0: logits become c·tanh(logits/c) (Gemma 2's final_logit_softcapping); 0: off
    embedding_norm: bool = False  # a norm of the block's kind on the embeddings before the first block (BLOOM)
    embedding_dim: int = 0  # e: token embeddings e wide, projected in to d and out again (OPT-350m); 0 is d_model
    padding_idx: int | None = None  # a token whose embedding row never gets a gradient (nn.Embedding's padding_idx)
    # d_p > 0: per-layer embeddings (Gemma 4's PLE): a table (V_p, L·d_p) and a projection (d, L·d_p) give each
    # layer its own d_p-wide input; per_layer_vocab V_p (0: vocab_size)
    per_layer_dim: int = 0
    per_layer_vocab: int = 0
    # token ids at or past per_layer_vocab read the per-layer table's row 0 (Gemma 3n), instead of being refused
    per_layer_clamp: bool = False
    # a looped section (Dory): layers [recurrent_start, recurrent_start + recurrent_layers) run recurrent_loops times
    # with the same weights, each pass from norm(h) + norm(x_in), x_in the output of the layers before (norm: the
    # block's kind, without a scale); 0 layers: none
    recurrent_start: int = 0
    recurrent_layers: int = 0
    recurrent_loops: int = 1
    logit_scale: float = 0.0  # s > 0: the logits times a learned (V,) vector `logit_scale` times s (Dory); 0: off
    # rows of the token embedding past vocab_size, which the LM head never outputs (Mllama's 8); untied only
    extra_token_rows: int = 0


def layer_passes(m: ModelConfig) -> list[tuple[int, int, int]]:
    """Each layer pass in order: (the block, its cache's index, its loop: -1 outside the recurrent section). One pass
    a layer, but the recurrent section's layers (model.recurrent_*: Dory) once a loop, loop j > 0 with caches of its
    own after the model's."""
    start, n = m.recurrent_start, m.recurrent_layers
    passes = [(i, i, -1) for i in range(start)]
    for j in range(m.recurrent_loops if n else 0):
        passes += [(i, i if j == 0 else m.n_layers + (j - 1) * n + i - start, j) for i in range(start, start + n)]
    return passes + [(i, i, -1) for i in range(start + n, m.n_layers)]


def projected_width(model: ModelConfig | None, d_model: int) -> int:
    """e, the width of the token embeddings and the LM head's input: model.embedding_dim when it
    differs from d_model (OPT-350m's word_embed_proj_dim, with project_in / project_out), else 0."""
    return model.embedding_dim if model is not None and model.embedding_dim not in (0, d_model) else 0


@dataclass(frozen=True)
class RunConfig:
    batch: int = 2
    seq_len: int = 5
    dtype: str = "float32"
    seed: int = 7


@dataclass(frozen=True)
class About:
    description: str = ""
    source: str = ""
    parameters: int | None = None
    model_type: str = ""  # the Hugging Face family whose modules hold these matrices (count --lora-* reads it)


@dataclass(frozen=True)
class Quantization:
    """A config.json's `quantization_config` blockcli recognises: the checkpoint stores quantized weights, and
    blockcli counts (and, on seeded weights, runs) the logical model, as the unquantized one has it."""

    method: str  # quant_method: fp8 | gptq | awq | compressed-tensors
    bits: tuple[int, ...]  # of a quantized weight (compressed-tensors' groups may differ)
    block: tuple[int, int] | None = None  # fp8: the (rows, columns) of a weight block one float32 scale covers
    stored_dtype: str = "bfloat16"  # what the unquantized tensors are stored in (torch_dtype)
    # fp8: each linear matrix of a block is quantized on its own (no fused storage) and no module is kept
    # unquantized beyond the embeddings, LM head, norms and routers: the stored bytes follow from the shapes
    exact_bytes: bool = False
    description: str = ""  # "fp8 (e4m3, 128x128 blocks)"


@dataclass(frozen=True)
class Config:
    block: BlockConfig
    model: ModelConfig | None = None
    run: RunConfig = field(default_factory=RunConfig)
    about: About = field(default_factory=About)
    name: str = "default"  # preset name, file path, or "default"
    notes: tuple[str, ...] = ()  # what loading it has to tell the user (fields accepted by --allow-field)
    layer_blocks: tuple[BlockConfig, ...] = ()  # layer i's block when some layers differ; () when all are `block`
    quantization: Quantization | None = None  # a config.json's recognised quantization_config (counts stay logical)

    def layer_block(self, layer: int) -> BlockConfig:
        """The block of layer `layer` (0-based): `block` unless a `layers:` entry overrides it."""
        return self.layer_blocks[layer] if self.layer_blocks else self.block

    def layer_groups(self) -> list[LayerGroup]:
        """The layers grouped by identical blocks, in order of each group's first layer (one group
        when every layer is `block`; a lone block is one group of layer 0)."""
        n_layers = self.model.n_layers if self.model else 1
        groups: dict[BlockConfig, list[int]] = {}
        for i in range(n_layers):
            groups.setdefault(self.layer_block(i), []).append(i)
        return [LayerGroup(tuple(layers), block, block_differences(self.block, block))
                for block, layers in groups.items()]

    def for_layer(self, layer: int) -> "Config":
        """The config with layer `layer`'s block as its only block (for trace and verify of one layer)."""
        return replace(self, block=self.layer_block(layer), layer_blocks=())

    def group_of(self, layer: int) -> "LayerGroup":
        return next(g for g in self.layer_groups() if layer in g.layers)

    @property
    def layers_differ(self) -> bool:
        return len(set(self.layer_blocks)) > 1 or bool(self.layer_blocks) and self.layer_blocks[0] != self.block

    def to_dict(self) -> dict[str, Any]:
        """The config as plain data shaped like the YAML (what `--impl` targets receive)."""
        data: dict[str, Any] = {"block": asdict(self.block), "run": asdict(self.run)}
        if self.model is not None:
            data["model"] = asdict(self.model)
        if self.layers_differ:
            data["layers"] = [{"indices": list(g.layers), "block": g.overrides}
                              for g in self.layer_groups() if g.overrides]
        return data


@dataclass(frozen=True)
class LayerGroup:
    """Layers whose blocks are identical: their indices, the block, and how it differs from the base
    block (field → value, as in the YAML; empty for layers that are the base block)."""

    layers: tuple[int, ...]
    block: BlockConfig
    overrides: dict[str, Any]
    # count's groups of layers alike in their parameters: the fields whose values differ among these layers
    # (their blocks are not identical, their parameter rows are; `block` is the first layer's, `overrides` the shared)
    varies: tuple[str, ...] = ()

    def describe(self) -> str:
        """'layers 0, 2, 4 (3 layers): sliding_window 0' — for tables and notes."""
        said = ", ".join(f"{k} {_show(v)}" for k, v in self.overrides.items())
        text = (f"{layer_list(self.layers)} ({len(self.layers)} layer{'s' if len(self.layers) > 1 else ''})"
                + (f": {said}" if said else "" if self.varies else ": the base block"))
        if self.varies:
            text += f"{'; ' if said else ': '}alike in parameters, differing in {', '.join(self.varies)}"
        return text


def layer_list(layers: tuple[int, ...] | list[int]) -> str:
    """'layer 3', 'layers 0, 2, 4', 'layers 0-11', or 'layers 0-4, 6-10, 12' (runs of three or more
    as ranges)."""
    if len(layers) == 1:
        return f"layer {layers[0]}"
    runs: list[list[int]] = []
    for layer in layers:
        if runs and layer == runs[-1][-1] + 1:
            runs[-1].append(layer)
        else:
            runs.append([layer])
    parts = [f"{run[0]}-{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)) for run in runs]
    return "layers " + ", ".join(parts)


def _show(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_show(v)}" for k, v in value.items()) + "}"
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else f"{value:g}" \
        if isinstance(value, float) else str(value)


def block_differences(base: BlockConfig, other: BlockConfig) -> dict[str, Any]:
    """The fields of `other` that differ from `base`, as plain data: a nested dataclass (bias,
    rope_scaling) as a mapping of its fields that are not at their defaults, as the YAML writes it."""
    out: dict[str, Any] = {}
    for f in fields(BlockConfig):
        value = getattr(other, f.name)
        if value != getattr(base, f.name):
            out[f.name] = ({g.name: getattr(value, g.name) for g in fields(value) if getattr(value, g.name) != g.default}
                           if hasattr(value, "__dataclass_fields__") else value)
    if not other.rope:  # a block without rotary positions: the RoPE settings it left behind do not apply
        for name in ("rope_layout", "rope_theta", "rope_scaling"):
            out.pop(name, None)
    if out.get("rope") in (0.0, 1.0):  # all or nothing, as the YAML writes it
        out["rope"] = bool(out["rope"])
    return out


# --------------------------------------------------------------------------- loading


def preset_names() -> list[str]:
    """Names of the packaged presets, sorted."""
    folder = resources.files("blockcli.presets")
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


def _read_preset(name: str) -> str:
    return resources.files("blockcli.presets").joinpath(f"{name}.yaml").read_text("utf-8")


HUB_SOURCE = re.compile(r'^\s*source:\s*"?https://huggingface\.co/([^/\s"]+)/([^/\s"]+)/', re.M)


def preset_aliases() -> dict[str, str]:
    """Other names of each preset, lowercased: the Hub repository its hyperparameters were transcribed
    from (`meta-llama/Llama-3.1-8B`) and that repository's name alone (`mistral-7b-v0.1`) — the same
    model under the names people type, never a neighbour. Read from each preset's `about.source` line."""
    aliases: dict[str, str] = {}
    for name in preset_names():
        match = HUB_SOURCE.search(_read_preset(name))
        if match:
            owner, repo = match.group(1).lower(), match.group(2).lower()
            for alias in (f"{owner}/{repo}", repo):
                if alias != name:
                    aliases.setdefault(alias, name)
    return aliases


def find_preset(source: str) -> str | None:
    """The preset `source` names: its name or an alias (preset_aliases), in any case; None if none."""
    key = source.strip().lower()
    names = preset_names()
    if key in names:
        return key
    return preset_aliases().get(key) if key else None


def _tokens(name: str) -> list[str]:
    return [t for t in re.split(r"[-_./\s]+", name.lower()) if t]


def _edits(a: str, b: str) -> int:
    """Levenshtein distance between two short strings."""
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


def preset_typo(source: str) -> str | None:
    """A preset `source` is a misspelling of, or None. Only a slip in a word's letters counts: the same
    number of words, every word holding a digit (a version, a size: `3.1`, `8b`, `v0`) exactly equal, and
    the others at most two edits apart — so `mistral-7b-v0.3` never suggests `mistral-7b` (v0.1) and
    `gpt3` never `gpt2`, while `lama-3-8b` suggests `llama-3-8b`."""
    words = _tokens(source)
    best: tuple[int, str] | None = None
    for name in [*preset_names(), *preset_aliases()]:
        other = _tokens(name)
        if len(other) != len(words):
            continue
        cost = 0
        for a, b in zip(words, other):
            if any(ch.isdigit() for ch in a + b):
                cost += 0 if a == b else 99
            else:
                cost += _edits(a, b) if _edits(a, b) <= min(2, max(1, len(b) // 3)) else 99
        if 0 < cost < 99 and (best is None or cost < best[0]):
            best = (cost, find_preset(name) or name)
    return best[1] if best else None


def load_yaml_config(source: str) -> Config:
    """A config from a preset name or a YAML file.

    blockcli.sources.load_config is the entry point for every kind of source; this is its YAML part.
    """
    path = Path(source)
    exists = path.exists() or path.is_symlink()  # a dangling link or a link loop is a path too
    yaml_path = path.suffix.lower() in (".yaml", ".yml")
    if not exists and not yaml_path:
        # a preset's name or alias in any case; a Hub repository id (owner/name) is one of those aliases
        preset = find_preset(source)
        if preset is not None:
            return parse_config(parse_yaml_text(_read_preset(preset), preset), name=preset)
        if "/" not in source or source.count("/") == 1 and not source.startswith((".", "/", "~")):
            typo = preset_typo(source)
            hint = (f"; did you mean '{typo}'?" if typo else
                    "; `blockcli presets` lists the packaged ones, and any model's Hugging Face config.json "
                    "(or its model folder) works as well")
            raise ConfigError(f"{source}: no such file or preset{hint}")
    return parse_config(parse_yaml_text(read_text_file(path), str(path)), name=str(path))


@contextmanager
def reading(path: Path, expected: str, error: type[InputError] = InputError) -> Iterator[None]:
    """Turn every OS problem of opening or reading `path` into one error line."""
    try:
        yield
    except FileNotFoundError:
        raise error(f"{path}: file not found") from None
    except IsADirectoryError:
        raise error(f"{path}: is a directory, expected {expected}") from None
    except PermissionError:
        raise error(f"{path}: permission denied") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise error(f"{path}: a symbolic link loop (following its links leads back to itself)") from None
        if exc.errno == errno.ENOTDIR:
            raise error(f"{path}: a part of this path is a file, not a folder") from None
        raise error(f"{path}: cannot read ({exc.strerror or exc})") from None


def whole_number(digits: str, option: str) -> int:
    """A string of decimal digits (from an option such as --max-memory) as an int; more than MAX_DIGITS of them
    is an error naming the option, where int() would raise past 4,300 digits."""
    if len(digits) > MAX_DIGITS:
        raise InputError(f"{option}: a number of {len(digits):,} digits, more than any count or size needs "
                         f"(at most {MAX_DIGITS})")
    return int(digits)


def clipped(text: str, limit: int = 60) -> str:
    """What the user typed, for a message: itself, or its start and its length (a message stays one short line)."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


def regular_file(path: Path, expected: str, error: type[InputError] = InputError) -> bool:
    """Whether `path` is a regular file (its links followed): False when nothing at all is there.

    Anything else under that name is an error naming it: a directory, a dangling symbolic link, a link
    loop, a FIFO or a device. An entry that looks like the file but cannot be read is never passed over
    as if it were absent (a CI gate would go green on seeded weights).
    """
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        if not os.path.islink(path):
            return False
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        raise error(f"{path}: a dangling symbolic link (to {target}, which does not exist), expected "
                    f"{expected}") from None
    except OSError as exc:
        with reading(path, expected, error):
            raise exc
    if not stat.S_ISREG(mode):
        raise error(f"{path}: is {file_kind(mode)}, expected {expected} (a regular file)")
    return True


def file_kind(mode: int) -> str:
    """What kind of file `mode` describes, for messages: 'a file', 'a directory', 'a FIFO (named pipe)', …"""
    for test, kind in ((stat.S_ISREG, "a file"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return kind
    return "not a regular file"


def open_regular(path: Path, expected: str, error: type[InputError] = InputError) -> Any:
    """Open `path` for binary reading if it is a regular file.

    A device (/dev/zero), a FIFO or a socket would be read without end or block the open, so the
    file is opened non-blocking and its kind checked on the open descriptor before any read.
    """
    with reading(path, expected, error):
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise error(f"{path}: is {file_kind(mode)}, expected {expected} (a regular file)")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_capped(path: Path, expected: str, limit: int, error: type[InputError] = InputError) -> bytes:
    """The bytes of a regular file, or of standard input for `-`, refusing more than `limit`."""
    name = "standard input" if str(path) == "-" else str(path)
    if str(path) == "-":
        if sys.stdin is None:
            raise error("-: standard input is closed")
        raw = sys.stdin.buffer.read(limit + 1)
    else:
        with open_regular(path, expected, error) as f, reading(path, expected, error):
            raw = f.read(limit + 1)
    if len(raw) > limit:
        raise error(f"{name}: more than {limit // 2**20} MiB, expected {expected}; refused unread")
    return raw


def read_text_file(path: Path, expected: str = "a YAML config", limit: int = MAX_CONFIG_BYTES,
                   error: type[InputError] = ConfigError) -> str:
    """Read a UTF-8 text file (a BOM is allowed); binary or undecodable content is an InputError.

    Only a regular file (or `-`, standard input) of at most `limit` bytes is read.
    """
    raw = read_capped(path, expected, limit, error)
    if b"\x00" in raw:
        raise error(f"{path}: binary file, expected {expected}")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text (byte {exc.start}), expected {expected}") from None


def parse_json(text: str, where: str, error: type[InputError] = ConfigError) -> Any:
    """JSON text → data, every way it can be wrong one error naming `where`: invalid syntax, a key given
    twice in one object (json keeps the last silently), NaN/Infinity (not JSON), an integer of more digits
    than Python converts, nesting deeper than the interpreter's recursion limit."""
    import json

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for key, value in pairs:
            if key in seen:
                raise error(f"{where}: field '{key}' appears twice in one JSON object")
            seen[key] = value
        return seen

    def no_constant(name: str) -> Any:
        raise error(f"{where}: invalid JSON: {name} is not a JSON number")

    try:
        return json.loads(text, object_pairs_hook=no_duplicates, parse_constant=no_constant)
    except InputError:
        raise
    except json.JSONDecodeError as exc:
        raise error(f"{where}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except ValueError:  # Python's limit on digits in an integer literal (4300)
        raise error(f"{where}: invalid JSON: a number has too many digits") from None
    except RecursionError:
        raise error(f"{where}: JSON nested too deeply") from None


def read_yaml(path: Path, expected: str) -> Any:
    """A YAML file's data, read safely, every problem one error line (for files that are not configs)."""
    return parse_yaml_text(read_text_file(path, expected), str(path))
class _Refused(Exception):
    """A YAML node the strict loader refuses; carries the node's position."""

    def __init__(self, message: str, mark: Any) -> None:
        super().__init__(message)
        self.mark = mark


def _strict_loader() -> type:
    """PyYAML's safe loader, minus the YAML 1.1 readings that silently change a value or lose a key.

    `0640` is octal (416) and `1:30` base 60 (90) in YAML 1.1, though nobody writing a config means
    that; a key given twice silently keeps the last value. Each is refused, naming the line.
    """
    import yaml

    class StrictLoader(yaml.SafeLoader):
        def construct_yaml_int(self, node: Any) -> int:
            text = node.value.replace("_", "").lstrip("+-")
            value = super().construct_yaml_int(node)
            if ":" in text:
                raise _Refused(f"'{node.value}' is a base-60 number in YAML 1.1 (read as {value}); "
                               f"write it in decimal, or quote it for a string", node.start_mark)
            if len(text) > 1 and text[0] == "0" and text[1] not in "bx":
                raise _Refused(f"'{node.value}' has a leading zero, which YAML 1.1 reads as octal ({value}); "
                               f"write {text.lstrip('0') or '0'} for decimal", node.start_mark)
            return value

        def construct_yaml_float(self, node: Any) -> float:
            if ":" in node.value:
                raise _Refused(f"'{node.value}' is a base-60 number in YAML 1.1; write it in decimal, "
                               f"or quote it for a string", node.start_mark)
            return super().construct_yaml_float(node)

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            if isinstance(node, yaml.MappingNode):
                seen: dict[Any, Any] = {}
                for key_node, _ in node.value:
                    if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node)
                    if key in seen:
                        raise _Refused(f"key '{key}' appears twice in one mapping (first at line "
                                       f"{seen[key].line + 1})", key_node.start_mark)
                    seen[key] = key_node.start_mark
            return super().construct_mapping(node, deep=deep)

    StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)
    StrictLoader.add_constructor("tag:yaml.org,2002:float", StrictLoader.construct_yaml_float)
    StrictLoader.add_constructor("tag:yaml.org,2002:map", StrictLoader.construct_yaml_map)
    return StrictLoader


def parse_yaml_text(text: str, where: str) -> Any:
    """Parse YAML text strictly (see `_strict_loader`); a file holding no document is refused."""
    import yaml

    try:
        data = yaml.load(text, Loader=_strict_loader())  # noqa: S506 - a SafeLoader subclass
    except _Refused as exc:
        raise ConfigError(f"{where}: line {exc.mark.line + 1}: {exc}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"{where}: YAML syntax error{at}: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{where}: invalid YAML: {problem}") from None
    except RecursionError:
        raise ConfigError(f"{where}: YAML nested too deeply") from None
    except ValueError as exc:  # e.g. an integer with more digits than Python converts
        raise ConfigError(f"{where}: invalid YAML value: {str(exc).splitlines()[0]}") from None
    if data is None:
        raise ConfigError(f"{where}: file is empty (no YAML document); write {{}} for the default block")
    return data


# --------------------------------------------------------------------------- validation


def parse_config(data: Any, name: str = "<mapping>") -> Config:
    """Validate plain data (as loaded from YAML) into a Config; raise ConfigError on the first problem."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{name}: top level must be a mapping with 'block', 'model', 'run' sections, "
                          f"got {_kind(data)}")
    _check_keys(data, ("block", "model", "run", "about", "layers"), "")
    block_data = _section(data, "block")
    block = _parse_block(block_data)
    model_data = data.get("model")
    model = None if model_data is None else _parse_model(_section(data, "model"))
    if model is not None:
        block = _reconcile_rope(block, model)
        if model.positions == "sinusoidal" and model.sinusoidal_layout == "fairseq" and block.d_model < 4:
            raise ConfigError(f"model.sinusoidal_layout: fairseq's frequencies 10000^(−j/(⌊d/2⌋−1)) need "
                              f"block.d_model >= 4, got {block.d_model}")
    _check_rope_scaling(block)
    _check_mla(block)
    layer_blocks = _parse_layers(data.get("layers"), block_data, block, model)
    first = layer_blocks[0] if layer_blocks else block
    if first.mla is not None and first.mla.index_shared:  # GLM-5: a shared layer reuses the layer before's choice
        raise ConfigError(("layers: layer 0" if layer_blocks and block is not first else "block.mla.index_shared: "
                           "the first layer") + " has no earlier layer whose indexer choice it could reuse")
    _check_layer_links(block, model, layer_blocks)
    run = _parse_run(_section(data, "run"))
    about = _parse_about(_section(data, "about"))
    return Config(block=block, model=model, run=run, about=about, name=name, layer_blocks=layer_blocks)


def gemma4_field(block: BlockConfig) -> str | None:
    """The first of Gemma 4's (and Gemma 3n's) block fields this block sets (None: none): their gradients, blockcli's independent
    reference (verify) and its per-layer inputs and shared keys outside a model are not implemented."""
    moe = block.moe
    for name, on in (("per_layer_input", block.per_layer_input), ("kv_from", block.kv_from >= 0),
                     ("k_eq_v", block.k_eq_v), ("v_norm", block.v_norm), ("layer_scalar", block.layer_scalar),
                     ("moe.beside_dense", moe is not None and moe.beside_dense),
                     ("moe.router_norm", moe is not None and moe.router_norm),
                     ("moe.expert_scale", moe is not None and moe.expert_scale),
                     ("altup", block.altup), ("laurel_rank", block.laurel_rank),  # Gemma 3n's
                     ("activation_sparsity", block.activation_sparsity)):
        if on:
            return name
    return None


GEMMA4_NO_BACKWARD = ("gradients through Gemma 4's and Gemma 3n's layers (block.{field} and the rest of their "
                      "mechanisms) are not implemented: verify --grad, train and trace --backward refuse them")


def _check_layer_links(block: BlockConfig, model: ModelConfig | None, layer_blocks: tuple[BlockConfig, ...]) -> None:
    """Gemma 4's links between layers: a layer reusing another's keys and values (`kv_from`) names an earlier layer
    with K/V of its own and of the same shape; every layer's `per_layer_input` is model.per_layer_dim."""
    n = model.n_layers if model is not None else 1
    blocks = layer_blocks or (block,) * n
    where = (lambda i: f"layers (layer {i}): block") if layer_blocks else (lambda i: "block")
    for i, b in enumerate(blocks):
        if b.kv_from >= 0:
            if model is None or b.kv_from >= i:
                raise ConfigError(f"{where(i)}.kv_from: {b.kv_from} is not an earlier layer (a layer reuses the keys "
                                  f"and values of a layer before it)")
            src = blocks[b.kv_from]
            if src.kv_from >= 0 or (src.n_kv_heads, src.head_dim, src.value_dim) != (b.n_kv_heads, b.head_dim, b.value_dim) \
                    or src.sliding_window != b.sliding_window:
                raise ConfigError(f"{where(i)}.kv_from: layer {b.kv_from} must have keys and values of its own with "
                                  f"this layer's n_kv_heads, head_dim and sliding_window")
        ple = model.per_layer_dim if model is not None else 0
        if b.per_layer_input != ple:
            raise ConfigError(f"{where(i)}.per_layer_input: {b.per_layer_input} differs from model.per_layer_dim "
                              f"{ple} (each layer reads its own slice of the per-layer embeddings)")
        if b.altup != blocks[0].altup:  # Gemma 3n: the model splits x_0 into the streams and merges them at the end
            raise ConfigError(f"{where(i)}.altup: {b.altup} differs from layer 0's {blocks[0].altup} (every layer "
                              f"carries the model's N residual streams)")
    if model is not None and model.per_layer_clamp and not model.per_layer_dim:
        raise ConfigError("model.per_layer_clamp: a setting of the per-layer embeddings, which are off "
                          "(model.per_layer_dim 0)")
    shared: dict[int, SharedBlock] = {}  # Zamba2: every use of shared block k has its shapes (one set of weights)
    for i, b in enumerate(blocks):
        if b.shared is None:
            continue
        if model is None:
            raise ConfigError(f"{where(i)}.shared: a shared block is the model's; it needs a model section")
        first = shared.setdefault(b.shared.index, b.shared)
        if first != b.shared:
            raise ConfigError(f"{where(i)}.shared: shared block {b.shared.index} is used with other settings by an "
                              f"earlier layer (every use of one shared block has the same weights)")


def _parse_layers(value: Any, block_data: Mapping[str, Any], base: BlockConfig,
                  model: ModelConfig | None) -> tuple[BlockConfig, ...]:
    """`layers:` — a list of {indices: [...], block: {...}}: each entry's block fields replace the base
    block's for those layers (a nested mapping such as bias or rope_scaling is replaced whole). Every
    field of `block` may be overridden except d_model, the residual width all layers share; each
    layer's block is validated as `block` is. Returns one block per layer, or () when none differ."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ConfigError(f"layers: expected a list of entries {{indices: [...], block: {{...}}}}, got {_kind(value)}")
    if model is None:
        raise ConfigError("layers: per-layer overrides need a model section (model.n_layers)")
    blocks = [base] * model.n_layers
    owner: dict[int, int] = {}
    for n, entry in enumerate(value):
        p = f"layers[{n}]"
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{p}: expected a mapping with 'indices' and 'block', got {_kind(entry)}")
        _check_keys(entry, ("indices", "block"), p + ".")
        indices = entry.get("indices")
        if not isinstance(indices, list) or not indices:
            raise ConfigError(f"{p}.indices: expected a non-empty list of layer indices, got {_kind(indices)}")
        for i in indices:
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < model.n_layers:
                raise ConfigError(f"{p}.indices: expected layer indices 0..{model.n_layers - 1} "
                                  f"(model.n_layers={model.n_layers}), got {_kind(i)}")
            if i in owner:
                raise ConfigError(f"{p}.indices: layer {i} is already overridden by layers[{owner[i]}]"
                                  if owner[i] != n else f"{p}.indices: layer {i} is listed twice")
            owner[i] = n
        overrides = entry.get("block")
        if not isinstance(overrides, Mapping):
            raise ConfigError(f"{p}.block: expected a mapping of block fields to override, got {_kind(overrides)}")
        if "d_model" in overrides:
            raise ConfigError(f"{p}.block.d_model: cannot differ per layer (the residual stream's width is "
                              f"shared by every layer); set block.d_model")
        nope = overrides.get("rope") is False  # layers without positions: the base block's RoPE settings stay behind
        merged = {k: v for k, v in block_data.items() if not nope or k not in ("rope_layout", "rope_scaling")}
        try:
            block = _parse_block({**merged, **overrides})
            block = _reconcile_rope(block, model, nope=nope)
            _check_rope_scaling(block)
        except ConfigError as exc:
            message = str(exc)
            raise ConfigError(f"{p}.{message}" if message.startswith("block") else f"{p}: {message}") from None
        for i in indices:
            blocks[i] = block
    return tuple(blocks) if any(b != base for b in blocks) else ()


def _section(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key}: expected a mapping, got {_kind(value)}")
    return value


def _check_keys(data: Mapping[str, Any], allowed: tuple[str, ...], prefix: str) -> None:
    for key in data:
        if not isinstance(key, str) or key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else f"; expected one of: {', '.join(allowed)}"
            raise ConfigError(f"{prefix}{key}: unknown field{hint}")


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a bool ({value})"
    if isinstance(value, int) and abs(value) > 10**15:
        return f"a {int(value.bit_length() * 0.30103) + 1}-digit integer"
    if isinstance(value, (int, float)):
        return f"a number ({value})"
    if isinstance(value, str):
        return f"a string ('{value}')"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


def _int(data: Mapping[str, Any], key: str, path: str, default: int, minimum: int = 1,
         maximum: int = MAX_SIZE) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer() and math.isfinite(value):
            value = int(value)  # 4096.0 is what a JSON writer sometimes emits
        else:
            raise ConfigError(f"{path}.{key}: expected an integer, got {_kind(value)}")
    if value < minimum:
        raise ConfigError(f"{path}.{key}: expected an integer >= {minimum}, got {value}")
    if value > maximum:
        raise ConfigError(f"{path}.{key}: expected at most {maximum:,}, got {_kind(value)}")
    return value


def _float(data: Mapping[str, Any], key: str, path: str, default: float,
           low: float, high: float, low_open: bool = False, high_open: bool = False) -> float:
    value = data.get(key, default)
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise ConfigError(f"{path}.{key}: expected a number, got {_kind(value)}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{path}.{key}: expected a number, got {_kind(value)}")
    try:
        value = float(value)
    except OverflowError:
        raise ConfigError(f"{path}.{key}: expected a number in range, got {_kind(value)}") from None
    too_low = value <= low if low_open else value < low
    too_high = value >= high if high_open else value > high
    if not math.isfinite(value) or too_low or too_high:
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        raise ConfigError(f"{path}.{key}: expected a number in {interval}, got {value:g}")
    return value


def _bool(data: Mapping[str, Any], key: str, path: str, default: bool) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{path}.{key}: expected true or false, got {_kind(value)}")
    return value


def _choice(data: Mapping[str, Any], key: str, path: str, default: str, allowed: tuple[str, ...]) -> str:
    value = data.get(key, default)
    if not isinstance(value, str) or value not in allowed:
        raise ConfigError(f"{path}.{key}: expected one of {', '.join(allowed)}; got {_kind(value)}")
    return value


def _parse_bias(value: Any) -> Bias:
    if isinstance(value, bool):
        return Bias(value, value, value, value, value)
    if isinstance(value, Mapping):
        _check_keys(value, BIAS_GROUPS, "block.bias.")
        groups = {g: _bool(value, g, "block.bias", True) for g in BIAS_GROUPS if g != "qk_norm"}
        return Bias(**groups, qk_norm=_bool(value, "qk_norm", "block.bias", groups["norm"]))  # qk_norm: as norm
    raise ConfigError(f"block.bias: expected true, false or a mapping of {', '.join(BIAS_GROUPS)}, "
                      f"got {_kind(value)}")


def _parse_gated(data: Mapping[str, Any], activation: str) -> bool:
    """block.gated: true when the activation names a gated form (swiglu), false by default otherwise."""
    named = activation in GATED_NAMES
    gated = _bool(data, "gated", "block", named)
    if named and not gated:
        raise ConfigError(f"block.gated: activation {activation} is a gated MLP's (act(x·W_gate) ⊙ x·W_up); "
                          f"for a plain MLP write activation: {GATED_NAMES[activation]}"
                          if activation != "clamped_swiglu" else
                          "block.gated: activation clamped_swiglu exists only in a gated MLP (it clips the up branch)")
    return gated


def _parse_rope(value: Any) -> float:
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    return _float({"rope": value}, "rope", "block", 0.0, 0.0, 1.0)


def _parse_block(data: Mapping[str, Any]) -> BlockConfig:
    fields = ("d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff", "norm", "norm_eps", "activation",
              "bias", "placement", "rope", "rope_theta", "rope_scaling", "dropout", "attention_dropout",
              "norm_unit_offset", "sliding_window", "qk_norm", "rope_layout", "attention_scale",
              "residual_multiplier", "moe", "mla", "attention_softcap", "norm_scale", "clip_qkv", "alibi",
              "attention_sinks", "swiglu_alpha", "swiglu_limit", "gated", "query_scale", "query_scale_length",
              "qk_norm_after_rope", "linear_attention", "attention_gate", "attention_gate_form", "query_scale_offset", "attention_chunk",
              "mamba", "parts", "clip_after_qk_norm", "short_conv", "attention_in_multiplier",
              "attention_out_multiplier", "mlp_multipliers", "sub_norms", "v_norm", "k_eq_v", "kv_from",
              "layer_scalar", "per_layer_input", "lightning", "attn_skip_scale", "attn_branch_scale",
              "mlp_skip_scale", "mlp_branch_scale", "shared", "altup", "altup_active", "altup_correct_scale",
              "laurel_rank", "activation_sparsity", "moa",
              "differential", "ngpt", "v_head_dim", "value_scale", "query_scale_form", "attention_gate_head_bias",
              "cross_attention")
    _check_keys(data, fields, "block.")
    p = "block"
    d_model = _int(data, "d_model", p, 512)
    n_heads = _int(data, "n_heads", p, 8)
    n_kv_heads = _int(data, "n_kv_heads", p, n_heads)
    mla = _parse_mla(data.get("mla"))
    if mla is not None:  # every head has its own K and V, of the widths the latent sets
        for key, value, meaning in (("n_kv_heads", n_heads, "every head expands its own K and V from the latent"),
                                    ("head_dim", mla.qk_head_dim, "qk_nope_head_dim + qk_rope_head_dim")):
            if key in data and data[key] != value:
                raise ConfigError(f"block.{key}: with block.mla it is {value} ({meaning}); got {_kind(data[key])}")
        n_kv_heads, head_dim = n_heads, mla.qk_head_dim
    elif "head_dim" in data:
        head_dim = _int(data, "head_dim", p, 1)
    elif d_model % n_heads:
        raise ConfigError(f"block.n_heads: d_model={d_model} is not divisible by n_heads={n_heads} "
                          f"(or set block.head_dim explicitly)")
    else:
        head_dim = d_model // n_heads
    if n_kv_heads > n_heads or n_heads % n_kv_heads:
        raise ConfigError(f"block.n_kv_heads: n_heads={n_heads} is not divisible by n_kv_heads={n_kv_heads}")
    rope = _parse_rope(data.get("rope", False))
    block = BlockConfig(
        d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv_heads, head_dim=head_dim,
        d_ff=_int(data, "d_ff", p, 2048),
        norm=_choice(data, "norm", p, "layernorm", NORMS),
        norm_eps=_float(data, "norm_eps", p, 1e-5, 0.0, 1.0, low_open=True),
        activation=(activation := _choice(data, "activation", p, "gelu_tanh", SPELLINGS)),
        gated=_parse_gated(data, activation),
        bias=_parse_bias(data.get("bias", True)),
        placement=_choice(data, "placement", p, "pre", PLACEMENTS),
        rope=rope,
        rope_theta=_float(data, "rope_theta", p, 10000.0, 0.0, 1e12, low_open=True),
        rope_scaling=_parse_rope_scaling(data.get("rope_scaling")),
        dropout=_float(data, "dropout", p, 0.0, 0.0, 1.0, high_open=True),
        norm_unit_offset=_bool(data, "norm_unit_offset", p, False),
        sliding_window=_int(data, "sliding_window", p, 0, minimum=0),
        qk_norm=_choice(data, "qk_norm", p, "none", QK_NORMS),
        attention_dropout=_float(data, "attention_dropout", p, 0.0, 0.0, 1.0, high_open=True),
        rope_layout=_choice(data, "rope_layout", p, "half", ROPE_LAYOUTS),
        attention_scale=_float(data, "attention_scale", p, 0.0, 0.0, 1e6),
        residual_multiplier=_float(data, "residual_multiplier", p, 1.0, 0.0, 1e6, low_open=True),
        moe=_parse_moe(data.get("moe")),
        mla=mla,
        attention_softcap=_float(data, "attention_softcap", p, 0.0, 0.0, 1e6),
        norm_scale=_bool(data, "norm_scale", p, True),
        clip_qkv=_float(data, "clip_qkv", p, 0.0, 0.0, 1e6),
        alibi=_bool(data, "alibi", p, False),
        attention_sinks=_bool(data, "attention_sinks", p, False),
        swiglu_alpha=_float(data, "swiglu_alpha", p, 1.702, 0.0, 1e6, low_open=True),
        swiglu_limit=_float(data, "swiglu_limit", p, 7.0, 0.0, 1e6, low_open=True),
        query_scale=_float(data, "query_scale", p, 0.0, 0.0, 1e6),
        query_scale_length=_int(data, "query_scale_length", p, 0, minimum=0),
        qk_norm_after_rope=_bool(data, "qk_norm_after_rope", p, False),
        linear_attention=_parse_linear_attention(data.get("linear_attention")),
        attention_gate=_bool(data, "attention_gate", p, False),
        attention_gate_form=_choice(data, "attention_gate_form", p, "sigmoid", GATE_FORMS),
        query_scale_offset=_int(data, "query_scale_offset", p, 0, minimum=0),
        attention_chunk=_int(data, "attention_chunk", p, 0, minimum=0),
        mamba=_parse_mamba(data.get("mamba")),
        parts=_choice(data, "parts", p, "both", LAYER_PARTS),
        clip_after_qk_norm=_bool(data, "clip_after_qk_norm", p, False),
        short_conv=_parse_short_conv(data.get("short_conv")),
        attention_in_multiplier=_float(data, "attention_in_multiplier", p, 1.0, 0.0, 1e6, low_open=True),
        attention_out_multiplier=_float(data, "attention_out_multiplier", p, 1.0, 0.0, 1e6, low_open=True),
        mlp_multipliers=_multipliers(data, "mlp_multipliers", p, 2),
        sub_norms=_bool(data, "sub_norms", p, False),
        v_norm=_bool(data, "v_norm", p, False),
        k_eq_v=_bool(data, "k_eq_v", p, False),
        kv_from=_int(data, "kv_from", p, -1, minimum=-1, maximum=MAX_LAYERS),
        layer_scalar=_bool(data, "layer_scalar", p, False),
        cross_attention=_bool(data, "cross_attention", p, False),
        per_layer_input=_int(data, "per_layer_input", p, 0, minimum=0),
        lightning=_parse_lightning(data.get("lightning")),
        moa=_parse_moa(data.get("moa")),
        differential=_parse_differential(data.get("differential")),
        ngpt=_parse_ngpt(data.get("ngpt")),
        **{key: _float(data, key, p, 1.0, -1e6, 1e6) for key in SCALE_KEYS},
        shared=_parse_shared(data.get("shared"), d_model),
        altup=_int(data, "altup", p, 0, minimum=0, maximum=64),
        altup_active=_int(data, "altup_active", p, 0, minimum=0, maximum=63),
        altup_correct_scale=_bool(data, "altup_correct_scale", p, False),
        laurel_rank=_int(data, "laurel_rank", p, 0, minimum=0),
        activation_sparsity=_float(data, "activation_sparsity", p, 0.0, 0.0, 1.0, high_open=True),
        v_head_dim=_int(data, "v_head_dim", p, 0, minimum=0),
        value_scale=_float(data, "value_scale", p, 1.0, 0.0, 1e6, low_open=True),
        query_scale_form=_choice(data, "query_scale_form", p, "log", QUERY_SCALE_FORMS),
        attention_gate_head_bias=_bool(data, "attention_gate_head_bias", p, False),
    )
    _check_gemma3n(block)
    if block.shared is not None and (block.parts != "mixer" or not isinstance(block.mamba, Mamba2)
                                     or block.norm != "rmsnorm"):
        raise ConfigError("block.shared: a shared transformer block runs before a Mamba-2 layer of its mixer alone "
                          "(Zamba2's): it needs block.mamba of version 2, parts mixer and norm rmsnorm")
    _check_moa(block)
    _check_differential(block)
    _check_ngpt(block)
    plain_attention = block.mla is None and block.linear_attention is None and block.mamba is None \
        and block.short_conv is None and block.lightning is None and block.moa is None and block.parts != "mlp"
    _check_values(block, plain_attention)
    for key, off in (("v_norm", False), ("k_eq_v", False), ("kv_from", -1)):
        if getattr(block, key) != off and not plain_attention:
            raise ConfigError(f"block.{key}: a setting of multi-head attention (Gemma 4); this layer has none")
    if block.k_eq_v and block.kv_from >= 0:
        raise ConfigError("block.k_eq_v: a layer reusing another layer's keys and values (block.kv_from) has no "
                          "K projection of its own to reuse as values")
    gemma4 = block.k_eq_v or block.kv_from >= 0 or block.v_norm
    if gemma4 and (block.clip_qkv or block.qk_norm not in ("none", "head") or block.qk_norm_after_rope
                   or block.attention_gate or block.query_scale or block.attention_sinks):
        raise ConfigError(f"block.{'k_eq_v' if block.k_eq_v else 'kv_from' if block.kv_from >= 0 else 'v_norm'}: "
                          f"Gemma 4's attention; not with clip_qkv, qk_norm other than head, qk_norm_after_rope, "
                          f"attention_gate, query_scale or attention_sinks (no model has them together)")
    if block.moe is not None and block.moe.beside_dense and not block.sandwich:
        raise ConfigError("block.moe.beside_dense: Gemma 4's experts beside the dense MLP sit in a sandwich block "
                          "(placement: sandwich)")
    if block.per_layer_input and block.parts != "both":
        raise ConfigError("block.per_layer_input: the per-layer input joins after the MLP of a layer of both parts")
    plain_sandwich = block.placement == "sandwich" and block.ngpt is None and gemma4_field(block) is None
    if any(getattr(block, key) != 1.0 for key in SCALE_KEYS) and (
            not (block.placement in ("pre", "normed_residual") or plain_sandwich) or block.parts != "both"):
        key = next(key for key in SCALE_KEYS if getattr(block, key) != 1.0)
        raise ConfigError(f"block.{key}: the skip and branch scales are read by placement pre or normed_residual "
                          f"(MiniMax's) or sandwich (Beam's; not with nGPT's or Gemma 3n/4's mechanisms) with both "
                          f"parts; placement is {block.placement}, parts {block.parts}")
    if block.lightning is not None:  # softmax attention's settings: a lightning layer has none of them
        mixers = ("mla", "linear_attention", "mamba", "short_conv")
        other = next((key for key in mixers if getattr(block, key) is not None), None)
        if other is not None:
            raise ConfigError(f"block.lightning: a layer has one token mixer; block.{other} is set too")
        for key, off in (("qk_norm", "none"), ("attention_gate", False), ("attention_sinks", False),
                         ("sliding_window", 0), ("alibi", False), ("clip_qkv", 0.0), ("attention_softcap", 0.0),
                         ("attention_chunk", 0)):
            if getattr(block, key) != off:
                raise ConfigError(f"block.{key}: a setting of softmax attention; this layer mixes tokens by "
                                  f"lightning attention (block.lightning)")
    if block.linear_attention is not None:  # softmax attention's settings: a Gated DeltaNet layer has none of them
        for key, off in (("mla", None), ("qk_norm", "none"), ("attention_gate", False), ("attention_sinks", False),
                         ("sliding_window", 0), ("alibi", False), ("clip_qkv", 0.0), ("attention_softcap", 0.0),
                         ("attention_chunk", 0)):
            if getattr(block, key) != off:
                raise ConfigError(f"block.{key}: a setting of softmax attention; this layer mixes tokens by "
                                  f"Gated DeltaNet (block.linear_attention)")
    if block.qk_norm_after_rope and block.qk_norm not in ("head", "head_unscaled"):
        raise ConfigError(f"block.qk_norm_after_rope: a setting of qk_norm head or head_unscaled (each head's d_h "
                          f"after RoPE, as HunYuan's and Llama 4's); qk_norm is {block.qk_norm}")
    if block.attention_gate_form != "sigmoid" and not block.attention_gate:
        raise ConfigError("block.attention_gate_form: a setting of block.attention_gate, which is off")
    if block.query_scale_offset and not block.query_scale:
        raise ConfigError("block.query_scale_offset: a setting of block.query_scale, which is off")
    if block.query_scale_form != "log" and not block.query_scale:
        raise ConfigError("block.query_scale_form: a setting of block.query_scale, which is off")
    if block.attention_gate_head_bias and (not block.attention_gate or block.gate_per_head):
        raise ConfigError("block.attention_gate_head_bias: a bias per head inside a gate of one value per channel "
                          "(attention_gate with attention_gate_form sigmoid or softplus)")
    if block.attention_chunk and block.sliding_window:
        raise ConfigError("block.attention_chunk: chunked attention and a sliding window both limit the keys; "
                          "no model has both; pick one")
    if block.attention_chunk and block.mla is not None:
        raise ConfigError("block.attention_chunk: not with block.mla (no latent-attention model chunks its keys)")
    if block.moe is not None and block.moe.scale_input and block.bias.mlp:
        raise ConfigError("block.moe.scale_input: the routing weight scales each expert's input, which needs experts "
                          "without biases (an unchosen expert's zero input must give zero, as Llama 4's do); set "
                          "block.bias.mlp false")
    if block.mamba is not None and (block.mla is not None or block.linear_attention is not None):
        raise ConfigError(f"block.mamba: a layer has one token mixer; block."
                          f"{'mla' if block.mla is not None else 'linear_attention'} is set too")
    if block.short_conv is not None and (block.mamba is not None or block.mla is not None
                                         or block.linear_attention is not None):
        raise ConfigError("block.short_conv: a layer has one token mixer; block."
                          f"{'mamba' if block.mamba is not None else 'mla' if block.mla is not None else 'linear_attention'}"
                          " is set too")
    if block.sub_norms:
        other = next((key for key, off in (("mla", None), ("linear_attention", None), ("mamba", None),
                                           ("short_conv", None), ("moe", None), ("attention_gate", False))
                      if getattr(block, key) != off and not (key == "attention_gate" and block.ngpt)), None)
        if other is not None:
            raise ConfigError(f"block.sub_norms: the norms before W_O and W_down of softmax attention and a dense "
                              f"MLP (BitNet's); not with block.{other}")
        if block.parts != "both":
            raise ConfigError(f"block.sub_norms: a layer of both parts (attention and MLP); parts is {block.parts}")
    if block.parts == "hybrid" and (not isinstance(block.mamba, Mamba2) or block.mla is not None or block.linear_attention
                                    is not None or block.short_conv is not None or block.placement != "pre"):
        raise ConfigError("block.parts: hybrid is attention and a Mamba-2 mixer side by side in a pre-norm block: it "
                          "needs block.mamba of version 2 (and neither mla, linear_attention nor short_conv) and placement pre")
    if block.parts != "hybrid" and (block.attention_in_multiplier != 1.0 or block.attention_out_multiplier != 1.0):
        raise ConfigError("block.attention_in_multiplier: a setting of parts hybrid (Falcon-H1's attention beside its "
                          "Mamba-2 mixer); parts is " + block.parts)
    if isinstance(block.mamba, Mamba2) and block.parts != "hybrid" and block.mamba.out_multiplier != 1.0:
        raise ConfigError("block.mamba.out_multiplier: a setting of parts hybrid (Falcon-H1's Mamba-2 mixer beside "
                          "attention); parts is " + block.parts)
    if block.mlp_multipliers != (1.0, 1.0) and (block.moe is not None or not block.gated
                                                or block.activation in ("xielu", "clamped_swiglu")
                                                or block.placement != "pre"):
        raise ConfigError("block.mlp_multipliers: a setting of a dense gated MLP in a pre-norm block (Falcon-H1's); "
                          "not with block.moe, a plain MLP, xielu or clamped_swiglu, or placement " + block.placement)
    if block.parts not in ("both", "hybrid") and block.placement != "pre":
        raise ConfigError(f"block.parts: a layer of one part ({block.parts}) is pre-norm (its norm, the part, the "
                          f"residual add); placement is {block.placement}")
    if block.cross_attention and (block.parts != "both" or block.placement != "pre" or block.qk_norm != "head" or any(
            (block.mla, block.mamba, block.short_conv, block.linear_attention, block.lightning, block.moa, block.moe,
             block.differential, block.ngpt, block.shared, block.altup, block.kv_from >= 0))):
        raise ConfigError("block.cross_attention: Mllama's cross-attention layer is a pre-norm layer of both parts "
                          "with plain attention, qk_norm head and a dense MLP")
    if block.clip_after_qk_norm and (block.qk_norm != "projection" or not block.clip_qkv):
        raise ConfigError(f"block.clip_after_qk_norm: a setting of clip_qkv with qk_norm projection (OLMoE clamps "
                          f"the normalised projections); clip_qkv is {block.clip_qkv:g}, qk_norm {block.qk_norm}")
    if block.query_scale and not block.query_scale_length:
        raise ConfigError("block.query_scale_length: required with block.query_scale (the positions per step of "
                          "the query scale, Ministral 3's original_max_position_embeddings)")
    if block.query_scale_length and not block.query_scale:
        raise ConfigError("block.query_scale_length: a setting of block.query_scale, which is off")
    if block.query_scale and block.mla is not None:
        raise ConfigError("block.query_scale: not with block.mla (no latent-attention model scales its queries)")
    if block.activation == "xielu" and (block.moe is not None or block.parts == "mixer"):
        raise ConfigError("block.activation: xielu's learned scalars are the dense MLP's (Apertus); not with block.moe"
                          " or a layer without an MLP")
    for key, default in (("swiglu_alpha", 1.702), ("swiglu_limit", 7.0)):  # the default is harmless anywhere
        if getattr(block, key) != default and block.activation != "clamped_swiglu":
            raise ConfigError(f"block.{key}: a setting of activation clamped_swiglu; the activation is "
                              f"{block.activation}")
    if block.mla is not None and (not block.norm_scale or block.clip_qkv):  # MLA has no Q/K/V projections to clip
        raise ConfigError(f"block.{'clip_qkv' if block.clip_qkv else 'norm_scale'}: not with block.mla (its latent "
                          f"norms have scales, and it has no Q, K, V projections to clamp)")
    if block.alibi and block.rope:
        raise ConfigError("block.alibi: ALiBi and rotary positions both position the scores; pick one")
    if block.alibi and block.attention_softcap:
        raise ConfigError("block.attention_softcap: ALiBi's biases and a soft cap on the same scores have no reference order (no model has both); pick one")
    if rope and block.rope_dims == 0:
        raise ConfigError(f"block.rope: a fraction of {rope:g} of head_dim={head_dim} rotates no "
                          f"dimension pair; expected at least 2/head_dim")
    return _even_rotation(block)


def _even_rotation(block: BlockConfig) -> BlockConfig:
    """RoPE turns pairs of dimensions: a whole head of odd width cannot be rotated (transformers' config
    refuses it too, 'RoPE requires an even rotary dimension')."""
    if block.rope == 1.0 and block.mla is None and block.head_dim % 2:
        raise ConfigError(f"block.rope: RoPE rotates pairs of dimensions and the whole head is rotated, but "
                          f"head_dim={block.head_dim} is odd; expected an even head_dim (or a fraction rotating "
                          f"an even number of its dimensions)")
    return block


def _parse_moe(value: Any) -> MoE | None:
    if value is None:
        return None
    p = "block.moe"
    if not isinstance(value, Mapping):
        raise ConfigError(f"{p}: expected a mapping with n_experts, top_k and d_expert, got {_kind(value)}")
    _check_keys(value, tuple(f.name for f in fields(MoE)), p + ".")
    for key in ("n_experts", "top_k", "d_expert"):
        if key not in value:
            raise ConfigError(f"{p}.{key}: required")
    n_experts = _int(value, "n_experts", p, 1, maximum=MAX_EXPERTS)
    top_k = _int(value, "top_k", p, 1)
    if top_k > n_experts:
        raise ConfigError(f"{p}.top_k: expected at most n_experts={n_experts}, got {top_k}")
    n_groups = _int(value, "n_groups", p, 1)
    if n_experts % n_groups:
        raise ConfigError(f"{p}.n_groups: n_experts={n_experts} is not divisible by n_groups={n_groups}")
    top_groups = _int(value, "top_groups", p, n_groups)
    if top_groups > n_groups:
        raise ConfigError(f"{p}.top_groups: expected at most n_groups={n_groups}, got {top_groups}")
    group_score = _choice(value, "group_score", p, "max", GROUP_SCORES)
    if group_score == "top2_sum" and n_experts // n_groups < 2:
        raise ConfigError(f"{p}.group_score: top2_sum needs at least 2 experts per group, got "
                          f"{n_experts // n_groups}")
    if top_k > top_groups * (n_experts // n_groups):
        raise ConfigError(f"{p}.top_k: {top_k} experts cannot be chosen from {top_groups} group(s) of "
                          f"{n_experts // n_groups}")
    moe = MoE(
        n_experts=n_experts, top_k=top_k, d_expert=_int(value, "d_expert", p, 1),
        scoring=_choice(value, "scoring", p, "softmax", ROUTER_SCORINGS),
        order=_choice(value, "order", p, "softmax_topk", ROUTER_ORDERS),
        renormalize=_bool(value, "renormalize", p, False),
        renormalize_eps=_float(value, "renormalize_eps", p, 1e-20, 0.0, 1.0, low_open=False),
        routed_scaling=_float(value, "routed_scaling", p, 1.0, 0.0, 1e6, low_open=True),
        n_groups=n_groups, top_groups=top_groups, group_score=group_score,
        selection_bias=_bool(value, "selection_bias", p, False),
        selection_bias_frozen=_bool(value, "selection_bias_frozen", p, False),
        selection_on=_choice(value, "selection_on", p, "scores", SELECTION_ON),
        sparsemixer_eps=_float(value, "sparsemixer_eps", p, 0.01, 0.0, 1e6, low_open=False),
        logit_bias=_bool(value, "logit_bias", p, False),
        d_shared=_int(value, "d_shared", p, 0, minimum=0),
        shared_gate=_bool(value, "shared_gate", p, False),
        aux_loss_coef=_float(value, "aux_loss_coef", p, 0.0, 0.0, 1e6),
        routed_bias=_bool(value, "routed_bias", p, True),
        scale_input=_bool(value, "scale_input", p, False),
        beside_dense=_bool(value, "beside_dense", p, False),
        router_norm=_bool(value, "router_norm", p, False),
        expert_scale=_bool(value, "expert_scale", p, False),
        out_bias=_bool(value, "out_bias", p, False),
        out_norm=_bool(value, "out_norm", p, False),
    )
    if moe.order == "topk_softmax" and (moe.scoring != "softmax" or moe.selection_bias or moe.n_groups > 1):
        raise ConfigError(f"{p}.order: topk_softmax softmaxes the k chosen logits; it takes scoring softmax, "
                          f"no selection_bias and one group")
    if moe.order == "sparsemixer" and (moe.top_k != 2 or moe.scoring != "softmax" or moe.selection_bias
                                       or moe.n_groups > 1 or moe.renormalize):
        raise ConfigError(f"{p}.order: sparsemixer chooses 2 experts in two softmax stages; it takes top_k 2, "
                          f"scoring softmax, no selection_bias, one group and renormalize false")
    if moe.selection_bias_frozen and not moe.selection_bias:
        raise ConfigError(f"{p}.selection_bias_frozen: says how the selection bias is stored, but selection_bias "
                          f"is false (no selection bias)")
    if moe.selection_on == "logits" and (not moe.selection_bias or moe.n_groups > 1 or moe.order != "softmax_topk"):
        raise ConfigError(f"{p}.selection_on: logits adds the selection bias to the logits for the choice; it takes "
                          f"selection_bias true, one group and order softmax_topk")
    if moe.out_bias and (moe.d_shared or moe.beside_dense):
        raise ConfigError(f"{p}.out_bias: JetMoE's mixture bias sits on a mixture of routed experts alone (no shared "
                          f"expert, not beside a dense MLP)")
    if moe.out_norm and (moe.out_bias or moe.beside_dense):
        raise ConfigError(f"{p}.out_norm: A.X-K1's norm of the mixture's output sits on routed (and shared) experts "
                          f"alone (no out_bias, not beside a dense MLP)")
    if moe.shared_gate and not moe.d_shared:
        raise ConfigError(f"{p}.shared_gate: gates the shared expert, but d_shared is 0 (no shared expert)")
    return moe


def _nested_section(value: Any, cls: type, p: str, required: tuple[str, ...], what: str) -> None:
    """A nested block section (`mla`, `mamba`, `linear_attention`): a mapping of `cls`'s fields, with the
    `required` ones."""
    if not isinstance(value, Mapping):
        optional = ", ".join(f.name for f in fields(cls) if f.name not in required)
        wanted = f"{', '.join(required)} (and {optional})" if required else optional
        raise ConfigError(f"{p}: expected a mapping of {wanted}, got {_kind(value)}")
    _check_keys(value, tuple(f.name for f in fields(cls)), p + ".")
    for key in required:
        if key not in value:
            raise ConfigError(f"{p}.{key}: required for {what}")


def _parse_mla(value: Any) -> LatentAttention | None:
    if value is None:
        return None
    p = "block.mla"
    _nested_section(value, LatentAttention, p, ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"),
                    "latent attention")
    mla = LatentAttention(
        kv_lora_rank=_int(value, "kv_lora_rank", p, 1), qk_nope_head_dim=_int(value, "qk_nope_head_dim", p, 1),
        qk_rope_head_dim=_int(value, "qk_rope_head_dim", p, 2), v_head_dim=_int(value, "v_head_dim", p, 1),
        q_lora_rank=_int(value, "q_lora_rank", p, 0, minimum=0),
        latent_norm_eps=_float(value, "latent_norm_eps", p, 1e-6, 0.0, 1.0, low_open=True),
        **_parse_indexer(value, p))
    if mla.qk_rope_head_dim % 2:
        raise ConfigError(f"{p}.qk_rope_head_dim: RoPE turns pairs of dims; expected an even number, "
                          f"got {mla.qk_rope_head_dim}")
    if mla.index_heads and not mla.q_lora_rank:
        raise ConfigError(f"{p}.index_heads: the indexer's queries come from the query latent; set q_lora_rank > 0")
    if mla.index_heads and mla.index_head_dim < mla.qk_rope_head_dim:
        raise ConfigError(f"{p}.index_head_dim: the indexer rotates its first qk_rope_head_dim "
                          f"({mla.qk_rope_head_dim}) dims; expected at least that, got {mla.index_head_dim}")
    return mla


def _parse_linear_attention(value: Any) -> GatedDeltaNet | None:
    if value is None:
        return None
    p = "block.linear_attention"
    _nested_section(value, GatedDeltaNet, p, (), "Gated DeltaNet")
    mixer = GatedDeltaNet(
        key_heads=_int(value, "key_heads", p, 16), value_heads=_int(value, "value_heads", p, 32),
        key_head_dim=_int(value, "key_head_dim", p, 128), value_head_dim=_int(value, "value_head_dim", p, 128),
        conv_kernel=_int(value, "conv_kernel", p, 4),
        norm_eps=_float(value, "norm_eps", p, 1e-6, 0.0, 1.0, low_open=True),
        beta_scale=_float(value, "beta_scale", p, 1.0, 0.0, 2.0, low_open=True),
        split_conv=_bool(value, "split_conv", p, False),
        decay=_choice(value, "decay", p, "head", DELTANET_DECAYS))
    if mixer.per_channel and (mixer.key_heads != mixer.value_heads or mixer.key_head_dim != mixer.value_head_dim):
        raise ConfigError(f"{p}.decay: channel (Kimi Delta Attention) has as many key as value heads, of one width; "
                          f"got {mixer.key_heads} × {mixer.key_head_dim} key and {mixer.value_heads} × "
                          f"{mixer.value_head_dim} value heads")
    if mixer.value_heads % mixer.key_heads:
        raise ConfigError(f"{p}.value_heads: each key head is read by the same number of value heads; "
                          f"key_heads={mixer.key_heads} does not divide value_heads={mixer.value_heads}")
    return mixer
SCALE_KEYS = ("attn_skip_scale", "attn_branch_scale", "mlp_skip_scale", "mlp_branch_scale")


def _parse_lightning(value: Any) -> Lightning | None:
    if value is None:
        return None
    p = "block.lightning"
    _nested_section(value, Lightning, p, (), "lightning attention")
    return Lightning(decay_scale=_float(value, "decay_scale", p, 1.0, 0.0, 1e6, low_open=True),
                     block_size=_int(value, "block_size", p, 256),
                     norm_eps=_float(value, "norm_eps", p, 1e-6, 0.0, 1.0, low_open=True))




def _parse_moa(value: Any) -> MixtureOfAttention | None:
    if value is None:
        return None
    p = "block.moa"
    _nested_section(value, MixtureOfAttention, p, ("n_experts", "top_k"), "a mixture of attention heads")
    n_experts = _int(value, "n_experts", p, 8, maximum=MAX_EXPERTS)
    return MixtureOfAttention(n_experts=n_experts, top_k=_int(value, "top_k", p, 2, maximum=n_experts))


def _parse_differential(value: Any) -> Differential | None:
    if value is None:
        return None
    p = "block.differential"
    _nested_section(value, Differential, p, (), "differential attention")
    return Differential(lambda_init=_float(value, "lambda_init", p, 0.2, -1e6, 1e6))


def _parse_ngpt(value: Any) -> NGPT | None:
    if value is None:
        return None
    p = "block.ngpt"
    _nested_section(value, NGPT, p, (), "nGPT's normalized block")
    return NGPT(**{key: _float(value, key, p, 1.0, 0.0, 1e9, low_open=True) for key in ("alpha", "qk", "gate", "mlp")})


def _check_ngpt(block: BlockConfig) -> None:
    """nGPT's block (Dory's) is a sandwich block of softmax attention with its sigmoid gate and a gated dense MLP,
    its norms l2norm without scales, the heads' outputs and the MLP's hidden normalised too (sub_norms); l2norm is
    its norm only."""
    if block.ngpt is None:
        if block.norm == "l2norm":
            raise ConfigError("block.norm: l2norm is the norm of nGPT's block (block.ngpt, Dory's); other blocks take "
                              "layernorm or rmsnorm")
        return
    for key, want in (("placement", "sandwich"), ("norm", "l2norm"), ("norm_scale", False), ("sub_norms", True),
                      ("attention_gate", True), ("attention_gate_form", "sigmoid"), ("gated", True),
                      ("parts", "both")):
        if getattr(block, key) != want:
            raise ConfigError(f"block.ngpt: nGPT's block needs block.{key} {want}, got {getattr(block, key)}")
    other = next((key for key in ("mla", "linear_attention", "mamba", "short_conv", "lightning", "moa",
                                  "differential", "moe") if getattr(block, key) is not None), None)
    if other is not None:
        raise ConfigError(f"block.ngpt: nGPT's block has softmax attention and a dense MLP; block.{other} is set")
    if block.qk_norm not in ("none", "head_unscaled") or block.qk_norm_after_rope:
        raise ConfigError("block.qk_norm: nGPT's queries and keys are normalised per head before RoPE, without a "
                          "scale (head_unscaled), or not at all")


def _check_values(block: BlockConfig, plain_attention: bool) -> None:
    """v_head_dim and value_scale (MiMo-V2-Flash's values) are settings of plain multi-head attention, without the
    variants that read each head's output as d_h wide (gates, sub-norms, differential pairs, nGPT, Gemma 4's)."""
    for key, off in (("v_head_dim", 0), ("value_scale", 1.0)):
        if getattr(block, key) == off:
            continue
        if not plain_attention or block.differential is not None or block.parts == "hybrid" \
                or block.shared is not None:
            raise ConfigError(f"block.{key}: a setting of plain multi-head attention (MiMo-V2-Flash's values); "
                              f"this layer's token mixer is another")
        other = next((name for name, on in (("attention_gate", block.attention_gate), ("sub_norms", block.sub_norms),
                                            ("ngpt", block.ngpt is not None), ("v_norm", block.v_norm),
                                            ("k_eq_v", block.k_eq_v), ("kv_from", block.kv_from >= 0)) if on), None)
        if other is not None:
            raise ConfigError(f"block.{key}: not with block.{other} (no model has them together)")


def _check_differential(block: BlockConfig) -> None:
    """Differential attention is DiffLlama's softmax attention with paired heads: an even number of K/V heads, and
    none of the other mixers or attention variants."""
    if block.differential is None:
        return
    if block.n_kv_heads % 2:
        raise ConfigError(f"block.n_kv_heads: differential attention splits the values into two halves of K/V heads; "
                          f"expected an even n_kv_heads, got {block.n_kv_heads}")
    other = next((key for key in ("mla", "linear_attention", "mamba", "short_conv", "lightning", "moa")
                  if getattr(block, key) is not None), None)
    if other is not None:
        raise ConfigError(f"block.differential: a layer has one token mixer; block.{other} is set too")
    if block.parts != "both":
        raise ConfigError(f"block.differential: differential attention sits in a layer of both parts; parts is "
                          f"{block.parts}")
    for key, off in (("qk_norm", "none"), ("attention_gate", False), ("attention_sinks", False), ("alibi", False),
                     ("clip_qkv", 0.0), ("sub_norms", False), ("query_scale", 0.0), ("attention_softcap", 0.0),
                     ("attention_dropout", 0.0), ("kv_from", -1), ("k_eq_v", False), ("v_norm", False)):
        if getattr(block, key) != off:
            raise ConfigError(f"block.{key}: not with block.differential (DiffLlama's differential attention has no "
                              f"{key})")


def _check_moa(block: BlockConfig) -> None:
    """A mixture of attention heads is JetMoE's plain attention with routed W_Q/W_O: its heads are top_k·n_kv_heads,
    and none of the other mixers or attention variants go with it."""
    m = block.moa
    if m is None:
        return
    if block.n_heads != m.top_k * block.n_kv_heads:
        raise ConfigError(f"block.n_heads: with block.moa it is moa.top_k · n_kv_heads = {m.top_k * block.n_kv_heads} "
                          f"(each chosen expert's n_kv_heads query heads); got {block.n_heads}")
    other = next((key for key in ("mla", "linear_attention", "mamba", "short_conv", "lightning")
                  if getattr(block, key) is not None), None)
    if other is not None:
        raise ConfigError(f"block.moa: a layer has one token mixer; block.{other} is set too")
    if block.parts != "both":
        raise ConfigError(f"block.moa: a mixture of attention heads sits in a layer of both parts; parts is {block.parts}")
    for key, off in (("qk_norm", "none"), ("attention_gate", False), ("attention_sinks", False), ("alibi", False),
                     ("clip_qkv", 0.0), ("sub_norms", False), ("query_scale", 0.0)):
        if getattr(block, key) != off:
            raise ConfigError(f"block.{key}: not with block.moa (JetMoE's mixture of attention heads has no {key})")
    if block.bias.qkv or block.bias.out:
        raise ConfigError("block.bias: with block.moa the K/V projection and the experts' projections have no biases "
                          "(the mixture's one bias is its own, moa_bias); set bias.qkv and bias.out false")


def _multipliers(data: Mapping[str, Any], key: str, p: str, n: int) -> tuple[float, ...]:
    """A list of n positive numbers (ones by default)."""
    value = data.get(key)
    if value is None:
        return (1.0,) * n
    if (not isinstance(value, (list, tuple)) or len(value) != n
            or any(isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1e6 for v in value)):
        raise ConfigError(f"{p}.{key}: expected a list of {n} numbers in (0, 1e6), got {_kind(value)}")
    return tuple(float(v) for v in value)


def _parse_mamba(value: Any) -> Mamba1 | Mamba2 | None:
    if value is None:
        return None
    p = "block.mamba"
    if isinstance(value, Mapping) and "version" in value:
        version = value["version"]
        if version not in (1, 2) or isinstance(version, bool):
            raise ConfigError(f"{p}.version: expected 1 (Mamba-1, the selective scan) or 2 (Mamba-2, SSD), got "
                              f"{_show(version)}")
        if version == 1:
            return _parse_mamba1(value)
        value = {k: v for k, v in value.items() if k != "version"}
    _nested_section(value, Mamba2, p, ("n_heads", "head_dim", "d_state"), "a Mamba-2 mixer")
    mamba = Mamba2(n_heads=_int(value, "n_heads", p, 1), head_dim=_int(value, "head_dim", p, 1),
                   d_state=_int(value, "d_state", p, 1), n_groups=_int(value, "n_groups", p, 1),
                   conv_kernel=_int(value, "conv_kernel", p, 4), conv_bias=_bool(value, "conv_bias", p, True),
                   proj_bias=_bool(value, "proj_bias", p, False),
                   norm_eps=_float(value, "norm_eps", p, 1e-6, 0.0, 1.0, low_open=True),
                   dt_min=_float(value, "dt_min", p, 0.0, 0.0, 1e6),
                   norm=_choice(value, "norm", p, "gated", MAMBA_NORMS),
                   out_bias=None if value.get("out_bias") is None else _bool(value, "out_bias", p, False),
                   in_multiplier=_float(value, "in_multiplier", p, 1.0, 0.0, 1e6, low_open=True),
                   multipliers=_multipliers(value, "multipliers", p, 5),
                   out_multiplier=_float(value, "out_multiplier", p, 1.0, 0.0, 1e6, low_open=True))
    if mamba.n_heads % mamba.n_groups:
        raise ConfigError(f"{p}.n_groups: {mamba.n_groups} does not divide n_heads={mamba.n_heads} (each group's "
                          f"heads share its B and C)")
    return mamba


def _parse_mamba1(value: Mapping[str, Any]) -> Mamba1:
    p = "block.mamba"
    _nested_section(value, Mamba1, p, ("d_inner", "d_state", "dt_rank"), "a Mamba-1 mixer")
    norm = value.get("bc_norm", "none")
    if norm not in MAMBA1_NORMS:
        raise ConfigError(f"{p}.bc_norm: expected one of {', '.join(MAMBA1_NORMS)}, got {_show(norm)}")
    return Mamba1(d_inner=_int(value, "d_inner", p, 1), d_state=_int(value, "d_state", p, 1),
                  dt_rank=_int(value, "dt_rank", p, 1), conv_kernel=_int(value, "conv_kernel", p, 4),
                  conv_bias=_bool(value, "conv_bias", p, True), proj_bias=_bool(value, "proj_bias", p, False),
                  bc_norm=norm, bc_norm_eps=_float(value, "bc_norm_eps", p, 1e-6, 0.0, 1.0, low_open=True))
def _parse_indexer(value: Mapping[str, Any], p: str) -> dict[str, Any]:
    """block.mla's DeepSeek Sparse Attention indexer fields: all three sizes, or none of them."""
    given = [k for k in ("index_heads", "index_head_dim", "index_topk") if value.get(k)]
    if not given:
        for key, neutral in (("index_rope_layout", "half"), ("index_shared", False)):
            if value.get(key) not in (None, neutral):
                raise ConfigError(f"{p}.{key}: only with an indexer (index_heads > 0)")
        return {}
    missing = [k for k in ("index_heads", "index_head_dim", "index_topk") if k not in given]
    if missing:
        raise ConfigError(f"{p}.{missing[0]}: required with {given[0]} (the indexer needs index_heads, "
                          f"index_head_dim and index_topk)")
    layout = value.get("index_rope_layout", "half")
    if layout not in ("half", "interleaved"):
        raise ConfigError(f"{p}.index_rope_layout: expected half or interleaved, got {_kind(layout)}")
    shared = value.get("index_shared", False)
    if not isinstance(shared, bool):
        raise ConfigError(f"{p}.index_shared: expected true or false, got {_kind(shared)}")
    return {"index_heads": _int(value, "index_heads", p, 0, minimum=1),
            "index_head_dim": _int(value, "index_head_dim", p, 0, minimum=2),
            "index_topk": _int(value, "index_topk", p, 0, minimum=1), "index_rope_layout": layout,
            "index_shared": shared}


# the shared MLP's act(gate) ⊙ up: any activation without learned scalars or a gated form of its own
SHARED_ACTIVATIONS = tuple(name for name in SPELLINGS if name not in GATED_NAMES and name != "xielu")


def _parse_shared(value: Any, d_model: int) -> SharedBlock | None:
    if value is None:
        return None
    p = "block.shared"
    _nested_section(value, SharedBlock, p, (), "a shared transformer block")
    n_heads = _int(value, "n_heads", p, 8)
    n_kv_heads = _int(value, "n_kv_heads", p, n_heads)
    if n_heads % n_kv_heads:
        raise ConfigError(f"{p}.n_kv_heads: n_heads={n_heads} is not divisible by n_kv_heads={n_kv_heads}")
    if "head_dim" not in value and 2 * d_model % n_heads:
        raise ConfigError(f"{p}.n_heads: 2·d_model={2 * d_model} is not divisible by n_heads={n_heads} (or set "
                          f"{p}.head_dim)")
    shared = SharedBlock(index=_int(value, "index", p, 0, minimum=0, maximum=MAX_LAYERS),
                         n_heads=n_heads, n_kv_heads=n_kv_heads,
                         head_dim=_int(value, "head_dim", p, 2 * d_model // n_heads),
                         d_ff=_int(value, "d_ff", p, 4 * d_model),
                         activation=_choice(value, "activation", p, "gelu", SHARED_ACTIVATIONS),
                         adapter_rank=_int(value, "adapter_rank", p, 128),
                         attention_adapters=_bool(value, "attention_adapters", p, False),
                         rope=_bool(value, "rope", p, False),
                         rope_theta=_float(value, "rope_theta", p, 10000.0, 0.0, 1e12, low_open=True),
                         bias=_bool(value, "bias", p, False))
    if shared.attention_adapters and (shared.n_heads * shared.head_dim != 2 * d_model
                                      or shared.n_kv_heads * shared.head_dim != 2 * d_model):
        raise ConfigError(f"{p}.attention_adapters: the adapters add 2·d_model = {2 * d_model} features to each of Q, "
                          f"K and V, which needs n_heads·head_dim = n_kv_heads·head_dim = {2 * d_model}")
    return shared


def _parse_short_conv(value: Any) -> ShortConv | None:
    if value is None:
        return None
    p = "block.short_conv"
    _nested_section(value, ShortConv, p, (), "a short convolution")
    return ShortConv(kernel=_int(value, "kernel", p, 3), bias=_bool(value, "bias", p, False))


def _check_mla(block: BlockConfig) -> None:
    if block.mla is None:
        return
    # without rotary positions (model.positions: none, Kimi-Linear's NoPE latent attention) the shared key part
    # k_R (qk_rope_head_dim wide) is read unrotated, as the queries' part beside it
    if block.mla.index_heads and not block.rope:
        raise ConfigError("block.mla.index_heads: the indexer rotates its first qk_rope_head_dim dims; set block.rope: "
                          "true (or model.positions: rope)")
    if block.rope and block.rope != 1.0:
        raise ConfigError(f"block.rope: with block.mla the rotated dims are mla.qk_rope_head_dim; write rope: true, "
                          f"not a fraction ({block.rope:g})")
    if block.qk_norm != "none":
        raise ConfigError("block.qk_norm: latent attention normalises its latents (block.mla), not queries and keys; "
                          "expected none")
    if block.attention_scale:
        raise ConfigError("block.attention_scale: latent attention scales scores by 1/√(qk_nope_head_dim + "
                          "qk_rope_head_dim), times yarn's mscale² (from rope_scaling); expected 0")
    if block.attention_softcap:
        raise ConfigError("block.attention_softcap: latent attention's scores are not soft-capped (no DeepSeek "
                          "model caps them); expected 0")
    if block.attention_sinks:
        raise ConfigError("block.attention_sinks: latent attention has no sink logits (no DeepSeek model has them); "
                          "expected false")


def _check_rope_scaling(block: BlockConfig) -> None:
    if block.rope_layout != "half" and not block.rope:
        raise ConfigError(f"block.rope_layout: {block.rope_layout} pairs need rotary positions; set block.rope "
                          f"(or model.positions: rope)")
    scaling = block.rope_scaling
    if scaling is None:
        return
    if not block.rope:
        raise ConfigError("block.rope_scaling: rotary positions are off; set block.rope (or model.positions: rope)")
    if scaling.type == "proportional" and block.rope != 1.0:
        raise ConfigError("block.rope_scaling: proportional RoPE spreads its frequencies over the whole head "
                          "(Gemma 4's partial_rotary_factor is rope_scaling.fraction); set block.rope: true")
    if scaling.fraction != 1.0 and scaling.type != "proportional":
        raise ConfigError("block.rope_scaling.fraction: a setting of type proportional")
    if scaling.type == "longrope":
        for key in ("short_factor", "long_factor"):
            if len(getattr(scaling, key)) != block.rope_dims // 2:
                raise ConfigError(f"block.rope_scaling.{key}: expected {block.rope_dims // 2} factors (one per "
                                  f"rotated pair), got {len(getattr(scaling, key))}")


# what each kind needs besides its type (the rest have defaults)
_ROPE_SCALING_NEEDS = {"linear": ("factor",), "dynamic": ("factor", "original_max_positions"),
                       "llama3": ("factor", "original_max_positions"), "yarn": ("factor", "original_max_positions"),
                       "longrope": ("factor", "original_max_positions", "short_factor", "long_factor"),
                       "proportional": ("fraction",)}


def _parse_rope_scaling(value: Any) -> RopeScaling | None:
    if value is None:
        return None
    p = "block.rope_scaling"
    if not isinstance(value, Mapping):
        raise ConfigError(f"{p}: expected a mapping with a 'type' ({', '.join(ROPE_SCALINGS)}), got {_kind(value)}")
    _check_keys(value, tuple(f.name for f in fields(RopeScaling)), p + ".")
    kind = _choice(value, "type", p, "", ROPE_SCALINGS)
    for key in _ROPE_SCALING_NEEDS[kind]:
        if key not in value:
            raise ConfigError(f"{p}.{key}: required for type {kind}")
    factors = {}
    for key in ("short_factor", "long_factor"):
        items = value.get(key, [])
        if not isinstance(items, list) or not items and key in value:
            raise ConfigError(f"{p}.{key}: expected a non-empty list of numbers, got {_kind(items)}")
        factors[key] = tuple(_float({key: x}, key, p, 1.0, 0.0, 1e6, low_open=True) for x in items)
    return RopeScaling(
        type=kind,
        factor=_float(value, "factor", p, 1.0, 0.0, 1e6, low_open=True),
        original_max_positions=_int(value, "original_max_positions", p, 0,
                                    minimum=1 if "original_max_positions" in _ROPE_SCALING_NEEDS[kind] else 0),
        low_freq_factor=_float(value, "low_freq_factor", p, 1.0, 0.0, 1e6, low_open=True),
        high_freq_factor=_float(value, "high_freq_factor", p, 4.0, 0.0, 1e6, low_open=True),
        beta_fast=_float(value, "beta_fast", p, 32.0, 0.0, 1e6, low_open=True),
        beta_slow=_float(value, "beta_slow", p, 1.0, 0.0, 1e6, low_open=True),
        mscale=_float(value, "mscale", p, 0.0, 0.0, 1e6),
        mscale_all_dim=_float(value, "mscale_all_dim", p, 0.0, 0.0, 1e6),
        attention_factor=_float(value, "attention_factor", p, 0.0, 0.0, 1e6),
        truncate=_bool(value, "truncate", p, True),
        fraction=_float(value, "fraction", p, 1.0, 0.0, 1.0),
        **factors,
    )


def _check_gemma3n(block: BlockConfig) -> None:
    """Gemma 3n's parts sit where Gemma3nTextDecoderLayer puts them: AltUp around a sandwich block of both parts
    (its active stream one of the N), LAuReL beside a sandwich block's attention, the sparse gate in a gated dense
    MLP."""
    if block.altup:
        if not block.sandwich or block.parts != "both":
            raise ConfigError("block.altup: Gemma 3n's AltUp wraps a sandwich block of both parts "
                              "(placement: sandwich)")
        if block.altup_active >= block.altup:
            raise ConfigError(f"block.altup_active: {block.altup_active} is not one of the {block.altup} streams "
                              f"(0 to {block.altup - 1})")
        if block.layer_scalar or (block.moe is not None):
            raise ConfigError("block.altup: not with layer_scalar or moe (Gemma 3n has neither)")
    elif block.altup_active or block.altup_correct_scale:
        raise ConfigError(f"block.{'altup_active' if block.altup_active else 'altup_correct_scale'}: a setting "
                          f"of AltUp, which is off (block.altup 0)")
    if block.laurel_rank and not (block.sandwich and block.parts == "both"):
        raise ConfigError("block.laurel_rank: LAuReL joins the attention add of a sandwich block of both parts "
                          "(placement: sandwich)")
    if block.activation_sparsity and (not block.gated or block.moe is not None or block.parts not in ("both", "mlp")
                                      or block.sub_norms or block.mlp_multipliers != (1.0, 1.0)):
        raise ConfigError("block.activation_sparsity: Gemma 3n's sparse gate sits in a gated dense MLP (no experts, "
                          "sub-norms or MLP multipliers)")


def _parse_model(data: Mapping[str, Any]) -> ModelConfig:
    fields = ("n_layers", "vocab_size", "positions", "max_positions", "position_offset", "sinusoidal_layout",
              "tie_embeddings", "final_norm", "lm_head_bias", "embedding_multiplier",
              "logit_multiplier", "logit_softcap", "embedding_norm", "embedding_dim", "padding_idx",
              "per_layer_dim", "per_layer_vocab", "per_layer_clamp", "recurrent_start", "recurrent_layers",
              "recurrent_loops", "logit_scale", "extra_token_rows")
    _check_keys(data, fields, "model.")
    p = "model"
    vocab_size = _int(data, "vocab_size", p, 50257)
    padding_idx = data.get("padding_idx")
    if padding_idx is not None:
        padding_idx = _int(data, "padding_idx", p, 0, minimum=0, maximum=vocab_size - 1)
    positions = _choice(data, "positions", p, "learned", POSITIONS)
    layout = _choice(data, "sinusoidal_layout", p, "interleaved", SINUSOIDAL_LAYOUTS)
    if layout != "interleaved" and positions != "sinusoidal":
        raise ConfigError(f"model.sinusoidal_layout: {layout} lays out a sinusoidal table, but model.positions is "
                          f"'{positions}'; set model.positions: sinusoidal")
    n_layers = _int(data, "n_layers", p, 12, maximum=MAX_LAYERS)
    recurrent_start = _int(data, "recurrent_start", p, 0, minimum=0, maximum=n_layers)
    recurrent_layers = _int(data, "recurrent_layers", p, 0, minimum=0, maximum=n_layers - recurrent_start)
    return ModelConfig(
        n_layers=n_layers, recurrent_start=recurrent_start, recurrent_layers=recurrent_layers,
        recurrent_loops=_int(data, "recurrent_loops", p, 1, minimum=1, maximum=64),
        logit_scale=_float(data, "logit_scale", p, 0.0, 0.0, 1e9),
        vocab_size=vocab_size, padding_idx=padding_idx,
        positions=positions, sinusoidal_layout=layout,
        max_positions=_int(data, "max_positions", p, 1024),
        position_offset=_int(data, "position_offset", p, 0, minimum=0),
        tie_embeddings=_bool(data, "tie_embeddings", p, True),
        final_norm=_bool(data, "final_norm", p, True),
        lm_head_bias=_bool(data, "lm_head_bias", p, False),
        embedding_multiplier=_float(data, "embedding_multiplier", p, 1.0, 0.0, 1e6, low_open=True),
        logit_multiplier=_float(data, "logit_multiplier", p, 1.0, 0.0, 1e6, low_open=True),
        logit_softcap=_float(data, "logit_softcap", p, 0.0, 0.0, 1e6),
        embedding_norm=_bool(data, "embedding_norm", p, False),
        embedding_dim=_int(data, "embedding_dim", p, 0, minimum=0),
        per_layer_dim=_int(data, "per_layer_dim", p, 0, minimum=0),
        per_layer_vocab=_int(data, "per_layer_vocab", p, 0, minimum=0),
        per_layer_clamp=_bool(data, "per_layer_clamp", p, False),
        extra_token_rows=_extra_token_rows(data, p),
    )


def _extra_token_rows(data: Mapping[str, Any], p: str) -> int:
    rows = _int(data, "extra_token_rows", p, 0, minimum=0)
    if rows and _bool(data, "tie_embeddings", p, True):
        raise ConfigError(f"model.extra_token_rows: {rows} rows past the vocabulary make the token embedding taller "
                          f"than the LM head; set model.tie_embeddings: false")
    return rows


def _reconcile_rope(block: BlockConfig, model: ModelConfig, nope: bool = False) -> BlockConfig:
    """`positions: rope` means the blocks rotate q and k; block.rope picks the fraction (default all),
    and a `layers:` entry's `rope: false` (`nope`) leaves its layers without positions (SmolLM3's NoPE).
    `positions: alibi` means the blocks add ALiBi's biases to their scores (block.alibi); block.alibi may
    also bias the scores of a model with learned or sinusoidal positions (not rotary ones)."""
    if model.positions == "alibi":
        if block.rope:
            raise ConfigError("block.rope: rotary positions are on but model.positions is 'alibi'; pick one")
        if block.attention_softcap:
            raise ConfigError("block.attention_softcap: ALiBi's biases and a soft cap on the same scores have no reference order (no model has both); pick one")
        return replace(block, alibi=True)
    if model.positions == "rope":
        return block if block.rope or nope else _even_rotation(replace(block, rope=1.0))
    if block.rope:
        raise ConfigError(f"block.rope: rotary positions are on but model.positions is "
                          f"'{model.positions}'; set model.positions: rope")
    return block


def _parse_run(data: Mapping[str, Any]) -> RunConfig:
    _check_keys(data, ("batch", "seq_len", "dtype", "seed"), "run.")
    return RunConfig(
        batch=_int(data, "batch", "run", 2),
        seq_len=_int(data, "seq_len", "run", 5),
        dtype=_choice(data, "dtype", "run", "float32", DTYPES),
        seed=_int(data, "seed", "run", 7, minimum=0),
    )


def _parse_about(data: Mapping[str, Any]) -> About:
    _check_keys(data, ("description", "source", "parameters", "model_type"), "about.")
    for key in ("description", "source", "model_type"):
        if not isinstance(data.get(key, ""), str):
            raise ConfigError(f"about.{key}: expected a string, got {_kind(data[key])}")
    parameters = _int(data, "parameters", "about", 1) if "parameters" in data else None
    return About(data.get("description", ""), data.get("source", ""), parameters, data.get("model_type", ""))
