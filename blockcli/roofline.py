"""Hardware time as a roofline: each piece of work takes the longer of its FLOPs at the device's dense peak
and its bytes at the device's memory bandwidth (Williams, Waterman and Patterson 2009, "Roofline").

Nothing here is measured: every figure is a lower bound on time (an upper bound on tokens/s) for a device
that streams its memory at the datasheet's peak bandwidth and multiplies at the dense peak, with nothing
else in the way. It leaves out kernel launches and synchronisation, communication between devices (tensor-,
pipeline- and data-parallel traffic), any overlap of compute with memory traffic beyond the max() itself,
caches (an operand read twice is counted twice, a fused one once), and the elementwise work's own units.

The FLOPs and bytes are blockcli's closed forms (blockcli.sizing): the FLOPs of `count`'s prefill (causal:
a kernel that skips the masked half) and decode step, the parameter bytes at the weights' dtype, the
K/V cache's bytes at its dtype, and sizing.inference_activation_bytes' per-layer working set. Bytes moved:
- prefill of B × T: the weights read once, the K/V cache of the B·T tokens written, each layer's working
  set written and read once, the float32 logits of the last position written;
- decode step at context T: the weights read once (a mixture of experts: the routed experts the B tokens
  can reach, at most min(E, B·k) of E), the cache of T tokens per sequence read and the new token's written,
  each layer's working set of B tokens written and read once, B rows of float32 logits written.
Training time is at a model-FLOPs utilisation (MFU, Chowdhery et al. 2022, PaLM, appendix B): the step's
model FLOPs, forward + backward over the full score table as MFU is quoted and without recomputation (a
recomputed forward is work the MFU's shortfall covers), over devices × peak × MFU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from blockcli.config import Config, InputError
from blockcli.hardware import Gpu
from blockcli.sizing import (LOSS_BYTES, Dims, Inference, Training, inference_activation_bytes,
                             kv_cache_elements, largest_module, lora_states, nbytes, states_per_device,
                             GATHER_BYTES)

DEFAULT_MFU = 0.4  # a typical well-tuned large-model training run (PaLM's 46%, Megatron-LM's 40-50% on A100s)
LEAVES_OUT = ("kernel launches, communication between devices, caches and any overlap of compute with memory "
              "traffic are not modelled")


@dataclass(frozen=True)
class Phase:
    """One piece of work on one device: its FLOPs, the bytes it moves by what they are, and the roofline time."""

    name: str
    flops: int
    bytes: dict[str, int]  # what is read and written: weights, kv_cache_read, kv_cache_written, activations, logits
    peak: float  # FLOP/s
    bandwidth: float  # bytes/s
    tokens: int  # tokens the phase produces or processes: B·T for a prefill, B for a decode step

    @property
    def bytes_moved(self) -> int:
        return sum(self.bytes.values())

    @property
    def compute_seconds(self) -> float:
        return self.flops / self.peak

    @property
    def memory_seconds(self) -> float:
        return self.bytes_moved / self.bandwidth

    @property
    def seconds(self) -> float:
        return max(self.compute_seconds, self.memory_seconds)

    @property
    def bound(self) -> str:
        return "compute" if self.compute_seconds >= self.memory_seconds else "memory"

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved."""
        return self.flops / self.bytes_moved if self.bytes_moved else math.inf

    @property
    def ridge(self) -> float:
        """The intensity where the two times meet: peak / bandwidth."""
        return self.peak / self.bandwidth

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds


@dataclass(frozen=True)
class TrainingTime:
    model_flops: int  # forward + backward of the step, full score table, no recomputation
    devices: int
    peak: float
    mfu: float
    tokens: int

    @property
    def seconds(self) -> float:
        return self.model_flops / (self.devices * self.peak * self.mfu)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds


@dataclass(frozen=True)
class Roofline:
    gpu: Gpu
    dtype: str  # of the inference products
    prefill: Phase
    decode: Phase
    budget: int  # bytes per device the GPU count is for: --max-memory, else the device's memory
    inference_gpus: int  # fewest devices whose pooled memory holds the inference figure
    training: TrainingTime | None = None
    training_dtype: str = ""
    training_gpus: int | None = None  # fewest devices under ZeRO-3 (None: activations alone exceed the budget)
    notes: list[str] = field(default_factory=list)


def working_set(groups: list[Dims], T: int, B: int, dtype: str) -> int:
    """Every layer's working set (sizing.inference_activation_bytes without the logits), summed over the layers."""
    return sum(dims.L * (inference_activation_bytes(dims, T, B, dtype) - LOSS_BYTES * B * dims.V) for dims in groups)


def weights_read(config: Config, total: int, active: int, tokens: int) -> tuple[int, str]:
    """Parameters a pass over `tokens` tokens reads: all of them, but of a mixture's routed experts at most the
    min(E, tokens·k) of E the tokens can be sent to (each token k distinct experts, no two tokens sharing one:
    an upper bound). Returns (parameters, a phrase saying which)."""
    moe = next((g.block.moe for g in config.layer_groups() if g.block.moe is not None), None)
    if moe is None or moe.n_experts <= moe.top_k or total == active:
        return total, "all parameters"
    E, k = moe.n_experts, moe.top_k
    routed = (total - active) * E // (E - k)  # the routed experts' parameters: active holds k of E of them
    reached = min(E, tokens * k)
    return total - routed + routed * reached // E, f"the routed experts' {reached} of {E} the tokens can reach"


