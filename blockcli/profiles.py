"""What a training step keeps for its backward pass, as each real implementation keeps it (`count --train --attention`).

Four profiles of the same layer, term by term (`sizing.Term`: a name, its size in the shape symbols, bytes):

- `megatron` (the default, `sizing.activation_terms`): Korthikanti et al. 2022's terms, the tensors Megatron-LM's
  GPT layer keeps, adapted to blockcli's variants. Its tensor- and pipeline-parallel split is theirs.
- `eager`: transformers' eager attention, as PyTorch's autograd keeps it. Q·Kᵀ and weights·V are batched
  matrix products, which keep contiguous copies of their operands: Q, K and V at h heads (`repeat_kv` expands a
  GQA model's K and V first), the float32 softmax output (and, at 16 bits, the copy weights·V reads), and under
  an attention soft-cap the tanh output, a second T×T table.
- `sdpa`: `torch.nn.functional.scaled_dot_product_attention` with a fused kernel (flash or memory-efficient):
  Q, K and V as they were passed (K and V at h_kv heads when transformers passes `enable_gqa`, i.e. with no
  mask; views of the projection's output where no RoPE or norm made new arrays), the output and the float32
  log-sum-exp per row; no T×T table. transformers refuses SDPA under an attention soft-cap (Gemma 2).
- `blockcli`: blockcli's own backward (`blockcli.saved`, the closed form of what its Tape keeps).

Around attention, the eager and sdpa profiles count what transformers' modules keep: a LayerNorm its input and
the float32 mean and 1/σ per row; an RMSNorm its input (a float32 copy at 16 bits), the float32 1/rms, and the
normalised tensor γ multiplies (Gemma's (1 + γ) too, d floats); a linear layer its input (a norm's output, a
product); an MLP the activation's saves (its input, its output for ReLU, and the four temporaries of GPT-2's
`gelu_new`, written out in Python), and a gated one the activation's output, the up branch and their product;
transformers 5's mixture of experts (`grouped_mm`, its default experts path) the router's float32
probabilities, the chosen weights, their sum and indices, the k·B·T rows gathered for the experts, their
gate/up output, activation and product, the outputs before weighting and three int64 index arrays (the sort's
permutation, its inverse, and the rows' tokens); the model the token ids, the positions a learned table reads,
RoPE's cos and sin (one (T, d_rot) pair shared by every layer), the final norm's saves, the LM head's input,
the final-logit soft-cap's tanh output (a second B·T·V table), the float32 log-softmax the loss keeps, and the
shifted labels. Measured: tests/fixtures/saved (one real step of transformers 5 on this machine).
"""

from __future__ import annotations

from blockcli.activations import function_of
from blockcli.config import BlockConfig, Config, InputError

PROFILES = ("megatron", "eager", "sdpa", "blockcli")
F32, I64, I32 = 4, 8, 4  # float32 statistics and tables; int64 ids and indices; grouped_mm's int32 offsets
# transformers' activations written out in Python: the temporaries their backward keeps beyond the output
# (NewGELUActivation: x, 0.5·x, tanh(·), 1 + tanh(·)); the families whose config names them by default
PYTHON_ACTIVATIONS = {"gelu_tanh": (("gpt2", "gptj", "phi", "codegen"), 4)}
# XIELUActivation in Python (its CUDA kernel is for CUDA alone) keeps x, α_p·x, expm1(min(x, ε)) and expm1(·) − x, the
# x > 0 mask of its torch.where (bool), and its two softplus'd scalars α_p and α_n (measured: tests/fixtures/saved)
XIELU_KEEPS = 4


