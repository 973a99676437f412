"""The parameter shapes every layer declares, from the config alone (no NumPy, nothing allocated).

`count` reconciles its closed-form formula against these for configs too large to build, and
`block` creates exactly these arrays. Weight matrices are (in, out): y = x @ W + b.
"""

from __future__ import annotations

import math

from blockcli.activations import function_of
from blockcli.config import BlockConfig, Config, Mamba1, SharedBlock, projected_width

Shape = tuple[int, ...]

# Stored with the weights but not trained, so not parameters: transformers keeps DeepSeek-V3's
# e_score_correction_bias (blockcli's router_bias) as a buffer, outside `parameters()`
# as xIELU's β and ε (act_beta, act_eps: Apertus' XIELUActivation keeps them as buffers)
# and Gemma 4's layer_scalar (Gemma4TextDecoderLayer's nn.Buffer, stored in its checkpoints)
BUFFERS = frozenset({"router_bias", "act_beta", "act_eps", "layer_scalar"})
_IN_A_LAYER = tuple(f".{name}" for name in BUFFERS)


def is_buffer(key: str) -> bool:
    """Whether a block or model key ('router_bias', 'blocks.3.router_bias') names a buffer."""
    return key in BUFFERS or key.endswith(_IN_A_LAYER)


def counted_buffer(key: str, config: Config) -> bool:
    """Whether a layer's buffer key is counted among the parameters all the same: a selection bias stored as a
    parameter that is never trained (ERNIE 4.5's `selection_bias_frozen`)."""
    if not key.startswith("blocks.") or not key.endswith(".router_bias"):
        return False
    moe = config.layer_block(int(key.split(".")[1])).moe
    return moe is not None and moe.selection_bias_frozen


def norm_shapes(prefix: str, d: int, cfg: BlockConfig, shift: bool | None = None) -> dict[str, Shape]:
    """A norm's gamma (d,) (with norm_scale) and beta (d,) (with `shift`, by default bias.norm)."""
    shapes: dict[str, Shape] = {f"{prefix}_gamma": (d,)} if cfg.norm_scale else {}
    if cfg.bias.norm if shift is None else shift:
        shapes[f"{prefix}_beta"] = (d,)
    return shapes


def latent_attention_shapes(cfg: BlockConfig) -> dict[str, Shape]:
    """Multi-head latent attention: Q (through its latent when q_lora_rank is set), the shared
    K/V down-projection with its RoPE key, the latent's norm, the K/V up-projection, W_O.
    block.bias.qkv gives the two down-projections a bias (DeepSeek's attention_bias), bias.out W_O."""
    m, d, h = cfg.mla, cfg.d_model, cfg.n_heads
    assert m is not None
    shapes: dict[str, Shape] = {}
    if m.q_lora_rank:
        shapes["w_q_a"] = (d, m.q_lora_rank)
        if cfg.bias.qkv:
            shapes["b_q_a"] = (m.q_lora_rank,)
        shapes.update(norm_shapes("q_a_norm", m.q_lora_rank, cfg))
        shapes["w_q_b"] = (m.q_lora_rank, h * m.qk_head_dim)
    else:
        shapes["w_q"] = (d, h * m.qk_head_dim)
    shapes["w_kv_a"] = (d, m.kv_lora_rank + m.qk_rope_head_dim)
    if cfg.bias.qkv:
        shapes["b_kv_a"] = (m.kv_lora_rank + m.qk_rope_head_dim,)
    shapes.update(norm_shapes("kv_a_norm", m.kv_lora_rank, cfg))
    shapes["w_kv_b"] = (m.kv_lora_rank, h * (m.qk_nope_head_dim + m.v_head_dim))
    shapes["w_o"] = (h * m.v_head_dim, d)
    if cfg.bias.out:
        shapes["b_o"] = (d,)
    if m.own_indexer:  # DeepSeek Sparse Attention's indexer: its queries from the query latent, one key per token
        shapes.update(idx_w_q=(m.q_lora_rank, m.index_heads * m.index_head_dim), idx_w_k=(d, m.index_head_dim),
                      idx_k_norm_gamma=(m.index_head_dim,), idx_k_norm_beta=(m.index_head_dim,),
                      idx_w_weights=(d, m.index_heads))  # the key's LayerNorm always has both; a weight per head
    return shapes


