"""Gemma 3n (gemma3n_text, and the gemma3n composite's language model) read from config.json: parameter counts against
transformers 5.24's own totals (Gemma3nForCausalLM built on the meta device from the config, the sum of numel over
parameters()) and a hand count, for the config class's defaults and a random config; the per-layer settings its fields
give (layer kinds, K/V sharing, MLP widths and sparsities per layer, AltUp, LAuReL, per-layer embeddings); the sparse
gate's cut-off by hand; the refusals. The forward, every layer (all AltUp streams) and the decode step are held to
transformers by tests/test_checkpoint.py on the gemma3n_text fixture tests/fixtures/hf/generate.py writes (K/V sharing,
two sparse layers, three streams with stream 1 active, LAuReL, per-layer inputs, ids past the per-layer table)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from blockcli import Model
from blockcli.block import MLP
from blockcli.config import BlockConfig, ConfigError, InputError, parse_config
from blockcli.count import count_parameters
from blockcli.hf import hf_to_mapping
from blockcli.sources import load_config
from conftest import config_error_message

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"


def config_of(data: dict):
    return parse_config(hf_to_mapping(data, "x.json"))


def gemma3n_by_hand(d: int, L: int, h: int, kv: int, d_h: int, widths: list[int], V: int, *, shared: int,
                    streams: int, rank: int, ple: tuple[int, int], tied: bool = True, bias: bool = False) -> int:
    """Per layer: W_Q, W_O (h·d_h each side of d) and the q norm d_h; W_K, W_V and the k norm unless the layer reuses
    another's K/V (the last `shared`); four RMSNorms d; the gated MLP 3·d·d_ff of its own width; the per-layer input's
    gate and projection d·d_p each and its norm d; LAuReL d·r twice and its norm d; AltUp's router d·A and its norm d,
    the prediction coefficients A·A², the correction coefficients A·A and the output scale d. The model: the
    embedding V·d, the per-layer table V_p·L·d_p, its projection d·L·d_p and norm d_p, the A − 1 stream projections
    in and out (d·d each), the final norm, the head."""
    d_p, V_p = ple
    A = streams
    n = 0
    for i in range(L):
        n += 2 * d * h * d_h + (h * d_h + d if bias else 0) + d_h
        if i < L - shared:
            n += 2 * (d * kv * d_h + (kv * d_h if bias else 0)) + d_h
        n += 4 * d + 3 * d * widths[i]
        n += 2 * d * d_p + d
        n += 2 * d * rank + d
        n += d * A + d + A ** 3 + A ** 2 + d
    return n + V * d * (1 if tied else 2) + V_p * L * d_p + d * L * d_p + d_p + 2 * (A - 1) * d * d + d


RANDOM_TYPES = ["sliding_attention", "full_attention", "sliding_attention", "sliding_attention", "full_attention",
                "sliding_attention", "full_attention"]
RANDOM_WIDTHS = [40, 56, 40, 32, 40, 64, 24]
# a random config: 7 layers of two kinds, the last 3 reusing the K/V of the last sliding (3) and full (1) layer before
# them, an MLP width per layer, two sparse layers, 5 AltUp streams with stream 2 active, LAuReL of rank 7, per-layer
# inputs 6 wide over 200 tokens, biases, an untied head
RANDOM = {"model_type": "gemma3n_text", "hidden_size": 48, "intermediate_size": RANDOM_WIDTHS, "num_hidden_layers": 7,
          "num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": 12, "vocab_size": 300,
          "layer_types": RANDOM_TYPES, "num_kv_shared_layers": 3, "altup_num_inputs": 5, "altup_active_idx": 2,
          "laurel_rank": 7, "hidden_size_per_layer_input": 6, "vocab_size_per_layer_input": 200,
          "attention_bias": True, "tie_word_embeddings": False,
          "activation_sparsity_pattern": [0.9, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0]}


@pytest.mark.parametrize("data, transformers_total, by_hand", [
    # Gemma3nTextConfig(): 35 layers (every fifth full), the last 15 sharing K/V, MLPs 16,384 wide, 4 streams,
    # LAuReL of rank 64, per-layer embeddings 256 wide over 262,144 tokens, tied (the census' total)
    ({"model_type": "gemma3n_text"}, 6_835_235_568,
     gemma3n_by_hand(2048, 35, 8, 2, 256, [16_384] * 35, 262_400, shared=15, streams=4, rank=64, ple=(256, 262_144))),
    (RANDOM, 173_244,
     gemma3n_by_hand(48, 7, 6, 2, 12, RANDOM_WIDTHS, 300, shared=3, streams=5, rank=7, ple=(6, 200), tied=False,
                     bias=True)),
])
def test_gemma3n_text_counts_as_transformers(data: dict, transformers_total: int, by_hand: int) -> None:
    result = count_parameters(config_of(data))
    assert result.total == by_hand == transformers_total
    assert result.reconciled.match
    assert result.buffers == 0


def test_the_composite_counts_its_language_model() -> None:
    """The gemma3n composite's language model is its text_config's gemma3n_text (Gemma3nForCausalLM's total on the
    meta device, the census' for Gemma3nTextConfig()); the towers, timm's and the audio encoder, are set aside."""
    mapping = hf_to_mapping({"model_type": "gemma3n", "text_config": {}}, "x.json")
    assert count_parameters(parse_config(mapping)).total == 6_835_235_568
    assert "vision tower" in mapping["about"]["description"]


def layers(data: dict) -> list[BlockConfig]:
    config = config_of(data)
    return [config.layer_block(i) for i in range(config.model.n_layers)]


def test_the_random_configs_layers() -> None:
    blocks = layers(RANDOM)
    assert [b.sliding_window for b in blocks] == [0 if t == "full_attention" else 512 for t in RANDOM_TYPES]
    assert [b.rope_theta for b in blocks] == [1e6 if t == "full_attention" else 1e4 for t in RANDOM_TYPES]
    assert [b.kv_from for b in blocks] == [-1, -1, -1, -1, 1, 3, 1]
    assert [b.d_ff for b in blocks] == RANDOM_WIDTHS
    assert [b.activation_sparsity for b in blocks] == [0.9, 0.5, 0, 0, 0, 0, 0]
    assert all((b.altup, b.altup_active, b.altup_correct_scale, b.laurel_rank, b.per_layer_input) == (5, 2, True, 7, 6)
               and b.v_norm and b.qk_norm == "head" and b.attention_scale == 1.0 and b.placement == "sandwich"
               and not b.norm_unit_offset and not b.layer_scalar and (b.n_kv_heads, b.head_dim) == (2, 12)
               for b in blocks)
    model = config_of(RANDOM).model
    assert (model.per_layer_dim, model.per_layer_vocab, model.per_layer_clamp, model.logit_softcap) == (6, 200, True,
                                                                                                         30.0)


def test_the_defaults_layers() -> None:
    """Gemma3nTextConfig's __post_init__: every fifth layer full, the first 10 of 35 sparse at 0.95."""
    blocks = layers({"model_type": "gemma3n_text"})
    assert [i for i, b in enumerate(blocks) if b.sliding_window == 0] == [4, 9, 14, 19, 24, 29, 34]
    assert [b.activation_sparsity for b in blocks] == [0.95] * 10 + [0.0] * 25
    assert [b.kv_from for b in blocks][20:] == [18, 18, 18, 18, 19] * 3  # the last sliding and full layer before 20


def test_legacy_rope_fields_are_read() -> None:
    """Published configs (transformers 4.53) hold rope_theta and rope_local_base_freq at the top level."""
    blocks = layers({**RANDOM, "rope_theta": 5e5, "rope_local_base_freq": 2e3, "rope_scaling": None,
                     "altup_lr_multiplier": 1.0, "query_pre_attn_scalar": 256})
    assert [b.rope_theta for b in blocks] == [5e5 if t == "full_attention" else 2e3 for t in RANDOM_TYPES]


def test_the_sparse_gate_by_hand() -> None:
    """Gemma3nTextMLP._gaussian_topk: relu(g − (mean(g) + std(g)·Φ⁻¹(s))), the population std, Φ⁻¹(0.95) =
    1.6448536269514722 (the standard normal's 95th percentile); then gelu_tanh(·) ⊙ up, · W_down."""
    rng = np.random.default_rng(3)
    d, d_ff = 4, 6
    p = {"w_gate": rng.normal(size=(d, d_ff)), "w_up": rng.normal(size=(d, d_ff)), "w_down": rng.normal(size=(d_ff, d))}
    x = rng.normal(size=(1, 2, d))
    cfg = BlockConfig(d_model=d, n_heads=1, d_ff=d_ff, activation="gelu_tanh", gated=True, bias=False,
                      activation_sparsity=0.95)
    g = x @ p["w_gate"]
    cut = g.mean(-1, keepdims=True) + np.sqrt(((g - g.mean(-1, keepdims=True)) ** 2).mean(-1, keepdims=True)) \
        * 1.6448536269514722
    kept = np.maximum(g - cut, 0)
    gelu = 0.5 * kept * (1 + np.tanh(np.sqrt(2 / np.pi) * (kept + 0.044715 * kept ** 3)))
    np.testing.assert_allclose(MLP(cfg, p)(x), (gelu * (x @ p["w_up"])) @ p["w_down"], rtol=1e-12)
    assert (kept > 0).sum() < kept.size  # some of each row cut


@pytest.mark.parametrize("change, field", [
    ({"num_kv_shared_layers": 7}, "num_kv_shared_layers"),
    ({"num_kv_shared_layers": 6}, "num_kv_shared_layers"),  # the one full layer before the shared ones is gone
    ({"altup_active_idx": 5}, "altup_active_idx"),
    ({"intermediate_size": [40, 56]}, "intermediate_size"),
    ({"activation_sparsity_pattern": 0.5}, "activation_sparsity_pattern"),
    ({"activation_sparsity_pattern": [1.0] * 7}, "activation_sparsity_pattern"),
    ({"laurel_rank": 0}, "laurel_rank"),
    ({"hidden_size_per_layer_input": 0}, "hidden_size_per_layer_input"),
    ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "rope_scaling"),
    ({"rope_parameters": {"sliding_attention": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 2.0},
                          "full_attention": {"rope_type": "default", "rope_theta": 1e6}}},
     "rope_parameters.sliding_attention.rope_type"),
    ({"layer_types": RANDOM_TYPES[:-1] + ["chunked_attention"]}, "layer_types"),
    ({"final_logit_softcapping": None}, "final_logit_softcapping"),  # transformers' strict config refuses it too
    ({"unknown_field": 1}, "unknown_field"),
])
def test_refusals_name_the_field(tmp_path: Path, change: dict, field: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**RANDOM, **change}))
    message = config_error_message(lambda: load_config(path))
    assert f"'{field}'" in message, message