def check(attention: str, config: Config, recompute: str) -> None:
    """Refuse what a profile cannot describe: one line naming the option (exit 2)."""
    if attention not in PROFILES:
        raise InputError(f"--attention: expected one of {', '.join(PROFILES)}, got {attention!r}")
    if attention == "megatron":
        return
    if recompute == "selective":
        raise InputError(f"--recompute selective is Megatron's (the T×T tables recomputed from the kept Q and K); "
                         f"with --attention {attention} use none or full (gradient checkpointing)")
    b = config.block
    blocks = [config.layer_block(i) for i in range(config.model.n_layers)] if config.model else [b]
    if attention == "sdpa" and any(x.attention_softcap for x in blocks):
        raise InputError("--attention sdpa: transformers refuses SDPA under an attention soft-cap "
                         "(attn_logit_softcapping); use --attention eager")
    if attention in ("eager", "sdpa") and any(x.sub_norms for x in blocks):
        raise InputError(f"--attention {attention}: what transformers keeps for BitNet's norms before W_O and W_down "
                         f"(block.sub_norms) is not modelled; use --attention megatron or blockcli")
    if attention == "blockcli":
        if recompute != "none":
            raise InputError("--attention blockcli: blockcli's backward keeps every layer's tensors; --recompute "
                             "is not modelled for it")
        if any(x.moe is not None or x.mla is not None or (x.clip_qkv and x.qk_norm != "none") for x in blocks):
            raise InputError("--attention blockcli: no closed form of blockcli's saves for latent attention or a "
                             "mixture of experts (trace --backward measures them)")


def _term(name: str, formula: str, size: int, sequence: bool = False) -> tuple[str, str, int, bool]:
    """One kept tensor: (name, size in the shape symbols, bytes, d wide a row per token); sizing.Term's fields."""
    return name, formula, size, sequence


def layer_terms(block: BlockConfig, T: int, B: int, precision: str, attention: str, recompute: str,
                model_type: str = "", fused_qkv: bool = False) -> list:
    """The tensors one layer keeps for its backward under transformers' `attention` ("eager" or "sdpa"),
    B sequences of T tokens; with full recomputation (gradient checkpointing) its input alone. `model_type`:
    the family whose modules run (GPT-2's gelu_new is Python); `fused_qkv`: Q, K and V come from one product
    (GPT-2's c_attn), so SDPA's views of them keep its whole output."""
    beta = 2 if precision == "mixed" else 4
    n = B * T  # rows
    u = f"{beta}·s·b"
    act = lambda w: beta * n * w  # noqa: E731  # a (B, T, w) activation at the training dtype
    f32 = lambda w: F32 * n * w  # noqa: E731  # float32, whatever the training dtype
    d = block.d_model
    if recompute == "full":
        return [_term("layer input (the checkpoint; the layer's saves exist again only during its backward)",
                      f"{u}·d", act(d), True)]
    terms: list = []
    add = lambda name, formula, size, seq=False: terms.append(_term(name, formula, size, seq))  # noqa: E731

    def norm(label: str, read: bool, width: int = d, w: str = "d", whole: int = 0) -> None:
        """A norm's saves; `read`: a product reads its output; `whole`: its input is a view of a wider
        storage (MLA's K/V latent beside the RoPE key), counted at that width."""
        stored, sw = (whole, f"({w} + d_rope)") if whole else (width, w)
        if block.norm == "layernorm":
            add(f"{label}: its input", f"{u}·{sw}", act(stored), width == d)
            add(f"{label}: mean and 1/σ (float32)", "2·4·s·b", f32(2))
            if read:
                add(f"{label}: its output (the next product's input)", f"{u}·{w}", act(width), width == d)
            return
        add(f"{label}: its input" + (" (a float32 copy)" if beta != 4 else ""), f"4·s·b·{sw}", f32(stored),
            width == d)
        add(f"{label}: 1/rms (float32)", "4·s·b", f32(1))
        if block.norm_scale:
            if block.norm_unit_offset:  # Gemma: float32 throughout, then (1 + γ) as a float32 vector of its own
                add(f"{label}: the normalised tensor (float32) and (1 + γ)", f"4·s·b·{w} + 4·{w}",
                    f32(width) + F32 * width, width == d)
            else:
                add(f"{label}: the normalised tensor γ multiplies", f"{u}·{w}", act(width), width == d)
        if read:
            add(f"{label}: its output (the next product's input)", f"{u}·{w}", act(width), width == d)

    placement = block.placement
    parallel = placement in ("parallel", "parallel_shared")
    norm("norm 1" if not parallel or placement == "parallel" else "the shared norm", True)
    if placement == "parallel":  # a second norm of the same x: its input is already kept
        if block.norm == "layernorm":
            add("norm 2: mean and 1/σ (float32)", "2·4·s·b", f32(2))
        else:
            add("norm 2: 1/rms (float32)", "4·s·b", f32(1))
        add("norm 2: its output (the MLP's input)", f"{u}·d", act(d), True)
    _attention(block, T, B, beta, attention, add, norm, fused_qkv)
    if block.sandwich:
        norm("norm of the attention output", False)
    if not parallel:
        norm("norm 2", True)
    if block.moe is not None:
        _experts(block, B, T, beta, add, model_type)
    else:
        _mlp(block, block.d_ff, "d_ff", beta, n, add, model_type, "MLP")
    if block.sandwich:
        norm("norm of the MLP output", False)
    return terms


