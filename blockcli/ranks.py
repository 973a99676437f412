"""Model parallelism: what one device of a tensor-, pipeline-, sequence- and expert-parallel layout holds.

Megatron-LM's layout (Shoeybi et al. 2019; Narayanan et al. 2021; Korthikanti et al. 2022):
- tensor parallelism (tp) splits Q, K, V and the MLP's gate and up by output columns (by heads, by d_ff)
  and W_O and W_down by input rows; their biases follow, except the row-parallel ones (b_o, b_down),
  which every rank holds, as it holds the norms, the router and latent attention's down-projections.
  K/V heads fewer than tp are replicated: each rank holds one, tp / h_kv ranks the same one;
- the vocabulary is padded to a multiple of 128·tp (Megatron's make-vocab-size-divisible-by 128, times tp)
  and the embedding, the LM head and the logits are split over it by rows;
- pipeline parallelism (pp) gives each stage L / pp consecutive layers (vpp chunks of L / (pp·vpp) each,
  round robin, with the interleaved schedule); the first stage holds the embeddings, the last the final
  norm and the LM head (and, tied, a copy of the embedding table for it);
- expert parallelism (ep) gives each rank E / ep of a mixture's routed experts, each split over tp; the
  expert-parallel ranks are data-parallel ranks, so ZeRO partitions the experts' states over dp / ep;
- activations: Korthikanti et al.'s split — what is h_kv-, h- or d_ff-wide is divided by tp, the d-wide
  tensors between the parallel regions (norm inputs and outputs, dropout masks) only with sequence
  parallelism; under 1F1B stage s keeps min(pp − s, m) micro-batches in flight, and the interleaved
  schedule multiplies that by 1 + (pp − 1)/(pp·vpp) (ibid. §4.2.3).
Routing is taken as balanced: each rank's experts receive k/E of the tokens of its expert-parallel group.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from blockcli.config import BlockConfig, Config, InputError, Mamba1, SharedBlock
from blockcli.shapes import (Shape, block_parameter_shapes, is_buffer, outer_shapes, shared_block_shapes,
                             shared_blocks)
from blockcli.sizing import (Dims, StateBytes, activation_terms, head_terms, kv_cache_elements, nbytes,
                             recurrent_elements, states_per_device)

VOCAB_MULTIPLE = 128  # Megatron's --make-vocab-size-divisible-by default (the padded size is a multiple of it times tp)


@dataclass(frozen=True)
class Layout:
    """How the devices are arranged: dp · tp · pp of them in all (ep ranks inside dp)."""

    tp: int = 1
    pp: int = 1
    sp: bool = False
    ep: int = 1
    dp: int = 1
    micro_batches: int = 1  # m: micro-batches per step and pipeline
    vpp: int = 1  # model chunks per pipeline rank (interleaved 1F1B when > 1)

    @property
    def devices(self) -> int:
        return self.dp * self.tp * self.pp

    @property
    def interleave_factor(self) -> float:
        """Korthikanti et al. §4.2.3: the first stage keeps 1 + (pp − 1)/(pp·vpp) times 1F1B's activations."""
        return 1 + (self.pp - 1) / (self.pp * self.vpp) if self.vpp > 1 else 1.0


@dataclass(frozen=True)
class Stage:
    """One pipeline stage's rank (every tp and dp rank of a stage holds the same amount)."""

    index: int
    layers: tuple[int, ...]
    parameters: int  # this rank's shards: its layers' and, on the first/last stage, the embeddings' and head's
    expert_parameters: int  # of which the routed experts' (their states partitioned over dp / ep)
    in_flight: float  # micro-batches whose activations are kept at once (the interleaved factor included)
    layer_activations: int  # one micro-batch's, of this rank's layers
    other_activations: int  # one micro-batch's, outside the layers (the last stage's head)
    kv_cache: int  # inference: this rank's K/V cache for the workload
    states: dict[str, int] = field(default_factory=dict)  # training: weights, gradients, optimizer bytes

    @property
    def activations(self) -> int:
        return math.ceil(self.in_flight * (self.layer_activations + self.other_activations))

    def memory(self, training: bool, weight_bytes: int) -> int:
        """Bytes on the device: model states and activations (training), or weights and K/V cache (inference)."""
        return sum(self.states.values()) + self.activations if training else weight_bytes + self.kv_cache


