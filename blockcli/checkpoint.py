"""Hugging Face model folders: `config.json` beside safetensors weights, single file or sharded.

`open_checkpoint(path)` finds the files and reads every tensor's name, shape and dtype from the
headers alone (no tensor data): that is all `count` needs, so a 7B checkpoint counts in
milliseconds. `match_tensors` lines the stored tensors up with the keys a config calls for,
through the family's `TensorMap` (`blockcli.tensor_names`), and names every stored tensor the
map does not account for, every expected one that is missing and every shape that contradicts
config.json. `load_model_weights` then reads the values under blockcli's keys.

The `safetensors` package (the format's own library) validates each file and reads tensors;
NumPy has no bfloat16, so BF16 tensors are read as raw 16-bit words and widened to float32
exactly (a bfloat16 is the top half of a float32). gpt-oss's published folders store each expert
matrix as an MXFP4 pair, `<name>_blocks` (…, rows, G, 16) bytes of two 4-bit E2M1 values each (low
nibble first) and `<name>_scales` (…, rows, G) biased power-of-two exponents, one per 32 values:
they are read as one tensor `<name>` of the shape transformers dequantizes them to, (…, G·32, rows)
(its last two axes swapped), and dequantized exactly. Pickled checkpoints (`pytorch_model.bin`,
`.pt`, `.pth`) are refused, never unpickled.
"""

from __future__ import annotations

import functools
import json
import math
import re
import struct
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, NamedTuple

from blockcli.config import Config, InputError, parse_json, read_text_file, reading, regular_file
from blockcli.sources import load_config
from blockcli.families import COMPOSITES, FAMILIES
from blockcli.quantized import SUPPORTED, pair_quantized, schemes_of, stored_bytes
from blockcli.shapes import Shape, is_buffer, model_parameter_shapes
from blockcli.tensor_names import (DEPTHWISE, EXPERTS, EXPERTS_INTERLEAVED, EXPERTS_SIDE_BY_SIDE, FUSED, GROUPED_HEADS,
                                   GROUPED_KEY_HEADS, GROUPED_QKV, HEAD_ROW, LINEAR, PER_HEAD, QVK_SHARDS, ROW, SAME,
                                   SCALAR, SHARDED_QVK, SPLIT, STACKED, Tensor, TensorMap, nested)

if TYPE_CHECKING:
    import numpy as np  # imported where values are read: counting from headers needs no NumPy

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
PICKLED = ("*.bin", "*.pt", "*.pth", "*.ckpt")
# safetensors dtype → bytes per element, for the dtypes blockcli can run (others are refused on load)
FLOAT_DTYPES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2}
FLOAT_DTYPE_OF = {"float64": "F64", "float32": "F32"}  # a run's dtype as safetensors names it


class Stored(NamedTuple):
    """One tensor as its file's header describes it (a named tuple: a checkpoint may hold hundreds of
    thousands, and a frozen dataclass takes three times as long to build)."""

    name: str
    shape: Shape
    dtype: str  # safetensors' name: F32, BF16, ...; MXFP4 for a pair of _blocks and _scales
    file: Path
    offsets: tuple[int, int] = (0, 0)  # where its bytes lie in `file` (from the start of the file)
    packed: tuple[Stored, ...] = ()  # an MXFP4 tensor's stored pair (_blocks, _scales), a quantized one's parts
    quant: Any = None  # a quantized module's `blockcli.quantized.Scheme` (its parts in `packed`)

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class Checkpoint:
    folder: Path
    config_file: Path | None  # config.json, when there is one
    files: tuple[Path, ...]  # the safetensors files, in index order
    tensors: dict[str, Stored]  # every stored tensor by name, from the headers

    @property
    def disk_bytes(self) -> int:
        return sum(f.stat().st_size for f in self.files)

    @property
    def dtypes(self) -> dict[str, int]:
        """Stored dtype → number of elements stored in it."""
        out: dict[str, int] = {}
        for t in self.tensors.values():
            out[t.dtype] = out.get(t.dtype, 0) + t.size
        return out

    def describe(self) -> str:
        files = self.files[0].name if len(self.files) == 1 else f"{len(self.files)} shards"
        return f"{self.folder} ({files})"


# ----------------------------------------------------------------------------- finding the files


def is_checkpoint_path(path: Path) -> bool:
    """A model folder, a .safetensors file or a GGUF file (rather than a YAML/JSON config or an .npz)."""
    return path.is_dir() or path.suffix.lower() in (".safetensors", ".gguf")


def weight_files(path: Path) -> tuple[Path, ...]:
    """The safetensors files of a folder (through its index when sharded) or the one file given."""
    return _located(path)[0]


def _located(path: Path) -> tuple[tuple[Path, ...], dict[str, Path] | None]:
    """The weight files under `path`, and the index's tensor name → shard when a folder has one (read once).

    Every entry of a folder that looks like weights (the index, each *.safetensors) must be a readable regular
    file: a directory, a dangling link or a link loop under such a name is an error naming it, never a folder
    that "holds no weights" (which would run, count and verify seeded weights instead)."""
    if not path.is_dir():
        if not regular_file(path, "a .safetensors file"):
            raise InputError(f"{path}: file not found")
        return (path,), None
    index = path / INDEX
    found = sorted(p for p in path.glob("*.safetensors") if regular_file(p, "a .safetensors file"))
    if regular_file(index, "a safetensors index"):
        listed = _read_index(index)
        return tuple(dict.fromkeys(listed.values())), listed
    if path / SINGLE in found:
        return (path / SINGLE,), None
    if found:
        return tuple(found), None
    pickled = sorted(p.name for pattern in PICKLED for p in path.glob(pattern))
    if pickled:
        raise InputError(f"{path}: holds {pickled[0]}, a pickled PyTorch checkpoint, which blockcli never loads "
                         f"(unpickling can run code); convert it to safetensors first, e.g. "
                         f"model.save_pretrained(folder) with transformers")
    return (), None