def _attention(block: BlockConfig, T: int, B: int, beta: int, attention: str, add, norm, fused: bool) -> None:
    n = B * T
    u = f"{beta}·s·b"
    act = lambda w: beta * n * w  # noqa: E731
    h, h_kv, d_h = block.n_heads, block.n_kv_heads, block.head_dim
    table = B * h * T * T
    mla = block.mla
    if mla is not None:  # latent attention: the latents' norms, then Q and K at d_qk, V at d_v per head
        if mla.q_lora_rank:
            norm("Q latent's norm", True, mla.q_lora_rank, "r_q")
        norm("K/V latent's norm", True, mla.kv_lora_rank, "r_kv", mla.kv_lora_rank + mla.qk_rope_head_dim)
        d_qk, d_v = mla.qk_head_dim, mla.v_head_dim
        add("Q = [Q_nope | Q_rope] (a new array)", f"{u}·h·d_qk", act(h * d_qk))
        add("K = [K_nope | k_rope expanded] (a new array)", f"{u}·h·d_qk", act(h * d_qk))
        if attention == "eager":
            _tables(block, beta, table, add)
            add("V (weights·V's contiguous copy)", f"{u}·h·d_v", act(h * d_v))
        else:
            add("K_nope and V: the K/V up-projection's output (V is a view of it)", f"{u}·h·(d_nope + d_v)",
                act(h * (mla.qk_nope_head_dim + d_v)))
            _sdpa_rest(h, d_v, "d_v", beta, n, add)
            return
        add("attention output (the output projection's input)", f"{u}·h·d_v", act(h * d_v))
        return
    new_qk = bool(block.rope or block.qk_norm != "none" or block.clip_qkv)
    if block.qk_norm != "none":  # an RMSNorm of Q and of K before RoPE: their projections' outputs are its inputs
        per_head = block.qk_norm in ("head", "each_head", "head_unscaled")
        add("q/k norm: its inputs (Q and K before it)", f"{u}·(h + h_kv)·d_h", act((h + h_kv) * d_h))
        add("q/k norm: 1/rms (float32)", "4·s·b·" + ("(h + h_kv)" if per_head else "2"),
            F32 * n * ((h + h_kv) if per_head else 2))
        add("q/k norm: the normalised Q and K", f"{u}·(h + h_kv)·d_h", act((h + h_kv) * d_h))
    if attention == "eager":
        add("Q (" + ("a new array: RoPE's output" if new_qk else "the score product's contiguous copy") + ")",
            f"{u}·h·d_h", act(h * d_h))
        add("K, expanded to h heads (repeat_kv)" if h_kv < h else "K (the score product's operand)",
            f"{u}·h·d_h", act(h * d_h))
        _tables(block, beta, table, add)
        add("V, expanded to h heads (repeat_kv)" if h_kv < h else "V (weights·V's contiguous copy)",
            f"{u}·h·d_h", act(h * d_h))
        add("attention output (the output projection's input)", f"{u}·h·d_h", act(h * d_h))
        return
    masked = 0 < block.sliding_window < T or block.alibi  # a mask is passed: no enable_gqa, K and V expanded
    kv_heads, kv_sym = (h, "h") if masked and h_kv < h else (h_kv, "h_kv")
    views = []  # the projection outputs Q, K, V are views of
    if new_qk:
        add("Q (a new array: " + ("RoPE's" if block.rope else "the norm's or clamp's") + " output)",
            f"{u}·h·d_h", act(h * d_h))
        add(f"K (a new array) at {kv_sym} heads", f"{u}·{kv_sym}·d_h", act(kv_heads * d_h))
    else:
        views += ["Q", "K"]
    if block.clip_qkv or kv_heads != h_kv:
        add(f"V (a new array) at {kv_sym} heads", f"{u}·{kv_sym}·d_h", act(kv_heads * d_h))
    else:
        views.append("V")
    if views and fused:
        add(f"the fused Q/K/V product's output ({', '.join(views)} are views of it)", f"{u}·(h + 2·h_kv)·d_h",
            act((h + 2 * h_kv) * d_h))
    elif views:
        widths = {"Q": h, "K": h_kv, "V": h_kv}
        add(f"{', '.join(views)}: the projections' outputs (views)",
            f"{u}·(" + " + ".join({'Q': 'h', 'K': 'h_kv', 'V': 'h_kv'}[v] for v in views) + ")·d_h",
            act(sum(widths[v] for v in views) * d_h))
    _sdpa_rest(h, d_h, "d_h", beta, n, add)


