"""GGUF files: counts, stored bytes, forward parity with transformers on the dequantized weights, bad files.

Every expected number comes from outside blockcli: the fixtures (tests/fixtures/gguf/generate.py) hold
transformers' logits on the weights the gguf package dequantizes from each file (converted back to
transformers' layout) and the unquantized model's parameter count; stored bytes are the package's own
reader's (`gguf.GGUFReader`, `n_bytes` per tensor); the Llama-2-7B total is the published figure; the
q8_0/q4_0 cache sizes are llama.cpp's block layouts worked by hand.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import gguf
import numpy as np
import pytest

from blockcli import Model, load_config
from blockcli import gguf_file

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "gguf"
FILES = sorted(p.stem for p in FIXTURES.glob("*.gguf"))


def expected(name: str) -> dict[str, np.ndarray]:
    with np.load(FIXTURES / f"{name}.npz") as data:
        return {k: data[k] for k in data.files}


def relative(got: np.ndarray, want: np.ndarray) -> float:
    assert got.shape == want.shape, (got.shape, want.shape)
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "blockcli", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200"}, timeout=60)


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-500:], proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("blockcli: error: "), proc.stderr
    return lines[0]


def test_the_fixtures_cover_f32_f16_bf16_q8_0_q4_0_mxfp4_and_a_k_quant() -> None:
    types = {t.tensor_type.name for name in FILES for t in gguf.GGUFReader(FIXTURES / f"{name}.gguf").tensors}
    assert {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_K", "MXFP4"} <= types


# ----------------------------------------------------------------------------- forward parity


def _write_with_tensors(w: gguf.GGUFWriter, reader: gguf.GGUFReader, extra: dict | None = None) -> None:
    """Finish a file written from a fixture's metadata: the fixture's tensors as stored, `extra` ones after."""
    for t in reader.tensors:
        w.add_tensor(t.name, np.array(t.data), raw_dtype=t.tensor_type)
    for name, value in (extra or {}).items():
        w.add_tensor(name, value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", FILES)
def test_logits_equal_transformers_on_the_dequantized_weights(name: str, dtype: str) -> None:
    path, want = FIXTURES / f"{name}.gguf", expected(name)
    model = Model.from_config(load_config(path), weights=path, dtype=dtype)
    assert relative(model(want["input_ids"]), want["logits_float32"]) <= 1e-4


def test_quantization_changes_the_logits_so_the_dequantized_reference_is_the_right_one() -> None:
    """The llama files hold one model: Q8_0's logits are not F32's, so matching each is a real check."""
    f32, q8 = expected("llama-f32")["logits_float32"], expected("llama-q8_0")["logits_float32"]
    assert relative(q8, f32) > 1e-4


def test_gpt_oss_reads_the_metadata_as_gptossconfig_and_its_mxfp4_experts() -> None:
    """The defaults GGUF does not store are GptOssConfig's (the generator's model has them): yarn β 32 and 1,
    untruncated; SwiGLU α 1.702 and limit 7; a window on layers 0, 2, …"""
    cfg = load_config(FIXTURES / "gpt-oss-mxfp4.gguf")
    s = cfg.block.rope_scaling
    assert (s.type, s.factor, s.original_max_positions, s.beta_fast, s.beta_slow, s.truncate) == (
        "yarn", 32.0, 4096, 32.0, 1.0, False)
    assert (cfg.block.swiglu_alpha, cfg.block.swiglu_limit, cfg.block.attention_sinks) == (1.702, 7.0, True)
    assert [cfg.layer_block(i).sliding_window for i in range(2)] == [4, 0]
    experts = [t for t in gguf.GGUFReader(FIXTURES / "gpt-oss-mxfp4.gguf").tensors if "_exps.weight" in t.name]
    assert {t.tensor_type.name for t in experts} == {"MXFP4"} and len(experts) == 6


def test_deepseek2_reads_mla_the_experts_and_yarn_from_the_metadata() -> None:
    """The generator's DeepSeek-V3: MQA-written MLA read back as its ranks and head widths, kv_b_proj joined from
    attn_k_b and attn_v_b, yarn's mscale from the log multiplier."""
    cfg = load_config(FIXTURES / "deepseek2-q8_0.gguf")
    mla = cfg.block.mla
    assert (mla.q_lora_rank, mla.kv_lora_rank, mla.qk_nope_head_dim, mla.qk_rope_head_dim, mla.v_head_dim) == (
        12, 8, 6, 4, 5)
    moe = cfg.layer_block(1).moe
    assert (moe.n_experts, moe.top_k, moe.n_groups, moe.top_groups, moe.routed_scaling) == (4, 2, 2, 1, 2.5)
    assert cfg.layer_block(0).moe is None
    s = cfg.block.rope_scaling
    assert (s.type, s.factor, s.original_max_positions, s.mscale, s.mscale_all_dim) == ("yarn", 4.0, 16, 1.0, 1.0)
    names = {t.name for t in gguf.GGUFReader(FIXTURES / "deepseek2-q8_0.gguf").tensors}
    assert {"blk.0.attn_k_b.weight", "blk.0.attn_v_b.weight", "blk.1.exp_probs_b.bias"} <= names
    assert not any("attn_kv_b" in n for n in names)


