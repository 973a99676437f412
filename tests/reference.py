"""Slow, independent reference implementation of the blockcli decoder block / model.

Written directly from the written contract (see the docstrings below), *not* from
blockcli's source.  Nothing here imports blockcli or shares code with it.

Style: explicit Python loops over batch, tokens, heads, key positions and output
features; numpy is only used for tiny vector operations (dot products of two 1-D
vectors, elementwise add).  All arithmetic is float64.  It is meant to be obviously
correct, not fast: keep the sizes in tests small.

Public functions
----------------
resolve_block(block_cfg)            -> dict with every default filled in
resolve_model(model_cfg)            -> dict with every default filled in
block_param_shapes(block_cfg)       -> {name: shape} of one block's weights
model_param_shapes(block_cfg, model_cfg) -> {name: shape} of a whole model's weights
block_forward(block_cfg, weights, x, rope=None, rms_beta=False)
                                    -> (B, T, d) float64
model_forward(block_cfg, model_cfg, weights, ids, rms_beta=False, layers=None)
                                    -> (B, T, V) float64 (layers: per-layer overrides)
layer_norm_vec / rms_norm_vec / rope_vec / activation helpers are also exposed.

``rms_beta``: the contract is ambiguous about whether an RMSNorm gets a ``beta``
when ``bias.norm`` is true (the weight-key table says beta only for layernorm, the
semantics paragraph says "beta too if bias.norm").  By default the reference
follows the weight-key table (no beta for rmsnorm); pass ``rms_beta=True`` to use
the other reading.
"""

import math

import numpy as np

BIAS_GROUPS = ("qkv", "out", "mlp", "norm")
NORMS = ("layernorm", "rmsnorm")
# the MLP's elementwise functions, and the gated forms known by a name of their own
FUNCTIONS = ("gelu_tanh", "gelu", "relu", "silu", "relu2", "quick_gelu", "gelu_10", "relu6", "leaky_relu", "sigmoid",
             "tanh", "mish", "hardswish", "linear", "laplace")
GATED_NAMES = {"swiglu": "silu", "geglu": "gelu_tanh", "reglu": "relu", "clamped_swiglu": "clamped_swiglu"}
# functions with learned scalars of their own, per layer: xIELU's two (stored before their softplus)
WITH_SCALARS = {"xielu": ("alpha_p", "alpha_n", "beta", "eps")}  # the last two stored constants (buffers)
ACTIVATIONS = FUNCTIONS + tuple(GATED_NAMES) + tuple(WITH_SCALARS)
PLACEMENTS = ("pre", "post", "parallel", "post_branch", "parallel_shared", "sandwich", "normed_residual")
ROPE_LAYOUTS = ("half", "interleaved", "half_reversed")
POSITIONS = ("learned", "sinusoidal", "rope", "none", "alibi")


# --------------------------------------------------------------------------- config