MAX_INDEX_BYTES = 100_000_000  # as large as a safetensors header may be; a real index is at most a few MB


def _read_index(index: Path) -> dict[str, Path]:
    """tensor name → shard file, from model.safetensors.index.json; every shard must exist."""
    data = parse_json(read_text_file(index, "a safetensors index (JSON)", MAX_INDEX_BYTES, InputError), str(index),
                      InputError)
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise InputError(f"{index}: expected an object with a non-empty 'weight_map' of tensor name → shard file")
    files: dict[str, Path] = {}  # each shard checked once
    for name, shard in weight_map.items():
        if isinstance(shard, str) and shard in files:
            continue
        if not isinstance(shard, str) or Path(shard).name != shard or shard == "..":
            raise InputError(f"{index}: tensor '{name}' maps to {shard!r}, expected a file name in this folder")
        files[shard] = index.parent / shard
        if not regular_file(files[shard], f"shard {shard} (a .safetensors file)"):
            raise InputError(f"{index}: names shard {shard} (for tensor '{name}'), which is not in {index.parent}")
    return {name: files[shard] for name, shard in weight_map.items()}


def open_checkpoint(path: str | Path) -> Checkpoint:
    """Headers of every weight file under `path` (a folder or a .safetensors file): no data read."""
    path = Path(path)
    folder = path if path.is_dir() else path.parent
    files, listed = _located(path)
    index = folder / INDEX
    config = folder / "config.json"
    tensors: dict[str, Stored] = {}
    for file in files:
        found = _header(file)
        twice = found.keys() & tensors.keys()
        if twice:
            name = min(twice)
            raise InputError(f"{file}: tensor '{name}' is stored twice (also in {tensors[name].file})")
        tensors.update(found)
    if listed is not None:
        for name, shard in listed.items():
            if name not in tensors or tensors[name].file is not shard:  # the same Path objects: _located's
                raise InputError(f"{index}: lists tensor '{name}' in {shard.name}, but that file's header has no such "
                                 f"tensor")
        unlisted = [n for n in tensors if n not in listed]
        if unlisted:
            raise InputError(f"{tensors[unlisted[0]].file}: tensor '{unlisted[0]}' is not listed in {INDEX}")
    _pair_mxfp4(tensors)
    own_config = regular_file(config, "a Hugging Face config.json")  # a directory named config.json: named
    if own_config and (schemes := schemes_of(folder)):  # fp8, gptq, awq, compressed-tensors: one tensor a module
        pair_quantized(tensors, schemes, _raw)
    return Checkpoint(folder, config if own_config else None, files, tensors)


def _pair_mxfp4(tensors: dict[str, Stored]) -> None:
    """Replace each MXFP4 pair, `<name>_blocks` (…, rows, G, 16) and `<name>_scales` (…, rows, G), both U8, by one
    tensor `<name>` of dtype MXFP4 and its dequantized shape (…, G·32, rows)."""
    for name in [n for n in tensors if n.endswith("_blocks")]:
        blocks, base = tensors[name], name[:-len("_blocks")]
        scales = tensors.get(base + "_scales")
        if scales is None or blocks.dtype != "U8" or scales.dtype != "U8":
            continue
        if len(blocks.shape) < 3 or blocks.shape[-1] != 16 or blocks.shape[:-1] != scales.shape:
            raise InputError(f"{blocks.file}: tensors '{name}' {blocks.shape} and '{base}_scales' {scales.shape} are "
                             f"not an MXFP4 pair (blocks (…, rows, G, 16) beside scales (…, rows, G))")
        if base in tensors:
            raise InputError(f"{blocks.file}: tensor '{base}' is stored twice (also as the MXFP4 pair '{name}')")
        *prefix, rows, groups, _ = blocks.shape
        tensors[base] = Stored(base, (*prefix, groups * 32, rows), "MXFP4", blocks.file, packed=(blocks, scales))
        del tensors[name], tensors[base + "_scales"]