def test_a_layer_alone_and_its_gradients_are_refused_in_one_line() -> None:
    folder = FIXTURES / "gemma3n_text"
    config = load_config(folder)
    model = Model.from_config(config, weights=folder, dtype="float64")
    with pytest.raises(InputError, match="AltUp streams"):
        model.blocks[0](np.zeros((1, 3, 16)))  # one stream, not the model's three
    with pytest.raises(InputError, match="per-layer input"):
        model.blocks[0](np.zeros((3, 1, 3, 16)))  # no per-layer input: it runs only inside its model
    with pytest.raises(InputError, match="gradients through Gemma 4's and Gemma 3n's"):
        model.loss_and_grads(np.array([[1, 2, 3]]))


def test_ids_past_the_per_layer_table_read_its_row_0() -> None:
    """The fixture's per-layer table has 40 rows for 48 tokens and its ids include 42 and 43, which
    Gemma3nTextModel.get_per_layer_inputs maps to row 0 (test_checkpoint holds the logits to transformers'); without
    model.per_layer_clamp those ids are refused, as Gemma 4 refuses them."""
    folder = FIXTURES / "gemma3n_text"
    config = load_config(folder)
    with np.load(folder / "expected.npz") as want:
        ids = want["input_ids"]
    assert (ids >= 40).any() and config.model.per_layer_clamp
    unclamped = replace(config, model=replace(config.model, per_layer_clamp=False))
    with pytest.raises(InputError, match="per_layer_vocab"):
        Model.from_config(unclamped, weights=folder, dtype="float64")(ids)