def resolve_block(cfg):
    """Fill in defaults of a ``block:`` mapping and validate it."""
    d = int(cfg["d_model"])
    h = int(cfg["n_heads"])
    h_kv = int(cfg.get("n_kv_heads", h))
    d_h = int(cfg.get("head_dim", d // h))
    d_ff = int(cfg["d_ff"])
    norm = cfg["norm"]
    if norm not in NORMS:
        raise ValueError("bad norm %r" % (norm,))
    act = cfg["activation"]
    if act not in ACTIVATIONS:
        raise ValueError("bad activation %r" % (act,))
    gated = bool(cfg.get("gated", act in GATED_NAMES))  # act(x W_gate) * (x W_up), then W_down
    if act in GATED_NAMES and not gated:
        raise ValueError("%s is a gated MLP's activation" % (act,))
    placement = cfg["placement"]
    if placement not in PLACEMENTS:
        raise ValueError("bad placement %r" % (placement,))
    if h % h_kv != 0:
        raise ValueError("n_heads must be a multiple of n_kv_heads")

    bias_cfg = cfg["bias"]
    if isinstance(bias_cfg, bool):
        bias = {g: bias_cfg for g in BIAS_GROUPS}
    else:
        # The contract does not say what a missing group means; demand all four.
        bias = {g: bool(bias_cfg[g]) for g in BIAS_GROUPS}
    # the q/k norms' shift: its own group when given (StableLM 2's per-head LayerNorms have none), else norm's
    bias["qk_norm"] = bias_cfg if isinstance(bias_cfg, bool) else bool(bias_cfg.get("qk_norm", bias["norm"]))

    rope_cfg = cfg.get("rope", False)
    if isinstance(rope_cfg, bool):
        rope = 1.0 if rope_cfg else 0.0
    else:
        rope = float(rope_cfg)
        if not (0.0 < rope <= 1.0):
            raise ValueError("rope fraction must be in (0, 1]")

    return {
        "d_model": d,
        "n_heads": h,
        "n_kv_heads": h_kv,
        "head_dim": d_h,
        "d_ff": d_ff,
        "norm": norm,
        "norm_eps": float(cfg.get("norm_eps", 1e-5)),
        "activation": GATED_NAMES.get(act, act),  # the function
        "gated": gated,
        "bias": bias,
        "placement": placement,
        "rope": rope,  # fraction of each head's dims rotated; 0.0 = no RoPE
        "rope_theta": float(cfg.get("rope_theta", 10000.0)),
        "rope_scaling": cfg.get("rope_scaling"),  # a mapping as in the YAML, or None
        "sliding_window": int(cfg.get("sliding_window", 0)),  # 0 = every earlier key
        "norm_unit_offset": bool(cfg.get("norm_unit_offset", False)),
        "qk_norm": cfg.get("qk_norm", "none"),
        # which dims pair up under RoPE: (i, i + r/2) "half", or (2i, 2i + 1) "interleaved" (GPT-J)
        "rope_layout": _choice(cfg.get("rope_layout", "half"), ROPE_LAYOUTS, "rope_layout"),
        # scores = q.k * attention_scale when it is set (Granite), else q.k / sqrt(d_h)
        "attention_scale": float(cfg.get("attention_scale", 0.0)),
        # each branch's output is multiplied by this before it joins the residual stream (Granite)
        "residual_multiplier": float(cfg.get("residual_multiplier", 1.0)),
        # false: the norms have no scale gamma (OLMo's LayerNorm, with bias.norm false: no parameters)
        "norm_scale": bool(cfg.get("norm_scale", True)),
        # every entry of q, k and v clamped to [-c, c] right after its projection (OLMo); 0 = off
        "clip_qkv": float(cfg.get("clip_qkv", 0.0)),
        # OLMoE: the clamp comes after the projection-wide q/k norms
        "clip_after_qk_norm": bool(cfg.get("clip_after_qk_norm", False)),
        # ALiBi (BLOOM): score(t, s) += m_j * (s - t) for head j, m_j from the paper's slope rule
        "alibi": bool(cfg.get("alibi", False)),
        "moe": _resolve_moe(cfg.get("moe")),
        # multi-head latent attention (DeepSeek): None, or its ranks and per-head widths
        "mla": _resolve_mla(cfg.get("mla")),
        # Gemma 2: every score s becomes c * tanh(s / c) before the mask; 0 = no cap
        "attention_softcap": float(cfg.get("attention_softcap", 0.0)),
        # gpt-oss: a learned logit per head joins every softmax row as a key with no value
        "attention_sinks": bool(cfg.get("attention_sinks", False)),
        # gpt-oss's gated unit: g = min(gate, c), g * sigmoid(alpha * g) * (clip(up, -c, c) + 1)
        "swiglu_alpha": float(cfg.get("swiglu_alpha", 1.702)),
        "swiglu_limit": float(cfg.get("swiglu_limit", 7.0)),
        "mlp_multipliers": tuple(float(v) for v in cfg.get("mlp_multipliers", (1.0, 1.0))),  # gate, down (Falcon-H1)
        # Ministral 3: after RoPE, the query at position t times 1 + beta * ln(1 + floor(t / L)); beta 0 = off
        "query_scale": float(cfg.get("query_scale", 0.0)),
        "query_scale_length": int(cfg.get("query_scale_length", 0)),
        # HunYuan: qk_norm head applied to the rotated queries and keys instead of before RoPE
        "qk_norm_after_rope": bool(cfg.get("qk_norm_after_rope", False)),
        # Llama 4's temperature tuning counts positions from 1: floor((t + offset) / L) in the query scale
        "query_scale_offset": int(cfg.get("query_scale_offset", 0)),
        # Llama 4's chunked layers: query t sees keys s <= t with s // C == t // C only; 0 = off
        "attention_chunk": int(cfg.get("attention_chunk", 0)),
        # BitNet: a norm of the block's kind on the h*d_h concatenated heads before W_O, and on the d_ff hidden
        # before W_down
        "sub_norms": bool(cfg.get("sub_norms", False)),
        # MiMo-V2-Flash: each head's values d_v wide (0: d_h), times a constant before attention reads them
        "v_head_dim": int(cfg.get("v_head_dim", 0)) or d_h,
        "value_scale": float(cfg.get("value_scale", 1.0)),
        # Beam: the query scale (1 + (t + offset) / L) ** beta ("power") instead of the log of whole lengths ("log")
        "query_scale_form": cfg.get("query_scale_form", "log"),
        # MiniMax, Beam: each residual add alpha * skip + beta * branch (attention's, then the MLP's)
        "scales": tuple(float(cfg.get(k, 1.0)) for k in ("attn_skip_scale", "attn_branch_scale", "mlp_skip_scale",
                                                         "mlp_branch_scale")),
    }


def _resolve_moe(cfg):
    """A ``moe:`` mapping with its defaults, or None for a dense MLP."""
    if cfg is None:
        return None
    groups = int(cfg.get("n_groups", 1))
    return {
        "n_experts": int(cfg["n_experts"]), "top_k": int(cfg["top_k"]), "d_expert": int(cfg["d_expert"]),
        "scoring": cfg.get("scoring", "softmax"), "order": cfg.get("order", "softmax_topk"),
        "renormalize": bool(cfg.get("renormalize", False)),
        "renormalize_eps": float(cfg.get("renormalize_eps", 1e-20)),  # LFM2-MoE's router: 1e-6
        "routed_scaling": float(cfg.get("routed_scaling", 1.0)),
        "n_groups": groups, "top_groups": int(cfg.get("top_groups", groups)),
        "group_score": cfg.get("group_score", "max"),
        "selection_bias": bool(cfg.get("selection_bias", False)),
        "selection_on": cfg.get("selection_on", "scores"),  # the bias on the scores, or on the logits (Kolibri-1)
        "logit_bias": bool(cfg.get("logit_bias", False)),  # logits = vec . router + b_router
        "d_shared": int(cfg.get("d_shared", 0)), "shared_gate": bool(cfg.get("shared_gate", False)),
        # false: the routed experts have no biases, the shared expert still has bias.mlp's (DeepSeek-V2)
        "routed_bias": bool(cfg.get("routed_bias", True)),
        "sparsemixer_eps": float(cfg.get("sparsemixer_eps", 0.01)),
        # Llama 4: the routing weight multiplies the vector the expert reads, not what it returns
        "scale_input": bool(cfg.get("scale_input", False)),
        # A.X-K1: a norm of the block's kind on the mixture's output (routed + shared)
        "out_norm": bool(cfg.get("out_norm", False)),
    }


def _resolve_mla(cfg):
    if cfg is None:
        return None
    return {"q_lora_rank": int(cfg.get("q_lora_rank", 0)), "kv_lora_rank": int(cfg["kv_lora_rank"]),
            "nope": int(cfg["qk_nope_head_dim"]), "rope": int(cfg["qk_rope_head_dim"]),
            "v": int(cfg["v_head_dim"]), "eps": float(cfg.get("latent_norm_eps", 1e-6))}


def _choice(value, allowed, what):
    if value not in allowed:
        raise ValueError("bad %s %r" % (what, value))
    return value


def resolve_model(cfg):
    """Fill in defaults of a ``model:`` mapping and validate it."""
    positions = cfg["positions"]
    if positions not in POSITIONS:
        raise ValueError("bad positions %r" % (positions,))
    return {
        "n_layers": int(cfg["n_layers"]),
        "vocab_size": int(cfg["vocab_size"]),
        "positions": positions,
        "max_positions": int(cfg["max_positions"]),
        "position_offset": int(cfg.get("position_offset", 0)),
        "sinusoidal_layout": cfg.get("sinusoidal_layout", "interleaved"),
        "padding_idx": cfg.get("padding_idx"),
        "tie_embeddings": bool(cfg["tie_embeddings"]),
        "final_norm": bool(cfg.get("final_norm", True)),
        "lm_head_bias": bool(cfg.get("lm_head_bias", False)),
        "embedding_multiplier": float(cfg.get("embedding_multiplier", 1.0)),
        "logit_multiplier": float(cfg.get("logit_multiplier", 1.0)),
        "logit_softcap": float(cfg.get("logit_softcap", 0.0)),  # Gemma 2: logit z -> c * tanh(z / c)
        # a norm (the blocks' kind, weights emb_ln_*) on the embeddings before the first block (BLOOM)
        "embedding_norm": bool(cfg.get("embedding_norm", False)),
        # e != d_model: token embeddings (and the head's input) are e wide, with "proj_in" (e, d) after the
        # lookup and "proj_out" (d, e) after the final norm, no biases (OPT-350m); 0 = d_model
        "embedding_dim": int(cfg.get("embedding_dim", 0)),
    }


def _has_norm_beta(b, rms_beta=False, group="norm"):
    if not b["bias"][group]:
        return False
    return b["norm"] == "layernorm" or rms_beta


def block_param_shapes(block_cfg, rms_beta=False):
    """Names and shapes of one block's weights, straight from the key table."""
    b = resolve_block(block_cfg)
    d, d_ff = b["d_model"], b["d_ff"]
    shapes = {}
    # parallel_shared: one norm feeds both branches, so there is no ln2 at all
    # sandwich (Gemma 2): a second norm on each branch's output, ln1_post and ln2_post
    norms = {"parallel_shared": ("ln1",), "sandwich": ("ln1", "ln2", "ln1_post", "ln2_post")}
    for ln in norms.get(b["placement"], ("ln1", "ln2")):
        if b["norm_scale"]:
            shapes[ln + "_gamma"] = (d,)
        if _has_norm_beta(b, rms_beta):
            shapes[ln + "_beta"] = (d,)
    if b["mla"]:
        shapes.update(_mla_param_shapes(b, rms_beta))
    else:
        shapes.update(_qkv_param_shapes(b, rms_beta))
    if b["moe"] is not None:
        moe, gated = b["moe"], b["gated"]
        shapes["router"] = (d, moe["n_experts"])
        if moe["logit_bias"]:
            shapes["b_router"] = (moe["n_experts"],)
        if moe["selection_bias"]:
            shapes["router_bias"] = (moe["n_experts"],)
        experts = ["experts.%d." % e for e in range(moe["n_experts"])] + (["shared_"] if moe["d_shared"] else [])
        for key in experts:
            width = moe["d_shared"] if key == "shared_" else moe["d_expert"]
            for name in ("w_gate", "w_up", "w_down") if gated else ("w_up", "w_down"):
                shapes[key + name] = (width, d) if name == "w_down" else (d, width)
                if b["bias"]["mlp"] and (key == "shared_" or moe["routed_bias"]):  # gpt-oss: every expert's
                    shapes[key + "b" + name[1:]] = (d,) if name == "w_down" else (width,)
        if moe["d_shared"]:
            if moe["shared_gate"]:
                shapes["shared_gate"] = (d, 1)
        if moe["out_norm"]:
            if b["norm_scale"]:
                shapes["moe_norm_gamma"] = (d,)
            if _has_norm_beta(b, rms_beta):
                shapes["moe_norm_beta"] = (d,)
        return shapes
    if b["sub_norms"]:  # BitNet: the sub-norms' scales (and shifts) over h*d_h and d_ff features
        for name, width in (("attn_sub_norm", b["n_heads"] * b["head_dim"]), ("mlp_sub_norm", d_ff)):
            if b["norm_scale"]:
                shapes[name + "_gamma"] = (width,)
            if _has_norm_beta(b, rms_beta):
                shapes[name + "_beta"] = (width,)
    for scalar in WITH_SCALARS.get(b["activation"], ()):  # xIELU: a_p, a_n, beta, eps, one number each
        shapes["act_" + scalar] = (1,)
    if b["gated"]:  # act(x W_gate + b_gate) * (x W_up + b_up), then W_down
        shapes["w_gate"] = (d, d_ff)
        if b["bias"]["mlp"]:
            shapes["b_gate"] = (d_ff,)
    shapes["w_up"] = (d, d_ff)
    shapes["w_down"] = (d_ff, d)
    if b["bias"]["mlp"]:
        shapes["b_up"] = (d_ff,)
        shapes["b_down"] = (d,)
    return shapes


def _mla_param_shapes(b, rms_beta):
    """DeepSeek's attention: q_a_proj, q_a_layernorm, q_b_proj (or q_proj), kv_a_proj_with_mqa,
    kv_a_layernorm, kv_b_proj, o_proj; attention_bias (bias.qkv) on the two down-projections."""
    m, d, h = b["mla"], b["d_model"], b["n_heads"]
    shapes = {}
    if m["q_lora_rank"]:
        shapes["w_q_a"] = (d, m["q_lora_rank"])
        if b["bias"]["qkv"]:
            shapes["b_q_a"] = (m["q_lora_rank"],)
        shapes["q_a_norm_gamma"] = (m["q_lora_rank"],)
        if _has_norm_beta(b, rms_beta):
            shapes["q_a_norm_beta"] = (m["q_lora_rank"],)
        shapes["w_q_b"] = (m["q_lora_rank"], h * (m["nope"] + m["rope"]))
    else:
        shapes["w_q"] = (d, h * (m["nope"] + m["rope"]))
    shapes["w_kv_a"] = (d, m["kv_lora_rank"] + m["rope"])
    if b["bias"]["qkv"]:
        shapes["b_kv_a"] = (m["kv_lora_rank"] + m["rope"],)
    shapes["kv_a_norm_gamma"] = (m["kv_lora_rank"],)
    if _has_norm_beta(b, rms_beta):
        shapes["kv_a_norm_beta"] = (m["kv_lora_rank"],)
    shapes["w_kv_b"] = (m["kv_lora_rank"], h * (m["nope"] + m["v"]))
    shapes["w_o"] = (h * m["v"], d)
    if b["bias"]["out"]:
        shapes["b_o"] = (d,)
    return shapes


def _qkv_param_shapes(b, rms_beta):
    d, h, h_kv, d_h, d_v = b["d_model"], b["n_heads"], b["n_kv_heads"], b["head_dim"], b["v_head_dim"]
    shapes = {}
    shapes["w_q"] = (d, h * d_h)
    shapes["w_k"] = (d, h_kv * d_h)
    shapes["w_v"] = (d, h_kv * d_v)
    if b["bias"]["qkv"]:
        shapes["b_q"] = (h * d_h,)
        shapes["b_k"] = (h_kv * d_h,)
        shapes["b_v"] = (h_kv * d_v,)
    shapes["w_o"] = (h * d_v, d)
    if b["bias"]["out"]:
        shapes["b_o"] = (d,)
    if b["attention_sinks"]:
        shapes["sinks"] = (h,)
    if b["qk_norm"] not in ("none", "head_unscaled"):  # head_unscaled (Llama 4's L2 norm) has no weights
        for name, heads in (("q_norm", h), ("k_norm", h_kv)):
            # head: one (d_h,) shared by the heads; projection: (n*d_h,); each_head: a (d_h,) row per head
            width = {"head": (d_h,), "projection": (heads * d_h,), "each_head": (heads, d_h)}[b["qk_norm"]]
            if b["norm_scale"]:
                shapes[name + "_gamma"] = width
            if _has_norm_beta(b, rms_beta, "qk_norm"):
                shapes[name + "_beta"] = width
    return shapes


def model_param_shapes(block_cfg, model_cfg, rms_beta=False, layers=None):
    """Names and shapes of a whole model's weights, straight from the key table (each layer its own
    block when ``layers`` overrides some)."""
    b = resolve_block(block_cfg)
    m = resolve_model(model_cfg)
    d, V = b["d_model"], m["vocab_size"]
    e = m["embedding_dim"] if m["embedding_dim"] not in (0, d) else 0
    shapes = {"wte": (V, e or d)}
    if e:
        shapes["proj_in"] = (e, d)
    if m["positions"] == "learned":
        shapes["wpe"] = (m["max_positions"] + m["position_offset"], d)
    for i, layer_cfg in enumerate(layer_block_cfgs(block_cfg, m["n_layers"], layers)):
        for k, s in block_param_shapes(layer_cfg, rms_beta=rms_beta).items():
            shapes["blocks.%d.%s" % (i, k)] = s
    if m["final_norm"]:
        if b["norm_scale"]:
            shapes["ln_f_gamma"] = (d,)
        if _has_norm_beta(b, rms_beta):
            shapes["ln_f_beta"] = (d,)
    if m["embedding_norm"]:
        if b["norm_scale"]:
            shapes["emb_ln_gamma"] = (d,)
        if _has_norm_beta(b, rms_beta):
            shapes["emb_ln_beta"] = (d,)
    if e:
        shapes["proj_out"] = (d, e)
    if not m["tie_embeddings"]:
        shapes["lm_head"] = (e or d, V)
    if m["lm_head_bias"]:
        shapes["lm_head_bias"] = (V,)
    return shapes


# ------------------------------------------------------------------ scalar / vector ops


def gelu_tanh(x):
    return 0.5 * x * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_erf(x):
    return 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0)))