def _sdpa_rest(h: int, d_v: int, sym: str, beta: int, n: int, add) -> None:
    add("attention output (the kernel's, and the output projection's input)", f"{beta}·s·b·h·{sym}", beta * n * h * d_v)
    add("log-sum-exp per row and head (float32)", "4·s·b·h", F32 * n * h)


def _tables(block: BlockConfig, beta: int, table: int, add) -> None:
    if block.attention_softcap:
        add("soft-capped scores: tanh's output", f"{beta}·b·h·s²", beta * table)
    add("softmax output (float32)", "4·b·h·s²", F32 * table)
    if beta != 4:
        add("softmax output cast back (weights·V's operand)", f"{beta}·b·h·s²", beta * table)


def _activation_saves(block: BlockConfig, model_type: str) -> tuple[int, str]:
    """The d_ff-wide arrays the activation itself keeps beyond its output, and which."""
    row = function_of(block.activation)
    python = PYTHON_ACTIVATIONS.get(row.name)
    if python and model_type in python[0]:
        return python[1], f"{row.name} in Python (transformers' gelu_new): x, 0.5·x, tanh(·), 1 + tanh(·)"
    if row.name == "xielu":
        return XIELU_KEEPS, "xielu in Python (transformers' XIELUActivation): x, α_p·x, expm1(min(x, ε)), expm1(·) − x"
    if row.saves == "input":
        return 1, f"{row.name}'s input"
    return 0, ""  # its output (ReLU, sigmoid, tanh) or nothing (the identity)


def _mlp(block: BlockConfig, width: int, sym: str, beta: int, n: int, add, model_type: str, label: str) -> None:
    u = f"{beta}·s·b"
    keeps, what = _activation_saves(block, model_type)
    row = function_of(block.activation)
    if keeps:
        add(f"{label}: {what}", f"{keeps}·{u}·{sym}", keeps * beta * n * width)
    if row.name == "xielu":  # its torch.where's mask, a byte per element, and α_p, α_n
        add(f"{label}: xielu's x > 0 mask (bool)", f"s·b·{sym}", n * width)
        add(f"{label}: xielu's α_p and α_n", f"2·{beta}", 2 * beta)
    if block.gated:
        add(f"{label}: the activated gate, the up branch and their product (the down projection's input)",
            f"3·{u}·{sym}", 3 * beta * n * width)
    else:
        add(f"{label}: the activation's output (the down projection's input)", f"{u}·{sym}", beta * n * width)