def test_deepseek2_with_softmax_gating_is_refused_naming_it(tmp_path: Path) -> None:
    reader = gguf.GGUFReader(FIXTURES / "deepseek2-q8_0.gguf")
    path = tmp_path / "v2.gguf"
    w = gguf.GGUFWriter(path, "deepseek2")
    for field in reader.fields.values():
        if field.name.startswith("deepseek2."):
            value = 1 if field.name.endswith("expert_gating_func") else field.contents()
            if isinstance(value, bool):
                w.add_bool(field.name, value)
            elif isinstance(value, str):
                w.add_string(field.name, value)
            elif isinstance(value, int):
                w.add_uint32(field.name, value)
            else:
                w.add_float32(field.name, value)
    _write_with_tensors(w, reader)
    line = one_error_line(cli("count", path))
    assert "'deepseek2.expert_gating_func' = 1" in line and "softmax" in line


@pytest.mark.parametrize("arch, field", [("llama", "permuted_qk"), ("gemma2", "norm_plus_one"),
                                         ("gemma", "norm_plus_one"), ("falcon", "ungrouped_qkv")])
def test_undoing_the_converters_change_matters(monkeypatch, arch: str, field: str) -> None:
    """Without undoing llama's Q/K permutation, Gemma's 1 + w norms or Falcon's Q | K | V rows (falcon-new: 2 K/V
    heads), the logits are far off."""
    from dataclasses import replace

    name = next(n for n in FILES if n.startswith(arch + "-"))
    path, want = FIXTURES / f"{name}.gguf", expected(name)
    monkeypatch.setitem(gguf_file.ARCHS, arch, replace(gguf_file.ARCHS[arch], **{field: False}))
    model = Model.from_config(load_config(path), weights=path, dtype="float32")
    assert relative(model(want["input_ids"]), want["logits_float32"]) > 1e-3


def test_trace_and_verify_take_a_gguf_file_as_weights() -> None:
    path = FIXTURES / "llama-q8_0.gguf"
    traced = cli("trace", path, "--weights", path, "--json")
    assert traced.returncode == 0, traced.stderr
    verified = cli("verify", path, "--weights", path, "--layer", "1", "--json")
    assert verified.returncode == 0, verified.stderr[-800:]


@pytest.mark.parametrize("name", ["gemma-bf16", "falcon-new-q4_0", "gpt-oss-mxfp4", "deepseek2-q8_0",
                                  "phi3-longrope-q8_0"])
def test_verify_passes_on_the_dequantized_weights_of_each_newer_architecture(name: str) -> None:
    proc = cli("verify", FIXTURES / f"{name}.gguf", "--layer", "1")
    assert proc.returncode == 0 and "PASS" in proc.stdout and " 0 failed" in proc.stdout, proc.stdout[-800:]


# ----------------------------------------------------------------------------- counts and bytes


