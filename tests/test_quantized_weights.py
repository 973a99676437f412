"""Quantized checkpoints' weights read and run: FP8 blocks, GPTQ, AWQ, compressed-tensors (issue #26, item 2).

Expected numbers: the fixtures of tests/fixtures/quantized/generate.py (tiny llama and qwen3 models stored in each
format's published layout, by transformers' FP8 integration, compressed-tensors' own compressors, or loops over
single bits for GPTQ and AWQ), whose logits transformers computed on the weights that reference dequantized;
the parameter counts of the same models (sum of numel); the stored bytes from the files' own headers, parsed here
with struct and json; the FP8 E4M3 values from the OCP 8-bit floating point specification by hand.
"""

from __future__ import annotations

import json
import math
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from blockcli import Model, load_config

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "quantized"
FORMATS = {  # fixture → the parts of a quantized module by role, as its format names them
    "fp8-llama": "fp8", "fp8-qwen3": "fp8", "fp8-deepseek_v3": "fp8",
    "gptq-llama-4bit": "gptq", "gptq-qwen3-4bit-act-order": "gptq", "gptq-llama-8bit-v2": "gptq",
    "gptq-qwen3-3bit": "gptq", "gptq-llama-2bit": "gptq",
    "awq-llama": "awq", "awq-qwen3": "awq",
    "ct-int4-llama": "ct", "ct-int8-qwen3": "ct", "ct-int4-qwen3-asym": "ct", "ct-fp8-llama": "ct-fp8",
    "ct-fp8-qwen3": "ct-fp8", "ct-w8a8-llama": "ct-int", "ct-w8a8-qwen3-asym": "ct-int",
    "ct-int4-act-order-llama": "ct", "ct-w8a8-act-order-qwen3": "ct-int",
}
ROLES = {  # tensor name suffix → role, per format (what is not listed is an unquantized tensor)
    "fp8": {"weight_scale_inv": "scales"},
    "gptq": {"qweight": "codes", "qzeros": "zeros", "scales": "scales", "g_idx": "g_idx"},
    "awq": {"qweight": "codes", "qzeros": "zeros", "scales": "scales"},
    "ct": {"weight_packed": "codes", "weight_scale": "scales", "weight_zero_point": "zeros", "weight_shape": "shape",
           "weight_g_idx": "g_idx"},
    "ct-fp8": {"weight_scale": "scales"},
    "ct-int": {"weight_scale": "scales", "weight_zero_point": "zeros",  # the codes: `weight` stored as I8
               "weight_g_idx": "g_idx"},
}


def expected(name: str) -> dict[str, np.ndarray]:
    with np.load(FIXTURES / name / "expected.npz") as data:
        return dict(data)


def header(file: Path) -> dict[str, dict]:
    with open(file, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        data = json.loads(f.read(length))
    data.pop("__metadata__", None)
    return data


def with_one_more_row(file: Path, tensor: str) -> None:
    """Rewrite a safetensors file with `tensor`'s first row repeated at its end (bytes copied as they are: NumPy
    has no float8 to load the file with)."""
    raw = file.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    data = raw[8 + length:]
    entries = header(file)
    out, parts = {}, []
    offset = 0
    for name, entry in sorted(entries.items(), key=lambda e: e[1]["data_offsets"][0]):
        begin, end = entry["data_offsets"]
        chunk = data[begin:end]
        shape = list(entry["shape"])
        if name == tensor:
            chunk += chunk[:len(chunk) // shape[0]]
            shape[0] += 1
        out[name] = {"dtype": entry["dtype"], "shape": shape, "data_offsets": [offset, offset + len(chunk)]}
        parts.append(chunk)
        offset += len(chunk)
    text = json.dumps(out).encode()
    file.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(parts))


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "blockcli", *map(str, args)], capture_output=True, text=True,
                          timeout=120)


