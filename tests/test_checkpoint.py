"""Hugging Face model folders: parity with transformers, header-only counts, bad checkpoints.

Every expected number here comes from outside blockcli: the fixtures in tests/fixtures/hf/ were
computed by transformers itself (tests/fixtures/hf/generate.py: its logits, each layer's output,
one K/V-cached decode step, and its parameter total), the Llama-2-7B total is the published
figure, and bfloat16 widening is checked on values chosen to be exact in bfloat16.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from blockcli import DecoderBlock, Model, load_config
from blockcli.config import ConfigError, InputError, RopeScaling
from blockcli.families import COMPOSITES

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"
# Every fixture folder is found here, none listed by hand: generate.py's new fixture is tested when it is written.
FOLDERS = sorted(p.name for p in FIXTURES.iterdir() if (p / "config.json").is_file())
ROPE_SCALED = [name for name in FOLDERS if name.startswith("llama-rope-")]
# Vision-language models, their language model run alone: Gemma 3 saved with transformers 4's names
# (language_model.model.*, an untied language_model.lm_head) and with transformers 5's (model.language_model.*),
# Mistral 3 (a Pixtral tower beside a windowed Mistral), the Qwen-VL models
# (and GIT, a family whose flat config sets its image side aside): every folder transformers counts a language share of
VISION_LANGUAGE = [name for name in FOLDERS
                   if json.loads((FIXTURES / name / "config.json").read_text())["model_type"] in COMPOSITES
                   or "language_model_parameters" in np.load(FIXTURES / name / "expected.npz").files]
# saved with the first tensor alone of their set-aside image side (tests/fixtures/hf/generate.py's THINNED_ASIDE)
THINNED_ASIDE = {"emu3", "phi4_multimodal"}
STORED_NARROW = ["llama-bf16", "gpt_oss-mxfp4"]  # bfloat16 and MXFP4 weights: tested on their own below
FAMILIES = [name for name in FOLDERS if name not in ROPE_SCALED + VISION_LANGUAGE + STORED_NARROW]
TOLERANCE = {"float64": 1e-9, "float32": 1e-4}  # relative to the reference's largest magnitude


def expected(name: str) -> dict[str, np.ndarray]:
    with np.load(FIXTURES / name / "expected.npz") as data:
        return {k: data[k] for k in data.files}


def relative(got: np.ndarray, want: np.ndarray) -> float:
    assert got.shape == want.shape, (got.shape, want.shape)
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "blockcli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, "COLUMNS": "200"})


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-500:], proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("blockcli: error: "), proc.stderr
    return lines[0]


# ----------------------------------------------------------------------------- parity with transformers


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", FAMILIES + ROPE_SCALED + VISION_LANGUAGE)
def test_logits_layers_and_decode_step_equal_transformers(name: str, dtype: str) -> None:
    folder, want = FIXTURES / name, expected(name)
    model = Model.from_config(load_config(folder), weights=folder, dtype=dtype)
    ids = want["input_ids"]
    tol = TOLERANCE[dtype]
    assert relative(model(ids), want[f"logits_{dtype}"]) <= tol

    # each layer pass (Dory's recurrent layers once a loop, as transformers' hooks see them)
    for i, x in enumerate(model.passes(model.embed(ids))):
        assert relative(x, want[f"layers_{dtype}"][i]) <= tol, f"layer pass {i}"

    caches = model.new_cache()
    model.step(ids[:, :-1], caches)
    assert relative(model.step(ids[:, -1:], caches), want[f"decode_logits_{dtype}"]) <= tol


@pytest.mark.parametrize("name", FAMILIES)
def test_full_score_table_path_equals_transformers(name: str) -> None:
    """The path traces and seeded bugs take (the whole table from the Ops table) agrees too."""
    folder, want = FIXTURES / name, expected(name)
    model = Model.from_config(load_config(folder), weights=folder, dtype="float64", attention="full")
    assert relative(model(want["input_ids"]), want["logits_float64"]) <= 1e-9


# GLM-5's layer 1 reuses layer 0's indexer choice: alone it is refused (tests/test_dsa.py); Gemma 4's layers read
# their per-layer inputs, which the model computes from the token ids (tests/test_gemma4.py), and so do Gemma 3n's
# (tests/test_gemma3n.py); Gemma 4 unified's fixture shares keys and values across layers
REUSES_THE_LAYER_BEFORE = ["glm_moe_dsa-shared", "gemma4_text", "gemma4", "gemma3n_text", "gemma3n",
                           "gemma4_unified_text"]


@pytest.mark.parametrize("name", [name for name in FAMILIES if name not in REUSES_THE_LAYER_BEFORE])
def test_one_layer_from_the_folder_maps_the_previous_layers_output(name: str) -> None:
    """DecoderBlock for layer 1 alone, fed transformers' layer-0 output, gives its layer-1 output."""
    folder, want = FIXTURES / name, expected(name)
    block = DecoderBlock.from_config(load_config(folder), weights=folder, dtype="float64", layer=1)
    assert relative(block(want["layers_float64"][0]), want["layers_float64"][1]) <= 1e-9
    assert f"weights of layer 1 of {load_config(folder).model.n_layers}" in block.notes  # (Dory: fewer than passes)


@pytest.mark.parametrize("name, fused_in_blocks", [("gpt_bigcode", True), ("gpt_bigcode-mha", False),
                                                    ("phi3", True), ("falcon", True), ("falcon-sequential", False),
                                                    ("falcon-new", False)])
def test_fused_qkv_rows_are_read_in_the_order_transformers_splits_them(name: str, fused_in_blocks: bool) -> None:
    """Split by hand here: Q | K | V blocks of each part's width (multi-query GPTBigCode and Falcon, Phi-3's
    GQA), or per head [q_i k_i v_i] (GPTBigCode without multi_query, Falcon's sequential fixture). Only the
    right reading gives transformers' logits, so each fixture tells the two layouts apart; Falcon's new
    decoder architecture ([q q k v] per K/V group) is neither Q | K | V blocks nor per head."""
    from safetensors.numpy import load_file

    folder, want = FIXTURES / name, expected(name)
    config = load_config(folder)
    b = config.block
    stored = load_file(folder / "model.safetensors")
    key = next(k for k in stored if k.endswith(("0.attn.c_attn.weight", "0.self_attn.qkv_proj.weight",
                                                 "0.self_attention.query_key_value.weight")))
    q, kv = b.n_heads * b.head_dim, b.n_kv_heads * b.head_dim
    for reading_in_blocks in (True, False) if kv == q else (True,):  # per head needs as many K/V heads as Q
        params = dict(Model.from_config(config, weights=folder, dtype="float64").params)
        for layer in range(config.model.n_layers):
            rows = stored[key.replace(".0.", f".{layer}.")].astype(np.float64)  # (q + 2 kv, d)
            bias = stored.get(key.replace(".0.", f".{layer}.").replace("weight", "bias"))
            if reading_in_blocks:
                parts = [rows[:q], rows[q:q + kv], rows[q + kv:]]
                biases = None if bias is None else [bias[:q], bias[q:q + kv], bias[q + kv:]]
            else:  # head i's rows: q_i, k_i, v_i, each head_dim long
                per_head = rows.reshape(b.n_heads, 3, b.head_dim, -1)
                parts = [per_head[:, j].reshape(q, -1) for j in range(3)]
                biases = None if bias is None else [bias.reshape(b.n_heads, 3, -1)[:, j].ravel() for j in range(3)]
            for j, x in enumerate("qkv"):
                params[f"blocks.{layer}.w_{x}"] = parts[j].T
                if biases is not None:
                    params[f"blocks.{layer}.b_{x}"] = biases[j].astype(np.float64)
        model = Model.from_config(config, weights=params, dtype="float64")
        gap = relative(model(want["input_ids"]), want["logits_float64"])
        assert (gap <= 1e-9) if reading_in_blocks == fused_in_blocks else (gap > 1e-3), (reading_in_blocks, gap)