def _header(file: Path) -> dict[str, Stored]:
    """Every tensor of one file by name, from its header, parsed once: the offsets kept let each tensor's bytes
    be read later without parsing the header again (a header may be up to 100 MB)."""
    from safetensors import SafetensorError, safe_open

    with reading(file, "a .safetensors file"):
        try:
            with safe_open(str(file), framework="np"):  # the format's own library validates header and extent
                pass
        except SafetensorError as exc:
            raise InputError(f"{file}: not a valid safetensors file ({exc})") from None
        with open(file, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header: dict[str, Any] = json.loads(f.read(length))  # valid: safetensors has just parsed it
    header.pop("__metadata__", None)
    start = 8 + length  # data offsets count from the end of the header
    return {name: Stored._make((name, tuple(e["shape"]), e["dtype"], file,
                                (start + e["data_offsets"][0], start + e["data_offsets"][1]), (), None))
            for name, e in header.items()}


# ----------------------------------------------------------------------------- matching names


@dataclass(frozen=True)
class Match:
    """A stored tensor and the blockcli keys it fills."""

    entry: Tensor  # with {i} filled in
    stored: Stored
    parts: tuple[Shape, ...] = ()  # the shape blockcli holds each key in, in entry.keys order


def tensor_map_of(ckpt: Checkpoint) -> TensorMap:
    """How the tensors are named, by the model_type its config.json names (a vision-language
    model's: its text_config's, nested); a checkpoint without one must use blockcli's own keys."""
    if ckpt.config_file is None:
        raise InputError(f"{ckpt.describe()}: no config.json beside the weights, so its tensor names cannot be "
                         f"mapped; put the model's config.json beside it")
    data = parse_json(read_text_file(ckpt.config_file, "a Hugging Face config.json"), str(ckpt.config_file))
    if not isinstance(data, dict):
        raise InputError(f"{ckpt.config_file}: not a JSON object (a Hugging Face config.json)")
    model_type = data.get("model_type")
    composite = COMPOSITES.get(model_type) if isinstance(model_type, str) else None
    if composite is not None:
        text_config = data.get("text_config", {} if composite.flat else None)  # flat: the top level is it
        if not isinstance(text_config, dict):
            raise InputError(f"{ckpt.config_file}: field 'text_config': expected an object (the language model's "
                             f"config), so the tensor names cannot be mapped")
        model_type = text_config.get("model_type", composite.text_model_type)
    if not isinstance(model_type, str) or model_type not in FAMILIES:
        raise InputError(f"{ckpt.config_file}: model_type {model_type!r} is not a family blockcli maps checkpoint "
                         f"tensors for (supported: {', '.join(sorted([*FAMILIES, *COMPOSITES]))})")
    tmap = FAMILIES[model_type].tensors
    return nested(tmap, composite.bases, composite.heads, composite.aside) if composite is not None else tmap


def _entries(tmap: TensorMap, n_layers: int, n_experts: int = 0,
             shapes: Mapping[str, Shape] | None = None, config: Config | None = None) -> Iterator[Tensor]:
    """Every tensor of the map for these layers; `{e}` in a name: one per expert; `{e}` in the keys of a
    name without it: one fused tensor holding every expert's keys, expert by expert; `{h}` in a name (HEAD_ROW):
    one per row of its key's shape in `shapes` (left as it is, never found, where the config has no such key)."""
    for entry in tmap.tensors:
        if "{e}" in entry.name:
            per = [Tensor(tuple(k.replace("{e}", str(e)) for k in entry.keys), entry.name.replace("{e}", str(e)),
                       entry.layout, entry.top) for e in range(n_experts)]
        elif any("{e}" in k for k in entry.keys):
            keys = tuple(k.replace("{e}", str(e)) for e in range(n_experts) for k in entry.keys)
            per = [Tensor(keys, entry.name, entry.layout, entry.top)] if n_experts else []
        else:
            per = [entry]
        for one in per:
            uses = "{use}" in one.name or any("{block}" in k for k in one.keys)
            if "{i}" in one.name or uses:
                for i in range(n_layers):
                    fields = shared_fields(config, i) if uses else {}
                    if uses and not fields:  # a shared block's tensor: only in the layers that use one
                        continue
                    yield from _head_rows(Tensor(tuple(k.format(i=i, **fields) for k in one.keys),
                                                 one.name.format(i=i, h="{h}", **fields), one.layout, one.top), shapes)
            else:
                yield from _head_rows(one, shapes)


def shared_fields(config: Config | None, layer: int) -> dict[str, str]:
    """Where layer `layer`'s shared block (block.shared, Zamba2) is stored: {home} the first layer to use that block
    (its checkpoint holds the block's weights and every use's adapters), {use} this layer's place among every use (its
    adapters' index there), {block} the shared block's index if this layer is that first one, else a key no config
    has; empty when the layer uses none."""
    if config is None or config.model is None or config.layer_block(layer).shared is None:
        return {}
    blocks = [config.layer_block(i).shared for i in range(layer + 1)]
    index = blocks[-1].index
    first = next(i for i, b in enumerate(blocks) if b is not None and b.index == index)
    return {"use": str(sum(b is not None for b in blocks[:-1])), "block": str(index) if first == layer else "-",
            "home": str(first)}


def _head_rows(entry: Tensor, shapes: Mapping[str, Shape] | None) -> Iterator[Tensor]:
    """A `{h}` name's tensor per row of its one key's (heads, n) shape: head h's vector fills row h."""
    if "{h}" not in entry.name or shapes is None or entry.keys[0] not in shapes:
        yield entry
        return
    for h in range(shapes[entry.keys[0]][0]):
        yield replace(entry, name=entry.name.replace("{h}", str(h)), row=h)


def _slots(entry: Tensor) -> tuple[str, ...]:
    """What a tensor fills: its keys, or one row of its key (`w[3]`) for a HEAD_ROW tensor."""
    return entry.keys if entry.row < 0 else (f"{entry.keys[0]}[{entry.row}]",)


def _parts(entry: Tensor, shapes: Mapping[str, Shape]) -> tuple[Shape, ...]:
    """The shape of each blockcli array a stored tensor fills: its keys', or one row's (HEAD_ROW)."""
    return tuple(shapes[k] if entry.row < 0 else shapes[k][1:] for k in entry.keys)


@functools.lru_cache(maxsize=None)
def _buffer_names(patterns: tuple[str, ...]) -> re.Pattern[str]:
    """One regular expression for a map's buffer name patterns ({i}: a layer index), built once: a checkpoint
    may hold hundreds of thousands of tensors to test."""
    alternatives = "|".join(re.escape(p).replace(r"\{i\}", r"\d+") for p in patterns)
    return re.compile(f"(?:{alternatives})" if patterns else r"(?!)")  # (?!) matches nothing


def stored_shape(entry: Tensor, shapes: Mapping[str, Shape]) -> Shape:
    """The shape a tensor must have in the checkpoint for blockcli's expected `shapes` of its keys."""
    parts = list(_parts(entry, shapes))
    if entry.layout in (SAME, HEAD_ROW):  # HEAD_ROW: one row of the key
        return parts[0]
    if entry.layout == LINEAR:
        return parts[0][::-1]
    if entry.layout == DEPTHWISE:  # nn.Conv1d's (C, 1, K), the keys' channels one after another
        return (sum(p[0] for p in parts), 1, parts[0][1])
    if entry.layout == ROW:  # a vector as a (1, n) matrix
        return (1,) + parts[0]
    if entry.layout == SCALAR:  # a (1,) number as a 0-dimensional tensor
        return ()
    if entry.layout == PER_HEAD:  # one number per head as (1, 1, h, 1)
        return (1, 1) + parts[0] + (1,)
    if entry.layout == SPLIT:  # Q | K | V along the last axis
        return parts[0][:-1] + (sum(p[-1] for p in parts),)
    if entry.layout == STACKED:  # the parts one after another along the first axis, in blockcli's layout
        return (sum(p[0] for p in parts),) + parts[0][1:]
    if entry.layout == EXPERTS:  # (E, one expert's outputs, in)
        n = _parts_per_expert(entry.keys)
        return (len(parts) // n, sum(p[-1] for p in parts[:n]), parts[0][0])
    if entry.layout in (EXPERTS_INTERLEAVED, EXPERTS_SIDE_BY_SIDE):  # (E, …, Σ last): each expert's parts on the
        n = _parts_per_expert(entry.keys)                               # last axis, interleaved or side by side
        return (len(parts) // n,) + parts[0][:-1] + (sum(p[-1] for p in parts[:n]),)
    # FUSED, GROUPED_QKV: nn.Linear rows, all the parts' outputs, in sequence or interleaved by group
    return (sum(p[-1] for p in parts),) + parts[0][:-1]


def _parts_per_expert(keys: tuple[str, ...]) -> int:
    """How many keys of a fused experts tensor belong to each expert (they come expert by expert)."""
    first = keys[0].split("experts.", 1)[1].split(".", 1)[0]
    return sum(1 for k in keys if k.split("experts.", 1)[1].split(".", 1)[0] == first)


def match_tensors(ckpt: Checkpoint, config: Config,
                  tmap: TensorMap | None = None) -> tuple[list[Match], list[str], Stored | None]:
    """Every expected tensor with its stored one, notes on stored tensors set aside, and the stored
    copy of a tied LM head if there is one (its values must equal the embedding's: see load_weights).

    Raises one InputError naming the file and tensor for anything the config does not explain:
    a stored tensor no entry accounts for, an expected tensor that is missing, a shape that
    contradicts config.json.
    """
    if config.model is None:
        raise InputError(f"{ckpt.describe()}: holds a whole model; its config needs a 'model' section")
    tmap = tmap or tensor_map_of(ckpt)  # given: a GGUF file's tensors under their family's names
    shapes = model_parameter_shapes(config)
    n_layers = config.model.n_layers
    n_experts = max((b.moe.n_experts for b in (config.layer_blocks or (config.block,)) if b.moe is not None), default=0)
    names = set(ckpt.tensors)

    def find(entry: Tensor) -> str | None:
        alternatives = entry.name.split("|")  # "a|b": the family stores it under one of these names
        candidates = alternatives if entry.top else [n for a in alternatives for n in (tmap.prefix + a, a)]
        return next((c for c in candidates if c in names), None)

    matches: list[Match] = []
    missing: list[tuple[str, tuple[str, ...]]] = []
    claimed: set[str] = set()
    notes: list[str] = []
    tied_copy: Stored | None = None
    filled: dict[str, str] = {}  # blockcli key → the stored tensor that fills it
    for entry in _entries(tmap, n_layers, n_experts, shapes, config):
        wanted = [k in shapes for k in entry.keys]
        name = find(entry)
        if not any(wanted):
            if name is not None and entry.keys == ("lm_head",) and config.model.tie_embeddings:
                claimed.add(name)  # a stored copy of a tied head: the embedding is what the model uses
                tied_copy = ckpt.tensors[name]
            elif name is not None and 0 in ckpt.tensors[name].shape:  # a 0-wide module transformers builds
                claimed.add(name)  # (GLM-4.5's shared expert with n_shared_experts 0): no parameter to load
            continue
        if name is None:
            missing.append((" or ".join(a if entry.top else tmap.prefix + a for a in entry.name.split("|")),
                            _slots(entry)))
            continue
        if not all(wanted):  # a fused tensor with a part the config has no place for (gate | up, ungated)
            absent = ", ".join(k for k, w in zip(entry.keys, wanted) if not w)
            raise InputError(f"{ckpt.tensors[name].file}: tensor '{name}' holds {', '.join(entry.keys)}, but "
                             f"{config.name} has no {absent}")
        claimed.add(name)
        stored = ckpt.tensors[name]
        # "a|b": the tensor is stored in either layout, told apart by its shape (the first when both fit)
        fits = [replace(entry, layout=layout) for layout in entry.layout.split("|")]
        entry = next((e for e in fits if stored.shape == stored_shape(e, shapes)), fits[0])
        if stored.shape != stored_shape(entry, shapes):
            implied = " or ".join(dict.fromkeys(str(stored_shape(e, shapes)) for e in fits))
            raise InputError(f"{stored.file}: tensor '{name}' has shape {stored.shape}; {config.name} implies "
                             f"{implied}")
        for key in _slots(entry):  # experts stored both per expert and fused would fill a key twice
            if key in filled:
                raise InputError(f"{stored.file}: tensor '{name}' holds {key}, which '{filled[key]}' holds too")
            filled[key] = name
        matches.append(Match(entry, stored, _parts(entry, shapes)))
    aside = sorted(n for n in names - claimed if n.startswith(tmap.aside)) if tmap.aside else []
    if aside:
        parts = [p for p in tmap.aside if any(n.startswith(p) for n in aside)]
        notes.append(f"{len(aside)} tensors of the vision side under {' and '.join(f'{p}*' for p in parts)} "
                     f"({sum(math.prod(ckpt.tensors[n].shape) for n in aside):,} parameters) set aside: "
                     f"blockcli reads the language model only")
    past = re.compile(re.escape(tmap.prefix) + r"layers\.([0-9]{1,9})\.")  # a 5,000-digit index: unexpected
    beyond = sorted(n for n in names - claimed if tmap.extra_layers and (m := past.match(n)) and int(m[1]) >= n_layers)
    if beyond:
        notes.append(f"{len(beyond)} tensors of the {tmap.extra_layers} layers past layer {n_layers - 1} "
                     f"({sum(math.prod(ckpt.tensors[n].shape) for n in beyond):,} parameters) set aside: "
                     f"transformers does not run them either")
    buffer = _buffer_names(tmap.buffers)
    unexpected = sorted(n for n in names - claimed - set(aside) - set(beyond) if not buffer.fullmatch(_strip(n, tmap)))
    # a tensor not found is missing unless another form (per expert, or fused) holds all its keys
    problems = [f"missing tensor '{n}'" for n, keys in missing if not all(k in filled for k in keys)]
    total = len(problems) + len(unexpected)  # only the first four are written out
    problems += [f"unexpected tensor '{n}' (in {ckpt.tensors[n].file.name})" for n in unexpected[:max(0, 4 - len(problems))]]
    if problems:
        shown = "; ".join(problems[:4]) + (f"; and {total - 4} more" if total > 4 else "")
        raise InputError(f"{ckpt.describe()}: tensors do not match {config.name}: {shown}")
    return matches, notes, tied_copy


def _strip(name: str, tmap: TensorMap) -> str:
    return name[len(tmap.prefix):] if name.startswith(tmap.prefix) else name


def stored_sizes(matches: list[Match]) -> dict[str, int]:
    """blockcli key → number of parameters, from the stored shapes alone."""
    sizes: dict[str, int] = {}
    for m in matches:
        for key, part in zip(m.entry.keys, m.parts):  # a HEAD_ROW tensor's key: the sum of its rows
            sizes[key] = math.prod(part) + (sizes.get(key, 0) if m.entry.row >= 0 else 0)
    return sizes


def checkpoint_sizes(path: Path, config: Config) -> tuple[dict[str, int], dict[str, Any]] | None:
    """For `count`: stored sizes under blockcli's keys and a description of the files, from the
    headers alone; None when the folder holds no weights (only a config.json)."""
    refuse_quantized(path, config)
    ckpt = open_checkpoint(path)
    if not ckpt.tensors:
        return None
    matches, notes, tied_copy = match_tensors(ckpt, config)
    if tied_copy is not None:
        notes.append(f"'{tied_copy.name}' is stored beside the tied token embedding: not counted (values not read)")
    info = {"path": str(path), "files": [f.name for f in ckpt.files], "tensors": len(ckpt.tensors),
            "bytes_on_disk": ckpt.disk_bytes, "stored_dtypes": ckpt.dtypes, "notes": notes}
    if any(m.stored.quant is not None for m in matches):
        info["quantized"] = quantized_bytes(matches)
    return stored_sizes(matches), info


def quantized_bytes(matches: list[Match]) -> dict[str, Any]:
    """The stored bytes of a quantized checkpoint's tensors (the file's own sizes, from the header offsets): the
    quantized weights' codes, scales, zero points and group indices, the unquantized tensors', the effective bits
    per quantized weight (scales and zero points included) and per parameter, and by component (blockcli's key
    without its layer and expert index: `w_q` sums every layer's; a fused tensor's bytes shared by its parts'
    sizes)."""
    parts: dict[str, int] = {}
    weights = plain = plain_bytes = 0
    schemes: dict[str, int] = {}
    components: dict[str, dict[str, int]] = {}
    for m in matches:
        t = m.stored
        own = stored_bytes(t)
        size = sum(own.values())
        if t.quant is None:
            plain += t.size
            plain_bytes += size
        else:
            weights += t.size
            schemes[t.quant.describe()] = schemes.get(t.quant.describe(), 0) + t.size
            for role, n in own.items():
                parts[role] = parts.get(role, 0) + n
        shares = [math.prod(p) for p in m.parts]
        left = size
        for j, (key, share) in enumerate(zip(m.entry.keys, shares)):
            n = left if j == len(shares) - 1 else size * share // sum(shares)
            left -= n
            name = re.sub(r"experts\.\d+\.", "experts.", re.sub(r"^blocks\.\d+\.", "", key))
            row = components.setdefault(name, {"parameters": 0, "bytes": 0})
            row["parameters"] += share
            row["bytes"] += n
    quantized = sum(parts.values())
    return {"schemes": schemes, "weights": weights, "parts": parts, "bytes": quantized,
            "bits_per_weight": 8 * quantized / weights, "unquantized_parameters": plain,
            "unquantized_bytes": plain_bytes, "total_bytes": quantized + plain_bytes,
            "bits_per_parameter": 8 * (quantized + plain_bytes) / (weights + plain),
            "by_component": {k: {**v, "bits_per_weight": 8 * v["bytes"] / v["parameters"]}
                           for k, v in components.items()}}


def refuse_quantized(path: Path, config: Config | None) -> None:
    """A quantized checkpoint's weights (fp8, gptq, ...: its config.json's quantization_config) are not read:
    one line naming the quant_method. gpt-oss's MXFP4 experts are the exception, read and dequantized."""
    path = Path(path)
    if not weight_files(path):
        return
    method = config.quantization.method if config is not None and config.quantization is not None else None
    own = (path if path.is_dir() else path.parent) / "config.json"
    if method is None and own.is_file():
        try:
            quant = json.loads(own.read_text(encoding="utf-8")).get("quantization_config")
        except (OSError, ValueError, AttributeError):  # unreadable: the config's own reader says why, later
            quant = None
        found = quant.get("quant_method") if isinstance(quant, Mapping) else None
        method = None if found == "mxfp4" else (str(found) if found is not None else None)
    if method is not None and method not in SUPPORTED:
        raise InputError(f"{path}: holds quantized weights (quantization_config quant_method '{method}'); blockcli "
                         f"reads fp8, gptq, awq and compressed-tensors weights (and gpt-oss's MXFP4 experts): count the model from its "
                         f"config.json alone, or run seeded weights")


# ----------------------------------------------------------------------------- loading values


def load_weights(path: Path, config: Config | None, dtype: str, notes: list[str], *, one_block: bool = False,
                 layer: int | None = None, stored: list[Match] | None = None) -> dict[str, np.ndarray]:
    """The model's parameters under blockcli's keys, in blockcli's layouts and `dtype`; with
    `one_block`, only block `layer`'s tensors are read, under the block's own keys.

    `config` (with a model section) says which model the tensors must make up; None takes the
    checkpoint's own config.json. A safetensors file without a config.json beside it holds
    blockcli's own keys, and is returned as it is (checked by the caller like an .npz).
    """
    refuse_quantized(path, config)
    ckpt = open_checkpoint(path)
    if not ckpt.tensors:
        raise InputError(f"{path}: holds no safetensors weights")
    if ckpt.config_file is None and not path.is_dir():
        return {name: _in_run_dtype(read_tensor(stored), dtype, stored) for name, stored in ckpt.tensors.items()}
    if config is None or config.model is None:
        config = load_config(path)
    elif ckpt.config_file is not None:  # the tensors of a config.json beside them: say if the blocks differ
        notes.extend(_differences(config, ckpt.config_file))
    assert config.model is not None
    matches, found, tied_copy = match_tensors(ckpt, config)
    notes.extend(found)
    matches, prefix = one_layer(matches, path, config, layer, notes) if one_block else (matches, "")
    if stored is not None:  # how each tensor was stored: what gradients keyed by stored name need
        stored.extend(matches)
    params = {}
    rows: dict[str, dict[int, np.ndarray]] = {}  # HEAD_ROW keys: their rows by head, stacked below
    for m in matches:
        value = read_tensor(m.stored, dtype) if m.stored.quant is not None else read_tensor(m.stored)
        value = _in_run_dtype(value, dtype, m.stored)
        for key, part in zip(m.entry.keys, _unpack(value, m.entry.layout, groups_of(m.entry.layout, config), m.parts)):
            if m.entry.row >= 0:
                rows.setdefault(key[len(prefix):], {})[m.entry.row] = part
            else:
                params[key[len(prefix):]] = part
    if rows:
        import numpy as np

        for key, by_head in rows.items():  # every row is there: match_tensors found each head's tensor
            params[key] = np.stack([by_head[h] for h in range(len(by_head))])  # (heads, n)
    if tied_copy is not None and not one_block:  # a "copy" the model would ignore must really be one
        import numpy as np

        head = _in_run_dtype(read_tensor(tied_copy), dtype, tied_copy)
        if head.shape != params["wte"].shape or not np.array_equal(head, params["wte"]):
            raise InputError(f"{tied_copy.file}: tensor '{tied_copy.name}' differs from the token embedding, but "
                             f"{config.name} ties the LM head to it; untie it (tie_embeddings: false)")
        notes.append(f"'{tied_copy.name}' is a stored copy of the tied token embedding (checked equal): not used")
    run_size = FLOAT_DTYPES[FLOAT_DTYPE_OF[dtype]]
    floats = [m.stored.dtype for m in matches if m.stored.dtype in FLOAT_DTYPES]
    wider = sorted({t for t in floats if FLOAT_DTYPES[t] < run_size})
    narrower = sorted({t for t in floats if FLOAT_DTYPES[t] > run_size})
    if any(m.stored.dtype == "MXFP4" for m in matches):
        notes.append(f"MXFP4 tensors were dequantized to {dtype} (exactly)")
    if schemes := sorted({m.stored.quant.describe() for m in matches if m.stored.quant is not None}):
        notes.append(f"weights stored as {'; '.join(schemes)} were dequantized in {dtype}, one tensor at a time")
        if acts := sorted({m.stored.quant.activations for m in matches if m.stored.quant is not None} - {""}):
            notes.append(f"the activations ran unquantized: the config quantizes them too ({'; '.join(acts)}), "
                         f"which this forward does not model")
    if wider:
        notes.append(f"weights stored as {', '.join(wider)} were widened to {dtype} (exactly)")
    if narrower:
        notes.append(f"weights stored as {', '.join(narrower)} were rounded to {dtype}")
    return params


def one_layer(matches: list[Match], path: Path, config: Config, layer: int | None,
              notes: list[str]) -> tuple[list[Match], str]:
    """The tensors of block `layer` alone (a 7B model's layer is ~1/32 of its bytes), and its keys' prefix."""
    assert config.model is not None
    n_layers = config.model.n_layers
    if layer is None:
        raise InputError(f"{path}: holds the weights of {n_layers} blocks; pick one with --layer N "
                         f"(0..{n_layers - 1})")
    if not 0 <= layer < n_layers:
        raise InputError(f"--layer {layer}: {path} holds blocks 0..{n_layers - 1}")
    prefix = f"blocks.{layer}."
    notes.append(f"weights of layer {layer} of {n_layers}")
    return [m for m in matches if m.entry.keys[0].startswith(prefix)], prefix


def groups_of(layout: str, config: Config) -> int:
    """The row groups of a grouped layout: the linear-attention key heads (GROUPED_KEY_HEADS), else the
    attention heads."""
    if layout == GROUPED_KEY_HEADS:
        assert config.model is not None
        return next(config.layer_block(i).linear_attention.key_heads for i in range(config.model.n_layers)
                    if config.layer_block(i).linear_attention is not None)
    return config.block.n_heads


def _in_run_dtype(value: np.ndarray, dtype: str, stored: Stored) -> np.ndarray:
    """A tensor's values in the run's dtype. A float64 value past float32's range is refused, naming the tensor,
    before the cast would turn it into Inf (with a RuntimeWarning)."""
    from blockcli.inputs import check_in_range  # NumPy only where values are read

    check_in_range(value, dtype, f"{stored.file}: tensor '{stored.name}'")
    return value.astype(dtype, copy=False)


def _differences(config: Config, config_file: Path) -> list[str]:
    """A note when the checkpoint's own config.json describes another block than `config`: its
    tensors may fit the shapes and still belong to another architecture."""
    from dataclasses import fields

    try:
        own = load_config(config_file)
    except InputError:
        return []  # the folder's config.json cannot be read as a model: the shapes decide alone
    differing = [f.name for f in fields(own.block) if getattr(own.block, f.name) != getattr(config.block, f.name)]
    if not differing:
        return []
    return [f"{config_file} describes another block than {config.name} (block.{differing[0]}: "
            f"{getattr(own.block, differing[0])!r} there, {getattr(config.block, differing[0])!r} here"
            + (f", and {len(differing) - 1} more fields" if len(differing) > 1 else "")
            + "): its tensors fit these shapes, but the architecture may differ"]


def read_tensor(stored: Stored, dtype: str = "float32") -> np.ndarray:
    """One tensor's values as float32/float64 (float16 and bfloat16 widened exactly); finite only. A quantized
    module's weight is dequantized, computed in `dtype` (the run's)."""
    import numpy as np

    if stored.quant is not None:
        from blockcli.quantized import dequantize

        return dequantize(stored, dtype, _raw, read_tensor)
    if stored.dtype == "MXFP4":
        return _dequantize_mxfp4(stored)
    if stored.dtype not in FLOAT_DTYPES:
        raise InputError(f"{stored.file}: tensor '{stored.name}' is stored as {stored.dtype}; blockcli loads "
                         f"floating-point weights (F32, F64, F16, BF16), not quantized ones")
    raw = _raw(stored)
    if stored.dtype == "BF16":
        words = raw.view("<u2").astype(np.uint32) << 16  # a bfloat16 is a float32's top 16 bits
        value = words.view(np.float32).reshape(stored.shape)
    else:  # little-endian, as the format stores every dtype
        value = raw.view({"F64": "<f8", "F32": "<f4", "F16": "<f2"}[stored.dtype]).reshape(stored.shape)
        value = value.astype(value.dtype.newbyteorder("="), copy=False)  # native order (a no-op on x86 and ARM)
    if not np.all(np.isfinite(value)):
        raise InputError(f"{stored.file}: tensor '{stored.name}' contains NaN or Inf")
    return value


# The 16 values of a 4-bit E2M1 code (sign, 2 exponent bits, 1 mantissa bit), as the MXFP4 format defines them
FP4_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def _dequantize_mxfp4(stored: Stored) -> np.ndarray:
    """An MXFP4 pair's values (…, G·32, rows) in float32, exactly: each byte of _blocks holds two codes (the
    low nibble first), each group of 32 values is scaled by 2^(scale − 127)."""
    import numpy as np

    blocks, scales = stored.packed
    *prefix, groups_32, rows = stored.shape
    groups = groups_32 // 32
    codes = _raw(blocks).reshape(*prefix, rows, groups, 16)  # (…, rows, G, 16) bytes
    exponents = _raw(scales).reshape(*prefix, rows, groups).astype(np.int32) - 127  # (…, rows, G)
    table = np.array(FP4_VALUES, dtype=np.float32)
    values = np.empty((*prefix, rows, groups, 32), dtype=np.float32)
    values[..., 0::2] = table[codes & 0x0F]
    values[..., 1::2] = table[codes >> 4]
    with np.errstate(over="ignore"):  # a scale past float32's range: refused just below, in one line
        values = np.ldexp(values, exponents[..., None])  # exact: a power of two times a value of 2 significant bits
    if not np.all(np.isfinite(values)):
        raise InputError(f"{stored.file}: MXFP4 tensor '{stored.name}' scales values past the float32 range")
    return values.reshape(*prefix, rows, groups_32).swapaxes(-1, -2)  # (…, G·32, rows), as transformers holds it


def _raw(stored: Stored) -> np.ndarray:
    """The bytes of one tensor, at the offsets its file's header gave (parsed once, when the file was opened)."""
    import numpy as np

    begin, end = stored.offsets
    data = np.empty(end - begin, dtype=np.uint8)  # writable: the values may be updated in place later
    with reading(stored.file, "a .safetensors file"), open(stored.file, "rb") as f:
        f.seek(begin)
        got = f.readinto(memoryview(data))
    if got != end - begin:
        raise InputError(f"{stored.file}: tensor '{stored.name}' is cut short (file truncated)")
    return data


def to_stored(matches: list[Match], arrays: Mapping[str, np.ndarray], n_heads: int,
              buffers: bool = False, config: Config | None = None) -> dict[str, np.ndarray]:
    """Arrays under blockcli's keys (a model's parameters, or their gradients) → under the checkpoint's tensor
    names, each in its stored layout and shape (a fused tensor's parts put back side by side, nn.Linear's
    (out, in) transposed back), in the arrays' dtype: tensor by tensor what transformers holds. Buffers
    (DeepSeek's selection bias) only with `buffers`: a gradient has none."""
    def groups(layout: str) -> int:  # a grouped layout's row groups (`config`: its linear-attention key heads)
        return groups_of(layout, config) if config is not None and layout == GROUPED_KEY_HEADS else n_heads

    return {m.stored.name: _pack([arrays[k] if m.entry.row < 0 else arrays[k][m.entry.row] for k in m.entry.keys],
                                 m.entry.layout, groups(m.entry.layout), m.stored.shape)
            for m in matches if buffers or not all(map(is_buffer, m.entry.keys))}


def layout_of(config: Config, model_type: str) -> list[Match]:
    """How a `model_type` folder stores `config`'s parameters: its family's tensor map, one Match per tensor
    (absolute names), for weights blockcli writes out (`blockcli train --save`)."""
    tmap = FAMILIES[model_type].tensors
    shapes = model_parameter_shapes(config)
    assert config.model is not None
    n_experts = config.block.moe.n_experts if config.block.moe is not None else 0
    matches = []
    for entry in _entries(tmap, config.model.n_layers, n_experts, shapes, config):
        if not all(k in shapes for k in entry.keys):  # a bias of a bias-free config, a tied model's head
            continue
        entry = replace(entry, layout=entry.layout.split("|")[0], name=entry.name.split("|")[0])
        name = entry.name if entry.top else tmap.prefix + entry.name
        shape = stored_shape(entry, shapes)
        matches.append(Match(entry, Stored(name, shape, "F32", Path(SINGLE)), _parts(entry, shapes)))
    return matches


def _pack(parts: list[np.ndarray], layout: str, n_heads: int, shape: Shape) -> np.ndarray:
    """The inverse of `_unpack`: blockcli's arrays of one stored tensor → that tensor (`shape`)."""
    import numpy as np

    if layout == DEPTHWISE:
        return np.concatenate(parts, axis=0).reshape(shape)
    if layout in (GROUPED_HEADS, GROUPED_KEY_HEADS):  # each part's rows, n_heads groups of its share
        rows = [p.T for p in parts]
        return np.concatenate([r.reshape(n_heads, -1, *r.shape[1:]) for r in rows], axis=1).reshape(shape)
    if layout == GROUPED_QKV:  # [q…q k v] per K/V head, each block d_h rows
        rows = [p.T for p in parts]  # (h·d_h[, d]), (h_kv·d_h[, d]) twice
        head_dim = rows[0].shape[0] // n_heads
        n_kv = rows[1].shape[0] // head_dim
        q = rows[0].reshape(n_kv, n_heads // n_kv, head_dim, *rows[0].shape[1:])
        k, v = (r.reshape(n_kv, 1, head_dim, *r.shape[1:]) for r in rows[1:])
        return np.concatenate([q, k, v], axis=1).reshape(shape)
    if layout == SHARDED_QVK:  # [q_s v_s k_s] per shard s, each a quarter of the rows
        q, k, v = (p.T.reshape(QVK_SHARDS, 1, -1, *p.shape[:-1]) for p in parts)  # (4, 1, d/4[, d]) each
        return np.concatenate([q, v, k], axis=1).reshape(shape)
    value = np.empty(shape, dtype=np.result_type(*parts))
    views = _unpack(value, layout, n_heads, tuple(p.shape for p in parts))  # every other layout: views of value
    for view, part in zip(views, parts):
        assert np.shares_memory(view, value), layout
        view[...] = part
    return value


def _unpack(value: np.ndarray, layout: str, n_heads: int, parts: tuple[Shape, ...]) -> list[np.ndarray]:
    """A stored tensor → its blockcli arrays (shaped `parts`), (in, out) for matrices."""
    if layout in (SAME, HEAD_ROW):
        return [value]
    if layout == LINEAR:
        return [value.T]
    if layout == DEPTHWISE:  # (C, 1, K) → (C, K), split into the keys' rows (Kimi-Linear's q | k | v convs)
        taps, rows, start = value.reshape(value.shape[0], value.shape[-1]), [], 0
        for part in parts:
            rows.append(taps[start:start + part[0]])
            start += part[0]
        return rows
    if layout in (GROUPED_HEADS, GROUPED_KEY_HEADS):  # n_heads groups of rows, each every key's share in turn
        shares = [p[-1] // n_heads for p in parts]
        groups = value.reshape(n_heads, sum(shares), *value.shape[1:])  # (groups, Σ shares[, d])
        ends = [sum(shares[:j + 1]) for j in range(len(shares))]
        return [groups[:, end - share:end].reshape(-1, *value.shape[1:]).T for end, share in zip(ends, shares)]
    if layout == STACKED:  # consecutive blocks of rows, each part as blockcli holds it
        ends = [sum(p[0] for p in parts[:j + 1]) for j in range(len(parts))]
        return [value[end - p[0]:end] for end, p in zip(ends, parts)]
    if layout == ROW:
        return [value[0]]
    if layout == SCALAR:
        return [value.reshape(1)]
    if layout == PER_HEAD:  # (1, 1, h, 1) → (h,)
        return [value.reshape(-1)]
    if layout == GROUPED_QKV:  # output rows [q…q k v] per K/V head, each block d_h rows
        head_dim = parts[0][-1] // n_heads
        n_kv = parts[1][-1] // head_dim
        groups = value.reshape(n_kv, n_heads // n_kv + 2, head_dim, *value.shape[1:])  # (h_kv, h/h_kv + 2, d_h[, d])
        grouped = [groups[:, :-2], groups[:, -2], groups[:, -1]]
        return [p.reshape(-1, *value.shape[1:]).T for p in grouped]  # (h·d_h[, d]), (h_kv·d_h[, d]) twice
    if layout == SHARDED_QVK:  # output rows [q_s v_s k_s] per shard s, each a quarter of Q, V, K
        shards = value.reshape(QVK_SHARDS, 3, -1, *value.shape[1:])  # (4, 3, d/4[, d])
        return [shards[:, j].reshape(-1, *value.shape[1:]).T for j in (0, 2, 1)]  # Q, K, V: (in, out)
    if layout == EXPERTS_INTERLEAVED:  # (E, …, n·last): part j of expert e is value[e, …, j::n]
        n = len(parts) // value.shape[0]
        return [value[e, ..., j::n] for e in range(value.shape[0]) for j in range(n)]
    if layout in (EXPERTS, EXPERTS_SIDE_BY_SIDE):  # expert by expert, its parts one after another: along the
        n = len(parts) // value.shape[0]          # rows of its (Σ outputs, in) (then transposed), or its last axis
        if layout == EXPERTS:
            value = value.swapaxes(1, 2)  # (E, in, Σ outputs)
        ends = [sum(p[-1] for p in parts[:j + 1]) for j in range(n)]
        return [value[e, ..., end - p[-1]:end] for e in range(value.shape[0]) for end, p in zip(ends, parts[:n])]
    if layout in (SPLIT, FUSED):  # consecutive blocks of each part's output width, possibly unequal
        ends = [sum(p[-1] for p in parts[:j + 1]) for j in range(len(parts))]
        if layout == SPLIT:  # along the last axis
            return [value[..., end - p[-1]:end] for end, p in zip(ends, parts)]
        return [value[end - p[-1]:end].T for end, p in zip(ends, parts)]  # along the rows, then (in, out)
    raise AssertionError(f"unknown tensor layout {layout!r}")