def _experts(block: BlockConfig, B: int, T: int, beta: int, add, model_type: str) -> None:
    moe = block.moe
    n = B * T
    d, E, k, d_e = block.d_model, moe.n_experts, moe.top_k, moe.d_expert
    u = f"{beta}·s·b"
    if moe.scoring == "sigmoid" and beta != 4:  # DeepSeek's router runs in float32: a float32 copy of its input
        add("router: its input's float32 copy", "4·s·b·d", F32 * n * d)
    add("router: " + ("sigmoid scores" if moe.scoring == "sigmoid" else "softmax probabilities") + " (float32)",
        "4·s·b·E", F32 * n * E)
    if moe.scoring == "sigmoid" or moe.n_groups > 1:  # transformers' group-limited routing (DeepSeek-V3's code)
        per_group = 2 if moe.group_score == "top2_sum" else 1
        add("router: each group's best indices, the chosen groups, the experts' mask (bool)",
            f"8·s·b·({per_group}·n_group + topk_group) + s·b·E",
            I64 * n * (per_group * moe.n_groups + moe.top_groups) + n * E)
    add("router: the k chosen weights (float32)" + (" and their sum" if moe.renormalize else ""),
        "4·s·b·(k" + (" + 1)" if moe.renormalize else ")"), F32 * n * (k + (1 if moe.renormalize else 0)))
    add("router: the k chosen experts' indices, and the rows' sort, inverse and token indices (int64)",
        "8·s·b·4k", I64 * n * 4 * k)
    add("experts: the k·s·b rows gathered for them", f"{u}·k·d", beta * n * k * d)
    keeps, what = _activation_saves(block, model_type)
    rows = beta * n * k * d_e
    if block.gated:
        add("experts: the gate/up output (the activation's input and the up branch are views of it)",
            f"2·{u}·k·d_e", 2 * rows)
        add("experts: the activated gate and its product with up (the down projection's input)", f"2·{u}·k·d_e",
            2 * rows)
    else:
        add("experts: " + (what if keeps else "the up output") + " and the activation's output", f"2·{u}·k·d_e",
            2 * rows)
    add("experts: their outputs before weighting", f"{u}·k·d", beta * n * k * d)
    add("experts: each row's weight (float32)", "4·s·b·k", F32 * n * k)
    add("experts: grouped_mm's offsets (int32)", "4·E", I32 * E)
    if moe.d_shared:
        _mlp(block, moe.d_shared, "d_s", beta, n, add, model_type, "shared expert")
        if moe.shared_gate:
            add("shared expert: its gate's input and sigmoid output", f"{u}·(d + 1)", beta * n * (d + 1))