def test_bfloat16_checkpoint_is_widened_exactly_and_says_so() -> None:
    folder, want = FIXTURES / "llama-bf16", expected("llama-bf16")
    model = Model.from_config(load_config(folder), weights=folder, dtype="float32")
    assert relative(model(want["input_ids"]), want["logits_float32"]) <= 1e-4
    assert any("BF16 were widened to float32" in n for n in model.notes)


def test_qwen3_vl_moe_experts_in_the_published_layout_read_by_their_shape(tmp_path: Path) -> None:
    """Qwen3-VL-MoE's published checkpoints hold the experts transposed from transformers 5's own layout,
    gate_up_proj (E, d, 2·d_e) and down_proj (E, d_e, d) (transformers' loader transposes them back): the
    fixture's experts transposed so give transformers' logits all the same."""
    from safetensors.numpy import load_file, save_file

    folder = tmp_path / "published"
    shutil.copytree(FIXTURES / "qwen3_vl_moe", folder)
    tensors = load_file(folder / "model.safetensors")
    for key in [k for k in tensors if k.endswith(("experts.gate_up_proj", "experts.down_proj"))]:
        tensors[key] = np.ascontiguousarray(tensors[key].transpose(0, 2, 1))
    save_file(tensors, folder / "model.safetensors")
    want = expected("qwen3_vl_moe")
    model = Model.from_config(load_config(folder), weights=folder, dtype="float64")
    assert relative(model(want["input_ids"]), want["logits_float64"]) <= 1e-9


def test_square_qwen3_vl_moe_experts_read_as_transformers_own_layout(tmp_path: Path) -> None:
    """When d = 2·d_e (gate_up_proj) and d = d_e (down_proj) both orientations fit the shapes; transformers' loader
    keeps a tensor already of its own shape, (E, 2·d_e, d) and (E, d, d_e), and so does blockcli: a model with
    d_e = d / 2 saved that way, whose experts were written by hand from blockcli's keys, gives the same output as
    the model built from those keys."""
    from safetensors.numpy import save_file

    config_json = json.loads((FIXTURES / "qwen3_vl_moe" / "config.json").read_text())
    config_json["text_config"]["moe_intermediate_size"] = 16  # d = 32 = 2·d_e
    folder = tmp_path / "square"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config_json))
    config = load_config(folder / "config.json")
    model = Model.from_config(config, dtype="float64")  # seeded weights under blockcli's keys
    p, E = model.params, config.layer_block(1).moe.n_experts
    tensors = {"model.language_model.embed_tokens.weight": p["wte"], "model.language_model.norm.weight": p["ln_f_gamma"],
               "lm_head.weight": p["lm_head"].T}
    for i in range(config.model.n_layers):
        base = f"model.language_model.layers.{i}."
        tensors.update({base + "input_layernorm.weight": p[f"blocks.{i}.ln1_gamma"],
                        base + "post_attention_layernorm.weight": p[f"blocks.{i}.ln2_gamma"],
                        base + "self_attn.q_norm.weight": p[f"blocks.{i}.q_norm_gamma"],
                        base + "self_attn.k_norm.weight": p[f"blocks.{i}.k_norm_gamma"]})
        tensors.update({base + f"self_attn.{x}_proj.weight": p[f"blocks.{i}.w_{x}"].T for x in "qkvo"})
        if f"blocks.{i}.router" in p:  # transformers 5's own layout: each expert an nn.Linear's (out, in)
            tensors[base + "mlp.gate.weight"] = p[f"blocks.{i}.router"].T
            tensors[base + "mlp.experts.gate_up_proj"] = np.stack([np.concatenate(
                [p[f"blocks.{i}.experts.{e}.w_gate"], p[f"blocks.{i}.experts.{e}.w_up"]], axis=1).T for e in range(E)])
            tensors[base + "mlp.experts.down_proj"] = np.stack([p[f"blocks.{i}.experts.{e}.w_down"].T for e in range(E)])
        else:
            tensors.update({base + f"mlp.{n}_proj.weight": p[f"blocks.{i}.w_{n}"].T
                            for n in ("gate", "up", "down")})
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, folder / "model.safetensors")
    ids = expected("qwen3_vl_moe")["input_ids"]
    loaded = Model.from_config(config, weights=folder, dtype="float64")
    assert np.max(np.abs(loaded(ids) - model(ids))) < 1e-12


def test_mxfp4_experts_dequantize_as_transformers_does_and_the_model_runs() -> None:
    """gpt-oss laid out as OpenAI publishes it (expert matrices as random MXFP4 _blocks/_scales pairs): the
    dequantized gate_up_proj equals the one transformers loaded, exactly, and logits, layers and a decode
    step follow; count reads the pairs as the parameters they dequantize to."""
    folder, want = FIXTURES / "gpt_oss-mxfp4", expected("gpt_oss-mxfp4")
    config = load_config(folder)
    model = Model.from_config(config, weights=folder, dtype="float32")
    assert "MXFP4 tensors were dequantized to float32 (exactly)" in model.notes
    held = np.stack([np.stack([model.params[f"blocks.0.experts.{e}.w_{j}"] for j in ("gate", "up")], axis=-1).reshape(
        config.block.d_model, -1) for e in range(config.block.moe.n_experts)])  # (E, d, 2·d_e): gate, up interleaved
    assert np.array_equal(held, want["gate_up_proj_0"])
    ids = want["input_ids"]
    assert relative(model(ids), want["logits_float32"]) <= 1e-4
    x = model.embed(ids)
    for i, block in enumerate(model.blocks):
        x = block(x)
        assert relative(x, want["layers_float32"][i]) <= 1e-4
    caches = model.new_cache()
    model.step(ids[:, :-1], caches)
    assert relative(model.step(ids[:, -1:], caches), want["decode_logits_float32"]) <= 1e-4
    data = json.loads(cli("count", folder, "--json").stdout)
    assert data["total"] == int(want["parameters"]) and data["reconciled"]["method"] == "checkpoint"
    assert data["checkpoint"]["stored_dtypes"]["MXFP4"] == sum(
        math.prod(model.params[f"blocks.{i}.experts.{e}.{w}"].shape) for i in range(2) for e in range(4)
        for w in ("w_gate", "w_up", "w_down"))


