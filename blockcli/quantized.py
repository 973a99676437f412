"""Quantized safetensors checkpoints: each format's stored tensors read as the logical weight they encode.

A quantized linear layer is stored as several tensors beside each other; `pair_quantized` replaces them by one
`Stored` tensor `<module>.weight` of the logical (out, in) shape the unquantized model has, its parts kept in
`packed` and its format in `quant`, so the tensor map matches it like any float weight (and `count` reconciles
the architecture against those logical shapes). `dequantize` turns one such tensor into its values, in the
run's dtype, one tensor at a time: the forward pass never holds more than the weights it runs on.

The layouts, as their reference implementations publish them:

- **fp8** (`quant_method: fp8`, `weight_block_size: [R, C]`; DeepSeek-V3/R1, Qwen3-FP8): `weight` (…, out, in)
  F8_E4M3 beside `weight_scale_inv` (…, ⌈out/R⌉, ⌈in/C⌉) float32, one scale per R×C block (the last blocks of a
  width that R or C does not divide are partial); w = e4m3(code) · scale. Static activation scales
  (`input_scale`) are stored beside and not needed for the weights.
- **gptq** (auto-gptq / optimum / gptqmodel): `qweight` (in·b/32, out) int32, the b-bit codes of each output
  column packed along the input axis as one little-endian bit stream (code i at bit i·b, crossing words for
  b = 3); `qzeros` (G, out·b/32) packed the same way along the outputs; `scales` (G, out) float16; `g_idx` (in,)
  the group of each input (act-order, `desc_act`, makes it a permutation's; absent: i // group_size).
  w[o, i] = scales[g, o] · (q[i, o] − z[g, o]) with g = g_idx[i]. auto-gptq and optimum stored z − 1 (the
  historical `checkpoint_format: gptq`, the stored codes unmasked: a zero point of 0 reads back as 2^b);
  gptqmodel's `checkpoint_format: gptq_v2` stores z itself.
- **awq** (AutoAWQ GEMM): `qweight` (in, out/8) and `qzeros` (G, out/8) int32 pack eight 4-bit codes of
  consecutive output columns per word in the order [0, 2, 4, 6, 1, 3, 5, 7] (nibble j holds column
  order[j]); `scales` (G, out) float16; w[o, i] = scales[i // g, o] · (q[i, o] − z[i // g, o]).
- **compressed-tensors** (llm-compressor): `pack-quantized` int b-bit weights `weight_packed` (out, ⌈in·b/32⌉)
  int32, each row a bit stream of codes offset by 2^(b−1); `weight_scale` (out, G) (G = 1: per channel);
  `weight_zero_point` (⌈out·b/32⌉, G) packed along the outputs, only when asymmetric; `weight_shape` the
  logical (out, in). `float-quantized`: `weight` F8_E4M3 beside `weight_scale` (per tensor, channel or group).
  `int-quantized` (llm-compressor's w8a8 int): `weight` the signed codes unpacked, one I8 a weight (out, in),
  beside `weight_scale` and, when asymmetric, `weight_zero_point` I8, both (out, G) (per tensor: one value).
  w = (q − zero) · scale. Act-order (`actorder: group`, GPTQ's desc_act as older llm-compressor wrote it): the
  group of input i is `weight_g_idx`[i] (in,), not i // group_size; `actorder: weight` reorders only during
  calibration and stores nothing. Modules its `ignore` list names are stored unquantized, and must be.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from blockcli.config import InputError

if TYPE_CHECKING:
    import numpy as np

    from blockcli.checkpoint import Stored

SUPPORTED = ("fp8", "gptq", "awq", "compressed-tensors")
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # nibble j of an AWQ word holds output column AWQ_ORDER[j] of its eight
INT_DTYPES = {"I32": "<i4", "I64": "<i8", "I16": "<i2", "I8": "i1", "U8": "u1"}
SCALE_DTYPES = {"F32", "F16", "BF16", "F64"}
# parts of a quantized module other than its codes, by name, for the stored-bytes breakdown
ROLES = {"weight_scale_inv": "scales", "scales": "scales", "weight_scale": "scales", "qzeros": "zeros",
         "weight_zero_point": "zeros", "g_idx": "g_idx", "weight_shape": "shape", "input_scale": "scales",
         "input_zero_point": "zeros", "weight_g_idx": "g_idx"}


@dataclass(frozen=True)
class Scheme:
    """How one module's weight is quantized (from the config's quantization_config)."""

    method: str  # fp8 | gptq | awq | compressed-tensors
    bits: int = 8
    group: int = 0  # inputs per group; 0: one group over a whole row (per channel)
    block: tuple[int, int] = (0, 0)  # fp8: rows × columns one scale covers
    symmetric: bool = True
    zero_offset: int = 0  # gptq's historical format: the stored zero points are one less than the real ones
    form: str = ""  # compressed-tensors: pack-quantized | float-quantized | int-quantized
    targets: tuple[str, ...] = ()  # compressed-tensors: the modules its config group covers
    per_tensor: bool = False  # compressed-tensors' strategy tensor: one scale for the whole matrix
    act_order: bool = False  # gptq's desc_act: the groups follow g_idx, a permutation's
    activations: str = field(default="", compare=False)  # how the config quantizes activations ("": not at all)
    ignore: tuple[str, ...] = field(default=(), compare=False)

    def describe(self) -> str:
        if self.method == "fp8":
            return f"fp8 e4m3, {self.block[0]}x{self.block[1]} blocks"
        grouped = f"groups of {self.group}" if self.group else "per tensor" if self.per_tensor else "per channel"
        if self.method == "compressed-tensors":
            kind = "fp8 e4m3" if self.form == "float-quantized" else f"int{self.bits}"
            return (f"compressed-tensors {self.form} {kind}, {grouped}" + ("" if self.symmetric else ", asymmetric")
                    + (", act-order" if self.act_order else ""))
        return (f"{self.method} {self.bits}-bit, {grouped}" + ("" if self.symmetric else ", asymmetric")
                + (", act-order" if self.act_order else ""))


# ----------------------------------------------------------------------------- reading the config


def schemes_of(folder: Path) -> list[Scheme] | None:
    """The schemes of the quantization_config of `folder`'s config.json, or None when it has none blockcli reads
    the weights of (no config, no quantization, gpt-oss's mxfp4: read by checkpoint.py itself)."""
    config = folder / "config.json"
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # the config's own reader says why, when it is read
    quant = data.get("quantization_config") if isinstance(data, dict) else None
    if not isinstance(quant, Mapping) and isinstance(data, dict) and isinstance(data.get("text_config"), Mapping):
        quant = data["text_config"].get("quantization_config")
    if not isinstance(quant, Mapping) or quant.get("quant_method") not in SUPPORTED:
        return None
    return _schemes(quant, str(config))


def _schemes(quant: Mapping[str, Any], where: str) -> list[Scheme]:
    method = quant["quant_method"]

    def number(key: str, value: Any, allowed: Callable[[int], bool], expected: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not allowed(value):
            raise InputError(f"{where}: field 'quantization_config.{key}': expected {expected}, got {value!r}")
        return value

    if method == "fp8":
        block = quant.get("weight_block_size")
        rows, cols = (number("weight_block_size", n, lambda n: n >= 1, "two positive integers")
                      for n in (block if isinstance(block, list) and len(block) == 2 else [None, None]))
        return [Scheme("fp8", 8, block=(rows, cols), activations=f"fp8, {quant.get('activation_scheme', 'dynamic')}")]
    if method in ("gptq", "awq"):
        key = "bits" if "bits" in quant or method == "gptq" else "w_bit"
        bits = number(key, quant.get(key), lambda b: b in ((2, 3, 4, 8) if method == "gptq" else (4,)),
                      "2, 3, 4 or 8" if method == "gptq" else "4 (AWQ's GEMM packing)")
        group_key = "group_size" if "group_size" in quant or method == "gptq" else "q_group_size"
        group = number(group_key, quant.get(group_key, -1), lambda g: g == -1 or g >= 1, "-1 or a positive integer")
        if method == "awq":
            version = str(quant.get("version", "gemm")).lower()
            if version != "gemm":
                raise InputError(f"{where}: field 'quantization_config.version': blockcli reads AWQ's GEMM packing, "
                                 f"got {version!r}")
            return [Scheme("awq", bits, max(group, 0), symmetric=not quant.get("zero_point", True))]
        fmt = quant.get("checkpoint_format", "gptq")
        if fmt not in ("gptq", "gptq_v2"):
            raise InputError(f"{where}: field 'quantization_config.checkpoint_format': expected gptq or gptq_v2 "
                             f"(blockcli reads GPTQ's own packing), got {fmt!r}")
        return [Scheme("gptq", bits, max(group, 0), symmetric=bool(quant.get("sym", True)),
                       zero_offset=1 if fmt == "gptq" else 0, act_order=bool(quant.get("desc_act", False)))]
    form = quant.get("format")
    if form not in ("pack-quantized", "float-quantized", "int-quantized"):
        raise InputError(f"{where}: field 'quantization_config.format': blockcli reads compressed-tensors' "
                         f"pack-quantized, int-quantized and float-quantized weights, got {form!r}")
    ignore = quant.get("ignore") or []
    if not isinstance(ignore, list) or not all(isinstance(i, str) for i in ignore):
        raise InputError(f"{where}: field 'quantization_config.ignore': expected an array of module names")
    schemes = []
    for name, group in (quant.get("config_groups") or {}).items():
        weights = group.get("weights") if isinstance(group, Mapping) else None
        if not isinstance(weights, Mapping):
            continue
        here = f"config_groups.{name}.weights"
        bits = number(f"{here}.num_bits", weights.get("num_bits"), lambda b: 1 <= b <= 8, "1 to 8")
        kind = weights.get("type", "int")
        if (kind, form) not in (("int", "pack-quantized"), ("int", "int-quantized"), ("float", "float-quantized")) \
                or (kind == "float" and bits != 8):
            raise InputError(f"{where}: field 'quantization_config.{here}.type': {kind!r} {bits}-bit weights in "
                             f"the {form} format are not a layout blockcli reads (int in pack-quantized or "
                             f"int-quantized, fp8 in float-quantized)")
        strategy = weights.get("strategy", "tensor")
        if strategy not in ("tensor", "channel", "group"):
            raise InputError(f"{where}: field 'quantization_config.{here}.strategy': expected tensor, channel or "
                             f"group, got {strategy!r}")
        size = number(f"{here}.group_size", weights.get("group_size"), lambda g: g >= 1,
                      "a positive integer") if strategy == "group" else 0
        actorder = weights.get("actorder")
        if actorder not in (None, False, "weight", "static", "group", "dynamic", True):
            raise InputError(f"{where}: field 'quantization_config.{here}.actorder': expected null, weight or "
                             f"group, got {actorder!r}")
        act_order = actorder in ("group", "dynamic", True)  # weight_g_idx stored; weight/static: nothing stored
        if act_order and strategy != "group":
            raise InputError(f"{where}: field 'quantization_config.{here}.actorder': {actorder!r} orders the "
                             f"inputs' groups, but the strategy is {strategy!r}, not group")
        targets = group.get("targets") or ["Linear"]
        acts = group.get("input_activations")
        acts = (f"{acts.get('type', 'int')}{acts.get('num_bits', '')}, "
                f"{'dynamic' if acts.get('dynamic') else 'static'}") if isinstance(acts, Mapping) else ""
        schemes.append(Scheme("compressed-tensors", bits, size, symmetric=bool(weights.get("symmetric", True)),
                              form=form, targets=tuple(map(str, targets)), per_tensor=strategy == "tensor",
                              act_order=act_order, ignore=tuple(ignore), activations=acts))
    return schemes


def _module_matches(module: str, patterns: tuple[str, ...]) -> bool:
    """compressed-tensors' target matching: `re:` a regular expression over the module's name, else the name
    itself (or its last part); `Linear` (a module class) matches every linear layer."""
    for p in patterns:
        if p == "Linear" or p == module or module.endswith("." + p):
            return True
        if p.startswith("re:") and re.match(p[3:], module):
            return True
    return False


# ----------------------------------------------------------------------------- pairing the stored tensors


def pair_quantized(tensors: dict[str, Stored], schemes: list[Scheme], raw: Callable[[Stored], np.ndarray]) -> None:
    """Replace every quantized module's stored parts by one tensor `<module>.weight` of its logical shape, in
    place; each part's shape is checked against the others (a scale that does not fit: one line naming it).
    `raw` reads a tensor's bytes (checkpoint.py's reader: this module never imports it)."""
    method = schemes[0].method
    code = {"fp8": "weight_scale_inv", "gptq": "qweight", "awq": "qweight"}.get(method)
    if method == "compressed-tensors":
        code = "weight_packed" if schemes[0].form == "pack-quantized" else "weight_scale"  # float/int-quantized
    for name in [n for n in tensors if n.endswith("." + code)]:
        module = name[:-len(code) - 1]
        scheme = _scheme_for(module, schemes, tensors[name])
        if scheme is None:
            continue
        parts = {n[len(module) + 1:]: t for n, t in tensors.items() if n.startswith(module + ".")
                 and n[len(module) + 1:] in _PART_NAMES[(scheme.method, scheme.form)]}
        shape, dtype = _logical(module, parts, scheme, raw)
        weight = module + ".weight"
        anchor = parts.get("weight") or parts.get("qweight") or parts["weight_packed"]
        ordered = tuple(parts[p] for p in _PART_NAMES[(scheme.method, scheme.form)] if p in parts)
        for p in parts:
            del tensors[f"{module}.{p}"]
        tensors[weight] = anchor._replace(name=weight, shape=shape, dtype=dtype, offsets=(0, 0), packed=ordered,
                                          quant=scheme)
    for t in tensors.values():  # codes without their scales: not a weight blockcli can run
        if t.quant is None and t.dtype in ("F8_E4M3", "F8_E5M2"):
            raise InputError(f"{t.file}: tensor '{t.name}' is stored as {t.dtype} without its scales "
                             f"('{t.name}_scale_inv' or '{t.name}_scale')")


_PART_NAMES = {
    ("fp8", ""): ("weight", "weight_scale_inv", "input_scale"),
    ("gptq", ""): ("qweight", "qzeros", "scales", "g_idx"),
    ("awq", ""): ("qweight", "qzeros", "scales"),
    ("compressed-tensors", "pack-quantized"): ("weight_packed", "weight_scale", "weight_zero_point", "weight_shape",
                                               "weight_g_idx"),
    ("compressed-tensors", "float-quantized"): ("weight", "weight_scale", "weight_zero_point", "input_scale"),
    ("compressed-tensors", "int-quantized"): ("weight", "weight_scale", "weight_zero_point", "input_scale",
                                              "input_zero_point", "weight_g_idx"),
}


def _scheme_for(module: str, schemes: list[Scheme], found: Stored) -> Scheme | None:
    if schemes[0].method != "compressed-tensors":
        return schemes[0]
    if _module_matches(module, schemes[0].ignore):
        raise InputError(f"{found.file}: tensor '{found.name}' is quantized, but the quantization_config's ignore "
                         f"list keeps module '{module}' unquantized")
    chosen = next((s for s in schemes if _module_matches(module, s.targets)), None)
    if chosen is None:
        raise InputError(f"{found.file}: tensor '{found.name}' is quantized, but no config_groups entry targets "
                         f"module '{module}'")
    return chosen


def _logical(module: str, parts: Mapping[str, Stored], s: Scheme,
             raw: Callable[[Stored], np.ndarray]) -> tuple[tuple[int, ...], str]:
    """The (…, out, in) shape the parts encode and the dtype name shown for it; every part's shape checked."""
    def need(part: str, dtypes: set[str] | None = None) -> Stored:
        if part not in parts:
            raise InputError(f"{next(iter(parts.values())).file}: quantized module '{module}' has no tensor "
                             f"'{module}.{part}' ({s.describe()})")
        t = parts[part]
        if dtypes is not None and t.dtype not in dtypes:
            raise InputError(f"{t.file}: tensor '{t.name}' is stored as {t.dtype}; {s.describe()} stores it as "
                             f"{' or '.join(sorted(dtypes))}")
        return t

    def fits(t: Stored, want: tuple[int, ...], what: str) -> None:
        if t.shape != want:
            raise InputError(f"{t.file}: tensor '{t.name}' has shape {t.shape}; {what} implies {want} "
                             f"({s.describe()})")

    if s.method == "fp8":
        w, scale = need("weight", {"F8_E4M3"}), need("weight_scale_inv", SCALE_DTYPES)
        if len(w.shape) < 2:
            raise InputError(f"{w.file}: tensor '{w.name}' has shape {w.shape}; an fp8 weight is a matrix")
        *lead, rows, cols = w.shape
        fits(scale, (*lead, math.ceil(rows / s.block[0]), math.ceil(cols / s.block[1])),
             f"its weight {w.shape} in {s.block[0]}x{s.block[1]} blocks")
        return w.shape, "F8_E4M3"
    if s.method in ("gptq", "awq"):
        q, zeros, scales = need("qweight", {"I32"}), need("qzeros", {"I32"}), need("scales", SCALE_DTYPES)
        if len(q.shape) != 2 or len(scales.shape) != 2:
            raise InputError(f"{q.file}: tensors '{q.name}' {q.shape} and '{scales.name}' {scales.shape}: expected "
                             f"two matrices ({s.describe()})")
        if s.method == "gptq":
            n_in, n_out = q.shape[0] * 32 // s.bits, q.shape[1]
            if q.shape[0] * 32 % s.bits:
                raise InputError(f"{q.file}: tensor '{q.name}' has {q.shape[0]} rows, not whole {s.bits}-bit codes")
        else:
            n_in, n_out = q.shape[0], q.shape[1] * 32 // s.bits
        groups = math.ceil(n_in / s.group) if s.group else 1
        fits(scales, (groups, n_out), f"a ({n_out}, {n_in}) weight in {groups} groups")
        fits(zeros, (groups, math.ceil(n_out * s.bits / 32)), f"a ({n_out}, {n_in}) weight in {groups} groups")
        if "g_idx" in parts:
            fits(need("g_idx", set(INT_DTYPES)), (n_in,), f"a weight of {n_in} inputs")
        return (n_out, n_in), f"{s.method.upper()}_INT{s.bits}"
    if s.form == "pack-quantized":
        packed, scale = need("weight_packed", {"I32"}), need("weight_scale", SCALE_DTYPES)
        shape_t = need("weight_shape", set(INT_DTYPES))
        fits(shape_t, (2,), "a matrix's (out, in)")
        shape = tuple(int(v) for v in raw(shape_t).view(INT_DTYPES[shape_t.dtype]))
        n_out, n_in = shape
        if n_out < 1 or n_in < 1:
            raise InputError(f"{shape_t.file}: tensor '{shape_t.name}' holds {shape}, not a matrix's (out, in)")
        fits(packed, (n_out, math.ceil(n_in * s.bits / 32)), f"weight_shape {shape} at {s.bits} bits")
        groups = math.ceil(n_in / s.group) if s.group else 1
        fits(scale, (n_out, groups), f"weight_shape {shape} in {groups} groups")
        if not s.symmetric:
            fits(need("weight_zero_point", {"I32"}), (math.ceil(n_out * s.bits / 32), groups),
                 f"weight_shape {shape} in {groups} groups")
        if s.act_order:
            fits(need("weight_g_idx", set(INT_DTYPES)), (n_in,), f"weight_shape {shape}'s {n_in} inputs")
        return shape, f"INT{s.bits}"
    integer = s.form == "int-quantized"  # the signed codes one I8 each; else float-quantized's FP8
    w, scale = need("weight", {"I8"} if integer else {"F8_E4M3"}), need("weight_scale", SCALE_DTYPES)
    if len(w.shape) != 2:
        raise InputError(f"{w.file}: tensor '{w.name}' has shape {w.shape}; an {'int' if integer else 'fp8'} "
                         f"weight is a matrix")
    n_out, n_in = w.shape
    groups = math.ceil(n_in / s.group) if s.group else 1
    if scale.size != 1:  # per tensor: one value, any shape of one element
        fits(scale, (n_out, groups), f"its weight {w.shape} " + (f"in {groups} groups" if s.group else "per channel"))
    if not s.symmetric:
        fits(need("weight_zero_point", {"I8"} if integer else None), scale.shape, "its scales")
    if s.act_order:
        fits(need("weight_g_idx", set(INT_DTYPES)), (n_in,), f"its weight's {n_in} inputs")
    return w.shape, f"INT{s.bits}" if integer else "F8_E4M3"


# ----------------------------------------------------------------------------- values


def _e4m3_table() -> np.ndarray:
    """The 256 values of an FP8 E4M3 (fn) code: sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 is
    subnormal (m/8 · 2^−6); S.1111.111 is NaN and there is no infinity (OCP 8-bit floating point, E4M3)."""
    import numpy as np

    codes = np.arange(256)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exponent, mantissa = (codes >> 3) & 0xF, codes & 0x7
    value = np.where(exponent == 0, mantissa / 8 * 2.0 ** -6, (1 + mantissa / 8) * 2.0 ** (exponent - 7))
    value = sign * value
    value[(codes & 0x7F) == 0x7F] = np.nan
    return value


def unpack_bits(words: np.ndarray, bits: int, count: int) -> np.ndarray:
    """The first `count` b-bit codes of each row's little-endian bit stream of int32 `words` (…, n): code i
    holds bits i·b … i·b + b − 1 of the stream, word 0's least significant bit first. Codes as uint8: a 4096 ×
    11008 matrix's are 45 MB, not the 360 MB of int64."""
    import numpy as np

    data = np.ascontiguousarray(np.ascontiguousarray(words).astype("<i4", copy=False).view(np.uint8))  # (…, 4n)
    if bits == 8:
        return data[..., :count]
    if bits == 4:
        nibbles = np.stack([data & 0x0F, data >> 4], axis=-1).reshape(*data.shape[:-1], -1)
        return nibbles[..., :count]
    stream = np.unpackbits(data, axis=-1, bitorder="little")[..., :count * bits]  # (…, count·b) bits
    stream = stream.reshape(*stream.shape[:-1], count, bits)
    codes = stream[..., 0].copy()
    for k in range(1, bits):
        codes |= stream[..., k] << k
    return codes


def stored_bytes(t: Stored) -> dict[str, int]:
    """Bytes on disk of a tensor's parts by role: codes, scales, zeros, g_idx, shape (one entry for a float)."""
    parts = t.packed if t.quant is not None else (t,)
    out: dict[str, int] = {}
    for p in parts:
        role = ROLES.get(p.name.rsplit(".", 1)[-1], "codes") if t.quant is not None else "codes"
        out[role] = out.get(role, 0) + p.offsets[1] - p.offsets[0]
    return out


def dequantize(t: Stored, dtype: str, raw: Callable[[Stored], np.ndarray],
               read: Callable[[Stored], np.ndarray]) -> np.ndarray:
    """One quantized tensor's values (…, out, in), computed in `dtype` (float32 or float64); finite only (a scale
    that takes a value past the dtype's range is refused in one line, without a RuntimeWarning)."""
    import numpy as np

    with np.errstate(over="ignore", invalid="ignore"):
        out = _dequantized(t, dtype, raw, read)
    if not np.all(np.isfinite(out)):
        raise InputError(f"{t.file}: quantized tensor '{t.name}' dequantizes to NaN or Inf (in {dtype})")
    return out


def _dequantized(t: Stored, dtype: str, raw: Callable[[Stored], np.ndarray],
                 read: Callable[[Stored], np.ndarray]) -> np.ndarray:
    import numpy as np

    s: Scheme = t.quant
    parts = {p.name.rsplit(".", 1)[-1]: p for p in t.packed}

    def values(name: str) -> np.ndarray:  # a float part in the run's dtype
        return read(parts[name]).astype(dtype, copy=False)

    def ints(name: str) -> np.ndarray:
        p = parts[name]
        return raw(p).view(INT_DTYPES[p.dtype]).reshape(p.shape)

    index = None  # compressed-tensors' act-order: each input's group
    if s.method == "compressed-tensors" and s.act_order:
        index = ints("weight_g_idx").astype(np.int64)
        groups = parts["weight_scale"].shape[-1]
        if index.min(initial=0) < 0 or index.max(initial=0) >= groups:
            raise InputError(f"{parts['weight_g_idx'].file}: tensor '{parts['weight_g_idx'].name}' names groups "
                             f"outside 0..{groups - 1}")
    if s.form == "int-quantized":  # codes and zero points signed integers, exact in either dtype
        q = ints("weight").astype(dtype)  # (out, in)
        if not s.symmetric:
            q -= _spread(ints("weight_zero_point").astype(dtype), s, t.shape[1], index)
        out = _grouped(q, values("weight_scale"), s, index)
    elif s.method == "fp8" or s.form == "float-quantized":
        codes = raw(parts["weight"]).reshape(t.shape)
        w = _e4m3_table().astype(dtype)[codes]  # (…, out, in)
        if np.isnan(w).any():
            raise InputError(f"{parts['weight'].file}: tensor '{parts['weight'].name}' holds an FP8 NaN code")
        if s.method == "fp8":
            scale = values("weight_scale_inv")  # (…, ⌈out/R⌉, ⌈in/C⌉)
            rows, cols = t.shape[-2:]
            scale = np.repeat(np.repeat(scale, s.block[0], axis=-2)[..., :rows, :], s.block[1], axis=-1)[..., :cols]
            out = w * scale
        else:
            out = _grouped(w - (values("weight_zero_point") if not s.symmetric else 0), values("weight_scale"), s,
                           index)
    elif s.method == "gptq":
        n_out, n_in = t.shape
        q = unpack_bits(ints("qweight").T, s.bits, n_in)  # (out, in) codes
        z = unpack_bits(ints("qzeros"), s.bits, n_out).astype(dtype) + s.zero_offset  # (G, out), unmasked + 1
        g = ints("g_idx").astype(np.int64) if "g_idx" in parts else np.arange(n_in) // (s.group or n_in)
        groups = parts["scales"].shape[0]
        if g.min(initial=0) < 0 or g.max(initial=0) >= groups:
            raise InputError(f"{parts['g_idx'].file}: tensor '{parts['g_idx'].name}' names groups outside "
                             f"0..{groups - 1}")
        out = q.astype(dtype)  # (out, in); the integers are exact in either dtype, so is q − z
        out -= z.T[:, g]
        out *= values("scales").T[:, g]
    elif s.method == "awq":
        n_out, n_in = t.shape
        reverse = np.argsort(AWQ_ORDER)  # column c of a word is its nibble reverse[c]
        q = unpack_bits(ints("qweight"), 4, n_out).reshape(n_in, -1, 8)[..., reverse].reshape(n_in, n_out)
        zeros = ints("qzeros")
        z = unpack_bits(zeros, 4, n_out).reshape(zeros.shape[0], -1, 8)[..., reverse].reshape(zeros.shape[0], n_out)
        g = np.arange(n_in) // (s.group or n_in)
        out = q.astype(dtype)  # (in, out)
        out -= z.astype(dtype)[g]
        out *= values("scales")[g]
        out = out.T  # (out, in)
    else:  # compressed-tensors pack-quantized
        n_out, n_in = t.shape
        offset = 1 << (s.bits - 1)
        q = unpack_bits(ints("weight_packed"), s.bits, n_in).astype(dtype)  # (out, in) codes
        q -= offset  # signed
        if not s.symmetric:
            zp = unpack_bits(ints("weight_zero_point").T, s.bits, n_out).T.astype(dtype) - offset  # (out, G)
            q -= _spread(zp, s, n_in, index)
        out = _grouped(q, values("weight_scale"), s, index)
    return out


def _spread(per_group: np.ndarray, s: Scheme, n_in: int, index: np.ndarray | None = None) -> np.ndarray:
    """(out, G) → (out, in): each input takes its group's value (G = 1: the row's); `index` the group of each
    input (act-order's weight_g_idx), else i // group_size."""
    import numpy as np

    if per_group.size == 1:
        return per_group.reshape(1, 1)
    return per_group[:, index if index is not None else np.arange(n_in) // (s.group or n_in)]


def _grouped(w: np.ndarray, scale: np.ndarray, s: Scheme, index: np.ndarray | None = None) -> np.ndarray:
    return w * _spread(scale.reshape(-1, scale.shape[-1]) if scale.ndim else scale.reshape(1, 1), s, w.shape[-1],
                       index)
