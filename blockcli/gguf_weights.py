"""A GGUF file's tensors under blockcli's keys: matched through llama.cpp's name table, reconciled for
`count` from the header alone, and dequantized one at a time (`blockcli.gguf_file` reads the header and
the metadata, and says what the converter changed that is undone here).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from blockcli.checkpoint import (Checkpoint, Match, Stored, _entries, _in_run_dtype, _unpack, match_tensors, one_layer,
                                 stored_sizes)
from blockcli.config import Config, InputError, reading
from blockcli.families import FAMILIES
from blockcli.gguf_file import ROPE_FACTORS, Arch, GGUFFile, GGUFTensor, arch_of, gguf_config, read_gguf

if TYPE_CHECKING:
    import numpy as np

    from blockcli.tensor_names import TensorMap



@dataclass(frozen=True)
class View:
    """How a transformers tensor is read from the file: which GGUF tensor (and expert slice), and what to undo."""

    source: GGUFTensor
    undo: str = ""  # "", "permute", "minus_one", "transpose", "regroup", "interleave", "swap", "kv_b"
    heads: int = 0  # for "permute": Q's heads or K's K/V heads; for "regroup": Q's heads
    kv_heads: int = 0  # for "regroup": the K/V heads
    other: GGUFTensor | None = None  # for "interleave": up, beside `source` gate; for "kv_b": v_b beside k_b


def _names(g: GGUFFile, arch: Arch, tmap: TensorMap, n_layers: int, n_experts: int
           ) -> tuple[dict[str, str], dict[str, str]]:
    """transformers name → GGUF name, for every tensor of the family's map, through llama.cpp's own table; and
    each transformers name's entry (its alternatives `a|b` share one)."""
    import gguf


    model_arch = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == g.arch)
    table = gguf.get_tensor_name_map(model_arch, n_layers)
    out: dict[str, str] = {}
    entries: dict[str, str] = {}
    for entry in _entries(tmap, n_layers, n_experts):
        for alt in entry.name.split("|"):
            full = alt if entry.top else tmap.prefix + alt
            entries[full] = entry.name
            found = table.get_name(full, try_suffixes=(".weight", ".bias"))
            if found is None and full.endswith("_bias"):  # DeepSeek's e_score_correction_bias: exp_probs_b.bias
                found = table.get_name(full[:-len("_bias")] + ".bias", try_suffixes=(".bias",))
            if found is not None and found not in g.tensors and found + ".weight" in g.tensors:
                found += ".weight"  # a parameter without a suffix (gpt-oss's sinks) the converter named .weight
            if found is not None:
                out[full] = found
            elif full.endswith("experts.gate_up_proj") and (layer := re.search(r"layers\.(\d+)\.", full)):
                # the converter's --fuse-gate-up-exps: gate | up per expert, (E, 2·d_e, d), transformers 5's own
                fused = gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.FFN_GATE_UP_EXP].format(bid=layer[1]) + ".weight"
                if fused in g.tensors:
                    out[full] = fused
    return out, entries


