"""blockcli against transformers on random configs (issue #30): the fixed cases and the fuzz draws that
tests/fixtures/cases/generate.py wrote with transformers 5.24 — each folder's logits and one cached decode
step, in float64 (1e-9 relative) and float32 (1e-4), equal to what transformers computed from the same
config.json and weights. A new draw or case in the generator is tested here as soon as it is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from blockcli import Model, load_config
from blockcli.config import ConfigError
from test_checkpoint import TOLERANCE, one_error_line, relative

CASES = Path(__file__).resolve().parent / "fixtures" / "cases"
FOLDERS = sorted(p.name for p in CASES.iterdir() if (p / "config.json").is_file())


def expected(name: str) -> dict[str, np.ndarray]:
    return dict(np.load(CASES / name / "expected.npz"))


def run_model(name: str, dtype: str = "float64") -> tuple[Model, dict[str, np.ndarray]]:
    folder, want = CASES / name, expected(name)
    return Model.from_config(load_config(folder), weights=folder, dtype=dtype), want


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "blockcli", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200"})


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", FOLDERS)
def test_logits_and_decode_step_equal_transformers(name: str, dtype: str) -> None:
    """A folder without transformers' float32 outputs (the draws of draws.py keep float64 only, to stay small) holds
    blockcli's float32 pass to the float64 ones, at float32's tolerance."""
    model, want = run_model(name, dtype)
    ids = want["input_ids"]
    stored = dtype if f"logits_{dtype}" in want else "float64"
    assert relative(model(ids), want[f"logits_{stored}"]) <= TOLERANCE[dtype]
    caches = model.new_cache()
    model.step(ids[:, :-1], caches)
    assert relative(model.step(ids[:, -1:], caches), want[f"decode_logits_{stored}"]) <= TOLERANCE[dtype]


# ----------------------------------------------------------------------------- the fuzz covers every family

sys.path.insert(0, str(CASES))
import draws  # noqa: E402  (tests/fixtures/cases/draws.py: the fuzz draws as data, without torch)


def _drawn() -> set[str]:
    """The model types the fuzz draws: each draw's own, and a vision-language draw's language model's."""
    from blockcli.families import COMPOSITES

    drawn = set(draws.DRAWS)
    return drawn | {COMPOSITES[name].text_model_type for name in drawn if name in COMPOSITES}


# composites transformers cannot build here, so that no draw of theirs can be generated: Gemma 3n's vision tower is
# timm's MobileNet-v5 (timm is not installed beside torch; the census records Gemma3nForConditionalGeneration's
# failure); its language model is drawn as gemma3n_text, and tests/test_gemma3n.py runs a composite folder
UNBUILDABLE = {"gemma3n"}


def test_every_family_and_composite_has_a_fuzz_draw_and_its_fixture() -> None:
    """The next family added must bring its draw (one entry in tests/fixtures/cases/draws.py) and the folder that
    generate.py writes from it."""
    from blockcli.families import COMPOSITES, FAMILIES

    assert all(COMPOSITES[name].text_model_type in draws.DRAWS for name in UNBUILDABLE)
    missing = sorted((set(FAMILIES) | set(COMPOSITES)) - _drawn() - UNBUILDABLE)
    assert not missing, f"no fuzz draw in tests/fixtures/cases/draws.py for: {', '.join(missing)}"
    unwritten = sorted(f"fuzz-{name}-{n}" for name in draws.DRAWS for n in draws.draw_numbers(name)
                       if f"fuzz-{name}-{n}" not in FOLDERS)
    assert not unwritten, f"run tests/fixtures/cases/generate.py {' '.join(unwritten)}"


@pytest.mark.parametrize("name", [n for n in FOLDERS if n.startswith("fuzz-")])
def test_every_fuzz_draw_counts_the_parameters_transformers_built(name: str) -> None:
    """count's closed form on each random config: transformers' own sum of numel (a vision-language model's language
    model's share)."""
    from blockcli.count import count_parameters

    want = expected(name)
    built = want["language_model_parameters"] if "language_model_parameters" in want else want["parameters"]
    assert count_parameters(load_config(CASES / name)).total == int(built)