def head_terms(config: Config, T: int, B: int, precision: str) -> list:
    """Outside the layers, under transformers: ids, positions, RoPE's tables, the final norm, the head's input,
    the final soft-cap's table, the loss's float32 log-softmax and labels."""
    m = config.model
    if m is None:
        return []
    beta = 2 if precision == "mixed" else 4
    n = B * T
    b = config.block
    d, V = b.d_model, m.vocab_size
    terms = [_term("token ids (int64)", "8·s·b", I64 * n)]
    if m.positions == "learned":
        terms.append(_term("position ids of the learned table (int64, one row for the batch)", "8·s", I64 * T))
    # (latent attention without rotary positions, Kimi-Linear's NoPE, has no tables)
    rotated = (b.mla.qk_rope_head_dim if b.rope else 0) if b.mla is not None else round(b.rope * b.head_dim)
    if rotated:  # cos and sin at their full width (a latent model's kernel reads half of each)
        terms.append(_term("RoPE's cos and sin (one pair for every layer)", f"2·{beta}·s·d_rot",
                           2 * (beta if beta != 4 else F32) * T * rotated))
    if m.final_norm:
        if b.norm == "layernorm":
            terms += [_term("final norm: its input", f"{beta}·s·b·d", beta * n * d, True),
                      _term("final norm: mean and 1/σ (float32)", "2·4·s·b", F32 * n * 2)]
        else:
            terms += [_term("final norm: its input" + (" (a float32 copy)" if beta != 4 else ""), "4·s·b·d",
                            F32 * n * d, True),
                      _term("final norm: 1/rms (float32)", "4·s·b", F32 * n)]
            if b.norm_scale:
                terms.append(_term("final norm: the normalised tensor (float32) and (1 + γ)", "4·s·b·d + 4·d",
                                   F32 * n * d + F32 * d, True) if b.norm_unit_offset else
                             _term("final norm: the normalised tensor γ multiplies", f"{beta}·s·b·d", beta * n * d,
                                   True))
    terms.append(_term("LM head input", f"{beta}·s·b·d", beta * n * d, True))
    if m.logit_softcap:
        terms.append(_term("final-logit soft-cap: tanh's output", f"{beta}·s·b·V", beta * n * V))
    terms += [_term("log-softmax of the logits for the loss (float32)", "4·s·b·V", F32 * n * V),
              _term("the shifted labels (int64) and the loss's weight", "8·s·b + 4", I64 * n + F32)]
    return terms

def blockcli_layer(block: BlockConfig, T: int, B: int, precision: str):
    """blockcli's own backward: a layer's saves (`blockcli.saved`, its Tape's closed form), the blocked kernel's."""
    from blockcli.saved import block_saved_bytes

    beta = 2 if precision == "mixed" else 4
    return _term("what blockcli's Tape keeps of a layer: its norms', attention's and MLP's inputs, the Q/K/V "
                 "product, Q and K after RoPE, the attention output, each row's log-sum-exp, the MLP's "
                 "pre-activations", f"{beta}·s·b·(…) (blockcli.saved)", block_saved_bytes(block, B, T, beta))


def blockcli_outside(config: Config, T: int, B: int, precision: str) -> list:
    """What blockcli's backward keeps outside the layers: the ids, the embeddings a projection reads, the final
    norm's input (`blockcli.saved.model_saved_bytes` less its layers')."""
    from blockcli.saved import block_saved_bytes, model_saved_bytes

    if config.model is None:
        return []
    beta = 2 if precision == "mixed" else 4
    layers = sum(block_saved_bytes(config.layer_block(i), B, T, beta) for i in range(config.model.n_layers))
    return [_term("outside the layers: the token ids (int64), the final norm's input", "8·s·b + …",
                  model_saved_bytes(config, B, T, beta) - layers)]


def note(attention: str, config: Config, T: int) -> str:
    """The line that says which implementation the activations describe."""
    if attention == "blockcli":
        return ("activations as blockcli's own backward keeps them (blockcli.saved, equal to its Tape's measured "
                "peak: trace --backward), the blocked kernel's; the float32 logits it never keeps")
    text = {"eager": "transformers' eager attention (batched products keep contiguous copies of Q, K and V at h "
                     "heads, the float32 softmax table and, under a soft-cap, its tanh table)",
            "sdpa": "transformers' SDPA with a fused kernel (Q, K and V as passed, the output, a float32 "
                    "log-sum-exp; no T×T table)"}[attention]
    mla = config.block.mla is not None
    return (f"activations as PyTorch's autograd keeps them under {text}, and transformers' modules around it; "
            "measured against transformers 5 (tests/fixtures/saved)"
            + ("; on a CPU, SDPA with Q/K and V head widths that differ runs its math kernel, which keeps what "
               "eager does" if attention == "sdpa" and mla else ""))