def inference_phases(config: Config, inf: Inference, total: int, active: int, gpu: Gpu) -> tuple[Phase, Phase, str]:
    groups = Dims.per_group(config)
    B, T, dtype = inf.batch, inf.seq_len, inf.dtype
    peak, bw = gpu.peak(dtype), gpu.bandwidth
    V = groups[0].V
    prefill_weights, _ = weights_read(config, total, active, B * T)
    prefill = Phase("prefill", inf.prefill.total(causal=True),
                    {"weights": nbytes(prefill_weights, dtype), "kv_cache_written": inf.kv_bytes + inf.state_bytes,
                     "activations": 2 * working_set(groups, T, B, dtype), "logits": LOSS_BYTES * B * V},
                    peak, bw, B * T)
    decode_weights, which = weights_read(config, total, active, B)
    # a recurrent layer (Gated DeltaNet, Mamba-2, lightning) reads and writes its whole state every token
    new_token = nbytes(sum(kv_cache_elements(dims) for dims in groups) * B, inf.kv_dtype) + inf.state_bytes
    decode = Phase("decode", inf.decode,
                   {"weights": nbytes(decode_weights, dtype), "kv_cache_read": inf.kv_bytes + inf.state_bytes,
                    "kv_cache_written": new_token, "activations": 2 * working_set(groups, 1, B, dtype),
                    "logits": LOSS_BYTES * B * V},
                   peak, bw, B)
    return prefill, decode, which


def training_time(tr: Training, gpu: Gpu, mfu: float, devices: int) -> TrainingTime:
    if not 0 < mfu <= 1:
        raise InputError(f"--mfu: expected a fraction in (0, 1], got {mfu:g}")
    dtype = "bfloat16" if tr.precision == "mixed" else "float32"
    return TrainingTime(tr.forward_flops() + tr.backward_flops(), devices, gpu.peak(dtype), mfu, tr.tokens)


def training_gpus(config: Config, tr: Training, parameters: int, budget: int) -> int | None:
    """Fewest devices N whose memory holds the step under ZeRO stage 3 over N: the model states divided by N,
    the largest module gathered whole and one micro-batch's activations on each. None: those two alone
    exceed the budget."""
    states = (lora_states(tr.lora, tr.per_parameter, 1, 0) if tr.lora is not None
              else states_per_device(parameters, tr.per_parameter, 1, 0))
    fixed = tr.activation_bytes + GATHER_BYTES * largest_module(config)[1]
    room = budget - fixed
    return None if room <= 0 else max(1, -(-sum(states.values()) // room))


def roofline(config: Config, inf: Inference, total: int, active: int, gpu: Gpu, *, budget: int | None = None,
             training: Training | None = None, mfu: float = DEFAULT_MFU, devices: int = 1) -> Roofline:
    """The roofline of `inf` (and `training`, at `mfu` over `devices`) on `gpu`; GPU counts for `budget` bytes
    per device (default: the device's memory)."""
    prefill, decode, which = inference_phases(config, inf, total, active, gpu)
    per_device = budget if budget is not None else gpu.memory_bytes
    notes = []
    if which != "all parameters":
        notes.append(f"decode reads {which} (at most one expert per token's k choices, none shared)")
    if training is None:
        return Roofline(gpu, inf.dtype, prefill, decode, per_device, -(-inf.memory_bytes // per_device),
                        notes=notes)
    time = training_time(training, gpu, mfu, devices)
    return Roofline(gpu, inf.dtype, prefill, decode, per_device, -(-inf.memory_bytes // per_device), time,
                    "bfloat16" if training.precision == "mixed" else "float32",
                    training_gpus(config, training, total, per_device), notes)


# ----------------------------------------------------------------------------- per operation (trace --gpu)


@dataclass(frozen=True)
class OpTime:
    read: int
    written: int
    flops: int
    peak: float
    bandwidth: float

    @property
    def bytes_moved(self) -> int:
        return self.read + self.written

    @property
    def seconds(self) -> float:
        return max(self.flops / self.peak, self.bytes_moved / self.bandwidth)

    @property
    def bound(self) -> str:
        if not self.bytes_moved and not self.flops:
            return "none"
        return "compute" if self.flops / self.peak >= self.bytes_moved / self.bandwidth else "memory"

    @property
    def intensity(self) -> float | None:
        return self.flops / self.bytes_moved if self.bytes_moved else None


ID_BYTES = 8  # token ids are int64, as NumPy and torch hold them


def op_bytes(kind: str, input_shapes: list[tuple[int, ...]], sources: list[int | None], output_shape: tuple[int, ...],
             params: int, itemsize: int) -> tuple[int, int]:
    """(read, written) bytes of one traced operation: every input read whole and the output written, the
    parameters not among the inputs (biases, a norm's scale and shift) read too; a reshape is a view and
    moves nothing; a gather (the token embedding) reads the ids and the rows it picks, not the whole table."""
    out = math.prod(output_shape)
    if kind == "reshape":
        return 0, 0
    if kind == "gather":
        return ID_BYTES * math.prod(input_shapes[0]) + out * itemsize, out * itemsize
    sizes = [math.prod(s) for s in input_shapes]
    as_inputs = sum(n for n, src in zip(sizes, sources) if src is None) if sources else 0
    return (sum(sizes) + max(0, params - as_inputs)) * itemsize, out * itemsize


def op_time(kind: str, input_shapes: list[tuple[int, ...]], sources: list[int | None], output_shape: tuple[int, ...],
            params: int, flops: int, itemsize: int, gpu: Gpu, dtype: str) -> OpTime:
    read, written = op_bytes(kind, input_shapes, sources, output_shape, params, itemsize)
    return OpTime(read, written, flops, gpu.peak(dtype), gpu.bandwidth)