def test_the_draws_are_tiny_and_reach_past_the_defaults() -> None:
    """The stored configs are 2 layers over 16 tokens, and together they reach past the defaults: several
    activations, tied and untied heads, passes past max_position_embeddings."""
    acts, ties, past = set(), set(), 0
    for name in draws.DRAWS:
        for n in draws.draw_numbers(name):
            stored = json.loads((CASES / f"fuzz-{name}-{n}" / "config.json").read_text())
            text = stored.get("text_config", stored)
            layers = text.get("num_hidden_layers", text.get("n_layer", text.get("num_layers", text.get("n_layers"))))
            layers = len(text["layers_block_type"]) if "layers_block_type" in text else layers  # Nemotron-H's
            layers = layers // 2 if "mlp" in (text.get("layer_types") or ()) else layers  # Dory's: attention, mlp pairs
            assert layers == 2 and text["vocab_size"] <= draws.VOCAB + 8
            for key in ("hidden_act", "hidden_activation", "activation_function"):
                acts.add(text.get(key))
            ties.add(stored.get("tie_word_embeddings"))
            past += text.get("max_position_embeddings", 64) < 9
    assert len(acts - {None}) >= 5 and ties >= {True, False} and past >= 5


# ----------------------------------------------------------------------------- item 1: windows past max positions


@pytest.mark.parametrize("name", ["window-mistral", "window-gemma2", "window-starcoder2", "window-mixtral"])
def test_a_window_as_wide_as_max_positions_binds_on_a_longer_pass(name: str) -> None:
    cfg = load_config(CASES / name)
    window, positions = cfg.block.sliding_window, cfg.model.max_positions  # layer 0 slides in each
    assert window >= positions and expected(name)["input_ids"].shape[1] > window  # the case is what it claims
    model, want = run_model(name)
    assert relative(model(want["input_ids"]), want["logits_float64"]) <= 1e-9


def test_a_run_past_max_positions_says_so() -> None:
    proc = cli("trace", CASES / "window-mistral", "--seq", "9")
    assert proc.returncode == 0, proc.stderr
    assert "note: " in proc.stderr and "9 tokens are past the model's max_positions 4" in proc.stderr


# ----------------------------------------------------------------------------- item 2: Gemma 3's soft caps per class


def test_gemma3_causal_lm_caps_its_logits_and_never_its_scores() -> None:
    cfg = load_config(CASES / "softcap-gemma3_text")
    assert cfg.model.logit_softcap == 2.0 and not cfg.block.attention_softcap
    assert np.abs(expected("softcap-gemma3_text")["logits_float64"]).max() < 2.0  # transformers capped them
    assert any("attn_logit_softcapping 1.5 is not applied" in note and "Gemma3Attention" in note for note in cfg.notes)


def test_gemma3_vision_language_model_caps_neither() -> None:
    cfg = load_config(CASES / "softcap-gemma3")
    assert not cfg.model.logit_softcap and not cfg.block.attention_softcap
    assert np.abs(expected("softcap-gemma3")["logits_float64"]).max() > 2.0  # transformers did not cap them
    notes = " ".join(cfg.notes)
    assert "final_logit_softcapping 2.0 is not applied: Gemma3ForConditionalGeneration" in notes
    assert "attn_logit_softcapping 1.5 is not applied" in notes


@pytest.mark.parametrize("name", ["softcap-gemma3_text", "softcap-gemma3"])
def test_the_caps_transformers_skips_would_change_the_logits(name: str) -> None:
    """The cases can tell: soft-capping the scores at 1.5 (and, for the vision-language class, the logits at 2)
    moves the logits far past the tolerance."""
    from dataclasses import replace

    cfg, want = load_config(CASES / name), expected(name)
    capped = replace(cfg, block=replace(cfg.block, attention_softcap=1.5),
                     layer_blocks=tuple(replace(b, attention_softcap=1.5) for b in cfg.layer_blocks),
                     model=replace(cfg.model, logit_softcap=2.0))
    model = Model.from_config(capped, weights=CASES / name, dtype="float64")
    assert relative(model(want["input_ids"]), want["logits_float64"]) > 1e-3


# ----------------------------------------------------------------------------- item 6: what transformers refuses

_LLAMA = dict(model_type="llama", hidden_size=60, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=1,
              intermediate_size=64, vocab_size=64, max_position_embeddings=64)