def deltanet_shapes(cfg: BlockConfig) -> dict[str, Shape]:
    """A Gated DeltaNet layer's token mixer (blockcli/deltanet.py), in forward order, matrices (in, out): the six
    projections from x (q, k, v, the output gate z, the write strength b, the decay input a), the short conv's
    taps (C, K) over q | k | v, dt_bias and A_log per value head, the output norm's γ (d_v,), W_O."""
    m, d = cfg.linear_attention, cfg.d_model
    assert m is not None
    if m.per_channel:  # Kimi Delta Attention: the decay input and the output gate low-rank through d_k, the decay
        # per key channel (dt_bias h·d_k) with A_log per head, no z; a short conv of its own for each of q, k, v
        return {"dn_q": (d, m.key_width), "dn_k": (d, m.key_width), "dn_v": (d, m.value_width),
                "dn_f_a": (d, m.key_head_dim), "dn_f_b": (m.key_head_dim, m.key_width),
                "dn_b": (d, m.value_heads), "dn_g_a": (d, m.value_head_dim), "dn_g_b": (m.value_head_dim, m.value_width),
                "dn_q_conv": (m.key_width, m.conv_kernel), "dn_k_conv": (m.key_width, m.conv_kernel),
                "dn_v_conv": (m.value_width, m.conv_kernel), "dn_dt_bias": (m.key_width,), "dn_A_log": (m.value_heads,),
                "dn_norm_gamma": (m.value_head_dim,), "dn_out": (m.value_width, d)}
    conv = ({"dn_q_conv": (m.key_width, m.conv_kernel), "dn_k_conv": (m.key_width, m.conv_kernel),
             "dn_v_conv": (m.value_width, m.conv_kernel)} if m.split_conv else
            {"dn_conv": (m.conv_width, m.conv_kernel)})  # OLMo Hybrid's three convs, or one over q | k | v
    return {"dn_q": (d, m.key_width), "dn_k": (d, m.key_width), "dn_v": (d, m.value_width),
            "dn_z": (d, m.value_width), "dn_b": (d, m.value_heads), "dn_a": (d, m.value_heads),
            **conv, "dn_dt_bias": (m.value_heads,), "dn_A_log": (m.value_heads,),
            "dn_norm_gamma": (m.value_head_dim,), "dn_out": (m.value_width, d)}


def mamba_shapes(cfg: BlockConfig) -> dict[str, Shape]:
    """A Mamba-2 mixer (config.Mamba2): in_proj (d, 2·d_in + 2·g·N + h) giving z, x, B, C and dt; the depthwise
    conv over x, B, C (conv_dim, K) and its bias; per head dt_bias, A_log and D (h,); the gated norm's scale (d_in,);
    out_proj (d_in, d); in_proj's bias with mamba.proj_bias, out_proj's with out_bias (as proj_bias unless set)."""
    m, d = cfg.mamba, cfg.d_model
    assert m is not None
    width = m.in_width  # 2·d_in + 2·g·N + h
    shapes: dict[str, Shape] = {"w_ssm_in": (d, width)}
    if m.proj_bias:
        shapes["b_ssm_in"] = (width,)
    shapes["ssm_conv"] = (m.conv_dim, m.conv_kernel)
    if m.conv_bias:
        shapes["b_ssm_conv"] = (m.conv_dim,)
    shapes.update({"ssm_dt_bias": (m.n_heads,), "ssm_A_log": (m.n_heads,), "ssm_D": (m.n_heads,)})
    if m.norm != "none":  # the norm's scale (Falcon-H1 without mamba_rms_norm has no norm)
        shapes["ssm_norm_gamma"] = (m.d_inner,)
    shapes["w_ssm_out"] = (m.d_inner, d)
    if m.has_out_bias:
        shapes["b_ssm_out"] = (d,)
    return shapes


