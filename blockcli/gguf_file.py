"""GGUF files (llama.cpp, Ollama, LM Studio): the header read into a config (the tensors into blockcli's keys:
`blockcli.gguf_weights`).

A GGUF file is a header (magic, version, key/value metadata, one info record per tensor: name, dims,
ggml type, offset) followed by the aligned tensor data. `read_gguf` parses the header alone, checking
every count, length and offset against the file's size before anything is allocated, so a lying header
is one error line in bounded time and memory, and a multi-GB file is read in milliseconds: `count` never
touches the tensor data.

The metadata (`general.architecture` and its keys: `<arch>.block_count`, `.embedding_length`,
`.feed_forward_length`, `.attention.head_count[_kv]`, `.attention.key_length`, `.rope.freq_base`,
`.rope.scaling.*`, norm epsilons, `.expert_*`, `.context_length`) is written out as the Hugging Face
config.json the file was converted from (llama, qwen2, qwen3, qwen2moe, qwen3moe, gemma, gemma2, gemma3,
starcoder2, olmo2, phi3, command-r, gpt2, falcon, gpt-oss, deepseek2), which `blockcli.hf` reads as for any model
folder: one reader, one set of defaults and checks. Which tensors a config has (a tied head, biases) is read from the
tensors present, as llama.cpp does.

Tensor names: llama.cpp's own table (`gguf.TensorNameMap`, from the package) gives each transformers
name of the family's `TensorMap` its GGUF name (`model.layers.0.self_attn.q_proj.weight` ↔
`blk.0.attn_q.weight`); the stored tensors are then matched exactly as a model folder's are. A GGUF
shape lists the innermost dimension first (`ne0`, a row); read outermost first it is nn.Linear's
(out, in). What `convert_hf_to_gguf.py` changes is undone on load:

- `llama` (and the archs that share its RoPE kernel): Q and K rows permuted per head from transformers'
  rotate-half pairing ([0, d_h/2) with [d_h/2, d_h)) to adjacent pairs: `permute` (n_heads, 2, d_h/2, in)
  → (n_heads, d_h/2, 2, in); undone by the inverse reshape (K with the K/V heads' count);
- Gemma (1, 2, 3): every RMSNorm weight stored as 1 + w (the scale it applies): w = stored − 1;
- GPT-2: Conv1D's (in, out) matrices stored transposed to (out, in): transposed back;
- gpt-oss: transformers' experts (E, d, 2·d_e) `gate_up_proj`, gate and up interleaved along the last axis, and
  (E, d_e, d) `down_proj`, stored as (E, d_e, d) `ffn_gate_exps` and `ffn_up_exps` and (E, d, d_e)
  `ffn_down_exps` (their biases split the same way): interleaved and transposed back; the sinks as
  `attn_sinks.weight`;
- DeepSeek (deepseek2): MLA's kv_b_proj (h·(d_nope + d_v), r) stored per head as `attn_k_b` (h, r, d_nope),
  transposed, and `attn_v_b` (h, d_v, r): joined back; e_score_correction_bias as `exp_probs_b.bias`;
- Falcon: `query_key_value`'s rows, grouped per K/V head in transformers ([q…q k v | q…q k v | …]), stored
  as Q | K | V (the converter's "jploski" layout): regrouped;
- mixtures: the experts merged per layer (`ffn_gate_exps` (E, d_e, d) …): expert e's slice is its
  matrix, and its bytes are a contiguous range (a block never spans two rows); gate and up fused
  (`ffn_gate_up_exps` (E, 2·d_e, d), the converter's --fuse-gate-up-exps) are transformers 5's `gate_up_proj`.

Values are dequantized by the `gguf` package (`gguf.quants.dequantize`, llama.cpp's reference
dequantizers) one tensor at a time, in float32, then cast to the run's dtype.
"""

from __future__ import annotations

import functools
import json
import math
import mmap
import struct
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from blockcli.config import Config, InputError, reading, regular_file

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32  # general.alignment's default (the GGUF spec)
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_NAME = 65_535  # longest key or tensor name accepted; GGUF_MAX... names are 64 bytes in practice
KEEP_ARRAY = 4096  # numeric arrays up to this length are kept (per-layer values); longer ones skipped
# metadata value types: (struct format, bytes) for the fixed-size ones
SCALAR = {0: ("<B", 1), 1: ("<b", 1), 2: ("<H", 2), 3: ("<h", 2), 4: ("<I", 4), 5: ("<i", 4), 6: ("<f", 4),
          7: ("<?", 1), 10: ("<Q", 8), 11: ("<q", 8), 12: ("<d", 8)}