def relu(x):
    return x if x > 0.0 else 0.0


def sigmoid(x):
    if x >= 0.0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def silu(x):
    return x * sigmoid(x)


def softplus(x):
    return x if x > 20.0 else math.log(1.0 + math.exp(x))


ACT_FN = {
    "gelu_tanh": gelu_tanh,
    "gelu": gelu_erf,
    "relu": relu,
    "silu": silu,
    "relu2": lambda x: relu(x) * relu(x),
    "quick_gelu": lambda x: x * sigmoid(1.702 * x),
    "gelu_10": lambda x: max(-10.0, min(10.0, gelu_erf(x))),
    "relu6": lambda x: max(0.0, min(6.0, x)),
    "leaky_relu": lambda x: x if x > 0.0 else 0.01 * x,
    "sigmoid": sigmoid,
    "tanh": math.tanh,
    "mish": lambda x: x * math.tanh(softplus(x)),
    "hardswish": lambda x: x * max(0.0, min(6.0, x + 3.0)) / 6.0,
    "linear": lambda x: x,
    "laplace": lambda x: 0.5 * (1.0 + math.erf((x - 0.707107) / (0.282095 * math.sqrt(2.0)))),
}


def xielu(x, a_p, a_n, beta=0.5, eps=-1e-6):
    """xIELU (Huang et al. 2024): positive side a quadratic with slope beta at 0, negative side an ELU-like
    curve whose slope tends to beta - alpha_n; alpha_p = softplus(a_p), alpha_n = beta + softplus(a_n). The
    exponential's argument is capped at eps (as transformers' XIELUActivation does), so just below 0 the
    negative side is alpha_n * (e^eps - 1 - x) + beta * x."""
    alpha_p = softplus(a_p)
    alpha_n = beta + softplus(a_n)
    if x > 0.0:
        return alpha_p * x * x + beta * x
    capped = x if x < eps else eps
    return alpha_n * (math.expm1(capped) - x) + beta * x


def activate(b, weights, prefix, x):
    """The MLP's function of one number; xIELU's with this layer's scalars."""
    if b["activation"] in WITH_SCALARS:
        a_p, a_n, beta, eps = (float(_w(weights, "act_" + s, prefix)[0]) for s in WITH_SCALARS[b["activation"]])
        return xielu(x, a_p, a_n, beta, eps)
    return ACT_FN[b["activation"]](x)


def linear_vec(vec, w, bias):
    """y[j] = sum_i vec[i] * w[i, j] + bias[j]   (w shaped (in, out))."""
    n_in, n_out = w.shape
    assert len(vec) == n_in
    out = np.zeros(n_out, dtype=np.float64)
    for j in range(n_out):
        out[j] = float(np.dot(vec, w[:, j]))
        if bias is not None:
            out[j] += float(bias[j])
    return out


def layer_norm_vec(vec, gamma, beta, eps):
    n = len(vec)
    mu = math.fsum(float(v) for v in vec) / n
    var = math.fsum((float(v) - mu) ** 2 for v in vec) / n
    inv = 1.0 / math.sqrt(var + eps)
    out = np.zeros(n, dtype=np.float64)
    for i in range(n):
        out[i] = float(gamma[i]) * (float(vec[i]) - mu) * inv
        if beta is not None:
            out[i] += float(beta[i])
    return out


def rms_norm_vec(vec, gamma, beta, eps):
    n = len(vec)
    ms = math.fsum(float(v) ** 2 for v in vec) / n
    inv = 1.0 / math.sqrt(ms + eps)
    out = np.zeros(n, dtype=np.float64)
    for i in range(n):
        out[i] = float(gamma[i]) * float(vec[i]) * inv
        if beta is not None:
            out[i] += float(beta[i])
    return out


def scaled_inv_freq(i, r, theta, scaling, seq_len):
    """(inverse frequency of pair i, cos/sin multiplier) under a rope_scaling mapping, one pair at a
    time, written from transformers' modeling_rope_utils formulas (no NumPy)."""
    base = 1.0 / theta ** (2.0 * i / r)
    if not scaling:
        return base, 1.0
    kind, factor = scaling["type"], float(scaling.get("factor", 1.0))
    original = int(scaling.get("original_max_positions", 0))
    if kind == "linear":
        return base / factor, 1.0
    if kind == "dynamic":
        if seq_len <= original:
            return base, 1.0
        grown = theta * ((factor * seq_len / original) - (factor - 1)) ** (r / (r - 2))
        return 1.0 / grown ** (2.0 * i / r), 1.0
    if kind == "llama3":
        low_f, high_f = float(scaling.get("low_freq_factor", 1.0)), float(scaling.get("high_freq_factor", 4.0))
        wavelen = 2 * math.pi / base
        if wavelen < original / high_f:
            return base, 1.0
        if wavelen > original / low_f:
            return base / factor, 1.0
        smooth = (original / wavelen - low_f) / (high_f - low_f)
        return (1 - smooth) * base / factor + smooth * base, 1.0
    if kind == "yarn":
        def m(scale, k=1.0):
            return 1.0 if scale <= 1 else 0.1 * k * math.log(scale) + 1.0
        ms, ms_all = float(scaling.get("mscale", 0.0)), float(scaling.get("mscale_all_dim", 0.0))
        att = float(scaling.get("attention_factor", 0.0)) or (m(factor, ms) / m(factor, ms_all) if ms and ms_all
                                                             else m(factor))

        def corr(rot):
            return r * math.log(original / (rot * 2 * math.pi)) / (2 * math.log(theta))
        lo, hi = corr(float(scaling.get("beta_fast", 32.0))), corr(float(scaling.get("beta_slow", 1.0)))
        if scaling.get("truncate", True):
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, r - 1)
        if lo == hi:
            hi += 0.001
        ramp = min(max((i - lo) / (hi - lo), 0.0), 1.0)
        return base / factor * ramp + base * (1 - ramp), att
    if kind == "longrope":
        ext = scaling["long_factor"] if seq_len > original else scaling["short_factor"]
        att = float(scaling.get("attention_factor", 0.0)) or (
            math.sqrt(1 + math.log(factor) / math.log(original)) if factor > 1 else 1.0)
        return base / float(ext[i]), att
    raise ValueError("bad rope scaling %r" % (kind,))


def rope_vec(vec, pos, fraction, theta, scaling=None, seq_len=1, layout="half"):
    """RoPE on the first r = int(d_h * fraction) dims of one head vector. Pair i (frequency
    theta^(-2i/r)) is dims (i, i + r/2) in the "half" layout, dims (2i, 2i + 1) in "interleaved"."""
    d_h = len(vec)
    r = int(d_h * fraction)
    out = np.array(vec, dtype=np.float64, copy=True)
    if r == 0:
        return out
    if r % 2 != 0:
        raise ValueError("rotary dims must be even (d_h=%d, fraction=%r)" % (d_h, fraction))
    half = r // 2
    for i in range(half):
        inv_freq, att = scaled_inv_freq(i, r, theta, scaling, seq_len)
        ang = pos * inv_freq
        c, s = att * math.cos(ang), att * math.sin(ang)
        if layout == "half_reversed":  # the half layout's pairs turned by -ang (NanoChat)
            s = -s
        a, b = (2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + half)
        x1 = float(vec[a])
        x2 = float(vec[b])
        out[a] = x1 * c - x2 * s
        out[b] = x2 * c + x1 * s
    return out


def sinusoidal_vec(t, d, layout="interleaved", zero_row=None):
    """interleaved: PE[t, 2i] = sin(t / 10000^(2i/d)), PE[t, 2i+1] = cos(same). halves (CTRL): column c of
    the first ceil(d/2) is sin(t / 10000^(2c/d)), column ceil(d/2) + c is cos(same). fairseq (XGLM): with
    h = d // 2, column j < h is sin(t * exp(-j * ln(10000) / (h - 1))), column h + j its cos, a last column 0
    when d is odd; the whole row is 0 when t is zero_row."""
    pe = np.zeros(d, dtype=np.float64)
    if layout == "fairseq":
        if t == zero_row:
            return pe
        h = d // 2
        for j in range(h):
            ang = t * math.exp(-j * math.log(10000.0) / (h - 1))
            pe[j] = math.sin(ang)
            pe[h + j] = math.cos(ang)
        return pe
    first = (d + 1) // 2
    for i in range(first):
        ang = t / (10000.0 ** (2.0 * i / d))
        if layout == "halves":
            pe[i] = math.sin(ang)
            if first + i < d:
                pe[first + i] = math.cos(ang)
            continue
        pe[2 * i] = math.sin(ang)
        if 2 * i + 1 < d:
            pe[2 * i + 1] = math.cos(ang)
    return pe


def alibi_slopes(n_heads):
    """Press et al.'s slopes, as BLOOM's build_alibi_tensor extends them to any head count: for n a
    power of two, the geometric sequence starting at 2^(-8/n) with that ratio; otherwise the n' = the
    largest power of two below n slopes of an n'-head model, then every other slope (the 1st, 3rd, 5th,
    ...) of a 2n'-head model, until there are n."""
    def geometric(n):
        start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
        return [start ** (i + 1) for i in range(n)]

    p = 2 ** int(math.floor(math.log2(n_heads)))
    if p == n_heads:
        return geometric(n_heads)
    return geometric(p) + geometric(2 * p)[0::2][:n_heads - p]


def softmax_list(xs):
    m = max(xs)
    es = [math.exp(v - m) for v in xs]
    z = math.fsum(es)
    return [e / z for e in es]


# ----------------------------------------------------------------------- block pieces


def _w(weights, name, prefix):
    return np.asarray(weights[prefix + name], dtype=np.float64)


def _wopt(weights, name, prefix, present):
    if not present:
        return None
    return np.asarray(weights[prefix + name], dtype=np.float64)


