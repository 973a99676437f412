"""Model folders whose weights-looking entries cannot be read, hostile indexes and headers (issue 30, items 7-9).

A `model.safetensors` that is a link loop, a dangling link or a directory used to leave a folder that "holds no
weights": trace and verify ran seeded weights and verify printed PASS. Every such entry (the single file, a
shard, the index, config.json) is now one error line naming it. Everything is built in tmp_path.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from blockcli import Model, load_config
from blockcli.config import InputError
from test_checkpoint import FIXTURES, cli, expected, fixture_copy, one_error_line, relative, rewrite


def make_unreadable(entry: Path, kind: str) -> None:
    """Replace `entry` (if present) by something of its name that cannot be read as a file."""
    if entry.is_file():
        entry.unlink()
    if kind == "link loop":
        partner = entry.with_name("partner-" + entry.name)
        partner.symlink_to(entry.name)
        entry.symlink_to(partner.name)
    elif kind == "dangling link":
        entry.symlink_to("no-such-file")
    elif kind == "directory":
        entry.mkdir()
    elif kind == "FIFO":
        os.mkfifo(entry)
    else:
        raise AssertionError(kind)


SAID = {"link loop": "symbolic link loop", "dangling link": "dangling symbolic link (to no-such-file",
        "directory": "is a directory", "FIFO": "is a FIFO"}


@pytest.mark.parametrize("command", ["count", "trace", "verify"])
@pytest.mark.parametrize("kind", ["link loop", "dangling link", "directory"])
def test_an_unreadable_model_safetensors_is_an_error_not_seeded_weights(tmp_path: Path, kind: str,
                                                                         command: str) -> None:
    folder = fixture_copy(tmp_path)
    make_unreadable(folder / "model.safetensors", kind)
    proc = cli(command, folder)
    line = one_error_line(proc)  # exit 2, one line: never a PASS over weights nobody read
    assert proc.stdout == ""
    assert "model.safetensors" in line and SAID[kind] in line, line
    if kind == "link loop":  # the entry named is one of the loop's links
        assert "partner-model.safetensors" in line or f"{folder / 'model.safetensors'}:" in line


def test_a_fifo_named_model_safetensors_is_named_without_blocking(tmp_path: Path) -> None:
    folder = fixture_copy(tmp_path)
    make_unreadable(folder / "model.safetensors", "FIFO")
    # opening a FIFO for reading would wait for a writer forever: a timeout makes that a failure, not a hang
    proc = subprocess.run([sys.executable, "-m", "blockcli", "trace", str(folder)], capture_output=True, text=True,
                          timeout=120)
    assert "model.safetensors: is a FIFO" in one_error_line(proc)


@pytest.mark.parametrize("kind", ["link loop", "dangling link", "directory"])
@pytest.mark.parametrize("entry", ["model-00002-of-00003.safetensors", "model.safetensors.index.json", "config.json",
                                   "stray.safetensors"])
def test_every_weights_looking_entry_of_a_sharded_folder_is_checked(tmp_path: Path, entry: str, kind: str) -> None:
    """A shard, the index, config.json, and a *.safetensors the index does not list: each is named."""
    folder = fixture_copy(tmp_path, "qwen2")
    make_unreadable(folder / entry, kind)
    with pytest.raises(InputError) as caught:  # load_config first, as every command does, then the weights
        Model.from_config(load_config(folder), weights=folder)
    message = str(caught.value)
    assert "\n" not in message and SAID[kind] in message, message
    assert entry in message or (kind == "link loop" and "partner-" + entry in message), message
    line = one_error_line(cli("count", folder))
    assert SAID[kind] in line


def test_a_folder_with_only_config_json_still_runs_seeded_weights(tmp_path: Path) -> None:
    """The one case that does hold no weights: nothing weights-looking at all (an unrelated folder entry is fine)."""
    folder = tmp_path / "config-only"
    folder.mkdir()
    shutil.copy(FIXTURES / "llama" / "config.json", folder)
    (folder / "notes").mkdir()
    (folder / "README.md").symlink_to("nowhere")
    proc = cli("verify", folder)
    assert proc.returncode == 0, proc.stderr


def test_an_index_naming_the_parent_folder_as_a_shard_is_refused(tmp_path: Path) -> None:
    folder = fixture_copy(tmp_path, "qwen2")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    name = next(iter(index["weight_map"]))
    index["weight_map"][name] = ".."
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    assert f"tensor '{name}' maps to '..'" in one_error_line(cli("count", folder))


# ----------------------------------------------------------------------------- hostile index text (item 8)


@pytest.mark.parametrize("text, said", [
    ("[" * 200_000 + "]" * 200_000, "JSON nested too deeply"),
    (b'{"weight_map": {"caf\xe9": "model-00001-of-00003.safetensors"}}', "not UTF-8 text (byte 20)"),
    ('{"weight_map": {"a": "x"}, "n": ' + "9" * 5000 + "}", "a number has too many digits"),
    ('{"weight_map": {"a": "x", "a": "y"}}', "field 'a' appears twice"),
    ('{"weight_map": {"a": NaN}}', "NaN is not a JSON number"),
])
def test_a_hostile_index_is_one_line(tmp_path: Path, text: str | bytes, said: str) -> None:
    folder = fixture_copy(tmp_path, "qwen2")
    index = folder / "model.safetensors.index.json"
    index.write_bytes(text if isinstance(text, bytes) else text.encode())
    for command in ("count", "trace"):
        line = one_error_line(cli(command, folder))
        assert str(index) in line and said in line, line


# ----------------------------------------------------------------------------- bounded cost (item 9)


def header_and_data(path: Path) -> tuple[dict, bytes]:
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + length]), raw[8 + length:]


def write_header(path: Path, header: dict, data: bytes) -> None:
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


def test_each_header_is_parsed_once_however_many_tensors_are_read(tmp_path: Path, monkeypatch) -> None:
    """The bfloat16 tensors used to be located by parsing their file's whole header again, each (29-40 s for a
    99 MB header). A 4 MB __metadata__ pads the header here; the values still equal transformers' logits."""
    folder = fixture_copy(tmp_path, "llama-bf16")
    path = folder / "model.safetensors"
    header, data = header_and_data(path)
    header["__metadata__"] = {"format": "pt", "padding": "x" * 4_000_000}
    write_header(path, header, data)
    from blockcli import checkpoint

    parsed: list[int] = []
    real = json.loads

    class CountingJson:
        def loads(self, text, *args, **kwargs):
            parsed.append(len(text))
            return real(text, *args, **kwargs)

    monkeypatch.setattr(checkpoint, "json", CountingJson())
    want = expected("llama-bf16")
    model = Model.from_config(load_config(folder), weights=folder, dtype="float32")
    assert sum(1 for n in parsed if n > 4_000_000) == 1, parsed  # once, for 21 tensors
    assert relative(model(want["input_ids"]), want["logits_float32"]) <= 1e-4


