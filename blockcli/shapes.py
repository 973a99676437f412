"""The parameter shapes every layer declares, from the config alone (no NumPy, nothing allocated).

`count` reconciles its closed-form formula against these for configs too large to build, and
`block` creates exactly these arrays. Weight matrices are (in, out): y = x @ W + b.
"""

from __future__ import annotations

from blockcli.config import BlockConfig, Config, projected_width

Shape = tuple[int, ...]


def norm_shapes(prefix: str, d: int, cfg: BlockConfig) -> dict[str, Shape]:
    shapes: dict[str, Shape] = {f"{prefix}_gamma": (d,)} if cfg.norm_scale else {}
    if cfg.bias.norm:
        shapes[f"{prefix}_beta"] = (d,)
    return shapes


def attention_shapes(cfg: BlockConfig) -> dict[str, Shape]:
    d, q_width, kv_width = cfg.d_model, cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    shapes: dict[str, Shape] = {}
    for name, width in (("q", q_width), ("k", kv_width), ("v", kv_width)):
        shapes[f"w_{name}"] = (d, width)
        if cfg.bias.qkv:
            shapes[f"b_{name}"] = (width,)
    shapes["w_o"] = (q_width, d)
    if cfg.bias.out:
        shapes["b_o"] = (d,)
    if cfg.qk_norm != "none":  # over each head's d_h, or over the whole projection
        per_head = cfg.qk_norm == "head"
        shapes.update(norm_shapes("q_norm", cfg.head_dim if per_head else q_width, cfg))
        shapes.update(norm_shapes("k_norm", cfg.head_dim if per_head else kv_width, cfg))
    return shapes


def mlp_shapes(cfg: BlockConfig) -> dict[str, Shape]:
    d, d_ff = cfg.d_model, cfg.d_ff
    shapes: dict[str, Shape] = {"w_1": (d, d_ff)}
    if cfg.bias.mlp:
        shapes["b_1"] = (d_ff,)
    if cfg.gated:
        shapes["w_3"] = (d, d_ff)
        if cfg.bias.mlp:
            shapes["b_3"] = (d_ff,)
    shapes["w_2"] = (d_ff, d)
    if cfg.bias.mlp:
        shapes["b_2"] = (d,)
    return shapes


def block_parameter_shapes(cfg: BlockConfig) -> dict[str, Shape]:
    """Every parameter of one block, in forward order: ln1, attention, ln2 (none when the norm is
    shared), MLP."""
    ln2 = {} if cfg.shared_norm else norm_shapes("ln2", cfg.d_model, cfg)
    return {**norm_shapes("ln1", cfg.d_model, cfg), **attention_shapes(cfg), **ln2, **mlp_shapes(cfg)}


def model_parameter_shapes(config: Config) -> dict[str, Shape]:
    """Every parameter of the model: embeddings, blocks.{i}.*, final norm, LM head."""
    model, block = config.model, config.block
    assert model is not None
    d, e = block.d_model, projected_width(model, block.d_model)
    shapes: dict[str, Shape] = {"wte": (model.vocab_size, e or d)}
    if e:  # OPT-350m: embeddings e wide, projected in to d before the positions are added
        shapes["proj_in"] = (e, d)
    if model.positions == "learned":
        shapes["wpe"] = (model.max_positions + model.position_offset, d)
    if model.embedding_norm:
        shapes.update(norm_shapes("emb_ln", d, block))
    for i in range(model.n_layers):
        shapes.update({f"blocks.{i}.{k}": s for k, s in block_parameter_shapes(block).items()})
    if model.final_norm:
        shapes.update(norm_shapes("ln_f", d, block))
    if e:  # and projected out to e after the final norm
        shapes["proj_out"] = (d, e)
    if not model.tie_embeddings:
        shapes["lm_head"] = (e or d, model.vocab_size)
    if model.lm_head_bias:
        shapes["lm_head_bias"] = (model.vocab_size,)
    return shapes
