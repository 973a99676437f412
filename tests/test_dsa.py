"""DeepSeek Sparse Attention (issue #28): DeepSeek-V3.2 (`deepseek_v32`) and GLM-5 (`glm_moe_dsa`), DeepSeek-V3's
latent attention with the lightning indexer (blockcli/indexer.py) choosing each query's index_topk keys.

Every expected total is transformers 5.24's own: the causal LM built on the meta device (sum of numel over
model.parameters()) for the config class's defaults and for a random config; the torch-marked test recomputes
them. The defaults' totals are also derived by hand. The fixtures (tests/fixtures/hf/generate.py:
deepseek_v32 with index_topk 4 < the 7 tokens, deepseek_v32-wide with 8 > 7, glm_moe_dsa) hold transformers'
logits, every layer's output and a decode step, which tests/test_checkpoint.py and tests/test_gradients.py
compare; here the outputs are compared for a sequence shorter than index_topk, token by token decoding, and
the indexer's choice is shown to matter.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from blockcli import DecoderBlock, Model, load_config
from blockcli.cli import app
from blockcli.config import ConfigError, InputError, parse_config
from blockcli.count import count_parameters
from blockcli.hf import hf_to_mapping
from blockcli.shapes import model_parameter_shapes
from blockcli.trace import run_trace
from test_checkpoint import expected, relative
from test_dense_families import mapped, total

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"
runner = CliRunner()


def _sizes(d: int, f: int, layers: int, heads: int, vocab: int, positions: int) -> dict[str, int]:
    return dict(hidden_size=d, intermediate_size=f, num_hidden_layers=layers, num_attention_heads=heads,
                vocab_size=vocab, max_position_embeddings=positions)


def _by_hand(d: int, f: int, layers: int, dense: int, vocab: int, h: int, r_q: int, r_kv: int, nope: int, rope: int,
             d_v: int, experts: int, d_e: int, shared: int, h_i: int, d_i: int) -> int:
    """A DSA model, untied, without biases: per layer the latent attention, the indexer (W_Iq from the query
    latent, W_Ik, its LayerNorm's weight and bias, W_Iw), two RMSNorms; `dense` SwiGLU layers, the rest
    `experts` routed experts (their router, no buffer) and `shared` shared ones, each d_e wide."""
    attention = (d * r_q + r_q + r_q * h * (nope + rope) + d * (r_kv + rope) + r_kv + r_kv * h * (nope + d_v)
                 + h * d_v * d)
    indexer = r_q * h_i * d_i + d * d_i + 2 * d_i + d * h_i
    moe = experts * d + 3 * d * d_e * (experts + shared)
    return (layers * (attention + indexer + 2 * d) + dense * 3 * d * f + (layers - dense) * moe
            + 2 * vocab * d + d)


# DeepseekV32Config's sizes (DeepSeek-V3's: 61 layers, 3 dense) and indexer (64 heads of 128); GlmMoeDsaConfig's
# (GLM-5: 78 layers, 3 dense, 64 heads of latent attention with d_nope 192 and d_v 256, an indexer of 32 heads)
V32_SIZES = _sizes(7168, 18432, 61, 128, 129280, 163840)
GLM_SIZES = _sizes(6144, 12288, 78, 64, 154880, 202752)
V32_RANDOM = dict(hidden_size=40, num_attention_heads=5, num_key_value_heads=5, num_hidden_layers=3,
                  intermediate_size=56, moe_intermediate_size=6, n_routed_experts=6, num_experts_per_tok=2, n_group=3,
                  topk_group=2, n_shared_experts=2, routed_scaling_factor=1.3,
                  mlp_layer_types=["sparse", "dense", "sparse"], q_lora_rank=14, kv_lora_rank=10, qk_nope_head_dim=6,
                  qk_rope_head_dim=4, v_head_dim=7, index_n_heads=3, index_head_dim=6, index_topk=5,
                  attention_bias=True, tie_word_embeddings=True, vocab_size=300, max_position_embeddings=96,
                  norm_topk_prob=False)
GLM_RANDOM = dict(hidden_size=48, num_attention_heads=3, num_key_value_heads=3, num_hidden_layers=4,
                  intermediate_size=40, moe_intermediate_size=10, n_routed_experts=4, num_experts_per_tok=1, n_group=1,
                  topk_group=1, n_shared_experts=0, first_k_dense_replace=2, q_lora_rank=16, kv_lora_rank=12,
                  qk_nope_head_dim=8, qk_rope_head_dim=6, v_head_dim=9, index_n_heads=2, index_head_dim=10,
                  index_topk=3, vocab_size=200, max_position_embeddings=64, index_topk_pattern="FFFF")
CASES = {
    "deepseek_v32": (V32_SIZES, 671_877_929_216,
                     _by_hand(7168, 18432, 61, 3, 129280, 128, 1536, 512, 128, 64, 128, 256, 2048, 1, 64, 128),
                     V32_RANDOM, 44_758),
    "glm_moe_dsa": (GLM_SIZES, 743_911_199_232,
                    _by_hand(6144, 12288, 78, 3, 154880, 64, 2048, 512, 192, 64, 256, 256, 2048, 1, 32, 128),
                    GLM_RANDOM, 63_680),
}


@pytest.mark.parametrize("model_type", sorted(CASES))
def test_the_defaults_and_a_random_config_count_as_transformers(model_type: str) -> None:
    """The config class's defaults: transformers' total and the hand count; the random config: transformers'."""
    sizes, defaults_total, by_hand, fields, random_total = CASES[model_type]
    assert (total(model_type, sizes), total(model_type, fields)) == (defaults_total, random_total)
    assert by_hand == defaults_total


def test_deepseek_v32_is_deepseek_v3_with_the_indexer_in_each_of_its_61_layers() -> None:
    """DeepSeek-V3's preset total (671,026,404,352) plus 61 × the indexer's 1536·64·128 + 7168·(128 + 64) + 2·128."""
    v3 = count_parameters(load_config("deepseek-v3")).total
    assert total("deepseek_v32", V32_SIZES) - v3 == 61 * (1536 * 64 * 128 + 7168 * (128 + 64) + 2 * 128)


def test_the_indexer_fields_map_onto_block_mla() -> None:
    mla = mapped("deepseek_v32", V32_SIZES)["block"]["mla"]
    assert (mla["index_heads"], mla["index_head_dim"], mla["index_topk"], mla["index_rope_layout"]) == (
        64, 128, 2048, "half")
    glm = mapped("glm_moe_dsa", GLM_SIZES)["block"]
    assert (glm["mla"]["index_heads"], glm["mla"]["index_rope_layout"], glm["rope_layout"]) == (
        32, "interleaved", "interleaved")
    layers = mapped("deepseek_v32", V32_SIZES)["layers"]  # first_k_dense_replace 3: layers 0-2 dense
    assert layers == [{"indices": [0, 1, 2], "block": {"moe": None}}]


def test_glm5_layers_marked_shared_reuse_the_layer_befores_choice() -> None:
    """indexer_types "shared" (or the pattern's S, or index_topk_freq): no indexer weights, mla.index_shared."""
    data = {k: v for k, v in GLM_RANDOM.items() if k != "index_topk_pattern"}
    for fields in ({"indexer_types": ["full", "shared", "full", "shared"]}, {"index_topk_pattern": "FSFS"},
                   {"index_topk_freq": 2, "index_skip_topk_offset": 1}):
        layers = mapped("glm_moe_dsa", {**data, **fields})["layers"]
        assert [(e["indices"], "moe" in e["block"], e["block"].get("mla", {}).get("index_shared")) for e in layers] == [
            ([0], True, None), ([3], False, True), ([1], True, True)]  # layers 0, 1 dense (first_k_dense_replace 2)
    # 63,680 less the indexer of layers 1 and 3: 2 × (16·2·10 + 48·10 + 2·10 + 48·2), transformers' total on meta
    assert total("glm_moe_dsa", {**data, "index_topk_pattern": "FSFS"}) == 63_680 - 2 * (320 + 480 + 20 + 96) == 61_848


@pytest.mark.parametrize("fields, match", [
    ({"indexer_types": ["shared", "full", "full", "full"]}, "field 'indexer_types'.*layer 0 has no earlier layer"),
    ({"index_topk_pattern": "FSXF"}, "field 'indexer_types'"),
    ({"layer_types": ["full_attention"] * 4}, "field 'layer_types'"),
])
def test_bad_glm5_indexer_layouts_are_refused(fields: dict, match: str) -> None:
    data = {k: v for k, v in GLM_RANDOM.items() if k != "index_topk_pattern"}
    with pytest.raises(ConfigError, match=match):
        mapped("glm_moe_dsa", {**data, **fields})


@pytest.mark.parametrize("mla, match", [
    ({"index_heads": 2}, "block.mla.index_head_dim: required with index_heads"),
    ({"index_heads": 2, "index_head_dim": 8, "index_topk": 0}, "block.mla.index_topk: required"),
    ({"index_heads": 2, "index_head_dim": 2, "index_topk": 4}, "block.mla.index_head_dim: the indexer rotates"),
    ({"index_heads": 2, "index_head_dim": 8, "index_topk": 4, "index_rope_layout": "gptj"},
     "block.mla.index_rope_layout: expected half or interleaved"),
    ({"index_rope_layout": "interleaved"}, "block.mla.index_rope_layout: only with an indexer"),
    ({"q_lora_rank": 0, "index_heads": 2, "index_head_dim": 8, "index_topk": 4},
     "block.mla.index_heads: the indexer's queries come from the query latent"),
])
def test_bad_indexer_fields_name_the_field(mla: dict, match: str) -> None:
    base = {"q_lora_rank": 12, "kv_lora_rank": 8, "qk_nope_head_dim": 6, "qk_rope_head_dim": 4, "v_head_dim": 5}
    with pytest.raises(ConfigError, match=match):
        parse_config({"block": {"d_model": 32, "n_heads": 4, "d_ff": 32, "norm": "rmsnorm", "rope": True,
                                "mla": {**base, **mla}}})


# ----------------------------------------------------------------------------- the forward against transformers


def model_of(name: str, dtype: str = "float64", **mla: Any) -> Model:
    """The fixture's model, its block.mla changed by `mla` (the checkpoint's weights that it still has)."""
    folder = FIXTURES / name
    config = load_config(folder)
    if not mla:
        return Model.from_config(config, weights=folder, dtype=dtype)
    params = Model.from_config(config, weights=folder, dtype=dtype).params
    changed = replace(config, block=replace(config.block, mla=replace(config.block.mla, **mla)),
                      layer_blocks=tuple(replace(b, mla=replace(b.mla, **mla)) for b in config.layer_blocks))
    shapes = model_parameter_shapes(changed)
    return Model.from_config(changed, weights={k: v for k, v in params.items() if k in shapes}, dtype=dtype)


@pytest.mark.parametrize("name", ["deepseek_v32", "glm_moe_dsa"])
@pytest.mark.parametrize("tokens", [1, 3, 4])
def test_a_sequence_no_longer_than_index_topk_keeps_every_key_as_transformers(name: str, tokens: int) -> None:
    """index_topk 4: a pass of at most 4 tokens keeps every causal key. Its logits are transformers' logits of
    the same positions in the 7-token pass (a causal model's first positions read nothing later)."""
    want = expected(name)
    got = model_of(name)(want["input_ids"][:, :tokens])
    assert relative(got, want["logits_float64"][:, :tokens]) < 1e-9


@pytest.mark.parametrize("name", ["deepseek_v32", "deepseek_v32-wide", "glm_moe_dsa", "glm_moe_dsa-shared"])
@pytest.mark.parametrize("dtype, tol", [("float64", 1e-9), ("float32", 1e-4)])
def test_decoding_one_token_at_a_time_equals_transformers_full_pass(name: str, dtype: str, tol: float) -> None:
    """Two prompt tokens, then five steps of one token each: every step's logits are those transformers'
    7-token pass gives that position, the indexer choosing among the cached keys (its own key cache)."""
    want, model = expected(name), model_of(name, dtype)
    ids = want["input_ids"]
    caches = model.new_cache()
    steps = [model(ids[:, :2], caches=caches)] + [model.step(ids[:, t:t + 1], caches) for t in range(2, 7)]
    assert relative(np.concatenate(steps, axis=1), want[f"logits_{dtype}"]) < tol
    assert caches[0].index is not None and caches[0].index.k.shape == (2, 1, 7, 8)  # (B, 1, T_seen, d_I)


def test_the_indexers_choice_matters_for_the_fixture() -> None:
    """Keeping every key (index_topk 8 ≥ 7) moves deepseek_v32's logits far from transformers'; its -wide twin,
    whose index_topk 8 keeps every key, equals transformers with no indexer at all."""
    want = expected("deepseek_v32")
    assert relative(model_of("deepseek_v32", index_topk=8)(want["input_ids"]), want["logits_float64"]) > 1e-3
    wide = expected("deepseek_v32-wide")
    dense = model_of("deepseek_v32-wide", index_heads=0, index_head_dim=0, index_topk=0)
    assert relative(dense(wide["input_ids"]), wide["logits_float64"]) < 1e-9


def test_a_layer_reusing_the_layer_befores_choice_runs_only_within_its_model() -> None:
    """glm_moe_dsa-shared's layer 1 reuses layer 0's choice (its logits, layers and decode equal transformers':
    tests/test_checkpoint.py); alone it is a one-line error; choosing all its keys instead is far off."""
    folder, want = FIXTURES / "glm_moe_dsa-shared", expected("glm_moe_dsa-shared")
    with pytest.raises(InputError, match="reuses the previous layer's indexer choice"):
        DecoderBlock.from_config(load_config(folder), weights=folder, dtype="float64", layer=1)(want["layers_float64"][0])
    model = model_of("glm_moe_dsa-shared")
    model.blocks[1].attn.previous = None
    model.blocks[1].cfg = replace(model.blocks[1].cfg, mla=replace(model.blocks[1].cfg.mla, index_shared=False,
                                                                    index_heads=0, index_head_dim=0, index_topk=0))
    model.blocks[1].attn.cfg = model.blocks[1].cfg
    assert relative(model(want["input_ids"]), want["logits_float64"]) > 1e-3


def test_glm5_rotates_the_indexer_in_interleaved_pairs() -> None:
    want = expected("glm_moe_dsa")
    half = model_of("glm_moe_dsa", index_rope_layout="half")
    assert relative(half(want["input_ids"]), want["logits_float64"]) > 1e-3


# ----------------------------------------------------------------------------- trace and sizing


def test_trace_rows_name_the_indexers_choice() -> None:
    config = load_config(FIXTURES / "deepseek_v32")
    rows = {r.key: r for r in run_trace(config).rows}
    assert rows["blocks.0.idx_topk"].op == "indexer's top-4 keys per query"
    assert rows["blocks.0.idx_scores"].symbolic == "(B, h_I, T, T)"
    assert rows["blocks.1.masked_scores"].op == "causal mask and the indexer's top-k keys"
    # the indexer's scores: 2·B·h_I·T·T·d_I FLOPs (batch 1, 8 tokens, 8 heads of 8)
    assert rows["blocks.0.idx_scores"].matmul_flops == 2 * 1 * 8 * 8 * 8 * 8


def test_the_kv_cache_holds_the_indexers_key_beside_the_latent() -> None:
    """Per token and layer: the latent r_kv + d_rope (8 + 4) and the indexer's key d_I (8), float32, 2 layers."""
    result = runner.invoke(app, ["count", str(FIXTURES / "deepseek_v32"), "--json"])
    assert result.exit_code == 0, result.stderr
    kv = json.loads(result.stdout)["inference"]["kv_cache"]
    assert kv["bytes_per_token"] == 2 * (8 + 4 + 8) * 4
    assert kv["formula"] == "L·(r_kv + d_rope + d_I) per token"


# ----------------------------------------------------------------------------- against transformers itself


@pytest.mark.torch
@pytest.mark.parametrize("model_type", sorted(CASES))
def test_the_totals_and_sizes_here_are_transformers_own(model_type: str) -> None:
    """The config class's sizes are the ones above, transformers on the meta device counts the totals above for
    them and the random config, and blockcli reads the whole of the config class's to_dict() to the same total."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    sizes, defaults_total, _, fields, random_total = CASES[model_type]
    configs = [transformers.AutoConfig.for_model(model_type), transformers.AutoConfig.for_model(model_type, **fields)]
    assert {key: getattr(configs[0], key) for key in sizes} == sizes

    def on_meta(config: Any) -> int:
        with torch.device("meta"):
            return sum(p.numel() for p in transformers.AutoModelForCausalLM.from_config(config).parameters())

    def read_whole(config: Any) -> int:  # every default spelled out
        data = {k: v for k, v in config.to_dict().items() if k != "transformers_version"}
        return count_parameters(parse_config(hf_to_mapping(data, "x.json"))).total

    assert [on_meta(c) for c in configs] == [read_whole(c) for c in configs] == [defaults_total, random_total]


@pytest.mark.torch
def test_glm5_with_shared_indexer_layers_counts_as_transformers() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.for_model("glm_moe_dsa", **{**GLM_RANDOM, "index_topk_pattern": "FSFS"})
    assert config.indexer_types == ["full", "shared", "full", "shared"]
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    assert sum(p.numel() for p in model.parameters()) == 61_848


@pytest.mark.parametrize("name", ["deepseek_v32", "glm_moe_dsa", "glm_moe_dsa-shared"])
def test_verify_passes_with_the_indexers_mask_and_its_loop_reference(name: str) -> None:
    """Item 4 hides the keys the indexer dropped as well as the future ones; item 12's slow loop reference
    (blockcli/reference.py) chooses the keys itself, query by query. GLM-5's shared layer 1 cannot run alone:
    verify checks layer 0's kind only."""
    result = runner.invoke(app, ["verify", str(FIXTURES / name), "--json"])
    assert result.exit_code == 0, result.stdout[-2000:]
    report = json.loads(result.stdout)
    assert report["passed"] and {c["id"] for c in report["checks"] if c["status"] == "PASS"} >= {4, 12}
    assert [entry["layer"] for entry in report.get("layers", [{"layer": 0}])] == (
        [0] if name.endswith("shared") else [0, 1])


def test_verify_of_a_layer_reusing_the_layer_befores_choice_is_a_one_line_error() -> None:
    result = runner.invoke(app, ["verify", str(FIXTURES / "glm_moe_dsa-shared"), "--layer", "1"])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "blockcli: error: --layer 1: it reuses the previous layer's indexer choice (mla.index_shared), so it cannot "
        "run alone; verify another layer"]