def test_mxfp4_values_follow_the_format_by_hand(tmp_path: Path) -> None:
    """One 32-value group per row, written by hand: codes 0..15 then 15..0 (low nibble first), scales 127 (×1)
    and 125 (×1/4); the E2M1 table is the OCP MX specification's."""
    from safetensors.numpy import save_file

    from blockcli.checkpoint import open_checkpoint, read_tensor

    e2m1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
    codes = list(range(16)) + list(range(15, -1, -1))  # 32 codes of one group
    packed = np.array([[codes[2 * j] | codes[2 * j + 1] << 4 for j in range(16)]] * 2, dtype=np.uint8)
    save_file({"w_blocks": packed.reshape(1, 2, 1, 16), "w_scales": np.array([[[127], [125]]], dtype=np.uint8)},
              tmp_path / "one.safetensors")
    stored = open_checkpoint(tmp_path / "one.safetensors").tensors
    assert list(stored) == ["w"] and stored["w"].shape == (1, 32, 2) and stored["w"].dtype == "MXFP4"
    values = read_tensor(stored["w"])  # (1, 32, 2): the two rows' 32 values, as columns
    assert values[0, :, 0].tolist() == [e2m1[c] for c in codes]
    assert values[0, :, 1].tolist() == [e2m1[c] / 4 for c in codes]


def test_mxfp4_scales_past_float32_are_one_line_errors(tmp_path: Path) -> None:
    from safetensors.numpy import load_file, save_file

    folder = tmp_path / "huge"
    shutil.copytree(FIXTURES / "gpt_oss-mxfp4", folder)
    tensors = load_file(folder / "model.safetensors")
    key = "model.layers.0.mlp.experts.down_proj_scales"
    tensors[key] = np.full_like(tensors[key], 255)  # 2^128: every nonzero value past float32
    save_file(tensors, folder / "model.safetensors")
    line = one_error_line(cli("trace", folder))
    assert "down_proj" in line and "past the float32 range" in line


def test_an_mxfp4_pair_of_the_wrong_shapes_is_a_one_line_error(tmp_path: Path) -> None:
    from safetensors.numpy import load_file, save_file

    folder = tmp_path / "bad"
    shutil.copytree(FIXTURES / "gpt_oss-mxfp4", folder)
    tensors = load_file(folder / "model.safetensors")
    key = "model.layers.0.mlp.experts.down_proj_scales"
    tensors[key] = tensors[key][:, :-1]
    save_file(tensors, folder / "model.safetensors")
    line = one_error_line(cli("count", folder))
    assert "down_proj_blocks" in line and "not an MXFP4 pair" in line


@pytest.mark.parametrize("name, switch_off", [
    ("mistral", {"sliding_window": 0}),  # the fixture's window (4) is shorter than its 7 tokens
    ("gemma", {"norm_unit_offset": False}),
    ("qwen3", {"qk_norm": "none"}),
    ("starcoder2", {"sliding_window": 0}),  # its window (5) is shorter than the 7 tokens
    ("olmo2", {"placement": "pre"}),
    ("gptj", {"rope_layout": "half"}),  # interleaved pairs (2i, 2i+1), 2 pairs per head
    ("gptj", {"rope": 1.0}),  # partial: 4 of each head's 8 dims
    ("phi", {"rope": 1.0}),  # partial: half of each head
    ("granite", {"attention_scale": 0.0}),  # 0.3, not 1/sqrt(8)
    ("granite", {"residual_multiplier": 1.0}),  # 0.7
    ("cohere", {"rope_layout": "half"}),  # Cohere's rotate_half pairs (2i, 2i + 1)
    ("cohere", {"norm": "rmsnorm"}),  # CohereLayerNorm centres on the mean (without a shift)
    ("stablelm", {"rope": 1.0}),  # partial: 2 of each head's 8 dims
    ("stablelm-parallel", {"rope": 1.0}),
    ("falcon-new", {"placement": "parallel_shared"}),  # its two norms, ln_attn and ln_mlp, differ
    ("phi3", {"sliding_window": 0}),  # its window (5) is shorter than the 7 tokens
    ("phi3", {"rope_scaling": None}),  # longrope, long factors past the original 6 positions
    ("deepseek_v3", {"rope_layout": "half"}),  # V3's rope_interleave: pairs (2i, 2i + 1) of the 4 RoPE dims
    ("deepseek_v3-yarn", {"rope_layout": "interleaved"}),  # rope_interleave false: rotate-half pairs
    ("deepseek_v3-yarn", {"rope_scaling": None}),  # yarn past its original 4 positions, and the softmax's mscale²
    ("deepseek_v2", {"rope_layout": "half"}),  # V2's complex rotation of pairs (2i, 2i + 1)
    *((name, {"rope_scaling": None}) for name in ROPE_SCALED),
    ("olmo", {"clip_qkv": 0.0}),  # ±0.6: most projected entries are beyond it
    ("bloom", {"alibi": False}),  # ALiBi is its only position information
    ("opt-350m", {"placement": "pre"}),  # post-LN blocks, and no final norm
    ("cohere-qk-norm", {"qk_norm": "none"}),  # Command R+'s per-head q/k LayerNorms
    ("stablelm-qk-layernorm", {"qk_norm": "none"}),  # StableLM 2 12B's per-head q/k LayerNorms (no shift)
    ("bitnet", {"sub_norms": False}),
    ("persimmon", {"qk_norm": "none"}),  # LayerNorms with biases over each head's q and k
    ("openai-gpt", {"placement": "pre"}),  # post-norm blocks, and no final norm
    ("nanochat", {"rope_layout": "half"}),  # its pairs turn by −θ
    ("minicpm3", {"rope_layout": "interleaved"}),  # rotate-half, not DeepSeek-V2's complex rotation
])
def test_the_modelled_feature_matters_for_the_fixture(name: str, switch_off: dict) -> None:
    """Without the feature the logits are far from transformers': the fixture really exercises it."""
    from blockcli.shapes import model_parameter_shapes

    folder, want = FIXTURES / name, expected(name)
    config = load_config(folder)
    changed = config.__class__(**{**config.__dict__, "block": config.block.__class__(
        **{**config.block.__dict__, **switch_off})})
    params = Model.from_config(config, weights=folder, dtype="float64").params
    kept = {k: v for k, v in params.items() if k in model_parameter_shapes(changed)}  # e.g. without q/k norms
    model = Model.from_config(changed, weights=kept, dtype="float64")
    assert relative(model(want["input_ids"]), want["logits_float64"]) > 1e-3


@pytest.mark.parametrize("block_change, model_change", [
    ({"placement": "pre"}, {}),  # sandwich: the post-attention and post-MLP norms count
    ({"attention_softcap": 0.0}, {}),  # scores capped at 2
    ({"attention_scale": 0.0}, {}),  # query_pre_attn_scalar 24, not head_dim 16
    ({"sliding_window": 0}, {}),  # layer 0's window (4) is shorter than the 7 tokens
    ({"sliding_window": 4}, {}),  # layer 1 is global
    ({}, {"logit_softcap": 0.0}),  # logits capped at 3
])
def test_gemma2_features_matter(block_change: dict, model_change: dict) -> None:
    """Each Gemma 2 feature, switched off on every layer, moves the logits far from transformers'."""
    from dataclasses import replace

    from blockcli.shapes import model_parameter_shapes

    folder, want = FIXTURES / "gemma2", expected("gemma2")
    config = load_config(folder)
    assert [config.layer_block(i).sliding_window for i in (0, 1)] == [4, 0]
    changed = replace(config, block=replace(config.block, **block_change),
                      layer_blocks=tuple(replace(b, **block_change) for b in config.layer_blocks),
                      model=replace(config.model, **model_change))
    params = Model.from_config(config, weights=folder, dtype="float64").params
    kept = {k: v for k, v in params.items() if k in model_parameter_shapes(changed)}  # e.g. without post norms
    model = Model.from_config(changed, weights=kept, dtype="float64")
    assert relative(model(want["input_ids"]), want["logits_float64"]) > 1e-3