def mamba1_shapes(cfg: BlockConfig) -> dict[str, Shape]:
    """A Mamba-1 mixer (config.Mamba1): in_proj (d, 2·d_in) giving x and z; the depthwise conv over x (d_in, K) and
    its bias; x_proj (d_in, R + 2·N) giving δ, B, C (no bias); dt_proj (R, d_in) and its bias; A_log (d_in, N) and D
    (d_in,); the learned norms' scales of δ (R,), B and C (N,) with bc_norm learned; out_proj (d_in, d); in_proj's and
    out_proj's biases with mamba.proj_bias."""
    m, d = cfg.mamba, cfg.d_model
    assert isinstance(m, Mamba1)
    d_in, R, N = m.d_inner, m.dt_rank, m.d_state
    shapes: dict[str, Shape] = {"w_ssm_in": (d, 2 * d_in)}
    if m.proj_bias:
        shapes["b_ssm_in"] = (2 * d_in,)
    shapes["ssm_conv"] = (d_in, m.conv_kernel)
    if m.conv_bias:
        shapes["b_ssm_conv"] = (d_in,)
    shapes.update({"w_ssm_x": (d_in, R + 2 * N), "w_ssm_dt": (R, d_in), "b_ssm_dt": (d_in,),
                   "ssm_A_log": (d_in, N), "ssm_D": (d_in,)})
    if m.bc_norm == "learned":
        shapes.update({"ssm_dt_norm": (R,), "ssm_B_norm": (N,), "ssm_C_norm": (N,)})
    shapes["w_ssm_out"] = (d_in, d)
    if m.proj_bias:
        shapes["b_ssm_out"] = (d,)
    return shapes


def short_conv_shapes(cfg: BlockConfig) -> dict[str, Shape]:
    """A gated short convolution (config.ShortConv): in_proj (d, 3·d) to B, C, x; the depthwise conv (d, K); out_proj
    (d, d); each with a bias with short_conv.bias."""
    c, d = cfg.short_conv, cfg.d_model
    assert c is not None
    shapes: dict[str, Shape] = {"w_conv_in": (d, 3 * d), "b_conv_in": (3 * d,), "short_conv": (d, c.kernel),
                                "b_short_conv": (d,), "w_conv_out": (d, d), "b_conv_out": (d,)}
    return {k: v for k, v in shapes.items() if c.bias or not k.startswith("b_")}


def lightning_shapes(cfg: BlockConfig) -> dict[str, Shape]:
    """A lightning-attention layer's mixer (blockcli/lightning.py), matrices (in, out): q, k and v (d, h·d_h) each
    (one qkv_proj in the checkpoint, its rows grouped per head), the output gate (d, h·d_h), the output RMSNorm's γ
    (h·d_h,), W_out (h·d_h, d)."""
    d, w = cfg.d_model, cfg.n_heads * cfg.head_dim
    return {"la_q": (d, w), "la_k": (d, w), "la_v": (d, w), "la_gate": (d, w), "la_norm_gamma": (w,),
            "la_out": (w, d)}


def moa_shapes(cfg: BlockConfig) -> dict[str, Shape]:
    """A mixture of attention heads (config.MixtureOfAttention, blockcli/moa.py), matrices (in, out): the router
    (d, E); each attention expert's W_Q `attn_experts.{e}.w_q` (d, h_kv·d_h); the shared W_K and W_V (d, h_kv·d_h)
    each (one kv_proj in the checkpoint); each expert's W_O `attn_experts.{e}.w_o` (h_kv·d_h, d); the mixture's
    output bias (d,)."""
    m, d, w = cfg.moa, cfg.d_model, cfg.n_kv_heads * cfg.head_dim
    assert m is not None
    shapes: dict[str, Shape] = {"moa_router": (d, m.n_experts)}
    shapes.update({f"attn_experts.{e}.w_q": (d, w) for e in range(m.n_experts)})
    shapes.update(w_k=(d, w), w_v=(d, w))
    shapes.update({f"attn_experts.{e}.w_o": (w, d) for e in range(m.n_experts)})
    shapes["moa_bias"] = (d,)
    return shapes


