"""What blockcli's backward keeps from the forward, in closed form: the bytes the `Tape` holds at its peak.

Written from the code's choices, term by term, and held equal to the tape's measured bytes by the tests
(`trace --backward` prints both): a norm keeps its input; attention keeps its input, the Q/K/V GEMM's output
(Q, K and V as attention reads them are views of it, unless RoPE, a q/k norm or the clamp made new arrays),
its output and, blocked, each row's log-sum-exp; an MLP keeps its input and the pre-activation (and the up
branch); the model keeps the token ids (and the narrow embeddings a projection reads) and the last norm's
input; a Gated DeltaNet layer keeps its conv's input and output, the normalised q and k, its gates, the heads'
output and each step's starting state. An array two operations keep (a parallel block's input, read by both
norms) counts once. Korthikanti
et al.'s figure (count --train) assumes Megatron's implementation; this one is blockcli's own.

Latent attention and mixtures of experts keep more (per-expert rows, their indices), and differential attention its
values of both halves and the pairs before and after their norm, whose closed form is not written here:
`block_saved_bytes` returns None for them, and only the measured figure is shown.
"""

from __future__ import annotations

from blockcli.config import BlockConfig, Config

INDEX_BYTES = 8  # int64 token ids


def block_saved_bytes(b: BlockConfig, B: int, T: int, itemsize: int, blocked: bool = True) -> int | None:
    """Bytes one block keeps for its backward on B × T tokens, or None where no closed form is written.
    `blocked`: attention ran the blocked kernel (output and log-sum-exp) rather than the whole table."""
    if b.cross_attention:  # Mllama's, skipped by a text-only pass: the identity keeps nothing
        return 0
    if b.moe is not None or b.mla is not None or b.differential is not None or (b.clip_qkv and b.qk_norm != "none"):
        return None  # (a clamp before a q/k norm: the norm keeps the clamped Q and K too)
    d, h, h_kv, d_h = b.d_model, b.n_heads, b.n_kv_heads, b.head_dim
    act = lambda n: B * T * n * itemsize  # noqa: E731  # a (B, T, n) array
    q_width, kv_width = h * d_h, h_kv * d_h
    v_width, heads_width = h_kv * b.value_dim, h * b.value_dim  # (d_v: d_h but for MiMo-V2-Flash)
    # the block's input, the norms' inputs and attention's and the MLP's: distinct arrays by placement
    distinct = {"pre": 4, "post": 4, "post_branch": 4, "parallel": 3, "parallel_shared": 2, "sandwich": 6,
                "normed_residual": 4}
    total = distinct[b.placement] * act(d)
    total += act(b.d_ff) * (2 if b.gated else 1)  # the MLP's pre-activation (and the up branch)
    if b.linear_attention is not None:  # Gated DeltaNet: q | k | v before and after the conv and its SiLU; q and
        n = b.linear_attention  # k normalised per value head; b, a, g, β; z, the heads' output, W_O's input;
        gates = 4 * n.value_heads  # each step's S. KDA: its decay input and g per key channel, and the two
        if n.per_channel:  # low-rank bottlenecks (d_k, d_v) its backward reads
            gates = 2 * n.value_heads + 2 * n.key_width + n.key_head_dim + n.value_head_dim
        return total + act(3 * n.conv_width + 2 * n.value_heads * n.key_head_dim + gates
                           + 3 * n.value_width + n.value_heads * n.key_head_dim * n.value_head_dim)
    new_qk = bool(b.rope or b.qk_norm != "none" or b.clip_qkv)
    own_v = bool(b.clip_qkv or b.value_scale != 1.0)  # V clamped or scaled: an array of its own
    if not (new_qk and own_v) or b.clip_qkv:  # the Q/K/V GEMM's output, while a view of it (or the clamp) keeps it
        total += act(q_width + kv_width + v_width)
    if new_qk:  # Q and K as attention reads them: arrays of their own
        total += act(q_width + kv_width)
    elif b.query_scale:  # Q scaled by position: an array of its own (K stays a view of the GEMM's output)
        total += act(q_width)
    if b.qk_norm_after_rope and b.rope:  # the q/k norms keep their inputs, the rotated Q and K
        total += act(q_width + kv_width)
    if own_v:  # and V, clamped or scaled (MiMo-V2-Flash)
        total += act(v_width)
    total += act(heads_width)  # attention's output (B, T, h·d_v), which W_O reads
    if b.attention_gate:  # and the gate's pre-activation (one a head: h)
        total += act(b.n_heads if b.gate_per_head else q_width)
    if b.sub_norms:  # BitNet's norm of the heads' output keeps its input, the heads combined (the MLP's recomputes)
        total += act(q_width)
    if blocked:
        total += B * h * T * itemsize  # each row's log-sum-exp
    return total


def model_saved_bytes(config: Config, B: int, T: int, itemsize: int, blocked: bool = True) -> int | None:
    """Bytes a model's backward keeps: every block's (`block_saved_bytes`), the ids, the embeddings a
    projection reads, and the final norm's and the projection out's inputs; None where a block has no closed
    form."""
    m = config.model
    if m is None:
        return block_saved_bytes(config.block, B, T, itemsize, blocked)
    per_block = [block_saved_bytes(config.layer_block(i), B, T, itemsize, blocked) for i in range(m.n_layers)]
    if any(n is None for n in per_block):
        return None
    d = config.block.d_model
    e = m.embedding_dim if m.embedding_dim not in (0, d) else 0
    total = sum(per_block) + B * T * INDEX_BYTES
    total += B * T * e * itemsize if e else 0  # the narrow embeddings project_in reads
    total += B * T * d * itemsize if m.embedding_norm else 0  # the embedding norm's input
    total += B * T * d * itemsize if m.final_norm else 0  # the final norm's input, the last block's output
    total += B * T * d * itemsize if e else 0  # project_out's input
    return total