@pytest.mark.parametrize("mapping, field", [
    ({"block": {"d_model": 8, "n_heads": 2, "altup": 2}}, "altup"),  # not a sandwich block
    ({"block": {"d_model": 8, "n_heads": 2, "placement": "sandwich", "altup": 2, "altup_active": 2}}, "altup_active"),
    ({"block": {"d_model": 8, "n_heads": 2, "altup_correct_scale": True}}, "altup_correct_scale"),
    ({"block": {"d_model": 8, "n_heads": 2, "laurel_rank": 2}}, "laurel_rank"),
    ({"block": {"d_model": 8, "n_heads": 2, "activation": "gelu", "activation_sparsity": 0.5}}, "activation_sparsity"),
    ({"block": {"d_model": 8, "n_heads": 2}, "model": {"n_layers": 2, "vocab_size": 10, "per_layer_clamp": True}},
     "per_layer_clamp"),
])
def test_schema_checks(mapping: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        parse_config(mapping)


@pytest.mark.parametrize("args", [("verify",), ("verify", "--grad"), ("train",)])
def test_the_cli_refuses_verify_and_gradients_in_one_line(args: tuple[str, ...]) -> None:
    """verify runs one layer against blockcli's reference, which has none of Gemma 3n's parts; gradients through them
    are not implemented: one line naming the field, exit 2."""
    done = subprocess.run([sys.executable, "-m", "blockcli", *args, str(FIXTURES / "gemma3n_text")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, (done.stdout[-400:], done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("blockcli: error: ") and "Gemma 3n" in lines[0], done.stderr
    assert "block.per_layer_input" in lines[0]  # the first of its fields blockcli names


def test_a_composite_folder_runs_its_language_model_as_transformers(tmp_path: Path) -> None:
    """transformers 5.24 cannot build Gemma3nForConditionalGeneration here (its vision tower is timm's MobileNet-v5,
    and timm is not installed: the census records the failure), so no composite fixture is generated. Its text-only
    pass is Gemma3nTextModel's on the same ids below the towers' vocab_offset (modeling_gemma3n.Gemma3nModel.forward
    embeds with language_model.embed_tokens, the per-layer inputs from the ids, the same soft cap): the gemma3n_text
    fixture's weights saved under the composite's names (model.language_model.*, a tower tensor beside them, and
    k/v projections in a layer reusing another's K/V, as Google's checkpoints store them and transformers ignores
    them) must give that fixture's transformers logits."""
    from safetensors.numpy import load_file, save_file

    folder = FIXTURES / "gemma3n_text"
    text = json.loads((folder / "config.json").read_text())
    text.pop("architectures", None)
    tensors = {("model.language_model." + k[len("model."):] if k.startswith("model.") else k): v
               for k, v in load_file(folder / "model.safetensors").items()}
    tensors["model.vision_tower.timm_model.conv_stem.weight"] = np.ones((2, 3), dtype=np.float32)
    for name in ("k_proj", "v_proj"):  # Google's checkpoints store them in the layers reusing K/V too: ignored
        tensors[f"model.language_model.layers.3.self_attn.{name}.weight"] = np.ones((16, 16), dtype=np.float32)
    save_file(tensors, tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "gemma3n", "architectures": ["Gemma3nForConditionalGeneration"], "text_config": text,
        "vision_config": {"model_type": "gemma3n_vision"}, "audio_config": {"model_type": "gemma3n_audio"},
        "audio_soft_tokens_per_image": 188, "vision_soft_tokens_per_image": 256, "boi_token_id": 255999,
        "eoi_token_id": 262144, "image_token_id": 262145, "boa_token_id": 256000, "eoa_token_id": 262272,
        "audio_token_id": 262273, "tie_word_embeddings": True}))
    config = load_config(tmp_path)
    assert "vocab_offset" in config.about.description and "vision tower" in config.about.description
    model = Model.from_config(config, weights=tmp_path, dtype="float64")
    with np.load(folder / "expected.npz") as want:
        got, ref = model(want["input_ids"]), want["logits_float64"]
    assert float(np.max(np.abs(got - ref)) / np.max(np.abs(ref))) <= 1e-9
    assert "1 tensors of the vision side under model.vision_tower.* (6 parameters) set aside" in model.notes[0]


def test_the_converted_yaml_with_the_folder_weights_gives_transformers_logits(tmp_path: Path) -> None:
    folder = FIXTURES / "gemma3n_text"
    done = subprocess.run([sys.executable, "-m", "blockcli", "convert", str(folder)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    (tmp_path / "gemma3n.yaml").write_text(done.stdout)
    model = Model.from_config(load_config(tmp_path / "gemma3n.yaml"), weights=folder, dtype="float64")
    with np.load(folder / "expected.npz") as want:
        got, ref = model(want["input_ids"]), want["logits_float64"]
    assert float(np.max(np.abs(got - ref)) / np.max(np.abs(ref))) <= 1e-9


@pytest.mark.parametrize("dtype, tolerance", [("float64", 1e-9), ("float32", 1e-4)])
def test_token_by_token_decoding_gives_transformers_full_pass_logits(dtype: str, tolerance: float) -> None:
    """Decoding one token at a time after a 2-token prompt (the AltUp streams rebuilt from each new token, the shared
    layers reading their source layer's growing cache, the per-layer inputs of each new token, the window of 4 passed
    after 4 tokens, the sparse gates' row statistics per token) gives, at every position, the logits of transformers'
    full pass (the fixture's)."""
    folder = FIXTURES / "gemma3n_text"
    with np.load(folder / "expected.npz") as data:
        ids, want = data["input_ids"], data[f"logits_{dtype}"]
    model = Model.from_config(load_config(folder), weights=folder, dtype=dtype)
    caches = model.new_cache()
    got = [model.step(ids[:, :2], caches)]
    got += [model.step(ids[:, t:t + 1], caches) for t in range(2, ids.shape[1])]
    logits = np.concatenate(got, axis=1)
    assert np.max(np.abs(logits - want)) / np.max(np.abs(want)) <= tolerance


@pytest.mark.parametrize("change", [{"activation_sparsity": 0.0}, {"altup_correct_scale": False}, {"altup_active": 0}])
def test_each_part_matters_for_the_fixture(change: dict) -> None:
    """Switched off (or the active stream moved), the fixture's logits move far past the tolerance: the fixture
    holds each part to transformers."""
    folder = FIXTURES / "gemma3n_text"
    config = load_config(folder)
    blocks = tuple(replace(config.layer_block(i), **change) for i in range(config.model.n_layers))
    changed = replace(config, block=replace(config.block, **change), layer_blocks=blocks)
    with np.load(folder / "expected.npz") as data:
        ids, want = data["input_ids"], data["logits_float64"]
    got = Model.from_config(changed, weights=folder, dtype="float64")(ids)
    assert np.max(np.abs(got - want)) / np.max(np.abs(want)) > 1e-3
