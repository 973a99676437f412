"""Sizing a model for a workload: memory and FLOPs of inference and training, in closed form.

Everything here is arithmetic on the hyperparameters and the workload (sequence T, batch B, dtypes);
nothing is allocated, so a 175B model answers as fast as a tiny block.

Conventions (named in the output too):
- FLOPs = 2 × multiply-adds (MACs), of the matrix products only (projections, MLP, LM head, and the
  two attention products Q·Kᵀ and weights·V); elementwise work is in `blockcli trace`, not here.
- "full" counts the whole T×T score table, as a plain implementation computes it; "causal" counts
  the pairs s <= t a causal kernel visits (T(T+1)/2 of T²).
- A decode step at context T is the T-th token: its query sees T keys (the T−1 cached and its own),
  so the T decode steps 1..T add up to the causal prefill of T tokens.
- A sliding window W (Mistral) bounds all three: query t sees min(t + 1, W) keys, and a K/V cache
  keeps the last W tokens (as transformers' sliding-window cache and serving engines do).
- Chunked attention C (Llama 4's attention_chunk_size) too: query t sees the (t mod C) + 1 keys of its own
  chunk, and a chunked layer's K/V cache keeps at most C tokens (transformers caches it as a window of C).
- Model-state bytes follow Rajbhandari et al. 2020 (ZeRO, §3 and §5); activation memory follows
  Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", §4, with
  each term written out so blockcli's variants (GQA, gated MLPs, RMSNorm, no dropout) change only
  the terms they touch (`activation_terms`).
- Matmul weights per token (`matmul_weights`) is where a mixture of experts' *active* parameters
  slot in: every FLOPs figure goes through it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from blockcli import profiles
from blockcli.activations import function_of
from blockcli.config import (BlockConfig, Config, GatedDeltaNet, InputError, Mamba1, clipped, layer_list,
                             layer_passes, projected_width, whole_number)
from blockcli.shapes import block_parameter_shapes, is_buffer, outer_shapes

DTYPE_BITS = {"float64": 64, "float32": 32, "bfloat16": 16, "float16": 16, "float8": 8, "int8": 8, "int4": 4}
OPTIMIZERS = ("adamw", "sgd", "sgd-momentum")
PRECISIONS = ("fp32", "mixed")
RECOMPUTE = ("none", "selective", "full")
MASK_BYTES = 1  # a dropout mask is one byte per element (Korthikanti et al. 2022, §4.1)
LOSS_BYTES = 4  # the logits kept for the cross-entropy are float32 (ibid.)


# llama.cpp's quantized K/V cache types (--cache-type-k/-v): blocks of 32 values along each cached row (one
# token's h_kv·d_h keys, or values, in one layer), q8_0 a float16 scale + 32 int8 (34 bytes), q4_0 a float16 scale
# + 32 packed 4-bit codes (18 bytes); ggml requires a row to be whole blocks
KV_BLOCKS = {"q8_0": (32, 34), "q4_0": (32, 18)}
KV_DTYPES = (*DTYPE_BITS, *KV_BLOCKS)


def cache_bits(count: int, dtype: str) -> int:
    """Bits of `count` cached values at a K/V dtype: a block type's scales counted (count: whole blocks)."""
    if dtype in KV_BLOCKS:
        values, size = KV_BLOCKS[dtype]
        return -(-count // values) * size * 8
    return count * DTYPE_BITS[dtype]


def cache_rows(dims: Dims) -> tuple[tuple[str, int], ...]:
    """The widths of the rows a K/V cache stores per token and layer: K and V (h_kv·d_h each; V h_kv·d_v where its
    heads are narrower), or latent attention's compressed latent (r_kv + d_rope)."""
    if dims.latent:
        return (("the latent r_kv + d_rope", dims.r_kv + dims.d_rope),
                *((("the indexer's key d_I", dims.d_index),) if dims.d_index else ()))
    if dims.d_v:
        return (("K h_kv·d_h", dims.h_kv * dims.d_h), ("V h_kv·d_v", dims.h_kv * dims.d_v))
    return (("h_kv·d_h", dims.h_kv * dims.d_h),)


def check_kv_blocks(config: Config, kv_dtype: str) -> None:
    """A block-quantized cache needs whole blocks per row: otherwise one line naming the row's width."""
    if kv_dtype not in KV_BLOCKS:
        return
    values = KV_BLOCKS[kv_dtype][0]
    for dims in Dims.per_group(config):
        for what, width in cache_rows(dims):
            if width % values:
                raise InputError(f"--kv-dtype {kv_dtype}: a cached row ({what} = {width}) is not whole blocks of "
                                 f"{values} values, which llama.cpp's {kv_dtype} cache requires")


def nbytes(count: int, dtype: str) -> int:
    """Bytes of `count` elements at `dtype` (int4 packs two per byte), rounded up to a whole byte."""
    return -(-count * DTYPE_BITS[dtype] // 8)


def exact_bytes(bits: int) -> int | float:
    """`bits` in bytes, exactly: an int when whole, else the half (or quarter…) byte as a float (16.5 for the 33
    int4 values of an odd-width K/V latent per token), which a figure rounded to a whole byte would hide."""
    return bits // 8 if bits % 8 == 0 else bits / 8


# ----------------------------------------------------------------------------- shapes of the work


@dataclass(frozen=True)
class Dims:
    """The shape symbols the formulas use: L layers (1 for a lone block), V vocabulary (0 for a block)."""

    L: int
    d: int
    h: int
    h_kv: int
    d_h: int
    d_ff: int
    V: int
    gated: bool
    window: int = 0  # sliding window W: a query sees at most W keys (0: all earlier ones)
    e: int = 0  # OPT-350m's embedding width when the head reads e, not d, features (0: d)
    moe_weights: int = 0  # a mixture of experts: the MLP matrix weights one token uses (0: a dense MLP)
    # latent attention (0 without): query and K/V latent ranks, RoPE part of d_h, value width (d_v: also plain
    # attention's when it differs from d_h)
    r_q: int = 0
    r_kv: int = 0
    d_rope: int = 0
    d_v: int = 0
    linear: GatedDeltaNet | None = None  # a Gated DeltaNet layer's mixer in place of attention (no K/V cache)
    gate: int = 0  # gated attention: the width of its gate projection beside Q (h·d_h; one a head: h); 0: none
    chunk: int = 0  # chunked attention C: a query sees only its own chunk's keys (0: off)
    # a Mamba-2 mixer in place of attention (all 0 without): its heads h_s of width p, state N, groups g, kernel K.
    # A Mamba-1 mixer is d_in channels of its own state each: h_s = d_in, p = 1, g = 0 (its conv runs over x alone),
    # and R (> 0 only for Mamba-1) Δ's rank
    h_s: int = 0
    p: int = 0
    N: int = 0
    g: int = 0
    K: int = 0
    conv_K: int = 0  # a gated short convolution in place of attention (LFM2): its kernel (0 without)
    mixer: bool = True  # the layer has its token mixer (block.parts both or mixer)
    mlp: bool = True  # the layer has its MLP (block.parts both or mlp)
    d_index: int = 0  # DeepSeek Sparse Attention: the indexer's key width d_I, cached beside the latent (0: none)
    h_index: int = 0  # and its heads h_I
    R: int = 0  # a Mamba-1 mixer's Δ rank (0: none)
    hybrid: bool = False  # attention beside the Mamba-2 mixer in the same layer (block.parts hybrid: Falcon-H1)
    shared_kv: bool = False  # Gemma 4's block.kv_from: the layer attends to another layer's cached K/V, caching none
    lightning: bool = False  # MiniMax's lightning attention in place of softmax attention: a state h·d_h·d_h, no K/V
    # a shared transformer block before the Mamba-2 mixer (Zamba2's block.shared; hybrid set, h, h_kv, d_h its
    # attention's): its MLP's width (0: none), its adapters' rank, and whether Q, K, V have adapters too
    shared_ff: int = 0
    shared_rank: int = 0
    shared_qkv: bool = False
    differential: bool = False  # DiffLlama's differential attention: each softmax reads both halves of V (2·d_h)
    moa_router: int = 0  # JetMoE's mixture of attention heads: its router's d·E_a weights (its k_a experts' W_q, W_o are
    # as wide as Q and W_O of h = k_a·h_kv heads, the shared K/V as any h_kv heads')

    @classmethod
    def of(cls, config: Config) -> "Dims":
        b, m = config.block, config.model
        mla, ssm = b.mla, b.mamba
        latent = (mla.q_lora_rank, mla.kv_lora_rank, mla.qk_rope_head_dim, mla.v_head_dim) if mla else \
            (0, 0, 0, b.v_head_dim if b.value_dim != b.head_dim else 0)  # plain attention's own d_v (MiMo-V2-Flash)
        mamba = ((ssm.d_inner, 1, ssm.d_state, 0, ssm.conv_kernel) if isinstance(ssm, Mamba1) else
                 (ssm.n_heads, ssm.head_dim, ssm.d_state, ssm.n_groups, ssm.conv_kernel) if ssm else (0,) * 5)
        return replace(cls(m.n_layers if m else 1, b.d_model, b.n_heads, b.n_kv_heads, b.head_dim, mlp_width(b),
                   m.vocab_size if m else 0, b.gated, b.sliding_window, projected_width(m, b.d_model),
                   moe_active_weights(b), *latent, b.linear_attention,
                   (b.n_heads * (1 if b.gate_per_head else b.head_dim)) if b.attention_gate else 0,
                   b.attention_chunk, *mamba,
                   b.short_conv.kernel if b.short_conv else 0,  # Mllama's skipped cross-attention: neither part
                   b.parts != "mlp" and not b.cross_attention, b.parts != "mixer" and not b.cross_attention,
                   d_index=mla.index_head_dim if mla and mla.own_indexer else 0,
                   h_index=mla.index_heads if mla and mla.own_indexer else 0,
                   R=ssm.dt_rank if isinstance(ssm, Mamba1) else 0, hybrid=b.parts == "hybrid", shared_kv=b.kv_from >= 0,
                   lightning=b.lightning is not None, moa_router=b.d_model * b.moa.n_experts if b.moa else 0,
                   differential=b.differential is not None), **_shared_dims(b))

    @property
    def mamba(self) -> bool:
        """A Mamba-1 or Mamba-2 layer: no keys or values, a state of fixed size."""
        return self.h_s > 0

    @property
    def attends(self) -> bool:
        """The layer's mixer is softmax attention (it caches keys and values, and scores T keys per query)."""
        return self.mixer and (self.hybrid or (not self.mamba and not self.conv_K and self.linear is None
                                               and not self.lightning))

    def ssm_state_elements(self) -> int:
        """A Mamba-2 layer's decode state per sequence, whatever T (0 for any other layer): the SSM state h_s·p·N
        and the conv's window over its h_s·p + 2·g·N channels, K inputs each as transformers' cache and mamba_ssm's
        conv_state keep it (the conv reads K − 1 earlier ones); a Mamba-1 layer's (p = 1, g = 0): d_in·N and the
        window over its d_in channels."""
        if self.conv_K and self.mixer:  # a short conv's window over d channels, K inputs as transformers keeps it
            return self.L * self.conv_K * self.d
        if not (self.mamba and self.mixer):
            return 0
        return self.L * (self.h_s * self.p * self.N + self.K * (self.h_s * self.p + 2 * self.g * self.N))

    @property
    def latent(self) -> bool:
        return self.r_kv > 0

    @property
    def value_dim(self) -> int:
        """Each head's value width: d_h, or d_v (latent attention's, MiMo-V2-Flash's), or differential attention's
        two halves 2·d_h."""
        return self.d_v or (2 * self.d_h if self.differential else self.d_h)

    @classmethod
    def per_group(cls, config: Config) -> list["Dims"]:
        """One Dims per group of identical layers (L: the group's size), so that sums over the groups
        are sums over the layers: each layer's own heads, MLP and window."""
        if config.model is None:
            return [replace(cls.of(config.for_layer(g.layers[0])), L=1) for g in config.layer_groups()]
        passes = [i for i, _, _ in layer_passes(config.model)]  # Dory: a recurrent layer once a loop, a cache each
        return [replace(cls.of(config.for_layer(g.layers[0])), L=sum(passes.count(i) for i in g.layers))
                for g in config.layer_groups()]

    def keys_seen(self, T: int) -> int:
        """Tokens a K/V cache must keep at context T (and the keys a query there attends to, but for chunks): T,
        or W with a window, or at most C with chunks."""
        bound = self.window or self.chunk
        return min(T, bound) if bound else T

    def decode_keys(self, T: int) -> int:
        """Keys the query of a decode step at context T attends to: keys_seen, but with chunks only those of
        its own chunk, (T − 1) mod C + 1."""
        return (T - 1) % self.chunk + 1 if self.chunk else self.keys_seen(T)


def _shared_dims(b: BlockConfig) -> dict[str, Any]:
    """A layer running a shared transformer block (Zamba2): attention beside its mixer (hybrid), of the shared
    block's heads, and the shared MLP's and adapters' widths."""
    s = b.shared
    if s is None:
        return {}
    return {"hybrid": True, "h": s.n_heads, "h_kv": s.n_kv_heads, "d_h": s.head_dim, "shared_ff": s.d_ff,
            "shared_rank": s.adapter_rank, "shared_qkv": s.attention_adapters}


def mlp_width(block: BlockConfig) -> int:
    """The MLP intermediates' width per token: d_ff, or for a mixture of experts k·d_e + d_s (its k
    routed experts' and the shared expert's, side by side)."""
    moe = block.moe
    return block.d_ff if moe is None else moe.top_k * moe.d_expert + moe.d_shared


def moe_active_weights(block: BlockConfig) -> int:
    """A mixture of experts' matrix weights one token is multiplied by: the router d·E, its k routed
    experts' and the shared expert's (2 or 3)·d·width, the shared gate d (0 for a dense MLP)."""
    moe = block.moe
    if moe is None:
        return 0
    d = block.d_model
    return (d * moe.n_experts + (3 if block.gated else 2) * d * (moe.top_k * moe.d_expert + moe.d_shared)
            + (d if moe.shared_gate else 0))


def matmul_weights(dims: Dims) -> tuple[int, int]:
    """(per layer, LM head) matrix weights one token is multiplied by: Q, K, V, O and the MLP's two or
    three matrices, and the d·V head (tied or not, it is a product), or e·V with OPT-350m's project in and
    out (d·e each). A mixture of experts counts its router, the k routed experts and the shared expert: the
    active parameters, not all of them."""
    q, kv = dims.h * dims.d_h, dims.h_kv * dims.d_h
    mlp = (dims.moe_weights or (3 if dims.gated else 2) * dims.d * dims.d_ff) if dims.mlp else 0
    head = dims.e * dims.V + 2 * dims.d * dims.e if dims.e else dims.d * dims.V
    if not dims.mixer:
        return mlp, head
    if dims.conv_K:  # a short conv: in-projection to b, c, x, out-projection, the conv's K taps per channel
        return 4 * dims.d * dims.d + dims.conv_K * dims.d + mlp, head
    if dims.mamba and dims.R:  # Mamba-1: in-projection to x, z; x-projection to δ, B, C; Δ's projection; out
        d_in = dims.h_s
        return (dims.d * 2 * d_in + d_in * (dims.R + 2 * dims.N) + dims.R * d_in + d_in * dims.d
                + dims.K * d_in + mlp, head)
    if dims.mamba:  # in-projection to z, x, B, C, dt and out-projection; the conv's K taps per channel (depthwise)
        d_in, gN = dims.h_s * dims.p, dims.g * dims.N
        attention = dims.d * (q + 2 * kv) + q * dims.d if dims.hybrid else 0  # Falcon-H1: Q, K, V, O beside it
        if dims.shared_ff:  # Zamba2: the shared block's Q, K, V from [h | x_0] (2d), O, its gated MLP, the adapters
            # (x·A then ·B: r per input feature and per output feature), the output projection d²
            r = dims.shared_rank
            adapters = r * (dims.d + 2 * dims.shared_ff) + (r * (6 * dims.d + q + 2 * kv) if dims.shared_qkv else 0)
            attention = 2 * dims.d * (q + 2 * kv) + q * dims.d + 3 * dims.d * dims.shared_ff + adapters + dims.d ** 2
        return (dims.d * (2 * d_in + 2 * gN + dims.h_s) + d_in * dims.d + dims.K * (d_in + 2 * gN) + attention + mlp,
                head)
    if dims.lightning:  # q | k | v and the output gate from x (h·d_h wide each), W_out
        return 5 * dims.d * q + mlp, head
    if dims.linear is not None:  # q, k, v, z, b, a from x, W_O
        n = dims.linear
        return dims.d * (2 * n.key_width + 2 * n.value_width + 2 * n.value_heads) + n.value_width * dims.d + mlp, head
    if dims.gate:
        mlp += dims.d * dims.gate  # the attention gate's projection, as wide as Q (or one column a head)
    if dims.latent:  # the low-rank products: Q (through r_q), down to r_kv + d_rope, up to h·(d_nope + d_v), O
        d_nope = dims.d_h - dims.d_rope
        query = dims.r_q * (dims.d + q) if dims.r_q else dims.d * q
        attention = (query + dims.d * (dims.r_kv + dims.d_rope) + dims.r_kv * dims.h * (d_nope + dims.d_v)
                     + dims.h * dims.d_v * dims.d)
        # DeepSeek Sparse Attention's indexer: its queries from the latent, its key and its head weights from x
        indexer = dims.h_index * dims.d_index * dims.r_q + dims.d * (dims.d_index + dims.h_index)
        return attention + indexer + mlp, head
    # JetMoE: each token's k_a experts' queries (k_a·h_kv·d_h = h·d_h) and outputs, the shared K/V, the router;
    # values and outputs h_kv·d_v and h·d_v wide where the heads' values are narrower (MiMo-V2-Flash)
    d_v = dims.d_v or dims.d_h
    return dims.d * (q + kv + dims.h_kv * d_v) + dims.h * d_v * dims.d + dims.moa_router + mlp, head


def score_pairs(T: int, causal: bool, window: int = 0, chunk: int = 0) -> int:
    """(query, key) pairs of a T-token prefill: T² for the full table, T(T+1)/2 for the causal half;
    with a sliding window W, query t sees min(t + 1, W) keys; with chunks of C, (t mod C) + 1."""
    if not causal:
        return T * T
    if chunk:  # ⌊T / C⌋ whole chunks of C(C + 1)/2 pairs, then the last r = T mod C queries' r(r + 1)/2
        whole, rest = divmod(T, chunk)
        return whole * chunk * (chunk + 1) // 2 + rest * (rest + 1) // 2
    if not window or T <= window:
        return T * (T + 1) // 2
    return window * (window + 1) // 2 + (T - window) * window


@dataclass(frozen=True)
class ForwardFlops:
    """Forward FLOPs of B sequences of T tokens, split by where they are spent."""

    blocks_dense: int  # projections and MLP of all layers
    scores_full: int  # Q·Kᵀ and weights·V over the full table, all layers
    scores_causal: int
    head: int

    def total(self, causal: bool = False) -> int:
        return self.blocks_dense + (self.scores_causal if causal else self.scores_full) + self.head


def forward_flops(dims: Dims, T: int, B: int) -> ForwardFlops:
    per_layer, head = matmul_weights(dims)
    tokens = B * T
    if dims.linear is not None or dims.lightning:  # no score table: the recurrence (and conv), linear in T
        return ForwardFlops(tokens * (2 * dims.L * per_layer + recurrence_flops(dims)), 0, 0, 2 * tokens * head)
    if not dims.attends:  # a Mamba-2 layer's scan: each token's x ⊗ B into the state and the state times C
        return ForwardFlops(2 * tokens * dims.L * (per_layer + ssm_scan_macs(dims)), 0, 0, 2 * tokens * head)
    # 2·d_h for Q·Kᵀ + 2·d_v for weights·V (+ 2·h_I·d_I for the indexer's scores, which it keeps whole)
    attention = 2 * B * dims.L * (dims.h * (dims.d_h + dims.value_dim) + dims.h_index * dims.d_index)
    # a hybrid layer's (Falcon-H1's) scan beside its attention: ssm_scan_macs is 0 for any other layer
    return ForwardFlops(2 * tokens * dims.L * (per_layer + ssm_scan_macs(dims)), attention * score_pairs(T, False),
                        attention * score_pairs(T, True, dims.window, dims.chunk), 2 * tokens * head)


def ssm_scan_macs(dims: Dims) -> int:
    """A Mamba layer's scan per token: x_t ⊗ B_t added into the state and S_t·C_t read out, h_s·p·N (Mamba-1's
    d_in·N) multiply-adds each (the same in a decode step: the state is constant in T). 0 for any other layer."""
    return 2 * dims.h_s * dims.p * dims.N if dims.mamba and dims.mixer else 0


def model_forward_flops(groups: list[Dims], T: int, B: int) -> ForwardFlops:
    """forward_flops summed over the groups of layers; the LM head once."""
    parts = [forward_flops(dims, T, B) for dims in groups]
    return ForwardFlops(sum(p.blocks_dense for p in parts), sum(p.scores_full for p in parts),
                        sum(p.scores_causal for p in parts), parts[0].head)


def model_decode_flops(groups: list[Dims], T: int, B: int) -> int:
    """decode_flops summed over the groups of layers; the LM head once."""
    head = B * 2 * matmul_weights(groups[0])[1]
    return head + sum(decode_flops(dims, T, B) - B * 2 * matmul_weights(dims)[1] for dims in groups)


def decode_flops(dims: Dims, T: int, B: int) -> int:
    """One decode step at context T for B sequences: one token through every matrix, T keys per head
    (the last W with a sliding window). Under latent attention, the earlier tokens' keys and values
    are not expanded again (an expanded cache, or W_kv_b absorbed into the query and output as
    MLA-aware engines do; transformers re-expands its latent cache every step)."""
    per_layer, head = matmul_weights(dims)
    if dims.linear is not None or dims.lightning:  # from the carried state: the same work at every context
        attention = recurrence_flops(dims)
    elif not dims.attends:  # no keys: the scan's step costs the same at any context
        return B * 2 * (dims.L * (per_layer + ssm_scan_macs(dims)) + head)
    else:
        attention = (2 * dims.L * (dims.h * (dims.d_h + dims.value_dim) + dims.h_index * dims.d_index)
                     * dims.decode_keys(T))
    return B * (2 * (dims.L * (per_layer + ssm_scan_macs(dims)) + head) + attention)


# ----------------------------------------------------------------------------- inference


@dataclass(frozen=True)
class Inference:
    seq_len: int
    batch: int
    dtype: str
    kv_dtype: str
    parameters: int
    kv_bits_per_token: int  # one sequence, all layers (bits: int4 packs two values per byte)
    kv_bytes: int  # B sequences of T tokens, packed, rounded up to a whole byte
    activation_bytes: int
    prefill: ForwardFlops
    decode: int
    # latent attention only (else 0): the expanded keys and values per token and for B × T, beside the
    # compressed latent that kv_bits_per_token / kv_bytes count
    kv_expanded_bits_per_token: int = 0
    kv_expanded_bytes: int = 0
    stored_weight_bytes: int | None = None  # a quantized checkpoint's or GGUF file's weights as stored (their own sizes)
    # the fixed decode state of the Gated DeltaNet, Mamba-2 and short-conv layers for B sequences, at the run's dtype (the
    # recurrent state and the short conv's window): constant in T, beside kv_bytes; 0 without such layers
    state_bytes: int = 0
    # whose state: "Gated DeltaNet", "Kimi Delta Attention", "lightning", "Mamba-1", "Mamba-2", "short-conv" layers,
    # joined by "and" ("" without)
    state_of: str = ""
    indexed: bool = False  # DeepSeek Sparse Attention: the latent cache holds the indexer's keys (d_I) too
    narrow_values: bool = False  # the cached values are d_v wide, not d_h (MiMo-V2-Flash): h_kv·(d_h + d_v) a layer
    # some layers have no attention of their own and no state (an MLP alone, Mllama's skipped cross-attention
    # layers): the K/V cache is the attention layers' (L_attn)
    attention_only: bool = False

    @property
    def kv_bytes_per_token(self) -> int | float:
        """Exact: 16.5 for 33 int4 values, never rounded to 17."""
        return exact_bytes(self.kv_bits_per_token)

    @property
    def kv_expanded_bytes_per_token(self) -> int | float:
        return exact_bytes(self.kv_expanded_bits_per_token)

    @property
    def parameter_bytes(self) -> int:
        """The weights' memory: a quantized checkpoint's stored bytes (kept quantized), else every parameter at
        the run's dtype."""
        return self.stored_weight_bytes if self.stored_weight_bytes is not None else nbytes(self.parameters, self.dtype)

    def parameter_bytes_at(self) -> dict[str, int]:
        """Parameter memory at every dtype, for comparison."""
        return {dtype: nbytes(self.parameters, dtype) for dtype in DTYPE_BITS}

    @property
    def memory_bytes(self) -> int:
        return self.parameter_bytes + self.kv_bytes + self.state_bytes + self.activation_bytes


def kv_cache_elements(dims: Dims) -> int:
    """Cached elements per token: K and V, h_kv heads of d_h each (V of d_v: MiMo-V2-Flash), in every layer (grouped-query and
    multi-query attention cache h_kv heads, not h). Latent attention (MLA) caches its compressed
    latent: r_kv + d_rope per layer (DeepSeek-V2 §2.1.2), what MLA-aware engines store. A Gated DeltaNet or
    Mamba-2 layer, or a layer of its MLP alone, caches none (their fixed state: `recurrent_elements`,
    `Dims.ssm_state_elements`). A layer reading another layer's keys and values (Gemma 4's kv_from) caches none."""
    if not dims.attends or dims.shared_kv:
        return 0
    if dims.latent:  # and DeepSeek Sparse Attention's indexer key (d_I, 0 without), cached as transformers does
        return dims.L * (dims.r_kv + dims.d_rope + dims.d_index)
    return dims.L * dims.h_kv * (dims.d_h + (dims.d_v or dims.d_h))  # V d_v wide (MiMo), else d_h (DiffLlama too)


def recurrent_elements(dims: Dims) -> int:
    """What the Gated DeltaNet layers carry per sequence, whatever its length: each layer's state S
    (h_v, d_k, d_v) and the short conv's window of K inputs over its C channels, as transformers' cache keeps it
    (the conv reads K − 1 earlier ones), as `Dims.ssm_state_elements` counts a Mamba-2 layer's."""
    n = dims.linear
    if dims.lightning and dims.mixer:  # lightning attention: S (h, d_h, d_h), nothing else
        return dims.L * dims.h * dims.d_h * dims.d_h
    if n is None:
        return 0
    return dims.L * (n.value_heads * n.key_head_dim * n.value_head_dim + n.conv_kernel * n.conv_width)


def recurrence_flops(dims: Dims) -> int:
    """One token's FLOPs in the Gated DeltaNet layers beyond their projections: the short conv (2·K per channel)
    and the delta rule's three products per value head, Sᵀk, k δᵀ and Sᵀq (2·d_k·d_v each)."""
    n = dims.linear
    if dims.lightning and dims.mixer:  # lightning: kᵀv into S and q·S (2·d_h² each per head), S's decay (d_h²)
        return dims.L * 5 * dims.h * dims.d_h * dims.d_h
    if n is None:
        return 0
    return dims.L * (2 * n.conv_kernel * n.conv_width + 6 * n.value_heads * n.key_head_dim * n.value_head_dim)


def kv_expanded_elements(dims: Dims) -> int:
    """Latent attention's keys and values expanded per token: h heads of d_h (= d_nope + d_rope) keys
    and d_v values in every layer, what a plain K/V cache of the same attention would hold."""
    return dims.L * dims.h * (dims.d_h + dims.d_v)


def inference(config: Config, parameters: int, seq_len: int, batch: int, dtype: str,
              kv_dtype: str | None = None, stored_weight_bytes: int | None = None) -> Inference:
    """Memory and FLOPs of serving `config` at B × T tokens, weights and activations at `dtype` (the weights at
    `stored_weight_bytes` instead when given: a quantized checkpoint's, as stored)."""
    groups = Dims.per_group(config)  # layers that differ: each group's own heads and window
    kv_dtype = kv_dtype or dtype
    check_kv_blocks(config, kv_dtype)
    # counted in bits, so an int4 cache of an odd width is not rounded per token
    kv_per_token = cache_bits(sum(kv_cache_elements(dims) for dims in groups), kv_dtype)
    kv_bytes = -(-cache_bits(sum(kv_cache_elements(dims) * dims.keys_seen(seq_len)  # a window keeps its last W
                                 for dims in groups) * batch, kv_dtype) // 8)
    # the recurrent layers' state: per sequence, not per token
    fixed = nbytes(sum(recurrent_elements(dims) + dims.ssm_state_elements() for dims in groups) * batch, dtype)
    state_of = " and ".join(kind for kind, has in (
        ("Gated DeltaNet", any(d.linear is not None and not d.linear.per_channel for d in groups)),
        ("Kimi Delta Attention", any(d.linear is not None and d.linear.per_channel for d in groups)),
        ("lightning", any(d.lightning and d.mixer for d in groups)),
        ("Mamba-1", any(d.mamba and d.mixer and d.R for d in groups)),
        ("Mamba-2", any(d.mamba and d.mixer and not d.R for d in groups)), ("short-conv", any(d.conv_K and d.mixer for d in groups)))
        if has)
    # latent attention: the keys and values it would cache expanded (0 without latent attention)
    expanded = cache_bits(sum(kv_expanded_elements(dims) for dims in groups if dims.latent), kv_dtype)
    expanded_bytes = -(-cache_bits(sum(kv_expanded_elements(dims) * dims.keys_seen(seq_len)
                                       for dims in groups if dims.latent) * batch, kv_dtype) // 8)
    return Inference(seq_len, batch, dtype, kv_dtype, parameters, kv_per_token, kv_bytes,
                     max(inference_activation_bytes(dims, seq_len, batch, dtype) for dims in groups),
                     model_forward_flops(groups, seq_len, batch), model_decode_flops(groups, seq_len, batch),
                     expanded, expanded_bytes, stored_weight_bytes, fixed, state_of,
                     indexed=any(dims.d_index for dims in groups),
                     narrow_values=any(dims.d_v and not dims.latent for dims in groups),
                     attention_only=any(not dims.attends for dims in groups))


def inference_activation_bytes(dims: Dims, T: int, B: int, dtype: str) -> int:
    """Working set of one layer in a prefill of B × T tokens, nothing kept for a backward pass: the
    residual stream and the normed input (B, T, d), then the larger of the attention half (Q, K, V and
    the attention output) and the MLP half (its d_ff-wide intermediates: pre-activation and activation,
    or gate, up and product); the score table is not held (a tiled kernel), and the logits are those
    of the last position, float32."""
    q, kv = dims.h * dims.d_h, dims.h_kv * dims.d_h
    attention = q + kv + (dims.h_kv + dims.h) * (dims.d_v or dims.d_h)  # Q, K, V and the heads' output (d_v: MiMo's)
    if dims.linear is not None:  # q | k | v before and after the conv, z, the heads' output and its gated norm
        attention = 2 * dims.linear.conv_width + 3 * dims.linear.value_width
    if dims.lightning:  # q | k | v before and after SiLU, the heads' output, the gate and the gated norm
        attention = 9 * q
    if dims.latent:  # Q, K (h·d_h each), V and the attention output (h·d_v each), the latents
        attention = 2 * q + 2 * dims.h * dims.d_v + dims.r_q + dims.r_kv + dims.d_rope
    if dims.conv_K:  # the in-projection's b | c | x, b ⊙ x, the conv's output, c ⊙ it
        attention = 6 * dims.d
    if dims.mamba and dims.R:  # Mamba-1: the in-projection's x | z, the conv's output, δ | B | C, Δ, y, y ⊙ silu(z)
        d_in = dims.h_s
        attention = 2 * d_in + d_in + (dims.R + 2 * dims.N) + d_in + 2 * d_in
    elif dims.mamba:  # the in-projection's z | x B C | dt, the conv's output, y and its gated norm
        d_in, gN = dims.h_s * dims.p, dims.g * dims.N
        attention = (2 * d_in + 2 * gN + dims.h_s) + (d_in + 2 * gN) + 2 * d_in
        if dims.hybrid:  # and attention's Q, K, V and output beside it (Falcon-H1)
            attention += 2 * dims.h * dims.d_h + 2 * dims.h_kv * dims.d_h
    widest = max(attention if dims.mixer else 0, (3 if dims.gated else 2) * dims.d_ff if dims.mlp else 0)
    return nbytes(B * T * (2 * dims.d + widest), dtype) + LOSS_BYTES * B * dims.V


# ----------------------------------------------------------------------------- training: model states


@dataclass(frozen=True)
class StateBytes:
    """Bytes per parameter of the model states (ZeRO's Ψ-multiples): weights, gradients, optimizer."""

    weights: int
    gradients: int
    optimizer: int  # ZeRO's K: fp32 master copy (mixed precision) and the optimizer's moments

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer


def state_bytes(optimizer: str, precision: str) -> StateBytes:
    """fp32: 4-byte weights and gradients; mixed: 2-byte weights and gradients plus a 4-byte master
    copy. Adam keeps two 4-byte moments, SGD with momentum one, plain SGD none. Mixed-precision Adam is
    2 + 2 + (4 + 4 + 4) = 16 bytes per parameter (Rajbhandari et al. 2020, §3.1: 2Ψ + 2Ψ + 12Ψ)."""
    moments = {"adamw": 2, "sgd-momentum": 1, "sgd": 0}[optimizer]
    if precision == "mixed":
        return StateBytes(2, 2, 4 + 4 * moments)
    return StateBytes(4, 4, 4 * moments)


def states_per_device(parameters: int, per: StateBytes, dp: int, zero: int) -> dict[str, int]:
    """Model-state bytes on one of `dp` data-parallel devices under ZeRO stage `zero` (ibid. §5.1):
    stage 1 partitions the optimizer states, 2 also the gradients, 3 also the weights."""
    share = lambda bytes_per, stage: -(-parameters * bytes_per // dp) if zero >= stage else parameters * bytes_per  # noqa: E731
    return {"weights": share(per.weights, 3), "gradients": share(per.gradients, 2),
            "optimizer": share(per.optimizer, 1)}


# ----------------------------------------------------------------------------- training: activations


@dataclass(frozen=True)
class Term:
    """One tensor kept for the backward pass: what it is, its size in the shape symbols, its bytes."""

    name: str
    formula: str
    bytes: int
    korthikanti: str = ""  # the matching term of their GPT layer, s·b·h units (h = d there)
    sequence: bool = False  # d wide, a row per token: split by sequence parallelism, whole on every tensor-parallel rank


def activation_terms(block: BlockConfig, T: int, B: int, precision: str, recompute: str) -> list[Term]:
    """The tensors one layer keeps for its backward pass, after Korthikanti et al. 2022, §4.1.

    Their GPT layer (pre-LayerNorm, 4d GELU MLP, dropout on the attention probabilities and both
    branch outputs, 16-bit activations, 1-byte masks) keeps s·b·h·(34 + 5·a·s/h) bytes. Changes for
    blockcli's variants: no dropout drops the three masks and the dropout output (the softmax output
    then feeds weights·V itself); GQA shrinks K and V to h_kv·d_h; a gated MLP keeps four d_ff-wide
    tensors (gate pre-activation, activated gate, up, product) where GELU keeps two, and ReLU one (its
    output serves its own backward and the contraction's); RMSNorm keeps its input like LayerNorm; a
    parallel block's two norms read the same x, kept once; a shared norm's output feeds Q, K, V and
    the MLP, kept once too. Selective recomputation drops the
    s²-sized terms (recomputed from the kept Q and K); full recomputation keeps only the layer input.
    """
    beta = 2 if precision == "mixed" else 4
    b, s = B, T
    d, h, h_kv, d_h, d_ff = block.d_model, block.n_heads, block.n_kv_heads, block.head_dim, mlp_width(block)
    act = lambda n: beta * b * s * n  # noqa: E731  # bytes of a (b, s, n) activation
    mask = lambda n: MASK_BYTES * b * s * n  # noqa: E731
    unit = f"{beta}·s·b"
    if block.cross_attention:  # Mllama's, skipped by a text-only pass: the identity keeps nothing
        return []
    if recompute == "full":
        return [Term("layer input (everything else recomputed)", f"{unit}·d", act(d), "2", sequence=True)]
    post = block.placement == "post"  # H = LN1(X + MHA(X)): attention reads x, the norms read the sums
    shared = block.placement == "parallel_shared"  # one norm: its output is both the QKV and the MLP input
    names = (("norm 1 input (x + attention)", "Q, K, V input (the block input x)", "norm 2 input (h + MLP)",
              "MLP input (norm 1 output h)") if post else
             ("norm 1 input (the attention output)", "Q, K, V input (the block input x)",
              "norm 2 input (the MLP output)", "MLP input (h)") if block.placement == "post_branch" else
             ("norm 1 input" + (" (= norm 2 input: both read x)" if block.placement == "parallel" else ""),
              "Q, K, V and MLP input (the shared norm's output)" if shared else "Q, K, V input (norm 1 output)",
              "norm 2 input", "MLP input (norm 2 output)"))
    terms = [Term(names[0], f"{unit}·d", act(d), "2", sequence=True),
             Term(names[1], f"{unit}·d", act(d), "2", sequence=True)]
    if block.linear_attention is not None:  # what blockcli's Gated DeltaNet keeps for its backward
        n = block.linear_attention
        terms += [Term("q | k | v before and after the short conv, and after its SiLU", f"3·{unit}·C",
                       3 * act(n.conv_width)),
                  Term("q and k normalised, per value head", f"2·{unit}·h_v·d_k", 2 * act(n.value_heads * n.key_head_dim)),
                  Term("b, a, the decay g and β", f"4·{unit}·h_v", 4 * act(n.value_heads)) if not n.per_channel else
                  Term("b and β per head, the decay input and g per key channel, the two low-rank bottlenecks (KDA)",
                       f"{unit}·(2·h_v + 2·h_k·d_k + d_k + d_v)",
                       act(2 * n.value_heads + 2 * n.key_width + n.key_head_dim + n.value_head_dim)),
                  Term("z, the heads' output o and the output projection input", f"3·{unit}·h_v·d_v",
                       3 * act(n.value_width)),
                  Term("each step's starting state S (chunked kernels recompute it instead)", f"{unit}·h_v·d_k·d_v",
                       act(n.value_heads * n.key_head_dim * n.value_head_dim))]
    else:
        terms.append(Term("Q and K, for Q·Kᵀ", f"{unit}·(h + h_kv)·d_h", act((h + h_kv) * d_h), "4"))
    if recompute == "none" and block.linear_attention is None:
        table = b * h * s * s
        terms.append(Term("softmax output", f"{beta}·b·h·s²", beta * table, "2·a·s/h"))
        if block.attention_dropout:
            terms += [Term("attention-dropout mask", f"{MASK_BYTES}·b·h·s²", MASK_BYTES * table, "a·s/h"),
                      Term("attention-dropout output (weights·V input)", f"{beta}·b·h·s²", beta * table,
                           "2·a·s/h")]
    d_v = block.value_dim
    if block.linear_attention is not None:
        pass
    elif block.mla is not None:  # each latent: its norm's input and output (the up-projection's input)
        mla = block.mla
        if mla.q_lora_rank:
            terms.append(Term("Q latent: its norm's input and output", f"2·{unit}·r_q", 2 * act(mla.q_lora_rank)))
        terms += [Term("K/V latent: its norm's input and output", f"2·{unit}·r_kv", 2 * act(mla.kv_lora_rank)),
                  Term("V, for weights·V", f"{unit}·h·d_v", act(h * d_v), "2"),
                  Term("output projection input", f"{unit}·h·d_v", act(h * d_v), "2")]
    else:
        v = "d_v" if d_v != d_h else "d_h"  # MiMo-V2-Flash's values are narrower than its queries and keys
        terms += [Term("V, for weights·V", f"{unit}·h_kv·{v}", act(h_kv * d_v), "2"),
                  Term("output projection input", f"{unit}·h·{v}", act(h * d_v), "2")]
        if block.attention_gate and block.gate_per_head:  # one pre-activation a head
            terms.append(Term(f"attention gate (pre-{'sigmoid' if block.gate_sigmoid else 'softplus'}, one per head)",
                              f"{unit}·h", act(h)))
        elif block.attention_gate:  # the gate's pre-activation, beside the heads its backward reads
            terms.append(Term(f"attention gate (pre-{'sigmoid' if block.attention_gate_form == 'sigmoid' else 'softplus'})",
                              f"{unit}·h·d_h", act(h * d_h)))
    if block.dropout:
        terms.append(Term("attention-branch dropout mask", f"{MASK_BYTES}·s·b·d", mask(d), "1", sequence=True))
    if block.sandwich:  # the norm of the attention output reads it (Gemma 2/3)
        terms.append(Term("norm of the attention output: its input", f"{unit}·d", act(d), "", sequence=True))
    if block.placement not in ("parallel", "parallel_shared"):
        terms.append(Term(names[2], f"{unit}·d", act(d), "2", sequence=True))
    if not shared:
        terms.append(Term(names[3], f"{unit}·d", act(d), "2", sequence=True))
    if block.gated:
        terms += [Term(name, f"{unit}·d_ff", act(d_ff), k) for name, k in
                  (("gate pre-activation", "8"), ("activated gate", ""), ("up projection", ""),
                   ("gate ⊙ up (contraction input)", "8"))]
    elif function_of(block.activation).saves != "input":  # ReLU: its output is all its backward reads
        terms.append(Term(f"{block.activation} output (its backward and the contraction input)", f"{unit}·d_ff",
                          act(d_ff), "8"))
    else:
        terms += [Term(f"{block.activation} input", f"{unit}·d_ff", act(d_ff), "8"),
                  Term(f"{block.activation} output (contraction input)", f"{unit}·d_ff", act(d_ff), "8")]
    if block.dropout:
        terms.append(Term("MLP-branch dropout mask", f"{MASK_BYTES}·s·b·d", mask(d), "1", sequence=True))
    if block.sandwich:  # and the norm of the MLP output reads it
        terms.append(Term("norm of the MLP output: its input", f"{unit}·d", act(d), "", sequence=True))
    return terms


def head_terms(config: Config, T: int, B: int, precision: str) -> list[Term]:
    """Outside the layers: the final norm's and the LM head's inputs, and the float32 logits the loss
    keeps (Korthikanti et al. 2022, §4.3: 4·s·b·V)."""
    m = config.model
    if m is None:
        return []
    beta = 2 if precision == "mixed" else 4
    d = config.block.d_model
    terms = [Term("final norm input", f"{beta}·s·b·d", beta * B * T * d, sequence=True)] if m.final_norm else []
    return terms + [Term("LM head input", f"{beta}·s·b·d", beta * B * T * d, sequence=True),
                    Term("logits for the loss (float32)", f"{LOSS_BYTES}·s·b·V", LOSS_BYTES * B * T * m.vocab_size)]


# ----------------------------------------------------------------------------- training: the whole step


@dataclass(frozen=True)
class Training:
    optimizer: str
    precision: str
    dp: int
    zero: int
    recompute: str
    seq_len: int
    batch: int  # micro-batch per device
    per_parameter: StateBytes
    states: dict[str, int]  # per device
    layer_terms: list[Term]
    other_terms: list[Term]
    n_layers: int
    forward: ForwardFlops  # of the global batch (batch × micro_batches × dp sequences)
    recompute_flops: ForwardFlops
    six_n: int  # Kaplan et al. 2020: 6 × N × tokens, N the non-embedding parameters a token uses
    notes: list[str] = field(default_factory=list)
    other_layers: tuple[tuple[int, int], ...] = ()  # when layers differ: (layers, bytes per layer) of the other groups
    six_n_parameters: int = 0  # N: the non-embedding parameters, or a mixture of experts' active ones
    six_n_active: bool = False  # N is the active count (a mixture of experts), not all of them
    lora: Lora | None = None
    micro_batches: int = 1  # per step, each of `batch` sequences per device
    attention: str = "megatron"  # whose implementation's saves the activations describe (blockcli.profiles)

    @property
    def activations_per_layer(self) -> int:
        """Of a layer of the first group (layer 0's): `layer_terms`."""
        return sum(t.bytes for t in self.layer_terms)

    @property
    def activations_outside_layers(self) -> int:
        return sum(t.bytes for t in self.other_terms)

    @property
    def activation_bytes(self) -> int:
        return (self.n_layers * self.activations_per_layer + sum(n * size for n, size in self.other_layers)
                + self.activations_outside_layers)

    @property
    def state_bytes(self) -> int:
        return sum(self.states.values())

    @property
    def memory_bytes(self) -> int:
        """Per device: model states and the activations of its micro-batch."""
        return self.state_bytes + self.activation_bytes

    @property
    def tokens(self) -> int:
        return self.seq_len * self.batch * self.micro_batches * self.dp

    @property
    def lora_flops(self) -> int:
        """The adapters' forward products, of the global batch (0 without LoRA)."""
        return self.lora.flops_per_token() * self.tokens if self.lora is not None else 0

    def forward_flops(self, causal: bool = False) -> int:
        return self.forward.total(causal) + self.lora_flops

    def backward_flops(self, causal: bool = False) -> int:
        """2× the forward (gradients of the inputs and of the weights); with LoRA the frozen weights'
        products only once (their inputs' gradients), the score products and the adapters' twice."""
        if self.lora is None:
            return 2 * self.forward.total(causal)
        f = self.forward
        return f.blocks_dense + f.head + 2 * (f.scores_causal if causal else f.scores_full) + 2 * self.lora_flops

    def recomputed_flops(self, causal: bool = False) -> int:
        """The forward work done again (full recomputation redoes the adapters' products too)."""
        return self.recompute_flops.total(causal) + (self.lora_flops if self.recompute == "full" else 0)

    def step_flops(self, causal: bool = False) -> int:
        """Forward, backward, and the recomputed forward work, of the global batch."""
        return self.forward_flops(causal) + self.backward_flops(causal) + self.recomputed_flops(causal)


def training(config: Config, parameters: int, non_embedding: int, seq_len: int, batch: int, *,
             optimizer: str = "adamw", precision: str = "mixed", dp: int = 1, zero: int = 0,
             recompute: str = "none", active_non_embedding: int | None = None,
             lora: Lora | None = None, micro_batches: int = 1, attention: str = "megatron",
             model_type: str = "") -> Training:
    """A training step. `active_non_embedding`: what one token uses of the non-embedding parameters (a
    mixture of experts' active ones), the N of Kaplan's 6·N. With `lora`, only the adapters train: their
    gradients and optimizer states, the frozen base at its dtype, the x·A intermediates kept, and a
    backward without the frozen weights' gradient products. `attention`: whose saves the activations are
    (blockcli.profiles: megatron, Korthikanti et al.'s terms; eager or sdpa, transformers'; blockcli, its own
    backward's); `model_type`: the family whose transformers modules those profiles follow."""
    profiles.check(attention, config, recompute)
    if config.block.ngpt is not None or (config.model is not None and config.model.recurrent_layers):
        raise InputError(f"{config.name}: the training step of nGPT's normalized block (Dory: block.ngpt, looped "
                         f"layers) is not modelled (its backward is not implemented)")
    if any(dims.lightning for dims in Dims.per_group(config)):
        raise InputError(f"{config.name}: the training step of lightning-attention layers is not modelled (their "
                         f"backward is not implemented): --train sizes attention layers' activations and backward only")
    if any(dims.differential for dims in Dims.per_group(config)):
        raise InputError(f"{config.name}: the training step of differential-attention layers is not modelled (what "
                         f"their backward keeps: both halves of V, the pairs before their norm): --train sizes softmax "
                         f"attention layers' activations and backward only")
    if any(dims.mamba or dims.conv_K for dims in Dims.per_group(config)):
        raise InputError(f"{config.name}: the training step of Mamba-1 and Mamba-2 (state-space) layers and short "
                         f"convolutions is not modelled: --train sizes attention layers' activations and backward only")
    for option, value, allowed in (("--optimizer", optimizer, OPTIMIZERS), ("--precision", precision, PRECISIONS),
                                   ("--recompute", recompute, RECOMPUTE), ("--zero", zero, (0, 1, 2, 3))):
        if value not in allowed:
            raise InputError(f"{option}: expected one of {', '.join(map(str, allowed))}, got {value!r}")
    groups = Dims.per_group(config)
    per = state_bytes(optimizer, precision)
    sequences = batch * micro_batches * dp  # of the step
    forward = model_forward_flops(groups, seq_len, sequences)
    if recompute == "full":  # every layer's forward again; the LM head is not inside a checkpoint
        again = ForwardFlops(forward.blocks_dense, forward.scores_full, forward.scores_causal, 0)
    elif recompute == "selective":  # the two score products (and the cheap softmax and dropout)
        again = ForwardFlops(0, forward.scores_full, forward.scores_causal, 0)
    else:
        again = ForwardFlops(0, 0, 0, 0)
    notes = [] if dp > 1 or zero == 0 else [f"ZeRO stage {zero} partitions over --dp devices; with --dp 1 "
                                            "nothing is divided"]
    layer_groups = config.layer_groups()

    fused_qkv = attention == "sdpa" and any({"q", "k", "v"} <= set(roles) for roles in
                                            fused_modules(model_type or config.about.model_type)[0])

    def terms(i: int, block: BlockConfig) -> list[Term]:
        if attention in ("eager", "sdpa"):
            kept = [Term(n, f, size, sequence=s) for n, f, size, s in
                    profiles.layer_terms(block, seq_len, batch, precision, attention, recompute,
                                         model_type or config.about.model_type, fused_qkv)]
        elif attention == "blockcli":
            n, f, size, s = profiles.blockcli_layer(block, seq_len, batch, precision)
            kept = [Term(n, f, size, sequence=s)]
        else:
            kept = activation_terms(block, seq_len, batch, precision, recompute)
        if lora is not None and recompute != "full" and lora.kept_per_token[i]:
            beta = 2 if precision == "mixed" else 4
            kept.append(Term("LoRA: x·A of each adapted matrix (B's input)", f"{beta}·s·b·Σr",
                             beta * batch * seq_len * lora.kept_per_token[i]))
        return kept

    others = tuple((len(g.layers), sum(t.bytes for t in terms(i, g.block)))
                   for i, g in enumerate(layer_groups) if i > 0)
    if others:
        notes.append(f"layers differ: the per-layer activations are those of {layer_list(layer_groups[0].layers)}; "
                     + "; ".join(f"{layer_list(g.layers)} keep {size:,} bytes each"
                                 for g, (_, size) in zip(layer_groups[1:], others)))
    active = non_embedding if active_non_embedding is None else active_non_embedding
    if lora is None:
        states = states_per_device(parameters, per, dp, zero)
        if zero == 3:  # each layer's weights gathered whole for its forward and backward
            module, size = largest_module(config)
            states["gathered_layer"] = GATHER_BYTES * size
            notes.append(f"ZeRO stage 3 gathers each module whole while it runs: + {GATHER_BYTES} bytes × the "
                         f"largest one's {size:,} parameters ({module}), as DeepSpeed's estimator adds")
    else:
        states = lora_states(lora, per, dp, zero)
    outside = ([Term(n, f, size, sequence=s) for n, f, size, s in profiles.head_terms(config, seq_len, batch, precision)]
               if attention in ("eager", "sdpa") else
               [Term(n, f, size, sequence=s) for n, f, size, s in profiles.blockcli_outside(config, seq_len, batch,
                                                                                               precision)]
               if attention == "blockcli" else head_terms(config, seq_len, batch, precision))
    if attention != "megatron":
        notes.append(profiles.note(attention, config, seq_len))
    return Training(optimizer, precision, dp, zero, recompute, seq_len, batch, per, states,
                    terms(0, layer_groups[0].block), outside, groups[0].L,
                    forward, again, 6 * active * seq_len * sequences, notes, others, active,
                    active != non_embedding, lora, micro_batches, attention)


GATHER_BYTES = 4  # DeepSpeed's ZeRO-3 estimator: the largest module's 16-bit weights and gradients, whole on each device


def largest_module(config: Config) -> tuple[str, int]:
    """(name, parameters) of the largest module, its own parameters (DeepSpeed's `parameters(recurse=False)`):
    a linear layer's weight and bias, an embedding table, a norm, the router, or a mixture's routed experts
    together (transformers 5 fuses them into one module of E·(2 or 3)·d·d_e weights)."""
    modules: dict[str, int] = {}

    def add(name: str, shape: tuple[int, ...]) -> None:
        modules[name] = modules.get(name, 0) + math.prod(shape)

    before, after = outer_shapes(config) if config.model else ({}, {})
    outer = {"wte": "the token embedding", "wpe": "the position embedding", "lm_head": "the LM head",
             "lm_head_bias": "the LM head"}
    for key, shape in {**before, **after}.items():
        add(outer.get(key, re.sub(r"_(gamma|beta)$", "", key)), shape)
    for group in config.layer_groups():
        where = layer_list(group.layers)
        for key, shape in block_parameter_shapes(group.block).items():
            if is_buffer(key):
                continue
            if key.startswith("experts."):
                add(f"the routed experts of one of {where}", shape)
            elif key.startswith("attn_experts."):
                add(f"the attention experts of one of {where}", shape)
            else:  # w_q and b_q one linear layer; ln1_gamma and ln1_beta one norm
                module = re.sub(r"^(shared_)?[wb]_|_(gamma|beta)$", lambda m: m.group(1) or "", key)
                add(f"{module} of one of {where}", shape)
    name = max(modules, key=modules.__getitem__)
    return name, modules[name]


def lora_states(lora: Lora, per: StateBytes, dp: int, zero: int) -> dict[str, int]:
    """Model-state bytes per device with LoRA: the frozen base at its dtype plus the adapters' weights;
    gradients and optimizer states (fp32 master copy and moments) of the adapters only. ZeRO partitions
    as for full training: stage 1 the optimizer states, 2 the gradients, 3 the weights (frozen ones too)."""
    n = lora.trainable
    share = lambda size, stage: -(-size // dp) if zero >= stage else size  # noqa: E731
    return {"weights": share(lora.frozen_bytes + n * per.weights, 3), "gradients": share(n * per.gradients, 2),
            "optimizer": share(n * per.optimizer, 1)}


# ----------------------------------------------------------------------------- budgets

_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def parse_size(text: str, option: str = "--max-memory") -> int:
    """'80GiB', '80 GB', '1.5TiB', '123456' (bytes) → bytes."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).upper() if match else None
    if match is None or unit not in _UNITS:
        raise InputError(f"{option}: expected a size such as 80GiB, 40GB or 1.5TiB (KB/MB/GB/TB are powers "
                         f"of 1000, KiB/MiB/GiB/TiB of 1024, no unit is bytes); got '{clipped(text)}'")
    whole, _, frac = match.group(1).partition(".")
    scale = _UNITS[unit]
    whole_number(whole + frac, option)  # digits past any size: one line, not int()'s limit
    return int(whole) * scale + (int(frac) * scale // 10 ** len(frac) if frac else 0)


@dataclass(frozen=True)
class Solved:
    """The largest value of one workload dimension whose memory fits a budget: `answer` (0 when even 1 does
    not fit) at `memory_bytes`, and `next_memory_bytes` at answer + 1 (None when `cap` stops the search there)."""
    answer: int
    memory_bytes: int | None
    next_memory_bytes: int | None
    cap: int | None


SOLVE_LIMIT = 2**40  # no workload dimension is searched past this many tokens or sequences


def solve_largest(memory: Callable[[int], int], budget: int, cap: int | None = None) -> Solved:
    """The largest n ≥ 1 with memory(n) ≤ budget, for memory non-decreasing in n, n at most `cap` (a model's
    learned positions) or SOLVE_LIMIT: doubling until it does not fit, then bisecting."""
    limit = min(cap, SOLVE_LIMIT) if cap is not None else SOLVE_LIMIT
    first = memory(1)
    if first > budget:
        return Solved(0, None, first, cap)
    low, high = 1, 2  # memory(low) fits; high is the first candidate not yet known to fit
    while high <= limit and memory(high) <= budget:
        low, high = high, high * 2
    high = min(high, limit + 1)  # every n < high that was probed fits; high does not, or is past the limit
    while high - low > 1:
        middle = (low + high) // 2
        if memory(middle) <= budget:
            low = middle
        else:
            high = middle
    past = memory(low + 1) if low < limit else None
    return Solved(low, memory(low), past, cap)


def parse_sweep(text: str, dtypes: tuple[str, ...]) -> tuple[str, list]:
    """'seq=1k,4k' → ('seq', [1024, 4096]); batch=… likewise (k = 1024, m = 1024²); 'dtype=float32,bfloat16' →
    ('dtype', ['float32', 'bfloat16'])."""
    axis, _, listed = text.partition("=")
    values = [v.strip() for v in listed.split(",")]
    if axis not in ("seq", "batch", "dtype") or not all(values):
        raise InputError(f"--sweep: expected seq=V,V,…, batch=V,V,… or dtype=D,D,… (e.g. seq=1k,4k,32k); "
                         f"got '{clipped(text)}'")
    if axis == "dtype":
        if bad := [v for v in values if v not in dtypes]:
            raise InputError(f"--sweep dtype: '{clipped(bad[0])}' is not one of {', '.join(dtypes)}")
        return axis, values
    numbers = []
    for v in values:
        match = re.fullmatch(r"(\d{1,15})([kKmM]?)", v)
        if match is None or int(match.group(1)) == 0:
            raise InputError(f"--sweep {axis}: expected a whole number ≥ 1 such as 4096 or 4k; got '{clipped(v)}'")
        numbers.append(int(match.group(1)) * {"": 1, "k": 2**10, "m": 2**20}[match.group(2).lower()])
    return axis, numbers


def check_workload(config: Config, seq_len: int) -> str | None:
    """A model with learned positions has no row for a token beyond max_positions (an error); for any
    other model, a note when the sequence is longer than the positions it was built for."""
    m = config.model
    if m is not None and m.positions == "learned" and seq_len > m.max_positions:
        raise InputError(f"--seq: {seq_len} tokens exceed model.max_positions={m.max_positions} "
                         f"(learned positions)")
    if m is not None and seq_len > m.max_positions:
        return (f"{seq_len:,} tokens are past the model's max_positions {m.max_positions:,} (a config.json's "
                f"max_position_embeddings): computed as asked, but the model was not built for them")
    return None


# ----------------------------------------------------------------------------- fine-tuning: LoRA

LORA_ROLES = ("q", "k", "v", "o", "gate", "up", "down", "router")
ALL_LINEAR = "all-linear"
FROZEN_DTYPES = ("bf16", "int8", "nf4", "int4")
PEFT_ALPHA = 8.0  # peft.LoraConfig's default lora_alpha
NF4_BLOCK = 64  # weights per absmax constant (QLoRA §3, "4-bit NormalFloat"; bitsandbytes quantize_4bit blocksize=64)
NF4_BLOCK2 = 256  # absmax constants per float32 constant of the second quantization (QLoRA §3, "Double Quantization")


@dataclass(frozen=True)
class Adapter:
    """One adapted module, as PEFT wraps it: A (r × in) and B (out × r), in `layers` layers, `n` of it per
    layer (E for a routed expert's, each its own adapter); `roles`: the blockcli roles it computes (q, k, v
    for a fused module); a token passes through `tokens` of the n (a routed expert's k of E)."""

    module: str
    roles: tuple[str, ...]
    fan_in: int
    fan_out: int
    layers: int
    n: int = 1
    tokens: int = 1

    @property
    def copies(self) -> int:
        return self.layers * self.n

    def parameters(self, rank: int) -> int:
        return self.copies * rank * (self.fan_in + self.fan_out)

    def flops_per_token(self, rank: int) -> int:
        """x·A then ·B, in every layer, for the `tokens` of the n a token passes through."""
        return 2 * self.layers * self.tokens * rank * (self.fan_in + self.fan_out)


@dataclass(frozen=True)
class Lora:
    rank: int
    alpha: float
    targets: tuple[str, ...]  # as given: roles, or ("all-linear",)
    layout: str  # whose modules the adapters follow, in words
    adapters: tuple[Adapter, ...]
    frozen_dtype: str
    frozen_parameters: int  # every parameter of the base model
    quantized_parameters: int  # those stored at frozen_dtype (the blocks' weight matrices)
    frozen_bytes: int
    # per layer group (config.layer_groups()): the x·A values a token keeps, Σ r over the adapted matrices
    # it passes through (k of a routed expert's E)
    kept_per_token: tuple[int, ...] = ()

    @property
    def trainable(self) -> int:
        return sum(a.parameters(self.rank) for a in self.adapters)

    def flops_per_token(self) -> int:
        return sum(a.flops_per_token(self.rank) for a in self.adapters)

    @property
    def scale(self) -> float:
        """PEFT's scaling alpha / r: the size of the update B·A·x, nothing in memory or FLOPs."""
        return self.alpha / self.rank


# Modules fused in a family's checkpoint (and in transformers' modules): its tensor map's entries that fill
# several of a layer's matrices, by blockcli role; e.g. GPT-2's c_attn holds q, k, v.
Fused = dict[tuple[str, ...], str]


def fused_modules(model_type: str | None) -> tuple[Fused, str]:
    """The fused modules of `model_type`'s family (role tuple → module name) and a phrase saying whose
    layout that is; with no family (a YAML config without about.model_type), every matrix its own module
    (Llama's layout)."""
    from blockcli.families import FAMILIES  # lazy: only for a config.json's family

    if model_type and model_type not in FAMILIES:
        raise InputError(f"about.model_type: {clipped(model_type)!r} is not a family blockcli knows (one of "
                         f"{', '.join(sorted(FAMILIES))})")
    family = FAMILIES.get(model_type) if model_type else None
    if family is None:
        return {}, ("one module per matrix (Llama's layout; a config.json's family, or about.model_type, gives "
                    "its own)")
    fused: Fused = {}
    for entry in family.tensors.tensors:
        roles = tuple(k.rsplit(".w_", 1)[-1] for k in entry.keys if k.startswith("blocks.{i}.w_"))
        if len(roles) > 1 and len(roles) == len(entry.keys):
            fused[roles] = entry.name.split("|")[0].rsplit(".", 2)[-2]  # h.{i}.attn.c_attn.weight → c_attn
    return fused, f"{family.title}'s modules" + (
        " (" + "; ".join(f"{name}: {', '.join(roles)}" for roles, name in fused.items()) + ")" if fused else "")


def block_adapters(block: BlockConfig, fused: Fused, layers: int = 1) -> list[Adapter]:
    """Every linear module of a block, in forward order, as transformers 5 holds them: the attention's
    projections (latent attention's low-rank ones: q through q_a and q_b, K and V through the shared
    kv_a and kv_b), the MLP's, or a mixture's router, routed experts (each expert's gate and up fused,
    as transformers 5's gate_up_proj holds them; one adapter per expert, as PEFT's target_parameters
    gives each expert its own rank r) and shared expert (and its gate)."""
    from blockcli.shapes import block_parameter_shapes  # lazy: only for --lora-*

    shapes = block_parameter_shapes(block)
    out: list[Adapter] = []

    def add(module: str, roles: tuple[str, ...], keys: tuple[str, ...], n: int = 1, tokens: int = 1) -> None:
        if all(k in shapes for k in keys):
            out.append(Adapter(module, roles, shapes[keys[0]][0], sum(shapes[k][1] for k in keys), layers, n,
                               tokens))

    attention = ("q", "k", "v")
    if block.mla is not None:
        add("q_a", ("q",), ("w_q_a",))
        add("q_b", ("q",), ("w_q_b",))
        add("q", ("q",), ("w_q",))
        add("kv_a", ("k", "v"), ("w_kv_a",))
        add("kv_b", ("k", "v"), ("w_kv_b",))
    elif attention in fused:
        add(fused[attention], attention, ("w_q", "w_k", "w_v"))
    else:
        for role in attention:
            add(role, (role,), (f"w_{role}",))
    add("o", ("o",), ("w_o",))
    moe = block.moe
    if moe is None:
        if ("gate", "up") in fused:
            add(fused[("gate", "up")], ("gate", "up"), ("w_gate", "w_up"))
        else:
            add("gate", ("gate",), ("w_gate",))
            add("up", ("up",), ("w_up",))
        add("down", ("down",), ("w_down",))
        return out
    add("router", ("router",), ("router",))
    E, k = moe.n_experts, moe.top_k
    if block.gated:
        add("experts gate_up", ("gate", "up"), ("experts.0.w_gate", "experts.0.w_up"), E, k)
    else:
        add("experts up", ("up",), ("experts.0.w_up",), E, k)
    add("experts down", ("down",), ("experts.0.w_down",), E, k)
    for role in ("gate", "up", "down"):
        add(f"shared {role}", (role,), (f"shared_w_{role}",))
    add("shared gate", ("router",), ("shared_gate",))
    return out


def parse_lora_targets(text: str) -> tuple[str, ...]:
    """'q,k,v' → ('q', 'k', 'v'); 'all-linear' → ('all-linear',). Unknown names are an InputError."""
    names = tuple(dict.fromkeys(part.strip().lower() for part in text.split(",")))
    if names == (ALL_LINEAR,):
        return names
    if ALL_LINEAR in names:
        raise InputError(f"--lora-targets: {ALL_LINEAR} stands alone (it is every linear layer); got '{clipped(text)}'")
    bad = [n for n in names if n not in LORA_ROLES]
    if bad or not names:
        raise InputError(f"--lora-targets: {clipped(bad[0]) if bad and bad[0] else 'an empty name'} is not a target; "
                         f"expected {ALL_LINEAR} or a comma-separated list of {', '.join(LORA_ROLES)}")
    return names


def lora(config: Config, rank: int, targets: tuple[str, ...], alpha: float | None = None,
         frozen_dtype: str = "bf16", model_type: str | None = None) -> Lora:
    """LoRA (Hu et al. 2021) on `targets` at rank r, counted as PEFT counts it: each adapted module
    gets A (r × in) and B (out × r), r·(in + out) trainable parameters; the base model is frozen at
    `frozen_dtype`. `all-linear` adapts every linear layer of the blocks and OPT-350m's project in/out,
    not the LM head (PEFT's all-linear). A fused module (GPT-2's c_attn: q, k, v) gets one adapter,
    r·(d + 3·d), so its roles are targeted together or not at all."""
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise InputError(f"--lora-rank: expected a whole number of at least 1, got {rank!r}")
    if alpha is not None and not (alpha > 0 and alpha != float("inf")):
        raise InputError(f"--lora-alpha: expected a positive number, got {alpha!r}")
    if frozen_dtype not in FROZEN_DTYPES:
        raise InputError(f"--frozen-dtype: expected one of {', '.join(FROZEN_DTYPES)}, got {frozen_dtype!r}")
    fused, layout = fused_modules(model_type)
    everything = targets == (ALL_LINEAR,)
    wanted = set(LORA_ROLES) if everything else set(targets)
    groups = config.layer_groups()
    merged: dict[tuple, Adapter] = {}
    present: set[str] = set()
    for group in groups:
        for a in block_adapters(group.block, fused, len(group.layers) if config.model else 1):
            present.update(a.roles)
            chosen = wanted & set(a.roles)
            if not chosen:
                continue
            if chosen != set(a.roles) and not everything:
                missing = [r for r in a.roles if r not in chosen]
                raise InputError(f"--lora-targets: {', '.join(r for r in a.roles if r in chosen)} shares the module "
                                 f"'{a.module}' with {', '.join(missing)} ({layout}); target "
                                 f"{','.join(a.roles)} together")
            key = (a.module, a.roles, a.fan_in, a.fan_out, a.n, a.tokens)
            merged[key] = replace(a, layers=merged[key].layers + a.layers) if key in merged else a
    if not everything:
        absent = [t for t in targets if t not in present]
        if absent:
            raise InputError(f"--lora-targets: {absent[0]}: {config.name} has no such matrix (its layers have "
                             f"{', '.join(r for r in LORA_ROLES if r in present)})")
    adapters = list(merged.values())
    m, d = config.model, config.block.d_model
    e = projected_width(m, d)
    if everything and e:  # OPT-350m's project_in and project_out are nn.Linear too
        adapters += [Adapter("proj_in", (), e, d, 1), Adapter("proj_out", (), d, e, 1)]
    parameters, quantized, frozen = frozen_base(config, frozen_dtype)
    widths = tuple(sum(a.tokens * rank for a in block_adapters(g.block, fused) if wanted & set(a.roles))
                   for g in groups)
    return Lora(rank, alpha if alpha is not None else PEFT_ALPHA, targets, layout, tuple(adapters), frozen_dtype,
                parameters, quantized, frozen, widths)


def quantized_bytes(shape: tuple[int, ...], dtype: str) -> int:
    """Bytes of one frozen weight matrix (in, out) at `dtype`:
    - bf16: 2 bytes a weight.
    - int8: LLM.int8() (Dettmers et al. 2022; bitsandbytes Int8Params): 1 byte a weight and one float32
      scale per output row (its `SCB`).
    - nf4: QLoRA (Dettmers et al. 2023, §3, "Double Quantization") as bitsandbytes stores it
      (bitsandbytes/functional.py, quantize_4bit(blocksize=64, compress_statistics=True), which is
      transformers' bnb_4bit_use_double_quant=True): 4 bits a weight, (n + 1) // 2 bytes; one absmax per
      block of 64 weights, its mean subtracted (`offset`, one float32) and quantized to uint8 by
      quantize_blockwise(absmax - offset, blocksize=256), whose state2 keeps one float32 absmax per 256:
      4 + 8/64 + 32/(64·256) = 4.127 bits a weight (the paper's 0.127 bits of constants per parameter).
      The 16-value NF4 code and the shared 8-bit code table are not counted.
    - int4: 4 bits a weight, two per byte; a scheme's scales and zeros (GPTQ's, AWQ's per group) are not."""
    n = math.prod(shape)
    if dtype == "bf16":
        return 2 * n
    if dtype == "int8":
        return n + 4 * shape[-1]
    packed = -(-n // 2)
    if dtype == "int4":
        return packed
    blocks = -(-n // NF4_BLOCK)
    return packed + blocks + 4 * -(-blocks // NF4_BLOCK2) + 4


def frozen_base(config: Config, dtype: str) -> tuple[int, int, int]:
    """(parameters, those quantized, bytes) of the frozen base model: the blocks' weight matrices (and
    OPT-350m's project in/out) at `dtype`, as bitsandbytes replaces each nn.Linear but the LM head; the
    embeddings, norms, biases and LM head at 16 bits. Buffers are not parameters: not counted."""
    from blockcli.shapes import block_parameter_shapes, is_buffer, outer_shapes  # lazy: only for --lora-*

    if config.model is None:
        counted = [(block_parameter_shapes(config.block), 1)]
    else:
        before, after = outer_shapes(config)
        counted = [(block_parameter_shapes(g.block), len(g.layers)) for g in config.layer_groups()]
        counted.append(({**before, **after}, 1))
    parameters = quantized = frozen = 0
    for shapes, copies in counted:
        for name, shape in shapes.items():
            if is_buffer(name):
                continue
            n = math.prod(shape) * copies
            parameters += n
            if len(shape) == 2 and "norm" not in name and name not in ("wte", "wpe", "lm_head"):
                quantized += n
                frozen += quantized_bytes(shape, dtype) * copies
            else:
                frozen += 2 * n
    return parameters, quantized, frozen