@pytest.mark.parametrize("layer, change", [
    (None, {"qk_norm": "none"}),  # q/k RMSNorm per head
    (None, {"placement": "pre"}),  # sandwich norms
    (None, {"attention_scale": 0.0}),  # query_pre_attn_scalar 24, not head_dim 16
    (0, {"sliding_window": 0}),  # layer 0's window (4) is shorter than the 7 tokens
    (0, {"rope_theta": 1e6}),  # the sliding layer's base is rope_local_base_freq (100), not rope_theta
    (0, {"rope_scaling": RopeScaling("linear", 4.0)}),  # the sliding layer is not scaled
    (1, {"rope_scaling": None}),  # the global layer is (linear, 4)
    (1, {"rope_theta": 100.0}),  # with rope_theta 10^6
])
def test_gemma3_features_matter(layer: int | None, change: dict) -> None:
    """Each Gemma 3 feature, changed on one layer (None: every layer), moves the logits far from transformers'."""
    from dataclasses import replace

    from blockcli.shapes import model_parameter_shapes

    folder, want = FIXTURES / "gemma3_text", expected("gemma3_text")
    config = load_config(folder)
    assert [(config.layer_block(i).rope_theta, config.layer_block(i).rope_scaling) for i in (0, 1)] == \
        [(100.0, None), (1e6, RopeScaling("linear", 4.0))]
    blocks = tuple(replace(b, **change) if layer in (None, i) else b for i, b in enumerate(config.layer_blocks))
    changed = replace(config, layer_blocks=blocks)
    params = Model.from_config(config, weights=folder, dtype="float64").params
    kept = {k: v for k, v in params.items() if k in model_parameter_shapes(changed)}  # e.g. without q/k norms
    model = Model.from_config(changed, weights=kept, dtype="float64")
    assert relative(model(want["input_ids"]), want["logits_float64"]) > 1e-3


def test_deepseek_softmax_mscale_matters(monkeypatch) -> None:
    """The yarn fixture's mscale_all_dim 0.8 multiplies the scores by (0.1·0.8·ln 4 + 1)² ≈ 1.23: without it
    (the same cos/sin tables) the logits are far from transformers'."""
    from blockcli.config import BlockConfig

    folder, want = FIXTURES / "deepseek_v3-yarn", expected("deepseek_v3-yarn")
    config = load_config(folder)
    assert config.block.softmax_mscale == pytest.approx(0.1 * 0.8 * math.log(4.0) + 1.0, rel=1e-15)
    monkeypatch.setattr(BlockConfig, "softmax_mscale", property(lambda self: 1.0))
    model = Model.from_config(config, weights=folder, dtype="float64")
    assert relative(model(want["input_ids"]), want["logits_float64"]) > 1e-3


@pytest.mark.parametrize("norm", ["q_a_norm", "kv_a_norm"])
def test_deepseek_latent_norms_matter(norm: str) -> None:
    folder, want = FIXTURES / "deepseek_v3", expected("deepseek_v3")
    config = load_config(folder)
    params = dict(Model.from_config(config, weights=folder, dtype="float64").params)
    for i in range(config.model.n_layers):
        params[f"blocks.{i}.{norm}_gamma"] = params[f"blocks.{i}.{norm}_gamma"] * 0 + 1.0  # a scale of ones
    model = Model.from_config(config, weights=params, dtype="float64")
    assert relative(model(want["input_ids"]), want["logits_float64"]) > 1e-3


def test_gemma_embedding_multiplier_matters() -> None:
    folder, want = FIXTURES / "gemma", expected("gemma")
    config = load_config(folder)
    assert config.model.embedding_multiplier == math.sqrt(32)
    plain = config.__class__(**{**config.__dict__, "model": config.model.__class__(
        **{**config.model.__dict__, "embedding_multiplier": 1.0})})
    model = Model.from_config(plain, weights=folder, dtype="float64")
    assert relative(model(want["input_ids"]), want["logits_float64"]) > 1e-3


def test_bloom_embedding_norm_and_slopes_for_six_heads_matter() -> None:
    """BLOOM's fixture has 6 heads: slopes 2^-2, 2^-4, 2^-6, 2^-8 (four heads, base 2^(-8/4)), then the odd
    powers 2^-1, 2^-3 of an 8-head model's base 2^(-8/8). The naive 2^(-8i/6) gives other logits, and so does
    leaving out word_embeddings_layernorm."""
    from blockcli.mutants import find_mutant
    from blockcli.ops import alibi_slopes

    assert alibi_slopes(6).tolist() == [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3]
    folder, want = FIXTURES / "bloom", expected("bloom")
    config = load_config(folder)
    assert config.block.alibi and config.model.embedding_norm and config.block.n_heads == 6
    naive = Model.from_config(config, weights=folder, dtype="float64", ops=find_mutant("alibi-naive-slopes").ops)
    assert relative(naive(want["input_ids"]), want["logits_float64"]) > 1e-3
    plain = config.__class__(**{**config.__dict__, "model": config.model.__class__(
        **{**config.model.__dict__, "embedding_norm": False})})
    params = Model.from_config(config, weights=folder, dtype="float64").params
    model = Model.from_config(plain, weights={k: v for k, v in params.items() if not k.startswith("emb_ln")},
                              dtype="float64")
    assert relative(model(want["input_ids"]), want["logits_float64"]) > 1e-3


@pytest.mark.parametrize("name, field, value", [("granite", "embedding_multiplier", 1.3),
                                                ("granite", "logit_multiplier", 1 / 1.3),
                                                ("cohere", "logit_multiplier", 0.7),
                                                ("biogpt", "embedding_multiplier", 4.0)])
def test_model_multipliers_matter(name: str, field: str, value: float) -> None:
    """Granite's fixture has embedding_multiplier 1.3 and logits_scaling 1.3 (logits / 1.3), Cohere's
    logit_scale 0.7, BioGPT's scale_embedding √16: each counts."""
    folder, want = FIXTURES / name, expected(name)
    config = load_config(folder)
    assert getattr(config.model, field) == value
    plain = config.__class__(**{**config.__dict__, "model": config.model.__class__(
        **{**config.model.__dict__, field: 1.0})})
    model = Model.from_config(plain, weights=folder, dtype="float64")
    assert relative(model(want["input_ids"]), want["logits_float64"]) > 1e-3


@pytest.mark.parametrize("name", ["gptj", "phi"])
def test_lm_head_bias_is_loaded_and_matters(name: str) -> None:
    folder, want = FIXTURES / name, expected(name)
    model = Model.from_config(load_config(folder), weights=folder, dtype="float64")
    assert model.config.model.lm_head_bias and model.config.block.placement == "parallel_shared"
    model.params["lm_head_bias"][...] = 0.0
    assert relative(model(want["input_ids"]), want["logits_float64"]) > 1e-3


def test_gpt2_names_without_the_base_prefix_and_legacy_buffers_load(tmp_path: Path) -> None:
    """Hub GPT-2 checkpoints were saved from GPT2Model (`h.0.…`, no `transformer.`) with mask buffers."""
    from safetensors.numpy import load_file, save_file

    folder = tmp_path / "gpt2"
    folder.mkdir()
    shutil.copy(FIXTURES / "gpt2" / "config.json", folder)
    tensors = load_file(FIXTURES / "gpt2" / "model.safetensors")
    renamed = {k.removeprefix("transformer."): v for k, v in tensors.items()}
    renamed["h.0.attn.bias"] = np.tril(np.ones((1, 1, 64, 64), dtype=np.float32))
    renamed["h.1.attn.masked_bias"] = np.array(-1e4, dtype=np.float32)
    save_file(renamed, folder / "model.safetensors")
    want = expected("gpt2")
    model = Model.from_config(load_config(folder), weights=folder, dtype="float64")
    assert relative(model(want["input_ids"]), want["logits_float64"]) <= 1e-9