@pytest.mark.parametrize("name", FILES)
def test_count_equals_the_unquantized_model_and_reconciles_with_the_tensors(name: str) -> None:
    proc = cli("count", FIXTURES / f"{name}.gguf", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["total"] == int(expected(name)["parameters"])
    assert data["reconciled"]["match"] and data["reconciled"]["method"] == "checkpoint"


@pytest.mark.parametrize("name", FILES)
def test_stored_bytes_and_bits_per_weight_are_the_files_own(name: str) -> None:
    path = FIXTURES / f"{name}.gguf"
    tensors = [t for t in gguf.GGUFReader(path).tensors if not t.name.startswith("rope_factors_")]  # config
    stored = sum(int(t.n_bytes) for t in tensors)
    weights = sum(int(t.n_elements) for t in tensors)
    data = json.loads(cli("count", path, "--json").stdout)
    summary = data["checkpoint"]["gguf"]
    assert summary["bytes"] == stored and summary["weights"] == weights
    assert summary["bits_per_weight"] == pytest.approx(8 * stored / weights)
    by_type: dict[str, int] = {}
    for t in tensors:
        by_type[t.tensor_type.name] = by_type.get(t.tensor_type.name, 0) + int(t.n_elements)
    assert data["checkpoint"]["stored_dtypes"] == by_type
    assert data["inference"]["parameter_bytes"] == stored  # served as stored


def test_the_count_table_names_each_groups_type_bytes_and_the_files_bits_per_weight() -> None:
    out = cli("count", FIXTURES / "llama-q4_k.gguf").stdout
    down = [t for t in gguf.GGUFReader(FIXTURES / "llama-q4_k.gguf").tensors if "ffn_down" in t.name]
    assert all(t.tensor_type.name == "Q4_K" for t in down)
    assert "MLP: Q8_0 32,768, Q4_K 16,384 weights" in out
    assert "bits per weight (scales included)" in out


def test_load_config_and_convert_read_the_metadata(tmp_path: Path) -> None:
    path = FIXTURES / "gemma2-q8_0.gguf"
    cfg = load_config(path)
    assert (cfg.block.d_model, cfg.block.n_heads, cfg.block.n_kv_heads, cfg.model.n_layers) == (32, 4, 2, 2)
    out = tmp_path / "gemma2.yaml"
    proc = cli("convert", path, "--output", out)
    assert proc.returncode == 0, proc.stderr
    assert load_config(out).block == cfg.block and load_config(out).model == cfg.model


# ----------------------------------------------------------------------------- header only, large files


def header_only_llama(path: Path, d: int, layers: int, d_ff: int, vocab: int, heads: int, qtype,
                      kv_heads: int | None = None, tokenizer: bool = False) -> int:
    """A GGUF of a Llama-shaped model whose tensor data is a sparse hole: the header is exact, the data zeros;
    with `tokenizer`, a vocabulary of `vocab` token strings and as many merges, as real files carry."""
    kv_heads = kv_heads or heads
    w = gguf.GGUFWriter(path, "llama")
    for add, v in ((w.add_block_count, layers), (w.add_context_length, 4096), (w.add_embedding_length, d),
                   (w.add_feed_forward_length, d_ff), (w.add_head_count, heads), (w.add_head_count_kv, kv_heads),
                   (w.add_layer_norm_rms_eps, 1e-5), (w.add_rope_freq_base, 10000.0)):
        add(v)
    if tokenizer:
        w.add_tokenizer_model("gpt2")
        w.add_token_list([f"token{i}" for i in range(vocab)])
        w.add_token_merges([f"tok en{i}" for i in range(vocab)])
        w.add_token_types([1] * vocab)
    kv = d // heads * kv_heads
    shapes = {"token_embd.weight": (vocab, d), "output_norm.weight": (d,), "output.weight": (vocab, d)}
    for i in range(layers):
        shapes |= {f"blk.{i}.attn_norm.weight": (d,), f"blk.{i}.ffn_norm.weight": (d,),
                   f"blk.{i}.attn_q.weight": (d, d), f"blk.{i}.attn_k.weight": (kv, d),
                   f"blk.{i}.attn_v.weight": (kv, d), f"blk.{i}.attn_output.weight": (d, d),
                   f"blk.{i}.ffn_gate.weight": (d_ff, d), f"blk.{i}.ffn_up.weight": (d_ff, d),
                   f"blk.{i}.ffn_down.weight": (d, d_ff)}
    for name, shape in shapes.items():
        t = gguf.GGMLQuantizationType.F32 if len(shape) == 1 else qtype
        nbytes = int(np.prod(gguf.quant_shape_to_byte_shape(shape, t)))
        w.add_tensor_info(name, gguf.quant_shape_to_byte_shape(shape, t), np.dtype(np.uint8), nbytes, raw_dtype=t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    data_bytes = sum(gguf.GGUFWriter.ggml_pad(int(np.prod(gguf.quant_shape_to_byte_shape(
        s, gguf.GGMLQuantizationType.F32 if len(s) == 1 else qtype))), 32) for s in shapes.values())
    start = gguf.GGUFWriter.ggml_pad(path.stat().st_size, 32)
    with open(path, "r+b") as f:
        f.truncate(start + data_bytes)  # a hole: no data written
    return start + data_bytes


def test_a_multi_gb_file_counts_from_its_header(tmp_path: Path) -> None:
    """Llama-2-7B's shapes at Q4_0 (3.8 GB, sparse: the data is a hole): 6,738,415,616 parameters, its
    published total. How fast is benchmarks/bench_gguf_count.py's question, not a timed test's."""
    path = tmp_path / "llama-2-7b.Q4_0.gguf"
    size = header_only_llama(path, 4096, 32, 11008, 32000, 32, gguf.GGMLQuantizationType.Q4_0)
    assert size > 3_500_000_000
    cfg = load_config(path)
    from blockcli.weight_files import checkpoint_sizes

    sizes, info = checkpoint_sizes(path, cfg)
    assert sum(sizes.values()) == 6_738_415_616
    data = json.loads(cli("count", path, "--json").stdout)
    assert data["total"] == 6_738_415_616 and data["reconciled"]["match"]
    q4_0 = 6_738_415_616 - 65 * 4096  # every matrix at 18 bytes per 32 values, the 65 norms at 4 bytes a value
    assert data["checkpoint"]["gguf"]["bytes"] == q4_0 // 32 * 18 + 65 * 4096 * 4


# ----------------------------------------------------------------------------- the K/V cache at q8_0 / q4_0


@pytest.mark.parametrize("kv, block_bytes", [("q8_0", 34), ("q4_0", 18)])
def test_kv_dtype_q8_0_and_q4_0_count_llama_cpps_blocks(tmp_path: Path, kv: str, block_bytes: int) -> None:
    """qwen3's fixture caches h_kv·d_h = 2·16 = 32 values per row: one block, for K and V in 2 layers."""
    proc = cli("count", FIXTURES / "qwen3-q4_0.gguf", "--kv-dtype", kv, "--seq", "10", "--batch", "3", "--json")
    assert proc.returncode == 0, proc.stderr
    cache = json.loads(proc.stdout)["inference"]["kv_cache"]
    per_token = 2 * 2 * block_bytes  # K and V, 2 layers, one block each
    assert cache["bytes_per_token"] == per_token and cache["bytes"] == per_token * 10 * 3


def test_kv_dtype_q8_0_on_rows_that_are_not_whole_blocks_is_refused() -> None:
    line = one_error_line(cli("count", FIXTURES / "llama-f32.gguf", "--kv-dtype", "q8_0"))
    assert "h_kv·d_h = 16" in line and "32" in line


def test_kv_dtype_q8_0_of_llama_2_7b() -> None:
    """4,096 keys and 4,096 values per layer and token: 128 blocks each, 34 bytes a block, 32 layers."""
    data = json.loads(cli("count", "llama-2-7b", "--kv-dtype", "q8_0", "--json").stdout)
    assert data["inference"]["kv_cache"]["bytes_per_token"] == 2 * 32 * 128 * 34


# ----------------------------------------------------------------------------- bad files


def _tensor_field(path: Path, index: int = 0) -> tuple[int, str, int]:
    """(byte offset of tensor `index`'s info record, its name, its rank), by the package's reader."""
    t = gguf.GGUFReader(path).tensors[index]
    return int(t.field.offset), t.name, len(t.shape)


def _patched(tmp_path: Path, at: int, fmt: str, value: int, source: str = "llama-q8_0") -> Path:
    data = bytearray((FIXTURES / f"{source}.gguf").read_bytes())
    struct.pack_into(fmt, data, at, value)
    out = tmp_path / "bad.gguf"
    out.write_bytes(bytes(data))
    return out


def _info_parts(path: Path) -> tuple[int, int]:
    """(offset of tensor 0's type field, offset of its data offset field)."""
    at, name, rank = _tensor_field(path)
    type_at = at + 8 + len(name.encode()) + 4 + 8 * rank
    return type_at, type_at + 4


@pytest.mark.parametrize("case", ["tensor count", "metadata count", "unknown type", "offset", "unaligned"])
def test_a_lying_header_is_one_line_in_bounded_time(tmp_path: Path, case: str) -> None:
    src = FIXTURES / "llama-q8_0.gguf"
    type_at, offset_at = _info_parts(src)
    path = {"tensor count": lambda: _patched(tmp_path, 8, "<Q", 10**15),
            "metadata count": lambda: _patched(tmp_path, 16, "<Q", 2**63),
            "unknown type": lambda: _patched(tmp_path, type_at, "<I", 99),
            "offset": lambda: _patched(tmp_path, offset_at, "<Q", 2**40),
            "unaligned": lambda: _patched(tmp_path, offset_at, "<Q", 4)}[case]()
    began = time.perf_counter()
    line = one_error_line(cli("count", path))
    assert time.perf_counter() - began < 10
    assert str(path) in line
    want = {"tensor count": "claims", "metadata count": "claims", "unknown type": "unknown ggml type 99",
            "offset": "does not fit", "unaligned": "not a multiple of the alignment"}[case]
    assert want in line, line


@pytest.mark.parametrize("keep", [0.5, 0.99, 10 / 30624])
def test_a_truncated_file_is_one_line(tmp_path: Path, keep: float) -> None:
    data = (FIXTURES / "llama-q8_0.gguf").read_bytes()
    path = tmp_path / "cut.gguf"
    path.write_bytes(data[:max(1, int(len(data) * keep))])
    line = one_error_line(cli("count", path))
    assert "truncated" in line, line


def test_a_tensor_whose_data_does_not_fit_its_type_is_one_line(tmp_path: Path) -> None:
    """Tensor 0's first dimension changed to 33: Q8_0 rows must be whole blocks of 32."""
    at, name, _ = _tensor_field(FIXTURES / "llama-q8_0.gguf", 0)
    assert gguf.GGUFReader(FIXTURES / "llama-q8_0.gguf").tensors[0].tensor_type.name == "Q8_0"
    path = _patched(tmp_path, at + 8 + len(name.encode()) + 4, "<Q", 33)
    line = one_error_line(cli("count", path))
    assert f"'{name}'" in line and "not whole Q8_0 blocks of 32" in line


def test_an_architecture_blockcli_has_no_gguf_reading_for_is_named(tmp_path: Path) -> None:
    w = gguf.GGUFWriter(tmp_path / "m.gguf", "mamba")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    line = one_error_line(cli("count", tmp_path / "m.gguf"))
    assert "'mamba'" in line and "llama" in line


def test_not_a_gguf_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "x.gguf"
    path.write_bytes(b"PK\x03\x04" + bytes(100))
    assert "not a GGUF file" in one_error_line(cli("count", path))


def _llama_writer(path: Path, **overrides) -> None:
    """The llama-f32 fixture's header and tensors again, one metadata value replaced."""
    reader = gguf.GGUFReader(FIXTURES / "llama-f32.gguf")
    w = gguf.GGUFWriter(path, "llama")
    count = overrides.get("block_count", 2)
    w.add_string("llama.block_count", count) if isinstance(count, str) else w.add_block_count(count)
    for add, v in ((w.add_context_length, 64), (w.add_embedding_length, 32), (w.add_feed_forward_length, 64),
                   (w.add_head_count, 4), (w.add_head_count_kv, 2), (w.add_layer_norm_rms_eps, 1e-6)):
        add(v)
    _write_with_tensors(w, reader)


def test_a_size_stored_as_text_is_named(tmp_path: Path) -> None:
    path = tmp_path / "text.gguf"
    _llama_writer(path, block_count="two")
    line = one_error_line(cli("count", path))
    assert "'llama.block_count' = 'two'" in line and "expected a number" in line


def test_a_block_count_that_contradicts_the_tensors_names_them(tmp_path: Path) -> None:
    path = tmp_path / "three.gguf"
    _llama_writer(path, block_count=3)
    line = one_error_line(cli("count", path))
    assert "missing tensor" in line and "layers.2" in line


def test_a_vocabulary_string_that_claims_more_than_the_file_is_one_line(tmp_path: Path) -> None:
    """The tokenizer's strings are walked by their lengths, not kept: a lying length is still caught."""
    path = tmp_path / "vocab.gguf"
    header_only_llama(path, 64, 1, 128, 64, 2, gguf.GGMLQuantizationType.F32, tokenizer=True)
    data = bytearray(path.read_bytes())
    at = data.index(b"token7") - 8  # the length before the 8th token string
    assert struct.unpack_from("<Q", data, at)[0] == len(b"token7")
    struct.pack_into("<Q", data, at, 2**62)
    path.write_bytes(bytes(data))
    line = one_error_line(cli("count", path))
    assert "tokenizer.ggml.tokens" in line and ("past the end" in line or "truncated" in line), line


def _phi3_with(path: Path, extra: dict[str, np.ndarray], **scaling: float) -> Path:
    """The phi3-q8_0 fixture again, with `extra` tensors added and phi3.rope.scaling.* metadata set (an int as
    uint32, a float as float32)."""
    reader = gguf.GGUFReader(FIXTURES / "phi3-q8_0.gguf")
    w = gguf.GGUFWriter(path, "phi3")
    values = {f.name: f.contents() for f in reader.fields.values() if f.name.startswith("phi3.")}
    values |= {f"phi3.rope.scaling.{key}": value for key, value in scaling.items()}
    for key, value in values.items():
        w.add_uint32(key, value) if isinstance(value, int) else w.add_float32(key, value)
    _write_with_tensors(w, reader, extra)
    return path


def test_longrope_takes_the_short_factors_within_the_original_context() -> None:
    """phi3-longrope's 7 tokens pass its original context of 4 (the long factors); its first 4 do not (the short
    ones): transformers' logits of both, and the two differ, so each factor set is checked."""
    path, want = FIXTURES / "phi3-longrope-q8_0.gguf", expected("phi3-longrope-q8_0")
    cfg = load_config(path)
    scaling = cfg.block.rope_scaling
    assert (scaling.type, scaling.original_max_positions, scaling.factor) == ("longrope", 4, 16.0)
    assert (scaling.short_factor, scaling.long_factor) == ((1.0, 2.5), (3.0, 7.25))  # the generator's, in float32
    assert scaling.attention_factor == 0.0  # the file's is √(1 + ln 16 / ln 4), the one transformers derives
    model = Model.from_config(cfg, weights=path, dtype="float32")
    short = model(want["input_ids"][:, :4])
    assert relative(short, want["logits_short_float32"]) <= 1e-4
    assert relative(want["logits_float32"][:, :4], want["logits_short_float32"]) > 1e-2


def test_a_longrope_attention_factor_other_than_the_derived_one_is_kept(tmp_path: Path) -> None:
    factors = {"rope_factors_long.weight": np.array([2.0, 4.0], dtype=np.float32),
               "rope_factors_short.weight": np.array([1.0, 1.0], dtype=np.float32)}
    path = _phi3_with(tmp_path / "phi3-128k.gguf", factors, attn_factor=1.5, original_context_length=16)
    scaling = load_config(path).block.rope_scaling
    assert (scaling.attention_factor, scaling.original_max_positions, scaling.long_factor) == (1.5, 16, (2.0, 4.0))
    proc = cli("count", path, "--json")  # the factors are config, not weights: the count still reconciles
    assert proc.returncode == 0 and json.loads(proc.stdout)["reconciled"]["match"], proc.stderr


@pytest.mark.parametrize("extra, named", [
    ({"rope_factors_long.weight": np.ones(2, dtype=np.float32)}, "no 'rope_factors_short.weight'"),
    ({"rope_factors_long.weight": np.ones(3, dtype=np.float32),
      "rope_factors_short.weight": np.ones(3, dtype=np.float32)}, "one per rotated pair (2,)"),
    ({"rope_factors_long.weight": np.array([1.0, -1.0], dtype=np.float32),
      "rope_factors_short.weight": np.ones(2, dtype=np.float32)}, "factors are positive"),
])
def test_longrope_factor_tensors_that_do_not_fit_are_one_line(tmp_path: Path, extra: dict, named: str) -> None:
    path = _phi3_with(tmp_path / "phi3-128k.gguf", extra, original_context_length=16)
    line = one_error_line(cli("count", path))
    assert named in line and "rope_factors_" in line