def _norm(b, weights, which, prefix, vec, rms_beta, row=None):
    """`row`: take that row of (heads, d_h) weights (qk_norm each_head)."""
    if b["norm_scale"]:
        gamma = _w(weights, which + "_gamma", prefix)
        if row is not None:
            gamma = gamma[row]
    else:  # no scale: a gamma of ones
        gamma = np.array([1.0] * len(vec))
    if b["norm_unit_offset"] and b["norm_scale"]:  # Gemma: the stored weight is the scale's offset from 1
        gamma = np.array([1.0 + float(g) for g in gamma])
    group = "qk_norm" if which in ("q_norm", "k_norm") else "norm"
    beta = _wopt(weights, which + "_beta", prefix, _has_norm_beta(b, rms_beta, group))
    if beta is not None and row is not None:
        beta = beta[row]
    if b["norm"] == "layernorm":
        return layer_norm_vec(vec, gamma, beta, b["norm_eps"])
    return rms_norm_vec(vec, gamma, beta, b["norm_eps"])


def _latent_norm(b, weights, which, prefix, vec, rms_beta, eps):
    gamma = _w(weights, which + "_gamma", prefix)
    if b["norm_unit_offset"]:
        gamma = np.array([1.0 + float(g) for g in gamma])
    beta = _wopt(weights, which + "_beta", prefix, _has_norm_beta(b, rms_beta))
    if b["norm"] == "layernorm":
        return layer_norm_vec(vec, gamma, beta, eps)
    return rms_norm_vec(vec, gamma, beta, eps)


def _latent_attention(b, weights, prefix, tokens, rms_beta=False):
    """DeepSeek-V2/V3 multi-head latent attention over one sequence, token by token, head by head.

    q_t = W_q_b^T norm(W_q_a^T x_t + b) (or W_q^T x_t); head i's query is q_t[i*(n+r) : (i+1)*(n+r)],
    its first n dims used as they are, its last r rotated. [c_t | kr_t] = W_kv_a^T x_t + b; c_t
    normalised; W_kv_b^T c_t gives head i's key part (n) then value (v); head i's key is
    [that key part | RoPE(kr_t)], kr_t the same for every head. Scale 1/sqrt(n + r), times
    (0.1 * mscale_all_dim * ln(factor) + 1)^2 under a RoPE scaling with mscale_all_dim and factor > 1.
    """
    m, h = b["mla"], b["n_heads"]
    n, r, dv, rkv = m["nope"], m["rope"], m["v"], m["kv_lora_rank"]
    qkv_b = b["bias"]["qkv"]
    T = len(tokens)
    rope = lambda vec, t: rope_vec(vec, t, 1.0, b["rope_theta"], b["rope_scaling"], T, b["rope_layout"])  # noqa: E731
    qs, ks, vs = [], [], []
    for t in range(T):
        if m["q_lora_rank"]:
            lat = linear_vec(tokens[t], _w(weights, "w_q_a", prefix), _wopt(weights, "b_q_a", prefix, qkv_b))
            lat = _latent_norm(b, weights, "q_a_norm", prefix, lat, rms_beta, m["eps"])
            q = linear_vec(lat, _w(weights, "w_q_b", prefix), None)
        else:
            q = linear_vec(tokens[t], _w(weights, "w_q", prefix), None)
        a = linear_vec(tokens[t], _w(weights, "w_kv_a", prefix), _wopt(weights, "b_kv_a", prefix, qkv_b))
        c = _latent_norm(b, weights, "kv_a_norm", prefix, a[:rkv], rms_beta, m["eps"])
        kr = rope(a[rkv:], t)
        up = linear_vec(c, _w(weights, "w_kv_b", prefix), None)
        q_heads, k_heads, v_heads = [], [], []
        for i in range(h):
            qi = q[i * (n + r):(i + 1) * (n + r)]
            q_heads.append(np.concatenate([qi[:n], rope(qi[n:], t)]))
            ui = up[i * (n + dv):(i + 1) * (n + dv)]
            k_heads.append(np.concatenate([ui[:n], kr]))
            v_heads.append(ui[n:])
        qs.append(q_heads)
        ks.append(k_heads)
        vs.append(v_heads)
    scale = 1.0 / math.sqrt(n + r)
    sc = b["rope_scaling"]
    if sc and float(sc.get("mscale_all_dim", 0.0)) and float(sc.get("factor", 1.0)) > 1:
        scale *= (0.1 * float(sc["mscale_all_dim"]) * math.log(float(sc["factor"])) + 1.0) ** 2
    w_o, b_o = _w(weights, "w_o", prefix), _wopt(weights, "b_o", prefix, b["bias"]["out"])
    window = b["sliding_window"]
    out = []
    for t in range(T):
        keys = [s for s in range(t + 1) if not window or t - s < window]
        concat = np.zeros(h * dv, dtype=np.float64)
        for i in range(h):
            p = softmax_list([float(np.dot(qs[t][i], ks[s][i])) * scale for s in keys])
            head = np.zeros(dv, dtype=np.float64)
            for j, s in enumerate(keys):
                head = head + p[j] * vs[s][i]
            concat[i * dv:(i + 1) * dv] = head
        out.append(linear_vec(concat, w_o, b_o))
    return out