# ----------------------------------------------------------------------------- count DIR


@pytest.mark.parametrize("name", FAMILIES + ROPE_SCALED + ["llama-bf16"])
def test_count_dir_equals_transformers_total_and_matches_the_checkpoint(name: str) -> None:
    proc = cli("count", FIXTURES / name, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["total"] == int(expected(name)["parameters"])
    assert data["reconciled"]["method"] == "checkpoint" and data["reconciled"]["match"]
    assert data["reconciled"]["arrays"] == data["total"]
    stored = data["total"] + data["buffers"]  # DeepSeek-V3's e_score_correction_bias is stored, not a parameter
    assert data["checkpoint"]["stored_dtypes"] == {"BF16" if name.endswith("bf16") else "F32": stored}
    table = cli("count", FIXTURES / name)
    assert f"formula {data['total']:,} vs checkpoint tensors {data['total']:,}: match" in table.stdout


@pytest.mark.parametrize("name", VISION_LANGUAGE)
def test_count_of_a_vision_language_folder_is_its_language_model_and_notes_the_rest(name: str) -> None:
    proc = cli("count", FIXTURES / name, "--json")
    assert proc.returncode == 0, proc.stderr
    data, want = json.loads(proc.stdout), expected(name)
    assert data["total"] == int(want["language_model_parameters"])
    assert data["reconciled"]["method"] == "checkpoint" and data["reconciled"]["match"]
    aside = int(want["parameters"] - want["language_model_parameters"])  # transformers' vision tower + projector
    model_type = json.loads((FIXTURES / name / "config.json").read_text())["model_type"]
    if model_type in THINNED_ASIDE:  # the file holds one tensor of it: that one's size
        from safetensors.numpy import load_file
        aside = sum(t.size for n, t in load_file(FIXTURES / name / "model.safetensors").items()
                    if n.startswith(COMPOSITES[model_type].aside))
    assert any(f"({aside:,} parameters) set aside" in note for note in data["checkpoint"]["notes"])
    # stored: the parameters and the buffers (Gemma 4's layer scalars), not parameters
    stored = int(want["language_model_parameters"]) + aside
    assert data["checkpoint"]["stored_dtypes"] == {"F32": stored + data["buffers"]}
    assert "vision tower and multimodal projector are not counted" in proc.stderr


def test_a_vision_language_checkpoint_missing_a_language_tensor_names_it(tmp_path: Path) -> None:
    folder = tmp_path / "gemma3"
    shutil.copytree(FIXTURES / "gemma3", folder)
    from safetensors.numpy import load_file, save_file
    tensors = load_file(folder / "model.safetensors")
    del tensors["language_model.model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, folder / "model.safetensors")
    line = one_error_line(cli("count", folder))
    assert "missing tensor 'model.language_model.layers.1.mlp.up_proj.weight or " in line
    assert "language_model.model.layers.1.mlp.up_proj.weight" in line


@pytest.mark.parametrize("command", [("count",), ("trace", "--weights")])
def test_a_vision_language_folder_whose_text_config_is_not_an_object_names_the_field(tmp_path: Path,
                                                                                     command: tuple) -> None:
    folder = tmp_path / "gemma3"
    shutil.copytree(FIXTURES / "gemma3", folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "text_config": [1]}))
    args = (command[0], folder) if len(command) == 1 else (command[0], FIXTURES / "gemma3", command[1], folder)
    assert "field 'text_config': expected an object" in one_error_line(cli(*args))


def _with_extra_layer(tmp_path: Path, name: str) -> tuple[Path, int, int]:
    """The fixture with one more layer's tensors, as DeepSeek-V3's published checkpoints store its
    multi-token-prediction module (model.layers.61 of 61 layers); with the model's layer count and
    the parameters added."""
    from safetensors.numpy import load_file, save_file
    folder = tmp_path / name
    shutil.copytree(FIXTURES / name, folder)
    n = json.loads((folder / "config.json").read_text())["num_hidden_layers"]
    tensors = load_file(folder / "model.safetensors")
    d = tensors["model.embed_tokens.weight"].shape[1]
    extra = {f"model.layers.{n}.eh_proj.weight": np.zeros((d, 2 * d), np.float32),
             f"model.layers.{n}.enorm.weight": np.ones(d, np.float32),
             f"model.layers.{n}.self_attn.o_proj.weight": tensors["model.layers.0.self_attn.o_proj.weight"]}
    save_file(tensors | extra, folder / "model.safetensors")
    return folder, n, sum(t.size for t in extra.values())


def test_deepseek_v3_multi_token_prediction_layer_is_set_aside(tmp_path: Path) -> None:
    folder, n, added = _with_extra_layer(tmp_path, "deepseek_v3")
    data = json.loads(cli("count", folder, "--json").stdout)
    assert data["total"] == int(expected("deepseek_v3")["parameters"]) and data["reconciled"]["match"]
    assert f"3 tensors of the multi-token-prediction layers past layer {n - 1} ({added:,} parameters) set aside" \
        in "; ".join(data["checkpoint"]["notes"])


def test_an_extra_layer_of_a_family_without_one_is_unexpected(tmp_path: Path) -> None:
    folder, n, _ = _with_extra_layer(tmp_path, "deepseek_v2")
    assert f"unexpected tensor 'model.layers.{n}." in one_error_line(cli("count", folder))


def test_count_of_the_sharded_folder_names_its_shards() -> None:
    data = json.loads(cli("count", FIXTURES / "qwen2", "--json").stdout)
    assert data["checkpoint"]["files"] == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    total_bytes = sum(f.stat().st_size for f in (FIXTURES / "qwen2").glob("*.safetensors"))
    assert data["checkpoint"]["bytes_on_disk"] == total_bytes


def _write_safetensors(path: Path, tensors: dict[str, tuple[str, tuple[int, ...]]], data: bytes | None = None) -> None:
    """A safetensors file by the format's definition: u64 header length, JSON header, data. With no
    `data` the data region is a hole: the file has its real size but costs no disk."""
    itemsize = {"F32": 4, "BF16": 2, "F16": 2}
    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        size = math.prod(shape) * itemsize[dtype]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        if data is None:
            f.truncate(8 + len(raw) + offset)
        else:
            assert len(data) == offset
            f.write(data)


LLAMA_2_7B = {  # https://huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
    "num_attention_heads": 32, "num_key_value_heads": 32, "num_hidden_layers": 32, "vocab_size": 32000,
    "max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "hidden_act": "silu", "tie_word_embeddings": False,
    "torch_dtype": "float16", "rope_theta": 10000.0, "rope_scaling": None, "attention_bias": False,
    "pretraining_tp": 1, "bos_token_id": 1, "eos_token_id": 2, "initializer_range": 0.02, "use_cache": True,
    "transformers_version": "4.31.0.dev0",
}