@pytest.mark.parametrize("command", ["trace", "count", "verify"])
def test_an_odd_head_rotated_whole_is_refused(tmp_path: Path, command: str) -> None:
    """transformers' config refuses it ('RoPE requires an even rotary dimension, but got head_dim=15'): 60 / 4."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_LLAMA))
    line = one_error_line(cli(command, path))
    assert "head_dim=15 is odd" in line and "block.rope" in line


def test_an_odd_head_in_blockclis_schema_is_refused_and_a_rotated_even_part_is_not(tmp_path: Path) -> None:
    from blockcli.config import ConfigError, parse_config

    yaml_like = {"block": {"d_model": 30, "n_heads": 2, "rope": True}, "model": {"positions": "rope"}}
    with pytest.raises(ConfigError, match="head_dim=15 is odd"):
        parse_config(yaml_like)
    with pytest.raises(ConfigError, match="head_dim=15 is odd"):  # positions: rope turns rope on
        parse_config({"block": {"d_model": 30, "n_heads": 2}, "model": {"positions": "rope"}})
    assert parse_config({"block": {"d_model": 30, "n_heads": 2, "rope": 0.4},
                         "model": {"positions": "rope"}}).block.rope_dims == 6  # GPT-NeoX-style fraction: 6 of 15


@pytest.mark.parametrize("given, missing", [({}, "low_freq_factor"), ({"low_freq_factor": 1.0}, "high_freq_factor"),
                                            ({"high_freq_factor": 4.0}, "low_freq_factor")])
@pytest.mark.parametrize("key", ["rope_scaling", "rope_parameters"])
def test_llama3_rope_without_its_frequency_factors_is_refused(tmp_path: Path, given: dict, missing: str,
                                                               key: str) -> None:
    """transformers: "Missing required keys in `rope_parameters` for 'rope_type'='llama3'" (a KeyError)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(_LLAMA, hidden_size=64, **{key: {
        "rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "original_max_position_embeddings": 16,
        **given}})))
    assert f"field '{key}.{missing}' is missing" in one_error_line(cli("count", path))


# ----------------------------------------------------------------------------- item 5: what transformers builds


def _config_of(name: str) -> dict:
    return json.loads((CASES / name / "config.json").read_text())


@pytest.mark.parametrize("version, runs", [("5.24.0", "silu"), ("5.0.0rc1", "silu"), ("4.46.2", None), (None, None)])
def test_gemma_hidden_act_alone_is_settled_by_the_writers_version(tmp_path: Path, version: str | None,
                                                                   runs: str | None) -> None:
    """transformers 5 runs hidden_act (silu: SwiGLU), 4 ran hidden_activation (absent: tanh GELU): a config saved by
    5 (the case's, from transformers 5.24) is 5's; an older or unknown writer leaves it ambiguous, refused."""
    data = _config_of("gemma-v5-silu")
    assert data["hidden_act"] == "silu" and data.get("hidden_activation") is None
    data = {k: v for k, v in data.items() if k != "transformers_version"}
    if version is not None:
        data["transformers_version"] = version
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    if runs is None:
        assert "field 'hidden_act'" in one_error_line(cli("count", path))
    else:
        assert load_config(path).block.activation == runs and load_config(path).block.gated


def test_an_mrope_section_with_a_zero_is_plain_rope_and_a_bad_one_is_shown(tmp_path: Path) -> None:
    for name in ("mrope-zero-qwen2_5_vl", "mrope-zero-qwen3_vl"):
        assert 0 in _config_of(name)["text_config"]["rope_parameters"]["mrope_section"]
        assert load_config(CASES / name).block.rope == 1.0  # and its logits equal transformers' (above)
    data = _config_of("mrope-zero-qwen2_5_vl")
    data["text_config"]["rope_parameters"]["mrope_section"] = [2, -1, 3]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    line = one_error_line(cli("count", path))
    assert "rope_parameters.mrope_section' = [2, -1, 3]" in line and "integers >= 0" in line


def test_deepseek_v2_dense_with_the_default_top_k_null_builds_and_a_mixture_without_it_is_named() -> None:
    assert _config_of("deepseek_v2-dense-null-k")["num_experts_per_tok"] is None
    cfg = load_config(CASES / "deepseek_v2-dense-null-k")
    assert cfg.block.moe is None and not cfg.layers_differ
    assert int(expected("deepseek_v2-dense-null-k")["parameters"]) > 0