def _attention(b, weights, prefix, tokens, rope_fraction, rms_beta=False):
    """Causal multi-head (grouped-query) attention over one sequence.

    tokens: list of T vectors (d,) -- already normalised where the placement says so.
    Token t sits at position t.
    """
    if b["mla"]:
        return _latent_attention(b, weights, prefix, tokens, rms_beta)
    h, h_kv, d_h, d_v = b["n_heads"], b["n_kv_heads"], b["head_dim"], b["v_head_dim"]
    qkv_b = b["bias"]["qkv"]
    w_q, w_k, w_v = (_w(weights, n, prefix) for n in ("w_q", "w_k", "w_v"))
    b_q = _wopt(weights, "b_q", prefix, qkv_b)
    b_k = _wopt(weights, "b_k", prefix, qkv_b)
    b_v = _wopt(weights, "b_v", prefix, qkv_b)
    w_o = _w(weights, "w_o", prefix)
    b_o = _wopt(weights, "b_o", prefix, b["bias"]["out"])
    group = h // h_kv
    T = len(tokens)

    # project, then split heads: q_heads[t][i] is a (d_h,) vector
    q_heads, k_heads, v_heads = [], [], []
    for t in range(T):
        q = linear_vec(tokens[t], w_q, b_q)
        k = linear_vec(tokens[t], w_k, b_k)
        v = linear_vec(tokens[t], w_v, b_v)
        c = b["clip_qkv"]

        def clamped(vec):
            return np.array([min(max(float(e), -c), c) for e in vec])

        if c and not b["clip_after_qk_norm"]:
            q, k, v = clamped(q), clamped(k), clamped(v)
        if b["qk_norm"] == "projection":  # OLMo2: the whole projection, before the heads are cut
            q = _norm(b, weights, "q_norm", prefix, q, rms_beta)
            k = _norm(b, weights, "k_norm", prefix, k, rms_beta)
        if c and b["clip_after_qk_norm"]:  # OLMoE: the normalised projections, and V
            q, k, v = clamped(q), clamped(k), clamped(v)
        qh = [q[i * d_h:(i + 1) * d_h] for i in range(h)]
        kh = [k[i * d_h:(i + 1) * d_h] for i in range(h_kv)]
        if b["qk_norm"] == "head" and not b["qk_norm_after_rope"]:  # Qwen3: each head's d_h features alone
            qh = [_norm(b, weights, "q_norm", prefix, x, rms_beta) for x in qh]
            kh = [_norm(b, weights, "k_norm", prefix, x, rms_beta) for x in kh]
        if b["qk_norm"] == "each_head":  # Command R+: head i normalised with row i of the weights
            qh = [_norm(b, weights, "q_norm", prefix, x, rms_beta, row=i) for i, x in enumerate(qh)]
            kh = [_norm(b, weights, "k_norm", prefix, x, rms_beta, row=i) for i, x in enumerate(kh)]
        vh = [v[i * d_v:(i + 1) * d_v] * b["value_scale"] for i in range(h_kv)]
        if rope_fraction > 0.0:
            qh = [rope_vec(x, t, rope_fraction, b["rope_theta"], b["rope_scaling"], T, b["rope_layout"]) for x in qh]
            kh = [rope_vec(x, t, rope_fraction, b["rope_theta"], b["rope_scaling"], T, b["rope_layout"]) for x in kh]
        if b["qk_norm"] == "head_unscaled":  # Llama 4: x / sqrt(mean(x^2) + eps) per head, no weights
            ones = [1.0] * d_h
            qh = [rms_norm_vec(x, ones, None, b["norm_eps"]) for x in qh]
            kh = [rms_norm_vec(x, ones, None, b["norm_eps"]) for x in kh]
        elif b["qk_norm_after_rope"]:  # HunYuan: each rotated head normalised
            qh = [_norm(b, weights, "q_norm", prefix, x, rms_beta) for x in qh]
            kh = [_norm(b, weights, "k_norm", prefix, x, rms_beta) for x in kh]
        if b["query_scale"] and b["query_scale_form"] == "power":
            qh = [x * (1.0 + (t + b["query_scale_offset"]) / b["query_scale_length"]) ** b["query_scale"] for x in qh]
        elif b["query_scale"]:
            steps = (t + b["query_scale_offset"]) // b["query_scale_length"]  # whole lengths up to t + offset
            qh = [x * (1.0 + b["query_scale"] * math.log(1.0 + steps)) for x in qh]
        q_heads.append(qh)
        k_heads.append(kh)
        v_heads.append(vh)

    scale = b["attention_scale"] if b["attention_scale"] else 1.0 / math.sqrt(d_h)
    window, chunk = b["sliding_window"], b["attention_chunk"]
    out = []
    for t in range(T):
        concat = np.zeros(h * d_v, dtype=np.float64)
        # causal: keys 0..t; with a sliding window W, only the last W of them (t-W+1..t); with chunks of C, only
        # those of t's own chunk
        keys = [s for s in range(t + 1) if (not window or t - s < window) and (not chunk or s // chunk == t // chunk)]
        for j in range(h):
            g = j // group
            scores = []
            for s in keys:
                score = float(np.dot(q_heads[t][j], k_heads[s][g])) * scale
                if b["attention_softcap"]:
                    score = b["attention_softcap"] * math.tanh(score / b["attention_softcap"])
                if b["alibi"]:
                    score += alibi_slopes(h)[j] * (s - t)
                scores.append(score)
            if b["attention_sinks"]:  # one more logit in the softmax, whose weight is then dropped
                p = softmax_list(scores + [float(_w(weights, "sinks", prefix)[j])])[:-1]
            else:
                p = softmax_list(scores)
            head_out = np.zeros(d_v, dtype=np.float64)
            for i, s in enumerate(keys):
                head_out = head_out + p[i] * v_heads[s][g]
            concat[j * d_v:(j + 1) * d_v] = head_out
        if b["sub_norms"]:  # BitNet's attn_sub_norm over the whole concatenation
            concat = _norm(b, weights, "attn_sub_norm", prefix, concat, rms_beta)
        out.append(linear_vec(concat, w_o, b_o))
    return out


def _largest(values, k):
    """Indices of the k largest values, largest first; of equal values the lower index first."""
    left = list(range(len(values)))
    picked = []
    for _ in range(k):
        best = left[0]
        for i in left[1:]:
            if values[i] > values[best]:
                best = i
        picked.append(best)
        left.remove(best)
    return picked


def gated_unit(b, gate, up):
    """act(gate) * up, or gpt-oss's clamped SwiGLU."""
    if b["activation"] == "clamped_swiglu":
        c = b["swiglu_limit"]
        g = min(gate, c)
        return g * sigmoid(b["swiglu_alpha"] * g) * (min(max(up, -c), c) + 1.0)
    return ACT_FN[b["activation"]](gate) * up


def _expert(b, weights, prefix, name, vec):
    """One expert MLP, as a dense one (_mlp) under its own prefix `name`, the biases when bias.mlp (a routed
    expert's only when moe.routed_bias)."""
    routed = name != "shared_"
    return _dense_mlp(b, weights, prefix, vec, name, b["bias"]["mlp"] and (b["moe"]["routed_bias"] or not routed))


def moe_routing(moe, weights, prefix, vec):
    """(chosen expert indices, their weights) for one token, written from the routers' description:
    scores = softmax or sigmoid of vec·router; choice scores = scores (+ selection bias); with groups,
    only experts of the top_groups best groups (a group's max, or the sum of its two largest); top-k;
    weights = the chosen (unbiased) scores, renormalised if asked, times routed_scaling. top-k-then-
    softmax: the softmax of the k largest logits, times routed_scaling."""
    E, k = moe["n_experts"], moe["top_k"]
    logits = [float(z) for z in linear_vec(vec, _w(weights, "router", prefix),
                                            _wopt(weights, "b_router", prefix, moe["logit_bias"]))]
    if moe["order"] == "topk_softmax":
        chosen = _largest(logits, k)
        return chosen, [w * moe["routed_scaling"] for w in softmax_list([logits[e] for e in chosen])]
    if moe["order"] == "sparsemixer":  # PhiMoE in eval mode (arXiv 2409.12136's SparseMixer, no sampling)
        return _sparsemixer(logits, moe["sparsemixer_eps"], moe["routed_scaling"])
    scores = softmax_list(logits) if moe["scoring"] == "softmax" else [sigmoid(z) for z in logits]
    choice = list(logits if moe["selection_on"] == "logits" else scores)
    if moe["selection_bias"]:
        bias = _w(weights, "router_bias", prefix)
        choice = [choice[e] + float(bias[e]) for e in range(E)]
    size = E // moe["n_groups"]
    if moe["n_groups"] > 1:
        group_scores = []
        for g in range(moe["n_groups"]):
            members = choice[g * size:(g + 1) * size]
            if moe["group_score"] == "max":
                group_scores.append(max(members))
            else:
                top = _largest(members, 2)
                group_scores.append(members[top[0]] + members[top[1]])
        keep = _largest(group_scores, moe["top_groups"])
        choice = [choice[e] if e // size in keep else -math.inf for e in range(E)]
    chosen = _largest(choice, k)
    picked = [scores[e] for e in chosen]
    if moe["renormalize"]:
        total = math.fsum(picked) + moe["renormalize_eps"]  # DeepSeek-V3's 1e-20: sigmoid scores can all be 0
        picked = [w / total for w in picked]
    return chosen, [w * moe["routed_scaling"] for w in picked]


def _sparsemixer(logits, eps, scaling):
    """Two picks: the best logit m among the experts not yet picked, weighted by exp(m) over the sum of exp(s) of
    those not yet picked whose relative gap (m - s) / max(|s|, m) is at most 2·eps."""
    picked, weights = [], []
    for _ in range(2):
        remaining = [e for e in range(len(logits)) if e not in picked]
        best = max(remaining, key=lambda e: (logits[e], -e))
        m = logits[best]
        near = [e for e in remaining if (m - logits[e]) / max(abs(logits[e]), m) <= 2 * eps]
        total = math.fsum(math.exp(logits[e] - m) for e in near)
        picked.append(best)
        weights.append(scaling / total)  # exp(m - m) = 1 over the sum
    return picked, weights


def _moe(b, weights, prefix, vec):
    moe = b["moe"]
    chosen, gates = moe_routing(moe, weights, prefix, vec)
    out = np.zeros(b["d_model"], dtype=np.float64)
    for e, g in zip(chosen, gates):
        if moe["scale_input"]:
            out = out + _expert(b, weights, prefix, "experts.%d." % e, g * vec)
        else:
            out = out + g * _expert(b, weights, prefix, "experts.%d." % e, vec)
    if moe["d_shared"]:
        shared = _expert(b, weights, prefix, "shared_", vec)
        if moe["shared_gate"]:
            shared = sigmoid(float(np.dot(vec, _w(weights, "shared_gate", prefix)[:, 0]))) * shared
        out = out + shared
    if moe["out_norm"]:  # A.X-K1's post_mlp_layernorm, on the sum
        out = _norm(b, weights, "moe_norm", prefix, out, "moe_norm_beta" in weights)
    return out


def _mlp(b, weights, prefix, vec):
    if b["moe"] is not None:
        return _moe(b, weights, prefix, vec)
    return _dense_mlp(b, weights, prefix, vec, "", b["bias"]["mlp"])


def _dense_mlp(b, weights, prefix, vec, name, has_bias):
    """act(vec W_up + b_up) W_down + b_down, or gated act(vec W_gate + b_gate) * (vec W_up + b_up), then W_down."""
    up = linear_vec(vec, _w(weights, name + "w_up", prefix), _wopt(weights, name + "b_up", prefix, has_bias))
    m_gate, m_down = b.get("mlp_multipliers", (1.0, 1.0))
    if b["gated"]:
        gate = linear_vec(vec, _w(weights, name + "w_gate", prefix), _wopt(weights, name + "b_gate", prefix, has_bias))
        gate = [m_gate * float(g) for g in gate]  # Falcon-H1: the gate's pre-activation times m_g
        hidden = np.array([activate(b, weights, prefix, float(gate[i])) * float(up[i])
                           if b["activation"] in WITH_SCALARS else gated_unit(b, float(gate[i]), float(up[i]))
                           for i in range(len(up))], dtype=np.float64)
    else:
        hidden = np.array([activate(b, weights, prefix, float(z)) for z in up], dtype=np.float64)
    if b["sub_norms"]:  # BitNet's ffn_sub_norm over the d_ff hidden features
        hidden = _norm(b, weights, name + "mlp_sub_norm", prefix, hidden, False)
    down = linear_vec(hidden, _w(weights, name + "w_down", prefix), _wopt(weights, name + "b_down", prefix, has_bias))
    return down * m_down if m_down != 1.0 else down  # and its output times m_d


def _block_sequence(b, weights, prefix, xs, rope_fraction, rms_beta):
    """One block over one sequence: xs is a list of T (d,) vectors."""
    r = b["residual_multiplier"]  # Granite: each branch output times r before its residual add

    def attention(tokens, rope_fraction, rms_beta=False):
        return [r * v for v in _attention(b, weights, prefix, tokens, rope_fraction, rms_beta)]

    def mlp(vec):
        return r * _mlp(b, weights, prefix, vec)

    T = len(xs)
    a1, b1, a2, b2 = b["scales"]  # each add a·skip + b·branch (1 and 1 but for MiniMax and Beam)
    if b["placement"] == "pre":
        n1 = [_norm(b, weights, "ln1", prefix, xs[t], rms_beta) for t in range(T)]
        a = attention(n1, rope_fraction, rms_beta)
        hs = [a1 * xs[t] + b1 * a[t] for t in range(T)]
        ys = []
        for t in range(T):
            n2 = _norm(b, weights, "ln2", prefix, hs[t], rms_beta)
            ys.append(a2 * hs[t] + b2 * mlp(n2))
        return ys
    if b["placement"] == "normed_residual":  # BLOOM's switch: the residual stream restarts at each norm's output
        n1 = [_norm(b, weights, "ln1", prefix, xs[t], rms_beta) for t in range(T)]
        a = attention(n1, rope_fraction, rms_beta)
        ys = []
        for t in range(T):
            n2 = _norm(b, weights, "ln2", prefix, a1 * n1[t] + b1 * a[t], rms_beta)
            ys.append(a2 * n2 + b2 * mlp(n2))
        return ys
    if b["placement"] == "post":
        a = attention(xs, rope_fraction, rms_beta)
        hs = [_norm(b, weights, "ln1", prefix, xs[t] + a[t], rms_beta) for t in range(T)]
        ys = []
        for t in range(T):
            m = mlp(hs[t])
            ys.append(_norm(b, weights, "ln2", prefix, hs[t] + m, rms_beta))
        return ys
    if b["placement"] == "sandwich":  # Gemma 2: norm before and after each branch
        n1 = [_norm(b, weights, "ln1", prefix, xs[t], rms_beta) for t in range(T)]
        a = _attention(b, weights, prefix, n1, rope_fraction, rms_beta)
        hs = [a1 * xs[t] + b1 * r * _norm(b, weights, "ln1_post", prefix, a[t], rms_beta) for t in range(T)]
        ys = []
        for t in range(T):
            m = _mlp(b, weights, prefix, _norm(b, weights, "ln2", prefix, hs[t], rms_beta))
            ys.append(a2 * hs[t] + b2 * r * _norm(b, weights, "ln2_post", prefix, m, rms_beta))
        return ys
    if b["placement"] == "post_branch":  # OLMo2: norm each branch's output, then add it
        a = attention(xs, rope_fraction, rms_beta)
        hs = [xs[t] + _norm(b, weights, "ln1", prefix, a[t], rms_beta) for t in range(T)]
        return [hs[t] + _norm(b, weights, "ln2", prefix, mlp(hs[t]), rms_beta) for t in range(T)]
    if b["placement"] == "parallel":
        n1 = [_norm(b, weights, "ln1", prefix, xs[t], rms_beta) for t in range(T)]
        a = attention(n1, rope_fraction, rms_beta)
        ys = []
        for t in range(T):
            n2 = _norm(b, weights, "ln2", prefix, xs[t], rms_beta)
            ys.append(xs[t] + a[t] + mlp(n2))
        return ys
    if b["placement"] == "parallel_shared":
        # y = x + attn(ln1(x)) + mlp(ln1(x)): the same normalised vectors feed both branches
        n1 = [_norm(b, weights, "ln1", prefix, xs[t], rms_beta) for t in range(T)]
        a = attention(n1, rope_fraction)
        return [xs[t] + a[t] + mlp(n1[t]) for t in range(T)]
    raise ValueError(b["placement"])


# ------------------------------------------------------------------------ public API


def block_forward(block_cfg, weights, x, rope=None, rms_beta=False, prefix=""):
    """Evaluate one decoder block.  x: (B, T, d) -> (B, T, d) float64.

    rope: override the rotary fraction (None = take it from block_cfg).
    """
    b = resolve_block(block_cfg)
    frac = b["rope"] if rope is None else float(rope)
    x = np.asarray(x, dtype=np.float64)
    B, T, d = x.shape
    assert d == b["d_model"]
    y = np.zeros((B, T, d), dtype=np.float64)
    for bi in range(B):
        xs = [np.array(x[bi, t], dtype=np.float64) for t in range(T)]
        ys = _block_sequence(b, weights, prefix, xs, frac, rms_beta)
        for t in range(T):
            y[bi, t] = ys[t]
    return y


def layer_block_cfgs(block_cfg, n_layers, layers=None):
    """Each layer's ``block:`` mapping: the base one, with the fields of every ``layers:`` entry
    ({indices, block}) that names the layer replaced by the entry's values."""
    out = [dict(block_cfg) for _ in range(n_layers)]
    for entry in layers or ():
        for i in entry["indices"]:
            out[i] = dict(block_cfg, **entry["block"])
    return out


def model_forward(block_cfg, model_cfg, weights, ids, rms_beta=False, layers=None):
    """Evaluate the full model.  ids: int (B, T) -> logits (B, T, V) float64.

    layers: the config's per-layer overrides (a list of {indices, block}); each layer runs its own block.
    """
    b = resolve_block(block_cfg)
    m = resolve_model(model_cfg)
    d, V = b["d_model"], m["vocab_size"]
    ids = np.asarray(ids)
    B, T = ids.shape
    wte = _w(weights, "wte", "")
    # "rope positions mean the blocks apply RoPE": use the block's fraction if it
    # sets one, otherwise rotate the whole head.  Other position kinds: whatever
    # the block config says (tests keep block.rope false for them).
    def fraction(layer_b):
        if m["positions"] == "rope":
            return layer_b["rope"] if layer_b["rope"] > 0.0 else 1.0
        return layer_b["rope"]

    per_layer = [resolve_block(c) for c in layer_block_cfgs(block_cfg, m["n_layers"], layers)]
    if m["positions"] == "alibi":  # the blocks bias their scores with ALiBi
        per_layer = [dict(lb, alibi=True) for lb in per_layer]

    logits = np.zeros((B, T, V), dtype=np.float64)
    for bi in range(B):
        hs = []
        for t in range(T):
            tok = int(ids[bi, t])
            vec = np.array(wte[tok], dtype=np.float64) * m["embedding_multiplier"]
            if "proj_in" in weights:
                vec = linear_vec(vec, _w(weights, "proj_in", ""), None)
            if m["positions"] == "learned":
                vec = vec + _w(weights, "wpe", "")[t + m["position_offset"]]
            elif m["positions"] == "sinusoidal":
                vec = vec + sinusoidal_vec(t + m["position_offset"], d, m["sinusoidal_layout"], m["padding_idx"])
            if m["embedding_norm"]:
                vec = _norm(b, weights, "emb_ln", "", vec, rms_beta)
            hs.append(vec)
        for layer, lb in enumerate(per_layer):
            hs = _block_sequence(lb, weights, "blocks.%d." % layer, hs, fraction(lb), rms_beta)
        for t in range(T):
            vec = hs[t]
            if m["final_norm"]:
                vec = _norm(b, weights, "ln_f", "", vec, rms_beta)
            if "proj_out" in weights:
                vec = linear_vec(vec, _w(weights, "proj_out", ""), None)
            if m["tie_embeddings"]:
                row = np.array([float(np.dot(vec, wte[v])) for v in range(V)])
            else:
                row = linear_vec(vec, _w(weights, "lm_head", ""), None)
            if m["lm_head_bias"]:
                row = row + _w(weights, "lm_head_bias", "")
            row = row * m["logit_multiplier"]
            if m["logit_softcap"]:
                row = np.array([m["logit_softcap"] * math.tanh(z / m["logit_softcap"]) for z in row])
            logits[bi, t] = row
    return logits


# ----------------------------------------------------------------------------- Gated DeltaNet (issue #28)


def gated_deltanet(mixer, weights, x, state=None, conv_window=None):
    """The Gated DeltaNet token mixer, one token, one head, one number at a time (Qwen3-Next's, as the FLA
    papers write it; not blockcli's code). `mixer`: key_heads, value_heads, key_head_dim, value_head_dim,
    conv_kernel, norm_eps. `weights`: dn_q (d, h_k·d_k), dn_k, dn_v (d, h_v·d_v), dn_z, dn_b (d, h_v), dn_a,
    dn_conv (C, K) over the channels q | k | v, dn_dt_bias (h_v,), dn_A_log (h_v,), dn_norm_gamma (d_v,),
    dn_out (h_v·d_v, d). x (B, T, d). `state` (B, h_v, d_k, d_v) and `conv_window` (B, K − 1, C): what came
    before (zeros when None). Returns (y (B, T, d), final state, final conv window)."""
    h_k, h_v = mixer["key_heads"], mixer["value_heads"]
    d_k, d_v, K = mixer["key_head_dim"], mixer["value_head_dim"], mixer["conv_kernel"]
    eps = mixer.get("norm_eps", 1e-6)
    B, T, d = x.shape
    C = 2 * h_k * d_k + h_v * d_v
    group = h_v // h_k
    y = np.zeros((B, T, d))
    states = np.zeros((B, h_v, d_k, d_v)) if state is None else np.array(state, dtype=np.float64)
    windows = np.zeros((B, K - 1, C)) if conv_window is None else np.array(conv_window, dtype=np.float64)
    conv_w = weights["dn_conv"]

    def project(vec, name):
        w = weights[name]
        return [sum(vec[i] * w[i, j] for i in range(len(vec))) for j in range(w.shape[1])]

    for b in range(B):
        history = [list(windows[b, j]) for j in range(K - 1)]  # the K − 1 inputs before x, oldest first
        for t in range(T):
            vec = list(x[b, t])
            raw = project(vec, "dn_q") + project(vec, "dn_k") + project(vec, "dn_v")  # C channels
            history.append(raw)
            mixed = []
            for c in range(C):  # tap j of K reads the input K − 1 − j steps back
                acc = 0.0
                for j in range(K):
                    acc += conv_w[c, j] * history[len(history) - K + j][c]
                mixed.append(silu(acc))
            history = history[1:]
            q_all, k_all = mixed[:h_k * d_k], mixed[h_k * d_k:2 * h_k * d_k]
            v_all = mixed[2 * h_k * d_k:]
            z_all, b_all, a_all = project(vec, "dn_z"), project(vec, "dn_b"), project(vec, "dn_a")
            gated_heads = []
            for hv in range(h_v):
                hk = hv // group  # the key head this value head reads
                q = q_all[hk * d_k:(hk + 1) * d_k]
                k = k_all[hk * d_k:(hk + 1) * d_k]
                v = v_all[hv * d_v:(hv + 1) * d_v]
                q_len = math.sqrt(sum(e * e for e in q) + 1e-6)
                k_len = math.sqrt(sum(e * e for e in k) + 1e-6)
                q = [e / q_len / math.sqrt(d_k) for e in q]
                k = [e / k_len for e in k]
                beta = mixer.get("beta_scale", 1.0) * sigmoid(b_all[hv])  # OLMo Hybrid: 2·σ
                g = -math.exp(weights["dn_A_log"][hv]) * softplus(a_all[hv] + weights["dn_dt_bias"][hv])
                S = states[b, hv]
                S *= math.exp(g)
                for j in range(d_v):
                    remembered = sum(S[i, j] * k[i] for i in range(d_k))
                    delta = beta * (v[j] - remembered)
                    for i in range(d_k):
                        S[i, j] += k[i] * delta
                o = [sum(S[i, j] * q[i] for i in range(d_k)) for j in range(d_v)]
                rms = math.sqrt(sum(e * e for e in o) / d_v + eps)
                z = z_all[hv * d_v:(hv + 1) * d_v]
                gated_heads += [o[j] / rms * weights["dn_norm_gamma"][j] * silu(z[j]) for j in range(d_v)]
            w_out = weights["dn_out"]
            for j in range(d):
                y[b, t, j] = sum(gated_heads[i] * w_out[i, j] for i in range(len(gated_heads)))
        windows[b] = np.array(history) if K > 1 else windows[b]
    return y, states, windows
# ----------------------------------------------------------------------------- Kimi Delta Attention, a loop over time


def kimi_delta_attention(mixer, weights, x, state=None, conv_window=None):
    """Kimi Delta Attention (Kimi-Linear's KDA, as its paper writes it: the gated delta rule with a decay per key
    channel), one token, one head, one number at a time; not blockcli's code. `mixer`: key_heads (= value heads h),
    key_head_dim (= value_head_dim d), conv_kernel, norm_eps. `weights`: dn_q, dn_k, dn_v (D, h·d); dn_q_conv,
    dn_k_conv, dn_v_conv (h·d, K) each; dn_f_a (D, d), dn_f_b (d, h·d), dn_dt_bias (h·d,), dn_A_log (h,); dn_b (D, h);
    dn_g_a (D, d), dn_g_b (d, h·d); dn_norm_gamma (d,); dn_out (h·d, D). x (B, T, D). Per token and head: q, k, v each
    through its own causal conv and SiLU; q and k L2-normalised (ε 1e-6 under the root), q / √d; per channel i of
    the key, α_i = exp(−exp(A_log)·softplus(f_i + dt_bias_i)) with f = x·W_fa·W_fb; β = σ(x·W_b);
    S[i, :] ← α_i·S[i, :]; S ← S + k (β (v − Sᵀk))ᵀ; o = Sᵀq; out = RMSNorm(o)·γ·σ(x·W_ga·W_gb), then W_out.
    `state` (B, h, d, d) and `conv_window` (B, K − 1, 3·h·d) (q | k | v): what came before. Returns (y, state,
    window)."""
    h, d_h, K = mixer["key_heads"], mixer["key_head_dim"], mixer["conv_kernel"]
    eps = mixer.get("norm_eps", 1e-6)
    B, T, D = x.shape
    width = h * d_h
    y = np.zeros((B, T, D))
    states = np.zeros((B, h, d_h, d_h)) if state is None else np.array(state, dtype=np.float64)
    windows = np.zeros((B, K - 1, 3 * width)) if conv_window is None else np.array(conv_window, dtype=np.float64)
    taps = [weights["dn_q_conv"], weights["dn_k_conv"], weights["dn_v_conv"]]

    def project(vec, name):
        w = weights[name]
        return [sum(vec[i] * w[i, j] for i in range(len(vec))) for j in range(w.shape[1])]

    for b in range(B):
        history = [list(windows[b, j]) for j in range(K - 1)]  # the K − 1 inputs before x, oldest first
        for t in range(T):
            vec = list(x[b, t])
            history.append(project(vec, "dn_q") + project(vec, "dn_k") + project(vec, "dn_v"))
            parts = []
            for which in range(3):  # q, k, v: each its own conv over its own channels
                out = []
                for c in range(width):
                    acc = 0.0
                    for j in range(K):
                        acc += taps[which][c, j] * history[len(history) - K + j][which * width + c]
                    out.append(silu(acc))
                parts.append(out)
            history = history[1:]
            f_all = project(project(vec, "dn_f_a"), "dn_f_b")
            g_all = project(project(vec, "dn_g_a"), "dn_g_b")
            b_all = project(vec, "dn_b")
            heads = []
            for hh in range(h):
                q, k, v = (part[hh * d_h:(hh + 1) * d_h] for part in parts)
                q_len = math.sqrt(sum(e * e for e in q) + 1e-6)
                k_len = math.sqrt(sum(e * e for e in k) + 1e-6)
                q = [e / q_len / math.sqrt(d_h) for e in q]
                k = [e / k_len for e in k]
                beta = sigmoid(b_all[hh])
                S = states[b, hh]
                for i in range(d_h):  # each key channel's row of S decays by its own α
                    c = hh * d_h + i
                    alpha = math.exp(-math.exp(weights["dn_A_log"][hh]) * softplus(f_all[c] + weights["dn_dt_bias"][c]))
                    for j in range(d_h):
                        S[i, j] *= alpha
                for j in range(d_h):
                    remembered = sum(S[i, j] * k[i] for i in range(d_h))
                    delta = beta * (v[j] - remembered)
                    for i in range(d_h):
                        S[i, j] += k[i] * delta
                o = [sum(S[i, j] * q[i] for i in range(d_h)) for j in range(d_h)]
                rms = math.sqrt(sum(e * e for e in o) / d_h + eps)
                gate = g_all[hh * d_h:(hh + 1) * d_h]
                heads += [o[j] / rms * weights["dn_norm_gamma"][j] * sigmoid(gate[j]) for j in range(d_h)]
            w_out = weights["dn_out"]
            for j in range(D):
                y[b, t, j] = sum(heads[i] * w_out[i, j] for i in range(len(heads)))
        windows[b] = np.array(history) if K > 1 else windows[b]
    return y, states, windows


# ----------------------------------------------------------------------------- Mamba-2 (SSD), a loop over time


def mamba2_mixer(m, weights, u):
    """The Mamba-2 mixer of the SSD paper (Dao & Gu 2024, §7), as a plain recurrence over time, one token, one
    head, one state entry at a time. `m`: n_heads, head_dim, d_state, n_groups, conv_kernel (as block.mamba);
    `weights`: w_ssm_in (d, 2·d_in + 2·g·N + h), b_ssm_in or None, ssm_conv (c, K), b_ssm_conv or None,
    ssm_dt_bias, ssm_A_log, ssm_D (h,), ssm_norm_gamma (d_in,), w_ssm_out (d_in, d), b_ssm_out or None, eps;
    u (B, T, d). Per token: [z | x B C | dt] = u·W_in; x B C through the causal depthwise conv (tap K−1 reads the
    current token, earlier taps the earlier tokens, zeros before the first) and SiLU; Δ = softplus(dt + dt_bias), at least m's dt_min;
    for head i in group i·g/h: S ← exp(−Δ·exp(A_log))·S + Δ·x ⊗ B; y = S·C + D·x; then y·silu(z) RMS-normalised
    over each group's d_in/g features, times the scale, and out-projected. Returns (B, T, d).
    Falcon-H1's options in `m`: "in_multiplier" (u times it before W_in), "multipliers" (five numbers: the
    projection's z, x, B, C and dt entries each times its own), "norm": "gated" (the above), "norm_gate" (y
    normalised and scaled first, then times silu(z)) or "none" (y·silu(z), no norm)."""
    h, p, N, g, K = m["n_heads"], m["head_dim"], m["d_state"], m["n_groups"], m["conv_kernel"]
    d_in, eps = h * p, m["eps"]
    c = d_in + 2 * g * N
    Bsz, T, d = u.shape
    out = np.zeros((Bsz, T, d), dtype=np.float64)
    scale_in = m.get("in_multiplier", 1.0)
    m_z, m_x, m_b, m_c, m_dt = m.get("multipliers", (1.0,) * 5)
    segment = [m_z] * d_in + [m_x] * d_in + [m_b] * (g * N) + [m_c] * (g * N) + [m_dt] * h  # entry by entry
    kind = m.get("norm", "gated")
    for b in range(Bsz):
        projected = [[v * segment[k] for k, v in enumerate(linear_vec([scale_in * e for e in u[b, t]],
                                                                       weights["w_ssm_in"], weights.get("b_ssm_in")))]
                     for t in range(T)]
        state = [[[0.0] * N for _ in range(p)] for _ in range(h)]
        for t in range(T):
            z = projected[t][:d_in]
            dt = projected[t][d_in + c:]
            conv = [0.0] * c
            for ch in range(c):
                total = float(weights["b_ssm_conv"][ch]) if weights.get("b_ssm_conv") is not None else 0.0
                for k in range(K):
                    s = t - (K - 1) + k  # the token tap k reads
                    if s >= 0:
                        total += float(weights["ssm_conv"][ch, k]) * float(projected[s][d_in + ch])
                conv[ch] = silu(total)
            x, Bv, Cv = conv[:d_in], conv[d_in:d_in + g * N], conv[d_in + g * N:]
            y = [0.0] * d_in
            for i in range(h):
                group = i * g // h
                delta = max(softplus(float(dt[i]) + float(weights["ssm_dt_bias"][i])), m.get("dt_min", 0.0))
                decay = math.exp(-delta * math.exp(float(weights["ssm_A_log"][i])))
                for j in range(p):
                    xj = x[i * p + j]
                    for n in range(N):
                        state[i][j][n] = decay * state[i][j][n] + delta * xj * Bv[group * N + n]
                    y[i * p + j] = (math.fsum(state[i][j][n] * Cv[group * N + n] for n in range(N))
                                    + float(weights["ssm_D"][i]) * xj)
            gated = [y[k] * silu(float(z[k])) for k in range(d_in)]
            width = d_in // g
            normed = np.zeros(d_in, dtype=np.float64)
            if kind == "none":
                normed[:] = gated
            for grp in range(g if kind != "none" else 0):
                part = (gated if kind == "gated" else y)[grp * width:(grp + 1) * width]
                normed[grp * width:(grp + 1) * width] = rms_norm_vec(part, weights["ssm_norm_gamma"][grp * width:],
                                                                     None, eps)
            if kind == "norm_gate":
                normed = np.array([normed[k] * silu(float(z[k])) for k in range(d_in)])
            out[b, t] = linear_vec(normed, weights["w_ssm_out"], weights.get("b_ssm_out"))
    return out


# ----------------------------------------------------------------------------- Mamba-1 (S6), a loop over time


def mamba1_mixer(m, weights, u):
    """The Mamba-1 mixer (Gu & Dao 2023, Algorithm 2, the selective scan), as a plain recurrence over time, one
    token, one channel, one state entry at a time. `m`: d_inner, d_state, dt_rank, conv_kernel, bc_norm (none |
    weightless | learned), eps; `weights`: w_ssm_in (d, 2·d_in), b_ssm_in or None, ssm_conv (d_in, K), b_ssm_conv or
    None, w_ssm_x (d_in, R + 2·N), w_ssm_dt (R, d_in), b_ssm_dt (d_in,), ssm_A_log (d_in, N), ssm_D (d_in,),
    ssm_dt_norm (R,) / ssm_B_norm / ssm_C_norm (N,) when learned, w_ssm_out (d_in, d), b_ssm_out or None; u (B, T, d).
    Per token: [x | z] = u·W_in; x through the causal depthwise conv (tap K−1 the current token) and SiLU;
    [δ | B | C] = x·W_x, each RMS-normalised (times its scale when learned) unless bc_norm is none; per channel c:
    Δ = softplus(δ·W_dt[:, c] + b_dt[c]); S[c, n] ← exp(−Δ·exp(A_log[c, n]))·S[c, n] + Δ·x_c·B_n; y_c = Σ_n S[c, n]·C_n
    + D_c·x_c; then y ⊙ silu(z) out-projected. Returns (B, T, d)."""
    d_in, N, R, K = m["d_inner"], m["d_state"], m["dt_rank"], m["conv_kernel"]
    Bsz, T, d = u.shape
    out = np.zeros((Bsz, T, d), dtype=np.float64)

    def norm(vec, key):
        if m["bc_norm"] == "none":
            return [float(v) for v in vec]
        gamma = weights[key] if m["bc_norm"] == "learned" else None
        scale = 1.0 / math.sqrt(math.fsum(float(v) ** 2 for v in vec) / len(vec) + m["eps"])
        return [float(v) * scale * (float(gamma[i]) if gamma is not None else 1.0) for i, v in enumerate(vec)]

    for b in range(Bsz):
        projected = [linear_vec(u[b, t], weights["w_ssm_in"], weights.get("b_ssm_in")) for t in range(T)]
        state = [[0.0] * N for _ in range(d_in)]
        for t in range(T):
            x = [0.0] * d_in
            for ch in range(d_in):
                total = float(weights["b_ssm_conv"][ch]) if weights.get("b_ssm_conv") is not None else 0.0
                for k in range(K):
                    s = t - (K - 1) + k  # the token tap k reads
                    if s >= 0:
                        total += float(weights["ssm_conv"][ch, k]) * float(projected[s][ch])
                x[ch] = silu(total)
            dbc = linear_vec(np.array(x), weights["w_ssm_x"], None)
            dt, Bv, Cv = norm(dbc[:R], "ssm_dt_norm"), norm(dbc[R:R + N], "ssm_B_norm"), norm(dbc[R + N:], "ssm_C_norm")
            gated = [0.0] * d_in
            for ch in range(d_in):
                delta = softplus(math.fsum(dt[r] * float(weights["w_ssm_dt"][r, ch]) for r in range(R))
                                 + float(weights["b_ssm_dt"][ch]))
                for n in range(N):
                    decay = math.exp(-delta * math.exp(float(weights["ssm_A_log"][ch, n])))
                    state[ch][n] = decay * state[ch][n] + delta * x[ch] * Bv[n]
                y = math.fsum(state[ch][n] * Cv[n] for n in range(N)) + float(weights["ssm_D"][ch]) * x[ch]
                gated[ch] = y * silu(float(projected[t][d_in + ch]))
            out[b, t] = linear_vec(np.array(gated), weights["w_ssm_out"], weights.get("b_ssm_out"))
    return out


def short_conv_mixer(kernel, weights, u):
    """LFM2's gated short convolution, token by token: [b | c | x] = u·W_in (+ b_conv_in); s_t = Σ_k w[:, k]·(b ⊙ x)
    of token t − (K−1) + k (zeros before the first) + bias; y_t = c_t ⊙ s_t; out = y·W_out (+ bias). u (B, T, d)."""
    Bsz, T, d = u.shape
    out = np.zeros((Bsz, T, d), dtype=np.float64)
    for b in range(Bsz):
        bcx = [linear_vec(u[b, t], weights["w_conv_in"], weights.get("b_conv_in")) for t in range(T)]
        for t in range(T):
            y = np.zeros(d, dtype=np.float64)
            for ch in range(d):
                total = float(weights["b_short_conv"][ch]) if weights.get("b_short_conv") is not None else 0.0
                for k in range(kernel):
                    s = t - (kernel - 1) + k
                    if s >= 0:
                        total += float(weights["short_conv"][ch, k]) * bcx[s][ch] * bcx[s][2 * d + ch]
                y[ch] = bcx[t][d + ch] * total
            out[b, t] = linear_vec(y, weights["w_conv_out"], weights.get("b_conv_out"))
    return out


# ----------------------------------------------------------------------------- lightning attention, a loop over time


def lightning_mixer(n_heads, head_dim, decay_scale, weights, x, state=None, norm_eps=1e-6):
    """MiniMax's lightning attention as the paper's recurrence (MiniMax-01, §2.2.1: linear attention with a fixed
    decay per head), one token, one head, one number at a time; not blockcli's block-wise code. Head i decays at
    λ_i = exp(−s_i), s_i = 2^(−8(i+1)/h)·decay_scale. `weights`: la_q, la_k, la_v, la_gate (d, h·d_h), la_norm_gamma
    (h·d_h,), la_out (h·d_h, d). x (B, T, d); `state` (B, h, d_h, d_h) what came before (zeros when None). Per token:
    q | k | v = SiLU(x·W), S_i ← λ_i·S_i + k_iᵀv_i, o_i = q_i·S_i; y = (σ(x·W_gate) ⊙ RMSNorm(o))·W_out. Returns
    (y (B, T, d), the final state)."""
    B, T, d = x.shape
    h, dh = n_heads, head_dim
    y = np.zeros((B, T, d))
    states = np.zeros((B, h, dh, dh)) if state is None else np.array(state, dtype=np.float64)
    lam = [math.exp(-((2.0 ** (-8.0 / h)) ** (i + 1)) * decay_scale) for i in range(h)]
    for b in range(B):
        for t in range(T):
            vec = x[b, t]
            q, k, v = (linear_vec(vec, weights[name], None) for name in ("la_q", "la_k", "la_v"))
            q, k, v = ([silu(e) for e in part] for part in (q, k, v))
            o = []
            for i in range(h):
                S = states[b, i]
                for r in range(dh):
                    for c in range(dh):
                        S[r, c] = lam[i] * S[r, c] + k[i * dh + r] * v[i * dh + c]
                o += [sum(q[i * dh + r] * S[r, c] for r in range(dh)) for c in range(dh)]
            rms = math.sqrt(sum(e * e for e in o) / len(o) + norm_eps)
            gate = linear_vec(vec, weights["la_gate"], None)
            gated = [sigmoid(gate[j]) * o[j] / rms * weights["la_norm_gamma"][j] for j in range(len(o))]
            y[b, t] = linear_vec(gated, weights["la_out"], None)
    return y, states


def mixture_of_attention(n_experts, top_k, n_kv_heads, head_dim, rope_theta, weights, x, past=None):
    """JetMoE's mixture of attention heads from ModuleFormer's description (§2: attention experts, each its own
    query and output projection, sharing the keys and values), one token, one expert, one head at a time; not
    blockcli's code. `weights`: moa_router (d, E), attn_experts.{e}.w_q (d, h_kv·d_h), w_k, w_v (d, h_kv·d_h),
    attn_experts.{e}.w_o (h_kv·d_h, d), moa_bias (d,). x (B, T, d); `past` the (keys, values) lists per sequence of
    the tokens before (None: none). Per token t: the top_k router logits softmaxed over those k give the experts
    e_j and weights g_j; K, V per K/V head with RoPE (half layout, θ rope_theta) on K; for each chosen expert, each
    of its heads i: q = RoPE(x·W_q[e_j] head i) attends causally (scale 1/√d_h) to K/V head i of the tokens ≤ t; its
    heads' output o_j through W_o[e_j]; y = Σ_j g_j·(o_j·W_o[e_j]) + b. Returns (y (B, T, d), the keys and values
    kept, for a later call)."""
    B, T, d = x.shape
    h, dh = n_kv_heads, head_dim
    y = np.zeros((B, T, d))
    kept = [([], []) if past is None else (list(past[b][0]), list(past[b][1])) for b in range(B)]
    for b in range(B):
        keys, values = kept[b]
        start = len(keys)
        for t in range(T):
            vec, pos = x[b, t], start + t
            logits = linear_vec(vec, weights["moa_router"], None)
            chosen = _largest(list(logits), top_k)
            gates = softmax_list([logits[e] for e in chosen])
            k_all, v_all = linear_vec(vec, weights["w_k"], None), linear_vec(vec, weights["w_v"], None)
            keys.append([rope_vec(k_all[i * dh:(i + 1) * dh], pos, 1.0, rope_theta) for i in range(h)])
            values.append([np.array(v_all[i * dh:(i + 1) * dh]) for i in range(h)])
            out = np.array(weights["moa_bias"], dtype=np.float64)
            for e, g in zip(chosen, gates):
                q_all = linear_vec(vec, weights["attn_experts.%d.w_q" % e], None)
                heads = []
                for i in range(h):
                    q = rope_vec(q_all[i * dh:(i + 1) * dh], pos, 1.0, rope_theta)
                    scores = [float(np.dot(q, keys[s][i])) / math.sqrt(dh) for s in range(len(keys))]
                    p = softmax_list(scores)
                    heads += [sum(p[s] * values[s][i][c] for s in range(len(keys))) for c in range(dh)]
                out = out + g * np.array(linear_vec(heads, weights["attn_experts.%d.w_o" % e], None))
            y[b, t] = out
    return y, kept


def differential_attention(n_heads, n_kv_heads, head_dim, rope_theta, lambda_init, eps, weights, x):
    """Differential attention as the Differential Transformer paper writes it (§2.1: the difference of two softmax
    maps times the values, each head normalised, times 1 − λ_init), in DiffLlama's grouping, one query, one head, one
    number at a time; not blockcli's code. `weights`: w_q (d, h·d_h), w_k, w_v (d, h_kv·d_h), b_q, b_k, b_v, w_o
    (h·d_h, d), b_o (any may be absent: no bias), lambda_q1, lambda_k1, lambda_q2, lambda_k2 (d_h,). x (B, T, d). RoPE
    (half layout, θ rope_theta) on Q and K; query head i reads K head i // (h/h_kv); pair p < h/2 is the query heads p
    and p + h/2, reading the values [V_j | V_(j + h_kv/2)] of j = p // (h/h_kv); its output (A_p − λ·A_(p+h/2))·[V | V']
    is RMS-normalised over its 2·d_h (eps, no scale), times 1 − λ_init; the pairs in order through W_O."""
    B, T, d = x.shape
    h, hk, dh = n_heads, n_kv_heads, head_dim
    g = h // hk
    lam = (math.exp(float(np.dot(weights["lambda_q1"], weights["lambda_k1"])))
           - math.exp(float(np.dot(weights["lambda_q2"], weights["lambda_k2"]))) + lambda_init)
    y = np.zeros((B, T, d))
    for b in range(B):
        q_rows, k_rows, v_rows = [], [], []
        for t in range(T):
            vec = x[b, t]
            q = linear_vec(vec, weights["w_q"], weights.get("b_q"))
            k = linear_vec(vec, weights["w_k"], weights.get("b_k"))
            v = linear_vec(vec, weights["w_v"], weights.get("b_v"))
            q_rows.append([rope_vec(q[i * dh:(i + 1) * dh], t, 1.0, rope_theta) for i in range(h)])
            k_rows.append([rope_vec(k[j * dh:(j + 1) * dh], t, 1.0, rope_theta) for j in range(hk)])
            v_rows.append([np.array(v[j * dh:(j + 1) * dh]) for j in range(hk)])
        for t in range(T):
            out = []
            for p in range(h // 2):
                j = p // g
                both = [list(v_rows[s][j]) + list(v_rows[s][j + hk // 2]) for s in range(t + 1)]
                maps = []
                for i in (p, p + h // 2):
                    scores = [float(np.dot(q_rows[t][i], k_rows[s][i // g])) / math.sqrt(dh) for s in range(t + 1)]
                    maps.append(softmax_list(scores))
                o = [sum((maps[0][s] - lam * maps[1][s]) * both[s][c] for s in range(t + 1)) for c in range(2 * dh)]
                rms = math.sqrt(sum(e * e for e in o) / len(o) + eps)
                out += [(1 - lambda_init) * e / rms for e in o]
            y[b, t] = linear_vec(out, weights["w_o"], weights.get("b_o"))
    return y