@dataclass(frozen=True)
class RankPlan:
    layout: Layout
    stages: list[Stage]
    vocab_padded: int
    training: bool
    dtype: str  # inference weights' dtype
    notes: list[str] = field(default_factory=list)

    def weight_bytes(self, stage: Stage) -> int:
        return nbytes(stage.parameters, self.dtype)

    def memory(self, stage: Stage) -> int:
        return stage.memory(self.training, self.weight_bytes(stage))

    @property
    def most_loaded(self) -> Stage:
        return max(self.stages, key=self.memory)

    @property
    def memory_bytes(self) -> int:
        """Of the most loaded rank: what must fit one device."""
        return self.memory(self.most_loaded)


def kv_heads_per_rank(h_kv: int, tp: int) -> int:
    """K/V heads split over tp, or, fewer than tp of them, one per rank (replicated tp / h_kv times)."""
    return h_kv // tp if h_kv >= tp else 1


def check_layout(config: Config, layout: Layout, training: bool = True) -> list[str]:
    """Megatron's argument checks, one line each naming the constraint (InputError); notes for what it adjusts."""
    tp, pp, ep, vpp = layout.tp, layout.pp, layout.ep, layout.vpp
    n_layers = config.model.n_layers if config.model else 1
    notes = []
    if layout.sp and tp == 1:
        notes.append("--sp needs --tp > 1 (Megatron turns sequence parallelism off with one tensor-parallel rank): "
                     "ignored")
    if pp > 1 and config.model is None:
        raise InputError(f"--pp {pp}: a lone block has one layer to place; pipeline parallelism needs a model config")
    if n_layers % (pp * vpp):
        what = f"--pp {pp} × --vpp {vpp} = {pp * vpp}" if vpp > 1 else f"--pp {pp}"
        raise InputError(f"{what} does not divide the {n_layers} layers (each stage holds the same number)")
    if vpp > 1 and pp == 1:
        raise InputError("--vpp interleaves pipeline stages: it needs --pp > 1")
    if vpp > 1 and layout.micro_batches % pp:
        raise InputError(f"--vpp: the interleaved schedule needs --micro-batches ({layout.micro_batches}) to be a "
                         f"multiple of --pp {pp}")
    if training and layout.dp % ep:
        raise InputError(f"--ep {ep} must divide --dp {layout.dp}: expert-parallel ranks are data-parallel ranks")
    groups = config.layer_groups()
    if ep > 1 and all(g.block.moe is None for g in groups):
        raise InputError(f"--ep {ep}: {config.name} has no mixture of experts to split")
    for g in groups:
        b, where = g.block, ("layer " if len(g.layers) == 1 else "layers ") + _span(g.layers)
        if isinstance(b.mamba, Mamba1):  # no attention heads: its channels are split (rank_block)
            if b.mamba.d_inner % tp:
                raise InputError(f"--tp {tp} does not divide the Mamba-1 mixer's mamba.d_inner = {b.mamba.d_inner} "
                                 f"channels ({where})")
        elif b.n_heads % tp:
            raise InputError(f"--tp {tp} does not divide the {b.n_heads} attention heads ({where})")
        elif b.mla is None and b.n_kv_heads % tp and tp % b.n_kv_heads:
            raise InputError(f"--tp {tp}: the {b.n_kv_heads} K/V heads ({where}) can neither be split evenly nor "
                             f"replicated (tp must divide them or be a multiple of them)")
        widths = ([] if b.parts == "mixer" else [("block.d_ff", b.d_ff)] if b.moe is None else
                  [("moe.d_expert", b.moe.d_expert)] + ([("moe.d_shared", b.moe.d_shared)] if b.moe.d_shared else []))
        for name, width in widths:
            if width % tp:
                raise InputError(f"--tp {tp} does not divide {name} = {width} ({where})")
        if b.moe is not None and b.moe.n_experts % ep:
            raise InputError(f"--ep {ep} does not divide the {b.moe.n_experts} routed experts ({where})")
    if tp > 1 and any(g.block.mla is not None for g in groups):
        notes.append("latent attention: its down-projections and their latents are replicated on every "
                     "tensor-parallel rank")
    return notes


def _span(layers: tuple[int, ...]) -> str:
    return f"{layers[0]}" if len(layers) == 1 else f"{layers[0]}-{layers[-1]}"