def gguf_checkpoint(g: GGUFFile, config: Config) -> tuple[Checkpoint, TensorMap, dict[str, View]]:
    """The file's tensors under transformers' names (shapes as transformers holds them), the family's map,
    and how to read each one."""

    arch = arch_of(g)
    tmap = FAMILIES[arch.model_type].tensors
    assert config.model is not None
    moe = config.block.moe
    n_experts = moe.n_experts if moe is not None else 0
    names, entries = _names(g, arch, tmap, config.model.n_layers, n_experts)
    by_gguf: dict[str, list[str]] = {}
    for hf, gg in names.items():
        by_gguf.setdefault(gg, []).append(hf)
    tensors: dict[str, Stored] = {}
    views: dict[str, View] = {}
    b = config.block
    split = _split_experts(g, tmap, config.model.n_layers, n_experts, tensors, views)
    if arch.split_interleaved:
        split |= _interleaved_experts(g, tmap, config.model.n_layers, tensors, views)
    if arch.split_kv_b:
        split |= _joined_kv_b(g, tmap, config.model.n_layers, tensors, views)
    filled: set[str] = set()  # entries read: a GGUF name that could be either of two is the one still missing
    # (Falcon's `attn_norm` is input_layernorm with one norm, ln_mlp beside `attn_norm_2`, ln_attn, with two)
    ordered = sorted(g.tensors.items(), key=lambda item: len(by_gguf.get(item[0], ())) > 1)
    for gname, t in ordered:
        if gname in split or gname in ROPE_FACTORS:  # LongRoPE's factors: read into the config, not weights
            continue
        hf_names = by_gguf.get(gname)
        if hf_names is None:
            tensors[gname] = Stored(gname, t.shape, t.qtype, g.path, (t.begin, t.end))  # unexpected: named
            views[gname] = View(t)
            continue
        for hf in hf_names:  # several: one GGUF name for either form (per expert or fused)
            if hf in tensors or entries[hf] in filled:
                continue
            filled.add(entries[hf])
            view, shape = View(t), t.shape
            if arch.permuted_qk and hf.endswith(("q_proj.weight", "q_proj.bias")):
                view = View(t, "permute", b.n_heads)
            elif arch.permuted_qk and hf.endswith(("k_proj.weight", "k_proj.bias")):
                view = View(t, "permute", b.n_kv_heads)
            elif arch.norm_plus_one and hf.endswith("norm.weight"):
                view = View(t, "minus_one")
            elif arch.ungrouped_qkv and hf.endswith(("query_key_value.weight", "query_key_value.bias")):
                view = View(t, "regroup", b.n_heads, b.n_kv_heads)
            elif hf.endswith(arch.conv1d):
                view, shape = View(t, "transpose"), t.shape[::-1]
            elif hf.endswith("shared_expert_gate.weight") and len(t.shape) == 1:
                shape = (1, *t.shape)  # llama.cpp's vector {d}: transformers' nn.Linear(d, 1), the same bytes
            tensors[hf] = Stored(hf, shape, t.qtype, g.path, (t.begin, t.end))
            views[hf] = view
            break
        else:  # every entry it could be is read already: one tensor too many, named as unexpected
            tensors[gname] = Stored(gname, t.shape, t.qtype, g.path, (t.begin, t.end))
            views[gname] = View(t)
    return Checkpoint(g.path.parent, None, (g.path,), tensors), tmap, views


# a per-expert matrix's module name in transformers → the GGUF tensor that holds every expert's, (E, out, in)
MERGED_EXPERTS = {"gate_proj": "ffn_gate_exps", "up_proj": "ffn_up_exps", "down_proj": "ffn_down_exps",
                  "w1": "ffn_gate_exps", "w3": "ffn_up_exps", "w2": "ffn_down_exps"}
PER_EXPERT = re.compile(r"(?:.*\.)?layers\.(\d+)\..*experts\.(\d+)\.(\w+)\.weight")


def _split_experts(g: GGUFFile, tmap: TensorMap, n_layers: int, n_experts: int, tensors: dict[str, Stored],
                   views: dict[str, View]) -> set[str]:
    """llama.cpp merges a layer's experts into one tensor per matrix (`blk.N.ffn_gate_exps` (E, d_e, d) …):
    each expert's (out, in) slice is read under the family's per-expert name, from its own contiguous bytes
    (a quantized block never spans two rows). The merged tensors so read are returned."""

    used: set[str] = set()
    for entry in _entries(tmap, n_layers, n_experts):
        name = tmap.prefix + entry.name.split("|")[0] if not entry.top else entry.name
        found = PER_EXPERT.fullmatch(name)
        if found is None or found[3] not in MERGED_EXPERTS:
            continue
        layer, expert, module = int(found[1]), int(found[2]), found[3]
        merged = g.tensors.get(f"blk.{layer}.{MERGED_EXPERTS[module]}.weight")
        if merged is None:
            continue
        if len(merged.shape) != 3 or merged.shape[0] != n_experts:
            raise InputError(f"{g.path}: tensor '{merged.name}' has shape {merged.shape}; {n_experts} merged "
                             f"experts (E, out, in) expected")
        per = merged.nbytes // n_experts
        begin = merged.begin + expert * per
        tensors[name] = Stored(name, merged.shape[1:], merged.qtype, g.path, (begin, begin + per))
        views[name] = View(merged)
        used.add(merged.name)
    return used