def test_deepseek_v2_mixture_without_top_k_is_refused_naming_it(tmp_path: Path) -> None:
    """transformers builds it, then its router fails (torch.topk with k None): nothing to run or size."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(_config_of("deepseek_v2-dense-null-k"), first_k_dense_replace=1)))
    line = one_error_line(cli("count", path))
    assert "field 'num_experts_per_tok' is null" in line and "router fails without it" in line


def test_glm4_moe_heads_that_do_not_divide_the_width_are_floor_wide_and_rotate_as_its_cos_table() -> None:
    """Glm4MoeAttention: head_dim = 32 // 3 = 10; int(10 · 0.5) = 5 rotary dims, inverse frequencies θ^(-2i/5) for
    i < 3, rotated over its cos table's 6 dims: blockcli's 6 of 10 with base θ^(6/5), the same frequencies."""
    cfg = load_config(CASES / "glm4_moe-floor-heads")
    assert (cfg.block.head_dim, cfg.block.rope_dims) == (10, 6)
    assert cfg.block.rope_theta == pytest.approx(10000.0 ** 1.2, rel=1e-15)
    from blockcli.count import count_parameters

    assert count_parameters(cfg).total == int(expected("glm4_moe-floor-heads")["parameters"])


# ----------------------------------------------------------------------------- item 4: the older families' switches


def test_gpt2_attention_scale_switches() -> None:
    """GPT2Attention: scores times d_h^-1/2 if scale_attn_weights (else 1), divided by layer_idx + 1 if
    scale_attn_by_inverse_layer_idx; head width 4 here."""
    def scales(name: str) -> list[float]:
        cfg = load_config(CASES / name)
        return [cfg.layer_block(i).attention_scale for i in range(cfg.model.n_layers)]

    assert scales("gpt2-unscaled") == [1.0, 1.0]
    assert scales("gpt2-inverse-layer") == [0.5, 0.25]
    assert scales("gpt2-unscaled-inverse-layer") == [1.0, 0.5]
    assert scales("gpt_bigcode-unscaled") == [1.0, 1.0]


@pytest.mark.parametrize("name", ["gpt2-unscaled", "gpt2-inverse-layer", "gpt_bigcode-unscaled"])
def test_the_default_scale_would_change_the_logits(name: str) -> None:
    from dataclasses import replace

    cfg, want = load_config(CASES / name), expected(name)
    default = replace(cfg, block=replace(cfg.block, attention_scale=0.0), layer_blocks=())
    model = Model.from_config(default, weights=CASES / name, dtype="float64")
    assert relative(model(want["input_ids"]), want["logits_float64"]) > 1e-3


@pytest.mark.parametrize("name", ["opt-no-affine", "opt-350m-no-affine"])
def test_opt_layernorms_without_elementwise_affine_have_no_parameters(name: str) -> None:
    from blockcli.count import count_parameters

    cfg = load_config(CASES / name)
    assert not cfg.block.norm_scale and not cfg.block.bias.norm
    assert count_parameters(cfg).total == int(expected(name)["parameters"])


def test_phi_qk_layernorm_is_one_layernorm_per_projection_shared_by_the_heads() -> None:
    from blockcli.count import count_parameters

    cfg = load_config(CASES / "phi-qk-layernorm")
    assert cfg.block.qk_norm == "head" and cfg.block.norm == "layernorm" and cfg.block.bias.norm
    assert count_parameters(cfg).total == int(expected("phi-qk-layernorm")["parameters"])


_ACTIVATION_KEYS = ("hidden_act", "hidden_activation", "activation_function", "activation")
# GemmaConfig replaces the legacy "gelu" of the original releases by the tanh approximation it meant
_CONFIG_RENAMES = {("gemma", "gelu"): "gelu_pytorch_tanh"}
# the Gated DeltaNet's and Kimi Delta Attention's short conv, Bamba's, Granite 4.0-H's and Falcon-H1's Mamba-2 conv,
# Mamba-2's own, Mamba's, Falcon-Mamba's and Jamba's Mamba-1 conv and MiniMax's lightning q | k | v run hidden_act too, and
# blockcli's SiLU alone: any other is refused; Aria's routed experts are SiLU-gated whatever it says, its shared ones not
_SILU_ONLY = {"aria_text", "qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "qwen3_5", "qwen3_5_moe", "bamba", "granitemoehybrid",
              "kimi_linear", "mamba", "falcon_mamba", "jamba", "falcon_h1", "minimax", "mamba2", "olmo_hybrid",
              "lara_mini"}


@pytest.mark.parametrize("name", sorted(draws.DRAWS))
def test_every_family_runs_each_activation_transformers_allows_in_its_mlp(tmp_path: Path, name: str) -> None:
    """Structure and activation are independent (issue #30, item 3): each family's MLP, gated or plain, takes any
    of transformers' activations from the key its modelling code reads — the fuzz folder's own draw is checked
    against transformers' logits above; here every other one is read as that function in the same structure."""
    from blockcli.activations import FROM_TRANSFORMERS

    data = json.loads((CASES / f"fuzz-{name}-0" / "config.json").read_text())
    text = data.get("text_config", data)
    keys = [k for k in _ACTIVATION_KEYS if isinstance(text.get(k), str)]
    gated = load_config(CASES / f"fuzz-{name}-0").block.gated
    for key in keys:
        for act in draws.GATED_ACTS:
            changed = dict(text, **{key: act})
            path = tmp_path / "config.json"
            path.write_text(json.dumps(dict(data, text_config=changed) if "text_config" in data else changed))
            if name in _SILU_ONLY and act != "silu":
                with pytest.raises(ConfigError, match=f"field '{key}' = '{act}' cannot be represented"):
                    load_config(path)
                continue
            block = load_config(path).block
            if block.activation == "clamped_swiglu":  # gpt-oss: its experts' own SwiGLU whatever hidden_act says
                continue
            runs = _CONFIG_RENAMES.get((name, act), act)
            assert block.gated == gated and block.activation == FROM_TRANSFORMERS[runs], (key, act)


def test_deepseek_v2_mlp_bias_biases_the_dense_and_shared_mlps_and_never_the_routed_experts() -> None:
    """DeepseekV2MLP (the dense layers' MLP and the shared experts) takes bias=mlp_bias, DeepseekV2Experts none: the
    count is transformers' total, and the checkpoint's biases are exactly those (its logits are checked above)."""
    from blockcli.count import count_parameters
    from blockcli.shapes import block_parameter_shapes

    name = "deepseek_v2-mlp-bias-moe"
    cfg = load_config(CASES / name)
    assert cfg.block.bias.mlp and cfg.layer_block(1).moe is not None and not cfg.layer_block(1).moe.routed_bias
    assert count_parameters(cfg).total == int(expected(name)["parameters"])
    dense, mixture = (set(block_parameter_shapes(cfg.layer_block(i))) for i in (0, 1))
    assert {"b_gate", "b_up", "b_down"} <= dense
    assert {"shared_b_gate", "shared_b_up", "shared_b_down"} <= mixture
    assert not any(k.startswith("experts.") and ".b_" in k for k in mixture)


def test_bloom_residual_post_layernorm_adds_each_branch_to_its_norms_output() -> None:
    """BloomBlock with apply_residual_connection_post_layernorm: residual = LN's output, not its input; the case's
    logits equal transformers' (above), and the ordinary pre-norm residual would move them far past tolerance."""
    from dataclasses import replace

    name = "bloom-residual-post-layernorm"
    cfg, want = load_config(CASES / name), expected(name)
    assert cfg.block.placement == "normed_residual" and load_config(CASES / "fuzz-bloom-0").block.placement in (
        "pre", "normed_residual")
    pre = replace(cfg, block=replace(cfg.block, placement="pre"))
    model = Model.from_config(pre, weights=CASES / name, dtype="float64")
    assert relative(model(want["input_ids"]), want["logits_float64"]) > 1e-3


def test_glm4_moe_without_shared_experts_reads_the_empty_module_transformers_saves(tmp_path: Path) -> None:
    """Glm4MoeMoE builds its shared expert moe_intermediate_size · n_shared_experts = 0 wide and save_pretrained
    writes its empty tensors: no parameter, so blockcli reads the folder (count = transformers' total; logits
    above); a stored tensor with elements where the config has none is still unexpected."""
    import shutil

    from blockcli.count import count_parameters
    from test_unreadable_checkpoints import header_and_data, write_header

    name = "glm4_moe-no-shared-expert"
    cfg = load_config(CASES / name)
    assert cfg.layer_block(1).moe is not None and cfg.layer_block(1).moe.d_shared == 0
    assert count_parameters(cfg).total == int(expected(name)["parameters"])
    assert cli("count", CASES / name).returncode == 0
    folder = tmp_path / "m"
    shutil.copytree(CASES / name, folder)
    header, data = header_and_data(folder / "model.safetensors")
    key = "model.layers.1.mlp.shared_experts.up_proj.weight"
    header[key] = {"dtype": "F32", "shape": [1, 16], "data_offsets": [len(data), len(data) + 64]}
    write_header(folder / "model.safetensors", header, data + b"\0" * 64)
    assert f"unexpected tensor '{key}'" in one_error_line(cli("count", folder))


def test_olmoe_clip_qkv_clamps_the_normalised_projections() -> None:
    """OlmoeAttention: q_norm(q_proj(x)), k_norm(k_proj(x)), then q, k and v clamped to ±clip_qkv (logits above);
    clamping the projections before the norms, as OLMo does, would move them past tolerance."""
    from dataclasses import replace

    name = "olmoe-clip-qkv"
    cfg, want = load_config(CASES / name), expected(name)
    assert cfg.block.clip_qkv == 0.5 and cfg.block.clip_after_qk_norm and cfg.block.qk_norm == "projection"
    early = replace(cfg, block=replace(cfg.block, clip_after_qk_norm=False))
    model = Model.from_config(early, weights=CASES / name, dtype="float64")
    assert relative(model(want["input_ids"]), want["logits_float64"]) > 1e-3


def test_qwen2_moe_with_every_layer_dense_is_a_dense_block(tmp_path: Path) -> None:
    """decoder_sparse_step 2 makes layer 0 dense and mlp_only_layers layer 1: no layer has experts, nor the shared
    expert Qwen2MoeSparseMoeBlock holds (a fuzz draw, seed fuzz-qwen2_moe-1, found it crashing on KeyError)."""
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "qwen2_moe", "hidden_size": 8, "num_attention_heads": 2, "num_key_value_heads": 1,
        "num_hidden_layers": 2, "intermediate_size": 8, "vocab_size": 16, "num_experts": 3, "num_experts_per_tok": 1,
        "moe_intermediate_size": 4, "shared_expert_intermediate_size": 8, "decoder_sparse_step": 2,
        "mlp_only_layers": [1], "max_position_embeddings": 64}))
    cfg = load_config(tmp_path)
    assert all(cfg.layer_block(i).moe is None for i in range(2)) and cfg.block.d_ff == 8