def sparse_llama_7b(folder: Path) -> None:
    """Llama-2-7B as two real-size fp16 shards and an index, every byte of data a hole."""
    d, f, V, L = 4096, 11008, 32000, 32
    names: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (V, d)}
    for i in range(L):
        p = f"model.layers.{i}."
        names.update({p + "input_layernorm.weight": (d,), p + "post_attention_layernorm.weight": (d,)})
        names.update({p + f"self_attn.{x}_proj.weight": (d, d) for x in "qkvo"})
        names.update({p + "mlp.gate_proj.weight": (f, d), p + "mlp.up_proj.weight": (f, d),
                      p + "mlp.down_proj.weight": (d, f)})
    names.update({"model.norm.weight": (d,), "lm_head.weight": (V, d)})
    items = list(names.items())
    shards = {"model-00001-of-00002.safetensors": items[: len(items) // 2],
              "model-00002-of-00002.safetensors": items[len(items) // 2:]}
    weight_map = {}
    for shard, part in shards.items():
        _write_safetensors(folder / shard, {n: ("F16", s) for n, s in part})
        weight_map.update({n: shard for n, _ in part})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (folder / "config.json").write_text(json.dumps(LLAMA_2_7B))


def test_sparse_7b_sharded_checkpoint_counts_from_headers_alone(tmp_path: Path, monkeypatch) -> None:
    sparse_llama_7b(tmp_path)
    size = sum(f.stat().st_size for f in tmp_path.glob("*.safetensors"))
    assert size > 13_000_000_000  # real size on paper, holes on disk
    from blockcli import checkpoint, count

    def no_data(*_args, **_kwargs):
        raise AssertionError("count read tensor data")

    monkeypatch.setattr(checkpoint, "read_tensor", no_data)
    config = load_config(tmp_path)
    sizes, info = checkpoint.checkpoint_sizes(tmp_path, config)
    result = count.count_parameters(config, checkpoint=sizes, checkpoint_info=info)
    assert result.total == 6_738_415_616  # Llama-2-7B, as published
    assert result.reconciled.method == "checkpoint" and result.reconciled.match
    assert info["stored_dtypes"] == {"F16": 6_738_415_616} and info["bytes_on_disk"] == size


def test_sparse_7b_count_cli(tmp_path: Path) -> None:
    sparse_llama_7b(tmp_path)
    proc = cli("count", tmp_path, "--expect", "6,738,415,616")
    assert proc.returncode == 0, proc.stderr
    assert "vs checkpoint tensors 6,738,415,616: match" in proc.stdout
    assert "2 shards" in proc.stdout


# ----------------------------------------------------------------------------- bad checkpoints


def fixture_copy(tmp_path: Path, name: str = "llama") -> Path:
    folder = tmp_path / name
    shutil.copytree(FIXTURES / name, folder)
    (folder / "expected.npz").unlink()
    return folder


def rewrite(folder: Path, change) -> None:
    """Load the single-file checkpoint, let `change` edit the dict of arrays, save it again."""
    from safetensors.numpy import load_file, save_file

    path = folder / "model.safetensors"
    tensors = load_file(path)
    change(tensors)
    save_file(tensors, path)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


BAD_CASES = {
    "missing tensor": (lambda t: t.pop("model.layers.1.mlp.up_proj.weight"),
                       ["missing tensor 'model.layers.1.mlp.up_proj.weight'"]),
    "unexpected tensor": (lambda t: t.update({"model.layers.0.self_attn.q_norm.weight": np.ones(8, np.float32)}),
                          ["unexpected tensor 'model.layers.0.self_attn.q_norm.weight'", "model.safetensors"]),
    "shape contradicts config": (lambda t: t.update({"model.layers.0.mlp.down_proj.weight": np.ones((32, 48),
                                                                                                   np.float32)}),
                                 ["model.safetensors", "'model.layers.0.mlp.down_proj.weight'", "(32, 48)",
                                  "implies (32, 64)"]),
}


@pytest.mark.parametrize("command", ["count", "trace", "verify"])
@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_checkpoint_is_one_line_naming_file_and_tensor(tmp_path: Path, case: str, command: str) -> None:
    change, needles = BAD_CASES[case]
    folder = fixture_copy(tmp_path)
    rewrite(folder, change)
    before = snapshot(tmp_path)
    line = one_error_line(cli(command, folder, cwd=tmp_path))
    for needle in needles:
        assert needle in line
    assert snapshot(tmp_path) == before


def test_non_finite_value_is_named_when_loaded(tmp_path: Path) -> None:
    folder = fixture_copy(tmp_path)

    def poison(t):
        t["model.layers.1.self_attn.k_proj.weight"][3, 5] = np.nan

    rewrite(folder, poison)
    line = one_error_line(cli("trace", folder))
    assert "model.safetensors" in line and "'model.layers.1.self_attn.k_proj.weight' contains NaN or Inf" in line
    assert cli("count", folder).returncode == 0  # count reads headers only: the values do not matter to it


def test_index_naming_an_absent_shard(tmp_path: Path) -> None:
    folder = fixture_copy(tmp_path, "qwen2")
    (folder / "model-00002-of-00003.safetensors").unlink()
    line = one_error_line(cli("count", folder))
    assert "model.safetensors.index.json" in line and "model-00002-of-00003.safetensors" in line


def test_index_listing_a_tensor_its_shard_lacks(tmp_path: Path) -> None:
    folder = fixture_copy(tmp_path, "qwen2")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    name = next(iter(index["weight_map"]))
    index["weight_map"][name] = "model-00003-of-00003.safetensors" if not index["weight_map"][name].startswith(
        "model-00003") else "model-00001-of-00003.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    line = one_error_line(cli("count", folder))
    assert "model.safetensors.index.json" in line and f"'{name}'" in line


def test_truncated_file(tmp_path: Path) -> None:
    folder = fixture_copy(tmp_path)
    path = folder / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-100])
    line = one_error_line(cli("count", folder))
    assert str(path) in line and "not a valid safetensors file" in line


def test_header_that_lies_about_sizes(tmp_path: Path) -> None:
    folder = fixture_copy(tmp_path)
    path = folder / "model.safetensors"
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + length])
    header["model.norm.weight"]["shape"] = [64]  # twice the bytes its offsets cover
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + length:])
    line = one_error_line(cli("count", folder))
    assert str(path) in line and "not a valid safetensors file" in line


def test_garbage_file(tmp_path: Path) -> None:
    folder = fixture_copy(tmp_path)
    (folder / "model.safetensors").write_bytes(b"definitely not a checkpoint" * 10)
    assert "not a valid safetensors file" in one_error_line(cli("trace", folder))