def attention_shapes(cfg: BlockConfig) -> dict[str, Shape]:
    if cfg.moa is not None:
        return moa_shapes(cfg)
    if cfg.lightning is not None:
        return lightning_shapes(cfg)
    if cfg.short_conv is not None:
        return short_conv_shapes(cfg)
    if cfg.mamba is not None and cfg.parts == "hybrid":  # Falcon-H1: the Mamba-2 mixer and attention beside it
        return {**mamba_shapes(cfg), **attention_shapes(cfg.attention_part)}
    if cfg.mamba is not None:
        return mamba1_shapes(cfg) if isinstance(cfg.mamba, Mamba1) else mamba_shapes(cfg)
    if cfg.mla is not None:
        return latent_attention_shapes(cfg)
    if cfg.linear_attention is not None:
        return deltanet_shapes(cfg)
    d, q_width, kv_width = cfg.d_model, cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    v_width, heads_width = cfg.n_kv_heads * cfg.value_dim, cfg.n_heads * cfg.value_dim  # (MiMo: d_v ≠ d_h)
    shapes: dict[str, Shape] = {}
    for name, width in (("q", q_width), ("k", kv_width), ("v", v_width))[:projections(cfg)]:
        shapes[f"w_{name}"] = (d, width)
        if cfg.bias.qkv:
            shapes[f"b_{name}"] = (width,)
    if cfg.attention_gate:  # Qwen3-Next: the attention output times σ(x·W_gate), h·d_h wide (one per head: h)
        gate_width = cfg.n_heads if cfg.gate_per_head else q_width
        shapes["w_attn_gate"] = (d, gate_width)
        if cfg.bias.qkv:
            shapes["b_attn_gate"] = (gate_width,)
        if cfg.attention_gate_head_bias:  # Beam: one bias a head, added to each of its d_h pre-activations
            shapes["b_attn_gate_head"] = (cfg.n_heads,)
    if cfg.sub_norms:  # BitNet: a norm of the heads' output, before W_O
        shapes.update(norm_shapes("attn_sub_norm", q_width, cfg))
    if cfg.ngpt is not None:  # nGPT: the queries' and the gate's per-channel scales
        shapes.update(s_qk=(q_width,), s_gate=(q_width,))
    shapes["w_o"] = (heads_width, d)
    if cfg.bias.out:
        shapes["b_o"] = (d,)
    if cfg.attention_sinks:  # one learned logit per query head
        shapes["sinks"] = (cfg.n_heads,)
    if cfg.qk_norm in ("head", "projection"):  # over each head's d_h, or over the whole projection
        per_head = cfg.qk_norm == "head"
        shapes.update(norm_shapes("q_norm", cfg.head_dim if per_head else q_width, cfg, cfg.bias.qk_norm))
        if cfg.kv_from < 0:  # a layer reusing another's keys has no k norm
            shapes.update(norm_shapes("k_norm", cfg.head_dim if per_head else kv_width, cfg, cfg.bias.qk_norm))
    elif cfg.qk_norm == "each_head":  # over each head's d_h, with weights of its own: (heads, d_h)
        for name, heads in (("q_norm", cfg.n_heads), ("k_norm", cfg.n_kv_heads)):
            shapes.update({k: (heads,) + s for k, s in norm_shapes(name, cfg.head_dim, cfg, cfg.bias.qk_norm).items()})
    if cfg.differential is not None:  # DiffLlama's four λ vectors, d_h each
        shapes.update({f"lambda_{name}": (cfg.head_dim,) for name in ("q1", "k1", "q2", "k2")})
    return shapes


def projections(cfg: BlockConfig) -> int:
    """How many of W_Q, W_K, W_V a multi-head attention layer has: 3; 2 when its values are its keys (k_eq_v);
    1 when it reuses another layer's keys and values (kv_from)."""
    return 1 if cfg.kv_from >= 0 else 2 if cfg.k_eq_v else 3


def mlp_matrices(cfg: BlockConfig) -> tuple[str, ...]:
    """The MLP's matrices by role, the activated one first: gate, up, down (gated), or up, down (plain).
    Each has its bias `b_<role>` with block.bias.mlp."""
    return ("gate", "up", "down") if cfg.gated else ("up", "down")


def mlp_shapes(cfg: BlockConfig, prefix: str = "", d_ff: int = 0, bias: bool = True) -> dict[str, Shape]:
    """An MLP's w_gate (d, d_ff) (gated only), w_up (d, d_ff), w_down (d_ff, d) and their biases, its keys
    after `prefix` (an expert's 'experts.3.', the shared expert's 'shared_'); d_ff: its width, if not block.d_ff."""
    d, d_ff = cfg.d_model, d_ff or cfg.d_ff
    shapes: dict[str, Shape] = {}
    for role in mlp_matrices(cfg):
        shapes[f"{prefix}w_{role}"] = (d_ff, d) if role == "down" else (d, d_ff)
        if cfg.bias.mlp and bias:
            shapes[f"{prefix}b_{role}"] = (d,) if role == "down" else (d_ff,)
    return shapes


