"""Devices for the roofline: dense peak FLOP/s per dtype, memory, memory bandwidth.

The catalogue is `blockcli/data/gpus.json`: each value with the vendor document it comes from (the
datasheet's dense figure, or half its figure with 2:4 structured sparsity where only that is given). Any other
device is a YAML file of the same fields:

    name: My accelerator          # optional (default: the file's name)
    peak_tflops: {bf16: 400, fp32: 50}   # 10^12 FLOP/s (TOPS for int8), dense; at least one dtype
    memory_gb: 64                 # 10^9 bytes
    bandwidth_gb_s: 2000          # 10^9 bytes/s
    sources: [{document: ..., url: ...}]   # optional

Units are the datasheets' own: GB and TB/s are powers of 1000, not 1024.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

from blockcli.config import InputError, clipped, parse_json, read_yaml

PEAK_DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4")
FIELDS = ("name", "vendor", "aliases", "peak_tflops", "memory_gb", "bandwidth_gb_s", "sources", "notes")
# blockcli's dtypes (sizing.DTYPE_BITS, trace's float32/float64) → the peak a product at that dtype runs at
PEAK_OF_DTYPE = {"float64": "fp64", "float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float8": "fp8",
                 "int8": "int8", "int4": "int4"}


@dataclass(frozen=True)
class Gpu:
    name: str
    peak_flops: Mapping[str, float]  # FLOP/s, dense, per PEAK_DTYPES key the document gives
    memory_bytes: int
    bandwidth: float  # bytes/s
    sources: tuple[dict[str, str], ...] = ()
    vendor: str = ""
    catalogue: bool = True  # from the packaged catalogue (False: a --gpu FILE.yaml)

    def peak(self, dtype: str) -> float:
        """Dense peak FLOP/s of products at blockcli dtype `dtype` (float32 → fp32 …, fp32 as well for the
        master weights' float32)."""
        key = PEAK_OF_DTYPE[dtype]
        if key not in self.peak_flops:
            raise InputError(f"--gpu {self.name}: no {key} peak (its figures give "
                             f"{', '.join(self.peak_flops)}); choose another --dtype or device")
        return self.peak_flops[key]

    @property
    def ridge(self) -> dict[str, float]:
        """FLOPs per byte where each peak meets the bandwidth: above it a kernel is compute-bound."""
        return {k: v / self.bandwidth for k, v in self.peak_flops.items()}


def _key(name: str) -> str:
    return re.sub(r"[\s_\-]+", "", name.lower())


def _parse(data: Any, where: str, name: str | None = None, catalogue: bool = True) -> Gpu:
    if not isinstance(data, Mapping):
        raise InputError(f"{where}: expected a mapping of {', '.join(FIELDS[3:6])}")
    for key in data:
        if key not in FIELDS:
            raise InputError(f"{where}: unknown field '{clipped(str(key))}' (expected {', '.join(FIELDS)})")
    peaks = data.get("peak_tflops")
    if not isinstance(peaks, Mapping) or not peaks:
        raise InputError(f"{where}: peak_tflops: expected a mapping of dtype to dense TFLOP/s, e.g. "
                         f"{{bf16: 989.4}}, with one or more of {', '.join(PEAK_DTYPES)}")
    flops = {}
    for dtype, value in peaks.items():
        if dtype not in PEAK_DTYPES:
            raise InputError(f"{where}: peak_tflops.{clipped(str(dtype))}: not a dtype (expected "
                             f"{', '.join(PEAK_DTYPES)})")
        flops[dtype] = _positive(value, f"{where}: peak_tflops.{dtype}") * 1e12
    memory = _positive(data.get("memory_gb"), f"{where}: memory_gb")
    bandwidth = _positive(data.get("bandwidth_gb_s"), f"{where}: bandwidth_gb_s")
    shown = data.get("name", name)
    if not isinstance(shown, str) or not shown.strip():
        raise InputError(f"{where}: name: expected a text, got {shown!r}")
    sources = data.get("sources", [])
    if not isinstance(sources, list) or not all(isinstance(s, Mapping) for s in sources):
        raise InputError(f"{where}: sources: expected a list of {{document, url}}")
    return Gpu(shown, flops, round(memory * 1e9), bandwidth * 1e9, tuple(dict(s) for s in sources),
               str(data.get("vendor", "")), catalogue)


def _positive(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InputError(f"{where}: expected a positive number, got {clipped(repr(value))}")
    return float(value)


def catalogue() -> dict[str, Gpu]:
    """The packaged devices by name, in the file's order."""
    text = resources.files("blockcli.data").joinpath("gpus.json").read_text("utf-8")
    data = parse_json(text, "blockcli/data/gpus.json", InputError)
    return {entry["name"]: _parse(entry, f"gpus.json: {entry['name']}") for entry in data["gpus"]}


def _aliases() -> dict[str, str]:
    text = resources.files("blockcli.data").joinpath("gpus.json").read_text("utf-8")
    names = {}
    for entry in parse_json(text, "blockcli/data/gpus.json", InputError)["gpus"]:
        for alias in [entry["name"], *entry.get("aliases", [])]:
            names[_key(alias)] = entry["name"]
    return names


def load_gpu(spec: str) -> Gpu:
    """A catalogue name (any case; spaces, - and _ alike: 'h100-sxm', 'H100 SXM') or a YAML file's path."""
    if spec.lower().endswith((".yaml", ".yml")) or "/" in spec:
        path = Path(spec)
        if not path.exists():
            raise InputError(f"--gpu {clipped(spec)}: no such file")
        return _parse(read_yaml(path, "a device YAML (peak_tflops, memory_gb, bandwidth_gb_s)"), f"--gpu {path}",
                      path.stem, catalogue=False)
    name = _aliases().get(_key(spec))
    if name is None:
        raise InputError(f"--gpu {clipped(spec)}: not in the catalogue ({', '.join(catalogue())}); or give a "
                         f"device YAML file (peak_tflops, memory_gb, bandwidth_gb_s)")
    return catalogue()[name]