class _Marker:
    """Unpickling this touches a file: the proof that something ran pickle.load."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


def test_pytorch_model_bin_is_refused_and_never_unpickled(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    shutil.copy(FIXTURES / "llama" / "config.json", folder)
    marker = tmp_path / "unpickled"
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps(_Marker(str(marker))))
    for command in ("count", "trace", "verify"):
        line = one_error_line(cli(command, folder))
        assert "pytorch_model.bin" in line and "convert it to safetensors" in line
    assert not marker.exists()


def test_folder_without_config_json(tmp_path: Path) -> None:
    folder = tmp_path / "weights"
    folder.mkdir()
    shutil.copy(FIXTURES / "llama" / "model.safetensors", folder)
    line = one_error_line(cli("count", folder))
    assert "needs the model's config.json" in line


def test_folder_with_only_config_json_counts_from_the_config(tmp_path: Path) -> None:
    folder = tmp_path / "config-only"
    folder.mkdir()
    shutil.copy(FIXTURES / "llama" / "config.json", folder)
    data = json.loads(cli("count", folder, "--json").stdout)
    assert data["total"] == int(expected("llama")["parameters"])
    assert data["reconciled"]["method"] != "checkpoint" and "checkpoint" not in data


def test_quantized_dtype_is_refused_on_load(tmp_path: Path) -> None:
    folder = fixture_copy(tmp_path)
    rewrite(folder, lambda t: t.update({"model.norm.weight": np.ones(32, np.int8)}))
    line = one_error_line(cli("trace", folder))
    assert "'model.norm.weight' is stored as I8" in line


# ----------------------------------------------------------------------------- safetensors of blockcli's own keys


def test_bf16_and_f16_values_are_widened_exactly(tmp_path: Path) -> None:
    """No config.json beside it: blockcli's own keys. Values exact in bfloat16 (8 significant bits)."""
    config = load_config({"block": {"d_model": 4, "n_heads": 2, "d_ff": 8, "norm": "rmsnorm", "bias": False,
                                    "activation": "relu"}})
    rng = np.random.default_rng(0)
    from blockcli.shapes import block_parameter_shapes

    shapes = block_parameter_shapes(config.block)
    values = {k: (rng.integers(-128, 128, size=s) / 64.0) for k, s in shapes.items()}  # 8 significant bits
    data, spec = b"", {}
    for k, v in values.items():
        if k.startswith("w_"):  # bfloat16: the top 16 bits of the float32
            spec[k] = ("BF16", v.shape)
            data += (v.astype("<f4").view("<u4") >> 16).astype("<u2").tobytes()
        else:
            spec[k] = ("F16", v.shape)
            data += v.astype("<f2").tobytes()
    path = tmp_path / "block.safetensors"
    _write_safetensors(path, spec, data)
    block = DecoderBlock.from_config(config, weights=path, dtype="float64")
    for k, v in values.items():
        assert np.array_equal(block.params[k], v), k


def test_layer_option_errors() -> None:
    folder = FIXTURES / "llama"
    assert "the model has layers 0..1" in one_error_line(cli("trace", folder, "--layer", "2"))
    with pytest.raises(InputError, match=r"pick one with --layer N \(0..1\)"):
        DecoderBlock.from_config(load_config(folder), weights=folder)
    with pytest.raises(InputError, match="--layer picks one block"):
        DecoderBlock.from_config(load_config(folder), layer=1)


@pytest.mark.parametrize("name", ROPE_SCALED)
def test_verify_passes_on_scaled_rope_and_says_why_the_cache_check_cannot_run(name: str) -> None:
    proc = cli("verify", FIXTURES / name, "--json")
    assert proc.returncode == 0, proc.stdout[-2000:]
    checks = {c["id"]: c for c in json.loads(proc.stdout)["checks"]}
    if name.endswith("longrope"):  # T=8 runs past its original length 6
        assert checks[11]["status"] == "SKIP" and "longrope RoPE picks its frequencies" in checks[11]["measured"]
    else:
        assert checks[11]["status"] == "PASS"


def test_converted_scaled_rope_round_trips(tmp_path: Path) -> None:
    folder = FIXTURES / "llama-rope-longrope"
    out = tmp_path / "longrope.yaml"
    assert cli("convert", folder, "--output", out).returncode == 0
    assert load_config(out).block == load_config(folder).block


def test_cli_trace_and_verify_run_the_folder_weights() -> None:
    folder = FIXTURES / "mistral"
    trace = cli("trace", folder, "--layer", "1", "--format", "json")
    assert trace.returncode == 0, trace.stderr
    notes = json.loads(trace.stdout)["notes"]
    assert any("layer 1 of 2" in n for n in notes) and any("model folder's own" in n for n in notes)
    verify = cli("verify", folder, "--json")
    assert verify.returncode == 0, verify.stderr
    assert json.loads(verify.stdout)["passed"] is True


def test_converted_yaml_with_the_folder_weights_gives_transformers_logits(tmp_path: Path) -> None:
    folder, want = FIXTURES / "gemma", expected("gemma")
    yaml_path = tmp_path / "gemma.yaml"
    proc = cli("convert", folder, "--output", yaml_path)
    assert proc.returncode == 0, proc.stderr
    from_json = cli("convert", folder / "config.json").stdout
    assert from_json.split("\n", 1)[1] == yaml_path.read_text().split("\n", 1)[1]  # all but the "Converted by" line
    model = Model.from_config(load_config(yaml_path), weights=folder, dtype="float64")
    assert relative(model(want["input_ids"]), want["logits_float64"]) <= 1e-9


def test_load_config_of_a_safetensors_file_reads_its_config_json() -> None:
    assert load_config(FIXTURES / "gemma" / "model.safetensors") == load_config(FIXTURES / "gemma")
    with pytest.raises(ConfigError):
        load_config(FIXTURES / "nope.safetensors")


def test_verify_of_one_layer_reads_only_that_layers_tensors(monkeypatch) -> None:
    """verify DIR / trace DIR --layer N read block N's tensors, not the whole model's."""
    from blockcli import checkpoint

    read: list[str] = []
    original = checkpoint.read_tensor
    monkeypatch.setattr(checkpoint, "read_tensor", lambda stored: read.append(stored.name) or original(stored))
    folder = FIXTURES / "llama"
    DecoderBlock.from_config(load_config(folder), weights=folder, layer=1)
    assert read and all(name.startswith("model.layers.1.") for name in read)


def test_index_with_a_non_string_shard_is_one_line(tmp_path: Path) -> None:
    folder = fixture_copy(tmp_path, "qwen2")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    name = next(iter(index["weight_map"]))
    index["weight_map"][name] = ["model-00001-of-00003.safetensors"]
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    line = one_error_line(cli("count", folder))
    assert f"tensor '{name}' maps to" in line


def test_allow_field_reaches_the_layer_path(tmp_path: Path) -> None:
    folder = fixture_copy(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "my_field": 1}))
    proc = cli("trace", folder, "--layer", "0", "--allow-field", "my_field")
    assert proc.returncode == 0, proc.stderr
    assert "accepted unchecked" in proc.stderr


def test_a_folder_without_weights_says_its_weights_are_seeded(tmp_path: Path) -> None:
    folder = tmp_path / "config-only"
    folder.mkdir()
    shutil.copy(FIXTURES / "llama" / "config.json", folder)
    notes = json.loads(cli("trace", folder, "--format", "json").stdout)["notes"]
    assert any("holds no weights: seeded" in n for n in notes)


def test_fused_tensor_of_the_wrong_widths_is_named(tmp_path: Path) -> None:
    """Phi-3's qkv_proj saved for MHA (3 × 16 rows) against a config with 1 K/V head (16 + 2 × 8 rows)."""
    folder = fixture_copy(tmp_path, "phi3")
    rewrite(folder, lambda t: t.update({"model.layers.0.self_attn.qkv_proj.weight": np.ones((48, 16), np.float32)}))
    line = one_error_line(cli("count", folder))
    assert "'model.layers.0.self_attn.qkv_proj.weight' has shape (48, 16)" in line and "implies (32, 16)" in line


def test_a_norm_stored_under_either_name_is_missing_under_both(tmp_path: Path) -> None:
    folder = fixture_copy(tmp_path, "falcon-new")
    rewrite(folder, lambda t: t.pop("transformer.h.1.ln_mlp.weight"))
    line = one_error_line(cli("count", folder))
    assert ("missing tensor 'transformer.h.1.post_attention_layernorm.weight or transformer.h.1.ln_mlp.weight'"
            in line)