def activation_shapes(cfg: BlockConfig) -> dict[str, Shape]:
    """The MLP activation's own learned scalars (xIELU's a_p, a_n) and its stored constants (buffers: xIELU's β,
    ε): `act_<name>` (1,) each."""
    row = function_of(cfg.activation)
    return {f"act_{name}": (1,) for name in row.params + tuple(name for name, _ in row.buffers)}


def moe_shapes(cfg: BlockConfig) -> dict[str, Shape]:
    """A mixture of experts: the router (d, E) and its bias, its selection bias, each routed expert's
    matrices `experts.{e}.w_gate` (d, d_e), w_up, w_down (d_e, d) (and biases), and the shared expert's (d, d_s) …
    and its gate (d, 1)."""
    moe = cfg.moe
    assert moe is not None
    d = cfg.d_model
    shapes: dict[str, Shape] = {"router_scale": (d,)} if moe.router_norm else {}
    shapes["router"] = (d, moe.n_experts)
    if moe.expert_scale:
        shapes["expert_scale"] = (moe.n_experts,)
    if moe.logit_bias:
        shapes["b_router"] = (moe.n_experts,)
    if moe.selection_bias:
        shapes["router_bias"] = (moe.n_experts,)
    for e in range(moe.n_experts):
        shapes.update(mlp_shapes(cfg, f"experts.{e}.", moe.d_expert, moe.routed_bias))
    if moe.d_shared:
        shapes.update(mlp_shapes(cfg, "shared_", moe.d_shared))
        if moe.shared_gate:
            shapes["shared_gate"] = (d, 1)
    if moe.out_bias:  # JetMoE: one bias on the mixture's output
        shapes["moe_bias"] = (d,)
    if moe.out_norm:  # A.X-K1: a norm of the block's kind on the mixture's output
        shapes.update(norm_shapes("moe_norm", d, cfg))
    return shapes


def block_parameter_shapes(cfg: BlockConfig) -> dict[str, Shape]:
    """Every parameter of one block, in forward order: ln1, attention, ln2 (none when the norm is
    shared), MLP (or mixture of experts); a sandwich block adds ln1_post after attention and ln2_post after
    the MLP."""
    d = cfg.d_model
    ln2 = {} if cfg.shared_norm else norm_shapes("ln2", d, cfg)
    mlp = moe_shapes(cfg) if cfg.moe is not None else {**mlp_shapes(cfg), **activation_shapes(cfg)}
    if cfg.sub_norms:  # BitNet: a norm of the MLP's hidden act(gate) ⊙ up, before W_down
        mlp.update(norm_shapes("mlp_sub_norm", cfg.d_ff, cfg))
    if cfg.ngpt is not None:  # nGPT: the gate's and the up projection's per-channel scales, and the residual rates
        mlp.update(s_uv_gate=(cfg.d_ff,), s_uv_up=(cfg.d_ff,), lambda_1=(d,), lambda_2=(d,))
    if cfg.moe is not None and cfg.moe.beside_dense:  # Gemma 4: the dense MLP and its norm, the experts' two norms
        mlp = {**mlp_shapes(cfg), **norm_shapes("ln2_post1", d, cfg), **norm_shapes("ln2b", d, cfg), **mlp,
               **norm_shapes("ln2_post2", d, cfg)}
    tail: dict[str, Shape] = {}
    if cfg.per_layer_input:  # Gemma 4: the per-layer input's gate (d, d_p), projection (d_p, d) and norm
        tail.update(ple_gate=(d, cfg.per_layer_input), ple_proj=(cfg.per_layer_input, d),
                    **norm_shapes("ple_norm", d, cfg))
    if cfg.layer_scalar:
        tail["layer_scalar"] = (1,)
    if cfg.cross_attention:  # Mllama: the tanh gates of the attention branch and the MLP branch
        tail.update(cross_attn_gate=(1,), cross_mlp_gate=(1,))
    if cfg.altup:  # Gemma 3n's AltUp: the corrected output's scale, the correction and prediction coefficients'
        # projections of the router's N modalities, the router (d, N) and its norm
        n = cfg.altup
        tail = {"altup_scale": (d,), "altup_correct": (n, n), "altup_predict": (n, n * n), "altup_router": (d, n),
                **norm_shapes("altup_router_norm", d, cfg), **tail}
    shapes = _block_shapes(cfg, ln2, mlp)
    if cfg.laurel_rank:  # Gemma 3n's LAuReL, after LN1 (its norm of the block's kind)
        at = list(shapes).index("ln1_post_gamma") if "ln1_post_gamma" in shapes else len(shapes)
        items = list(shapes.items())
        laurel = {"laurel_left": (d, cfg.laurel_rank), "laurel_right": (cfg.laurel_rank, d),
                  **norm_shapes("laurel_norm", d, cfg)}
        shapes = dict(items[:at] + list(laurel.items()) + items[at:])
    return {**shared_use_shapes(cfg), **shapes, **tail}


