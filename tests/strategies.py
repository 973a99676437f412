"""Hypothesis strategies for random valid block configs, across every variant the schema allows."""

from hypothesis import strategies as st

from blockcli.activations import ACTIVATIONS, SPELLINGS


@st.composite
def block_mappings(draw, max_heads: int = 4, max_head_dim: int = 6):
    n_kv = draw(st.integers(1, max_heads))
    n_heads = n_kv * draw(st.integers(1, max(1, max_heads // n_kv)))
    rope = draw(st.sampled_from([False, True, 0.5]))
    head_dim = draw(st.integers(1, max_head_dim)) * (2 if rope else 1)
    explicit = draw(st.booleans())
    block = {
        "d_model": draw(st.integers(2, 24)) if explicit else n_heads * head_dim,
        "n_heads": n_heads,
        "n_kv_heads": n_kv,
        "d_ff": draw(st.integers(1, 40)),
        "norm": draw(st.sampled_from(["layernorm", "rmsnorm"])),
        "activation": draw(st.sampled_from(SPELLINGS)),
        "placement": draw(st.sampled_from(["pre", "post", "parallel", "post_branch", "parallel_shared", "sandwich",
                                           "normed_residual"])),
        "rope": rope,
        "bias": draw(st.one_of(st.booleans(), st.fixed_dictionaries(
            {g: st.booleans() for g in ("qkv", "out", "mlp", "norm", "qk_norm")}))),  # qk_norm: the q/k norms' shift
        "sliding_window": draw(st.sampled_from([0, 0, 1, 2, 3])),
        "norm_unit_offset": draw(st.booleans()),
        "qk_norm": draw(st.sampled_from(["none", "none", "head", "projection", "each_head"])),
        "attention_scale": draw(st.sampled_from([0.0, 0.0, 0.7])),
        "residual_multiplier": draw(st.sampled_from([1.0, 1.0, 0.7, 1.3])),
        "attention_softcap": draw(st.sampled_from([0.0, 0.0, 0.5, 3.0])),
        "norm_scale": draw(st.sampled_from([True, True, False])),
        "clip_qkv": draw(st.sampled_from([0.0, 0.0, 0.5])),
        "attention_sinks": draw(st.sampled_from([False, False, True])),
    }
    block["norm_eps"] = draw(st.sampled_from([1e-5, 1e-5, 1e-6, 0.05]))
    if rope:
        block["rope_theta"] = draw(st.sampled_from([10000.0, 10000.0, 100.0, 5e5]))
        # the scalings whose frequencies do not depend on the pass's length (dynamic and longrope do: a decode
        # step and the full pass then differ, as in transformers)
        block["rope_scaling"] = draw(st.sampled_from([None, None, {"type": "linear", "factor": 2.5}, {
            "type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_positions": 4}, {"type": "yarn", "factor": 4.0, "original_max_positions": 3}]))
        if block["qk_norm"] == "head":  # HunYuan: each head normalised after RoPE, not before
            block["qk_norm_after_rope"] = draw(st.booleans())
    if block["clip_qkv"] and block["qk_norm"] == "projection":  # OLMoE: the clamp after the q/k norms
        block["clip_after_qk_norm"] = draw(st.booleans())
    if draw(st.integers(0, 3)) == 0:  # Ministral 3: query t times 1 + β·ln(1 + ⌊t / L⌋), for short L a step often
        block.update(query_scale=draw(st.sampled_from([0.1, 0.7])), query_scale_length=draw(st.integers(1, 3)),
                     query_scale_form=draw(st.sampled_from(["log", "log", "power"])))  # Beam: (1 + t / L)^β
    if draw(st.integers(0, 3)) == 0:  # MiMo-V2-Flash: values of their own width, times a constant
        block.update(v_head_dim=draw(st.integers(1, 5)), value_scale=draw(st.sampled_from([1.0, 0.6, 1.7])))
    if block["placement"] in ("pre", "normed_residual", "sandwich") and draw(st.integers(0, 3)) == 0:
        block.update({k: draw(st.sampled_from([1.0, 0.6, 1.3])) for k in  # MiniMax's and Beam's residual scales
                      ("attn_skip_scale", "attn_branch_scale", "mlp_skip_scale", "mlp_branch_scale")})
    if block["activation"] in ACTIVATIONS and not ACTIVATIONS[block["activation"]].gated_only:
        block["gated"] = draw(st.booleans())  # any function in a gated MLP as well as in a plain one
    if block["activation"] == "clamped_swiglu":  # a limit that binds often, and one that rarely does
        block.update(swiglu_limit=draw(st.sampled_from([0.3, 7.0])), swiglu_alpha=draw(st.sampled_from([1.702, 0.8])))
    if not rope and not block["attention_softcap"]:  # ALiBi with a soft cap is refused (no reference order)
        block["alibi"] = draw(st.sampled_from([False, False, True]))
    if rope:
        block["rope_layout"] = draw(st.sampled_from(["half", "interleaved"]))
    if explicit:
        block["head_dim"] = head_dim
    if rope == 0.5 and head_dim < 4:
        block["rope"] = True
    if rope and draw(st.integers(0, 3)) == 0:  # multi-head latent attention (DeepSeek) in a quarter of RoPE blocks
        block["mla"] = {"kv_lora_rank": draw(st.integers(1, 6)), "q_lora_rank": draw(st.integers(0, 5)),
                        "qk_nope_head_dim": draw(st.integers(1, 4)), "qk_rope_head_dim": draw(st.sampled_from([2, 4])),
                        "v_head_dim": draw(st.integers(1, 5))}
        block.update(rope=True, n_kv_heads=n_heads, qk_norm="none", attention_scale=0.0, norm_scale=True, clip_qkv=0.0,
                     attention_softcap=0.0, attention_sinks=False, query_scale=0.0, query_scale_length=0,
                     qk_norm_after_rope=False, clip_after_qk_norm=False)
        block.pop("query_scale_form", None), block.pop("v_head_dim", None), block.pop("value_scale", None)
        block.pop("head_dim", None)
        if not explicit:
            block["d_model"] = draw(st.integers(2, 24))
    return block


@st.composite
def moe_mappings(draw):
    """A random valid block whose MLP is a mixture of experts, in any routing variant."""
    block = draw(block_mappings())
    if block["activation"] == "xielu":  # its learned scalars are a dense MLP's (Apertus): refused with experts
        block["activation"] = "relu2"
    block["bias"] = {"qkv": draw(st.booleans()), "out": draw(st.booleans()), "mlp": draw(st.booleans()),
                     "norm": draw(st.booleans())}
    if block["norm"] == "rmsnorm":
        # an RMSNorm with a shift is read two ways by tests/reference.py (its rms_beta ambiguity), and its q/k and
        # latent norms differ between them, dense blocks included: not a question for the mixture
        block["bias"]["norm"] = False
    n_groups = draw(st.sampled_from([1, 1, 2, 3]))
    per_group = draw(st.integers(1, 3))
    if n_groups > 1 and draw(st.booleans()):
        per_group = max(2, per_group)
        group_score = "top2_sum"
    else:
        group_score = "max"
    n_experts = n_groups * per_group
    top_groups = draw(st.integers(1, n_groups))
    top_k = draw(st.integers(1, top_groups * per_group))
    moe = {"n_experts": n_experts, "top_k": top_k, "d_expert": draw(st.integers(1, 12)),
           "renormalize": draw(st.booleans()), "routed_scaling": draw(st.sampled_from([1.0, 1.0, 2.5])),
           "logit_bias": draw(st.booleans())}
    if n_groups == 1 and draw(st.booleans()):
        moe["order"] = draw(st.sampled_from(["softmax_topk", "topk_softmax"]))
    if moe.get("order") != "topk_softmax":
        moe.update(n_groups=n_groups, top_groups=top_groups, group_score=group_score,
                   scoring=draw(st.sampled_from(["softmax", "sigmoid"])), selection_bias=draw(st.booleans()))
    d_shared = draw(st.sampled_from([0, 0, 5]))
    if d_shared:
        moe.update(d_shared=d_shared, shared_gate=draw(st.booleans()))
    block["moe"] = moe
    return block
