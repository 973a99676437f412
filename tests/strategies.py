"""Hypothesis strategies for random valid block configs, across every variant the schema allows."""

from hypothesis import strategies as st


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
        "activation": draw(st.sampled_from(["gelu_tanh", "gelu", "relu", "silu", "swiglu", "geglu"])),
        "placement": draw(st.sampled_from(["pre", "post", "parallel", "post_branch", "parallel_shared", "sandwich"])),
        "rope": rope,
        "bias": draw(st.one_of(st.booleans(), st.fixed_dictionaries(
            {g: st.booleans() for g in ("qkv", "out", "mlp", "norm")}))),
        "sliding_window": draw(st.sampled_from([0, 0, 1, 2, 3])),
        "norm_unit_offset": draw(st.booleans()),
        "qk_norm": draw(st.sampled_from(["none", "none", "head", "projection", "each_head"])),
        "attention_scale": draw(st.sampled_from([0.0, 0.0, 0.7])),
        "residual_multiplier": draw(st.sampled_from([1.0, 1.0, 0.7, 1.3])),
        "attention_softcap": draw(st.sampled_from([0.0, 0.0, 0.5, 3.0])),
        "norm_scale": draw(st.sampled_from([True, True, False])),
        "clip_qkv": draw(st.sampled_from([0.0, 0.0, 0.5])),
    }
    if not rope:
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
        block.update(rope=True, n_kv_heads=n_heads, qk_norm="none", attention_scale=0.0, norm_scale=True, clip_qkv=0.0)
        block.pop("head_dim", None)
        if not explicit:
            block["d_model"] = draw(st.integers(2, 24))
    return block