def shared_use_shapes(cfg: BlockConfig) -> dict[str, Shape]:
    """What a layer using a shared block (config.SharedBlock, Zamba2) holds of its own: the LoRA adapters of this use,
    A (in, r) and B (r, out) each, on W_q, W_k, W_v (with attention_adapters, their input 2d wide) and on the MLP's
    gate | up (one A, a B for each), and the projection W_s (d, d) of the block's output."""
    s = cfg.shared
    if s is None:
        return {}
    d, r = cfg.d_model, s.adapter_rank
    shapes: dict[str, Shape] = {}
    if s.attention_adapters:
        for name, width in (("q", s.n_heads * s.head_dim), ("k", s.n_kv_heads * s.head_dim),
                            ("v", s.n_kv_heads * s.head_dim)):
            shapes.update({f"adapter_{name}_a": (2 * d, r), f"adapter_{name}_b": (r, width)})
    shapes.update(adapter_mlp_a=(d, r), adapter_gate_b=(r, s.d_ff), adapter_up_b=(r, s.d_ff), w_shared_out=(d, d))
    return shapes


def shared_block_shapes(shared: SharedBlock, d: int) -> dict[str, Shape]:
    """One shared transformer block's weights (config.SharedBlock), its keys after `shared.{index}.`: the norm of
    [h | x_0] (2d,), W_q (2d, h·d_h), W_k and W_v (2d, h_kv·d_h), W_O (h·d_h, d), the MLP's norm (d,), W_gate and
    W_up (d, d_ff), W_down (d_ff, d), and the MLP's biases with `bias`."""
    q, kv = shared.n_heads * shared.head_dim, shared.n_kv_heads * shared.head_dim
    shapes: dict[str, Shape] = {"ln_attn_gamma": (2 * d,), "w_q": (2 * d, q), "w_k": (2 * d, kv), "w_v": (2 * d, kv),
                                "w_o": (q, d), "ln_mlp_gamma": (d,), "w_gate": (d, shared.d_ff),
                                "w_up": (d, shared.d_ff), "w_down": (shared.d_ff, d)}
    if shared.bias:
        shapes.update(b_gate=(shared.d_ff,), b_up=(shared.d_ff,), b_down=(d,))
    return shapes


def shared_blocks(config: Config) -> dict[int, SharedBlock]:
    """The model's shared blocks by index, as the layers using them declare them (config checks they agree)."""
    if config.model is None:
        return {}
    found: dict[int, SharedBlock] = {}
    for i in range(config.model.n_layers):
        s = config.layer_block(i).shared
        if s is not None:
            found.setdefault(s.index, s)
    return dict(sorted(found.items()))


def _block_shapes(cfg: BlockConfig, ln2: dict[str, Shape], mlp: dict[str, Shape]) -> dict[str, Shape]:
    d = cfg.d_model
    if cfg.parts == "mixer":  # a layer of its mixer alone (Nemotron-H): LN1 and the mixer
        return {**norm_shapes("ln1", d, cfg), **attention_shapes(cfg)}
    if cfg.parts == "mlp":  # a layer of its MLP alone: LN2 and the MLP
        return {**ln2, **mlp}
    if not cfg.sandwich:
        return {**norm_shapes("ln1", d, cfg), **attention_shapes(cfg), **ln2, **mlp}
    # sandwich (Gemma 2/3): each branch's output normalised too, after attention and after the MLP
    return {**norm_shapes("ln1", d, cfg), **attention_shapes(cfg), **norm_shapes("ln1_post", d, cfg), **ln2,
            **mlp, **norm_shapes("ln2_post", d, cfg)}