def test_many_unexpected_tensors_are_refused_with_their_number(tmp_path: Path) -> None:
    """GPT-NeoX's buffer patterns are tried against each stored name as one compiled pattern (300,000 names took
    26-41 s); the message names four and counts the rest. Timing lives in benchmarks/bench_hostile_checkpoints.py."""
    folder = fixture_copy(tmp_path, "gpt_neox")
    path = folder / "model.safetensors"
    header, data = header_and_data(path)
    extra = 5000
    for i in range(extra):
        header[f"gpt_neox.layers.{i}.extra.weight"] = {"dtype": "F32", "shape": [1],
                                                      "data_offsets": [len(data) + 4 * i, len(data) + 4 * i + 4]}
    header["gpt_neox.layers.0.attention.masked_bias"] = {"dtype": "F32", "shape": [1],  # a buffer: recognised
                                                         "data_offsets": [len(data) + 4 * extra,
                                                                          len(data) + 4 * extra + 4]}
    write_header(path, header, data + b"\0" * (4 * extra + 4))
    line = one_error_line(cli("count", folder))
    assert "unexpected tensor 'gpt_neox.layers.0.extra.weight'" in line
    assert f"and {extra - 4} more" in line and "masked_bias" not in line
    from blockcli.checkpoint import _buffer_names

    assert _buffer_names.cache_info().maxsize is None  # built once per map, not once per name