def test_a_stored_head_that_is_not_a_copy_of_a_tied_embedding_is_refused(tmp_path: Path) -> None:
    folder = fixture_copy(tmp_path, "gemma")  # tied: save_pretrained stores no lm_head
    rewrite(folder, lambda t: t.update({"lm_head.weight": t["model.embed_tokens.weight"] + 1.0}))
    line = one_error_line(cli("trace", folder))
    assert "'lm_head.weight' differs from the token embedding" in line


def test_a_stored_head_that_is_a_copy_of_a_tied_embedding_is_accepted(tmp_path: Path) -> None:
    folder = fixture_copy(tmp_path, "gemma")
    rewrite(folder, lambda t: t.update({"lm_head.weight": t["model.embed_tokens.weight"].copy()}))
    want = expected("gemma")
    model = Model.from_config(load_config(folder), weights=folder, dtype="float64")
    assert relative(model(want["input_ids"]), want["logits_float64"]) <= 1e-9
    assert any("stored copy of the tied token embedding" in n for n in model.notes)


def test_a_fused_tensor_with_a_part_the_config_lacks_is_one_line(tmp_path: Path) -> None:
    """Phi-3's gate_up_proj holds w_gate and w_up; an ungated config has no w_gate."""
    yaml_path = tmp_path / "ungated.yaml"
    assert cli("convert", FIXTURES / "phi3", "--output", yaml_path).returncode == 0
    text = yaml_path.read_text().replace("activation: swiglu", "activation: silu")
    yaml_path.write_text(text)
    line = one_error_line(cli("trace", yaml_path, "--weights", FIXTURES / "phi3", "--layer", "0"))
    assert "gate_up_proj" in line and "has no blocks.0.w_gate" in line


def test_weights_of_another_architecture_that_fit_the_shapes_are_noted() -> None:
    """granite's block (attention and residual multipliers) with llama's tensors for one layer: same shapes."""
    folder = FIXTURES / "granite"
    block = DecoderBlock.from_config(load_config(folder), weights=FIXTURES / "llama", layer=0)
    assert any("describes another block than" in n and "attention_scale" in n for n in block.notes)
    same = DecoderBlock.from_config(load_config(FIXTURES / "llama"), weights=FIXTURES / "llama", layer=0)
    assert not any("describes another block" in n for n in same.notes)


# ----------------------------------------------------------------------------- per-head tensors (HEAD_ROW)


def test_stablelm_per_head_layernorms_are_gathered_into_one_parameter_per_projection() -> None:
    """StableLM 2 12B's qk_layernorm stores one nn.LayerNorm per head (`q_layernorm.norms.{h}.weight`, (d_h,), no
    bias): blockcli reads them as the rows of q_norm_gamma (h, d_h) and k_norm_gamma (h_kv, d_h), in head order, and
    writes them back (train --save's layout) as the same tensors."""
    from safetensors.numpy import load_file

    from blockcli.checkpoint import layout_of, load_weights, to_stored

    folder = FIXTURES / "stablelm-qk-layernorm"
    config, stored = load_config(folder), load_file(folder / "model.safetensors")
    params = load_weights(folder, config, "float32", [])
    b = config.block
    assert (b.qk_norm, b.bias.qk_norm, b.bias.norm) == ("each_head", False, True)
    assert params["blocks.1.q_norm_gamma"].shape == (b.n_heads, b.head_dim)
    assert params["blocks.1.k_norm_gamma"].shape == (b.n_kv_heads, b.head_dim)
    assert not any(k.endswith(("q_norm_beta", "k_norm_beta")) for k in params)
    for h in range(b.n_kv_heads):
        assert np.array_equal(params["blocks.1.k_norm_gamma"][h], stored[f"model.layers.1.self_attn.k_layernorm.norms.{h}.weight"])
    back = to_stored(layout_of(config, "stablelm"), params, b.n_heads)
    assert set(back) == set(stored) and all(np.array_equal(back[n], stored[n]) for n in stored)


@pytest.mark.parametrize("change, message", [
    (lambda t: t.pop("model.layers.0.self_attn.q_layernorm.norms.3.weight"),
     "missing tensor 'model.layers.0.self_attn.q_layernorm.norms.3.weight'"),
    (lambda t: t.update({"model.layers.0.self_attn.k_layernorm.norms.2.weight": np.ones(4, np.float32)}),
     "unexpected tensor 'model.layers.0.self_attn.k_layernorm.norms.2.weight'"),  # 2 K/V heads: norms 0 and 1
    (lambda t: t.update({"model.layers.1.self_attn.q_layernorm.norms.0.weight": np.ones(5, np.float32)}),
     "tensor 'model.layers.1.self_attn.q_layernorm.norms.0.weight' has shape (5,)"),
    (lambda t: t.update({"model.layers.1.self_attn.q_layernorm.norms.0.bias": np.ones(4, np.float32)}),
     "unexpected tensor 'model.layers.1.self_attn.q_layernorm.norms.0.bias'"),  # StableLmLayerNormPerHead: no bias
])
def test_stablelm_per_head_layernorms_missing_extra_or_misshapen(tmp_path: Path, change, message: str) -> None:
    folder = fixture_copy(tmp_path, "stablelm-qk-layernorm")
    rewrite(folder, change)
    for command in ("count", "trace"):
        proc = cli(command, folder)
        assert proc.returncode == 2 and message in one_error_line(proc), proc.stderr


def test_stablelm_per_head_layernorms_without_qk_layernorm_are_unexpected(tmp_path: Path) -> None:
    folder = fixture_copy(tmp_path, "stablelm-qk-layernorm")
    data = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**data, "qk_layernorm": False}))
    proc = cli("count", folder)
    assert proc.returncode == 2 and "unexpected tensor 'model.layers.0.self_attn.q_layernorm.norms.0.weight'" in \
        one_error_line(proc)


def test_a_flat_vision_language_folder_maps_its_tensors_as_its_language_models(tmp_path: Path) -> None:
    """transformers 4's Qwen2.5-VL config.json: the language model's fields at the top level, no text_config, whose
    tensor names are still qwen2_5_vl_text's (its model_type is the composite's, not a family's)."""
    folder = tmp_path / "qwen2_5_vl"
    shutil.copytree(FIXTURES / "qwen2_5_vl", folder)
    config = json.loads((folder / "config.json").read_text())
    text = config.pop("text_config")
    text.pop("model_type")
    (folder / "config.json").write_text(json.dumps({**config, **text}))
    proc = cli("count", folder, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["total"] == int(expected("qwen2_5_vl")["language_model_parameters"]) and data["reconciled"]["match"]


def test_verify_leaves_out_the_cross_attention_layers_a_text_only_pass_skips() -> None:
    whole = cli("verify", FIXTURES / "mllama")
    assert whole.returncode == 0, whole.stderr
    assert "layer 1: cross-attention, which a text-only pass skips (the identity): nothing to verify" in whole.stderr
    one = cli("verify", FIXTURES / "mllama", "--layer", "1")
    assert one.returncode == 2 and one.stdout == ""
    assert one_error_line(one).endswith("--layer 1: a cross-attention layer, which a text-only pass skips (the "
                                        "identity): nothing to verify; verify another layer")