def model_parameter_shapes(config: Config) -> dict[str, Shape]:
    """Every parameter of the model: embeddings, blocks.{i}.*, final norm, LM head."""
    before, after = outer_shapes(config)
    assert config.model is not None
    shapes = dict(before)
    for i in range(config.model.n_layers):  # each layer's own block (`layers:` overrides)
        shapes.update({f"blocks.{i}.{k}": s for k, s in block_parameter_shapes(config.layer_block(i)).items()})
    return {**shapes, **after}


def declared_sizes(config: Config) -> tuple[int, int]:
    """(parameters, buffers): the sizes `model_parameter_shapes` declares (or one block's), summed
    without naming every layer's keys (DeepSeek-V3's 58 expert layers hold 44,544 of them)."""
    if config.model is None:
        return _split(block_parameter_shapes(config.block), config.block)
    per_block: dict[BlockConfig, tuple[int, int]] = {}
    parameters = buffers = 0
    for i in range(config.model.n_layers):
        block = config.layer_block(i)
        if block not in per_block:
            per_block[block] = _split(block_parameter_shapes(block), block)
        parameters, buffers = parameters + per_block[block][0], buffers + per_block[block][1]
    before, after = outer_shapes(config)
    outer_parameters, outer_buffers = _split({**before, **after})
    return parameters + outer_parameters, buffers + outer_buffers


def _split(shapes: dict[str, Shape], block: BlockConfig | None = None) -> tuple[int, int]:
    """(parameters, buffers) of these shapes; a frozen selection bias (`block.moe.selection_bias_frozen`) counts
    as a parameter."""
    frozen = block is not None and block.moe is not None and block.moe.selection_bias_frozen
    sizes = [(math.prod(s), is_buffer(k) and not (frozen and k == "router_bias")) for k, s in shapes.items()]
    return sum(n for n, buffer in sizes if not buffer), sum(n for n, buffer in sizes if buffer)


def outer_shapes(config: Config) -> tuple[dict[str, Shape], dict[str, Shape]]:
    """The model's parameters before its blocks (embeddings) and after them (final norm, LM head)."""
    model, block = config.model, config.block
    assert model is not None
    d, e = block.d_model, projected_width(model, block.d_model)
    before: dict[str, Shape] = {"wte": (model.vocab_size + model.extra_token_rows, e or d)}
    if e:  # OPT-350m: embeddings e wide, projected in to d before the positions are added
        before["proj_in"] = (e, d)
    if model.positions == "learned":
        before["wpe"] = (model.max_positions + model.position_offset, d)
    if model.embedding_norm:
        before.update(norm_shapes("emb_ln", d, block))
    if model.per_layer_dim:  # Gemma 4's per-layer embeddings: the table, the projection of x_0 and its norm (d_p,)
        width = model.n_layers * model.per_layer_dim
        before.update(ple_wte=(model.per_layer_vocab or model.vocab_size, width), ple_proj=(d, width),
                      **norm_shapes("ple_proj_norm", model.per_layer_dim, block))
    for index, shared in shared_blocks(config).items():  # Zamba2: each shared block's weights, once
        before.update({f"shared.{index}.{k}": s for k, s in shared_block_shapes(shared, d).items()})
    for j in range(max(block.altup - 1, 0)):  # Gemma 3n: x_0 into streams 1 … N−1, and each back out (d, d)
        before[f"altup_in.{j}"] = (d, d)
    after: dict[str, Shape] = {f"altup_out.{j}": (d, d) for j in range(max(block.altup - 1, 0))}
    after.update(norm_shapes("ln_f", d, block) if model.final_norm else {})
    if e:  # and projected out to e after the final norm
        after["proj_out"] = (d, e)
    if not model.tie_embeddings:
        after["lm_head"] = (e or d, model.vocab_size)
    if model.lm_head_bias:
        after["lm_head_bias"] = (model.vocab_size,)
    if model.logit_scale:  # Dory: a learned scale per vocabulary entry
        after["logit_scale"] = (model.vocab_size,)
    return before, after