def test_the_narrowed_draws_stay_inside_what_transformers_builds_and_runs() -> None:
    """Three draws are narrowed where transformers 5.24 cannot build or run what they drew, so that every seed (a
    second draw, or a later one) is a fixture: InternLM3Config refuses qkv_bias ≠ bias; FalconDecoderLayer with
    new_decoder_architecture and parallel_attn false builds input_layernorm but runs ln_attn; MixtralConfig's null
    head_dim fails yarn's initialisation. And StableLM's draw sets qk_layernorm at random, its second draw on."""
    import random
    from collections import defaultdict

    bases: dict = defaultdict(dict)  # the draws' fields alone, without the parity fixtures' bases (and torch)
    seeds = range(60)
    internlm3 = [draws.DRAWS["internlm3"](random.Random(f"fuzz-internlm3-{n}"), bases) for n in seeds]
    assert all(d["qkv_bias"] == d["bias"] for d in internlm3) and {d["bias"] for d in internlm3} == {True, False}
    falcon = [draws.DRAWS["falcon"](random.Random(f"fuzz-falcon-{n}"), bases) for n in seeds]
    assert all(d["parallel_attn"] for d in falcon if d["new_decoder_architecture"])
    assert {d["parallel_attn"] for d in falcon if not d["new_decoder_architecture"]} == {True, False}
    mixtral = [draws.DRAWS["mixtral"](random.Random(f"fuzz-mixtral-{n}"), bases) for n in seeds]
    assert all(d["head_dim"] * d["num_attention_heads"] == d["hidden_size"] for d in mixtral)
    assert any(d["rope_parameters"]["rope_type"] == "yarn" for d in mixtral)
    stablelm = [json.loads((CASES / f"fuzz-stablelm-{n}" / "config.json").read_text()) for n in (0, 1)]
    assert [d["qk_layernorm"] for d in stablelm] == [False, True] and stablelm[1]["num_attention_heads"] == 2