def test_a_layer_index_of_5000_digits_is_an_unexpected_tensor_not_a_traceback(tmp_path: Path) -> None:
    """DeepSeek-V3 sets aside layers past the last (its multi-token prediction); a 5,000-digit layer number used to
    reach int()'s digit limit."""
    folder = fixture_copy(tmp_path, "deepseek_v3")
    name = "model.layers." + "9" * 5000 + ".mlp.weight"
    rewrite(folder, lambda t: t.update({name: np.ones(2, np.float32)}))
    line = one_error_line(cli("count", folder))
    assert "unexpected tensor 'model.layers.999" in line


@pytest.mark.parametrize("kind", ["directory", "dangling link"])
def test_a_config_json_that_is_not_a_file_is_named_as_such(tmp_path: Path, kind: str) -> None:
    folder = fixture_copy(tmp_path)
    make_unreadable(folder / "config.json", kind)
    for command in ("count", "trace", "convert"):
        line = one_error_line(cli(command, folder))
        assert f"{folder / 'config.json'}: {'is a directory' if kind == 'directory' else 'a dangling'}" in line
        assert "none in" not in line  # it is there, just not a file


def test_a_float64_weight_past_float32_is_one_line_without_a_warning(tmp_path: Path) -> None:
    """1e300 in a float64 checkpoint run in float32: refused before the cast (which warned "overflow encountered
    in cast" and then reported NaN or Inf), by the API and the CLI alike."""
    folder = fixture_copy(tmp_path)
    name = "model.layers.1.self_attn.k_proj.weight"

    def widen(t):
        for k in list(t):
            t[k] = t[k].astype(np.float64)
        t[name][3, 5] = 1e300

    rewrite(folder, widen)
    with pytest.raises(InputError, match=rf"tensor '{name}': holds 1e\+300, out of float32 range") as caught:
        with np.errstate(all="raise"):  # a cast overflowing on the way would raise FloatingPointError instead
            Model.from_config(load_config(folder), weights=folder, dtype="float32")
    assert "NaN or Inf" not in str(caught.value)
    for args in (("trace", folder), ("trace", folder, "--layer", "1")):  # (verify runs in float64)
        proc = cli(*args)
        line = one_error_line(proc)  # and nothing else on stderr: no RuntimeWarning
        assert "out of float32 range" in line and "model.safetensors" in line
    proc = cli("trace", folder, "--dtype", "float64")  # in float64 it is a finite value like any other
    assert proc.returncode == 0, proc.stderr


def test_safetensors_without_config_of_blockcli_keys_is_range_checked_too(tmp_path: Path) -> None:
    from safetensors.numpy import save_file

    from blockcli import DecoderBlock
    from blockcli.shapes import block_parameter_shapes

    config = load_config({"block": {"d_model": 8, "n_heads": 2, "d_ff": 16}, "run": {"dtype": "float32"}})
    values = {k: np.full(s, 0.5) for k, s in block_parameter_shapes(config.block).items()}
    values["w_o"][0, 0] = -1e300
    path = tmp_path / "block.safetensors"
    save_file(values, path)
    with pytest.raises(InputError, match=r"tensor 'w_o': holds 1e\+300, out of float32 range"):
        with np.errstate(all="raise"):
            DecoderBlock.from_config(config, weights=path)
    block = DecoderBlock.from_config(config, weights=path, dtype="float64")
    assert block.params["w_o"][0, 0] == -1e300 and math.isfinite(block.params["w_o"][0, 0])