STRING, ARRAY = 8, 9


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    shape: tuple[int, ...]  # outermost first (NumPy's order): ggml's ne reversed
    qtype: str  # ggml type name: F32, F16, BF16, Q8_0, Q4_K, ...
    begin: int  # absolute byte offsets of its data in the file
    end: int

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


@dataclass(frozen=True)
class GGUFFile:
    path: Path
    version: int
    metadata: dict[str, Any]  # long arrays (the vocabulary) as ("array", length) only
    tensors: dict[str, GGUFTensor]
    size: int  # bytes of the file

    @property
    def arch(self) -> str:
        arch = self.metadata.get("general.architecture")
        if not isinstance(arch, str):
            raise InputError(f"{self.path}: no 'general.architecture' string in its metadata")
        return arch


def is_gguf_path(path: Path) -> bool:
    return path.suffix.lower() == ".gguf"


# ----------------------------------------------------------------------------- the header


class _Cursor:
    """Reads little-endian values from the mapped header, every read bounded by the file's end."""

    def __init__(self, data: mmap.mmap | bytes, path: Path) -> None:
        self.data, self.pos, self.path = data, 0, path

    def left(self) -> int:
        return len(self.data) - self.pos

    def take(self, fmt: str, n: int, what: str) -> Any:
        if n > self.left():
            raise InputError(f"{self.path}: truncated GGUF header: {what} at byte {self.pos} runs past the end of "
                             f"the file ({len(self.data):,} bytes)")
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += n
        return value

    def string(self, what: str, keep: bool = True) -> str:
        length = self.take("<Q", 8, f"the length of {what}")
        if length > self.left():
            raise InputError(f"{self.path}: {what} claims {length:,} bytes, more than the {self.left():,} left in "
                             f"the file (a lying or truncated header)")
        raw = bytes(self.data[self.pos:self.pos + length]) if keep else b""
        self.pos += length
        if not keep:
            return ""
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InputError(f"{self.path}: {what} is not UTF-8 text") from None

    def value(self, kind: int, what: str) -> Any:
        if kind in SCALAR:
            fmt, n = SCALAR[kind]
            return self.take(fmt, n, what)
        if kind == STRING:
            return self.string(what)
        if kind == ARRAY:
            inner = self.take("<I", 4, f"the element type of {what}")
            count = self.take("<Q", 8, f"the length of {what}")
            least = SCALAR[inner][1] if inner in SCALAR else 8  # a string is at least its length
            if inner not in SCALAR and inner != STRING:
                raise InputError(f"{self.path}: {what}: array of unknown GGUF value type {inner}")
            if count * least > self.left():
                raise InputError(f"{self.path}: {what} claims {count:,} elements, more than the file holds "
                                 f"(a lying or truncated header)")
            if inner in SCALAR and count <= KEEP_ARRAY:
                return [self.value(inner, what) for _ in range(count)]
            if inner in SCALAR:
                self.pos += count * least
            else:  # the vocabulary: walked, not kept (each string's length, then past it)
                data, pos, end = self.data, self.pos, len(self.data)
                unpack = struct.Struct("<Q").unpack_from
                for _ in range(count):
                    if pos + 8 > end:
                        raise InputError(f"{self.path}: truncated GGUF header: {what} runs past the end of the file")
                    pos += 8 + unpack(data, pos)[0]
                if pos > end:
                    raise InputError(f"{self.path}: {what} runs past the end of the file (a lying or truncated "
                                     f"header)")
                self.pos = pos
            return ("array", count)
        raise InputError(f"{self.path}: {what} has unknown GGUF value type {kind}")