def relative(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


def file_bytes(name: str) -> tuple[dict[str, int], int, int]:
    """(bytes by role of the quantized modules' parts, bytes of the unquantized tensors, their elements), from
    the header: an FP8 or int-quantized weight (F8_E4M3 or I8 beside its scales) is codes, an fp8 scale or a
    packed part by its name."""
    roles, fmt = {}, FORMATS[name]
    plain = plain_elements = 0
    for tensor, entry in header(FIXTURES / name / "model.safetensors").items():
        size = entry["data_offsets"][1] - entry["data_offsets"][0]
        suffix = tensor.rsplit(".", 1)[1]
        role = "codes" if entry["dtype"] in ("F8_E4M3", "I8") and suffix == "weight" else ROLES[fmt].get(suffix)
        if role is None:
            plain += size
            plain_elements += math.prod(entry["shape"])
        else:
            roles[role] = roles.get(role, 0) + size
    return roles, plain, plain_elements


@pytest.mark.parametrize("name", FORMATS)
def test_counts_reconcile_with_the_logical_shapes_and_the_bytes_are_the_files(name: str, tmp_path: Path) -> None:
    want = expected(name)
    run = cli("count", FIXTURES / name, "--json")
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    assert data["total"] == int(want["parameters"]) and data["reconciled"]["method"] == "checkpoint"
    assert data["reconciled"]["match"]
    config = json.loads((FIXTURES / name / "config.json").read_text())
    del config["quantization_config"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert json.loads(cli("count", tmp_path / "config.json", "--json").stdout)["total"] == data["total"]
    q = data["checkpoint"]["quantized"]
    roles, plain, plain_elements = file_bytes(name)
    assert q["parts"] == roles and q["bytes"] == sum(roles.values())
    assert q["weights"] == int(want["quantized_weights"])
    assert q["unquantized_bytes"] == plain and q["unquantized_parameters"] == plain_elements
    assert q["bits_per_weight"] == pytest.approx(8 * sum(roles.values()) / int(want["quantized_weights"]), rel=1e-12)
    assert q["total_bytes"] == sum(roles.values()) + plain
    assert data["inference"]["parameter_bytes"] == q["total_bytes"]  # sizing: the weights as stored


@pytest.mark.parametrize("name", FORMATS)
def test_forward_on_the_dequantized_weights_equals_the_reference(name: str) -> None:
    want = expected(name)
    model = Model.from_config(load_config(FIXTURES / name), weights=FIXTURES / name, dtype="float32")
    assert any("were dequantized in float32, one tensor at a time" in n for n in model.notes), model.notes
    assert relative(model(want["input_ids"]), want["logits_float32"]) <= 1e-4


def test_bits_per_weight_by_hand() -> None:
    """gptq 4-bit, groups of 16, act-order (qwen3: d 32, h·d_h 64, h_kv·d_h 32, d_ff 64): per weight 4 bits of code;
    per 16 inputs of an output, a float16 scale and a 4-bit zero; a 32-bit g_idx per input of each matrix."""
    inputs_outputs = [(32, 64), (32, 32), (32, 32), (64, 32), (32, 64), (32, 64), (64, 32)]  # q k v o gate up down
    weights = sum(i * o for i, o in inputs_outputs)
    bits = sum(i * o * 4 + (i // 16) * o * (16 + 4) + 32 * i for i, o in inputs_outputs)
    data = json.loads(cli("count", FIXTURES / "gptq-qwen3-4bit-act-order", "--json").stdout)
    q = data["checkpoint"]["quantized"]
    assert q["bits_per_weight"] == pytest.approx(bits / weights, rel=1e-12)
    # by component, summed over both layers: Q (32 → 64) 4 + 20/16 + 32/64 bits a weight, K (32 → 32) 4 + 20/16 + 1
    assert q["by_component"]["w_q"] == {"parameters": 2 * 32 * 64, "bytes": 2 * 32 * 64 * 5.75 / 8, "bits_per_weight": 5.75}
    assert q["by_component"]["w_k"]["bits_per_weight"] == 6.25 and q["by_component"]["wte"]["bits_per_weight"] == 32
    assert sum(c["bytes"] for c in q["by_component"].values()) == q["total_bytes"]
    assert sum(c["parameters"] for c in q["by_component"].values()) == data["total"]


def test_e4m3_codes_by_hand() -> None:
    from blockcli.quantized import _e4m3_table

    table = _e4m3_table()
    assert table[0x38] == 1.0 and table[0xB8] == -1.0  # exponent 7 (bias 7), mantissa 0
    assert table[0x7E] == 448.0  # the largest: 2^8 · 1.75
    assert table[0x01] == 2.0 ** -9 and table[0x08] == 2.0 ** -6  # the smallest subnormal, the smallest normal
    assert table[0x3C] == 1.5 and np.isnan(table[0x7F]) and np.isnan(table[0xFF])
    assert np.count_nonzero(np.isnan(table)) == 2  # no infinities in the fn variant


def test_bit_streams_by_hand() -> None:
    """3-bit codes 0..7 twice: 48 bits over two words, code 10 straddling bit 32."""
    from blockcli.quantized import unpack_bits

    codes = list(range(8)) * 2
    stream = sum(c << (3 * i) for i, c in enumerate(codes))
    words = np.array([[stream & 0xFFFFFFFF, stream >> 32]], dtype=np.uint32).view(np.int32)
    assert unpack_bits(words, 3, 16).tolist() == [codes]
    assert unpack_bits(np.array([[0x76543210]], dtype=np.uint32).view(np.int32), 4, 8).tolist() == [list(range(8))]


def test_the_format_conventions_matter(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading AWQ's nibbles in plain order, GPTQ's historical zero points without their +1, or compressed-tensors'
    act-order groups as i // group_size, breaks parity."""
    import blockcli.quantized as quantized

    def error(name: str) -> float:
        want = expected(name)
        model = Model.from_config(load_config(FIXTURES / name), weights=FIXTURES / name, dtype="float32")
        return relative(model(want["input_ids"]), want["logits_float32"])

    monkeypatch.setattr(quantized, "AWQ_ORDER", tuple(range(8)))
    assert error("awq-llama") > 1e-2
    monkeypatch.undo()
    real = quantized.Scheme
    monkeypatch.setattr(quantized, "Scheme", lambda *a, **k: real(*a, **{**k, "zero_offset": 0}))
    assert error("gptq-llama-4bit") > 1e-3
    monkeypatch.undo()
    spread = quantized._spread
    monkeypatch.setattr(quantized, "_spread", lambda g, s, n, index=None: spread(g, s, n))
    assert error("ct-int4-act-order-llama") > 1e-3 and error("ct-w8a8-act-order-qwen3") > 1e-3


@pytest.mark.parametrize("name", ["fp8-llama", "fp8-deepseek_v3", "gptq-qwen3-4bit-act-order", "awq-qwen3",
                                  "ct-int4-llama", "ct-w8a8-qwen3-asym"])
def test_trace_and_verify_run_the_folder(name: str) -> None:
    for command in (["trace", FIXTURES / name, "--layer", "1"], ["verify", FIXTURES / name, "--layer", "0"]):
        run = cli(*command)
        assert run.returncode == 0, (command, run.stderr)
        assert "were dequantized in" in " ".join((run.stdout + run.stderr).split())


def test_weights_of_a_quantized_folder_beside_a_plain_config(tmp_path: Path) -> None:
    config = json.loads((FIXTURES / "awq-llama" / "config.json").read_text())
    del config["quantization_config"]
    (tmp_path / "plain.json").write_text(json.dumps(config))
    run = cli("trace", tmp_path / "plain.json", "--weights", FIXTURES / "awq-llama", "--layer", "0")
    assert run.returncode == 0, run.stderr


def test_ignored_modules_stay_unquantized(tmp_path: Path) -> None:
    """ct-fp8-llama's ignore list keeps layer 1's down_proj in float32: stored so, read so; a quantized tensor of
    an ignored module contradicts the config."""
    head = header(FIXTURES / "ct-fp8-llama" / "model.safetensors")
    assert head["model.layers.1.mlp.down_proj.weight"]["dtype"] == "F32"
    assert head["model.layers.0.mlp.down_proj.weight"]["dtype"] == "F8_E4M3"
    folder = tmp_path / "ct"
    shutil.copytree(FIXTURES / "ct-fp8-llama", folder)
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"]["ignore"].append("model.layers.0.mlp.down_proj")
    (folder / "config.json").write_text(json.dumps(config))
    run = cli("count", folder)
    assert run.returncode == 2 and len(run.stderr.splitlines()) == 1, run.stderr
    assert "model.layers.0.mlp.down_proj.weight_scale" in run.stderr and "ignore" in run.stderr


@pytest.mark.parametrize("name, tensor", [
    ("fp8-qwen3", "model.layers.0.self_attn.q_proj.weight_scale_inv"),
    ("fp8-deepseek_v3", "model.layers.1.mlp.experts.2.down_proj.weight_scale_inv"),
    ("gptq-llama-4bit", "model.layers.1.mlp.down_proj.scales"),
    ("gptq-qwen3-4bit-act-order", "model.layers.0.self_attn.k_proj.qzeros"),
    ("awq-qwen3", "model.layers.0.mlp.up_proj.scales"),
    ("ct-int4-llama", "model.layers.0.self_attn.o_proj.weight_scale"),
    ("ct-fp8-llama", "model.layers.0.mlp.gate_proj.weight_scale"),
    ("ct-w8a8-qwen3-asym", "model.layers.1.self_attn.v_proj.weight_zero_point"),
    ("ct-int4-act-order-llama", "model.layers.0.mlp.down_proj.weight_g_idx"),
])
def test_scales_that_do_not_fit_the_shape_are_one_line(tmp_path: Path, name: str, tensor: str) -> None:
    folder = tmp_path / name
    shutil.copytree(FIXTURES / name, folder)
    with_one_more_row(folder / "model.safetensors", tensor)
    for command in (["count", folder], ["trace", folder, "--layer", "0"]):
        run = cli(*command)
        assert run.returncode == 2 and run.stdout == "" and len(run.stderr.splitlines()) == 1, run.stderr
        assert f"tensor '{tensor}'" in run.stderr and "implies" in run.stderr


def rewrite(file: Path, tensor: str, change) -> None:
    """Rewrite one tensor's bytes in place (same size): `change` maps its raw bytes (a uint8 array) to new ones."""
    entry = header(file)[tensor]
    raw = bytearray(file.read_bytes())
    (length,) = struct.unpack("<Q", raw[:8])
    begin, end = (8 + length + o for o in entry["data_offsets"])
    raw[begin:end] = change(np.frombuffer(bytes(raw[begin:end]), dtype=np.uint8)).tobytes()
    file.write_bytes(bytes(raw))


@pytest.mark.parametrize("name, tensor, change, says", [
    ("gptq-qwen3-4bit-act-order", "model.layers.0.self_attn.q_proj.g_idx",
     lambda b: np.full(b.size // 4, 9, dtype="<i4").view(np.uint8), "names groups outside 0..1"),
    ("fp8-llama", "model.layers.1.mlp.up_proj.weight", lambda b: np.full_like(b, 0x7F), "holds an FP8 NaN code"),
    ("fp8-llama", "model.layers.0.mlp.up_proj.weight_scale_inv",
     lambda b: np.full(b.size // 4, 3e38, dtype="<f4").view(np.uint8), "dequantizes to NaN or Inf"),
    ("awq-llama", "model.layers.0.self_attn.k_proj.scales",
     lambda b: np.full(b.size // 2, np.inf, dtype="<f2").view(np.uint8), "contains NaN or Inf"),
])
def test_bad_values_are_one_line_when_loaded(tmp_path: Path, name: str, tensor: str, change, says: str) -> None:
    folder = tmp_path / name
    shutil.copytree(FIXTURES / name, folder)
    rewrite(folder / "model.safetensors", tensor, change)
    assert cli("count", folder).returncode == 0  # the headers alone are still consistent
    layer = tensor.split(".")[2]
    run = cli("trace", folder, "--layer", layer)
    assert run.returncode == 2 and run.stdout == "" and len(run.stderr.splitlines()) == 1, run.stderr
    assert says in run.stderr and tensor.rsplit(".", 1)[0] in run.stderr


def test_a_sharded_folder_with_a_modules_parts_in_different_shards(tmp_path: Path) -> None:
    """The index lists each part where it is: a module's qweight in one shard, its scales in the other."""
    from safetensors.numpy import load_file, save_file

    name = "gptq-llama-8bit-v2"
    folder = tmp_path / name
    folder.mkdir()
    shutil.copy(FIXTURES / name / "config.json", folder)
    tensors = load_file(FIXTURES / name / "model.safetensors")
    shards = ({k: v for k, v in tensors.items() if not k.endswith(".scales")},
              {k: v for k, v in tensors.items() if k.endswith(".scales")})
    weight_map = {}
    for n, shard in enumerate(shards, 1):
        file = f"model-{n:05d}-of-00002.safetensors"
        save_file(shard, folder / file)
        weight_map.update(dict.fromkeys(shard, file))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    want = expected(name)
    data = json.loads(cli("count", folder, "--json").stdout)
    assert data["total"] == int(want["parameters"]) and data["checkpoint"]["files"] == [
        "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert data["checkpoint"]["quantized"]["parts"] == file_bytes(name)[0]
    model = Model.from_config(load_config(folder), weights=folder, dtype="float32")
    assert relative(model(want["input_ids"]), want["logits_float32"]) <= 1e-4


def test_the_quantization_note_says_the_bytes_are_known_only_where_they_are(tmp_path: Path) -> None:
    """A model folder holding its tensors: count shows their stored bytes, so the note says so; the same
    config.json alone (or in a folder without weights): they are unknown, and the note says they depend."""
    def note(*args: str) -> str:
        run = cli(*args)
        assert run.returncode == 0, run.stderr
        return next(line for line in run.stderr.splitlines() if "quantization_config:" in line)

    known = "the stored bytes are its tensors' own (count reads them from the checkpoint's headers)"
    unknown = "the stored bytes depend on the quantization"
    folder = FIXTURES / "gptq-llama-4bit"
    for args in (["count", folder], ["count", folder / "model.safetensors"], ["trace", folder, "--layer", "0"],
                 ["convert", folder]):
        assert note(*args).endswith(known), args
    empty = tmp_path / "config-only"
    empty.mkdir()
    shutil.copy(folder / "config.json", empty / "config.json")
    for args in (["count", folder / "config.json"], ["count", empty], ["convert", empty / "config.json"]):
        assert note(*args).endswith(unknown), args
    assert "quantized" in json.loads(cli("count", folder, "--json").stdout)["checkpoint"]  # the bytes it shows


def test_act_order_groups_outside_the_scales_are_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "ct"
    shutil.copytree(FIXTURES / "ct-int4-act-order-llama", folder)
    file = folder / "model.safetensors"
    raw = bytearray(file.read_bytes())
    (length,) = struct.unpack("<Q", raw[:8])
    entry = header(file)["model.layers.1.self_attn.q_proj.weight_g_idx"]
    struct.pack_into("<i", raw, 8 + length + entry["data_offsets"][0], 2)  # groups 0..1 (32 inputs in 16s)
    file.write_bytes(bytes(raw))
    assert cli("count", folder).returncode == 0  # the header alone: shapes fit
    run = cli("trace", folder, "--layer", "1")
    assert run.returncode == 2 and len(run.stderr.splitlines()) == 1, run.stderr
    assert "weight_g_idx' names groups outside 0..1" in run.stderr


def test_actorder_weight_stores_nothing_and_reads_as_without_it(tmp_path: Path) -> None:
    """`actorder: weight` (static) reorders only during calibration: the same layout, the same logits."""
    folder = tmp_path / "ct"
    shutil.copytree(FIXTURES / "ct-int4-llama", folder)
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"]["config_groups"]["group_0"]["weights"]["actorder"] = "weight"
    (folder / "config.json").write_text(json.dumps(config))
    want = expected("ct-int4-llama")
    model = Model.from_config(load_config(folder), weights=folder, dtype="float32")
    assert relative(model(want["input_ids"]), want["logits_float32"]) <= 1e-4