def rank_block(block: BlockConfig, tp: int) -> BlockConfig:
    """The block as one tensor-parallel rank holds it: h / tp heads, its K/V heads, d_ff / tp (each expert's
    d_e / tp, the shared expert's d_s / tp); d, the norms and the router whole. A Mamba-1 layer: d_in / tp of its
    channels (in_proj and dt_proj by columns, x_proj and out_proj by rows, the conv, A_log and D by channel), Δ's
    rank, the state width and the norms of δ, B, C whole; its attention fields are unused and left as they are."""
    moe, mamba = block.moe, block.mamba
    if block.shared is not None:  # Zamba2: its shared block's heads, K/V heads and MLP split as attention's and the MLP's
        block = replace(block, shared=rank_shared(block.shared, tp))
    if isinstance(mamba, Mamba1):
        return replace(block, mamba=replace(mamba, d_inner=mamba.d_inner // tp),
                       d_ff=block.d_ff if block.parts == "mixer" else block.d_ff // tp,
                       moe=replace(moe, d_expert=moe.d_expert // tp, d_shared=moe.d_shared // tp) if moe else None)
    return replace(block, n_heads=block.n_heads // tp, n_kv_heads=kv_heads_per_rank(block.n_kv_heads, tp),
                   head_dim=block.head_dim, d_ff=block.d_ff // tp,
                   moe=replace(moe, d_expert=moe.d_expert // tp, d_shared=moe.d_shared // tp) if moe else None)


def rank_shared(shared: SharedBlock, tp: int) -> SharedBlock:
    """A shared transformer block (Zamba2) as one tensor-parallel rank holds it: h / tp heads, its K/V heads, d_ff / tp
    (the adapters' rank and the widths d, 2d whole)."""
    return replace(shared, n_heads=shared.n_heads // tp, n_kv_heads=kv_heads_per_rank(shared.n_kv_heads, tp),
                   d_ff=shared.d_ff // tp)


def _shared_parameters(config: Config, tp: int) -> dict[int, int]:
    """Each shared block's weights on one rank (Zamba2), by its index: every stage with a layer using it holds them."""
    d = config.block.d_model
    return {k: sum(math.prod(shape) for shape in shared_block_shapes(rank_shared(s, tp), d).values())
            for k, s in shared_blocks(config).items()}


def _layer_parameters(block: BlockConfig, layout: Layout) -> tuple[int, int]:
    """(parameters, of which routed experts') of one layer on one rank: the rank block's shapes, with E / ep
    of the experts."""
    keep = block.moe.n_experts // layout.ep if block.moe else 0
    total = experts = 0
    for key, shape in block_parameter_shapes(rank_block(block, layout.tp)).items():
        if is_buffer(key):
            continue
        if key.startswith("experts."):
            if int(key.split(".")[1]) >= keep:
                continue
            experts += math.prod(shape)
        total += math.prod(shape)
    return total, experts


def _outer_parameters(config: Config, tp: int, vocab_padded: int) -> tuple[int, int, int]:
    """(first stage's embeddings, last stage's norm and head, the tied head's copy of the table) on one rank."""
    before, after = outer_shapes(config)
    V = config.model.vocab_size

    def size(shape: Shape) -> int:  # a vocabulary-long axis: the padded vocabulary's tp-th part
        return math.prod(vocab_padded // tp if n == V else n for n in shape)

    first = sum(size(s) for k, s in before.items() if not is_buffer(k) and not k.startswith("shared."))
    last = sum(size(s) for k, s in after.items() if not is_buffer(k))
    tied_copy = size(before["wte"]) if config.model.tie_embeddings else 0
    return first, last, tied_copy


def stage_layers(n_layers: int, layout: Layout) -> list[tuple[int, ...]]:
    """Each pipeline rank's layers: consecutive L / pp, or with vpp chunks of L / (pp·vpp), rank r holding
    chunks r, r + pp, r + 2·pp …"""
    chunk = n_layers // (layout.pp * layout.vpp)
    return [tuple(i for c in range(r, layout.pp * layout.vpp, layout.pp) for i in range(c * chunk, (c + 1) * chunk))
            for r in range(layout.pp)]


def _activations(block: BlockConfig, layout: Layout, T: int, B: int, precision: str, recompute: str) -> int:
    """One layer's kept tensors for one micro-batch on one rank: the rank block's, its d-wide ones divided by
    tp under sequence parallelism."""
    sp = layout.sp and layout.tp > 1
    return sum(-(-t.bytes // layout.tp) if sp and t.sequence else t.bytes
               for t in activation_terms(rank_block(block, layout.tp), T, B, precision, recompute))


def _head_activations(config: Config, layout: Layout, T: int, B: int, precision: str, vocab_padded: int) -> int:
    """The last stage's final norm and LM head inputs (split by sp) and its rows of the padded logits."""
    sp = layout.sp and layout.tp > 1
    total = 0
    for t in head_terms(config, T, B, precision):
        if t.sequence:
            total += -(-t.bytes // layout.tp) if sp else t.bytes
        else:  # the float32 logits: B·T rows of vocab_padded / tp columns
            total += t.bytes // config.model.vocab_size * (vocab_padded // layout.tp)
    return total


def _kv_cache(block: BlockConfig, config: Config, layout: Layout, T: int, B: int, kv_bits: int) -> int:
    """One layer's K/V cache bits on one rank: its K/V heads (latent attention: the whole latent); a recurrent
    layer's (Gated DeltaNet, Mamba-2, short conv, lightning) state and conv window, whatever T, split evenly over the
    tensor-parallel ranks (at the cache's width)."""
    whole = replace(Dims.of(replace(config, block=block, layer_blocks=())), L=1)
    if not whole.attends:
        return -(-(recurrent_elements(whole) + whole.ssm_state_elements()) // layout.tp) * B * kv_bits
    dims = replace(Dims.of(replace(config, block=rank_block(block, layout.tp), layer_blocks=())), L=1)
    # a hybrid layer (Falcon-H1): its K/V heads and its Mamba-2 state beside them (0 for any other layer)
    state = -(-whole.ssm_state_elements() // layout.tp) * B * kv_bits if whole.hybrid else 0
    return kv_cache_elements(dims) * dims.keys_seen(T) * B * kv_bits + state


def plan(config: Config, layout: Layout, T: int, B: int, *, training: bool, per: StateBytes | None = None,
         zero: int = 0, precision: str = "mixed", recompute: str = "none", dtype: str = "bfloat16",
         kv_bits: int = 16) -> RankPlan:
    """Every pipeline stage's rank for `layout`: parameters, and model states and activations (training, B the
    micro-batch) or weights and K/V cache (inference, B the batch)."""
    if not training:  # serving: ep replicas of the dense part, the routed experts split over them
        layout = replace(layout, dp=layout.ep)
    notes = check_layout(config, layout, training)
    n_layers = config.model.n_layers if config.model else 1
    V = config.model.vocab_size if config.model else 0
    multiple = VOCAB_MULTIPLE * layout.tp
    vocab_padded = -(-V // multiple) * multiple
    if config.model and vocab_padded != V:
        notes.append(f"vocabulary padded from {V:,} to {vocab_padded:,} (a multiple of 128·tp, as Megatron pads it): "
                     f"the per-rank embedding and head hold {vocab_padded // layout.tp:,} rows each")
    first, last, tied_copy = _outer_parameters(config, layout.tp, vocab_padded) if config.model else (0, 0, 0)
    cache: dict[BlockConfig, tuple[int, int, int, int]] = {}

    def per_layer(i: int) -> tuple[int, int, int, int]:
        block = config.layer_block(i)
        if block not in cache:
            params, experts = _layer_parameters(block, layout)
            kept = _activations(block, layout, T, B, precision, recompute) if training else 0
            cache[block] = (params, experts, kept, 0 if training else _kv_cache(block, config, layout, T, B, kv_bits))
        return cache[block]

    shared = _shared_parameters(config, layout.tp) if config.model else {}
    stages = []
    for s, layers in enumerate(stage_layers(n_layers, layout)):
        params, experts, kept, kv = (sum(v) for v in zip(*(per_layer(i) for i in layers)))
        used = {b.shared.index for i in layers if (b := config.layer_block(i)).shared is not None}
        params += sum(shared[k] for k in used)  # Zamba2: a copy of each shared block its layers use
        is_first, is_last = s == 0, s == layout.pp - 1
        params += (first if is_first else 0) + (last if is_last else 0)
        params += tied_copy if is_last and layout.pp > 1 else 0  # the head's own copy of a tied table
        other = _head_activations(config, layout, T, B, precision, vocab_padded) if training and is_last and \
            config.model else 0
        in_flight = min(layout.pp - s, layout.micro_batches) * layout.interleave_factor if training else 1.0
        states = {}
        if training and per is not None:
            dense = states_per_device(params - experts, per, layout.dp, zero)
            routed = states_per_device(experts, per, layout.dp // layout.ep, zero)
            states = {k: dense[k] + routed[k] for k in dense}
        stages.append(Stage(s, layers, params, experts, in_flight, kept, other, -(-kv // 8), states))
    if training and layout.pp > 1 and layout.micro_batches < layout.pp:
        notes.append(f"{layout.micro_batches} micro-batch{'es' if layout.micro_batches > 1 else ''} for {layout.pp} "
                     f"stages: the pipeline is never full (bubble); stage s keeps min(pp − s, m) in flight")
    if tied_copy and layout.pp > 1:
        notes.append("tied embeddings: the last stage keeps its own copy of the table for the LM head (Megatron "
                     "all-reduces the two copies' gradients)")
    return RankPlan(layout, stages, vocab_padded, training, dtype, notes)