def read_gguf(path: str | Path) -> GGUFFile:
    """The header of a GGUF file: metadata and every tensor's name, shape, type and byte range, each checked
    against the file (known type, whole blocks per row, aligned, inside the file, no two overlapping).
    No tensor data is read."""
    path = Path(path)
    if not regular_file(path, "a .gguf file"):
        raise InputError(f"{path}: file not found")
    with reading(path, "a .gguf file"):
        stat = path.stat()
    return _read_gguf(path, stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _read_gguf(path: Path, size: int, mtime_ns: int) -> GGUFFile:
    """Parsed once per command for the config and again for the tensors: keyed by the file's size and time, so
    a file changed in between is read again."""
    import gguf  # the format's own constants: ggml types and their block sizes

    with reading(path, "a .gguf file"), open(path, "rb") as f:
        if size < 24:
            raise InputError(f"{path}: truncated: {size} bytes, fewer than a GGUF header's 24")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return _parse(_Cursor(data, path), path, size, gguf)


def _parse(cur: _Cursor, path: Path, size: int, gguf: Any) -> GGUFFile:
    if bytes(cur.data[:4]) != MAGIC:
        raise InputError(f"{path}: not a GGUF file (its first bytes are {bytes(cur.data[:4])!r}, not b'GGUF')")
    cur.pos = 4
    version = cur.take("<I", 4, "the version")
    if version not in (2, 3):
        raise InputError(f"{path}: GGUF version {version}; blockcli reads versions 2 and 3")
    n_tensors = cur.take("<Q", 8, "the tensor count")
    n_kv = cur.take("<Q", 8, "the metadata count")
    # each metadata entry takes at least 13 bytes (key length, one key byte, type), each tensor info 33
    if n_kv * 13 + n_tensors * 33 > cur.left():
        raise InputError(f"{path}: its header claims {n_tensors:,} tensors and {n_kv:,} metadata entries, more "
                         f"than its {size:,} bytes can hold (a lying count or a truncated file)")
    metadata: dict[str, Any] = {}
    for _ in range(n_kv):
        key = cur.string("a metadata key")
        kind = cur.take("<I", 4, f"the type of metadata '{key}'")
        metadata[key] = cur.value(kind, f"metadata '{key}'")
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise InputError(f"{path}: metadata 'general.alignment' = {alignment!r}, expected a power of two")
    infos = []
    for _ in range(n_tensors):
        name = cur.string("a tensor name")
        n_dims = cur.take("<I", 4, f"the rank of tensor '{name}'")
        if not 1 <= n_dims <= MAX_DIMS:
            raise InputError(f"{path}: tensor '{name}' has {n_dims} dimensions; GGUF allows 1 to {MAX_DIMS}")
        ne = [cur.take("<Q", 8, f"a dimension of tensor '{name}'") for _ in range(n_dims)]
        code = cur.take("<I", 4, f"the type of tensor '{name}'")
        offset = cur.take("<Q", 8, f"the offset of tensor '{name}'")
        infos.append((name, ne, code, offset))
    start = -(-cur.pos // alignment) * alignment  # the data section begins at the next aligned byte
    tensors: dict[str, GGUFTensor] = {}
    for name, ne, code, offset in infos:
        try:
            qtype = gguf.GGMLQuantizationType(code)
            block, type_size = gguf.GGML_QUANT_SIZES[qtype]
        except (ValueError, KeyError):
            raise InputError(f"{path}: tensor '{name}' has unknown ggml type {code}") from None
        if any(n < 1 for n in ne):
            raise InputError(f"{path}: tensor '{name}' has dimensions {ne}; each must be at least 1")
        if ne[0] % block:
            raise InputError(f"{path}: tensor '{name}' rows of {ne[0]} values are not whole {qtype.name} blocks "
                             f"of {block}")
        nbytes = math.prod(ne[1:]) * (ne[0] // block) * type_size
        if offset % alignment:
            raise InputError(f"{path}: tensor '{name}' offset {offset:,} is not a multiple of the alignment "
                             f"{alignment}")
        begin = start + offset
        if begin + nbytes > size:
            raise InputError(f"{path}: tensor '{name}' ({qtype.name} {tuple(ne)}, {nbytes:,} bytes at offset "
                             f"{offset:,}) does not fit in the file's {size:,} bytes (truncated file or lying offset)")
        if name in tensors:
            raise InputError(f"{path}: tensor '{name}' is listed twice")
        tensors[name] = GGUFTensor(name, tuple(reversed(ne)), qtype.name, begin, begin + nbytes)
    ordered = sorted(tensors.values(), key=lambda t: t.begin)
    for before, after in zip(ordered, ordered[1:]):
        if after.begin < before.end:
            raise InputError(f"{path}: tensors '{before.name}' and '{after.name}' overlap in the file (a lying "
                             f"offset)")
    return GGUFFile(path, version, metadata, tensors, size)


# ----------------------------------------------------------------------------- metadata → config.json


@dataclass(frozen=True)
class Arch:
    """One llama.cpp architecture: the transformers model_type its files come from, how its metadata becomes
    that config.json, and what its converter did to the tensors."""

    model_type: str
    config: Callable[[_Meta], dict[str, Any]]
    permuted_qk: bool = False  # llama's Q/K row permutation
    norm_plus_one: bool = False  # Gemma's norms stored as 1 + w
    conv1d: tuple[str, ...] = ()  # GPT-2's matrices stored transposed (transformers name endings)
    ungrouped_qkv: bool = False  # Falcon's query_key_value stored as Q | K | V, not grouped per K/V head
    split_interleaved: bool = False  # gpt-oss: gate_up_proj (E, d, 2·d_e) interleaved, stored as gate and up
    split_kv_b: bool = False  # DeepSeek's MLA: kv_b_proj stored as attn_k_b (transposed) and attn_v_b per head


@dataclass
class _Meta:
    gguf: GGUFFile
    used: set[str] = field(default_factory=set)

    def get(self, key: str, default: Any = None, *, required: bool = False) -> Any:
        full = f"{self.gguf.arch}.{key}"
        if full not in self.gguf.metadata:
            if required:
                raise InputError(f"{self.gguf.path}: metadata '{full}' is missing (needed for the model's shape)")
            return default
        value = self.gguf.metadata[full]
        if isinstance(value, (list, tuple)):
            distinct = set(value) if isinstance(value, list) else {None}
            if len(distinct) != 1:
                raise InputError(f"{self.gguf.path}: metadata '{full}' holds one value per layer; blockcli reads "
                                 f"it only when every layer has the same")
            value = value[0]
        return value

    def number(self, key: str, default: Any = None, *, required: bool = False) -> Any:
        """A numeric metadata value (or `default`): a string or a flag under a size's key is named, not cast."""
        value = self.get(key, default, required=required)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise InputError(f"{self.gguf.path}: metadata '{self.gguf.arch}.{key}' = {value!r}; expected a number")
        if isinstance(value, float) and not math.isfinite(value):
            raise InputError(f"{self.gguf.path}: metadata '{self.gguf.arch}.{key}' = {value!r}; expected a finite "
                             f"number")
        return value

    def has(self, tensor: str) -> bool:
        return tensor in self.gguf.tensors


def _rope(m: _Meta) -> dict[str, Any]:
    """rope_parameters (transformers 5) from rope.freq_base and rope.scaling.*"""
    params: dict[str, Any] = {"rope_theta": float(m.number("rope.freq_base", 10000.0)), "rope_type": "default"}
    kind = m.get("rope.scaling.type", "none")
    factor = m.number("rope.scaling.factor")
    if kind in ("linear", "yarn") and factor is not None and factor != 1.0:
        params.update(rope_type=kind, factor=float(factor))
        if kind == "yarn":
            params["original_max_position_embeddings"] = int(m.number("rope.scaling.original_context_length",
                                                                   required=True))
    elif kind not in ("none", "linear", "yarn"):
        raise InputError(f"{m.gguf.path}: metadata '{m.gguf.arch}.rope.scaling.type' = {kind!r}; blockcli reads "
                         f"none, linear and yarn")
    return params


def _vocab(m: _Meta) -> int:
    embd = m.gguf.tensors.get("token_embd.weight")
    if embd is None or len(embd.shape) != 2:
        raise InputError(f"{m.gguf.path}: no 2-D tensor 'token_embd.weight' (the token embedding)")
    return embd.shape[0]


def _decoder(m: _Meta, eps_key: str = "attention.layer_norm_rms_epsilon") -> dict[str, Any]:
    """The fields every llama-like decoder's config.json has."""
    heads = int(m.number("attention.head_count", required=True))
    out = {"hidden_size": int(m.number("embedding_length", required=True)),
           "num_hidden_layers": int(m.number("block_count", required=True)),
           "intermediate_size": int(m.number("feed_forward_length", required=True)),
           "num_attention_heads": heads,
           "num_key_value_heads": int(m.number("attention.head_count_kv", heads)),
           "max_position_embeddings": int(m.number("context_length", required=True)),
           "rms_norm_eps": float(m.number(eps_key, required=True)),
           "rope_parameters": _rope(m),
           "vocab_size": _vocab(m),
           "tie_word_embeddings": not m.has("output.weight")}
    if (key_length := m.number("attention.key_length")) is not None:
        out["head_dim"] = int(key_length)
    return out


def _llama(m: _Meta) -> dict[str, Any]:
    return {**_decoder(m), "hidden_act": "silu", "attention_bias": m.has("blk.0.attn_q.bias"),
            "mlp_bias": m.has("blk.0.ffn_up.bias")}


def _qwen2(m: _Meta) -> dict[str, Any]:
    return {**_decoder(m), "hidden_act": "silu"}


def _qwen3(m: _Meta) -> dict[str, Any]:
    return {**_decoder(m), "hidden_act": "silu", "attention_bias": m.has("blk.0.attn_q.bias")}


def _moe(m: _Meta) -> dict[str, Any]:
    return {"num_experts": int(m.number("expert_count", required=True)),
            "num_experts_per_tok": int(m.number("expert_used_count", required=True)),
            "moe_intermediate_size": int(m.number("expert_feed_forward_length", required=True))}


def _qwen2moe(m: _Meta) -> dict[str, Any]:
    out = {**_decoder(m), "hidden_act": "silu", **_moe(m), "norm_topk_prob": False}
    out["shared_expert_intermediate_size"] = int(m.number("expert_shared_feed_forward_length", required=True))
    return out


def _qwen3moe(m: _Meta) -> dict[str, Any]:
    return {**_decoder(m), "hidden_act": "silu", **_moe(m), "norm_topk_prob": True,
            "attention_bias": m.has("blk.0.attn_q.bias")}


def _query_scale(m: _Meta, out: dict[str, Any], big_layers: int) -> int:
    """Gemma 2/3's query_pre_attn_scalar, which GGUF does not store: llama.cpp scales by 1/√d_h, except the
    27B models (told apart by their layer count) by 1/√(d/h), as their configs say."""
    if out["num_hidden_layers"] == big_layers:
        return out["hidden_size"] // out["num_attention_heads"]
    return out.get("head_dim", out["hidden_size"] // out["num_attention_heads"])


def _gemma(m: _Meta) -> dict[str, Any]:
    """Gemma 1: the converter writes no RoPE base (llama.cpp's default 10,000 is GemmaConfig's) and scales queries
    by 1/√d_h, as transformers' Gemma does."""
    return {**_decoder(m), "hidden_act": "gelu_pytorch_tanh"}


def _gemma2(m: _Meta) -> dict[str, Any]:
    out = {**_decoder(m), "hidden_activation": "gelu_pytorch_tanh",
           "attn_logit_softcapping": m.number("attn_logit_softcapping"),
           "final_logit_softcapping": m.number("final_logit_softcapping"),
           "sliding_window": int(m.number("attention.sliding_window", required=True))}
    out["query_pre_attn_scalar"] = _query_scale(m, out, 46)
    out["layer_types"] = _sliding_layers(m, out["num_hidden_layers"], 2)
    return out


def _gemma3(m: _Meta) -> dict[str, Any]:
    out = {**_decoder(m), "hidden_activation": "gelu_pytorch_tanh",
           "sliding_window": int(m.number("attention.sliding_window", required=True))}
    out["query_pre_attn_scalar"] = _query_scale(m, out, 62)
    out["layer_types"] = _sliding_layers(m, out["num_hidden_layers"], 6)
    out["rope_parameters"] = {"full_attention": out["rope_parameters"],
                              "sliding_attention": {"rope_theta": float(m.number("rope.freq_base_swa", 10000.0)),
                                                    "rope_type": "default"}}
    return out


def _sliding_layers(m: _Meta, n_layers: int, default: int) -> list[str]:
    """transformers' layer_types from `attention.sliding_window_pattern`: N (every Nth layer global, the others
    windowed) or one flag per layer (true: windowed); absent, llama.cpp's default for the arch."""
    pattern = m.gguf.metadata.get(f"{m.gguf.arch}.attention.sliding_window_pattern", default)
    if isinstance(pattern, list) and len(pattern) == n_layers:
        return ["sliding_attention" if flag else "full_attention" for flag in pattern]
    if not isinstance(pattern, int) or isinstance(pattern, bool) or pattern < 1:
        raise InputError(f"{m.gguf.path}: metadata '{m.gguf.arch}.attention.sliding_window_pattern' = "
                         f"{pattern!r}; expected a positive integer or one flag per layer")
    return ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n_layers)]


def _gpt2(m: _Meta) -> dict[str, Any]:
    return {"n_embd": int(m.number("embedding_length", required=True)),
            "n_layer": int(m.number("block_count", required=True)),
            "n_inner": int(m.number("feed_forward_length", required=True)),
            "n_head": int(m.number("attention.head_count", required=True)),
            "n_positions": int(m.number("context_length", required=True)),
            "layer_norm_epsilon": float(m.number("attention.layer_norm_epsilon", 1e-5)),
            "activation_function": "gelu_new", "vocab_size": _vocab(m),
            "tie_word_embeddings": not m.has("output.weight")}


def _starcoder2(m: _Meta) -> dict[str, Any]:
    out = {**_decoder(m, "attention.layer_norm_epsilon"), "hidden_act": "gelu_pytorch_tanh",
           "use_bias": m.has("blk.0.attn_q.bias")}
    out["norm_epsilon"] = out.pop("rms_norm_eps")
    # llama.cpp's converter writes no window for StarCoder2 (and runs without one); one written is read
    out["sliding_window"] = m.number("attention.sliding_window")
    return out


def _phi3(m: _Meta) -> dict[str, Any]:
    out = {**_decoder(m), "hidden_act": "silu"}
    head_dim = out.get("head_dim", out["hidden_size"] // out["num_attention_heads"])
    rotary = m.number("rope.dimension_count", head_dim)
    out["partial_rotary_factor"] = rotary / head_dim
    out["sliding_window"] = m.number("attention.sliding_window") or None  # the converter writes 0 for none
    if m.has(ROPE_FACTORS[0]) or m.has(ROPE_FACTORS[1]):
        out.update(_longrope(m, out, int(rotary)))
    return out


ROPE_FACTORS = ("rope_factors_long.weight", "rope_factors_short.weight")  # LongRoPE's, config rather than weights


def _longrope(m: _Meta, out: dict[str, Any], rotary: int) -> dict[str, Any]:
    """Phi-3's LongRoPE (the 128k-context models), as convert_hf_to_gguf.py writes it: the long and short factors
    as two float32 tensors of one value per rotated pair (read here: 2 × d_rot/2 values, the only tensor data a
    count reads), the original context as rope.scaling.original_context_length, and the attention factor
    transformers derives, √(1 + ln s / ln n_orig) with s = context_length / n_orig, as rope.scaling.attn_factor
    (given to transformers only when it is not that value, as float32 holds it)."""
    factors = {}
    for name, key in zip(ROPE_FACTORS, ("long_factor", "short_factor")):
        t = m.gguf.tensors.get(name)
        if t is None:
            other = next(n for n in ROPE_FACTORS if n != name)
            raise InputError(f"{m.gguf.path}: holds '{other}' but no '{name}'; LongRoPE needs both factor tensors")
        if t.qtype != "F32" or t.shape != (rotary // 2,):
            raise InputError(f"{m.gguf.path}: tensor '{name}' is {t.qtype} {t.shape}; LongRoPE's factors are F32, "
                             f"one per rotated pair ({rotary // 2},)")
        with reading(m.gguf.path, "a .gguf file"), open(m.gguf.path, "rb") as f:
            f.seek(t.begin)
            raw = f.read(t.nbytes)
        if len(raw) != t.nbytes:
            raise InputError(f"{m.gguf.path}: tensor '{name}' is cut short (file truncated)")
        factors[key] = [float(v) for v in struct.unpack(f"<{rotary // 2}f", raw)]
        if not all(math.isfinite(v) and v > 0 for v in factors[key]):
            raise InputError(f"{m.gguf.path}: tensor '{name}' holds {factors[key]}; LongRoPE's factors are positive")
    original = int(m.number("rope.scaling.original_context_length", required=True))
    params = {**out["rope_parameters"], "rope_type": "longrope", **factors}
    scale = out["max_position_embeddings"] / original
    derived = math.sqrt(1 + math.log(scale) / math.log(original)) if scale > 1 else 1.0
    stored = m.number("rope.scaling.attn_factor")
    if stored is not None and _float32(derived) != stored:
        params["attention_factor"] = float(stored)
    return {"rope_parameters": params, "original_max_position_embeddings": original}


def _falcon(m: _Meta) -> dict[str, Any]:
    """Falcon as FalconModel's converter writes it: one K/V head and one norm (Falcon-7B: multi_query), else the
    new decoder architecture with head_count_kv K/V heads and a second norm when `attn_norm_2` is stored
    (Falcon-40B/180B; Falcon2-11B has one); no RoPE base written (10,000, FalconConfig's), context_length 2048
    whatever the model's, biases on the linear layers when their tensors are."""
    heads = int(m.number("attention.head_count", required=True))
    kv = int(m.number("attention.head_count_kv", 1))
    two_norms = m.has("blk.0.attn_norm_2.weight")
    out = {"hidden_size": int(m.number("embedding_length", required=True)),
           "num_hidden_layers": int(m.number("block_count", required=True)),
           "ffn_hidden_size": int(m.number("feed_forward_length", required=True)),
           "num_attention_heads": heads, "max_position_embeddings": int(m.number("context_length", required=True)),
           "layer_norm_epsilon": float(m.number("attention.layer_norm_epsilon", required=True)),
           "rope_parameters": _rope(m), "vocab_size": _vocab(m), "tie_word_embeddings": not m.has("output.weight"),
           "bias": m.has("blk.0.attn_qkv.bias"), "activation": "gelu", "parallel_attn": True, "alibi": False}
    if kv == 1 and not two_norms:
        return {**out, "new_decoder_architecture": False, "multi_query": True}
    return {**out, "new_decoder_architecture": True, "num_kv_heads": kv, "num_ln_in_parallel_attn": 2 if two_norms
            else 1}


def _gpt_oss(m: _Meta) -> dict[str, Any]:
    """gpt-oss as GptOssModel's converter writes it: the generic keys, the window (every other layer, from layer
    0: llama.cpp's pattern and GptOssConfig's default), the experts' width as expert_feed_forward_length, yarn
    as rope.scaling.*; what GGUF does not store is GptOssConfig's and llama.cpp's alike: SwiGLU's α 1.702 and
    limit 7 (`swiglu_clamp_exp` when written), yarn's β 32 and 1 unless written, not truncated (transformers'
    gpt-oss; llama.cpp's yarn rounds the ramp's ends)."""
    out = {**_decoder(m), "num_local_experts": int(m.number("expert_count", required=True)),
           "num_experts_per_tok": int(m.number("expert_used_count", required=True)),
           "sliding_window": int(m.number("attention.sliding_window", required=True)),
           "attention_bias": m.has("blk.0.attn_q.bias"),
           "swiglu_limit": float(m.number("swiglu_clamp_exp", 7.0))}
    out["intermediate_size"] = int(m.number("expert_feed_forward_length", out["intermediate_size"]))
    rope = out["rope_parameters"]
    if rope["rope_type"] == "yarn":
        rope.update(beta_fast=float(m.number("rope.scaling.yarn_beta_fast", 32.0)),
                    beta_slow=float(m.number("rope.scaling.yarn_beta_slow", 1.0)), truncate=False)
    return out


SIGMOID_GATING = 2  # llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID (1: softmax)


def _deepseek2(m: _Meta) -> dict[str, Any]:
    """DeepSeek-V3 (and R1, Kimi-K2: sigmoid expert gating) as DeepseekV2Model's converter writes it: MLA as MQA
    (head_count_kv 1; key_length_mla = qk_nope + qk_rope, value_length_mla = v_head_dim, rope.dimension_count =
    qk_rope), q_lora_rank (absent: a plain q_proj), kv_lora_rank, the leading dense layers, the experts (routed,
    shared, their width, groups, scale, renormalisation), yarn with its log multiplier 0.1·mscale_all_dim (GGUF
    keeps no mscale of its own: DeepSeek's configs set the two equal, so it is taken so). DeepSeek-V2's softmax
    gating is refused: its router (greedy or group-limited) is not told apart by the metadata."""
    gating = m.number("expert_gating_func", 1)
    if gating != SIGMOID_GATING:
        raise InputError(f"{m.gguf.path}: metadata '{m.gguf.arch}.expert_gating_func' = {gating!r}; blockcli reads "
                         f"deepseek2 files with sigmoid gating ({SIGMOID_GATING}: DeepSeek-V3/R1), not DeepSeek-V2's "
                         f"softmax, whose greedy or group-limited top-k the metadata does not say")
    out = _decoder(m)
    heads = out["num_attention_heads"]
    rope_dim = int(m.number("rope.dimension_count", required=True))
    key = int(m.number("attention.key_length_mla", m.number("attention.key_length", required=True)))
    value = int(m.number("attention.value_length_mla", m.number("attention.value_length", required=True)))
    out.pop("head_dim", None)  # key_length is MLA's latent + rope width, not a head's
    q_rank = m.number("attention.q_lora_rank")
    out.update(num_key_value_heads=heads, hidden_act="silu", qk_rope_head_dim=rope_dim, qk_nope_head_dim=key - rope_dim,
               v_head_dim=value, q_lora_rank=int(q_rank) if q_rank is not None else None,
               kv_lora_rank=int(m.number("attention.kv_lora_rank", required=True)),
               first_k_dense_replace=int(m.number("leading_dense_block_count", 0)),
               moe_intermediate_size=int(m.number("expert_feed_forward_length", required=True)),
               n_routed_experts=int(m.number("expert_count", required=True)),
               num_experts_per_tok=int(m.number("expert_used_count", required=True)),
               n_shared_experts=int(m.number("expert_shared_count", 0)),
               routed_scaling_factor=float(m.number("expert_weights_scale", 1.0)),
               norm_topk_prob=bool(m.get("expert_weights_norm", False)),
               n_group=int(m.number("expert_group_count", 1)), topk_group=int(m.number("expert_group_used_count", 1)),
               attention_bias=m.has("blk.0.attn_kv_a_mqa.bias"))
    rope = out["rope_parameters"]
    if rope["rope_type"] == "yarn":
        mscale = _shortest_tenfold(float(m.number("rope.scaling.yarn_log_multiplier", 0.0)))
        rope.update(mscale=mscale, mscale_all_dim=mscale,
                    beta_fast=float(m.number("rope.scaling.yarn_beta_fast", 32.0)),
                    beta_slow=float(m.number("rope.scaling.yarn_beta_slow", 1.0)))
    return out


def _float32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def _shortest_tenfold(stored: float) -> float:
    """The mscale_all_dim the converter wrote as float32(0.1 · it): the shortest decimal that writes back to the
    same float32 (1.0, not the 1.0000000149 a plain division gives), as the config held it."""
    for digits in range(1, 10):
        value = round(stored / 0.1, digits)
        if _float32(0.1 * value) == stored:
            return value
    return stored / 0.1


def _command_r(m: _Meta) -> dict[str, Any]:
    out = {**_decoder(m, "attention.layer_norm_epsilon"), "hidden_act": "silu",
           "attention_bias": m.has("blk.0.attn_q.bias"), "use_qk_norm": m.has("blk.0.attn_q_norm.weight"),
           "logit_scale": float(m.number("logit_scale", 1.0))}
    out["layer_norm_eps"] = out.pop("rms_norm_eps")
    return out


def _olmo2(m: _Meta) -> dict[str, Any]:
    return {**_decoder(m), "hidden_act": "silu", "attention_bias": m.has("blk.0.attn_q.bias")}


ARCHS: dict[str, Arch] = {
    "llama": Arch("llama", _llama, permuted_qk=True),
    "qwen2": Arch("qwen2", _qwen2),
    "qwen3": Arch("qwen3", _qwen3),
    "qwen2moe": Arch("qwen2_moe", _qwen2moe),
    "qwen3moe": Arch("qwen3_moe", _qwen3moe),
    "gemma": Arch("gemma", _gemma, norm_plus_one=True),
    "gemma2": Arch("gemma2", _gemma2, norm_plus_one=True),
    "gemma3": Arch("gemma3_text", _gemma3, norm_plus_one=True),
    "starcoder2": Arch("starcoder2", _starcoder2),
    "olmo2": Arch("olmo2", _olmo2),
    "falcon": Arch("falcon", _falcon, ungrouped_qkv=True),
    "gpt-oss": Arch("gpt_oss", _gpt_oss, split_interleaved=True),
    "deepseek2": Arch("deepseek_v3", _deepseek2, split_kv_b=True),
    "command-r": Arch("cohere", _command_r),
    "phi3": Arch("phi3", _phi3),
    "gpt2": Arch("gpt2", _gpt2, conv1d=("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight",
                                        "mlp.c_proj.weight")),
}


def arch_of(g: GGUFFile) -> Arch:
    arch = ARCHS.get(g.arch)
    if arch is None:
        raise InputError(f"{g.path}: general.architecture '{g.arch}' is not one blockcli reads GGUF files of "
                         f"(supported: {', '.join(sorted(ARCHS))})")
    return arch


def hf_config(g: GGUFFile) -> dict[str, Any]:
    """The config.json the file's metadata describes."""
    arch = arch_of(g)
    return {"model_type": arch.model_type, **arch.config(_Meta(g))}


def read_gguf_config(path: str | Path) -> tuple[dict[str, Any], Config]:
    """A GGUF file's model: the blockcli mapping (for `convert`) and its Config, through the config.json its
    metadata describes."""
    from blockcli.hf import read_hf_text

    g = read_gguf(path)
    mapping, config = read_hf_text(json.dumps(hf_config(g)), str(g.path))
    about = mapping["about"]
    about["description"] = about["description"].replace("from a Hugging Face config.json",
                                                        f"from a GGUF file (general.architecture '{g.arch}')")
    return mapping, replace(config, about=replace(config.about, description=about["description"]))


def gguf_config(path: str | Path) -> Config:
    """A GGUF file's model as a blockcli Config (for `load_config`)."""
    return read_gguf_config(path)[1]