def _interleaved_experts(g: GGUFFile, tmap: TensorMap, n_layers: int, tensors: dict[str, Stored],
                         views: dict[str, View]) -> set[str]:
    """gpt-oss: each layer's `gate_up_proj` (E, d, 2·d_e), gate and up interleaved along the last axis (its bias
    (E, 2·d_e) the same), read from `ffn_gate_exps` and `ffn_up_exps` (E, d_e, d) (biases (E, d_e)); `down_proj`
    (E, d_e, d) from `ffn_down_exps` (E, d, d_e). A pair's bytes are counted as one tensor's (its offsets span
    the two lengths; its values are read from each source's own). The GGUF tensors so read are returned."""
    used: set[str] = set()
    for i in range(n_layers):
        base, blk = f"{tmap.prefix}layers.{i}.mlp.experts.", f"blk.{i}."
        for suffix, kind in ((".weight", ""), (".bias", "_bias")):
            gate, up = g.tensors.get(f"{blk}ffn_gate_exps{suffix}"), g.tensors.get(f"{blk}ffn_up_exps{suffix}")
            if gate is not None and up is not None and gate.shape == up.shape and gate.qtype == up.qtype:
                name = f"{base}gate_up_proj{kind}"
                lead = gate.shape[:-2] + gate.shape[-1:] if kind == "" else gate.shape[:-1]  # (E, d) or (E,)
                shape = (*lead, 2 * (gate.shape[-2] if kind == "" else gate.shape[-1]))
                tensors[name] = Stored(name, shape, gate.qtype, g.path, (gate.begin, gate.begin + gate.nbytes
                                                                          + up.nbytes))
                views[name] = View(gate, "interleave", other=up)
                used |= {gate.name, up.name}
            down = g.tensors.get(f"{blk}ffn_down_exps{suffix}")
            if down is not None:
                name = f"{base}down_proj{kind}"
                swap = kind == "" and len(down.shape) == 3
                shape = (*down.shape[:-2], down.shape[-1], down.shape[-2]) if swap else down.shape
                tensors[name] = Stored(name, shape, down.qtype, g.path, (down.begin, down.end))
                views[name] = View(down, "swap" if swap else "")
                used.add(down.name)
    return used


def _joined_kv_b(g: GGUFFile, tmap: TensorMap, n_layers: int, tensors: dict[str, Stored],
                 views: dict[str, View]) -> set[str]:
    """DeepSeek's MLA: each layer's kv_b_proj (h·(d_nope + d_v), r), per head its d_nope K rows then its d_v V
    rows, read from `attn_k_b` (h, r, d_nope) (each head's K rows transposed) and `attn_v_b` (h, d_v, r); files
    of older converters store `attn_kv_b` itself, read as it is. The GGUF tensors so read are returned."""
    used: set[str] = set()
    for i in range(n_layers):
        k_b, v_b = g.tensors.get(f"blk.{i}.attn_k_b.weight"), g.tensors.get(f"blk.{i}.attn_v_b.weight")
        if k_b is None or v_b is None or len(k_b.shape) != 3 or len(v_b.shape) != 3:
            continue
        (h, rank, nope), (h_v, d_v, rank_v) = k_b.shape, v_b.shape
        if (h, rank) != (h_v, rank_v) or k_b.qtype != v_b.qtype:
            raise InputError(f"{g.path}: tensors '{k_b.name}' {k_b.shape} and '{v_b.name}' {v_b.shape}: expected "
                             f"(h, r, d_nope) and (h, d_v, r) of one kv_b_proj, in one type")
        name = f"{tmap.prefix}layers.{i}.self_attn.kv_b_proj.weight"
        tensors[name] = Stored(name, (h * (nope + d_v), rank), k_b.qtype, g.path,
                               (k_b.begin, k_b.begin + k_b.nbytes + v_b.nbytes))  # the two lengths, as one
        views[name] = View(k_b, "kv_b", other=v_b)
        used |= {k_b.name, v_b.name}
    return used


def _dequantized(t: GGUFTensor, file: Path, begin: int, end: int, shape: tuple[int, ...]) -> np.ndarray:
    """Bytes begin..end of `file` (tensor `t`'s, or one expert's of them) dequantized to float32 `shape`."""
    import gguf
    import numpy as np

    with reading(file, "a .gguf file"), open(file, "rb") as f:
        f.seek(begin)
        raw = np.frombuffer(f.read(end - begin), dtype=np.uint8)
    if raw.size != end - begin:
        raise InputError(f"{file}: tensor '{t.name}' is cut short (file truncated)")
    qtype = gguf.GGMLQuantizationType[t.qtype]
    try:
        values = gguf.quants.dequantize(raw.reshape(gguf.quant_shape_to_byte_shape(shape, qtype)), qtype)
    except NotImplementedError:
        raise InputError(f"{file}: tensor '{t.name}' is stored as {t.qtype}, which the gguf package "
                         f"cannot dequantize") from None
    return np.asarray(values, dtype=np.float32).reshape(shape)


def read_view(stored: Stored, view: View) -> np.ndarray:
    """One tensor's values in float32, dequantized by the gguf package and its converter's change undone."""
    import numpy as np

    t = view.source
    if view.undo in ("interleave", "swap", "kv_b"):  # whole GGUF tensors, in their own shapes
        values = _dequantized(t, stored.file, t.begin, t.end, t.shape)
        if view.undo == "kv_b":  # (h, r, d_nope) and (h, d_v, r) → per head [K rows; V rows] (h·(d_nope + d_v), r)
            v = _dequantized(view.other, stored.file, view.other.begin, view.other.end, view.other.shape)
            values = np.concatenate([values.swapaxes(1, 2), v], axis=1).reshape(stored.shape)
        elif view.undo == "swap":
            values = values.swapaxes(-1, -2)  # (E, d, d_e) → (E, d_e, d)
        else:
            up = _dequantized(view.other, stored.file, view.other.begin, view.other.end, view.other.shape)
            if values.ndim == 3:  # (E, d_e, d) → (E, d, d_e)
                values, up = values.swapaxes(-1, -2), up.swapaxes(-1, -2)
            both = np.empty((*values.shape[:-1], 2 * values.shape[-1]), dtype=np.float32)
            both[..., 0::2], both[..., 1::2] = values, up  # gate in the even columns, up in the odd ones
            values = both
        if not np.all(np.isfinite(values)):
            raise InputError(f"{stored.file}: tensor '{t.name}' contains NaN or Inf")
        return np.ascontiguousarray(values)
    begin, end = stored.offsets
    shape = stored.shape[::-1] if view.undo == "transpose" else stored.shape
    values = _dequantized(t, stored.file, begin, end, shape)
    if view.undo == "permute":  # (h, d_h/2, 2, …) → (h, 2, d_h/2, …): back to rotate-half pairs
        h = view.heads
        values = values.reshape(h, shape[0] // h // 2, 2, *shape[1:]).swapaxes(1, 2).reshape(shape)
    elif view.undo == "regroup":  # Q | K | V → per K/V head its queries, its K, its V, each d_h rows
        h, kv = view.heads, view.kv_heads
        d_h = shape[0] // (h + 2 * kv)
        q = values[:h * d_h].reshape(kv, h // kv, d_h, *shape[1:])
        k = values[h * d_h:(h + kv) * d_h].reshape(kv, 1, d_h, *shape[1:])
        v = values[(h + kv) * d_h:].reshape(kv, 1, d_h, *shape[1:])
        values = np.concatenate([q, k, v], axis=1).reshape(shape)
    elif view.undo == "minus_one":
        values = values - np.float32(1)
    elif view.undo == "transpose":
        values = values.T
    if not np.all(np.isfinite(values)):
        raise InputError(f"{stored.file}: tensor '{t.name}' contains NaN or Inf")
    return np.ascontiguousarray(values)


# ----------------------------------------------------------------------------- count and load


def stored_summary(matches: list[Match], views: dict[str, View]) -> dict[str, Any]:
    """Per tensor group (token embedding, attention, MLP, experts, norms, LM head): its ggml types, stored
    bytes and weights; and the file's bits per weight over the tensors the model uses."""
    groups: dict[str, dict[str, Any]] = {}
    for m in matches:
        t = views[m.stored.name].source
        group = _group(t.name)
        row = groups.setdefault(group, {"types": {}, "bytes": 0, "weights": 0})
        row["types"][t.qtype] = row["types"].get(t.qtype, 0) + m.stored.size
        row["bytes"] += m.stored.offsets[1] - m.stored.offsets[0]
        row["weights"] += m.stored.size
    total_bytes = sum(r["bytes"] for r in groups.values())
    weights = sum(r["weights"] for r in groups.values())
    return {"groups": groups, "bytes": total_bytes, "weights": weights,
            "bits_per_weight": 8 * total_bytes / weights if weights else 0.0}


GROUPS = (("token_embd", "token embedding"), ("position_embd", "position embedding"), ("output_norm", "norms"),
          ("output", "LM head"), ("_norm", "norms"), ("attn_", "attention"), ("_exps", "routed experts"),
          ("_shexp", "shared expert"), ("ffn_gate_inp", "router"), ("exp_probs_b", "router"), ("ffn_", "MLP"))


def _group(name: str) -> str:
    parts = name.split(".")
    base = parts[2] if parts[0] == "blk" and len(parts) > 2 else parts[0]
    return next((label for key, label in GROUPS if (key in base if key.startswith("_") or key.endswith("_")
                                                    else base == key)), "other")


def gguf_sizes(path: Path, config: Config) -> tuple[dict[str, int], dict[str, Any]]:
    """For `count`: stored sizes under blockcli's keys, and the file's description, from the header alone."""

    g = read_gguf(path)
    ckpt, tmap, views = gguf_checkpoint(g, config)
    matches, notes, _ = match_tensors(ckpt, config, tmap)
    summary = stored_summary(matches, views)
    types: dict[str, int] = {}
    for row in summary["groups"].values():
        for name, n in row["types"].items():
            types[name] = types.get(name, 0) + n
    info = {"path": str(path), "files": [path.name], "tensors": len(g.tensors), "bytes_on_disk": g.size,
            "stored_dtypes": types, "notes": notes, "gguf": summary}
    return stored_sizes(matches), info


def load_gguf_weights(path: Path, config: Config | None, dtype: str, notes: list[str], *, one_block: bool = False,
                      layer: int | None = None) -> dict[str, np.ndarray]:
    """The model's parameters under blockcli's keys, dequantized tensor by tensor (as `load_weights`)."""

    g = read_gguf(path)
    if config is None or config.model is None:
        config = gguf_config(path)
    assert config.model is not None
    ckpt, tmap, views = gguf_checkpoint(g, config)
    matches, found, _ = match_tensors(ckpt, config, tmap)
    notes.extend(found)
    matches, prefix = one_layer(matches, path, config, layer, notes) if one_block else (matches, "")
    params = {}
    for m in matches:
        value = _in_run_dtype(read_view(m.stored, views[m.stored.name]), dtype, m.stored)
        for key, part in zip(m.entry.keys, _unpack(value, m.entry.layout, config.block.n_heads, m.parts)):
            params[key[len(prefix):]] = part
    types = sorted({m.stored.dtype for m in matches})
    notes.append(f"GGUF tensors ({', '.join(types)}) dequantized by the gguf package to float32"
                 + (f", then {dtype}" if dtype != "float32" else ""))
    return params
